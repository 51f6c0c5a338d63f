/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_outbox.c — what a processor hands the runtime (see sl_stage.h): the
 * outbox of outputs, the result, and the "<submission>/<question>" key.
 * Pure except sl_outbox_emit_now, which produces at once, fire and forget.
 */
#include "sluice/sl_err.h"
#include "sluice/sl_pbseal.h"
#include "sluice/sl_trace.h"
#include "sluice/sl_stage.h"

#include <hiredis/hiredis.h>
#include <openssl/crypto.h>
#include <protobuf-c/protobuf-c.h>

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends value: copied, or (owned) taken as it is, malloc'd, freed with
 * the outbox (or here when it cannot be added). */
static int add(sl_outbox *ob, const char *topic, const char *key, void *value, size_t len,
               int owned) {
  int rc = 0;
  if (!topic || !key)
    rc = SL_EINVAL;
  else if (ob->n >= SL_OUTBOX_MAX || strlen(key) >= sizeof ob->items[0].key ||
           strlen(topic) >= sizeof ob->items[0].topic)
    rc = SL_ETOOBIG;
  if (rc == 0 && ob->n == ob->cap) {
    size_t cap = ob->cap ? ob->cap * 2 : 4;
    if (cap > SL_OUTBOX_MAX) cap = SL_OUTBOX_MAX;
    sl_out *items = realloc(ob->items, cap * sizeof *items);
    if (items) {
      ob->items = items;
      ob->cap = cap;
    } else {
      rc = SL_ENOMEM;
    }
  }
  if (rc) {
    if (owned) free(value);
    return ob->failed = rc;
  }
  sl_out *o = &ob->items[ob->n];
  if (owned) {
    o->value = value;
  } else {
    o->value = malloc(len ? len : 1);
    if (!o->value) return ob->failed = SL_ENOMEM;
    if (len) memcpy(o->value, value, len);
  }
  o->len = len;
  strcpy(o->topic, topic);
  strcpy(o->key, key);
  o->retry_copy = 0;
  ob->n++;
  return 0;
}

int sl_outbox_add(sl_outbox *ob, const char *topic, const char *key, const void *value,
                  size_t len) {
  if (!ob) return SL_EINVAL;
  return add(ob, topic, key, (void *)value, len, 0);
}

void sl_outbox_clear(sl_outbox *ob) {
  if (!ob) return;
  for (size_t i = 0; i < ob->n; i++) free(ob->items[i].value);
  free(ob->items);
  ob->items = NULL;
  ob->n = ob->cap = 0;
  ob->failed = 0;
  if (ob->sealing) OPENSSL_cleanse(ob->seal_key, sizeof ob->seal_key);
  ob->sealing = 0;
  ob->key_state = SL_KEY_UNREAD;
  ob->key_lost = 0;
}

int sl_key_state_of(int rc) {
  return rc == 0              ? SL_KEY_FOUND
         : rc == SL_EERASED   ? SL_KEY_ERASED
         : rc == SL_ENOTFOUND ? SL_KEY_MISSING
         : rc == SL_EAUTH     ? SL_KEY_INVALID
                              : SL_KEY_UNAVAILABLE;
}

int sl_key_state_of_marker(const redisReply *r) {
  if (!r || r->type != REDIS_REPLY_INTEGER) return SL_KEY_UNAVAILABLE;
  return r->integer == 1 ? SL_KEY_NONE : SL_KEY_MISSING;
}

void sl_outbox_seal_with(sl_outbox *ob, const uint8_t key[SL_SEAL_KEY_LEN]) {
  if (!ob || !key) return;
  memcpy(ob->seal_key, key, sizeof ob->seal_key);
  ob->sealing = 1;
}

/* msg packed into *buf (malloc'd), its personal fields sealed when ob
 * seals: 0 or an error code */
static int pack(const sl_outbox *ob, const char *key, const ProtobufCMessage *msg, uint8_t **buf,
                size_t *n) {
  const char *const *fields = NULL;
  size_t nf = 0;
  if (ob->sealing && sl_pbseal_personal(msg->descriptor, &fields, &nf))
    return sl_pbseal_pack(msg, fields, nf, ob->seal_key, key, strlen(key), buf, n);
  *n = protobuf_c_message_get_packed_size(msg);
  *buf = malloc(*n ? *n : 1);
  if (!*buf) return SL_ENOMEM;
  protobuf_c_message_pack(msg, *buf);
  return 0;
}

int sl_outbox_add_pb(sl_outbox *ob, const char *topic, const char *key,
                     const ProtobufCMessage *msg) {
  if (!ob || !key || !msg) return ob ? ob->failed = SL_EINVAL : SL_EINVAL;
  const char *const *fields = NULL;
  size_t nf = 0;
  if (!ob->sealing || !sl_pbseal_personal(msg->descriptor, &fields, &nf)) {
    /* nothing to seal: packed on the stack when it fits (bench/cost), as
     * before sealing existed */
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t stackbuf[4096], *sb = n <= sizeof stackbuf ? stackbuf : malloc(n);
    if (!sb) return ob->failed = SL_ENOMEM;
    protobuf_c_message_pack(msg, sb);
    int rc = sl_outbox_add(ob, topic, key, sb, n);
    if (sb != stackbuf) free(sb);
    return rc;
  }
  uint8_t *buf = NULL;
  size_t n = 0;
  int rc = pack(ob, key, msg, &buf, &n);
  if (rc) return ob->failed = rc;
  return add(ob, topic, key, buf, n, 1); /* sealed: taken, not copied */
}

void sl_outbox_emit_now(sl_outbox *ob, const char *topic, const char *key,
                        const ProtobufCMessage *msg) {
  if (!ob || !ob->producer || !key || !msg) return;
  uint8_t *buf = NULL;
  size_t n = 0;
  if (pack(ob, key, msg, &buf, &n) != 0) return;
  rd_kafka_resp_err_t e =
      rd_kafka_producev(ob->producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, strlen(key)),
                        RD_KAFKA_V_VALUE(buf, n), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_FREE),
                        RD_KAFKA_V_OPAQUE(NULL), RD_KAFKA_V_END);
  if (e) free(buf); /* on error librdkafka did not take ownership */
}

sl_outcome sl_result_set(sl_result *res, sl_outcome o, const char *cls, const char *fmt, ...) {
  res->outcome = o;
  snprintf(res->error_class, sizeof res->error_class, "%s", cls ? cls : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(res->error_message, sizeof res->error_message, fmt, ap);
  va_end(ap);
  return o;
}

void sl_result_step(sl_result *res, const char *name, int64_t start_ns, int status) {
  if (res->nsteps < 0 || res->nsteps >= SL_RESULT_STEPS) return;
  res->step[res->nsteps].name = name;
  res->step[res->nsteps].start_ns = start_ns;
  res->step[res->nsteps].end_ns = sl_trace_now_ns();
  res->step[res->nsteps].status = status;
  res->nsteps++;
}

int sl_key_parse(const char *key, size_t len, char sid[64], unsigned *qno) {
  if (!key || !len) return SL_EPARSE;
  const char *slash = memchr(key, '/', len);
  if (!slash || slash == key || (size_t)(slash - key) >= 64) return SL_EPARSE;
  size_t sl = (size_t)(slash - key), rest = len - sl - 1;
  if (rest == 0 || rest > 4) return SL_EPARSE;
  unsigned q = 0;
  for (size_t i = 0; i < rest; i++) {
    if (!isdigit((unsigned char)slash[1 + i])) return SL_EPARSE;
    q = q * 10 + (unsigned)(slash[1 + i] - '0');
  }
  if (q == 0) return SL_EPARSE;
  memcpy(sid, key, sl);
  sid[sl] = '\0';
  *qno = q;
  return 0;
}
