/* SPDX-License-Identifier: Apache-2.0 */
/*
 * webhook.h — POST /v1/storage-events, the storage-event webhook of `sluice
 * presign` (internal to the presign stage; see webhook.c and the "Storage
 * events" section of docs/security.md).
 */
#ifndef SLUICE_PRESIGN_WEBHOOK_H
#define SLUICE_PRESIGN_WEBHOOK_H

#include <stddef.h>
#include <stdint.h>
#include <librdkafka/rdkafka.h>
#include <uv.h>

#include "sluice/sl_aredis.h"
#include "sluice/sl_conf.h"
#include "sluice/sl_http.h"
#include "sluice/sl_stage.h"

typedef struct {
  char *secret;          /* "" = webhook off (404) */
  char *secret_previous; /* also accepted while rotating, or "" */
  int64_t tolerance_s;
  int64_t replay_window_s;
  int64_t max_body;
} sl__webhook_conf;

extern const sl_conf_entry sl__webhook_table[];
extern const size_t sl__webhook_table_len;

typedef struct sl__webhook sl__webhook;

/* Creates the endpoint's state when c->secret is set: it writes to
 * cc->topic_storage_events with presign's producer (*producer: the one
 * presign holds now, which it replaces after a fatal error) and keeps its
 * replay cache in presign's Redis (both lent, with their replies and
 * delivery reports on presign's loop; on_fatal(fatal_ud) when the producer
 * failed for good). With no secret *out is NULL and returns 0: the route then
 * answers 404. c, cc, producer and redis are borrowed and must outlive it
 * (until done runs, see sl__webhook_free). */
int sl__webhook_new(sl__webhook **out, const sl__webhook_conf *c, const sl_common_conf *cc,
                    rd_kafka_t *const *producer, sl_aredis *redis, void (*on_fatal)(void *ud),
                    void *fatal_ud, char *err, size_t errlen);

/* Serves req when its path is /v1/storage-events: returns 1 (answered now
 * or later), else 0 (not ours). w may be NULL (webhook off). */
int sl__webhook_handle(sl__webhook *w, sl_http_req *req);

/* Stops: the deliveries in flight finish (their Redis replies and delivery
 * reports arrive on the loop, within the Kafka timeout), then w is freed and
 * done(ud) runs (may be NULL): from then on the borrowed producer and Redis
 * are not used. Never blocks. NULL-safe. */
void sl__webhook_free(sl__webhook *w, void (*done)(void *ud), void *ud);

/* ---- pure part (unit-tested; the signature is lib/webhook_sig.h) ---- */

/* Validates an event body with the parser ingest uses and brings it into the
 * AWS Records format. AWS bodies ({"Records":…}) pass as they are (*out
 * NULL: produce the body itself); Cloudflare R2 event notifications (one
 * object, or an array of them from a batch) are rewritten (*out malloc'd,
 * *outlen). *nrec is the number of records (0 for s3:TestEvent), label
 * "<bucket>/<key>" of the first record (for logs). 0, or SL_EPARSE with
 * why set, SL_ETOOBIG (more than max_records records), SL_ENOMEM. */
int sl__webhook_normalize(const void *body, size_t len, size_t max_records, char **out,
                          size_t *outlen, size_t *nrec, char *label, size_t keylen, char *why,
                          size_t whylen);

#endif
