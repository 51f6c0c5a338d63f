/* SPDX-License-Identifier: Apache-2.0 */
/*
 * quota.c — see quota.h. One script per create: both limits read from the
 * tenant's settings hash, both day counters read, the answers counter
 * incremented only when neither limit refuses.
 */
#define _POSIX_C_SOURCE 200809L
#include "quota.h"

#include "sluice/sl_err.h"
#include "sluice/sl_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* KEYS: settings, answers of the day, cost of the day; ARGV: n, the day's
 * TTL (s). {0} counted, {1, used, limit} answers refused, {2, spent, budget}
 * cost refused (numbers as strings) */
static const char quota_lua[] =
    "local n = tonumber(ARGV[1])\n"
    "local lim, bud = unpack(redis.call('HMGET', KEYS[1], 'answers_per_day', 'cost_per_day'))\n"
    "lim, bud = tonumber(lim), tonumber(bud)\n"
    "if bud then\n"
    "  local spent = tonumber(redis.call('GET', KEYS[3]) or '0') or 0\n"
    "  if spent >= bud then return {2, tostring(spent), tostring(bud)} end\n"
    "end\n"
    "local used = tonumber(redis.call('GET', KEYS[2]) or '0') or 0\n"
    "if lim and used + n > lim then return {1, tostring(used), tostring(lim)} end\n"
    "if redis.call('INCRBY', KEYS[2], n) == n then redis.call('EXPIRE', KEYS[2], ARGV[2]) end\n"
    "return {0}\n";

/* KEYS: a day's answers counter; ARGV: n */
static const char undo_lua[] =
    "if redis.call('DECRBY', KEYS[1], ARGV[1]) <= 0 then redis.call('DEL', KEYS[1]) end\n"
    "return 0\n";

static sl_redis_script s_quota, s_undo;

void sl__quota_init(void) {
  sl_redis_script_init(&s_quota, quota_lua);
  sl_redis_script_init(&s_undo, undo_lua);
}

typedef struct {
  sl__quota_cb cb;
  void *ud;
  char tenant[SL_TENANT_MAX + 1];
  int64_t now_ms;
  sl__quota_verdict v;
} check;

static const char *str_at(const redisReply *r, size_t i) {
  return r->elements > i && r->element[i]->type == REDIS_REPLY_STRING ? r->element[i]->str : "?";
}

static void on_quota(redisReply *r, void *ud) {
  check *c = ud;
  sl__quota_verdict *v = &c->v;
  long long code = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                           r->element[0]->type == REDIS_REPLY_INTEGER
                       ? r->element[0]->integer
                       : -1;
  v->retry_after_s = (sl_tenant_day_left_ms(c->now_ms) + 999) / 1000;
  v->state = code == 0                ? SL__QUOTA_COUNTED
             : code == 1 || code == 2 ? SL__QUOTA_REFUSED
                                      : SL__QUOTA_UNCHECKED;
  if (v->state != SL__QUOTA_COUNTED) v->counted[0] = '\0';
  if (code == 1) {
    snprintf(v->message, sizeof v->message,
             "tenant %.64s has %s of its %s answers for today (UTC) accepted; this submission "
             "has %ld; the quota refills in %lld s",
             c->tenant, str_at(r, 1), str_at(r, 2), v->n, (long long)v->retry_after_s);
  } else if (code == 2) {
    snprintf(v->message, sizeof v->message,
             "tenant %.64s has spent %s of its %s provider cost units for today (UTC); the "
             "budget refills in %lld s",
             c->tenant, str_at(r, 1), str_at(r, 2), (long long)v->retry_after_s);
  } else if (code != 0) { /* Redis unavailable: the create goes on, unchecked and uncounted */
    if (r && r->type == REDIS_REPLY_ERROR) sl_log(SL_LOG_WARN, NULL, "quota script: %s", r->str);
  }
  c->cb(c->ud, v);
  free(c);
}

int sl__quota_check(sl_aredis *r, const char *tenant, long n, int64_t now_ms, sl__quota_cb cb,
                    void *ud) {
  char conf[SL_TENANT_KEY_MAX], cost[SL_TENANT_KEY_MAX], nb[24], ttl[24];
  check *c = calloc(1, sizeof *c);
  if (!c) return SL_ENOMEM;
  if (sl_tenant_conf_key(tenant, conf) || sl_tenant_day_key(tenant, now_ms, "cost", cost) ||
      sl_tenant_day_key(tenant, now_ms, "answers", c->v.counted) || n < 1) {
    free(c);
    return SL_EINVAL;
  }
  c->cb = cb, c->ud = ud, c->now_ms = now_ms, c->v.n = n;
  snprintf(c->tenant, sizeof c->tenant, "%s", tenant);
  snprintf(nb, sizeof nb, "%ld", n);
  snprintf(ttl, sizeof ttl, "%d", SL_TENANT_DAY_TTL_S);
  const char *argv[] = {conf, c->v.counted, cost, nb, ttl};
  int rc = sl_aredis_eval(r, on_quota, c, &s_quota, 3, 5, argv, NULL);
  if (rc) free(c);
  return rc;
}

void sl__quota_undo(sl_aredis *r, const sl__quota_verdict *v) {
  if (!v || v->state != SL__QUOTA_COUNTED || !v->counted[0] || v->n < 1) return;
  char nb[24];
  snprintf(nb, sizeof nb, "%ld", v->n);
  const char *argv[] = {v->counted, nb};
  sl_aredis_eval(r, NULL, NULL, &s_undo, 1, 2, argv, NULL);
}
