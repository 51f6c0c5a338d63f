/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin.c — grade/rubric as a Sluice plugin (ABI in sl_plugin.h).
 *
 * The deterministic offline rubric (rubric.c, formula in docs/grading.md):
 * speaking rate, lexical variety, fillers, length and relevance to the
 * prompt, mapped to OPIc-style levels with per-criterion scores, evidence
 * (each criterion's comment) and feedback sentences; fluency from the
 * answer's timing (upload.speaking_s, .pauses, ...) when preflight measured
 * it (rubric v2). Pure and fast, so SYNC (worker pool); the same transcript always
 * gets the same grade, which makes redelivery harmless.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rubric.h"

#include "sluice/sl_err.h"
#include "sluice/sl_plugin.h"

typedef struct {
  const sl_plugin_host *h;
} state;

static int create(const sl_plugin_host *h, const sl_plugin_conf *c, void **out, char *err,
                  size_t errlen) {
  (void)c;
  (void)err;
  (void)errlen;
  state *s = h->alloc(sizeof *s);
  if (!s) return SL_ENOMEM;
  s->h = h;
  *out = s;
  return 0;
}

static void destroy(void *v) {
  state *s = v;
  if (s) s->h->free(s);
}

static void call(void *v, const sl_plugin_input *in, sl_plugin_call *c) {
  const sl_plugin_host *h = ((state *)v)->h;
  sl_rubric_result r;
  sl_rubric_timing t;
  int rc = sl_rubric_grade_timed(
      in->transcript ? in->transcript : "", in->duration_s > 0 ? in->duration_s : 0.001,
      in->prompt && *in->prompt ? in->prompt : NULL, sl_rubric_timing_read(h, c, &t), &r);
  if (rc == SL_ETOOBIG) {
    h->complete(c, SL_PLUGIN_FAIL, 0, 0, "transcript_too_long",
                "transcript longer than the rubric's 64 KiB limit");
    return;
  }
  if (rc) {
    h->complete(c, SL_PLUGIN_FAIL, 0, 0, "grade_failed", "rubric rejected its input");
    return;
  }
  int orc = h->out_num(c, "score", r.score);
  if (!orc) orc = h->out_str(c, "level", r.level);
  if (!orc) orc = h->out_str(c, "feedback", r.feedback);
  if (!orc) orc = h->out_num(c, "words_per_minute", r.words_per_minute);
  if (!orc) orc = h->out_num(c, "lexical_variety", r.lexical_variety);
  if (!orc) orc = h->out_num(c, "filler_rate", r.filler_rate);
  if (!orc) orc = h->out_num(c, "relevance", r.relevance);
  if (!orc) orc = h->out_str(c, "engine", "rubric");
  for (int i = 0; !orc && i < SL_RUBRIC_NCRIT; i++)
    orc = h->out_criterion(c, sl_rubric_criterion_name(i), r.crit[i], r.evidence[i]);
  if (orc)
    h->complete(c, SL_PLUGIN_RETRY, 0, 0, "out_of_memory", "recording the grade failed");
  else
    h->complete(c, SL_PLUGIN_DONE, 0, 0, NULL, NULL);
}

static const sl_plugin desc = {
    .abi_version = SL_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(sl_plugin),
    .kind = SL_PLUGIN_KIND_GRADE,
    .name = "rubric",
    .version = "2.0.0",
    .description = "Deterministic offline rubric: speech rate, lexical variety, fillers, "
                   "length and relevance mapped to OPIc-style levels; fluency from when the "
                   "words were spoken (speaking time, silent pauses, words between them) when "
                   "preflight measured it; each criterion with its evidence (docs/grading.md)",
    .flags = SL_PLUGIN_SYNC,
    .conf = NULL,
    .nconf = 0,
    .create = create,
    .destroy = destroy,
    .call = call,
};

__attribute__((visibility("default"))) const sl_plugin *sluice_plugin_entry(void);
const sl_plugin *sluice_plugin_entry(void) { return &desc; }
