/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_jobstate.c — the transitions of a stage's jobs (sl_jobstate.h): one
 * table, read by the runtime before every move and by its unit test.
 */
#include "sluice/sl_jobstate.h"

#define B(s) (1u << (s))
/* what any state before the outcome may end as */
#define ENDS (B(SL_JOB_RELEASED) | B(SL_JOB_DROPPED))

static const unsigned next[SL_JOB_NSTATES] = {
    [SL_JOB_NEW] = B(SL_JOB_PARKED) | B(SL_JOB_WAITING) | B(SL_JOB_KEYQ) | B(SL_JOB_LOOKUP) |
                   B(SL_JOB_GATE) | ENDS,
    [SL_JOB_PARKED] = B(SL_JOB_WAITING) | B(SL_JOB_KEYQ) | B(SL_JOB_LOOKUP) | B(SL_JOB_GATE) | ENDS,
    [SL_JOB_WAITING] = B(SL_JOB_KEYQ) | B(SL_JOB_LOOKUP) | B(SL_JOB_GATE) | ENDS,
    [SL_JOB_KEYQ] = B(SL_JOB_LOOKUP) | B(SL_JOB_GATE) | ENDS,
    [SL_JOB_LOOKUP] = B(SL_JOB_GATE) | B(SL_JOB_REUSE) | ENDS,
    /* the gate: a lookup first (the breaker is open, a pause), the call, an
     * outcome without one (poison, the breaker open without hold), stored
     * outputs its claim or count read, or the end another replica wrote */
    [SL_JOB_GATE] = B(SL_JOB_LOOKUP) | B(SL_JOB_CALL) | B(SL_JOB_OUTCOME) | B(SL_JOB_REUSE) |
                    B(SL_JOB_FINISHED) | ENDS,
    [SL_JOB_CLAIM] =
        B(SL_JOB_CALL) | B(SL_JOB_OUTCOME) | B(SL_JOB_REUSE) | B(SL_JOB_FINISHED) | ENDS,
    /* a call: on the loop or start()ed (its outcome), or handed to a worker;
     * on a worker: its outcome, or (its claim lost while it queued) the
     * claim again; dropped only while closing */
    [SL_JOB_CALL] = B(SL_JOB_OUTCOME) | B(SL_JOB_POOL) | B(SL_JOB_DROPPED),
    [SL_JOB_POOL] = B(SL_JOB_OUTCOME) | B(SL_JOB_CLAIM) | B(SL_JOB_DROPPED),
    /* an outcome: stored, run again in place (the claim again), or produced
     * and finished */
    [SL_JOB_OUTCOME] = B(SL_JOB_STORED) | B(SL_JOB_CLAIM) | B(SL_JOB_FINISHED) | B(SL_JOB_DROPPED),
    [SL_JOB_STORED] = B(SL_JOB_FINISHED) | B(SL_JOB_DROPPED),
    [SL_JOB_REUSE] = B(SL_JOB_FINISHED) | B(SL_JOB_DROPPED),
};

int sl_job_may(sl_job_state from, sl_job_state to) {
  if ((unsigned)from >= SL_JOB_NSTATES || (unsigned)to >= SL_JOB_NSTATES) return 0;
  return (next[from] & B(to)) != 0;
}

int sl_job_terminal(sl_job_state s) {
  return s == SL_JOB_FINISHED || s == SL_JOB_RELEASED || s == SL_JOB_DROPPED;
}

const char *sl_job_state_name(sl_job_state s) {
  static const char *const names[SL_JOB_NSTATES] = {
      "new",  "parked",  "waiting", "keyq",  "lookup",   "gate",     "claim",  "call",
      "pool", "outcome", "stored",  "reuse", "finished", "released", "dropped"};
  return (unsigned)s < SL_JOB_NSTATES ? names[s] : "?";
}
