/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pb_arena.c — protobuf-c's allocator over a caller's buffer (see
 * pb_arena.h): aligned bumps, spills to malloc.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/pb_arena.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

static void *arena_alloc(void *data, size_t size) {
  sl__pb_arena *ar = data;
  /* aligned for any type, as malloc's: the address, whatever the buffer's */
  const uintptr_t align = _Alignof(max_align_t), base = (uintptr_t)ar->buf;
  size_t at = (size_t)(((base + ar->used + align - 1) & ~(align - 1)) - base);
  if (size <= ar->cap && at <= ar->cap - size) {
    ar->used = at + size;
    return ar->buf + at;
  }
  ar->spilled = 1;
  return malloc(size ? size : 1);
}

static void arena_free(void *data, void *p) {
  sl__pb_arena *ar = data;
  unsigned char *c = p;
  /* inside the buffer: it goes with the buffer (compared as integers: the
   * two need not be parts of one object) */
  if (c && (uintptr_t)c >= (uintptr_t)ar->buf && (uintptr_t)c < (uintptr_t)(ar->buf + ar->cap))
    return;
  free(p);
}

void sl__pb_arena_init(sl__pb_arena *ar, void *buf, size_t cap) {
  *ar = (sl__pb_arena){.a = {arena_alloc, arena_free, ar}, .buf = buf, .cap = buf ? cap : 0};
}

void sl__pb_free(void *msg, ProtobufCAllocator *pa) {
  if (!msg) return;
  if (pa && pa->alloc == arena_alloc && !((sl__pb_arena *)pa->allocator_data)->spilled) return;
  protobuf_c_message_free_unpacked(msg, pa);
}
