/* SPDX-License-Identifier: Apache-2.0 */
/* bench/pipeline/loadgen.c — end-to-end load for the whole pipeline.
 *
 * Open loop: every 1/R s (by the clock, not after the previous answer) a
 * client creates a submission of n questions (n drawn from a truncated
 * geometric distribution with the given mean, 1..max; --questions N: always
 * N), then PUTs each answer
 * to storage through its presigned URL, as a browser would. With --then
 * RATE:SECONDS a second phase at another rate follows the first (a load
 * that rises and falls, for autoscaling). Creates and
 * uploads run concurrently on one libcurl multi handle.
 *
 * After the load phase it watches the results view every second (one
 * HGETALL per unfinished submission, pipelined, on the Redis materialize
 * writes — exactly what the results API serves) until every uploaded
 * question is done or failed, or the drain timeout passes. An uploaded
 * question that never reaches a final state is LOST.
 *
 * DUPLICATED counts questions whose view changed after it was first seen
 * final (a second, different result reached the user); a final scan after
 * the drain compares every view with the one first seen.
 *
 * Output: a summary JSON object on stdout; with --out, one JSON line per
 * question (submission, no, n, accept_ms, state, accept_to_done_ms,
 * upload_to_done_ms, and put_at_s, uploaded_at_s and final_at_s relative
 * to the start, which start_unix_ms puts on the wall clock) for plots and
 * for bench/pipeline/hops. Progress every 10 s on stderr.
 *
 * Two latencies per final question, both to the time its final status was
 * made (the view's updated_at_ms): accept_to_done from presign's accept, as
 * the user waits, and upload_to_done from the moment this client started
 * the answer's PUT: the storage and the pipeline, without the client's
 * delay between the accept and its upload (on a machine this load
 * saturates, the load generator waiting for a core). From the PUT's start,
 * not its answer: a starved load generator reads the answer seconds after
 * the storage sent the object's event, which would flatter the pipeline.
 */
#define _POSIX_C_SOURCE 200809L
#include <curl/curl.h>
#include <hiredis/hiredis.h>

#include "sl_bench.h"
#include "sl_client.h"
#include "sluice/sl_conf.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_stage.h"
#include "lib/view.h"

/* Presigned URLs on a private CA: SLUICE_S3_CA_FILE verifies https. */
static void trust(CURL *e) {
  const char *ca = getenv("SLUICE_S3_CA_FILE");
  if (ca && *ca) curl_easy_setopt(e, CURLOPT_CAINFO, ca);
}
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define MAXQ 30

typedef struct {
  int no;
  int uploaded; /* 1 ok, -1 failed */
  int final;    /* 1 done, 2 failed */
  long accept_to_done_ms;
  long long done_at_ms; /* the view's updated_at_ms of its final status (wall clock) */
  double put_at;        /* seconds since start when its PUT was started */
  double uploaded_at;   /* seconds since start when its PUT was answered */
  double final_at;      /* seconds since start when first seen final */
  char *final_view;     /* the view when first seen final */
} question;

typedef struct {
  double sched;
  int n;
  int status; /* HTTP status of the create, 0 = none yet */
  double accept_ms;
  char sid[64];
  question q[MAXQ];
  int pending_puts;
  int finished; /* every uploaded question final */
} sub;

typedef struct {
  sub *s;
  int qi; /* -1 = the create */
  char *buf;
  size_t len;
  struct curl_slist *hdrs;
  char *body;
} xfer;

static double t0;
static long long t0_unix_ms; /* the wall clock at t0: Kafka's timestamps are on it */
static double now_s(void) { return sl_bench_now_s() - t0; }

static size_t collect(char *p, size_t s, size_t n, void *u) {
  xfer *x = u;
  size_t k = s * n;
  if (x->len + k > (1u << 20)) return 0;
  char *g = realloc(x->buf, x->len + k + 1);
  if (!g) return 0;
  x->buf = g;
  memcpy(x->buf + x->len, p, k);
  x->len += k;
  x->buf[x->len] = '\0';
  return k;
}

/* nearest rank, 0 when empty */
static double pct(const double *v, size_t n, double p) { return sl_bench_pct(v, n, p, 0); }

static const char *audio;
static size_t audio_len;
static const char *audio_type; /* declared at create, from --audio's extension */
static CURLM *multi;
static long running_xfers;
/* "Authorization: Bearer <SLUICE_API_KEY>" (presign wants an API key) */
static char auth_header[8300]; /* a JWT can be long (auth.c accepts up to 8 KiB) */

static void add_put(sub *s, int qi, const sl_client_upload *u) {
  xfer *x = calloc(1, sizeof *x);
  x->s = s;
  x->qi = qi;
  CURL *e = curl_easy_init();
  trust(e);
  for (size_t h = 0; u->headers[h]; h++) x->hdrs = curl_slist_append(x->hdrs, u->headers[h]);
  x->hdrs = curl_slist_append(x->hdrs, "Expect:");
  curl_easy_setopt(e, CURLOPT_URL, u->url);
  curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, audio);
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)audio_len);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->hdrs);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
  curl_easy_setopt(e, CURLOPT_PRIVATE, x);
  curl_easy_setopt(e, CURLOPT_TIMEOUT, 60L);
  curl_multi_add_handle(multi, e);
  s->q[qi].put_at = now_s();
  running_xfers++;
  s->pending_puts++;
}

static void start_create(sub *s, const char *url) {
  xfer *x = calloc(1, sizeof *x);
  x->s = s;
  x->qi = -1;
  sl_client_question qs[MAXQ];
  for (int i = 0; i < s->n; i++)
    qs[i] =
        (sl_client_question){i + 1, audio_type, (int64_t)audio_len, "Tell me about your weekend."};
  x->body = sl_client_create_body(qs, (size_t)s->n);
  x->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
  x->hdrs = curl_slist_append(x->hdrs, "Expect:");
  if (auth_header[0]) x->hdrs = curl_slist_append(x->hdrs, auth_header);
  CURL *e = curl_easy_init();
  trust(e);
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->hdrs);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
  curl_easy_setopt(e, CURLOPT_PRIVATE, x);
  curl_easy_setopt(e, CURLOPT_TIMEOUT, 30L);
  curl_multi_add_handle(multi, e);
  running_xfers++;
}

static void finish_xfer(CURL *e, CURLcode cc) {
  xfer *x = NULL;
  curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&x);
  long status = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
  sub *s = x->s;
  if (x->qi < 0) {
    s->accept_ms = (now_s() - s->sched) * 1000.0;
    s->status = cc == CURLE_OK ? (int)status : -1;
    sl_client_created c;
    char err[256];
    if (s->status == 201 &&
        sl_client_created_parse(x->buf, x->len, (size_t)s->n, &c, err, sizeof err) == 0) {
      snprintf(s->sid, sizeof s->sid, "%s", c.submission_id);
      for (int i = 0; i < s->n; i++) {
        s->q[i].no = c.uploads[i].no;
        add_put(s, i, &c.uploads[i]);
      }
      sl_client_created_free(&c);
    } else if (s->status == 201) {
      s->status = -2; /* unparseable reply */
    }
  } else {
    s->q[x->qi].uploaded = cc == CURLE_OK && status == 200 ? 1 : -1;
    s->q[x->qi].uploaded_at = now_s();
    s->pending_puts--;
  }
  curl_multi_remove_handle(multi, e);
  curl_easy_cleanup(e);
  curl_slist_free_all(x->hdrs);
  free(x->body);
  free(x->buf);
  free(x);
  running_xfers--;
}

static void pump(double wait_s) {
  int still = 0, nfds = 0;
  curl_multi_perform(multi, &still);
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(multi, &left)))
    if (m->msg == CURLMSG_DONE) finish_xfer(m->easy_handle, m->data.result);
  int ms = (int)(wait_s * 1000);
  if (ms > 0) curl_multi_poll(multi, NULL, 0, ms, &nfds);
}

/* Reads the results view of every unfinished submission. Returns how many
 * uploaded questions are still not final. */
static char redis_url[600];

/* (Re)connects lazily: sl_redis reconnects on the next command after an
 * error (Redis may be restarted under us in chaos runs) and sends AUTH /
 * speaks TLS as the SLUICE_REDIS_* settings say. */
static redisReply *hgetall(sl_redis *rc, const char *sid) {
  char key[160], err[512];
  sl__view_sub_key(key, sizeof key, sid);
  const char *argv[] = {"HGETALL", key};
  size_t lens[] = {7, strlen(key)};
  redisReply *r = sl_redis_argv(rc, 2, argv, lens, err, sizeof err);
  if (!r) fprintf(stderr, "[loadgen] %s (will reconnect)\n", err);
  return r;
}

/* Reads the results view of every unfinished submission. Returns how many
 * uploaded questions are still not final, or -1 when Redis is unreachable. */
static long scan_views(sl_redis *rc, sub *subs, long nsubs) {
  long outstanding = 0, queued = 0;
  for (long i = 0; i < nsubs; i++) {
    sub *s = &subs[i];
    if (s->status != 201 || s->finished || s->pending_puts) continue;
    redisReply *r = hgetall(rc, s->sid);
    if (!r) return -1;
    int open = 0;
    for (int k = 0; k < s->n; k++) {
      question *q = &s->q[k];
      if (q->uploaded != 1 || q->final) continue;
      char field[16];
      snprintf(field, sizeof field, "q%d", q->no);
      for (size_t e = 0; r->type == REDIS_REPLY_ARRAY && e + 1 < r->elements; e += 2) {
        if (strcmp(r->element[e]->str, field) != 0) continue;
        json_t *j = json_loads(r->element[e + 1]->str, 0, NULL);
        const char *st = json_string_value(json_object_get(j, "state"));
        if (st && (!strcmp(st, "done") || !strcmp(st, "failed"))) {
          q->final = !strcmp(st, "done") ? 1 : 2;
          q->accept_to_done_ms = (long)json_integer_value(json_object_get(j, "accept_to_done_ms"));
          q->done_at_ms = (long long)json_integer_value(json_object_get(j, "updated_at_ms"));
          q->final_at = now_s();
          q->final_view = strdup(r->element[e + 1]->str);
        }
        json_decref(j);
      }
      if (!q->final) open++;
    }
    freeReplyObject(r);
    if (!open) s->finished = 1;
    outstanding += open;
  }
  (void)queued;
  return outstanding;
}

static int draw_n(double mean, int max) {
  /* truncated geometric on 1..max with the given mean (before truncation) */
  double p = 1.0 / mean;
  int n = 1;
  while (n < max && (double)rand() / RAND_MAX > p) n++;
  return n;
}

/* The stages' transport-security settings (SLUICE_REDIS_PASSWORD,
 * SLUICE_REDIS_TLS_*, ...) from the environment. */
static int secure_from_env(void) {
  char err[1024];
  int rc = sl_common_secure_from_env(err, sizeof err);
  if (rc) fprintf(stderr, "loadgen: %s\n", err);
  return rc;
}

static double rate2, duration2; /* --then RATE:SECONDS, a second phase */

static int opt_then(const char *v) {
  if (sscanf(v, "%lf:%lf", &rate2, &duration2) == 2 && rate2 > 0 && duration2 > 0) return 0;
  fprintf(stderr, "loadgen: --then wants RATE:SECONDS, not %s\n", v);
  return -1;
}

/* When submission k is due, in seconds from the start. */
static double sched_of(long k, long n1, double rate, double duration, double r2) {
  return k < n1 ? k / rate : duration + (k - n1) / r2;
}

int main(int argc, char **argv) {
  const char *api_key = getenv("SLUICE_API_KEY");
  if (api_key && *api_key)
    snprintf(auth_header, sizeof auth_header, "Authorization: Bearer %s", api_key);
  const char *url = NULL, *audio_path = NULL, *redis_addr = "127.0.0.1:6379", *out = NULL;
  double rate = 6.7, duration = 60, mean = 3.4, drain_timeout = 600;
  int maxq = 15, fixedq = 0;
  int seed_i = 1, arg = 1;
  const sl_bench_opt opts[] = {
      {"--presign", SL_BENCH_STR, &url, NULL},
      {"--audio", SL_BENCH_STR, &audio_path, NULL},
      {"--redis", SL_BENCH_STR, &redis_addr, NULL},
      {"--out", SL_BENCH_STR, &out, NULL},
      {"--rate", SL_BENCH_DBL, &rate, NULL},
      {"--duration", SL_BENCH_DBL, &duration, NULL},
      {"--mean-questions", SL_BENCH_DBL, &mean, NULL},
      {"--max-questions", SL_BENCH_INT, &maxq, NULL},
      {"--questions", SL_BENCH_INT, &fixedq, NULL},
      {"--drain-timeout", SL_BENCH_DBL, &drain_timeout, NULL},
      {"--seed", SL_BENCH_INT, &seed_i, NULL},
      {"--then", SL_BENCH_FN, NULL, opt_then},
  };
  if (sl_bench_opts("loadgen", argc, argv, &arg, opts, sizeof opts / sizeof opts[0]) != 0) return 2;
  unsigned seed = (unsigned)seed_i;
  if (arg != argc || !url || !audio_path || rate <= 0 || duration <= 0 || mean < 1 || maxq < 1 ||
      maxq > MAXQ || fixedq < 0 || fixedq > MAXQ) {
    fprintf(stderr, "usage: pipeline-loadgen --presign URL/v1/submissions --audio FILE "
                    "[--rate R] [--duration S] [--mean-questions M] [--max-questions N<=30] "
                    "[--questions N<=30] "
                    "[--then RATE:SECONDS] [--redis HOST:PORT|URL] [--drain-timeout S] [--seed N] "
                    "[--out FILE.jsonl]\n");
    return 2;
  }
  srand(seed);
  audio_type = sl_client_content_type(audio_path);
  if (!audio_type) {
    fprintf(stderr, "loadgen: %s: unknown audio type (by its extension)\n", audio_path);
    return 2;
  }
  FILE *af = fopen(audio_path, "rb");
  if (!af) {
    fprintf(stderr, "loadgen: cannot open %s\n", audio_path);
    return 2;
  }
  static char abuf[8 << 20];
  audio_len = fread(abuf, 1, sizeof abuf, af);
  fclose(af);
  audio = abuf;
  snprintf(redis_url, sizeof redis_url, "%s%s", strstr(redis_addr, "://") ? "" : "redis://",
           redis_addr);
  if (secure_from_env() != 0) return 2;
  sl_redis *rc = NULL;
  char rerr[768];
  if (sl_redis_new(&rc, redis_url) != 0 || sl_redis_check(redis_url, rerr, sizeof rerr) != 0) {
    char shown[600];
    sl_redis_redact(redis_url, shown, sizeof shown);
    fprintf(stderr, "loadgen: cannot connect to redis %s: %s\n", shown, rc ? rerr : "bad URL");
    sl_redis_free(rc);
    return 1;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  multi = curl_multi_init();
  curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, 512L);
  /* the schedule: submission k at k/rate in the first phase, then at
   * duration + (k - n1)/rate2 in the second */
  long n1 = (long)ceil(rate * duration - 1e-9), n2 = (long)ceil(rate2 * duration2 - 1e-9);
  long cap = n1 + n2, nsubs = 0;
  double total = duration + duration2;
  sub *subs = calloc((size_t)cap + 1, sizeof *subs);
  t0 = 0;
  t0 = now_s();
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  t0_unix_ms = (long long)wall.tv_sec * 1000 + wall.tv_nsec / 1000000;
  double next_progress = 10;
  /* ---- load ---- (until every submission of the schedule has started:
   * one whose time came while the loop was busy starts late, not never) */
  while (nsubs < cap) {
    double t = now_s();
    while (nsubs < cap && sched_of(nsubs, n1, rate, duration, rate2) <= t) {
      sub *s = &subs[nsubs];
      s->sched = sched_of(nsubs++, n1, rate, duration, rate2);
      s->n = fixedq ? fixedq : draw_n(mean, maxq);
      start_create(s, url);
    }
    if (t >= next_progress) {
      fprintf(stderr, "[loadgen] t=%.0fs submissions=%ld in-flight HTTP=%ld\n", t, nsubs,
              running_xfers);
      next_progress += 10;
    }
    double wait = (nsubs < cap ? sched_of(nsubs, n1, rate, duration, rate2) : total) - now_s();
    pump(wait > 0.05 ? 0.05 : (wait > 0 ? wait : 0));
  }
  double load_end = now_s();
  while (running_xfers > 0 && now_s() < load_end + 60) pump(0.05);
  /* ---- drain: watch the results view ---- */
  long outstanding = scan_views(rc, subs, nsubs);
  if (outstanding < 0) outstanding = 1; /* unknown until Redis answers */
  double last = now_s();
  while (outstanding > 0 && now_s() < load_end + drain_timeout) {
    pump(0.5);
    if (now_s() - last >= 1.0) {
      long o = scan_views(rc, subs, nsubs);
      if (o >= 0) outstanding = o;
      last = now_s();
      if (now_s() >= next_progress) {
        fprintf(stderr, "[loadgen] t=%.0fs draining: %ld question(s) not final yet\n", now_s(),
                outstanding);
        next_progress += 10;
      }
    }
  }
  double drain_end = now_s();
  /* ---- duplicates: a final view that changed afterwards (a second grade
   * reached the user) ---- */
  long duplicated = 0;
  for (long i = 0; i < nsubs; i++) {
    sub *s = &subs[i];
    if (s->status != 201) continue;
    redisReply *r = hgetall(rc, s->sid);
    for (int k = 0; r && k < s->n; k++) {
      question *q = &s->q[k];
      if (!q->final_view) continue;
      char field[16];
      snprintf(field, sizeof field, "q%d", q->no);
      for (size_t e = 0; r->type == REDIS_REPLY_ARRAY && e + 1 < r->elements; e += 2)
        if (!strcmp(r->element[e]->str, field) && strcmp(r->element[e + 1]->str, q->final_view))
          duplicated++;
      free(q->final_view);
    }
    if (r) freeReplyObject(r);
  }
  /* ---- summary ---- */
  long accepted = 0, create_err = 0, questions = 0, uploaded = 0, upload_err = 0, done = 0,
       failed = 0, lost = 0;
  double *acc = calloc((size_t)nsubs + 1, sizeof *acc);
  double *dl = calloc((size_t)nsubs * MAXQ + 1, sizeof *dl);
  double *ul = calloc((size_t)nsubs * MAXQ + 1, sizeof *ul); /* upload to done, s */
  if (!acc || !dl || !ul) {
    fprintf(stderr, "[loadgen] out of memory for the summary\n");
    free(acc);
    free(dl);
    free(ul);
    return 1;
  }
  size_t nacc = 0, ndl = 0, nul = 0;
  double last_final = load_end;
  FILE *of = out ? fopen(out, "w") : NULL;
  for (long i = 0; i < nsubs; i++) {
    sub *s = &subs[i];
    if (s->status != 201) {
      create_err++;
      continue;
    }
    accepted++;
    acc[nacc++] = s->accept_ms;
    for (int k = 0; k < s->n; k++) {
      question *q = &s->q[k];
      questions++;
      if (q->uploaded != 1) {
        upload_err++;
        continue;
      }
      uploaded++;
      if (q->final == 1)
        done++;
      else if (q->final == 2)
        failed++;
      else
        lost++;
      long long u2d = -1; /* the view's time of the final status - the PUT's start */
      if (q->final) {
        dl[ndl++] = q->accept_to_done_ms / 1000.0;
        if (q->final_at > last_final) last_final = q->final_at;
        if (q->done_at_ms > 0) {
          u2d = q->done_at_ms - (t0_unix_ms + (long long)(q->put_at * 1000));
          ul[nul++] = (double)u2d / 1000.0;
        }
      }
      if (of)
        fprintf(of,
                "{\"submission\":\"%s\",\"no\":%d,\"n\":%d,\"sched_s\":%.3f,\"accept_ms\":%.3f,"
                "\"state\":\"%s\",\"accept_to_done_ms\":%ld,\"upload_to_done_ms\":%lld,"
                "\"put_at_s\":%.3f,\"uploaded_at_s\":%.3f,\"final_at_s\":%.3f,"
                "\"start_unix_ms\":%lld}\n",
                s->sid, q->no, s->n, s->sched, s->accept_ms,
                q->final == 1   ? "done"
                : q->final == 2 ? "failed"
                                : "lost",
                q->accept_to_done_ms, u2d, q->put_at, q->uploaded_at, q->final_at, t0_unix_ms);
    }
  }
  if (of) fclose(of);
  sl_bench_sort(acc, nacc);
  sl_bench_sort(dl, ndl);
  sl_bench_sort(ul, nul);
  printf("{\"rate\":%.3f,\"duration_s\":%.1f,\"submissions\":%ld,\"accepted\":%ld,"
         "\"create_errors\":%ld,\"questions\":%ld,\"uploaded\":%ld,\"upload_errors\":%ld,"
         "\"done\":%ld,\"failed\":%ld,\"lost\":%ld,\"duplicated\":%ld,\"accept_p50_ms\":%.2f,"
         "\"accept_p95_ms\":%.2f,"
         "\"accept_p99_ms\":%.2f,\"done_p50_s\":%.2f,\"done_p95_s\":%.2f,\"done_max_s\":%.2f,"
         "\"upload_to_done_p50_s\":%.2f,\"upload_to_done_p95_s\":%.2f,"
         "\"drain_s\":%.1f,\"watch_s\":%.1f,\"then_rate\":%.3f,\"then_s\":%.1f}\n",
         rate, duration, nsubs, accepted, create_err, questions, uploaded, upload_err, done, failed,
         lost, duplicated, pct(acc, nacc, 50), pct(acc, nacc, 95), pct(acc, nacc, 99),
         pct(dl, ndl, 50), pct(dl, ndl, 95), ndl ? dl[ndl - 1] : 0, pct(ul, nul, 50),
         pct(ul, nul, 95), last_final - load_end, drain_end - load_end, rate2, duration2);
  free(acc);
  free(dl);
  free(ul);
  free(subs);
  curl_multi_cleanup(multi);
  curl_global_cleanup();
  sl_redis_free(rc);
  return 0;
}
