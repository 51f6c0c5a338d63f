/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_conf.h — one configuration table per component.
 *
 * A component declares a static array of sl_conf_entry (key, type, default,
 * offset into its config struct, description), the Fluent Bit config_map
 * habit. The same table drives loading, validation, `--help` and the docs.
 *
 * Sources, later wins: built-in default < file (--config FILE, "key = value"
 * lines, '#' comments) < environment (SLUICE_<KEY> with '.' -> '_', upper
 * case) < command line (--set key=value). An unknown key in a file or on the
 * command line is an error; an unknown SLUICE_* variable is an error unless
 * some other Sluice component declares it (one shell environment serves all
 * stages), see sl_conf_set_known_env().
 *
 * String values are heap copies owned by the config struct; release them with
 * sl_conf_release(). Not thread-safe: load once at start-up.
 */
#ifndef SLUICE_SL_CONF_H
#define SLUICE_SL_CONF_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  SL_CONF_STR,    /* char *            */
  SL_CONF_INT,    /* int64_t           */
  SL_CONF_DOUBLE, /* double            */
  SL_CONF_BOOL,   /* int (0/1): true/false/yes/no/1/0/on/off */
} sl_conf_type;

typedef struct {
  const char *key; /* "kafka.brokers"; env SLUICE_KAFKA_BROKERS */
  sl_conf_type type;
  const char *def;  /* default, as text; NULL = empty string / 0 */
  size_t offset;    /* offsetof(struct, field) */
  const char *desc; /* one line for --help and docs */
  int secret;       /* 1 = never print the value */
} sl_conf_entry;

/* A table bound to the struct it fills. */
typedef struct {
  const sl_conf_entry *entries;
  size_t n;
  void *obj;
} sl_conf_bind;

/* Loads defaults, FILE (may be NULL), environment and the `overrides`
 * ("key=value" strings, may be NULL/0) into every bound struct.
 * Returns 0, or SL_EUNKNOWNKEY / SL_ECONFIG with a message in err. */
int sl_conf_load(const sl_conf_bind *binds, size_t nbinds, const char *file,
                 const char *const *overrides, size_t noverrides, char *err, size_t errlen);

/* Reads one key's text from the same sources and precedence as
 * sl_conf_load() without validating anything else (for settings that decide
 * which tables to load, such as the plugin search path). Returns 1 and
 * writes the value into buf when some source sets it, 0 when none does. */
int sl_conf_peek(const char *file, const char *const *overrides, size_t noverrides, const char *key,
                 char *buf, size_t len);
/* Frees the strings sl_conf_load() stored. NULL-safe, idempotent. */
void sl_conf_release(const sl_conf_bind *binds, size_t nbinds);

/* Registers a predicate telling whether an environment variable is declared
 * by any Sluice component (used to reject typos like SLUICE_KAFKA_BROKER). */
void sl_conf_set_known_env(int (*known)(const char *env_name));

/* Environment variable name for a key into buf ("SLUICE_KAFKA_BROKERS"). */
int sl_conf_env_name(const char *key, char *buf, size_t len);

/* Writes a table as help text (key, env, default, description). */
void sl_conf_print_help(const sl_conf_entry *entries, size_t n, void *out_file);

/* Writes a table as a Markdown table (docs/configuration.md). */
void sl_conf_print_markdown(const sl_conf_entry *entries, size_t n, void *out_file);

#endif
