/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_http.c — HTTP/1.1 server (see sl_http.h).
 *
 * Each connection owns: a uv_tcp_t, an http_parser, one timer, a bounded
 * header arena (URL + header names/values, NUL-separated), a body buffer that
 * grows up to max_body, and a buffer of bytes received but not yet parsed.
 * Parsing stops (http_parser_pause) at the end of each message; the rest of
 * the input waits until the handler has answered. Errors found by the parser
 * (bad syntax, limits) are answered with a JSON error and the connection is
 * closed.
 *
 * The one timer is the connection's deadline of the moment: the first byte
 * (first_byte_timeout_ms after accept), the whole request
 * (request_timeout_ms), idle between requests (idle_timeout_ms), or the
 * peer taking what was written (write_timeout_ms: a response, or a stream's
 * oldest pending write, still not in the kernel then closes the connection,
 * so a client that never reads cannot hold it). Open connections are
 * counted per client address in a small hash table (at most one entry per
 * open connection); beyond max_per_address a new one is refused with 429 as
 * cheaply as the 503 beyond max_connections.
 *
 * A detached server (sl_http_internal.h, for the fuzz target) has no
 * listening socket: sl__http_feed() pushes bytes through the same read path
 * (on_alloc/on_read) and takes responses from sl_http_respond() instead of
 * uv_write; everything else is shared.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_http.h"
#include "sluice/sl_trace.h"
#include "sl_http_internal.h"
#include "sluice/sl_err.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"

#include <http_parser.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_HEADERS 48
#define ADDR_BUCKETS 256

#define H(field) offsetof(sl_http_conf, field)
const sl_conf_entry sl_http_conf_table[] = {
    {"http.first_byte_timeout_ms", SL_CONF_INT, "10000", H(first_byte_timeout_ms),
     "a new connection that sends nothing for this long is closed (never longer than the idle "
     "timeout between requests, 60 s)",
     0},
    {"http.write_timeout_ms", SL_CONF_INT, "30000", H(write_timeout_ms),
     "a response the client has not taken within this long (for an event stream: its oldest "
     "pending write) closes the connection, so a client that never reads cannot hold one",
     0},
    {"http.max_connections_per_address", SL_CONF_INT, "256", H(max_connections_per_address),
     "connections open at once from one client address; more get 429 "
     "too_many_connections_from_address and are closed (sluice_http_refused_total"
     "{reason=\"per_address\"}); behind a proxy every client has the proxy's address: raise it "
     "or set 0 (no cap)",
     0},
};
const size_t sl_http_conf_table_len = sizeof sl_http_conf_table / sizeof sl_http_conf_table[0];

void sl_http_limits_from_conf(sl_http_limits *lim, const sl_http_conf *c) {
  if (!lim || !c) return;
  if (c->first_byte_timeout_ms > 0 && c->first_byte_timeout_ms < 3600000)
    lim->first_byte_timeout_ms = (unsigned)c->first_byte_timeout_ms;
  if (c->write_timeout_ms > 0 && c->write_timeout_ms < 3600000)
    lim->write_timeout_ms = (unsigned)c->write_timeout_ms;
  lim->max_per_address =
      c->max_connections_per_address > 0 ? (size_t)c->max_connections_per_address : 0;
}

typedef struct conn conn;
typedef struct wreq wreq;

/* Open connections from one client address (family byte + 16 address
 * bytes); freed when the last one closes. */
typedef struct addr_slot addr_slot;
struct addr_slot {
  addr_slot *next;
  unsigned char key[17];
  size_t n;
};

struct sl_http_req {
  conn *c;
  char method[16];
  const char *path, *query;
  size_t nh;
  const char *hname[MAX_HEADERS], *hval[MAX_HEADERS];
  int64_t start_ns; /* when it was handed to the handler (its span's start) */
};

struct sl_http_server {
  uv_loop_t *loop;
  uv_tcp_t tcp;
  sl_http_limits lim;
  sl_http_handler_fn fn;
  void *ud;
  conn *conns;   /* doubly linked list of open connections */
  size_t nconns; /* counted connections in conns (not the refused ones) */
  int port;
  int closing;
  int draining; /* sl_http_server_drain: freed when the last conn closes */
  int listener_closed;
  char cors_origins[512]; /* "" = CORS off */
  char cors_methods[128], cors_headers[256], cors_expose[128];
  int detached;          /* no socket: sl__http_feed() (sl_http_internal.h) */
  sl__http_sink_fn sink; /* detached: where responses go */
  void *sink_ud;
  addr_slot *addrs[ADDR_BUCKETS]; /* open connections by client address */
  sl_metric *m_refused_addr, *m_refused_max, *m_write_timeout;
};

struct conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  http_parser parser;
  sl_http_server *srv;
  conn *prev, *next;
  char *arena; /* max_header bytes */
  size_t arena_len;
  int last_was_value; /* header callback state */
  char *body;
  size_t body_len, body_cap;
  char *pending; /* unparsed input */
  size_t pending_len, pending_cap;
  sl_http_req req;
  int in_request; /* headers begun */
  int busy;       /* handler has the request */
  int keep_alive;
  int closing;
  int error_status;      /* limit hit while parsing */
  const char *error_msg; /* why, when not the parser's own error or a limit */
  int nclose;            /* handles still to close */
  int counted;           /* one of srv->nconns */
  addr_slot *addr;       /* its client address's count (counted connections) */
  size_t nwrites;        /* stream writes not yet taken by the kernel */
  uv_shutdown_t shut;    /* lingering close of a refused connection */
  wreq *held;            /* detached: a response "being written" */
  /* a streamed response (sl_http_stream_start); the stream is the conn */
  sl_http_stream_closed_fn on_closed; /* NULL once run */
  void *stream_ud;
  size_t max_queued;
  int streaming;
};

static http_parser_settings settings;

static void cors_headers(const sl_http_server *srv, const sl_http_req *req, int preflight,
                         char *out, size_t len);

/* ---------- closing ---------- */

static void conn_free(conn *c) {
  free(c->arena);
  free(c->body);
  free(c->pending);
  free(c);
}

static void on_handle_closed(uv_handle_t *h) {
  conn *c = h->data;
  if (--c->nclose > 0) return;
  /* a handler still holding the request frees it in sl_http_respond() */
  if (!c->busy) conn_free(c);
}

static void drained_maybe_free(sl_http_server *srv);

static size_t addr_hash(const unsigned char *key) {
  size_t h = 2166136261u; /* FNV-1a */
  for (int i = 0; i < 17; i++) h = (h ^ key[i]) * 16777619u;
  return h % ADDR_BUCKETS;
}

/* The peer's address as a table key. 0, or -1 when it has none. */
static int peer_key(conn *c, unsigned char key[17]) {
  struct sockaddr_storage ss;
  int sl = sizeof ss;
  memset(key, 0, 17);
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sl) != 0) return -1;
  if (ss.ss_family == AF_INET) {
    key[0] = 4;
    memcpy(key + 1, &((struct sockaddr_in *)&ss)->sin_addr, 4);
  } else if (ss.ss_family == AF_INET6) {
    key[0] = 6;
    memcpy(key + 1, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
  } else {
    return -1;
  }
  return 0;
}

/* Counts c against its address unless that has max_per_address open
 * already. 0, or -1 when refused (or out of memory). */
static int addr_take(sl_http_server *srv, conn *c) {
  unsigned char key[17];
  if (peer_key(c, key) != 0) return 0; /* no address to count it against */
  size_t b = addr_hash(key);
  addr_slot *a = srv->addrs[b];
  while (a && memcmp(a->key, key, sizeof key) != 0) a = a->next;
  if (a && srv->lim.max_per_address && a->n >= srv->lim.max_per_address) return -1;
  if (!a) {
    if (!(a = calloc(1, sizeof *a))) return -1;
    memcpy(a->key, key, sizeof key);
    a->next = srv->addrs[b];
    srv->addrs[b] = a;
  }
  a->n++;
  c->addr = a;
  return 0;
}

static void addr_release(sl_http_server *srv, conn *c) {
  addr_slot *a = c->addr;
  c->addr = NULL;
  if (!a || --a->n > 0) return;
  for (addr_slot **pp = &srv->addrs[addr_hash(a->key)]; *pp; pp = &(*pp)->next)
    if (*pp == a) {
      *pp = a->next;
      free(a);
      return;
    }
}

static void conn_close(conn *c) {
  if (c->closing) return;
  c->closing = 1;
  if (c->counted && c->srv) c->srv->nconns--;
  c->counted = 0;
  if (c->srv) addr_release(c->srv, c);
  if (c->prev)
    c->prev->next = c->next;
  else if (c->srv)
    c->srv->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  if (c->srv && c->srv->draining) {
    sl_http_server *srv = c->srv;
    c->srv = NULL; /* nothing of a closing connection reads it again */
    drained_maybe_free(srv);
  }
  if (c->streaming) {
    c->busy = 0; /* no handler holds a request: freed when the handles close */
    sl_http_stream_closed_fn fn = c->on_closed;
    c->on_closed = NULL;
    if (fn) fn((sl_http_stream *)(void *)c, c->stream_ud);
  }
  c->nclose = 2;
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, on_handle_closed);
  uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void fail_parse(conn *c);

/* Idle between requests: close quietly. Part of a request received but not
 * all of it in time (a slow client trickling headers or body): 408, then
 * close. */
static void on_timeout(uv_timer_t *t) {
  conn *c = t->data;
  if (c->busy) return; /* the handler owns it; it will answer */
  if (c->in_request || c->pending_len) {
    c->error_status = 408;
    fail_parse(c);
    return;
  }
  conn_close(c);
}

static void arm_timer(conn *c, unsigned ms) { uv_timer_start(&c->timer, on_timeout, ms, 0); }

/* What was written has not been taken by the peer in write_timeout_ms. */
static void on_write_timeout(uv_timer_t *t) {
  conn *c = t->data;
  if (c->srv) sl_metric_add(c->srv->m_write_timeout, 1);
  conn_close(c);
}

static void arm_write_timer(conn *c) {
  uv_timer_start(&c->timer, on_write_timeout, c->srv->lim.write_timeout_ms, 0);
}

/* ---------- parser callbacks ---------- */

static int arena_put(conn *c, const char *at, size_t len, int new_item) {
  /* new_item: terminate the previous item and start a new one. A NUL byte
   * (http-parser lets it through in header values) would split an item in
   * the arena and shift every name/value pair after it: refused. */
  if (len && memchr(at, '\0', len)) {
    c->error_status = 400;
    c->error_msg = "NUL byte in the request line or a header";
    return -1;
  }
  size_t need = len + (new_item ? 1 : 0);
  if (c->arena_len + need + 1 > c->srv->lim.max_header) {
    c->error_status = 431;
    return -1;
  }
  if (new_item && c->arena_len) c->arena[c->arena_len++] = '\0';
  memcpy(c->arena + c->arena_len, at, len);
  c->arena_len += len;
  c->arena[c->arena_len] = '\0';
  return 0;
}

static int on_message_begin(http_parser *p) {
  conn *c = p->data;
  c->in_request = 1;
  c->arena_len = 0;
  c->body_len = 0;
  if (c->body) c->body[0] = '\0'; /* not the previous request's body */
  c->last_was_value = 1;
  memset(&c->req, 0, sizeof c->req);
  c->req.c = c;
  arm_timer(c, c->srv->lim.request_timeout_ms);
  return 0;
}

/* The arena holds: URL \0 name \0 value \0 name \0 value ... Offsets are
 * resolved into pointers in on_headers_complete. */
static int on_url(http_parser *p, const char *at, size_t len) {
  return arena_put(p->data, at, len, 0);
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  int start = c->last_was_value;
  c->last_was_value = 0;
  return arena_put(c, at, len, start);
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  int start = !c->last_was_value;
  c->last_was_value = 1;
  return arena_put(c, at, len, start);
}

static int on_headers_complete(http_parser *p) {
  conn *c = p->data;
  sl_http_req *r = &c->req;
  /* a header with an empty value produces no value callback: pad it */
  if (!c->last_was_value && arena_put(c, "", 0, 1)) return -1;
  if (c->arena_len + 1 > c->srv->lim.max_header) {
    c->error_status = 431;
    return -1;
  }
  c->arena[c->arena_len++] = '\0';
  char *s = c->arena, *end = c->arena + c->arena_len;
  char *url = s;
  s += strlen(s) + 1;
  while (s < end) {
    char *name = s;
    s += strlen(s) + 1;
    if (s >= end) break; /* cannot happen (names and values alternate); never read past end */
    char *val = s;
    s += strlen(s) + 1;
    if (r->nh >= MAX_HEADERS) {
      c->error_status = 431;
      return -1;
    }
    r->hname[r->nh] = name;
    r->hval[r->nh++] = val;
  }
  char *q = strchr(url, '?');
  if (q) *q++ = '\0';
  r->path = url;
  r->query = q ? q : "";
  snprintf(r->method, sizeof r->method, "%s", http_method_str(p->method));
  if (p->content_length != ULLONG_MAX && p->content_length > c->srv->lim.max_body) {
    c->error_status = 413;
    return -1;
  }
  return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  if (c->body_len + len > c->srv->lim.max_body) {
    c->error_status = 413;
    return -1;
  }
  if (c->body_len + len + 1 > c->body_cap) {
    size_t cap = c->body_cap ? c->body_cap : 4096;
    while (cap < c->body_len + len + 1) cap *= 2;
    char *nb = realloc(c->body, cap);
    if (!nb) {
      c->error_status = 500;
      return -1;
    }
    c->body = nb;
    c->body_cap = cap;
  }
  memcpy(c->body + c->body_len, at, len);
  c->body_len += len;
  c->body[c->body_len] = '\0';
  return 0;
}

static int on_message_complete(http_parser *p) {
  conn *c = p->data;
  c->keep_alive = http_should_keep_alive(p);
  c->busy = 1;
  c->in_request = 0;
  uv_timer_stop(&c->timer);
  http_parser_pause(p, 1);
  return 0;
}

/* ---------- reading and dispatch ---------- */

static void on_alloc(uv_handle_t *h, size_t sugg, uv_buf_t *buf) {
  conn *c = h->data;
  (void)sugg;
  size_t want = 16384;
  if (c->pending_cap - c->pending_len < want) {
    size_t cap = c->pending_len + want;
    char *np = realloc(c->pending, cap);
    if (!np) {
      buf->base = NULL;
      buf->len = 0;
      return;
    }
    c->pending = np;
    c->pending_cap = cap;
  }
  buf->base = c->pending + c->pending_len;
  buf->len = c->pending_cap - c->pending_len;
}

static void fail_parse(conn *c) {
  int st = c->error_status ? c->error_status : 400;
  const char *code = st == 413   ? "body_too_large"
                     : st == 431 ? "headers_too_large"
                     : st == 408 ? "request_timeout"
                     : st == 503 ? "too_many_connections"
                     : st == 429 ? "too_many_connections_from_address"
                                 : "bad_request";
  const char *msg = st == 413      ? "request body exceeds the limit"
                    : st == 431    ? "request headers exceed the limit"
                    : st == 408    ? "the request did not arrive in time"
                    : st == 503    ? "the server has too many open connections; retry"
                    : st == 429    ? "too many open connections from this address; retry"
                    : c->error_msg ? c->error_msg
                                   : http_errno_description(HTTP_PARSER_ERRNO(&c->parser));
  c->keep_alive = 0;
  c->busy = 1;
  c->req.c = c;
  uv_read_stop((uv_stream_t *)&c->tcp);
  sl_http_respond_error(&c->req, st, code, msg,
                        st == 503 || st == 429 ? "Retry-After: 1\r\n" : NULL);
}

/* Parses buffered input; dispatches at most one complete request. */
static void drive(conn *c) {
  if (c->busy || c->closing || !c->pending_len) return;
  size_t n = http_parser_execute(&c->parser, &settings, c->pending, c->pending_len);
  enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
  if (e != HPE_OK && e != HPE_PAUSED) {
    fail_parse(c);
    return;
  }
  /* with HPE_PAUSED the parser stopped after message_complete; n excludes
   * the rest */
  memmove(c->pending, c->pending + n, c->pending_len - n);
  c->pending_len -= n;
  if (e == HPE_PAUSED) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    if (c->srv->cors_origins[0] && strcmp(c->req.method, "OPTIONS") == 0 &&
        sl_http_req_header(&c->req, "Access-Control-Request-Method")) {
      /* a CORS preflight: answered here, allowed origin or not */
      char cors[768];
      cors_headers(c->srv, &c->req, 1, cors, sizeof cors);
      sl_http_respond(&c->req, 204, NULL, cors[0] ? cors : NULL, NULL, 0);
      return;
    }
    if (c->srv->lim.trace_requests) c->req.start_ns = sl_trace_now_ns();
    c->srv->fn(&c->req, c->srv->ud);
  } else if (c->pending_len > c->srv->lim.max_header + c->srv->lim.max_body) {
    c->error_status = 413;
    fail_parse(c);
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn *c = s->data;
  (void)buf;
  if (nread < 0) {
    conn_close(c);
    return;
  }
  if (nread == 0) return;
  if (!c->in_request && !c->busy) arm_timer(c, c->srv->lim.request_timeout_ms);
  c->pending_len += (size_t)nread;
  drive(c);
}

/* A connection refused for being over a cap: its 503 or 429 is out. Half-close
 * and read (discarding) until the peer closes or 1 s passes, so that the
 * request it may already have sent does not turn the close into a reset
 * that destroys the 503 before the client reads it. */
static void on_linger_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn *c = s->data;
  (void)buf;
  c->pending_len = 0;
  if (nread < 0) conn_close(c);
}

static void on_linger_timeout(uv_timer_t *t) { conn_close(t->data); }

static void on_shutdown(uv_shutdown_t *sh, int status) {
  (void)sh;
  (void)status; /* on failure the read sees the error and closes */
}

static void on_discard_alloc(uv_handle_t *h, size_t sugg, uv_buf_t *buf);

static void linger_close(conn *c) {
  c->pending_len = 0;
  uv_timer_start(&c->timer, on_linger_timeout, 1000, 0);
  if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shutdown) != 0 ||
      uv_read_start((uv_stream_t *)&c->tcp, on_discard_alloc, on_linger_read) != 0)
    conn_close(c);
}

struct wreq {
  uv_write_t w;
  conn *c;
  int close_after;
  char data[];
};

static void on_written(uv_write_t *w, int status) {
  wreq *r = (wreq *)w;
  conn *c = r->c;
  int close_after = r->close_after || status < 0;
  free(r);
  c->busy = 0;            /* the response is out: the connection owns itself again */
  if (c->closing) return; /* close callbacks run after this one and free c */
  if (close_after) {
    if ((c->error_status == 503 || c->error_status == 429) && status == 0)
      linger_close(c);
    else
      conn_close(c);
    return;
  }
  http_parser_pause(&c->parser, 0);
  arm_timer(c, c->srv->lim.idle_timeout_ms);
  if (!c->srv->detached && uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
    conn_close(c);
    return;
  }
  drive(c); /* a pipelined request may already be buffered */
}

static const char *reason(int st) {
  switch (st) {
  case 200:
    return "OK";
  case 201:
    return "Created";
  case 202:
    return "Accepted";
  case 204:
    return "No Content";
  case 304:
    return "Not Modified";
  case 400:
    return "Bad Request";
  case 401:
    return "Unauthorized";
  case 403:
    return "Forbidden";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 408:
    return "Request Timeout";
  case 409:
    return "Conflict";
  case 413:
    return "Payload Too Large";
  case 415:
    return "Unsupported Media Type";
  case 422:
    return "Unprocessable Entity";
  case 429:
    return "Too Many Requests";
  case 431:
    return "Request Header Fields Too Large";
  case 500:
    return "Internal Server Error";
  case 502:
    return "Bad Gateway";
  case 503:
    return "Service Unavailable";
  default:
    return "Status";
  }
}

/* Is origin (exact text of the Origin header) in the allowed list? */
static int origin_allowed(const sl_http_server *srv, const char *origin) {
  if (!srv->cors_origins[0] || !origin || !*origin) return 0;
  if (strcmp(srv->cors_origins, "*") == 0) return 1;
  size_t ol = strlen(origin);
  for (const char *p = srv->cors_origins; *p;) {
    while (*p == ',' || *p == ' ') p++;
    size_t n = strcspn(p, ", ");
    if (n == ol && strncmp(p, origin, n) == 0) return 1;
    p += n;
  }
  return 0;
}

/* The CORS header lines for this request ("" when none apply). A response
 * gets Allow-Origin, Vary and Expose-Headers; a preflight's extra lines are
 * only Allow-Methods, Allow-Headers and Max-Age (sl_http_respond adds the
 * others, so Allow-Origin is sent once: browsers refuse it twice). */
static void cors_headers(const sl_http_server *srv, const sl_http_req *req, int preflight,
                         char *out, size_t len) {
  out[0] = '\0';
  const char *origin = sl_http_req_header(req, "Origin");
  if (!origin_allowed(srv, origin)) return;
  if (preflight) {
    snprintf(out, len,
             "Access-Control-Allow-Methods: %s\r\nAccess-Control-Allow-Headers: %s\r\n"
             "Access-Control-Max-Age: 600\r\n",
             srv->cors_methods, srv->cors_headers);
    return;
  }
  int n = snprintf(out, len, "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\n", origin);
  if (n < 0 || (size_t)n >= len) {
    out[0] = '\0';
    return;
  }
  if (srv->cors_expose[0])
    snprintf(out + n, len - (size_t)n, "Access-Control-Expose-Headers: %s\r\n", srv->cors_expose);
}

int sl_http_server_set_cors(sl_http_server *srv, const char *origins, const char *methods,
                            const char *headers, const char *expose) {
  if (!srv) return SL_EINVAL;
  if ((origins && strlen(origins) >= sizeof srv->cors_origins) ||
      (methods && strlen(methods) >= sizeof srv->cors_methods) ||
      (headers && strlen(headers) >= sizeof srv->cors_headers) ||
      (expose && strlen(expose) >= sizeof srv->cors_expose))
    return SL_ETOOBIG;
  snprintf(srv->cors_origins, sizeof srv->cors_origins, "%s", origins ? origins : "");
  snprintf(srv->cors_methods, sizeof srv->cors_methods, "%s", methods ? methods : "GET, POST");
  snprintf(srv->cors_headers, sizeof srv->cors_headers, "%s",
           headers ? headers : "Content-Type, Authorization");
  snprintf(srv->cors_expose, sizeof srv->cors_expose, "%s", expose ? expose : "");
  return 0;
}

int sl_http_req_peer(const sl_http_req *req, char *buf, size_t len) {
  struct sockaddr_storage ss;
  int sl = sizeof ss;
  if (!req || !req->c || len == 0) return SL_EINVAL;
  if (uv_tcp_getpeername(&req->c->tcp, (struct sockaddr *)&ss, &sl) != 0) return SL_EINVAL;
  int rc = ss.ss_family == AF_INET6 ? uv_ip6_name((const struct sockaddr_in6 *)&ss, buf, len)
                                    : uv_ip4_name((const struct sockaddr_in *)&ss, buf, len);
  return rc == 0 ? 0 : SL_EINVAL;
}

/* req's server span, when it came with a sampled traceparent and the server
 * traces requests (sl_http_limits.trace_requests) */
static void trace_request(const conn *c, const sl_http_req *req, int status, int stream) {
  const char *tp = c->srv->lim.trace_requests ? sl_http_req_header(req, "traceparent") : NULL;
  sl_trace_ctx parent, own;
  if (!tp || !sl_trace_enabled() || sl_trace_parse(tp, strlen(tp), &parent) != 0 ||
      !sl_trace_sampled(&parent) || sl_trace_child(&parent, &own) != 0)
    return;
  char name[48];
  snprintf(name, sizeof name, "HTTP %s", req->method);
  sl_span s;
  sl_span_begin(&s, &own, parent.span_id, name, SL_SPAN_SERVER, req->start_ns);
  sl_span_str(&s, "http.request.method", req->method);
  sl_span_str(&s, "url.path", req->path ? req->path : "");
  sl_span_int(&s, "http.response.status_code", status);
  if (stream) sl_span_str(&s, "sluice.stream", "started");
  if (status >= 500) sl_span_error(&s, reason(status));
  sl_span_end(&s, 0);
}

int sl_http_respond(sl_http_req *req, int status, const char *ctype, const char *extra,
                    const void *body, size_t len) {
  if (!req || !req->c) return SL_EINVAL;
  conn *c = req->c;
  trace_request(c, req, status, 0);
  req->c = NULL;
  if (c->closing) {
    c->busy = 0;
    if (c->nclose == 0) conn_free(c);
    return 0;
  }
  char head[1536], cors[768];
  int keep = c->keep_alive && !c->srv->closing;
  cors_headers(c->srv, req, 0, cors, sizeof cors);
  int hl = snprintf(head, sizeof head,
                    "HTTP/1.1 %d %s\r\nContent-Length: %zu\r\n%s%s%sConnection: %s\r\n%s", status,
                    reason(status), len, ctype ? "Content-Type: " : "", ctype ? ctype : "",
                    ctype ? "\r\n" : "", keep ? "keep-alive" : "close", cors);
  if (hl < 0 || (size_t)hl >= sizeof head) { /* only an absurd content type gets here */
    conn_close(c);
    return SL_ETOOBIG;
  }
  size_t el = extra ? strlen(extra) : 0;
  wreq *w = malloc(sizeof *w + (size_t)hl + el + 2 + len);
  if (!w) {
    conn_close(c);
    return SL_ENOMEM;
  }
  char *p = w->data;
  memcpy(p, head, (size_t)hl);
  p += hl;
  if (el) memcpy(p, extra, el), p += el;
  memcpy(p, "\r\n", 2), p += 2;
  if (len) memcpy(p, body, len), p += len;
  w->c = c;
  w->close_after = !keep;
  uv_buf_t b = uv_buf_init(w->data, (unsigned)(p - w->data));
  if (c->srv->detached) { /* sl__http_feed completes it, as uv_write would later */
    if (c->srv->sink) c->srv->sink(b.base, b.len, c->srv->sink_ud);
    c->held = w;
    return 0;
  }
  if (uv_write(&w->w, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
    free(w);
    conn_close(c);
    return 0;
  }
  arm_write_timer(c); /* on_written re-arms or stops it */
  return 0;
}

int sl_http_respond_error(sl_http_req *req, int status, const char *code, const char *message,
                          const char *extra) {
  char body[1024];
  size_t p = 0;
  p += (size_t)snprintf(body, sizeof body, "{\"error\":{\"code\":\"");
  sl_json_escape(body, sizeof body - 64, &p, code);
  p += (size_t)snprintf(body + p, sizeof body - p, "\",\"message\":\"");
  sl_json_escape(body, sizeof body - 8, &p, message);
  p += (size_t)snprintf(body + p, sizeof body - p, "\"}}\n");
  return sl_http_respond(req, status, "application/json", extra, body, p);
}

/* ---------- streamed responses ---------- */

static sl_http_stream *as_stream(conn *c) { return (sl_http_stream *)(void *)c; }
static conn *of_stream(sl_http_stream *s) { return (conn *)(void *)s; }

/* A stream's connection is read only to notice the peer closing: what it
 * sends goes into one small buffer per thread and is dropped. */
static _Thread_local char discard_buf[512]; /* the loop thread's */

static void on_discard_alloc(uv_handle_t *h, size_t sugg, uv_buf_t *buf) {
  (void)h;
  (void)sugg;
  *buf = uv_buf_init(discard_buf, sizeof discard_buf);
}

static void on_discard_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  if (nread < 0) conn_close(s->data);
}

static void on_stream_written(uv_write_t *w, int status) {
  wreq *r = (wreq *)w;
  conn *c = r->c;
  free(r);
  if (c->nwrites) c->nwrites--;
  if (c->closing) return;
  if (status < 0) {
    conn_close(c);
    return;
  }
  /* the peer took this one: the next oldest gets its own write_timeout_ms */
  if (c->nwrites)
    arm_write_timer(c);
  else
    uv_timer_stop(&c->timer);
}

int sl_http_stream_write(sl_http_stream *s, const void *data, size_t len) {
  conn *c = of_stream(s);
  if (!c || c->closing) return SL_EINVAL;
  if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > c->max_queued) {
    conn_close(c);
    return SL_ETOOBIG;
  }
  wreq *w = malloc(sizeof *w + len);
  if (!w) {
    conn_close(c);
    return SL_ENOMEM;
  }
  memcpy(w->data, data, len);
  w->c = c;
  w->close_after = 0;
  uv_buf_t b = uv_buf_init(w->data, (unsigned)len);
  if (uv_write(&w->w, (uv_stream_t *)&c->tcp, &b, 1, on_stream_written) != 0) {
    free(w);
    conn_close(c);
    return SL_EINVAL;
  }
  if (c->nwrites++ == 0) arm_write_timer(c);
  return 0;
}

void sl_http_stream_close(sl_http_stream *s) {
  if (s) conn_close(of_stream(s));
}

int sl_http_stream_start(sl_http_req *req, int status, const char *ctype, const char *extra,
                         size_t max_queued, sl_http_stream_closed_fn on_closed, void *ud,
                         sl_http_stream **out) {
  if (!req || !req->c || !out || req->c->srv->detached) return SL_EINVAL;
  conn *c = req->c;
  trace_request(c, req, status, 1);
  if (c->closing) {
    req->c = NULL;
    c->busy = 0;
    if (c->nclose == 0) conn_free(c);
    return SL_EINVAL;
  }
  char head[1536], cors[768];
  cors_headers(c->srv, req, 0, cors, sizeof cors);
  int hl = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\n%s%s%sConnection: close\r\n%s%s\r\n",
                    status, reason(status), ctype ? "Content-Type: " : "", ctype ? ctype : "",
                    ctype ? "\r\n" : "", cors, extra ? extra : "");
  req->c = NULL;
  /* the request is over: its buffers go, the connection stays */
  free(c->arena);
  free(c->body);
  free(c->pending);
  c->arena = c->body = c->pending = NULL;
  c->arena_len = c->body_len = c->body_cap = c->pending_len = c->pending_cap = 0;
  c->streaming = 1;
  c->on_closed = on_closed;
  c->stream_ud = ud;
  c->max_queued = max_queued;
  uv_timer_stop(&c->timer);
  *out = as_stream(c);
  if (hl < 0 || (size_t)hl >= sizeof head) {
    c->on_closed = NULL; /* never started, as far as the caller knows */
    conn_close(c);
    return SL_ENOMEM;
  }
  if (uv_read_start((uv_stream_t *)&c->tcp, on_discard_alloc, on_discard_read) != 0) {
    c->on_closed = NULL;
    conn_close(c);
    return SL_ENOMEM;
  }
  c->on_closed = NULL; /* a failed first write is the caller's error, not a callback */
  int rc = sl_http_stream_write(as_stream(c), head, (size_t)hl);
  c->on_closed = on_closed;
  return rc ? SL_ENOMEM : 0;
}

/* ---------- accepting ---------- */

/* A new connection on srv's list, its handles initialised (not connected),
 * without its header arena yet (conn_arena): a refused connection never
 * gets one. */
static conn *conn_new(sl_http_server *srv) {
  conn *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->srv = srv;
  uv_tcp_init(srv->loop, &c->tcp);
  uv_timer_init(srv->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
  c->next = srv->conns;
  if (srv->conns) srv->conns->prev = c;
  srv->conns = c;
  return c;
}

/* The header arena of a connection that will read requests. 0 or -1. */
static int conn_arena(conn *c) {
  c->arena = malloc(c->srv->lim.max_header + 1);
  return c->arena ? 0 : -1;
}

static void on_connection(uv_stream_t *ls, int status) {
  sl_http_server *srv = ls->data;
  if (status < 0) return;
  conn *c = conn_new(srv);
  if (!c) return;
  if (uv_accept(ls, (uv_stream_t *)&c->tcp) != 0) {
    conn_close(c);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  /* a refused connection costs its conn and handles only: no arena, no
   * read buffer (its lingering reads go to the discard buffer) */
  if (srv->nconns >= srv->lim.max_connections) {
    /* over the cap: answer 503 without reading and close once it is out
     * (the request, if any, is never parsed) */
    sl_metric_add(srv->m_refused_max, 1);
    c->error_status = 503;
    fail_parse(c);
    return;
  }
  if (addr_take(srv, c) != 0) { /* over its address's cap: 429, likewise */
    sl_metric_add(srv->m_refused_addr, 1);
    c->error_status = 429;
    fail_parse(c);
    return;
  }
  c->counted = 1;
  srv->nconns++;
  if (conn_arena(c) != 0 || uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
    conn_close(c);
    return;
  }
  arm_timer(c, srv->lim.first_byte_timeout_ms);
}

static void on_srv_closed(uv_handle_t *h) { free(h->data); }

/* a draining server is freed once its listener is closed and its last
 * connection is gone */
static void drained_maybe_free(sl_http_server *srv) {
  if (srv->listener_closed && !srv->conns) free(srv);
}

static void on_listener_closed(uv_handle_t *h) {
  sl_http_server *srv = h->data;
  srv->listener_closed = 1;
  drained_maybe_free(srv);
}

static void init_settings(void) {
  settings.on_message_begin = on_message_begin;
  settings.on_url = on_url;
  settings.on_header_field = on_header_field;
  settings.on_header_value = on_header_value;
  settings.on_headers_complete = on_headers_complete;
  settings.on_body = on_body;
  settings.on_message_complete = on_message_complete;
}

static void set_limits(sl_http_server *srv, const sl_http_limits *lim) {
  srv->lim.max_body = lim && lim->max_body ? lim->max_body : 1 << 20;
  srv->lim.max_header = lim && lim->max_header ? lim->max_header : 16384;
  srv->lim.request_timeout_ms = lim && lim->request_timeout_ms ? lim->request_timeout_ms : 10000;
  srv->lim.idle_timeout_ms = lim && lim->idle_timeout_ms ? lim->idle_timeout_ms : 60000;
  srv->lim.max_connections = lim && lim->max_connections ? lim->max_connections : 1024;
  srv->lim.first_byte_timeout_ms =
      lim && lim->first_byte_timeout_ms ? lim->first_byte_timeout_ms : 10000;
  if (srv->lim.first_byte_timeout_ms > srv->lim.idle_timeout_ms)
    srv->lim.first_byte_timeout_ms = srv->lim.idle_timeout_ms;
  srv->lim.write_timeout_ms = lim && lim->write_timeout_ms ? lim->write_timeout_ms : 30000;
  srv->lim.max_per_address = lim ? lim->max_per_address : 0;
  srv->lim.trace_requests = lim ? lim->trace_requests : 0;
  srv->m_refused_max =
      sl_metrics_counter("sluice_http_refused_total", "reason=\"max_connections\"",
                         "connections refused on arrival: over max_connections (503) or over "
                         "the per-address cap (429)");
  srv->m_refused_addr =
      sl_metrics_counter("sluice_http_refused_total", "reason=\"per_address\"",
                         "connections refused on arrival: over max_connections (503) or over "
                         "the per-address cap (429)");
  srv->m_write_timeout =
      sl_metrics_counter("sluice_http_write_timeouts_total", NULL,
                         "connections closed because the client did not take a response (or an "
                         "event stream's write) within the write timeout");
}

int sl_http_server_new(sl_http_server **out, uv_loop_t *loop, const char *listen,
                       const sl_http_limits *lim, sl_http_handler_fn fn, void *ud) {
  if (!out || !loop || !listen || !fn) return SL_EINVAL;
  init_settings();

  char host[256];
  const char *colon = strrchr(listen, ':');
  if (!colon || (size_t)(colon - listen) >= sizeof host) return SL_EINVAL;
  memcpy(host, listen, (size_t)(colon - listen));
  host[colon - listen] = '\0';
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end || port < 0 || port > 65535) return SL_EINVAL;
  struct sockaddr_in addr;
  if (uv_ip4_addr(host[0] ? host : "0.0.0.0", (int)port, &addr) != 0) return SL_EINVAL;

  sl_http_server *srv = calloc(1, sizeof *srv);
  if (!srv) return SL_ENOMEM;
  srv->loop = loop;
  srv->fn = fn;
  srv->ud = ud;
  set_limits(srv, lim);
  uv_tcp_init(loop, &srv->tcp);
  srv->tcp.data = srv;
  int rc = uv_tcp_bind(&srv->tcp, (const struct sockaddr *)&addr, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&srv->tcp, 1024, on_connection);
  if (rc != 0) {
    srv->closing = 1;
    /* the handle is inside srv, not at its start: free srv, not the handle */
    uv_close((uv_handle_t *)&srv->tcp, on_srv_closed);
    return rc;
  }
  struct sockaddr_storage ss;
  int sl = sizeof ss;
  uv_tcp_getsockname(&srv->tcp, (struct sockaddr *)&ss, &sl);
  srv->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  *out = srv;
  return 0;
}

int sl_http_server_port(const sl_http_server *srv) { return srv ? srv->port : -1; }

/* ---------- detached servers (sl_http_internal.h) ---------- */

int sl__http_server_new_detached(sl_http_server **out, uv_loop_t *loop, const sl_http_limits *lim,
                                 sl_http_handler_fn fn, void *ud) {
  if (!out || !loop || !fn) return SL_EINVAL;
  init_settings();
  sl_http_server *srv = calloc(1, sizeof *srv);
  if (!srv) return SL_ENOMEM;
  srv->loop = loop;
  srv->fn = fn;
  srv->ud = ud;
  srv->detached = 1;
  set_limits(srv, lim);
  uv_tcp_init(loop, &srv->tcp); /* never bound: sl_http_server_free closes it */
  srv->tcp.data = srv;
  *out = srv;
  return 0;
}

/* Completes the response "being written", as uv_write's callback would;
 * that may dispatch the next pipelined request, whose answer is then held. */
static void complete_held(conn *c) {
  while (c->held) {
    wreq *w = c->held;
    c->held = NULL;
    on_written(&w->w, 0);
  }
}

int sl__http_feed(sl_http_server *srv, const void *data, size_t len, size_t chunk, int timeout,
                  sl__http_sink_fn sink, void *sink_ud) {
  if (!srv || !srv->detached) return SL_EINVAL;
  conn *c = conn_new(srv);
  if (!c) return SL_ENOMEM;
  if (conn_arena(c) != 0) {
    conn_close(c);
    return SL_ENOMEM;
  }
  srv->sink = sink;
  srv->sink_ud = sink_ud;
  arm_timer(c, srv->lim.idle_timeout_ms);
  const char *p = data;
  /* reading stops while the handler holds a request and after an error */
  while (len && !c->closing && !c->busy) {
    uv_buf_t buf;
    on_alloc((uv_handle_t *)&c->tcp, 65536, &buf);
    if (!buf.base) break;
    size_t n = buf.len < len ? buf.len : len;
    if (chunk && n > chunk) n = chunk;
    memcpy(buf.base, p, n);
    p += n;
    len -= n;
    on_read((uv_stream_t *)&c->tcp, (ssize_t)n, &buf);
    complete_held(c);
  }
  if (timeout && !c->closing) {
    on_timeout(&c->timer);
    complete_held(c);
  }
  if (!c->closing) on_read((uv_stream_t *)&c->tcp, UV_EOF, NULL);
  srv->sink = NULL;
  srv->sink_ud = NULL;
  return 0;
}

void sl_http_server_drain(sl_http_server *srv) {
  if (!srv || srv->closing) return;
  srv->closing = 1; /* every response from now on says Connection: close */
  srv->draining = 1;
  for (conn *c = srv->conns, *n; c; c = n) {
    n = c->next;
    if (!c->busy || c->streaming) conn_close(c); /* nothing to answer (a stream just ends) */
  }
  /* after the loop above: a close may free srv only once the listener is closed */
  uv_close((uv_handle_t *)&srv->tcp, on_listener_closed);
}

void sl_http_server_free(sl_http_server *srv) {
  if (!srv) return;
  srv->closing = 1;
  while (srv->conns) conn_close(srv->conns);
  uv_close((uv_handle_t *)&srv->tcp, on_srv_closed);
}

const char *sl_http_req_method(const sl_http_req *r) { return r->method; }
const char *sl_http_req_path(const sl_http_req *r) { return r->path ? r->path : "/"; }
const char *sl_http_req_query(const sl_http_req *r) { return r->query ? r->query : ""; }
const char *sl_http_req_header(const sl_http_req *r, const char *name) {
  for (size_t i = 0; i < r->nh; i++)
    if (strcasecmp(r->hname[i], name) == 0) return r->hval[i];
  return NULL;
}
const char *sl_http_req_body(const sl_http_req *r, size_t *len) {
  const conn *c = r->c;
  if (len) *len = c ? c->body_len : 0;
  return c && c->body ? c->body : "";
}
