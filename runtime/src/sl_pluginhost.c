/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_pluginhost.c — loading plugins and running their calls (see
 * sl_pluginhost.h and the ABI in sl_plugin.h).
 *
 * Design: a plugin is untrusted in the sense that it may be built for another
 * ABI or break the call contract; every such case ends in a clear message
 * (load) or a FAIL outcome of class "plugin_error" (call), never in the host
 * touching freed memory. Each call has a small heap object (sl_plugin_call)
 * that collects the results through the host builder functions; the call
 * object outlives a misbehaving plugin's second complete() only as a
 * "finished" flag check, because it is freed after done() returns and a
 * later complete() would be a use after free we cannot detect — the contract
 * forbids it and the conformance test checks plugins keep it.
 *
 * Configuration: each plugin key becomes an sl_conf entry
 * "<kind>.<name>.<key>" whose offset points into an array of value slots
 * owned by the lib, so the ordinary loader (file, env, --set) fills them and
 * the host getters read them back by short key.
 */
#define _GNU_SOURCE /* strnlen, readlink, dlopen flags */
#include "sluice/sl_pluginhost.h"
#include "sluice/sl_pbfield.h"

#include <curl/curl.h>
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sluice/sl_err.h"
#include "sluice/sl_httpc.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"

/* ---- loaded objects and their configuration ------------------------------ */

typedef struct {
  char *s;
  int64_t i;
  double d;
  int b;
} slot;

struct sl_plugin_conf {
  const sl_plugin *desc;
  slot *slots; /* one per desc->conf entry */
};

struct sl_plugin_lib {
  void *dl;
  const sl_plugin *desc;
  char file[PATH_MAX];
  sl_conf_entry *entries; /* keys "<kind>.<name>.<key>" */
  char **keys;
  sl_plugin_conf conf;
};

static int name_ok(const char *s) {
  if (!s || !*s || strlen(s) > 32) return 0;
  for (; *s; s++)
    if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_')) return 0;
  return 1;
}

static char default_path[PATH_MAX];
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void default_init(void) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    snprintf(default_path, sizeof default_path, "/usr/local/lib/sluice/plugins");
    return;
  }
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash) *slash = '\0';
  snprintf(default_path, sizeof default_path, "%.*s/../lib/sluice/plugins",
           (int)(sizeof default_path - 32), exe);
}

static const char *default_path_get(void) {
  pthread_once(&default_once, default_init);
  return default_path;
}

const char *sl_plugin_default_path(void) { return default_path_get(); }

static void lib_free_conf(sl_plugin_lib *l) {
  if (l->keys)
    for (size_t i = 0; l->desc && i < l->desc->nconf; i++) free(l->keys[i]);
  free(l->keys);
  free(l->entries);
  if (l->conf.slots && l->desc)
    for (size_t i = 0; i < l->desc->nconf; i++) free(l->conf.slots[i].s);
  free(l->conf.slots);
  l->keys = NULL;
  l->entries = NULL;
  l->conf.slots = NULL;
}

void sl_plugin_lib_close(sl_plugin_lib *l) {
  if (!l) return;
  lib_free_conf(l);
  if (l->dl) dlclose(l->dl);
  free(l);
}

const sl_plugin *sl_plugin_lib_desc(const sl_plugin_lib *l) { return l ? l->desc : NULL; }
const char *sl_plugin_lib_file(const sl_plugin_lib *l) { return l ? l->file : NULL; }

/* Checks the descriptor and builds the configuration table. */
static int lib_check(sl_plugin_lib *l, const char *kind, const char *name, char *err,
                     size_t errlen) {
  const sl_plugin *d = l->desc;
  /* ABI 1 is adapted: the same layout, with what ABI 2 added in its
   * reserved slots (zero there: no declared fields) */
  if (d->abi_version != SL_PLUGIN_ABI_VERSION && d->abi_version != 1) {
    snprintf(err, errlen,
             "%s was built for plugin ABI %u; this sluice speaks ABI %u (and runs ABI 1 "
             "plugins as they are): rebuild the plugin against this sl_plugin.h",
             l->file, (unsigned)d->abi_version, (unsigned)SL_PLUGIN_ABI_VERSION);
    return SL_EPLUGIN;
  }
  size_t need = d->abi_version == 1 ? offsetof(sl_plugin, reads) : offsetof(sl_plugin, reserved);
  if (d->struct_size < need) {
    snprintf(err, errlen, "%s: descriptor struct_size %u is smaller than ABI %u needs (%zu)",
             l->file, (unsigned)d->struct_size, (unsigned)d->abi_version, need);
    return SL_EPLUGIN;
  }
  if (!d->kind || (strcmp(d->kind, SL_PLUGIN_KIND_STT) && strcmp(d->kind, SL_PLUGIN_KIND_GRADE) &&
                   strcmp(d->kind, SL_PLUGIN_KIND_STEP))) {
    snprintf(err, errlen, "%s: unknown plugin kind \"%s\"", l->file, d->kind ? d->kind : "");
    return SL_EPLUGIN;
  }
  if (strcmp(d->kind, SL_PLUGIN_KIND_STEP) == 0 && d->abi_version < 2) {
    snprintf(err, errlen, "%s: a step plugin needs ABI 2 (fields by name)", l->file);
    return SL_EPLUGIN;
  }
  if (kind && strcmp(d->kind, kind) != 0) {
    snprintf(err, errlen, "%s is a %s plugin, not a %s plugin", l->file, d->kind, kind);
    return SL_EPLUGIN;
  }
  if (!name_ok(d->name) || (name && !strchr(name, '/') && strcmp(d->name, name) != 0)) {
    snprintf(err, errlen,
             "%s: plugin name \"%s\" is not [a-z0-9_]{1,32} or does not match "
             "the file name",
             l->file, d->name ? d->name : "");
    return SL_EPLUGIN;
  }
  if (!d->create || !d->call || !d->destroy) {
    snprintf(err, errlen, "%s: descriptor lacks create/call/destroy", l->file);
    return SL_EPLUGIN;
  }
  const char *const *lists[2] = {d->abi_version >= 2 ? d->reads : NULL,
                                 d->abi_version >= 2 ? d->writes : NULL};
  for (int k = 0; k < 2; k++) {
    size_t n = 0;
    for (; lists[k] && lists[k][n] && n <= SL_PLUGIN_MAX_FIELDS; n++)
      if (strlen(lists[k][n]) == 0 || strlen(lists[k][n]) > 127) {
        snprintf(err, errlen, "%s: a declared %s field path is empty or too long", l->file,
                 k ? "written" : "read");
        return SL_EPLUGIN;
      }
    if (n > SL_PLUGIN_MAX_FIELDS) {
      snprintf(err, errlen, "%s: more than %d declared %s fields", l->file, SL_PLUGIN_MAX_FIELDS,
               k ? "written" : "read");
      return SL_EPLUGIN;
    }
  }
  if (d->nconf > 256 || (d->nconf && !d->conf)) {
    snprintf(err, errlen, "%s: bad configuration table", l->file);
    return SL_EPLUGIN;
  }
  size_t n = d->nconf ? d->nconf : 1;
  l->entries = calloc(n, sizeof *l->entries);
  l->keys = calloc(n, sizeof *l->keys);
  l->conf.slots = calloc(n, sizeof *l->conf.slots);
  l->conf.desc = d;
  if (!l->entries || !l->keys || !l->conf.slots) return SL_ENOMEM;
  for (size_t i = 0; i < d->nconf; i++) {
    const sl_plugin_conf_key *k = &d->conf[i];
    if (!name_ok(k->key) || k->type > SL_PLUGIN_CONF_BOOL || !k->desc) {
      snprintf(err, errlen, "%s: configuration key #%zu is malformed", l->file, i);
      return SL_EPLUGIN;
    }
    for (size_t j = 0; j < i; j++)
      if (strcmp(d->conf[j].key, k->key) == 0) {
        snprintf(err, errlen, "%s: configuration key \"%s\" declared twice", l->file, k->key);
        return SL_EPLUGIN;
      }
    size_t kl = strlen(d->kind) + strlen(d->name) + strlen(k->key) + 3;
    l->keys[i] = malloc(kl);
    if (!l->keys[i]) return SL_ENOMEM;
    snprintf(l->keys[i], kl, "%s.%s.%s", d->kind, d->name, k->key);
    static const sl_conf_type map[] = {SL_CONF_STR, SL_CONF_INT, SL_CONF_DOUBLE, SL_CONF_BOOL};
    static const size_t field[] = {offsetof(slot, s), offsetof(slot, i), offsetof(slot, d),
                                   offsetof(slot, b)};
    l->entries[i] = (sl_conf_entry){
        l->keys[i], map[k->type], k->def, i * sizeof(slot) + field[k->type], k->desc, k->secret};
  }
  return 0;
}

static int open_file(sl_plugin_lib **out, const char *file, const char *kind, const char *name,
                     char *err, size_t errlen) {
  sl_plugin_lib *l = calloc(1, sizeof *l);
  if (!l) return SL_ENOMEM;
  snprintf(l->file, sizeof l->file, "%s", file);
  dlerror();
  l->dl = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (!l->dl) {
    const char *e = dlerror();
    snprintf(err, errlen, "cannot load %s: %s", file, e ? e : "dlopen failed");
    free(l);
    return SL_EPLUGIN;
  }
  void *sym = dlsym(l->dl, SL_PLUGIN_ENTRY_SYMBOL);
  if (!sym) {
    snprintf(err, errlen, "%s does not export %s(): not a Sluice plugin", file,
             SL_PLUGIN_ENTRY_SYMBOL);
    sl_plugin_lib_close(l);
    return SL_EPLUGIN;
  }
  sl_plugin_entry_fn entry;
  memcpy(&entry, &sym, sizeof entry); /* object -> function pointer, POSIX-sanctioned */
  l->desc = entry();
  if (!l->desc) {
    snprintf(err, errlen, "%s: %s() returned NULL", file, SL_PLUGIN_ENTRY_SYMBOL);
    sl_plugin_lib_close(l);
    return SL_EPLUGIN;
  }
  int rc = lib_check(l, kind, name, err, errlen);
  if (rc) {
    if (rc == SL_ENOMEM) snprintf(err, errlen, "%s: out of memory", file);
    sl_plugin_lib_close(l);
    return rc;
  }
  *out = l;
  return 0;
}

int sl_plugin_lib_open(sl_plugin_lib **out, const char *path, const char *kind, const char *name,
                       char *err, size_t errlen) {
  if (!out || !name || !*name || !err) return SL_EINVAL;
  *out = NULL;
  if (strchr(name, '/')) return open_file(out, name, kind, name, err, errlen);
  if (!name_ok(name)) {
    snprintf(err, errlen, "plugin name \"%s\" must be [a-z0-9_]{1,32} or a path", name);
    return SL_EINVAL;
  }
  if (!path || !*path) path = default_path_get();
  char dirs[4096];
  snprintf(dirs, sizeof dirs, "%s", path);
  char *save = NULL;
  for (char *dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
    char file[PATH_MAX];
    snprintf(file, sizeof file, "%s/%s-%s.so", dir, kind ? kind : "", name);
    if (access(file, F_OK) == 0) return open_file(out, file, kind, name, err, errlen);
  }
  snprintf(err, errlen, "no %s plugin \"%s\" along the plugin path %s (files <kind>-<name>.so)",
           kind ? kind : "", name, path);
  return SL_ENOTFOUND;
}

sl_conf_bind sl_plugin_lib_conf(sl_plugin_lib *l) {
  sl_conf_bind b = {NULL, 0, NULL};
  if (!l) return b;
  b.entries = l->entries;
  b.n = l->desc->nconf;
  b.obj = l->conf.slots;
  return b;
}

static int cmp_lib(const void *a, const void *b) {
  const sl_plugin *x = (*(sl_plugin_lib *const *)a)->desc;
  const sl_plugin *y = (*(sl_plugin_lib *const *)b)->desc;
  int c = strcmp(x->kind, y->kind);
  return c ? c : strcmp(x->name, y->name);
}

int sl_plugin_scan(const char *path, const char *kind, sl_plugin_lib ***libs, size_t *n,
                   void (*warn)(const char *msg, void *ud), void *ud) {
  if (!libs || !n) return SL_EINVAL;
  *libs = NULL;
  *n = 0;
  if (!path || !*path) path = default_path_get();
  size_t cap = 0;
  char dirs[4096];
  snprintf(dirs, sizeof dirs, "%s", path);
  char *save = NULL;
  for (char *dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
    DIR *dp = opendir(dir);
    if (!dp) continue;
    struct dirent *de;
    while ((de = readdir(dp))) {
      size_t len = strlen(de->d_name);
      if (len < 4 || strcmp(de->d_name + len - 3, ".so") != 0) continue;
      if (kind && (strncmp(de->d_name, kind, strlen(kind)) != 0 || de->d_name[strlen(kind)] != '-'))
        continue;
      char file[PATH_MAX], err[1024];
      snprintf(file, sizeof file, "%s/%s", dir, de->d_name);
      sl_plugin_lib *l = NULL;
      int rc = open_file(&l, file, kind, file, err, sizeof err);
      if (rc) {
        if (warn) warn(err, ud);
        continue;
      }
      int dup = 0; /* the first directory on the path wins */
      for (size_t i = 0; i < *n; i++)
        dup |= strcmp((*libs)[i]->desc->kind, l->desc->kind) == 0 &&
               strcmp((*libs)[i]->desc->name, l->desc->name) == 0;
      if (dup) {
        sl_plugin_lib_close(l);
        continue;
      }
      if (*n == cap) {
        size_t nc = cap ? cap * 2 : 8;
        sl_plugin_lib **g = realloc(*libs, nc * sizeof *g);
        if (!g) {
          sl_plugin_lib_close(l);
          closedir(dp);
          return SL_ENOMEM;
        }
        *libs = g;
        cap = nc;
      }
      (*libs)[(*n)++] = l;
    }
    closedir(dp);
  }
  if (*n) qsort(*libs, *n, sizeof **libs, cmp_lib);
  return 0;
}

void sl_plugin_libs_free(sl_plugin_lib **libs, size_t n) {
  if (!libs) return;
  for (size_t i = 0; i < n; i++) sl_plugin_lib_close(libs[i]);
  free(libs);
}

int sl_plugin_env_known(const char *env) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static char **names;
  static size_t nnames;
  static int scanned;
  if (!env) return 0;
  pthread_mutex_lock(&mu);
  if (!scanned) {
    scanned = 1;
    sl_plugin_lib **libs = NULL;
    size_t n = 0;
    const char *p = getenv("SLUICE_PLUGIN_PATH");
    if (sl_plugin_scan(p, NULL, &libs, &n, NULL, NULL) == 0) {
      size_t total = 0;
      for (size_t i = 0; i < n; i++) total += libs[i]->desc->nconf;
      names = calloc(total ? total : 1, sizeof *names);
      for (size_t i = 0; names && i < n; i++)
        for (size_t j = 0; j < libs[i]->desc->nconf; j++) {
          char buf[256];
          if (sl_conf_env_name(libs[i]->keys[j], buf, sizeof buf) == 0 &&
              (names[nnames] = strdup(buf)))
            nnames++;
        }
    }
    sl_plugin_libs_free(libs, n);
  }
  int found = 0;
  for (size_t i = 0; i < nnames && !found; i++) found = strcmp(names[i], env) == 0;
  pthread_mutex_unlock(&mu);
  return found;
}

/* ---- host services --------------------------------------------------------- */

static const slot *conf_slot(const sl_plugin_conf *c, const char *key) {
  if (!c || !key) return NULL;
  for (size_t i = 0; i < c->desc->nconf; i++)
    if (strcmp(c->desc->conf[i].key, key) == 0) return &c->slots[i];
  return NULL;
}
static const char *h_conf_str(const sl_plugin_conf *c, const char *key) {
  const slot *s = conf_slot(c, key);
  return s && s->s ? s->s : "";
}
static int64_t h_conf_int(const sl_plugin_conf *c, const char *key) {
  const slot *s = conf_slot(c, key);
  return s ? s->i : 0;
}
static double h_conf_double(const sl_plugin_conf *c, const char *key) {
  const slot *s = conf_slot(c, key);
  return s ? s->d : 0;
}
static int h_conf_bool(const sl_plugin_conf *c, const char *key) {
  const slot *s = conf_slot(c, key);
  return s ? s->b : 0;
}

__attribute__((format(printf, 3, 4))) static void h_log(sl_plugin_log_level lvl, const char *key,
                                                        const char *fmt, ...) {
  sl_log_level l = lvl <= SL_PLUGIN_LOG_DEBUG  ? SL_LOG_DEBUG
                   : lvl == SL_PLUGIN_LOG_INFO ? SL_LOG_INFO
                   : lvl == SL_PLUGIN_LOG_WARN ? SL_LOG_WARN
                                               : SL_LOG_ERROR;
  if (!sl_log_enabled(l) || !fmt) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  sl_log(l, key, "%s", msg);
}

static void *h_alloc(size_t n) { return malloc(n ? n : 1); }
static void *h_realloc(void *p, size_t n) { return realloc(p, n ? n : 1); }
static void h_free(void *p) { free(p); }

static sl_plugin_metric *h_counter(const char *name, const char *labels, const char *help) {
  return (sl_plugin_metric *)sl_metrics_counter(name, labels, help ? help : "");
}
static void h_counter_add(sl_plugin_metric *m, uint64_t n) {
  if (m) sl_metric_add((sl_metric *)m, n);
}

/* ---- calls ------------------------------------------------------------------- */

typedef struct form_stream form_stream;

struct sl_plugin_call {
  sl_plugin_inst *inst;
  const sl_plugin_input *in; /* until complete() */
  sl_httpc *http;
  sl_plugin_done_fn done;
  void *ud;
  sl_plugin_result res;
  size_t words_cap;
  int completed;
  int64_t t0;
  form_stream *streams; /* form parts read from in->audio by transfers in flight */
};

static void streams_detach(sl_plugin_call *call);

struct sl_plugin_inst {
  sl_plugin_lib *lib;
  void *state;
  sl_plugin_host host;
};

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int dup_bounded(char **dst, const char *v, size_t max) {
  if (!v) v = "";
  size_t n = strnlen(v, max);
  char *c = malloc(n + 1);
  if (!c) return SL_ENOMEM;
  memcpy(c, v, n);
  c[n] = '\0';
  free(*dst);
  *dst = c;
  return 0;
}

/* ---- ABI 2: fields by name ---- */

static const ProtobufCMessage *in_msg(sl_plugin_call *call) {
  if (!call || call->completed || !call->in ||
      call->in->struct_size < offsetof(sl_plugin_input, reserved))
    return NULL;
  return call->in->message;
}
static const char *h_in_str(sl_plugin_call *call, const char *path) {
  const ProtobufCMessage *m = in_msg(call);
  return m ? sl_pbfield_str(m, path) : NULL;
}
static int h_in_num(sl_plugin_call *call, const char *path, double *out) {
  const ProtobufCMessage *m = in_msg(call);
  return m ? sl_pbfield_num(m, path, out) : SL_ENOTFOUND;
}
static const void *h_in_bytes(sl_plugin_call *call, const char *path, size_t *len) {
  const ProtobufCMessage *m = in_msg(call);
  return m ? sl_pbfield_bytes(m, path, len) : NULL;
}
static long h_in_count(sl_plugin_call *call, const char *path) {
  const ProtobufCMessage *m = in_msg(call);
  return m ? sl_pbfield_count(m, path) : -1;
}

static int declared(const char *const *list, const char *path) {
  for (size_t i = 0; list && list[i]; i++)
    if (strcmp(list[i], path) == 0) return 1;
  return 0;
}

/* a step's write by name: kept in the result's field list (its output);
 * it may write only what it declared */
static int field_put(sl_plugin_call *call, const char *path, const char *str, double num,
                     int is_num) {
  const sl_plugin *d = call->inst->lib->desc;
  int step = strcmp(d->kind, SL_PLUGIN_KIND_STEP) == 0;
  if (!step) return 0; /* stt and grade results have their own fields */
  if (!declared(d->writes, path)) {
    sl_log(SL_LOG_ERROR, NULL, "plugin %s wrote \"%s\", which it did not declare in writes",
           d->name, path);
    return SL_EINVAL;
  }
  sl_plugin_result *r = &call->res;
  sl_plugin_field *f = NULL;
  for (size_t i = 0; i < r->nfields && !f; i++)
    if (strcmp(r->fields[i].name, path) == 0) f = &r->fields[i];
  if (!f) {
    if (r->nfields >= SL_PLUGIN_MAX_FIELDS) return SL_ETOOBIG;
    f = &r->fields[r->nfields];
    memset(f, 0, sizeof *f);
    if (dup_bounded(&f->name, path, 128)) return SL_ENOMEM;
    r->nfields++;
  }
  f->is_num = is_num;
  f->num = num;
  free(f->str);
  f->str = NULL;
  return is_num ? 0 : dup_bounded(&f->str, str, SL_PLUGIN_MAX_TEXT);
}

static int h_out_str(sl_plugin_call *call, const char *field, const char *v) {
  if (!call || !field || !v || call->completed) return SL_EINVAL;
  int rc = field_put(call, field, v, 0, 0);
  if (rc) return rc;
  sl_plugin_result *r = &call->res;
  char **dst = strcmp(field, "text") == 0        ? &r->text
               : strcmp(field, "language") == 0  ? &r->language
               : strcmp(field, "engine") == 0    ? &r->engine
               : strcmp(field, "level") == 0     ? &r->level
               : strcmp(field, "feedback") == 0  ? &r->feedback
               : strcmp(field, "raw_reply") == 0 ? &r->raw_reply
                                                 : NULL;
  if (!dst) return 0; /* unknown fields are ignored so the set can grow */
  return dup_bounded(dst, v, dst == &r->raw_reply ? SL_PLUGIN_MAX_RAW_REPLY : SL_PLUGIN_MAX_TEXT);
}

static int h_out_object(sl_plugin_call *call, const char *field, const char *suffix,
                        const char *content_type, const void *data, size_t len) {
  if (!call || !field || !suffix || !content_type || (!data && len) || call->completed)
    return SL_EINVAL;
  const sl_plugin *d = call->inst->lib->desc;
  if (strcmp(d->kind, SL_PLUGIN_KIND_STEP) || !declared(d->reads, SL_PLUGIN_READ_OBJECT))
    return SL_EINVAL;
  size_t sl = strlen(suffix);
  if (sl == 0 || sl > 32 || strlen(content_type) >= sizeof call->res.object_type ||
      strlen(field) >= sizeof call->res.object_field)
    return SL_EINVAL;
  for (size_t i = 0; i < sl; i++)
    if (!isalnum((unsigned char)suffix[i]) && !strchr("._-", suffix[i])) return SL_EINVAL;
  if (len > SL_PLUGIN_MAX_OBJECT) return SL_ETOOBIG;
  int rc = field_put(call, field, "", 0, 0); /* declared? (the key is filled in later) */
  if (rc) return rc;
  void *copy = malloc(len ? len : 1);
  if (!copy) return SL_ENOMEM;
  if (len) memcpy(copy, data, len);
  sl_plugin_result *r = &call->res;
  free(r->object);
  r->object = copy;
  r->object_len = len;
  snprintf(r->object_field, sizeof r->object_field, "%s", field);
  snprintf(r->object_suffix, sizeof r->object_suffix, "%s", suffix);
  snprintf(r->object_type, sizeof r->object_type, "%s", content_type);
  return 0;
}

static int h_out_num(sl_plugin_call *call, const char *field, double v) {
  if (!call || !field || call->completed) return SL_EINVAL;
  if (v != v) return SL_EINVAL; /* NaN */
  int rc = field_put(call, field, NULL, v, 1);
  if (rc) return rc;
  sl_plugin_result *r = &call->res;
  double *dst = strcmp(field, "duration_s") == 0         ? &r->duration_s
                : strcmp(field, "segments") == 0         ? &r->segments
                : strcmp(field, "segment_pauses") == 0   ? &r->segment_pauses
                : strcmp(field, "cost_units") == 0       ? &r->cost_units
                : strcmp(field, "score") == 0            ? &r->score
                : strcmp(field, "words_per_minute") == 0 ? &r->words_per_minute
                : strcmp(field, "lexical_variety") == 0  ? &r->lexical_variety
                : strcmp(field, "filler_rate") == 0      ? &r->filler_rate
                : strcmp(field, "relevance") == 0        ? &r->relevance
                                                         : NULL;
  if (dst) *dst = v;
  return 0;
}

static int h_out_word(sl_plugin_call *call, const char *w, double s, double e) {
  if (!call || !w || call->completed) return SL_EINVAL;
  sl_plugin_result *r = &call->res;
  if (r->nwords >= SL_PLUGIN_MAX_WORDS) return SL_ETOOBIG;
  if (r->nwords == call->words_cap) {
    size_t nc = call->words_cap ? call->words_cap * 2 : 64;
    sl_plugin_word *g = realloc(r->words, nc * sizeof *g);
    if (!g) return SL_ENOMEM;
    r->words = g;
    call->words_cap = nc;
  }
  char *copy = NULL;
  if (dup_bounded(&copy, w, 256)) return SL_ENOMEM;
  r->words[r->nwords++] = (sl_plugin_word){copy, s, e};
  return 0;
}

static int h_out_criterion(sl_plugin_call *call, const char *name, double score,
                           const char *comment) {
  if (!call || !name || call->completed || score != score) return SL_EINVAL;
  sl_plugin_result *r = &call->res;
  if (r->ncriteria >= SL_PLUGIN_MAX_CRITERIA) return SL_ETOOBIG;
  sl_plugin_criterion *c = &r->criteria[r->ncriteria];
  if (dup_bounded(&c->name, name, 64) || dup_bounded(&c->comment, comment, 1024)) {
    free(c->name);
    free(c->comment);
    c->name = c->comment = NULL;
    return SL_ENOMEM;
  }
  c->score = score;
  r->ncriteria++;
  return 0;
}

static void h_complete(sl_plugin_call *call, sl_plugin_outcome o, int64_t retry_after_ms,
                       int throttled, const char *cls, const char *reason) {
  if (!call) return;
  if (call->completed) { /* a second complete(): ignore, the first one counts */
    sl_log(SL_LOG_ERROR, NULL, "plugin %s called complete() twice; ignored",
           call->inst->lib->desc->name);
    return;
  }
  call->completed = 1;
  sl_plugin_result *r = &call->res;
  if (o != SL_PLUGIN_DONE && o != SL_PLUGIN_RETRY && o != SL_PLUGIN_FAIL) {
    o = SL_PLUGIN_FAIL;
    cls = "plugin_error";
    reason = "plugin reported an unknown outcome";
  }
  r->outcome = o;
  if (o != SL_PLUGIN_DONE) {
    snprintf(r->error_class, sizeof r->error_class, "%s",
             cls && *cls ? cls : (o == SL_PLUGIN_RETRY ? "provider_unavailable" : "plugin_failed"));
    snprintf(r->reason, sizeof r->reason, "%s", reason && *reason ? reason : "(no reason given)");
    r->retry_after_ms = retry_after_ms > 0 ? retry_after_ms : 0;
    r->throttled = o == SL_PLUGIN_RETRY && throttled;
  }
  r->elapsed_ms = mono_ms() - call->t0;
  if (!r->engine) dup_bounded(&r->engine, call->inst->lib->desc->name, 64);
  streams_detach(call); /* the input is the stage's again after done() */
  /* SYNC calls are handed back by sl_plugin_run once call() returns */
  if (!sl_plugin_inst_is_sync(call->inst)) {
    sl_plugin_done_fn done = call->done;
    void *ud = call->ud;
    sl_plugin_result res = call->res;
    free(call);
    done(&res, ud);
  }
}

/* HTTP: forward to the stage's client, building multipart forms with curl.
 *
 * A form part whose bytes lie within the call's input object (in->audio:
 * the answer stt fetched, up to stt.max_audio_bytes) is not copied: libcurl
 * reads it from the host's buffer as it sends (curl_mime_data_cb, with a
 * seek callback so it can rewind to send again). Ownership: the stage
 * holds that buffer until the call completes (sl_plugin_run's done), and
 * sl_httpc frees a transfer's form before its callback runs, so a plugin
 * that completes from its HTTP callback — as every plugin here does —
 * never outlives a stream. One that completes while a transfer is still
 * sending gets that stream detached first (h_complete copies the rest of
 * the bytes for it), so libcurl never reads memory the stage has freed.
 * Every other part is copied (curl_mime_data). */
struct form_stream {
  const unsigned char *p; /* the bytes sent: the input's, or own after a detach */
  size_t len, pos;
  unsigned char *own;   /* the copy a detach made, or NULL */
  int broken;           /* detach found no memory: the transfer aborts */
  sl_plugin_call *call; /* while attached to the call's input, else NULL */
  form_stream *prev, *next;
};

static size_t stream_read(char *buf, size_t size, size_t nitems, void *arg) {
  form_stream *s = arg;
  if (s->broken) return CURL_READFUNC_ABORT;
  size_t n = size * nitems, left = s->len - s->pos;
  if (n > left) n = left;
  memcpy(buf, s->p + s->pos, n);
  s->pos += n;
  return n;
}

static int stream_seek(void *arg, curl_off_t off, int origin) {
  form_stream *s = arg;
  curl_off_t base = origin == SEEK_SET   ? 0
                    : origin == SEEK_CUR ? (curl_off_t)s->pos
                                         : (curl_off_t)s->len;
  if (origin != SEEK_SET && origin != SEEK_CUR && origin != SEEK_END) return CURL_SEEKFUNC_FAIL;
  if (off < -base || base + off > (curl_off_t)s->len) return CURL_SEEKFUNC_FAIL;
  s->pos = (size_t)(base + off);
  return CURL_SEEKFUNC_OK;
}

static void stream_unlink(form_stream *s) {
  if (!s->call) return;
  if (s->prev)
    s->prev->next = s->next;
  else
    s->call->streams = s->next;
  if (s->next) s->next->prev = s->prev;
  s->call = NULL;
  s->prev = s->next = NULL;
}

/* libcurl frees the part (the form is freed when its transfer ends) */
static void stream_free(void *arg) {
  form_stream *s = arg;
  stream_unlink(s);
  free(s->own);
  free(s);
}

/* The call completes while transfers still read its input: they get their
 * own copy (or, without memory, abort) before the stage frees the input. */
static void streams_detach(sl_plugin_call *call) {
  while (call->streams) {
    form_stream *s = call->streams;
    stream_unlink(s);
    s->own = malloc(s->len ? s->len : 1);
    if (s->own) {
      memcpy(s->own, s->p, s->len);
      s->p = s->own;
    } else {
      s->broken = 1;
      s->p = NULL;
    }
  }
}

/* p lies within the call's input object: stream it from there */
static int in_object(const sl_plugin_call *call, const sl_plugin_form_part *p) {
  const sl_plugin_input *in = call->in;
  if (!in || !in->audio || !p->data || !p->len) return 0;
  uintptr_t a = (uintptr_t)in->audio, d = (uintptr_t)p->data;
  return d >= a && d - a <= in->audio_len && p->len <= in->audio_len - (d - a);
}

static int form_data(sl_plugin_call *call, curl_mimepart *part, const sl_plugin_form_part *p) {
  if (!in_object(call, p))
    return curl_mime_data(part, p->data ? p->data : "", p->data ? p->len : 0) == CURLE_OK
               ? 0
               : SL_ENOMEM;
  form_stream *s = calloc(1, sizeof *s);
  if (!s) return SL_ENOMEM;
  s->p = p->data;
  s->len = p->len;
  if (curl_mime_data_cb(part, (curl_off_t)p->len, stream_read, stream_seek, stream_free, s) !=
      CURLE_OK) {
    free(s);
    return SL_ENOMEM;
  }
  s->call = call; /* from here on the part owns s (stream_free) */
  s->next = call->streams;
  if (call->streams) call->streams->prev = s;
  call->streams = s;
  return 0;
}

typedef struct {
  sl_plugin_http_cb cb;
  void *ud;
} http_fwd;

static void on_http(const sl_httpc_response *r, void *ud) {
  http_fwd *f = ud;
  sl_plugin_http_response pr = {r->status,   r->error,          r->timed_out, r->body,
                                r->body_len, r->retry_after_ms, r->total_s};
  sl_plugin_http_cb cb = f->cb;
  void *cud = f->ud;
  free(f);
  cb(&pr, cud);
}

static int h_http_send(sl_plugin_call *call, const sl_plugin_http_request *q, sl_plugin_http_cb cb,
                       void *ud) {
  if (!call || !q || !cb || call->completed || !call->http) return SL_EINVAL;
  if (q->struct_size < offsetof(sl_plugin_http_request, reserved) || !q->url || !q->method)
    return SL_EINVAL;
  curl_mime *mime = NULL;
  if (q->nform) {
    if (!q->form) return SL_EINVAL;
    mime = curl_mime_init(NULL);
    if (!mime) return SL_ENOMEM;
    for (size_t i = 0; i < q->nform; i++) {
      const sl_plugin_form_part *p = &q->form[i];
      curl_mimepart *part = curl_mime_addpart(mime);
      if (!part || !p->name || curl_mime_name(part, p->name) != CURLE_OK ||
          form_data(call, part, p) != 0 ||
          (p->filename && curl_mime_filename(part, p->filename) != CURLE_OK) ||
          (p->content_type && curl_mime_type(part, p->content_type) != CURLE_OK)) {
        curl_mime_free(mime);
        return SL_EINVAL;
      }
    }
  }
  http_fwd *f = malloc(sizeof *f);
  if (!f) {
    curl_mime_free(mime);
    return SL_ENOMEM;
  }
  f->cb = cb;
  f->ud = ud;
  sl_httpc_request r = {.method = q->method,
                        .url = q->url,
                        .headers = q->headers,
                        .body = mime ? NULL : q->body,
                        .body_len = mime ? 0 : q->body_len,
                        .mime = mime,
                        .timeout_ms = q->timeout_ms,
                        .connect_timeout_ms = q->connect_timeout_ms,
                        .max_response = q->max_response};
  int rc = sl_httpc_send(call->http, &r, on_http, f);
  if (rc) free(f); /* sl_httpc frees the mime it was given, sent or not */
  return rc;
}

int sl_plugin_inst_new(sl_plugin_inst **out, sl_plugin_lib *lib, char *err, size_t errlen) {
  if (!out || !lib || !err) return SL_EINVAL;
  *out = NULL;
  sl_plugin_inst *in = calloc(1, sizeof *in);
  if (!in) return SL_ENOMEM;
  in->lib = lib;
  in->host =
      (sl_plugin_host){.abi_version = SL_PLUGIN_ABI_VERSION,
                       .struct_size = sizeof(sl_plugin_host),
                       .log = h_log,
                       .alloc = h_alloc,
                       .realloc = h_realloc,
                       .free = h_free,
                       .conf_str = h_conf_str,
                       .conf_int = h_conf_int,
                       .conf_double = h_conf_double,
                       .conf_bool = h_conf_bool,
                       .counter = h_counter,
                       .counter_add = h_counter_add,
                       .http_send = (lib->desc->flags & SL_PLUGIN_SYNC) ? NULL : h_http_send,
                       .out_str = h_out_str,
                       .out_num = h_out_num,
                       .out_word = h_out_word,
                       .out_criterion = h_out_criterion,
                       .complete = h_complete,
                       .in_str = h_in_str,
                       .in_num = h_in_num,
                       .in_bytes = h_in_bytes,
                       .in_count = h_in_count,
                       .out_object = (lib->desc->flags & SL_PLUGIN_SYNC) ? h_out_object : NULL};
  err[0] = '\0';
  int rc = lib->desc->create(&in->host, &lib->conf, &in->state, err, errlen);
  if (rc) {
    if (!err[0]) snprintf(err, errlen, "plugin %s: create failed", lib->desc->name);
    free(in);
    return rc < 0 ? rc : SL_EPLUGIN;
  }
  *out = in;
  return 0;
}

void sl_plugin_inst_free(sl_plugin_inst *in) {
  if (!in) return;
  in->lib->desc->destroy(in->state);
  free(in);
}

int sl_plugin_inst_is_sync(const sl_plugin_inst *in) {
  return in && (in->lib->desc->flags & SL_PLUGIN_SYNC) != 0;
}

void sl_plugin_result_clear(sl_plugin_result *r) {
  if (!r) return;
  free(r->text);
  free(r->language);
  free(r->level);
  free(r->feedback);
  free(r->raw_reply);
  free(r->engine);
  for (size_t i = 0; i < r->nwords; i++) free((char *)r->words[i].word);
  free(r->words);
  for (size_t i = 0; i < r->ncriteria; i++) {
    free(r->criteria[i].name);
    free(r->criteria[i].comment);
  }
  for (size_t i = 0; i < r->nfields; i++) {
    free(r->fields[i].name);
    free(r->fields[i].str);
  }
  free(r->object);
  memset(r, 0, sizeof *r);
}

int sl_plugin_run(sl_plugin_inst *in, const sl_plugin_input *input, sl_httpc *http,
                  sl_plugin_done_fn done, void *ud) {
  if (!in || !input || !done) return SL_EINVAL;
  int sync = sl_plugin_inst_is_sync(in);
  if (!sync && !http) return SL_EINVAL;
  sl_plugin_call *call = calloc(1, sizeof *call);
  if (!call) return SL_ENOMEM;
  call->inst = in;
  call->in = input;
  call->http = sync ? NULL : http;
  call->done = done;
  call->ud = ud;
  call->t0 = mono_ms();
  in->lib->desc->call(in->state, input, call);
  if (sync) {
    if (!call->completed) {
      h_complete(call, SL_PLUGIN_FAIL, 0, 0, "plugin_error",
                 "SYNC plugin returned without completing the call");
    }
    sl_plugin_result res = call->res;
    free(call);
    done(&res, ud);
  }
  return 0;
}

int sl_plugin_check_fields(const sl_plugin_lib *lib, const ProtobufCMessageDescriptor *in,
                           const ProtobufCMessageDescriptor *out, char *err, size_t errlen) {
  if (!lib) return SL_EINVAL;
  const sl_plugin *d = lib->desc;
  if (d->abi_version < 2) return 0;
  char why[256];
  for (size_t i = 0; d->reads && d->reads[i]; i++) {
    if (strcmp(d->reads[i], SL_PLUGIN_READ_OBJECT) == 0) {
      if (strcmp(d->kind, SL_PLUGIN_KIND_STEP) || !(d->flags & SL_PLUGIN_SYNC)) {
        snprintf(err, errlen,
                 "plugin %s/%s reads \"%s\": only SYNC step plugins get the "
                 "input's object",
                 d->kind, d->name, SL_PLUGIN_READ_OBJECT);
        return SL_ECONFIG;
      }
      if (!in || !sl_plugin_object_path(lib, in)) {
        snprintf(err, errlen,
                 "plugin %s/%s reads \"%s\": its input %s names no object "
                 "(no string object_key or upload.object_key)",
                 d->kind, d->name, SL_PLUGIN_READ_OBJECT,
                 in ? in->name : "(not a protobuf message)");
        return SL_ECONFIG;
      }
      continue;
    }
    if (!in) {
      snprintf(err, errlen, "plugin %s/%s reads \"%s\" but its input is not a protobuf message",
               d->kind, d->name, d->reads[i]);
      return SL_ECONFIG;
    }
    if (sl_pbfield_resolve(in, d->reads[i], NULL, why, sizeof why) < 0) {
      snprintf(err, errlen, "plugin %s/%s reads \"%s\": %s", d->kind, d->name, d->reads[i], why);
      return SL_ECONFIG;
    }
  }
  for (size_t i = 0; d->writes && d->writes[i]; i++) {
    int rep = 0, k = out ? sl_pbfield_resolve(out, d->writes[i], &rep, why, sizeof why) : -1;
    if (!out) snprintf(why, sizeof why, "its output is not a protobuf message");
    if (k >= 0 && (rep || (k != SL_PBF_STRING && k != SL_PBF_NUMBER))) {
      snprintf(why, sizeof why, "only single strings and numbers can be written");
      k = -1;
    }
    if (k < 0) {
      snprintf(err, errlen, "plugin %s/%s writes \"%s\": %s", d->kind, d->name, d->writes[i], why);
      return SL_ECONFIG;
    }
  }
  return 0;
}

const char *sl_plugin_object_path(const sl_plugin_lib *lib, const ProtobufCMessageDescriptor *in) {
  if (!lib || !in || lib->desc->abi_version < 2 ||
      !declared(lib->desc->reads, SL_PLUGIN_READ_OBJECT))
    return NULL;
  static const char *const paths[] = {"object_key", "upload.object_key"};
  char why[256];
  for (size_t i = 0; i < 2; i++) {
    int rep = 0;
    if (sl_pbfield_resolve(in, paths[i], &rep, why, sizeof why) == SL_PBF_STRING && !rep)
      return paths[i];
  }
  return NULL;
}

const char *sl_plugin_outcome_name(sl_plugin_outcome o) {
  return o == SL_PLUGIN_DONE ? "done" : o == SL_PLUGIN_RETRY ? "retry" : "failed";
}

void sl_plugin_print_markdown(sl_plugin_lib **libs, size_t n, void *out) {
  FILE *f = out;
  fprintf(f,
          "# Sluice plugins\n\nGenerated by `sluice plugin doc` from the plugins' own "
          "configuration tables (plugin ABI %u). Choose one with `sluice stt --plugin "
          "NAME` / `sluice grade --plugin NAME` (or `stt.plugin` / `grade.plugin`); a "
          "step plugin is named by its stage in the pipeline description "
          "([pipeline.md](pipeline.md)); keys are set like every other setting (file, "
          "environment, `--set`). The dev stack and `make demo` transcribe with a local "
          "Whisper server behind `stt/openai`, `stt/pocketsphinx` being the light fallback: "
          "why, measured, in [plugins-openai.md](plugins-openai.md#the-offline-default-a-"
          "local-whisper-server-behind-sttopenai).\n",
          (unsigned)SL_PLUGIN_ABI_VERSION);
  for (size_t i = 0; i < n; i++) {
    const sl_plugin *d = libs[i]->desc;
    fprintf(f, "\n## %s/%s %s\n\n%s. %s.\n\n", d->kind, d->name, d->version ? d->version : "",
            d->description ? d->description : "",
            (d->flags & SL_PLUGIN_SYNC) ? "Synchronous: runs on the stage's worker pool, one "
                                          "instance per worker thread"
                                        : "Asynchronous: runs on the stage's event loop with "
                                          "the shared HTTP client");
    if (d->nconf)
      sl_conf_print_markdown(libs[i]->entries, d->nconf, f);
    else
      fprintf(f, "No settings.\n");
  }
}
