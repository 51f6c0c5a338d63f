/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench/cost/evalsha_loop.c — the anchor of materialize in bench/cost/run:
 * materialize's apply script (stages/materialize/apply_lua.h, the very
 * text the stage runs) called with EVALSHA from a bare hiredis loop, with
 * the arguments materialize gives it, and nothing else: no Kafka, no
 * protobuf, no JSON building.
 *
 * --conns C threads, each with its own blocking connection, keep --depth D
 * commands in flight (D appended, then D replies read). materialize's
 * workers are C = stage.workers (4) blocking connections with one command
 * each (D = 1); D > 1 is what pipelining would give. --eval 1 sends the
 * script's text with every call (EVAL) instead of its SHA-1.
 *
 * The applies are --questions questions (10 per submission) each moved
 * through the states a question goes through after its upload, in the
 * order the results topic holds them when the stages run one after the
 * other (every question queued, then every question checking, ...):
 * queued, checking, transcribing, grading (with its transcript) and done
 * (with its grade), the view JSON shaped and sized as materialize writes it.
 * Keys are under "cost:" so the real view is untouched.
 *
 * Output: one JSON line: applies, wall seconds, this process's CPU seconds
 * (getrusage: every thread).
 */
#define _POSIX_C_SOURCE 200809L
#include <hiredis/hiredis.h>
#include <pthread.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "apply_lua.h"
#include "sl_bench.h"

#define NSTATES 5

static const char *host = "127.0.0.1";
static int port = 6379, depth = 1, conns = 4, eval = 0;
static long questions = 20000;
static char sha[41];

typedef struct {
  int id;
  long done;
  int failed;
} worker;

/* The view materialize writes for state s of question i (no. qno). */
static void view_of(int s, unsigned qno, long long at, char *buf, size_t len) {
  static const char *label[] = {"queued", "checking", "transcribing", "grading", "done"};
  static const char *stage[] = {"ingest", "preflight", "stt", "stt", "grade"};
  static const char text[] = "On weekends I usually go hiking in the mountains with my friends.";
  if (s < 3)
    snprintf(buf, len, "{\"no\":%u,\"state\":\"%s\",\"updated_at_ms\":%lld,\"stage\":\"%s\"}", qno,
             label[s], at, stage[s]);
  else if (s == 3)
    snprintf(buf, len,
             "{\"no\":%u,\"state\":\"grading\",\"updated_at_ms\":%lld,\"stage\":\"stt\","
             "\"transcript\":\"%s\",\"duration_s\":1.2093999999999999}",
             qno, at, text);
  else
    snprintf(buf, len,
             "{\"no\":%u,\"state\":\"done\",\"updated_at_ms\":%lld,\"stage\":\"grade\","
             "\"transcript\":\"%s\",\"duration_s\":1.2093999999999999,\"grade\":{\"score\":"
             "46.299999999999997,\"level\":\"IM1\",\"feedback\":\"A clear answer; say more about "
             "why, and vary your words.\",\"words_per_minute\":0,\"lexical_variety\":0,"
             "\"filler_rate\":0,\"relevance\":0,\"engine\":\"openai:gpt-4o-mini\",\"criteria\":["
             "{\"name\":\"task\",\"score\":40,\"comment\":\"Answers the question briefly.\"},"
             "{\"name\":\"language\",\"score\":52,\"comment\":\"Simple sentences, few errors.\"},"
             "{\"name\":\"delivery\",\"score\":47,\"comment\":\"Steady pace.\"}]},"
             "\"accept_to_done_ms\":7421}",
             qno, at, text);
}

static void *run(void *arg) {
  worker *w = arg;
  redisContext *c = redisConnect(host, port);
  if (!c || c->err) {
    fprintf(stderr, "evalsha_loop: connect: %s\n", c ? c->errstr : "no memory");
    w->failed = 1;
    return NULL;
  }
  static const char *rank[] = {"20", "30", "40", "50", "100001"};
  long long at = 1796170554000LL;
  long mine = (questions - w->id + conns - 1) / conns; /* questions i = id + k * conns */
  long total = mine * NSTATES, n = 0, sent = 0;
  for (long k = 0; k < total && !w->failed; k++) {
    int s = (int)(k / mine); /* every question queued, then every question checking, ... */
    long i = w->id + (k % mine) * conns;
    char sid[40], hkey[64], member[64], q[16], json[1024], tp[32], off[32], own[48];
    unsigned qno = (unsigned)(i % 10) + 1;
    snprintf(sid, sizeof sid, "01a2341b-%04lx-7000-8000-%012lx", (i / 10) & 0xffff, i / 10);
    snprintf(hkey, sizeof hkey, "cost:sub:%s", sid);
    snprintf(member, sizeof member, "%s/%u", sid, qno);
    snprintf(q, sizeof q, "%u", qno);
    view_of(s, qno, at + s * 1000 + i % 1000, json, sizeof json);
    snprintf(tp, sizeof tp, "results:%ld", i % 12);
    snprintf(off, sizeof off, "%ld", (long)s * questions / 12 + i / 12);
    snprintf(own, sizeof own, "cost:view:w:%d", w->id); /* the writer's count */
    const char *argv[] = {eval ? "EVAL" : "EVALSHA",
                          eval ? apply_lua : sha,
                          "7",
                          hkey,
                          "cost:pending",
                          "cost:view:seq",
                          "cost:view:epoch",
                          "cost:view:applied",
                          "cost:view:changes",
                          own,
                          q,
                          rank[s],
                          json,
                          "604800",
                          member,
                          "1796170550000",
                          tp,
                          off,
                          "20",
                          "40",
                          "50",
                          "100000",
                          "100001",
                          "100000"};
    redisAppendCommandArgv(c, 24, argv, NULL);
    if (++sent < depth && k + 1 < total) continue;
    for (; sent > 0; sent--) {
      redisReply *r = NULL;
      if (redisGetReply(c, (void **)&r) != REDIS_OK || !r || r->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "evalsha_loop: %s\n",
                r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
        w->failed = 1;
      }
      if (r) freeReplyObject(r);
      n++;
    }
  }
  w->done = n;
  redisFree(c);
  return NULL;
}

int main(int argc, char **argv) {
  int arg = 1;
  long long nq = questions;
  const sl_bench_opt opts[] = {
      {"--host", SL_BENCH_STR, &host, NULL},   {"--port", SL_BENCH_INT, &port, NULL},
      {"--conns", SL_BENCH_INT, &conns, NULL}, {"--depth", SL_BENCH_INT, &depth, NULL},
      {"--questions", SL_BENCH_LL, &nq, NULL}, {"--eval", SL_BENCH_INT, &eval, NULL},
  };
  if (sl_bench_opts("evalsha_loop", argc, argv, &arg, opts, sizeof opts / sizeof opts[0]) != 0)
    return 2;
  questions = (long)nq;
  if (arg != argc || conns < 1 || conns > 64 || depth < 1 || questions < conns) {
    fprintf(stderr, "usage: evalsha_loop [--host H] [--port P] [--conns C<=64] [--depth D] "
                    "[--questions N] [--eval 0|1]\n");
    return 2;
  }
  redisContext *c = redisConnect(host, port);
  redisReply *r = c && !c->err ? redisCommand(c, "SCRIPT LOAD %s", apply_lua) : NULL;
  if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) {
    fprintf(stderr, "evalsha_loop: SCRIPT LOAD failed\n");
    return 1;
  }
  memcpy(sha, r->str, 41);
  freeReplyObject(r);
  redisFree(c);
  worker w[64];
  pthread_t th[64];
  double t0 = sl_bench_now_s(), c0 = sl_bench_cpu_s();
  for (int i = 0; i < conns; i++) {
    w[i] = (worker){i, 0, 0};
    pthread_create(&th[i], NULL, run, &w[i]);
  }
  long total = 0;
  int failed = 0;
  for (int i = 0; i < conns; i++) {
    pthread_join(th[i], NULL);
    total += w[i].done;
    failed |= w[i].failed;
  }
  double wall = sl_bench_now_s() - t0, cpu = sl_bench_cpu_s() - c0;
  printf("{\"applies\":%ld,\"conns\":%d,\"depth\":%d,\"command\":\"%s\",\"wall_s\":%.4f,"
         "\"cpu_s\":%.4f}\n",
         total, conns, depth, eval ? "EVAL" : "EVALSHA", wall, cpu);
  return failed ? 1 : 0;
}
