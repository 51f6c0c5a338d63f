/* SPDX-License-Identifier: Apache-2.0 */
/*
 * preflight.h — the work of the step/preflight plugin, callable without the
 * plugin host (unit tests, benchmarks): decode any recorded answer to
 * 16 kHz mono PCM with GStreamer (a WAV that already is 16-bit mono at
 * 16 kHz with libsndfile: the same samples, without a pipeline), measure
 * it, and encode it as FLAC.
 *
 * Decoding: GStreamer's decodebin picks the demuxer and decoder from the
 * bytes themselves (WebM/Matroska, Ogg, MP4, MP3, FLAC, WAV; Opus, Vorbis,
 * MP3, FLAC, PCM), then audioconvert and audioresample give 16-bit mono at
 * 16 kHz. The plugins it uses come from Debian's gstreamer1.0-plugins-base
 * and -good (LGPL-2.1+), which link libopus (BSD), libvorbis (BSD),
 * libFLAC (BSD) and libmpg123 (LGPL-2.1). AAC has no decoder under a
 * permissive or LGPL licence in Debian (ffmpeg's Debian build is GPL, faad2
 * is GPL, fdk-aac is not in bookworm), so an MP4/AAC recording is
 * recognised and reported as SL_ENOTFOUND ("no decoder"), not decoded.
 *
 * Speech activity: 20 ms frames, energy in dBFS; the noise floor is the
 * 10th percentile of frame energies; a frame is speech when it is above
 * max(silence_dbfs, floor + 10 dB) (never more than -30 dBFS is asked of
 * it), in a run of at least 3 frames (60 ms; clicks are not speech).
 * Digital silence, room noise and a constant hum all measure 0 s of
 * speech; a quiet voice over a quiet room does not.
 *
 * Timing (sl_pf_timing; definitions and references in docs/grading.md):
 * the stretch from the first speech frame to the end of the last is the
 * answer's speaking time; a gap between speech of SL_PF_PAUSE_MIN_MS or
 * more inside it is a silent pause, a shorter one belongs to the run of
 * speech around it; runs are the stretches between pauses. Leading and
 * trailing silence count in none of them.
 *
 * The FLAC (sl_pf_check, normalize) holds the whole recording, or with
 * trim its speech: from keep_silence_ms before the first speech frame to
 * keep_silence_ms after the last, each inner silence longer than
 * max_silence_ms shortened to it by cutting its middle (flac_s: its length).
 *
 * @locality Every function is reentrant: many threads may decode at once
 * (one GStreamer pipeline per call). sl_pf_init() once before the first
 * decode (it is idempotent and thread-safe).
 */
#ifndef SLUICE_PLUGIN_PREFLIGHT_H
#define SLUICE_PLUGIN_PREFLIGHT_H

#include <stddef.h>
#include <stdint.h>

#define SL_PF_RATE 16000
#define SL_PF_PAUSE_MIN_MS 250 /* a silent pause: a gap in speech at least this long */
#define SL_PF_MAX_SPANS 64     /* pauses placed in the FLAC's timeline (sl_pf_result.spans) */

/* When the speech was, from the speech frames (sl_pf_analyse); all 0
 * without speech. */
typedef struct {
  double speaking_s;      /* first speech to the end of the last (pauses inside included) */
  double pause_total_s;   /* the silent pauses inside it, summed */
  double pause_mean_s;    /* pause_total_s / pauses (0 without pauses) */
  double pause_longest_s; /* the longest */
  double run_mean_s;      /* (speaking_s - pause_total_s) / runs */
  uint32_t pauses;        /* silent pauses inside the speaking time */
  uint32_t runs;          /* stretches of speech between them: pauses + 1 */
} sl_pf_timing;

typedef struct {
  double max_seconds;  /* decoding stops past this: SL_ETOOBIG */
  double silence_dbfs; /* frames below are never speech (e.g. -50) */
  long timeout_ms;     /* whole decode, wall time */
  int max_rate;        /* a stream above this many Hz is refused (0: any) */
  int max_channels;    /* a stream with more channels is refused (0: any) */
  /* sl_pf_check only: */
  int normalize;         /* write the 16 kHz mono FLAC, */
  double min_speech_s;   /* when there is at least this much speech */
  int flac_level;        /* its libFLAC level, 0..SL_PF_FLAC_LEVEL_MAX */
  int measure_undecoded; /* time a codec with no decoder (pass_undecoded) */
  /* the FLAC holds the speech (STT providers bill every second sent): from
   * keep_silence_ms before the first speech frame to keep_silence_ms after
   * the last, an inner silence longer than max_silence_ms shortened to it
   * (its middle cut; 0: kept whole). trim 0: the whole recording. */
  int trim;
  int keep_silence_ms;
  int max_silence_ms;
} sl_pf_conf;

/* The whole check of one answer, as sl_pf_check (in this process) and the
 * sandbox (sandbox.h, in another) give it. */
typedef struct {
  int rc;        /* 0, or what sl_pf_decode / sl_pf_measure returned, or
                    SL_ENOMEM / SL_EIO from measuring or encoding */
  int undecoded; /* rc == 0 from sl_pf_measure: timed, not decoded */
  double duration_s, speech_s, peak_dbfs, floor_dbfs;
  sl_pf_timing timing;
  double flac_s; /* the audio the FLAC holds, seconds (trim: less than duration_s) */
  /* with the FLAC: its first SL_PF_MAX_SPANS silent pauses, [start, end)
   * in seconds of the FLAC (trim: of the audio left), in order */
  uint32_t nspans;
  float spans[SL_PF_MAX_SPANS][2];
  void *flac; /* malloc'd (normalize, decoded), owned by the result */
  size_t flac_len;
  char err[512]; /* why, when rc != 0 */
} sl_pf_result;

typedef struct {
  int16_t *pcm;        /* 16 kHz mono, malloc'd; NULL when empty */
  size_t n;            /* samples */
  double duration_s;   /* n / 16000 */
  double speech_s;     /* after sl_pf_analyse */
  double peak_dbfs;    /* loudest frame, after sl_pf_analyse */
  double floor_dbfs;   /* the noise floor, after sl_pf_analyse */
  sl_pf_timing timing; /* after sl_pf_analyse */
  uint8_t *speech;     /* after sl_pf_analyse: 1 per 20 ms frame that is speech (malloc'd) */
  size_t nframes;
} sl_pf_audio;

/* gst_init, once per process. Returns 0 or SL_EPLUGIN with the reason. */
int sl_pf_init(char *err, size_t errlen);

/* Decodes data. Returns 0; SL_EDECODE (audio, but corrupt or empty: reason
 * in err); SL_EUNSUPPORTED (not audio, a format outside the allow-list, or
 * a rate or channel count above the limits: reason in err); SL_ENOTFOUND
 * (a recognised audio codec with no decoder allowed here, e.g. AAC: reason
 * in err); SL_ETOOBIG (longer than max_seconds; out->duration_s is what was
 * decoded before stopping); SL_ETIMEDOUT (timeout_ms of wall time passed);
 * SL_ENOMEM. On any return out must be cleared with sl_pf_audio_clear. */
int sl_pf_decode(const void *data, size_t len, const sl_pf_conf *c, sl_pf_audio *out, char *err,
                 size_t errlen);

/* sl_pf_decode through GStreamer whatever the bytes: sl_pf_decode reads a
 * 16 kHz mono 16-bit WAV with libsndfile instead (the same samples, without
 * a pipeline); tests compare the two. */
int sl_pf_decode_gst(const void *data, size_t len, const sl_pf_conf *c, sl_pf_audio *out, char *err,
                     size_t errlen);

/* The length of a recording whose codec has no decoder here (SL_ENOTFOUND
 * from sl_pf_decode), in *seconds: its frames demuxed and parsed, not
 * decoded, and timed from the parser's own timestamps, not from a header.
 * 0; SL_ETOOBIG past max_seconds; SL_EDECODE with no timed frames;
 * SL_ENOTFOUND when not even a parser here takes it (an MP4 track of an
 * unknown codec: found by fuzz_preflight); SL_EUNSUPPORTED, SL_ETIMEDOUT
 * as sl_pf_decode. */
int sl_pf_measure(const void *data, size_t len, const sl_pf_conf *c, double *seconds, char *err,
                  size_t errlen);

/* 1 when decodebin may plug the GStreamer element factory of that name. */
int sl_pf_allowed(const char *factory);

/* Fills speech_s, peak_dbfs, floor_dbfs and timing. Returns 0 or SL_ENOMEM. */
int sl_pf_analyse(sl_pf_audio *a, double silence_dbfs);

/* Encodes 16 kHz mono PCM as FLAC at compression level `level` (libFLAC's
 * 0 fastest .. 8 smallest) into a malloc'd buffer. 0, SL_EINVAL (level out
 * of range), SL_ENOMEM or SL_EIO (the encoder refused). */
#define SL_PF_FLAC_LEVEL_MAX 8 /* libFLAC's levels are 0..8 */
int sl_pf_flac(const int16_t *pcm, size_t n, int level, void **out, size_t *outlen);

void sl_pf_audio_clear(sl_pf_audio *a);

/* Decodes (or, measure_undecoded, times) data, measures speech and, with
 * normalize, encodes the FLAC: everything preflight learns of an answer,
 * into *r (sl_pf_result_clear after). Returns r->rc. */
int sl_pf_check(const void *data, size_t len, const sl_pf_conf *c, sl_pf_result *r);

void sl_pf_result_clear(sl_pf_result *r);

/* Where the FLAC of sl__pf_check_into goes: grow(ud, cap) returns a buffer
 * of at least cap bytes holding what the earlier calls' buffer held (as
 * realloc would), or NULL (SL_ENOMEM). sluice-decode encodes straight into
 * its memory file with it (decoder_main.c). */
typedef struct {
  void *(*grow)(void *ud, size_t cap);
  void *ud;
} sl__pf_sink;

/* sl_pf_check with the FLAC in sink's buffer: r->flac points into it, and
 * is not the result's (set it NULL before sl_pf_result_clear). */
int sl__pf_check_into(const void *data, size_t len, const sl_pf_conf *c, const sl__pf_sink *sink,
                      sl_pf_result *r);

#endif
