/* SPDX-License-Identifier: Apache-2.0 */
/* bench/fakeprovider/conc.c — how many slow requests can `sluice-fakeprovider`
 * hold at once?
 *
 * Opens N connections at once (libcurl multi, one connection per request,
 * no pipelining), each sending one POST /v1/chat/completions, and waits for
 * every answer. Run the provider with a latency longer than the time it
 * takes to open N connections (e.g. chat_latency_ms=10000, jitter 0), so
 * all N requests are waiting inside the provider at the same moment; its
 * GET /stats peak_in_flight then shows how many it held.
 *
 * Usage: fakeprovider_conc BASE_URL N
 * Output (stdout, one line): {"n":N,"ok":n,"errors":n,"first_error":"...",
 *   "wall_s":..,"peak_in_flight":n}
 * Raise the descriptor limit first (ulimit -n) on both sides.
 */
#define _POSIX_C_SOURCE 200809L
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sl_bench.h"

typedef struct {
  char buf[4096];
  size_t len;
} sink;

static size_t on_data(char *p, size_t sz, size_t n, void *ud) {
  sink *s = ud;
  size_t k = sz * n, room = sizeof s->buf - 1 - s->len;
  memcpy(s->buf + s->len, p, k < room ? k : room);
  s->len += k < room ? k : room;
  s->buf[s->len] = '\0';
  return k;
}

int main(int argc, char **argv) {
  if (argc != 3 || atoi(argv[2]) <= 0) {
    fprintf(stderr, "usage: fakeprovider_conc BASE_URL N\n");
    return 2;
  }
  const char *base = argv[1];
  int n = atoi(argv[2]);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CURLM *m = curl_multi_init();
  curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)n);
  char url[512];
  snprintf(url, sizeof url, "%s/v1/chat/completions", base);
  static const char body[] =
      "{\"model\":\"fake\",\"messages\":[{\"role\":\"user\",\"content\":\"I like hiking.\"}]}";
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  sink *sinks = calloc((size_t)n, sizeof *sinks);
  if (!sinks) return 1;
  double t0 = sl_bench_now_s();
  for (int i = 0; i < n; i++) {
    CURL *e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &sinks[i]);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 120000L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 60000L);
    curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
    curl_easy_setopt(e, CURLOPT_PRIVATE, &sinks[i]);
    curl_multi_add_handle(m, e);
  }
  int running = 1, ok = 0, errors = 0;
  char first_error[256] = "";
  while (running) {
    curl_multi_perform(m, &running);
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left))) {
      if (msg->msg != CURLMSG_DONE) continue;
      long st = 0;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &st);
      if (msg->data.result == CURLE_OK && st == 200) {
        ok++;
      } else {
        if (!errors++)
          snprintf(first_error, sizeof first_error, "HTTP %ld / %s", st,
                   curl_easy_strerror(msg->data.result));
      }
      curl_multi_remove_handle(m, msg->easy_handle);
      curl_easy_cleanup(msg->easy_handle);
    }
    if (running) curl_multi_poll(m, NULL, 0, 1000, NULL);
  }
  double wall = sl_bench_now_s() - t0;
  /* the provider's own count of requests held at once */
  long peak = -1;
  snprintf(url, sizeof url, "%s/stats", base);
  CURL *e = curl_easy_init();
  sink s = {0};
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &s);
  if (curl_easy_perform(e) == CURLE_OK) {
    const char *p = strstr(s.buf, "\"peak_in_flight\":");
    if (p) peak = strtol(p + 17, NULL, 10);
  }
  curl_easy_cleanup(e);
  printf("{\"n\":%d,\"ok\":%d,\"errors\":%d,\"first_error\":\"%s\",\"wall_s\":%.2f,"
         "\"peak_in_flight\":%ld}\n",
         n, ok, errors, first_error, wall, peak);
  curl_slist_free_all(h);
  curl_multi_cleanup(m);
  free(sinks);
  curl_global_cleanup();
  return ok == n ? 0 : 1;
}
