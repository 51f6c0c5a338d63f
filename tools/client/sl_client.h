/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_client.h — the Sluice API client code that `sluicectl submit` and the
 * load generators (bench/pipeline/loadgen.c) share: what a client sends to
 * create a submission and what it reads from presign's reply
 * (docs/openapi.yaml, CreateRequest/CreateReply), so the two never drift
 * from each other or from the API. Transport stays with each caller
 * (sluicectl blocks on libcurl easy handles, the load generator drives
 * thousands of transfers on one curl multi handle).
 *
 * @locality Pure functions over caller-owned memory; thread-safe.
 */
#ifndef SLUICE_SL_CLIENT_H
#define SLUICE_SL_CLIENT_H

#include <stddef.h>
#include <stdint.h>

/* One answer the client declares at create. prompt may be NULL or "". */
typedef struct {
  int no;                   /* 1.., or 0: the position (1-based) */
  const char *content_type; /* "audio/webm" */
  int64_t size;             /* bytes, as the upload will send */
  const char *prompt;
} sl_client_question;

/* The create request body {"questions":[...]} (malloc'd, NUL-terminated),
 * or NULL when out of memory. */
char *sl_client_create_body(const sl_client_question *q, size_t n);

/* One upload presign issued. headers: the "Name: value" lines to send with
 * the PUT, NULL-terminated; Content-Length is left out (the HTTP client
 * sends it from the body), everything else is signed and must go as given. */
typedef struct {
  int no;
  char *url;
  char *object_key;
  char **headers;
} sl_client_upload;

typedef struct {
  char *submission_id;
  char *results_token;
  char *results_url;
  sl_client_upload *uploads; /* in the order of the request */
  size_t n;
} sl_client_created;

/* Parses presign's 201 body. `want` is the number of questions asked for
 * (the reply must hold as many). Returns 0, or -1 with the reason in err
 * (not JSON, a field missing or of the wrong type); *out is then empty.
 * Free with sl_client_created_free (NULL-safe, also after -1). */
int sl_client_created_parse(const char *body, size_t len, size_t want, sl_client_created *out,
                            char *err, size_t errlen);
void sl_client_created_free(sl_client_created *c);

/* The declared type of an answer file, by its extension (.wav .flac .ogg
 * .oga .opus .webm .mp3 .m4a .mp4, any case), or NULL. */
const char *sl_client_content_type(const char *path);

#endif
