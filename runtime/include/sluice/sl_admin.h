/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_admin.h — the operator endpoints every Sluice process serves:
 *   GET /healthz  200 while the process is alive
 *   GET /readyz   200 once sl_admin_set_ready(1), else 503
 *                 (both bodies name the pid: "ready pid=123")
 *   GET /metrics  Prometheus text (sl_metrics registry)
 *   PUT /loglevel body "debug|info|warn|error" changes the log level
 * It runs its own libuv loop on its own thread so a busy stage loop never
 * delays a probe. Start once per process; stop before exit.
 */
#ifndef SLUICE_SL_ADMIN_H
#define SLUICE_SL_ADMIN_H

typedef struct sl_admin sl_admin;

/* listen "host:port". Returns 0 or a negative code (bind failure). */
int sl_admin_start(sl_admin **out, const char *listen);
void sl_admin_set_ready(sl_admin *a, int ready); /* thread-safe, NULL-safe */
void sl_admin_stop(sl_admin *a);                 /* joins the thread; NULL-safe */

#endif
