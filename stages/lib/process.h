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

/* The longest owner id, NUL included: a host name (at most 64 bytes), ':',
 * a PID, '.', 8 hex digits. */
#define SL__OWNER_MAX 96

/* "<host>:<pid>.<salt>": who holds a Redis lock this process takes (the
 * sweep's, the retention sweep's, materialize's rebuild lock). The whole
 * host name and the PID say which process it is (a pod's name, PID 1); the
 * salt, random and drawn once per process, keeps two processes apart that
 * have both the same (two containers on the host's network, each PID 1).
 * The same in every call of one process; cut to fit len. Thread-safe. */
void sl__owner_id(char *buf, size_t len);

#endif
