/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_http.c — the HTTP/1.1 server of runtime/src/sl_http.c (http-parser
 * callbacks, header arena, limits, pipelining, CORS preflights, error
 * answers) and the routing behind it that works without Kafka or Redis:
 * presign's multipart endpoints (stages/presign/multipart.c: path and
 * upload-id decoding, method checks, Bearer token, ?key= and partNumbers=
 * parsing, the create and complete JSON bodies) and the static files of
 * web/ (runtime/src/sl_static.c). A request that passes every check there
 * reaches the Redis lookup, which fails at once (nothing listens on the
 * configured port; sl_aredis refuses commands while disconnected) and is
 * answered 503 — deterministic, no socket is ever read.
 *
 * POST /v1/submissions goes through presign's request validation
 * (sl__create_parse, stages/presign/request.c: the same limits and content
 * types as presign's defaults) and is answered with its 4xx, or 201 with
 * the number of questions (signing and Kafka are not here). Not reachable:
 * the results stage's GET /v1/submissions/{id} (static in results.c); the
 * router answers it itself so pipelining through it is covered.
 *
 * Input: byte 0 picks how the bytes arrive (bits 0-2: read size 1, 2, 3, 7,
 * 64, 1000 or all at once; bit 3: the client then goes quiet until the
 * request timeout instead of closing; bit 4: CORS on), the rest is what the
 * client sends on one connection (sl__http_feed, sl_http_internal.h).
 *
 * Oracle (abort() on violation): every response is "HTTP/1.1 NNN ...",
 * head lines end in CRLF with no bare CR or LF, Content-Length is exactly
 * the body that follows, every 4xx/5xx body is {"error":{"code","message"}}
 * with two strings, and the handler sees a body no larger than the limit.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "multipart.h"
#include "sluice/sl_aredis.h"
#include "request.h"
#include "sl_http_internal.h"
#include "sluice/sl_err.h"
#include "sluice/sl_http.h"
#include "sluice/sl_log.h"
#include "sluice/sl_s3.h"
#include "sluice/sl_static.h"

#define MAX_HEADER 1024
#define MAX_BODY 2048

static uv_loop_t loop;
static sl_http_server *srv;
static sl__mpu *mpu;
static sl_static *web;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_http: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);          \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static void route(sl_http_req *req, void *ud) {
  (void)ud;
  size_t blen;
  const char *body = sl_http_req_body(req, &blen);
  CHECK(blen <= MAX_BODY);
  CHECK(strlen(body) <= blen);
  const char *path = sl_http_req_path(req), *meth = sl_http_req_method(req);
  CHECK(meth[0] != '\0');
  (void)sl_http_req_query(req);
  (void)sl_http_req_header(req, "Content-Type");
  (void)sl_http_req_header(req, "Idempotency-Key");
  if (strcmp(path, "/v1/submissions") == 0) { /* presign's create, up to signing */
    if (strcmp(meth, "POST") != 0) {
      sl_http_respond_error(req, 405, "method_not_allowed", "use POST", "Allow: POST\r\n");
      return;
    }
    static const char *const types[] = {"audio/webm", "audio/ogg", "audio/mp4",
                                        "audio/mpeg", "audio/wav", "audio/flac"};
    static const sl__create_limits lim = {
        30,    104857600, 4000,
        types, 6,         "audio/webm,audio/ogg,audio/mp4,audio/mpeg,audio/wav,audio/flac"};
    sl__question_req q[30];
    json_t *root = NULL;
    size_t n = 99;
    char code[64], msg[512];
    int st = sl__create_parse(sl_http_req_header(req, "Content-Type"), body, blen, &lim, &root, q,
                              &n, code, sizeof code, msg, sizeof msg);
    if (st) {
      CHECK((st == 400 || st == 415) && !root && code[0] && msg[0]);
      sl_http_respond_error(req, st, code, msg, NULL);
      return;
    }
    CHECK(root && n >= 1 && n <= 30);
    for (size_t i = 0; i < n; i++) {
      CHECK(q[i].no >= 1 && q[i].no <= 999 && q[i].size >= 1 && q[i].size <= 104857600);
      CHECK(q[i].prompt && strlen(q[i].prompt) <= 4000);
      CHECK(q[i].sha256_b64[0] == '\0' || strlen(q[i].sha256_b64) == 44);
      for (size_t j = 0; j < i; j++) CHECK(q[j].no != q[i].no);
    }
    char reply[64];
    int rl = snprintf(reply, sizeof reply, "{\"questions\":%zu}", n);
    json_decref(root);
    sl_http_respond(req, 201, "application/json", NULL, reply, (size_t)rl);
    return;
  }
  if (sl__mpu_handle(mpu, req)) return;
  if (sl_static_serve(web, req)) return;
  if (strncmp(path, "/v1/submissions/", 16) == 0) { /* results: not reachable */
    sl_http_respond(req, 200, "application/json", "Cache-Control: no-cache\r\n", "{}", 2);
    return;
  }
  sl_http_respond_error(req, 404, "not_found", "no such endpoint", NULL);
}

static int verbose; /* FUZZ_HTTP_VERBOSE=1: print every response (seeing what a seed reaches) */

static void check_response(const char *d, size_t n, void *ud) {
  (void)ud;
  if (verbose) fprintf(stderr, "%.*s\n----\n", (int)n, d);
  CHECK(n > 12 && memcmp(d, "HTTP/1.1 ", 9) == 0);
  int status = 0;
  for (int i = 9; i < 12; i++) {
    CHECK(d[i] >= '0' && d[i] <= '9');
    status = status * 10 + (d[i] - '0');
  }
  CHECK(status >= 100 && d[12] == ' ');
  /* the head: lines ending in CRLF, no bare CR or LF, then an empty line */
  size_t i = 0, clen = (size_t)-1;
  int json = 0;
  for (;;) {
    size_t s = i;
    while (i < n && d[i] != '\r' && d[i] != '\n') i++;
    CHECK(i + 1 < n && d[i] == '\r' && d[i + 1] == '\n');
    size_t ll = i - s;
    i += 2;
    if (ll == 0) break;
    if (ll > 16 && strncmp(d + s, "Content-Length: ", 16) == 0) {
      CHECK(clen == (size_t)-1);
      clen = strtoul(d + s + 16, NULL, 10);
    }
    if (ll >= 30 && strncmp(d + s, "Content-Type: application/json", 30) == 0) json = 1;
  }
  CHECK(clen == n - i);
  if (status >= 400) {
    CHECK(json);
    json_t *o = json_loadb(d + i, clen, 0, NULL);
    json_t *e = json_object_get(o, "error");
    CHECK(json_is_object(e) && json_is_string(json_object_get(e, "code")) &&
          json_is_string(json_object_get(e, "message")));
    json_decref(o);
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  sl_log_init("fuzz", "error");
  verbose = getenv("FUZZ_HTTP_VERBOSE") != NULL;
  if (uv_loop_init(&loop) != 0) abort();
  sl_http_limits lim = {.max_body = MAX_BODY,
                        .max_header = MAX_HEADER,
                        .request_timeout_ms = 10000,
                        .idle_timeout_ms = 60000};
  if (sl__http_server_new_detached(&srv, &loop, &lim, route, NULL) != 0) abort();
  /* borrowed by the multipart endpoints; never used (Redis never answers) */
  static sl_s3_target target;
  static sl_s3_conf s3conf;
  static sl_aredis *redis;
  if (sl_aredis_new(&redis, &loop, "redis://127.0.0.1:1") != 0 ||
      sl__mpu_new(&mpu, &loop, NULL, &target, &s3conf, redis, 900) != 0)
    abort();
  char err[256];
  if (sl_static_new(&web, SLUICE_SOURCE_DIR "/web", err, sizeof err) != 0) {
    fprintf(stderr, "fuzz_http: %s\n", err);
    abort();
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const size_t chunks[8] = {0, 1, 2, 3, 7, 64, 1000, 0};
  if (size < 1) return 0;
  unsigned mode = data[0];
  sl_http_server_set_cors(srv, mode & 16 ? "http://127.0.0.1:8080, https://app.example" : "",
                          "GET, POST, DELETE", NULL, "ETag");
  int rc = sl__http_feed(srv, data + 1, size - 1, chunks[mode & 7], (mode & 8) != 0, check_response,
                         NULL);
  CHECK(rc == 0);
  uv_run(&loop, UV_RUN_NOWAIT); /* the connection's close callbacks free it */
  return 0;
}
