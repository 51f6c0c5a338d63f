/*
 * sl_redis.h — a synchronous hiredis connection that reconnects.
 *
 * Commands that fail with an I/O error drop the connection; the next command
 * reconnects (one attempt per call), so a Redis restart costs the callers a
 * few errors, never a crash. Not thread-safe: one per thread.
 */
#ifndef SLUICE_SL_REDIS_H
#define SLUICE_SL_REDIS_H

#include <hiredis/hiredis.h>
#include <stddef.h>

typedef struct sl_redis sl_redis;

/* Splits redis://host[:port][/db] (port 6379 and db 0 when absent).
 * Returns 0 or SL_EINVAL. */
int sl_redis_parse_url(const char *url, char *host, size_t hostlen, int *port, int *db);

/* The process-wide sluice_redis_errors_total counter (sync and async
 * clients count into the same series). */
struct sl_metric;
struct sl_metric *sl__redis_errors(void);

/* url: redis://host:port[/db]. Does not connect yet. */
int sl_redis_new(sl_redis **out, const char *url);
void sl_redis_free(sl_redis *r);

/* Like redisCommandArgv. Returns a reply the caller frees with
 * freeReplyObject(), or NULL on a connection error (then *err holds why).
 * A reply of type REDIS_REPLY_ERROR is returned as is. */
redisReply *sl_redis_argv(sl_redis *r, int argc, const char **argv, const size_t *lens,
                          char *err, size_t errlen);

/* A registry of one sl_redis per worker thread (see sl_tls.h) for blocking
 * processors: sl_tls_get() returns the calling thread's connection. */
struct sl_tls;
int sl_redis_tls_new(struct sl_tls **out, const char *url);

#endif
