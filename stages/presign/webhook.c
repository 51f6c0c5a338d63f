/* SPDX-License-Identifier: Apache-2.0 */
/*
 * webhook.c — POST /v1/storage-events: storage upload events over HTTP, for
 * object stores that notify by webhook instead of writing to Kafka.
 *
 * A delivery is checked, then produced unchanged (AWS format) or normalised
 * (Cloudflare R2 format) to the storage-events topic without a message key,
 * as Versity Gateway writes it: the stage runtime reads a message key as
 * "<submission>/<question>" (it names dead letters and FAILED statuses), so
 * a "<bucket>/<key>" key would mislabel them. Ingest then judges the event
 * exactly as it judges events that arrive through Kafka (bucket,
 * submission, declared size and type, a HEAD of the object).
 * The webhook itself decides only whether the sender may speak and whether
 * it is saying something new:
 *
 *   1. off unless webhook.secret is set (404, as for any unknown path);
 *   2. body larger than webhook.max_body -> 413;
 *   3. authentication, one of
 *      - X-Sluice-Signature: t=<unix s>,v1=<hex HMAC-SHA256(secret,
 *        "<t>.<raw body>")> (Stripe style; several v1 allowed; the secret
 *        or webhook.secret_previous while rotating) and t within
 *        webhook.tolerance_s of now, else 401;
 *      - Authorization: Bearer <secret> (stores that can only send a static
 *        header; compared in constant time), else 401;
 *   4. the body must be an S3 event (the parser ingest uses) -> else 400;
 *   5. replay cache in Redis: SET NX of sl:webhook:seen:<mode>:<sha256>
 *      over the signed bytes "<t>.<body>" (TTL 2 x tolerance: older
 *      deliveries fail step 3 anyway) or, for bearer deliveries, over the
 *      body (TTL webhook.replay_window_s). A second delivery of the same
 *      bytes -> 409 replayed (409 in_progress while the first is still
 *      being produced);
 *   6. produce; the reply (202) is sent only after Kafka acknowledges. When
 *      Kafka refuses, the replay claim is deleted and the answer is 503, so
 *      the sender's retry is not mistaken for a replay (a claim whose delete
 *      fails expires after 30 s).
 *
 * Keying the replay cache on the signed bytes rather than on the header
 * text means a replay cannot slip past it by rewriting the header (adding a
 * field, changing the hex case) while reusing a valid signature.
 *
 * @locality the presign loop thread (HTTP, Redis and delivery reports).
 */
#define _POSIX_C_SOURCE 200809L
#include "webhook.h"

#include <ctype.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "lib/s3event.h"
#include "lib/webhook_sig.h"
#include "sluice/sl_aredis.h"
#include "sluice/sl_err.h"
#include "sluice/sl_id.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"

#define W(f) offsetof(sl__webhook_conf, f)
const sl_conf_entry sl__webhook_table[] = {
    {"webhook.secret", SL_CONF_STR, "", W(secret),
     "shared secret of POST /v1/storage-events (HMAC key, or the bearer token); empty: "
     "the webhook is off (404)",
     1},
    {"webhook.secret_previous", SL_CONF_STR, "", W(secret_previous),
     "the previous secret, still accepted while senders are switched over (rotation)", 1},
    {"webhook.tolerance_s", SL_CONF_INT, "300", W(tolerance_s),
     "signed deliveries whose timestamp is further than this from now are refused", 0},
    {"webhook.replay_window_s", SL_CONF_INT, "86400", W(replay_window_s),
     "bearer-token deliveries: how long an identical body is refused as a replay", 0},
    {"webhook.max_body", SL_CONF_INT, "262144", W(max_body),
     "largest event body in bytes (larger: 413)", 0},
};
const size_t sl__webhook_table_len = sizeof sl__webhook_table / sizeof sl__webhook_table[0];

#define MAX_RECORDS 16 /* ingest emits 2 outputs per record into a 32-slot outbox */
#define CLAIM_MS "30000"

struct sl__webhook {
  const sl__webhook_conf *c;
  const sl_common_conf *cc;
  rd_kafka_t *const *producer; /* presign's, lent: the current one (it renews it) */
  void (*on_fatal)(void *ud);
  void *fatal_ud;
  sl_aredis *redis; /* presign's, lent: the replay cache */
  size_t live;      /* deliveries not yet answered */
  int closing;      /* sl__webhook_free ran: w goes with the last delivery */
  void (*done)(void *ud);
  void *done_ud;
  const char *secrets[2];
  size_t nsecrets;
  sl_metric *m_accepted, *m_forged, *m_replayed, *m_invalid, *m_unavailable;
};

/* One delivery between the replay claim and the answer. */
typedef struct {
  sl__webhook *w;
  sl_http_req *req;
  char rkey[96];
  long long ttl_ms;
  char *payload; /* normalised body, or NULL: the request body */
  size_t plen;
  size_t nrec;
  char label[SL__S3KEY_MAX + 300];
} delivery;

/* ---- R2 events into the AWS format ---------------------------------- */

/* S3-style percent-encoding of a raw key (AWS events carry encoded keys;
 * ingest decodes them). */
static int url_encode(const char *in, char *out, size_t len) {
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
    if (isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~' || *p == '/') {
      if (o + 2 > len) return SL_ETOOBIG;
      out[o++] = (char)*p;
    } else {
      if (o + 4 > len) return SL_ETOOBIG;
      snprintf(out + o, 4, "%%%02X", *p);
      o += 3;
    }
  }
  if (o + 1 > len) return SL_ETOOBIG;
  out[o] = '\0';
  return 0;
}

/* One R2 event notification -> one AWS record (NULL + why on error). */
static json_t *r2_record(json_t *ev, char *why, size_t whylen) {
  static const char *actions[][2] = {
      {"PutObject", "s3:ObjectCreated:Put"},
      {"CopyObject", "s3:ObjectCreated:Copy"},
      {"CompleteMultipartUpload", "s3:ObjectCreated:CompleteMultipartUpload"},
      {"DeleteObject", "s3:ObjectRemoved:Delete"},
      {"LifecycleDeletion", "s3:ObjectRemoved:Delete"}};
  const char *action = json_string_value(json_object_get(ev, "action"));
  const char *bucket = json_string_value(json_object_get(ev, "bucket"));
  json_t *obj = json_object_get(ev, "object");
  const char *key = json_string_value(json_object_get(obj, "key"));
  json_t *size = json_object_get(obj, "size");
  const char *etag = json_string_value(json_object_get(obj, "eTag"));
  const char *when = json_string_value(json_object_get(ev, "eventTime"));
  if (!action || !bucket || !key) {
    snprintf(why, whylen, "R2 event lacks action, bucket or object.key");
    return NULL;
  }
  const char *name = NULL;
  for (size_t i = 0; i < sizeof actions / sizeof actions[0]; i++)
    if (strcmp(actions[i][0], action) == 0) name = actions[i][1];
  if (!name) {
    snprintf(why, whylen, "R2 event has an unknown action \"%.64s\"", action);
    return NULL;
  }
  if (size && !json_is_integer(size)) {
    snprintf(why, whylen, "R2 event: object.size must be an integer");
    return NULL;
  }
  char enc[SL__S3KEY_MAX * 3 + 1];
  if (url_encode(key, enc, sizeof enc) != 0) {
    snprintf(why, whylen, "R2 event: object key too long");
    return NULL;
  }
  json_t *o = json_pack("{s:s}", "key", enc);
  if (!o) return NULL;
  if (size) json_object_set(o, "size", size);
  if (etag) json_object_set_new(o, "eTag", json_string(etag));
  return json_pack("{s:s,s:s,s:s,s:s,s:{s:{s:s},s:o}}", "eventVersion", "2.1", "eventSource",
                   "cloudflare:r2", "eventTime", when ? when : "", "eventName", name, "s3",
                   "bucket", "name", bucket, "object", o);
}

/* R2 body (object or array) -> {"Records":[…]} as a malloc'd string. */
static int r2_normalize(json_t *doc, size_t max_records, char **out, size_t *outlen, char *why,
                        size_t whylen) {
  json_t *recs = json_array();
  if (!recs) return SL_ENOMEM;
  size_t n = json_is_array(doc) ? json_array_size(doc) : 1;
  if (n == 0 || n > max_records) {
    json_decref(recs);
    snprintf(why, whylen, "an event carries 1 to %zu records, this one %zu", max_records, n);
    return n ? SL_ETOOBIG : SL_EPARSE;
  }
  for (size_t i = 0; i < n; i++) {
    json_t *ev = json_is_array(doc) ? json_array_get(doc, i) : doc;
    json_t *r = json_is_object(ev) ? r2_record(ev, why, whylen) : NULL;
    if (!r) {
      if (!json_is_object(ev)) snprintf(why, whylen, "R2 batch element %zu is not an object", i);
      json_decref(recs);
      return SL_EPARSE;
    }
    json_array_append_new(recs, r);
  }
  json_t *root = json_pack("{s:o}", "Records", recs);
  *out = root ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  if (!*out) return SL_ENOMEM;
  *outlen = strlen(*out);
  return 0;
}

int sl__webhook_normalize(const void *body, size_t len, size_t max_records, char **out,
                          size_t *outlen, size_t *nrec, char *label, size_t keylen, char *why,
                          size_t whylen) {
  *out = NULL;
  *outlen = 0;
  *nrec = 0;
  label[0] = '\0';
  json_error_t jerr;
  json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!doc) {
    snprintf(why, whylen, "body is not JSON: %s", jerr.text);
    return SL_EPARSE;
  }
  int r2 =
      json_is_array(doc) || (json_is_object(doc) && json_object_get(doc, "action") &&
                             !json_object_get(doc, "Records") && !json_object_get(doc, "Event"));
  int rc = 0;
  if (r2) rc = r2_normalize(doc, max_records, out, outlen, why, whylen);
  json_decref(doc);
  if (rc) return rc;
  /* from here on, exactly what ingest will read */
  const void *b = *out ? *out : body;
  size_t bl = *out ? *outlen : len;
  json_t *root, *recs;
  rc = sl__s3event_load(b, bl, &root, &recs, why, whylen);
  if (rc == 0 && recs && json_array_size(recs) > max_records) {
    snprintf(why, whylen, "an event carries 1 to %zu records, this one %zu", max_records,
             json_array_size(recs));
    rc = SL_ETOOBIG;
  }
  size_t i;
  json_t *r;
  if (rc == 0 && recs) {
    json_array_foreach(recs, i, r) {
      sl__s3rec rec;
      char w2[400];
      if (sl__s3event_record(r, &rec, w2, sizeof w2) != 0) {
        snprintf(why, whylen, "record %zu: %s", i, w2);
        rc = SL_EPARSE;
        break;
      }
      if (i == 0) snprintf(label, keylen, "%s/%s", rec.bucket, rec.key);
    }
    if (rc == 0) *nrec = json_array_size(recs);
  }
  json_decref(root);
  if (rc) {
    free(*out);
    *out = NULL;
    *outlen = 0;
  }
  return rc;
}

/* ---- the endpoint ---------------------------------------------------- */

static void webhook_gone(sl__webhook *w) {
  void (*done)(void *) = w->done;
  void *ud = w->done_ud;
  free(w);
  if (done) done(ud);
}

/* The delivery is answered: the last one of a stopping endpoint frees it. */
static void delivery_free(delivery *d) {
  sl__webhook *w = d->w;
  free(d->payload);
  free(d);
  if (w && --w->live == 0 && w->closing) webhook_gone(w);
}

static void unclaim(delivery *d) {
  const char *argv[] = {"DEL", d->rkey};
  sl_aredis_argv(d->w->redis, NULL, NULL, 2, argv, NULL);
}

static void answer_accepted(delivery *d) {
  char body[96];
  int n = snprintf(body, sizeof body, "{\"accepted\":true,\"records\":%zu}\n", d->nrec);
  sl_http_respond(d->req, 202, "application/json", NULL, body, (size_t)n);
  delivery_free(d);
}

static void on_marked(redisReply *r, void *ud) {
  delivery *d = ud;
  if (!r || r->type == REDIS_REPLY_ERROR)
    sl_log(SL_LOG_WARN, NULL, "webhook: replay record not stored (the claim expires in 30 s)");
  answer_accepted(d);
}

static void on_delivery(rd_kafka_resp_err_t err, void *ctx) {
  delivery *d = ctx;
  sl__webhook *w = d->w;
  if (err) {
    if (sl_kafka_fatal(*w->producer, "presign webhook") && w->on_fatal) w->on_fatal(w->fatal_ud);
    sl_log(SL_LOG_WARN, NULL, "webhook: event %s not stored: kafka: %s", d->label,
           rd_kafka_err2str(err));
    sl_metric_add(w->m_unavailable, 1);
    unclaim(d);
    sl_http_respond_error(d->req, 503, "unavailable", "the event could not be stored; retry",
                          "Retry-After: 2\r\n");
    delivery_free(d);
    return;
  }
  sl_metric_add(w->m_accepted, 1);
  sl_log(SL_LOG_INFO, NULL, "webhook: event for %s accepted (%zu records)", d->label, d->nrec);
  /* the claim becomes the replay record for its full lifetime */
  char ttl[32];
  snprintf(ttl, sizeof ttl, "%lld", d->ttl_ms);
  const char *argv[] = {"SET", d->rkey, "done", "PX", ttl};
  if (sl_aredis_argv(w->redis, on_marked, d, 5, argv, NULL) != 0) answer_accepted(d);
}

static void produce(delivery *d) {
  sl__webhook *w = d->w;
  size_t blen;
  const char *body = sl_http_req_body(d->req, &blen);
  const void *v = d->payload ? d->payload : body;
  size_t vl = d->payload ? d->plen : blen;
  rd_kafka_resp_err_t e = sl_kafka_send(*w->producer, w->cc->topic_storage_events, NULL, 0,
                                        (void *)v, vl, RD_KAFKA_MSG_F_COPY, on_delivery, d);
  if (e) {
    sl_metric_add(w->m_unavailable, 1);
    unclaim(d);
    sl_http_respond_error(d->req, 503, "unavailable", "the event queue is full; retry",
                          "Retry-After: 2\r\n");
    delivery_free(d);
  }
}

static void on_existing(redisReply *r, void *ud) {
  delivery *d = ud;
  if (!r || r->type == REDIS_REPLY_ERROR) {
    sl_http_respond_error(d->req, 503, "unavailable", "replay cache unavailable; retry",
                          "Retry-After: 2\r\n");
  } else if (r->type == REDIS_REPLY_STRING && strcmp(r->str, "done") == 0) {
    sl_metric_add(d->w->m_replayed, 1);
    sl_http_respond_error(d->req, 409, "replayed", "this delivery was received before", NULL);
  } else if (r->type == REDIS_REPLY_NIL) { /* gone meanwhile: let the sender try again */
    sl_http_respond_error(d->req, 409, "in_progress", "this delivery is being processed; retry",
                          "Retry-After: 1\r\n");
  } else {
    sl_metric_add(d->w->m_replayed, 1);
    sl_http_respond_error(d->req, 409, "in_progress", "this delivery is being processed; retry",
                          "Retry-After: 1\r\n");
  }
  delivery_free(d);
}

static void on_claim(redisReply *r, void *ud) {
  delivery *d = ud;
  if (!r || r->type == REDIS_REPLY_ERROR) {
    sl_metric_add(d->w->m_unavailable, 1);
    sl_http_respond_error(d->req, 503, "unavailable", "replay cache unavailable; retry",
                          "Retry-After: 2\r\n");
    delivery_free(d);
  } else if (r->type == REDIS_REPLY_STATUS) { /* claimed: new delivery */
    produce(d);
  } else {
    const char *argv[] = {"GET", d->rkey};
    if (sl_aredis_argv(d->w->redis, on_existing, d, 2, argv, NULL) != 0) {
      sl_http_respond_error(d->req, 503, "unavailable", "replay cache unavailable; retry",
                            "Retry-After: 2\r\n");
      delivery_free(d);
    }
  }
}

static void refuse(sl__webhook *w, sl_http_req *req, int status, const char *code,
                   const char *msg) {
  sl_metric_add(status == 401 ? w->m_forged : w->m_invalid, 1);
  sl_log(SL_LOG_WARN, NULL, "webhook: refused (%d %s): %s", status, code, msg);
  sl_http_respond_error(req, status, code, msg,
                        status == 401 ? "WWW-Authenticate: Bearer realm=\"storage-events\"\r\n"
                                      : NULL);
}

static void serve(sl__webhook *w, sl_http_req *req) {
  size_t blen;
  const char *body = sl_http_req_body(req, &blen);
  if (blen > (size_t)w->c->max_body) {
    char msg[96];
    snprintf(msg, sizeof msg, "an event body is at most %lld bytes", (long long)w->c->max_body);
    refuse(w, req, 413, "body_too_large", msg);
    return;
  }
  /* who is speaking */
  const char *sig = sl_http_req_header(req, "X-Sluice-Signature");
  const char *authz = sl_http_req_header(req, "Authorization");
  char digest[65], mode;
  long long ttl_ms;
  if (sig) {
    int64_t t = 0;
    int rc = sl__webhook_check_signature(sig, body, blen, w->secrets, w->nsecrets, time(NULL),
                                         w->c->tolerance_s, &t);
    if (rc == SL_EPARSE) {
      refuse(w, req, 401, "invalid_signature",
             "X-Sluice-Signature must be t=<unix seconds>,v1=<64 hex digits>");
      return;
    }
    if (rc == SL_ETIMEDOUT) {
      refuse(w, req, 401, "stale_timestamp",
             "the signature's timestamp is outside the tolerance (a replay, or a clock off)");
      return;
    }
    if (rc) {
      refuse(w, req, 401, "invalid_signature", "the signature does not match");
      return;
    }
    /* the replay key covers exactly the signed bytes "<t>.<body>" */
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char h[32];
    unsigned hl = 0;
    char ts[24];
    int tl = snprintf(ts, sizeof ts, "%lld.", (long long)t);
    int ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) &&
             EVP_DigestUpdate(md, ts, (size_t)tl) && EVP_DigestUpdate(md, body, blen) &&
             EVP_DigestFinal_ex(md, h, &hl);
    EVP_MD_CTX_free(md);
    if (!ok) {
      sl_http_respond_error(req, 500, "internal", "hashing failed", NULL);
      return;
    }
    for (int i = 0; i < 32; i++) snprintf(digest + 2 * i, 3, "%02x", h[i]);
    mode = 's';
    ttl_ms = (long long)w->c->tolerance_s * 2000;
  } else if (authz) {
    if (sl__webhook_check_bearer(authz, w->secrets, w->nsecrets) != 0) {
      refuse(w, req, 401, "invalid_token", "the bearer token is not the webhook secret");
      return;
    }
    sl_sha256_hex(body, blen, digest);
    mode = 'b';
    ttl_ms = (long long)w->c->replay_window_s * 1000;
  } else {
    refuse(w, req, 401, "unauthenticated",
           "sign the event (X-Sluice-Signature) or send Authorization: Bearer <secret>");
    return;
  }
  /* what it says */
  delivery *d = calloc(1, sizeof *d);
  if (!d) {
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return;
  }
  char why[512];
  int rc = sl__webhook_normalize(body, blen, MAX_RECORDS, &d->payload, &d->plen, &d->nrec, d->label,
                                 sizeof d->label, why, sizeof why);
  if (rc == SL_ENOMEM) {
    free(d);
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return;
  }
  if (rc) {
    free(d);
    refuse(w, req, 400, rc == SL_ETOOBIG ? "too_many_records" : "invalid_event", why);
    return;
  }
  if (d->nrec == 0) { /* s3:TestEvent: nothing to do */
    delivery_free(d);
    static const char ignored[] = "{\"accepted\":false,\"records\":0}\n";
    sl_http_respond(req, 200, "application/json", NULL, ignored, sizeof ignored - 1);
    return;
  }
  d->w = w;
  w->live++;
  d->req = req;
  d->ttl_ms = ttl_ms > 0 ? ttl_ms : 1000;
  snprintf(d->rkey, sizeof d->rkey, "sl:webhook:seen:%c:%s", mode, digest);
  const char *argv[] = {"SET", d->rkey, "pending", "NX", "PX", CLAIM_MS};
  if (sl_aredis_argv(w->redis, on_claim, d, 6, argv, NULL) != 0) {
    sl_metric_add(w->m_unavailable, 1);
    sl_http_respond_error(req, 503, "unavailable", "replay cache unavailable; retry",
                          "Retry-After: 2\r\n");
    delivery_free(d);
  }
}

int sl__webhook_handle(sl__webhook *w, sl_http_req *req) {
  if (strcmp(sl_http_req_path(req), "/v1/storage-events") != 0) return 0;
  if (!w || !w->redis) {
    sl_http_respond_error(req, 404, "not_found", "no such endpoint", NULL);
    return 1;
  }
  if (strcmp(sl_http_req_method(req), "POST") != 0) {
    sl_http_respond_error(req, 405, "method_not_allowed", "use POST", "Allow: POST\r\n");
    return 1;
  }
  serve(w, req);
  return 1;
}

int sl__webhook_new(sl__webhook **out, const sl__webhook_conf *c, const sl_common_conf *cc,
                    rd_kafka_t *const *producer, sl_aredis *redis, void (*on_fatal)(void *ud),
                    void *fatal_ud, char *err, size_t errlen) {
  *out = NULL;
  if (!c->secret || !c->secret[0]) return 0;
  if (strlen(c->secret) < 16) {
    snprintf(err, errlen, "webhook.secret must be at least 16 bytes");
    return SL_ECONFIG;
  }
  if (c->tolerance_s < 1 || c->tolerance_s > 86400 || c->replay_window_s < 1 || c->max_body < 64) {
    snprintf(err, errlen,
             "webhook.tolerance_s must be 1..86400, webhook.replay_window_s >= 1, "
             "webhook.max_body >= 64");
    return SL_ECONFIG;
  }
  sl__webhook *w = calloc(1, sizeof *w);
  if (!w) return SL_ENOMEM;
  w->c = c;
  w->cc = cc;
  w->secrets[w->nsecrets++] = c->secret;
  if (c->secret_previous && c->secret_previous[0]) w->secrets[w->nsecrets++] = c->secret_previous;
  const char *help = "Storage-event webhook deliveries by outcome";
  w->m_accepted = sl_metrics_counter("sluice_webhook_events_total", "outcome=\"accepted\"", help);
  w->m_forged = sl_metrics_counter("sluice_webhook_events_total", "outcome=\"unauthorized\"", help);
  w->m_replayed = sl_metrics_counter("sluice_webhook_events_total", "outcome=\"replayed\"", help);
  w->m_invalid = sl_metrics_counter("sluice_webhook_events_total", "outcome=\"invalid\"", help);
  w->m_unavailable =
      sl_metrics_counter("sluice_webhook_events_total", "outcome=\"unavailable\"", help);
  w->producer = producer;
  w->on_fatal = on_fatal;
  w->fatal_ud = fatal_ud;
  w->redis = redis;
  *out = w;
  return 0;
}

void sl__webhook_free(sl__webhook *w, void (*done)(void *ud), void *ud) {
  if (!w) return;
  /* deliveries in flight finish: their Redis replies and delivery reports
   * come on presign's loop, and the last one frees w */
  w->closing = 1;
  w->done = done;
  w->done_ud = ud;
  if (w->live == 0) webhook_gone(w);
}
