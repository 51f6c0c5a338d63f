/* SPDX-License-Identifier: Apache-2.0 */
/*
 * request.h — the create request of POST /v1/submissions, parsed and
 * validated (internal to presign; pure, so it is also a fuzz target).
 */
#ifndef SLUICE_PRESIGN_REQUEST_H
#define SLUICE_PRESIGN_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  int64_t max_questions, max_size, max_prompt;
  const char *const *types; /* allowed content types */
  size_t ntypes;
  const char *types_text; /* the same, as configured (for messages) */
} sl__create_limits;

/* One question as the client declared it. Strings point into the parsed
 * document (valid while it lives). */
typedef struct {
  unsigned no;              /* 1..999 */
  const char *content_type; /* one of the allowed types */
  int64_t size;             /* 1..max_size */
  const char *prompt;       /* "" when absent */
  char sha256_b64[48];      /* x-amz-checksum-sha256 value, "" when absent */
} sl__question_req;

/* Parses a create body sent with Content-Type ctype (NULL: absent).
 * Returns 0 with *root (the caller json_decref()s it) and q[0..*n) filled
 * (q has room for lim->max_questions), or the HTTP status to answer (415 or
 * 400) with code and msg set and *root NULL. */
int sl__create_parse(const char *ctype, const void *body, size_t len, const sl__create_limits *lim,
                     json_t **root, sl__question_req *q, size_t *n, char *code, size_t codelen,
                     char *msg, size_t msglen);

#endif
