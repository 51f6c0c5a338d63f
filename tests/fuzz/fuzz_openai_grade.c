/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_openai_grade.c — grade/openai's handling of chat-completion answers
 * (plugins/grade/openai/openai.c: the status policy of
 * plugins/common/openai_http.h, the json_schema -> json_object fallback on
 * a 400, choices[0].message, refusals, the grade-schema check of the
 * content, regenerations and the raw reply kept on failure), compiled into
 * the target with the scripted host of tests/unit/plugin_testhost.h as the
 * plugin's unit test does: the real on_reply runs on fuzzed bodies, without
 * HTTP. Input format: fuzz_replies.h (up to 1 + max_regenerations answers,
 * plus a resend after the fallback).
 *
 * Oracle (abort() on violation): exactly one completion per call; DONE has
 * a score 0..100, one of the nine levels, non-empty feedback and 1..16
 * criteria with scores 0..100; RETRY and FAIL have an error class and a
 * reason; never more requests than the first, the resend after the
 * fallback and max_regenerations (2) regenerations.
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdint.h>

#include "grade/openai/openai.c"
#include "fuzz_replies.h"

static const sl_plugin_input input = {.struct_size = sizeof(sl_plugin_input),
                                      .key = "sub/2",
                                      .prompt = "What do you do on weekends?",
                                      .language = "en",
                                      .transcript = "on weekends i go hiking with my friends",
                                      .duration_s = 12.5};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  th_reset(sluice_plugin_entry());
  th_set("max_raw_reply", "64");
  void *inst = NULL;
  char err[256] = "";
  FR_CHECK(create(&th_host, NULL, &inst, err, sizeof err) == 0);
  call(inst, &input, (sl_plugin_call *)&th);
  FR_CHECK(th.nreq == 1 && th.completes == 0);
  fr_play(data, size);
  FR_CHECK(th.completes == 1);
  FR_CHECK(th.nreq <= 1 + 1 + 2);
  if (th.outcome == SL_PLUGIN_DONE) {
    double score = th_num("score");
    FR_CHECK(score >= 0 && score <= 100);
    const char *lvl = th_str("level"), *fb = th_str("feedback");
    FR_CHECK(lvl && fb && fb[0]);
    int known = 0;
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) known |= !strcmp(lvl, levels[i]);
    FR_CHECK(known);
    FR_CHECK(th.ncrit >= 1 && th.ncrit <= 16);
    for (int i = 0; i < th.ncrit; i++)
      FR_CHECK(th.crit_score[i] >= 0 && th.crit_score[i] <= 100 && th.crit_name[i][0]);
  } else {
    FR_CHECK(th.outcome == SL_PLUGIN_RETRY || th.outcome == SL_PLUGIN_FAIL);
    FR_CHECK(th.error_class[0] != '\0' && th.reason[0] != '\0');
  }
  destroy(inst);
  th_reset(sluice_plugin_entry());
  return 0;
}
