/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_log.h — JSON-lines logging to stderr.
 *
 * One line per event: {"ts":"…","level":"info","component":"stt",
 * "submission":"…","question":3,"msg":"…"}. Lines about a question pass the
 * message key ("<submission>/<question>") and get both ids as fields.
 * Each line is formatted into a bounded stack buffer and written with one
 * write(2) (or several together, sl_log_batch), so lines from different
 * threads never interleave. Thread-safe.
 */
#ifndef SLUICE_SL_LOG_H
#define SLUICE_SL_LOG_H

#include <stddef.h>

typedef enum { SL_LOG_DEBUG, SL_LOG_INFO, SL_LOG_WARN, SL_LOG_ERROR } sl_log_level;

/* Sets the component name shown on every line (static string) and the level
 * ("debug", "info", "warn", "error"). Returns SL_EINVAL for an unknown level. */
int sl_log_init(const char *component, const char *level);
int sl_log_set_level(const char *level);
int sl_log_enabled(sl_log_level lvl);

/* key: message key "<submission>/<question>" or "<submission>", or NULL. */
void sl_log(sl_log_level lvl, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The trace id (32 hex digits) every line of this thread carries as
 * "trace_id" from now on (the message it is working on); NULL or "" for
 * none. Returns the one it replaces, in prev (33 bytes, "" for none), so a
 * caller can put it back. */
void sl_log_trace(const char *trace_id, char *prev);

/* Batching: with ms > 0, debug and info lines are collected (64 KiB at
 * most) and written together, at the latest with the first line logged ms
 * after the last write, with any warn or error line (which goes out at
 * once, after the lines before it), by sl_log_flush() and at exit(); a
 * process killed outright loses the lines not yet written (at most ms of
 * them, when something flushes every ms, as the stage runtime's tick
 * does). ms <= 0 writes every line at once again (the default). */
void sl_log_batch(int ms);
/* Writes the collected lines now. Thread-safe. */
void sl_log_flush(void);
/* Appends s as a JSON string body (no quotes) to buf at *pos, bounded by
 * len; truncates safely, never inside a UTF-8 sequence, and writes bytes
 * that are not well-formed UTF-8 as \ufffd (the output is always valid
 * JSON text). Used by the logger and small JSON writers. */
void sl_json_escape(char *buf, size_t len, size_t *pos, const char *s);

#endif
