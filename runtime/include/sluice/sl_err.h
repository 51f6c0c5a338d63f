/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_err.h — one error space for all of Sluice.
 *
 * Every Sluice function that can fail returns 0 on success or a negative
 * SL_E* code. Codes and messages come from one X-macro list so names and
 * messages never drift apart (the libuv UV_ERRNO_MAP habit). System errors
 * are returned as -errno and sl_strerror() falls back to strerror() for them.
 */
#ifndef SLUICE_SL_ERR_H
#define SLUICE_SL_ERR_H

#define SL_ERR_MAP(X)                                                                              \
  X(INVAL, 1000, "invalid argument")                                                               \
  X(NOMEM, 1001, "out of memory")                                                                  \
  X(CONFIG, 1002, "invalid configuration")                                                         \
  X(UNKNOWNKEY, 1003, "unknown configuration key")                                                 \
  X(PARSE, 1004, "malformed input")                                                                \
  X(TOOBIG, 1005, "input exceeds its limit")                                                       \
  X(NOTFOUND, 1006, "not found")                                                                   \
  X(KAFKA, 1007, "kafka error")                                                                    \
  X(REDIS, 1008, "redis error")                                                                    \
  X(HTTP, 1009, "http error")                                                                      \
  X(STORAGE, 1010, "object storage error")                                                         \
  X(DECODE, 1011, "audio could not be decoded")                                                    \
  X(STT, 1012, "speech recognition failed")                                                        \
  X(TIMEDOUT, 1013, "timed out")                                                                   \
  X(UNAVAIL, 1014, "service unavailable")                                                          \
  X(CRYPTO, 1015, "cryptographic library error")                                                   \
  X(STATE, 1016, "operation not valid in this state")                                              \
  X(PLUGIN, 1017, "plugin refused or misbehaved")                                                  \
  X(AUTH, 1018, "credentials missing or not valid")                                                \
  X(IO, 1019, "read or write failed")                                                              \
  X(UNSUPPORTED, 1020, "format not supported")                                                     \
  X(ERASED, 1021, "erased on request")

enum {
#define SL__ERR_ENUM(name, num, msg) SL_E##name = -(num),
  SL_ERR_MAP(SL__ERR_ENUM)
#undef SL__ERR_ENUM
};

/* Message for a code returned by any sl_* function (or a -errno value).
 * The string is static; never free it. Thread-safe. */
const char *sl_strerror(int err);

/* Symbolic name ("SL_EPARSE", "ENOENT", ...) for logs and JSON error codes. */
const char *sl_err_name(int err);

#endif
