/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_slot.c — Redis Cluster key slots (see sl_slot.h).
 *
 * The CRC is computed bit by bit: keys are short (under 100 bytes), and a
 * slot is asked for once per key built, not per byte stored, so a 512-byte
 * table would buy nothing measurable. No Debian package offers this CRC
 * variant as a library (libiberty's xcrc32 is CRC-32).
 */
#include "sluice/sl_slot.h"

uint16_t sl_slot_crc16(const void *p, size_t len) {
  const unsigned char *b = p;
  uint16_t crc = 0;
  for (size_t i = 0; i < len; i++) {
    crc ^= (uint16_t)(b[i] << 8);
    for (int k = 0; k < 8; k++) crc = (uint16_t)((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
  }
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
