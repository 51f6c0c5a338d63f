/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_stage_part.c — the partitions a stage takes messages from
 * (sl_stage_part.h): a hash by topic and partition, their offsets, their
 * parked retry copies. Loop thread only.
 */
#include "sl_stage_part.h"
#include "sluice/sl_idem.h"
#include "sluice/sl_rkey.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sl__parts_init(sl_parts *P, uv_loop_t *uv, const char (*tier_topic)[160], int ntiers,
                    const char *gname[2], int ngroups) {
  memset(P, 0, sizeof *P);
  P->uv = uv;
  P->tier_topic = tier_topic;
  P->ntiers = ntiers;
  P->ngroups = ngroups;
  P->gname[0] = gname[0];
  P->gname[1] = gname[1];
}

part *sl__part_get(sl_parts *P, const char *topic, int32_t partition, int create) {
  part_id id;
  memset(&id, 0, sizeof id);
  snprintf(id.topic, sizeof id.topic, "%s", topic);
  id.partition = partition;
  part *p = NULL;
  HASH_FIND(hh, P->table, &id, sizeof id, p);
  if (p || !create) return p;
  p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->id = id;
  sl_offsets_init(&p->ring);
  p->retry_tier = -1;
  for (int i = 0; i < P->ntiers; i++)
    if (strcmp(topic, P->tier_topic[i]) == 0) p->retry_tier = i;
  p->group = p->retry_tier >= 0 && P->ngroups > 1 ? 1 : 0;
  p->gname = P->gname[p->group];
  uv_timer_init(P->uv, &p->park_timer);
  p->park_timer.data = p;
  HASH_ADD(hh, P->table, id, sizeof id, p);
  return p;
}

void sl__part_reset(part *p) {
  sl_offsets_reset(&p->ring);
  p->revoked = 0;
  p->revoking = 0;
  p->paused_for_park = 0;
}

static void part_close_cb(uv_handle_t *h) {
  part *p = h->data;
  sl_offsets_free(&p->ring);
  free(p);
}

void sl__parts_close(sl_parts *P) {
  part *p, *tmp;
  HASH_ITER(hh, P->table, p, tmp) {
    HASH_DEL(P->table, p);
    uv_timer_stop(&p->park_timer);
    uv_close((uv_handle_t *)&p->park_timer, part_close_cb);
  }
}

int sl__job_stale(const job *j) {
  const part *p = j->p;
  return p && (p->revoking || p->revoked || j->epoch != p->ring.epoch);
}

void sl__part_park(part *p, job *j) { sl_queue_push(&p->parked, &j->link); }

job *sl__part_due(part *p, int64_t now) {
  job *h = sl__job_of(p->parked.head);
  return h && h->not_before_ms <= now ? sl__job_pop(&p->parked) : NULL;
}

int64_t sl__part_next_due(const part *p) {
  const job *h = sl__job_of(p->parked.head);
  return h ? h->not_before_ms : 0;
}

void sl__part_release_parked(part *p) {
  job *j;
  while ((j = sl__job_pop(&p->parked)) != NULL) sl__job_to(j, SL_JOB_RELEASED);
  uv_timer_stop(&p->park_timer);
}

void sl__starts_key(const job *j, char *buf, size_t len) {
  const part *p = j->p;
  if ((!p || sl_idem_starts_key(buf, len, sl_rkey_tag(j->bucket), p->gname, p->id.topic,
                                p->id.partition, j->offset)) &&
      len)
    buf[0] = '\0';
}

int64_t sl__parts_oldest(const sl_parts *P, int inputs_only, int64_t now) {
  int64_t oldest = 0;
  part *p, *tmp;
  HASH_ITER(hh, P->table, p, tmp) {
    int64_t ts = sl_offsets_oldest_ts(&p->ring);
    if (ts && !p->revoked && (!inputs_only || p->retry_tier < 0) && (!oldest || ts < oldest))
      oldest = ts;
  }
  return oldest && now > oldest ? now - oldest : 0;
}
