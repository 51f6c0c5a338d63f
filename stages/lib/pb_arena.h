/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/pb_arena.h — a bump allocator for protobuf-c's unpack over a caller's
 * buffer (on its stack): a message decoded, used and released within one
 * call costs no malloc or free per field (a Transcript is a dozen
 * allocations and more, a fifth of a grade run around a plugin that does
 * nothing, bench/cost). What does not fit is malloc'd and freed as usual
 * ("spilled"). Not thread-safe: one per call, on the calling thread's stack.
 */
#ifndef SLUICE_LIB_PB_ARENA_H
#define SLUICE_LIB_PB_ARENA_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

typedef struct {
  ProtobufCAllocator a; /* hand &a to unpack and free_unpacked */
  unsigned char *buf;
  size_t cap, used;
  int spilled; /* something did not fit and was malloc'd */
} sl__pb_arena;
#define SL__PB_ARENA_BYTES 16384
/* buf (cap bytes) is borrowed and must outlive every message unpacked
 * with ar->a. */
void sl__pb_arena_init(sl__pb_arena *ar, void *buf, size_t cap);
/* msg (unpacked with pa, NULL: the system allocator) freed: nothing to do
 * when pa is an arena whose every allocation fit in its buffer. NULL-safe. */
void sl__pb_free(void *msg, ProtobufCAllocator *pa);

#endif
