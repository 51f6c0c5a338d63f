/*
 * sl_aredis.c — async Redis with reconnect (see sl_aredis.h).
 *
 * hiredis owns the redisAsyncContext: after a failed connect or a
 * disconnect it frees the context itself, so we only drop our pointer in
 * those callbacks and arm the reconnect timer.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_aredis.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_redis.h"

#include <hiredis/async.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-function"
#include <hiredis/adapters/libuv.h>
#pragma GCC diagnostic pop

struct sl_aredis {
  uv_loop_t *loop;
  uv_timer_t timer;
  redisAsyncContext *ac;
  char host[256];
  int port, db;
  int connected;
  int closing;
  int warned;
};

typedef struct {
  sl_aredis_cb cb;
  void *ud;
} pending;

static sl_metric *m_errors;

static void reconnect(sl_aredis *r);

static void on_timer(uv_timer_t *t) { reconnect(t->data); }

static void schedule(sl_aredis *r) {
  if (!r->closing) uv_timer_start(&r->timer, on_timer, 500, 0);
}

static void on_connect(const redisAsyncContext *ac, int status) {
  sl_aredis *r = ac->data;
  if (status != REDIS_OK) {
    if (!r->warned++)
      sl_log(SL_LOG_WARN, NULL, "redis %s:%d: %s (retrying every 500 ms)", r->host, r->port,
             ac->errstr);
    sl_metric_add(m_errors, 1);
    r->ac = NULL;
    r->connected = 0;
    schedule(r);
    return;
  }
  if (r->warned) sl_log(SL_LOG_INFO, NULL, "redis %s:%d: connected", r->host, r->port);
  r->warned = 0;
  r->connected = 1;
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  sl_aredis *r = ac->data;
  r->ac = NULL;
  r->connected = 0;
  if (status != REDIS_OK && !r->closing) {
    sl_metric_add(m_errors, 1);
    sl_log(SL_LOG_WARN, NULL, "redis %s:%d: disconnected: %s", r->host, r->port, ac->errstr);
  }
  schedule(r);
}

static void reconnect(sl_aredis *r) {
  if (r->closing || r->ac) return;
  redisAsyncContext *ac = redisAsyncConnect(r->host, r->port);
  if (!ac || ac->err) {
    if (!r->warned++)
      sl_log(SL_LOG_WARN, NULL, "redis %s:%d: %s", r->host, r->port,
             ac ? ac->errstr : "out of memory");
    if (ac) redisAsyncFree(ac);
    schedule(r);
    return;
  }
  ac->data = r;
  if (redisLibuvAttach(ac, r->loop) != REDIS_OK) {
    redisAsyncFree(ac);
    schedule(r);
    return;
  }
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
  r->ac = ac;
  if (r->db) redisAsyncCommand(ac, NULL, NULL, "SELECT %d", r->db);
}

int sl_aredis_new(sl_aredis **out, uv_loop_t *loop, const char *url) {
  if (!out || !loop || !url) return SL_EINVAL;
  sl_aredis *r = calloc(1, sizeof *r);
  if (!r) return SL_ENOMEM;
  if (sl_redis_parse_url(url, r->host, sizeof r->host, &r->port, &r->db) != 0) {
    free(r);
    return SL_EINVAL;
  }
  m_errors = sl__redis_errors();
  r->loop = loop;
  uv_timer_init(loop, &r->timer);
  r->timer.data = r;
  reconnect(r);
  *out = r;
  return 0;
}

static void on_timer_closed(uv_handle_t *h) { free(h->data); }

void sl_aredis_free(sl_aredis *r) {
  if (!r) return;
  r->closing = 1;
  uv_timer_stop(&r->timer);
  if (r->ac) {
    redisAsyncContext *ac = r->ac;
    r->ac = NULL;
    redisAsyncFree(ac); /* pending callbacks run now with a NULL reply */
  }
  uv_close((uv_handle_t *)&r->timer, on_timer_closed);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv) {
  (void)ac;
  pending *p = priv;
  redisReply *rep = reply;
  if (!rep || rep->type == REDIS_REPLY_ERROR) sl_metric_add(m_errors, 1);
  p->cb(rep, p->ud);
  free(p);
}

int sl_aredis_argv(sl_aredis *r, sl_aredis_cb cb, void *ud, int argc, const char **argv,
                   const size_t *lens) {
  if (!r) return SL_EINVAL;
  if (!r->ac || !r->connected) {
    sl_metric_add(m_errors, 1);
    return SL_EREDIS;
  }
  if (!cb) /* fire and forget */
    return redisAsyncCommandArgv(r->ac, NULL, NULL, argc, argv, lens) == REDIS_OK ? 0
                                                                                   : SL_EREDIS;
  pending *p = malloc(sizeof *p);
  if (!p) return SL_ENOMEM;
  p->cb = cb;
  p->ud = ud;
  if (redisAsyncCommandArgv(r->ac, on_reply, p, argc, argv, lens) != REDIS_OK) {
    free(p);
    return SL_EREDIS;
  }
  return 0;
}

int sl_aredis_connected(const sl_aredis *r) { return r && r->connected; }
