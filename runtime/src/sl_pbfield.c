/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_pbfield.c — protobuf fields by path (see sl_pbfield.h).
 *
 * A path is walked segment by segment over the message descriptors
 * (protobuf_c_message_descriptor_get_field_by_name). Each step either
 * enters a sub-message, or indexes a repeated field with the next (numeric)
 * segment. Values are read and written at the field's offset, as
 * protobuf-c lays a message out: a repeated field is a count at
 * quantifier_offset and an array at offset; a proto2/proto3-optional scalar
 * has its has_ flag at quantifier_offset.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_pbfield.h"
#include "sluice/sl_err.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEG_MAX 64

/* the next segment of *p into seg; 0 at the end of the path */
static int next_seg(const char **p, char seg[SEG_MAX]) {
  const char *s = *p;
  if (!*s) return 0;
  const char *dot = strchr(s, '.');
  size_t n = dot ? (size_t)(dot - s) : strlen(s);
  if (n == 0 || n >= SEG_MAX) return -1;
  memcpy(seg, s, n);
  seg[n] = '\0';
  *p = dot ? dot + 1 : s + n;
  return 1;
}

static int is_index(const char *seg, size_t *out) {
  if (!*seg) return 0;
  size_t v = 0;
  for (const char *c = seg; *c; c++) {
    if (*c < '0' || *c > '9' || v > 100000000) return 0;
    v = v * 10 + (size_t)(*c - '0');
  }
  *out = v;
  return 1;
}

static sl_pbfield_kind kind_of(const ProtobufCFieldDescriptor *f) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_STRING:
    return SL_PBF_STRING;
  case PROTOBUF_C_TYPE_BYTES:
    return SL_PBF_BYTES;
  case PROTOBUF_C_TYPE_MESSAGE:
    return SL_PBF_MESSAGE;
  default:
    return SL_PBF_NUMBER;
  }
}

int sl_pbfield_resolve(const ProtobufCMessageDescriptor *d, const char *path, int *repeated,
                       char *err, size_t errlen) {
  char seg[SEG_MAX];
  const char *p = path ? path : "";
  const ProtobufCFieldDescriptor *f = NULL;
  int rep = 0, r;
  while ((r = next_seg(&p, seg)) > 0) {
    if (f) { /* step into the sub-message the previous segment named */
      if (f->type != PROTOBUF_C_TYPE_MESSAGE) {
        snprintf(err, errlen, "%s: \"%s\" is not a message, it has no field \"%s\"", d->name,
                 f->name, seg);
        return SL_ENOTFOUND;
      }
      d = f->descriptor;
    }
    f = protobuf_c_message_descriptor_get_field_by_name(d, seg);
    if (!f) {
      snprintf(err, errlen, "%s has no field \"%s\"", d->name, seg);
      return SL_ENOTFOUND;
    }
    if (f->label == PROTOBUF_C_LABEL_REPEATED) rep = 1;
  }
  if (r < 0 || !f) {
    snprintf(err, errlen, "\"%s\" is not a field path (name.name...)", path ? path : "");
    return SL_ENOTFOUND;
  }
  if (repeated) *repeated = rep;
  return (int)kind_of(f);
}

/* Walks to the last field of path: *owner is the message holding it, *f the
 * field, *index the element when the path ends in "list.N" (else SIZE_MAX).
 * Returns 0 or SL_ENOTFOUND. */
static int walk(const ProtobufCMessage *m, const char *path, const ProtobufCMessage **owner,
                const ProtobufCFieldDescriptor **fout, size_t *index) {
  char seg[SEG_MAX];
  const char *p = path ? path : "";
  const ProtobufCFieldDescriptor *f = NULL;
  size_t idx = SIZE_MAX;
  int r;
  while (m && (r = next_seg(&p, seg)) > 0) {
    size_t i;
    if (f && f->label == PROTOBUF_C_LABEL_REPEATED && idx == SIZE_MAX && is_index(seg, &i)) {
      size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
      if (i >= n) return SL_ENOTFOUND;
      idx = i;
      continue;
    }
    if (f) { /* enter the sub-message */
      if (f->type != PROTOBUF_C_TYPE_MESSAGE) return SL_ENOTFOUND;
      if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        if (idx == SIZE_MAX) return SL_ENOTFOUND; /* a list needs an index first */
        m = (*(ProtobufCMessage *const *const *)((const char *)m + f->offset))[idx];
      } else {
        m = *(ProtobufCMessage *const *)((const char *)m + f->offset);
      }
      if (!m) return SL_ENOTFOUND;
      idx = SIZE_MAX;
    }
    f = protobuf_c_message_descriptor_get_field_by_name(m->descriptor, seg);
    if (!f) return SL_ENOTFOUND;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF &&
        *(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id)
      return SL_ENOTFOUND; /* another member of the oneof is set */
  }
  if (!f || !m) return SL_ENOTFOUND;
  *owner = m;
  *fout = f;
  *index = idx;
  return 0;
}

/* the size of one element of a repeated field of type t */
static size_t elem_size(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    return sizeof(int64_t);
  case PROTOBUF_C_TYPE_DOUBLE:
    return sizeof(double);
  case PROTOBUF_C_TYPE_FLOAT:
    return sizeof(float);
  case PROTOBUF_C_TYPE_BOOL:
    return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_ENUM:
    return sizeof(int);
  case PROTOBUF_C_TYPE_STRING:
    return sizeof(char *);
  case PROTOBUF_C_TYPE_BYTES:
    return sizeof(ProtobufCBinaryData);
  case PROTOBUF_C_TYPE_MESSAGE:
    return sizeof(ProtobufCMessage *);
  default: /* the 32-bit integers */
    return sizeof(int32_t);
  }
}

/* where the value is: the field itself, or element idx of a repeated one */
static const void *value_at(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
                            size_t idx) {
  const char *base = (const char *)m + f->offset;
  if (f->label != PROTOBUF_C_LABEL_REPEATED) return idx == SIZE_MAX ? base : NULL;
  if (idx == SIZE_MAX) return NULL; /* the list itself is not a value */
  return *(const char *const *)base + idx * elem_size(f->type);
}

const char *sl_pbfield_str(const ProtobufCMessage *m, const char *path) {
  const ProtobufCMessage *o;
  const ProtobufCFieldDescriptor *f;
  size_t idx;
  if (walk(m, path, &o, &f, &idx) || f->type != PROTOBUF_C_TYPE_STRING) return NULL;
  const char *const *v = value_at(o, f, idx);
  return v ? *v : NULL;
}

const void *sl_pbfield_bytes(const ProtobufCMessage *m, const char *path, size_t *len) {
  const ProtobufCMessage *o;
  const ProtobufCFieldDescriptor *f;
  size_t idx;
  if (walk(m, path, &o, &f, &idx) || f->type != PROTOBUF_C_TYPE_BYTES) return NULL;
  const ProtobufCBinaryData *b = value_at(o, f, idx);
  if (!b) return NULL;
  if (len) *len = b->len;
  return b->data ? (const void *)b->data : (const void *)"";
}

int sl_pbfield_num(const ProtobufCMessage *m, const char *path, double *out) {
  const ProtobufCMessage *o;
  const ProtobufCFieldDescriptor *f;
  size_t idx;
  if (walk(m, path, &o, &f, &idx) || kind_of(f) != SL_PBF_NUMBER) return SL_ENOTFOUND;
  const void *v = value_at(o, f, idx);
  if (!v || !out) return SL_ENOTFOUND;
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_ENUM:
    *out = *(const int32_t *)v;
    break;
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    *out = *(const uint32_t *)v;
    break;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    *out = (double)*(const int64_t *)v;
    break;
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    *out = (double)*(const uint64_t *)v;
    break;
  case PROTOBUF_C_TYPE_FLOAT:
    *out = *(const float *)v;
    break;
  case PROTOBUF_C_TYPE_DOUBLE:
    *out = *(const double *)v;
    break;
  case PROTOBUF_C_TYPE_BOOL:
    *out = *(const protobuf_c_boolean *)v ? 1 : 0;
    break;
  default:
    return SL_ENOTFOUND;
  }
  return 0;
}

long sl_pbfield_count(const ProtobufCMessage *m, const char *path) {
  const ProtobufCMessage *o;
  const ProtobufCFieldDescriptor *f;
  size_t idx;
  if (walk(m, path, &o, &f, &idx) || f->label != PROTOBUF_C_LABEL_REPEATED || idx != SIZE_MAX)
    return -1;
  return (long)*(const size_t *)((const char *)o + f->quantifier_offset);
}

size_t sl_pbfield_n_values(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
  if (!m || !f) return 0;
  const char *q = (const char *)m + f->quantifier_offset;
  if (f->label == PROTOBUF_C_LABEL_REPEATED) return *(const size_t *)q;
  if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) return *(const uint32_t *)q == f->id;
  if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_MESSAGE &&
      f->type != PROTOBUF_C_TYPE_STRING && f->quantifier_offset)
    return *(const protobuf_c_boolean *)q ? 1 : 0;
  return 1;
}

const void *sl_pbfield_value(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
                             size_t i) {
  if (i >= sl_pbfield_n_values(m, f)) return NULL;
  return value_at(m, f, f->label == PROTOBUF_C_LABEL_REPEATED ? i : SIZE_MAX);
}

/* the writable field at the end of path (no list element) */
static int walk_w(ProtobufCMessage *m, const char *path, ProtobufCMessage **owner,
                  const ProtobufCFieldDescriptor **f) {
  const ProtobufCMessage *o;
  size_t idx;
  int rc = walk(m, path, &o, f, &idx);
  if (rc) return rc;
  if (idx != SIZE_MAX || (*f)->label == PROTOBUF_C_LABEL_REPEATED ||
      (*f)->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
    return SL_EINVAL;
  *owner = (ProtobufCMessage *)o;
  return 0;
}

static void mark_present(ProtobufCMessage *o, const ProtobufCFieldDescriptor *f) {
  if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING &&
      f->type != PROTOBUF_C_TYPE_MESSAGE && f->quantifier_offset)
    *(protobuf_c_boolean *)((char *)o + f->quantifier_offset) = 1;
}

int sl_pbfield_set_str(ProtobufCMessage *m, const char *path, const char *v) {
  ProtobufCMessage *o;
  const ProtobufCFieldDescriptor *f;
  int rc = walk_w(m, path, &o, &f);
  if (rc) return rc;
  if (f->type != PROTOBUF_C_TYPE_STRING || !v) return SL_EINVAL;
  char *copy = strdup(v);
  if (!copy) return SL_ENOMEM;
  char **slot = (char **)((char *)o + f->offset);
  if (*slot && *slot != (const char *)f->default_value &&
      *slot != (const char *)protobuf_c_empty_string)
    free(*slot);
  *slot = copy;
  return 0;
}

int sl_pbfield_set_num(ProtobufCMessage *m, const char *path, double v) {
  ProtobufCMessage *o;
  const ProtobufCFieldDescriptor *f;
  int rc = walk_w(m, path, &o, &f);
  if (rc) return rc;
  if (kind_of(f) != SL_PBF_NUMBER || v != v) return SL_EINVAL;
  void *p = (char *)o + f->offset;
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_ENUM:
    if (v < INT32_MIN || v > INT32_MAX) return SL_EINVAL;
    *(int32_t *)p = (int32_t)v;
    break;
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    if (v < 0 || v > UINT32_MAX) return SL_EINVAL;
    *(uint32_t *)p = (uint32_t)v;
    break;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    if (v < -9.2e18 || v > 9.2e18) return SL_EINVAL;
    *(int64_t *)p = (int64_t)v;
    break;
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    if (v < 0 || v > 1.8e19) return SL_EINVAL;
    *(uint64_t *)p = (uint64_t)v;
    break;
  case PROTOBUF_C_TYPE_FLOAT:
    *(float *)p = (float)v;
    break;
  case PROTOBUF_C_TYPE_DOUBLE:
    *(double *)p = v;
    break;
  case PROTOBUF_C_TYPE_BOOL:
    *(protobuf_c_boolean *)p = v != 0;
    break;
  default:
    return SL_EINVAL;
  }
  mark_present(o, f);
  return 0;
}

int sl_pbfield_is_set(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
  const char *base = (const char *)m + f->offset;
  if (f->label == PROTOBUF_C_LABEL_REPEATED)
    return *(const size_t *)((const char *)m + f->quantifier_offset) > 0;
  if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING &&
      f->type != PROTOBUF_C_TYPE_MESSAGE && f->quantifier_offset)
    return *(const protobuf_c_boolean *)((const char *)m + f->quantifier_offset) != 0;
  switch (f->type) {
  case PROTOBUF_C_TYPE_STRING: {
    const char *s = *(const char *const *)base;
    return s && s[0] && s != (const char *)f->default_value;
  }
  case PROTOBUF_C_TYPE_BYTES:
    return ((const ProtobufCBinaryData *)base)->len > 0;
  case PROTOBUF_C_TYPE_MESSAGE:
    return *(const void *const *)base != NULL;
  default: {
    static const char zero[sizeof(int64_t)];
    return memcmp(base, zero, elem_size(f->type)) != 0;
  }
  }
}

int sl_pbfield_move(ProtobufCMessage *dst, ProtobufCMessage *src,
                    const ProtobufCFieldDescriptor *f) {
  if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) return SL_EINVAL;
  char *from = (char *)src + f->offset, *to = (char *)dst + f->offset;
  size_t size = f->label == PROTOBUF_C_LABEL_REPEATED ? sizeof(void *) : elem_size(f->type);
  memcpy(to, from, size);
  if (f->quantifier_offset) { /* the count of a list, the has_ flag of an optional */
    size_t qsize =
        f->label == PROTOBUF_C_LABEL_REPEATED ? sizeof(size_t) : sizeof(protobuf_c_boolean);
    memcpy((char *)dst + f->quantifier_offset, (char *)src + f->quantifier_offset, qsize);
    memset((char *)src + f->quantifier_offset, 0, qsize);
  }
  /* src's as init makes it: its default, the empty string, or zero */
  if (f->label != PROTOBUF_C_LABEL_REPEATED && f->type == PROTOBUF_C_TYPE_STRING)
    *(const char **)from =
        f->default_value ? (const char *)f->default_value : (const char *)protobuf_c_empty_string;
  else if (f->label != PROTOBUF_C_LABEL_REPEATED && f->default_value &&
           f->type != PROTOBUF_C_TYPE_MESSAGE)
    memcpy(from, f->default_value, size);
  else
    memset(from, 0, size);
  return 0;
}
