/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_err.c — messages and names for the SL_ERR_MAP codes.
 * Negative errno values (system errors) are described by strerror_r into a
 * thread-local buffer so the function stays thread-safe.
 */
#define _GNU_SOURCE
#include "sluice/sl_err.h"

#include <stdio.h>
#include <string.h>

const char *sl_strerror(int err) {
  switch (err) {
  case 0:
    return "success";
#define SL__ERR_MSG(name, num, msg)                                                                \
  case SL_E##name:                                                                                 \
    return msg;
    SL_ERR_MAP(SL__ERR_MSG)
#undef SL__ERR_MSG
  default:
    break;
  }
  if (err < 0 && err > -1000) {
    static _Thread_local char buf[128];
    return strerror_r(-err, buf, sizeof buf);
  }
  return "unknown error";
}

const char *sl_err_name(int err) {
  switch (err) {
  case 0:
    return "OK";
#define SL__ERR_NAME(name, num, msg)                                                               \
  case SL_E##name:                                                                                 \
    return "SL_E" #name;
    SL_ERR_MAP(SL__ERR_NAME)
#undef SL__ERR_NAME
  default:
    break;
  }
  if (err < 0 && err > -1000) {
    const char *n = strerrorname_np(-err);
    return n ? n : "ESYSTEM";
  }
  return "EUNKNOWN";
}
