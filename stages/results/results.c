/* SPDX-License-Identifier: Apache-2.0 */
/*
 * results.c — `sluice results`: the API clients poll.
 *
 * GET /v1/submissions/{id} with "Authorization: Bearer <credential>" — the
 * submission's results token, or its owner's API key or JWT — returns every
 * question's state (the progress label of the pipeline stage it reached,
 * done or failed) with transcript, grade or failure reason, the list of
 * stages in order ("stages", from the pipeline description), and a
 * summary. It reads the hash materialize maintains (one HGETALL) and never
 * writes. A missing credential, or an API key/JWT that is not valid, is
 * 401; a wrong token, another user's submission and an unknown submission
 * are the same 404, so the API does not reveal which ids exist; except
 * while materialize rebuilds a lost view (its marker missing), when any id
 * not in Redis is 503 view_rebuilding with Retry-After. The token
 * check hashes sid, owner and token together (stages/lib/auth.h) and
 * compares in constant time.
 * Replies carry an ETag and honour If-None-Match with 304; Cache-Control:
 * no-store. The ETag names the submission's version (the view's write
 * sequence at its last change, kept by materialize's apply script in the
 * same atomic write as the change), the polling hint and the stage list;
 * so a poll whose ETag names the current version is answered 304 from one
 * HMGET of four fields (fresh_304), without reading or rendering the view.
 * Memory per open event stream: the connection's handles and this file's
 * struct sse (about 2 KB measured by bench/sse/run; the request's buffers are released when the
 * stream starts, sl_http_stream_start), plus what waits for a slow reader
 * (at most SSE_MAX_QUEUED).
 * A view written before versions existed gets the sha256 of its body.
 * Retry-After and the body's "poll" object carry the polling policy
 * (poll_after_s), including when to stop.
 *
 * GET /v1/submissions/{id}/events streams the same view as server-sent
 * events (see "server-sent events" below).
 *
 * DELETE /v1/submissions/{id}, with the owner's API key or JWT (a results
 * token may read, not erase: 403), asks for the submission to be erased
 * (docs/privacy.md): an ErasureRequest written to the erasure requests
 * topic and acknowledged by Kafka, then the erasure's state record
 * (lib/erase.h) set to "erasing", then 202 with that state; the erase stage
 * carries it out and sets "erased". GET /v1/submissions/{id}/erasure (the
 * owner) answers the record; a DELETE of a submission that has one
 * answers it too (202 while erasing, 200 once erased), so repeating it
 * asks for nothing more. Kafka refusing or not answering within
 * results.kafka_timeout_ms: 503 with Retry-After, nothing recorded. A
 * pipeline whose results stage writes no topic of ErasureRequest (one
 * from before erasures) answers a DELETE 501 erasure_not_configured.
 *
 * A submission reaches the view a moment after presign's 201 (materialize
 * applies its create from Kafka), longer when materialize is behind. An id
 * not in the view whose UUIDv7 time is within results.pending_s of now is
 * taken to be on its way: a GET is the same 404 with Retry-After: 1, and an
 * event stream is held open (heartbeats only) until the submission
 * appears, then checked against the credential (allowed: its events; not:
 * closed, and EventSource's reconnect gets the 404). Every id of that age
 * gets the same answer, existing or not, so nothing is revealed that the
 * id does not say itself.
 *
 * So that held (or any) streams cannot starve the process, streams are
 * counted per client address and per credential (the sha256 of the text
 * presented, valid or not) and refused with 429 beyond
 * results.max_streams_per_address / _per_credential, before any Redis
 * call; and every stream ends after results.stream_max_s (checked at each
 * heartbeat), so EventSource reconnects and its credential is checked again.
 *
 * @locality single thread (libuv loop); the erasure requests' delivery
 * reports are served on it too (sl_kafka_uv). Redis is only read through two
 * asynchronous connections, so the loop never waits for it: one for
 * requests (an API key's user, the view, a poll's version check, the
 * streams' refreshes) with the deadline results.redis_timeout_ms, after
 * which waiting requests get 503 and, until Redis answers again, new ones
 * at once, while /readyz is 503 and open streams keep their heartbeats;
 * and one for the change feed (XREAD BLOCK).
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/client_address.h"
#include "lib/process.h"
#include "lib/stage.h"
#include "lib/view.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "sluice.pb-c.h"
#include "sluice/sl_aredis.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_err.h"
#include "sluice/sl_http.h"
#include "sluice/sl_id.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_rkey.h"
#include "lib/auth.h"
#include "lib/erase.h"

typedef struct {
  char *listen;
  int64_t max_connections;
  char *cors_origins;
  int64_t max_streams;
  int64_t heartbeat_ms;
  int64_t version_cache;
  int64_t pending_s;
  int64_t max_streams_per_address;
  int64_t max_streams_per_credential;
  int64_t stream_max_s;
  int64_t redis_timeout_ms;
  char *client_address_header;
  int64_t kafka_timeout_ms;
} results_conf;

static const sl_conf_entry results_table[] = {
    {"results.listen", SL_CONF_STR, "127.0.0.1:8081", offsetof(results_conf, listen),
     "API listen address", 0},
    {"results.max_connections", SL_CONF_INT, "1024", offsetof(results_conf, max_connections),
     "open connections at once; more get 503 and are closed", 0},
    {"results.cors_origins", SL_CONF_STR, "", offsetof(results_conf, cors_origins),
     "browser origins allowed by CORS, comma-separated, or * (empty: CORS off)", 0},
    {"results.max_streams", SL_CONF_INT, "10000", offsetof(results_conf, max_streams),
     "server-sent event streams open at once; more get 503 too_many_streams (each is also "
     "one of results.max_connections)",
     0},
    {"results.heartbeat_ms", SL_CONF_INT, "15000", offsetof(results_conf, heartbeat_ms),
     "how often every open event stream gets a comment line, so proxies and clients "
     "see it alive",
     0},
    {"results.version_cache", SL_CONF_INT, "16384", offsetof(results_conf, version_cache),
     "submissions whose version this process keeps to answer polls' 304 without Redis "
     "(about 300 bytes each; kept current by the change feed, at most 1 s old; 0: off)",
     0},
    {"results.pending_s", SL_CONF_INT, "60", offsetof(results_conf, pending_s),
     "for this long around the time in its id (a UUIDv7), a submission not in the view yet "
     "is taken to be on its way (materialize records it a moment after presign's 201): its "
     "event stream is held open until it appears, and a GET is 404 with Retry-After: 1; "
     "0: a plain 404 at once",
     0},
    {"results.max_streams_per_address", SL_CONF_INT, "32",
     offsetof(results_conf, max_streams_per_address),
     "event streams open at once from one client address (the TCP peer); more get 429 "
     "too_many_streams_from_address with Retry-After, before any credential is checked "
     "(0: no cap; behind a proxy every client has its address)",
     0},
    {"results.max_streams_per_credential", SL_CONF_INT, "32",
     offsetof(results_conf, max_streams_per_credential),
     "event streams open at once with one credential (the same results token, API key or JWT, "
     "valid or not); more get 429 too_many_streams_for_credential with Retry-After (0: no cap)",
     0},
    {"results.stream_max_s", SL_CONF_INT, "600", offsetof(results_conf, stream_max_s),
     "the longest an event stream stays open (less up to 10%, so that streams opened together "
     "do not reconnect together): then it ends (at the next heartbeat) and "
     "EventSource reconnects with Last-Event-ID, which checks the credential again and "
     "loses no event (0: no limit)",
     0},
    {"results.kafka_timeout_ms", SL_CONF_INT, "5000", offsetof(results_conf, kafka_timeout_ms),
     "how long a DELETE waits for Kafka to take its erasure request before answering 503", 0},
    {"results.redis_timeout_ms", SL_CONF_INT, "1000", offsetof(results_conf, redis_timeout_ms),
     "deadline of the Redis reads a request waits for (the credential, the view): a Redis that "
     "has answered none of them for this long is treated as down, the requests waiting get 503 "
     "unavailable, later ones 503 at once until it answers again, and /readyz is 503 meanwhile "
     "(0: redis.command_timeout_ms)",
     0},
    {"results.client_address_header", SL_CONF_STR, "",
     offsetof(results_conf, client_address_header),
     "behind a trusted proxy: the header whose last entry is the client address "
     "results.max_streams_per_address counts (e.g. X-Forwarded-For; empty: the TCP peer). "
     "Set it only when every request comes through a proxy that appends to it",
     0},
};
static const size_t results_table_len = sizeof results_table / sizeof results_table[0];

typedef struct sse sse;     /* an open event stream */
typedef struct vslot vslot; /* a slot of the version cache (fresh_304) */
#define SSE_BUCKETS 4096

/* Open event streams per client address or per credential: one entry per
 * key with a stream open (so at most results.max_streams of them), freed
 * with its last stream. */
typedef struct sse_count sse_count;
struct sse_count {
  sse_count *next;
  size_t n;
  char key[48]; /* "a<address>" or "c<32 hex of the credential's sha256>" */
};
#define COUNT_BUCKETS 1024

typedef struct {
  sl_common_conf *cc;
  results_conf *rc;
  sl_http_server *srv;
  uv_signal_t sigterm, sigint;
  sl_metric *m_ok, *m_304, *m_404, *m_401, *m_429, *m_err;
  sl__auth *auth;
  json_t *stages;     /* the pipeline's progress labels, then "done" (built once) */
  char stages_tag[9]; /* 8 hex of their sha256: in every versioned ETag */
  /* server-sent events */
  sse *streams[SSE_BUCKETS]; /* by submission (sid_bucket) */
  size_t nstreams;
  size_t nheld; /* of them, held for a submission not in the view yet */
  unsigned gen; /* catch-up round (on_feed) */
  sl_metric *m_streams, *m_held, *m_events;
  sse_count *counts[COUNT_BUCKETS]; /* streams per address and per credential */
  sl_aredis *ar;                    /* polls' version reads (fresh_304) */
  sl_redis_script apikey;           /* SL__APIKEY_LOOKUP_LUA */
  vslot *vcache;                    /* results.version_cache slots, or NULL */
  size_t nvcache;
  uv_loop_t *loop;
  sl_aredis *feed; /* XREAD of SL__VIEW_FEED (blocks: a connection of its own) */
  uv_timer_t feed_timer, hb_timer, probe_timer;
  int probing;          /* a PING of the readiness probe is on its way */
  sl_admin *admin;      /* /readyz follows whether R->ar is up */
  char (*feed_ids)[64]; /* per bucket: the last entry read; "": take the newest first */
  int feed_b;           /* the bucket the feed reader is at */
  int feed_ready;       /* buckets whose last entry is known: all of them, the feed is read */
  size_t feed_got;      /* entries read in this round of the buckets */
  int feed_lost;        /* the feed failed: every stream catches up */
  int stopping;
  rd_kafka_t *producer; /* erasure requests */
  sl_kafka_uv *ku;      /* its delivery reports, on the loop */
  sl_metric *m_erase_asked;
} results;

static int valid_id(const char *s) {
  size_t n = strlen(s);
  if (n != 36) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    int dash = (i == 8 || i == 13 || i == 18 || i == 23);
    if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return 0;
  }
  return 1;
}

/* Milliseconds from now to the end of the window in which sid (a valid
 * id) counts as on its way to the view (results.pending_s around the
 * UUIDv7 time in it); 0 when it does not (out of the window, not a UUIDv7,
 * or the window is off). */
static int64_t pending_left_ms(const results *R, const char *sid) {
  if (R->rc->pending_s <= 0 || sid[14] != '7') return 0;
  int64_t t = 0;
  for (int i = 0; i < 13; i++) {
    if (i == 8) continue; /* the dash: 48 bits of unix ms in 12 hex digits */
    char c = sid[i];
    t = t * 16 + (c <= '9' ? c - '0' : c - 'a' + 10);
  }
  int64_t now = sl_now_ms(), w = R->rc->pending_s * 1000;
  if (t < now - w || t > now + w) return 0;
  return t + w - now;
}

/* The client polling policy, by time since the submission was accepted:
 * every 2 s for the first 30 s, then 5 s (to 1 min), 10 s (to 2 min), 30 s;
 * after 10 minutes, or once every question is done or failed, stop (0). */
static int poll_after_s(int64_t age_s, int complete) {
  if (complete || age_s >= 600) return 0;
  if (age_s < 30) return 2;
  if (age_s < 60) return 5;
  if (age_s < 120) return 10;
  return 30;
}

static const char *field(const redisReply *rep, const char *name) {
  return sl_redis_hash_field(rep, name);
}

static int unauthorized(results *R, sl_http_req *req, const char *code, const char *msg) {
  sl_metric_add(R->m_401, 1);
  return sl_http_respond_error(req, 401, code, msg,
                               "WWW-Authenticate: Bearer realm=\"sluice\"\r\n");
}

static unsigned count_bucket(const char *key) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *key; key++) h = (h ^ (uint8_t)*key) * 16777619u;
  return h & (COUNT_BUCKETS - 1);
}

/* The entry of key, or NULL (create: a new one at 0, NULL only when out of
 * memory). */
static sse_count *count_find(results *R, const char *key, int create) {
  unsigned b = count_bucket(key);
  for (sse_count *c = R->counts[b]; c; c = c->next)
    if (strcmp(c->key, key) == 0) return c;
  if (!create) return NULL;
  sse_count *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  snprintf(c->key, sizeof c->key, "%s", key);
  c->next = R->counts[b];
  R->counts[b] = c;
  return c;
}

static void count_put(results *R, sse_count *c) {
  if (!c || --c->n > 0) return;
  for (sse_count **pp = &R->counts[count_bucket(c->key)]; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      free(c);
      return;
    }
}

/* What a request reads the view for: a poll (a 304 may be decided from the
 * version), the full view, or an event stream (the token may come in the
 * query). */
enum { VIEW_POLL, VIEW_FULL, VIEW_EVENTS, VIEW_ERASE, VIEW_ERASURE };

/* Whether the credential may read submission sid, whose hash holds owner
 * and tok (the results token's hash; either may be NULL): user is the
 * caller an API key or JWT named, "" for a results token. */
static int may_read(const char *sid, const char *owner, const char *tok, const char *user,
                    const char *cred) {
  if (owner && user[0]) return sl_secure_equal(owner, user);
  if (!owner || !tok || user[0]) return 0;
  char token_hash[65];
  return sl__results_token_hash(sid, owner, cred, token_hash) == 0 &&
         sl_secure_equal(tok, token_hash);
}

/* A versioned ETag: "<version>-<retry_after_s>-<stages_tag>". The body is
 * a function of the view at that version (written atomically with it,
 * apply_lua.h), of the polling hint and of this process's stage list, so
 * equal ETags mean equal bodies. */
static void versioned_etag(const results *R, const char *version, int after, char *out,
                           size_t len) {
  snprintf(out, len, "\"%.24s-%d-%s\"", version, after, R->stages_tag);
}

/* Parses a versioned ETag sent back in If-None-Match: 1 with its version
 * (digits) and hint, 0 when it is not one of this process's. */
static int parse_etag(const results *R, const char *inm, char version[25], int *after) {
  size_t n = strspn(inm + (inm[0] == '"'), "0123456789");
  if (inm[0] != '"' || n == 0 || n > 24 || inm[1 + n] != '-') return 0;
  memcpy(version, inm + 1, n);
  version[n] = '\0';
  const char *p = inm + 2 + n;
  size_t m = strspn(p, "0123456789");
  if (m == 0 || m > 4 || p[m] != '-') return 0;
  *after = atoi(p);
  p += m + 1;
  return strncmp(p, R->stages_tag, 8) == 0 && p[8] == '"' && p[9] == '\0';
}

/* The 304 decided from four small fields instead of the whole view: the
 * client's ETag names the version it has; if the submission is still at
 * that version the view has not changed since (the version moves in the
 * same atomic write as any change), and the polling hint is recomputed from
 * the age (a hint of 0 — complete, or past 10 minutes — stays 0). The four
 * fields (v, user, token, accepted_at_ms) come from the version cache when
 * it has them (below), else from an HMGET on the asynchronous connection,
 * pipelined with other polls' (the request is held meanwhile: its headers
 * stay valid until it is answered). Anything but a match — another
 * version, a credential that does not match, Redis trouble — takes the
 * full path (get_submission with VIEW_FULL).
 *
 * The version cache: results.version_cache slots, one per submission by
 * hash (a collision replaces), each the four fields as an HMGET read them.
 * A slot is used only while the change feed is being read (on_feed) and for
 * VCACHE_TTL_MS after it was filled; every feed entry drops its
 * submission's slot, and a feed failure drops them all. An HMGET whose slot
 * was dropped while it was on its way does not fill it (the slot's
 * generation moved), so a slot never holds a version older than a change
 * the feed has delivered; a poll is at most as stale as the feed is late
 * (milliseconds), or VCACHE_TTL_MS with the feed off. */
#define VCACHE_TTL_MS 1000

struct vslot {
  char sid[37]; /* "" empty */
  char v[25];
  char user[SL__USER_MAX + 1];
  char token[65];
  int64_t accepted_ms;
  uint64_t filled_ms; /* uv_now */
  unsigned gen;       /* moves whenever the slot is dropped */
};

static vslot *vcache_slot(results *R, const char *sid) {
  if (!R->vcache) return NULL;
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const char *p = sid; *p; p++) h = (h ^ (uint8_t)*p) * 16777619u;
  return &R->vcache[h % R->nvcache];
}

static void vcache_drop(results *R, const char *sid) {
  vslot *e = vcache_slot(R, sid);
  if (e) e->gen++; /* also an HMGET on its way for another submission of the slot */
  if (e && strcmp(e->sid, sid) == 0) e->sid[0] = '\0';
}

static void vcache_clear(results *R) {
  for (size_t i = 0; R->vcache && i < R->nvcache; i++) {
    R->vcache[i].sid[0] = '\0';
    R->vcache[i].gen++;
  }
}

typedef struct {
  results *R;
  sl_http_req *req;
  const char *cred, *inm; /* in the held request */
  int after_c;
  unsigned gen; /* the slot's when the HMGET went out */
  char sid[37], version[25], user[SL__USER_MAX + 1];
} poll304;

static void get_submission(results *R, sl_http_req *req, const char *sid, int mode);

/* 1 when the 304 was sent from the fields f (v, user, token,
 * accepted_at_ms; any may be NULL). */
static int decide_304(results *R, const poll304 *p, const char *const f[4]) {
  if (!f[0] || !f[3] || strcmp(f[0], p->version) != 0 ||
      !may_read(p->sid, f[1], f[2], p->user, p->cred))
    return 0;
  int after = p->after_c == 0 ? 0 : poll_after_s((sl_now_ms() - strtoll(f[3], NULL, 10)) / 1000, 0);
  if (after != p->after_c) return 0;
  char headers[256];
  if (after > 0)
    snprintf(headers, sizeof headers, "ETag: %s\r\nCache-Control: no-store\r\nRetry-After: %d\r\n",
             p->inm, after);
  else
    snprintf(headers, sizeof headers, "ETag: %s\r\nCache-Control: no-store\r\n", p->inm);
  sl_metric_add(R->m_304, 1);
  sl_http_respond(p->req, 304, NULL, headers, NULL, 0);
  return 1;
}

static void on_poll304(redisReply *rep, void *ud) {
  poll304 *p = ud;
  results *R = p->R;
  int sent = 0;
  if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 4) {
    const char *f[4];
    for (size_t i = 0; i < 4; i++)
      f[i] = rep->element[i]->type == REDIS_REPLY_STRING ? rep->element[i]->str : NULL;
    vslot *e = vcache_slot(R, p->sid);
    if (e && e->gen == p->gen && f[0] && f[1] && f[2] && f[3] && strlen(f[0]) < sizeof e->v &&
        strlen(f[1]) < sizeof e->user && strlen(f[2]) < sizeof e->token) {
      snprintf(e->sid, sizeof e->sid, "%s", p->sid);
      snprintf(e->v, sizeof e->v, "%s", f[0]);
      snprintf(e->user, sizeof e->user, "%s", f[1]);
      snprintf(e->token, sizeof e->token, "%s", f[2]);
      e->accepted_ms = strtoll(f[3], NULL, 10);
      e->filled_ms = uv_now(R->loop);
    }
    sent = decide_304(R, p, f);
  }
  if (!sent) get_submission(R, p->req, p->sid, VIEW_FULL);
  free(p);
}

/* 1 when the request was answered (a 304 from the version cache) or taken
 * over (answered later by on_poll304). */
static int fresh_304(results *R, sl_http_req *req, const char *sid, const char *cred,
                     const char *user) {
  const char *inm = sl_http_req_header(req, "If-None-Match");
  poll304 q = {.R = R, .req = req, .cred = cred, .inm = inm};
  if (!inm || !parse_etag(R, inm, q.version, &q.after_c)) return 0;
  snprintf(q.sid, sizeof q.sid, "%s", sid);
  snprintf(q.user, sizeof q.user, "%s", user);
  vslot *e = vcache_slot(R, sid);
  if (e && strcmp(e->sid, sid) == 0 && R->feed_ready == sl_rkey_buckets() && !R->feed_lost &&
      uv_now(R->loop) - e->filled_ms < VCACHE_TTL_MS) {
    char acc[32];
    snprintf(acc, sizeof acc, "%lld", (long long)e->accepted_ms);
    const char *f[4] = {e->v, e->user, e->token, acc};
    return decide_304(R, &q, f); /* a miss: the full path */
  }
  if (!sl_aredis_connected(R->ar)) return 0;
  poll304 *p = malloc(sizeof *p);
  if (!p) return 0;
  *p = q;
  p->gen = e ? e->gen : 0;
  char hkey[SL__VIEW_KEY_MAX];
  sl__view_sub_key(hkey, sizeof hkey, sid);
  const char *argv[] = {"HMGET", hkey, "v", "user", "token", "accepted_at_ms"};
  if (sl_aredis_argv(R->ar, on_poll304, p, 6, argv, NULL) == 0) return 1;
  free(p);
  return 0;
}

/* The query's access_token: a results token (hex) for clients that cannot
 * set headers (a browser's EventSource); NULL when absent or not hex (API
 * keys and JWTs travel in the Authorization header only). */
static const char *query_token(sl_http_req *req, char *buf, size_t len) {
  const char *q = sl_http_req_query(req);
  for (const char *p = q; p && *p;) {
    size_t n = strcspn(p, "&");
    if (strncmp(p, "access_token=", 13) == 0) {
      size_t t = n - 13;
      if (t == 0 || t >= len || strspn(p + 13, "0123456789abcdef") < t) return NULL;
      memcpy(buf, p + 13, t);
      buf[t] = '\0';
      return buf;
    }
    p += n + (p[n] == '&');
  }
  return NULL;
}

/* A caller of an event stream whose submission is not in the view yet
 * (pending_left_ms): what may_read() needs once it is. */
typedef struct {
  int held;                    /* set: hold the stream (nothing was answered) */
  uint64_t until;              /* uv_now() at which the pending window ends */
  char user[SL__USER_MAX + 1]; /* an API key's or JWT's user, or "" */
  char cred[129];              /* a results token, or "" */
} sse_hold;

/* A request waiting for Redis: the steps of authorized_view on the
 * asynchronous connection R->ar — an API key's user, the view (HGETALL),
 * and, for an id not in it, the view's marker — so the loop never waits for
 * Redis. The connection's deadline (results.redis_timeout_ms) bounds each
 * step: a Redis that does not answer makes the request a 503 then, and
 * while it is down (no connection that has answered) at once. */
typedef struct {
  results *R;
  sl_http_req *req; /* held until answered */
  int mode;
  int valid; /* the id is a well-formed UUID */
  char sid[37];
  const char *cred; /* in the held request's headers, or qtok */
  char qtok[128];
  char user[SL__USER_MAX + 1]; /* an API key's or JWT's user, or "" */
  sse_count *addr, *ccount;    /* VIEW_EVENTS: counts reserved for its stream */
  int record_read;             /* VIEW_ERASE: no erasure record: now the view */
  int64_t asked_ms;            /* VIEW_ERASE: when its request went to Kafka */
} lookup;

static const char nf[] = "no submission with this id for these credentials";

static void submission_reply(results *R, sl_http_req *req, const char *sid, redisReply *rep);
static void events_reply(lookup *lk, redisReply *rep, const sse_hold *hold);

static void lookup_free(lookup *lk) {
  count_put(lk->R, lk->addr);
  count_put(lk->R, lk->ccount);
  free(lk);
}

/* A command on the asynchronous connection; non-zero: not sent (Redis down,
 * or stopping), cb never runs. */
static int ar_cmd(results *R, sl_aredis_cb cb, void *ud, int argc, const char **argv) {
  if (!R->ar || R->stopping) return SL_EINVAL;
  return sl_aredis_argv(R->ar, cb, ud, argc, argv, NULL);
}

static void unavailable(results *R, sl_http_req *req, const char *msg) {
  sl_metric_add(R->m_err, 1);
  sl_http_respond_error(req, 503, "unavailable", msg, "Retry-After: 2\r\n");
}

static void lookup_view(lookup *lk);

/* SL__APIKEY_LOOKUP_LUA's answer: the key's user; nil for an unknown or
 * revoked key; 0 while the store is rebuilt after a Redis loss (a key it
 * does not hold yet is not known to be invalid: 503, never 401) */
static void on_user(redisReply *rep, void *ud) {
  lookup *lk = ud;
  results *R = lk->R;
  if (!rep || rep->type == REDIS_REPLY_ERROR) {
    unavailable(R, lk->req, "credential store unavailable; retry later");
    lookup_free(lk);
    return;
  }
  if (rep->type == REDIS_REPLY_INTEGER && rep->integer == 0) {
    sl_metric_add(R->m_err, 1);
    sl_http_respond_error(lk->req, 503, "auth_unavailable", SL__APIKEY_UNAVAILABLE,
                          "Retry-After: 2\r\n");
    lookup_free(lk);
    return;
  }
  int ok = rep->type == REDIS_REPLY_STRING && rep->len <= SL__USER_MAX;
  if (ok) snprintf(lk->user, sizeof lk->user, "%s", rep->str);
  if (!ok || !sl__user_valid(lk->user)) {
    unauthorized(R, lk->req, "invalid_credentials", "unknown or revoked API key");
    lookup_free(lk);
    return;
  }
  lookup_view(lk);
}

/* Readable by the submission's results token, or by its owner's API key or
 * JWT. Everything else — another user, another submission's token, an
 * unknown id — is the same 404. The allowed caller's view (the
 * submission's hash) goes to submission_reply, or for VIEW_EVENTS to
 * events_reply, also (with a hold) when the submission may be on its way;
 * anything else is answered here, and for VIEW_POLL a 304 may be decided
 * from the version (fresh_304). addr and ccount (VIEW_EVENTS; may be
 * NULL): counts reserved for the stream, released unless it opens. */
static void authorized_view(results *R, sl_http_req *req, const char *sid, int mode,
                            sse_count *addr, sse_count *ccount) {
  lookup *lk = calloc(1, sizeof *lk);
  if (!lk) {
    count_put(R, addr);
    count_put(R, ccount);
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return;
  }
  *lk = (lookup){
      .R = R, .req = req, .mode = mode, .valid = valid_id(sid), .addr = addr, .ccount = ccount};
  if (lk->valid) memcpy(lk->sid, sid, 37);
  sl__cred_kind kind;
  const char *cred = sl__auth_bearer(req, &kind);
  if (!cred && mode == VIEW_EVENTS && (cred = query_token(req, lk->qtok, sizeof lk->qtok)))
    kind = SL__CRED_OTHER;
  if (!cred) {
    unauthorized(R, req, "unauthorized",
                 "send the results token (or the owner's API key or JWT) as "
                 "Authorization: Bearer <credential>");
    lookup_free(lk);
    return;
  }
  lk->cred = cred;
  if ((mode == VIEW_ERASE || mode == VIEW_ERASURE) && kind != SL__CRED_JWT &&
      kind != SL__CRED_APIKEY) {
    sl_http_respond_error(req, 403, "owner_required",
                          "only the submission's owner (its API key or JWT) may erase it or "
                          "follow its erasure; a results token only reads",
                          NULL);
    lookup_free(lk);
    return;
  }
  if (kind == SL__CRED_JWT) {
    char why[160], tenant[SL__USER_MAX + 1]; /* reading is not counted against a tenant */
    if (sl__auth_jwt(R->auth, cred, sl_now_ms() / 1000, lk->user, tenant, why, sizeof why) != 0) {
      unauthorized(R, req, "invalid_credentials", why);
      lookup_free(lk);
      return;
    }
  } else if (kind == SL__CRED_APIKEY) {
    char rkey[80];
    if (sl__apikey_rkey(cred, rkey) != 0) {
      unauthorized(R, req, "invalid_credentials", "malformed API key");
      lookup_free(lk);
      return;
    }
    const char *argv[] = {rkey, SL__APIKEY_MARKER};
    if (!R->ar || R->stopping ||
        sl_aredis_eval(R->ar, on_user, lk, &R->apikey, 2, 2, argv, NULL) != 0) {
      unavailable(R, req, "credential store unavailable; retry later");
      lookup_free(lk);
    }
    return;
  }
  lookup_view(lk);
}

static void on_view(redisReply *rep, void *ud);
static void lookup_erasure(lookup *lk);
static void erase_request(lookup *lk, const char *tenant);

static void lookup_view(lookup *lk) {
  results *R = lk->R;
  if (!lk->valid) {
    sl_metric_add(R->m_404, 1);
    sl_http_respond_error(lk->req, 404, "not_found", nf, NULL);
    lookup_free(lk);
    return;
  }
  if (lk->mode == VIEW_ERASURE || (lk->mode == VIEW_ERASE && !lk->record_read)) {
    lookup_erasure(lk); /* a DELETE: its record first */
    return;
  }
  if (lk->mode == VIEW_POLL && fresh_304(R, lk->req, lk->sid, lk->cred, lk->user)) {
    lookup_free(lk);
    return;
  }
  char hkey[SL__VIEW_KEY_MAX];
  sl__view_sub_key(hkey, sizeof hkey, lk->sid);
  const char *argv[] = {"HGETALL", hkey};
  if (ar_cmd(R, on_view, lk, 2, argv) != 0) {
    unavailable(R, lk->req, "results are unavailable; retry later");
    lookup_free(lk);
  }
}

/* Not the caller's, or not in the view: the 404, or (an event stream of an
 * id young enough to be on its way, empty: no hash at all) the hold. */
static void not_found(lookup *lk, int empty) {
  results *R = lk->R;
  int64_t left = empty ? pending_left_ms(R, lk->sid) : 0;
  sse_hold h = {0};
  if (left > 0 && lk->mode == VIEW_EVENTS && (lk->user[0] || strlen(lk->cred) < sizeof h.cred)) {
    h.held = 1;
    h.until = uv_now(R->loop) + (uint64_t)left;
    snprintf(h.user, sizeof h.user, "%s", lk->user);
    snprintf(h.cred, sizeof h.cred, "%s", lk->user[0] ? "" : lk->cred);
    events_reply(lk, NULL, &h);
    return;
  }
  sl_metric_add(R->m_404, 1);
  sl_http_respond_error(lk->req, 404, "not_found", nf, left > 0 ? "Retry-After: 1\r\n" : NULL);
  lookup_free(lk);
}

/* EXISTS of the view's marker, for an id not in the view. */
static void on_marker(redisReply *rep, void *ud) {
  lookup *lk = ud;
  if (rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 0) {
    /* Redis lost the view and materialize is replaying the topics: the
     * submission may well exist, so no 404 (a client would give up); the
     * same answer for every id, so nothing is revealed */
    sl_metric_add(lk->R->m_err, 1);
    sl_http_respond_error(lk->req, 503, "view_rebuilding",
                          "results are being rebuilt after a storage fault; retry shortly",
                          "Retry-After: 2\r\n");
    lookup_free(lk);
    return;
  }
  not_found(lk, 1); /* the marker is there (or unknown): the id is not */
}

static void on_view(redisReply *rep, void *ud) {
  lookup *lk = ud;
  results *R = lk->R;
  if (!rep || rep->type != REDIS_REPLY_ARRAY) {
    sl_log(SL_LOG_DEBUG, lk->sid, "results lookup failed: %s",
           rep ? "unexpected reply" : "Redis did not answer");
    unavailable(R, lk->req, "results are unavailable; retry later");
    lookup_free(lk);
    return;
  }
  if (may_read(lk->sid, field(rep, "user"), field(rep, "token"), lk->user, lk->cred)) {
    if (lk->mode == VIEW_ERASE) {
      erase_request(lk, field(rep, "tenant"));
    } else if (lk->mode == VIEW_EVENTS) {
      events_reply(lk, rep, NULL);
    } else {
      submission_reply(R, lk->req, lk->sid, rep);
      lookup_free(lk);
    }
    return;
  }
  if (rep->elements > 0) {
    not_found(lk, 0);
    return;
  }
  char mkey[SL__VIEW_KEY_MAX]; /* the marker of the submission's bucket */
  sl__view_key(mkey, sizeof mkey, SL__VIEW_MARKER, sl_rkey_bucket(lk->sid, strlen(lk->sid)));
  const char *argv[] = {"EXISTS", mkey};
  if (ar_cmd(R, on_marker, lk, 2, argv) != 0) on_marker(NULL, lk);
}

static void get_submission(results *R, sl_http_req *req, const char *sid, int mode) {
  authorized_view(R, req, sid, mode, NULL, NULL);
}

/* ---- erasure (DELETE /v1/submissions/{id}, GET .../erasure) ---- */

/* The erasure's state as the answer: 202 for a DELETE while it is under
 * way, else 200 (times and objects: text from the record, or NULL). Frees
 * lk. */
static void erasure_answer(lookup *lk, const char *state, const char *requested_ms,
                           const char *erased_ms, const char *objects) {
  json_t *o = json_object(), *e = json_object();
  json_object_set_new(o, "submission_id", json_string(lk->sid));
  json_object_set_new(e, "state", json_string(state ? state : "erasing"));
  if (requested_ms)
    json_object_set_new(e, "requested_at_ms", json_integer(strtoll(requested_ms, NULL, 10)));
  if (erased_ms) json_object_set_new(e, "erased_at_ms", json_integer(strtoll(erased_ms, NULL, 10)));
  if (objects) json_object_set_new(e, "objects_deleted", json_integer(strtoll(objects, NULL, 10)));
  json_object_set_new(o, "erasure", e);
  char *body = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  int erased = state && strcmp(state, "erased") == 0;
  int status = lk->mode == VIEW_ERASE && !erased ? 202 : 200;
  char hdr[160];
  snprintf(hdr, sizeof hdr, "Cache-Control: no-store\r\nLocation: /v1/submissions/%s/erasure\r\n",
           lk->sid);
  sl_metric_add(lk->R->m_ok, 1);
  if (body)
    sl_http_respond(lk->req, status, "application/json", hdr, body, strlen(body));
  else
    sl_http_respond_error(lk->req, 500, "internal", "out of memory", NULL);
  free(body);
  lookup_free(lk);
}

static void on_erasure(redisReply *rep, void *ud) {
  lookup *lk = ud;
  results *R = lk->R;
  if (!rep || rep->type != REDIS_REPLY_ARRAY) {
    unavailable(R, lk->req, "erasure records are unavailable; retry later");
    lookup_free(lk);
    return;
  }
  const char *owner = field(rep, "user");
  if (rep->elements > 0 && owner && sl_secure_equal(owner, lk->user)) {
    erasure_answer(lk, field(rep, "state"), field(rep, "requested_at_ms"),
                   field(rep, "erased_at_ms"), field(rep, "objects"));
    return;
  }
  if (lk->mode == VIEW_ERASE && rep->elements == 0) {
    lk->record_read = 1; /* now the view, and the owner in it */
    lookup_view(lk);
    return;
  }
  sl_metric_add(R->m_404, 1);
  sl_http_respond_error(lk->req, 404, "not_found", nf, NULL);
  lookup_free(lk);
}

static void lookup_erasure(lookup *lk) {
  char rkey[SL__ERASURE_RKEY_MAX];
  const char *argv[] = {"HGETALL", rkey};
  if (sl__erasure_rkey(lk->sid, rkey) != 0 || ar_cmd(lk->R, on_erasure, lk, 2, argv) != 0) {
    unavailable(lk->R, lk->req, "erasure records are unavailable; retry later");
    lookup_free(lk);
  }
}

/* The request is in Kafka and its record says so (or Redis did not take
 * it: the erase stage records it as it starts): 202. */
static void on_recorded(redisReply *rep, void *ud) {
  lookup *lk = ud;
  if (!rep || rep->type == REDIS_REPLY_ERROR)
    sl_log(SL_LOG_WARN, lk->sid, "erasure requested; its state not recorded: %s",
           rep && rep->str ? rep->str : "Redis did not answer");
  char at[24];
  snprintf(at, sizeof at, "%lld", (long long)lk->asked_ms);
  erasure_answer(lk, "erasing", at, NULL, NULL);
}

static const char record_lua[] = SL__ERASURE_RECORD_LUA; /* lib/erase.h */

static void on_erase_sent(rd_kafka_resp_err_t err, void *ctx) {
  lookup *lk = ctx;
  results *R = lk->R;
  if (err) {
    sl_log(SL_LOG_WARN, lk->sid, "erasure request not taken by Kafka: %s", rd_kafka_err2str(err));
    unavailable(R, lk->req, "the erasure request could not be stored; retry later");
    lookup_free(lk);
    return;
  }
  sl_metric_add(R->m_erase_asked, 1);
  sl_log(SL_LOG_INFO, lk->sid, "erasure requested by its owner");
  char rkey[SL__ERASURE_RKEY_MAX], at[24], ttl[24];
  snprintf(at, sizeof at, "%lld", (long long)lk->asked_ms);
  snprintf(ttl, sizeof ttl, "%lld", (long long)sl_dkey_erased_ttl_s());
  const char *argv[] = {"EVAL",   record_lua,        "1", rkey, ttl, "erasing", "user",
                        lk->user, "requested_at_ms", at};
  if (sl__erasure_rkey(lk->sid, rkey) != 0 || ar_cmd(R, on_recorded, lk, 10, argv) != 0)
    on_recorded(NULL, lk);
}

/* The owner asked to erase lk's submission (tenant from its view). */
static void erase_request(lookup *lk, const char *tenant) {
  results *R = lk->R;
  Sluice__V1__ErasureRequest q = SLUICE__V1__ERASURE_REQUEST__INIT;
  q.submission_id = lk->sid;
  q.actor = lk->user;
  q.reason = "request";
  q.requested_at_ms = lk->asked_ms = sl_now_ms();
  q.tenant = (char *)(tenant ? tenant : "");
  size_t n = sluice__v1__erasure_request__get_packed_size(&q);
  uint8_t *buf = malloc(n ? n : 1);
  rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR__FAIL;
  if (!R->cc->topic_erasure_requests) { /* a pipeline from before erasures */
    free(buf);
    sl_http_respond_error(lk->req, 501, "erasure_not_configured",
                          "this deployment's pipeline has no erasure requests topic (results "
                          "writes none; docs/privacy.md)",
                          NULL);
    lookup_free(lk);
    return;
  }
  if (buf && R->producer && !R->stopping) {
    sluice__v1__erasure_request__pack(&q, buf);
    e = sl_kafka_send(R->producer, R->cc->topic_erasure_requests, lk->sid, strlen(lk->sid), buf, n,
                      RD_KAFKA_MSG_F_FREE, on_erase_sent, lk);
  }
  if (e == RD_KAFKA_RESP_ERR_NO_ERROR) return;
  free(buf);
  sl_log(SL_LOG_WARN, lk->sid, "erasure request refused by the producer: %s", rd_kafka_err2str(e));
  unavailable(R, lk->req, "the erasure request could not be stored; retry later");
  lookup_free(lk);
}

/* The answer to a GET from the caller's view rep (borrowed). */
static void submission_reply(results *R, sl_http_req *req, const char *sid, redisReply *rep) {
  long n = strtol(field(rep, "n") ? field(rep, "n") : "0", NULL, 10);
  json_t *qs = json_array();
  int done = 0, failed = 0;
  double cost = 0; /* provider cost units, the sum of the questions' */
  /* questions are numbered by the client; collect every q<no> field of a
   * declared question (one with a spec<no>): a status for a number the
   * submission never had (forged, misrouted) is not shown or counted */
  for (size_t i = 0; i + 1 < rep->elements; i += 2) {
    const char *f = rep->element[i]->str;
    if (f[0] != 'q') continue;
    char spec[32];
    snprintf(spec, sizeof spec, "spec%.20s", f + 1);
    if (!field(rep, spec)) continue;
    json_t *q = json_loads(rep->element[i + 1]->str, 0, NULL);
    if (!q) continue;
    const char *st = json_string_value(json_object_get(q, "state"));
    if (st && strcmp(st, "done") == 0) done++;
    if (st && strcmp(st, "failed") == 0) failed++;
    cost += json_number_value(json_object_get(q, "cost"));
    json_array_append_new(qs, q);
  }
  /* stable order by question number */
  size_t nq = json_array_size(qs);
  for (size_t a = 1; a < nq; a++)
    for (size_t b = a; b > 0; b--) {
      json_t *x = json_array_get(qs, b - 1), *y = json_array_get(qs, b);
      if (json_integer_value(json_object_get(x, "no")) <=
          json_integer_value(json_object_get(y, "no")))
        break;
      json_incref(x);
      json_array_set(qs, b - 1, y);
      json_array_set_new(qs, b, x);
    }
  const char *acc = field(rep, "accepted_at_ms");
  /* the version read in the same HGETALL as the questions: the ETag can
   * only name the state this body shows */
  char version[25] = "";
  const char *vf = field(rep, "v");
  if (vf && strspn(vf, "0123456789") == strlen(vf) && vf[0] && strlen(vf) < sizeof version)
    memcpy(version, vf, strlen(vf) + 1);
  int64_t accepted = acc ? strtoll(acc, NULL, 10) : 0;
  int complete = done + failed == (int)n;
  int after = poll_after_s((sl_now_ms() - accepted) / 1000, complete);
  json_t *body =
      json_pack("{s:s,s:I,s:O,s:{s:i,s:i,s:i,s:b},s:f,s:{s:i,s:b},s:o}", "submission_id", sid,
                "accepted_at_ms", (json_int_t)accepted, "stages", R->stages, "summary", "total",
                (int)n, "done", done, "failed", failed, "complete", complete, "cost", cost, "poll",
                "retry_after_s", after, "stop", after == 0, "questions", qs);
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  if (!text) {
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return;
  }
  char digest[65], etag[80], headers[256];
  if (version[0]) { /* a view a materialize without versions wrote: the body's hash */
    versioned_etag(R, version, after, etag, sizeof etag);
  } else {
    sl_sha256_hex(text, strlen(text), digest);
    snprintf(etag, sizeof etag, "\"%.32s\"", digest);
  }
  if (after > 0)
    snprintf(headers, sizeof headers, "ETag: %s\r\nCache-Control: no-store\r\nRetry-After: %d\r\n",
             etag, after);
  else
    snprintf(headers, sizeof headers, "ETag: %s\r\nCache-Control: no-store\r\n", etag);
  const char *inm = sl_http_req_header(req, "If-None-Match");
  if (inm && strcmp(inm, etag) == 0) {
    sl_metric_add(R->m_304, 1);
    sl_http_respond(req, 304, NULL, headers, NULL, 0);
  } else {
    sl_metric_add(R->m_ok, 1);
    sl_http_respond(req, 200, "application/json", headers, text, strlen(text));
  }
  free(text);
}

/* ---- server-sent events ------------------------------------------------------
 *
 * GET /v1/submissions/{id}/events: the same credentials as the GET (or the
 * results token as ?access_token=, for EventSource, which cannot send
 * headers). Every event carries the version at which it happened as its
 * id: "question" events (the question's view, as in the GET) in version
 * order, then "complete" (the summary) once every declared question is
 * done or failed, after which the response ends. The first answer sends
 * every declared question; a reconnect with Last-Event-ID: N sends only the
 * questions whose version is above N — their current state, so nothing is
 * lost and nothing repeated (a state overtaken before it was sent is not
 * sent: the view keeps only the newest). A reconnect after the end
 * (complete, nothing above N) gets 204, which stops EventSource.
 *
 * The feed: materialize appends {k, v} to the Redis stream SL__VIEW_FEED
 * whenever a question's state changed (apply_lua.h); this process reads it
 * with XREAD BLOCK on its own asynchronous connection, and for an entry of
 * a submission that has streams open here reads the hash once (HGETALL)
 * and writes each of its streams what it has not seen. After the feed
 * connection failed (Redis restarted, failed over, lost its data) the
 * reader takes the feed's newest id again and every open stream catches up
 * from the hash, so a lost or restarted feed loses nothing either.
 * Streams are indexed by submission in SSE_BUCKETS lists; a heartbeat
 * comment goes to every stream each results.heartbeat_ms. */

#define SSE_MAX_QUEUED 65536 /* bytes a slow reader may fall behind: then closed */
/* redis.buckets > 0: a round of the buckets' feeds that brought nothing
 * waits this long before the next (docs/architecture.md, "Results") */
#define FEED_POLL_MS 50

struct sse {
  results *R;
  sl_http_stream *hs;
  sse *prev, *next; /* in its bucket */
  long long last;   /* the highest version sent; -1: none yet */
  unsigned bucket;
  unsigned gen; /* the catch-up round that refreshed it last */
  char sid[37];
  sse_hold *hold;         /* while its submission is not in the view yet (owned), else NULL */
  sse_count *addr, *cred; /* what it counts against (NULL: nothing) */
  uint64_t end;           /* uv_now() at which it ends (results.stream_max_s), 0: never */
};

static unsigned sid_bucket(const char *sid) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *sid; sid++) h = (h ^ (uint8_t)*sid) * 16777619u;
  return h & (SSE_BUCKETS - 1);
}

static void sse_closed(sl_http_stream *hs, void *ud) {
  (void)hs;
  sse *s = ud;
  results *R = s->R;
  if (s->prev)
    s->prev->next = s->next;
  else
    R->streams[s->bucket] = s->next;
  if (s->next) s->next->prev = s->prev;
  R->nstreams--;
  sl_metric_set(R->m_streams, (int64_t)R->nstreams);
  count_put(R, s->addr);
  count_put(R, s->cred);
  if (s->hold) sl_metric_set(R->m_held, (int64_t)--R->nheld);
  free(s->hold);
  free(s);
}

/* Of a submission's hash: how many questions it declared, and how many of
 * them are done and failed. */
static void view_tally(redisReply *rep, long *total, int *done, int *failed) {
  *total = strtol(field(rep, "n") ? field(rep, "n") : "0", NULL, 10);
  *done = *failed = 0;
  for (size_t i = 0; i + 1 < rep->elements; i += 2) {
    const char *f = rep->element[i]->str, *q = rep->element[i + 1]->str;
    char spec[32];
    snprintf(spec, sizeof spec, "spec%.20s", f + 1);
    if (f[0] != 'q' || !field(rep, spec)) continue;
    /* the view JSON is compact: these cannot stand inside a string value */
    if (strstr(q, "\"state\":\"done\""))
      (*done)++;
    else if (strstr(q, "\"state\":\"failed\""))
      (*failed)++;
  }
}

typedef struct {
  long long v;
  const char *json;
} qchange;

static int by_version(const void *a, const void *b) {
  long long x = ((const qchange *)a)->v, y = ((const qchange *)b)->v;
  return (x > y) - (x < y);
}

/* Writes s what it has not seen of the view rep (a submission's HGETALL);
 * ends the stream after "complete". May close s (a write failed): the
 * caller must not use s afterwards. */
static void sse_send(sse *s, redisReply *rep) {
  results *R = s->R;
  size_t nq = 0, cap = rep->elements / 2 + 1;
  qchange *ch = calloc(cap, sizeof *ch);
  if (!ch) {
    sl_http_stream_close(s->hs);
    return;
  }
  for (size_t i = 0; i + 1 < rep->elements; i += 2) {
    const char *f = rep->element[i]->str;
    if (f[0] != 'q') continue;
    char spec[32], vf[32];
    snprintf(spec, sizeof spec, "spec%.20s", f + 1);
    snprintf(vf, sizeof vf, "v%.20s", f + 1);
    const char *q = rep->element[i + 1]->str;
    if (!field(rep, spec) || strchr(q, '\n')) continue; /* not declared; never in one data line */
    const char *v = field(rep, vf);
    long long ver = v ? strtoll(v, NULL, 10) : 0;
    if (ver > s->last) ch[nq++] = (qchange){ver, q};
  }
  qsort(ch, nq, sizeof *ch, by_version);
  long total;
  int done, failed;
  view_tally(rep, &total, &done, &failed);
  const char *vs = field(rep, "v");
  long long version = vs ? strtoll(vs, NULL, 10) : 0;
  int complete = total > 0 && done + failed == (int)total;
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < nq; i++) {
    size_t len = strlen(ch[i].json);
    char *ev = malloc(len + 64);
    if (!ev) {
      rc = SL_ENOMEM;
      break;
    }
    int hl = snprintf(ev, 64, "id: %lld\nevent: question\ndata: ", ch[i].v);
    memcpy(ev + hl, ch[i].json, len);
    memcpy(ev + hl + len, "\n\n", 2);
    rc = sl_http_stream_write(s->hs, ev, (size_t)hl + len + 2);
    free(ev);
    if (rc == 0) {
      s->last = ch[i].v;
      sl_metric_add(R->m_events, 1);
    }
  }
  free(ch);
  if (rc) return; /* closed by the failed write (or closing it below) */
  if (version > s->last) s->last = version;
  if (complete) {
    char ev[256];
    int n = snprintf(ev, sizeof ev,
                     "id: %lld\nevent: complete\ndata: {\"summary\":{\"total\":%ld,\"done\":%d,"
                     "\"failed\":%d,\"complete\":true}}\n\n",
                     s->last, total, done, failed);
    if (sl_http_stream_write(s->hs, ev, (size_t)n) == 0) sl_http_stream_close(s->hs);
  }
}

/* What a refresh of submission sid brought (rep: its HGETALL; NULL or
 * empty: Redis failed, or it is not in the view) to every stream of it that
 * has seen less than version (-1: every stream of it). */
static void refresh_apply(results *R, const char *sid, long long version, redisReply *rep) {
  int found = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements > 0;
  for (sse *s = R->streams[sid_bucket(sid)], *next; s; s = next) {
    next = s->next; /* sse_send may close (free) s, never another stream */
    if (strcmp(s->sid, sid) != 0 || (version >= 0 && s->last >= version)) continue;
    if (s->hold) {          /* held: once the submission is there, is it the caller's? */
      if (!found) continue; /* not yet (or Redis failed): the heartbeat ends the wait */
      if (!may_read(sid, field(rep, "user"), field(rep, "token"), s->hold->user, s->hold->cred)) {
        sl_http_stream_close(s->hs); /* the reconnect gets the 404 */
        continue;
      }
      free(s->hold);
      s->hold = NULL;
      sl_metric_set(R->m_held, (int64_t)--R->nheld);
    }
    if (!found)
      sl_http_stream_close(s->hs); /* the client reconnects with its Last-Event-ID */
    else
      sse_send(s, rep);
  }
}

typedef struct {
  results *R;
  long long version;
  char sid[37];
} refresh;

static void on_refresh(redisReply *rep, void *ud) {
  refresh *rf = ud;
  refresh_apply(rf->R, rf->sid, rf->version, rep);
  free(rf);
}

/* Every stream of submission sid that has seen less than version (-1:
 * every stream of it) gets what changed, from one read of the hash on the
 * asynchronous connection (replies come in order, so two refreshes of one
 * submission apply in order). The streams it covers are marked with this
 * catch-up round (R->gen) at once. */
static void sse_refresh(results *R, const char *sid, long long version) {
  int any = 0;
  for (sse *s = R->streams[sid_bucket(sid)]; s; s = s->next)
    if (strcmp(s->sid, sid) == 0 && (version < 0 || s->last < version)) {
      s->gen = R->gen;
      any = 1;
    }
  if (!any) return;
  refresh *rf = malloc(sizeof *rf);
  char hkey[SL__VIEW_KEY_MAX];
  sl__view_sub_key(hkey, sizeof hkey, sid);
  const char *argv[] = {"HGETALL", hkey};
  if (rf) {
    *rf = (refresh){.R = R, .version = version};
    snprintf(rf->sid, sizeof rf->sid, "%s", sid);
  }
  if (!rf || ar_cmd(R, on_refresh, rf, 2, argv) != 0) {
    free(rf);
    refresh_apply(R, sid, version, NULL);
  }
}

static void feed_read(results *R);

static void on_feed_retry(uv_timer_t *t) { feed_read(t->data); }

/* The feed failed (NULL answer, an error, not sent): every bucket's newest
 * id is taken again, then every stream catches up from the hashes. */
static void feed_reset(results *R) {
  for (int b = 0; b < sl_rkey_buckets(); b++) R->feed_ids[b][0] = '\0';
  R->feed_b = 0;
  R->feed_ready = 0;
  R->feed_got = 0;
  R->feed_lost = 1;
  vcache_clear(R);
  uv_timer_start(&R->feed_timer, on_feed_retry, 500, 0);
}

/* After an answer of bucket R->feed_b: the next read. Unbucketed, the one
 * feed is read again at once (its XREAD blocks). Bucketed, the buckets are
 * read in turn without blocking (XREAD BLOCK takes streams of one slot
 * only), and a round of them that brought nothing waits FEED_POLL_MS. */
static void feed_next(results *R) {
  if (!sl_rkey_bucketed()) {
    feed_read(R);
    return;
  }
  R->feed_b = (R->feed_b + 1) % sl_rkey_buckets();
  if (R->feed_b != 0 || R->feed_ready < sl_rkey_buckets()) {
    feed_read(R);
    return;
  }
  size_t got = R->feed_got;
  R->feed_got = 0;
  if (got)
    feed_read(R);
  else
    uv_timer_start(&R->feed_timer, on_feed_retry, FEED_POLL_MS, 0);
}

/* Every open stream catches up from its hash: what came while the feed
 * was not read. */
static void feed_catch_up(results *R) {
  R->feed_lost = 0;
  R->gen++;
  /* a refresh may close any stream of its submission: after each, the
   * bucket is scanned again for a stream this round has not refreshed */
  for (size_t b = 0; b < SSE_BUCKETS; b++)
    for (sse *s = R->streams[b]; s;) {
      if (s->gen == R->gen) {
        s = s->next;
        continue;
      }
      sse_refresh(R, s->sid, -1);
      s = R->streams[b];
    }
}

/* The answer to XREAD of bucket R->feed_b's feed (or, with its id empty,
 * to XREVRANGE for the newest id). NULL: the connection failed; catch up
 * once it is back. */
static void on_feed(redisReply *rep, void *ud) {
  results *R = ud;
  if (R->stopping) return;
  if (!rep || rep->type == REDIS_REPLY_ERROR) {
    if (rep) sl_log(SL_LOG_DEBUG, NULL, "change feed: %s", rep->str);
    feed_reset(R);
    return;
  }
  char *id = R->feed_ids[R->feed_b];
  if (!id[0]) { /* XREVRANGE feed + - COUNT 1 */
    snprintf(id, sizeof R->feed_ids[0], "%s",
             rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 && rep->element[0]->elements == 2
                 ? rep->element[0]->element[0]->str
                 : "0-0");
    if (++R->feed_ready == sl_rkey_buckets() && R->feed_lost) feed_catch_up(R);
    feed_next(R);
    return;
  }
  /* XREAD: [[key, [[id, [k, "sl:sub:<tag><sid>", v, "<version>"]], ...]]] or nil */
  if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 && rep->element[0]->elements == 2) {
    const redisReply *entries = rep->element[0]->element[1];
    R->feed_got += entries->elements;
    for (size_t i = 0; i < entries->elements; i++) {
      const redisReply *e = entries->element[i];
      if (e->elements != 2 || e->element[1]->elements != 4) continue;
      snprintf(id, sizeof R->feed_ids[0], "%s", e->element[0]->str);
      const char *v = e->element[1]->element[3]->str;
      const char *sid = sl__view_sub_sid(e->element[1]->element[1]->str);
      if (!sid) continue;
      vcache_drop(R, sid);
      if (R->nstreams > 0) sse_refresh(R, sid, strtoll(v, NULL, 10));
    }
  }
  feed_next(R);
}

static void feed_read(results *R) {
  if (R->stopping) return;
  int rc;
  char key[SL__VIEW_KEY_MAX];
  const char *id = R->feed_ids[R->feed_b];
  sl__view_key(key, sizeof key, SL__VIEW_FEED, R->feed_b);
  if (!id[0]) {
    const char *argv[] = {"XREVRANGE", key, "+", "-", "COUNT", "1"};
    rc = sl_aredis_argv(R->feed, on_feed, R, 6, argv, NULL);
  } else if (!sl_rkey_bucketed()) {
    const char *argv[] = {"XREAD", "COUNT", "512", "BLOCK", "1000", "STREAMS", key, id};
    rc = sl_aredis_argv(R->feed, on_feed, R, 8, argv, NULL);
  } else {
    const char *argv[] = {"XREAD", "COUNT", "512", "STREAMS", key, id};
    rc = sl_aredis_argv(R->feed, on_feed, R, 6, argv, NULL);
  }
  if (rc != 0) feed_reset(R); /* not connected: try again shortly */
}

static void on_heartbeat(uv_timer_t *t) {
  results *R = t->data;
  uint64_t now = uv_now(R->loop);
  for (size_t b = 0; b < SSE_BUCKETS; b++)
    for (sse *s = R->streams[b], *next; s; s = next) {
      next = s->next;
      if (s->hold && now >= s->hold->until) /* never appeared: the reconnect gets the 404 */
        sl_http_stream_close(s->hs);
      else if (s->end && now >= s->end) /* lived long enough: EventSource reconnects */
        sl_http_stream_close(s->hs);
      else
        sl_http_stream_write(s->hs, ":\n\n", 3); /* may close s */
    }
}

/* The keys a new stream counts against (address and credential; "" when
 * the request has none, counted against nothing) and whether either is at
 * its cap: then 429 is answered and 1 returned, before any Redis call. */
static int stream_caps(results *R, sl_http_req *req, char akey[48], char ckey[48]) {
  char peer[64], qtok[128], hex[65];
  akey[0] = ckey[0] = '\0';
  if (sl__client_address(req, R->rc->client_address_header, peer, sizeof peer) == 0)
    snprintf(akey, 48, "a%.46s", peer);
  sl__cred_kind kind;
  const char *cred = sl__auth_bearer(req, &kind);
  if (!cred) cred = query_token(req, qtok, sizeof qtok);
  if (cred) {
    sl_sha256_hex(cred, strlen(cred), hex);
    snprintf(ckey, 48, "c%.32s", hex);
  }
  const sse_count *a = akey[0] ? count_find(R, akey, 0) : NULL;
  const sse_count *c = ckey[0] ? count_find(R, ckey, 0) : NULL;
  int64_t ma = R->rc->max_streams_per_address, mc = R->rc->max_streams_per_credential;
  const char *code = NULL, *msg = NULL;
  if (ma > 0 && a && a->n >= (size_t)ma) {
    code = "too_many_streams_from_address";
    msg = "this address has as many event streams open as it may; close one, poll, or retry "
          "later";
  } else if (mc > 0 && c && c->n >= (size_t)mc) {
    code = "too_many_streams_for_credential";
    msg = "this credential has as many event streams open as it may; close one, poll, or retry "
          "later";
  }
  if (!code) return 0;
  sl_metric_add(R->m_429, 1);
  sl_http_respond_error(req, 429, code, msg, "Retry-After: 5\r\n");
  return 1;
}

static void open_events(results *R, sl_http_req *req, const char *sid) {
  char akey[48], ckey[48];
  if (stream_caps(R, req, akey, ckey)) return;
  /* counted from now on (the lookup waits for Redis while others arrive);
   * out of memory: not counted */
  sse_count *a = akey[0] ? count_find(R, akey, 1) : NULL;
  sse_count *c = ckey[0] ? count_find(R, ckey, 1) : NULL;
  if (a) a->n++;
  if (c) c->n++;
  authorized_view(R, req, sid, VIEW_EVENTS, a, c);
}

/* The stream of lk's request, from the caller's view rep (borrowed), or
 * held (h) until its submission appears. Frees lk. */
static void events_reply(lookup *lk, redisReply *rep, const sse_hold *h) {
  results *R = lk->R;
  sl_http_req *req = lk->req;
  const char *sid = lk->sid;
  sse_hold *hold = NULL; /* not in the view yet: held until it is */
  if (h && !(hold = malloc(sizeof *hold))) {
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    lookup_free(lk);
    return;
  }
  if (hold) *hold = *h;
  if (R->nstreams >= (size_t)R->rc->max_streams) {
    free(hold);
    sl_metric_add(R->m_err, 1);
    sl_http_respond_error(req, 503, "too_many_streams",
                          "this results process holds as many event streams as it may; poll, "
                          "or retry later",
                          "Retry-After: 5\r\n");
    lookup_free(lk);
    return;
  }
  long long last = -1;
  const char *lei = sl_http_req_header(req, "Last-Event-ID");
  if (lei && lei[0] && strlen(lei) <= 18 && strspn(lei, "0123456789") == strlen(lei))
    last = strtoll(lei, NULL, 10);
  sse *s = calloc(1, sizeof *s);
  if (!s) {
    free(hold);
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    lookup_free(lk);
    return;
  }
  *s = (sse){.R = R, .last = last, .bucket = sid_bucket(sid), .hold = hold};
  snprintf(s->sid, sizeof s->sid, "%s", sid);
  /* after the end: nothing above its id will come */
  if (rep) {
    const char *vs = field(rep, "v");
    long total;
    int done, failed;
    view_tally(rep, &total, &done, &failed);
    if (last >= 0 && vs && last >= strtoll(vs, NULL, 10) && total > 0 && done + failed == total) {
      free(s);
      free(hold);
      sl_http_respond(req, 204, NULL, "Cache-Control: no-store\r\n", NULL, 0);
      lookup_free(lk);
      return;
    }
  }
  if (sl_http_stream_start(req, 200, "text/event-stream",
                           "Cache-Control: no-store\r\nX-Accel-Buffering: no\r\n", SSE_MAX_QUEUED,
                           sse_closed, s, &s->hs) != 0) {
    free(hold);
    free(s);
    lookup_free(lk);
    return;
  }
  s->next = R->streams[s->bucket];
  if (s->next) s->next->prev = s;
  R->streams[s->bucket] = s;
  R->nstreams++;
  sl_metric_set(R->m_streams, (int64_t)R->nstreams);
  if (hold) sl_metric_set(R->m_held, (int64_t)++R->nheld);
  /* the counts reserved for it are the stream's now */
  s->addr = lk->addr;
  s->cred = lk->ccount;
  lk->addr = lk->ccount = NULL;
  lookup_free(lk);
  if (R->rc->stream_max_s > 0) { /* less up to 10%: streams opened together end apart */
    uint64_t ms = (uint64_t)R->rc->stream_max_s * 1000;
    s->end = uv_now(R->loop) + ms - uv_hrtime() % (ms / 10 + 1);
  }
  sl_metric_add(R->m_ok, 1);
  if (sl_http_stream_write(s->hs, "retry: 2000\n\n", 13) == 0 && rep) sse_send(s, rep);
}

static void handle(sl_http_req *req, void *ud) {
  results *R = ud;
  const char *path = sl_http_req_path(req);
  static const char pre[] = "/v1/submissions/";
  const char *rest = path + sizeof pre - 1, *slash = strchr(rest, '/');
  if (strncmp(path, pre, sizeof pre - 1) == 0 && slash && strcmp(slash, "/erasure") == 0 &&
      slash - rest == 36) {
    if (strcmp(sl_http_req_method(req), "GET") != 0) {
      sl_http_respond_error(req, 405, "method_not_allowed", "use GET", "Allow: GET\r\n");
      return;
    }
    char sid[37];
    memcpy(sid, rest, 36);
    sid[36] = '\0';
    authorized_view(R, req, sid, VIEW_ERASURE, NULL, NULL);
    return;
  }
  if (strncmp(path, pre, sizeof pre - 1) == 0 && slash && strcmp(slash, "/events") == 0 &&
      slash - rest == 36) {
    if (strcmp(sl_http_req_method(req), "GET") != 0) {
      sl_http_respond_error(req, 405, "method_not_allowed", "use GET", "Allow: GET\r\n");
      return;
    }
    char sid[37];
    memcpy(sid, rest, 36);
    sid[36] = '\0';
    open_events(R, req, sid);
    return;
  }
  if (strncmp(path, pre, sizeof pre - 1) == 0 && !strchr(path + sizeof pre - 1, '/')) {
    const char *method = sl_http_req_method(req);
    if (strcmp(method, "DELETE") == 0)
      authorized_view(R, req, path + sizeof pre - 1, VIEW_ERASE, NULL, NULL);
    else if (strcmp(method, "GET") == 0)
      get_submission(R, req, path + sizeof pre - 1, VIEW_POLL);
    else
      sl_http_respond_error(req, 405, "method_not_allowed", "use GET or DELETE",
                            "Allow: GET, DELETE\r\n");
    return;
  }
  sl_http_respond_error(req, 404, "not_found", "no such endpoint", NULL);
}

/* Readiness: up while the request connection is (a Redis that stopped
 * answering drops it at the deadline, and it counts as up again only once
 * a new one has answered); a PING every PROBE_MS keeps it tested when no
 * request is. */
#define PROBE_MS 250

static void on_probe_reply(redisReply *rep, void *ud) {
  (void)rep;
  ((results *)ud)->probing = 0;
}

static void on_probe(uv_timer_t *t) {
  results *R = t->data;
  int up = R->ar && sl_aredis_connected(R->ar);
  sl_admin_set_ready(R->admin, up);
  const char *argv[] = {"PING"};
  if (up && !R->probing && ar_cmd(R, on_probe_reply, R, 1, argv) == 0) R->probing = 1;
}

static void on_signal(uv_signal_t *h, int sig) {
  results *R = h->data;
  sl_log(SL_LOG_INFO, NULL, "signal %d: shutting down", sig);
  R->stopping = 1;
  if (R->producer) { /* every DELETE waiting for Kafka answered while its connection is open */
    rd_kafka_flush(R->producer, 2000);
    rd_kafka_purge(R->producer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_poll(R->producer, 0);
    sl_kafka_uv_detach(R->ku);
    R->ku = NULL;
  }
  uv_close((uv_handle_t *)&R->feed_timer, NULL);
  uv_close((uv_handle_t *)&R->hb_timer, NULL);
  uv_close((uv_handle_t *)&R->probe_timer, NULL);
  sl_aredis_free(R->feed);
  R->feed = NULL;
  sl_aredis_free(R->ar); /* a poll waiting for it takes the full path */
  R->ar = NULL;
  sl_http_server_free(R->srv); /* closes every stream (sse_closed) */
  R->srv = NULL;
  uv_close((uv_handle_t *)&R->sigterm, NULL);
  uv_close((uv_handle_t *)&R->sigint, NULL);
}

extern const sl__stage_desc sl__results_stage; /* its descriptor, at the end */

static int results_main(int argc, char **argv) {
  sl_common_conf cc = {0};
  results_conf rconf = {0};
  sl__auth_conf ac = {0};
  sl_http_conf hc = {0};
  sl_conf_bind own[] = {{results_table, results_table_len, &rconf},
                        {sl__auth_table, sl__auth_table_len, &ac},
                        {sl_http_conf_table, sl_http_conf_table_len, &hc}};
  sl_admin *admin = NULL;
  int rc = sl__stage_start(&sl__results_stage, sl__results_stage.name, argc, argv, &cc, own,
                           sizeof own / sizeof own[0], &admin);
  if (rc) return rc;
  results R = {.cc = &cc, .rc = &rconf, .stages = json_array()};
  if (rconf.version_cache > 0) {
    R.nvcache = (size_t)rconf.version_cache;
    R.vcache = calloc(R.nvcache, sizeof *R.vcache);
    if (!R.vcache) R.nvcache = 0;
  }
  for (size_t k = 0, np = sl_pipeline_nprogress(cc.pipeline); k < np; k++)
    json_array_append_new(R.stages, json_string(sl_pipeline_progress_at(cc.pipeline, k)));
  json_array_append_new(R.stages, json_string("done"));
  char *st_text = json_dumps(R.stages, JSON_COMPACT), st_hash[65];
  sl_sha256_hex(st_text ? st_text : "", st_text ? strlen(st_text) : 0, st_hash);
  free(st_text);
  memcpy(R.stages_tag, st_hash, 8);
  const char *lbl[] = {"status=\"200\"", "status=\"304\"", "status=\"404\"",
                       "status=\"401\"", "status=\"429\"", "status=\"503\""};
  sl_metric **ms[] = {&R.m_ok, &R.m_304, &R.m_404, &R.m_401, &R.m_429, &R.m_err};
  for (size_t i = 0; i < 6; i++)
    *ms[i] = sl_metrics_counter("sluice_results_requests_total", lbl[i],
                                "Results API requests by status");
  R.m_streams = sl_metrics_gauge("sluice_results_streams", NULL,
                                 "Server-sent event streams open on this results process");
  R.m_held = sl_metrics_gauge("sluice_results_streams_held", NULL,
                              "Of them, streams held for a submission not in the view yet "
                              "(results.pending_s)");
  R.m_events = sl_metrics_counter("sluice_results_events_total", NULL,
                                  "Question events written to event streams");
  uv_loop_t loop;
  uv_loop_init(&loop);
  R.loop = &loop;
  char aerr[256] = "";
  rc = sl__auth_new(&R.auth, &ac, aerr, sizeof aerr);
  R.feed_ids = calloc((size_t)sl_rkey_buckets(), sizeof *R.feed_ids);
  if (rc == 0 && !R.feed_ids) rc = SL_ENOMEM;
  if (rc == 0) rc = sl_aredis_new(&R.feed, &loop, cc.redis_url);
  if (rc == 0) rc = sl_aredis_new(&R.ar, &loop, cc.redis_url);
  sl_redis_script_init(&R.apikey, SL__APIKEY_LOOKUP_LUA);
  if (rc == 0)
    rc = sl_aredis_set_timeout(R.ar, rconf.redis_timeout_ms > 0 ? rconf.redis_timeout_ms
                                                                : cc.redis_command_timeout_ms);
  sl_http_limits lim = {.max_connections =
                            rconf.max_connections > 0 ? (size_t)rconf.max_connections : 0,
                        .trace_requests = 1}; /* a poll or stream in a client's trace */
  sl_http_limits_from_conf(&lim, &hc);
  /* erasure requests: a 503 within results.kafka_timeout_ms */
  char mto[32];
  snprintf(mto, sizeof mto, "%lld",
           (long long)sl_kafka_message_timeout_for(
               rconf.kafka_timeout_ms > 0 ? rconf.kafka_timeout_ms : 5000));
  const char *pextra[] = {"message.timeout.ms", mto, "linger.ms", "0", NULL};
  if (rc == 0 && cc.topic_erasure_requests) {
    rc = sl_kafka_producer_new(&R.producer, cc.kafka_brokers, "sluice-results", pextra, aerr,
                               sizeof aerr);
    if (rc == 0) rc = sl_kafka_uv_attach(&R.ku, R.producer, &loop);
  }
  R.m_erase_asked = sl_metrics_counter("sluice_results_erasures_requested_total", NULL,
                                       "Erasures owners asked for (DELETE accepted)");
  if (rc == 0) rc = sl_http_server_new(&R.srv, &loop, rconf.listen, &lim, handle, &R);
  if (rc == 0)
    rc = sl_http_server_set_cors(R.srv, rconf.cors_origins, "GET, DELETE",
                                 "Authorization, If-None-Match, Last-Event-ID",
                                 "ETag, Retry-After, WWW-Authenticate");
  if (rc == 0) {
    uv_signal_init(&loop, &R.sigterm);
    uv_signal_init(&loop, &R.sigint);
    R.sigterm.data = R.sigint.data = &R;
    uv_signal_start(&R.sigterm, on_signal, SIGTERM);
    uv_signal_start(&R.sigint, on_signal, SIGINT);
    uv_timer_init(&loop, &R.feed_timer);
    uv_timer_init(&loop, &R.hb_timer);
    R.feed_timer.data = R.hb_timer.data = &R;
    uint64_t hb = rconf.heartbeat_ms > 0 ? (uint64_t)rconf.heartbeat_ms : 15000;
    uv_timer_start(&R.hb_timer, on_heartbeat, hb, hb);
    uv_timer_start(&R.feed_timer, on_feed_retry, 0, 0); /* once connected */
    uv_timer_init(&loop, &R.probe_timer);
    R.probe_timer.data = &R;
    R.admin = admin;
    uv_timer_start(&R.probe_timer, on_probe, PROBE_MS, PROBE_MS);
    sl_log(SL_LOG_INFO, NULL, "listening on http://%s", rconf.listen);
    sl_admin_set_ready(admin, sl_aredis_connected(R.ar));
  } else {
    char shown[600]; /* a password in the URL is never logged */
    sl_redis_redact(cc.redis_url, shown, sizeof shown);
    sl_log(SL_LOG_ERROR, NULL, "start-up failed (listen %s, redis %s): %s%s%s", rconf.listen, shown,
           sl_strerror(rc), aerr[0] ? ": " : "", aerr);
  }
  if (rc) { /* nothing else runs: the connections must not keep the loop */
    sl_aredis_free(R.feed);
    sl_aredis_free(R.ar);
    R.feed = R.ar = NULL;
    sl_kafka_uv_detach(R.ku);
    R.ku = NULL;
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  sl_aredis_free(R.feed); /* NULL after a signal */
  sl_aredis_free(R.ar);
  if (R.producer) rd_kafka_destroy(R.producer);
  sl__auth_free(R.auth);
  json_decref(R.stages);
  free(R.vcache);
  free(R.feed_ids);
  sl__stage_finish(&cc, own, sizeof own / sizeof own[0], admin);
  return rc ? 1 : 0;
}

const sl__stage_desc sl__results_stage = {.name = "results",
                                          .summary = "HTTP API clients poll for results",
                                          .kind = {"results", {NULL}, {NULL}, 0, 0, 0},
                                          .table = results_table,
                                          .table_len = &results_table_len,
                                          .admin = "127.0.0.1:9185",
                                          .main = results_main};
