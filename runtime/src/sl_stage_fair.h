/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_fair.h — the provider gate's line at the shared limiter, one line
 * per tenant (the jobs' SL_HDR_TENANT; "" for work of no tenant). Whose
 * turn it is, across replicas, is the fair take script's (sl_fair.h): the
 * gate names up to SL_FAIR_CANDIDATES tenants with jobs waiting here, the
 * least served here first, with their weights, and pops the head of the one
 * the script picked.
 *
 * A tenant may have `hold` jobs waiting in its line; a job that would be
 * past it is deferred instead (the gate sends it through a retry tier
 * without counting an attempt): its slot is not held by work that would
 * wait anyway, so the stage reads on and reaches other tenants' work
 * behind it in the partition. By default a deferred job is due one
 * token's interval per job ahead of it: those in its tenant's line and the
 * tenant's deferrals not back yet (counted out here, and in again when a
 * copy marked deferred joins the line), and goes by the first retry tier
 * whose delay reaches that. With provider.tenant_schedule, each line keeps
 * a schedule instead (sl_defer.h): a deferred job gets the next slot, one
 * per call its tenant gets here (as measured; before that, the rate times
 * the tenant's weight over the weights of the lines with jobs waiting). The
 * copy carries its slot (SL_HDR_DEFER_DUE) and keeps it when it comes back
 * early to a full line; one back on or after its slot to a full line gets
 * a new one at the end. It travels by whole-tier hops to a tier partition
 * of this replica (sl_stage_out.c, to_defer), so it comes back to this
 * line. The default leaves a weighted tenant short of its share (its
 * copies wait in the tiers behind others' later ones); the schedule gives
 * it, but a replica lost under a backlog leaves copies read twice, which
 * spend limiter tokens (docs/operations.md has the numbers).
 *
 * Weights are each line's tenant's setting (`sluicectl tenant set`, the
 * tenant's settings hash), read at most every SL_FAIR_WEIGHT_MS; 1 until
 * read or when not set. Lines without jobs are kept for their weight and
 * schedule, at most SL_FAIR_LINES_MAX; beyond that the empty ones go.
 *
 * Metrics, per stage and tenant: sluice_tenant_waiting (jobs in the line),
 * sluice_tenant_scheduled (its deferrals not back yet, as counted here:
 * with waiting, the tenant's backlog here), sluice_tenant_calls_total (tokens
 * granted), sluice_tenant_deferred_total; and those the gate counts with
 * sl__fair_counts: sluice_tenant_calling (calls running),
 * sluice_tenant_outcomes_total{outcome=done|failed} and
 * sluice_tenant_cost_units_total.
 * The first SL_FAIR_LABELS tenants this process sees have series of their
 * own, every later one counts under tenant="other": bounded cardinality.
 *
 * Loop thread only.
 */
#ifndef SLUICE_SL_STAGE_FAIR_H
#define SLUICE_SL_STAGE_FAIR_H

#include "sl_stage_job.h"
#include "sluice/sl_fair.h"

#define SL_FAIR_WEIGHT_MS 2000 /* a line's weight is read again after this */
#define SL_FAIR_LINES_MAX 4096 /* lines kept (with their weight) */
#define SL_FAIR_LABELS 16      /* tenants with series of their own */

typedef struct sl_fair_line sl_fair_line;

/* a tenant's series the gate counts (sl__fair_counts) */
typedef struct {
  sl_metric *calling;       /* gauge: its calls running */
  sl_metric *done, *failed; /* its calls' outcomes (failed: for good, or not called: its budget) */
  sl_metric *cost;          /* real counter: provider cost units */
} sl_fair_counts;

typedef struct {
  sl_jobs *R;
  sl_fair_line *map;  /* uthash by tenant */
  sl_fair_line *busy; /* the lines with jobs waiting (a circular list) */
  int nlines;
  int64_t waiting; /* jobs in every line */
  int64_t hold;    /* jobs one tenant may have waiting here */
  int schedule;    /* provider.tenant_schedule: deferrals by each line's schedule */
  double slot_ms;  /* one token's interval at the rate (a schedule's first estimate) */
  int labels;      /* tenants with series of their own so far */
  int64_t tick_ms; /* monotonic, the last sl__fair_tick */
  int closed;
  /* the last candidates named (sl__fair_candidates), for the pick */
  sl_fair_line *named[SL_FAIR_CANDIDATES];
  char weight_s[SL_FAIR_CANDIDATES][24];
  int nnamed;
} sl_fair_lines;

/* Sets F up for R: hold jobs per tenant (>= 1), one token every slot_ms. */
void sl__fair_init(sl_fair_lines *F, sl_jobs *R, int64_t hold, double slot_ms);

/* Frees the lines (their jobs are the loop's: dropped by its last walk). */
void sl__fair_close(sl_fair_lines *F);

/* j joins its tenant's line: 0, or 1 when the line holds `hold` already:
 * j is not queued and should be deferred until its slot *due_ms (unix ms;
 * j->defer_due_ms when it came back before it). -1: no memory for a new
 * line (j is not queued; the caller lets it through). */
int sl__fair_push(sl_fair_lines *F, job *j, int64_t *due_ms);

/* Names up to SL_FAIR_CANDIDATES tenants with jobs waiting, the least
 * served here (per weight) first, into argv as tenant, weight pairs (the
 * strings live in F until the next call). Returns how many (0: no job
 * waits). */
int sl__fair_candidates(sl_fair_lines *F, const char **argv);

/* The head of the i-th tenant (0-based) of the last candidates, counted as
 * granted; NULL when its line emptied meanwhile. */
job *sl__fair_pop(sl_fair_lines *F, int i);

/* The head of any line (Redis unavailable: fail open; closing). */
job *sl__fair_pop_any(sl_fair_lines *F);

/* Every job of the lines for which take(j) is 1 goes into out, in line
 * order (a partition taken away). */
void sl__fair_split(sl_fair_lines *F, int (*take)(sl_qlink *, void *), sl_queue *out);

/* Counts j's deferral in its tenant's metrics. */
void sl__fair_deferred(sl_fair_lines *F, const job *j);

/* tenant's series for the gate to count in (NULL: no room for its line). */
const sl_fair_counts *sl__fair_counts(sl_fair_lines *F, const char *tenant);

/* Measures each line's rate (the gate's tick, about once a second; with
 * provider.tenant_schedule only, the one reader of the rates). */
void sl__fair_tick(sl_fair_lines *F);

#endif
