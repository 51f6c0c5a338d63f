/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sf_memory.h — libsndfile reading a caller's bytes in memory
 * (sf_open_virtual), shared by stt/pocketsphinx and step/preflight.
 * Header-only (static inline) because each plugin is its own shared object.
 *
 * Ownership: the memfile borrows the bytes, which must outlive the SNDFILE;
 * nothing is copied. Read-only: a write is refused. Seeks stay inside
 * [0, len]. One memfile per SNDFILE; no shared state, any thread.
 */
#ifndef SLUICE_PLUGINS_SF_MEMORY_H
#define SLUICE_PLUGINS_SF_MEMORY_H

#include <sndfile.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  const unsigned char *data;
  sf_count_t len, pos;
} sl__sf_memfile;

static inline sf_count_t sl__sf_mf_len(void *u) { return ((sl__sf_memfile *)u)->len; }

static inline sf_count_t sl__sf_mf_seek(sf_count_t off, int whence, void *u) {
  sl__sf_memfile *m = u;
  sf_count_t base;
  switch (whence) {
  case SEEK_SET:
    base = 0;
    break;
  case SEEK_CUR:
    base = m->pos;
    break;
  case SEEK_END:
    base = m->len;
    break;
  default:
    return -1;
  }
  /* stay inside [0, len]; written so that nothing can overflow */
  if (off < -base || off > m->len - base) return -1;
  m->pos = base + off;
  return m->pos;
}

static inline sf_count_t sl__sf_mf_read(void *ptr, sf_count_t count, void *u) {
  sl__sf_memfile *m = u;
  if (count <= 0) return 0;
  sf_count_t n = m->len - m->pos;
  if (n > count) n = count;
  memcpy(ptr, m->data + m->pos, (size_t)n);
  m->pos += n;
  return n;
}

static inline sf_count_t sl__sf_mf_write(const void *ptr, sf_count_t count, void *u) {
  (void)ptr;
  (void)count;
  (void)u;
  return 0; /* read-only */
}

static inline sf_count_t sl__sf_mf_tell(void *u) { return ((sl__sf_memfile *)u)->pos; }

/* Opens len bytes at data for reading through m (set up here), filling
 * *info. NULL when libsndfile does not take them (its reason is in
 * sf_strerror(NULL), which is process-global: serialize if you read it). */
static inline SNDFILE *sl__sf_open_memory(sl__sf_memfile *m, const void *data, size_t len,
                                          SF_INFO *info) {
  SF_VIRTUAL_IO vio = {sl__sf_mf_len, sl__sf_mf_seek, sl__sf_mf_read, sl__sf_mf_write,
                       sl__sf_mf_tell};
  m->data = data;
  m->len = (sf_count_t)len;
  m->pos = 0;
  memset(info, 0, sizeof *info);
  return sf_open_virtual(&vio, SFM_READ, info, m);
}

#endif
