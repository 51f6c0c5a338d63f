/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_work.h — running the plugin's work for a job the gate let
 * through (state CALL): process() on the loop when its runs are short
 * (sl_inline.h), else on the worker pool (state POOL), or start() for an
 * async plugin, which ends with sl_job_done(). The outcome goes on as
 * OUTCOME; a job whose claim was lost while it queued for a worker goes
 * back to CLAIM uncalled. Loop thread, except the pool's work callback.
 */
#ifndef SLUICE_SL_STAGE_WORK_H
#define SLUICE_SL_STAGE_WORK_H

#include "sl_stage_job.h"
#include "sluice/sl_inline.h"

/* The work's state (this file's; embedded in the loop's). */
typedef struct sl_work {
  sl_jobs *R;
  sl_inline inl;                       /* process() on the loop or the pool */
  sl_metric *m_loop, *m_pool, *m_cool; /* runs by place; cool-downs */
} sl_work;

/* Sets W up; the pool is sized before the loop's first use of it
 * (UV_THREADPOOL_SIZE: stage.workers, else the stage's default, else 4). */
void sl__work_init(sl_work *W, sl_jobs *R);

/* CALL: runs j's process() or start(). */
void sl__work_call(job *j);

#endif
