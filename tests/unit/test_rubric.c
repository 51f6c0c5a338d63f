/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rubric.c — unit tests for the deterministic rubric grader
 * (plugins/grade/rubric). The worked example is the one in docs/grading.md;
 * if a curve, weight or threshold changes, both must change together.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grade/rubric/rubric.h"
#include "sluice/sl_err.h"

#define NEAR(a, b) assert_true(fabs((double)(a) - (double)(b)) < 1e-9)

/* docs/grading.md, "Worked example" (50 words, 40 s). */
static const char *const EXAMPLE_PROMPT =
    "Describe your neighborhood, the people and the places nearby.";
static const char *const EXAMPLE =
    "i live in a quiet area um close to the river there is a small park and a bakery that i "
    "visit every morning uh the best place is the old library because it is calm and you know "
    "i can read there for hours on weekends with my sister";

static const char *const HOBBY_PROMPT = "Tell me about your favorite hobby and why you enjoy it.";

/* 128 words, no fillers, on topic; graded as 60 s of audio. */
static const char *const FLUENT =
    "my favorite hobby is hiking in the mountains near my hometown i started going with my "
    "father when i was about ten years old and now i go almost every weekend with a small group "
    "of friends we usually leave early in the morning pack sandwiches and fruit and choose a "
    "trail we have never tried before i enjoy it because the fresh air clears my head after a "
    "stressful week at work and walking for several hours makes me feel strong and healthy last "
    "autumn we climbed a peak that was more than two thousand meters high and the view of the "
    "valley covered in red and yellow leaves was unforgettable hiking also taught me patience "
    "planning and how to stay calm when the weather suddenly changes";

/* 69 words, 14 fillers, repetitive; graded as 60 s of audio. */
static const char *const REPETITIVE =
    "um my hobby is um uh my hobby is like soccer you know i like soccer um i like soccer "
    "because uh soccer is fun you know soccer is fun and um i play soccer i play soccer with my "
    "friend uh my friend is good and um soccer is good i like it uh i like it very much you know "
    "um soccer soccer is fun um yes";

static unsigned count_sentences(const char *s) {
  unsigned n = 0;
  for (const char *p = s; *p; p++) {
    if (*p == '.' && (p[1] == ' ' || p[1] == '\0')) n++;
  }
  return n;
}

static void grade_ok(const char *t, double d, const char *p, sl_rubric_result *r) {
  assert_int_equal(sl_rubric_grade(t, d, p, r), 0);
}

static void test_worked_example(void **state) {
  (void)state;
  sl_rubric_result r;
  grade_ok(EXAMPLE, 40.0, EXAMPLE_PROMPT, &r);
  assert_int_equal(r.words, 50);
  assert_int_equal(r.fillers, 3);      /* um, uh, you know */
  assert_int_equal(r.prompt_terms, 4); /* neighborhood, people, place, nearby */
  assert_int_equal(r.prompt_hits, 1);  /* "place" (prompt: "places") */
  NEAR(r.words_per_minute, 75.0);
  NEAR(r.lexical_variety, 113.0 / 130.0); /* 565 distinct over 26 windows */
  NEAR(r.filler_rate, 6.0);
  NEAR(r.relevance, 0.25);
  NEAR(r.crit[SL_RUBRIC_FLUENCY], 50.0);
  NEAR(r.crit[SL_RUBRIC_VARIETY], 1200.0 / 13.0);
  NEAR(r.crit[SL_RUBRIC_FILLERS], 60.0);
  NEAR(r.crit[SL_RUBRIC_LENGTH], 74.0);
  NEAR(r.crit[SL_RUBRIC_RELEVANCE], 50.0);
  NEAR(r.weighted, 46.3 + 240.0 / 13.0); /* 64.7615... */
  NEAR(r.score, 64.8);
  assert_string_equal(r.level, "IM2");
  /* fluency (50) and relevance (50) tie as weakest; fluency comes first */
  assert_non_null(strstr(r.feedback, "You spoke at 75 words per minute; aim for 110-150"));
  assert_non_null(strstr(r.feedback, "1 of the 4 key words"));
  assert_non_null(strstr(r.feedback, "(25%)"));
  assert_int_equal(count_sentences(r.feedback), 2);
}

/* rubric v2: the worked example's 50 words in a 40 s recording, with the
 * timing preflight measured. Fluent: 24 s of speaking inside the 40 s (16 s
 * of silence before and after, which v1 counts against the rate), 3 short
 * pauses; hesitant: 38 s of speaking, 16 pauses of 1 s on average. Only
 * fluency moves; a timing no recording gives is ignored (v1). */
/* with the transcript's segments, the pauses are said as between and inside
 * them; the score does not change */
static void test_pause_split(void **state) {
  (void)state;
  sl_rubric_result plain, split, capped;
  sl_rubric_timing t = {
      .speech_s = 20, .speaking_s = 24, .pause_mean_s = 0.5, .pause_longest_s = 0.8, .pauses = 3};
  assert_int_equal(sl_rubric_grade_timed(EXAMPLE, 40.0, EXAMPLE_PROMPT, &t, &plain), 0);
  assert_int_equal(plain.split, 0);
  t.segments = 4;
  t.segment_pauses = 2;
  assert_int_equal(sl_rubric_grade_timed(EXAMPLE, 40.0, EXAMPLE_PROMPT, &t, &split), 0);
  assert_int_equal(split.split, 1);
  assert_int_equal(split.pauses_between, 2);
  assert_int_equal(split.pauses_inside, 1);
  assert_non_null(strstr(split.evidence[SL_RUBRIC_FLUENCY],
                         "3 silent pauses of 0.25 s or more (2 between the transcript's 4 "
                         "segments, 1 inside; mean 0.50 s"));
  assert_memory_equal(split.crit, plain.crit, sizeof plain.crit);
  NEAR(split.score, plain.score);
  /* more gaps between segments than pauses preflight heard: all between */
  t.segment_pauses = 3;
  t.pauses = 2;
  t.pause_mean_s = 0.5;
  assert_int_equal(sl_rubric_grade_timed(EXAMPLE, 40.0, EXAMPLE_PROMPT, &t, &capped), 0);
  assert_int_equal(capped.pauses_between, 2);
  assert_int_equal(capped.pauses_inside, 0);
}

static void test_timed_fluency(void **state) {
  (void)state;
  sl_rubric_result v1, a, b, c;
  grade_ok(EXAMPLE, 40.0, EXAMPLE_PROMPT, &v1);
  const sl_rubric_timing fluent = {
      .speech_s = 20, .speaking_s = 24, .pause_mean_s = 0.5, .pause_longest_s = 0.8, .pauses = 3};
  assert_int_equal(sl_rubric_grade_timed(EXAMPLE, 40.0, EXAMPLE_PROMPT, &fluent, &a), 0);
  assert_int_equal(a.timed, 1);
  NEAR(a.speech_rate_wpm, 125.0);               /* 50 words / 24 s */
  NEAR(a.articulation_wpm, 50.0 / 22.5 * 60.0); /* 24 s less 3 pauses of 0.5 s */
  NEAR(a.phonation_ratio, 22.5 / 24.0);
  NEAR(a.words_per_run, 12.5);
  NEAR(a.crit[SL_RUBRIC_FLUENCY], 100.0); /* every part full */
  NEAR(v1.crit[SL_RUBRIC_FLUENCY], 50.0); /* 75 wpm over the whole 40 s */
  for (int k = 1; k < SL_RUBRIC_NCRIT; k++) NEAR(a.crit[k], v1.crit[k]);
  assert_true(a.score > v1.score);
  assert_string_equal(a.evidence[SL_RUBRIC_FLUENCY],
                      "125 words per minute over 24.0 s of speaking; 3 silent pauses of 0.25 s "
                      "or more (mean 0.50 s, longest 0.80 s: 6% of the time), 12.5 words between "
                      "pauses; 133 words per minute between them");

  const sl_rubric_timing hesitant = {
      .speech_s = 22, .speaking_s = 38, .pause_mean_s = 1.0, .pause_longest_s = 2.4, .pauses = 16};
  assert_int_equal(sl_rubric_grade_timed(EXAMPLE, 40.0, EXAMPLE_PROMPT, &hesitant, &b), 0);
  double rate = (50.0 / 38.0 * 60.0 - 40.0) / 70.0 * 100.0; /* 40 -> 0, 110 -> 100 */
  double run = (50.0 / 17.0 - 2.0) / 6.0 * 100.0;           /* 2 -> 0, 8 -> 100 */
  double pause = 100.0 - (1.0 - 0.6) / 1.4 * 100.0;         /* 0.6 -> 100, 2.0 -> 0 */
  NEAR(b.fluency_part[0], rate);
  NEAR(b.fluency_part[1], run);
  NEAR(b.fluency_part[2], pause);
  NEAR(b.crit[SL_RUBRIC_FLUENCY], 0.4 * rate + 0.3 * run + 0.3 * pause);
  assert_true(b.score < a.score);
  /* its weakest criterion, said by its pauses (they cost more than its rate) */
  assert_non_null(strstr(b.feedback, "You stopped 16 times for a quarter second or more (1.0 s on "
                                     "average), with 2.9 words between stops"));
  assert_non_null(strstr(b.evidence[SL_RUBRIC_FLUENCY],
                         "16 silent pauses of 0.25 s or more "
                         "(mean 1.00 s, longest 2.40 s: 42% of the time)"));
  assert_string_equal(b.evidence[SL_RUBRIC_LENGTH], "50 words");
  assert_string_equal(b.evidence[SL_RUBRIC_FILLERS],
                      "3 fillers (um, uh, you know ...) in 50 words: 6.0 per 100 words");
  assert_string_equal(b.evidence[SL_RUBRIC_RELEVANCE], "1 of the question's 4 key words used");

  /* deterministic: the same input, the same bytes */
  assert_int_equal(sl_rubric_grade_timed(EXAMPLE, 40.0, EXAMPLE_PROMPT, &hesitant, &c), 0);
  assert_memory_equal(&b, &c, sizeof b);

  /* no pause at all: that part is full, and said so */
  const sl_rubric_timing none = {.speech_s = 20, .speaking_s = 24};
  assert_int_equal(sl_rubric_grade_timed(EXAMPLE, 40.0, EXAMPLE_PROMPT, &none, &c), 0);
  NEAR(c.fluency_part[2], 100.0);
  assert_non_null(strstr(c.evidence[SL_RUBRIC_FLUENCY], "no silent pause"));

  /* timings no 40 s recording gives: v1, as if none were given */
  const sl_rubric_timing bad[] = {
      {.speech_s = 20, .speaking_s = 0.0 / 0.0},                           /* NaN */
      {.speech_s = 20, .speaking_s = 41},                                  /* longer than it */
      {.speech_s = 30, .speaking_s = 24},                                  /* more speech */
      {.speech_s = 20, .speaking_s = 24, .pause_mean_s = 2, .pauses = 13}, /* pauses > time */
      {.speech_s = -1, .speaking_s = 24},
      {.speech_s = 20, .speaking_s = 24, .pause_mean_s = 1, .pause_longest_s = 0.5, .pauses = 2},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(sl_rubric_grade_timed(EXAMPLE, 40.0, EXAMPLE_PROMPT, &bad[i], &c), 0);
    assert_int_equal(c.timed, 0);
    assert_memory_equal(&c, &v1, sizeof c);
  }
  assert_non_null(strstr(v1.evidence[SL_RUBRIC_FLUENCY], "over the whole 40.0 s recording"));
}

static void test_empty(void **state) {
  (void)state;
  const char *empties[] = {"", "   ", " ... ' -- ''\n\t"};
  for (size_t i = 0; i < sizeof empties / sizeof empties[0]; i++) {
    sl_rubric_result r;
    grade_ok(empties[i], 30.0, HOBBY_PROMPT, &r);
    assert_int_equal(r.words, 0);
    NEAR(r.score, 0.0);
    assert_string_equal(r.level, "NL");
    NEAR(r.words_per_minute, 0.0);
    NEAR(r.lexical_variety, 0.0);
    NEAR(r.filler_rate, 0.0);
    NEAR(r.relevance, 0.0); /* prompt has terms, none found */
    for (int c = 0; c < SL_RUBRIC_NCRIT; c++) NEAR(r.crit[c], 0.0);
    assert_non_null(strstr(r.feedback, "No speech was recognized"));
  }
  sl_rubric_result r;
  grade_ok("", 30.0, NULL, &r);
  NEAR(r.relevance, 1.0); /* no prompt: relevance is 1.0 by definition */
  NEAR(r.score, 0.0);
  assert_string_equal(r.level, "NL");
}

static void test_very_short(void **state) {
  (void)state;
  sl_rubric_result r;
  grade_ok("i like pizza", 2.0, "What food do you like?", &r);
  assert_int_equal(r.words, 3);
  NEAR(r.words_per_minute, 90.0);
  NEAR(r.lexical_variety, 1.0); /* < 25 words: plain type-token ratio */
  NEAR(r.crit[SL_RUBRIC_LENGTH], 12.0);
  NEAR(r.crit[SL_RUBRIC_FLUENCY], 500.0 / 7.0);
  assert_int_equal(r.prompt_terms, 1); /* "food" */
  NEAR(r.relevance, 0.0);
  /* weighted = 0.25*71.43 + 0.2*100 + 0.15*100 + 0.2*12 + 0.2*0 = 55.257...,
   * but three words cannot score above the length ceiling of 12. */
  NEAR(r.weighted, 0.25 * (500.0 / 7.0) + 20.0 + 15.0 + 2.4);
  NEAR(r.score, 12.0);
  assert_string_equal(r.level, "NL");
  assert_non_null(strstr(r.feedback, "only 3 words"));
}

static void test_fluent_beats_repetitive(void **state) {
  (void)state;
  sl_rubric_result good, bad;
  grade_ok(FLUENT, 60.0, HOBBY_PROMPT, &good);
  grade_ok(REPETITIVE, 60.0, HOBBY_PROMPT, &bad);

  assert_int_equal(good.words, 128);
  NEAR(good.words_per_minute, 128.0);
  assert_int_equal(good.fillers, 0);
  NEAR(good.lexical_variety, 2409.0 / 2600.0);
  assert_int_equal(good.prompt_hits, 3); /* favorite, hobby, enjoy */
  NEAR(good.score, 100.0);
  assert_string_equal(good.level, "AL");

  assert_int_equal(bad.words, 69);
  assert_int_equal(bad.fillers, 14); /* 7 um, 4 uh, 3 you know */
  NEAR(bad.filler_rate, 1400.0 / 69.0);
  NEAR(bad.lexical_variety, 122.0 / 225.0);
  NEAR(bad.crit[SL_RUBRIC_FILLERS], 0.0);
  assert_int_equal(bad.prompt_hits, 1); /* hobby */

  assert_true(good.score > bad.score + 40.0);
  for (int c = 0; c < SL_RUBRIC_NCRIT; c++) assert_true(good.crit[c] >= bad.crit[c]);
  assert_string_equal(bad.level, "NH");
}

static void test_filler_counting(void **state) {
  (void)state;
  sl_rubric_result r;
  /* counted: "i mean" (2nd), "you know" (2nd), um, UM, Umm, er, ah = 7
   * not counted: "do you know" (literal), "what i mean" (literal), so, like */
  grade_ok("do you know what i mean i mean you know um UM Umm er ah so like", 10.0, NULL, &r);
  assert_int_equal(r.words, 17);
  assert_int_equal(r.fillers, 7);
  NEAR(r.filler_rate, 700.0 / 17.0);
  NEAR(r.crit[SL_RUBRIC_FILLERS], 0.0);

  grade_ok("i think uh it is good", 3.0, NULL, &r);
  assert_int_equal(r.fillers, 1);
  NEAR(r.filler_rate, 100.0 / 6.0);

  /* "like" and "so" are never fillers; a pair cannot reuse a filler word */
  grade_ok("so i like it like a lot so so", 3.0, NULL, &r);
  assert_int_equal(r.fillers, 0);
  grade_ok("you know you know you know", 3.0, NULL, &r);
  assert_int_equal(r.fillers, 3);
  grade_ok("hmm mm eh uhh uhm erm", 3.0, NULL, &r);
  assert_int_equal(r.fillers, 6);
  NEAR(r.filler_rate, 100.0);

  /* 1 filler in 50 words = 2 per 100: still a full filler criterion */
  grade_ok("uh w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15 w16 w17 w18 w19 w20 w21 w22 "
           "w23 w24 w25 w26 w27 w28 w29 w30 w31 w32 w33 w34 w35 w36 w37 w38 w39 w40 w41 w42 w43 "
           "w44 w45 w46 w47 w48 w49",
           20.0, NULL, &r);
  assert_int_equal(r.words, 50);
  assert_int_equal(r.fillers, 1);
  NEAR(r.filler_rate, 2.0);
  NEAR(r.crit[SL_RUBRIC_FILLERS], 100.0);
}

static void test_relevance(void **state) {
  (void)state;
  sl_rubric_result r;
  /* prompt terms: favorite, hobby, enjoy */
  grade_ok("MY FAVORITE HOBBIES are chess and tennis", 3.0, HOBBY_PROMPT, &r);
  assert_int_equal(r.prompt_terms, 3);
  assert_int_equal(r.prompt_hits, 2); /* case folded; "hobbies" -> "hobby" */
  NEAR(r.relevance, 2.0 / 3.0);
  NEAR(r.crit[SL_RUBRIC_RELEVANCE], 100.0); /* >= 0.5 saturates */

  grade_ok("i play chess and tennis", 3.0, HOBBY_PROMPT, &r);
  assert_int_equal(r.prompt_hits, 0);
  NEAR(r.relevance, 0.0);
  NEAR(r.crit[SL_RUBRIC_RELEVANCE], 0.0);

  grade_ok("chess is my favorite", 3.0, HOBBY_PROMPT, &r);
  NEAR(r.relevance, 1.0 / 3.0);
  NEAR(r.crit[SL_RUBRIC_RELEVANCE], 200.0 / 3.0);

  /* no prompt, empty prompt, stopwords-only prompt: 1.0, not graded */
  const char *none[] = {NULL, "", "   ", "Tell me about it, please."};
  for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
    grade_ok("i play chess and tennis", 3.0, none[i], &r);
    assert_int_equal(r.prompt_terms, 0);
    NEAR(r.relevance, 1.0);
    NEAR(r.crit[SL_RUBRIC_RELEVANCE], 100.0);
    assert_null(strstr(r.feedback, "key words"));
  }

  /* every stopword, the instruction words too, is found (the list is looked
   * up by bsearch: an entry out of order would be missed and count here) */
  const char *all_stopwords =
      "a about above after again against all also am an and answer any are as at be "
      "because been before being below between both but by can can't could describe "
      "detail details did discuss do does doing don't down during each example explain "
      "few for from further give had has have having he her here hers herself him "
      "himself his how i i'm if in into is it it's its itself just kind let like many "
      "me more most much my myself no nor not now of off on once one only or other our "
      "ours ourselves out over own please question really same say share she should so "
      "some something such talk tell than that the their theirs them themselves then "
      "there these they thing things think this those through to too under until up "
      "very was way we well were what when where which while who whom why will with "
      "would you you're your yours yourself yourselves ";
  grade_ok("i play chess and tennis", 3.0, all_stopwords, &r);
  assert_int_equal(r.prompt_terms, 0);
  grade_ok("i play chess and tennis", 3.0, "Tell me about chess and DETAILS, please", &r);
  assert_int_equal(r.prompt_terms, 1); /* chess */

  /* repeated prompt words count once */
  grade_ok("travel", 1.0, "Travel, travel and TRAVELS", &r);
  assert_int_equal(r.prompt_terms, 1);
  NEAR(r.relevance, 1.0);
}

static void test_variety_and_tokens(void **state) {
  (void)state;
  sl_rubric_result r;
  /* 30 words alternating two types: every 25-word window has 2 types */
  grade_ok("a b a b a b a b a b a b a b a b a b a b a b a b a b a b a b", 12.0, NULL, &r);
  assert_int_equal(r.words, 30);
  NEAR(r.lexical_variety, 2.0 / 25.0);
  NEAR(r.crit[SL_RUBRIC_VARIETY], 0.0);

  /* 25 distinct words, then the first again: both windows have 25 types */
  grade_ok("w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15 w16 w17 w18 w19 w20 w21 w22 "
           "w23 w24 w25 w1",
           12.0, NULL, &r);
  assert_int_equal(r.words, 26);
  NEAR(r.lexical_variety, 1.0);

  /* non-ASCII bytes are word characters; only ASCII letters are folded;
   * inner apostrophes stay, outer ones and punctuation split/strip */
  grade_ok("Na\xc3\xafve NA\xc3\xafVE na\xc3\xafve don't 'quoted' well-known", 3.0, NULL, &r);
  assert_int_equal(r.words, 7); /* naive x3, don't, quoted, well, known */
  NEAR(r.lexical_variety, 5.0 / 7.0);

  /* words longer than SL_RUBRIC_WORD_MAX bytes are compared on a prefix */
  grade_ok("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaX aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaY",
           3.0, NULL, &r);
  assert_int_equal(r.words, 2);
  NEAR(r.lexical_variety, 0.5);
}

static void test_determinism(void **state) {
  (void)state;
  sl_rubric_result a, b;
  grade_ok(REPETITIVE, 47.3, HOBBY_PROMPT, &a);
  grade_ok(REPETITIVE, 47.3, HOBBY_PROMPT, &b);
  assert_memory_equal(&a.score, &b.score, sizeof a.score);
  assert_memory_equal(&a.words_per_minute, &b.words_per_minute, sizeof(double));
  assert_memory_equal(&a.lexical_variety, &b.lexical_variety, sizeof(double));
  assert_memory_equal(&a.filler_rate, &b.filler_rate, sizeof(double));
  assert_memory_equal(&a.relevance, &b.relevance, sizeof(double));
  assert_memory_equal(&a.weighted, &b.weighted, sizeof(double));
  assert_memory_equal(a.crit, b.crit, sizeof a.crit);
  assert_string_equal(a.level, b.level);
  assert_string_equal(a.feedback, b.feedback);
  assert_int_equal(a.words, b.words);
  assert_memory_equal(a.feedback, b.feedback, sizeof a.feedback); /* tail zeroed too */
  assert_int_equal(a.fillers, b.fillers);
  assert_int_equal(a.prompt_terms, b.prompt_terms);
  assert_int_equal(a.prompt_hits, b.prompt_hits);
}

static void test_invalid(void **state) {
  (void)state;
  sl_rubric_result r;
  const double bad[] = {0.0, -0.0, -1.0, NAN, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    r.score = 42.0;
    assert_int_equal(sl_rubric_grade("hello there", bad[i], NULL, &r), SL_EINVAL);
    NEAR(r.score, 0.0); /* zeroed on failure */
  }
  assert_int_equal(sl_rubric_grade(NULL, 10.0, NULL, &r), SL_EINVAL);
  assert_int_equal(sl_rubric_grade("hello", 10.0, NULL, NULL), SL_EINVAL);

  char *big = malloc(SL_RUBRIC_MAX_TRANSCRIPT + 2u);
  assert_non_null(big);
  memset(big, 'a', SL_RUBRIC_MAX_TRANSCRIPT + 1u);
  big[SL_RUBRIC_MAX_TRANSCRIPT + 1u] = '\0';
  assert_int_equal(sl_rubric_grade(big, 10.0, NULL, &r), SL_ETOOBIG);
  big[SL_RUBRIC_MAX_TRANSCRIPT] = '\0'; /* exactly at the limit: accepted */
  assert_int_equal(sl_rubric_grade(big, 10.0, NULL, &r), 0);
  assert_int_equal(r.words, 1);
  free(big);

  /* tiny durations do not overflow: rate is capped */
  grade_ok("a b c", 1e-300, NULL, &r);
  NEAR(r.words_per_minute, 10000.0);
  NEAR(r.crit[SL_RUBRIC_FLUENCY], 50.0);
}

static void test_levels(void **state) {
  (void)state;
  static const struct {
    double score;
    const char *level;
  } cases[] = {{0.0, "NL"},   {19.9, "NL"},  {20.0, "NM"},  {34.9, "NM"},  {35.0, "NH"},
               {44.9, "NH"},  {45.0, "IL"},  {54.9, "IL"},  {55.0, "IM1"}, {61.9, "IM1"},
               {62.0, "IM2"}, {68.9, "IM2"}, {69.0, "IM3"}, {75.9, "IM3"}, {76.0, "IH"},
               {85.9, "IH"},  {86.0, "AL"},  {100.0, "AL"}, {-1.0, "NL"},  {NAN, "NL"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    assert_string_equal(sl_rubric_level(cases[i].score), cases[i].level);

  assert_string_equal(sl_rubric_criterion_name(SL_RUBRIC_FLUENCY), "fluency");
  assert_string_equal(sl_rubric_criterion_name(SL_RUBRIC_RELEVANCE), "relevance");
  assert_string_equal(sl_rubric_criterion_name(5), "unknown");

  /* the level in a result always matches its rounded score */
  sl_rubric_result r;
  grade_ok(EXAMPLE, 40.0, EXAMPLE_PROMPT, &r);
  assert_string_equal(r.level, sl_rubric_level(r.score));
}

static void test_feedback(void **state) {
  (void)state;
  sl_rubric_result r;
  /* weakest: fillers (0), then variety (10.55...) */
  grade_ok(REPETITIVE, 60.0, HOBBY_PROMPT, &r);
  assert_true(r.crit[SL_RUBRIC_FILLERS] <= r.crit[SL_RUBRIC_VARIETY]);
  const char *first = strstr(r.feedback, "You used 14 fillers");
  assert_non_null(first);
  assert_ptr_equal(first, r.feedback); /* weakest criterion comes first */
  assert_non_null(strstr(r.feedback, "(20.3 per 100 words)"));
  assert_non_null(strstr(r.feedback, "lexical variety was 0.54"));
  unsigned n = count_sentences(r.feedback);
  assert_true(n >= 2 && n <= 4);

  /* slow speech: fluency is weakest and its number is quoted */
  grade_ok(FLUENT, 150.0, HOBBY_PROMPT, &r);
  NEAR(r.words_per_minute, 51.2);
  assert_ptr_equal(strstr(r.feedback, "You spoke at 51 words per minute; aim for 110-150"),
                   r.feedback);

  /* capped by length while length is not among the two weakest: a third
   * sentence names the word count */
  grade_ok("um uh i i i i", 3.0, NULL, &r);
  assert_true(r.weighted > r.crit[SL_RUBRIC_LENGTH]);
  assert_non_null(strstr(r.feedback, "only 6 words"));
  n = count_sentences(r.feedback);
  assert_true(n >= 2 && n <= 4);

  /* everything on target: still two concrete sentences */
  grade_ok(FLUENT, 60.0, HOBBY_PROMPT, &r);
  assert_non_null(strstr(r.feedback, "128 words per minute"));
  assert_int_equal(count_sentences(r.feedback), 2);
  assert_true(strlen(r.feedback) < sizeof r.feedback - 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_worked_example),
      cmocka_unit_test(test_empty),
      cmocka_unit_test(test_very_short),
      cmocka_unit_test(test_fluent_beats_repetitive),
      cmocka_unit_test(test_filler_counting),
      cmocka_unit_test(test_relevance),
      cmocka_unit_test(test_variety_and_tokens),
      cmocka_unit_test(test_determinism),
      cmocka_unit_test(test_invalid),
      cmocka_unit_test(test_levels),
      cmocka_unit_test(test_feedback),
      cmocka_unit_test(test_timed_fluency),
      cmocka_unit_test(test_pause_split),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
