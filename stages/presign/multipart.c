/* SPDX-License-Identifier: Apache-2.0 */
/*
 * multipart.c — resumable uploads for large answers: S3 multipart with
 * presigned part URLs, behind the endpoints the Uppy @uppy/aws-s3 plugin
 * expects from a Companion server (same paths, same JSON), so an Uppy
 * client works unchanged with companionUrl = the presign base URL:
 *
 *   POST   /s3/multipart                      create   -> {key,uploadId,bucket}
 *   GET    /s3/multipart/{id}/{part}?key=      sign one -> {url,expires}
 *   GET    /s3/multipart/{id}/batch?key=&partNumbers=1,2 -> {presignedUrls:{n:url}}
 *   GET    /s3/multipart/{id}?key=             list     -> [{PartNumber,ETag,Size}]
 *   POST   /s3/multipart/{id}/complete?key=    {parts:[{PartNumber,ETag}]} -> {location}
 *   DELETE /s3/multipart/{id}?key=             abort    -> {}
 * (the same under /v1). Errors are Sluice's {"error":{"code","message"}}.
 *
 * Binding to Sluice: a multipart upload is only ever for a question of an
 * existing submission, to the object key Sluice assigned it. The client
 * proves it may upload with the submission's results token
 * ("Authorization: Bearer <token>", Uppy's companionHeaders); create names
 * the question with metadata {submission_id, question_no} and gets that
 * question's key back; every later call passes the key, which names the
 * submission and question again. The token is checked against the hash
 * materialize keeps (sl:sub:<sid>: token, spec<no>); an unknown submission
 * and a wrong token are the same 404. A submission becomes visible there a
 * moment after its 201 (materialize lags presign by milliseconds), so that
 * 404 carries Retry-After: 1.
 *
 * The declared content type and size hold as for single PUTs: create uses
 * the declared content type (the client's "type" is ignored), and complete
 * first lists the stored parts and refuses (409 size_mismatch, nothing
 * changed: the client may upload what is missing and complete again) unless
 * the parts being completed add up to exactly the declared size. Part
 * numbers are 1..10000 (400 otherwise); an unknown upload id is 404 (sign
 * and batch ask storage with a one-part ListParts, so a URL is never signed
 * for an upload that does not exist). Part URLs expire like the PUT URLs;
 * sign again when one has (the "re-sign on demand" of Uppy).
 *
 * Nothing blocks the loop: Redis through sl_aredis, storage through
 * sl_s3's calls on sl_httpc (curl multi on the loop).
 * @locality single thread (the presign loop).
 */
#define _POSIX_C_SOURCE 200809L
#include "multipart.h"
#include "lib/auth.h"
#include "lib/s3event.h"
#include "lib/view.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice/sl_aredis.h"
#include "sluice/sl_err.h"
#include "sluice/sl_httpc.h"
#include "sluice/sl_id.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"

#define MAX_BATCH 1000 /* part numbers signed by one batch request */
#define LIST_PAGE 1000

struct sl__mpu {
  uv_loop_t *loop;
  sl_sigv4 *sig;
  const sl_s3_target *target;
  const sl_s3_conf *s3;
  sl_s3_client s3c;
  sl_httpc *http;
  sl_aredis *redis; /* presign's, lent */
  unsigned part_expiry_s;
  size_t inflight;
  int closing;
  void (*done)(void *ud);
  void *done_ud;
  uv_timer_t reaper; /* after sl__mpu_free: waits for the requests in flight */
  sl_metric *m_ok, *m_rejected, *m_failed;
};

enum { OP_CREATE = 1, OP_SIGN, OP_BATCH, OP_LIST, OP_COMPLETE, OP_ABORT };

typedef struct {
  sl__mpu *m;
  sl_http_req *req;
  int kind;
  char token[130];
  char sid[37];
  unsigned qno;
  char key[256]; /* the client's key (all but create) */
  char upload_id[512];
  int part_no; /* OP_SIGN */
  int *batch;  /* OP_BATCH */
  size_t nbatch;
  sl_s3_part *want; /* OP_COMPLETE: the client's parts */
  size_t nwant;
  sl_s3_part *have; /* OP_LIST / OP_COMPLETE: stored parts, all pages */
  size_t nhave, cap;
  /* from the submission */
  char ctype[128];
  char spec_key[256];
  int64_t size;
} op;

/* ---- replies ---- */

static void op_free(op *o) {
  sl__mpu *m = o->m;
  free(o->batch);
  free(o->want);
  free(o->have);
  free(o);
  m->inflight--;
}

static void reply_json(op *o, json_t *j) {
  char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
  json_decref(j);
  if (!s) {
    sl_http_respond_error(o->req, 500, "internal", "out of memory", NULL);
    sl_metric_add(o->m->m_failed, 1);
  } else {
    sl_http_respond(o->req, 200, "application/json", "Cache-Control: no-store\r\n", s, strlen(s));
    sl_metric_add(o->m->m_ok, 1);
  }
  free(s);
  op_free(o);
}

static void reply_error(op *o, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reply_error(op *o, int status, const char *code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *extra = status == 503 ? "Retry-After: 2\r\n" : NULL;
  if (status == 404 && strcmp(code, "not_found") == 0) extra = "Retry-After: 1\r\n";
  sl_http_respond_error(o->req, status, code, msg, extra);
  sl_metric_add(status >= 500 ? o->m->m_failed : o->m->m_rejected, 1);
  op_free(o);
}

/* Answers a failed storage call. */
static void storage_error(op *o, const sl_s3_result *r, const char *what) {
  if (r->rc == SL_ENOTFOUND) {
    reply_error(o, 404, "upload_not_found", "no multipart upload %.200s for this key",
                o->upload_id[0] ? o->upload_id : "");
    return;
  }
  sl_log(SL_LOG_WARN, o->sid, "%s on %s: %s %s (HTTP %ld)", what, o->spec_key, r->code, r->message,
         r->status);
  if (r->rc == SL_EINVAL)
    reply_error(o, 400, "storage_refused", "%s refused by storage: %s %.200s", what, r->code,
                r->message);
  else if (r->rc == SL_EUNAVAIL)
    reply_error(o, 503, "unavailable", "storage unavailable; retry later");
  else
    reply_error(o, 502, "storage_error", "storage answered %s with HTTP %ld %s", what, r->status,
                r->code);
}

/* ---- request parsing ---- */

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Percent-decodes in[0..n) into out; '+' is a space when plus. 0 or SL_E*. */
static int pct_decode(const char *in, size_t n, char *out, size_t len, int plus) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (o + 1 >= len) return SL_ETOOBIG;
    char c = in[i];
    if (c == '%') {
      int h = i + 2 < n ? hexval(in[i + 1]) : -1, l = i + 2 < n ? hexval(in[i + 2]) : -1;
      if (h < 0 || l < 0) return SL_EPARSE;
      c = (char)(h * 16 + l);
      if (c == '\0') return SL_EPARSE;
      i += 2;
    } else if (c == '+' && plus) {
      c = ' ';
    }
    out[o++] = c;
  }
  out[o] = '\0';
  return 0;
}

/* The decoded value of query parameter name: 1 found, 0 absent, <0 bad. */
static int qparam(const char *query, const char *name, char *out, size_t len) {
  size_t nl = strlen(name);
  for (const char *p = query; p && *p;) {
    const char *amp = strchr(p, '&');
    size_t seg = amp ? (size_t)(amp - p) : strlen(p);
    if (seg > nl && strncmp(p, name, nl) == 0 && p[nl] == '=')
      return pct_decode(p + nl + 1, seg - nl - 1, out, len, 1) == 0 ? 1 : SL_EPARSE;
    p = amp ? amp + 1 : NULL;
  }
  return 0;
}

/* A part number: digits only, 1..10000. */
static int part_number(const char *s, size_t n) {
  if (n == 0 || n > 5) return -1;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v >= 1 && v <= SL_S3_MAX_PART_NO ? v : -1;
}

/* "submissions/<uuid>/q<N>.<ext>" -> sid, qno (the shape presign issues). */
static int valid_sid(const char *s) {
  if (strlen(s) != 36) return 0;
  for (int i = 0; i < 36; i++) {
    int dash = (i == 8 || i == 13 || i == 18 || i == 23);
    if (dash ? s[i] != '-' : !isxdigit((unsigned char)s[i])) return 0;
  }
  return 1;
}

/* ---- the steps after authorization ---- */

static void on_created(const sl_s3_result *r, void *ud) {
  op *o = ud;
  if (r->rc) {
    storage_error(o, r, "CreateMultipartUpload");
    return;
  }
  sl_log(SL_LOG_INFO, o->sid, "multipart upload created for %s (%s, %lld bytes declared)",
         o->spec_key, o->ctype, (long long)o->size);
  reply_json(o, json_pack("{s:s,s:s,s:s}", "key", o->spec_key, "uploadId", r->upload_id, "bucket",
                          o->m->s3->bucket));
}

static void sign_urls(op *o) {
  sl__mpu *m = o->m;
  char url[4096];
  time_t now = time(NULL);
  if (o->kind == OP_SIGN) {
    if (sl_s3_presign_part(m->sig, m->target, o->spec_key, o->upload_id, o->part_no, now,
                           m->part_expiry_s, url, sizeof url) != 0) {
      reply_error(o, 500, "internal", "signing failed");
      return;
    }
    reply_json(o, json_pack("{s:s,s:I}", "url", url, "expires", (json_int_t)m->part_expiry_s));
    return;
  }
  json_t *urls = json_object();
  for (size_t i = 0; urls && i < o->nbatch; i++) {
    char n[16];
    snprintf(n, sizeof n, "%d", o->batch[i]);
    if (sl_s3_presign_part(m->sig, m->target, o->spec_key, o->upload_id, o->batch[i], now,
                           m->part_expiry_s, url, sizeof url) != 0) {
      json_decref(urls);
      reply_error(o, 500, "internal", "signing failed");
      return;
    }
    json_object_set_new(urls, n, json_string(url));
  }
  reply_json(o, urls ? json_pack("{s:o}", "presignedUrls", urls) : NULL);
}

static int by_number(const void *a, const void *b) {
  int x = ((const sl_s3_part *)a)->number, y = ((const sl_s3_part *)b)->number;
  return (x > y) - (x < y);
}

static void on_completed(const sl_s3_result *r, void *ud) {
  op *o = ud;
  if (r->rc) {
    storage_error(o, r, "CompleteMultipartUpload");
    return;
  }
  char location[1400], path[1100];
  sl_s3_object_path(o->m->target, o->spec_key, path, sizeof path);
  snprintf(location, sizeof location, "%s://%s%s", o->m->target->scheme, o->m->target->host, path);
  sl_log(SL_LOG_INFO, o->sid, "multipart upload of %s completed: %zu parts, %lld bytes",
         o->spec_key, o->nwant, (long long)o->size);
  reply_json(o,
             json_pack("{s:s,s:s,s:s}", "location", location, "key", o->spec_key, "etag", r->etag));
}

/* Complete: every named part must be stored, and together they must be
 * exactly the declared size. */
static void complete_checked(op *o) {
  int64_t total = 0;
  for (size_t i = 0; i < o->nwant; i++) {
    sl_s3_part key = {.number = o->want[i].number};
    sl_s3_part *got = bsearch(&key, o->have, o->nhave, sizeof *o->have, by_number);
    if (!got) {
      reply_error(o, 400, "invalid_part", "part %d is not stored in upload %.200s",
                  o->want[i].number, o->upload_id);
      return;
    }
    total += got->size;
  }
  if (total != o->size) {
    reply_error(o, 409, "size_mismatch",
                "the parts add up to %lld bytes but the question declared %lld; upload the "
                "missing parts and complete again",
                (long long)total, (long long)o->size);
    return;
  }
  int rc = sl_s3_complete_multipart(&o->m->s3c, o->spec_key, o->upload_id, o->want, o->nwant,
                                    on_completed, o);
  if (rc) reply_error(o, 503, "unavailable", "storage call not started: %s", sl_strerror(rc));
}

static void on_listed(const sl_s3_result *r, void *ud) {
  op *o = ud;
  if (r->rc) {
    storage_error(o, r, "ListParts");
    return;
  }
  if (o->kind == OP_SIGN || o->kind == OP_BATCH) { /* the upload exists */
    sign_urls(o);
    return;
  }
  if (o->nhave + r->nparts > o->cap) {
    size_t cap = o->nhave + r->nparts + 16;
    sl_s3_part *np = cap <= SL_S3_MAX_PART_NO + 16 ? realloc(o->have, cap * sizeof *np) : NULL;
    if (!np) {
      reply_error(o, 502, "storage_error", "too many parts listed");
      return;
    }
    o->have = np;
    o->cap = cap;
  }
  memcpy(o->have + o->nhave, r->parts, r->nparts * sizeof *r->parts);
  o->nhave += r->nparts;
  if (r->truncated) {
    int rc = sl_s3_list_parts(&o->m->s3c, o->spec_key, o->upload_id, r->next_marker, LIST_PAGE,
                              on_listed, o);
    if (rc) reply_error(o, 503, "unavailable", "storage call not started: %s", sl_strerror(rc));
    return;
  }
  qsort(o->have, o->nhave, sizeof *o->have, by_number);
  if (o->kind == OP_COMPLETE) {
    complete_checked(o);
    return;
  }
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < o->nhave; i++)
    json_array_append_new(arr, json_pack("{s:i,s:s,s:I}", "PartNumber", o->have[i].number, "ETag",
                                         o->have[i].etag, "Size", (json_int_t)o->have[i].size));
  reply_json(o, arr);
}

static void on_aborted(const sl_s3_result *r, void *ud) {
  op *o = ud;
  if (r->rc) {
    storage_error(o, r, "AbortMultipartUpload");
    return;
  }
  sl_log(SL_LOG_INFO, o->sid, "multipart upload of %s aborted", o->spec_key);
  reply_json(o, json_object());
}

/* sl:sub:<sid> -> token hash, spec<no>, r<no>, user (materialize's hash). */
static void on_auth(redisReply *rep, void *ud) {
  op *o = ud;
  if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 4) {
    reply_error(o, 503, "unavailable", "submission store unavailable; retry later");
    return;
  }
  char th[65] = "";
  redisReply *tok = rep->element[0], *spec = rep->element[1], *rank = rep->element[2],
             *user = rep->element[3];
  if (user->type == REDIS_REPLY_STRING) sl__results_token_hash(o->sid, user->str, o->token, th);
  if (tok->type != REDIS_REPLY_STRING || tok->len != 64 || !th[0] ||
      !sl_secure_equal(tok->str, th) || spec->type != REDIS_REPLY_STRING) {
    reply_error(o, 404, "not_found",
                "no such submission and question for this token (a new submission becomes "
                "visible within a second)");
    return;
  }
  json_t *j = json_loadb(spec->str, spec->len, 0, NULL);
  const char *ct = json_string_value(json_object_get(j, "content_type"));
  const char *k = json_string_value(json_object_get(j, "key"));
  json_int_t size = json_integer_value(json_object_get(j, "size"));
  int ok = ct && k && size > 0 && strlen(ct) < sizeof o->ctype && strlen(k) < sizeof o->spec_key;
  if (ok) {
    snprintf(o->ctype, sizeof o->ctype, "%s", ct);
    snprintf(o->spec_key, sizeof o->spec_key, "%s", k);
    o->size = size;
  }
  json_decref(j);
  if (!ok) {
    reply_error(o, 500, "internal", "the submission record is unreadable");
    return;
  }
  if (o->kind != OP_CREATE && strcmp(o->key, o->spec_key) != 0) {
    reply_error(o, 404, "not_found", "the key is not the object key of this question");
    return;
  }
  long long r = rank->type == REDIS_REPLY_STRING ? strtoll(rank->str, NULL, 10) : 0;
  if ((o->kind == OP_CREATE || o->kind == OP_COMPLETE) && r > 1) {
    reply_error(o, 409, "already_uploaded", "question %u already has its answer", o->qno);
    return;
  }
  sl__mpu *m = o->m;
  int rc;
  switch (o->kind) {
  case OP_CREATE:
    rc = sl_s3_create_multipart(&m->s3c, o->spec_key, o->ctype, on_created, o);
    break;
  case OP_SIGN:
  case OP_BATCH:
    rc = sl_s3_list_parts(&m->s3c, o->spec_key, o->upload_id, 0, 1, on_listed, o);
    break;
  case OP_LIST:
  case OP_COMPLETE:
    rc = sl_s3_list_parts(&m->s3c, o->spec_key, o->upload_id, 0, LIST_PAGE, on_listed, o);
    break;
  default:
    rc = sl_s3_abort_multipart(&m->s3c, o->spec_key, o->upload_id, on_aborted, o);
    break;
  }
  if (rc) reply_error(o, 503, "unavailable", "storage call not started: %s", sl_strerror(rc));
}

/* ---- routing and validation ---- */

/* Reads the create body: {filename?, type?, metadata:{submission_id, question_no}}. */
static int read_create(op *o) {
  size_t blen;
  const char *body = sl_http_req_body(o->req, &blen);
  json_error_t jerr;
  json_t *root = json_loadb(body, blen, 0, &jerr);
  if (!json_is_object(root)) {
    json_decref(root);
    reply_error(o, 400, "invalid_json", "body must be a JSON object {filename, type, metadata}");
    return -1;
  }
  json_t *md = json_object_get(root, "metadata"), *t = json_object_get(root, "type");
  json_t *sid = json_object_get(md, "submission_id"), *qn = json_object_get(md, "question_no");
  long long q = json_is_integer(qn) ? (long long)json_integer_value(qn) : 0;
  if (json_is_string(qn)) { /* Uppy file metadata is often all strings */
    char *end;
    q = strtoll(json_string_value(qn), &end, 10);
    if (*end) q = 0;
  }
  int ok = 1;
  if (t && !json_is_string(t)) {
    reply_error(o, 400, "invalid_field", "type must be a string");
    ok = 0;
  } else if (!json_is_string(sid) || !valid_sid(json_string_value(sid))) {
    reply_error(o, 400, "invalid_field", "metadata.submission_id must be a submission id");
    ok = 0;
  } else if (q < 1 || q > 999) {
    reply_error(o, 400, "invalid_field", "metadata.question_no must be a question number 1..999");
    ok = 0;
  } else {
    snprintf(o->sid, sizeof o->sid, "%s", json_string_value(sid));
    o->qno = (unsigned)q;
  }
  json_decref(root);
  return ok ? 0 : -1;
}

/* Reads the complete body: {parts:[{PartNumber, ETag}]}, ascending, unique. */
static int read_complete(op *o) {
  size_t blen;
  const char *body = sl_http_req_body(o->req, &blen);
  json_t *root = json_loadb(body, blen, 0, NULL);
  json_t *parts = json_object_get(root, "parts");
  size_t n = json_array_size(parts);
  const char *why = NULL;
  if (!json_is_array(parts) || n == 0 || n > SL_S3_MAX_PART_NO)
    why = "parts must be an array of 1..10000 {PartNumber, ETag} objects";
  else if (!(o->want = calloc(n, sizeof *o->want)))
    why = "out of memory";
  for (size_t i = 0; !why && i < n; i++) {
    json_t *p = json_array_get(parts, i);
    json_t *pn = json_object_get(p, "PartNumber"), *et = json_object_get(p, "ETag");
    json_int_t v = json_integer_value(pn);
    if (!json_is_integer(pn) || v < 1 || v > SL_S3_MAX_PART_NO)
      why = "every PartNumber must be an integer 1..10000";
    else if (!json_is_string(et) || json_string_length(et) == 0 ||
             json_string_length(et) >= sizeof o->want[i].etag)
      why = "every ETag must be a non-empty string";
    else if (i > 0 && v <= o->want[i - 1].number)
      why = "parts must be in ascending PartNumber order without repeats";
    else {
      o->want[i].number = (int)v;
      snprintf(o->want[i].etag, sizeof o->want[i].etag, "%s", json_string_value(et));
    }
  }
  json_decref(root);
  if (why) {
    reply_error(o, 400, "invalid_parts", "%s", why);
    return -1;
  }
  o->nwant = n;
  return 0;
}

static int read_batch(op *o, const char *query) {
  char list[8192];
  int f = qparam(query, "partNumbers", list, sizeof list);
  if (f <= 0) {
    reply_error(o, 400, "invalid_part_number",
                "pass the part numbers as partNumbers=1,2,3 (1..10000, at most %d)", MAX_BATCH);
    return -1;
  }
  o->batch = calloc(MAX_BATCH, sizeof *o->batch);
  if (!o->batch) {
    reply_error(o, 500, "internal", "out of memory");
    return -1;
  }
  for (const char *p = list;;) {
    size_t seg = strcspn(p, ",");
    int v = part_number(p, seg);
    if (v < 0 || o->nbatch >= MAX_BATCH) {
      reply_error(o, 400, "invalid_part_number",
                  "part numbers are integers 1..10000, at most %d per batch", MAX_BATCH);
      return -1;
    }
    o->batch[o->nbatch++] = v;
    if (!p[seg]) break;
    p += seg + 1;
  }
  return 0;
}

int sl__mpu_handle(sl__mpu *m, sl_http_req *req) {
  const char *path = sl_http_req_path(req), *meth = sl_http_req_method(req);
  if (strncmp(path, "/v1/", 4) == 0) path += 3;
  static const char base[] = "/s3/multipart";
  if (strncmp(path, base, sizeof base - 1) != 0 ||
      (path[sizeof base - 1] != '\0' && path[sizeof base - 1] != '/'))
    return 0;
  const char *rest = path + sizeof base - 1; /* "" or "/{id}[/x]" */
  op *o = calloc(1, sizeof *o);
  if (!o) {
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return 1;
  }
  o->m = m;
  o->req = req;
  m->inflight++;
  const char *want_method;
  const char *sub = NULL;
  if (*rest == '\0' || strcmp(rest, "/") == 0) {
    o->kind = OP_CREATE;
    want_method = "POST";
  } else {
    const char *id = rest + 1, *slash = strchr(id, '/');
    size_t idl = slash ? (size_t)(slash - id) : strlen(id);
    if (idl == 0 || pct_decode(id, idl, o->upload_id, sizeof o->upload_id, 0) != 0) {
      reply_error(o, 404, "upload_not_found", "malformed upload id");
      return 1;
    }
    sub = slash ? slash + 1 : NULL;
    if (!sub) {
      o->kind = strcmp(meth, "DELETE") == 0 ? OP_ABORT : OP_LIST;
      want_method = strcmp(meth, "DELETE") == 0 ? "DELETE" : "GET";
    } else if (strcmp(sub, "complete") == 0) {
      o->kind = OP_COMPLETE;
      want_method = "POST";
    } else if (strcmp(sub, "batch") == 0) {
      o->kind = OP_BATCH;
      want_method = "GET";
    } else {
      o->kind = OP_SIGN;
      want_method = "GET";
    }
  }
  if (strcmp(meth, want_method) != 0) {
    char allow[64];
    snprintf(allow, sizeof allow, "Allow: %s\r\n",
             o->kind == OP_LIST || o->kind == OP_ABORT ? "GET, DELETE" : want_method);
    sl_http_respond_error(req, 405, "method_not_allowed", "method not allowed here", allow);
    sl_metric_add(m->m_rejected, 1);
    op_free(o);
    return 1;
  }
  if (m->closing) {
    reply_error(o, 503, "unavailable", "shutting down; retry");
    return 1;
  }
  /* the caller's proof: the submission's results token */
  const char *auth = sl_http_req_header(req, "Authorization");
  if (!auth || strncmp(auth, "Bearer ", 7) != 0 || strlen(auth + 7) == 0 ||
      strlen(auth + 7) >= sizeof o->token) {
    sl_http_respond_error(req, 401, "unauthorized",
                          "send the submission's results token as Authorization: Bearer <token>",
                          "WWW-Authenticate: Bearer\r\n");
    sl_metric_add(m->m_rejected, 1);
    op_free(o);
    return 1;
  }
  snprintf(o->token, sizeof o->token, "%s", auth + 7);
  const char *query = sl_http_req_query(req);
  if (o->kind == OP_CREATE) {
    if (read_create(o) != 0) return 1;
  } else {
    int f = qparam(query, "key", o->key, sizeof o->key);
    if (f <= 0 || sl__object_key_parse(o->key, o->sid, &o->qno) != 0) {
      reply_error(o, 400, "invalid_key",
                  "pass the question's object key as ?key=submissions/<id>/q<N>.<ext>");
      return 1;
    }
    if (o->kind == OP_SIGN) {
      o->part_no = part_number(sub, strlen(sub));
      if (o->part_no < 0) {
        reply_error(o, 400, "invalid_part_number", "a part number is an integer 1..10000");
        return 1;
      }
    } else if (o->kind == OP_BATCH && read_batch(o, query) != 0) {
      return 1;
    } else if (o->kind == OP_COMPLETE && read_complete(o) != 0) {
      return 1;
    }
  }
  char hkey[SL__VIEW_KEY_MAX], spec[32], rank[32];
  sl__view_sub_key(hkey, sizeof hkey, o->sid);
  snprintf(spec, sizeof spec, "spec%u", o->qno);
  snprintf(rank, sizeof rank, "r%u", o->qno);
  const char *argv[] = {"HMGET", hkey, "token", spec, rank, "user"};
  if (sl_aredis_argv(m->redis, on_auth, o, 6, argv, NULL) != 0)
    reply_error(o, 503, "unavailable", "submission store unavailable; retry later");
  return 1;
}

/* ---- life cycle ---- */

int sl__mpu_new(sl__mpu **out, uv_loop_t *loop, sl_sigv4 *sig, const sl_s3_target *t,
                const sl_s3_conf *s3, sl_aredis *redis, unsigned part_expiry_s) {
  sl__mpu *m = calloc(1, sizeof *m);
  if (!m) return SL_ENOMEM;
  m->loop = loop;
  m->sig = sig;
  m->target = t;
  m->s3 = s3;
  m->part_expiry_s = part_expiry_s;
  m->redis = redis;
  int rc = sl_httpc_new(&m->http, loop);
  if (rc) {
    free(m);
    return rc;
  }
  m->s3c = (sl_s3_client){sig, t, m->http};
  uv_timer_init(loop, &m->reaper);
  m->reaper.data = m;
  m->m_ok = sl_metrics_counter("sluice_multipart_requests_total", "outcome=\"ok\"",
                               "Multipart upload endpoint requests by outcome");
  m->m_rejected = sl_metrics_counter("sluice_multipart_requests_total", "outcome=\"rejected\"",
                                     "Multipart upload endpoint requests by outcome");
  m->m_failed = sl_metrics_counter("sluice_multipart_requests_total", "outcome=\"failed\"",
                                   "Multipart upload endpoint requests by outcome");
  *out = m;
  return 0;
}

static void on_reaper_closed(uv_handle_t *h) {
  sl__mpu *m = h->data;
  void (*done)(void *) = m->done;
  void *ud = m->done_ud;
  free(m);
  if (done) done(ud);
}

static void reap(uv_timer_t *t) {
  sl__mpu *m = t->data;
  if (m->inflight) return;
  uv_timer_stop(t);
  sl_httpc_free(m->http);
  uv_close((uv_handle_t *)t, on_reaper_closed);
}

void sl__mpu_free(sl__mpu *m, void (*done)(void *ud), void *ud) {
  if (!m || m->closing) return;
  m->closing = 1;
  m->done = done;
  m->done_ud = ud;
  /* checked from a timer, never from inside a Redis or curl callback */
  uv_timer_start(&m->reaper, reap, 0, 50);
}
