/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_admit.h — the provider gate's decisions, as a pure state machine: what
 * a job does next between its idempotency lookup and its provider call
 * (runtime/src/sl_stage_gate.c carries them out: queues, timers, Redis).
 *
 * A job passes, in order:
 *   1. the breaker (sl_admit_breaker): held in order while it is open
 *      (breaker.hold), or sent to a retry tier; stored outputs are looked
 *      for before it waits;
 *   2. the limits (sl_admit_limits): the shared limiter's queue
 *      (provider.rate), else the provider's 429 pause;
 *   3. the call (sl_admit_call): its claim still good, behind a solo run if
 *      one is under way, its start counted (stage.max_starts), then called;
 *   4. its start count answered (sl_admit_started): poison past
 *      max_starts, alone at its last chance, else called at full concurrency.
 * Closing drops, a partition taken away releases, at every step.
 * Pure: no I/O, no clock. @locality any thread.
 */
#ifndef SLUICE_SL_ADMIT_H
#define SLUICE_SL_ADMIT_H

#include <stdint.h>

typedef enum {
  SL_ADMIT_DROP,       /* the stage is closing: dropped, redelivered */
  SL_ADMIT_RELEASE,    /* its partition went away (or held while stopping): let go */
  SL_ADMIT_LOOKUP,     /* it is about to wait: look for stored outputs first */
  SL_ADMIT_HOLD,       /* the breaker is open or others are held: held, in order */
  SL_ADMIT_RETRY,      /* the breaker is open, nothing is held (no breaker.hold): a retry copy */
  SL_ADMIT_PASS,       /* on to the limits */
  SL_ADMIT_LIMITER,    /* queued behind the shared limiter */
  SL_ADMIT_PAUSE_ASK,  /* read the provider's pause (a 429 on any replica) */
  SL_ADMIT_PAUSE_WAIT, /* wait out the pause */
  SL_ADMIT_CLAIM,      /* on to the claim and the call */
} sl_admit_step;

/* What the gate knows of a job and of the provider. */
typedef struct {
  int closing;           /* the loop has stopped */
  int stale;             /* its partition was or is being taken away */
  int stopping;          /* SIGTERM: nothing new is held */
  int provider;          /* the stage calls a provider (else: straight to the claim) */
  int looked_up;         /* stored outputs were looked for (or the stage stores none) */
  int held;              /* jobs are held already: behind them, in order */
  int breaker_allows;    /* the breaker lets a call through now */
  int hold;              /* breaker.hold */
  int rate;              /* provider.rate is set: the shared limiter decides */
  int pause_fresh;       /* the pause was read within the last SL_PAUSE_FRESH_MS */
  int64_t pause_left_ms; /* what is left of the pause as last read */
} sl_admit_in;

/* Step 1, the breaker: DROP, RELEASE, LOOKUP, HOLD, RETRY or PASS. */
sl_admit_step sl_admit_breaker(const sl_admit_in *in);

/* Step 2, the limits (the breaker passed): LIMITER, PAUSE_ASK, LOOKUP,
 * PAUSE_WAIT or CLAIM. */
sl_admit_step sl_admit_limits(const sl_admit_in *in);

typedef enum {
  SL_CALL_DROP,      /* closing */
  SL_CALL_RELEASE,   /* its partition went away: let go, uncalled */
  SL_CALL_RECLAIM,   /* its claim may be lost: claim again first */
  SL_CALL_SOLO_WAIT, /* a solo run is under way or pending: wait, uncounted, in order */
  SL_CALL_COUNT,     /* its start is counted first */
  SL_CALL_GO,        /* called */
} sl_call_step;

typedef struct {
  int closing, stale;
  int claim_stale; /* a renewal found its claim lost, or none confirmed it for a lease */
  int solo_busy;   /* a solo run is under way, or another job waits to run alone */
  int counted;     /* its start is counted (or could not be: not again) */
  int64_t max_starts;
} sl_call_in;

/* Step 3: what a job that passed the limits (and holds its claim, if the
 * stage claims) does. */
sl_call_step sl_admit_call(const sl_call_in *in);

typedef enum {
  SL_START_DROP,      /* closing */
  SL_START_UNCOUNTED, /* the count failed: runs all the same, uncounted (sl_admit_call) */
  SL_START_RELEASE,   /* its partition went away meanwhile: the start is taken back */
  SL_START_POISON,    /* started more than max_starts times: a dead letter, uncalled */
  SL_START_GO,        /* called now, at full concurrency */
  SL_START_SOLO_WAIT, /* waits for a solo run, uncounted */
  SL_START_ALONE,     /* its last chance: runs alone once nothing else runs */
} sl_start_step;

typedef struct {
  int closing, stale, stopping;
  long long starts;   /* its starts so far, this one included (< 1: not counted) */
  int64_t max_starts; /* stage.max_starts */
  int solo;           /* a solo run is under way */
  int pending;        /* another job waits to run alone */
} sl_start_in;

/* Step 4: a job's start count came back. */
sl_start_step sl_admit_started(const sl_start_in *in);

/* 1 when a start count marks a suspect worth a line in the log (it started
 * before without finishing, and does not run alone). */
int sl_admit_suspect(long long starts, int64_t max_starts);

/* 1 when the job waiting to run alone may start: no call runs, no count is
 * unanswered, and no other job holds a count. */
int sl_admit_solo_ready(int64_t calls, int64_t counting, int64_t counted);

const char *sl_admit_step_name(sl_admit_step s);

#endif
