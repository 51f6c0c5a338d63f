/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_pipeline.h — the pipeline description: which stages exist, what each
 * consumes and produces, and the topics between them.
 *
 * One JSON file (pipeline.json at the top of the repository, compiled into
 * the runtime as the built-in default; `pipeline.file` names another) says,
 * for every stage: its name, its kind (the code that runs it), the topics it
 * reads and writes, whether it calls a paid provider (the provider gate:
 * breaker, limiter, claims), whether it has retry tiers, and the progress
 * state it puts a question in. Topics carry one message type each. Stages,
 * tools/devstack, sluicectl and the Helm chart all read this description;
 * no stage or topic list is written anywhere else.
 *
 * A stage finds its topics by message type, relative to itself
 * (sl_pipeline_topic_of): stt writes its Transcript "to its output of type
 * sluice.v1.Transcript", so a step inserted between stt and grade is a
 * change of the description only.
 *
 * Parsing is strict: unknown keys, undeclared topics, a topic nobody writes
 * or reads, two outputs of one type, progress going backwards — each is an
 * error naming the stage or topic and the source.
 *
 * Ownership: an sl_pipeline owns every string it returns; they live until
 * sl_pipeline_free. @locality any thread once loaded (read-only).
 */
#ifndef SLUICE_SL_PIPELINE_H
#define SLUICE_SL_PIPELINE_H

#include <stddef.h>
#include <stdio.h>

#include <protobuf-c/protobuf-c.h>

#include "sluice/sl_retry.h"

#define SL_PIPELINE_MAX_STAGES 32
#define SL_PIPELINE_MAX_TOPICS 64
#define SL_PIPELINE_MAX_IO 8

typedef struct sl_pipeline sl_pipeline;

typedef struct {
  const char *name;
  const char *message; /* "sluice.v1.<Message>" or "json:<schema>" */
  const char *about;
} sl_pipeline_topic;

typedef struct {
  const char *name;
  const char *kind; /* the code that runs it (sl_pipeline_kind.kind) */
  const char *about;
  const char *progress; /* a question's state once this stage takes it, or NULL */
  const char *plugin;   /* kind "plugin": the step plugin it hosts, else NULL */
  int provider;         /* calls a paid provider: gated */
  int retry;            /* has retry tiers <name>.retry.<tier> */
  const char *inputs[SL_PIPELINE_MAX_IO];
  size_t ninputs;
  const char *outputs[SL_PIPELINE_MAX_IO];
  size_t noutputs;
  const char *retry_topics[SL_RETRY_TIERS_MAX]; /* when retry */
} sl_pipeline_stage;

/* What the code of a stage kind consumes and produces (message types,
 * NULL-terminated lists): a stage of that kind must read exactly `in` and
 * write at least `out`, and say "provider" and "retry" as the code does
 * (the provider gate and the retry tiers are the code's, the description
 * must not claim otherwise). */
typedef struct {
  const char *kind;
  const char *in[SL_PIPELINE_MAX_IO];
  const char *out[SL_PIPELINE_MAX_IO];
  int provider; /* calls a paid provider through the gate */
  int retry;    /* consumes retry tiers */
  /* a generic host (`sluice stage NAME` with a step plugin): in/out are
   * not fixed; the stage reads one protobuf topic, writes one protobuf
   * topic of any type (plus, optionally, a sluice.v1.QuestionStatus one),
   * names its "plugin" and may or may not call a provider */
  int generic;
} sl_pipeline_kind;

/* The description compiled into the runtime (pipeline.json). */
extern const char *const sl_pipeline_builtin;
extern const size_t sl_pipeline_builtin_len;

/* Parses and validates json (len bytes; source names it in errors).
 * Returns 0 and *out, or SL_ECONFIG with the reason in err (SL_ENOMEM). */
int sl_pipeline_parse(sl_pipeline **out, const char *json, size_t len, const char *source,
                      char *err, size_t errlen);

/* Reads file (NULL or "": the built-in description) and parses it. */
int sl_pipeline_load(sl_pipeline **out, const char *file, char *err, size_t errlen);

/* NULL-safe. */
void sl_pipeline_free(sl_pipeline *p);

/* Checks every stage against the code of its kind (kinds: nkinds entries):
 * the kind exists, the stage reads exactly the kind's input types and
 * writes each of its output types. Returns 0 or SL_ECONFIG with the first
 * mismatch, naming the stage and the message type, in err. */
int sl_pipeline_check_kinds(const sl_pipeline *p, const sl_pipeline_kind *kinds, size_t nkinds,
                            char *err, size_t errlen);

const char *sl_pipeline_name(const sl_pipeline *p);
size_t sl_pipeline_nstages(const sl_pipeline *p);
const sl_pipeline_stage *sl_pipeline_stage_at(const sl_pipeline *p, size_t i);
const sl_pipeline_stage *sl_pipeline_stage_find(const sl_pipeline *p, const char *name);
size_t sl_pipeline_ntopics(const sl_pipeline *p);
const sl_pipeline_topic *sl_pipeline_topic_at(const sl_pipeline *p, size_t i);
const sl_pipeline_topic *sl_pipeline_topic_find(const sl_pipeline *p, const char *name);

/* The topic stage reads (output 0) or writes (output 1) whose message type
 * is message; NULL when it has none. */
const char *sl_pipeline_topic_of(const sl_pipeline *p, const char *stage, int output,
                                 const char *message);

/* The message type topic carries: a declared topic's, sluice.v1.DeadLetter
 * and sluice.v1.ReplayAudit for the dead-letter pair, the stage's input type
 * for a retry tier of a stage with one input; NULL otherwise (unknown, or a
 * tier of a stage with several input types: the copy's origin header says). */
const char *sl_pipeline_message_of(const sl_pipeline *p, const char *topic);

/* The stage whose retry tier topic is: "<stage>.retry.<tier>" for a stage
 * with retries, whatever the tier (a stage's retry.tiers may name other
 * tiers than the pipeline's retry_tiers: SLUICE_RETRY_TIERS); NULL for any
 * other topic, a declared one included. */
const sl_pipeline_stage *sl_pipeline_retry_stage(const sl_pipeline *p, const char *topic);

/* The protobuf-c descriptor of message ("sluice.v1.<Name>"), or NULL (a
 * json: type, or unknown). */
const ProtobufCMessageDescriptor *sl_pipeline_descriptor(const char *message);

/* Dead-letter and replay-audit topics. */
/* A question's progress is the stage it has reached: the stages' progress
 * labels in the order of the stages (the first, presign's, is where every
 * question starts), then the final states. Ranks order them for
 * materialize: 1 for the first label, 10 x (position + 1) for the others,
 * then failed < done (a replayed dead letter that completes moves a
 * question on). 0: a label the pipeline does not have. */
#define SL_PIPELINE_RANK_FAILED 100000
#define SL_PIPELINE_RANK_DONE 100001
size_t sl_pipeline_nprogress(const sl_pipeline *p);
const char *sl_pipeline_progress_at(const sl_pipeline *p, size_t k);
int sl_pipeline_progress_rank(const sl_pipeline *p, const char *label);
/* The stage's own label (NULL: none). */
const char *sl_pipeline_progress_of(const sl_pipeline *p, const char *stage);
/* The label of the first stage downstream of `stage` that has one: what a
 * stage reports when it hands a question on (stt: "grading"). NULL: none. */
const char *sl_pipeline_progress_next(const sl_pipeline *p, const char *stage);

const char *sl_pipeline_dlq(const sl_pipeline *p);
const char *sl_pipeline_dlq_audit(const sl_pipeline *p);

/* The compacted topic of API-key records ("api_keys": {"topic": ...},
 * "apikeys" when absent): `sluicectl apikey add/revoke` write it, keyed by
 * the key's SHA-256 hex (a record is JSON {"user","label","created_ms"}, a
 * revocation a tombstone), and presign rebuilds the key store in Redis from
 * it after a loss (stages/presign/keystore.h). */
#define SL_PIPELINE_APIKEYS_DEFAULT "apikeys"
#define SL_PIPELINE_APIKEYS_MESSAGE "json:sluice-apikey"
const char *sl_pipeline_apikeys(const sl_pipeline *p);

/* The compacted topic of the submissions' data keys ("data_keys":
 * {"topic": ...}, "datakeys" when absent): presign writes each
 * submission's key there wrapped (sl_dkey.h), keyed by the submission id,
 * and an erasure its tombstone; presign rebuilds the Redis copy from it. */
#define SL_PIPELINE_DATAKEYS_DEFAULT "datakeys"
#define SL_PIPELINE_DATAKEYS_MESSAGE "bytes:sluice-datakey"
const char *sl_pipeline_datakeys(const sl_pipeline *p);
/* Where every erasure is recorded (data_keys.audit, "erasures" when
 * absent): who asked, when, what was erased, never the content. */
#define SL_PIPELINE_ERASURES_DEFAULT "erasures"
const char *sl_pipeline_erasures(const sl_pipeline *p);

/* The retry tiers, as "5s,30s,2m,10m" (the format of retry.tiers). */
const char *sl_pipeline_retry_tiers(const sl_pipeline *p);

/* Every topic the pipeline needs: the declared ones, the dead-letter pair,
 * the API-key topic and every retry tier of every stage with retry. Fills names (at most
 * max) and returns how many there are. */
size_t sl_pipeline_all_topics(const sl_pipeline *p, const char **names, size_t max);

/* The consumer group of stage's inputs (retry 0) or of its retry tiers
 * (retry 1): sluice-<stage>, sluice-<stage>-retry. Returns 0 or SL_ETOOBIG. */
int sl_pipeline_group(char *buf, size_t len, const char *stage, int retry);

/* Prints the resolved description: a table for people (json 0) or JSON
 * with every derived name (retry topics, consumer groups) (json 1). */
int sl_pipeline_print(const sl_pipeline *p, FILE *f, int json);

#endif
