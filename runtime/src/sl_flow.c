/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_flow.c — the limits on a stage's work in flight (see sl_flow.h).
 */
#include "sluice/sl_flow.h"

int64_t sl_flow_resume_mark(int64_t max) {
  if (max <= 0) return 0;
  return max - (max / 5 + (max % 5 != 0)); /* max - ceil(max / 5) */
}

sl_flow_action sl_flow_next(const sl_flow_limits *l, int paused, int64_t messages, int64_t bytes,
                            int *by_bytes) {
  if (!l) return SL_FLOW_KEEP;
  int over_m = l->max_messages > 0 && messages >= l->max_messages;
  int over_b = l->max_bytes > 0 && bytes >= l->max_bytes;
  if (!paused) {
    if (!over_m && !over_b) return SL_FLOW_KEEP;
    if (by_bytes) *by_bytes = !over_m;
    return SL_FLOW_PAUSE;
  }
  int64_t mark_m = l->resume_messages > 0 && l->resume_messages < l->max_messages
                       ? l->resume_messages
                       : sl_flow_resume_mark(l->max_messages);
  int low_m = l->max_messages <= 0 || messages <= mark_m;
  int low_b = l->max_bytes <= 0 || bytes <= sl_flow_resume_mark(l->max_bytes);
  return low_m && low_b ? SL_FLOW_RESUME : SL_FLOW_KEEP;
}
