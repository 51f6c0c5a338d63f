/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_inline.c — pool or loop for a stage's blocking processor (see
 * sl_inline.h).
 */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include "sluice/sl_inline.h"

#include <time.h>

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* the calling thread's CPU time (ns precise, unlike getrusage's) */
static uint64_t cpu_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void sl_inline_begin(sl_inline_mark *m) {
  m->wall_ns = mono_ns();
  m->cpu_ns = cpu_ns();
  if (getrusage(RUSAGE_THREAD, &m->ru) != 0) m->ru.ru_nvcsw = -1; /* unknown: wall time */
}

uint64_t sl_inline_end(const sl_inline_mark *m) {
  uint64_t cpu = cpu_ns() - m->cpu_ns, wall = mono_ns() - m->wall_ns;
  struct rusage ru;
  if (m->ru.ru_nvcsw < 0 || getrusage(RUSAGE_THREAD, &ru) != 0 || ru.ru_nvcsw != m->ru.ru_nvcsw)
    return wall; /* it blocked (or cannot tell): the loop would have waited as long */
  return cpu < wall ? cpu : wall;
}

int sl_inline_here(const sl_inline *s, uint64_t now_ns) {
  return s && s->max_ns > 0 && s->runs >= SL_INLINE_WARMUP && s->mean_ns < s->max_ns &&
         now_ns >= s->cool_until_ns;
}

int sl_inline_note(sl_inline *s, uint64_t ran_ns, int where, uint64_t now_ns) {
  if (!s) return 0;
  if (s->runs++ == 0)
    s->mean_ns = ran_ns;
  else if (ran_ns >= s->mean_ns)
    s->mean_ns += (ran_ns - s->mean_ns) / 16;
  else
    s->mean_ns -= (s->mean_ns - ran_ns) / 16;
  int slow = s->max_ns > 0 && ran_ns > s->max_ns * SL_INLINE_SLOW_FACTOR;
  if (where == SL_INLINE_LOOP && slow) { /* the processor's, or the loop stopped? */
    s->checks = SL_INLINE_CHECKS;
    return 0;
  }
  if (where != SL_INLINE_CHECKED) return 0;
  if (s->checks) s->checks--;
  if (!slow) return 0;
  s->checks = 0; /* it was the processor's */
  s->cool_until_ns = now_ns + SL_INLINE_COOL_NS;
  return 1;
}

int sl_inline_checking(const sl_inline *s) { return s && s->checks > 0; }

int sl_inline_call(sl_inline *s, void (*fn)(void *arg), void *arg) {
  /* by the wall clock (two vDSO reads); after a run slow by it, the next
   * few also by CPU time (four system calls: 2.5 µs here) */
  int checked = sl_inline_checking(s);
  sl_inline_mark mk;
  if (checked) sl_inline_begin(&mk);
  uint64_t t0 = mono_ns();
  fn(arg);
  uint64_t t1 = mono_ns();
  return sl_inline_note(s, checked ? sl_inline_end(&mk) : t1 - t0,
                        checked ? SL_INLINE_CHECKED : SL_INLINE_LOOP, t1);
}
