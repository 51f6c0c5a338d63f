/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_file.h — a whole file read into memory, bounded: what `sluice plugin
 * run`, sluicectl and the benches read their inputs with. @locality any
 * thread (blocking: not on a stage's loop).
 */
#ifndef SLUICE_SL_FILE_H
#define SLUICE_SL_FILE_H

#include <stddef.h>
#include <stdint.h>

/* Reads path ("-": standard input) into *data (malloc'd, the caller frees
 * it; a NUL follows the *len bytes, so text can be used as a string).
 * Returns 0; SL_ETOOBIG when it holds more than max bytes; SL_EIO when it
 * cannot be opened or read (errno says why); SL_ENOMEM. On error *data is
 * NULL. */
int sl_file_read(const char *path, size_t max, uint8_t **data, size_t *len);

#endif
