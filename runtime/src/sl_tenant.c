/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_tenant.c — tenant ids and their Redis keys (see sl_tenant.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_tenant.h"

#include "sluice/sl_err.h"
#include "sluice/sl_rkey.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

int sl_tenant_valid(const char *t, size_t len) {
  if (!t || len == 0 || len > SL_TENANT_MAX) return 0;
  for (size_t i = 0; i < len; i++)
    if (t[i] <= 0x20 || t[i] >= 0x7f) return 0;
  return 1;
}

int sl_tenant_conf_key(const char *tenant, char out[SL_TENANT_KEY_MAX]) {
  size_t n = tenant ? strlen(tenant) : 0;
  if (!sl_tenant_valid(tenant, n)) return SL_EINVAL;
  snprintf(out, SL_TENANT_KEY_MAX, "sl:tenant:%s%s", sl_rkey_tag_of(tenant, n), tenant);
  return 0;
}

int sl_tenant_day_key(const char *tenant, int64_t unix_ms, const char *what,
                      char out[SL_TENANT_KEY_MAX]) {
  size_t n = tenant ? strlen(tenant) : 0;
  if (!sl_tenant_valid(tenant, n) || !what || strlen(what) > 16) return SL_EINVAL;
  time_t t = (time_t)(unix_ms / 1000);
  struct tm tm;
  if (!gmtime_r(&t, &tm)) return SL_EINVAL;
  snprintf(out, SL_TENANT_KEY_MAX, "sl:tenant-%s:%s%04d%02d%02d:%s", what,
           sl_rkey_tag_of(tenant, n), tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tenant);
  return 0;
}

int64_t sl_tenant_day_left_ms(int64_t unix_ms) {
  const int64_t day = 86400000;
  int64_t into = unix_ms % day;
  if (into < 0) into += day;
  return day - into;
}
