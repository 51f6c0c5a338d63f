/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pocketsphinx.h — offline speech-to-text for the stt stage (CMU PocketSphinx).
 *
 * An sl_ps wraps one PocketSphinx decoder (acoustic model, language model and
 * dictionary loaded once in sl_ps_new) and turns an in-memory audio file into
 * a transcript with per-word timings. Audio is read with libsndfile straight
 * from the caller's buffer (no temp files), downmixed to mono, resampled with
 * libsamplerate to the decoder's rate (16 kHz for en-us) chunk by chunk, and
 * recognized as one utterance. The same bytes always give the same transcript,
 * whatever the decoder transcribed before.
 *
 * Threading: an sl_ps is NOT thread-safe — use one per worker thread. Distinct
 * sl_ps objects may be created, used and freed concurrently. PocketSphinx's
 * own logging is process-global: the first sl_ps_new() silences it (nothing
 * reaches stderr) and keeps the last library error of the calling thread to
 * put into err; a host that installs its own sphinxbase log callback later
 * takes that over.
 *
 * Memory: each sl_ps holds its own copy of the models (~100 MB RSS for
 * en-us). A transcription adds the 16 kHz PCM (32 KB per second) and the
 * recognizer's search state (~0.5 MB per second of audio at peak), so
 * max_seconds is also the memory cap. Most of it is freed before the call
 * returns; PocketSphinx keeps some tables at their high-water mark (~0.1 MB
 * per second of the longest file so far) until sl_ps_free(). Speed is about
 * 0.2 s of CPU per second of audio on one core.
 */
#ifndef SLUICE_STT_POCKETSPHINX_H
#define SLUICE_STT_POCKETSPHINX_H

#include <stddef.h>

/* Model directory used when sl_ps_new() gets model_dir == NULL. */
#define SL_PS_DEFAULT_MODELDIR "/usr/share/pocketsphinx/model/en-us"
/* Length limit used when sl_ps_new() gets max_seconds == 0. */
#define SL_PS_DEFAULT_MAX_SECONDS 600.0

/* One decoder. NOT thread-safe: one per worker thread. */
typedef struct sl_ps sl_ps;

/* One recognized word; times are seconds from the start of the audio.
 * end_s is the end of the word's last frame (end_s > start_s). */
typedef struct {
  char *word;
  double start_s, end_s;
} sl_ps_word;

/* A transcript. Everything in it is owned by the result and released by
 * sl_ps_result_clear(). text is the words joined by single spaces ("" for
 * silence); fillers and silence markers (<s>, </s>, <sil>, [NOISE], ...) are
 * left out of both text and words. duration_s is the length of the decoded
 * input audio. */
typedef struct {
  char *text;
  double duration_s;
  sl_ps_word *words;
  size_t nwords;
} sl_ps_result;

/* Loads the models and creates a decoder in *out (caller frees it with
 * sl_ps_free()).
 *
 * model_dir: directory holding en-us/ (acoustic model), en-us.lm.bin and
 *   cmudict-en-us.dict; NULL means SL_PS_DEFAULT_MODELDIR. The string is only
 *   read during the call.
 * max_seconds: sl_ps_transcribe() rejects longer audio with SL_ETOOBIG;
 *   0 means SL_PS_DEFAULT_MAX_SECONDS. Must be finite and >= 0.
 * err/errlen: on failure a NUL-terminated reason is written there (cut to
 *   fit); may be NULL/0.
 *
 * Returns 0, SL_EINVAL (bad argument), SL_ECONFIG (model files missing or
 * unreadable), SL_ESTT (PocketSphinx refused the configuration or models) or
 * SL_ENOMEM. *out is NULL on failure. Slow (loads ~40 MB of models): create
 * decoders once per worker, not per request. */
int sl_ps_new(sl_ps **out, const char *model_dir, double max_seconds, char *err, size_t errlen);

/* Frees the decoder and its models. NULL-safe. */
void sl_ps_free(sl_ps *ps);

/* Transcribes an in-memory audio file (anything libsndfile reads: WAV, FLAC,
 * Ogg/Vorbis, ...). The audio buffer is borrowed for the duration of the call
 * only.
 *
 * On success returns 0 and fills *res, which the caller owns and releases with
 * sl_ps_result_clear(). *res is overwritten without being freed first, so
 * clear a previously filled result before reusing it. On failure *res is left
 * zeroed and err holds the reason:
 *   SL_EINVAL   ps/res NULL, or audio NULL with len > 0;
 *   SL_EDECODE  empty, corrupt or undecodable input, no samples, unsupported
 *               channel count or sample rate ("libsndfile: ..." when the
 *               library rejected it);
 *   SL_ETOOBIG  audio longer than max_seconds;
 *   SL_ESTT     the recognizer failed;
 *   SL_ENOMEM   out of memory.
 * Silence is success with text "" and nwords 0. The decoder stays usable
 * after any error. Not thread-safe for the same ps. */
int sl_ps_transcribe(sl_ps *ps, const void *audio, size_t len, sl_ps_result *res, char *err,
                     size_t errlen);

/* Frees everything in *res and zeroes it. NULL-safe; idempotent. */
void sl_ps_result_clear(sl_ps_result *res);

#endif
