/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_openai_stt.c — stt/openai's handling of provider answers
 * (plugins/stt/openai/openai.c: the status policy of
 * plugins/common/openai_http.h, the transcription JSON, word timings,
 * error texts), compiled into the target with the scripted host of
 * tests/unit/plugin_testhost.h exactly as the plugin's unit test does: the
 * real on_reply runs on fuzzed bodies, without HTTP. Input format:
 * fuzz_replies.h (one call; one answer is read).
 *
 * Oracle (abort() on violation): exactly one completion per call, with an
 * outcome DONE, RETRY or FAIL; DONE has a "text" output and non-negative
 * cost_units; RETRY and FAIL have an error class and a reason.
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdint.h>

#include "fuzz_replies.h"
#include "stt/openai/openai.c"

/* 0.5 s of 16 kHz 16-bit mono silence (the plugin refuses less than
 * stt.openai.min_seconds, 0.3 s, before any request) */
static unsigned char wav[44 + 16000];

static void make_wav(void) {
  static const unsigned char head[44] = {'R',  'I',  'F', 'F', 0xa4, 0x3e, 0, 0, 'W', 'A', 'V', 'E',
                                         'f',  'm',  't', ' ', 16,   0,    0, 0, 1,   0,   1,   0,
                                         0x80, 0x3e, 0,   0,   0,    0x7d, 0, 0, 2,   0,   16,  0,
                                         'd',  'a',  't', 'a', 0x80, 0x3e, 0, 0};
  memcpy(wav, head, sizeof head);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  make_wav();
  th_reset(sluice_plugin_entry());
  th_set("base_url", "http://127.0.0.1:9/");
  th_set("api_key", "sk-fuzz");
  void *inst = NULL;
  char err[256] = "";
  FR_CHECK(create(&th_host, NULL, &inst, err, sizeof err) == 0);
  sl_plugin_input in = {.struct_size = sizeof in,
                        .key = "sub/1",
                        .prompt = "Tell me",
                        .language = "en-US",
                        .audio = wav,
                        .audio_len = sizeof wav,
                        .content_type = "audio/wav",
                        .filename = "1.wav"};
  call(inst, &in, (sl_plugin_call *)&th);
  FR_CHECK(th.nreq == 1 && th.completes == 0);
  fr_play(data, size);
  FR_CHECK(th.completes == 1);
  FR_CHECK(th.outcome == SL_PLUGIN_DONE || th.outcome == SL_PLUGIN_RETRY ||
           th.outcome == SL_PLUGIN_FAIL);
  if (th.outcome == SL_PLUGIN_DONE) {
    FR_CHECK(th_str("text") != NULL);
    FR_CHECK(th_num("cost_units") >= 0);
  } else {
    FR_CHECK(th.error_class[0] != '\0' && th.reason[0] != '\0');
  }
  destroy(inst);
  th_reset(sluice_plugin_entry());
  return 0;
}
