/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_budget.h — the provider gate's view of each tenant's cost budget
 * (cost_per_day in the tenant's settings, `sluicectl tenant set`): what the
 * tenant spent today against it, as last read from Redis. presign refuses
 * a create once a tenant's day reached its budget; what was accepted
 * before and reaches a provider-bound stage after is failed here with its
 * own class (SL_BUDGET_CLASS), uncalled, so no provider is paid past the
 * budget and the answer ends visibly, not silently.
 *
 * The check is the last step before a call (after the shared limiter),
 * so calls already waiting there are not paid for past the budget.
 *
 * One entry per tenant seen (at most SL_BUDGET_MAX; beyond that the
 * oldest read go), read by one script: when a call asks and the last read
 * is older than SL_BUDGET_READ_MS, and every second (sl__budget_tick) for
 * the tenants asked about in the last SL_BUDGET_ACTIVE_MS, so that the
 * first call after a quiet while does not go by a stale read (a budget
 * raised, then the dead letters replayed); a tenant quiet for longer is
 * forgotten and read afresh. This replica's calls add their cost here as
 * they finish. A tenant overspends by at most the calls in flight when it
 * crosses the line, plus, with several replicas, what the others started
 * in the SL_BUDGET_READ_MS before they read it. Not read yet, no budget
 * set, or Redis unavailable: not over (the call goes on).
 *
 * Loop thread only.
 */
#ifndef SLUICE_SL_STAGE_BUDGET_H
#define SLUICE_SL_STAGE_BUDGET_H

#include "sl_stage_job.h"
#include "sluice/sl_redis.h"

#define SL_BUDGET_READ_MS 1000     /* a tenant's budget and spend are read again after this */
#define SL_BUDGET_ACTIVE_MS 600000 /* a tenant asked about since then is kept read */
#define SL_BUDGET_MAX 4096         /* tenants kept */
#define SL_BUDGET_CLASS "tenant_budget_exhausted"

typedef struct sl_budget sl_budget;

typedef struct {
  sl_jobs *R;
  sl_budget *map; /* uthash by tenant */
  int n;
  int closed;
  sl_redis_script s_read;
} sl_budgets;

/* Sets B up for R. */
void sl__budget_init(sl_budgets *B, sl_jobs *R);

/* Frees the entries (a read still out finds B closed). */
void sl__budget_close(sl_budgets *B);

/* 1 when tenant's spend today as last known reached its cost_per_day
 * (*spent, *limit set), else 0; asks Redis again when the entry is old. */
int sl__budget_over(sl_budgets *B, const char *tenant, double *spent, double *limit);

/* Reads again the tenants asked about lately (the gate's, once a second). */
void sl__budget_tick(sl_budgets *B);

/* A call of tenant's cost units more, until the next read. */
void sl__budget_spend(sl_budgets *B, const char *tenant, double units);

#endif
