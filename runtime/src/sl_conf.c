/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_conf.c — loads component config tables from defaults, a file, the
 * environment and --set overrides (see sl_conf.h for the precedence rules).
 *
 * Values are parsed strictly: an integer with trailing garbage, a bool that is
 * not one of the accepted words, or a line without '=' is an error naming the
 * key and the source, so an operator sees exactly what to fix.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_conf.h"
#include "sluice/sl_err.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static int (*known_env)(const char *);

void sl_conf_set_known_env(int (*known)(const char *)) { known_env = known; }

int sl_conf_env_name(const char *key, char *buf, size_t len) {
  size_t n = strlen("SLUICE_");
  if (!key || !buf || len <= n + strlen(key)) return SL_EINVAL;
  memcpy(buf, "SLUICE_", n);
  for (const char *p = key; *p; p++)
    buf[n++] = (*p == '.' || *p == '-') ? '_' : (char)toupper((unsigned char)*p);
  buf[n] = '\0';
  return 0;
}

static const sl_conf_entry *find(const sl_conf_bind *b, size_t nb, const char *key, size_t keylen,
                                 void **obj) {
  for (size_t i = 0; i < nb; i++)
    for (size_t j = 0; j < b[i].n; j++)
      if (strlen(b[i].entries[j].key) == keylen && strncmp(b[i].entries[j].key, key, keylen) == 0) {
        *obj = b[i].obj;
        return &b[i].entries[j];
      }
  return NULL;
}

static int parse_bool(const char *v, int *out) {
  static const char *yes[] = {"1", "true", "yes", "on"};
  static const char *no[] = {"0", "false", "no", "off"};
  for (size_t i = 0; i < 4; i++) {
    if (strcmp(v, yes[i]) == 0) return *out = 1, 0;
    if (strcmp(v, no[i]) == 0) return *out = 0, 0;
  }
  return SL_ECONFIG;
}

static int assign(const sl_conf_entry *e, void *obj, const char *val, const char *source, char *err,
                  size_t errlen) {
  char *field = (char *)obj + e->offset;
  char *end = NULL;
  switch (e->type) {
  case SL_CONF_STR: {
    char *copy = strdup(val ? val : "");
    if (!copy) return SL_ENOMEM;
    free(*(char **)field);
    *(char **)field = copy;
    return 0;
  }
  case SL_CONF_INT: {
    errno = 0;
    long long v = strtoll(val ? val : "0", &end, 10);
    if (errno || !end || *end || !val || !*val) break;
    *(int64_t *)field = (int64_t)v;
    return 0;
  }
  case SL_CONF_DOUBLE: {
    errno = 0;
    double v = strtod(val ? val : "0", &end);
    if (errno || !end || *end || !val || !*val || !isfinite(v)) break;
    *(double *)field = v;
    return 0;
  }
  case SL_CONF_BOOL:
    if (val && parse_bool(val, (int *)field) == 0) return 0;
    break;
  }
  static const char *tn[] = {"text", "an integer", "a number", "a boolean"};
  snprintf(err, errlen, "%s: %s must be %s, got \"%s\"", source, e->key, tn[e->type],
           e->secret ? "<redacted>" : (val ? val : ""));
  return SL_ECONFIG;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

/* Applies one "key=value" text; `source` names where it came from. */
static int apply_kv(const sl_conf_bind *b, size_t nb, char *line, const char *source, char *err,
                    size_t errlen) {
  char *eq = strchr(line, '=');
  if (!eq) {
    /* the text is not echoed: it may be a secret ("api.token: s3cr3t") */
    snprintf(err, errlen, "%s: expected key = value", source);
    return SL_ECONFIG;
  }
  *eq = '\0';
  char *key = trim(line), *val = trim(eq + 1);
  void *obj = NULL;
  const sl_conf_entry *e = find(b, nb, key, strlen(key), &obj);
  if (!e) {
    snprintf(err, errlen, "%s: unknown configuration key \"%s\" (see --help)", source, key);
    return SL_EUNKNOWNKEY;
  }
  return assign(e, obj, val, source, err, errlen);
}

static int load_file(const sl_conf_bind *b, size_t nb, const char *file, char *err, size_t errlen) {
  FILE *f = fopen(file, "r");
  if (!f) {
    snprintf(err, errlen, "config file %s: %s", file, strerror(errno));
    return SL_ECONFIG;
  }
  char line[4096], source[512];
  int rc = 0, lineno = 0;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    lineno++;
    if (!strchr(line, '\n') && !feof(f)) {
      snprintf(err, errlen, "%s:%d: line longer than %zu bytes", file, lineno, sizeof line - 1);
      rc = SL_ECONFIG;
      break;
    }
    char *t = trim(line);
    if (!*t || *t == '#') continue;
    snprintf(source, sizeof source, "%s:%d", file, lineno);
    rc = apply_kv(b, nb, t, source, err, errlen);
  }
  fclose(f);
  return rc;
}

static int load_env(const sl_conf_bind *b, size_t nb, char *err, size_t errlen) {
  char name[256];
  /* 1. reject SLUICE_* names no component declares */
  for (char **ep = environ; ep && *ep; ep++) {
    if (strncmp(*ep, "SLUICE_", 7) != 0) continue;
    const char *eq = strchr(*ep, '=');
    size_t n = eq ? (size_t)(eq - *ep) : strlen(*ep);
    if (n >= sizeof name) n = sizeof name - 1;
    memcpy(name, *ep, n);
    name[n] = '\0';
    int mine = 0;
    char cand[256];
    for (size_t i = 0; i < nb && !mine; i++)
      for (size_t j = 0; j < b[i].n && !mine; j++)
        mine = sl_conf_env_name(b[i].entries[j].key, cand, sizeof cand) == 0 &&
               strcmp(cand, name) == 0;
    if (!mine && !(known_env && known_env(name))) {
      snprintf(err, errlen, "environment: unknown variable %s (no Sluice component reads it)",
               name);
      return SL_EUNKNOWNKEY;
    }
  }
  /* 2. apply the ones this component declares */
  for (size_t i = 0; i < nb; i++)
    for (size_t j = 0; j < b[i].n; j++) {
      const sl_conf_entry *e = &b[i].entries[j];
      if (sl_conf_env_name(e->key, name, sizeof name)) continue;
      const char *v = getenv(name);
      if (!v) continue;
      char source[300];
      snprintf(source, sizeof source, "environment %s", name);
      int rc = assign(e, b[i].obj, v, source, err, errlen);
      if (rc) return rc;
    }
  return 0;
}

int sl_conf_load(const sl_conf_bind *b, size_t nb, const char *file, const char *const *ov,
                 size_t nov, char *err, size_t errlen) {
  if (!b || !err || !errlen) return SL_EINVAL;
  err[0] = '\0';
  for (size_t i = 0; i < nb; i++)
    for (size_t j = 0; j < b[i].n; j++) {
      const sl_conf_entry *e = &b[i].entries[j];
      int rc = assign(e, b[i].obj, e->def ? e->def : (e->type == SL_CONF_STR ? "" : "0"), "default",
                      err, errlen);
      if (rc) return rc;
    }
  int rc = 0;
  if (file && *file && (rc = load_file(b, nb, file, err, errlen))) return rc;
  if ((rc = load_env(b, nb, err, errlen))) return rc;
  for (size_t i = 0; i < nov; i++) {
    char buf[4096];
    if (strlen(ov[i]) >= sizeof buf) {
      snprintf(err, errlen, "--set: value too long");
      return SL_ECONFIG;
    }
    strcpy(buf, ov[i]);
    if ((rc = apply_kv(b, nb, buf, "--set", err, errlen))) return rc;
  }
  return 0;
}

/* Copies the value of `key` from one "key = value" text into buf when the
 * key matches. Returns 1 when it did. */
static int peek_kv(const char *text, const char *key, char *buf, size_t len) {
  char line[4096];
  if (strlen(text) >= sizeof line) return 0;
  strcpy(line, text);
  char *eq = strchr(line, '=');
  if (!eq) return 0;
  *eq = '\0';
  if (strcmp(trim(line), key) != 0) return 0;
  snprintf(buf, len, "%s", trim(eq + 1));
  return 1;
}

int sl_conf_peek(const char *file, const char *const *ov, size_t nov, const char *key, char *buf,
                 size_t len) {
  if (!key || !buf || !len) return SL_EINVAL;
  int found = 0;
  if (file && *file) {
    FILE *f = fopen(file, "r");
    if (f) {
      char line[4096];
      while (fgets(line, sizeof line, f)) {
        char *t = trim(line);
        if (*t && *t != '#') found |= peek_kv(t, key, buf, len);
      }
      fclose(f);
    }
  }
  char name[256];
  const char *v = sl_conf_env_name(key, name, sizeof name) == 0 ? getenv(name) : NULL;
  if (v) {
    snprintf(buf, len, "%s", v);
    found = 1;
  }
  for (size_t i = 0; i < nov; i++) found |= peek_kv(ov[i], key, buf, len);
  return found;
}

void sl_conf_release(const sl_conf_bind *b, size_t nb) {
  if (!b) return;
  for (size_t i = 0; i < nb; i++)
    for (size_t j = 0; j < b[i].n; j++)
      if (b[i].entries[j].type == SL_CONF_STR) {
        char **f = (char **)((char *)b[i].obj + b[i].entries[j].offset);
        free(*f);
        *f = NULL;
      }
}

void sl_conf_print_help(const sl_conf_entry *e, size_t n, void *out) {
  FILE *f = out;
  char env[256];
  for (size_t i = 0; i < n; i++) {
    sl_conf_env_name(e[i].key, env, sizeof env);
    fprintf(f, "  %-26s %s\n  %-26s   env %s, default: %s\n", e[i].key, e[i].desc, "", env,
            e[i].secret ? "(secret)" : (e[i].def && *e[i].def ? e[i].def : "(empty)"));
  }
}

void sl_conf_print_markdown(const sl_conf_entry *e, size_t n, void *out) {
  FILE *f = out;
  char env[256];
  fprintf(f, "| key | environment | default | description |\n|---|---|---|---|\n");
  for (size_t i = 0; i < n; i++) {
    sl_conf_env_name(e[i].key, env, sizeof env);
    fprintf(f, "| `%s` | `%s` | %s%s%s | %s |\n", e[i].key, env,
            e[i].def && *e[i].def && !e[i].secret ? "`" : "",
            e[i].secret ? "(secret)" : (e[i].def && *e[i].def ? e[i].def : "(empty)"),
            e[i].def && *e[i].def && !e[i].secret ? "`" : "", e[i].desc);
  }
}
