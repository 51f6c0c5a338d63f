/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_inline.h — where a stage runs its blocking processor: on a worker
 * thread (the libuv pool), or on the loop itself when its runs are known
 * to be short.
 *
 * Handing a message to a worker and its result back costs two thread
 * wake-ups (a condition variable, then the loop's async handle): about
 * 6-8 µs of CPU per message on this project's bench machine, more than a
 * rubric grade's whole run. So once a processor's recent runs average
 * under the limit (stage.inline_max_us), the runtime calls it on the loop
 * instead. The decision follows the measurements:
 *   - a run on the pool is measured by what it would cost the loop
 *     (sl_inline_begin, sl_inline_end): the CPU time of its thread, or its
 *     wall time when it blocked (a voluntary context switch: it waited for
 *     I/O or a lock); not the wall time alone, which counts the time a
 *     worker was preempted on a busy machine (four syscalls a run: the
 *     pool's hand-over costs far more); a run on the loop by its wall time
 *     (what the loop waited);
 *   - the first SL_INLINE_WARMUP runs always go to the pool (nothing is
 *     known yet: a speech recognizer must never start on the loop);
 *   - the mean is an exponential average (weight 1/16) of every run, on
 *     the pool or inline;
 *   - an inline run slower than SL_INLINE_SLOW_FACTOR times the limit by
 *     the wall clock may be the processor's doing or the loop's thread
 *     stopped meanwhile (preempted on a busy machine, SIGSTOP): the next
 *     SL_INLINE_CHECKS inline runs are then measured as a pool run is
 *     (sl_inline_begin, sl_inline_end: its CPU, or its wall time if it
 *     blocked), and one of them that slow sends work to the pool for
 *     SL_INLINE_COOL_NS, so a processor that turns slow now and then (a
 *     cold cache, an input of another kind) blocks the loop with such runs
 *     at most twice per cool-down, and a preempted loop does not send a
 *     short processor to the pool for a second (a round of bench/cost ran
 *     on the pool for that: workers 6-13 µs a message instead of under 3);
 *     a wall-clock sample still moves the mean, which sends a processor
 *     slow every few runs to the pool; slow runs on the pool (a worker's
 *     first, which makes its plugin instance) only move the mean.
 * @locality sl_inline_here and sl_inline_note on the loop thread (one
 * sl_inline per stage, not thread-safe); sl_inline_begin and sl_inline_end on
 * the thread that runs the processor.
 */
#ifndef SLUICE_SL_INLINE_H
#define SLUICE_SL_INLINE_H

#include <stdint.h>
#include <sys/resource.h>

#define SL_INLINE_WARMUP 32
#define SL_INLINE_SLOW_FACTOR 100
#define SL_INLINE_COOL_NS (1000ull * 1000 * 1000)
#define SL_INLINE_CHECKS 3

/* A run's start, as its thread saw it. */
typedef struct {
  uint64_t wall_ns, cpu_ns;
  struct rusage ru; /* its voluntary context switches */
} sl_inline_mark;

/* Marks the start of a run on the calling thread. */
void sl_inline_begin(sl_inline_mark *m);
/* What the run begun at m cost, in ns, on the same thread: its CPU time,
 * or its wall time if it blocked. */
uint64_t sl_inline_end(const sl_inline_mark *m);

typedef struct {
  uint64_t max_ns;        /* inline while the mean is under this (0: never inline) */
  uint64_t mean_ns;       /* exponential average of the runs */
  uint64_t runs;          /* runs noted */
  uint64_t cool_until_ns; /* pool only until then (a slow run) */
  unsigned checks;        /* inline runs to measure as SL_INLINE_CHECKED */
} sl_inline;

/* 1 when the next run should happen on the loop, at now_ns (monotonic). */
int sl_inline_here(const sl_inline *s, uint64_t now_ns);

/* where a run happened, for sl_inline_note */
#define SL_INLINE_POOL 0    /* on a worker, measured by sl_inline_begin/end */
#define SL_INLINE_LOOP 1    /* on the loop, by the wall clock */
#define SL_INLINE_CHECKED 2 /* on the loop, by sl_inline_begin/end */

/* 1 when the next inline run is to be measured by sl_inline_begin/end and
 * noted as SL_INLINE_CHECKED (a run before it was slow by the wall clock). */
int sl_inline_checking(const sl_inline *s);

/* A run took ran_ns, where it happened (SL_INLINE_*), noted at now_ns. 1
 * when it started a cool-down (the pool only for SL_INLINE_COOL_NS), else
 * 0. */
int sl_inline_note(sl_inline *s, uint64_t ran_ns, int where, uint64_t now_ns);

/* Runs fn(arg) here, on the loop (after sl_inline_here said so), measured
 * as above (the wall clock; after a slow run, its CPU for a few runs) and
 * noted: what sl_inline_note returned. The one way a run on the loop is
 * made, for the runtime's processor and for a plugin stage's SYNC plugin. */
int sl_inline_call(sl_inline *s, void (*fn)(void *arg), void *arg);

#endif
