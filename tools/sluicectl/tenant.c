/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tenant.c — `sluicectl tenant set|show`: a tenant's settings and what it
 * used today (runtime/include/sluice/sl_tenant.h).
 *
 * set writes the tenant's settings hash in Redis (HSET; the value "none"
 * deletes a limit): presign reads it at every create, so a change applies
 * to the next create without a restart. show prints the settings and the
 * UTC day's counters (answers accepted, provider cost units spent).
 */
#define _POSIX_C_SOURCE 200809L
#include <hiredis/hiredis.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluicectl.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_tenant.h"
#include "sluice/sl_stage.h" /* sl_now_ms */

#include <jansson.h>

/* the settings `set` takes: option value, hash field, option, integer only */
typedef struct {
  const char *val, *field, *opt;
  int integer;
} setting;

/* v is "none", a whole number >= 0 (integer) or a finite number >= 0 */
static int value_ok(const char *v, int integer) {
  if (strcmp(v, "none") == 0) return 1;
  char *end;
  double d = strtod(v, &end);
  if (end == v || *end || !isfinite(d) || d < 0) return 0;
  return !integer || (d == floor(d) && d <= 1e15 && !strchr(v, '.') && !strchr(v, 'e'));
}

static int tenant_arg(const sc_opts *o, char key[SL_TENANT_KEY_MAX]) {
  if (o->nargs < 1 || sl_tenant_conf_key(o->args[0], key) != 0) {
    fprintf(stderr, "sluicectl: a tenant is 1 to %d printable characters without spaces\n",
            SL_TENANT_MAX);
    return -1;
  }
  return 0;
}

int sc_tenant_set(const sc_opts *o) {
  char key[SL_TENANT_KEY_MAX];
  if (tenant_arg(o, key)) return SC_EXIT_USAGE;
  setting s[] = {{o->weight, "weight", "--weight", 0},
                 {o->answers_per_day, "answers_per_day", "--answers-per-day", 1},
                 {o->cost_per_day, "cost_per_day", "--cost-per-day", 0}};
  int any = 0;
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
    if (!s[i].val) continue;
    any = 1;
    if (!value_ok(s[i].val, s[i].integer) ||
        (strcmp(s[i].field, "weight") == 0 && strtod(s[i].val, NULL) <= 0 &&
         strcmp(s[i].val, "none"))) {
      fprintf(stderr, "sluicectl: %s wants %s or none, not \"%s\"\n", s[i].opt,
              strcmp(s[i].field, "weight") == 0 ? "a number > 0"
              : s[i].integer                    ? "a whole number >= 0"
                                                : "a number >= 0",
              s[i].val);
      return SC_EXIT_USAGE;
    }
  }
  if (!any) {
    fprintf(stderr, "sluicectl: tenant set wants --weight, --answers-per-day or --cost-per-day\n");
    return SC_EXIT_USAGE;
  }
  struct sl_redis *c = sc_redis_connect(o->redis_url);
  if (!c) return SC_EXIT_FAIL;
  int rc = 0;
  for (size_t i = 0; i < sizeof s / sizeof s[0] && rc == 0; i++) {
    if (!s[i].val) continue;
    redisReply *r = strcmp(s[i].val, "none") == 0
                        ? sc_redis(c, 3, "HDEL", key, s[i].field)
                        : sc_redis(c, 4, "HSET", key, s[i].field, s[i].val);
    if (!r || r->type == REDIS_REPLY_ERROR) {
      fprintf(stderr, "sluicectl: redis %s: %s\n", sc_redis_shown(o->redis_url),
              r ? r->str : "no answer");
      rc = SC_EXIT_FAIL;
    }
    if (r) freeReplyObject(r);
  }
  sl_redis_free(c);
  if (rc == 0) printf("tenant %s set\n", o->args[0]);
  return rc;
}

/* a reply's string, or NULL */
static const char *str_of(const redisReply *r) {
  return r && r->type == REDIS_REPLY_STRING ? r->str : NULL;
}

int sc_tenant_show(const sc_opts *o) {
  char key[SL_TENANT_KEY_MAX], ans[SL_TENANT_KEY_MAX], cost[SL_TENANT_KEY_MAX];
  if (tenant_arg(o, key)) return SC_EXIT_USAGE;
  int64_t now = sl_now_ms();
  sl_tenant_day_key(o->args[0], now, "answers", ans);
  sl_tenant_day_key(o->args[0], now, "cost", cost);
  struct sl_redis *c = sc_redis_connect(o->redis_url);
  if (!c) return SC_EXIT_FAIL;
  redisReply *h = sc_redis(c, 5, "HMGET", key, "weight", "answers_per_day", "cost_per_day");
  redisReply *a = sc_redis(c, 2, "GET", ans), *s = sc_redis(c, 2, "GET", cost);
  int rc = 0;
  if (!h || h->type != REDIS_REPLY_ARRAY || h->elements != 3 || !a || !s ||
      a->type == REDIS_REPLY_ERROR || s->type == REDIS_REPLY_ERROR) {
    fprintf(stderr, "sluicectl: redis %s: no answer\n", sc_redis_shown(o->redis_url));
    rc = SC_EXIT_FAIL;
  } else {
    const char *w = str_of(h->element[0]), *lim = str_of(h->element[1]),
               *bud = str_of(h->element[2]), *used = str_of(a), *spent = str_of(s);
    if (o->json) {
      json_t *j =
          json_pack("{s:s,s:f,s:o,s:o,s:I,s:f}", "tenant", o->args[0], "weight", w ? atof(w) : 1.0,
                    "answers_per_day", lim ? json_integer(atoll(lim)) : json_null(), "cost_per_day",
                    bud ? json_real(atof(bud)) : json_null(), "answers_today",
                    (json_int_t)(used ? atoll(used) : 0), "cost_today", spent ? atof(spent) : 0.0);
      char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
      if (t) printf("%s\n", t);
      free(t);
      json_decref(j);
    } else {
      printf("Tenant        %s\n", o->args[0]);
      printf("Weight        %s%s\n", w ? w : "1", w ? "" : " (default)");
      printf("Answers today %s (limit: %s)\n", used ? used : "0", lim ? lim : "none");
      printf("Cost today    %s units (budget: %s)\n", spent ? spent : "0", bud ? bud : "none");
    }
  }
  if (h) freeReplyObject(h);
  if (a) freeReplyObject(a);
  if (s) freeReplyObject(s);
  sl_redis_free(c);
  return rc;
}
