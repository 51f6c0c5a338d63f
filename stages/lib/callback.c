/* SPDX-License-Identifier: Apache-2.0 */
/*
 * callback.c — the callback URL policy (see callback.h): URL form and host
 * allow-list with libcurl's URL parser (the parser the delivery uses, so
 * the host checked is the host connected to), address classes by prefix,
 * and name resolution on libuv's thread pool. The host is normalised once
 * (lower case, one trailing dot dropped) and written back into the URL the
 * delivery sends, so check, pin and request name the same host.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/callback.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <uv.h>

#include "sluice/sl_err.h"

#define C(f) offsetof(sl__callback_conf, f)
const sl_conf_entry sl__callback_table[] = {
    {"callback.allowed_hosts", SL_CONF_STR, "", C(allowed_hosts),
     "hosts a submission's callback_url may name, comma-separated (\"hooks.example.com\", "
     "\"*.example.com\" for its subdomains); empty: callback_url is refused (422)",
     0},
    {"callback.allowed_addresses", SL_CONF_STR, "", C(allowed_addresses),
     "addresses or CIDR ranges (\"127.0.0.1\", \"10.1.0.0/16\") a callback host may resolve "
     "to although they are loopback, private, link-local or metadata addresses (refused "
     "otherwise)",
     0},
    {"callback.allow_http", SL_CONF_BOOL, "false", C(allow_http),
     "accept http:// callback URLs (otherwise https:// only)", 0},
};
const size_t sl__callback_table_len = sizeof sl__callback_table / sizeof sl__callback_table[0];

#define MAX_ENTRIES 64

typedef struct {
  int family; /* AF_INET or AF_INET6 */
  unsigned char a[16];
  unsigned bits;
} cidr;

struct sl__callback_policy {
  char *hosts[MAX_ENTRIES]; /* lower case; "*.x" = subdomains of x */
  size_t nhosts;
  cidr allowed[MAX_ENTRIES];
  size_t nallowed;
  int allow_http;
  char *buf;
};

static int parse_cidr(const char *s, cidr *c) {
  char tmp[64];
  snprintf(tmp, sizeof tmp, "%s", s);
  char *slash = strchr(tmp, '/');
  if (slash) *slash = '\0';
  memset(c, 0, sizeof *c);
  if (inet_pton(AF_INET, tmp, c->a) == 1) {
    c->family = AF_INET;
    c->bits = 32;
  } else if (inet_pton(AF_INET6, tmp, c->a) == 1) {
    c->family = AF_INET6;
    c->bits = 128;
  } else {
    return SL_ECONFIG;
  }
  if (slash) {
    char *end;
    long b = strtol(slash + 1, &end, 10);
    if (*end || end == slash + 1 || b < 0 || b > (long)c->bits) return SL_ECONFIG;
    c->bits = (unsigned)b;
  }
  return 0;
}

static int prefix_match(const unsigned char *a, const unsigned char *p, unsigned bits) {
  unsigned full = bits / 8, rest = bits % 8;
  if (memcmp(a, p, full) != 0) return 0;
  if (!rest) return 1;
  unsigned char mask = (unsigned char)(0xff << (8 - rest));
  return (a[full] & mask) == (p[full] & mask);
}

int sl__callback_policy_new(sl__callback_policy **out, const sl__callback_conf *c, char *err,
                            size_t errlen) {
  *out = NULL;
  sl__callback_policy *p = calloc(1, sizeof *p);
  size_t hl = strlen(c->allowed_hosts ? c->allowed_hosts : "");
  size_t al = strlen(c->allowed_addresses ? c->allowed_addresses : "");
  if (!p || !(p->buf = malloc(hl + al + 2))) {
    free(p);
    return SL_ENOMEM;
  }
  p->allow_http = c->allow_http;
  char *h = p->buf, *a = p->buf + hl + 1;
  memcpy(h, c->allowed_hosts ? c->allowed_hosts : "", hl + 1);
  memcpy(a, c->allowed_addresses ? c->allowed_addresses : "", al + 1);
  char *save = NULL;
  for (char *t = strtok_r(h, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
    for (char *q = t; *q; q++) *q = (char)tolower((unsigned char)*q);
    size_t tl = strlen(t);
    if (tl > 2 && t[0] == '[' && t[tl - 1] == ']') { /* "[::1]": as the URL's host is kept */
      t[tl - 1] = '\0';
      t++;
    }
    if (p->nhosts == MAX_ENTRIES || strlen(t) > 253 || strchr(t + (t[0] == '*'), '*') ||
        (t[0] == '*' && t[1] != '.')) {
      snprintf(err, errlen,
               "callback.allowed_hosts: \"%.64s\" is not a host name or *.domain "
               "(at most %d entries)",
               t, MAX_ENTRIES);
      sl__callback_policy_free(p);
      return SL_ECONFIG;
    }
    p->hosts[p->nhosts++] = t;
  }
  for (char *t = strtok_r(a, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
    if (p->nallowed == MAX_ENTRIES || parse_cidr(t, &p->allowed[p->nallowed]) != 0) {
      snprintf(err, errlen,
               "callback.allowed_addresses: \"%.64s\" is not an address or CIDR "
               "range (at most %d entries)",
               t, MAX_ENTRIES);
      sl__callback_policy_free(p);
      return SL_ECONFIG;
    }
    p->nallowed++;
  }
  *out = p;
  return 0;
}

void sl__callback_policy_free(sl__callback_policy *p) {
  if (!p) return;
  free(p->buf);
  free(p);
}

int sl__callback_enabled(const sl__callback_policy *p) { return p && p->nhosts > 0; }

static int host_allowed(const sl__callback_policy *p, const char *host) {
  size_t hl = strlen(host);
  for (size_t i = 0; i < p->nhosts; i++) {
    const char *e = p->hosts[i];
    if (e[0] == '*') { /* "*.example.com": a subdomain, not example.com itself */
      size_t sl = strlen(e + 1);
      if (hl > sl && strcmp(host + hl - sl, e + 1) == 0) return 1;
    } else if (strcmp(host, e) == 0) {
      return 1;
    }
  }
  return 0;
}

int sl__callback_check_url(const sl__callback_policy *p, const char *url, sl__callback_target *t,
                           char *why, size_t whylen) {
  memset(t, 0, sizeof *t);
  if (!sl__callback_enabled(p)) {
    snprintf(why, whylen, "callbacks are not enabled on this server (callback.allowed_hosts)");
    return SL_EINVAL;
  }
  if (!url || !*url || strlen(url) > SL__CALLBACK_URL_MAX) {
    snprintf(why, whylen, "callback_url must be 1 to %d bytes", SL__CALLBACK_URL_MAX);
    return SL_EINVAL;
  }
  for (const char *c = url; *c; c++)
    if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f) {
      snprintf(why, whylen, "callback_url must be a URL of visible ASCII characters");
      return SL_EINVAL;
    }
  CURLU *u = curl_url();
  char *scheme = NULL, *host = NULL, *user = NULL, *pass = NULL, *port = NULL, *frag = NULL;
  int rc = SL_EINVAL;
  if (!u) return SL_ENOMEM;
  if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
    snprintf(why, whylen, "callback_url is not an absolute URL");
    goto out;
  }
  curl_url_get(u, CURLUPART_USER, &user, 0);
  curl_url_get(u, CURLUPART_PASSWORD, &pass, 0);
  curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0);
  curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
  int https = strcasecmp(scheme, "https") == 0, http = strcasecmp(scheme, "http") == 0;
  if (!https && !(http && p->allow_http)) {
    snprintf(why, whylen, "callback_url must be %s", p->allow_http ? "http(s)" : "https");
    goto out;
  }
  if (user || pass || frag) {
    snprintf(why, whylen, "callback_url must not carry user info or a fragment");
    goto out;
  }
  size_t hl = strlen(host);
  const char *h = host;
  if (hl >= 2 && host[0] == '[') { /* IPv6 literal */
    h = host + 1;
    hl -= 2;
  }
  if (hl == 0 || hl >= sizeof t->host) {
    snprintf(why, whylen, "callback_url has no usable host");
    goto out;
  }
  memcpy(t->host, h, hl);
  t->host[hl] = '\0';
  for (char *c = t->host; *c; c++) *c = (char)tolower((unsigned char)*c);
  if (t->host[hl - 1] == '.') t->host[--hl] = '\0'; /* "example.com." names example.com */
  if (hl == 0 || t->host[0] == '.' || t->host[hl - 1] == '.' || strstr(t->host, "..")) {
    snprintf(why, whylen, "callback_url has no usable host");
    goto out;
  }
  /* the URL delivered is the URL of the host checked and pinned */
  char bracketed[sizeof t->host + 2];
  snprintf(bracketed, sizeof bracketed, strchr(t->host, ':') ? "[%s]" : "%s", t->host);
  char *norm = NULL;
  if (curl_url_set(u, CURLUPART_HOST, bracketed, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_URL, &norm, 0) != CURLUE_OK || strlen(norm) >= sizeof t->url) {
    curl_free(norm);
    snprintf(why, whylen, "callback_url has no usable host");
    goto out;
  }
  memcpy(t->url, norm, strlen(norm) + 1);
  curl_free(norm);
  t->port = port ? (unsigned)strtoul(port, NULL, 10) : (https ? 443 : 80);
  if (!host_allowed(p, t->host)) {
    snprintf(why, whylen, "callback_url host \"%.200s\" is not among the allowed hosts", t->host);
    goto out;
  }
  unsigned char bin[16];
  if (inet_pton(AF_INET, t->host, bin) == 1) { /* a literal is checked here already */
    struct sockaddr_in sa = {.sin_family = AF_INET};
    memcpy(&sa.sin_addr, bin, 4);
    rc = sl__callback_check_addr(p, (const struct sockaddr *)&sa, why, whylen);
    goto out;
  }
  if (inet_pton(AF_INET6, t->host, bin) == 1) {
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6};
    memcpy(&sa.sin6_addr, bin, 16);
    rc = sl__callback_check_addr(p, (const struct sockaddr *)&sa, why, whylen);
    goto out;
  }
  rc = 0;
out:
  curl_free(scheme);
  curl_free(host);
  curl_free(user);
  curl_free(pass);
  curl_free(port);
  curl_free(frag);
  curl_url_cleanup(u);
  return rc;
}

/* Address classes a callback may not reach unless allowed. */
typedef struct {
  const char *prefix;
  const char *what;
} klass;

static const klass v4_refused[] = {
    {"0.0.0.0/8", "an unspecified (\"this network\")"},
    {"10.0.0.0/8", "a private"},
    {"100.64.0.0/10", "a shared (carrier-grade NAT)"},
    {"127.0.0.0/8", "a loopback"},
    {"169.254.169.254/32", "a cloud metadata"},
    {"169.254.0.0/16", "a link-local"},
    {"172.16.0.0/12", "a private"},
    {"192.0.0.0/24", "an IETF protocol assignment"},
    {"192.168.0.0/16", "a private"},
    {"198.18.0.0/15", "a benchmarking"},
    {"224.0.0.0/4", "a multicast"},
    {"240.0.0.0/4", "a reserved"},
};
static const klass v6_refused[] = {
    {"::/128", "an unspecified"},
    {"::1/128", "a loopback"},
    {"fd00:ec2::254/128", "a cloud metadata"},
    {"fc00::/7", "a private (unique local)"},
    {"fe80::/10", "a link-local"},
    {"fec0::/10", "a site-local"},
    {"ff00::/8", "a multicast"},
    {"100::/64", "a discard"},
};

static int allowed_by(const sl__callback_policy *p, int family, const unsigned char *a) {
  for (size_t i = 0; i < p->nallowed; i++)
    if (p->allowed[i].family == family && prefix_match(a, p->allowed[i].a, p->allowed[i].bits))
      return 1;
  return 0;
}

static const char *refused_class(int family, const unsigned char *a) {
  const klass *k = family == AF_INET ? v4_refused : v6_refused;
  size_t n = family == AF_INET ? sizeof v4_refused / sizeof v4_refused[0]
                               : sizeof v6_refused / sizeof v6_refused[0];
  for (size_t i = 0; i < n; i++) {
    cidr c;
    if (parse_cidr(k[i].prefix, &c) == 0 && prefix_match(a, c.a, c.bits)) return k[i].what;
  }
  return NULL;
}

int sl__callback_check_addr(const sl__callback_policy *p, const struct sockaddr *sa, char *why,
                            size_t whylen) {
  unsigned char a[16];
  int family = sa->sa_family;
  char text[INET6_ADDRSTRLEN] = "?";
  if (family == AF_INET) {
    memcpy(a, &((const struct sockaddr_in *)sa)->sin_addr, 4);
  } else if (family == AF_INET6) {
    memcpy(a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
  } else {
    snprintf(why, whylen, "callback host resolves to an address of an unknown family");
    return SL_EINVAL;
  }
  inet_ntop(family, a, text, sizeof text);
  if (allowed_by(p, family, a)) return 0;
  /* IPv4 inside IPv6 (mapped ::ffff:a.b.c.d, NAT64 64:ff9b::a.b.c.d): the
   * IPv4 address is the one reached */
  static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (family == AF_INET6 && (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0)) {
    struct sockaddr_in v4 = {.sin_family = AF_INET};
    memcpy(&v4.sin_addr, a + 12, 4);
    return sl__callback_check_addr(p, (const struct sockaddr *)&v4, why, whylen);
  }
  const char *what = refused_class(family, a);
  if (!what) return 0;
  snprintf(why, whylen,
           "callback host resolves to %s, %s address (not allowed: "
           "callback.allowed_addresses)",
           text, what);
  return SL_EINVAL;
}

/* ---- resolution ---- */

typedef struct {
  uv_getaddrinfo_t gai;
  const sl__callback_policy *p;
  sl__callback_target t;
  sl__callback_resolved_fn cb;
  void *ud;
} resolving;

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res) {
  resolving *r = g->data;
  char why[320] = "", pin[sizeof r->t.host + 80] = "";
  int rc = 0;
  if (status != 0 || !res) {
    snprintf(why, sizeof why, "callback host \"%.200s\" does not resolve: %s", r->t.host,
             uv_strerror(status));
    rc = SL_EUNAVAIL;
  }
  for (struct addrinfo *ai = res; rc == 0 && ai; ai = ai->ai_next) {
    rc = sl__callback_check_addr(r->p, ai->ai_addr, why, sizeof why);
    if (rc == 0 && !pin[0]) {
      char text[INET6_ADDRSTRLEN];
      const void *src = ai->ai_family == AF_INET
                            ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                            : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
      inet_ntop(ai->ai_family, src, text, sizeof text);
      int v6 = ai->ai_family == AF_INET6, hv6 = strchr(r->t.host, ':') != NULL;
      snprintf(pin, sizeof pin, "%s%s%s:%u:%s%s%s", hv6 ? "[" : "", r->t.host, hv6 ? "]" : "",
               r->t.port, v6 ? "[" : "", text, v6 ? "]" : "");
    }
  }
  if (res) uv_freeaddrinfo(res);
  r->cb(r->ud, rc, rc ? NULL : pin, why);
  free(r);
}

int sl__callback_resolve(uv_loop_t *loop, const sl__callback_policy *p,
                         const sl__callback_target *t, sl__callback_resolved_fn cb, void *ud) {
  resolving *r = calloc(1, sizeof *r);
  if (!r) return SL_ENOMEM;
  r->p = p;
  r->t = *t;
  r->cb = cb;
  r->ud = ud;
  r->gai.data = r;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  int e = uv_getaddrinfo(loop, &r->gai, on_resolved, r->t.host, NULL, &hints);
  if (e) {
    free(r);
    return SL_EUNAVAIL;
  }
  return 0;
}
