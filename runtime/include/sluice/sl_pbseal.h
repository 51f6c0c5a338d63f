/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_pbseal.h — the personal fields of a protobuf message sealed inside it,
 * so that destroying one key makes them unreadable in every copy of the
 * message (crypto-shredding; issue 46, docs/privacy.md).
 *
 * A message type that may carry sealed fields declares `bytes sealed`
 * (sluice.proto). Sealing packs the named top-level fields on their own,
 * as a message of the same type that holds only them, seals those bytes
 * (sl_seal: the caller's key and aad) into `sealed`, and packs the other
 * fields as usual. A reader without the key therefore still reads the
 * message, with those fields empty, and knows by `sealed` that it lacks
 * something. Opening unseals the bytes, unpacks them with the same type
 * and moves every field they hold into the message. No field of the
 * message's type needs to be known to open: a field added to the personal
 * list later opens in readers built before.
 *
 * The aad names what the message is about (the message key
 * "<submission>/<question>"): sealed fields copied into another
 * question's message do not open there. It must not name the topic: retry
 * copies, replays and steps move the same bytes between topics.
 *
 * Pure apart from OpenSSL (sl_seal). @locality any thread; the caller owns
 * every message and buffer.
 */
#ifndef SLUICE_SL_PBSEAL_H
#define SLUICE_SL_PBSEAL_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "sluice/sl_seal.h"

#define SL_PBSEAL_FIELD "sealed"

/* Packs m with the fields named in fields[0..n) (top-level, not members
 * of a oneof) sealed by key and aad into its bytes field "sealed"; m itself
 * is not changed. key NULL, or none of those fields set: packed as it is.
 * *out is malloc'd (the caller frees it), *outlen its length. Returns 0,
 * SL_EINVAL (m's type has no bytes field "sealed", a name is not one of
 * its fields, or names a oneof's member or "sealed"; m already carries
 * sealed bytes), SL_ETOOBIG (over SL_SEAL_MAX), SL_ENOMEM or SL_ECRYPTO. */
int sl_pbseal_pack(const ProtobufCMessage *m, const char *const *fields, size_t n,
                   const uint8_t *key, const void *aad, size_t aadlen, uint8_t **out,
                   size_t *outlen);

/* 1 when m carries sealed fields (a non-empty "sealed"), else 0. */
int sl_pbseal_sealed(const ProtobufCMessage *m);

/* Opens m's sealed fields into m, which was unpacked with allocator a
 * (NULL: protobuf-c's default), and empties "sealed". Nothing sealed: 0,
 * nothing done. Returns 0, SL_EAUTH (another key or aad, or altered),
 * SL_EPARSE (not sealed bytes, not a message of m's type, or a field that
 * is both sealed and plain in m), SL_EINVAL (key NULL, m's type has no
 * "sealed") or SL_ENOMEM; m is unchanged on an error. */
int sl_pbseal_open(ProtobufCMessage *m, const uint8_t *key, const void *aad, size_t aadlen,
                   ProtobufCAllocator *a);

/* Which fields of a message type are personal: a table set once at
 * start-up, before threads (the domain's, stages/lib/stage.c), read-only
 * after. sl_pbseal_personal: 1 with fields and n set when d is in it. */
typedef struct {
  const ProtobufCMessageDescriptor *d;
  const char *const *fields;
  size_t n;
} sl_pbseal_type;
void sl_pbseal_set_personal(const sl_pbseal_type *types, size_t n);
int sl_pbseal_personal(const ProtobufCMessageDescriptor *d, const char *const **fields, size_t *n);

#endif
