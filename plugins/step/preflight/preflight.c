/* SPDX-License-Identifier: Apache-2.0 */
/*
 * preflight.c — decoding with GStreamer, speech activity, FLAC with libFLAC
 * (design in preflight.h).
 *
 * A WAV of 16-bit PCM, mono, at 16 kHz is already what the pipeline below
 * gives: libsndfile reads its samples as they are (sl_pf_decode), with the
 * same result and no pipeline (its threads, typefinding and element set-up
 * were most of the CPU of a short answer). Anything else, or a WAV that
 * libsndfile stumbles on, goes to GStreamer (sl_pf_decode_gst).
 *
 * One pipeline per call:
 *   appsrc (random access over the caller's bytes) ! decodebin !
 *   audioconvert ! audioresample quality=10 ! S16LE mono 16 kHz ! appsink
 * (resampling at the default quality 4 cost PocketSphinx words that the
 * original 22.05 kHz WAV gave it: the recogniser is that sensitive to the
 * filter; at 10 its transcripts of espeak speech match the WAV's)
 * The caller's buffer is lent to GStreamer without a copy (wrapped,
 * read-only) and outlives the pipeline, which is torn down before return.
 * Samples are pulled on the calling thread with a short timeout, and the
 * deadline is checked on every turn, so a decode ends at the deadline
 * whether it stalls or streams; errors come from the bus.
 *
 * The bytes are a stranger's: decodebin may plug only the elements of
 * allowed[] (the demuxers, parsers and decoders of the formats Sluice
 * takes), whatever else the host has installed (plugins-bad, -ugly,
 * gst-libav). Its autoplug-select signal skips every other factory, and
 * autoplug-continue refuses a stream that is not audio (an image, a
 * video) or whose rate or channel count is above the limits, before a
 * decoder or the resampler spends anything on it. A refusal is
 * SL_EUNSUPPORTED, whatever error decodebin then reports.
 *
 * sl_pf_measure runs the same pipeline stopped after the parsers
 * (decodebin's caps): a codec with no decoder here (AAC) is timed from
 * its own parsed frames, not from a header that may lie.
 */
#define _POSIX_C_SOURCE 200809L
#include "preflight.h"

#include <FLAC/stream_encoder.h>
#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/sf_memory.h"
#include "sluice/sl_err.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static char init_err[256];

static void do_init(void) {
  GError *e = NULL;
  if (!gst_init_check(NULL, NULL, &e)) {
    snprintf(init_err, sizeof init_err, "GStreamer did not start: %s",
             e ? e->message : "unknown error");
    if (e) g_error_free(e);
    return;
  }
  /* the elements every decode needs must exist, or every call would fail */
  static const char *const need[] = {"appsrc", "decodebin", "audioconvert", "audioresample",
                                     "appsink"};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
    GstElementFactory *f = gst_element_factory_find(need[i]);
    if (!f) {
      snprintf(init_err, sizeof init_err,
               "GStreamer element %s is missing (install gstreamer1.0-plugins-base)", need[i]);
      return;
    }
    gst_object_unref(f);
  }
}

int sl_pf_init(char *err, size_t errlen) {
  pthread_once(&init_once, do_init);
  if (init_err[0]) {
    snprintf(err, errlen, "%s", init_err);
    return SL_EPLUGIN;
  }
  return 0;
}

/* ---- decoding ---------------------------------------------------------------- */

typedef struct {
  const uint8_t *data;
  size_t len, off;        /* touched only by appsrc's streaming thread */
  atomic_int eos;         /* every byte was handed over (read by the caller) */
  atomic_llong active_ms; /* the last request for data or a seek */
} src_state;

static int64_t mono_ms(void);

static void need_data(GstAppSrc *src, guint length, gpointer ud) {
  src_state *s = ud;
  atomic_store(&s->active_ms, mono_ms());
  if (s->off >= s->len) {
    atomic_store(&s->eos, 1);
    gst_app_src_end_of_stream(src);
    return;
  }
  size_t n = length ? length : 65536;
  if (n > 1u << 20) n = 1u << 20;
  if (n > s->len - s->off) n = s->len - s->off;
  GstBuffer *b = gst_buffer_new_wrapped_full(GST_MEMORY_FLAG_READONLY, (gpointer)(s->data + s->off),
                                             n, 0, n, NULL, NULL);
  GST_BUFFER_OFFSET(b) = s->off;
  s->off += n;
  gst_app_src_push_buffer(src, b);
}

static gboolean seek_data(GstAppSrc *src, guint64 offset, gpointer ud) {
  (void)src;
  src_state *s = ud;
  atomic_store(&s->active_ms, mono_ms());
  if (offset > s->len) return FALSE;
  s->off = (size_t)offset;
  return TRUE;
}

#define IDLE_MS 3000

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "no decoder here for MPEG-4 AAC (audio/mpeg)" from decodebin's debug
 * text ("... Missing decoder: MPEG-4 AAC (audio/mpeg, mpegversion=...") */
static void missing(const char *dbg, char *err, size_t errlen) {
  const char *m = dbg ? strstr(dbg, "Missing decoder: ") : NULL;
  if (!m) {
    snprintf(err, errlen, "no decoder here for its codec");
    return;
  }
  m += strlen("Missing decoder: ");
  int name = (int)strcspn(m, "(\n");
  while (name > 0 && m[name - 1] == ' ') name--;
  const char *caps = strchr(m, '(');
  int type = caps ? (int)strcspn(caps + 1, ",)\n") : 0;
  snprintf(err, errlen, "no decoder here for %.*s (%.*s)", name > 80 ? 80 : name, m,
           type > 80 ? 80 : type, caps ? caps + 1 : "");
}

/* The first error on the bus, classified. 0 when there is none. */
static int bus_error(GstBus *bus, char *err, size_t errlen) {
  GstMessage *m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
  if (!m) return 0;
  GError *e = NULL;
  gchar *dbg = NULL;
  gst_message_parse_error(m, &e, &dbg);
  int rc = SL_EDECODE;
  if (e && ((e->domain == GST_CORE_ERROR && e->code == GST_CORE_ERROR_MISSING_PLUGIN) ||
            (e->domain == GST_STREAM_ERROR && e->code == GST_STREAM_ERROR_CODEC_NOT_FOUND)))
    rc = SL_ENOTFOUND;
  if (e && e->domain == GST_STREAM_ERROR &&
      (e->code == GST_STREAM_ERROR_TYPE_NOT_FOUND || e->code == GST_STREAM_ERROR_WRONG_TYPE))
    snprintf(err, errlen, "not a recording in a known audio format (%s)", e->message);
  else if (rc == SL_ENOTFOUND)
    missing(dbg, err, errlen);
  else
    snprintf(err, errlen, "%s", e ? e->message : "decoding failed");
  if (e) g_error_free(e);
  g_free(dbg);
  gst_message_unref(m);
  return rc;
}

/* appends n samples to a (its buffer *cap samples, grown here): both
 * decoders' output goes through it, so they keep and refuse alike.
 * SL_ETOOBIG past max samples (what fits up to max is kept), SL_ENOMEM. */
static int append(sl_pf_audio *a, size_t *cap, size_t max, const void *samples, size_t n) {
  int rc = 0;
  if (a->n + n > max) {
    n = max - a->n;
    rc = SL_ETOOBIG;
  }
  if (a->n + n > *cap) {
    size_t c = *cap ? *cap : 16000;
    while (c < a->n + n) c *= 2;
    int16_t *p = realloc(a->pcm, c * sizeof *p);
    if (!p) return SL_ENOMEM;
    a->pcm = p;
    *cap = c;
  }
  memcpy(a->pcm + a->n, samples, n * 2);
  a->n += n;
  return rc;
}

/* appends a sample's audio */
static int take(GstSample *smp, sl_pf_audio *a, size_t *cap, size_t max) {
  GstBuffer *b = gst_sample_get_buffer(smp);
  GstMapInfo mi;
  if (!b || !gst_buffer_map(b, &mi, GST_MAP_READ)) return 0;
  int rc = append(a, cap, max, mi.data, mi.size / 2);
  gst_buffer_unmap(b, &mi);
  return rc;
}

/* The most samples a decoder keeps: one past the limit tells a too-long
 * recording. */
static size_t pcm_max(const sl_pf_conf *c) { return (size_t)(c->max_seconds * SL_PF_RATE) + 1; }

/* What both decoders end with: no samples is an error, a too-long
 * recording says its limit, the duration follows the samples. */
static int decoded(int rc, const sl_pf_conf *c, sl_pf_audio *out, char *err, size_t errlen) {
  if (rc == 0 && out->n == 0) {
    snprintf(err, errlen, "the recording holds no audio");
    rc = SL_EDECODE;
  }
  if (rc == SL_ETOOBIG) snprintf(err, errlen, "longer than %.0f s", c->max_seconds);
  if (rc == SL_ENOMEM) snprintf(err, errlen, "out of memory decoding the recording");
  out->duration_s = (double)out->n / SL_PF_RATE;
  return rc;
}

/* A WAV of 16-bit mono PCM at SL_PF_RATE, read by libsndfile into out.
 * Returns 1 with *rc set when it was one and was read, 0 (out left empty)
 * when the bytes are anything else or libsndfile reported an error: the
 * caller then decodes them with GStreamer. */
static int decode_plain_wav(const void *data, size_t len, const sl_pf_conf *c, sl_pf_audio *out,
                            int *rc) {
  sl__sf_memfile mf;
  SF_INFO info;
  SNDFILE *sf = sl__sf_open_memory(&mf, data, len, &info);
  if (!sf) return 0;
  if ((info.format & SF_FORMAT_TYPEMASK) != SF_FORMAT_WAV ||
      (info.format & SF_FORMAT_SUBMASK) != SF_FORMAT_PCM_16 || info.channels != 1 ||
      info.samplerate != SL_PF_RATE) {
    sf_close(sf);
    return 0;
  }
  size_t max = pcm_max(c), cap = 0;
  int16_t chunk[4096];
  sf_count_t got;
  int r = 0;
  while (r == 0 && (got = sf_read_short(sf, chunk, (sf_count_t)(sizeof chunk / sizeof *chunk))) > 0)
    r = append(out, &cap, max, chunk, (size_t)got);
  int stumbled = r == 0 && sf_error(sf) != SF_ERR_NO_ERROR;
  sf_close(sf);
  if (stumbled) {
    sl_pf_audio_clear(out);
    return 0;
  }
  *rc = r;
  return 1;
}

int sl_pf_decode(const void *data, size_t len, const sl_pf_conf *c, sl_pf_audio *out, char *err,
                 size_t errlen) {
  memset(out, 0, sizeof *out);
  int rc;
  if (data && len && decode_plain_wav(data, len, c, out, &rc))
    return decoded(rc, c, out, err, errlen);
  return sl_pf_decode_gst(data, len, c, out, err, errlen); /* empty ones too */
}

/* ---- what decodebin may plug ------------------------------------------------- */

/* The elements of the formats Sluice takes (WebM/Matroska and Ogg with Opus
 * or Vorbis, MP3, FLAC, WAV with PCM, A-law or mu-law), all in Debian's
 * gstreamer1.0-plugins-base and -good, and the MP4 demuxer and AAC parser,
 * so that an AAC answer is recognised and timed (it has no decoder here).
 * Nothing else is plugged, whatever is installed. */
static const char *const allowed[] = {
    "matroskademux", "oggdemux",       "qtdemux",        "wavparse",  "id3demux",    "apedemux",
    "flacparse",     "mpegaudioparse", "aacparse",       "opusparse", "vorbisparse", "opusdec",
    "vorbisdec",     "flacdec",        "mpg123audiodec", "alawdec",   "mulawdec",
};

/* allowed[] index + 1 of factory, 0 when it is not allowed */
static int allowed_index(const char *factory) {
  for (size_t i = 0; factory && i < sizeof allowed / sizeof allowed[0]; i++)
    if (strcmp(factory, allowed[i]) == 0) return (int)i + 1;
  return 0;
}

int sl_pf_allowed(const char *factory) { return allowed_index(factory) != 0; }

/* decodebin's GstAutoplugSelectResult (gst/playback/gstplay-enum.h, not an
 * installed header): the values its autoplug-select signal takes */
enum { AUTOPLUG_TRY = 0, AUTOPLUG_SKIP = 2 };

/* What the pipeline's callbacks saw, read by the pulling thread. */
typedef struct {
  const sl_pf_conf *c;
  atomic_int refused; /* SL_EUNSUPPORTED once a stream was refused */
  atomic_int skipped; /* a factory outside allowed[] was passed over */
  atomic_int first;   /* allowed_index() of the first element plugged */
  pthread_mutex_t mu; /* guards why and why_audio */
  char why[256];      /* the first refusal or skip, for the error */
  int why_audio;      /* that first one was an audio codec with no allowed decoder */
} guard;

/* Notes the first refusal or skip; audio: an audio codec no allowed
 * decoder takes (pass_undecoded may still time it), not a refused stream. */
static void guard_note(guard *g, int audio, const char *fmt, const char *a, const char *b) {
  pthread_mutex_lock(&g->mu);
  if (!g->why[0]) {
    snprintf(g->why, sizeof g->why, fmt, a, b);
    g->why_audio = audio;
  }
  pthread_mutex_unlock(&g->mu);
}

static int media_is(const char *media, const char *prefix) {
  return strncmp(media, prefix, strlen(prefix)) == 0;
}

/* The types of the containers and tags that hold the allowed audio (their
 * typefinders name some of them video/); every other type that is not
 * audio/ (an image, a video stream, an archive) is refused. */
static int is_container(const char *media) {
  static const char *const types[] = {"video/webm",        "video/x-matroska",    "audio/webm",
                                      "video/quicktime",   "video/ogg",           "application/ogg",
                                      "application/x-id3", "application/x-apetag"};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (strcmp(media, types[i]) == 0) return 1;
  return 0;
}

/* autoplug-continue: FALSE stops plugging at this pad. A stream that is
 * not audio, or that is audio beyond the rate and channel limits, is
 * refused here, before any decoder runs on it. */
static gboolean on_continue(GstElement *bin, GstPad *pad, GstCaps *caps, gpointer ud) {
  (void)bin;
  (void)pad;
  guard *g = ud;
  for (guint i = 0; caps && i < gst_caps_get_size(caps); i++) {
    const GstStructure *st = gst_caps_get_structure(caps, i);
    const char *media = gst_structure_get_name(st);
    if (!media_is(media, "audio/") && !is_container(media)) {
      guard_note(g, 0, "a %s stream, not audio%s", media, "");
      atomic_store(&g->refused, SL_EUNSUPPORTED);
      return FALSE;
    }
    int rate = 0, channels = 0;
    char lim[64];
    if (gst_structure_get_int(st, "rate", &rate) && g->c->max_rate > 0 && rate > g->c->max_rate) {
      snprintf(lim, sizeof lim, "%d Hz (the limit is %d Hz)", rate, g->c->max_rate);
      guard_note(g, 0, "audio at %s%s", lim, "");
      atomic_store(&g->refused, SL_EUNSUPPORTED);
      return FALSE;
    }
    if (gst_structure_get_int(st, "channels", &channels) && g->c->max_channels > 0 &&
        channels > g->c->max_channels) {
      snprintf(lim, sizeof lim, "%d channels (the limit is %d)", channels, g->c->max_channels);
      guard_note(g, 0, "audio in %s%s", lim, "");
      atomic_store(&g->refused, SL_EUNSUPPORTED);
      return FALSE;
    }
  }
  return TRUE;
}

/* autoplug-select: only the factories of allowed[] are tried */
static gint on_select(GstElement *bin, GstPad *pad, GstCaps *caps, GstElementFactory *f,
                      gpointer ud) {
  (void)bin;
  (void)pad;
  guard *g = ud;
  const char *name = gst_plugin_feature_get_name(GST_PLUGIN_FEATURE(f));
  int idx = allowed_index(name);
  if (idx) {
    int none = 0;
    atomic_compare_exchange_strong(&g->first, &none, idx);
    return AUTOPLUG_TRY;
  }
  const char *media = caps && gst_caps_get_size(caps)
                          ? gst_structure_get_name(gst_caps_get_structure(caps, 0))
                          : "unknown";
  guard_note(g, media_is(media, "audio/"), "%s would need %s, which is not an allowed element",
             media, name);
  atomic_store(&g->skipped, 1);
  return AUTOPLUG_SKIP;
}

/* ---- one pipeline ---------------------------------------------------------------- */

/* The pipelines: decode to 16 kHz mono, or (measure) parse only. */
#define DECODE_DESC                                                                                \
  "appsrc name=src stream-type=random-access format=bytes ! decodebin name=dec ! audioconvert ! "  \
  "audioresample quality=10 ! "                                                                    \
  "audio/x-raw,format=S16LE,layout=interleaved,channels=1,rate=16000 ! "                           \
  "appsink name=sink sync=false max-buffers=64"
#define MEASURE_DESC                                                                               \
  "appsrc name=src stream-type=random-access format=bytes ! decodebin name=dec "                   \
  "caps=\"audio/mpeg,mpegversion=(int){2,4},framed=(boolean)true;audio/x-raw\" ! "                 \
  "appsink name=sink sync=false max-buffers=64"

/* what a run does with each sample: decode appends PCM, measure times the
 * parsed frames (*end_ns: the furthest pts + duration seen) */
typedef struct {
  int measure;
  sl_pf_audio *out;
  size_t cap, max;
  int64_t end_ns, max_ns;
} sink_work;

static int on_sample(sink_work *w, GstSample *smp) {
  if (!w->measure) return take(smp, w->out, &w->cap, w->max);
  GstBuffer *b = gst_sample_get_buffer(smp);
  if (!b || !GST_BUFFER_PTS_IS_VALID(b)) return 0;
  int64_t end = (int64_t)GST_BUFFER_PTS(b) +
                (GST_BUFFER_DURATION_IS_VALID(b) ? (int64_t)GST_BUFFER_DURATION(b) : 0);
  if (end > w->end_ns) w->end_ns = end;
  return w->end_ns > w->max_ns ? SL_ETOOBIG : 0;
}

/* The error of a run, the guard's refusal first: once a stream was refused
 * or a factory skipped, whatever decodebin then reports follows from it. */
static int guarded(guard *g, int rc, char *err, size_t errlen) {
  int refused = atomic_load(&g->refused);
  if (refused || (atomic_load(&g->skipped) && (rc == SL_EDECODE || rc == SL_ENOTFOUND))) {
    pthread_mutex_lock(&g->mu); /* the pipeline's threads may still be noting */
    snprintf(err, errlen, "unsupported: %s", g->why[0] ? g->why : "not an allowed format");
    /* an audio codec with no decoder here stays SL_ENOTFOUND (pass_undecoded) */
    int audio = g->why_audio;
    pthread_mutex_unlock(&g->mu);
    return !refused && audio ? SL_ENOTFOUND : SL_EUNSUPPORTED;
  }
  return rc;
}

/* A recording that decodes to less than its container declares was cut
 * short (an upload that stopped, or a header that lies about its length,
 * like an Ogg whose last page claims hours): undecodable, not passed on as
 * the part that happened to decode. MP3 is exempt: its length is only an
 * estimate from the bitrate of its first frames. */
static int whole(GstElement *pipe, guard *g, const sl_pf_audio *a, char *err, size_t errlen) {
  gint64 ns = -1;
  int first = atomic_load(&g->first);
  if (first && (strcmp(allowed[first - 1], "mpegaudioparse") == 0 ||
                strcmp(allowed[first - 1], "id3demux") == 0))
    return 0;
  if (!gst_element_query_duration(pipe, GST_FORMAT_TIME, &ns) || ns <= 0) return 0;
  double declared = (double)ns / 1e9, got = (double)a->n / SL_PF_RATE;
  double slack = declared * 0.05 > 0.5 ? declared * 0.05 : 0.5;
  if (got >= declared - slack) return 0;
  snprintf(err, errlen, "cut short: the container declares %.1f s, %.1f s of it decodes", declared,
           got);
  return SL_EDECODE;
}

static int run_gst(const void *data, size_t len, const sl_pf_conf *c, sink_work *w, char *err,
                   size_t errlen) {
  if (!data || !len) {
    snprintf(err, errlen, "the recording is empty (0 bytes)");
    return SL_EDECODE;
  }
  int rc = sl_pf_init(err, errlen);
  if (rc) return rc;
  GError *ge = NULL;
  GstElement *pipe = gst_parse_launch(w->measure ? MEASURE_DESC : DECODE_DESC, &ge);
  if (!pipe) {
    snprintf(err, errlen, "building the decoder: %s", ge ? ge->message : "failed");
    if (ge) g_error_free(ge);
    return SL_EPLUGIN;
  }
  if (ge) g_error_free(ge); /* a recoverable warning from the parser */
  GstElement *src = gst_bin_get_by_name(GST_BIN(pipe), "src");
  GstElement *dec = gst_bin_get_by_name(GST_BIN(pipe), "dec");
  GstElement *sink = gst_bin_get_by_name(GST_BIN(pipe), "sink");
  GstBus *bus = gst_element_get_bus(pipe);
  guard g = {.c = c};
  pthread_mutex_init(&g.mu, NULL);
  g_signal_connect(dec, "autoplug-continue", G_CALLBACK(on_continue), &g);
  g_signal_connect(dec, "autoplug-select", G_CALLBACK(on_select), &g);
  src_state ss = {data, len, 0, 0, 0};
  atomic_store(&ss.active_ms, mono_ms());
  GstAppSrcCallbacks cb = {.need_data = need_data, .seek_data = seek_data};
  gst_app_src_set_callbacks(GST_APP_SRC(src), &cb, &ss, NULL);
  gst_app_src_set_size(GST_APP_SRC(src), (gint64)len);

  long timeout_ms = c->timeout_ms > 0 ? c->timeout_ms : 30000;
  int64_t deadline = mono_ms() + timeout_ms;
  if (gst_element_set_state(pipe, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    rc = bus_error(bus, err, errlen);
    if (!rc) {
      snprintf(err, errlen, "the decoder did not start");
      rc = SL_EDECODE;
    }
  }
  int64_t last_out = mono_ms();
  int has_out = 0;
  while (rc == 0) {
    int64_t now = mono_ms();
    if (now > deadline) { /* streaming or stalled: wall time counts */
      snprintf(err, errlen, "decoding took longer than %ld ms", timeout_ms);
      rc = SL_ETIMEDOUT;
      break;
    }
    if (atomic_load(&g.refused)) break;
    GstSample *smp = gst_app_sink_try_pull_sample(GST_APP_SINK(sink), 50 * GST_MSECOND);
    if (smp) {
      rc = on_sample(w, smp);
      gst_sample_unref(smp);
      last_out = mono_ms();
      has_out = 1;
      continue;
    }
    if ((rc = bus_error(bus, err, errlen)) != 0) break;
    if (gst_app_sink_is_eos(GST_APP_SINK(sink))) break;
    /* decodebin may swallow a demuxer's error while it is still plugging
     * (a header with no stream: "can't find group for element"), and then
     * neither an error nor EOS arrives: when nothing has been read and
     * nothing decoded for IDLE_MS, the decoder has stopped. Complete if it
     * had read every byte (and decoded something), else undecodable. */
    now = mono_ms();
    if (now - last_out > IDLE_MS && now - atomic_load(&ss.active_ms) > IDLE_MS) {
      if (!atomic_load(&ss.eos) || !has_out) {
        snprintf(err, errlen,
                 "the decoder stopped %s without audio or an error (a header "
                 "with no stream?)",
                 atomic_load(&ss.eos) ? "at the end" : "before the end");
        rc = SL_EDECODE;
      }
      break;
    }
  }
  if (rc != SL_ETIMEDOUT) rc = guarded(&g, rc, err, errlen);
  if (rc == 0 && !w->measure) rc = whole(pipe, &g, w->out, err, errlen);
  gst_element_set_state(pipe, GST_STATE_NULL);
  pthread_mutex_destroy(&g.mu);
  gst_object_unref(bus);
  gst_object_unref(src);
  gst_object_unref(dec);
  gst_object_unref(sink);
  gst_object_unref(pipe);
  return rc;
}

int sl_pf_decode_gst(const void *data, size_t len, const sl_pf_conf *c, sl_pf_audio *out, char *err,
                     size_t errlen) {
  memset(out, 0, sizeof *out);
  sink_work w = {.out = out, .max = pcm_max(c)};
  int rc = run_gst(data, len, c, &w, err, errlen);
  return decoded(rc, c, out, err, errlen);
}

int sl_pf_measure(const void *data, size_t len, const sl_pf_conf *c, double *seconds, char *err,
                  size_t errlen) {
  *seconds = 0;
  sink_work w = {.measure = 1, .max_ns = (int64_t)(c->max_seconds * 1e9)};
  int rc = run_gst(data, len, c, &w, err, errlen);
  *seconds = (double)w.end_ns / 1e9;
  if (rc == 0 && w.end_ns == 0) {
    snprintf(err, errlen, "no timed audio frames in the recording");
    rc = SL_EDECODE;
  }
  if (rc == SL_ETOOBIG)
    snprintf(err, errlen, "longer than %.0f s (timed from its parsed frames)", c->max_seconds);
  return rc;
}

/* ---- speech activity ---------------------------------------------------------- */

#define FRAME 320 /* 20 ms */
#define MIN_RUN 3

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* the speech runs in order, as frame ranges, into pauses and runs */
typedef struct {
  size_t first, last; /* the first run's start, the last one's end (frames) */
  size_t pause_frames, longest;
  uint32_t pauses, nruns;
} timing_walk;

#define PAUSE_MIN_FRAMES ((SL_PF_PAUSE_MIN_MS * SL_PF_RATE / 1000 + FRAME - 1) / FRAME)

static void timing_add(timing_walk *w, size_t from, size_t to) {
  if (w->nruns++ == 0) {
    w->first = from;
  } else if (from - w->last >= PAUSE_MIN_FRAMES) { /* the gap since the last run */
    w->pauses++;
    w->pause_frames += from - w->last;
    if (from - w->last > w->longest) w->longest = from - w->last;
  }
  w->last = to;
}

static void timing_end(const timing_walk *w, sl_pf_timing *t) {
  const double fs = (double)FRAME / SL_PF_RATE; /* a frame's seconds */
  memset(t, 0, sizeof *t);
  if (w->nruns == 0) return;
  t->speaking_s = (double)(w->last - w->first) * fs;
  t->pauses = w->pauses;
  t->pause_total_s = (double)w->pause_frames * fs;
  t->pause_mean_s = w->pauses ? t->pause_total_s / w->pauses : 0;
  t->pause_longest_s = (double)w->longest * fs;
  t->runs = w->pauses + 1;
  t->run_mean_s = (t->speaking_s - t->pause_total_s) / t->runs;
}

int sl_pf_analyse(sl_pf_audio *a, double silence_dbfs) {
  a->speech_s = 0;
  memset(&a->timing, 0, sizeof a->timing);
  a->peak_dbfs = a->floor_dbfs = -100;
  free(a->speech);
  a->speech = NULL;
  a->nframes = 0;
  size_t nf = a->n / FRAME;
  if (nf == 0) return 0;
  double *e = malloc(nf * sizeof *e), *sorted = malloc(nf * sizeof *sorted);
  a->speech = calloc(nf, 1);
  if (!e || !sorted || !a->speech) {
    free(e);
    free(sorted);
    free(a->speech);
    a->speech = NULL;
    return SL_ENOMEM;
  }
  a->nframes = nf;
  for (size_t f = 0; f < nf; f++) {
    double sum = 0;
    for (size_t i = 0; i < FRAME; i++) {
      double x = a->pcm[f * FRAME + i] / 32768.0;
      sum += x * x;
    }
    e[f] = 10 * log10(sum / FRAME + 1e-10);
    sorted[f] = e[f];
    if (e[f] > a->peak_dbfs) a->peak_dbfs = e[f];
  }
  qsort(sorted, nf, sizeof *sorted, cmp_double);
  a->floor_dbfs = sorted[nf / 10];
  double thr = fmax(silence_dbfs, a->floor_dbfs + 10);
  thr = fmin(thr, fmax(silence_dbfs, -30));
  size_t run = 0, speech = 0;
  timing_walk tw = {0};
  for (size_t f = 0; f <= nf; f++) {
    if (f < nf && e[f] >= thr) {
      run++;
      continue;
    }
    if (run >= MIN_RUN) {
      speech += run;
      timing_add(&tw, f - run, f);
      memset(a->speech + (f - run), 1, run);
    }
    run = 0;
  }
  a->speech_s = (double)speech * FRAME / SL_PF_RATE;
  timing_end(&tw, &a->timing);
  free(e);
  free(sorted);
  return 0;
}

/* ---- FLAC ---------------------------------------------------------------------- */

typedef struct {
  uint8_t *buf;
  size_t len, cap;
  const sl__pf_sink *sink; /* NULL: malloc'd */
} membuf;

static void *grow_heap(void *ud, size_t cap) {
  membuf *m = ud;
  return realloc(m->buf, cap);
}

static FLAC__StreamEncoderWriteStatus on_write(const FLAC__StreamEncoder *enc,
                                               const FLAC__byte buffer[], size_t bytes,
                                               uint32_t samples, uint32_t frame, void *ud) {
  (void)enc;
  (void)samples;
  (void)frame;
  membuf *m = ud;
  if (m->len + bytes > m->cap) {
    size_t c = m->cap ? m->cap : 65536;
    while (c < m->len + bytes) c *= 2;
    uint8_t *p = m->sink ? m->sink->grow(m->sink->ud, c) : grow_heap(m, c);
    if (!p) return FLAC__STREAM_ENCODER_WRITE_STATUS_FATAL_ERROR;
    m->buf = p;
    m->cap = c;
  }
  memcpy(m->buf + m->len, buffer, bytes);
  m->len += bytes;
  return FLAC__STREAM_ENCODER_WRITE_STATUS_OK;
}

/* sl_pf_flac into sink's buffer (NULL: a malloc'd one) */
static int flac_into(const int16_t *pcm, size_t n, int level, const sl__pf_sink *sink, void **out,
                     size_t *outlen) {
  *out = NULL;
  *outlen = 0;
  if (level < 0 || level > SL_PF_FLAC_LEVEL_MAX) return SL_EINVAL;
  FLAC__StreamEncoder *enc = FLAC__stream_encoder_new();
  if (!enc) return SL_ENOMEM;
  membuf m = {.sink = sink};
  FLAC__stream_encoder_set_channels(enc, 1);
  FLAC__stream_encoder_set_bits_per_sample(enc, 16);
  FLAC__stream_encoder_set_sample_rate(enc, SL_PF_RATE);
  FLAC__stream_encoder_set_compression_level(enc, (uint32_t)level);
  FLAC__stream_encoder_set_total_samples_estimate(enc, n);
  int inited = FLAC__stream_encoder_init_stream(enc, on_write, NULL, NULL, NULL, &m) ==
               FLAC__STREAM_ENCODER_INIT_STATUS_OK;
  int rc = inited ? 0 : SL_EIO;
  FLAC__int32 chunk[4096];
  for (size_t off = 0; rc == 0 && off < n; off += 4096) {
    size_t k = n - off < 4096 ? n - off : 4096;
    for (size_t i = 0; i < k; i++) chunk[i] = pcm[off + i];
    if (!FLAC__stream_encoder_process_interleaved(enc, chunk, (uint32_t)k))
      rc = FLAC__stream_encoder_get_state(enc) == FLAC__STREAM_ENCODER_CLIENT_ERROR ? SL_ENOMEM
                                                                                    : SL_EIO;
  }
  if (inited && !FLAC__stream_encoder_finish(enc) && rc == 0) rc = SL_EIO;
  FLAC__stream_encoder_delete(enc);
  if (rc) {
    if (!sink) free(m.buf);
    return rc;
  }
  *out = m.buf;
  *outlen = m.len;
  return 0;
}

int sl_pf_flac(const int16_t *pcm, size_t n, int level, void **out, size_t *outlen) {
  return flac_into(pcm, n, level, NULL, out, outlen);
}

void sl_pf_audio_clear(sl_pf_audio *a) {
  if (!a) return;
  free(a->pcm);
  free(a->speech);
  memset(a, 0, sizeof *a);
}

/* ---- the speech alone ---------------------------------------------------------- */

/* a's samples of frames [from, to) appended to out at *n */
static void take_frames(const sl_pf_audio *a, size_t from, size_t to, int16_t *out, size_t *n) {
  memcpy(out + *n, a->pcm + from * FRAME, (to - from) * FRAME * sizeof *out);
  *n += (to - from) * FRAME;
}

/* a's speech (c->trim, sl_pf_conf): *pcm a new buffer of *n samples, or a's
 * own when it has no speech frame. 0 or SL_ENOMEM. */
static int trimmed(const sl_pf_audio *a, const sl_pf_conf *c, int16_t **pcm, size_t *n) {
  size_t nf = a->nframes, first = 0, last = 0; /* speech frames [first, last) */
  while (first < nf && !a->speech[first]) first++;
  if (first == nf) return 0;
  for (size_t f = first; f < nf; f++)
    if (a->speech[f]) last = f + 1;
  size_t keep = c->keep_silence_ms > 0 ? (size_t)c->keep_silence_ms / 20 : 0;
  size_t most = c->max_silence_ms > 0 ? (size_t)c->max_silence_ms / 20 : 0; /* 0: any */
  size_t from = first > keep ? first - keep : 0, to = last + keep < nf ? last + keep : nf;
  int16_t *out = malloc((to - from) * FRAME * sizeof *out + 1);
  if (!out) return SL_ENOMEM;
  size_t got = 0, at = from; /* frames [from, at) are written */
  for (size_t f = first; f < last;) {
    if (a->speech[f]) {
      f++;
      continue;
    }
    size_t g = f; /* a silence inside [first, last): frames [g, f) */
    while (f < last && !a->speech[f]) f++;
    if (most && f - g > most) { /* its first half of `most` and its last */
      take_frames(a, at, g + most / 2, out, &got);
      at = f - (most - most / 2);
    }
  }
  take_frames(a, at, to, out, &got);
  *pcm = out;
  *n = got;
  return 0;
}

/* The silent pauses (gaps of PAUSE_MIN_FRAMES or more between speech, as
 * timing_add counts them) where they lie in the FLAC: in a's timeline, or
 * with c->trim in what trimmed() leaves (frames cut before a pause move it
 * earlier; a silence longer than max_silence_ms is that long). The first
 * SL_PF_MAX_SPANS into spans, seconds; returns how many. */
static uint32_t pause_spans(const sl_pf_audio *a, const sl_pf_conf *c,
                            float spans[SL_PF_MAX_SPANS][2]) {
  const double fs = (double)FRAME / SL_PF_RATE;
  size_t nf = a->nframes, first = 0, last = 0;
  while (first < nf && !a->speech[first]) first++;
  if (first == nf) return 0;
  for (size_t f = first; f < nf; f++)
    if (a->speech[f]) last = f + 1;
  size_t keep = c->keep_silence_ms > 0 ? (size_t)c->keep_silence_ms / 20 : 0;
  size_t most = c->trim && c->max_silence_ms > 0 ? (size_t)c->max_silence_ms / 20 : 0;
  size_t cut = c->trim && first > keep ? first - keep : 0; /* frames gone before f */
  uint32_t n = 0;
  for (size_t f = first; f < last;) {
    if (a->speech[f]) {
      f++;
      continue;
    }
    size_t g = f;
    while (f < last && !a->speech[f]) f++;
    size_t len = f - g, left = most && len > most ? most : len;
    if (len >= PAUSE_MIN_FRAMES && n < SL_PF_MAX_SPANS) {
      spans[n][0] = (float)((double)(g - cut) * fs);
      spans[n][1] = (float)((double)(g - cut + left) * fs);
      n++;
    }
    cut += len - left;
  }
  return n;
}

/* ---- the whole check ----------------------------------------------------------- */

int sl_pf_check(const void *data, size_t len, const sl_pf_conf *c, sl_pf_result *r) {
  return sl__pf_check_into(data, len, c, NULL, r);
}

int sl__pf_check_into(const void *data, size_t len, const sl_pf_conf *c, const sl__pf_sink *sink,
                      sl_pf_result *r) {
  memset(r, 0, sizeof *r);
  sl_pf_audio a;
  r->rc = sl_pf_decode(data, len, c, &a, r->err, sizeof r->err);
  r->duration_s = a.duration_s;
  if (r->rc == SL_ENOTFOUND && c->measure_undecoded) {
    sl_pf_audio_clear(&a);
    r->rc = sl_pf_measure(data, len, c, &r->duration_s, r->err, sizeof r->err);
    r->undecoded = r->rc == 0;
    return r->rc;
  }
  if (r->rc == 0 && sl_pf_analyse(&a, c->silence_dbfs) != 0) {
    r->rc = SL_ENOMEM;
    snprintf(r->err, sizeof r->err, "out of memory measuring speech");
  }
  r->speech_s = a.speech_s;
  r->peak_dbfs = a.peak_dbfs;
  r->floor_dbfs = a.floor_dbfs;
  r->timing = a.timing;
  if (r->rc == 0 && c->normalize && a.speech_s >= c->min_speech_s) {
    int16_t *pcm = a.pcm;
    size_t n = a.n;
    if (c->trim && (r->rc = trimmed(&a, c, &pcm, &n)) != 0)
      snprintf(r->err, sizeof r->err, "out of memory cutting the silence");
    if (r->rc == 0) r->rc = flac_into(pcm, n, c->flac_level, sink, &r->flac, &r->flac_len);
    if (r->rc == 0) {
      r->flac_s = (double)n / SL_PF_RATE;
      r->nspans = pause_spans(&a, c, r->spans);
    } else if (!r->err[0])
      snprintf(r->err, sizeof r->err, "encoding the FLAC failed");
    if (pcm != a.pcm) free(pcm);
  }
  sl_pf_audio_clear(&a);
  return r->rc;
}

void sl_pf_result_clear(sl_pf_result *r) {
  if (!r) return;
  free(r->flac);
  memset(r, 0, sizeof *r);
}
