/* SPDX-License-Identifier: Apache-2.0 */
/*
 * submission.c — `sluicectl submission ID`: everything the pipeline holds
 * about one submission, for a support ticket.
 *
 * Reads every topic a submission passes through — submissions,
 * storage-events, stt.requests, grade.requests, results, the dead-letter
 * topic and every retry tier (<stage>.retry.*) — from the low to the high
 * watermark (no consumer group, nothing committed), keeps the messages
 * whose key starts with the id or whose payload contains it (storage events
 * are JSON naming the object key), decodes each with the message type of
 * its topic, and prints them in time order; then the submission's view in
 * Redis (hash sl:sub:<id>) and what each question cost in provider units
 * (the view's "cost": every attempt of every stage). A whole-topic read is what a support tool can
 * afford; it is bounded by the topics' retention.
 *
 * Exit status: 0 when anything was found, 1 when nothing was (or Kafka is
 * unreachable), 2 for an id that is not a UUID.
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <hiredis/hiredis.h>

#include "sluice/sl_redis.h"
#include <stdlib.h>
#include <string.h>

#include "sluicectl.h"
#include "lib/view.h"
#include "sluice/sl_pipeline.h"

typedef enum { T_RAW, T_SUBMISSION, T_UPLOAD, T_TRANSCRIPT, T_STATUS, T_DEAD, T_JSON } kind_t;

typedef struct {
  const char *sid;
  const char *topic;
  kind_t kind;
  json_t *events; /* array */
} scan_ctx;

int sc_is_uuid(const char *s) {
  if (strlen(s) != 36) return 0;
  for (int i = 0; i < 36; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (s[i] != '-') return 0;
    } else if (!isxdigit((unsigned char)s[i])) {
      return 0;
    }
  }
  return 1;
}

static const void *find_bytes(const void *hay, size_t hl, const char *needle) {
  size_t nl = strlen(needle);
  if (!hay || hl < nl) return NULL;
  const char *h = hay;
  for (size_t i = 0; i + nl <= hl; i++)
    if (h[i] == needle[0] && memcmp(h + i, needle, nl) == 0) return h + i;
  return NULL;
}

static json_t *decode(kind_t k, const void *p, size_t len, char *summary, size_t n) {
  ProtobufCMessage *m = NULL;
  summary[0] = '\0';
  switch (k) {
  case T_SUBMISSION: {
    Sluice__V1__SubmissionCreated *s = sluice__v1__submission_created__unpack(NULL, len, p);
    if (s) snprintf(summary, n, "submission created, %zu question(s)", s->n_questions);
    m = (ProtobufCMessage *)s;
    break;
  }
  case T_UPLOAD: {
    Sluice__V1__UploadCompleted *u = sluice__v1__upload_completed__unpack(NULL, len, p);
    if (u)
      snprintf(summary, n, "q%u uploaded: %s (%llu bytes)", u->question_no, u->object_key,
               (unsigned long long)u->size);
    m = (ProtobufCMessage *)u;
    break;
  }
  case T_TRANSCRIPT: {
    Sluice__V1__Transcript *t = sluice__v1__transcript__unpack(NULL, len, p);
    if (t)
      snprintf(summary, n, "q%u transcribed (%.1f s): %.60s",
               t->upload ? t->upload->question_no : 0, t->duration_s, t->text);
    m = (ProtobufCMessage *)t;
    break;
  }
  case T_STATUS: {
    Sluice__V1__QuestionStatus *s = sluice__v1__question_status__unpack(NULL, len, p);
    if (s) {
      const ProtobufCEnumValue *ev =
          protobuf_c_enum_descriptor_get_value(&sluice__v1__question_state__descriptor, s->state);
      int l = snprintf(summary, n, "q%u %s (by %s)%s%s", s->question_no, ev ? ev->name : "?",
                       s->stage, s->error_class && *s->error_class ? ": " : "",
                       s->error_class && *s->error_class ? s->error_class : "");
      if (s->cost_units > 0 && l > 0 && (size_t)l < n)
        snprintf(summary + l, n - (size_t)l, ", cost %.3f units", s->cost_units);
    }
    m = (ProtobufCMessage *)s;
    break;
  }
  case T_DEAD: {
    Sluice__V1__DeadLetter *d = sluice__v1__dead_letter__unpack(NULL, len, p);
    if (d)
      snprintf(summary, n, "dead letter from %s (%s): %.80s", d->stage, d->error_class,
               d->error_message);
    m = (ProtobufCMessage *)d;
    break;
  }
  case T_JSON: {
    json_t *j = json_loadb(p, len, 0, NULL);
    if (j) {
      json_t *rec = json_array_get(json_object_get(j, "Records"), 0);
      const char *ev = json_string_value(json_object_get(rec, "eventName"));
      const char *key = json_string_value(
          json_object_get(json_object_get(json_object_get(rec, "s3"), "object"), "key"));
      snprintf(summary, n, "storage event %s %s", ev ? ev : "?", key ? key : "");
      return j;
    }
    break;
  }
  case T_RAW:
    break;
  }
  if (m) {
    json_t *j = sc_pb_to_json(m);
    protobuf_c_message_free_unpacked(m, NULL);
    return j;
  }
  snprintf(summary, n, "%zu bytes (not decoded)", len);
  return json_null();
}

static int on_msg(void *arg, const rd_kafka_message_t *m) {
  scan_ctx *c = arg;
  size_t sl = strlen(c->sid);
  int by_key = m->key && m->key_len >= sl && memcmp(m->key, c->sid, sl) == 0;
  if (!by_key && !find_bytes(m->payload, m->len, c->sid)) return 0;
  char summary[256];
  json_t *data = decode(c->kind, m->payload, m->len, summary, sizeof summary);
  json_t *e = json_pack("{s:s,s:i,s:I,s:I,s:s}", "topic", c->topic, "partition", (int)m->partition,
                        "offset", (json_int_t)m->offset, "timestamp_ms",
                        (json_int_t)rd_kafka_message_timestamp(m, NULL), "summary", summary);
  json_object_set_new(e, "key", m->key ? sc_json_text(m->key, m->key_len) : json_null());
  json_object_set_new(e, "message", data ? data : json_null());
  json_array_append_new(c->events, e);
  return 0;
}

static int by_time(const void *a, const void *b) {
  json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
  json_int_t tx = json_integer_value(json_object_get(x, "timestamp_ms"));
  json_int_t ty = json_integer_value(json_object_get(y, "timestamp_ms"));
  return tx < ty ? -1 : tx > ty;
}

/* how to show a topic's messages: by the message type the pipeline gives
 * it (a retry tier: its stage's input type; several: raw) */
static kind_t kind_of(const sl_pipeline *p, const char *topic) {
  const char *m = sl_pipeline_message_of(p, topic);
  static const struct {
    const char *message;
    kind_t kind;
  } by[] = {{"sluice.v1.SubmissionCreated", T_SUBMISSION},
            {"sluice.v1.UploadCompleted", T_UPLOAD},
            {"sluice.v1.Transcript", T_TRANSCRIPT},
            {"sluice.v1.QuestionStatus", T_STATUS},
            {"sluice.v1.DeadLetter", T_DEAD},
            {"json:s3-event", T_JSON}};
  for (size_t i = 0; m && i < sizeof by / sizeof by[0]; i++)
    if (strcmp(by[i].message, m) == 0) return by[i].kind;
  return T_RAW;
}

/* a retry tier of one of the pipeline's stages: any tier, not only the
 * pipeline's own (the stages may run with other retry.tiers) */
static int is_retry_tier(const sl_pipeline *p, const char *topic) {
  return sl_pipeline_retry_stage(p, topic) != NULL;
}

/* {"questions": {"<no>": units}, "total": units} from the view's q<no>
 * fields (a question without "cost" cost nothing so far) */
static json_t *view_cost(json_t *view) {
  json_t *qs = json_object();
  double total = 0;
  const char *f;
  json_t *val;
  json_object_foreach(view, f, val) {
    if (f[0] != 'q' || !json_is_object(val)) continue;
    double c = json_number_value(json_object_get(val, "cost"));
    json_object_set_new(qs, f + 1, json_real(c));
    total += c;
  }
  return json_pack("{s:o,s:f}", "questions", qs, "total", total);
}

/* o's string member k, or "?" */
static const char *str_of(json_t *o, const char *k) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : "?";
}

/* each graded question of the view: its level, score and every criterion
 * with its evidence (the grader's comment), in question order */
static void print_grades(json_t *view) {
  int any = 0;
  for (int no = 1; no <= 999; no++) {
    char k[8];
    snprintf(k, sizeof k, "q%d", no);
    json_t *q = json_object_get(view, k), *g = json_object_get(q, "grade");
    if (!json_is_object(g)) continue;
    if (!any++) printf("\nGrades:\n");
    printf("  q%d %s %.1f (%s)\n", no, str_of(g, "level"),
           json_number_value(json_object_get(g, "score")), str_of(g, "engine"));
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(g, "criteria"), i, c) {
      const char *why = json_string_value(json_object_get(c, "comment"));
      printf("     %-10s %5.1f  %s\n", str_of(c, "name"),
             json_number_value(json_object_get(c, "score")), why ? why : "");
    }
  }
}

static json_t *redis_view(const sc_opts *o, const char *sid, int *found) {
  *found = 0;
  sl_redis *c = sc_redis_connect(o->redis_url);
  if (!c) return json_string("Redis unreachable");
  char key[300];
  sl__view_sub_key(key, sizeof key, sid);
  redisReply *r = sc_redis(c, 2, "HGETALL", key);
  json_t *v = json_object();
  if (r && r->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
      const char *f = r->element[i]->str;
      const char *val = r->element[i + 1]->str;
      if (!f || !val) continue;
      if (strcmp(f, "token") == 0) continue; /* a credential digest: not for tickets */
      json_t *parsed =
          (f[0] == 'q' || strncmp(f, "spec", 4) == 0) ? json_loads(val, 0, NULL) : NULL;
      json_object_set_new(v, f, parsed ? parsed : json_string(val));
      *found = 1;
    }
  }
  freeReplyObject(r);
  r = sc_redis(c, 2, "TTL", key);
  if (r && r->type == REDIS_REPLY_INTEGER && *found)
    json_object_set_new(v, "ttl_s", json_integer(r->integer));
  freeReplyObject(r);
  sl_redis_free(c);
  return v;
}

int sc_submission(const sc_opts *o) {
  const char *sid = o->args[0];
  if (!sc_is_uuid(sid)) {
    fprintf(stderr,
            "sluicectl: \"%s\" is not a submission id (a UUID like "
            "0190f5a2-7c1e-7b3a-9c2d-1e2f3a4b5c6d)\n(sluicectl --help for usage)\n",
            sid);
    return SC_EXIT_USAGE;
  }
  struct {
    const char *topic;
    kind_t kind;
  } topics[80];
  int nt = 0;
  /* every topic of the pipeline, the dead letters (--topic), and the retry
   * tiers below (those that exist) */
  for (size_t i = 0; i < sl_pipeline_ntopics(o->pipeline) && nt < 16; i++) {
    topics[nt].topic = sl_pipeline_topic_at(o->pipeline, i)->name;
    topics[nt].kind = kind_of(o->pipeline, topics[nt].topic);
    nt++;
  }
  topics[nt].topic = o->topic;
  topics[nt++].kind = T_DEAD;

  /* the retry tiers that exist */
  rd_kafka_conf_t *conf = sc_conf_new(o);
  char err[512];
  rd_kafka_t *rk = conf ? rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err) : NULL;
  if (!rk) {
    if (conf) {
      fprintf(stderr, "sluicectl: %s\n", err);
      rd_kafka_conf_destroy(conf);
    }
    return SC_EXIT_FAIL;
  }
  const rd_kafka_metadata_t *md = NULL;
  rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 1, NULL, &md, o->timeout_ms);
  if (e) {
    sc_report_kafka_error(o, "cluster metadata", e);
    rd_kafka_destroy(rk);
    return SC_EXIT_FAIL;
  }
  char retry_names[48][160];
  int nr = 0;
  for (int t = 0; t < md->topic_cnt && nr < 48; t++) {
    const char *name = md->topics[t].topic;
    if (!is_retry_tier(o->pipeline, name)) continue;
    snprintf(retry_names[nr], sizeof retry_names[0], "%s", name);
    topics[nt].topic = retry_names[nr++];
    topics[nt].kind = kind_of(o->pipeline, name);
    nt++;
  }
  /* skip the main topics that do not exist (an empty deployment) */
  int exists[80];
  for (int i = 0; i < nt; i++) {
    exists[i] = 0;
    for (int t = 0; t < md->topic_cnt; t++)
      if (!md->topics[t].err && strcmp(md->topics[t].topic, topics[i].topic) == 0) exists[i] = 1;
  }
  rd_kafka_metadata_destroy(md);
  rd_kafka_destroy(rk);

  json_t *events = json_array();
  for (int i = 0; i < nt; i++) {
    if (!exists[i]) continue;
    scan_ctx c = {sid, topics[i].topic, topics[i].kind, events};
    if (sc_scan_topic_msgs(o, topics[i].topic, on_msg, &c) != 0) {
      json_decref(events);
      return SC_EXIT_FAIL;
    }
  }
  size_t n = json_array_size(events);
  json_t **v = calloc(n ? n : 1, sizeof *v);
  for (size_t i = 0; v && i < n; i++) v[i] = json_incref(json_array_get(events, i));
  if (v) qsort(v, n, sizeof *v, by_time);
  json_t *sorted = json_array();
  for (size_t i = 0; v && i < n; i++) json_array_append_new(sorted, v[i]);
  free(v);
  json_decref(events);

  int in_redis = 0;
  json_t *view = redis_view(o, sid, &in_redis);
  int rc = (n > 0 || in_redis) ? SC_EXIT_OK : SC_EXIT_FAIL;
  if (o->json) {
    json_t *root =
        json_pack("{s:s,s:O,s:O}", "submission_id", sid, "events", sorted, "redis", view);
    if (in_redis) json_object_set_new(root, "cost_units", view_cost(view));
    char *txt = json_dumps(root, JSON_INDENT(2));
    if (txt) printf("%s\n", txt);
    free(txt);
    json_decref(root);
  } else {
    printf("submission %s: %zu message(s) in Kafka\n\n", sid, n);
    if (n) printf("%-24s %-22s %-10s %-12s %s\n", "TIME", "TOPIC", "P:OFFSET", "KEY", "WHAT");
    size_t i;
    json_t *ev;
    json_array_foreach(sorted, i, ev) {
      char t[40], po[32];
      sc_fmt_time(json_integer_value(json_object_get(ev, "timestamp_ms")), t);
      snprintf(po, sizeof po, "%d:%lld", (int)json_integer_value(json_object_get(ev, "partition")),
               (long long)json_integer_value(json_object_get(ev, "offset")));
      const char *key = json_string_value(json_object_get(ev, "key"));
      const char *slash = key ? strchr(key, '/') : NULL;
      printf("%-24s %-22s %-10s %-12s %s\n", t, json_string_value(json_object_get(ev, "topic")), po,
             slash ? slash
             : key ? "(id)"
                   : "-",
             json_string_value(json_object_get(ev, "summary")));
    }
    char key[SL__VIEW_KEY_MAX];
    sl__view_sub_key(key, sizeof key, sid);
    printf("\nRedis %s: ", key);
    if (json_is_string(view)) {
      printf("%s\n", json_string_value(view));
    } else if (!in_redis) {
      printf("absent (expired, or never recorded)\n");
    } else {
      printf("\n");
      const char *f;
      json_t *val;
      json_object_foreach(view, f, val) {
        char *txt = json_dumps(val, JSON_COMPACT | JSON_ENCODE_ANY);
        printf("  %-16s %s\n", f, txt ? txt : "?");
        free(txt);
      }
      json_t *c = view_cost(view), *qs = json_object_get(c, "questions");
      printf("\nProvider cost (units, every attempt):");
      /* in question order (an object's keys come in hash order) */
      for (int no = 1, left = (int)json_object_size(qs); left > 0 && no <= 999; no++) {
        char k[8];
        snprintf(k, sizeof k, "%d", no);
        json_t *q = json_object_get(qs, k);
        if (!q) continue;
        printf(" q%d %.3f,", no, json_number_value(q));
        left--;
      }
      printf(" total %.3f\n", json_number_value(json_object_get(c, "total")));
      json_decref(c);
      print_grades(view);
    }
    if (rc) fprintf(stderr, "sluicectl: nothing known about submission %s\n", sid);
  }
  json_decref(sorted);
  json_decref(view);
  return rc;
}
