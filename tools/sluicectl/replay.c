/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay.c — sluicectl dlq replay.
 *
 * 1. read the DLQ and keep the matching dead letters (same filters as list);
 * 2. skip, with the reason, those without a replay_topic or whose replay
 *    topic does not exist;
 * 3. refuse more than SC_CONFIRM_ABOVE replays without --yes;
 * 4. write one ReplayAudit record (UUIDv7 id, actor, host, time, filters,
 *    dry_run, entries) to the audit topic and wait for its acknowledgement —
 *    before anything is replayed, so an interrupted replay is audited too;
 * 5. unless --dry-run: produce each dead letter's original key and payload
 *    (byte for byte) to its replay topic with the single header
 *    SL_HDR_REPLAY_ID (sl_stage.h, "sluice-replay-id"): <audit id> — none
 *    of the retry headers, so the stage gives it a fresh time budget — and
 *    a traceparent of a new trace whose first span, "dlq replay", links to
 *    the failed attempt's (DeadLetter.traceparent), at
 *    --rate messages per second (token bucket; the wait for a token is
 *    spent serving delivery reports), with an idempotent producer, and
 *    wait for every delivery report;
 * 6. print a summary: replayed, skipped (reasons), failed, audit id.
 *
 * Exit status: 0 when every matching dead letter was replayed, 1 when any
 * was skipped or failed (or on SIGINT/SIGTERM, which stop producing and
 * wait for what is in flight), 2 for usage errors (including a missing --yes).
 */
#define _POSIX_C_SOURCE 200809L
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluicectl.h"
#include "sluice/sl_dkey.h"
#include "sluice/sl_id.h"
#include "sluice/sl_trace.h"

/* A replay starts a trace of its own, recorded when the dead letter's was
 * (its "dlq replay" span links to the failed attempt's span): its
 * traceparent in tp, or NULL when the dead letter carries none. */
static const char *replay_trace(const Sluice__V1__DeadLetter *d, const char *id,
                                char tp[SL_TRACEPARENT_LEN + 1]) {
  sl_trace_ctx orig, c;
  if (!d->traceparent || sl_trace_parse(d->traceparent, strlen(d->traceparent), &orig) != 0 ||
      sl_trace_root(&c) != 0)
    return NULL;
  c.flags = orig.flags;
  sl_span s;
  sl_span_begin(&s, &c, NULL, "dlq replay", SL_SPAN_PRODUCER, 0);
  sl_span_str(&s, "sluice.replay_id", id);
  sl_span_str(&s, "sluice.stage", d->stage);
  sl_span_str(&s, "messaging.destination.name", d->replay_topic);
  sl_span_str(&s, "messaging.kafka.message.key", d->subject_key);
  sl_span_str(&s, "error.type", d->error_class);
  sl_span_link(&s, &orig);
  sl_span_end(&s, 0);
  sl_trace_format(&c, tp);
  return tp;
}

typedef struct {
  const sc_dead_letter *dl;
  const char *skip; /* reason, or NULL */
  char reason[200];
  int produced;
  sc_delivery dr;
} entry;

typedef struct {
  const char *name;
  int exists;
} topic_state;

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

void sc_resolve_actor(const sc_opts *o, char *out, size_t n) {
  const char *a = o->actor;
  if (!a || !*a) a = getenv("SUDO_USER");
  if (!a || !*a) a = getenv("USER");
  if (a && *a) {
    snprintf(out, n, "%s", a);
    return;
  }
  struct passwd pw, *res = NULL;
  char buf[1024];
  if (getpwuid_r(geteuid(), &pw, buf, sizeof buf, &res) == 0 && res && res->pw_name)
    snprintf(out, n, "%s", res->pw_name);
  else
    snprintf(out, n, "uid:%u", (unsigned)geteuid());
}

/* looks the replay topic up once per distinct name; -1 on a Kafka error */
static int check_target(const sc_opts *o, rd_kafka_t *rk, topic_state *ts, size_t *nts, size_t cap,
                        entry *e) {
  const char *t = e->dl->d->replay_topic;
  if (!*t) {
    e->skip = "no replay_topic in the dead letter";
    return 0;
  }
  size_t i;
  for (i = 0; i < *nts; i++)
    if (strcmp(ts[i].name, t) == 0) break;
  if (i == *nts) {
    int x = sc_topic_exists(o, rk, t, NULL);
    if (x < 0) return -1;
    if (*nts < cap) {
      ts[*nts] = (topic_state){t, x};
      (*nts)++;
    }
    if (!x) goto missing;
    return 0;
  }
  if (ts[i].exists) return 0;
missing:
  snprintf(e->reason, sizeof e->reason, "replay topic %s does not exist", t);
  e->skip = e->reason;
  return 0;
}

static int write_audit(const sc_opts *o, sc_producer *p, const char *id, entry *es, size_t n,
                       size_t n_replay) {
  char actor[256], host[256], filters[1024];
  sc_resolve_actor(o, actor, sizeof actor);
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
  host[sizeof host - 1] = '\0';
  sc_filters_text(o, filters, sizeof filters);

  Sluice__V1__ReplayAudit a = SLUICE__V1__REPLAY_AUDIT__INIT;
  a.id = (char *)id;
  a.actor = actor;
  a.host = host;
  a.at_ms = sl_now_ms();
  a.filters = filters;
  a.dry_run = o->dry_run;
  Sluice__V1__ReplayAudit__Entry *ev = calloc(n_replay ? n_replay : 1, sizeof *ev);
  Sluice__V1__ReplayAudit__Entry **ep = calloc(n_replay ? n_replay : 1, sizeof *ep);
  uint8_t *buf = NULL;
  int rc = -1;
  if (!ev || !ep) goto out;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (es[i].skip) continue;
    const Sluice__V1__DeadLetter *d = es[i].dl->d;
    sluice__v1__replay_audit__entry__init(&ev[k]);
    ev[k].dlq_partition = es[i].dl->partition;
    ev[k].dlq_offset = es[i].dl->offset;
    ev[k].key = d->key;
    ev[k].target_topic = d->replay_topic;
    ep[k] = &ev[k];
    k++;
  }
  a.n_entries = k;
  a.entries = ep;
  size_t len = sluice__v1__replay_audit__get_packed_size(&a);
  buf = malloc(len ? len : 1);
  if (!buf) goto out;
  sluice__v1__replay_audit__pack(&a, buf);
  sc_delivery d;
  if (sc_produce(p, o->audit_topic, id, strlen(id), buf, len, NULL, NULL, &d)) {
    fprintf(stderr, "sluicectl: producing the audit record to %s: %s; nothing replayed\n",
            o->audit_topic, rd_kafka_err2str(d.err));
    goto out;
  }
  if (sc_producer_wait(p, o->timeout_ms + 2000, NULL) || d.err) {
    char what[300];
    snprintf(what, sizeof what, "audit record not written to %s; nothing replayed", o->audit_topic);
    sc_report_kafka_error(o, what, d.done ? d.err : RD_KAFKA_RESP_ERR__TIMED_OUT);
    goto out;
  }
  rc = 0;
out:
  free(buf);
  free(ev);
  free(ep);
  return rc;
}

/* "reason: count, ..." of the skipped (or failed) entries */
static void reasons_text(const entry *es, size_t n, int failed, char *out, size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    const char *r = failed ? (es[i].skip        ? NULL
                              : es[i].reason[0] ? es[i].reason
                                                : NULL)
                           : es[i].skip;
    if (!r) continue;
    int seen = 0;
    for (size_t j = 0; j < i && !seen; j++) {
      const char *q = failed ? (es[j].skip        ? NULL
                                : es[j].reason[0] ? es[j].reason
                                                  : NULL)
                             : es[j].skip;
      seen = q && strcmp(q, r) == 0;
    }
    if (seen) continue;
    size_t count = 0;
    for (size_t j = i; j < n; j++) {
      const char *q = failed ? (es[j].skip        ? NULL
                                : es[j].reason[0] ? es[j].reason
                                                  : NULL)
                             : es[j].skip;
      if (q && strcmp(q, r) == 0) count++;
    }
    if (used < cap) {
      int w = snprintf(out + used, cap - used, "%s%s: %zu", used ? "; " : "", r, count);
      if (w > 0) used += (size_t)w < cap - used ? (size_t)w : cap - used;
    }
  }
}

static void print_entry(FILE *f, const char *what, const entry *e, const char *tail) {
  char key[160];
  sc_escape(key, sizeof key, e->dl->d->key.data, e->dl->d->key.len);
  fprintf(f, "%s %d:%lld %s%s\n", what, (int)e->dl->partition, (long long)e->dl->offset, key, tail);
}

/* An erased submission's dead letter is not replayed: its payload is
 * sealed with a key that no longer exists (docs/privacy.md). 0, or -1
 * when Redis cannot say (nothing is replayed then). */
static int check_erased(sl_redis *r, entry *e) {
  const Sluice__V1__DeadLetter *d = e->dl->d;
  char sid[64], rkey[SL_DKEY_RKEY_MAX];
  const char *subject = d->subject_key && d->subject_key[0] ? d->subject_key : NULL;
  size_t n = subject ? strlen(subject) : d->key.len;
  const char *k = subject ? subject : (const char *)d->key.data;
  size_t sl = 0;
  while (sl < n && k && k[sl] != '/') sl++;
  if (!k || sl == 0 || sl >= sizeof sid) return 0; /* about no submission */
  memcpy(sid, k, sl);
  sid[sl] = '\0';
  if (sl_dkey_rkey(sid, rkey) != 0) return 0;
  redisReply *rep = sc_redis(r, 2, "GET", rkey);
  if (!rep || rep->type == REDIS_REPLY_ERROR) {
    freeReplyObject(rep);
    return -1;
  }
  if (rep->type == REDIS_REPLY_STRING && strcmp(rep->str, SL_DKEY_ERASED) == 0) e->skip = "erased";
  freeReplyObject(rep);
  return 0;
}

int sc_dlq_replay(const sc_opts *o) {
  sc_dl_set s;
  if (sc_dl_collect(o, &s)) return SC_EXIT_FAIL;
  if (s.n == 0) {
    printf("no dead letters match (%zu read); nothing replayed, no audit written\n", s.total);
    sc_dl_free(&s);
    return SC_EXIT_OK;
  }
  int rc = SC_EXIT_FAIL;
  sc_producer p = {0};
  sl_redis *r = NULL;
  entry *es = calloc(s.n, sizeof *es);
  topic_state ts[64];
  size_t nts = 0, n_replay = 0, n_skip = 0;
  if (!es) goto out;
  if (sc_producer_open(o, &p)) goto out;
  if (!(r = sc_redis_connect(o->redis_url))) {
    fprintf(stderr, "sluicectl: nothing replayed: Redis says which submissions were erased\n");
    goto out;
  }
  for (size_t i = 0; i < s.n; i++) {
    es[i].dl = &s.v[i];
    if (check_target(o, p.rk, ts, &nts, sizeof ts / sizeof ts[0], &es[i])) goto out;
    if (!es[i].skip && check_erased(r, &es[i]) != 0) {
      fprintf(stderr, "sluicectl: nothing replayed: Redis did not say whether %s was erased\n",
              es[i].dl->d->subject_key);
      goto out;
    }
    if (es[i].skip)
      n_skip++;
    else
      n_replay++;
  }
  if (n_replay > 0) {
    /* also primes the producer's metadata: the first produce then goes out at once */
    int x = sc_topic_exists(o, p.rk, o->audit_topic, NULL);
    if (x < 0) goto out;
    if (x == 0) {
      fprintf(stderr, "sluicectl: the audit topic %s does not exist; nothing replayed\n",
              o->audit_topic);
      goto out;
    }
  }
  if (!o->dry_run && n_replay > SC_CONFIRM_ABOVE && !o->yes) {
    fprintf(stderr,
            "sluicectl: %zu dead letters would be replayed; more than %d needs --yes "
            "(look at them first with --dry-run)\n",
            n_replay, SC_CONFIRM_ABOVE);
    rc = SC_EXIT_USAGE;
    goto out;
  }

  char id[37];
  if (sl_uuid7(sl_now_ms(), id)) {
    fprintf(stderr, "sluicectl: no random bytes for the replay id\n");
    goto out;
  }
  if (n_replay > 0 && write_audit(o, &p, id, es, s.n, n_replay)) goto out;

  if (o->dry_run) {
    for (size_t i = 0; i < s.n; i++) {
      char tail[400];
      if (es[i].skip) {
        snprintf(tail, sizeof tail, ": skipped, %s", es[i].skip);
        print_entry(stdout, "skip", &es[i], tail);
      } else {
        snprintf(tail, sizeof tail, " -> %s (%zu bytes)", es[i].dl->d->replay_topic,
                 es[i].dl->d->payload.len);
        print_entry(stdout, "would replay", &es[i], tail);
      }
    }
    char why[1024];
    reasons_text(es, s.n, 0, why, sizeof why);
    printf("dry run: would replay %zu, skipped %zu%s%s%s; audit %s\n", n_replay, n_skip,
           n_skip ? " (" : "", why, n_skip ? ")" : "", n_replay ? id : "none (nothing to replay)");
    rc = n_skip ? SC_EXIT_FAIL : SC_EXIT_OK;
    goto out;
  }

  /* the replay itself */
  p.produced = p.delivered = p.failed = 0;
  struct sigaction sa, old_int, old_term;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sc_bucket b;
  sc_bucket_init(&b, o->rate);
  sc_progress prog;
  sc_progress_init(&prog, n_replay);
  char fatal[512] = "";
  for (size_t i = 0; i < s.n && !interrupted && !fatal[0]; i++) {
    entry *e = &es[i];
    if (e->skip) continue;
    int wait_ms;
    while (!interrupted && (wait_ms = sc_bucket_take(&b)) > 0) {
      rd_kafka_poll(p.rk, wait_ms); /* sleeps until the next token (or a report) */
      sc_progress_update(&prog, p.delivered);
    }
    if (interrupted) break;
    if (rd_kafka_fatal_error(p.rk, fatal, sizeof fatal)) break;
    const Sluice__V1__DeadLetter *d = e->dl->d;
    e->produced = 1;
    char tp[SL_TRACEPARENT_LEN + 1];
    const char *tph = replay_trace(d, id, tp);
    /* the replay counts against the tenant the failed input did */
    const char *hdrs[2 * SC_HEADERS_MAX] = {
        SL_HDR_REPLAY_ID, id,
        SL_TRACE_HDR,     tph,
        SL_HDR_TENANT,    d->tenant && d->tenant[0] ? d->tenant : NULL};
    if (sc_produce_headers(&p, d->replay_topic, d->key.data, d->key.len, d->payload.data,
                           d->payload.len, hdrs, &e->dr))
      snprintf(e->reason, sizeof e->reason, "%s", rd_kafka_err2str(e->dr.err));
    rd_kafka_poll(p.rk, 0);
    sc_progress_update(&prog, p.delivered);
  }
  sc_producer_wait(&p, o->timeout_ms + 2000, &prog);
  sc_progress_update(&prog, p.delivered);
  sc_progress_end(&prog);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);

  size_t ok = 0, failed = 0, not_tried = 0;
  for (size_t i = 0; i < s.n; i++) {
    entry *e = &es[i];
    if (e->skip) {
      char tail[300];
      snprintf(tail, sizeof tail, ": skipped, %s", e->skip);
      print_entry(stderr, "sluicectl: dead letter", e, tail);
      continue;
    }
    if (!e->produced) {
      not_tried++;
      continue;
    }
    if (e->dr.done && !e->dr.err) {
      ok++;
      continue;
    }
    failed++;
    if (!e->reason[0])
      snprintf(e->reason, sizeof e->reason, "%s",
               e->dr.done ? rd_kafka_err2str(e->dr.err) : "no delivery report in time");
    char tail[400];
    snprintf(tail, sizeof tail, ": replay to %s failed: %s", e->dl->d->replay_topic, e->reason);
    print_entry(stderr, "sluicectl: dead letter", e, tail);
  }
  char skipped_why[1024], failed_why[1024];
  reasons_text(es, s.n, 0, skipped_why, sizeof skipped_why);
  reasons_text(es, s.n, 1, failed_why, sizeof failed_why);
  if (interrupted) fprintf(stderr, "sluicectl: interrupted by signal %d\n", (int)interrupted);
  if (fatal[0]) fprintf(stderr, "sluicectl: fatal producer error: %s\n", fatal);
  printf("replayed %zu, skipped %zu%s%s%s", ok, n_skip, n_skip ? " (" : "", skipped_why,
         n_skip ? ")" : "");
  if (failed) printf(", failed %zu (%s)", failed, failed_why);
  if (not_tried) printf(", not attempted %zu", not_tried);
  printf("; audit %s\n", n_replay ? id : "none (nothing to replay)");
  rc = ok == s.n ? SC_EXIT_OK : SC_EXIT_FAIL;
out:
  sc_producer_close(&p);
  sl_redis_free(r);
  free(es);
  sc_dl_free(&s);
  return rc;
}
