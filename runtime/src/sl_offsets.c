/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_offsets.c — a partition's in-flight offsets (see sl_offsets.h).
 *
 * A ring of ascending offsets with a done flag each; done() finds its
 * offset by binary search and pops the done head. take() keeps the ring
 * ascending: an offset that is not above the last one taken is a refetch,
 * which starts a new epoch (the ring is emptied; the commit point stays).
 */
#include "sluice/sl_offsets.h"
#include "sluice/sl_err.h"

#include <stdlib.h>
#include <string.h>

void sl_offsets_init(sl_offsets *r) {
  memset(r, 0, sizeof *r);
  r->last = -1;
  r->commit_next = -1;
}

void sl_offsets_free(sl_offsets *r) {
  if (!r) return;
  free(r->offs);
  free(r->ts);
  free(r->done);
  r->offs = r->ts = NULL;
  r->done = NULL;
  r->cap = r->head = r->n = 0;
}

static void new_epoch(sl_offsets *r) {
  r->epoch++;
  r->head = r->n = 0;
  r->last = -1;
}

void sl_offsets_reset(sl_offsets *r) {
  new_epoch(r);
  r->commit_next = -1;
  r->dirty = 0;
}

static int grow(sl_offsets *r) {
  size_t ncap = r->cap ? r->cap * 2 : 64;
  int64_t *no = malloc(ncap * sizeof *no), *nt = malloc(ncap * sizeof *nt);
  uint8_t *nd = malloc(ncap);
  if (!no || !nd || !nt) {
    free(no);
    free(nd);
    free(nt);
    return SL_ENOMEM;
  }
  for (size_t i = 0; i < r->n; i++) {
    size_t at = (r->head + i) % r->cap;
    no[i] = r->offs[at];
    nt[i] = r->ts[at];
    nd[i] = r->done[at];
  }
  free(r->offs);
  free(r->ts);
  free(r->done);
  r->offs = no;
  r->ts = nt;
  r->done = nd;
  r->cap = ncap;
  r->head = 0;
  return 0;
}

int sl_offsets_take(sl_offsets *r, int64_t off, int64_t ts) {
  int refetch = 0;
  if (r->last >= 0 && off <= r->last) { /* the consumer went back */
    new_epoch(r);
    refetch = 1;
  }
  if (r->n == r->cap && grow(r) != 0) return SL_ENOMEM;
  size_t at = (r->head + r->n) % r->cap;
  r->offs[at] = off;
  r->ts[at] = ts;
  r->done[at] = 0;
  r->n++;
  r->last = off;
  return refetch;
}

int sl_offsets_done(sl_offsets *r, uint64_t epoch, int64_t off) {
  if (epoch != r->epoch || r->n == 0) return 0;
  size_t lo = 0, hi = r->n;
  while (lo < hi) { /* ascending: binary search */
    size_t mid = (lo + hi) / 2;
    if (r->offs[(r->head + mid) % r->cap] < off)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < r->n && r->offs[(r->head + lo) % r->cap] == off) r->done[(r->head + lo) % r->cap] = 1;
  int moved = 0;
  while (r->n && r->done[r->head]) {
    int64_t next = r->offs[r->head] + 1;
    if (next > r->commit_next) { /* never backwards (a refetch re-reads finished ones) */
      r->commit_next = next;
      r->dirty = 1;
      moved = 1;
    }
    r->head = (r->head + 1) % r->cap;
    r->n--;
  }
  return moved;
}

int64_t sl_offsets_commit_take(sl_offsets *r) {
  if (!r->dirty || r->commit_next < 0) return -1;
  r->dirty = 0;
  return r->commit_next;
}

void sl_offsets_commit_failed(sl_offsets *r, int64_t off) {
  if (off >= 0 && r->commit_next >= off) r->dirty = 1;
}

size_t sl_offsets_pending(const sl_offsets *r) { return r->n; }

int64_t sl_offsets_oldest_ts(const sl_offsets *r) { return r->n ? r->ts[r->head] : 0; }
