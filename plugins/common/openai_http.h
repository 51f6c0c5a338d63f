/* SPDX-License-Identifier: Apache-2.0 */
/*
 * openai_http.h — what the two OpenAI-compatible plugins (stt/openai,
 * grade/openai) share: the endpoint URL, the HTTP-status-to-outcome policy
 * and error-text helpers. Header-only (static inline) because each plugin is
 * its own shared object that links nothing but jansson and libc.
 *
 * Outcome policy for a provider answer (docs/plugins-openai.md):
 *   transfer failed (status 0): timeout -> RETRY provider_timeout; any other
 *       transport error (refused, reset, DNS, reply over max_response)
 *       -> RETRY provider_unreachable
 *   408 -> RETRY provider_timeout; 429 -> RETRY provider_throttled,
 *       throttled = 1, honouring Retry-After; 5xx -> RETRY
 *       provider_unavailable (with Retry-After when sent)
 *   401, 403 -> FAIL provider_auth; 400, 413, 415 and every other 4xx
 *       -> FAIL provider_rejected, with the provider's error message
 *   2xx -> the plugin parses the body.
 */
#ifndef SLUICE_PLUGINS_OPENAI_HTTP_H
#define SLUICE_PLUGINS_OPENAI_HTTP_H

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "sluice/sl_plugin.h"

/* A verdict on a non-2xx answer. */
typedef struct {
  sl_plugin_outcome outcome;
  const char *error_class;
  int throttled;
  int64_t retry_after_ms;
  char reason[512];
} oai_verdict;

/* "{base}/v1{path}" with trailing slashes of base dropped and a trailing
 * "/v1" accepted (SDK-style base URLs such as https://api.openai.com/v1).
 * Returns 0, or -1 when it does not fit. */
static inline int oai_url(const char *base, const char *path, char *out, size_t len) {
  size_t bl = strlen(base);
  while (bl && base[bl - 1] == '/') bl--;
  int has_v1 = bl >= 3 && strncmp(base + bl - 3, "/v1", 3) == 0;
  int n = snprintf(out, len, "%.*s%s%s", (int)bl, base, has_v1 ? "" : "/v1", path);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* Copies up to max bytes of s into out as printable ASCII (others -> '?'),
 * with "..." when cut. */
static inline void oai_snippet(const char *s, size_t n, size_t max, char *out, size_t len) {
  size_t k = 0;
  if (!s) n = 0;
  for (size_t i = 0; i < n && i < max && k + 4 < len; i++)
    out[k++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
  if (n > max && k + 4 < len) out[k++] = '.', out[k++] = '.', out[k++] = '.';
  out[k] = '\0';
}

/* The provider's error message: error.message, a string "error", or the
 * start of the body. */
static inline void oai_error_text(const char *body, size_t n, char *out, size_t len) {
  json_t *o = body && n ? json_loadb(body, n, 0, NULL) : NULL;
  json_t *e = json_object_get(o, "error");
  const char *m = json_string_value(json_object_get(e, "message"));
  if (!m) m = json_string_value(e);
  if (!m) m = json_string_value(json_object_get(o, "message"));
  if (!m) m = json_string_value(json_object_get(o, "detail"));
  if (m)
    oai_snippet(m, strlen(m), 300, out, len);
  else
    oai_snippet(body, n, 200, out, len);
  json_decref(o);
}

/* Judges a response. Returns 1 for 2xx (v untouched: parse the body), 0
 * with *v filled otherwise. */
static inline int oai_judge(const sl_plugin_http_response *r, long timeout_ms, oai_verdict *v) {
  memset(v, 0, sizeof *v);
  if (r->status >= 200 && r->status < 300) return 1;
  v->outcome = SL_PLUGIN_RETRY;
  v->retry_after_ms = r->retry_after_ms > 0 ? r->retry_after_ms : 0;
  if (r->status == 0) {
    if (r->timed_out) {
      v->error_class = "provider_timeout";
      snprintf(v->reason, sizeof v->reason, "no complete answer within %ld ms%s%s", timeout_ms,
               r->error && *r->error ? ": " : "", r->error ? r->error : "");
    } else {
      v->error_class = "provider_unreachable";
      snprintf(v->reason, sizeof v->reason, "transfer failed: %s",
               r->error && *r->error ? r->error : "(no detail)");
    }
    return 0;
  }
  char msg[400];
  oai_error_text(r->body, r->body_len, msg, sizeof msg);
  if (r->status == 408) {
    v->error_class = "provider_timeout";
  } else if (r->status == 429) {
    v->error_class = "provider_throttled";
    v->throttled = 1;
  } else if (r->status >= 500) {
    v->error_class = "provider_unavailable";
  } else {
    v->outcome = SL_PLUGIN_FAIL;
    v->retry_after_ms = 0;
    v->error_class = r->status == 401 || r->status == 403 ? "provider_auth" : "provider_rejected";
  }
  snprintf(v->reason, sizeof v->reason, "HTTP %ld: %s", r->status, msg[0] ? msg : "(no body)");
  return 0;
}

#endif
