/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_budget.c — each tenant's cost budget as the gate last read it
 * (see sl_stage_budget.h): a uthash table; one script reads the budget and
 * today's spend (both keys in the tenant's slot).
 */
#include "sl_stage_budget.h"
#include "sluice/sl_aredis.h"
#include "sluice/sl_tenant.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>

struct sl_budget {
  char id[SL_TENANT_MAX + 1];
  double limit;    /* cost units per day; < 0: none */
  double spent;    /* today's, as read plus what finished since */
  int64_t read_ms; /* monotonic, when last asked for; 0: never */
  int64_t used_ms; /* monotonic, when a call last asked about it */
  int known;       /* an answer came */
  int reading;
  UT_hash_handle hh;
};

/* KEYS: the settings hash, today's cost counter. {cost_per_day or false, spent} */
static const char read_lua[] =
    "return {redis.call('HGET', KEYS[1], 'cost_per_day'), redis.call('GET', KEYS[2]) or '0'}\n";

void sl__budget_init(sl_budgets *B, sl_jobs *R) {
  memset(B, 0, sizeof *B);
  B->R = R;
  sl_redis_script_init(&B->s_read, read_lua);
}

void sl__budget_close(sl_budgets *B) {
  if (!B || B->closed) return;
  B->closed = 1;
  sl_budget *b, *t;
  HASH_ITER(hh, B->map, b, t) {
    HASH_DEL(B->map, b);
    free(b);
  }
  B->n = 0;
}

typedef struct {
  sl_budgets *B;
  char id[SL_TENANT_MAX + 1];
} budget_read;

static void on_read(redisReply *r, void *ud) {
  budget_read *rd = ud;
  sl_budget *b = NULL;
  if (!rd->B->closed) HASH_FIND(hh, rd->B->map, rd->id, strlen(rd->id), b);
  if (b) {
    b->reading = 0;
    /* Redis unavailable: as it was */
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
      b->limit = sl_aredis_reply_num(r->element[0], -1);
      b->spent = sl_aredis_reply_num(r->element[1], 0);
      b->known = 1;
    }
  }
  free(rd);
}

/* drops the entries read longest ago, not out, down to 3/4 of the room */
static void evict(sl_budgets *B) {
  sl_budget *b, *t;
  int64_t now = sl__mono_ms();
  for (int64_t age = 8 * SL_BUDGET_READ_MS; B->n >= SL_BUDGET_MAX * 3 / 4 && age > 0; age /= 2)
    HASH_ITER(hh, B->map, b, t) {
      if (b->reading || now - b->read_ms < age) continue;
      HASH_DEL(B->map, b);
      free(b);
      B->n--;
    }
}

static sl_budget *entry(sl_budgets *B, const char *id) {
  sl_budget *b;
  size_t n = strlen(id);
  HASH_FIND(hh, B->map, id, n, b);
  if (b) return b;
  if (B->n >= SL_BUDGET_MAX) evict(B);
  if (B->n >= SL_BUDGET_MAX || !(b = calloc(1, sizeof *b))) return NULL;
  memcpy(b->id, id, n + 1);
  b->limit = -1;
  HASH_ADD(hh, B->map, id, n, b);
  B->n++;
  return b;
}

/* b read again when the last read is older than age ms */
static void refresh(sl_budgets *B, sl_budget *b, int64_t now, int64_t age) {
  char conf[SL_TENANT_KEY_MAX], day[SL_TENANT_KEY_MAX];
  if (b->reading || (b->read_ms && now - b->read_ms < age) ||
      sl_tenant_conf_key(b->id, conf) != 0 ||
      sl_tenant_day_key(b->id, sl_now_ms(), "cost", day) != 0)
    return;
  budget_read *rd = malloc(sizeof *rd);
  if (!rd) return;
  rd->B = B;
  memcpy(rd->id, b->id, sizeof rd->id);
  b->read_ms = now;
  const char *a[] = {conf, day};
  if (sl_aredis_eval(B->R->redis, on_read, rd, &B->s_read, 2, 2, a, NULL) == 0)
    b->reading = 1;
  else
    free(rd);
}

int sl__budget_over(sl_budgets *B, const char *tenant, double *spent, double *limit) {
  if (!tenant[0]) return 0;
  sl_budget *b = entry(B, tenant);
  if (!b) return 0;
  b->used_ms = sl__mono_ms();
  refresh(B, b, b->used_ms, SL_BUDGET_READ_MS);
  if (!b->known || b->limit < 0 || b->spent < b->limit) return 0;
  *spent = b->spent;
  *limit = b->limit;
  return 1;
}

void sl__budget_tick(sl_budgets *B) {
  sl_budget *b, *t;
  int64_t now = sl__mono_ms();
  HASH_ITER(hh, B->map, b, t) {
    if (now - b->used_ms < SL_BUDGET_ACTIVE_MS) {
      refresh(B, b, now, SL_BUDGET_READ_MS / 2);
    } else if (!b->reading) { /* quiet: forgotten, read afresh when asked */
      HASH_DEL(B->map, b);
      free(b);
      B->n--;
    }
  }
}

void sl__budget_spend(sl_budgets *B, const char *tenant, double units) {
  sl_budget *b = NULL;
  if (tenant[0] && units > 0) HASH_FIND(hh, B->map, tenant, strlen(tenant), b);
  if (b) b->spent += units;
}
