/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_rebalance.c — one consumer group's rebalance (sl_rebalance.h): pure,
 * tested on its own (tests/unit/test_rebalance.c).
 */
#include "sluice/sl_rebalance.h"

static sl_rebal_step handover(const sl_rebal *r) {
  return r->lost ? SL_REBAL_HANDOVER_LOST : SL_REBAL_HANDOVER;
}

sl_rebal_step sl_rebal_revoke(sl_rebal *r, const sl_rebal_revoke_in *in) {
  if (r->cooperative) { /* this generation's assign, then the rejoin's */
    r->rejoin_assigns = in->lost ? 1 : 2;
    r->rejoin_until_ms = in->now_ms + in->revoke_wait_ms + in->session_ms;
  }
  r->revoking = 1;
  r->lost = in->lost;
  if (in->pending == 0 || in->lost || in->closing || in->revoke_wait_ms <= 0) return handover(r);
  return SL_REBAL_WAIT;
}

sl_rebal_step sl_rebal_progress(const sl_rebal *r, int64_t pending) {
  if (!r->revoking || pending > 0) return SL_REBAL_WAIT;
  return handover(r);
}

sl_rebal_step sl_rebal_timeout(const sl_rebal *r) { return handover(r); }

void sl_rebal_finished(sl_rebal *r) {
  r->revoking = 0;
  r->lost = 0;
}

int sl_rebal_assign(sl_rebal *r) {
  if (r->rejoin_assigns > 0) r->rejoin_assigns--;
  return r->revoking;
}

int sl_rebal_may_commit(sl_rebal *r, int64_t now_ms) {
  if (r->rejoin_assigns > 0 && now_ms < r->rejoin_until_ms) return 0;
  r->rejoin_assigns = 0;
  return 1;
}
