/* SPDX-License-Identifier: Apache-2.0 */
/*
 * status.c — `sluicectl status`: one screen for a whole deployment.
 *
 * Kafka is the source for what waits: per consuming stage (ingest, stt,
 * grade, materialize) its group "sluice-<stage>" is described (state,
 * members), the committed offsets of its input topics (that group's) and
 * retry topics (group "sluice-<stage>-retry"'s) are set against the high
 * watermarks (lag, sl_kafka_group_lag: the numbers the stages export as
 * sluice_consumer_lag_messages), and for main-input partitions with lag
 * the message at the committed offset is read: its timestamp is the age of
 * the oldest waiting message even when no stage process runs. Rates in/out
 * are the growth of the high watermarks / committed offsets of the main
 * inputs between two samples (1 s apart, or the previous --watch round).
 *
 * The stages' admin endpoints (/metrics, /readyz) add what only a running
 * process knows: in-flight work and circuit-breaker state. Redis adds the
 * shared limiter per provider: how far ahead its schedule is booked
 * (sl:limit:<provider> holds the next free slot, ms) and a provider pause
 * (sl:pause:<provider>, PTTL). Provider cost is the sum over processes of
 * sluice_provider_cost_units_total per stage and plugin; per minute is its
 * growth between the two samples (a restarted process resets its share,
 * so a drop reads as 0).
 *
 * An unreachable Kafka is a failure (exit 1); unreachable admin endpoints
 * or Redis are shown as such.
 */
#define _POSIX_C_SOURCE 200809L
#include <hiredis/hiredis.h>

#include "sluice/sl_redis.h"
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sluicectl.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_pipeline.h"

#define MAX_PARTS 512
#define MAX_PROVIDERS 16
#define MAX_BREAKERS 8
#define MAX_COSTS 16
#define MAX_TENANT_ROWS 128

typedef struct {
  char topic[160];
  int32_t partition;
  int retry;                 /* a retry tier topic */
  int64_t lo, hi, committed; /* committed -1: none */
  int64_t lag;
} part_t;

typedef struct {
  const char *stage;
  const char *const *inputs; /* the pipeline's */
  size_t ninputs;
  char group[64];
  char state[32];
  int members;
  part_t *parts;
  int nparts;
  int64_t lag, retry_backlog;
  int64_t oldest_ts;             /* 0: nothing waiting */
  int64_t sum_hi, sum_committed; /* main inputs, for rates */
  double rate_in, rate_out;
  int have_rates;
  /* from /metrics */
  int processes;
  double in_flight;
  int have_in_flight;
  struct {
    char provider[64];
    int state;
  } breaker[MAX_BREAKERS];
  int nbreakers;
} stage_t;

typedef struct {
  char endpoint[128];
  char stage[64];
  int up, ready;
} proc_t;

typedef struct {
  char name[64];
  int64_t booked_ahead_ms, paused_ms;
  double waits;
  int have_waits;
} provider_t;

typedef struct {
  char stage[64], plugin[64];
  double units, per_min; /* per_min: -1 until there are two samples */
} cost_t;

/* a provider stage's tenant (sluice_tenant_* metrics, replicas summed) */
typedef struct {
  char stage[64], tenant[SL_TENANT_MAX + 1];
  double waiting, scheduled, calling, calls, deferred, done, failed, cost;
} tenant_t;

typedef struct {
  stage_t st[SL_PIPELINE_MAX_STAGES]; /* the stages that read topics */
  int nst;
  proc_t procs[SC_MAX_ADMINS];
  int nprocs;
  provider_t prov[MAX_PROVIDERS];
  int nprov;
  cost_t cost[MAX_COSTS];
  int ncost;
  tenant_t ten[MAX_TENANT_ROWS];
  int nten;
  int redis_ok;
  char redis_err[128];
  int64_t at_ms;
  double mono;
} snapshot;

static void snapshot_init(snapshot *s, const sl_pipeline *p) {
  memset(s, 0, sizeof *s);
  for (size_t i = 0; i < sl_pipeline_nstages(p); i++) {
    const sl_pipeline_stage *ps = sl_pipeline_stage_at(p, i);
    if (!ps->ninputs) continue;
    stage_t *st = &s->st[s->nst++];
    st->stage = ps->name;
    st->inputs = ps->inputs;
    st->ninputs = ps->ninputs;
    sl_pipeline_group(st->group, sizeof st->group, ps->name, 0);
  }
}

static void snapshot_free(snapshot *s) {
  for (int i = 0; i < s->nst; i++) free(s->st[i].parts);
}

/* ---- Kafka ---- */

static rd_kafka_t *consumer(const sc_opts *o, const char *group) {
  rd_kafka_conf_t *c = sc_conf_new(o);
  if (!c) return NULL;
  if (sc_conf_set(c, "group.id", group) || sc_conf_set(c, "enable.auto.commit", "false") ||
      sc_conf_set(c, "enable.auto.offset.store", "false")) {
    rd_kafka_conf_destroy(c);
    return NULL;
  }
  char err[512];
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof err);
  if (!rk) {
    fprintf(stderr, "sluicectl: %s\n", err);
    rd_kafka_conf_destroy(c);
  }
  return rk;
}

static int is_input(const stage_t *st, const char *topic, int *retry) {
  char pre[80];
  snprintf(pre, sizeof pre, "%s.retry.", st->stage);
  *retry = strncmp(topic, pre, strlen(pre)) == 0;
  if (*retry) return 1;
  for (size_t i = 0; i < st->ninputs; i++)
    if (strcmp(st->inputs[i], topic) == 0) return 1;
  return 0;
}

/* timestamps of the messages at the committed offsets of the main-input
 * partitions with lag: the oldest waiting message of each stage */
static void read_oldest(const sc_opts *o, rd_kafka_t *rk, snapshot *s) {
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(16);
  int want = 0;
  for (int i = 0; i < s->nst; i++)
    for (int k = 0; k < s->st[i].nparts; k++) {
      part_t *p = &s->st[i].parts[k];
      if (p->retry || p->lag <= 0) continue;
      /* the same topic may feed two stages (it does not today): read once */
      int dup = 0;
      for (int e = 0; e < l->cnt; e++)
        if (l->elems[e].partition == p->partition && strcmp(l->elems[e].topic, p->topic) == 0)
          dup = 1;
      if (dup) continue;
      rd_kafka_topic_partition_list_add(l, p->topic, p->partition)->offset =
          p->committed >= p->lo ? p->committed : p->lo;
      want++;
    }
  if (want == 0 || rd_kafka_assign(rk, l) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_topic_partition_list_destroy(l);
    return;
  }
  int got = 0;
  double end = sc_mono_s() + (double)(o->timeout_ms < 3000 ? o->timeout_ms : 3000) / 1000.0;
  while (got < want && sc_mono_s() < end) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
    if (!m) continue;
    if (!m->err) {
      const char *t = rd_kafka_topic_name(m->rkt);
      for (int e = 0; e < l->cnt; e++) {
        if (l->elems[e].partition != m->partition || strcmp(l->elems[e].topic, t) != 0 ||
            l->elems[e].opaque)
          continue;
        l->elems[e].opaque = (void *)1;
        got++;
        int64_t ts = rd_kafka_message_timestamp(m, NULL);
        for (int i = 0; i < s->nst; i++) {
          int retry;
          if (ts > 0 && is_input(&s->st[i], t, &retry) && !retry &&
              (!s->st[i].oldest_ts || ts < s->st[i].oldest_ts))
            s->st[i].oldest_ts = ts;
        }
      }
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_assign(rk, NULL);
  rd_kafka_topic_partition_list_destroy(l);
}

static int kafka_sample(const sc_opts *o, snapshot *s) {
  rd_kafka_t *rk = consumer(o, "sluicectl-status");
  if (!rk) return -1;
  const rd_kafka_metadata_t *md = NULL;
  rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 1, NULL, &md, o->timeout_ms);
  if (e) {
    sc_report_kafka_error(o, "cluster metadata", e);
    rd_kafka_destroy(rk);
    return -1;
  }
  int rc = 0;
  for (int i = 0; i < s->nst && rc == 0; i++) {
    stage_t *st = &s->st[i];
    st->parts = calloc(MAX_PARTS, sizeof *st->parts);
    if (!st->parts) {
      rc = -1;
      break;
    }
    for (int t = 0; t < md->topic_cnt; t++) {
      int retry;
      if (md->topics[t].err || !is_input(st, md->topics[t].topic, &retry)) continue;
      for (int p = 0; p < md->topics[t].partition_cnt && st->nparts < MAX_PARTS; p++) {
        part_t *pp = &st->parts[st->nparts++];
        snprintf(pp->topic, sizeof pp->topic, "%s", md->topics[t].topic);
        pp->partition = md->topics[t].partitions[p].id;
        pp->retry = retry;
      }
    }
    /* group: state and members */
    const struct rd_kafka_group_list *gl = NULL;
    snprintf(st->state, sizeof st->state, "-");
    e = rd_kafka_list_groups(rk, st->group, &gl, o->timeout_ms);
    if (!e && gl) {
      for (int g = 0; g < gl->group_cnt; g++)
        if (strcmp(gl->groups[g].group, st->group) == 0) {
          snprintf(st->state, sizeof st->state, "%s",
                   gl->groups[g].state && *gl->groups[g].state ? gl->groups[g].state : "-");
          st->members = gl->groups[g].member_cnt;
        }
      rd_kafka_group_list_destroy(gl);
    }
    /* lag: the inputs' in group sluice-<stage>, the retry tiers' in
     * sluice-<stage>-retry (runtime/src/sl_stage_group.c), counted as the
     * stages count it for sluice_consumer_lag_messages (sl_kafka_group_lag) */
    for (int retry = 0; rc == 0 && retry < 2 && st->nparts; retry++) {
      char gname[80];
      sl_pipeline_group(gname, sizeof gname, st->stage, retry);
      rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(st->nparts);
      sl_kafka_lag *lag = calloc((size_t)st->nparts, sizeof *lag);
      int *at = calloc((size_t)st->nparts, sizeof *at);
      if (!l || !lag || !at) rc = -1;
      for (int k = 0; rc == 0 && k < st->nparts; k++)
        if (st->parts[k].retry == retry) {
          at[l->cnt] = k;
          rd_kafka_topic_partition_list_add(l, st->parts[k].topic, st->parts[k].partition);
        }
      /* the group's committed offsets are read through a consumer in that
       * group that never subscribes: it joins nothing */
      rd_kafka_t *gk = rc == 0 && l->cnt ? consumer(o, gname) : NULL;
      if (rc == 0 && l->cnt && !gk) rc = -1;
      char why[512];
      if (gk && sl_kafka_group_lag(gk, l, o->timeout_ms, lag, why, sizeof why)) {
        sc_report_kafka_reason(o, why);
        rc = -1;
      }
      sl_kafka_group_reader_free(gk);
      for (int k = 0; rc == 0 && k < l->cnt; k++) {
        part_t *pp = &st->parts[at[k]];
        pp->lo = lag[k].lo;
        pp->hi = lag[k].hi;
        pp->committed = lag[k].committed;
        pp->lag = lag[k].lag;
      }
      if (l) rd_kafka_topic_partition_list_destroy(l);
      free(lag);
      free(at);
    }
    if (rc) break;
    for (int k = 0; k < st->nparts; k++) {
      part_t *pp = &st->parts[k];
      int64_t from = pp->committed >= pp->lo ? pp->committed : pp->lo;
      if (pp->retry) {
        st->retry_backlog += pp->lag;
      } else {
        st->lag += pp->lag;
        st->sum_hi += pp->hi;
        st->sum_committed += from;
      }
    }
  }
  rd_kafka_metadata_destroy(md);
  if (rc == 0) read_oldest(o, rk, s);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return rc;
}

/* ---- admin endpoints ---- */

static stage_t *stage_named(snapshot *s, const char *name) {
  for (int i = 0; i < s->nst; i++)
    if (strcmp(s->st[i].stage, name) == 0) return &s->st[i];
  return NULL;
}

static provider_t *provider_named(snapshot *s, const char *name) {
  for (int i = 0; i < s->nprov; i++)
    if (strcmp(s->prov[i].name, name) == 0) return &s->prov[i];
  if (s->nprov == MAX_PROVIDERS || !*name) return NULL;
  provider_t *p = &s->prov[s->nprov++];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->paused_ms = -1;
  p->booked_ahead_ms = -1;
  return p;
}

static cost_t *cost_named(snapshot *s, const char *stage, const char *plugin) {
  for (int i = 0; i < s->ncost; i++)
    if (strcmp(s->cost[i].stage, stage) == 0 && strcmp(s->cost[i].plugin, plugin) == 0)
      return &s->cost[i];
  if (s->ncost == MAX_COSTS) return NULL;
  cost_t *c = &s->cost[s->ncost++];
  snprintf(c->stage, sizeof c->stage, "%s", stage);
  snprintf(c->plugin, sizeof c->plugin, "%s", plugin);
  c->units = 0;
  c->per_min = -1;
  return c;
}

static tenant_t *tenant_named(snapshot *s, const char *stage, const char *tenant) {
  for (int i = 0; i < s->nten; i++)
    if (strcmp(s->ten[i].stage, stage) == 0 && strcmp(s->ten[i].tenant, tenant) == 0)
      return &s->ten[i];
  if (s->nten == MAX_TENANT_ROWS) return NULL;
  tenant_t *t = &s->ten[s->nten++];
  memset(t, 0, sizeof *t);
  snprintf(t->stage, sizeof t->stage, "%s", stage);
  snprintf(t->tenant, sizeof t->tenant, "%s", tenant);
  return t;
}

/* a sluice_tenant_* sample into its row */
static void tenant_sample(snapshot *s, const sc_sample *m, const char *stage) {
  char ten[SL_TENANT_MAX + 1] = "";
  if (strncmp(m->name, "sluice_tenant_", 14) != 0 ||
      sc_label(m->labels, "tenant", ten, sizeof ten) != 0)
    return;
  tenant_t *t = tenant_named(s, stage, ten);
  if (!t) return;
  static const struct {
    const char *name;
    size_t at;
  } cols[] = {
      {"sluice_tenant_waiting", offsetof(tenant_t, waiting)},
      {"sluice_tenant_scheduled", offsetof(tenant_t, scheduled)},
      {"sluice_tenant_calling", offsetof(tenant_t, calling)},
      {"sluice_tenant_calls_total", offsetof(tenant_t, calls)},
      {"sluice_tenant_deferred_total", offsetof(tenant_t, deferred)},
      {"sluice_tenant_cost_units_total", offsetof(tenant_t, cost)},
  };
  char outcome[16];
  for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
    if (strcmp(m->name, cols[i].name) == 0) *(double *)((char *)t + cols[i].at) += m->value;
  if (strcmp(m->name, "sluice_tenant_outcomes_total") == 0 &&
      sc_label(m->labels, "outcome", outcome, sizeof outcome) == 0)
    *(strcmp(outcome, "done") == 0 ? &t->done : &t->failed) += m->value;
}

static void scrape(const sc_opts *o, snapshot *s) {
  for (int a = 0; a < o->nadmins; a++) {
    proc_t *pr = &s->procs[s->nprocs++];
    snprintf(pr->endpoint, sizeof pr->endpoint, "%s", o->admins[a]);
    snprintf(pr->stage, sizeof pr->stage, "?");
    char url[200];
    sc_http_reply r;
    snprintf(url, sizeof url, "http://%s/readyz", o->admins[a]);
    if (sc_http_get(url, NULL, 2000, &r) == 0) pr->ready = r.status == 200;
    sc_http_reply_free(&r);
    snprintf(url, sizeof url, "http://%s/metrics", o->admins[a]);
    if (sc_http_get(url, NULL, 2000, &r) != 0 || r.status != 200) {
      sc_http_reply_free(&r);
      continue;
    }
    pr->up = 1;
    sc_samples ss = {0};
    if (sc_metrics_parse(r.body, &ss) == 0) {
      char v[64];
      for (size_t i = 0; i < ss.n; i++) {
        const sc_sample *m = &ss.v[i];
        if (strcmp(pr->stage, "?") == 0) {
          if (sc_label(m->labels, "stage", v, sizeof v) == 0 &&
              strcmp(m->name, "sluice_in_flight") == 0)
            snprintf(pr->stage, sizeof pr->stage, "%s", v);
          else if (strcmp(m->name, "sluice_submissions_total") == 0)
            snprintf(pr->stage, sizeof pr->stage, "presign");
          else if (strcmp(m->name, "sluice_results_requests_total") == 0)
            snprintf(pr->stage, sizeof pr->stage, "results");
        }
        char stg[64] = "", prov[64] = "";
        sc_label(m->labels, "stage", stg, sizeof stg);
        sc_label(m->labels, "provider", prov, sizeof prov);
        stage_t *st = stage_named(s, stg);
        if (strcmp(m->name, "sluice_in_flight") == 0 && st) {
          st->in_flight += m->value;
          st->have_in_flight = 1;
          st->processes++;
        } else if (strcmp(m->name, "sluice_breaker_state") == 0 && st) {
          int k;
          for (k = 0; k < st->nbreakers; k++)
            if (strcmp(st->breaker[k].provider, prov) == 0) break;
          if (k == st->nbreakers && k < MAX_BREAKERS) {
            snprintf(st->breaker[k].provider, sizeof st->breaker[k].provider, "%s", prov);
            st->breaker[k].state = 0;
            st->nbreakers++;
          }
          /* across replicas the worst: open (1) > half-open (2) > closed */
          if (k < MAX_BREAKERS) {
            int v2 = (int)m->value, cur = st->breaker[k].state;
            if (v2 == 1 || (v2 == 2 && cur == 0)) st->breaker[k].state = v2;
          }
        } else if (strcmp(m->name, "sluice_provider_cost_units_total") == 0) {
          char plug[64] = "";
          sc_label(m->labels, "plugin", plug, sizeof plug);
          cost_t *c = cost_named(s, stg, plug);
          if (c) c->units += m->value;
        } else if (o->tenants && strncmp(m->name, "sluice_tenant_", 14) == 0) {
          tenant_sample(s, m, stg);
        } else if (strcmp(m->name, "sluice_limiter_waits_total") == 0) {
          provider_t *p = provider_named(s, prov);
          if (p) {
            p->waits += m->value;
            p->have_waits = 1;
          }
        }
      }
    }
    sc_samples_free(&ss);
    sc_http_reply_free(&r);
  }
}

/* ---- Redis: the shared limiter ---- */

static void limiter(const sc_opts *o, snapshot *s) {
  sl_redis *c = sc_redis_connect(o->redis_url);
  if (!c) {
    snprintf(s->redis_err, sizeof s->redis_err, "unreachable");
    return;
  }
  s->redis_ok = 1;
  /* providers known to Redis: SCAN (never KEYS) both key families */
  const char *pats[2] = {"sl:limit:*", "sl:pause:*"};
  for (int k = 0; k < 2; k++) {
    char cursor[32] = "0";
    int rounds = 0;
    do {
      redisReply *r = sc_redis(c, 6, "SCAN", cursor, "MATCH", pats[k], "COUNT", "500");
      if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        freeReplyObject(r);
        break;
      }
      snprintf(cursor, sizeof cursor, "%s", r->element[0]->str ? r->element[0]->str : "0");
      for (size_t i = 0; i < r->element[1]->elements; i++)
        provider_named(s, r->element[1]->element[i]->str + 9);
      freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0 && ++rounds < 100);
  }
  redisReply *t = sc_redis(c, 1, "TIME");
  int64_t now = 0;
  if (t && t->type == REDIS_REPLY_ARRAY && t->elements == 2)
    now = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
  freeReplyObject(t);
  for (int i = 0; i < s->nprov; i++) {
    provider_t *p = &s->prov[i];
    char key[160];
    snprintf(key, sizeof key, "sl:limit:%s", p->name);
    redisReply *r = sc_redis(c, 2, "GET", key);
    p->booked_ahead_ms = 0;
    if (r && r->type == REDIS_REPLY_STRING && now) {
      double tat = atof(r->str);
      p->booked_ahead_ms = tat > (double)now ? (int64_t)(tat - (double)now) : 0;
    }
    freeReplyObject(r);
    snprintf(key, sizeof key, "sl:pause:%s", p->name);
    r = sc_redis(c, 2, "PTTL", key);
    p->paused_ms = r && r->type == REDIS_REPLY_INTEGER && r->integer > 0 ? r->integer : 0;
    freeReplyObject(r);
  }
  sl_redis_free(c);
}

static int take(const sc_opts *o, snapshot *s) {
  snapshot_init(s, o->pipeline);
  s->at_ms = sl_now_ms();
  s->mono = sc_mono_s();
  if (kafka_sample(o, s)) return -1;
  scrape(o, s);
  limiter(o, s);
  return 0;
}

static void rates(snapshot *now, const snapshot *before) {
  double dt = now->mono - before->mono;
  if (dt <= 0) return;
  for (int i = 0; i < now->nst; i++) {
    stage_t *a = &now->st[i];
    const stage_t *b = &before->st[i];
    a->rate_in = (double)(a->sum_hi - b->sum_hi) / dt;
    a->rate_out = (double)(a->sum_committed - b->sum_committed) / dt;
    if (a->rate_in < 0) a->rate_in = 0;
    if (a->rate_out < 0) a->rate_out = 0;
    a->have_rates = 1;
  }
  for (int i = 0; i < now->ncost; i++) {
    cost_t *c = &now->cost[i];
    double was = 0;
    for (int k = 0; k < before->ncost; k++)
      if (strcmp(before->cost[k].stage, c->stage) == 0 &&
          strcmp(before->cost[k].plugin, c->plugin) == 0)
        was = before->cost[k].units;
    c->per_min = c->units > was ? (c->units - was) / dt * 60 : 0;
  }
}

/* ---- output ---- */

static const char *breaker_name(int s) { return s == 1 ? "open" : s == 2 ? "half-open" : "closed"; }

static json_t *to_json(const sc_opts *o, const snapshot *s) {
  char at[40];
  sc_fmt_time(s->at_ms, at);
  json_t *stages = json_array(), *procs = json_array(), *provs = json_array();
  for (int i = 0; i < s->nst; i++) {
    const stage_t *st = &s->st[i];
    json_t *parts = json_array(), *br = json_array();
    for (int k = 0; k < st->nparts; k++) {
      const part_t *p = &st->parts[k];
      json_array_append_new(parts, json_pack("{s:s,s:i,s:b,s:I,s:I,s:I}", "topic", p->topic,
                                             "partition", (int)p->partition, "retry_tier", p->retry,
                                             "committed", (json_int_t)p->committed, "high",
                                             (json_int_t)p->hi, "lag", (json_int_t)p->lag));
    }
    for (int k = 0; k < st->nbreakers; k++)
      json_array_append_new(br, json_pack("{s:s,s:s}", "provider", st->breaker[k].provider, "state",
                                          breaker_name(st->breaker[k].state)));
    json_t *j = json_pack(
        "{s:s,s:s,s:s,s:i,s:I,s:I,s:o,s:o,s:i,s:o,s:o}", "stage", st->stage, "group", st->group,
        "group_state", st->state, "members", st->members, "lag", (json_int_t)st->lag,
        "retry_backlog", (json_int_t)st->retry_backlog, "oldest_waiting_s",
        st->oldest_ts ? json_real((double)(s->at_ms - st->oldest_ts) / 1000.0) : json_null(),
        "in_flight", st->have_in_flight ? json_integer((json_int_t)st->in_flight) : json_null(),
        "processes_scraped", st->processes, "breakers", br, "partitions", parts);
    json_object_set_new(j, "rate_in_per_s", st->have_rates ? json_real(st->rate_in) : json_null());
    json_object_set_new(j, "rate_out_per_s",
                        st->have_rates ? json_real(st->rate_out) : json_null());
    json_array_append_new(stages, j);
  }
  for (int i = 0; i < s->nprocs; i++)
    json_array_append_new(procs, json_pack("{s:s,s:s,s:b,s:b}", "endpoint", s->procs[i].endpoint,
                                           "stage", s->procs[i].stage, "up", s->procs[i].up,
                                           "ready", s->procs[i].ready));
  for (int i = 0; i < s->nprov; i++) {
    const provider_t *p = &s->prov[i];
    json_t *j = json_pack("{s:s}", "provider", p->name);
    json_object_set_new(j, "booked_ahead_ms",
                        p->booked_ahead_ms >= 0 ? json_integer(p->booked_ahead_ms) : json_null());
    json_object_set_new(j, "paused_ms",
                        p->paused_ms >= 0 ? json_integer(p->paused_ms) : json_null());
    json_object_set_new(j, "limiter_waits",
                        p->have_waits ? json_integer((json_int_t)p->waits) : json_null());
    json_array_append_new(provs, j);
  }
  json_t *costs = json_array();
  for (int i = 0; i < s->ncost; i++) {
    const cost_t *c = &s->cost[i];
    json_t *j =
        json_pack("{s:s,s:s,s:f}", "stage", c->stage, "plugin", c->plugin, "units", c->units);
    json_object_set_new(j, "units_per_min", c->per_min >= 0 ? json_real(c->per_min) : json_null());
    json_array_append_new(costs, j);
  }
  json_t *root = json_pack("{s:s,s:s,s:o,s:o,s:o,s:o}", "at", at, "brokers", o->brokers, "stages",
                           stages, "processes", procs, "providers", provs, "provider_cost", costs);
  json_object_set_new(root, "redis", s->redis_ok ? json_string("ok") : json_string(s->redis_err));
  if (o->tenants) {
    json_t *ts = json_array();
    for (int i = 0; i < s->nten; i++)
      json_array_append_new(
          ts,
          json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f}", "stage", s->ten[i].stage, "tenant",
                    s->ten[i].tenant, "waiting", (json_int_t)s->ten[i].waiting, "scheduled",
                    (json_int_t)s->ten[i].scheduled, "calling", (json_int_t)s->ten[i].calling,
                    "calls", (json_int_t)s->ten[i].calls, "deferred",
                    (json_int_t)s->ten[i].deferred, "done", (json_int_t)s->ten[i].done, "failed",
                    (json_int_t)s->ten[i].failed, "cost_units", s->ten[i].cost));
    json_object_set_new(root, "tenants", ts);
  }
  return root;
}

static void fmt_age(char *out, size_t n, int64_t ms) {
  if (ms < 0)
    snprintf(out, n, "-");
  else if (ms < 60000)
    snprintf(out, n, "%.1fs", (double)ms / 1000.0);
  else if (ms < 3600000)
    snprintf(out, n, "%lldm%02llds", (long long)(ms / 60000), (long long)(ms / 1000 % 60));
  else
    snprintf(out, n, "%lldh%02lldm", (long long)(ms / 3600000), (long long)(ms / 60000 % 60));
}

static void print_table(const sc_opts *o, const snapshot *s) {
  char at[40];
  sc_fmt_time_s(s->at_ms, at);
  printf("Sluice status at %s (Kafka %s, Redis %s)\n\n", at, o->brokers,
         sc_redis_shown(o->redis_url));
  printf("%-12s %-8s %-13s %8s %9s %9s %8s %8s %9s  %s\n", "STAGE", "MEMBERS", "GROUP", "LAG",
         "RETRYING", "OLDEST", "IN/s", "OUT/s", "IN-FLIGHT", "BREAKER");
  for (int i = 0; i < s->nst; i++) {
    const stage_t *st = &s->st[i];
    char age[32], inr[32], outr[32], inf[32], br[160] = "";
    fmt_age(age, sizeof age, st->oldest_ts ? s->at_ms - st->oldest_ts : -1);
    if (st->have_rates) {
      snprintf(inr, sizeof inr, "%.1f", st->rate_in);
      snprintf(outr, sizeof outr, "%.1f", st->rate_out);
    } else {
      snprintf(inr, sizeof inr, "-");
      snprintf(outr, sizeof outr, "-");
    }
    if (st->have_in_flight)
      snprintf(inf, sizeof inf, "%.0f", st->in_flight);
    else
      snprintf(inf, sizeof inf, "-");
    for (int k = 0; k < st->nbreakers; k++) {
      size_t l = strlen(br);
      snprintf(br + l, sizeof br - l, "%s%s %s", k ? ", " : "", st->breaker[k].provider,
               breaker_name(st->breaker[k].state));
    }
    printf("%-12s %-8d %-13s %8lld %9lld %9s %8s %8s %9s  %s\n", st->stage, st->members, st->state,
           (long long)st->lag, (long long)st->retry_backlog, age, inr, outr, inf, br[0] ? br : "-");
  }
  printf("\n%-24s %14s %10s %14s\n", "PROVIDER", "BOOKED-AHEAD", "PAUSED", "LIMITER-WAITS");
  if (!s->redis_ok)
    printf("(Redis at %s unreachable: limiter unknown)\n", sc_redis_shown(o->redis_url));
  for (int i = 0; i < s->nprov; i++) {
    const provider_t *p = &s->prov[i];
    char b[32], pa[32], w[32];
    fmt_age(b, sizeof b, p->booked_ahead_ms);
    fmt_age(pa, sizeof pa, p->paused_ms > 0 ? p->paused_ms : -1);
    if (p->have_waits)
      snprintf(w, sizeof w, "%.0f", p->waits);
    else
      snprintf(w, sizeof w, "-");
    printf("%-24s %14s %10s %14s\n", p->name, b, pa, w);
  }
  if (s->nprov == 0) printf("(none seen)\n");
  printf("\n%-12s %-16s %16s %14s\n", "COST: STAGE", "PLUGIN", "UNITS", "UNITS/min");
  for (int i = 0; i < s->ncost; i++) {
    const cost_t *c = &s->cost[i];
    char pm[32] = "-";
    if (c->per_min >= 0) snprintf(pm, sizeof pm, "%.3f", c->per_min);
    printf("%-12s %-16s %16.3f %14s\n", c->stage, c->plugin, c->units, pm);
  }
  if (s->ncost == 0) printf("(no provider cost seen: no provider stage scraped)\n");
  if (o->tenants) {
    printf("\n%-12s %-24s %8s %9s %7s %9s %9s %9s %7s %12s\n", "TENANT: STAGE", "TENANT", "WAITING",
           "SCHEDULED", "CALLING", "CALLS", "DEFERRED", "DONE", "FAILED", "COST");
    for (int i = 0; i < s->nten; i++) {
      const tenant_t *t = &s->ten[i];
      printf("%-12s %-24s %8.0f %9.0f %7.0f %9.0f %9.0f %9.0f %7.0f %12.3f\n", t->stage, t->tenant,
             t->waiting, t->scheduled, t->calling, t->calls, t->deferred, t->done, t->failed,
             t->cost);
    }
    if (s->nten == 0) printf("(no tenant seen at a provider's limiter)\n");
  }
  printf("\n%-28s %-12s %-4s %s\n", "ADMIN ENDPOINT", "PROCESS", "UP", "READY");
  for (int i = 0; i < s->nprocs; i++)
    printf("%-28s %-12s %-4s %s\n", s->procs[i].endpoint, s->procs[i].stage,
           s->procs[i].up ? "yes" : "no", s->procs[i].ready ? "yes" : "no");
  fflush(stdout);
}

static volatile sig_atomic_t stop_watch;
static void on_sigint(int sig) {
  (void)sig;
  stop_watch = 1;
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

int sc_status(const sc_opts *op) {
  sc_opts o = *op;
  if (o.nadmins == 0) { /* the layout tools/stages uses: one port per pipeline stage */
    const char *b = getenv("STAGES_ADMIN_PORT_BASE");
    long base = b && *b ? atol(b) : 9180;
    if (base <= 0 || base > 65530) base = 9180;
    for (size_t i = 0; i < sl_pipeline_nstages(o.pipeline) && o.nadmins < SC_MAX_ADMINS; i++)
      snprintf(o.admins[o.nadmins++], sizeof o.admins[0], "127.0.0.1:%ld", base + i);
  }
  snapshot *prev = calloc(1, sizeof *prev), *cur = calloc(1, sizeof *cur);
  if (!prev || !cur) {
    free(prev);
    free(cur);
    return SC_EXIT_FAIL;
  }
  int rc = SC_EXIT_OK, have_prev = 0;
  if (!o.watch) { /* one screen: a first sample for the rates, 1 s earlier */
    if (take(&o, prev) != 0) {
      rc = SC_EXIT_FAIL;
      goto out;
    }
    have_prev = 1;
    sleep_s(1.0);
  } else {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
  }
  int tty = isatty(STDOUT_FILENO);
  for (;;) {
    if (take(&o, cur) != 0) {
      rc = SC_EXIT_FAIL;
      break;
    }
    if (have_prev) rates(cur, prev);
    if (o.json) {
      json_t *j = to_json(&o, cur);
      char *txt = json_dumps(j, o.watch ? JSON_COMPACT : JSON_INDENT(2));
      json_decref(j);
      if (txt) printf("%s\n", txt);
      free(txt);
      fflush(stdout);
    } else {
      if (o.watch && tty) printf("\033[H\033[2J");
      print_table(&o, cur);
      if (o.watch) printf("\n(every %d s; Ctrl-C stops)\n", o.interval_s);
    }
    if (!o.watch) break;
    snapshot_free(prev);
    snapshot *t = prev;
    prev = cur;
    cur = t;
    memset(cur, 0, sizeof *cur);
    have_prev = 1;
    for (int i = 0; i < o.interval_s * 10 && !stop_watch; i++) sleep_s(0.1);
    if (stop_watch) break;
  }
out:
  snapshot_free(prev);
  snapshot_free(cur);
  free(prev);
  free(cur);
  return rc;
}
