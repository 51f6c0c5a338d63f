/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_redis.h — a synchronous Redis connection that reconnects, with AUTH
 * and TLS.
 *
 * Commands that fail with an I/O error drop the connection; the next command
 * reconnects (one attempt per call), so a Redis restart costs the callers a
 * few errors, never a crash. Every (re)connect sends AUTH (when a password
 * is known) and SELECT before any other command. Not thread-safe: one per
 * thread.
 *
 * Security is process-wide: sl_redis_security_set() (called once at start-up
 * from the common config, see sl_common_secure() in sl_stage.h) installs
 * the credentials and the TLS trust that every sl_redis and sl_aredis made
 * afterwards uses. Plain connections are hiredis contexts; rediss:// ones
 * run hiredis's protocol pieces (redisFormatCommandArgv, redisReader) over an
 * OpenSSL connection that verifies the server's certificate chain and its
 * host name or IP address. There is no switch to skip verification.
 */
#ifndef SLUICE_SL_REDIS_H
#define SLUICE_SL_REDIS_H

#include <hiredis/hiredis.h>
#include <stddef.h>

typedef struct sl_redis sl_redis;

/* A parsed redis.url: redis[s]://[user[:password]@]host[:port][/db]
 * (port 6379 and db 0 when absent; user and password %-decoded), or a Redis
 * Cluster's seed nodes: redis[s]+cluster://[user[:password]@]h1:p1,h2:p2,...
 * (no /db but /0: a cluster has only database 0). */
#define SL_REDIS_MAX_SEEDS 16
typedef struct {
  char host[256]; /* a cluster's first seed */
  int port;
  int db;
  int tls;            /* rediss:// */
  char user[128];     /* "" = the default user */
  char password[512]; /* "" = no AUTH */
  int cluster;        /* redis+cluster:// or rediss+cluster:// */
  char seeds[1024];   /* a cluster's "h1:p1,h2:p2,..." as written (each checked) */
} sl_redis_addr;

/* Returns 0 or SL_EINVAL. */
int sl_redis_addr_parse(const char *url, sl_redis_addr *a);

/* Splits redis://host[:port][/db] (kept for callers that need only these).
 * Returns 0 or SL_EINVAL. */
int sl_redis_parse_url(const char *url, char *host, size_t hostlen, int *port, int *db);

/* Copies url into buf with any password replaced by "***", for logs and
 * error messages ("rediss://app:***@host:6380/0"). Always NUL-terminates. */
void sl_redis_redact(const char *url, char *buf, size_t len);

/* Process-wide security of every Redis connection made afterwards. Strings
 * may be NULL or "" (not set). user/password apply when the URL carries
 * none. ca_file/cert_file/key_file are read now (the TLS context is built
 * once); they only matter for rediss:// URLs. Returns 0 or SL_ECONFIG with
 * the reason in err. Call before any thread uses Redis. */
typedef struct {
  const char *user;
  const char *password;
  const char *ca_file;   /* "" = the system's default CAs */
  const char *cert_file; /* client certificate (mutual TLS), optional */
  const char *key_file;
} sl_redis_security;
int sl_redis_security_set(const sl_redis_security *s, char *err, size_t errlen);
/* Forgets what sl_redis_security_set() installed (tests, exit). */
void sl_redis_security_reset(void);

/* Connects once to url, authenticates and sends PING (a cluster: to the
 * first seed that answers, then CLUSTER SLOTS must cover all 16384 slots).
 * Returns 0 on PONG,
 * SL_EUNAVAIL when the server cannot be reached (refused, timed out),
 * SL_ECONFIG when it can be reached but refuses us: AUTH rejected, TLS
 * certificate not trusted or not for this host, TLS spoken to a plain port
 * or the other way round. err holds the reason (never the password). */
int sl_redis_check(const char *url, char *err, size_t errlen);

/* The process-wide sluice_redis_errors_total counter (sync and async
 * clients count into the same series). */
struct sl_metric;
struct sl_metric *sl__redis_errors(void);

/* ---- Redis Cluster (sl_rcluster.c; used by sl_redis.c and sl_aredis.c) ---
 *
 * A redis[s]+cluster:// URL makes both clients cluster clients; callers see
 * the same API. The client learns the slot map (CLUSTER SLOTS) from any
 * reachable seed or known node at first use, and again after a MOVED or a
 * failed node connection; it keeps one link (the single-node client, with
 * its AUTH, TLS, PING and reconnects) per primary, sends each command to the
 * owner of its routing key's slot (sl_slot.h), follows MOVED (the slot's
 * owner is updated, the map refreshed, the command re-sent) and ASK (ASKING,
 * then the command on the target, once) up to SL__REDIS_MAX_REDIRECTS times
 * and then returns the error reply. TRYAGAIN, CLUSTERDOWN and CROSSSLOT are
 * returned as they are (callers treat errors as "Redis unavailable"). The sync
 * client's SCAN walks the primaries one after the other (its cursor names
 * the primary); the async client has no cluster-wide SCAN (nobody uses it):
 * it goes to the owner of its cursor's slot. */

/* The hash slot of the routing key of a command: EVAL/EVALSHA/FCALL(_RO)
 * argv[3] when numkeys > 0; XREAD/XREADGROUP the first key after STREAMS;
 * key-less commands (PING, SCRIPT, INFO, TIME, PUBLISH, CLUSTER, ...) -1
 * (any primary); otherwise argv[1]. lens may be NULL (NUL-terminated). Pure. */
int sl_redis_route(int argc, const char **argv, const size_t *lens);

#define SL__REDIS_MAX_REDIRECTS 5
#define SL__REDIS_MAX_NODES 64

/* A MOVED or ASK error reply's target. */
typedef struct {
  int ask; /* 1: ASK, 0: MOVED */
  int slot;
  char host[256];
  int port;
} sl__redis_redirect;
/* 1 and *out when rep is "MOVED slot host:port" or "ASK slot host:port"
 * (an empty host is the node that answered: the caller fills it in), else 0. */
int sl__redis_redirect_parse(const struct redisReply *rep, sl__redis_redirect *out);

/* The nodes a cluster client knows (seeds first, then every primary seen),
 * and which of them owns each slot (-1: nobody known). */
typedef struct {
  int n;
  struct {
    char host[256];
    int port;
  } node[SL__REDIS_MAX_NODES];
  signed char owner[16384];
  int covered; /* slots with an owner */
} sl__redis_map;
/* Fills m's node list with a's seeds and clears the owners. 0 or SL_EINVAL. */
int sl__redis_map_init(sl__redis_map *m, const sl_redis_addr *a);
/* The index of host:port in m, added when new; -1 when m is full. */
int sl__redis_map_node(sl__redis_map *m, const char *host, int port);
/* Replaces m's owners by a CLUSTER SLOTS reply (asked: the node that
 * answered, for entries without a host). Returns the slots covered, or
 * SL_EREDIS when the reply is not a slot map (m unchanged). */
int sl__redis_map_apply(sl__redis_map *m, const struct redisReply *rep, const char *asked_host);
/* 1 when node i owns a slot. */
int sl__redis_map_primary(const sl__redis_map *m, int i);

/* The redirect and map-refresh counters (sluice_redis_redirects_total
 * {kind="moved|ask"}, sluice_redis_slot_refreshes_total). */
struct sl_metric *sl__redis_redirects(int ask);
struct sl_metric *sl__redis_refreshes(void);

/* The resolved target of url: its address with the process-wide user and
 * password filled in where the URL has none. Returns 0 or SL_EINVAL. */
int sl__redis_target(const char *url, sl_redis_addr *a);

/* A new client-side SSL for host (SNI, and certificate checked against the
 * host name or IP address) from the process-wide TLS context, or NULL with
 * the reason in err. */
struct ssl_st;
struct ssl_st *sl__redis_ssl_new(const char *host, char *err, size_t errlen);

/* Describes why an SSL call returned ret (OpenSSL's error queue, the
 * certificate verification result), then clears the queue. */
void sl__redis_ssl_why(struct ssl_st *ssl, int ret, char *err, size_t errlen);

/* url: redis[s]://... or redis[s]+cluster://... (see sl_redis_addr). Does
 * not connect yet. A cluster client opens a connection to a node when a
 * command first goes there. */
int sl_redis_new(sl_redis **out, const char *url);
void sl_redis_free(sl_redis *r);

/* Like redisCommandArgv. Returns a reply the caller frees with
 * freeReplyObject(), or NULL on a connection error (then *err holds why).
 * A reply of type REDIS_REPLY_ERROR is returned as is. */
redisReply *sl_redis_argv(sl_redis *r, int argc, const char **argv, const size_t *lens, char *err,
                          size_t errlen);

/* printf-style convenience over sl_redis_argv for commands without binary
 * arguments: fmt is split on spaces after formatting (so no argument may
 * contain a space). */
/* The value of field name in an HGETALL reply (an array of field, value
 * pairs), or NULL when the reply has no such field or is not an array. */
const char *sl_redis_hash_field(const redisReply *rep, const char *name);

redisReply *sl_redis_cmd(sl_redis *r, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A Lua script that Redis runs by its SHA-1 (EVALSHA): its text goes over
 * the wire only when Redis does not know it (NOSCRIPT: a new or restarted
 * Redis, SCRIPT FLUSH, a failover), so a script run for every message costs
 * its arguments, not its text, and Redis does not hash the text every time.
 * Built once (sl_redis_script_init) before threads use it; read-only after. */
typedef struct {
  const char *text; /* borrowed: must outlive the script (a string literal) */
  char sha1[41];    /* hex */
} sl_redis_script;
/* s->text = text and its SHA-1. Returns 0 or SL_EINVAL. */
int sl_redis_script_init(sl_redis_script *s, const char *text);
/* 1 when reply is Redis's NOSCRIPT error (the script must be sent). */
int sl_redis_noscript(const redisReply *reply);

/* Runs s with nkeys keys and the rest as arguments (argv holds the keys,
 * then the arguments: argc in all): EVALSHA, and EVAL once more when Redis
 * answers NOSCRIPT. Returns what sl_redis_argv returns. */
redisReply *sl_redis_eval(sl_redis *r, const sl_redis_script *s, int nkeys, int argc,
                          const char **argv, const size_t *lens, char *err, size_t errlen);

/* Internal (sl_redis.c, sl_aredis.c): the argument vector of a call of s,
 * EVALSHA when sha is 1 else EVAL, into out/outlens (3 + argc entries; nk
 * receives the key count as text). Returns 0 or SL_EINVAL (more than
 * SL__REDIS_SCRIPT_MAX_ARGS arguments). */
#define SL__REDIS_SCRIPT_MAX_ARGS 80
int sl__redis_script_argv(const sl_redis_script *s, int sha, int nkeys, int argc, const char **argv,
                          const size_t *lens, char *nk, size_t nklen, const char **out,
                          size_t *outlens);

/* A registry of one sl_redis per worker thread (see sl_tls.h) for blocking
 * processors: sl_tls_get() returns the calling thread's connection. */
struct sl_tls;
int sl_redis_tls_new(struct sl_tls **out, const char *url);

#endif
