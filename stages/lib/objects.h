/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/objects.h — the objects a plugin reads and writes: the uploaded
 * answer fetched before the call (stt; a step reading "@object"), in the
 * answers' bucket, and the one a step stores (host->out_object) under
 * derived/, in the derived target (s3.derived_bucket, s3.derived_endpoint),
 * whence a later stage fetches it. lib/plugin_driver.h does the requests:
 * sl__plugin_process (sync: 1) blocking signed requests on the worker
 * thread, one storage connection (kept open) per thread; sl__plugin_start
 * (sync: 0) presigned GETs and PUTs on the stage's loop, so no thread waits
 * on storage. Storage faults become the stage's outcome the same way
 * everywhere (sl__storage_fault): unreachable, 5xx, 429, 408 and a refused
 * signature (403/401: this replica's clock or keys) are retried; a missing
 * object or one over max_bytes fails for good.
 */
#ifndef SLUICE_LIB_OBJECTS_H
#define SLUICE_LIB_OBJECTS_H

#include <stddef.h>

#include "sluice/sl_plugin.h"
#include "sluice/sl_s3.h"
#include "sluice/sl_stage.h"

/* s3 is borrowed (the stage's settings) and must outlive it. */
typedef struct sl__objects {
  sl_s3_conf *s3;
  sl_s3_target target;  /* the answers' bucket */
  sl_s3_target derived; /* keys under SL_S3_DERIVED_PREFIX: s3.derived_bucket */
  size_t max_bytes;
  long timeout_ms;      /* requests on the loop */
  struct sl_tls *conns; /* sync: one sl_s3_conn per worker thread */
  sl_sigv4 *loop_sig;   /* on the loop: the loop's */
} sl__objects;
/* One signer (or connection) is made at once, so bad s3 settings fail at
 * start-up. */
int sl__objects_init(sl__objects *o, sl_s3_conf *s3, size_t max_bytes, long timeout_ms, int sync,
                     char *err, size_t errlen);
void sl__objects_free(sl__objects *o); /* NULL-safe */

/* Where key lives: a derived object in the derived target, an answer in
 * the answers' bucket. */
const sl_s3_target *sl__objects_target(const sl__objects *o, const char *key);

/* Storage's answer to a GET or PUT of key (rc, HTTP status) as the stage's
 * outcome in res; why is the message. */
void sl__storage_fault(sl_result *res, int rc, long status, const char *key, const char *why);

/* The fetched object key (data, len bytes; borrowed) as the plugin's input. */
void sl__give_object(sl_plugin_input *in, const char *key, const void *data, size_t len);

/* Content type for a file name's extension ("audio/wav"), or
 * "application/octet-stream". */
const char *sl__audio_content_type(const char *name);

#endif
