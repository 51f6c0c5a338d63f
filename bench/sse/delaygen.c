/* SPDX-License-Identifier: Apache-2.0 */
/* bench/sse/delaygen.c — the delay from a status reaching Kafka to a client
 * seeing it: over a held event stream, and for a client polling at the
 * browser's policy (bench/sse/delay drives it).
 *
 * For each of N submissions (SUBS: lines "<sid> <results token>") it holds
 * one event stream (GET <BASE>/v1/submissions/<sid>/events) and runs one
 * polling client (GET <BASE>/v1/submissions/<sid> with If-None-Match, the
 * next request after the server's Retry-After, else web/app.js's policy:
 * 2 s for the first 30 s, 5 s to 60 s, 10 s to 120 s, then 30 s). Once every
 * stream has its first event and every poller its first view, it writes
 * RATE QuestionStatus messages per second for SECONDS seconds to the
 * "results" topic (status k: submission k % N, question k / N + 1, state
 * TRANSCRIBING, keyed "<sid>/<no>"), recording when Kafka acknowledged each
 * (delivery report). A status is seen by the stream when its "question"
 * event with state "transcribing" arrives, and by the poller when a 200
 * view first shows that question "transcribing". Delay = seen − ack, one
 * monotonic clock in this one process; a second thread only serves
 * delivery reports, so an ack is stamped as librdkafka hands it over (a
 * thread wake-up late on a busy machine: "sse_from_send" measures from
 * handing the status to librdkafka instead, an upper bound). It waits up to 40 s after the last
 * status for the rest.
 *
 * One thread runs libcurl multi for all HTTP and produces; another serves
 * delivery reports (ack_at: written there, read after it is joined). Bounded: stream buffers 64
 * KiB, views 1 MiB. Usage: sse_delaygen BASE SUBS RATE SECONDS (SLUICE_KAFKA_BROKERS) Output
 * (stdout): one JSON object, delays in ms.
 */
#define _POSIX_C_SOURCE 200809L
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sluice.pb-c.h"
#include "sl_bench.h"
#include "sluice/sl_kafka.h"

enum { MAXQ = 15, SSEBUF = 65536, VIEWMAX = 1 << 20, MAXSUBS = 5000 };

typedef struct {
  char sid[64], auth[256], url_ev[512], url_view[512];
  CURL *ev, *pl;
  struct curl_slist *ev_h, *pl_h;
  char sbuf[SSEBUF + 1];
  size_t slen;
  int ev_first, pl_first, pl_busy;
  char *vbuf;
  size_t vlen;
  char etag[128];
  int retry_after;
  double next_poll;
  double sse_at[MAXQ + 1], poll_at[MAXQ + 1];
  long polls, p304;
} sub;

static double ack_at[MAXSUBS * MAXQ];  /* by status k; 0: not acknowledged */
static double sent_at[MAXSUBS * MAXQ]; /* by status k: when it was handed to librdkafka */
static int nsubs;
static sub *S;

static double policy_s(double age_s) {
  return age_s < 30 ? 2 : age_s < 60 ? 5 : age_s < 120 ? 10 : 30;
}

static void seen(double *at, const char *js, size_t len, int is_view) {
  json_error_t e;
  json_t *j = json_loadb(js, len, 0, &e);
  json_t *qs = is_view ? json_object_get(j, "questions") : NULL;
  size_t n = is_view ? json_array_size(qs) : 1;
  double t = sl_bench_now_ms();
  for (size_t i = 0; j && i < n; i++) {
    json_t *q = is_view ? json_array_get(qs, i) : j;
    json_int_t no = json_integer_value(json_object_get(q, "no"));
    const char *st = json_string_value(json_object_get(q, "state"));
    if (no >= 1 && no <= MAXQ && st && !strcmp(st, "transcribing") && at[no] == 0) at[no] = t;
  }
  json_decref(j);
}

static size_t on_event(char *p, size_t sz, size_t nm, void *ud) {
  sub *s = ud;
  size_t n = sz * nm;
  if (s->slen + n > SSEBUF) return 0; /* an event larger than the buffer */
  memcpy(s->sbuf + s->slen, p, n);
  s->slen += n;
  s->sbuf[s->slen] = 0;
  char *end;
  while ((end = strstr(s->sbuf, "\n\n")) != NULL) {
    *end = 0;
    char *d = strstr(s->sbuf, "\ndata: ");
    if (strstr(s->sbuf, "event: question") && d) seen(s->sse_at, d + 7, strlen(d + 7), 0);
    s->ev_first = 1;
    size_t used = (size_t)(end + 2 - s->sbuf);
    memmove(s->sbuf, s->sbuf + used, s->slen - used);
    s->slen -= used;
    s->sbuf[s->slen] = 0;
  }
  return n;
}

static size_t on_view(char *p, size_t sz, size_t nm, void *ud) {
  sub *s = ud;
  size_t n = sz * nm;
  if (s->vlen + n > VIEWMAX) return 0;
  char *nb = realloc(s->vbuf, s->vlen + n + 1);
  if (!nb) return 0;
  s->vbuf = nb;
  memcpy(s->vbuf + s->vlen, p, n);
  s->vlen += n;
  return n;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
  sub *s = ud;
  size_t n = sz * nm;
  char line[128];
  size_t l = n < sizeof line - 1 ? n : sizeof line - 1;
  memcpy(line, p, l);
  line[l] = 0;
  line[strcspn(line, "\r\n")] = 0;
  if (!strncasecmp(line, "ETag: ", 6)) snprintf(s->etag, sizeof s->etag, "%s", line + 6);
  if (!strncasecmp(line, "Retry-After: ", 13)) s->retry_after = atoi(line + 13);
  return n;
}

static void poll_start(CURLM *m, sub *s) {
  curl_slist_free_all(s->pl_h);
  s->pl_h = curl_slist_append(NULL, s->auth);
  if (s->etag[0]) {
    char inm[192];
    snprintf(inm, sizeof inm, "If-None-Match: %s", s->etag);
    s->pl_h = curl_slist_append(s->pl_h, inm);
  }
  curl_easy_setopt(s->pl, CURLOPT_HTTPHEADER, s->pl_h);
  s->vlen = 0;
  s->retry_after = 0;
  s->pl_busy = 1;
  s->polls++;
  curl_multi_add_handle(m, s->pl);
}

static void poll_done(CURLM *m, sub *s, double t0) {
  long code = 0;
  curl_easy_getinfo(s->pl, CURLINFO_RESPONSE_CODE, &code);
  curl_multi_remove_handle(m, s->pl);
  s->pl_busy = 0;
  if (code == 200 && s->vbuf) {
    seen(s->poll_at, s->vbuf, s->vlen, 1);
    s->pl_first = 1;
  } else if (code == 304) {
    s->p304++;
  }
  double now = sl_bench_now_ms();
  double after = s->retry_after > 0 ? s->retry_after : policy_s((now - t0) / 1e3);
  s->next_poll = now + after * 1e3;
}

static void dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *op) {
  (void)rk, (void)op;
  size_t k = (size_t)(uintptr_t)m->_private;
  if (!m->err && k < sizeof ack_at / sizeof ack_at[0]) ack_at[k] = sl_bench_now_ms();
}

static atomic_int stop_reports;

/* Serves delivery reports as they come, so that an acknowledgement is
 * stamped when librdkafka hands it over, not when the HTTP loop gets to it. */
static void *reports(void *arg) {
  rd_kafka_t *rk = arg;
  while (!atomic_load(&stop_reports)) rd_kafka_poll(rk, 50);
  return NULL;
}

static void stats(const char *name, double *d, size_t n, int last) {
  sl_bench_sort(d, n);
  double p50 = sl_bench_median(d, n, -1), p99 = sl_bench_pct_lower(d, n, 99, -1),
         mx = n ? d[n - 1] : -1;
  size_t neg = 0;
  while (neg < n && d[neg] < 0) neg++;
  printf(
      "\"%s\":{\"seen\":%zu,\"p50_ms\":%.1f,\"p99_ms\":%.1f,\"max_ms\":%.1f,\"before_ack\":%zu}%s",
      name, n, p50, p99, mx, neg, last ? "" : ",");
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: sse_delaygen BASE SUBS RATE SECONDS\n");
    return 2;
  }
  double rate = atof(argv[3]), secs = atof(argv[4]);
  FILE *f = fopen(argv[2], "r");
  S = calloc(MAXSUBS, sizeof *S);
  if (!f || !S || rate <= 0 || secs <= 0) return 2;
  char sid[64], tok[160];
  while (nsubs < MAXSUBS && fscanf(f, "%63s %159s", sid, tok) == 2) {
    sub *s = &S[nsubs++];
    snprintf(s->sid, sizeof s->sid, "%s", sid);
    snprintf(s->auth, sizeof s->auth, "Authorization: Bearer %s", tok);
  }
  fclose(f);
  long total = (long)(rate * secs);
  if (nsubs < 1 || total > (long)nsubs * MAXQ) {
    fprintf(stderr, "sse_delaygen: RATE*SECONDS must be at most 15 * submissions\n");
    return 2;
  }
  char errstr[512];
  const char *brokers = getenv("SLUICE_KAFKA_BROKERS");
  rd_kafka_conf_t *kc = rd_kafka_conf_new();
  const char *const extra[] = {"linger.ms", "1", NULL}; /* the runtime's, sooner */
  if (rd_kafka_conf_set(kc, "bootstrap.servers", brokers ? brokers : "127.0.0.1:9092", errstr,
                        sizeof errstr) ||
      sl_kafka_conf_durable(kc, extra, errstr, sizeof errstr)) {
    fprintf(stderr, "sse_delaygen: %s\n", errstr);
    return 1;
  }
  rd_kafka_conf_set_dr_msg_cb(kc, dr);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, errstr, sizeof errstr);
  if (!rk) {
    fprintf(stderr, "sse_delaygen: %s\n", errstr);
    return 1;
  }
  pthread_t reporter;
  if (pthread_create(&reporter, NULL, reports, rk)) return 1;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CURLM *m = curl_multi_init();
  curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)nsubs * 3);
  double t0 = sl_bench_now_ms();
  for (int i = 0; i < nsubs; i++) {
    sub *s = &S[i];
    snprintf(s->url_ev, sizeof s->url_ev, "%s/v1/submissions/%s/events", argv[1], s->sid);
    snprintf(s->url_view, sizeof s->url_view, "%s/v1/submissions/%s", argv[1], s->sid);
    s->ev = curl_easy_init();
    s->pl = curl_easy_init();
    s->ev_h = curl_slist_append(curl_slist_append(NULL, s->auth), "Accept: text/event-stream");
    curl_easy_setopt(s->ev, CURLOPT_URL, s->url_ev);
    curl_easy_setopt(s->ev, CURLOPT_HTTPHEADER, s->ev_h);
    curl_easy_setopt(s->ev, CURLOPT_WRITEFUNCTION, on_event);
    curl_easy_setopt(s->ev, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->ev, CURLOPT_PRIVATE, s);
    curl_easy_setopt(s->pl, CURLOPT_URL, s->url_view);
    curl_easy_setopt(s->pl, CURLOPT_WRITEFUNCTION, on_view);
    curl_easy_setopt(s->pl, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->pl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(s->pl, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(s->pl, CURLOPT_PRIVATE, s);
    curl_multi_add_handle(m, s->ev);
    poll_start(m, s);
  }
  long produced = 0, closed = 0;
  double start = 0, end_at = 0, last_produce = 0;
  for (;;) {
    int running;
    curl_multi_perform(m, &running);
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left)) != NULL) {
      if (msg->msg != CURLMSG_DONE) continue;
      sub *s;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
      if (msg->easy_handle == s->pl) {
        poll_done(m, s, t0);
      } else {
        closed++;
        curl_multi_remove_handle(m, s->ev);
      }
    }
    double now = sl_bench_now_ms();
    for (int i = 0; i < nsubs; i++)
      if (!S[i].pl_busy && S[i].next_poll <= now) poll_start(m, &S[i]);
    if (start == 0) {
      int ready = 1;
      for (int i = 0; i < nsubs && ready; i++) ready = S[i].ev_first && S[i].pl_first;
      if (ready || now - t0 > 30000) start = now;
    }
    for (; start > 0 && produced < total && now >= start + (double)produced * 1e3 / rate;
         produced++) {
      sub *s = &S[produced % nsubs];
      Sluice__V1__QuestionStatus st = SLUICE__V1__QUESTION_STATUS__INIT;
      st.submission_id = s->sid;
      st.question_no = (uint32_t)(produced / nsubs + 1);
      st.state = SLUICE__V1__QUESTION_STATE__TRANSCRIBING;
      st.stage = "stt";
      struct timespec rt;
      clock_gettime(CLOCK_REALTIME, &rt);
      st.at_ms = (int64_t)rt.tv_sec * 1000 + rt.tv_nsec / 1000000;
      uint8_t buf[512];
      size_t len = sluice__v1__question_status__get_packed_size(&st);
      if (len > sizeof buf) return 1;
      sluice__v1__question_status__pack(&st, buf);
      char key[96];
      int kl = snprintf(key, sizeof key, "%s/%u", s->sid, st.question_no);
      rd_kafka_resp_err_t e;
      while ((e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC("results"),
                                    RD_KAFKA_V_KEY(key, (size_t)kl), RD_KAFKA_V_VALUE(buf, len),
                                    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                    RD_KAFKA_V_OPAQUE((void *)(uintptr_t)produced),
                                    RD_KAFKA_V_END)) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
        nanosleep(&(struct timespec){0, 10000000}, NULL);
      if (e) {
        fprintf(stderr, "sse_delaygen: produce: %s\n", rd_kafka_err2str(e));
        return 1;
      }
      sent_at[produced] = now;
      last_produce = now;
    }
    if (start > 0 && produced == total) {
      int all = 1;
      for (long k = 0; k < total && all; k++) {
        sub *s = &S[k % nsubs];
        int q = (int)(k / nsubs + 1);
        all = s->sse_at[q] > 0 && s->poll_at[q] > 0;
      }
      if (all || now - last_produce > 40000) {
        end_at = now;
        break;
      }
    }
    curl_multi_poll(m, NULL, 0, 2, NULL);
  }
  rd_kafka_flush(rk, 10000);
  atomic_store(&stop_reports, 1);
  pthread_join(reporter, NULL);
  double *ds = calloc((size_t)total + 1, sizeof *ds), *dp = calloc((size_t)total + 1, sizeof *dp);
  double *dss = calloc((size_t)total + 1, sizeof *dss);
  size_t ns = 0, np = 0, nss = 0, acked = 0;
  long polls = 0, p304 = 0, open = 0;
  for (long k = 0; ds && dp && dss && k < total; k++) {
    sub *s = &S[k % nsubs];
    int q = (int)(k / nsubs + 1);
    if (s->sse_at[q] > 0) dss[nss++] = s->sse_at[q] - sent_at[k];
    if (ack_at[k] == 0) continue;
    acked++;
    if (s->sse_at[q] > 0) ds[ns++] = s->sse_at[q] - ack_at[k];
    if (s->poll_at[q] > 0) dp[np++] = s->poll_at[q] - ack_at[k];
  }
  for (int i = 0; i < nsubs; i++) {
    polls += S[i].polls;
    p304 += S[i].p304;
    open += S[i].ev_first;
  }
  printf("{\"submissions\":%d,\"streams_open\":%ld,\"streams_closed\":%ld,\"statuses\":%ld,"
         "\"acked\":%zu,\"produce_s\":%.2f,\"events_per_s\":%.1f,\"polls\":%ld,\"polls_304\":%ld,",
         nsubs, open, closed, total, acked, (last_produce - start) / 1e3,
         (double)total * 1e3 / (last_produce - start + 1e3 / rate), polls, p304);
  stats("sse", ds, ns, 0);
  stats("sse_from_send", dss, nss, 0);
  stats("poll", dp, np, 1);
  printf(",\"wall_s\":%.1f}\n", (end_at - t0) / 1e3);
  return 0;
}
