/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_cluster_probe — drives the runtime's two Redis clients (sl_redis,
 * sl_aredis) against a real server for tests/integration/test_redis_cluster.sh.
 *
 *   redis_cluster_probe URL setget N     SET then GET N keys ("rcp:<i>", spread
 *                                        over the slots) with both clients
 *   redis_cluster_probe URL eval N       a script (EVALSHA, EVAL on NOSCRIPT)
 *                                        on N keys with both clients
 *   redis_cluster_probe URL get KEY      GET KEY with both clients, printed
 *   redis_cluster_probe URL steps KEY    GET KEY with both clients (made once),
 *                                        three rounds: after round i it creates
 *                                        $PROBE_SYNC/ready<i> and waits for
 *                                        $PROBE_SYNC/go<i> (the test changes the
 *                                        cluster meanwhile); metrics each round
 *   redis_cluster_probe URL sub CHANNEL  an sl_aredis subscriber to CHANNEL; the
 *                                        sync client publishes 20 messages (any
 *                                        node) once it is up; all must arrive
 *                                        and sl_aredis_settled must say so
 *   redis_cluster_probe URL subfail SECS a subscriber for SECS s while the sync
 *                                        client publishes every 100 ms (the
 *                                        test kills the subscriber's node
 *                                        meanwhile): it must come back up on
 *                                        another node and hear messages again
 *   redis_cluster_probe URL isolate PORT async commands every 2 ms for 6 s (the
 *                                        test SIGSTOPs the primary on PORT
 *                                        meanwhile): those to the other
 *                                        primaries must all succeed, none
 *                                        slower than 500 ms
 *   redis_cluster_probe URL scan PATTERN SCAN ... MATCH PATTERN with the sync
 *                                        client to the end: "scan: N keys"
 *   redis_cluster_probe URL check -      sl_redis_check: prints its result
 *                                        ("check: 0" or "check: <code>: why")
 *   redis_cluster_probe URL stream SECS  a command every 5 ms from each client
 *                                        for SECS s; prints each client's
 *                                        failures and failure window
 *
 * Every mode ends with a line "metrics moved=M ask=A refreshes=R errors=E".
 * Exit 0 when every command succeeded (stream: when both clients succeed
 * again by the end), 1 otherwise, 2 on bad usage.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_aredis.h"
#include "sluice/sl_err.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_slot.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *url;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static const char *script_text =
    "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])";

/* ---- synchronous ---------------------------------------------------------- */

static int sync_run(const char *mode, long n, const char *key) {
  sl_redis *r = NULL;
  if (sl_redis_new(&r, url) != 0) return fprintf(stderr, "bad url\n"), 1;
  sl_redis_script sc;
  sl_redis_script_init(&sc, script_text);
  char err[512];
  int bad = 0;
  for (long i = 0; i < n || (key && i == 0); i++) {
    char k[64], v[64];
    snprintf(k, sizeof k, "rcp:%ld", i);
    snprintf(v, sizeof v, "%s-%ld", mode, i);
    const char *kk = key ? key : k;
    redisReply *rep = NULL;
    if (strcmp(mode, "eval") == 0) {
      const char *av[] = {kk, v};
      size_t lens[] = {strlen(kk), strlen(v)};
      rep = sl_redis_eval(r, &sc, 1, 2, av, lens, err, sizeof err);
    } else if (strcmp(mode, "setget") == 0) {
      const char *av[] = {"SET", kk, v};
      size_t lens[] = {3, strlen(kk), strlen(v)};
      rep = sl_redis_argv(r, 3, av, lens, err, sizeof err);
      if (rep && rep->type != REDIS_REPLY_ERROR) {
        freeReplyObject(rep);
        const char *gv[] = {"GET", kk};
        size_t gl[] = {3, strlen(kk)};
        rep = sl_redis_argv(r, 2, gv, gl, err, sizeof err);
      }
    } else {
      const char *gv[] = {"GET", kk};
      size_t gl[] = {3, strlen(kk)};
      rep = sl_redis_argv(r, 2, gv, gl, err, sizeof err);
      if (rep && rep->type == REDIS_REPLY_STRING) printf("sync %s=%s\n", kk, rep->str);
    }
    int ok = rep && rep->type != REDIS_REPLY_ERROR &&
             (key || (rep->type == REDIS_REPLY_STRING && strcmp(rep->str, v) == 0));
    if (!ok && bad++ < 5)
      fprintf(stderr, "sync %s %s: %s\n", mode, kk,
              !rep                             ? err
              : rep->type == REDIS_REPLY_ERROR ? rep->str
                                               : "wrong value");
    freeReplyObject(rep);
  }
  printf("sync %s: %ld commands, %d failed\n", mode, key ? 1 : n, bad);
  sl_redis_free(r);
  return bad != 0;
}

/* ---- asynchronous --------------------------------------------------------- */

typedef struct {
  uv_loop_t loop;
  sl_aredis *r;
  sl_redis_script sc;
  const char *mode, *key;
  long n, sent, done;
  int bad;
  uv_timer_t timer;
  double start;
} actx;

typedef struct {
  actx *a;
  long i;
  int get; /* setget: the GET after the SET */
} acall;

static void issue(actx *a, long i, int get);

static void on_reply(redisReply *rep, void *ud) {
  acall *c = ud;
  actx *a = c->a;
  char v[64];
  snprintf(v, sizeof v, "%s-%ld", a->mode, c->i);
  int ok = rep && rep->type != REDIS_REPLY_ERROR;
  if (ok && strcmp(a->mode, "setget") == 0 && !c->get) {
    issue(a, c->i, 1);
    free(c);
    return;
  }
  if (ok && !a->key) ok = rep->type == REDIS_REPLY_STRING && strcmp(rep->str, v) == 0;
  if (ok && a->key && rep->type == REDIS_REPLY_STRING) printf("async %s=%s\n", a->key, rep->str);
  if (!ok && a->bad++ < 5)
    fprintf(stderr, "async %s rcp:%ld: %s\n", a->mode, c->i,
            !rep                             ? "connection failed"
            : rep->type == REDIS_REPLY_ERROR ? rep->str
                                             : "wrong value");
  a->done++;
  free(c);
}

static void issue(actx *a, long i, int get) {
  acall *c = calloc(1, sizeof *c);
  c->a = a;
  c->i = i;
  c->get = get;
  char k[64], v[64];
  snprintf(k, sizeof k, "rcp:%ld", i);
  snprintf(v, sizeof v, "%s-%ld", a->mode, i);
  const char *kk = a->key ? a->key : k;
  int rc;
  if (strcmp(a->mode, "eval") == 0) {
    const char *av[] = {kk, v};
    rc = sl_aredis_eval(a->r, on_reply, c, &a->sc, 1, 2, av, NULL);
  } else if (strcmp(a->mode, "setget") == 0 && !get) {
    const char *av[] = {"SET", kk, v};
    rc = sl_aredis_argv(a->r, on_reply, c, 3, av, NULL);
  } else {
    const char *av[] = {"GET", kk};
    rc = sl_aredis_argv(a->r, on_reply, c, 2, av, NULL);
  }
  if (rc) {
    if (a->bad++ < 5) fprintf(stderr, "async %s %s: not sent (%d)\n", a->mode, kk, rc);
    a->done++;
    free(c);
  }
}

static void on_atimer(uv_timer_t *t) {
  actx *a = t->data;
  long total = a->key ? 1 : a->n;
  if (a->sent == 0 && !sl_aredis_connected(a->r) && now_s() - a->start < 10) return;
  while (a->sent < total && a->sent - a->done < 100) issue(a, a->sent++, 0);
  if (a->done >= total) { /* the client's handles keep the loop running: free it now */
    uv_timer_stop(t);
    sl_aredis_free(a->r);
    a->r = NULL;
  }
}

static int async_run(const char *mode, long n, const char *key) {
  actx a = {.mode = mode, .n = n, .key = key};
  uv_loop_init(&a.loop);
  sl_redis_script_init(&a.sc, script_text);
  if (sl_aredis_new(&a.r, &a.loop, url) != 0) return fprintf(stderr, "bad url\n"), 1;
  a.start = now_s();
  uv_timer_init(&a.loop, &a.timer);
  a.timer.data = &a;
  uv_timer_start(&a.timer, on_atimer, 10, 10);
  uv_run(&a.loop, UV_RUN_DEFAULT);
  printf("async %s: %ld commands, %d failed\n", mode, key ? 1 : n, a.bad);
  uv_close((uv_handle_t *)&a.timer, NULL);
  uv_run(&a.loop, UV_RUN_DEFAULT);
  uv_loop_close(&a.loop);
  return a.bad != 0;
}

/* ---- a stream of commands across a failure ------------------------------- */

typedef struct {
  double first_fail, last_fail, last_ok;
  long ok, failed;
} tally;

static void tally_add(tally *t, int ok) {
  double n = now_s();
  if (ok) {
    t->ok++;
    t->last_ok = n;
    return;
  }
  if (!t->failed++) t->first_fail = n;
  t->last_fail = n;
}

static int tally_print(const char *who, const tally *t, double end) {
  double window = t->failed ? t->last_fail - t->first_fail : 0;
  int recovered = t->last_ok > t->last_fail && end - t->last_ok < 1.0;
  printf("%s stream: %ld ok, %ld failed, failure window %.0f ms, %s\n", who, t->ok, t->failed,
         window * 1000, recovered ? "recovered" : "NOT recovered");
  return !recovered;
}

static double stream_secs;
static tally sync_t, async_t;

static void *sync_stream(void *arg) {
  (void)arg;
  sl_redis *r = NULL;
  if (sl_redis_new(&r, url) != 0) return NULL;
  char err[512];
  double end = now_s() + stream_secs;
  for (long i = 0; now_s() < end; i++) {
    char k[64];
    snprintf(k, sizeof k, "rcp:s:%ld", i % 1000);
    const char *av[] = {"SET", k, "x"};
    redisReply *rep = sl_redis_argv(r, 3, av, NULL, err, sizeof err);
    tally_add(&sync_t, rep && rep->type != REDIS_REPLY_ERROR);
    freeReplyObject(rep);
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  sl_redis_free(r);
  return NULL;
}

typedef struct {
  sl_aredis *r;
  long i;
  double end;
  uv_timer_t t;
} sctx;

static void on_stream_reply(redisReply *rep, void *ud) {
  (void)ud;
  tally_add(&async_t, rep && rep->type != REDIS_REPLY_ERROR);
}

static void on_stream_tick(uv_timer_t *t) {
  sctx *s = t->data;
  if (now_s() >= s->end + 0.5) { /* the last answers are in */
    uv_timer_stop(t);
    sl_aredis_free(s->r);
    s->r = NULL;
    return;
  }
  if (now_s() >= s->end) return;
  char k[64];
  snprintf(k, sizeof k, "rcp:a:%ld", s->i++ % 1000);
  const char *av[] = {"SET", k, "x"};
  if (sl_aredis_argv(s->r, on_stream_reply, NULL, 3, av, NULL) != 0) tally_add(&async_t, 0);
}

static int stream_run(double secs) {
  stream_secs = secs;
  uv_loop_t loop;
  uv_loop_init(&loop);
  sctx s = {0};
  if (sl_aredis_new(&s.r, &loop, url) != 0) return 1;
  for (int i = 0; i < 100 && !sl_aredis_connected(s.r); i++)
    uv_run(&loop, UV_RUN_NOWAIT), nanosleep(&(struct timespec){0, 50000000}, NULL);
  pthread_t th;
  pthread_create(&th, NULL, sync_stream, NULL);
  s.end = now_s() + secs;
  uv_timer_init(&loop, &s.t);
  s.t.data = &s;
  uv_timer_start(&s.t, on_stream_tick, 5, 5);
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(th, NULL);
  double end = now_s();
  int rc = tally_print("sync", &sync_t, end) | tally_print("async", &async_t, end);
  uv_close((uv_handle_t *)&s.t, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return rc;
}

static void print_metrics(void) {
  printf("metrics moved=%llu ask=%llu refreshes=%llu errors=%llu\n",
         (unsigned long long)sl_metric_value(sl__redis_redirects(0)),
         (unsigned long long)sl_metric_value(sl__redis_redirects(1)),
         (unsigned long long)sl_metric_value(sl__redis_refreshes()),
         (unsigned long long)sl_metric_value(sl__redis_errors()));
  fflush(stdout);
}

static void on_step_reply(redisReply *rep, void *ud) {
  int *state = ud;
  if (rep && rep->type == REDIS_REPLY_STRING)
    printf("async value=%s\n", rep->str);
  else
    printf("async failed: %s\n", !rep                             ? "connection"
                                 : rep->type == REDIS_REPLY_ERROR ? rep->str
                                                                  : "nil");
  *state = rep && rep->type == REDIS_REPLY_STRING ? 1 : -1;
}

/* Waits (running loop) until path exists, at most 60 s. */
static int await_file(uv_loop_t *loop, const char *path) {
  for (int i = 0; i < 1200; i++) {
    FILE *f = fopen(path, "r");
    if (f) return fclose(f), 0;
    uv_run(loop, UV_RUN_NOWAIT);
    nanosleep(&(struct timespec){0, 50000000}, NULL);
  }
  return 1;
}

typedef struct {
  int up, got;
} subst;

static void on_sub_msg(const char *msg, size_t len, void *ud) {
  (void)msg;
  (void)len;
  ((subst *)ud)->got++;
}

static void on_sub_state(int up, void *ud) { ((subst *)ud)->up = up; }

static int sub_run(const char *channel) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  sl_aredis *ar = NULL;
  sl_redis *r = NULL;
  subst st = {0};
  if (sl_aredis_new(&ar, &loop, url) != 0 || sl_redis_new(&r, url) != 0) return 1;
  if (sl_aredis_subscribe(ar, channel, on_sub_msg, on_sub_state, &st) != 0) return 1;
  const char *ping[] = {"PING"};
  int refused = sl_aredis_argv(ar, NULL, NULL, 1, ping, NULL) == SL_EINVAL;
  for (int i = 0; i < 200 && !st.up; i++)
    uv_run(&loop, UV_RUN_NOWAIT), nanosleep(&(struct timespec){0, 50000000}, NULL);
  char err[512];
  int published = 0;
  for (int i = 0; i < 20 && st.up; i++) {
    const char *av[] = {"PUBLISH", channel, "m"};
    redisReply *rep = sl_redis_argv(r, 3, av, NULL, err, sizeof err);
    published += rep && rep->type == REDIS_REPLY_INTEGER;
    freeReplyObject(rep);
  }
  int settled = 0;
  for (int i = 0; i < 100 && !(settled = sl_aredis_settled(ar) && st.got == published); i++)
    uv_run(&loop, UV_RUN_NOWAIT), nanosleep(&(struct timespec){0, 20000000}, NULL);
  printf("sub: up=%d published=%d received=%d settled=%d commands refused=%d\n", st.up, published,
         st.got, settled, refused);
  sl_redis_free(r);
  sl_aredis_free(ar);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return !(st.got == 20 && published == 20 && settled && refused);
}

typedef struct {
  int up, ups, downs, got, after_up;
  double up_at, down_at;
} failst;

static void on_fail_msg(const char *msg, size_t len, void *ud) {
  (void)msg;
  (void)len;
  failst *f = ud;
  f->got++;
  f->after_up++;
}

static void on_fail_state(int up, void *ud) {
  failst *f = ud;
  if (up == f->up) return;
  f->up = up;
  if (up) {
    f->ups++;
    f->after_up = 0;
    f->up_at = now_s();
  } else {
    f->downs++;
    f->down_at = now_s();
  }
}

static int subfail_run(double secs) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  sl_aredis *ar = NULL;
  sl_redis *r = NULL;
  failst f = {0};
  if (sl_aredis_new(&ar, &loop, url) != 0 || sl_redis_new(&r, url) != 0) return 1;
  if (sl_aredis_subscribe(ar, "rcp-fail", on_fail_msg, on_fail_state, &f) != 0) return 1;
  char err[512];
  double end = now_s() + secs, next = 0;
  while (now_s() < end) {
    uv_run(&loop, UV_RUN_NOWAIT);
    nanosleep(&(struct timespec){0, 10000000}, NULL);
    if (now_s() < next) continue;
    next = now_s() + 0.1;
    const char *av[] = {"PUBLISH", "rcp-fail", "m"};
    freeReplyObject(sl_redis_argv(r, 3, av, NULL, err, sizeof err));
  }
  int ok = f.up && f.after_up > 0 && (f.downs == 0 || f.ups >= 2); /* before free: it says down */
  printf("subfail: ups=%d downs=%d received=%d, %d since the last up; down for %.0f ms\n", f.ups,
         f.downs, f.got, f.after_up,
         f.downs && f.up_at > f.down_at ? (f.up_at - f.down_at) * 1000 : -1.0);
  sl_redis_free(r);
  sl_aredis_free(ar);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return !ok;
}

typedef struct {
  sl_aredis *r;
  sl__redis_map m; /* from the sync client's CLUSTER SLOTS: who owns what */
  int port;        /* the primary the test stops */
  long i, ok[2], failed[2];
  double worst[2], end;
  uv_timer_t t;
} isost;

typedef struct {
  isost *s;
  int stopped;
  double at;
} isocall;

static void on_iso_reply(redisReply *rep, void *ud) {
  isocall *c = ud;
  int k = c->stopped;
  double took = now_s() - c->at;
  if (rep && rep->type != REDIS_REPLY_ERROR)
    c->s->ok[k]++;
  else
    c->s->failed[k]++;
  if (took > c->s->worst[k]) c->s->worst[k] = took;
  free(c);
}

static void on_iso_tick(uv_timer_t *t) {
  isost *s = t->data;
  if (now_s() >= s->end + 2.5) { /* the last answers (or deadlines) are in */
    uv_timer_stop(t);
    sl_aredis_free(s->r);
    s->r = NULL;
    return;
  }
  if (now_s() >= s->end) return;
  char k[64];
  snprintf(k, sizeof k, "rcp:i:%ld", s->i++ % 5000);
  int owner = s->m.owner[sl_slot_of(k, strlen(k))];
  isocall *c = calloc(1, sizeof *c);
  c->s = s;
  c->stopped = owner >= 0 && s->m.node[owner].port == s->port;
  c->at = now_s();
  const char *av[] = {"SET", k, "x"};
  if (sl_aredis_argv(s->r, on_iso_reply, c, 3, av, NULL) != 0) {
    s->failed[c->stopped]++;
    free(c);
  }
}

static int isolate_run(int port) {
  static isost s; /* the map is large */
  s.port = port;
  sl_redis_addr a;
  sl_redis *r = NULL;
  char err[512];
  const char *av[] = {"CLUSTER", "SLOTS"};
  if (sl__redis_target(url, &a) != 0 || sl__redis_map_init(&s.m, &a) != 0 ||
      sl_redis_new(&r, url) != 0)
    return 1;
  redisReply *rep = sl_redis_argv(r, 2, av, NULL, err, sizeof err);
  int got = sl__redis_map_apply(&s.m, rep, a.host);
  freeReplyObject(rep);
  sl_redis_free(r);
  if (got != SL_SLOT_COUNT) return fprintf(stderr, "no slot map: %s\n", err), 1;
  uv_loop_t loop;
  uv_loop_init(&loop);
  if (sl_aredis_new(&s.r, &loop, url) != 0) return 1;
  for (int i = 0; i < 100 && !sl_aredis_connected(s.r); i++)
    uv_run(&loop, UV_RUN_NOWAIT), nanosleep(&(struct timespec){0, 50000000}, NULL);
  s.end = now_s() + 6;
  uv_timer_init(&loop, &s.t);
  s.t.data = &s;
  uv_timer_start(&s.t, on_iso_tick, 2, 2);
  printf("isolate: started\n");
  fflush(stdout);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_close((uv_handle_t *)&s.t, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  printf("isolate: stopped primary: %ld ok, %ld failed, slowest %.0f ms; the others: %ld ok, %ld "
         "failed, slowest %.0f ms\n",
         s.ok[1], s.failed[1], s.worst[1] * 1000, s.ok[0], s.failed[0], s.worst[0] * 1000);
  return !(s.failed[0] == 0 && s.ok[0] > 0 && s.worst[0] < 0.5 && s.failed[1] > 0);
}

static int scan_run(const char *pattern) {
  sl_redis *r = NULL;
  if (sl_redis_new(&r, url) != 0) return 1;
  char cursor[32] = "0", err[512];
  long keys = 0, calls = 0;
  do {
    const char *av[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "100"};
    redisReply *rep = sl_redis_argv(r, 6, av, NULL, err, sizeof err);
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
      fprintf(stderr, "scan: %s\n", rep && rep->str ? rep->str : err);
      freeReplyObject(rep);
      sl_redis_free(r);
      return 1;
    }
    snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str);
    keys += (long)rep->element[1]->elements;
    freeReplyObject(rep);
  } while (strcmp(cursor, "0") != 0 && ++calls < 100000);
  printf("scan: %ld keys\n", keys);
  sl_redis_free(r);
  return 0;
}

static int steps_run(const char *key) {
  const char *dir = getenv("PROBE_SYNC");
  if (!dir) return fprintf(stderr, "PROBE_SYNC is not set\n"), 2;
  uv_loop_t loop;
  uv_loop_init(&loop);
  sl_redis *r = NULL;
  sl_aredis *ar = NULL;
  if (sl_redis_new(&r, url) != 0 || sl_aredis_new(&ar, &loop, url) != 0) return 1;
  int bad = 0;
  char err[512], path[512];
  for (int round = 1; round <= 3; round++) {
    const char *av[] = {"GET", key};
    redisReply *rep = sl_redis_argv(r, 2, av, NULL, err, sizeof err);
    if (rep && rep->type == REDIS_REPLY_STRING)
      printf("sync value=%s\n", rep->str);
    else
      printf("sync failed: %s\n", !rep                             ? err
                                  : rep->type == REDIS_REPLY_ERROR ? rep->str
                                                                   : "nil"),
          bad++;
    freeReplyObject(rep);
    for (int i = 0; i < 200 && !sl_aredis_connected(ar); i++)
      uv_run(&loop, UV_RUN_NOWAIT), nanosleep(&(struct timespec){0, 50000000}, NULL);
    int state = 0;
    if (sl_aredis_argv(ar, on_step_reply, &state, 2, av, NULL) != 0)
      state = -1, printf("async not sent\n");
    while (state == 0) uv_run(&loop, UV_RUN_ONCE);
    bad += state < 0;
    printf("round %d ", round);
    print_metrics();
    if (round == 3) break;
    snprintf(path, sizeof path, "%s/ready%d", dir, round);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s/go%d", dir, round);
    if (await_file(&loop, path)) return fprintf(stderr, "no %s\n", path), 1;
  }
  sl_redis_free(r);
  sl_aredis_free(ar);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return bad != 0;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: redis_cluster_probe URL setget|eval|get|stream ARG\n");
    return 2;
  }
  url = argv[1];
  const char *mode = argv[2];
  sl_redis_security sec = {0};
  const char *pw = getenv("SLUICE_REDIS_PASSWORD");
  sec.password = pw;
  sec.user = getenv("SLUICE_REDIS_USERNAME");
  sec.ca_file = getenv("SLUICE_REDIS_TLS_CA_FILE");
  char err[512];
  if (sl_redis_security_set(&sec, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 2;
  int rc;
  if (strcmp(mode, "check") == 0) {
    rc = sl_redis_check(url, err, sizeof err);
    printf("check: %d%s%s\n", rc, rc ? ": " : "", rc ? err : "");
    return rc != 0;
  } else if (strcmp(mode, "isolate") == 0) {
    rc = isolate_run(atoi(argv[3]));
  } else if (strcmp(mode, "scan") == 0) {
    rc = scan_run(argv[3]);
  } else if (strcmp(mode, "subfail") == 0) {
    rc = subfail_run(atof(argv[3]));
  } else if (strcmp(mode, "sub") == 0) {
    rc = sub_run(argv[3]);
  } else if (strcmp(mode, "steps") == 0) {
    rc = steps_run(argv[3]);
  } else if (strcmp(mode, "stream") == 0) {
    rc = stream_run(atof(argv[3]));
  } else if (strcmp(mode, "get") == 0) {
    rc = sync_run(mode, 0, argv[3]) | async_run(mode, 0, argv[3]);
  } else if (strcmp(mode, "setget") == 0 || strcmp(mode, "eval") == 0) {
    long n = atol(argv[3]);
    rc = sync_run(mode, n, NULL) | async_run(mode, n, NULL);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  print_metrics();
  sl_redis_security_reset();
  return rc;
}
