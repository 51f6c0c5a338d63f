/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_pbfield.h — fields of protobuf messages by name, through protobuf-c's
 * descriptors: what lets a plugin read its input and write its output by
 * field name, so a new message type needs no host code.
 *
 * A path names a field from the top of a message: "text",
 * "upload.question_no" (into a sub-message), "words.3.word" (element 3 of a
 * repeated message field, then its field). A declared path (what a plugin
 * says it reads or writes) has no indices: "words.word" or "words".
 *
 * Readers never allocate: strings and bytes point into the message. Writers
 * work on messages unpacked with the default allocator (malloc) or made with
 * the descriptor's init, and replace a string with a malloc'd copy, so
 * protobuf_c_message_free_unpacked frees what they wrote.
 *
 * Pure. @locality any thread (one message per thread).
 */
#ifndef SLUICE_SL_PBFIELD_H
#define SLUICE_SL_PBFIELD_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

/* What a declared path leads to. */
typedef enum {
  SL_PBF_STRING = 1,
  SL_PBF_BYTES,
  SL_PBF_NUMBER,  /* numeric, bool or enum */
  SL_PBF_MESSAGE, /* a sub-message (or a list of them) */
} sl_pbfield_kind;

/* Checks a declared path (no indices) against d. Returns its kind, with
 * *repeated set when some step of it is a list; SL_ENOTFOUND with the
 * failing segment named in err. */
int sl_pbfield_resolve(const ProtobufCMessageDescriptor *d, const char *path, int *repeated,
                       char *err, size_t errlen);

/* Reads: NULL / SL_ENOTFOUND when the path does not lead to a value of that
 * kind (or an index is out of range). */
const char *sl_pbfield_str(const ProtobufCMessage *m, const char *path);
const void *sl_pbfield_bytes(const ProtobufCMessage *m, const char *path, size_t *len);
int sl_pbfield_num(const ProtobufCMessage *m, const char *path, double *out);
/* Elements of a repeated field; -1 when the path is not one. */
long sl_pbfield_count(const ProtobufCMessage *m, const char *path);

/* Writes a string / number field (path without indices into repeated
 * fields; sub-messages on the way must exist). Returns 0, SL_ENOTFOUND, or
 * SL_EINVAL (a number into a string field and the like), SL_ENOMEM. */
int sl_pbfield_set_str(ProtobufCMessage *m, const char *path, const char *v);
int sl_pbfield_set_num(ProtobufCMessage *m, const char *path, double v);

/* Every field of a message, for a caller that shows a whole message by its
 * descriptor (sluicectl's JSON): the values field f (one of m's
 * descriptor's fields) holds — a repeated field's element count; for a
 * singular one 1 when it is set and 0 when it is not (a oneof member other
 * than the chosen one, an optional scalar whose has_ flag is clear); any
 * other singular field counts as set. */
size_t sl_pbfield_n_values(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f);
/* Where value i of field f is, laid out as protobuf-c does (int32_t,
 * uint64_t, float, protobuf_c_boolean, int for an enum, char * for a
 * string, ProtobufCBinaryData, ProtobufCMessage *), or NULL when i is not
 * below sl_pbfield_n_values. */
const void *sl_pbfield_value(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
                             size_t i);

/* Whole fields moved between two messages of one type (sl_pbseal). 1 when
 * field f of m holds what packing would write: elements of a repeated
 * field, a non-empty string or bytes, a sub-message, a non-zero number, a
 * present optional. */
int sl_pbfield_is_set(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f);
/* Moves field f of src (its value, or list and count, and its has_ flag)
 * to dst, and leaves src's as the descriptor's init makes it: what src
 * owned, dst owns now (so both must come from one allocator when they are
 * freed with protobuf_c_message_free_unpacked). dst's own value is
 * overwritten, not freed: the caller makes sure it held none. Both of f's
 * descriptor. 0, or SL_EINVAL (a member of a oneof: its case is shared). */
int sl_pbfield_move(ProtobufCMessage *dst, ProtobufCMessage *src,
                    const ProtobufCFieldDescriptor *f);

#endif
