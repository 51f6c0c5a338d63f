/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_lag.h — consumer lag as Kafka has it, queried off the loop by a
 * thread of its own (sl_stage_lag.c explains the gauges). The loop starts
 * it, tells it what is assigned whenever that changes, and stops it; the
 * gauges are set on the loop from the partitions (sl_stage_part.h) and the
 * gate's state (sl_stage_gate.h).
 */
#ifndef SLUICE_SL_STAGE_LAG_H
#define SLUICE_SL_STAGE_LAG_H

#include "sl_stage_gate.h"
#include "sl_stage_part.h"

/* at most this many per-partition lag series per process */
#define SL_LAG_SERIES_MAX 128

typedef struct sl_lagq sl_lagq;

/* Starts the lag thread (*out NULL with stage.lag_interval_ms 0): one
 * reader per group, gname[g] its id. Returns 0 or SL_E* with the reason in
 * err (then *out is NULL and nothing runs). */
int sl__lag_start(sl_lagq **out, sl_jobs *R, sl_parts *P, const sl_gate *G,
                  const char *const gname[2], int ngroups, char *err, size_t errlen);
/* The assignment changed: a[g] what group g has assigned now (NULL: none). */
void sl__lag_assigned(sl_lagq *q, const rd_kafka_topic_partition_list_t *const a[2]);
/* Tells the thread to stop, and the loop to take no more of its answers;
 * returns at once (a query under way goes on until its timeout). NULL-safe. */
void sl__lag_stop(sl_lagq *q);
/* Stops the thread and joins it (waits for a query under way: at most its
 * timeout), frees its clients and closes its handle (freed when the loop
 * runs again). Before the loop's last walk. NULL-safe. */
void sl__lag_free(sl_lagq *q);

#endif
