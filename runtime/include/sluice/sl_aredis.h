/*
 * sl_aredis.h — an asynchronous Redis connection on a libuv loop (hiredis
 * async API with its libuv adapter) that reconnects by itself.
 *
 * Commands issued while disconnected fail at once (the callback gets NULL),
 * so callers decide what a missing answer means; a reconnect is attempted
 * every 500 ms until it succeeds. @locality loop thread only.
 */
#ifndef SLUICE_SL_AREDIS_H
#define SLUICE_SL_AREDIS_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <uv.h>

typedef struct sl_aredis sl_aredis;

/* reply is NULL on a connection error; it is freed after the callback. */
typedef void (*sl_aredis_cb)(redisReply *reply, void *ud);

int sl_aredis_new(sl_aredis **out, uv_loop_t *loop, const char *url);

/* Closes the connection; pending callbacks get NULL. Handles close
 * asynchronously: run the loop afterwards. NULL-safe. */
void sl_aredis_free(sl_aredis *r);

/* Like redisAsyncCommandArgv. If it returns non-zero the callback is never
 * called (libuv's rule). cb may be NULL: fire and forget. */
int sl_aredis_argv(sl_aredis *r, sl_aredis_cb cb, void *ud, int argc, const char **argv,
                   const size_t *lens);

int sl_aredis_connected(const sl_aredis *r);

#endif
