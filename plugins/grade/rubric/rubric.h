/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rubric.h — deterministic rubric grader for spoken answers.
 *
 * Input is an offline speech-recognition transcript (lowercase, no
 * punctuation, may contain recognition errors), the audio's duration, an
 * optional prompt (the question that was asked) and, optionally, when the
 * speech was (sl_rubric_timing, from preflight). The grader measures five
 * things — speaking rate, lexical variety, filler use, length and relevance to
 * the prompt — maps each to a 0..100 criterion with a fixed piecewise-linear
 * curve, combines them with fixed weights, caps the result by a length ceiling
 * and maps the score to one of nine OPIc-style levels. The exact formula is
 * documented in docs/grading.md and must stay in step with rubric.c.
 *
 * Properties: pure function of its inputs (same input gives a bit-identical
 * result), no heap allocation, no global mutable state (thread-safe and
 * reentrant), no locale dependence (ASCII-only case folding; bytes >= 0x80
 * are word characters).
 */
#ifndef SLUICE_GRADE_RUBRIC_H
#define SLUICE_GRADE_RUBRIC_H

#include <stddef.h>

#include "sluice/sl_plugin.h"

/* Indexes into sl_rubric_result.crit. */
enum {
  SL_RUBRIC_FLUENCY = 0,   /* speaking rate (words per minute) */
  SL_RUBRIC_VARIETY = 1,   /* lexical variety (MATTR, 25-word windows) */
  SL_RUBRIC_FILLERS = 2,   /* fillers per 100 words (fewer is better) */
  SL_RUBRIC_LENGTH = 3,    /* number of words; also the score ceiling */
  SL_RUBRIC_RELEVANCE = 4, /* coverage of the prompt's content words */
  SL_RUBRIC_NCRIT = 5
};

/* Transcripts longer than this many bytes are rejected with SL_ETOOBIG. */
#define SL_RUBRIC_MAX_TRANSCRIPT 65536u
/* Only the first this-many distinct content words of a prompt are used. */
#define SL_RUBRIC_MAX_PROMPT_TERMS 64u
/* Words are compared on at most this many bytes (longer ones are cut). */
#define SL_RUBRIC_WORD_MAX 31u

/* When the words were spoken, as the preflight step measured it
 * (UploadCompleted's speech_s, speaking_s, pauses, pause_mean_s,
 * pause_longest_s; docs/grading.md "Timing"). With it, fluency is rubric
 * v2's: the speech rate over the speaking time, the words between silent
 * pauses and the pauses' mean length; without it (NULL, speaking_s 0, or
 * numbers no recording gives) it is v1's: words per minute of the whole
 * recording. */
typedef struct {
  double speech_s;        /* phonation time: the speech frames' */
  double speaking_s;      /* first speech to the end of the last */
  double pause_mean_s;    /* the silent pauses' (250 ms or more) mean */
  double pause_longest_s; /* and longest */
  unsigned pauses;        /* how many, inside speaking_s */
  /* where the transcript has segments with times (Whisper): how many, and
   * how many gaps of 0.25 s or more lie between consecutive ones; those
   * of the pauses are between segments, the rest inside them (evidence
   * only: the score does not use the split). segments 0: unknown. */
  unsigned segments;
  unsigned segment_pauses;
} sl_rubric_timing;

/* Bytes of one criterion's evidence sentence, NUL included. */
#define SL_RUBRIC_EVIDENCE 512u

typedef struct {
  double score;            /* 0..100 overall, rounded to one decimal */
  char level[4];           /* "NL","NM","NH","IL","IM1","IM2","IM3","IH","AL" */
  double words_per_minute; /* words / duration_s * 60 (capped at 10000) */
  double lexical_variety;  /* MATTR over 25-word windows; plain TTR if fewer
                              than 25 words; 0 if no words */
  double filler_rate;      /* fillers per 100 words (see docs/grading.md for
                              the list; "like" and "so" are not counted) */
  double relevance;        /* 0..1 share of the prompt's content words found
                              in the transcript; 1.0 if the prompt is NULL,
                              empty or has no content words */
  unsigned words;          /* token count (fillers included) */
  double crit[5];          /* per-criterion 0..100, indexed SL_RUBRIC_* */
  char feedback[1024];     /* 2-3 English sentences, weakest criteria first */
  /* Additions beyond the original contract: */
  unsigned fillers;      /* number of fillers counted */
  unsigned prompt_terms; /* distinct content words taken from the prompt */
  unsigned prompt_hits;  /* how many of them occur in the transcript */
  double weighted;       /* weighted criterion sum before the length cap */
  /* Rubric v2: */
  int timed;               /* 1: fluency from the timing (sl_rubric_timing) */
  double speech_rate_wpm;  /* timed: words per minute of the speaking time */
  double articulation_wpm; /* timed: words per minute of phonation time (speaking_s
                              less the silent pauses) */
  double phonation_ratio;  /* timed: phonation time / speaking_s */
  double words_per_run;    /* timed: words / (pauses + 1) */
  unsigned pauses;         /* timed: silent pauses, and their mean and longest: */
  double pause_mean_s, pause_longest_s;
  double fluency_part[3];  /* timed: fluency's parts, 0..100: rate, run, pause */
  int split;               /* timed with segments: the pauses split as below */
  unsigned pauses_between; /* min(segment_pauses, pauses) */
  unsigned pauses_inside;  /* pauses - pauses_between */
  /* each criterion's measure in plain words, e.g. "9 silent pauses of
   * 0.25 s or more in 42.0 s of speaking ..."; indexed SL_RUBRIC_* */
  char evidence[SL_RUBRIC_NCRIT][SL_RUBRIC_EVIDENCE];
} sl_rubric_result;

/*
 * Grade one spoken answer.
 *   transcript  NUL-terminated UTF-8 text, may be empty (not NULL); at most
 *               SL_RUBRIC_MAX_TRANSCRIPT bytes.
 *   duration_s  duration of the audio in seconds; finite and > 0.
 *   prompt      the question asked, or NULL.
 *   out         filled on success; zeroed on failure (when not NULL).
 * A transcript with no words succeeds with score 0, level "NL" and feedback
 * saying that no speech was recognized.
 * Returns 0, SL_EINVAL (NULL transcript/out, duration <= 0, NaN or infinite)
 * or SL_ETOOBIG (transcript too long).
 */
int sl_rubric_grade(const char *transcript, double duration_s, const char *prompt,
                    sl_rubric_result *out);

/* sl_rubric_grade with the timing of the speech (NULL: none): the same
 * result but for fluency (and its feedback and evidence) when the timing
 * is usable (out->timed). Same returns. */
int sl_rubric_grade_timed(const char *transcript, double duration_s, const char *prompt,
                          const sl_rubric_timing *timing, sl_rubric_result *out);

/* Level for a (rounded) score: the highest level whose lower bound is <= score
 * (bounds 0, 20, 35, 45, 55, 62, 69, 76, 86). NaN maps to "NL". The returned
 * string is static. */
const char *sl_rubric_level(double score);

/* host.c, for graders that are plugins. The answer's timing as preflight
 * wrote it into the input message (upload.speaking_s, .speech_s, .pauses,
 * .pause_mean_s, .pause_longest_s): t filled and returned, or NULL when it
 * is not there (t zeroed). Call from the plugin's call() (c is its call). */
const sl_rubric_timing *sl_rubric_timing_read(const sl_plugin_host *h, sl_plugin_call *c,
                                              sl_rubric_timing *t);

/* host.c: r's criteria as lines "- fluency: 62/100 (<evidence>)", NUL-
 * terminated in buf (cut to len); returns the length written. */
size_t sl_rubric_criteria_text(const sl_rubric_result *r, char *buf, size_t len);

/* English name of criterion i ("fluency", "variety", "fillers", "length",
 * "relevance"), or "unknown". Static string. */
const char *sl_rubric_criterion_name(int i);

#endif
