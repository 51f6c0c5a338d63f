/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/webhook_sig.h — the signature of Sluice's webhooks, both ways: presign's
 * storage-event webhook checks the X-Sluice-Signature senders put on what
 * they POST, and notify signs the results it POSTs to callback URLs the same
 * way (docs/security.md). "t=<unix s>,v1=<hex HMAC-SHA256(secret,
 * "<t>.<body>")>", Stripe style. Pure functions: any thread.
 */
#ifndef SLUICE_LIB_WEBHOOK_SIG_H
#define SLUICE_LIB_WEBHOOK_SIG_H

#include <stddef.h>
#include <stdint.h>

/* Checks an X-Sluice-Signature header "t=<unix s>,v1=<hex>[,v1=<hex>…]"
 * against HMAC-SHA256(secret, "<t>.<body>") for each of the nsecrets
 * secrets (non-empty ones; constant-time comparison). Returns 0 and *t;
 * SL_EPARSE (malformed header), SL_EINVAL (no signature matches),
 * SL_ETIMEDOUT (signature good but t is more than tolerance_s away from
 * now), SL_ECRYPTO (OpenSSL failed). */
int sl__webhook_check_signature(const char *header, const void *body, size_t len,
                                const char *const *secrets, size_t nsecrets, int64_t now,
                                int64_t tolerance_s, int64_t *t);

/* Hex HMAC-SHA256(secret, "<t>.<body>") into out (what a sender puts in v1). */
int sl__webhook_sign(const char *secret, int64_t t, const void *body, size_t len, char out[65]);

/* Checks "Bearer <secret>" against each non-empty secret (constant time).
 * 0 or SL_EINVAL. */
int sl__webhook_check_bearer(const char *authorization, const char *const *secrets,
                             size_t nsecrets);

#endif
