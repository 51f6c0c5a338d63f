/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sweep.h — ingest's reconciliation sweep: uploads whose storage event never
 * arrived (internal to ingest).
 *
 * Storage notifications are at most once: Versity Gateway sends an event
 * after answering the PUT and drops it when Kafka does not take it at once
 * ("failed to send kafka event"), so an upload that lands while the broker
 * restarts would wait for ever in awaiting_upload. Materialize keeps every
 * question still awaiting its upload in the Redis sorted set SL__PENDING
 * (member "<sid>/<no>", score = when it is next due, first its acceptance
 * time; removed once any later state is recorded). A sweep thread looks at
 * the members that are due, HEADs their objects, and for an object stored at
 * least ingest.sweep_grace_s before the oldest event ingest's group has not
 * read (or before now, when it has read them all), and whose upload ingest
 * has not recorded, writes the event the storage should have sent to
 * storage-events (keyed "<sid>/<no>", "eventSource": "sluice:sweep"). An
 * event waiting behind a backlog of ingest or of materialize is not lost,
 * and the sweep leaves it alone.
 * Ingest then judges it like any other event. When the real event was only
 * late, not lost, both reach ingest; the first one fixes the question's
 * upload time in the submission's hash (see ingest.c), so both give
 * byte-identical UploadCompleted messages and stt pays once.
 *
 * One replica sweeps per round (a Redis lock, sl:lock:ingest-sweep, held
 * for one interval). A question is looked at again after max(interval,
 * half its age, capped at an hour) and dropped from the set
 * ingest.sweep_max_age_s after its acceptance, or when its submission is gone.
 *
 * @locality its own thread: a blocking Redis connection, its own signer, an
 * idempotent producer whose deliveries it waits for each round, and a
 * reader of ingest's input group (sl_kafka_group_oldest).
 */
#ifndef SLUICE_INGEST_SWEEP_H
#define SLUICE_INGEST_SWEEP_H

#include <stdint.h>

#include "lib/view.h"
#include "sluice/sl_stage.h"
#include "sluice/sl_s3.h"

typedef struct {
  int64_t interval_s; /* 0: no sweep */
  int64_t grace_s;
  int64_t max_age_s;
  int64_t batch;
} sl__sweep_conf;

typedef struct sl__sweep sl__sweep;

/* Starts the sweep thread. All arguments are borrowed and must outlive the
 * sweep. *out is NULL (and 0 returned) when sc->interval_s is 0. */
int sl__sweep_start(sl__sweep **out, const sl__sweep_conf *sc, const sl_common_conf *cc,
                    const sl_s3_conf *s3, const sl_s3_target *target, char *err, size_t errlen);

/* Stops and joins the thread, frees everything. NULL-safe. */
void sl__sweep_stop(sl__sweep *s);

#endif
