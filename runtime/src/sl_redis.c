/*
 * sl_redis.c — see sl_redis.h.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_redis.h"
#include "sluice/sl_err.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_tls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sl_redis {
  char host[256];
  int port;
  int db;
  redisContext *c;
};

static sl_metric *m_errors;

sl_metric *sl__redis_errors(void) {
  return sl_metrics_counter("sluice_redis_errors_total", NULL,
                            "Redis connection and command errors");
}

int sl_redis_parse_url(const char *url, char *host, size_t hostlen, int *port, int *db) {
  if (!url || !host || !port || !db) return SL_EINVAL;
  const char *p = url;
  if (strncmp(p, "redis://", 8) == 0) p += 8;
  const char *colon = strchr(p, ':'), *slash = strchr(p, '/');
  if (colon && slash && slash < colon) colon = NULL;
  size_t hl = colon ? (size_t)(colon - p) : slash ? (size_t)(slash - p) : strlen(p);
  if (hl == 0 || hl >= hostlen) return SL_EINVAL;
  memcpy(host, p, hl);
  host[hl] = '\0';
  *port = 6379;
  *db = 0;
  if (colon) {
    char *end;
    long v = strtol(colon + 1, &end, 10);
    if (v <= 0 || v > 65535 || (*end && *end != '/')) return SL_EINVAL;
    *port = (int)v;
  }
  if (slash && slash[1]) {
    char *end;
    long v = strtol(slash + 1, &end, 10);
    if (v < 0 || v > 15 || *end) return SL_EINVAL;
    *db = (int)v;
  }
  return 0;
}

int sl_redis_new(sl_redis **out, const char *url) {
  if (!out || !url) return SL_EINVAL;
  sl_redis *r = calloc(1, sizeof *r);
  if (!r) return SL_ENOMEM;
  if (sl_redis_parse_url(url, r->host, sizeof r->host, &r->port, &r->db) != 0) {
    free(r);
    return SL_EINVAL;
  }
  m_errors = sl__redis_errors();
  *out = r;
  return 0;
}

void sl_redis_free(sl_redis *r) {
  if (!r) return;
  if (r->c) redisFree(r->c);
  free(r);
}

static int connect_(sl_redis *r, char *err, size_t errlen) {
  struct timeval tv = {2, 0};
  r->c = redisConnectWithTimeout(r->host, r->port, tv);
  if (!r->c || r->c->err) {
    snprintf(err, errlen, "redis %s:%d: %s", r->host, r->port,
             r->c ? r->c->errstr : "out of memory");
    if (r->c) redisFree(r->c);
    r->c = NULL;
    return SL_EREDIS;
  }
  redisSetTimeout(r->c, tv);
  if (r->db) {
    redisReply *rep = redisCommand(r->c, "SELECT %d", r->db);
    if (rep) freeReplyObject(rep);
  }
  return 0;
}

redisReply *sl_redis_argv(sl_redis *r, int argc, const char **argv, const size_t *lens,
                          char *err, size_t errlen) {
  if (!r->c && connect_(r, err, errlen) != 0) {
    sl_metric_add(m_errors, 1);
    return NULL;
  }
  redisReply *rep = redisCommandArgv(r->c, argc, argv, lens);
  if (!rep) {
    snprintf(err, errlen, "redis %s:%d: %s", r->host, r->port, r->c->errstr);
    redisFree(r->c);
    r->c = NULL;
    sl_metric_add(m_errors, 1);
    return NULL;
  }
  if (rep->type == REDIS_REPLY_ERROR) sl_metric_add(m_errors, 1);
  return rep;
}

static void *tls_create(void *arg, char *err, unsigned long errlen) {
  sl_redis *r = NULL;
  int rc = sl_redis_new(&r, arg);
  if (rc) snprintf(err, errlen, "redis.url: %s", sl_strerror(rc));
  return r;
}

static void tls_destroy(void *v) { sl_redis_free(v); }

int sl_redis_tls_new(sl_tls **out, const char *url) {
  if (!url) return SL_EINVAL;
  char host[256];
  int port, db;
  if (sl_redis_parse_url(url, host, sizeof host, &port, &db) != 0) return SL_EINVAL;
  return sl_tls_new(out, tls_create, tls_destroy, (void *)url);
}
