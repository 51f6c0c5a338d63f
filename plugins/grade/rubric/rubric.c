/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rubric.c — deterministic rubric grader for spoken answers.
 *
 * Design
 * ------
 * One pass over the transcript, no heap, no global mutable state:
 *
 *   tokenizer   maximal runs of word bytes ([A-Za-z0-9'] and every byte
 *               >= 0x80), leading/trailing apostrophes stripped, ASCII-only
 *               case folding, compared on at most SL_RUBRIC_WORD_MAX bytes.
 *               No <ctype.h> (locale-dependent) anywhere in this file.
 *   fillers     single-word fillers from a fixed list, plus the pairs
 *               "you know" / "i mean" with a one-word left context to skip
 *               the literal uses ("do you know", "what i mean").
 *   variety     MATTR: a 25-slot ring of the last words keeps a running
 *               count of distinct words; the sum of per-window counts is an
 *               integer, divided once at the end (exact and order-free).
 *   relevance   the prompt's content words (stopwords removed, light plural
 *               folding, deduplicated, at most SL_RUBRIC_MAX_PROMPT_TERMS) in
 *               a fixed table; each transcript word marks the terms it hits.
 *
 * Each measure goes through a fixed piecewise-linear curve to 0..100; the
 * score is the weighted sum capped by the length criterion (a text-type
 * ceiling: a few isolated words cannot reach an intermediate level), rounded
 * to one decimal, then mapped to a level. docs/grading.md documents the
 * curves, weights and thresholds; keep both in step.
 *
 * Determinism: only IEEE double + - * / and floor() in a fixed order (C11
 * mode disables FP contraction in GCC, so no FMA surprises), and numbers in
 * the feedback are printed from integers, so the decimal separator never
 * depends on the locale.
 */
#include "rubric.h"

#include "sluice/sl_err.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORD_BUF (SL_RUBRIC_WORD_MAX + 1u)
#define MATTR_WINDOW 25u
#define WPM_CAP 10000.0
#define GOOD_CRIT 90.0 /* a criterion at or above this gets praise, not advice */

/* ---- piecewise-linear curves ------------------------------------------ */

typedef struct {
  double x, y;
} point;

#define NPOINTS(a) (sizeof(a) / sizeof((a)[0]))

/* words per minute -> fluency */
static const point FLUENCY_CURVE[] = {{40.0, 0.0}, {110.0, 100.0}, {150.0, 100.0}, {220.0, 50.0}};
/* MATTR -> variety */
static const point VARIETY_CURVE[] = {{0.50, 0.0}, {0.90, 100.0}};
/* fillers per 100 words -> fillers criterion */
static const point FILLER_CURVE[] = {{2.0, 100.0}, {12.0, 0.0}};
/* word count -> length criterion (and score ceiling) */
static const point LENGTH_CURVE[] = {
    {0.0, 0.0}, {10.0, 40.0}, {30.0, 62.0}, {60.0, 80.0}, {100.0, 100.0}};
/* relevance share -> relevance criterion */
static const point RELEVANCE_CURVE[] = {{0.0, 0.0}, {0.5, 100.0}};

static const double WEIGHTS[SL_RUBRIC_NCRIT] = {0.25, 0.20, 0.15, 0.20, 0.20};
/* rubric v2's fluency (timed): words between silent pauses, the pauses' mean length */
static const point RUN_CURVE[] = {{2.0, 0.0}, {8.0, 100.0}};
static const point PAUSE_CURVE[] = {{0.6, 100.0}, {2.0, 0.0}};
static const double FLUENCY_PARTS[3] = {0.4, 0.3, 0.3}; /* rate, run, pause */

/* Clamp to the end values outside [first.x, last.x], interpolate inside. */
static double curve(const point *p, size_t n, double x) {
  if (x <= p[0].x) return p[0].y;
  for (size_t i = 1; i < n; i++) {
    if (x <= p[i].x)
      return p[i - 1].y + (p[i].y - p[i - 1].y) * (x - p[i - 1].x) / (p[i].x - p[i - 1].x);
  }
  return p[n - 1].y;
}

/* ---- levels ------------------------------------------------------------ */

static const struct {
  double min;
  const char *name;
} LEVELS[] = {{86.0, "AL"}, {76.0, "IH"}, {69.0, "IM3"}, {62.0, "IM2"}, {55.0, "IM1"},
              {45.0, "IL"}, {35.0, "NH"}, {20.0, "NM"},  {0.0, "NL"}};

const char *sl_rubric_level(double score) {
  for (size_t i = 0; i < NPOINTS(LEVELS); i++) {
    if (score >= LEVELS[i].min) /* false for NaN */
      return LEVELS[i].name;
  }
  return "NL";
}

const char *sl_rubric_criterion_name(int i) {
  static const char *const names[SL_RUBRIC_NCRIT] = {"fluency", "variety", "fillers", "length",
                                                     "relevance"};
  return (i >= 0 && i < SL_RUBRIC_NCRIT) ? names[i] : "unknown";
}

/* ---- tokenizer ---------------------------------------------------------- */

static int is_word_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '\'' ||
         c >= 0x80;
}

static char fold(unsigned char c) { return (char)((c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c); }

/* Next word of s starting at *pos, folded and cut to SL_RUBRIC_WORD_MAX bytes,
 * into buf. Returns 1 for a word, 0 at the end of the string. */
static int next_word(const char *s, size_t *pos, char buf[WORD_BUF]) {
  for (;;) {
    while (s[*pos] != '\0' && !is_word_byte((unsigned char)s[*pos])) (*pos)++;
    if (s[*pos] == '\0') return 0;
    size_t start = *pos;
    while (is_word_byte((unsigned char)s[*pos])) (*pos)++;
    size_t end = *pos;
    while (start < end && s[start] == '\'') start++;
    while (end > start && s[end - 1] == '\'') end--;
    if (start == end) continue; /* apostrophes only */
    size_t n = end - start;
    if (n > SL_RUBRIC_WORD_MAX) n = SL_RUBRIC_WORD_MAX;
    for (size_t i = 0; i < n; i++) buf[i] = fold((unsigned char)s[start + i]);
    buf[n] = '\0';
    return 1;
  }
}

static int in_list(const char *w, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(w, list[i]) == 0) return 1;
  }
  return 0;
}

static int cmp_word(const void *key, const void *entry) {
  return strcmp(key, *(const char *const *)entry);
}

/* w in a list sorted in strcmp order */
static int in_sorted(const char *w, const char *const *list, size_t n) {
  return bsearch(w, list, n, sizeof *list, cmp_word) != NULL;
}

static int ends_with(const char *w, size_t len, const char *suf) {
  size_t k = strlen(suf);
  return len >= k && memcmp(w + len - k, suf, k) == 0;
}

/* Light plural folding, in place: "'s" dropped; "-ies" -> "-y" (len > 4);
 * "-ches/-shes/-sses/-xes" lose "es"; otherwise a final "s" is dropped when
 * len > 3 and the byte before it is not 's', 'u' or 'i'. */
static void stem(char *w) {
  size_t len = strlen(w);
  if (ends_with(w, len, "'s")) {
    len -= 2;
    w[len] = '\0';
  }
  if (len > 4 && ends_with(w, len, "ies")) {
    w[len - 3] = 'y';
    w[len - 2] = '\0';
  } else if (ends_with(w, len, "ches") || ends_with(w, len, "shes") || ends_with(w, len, "sses") ||
             ends_with(w, len, "xes")) {
    w[len - 2] = '\0';
  } else if (len > 3 && w[len - 1] == 's' && w[len - 2] != 's' && w[len - 2] != 'u' &&
             w[len - 2] != 'i') {
    w[len - 1] = '\0';
  }
}

/* ---- word lists --------------------------------------------------------- */

/* Single-word fillers, each at most 3 bytes (count_filler looks no further
 * for a longer word); test_filler_counting names every one. */
static const char *const FILLERS[] = {"um",  "umm", "uhm", "uh",  "uhh", "er",
                                      "erm", "ah",  "eh",  "hmm", "mm"};
/* Left contexts in which "you know" is literal, not a filler. */
static const char *const YOU_KNOW_LITERAL[] = {"do",    "did", "don't", "dont", "didn't",
                                               "didnt", "if",  "what",  "how"};

/* Prompt stopwords: English function words plus instruction words that a
 * question uses but an answer has no reason to repeat ("tell", "describe",
 * "explain", "example", ...). Sorted in strcmp (byte) order: looked up by
 * bsearch, eight comparisons a prompt word instead of up to 159
 * (tests/unit/test_rubric.c checks that every entry is found). */
static const char *const STOPWORDS[] = {
    "a",          "about",   "above",   "after",  "again",  "against",  "all",        "also",
    "am",         "an",      "and",     "answer", "any",    "are",      "as",         "at",
    "be",         "because", "been",    "before", "being",  "below",    "between",    "both",
    "but",        "by",      "can",     "can't",  "could",  "describe", "detail",     "details",
    "did",        "discuss", "do",      "does",   "doing",  "don't",    "down",       "during",
    "each",       "example", "explain", "few",    "for",    "from",     "further",    "give",
    "had",        "has",     "have",    "having", "he",     "her",      "here",       "hers",
    "herself",    "him",     "himself", "his",    "how",    "i",        "i'm",        "if",
    "in",         "into",    "is",      "it",     "it's",   "its",      "itself",     "just",
    "kind",       "let",     "like",    "many",   "me",     "more",     "most",       "much",
    "my",         "myself",  "no",      "nor",    "not",    "now",      "of",         "off",
    "on",         "once",    "one",     "only",   "or",     "other",    "our",        "ours",
    "ourselves",  "out",     "over",    "own",    "please", "question", "really",     "same",
    "say",        "share",   "she",     "should", "so",     "some",     "something",  "such",
    "talk",       "tell",    "than",    "that",   "the",    "their",    "theirs",     "them",
    "themselves", "then",    "there",   "these",  "they",   "thing",    "things",     "think",
    "this",       "those",   "through", "to",     "too",    "under",    "until",      "up",
    "very",       "was",     "way",     "we",     "well",   "were",     "what",       "when",
    "where",      "which",   "while",   "who",    "whom",   "why",      "will",       "with",
    "would",      "you",     "you're",  "your",   "yours",  "yourself", "yourselves",
};

/* ---- measuring ---------------------------------------------------------- */

typedef struct {
  /* counts */
  unsigned words;
  unsigned fillers;
  /* filler context */
  char prev[WORD_BUF];
  char prev2[WORD_BUF];
  int prev_filler;
  /* MATTR ring */
  char win[MATTR_WINDOW][WORD_BUF];
  uint32_t winh[MATTR_WINDOW]; /* word_hash of each: strcmp only when equal */
  unsigned wn;                 /* words in the ring, <= MATTR_WINDOW */
  unsigned wpos;               /* oldest slot once the ring is full */
  unsigned distinct;
  unsigned long long sum_distinct;
  unsigned long windows;
  /* prompt terms */
  char terms[SL_RUBRIC_MAX_PROMPT_TERMS][WORD_BUF];
  uint32_t termh[SL_RUBRIC_MAX_PROMPT_TERMS]; /* word_hash of each */
  unsigned char hit[SL_RUBRIC_MAX_PROMPT_TERMS];
  unsigned nterms;
} measure;

/* FNV-1a of a word: equal words hash equal, so a differing hash settles
 * most comparisons without strcmp (the ring and the prompt terms). */
static uint32_t word_hash(const char *w) {
  uint32_t h = 2166136261u;
  for (; *w; w++) h = (h ^ (unsigned char)*w) * 16777619u;
  return h;
}

static int count_filler(measure *m, const char *w) {
  /* every single-word filler has at most 3 bytes */
  if (!(w[0] && w[1] && w[2] && w[3]) && in_list(w, FILLERS, NPOINTS(FILLERS))) return 1;
  if (m->prev_filler) return 0; /* the left word already belongs to a filler */
  if (strcmp(w, "know") == 0 && strcmp(m->prev, "you") == 0 &&
      !in_list(m->prev2, YOU_KNOW_LITERAL, NPOINTS(YOU_KNOW_LITERAL)))
    return 1;
  if (strcmp(w, "mean") == 0 && strcmp(m->prev, "i") == 0 && strcmp(m->prev2, "what") != 0)
    return 1;
  return 0;
}

static int ring_has(const measure *m, const char *w, uint32_t h, unsigned skip) {
  for (unsigned j = 0; j < m->wn; j++) {
    if (j != skip && m->winh[j] == h && strcmp(m->win[j], w) == 0) return 1;
  }
  return 0;
}

static void mattr_push(measure *m, const char *w) {
  uint32_t h = word_hash(w);
  if (m->wn < MATTR_WINDOW) {
    if (!ring_has(m, w, h, MATTR_WINDOW)) m->distinct++;
    memcpy(m->win[m->wn], w, strlen(w) + 1);
    m->winh[m->wn] = h;
    m->wn++;
  } else {
    unsigned slot = m->wpos;
    if (!ring_has(m, m->win[slot], m->winh[slot], slot))
      m->distinct--; /* the evicted word was the only copy */
    memcpy(m->win[slot], w, strlen(w) + 1);
    m->winh[slot] = h;
    if (!ring_has(m, w, h, slot)) m->distinct++;
    m->wpos = (slot + 1u) % MATTR_WINDOW;
  }
  if (m->wn == MATTR_WINDOW) {
    m->sum_distinct += m->distinct;
    m->windows++;
  }
}

static void relevance_mark(measure *m, const char *w) {
  if (m->nterms == 0) return;
  char s[WORD_BUF];
  memcpy(s, w, strlen(w) + 1);
  stem(s);
  uint32_t h = word_hash(s);
  for (unsigned i = 0; i < m->nterms; i++) {
    if (m->termh[i] == h && strcmp(s, m->terms[i]) == 0) m->hit[i] = 1;
  }
}

static void load_prompt(measure *m, const char *prompt) {
  if (prompt == NULL) return;
  size_t pos = 0;
  char w[WORD_BUF];
  while (m->nterms < SL_RUBRIC_MAX_PROMPT_TERMS && next_word(prompt, &pos, w)) {
    if (in_sorted(w, STOPWORDS, NPOINTS(STOPWORDS))) continue;
    stem(w);
    uint32_t h = word_hash(w);
    int dup = 0;
    for (unsigned i = 0; i < m->nterms && !dup; i++)
      dup = m->termh[i] == h && strcmp(m->terms[i], w) == 0;
    if (!dup) {
      memcpy(m->terms[m->nterms], w, strlen(w) + 1);
      m->termh[m->nterms] = h;
      m->nterms++;
    }
  }
}

/* ---- feedback ----------------------------------------------------------- */

/* v >= 0 rounded half-up to `decimals` (0..3) places, printed with '.'. */
static void fmt_fixed(char *buf, size_t cap, double v, int decimals) {
  static const long long scale[] = {1, 10, 100, 1000};
  if (!(v >= 0.0)) v = 0.0;
  long long r = (long long)floor(v * (double)scale[decimals] + 0.5);
  if (decimals == 0)
    snprintf(buf, cap, "%lld", r);
  else
    snprintf(buf, cap, "%lld.%0*lld", r / scale[decimals], decimals, r % scale[decimals]);
}

/* timed fluency lost more to its pauses than to its rate */
static int hesitant(const sl_rubric_result *r) {
  double p = r->fluency_part[1] < r->fluency_part[2] ? r->fluency_part[1] : r->fluency_part[2];
  return p < r->fluency_part[0];
}

/* Append one sentence (with a leading space unless first) about criterion c. */
static void add_sentence(char *fb, size_t cap, int c, const sl_rubric_result *r) {
  char num[32];
  char s[320];
  int good = r->crit[c] >= GOOD_CRIT;
  switch (c) {
  case SL_RUBRIC_FLUENCY:
    if (r->timed && !good && hesitant(r)) {
      char mean[32], wpr[32];
      fmt_fixed(mean, sizeof mean, r->pause_mean_s, 1);
      fmt_fixed(wpr, sizeof wpr, r->words_per_run, 1);
      char times[32];
      if (r->pauses == 1)
        snprintf(times, sizeof times, "once");
      else
        snprintf(times, sizeof times, "%u times", r->pauses);
      snprintf(s, sizeof s,
               "You stopped %s for a quarter second or more (%s s on average), with %s "
               "words between stops; aim for longer stretches of speech between pauses.",
               times, mean, wpr);
      break;
    }
    fmt_fixed(num, sizeof num, r->timed ? r->speech_rate_wpm : r->words_per_minute, 0);
    if (good)
      snprintf(s, sizeof s, "Your pace of %s words per minute is within the 110-150 target.", num);
    else if (r->words_per_minute > 150.0)
      snprintf(s, sizeof s,
               "You spoke at %s words per minute, which is fast; aim for 110-150 so every word "
               "is clear.",
               num);
    else
      snprintf(s, sizeof s,
               "You spoke at %s words per minute; aim for 110-150 by pausing less between "
               "phrases.",
               num);
    break;
  case SL_RUBRIC_VARIETY:
    fmt_fixed(num, sizeof num, r->lexical_variety, 2);
    if (good)
      snprintf(s, sizeof s, "Your lexical variety of %s shows a good range of words.", num);
    else
      snprintf(s, sizeof s,
               "Your lexical variety was %s (the share of different words in each 25-word "
               "stretch); aim for 0.86 or more by using new words instead of repeating the "
               "same ones.",
               num);
    break;
  case SL_RUBRIC_FILLERS:
    fmt_fixed(num, sizeof num, r->filler_rate, 1);
    if (good)
      snprintf(s, sizeof s, "You kept fillers low at %s per 100 words.", num);
    else
      snprintf(s, sizeof s,
               "You used %u fillers such as um, uh or you know (%s per 100 words); aim for 2 or "
               "fewer per 100 words.",
               r->fillers, num);
    break;
  case SL_RUBRIC_LENGTH:
    if (good)
      snprintf(s, sizeof s, "Your answer of %u words is long enough to show connected speech.",
               r->words);
    else
      snprintf(s, sizeof s,
               "Your answer had only %u words; aim for at least 100 words, about a minute of "
               "full sentences.",
               r->words);
    break;
  default: /* SL_RUBRIC_RELEVANCE */
    fmt_fixed(num, sizeof num, r->relevance * 100.0, 0);
    if (good)
      snprintf(s, sizeof s, "You addressed the question directly, using %u of its %u key words.",
               r->prompt_hits, r->prompt_terms);
    else
      snprintf(s, sizeof s,
               "Your answer used %u of the %u key words from the question (%s%%); talk directly "
               "about what the question asks.",
               r->prompt_hits, r->prompt_terms, num);
    break;
  }
  size_t used = strlen(fb);
  if (used < cap) snprintf(fb + used, cap - used, "%s%s", used ? " " : "", s);
}

/* Criteria ordered weakest first (ties: lower index first); relevance is
 * left out when the prompt gave no terms. Returns how many were written. */
static unsigned weakest_order(const sl_rubric_result *r, int order[SL_RUBRIC_NCRIT]) {
  unsigned n = 0;
  for (int c = 0; c < SL_RUBRIC_NCRIT; c++) {
    if (c == SL_RUBRIC_RELEVANCE && r->prompt_terms == 0) continue;
    unsigned k = n++;
    while (k > 0 && r->crit[order[k - 1]] > r->crit[c]) { /* stable insertion */
      order[k] = order[k - 1];
      k--;
    }
    order[k] = c;
  }
  return n;
}

static void write_feedback(sl_rubric_result *r) {
  int order[SL_RUBRIC_NCRIT];
  unsigned n = weakest_order(r, order);
  r->feedback[0] = '\0';
  /* n >= 4: only relevance is ever left out. */
  for (unsigned i = 0; i < 2 && i < n; i++)
    add_sentence(r->feedback, sizeof r->feedback, order[i], r);
  /* If the length ceiling lowered the score, say so even when length is not
   * among the two weakest. */
  if (r->weighted > r->crit[SL_RUBRIC_LENGTH] && order[0] != SL_RUBRIC_LENGTH &&
      order[1] != SL_RUBRIC_LENGTH)
    add_sentence(r->feedback, sizeof r->feedback, SL_RUBRIC_LENGTH, r);
}

/* ---- rubric v2: timing and evidence --------------------------------------- */

static int finite_nonneg(double v) { return v >= 0.0 && !isinf(v); } /* NaN fails */

/* t is a timing a recording of duration_s can have (a frame, 20 ms, of slack) */
static int timing_usable(const sl_rubric_timing *t, double duration_s) {
  if (!t || !(t->speaking_s > 0.0) || !finite_nonneg(t->speaking_s) ||
      !finite_nonneg(t->speech_s) || !finite_nonneg(t->pause_mean_s) ||
      !finite_nonneg(t->pause_longest_s))
    return 0;
  if (t->speaking_s > duration_s + 0.02 || t->speech_s > t->speaking_s + 0.02) return 0;
  if (t->pauses == 0) return 1;
  return t->pause_longest_s + 0.02 >= t->pause_mean_s &&
         t->pause_mean_s * t->pauses <= t->speaking_s + 0.02;
}

/* fluency from the timing (r->words > 0) */
static void fluency_timed(sl_rubric_result *r, const sl_rubric_timing *t) {
  r->timed = 1;
  double wpm = (double)r->words / t->speaking_s * 60.0;
  r->speech_rate_wpm = wpm < WPM_CAP ? wpm : WPM_CAP;
  /* phonation time as the fluency literature has it: the speaking time less
   * its silent pauses (de Jong et al. 2013) */
  double phonation = t->speaking_s - (double)t->pauses * t->pause_mean_s;
  double awpm = phonation > 0.0 ? (double)r->words / phonation * 60.0 : WPM_CAP;
  r->articulation_wpm = awpm < WPM_CAP ? awpm : WPM_CAP;
  r->phonation_ratio = phonation > 0.0 ? phonation / t->speaking_s : 0.0;
  r->pauses = t->pauses;
  r->pause_mean_s = t->pauses ? t->pause_mean_s : 0.0;
  r->pause_longest_s = t->pauses ? t->pause_longest_s : 0.0;
  r->words_per_run = (double)r->words / (double)(t->pauses + 1u);
  if (t->segments > 0 && t->pauses > 0) {
    r->split = 1;
    r->pauses_between = t->segment_pauses < t->pauses ? t->segment_pauses : t->pauses;
    r->pauses_inside = t->pauses - r->pauses_between;
  }
  r->fluency_part[0] = curve(FLUENCY_CURVE, NPOINTS(FLUENCY_CURVE), r->speech_rate_wpm);
  r->fluency_part[1] = curve(RUN_CURVE, NPOINTS(RUN_CURVE), r->words_per_run);
  r->fluency_part[2] =
      t->pauses ? curve(PAUSE_CURVE, NPOINTS(PAUSE_CURVE), r->pause_mean_s) : 100.0;
  double f = 0.0;
  for (int i = 0; i < 3; i++) f += FLUENCY_PARTS[i] * r->fluency_part[i];
  r->crit[SL_RUBRIC_FLUENCY] = f;
}

/* each criterion's measure in plain words (r->words > 0) */
static void write_evidence(sl_rubric_result *r, double duration_s, const sl_rubric_timing *t) {
  char a[32], b[32], c[32], d[32], e[32];
  if (r->timed) {
    fmt_fixed(a, sizeof a, r->speech_rate_wpm, 0);
    fmt_fixed(b, sizeof b, t->speaking_s, 1);
    fmt_fixed(c, sizeof c, r->words_per_run, 1);
    fmt_fixed(d, sizeof d, (1.0 - r->phonation_ratio) * 100.0, 0);
    fmt_fixed(e, sizeof e, r->articulation_wpm, 0);
    if (r->pauses) {
      char mean[32], longest[32], split[96] = "";
      fmt_fixed(mean, sizeof mean, r->pause_mean_s, 2);
      fmt_fixed(longest, sizeof longest, r->pause_longest_s, 2);
      if (r->split)
        snprintf(split, sizeof split, "%u between the transcript's %u segment%s, %u inside; ",
                 r->pauses_between, t->segments, t->segments == 1 ? "" : "s", r->pauses_inside);
      snprintf(r->evidence[SL_RUBRIC_FLUENCY], SL_RUBRIC_EVIDENCE,
               "%s words per minute over %s s of speaking; %u silent pause%s of 0.25 s or more "
               "(%smean %s s, longest %s s: %s%% of the time), %s words between pauses; %s words "
               "per minute between them",
               a, b, r->pauses, r->pauses == 1 ? "" : "s", split, mean, longest, d, c, e);
    } else {
      snprintf(r->evidence[SL_RUBRIC_FLUENCY], SL_RUBRIC_EVIDENCE,
               "%s words per minute over %s s of speaking; no silent pause of 0.25 s or more", a,
               b);
    }
  } else {
    fmt_fixed(a, sizeof a, r->words_per_minute, 0);
    fmt_fixed(b, sizeof b, duration_s, 1);
    snprintf(r->evidence[SL_RUBRIC_FLUENCY], SL_RUBRIC_EVIDENCE,
             "%s words per minute over the whole %s s recording (when the speech was is not "
             "known)",
             a, b);
  }
  fmt_fixed(a, sizeof a, r->lexical_variety, 2);
  snprintf(r->evidence[SL_RUBRIC_VARIETY], SL_RUBRIC_EVIDENCE,
           "lexical variety %s: the share of different words in each 25-word stretch", a);
  fmt_fixed(a, sizeof a, r->filler_rate, 1);
  snprintf(r->evidence[SL_RUBRIC_FILLERS], SL_RUBRIC_EVIDENCE,
           "%u fillers (um, uh, you know ...) in %u words: %s per 100 words", r->fillers, r->words,
           a);
  snprintf(r->evidence[SL_RUBRIC_LENGTH], SL_RUBRIC_EVIDENCE, "%u words", r->words);
  if (r->prompt_terms)
    snprintf(r->evidence[SL_RUBRIC_RELEVANCE], SL_RUBRIC_EVIDENCE,
             "%u of the question's %u key words used", r->prompt_hits, r->prompt_terms);
  else
    snprintf(r->evidence[SL_RUBRIC_RELEVANCE], SL_RUBRIC_EVIDENCE,
             "no key words to look for (no question, or none in it)");
}

/* ---- entry point -------------------------------------------------------- */

int sl_rubric_grade(const char *transcript, double duration_s, const char *prompt,
                    sl_rubric_result *out) {
  return sl_rubric_grade_timed(transcript, duration_s, prompt, NULL, out);
}

int sl_rubric_grade_timed(const char *transcript, double duration_s, const char *prompt,
                          const sl_rubric_timing *timing, sl_rubric_result *out) {
  if (out != NULL) memset(out, 0, sizeof *out);
  if (transcript == NULL || out == NULL || !(duration_s > 0.0) || isinf(duration_s))
    return SL_EINVAL;
  size_t len = 0;
  while (len <= SL_RUBRIC_MAX_TRANSCRIPT && transcript[len] != '\0') len++;
  if (len > SL_RUBRIC_MAX_TRANSCRIPT) return SL_ETOOBIG;

  measure m;
  memset(&m, 0, sizeof m);
  load_prompt(&m, prompt);

  size_t pos = 0;
  char w[WORD_BUF];
  while (next_word(transcript, &pos, w)) {
    m.words++;
    int f = count_filler(&m, w);
    m.fillers += (unsigned)f;
    memcpy(m.prev2, m.prev, sizeof m.prev2);
    memcpy(m.prev, w, strlen(w) + 1);
    m.prev_filler = f;
    mattr_push(&m, w);
    relevance_mark(&m, w);
  }

  sl_rubric_result *r = out;
  r->words = m.words;
  r->fillers = m.fillers;
  r->prompt_terms = m.nterms;
  for (unsigned i = 0; i < m.nterms; i++) r->prompt_hits += m.hit[i];
  r->relevance = m.nterms ? (double)r->prompt_hits / (double)m.nterms : 1.0;

  if (m.words == 0) {
    memcpy(r->level, "NL", 3);
    snprintf(r->feedback, sizeof r->feedback,
             "No speech was recognized in this recording. Answer the question aloud in full "
             "sentences, aiming for at least 100 words.");
    return 0;
  }

  double wpm = (double)m.words / duration_s * 60.0;
  r->words_per_minute = wpm < WPM_CAP ? wpm : WPM_CAP;
  if (m.windows > 0)
    r->lexical_variety = (double)m.sum_distinct / ((double)MATTR_WINDOW * (double)m.windows);
  else
    r->lexical_variety = (double)m.distinct / (double)m.wn;
  r->filler_rate = (double)m.fillers * 100.0 / (double)m.words;

  r->crit[SL_RUBRIC_FLUENCY] = curve(FLUENCY_CURVE, NPOINTS(FLUENCY_CURVE), r->words_per_minute);
  if (timing_usable(timing, duration_s)) fluency_timed(r, timing);
  r->crit[SL_RUBRIC_VARIETY] = curve(VARIETY_CURVE, NPOINTS(VARIETY_CURVE), r->lexical_variety);
  r->crit[SL_RUBRIC_FILLERS] = curve(FILLER_CURVE, NPOINTS(FILLER_CURVE), r->filler_rate);
  r->crit[SL_RUBRIC_LENGTH] = curve(LENGTH_CURVE, NPOINTS(LENGTH_CURVE), (double)m.words);
  r->crit[SL_RUBRIC_RELEVANCE] = curve(RELEVANCE_CURVE, NPOINTS(RELEVANCE_CURVE), r->relevance);

  double sum = 0.0;
  for (int c = 0; c < SL_RUBRIC_NCRIT; c++) sum += WEIGHTS[c] * r->crit[c];
  r->weighted = sum;
  double capped = sum < r->crit[SL_RUBRIC_LENGTH] ? sum : r->crit[SL_RUBRIC_LENGTH];
  r->score = floor(capped * 10.0 + 0.5) / 10.0;
  const char *lv = sl_rubric_level(r->score);
  memcpy(r->level, lv, strlen(lv) + 1);

  write_feedback(r);
  write_evidence(r, duration_s, timing);
  return 0;
}
