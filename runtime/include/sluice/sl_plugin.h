/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_plugin.h — the plugin ABI: how STT providers, graders and pipeline
 * steps plug into their stages. This is the only Sluice header a plugin
 * includes (plus sl_err.h for error codes); plugins do not link the runtime.
 *
 * ABI 2 (this header) adds, in what were reserved slots, fields by name:
 * a plugin reads its input message with host->in_str/in_num/in_bytes/
 * in_count ("text", "upload.question_no", "words.3.word") and writes its
 * output with out_str/out_num, and declares both (reads, writes) so the
 * host refuses it at start-up when the messages around it lack a field.
 * A "step" plugin (kind SL_PLUGIN_KIND_STEP) is a whole stage of the
 * pipeline: `sluice stage NAME` consumes the stage's input topic, hands each
 * message to the plugin and writes the output message (a copy of the input
 * when both have one type, with the plugin's writes applied). ABI 1 plugins
 * (stt and grade kinds) are still accepted, adapted: their layout is the
 * same, and the new slots read as absent (no declared fields, no in_*
 * use). docs/plugin-abi.md.
 *
 * A plugin is a shared object exporting ONE symbol, SL_PLUGIN_ENTRY_SYMBOL:
 *
 *     const sl_plugin *sluice_plugin_entry(void);
 *
 * returning a static descriptor. The host dlopen()s the object with
 * RTLD_NOW | RTLD_LOCAL, calls the entry, and refuses the plugin with a
 * clear message unless abi_version is SL_PLUGIN_ABI_VERSION, or 1 (an stt
 * or grade plugin, adapted as above), and struct_size covers every field
 * this host reads for that version. Descriptors, host tables and inputs
 * all start with (abi_version or struct_size) and end in reserved slots, so
 * fields can be added in a minor revision without breaking built plugins:
 * a reader checks struct_size before touching a field added later.
 *
 * Life of a plugin:
 *   create(host, conf) -> instance state   (once per instance; may be slow)
 *   call(state, input, call) ...           (per question)
 *   destroy(state)
 *
 * Threading. A plugin is either
 *   - SYNC (flags & SL_PLUGIN_SYNC): call() may block (CPU-bound decoding,
 *     a local model). The host runs it on its worker pool and creates one
 *     instance per worker thread, so an instance is never used by two
 *     threads at once. host->http_send is not available (NULL in calls).
 *   - ASYNC (no SL_PLUGIN_SYNC): call() runs on the stage's event-loop
 *     thread and must not block. It starts I/O with host->http_send() and
 *     returns; the HTTP callback (also on the loop thread) finishes the
 *     call. One instance serves every call; thousands may be in flight.
 * Either way, every call ends with exactly one host->complete(call, ...),
 * after which the plugin must not touch `call` or the input again. A SYNC
 * plugin completes before call() returns.
 *
 * Results are written through host builder functions (out_str, out_num,
 * out_word, out_criterion) before complete(); the host copies what it is
 * given, so the plugin keeps ownership of its strings.
 *
 * Outcomes: SL_PLUGIN_DONE; SL_PLUGIN_RETRY (transient: the runtime's
 * retry tiers and time budget apply; retry_after_ms > 0 asks for at least
 * that delay, e.g. from Retry-After; throttled = 1 reports a 429 so every
 * replica pauses the provider); SL_PLUGIN_FAIL (permanent: dead-lettered
 * with the reason and shown to the user as failed). Each carries a short
 * machine-readable error class ("undecodable_audio", "provider_rejected")
 * and a human reason.
 *
 * Configuration: each plugin declares its keys in a table (conf, nconf).
 * The host exposes them as "<kind>.<name>.<key>" (file, --set) and
 * SLUICE_<KIND>_<NAME>_<KEY> (environment), rejects unknown keys, checks
 * types, and generates docs/plugins.md from the tables. The plugin reads the
 * resolved values with host->conf_str/conf_int/conf_double/conf_bool.
 */
#ifndef SLUICE_SL_PLUGIN_H
#define SLUICE_SL_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

/* Bumped on any incompatible change to the structures below. */
#define SL_PLUGIN_ABI_VERSION 2u
#define SL_PLUGIN_ENTRY_SYMBOL "sluice_plugin_entry"

#define SL_PLUGIN_KIND_STT "stt"
#define SL_PLUGIN_KIND_GRADE "grade"
#define SL_PLUGIN_KIND_STEP "step" /* a pipeline step: message in, message out */

/* Descriptor flags. */
#define SL_PLUGIN_SYNC 0x1u /* call() blocks: run it on the worker pool */

/* The largest object a step may store with host->out_object. */
#define SL_PLUGIN_MAX_OBJECT (256u << 20)

/* The pseudo-field a step lists in reads to get its input's object. */
#define SL_PLUGIN_READ_OBJECT "@object"

typedef enum {
  SL_PLUGIN_DONE = 0,
  SL_PLUGIN_RETRY = 1,
  SL_PLUGIN_FAIL = 2,
} sl_plugin_outcome;

typedef enum {
  SL_PLUGIN_LOG_DEBUG = 0,
  SL_PLUGIN_LOG_INFO = 1,
  SL_PLUGIN_LOG_WARN = 2,
  SL_PLUGIN_LOG_ERROR = 3,
} sl_plugin_log_level;

typedef enum {
  SL_PLUGIN_CONF_STR = 0,
  SL_PLUGIN_CONF_INT = 1, /* int64_t */
  SL_PLUGIN_CONF_DOUBLE = 2,
  SL_PLUGIN_CONF_BOOL = 3, /* true/false/yes/no/1/0/on/off */
} sl_plugin_conf_type;

/* One configuration key. key is the short name ("model"); the host
 * prefixes it with "<kind>.<plugin>.". secret = 1: never printed or logged
 * (API keys). */
typedef struct {
  const char *key;
  sl_plugin_conf_type type;
  const char *def;  /* default as text; NULL = "" / 0 */
  const char *desc; /* one line for --help and docs/plugins.md */
  int secret;
} sl_plugin_conf_key;

/* Opaque host objects. */
typedef struct sl_plugin_call sl_plugin_call; /* one question in progress */
typedef struct sl_plugin_conf sl_plugin_conf; /* resolved configuration */
typedef struct sl_plugin_metric sl_plugin_metric;

/* One recognized word (times in seconds from the start of the audio). */
typedef struct {
  const char *word;
  double start_s;
  double end_s;
} sl_plugin_word;

/* The input of one call. Fields a kind does not use are NULL/0. Everything
 * is borrowed from the host until complete() (or, for SYNC plugins, until
 * call() returns). */
typedef struct {
  uint32_t struct_size;
  uint32_t question_no;
  const char *key;      /* "<submission>/<question>", for logs */
  const char *prompt;   /* the question asked, or "" */
  const char *language; /* BCP 47 hint ("en"), or "" */
  /* stt, and steps reading "@object" */
  const void *audio; /* the uploaded object's bytes */
  size_t audio_len;
  const char *content_type; /* as signed at upload, e.g. "audio/wav" */
  const char *filename;     /* object key's last segment, e.g. "3.wav" */
  /* grade */
  const char *transcript; /* "" when nothing was recognized */
  double duration_s;      /* audio duration, > 0 when known */
  const sl_plugin_word *words;
  size_t nwords;
  /* ABI 2: the input message itself, read with host->in_* (opaque) */
  const void *message;
  void *reserved[7];
} sl_plugin_input;

/* HTTP for async plugins: the stage's client (libcurl multi on its loop). */
/* A part's bytes need not outlive http_send: the host copies them, except
 * a part lying within the call's in->audio, which it streams to the server
 * from the buffer it holds for the call (no second copy of the answer in
 * memory) and keeps readable until the transfer is over, even when the
 * plugin completes first. */
typedef struct {
  const char *name; /* form field name */
  const void *data; /* value bytes (see above) */
  size_t len;
  const char *filename;     /* non-NULL: a file part */
  const char *content_type; /* or NULL */
} sl_plugin_form_part;

typedef struct {
  uint32_t struct_size;
  const char *method; /* "POST" */
  const char *url;
  const char *const *headers; /* "Name: value", NULL-terminated, or NULL */
  const void *body;           /* copied; or NULL */
  size_t body_len;
  const sl_plugin_form_part *form; /* multipart/form-data parts (then body is unused) */
  size_t nform;
  long timeout_ms;         /* whole transfer; 0 = 30 s */
  long connect_timeout_ms; /* 0 = 5 s */
  size_t max_response;     /* 0 = 8 MiB */
  void *reserved[4];
} sl_plugin_http_request;

typedef struct {
  long status;       /* HTTP status; 0 when the transfer failed */
  const char *error; /* transport error when status == 0, else "" */
  int timed_out;
  const char *body; /* NUL-terminated */
  size_t body_len;
  int64_t retry_after_ms; /* parsed Retry-After, else 0 */
  double total_s;
} sl_plugin_http_response;

/* Valid only during the callback. Runs on the loop thread, exactly once. */
typedef void (*sl_plugin_http_cb)(const sl_plugin_http_response *r, void *ud);

/* Services the host gives a plugin. Valid from create() to destroy(). */
typedef struct sl_plugin_host {
  uint32_t abi_version;
  uint32_t struct_size;

  /* Logging (JSON lines with the question key when key != NULL). */
  void (*log)(sl_plugin_log_level level, const char *key, const char *fmt, ...)
      __attribute__((format(printf, 3, 4)));

  /* Allocation (the process allocator; use it or your own consistently). */
  void *(*alloc)(size_t n);
  void *(*realloc)(void *p, size_t n);
  void (*free)(void *p);

  /* Configuration values, by the short key of the plugin's table. Strings
   * live as long as the conf. Unknown keys return ""/0. */
  const char *(*conf_str)(const sl_plugin_conf *c, const char *key);
  int64_t (*conf_int)(const sl_plugin_conf *c, const char *key);
  double (*conf_double)(const sl_plugin_conf *c, const char *key);
  int (*conf_bool)(const sl_plugin_conf *c, const char *key);

  /* Metrics (Prometheus; names must start with "sluice_"). Registration at
   * create() time; updates from any thread. labels: "a=\"b\"" or NULL. */
  sl_plugin_metric *(*counter)(const char *name, const char *labels, const char *help);
  void (*counter_add)(sl_plugin_metric *m, uint64_t n);

  /* Async plugins only (NULL in SYNC calls): starts a request; cb runs
   * exactly once on the loop thread, never from inside http_send. Returns 0
   * or a negative code (then cb will not run). */
  int (*http_send)(sl_plugin_call *call, const sl_plugin_http_request *req, sl_plugin_http_cb cb,
                   void *ud);

  /* Results. Fields (unknown ones are ignored, so they can grow):
   *   stt:   str "text", "language", "engine"; num "duration_s", "cost_units"
   *          (audio seconds billed); words via out_word.
   *   grade: str "level", "feedback", "engine", "raw_reply"; num "score"
   *          (0..100), "words_per_minute", "lexical_variety", "filler_rate",
   *          "relevance", "cost_units" (tokens); criteria via out_criterion.
   * Return 0, or a negative code when out of memory / limits. */
  int (*out_str)(sl_plugin_call *call, const char *field, const char *value);
  int (*out_num)(sl_plugin_call *call, const char *field, double value);
  int (*out_word)(sl_plugin_call *call, const char *word, double start_s, double end_s);
  int (*out_criterion)(sl_plugin_call *call, const char *name, double score, const char *comment);

  /* Ends the call. error_class/reason are ignored for DONE. */
  void (*complete)(sl_plugin_call *call, sl_plugin_outcome outcome, int64_t retry_after_ms,
                   int throttled, const char *error_class, const char *reason);

  /* ABI 2: the input message by field path (valid until complete()):
   * in_str/in_bytes return NULL, in_num SL_ENOTFOUND and in_count -1 when
   * the path leads to nothing of that kind. Paths: "text",
   * "upload.question_no", "words.2.word". For a step, out_str/out_num
   * write fields of the output message by path (only those declared in
   * `writes`). */
  const char *(*in_str)(sl_plugin_call *call, const char *path);
  int (*in_num)(sl_plugin_call *call, const char *path, double *out);
  const void *(*in_bytes)(sl_plugin_call *call, const char *path, size_t *len);
  long (*in_count)(sl_plugin_call *call, const char *path);

  /* ABI 2, steps that declare "@object" in reads: a new object stored in
   * the answers' bucket beside the input's, under
   * "derived/<input object key><suffix>" (suffix [A-Za-z0-9._-], at most
   * 32 bytes, e.g. ".16k.flac"), before the output is written; the key
   * goes into the string field `field` of the output (declared in
   * writes). The host copies data (at most SL_PLUGIN_MAX_OBJECT bytes);
   * one object per call (a second call replaces the first). SYNC plugins
   * only (NULL for async ones). Returns 0 or a negative code. */
  int (*out_object)(sl_plugin_call *call, const char *field, const char *suffix,
                    const char *content_type, const void *data, size_t len);

  void *reserved[3];
} sl_plugin_host;

/* What a plugin exports. */
typedef struct sl_plugin {
  uint32_t abi_version;    /* SL_PLUGIN_ABI_VERSION */
  uint32_t struct_size;    /* sizeof(sl_plugin) */
  const char *kind;        /* SL_PLUGIN_KIND_STT or SL_PLUGIN_KIND_GRADE */
  const char *name;        /* "pocketsphinx"; [a-z0-9_]+ */
  const char *version;     /* the plugin's own version, "1.0.0" */
  const char *description; /* one line */
  uint32_t flags;          /* SL_PLUGIN_SYNC */
  const sl_plugin_conf_key *conf;
  size_t nconf;

  /* Creates an instance in *state. On failure returns a negative code
   * (sl_err.h) and writes the reason into err. */
  int (*create)(const sl_plugin_host *host, const sl_plugin_conf *conf, void **state, char *err,
                size_t errlen);
  /* NULL-safe. Async plugins: no call is in flight when it runs. */
  void (*destroy)(void *state);
  /* One question; ends with host->complete(call, ...). */
  void (*call)(void *state, const sl_plugin_input *in, sl_plugin_call *call);

  /* ABI 2: the field paths the plugin reads from its input message and
   * writes to its output message, NULL-terminated (NULL: none). Required
   * for steps; the host checks them against the pipeline's message types
   * before the stage starts. A step that lists "@object" in reads gets
   * the object its input names ("object_key", or "upload.object_key")
   * fetched from storage into in->audio / audio_len / content_type /
   * filename, and may store one new object with host->out_object. */
  const char *const *reads;
  const char *const *writes;

  void *reserved[6];
} sl_plugin;

typedef const sl_plugin *(*sl_plugin_entry_fn)(void);

#endif
