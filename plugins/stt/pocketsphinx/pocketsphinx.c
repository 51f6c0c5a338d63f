/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pocketsphinx.c — offline speech-to-text with CMU PocketSphinx.
 *
 * Design: the caller's bytes are opened with sf_open_virtual() over a
 * read-only memory "file" (no temp files) and read in fixed chunks of at most
 * SL_PS_CHUNK interleaved samples (~1 s). Each chunk is downmixed to mono,
 * resampled by a streaming libsamplerate converter when the input rate
 * differs from the decoder's (16 kHz for en-us), dithered and converted to
 * int16, and appended to one PCM buffer (capped by max_seconds: 600 s is
 * 19 MB). That buffer is then recognized as a single full utterance, because
 * the en-us model expects batch cepstral mean normalisation (-cmn batch):
 * fed live in chunks, the first seconds of every file come out worse and the
 * result depends on the previous file. Apart from the PCM and PocketSphinx's
 * own search memory (which grows with the utterance, ~0.5 MB per second of
 * audio), every sl_ps uses a few fixed buffers allocated in sl_ps_new().
 * Word timings come from the segment iterator (frame index / -frate) of a
 * fresh stream per file, and filler/silence tokens are dropped.
 *
 * The length limit is enforced twice: from the header before decoding and
 * while reading (headers can lie). PocketSphinx logs through a process-global
 * sphinxbase callback: we install one once that discards info/warnings and
 * keeps the last error per thread (for err), so nothing reaches stderr except
 * a fatal error, just before sphinxbase exits the process.
 *
 * Note: the library header is included as <pocketsphinx.h>, which does not
 * search this directory, and ours as "pocketsphinx.h", which does.
 */
#define _POSIX_C_SOURCE 200809L

#include "pocketsphinx.h"

#include "common/sf_memory.h"
#include "sluice/sl_err.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pocketsphinx.h>
#include <samplerate.h>
#include <sndfile.h>
#include <sphinxbase/err.h>

#ifndef POCKETSPHINX_EXPORT
#error                                                                                             \
    "<pocketsphinx.h> found the Sluice header: keep plugins/stt/pocketsphinx off the include path"
#endif

#ifndef SLUICE_PS_MODELDIR
#define SLUICE_PS_MODELDIR SL_PS_DEFAULT_MODELDIR
#endif

enum {
  SL_PS_CHUNK = 16384,      /* samples per read / per resampler call */
  SL_PS_MAX_CHANNELS = 256, /* more is not a speech recording */
  SL_PS_MIN_RATE = 1000,    /* Hz; libsamplerate allows ratios <= 256 */
  SL_PS_MAX_RATE = 768000,  /* Hz */
  SL_PS_LIBERR = 256,       /* bytes of the last library error kept */
};

struct sl_ps {
  ps_decoder_t *dec;
  double max_seconds;
  int rate;    /* sample rate the decoder expects (-samprate) */
  int frate;   /* decoder frames per second (-frate) */
  float *in;   /* SL_PS_CHUNK interleaved samples from libsndfile */
  float *mono; /* SL_PS_CHUNK downmixed samples */
  float *rs;   /* SL_PS_CHUNK resampled samples */
};

/* ---- error text ------------------------------------------------------- */

/* Writes a formatted reason into err, always NUL-terminated; when it does
 * not fit, the cut is marked with "...". Returns code for tail calls. */
static int seterr(int code, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int seterr(int code, char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return code;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  if (n < 0)
    err[0] = '\0';
  else if ((size_t)n >= errlen && errlen >= 4)
    memcpy(err + errlen - 4, "...", 4);
  return code;
}

/* ---- PocketSphinx logging ------------------------------------------------ */

static _Thread_local char tl_liberr[SL_PS_LIBERR];
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
/* Serializes model loading (sphinxbase keeps some global state) and
 * libsndfile's open, whose error text for a failed open is process-global. */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t sf_open_lock = PTHREAD_MUTEX_INITIALIZER;

static void ps_log_cb(void *user, err_lvl_t lvl, const char *fmt, ...) {
  if (lvl != ERR_ERROR && lvl != ERR_FATAL) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tl_liberr, sizeof tl_liberr, fmt, ap);
  va_end(ap);
  if (n < 0) {
    tl_liberr[0] = '\0';
    return;
  }
  size_t len = strlen(tl_liberr);
  while (len > 0 && (tl_liberr[len - 1] == '\n' || tl_liberr[len - 1] == ' '))
    tl_liberr[--len] = '\0';
  if (lvl == ERR_FATAL) /* sphinxbase calls exit() next: leave a trace */
    fprintf(stderr, "sluice: pocketsphinx fatal error: %s\n", tl_liberr);
}

static void install_logging(void) {
  err_set_logfp(NULL); /* also stops the config dump in ps_init() */
  err_set_callback(ps_log_cb, NULL);
}

static const char *liberr(void) { return tl_liberr[0] ? tl_liberr : "no details"; }

/* ---- sl_ps_new ------------------------------------------------------------- */

static int join_path(char *buf, size_t cap, const char *dir, const char *name, char *err,
                     size_t errlen) {
  int n = snprintf(buf, cap, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= cap)
    return seterr(SL_EINVAL, err, errlen, "model path too long: %s/%s", dir, name);
  return 0;
}

/* Checks up front what PocketSphinx would otherwise report with a fatal
 * error (which exits the process) or a vague message. */
static int check_model(const char *hmm, const char *lm, const char *dict, char *err,
                       size_t errlen) {
  struct stat st;
  if (stat(hmm, &st) != 0 || !S_ISDIR(st.st_mode))
    return seterr(SL_ECONFIG, err, errlen, "acoustic model directory not found: %s", hmm);
  static const char *const hmm_files[] = {"mdef", "means", "variances", "transition_matrices"};
  char path[PATH_MAX];
  for (size_t i = 0; i < sizeof hmm_files / sizeof hmm_files[0]; i++) {
    int rc = join_path(path, sizeof path, hmm, hmm_files[i], err, errlen);
    if (rc) return rc;
    if (access(path, R_OK) != 0)
      return seterr(SL_ECONFIG, err, errlen, "acoustic model file missing or unreadable: %s", path);
  }
  const char *const files[] = {lm, dict};
  for (size_t i = 0; i < 2; i++)
    if (stat(files[i], &st) != 0 || !S_ISREG(st.st_mode) || access(files[i], R_OK) != 0)
      return seterr(SL_ECONFIG, err, errlen, "model file missing or unreadable: %s", files[i]);
  return 0;
}

int sl_ps_new(sl_ps **out, const char *model_dir, double max_seconds, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!out) return seterr(SL_EINVAL, err, errlen, "out is NULL");
  *out = NULL;
  /* !(x >= 0) also rejects NaN; the upper bound keeps sample counts exact */
  if (!(max_seconds >= 0) || max_seconds > 1e7)
    return seterr(SL_EINVAL, err, errlen, "max_seconds out of range: %g", max_seconds);
  if (!model_dir) model_dir = SLUICE_PS_MODELDIR;
  if (!model_dir[0]) return seterr(SL_EINVAL, err, errlen, "model_dir is empty");

  char hmm[PATH_MAX], lm[PATH_MAX], dict[PATH_MAX];
  int rc;
  if ((rc = join_path(hmm, sizeof hmm, model_dir, "en-us", err, errlen)) ||
      (rc = join_path(lm, sizeof lm, model_dir, "en-us.lm.bin", err, errlen)) ||
      (rc = join_path(dict, sizeof dict, model_dir, "cmudict-en-us.dict", err, errlen)) ||
      (rc = check_model(hmm, lm, dict, err, errlen)))
    return rc;

  sl_ps *ps = calloc(1, sizeof *ps);
  if (!ps) return seterr(SL_ENOMEM, err, errlen, "out of memory");
  ps->max_seconds = max_seconds > 0 ? max_seconds : SL_PS_DEFAULT_MAX_SECONDS;
  ps->in = malloc(SL_PS_CHUNK * sizeof *ps->in);
  ps->mono = malloc(SL_PS_CHUNK * sizeof *ps->mono);
  ps->rs = malloc(SL_PS_CHUNK * sizeof *ps->rs);
  if (!ps->in || !ps->mono || !ps->rs) {
    sl_ps_free(ps);
    return seterr(SL_ENOMEM, err, errlen, "out of memory");
  }

  pthread_once(&log_once, install_logging);
  pthread_mutex_lock(&init_lock);
  tl_liberr[0] = '\0';
  cmd_ln_t *config =
      cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", hmm, "-lm", lm, "-dict", dict, NULL);
  if (config) {
    ps->dec = ps_init(config); /* takes its own reference */
    cmd_ln_free_r(config);
  }
  pthread_mutex_unlock(&init_lock);
  if (!config) {
    rc = seterr(SL_ESTT, err, errlen, "pocketsphinx: bad configuration: %s", liberr());
    sl_ps_free(ps);
    return rc;
  }
  if (!ps->dec) {
    rc = seterr(SL_ESTT, err, errlen, "pocketsphinx: cannot load models from %s: %s", model_dir,
                liberr());
    sl_ps_free(ps);
    return rc;
  }
  cmd_ln_t *cfg = ps_get_config(ps->dec);
  double srate = cmd_ln_float_r(cfg, "-samprate");
  long frate = cmd_ln_int_r(cfg, "-frate");
  if (!(srate >= SL_PS_MIN_RATE && srate <= SL_PS_MAX_RATE) || frate <= 0 || frate > 10000) {
    rc = seterr(SL_ESTT, err, errlen, "pocketsphinx: unusable -samprate %g or -frate %ld", srate,
                frate);
    sl_ps_free(ps);
    return rc;
  }
  ps->rate = (int)srate;
  ps->frate = (int)frate;
  *out = ps;
  return 0;
}

void sl_ps_free(sl_ps *ps) {
  if (!ps) return;
  if (ps->dec) ps_free(ps->dec);
  free(ps->in);
  free(ps->mono);
  free(ps->rs);
  free(ps);
}

/* ---- audio -> recognizer ---------------------------------------------- */

/* Seed of the dither noise; fixed so that a given file always gets the same
 * transcript, whatever the decoder transcribed before. */
#define SL_PS_DITHER_SEED 0x9e3779b9u

static float rng_unit(uint32_t *st) { /* xorshift32 -> [0, 1) */
  uint32_t x = *st;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  *st = x;
  return (float)(x >> 8) * (1.0f / 16777216.0f);
}

/* Float [-1, 1] to int16 with TPDF dither of +-1 LSB and clipping; NaN
 * becomes silence. The dither matters: stretches of digital zero (synthetic
 * or gated audio) give degenerate log-energies that derail the recognizer,
 * which PocketSphinx's own -dither would fix too, but with a random state
 * that carries over from one file to the next. No libm needed. */
static void to_pcm16(const float *x, int16 *y, size_t n, uint32_t *rng) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i] * 32767.0f;
    if (v != v) v = 0.0f;
    v += rng_unit(rng) + rng_unit(rng) - 1.0f;
    if (v < -32768.0f)
      v = -32768.0f;
    else if (v > 32767.0f)
      v = 32767.0f;
    y[i] = (int16)(v >= 0.0f ? v + 0.5f : v - 0.5f);
  }
}

/* The decoded utterance: int16 samples at the decoder's rate. */
typedef struct {
  int16 *p;
  size_t n, cap;
  uint32_t rng; /* dither state */
} pcmbuf;

static int append_pcm(pcmbuf *b, const float *x, size_t n, char *err, size_t errlen) {
  if (n == 0) return 0;
  if (n > b->cap - b->n) {
    size_t ncap = b->cap ? b->cap : SL_PS_CHUNK;
    while (ncap - b->n < n) {
      if (ncap > SIZE_MAX / 2 / sizeof *b->p)
        return seterr(SL_ENOMEM, err, errlen, "out of memory");
      ncap *= 2;
    }
    int16 *np = realloc(b->p, ncap * sizeof *np);
    if (!np) return seterr(SL_ENOMEM, err, errlen, "out of memory (%zu samples)", ncap);
    b->p = np;
    b->cap = ncap;
  }
  to_pcm16(x, b->p + b->n, n, &b->rng);
  b->n += n;
  return 0;
}

/* Passes n mono samples through the resampler (if any) into b; eof flushes
 * the resampler. */
static int feed_mono(sl_ps *ps, SRC_STATE *src, double ratio, pcmbuf *b, const float *x, size_t n,
                     int eof, char *err, size_t errlen) {
  if (!src) return append_pcm(b, x, n, err, errlen);
  SRC_DATA d = {0};
  d.data_in = x;
  d.input_frames = (long)n;
  d.end_of_input = eof;
  d.src_ratio = ratio;
  for (;;) {
    d.data_out = ps->rs;
    d.output_frames = SL_PS_CHUNK;
    int e = src_process(src, &d);
    if (e) return seterr(SL_ESTT, err, errlen, "libsamplerate: %s", src_strerror(e));
    int rc = append_pcm(b, ps->rs, (size_t)d.output_frames_gen, err, errlen);
    if (rc) return rc;
    /* done when the converter neither takes input nor gives output */
    if (d.input_frames_used == 0 && d.output_frames_gen == 0) return 0;
    d.data_in += d.input_frames_used;
    d.input_frames -= d.input_frames_used;
    /* libsamplerate's overlap check ignores input_frames == 0, so a
     * one-past-the-end pointer that happens to equal ps->rs (adjacent heap
     * blocks) would be refused: point back at the start of the input. */
    if (d.input_frames == 0) d.data_in = x;
  }
}

static void downmix(const float *in, float *out, size_t frames, int channels) {
  for (size_t i = 0; i < frames; i++) {
    float s = 0.0f;
    for (int c = 0; c < channels; c++) s += in[i * (size_t)channels + (size_t)c];
    out[i] = s / (float)channels;
  }
}

/* Reads all of sf into b as mono int16 at the decoder's rate. *frames gets
 * the input frame count (at the file's own rate). */
static int read_audio(sl_ps *ps, SNDFILE *sf, const SF_INFO *info, pcmbuf *b, sf_count_t *frames,
                      char *err, size_t errlen) {
  const int ch = info->channels, rate = info->samplerate;
  const double limit = ps->max_seconds * rate; /* in input frames */
  const sf_count_t per_read = SL_PS_CHUNK / ch;
  SRC_STATE *src = NULL;
  double ratio = 1.0;
  int rc = 0;

  if (rate != ps->rate) {
    ratio = (double)ps->rate / rate;
    int e = 0;
    if (!src_is_valid_ratio(ratio))
      return seterr(SL_EDECODE, err, errlen, "cannot resample from %d Hz to %d Hz", rate, ps->rate);
    src = src_new(SRC_SINC_MEDIUM_QUALITY, 1, &e);
    if (!src) return seterr(SL_ENOMEM, err, errlen, "libsamplerate: %s", src_strerror(e));
  }

  *frames = 0;
  for (;;) {
    sf_count_t got = sf_readf_float(sf, ps->in, per_read);
    if (got <= 0) break;
    *frames += got;
    if ((double)*frames > limit) {
      rc = seterr(SL_ETOOBIG, err, errlen, "audio longer than the %.1f s limit", ps->max_seconds);
      goto out;
    }
    const float *mono = ps->in;
    if (ch > 1) {
      downmix(ps->in, ps->mono, (size_t)got, ch);
      mono = ps->mono;
    }
    if ((rc = feed_mono(ps, src, ratio, b, mono, (size_t)got, 0, err, errlen))) goto out;
  }
  if (sf_error(sf) != SF_ERR_NO_ERROR) {
    rc = seterr(SL_EDECODE, err, errlen, "libsndfile: %s (after %lld frames)", sf_strerror(sf),
                (long long)*frames);
    goto out;
  }
  if (*frames == 0) {
    rc = seterr(SL_EDECODE, err, errlen, "audio contains no samples");
    goto out;
  }
  rc = feed_mono(ps, src, ratio, b, ps->mono, 0, 1, err, errlen);
out:
  if (src) src_delete(src);
  return rc;
}

/* Runs the recognizer over the whole utterance. full_utt lets PocketSphinx
 * use batch cepstral mean normalisation (what the en-us model is trained
 * with, -cmn batch); feeding chunks live makes the first seconds of every
 * file noticeably worse. A new stream per file keeps frame numbers relative
 * to the start of this file and drops state left by the previous one. */
static int recognize(sl_ps *ps, const pcmbuf *b, char *err, size_t errlen) {
  tl_liberr[0] = '\0';
  if (ps_start_stream(ps->dec) < 0 || ps_start_utt(ps->dec) < 0)
    return seterr(SL_ESTT, err, errlen, "pocketsphinx: cannot start: %s", liberr());
  int rc = 0;
  if (ps_process_raw(ps->dec, b->p, b->n, FALSE, TRUE) < 0)
    rc = seterr(SL_ESTT, err, errlen, "pocketsphinx: processing failed: %s", liberr());
  /* always end the utterance so the decoder stays reusable */
  if (ps_end_utt(ps->dec) < 0 && rc == 0)
    rc = seterr(SL_ESTT, err, errlen, "pocketsphinx: cannot finish: %s", liberr());
  return rc;
}

/* ---- hypothesis -> result ---------------------------------------------- */

/* <s>, </s>, <sil>, [NOISE], [SPEECH], ++GARBAGE++ ... */
static int is_filler(const char *w) {
  return !w || !w[0] || w[0] == '<' || w[0] == '[' || (w[0] == '+' && w[1] == '+');
}

/* Length of w without an alternate-pronunciation suffix: "read(2)" -> 4. */
static size_t base_len(const char *w) {
  size_t n = strlen(w);
  if (n < 4 || w[n - 1] != ')') return n;
  size_t i = n - 1;
  while (i > 0 && w[i - 1] >= '0' && w[i - 1] <= '9') i--;
  if (i == n - 1 || i < 2 || w[i - 1] != '(') return n;
  return i - 1;
}

static int build_result(sl_ps *ps, sl_ps_result *res, char *err, size_t errlen) {
  size_t cap = 0, textlen = 0;
  ps_seg_t *seg = ps_seg_iter(ps->dec);
  for (; seg; seg = ps_seg_next(seg)) {
    const char *w = ps_seg_word(seg);
    if (is_filler(w)) continue;
    size_t wl = base_len(w);
    if (res->nwords == cap) {
      size_t ncap = cap ? cap * 2 : 32;
      sl_ps_word *nw = realloc(res->words, ncap * sizeof *nw);
      if (!nw) goto nomem;
      res->words = nw;
      cap = ncap;
    }
    sl_ps_word *dst = &res->words[res->nwords];
    if (!(dst->word = malloc(wl + 1))) goto nomem;
    memcpy(dst->word, w, wl);
    dst->word[wl] = '\0';
    int sf = 0, ef = 0;
    ps_seg_frames(seg, &sf, &ef);
    if (sf < 0) sf = 0;
    if (ef < sf) ef = sf;
    dst->start_s = (double)sf / ps->frate;
    dst->end_s = (double)(ef + 1) / ps->frate;
    res->nwords++;
    textlen += wl + 1;
  }

  if (!(res->text = malloc(textlen ? textlen : 1))) goto nomem;
  char *p = res->text;
  for (size_t i = 0; i < res->nwords; i++) {
    size_t wl = strlen(res->words[i].word);
    if (i) *p++ = ' ';
    memcpy(p, res->words[i].word, wl);
    p += wl;
  }
  *p = '\0';
  return 0;

nomem:
  if (seg) ps_seg_free(seg);
  return seterr(SL_ENOMEM, err, errlen, "out of memory");
}

/* ---- sl_ps_transcribe ---------------------------------------------------- */

int sl_ps_transcribe(sl_ps *ps, const void *audio, size_t len, sl_ps_result *res, char *err,
                     size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (res) memset(res, 0, sizeof *res);
  if (!ps || !res || (!audio && len > 0))
    return seterr(SL_EINVAL, err, errlen, "%s is NULL", !ps ? "ps" : !res ? "res" : "audio");
  if (len == 0) return seterr(SL_EDECODE, err, errlen, "empty input (0 bytes)");
  if (len > (size_t)INT64_MAX) return seterr(SL_ETOOBIG, err, errlen, "input too large");

  sl__sf_memfile mf;
  SF_INFO info;
  pthread_mutex_lock(&sf_open_lock);
  SNDFILE *sf = sl__sf_open_memory(&mf, audio, len, &info);
  if (!sf) seterr(SL_EDECODE, err, errlen, "libsndfile: %s", sf_strerror(NULL));
  pthread_mutex_unlock(&sf_open_lock);
  if (!sf) return SL_EDECODE;

  int rc = 0;
  if (info.channels < 1 || info.channels > SL_PS_MAX_CHANNELS) {
    rc = seterr(SL_EDECODE, err, errlen, "unsupported channel count %d", info.channels);
    goto out;
  }
  if (info.samplerate < SL_PS_MIN_RATE || info.samplerate > SL_PS_MAX_RATE) {
    rc = seterr(SL_EDECODE, err, errlen, "unsupported sample rate %d Hz", info.samplerate);
    goto out;
  }
  if (info.frames == 0) {
    rc = seterr(SL_EDECODE, err, errlen, "audio contains no samples");
    goto out;
  }
  /* early reject from the header; SF_COUNT_MAX means "unknown" */
  if (info.frames > 0 && info.frames != SF_COUNT_MAX &&
      (double)info.frames / info.samplerate > ps->max_seconds) {
    rc = seterr(SL_ETOOBIG, err, errlen, "audio is %.1f s long, limit is %.1f s",
                (double)info.frames / info.samplerate, ps->max_seconds);
    goto out;
  }

  /* reserve the size the header announces, up to 10 minutes: headers can
   * lie, and the buffer still grows if the audio really is longer */
  pcmbuf pcm = {NULL, 0, 0, SL_PS_DITHER_SEED};
  if (info.frames > 0 && info.frames != SF_COUNT_MAX) {
    double secs = (double)info.frames / info.samplerate;
    if (secs > SL_PS_DEFAULT_MAX_SECONDS) secs = SL_PS_DEFAULT_MAX_SECONDS;
    size_t want = (size_t)(secs * ps->rate) + SL_PS_CHUNK;
    if (!(pcm.p = malloc(want * sizeof *pcm.p))) {
      rc = seterr(SL_ENOMEM, err, errlen, "out of memory (%zu samples)", want);
      goto out;
    }
    pcm.cap = want;
  }
  sf_count_t frames = 0;
  rc = read_audio(ps, sf, &info, &pcm, &frames, err, errlen);
  if (rc == 0) rc = recognize(ps, &pcm, err, errlen);
  free(pcm.p);
  if (rc) goto out;
  res->duration_s = (double)frames / info.samplerate;
  rc = build_result(ps, res, err, errlen);

out:
  sf_close(sf);
  if (rc) sl_ps_result_clear(res);
  return rc;
}

void sl_ps_result_clear(sl_ps_result *res) {
  if (!res) return;
  for (size_t i = 0; i < res->nwords; i++) free(res->words[i].word);
  free(res->words);
  free(res->text);
  memset(res, 0, sizeof *res);
}
