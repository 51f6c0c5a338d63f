/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_aredis.c — async Redis with reconnect, AUTH, TLS and a command deadline
 * (see sl_aredis.h).
 *
 * redis:// runs on hiredis's async context, attached to the loop by our own
 * event hooks (hev_attach below): hiredis 0.14's libuv adapter ignores a
 * poll that ends in an error, and a connect refused by a Redis that is not
 * back yet ends that way, so each such attempt hung until the deadline and
 * a restarted Redis was used up to 2.5 s late. hiredis owns the
 * redisAsyncContext: after a failed connect or a disconnect it
 * frees the context itself, so we only drop our pointer in those callbacks
 * and arm the reconnect timer. AUTH, SELECT and a PING are queued first on
 * every context, so they reach the server before any caller's command.
 *
 * A connection counts as up only once that PING is answered: until then
 * (connecting, handshaking, or talking to a server that accepts connections
 * but never answers, such as a SIGSTOPped Redis whose kernel still completes
 * handshakes) callers' commands fail at once instead of queueing.
 *
 * The deadline: Redis answers in order, so one watchdog timer per client is
 * enough. We count the requests sent on the current connection and not yet
 * answered (its connect / TLS handshake counts as one) and note the time of
 * the last progress: the last answer, or when the count left 0. When the
 * count is not 0 and nothing moved for the deadline (redis.command_timeout_ms),
 * the watchdog drops the connection: every pending callback gets NULL now (the
 * callers' "Redis unavailable"), a warning is logged once per outage, the
 * error metric counts it, and the reconnect timer runs as after any failure.
 * For hiredis the watchdog calls redisAsyncFree itself (hiredis 0.14 runs the
 * pending callbacks with NULL and the disconnect callback with REDIS_OK, the
 * latter only for a context that had connected); we forget the context
 * before that, so on_disconnect recognises it as already handled. For TLS it
 * is t_fail, the transport's own failure path. Both sockets also get TCP
 * keepalive and TCP_USER_TIMEOUT = the deadline, so the kernel notices a
 * peer that vanished (a blackholed network) on its own, idle or not.
 *
 * rediss:// runs on our own transport (hiredis 0.14 has no TLS): a libuv
 * TCP handle, an OpenSSL SSL between two memory BIOs (bytes read from the
 * socket go into one, what OpenSSL wants sent comes out of the other and is
 * written with uv_write), hiredis's redisReader for the replies and a FIFO
 * of pending callbacks (Redis answers in order). The connection counts as
 * up once the handshake is done and AUTH/SELECT are sent; a refused AUTH or
 * SELECT closes it and the reconnect timer tries again.
 *
 * A subscriber (sl_aredis_subscribe) sends SUBSCRIBE once each connection's
 * PING is answered; the confirmation counts as the answer for the deadline,
 * and the messages after it are not answers to anything (on hiredis they come
 * to the channel's callback, on our transport to the replies that arrive with
 * no request waiting). The subscription is "up" from the confirmation until
 * the connection drops; the owner hears both edges (on_state), so that what
 * it derived from the messages is discarded with the connection that might
 * have missed some.
 *
 * Redis Cluster: see the section at the end of this file; a cluster client
 * is an sl_aredis without a connection whose links are single-node
 * sl_aredis (owner pointing back). The single-node path costs one branch.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_aredis.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_slot.h"

#include <errno.h>
#include <hiredis/async.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <uv.h>

typedef struct tconn tconn;

#define DEFAULT_TIMEOUT_MS 2000
#define WATCH_MS 250   /* how often the watchdog looks */
#define KEEPALIVE_S 15 /* idle seconds before keepalive probes (hiredis's value) */

struct sl_aredis {
  uv_loop_t *loop;
  uv_timer_t timer;      /* reconnect */
  uv_timer_t watchdog;   /* the deadline; runs while requests are outstanding */
  redisAsyncContext *ac; /* redis:// */
  tconn *tc;             /* rediss:// */
  sl_redis_addr a;
  int connected; /* the current connection answered its PING */
  int closing;
  int warned;
  int handles;          /* timers not closed yet (sl_aredis_free) */
  int64_t timeout_ms;   /* 0: no deadline */
  unsigned outstanding; /* requests on the current connection not yet answered */
  uint64_t progress_ms; /* uv_now of the last answer, or when outstanding left 0 */
  uint64_t tick_ms;     /* uv_now of the watchdog's previous look */
  char *channel;        /* a subscriber's channel, or NULL */
  sl_aredis_msg_cb on_msg;
  sl_aredis_state_cb on_state;
  void *sub_ud;
  int subscribed;   /* the current connection's SUBSCRIBE is confirmed */
  struct acl *cl;   /* a cluster: r has no connection, its links do */
  sl_aredis *owner; /* a cluster's link: the cluster client it serves */
  int sub_fails;    /* a cluster's subscriber: reconnects since it was last up */
};

typedef struct pending {
  sl_aredis_cb cb; /* NULL: fire and forget */
  void *ud;
  int kind; /* K_USER, or the connection's own AUTH / SELECT / PING */
  struct pending *next;
} pending;

enum { K_USER, K_AUTH, K_SELECT, K_PING, K_SUB };
static const char *const kind_name[] = {"command", "AUTH", "SELECT", "PING", "SUBSCRIBE"};

static sl_metric *m_errors;

static void reconnect(sl_aredis *r);
static void on_watchdog(uv_timer_t *t);

static void on_timer(uv_timer_t *t) { reconnect(t->data); }

static void schedule(sl_aredis *r) {
  if (!r->closing) uv_timer_start(&r->timer, on_timer, 500, 0);
}

/* ---- the deadline's bookkeeping ----------------------------------------- */

static void watch(sl_aredis *r) {
  if (r->closing || r->timeout_ms <= 0 || uv_is_active((uv_handle_t *)&r->watchdog)) return;
  r->tick_ms = uv_now(r->loop);
  uv_timer_start(&r->watchdog, on_watchdog, WATCH_MS, WATCH_MS);
}

/* A request went out on the current connection. */
static void sent(sl_aredis *r) {
  if (r->outstanding++ == 0) {
    r->progress_ms = uv_now(r->loop);
    watch(r);
  }
}

/* The current connection answered one request. */
static void answered(sl_aredis *r) {
  if (r->outstanding) r->outstanding--;
  r->progress_ms = uv_now(r->loop);
}

/* The current connection is gone: nothing is outstanding any more. */
static void dropped(sl_aredis *r) {
  r->connected = 0;
  r->outstanding = 0;
  if (r->subscribed) {
    r->subscribed = 0;
    r->on_state(0, r->sub_ud);
  }
}

/* Deadline and keepalive settings of a connection's socket (best effort:
 * the watchdog works without them). */
static void tune_socket(int fd, int64_t timeout_ms) {
#ifdef TCP_USER_TIMEOUT
  if (fd < 0) return;
  unsigned int ms = timeout_ms <= 0 ? 0 : timeout_ms > UINT_MAX ? UINT_MAX : (unsigned)timeout_ms;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
#else
  (void)fd;
  (void)timeout_ms;
#endif
}

/* A caller's command got its answer (NULL: the connection failed). Both
 * transports count failures and errors the same way; NOSCRIPT is not one, it
 * is sl_aredis_eval's cue to send the script's text. */
static void count_answer(const redisReply *rep) {
  if (!rep || (rep->type == REDIS_REPLY_ERROR && !sl_redis_noscript(rep) &&
               strncmp(rep->str, "MOVED ", 6) != 0 && strncmp(rep->str, "ASK ", 4) != 0))
    sl_metric_add(m_errors, 1); /* a redirect is the cluster client's to follow */
}

static void warn_down(sl_aredis *r, const char *why) {
  sl_metric_add(m_errors, 1);
  if (!r->warned++)
    sl_log(SL_LOG_WARN, NULL, "redis %s:%d%s: %s (retrying every 500 ms)", r->a.host, r->a.port,
           r->a.tls ? " (TLS)" : "", why);
}

static void subscribe(sl_aredis *r);

/* The PING is answered. A subscriber is not back until its SUBSCRIBE is
 * confirmed: an outage it warned of (a refused SUBSCRIBE too, retried every
 * 500 ms) ends there, so that it is logged once. */
static void connected(sl_aredis *r) {
  r->connected = 1;
  r->sub_fails = 0;
  if (r->channel) {
    subscribe(r);
    return;
  }
  if (r->warned) sl_log(SL_LOG_INFO, NULL, "redis %s:%d: connected", r->a.host, r->a.port);
  r->warned = 0;
}

/* A pub/sub reply on a subscriber: the confirmation (the subscription is up;
 * the caller counts it as answered) or a message. Anything else is ignored. */
static void sub_reply(sl_aredis *r, const redisReply *rep) {
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 ||
      rep->element[0]->type != REDIS_REPLY_STRING)
    return;
  const char *kind = rep->element[0]->str;
  if (strcmp(kind, "subscribe") == 0 && !r->subscribed) {
    if (r->warned)
      sl_log(SL_LOG_INFO, NULL, "redis %s:%d: connected, subscribed to %s", r->a.host, r->a.port,
             r->channel);
    r->warned = 0;
    r->subscribed = 1;
    r->on_state(1, r->sub_ud);
  } else if (strcmp(kind, "message") == 0 && r->subscribed &&
             rep->element[2]->type == REDIS_REPLY_STRING) {
    r->on_msg(rep->element[2]->str, rep->element[2]->len, r->sub_ud);
  }
}

/* ---- redis:// on hiredis ------------------------------------------------- */

/* hiredis's event hooks on a uv_poll_t. When a poll ends in an error (libuv
 * reports POLLERR as a status and stops the handle: a refused or reset
 * connection), hiredis is told the socket is ready for what it waited for,
 * so that its read or write meets the error and fails the context at once
 * (the connect callback for a connect, the disconnect callback after).
 * Freed in the close callback: hiredis calls cleanup from inside our own
 * poll callback. */
typedef struct hev {
  uv_poll_t poll;
  redisAsyncContext *ac; /* NULL once hiredis has cleaned up */
  int events;            /* UV_READABLE | UV_WRITABLE hiredis waits for */
} hev;

static void hev_poll(uv_poll_t *h, int status, int events) {
  hev *e = h->data;
  if (status < 0) events = e->events;
  if (e->ac && (events & UV_READABLE)) redisAsyncHandleRead(e->ac);
  if (e->ac && (events & UV_WRITABLE)) redisAsyncHandleWrite(e->ac);
}

static void hev_set(hev *e, int events) {
  e->events = events;
  if (events)
    uv_poll_start(&e->poll, events, hev_poll);
  else
    uv_poll_stop(&e->poll);
}

static void hev_add_read(void *p) { hev_set(p, ((hev *)p)->events | UV_READABLE); }
static void hev_del_read(void *p) { hev_set(p, ((hev *)p)->events & ~UV_READABLE); }
static void hev_add_write(void *p) { hev_set(p, ((hev *)p)->events | UV_WRITABLE); }
static void hev_del_write(void *p) { hev_set(p, ((hev *)p)->events & ~UV_WRITABLE); }
static void hev_closed(uv_handle_t *h) { free(h->data); }
static void hev_cleanup(void *p) {
  hev *e = p;
  e->ac = NULL;
  uv_close((uv_handle_t *)&e->poll, hev_closed);
}

static int hev_attach(redisAsyncContext *ac, uv_loop_t *loop) {
  if (ac->ev.data) return REDIS_ERR;
  hev *e = calloc(1, sizeof *e);
  if (!e) return REDIS_ERR;
  if (uv_poll_init(loop, &e->poll, ac->c.fd) != 0) {
    free(e);
    return REDIS_ERR;
  }
  e->poll.data = e;
  e->ac = ac;
  ac->ev.data = e;
  ac->ev.addRead = hev_add_read;
  ac->ev.delRead = hev_del_read;
  ac->ev.addWrite = hev_add_write;
  ac->ev.delWrite = hev_del_write;
  ac->ev.cleanup = hev_cleanup;
  return REDIS_OK;
}

/* Only a failed connect matters here: the link is up once PING answers. */
static void on_connect(const redisAsyncContext *ac, int status) {
  sl_aredis *r = ac->data;
  if (status == REDIS_OK || r->ac != ac) return;
  warn_down(r, ac->errstr);
  r->ac = NULL; /* hiredis frees it after this callback */
  dropped(r);
  schedule(r);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  sl_aredis *r = ac->data;
  if (r->ac != ac) return; /* dropped by us (deadline, sl_aredis_free): handled there */
  r->ac = NULL;
  dropped(r);
  if (status != REDIS_OK && !r->closing && r->channel) {
    warn_down(r, ac->errstr); /* a refused SUBSCRIBE ends here too: once per outage */
  } else if (status != REDIS_OK && !r->closing) {
    sl_metric_add(m_errors, 1);
    sl_log(SL_LOG_WARN, NULL, "redis %s:%d: disconnected: %s", r->a.host, r->a.port, ac->errstr);
  }
  schedule(r);
}

/* AUTH / SELECT / PING answered on a hiredis context: a refusal closes it,
 * the PING's answer (the last of them) makes the connection usable. priv is
 * the command's name. */
static void on_setup_reply(redisAsyncContext *ac, void *reply, void *priv) {
  redisReply *rep = reply;
  sl_aredis *r = ac->data;
  if (!rep || r->ac != ac || r->closing) return; /* dropped: the reconnect is armed */
  answered(r);
  if (ac->c.flags & REDIS_DISCONNECTING) return; /* an earlier step was refused */
  if (rep->type == REDIS_REPLY_ERROR) {
    sl_metric_add(m_errors, 1);
    sl_log(SL_LOG_ERROR, NULL, "redis %s:%d: %s refused: %s", r->a.host, r->a.port,
           (const char *)priv, rep->str);
    r->connected = 0;
    redisAsyncDisconnect(ac);
    return;
  }
  if (strcmp(priv, "PING") == 0) connected(r);
}

/* The channel's callback on a hiredis context: the confirmation and every
 * message; NULL when the context goes away (dropped() has the state). */
static void on_sub_reply(redisAsyncContext *ac, void *reply, void *priv) {
  sl_aredis *r = priv;
  redisReply *rep = reply;
  if (!rep || r->ac != ac || r->closing) return;
  if (!r->subscribed) answered(r); /* the confirmation */
  sub_reply(r, rep);
}

/* ---- rediss:// on libuv + OpenSSL --------------------------------------- */

struct tconn {
  uv_tcp_t tcp;
  uv_connect_t creq;
  sl_aredis *r; /* NULL once detached (closing) */
  SSL *ssl;
  BIO *rbio, *wbio;
  redisReader *rd;
  int ready; /* handshake done */
  int dead;
  pending *head, *tail;
};

typedef struct {
  uv_write_t req;
  char data[];
} wbuf;

static void on_tcp_closed(uv_handle_t *h) {
  tconn *tc = h->data;
  if (tc->ssl) SSL_free(tc->ssl); /* frees both BIOs */
  if (tc->rd) redisReaderFree(tc->rd);
  free(tc);
}

/* Answers every pending callback with NULL and closes the socket. why may
 * be NULL (a deliberate close). */
static void t_fail(tconn *tc, const char *why) {
  if (tc->dead) return;
  tc->dead = 1;
  sl_aredis *r = tc->r;
  if (r && r->tc == tc) {
    r->tc = NULL;
    dropped(r);
  }
  pending *p = tc->head;
  tc->head = tc->tail = NULL;
  while (p) {
    pending *n = p->next;
    if (p->kind == K_USER) sl_metric_add(m_errors, 1);
    if (p->cb) p->cb(NULL, p->ud);
    free(p);
    p = n;
  }
  uv_close((uv_handle_t *)&tc->tcp, on_tcp_closed);
  if (r && !r->closing) {
    if (why) warn_down(r, why);
    schedule(r);
  }
}

static void on_written(uv_write_t *req, int status) {
  (void)status; /* a failed write shows up as a read error */
  free(req);
}

/* Sends what OpenSSL has queued in the write BIO. */
static int t_flush(tconn *tc) {
  size_t n;
  while ((n = BIO_ctrl_pending(tc->wbio)) > 0) {
    wbuf *w = malloc(sizeof *w + n);
    if (!w) return SL_ENOMEM;
    int got = BIO_read(tc->wbio, w->data, (int)n);
    if (got <= 0) {
      free(w);
      return SL_EREDIS;
    }
    uv_buf_t b = uv_buf_init(w->data, (unsigned)got);
    int rc = uv_write(&w->req, (uv_stream_t *)&tc->tcp, &b, 1, on_written);
    if (rc) {
      free(w);
      return SL_EREDIS;
    }
  }
  return 0;
}

static void t_push(tconn *tc, pending *p) {
  p->next = NULL;
  if (tc->tail)
    tc->tail->next = p;
  else
    tc->head = p;
  tc->tail = p;
  if (tc->r && tc->r->tc == tc) sent(tc->r);
}

/* Formats, encrypts and sends one command; p joins the FIFO. */
static int t_send(tconn *tc, pending *p, int argc, const char **argv, const size_t *lens) {
  char *cmd = NULL;
  int n = redisFormatCommandArgv(&cmd, argc, argv, lens);
  if (n < 0) return SL_ENOMEM;
  int w = SSL_write(tc->ssl, cmd, n);
  redisFreeCommand(cmd);
  if (w != n) return SL_EREDIS; /* memory BIOs take everything */
  t_push(tc, p);
  t_flush(tc); /* p is queued now: a broken link answers it with NULL */
  return 0;
}

static int t_setup_cmd(tconn *tc, int kind, int argc, const char **argv) {
  size_t lens[3] = {0};
  for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
  pending *p = calloc(1, sizeof *p);
  if (!p) return SL_ENOMEM;
  p->kind = kind;
  int rc = t_send(tc, p, argc, argv, lens);
  if (rc) free(p);
  return rc;
}

/* After the handshake: AUTH, SELECT and PING go first; the link is up once
 * the PING is answered (t_reply). */
static void t_ready(tconn *tc) {
  sl_aredis *r = tc->r;
  tc->ready = 1;
  answered(r); /* the handshake */
  int rc = 0;
  if (r->a.password[0]) {
    const char *av[] = {"AUTH", r->a.user, r->a.password};
    const char *av2[] = {"AUTH", r->a.password};
    rc = r->a.user[0] ? t_setup_cmd(tc, K_AUTH, 3, av) : t_setup_cmd(tc, K_AUTH, 2, av2);
  }
  if (rc == 0 && r->a.db) {
    char db[8];
    snprintf(db, sizeof db, "%d", r->a.db);
    const char *av[] = {"SELECT", db};
    rc = t_setup_cmd(tc, K_SELECT, 2, av);
  }
  if (rc == 0) {
    const char *av[] = {"PING"};
    rc = t_setup_cmd(tc, K_PING, 1, av);
  }
  if (rc) t_fail(tc, "could not send AUTH/SELECT/PING");
}

static void t_reply(tconn *tc, redisReply *rep) {
  pending *p = tc->head;
  if (!p && tc->r && tc->r->subscribed) { /* a message */
    sub_reply(tc->r, rep);
    freeReplyObject(rep);
    return;
  }
  if (!p) { /* an answer nobody asked for: the stream is out of step */
    freeReplyObject(rep);
    t_fail(tc, "unexpected reply");
    return;
  }
  tc->head = p->next;
  if (!tc->head) tc->tail = NULL;
  answered(tc->r);
  if (p->kind != K_USER) {
    if (rep->type == REDIS_REPLY_ERROR) {
      char why[300];
      snprintf(why, sizeof why, "%s refused: %s", kind_name[p->kind], rep->str);
      if (p->kind != K_SUB) /* a subscriber's: t_fail warns once per outage */
        sl_log(SL_LOG_ERROR, NULL, "redis %s:%d: %s", tc->r->a.host, tc->r->a.port, why);
      freeReplyObject(rep);
      free(p);
      t_fail(tc, why);
      return;
    }
    if (p->kind == K_PING) connected(tc->r);
    if (p->kind == K_SUB) sub_reply(tc->r, rep);
  } else {
    count_answer(rep);
    if (p->cb) p->cb(rep, p->ud);
  }
  freeReplyObject(rep);
  free(p);
}

static void t_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  static __thread char slab[65536]; /* consumed before the next read */
  (void)suggested;
  *buf = uv_buf_init(slab, sizeof slab);
}

static void on_t_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  tconn *tc = s->data;
  if (tc->dead) return;
  if (nread < 0) {
    char why[128];
    snprintf(why, sizeof why, "%s",
             nread == UV_EOF ? "connection closed by the server" : uv_strerror((int)nread));
    t_fail(tc, why);
    return;
  }
  if (nread == 0) return;
  BIO_write(tc->rbio, buf->base, (int)nread);
  char why[512];
  if (!tc->ready) {
    ERR_clear_error();
    int rc = SSL_do_handshake(tc->ssl);
    if (t_flush(tc) != 0) {
      t_fail(tc, "write failed");
      return;
    }
    if (rc != 1) {
      int e = SSL_get_error(tc->ssl, rc);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return;
      sl__redis_ssl_why(tc->ssl, rc, why, sizeof why);
      t_fail(tc, why);
      return;
    }
    t_ready(tc);
    if (tc->dead) return;
  }
  char plain[16384];
  for (;;) {
    int got = SSL_read(tc->ssl, plain, sizeof plain);
    if (got <= 0) {
      int e = SSL_get_error(tc->ssl, got);
      if (e == SSL_ERROR_WANT_READ) break;
      sl__redis_ssl_why(tc->ssl, got, why, sizeof why);
      t_fail(tc, why);
      return;
    }
    if (redisReaderFeed(tc->rd, plain, (size_t)got) != REDIS_OK) {
      t_fail(tc, "out of memory");
      return;
    }
    for (;;) {
      void *rep = NULL;
      if (redisReaderGetReply(tc->rd, &rep) != REDIS_OK) {
        t_fail(tc, "protocol error");
        return;
      }
      if (!rep) break;
      t_reply(tc, rep);
      if (tc->dead) return; /* a callback closed us */
    }
  }
  if (t_flush(tc) != 0) t_fail(tc, "write failed"); /* post-handshake messages */
}

static void on_tcp_connect(uv_connect_t *req, int status) {
  tconn *tc = req->data;
  if (tc->dead) return;
  if (status < 0) {
    t_fail(tc, uv_strerror(status));
    return;
  }
  uv_os_fd_t fd;
  (void)uv_tcp_keepalive(&tc->tcp, 1, KEEPALIVE_S);
  if (uv_fileno((uv_handle_t *)&tc->tcp, &fd) == 0) tune_socket(fd, tc->r->timeout_ms);
  char why[512];
  tc->ssl = sl__redis_ssl_new(tc->r->a.host, why, sizeof why);
  if (!tc->ssl) {
    t_fail(tc, why);
    return;
  }
  tc->rbio = BIO_new(BIO_s_mem());
  tc->wbio = BIO_new(BIO_s_mem());
  if (!tc->rbio || !tc->wbio) {
    BIO_free(tc->rbio);
    BIO_free(tc->wbio);
    t_fail(tc, "out of memory");
    return;
  }
  SSL_set_bio(tc->ssl, tc->rbio, tc->wbio); /* the SSL owns them now */
  tc->rd = redisReaderCreate();
  if (!tc->rd) {
    t_fail(tc, "out of memory");
    return;
  }
  uv_read_start((uv_stream_t *)&tc->tcp, t_alloc, on_t_read);
  ERR_clear_error();
  int rc = SSL_do_handshake(tc->ssl); /* produces the ClientHello */
  int e = SSL_get_error(tc->ssl, rc);
  if ((rc != 1 && e != SSL_ERROR_WANT_READ) || t_flush(tc) != 0) {
    sl__redis_ssl_why(tc->ssl, rc, why, sizeof why);
    t_fail(tc, why);
  }
}

static void t_connect(sl_aredis *r) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", r->a.port);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  /* resolved synchronously, as hiredis does for redis:// */
  int g = getaddrinfo(r->a.host, ps, &hints, &res);
  if (g != 0) {
    warn_down(r, gai_strerror(g));
    schedule(r);
    return;
  }
  tconn *tc = calloc(1, sizeof *tc);
  if (!tc) {
    freeaddrinfo(res);
    schedule(r);
    return;
  }
  tc->r = r;
  uv_tcp_init(r->loop, &tc->tcp);
  tc->tcp.data = tc;
  tc->creq.data = tc;
  uv_tcp_nodelay(&tc->tcp, 1);
  r->tc = tc;
  r->outstanding = 0;
  sent(r); /* the connect and TLS handshake: answered in t_ready */
  int rc = uv_tcp_connect(&tc->creq, &tc->tcp, res->ai_addr, on_tcp_connect);
  freeaddrinfo(res);
  if (rc) t_fail(tc, uv_strerror(rc));
}

/* ---- common ------------------------------------------------------------- */

static void cl_rotate(sl_aredis *l);

static void reconnect(sl_aredis *r) {
  if (r->closing || r->ac || r->tc) return;
  if (r->owner && r->channel && r->sub_fails++ > 0) cl_rotate(r); /* try another node */
  if (r->a.tls) {
    t_connect(r);
    return;
  }
  redisAsyncContext *ac = redisAsyncConnect(r->a.host, r->a.port);
  if (!ac || ac->err) {
    warn_down(r, ac ? ac->errstr : "out of memory");
    if (ac) redisAsyncFree(ac);
    schedule(r);
    return;
  }
  ac->data = r;
  /* keepalive on the connecting socket; a failure would leave its error on
   * the context, so it counts as a failed connect */
  if (redisEnableKeepAlive(&ac->c) != REDIS_OK) {
    warn_down(r, ac->c.errstr);
    redisAsyncFree(ac);
    schedule(r);
    return;
  }
  tune_socket(ac->c.fd, r->timeout_ms);
  if (hev_attach(ac, r->loop) != REDIS_OK) {
    redisAsyncFree(ac);
    schedule(r);
    return;
  }
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
  r->ac = ac;
  r->outstanding = 0;
  int ok = REDIS_OK;
  if (r->a.password[0]) {
    const char *av[] = {"AUTH", r->a.user, r->a.password};
    const char *av2[] = {"AUTH", r->a.password};
    size_t lens[] = {4, strlen(r->a.user), strlen(r->a.password)};
    size_t lens2[] = {4, strlen(r->a.password)};
    ok = r->a.user[0] ? redisAsyncCommandArgv(ac, on_setup_reply, "AUTH", 3, av, lens)
                      : redisAsyncCommandArgv(ac, on_setup_reply, "AUTH", 2, av2, lens2);
    if (ok == REDIS_OK) sent(r);
  }
  if (ok == REDIS_OK && r->a.db) {
    ok = redisAsyncCommand(ac, on_setup_reply, "SELECT", "SELECT %d", r->a.db);
    if (ok == REDIS_OK) sent(r);
  }
  if (ok == REDIS_OK) ok = redisAsyncCommand(ac, on_setup_reply, "PING", "PING");
  if (ok == REDIS_OK) {
    sent(r);
    return;
  }
  warn_down(r, "could not queue AUTH/SELECT/PING"); /* out of memory */
  r->ac = NULL;
  dropped(r);
  redisAsyncFree(ac);
  schedule(r);
}

/* Drops the current connection now: its pending callbacks get NULL before
 * this returns, and the reconnect timer is armed. */
static void drop_connection(sl_aredis *r) {
  if (r->ac) {
    redisAsyncContext *ac = r->ac;
    r->ac = NULL; /* first: callbacks that issue commands fail at once */
    dropped(r);
    redisAsyncFree(ac);
    schedule(r);
  }
  if (r->tc) t_fail(r->tc, NULL); /* schedules the reconnect itself */
}

/* SUBSCRIBE on a connection whose PING was just answered. */
static void subscribe(sl_aredis *r) {
  const char *av[] = {"SUBSCRIBE", r->channel};
  if (r->ac) {
    if (redisAsyncCommandArgv(r->ac, on_sub_reply, r, 2, av, NULL) == REDIS_OK) {
      sent(r);
      return;
    }
    warn_down(r, "could not send SUBSCRIBE"); /* out of memory */
    r->connected = 0;
    redisAsyncDisconnect(r->ac); /* on_disconnect reconnects */
  } else if (r->tc && t_setup_cmd(r->tc, K_SUB, 2, av) != 0) {
    t_fail(r->tc, "could not send SUBSCRIBE");
  }
}

static void on_watchdog(uv_timer_t *t) {
  sl_aredis *r = t->data;
  if (r->closing || r->timeout_ms <= 0 || !r->outstanding) {
    uv_timer_stop(t); /* sent() starts it again */
    return;
  }
  uint64_t now = uv_now(r->loop), prev = r->tick_ms;
  r->tick_ms = now;
  /* the loop itself was stuck (timers run before I/O in an iteration): let
   * it read what may be waiting before anything is judged */
  if (now - prev > 4 * WATCH_MS) return;
  if (now - r->progress_ms < (uint64_t)r->timeout_ms) return;
  sl_metric_add(m_errors, 1);
  if (!r->warned++)
    sl_log(SL_LOG_WARN, NULL,
           "redis %s:%d%s: no reply for %lld ms (%u requests waiting): dropping the connection; "
           "commands fail at once until a new one answers (retrying every 500 ms)",
           r->a.host, r->a.port, r->a.tls ? " (TLS)" : "", (long long)r->timeout_ms,
           r->outstanding);
  drop_connection(r);
}

static void init(sl_aredis *r, uv_loop_t *loop) {
  r->loop = loop;
  r->timeout_ms = DEFAULT_TIMEOUT_MS;
  uv_timer_init(loop, &r->timer);
  r->timer.data = r;
  uv_timer_init(loop, &r->watchdog);
  r->watchdog.data = r;
  uv_unref((uv_handle_t *)&r->watchdog); /* never what keeps a loop running */
  r->handles = 2;
}

static int cl_new(sl_aredis *r);

int sl_aredis_new(sl_aredis **out, uv_loop_t *loop, const char *url) {
  if (!out || !loop || !url) return SL_EINVAL;
  sl_aredis *r = calloc(1, sizeof *r);
  if (!r) return SL_ENOMEM;
  if (sl__redis_target(url, &r->a) != 0) {
    free(r);
    return SL_EINVAL;
  }
  m_errors = sl__redis_errors();
  if (r->a.cluster) {
    r->loop = loop;
    int rc = cl_new(r);
    if (rc)
      free(r);
    else
      *out = r;
    return rc;
  }
  init(r, loop);
  reconnect(r);
  *out = r;
  return 0;
}

/* A cluster's link to host:port: a single-node client with r's security and
 * deadline. NULL when out of memory. */
static sl_aredis *link_new(sl_aredis *r, const char *host, int port) {
  sl_aredis *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  l->a = r->a;
  snprintf(l->a.host, sizeof l->a.host, "%s", host);
  l->a.port = port;
  l->a.cluster = 0;
  l->a.seeds[0] = '\0';
  l->a.db = 0;
  init(l, r->loop);
  l->timeout_ms = r->timeout_ms;
  l->owner = r;
  reconnect(l);
  return l;
}

static void cl_set_timeout(sl_aredis *r, int64_t ms);

int sl_aredis_set_timeout(sl_aredis *r, int64_t ms) {
  if (!r || ms < 0) return SL_EINVAL;
  r->timeout_ms = ms;
  if (r->cl) cl_set_timeout(r, ms);
  if (r->ac) tune_socket(r->ac->c.fd, ms);
  uv_os_fd_t fd;
  if (r->tc && uv_fileno((uv_handle_t *)&r->tc->tcp, &fd) == 0) tune_socket(fd, ms);
  if (r->outstanding) watch(r); /* the watchdog stops itself when there is none */
  return 0;
}

static void on_timer_closed(uv_handle_t *h) {
  sl_aredis *r = h->data;
  if (--r->handles > 0) return;
  memset(r->a.password, 0, sizeof r->a.password);
  free(r->channel);
  free(r);
}

static void cl_free(sl_aredis *r);

void sl_aredis_free(sl_aredis *r) {
  if (!r) return;
  r->closing = 1;
  uv_timer_stop(&r->timer);
  uv_timer_stop(&r->watchdog);
  cl_free(r);
  if (r->ac) {
    redisAsyncContext *ac = r->ac;
    r->ac = NULL;
    dropped(r);
    redisAsyncFree(ac); /* pending callbacks run now with a NULL reply */
  }
  if (r->tc) {
    tconn *tc = r->tc;
    t_fail(tc, NULL); /* the same: pending callbacks get NULL now */
    tc->r = NULL;
  }
  uv_close((uv_handle_t *)&r->timer, on_timer_closed);
  uv_close((uv_handle_t *)&r->watchdog, on_timer_closed);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv) {
  pending *p = priv;
  redisReply *rep = reply;
  sl_aredis *r = ac->data;
  if (rep && r->ac == ac) answered(r);
  count_answer(rep);
  if (p->cb) p->cb(rep, p->ud);
  free(p);
}

static int cl_argv(sl_aredis *r, sl_aredis_cb cb, void *ud, int argc, const char **argv,
                   const size_t *lens);

int sl_aredis_argv(sl_aredis *r, sl_aredis_cb cb, void *ud, int argc, const char **argv,
                   const size_t *lens) {
  if (!r || r->channel) return SL_EINVAL;
  if (r->cl) return cl_argv(r, cb, ud, argc, argv, lens);
  if (!r->connected || (!r->ac && !r->tc)) {
    sl_metric_add(m_errors, 1);
    return SL_EREDIS;
  }
  if (r->tc) {
    pending *p = calloc(1, sizeof *p);
    if (!p) return SL_ENOMEM;
    p->cb = cb;
    p->ud = ud;
    p->kind = K_USER;
    int rc = t_send(r->tc, p, argc, argv, lens);
    if (rc) {
      free(p);
      return rc; /* the next read reports the broken link */
    }
    return 0;
  }
  pending *p = malloc(sizeof *p); /* also for fire and forget: its answer is progress */
  if (!p) return SL_ENOMEM;
  p->cb = cb;
  p->ud = ud;
  if (redisAsyncCommandArgv(r->ac, on_reply, p, argc, argv, lens) != REDIS_OK) {
    free(p);
    return SL_EREDIS;
  }
  sent(r);
  return 0;
}

static int cl_connected(const sl_aredis *r);

int sl_aredis_connected(const sl_aredis *r) {
  if (r && r->cl) return cl_connected(r);
  return r && r->connected;
}

static int cl_subscribe(sl_aredis *r, const char *channel, sl_aredis_msg_cb on_msg,
                        sl_aredis_state_cb on_state, void *ud);

int sl_aredis_subscribe(sl_aredis *r, const char *channel, sl_aredis_msg_cb on_msg,
                        sl_aredis_state_cb on_state, void *ud) {
  if (!r || !channel || !channel[0] || !on_msg || !on_state || r->channel) return SL_EINVAL;
  if (r->cl) return cl_subscribe(r, channel, on_msg, on_state, ud);
  r->channel = strdup(channel);
  if (!r->channel) return SL_ENOMEM;
  r->on_msg = on_msg;
  r->on_state = on_state;
  r->sub_ud = ud;
  if (r->connected) subscribe(r); /* else the next PING's answer does it */
  return 0;
}

static const sl_aredis *cl_sub(const sl_aredis *r);

int sl_aredis_settled(const sl_aredis *r) {
  if (r && r->cl) r = cl_sub(r);
  if (!r || !r->subscribed) return 0;
  const redisReader *rd = NULL;
  int fd = -1;
  if (r->ac) {
    fd = r->ac->c.fd;
    rd = r->ac->c.reader;
  } else if (r->tc) {
    uv_os_fd_t f;
    if (uv_fileno((const uv_handle_t *)&r->tc->tcp, &f) == 0) fd = f;
    rd = r->tc->rd;
  }
  if (fd < 0 || (rd && rd->len > rd->pos)) return 0; /* a message half parsed */
  char b;
  ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* ---- scripts by their SHA-1 ---------------------------------------------- */

/* An EVALSHA waiting for its answer, with what to send as EVAL instead
 * should Redis not know the script. */
typedef struct {
  sl_aredis *r;
  sl_aredis_cb cb;
  void *ud;
  const sl_redis_script *s;
  int nkeys, argc;
  const char **argv; /* the arguments, copied behind the struct */
  size_t *lens;
} script_call;

static void on_script_reply(redisReply *rep, void *ud) {
  script_call *sc = ud;
  if (sl_redis_noscript(rep)) { /* a new or flushed Redis: the text this once */
    const char *a[3 + SL__REDIS_SCRIPT_MAX_ARGS];
    size_t l[3 + SL__REDIS_SCRIPT_MAX_ARGS];
    char nk[16];
    sl__redis_script_argv(sc->s, 0, sc->nkeys, sc->argc, sc->argv, sc->lens, nk, sizeof nk, a, l);
    if (sl_aredis_argv(sc->r, sc->cb, sc->ud, 3 + sc->argc, a, l) != 0 && sc->cb)
      sc->cb(NULL, sc->ud); /* it was called once already: it gets its answer */
  } else if (sc->cb) {
    sc->cb(rep, sc->ud);
  }
  free(sc);
}

int sl_aredis_eval(sl_aredis *r, sl_aredis_cb cb, void *ud, const sl_redis_script *s, int nkeys,
                   int argc, const char **argv, const size_t *lens) {
  const char *a[3 + SL__REDIS_SCRIPT_MAX_ARGS];
  size_t l[3 + SL__REDIS_SCRIPT_MAX_ARGS];
  char nk[16];
  if (!r || !argv || sl__redis_script_argv(s, 1, nkeys, argc, argv, lens, nk, sizeof nk, a, l) != 0)
    return SL_EINVAL;
  size_t bytes = 0;
  for (int i = 0; i < argc; i++) bytes += l[3 + i];
  size_t n = (size_t)argc;
  script_call *sc = malloc(sizeof *sc + n * (sizeof *sc->argv + sizeof *sc->lens) + bytes + 1);
  if (!sc) return SL_ENOMEM;
  *sc = (script_call){r, cb, ud, s, nkeys, argc, (const char **)(sc + 1), NULL};
  sc->lens = (size_t *)(sc->argv + n);
  char *p = (char *)(sc->lens + n);
  for (int i = 0; i < argc; i++) {
    memcpy(p, a[3 + i], l[3 + i]);
    sc->argv[i] = p;
    sc->lens[i] = l[3 + i];
    p += l[3 + i];
  }
  int rc = sl_aredis_argv(r, on_script_reply, sc, 3 + argc, a, l);
  if (rc) free(sc);
  return rc;
}

/* ---- Redis Cluster ------------------------------------------------------- */

/* A cluster client r (see sl_redis.h) has no connection of its own: a link
 * (a single-node client on the same loop, r->owner pointing back) per seed
 * and per primary, and a subscriber's link to any one node. A tick on r's
 * timer reads the slot map (CLUSTER SLOTS on any link that is up) when it
 * has none, when a slot moved, or while it is incomplete or a primary's link
 * is down: a primary that died is replaced in the map once the cluster has
 * promoted its replica, and the dead node's link just keeps failing. Links
 * of nodes that are no longer primaries (nor seeds) are freed by the tick.
 * A command copies its argv (ccall) to be sent again after MOVED or ASK;
 * the caller's callback gets the last reply. */

#define TICK_MS 100
#define REFRESH_MS 250 /* at most one CLUSTER SLOTS per this while degraded */

typedef struct acl {
  sl__redis_map m;
  sl_aredis *link[SL__REDIS_MAX_NODES];
  char prim[SL__REDIS_MAX_NODES]; /* owns slots in the current map */
  int seeds;                      /* m.node[0 .. seeds) are the URL's */
  sl_aredis *sub;
  int inflight; /* node asked for CLUSTER SLOTS, or -1 */
  int want;     /* a MOVED: read the map again */
  uint64_t last_ms;
  unsigned next;
} acl;

static void cl_set_timeout(sl_aredis *r, int64_t ms) {
  for (int i = 0; i < SL__REDIS_MAX_NODES; i++)
    if (r->cl->link[i]) sl_aredis_set_timeout(r->cl->link[i], ms);
  if (r->cl->sub) sl_aredis_set_timeout(r->cl->sub, ms);
}

static void cl_free(sl_aredis *r) {
  acl *cl = r->cl;
  if (!cl) return;
  for (int i = 0; i < SL__REDIS_MAX_NODES; i++) sl_aredis_free(cl->link[i]);
  sl_aredis_free(cl->sub);
  free(cl); /* callbacks still to come see r->closing and leave it alone */
  r->cl = NULL;
}

static const sl_aredis *cl_sub(const sl_aredis *r) { return r->cl->sub; }

static int cl_connected(const sl_aredis *r) {
  const acl *cl = r->cl;
  if (cl->m.covered != SL_SLOT_COUNT) return 0;
  for (int i = 0; i < cl->m.n; i++)
    if (cl->prim[i] && !(cl->link[i] && cl->link[i]->connected)) return 0;
  return 1;
}

/* A subscriber's link that failed to reconnect moves to the next node. */
static void cl_rotate(sl_aredis *l) {
  acl *cl = l->owner->cl;
  if (!cl || cl->m.n == 0) return;
  int i = sl__redis_map_node(&cl->m, l->a.host, l->a.port);
  i = (i + 1) % cl->m.n;
  snprintf(l->a.host, sizeof l->a.host, "%s", cl->m.node[i].host);
  l->a.port = cl->m.node[i].port;
}

static void on_slots(redisReply *rep, void *ud) {
  sl_aredis *r = ud;
  if (r->closing) return;
  acl *cl = r->cl;
  int asked = cl->inflight;
  cl->inflight = -1;
  if (!rep || asked < 0) return;
  if (sl__redis_map_apply(&cl->m, rep, cl->m.node[asked].host) < 0) {
    if (rep->type == REDIS_REPLY_ERROR)
      sl_log(SL_LOG_WARN, NULL, "redis %s:%d: CLUSTER SLOTS: %s", cl->m.node[asked].host,
             cl->m.node[asked].port, rep->str);
    return;
  }
  sl_metric_add(sl__redis_refreshes(), 1);
  memset(cl->prim, 0, sizeof cl->prim);
  for (int s = 0; s < SL_SLOT_COUNT; s++)
    if (cl->m.owner[s] >= 0) cl->prim[(int)cl->m.owner[s]] = 1;
  for (int i = 0; i < cl->m.n; i++)
    if (cl->prim[i] && !cl->link[i])
      cl->link[i] = link_new(r, cl->m.node[i].host, cl->m.node[i].port);
}

/* CLUSTER SLOTS on the next link that is up. */
static void cl_refresh(sl_aredis *r) {
  acl *cl = r->cl;
  const char *av[] = {"CLUSTER", "SLOTS"};
  for (int k = 0; k < cl->m.n; k++) {
    int i = (int)(cl->next++ % (unsigned)cl->m.n);
    sl_aredis *l = cl->link[i];
    if (!l || !l->connected) continue;
    cl->inflight = i; /* first: a failed send answers NULL at once */
    if (sl_aredis_argv(l, on_slots, r, 2, av, NULL) == 0) {
      cl->want = 0;
      cl->last_ms = uv_now(r->loop);
      return;
    }
    cl->inflight = -1;
  }
}

static void on_tick(uv_timer_t *t) {
  sl_aredis *r = t->data;
  acl *cl = r->cl;
  if (r->closing || !cl) return;
  for (int i = cl->seeds; i < cl->m.n; i++) /* links no map needs any more */
    if (cl->link[i] && !cl->prim[i] && cl->inflight != i) {
      sl_aredis_free(cl->link[i]);
      cl->link[i] = NULL;
    }
  if (cl->inflight >= 0 || uv_now(r->loop) - cl->last_ms < REFRESH_MS) return;
  if (cl->want || !cl_connected(r)) cl_refresh(r);
}

static int cl_new(sl_aredis *r) {
  acl *cl = calloc(1, sizeof *cl);
  if (!cl || sl__redis_map_init(&cl->m, &r->a) != 0) {
    free(cl);
    return SL_ENOMEM;
  }
  r->cl = cl;
  init(r, r->loop);
  cl->seeds = cl->m.n;
  cl->inflight = -1;
  for (int i = 0; i < cl->seeds; i++)
    cl->link[i] = link_new(r, cl->m.node[i].host, cl->m.node[i].port);
  uv_unref((uv_handle_t *)&r->timer);
  uv_timer_start(&r->timer, on_tick, TICK_MS, TICK_MS);
  return 0;
}

/* A command on its way in a cluster, with its arguments copied behind it. */
typedef struct ccall {
  sl_aredis *r;
  sl_aredis_cb cb;
  void *ud;
  int node, hops, argc;
  const char **argv;
  size_t *lens;
} ccall;

/* A redirect's target link, up; NULL when it cannot take the command now. */
static sl_aredis *cl_follow(sl_aredis *r, ccall *cc, const redisReply *rep) {
  acl *cl = r->cl;
  sl__redis_redirect rd;
  if (cc->hops >= SL__REDIS_MAX_REDIRECTS || !sl__redis_redirect_parse(rep, &rd)) return NULL;
  if (!rd.host[0]) snprintf(rd.host, sizeof rd.host, "%s", cl->m.node[cc->node].host);
  int to = sl__redis_map_node(&cl->m, rd.host, rd.port);
  if (to < 0) return NULL;
  sl_metric_add(sl__redis_redirects(rd.ask), 1);
  if (!rd.ask) {
    cl->m.owner[rd.slot] = (signed char)to;
    cl->prim[to] = 1;
    cl->want = 1;
  }
  if (!cl->link[to]) cl->link[to] = link_new(r, rd.host, rd.port); /* up for the next one */
  sl_aredis *l = cl->link[to];
  if (!l || !l->connected) return NULL;
  const char *av[] = {"ASKING"};
  if (rd.ask && sl_aredis_argv(l, NULL, NULL, 1, av, NULL) != 0) return NULL;
  cc->node = to;
  cc->hops++;
  return l;
}

static void on_cl_reply(redisReply *rep, void *ud) {
  ccall *cc = ud;
  sl_aredis *r = cc->r;
  if (rep && !r->closing && rep->type == REDIS_REPLY_ERROR) {
    sl_aredis *l = cl_follow(r, cc, rep);
    if (l && sl_aredis_argv(l, on_cl_reply, cc, cc->argc, cc->argv, cc->lens) == 0) return;
  }
  if (cc->cb) cc->cb(rep, cc->ud);
  free(cc);
}

static int cl_argv(sl_aredis *r, sl_aredis_cb cb, void *ud, int argc, const char **argv,
                   const size_t *lens) {
  acl *cl = r->cl;
  int slot = sl_redis_route(argc, argv, lens), node = -1;
  if (slot >= 0) {
    node = cl->m.owner[slot];
  } else {
    for (int k = 0; k < cl->m.n && node < 0; k++) { /* any primary that is up */
      int i = (int)(cl->next++ % (unsigned)cl->m.n);
      if (cl->prim[i] && cl->link[i] && cl->link[i]->connected) node = i;
    }
  }
  sl_aredis *l = node >= 0 ? cl->link[node] : NULL;
  if (argc < 1 || !l || !l->connected) {
    sl_metric_add(m_errors, 1);
    return SL_EREDIS;
  }
  size_t bytes = 0, n = (size_t)argc;
  for (int i = 0; i < argc; i++) bytes += lens ? lens[i] : strlen(argv[i]);
  ccall *cc = malloc(sizeof *cc + n * (sizeof *cc->argv + sizeof *cc->lens) + bytes + 1);
  if (!cc) return SL_ENOMEM;
  *cc = (ccall){r, cb, ud, node, 0, argc, (const char **)(cc + 1), NULL};
  cc->lens = (size_t *)(cc->argv + n);
  char *p = (char *)(cc->lens + n);
  for (int i = 0; i < argc; i++) {
    cc->lens[i] = lens ? lens[i] : strlen(argv[i]);
    memcpy(p, argv[i], cc->lens[i]);
    cc->argv[i] = p;
    p += cc->lens[i];
  }
  int rc = sl_aredis_argv(l, on_cl_reply, cc, argc, cc->argv, cc->lens);
  if (rc) free(cc);
  return rc;
}

static int cl_subscribe(sl_aredis *r, const char *channel, sl_aredis_msg_cb on_msg,
                        sl_aredis_state_cb on_state, void *ud) {
  acl *cl = r->cl;
  r->channel = strdup(channel); /* r itself takes no commands now */
  if (!r->channel) return SL_ENOMEM;
  cl->sub = link_new(r, cl->m.node[0].host, cl->m.node[0].port);
  if (!cl->sub) return SL_ENOMEM;
  return sl_aredis_subscribe(cl->sub, channel, on_msg, on_state, ud);
}

double sl_aredis_reply_num(const redisReply *r, double fallback) {
  if (!r || r->type != REDIS_REPLY_STRING) return fallback;
  char *end;
  double v = strtod(r->str, &end);
  return end != r->str && *end == '\0' && isfinite(v) && v >= 0 ? v : fallback;
}
