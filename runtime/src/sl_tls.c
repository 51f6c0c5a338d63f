/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_tls.c — a small registry: slot per thread id, looked up linearly
 * (worker pools are a handful of threads), guarded by a mutex only while
 * the slot table is read or extended.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_tls.h"
#include "sluice/sl_err.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct sl_tls {
  pthread_mutex_t mu;
  sl_tls_create_fn create;
  sl_tls_destroy_fn destroy;
  void *arg;
  size_t n;
  struct {
    pthread_t tid;
    void *value;
  } slot[SL_TLS_MAX_THREADS];
};

int sl_tls_new(sl_tls **out, sl_tls_create_fn create, sl_tls_destroy_fn destroy, void *arg) {
  if (!out || !create || !destroy) return SL_EINVAL;
  sl_tls *t = calloc(1, sizeof *t);
  if (!t) return SL_ENOMEM;
  pthread_mutex_init(&t->mu, NULL);
  t->create = create;
  t->destroy = destroy;
  t->arg = arg;
  *out = t;
  return 0;
}

void *sl_tls_get(sl_tls *t, char *err, unsigned long errlen) {
  pthread_t self = pthread_self();
  pthread_mutex_lock(&t->mu);
  for (size_t i = 0; i < t->n; i++)
    if (pthread_equal(t->slot[i].tid, self)) {
      void *v = t->slot[i].value;
      pthread_mutex_unlock(&t->mu);
      return v;
    }
  int full = t->n >= SL_TLS_MAX_THREADS;
  pthread_mutex_unlock(&t->mu);
  if (full) {
    snprintf(err, errlen, "more than %d worker threads", SL_TLS_MAX_THREADS);
    return NULL;
  }
  void *v = t->create(t->arg, err, errlen); /* only this thread uses its slot */
  if (!v) return NULL;
  pthread_mutex_lock(&t->mu);
  if (t->n >= SL_TLS_MAX_THREADS) {
    pthread_mutex_unlock(&t->mu);
    t->destroy(v);
    snprintf(err, errlen, "more than %d worker threads", SL_TLS_MAX_THREADS);
    return NULL;
  }
  t->slot[t->n].tid = self;
  t->slot[t->n].value = v;
  t->n++;
  pthread_mutex_unlock(&t->mu);
  return v;
}

void sl_tls_free(sl_tls *t) {
  if (!t) return;
  for (size_t i = 0; i < t->n; i++) t->destroy(t->slot[i].value);
  pthread_mutex_destroy(&t->mu);
  free(t);
}
