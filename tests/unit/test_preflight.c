/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_preflight.c — step/preflight's core (plugins/step/preflight) on real
 * recordings in every format a browser or phone uploads that Debian can
 * decode under a permissive or LGPL licence.
 *
 * Speech is synthesised with espeak-ng into a mkdtemp() directory, then
 * encoded the way browsers and phones record: WebM/Opus and Ogg/Opus
 * (GStreamer's opusenc + webmmux/oggmux), MP3 (lamemp3enc), FLAC (sox), and
 * WAV at 22.05 kHz (espeak's own). Silence is sox's digital silence and a
 * low hiss. Every format must decode to the same length as the WAV (within
 * codec padding), measure speech in it, and none in the silent ones; FLAC
 * written by sl_pf_flac must decode back to exactly the same samples.
 * espeak-ng, sox and gst-launch-1.0 are in tools/packages/dev.txt; the test
 * fails without them.
 */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sluice/sl_err.h"
#include "step/preflight/preflight.h"
#include "step/preflight/sandbox.h"

static char dir[64];
static const sl_pf_conf conf = {.max_seconds = 600,
                                .silence_dbfs = -50,
                                .timeout_ms = 30000,
                                .max_rate = 96000,
                                .max_channels = 2};

/* a command without a shell; stdout and stderr to /dev/null; exit status */
static int run(char *const argv[]) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      dup2(devnull, STDERR_FILENO);
      dup2(devnull, STDOUT_FILENO);
    }
    execvp(argv[0], argv);
    _exit(127);
  }
  int status;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

static void path_of(char *buf, size_t cap, const char *name) {
  int n = snprintf(buf, cap, "%s/%s", dir, name);
  assert_true(n > 0 && (size_t)n < cap);
}

static unsigned char *read_all(const char *name, size_t *len) {
  char path[128];
  path_of(path, sizeof path, name);
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("%s was not made", path);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  assert_true(n >= 0);
  rewind(f);
  unsigned char *buf = malloc(n ? (size_t)n : 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

/* gst-launch-1.0 filesrc speech.wav ! wavparse ! audioconvert ! ENC ! MUX ! filesink OUT */
static int gst_encode(const char *enc, const char *mux, const char *out) {
  char in[128], o[160], loc_in[160];
  path_of(in, sizeof in, "speech.wav");
  path_of(o, sizeof o, out);
  snprintf(loc_in, sizeof loc_in, "location=%s", in);
  char loc_out[200];
  snprintf(loc_out, sizeof loc_out, "location=%s", o);
  char *argv[20];
  int n = 0;
  argv[n++] = "gst-launch-1.0";
  argv[n++] = "-q";
  argv[n++] = "filesrc";
  argv[n++] = loc_in;
  argv[n++] = "!";
  argv[n++] = "wavparse";
  argv[n++] = "!";
  argv[n++] = "audioconvert";
  argv[n++] = "!";
  argv[n++] = "audioresample";
  argv[n++] = "!";
  argv[n++] = (char *)enc;
  argv[n++] = "!";
  if (mux) {
    argv[n++] = (char *)mux;
    argv[n++] = "!";
  }
  argv[n++] = "filesink";
  argv[n++] = loc_out;
  argv[n] = NULL;
  return run(argv);
}

static int group_setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/sl-preflight-XXXXXX");
  if (!mkdtemp(dir)) return -1;
  char wav[128], wav16[128], flac[128], sil[128], hiss[128], txt[256];
  path_of(wav, sizeof wav, "speech.wav");
  path_of(wav16, sizeof wav16, "speech16k.wav");
  path_of(flac, sizeof flac, "speech.flac");
  path_of(sil, sizeof sil, "silence.wav");
  path_of(hiss, sizeof hiss, "hiss.wav");
  snprintf(txt, sizeof txt, "On weekends I usually go hiking in the mountains with my friends.");
  char *espeak[] = {"espeak-ng", "-w", wav, txt, NULL};
  char *tofl[] = {"sox", wav, flac, NULL};
  /* already what preflight gives: 16-bit mono at 16 kHz */
  char *to16[] = {"sox", wav, "-r", "16000", "-c", "1", "-b", "16", wav16, NULL};
  char *mksil[] = {"sox", "-n", "-r", "16000", "-c", "1", "-b", "16", sil, "trim", "0", "3", NULL};
  /* a steady hiss 45 dB below full scale: room noise, not speech */
  char *mkhiss[] = {"sox", "-n",    "-r", "48000",      "-c",  "2",      "-b", "16",
                    hiss,  "synth", "3",  "whitenoise", "vol", "0.0056", NULL};
  /* a minute of noise at 48 kHz stereo: decodes quickly, but not in 20 ms */
  char noise[128];
  path_of(noise, sizeof noise, "noise60.flac");
  char *mknoise[] = {"sox", "-n",    "-r", "48000",      "-c",  "2",   "-b", "16",
                     noise, "synth", "60", "whitenoise", "vol", "0.5", NULL};
  /* the crafted uploads (tests/tools/hostile_media.py) */
  char webm[128], env[160];
  path_of(webm, sizeof webm, "speech.webm");
  snprintf(env, sizeof env, "SRC_WEBM=%s", webm);
  char *hostile[] = {"env", env, "python3", SLUICE_SOURCE_DIR "/tests/tools/hostile_media.py",
                     dir,   NULL};
  if (run(espeak) || run(tofl) || run(to16) || run(mksil) || run(mkhiss) ||
      gst_encode("opusenc", "webmmux", "speech.webm") ||
      gst_encode("opusenc", "oggmux", "speech.opus") ||
      gst_encode("lamemp3enc", NULL, "speech.mp3") || run(mknoise) || run(hostile)) {
    fprintf(stderr, "making the recordings failed: espeak-ng, sox and gst-launch-1.0 with "
                    "gstreamer1.0-plugins-good are needed (tools/bootstrap)\n");
    return -1;
  }
  char err[256];
  if (sl_pf_init(err, sizeof err)) {
    fprintf(stderr, "%s\n", err);
    return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  char *rm[] = {"rm", "-rf", dir, NULL};
  run(rm);
  return 0;
}

static double decoded_seconds(const char *name, double *speech) {
  size_t len;
  unsigned char *buf = read_all(name, &len);
  sl_pf_audio a;
  char err[512] = "";
  int rc = sl_pf_decode(buf, len, &conf, &a, err, sizeof err);
  free(buf);
  if (rc) fail_msg("%s: %s: %s", name, sl_err_name(rc), err);
  assert_int_equal(sl_pf_analyse(&a, conf.silence_dbfs), 0);
  double d = a.duration_s;
  *speech = a.speech_s;
  sl_pf_audio_clear(&a);
  return d;
}

/* every format: the WAV's length (codecs pad a few tens of ms), speech */
static void test_formats(void **state) {
  (void)state;
  double ref_speech, ref = decoded_seconds("speech.wav", &ref_speech);
  assert_true(ref > 2.0 && ref < 10.0);
  assert_true(ref_speech > 1.5);
  assert_true(ref_speech <= ref);
  static const char *const files[] = {"speech.flac", "speech.webm", "speech.opus", "speech.mp3"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    double speech, d = decoded_seconds(files[i], &speech);
    if (d < ref - 0.1 || d > ref + 0.1)
      fail_msg("%s decoded to %.3f s, the WAV to %.3f s", files[i], d, ref);
    if (speech < ref_speech * 0.8 || speech > ref_speech * 1.2)
      fail_msg("%s holds %.2f s of speech, the WAV %.2f s", files[i], speech, ref_speech);
  }
}

/* pcm of segments: (seconds, amplitude) pairs, a 220 Hz tone each (0:
 * digital silence with a little noise over it) */
static sl_pf_audio segments(const double (*seg)[2], size_t n) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) total += (size_t)(seg[i][0] * SL_PF_RATE + 0.5);
  sl_pf_audio a = {.n = total, .duration_s = (double)total / SL_PF_RATE};
  a.pcm = calloc(total ? total : 1, sizeof *a.pcm);
  assert_non_null(a.pcm);
  size_t k = 0;
  unsigned rnd = 12345;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < (size_t)(seg[i][0] * SL_PF_RATE + 0.5); j++, k++) {
      rnd = rnd * 1103515245u + 12345u;
      double noise = (double)((rnd >> 16) % 21) - 10.0; /* about -70 dBFS */
      a.pcm[k] = (int16_t)(seg[i][1] * 32767.0 *
                               sin(2 * 3.14159265358979 * 220.0 * (double)k / SL_PF_RATE) +
                           noise);
    }
  return a;
}

static int near(double a, double b) { return fabs(a - b) < 0.021; } /* a frame */

/* the timing of speech with pauses placed by hand: leading and trailing
 * silence count nowhere, a gap under 250 ms belongs to its run, a click
 * (40 ms) inside a pause is no speech and does not split it */
static void test_timing(void **state) {
  (void)state;
  static const double seg[][2] = {
      {0.50, 0}, {1.00, 0.3},                         /* speech starts at 0.5 s */
      {0.40, 0}, {0.80, 0.3}, {0.10, 0}, {0.60, 0.3}, /* a pause of 0.4 s; a gap of 0.1 s */
      {0.60, 0}, {0.04, 0.5}, {0.60, 0}, {0.50, 0.3}, /* a pause of 1.24 s with a click in it */
      {0.24, 0}, {0.30, 0.3},                         /* a gap of 0.24 s: no pause */
      {0.70, 0},                                      /* trailing silence */
  };
  sl_pf_audio a = segments(seg, sizeof seg / sizeof seg[0]);
  assert_int_equal(sl_pf_analyse(&a, conf.silence_dbfs), 0);
  const sl_pf_timing *t = &a.timing;
  /* from 0.5 s to the end of the last tone: 6.38 s in all, less 0.5 and 0.7 */
  if (!near(t->speaking_s, 6.38 - 0.5 - 0.7)) fail_msg("speaking_s %.3f", t->speaking_s);
  assert_int_equal(t->pauses, 2);
  assert_int_equal(t->runs, 3);
  if (!near(t->pause_total_s, 0.40 + 1.24)) fail_msg("pause_total_s %.3f", t->pause_total_s);
  if (!near(t->pause_longest_s, 1.24)) fail_msg("pause_longest_s %.3f", t->pause_longest_s);
  if (!near(t->pause_mean_s, (0.40 + 1.24) / 2)) fail_msg("pause_mean_s %.3f", t->pause_mean_s);
  if (!near(t->run_mean_s, (5.18 - 1.64) / 3)) fail_msg("run_mean_s %.3f", t->run_mean_s);
  /* speech: the tones, not the gaps between them nor the click */
  if (!near(a.speech_s, 1.0 + 0.8 + 0.6 + 0.5 + 0.3)) fail_msg("speech_s %.3f", a.speech_s);
  sl_pf_audio_clear(&a);

  /* one run, no pause; and no speech at all: all zero */
  static const double one[][2] = {{0.3, 0}, {1.2, 0.3}, {0.3, 0}};
  a = segments(one, 3);
  assert_int_equal(sl_pf_analyse(&a, conf.silence_dbfs), 0);
  assert_int_equal(a.timing.pauses, 0);
  assert_int_equal(a.timing.runs, 1);
  if (!near(a.timing.speaking_s, 1.2)) fail_msg("one run: speaking_s %.3f", a.timing.speaking_s);
  if (!near(a.timing.run_mean_s, 1.2)) fail_msg("one run: run_mean_s %.3f", a.timing.run_mean_s);
  sl_pf_audio_clear(&a);
  static const double none[][2] = {{2.0, 0}};
  a = segments(none, 1);
  assert_int_equal(sl_pf_analyse(&a, conf.silence_dbfs), 0);
  assert_int_equal(a.timing.runs, 0);
  assert_true(a.timing.speaking_s == 0 && a.timing.run_mean_s == 0);
  sl_pf_audio_clear(&a);
}

/* a's samples as a 16 kHz mono 16-bit WAV (malloc'd, *len bytes) */
static unsigned char *wav_of(const sl_pf_audio *a, size_t *len) {
  uint32_t data = (uint32_t)(a->n * 2);
  unsigned char *w = malloc(44 + data);
  assert_non_null(w);
  const uint32_t u32[] = {36 + data, 16, 0x00010001u, SL_PF_RATE, SL_PF_RATE * 2, 0x00100002u};
  memcpy(w, "RIFF", 4), memcpy(w + 4, &u32[0], 4), memcpy(w + 8, "WAVEfmt ", 8);
  memcpy(w + 16, &u32[1], 4), memcpy(w + 20, &u32[2], 4), memcpy(w + 24, &u32[3], 4);
  memcpy(w + 28, &u32[4], 4), memcpy(w + 32, &u32[5], 4), memcpy(w + 36, "data", 4);
  memcpy(w + 40, &data, 4), memcpy(w + 44, a->pcm, data);
  *len = 44 + data;
  return w;
}

/* the FLAC holds the speech: 2 s of silence before and after cut to 0.3 s,
 * an inner silence of 1.6 s shortened to 1 s, one of 0.4 s kept; the same
 * speech and pauses when the FLAC is measured again; trim off: all of it */
/* r's pause spans are want's n, give or take two frames */
static void spans_near(const sl_pf_result *r, const double want[][2], uint32_t n) {
  if (r->nspans != n) fail_msg("%u pause spans, not %u", r->nspans, n);
  for (uint32_t i = 0; i < n; i++)
    if (fabs(r->spans[i][0] - want[i][0]) > 0.041 || fabs(r->spans[i][1] - want[i][1]) > 0.041)
      fail_msg("pause %u at %.3f-%.3f s, not %.2f-%.2f", i, (double)r->spans[i][0],
               (double)r->spans[i][1], want[i][0], want[i][1]);
}

static void test_trim(void **state) {
  (void)state;
  static const double seg[][2] = {{2.0, 0}, {1.0, 0.3}, {1.6, 0}, {0.5, 0.3},
                                  {0.4, 0}, {0.5, 0.3}, {2.0, 0}};
  sl_pf_audio a = segments(seg, sizeof seg / sizeof seg[0]);
  size_t len;
  unsigned char *wav = wav_of(&a, &len);
  sl_pf_conf c = conf;
  c.normalize = 1, c.trim = 1, c.keep_silence_ms = 300, c.max_silence_ms = 1000;
  sl_pf_result r;
  assert_int_equal(sl_pf_check(wav, len, &c, &r), 0);
  if (!near(r.duration_s, 8.0)) fail_msg("duration_s %.3f", r.duration_s);
  double want = 0.3 + 1.0 + 1.0 + 0.5 + 0.4 + 0.5 + 0.3;
  if (fabs(r.flac_s - want) > 0.041) fail_msg("flac_s %.3f, not %.3f", r.flac_s, want);
  assert_int_equal(r.timing.pauses, 2); /* measured on the whole recording */
  if (!near(r.timing.pause_longest_s, 1.6)) fail_msg("longest %.3f", r.timing.pause_longest_s);
  /* where the two pauses lie in the FLAC: 0.3 s kept before the first tone
   * of 1.0 s, the 1.6 s pause shortened to 1.0, a tone of 0.5, 0.4 s */
  static const double in_flac[2][2] = {{1.3, 2.3}, {2.8, 3.2}};
  spans_near(&r, in_flac, 2);
  sl_pf_audio t;
  char err[256] = "";
  if (sl_pf_decode(r.flac, r.flac_len, &conf, &t, err, sizeof err)) fail_msg("%s", err);
  assert_int_equal(sl_pf_analyse(&t, conf.silence_dbfs), 0);
  if (fabs(t.duration_s - r.flac_s) > 0.001) fail_msg("FLAC of %.3f s", t.duration_s);
  if (fabs(t.speech_s - r.speech_s) > 0.041)
    fail_msg("the FLAC's speech %.3f s, the recording's %.3f s", t.speech_s, r.speech_s);
  assert_int_equal(t.timing.pauses, 2);
  if (fabs(t.timing.pause_longest_s - 1.0) > 0.041)
    fail_msg("the FLAC's longest pause %.3f s", t.timing.pause_longest_s);
  sl_pf_audio_clear(&t);
  sl_pf_result_clear(&r);
  c.trim = 0;
  assert_int_equal(sl_pf_check(wav, len, &c, &r), 0);
  if (!near(r.flac_s, 8.0)) fail_msg("untrimmed flac_s %.3f", r.flac_s);
  static const double whole[2][2] = {{3.0, 4.6}, {5.1, 5.5}}; /* the recording's own */
  spans_near(&r, whole, 2);
  sl_pf_result_clear(&r);
  c.trim = 1, c.max_silence_ms = 0; /* inner silences kept whole */
  assert_int_equal(sl_pf_check(wav, len, &c, &r), 0);
  if (fabs(r.flac_s - (want + 0.6)) > 0.041) fail_msg("inner kept: flac_s %.3f", r.flac_s);
  static const double kept[2][2] = {{1.3, 2.9}, {3.4, 3.8}};
  spans_near(&r, kept, 2);
  sl_pf_result_clear(&r);
  free(wav);
  sl_pf_audio_clear(&a);
}

static void test_silence_is_no_speech(void **state) {
  (void)state;
  double speech, d = decoded_seconds("silence.wav", &speech);
  assert_true(d > 2.9 && d < 3.1);
  assert_true(speech == 0.0);
  d = decoded_seconds("hiss.wav", &speech);
  assert_true(d > 2.9 && d < 3.1); /* 48 kHz stereo resampled to 16 kHz mono */
  if (speech > 0.0) fail_msg("a steady hiss measured %.2f s of speech", speech);
}

static void test_not_audio(void **state) {
  (void)state;
  sl_pf_audio a;
  char err[512] = "";
  static const char junk[] = "this is a text file that someone uploaded as audio/webm, not sound";
  assert_int_equal(sl_pf_decode(junk, sizeof junk, &conf, &a, err, sizeof err), SL_EDECODE);
  assert_non_null(strstr(err, "not a recording"));
  sl_pf_audio_clear(&a);
  assert_int_equal(sl_pf_decode("", 0, &conf, &a, err, sizeof err), SL_EDECODE);
  assert_non_null(strstr(err, "empty"));
  sl_pf_audio_clear(&a);
  /* a WebM cut after its first 300 bytes: the header, no audio */
  size_t len;
  unsigned char *buf = read_all("speech.webm", &len);
  int rc = sl_pf_decode(buf, 300, &conf, &a, err, sizeof err);
  free(buf);
  assert_int_equal(rc, SL_EDECODE);
  sl_pf_audio_clear(&a);
}

static void test_too_long(void **state) {
  (void)state;
  size_t len;
  unsigned char *buf = read_all("speech.webm", &len);
  sl_pf_conf c = conf;
  c.max_seconds = 1.0;
  sl_pf_audio a;
  char err[512] = "";
  assert_int_equal(sl_pf_decode(buf, len, &c, &a, err, sizeof err), SL_ETOOBIG);
  assert_true(a.duration_s <= 1.0 + 1.0 / SL_PF_RATE);
  sl_pf_audio_clear(&a);
  free(buf);
}

/* An upload crafted to make a decoder work for an attacker: each is refused
 * with its own error, quickly and without plugging a decoder outside the
 * allow-list (tests/tools/hostile_media.py says what each one is). */
static void test_hostile(void **state) {
  (void)state;
  static const struct {
    const char *name;
    int rc;
    const char *says;
  } cases[] = {
      {"png_huge.png", SL_EUNSUPPORTED, "image/png stream, not audio"},
      {"png_small.png", SL_EUNSUPPORTED, "image/png stream, not audio"},
      {"zip.webm", SL_EUNSUPPORTED, "application/zip stream, not audio"},
      {"flac_wide.flac", SL_EUNSUPPORTED, "655350 Hz"},
      {"aac_2h.m4a", SL_ENOTFOUND, "AAC"},
      {"ogg_10h.opus", SL_EDECODE, "cut short: the container declares 36000.0 s"},
      {"mkv_cut.webm", SL_EDECODE, "cut short"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t len;
    unsigned char *buf = read_all(cases[i].name, &len);
    sl_pf_audio a;
    char err[512] = "";
    int rc = sl_pf_decode(buf, len, &conf, &a, err, sizeof err);
    sl_pf_audio_clear(&a);
    free(buf);
    if (rc != cases[i].rc || !strstr(err, cases[i].says))
      fail_msg("%s: %s (%s), expected %s saying \"%s\"", cases[i].name, sl_err_name(rc), err,
               sl_err_name(cases[i].rc), cases[i].says);
  }
  /* the rate limit is a setting: without it the wide FLAC is not refused for it */
  sl_pf_conf any = conf;
  any.max_rate = 0;
  any.max_channels = 0;
  size_t len;
  unsigned char *buf = read_all("flac_wide.flac", &len);
  sl_pf_audio a;
  char err[512] = "";
  int rc = sl_pf_decode(buf, len, &any, &a, err, sizeof err);
  sl_pf_audio_clear(&a);
  free(buf);
  if (rc == SL_EUNSUPPORTED) fail_msg("refused without limits: %s", err);
}

/* Only the allow-list is plugged, whatever the host has installed */
static void test_allow_list(void **state) {
  (void)state;
  static const char *const yes[] = {"opusdec",       "vorbisdec", "flacdec",  "mpg123audiodec",
                                    "matroskademux", "oggdemux",  "wavparse", "aacparse"};
  static const char *const no[] = {"pngdec",    "jpegdec", "avdec_aac", "avdec_h264", "faad",
                                   "fdkaacdec", "vp8dec",  "decodebin", NULL};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
    if (!sl_pf_allowed(yes[i])) fail_msg("%s is not allowed", yes[i]);
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
    if (sl_pf_allowed(no[i])) fail_msg("%s is allowed", no[i] ? no[i] : "NULL");
}

/* The deadline is wall time, checked while samples flow too: a minute of
 * noise that decodes steadily still ends at a 20 ms deadline */
static void test_deadline_while_streaming(void **state) {
  (void)state;
  size_t len;
  unsigned char *buf = read_all("noise60.flac", &len);
  sl_pf_conf c = conf;
  c.timeout_ms = 20;
  sl_pf_audio a;
  char err[512] = "";
  int rc = sl_pf_decode(buf, len, &c, &a, err, sizeof err);
  if (rc != SL_ETIMEDOUT)
    fail_msg("decoding 60 s with a 20 ms deadline: %s after %.1f s of audio (%s)",
             rc ? sl_err_name(rc) : "done", a.duration_s, err);
  assert_true(a.duration_s < 60.0);
  sl_pf_audio_clear(&a);
  free(buf);
}

/* A codec with no decoder is timed from its parsed frames: the 2-hour AAC
 * stops at the limit; a decodable file measures its own length */
static void test_measure(void **state) {
  (void)state;
  size_t len;
  unsigned char *buf = read_all("aac_2h.m4a", &len);
  double s = 0;
  char err[512] = "";
  assert_int_equal(sl_pf_measure(buf, len, &conf, &s, err, sizeof err), SL_ETOOBIG);
  assert_true(s >= conf.max_seconds && s < conf.max_seconds + 1);
  sl_pf_conf c = conf;
  c.max_seconds = 3 * 3600;
  int rc = sl_pf_measure(buf, len, &c, &s, err, sizeof err);
  if (rc || s < 7199 || s > 7201)
    fail_msg("the 2-hour AAC measured %s, %.1f s (%s)", rc ? sl_err_name(rc) : "ok", s, err);
  free(buf);
  buf = read_all("speech.webm", &len);
  assert_int_equal(sl_pf_measure(buf, len, &conf, &s, err, sizeof err), 0);
  assert_true(s > 2.0 && s < 10.0);
  free(buf);
  buf = read_all("zip.webm", &len);
  assert_int_equal(sl_pf_measure(buf, len, &conf, &s, err, sizeof err), SL_EUNSUPPORTED);
  free(buf);
}

/* ---- the sandbox (sluice-decode) ---- */

static sl_pf_sandbox *sandbox(void) {
  sl_pf_sandbox *sb = NULL;
  char err[256] = "";
  sl_pf_sandbox_conf sc = {.path = SLUICE_DECODE, .memory_mb = 256, .grace_ms = 500};
  if (sl_pf_sandbox_new(&sc, &sb, err, sizeof err)) fail_msg("%s", err);
  return sb;
}

static int check_in(sl_pf_sandbox *sb, const char *name, const sl_pf_conf *c, sl_pf_result *r) {
  size_t len;
  unsigned char *buf = read_all(name, &len);
  int rc = sb ? sl_pf_sandbox_check(sb, buf, len, c, r) : sl_pf_check(buf, len, c, r);
  free(buf);
  return rc;
}

/* what the process gives is what this process gives: verdicts, measures,
 * the FLAC to the byte */
static void test_sandbox_same(void **state) {
  (void)state;
  sl_pf_sandbox *sb = sandbox();
  sl_pf_conf c = conf;
  c.normalize = 1;
  c.flac_level = 5;
  c.min_speech_s = 0.3;
  static const char *const files[] = {"speech.webm",  "speech.mp3", "silence.wav",
                                      "png_huge.png", "zip.webm",   "ogg_10h.opus"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    sl_pf_result in, out;
    check_in(NULL, files[i], &c, &in);
    check_in(sb, files[i], &c, &out);
    if (in.rc != out.rc || strcmp(in.err, out.err) != 0 || in.duration_s != out.duration_s ||
        in.speech_s != out.speech_s || in.flac_len != out.flac_len)
      fail_msg("%s: here %s %.2f s (%s), in the sandbox %s %.2f s (%s)", files[i],
               sl_err_name(in.rc), in.duration_s, in.err, sl_err_name(out.rc), out.duration_s,
               out.err);
    if (in.flac_len) assert_memory_equal(in.flac, out.flac, in.flac_len);
    sl_pf_result_clear(&in);
    sl_pf_result_clear(&out);
  }
  /* one process served them all */
  pid_t pid = sl_pf_sandbox_pid(sb);
  assert_true(pid > 0);
  sl_pf_sandbox_free(sb);
  assert_int_equal(kill(pid, 0), -1); /* and it is gone (reaped) with the sandbox */
}

static int proc_field(pid_t pid, const char *field, char *val, size_t cap) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int found = -1;
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0 && line[n] == ':') {
      snprintf(val, cap, "%s", line + n + 1 + strspn(line + n + 1, " \t"));
      val[strcspn(val, "\n")] = '\0';
      found = 0;
    }
  fclose(f);
  return found;
}

/* the process holds none of the stage's secrets, descriptors or rights */
/* The decoding process, confined and sealed as when it serves, tries what
 * a decoder exploit would: a socket, a memory file, a file, an unnamed
 * file or a directory in /tmp, /dev/shm and /var/tmp (world-writable, and
 * tmpfs is memory), exec. Each must be refused. */
static void test_sandbox_self_test(void **state) {
  (void)state;
  FILE *p = popen(SLUICE_DECODE " --self-test --memory-mb 256 </dev/null 2>&1", "r");
  assert_non_null(p);
  char line[256], allowed[1024] = "";
  int lines = 0;
  while (fgets(line, sizeof line, p)) {
    lines++;
    if (strstr(line, "ALLOWED")) strncat(allowed, line, sizeof allowed - strlen(allowed) - 1);
  }
  int st = pclose(p);
  if (allowed[0]) fail_msg("the confined decoder could still do: %s", allowed);
  assert_int_equal(lines, 12); /* every probe answered */
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_sandbox_confined(void **state) {
  (void)state;
  setenv("SLUICE_S3_SECRET_KEY", "a-secret-the-decoder-must-not-see", 1);
  int leak = open("/dev/null", O_RDONLY); /* a descriptor without FD_CLOEXEC */
  assert_true(leak >= 0);
  sl_pf_sandbox *sb = sandbox();
  sl_pf_result r;
  assert_int_equal(check_in(sb, "speech.webm", &conf, &r), 0);
  sl_pf_result_clear(&r);
  pid_t pid = sl_pf_sandbox_pid(sb);
  char v[128];
  assert_int_equal(proc_field(pid, "NoNewPrivs", v, sizeof v), 0);
  assert_string_equal(v, "1");
  assert_int_equal(proc_field(pid, "Seccomp", v, sizeof v), 0);
  assert_string_equal(v, "2"); /* a filter */
  if (geteuid() == 0) {
    assert_int_equal(proc_field(pid, "Uid", v, sizeof v), 0);
    if (strncmp(v, "65534", 5) != 0) fail_msg("the decoder runs as uid %s, not nobody", v);
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.' && atoi(e->d_name) > 2) {
      char link[128] = "", at[400];
      snprintf(at, sizeof at, "%s/%s", path, e->d_name);
      ssize_t n = readlink(at, link, sizeof link - 1);
      link[n > 0 ? n : 0] = '\0';
      /* the recording's and the FLAC's memory files (the recording's
       * read-only), and GStreamer's own wake-up descriptors */
      int fd = atoi(e->d_name);
      if (fd == SL_PF_WIRE_FD_RECORDING || fd == SL_PF_WIRE_FD_FLAC) {
        const char *want =
            fd == SL_PF_WIRE_FD_FLAC ? "/memfd:sluice-flac" : "/memfd:sluice-recording";
        if (strncmp(link, want, strlen(want)) != 0)
          fail_msg("the decoder's descriptor %d is %s, not %s", fd, link, want);
        char info[128], line[128];
        snprintf(info, sizeof info, "/proc/%d/fdinfo/%d", (int)pid, fd);
        FILE *fi = fopen(info, "r");
        assert_non_null(fi);
        long flags = -1;
        while (fgets(line, sizeof line, fi))
          if (strncmp(line, "flags:", 6) == 0) flags = strtol(line + 6, NULL, 8);
        fclose(fi);
        assert_int_equal(flags & O_ACCMODE, fd == SL_PF_WIRE_FD_FLAC ? O_RDWR : O_RDONLY);
        continue;
      }
      if (!strstr(link, "eventfd") && !strstr(link, "pipe:") && !strstr(link, "socket:"))
        fail_msg("the decoder holds descriptor %s: %s", e->d_name, link);
      if (strstr(link, "socket:")) {
        /* a socket would have to be one it made itself; it cannot (seccomp) */
        fail_msg("the decoder holds a socket (descriptor %s)", e->d_name);
      }
    }
  closedir(d);
  /* what it writes into its files is bounded like its memory (256 MiB) */
  snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
  FILE *lim = fopen(path, "r");
  assert_non_null(lim);
  char line[256];
  int fsize = 0;
  while (fgets(line, sizeof line, lim))
    if (strncmp(line, "Max file size", 13) == 0) {
      unsigned long long soft = 0, hard = 0;
      assert_int_equal(sscanf(line + 13, "%llu %llu", &soft, &hard), 2);
      assert_true(soft == 256ull << 20 && hard == 256ull << 20);
      fsize = 1;
    }
  fclose(lim);
  assert_true(fsize);
  snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char env[4096];
  size_t n = fread(env, 1, sizeof env - 1, f);
  fclose(f);
  env[n] = '\0';
  for (size_t i = 0; i < n; i += strlen(env + i) + 1)
    if (strncmp(env + i, "MALLOC_ARENA_MAX=", 17) && strncmp(env + i, "ASAN_OPTIONS=", 13) &&
        strncmp(env + i, "UBSAN_OPTIONS=", 14) && strncmp(env + i, "LSAN_OPTIONS=", 13))
      fail_msg("the decoder's environment holds %s", env + i);
  close(leak);
  unsetenv("SLUICE_S3_SECRET_KEY");
  sl_pf_sandbox_free(sb);
}

typedef struct {
  sl_pf_sandbox *sb;
  sl_pf_conf c;
  sl_pf_result r;
  const char *name;
} job;

static void *run_job(void *arg) {
  job *j = arg;
  check_in(j->sb, j->name, &j->c, &j->r);
  return NULL;
}

/* A decoder that stops answering (SIGSTOP: as a decoder stuck in a loop)
 * is killed at the deadline; the next answer gets a new process. A process
 * killed between answers is replaced without the answer noticing. */
static void test_sandbox_deadline(void **state) {
  (void)state;
  job j = {.sb = sandbox(), .c = conf, .name = "noise60.flac"};
  j.c.timeout_ms = 1000;
  sl_pf_result r;
  assert_int_equal(check_in(j.sb, "speech.webm", &conf, &r), 0); /* started */
  sl_pf_result_clear(&r);
  pid_t first = sl_pf_sandbox_pid(j.sb);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, run_job, &j), 0);
  nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
  kill(first, SIGSTOP);
  pthread_join(t, NULL);
  if (j.r.rc != SL_ETIMEDOUT || !strstr(j.r.err, "took longer than 1000 ms"))
    fail_msg("a stopped decoder: %s (%s)", sl_err_name(j.r.rc), j.r.err);
  sl_pf_result_clear(&j.r);
  assert_int_equal(sl_pf_sandbox_pid(j.sb), 0);
  assert_int_equal(kill(first, 0), -1); /* killed and reaped */
  assert_int_equal(check_in(j.sb, "speech.webm", &conf, &r), 0);
  sl_pf_result_clear(&r);
  pid_t second = sl_pf_sandbox_pid(j.sb);
  assert_true(second > 0 && second != first);
  kill(second, SIGKILL);
  nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
  assert_int_equal(check_in(j.sb, "speech.webm", &conf, &r), 0);
  assert_true(r.duration_s > 2.0);
  sl_pf_result_clear(&r);
  assert_true(sl_pf_sandbox_pid(j.sb) != second);
  sl_pf_sandbox_free(j.sb);
}

/* A decoding process that lies about the FLAC it wrote (tests/tools/
 * pf_liar.c: a length past its file or past the answer's bound, a file
 * grown past that bound, now or between answers) is believed in nothing:
 * the answer fails as one that broke its decoder's limits, no FLAC, the
 * process killed; the honest control passes. */
static void test_sandbox_liars(void **state) {
  (void)state;
  static const char *const how[] = {"honest", "overclaim", "overbound", "sparse",
                                    "grows",  "pauses",    "nan",       "spans"};
  sl_pf_conf c = conf;
  c.max_seconds = 10; /* a bound of 1.3 MB */
  for (size_t i = 0; i < sizeof how / sizeof how[0]; i++) {
    char link[128];
    snprintf(link, sizeof link, "%s/pf_liar-%s", dir, how[i]);
    unlink(link);
    assert_int_equal(symlink(PF_LIAR, link), 0);
    sl_pf_sandbox *sb = NULL;
    char err[256] = "";
    sl_pf_sandbox_conf sc = {.path = link, .memory_mb = 256, .grace_ms = 500};
    if (sl_pf_sandbox_new(&sc, &sb, err, sizeof err)) fail_msg("%s", err);
    sl_pf_result r;
    int honest = strcmp(how[i], "honest") == 0, grows = strcmp(how[i], "grows") == 0;
    for (int n = 0; n < 2; n++) {
      int rc = check_in(sb, "speech.webm", &c, &r);
      if (honest || (grows && n == 0)) {
        if (rc != 0 || r.flac_len != 100) fail_msg("%s: %s (%s)", how[i], sl_err_name(rc), r.err);
        sl_pf_result_clear(&r);
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL); /* grows: ~100 MiB */
        continue;
      }
      if (rc != SL_ETIMEDOUT || !strstr(r.err, "broke the wire") || r.flac || r.flac_len)
        fail_msg("%s, answer %d: %s (%s), %zu FLAC bytes", how[i], n, sl_err_name(rc), r.err,
                 r.flac_len);
      assert_int_equal(sl_pf_sandbox_pid(sb), 0); /* killed */
      sl_pf_result_clear(&r);
      break;
    }
    sl_pf_sandbox_free(sb);
    unlink(link);
  }
}

/* A 16 kHz mono 16-bit WAV, read by libsndfile, gives GStreamer's samples,
 * the same too-long verdict and the same length at the limit */
static void test_plain_wav_as_gstreamer(void **state) {
  (void)state;
  static const char *const files[] = {"speech16k.wav", "silence.wav"};
  for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
    size_t len;
    unsigned char *buf = read_all(files[f], &len);
    for (int limited = 0; limited < 2; limited++) {
      sl_pf_conf c = conf;
      if (limited) c.max_seconds = 1.0;
      sl_pf_audio a, g;
      char ea[512] = "", eg[512] = "";
      int ra = sl_pf_decode(buf, len, &c, &a, ea, sizeof ea);
      int rg = sl_pf_decode_gst(buf, len, &c, &g, eg, sizeof eg);
      if (ra != rg || a.n != g.n)
        fail_msg("%s (max %.0f s): libsndfile %s, %zu samples; GStreamer %s, %zu samples", files[f],
                 c.max_seconds, sl_err_name(ra), a.n, sl_err_name(rg), g.n);
      assert_int_equal(ra, limited ? SL_ETOOBIG : 0);
      assert_string_equal(ea, eg);
      assert_true(a.n > SL_PF_RATE);
      assert_memory_equal(a.pcm, g.pcm, a.n * sizeof *a.pcm);
      assert_true(a.duration_s == g.duration_s);
      sl_pf_audio_clear(&a);
      sl_pf_audio_clear(&g);
    }
    free(buf);
  }
}

/* FLAC is lossless at every level: what sl_pf_flac wrote decodes to the
 * same samples; a higher level writes fewer bytes; no level outside 0..8 */
static void test_flac_round_trip(void **state) {
  (void)state;
  size_t len;
  unsigned char *buf = read_all("speech.webm", &len);
  sl_pf_audio a, b;
  char err[512] = "";
  assert_int_equal(sl_pf_decode(buf, len, &conf, &a, err, sizeof err), 0);
  free(buf);
  static const int levels[] = {0, 5, 8};
  size_t sizes[3];
  for (size_t i = 0; i < 3; i++) {
    void *flac = NULL;
    size_t flen = 0;
    assert_int_equal(sl_pf_flac(a.pcm, a.n, levels[i], &flac, &flen), 0);
    assert_true(flen > 1000 && flen < a.n * 2); /* smaller than the PCM */
    assert_memory_equal(flac, "fLaC", 4);
    int rc = sl_pf_decode(flac, flen, &conf, &b, err, sizeof err);
    if (rc) fail_msg("decoding our FLAC (level %d): %s: %s", levels[i], sl_err_name(rc), err);
    assert_int_equal(b.n, a.n);
    assert_memory_equal(b.pcm, a.pcm, a.n * sizeof *a.pcm);
    sizes[i] = flen;
    free(flac);
    sl_pf_audio_clear(&b);
  }
  assert_true(sizes[2] < sizes[0]);
  void *flac = NULL;
  size_t flen = 0;
  assert_int_equal(sl_pf_flac(a.pcm, a.n, -1, &flac, &flen), SL_EINVAL);
  assert_int_equal(sl_pf_flac(a.pcm, a.n, 9, &flac, &flen), SL_EINVAL);
  assert_null(flac);
  sl_pf_audio_clear(&a);
}

/* decodes on several threads at once (the stage's worker pool) */
static void *decode_thread(void *arg) {
  const char *name = arg;
  size_t len;
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) return (void *)1;
  static const size_t cap = 1u << 22;
  unsigned char *buf = malloc(cap);
  len = buf ? fread(buf, 1, cap, f) : 0;
  fclose(f);
  intptr_t bad = 0;
  for (int i = 0; i < 5 && !bad; i++) {
    sl_pf_audio a;
    char err[256];
    bad = sl_pf_decode(buf, len, &conf, &a, err, sizeof err) != 0 || a.duration_s < 2.0;
    sl_pf_audio_clear(&a);
  }
  free(buf);
  return (void *)bad;
}

static void test_threads(void **state) {
  (void)state;
  static const char *const files[] = {"speech.webm", "speech.opus", "speech.mp3", "speech.flac"};
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&t[i], NULL, decode_thread, (void *)files[i]), 0);
  for (int i = 0; i < 4; i++) {
    void *r = NULL;
    pthread_join(t[i], &r);
    if (r) fail_msg("thread decoding %s failed", files[i]);
  }
}

int main(void) {
  signal(SIGPIPE, SIG_IGN); /* as every stage does (sandbox.c) */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_formats),
      cmocka_unit_test(test_silence_is_no_speech),
      cmocka_unit_test(test_timing),
      cmocka_unit_test(test_trim),
      cmocka_unit_test(test_not_audio),
      cmocka_unit_test(test_too_long),
      cmocka_unit_test(test_flac_round_trip),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_plain_wav_as_gstreamer),
      cmocka_unit_test(test_hostile),
      cmocka_unit_test(test_allow_list),
      cmocka_unit_test(test_deadline_while_streaming),
      cmocka_unit_test(test_measure),
      cmocka_unit_test(test_sandbox_same),
      cmocka_unit_test(test_sandbox_confined),
      cmocka_unit_test(test_sandbox_self_test),
      cmocka_unit_test(test_sandbox_deadline),
      cmocka_unit_test(test_sandbox_liars),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
