/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_rcluster.c — the pure pieces of the Redis Cluster clients (see the
 * "Redis Cluster" part of sl_redis.h): which slot a command goes to, what a
 * MOVED or ASK reply points at, and the slot map read from CLUSTER SLOTS.
 * The connections that use them are sl_redis.c (synchronous) and
 * sl_aredis.c (asynchronous). No state but the metrics: any thread.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_err.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_slot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static size_t len_of(const char **argv, const size_t *lens, int i) {
  return lens ? lens[i] : strlen(argv[i]);
}

/* 1 when argv[i] is the command name w (case-insensitive). */
static int is(const char **argv, const size_t *lens, int i, const char *w) {
  size_t n = strlen(w);
  return len_of(argv, lens, i) == n && strncasecmp(argv[i], w, n) == 0;
}

/* Commands without a key: any primary answers them. */
static const char *const keyless[] = {
    "PING",         "SCRIPT",   "INFO",     "TIME",      "PUBLISH",   "CLUSTER",    "ECHO",
    "DBSIZE",       "CONFIG",   "CLIENT",   "FUNCTION",  "COMMAND",   "AUTH",       "HELLO",
    "FLUSHDB",      "FLUSHALL", "ASKING",   "LASTSAVE",  "MEMORY",    "SLOWLOG",    "LATENCY",
    "RANDOMKEY",    "WAIT",     "READONLY", "READWRITE", "SUBSCRIBE", "PSUBSCRIBE", "UNSUBSCRIBE",
    "PUNSUBSCRIBE", "PUBSUB",   "QUIT",     "SELECT",    "SWAPDB",    "SAVE",       "BGSAVE",
    "BGREWRITEAOF", "ROLE",     "MULTI",    "EXEC",      "DISCARD",   "UNWATCH"};

int sl_redis_route(int argc, const char **argv, const size_t *lens) {
  if (argc < 1 || !argv) return -1;
  for (size_t i = 0; i < sizeof keyless / sizeof *keyless; i++)
    if (is(argv, lens, 0, keyless[i])) return -1;
  if (is(argv, lens, 0, "EVAL") || is(argv, lens, 0, "EVALSHA") || is(argv, lens, 0, "EVAL_RO") ||
      is(argv, lens, 0, "EVALSHA_RO") || is(argv, lens, 0, "FCALL") ||
      is(argv, lens, 0, "FCALL_RO")) {
    if (argc < 4) return -1;
    char nk[16];
    size_t n = len_of(argv, lens, 2);
    if (n == 0 || n >= sizeof nk) return -1;
    memcpy(nk, argv[2], n);
    nk[n] = '\0';
    if (atol(nk) <= 0) return -1;
    return sl_slot_of(argv[3], len_of(argv, lens, 3));
  }
  if (is(argv, lens, 0, "XREAD") || is(argv, lens, 0, "XREADGROUP")) {
    for (int i = 1; i + 1 < argc; i++)
      if (is(argv, lens, i, "STREAMS")) return sl_slot_of(argv[i + 1], len_of(argv, lens, i + 1));
    return -1;
  }
  if (argc < 2) return -1;
  return sl_slot_of(argv[1], len_of(argv, lens, 1));
}

int sl__redis_redirect_parse(const redisReply *rep, sl__redis_redirect *out) {
  if (!rep || rep->type != REDIS_REPLY_ERROR || !rep->str || !out) return 0;
  const char *p = rep->str;
  int ask;
  if (strncmp(p, "MOVED ", 6) == 0)
    ask = 0, p += 6;
  else if (strncmp(p, "ASK ", 4) == 0)
    ask = 1, p += 4;
  else
    return 0;
  char *end;
  long slot = strtol(p, &end, 10);
  if (end == p || *end != ' ' || slot < 0 || slot >= SL_SLOT_COUNT) return 0;
  p = end + 1;
  const char *colon = strrchr(p, ':');
  if (!colon || (size_t)(colon - p) >= sizeof out->host) return 0;
  long port = strtol(colon + 1, &end, 10);
  if (port <= 0 || port > 65535 || (*end && *end != ' ')) return 0;
  out->ask = ask;
  out->slot = (int)slot;
  memcpy(out->host, p, (size_t)(colon - p));
  out->host[colon - p] = '\0';
  out->port = (int)port;
  return 1;
}

int sl__redis_map_node(sl__redis_map *m, const char *host, int port) {
  for (int i = 0; i < m->n; i++)
    if (m->node[i].port == port && strcmp(m->node[i].host, host) == 0) return i;
  if (m->n >= SL__REDIS_MAX_NODES || strlen(host) >= sizeof m->node[0].host) return -1;
  snprintf(m->node[m->n].host, sizeof m->node[0].host, "%s", host);
  m->node[m->n].port = port;
  return m->n++;
}

int sl__redis_map_init(sl__redis_map *m, const sl_redis_addr *a) {
  if (!m || !a) return SL_EINVAL;
  memset(m, 0, sizeof *m);
  memset(m->owner, -1, sizeof m->owner);
  char list[sizeof a->seeds];
  snprintf(list, sizeof list, "%s", a->cluster ? a->seeds : "");
  if (!list[0]) return sl__redis_map_node(m, a->host, a->port) < 0 ? SL_EINVAL : 0;
  char *save = NULL;
  for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    char *colon = strrchr(t, ':');
    int port = colon ? atoi(colon + 1) : 6379;
    if (colon) *colon = '\0';
    if (sl__redis_map_node(m, t, port) < 0) return SL_EINVAL;
  }
  return m->n ? 0 : SL_EINVAL;
}

/* The node of a CLUSTER SLOTS entry's [host, port, ...], -1 when bad. */
static int entry_node(sl__redis_map *m, const redisReply *e, const char *asked) {
  if (!e || e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
      e->element[0]->type != REDIS_REPLY_STRING || e->element[1]->type != REDIS_REPLY_INTEGER)
    return -1;
  const char *host = e->element[0]->str;
  if (!host[0] || strcmp(host, "?") == 0) host = asked; /* "the node you asked" */
  return sl__redis_map_node(m, host, (int)e->element[1]->integer);
}

int sl__redis_map_apply(sl__redis_map *m, const redisReply *rep, const char *asked_host) {
  if (!m || !rep || rep->type != REDIS_REPLY_ARRAY || !asked_host) return SL_EREDIS;
  signed char owner[SL_SLOT_COUNT];
  memset(owner, -1, sizeof owner);
  int covered = 0;
  for (size_t i = 0; i < rep->elements; i++) {
    const redisReply *r = rep->element[i];
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER)
      return SL_EREDIS;
    long long lo = r->element[0]->integer, hi = r->element[1]->integer;
    if (lo < 0 || hi >= SL_SLOT_COUNT || lo > hi) return SL_EREDIS;
    int node = entry_node(m, r->element[2], asked_host);
    if (node < 0) return SL_EREDIS;
    for (long long s = lo; s <= hi; s++) {
      covered += owner[s] < 0;
      owner[s] = (signed char)node;
    }
  }
  if (covered == 0) return SL_EREDIS; /* a node that knows no slots yet */
  memcpy(m->owner, owner, sizeof owner);
  m->covered = covered;
  return covered;
}

int sl__redis_map_primary(const sl__redis_map *m, int i) {
  for (int s = 0; s < SL_SLOT_COUNT; s++)
    if (m->owner[s] == i) return 1;
  return 0;
}

sl_metric *sl__redis_redirects(int ask) {
  return sl_metrics_counter("sluice_redis_redirects_total", ask ? "kind=\"ask\"" : "kind=\"moved\"",
                            "Redis Cluster redirects followed (MOVED, ASK)");
}

sl_metric *sl__redis_refreshes(void) {
  return sl_metrics_counter("sluice_redis_slot_refreshes_total", NULL,
                            "Redis Cluster slot maps read (CLUSTER SLOTS)");
}
