/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_slot.c — Redis Cluster key slots (see sl_slot.h).
 *
 * The CRC (XMODEM's: polynomial 0x1021, initial 0) goes a byte at a time
 * through a 512-byte table made on first use from the polynomial. Bit by
 * bit it was measurable once a key was named per input several times (the
 * buckets of a job's key, of its data key and of the data-key memo): 1.9%
 * of a sealed grade-noop's samples, about 0.5 us an input (bench/cost,
 * 2026-12-07). No Debian package offers this CRC variant as a library
 * (libiberty's xcrc32 is CRC-32).
 */
#include "sluice/sl_slot.h"

#include <pthread.h>

static uint16_t table[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void make_table(void) {
  for (unsigned i = 0; i < 256; i++) {
    uint16_t crc = (uint16_t)(i << 8);
    for (int k = 0; k < 8; k++) crc = (uint16_t)((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    table[i] = crc;
  }
}

uint16_t sl_slot_crc16(const void *p, size_t len) {
  pthread_once(&once, make_table);
  const unsigned char *b = p;
  uint16_t crc = 0;
  for (size_t i = 0; i < len; i++) crc = (uint16_t)((crc << 8) ^ table[((crc >> 8) ^ b[i]) & 0xff]);
  return crc;
}

int sl_slot_of(const char *k, size_t len) {
  size_t open = 0;
  while (open < len && k[open] != '{') open++;
  if (open < len) {
    size_t close = open + 1;
    while (close < len && k[close] != '}') close++;
    /* a tag needs at least one byte between the braces */
    if (close < len && close > open + 1)
      return sl_slot_crc16(k + open + 1, close - open - 1) & 16383;
  }
  return sl_slot_crc16(k, len) & 16383;
}
