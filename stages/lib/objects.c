/* SPDX-License-Identifier: Apache-2.0 */
/*
 * objects.c — the objects plugins read and write (see objects.h): the
 * signer or connections to storage, where a key lives, and storage's
 * answers as a stage's outcome.
 */
#define _POSIX_C_SOURCE 200809L
#include "lib/objects.h"

#include <stdio.h>
#include <string.h>

#include "sluice/sl_err.h"
#include "sluice/sl_tls.h"

static void *signer_new(void *arg, char *err, unsigned long errlen) {
  const sl__objects *o = arg;
  sl_sigv4 *sig = NULL;
  int rc = sl_sigv4_new(&sig, o->s3->access_key, o->s3->secret_key, o->s3->region, "s3");
  if (rc) snprintf(err, errlen, "s3 settings: %s", sl_strerror(rc));
  return sig;
}

static void *conn_new(void *arg, char *err, unsigned long errlen) {
  const sl__objects *o = arg;
  sl_s3_conn *c = NULL;
  int rc = sl_s3_conn_new(&c, o->s3);
  if (rc) snprintf(err, errlen, "s3 settings: %s", sl_strerror(rc));
  return c;
}
static void conn_free(void *v) { sl_s3_conn_free(v); }

int sl__objects_init(sl__objects *o, sl_s3_conf *s3, size_t max_bytes, long timeout_ms, int sync,
                     char *err, size_t errlen) {
  memset(o, 0, sizeof *o);
  o->s3 = s3;
  o->max_bytes = max_bytes;
  o->timeout_ms = timeout_ms;
  int rc = sl_s3_target_init(&o->target, s3);
  if (rc == 0) rc = sl_s3_target_init_derived(&o->derived, s3);
  if (rc) {
    snprintf(err, errlen, "s3 settings: %s", sl_strerror(rc));
    return rc;
  }
  if (!sync) {
    o->loop_sig = signer_new(o, err, errlen);
    return o->loop_sig ? 0 : SL_ECONFIG;
  }
  rc = sl_tls_new(&o->conns, conn_new, conn_free, o);
  if (rc) return rc;
  sl_s3_conn *probe = conn_new(o, err, errlen);
  if (!probe) return SL_ECONFIG;
  sl_s3_conn_free(probe);
  return 0;
}

void sl__objects_free(sl__objects *o) {
  if (!o) return;
  sl_tls_free(o->conns);
  sl_sigv4_free(o->loop_sig);
  o->conns = NULL;
  o->loop_sig = NULL;
}

/* Where key lives: a derived object in the derived target, an answer in
 * the answers' bucket. */
const sl_s3_target *sl__objects_target(const sl__objects *o, const char *key) {
  return sl_s3_is_derived(key) ? &o->derived : &o->target;
}

/* Storage's answer to a GET or PUT of key as the stage's outcome. */
void sl__storage_fault(sl_result *res, int rc, long status, const char *key, const char *why) {
  if (rc == SL_EUNAVAIL || (rc == SL_ESTORAGE && (status >= 500 || status == 429 || status == 408)))
    sl_result_set(res, SL_OUTCOME_RETRY, "storage", "%s", why);
  else if (rc == SL_ESTORAGE && (status == 403 || status == 401))
    /* the object exists (ingest saw it), so the fault is this replica's: a
     * clock off by more than the signature allows, or credentials being
     * rotated; retried, so another replica or this one fixed can get it */
    sl_result_set(res, SL_OUTCOME_RETRY, "storage_denied",
                  "%s: HTTP %ld: storage refused this replica's signature (is its clock right? "
                  "are s3.access_key/s3.secret_key current?)",
                  key, status);
  else
    sl_result_set(res, SL_OUTCOME_FAIL, rc == SL_ETOOBIG ? "audio_too_large" : "storage", "%s",
                  why);
}

/* the fetched object as the plugin's input */
void sl__give_object(sl_plugin_input *in, const char *key, const void *data, size_t len) {
  in->audio = data;
  in->audio_len = len;
  in->content_type = sl__audio_content_type(key);
  const char *slash = strrchr(key, '/');
  in->filename = slash ? slash + 1 : key;
}

const char *sl__audio_content_type(const char *name) {
  const char *dot = name ? strrchr(name, '.') : NULL;
  static const char *map[][2] = {{".wav", "audio/wav"},   {".flac", "audio/flac"},
                                 {".ogg", "audio/ogg"},   {".oga", "audio/ogg"},
                                 {".webm", "audio/webm"}, {".mp3", "audio/mpeg"},
                                 {".m4a", "audio/mp4"},   {".mp4", "audio/mp4"}};
  for (size_t i = 0; dot && i < sizeof map / sizeof map[0]; i++)
    if (strcmp(dot, map[i][0]) == 0) return map[i][1];
  return "application/octet-stream";
}
