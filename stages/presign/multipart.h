/* SPDX-License-Identifier: Apache-2.0 */
/*
 * multipart.h — the Companion-style S3 multipart endpoints of `sluice
 * presign` (internal to the presign stage; see multipart.c).
 */
#ifndef SLUICE_PRESIGN_MULTIPART_H
#define SLUICE_PRESIGN_MULTIPART_H

#include <uv.h>

#include "sluice/sl_aredis.h"
#include "sluice/sl_http.h"
#include "sluice/sl_s3.h"

typedef struct sl__mpu sl__mpu;

/* Creates the endpoints' state and its HTTP client on loop. redis (the
 * token checks), sig, t and s3 are borrowed: presign's, and they must
 * outlive it (until done runs, see sl__mpu_free). part_expiry_s: lifetime
 * of part URLs. */
int sl__mpu_new(sl__mpu **out, uv_loop_t *loop, sl_sigv4 *sig, const sl_s3_target *t,
                const sl_s3_conf *s3, sl_aredis *redis, unsigned part_expiry_s);

/* Serves req when its path is one of the multipart routes (/s3/multipart…,
 * also under /v1): returns 1 (answered now or later), else 0 (not ours). */
int sl__mpu_handle(sl__mpu *m, sl_http_req *req);

/* Stops: requests in flight finish (their storage calls complete), then the
 * HTTP client is closed, m is freed and done(ud) runs (may be NULL): from
 * then on the borrowed Redis is not used. Run the loop until it has no more
 * work. NULL-safe. */
void sl__mpu_free(sl__mpu *m, void (*done)(void *ud), void *ud);

#endif
