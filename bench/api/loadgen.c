/* SPDX-License-Identifier: Apache-2.0 */
/* bench/api/loadgen.c — open-loop load generator for POST /v1/submissions.
 *
 * Sends one create (15 questions, the body made by tools/client's
 * sl_client_create_body) every 1/R s for D s, scheduled by the clock
 * (not after the previous answer), on plain libcurl multi with its own wait
 * loop. Each latency runs from the request's *scheduled* send time to its
 * complete response, so queueing in the server or in this client shows up.
 * After W + D s nothing new is sent; stragglers get at most 10 s more, then are
 * counted as "unfinished". Loopback targets only.
 *
 * Usage: loadgen URL RATE DURATION_S [WARMUP_S [RAW_FILE]]
 *   WARMUP_S (0): sent first on the same schedule, and not counted (fresh
 *   connections); RAW_FILE: every counted answer's latency (ms), one a line.
 * Output (stdout, one line): {"rate":R,"duration_s":D,"sent":n,"ok":n,
 *   "achieved_rate":..,"errors":{"503":n,"curl_28":n,...},"p50_ms":..,
 *   "p95_ms":..,"p99_ms":..,"max_ms":..,"late_p50_ms":..,"late_p99_ms":..}
 * ok = 2xx answers; achieved_rate = ok / D. Percentiles (nearest rank) are
 * over every request that got a complete HTTP answer, whatever its status;
 * unfinished and transport failures are only in "errors". late_* is how long
 * after its scheduled time each request was started (this program's own
 * timing, which counts in the latency); the waits are to the microsecond.
 */
#define _POSIX_C_SOURCE 200809L
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/select.h>
#include <time.h>

#include "sl_bench.h"
#include "sl_client.h"

#define STRAGGLER_S 10.0

struct req {
  double scheduled;
  CURL *easy;
};

static size_t discard(char *p, size_t s, size_t n, void *u) {
  (void)p;
  (void)u;
  return s * n;
}

/* Waits on curl's sockets for at most wait_s, to the microsecond: whole
 * milliseconds in curl_multi_poll, the last fraction in pselect on curl's
 * descriptors (curl_multi_poll takes milliseconds only, and rounding the
 * wait up made every send up to 1 ms late, counted in its latency). */
static void wait_for(CURLM *multi, double wait_s) {
  if (wait_s <= 0) {
    curl_multi_poll(multi, NULL, 0, 0, NULL);
    return;
  }
  if (wait_s >= 0.001) {
    curl_multi_poll(multi, NULL, 0, (int)(wait_s * 1000.0), NULL);
    return;
  }
  fd_set r, w, x;
  int maxfd = -1;
  FD_ZERO(&r);
  FD_ZERO(&w);
  FD_ZERO(&x);
  struct timespec ts = {0, (long)(wait_s * 1e9)};
  if (curl_multi_fdset(multi, &r, &w, &x, &maxfd) == CURLM_OK && maxfd < FD_SETSIZE)
    pselect(maxfd + 1, &r, &w, &x, &ts, NULL);
  else /* too many descriptors for select: the wait is under 1 ms anyway */
    nanosleep(&ts, NULL);
}

static int loopback_only(const char *url) {
  CURLU *u = curl_url();
  char *host = NULL;
  int ok = 0;
  if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
    ok = strcmp(host, "127.0.0.1") == 0 || strcasecmp(host, "localhost") == 0 ||
         strcmp(host, "[::1]") == 0;
  }
  curl_free(host);
  curl_url_cleanup(u);
  return ok;
}

int main(int argc, char **argv) {
  if (argc < 4 || argc > 6) {
    fprintf(stderr, "usage: %s URL RATE DURATION_S [WARMUP_S [RAW_FILE]]\n", argv[0]);
    return 2;
  }
  const char *url = argv[1], *raw = argc == 6 ? argv[5] : NULL;
  double rate, dur, warm;
  if (sl_bench_schedule("loadgen", argc, argv, 2, 0, &rate, &dur, &warm)) return 2;
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return 1;
  if (!loopback_only(url)) {
    fprintf(stderr, "loadgen: only loopback targets (127.0.0.1, localhost, [::1]): %s\n", url);
    return 2;
  }

  /* body: 15 questions, as sluicectl submit writes it (tools/client) */
  sl_client_question qs[15];
  for (int i = 0; i < 15; i++)
    qs[i] = (sl_client_question){i + 1, "audio/webm", 1500000, "Describe your weekend."};
  char *body = sl_client_create_body(qs, 15);
  if (!body) return 1;
  size_t off = strlen(body);

  struct curl_slist *hdrs = NULL;
  hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
  hdrs = curl_slist_append(hdrs, "Expect:");
  /* presign wants an API key (SLUICE_API_KEY, made by the run script) */
  static char auth[8300] = ""; /* a JWT can be long */
  const char *key = getenv("SLUICE_API_KEY");
  if (key && *key) {
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
    hdrs = curl_slist_append(hdrs, auth);
  }

  long n_warm = (long)floor(rate * warm + 0.5), n_meas = (long)floor(rate * dur + 0.5);
  if (n_meas < 1) n_meas = 1;
  long total = n_warm + n_meas;
  double *lat = malloc(sizeof(double) * (size_t)total);
  double *late = malloc(sizeof(double) * (size_t)total);
  struct req *reqs = calloc((size_t)total, sizeof *reqs);
  if (!lat || !late || !reqs) return 1;
  long n_lat = 0, sent = 0, ok = 0, done = 0;

  CURLM *multi = curl_multi_init();
  curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, 2048L);
  curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);

  double t0 = sl_bench_now_s() + 0.01; /* first send slightly in the future */
  double hard_stop = t0 + warm + dur + STRAGGLER_S;
  int running = 0;

  for (;;) {
    double t = sl_bench_now_s();
    /* start every request whose scheduled time has come */
    while (sent < total) {
      double sched = t0 + (double)sent / rate;
      if (sched > t) break;
      CURL *e = curl_easy_init();
      if (!e) return 1;
      reqs[sent].scheduled = sched;
      late[sent] = (t - sched) * 1000.0;
      reqs[sent].easy = e;
      curl_easy_setopt(e, CURLOPT_URL, url);
      curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)off);
      curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
      curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
      curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
      curl_easy_setopt(e, CURLOPT_PRIVATE, (void *)&reqs[sent]);
      curl_multi_add_handle(multi, e);
      sent++;
    }
    curl_multi_perform(multi, &running);

    CURLMsg *m;
    int q;
    while ((m = curl_multi_info_read(multi, &q))) {
      if (m->msg != CURLMSG_DONE) continue;
      double tdone = sl_bench_now_s();
      struct req *r = NULL;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
      long code = 0;
      if (r - reqs < n_warm) { /* warm-up: not counted */
      } else if (m->data.result == CURLE_OK) {
        curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &code);
        lat[n_lat++] = (tdone - r->scheduled) * 1000.0;
        if (code >= 200 && code < 300)
          ok++;
        else {
          char k[32];
          snprintf(k, sizeof k, "%ld", code);
          sl_bench_count_err(k);
        }
      } else {
        char k[32];
        snprintf(k, sizeof k, "curl_%d", (int)m->data.result);
        sl_bench_count_err(k);
      }
      curl_multi_remove_handle(multi, m->easy_handle);
      curl_easy_cleanup(m->easy_handle);
      r->easy = NULL;
      done++;
    }

    t = sl_bench_now_s();
    if (sent >= total && done >= sent) break;
    if (t >= hard_stop) break;
    double wait_s = sent < total ? t0 + (double)sent / rate - t : hard_stop - t;
    if (wait_s > 0.1) wait_s = 0.1;
    wait_for(multi, wait_s);
  }

  /* stragglers still open at the hard stop */
  for (long i = 0; i < sent; i++) {
    if (!reqs[i].easy) continue;
    if (i >= n_warm) sl_bench_count_err("unfinished");
    curl_multi_remove_handle(multi, reqs[i].easy);
    curl_easy_cleanup(reqs[i].easy);
  }

  if (sl_bench_write_raw(raw, lat, (size_t)n_lat) != 0) {
    fprintf(stderr, "loadgen: cannot write %s\n", raw);
    return 1;
  }
  long n_sent = sent > n_warm ? sent - n_warm : 0;
  printf("{\"rate\":%g,\"duration_s\":%g,\"sent\":%ld,\"ok\":%ld,\"achieved_rate\":%.2f", rate, dur,
         n_sent, ok, (double)ok / dur);
  sl_bench_print_latencies(lat, (size_t)n_lat, late + n_warm, (size_t)n_sent);
  printf("}\n");

  curl_multi_cleanup(multi);
  curl_slist_free_all(hdrs);
  free(body);
  free(lat);
  free(late);
  free(reqs);
  curl_global_cleanup();
  return 0;
}
