/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_metrics_hist.c — histograms in the metrics registry: bucket
 * placement (le is inclusive), cumulative rendering in text format 0.0.4
 * (_bucket with le, _sum, _count, HELP/TYPE once per name), registration
 * rules, and concurrent observations losing nothing; fractional counters
 * (thousandths, rendered in units).
 * A separate executable from test_misc so the exact-output tests there keep
 * owning the tail of the rendering.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sl_metrics.h"

static void test_hist_registration(void **state) {
  (void)state;
  const double b[] = {0.1, 1, 10};
  sl_histogram *h1 = sl_metrics_histogram("sluice_treg_seconds", "k=\"1\"", "h", b, 3);
  sl_histogram *h2 = sl_metrics_histogram("sluice_treg_seconds", "k=\"1\"", "h", b, 3);
  sl_histogram *h3 = sl_metrics_histogram("sluice_treg_seconds", "k=\"2\"", "h", b, 3);
  assert_non_null(h1);
  assert_ptr_equal(h1, h2);
  assert_non_null(h3);
  assert_ptr_not_equal(h1, h3);
  /* invalid: prefix, bounds not ascending, none, too many, not finite */
  assert_null(sl_metrics_histogram("treg_seconds", NULL, "h", b, 3));
  const double desc[] = {1, 0.5};
  assert_null(sl_metrics_histogram("sluice_tbad_seconds", NULL, "h", desc, 2));
  const double dup[] = {1, 1};
  assert_null(sl_metrics_histogram("sluice_tbad_seconds", NULL, "h", dup, 2));
  assert_null(sl_metrics_histogram("sluice_tbad_seconds", NULL, "h", b, 0));
  assert_null(sl_metrics_histogram("sluice_tbad_seconds", NULL, "h", NULL, 3));
  double many[SL_HIST_BUCKETS_MAX + 1];
  for (size_t i = 0; i < SL_HIST_BUCKETS_MAX + 1; i++) many[i] = (double)i + 1;
  assert_null(
      sl_metrics_histogram("sluice_tbad_seconds", NULL, "h", many, SL_HIST_BUCKETS_MAX + 1));
  assert_non_null(
      sl_metrics_histogram("sluice_tmany_seconds", NULL, "h", many, SL_HIST_BUCKETS_MAX));
  const double inf[] = {1, INFINITY};
  assert_null(sl_metrics_histogram("sluice_tbad_seconds", NULL, "h", inf, 2));
  /* NULL-safe */
  sl_histogram_observe(NULL, 1);
  assert_int_equal(sl_histogram_count(NULL), 0);
}

static void test_hist_render(void **state) {
  (void)state;
  const double b[] = {0.5, 1, 2.5};
  sl_histogram *a =
      sl_metrics_histogram("sluice_trender_seconds", "stage=\"x\"", "Rendered latency", b, 3);
  sl_histogram *u = sl_metrics_histogram("sluice_tplain_seconds", NULL, "Plain", b, 3);
  sl_histogram *c =
      sl_metrics_histogram("sluice_trender_seconds", "stage=\"y\"", "Rendered latency", b, 3);
  assert_non_null(a);
  assert_non_null(u);
  assert_non_null(c);
  /* le is inclusive: 0.5 lands in le="0.5", 1 in le="1" */
  sl_histogram_observe(a, 0.25);
  sl_histogram_observe(a, 0.5);
  sl_histogram_observe(a, 1);
  sl_histogram_observe(a, 2);
  sl_histogram_observe(a, 100);
  sl_histogram_observe(a, NAN); /* ignored */
  sl_histogram_observe(u, 3);
  assert_int_equal(sl_histogram_count(a), 5);
  assert_true(fabs(sl_histogram_sum(a) - 103.75) < 1e-9);

  char *out = NULL;
  size_t len = 0;
  assert_int_equal(sl_metrics_render(&out, &len), 0);
  assert_int_equal(len, strlen(out));
  const char *want = "# HELP sluice_trender_seconds Rendered latency\n"
                     "# TYPE sluice_trender_seconds histogram\n"
                     "sluice_trender_seconds_bucket{stage=\"x\",le=\"0.5\"} 2\n"
                     "sluice_trender_seconds_bucket{stage=\"x\",le=\"1\"} 3\n"
                     "sluice_trender_seconds_bucket{stage=\"x\",le=\"2.5\"} 4\n"
                     "sluice_trender_seconds_bucket{stage=\"x\",le=\"+Inf\"} 5\n"
                     "sluice_trender_seconds_sum{stage=\"x\"} 103.75\n"
                     "sluice_trender_seconds_count{stage=\"x\"} 5\n"
                     "sluice_trender_seconds_bucket{stage=\"y\",le=\"0.5\"} 0\n"
                     "sluice_trender_seconds_bucket{stage=\"y\",le=\"1\"} 0\n"
                     "sluice_trender_seconds_bucket{stage=\"y\",le=\"2.5\"} 0\n"
                     "sluice_trender_seconds_bucket{stage=\"y\",le=\"+Inf\"} 0\n"
                     "sluice_trender_seconds_sum{stage=\"y\"} 0\n"
                     "sluice_trender_seconds_count{stage=\"y\"} 0\n"
                     "# HELP sluice_tplain_seconds Plain\n"
                     "# TYPE sluice_tplain_seconds histogram\n"
                     "sluice_tplain_seconds_bucket{le=\"0.5\"} 0\n"
                     "sluice_tplain_seconds_bucket{le=\"1\"} 0\n"
                     "sluice_tplain_seconds_bucket{le=\"2.5\"} 0\n"
                     "sluice_tplain_seconds_bucket{le=\"+Inf\"} 1\n"
                     "sluice_tplain_seconds_sum 3\n"
                     "sluice_tplain_seconds_count 1\n";
  const char *p = strstr(out, "# HELP sluice_trender_seconds");
  assert_non_null(p);
  assert_true(p == out || p[-1] == '\n');
  assert_memory_equal(p, want, strlen(want));
  free(out);
}

/* counters and histograms side by side: each name's block once */
static void test_hist_with_counters(void **state) {
  (void)state;
  sl_metric *m = sl_metrics_counter("sluice_tmix_total", NULL, "Mixed");
  const double b[] = {1};
  sl_histogram *h = sl_metrics_histogram("sluice_tmix_seconds", NULL, "Mixed h", b, 1);
  sl_metric_add(m, 2);
  sl_histogram_observe(h, 0.5);
  char *out = NULL;
  assert_int_equal(sl_metrics_render(&out, NULL), 0);
  assert_non_null(strstr(out, "# TYPE sluice_tmix_total counter\nsluice_tmix_total 2\n"));
  assert_non_null(strstr(out, "# TYPE sluice_tmix_seconds histogram\n"
                              "sluice_tmix_seconds_bucket{le=\"1\"} 1\n"));
  const char *t = strstr(out, "# TYPE sluice_tmix_seconds ");
  assert_null(strstr(t + 1, "# TYPE sluice_tmix_seconds "));
  free(out);
}

/* a fractional counter: exact to 0.001, rendered in units with three
 * decimals; negative, NaN and infinite adds ignored */
static void test_real_counter(void **state) {
  (void)state;
  sl_metric *m = sl_metrics_counter_real("sluice_treal_units_total", "stage=\"stt\"", "Real");
  sl_metric *z = sl_metrics_counter_real("sluice_treal_units_total", "stage=\"grade\"", "Real");
  assert_non_null(m);
  assert_non_null(z);
  sl_metric_add_real(m, 1.25);
  sl_metric_add_real(m, 2.5004); /* rounds to 2.500 */
  sl_metric_add_real(m, -3);
  sl_metric_add_real(m, NAN);
  sl_metric_add_real(m, INFINITY);
  for (int i = 0; i < 1000; i++) sl_metric_add_real(m, 0.001);
  assert_int_equal(sl_metric_value(m), 4750);
  char *out = NULL;
  assert_int_equal(sl_metrics_render(&out, NULL), 0);
  assert_non_null(strstr(out, "# TYPE sluice_treal_units_total counter\n"
                              "sluice_treal_units_total{stage=\"stt\"} 4.750\n"
                              "sluice_treal_units_total{stage=\"grade\"} 0.000\n"));
  free(out);
}

#define OBS_THREADS 4
#define OBS_EACH 20000
static sl_histogram *conc;
static void *observer(void *arg) {
  (void)arg;
  for (int i = 0; i < OBS_EACH; i++) sl_histogram_observe(conc, (i % 4) * 0.5); /* 0..1.5 */
  return NULL;
}

static void test_hist_concurrent(void **state) {
  (void)state;
  const double b[] = {0.5, 1};
  conc = sl_metrics_histogram("sluice_tconc_seconds", NULL, "c", b, 2);
  assert_non_null(conc);
  pthread_t t[OBS_THREADS];
  for (int i = 0; i < OBS_THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, observer, NULL), 0);
  for (int i = 0; i < OBS_THREADS; i++) pthread_join(t[i], NULL);
  assert_int_equal(sl_histogram_count(conc), OBS_THREADS * OBS_EACH);
  /* each thread adds 0+0.5+1+1.5 per 4 observations: exact in binary */
  assert_true(sl_histogram_sum(conc) == OBS_THREADS * (OBS_EACH / 4) * 3.0);
  char *out = NULL;
  assert_int_equal(sl_metrics_render(&out, NULL), 0);
  char want[256];
  snprintf(want, sizeof want,
           "sluice_tconc_seconds_bucket{le=\"0.5\"} %d\n"
           "sluice_tconc_seconds_bucket{le=\"1\"} %d\n"
           "sluice_tconc_seconds_bucket{le=\"+Inf\"} %d\n",
           OBS_THREADS * OBS_EACH / 2, OBS_THREADS * OBS_EACH * 3 / 4, OBS_THREADS * OBS_EACH);
  assert_non_null(strstr(out, want));
  free(out);
}

static void test_latency_bounds(void **state) {
  (void)state;
  assert_true(sl_metrics_latency_nbounds > 0 && sl_metrics_latency_nbounds <= SL_HIST_BUCKETS_MAX);
  assert_non_null(sl_metrics_histogram("sluice_tlat_seconds", NULL, "lat",
                                       sl_metrics_latency_bounds, sl_metrics_latency_nbounds));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hist_registration),  cmocka_unit_test(test_hist_render),
      cmocka_unit_test(test_hist_with_counters), cmocka_unit_test(test_hist_concurrent),
      cmocka_unit_test(test_latency_bounds),     cmocka_unit_test(test_real_counter),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
