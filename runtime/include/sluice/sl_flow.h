/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_flow.h — when a stage stops and resumes fetching: its limits on work
 * in flight, by messages (stage.max_in_flight) and by bytes
 * (stage.max_bytes_in_flight: each job's message plus what the stage holds
 * for it, such as the answer stt fetched).
 *
 * Fetching stops once either limit is reached and resumes when both are
 * down to their resume mark, 80% of the limit unless given (hysteresis:
 * not a pause per message). A
 * limit is checked after a job is taken, never before, so one job larger
 * than the byte limit still runs, alone: nothing else is taken until it is
 * over, and then fetching resumes.
 *
 * Pure: no Kafka, no state of its own. @locality any thread.
 */
#ifndef SLUICE_SL_FLOW_H
#define SLUICE_SL_FLOW_H

#include <stdint.h>

typedef struct {
  int64_t max_messages; /* messages taken: stage.max_in_flight + stage.prefetch; <= 0: no limit */
  int64_t max_bytes;    /* stage.max_bytes_in_flight; <= 0: no limit */
  int64_t resume_messages; /* > 0: resume at or below this many messages (the stage: when
                            * half its prefetch has started); else 80% of max_messages */
} sl_flow_limits;

typedef enum {
  SL_FLOW_KEEP = 0, /* stay as it is */
  SL_FLOW_PAUSE,    /* a limit is reached: stop fetching */
  SL_FLOW_RESUME,   /* both are below their resume mark: fetch again */
} sl_flow_action;

/* What to do with `messages` jobs holding `bytes` in flight, fetching
 * being `paused` (by these limits) or not. On SL_FLOW_PAUSE, *by_bytes (may
 * be NULL) is 1 when the byte limit alone was reached, else 0. */
sl_flow_action sl_flow_next(const sl_flow_limits *l, int paused, int64_t messages, int64_t bytes,
                            int *by_bytes);

/* The level at or below which a paused limit lets fetching resume: 80% of
 * max, rounded down, and always below max (max 1 resumes at 0). */
int64_t sl_flow_resume_mark(int64_t max);

#endif
