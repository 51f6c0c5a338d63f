/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_redis.c — see sl_redis.h.
 *
 * Two transports behind one connection: a hiredis redisContext for redis://
 * and, for rediss://, a blocking socket (timeouts from SO_RCVTIMEO /
 * SO_SNDTIMEO) wrapped in an OpenSSL SSL; commands are formatted with
 * redisFormatCommandArgv and replies parsed with a redisReader, so both
 * return the same redisReply trees. The TLS context and the default
 * credentials are process-wide, set once before threads start.
 *
 * A failed command drops the connection; the next one connects again. A
 * command that fails because the server had closed a connection that sat
 * idle (EOF or reset: Redis restarted) is sent once more on a new
 * connection at once: it never reached a live server.
 *
 * A cluster client (redis[s]+cluster://) is an sl_redis that never
 * connects itself: its rcl holds the slot map and one such single-node
 * sl_redis per known node, opened on first use. A command goes to its
 * slot's owner; a connection failure or a MOVED reads the map again (the
 * failed node asked last), so the next command finds a promoted replica.
 * The single-node path costs one branch more, nothing else.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_redis.h"
#include "sluice/sl_err.h"
#include "sluice/sl_id.h"
#include "sluice/sl_metrics.h"
#include "sluice/sl_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define TIMEOUT_MS 2000

/* ---- process-wide security --------------------------------------------- */

static struct {
  char user[128];
  char password[512];
  SSL_CTX *ctx; /* built by sl_redis_security_set or on first rediss:// use */
} sec;

void sl_redis_security_reset(void) {
  SSL_CTX_free(sec.ctx);
  memset(&sec, 0, sizeof sec);
}

static void ssl_queue(char *err, size_t errlen) {
  unsigned long e = ERR_get_error();
  char buf[256] = "";
  if (e) ERR_error_string_n(e, buf, sizeof buf);
  snprintf(err, errlen, "%s", buf[0] ? buf : "unknown OpenSSL error");
  ERR_clear_error();
}

static SSL_CTX *ctx_new(const char *ca, const char *cert, const char *key, char *err,
                        size_t errlen) {
  SSL_CTX *c = SSL_CTX_new(TLS_client_method());
  char why[256];
  if (!c) {
    ssl_queue(why, sizeof why);
    snprintf(err, errlen, "redis TLS: %s", why);
    return NULL;
  }
  SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
  SSL_CTX_set_verify(c, SSL_VERIFY_PEER, NULL);
  int ok =
      ca && *ca ? SSL_CTX_load_verify_locations(c, ca, NULL) : SSL_CTX_set_default_verify_paths(c);
  if (ok != 1) {
    ssl_queue(why, sizeof why);
    snprintf(err, errlen, "redis.tls_ca_file %s: %s", ca && *ca ? ca : "(system CAs)", why);
    SSL_CTX_free(c);
    return NULL;
  }
  if ((cert && *cert) != (key && *key)) {
    snprintf(err, errlen, "redis.tls_cert_file and redis.tls_key_file go together");
    SSL_CTX_free(c);
    return NULL;
  }
  if (cert && *cert) {
    if (SSL_CTX_use_certificate_chain_file(c, cert) != 1) {
      ssl_queue(why, sizeof why);
      snprintf(err, errlen, "redis.tls_cert_file %s: %s", cert, why);
      SSL_CTX_free(c);
      return NULL;
    }
    if (SSL_CTX_use_PrivateKey_file(c, key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(c) != 1) {
      ssl_queue(why, sizeof why);
      snprintf(err, errlen, "redis.tls_key_file %s: %s", key, why);
      SSL_CTX_free(c);
      return NULL;
    }
  }
  return c;
}

int sl_redis_security_set(const sl_redis_security *s, char *err, size_t errlen) {
  if (!s) return SL_EINVAL;
  if ((s->user && strlen(s->user) >= sizeof sec.user) ||
      (s->password && strlen(s->password) >= sizeof sec.password)) {
    snprintf(err, errlen, "redis.username or redis.password is too long");
    return SL_ECONFIG;
  }
  if (s->user && *s->user && !(s->password && *s->password)) {
    snprintf(err, errlen, "redis.username is set but redis.password is empty");
    return SL_ECONFIG;
  }
  SSL_CTX *c = ctx_new(s->ca_file, s->cert_file, s->key_file, err, errlen);
  if (!c) return SL_ECONFIG;
  sl_redis_security_reset();
  sec.ctx = c;
  snprintf(sec.user, sizeof sec.user, "%s", s->user ? s->user : "");
  snprintf(sec.password, sizeof sec.password, "%s", s->password ? s->password : "");
  return 0;
}

struct ssl_st *sl__redis_ssl_new(const char *host, char *err, size_t errlen) {
  if (!sec.ctx) { /* rediss:// without sl_redis_security_set: the system's CAs */
    sec.ctx = ctx_new(NULL, NULL, NULL, err, errlen);
    if (!sec.ctx) return NULL;
  }
  SSL *s = SSL_new(sec.ctx);
  if (!s) {
    ssl_queue(err, errlen);
    return NULL;
  }
  unsigned char ip[16];
  int is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
  int ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), host)
                 : (SSL_set_tlsext_host_name(s, host) == 1 && SSL_set1_host(s, host) == 1);
  if (ok != 1) {
    ssl_queue(err, errlen);
    SSL_free(s);
    return NULL;
  }
  SSL_set_connect_state(s);
  return s;
}

void sl__redis_ssl_why(struct ssl_st *ssl, int ret, char *err, size_t errlen) {
  int e = SSL_get_error(ssl, ret);
  long v = SSL_get_verify_result(ssl);
  unsigned long q = ERR_peek_error();
  if (v != X509_V_OK && q && ERR_GET_REASON(q) == SSL_R_CERTIFICATE_VERIFY_FAILED)
    snprintf(err, errlen, "TLS certificate verification failed: %s",
             X509_verify_cert_error_string(v));
  else if (q)
    ssl_queue(err, errlen);
  else if (e == SSL_ERROR_SYSCALL)
    snprintf(err, errlen, "TLS: connection closed by the server%s%s", errno ? ": " : "",
             errno ? strerror(errno) : "");
  else if (e == SSL_ERROR_ZERO_RETURN)
    snprintf(err, errlen, "TLS: connection closed by the server");
  else
    snprintf(err, errlen, "TLS error %d", e);
  ERR_clear_error();
}

/* ---- URLs ------------------------------------------------------------- */

static int unhex(int c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* %-decodes p[0..n) into out (cap bytes). */
static int pct_decode(const char *p, size_t n, char *out, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    int c = (unsigned char)p[i];
    if (c == '%') {
      if (i + 2 >= n) return SL_EINVAL;
      int h = unhex(p[i + 1]), l = unhex(p[i + 2]);
      if (h < 0 || l < 0) return SL_EINVAL;
      c = h * 16 + l;
      i += 2;
    }
    if (c == 0 || o + 1 >= cap) return SL_EINVAL;
    out[o++] = (char)c;
  }
  out[o] = '\0';
  return 0;
}

/* A cluster URL's seed list p[0..n) ("h1:p1,h2:p2"; /0 may follow):
 * each seed is checked, the first one becomes a->host and a->port. */
static int parse_seeds(const char *p, sl_redis_addr *a) {
  const char *slash = strchr(p, '/');
  size_t n = slash ? (size_t)(slash - p) : strlen(p);
  if (slash && slash[1] && strcmp(slash + 1, "0") != 0) return SL_EINVAL; /* only db 0 */
  if (n == 0 || n >= sizeof a->seeds) return SL_EINVAL;
  memcpy(a->seeds, p, n);
  a->seeds[n] = '\0';
  int count = 0;
  for (const char *s = a->seeds; *s;) {
    const char *e = strchr(s, ',');
    size_t sl = e ? (size_t)(e - s) : strlen(s);
    const char *colon = memchr(s, ':', sl);
    size_t hl = colon ? (size_t)(colon - s) : sl;
    if (hl == 0 || hl >= sizeof a->host || ++count > SL_REDIS_MAX_SEEDS) return SL_EINVAL;
    int port = 6379;
    if (colon) {
      char *end;
      long v = strtol(colon + 1, &end, 10);
      if (v <= 0 || v > 65535 || end != s + sl) return SL_EINVAL;
      port = (int)v;
    }
    if (count == 1) {
      memcpy(a->host, s, hl);
      a->host[hl] = '\0';
      a->port = port;
    }
    s += sl + (e ? 1 : 0);
    if (e && !*s) return SL_EINVAL; /* a trailing comma */
  }
  return 0;
}

int sl_redis_addr_parse(const char *url, sl_redis_addr *a) {
  if (!url || !a) return SL_EINVAL;
  memset(a, 0, sizeof *a);
  const char *p = url;
  if (strncmp(p, "redis://", 8) == 0)
    p += 8;
  else if (strncmp(p, "rediss://", 9) == 0)
    p += 9, a->tls = 1;
  else if (strncmp(p, "redis+cluster://", 16) == 0)
    p += 16, a->cluster = 1;
  else if (strncmp(p, "rediss+cluster://", 17) == 0)
    p += 17, a->cluster = 1, a->tls = 1;
  else if (strstr(p, "://"))
    return SL_EINVAL;
  const char *at = NULL;
  for (const char *q = p; *q && *q != '/'; q++)
    if (*q == '@') at = q; /* the last '@' before the path ends the user info */
  if (at) {
    const char *colon = memchr(p, ':', (size_t)(at - p));
    size_t ul = colon ? (size_t)(colon - p) : (size_t)(at - p);
    if (pct_decode(p, ul, a->user, sizeof a->user) != 0) return SL_EINVAL;
    if (colon &&
        pct_decode(colon + 1, (size_t)(at - colon - 1), a->password, sizeof a->password) != 0)
      return SL_EINVAL;
    if (!colon) { /* redis://password@host is a common shorthand */
      snprintf(a->password, sizeof a->password, "%s", a->user);
      a->user[0] = '\0';
    }
    if (a->user[0] && !a->password[0]) return SL_EINVAL;
    p = at + 1;
  }
  if (a->cluster) return parse_seeds(p, a);
  const char *colon = strchr(p, ':'), *slash = strchr(p, '/');
  if (colon && slash && slash < colon) colon = NULL;
  size_t hl = colon ? (size_t)(colon - p) : slash ? (size_t)(slash - p) : strlen(p);
  if (hl == 0 || hl >= sizeof a->host) return SL_EINVAL;
  memcpy(a->host, p, hl);
  a->host[hl] = '\0';
  a->port = 6379;
  if (colon) {
    char *end;
    long v = strtol(colon + 1, &end, 10);
    if (v <= 0 || v > 65535 || (*end && *end != '/')) return SL_EINVAL;
    a->port = (int)v;
  }
  if (slash && slash[1]) {
    char *end;
    long v = strtol(slash + 1, &end, 10);
    if (v < 0 || v > 15 || *end) return SL_EINVAL;
    a->db = (int)v;
  }
  return 0;
}

int sl_redis_parse_url(const char *url, char *host, size_t hostlen, int *port, int *db) {
  if (!host || !port || !db) return SL_EINVAL;
  sl_redis_addr a;
  if (sl_redis_addr_parse(url, &a) != 0 || strlen(a.host) >= hostlen) return SL_EINVAL;
  snprintf(host, hostlen, "%s", a.host);
  *port = a.port;
  *db = a.db;
  return 0;
}

void sl_redis_redact(const char *url, char *buf, size_t len) {
  if (!buf || !len) return;
  if (!url) {
    buf[0] = '\0';
    return;
  }
  const char *p = strstr(url, "://");
  p = p ? p + 3 : url;
  const char *at = NULL;
  for (const char *q = p; *q && *q != '/'; q++)
    if (*q == '@') at = q;
  if (!at) {
    snprintf(buf, len, "%s", url);
    return;
  }
  const char *colon = memchr(p, ':', (size_t)(at - p));
  if (colon) /* scheme:, user, ":***@", rest */
    snprintf(buf, len, "%.*s:***%s", (int)(colon - url), url, at);
  else /* a lone part is the password: "***@", rest */
    snprintf(buf, len, "%.*s***%s", (int)(p - url), url, at);
}

int sl__redis_target(const char *url, sl_redis_addr *a) {
  if (sl_redis_addr_parse(url, a) != 0) return SL_EINVAL;
  if (!a->password[0] && sec.password[0]) {
    snprintf(a->user, sizeof a->user, "%s", sec.user);
    snprintf(a->password, sizeof a->password, "%s", sec.password);
  }
  return 0;
}

/* ---- the connection ----------------------------------------------------- */

struct sl_redis {
  sl_redis_addr a;
  redisContext *c; /* redis:// */
  int fd;          /* rediss:// : socket, SSL and reply reader */
  SSL *ssl;
  redisReader *rd;
  int refused;    /* the last failure was a refusal (AUTH, TLS trust) */
  int closed;     /* the last failure was the server closing the connection
                   * (EOF, reset), not a timeout */
  struct rcl *cl; /* a cluster: r itself never connects, its links do */
};

static sl_metric *m_errors;

sl_metric *sl__redis_errors(void) {
  return sl_metrics_counter("sluice_redis_errors_total", NULL,
                            "Redis connection and command errors");
}

static int cl_new(sl_redis *r);
static void cl_free(sl_redis *r);

int sl_redis_new(sl_redis **out, const char *url) {
  if (!out || !url) return SL_EINVAL;
  sl_redis *r = calloc(1, sizeof *r);
  if (!r) return SL_ENOMEM;
  if (sl__redis_target(url, &r->a) != 0) {
    free(r);
    return SL_EINVAL;
  }
  r->fd = -1;
  m_errors = sl__redis_errors();
  if (r->a.cluster && cl_new(r) != 0) {
    free(r);
    return SL_ENOMEM;
  }
  *out = r;
  return 0;
}

static void drop(sl_redis *r) {
  if (r->c) redisFree(r->c);
  r->c = NULL;
  if (r->ssl) SSL_free(r->ssl);
  r->ssl = NULL;
  if (r->fd >= 0) close(r->fd);
  r->fd = -1;
  if (r->rd) redisReaderFree(r->rd);
  r->rd = NULL;
}

void sl_redis_free(sl_redis *r) {
  if (!r) return;
  cl_free(r);
  drop(r);
  memset(r->a.password, 0, sizeof r->a.password);
  free(r);
}

/* A TCP connection to host:port within TIMEOUT_MS, left blocking with
 * send/receive timeouts. Returns the socket or -1 with err set. */
static int tcp_connect(const char *host, int port, char *err, size_t errlen) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  int g = getaddrinfo(host, ps, &hints, &res);
  if (g != 0) {
    snprintf(err, errlen, "%s", gai_strerror(g));
    return -1;
  }
  int fd = -1;
  const char *why = "no address";
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      struct pollfd pf = {.fd = fd, .events = POLLOUT};
      int n = poll(&pf, 1, TIMEOUT_MS);
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      if (n == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
      rc = n == 1 && soerr == 0 ? 0 : -1;
      errno = n == 0 ? ETIMEDOUT : soerr;
    }
    if (rc == 0) {
      fcntl(fd, F_SETFL, fl);
      struct timeval tv = {TIMEOUT_MS / 1000, (TIMEOUT_MS % 1000) * 1000};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      break;
    }
    why = strerror(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) snprintf(err, errlen, "%s", why);
  return fd;
}

/* One command over the TLS connection; NULL with err on an I/O error. */
static redisReply *tls_command(sl_redis *r, int argc, const char **argv, const size_t *lens,
                               char *err, size_t errlen) {
  char *cmd = NULL;
  int n = redisFormatCommandArgv(&cmd, argc, argv, lens);
  if (n < 0) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  int w = SSL_write(r->ssl, cmd, n);
  int we = errno;
  redisFreeCommand(cmd);
  if (w != n) {
    int e = SSL_get_error(r->ssl, w);
    r->closed = e == SSL_ERROR_ZERO_RETURN ||
                (e == SSL_ERROR_SYSCALL && (we == ECONNRESET || we == EPIPE || w == 0));
    sl__redis_ssl_why(r->ssl, w, err, errlen);
    return NULL;
  }
  for (;;) {
    void *rep = NULL;
    if (redisReaderGetReply(r->rd, &rep) != REDIS_OK) {
      snprintf(err, errlen, "protocol error: %s", r->rd->errstr);
      return NULL;
    }
    if (rep) return rep;
    char buf[16384];
    int got = SSL_read(r->ssl, buf, sizeof buf);
    if (got <= 0) {
      int re = errno, e = SSL_get_error(r->ssl, got);
      r->closed =
          e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && (re == ECONNRESET || got == 0));
      sl__redis_ssl_why(r->ssl, got, err, errlen);
      return NULL;
    }
    redisReaderFeed(r->rd, buf, (size_t)got);
  }
}

static redisReply *raw(sl_redis *r, int argc, const char **argv, const size_t *lens, char *err,
                       size_t errlen) {
  if (r->ssl) return tls_command(r, argc, argv, lens, err, errlen);
  redisReply *rep = redisCommandArgv(r->c, argc, argv, lens);
  if (!rep) {
    int e = errno;
    r->closed = r->c->err == REDIS_ERR_EOF ||
                (r->c->err == REDIS_ERR_IO && (e == ECONNRESET || e == EPIPE));
    snprintf(err, errlen, "%s", r->c->errstr);
  }
  return rep;
}

/* AUTH and SELECT on a fresh connection. */
static int handshake(sl_redis *r, char *why, size_t whylen) {
  if (r->a.password[0]) {
    const char *av[3] = {"AUTH", r->a.user, r->a.password};
    const char **args = r->a.user[0] ? av : (const char *[]){"AUTH", r->a.password};
    int n = r->a.user[0] ? 3 : 2;
    size_t lens[3];
    for (int i = 0; i < n; i++) lens[i] = strlen(args[i]);
    redisReply *rep = raw(r, n, args, lens, why, whylen);
    if (!rep) return SL_EREDIS;
    if (rep->type == REDIS_REPLY_ERROR) {
      snprintf(why, whylen, "AUTH refused: %s", rep->str);
      freeReplyObject(rep);
      r->refused = 1;
      return SL_EREDIS;
    }
    freeReplyObject(rep);
  }
  if (r->a.db) {
    char db[8];
    snprintf(db, sizeof db, "%d", r->a.db);
    const char *av[] = {"SELECT", db};
    size_t lens[] = {6, strlen(db)};
    redisReply *rep = raw(r, 2, av, lens, why, whylen);
    if (!rep) return SL_EREDIS;
    int bad = rep->type == REDIS_REPLY_ERROR;
    if (bad) {
      snprintf(why, whylen, "SELECT %d: %s", r->a.db, rep->str);
      r->refused = 1;
    }
    freeReplyObject(rep);
    if (bad) return SL_EREDIS;
  }
  return 0;
}

static int connect_(sl_redis *r, char *err, size_t errlen) {
  char why[512] = "";
  r->refused = 0;
  if (r->a.tls) {
    r->fd = tcp_connect(r->a.host, r->a.port, why, sizeof why);
    if (r->fd >= 0) {
      r->ssl = sl__redis_ssl_new(r->a.host, why, sizeof why);
      r->rd = r->ssl ? redisReaderCreate() : NULL;
      if (r->ssl && !r->rd) snprintf(why, sizeof why, "out of memory");
    }
    if (r->rd) {
      SSL_set_fd(r->ssl, r->fd);
      ERR_clear_error();
      errno = 0;
      int rc = SSL_connect(r->ssl);
      if (rc != 1) {
        sl__redis_ssl_why(r->ssl, rc, why, sizeof why);
        r->refused = 1; /* the server answered, but not with TLS we trust */
        drop(r);
      }
    } else {
      drop(r);
    }
  } else {
    struct timeval tv = {TIMEOUT_MS / 1000, (TIMEOUT_MS % 1000) * 1000};
    r->c = redisConnectWithTimeout(r->a.host, r->a.port, tv);
    if (!r->c || r->c->err) {
      snprintf(why, sizeof why, "%s", r->c ? r->c->errstr : "out of memory");
      drop(r);
    } else {
      redisSetTimeout(r->c, tv);
    }
  }
  if ((r->c || r->ssl) && handshake(r, why, sizeof why) != 0) drop(r);
  if (r->c || r->ssl) return 0;
  snprintf(err, errlen, "redis %s:%d%s: %s", r->a.host, r->a.port, r->a.tls ? " (TLS)" : "", why);
  return SL_EREDIS;
}

/* MOVED and ASK are the cluster client's business, not errors. */
static int redirect(const redisReply *rep) {
  return strncmp(rep->str, "MOVED ", 6) == 0 || strncmp(rep->str, "ASK ", 4) == 0;
}

/* One command on one node's connection (the whole client when single). */
static redisReply *node_argv(sl_redis *r, int argc, const char **argv, const size_t *lens,
                             char *err, size_t errlen) {
  int reused = r->c || r->ssl;
  if (!reused && connect_(r, err, errlen) != 0) {
    sl_metric_add(m_errors, 1);
    return NULL;
  }
  char why[512];
  r->closed = 0;
  redisReply *rep = raw(r, argc, argv, lens, why, sizeof why);
  if (!rep && reused && r->closed) {
    /* the server closed this connection while it sat idle (a restart, a
     * failover, a client timeout): the command never reached a live
     * server. Once more on a new connection, so that a Redis restart does
     * not cost every thread's next command a failure (and its message a
     * trip through the retry tiers). */
    sl_metric_add(m_errors, 1);
    drop(r);
    if (connect_(r, err, errlen) != 0) {
      sl_metric_add(m_errors, 1);
      return NULL;
    }
    rep = raw(r, argc, argv, lens, why, sizeof why);
  }
  if (!rep) {
    snprintf(err, errlen, "redis %s:%d: %s", r->a.host, r->a.port, why);
    drop(r);
    sl_metric_add(m_errors, 1);
    return NULL;
  }
  if (rep->type == REDIS_REPLY_ERROR && !sl_redis_noscript(rep) && !redirect(rep))
    sl_metric_add(m_errors, 1);
  return rep;
}

static redisReply *cl_argv(sl_redis *r, int argc, const char **argv, const size_t *lens, char *err,
                           size_t errlen);

redisReply *sl_redis_argv(sl_redis *r, int argc, const char **argv, const size_t *lens, char *err,
                          size_t errlen) {
  if (r->cl) return cl_argv(r, argc, argv, lens, err, errlen);
  return node_argv(r, argc, argv, lens, err, errlen);
}

/* ---- Redis Cluster ------------------------------------------------------ */

/* A cluster client: the slot map and a lazily opened link (a single-node
 * sl_redis) per known node. */
typedef struct rcl {
  sl__redis_map m;
  sl_redis *link[SL__REDIS_MAX_NODES];
  int stale;     /* refresh the map before the next command */
  unsigned next; /* rotates key-less commands over the primaries */
  int refused;   /* the last refresh met a refusal (AUTH, TLS, no cluster) */
} rcl;

static int cl_new(sl_redis *r) {
  r->cl = calloc(1, sizeof *r->cl);
  if (!r->cl) return SL_ENOMEM;
  if (sl__redis_map_init(&r->cl->m, &r->a) != 0) {
    free(r->cl);
    r->cl = NULL;
    return SL_EINVAL;
  }
  return 0;
}

static void cl_free(sl_redis *r) {
  if (!r->cl) return;
  for (int i = 0; i < SL__REDIS_MAX_NODES; i++) sl_redis_free(r->cl->link[i]);
  free(r->cl);
  r->cl = NULL;
}

/* Node i's connection, made (not connected) on first use. */
static sl_redis *cl_link(sl_redis *r, int i) {
  rcl *cl = r->cl;
  if (cl->link[i]) return cl->link[i];
  sl_redis *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  l->a = r->a;
  snprintf(l->a.host, sizeof l->a.host, "%s", cl->m.node[i].host);
  l->a.port = cl->m.node[i].port;
  l->a.cluster = 0;
  l->a.seeds[0] = '\0';
  l->a.db = 0;
  l->fd = -1;
  return cl->link[i] = l;
}

/* Reads the slot map from the first node that gives one: those with an
 * open connection first, avoid (a node that just failed, or -1) last. */
static int cl_refresh(sl_redis *r, int avoid, char *err, size_t errlen) {
  rcl *cl = r->cl;
  const char *av[] = {"CLUSTER", "SLOTS"};
  size_t lens[] = {7, 5};
  snprintf(err, errlen, "redis cluster: no node known");
  cl->refused = 0;
  for (int pass = 0; pass < 3; pass++) {
    for (int i = 0; i < cl->m.n; i++) {
      sl_redis *l = cl->link[i];
      int open = l && (l->c || l->ssl);
      if (pass == 0 ? (!open || i == avoid) : pass == 1 ? (open || i == avoid) : i != avoid)
        continue;
      if (!(l = cl_link(r, i))) continue;
      redisReply *rep = node_argv(l, 2, av, lens, err, errlen);
      cl->refused |= l->refused;
      if (!rep) continue;
      int got = sl__redis_map_apply(&cl->m, rep, l->a.host);
      if (got < 0) {
        cl->refused |= rep->type == REDIS_REPLY_ERROR;
        snprintf(err, errlen, "redis %s:%d: CLUSTER SLOTS: %s", l->a.host, l->a.port,
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "not a slot map");
      }
      freeReplyObject(rep);
      if (got < 0) continue;
      cl->stale = 0;
      sl_metric_add(sl__redis_refreshes(), 1);
      return 0;
    }
  }
  return SL_EREDIS;
}

/* The node a command goes to: its key's slot's owner, or (key-less) the
 * owner of a rotating slot. -1 when the map has no owner for it. */
static int cl_target(rcl *cl, int slot) {
  if (slot >= 0) return cl->m.owner[slot];
  for (int k = 0; k < 16; k++) {
    int o = cl->m.owner[(cl->next++ * 1031u) % 16384];
    if (o >= 0) return o;
  }
  return -1;
}

/* The command on node, preceded by ASKING when asking. */
static redisReply *cl_send(sl_redis *l, int asking, int argc, const char **argv, const size_t *lens,
                           char *err, size_t errlen) {
  if (asking) {
    const char *av[] = {"ASKING"};
    size_t al[] = {6};
    redisReply *rep = node_argv(l, 1, av, al, err, errlen);
    if (!rep) return NULL;
    freeReplyObject(rep);
  }
  return node_argv(l, argc, argv, lens, err, errlen);
}

/* SCAN over the whole cluster: the primaries one after the other (in node
 * order), the caller's cursor = the node's cursor * SL__REDIS_MAX_NODES +
 * the primary's place. A map that changes meanwhile may skip or repeat keys,
 * as SCAN may anyway. */
static redisReply *cl_scan(sl_redis *r, int argc, const char **argv, const size_t *lens, char *err,
                           size_t errlen) {
  rcl *cl = r->cl;
  char prim[SL__REDIS_MAX_NODES] = {0}, num[32];
  for (int s = 0; s < 16384; s++)
    if (cl->m.owner[s] >= 0) prim[(int)cl->m.owner[s]] = 1;
  size_t n = lens ? lens[1] : strlen(argv[1]);
  if (n >= sizeof num || argc > 16) {
    snprintf(err, errlen, "redis cluster: bad SCAN");
    return NULL;
  }
  memcpy(num, argv[1], n);
  num[n] = '\0';
  unsigned long long c = strtoull(num, NULL, 10), inner = c / SL__REDIS_MAX_NODES;
  int place = (int)(c % SL__REDIS_MAX_NODES), node = -1;
  for (int i = 0, k = 0; i < cl->m.n && node < 0; i++)
    if (prim[i] && k++ == place) node = i;
  if (node < 0) {
    snprintf(err, errlen, "redis cluster: SCAN cursor %s names no primary", num);
    return NULL;
  }
  const char *av[16];
  size_t al[16];
  for (int i = 0; i < argc; i++) av[i] = argv[i], al[i] = lens ? lens[i] : strlen(argv[i]);
  snprintf(num, sizeof num, "%llu", inner);
  av[1] = num;
  al[1] = strlen(num);
  sl_redis *l = cl_link(r, node);
  redisReply *rep = l ? node_argv(l, argc, av, al, err, errlen) : NULL;
  if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
      rep->element[0]->type != REDIS_REPLY_STRING)
    return rep;
  unsigned long long next = strtoull(rep->element[0]->str, NULL, 10), out = 0;
  int more = 0;
  for (int i = node + 1; i < cl->m.n; i++) more |= prim[i];
  if (next)
    out = next * SL__REDIS_MAX_NODES + (unsigned long long)place;
  else if (more)
    out = (unsigned long long)place + 1; /* the next primary, from its start */
  char *cur = malloc(32);
  if (!cur) {
    freeReplyObject(rep);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  snprintf(cur, 32, "%llu", out);
  free(rep->element[0]->str);
  rep->element[0]->str = cur;
  rep->element[0]->len = strlen(cur);
  return rep;
}

static redisReply *cl_argv(sl_redis *r, int argc, const char **argv, const size_t *lens, char *err,
                           size_t errlen) {
  rcl *cl = r->cl;
  char why[512];
  if ((cl->stale || !cl->m.covered) && cl_refresh(r, -1, why, sizeof why) != 0 && !cl->m.covered) {
    snprintf(err, errlen, "%s", why);
    sl_metric_add(m_errors, 1);
    return NULL;
  }
  if (argc >= 2 && (lens ? lens[0] : strlen(argv[0])) == 4 && strncasecmp(argv[0], "SCAN", 4) == 0)
    return cl_scan(r, argc, argv, lens, err, errlen);
  int slot = sl_redis_route(argc, argv, lens);
  int node = cl_target(cl, slot), asking = 0;
  if (node < 0) {
    snprintf(err, errlen, "redis cluster: no node serves slot %d", slot);
    cl->stale = 1;
    sl_metric_add(m_errors, 1);
    return NULL;
  }
  for (int hops = 0;; hops++) {
    sl_redis *l = cl_link(r, node);
    if (!l) {
      snprintf(err, errlen, "out of memory");
      return NULL;
    }
    redisReply *rep = cl_send(l, asking, argc, argv, lens, err, errlen);
    if (!rep) { /* the node is gone: the next command goes by a fresh map */
      cl->stale = cl_refresh(r, node, why, sizeof why) != 0;
      return NULL;
    }
    sl__redis_redirect rd;
    if (hops >= SL__REDIS_MAX_REDIRECTS || !sl__redis_redirect_parse(rep, &rd)) return rep;
    if (!rd.host[0]) snprintf(rd.host, sizeof rd.host, "%s", l->a.host);
    int to = sl__redis_map_node(&cl->m, rd.host, rd.port);
    if (to < 0) return rep;
    freeReplyObject(rep);
    sl_metric_add(sl__redis_redirects(rd.ask), 1);
    asking = rd.ask;
    if (!rd.ask) { /* the slot has moved: the map is old */
      cl->m.owner[rd.slot] = (signed char)to;
      cl->stale = cl_refresh(r, -1, why, sizeof why) != 0;
      cl->m.owner[rd.slot] = (signed char)to;
    }
    node = to;
  }
}

/* ---- scripts by their SHA-1 -------------------------------------------- */

int sl_redis_script_init(sl_redis_script *s, const char *text) {
  if (!s || !text) return SL_EINVAL;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!EVP_Digest(text, strlen(text), md, &n, EVP_sha1(), NULL) || n != 20) return SL_EINVAL;
  sl_hex(md, n, s->sha1);
  s->text = text;
  return 0;
}

int sl_redis_noscript(const redisReply *reply) {
  return reply && reply->type == REDIS_REPLY_ERROR && reply->str &&
         strncmp(reply->str, "NOSCRIPT", 8) == 0;
}

int sl__redis_script_argv(const sl_redis_script *s, int sha, int nkeys, int argc, const char **argv,
                          const size_t *lens, char *nk, size_t nklen, const char **out,
                          size_t *outlens) {
  if (!s || nkeys < 0 || nkeys > argc || argc < 0 || argc > SL__REDIS_SCRIPT_MAX_ARGS)
    return SL_EINVAL;
  if (nklen < 3) return SL_EINVAL;
  _Static_assert(SL__REDIS_SCRIPT_MAX_ARGS < 100, "nkeys has at most two digits");
  /* nkeys <= SL__REDIS_SCRIPT_MAX_ARGS < 100: by hand, not snprintf (per
   * message on a stage's loop) */
  int d = 0;
  if (nkeys >= 10) nk[d++] = (char)('0' + nkeys / 10);
  nk[d++] = (char)('0' + nkeys % 10);
  nk[d] = '\0';
  out[0] = sha ? "EVALSHA" : "EVAL";
  out[1] = sha ? s->sha1 : s->text;
  out[2] = nk;
  outlens[0] = strlen(out[0]);
  outlens[1] = strlen(out[1]);
  outlens[2] = strlen(nk);
  for (int i = 0; i < argc; i++) {
    out[3 + i] = argv[i];
    outlens[3 + i] = lens ? lens[i] : strlen(argv[i]);
  }
  return 0;
}

redisReply *sl_redis_eval(sl_redis *r, const sl_redis_script *s, int nkeys, int argc,
                          const char **argv, const size_t *lens, char *err, size_t errlen) {
  const char *a[3 + SL__REDIS_SCRIPT_MAX_ARGS];
  size_t l[3 + SL__REDIS_SCRIPT_MAX_ARGS];
  char nk[16];
  if (!r || sl__redis_script_argv(s, 1, nkeys, argc, argv, lens, nk, sizeof nk, a, l) != 0) {
    snprintf(err, errlen, "redis: bad script call");
    return NULL;
  }
  redisReply *rep = sl_redis_argv(r, 3 + argc, a, l, err, errlen);
  if (!sl_redis_noscript(rep)) return rep;
  freeReplyObject(rep); /* Redis does not know it (yet): send its text */
  sl__redis_script_argv(s, 0, nkeys, argc, argv, lens, nk, sizeof nk, a, l);
  return sl_redis_argv(r, 3 + argc, a, l, err, errlen);
}

redisReply *sl_redis_cmd(sl_redis *r, char *err, size_t errlen, const char *fmt, ...) {
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof line) {
    snprintf(err, errlen, "redis command too long");
    return NULL;
  }
  const char *argv[32];
  size_t lens[32];
  int argc = 0;
  char *save = NULL;
  for (char *t = strtok_r(line, " ", &save); t && argc < 32; t = strtok_r(NULL, " ", &save)) {
    argv[argc] = t;
    lens[argc++] = strlen(t);
  }
  if (argc == 0) {
    snprintf(err, errlen, "empty redis command");
    return NULL;
  }
  return sl_redis_argv(r, argc, argv, lens, err, errlen);
}

/* sl_redis_check of a cluster: a seed answers CLUSTER SLOTS, which covers
 * every slot. */
static int cl_check(sl_redis *r, char *err, size_t errlen) {
  if (cl_refresh(r, -1, err, errlen) != 0) return r->cl->refused ? SL_ECONFIG : SL_EUNAVAIL;
  if (r->cl->m.covered == 16384) return 0;
  snprintf(err, errlen, "redis cluster %s:%d: CLUSTER SLOTS covers %d of the 16384 slots",
           r->a.host, r->a.port, r->cl->m.covered);
  return SL_EUNAVAIL;
}

int sl_redis_check(const char *url, char *err, size_t errlen) {
  sl_redis *r = NULL;
  if (sl_redis_new(&r, url) != 0) {
    snprintf(err, errlen,
             "redis.url is not redis[s]://[user:password@]host[:port][/db] or "
             "redis[s]+cluster://[user:password@]host:port,host:port,...");
    return SL_ECONFIG;
  }
  if (r->cl) {
    int crc = cl_check(r, err, errlen);
    sl_redis_free(r);
    return crc;
  }
  int rc = connect_(r, err, errlen);
  if (rc == 0) {
    const char *av[] = {"PING"};
    size_t lens[] = {4};
    char why[512];
    redisReply *rep = raw(r, 1, av, lens, why, sizeof why);
    if (!rep) {
      snprintf(err, errlen, "redis %s:%d: %s", r->a.host, r->a.port, why);
      rc = SL_EUNAVAIL;
    } else {
      if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "redis %s:%d: PING: %s", r->a.host, r->a.port, rep->str);
        rc = SL_ECONFIG; /* NOAUTH: a password is needed */
      }
      freeReplyObject(rep);
    }
  } else {
    rc = r->refused ? SL_ECONFIG : SL_EUNAVAIL;
  }
  sl_redis_free(r);
  return rc;
}

static void *tls_create(void *arg, char *err, unsigned long errlen) {
  sl_redis *r = NULL;
  int rc = sl_redis_new(&r, arg);
  if (rc) snprintf(err, errlen, "redis.url: %s", sl_strerror(rc));
  return r;
}

static void tls_destroy(void *v) { sl_redis_free(v); }

int sl_redis_tls_new(sl_tls **out, const char *url) {
  if (!url) return SL_EINVAL;
  sl_redis_addr a;
  if (sl_redis_addr_parse(url, &a) != 0) return SL_EINVAL;
  return sl_tls_new(out, tls_create, tls_destroy, (void *)url);
}

const char *sl_redis_hash_field(const redisReply *rep, const char *name) {
  if (!rep || rep->type != REDIS_REPLY_ARRAY || !name) return NULL;
  for (size_t i = 0; i + 1 < rep->elements; i += 2)
    if (rep->element[i]->str && strcmp(rep->element[i]->str, name) == 0)
      return rep->element[i + 1]->str;
  return NULL;
}
