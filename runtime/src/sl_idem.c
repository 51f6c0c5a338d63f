/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_idem.c — idempotency store records and keys (see sl_idem.h).
 *
 * A key's bucket tag (sl_rkey.h) goes right after "sl:<kind>:", before any
 * part a user or an operator chose (stage, group, message key), so that it
 * is the key's first '{' and so its hash tag whatever those contain.
 */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "sluice/sl_idem.h"
#include "sluice/sl_err.h"
#include "sluice/sl_rkey.h"
#include "sluice.pb-c.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* appends s (at most max bytes) at *at, if it fits before end */
static int put(char **at, const char *end, const char *s, size_t max) {
  size_t n = strnlen(s, max);
  if ((size_t)(end - *at) <= n) return SL_ETOOBIG;
  memcpy(*at, s, n);
  *at += n;
  return 0;
}

/* the tag to use: the caller's, or (NULL) the one of key's submission */
static const char *tag_for(const char *tag, const char *key) {
  if (tag) return tag;
  return sl_rkey_bucketed() ? sl_rkey_tag(sl_rkey_bucket_of_key(key ? key : "")) : "";
}

/* "sl:<kind>:<tag><stage>:<key>:<digest, 32 at most>", built by hand: the
 * runtime makes a few per message, and snprintf was ~3% of a stage's CPU */
static int key_of(char *buf, size_t len, const char *kind, const char *tag, const char *stage,
                  const char *key, const char *digest) {
  if (!buf || !len) return SL_ETOOBIG;
  char *at = buf;
  const char *end = buf + len; /* room for the NUL is kept by put() */
  int rc = put(&at, end, "sl:", 3);
  if (!rc) rc = put(&at, end, kind, SIZE_MAX);
  if (!rc) rc = put(&at, end, ":", 1);
  if (!rc) rc = put(&at, end, tag_for(tag, key), SL_RKEY_TAG_MAX);
  if (!rc) rc = put(&at, end, stage, SIZE_MAX);
  if (!rc) rc = put(&at, end, ":", 1);
  if (!rc) rc = put(&at, end, key, SIZE_MAX);
  if (!rc) rc = put(&at, end, ":", 1);
  if (!rc) rc = put(&at, end, digest, 32);
  *(rc ? buf : at) = '\0';
  return rc;
}

int sl_idem_key(char *buf, size_t len, const char *tag, const char *stage, const char *key,
                const char *digest) {
  return key_of(buf, len, "idem", tag, stage, key, digest);
}

int sl_idem_claim_key(char *buf, size_t len, const char *tag, const char *stage, const char *key,
                      const char *digest) {
  return key_of(buf, len, "claim", tag, stage, key, digest);
}

int sl_idem_hop_key(char *buf, size_t len, const char *tag, const char *stage, const char *key,
                    const char *digest) {
  return key_of(buf, len, "hop", tag, stage, key, digest);
}

/* the decimal digits of v (may be negative) at *at, if they fit before end */
static int put_int(char **at, const char *end, int64_t v) {
  char d[24];
  int n = 0;
  uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  do {
    d[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) d[n++] = '-';
  if (end - *at <= n) return SL_ETOOBIG;
  while (n) *(*at)++ = d[--n];
  return 0;
}

int sl_idem_starts_key(char *buf, size_t len, const char *tag, const char *group, const char *topic,
                       int32_t partition, int64_t offset) {
  if (!buf || !len) return SL_ETOOBIG;
  char *at = buf;
  const char *end = buf + len;
  int rc = put(&at, end, "sl:starts:", 10);
  if (!rc) rc = put(&at, end, tag ? tag : "", SL_RKEY_TAG_MAX);
  if (!rc) rc = put(&at, end, group, SIZE_MAX);
  if (!rc) rc = put(&at, end, ":", 1);
  if (!rc) rc = put(&at, end, topic, SIZE_MAX);
  if (!rc) rc = put(&at, end, ":", 1);
  if (!rc) rc = put_int(&at, end, partition);
  if (!rc) rc = put(&at, end, ":", 1);
  if (!rc) rc = put_int(&at, end, offset);
  *(rc ? buf : at) = '\0';
  return rc;
}

int sl_idem_pack(const sl_outbox *ob, int64_t stored_at_ms, uint8_t **out, size_t *len) {
  Sluice__V1__StoredOutputs so = SLUICE__V1__STORED_OUTPUTS__INIT;
  Sluice__V1__StoredOutputs__Output outs[SL_OUTBOX_MAX], *op[SL_OUTBOX_MAX];
  size_t n = ob->n <= SL_OUTBOX_MAX ? ob->n : SL_OUTBOX_MAX;
  for (size_t i = 0; i < n; i++) {
    sluice__v1__stored_outputs__output__init(&outs[i]);
    outs[i].topic = (char *)ob->items[i].topic;
    outs[i].key = (char *)ob->items[i].key;
    outs[i].value.data = ob->items[i].value;
    outs[i].value.len = ob->items[i].len;
    op[i] = &outs[i];
  }
  so.outputs = op;
  so.n_outputs = n;
  so.stored_at_ms = stored_at_ms;
  size_t sz = sluice__v1__stored_outputs__get_packed_size(&so);
  uint8_t *buf = malloc(sz ? sz : 1);
  if (!buf) return SL_ENOMEM;
  sluice__v1__stored_outputs__pack(&so, buf);
  *out = buf;
  *len = sz;
  return 0;
}

int sl_idem_unpack(const void *v, size_t n, sl_outbox *ob) {
  Sluice__V1__StoredOutputs *so = sluice__v1__stored_outputs__unpack(NULL, n, v);
  if (!so) return SL_EPARSE;
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < so->n_outputs; i++)
    rc = sl_outbox_add(ob, so->outputs[i]->topic, so->outputs[i]->key, so->outputs[i]->value.data,
                       so->outputs[i]->value.len);
  sluice__v1__stored_outputs__free_unpacked(so, NULL);
  if (rc) sl_outbox_clear(ob);
  return rc;
}
