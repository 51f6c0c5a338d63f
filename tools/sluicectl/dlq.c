/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dlq.c — reading the dead-letter topic: dlq list, dlq show, dlq audit, and
 * the test/support tool dlq inject.
 *
 * The DLQ is read without joining a consumer group (partitions assigned
 * explicitly from the low to the high watermark, nothing committed). The
 * matching dead letters are ordered by last failure time (oldest first;
 * ties by partition and offset) before --limit applies.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "sluicectl.h"
#include "sluice/sl_err.h"
#include "sluice/sl_file.h"
#include "sluice/sl_pipeline.h"

/* ---- filters and collection -------------------------------------------------- */

int sc_dl_matches(const sc_opts *o, const Sluice__V1__DeadLetter *d) {
  if (o->stage && strcmp(o->stage, d->stage) != 0) return 0;
  if (o->cls && strcmp(o->cls, d->error_class) != 0) return 0;
  if (o->submission) {
    /* the key, or for keyless inputs (storage events) the subject key */
    const char *k = (const char *)d->key.data;
    size_t kl = d->key.len;
    if (kl == 0 && d->subject_key) {
      k = d->subject_key;
      kl = strlen(k);
    }
    size_t n = strlen(o->submission);
    if (kl < n || memcmp(k, o->submission, n) != 0 || (kl > n && k[n] != '/')) return 0;
  }
  if (o->has_since && d->last_failure_ms < o->since_ms) return 0;
  if (o->has_until && d->last_failure_ms > o->until_ms) return 0;
  return 1;
}

typedef struct {
  const sc_opts *o;
  sc_dl_set *s;
  int oom;
} collect_ctx;

static int collect_cb(void *arg, int32_t partition, int64_t offset, const void *payload,
                      size_t len) {
  collect_ctx *c = arg;
  sc_dl_set *s = c->s;
  s->total++;
  Sluice__V1__DeadLetter *d = sluice__v1__dead_letter__unpack(NULL, len, payload);
  if (!d) {
    s->undecodable++;
    fprintf(stderr, "sluicectl: %s %d:%lld is not a DeadLetter; skipped\n", c->o->topic,
            (int)partition, (long long)offset);
    return 0;
  }
  if (!sc_dl_matches(c->o, d)) {
    sluice__v1__dead_letter__free_unpacked(d, NULL);
    return 0;
  }
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    sc_dead_letter *v = realloc(s->v, cap * sizeof *v);
    if (!v) {
      sluice__v1__dead_letter__free_unpacked(d, NULL);
      c->oom = 1;
      return 1;
    }
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = (sc_dead_letter){partition, offset, d};
  return 0;
}

static int cmp_dl(const void *a, const void *b) {
  const sc_dead_letter *x = a, *y = b;
  if (x->d->last_failure_ms != y->d->last_failure_ms)
    return x->d->last_failure_ms < y->d->last_failure_ms ? -1 : 1;
  if (x->partition != y->partition) return x->partition < y->partition ? -1 : 1;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

int sc_dl_collect(const sc_opts *o, sc_dl_set *s) {
  memset(s, 0, sizeof *s);
  collect_ctx c = {o, s, 0};
  int rc = sc_scan_topic(o, o->topic, -1, 0, collect_cb, &c);
  if (c.oom) {
    fprintf(stderr, "sluicectl: out of memory reading %s\n", o->topic);
    rc = SC_EXIT_FAIL;
  }
  if (rc) {
    sc_dl_free(s);
    return SC_EXIT_FAIL;
  }
  if (s->n > 1) qsort(s->v, s->n, sizeof *s->v, cmp_dl);
  if (o->limit > 0 && s->n > (size_t)o->limit) {
    for (size_t i = (size_t)o->limit; i < s->n; i++)
      sluice__v1__dead_letter__free_unpacked(s->v[i].d, NULL);
    s->n = (size_t)o->limit;
  }
  return 0;
}

void sc_dl_free(sc_dl_set *s) {
  for (size_t i = 0; i < s->n; i++) sluice__v1__dead_letter__free_unpacked(s->v[i].d, NULL);
  free(s->v);
  memset(s, 0, sizeof *s);
}

void sc_filters_text(const sc_opts *o, char *out, size_t n) {
  size_t used = 0;
  out[0] = '\0';
#define ADD(...)                                                                                   \
  do {                                                                                             \
    if (used < n) {                                                                                \
      int w_ = snprintf(out + used, n - used, __VA_ARGS__);                                        \
      if (w_ > 0) used += (size_t)w_ < n - used ? (size_t)w_ : n - used;                           \
    }                                                                                              \
  } while (0)
  ADD("topic=%s", o->topic);
  if (o->stage) ADD(" stage=%s", o->stage);
  if (o->cls) ADD(" class=%s", o->cls);
  if (o->submission) ADD(" submission=%s", o->submission);
  char t[40];
  if (o->has_since) {
    sc_fmt_time(o->since_ms, t);
    ADD(" since=%s (%s)", t, o->since_arg);
  }
  if (o->has_until) {
    sc_fmt_time(o->until_ms, t);
    ADD(" until=%s (%s)", t, o->until_arg);
  }
  if (o->limit > 0) ADD(" limit=%ld", o->limit);
#undef ADD
}

/* ---- JSON and text views of a dead letter --------------------------------------- */

static json_t *dl_json(int32_t partition, int64_t offset, const Sluice__V1__DeadLetter *d) {
  char first[40], last[40];
  sc_fmt_time(d->first_failure_ms, first);
  sc_fmt_time(d->last_failure_ms, last);
  json_t *j = json_object();
  if (!j) return NULL;
  json_object_set_new(j, "dlq_partition", json_integer(partition));
  json_object_set_new(j, "dlq_offset", json_integer(offset));
  json_object_set_new(j, "key", sc_json_text(d->key.data, d->key.len));
  json_object_set_new(j, "stage", json_string(d->stage));
  json_object_set_new(j, "error_class", sc_json_text(d->error_class, strlen(d->error_class)));
  json_object_set_new(j, "error_message", sc_json_text(d->error_message, strlen(d->error_message)));
  json_object_set_new(j, "attempts", json_integer(d->attempts));
  json_object_set_new(j, "first_failure", json_string(first));
  json_object_set_new(j, "first_failure_ms", json_integer(d->first_failure_ms));
  json_object_set_new(j, "last_failure", json_string(last));
  json_object_set_new(j, "last_failure_ms", json_integer(d->last_failure_ms));
  json_object_set_new(j, "original",
                      json_pack("{s:o,s:i,s:I}", "topic", sc_json_text(d->topic, strlen(d->topic)),
                                "partition", (int)d->partition, "offset", (json_int_t)d->offset));
  json_object_set_new(j, "replay_topic", sc_json_text(d->replay_topic, strlen(d->replay_topic)));
  json_object_set_new(j, "subject", sc_json_text(d->subject_key, strlen(d->subject_key)));
  json_object_set_new(j, "payload_bytes", json_integer((json_int_t)d->payload.len));
  return j;
}

static void print_json_line(json_t *j) {
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  if (s) puts(s);
  free(s);
}

int sc_dlq_list(const sc_opts *o) {
  sc_dl_set s;
  if (sc_dl_collect(o, &s)) return SC_EXIT_FAIL;
  if (!o->json)
    printf("%-8s %-12s %-20s %-48s %3s  %-20s  %s\n", "POS", "STAGE", "CLASS", "KEY", "TRY",
           "LAST FAILURE", "REASON");
  for (size_t i = 0; i < s.n; i++) {
    const Sluice__V1__DeadLetter *d = s.v[i].d;
    if (o->json) {
      json_t *j = dl_json(s.v[i].partition, s.v[i].offset, d);
      print_json_line(j);
      json_decref(j);
    } else {
      char last[40], pos[32];
      sc_fmt_time_s(d->last_failure_ms, last);
      snprintf(pos, sizeof pos, "%d:%lld", (int)s.v[i].partition, (long long)s.v[i].offset);
      char key[64];
      sc_escape(key, sizeof key, d->key.data, d->key.len);
      printf("%-8s %-12s %-20s %-48s %3u  %s  %s\n", pos, d->stage, d->error_class, key,
             d->attempts, last, d->error_message);
    }
  }
  fprintf(stderr, "%zu of %zu dead letters shown%s\n", s.n, s.total,
          o->limit > 0 && s.n == (size_t)o->limit ? " (--limit reached)" : "");
  sc_dl_free(&s);
  return SC_EXIT_OK;
}

/* ---- dlq show ---------------------------------------------------------------------- */

typedef struct {
  const ProtobufCMessageDescriptor *desc; /* protobuf payload, or */
  int json_text;                          /* S3 event JSON text */
} payload_kind;

/* what a stage's input topic carries, by the pipeline description */
static payload_kind payload_kind_of(const sl_pipeline *p, const char *topic) {
  payload_kind k = {NULL, 0};
  const char *m = sl_pipeline_message_of(p, topic);
  k.desc = sl_pipeline_descriptor(m);
  k.json_text = m && strncmp(m, "json:", 5) == 0;
  return k;
}

typedef struct {
  int32_t partition;
  int64_t offset;
  Sluice__V1__DeadLetter *d;
  int not_dl;
  const sl_pipeline *pipeline;
} show_ctx;

static int show_cb(void *arg, int32_t partition, int64_t offset, const void *payload, size_t len) {
  show_ctx *c = arg;
  c->partition = partition;
  c->offset = offset;
  c->d = sluice__v1__dead_letter__unpack(NULL, len, payload);
  if (!c->d) c->not_dl = 1;
  return 1;
}

/* the decoded payload as JSON (NULL when its type is unknown), its type name,
 * or an error */
static json_t *decode_payload(const sl_pipeline *p, const Sluice__V1__DeadLetter *d,
                              const char **type, const char **error) {
  const char *topic = *d->replay_topic ? d->replay_topic : d->topic;
  payload_kind k = payload_kind_of(p, topic);
  *type = NULL;
  *error = NULL;
  if (k.desc) {
    *type = k.desc->name;
    ProtobufCMessage *m = protobuf_c_message_unpack(k.desc, NULL, d->payload.len, d->payload.data);
    if (!m) {
      *error = "payload does not decode as its topic's message type";
      return NULL;
    }
    json_t *j = sc_pb_to_json(m);
    protobuf_c_message_free_unpacked(m, NULL);
    return j;
  }
  if (k.json_text) {
    *type = "S3 event JSON";
    json_error_t je;
    json_t *j = json_loadb((const char *)d->payload.data, d->payload.len, JSON_DECODE_ANY, &je);
    if (j) return j;
    *error = "payload is not valid JSON";
    return sc_utf8_valid(d->payload.data, d->payload.len)
               ? json_stringn((const char *)d->payload.data, d->payload.len)
               : NULL;
  }
  return NULL;
}

static void show_text(const show_ctx *c, const char *dlq_topic) {
  const Sluice__V1__DeadLetter *d = c->d;
  char first[40], last[40];
  sc_fmt_time(d->first_failure_ms, first);
  sc_fmt_time(d->last_failure_ms, last);
  printf("dead letter     %s %d:%lld\n", dlq_topic, (int)c->partition, (long long)c->offset);
  printf("stage           %s\n", d->stage);
  printf("error class     %s\n", d->error_class);
  printf("error message   %s\n", d->error_message);
  printf("attempts        %u\n", d->attempts);
  printf("first failure   %s (%lld)\n", first, (long long)d->first_failure_ms);
  printf("last failure    %s (%lld)\n", last, (long long)d->last_failure_ms);
  printf("original        %s partition %d offset %lld\n", d->topic, (int)d->partition,
         (long long)d->offset);
  printf("replay topic    %s\n", *d->replay_topic ? d->replay_topic : "(none: cannot be replayed)");
  printf("key             ");
  sc_fput_escaped(stdout, d->key.data, d->key.len, 1024);
  printf("\npayload         %zu bytes\n", d->payload.len);
  const char *type, *error;
  json_t *j = decode_payload(c->pipeline, d, &type, &error);
  if (error) printf("decode error    %s (as %s)\n", error, type);
  if (j && !error) {
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_ENCODE_ANY);
    printf("decoded (%s):\n%s\n", type, s ? s : "?");
    free(s);
  } else if (j && json_is_string(j)) {
    printf("payload text:\n%s\n", json_string_value(j));
  } else {
    size_t n = d->payload.len < 256 ? d->payload.len : 256;
    printf("payload (hex%s):", n < d->payload.len ? ", first 256 bytes" : "");
    for (size_t i = 0; i < n; i++) printf("%s%02x", i % 32 ? " " : "\n  ", d->payload.data[i]);
    printf("\n");
  }
  json_decref(j);
}

static int show_json(const show_ctx *c) {
  const Sluice__V1__DeadLetter *d = c->d;
  json_t *j = dl_json(c->partition, c->offset, d);
  if (!j) return SC_EXIT_FAIL;
  char *k64 = sc_base64(d->key.data, d->key.len), *p64 = sc_base64(d->payload.data, d->payload.len);
  json_object_set_new(j, "key_base64", k64 ? json_string(k64) : json_null());
  json_object_set_new(j, "payload_base64", p64 ? json_string(p64) : json_null());
  free(k64);
  free(p64);
  const char *type, *error;
  json_t *dec = decode_payload(c->pipeline, d, &type, &error);
  json_object_set_new(j, "payload_type", type ? json_string(type) : json_null());
  json_object_set_new(j, "decoded", dec && !error ? dec : json_null());
  if (dec && error) json_decref(dec);
  if (error) json_object_set_new(j, "decode_error", json_string(error));
  char *s = json_dumps(j, JSON_INDENT(2));
  int rc = s ? SC_EXIT_OK : SC_EXIT_FAIL;
  if (s) puts(s);
  free(s);
  json_decref(j);
  return rc;
}

/* PARTITION:OFFSET, both non-negative decimal */
static int parse_position(const char *s, int32_t *p, int64_t *off) {
  const char *colon = strchr(s, ':');
  if (!colon || colon == s || !colon[1]) return -1;
  char part[16];
  size_t n = (size_t)(colon - s);
  if (n >= sizeof part) return -1;
  memcpy(part, s, n);
  part[n] = '\0';
  long pv, ov;
  if (sc_parse_long(part, 0, 1000000, &pv)) return -1;
  if (sc_parse_long(colon + 1, 0, LONG_MAX, &ov)) return -1;
  *p = (int32_t)pv;
  *off = (int64_t)ov;
  return 0;
}

int sc_dlq_show(const sc_opts *o) {
  int32_t p;
  int64_t off;
  if (parse_position(o->args[0], &p, &off)) {
    fprintf(stderr, "sluicectl: bad position \"%s\" (want PARTITION:OFFSET, e.g. 2:17)\n",
            o->args[0]);
    return SC_EXIT_USAGE;
  }
  show_ctx c = {0, 0, NULL, 0, o->pipeline};
  int rc = sc_scan_topic(o, o->topic, p, off, show_cb, &c);
  if (rc == SC_SCAN_NOT_FOUND) {
    fprintf(stderr, "sluicectl: no dead letter at %s %d:%lld\n", o->topic, (int)p, (long long)off);
    return SC_EXIT_FAIL;
  }
  if (rc) return SC_EXIT_FAIL;
  if (c.not_dl) {
    fprintf(stderr, "sluicectl: %s %d:%lld is not a DeadLetter\n", o->topic, (int)p,
            (long long)off);
    return SC_EXIT_FAIL;
  }
  if (o->json)
    rc = show_json(&c);
  else
    show_text(&c, o->topic);
  sluice__v1__dead_letter__free_unpacked(c.d, NULL);
  return rc;
}

/* ---- dlq audit ----------------------------------------------------------------------- */

typedef struct {
  int32_t partition;
  int64_t offset;
  Sluice__V1__ReplayAudit *a;
} audit_rec;

typedef struct {
  const sc_opts *o;
  audit_rec *v;
  size_t n, cap;
  int oom;
} audit_ctx;

static int audit_cb(void *arg, int32_t partition, int64_t offset, const void *payload, size_t len) {
  audit_ctx *c = arg;
  Sluice__V1__ReplayAudit *a = sluice__v1__replay_audit__unpack(NULL, len, payload);
  if (!a) {
    fprintf(stderr, "sluicectl: %s %d:%lld is not a ReplayAudit; skipped\n", c->o->audit_topic,
            (int)partition, (long long)offset);
    return 0;
  }
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 32;
    audit_rec *v = realloc(c->v, cap * sizeof *v);
    if (!v) {
      sluice__v1__replay_audit__free_unpacked(a, NULL);
      c->oom = 1;
      return 1;
    }
    c->v = v;
    c->cap = cap;
  }
  c->v[c->n++] = (audit_rec){partition, offset, a};
  return 0;
}

static int cmp_audit(const void *x, const void *y) {
  const audit_rec *a = x, *b = y;
  if (a->a->at_ms != b->a->at_ms) return a->a->at_ms < b->a->at_ms ? -1 : 1;
  return strcmp(a->a->id, b->a->id);
}

static json_t *audit_json(const audit_rec *r) {
  const Sluice__V1__ReplayAudit *a = r->a;
  char at[40];
  sc_fmt_time(a->at_ms, at);
  json_t *entries = json_array();
  for (size_t i = 0; entries && i < a->n_entries; i++) {
    const Sluice__V1__ReplayAudit__Entry *e = a->entries[i];
    json_array_append_new(entries,
                          json_pack("{s:i,s:I,s:o,s:o}", "dlq_partition", (int)e->dlq_partition,
                                    "dlq_offset", (json_int_t)e->dlq_offset, "key",
                                    sc_json_text(e->key.data, e->key.len), "target_topic",
                                    sc_json_text(e->target_topic, strlen(e->target_topic))));
  }
  return json_pack("{s:o,s:o,s:o,s:s,s:I,s:o,s:b,s:o,s:i,s:I}", "id",
                   sc_json_text(a->id, strlen(a->id)), "actor",
                   sc_json_text(a->actor, strlen(a->actor)), "host",
                   sc_json_text(a->host, strlen(a->host)), "at", at, "at_ms", (json_int_t)a->at_ms,
                   "filters", sc_json_text(a->filters, strlen(a->filters)), "dry_run",
                   (int)a->dry_run, "entries", entries ? entries : json_array(), "audit_partition",
                   (int)r->partition, "audit_offset", (json_int_t)r->offset);
}

int sc_dlq_audit(const sc_opts *o) {
  audit_ctx c = {o, NULL, 0, 0, 0};
  int rc = sc_scan_topic(o, o->audit_topic, -1, 0, audit_cb, &c);
  if (c.oom) {
    fprintf(stderr, "sluicectl: out of memory reading %s\n", o->audit_topic);
    rc = SC_EXIT_FAIL;
  }
  if (!rc) {
    if (c.n > 1) qsort(c.v, c.n, sizeof *c.v, cmp_audit);
    if (!o->json)
      printf("%-24s  %-36s  %-24s  %-7s  %7s  %s\n", "AT", "ID", "ACTOR@HOST", "MODE", "ENTRIES",
             "FILTERS");
    for (size_t i = 0; i < c.n; i++) {
      const Sluice__V1__ReplayAudit *a = c.v[i].a;
      if (o->json) {
        json_t *j = audit_json(&c.v[i]);
        print_json_line(j);
        json_decref(j);
        continue;
      }
      char at[40], who[160];
      sc_fmt_time(a->at_ms, at);
      snprintf(who, sizeof who, "%s@%s", a->actor, a->host);
      printf("%-24s  %-36s  %-24s  %-7s  %7zu  %s\n", at, a->id, who,
             a->dry_run ? "dry-run" : "replay", a->n_entries, a->filters);
      for (size_t k = 0; k < a->n_entries && k < 10; k++) {
        const Sluice__V1__ReplayAudit__Entry *e = a->entries[k];
        printf("    %d:%lld  ", (int)e->dlq_partition, (long long)e->dlq_offset);
        sc_fput_escaped(stdout, e->key.data, e->key.len, 80);
        printf(" -> %s\n", e->target_topic);
      }
      if (a->n_entries > 10) printf("    ... %zu more (--json lists all)\n", a->n_entries - 10);
    }
    fprintf(stderr, "%zu audit records\n", c.n);
  }
  for (size_t i = 0; i < c.n; i++) sluice__v1__replay_audit__free_unpacked(c.v[i].a, NULL);
  free(c.v);
  return rc ? SC_EXIT_FAIL : SC_EXIT_OK;
}

/* ---- dlq inject (test/support tool) ---------------------------------------------------- */

int sc_dlq_inject(const sc_opts *o) {
  if (!o->stage || !o->cls || !o->key || !o->payload_file) {
    fprintf(stderr, "sluicectl: dlq inject needs --stage, --class, --key and --payload-file\n");
    return SC_EXIT_USAGE;
  }
  uint8_t *payload = NULL;
  size_t plen = 0;
  int rrc = sl_file_read(o->payload_file, 8u << 20, &payload, &plen);
  if (rrc) {
    fprintf(stderr, "sluicectl: cannot read %s: %s\n", o->payload_file,
            rrc == SL_ETOOBIG ? "larger than 8 MiB" : strerror(errno));
    return SC_EXIT_FAIL;
  }
  int64_t now = sl_now_ms();
  int64_t failed = o->has_failed_at ? o->failed_at_ms : now;
  Sluice__V1__DeadLetter dl = SLUICE__V1__DEAD_LETTER__INIT;
  dl.stage = (char *)o->stage;
  dl.topic = (char *)(o->origin_topic ? o->origin_topic : o->replay_topic ? o->replay_topic : "");
  dl.partition = -1;
  dl.offset = -1;
  dl.key.data = (uint8_t *)o->key;
  dl.key.len = strlen(o->key);
  dl.payload.data = payload;
  dl.payload.len = plen;
  dl.error_class = (char *)o->cls;
  dl.error_message = (char *)(o->message ? o->message : "injected by sluicectl dlq inject");
  dl.attempts = (uint32_t)(o->attempts > 0 ? o->attempts : 1);
  dl.first_failure_ms = failed;
  dl.last_failure_ms = failed;
  dl.replay_topic = (char *)(o->replay_topic ? o->replay_topic : "");
  size_t n = sluice__v1__dead_letter__get_packed_size(&dl);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    free(payload);
    return SC_EXIT_FAIL;
  }
  sluice__v1__dead_letter__pack(&dl, buf);
  free(payload);

  int rc = SC_EXIT_FAIL;
  sc_producer p;
  size_t count = o->count > 0 ? (size_t)o->count : 1, k = 0;
  sc_delivery *d = calloc(count, sizeof *d);
  if (!d || sc_producer_open(o, &p)) {
    free(d);
    free(buf);
    return SC_EXIT_FAIL;
  }
  int exists = sc_topic_exists(o, p.rk, o->topic, NULL); /* primes the metadata too */
  if (exists == 0) fprintf(stderr, "sluicectl: topic %s does not exist\n", o->topic);
  for (k = 0; exists > 0 && k < count; k++) {
    if (sc_produce(&p, o->topic, o->key, strlen(o->key), buf, n, NULL, NULL, &d[k])) {
      fprintf(stderr, "sluicectl: producing to %s: %s\n", o->topic, rd_kafka_err2str(d[k].err));
      break;
    }
  }
  if (exists > 0 && k == count) {
    sc_producer_wait(&p, o->timeout_ms + 2000, NULL);
    rc = SC_EXIT_OK;
    for (k = 0; k < count; k++) {
      if (d[k].done && !d[k].err) {
        printf("%d:%lld\n", (int)d[k].partition, (long long)d[k].offset);
      } else {
        sc_report_kafka_error(o, "dead letter not delivered",
                              d[k].done ? d[k].err : RD_KAFKA_RESP_ERR__TIMED_OUT);
        rc = SC_EXIT_FAIL;
        break;
      }
    }
  }
  sc_producer_close(&p);
  free(d);
  free(buf);
  return rc;
}
