/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_work.c — the plugin's work for a job (sl_stage_work.h). A job on
 * a worker is the worker's until its after-work callback runs on the loop;
 * the worker reads only the job's message, outbox, result and claim_lost.
 */
#include "sl_stage_work.h"
#include "sluice/sl_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>

void sl__work_init(sl_work *W, sl_jobs *R) {
  W->R = R;
  R->work = W;
  W->inl.max_ns = R->cc->inline_max_us > 0 ? (uint64_t)R->cc->inline_max_us * 1000 : 0;
  /* the worker pool starts on first use: size it before that */
  char nworkers[16];
  int64_t nw = R->cc->workers > 0          ? R->cc->workers
               : R->o->default_workers > 0 ? R->o->default_workers
                                           : 4;
  snprintf(nworkers, sizeof nworkers, "%d", (int)(nw < 128 ? nw : 128));
  setenv("UV_THREADPOOL_SIZE", nworkers, 1);
  const char *st = R->o->stage;
  static const char h_runs[] =
      "Runs of the stage's processor, on the loop (inline: short runs, stage.inline_max_us) or "
      "on the worker pool";
  W->m_loop = sl__metric("sluice_process_runs_total", st, "where=\"loop\"", h_runs, 0);
  W->m_pool = sl__metric("sluice_process_runs_total", st, "where=\"pool\"", h_runs, 0);
  W->m_cool = sl__metric("sluice_inline_cooldowns_total", st, NULL,
                         "Times a run on the loop was slow enough (100x stage.inline_max_us) to "
                         "send the processor's runs to the worker pool for a second",
                         0);
}

static void work_cb(uv_work_t *w) {
  job *j = w->data;
  static _Thread_local int named; /* top -H, perf, bench/cost: the workers' CPU apart */
  if (!named) named = 1, prctl(PR_SET_NAME, "sluice-worker", 0, 0, 0);
  if (atomic_load(&j->claim_lost)) { /* lost while it queued for a worker: not called */
    j->claim_skip = 1;
    return;
  }
  sl_inline_mark mk;
  sl_log_trace(j->trace_hex, NULL); /* the worker's lines carry the job's trace id */
  sl_inline_begin(&mk);
  j->R->o->process(j->R->o->ud, j->m, &j->out, &j->res);
  j->ran_ns = sl_inline_end(&mk);
  sl_log_trace(NULL, NULL);
}

static void after_work_cb(uv_work_t *w, int status) {
  job *j = w->data;
  if (j->claim_skip) { /* claims again: calls, waits for the new owner's outputs, or ends */
    j->claim_skip = 0;
    sl__job_to(j, j->R->closing ? SL_JOB_DROPPED : SL_JOB_CLAIM);
    return;
  }
  if (status == 0) {
    sl_inline_note(&j->R->work->inl, j->ran_ns, SL_INLINE_POOL, uv_hrtime());
    sl_metric_add(j->R->work->m_pool, 1);
  }
  sl__job_to(j, SL_JOB_OUTCOME);
}

void sl_job_done(job *j) { sl__job_to(j, SL_JOB_OUTCOME); }

/* the processor, on the loop (sl_inline_call) */
static void process_here(void *arg) {
  job *j = arg;
  j->R->o->process(j->R->o->ud, j->m, &j->out, &j->res);
}

void sl__work_call(job *j) {
  const sl_stage_opts *o = j->R->o;
  sl_work *W = j->R->work;
  j->work.data = j;
  j->out.producer = j->R->producer;
  j->out.key_state = j->dk_state; /* read with its claim (sl_stage_opts.data_key) */
  if (j->dk_state == SL_KEY_FOUND) sl_outbox_seal_with(&j->out, j->dk);
  j->res.outcome = SL_OUTCOME_DONE;
  j->res.again_in_ms = 0;
  j->res.nsteps = 0;
  j->res.cost_units = 0;
  j->res.cost_before = j->cost_before;
  j->call_ns = uv_hrtime();
  if (o->start) {
    o->start(o->ud, j);
    return;
  }
  if (sl_inline_here(&W->inl, uv_hrtime())) { /* short runs: no hand-over (sl_inline.h) */
    if (sl_inline_call(&W->inl, process_here, j)) sl_metric_add(W->m_cool, 1);
    sl_metric_add(W->m_loop, 1);
    sl__job_to(j, SL_JOB_OUTCOME); /* may end j */
    return;
  }
  sl__job_to(j, SL_JOB_POOL);
  if (uv_queue_work(j->R->uv, &j->work, work_cb, after_work_cb) != 0) {
    sl_result_set(&j->res, SL_OUTCOME_RETRY, "internal", "could not queue work");
    sl__job_to(j, SL_JOB_OUTCOME);
  }
}
