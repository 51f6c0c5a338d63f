/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_admin.c — /healthz, /readyz, /metrics and /loglevel on a private loop
 * thread. Shutdown uses a uv_async_t: the owner thread signals, the loop
 * thread closes the server and its handles, the owner joins.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_admin.h"
#include "sluice/sl_err.h"
#include "sluice/sl_http.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

struct sl_admin {
  uv_loop_t loop;
  uv_async_t stop;
  sl_http_server *srv;
  pthread_t th;
  atomic_int ready;
};

static void handle(sl_http_req *req, void *ud) {
  sl_admin *a = ud;
  const char *m = sl_http_req_method(req), *p = sl_http_req_path(req);
  char body[64];
  int n;
  if (strcmp(p, "/healthz") == 0) {
    n = snprintf(body, sizeof body, "ok pid=%ld\n", (long)getpid());
    sl_http_respond(req, 200, "text/plain", NULL, body, (size_t)n);
  } else if (strcmp(p, "/readyz") == 0) {
    int ready = atomic_load(&a->ready);
    n = snprintf(body, sizeof body, "%s pid=%ld\n", ready ? "ready" : "not ready", (long)getpid());
    sl_http_respond(req, ready ? 200 : 503, "text/plain", NULL, body, (size_t)n);
  } else if (strcmp(p, "/metrics") == 0) {
    char *text = NULL;
    size_t len = 0;
    if (sl_metrics_render(&text, &len) != 0) {
      sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
      return;
    }
    sl_http_respond(req, 200, "text/plain; version=0.0.4", NULL, text, len);
    free(text);
  } else if (strcmp(p, "/loglevel") == 0 && strcmp(m, "PUT") == 0) {
    size_t blen;
    const char *b = sl_http_req_body(req, &blen);
    char lvl[16] = {0};
    if (blen < sizeof lvl) memcpy(lvl, b, blen);
    lvl[strcspn(lvl, "\r\n ")] = '\0';
    if (sl_log_set_level(lvl) != 0)
      sl_http_respond_error(req, 400, "invalid_level", "level must be debug, info, warn or error",
                            NULL);
    else
      sl_http_respond(req, 204, NULL, NULL, NULL, 0);
  } else {
    sl_http_respond_error(req, 404, "not_found", "no such endpoint", NULL);
  }
}

static void on_stop(uv_async_t *h) {
  sl_admin *a = h->data;
  sl_http_server_free(a->srv);
  a->srv = NULL;
  uv_close((uv_handle_t *)&a->stop, NULL);
}

static void *run(void *arg) {
  sl_admin *a = arg;
  uv_run(&a->loop, UV_RUN_DEFAULT);
  return NULL;
}

int sl_admin_start(sl_admin **out, const char *listen) {
  if (!out || !listen) return SL_EINVAL;
  sl_admin *a = calloc(1, sizeof *a);
  if (!a) return SL_ENOMEM;
  int rc = uv_loop_init(&a->loop);
  if (rc) {
    free(a);
    return rc;
  }
  rc = sl_http_server_new(&a->srv, &a->loop, listen, NULL, handle, a);
  if (rc) {
    uv_run(&a->loop, UV_RUN_DEFAULT);
    uv_loop_close(&a->loop);
    free(a);
    return rc;
  }
  uv_async_init(&a->loop, &a->stop, on_stop);
  a->stop.data = a;
  if (pthread_create(&a->th, NULL, run, a) != 0) {
    on_stop(&a->stop);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    uv_loop_close(&a->loop);
    free(a);
    return SL_ENOMEM;
  }
  *out = a;
  return 0;
}

void sl_admin_set_ready(sl_admin *a, int ready) {
  if (a) atomic_store(&a->ready, ready);
}

void sl_admin_stop(sl_admin *a) {
  if (!a) return;
  uv_async_send(&a->stop);
  pthread_join(a->th, NULL);
  uv_loop_close(&a->loop);
  free(a);
}
