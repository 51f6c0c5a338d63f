/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/callback.h — which callback URLs a submission may name (internal): the
 * one policy presign applies at create and notify applies again at every
 * delivery (docs/security.md, "Callbacks"). A URL must be http(s) (http
 * only with callback.allow_http), carry no user info, name a host of
 * callback.allowed_hosts, and every address that host resolves to must be
 * public: loopback, private, shared (CGNAT), link-local, cloud metadata,
 * multicast and reserved addresses are refused unless one of
 * callback.allowed_addresses covers them. The address a delivery connects
 * to is the one checked (sl_httpc_request.resolve), so a name that
 * resolves differently between check and connect (DNS rebinding) cannot
 * reach a refused address.
 */
#ifndef SLUICE_LIB_CALLBACK_H
#define SLUICE_LIB_CALLBACK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "sluice/sl_conf.h"

#define SL__CALLBACK_URL_MAX 2048

typedef struct {
  char *allowed_hosts;     /* "hooks.example.com,*.example.org"; "" = callbacks off */
  char *allowed_addresses; /* "127.0.0.1,10.1.0.0/16": non-public ones allowed */
  int allow_http;
} sl__callback_conf;

/* The table presign and notify both load (one policy, two places). */
extern const sl_conf_entry sl__callback_table[];
extern const size_t sl__callback_table_len;

typedef struct sl__callback_policy sl__callback_policy;

/* Parses the lists. 0, or SL_ECONFIG with the bad entry in err, SL_ENOMEM. */
int sl__callback_policy_new(sl__callback_policy **out, const sl__callback_conf *c, char *err,
                            size_t errlen);
void sl__callback_policy_free(sl__callback_policy *p); /* NULL-safe */
/* 1 when callbacks are on (some host allowed). */
int sl__callback_enabled(const sl__callback_policy *p);

/* A URL that passed sl__callback_check_url. host is the one normalised
 * host (lower case, IPv6 without brackets, no trailing dot) that the
 * allow-list checked, that is resolved and pinned (sl__callback_resolve),
 * and that url names: a delivery sends to url, never to the URL as given,
 * so libcurl cannot see a host ("example.com.") the pin does not match and
 * resolve it itself. */
typedef struct {
  char host[256];
  unsigned port;
  char url[SL__CALLBACK_URL_MAX + 8]; /* the URL with host replaced by host */
} sl__callback_target;

/* Checks url's form and host against the policy (no name resolution). 0 with
 * t filled, or SL_EINVAL with the reason in why (a sentence for the 422).
 * A host with more than one trailing dot, or an empty label, is refused. */
int sl__callback_check_url(const sl__callback_policy *p, const char *url, sl__callback_target *t,
                           char *why, size_t whylen);

/* Checks one resolved address. 0, or SL_EINVAL with why ("127.0.0.1 is a
 * loopback address"). */
int sl__callback_check_addr(const sl__callback_policy *p, const struct sockaddr *sa, char *why,
                            size_t whylen);

/* Resolves t->host on loop's thread pool and checks every address it
 * resolves to (one refused address refuses the host). cb runs once, on the
 * loop: rc 0 with pin ("host:port:address", what sl_httpc_request.resolve
 * takes), or SL_EINVAL (refused) / SL_EUNAVAIL (the name did not
 * resolve) with why. Returns 0, or an error code (cb will not run). */
typedef void (*sl__callback_resolved_fn)(void *ud, int rc, const char *pin, const char *why);
struct uv_loop_s;
int sl__callback_resolve(struct uv_loop_s *loop, const sl__callback_policy *p,
                         const sl__callback_target *t, sl__callback_resolved_fn cb, void *ud);

#endif
