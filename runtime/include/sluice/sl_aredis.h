/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_aredis.h — an asynchronous Redis connection on a libuv loop (hiredis
 * async API with its libuv adapter) that reconnects by itself.
 *
 * Commands issued while disconnected fail at once (sl_aredis_argv returns
 * non-zero, the callback is never called), so callers decide what a missing
 * answer means; a reconnect is attempted every 500 ms until it succeeds. A
 * connection counts as up only once the server has answered on it (a PING
 * after AUTH/SELECT), so a server that accepts connections but never
 * answers does not make every command wait.
 *
 * Commands have a deadline (sl_aredis_set_timeout, default 2000 ms): when
 * commands are waiting and the server has answered none of them for that
 * long, the connection is dropped, every waiting callback gets NULL, and
 * the client reconnects as after any failure. @locality loop thread only.
 *
 * Redis Cluster (a redis[s]+cluster:// URL, see sl_redis.h): the client is
 * a set of links, one such single-node client per seed and per primary,
 * with the same API. A command goes to its slot's primary and fails at once
 * when that primary's link is down (the others are not held up); it keeps a
 * copy of its arguments so it can be sent again after MOVED or ASK, and the
 * callback gets the last reply (NULL when a link failed). The deadline
 * applies per link. A tick every 100 ms reads the slot map again (CLUSTER
 * SLOTS on a link that is up, at most every 250 ms) while the map is
 * incomplete, after a MOVED, or while a primary's link is down: after a
 * failover it finds the promoted replica. sl_aredis_connected: the map
 * covers all 16384 slots and every primary's link is up. A subscriber is one
 * link to one node (PUBLISH is broadcast to all), moving to the next known
 * node when its node cannot be reached; sl_aredis_settled asks that link.
 */
#ifndef SLUICE_SL_AREDIS_H
#define SLUICE_SL_AREDIS_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "sluice/sl_redis.h"
#include <stdint.h>
#include <uv.h>

typedef struct sl_aredis sl_aredis;

/* reply is NULL on a connection error; it is freed after the callback. */
typedef void (*sl_aredis_cb)(redisReply *reply, void *ud);

/* Starts connecting to url (redis[s]://…, see sl_redis.h) on loop with the
 * default deadline. *out is owned by the caller: release it with
 * sl_aredis_free. Returns 0, SL_EINVAL or SL_ENOMEM. */
int sl_aredis_new(sl_aredis **out, uv_loop_t *loop, const char *url);

/* The command deadline in ms (redis.command_timeout_ms): with commands
 * waiting and no answer for this long, the connection is dropped and every
 * waiting callback gets NULL. It is also the socket's TCP_USER_TIMEOUT
 * (with TCP keepalive on), so the kernel notices a vanished peer too. 0: no
 * deadline (a silent server holds commands until the connection breaks).
 * Applies at once, also to the current connection. Returns 0, or SL_EINVAL
 * for a NULL r or a negative ms. Loop thread only. */
int sl_aredis_set_timeout(sl_aredis *r, int64_t ms);

/* Closes the connection; pending callbacks get NULL. Handles close
 * asynchronously: run the loop afterwards. NULL-safe. */
void sl_aredis_free(sl_aredis *r);

/* Like redisAsyncCommandArgv. If it returns non-zero the callback is never
 * called (libuv's rule). cb may be NULL: fire and forget. */
int sl_aredis_argv(sl_aredis *r, sl_aredis_cb cb, void *ud, int argc, const char **argv,
                   const size_t *lens);

int sl_aredis_connected(const sl_aredis *r);

/* A reply that is a string holding a whole finite number >= 0 (what a
 * HGET or GET of a number gives): that number, else fallback (nil, an
 * error, a timeout's NULL, anything else). */
double sl_aredis_reply_num(const redisReply *r, double fallback);

/* A message published on a subscriber's channel: msg is len bytes (not
 * NUL-terminated), valid during the call. */
typedef void (*sl_aredis_msg_cb)(const char *msg, size_t len, void *ud);
/* A subscriber's subscription came up (1: Redis confirmed the SUBSCRIBE on
 * a new connection) or went down (0: that connection is gone). Messages
 * published while it was down are lost: whatever was derived from earlier
 * ones must be discarded on either edge. Also called with 0 from inside
 * sl_aredis_free. */
typedef void (*sl_aredis_state_cb)(int up, void *ud);

/* Turns r into a subscriber to channel: after every (re)connect, once the
 * PING is answered, it SUBSCRIBEs, and the messages come to on_msg. r then
 * takes no commands (sl_aredis_argv and sl_aredis_eval return SL_EINVAL).
 * The SUBSCRIBE's confirmation is subject to the command deadline; the
 * silence between messages is not (TCP keepalive and TCP_USER_TIMEOUT
 * notice a vanished server). Call once, on the loop thread. Returns 0,
 * SL_EINVAL (NULL arguments, empty channel, called twice) or SL_ENOMEM. */
int sl_aredis_subscribe(sl_aredis *r, const char *channel, sl_aredis_msg_cb on_msg,
                        sl_aredis_state_cb on_state, void *ud);

/* 1 when r's subscription is up and every byte Redis has sent on it so far
 * has been delivered to on_msg: nothing unread on the socket (one recv with
 * MSG_PEEK) and no message half parsed. A message Redis published before
 * this returns 1 has been seen, provided it reached this host's socket; 0
 * otherwise (also when the connection is closing: EOF is unread input).
 * Loop thread only. */
int sl_aredis_settled(const sl_aredis *r);

/* Runs the script s (sl_redis.h) with nkeys keys and the rest of argv as
 * arguments: EVALSHA, and EVAL once more when Redis answers NOSCRIPT (the
 * arguments are copied for that). The callback rules of sl_aredis_argv. */
int sl_aredis_eval(sl_aredis *r, sl_aredis_cb cb, void *ud, const sl_redis_script *s, int nkeys,
                   int argc, const char **argv, const size_t *lens);

#endif
