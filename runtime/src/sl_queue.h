/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_queue.h — an intrusive FIFO with its length: the element embeds an
 * sl_qlink and is in at most one queue at a time (the stage runtime's jobs:
 * parked, waiting for a slot or a key, held by the breaker, queued at the
 * limiter, batched for Redis). No allocation. @locality one thread.
 */
#ifndef SLUICE_SL_QUEUE_H
#define SLUICE_SL_QUEUE_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_qlink {
  struct sl_qlink *next;
} sl_qlink;

typedef struct {
  sl_qlink *head, *tail;
  int64_t len;
} sl_queue;

/* the element that embeds link l as its member */
#define SL_QUEUE_ITEM(l, type, member) ((type *)(void *)((char *)(l)-offsetof(type, member)))

static inline void sl_queue_push(sl_queue *q, sl_qlink *l) {
  l->next = NULL;
  if (q->tail)
    q->tail->next = l;
  else
    q->head = l;
  q->tail = l;
  q->len++;
}

/* The first element, taken out (NULL: empty). */
static inline sl_qlink *sl_queue_pop(sl_queue *q) {
  sl_qlink *l = q->head;
  if (!l) return NULL;
  q->head = l->next;
  if (!q->head) q->tail = NULL;
  l->next = NULL;
  q->len--;
  return l;
}

/* The first element for which take(l, ud) is 1, taken out; the others stay
 * in their order (NULL: none). */
static inline sl_qlink *sl_queue_pop_first(sl_queue *q, int (*take)(sl_qlink *, void *), void *ud) {
  sl_qlink *prev = NULL;
  for (sl_qlink *l = q->head; l; prev = l, l = l->next) {
    if (!take(l, ud)) continue;
    if (prev)
      prev->next = l->next;
    else
      q->head = l->next;
    if (q->tail == l) q->tail = prev;
    l->next = NULL;
    q->len--;
    return l;
  }
  return NULL;
}

/* Empties q without touching its elements. */
static inline void sl_queue_forget(sl_queue *q) {
  q->head = q->tail = NULL;
  q->len = 0;
}

/* Moves the elements for which take(l, ud) is 1 from q to the end of out,
 * both in their order; skips the first `keep_head` elements (1: the head
 * is busy and stays). */
static inline void sl_queue_split(sl_queue *q, int keep_head, int (*take)(sl_qlink *, void *),
                                  void *ud, sl_queue *out) {
  sl_queue rest = {NULL, NULL, 0};
  sl_qlink *l;
  if (keep_head && (l = sl_queue_pop(q)) != NULL) sl_queue_push(&rest, l);
  while ((l = sl_queue_pop(q)) != NULL) sl_queue_push(take(l, ud) ? out : &rest, l);
  *q = rest;
}

#endif
