/* SPDX-License-Identifier: Apache-2.0 */
/*
 * multipart.c — `sluicectl submit`'s upload of a large answer through the
 * Companion-style endpoints presign serves (docs/openapi.yaml,
 * stages/presign/multipart.c), every call with
 * "Authorization: Bearer <results token>":
 *
 *   1. POST /s3/multipart {filename, type, metadata:{submission_id,
 *      question_no}} -> {key, uploadId}. Right after the submission's 201
 *      presign may not see it yet (404 not_found + Retry-After): retried for
 *      up to CREATE_WAIT_S.
 *   2. per batch of BATCH parts: GET /s3/multipart/{id}/batch?key=&partNumbers=
 *      -> {presignedUrls:{n:url}}, then PUT each part's bytes (streamed from
 *      the file at its offset) to its URL, keeping the ETag. A transient
 *      failure (no answer, 408, 429, 5xx) is retried up to PART_ATTEMPTS times
 *      with doubling backoff; a 403 (the URL expired) signs that part again
 *      (GET /s3/multipart/{id}/{n}).
 *   3. GET /s3/multipart/{id}?key= lists what storage holds. A part that is
 *      missing, of the wrong size, or whose ETag differs from the one the PUT
 *      returned is uploaded again (resume), then the list is read again.
 *   4. POST /s3/multipart/{id}/complete?key= {parts:[{PartNumber,ETag}]} with
 *      the listed ETags. 409 size_mismatch (storage lacks a part after all):
 *      back to 3, at most RESUME_ROUNDS times.
 * API calls answered 429/502/503/504 or not at all are retried (Retry-After
 * or backoff). Anything else fatal aborts the upload (DELETE
 * /s3/multipart/{id}?key=) so storage drops the parts.
 *
 * Memory: one ETag per part (at most SC_MAX_PARTS) and one batch of signed
 * URLs; the bytes go from the file to libcurl through a read callback.
 * Progress: one bar on stderr over the file's bytes (a resume draws a bar
 * over the bytes it re-sends).
 *
 * Test hook: SLUICECTL_TEST_DROP_PART=N skips part N on the first pass as if
 * its PUT had been lost, so tests can watch the resume.
 * @locality single thread.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluicectl.h"

#define BATCH 32         /* parts signed per batch request */
#define PART_ATTEMPTS 5  /* tries per part PUT */
#define API_ATTEMPTS 6   /* tries per API call on transient answers */
#define CREATE_WAIT_S 30 /* how long create waits for presign to see the submission */
#define RESUME_ROUNDS 3  /* list + upload missing + complete rounds */
#define API_TIMEOUT_MS 30000
#define PART_TIMEOUT_MS 600000

typedef struct {
  const sc_mpu_job *j;
  FILE *f;
  char base[1024];     /* .../s3/multipart */
  char upload_id[512]; /* as created */
  char eid[1536];      /* percent-encoded upload id */
  char ekey[768];      /* percent-encoded key */
  char auth[300];
  int nparts;
  char (*etag)[128]; /* per part (index n-1): what its PUT answered, "" unknown */
  int drop_part;     /* test hook, first pass only */
} mpu;

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void pct_encode(const char *in, char *out, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)in; *p && o + 4 < n; p++) {
    if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
        *p == '-' || *p == '_' || *p == '.' || *p == '~') {
      out[o++] = (char)*p;
    } else {
      out[o++] = '%';
      out[o++] = hex[*p >> 4];
      out[o++] = hex[*p & 15];
    }
  }
  out[o] = '\0';
}

static int64_t part_len(const mpu *m, int n) {
  int64_t off = (int64_t)(n - 1) * m->j->part_size;
  int64_t left = m->j->size - off;
  return left < m->j->part_size ? left : m->j->part_size;
}

/* error.code of a JSON error body into code ("" when none) */
static void error_code(const sc_http_reply *r, char *code, size_t n) {
  code[0] = '\0';
  json_t *j = json_loads(r->body ? r->body : "", 0, NULL);
  const char *c = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
  if (c) snprintf(code, n, "%s", c);
  json_decref(j);
}

static void report(const mpu *m, const char *what, const sc_http_reply *r) {
  if (r->status == 0) {
    fprintf(stderr, "sluicectl: q%d multipart %s: %s\n", m->j->qno, what,
            r->error[0] ? r->error : "no answer");
    return;
  }
  json_t *j = json_loads(r->body ? r->body : "", 0, NULL);
  json_t *e = json_object_get(j, "error");
  const char *code = json_string_value(json_object_get(e, "code"));
  const char *msg = json_string_value(json_object_get(e, "message"));
  if (code)
    fprintf(stderr, "sluicectl: q%d multipart %s: HTTP %ld %s: %s\n", m->j->qno, what, r->status,
            code, msg ? msg : "");
  else
    fprintf(stderr, "sluicectl: q%d multipart %s: HTTP %ld %.300s\n", m->j->qno, what, r->status,
            r->body ? r->body : "");
  json_decref(j);
}

static int transient(long status) {
  return status == 0 || status == 408 || status == 429 || status / 100 == 5;
}

/* One API call, retried on transient answers (and, for create, on the 404
 * not_found of a submission presign does not see yet). 0 on a 2xx; -1 with
 * the last answer in r (the caller frees r either way). */
static int api(const mpu *m, const char *method, const char *url, const char *body, int is_create,
               sc_http_reply *r) {
  const char *h[] = {m->auth, NULL};
  double start = sc_mono_s();
  long backoff = 500;
  for (int attempt = 1;; attempt++) {
    sc_http_send(method, url, h, body, API_TIMEOUT_MS, r);
    if (r->status / 100 == 2) return 0;
    long wait = backoff;
    int again = 0;
    if (transient(r->status) && attempt < API_ATTEMPTS) {
      again = 1;
    } else if (is_create && r->status == 404) {
      char code[64];
      error_code(r, code, sizeof code);
      again = strcmp(code, "not_found") == 0 && sc_mono_s() - start < CREATE_WAIT_S;
      wait = 1000;
    }
    if (!again) return -1;
    if (r->retry_after_s > 0) wait = r->retry_after_s * 1000;
    if (wait > 10000) wait = 10000;
    sc_http_reply_free(r);
    sleep_ms(wait);
    if (backoff < 8000) backoff *= 2;
  }
}

/* presigned URLs for parts from..to (inclusive) into urls[0..]; 0 or -1 */
static int sign_batch(const mpu *m, int from, int to, char **urls) {
  char q[BATCH * 7 + 1];
  size_t l = 0;
  for (int n = from; n <= to; n++)
    l += (size_t)snprintf(q + l, sizeof q - l, "%s%d", n > from ? "," : "", n);
  char url[4096];
  snprintf(url, sizeof url, "%s/%s/batch?key=%s&partNumbers=%s", m->base, m->eid, m->ekey, q);
  sc_http_reply r;
  if (api(m, "GET", url, NULL, 0, &r) != 0) {
    report(m, "signing parts", &r);
    sc_http_reply_free(&r);
    return -1;
  }
  json_t *j = json_loads(r.body, 0, NULL);
  sc_http_reply_free(&r);
  json_t *urlset = json_object_get(j, "presignedUrls");
  int rc = 0;
  for (int n = from; n <= to; n++) {
    char k[16];
    snprintf(k, sizeof k, "%d", n);
    const char *u = json_string_value(json_object_get(urlset, k));
    urls[n - from] = u ? strdup(u) : NULL;
    if (!urls[n - from]) {
      fprintf(stderr, "sluicectl: q%d multipart: the batch reply has no URL for part %d\n",
              m->j->qno, n);
      rc = -1;
    }
  }
  json_decref(j);
  return rc;
}

/* a fresh URL for one part (after a 403: expired); malloc'd or NULL */
static char *sign_one(const mpu *m, int n) {
  char url[4096];
  snprintf(url, sizeof url, "%s/%s/%d?key=%s", m->base, m->eid, n, m->ekey);
  sc_http_reply r;
  if (api(m, "GET", url, NULL, 0, &r) != 0) {
    report(m, "signing a part", &r);
    sc_http_reply_free(&r);
    return NULL;
  }
  json_t *j = json_loads(r.body, 0, NULL);
  sc_http_reply_free(&r);
  const char *u = json_string_value(json_object_get(j, "url"));
  char *out = u ? strdup(u) : NULL;
  json_decref(j);
  return out;
}

/* PUTs part n to *url (replaced when re-signed), retrying; keeps its ETag.
 * 0 or -1 (printed). */
static int put_part(mpu *m, int n, char **url, sc_progress *bar, size_t base) {
  int64_t off = (int64_t)(n - 1) * m->j->part_size, len = part_len(m, n);
  long backoff = 500;
  for (int attempt = 1;; attempt++) {
    sc_http_reply r;
    int rc = sc_http_put_range(*url, m->f, off, len, bar, base, PART_TIMEOUT_MS, &r);
    if (rc == 0 && r.status / 100 == 2 && r.etag[0]) {
      snprintf(m->etag[n - 1], sizeof m->etag[0], "%s", r.etag);
      sc_http_reply_free(&r);
      return 0;
    }
    int expired = r.status == 403;
    int again = (transient(r.status) || expired) && attempt < PART_ATTEMPTS;
    if (!again) {
      char what[64];
      snprintf(what, sizeof what, "part %d upload (attempt %d)", n, attempt);
      if (rc == 0 && r.status / 100 == 2) snprintf(r.error, sizeof r.error, "no ETag");
      report(m, what, &r);
      sc_http_reply_free(&r);
      return -1;
    }
    char why[300];
    if (r.status)
      snprintf(why, sizeof why, "HTTP %ld", r.status);
    else
      snprintf(why, sizeof why, "%s", r.error[0] ? r.error : "no answer");
    fprintf(stderr, "  q%d part %d: %s; retrying in %.1fs\n", m->j->qno, n, why,
            (double)backoff / 1000.0);
    sc_http_reply_free(&r);
    sleep_ms(backoff);
    if (backoff < 8000) backoff *= 2;
    if (expired) {
      char *u = sign_one(m, n);
      if (!u) return -1;
      free(*url);
      *url = u;
    }
  }
}

/* uploads the parts listed in want[0..nwant) (ascending), signing them in
 * batches; 0 or -1 */
static int upload_parts(mpu *m, const int *want, int nwant, int first_pass) {
  int64_t total = 0;
  for (int i = 0; i < nwant; i++) total += part_len(m, want[i]);
  sc_progress bar;
  sc_progress_init(&bar, (size_t)total);
  size_t done = 0;
  int rc = 0;
  for (int i = 0; i < nwant && rc == 0;) {
    /* a batch: consecutive entries of want, at most BATCH, contiguous numbers */
    int k = 1;
    while (i + k < nwant && k < BATCH && want[i + k] == want[i] + k) k++;
    char *urls[BATCH] = {0};
    rc = sign_batch(m, want[i], want[i] + k - 1, urls);
    for (int b = 0; b < k && rc == 0; b++) {
      int n = want[i + b];
      if (first_pass && n == m->drop_part) {
        fprintf(stderr, "  q%d part %d: dropped (SLUICECTL_TEST_DROP_PART)\n", m->j->qno, n);
      } else {
        rc = put_part(m, n, &urls[b], &bar, done);
      }
      done += (size_t)part_len(m, n);
      if (rc == 0) sc_progress_update(&bar, done);
    }
    for (int b = 0; b < k; b++) free(urls[b]);
    i += k;
  }
  sc_progress_end(&bar);
  return rc;
}

/* Lists the stored parts. Fills missing[] with the parts 1..nparts that
 * storage lacks (or holds with another size or ETag) and *complete with the
 * complete body's parts array when nothing is missing. 0 or -1. */
static int list_parts(mpu *m, int *missing, int *nmissing, json_t **complete) {
  char url[4096];
  snprintf(url, sizeof url, "%s/%s?key=%s", m->base, m->eid, m->ekey);
  sc_http_reply r;
  if (api(m, "GET", url, NULL, 0, &r) != 0) {
    report(m, "listing parts", &r);
    sc_http_reply_free(&r);
    return -1;
  }
  json_t *list = json_loads(r.body, 0, NULL);
  sc_http_reply_free(&r);
  if (!json_is_array(list)) {
    fprintf(stderr, "sluicectl: q%d multipart: the part list is not a JSON array\n", m->j->qno);
    json_decref(list);
    return -1;
  }
  /* index the listed parts by number (storage lists them ascending, but do
   * not rely on it) */
  json_t **by_no = calloc((size_t)m->nparts + 1, sizeof *by_no);
  if (!by_no) {
    json_decref(list);
    return -1;
  }
  size_t i;
  json_t *p;
  json_array_foreach(list, i, p) {
    json_int_t n = json_integer_value(json_object_get(p, "PartNumber"));
    if (n >= 1 && n <= m->nparts) by_no[n] = p;
  }
  *nmissing = 0;
  json_t *parts = json_array();
  for (int n = 1; n <= m->nparts; n++) {
    json_t *q = by_no[n];
    const char *et = json_string_value(json_object_get(q, "ETag"));
    json_int_t sz = json_integer_value(json_object_get(q, "Size"));
    if (!q || !et || !*et || sz != part_len(m, n) ||
        (m->etag[n - 1][0] && strcmp(et, m->etag[n - 1]) != 0)) {
      missing[(*nmissing)++] = n;
      continue;
    }
    json_array_append_new(parts, json_pack("{s:i,s:s}", "PartNumber", n, "ETag", et));
  }
  free(by_no);
  json_decref(list);
  if (*nmissing) {
    json_decref(parts);
    *complete = NULL;
  } else {
    *complete = parts;
  }
  return 0;
}

static void abort_upload(const mpu *m) {
  char url[4096];
  snprintf(url, sizeof url, "%s/%s?key=%s", m->base, m->eid, m->ekey);
  sc_http_reply r;
  if (api(m, "DELETE", url, NULL, 0, &r) == 0)
    fprintf(stderr, "  q%d: multipart upload aborted (storage drops its parts)\n", m->j->qno);
  else
    report(m, "abort", &r);
  sc_http_reply_free(&r);
}

/* the rest after create; 0 or -1 */
static int run(mpu *m) {
  int *want = malloc((size_t)m->nparts * sizeof *want);
  if (!want) return -1;
  for (int n = 1; n <= m->nparts; n++) want[n - 1] = n;
  int rc = upload_parts(m, want, m->nparts, 1);
  for (int round = 1; rc == 0; round++) {
    int nmissing = 0;
    json_t *parts = NULL;
    rc = list_parts(m, want, &nmissing, &parts);
    if (rc) break;
    if (nmissing) {
      if (round > RESUME_ROUNDS) {
        fprintf(stderr,
                "sluicectl: q%d multipart: storage still lacks %d part(s) after %d "
                "resume rounds\n",
                m->j->qno, nmissing, RESUME_ROUNDS);
        rc = -1;
        break;
      }
      fprintf(stderr,
              "  q%d resuming: storage lacks %d of %d part(s) (first: %d); uploading them\n",
              m->j->qno, nmissing, m->nparts, want[0]);
      for (int i = 0; i < nmissing; i++) m->etag[want[i] - 1][0] = '\0';
      rc = upload_parts(m, want, nmissing, 0);
      continue;
    }
    json_t *req = json_pack("{s:o}", "parts", parts);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body) {
      rc = -1;
      break;
    }
    char url[4096];
    snprintf(url, sizeof url, "%s/%s/complete?key=%s", m->base, m->eid, m->ekey);
    sc_http_reply r;
    int crc = api(m, "POST", url, body, 0, &r);
    free(body);
    if (crc == 0) {
      fprintf(stderr, "  q%d: %d part(s) stored, multipart upload complete\n", m->j->qno,
              m->nparts);
      sc_http_reply_free(&r);
      break;
    }
    char code[64];
    error_code(&r, code, sizeof code);
    if (r.status == 409 && strcmp(code, "size_mismatch") == 0 && round <= RESUME_ROUNDS) {
      fprintf(stderr, "  q%d: complete refused (size_mismatch); listing the parts again\n",
              m->j->qno);
      for (int i = 0; i < m->nparts; i++) m->etag[i][0] = '\0'; /* trust the list alone */
      sc_http_reply_free(&r);
      continue;
    }
    report(m, "complete", &r);
    sc_http_reply_free(&r);
    rc = -1;
  }
  free(want);
  return rc;
}

int sc_multipart_upload(const sc_mpu_job *j) {
  mpu m;
  memset(&m, 0, sizeof m);
  m.j = j;
  int64_t np = (j->size + j->part_size - 1) / j->part_size;
  if (j->size <= 0 || np > SC_MAX_PARTS) {
    fprintf(stderr, "sluicectl: %s: %lld bytes cannot go in 1..%d parts of %lld bytes\n", j->path,
            (long long)j->size, SC_MAX_PARTS, (long long)j->part_size);
    return -1;
  }
  m.nparts = (int)np;
  const char *drop = getenv("SLUICECTL_TEST_DROP_PART");
  if (drop && *drop) m.drop_part = atoi(drop);
  snprintf(m.base, sizeof m.base, "%s/s3/multipart", j->presign_url);
  snprintf(m.auth, sizeof m.auth, "Authorization: Bearer %s", j->token);
  m.f = fopen(j->path, "rb");
  m.etag = calloc((size_t)m.nparts, sizeof *m.etag);
  if (!m.f || !m.etag) {
    fprintf(stderr, "sluicectl: cannot read %s\n", j->path);
    if (m.f) fclose(m.f);
    free(m.etag);
    return -1;
  }
  const char *slash = strrchr(j->path, '/');
  json_t *req = json_pack("{s:s,s:{s:s,s:i}}", "filename", slash ? slash + 1 : j->path, "metadata",
                          "submission_id", j->sid, "question_no", j->qno);
  char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
  json_decref(req);
  sc_http_reply r;
  int rc = body ? api(&m, "POST", m.base, body, 1, &r) : -1;
  free(body);
  json_t *created = rc == 0 ? json_loads(r.body, 0, NULL) : NULL;
  const char *id = json_string_value(json_object_get(created, "uploadId"));
  const char *key = json_string_value(json_object_get(created, "key"));
  if (rc != 0 || !id || !key || strcmp(key, j->key) != 0 || strlen(id) >= sizeof m.upload_id) {
    if (rc != 0)
      report(&m, "create", &r);
    else
      fprintf(stderr,
              "sluicectl: q%d multipart create: the reply lacks uploadId or names "
              "another key than %s\n",
              j->qno, j->key);
    rc = -1;
  }
  if (rc == 0) {
    snprintf(m.upload_id, sizeof m.upload_id, "%s", id);
    pct_encode(m.upload_id, m.eid, sizeof m.eid);
    pct_encode(key, m.ekey, sizeof m.ekey);
  }
  sc_http_reply_free(&r);
  json_decref(created);
  if (rc == 0) {
    fprintf(stderr, "  q%d multipart: %d part(s) of up to %lld bytes to %s\n", j->qno, m.nparts,
            (long long)j->part_size, j->key);
    rc = run(&m);
    if (rc != 0) abort_upload(&m);
  }
  fclose(m.f);
  free(m.etag);
  return rc;
}
