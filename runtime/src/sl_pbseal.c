/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_pbseal.c — personal fields sealed inside a protobuf message (see
 * sl_pbseal.h).
 *
 * Sealing works on two shallow copies of the message's struct: the outer
 * one gives its personal fields to the inner one (sl_pbfield_move), each
 * is packed, and neither is freed beyond its struct, so the caller's
 * message and everything it points to stay as they were. Opening moves
 * the fields of the unpacked inner message into the caller's, which then
 * owns them, and frees the rest of the inner one.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_pbseal.h"

#include <openssl/crypto.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sl_err.h"
#include "sluice/sl_pbfield.h"

/* m's bytes field "sealed", or NULL when its type has none; the last few
 * types' answers kept per thread (a lookup by name is a binary search of
 * string compares, and each message asks several times: bench/cost) */
#define SEALED_CACHE 4
static const ProtobufCFieldDescriptor *sealed_field(const ProtobufCMessageDescriptor *d) {
  static _Thread_local struct {
    const ProtobufCMessageDescriptor *d;
    const ProtobufCFieldDescriptor *f;
  } cache[SEALED_CACHE];
  static _Thread_local unsigned next;
  for (unsigned i = 0; i < SEALED_CACHE; i++)
    if (cache[i].d == d) return cache[i].f;
  const ProtobufCFieldDescriptor *f =
      protobuf_c_message_descriptor_get_field_by_name(d, SL_PBSEAL_FIELD);
  if (f && !(f->type == PROTOBUF_C_TYPE_BYTES && f->label != PROTOBUF_C_LABEL_REPEATED &&
             !(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)))
    f = NULL;
  cache[next % SEALED_CACHE].d = d;
  cache[next % SEALED_CACHE].f = f;
  next++;
  return f;
}

/* Small messages are sealed in buffers on the stack, not malloc'd ones. */
#define STACK_MSG 512    /* a message's struct (sizeof_message) */
#define STACK_BYTES 2048 /* its personal fields packed, and sealed */

static ProtobufCBinaryData *bytes_of(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
  return (ProtobufCBinaryData *)((char *)m + f->offset);
}

static int pack_plain(const ProtobufCMessage *m, uint8_t **out, size_t *outlen) {
  size_t n = protobuf_c_message_get_packed_size(m);
  *out = malloc(n ? n : 1);
  if (!*out) return SL_ENOMEM;
  *outlen = protobuf_c_message_pack(m, *out);
  return 0;
}

static const ProtobufCFieldDescriptor *resolved_of(const ProtobufCMessageDescriptor *d,
                                                   const char *const *fields, size_t i);

/* Moves the named fields of outer into inner: 1 when one was set, 0 when
 * none was, or SL_EINVAL. */
static int split(ProtobufCMessage *outer, ProtobufCMessage *inner,
                 const ProtobufCFieldDescriptor *sf, const char *const *fields, size_t n) {
  int any = 0;
  for (size_t i = 0; i < n; i++) {
    const ProtobufCFieldDescriptor *f = resolved_of(outer->descriptor, fields, i);
    if (!f) f = protobuf_c_message_descriptor_get_field_by_name(outer->descriptor, fields[i]);
    if (!f || f == sf || (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)) return SL_EINVAL;
    if (!sl_pbfield_is_set(outer, f)) continue;
    sl_pbfield_move(inner, outer, f);
    any = 1;
  }
  return any;
}

/* Packs inner, seals it into *sealed: sbuf (scap bytes) when it fits,
 * else malloc'd (the caller frees *sealed when it is not sbuf). */
static int seal_inner(const ProtobufCMessage *inner, const uint8_t *key, const void *aad,
                      size_t aadlen, uint8_t *sbuf, size_t scap, uint8_t **sealed, size_t *slen) {
  size_t ilen = protobuf_c_message_get_packed_size(inner);
  if (ilen > SL_SEAL_MAX) return SL_ETOOBIG;
  uint8_t pbuf[STACK_BYTES];
  uint8_t *plain = ilen <= sizeof pbuf ? pbuf : malloc(ilen ? ilen : 1);
  *sealed = ilen + SL_SEAL_OVERHEAD <= scap ? sbuf : malloc(ilen + SL_SEAL_OVERHEAD);
  int rc = plain && *sealed ? 0 : SL_ENOMEM;
  if (rc == 0) {
    protobuf_c_message_pack(inner, plain);
    rc = sl_seal(key, aad, aadlen, plain, ilen, *sealed, ilen + SL_SEAL_OVERHEAD, slen);
  }
  if (plain) OPENSSL_cleanse(plain, ilen);
  if (plain != pbuf) free(plain);
  if (rc) {
    if (*sealed != sbuf) free(*sealed);
    *sealed = NULL;
  }
  return rc;
}

int sl_pbseal_pack(const ProtobufCMessage *m, const char *const *fields, size_t n,
                   const uint8_t *key, const void *aad, size_t aadlen, uint8_t **out,
                   size_t *outlen) {
  if (!m || !out || !outlen || (n && !fields)) return SL_EINVAL;
  *out = NULL;
  *outlen = 0;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  const ProtobufCFieldDescriptor *sf = sealed_field(d);
  if (!sf || sl_pbseal_sealed(m)) return SL_EINVAL;
  if (!key) return pack_plain(m, out, outlen);
  _Alignas(max_align_t) unsigned char obuf[STACK_MSG], ibuf[STACK_MSG];
  int on_stack = d->sizeof_message <= STACK_MSG;
  ProtobufCMessage *outer = on_stack ? (ProtobufCMessage *)obuf : malloc(d->sizeof_message),
                   *inner = on_stack ? (ProtobufCMessage *)ibuf : malloc(d->sizeof_message);
  uint8_t sbuf[STACK_BYTES + SL_SEAL_OVERHEAD], *sealed = NULL;
  int rc = outer && inner ? 0 : SL_ENOMEM;
  if (rc == 0) {
    memcpy(outer, m, d->sizeof_message);
    d->message_init(inner);
    rc = split(outer, inner, sf, fields, n);
  }
  if (rc == 0) { /* nothing personal in it */
    rc = pack_plain(m, out, outlen);
  } else if (rc == 1) {
    size_t slen = 0;
    rc = seal_inner(inner, key, aad, aadlen, sbuf, sizeof sbuf, &sealed, &slen);
    if (rc == 0) {
      *bytes_of(outer, sf) = (ProtobufCBinaryData){slen, sealed};
      if (sf->label == PROTOBUF_C_LABEL_OPTIONAL && sf->quantifier_offset)
        *(protobuf_c_boolean *)((char *)outer + sf->quantifier_offset) = 1;
      rc = pack_plain(outer, out, outlen);
    }
  }
  if (sealed != sbuf) free(sealed);
  if (!on_stack) { /* shallow copies: what they point to is m's */
    free(outer);
    free(inner);
  }
  return rc;
}

int sl_pbseal_sealed(const ProtobufCMessage *m) {
  const ProtobufCFieldDescriptor *sf = m ? sealed_field(m->descriptor) : NULL;
  return sf && bytes_of((ProtobufCMessage *)m, sf)->len > 0;
}

/* Checks that no field set in inner is set in m too; then moves them. */
static int merge(ProtobufCMessage *m, ProtobufCMessage *inner, const ProtobufCFieldDescriptor *sf) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    if (f == sf || !sl_pbfield_is_set(inner, f)) continue;
    if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) || sl_pbfield_is_set(m, f)) return SL_EPARSE;
  }
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    if (f != sf && sl_pbfield_is_set(inner, f)) sl_pbfield_move(m, inner, f);
  }
  return 0;
}

int sl_pbseal_open(ProtobufCMessage *m, const uint8_t *key, const void *aad, size_t aadlen,
                   ProtobufCAllocator *a) {
  const ProtobufCFieldDescriptor *sf = m ? sealed_field(m->descriptor) : NULL;
  if (!sf || !key) return SL_EINVAL;
  ProtobufCBinaryData *bd = bytes_of(m, sf);
  if (bd->len == 0) return 0;
  if (bd->len < SL_SEAL_OVERHEAD) return SL_EPARSE;
  size_t cap = bd->len - SL_SEAL_OVERHEAD, plen = 0;
  uint8_t pbuf[STACK_BYTES];
  uint8_t *plain = cap <= sizeof pbuf ? pbuf : malloc(cap ? cap : 1);
  if (!plain) return SL_ENOMEM;
  int rc = sl_seal_open(key, aad, aadlen, bd->data, bd->len, plain, cap, &plen);
  ProtobufCMessage *inner = NULL;
  if (rc == 0) {
    inner = protobuf_c_message_unpack(m->descriptor, a, plen, plain);
    rc = inner && !sl_pbseal_sealed(inner) ? merge(m, inner, sf) : SL_EPARSE;
  }
  OPENSSL_cleanse(plain, plen);
  if (plain != pbuf) free(plain);
  if (inner) protobuf_c_message_free_unpacked(inner, a);
  if (rc) return rc;
  if (a)
    a->free(a->allocator_data, bd->data);
  else
    free(bd->data);
  *bd = (ProtobufCBinaryData){0, NULL};
  return 0;
}

static const sl_pbseal_type *personal;
static size_t npersonal;
/* the personal fields' descriptors, found once by name at set-up */
#define RESOLVED_TYPES 16
#define RESOLVED_FIELDS 16
static const ProtobufCFieldDescriptor *resolved[RESOLVED_TYPES][RESOLVED_FIELDS];

void sl_pbseal_set_personal(const sl_pbseal_type *types, size_t n) {
  personal = types;
  npersonal = types ? n : 0;
  memset(resolved, 0, sizeof resolved);
  for (size_t t = 0; t < npersonal && t < RESOLVED_TYPES; t++)
    for (size_t i = 0; i < personal[t].n && i < RESOLVED_FIELDS; i++)
      resolved[t][i] =
          protobuf_c_message_descriptor_get_field_by_name(personal[t].d, personal[t].fields[i]);
}

/* field i of a personal list as resolved at set-up; NULL: look it up */
static const ProtobufCFieldDescriptor *resolved_of(const ProtobufCMessageDescriptor *d,
                                                   const char *const *fields, size_t i) {
  if (i >= RESOLVED_FIELDS) return NULL;
  for (size_t t = 0; t < npersonal && t < RESOLVED_TYPES; t++)
    if (personal[t].d == d && personal[t].fields == fields) return resolved[t][i];
  return NULL;
}

int sl_pbseal_personal(const ProtobufCMessageDescriptor *d, const char *const **fields, size_t *n) {
  for (size_t i = 0; d && i < npersonal; i++)
    if (personal[i].d == d) {
      *fields = personal[i].fields;
      *n = personal[i].n;
      return 1;
    }
  return 0;
}
