/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/process.h — the process a stage runs in: the stop flag SIGTERM and
 * SIGINT raise (sl_stage_run polls it), and the name the process takes Redis
 * locks under.
 */
#ifndef SLUICE_LIB_PROCESS_H
#define SLUICE_LIB_PROCESS_H

#include <signal.h>
#include <stddef.h>

/* Raised by SIGTERM/SIGINT (async-signal-safe: only ever set to 1). */
extern volatile sig_atomic_t sl__stop;

/* SIGTERM and SIGINT raise sl__stop; SIGPIPE is ignored. Call once, from
 * the main thread, before other threads start (sl__stage_start does). */
void sl__install_signals(void);

/* "<host>:<pid>": who holds a Redis lock this process takes. */
void sl__owner_id(char *buf, size_t len);

#endif
