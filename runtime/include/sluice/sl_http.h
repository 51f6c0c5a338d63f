/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_http.h — a small HTTP/1.1 server on a libuv loop, parsing requests with
 * nodejs/http-parser (Debian libhttp-parser).
 *
 * One request per connection is in flight at a time: after a request is
 * complete the connection stops reading (pipelined bytes stay buffered) until
 * the handler responds, so a handler may respond later (e.g. after a Kafka
 * delivery report) without any queueing. Keep-alive, bounded header and body
 * sizes, a per-request deadline (slow clients trickling headers are cut off),
 * an idle timeout between requests and a cap on open connections (each
 * holds buffers, so without one a flood of idle sockets is a memory attack),
 * a shorter deadline for a new connection's first byte, a cap on the
 * connections of one client address, and a write timeout (a client that
 * never reads its response cannot hold the connection).
 *
 * @locality everything runs on the loop thread given to sl_http_server_new();
 * sl_http_respond() must be called on that thread too.
 */
#ifndef SLUICE_SL_HTTP_H
#define SLUICE_SL_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "sluice/sl_conf.h"

typedef struct sl_http_server sl_http_server;
typedef struct sl_http_req sl_http_req;

/* Called once per complete request. The handler must eventually call
 * sl_http_respond() exactly once for it. */
typedef void (*sl_http_handler_fn)(sl_http_req *req, void *ud);

typedef struct {
  size_t max_body;                /* bytes; larger -> 413. default 1 MiB */
  size_t max_header;              /* URL + all header bytes; -> 431. default 16 KiB */
  unsigned request_timeout_ms;    /* whole request must arrive within. default 10 s */
  unsigned idle_timeout_ms;       /* keep-alive idle. default 60 s */
  size_t max_connections;         /* open at once; beyond it a new connection gets
                                     503 JSON and is closed. default 1024 */
  unsigned first_byte_timeout_ms; /* a new connection must send its first byte
                                     within. default 10 s (never longer than
                                     idle_timeout_ms) */
  unsigned write_timeout_ms;      /* a response, or a stream's oldest pending
                                     write, the peer has not taken within this
                                     closes the connection. default 30 s */
  size_t max_per_address;         /* connections open at once from one client
                                     address; beyond it a new one gets 429 JSON
                                     and is closed. default 0: no cap */
  int trace_requests;             /* a request carrying a sampled W3C traceparent
                                     gets a server span in that trace (a child
                                     of the client's span) from its arrival to
                                     its response, or to the start of its
                                     stream (sl_trace.h). default 0 */
} sl_http_limits;

/* The settings an operator tunes (http.*, one table for every stage that
 * serves HTTP: presign, results); the rest of sl_http_limits comes from the
 * stage's own table. */
typedef struct {
  int64_t first_byte_timeout_ms;
  int64_t write_timeout_ms;
  int64_t max_connections_per_address; /* 0: no cap */
} sl_http_conf;

extern const sl_conf_entry sl_http_conf_table[];
extern const size_t sl_http_conf_table_len;

/* Copies the settings of c into lim (values out of range leave lim's field,
 * so the server's default applies). */
void sl_http_limits_from_conf(sl_http_limits *lim, const sl_http_conf *c);

/* listen: "host:port" (IPv4). limits may be NULL for defaults.
 * Returns 0 or a negative code (-errno from libuv for bind errors). */
int sl_http_server_new(sl_http_server **out, uv_loop_t *loop, const char *listen,
                       const sl_http_limits *limits, sl_http_handler_fn fn, void *ud);

/* Stops listening and closes every connection. Handles close asynchronously:
 * run the loop afterwards until it has no more work. NULL-safe. */
void sl_http_server_free(sl_http_server *srv);

/* A graceful stop: stops listening, closes idle connections at once, and
 * lets each request a handler holds be answered (with Connection: close)
 * before its connection closes; the server frees itself after the last.
 * srv must not be used afterwards (sl_http_respond on the held requests
 * stays valid). NULL-safe. */
void sl_http_server_drain(sl_http_server *srv);

/* CORS for browser clients. origins: comma-separated allowed origins, "*"
 * for any, or ""/NULL to disable. With CORS on, the server answers
 * preflights (OPTIONS with Access-Control-Request-Method) itself with 204,
 * and every response to an allowed Origin carries Access-Control-Allow-Origin,
 * Vary: Origin and Access-Control-Expose-Headers (expose, e.g. "ETag").
 * methods / headers: what preflights allow. Strings are copied. */
int sl_http_server_set_cors(sl_http_server *srv, const char *origins, const char *methods,
                            const char *headers, const char *expose);

/* The bound port (useful with port 0). */
int sl_http_server_port(const sl_http_server *srv);

const char *sl_http_req_method(const sl_http_req *req);
const char *sl_http_req_path(const sl_http_req *req);  /* without query */
const char *sl_http_req_query(const sl_http_req *req); /* "" when none */
/* Case-insensitive lookup; NULL when absent. */
const char *sl_http_req_header(const sl_http_req *req, const char *name);
const char *sl_http_req_body(const sl_http_req *req, size_t *len);
/* The peer's IP address as text ("127.0.0.1", "::1") into buf. 0, or
 * SL_EINVAL when the connection is gone or the name does not fit. */
int sl_http_req_peer(const sl_http_req *req, char *buf, size_t len);

/* Sends the response. extra_headers: "Name: value\r\n" lines or NULL.
 * The request object is invalid after this call. Returns 0, SL_ENOMEM, or
 * SL_ETOOBIG when content_type would not fit the 1 KiB response head (the
 * connection is then closed). */
int sl_http_respond(sl_http_req *req, int status, const char *content_type,
                    const char *extra_headers, const void *body, size_t len);

/* ---- streamed responses (server-sent events) ----
 *
 * A response whose body is written piece by piece for as long as both
 * sides keep the connection: the head goes out at once, without
 * Content-Length and with Connection: close (the body ends when the
 * connection does). The request's buffers are released when the stream
 * starts (an open stream holds its connection's handles and what is queued
 * for the peer, nothing else); the connection is read only to notice the
 * peer closing, and what the peer sends is discarded. No idle or request
 * timeout applies: the owner sends its own heartbeats. */
typedef struct sl_http_stream sl_http_stream;

/* Runs exactly once when a stream's connection closes for any reason (the
 * peer left, a write failed, the peer fell more than max_queued behind,
 * sl_http_stream_close, the server freed or drained); s is invalid after. */
typedef void (*sl_http_stream_closed_fn)(sl_http_stream *s, void *ud);

/* Answers req with status and headers (content_type and extra_headers as
 * for sl_http_respond) and keeps the connection for sl_http_stream_write.
 * max_queued: bytes that may wait for a slow peer before the stream is
 * closed. Returns 0 with *out set (req is invalid after), SL_EINVAL
 * (a detached server, or the connection is already closing: req was then
 * consumed if the connection was closing, untouched on a detached server)
 * or SL_ENOMEM (the connection is closed). */
int sl_http_stream_start(sl_http_req *req, int status, const char *content_type,
                         const char *extra_headers, size_t max_queued,
                         sl_http_stream_closed_fn on_closed, void *ud, sl_http_stream **out);

/* Queues len bytes for the peer. Returns 0, or SL_ETOOBIG when more than
 * max_queued bytes were already waiting (the stream is then closed and
 * on_closed runs before this returns) or SL_ENOMEM (likewise closed). */
int sl_http_stream_write(sl_http_stream *s, const void *data, size_t len);

/* Ends the response (closes the connection; on_closed runs). NULL-safe. */
void sl_http_stream_close(sl_http_stream *s);

/* {"error":{"code":code,"message":message}} with the given 4xx/5xx status. */
int sl_http_respond_error(sl_http_req *req, int status, const char *code, const char *message,
                          const char *extra_headers);

#endif
