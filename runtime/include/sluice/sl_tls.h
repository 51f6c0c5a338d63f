/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_tls.h — per-thread resources for blocking stage work.
 *
 * A blocking processor runs on the worker pool; resources that are not
 * thread-safe (a PocketSphinx decoder, a SigV4 signer, a Redis connection)
 * are created once per worker thread on first use. Unlike _Thread_local
 * pointers, the registry lets the stage free every one of them at shutdown,
 * so nothing leaks and LeakSanitizer stays quiet.
 */
#ifndef SLUICE_SL_TLS_H
#define SLUICE_SL_TLS_H

#define SL_TLS_MAX_THREADS 64

typedef void *(*sl_tls_create_fn)(void *arg, char *err, unsigned long errlen);
typedef void (*sl_tls_destroy_fn)(void *value);

typedef struct sl_tls sl_tls;

/* create is called once per thread (under no lock) and may fail (NULL with a
 * message in err); destroy frees a value. Returns 0 or a negative code. */
int sl_tls_new(sl_tls **out, sl_tls_create_fn create, sl_tls_destroy_fn destroy, void *arg);

/* The calling thread's value, created on first use. NULL on failure (err
 * says why; a later call tries again). Thread-safe. */
void *sl_tls_get(sl_tls *t, char *err, unsigned long errlen);

/* Destroys every thread's value and t. Call when no worker runs. NULL-safe. */
void sl_tls_free(sl_tls *t);

#endif
