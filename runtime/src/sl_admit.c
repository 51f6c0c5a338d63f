/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_admit.c — the provider gate's decisions (sl_admit.h): pure functions
 * of what the gate knows, tested on their own (tests/unit/test_admit.c).
 */
#include "sluice/sl_admit.h"

#include <stddef.h>

sl_admit_step sl_admit_breaker(const sl_admit_in *in) {
  if (in->closing) return SL_ADMIT_DROP;
  if (in->stale) return SL_ADMIT_RELEASE;
  if (!in->provider || (!in->held && in->breaker_allows)) return SL_ADMIT_PASS;
  /* open (or behind those already held): stored outputs are answered, open or not */
  if (!in->looked_up) return SL_ADMIT_LOOKUP;
  if (!in->hold) return SL_ADMIT_RETRY;
  return in->stopping ? SL_ADMIT_RELEASE : SL_ADMIT_HOLD;
}

sl_admit_step sl_admit_limits(const sl_admit_in *in) {
  if (!in->provider) return SL_ADMIT_CLAIM;
  if (in->rate) return SL_ADMIT_LIMITER;
  if (!in->pause_fresh) return SL_ADMIT_PAUSE_ASK;
  if (in->pause_left_ms <= 0) return SL_ADMIT_CLAIM;
  /* stored outputs are answered, paused or not */
  return in->looked_up ? SL_ADMIT_PAUSE_WAIT : SL_ADMIT_LOOKUP;
}

sl_call_step sl_admit_call(const sl_call_in *in) {
  if (in->closing) return SL_CALL_DROP;
  if (in->stale) return SL_CALL_RELEASE;
  if (in->claim_stale) return SL_CALL_RECLAIM;
  if (in->solo_busy) return SL_CALL_SOLO_WAIT; /* behind a solo run, in order */
  if (!in->counted && in->max_starts > 0) return SL_CALL_COUNT;
  return SL_CALL_GO;
}

/* A suspect (it started before without finishing) runs alone only at its
 * last chance, the start that decides whether it is poison: a process's
 * death kills every call it had running, so most suspects are collateral
 * and run at full concurrency; a poison input dies beside others until its
 * last chance, and that death, alone, is its own. */
static int last_chance(long long starts, int64_t max_starts) {
  return starts >= 2 && starts >= max_starts;
}

sl_start_step sl_admit_started(const sl_start_in *in) {
  if (in->closing) return SL_START_DROP;
  if (in->stale) return SL_START_RELEASE;
  if (in->starts < 1) return SL_START_UNCOUNTED;
  if (in->starts > in->max_starts) return SL_START_POISON;
  int alone = last_chance(in->starts, in->max_starts);
  if (!alone && !in->solo) return SL_START_GO;
  if (!alone || in->pending || in->solo || in->stopping) return SL_START_SOLO_WAIT;
  return SL_START_ALONE;
}

int sl_admit_suspect(long long starts, int64_t max_starts) {
  return starts >= 2 && !last_chance(starts, max_starts);
}

int sl_admit_solo_ready(int64_t calls, int64_t counting, int64_t counted) {
  return calls == 0 && counting == 0 && counted <= 1;
}

const char *sl_admit_step_name(sl_admit_step s) {
  static const char *const names[] = {"drop", "release", "lookup",    "hold",       "retry",
                                      "pass", "limiter", "pause_ask", "pause_wait", "claim"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}
