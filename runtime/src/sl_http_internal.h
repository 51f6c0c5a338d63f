/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_http_internal.h — a socket-free way into the HTTP server of sl_http.c,
 * for the fuzz target tests/fuzz/fuzz_http.c (internal: not part of the
 * runtime's API, nothing in a stage calls it).
 *
 * A detached server has the same limits, CORS settings and handler as a
 * listening one but no listening socket. sl__http_feed() gives it one
 * client connection whose received bytes come from a buffer and whose
 * responses go to a callback: the same parser callbacks, limits, pipelining,
 * pause/resume after each request and error answers as a TCP connection,
 * without the kernel. The bytes are delivered through the connection's own
 * read path (on_alloc/on_read) in chunks, and a response counts as written
 * as soon as the sink has seen it (then the next pipelined request is
 * parsed, as after a real write).
 *
 * @locality the loop thread of the server, like everything in sl_http.
 */
#ifndef SLUICE_SL_HTTP_INTERNAL_H
#define SLUICE_SL_HTTP_INTERNAL_H

#include <stddef.h>
#include <uv.h>

#include "sluice/sl_http.h"

/* Receives one complete response (head and body) as the server would have
 * written it to the socket. */
typedef void (*sl__http_sink_fn)(const char *data, size_t len, void *ud);

/* A server without a listening socket (see above). limits may be NULL for
 * defaults. Free it with sl_http_server_free() and run the loop. */
int sl__http_server_new_detached(sl_http_server **out, uv_loop_t *loop,
                                 const sl_http_limits *limits, sl_http_handler_fn fn, void *ud);

/* Opens a connection on a detached server and delivers data[0..len) to it
 * in reads of at most chunk bytes (0: as large as the server's read buffer),
 * passing every response to sink. The handler must answer each request
 * before it returns (synchronously); a request it leaves unanswered just
 * stops further reads, as on a socket. Then the client either goes quiet
 * until the request timeout fires (timeout != 0: the timer callback runs at
 * once) and closes, or closes at once (EOF). The connection's handles are
 * closing when this returns: run the loop (UV_RUN_NOWAIT) to free it.
 * Returns 0, SL_EINVAL (not a detached server) or SL_ENOMEM. */
int sl__http_feed(sl_http_server *srv, const void *data, size_t len, size_t chunk, int timeout,
                  sl__http_sink_fn sink, void *sink_ud);

#endif
