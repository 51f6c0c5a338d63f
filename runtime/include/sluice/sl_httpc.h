/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_httpc.h — an HTTP client on a libuv loop (libcurl's multi interface
 * driven by uv_poll and a uv_timer), for async processors that call external
 * providers: thousands of requests in flight on one thread, no thread per
 * call.
 *
 * Every request ends in exactly one callback, on the loop thread: with the
 * HTTP status, or with status 0 and the transport error (timeout, refused
 * connection, truncated body, response over its size limit, cancelled by
 * sl_httpc_free). Bodies are collected into bounded memory. Connections
 * are kept open between requests (as many as were open at once, up to
 * 8192), so a stage calling a host per message does not connect per message.
 * @locality loop thread only.
 */
#ifndef SLUICE_SL_HTTPC_H
#define SLUICE_SL_HTTPC_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct sl_httpc sl_httpc;

typedef struct {
  long status;       /* HTTP status, 0 when the transfer failed */
  const char *error; /* transport error text when status is 0, else "" */
  int timed_out;     /* the transfer hit its timeout */
  const char *body;  /* NUL-terminated response body (may contain NULs) */
  size_t body_len;
  int64_t retry_after_ms; /* parsed Retry-After (seconds or HTTP date), else 0 */
  double total_s;         /* transfer time */
  int too_big;            /* status 0 because the body exceeded max_response */
  void *req_;             /* private: for sl_httpc_take_body */
} sl_httpc_response;

/* The response is valid only during the callback. When it runs, the
 * transfer is over (its handle and form are freed): memory a form part
 * streamed from may be freed by the callback. */
typedef void (*sl_httpc_cb)(const sl_httpc_response *r, void *ud);

/* Inside the callback: takes the body out of the response instead of
 * copying it. Returns a malloc'd, NUL-terminated buffer of r->body_len
 * bytes that the caller owns and free()s (NULL when out of memory); r->body
 * must not be read afterwards. A body whose size the server announced
 * (Content-Length) was received into one allocation of that size. */
char *sl_httpc_take_body(const sl_httpc_response *r);

typedef struct {
  const char *method; /* "GET", "POST", ... */
  const char *url;
  const char *const *headers; /* "Name: value" strings, NULL-terminated, or NULL */
  const void *body;           /* request body (copied), or NULL */
  size_t body_len;
  void *mime;              /* a curl_mime* for multipart/form-data (ownership
                              passes to the request; freed when the transfer
                              ends, before the callback), or NULL */
  long timeout_ms;         /* whole transfer; 0 = 30 s */
  long connect_timeout_ms; /* 0 = 5 s */
  size_t max_response;     /* 0 = 8 MiB */
  const char *ca_file;     /* PEM CAs verifying an https peer (CURLOPT_CAINFO),
                              NULL/"" = the system's */
  const char *resolve;     /* "host:port:address": connect to this address,
                              already checked by the caller, instead of
                              resolving host again (CURLOPT_RESOLVE; TLS
                              still verifies host). Such a request speaks
                              http or https only. NULL = resolve normally.
                              Redirects are never followed. */
  const char *proxy;       /* NULL: libcurl's default (the http_proxy,
                              https_proxy, all_proxy and no_proxy of the
                              environment), except for a request with
                              resolve, which never takes a proxy from the
                              environment (the proxy would resolve the
                              name: the pin bypassed); "": no proxy;
                              otherwise this proxy for every host
                              (CURLOPT_PROXY, no_proxy ignored). */
} sl_httpc_request;

int sl_httpc_new(sl_httpc **out, uv_loop_t *loop);

/* Starts a request. Returns 0 (the callback will run exactly once, never
 * from inside this call) or a negative code (it will not run). */
int sl_httpc_send(sl_httpc *c, const sl_httpc_request *req, sl_httpc_cb cb, void *ud);

/* Requests in flight. */
size_t sl_httpc_pending(const sl_httpc *c);

/* Cancels what is in flight (callbacks run now with status 0, "cancelled")
 * and frees the client; its handles close asynchronously, so run the loop
 * afterwards. NULL-safe. */
void sl_httpc_free(sl_httpc *c);

#endif
