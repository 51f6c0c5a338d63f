/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_replies.h — provider answers scripted by a fuzz input, for the
 * targets that drive an OpenAI-compatible plugin through the scripted host
 * of tests/unit/plugin_testhost.h (fuzz_openai_stt, fuzz_openai_grade).
 *
 * The input is a list of answers separated by a line "~~~" ("\n~~~\n").
 * An answer may start with a status line of three digits and "\n"
 * ("429\n{...}"); without one it is a 200. Status 000 is a failed transfer
 * (timed out when the body starts with 't'); 429 and 503 carry
 * Retry-After: 2 s. Answers go, in order, to the requests the plugin has
 * sent; whatever the plugin still waits for after the input ends gets a
 * failed transfer, so every call completes.
 */
#ifndef SLUICE_FUZZ_REPLIES_H
#define SLUICE_FUZZ_REPLIES_H

#include <stdint.h>
#include <string.h>

#include "plugin_testhost.h"

#define FR_CHECK(cond)                                                                             \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

/* Answers the oldest unanswered request with status and body[0..n). */
static void fr_answer(long status, const char *body, size_t n, int timed_out) {
  FR_CHECK(th.answered < th.nreq);
  th_request *r = &th.req[th.answered++];
  sl_plugin_http_response resp = {
      status, status == 0 ? "connection refused" : "",   timed_out, body,
      n,      status == 429 || status == 503 ? 2000 : 0, 0.1};
  r->cb(&resp, r->ud);
}

/* Plays the input's answers to the plugin until it completes the call or
 * they run out, then fails the transfers still outstanding. */
static void fr_play(const uint8_t *data, size_t size) {
  static const char sep[] = "\n~~~\n";
  const char *p = (const char *)data, *end = p + size;
  while (th.completes == 0 && th.answered < th.nreq) {
    if (p > end) break;
    const char *s = p;
    size_t left = (size_t)(end - p);
    const char *e = NULL;
    for (size_t i = 0; i + sizeof sep - 1 <= left; i++)
      if (memcmp(s + i, sep, sizeof sep - 1) == 0) {
        e = s + i;
        break;
      }
    if (!e) e = end;
    long status = 200;
    if (e - s >= 4 && s[0] >= '0' && s[0] <= '9' && s[1] >= '0' && s[1] <= '9' && s[2] >= '0' &&
        s[2] <= '9' && s[3] == '\n') {
      status = (s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0');
      s += 4;
    }
    /* the body as the host hands it over: its own NUL-terminated copy */
    size_t n = (size_t)(e - s);
    char *body = malloc(n + 1);
    FR_CHECK(body != NULL);
    memcpy(body, s, n);
    body[n] = '\0';
    fr_answer(status, body, n, status == 0 && n && body[0] == 't');
    free(body);
    p = e == end ? end + 1 : e + sizeof sep - 1;
  }
  while (th.completes == 0 && th.answered < th.nreq) fr_answer(0, "", 0, 0);
}

#endif
