/* SPDX-License-Identifier: Apache-2.0 */
/* bench/poll/pollgen.c — closed-loop load generator for polling GETs.
 *
 * CONNS keep-alive connections each send GET URL, wait for the complete
 * answer and send the next one at once, for DURATION_S seconds (libcurl
 * multi, one easy handle per connection, reused so the connection stays
 * open). This measures the most requests per second the server answers,
 * and the latency of each request under that load (send to complete
 * answer). Extra request headers ("Name: value") follow the arguments,
 * e.g. the bearer token and If-None-Match. Loopback targets only.
 *
 * Usage: pollgen URL CONNS DURATION_S [HEADER...]
 * Output (stdout, one line): {"conns":C,"duration_s":D,"requests":n,"rps":..,
 *   "status":{"304":n,...},"errors":n,"p50_us":..,"p99_us":..,"max_us":..}
 * Percentiles are nearest rank over every answered request.
 */
#define _POSIX_C_SOURCE 200809L
#include <curl/curl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sl_bench.h"

#define MAX_CONNS 256
#define MAX_STATUS 8

static size_t discard(char *p, size_t s, size_t n, void *u) {
  (void)p;
  (void)u;
  return s * n;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: pollgen URL CONNS DURATION_S [HEADER...]\n");
    return 2;
  }
  const char *url = argv[1];
  int conns = atoi(argv[2]);
  double dur = atof(argv[3]);
  if (conns < 1 || conns > MAX_CONNS || dur <= 0) {
    fprintf(stderr, "pollgen: CONNS 1..%d, DURATION_S > 0\n", MAX_CONNS);
    return 2;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  struct curl_slist *hdrs = NULL;
  for (int i = 4; i < argc; i++) hdrs = curl_slist_append(hdrs, argv[i]);
  CURLM *multi = curl_multi_init();
  curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)conns);
  CURL *easy[MAX_CONNS];
  double started[MAX_CONNS];
  size_t cap = 1 << 20, n = 0;
  double *lat = malloc(cap * sizeof *lat);
  long codes[MAX_STATUS] = {0}, counts[MAX_STATUS] = {0}, errors = 0;
  int ncodes = 0;
  if (!multi || !lat) return 1;
  double t0 = sl_bench_now_s(), end = t0 + dur;
  for (int i = 0; i < conns; i++) {
    easy[i] = curl_easy_init();
    curl_easy_setopt(easy[i], CURLOPT_URL, url);
    curl_easy_setopt(easy[i], CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(easy[i], CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(easy[i], CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy[i], CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(easy[i], CURLOPT_PRIVATE, (char *)(intptr_t)i);
    started[i] = sl_bench_now_s();
    curl_multi_add_handle(multi, easy[i]);
  }
  int running = conns;
  while (running > 0) {
    curl_multi_perform(multi, &running);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(multi, &left)) != NULL) {
      if (m->msg != CURLMSG_DONE) continue;
      char *priv;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
      int i = (int)(intptr_t)priv;
      double t = sl_bench_now_s();
      if (m->data.result == CURLE_OK) {
        long code = 0;
        curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &code);
        int k = 0;
        while (k < ncodes && codes[k] != code) k++;
        if (k == ncodes && ncodes < MAX_STATUS) codes[ncodes++] = code;
        if (k < ncodes) counts[k]++;
        if (n == cap) {
          cap *= 2;
          double *nl = realloc(lat, cap * sizeof *lat);
          if (!nl) return 1;
          lat = nl;
        }
        lat[n++] = (t - started[i]) * 1e6;
      } else {
        errors++;
      }
      curl_multi_remove_handle(multi, m->easy_handle);
      if (t < end) { /* the next request on the same (kept-alive) connection */
        started[i] = t;
        curl_multi_add_handle(multi, m->easy_handle);
        running++;
      }
    }
    if (running > 0) curl_multi_poll(multi, NULL, 0, 100, NULL);
  }
  double took = sl_bench_now_s() - t0;
  sl_bench_sort(lat, n);
  double p50 = sl_bench_pct_lower(lat, n, 50, 0);
  double p99 = sl_bench_pct_lower(lat, n, 99, 0);
  double mx = n ? lat[n - 1] : 0;
  printf("{\"conns\":%d,\"duration_s\":%.3f,\"requests\":%zu,\"rps\":%.1f,\"status\":{", conns,
         took, n, (double)n / took);
  for (int k = 0; k < ncodes; k++) printf("%s\"%ld\":%ld", k ? "," : "", codes[k], counts[k]);
  printf("},\"errors\":%ld,\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f}\n", errors, p50, p99,
         mx);
  for (int i = 0; i < conns; i++) curl_easy_cleanup(easy[i]);
  curl_multi_cleanup(multi);
  curl_slist_free_all(hdrs);
  free(lat);
  curl_global_cleanup();
  return 0;
}
