/* SPDX-License-Identifier: Apache-2.0 */
/*
 * limiter_probe.c — drives the shared Redis rate limiter (sl_limiter) the way
 * a blocking worker would, for tests and for checking a live limit.
 *
 *   limiter_probe --redis redis://127.0.0.1:6379 --provider NAME
 *                 --rate R --burst B --seconds S [--cost C] [--trace FILE]
 *       Loops for S seconds calling sl_limiter_take(); a grant is counted,
 *       a refusal sleeps exactly the wait Redis returned (never busy-loops;
 *       Redis errors back off 100 ms). Prints one JSON line:
 *       {"granted":N,"waits":M,"errors":E,"seconds":S}. With --trace, appends
 *       the wall-clock time (ms since the epoch) of every grant to FILE, one
 *       per line. Exits 1 if any Redis error happened.
 *   limiter_probe --redis URL --provider NAME --pause MS
 *       sl_limiter_pause(); prints {"paused_ms":MS}.
 *   limiter_probe --print-script take|pause|fair
 *       Prints the Lua script text (to EVAL it by hand with redis-cli; fair:
 *       the fair take, sl_fair.h).
 *   limiter_probe --provider NAME --print-keys
 *       Prints the limit key and the pause key, one line each.
 *   --buckets K --bucket B (with a take loop or --print-keys): the limit is
 *       split in K buckets (provider.limit_buckets) and this probe takes
 *       from bucket B (rate/K, burst/K).
 *
 * The key names follow SLUICE_REDIS_BUCKETS (redis.buckets, as the stages
 * read it): > 0, the names a Redis Cluster needs (sl_limiter.h).
 * --redis defaults to $SLUICE_REDIS_URL, then redis://127.0.0.1:6379.
 * SIGINT/SIGTERM end the loop early; the JSON line is still printed.
 * Single-threaded; all buffers are fixed-size.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice/sl_err.h"
#include "sluice/sl_fair.h"
#include "sluice/sl_limiter.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_rkey.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig) {
  (void)sig;
  stop_flag = 1;
}

static int64_t clock_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleeps ms unless a signal asks us to stop. */
static void sleep_ms(int64_t ms) {
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (!stop_flag && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int parse_double(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

static void usage(FILE *f) {
  fputs("usage: limiter_probe [--redis URL] --provider NAME --rate R --burst B --seconds S\n"
        "                     [--cost C] [--trace FILE]\n"
        "       limiter_probe [--redis URL] --provider NAME --pause MS\n"
        "       limiter_probe --print-script take|pause|fair\n"
        "       limiter_probe --provider NAME [--buckets K --bucket B] --print-keys\n"
        "       (a take loop also takes [--buckets K --bucket B])\n",
        f);
}

int main(int argc, char **argv) {
  const char *url = getenv("SLUICE_REDIS_URL");
  const char *provider = NULL, *trace_path = NULL;
  double rate = 0, burst = 1, cost = 1, seconds = 0, pause = 0, buckets = 1, bucket = 0;
  int have_pause = 0, print_keys = 0;
  const char *rb = getenv("SLUICE_REDIS_BUCKETS");
  if (sl_rkey_setup(rb && *rb ? atoi(rb) : 0) != 0) {
    fprintf(stderr, "limiter_probe: SLUICE_REDIS_BUCKETS %s is out of range\n", rb);
    return 2;
  }
  if (!url || !*url) url = "redis://127.0.0.1:6379";

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(a, "--print-keys") == 0) {
      print_keys = 1;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "limiter_probe: %s needs a value\n", a);
      usage(stderr);
      return 2;
    }
    const char *v = argv[++i];
    int bad = 0;
    if (strcmp(a, "--redis") == 0)
      url = v;
    else if (strcmp(a, "--provider") == 0)
      provider = v;
    else if (strcmp(a, "--trace") == 0)
      trace_path = v;
    else if (strcmp(a, "--rate") == 0)
      bad = parse_double(v, &rate);
    else if (strcmp(a, "--burst") == 0)
      bad = parse_double(v, &burst);
    else if (strcmp(a, "--cost") == 0)
      bad = parse_double(v, &cost);
    else if (strcmp(a, "--buckets") == 0)
      bad = parse_double(v, &buckets);
    else if (strcmp(a, "--bucket") == 0)
      bad = parse_double(v, &bucket);
    else if (strcmp(a, "--seconds") == 0)
      bad = parse_double(v, &seconds);
    else if (strcmp(a, "--pause") == 0) {
      bad = parse_double(v, &pause);
      have_pause = 1;
    } else if (strcmp(a, "--print-script") == 0) {
      if (strcmp(v, "take") == 0)
        fputs(sl_limiter_lua, stdout);
      else if (strcmp(v, "pause") == 0)
        fputs(sl_limiter_pause_lua, stdout);
      else if (strcmp(v, "fair") == 0)
        fputs(sl_fair_take_lua, stdout);
      else
        bad = 1;
      if (!bad) return 0;
    } else {
      fprintf(stderr, "limiter_probe: unknown option %s\n", a);
      usage(stderr);
      return 2;
    }
    if (bad) {
      fprintf(stderr, "limiter_probe: bad value for %s: %s\n", a, v);
      return 2;
    }
  }
  if (print_keys) {
    char lk[SL_LIMITER_KEY_MAX], pk[SL_LIMITER_KEY_MAX];
    if (sl_limiter_keys_of(provider, (int)bucket, (int)buckets, lk, sizeof lk, pk, sizeof pk)) {
      usage(stderr);
      return 2;
    }
    printf("%s\n%s\n", lk, pk);
    return 0;
  }
  if (!provider || (!have_pause && (rate <= 0 || seconds <= 0 || burst < 1 || cost <= 0)) ||
      (have_pause && (pause < 1 || pause > (double)INT64_MAX / 2))) {
    usage(stderr);
    return 2;
  }

  sl_redis *r = NULL;
  int rc = sl_redis_new(&r, url);
  if (rc) {
    fprintf(stderr, "limiter_probe: --redis %s: %s\n", url, sl_strerror(rc));
    return 2;
  }
  char err[256];

  if (have_pause) {
    rc = sl_limiter_pause(r, provider, (int64_t)pause, err, sizeof err);
    sl_redis_free(r);
    if (rc) {
      fprintf(stderr, "limiter_probe: pause: %s (%s)\n", err, sl_err_name(rc));
      return 1;
    }
    printf("{\"paused_ms\":%lld}\n", (long long)pause);
    return 0;
  }

  FILE *trace = NULL;
  if (trace_path && !(trace = fopen(trace_path, "a"))) {
    fprintf(stderr, "limiter_probe: %s: %s\n", trace_path, strerror(errno));
    sl_redis_free(r);
    return 2;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  uint64_t granted = 0, waits = 0, errors = 0;
  int64_t deadline = clock_ms(CLOCK_MONOTONIC) + (int64_t)llround(seconds * 1000.0);
  for (;;) {
    int64_t now = clock_ms(CLOCK_MONOTONIC);
    if (stop_flag || now >= deadline) break;
    int64_t wait = 0;
    rc = sl_limiter_take_of(r, provider, (int)bucket, (int)buckets, rate, burst, cost, &wait, err,
                            sizeof err);
    if (rc) {
      if (errors++ < 5) fprintf(stderr, "limiter_probe: take: %s (%s)\n", err, sl_err_name(rc));
      if (rc == SL_EINVAL) break;
      sleep_ms(100);
      continue;
    }
    if (wait == 0) {
      granted++;
      if (trace) fprintf(trace, "%lld\n", (long long)clock_ms(CLOCK_REALTIME));
      continue;
    }
    waits++;
    int64_t left = deadline - clock_ms(CLOCK_MONOTONIC);
    sleep_ms(wait < left ? wait : left);
  }
  if (trace) fclose(trace);
  sl_redis_free(r);
  printf("{\"granted\":%llu,\"waits\":%llu,\"errors\":%llu,\"seconds\":%g}\n",
         (unsigned long long)granted, (unsigned long long)waits, (unsigned long long)errors,
         seconds);
  return errors ? 1 : 0;
}
