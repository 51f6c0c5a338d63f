/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/client_address.h — the address a request came from, for the HTTP
 * stages' per-client limits (presign's rate limits, results' stream caps).
 */
#ifndef SLUICE_LIB_CLIENT_ADDRESS_H
#define SLUICE_LIB_CLIENT_ADDRESS_H

#include <stddef.h>

#include "sluice/sl_http.h"

/* The client address of req as text into out: the last entry of header
 * (the one a trusted proxy appended, e.g. X-Forwarded-For) when header is
 * non-empty and that entry is an IP address, else the TCP peer. 0, or -1
 * (out "") when there is none. @locality the loop thread that owns req. */
int sl__client_address(const sl_http_req *req, const char *header, char *out, size_t len);

#endif
