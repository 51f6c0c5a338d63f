/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host.c — the rubric's glue shared by graders that run as plugins:
 * reading the answer's timing from the input message (preflight's, and the
 * transcript's segments where its STT reported them; grade/rubric grades
 * with it, grade/openai puts it and the rubric's criteria into its prompt).
 * Kept apart from rubric.c, which stays a pure function of its arguments.
 */
#include <stdio.h>
#include <string.h>

#include "rubric.h"

const sl_rubric_timing *sl_rubric_timing_read(const sl_plugin_host *h, sl_plugin_call *c,
                                              sl_rubric_timing *t) {
  double pauses = 0;
  memset(t, 0, sizeof *t);
  if (!h->in_num || h->in_num(c, "upload.speaking_s", &t->speaking_s) != 0 || !(t->speaking_s > 0))
    return NULL;
  if (h->in_num(c, "upload.speech_s", &t->speech_s) || h->in_num(c, "upload.pauses", &pauses) ||
      h->in_num(c, "upload.pause_mean_s", &t->pause_mean_s) ||
      h->in_num(c, "upload.pause_longest_s", &t->pause_longest_s) || !(pauses >= 0) || pauses > 1e6)
    return NULL;
  t->pauses = (unsigned)pauses;
  double segs = 0, gaps = 0; /* the transcript's, when its STT reported them */
  if (h->in_num(c, "segments", &segs) == 0 && segs >= 1 && segs <= 1e6 &&
      h->in_num(c, "segment_pauses", &gaps) == 0 && gaps >= 0 && gaps < segs) {
    t->segments = (unsigned)segs;
    t->segment_pauses = (unsigned)gaps;
  }
  return t;
}

size_t sl_rubric_criteria_text(const sl_rubric_result *r, char *buf, size_t len) {
  size_t n = 0;
  if (len) buf[0] = '\0';
  for (int i = 0; i < SL_RUBRIC_NCRIT && n < len; i++) {
    int w = snprintf(buf + n, len - n, "%s- %s: %.0f/100 (%s)", i ? "\n" : "",
                     sl_rubric_criterion_name(i), r->crit[i],
                     r->evidence[i][0] ? r->evidence[i] : "no words were recognized");
    if (w < 0) break;
    n += (size_t)w < len - n ? (size_t)w : len - n - 1;
  }
  return n;
}
