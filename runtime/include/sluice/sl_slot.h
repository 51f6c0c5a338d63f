/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_slot.h — the Redis Cluster hash slot of a key.
 *
 * Redis Cluster places a key by CRC16 (the XMODEM variant: polynomial
 * 0x1021, initial value 0) of the key, modulo 16384; when the key holds a
 * hash tag — a '{' followed later by a '}' with at least one byte between
 * them — only the bytes between the first '{' and the first '}' after it are
 * hashed, so keys with the same tag share a slot (the cluster specification,
 * "Keys hash tags"). Pure functions: no state, any thread.
 */
#ifndef SLUICE_SL_SLOT_H
#define SLUICE_SL_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define SL_SLOT_COUNT 16384

/* CRC16-XMODEM of len bytes of p. */
uint16_t sl_slot_crc16(const void *p, size_t len);

/* The hash slot (0..16383) of the len-byte key k, honouring its hash tag. */
int sl_slot_of(const char *k, size_t len);

#endif
