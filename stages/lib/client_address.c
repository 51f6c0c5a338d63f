/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client_address.c — who a request came from (see client_address.h): the
 * last X-Forwarded-For-style entry when it is an IP address, else the peer.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/client_address.h"

#include <uv.h>

#include <stdio.h>
#include <string.h>

int sl__client_address(const sl_http_req *req, const char *header, char *out, size_t len) {
  const char *h = header && header[0] ? sl_http_req_header(req, header) : NULL;
  if (h) {
    const char *last = strrchr(h, ',');
    last = last ? last + 1 : h;
    while (*last == ' ') last++;
    char tmp[64], bin[16];
    size_t n = strcspn(last, " ");
    if (n > 0 && n < sizeof tmp) {
      memcpy(tmp, last, n);
      tmp[n] = '\0';
      if (uv_inet_pton(AF_INET, tmp, bin) == 0 || uv_inet_pton(AF_INET6, tmp, bin) == 0) {
        snprintf(out, len, "%s", tmp);
        return 0;
      }
    }
  }
  if (sl_http_req_peer(req, out, len) == 0) return 0;
  if (len) out[0] = '\0';
  return -1;
}
