/* SPDX-License-Identifier: Apache-2.0 */
/* test_openai_stt.c — stt/openai against a scripted host (plugin_testhost.h):
 * the request it builds, reply parsing, the HTTP status policy and bad
 * replies. The plugin source is compiled into this test. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "plugin_testhost.h"
#include "stt/openai/openai.c"

/* a 1.5 s WAV: 16 kHz 16-bit mono, header + 48000 bytes of silence */
static unsigned char wav[44 + 48000];

static void make_wav(void) {
  memset(wav, 0, sizeof wav);
  memcpy(wav, "RIFF", 4);
  uint32_t v = 36 + 48000;
  memcpy(wav + 4, &v, 4);
  memcpy(wav + 8, "WAVEfmt ", 8);
  v = 16;
  memcpy(wav + 16, &v, 4);
  uint16_t fmt = 1, ch = 1, align = 2, bits = 16;
  memcpy(wav + 20, &fmt, 2);
  memcpy(wav + 22, &ch, 2);
  v = 16000;
  memcpy(wav + 24, &v, 4);
  v = 32000;
  memcpy(wav + 28, &v, 4);
  memcpy(wav + 32, &align, 2);
  memcpy(wav + 34, &bits, 2);
  memcpy(wav + 36, "data", 4);
  v = 48000;
  memcpy(wav + 40, &v, 4);
}

static void *inst;

static int setup(void **st) {
  (void)st;
  make_wav();
  th_reset(sluice_plugin_entry());
  return 0;
}
static int teardown(void **st) {
  (void)st;
  destroy(inst);
  inst = NULL;
  th_reset(sluice_plugin_entry());
  return 0;
}

static void start(const void *audio, size_t len) {
  char err[256] = "";
  assert_int_equal(create(&th_host, NULL, &inst, err, sizeof err), 0);
  sl_plugin_input in = {.struct_size = sizeof in,
                        .key = "sub/1",
                        .prompt = "Tell me",
                        .language = "en-US",
                        .audio = audio,
                        .audio_len = len,
                        .content_type = "audio/wav",
                        .filename = "1.wav"};
  call(inst, &in, (sl_plugin_call *)&th);
}

static const char verbose_reply[] =
    "{\"task\":\"transcribe\",\"language\":\"english\",\"duration\":1.52,\"text\":\"I like "
    "hiking.\",\"segments\":[{\"id\":0,\"start\":0,\"end\":1.52,\"text\":\" I like hiking.\"}],"
    "\"words\":[{\"word\":\"I\",\"start\":0.0,\"end\":0.3},{\"word\":\"like\",\"start\":0.3,"
    "\"end\":0.8},{\"word\":\"hiking\",\"start\":0.8,\"end\":1.4}]}";

static void test_request_and_verbose_reply(void **st) {
  (void)st;
  th_set("base_url", "http://127.0.0.1:9/");
  th_set("api_key", "sk-test");
  start(wav, sizeof wav);
  assert_int_equal(th.nreq, 1);
  assert_int_equal(th.completes, 0); /* async: nothing until the answer */
  const th_request *r = &th.req[0];
  assert_string_equal(r->url, "http://127.0.0.1:9/v1/audio/transcriptions");
  assert_true(th_has_header(r, "Authorization: Bearer sk-test"));
  assert_string_equal(th_form(r, "model"), "whisper-1");
  assert_string_equal(th_form(r, "response_format"), "verbose_json");
  assert_string_equal(th_form(r, "language"), "en"); /* en-US -> en */
  assert_null(th_form(r, "prompt"));
  assert_int_equal(r->form[0].len, sizeof wav);
  assert_string_equal(r->form[0].name, "file");
  assert_string_equal(r->form[0].filename, "1.wav");
  assert_string_equal(r->form[0].ctype, "audio/wav");
  assert_memory_equal(r->form[0].data, wav, sizeof wav);
  int grans = 0;
  for (int i = 0; i < r->nform; i++)
    grans += strcmp(r->form[i].name, "timestamp_granularities[]") == 0;
  assert_int_equal(grans, 2);
  assert_int_equal(r->timeout_ms, 120000);

  th_reply(200, verbose_reply);
  assert_int_equal(th.completes, 1);
  assert_int_equal(th.outcome, SL_PLUGIN_DONE);
  assert_string_equal(th_str("text"), "I like hiking.");
  assert_string_equal(th_str("language"), "english");
  assert_string_equal(th_str("engine"), "openai:whisper-1");
  assert_float_equal(th_num("duration_s"), 1.52, 1e-9);
  assert_float_equal(th_num("cost_units"), 1.52, 1e-9);
  assert_int_equal(th.nwords, 3);
  assert_string_equal(th.first_word, "I");
  assert_float_equal(th.last_word_end, 1.4, 1e-9);
  /* no pauses of preflight's to place: segments not reported */
  assert_float_equal(th_num("segments"), -1, 0);
  assert_float_equal(th_num("segment_pauses"), -1, 0);
}

/* a fresh call with preflight's pause_spans, answered with a transcript of
 * these segments: the reported segments and segment_pauses (-1: none) */
static void segments_case(const char *spans, const char *segments, double want_segments,
                          double want_pauses) {
  char body[512];
  teardown(NULL);
  th_in_str("pause_spans", spans);
  start(wav, sizeof wav);
  snprintf(body, sizeof body, "{\"text\":\"a b c d\",\"duration\":6,\"segments\":[%s]}", segments);
  th_reply(200, body);
  assert_int_equal(th.outcome, SL_PLUGIN_DONE);
  if (th_num("segments") != want_segments || th_num("segment_pauses") != want_pauses)
    fail_msg("spans \"%s\", segments %s: %g segments, %g pauses, not %g and %g", spans, segments,
             th_num("segments"), th_num("segment_pauses"), want_segments, want_pauses);
}

/* segments, and how many of preflight's pauses hold a boundary between two */
static void test_segment_pauses(void **st) {
  (void)st;
  /* boundaries at 1.25 (in the first pause), 2.4 (in the second) and 3.625
   * (0.375 s before the third: more than the 0.3 s of slack) */
  segments_case("1.20-1.35 2.05-2.75 4.00-4.60",
                "{\"start\":0,\"end\":1.2},{\"start\":1.3,\"end\":2.0},"
                "{\"start\":2.8,\"end\":3.5},{\"start\":3.75,\"end\":5.9}",
                4, 2);
  /* one pause holds one boundary at most: two boundaries in one pause */
  segments_case("0.90-1.60",
                "{\"start\":0,\"end\":1},{\"start\":1,\"end\":1.4},{\"start\":1.5,\"end\":3}", 3,
                1);
  /* spans out of order or malformed end the list where they go wrong (3-4
   * would have held the second boundary) */
  segments_case("0.90-1.60 0.5-0.7 3-4",
                "{\"start\":0,\"end\":1},{\"start\":1,\"end\":3},{\"start\":3.1,\"end\":4}", 3, 1);
  /* no well-formed span: nothing to set the segments against, none reported */
  segments_case("1.0-0.5", "{\"start\":0,\"end\":1},{\"start\":1,\"end\":2}", -1, -1);
  /* a segment without times ends the count */
  segments_case("0.9-1.1 2.9-3.1",
                "{\"start\":0,\"end\":1},{\"start\":\"x\"},{\"start\":3,\"end\":4}", 1, 0);
  /* no segments: none reported */
  segments_case("0.9-1.1", "", -1, -1);
}

static void test_json_mode_and_wav_duration(void **st) {
  (void)st;
  th_set("base_url", "https://api.example.com/v1");
  th_set("response_format", "json");
  th_set("language", "ko");
  th_set("prompt", "OPIc answer");
  start(wav, sizeof wav);
  const th_request *r = &th.req[0];
  assert_string_equal(r->url, "https://api.example.com/v1/audio/transcriptions");
  assert_false(th_has_header(r, "Authorization: Bearer "));
  for (int i = 0; i < r->nheaders; i++) assert_null(strstr(r->headers[i], "Authorization"));
  assert_string_equal(th_form(r, "response_format"), "json");
  assert_string_equal(th_form(r, "language"), "ko");
  assert_string_equal(th_form(r, "prompt"), "OPIc answer");
  assert_null(th_form(r, "timestamp_granularities[]"));
  th_reply(200, "{\"text\":\"hello there\"}");
  assert_int_equal(th.outcome, SL_PLUGIN_DONE);
  assert_string_equal(th_str("text"), "hello there");
  /* no duration in the reply: taken from the WAV header (48000 B / 32000 B/s) */
  assert_float_equal(th_num("duration_s"), 1.5, 1e-9);
  assert_float_equal(th_num("cost_units"), 1.5, 1e-9);
  assert_int_equal(th.nwords, 0);
}

static void expect(long status, const char *body, int64_t ra, int timed_out, const char *error,
                   sl_plugin_outcome o, const char *cls, int throttled, int64_t want_ra,
                   const char *in_reason) {
  th_reset(sluice_plugin_entry());
  destroy(inst);
  inst = NULL;
  start(wav, sizeof wav);
  th_reply_full(status, body, ra, timed_out, error);
  assert_int_equal(th.completes, 1);
  if (th.outcome != o || strcmp(th.error_class, cls) != 0)
    fail_msg("HTTP %ld: got outcome %d class %s (%s), want %d %s", status, th.outcome,
             th.error_class, th.reason, o, cls);
  assert_int_equal(th.throttled, throttled);
  assert_int_equal(th.retry_after_ms, want_ra);
  if (in_reason && !strstr(th.reason, in_reason))
    fail_msg("HTTP %ld: reason \"%s\" lacks \"%s\"", status, th.reason, in_reason);
}

static void test_status_policy(void **st) {
  (void)st;
  const char *e = "{\"error\":{\"message\":\"Invalid file format.\",\"type\":\"x\"}}";
  expect(408, e, 0, 0, NULL, SL_PLUGIN_RETRY, "provider_timeout", 0, 0, "HTTP 408");
  expect(429, e, 7000, 0, NULL, SL_PLUGIN_RETRY, "provider_throttled", 1, 7000, "HTTP 429");
  expect(429, e, 0, 0, NULL, SL_PLUGIN_RETRY, "provider_throttled", 1, 0, NULL);
  expect(500, "oops", 0, 0, NULL, SL_PLUGIN_RETRY, "provider_unavailable", 0, 0, "oops");
  expect(502, "", 0, 0, NULL, SL_PLUGIN_RETRY, "provider_unavailable", 0, 0, "HTTP 502");
  expect(503, e, 2000, 0, NULL, SL_PLUGIN_RETRY, "provider_unavailable", 0, 2000, NULL);
  expect(400, e, 0, 0, NULL, SL_PLUGIN_FAIL, "provider_rejected", 0, 0, "Invalid file format.");
  expect(413, e, 0, 0, NULL, SL_PLUGIN_FAIL, "provider_rejected", 0, 0, "HTTP 413");
  expect(415, e, 0, 0, NULL, SL_PLUGIN_FAIL, "provider_rejected", 0, 0, "HTTP 415");
  expect(404, e, 0, 0, NULL, SL_PLUGIN_FAIL, "provider_rejected", 0, 0, "HTTP 404");
  expect(401, e, 0, 0, NULL, SL_PLUGIN_FAIL, "provider_auth", 0, 0, "HTTP 401");
  expect(0, NULL, 0, 1, "Operation timed out after 120000 milliseconds", SL_PLUGIN_RETRY,
         "provider_timeout", 0, 0, "120000 ms");
  expect(0, NULL, 0, 0, "Couldn't connect to server", SL_PLUGIN_RETRY, "provider_unreachable", 0, 0,
         "Couldn't connect");
}

static void test_bad_replies(void **st) {
  (void)st;
  /* not JSON (a proxy page), and a body cut short: transient */
  expect(200, "<html><body>Bad Gateway</body></html>", 0, 0, NULL, SL_PLUGIN_RETRY,
         "provider_bad_reply", 0, 0, "not a JSON object");
  expect(200, "{\"task\":\"transcribe\",\"text\":\"I like hi", 0, 0, NULL, SL_PLUGIN_RETRY,
         "provider_bad_reply", 0, 0, "truncated");
  expect(200, "", 0, 0, NULL, SL_PLUGIN_RETRY, "provider_bad_reply", 0, 0, "0 bytes");
  /* complete JSON but not a transcription: the same request would get it again */
  expect(200, "{\"error\":\"failed to read audio\"}", 0, 0, NULL, SL_PLUGIN_FAIL,
         "provider_bad_reply", 0, 0, "failed to read audio");
  expect(200, "{\"text\":42}", 0, 0, NULL, SL_PLUGIN_FAIL, "provider_bad_reply", 0, 0,
         "no \"text\"");
  assert_int_equal(th.nstr, 0); /* nothing reported on failure */
}

static void test_empty_audio_and_send_failure(void **st) {
  (void)st;
  start(wav, 0);
  assert_int_equal(th.nreq, 0);
  assert_int_equal(th.outcome, SL_PLUGIN_FAIL);
  assert_string_equal(th.error_class, "empty_audio");
  destroy(inst);
  inst = NULL;
  th_reset(sluice_plugin_entry());
  th.http_fail = SL_ENOMEM;
  start(wav, sizeof wav);
  assert_int_equal(th.completes, 1);
  assert_int_equal(th.outcome, SL_PLUGIN_RETRY);
  assert_string_equal(th.error_class, "http_send_failed");
}

/* a FLAC header whose STREAMINFO says 16 kHz and `samples` samples */
static void make_flac(unsigned char *f, size_t len, uint64_t samples) {
  memset(f, 0, len);
  memcpy(f, "fLaC", 4);
  f[4] = 0x80; /* last metadata block, type 0 (STREAMINFO), 34 bytes */
  f[7] = 34;
  f[18] = 16000 >> 12; /* 20-bit sample rate, then channels-1, bits-1, 36-bit total */
  f[19] = (16000 >> 4) & 0xFF;
  f[20] = (unsigned char)((16000 & 0x0F) << 4 | 0 << 1 | 0);
  f[21] = (unsigned char)(0xF0 | ((samples >> 32) & 0x0F));
  f[22] = (unsigned char)(samples >> 24);
  f[23] = (unsigned char)(samples >> 16);
  f[24] = (unsigned char)(samples >> 8);
  f[25] = (unsigned char)samples;
}

static void restart(void) {
  destroy(inst);
  inst = NULL;
  th_reset(sluice_plugin_entry());
}

/* What no server could transcribe fails for good here, before any request:
 * not an audio container, shorter than min_seconds (a truncated WAV), longer
 * than max_seconds (WAV header or FLAC STREAMINFO). Audio of unknown length
 * (Ogg, MP3, WebM, MP4) goes out as before. */
static void test_audio_checked_before_upload(void **st) {
  (void)st;
  static const unsigned char junk[64] = "this is not audio, only text";
  start(junk, sizeof junk);
  assert_int_equal(th.nreq, 0);
  assert_int_equal(th.outcome, SL_PLUGIN_FAIL);
  assert_string_equal(th.error_class, "undecodable_audio");
  restart();
  start(wav, 44 + 3200); /* cut to 0.1 s */
  assert_int_equal(th.nreq, 0);
  assert_int_equal(th.outcome, SL_PLUGIN_FAIL);
  assert_string_equal(th.error_class, "audio_too_short");
  restart();
  th_set("max_seconds", "1");
  start(wav, sizeof wav); /* 1.5 s */
  assert_int_equal(th.nreq, 0);
  assert_int_equal(th.outcome, SL_PLUGIN_FAIL);
  assert_string_equal(th.error_class, "audio_too_long");
  static unsigned char flac[4096];
  make_flac(flac, sizeof flac, 40000); /* 2.5 s */
  restart();
  th_set("max_seconds", "2");
  start(flac, sizeof flac);
  assert_int_equal(th.nreq, 0);
  assert_string_equal(th.error_class, "audio_too_long");
  restart();
  th_set("max_seconds", "3");
  start(flac, sizeof flac);
  assert_int_equal(th.nreq, 1);
  th_reply(200, "{\"text\":\"hello\"}");
  assert_int_equal(th.outcome, SL_PLUGIN_DONE);
  assert_float_equal(th_num("duration_s"), 2.5, 1e-9); /* none in the reply: STREAMINFO's */
  static const unsigned char webm[64] = {0x1A, 0x45, 0xDF, 0xA3};
  restart();
  start(webm, sizeof webm);
  assert_int_equal(th.nreq, 1);
  th_reply(200, "{\"text\":\" hello there \\n\"}"); /* faster-whisper-server's leading blank */
  assert_int_equal(th.outcome, SL_PLUGIN_DONE);
  assert_string_equal(th_str("text"), "hello there");
}

static void test_config_errors(void **st) {
  (void)st;
  static const char *bad[][2] = {{"base_url", "ftp://x"}, {"response_format", "srt"},
                                 {"model", ""},           {"timeout_ms", "0"},
                                 {"api_key", "a\nb"},     {"max_response", "10"},
                                 {"min_seconds", "-1"},   {"max_seconds", "-1"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    th_reset(sluice_plugin_entry());
    th_set(bad[i][0], bad[i][1]);
    char err[256] = "";
    void *s = NULL;
    assert_int_equal(create(&th_host, NULL, &s, err, sizeof err), SL_ECONFIG);
    assert_null(s);
    if (!strstr(err, bad[i][0])) fail_msg("error for %s lacks the key: %s", bad[i][0], err);
  }
  /* the descriptor: async, the right kind and name, a secret api_key */
  const sl_plugin *d = sluice_plugin_entry();
  assert_int_equal(d->abi_version, SL_PLUGIN_ABI_VERSION);
  assert_false(d->flags & SL_PLUGIN_SYNC);
  assert_string_equal(d->kind, "stt");
  assert_string_equal(d->name, "openai");
  int secret = 0;
  for (size_t i = 0; i < d->nconf; i++)
    if (strcmp(d->conf[i].key, "api_key") == 0) secret = d->conf[i].secret;
  assert_true(secret);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_request_and_verbose_reply, setup, teardown),
      cmocka_unit_test_setup_teardown(test_segment_pauses, setup, teardown),
      cmocka_unit_test_setup_teardown(test_json_mode_and_wav_duration, setup, teardown),
      cmocka_unit_test_setup_teardown(test_status_policy, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_replies, setup, teardown),
      cmocka_unit_test_setup_teardown(test_empty_audio_and_send_failure, setup, teardown),
      cmocka_unit_test_setup_teardown(test_audio_checked_before_upload, setup, teardown),
      cmocka_unit_test_setup_teardown(test_config_errors, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
