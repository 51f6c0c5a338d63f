/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sl_pipeline.c — loads and checks the pipeline description (see
 * sl_pipeline.h).
 *
 * The parsed JSON (jansson) stays alive inside the sl_pipeline and every
 * string handed out points into it; the derived names (retry topics, the
 * joined tier list) are allocated once at parse time. Validation happens
 * here, in one pass, so every reader of the description (stages, sluicectl,
 * `sluice pipeline`) refuses the same mistakes with the same words.
 */
#define _POSIX_C_SOURCE 200809L
#include "sluice/sl_pipeline.h"
#include "sluice/sl_err.h"
#include "sluice.pb-c.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct sl_pipeline {
  json_t *root;
  const char *name;
  const char *about;
  sl_pipeline_topic topics[SL_PIPELINE_MAX_TOPICS];
  size_t ntopics;
  sl_pipeline_stage stages[SL_PIPELINE_MAX_STAGES];
  size_t nstages;
  const char *dlq, *dlq_audit;
  const char *apikeys;  /* the API-key records (api_keys.topic, "apikeys") */
  const char *datakeys; /* the submissions' data keys (data_keys.topic, "datakeys") */
  const char *erasures; /* the erasures' audit records (data_keys.audit, "erasures") */
  char tiers[SL_RETRY_TIERS_MAX * 17];
  int ntiers;
  char tier_label[SL_RETRY_TIERS_MAX][16];
  char *retry_names; /* one block: the retry topic names of every stage */
};

/* the protobuf messages a topic may carry (the proto package's top level) */
static const ProtobufCMessageDescriptor *const messages[] = {
    &sluice__v1__submission_created__descriptor, &sluice__v1__upload_completed__descriptor,
    &sluice__v1__transcript__descriptor,         &sluice__v1__question_status__descriptor,
    &sluice__v1__dead_letter__descriptor,        &sluice__v1__replay_audit__descriptor,
    &sluice__v1__erasure_audit__descriptor,      &sluice__v1__erasure_request__descriptor,
};

static int fail(char *err, size_t errlen, const char *source, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(err, errlen, "pipeline %s: %s", source, msg);
  return SL_ECONFIG;
}

static int known_message(const char *m) {
  if (strncmp(m, "json:", 5) == 0) return m[5] != '\0';
  for (size_t i = 0; i < sizeof messages / sizeof messages[0]; i++)
    if (strcmp(messages[i]->name, m) == 0) return 1;
  return 0;
}

/* Kafka's rule: 1..249 of [a-zA-Z0-9._-], not "." or ".." */
static int valid_topic(const char *t) {
  size_t n = strlen(t);
  if (n == 0 || n > 249 || strcmp(t, ".") == 0 || strcmp(t, "..") == 0) return 0;
  for (const char *c = t; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '.' || *c == '_' || *c == '-'))
      return 0;
  return 1;
}

/* a stage name becomes part of topic, group and Redis key names */
static int valid_stage(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 40 || !(s[0] >= 'a' && s[0] <= 'z')) return 0;
  for (const char *c = s; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-')) return 0;
  return 1;
}

/* every key of obj is one of allowed (NULL-terminated) */
static int only_keys(json_t *obj, const char *const *allowed, const char *where, char *err,
                     size_t errlen, const char *source) {
  const char *k;
  json_t *v;
  json_object_foreach(obj, k, v) {
    int ok = 0;
    for (size_t i = 0; allowed[i]; i++)
      if (strcmp(k, allowed[i]) == 0) ok = 1;
    if (!ok) return fail(err, errlen, source, "unknown key \"%s\" in %s", k, where);
  }
  return 0;
}

static const char *str_of(json_t *obj, const char *key, int required, const char *where, int *rc,
                          char *err, size_t errlen, const char *source) {
  json_t *v = json_object_get(obj, key);
  if (!v) {
    if (required) *rc = fail(err, errlen, source, "%s has no \"%s\"", where, key);
    return NULL;
  }
  if (!json_is_string(v) || json_string_length(v) == 0) {
    *rc = fail(err, errlen, source, "\"%s\" of %s must be a non-empty string", key, where);
    return NULL;
  }
  return json_string_value(v);
}

static int bool_of(json_t *obj, const char *key, int *out, const char *where, char *err,
                   size_t errlen, const char *source) {
  json_t *v = json_object_get(obj, key);
  *out = 0;
  if (!v) return 0;
  if (!json_is_boolean(v))
    return fail(err, errlen, source, "\"%s\" of %s must be true or false", key, where);
  *out = json_is_true(v);
  return 0;
}

static const sl_pipeline_topic *topic_find(const sl_pipeline *p, const char *name) {
  for (size_t i = 0; i < p->ntopics; i++)
    if (strcmp(p->topics[i].name, name) == 0) return &p->topics[i];
  return NULL;
}

static int parse_io(sl_pipeline *p, sl_pipeline_stage *s, json_t *st, int output, char *err,
                    size_t errlen, const char *source) {
  const char *key = output ? "outputs" : "inputs";
  json_t *a = json_object_get(st, key);
  if (!json_is_array(a))
    return fail(err, errlen, source, "stage \"%s\" needs \"%s\": a list of topics", s->name, key);
  if (json_array_size(a) > SL_PIPELINE_MAX_IO)
    return fail(err, errlen, source, "stage \"%s\" has more than %d %s", s->name,
                SL_PIPELINE_MAX_IO, key);
  const char **names = output ? s->outputs : s->inputs;
  size_t *n = output ? &s->noutputs : &s->ninputs;
  size_t i;
  json_t *v;
  json_array_foreach(a, i, v) {
    if (!json_is_string(v))
      return fail(err, errlen, source, "%s of stage \"%s\" must be topic names", key, s->name);
    const char *t = json_string_value(v);
    const sl_pipeline_topic *tp = topic_find(p, t);
    if (!tp)
      return fail(err, errlen, source,
                  "stage \"%s\" %s topic \"%s\", which is not declared in "
                  "\"topics\"",
                  s->name, output ? "writes" : "reads", t);
    for (size_t j = 0; j < *n; j++) {
      const sl_pipeline_topic *o = topic_find(p, names[j]);
      if (strcmp(names[j], t) == 0)
        return fail(err, errlen, source, "stage \"%s\" lists %s twice in %s", s->name, t, key);
      if (strcmp(o->message, tp->message) == 0)
        return fail(err, errlen, source,
                    "stage \"%s\" %s two topics of %s (%s and %s): a stage "
                    "finds its topics by message type, so it may have one of each",
                    s->name, output ? "writes" : "reads", tp->message, names[j], t);
    }
    names[(*n)++] = t;
  }
  return 0;
}

static int parse_stage(sl_pipeline *p, sl_pipeline_stage *s, json_t *st, size_t idx, char *err,
                       size_t errlen, const char *source) {
  static const char *const keys[] = {"name",  "kind",     "about",    "inputs", "outputs",
                                     "retry", "provider", "progress", "plugin", NULL};
  char where[80];
  int rc = 0;
  if (!json_is_object(st)) return fail(err, errlen, source, "stage %zu is not an object", idx + 1);
  snprintf(where, sizeof where, "stage %zu", idx + 1);
  s->name = str_of(st, "name", 1, where, &rc, err, errlen, source);
  if (rc) return rc;
  if (!valid_stage(s->name))
    return fail(err, errlen, source,
                "stage name \"%s\" must be 1-40 of a-z, 0-9 and '-', "
                "starting with a letter",
                s->name);
  snprintf(where, sizeof where, "stage \"%s\"", s->name);
  if ((rc = only_keys(st, keys, where, err, errlen, source))) return rc;
  for (size_t i = 0; i < idx; i++)
    if (strcmp(p->stages[i].name, s->name) == 0)
      return fail(err, errlen, source, "two stages are named \"%s\"", s->name);
  s->kind = str_of(st, "kind", 1, where, &rc, err, errlen, source);
  if (rc == 0) s->about = str_of(st, "about", 0, where, &rc, err, errlen, source);
  if (rc == 0) s->progress = str_of(st, "progress", 0, where, &rc, err, errlen, source);
  if (rc == 0) s->plugin = str_of(st, "plugin", 0, where, &rc, err, errlen, source);
  if (rc == 0) rc = bool_of(st, "retry", &s->retry, where, err, errlen, source);
  if (rc == 0) rc = bool_of(st, "provider", &s->provider, where, err, errlen, source);
  if (rc == 0) rc = parse_io(p, s, st, 0, err, errlen, source);
  if (rc == 0) rc = parse_io(p, s, st, 1, err, errlen, source);
  if (rc) return rc;
  for (size_t i = 0; i < s->ninputs; i++)
    for (size_t j = 0; j < s->noutputs; j++)
      if (strcmp(s->inputs[i], s->outputs[j]) == 0)
        return fail(err, errlen, source, "stage \"%s\" reads and writes %s", s->name, s->inputs[i]);
  if (s->retry && s->ninputs == 0)
    return fail(err, errlen, source, "stage \"%s\" has retry tiers but reads no topic", s->name);
  if (s->provider && s->ninputs == 0)
    return fail(err, errlen, source, "stage \"%s\" calls a provider but reads no topic", s->name);
  return 0;
}

static int label_ok(const char *l) {
  size_t n = strlen(l);
  if (n == 0 || n > 32) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((l[i] >= 'a' && l[i] <= 'z') || l[i] == '_' || (i && l[i] >= '0' && l[i] <= '9')))
      return 0;
  return 1;
}

static int check_graph(sl_pipeline *p, char *err, size_t errlen, const char *source) {
  for (size_t t = 0; t < p->ntopics; t++) {
    int rd = 0, wr = 0;
    for (size_t i = 0; i < p->nstages; i++) {
      const sl_pipeline_stage *s = &p->stages[i];
      for (size_t j = 0; j < s->ninputs; j++) rd += strcmp(s->inputs[j], p->topics[t].name) == 0;
      for (size_t j = 0; j < s->noutputs; j++) wr += strcmp(s->outputs[j], p->topics[t].name) == 0;
    }
    if (!wr) return fail(err, errlen, source, "no stage writes topic \"%s\"", p->topics[t].name);
    if (!rd) return fail(err, errlen, source, "no stage reads topic \"%s\"", p->topics[t].name);
  }
  /* progress labels: a word each, unique, not a final state; a question
   * moves through them in the order of the stages */
  for (size_t i = 0; i < p->nstages; i++) {
    const sl_pipeline_stage *s = &p->stages[i];
    if (!s->progress) continue;
    if (!label_ok(s->progress))
      return fail(err, errlen, source,
                  "progress \"%s\" of stage \"%s\" is not a word of 1 to "
                  "32 characters a-z, 0-9 and _",
                  s->progress, s->name);
    if (!strcmp(s->progress, "done") || !strcmp(s->progress, "failed"))
      return fail(err, errlen, source,
                  "progress \"%s\" of stage \"%s\": done and failed are "
                  "the final states, not a stage's",
                  s->progress, s->name);
    for (size_t j = 0; j < i; j++)
      if (p->stages[j].progress && !strcmp(p->stages[j].progress, s->progress))
        return fail(err, errlen, source,
                    "progress \"%s\" is given to stages \"%s\" and "
                    "\"%s\"",
                    s->progress, p->stages[j].name, s->name);
  }
  return 0;
}

size_t sl_pipeline_nprogress(const sl_pipeline *p) {
  size_t n = 0;
  for (size_t i = 0; p && i < p->nstages; i++) n += p->stages[i].progress != NULL;
  return n;
}

const char *sl_pipeline_progress_at(const sl_pipeline *p, size_t k) {
  for (size_t i = 0; p && i < p->nstages; i++)
    if (p->stages[i].progress && k-- == 0) return p->stages[i].progress;
  return NULL;
}

int sl_pipeline_progress_rank(const sl_pipeline *p, const char *label) {
  if (!label) return 0;
  if (!strcmp(label, "failed")) return SL_PIPELINE_RANK_FAILED;
  if (!strcmp(label, "done")) return SL_PIPELINE_RANK_DONE;
  for (size_t k = 0, n = sl_pipeline_nprogress(p); k < n; k++)
    if (!strcmp(sl_pipeline_progress_at(p, k), label)) return k == 0 ? 1 : (int)(k + 1) * 10;
  return 0;
}

const char *sl_pipeline_progress_of(const sl_pipeline *p, const char *stage) {
  const sl_pipeline_stage *s = sl_pipeline_stage_find(p, stage);
  return s ? s->progress : NULL;
}

/* the first stage with a progress label downstream of `stage`, following
 * its outputs other than the status topic (breadth first, bounded) */
const char *sl_pipeline_progress_next(const sl_pipeline *p, const char *stage) {
  const char *queue[64];
  size_t head = 0, tail = 0;
  queue[tail++] = stage;
  while (head < tail) {
    const sl_pipeline_stage *s = sl_pipeline_stage_find(p, queue[head++]);
    for (size_t o = 0; s && o < s->noutputs; o++) {
      if (!strcmp(sl_pipeline_message_of(p, s->outputs[o]), "sluice.v1.QuestionStatus")) continue;
      for (size_t i = 0; i < p->nstages; i++) {
        const sl_pipeline_stage *t = &p->stages[i];
        for (size_t j = 0; j < t->ninputs; j++) {
          if (strcmp(t->inputs[j], s->outputs[o])) continue;
          if (t->progress) return t->progress;
          if (tail < sizeof queue / sizeof queue[0]) queue[tail++] = t->name;
        }
      }
    }
  }
  return NULL;
}

/* the retry topics <stage>.retry.<tier>, in one allocation */
static int derive(sl_pipeline *p, char *err, size_t errlen, const char *source) {
  size_t need = 0;
  for (size_t i = 0; i < p->nstages; i++)
    if (p->stages[i].retry)
      for (int t = 0; t < p->ntiers; t++)
        need += strlen(p->stages[i].name) + 7 + strlen(p->tier_label[t]) + 1;
  p->retry_names = malloc(need ? need : 1);
  if (!p->retry_names) return SL_ENOMEM;
  char *w = p->retry_names;
  for (size_t i = 0; i < p->nstages; i++) {
    sl_pipeline_stage *s = &p->stages[i];
    if (!s->retry) continue;
    for (int t = 0; t < p->ntiers; t++) {
      int n = sprintf(w, "%s.retry.%s", s->name, p->tier_label[t]);
      s->retry_topics[t] = w;
      if (topic_find(p, w))
        return fail(err, errlen, source, "topic \"%s\" is also stage \"%s\"'s retry tier", w,
                    s->name);
      w += n + 1;
    }
  }
  return 0;
}

/* "topics": 1 to SL_PIPELINE_MAX_TOPICS, each named once, of a known message */
static int parse_topics(sl_pipeline *p, json_t *root, char *err, size_t errlen,
                        const char *source) {
  static const char *const topic_keys[] = {"name", "message", "about", NULL};
  json_t *topics = json_object_get(root, "topics");
  if (!json_is_array(topics) || json_array_size(topics) == 0 ||
      json_array_size(topics) > SL_PIPELINE_MAX_TOPICS)
    return fail(err, errlen, source, "\"topics\" must be a list of 1 to %d topics",
                SL_PIPELINE_MAX_TOPICS);
  size_t i;
  json_t *v;
  int rc = 0;
  json_array_foreach(topics, i, v) {
    char where[48];
    snprintf(where, sizeof where, "topic %zu", i + 1);
    if (!json_is_object(v)) return fail(err, errlen, source, "%s is not an object", where);
    if ((rc = only_keys(v, topic_keys, where, err, errlen, source))) return rc;
    sl_pipeline_topic *t = &p->topics[p->ntopics];
    t->name = str_of(v, "name", 1, where, &rc, err, errlen, source);
    if (rc == 0) t->message = str_of(v, "message", 1, where, &rc, err, errlen, source);
    if (rc == 0) t->about = str_of(v, "about", 0, where, &rc, err, errlen, source);
    if (rc) return rc;
    if (!valid_topic(t->name))
      return fail(err, errlen, source,
                  "\"%s\" is not a Kafka topic name (1-249 of a-z A-Z 0-9 . _ "
                  "-)",
                  t->name);
    if (topic_find(p, t->name))
      return fail(err, errlen, source, "topic \"%s\" is declared twice", t->name);
    if (!known_message(t->message))
      return fail(err, errlen, source,
                  "topic \"%s\": message \"%s\" is neither a message of "
                  "proto/sluice.proto (sluice.v1.<Name>) nor json:<schema>",
                  t->name, t->message);
    p->ntopics++;
  }
  return 0;
}

/* name: {"topic": ...}, optional (dflt when absent): a compacted topic of
 * its own */
static int compacted_topic(sl_pipeline *p, json_t *root, const char *name, const char *dflt,
                           const char *what, const char **out, char *err, size_t errlen,
                           const char *source) {
  static const char *const keys[] = {"topic", NULL}, *const dk_keys[] = {"topic", "audit", NULL};
  char ctx[40];
  snprintf(ctx, sizeof ctx, "\"%s\"", name);
  json_t *o = json_object_get(root, name);
  int rc = 0;
  *out = dflt;
  if (o) {
    if (!json_is_object(o)) return fail(err, errlen, source, "%s must be {\"topic\": ...}", ctx);
    int dk = out == &p->datakeys; /* which also names the erasures' audit topic */
    if ((rc = only_keys(o, dk ? dk_keys : keys, ctx, err, errlen, source))) return rc;
    *out = str_of(o, "topic", 1, ctx, &rc, err, errlen, source);
    if (rc == 0 && dk && json_object_get(o, "audit"))
      p->erasures = str_of(o, "audit", 1, ctx, &rc, err, errlen, source);
    if (rc) return rc;
  }
  if (!valid_topic(*out) || topic_find(p, *out) || strcmp(*out, p->dlq) == 0 ||
      strcmp(*out, p->dlq_audit) == 0 ||
      (p->apikeys && out != &p->apikeys && strcmp(*out, p->apikeys) == 0))
    return fail(err, errlen, source, "%s topic \"%s\" must be a Kafka topic name of its own", what,
                *out);
  return 0;
}

/* "dead_letters" (two topics of their own), "api_keys" and "data_keys"
 * (optional: the compacted topics of API-key records and of the
 * submissions' data keys, "apikeys" and "datakeys" by default) */
static int parse_side_topics(sl_pipeline *p, json_t *root, char *err, size_t errlen,
                             const char *source) {
  static const char *const dl_keys[] = {"topic", "audit", NULL};
  int rc = 0;
  json_t *dl = json_object_get(root, "dead_letters");
  if (!json_is_object(dl))
    return fail(err, errlen, source, "\"dead_letters\" must be {\"topic\": ..., \"audit\": ...}");
  if ((rc = only_keys(dl, dl_keys, "\"dead_letters\"", err, errlen, source))) return rc;
  p->dlq = str_of(dl, "topic", 1, "\"dead_letters\"", &rc, err, errlen, source);
  if (rc == 0) p->dlq_audit = str_of(dl, "audit", 1, "\"dead_letters\"", &rc, err, errlen, source);
  if (rc) return rc;
  const char *dls[2] = {p->dlq, p->dlq_audit};
  for (int k = 0; k < 2; k++)
    if (!valid_topic(dls[k]) || topic_find(p, dls[k]) || (k && strcmp(dls[0], dls[1]) == 0))
      return fail(err, errlen, source,
                  "dead-letter topic \"%s\" must be a Kafka topic name of its "
                  "own",
                  dls[k]);
  if ((rc = compacted_topic(p, root, "api_keys", SL_PIPELINE_APIKEYS_DEFAULT, "API-key",
                            &p->apikeys, err, errlen, source)))
    return rc;
  p->erasures = SL_PIPELINE_ERASURES_DEFAULT;
  if ((rc = compacted_topic(p, root, "data_keys", SL_PIPELINE_DATAKEYS_DEFAULT, "data-key",
                            &p->datakeys, err, errlen, source)))
    return rc;
  if (!valid_topic(p->erasures) || topic_find(p, p->erasures) || strcmp(p->erasures, p->dlq) == 0 ||
      strcmp(p->erasures, p->dlq_audit) == 0 || strcmp(p->erasures, p->apikeys) == 0 ||
      strcmp(p->erasures, p->datakeys) == 0)
    return fail(err, errlen, source,
                "erasure audit topic \"%s\" must be a Kafka topic name of its own", p->erasures);
  return 0;
}

/* "retry_tiers": 1 to SL_RETRY_TIERS_MAX ascending delays */
static int parse_tiers(sl_pipeline *p, json_t *root, char *err, size_t errlen, const char *source) {
  json_t *tiers = json_object_get(root, "retry_tiers");
  if (!json_is_array(tiers) || json_array_size(tiers) == 0 ||
      json_array_size(tiers) > SL_RETRY_TIERS_MAX)
    return fail(err, errlen, source,
                "\"retry_tiers\" must be a list of 1 to %d delays such as "
                "\"5s\"",
                SL_RETRY_TIERS_MAX);
  size_t w = 0, i;
  json_t *v;
  json_array_foreach(tiers, i, v) {
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 15)
      return fail(err, errlen, source, "retry tier %zu must be a delay such as \"30s\"", i + 1);
    w += (size_t)snprintf(p->tiers + w, sizeof p->tiers - w, "%s%s", i ? "," : "",
                          json_string_value(v));
  }
  int64_t delays[SL_RETRY_TIERS_MAX];
  p->ntiers = sl_retry_tiers_parse(p->tiers, delays, p->tier_label);
  if (p->ntiers < 0)
    return fail(err, errlen, source,
                "\"retry_tiers\" %s: delays must be ascending, each a number "
                "with ms, s, m or h",
                p->tiers);
  return 0;
}

/* "stages": 1 to SL_PIPELINE_MAX_STAGES, then the graph they make */
static int parse_stages(sl_pipeline *p, json_t *root, char *err, size_t errlen,
                        const char *source) {
  json_t *stages = json_object_get(root, "stages");
  if (!json_is_array(stages) || json_array_size(stages) == 0 ||
      json_array_size(stages) > SL_PIPELINE_MAX_STAGES)
    return fail(err, errlen, source, "\"stages\" must be a list of 1 to %d stages",
                SL_PIPELINE_MAX_STAGES);
  size_t i;
  json_t *v;
  int rc;
  json_array_foreach(stages, i, v) {
    if ((rc = parse_stage(p, &p->stages[i], v, i, err, errlen, source))) return rc;
    p->nstages++;
  }
  if ((rc = check_graph(p, err, errlen, source))) return rc;
  return derive(p, err, errlen, source);
}

/* The description's top level, then its parts in order. */
static int parse_root(sl_pipeline *p, json_t *root, char *err, size_t errlen, const char *source) {
  static const char *const top_keys[] = {"pipeline",     "version",  "about",     "topics",
                                         "dead_letters", "api_keys", "data_keys", "retry_tiers",
                                         "stages",       NULL};
  int rc = 0;
  if (!json_is_object(root))
    return fail(err, errlen, source, "the description must be a JSON object");
  if ((rc = only_keys(root, top_keys, "the description", err, errlen, source))) return rc;
  p->name = str_of(root, "pipeline", 1, "the description", &rc, err, errlen, source);
  if (rc == 0) p->about = str_of(root, "about", 0, "the description", &rc, err, errlen, source);
  if (rc) return rc;
  json_t *ver = json_object_get(root, "version");
  if (!json_is_integer(ver) || json_integer_value(ver) != 1)
    return fail(err, errlen, source, "\"version\" must be 1 (the only format there is)");
  if ((rc = parse_topics(p, root, err, errlen, source))) return rc;
  if ((rc = parse_side_topics(p, root, err, errlen, source))) return rc;
  if ((rc = parse_tiers(p, root, err, errlen, source))) return rc;
  return parse_stages(p, root, err, errlen, source);
}

int sl_pipeline_parse(sl_pipeline **out, const char *json, size_t len, const char *source,
                      char *err, size_t errlen) {
  if (!out || !json) return SL_EINVAL;
  *out = NULL;
  if (!source) source = "(text)";
  json_error_t je;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) return fail(err, errlen, source, "line %d column %d: %s", je.line, je.column, je.text);
  sl_pipeline *p = calloc(1, sizeof *p);
  if (!p) {
    json_decref(root);
    return SL_ENOMEM;
  }
  p->root = root;
  int rc = parse_root(p, root, err, errlen, source);
  if (rc) {
    sl_pipeline_free(p);
    return rc;
  }
  *out = p;
  return 0;
}

int sl_pipeline_load(sl_pipeline **out, const char *file, char *err, size_t errlen) {
  if (!file || !*file)
    return sl_pipeline_parse(out, sl_pipeline_builtin, sl_pipeline_builtin_len, "(built-in)", err,
                             errlen);
  FILE *f = fopen(file, "rb");
  if (!f) {
    snprintf(err, errlen, "pipeline %s: cannot read it", file);
    return SL_ECONFIG;
  }
  char *buf = malloc(1 << 20);
  size_t n = buf ? fread(buf, 1, 1 << 20, f) : 0;
  int big = buf && n == (1 << 20);
  fclose(f);
  if (!buf) return SL_ENOMEM;
  if (big) {
    free(buf);
    snprintf(err, errlen, "pipeline %s: larger than 1 MiB", file);
    return SL_ECONFIG;
  }
  int rc = sl_pipeline_parse(out, buf, n, file, err, errlen);
  free(buf);
  return rc;
}

void sl_pipeline_free(sl_pipeline *p) {
  if (!p) return;
  json_decref(p->root);
  free(p->retry_names);
  free(p);
}

int sl_pipeline_check_kinds(const sl_pipeline *p, const sl_pipeline_kind *kinds, size_t nkinds,
                            char *err, size_t errlen) {
  if (!p || !kinds) return SL_EINVAL;
  for (size_t i = 0; i < p->nstages; i++) {
    const sl_pipeline_stage *s = &p->stages[i];
    const sl_pipeline_kind *k = NULL;
    for (size_t j = 0; j < nkinds; j++)
      if (strcmp(kinds[j].kind, s->kind) == 0) k = &kinds[j];
    if (!k) {
      char known[256] = "";
      size_t w = 0;
      for (size_t j = 0; j < nkinds && w < sizeof known; j++)
        w += (size_t)snprintf(known + w, sizeof known - w, "%s%s", j ? ", " : "", kinds[j].kind);
      snprintf(err, errlen, "stage \"%s\": no stage kind \"%s\" (there are: %s)", s->name, s->kind,
               known);
      return SL_ECONFIG;
    }
    if (!k->generic != !s->plugin) {
      snprintf(err, errlen,
               k->generic ? "stage \"%s\" (kind %s) names no \"plugin\" to host"
                          : "stage \"%s\" (kind %s) hosts no plugin: only kind "
                            "\"plugin\" takes \"plugin\"",
               s->name, s->kind);
      return SL_ECONFIG;
    }
    if (k->generic) {
      size_t main_out = 0;
      for (size_t j = 0; j < s->noutputs; j++)
        if (strcmp(topic_find(p, s->outputs[j])->message, "sluice.v1.QuestionStatus") != 0 ||
            s->noutputs == 1)
          main_out++;
      if (s->ninputs != 1 || !sl_pipeline_descriptor(topic_find(p, s->inputs[0])->message) ||
          main_out != 1 || !s->retry) {
        snprintf(err, errlen,
                 "stage \"%s\" (kind %s) must read one topic of a protobuf message, "
                 "write one (and may write a sluice.v1.QuestionStatus topic besides), and say "
                 "\"retry\": true",
                 s->name, s->kind);
        return SL_ECONFIG;
      }
      for (size_t j = 0; j < s->noutputs; j++)
        if (!sl_pipeline_descriptor(topic_find(p, s->outputs[j])->message)) {
          snprintf(err, errlen,
                   "stage \"%s\" (kind %s) writes %s, which is not a protobuf "
                   "message",
                   s->name, s->kind, s->outputs[j]);
          return SL_ECONFIG;
        }
      continue;
    }
    size_t nin = 0;
    for (; nin < SL_PIPELINE_MAX_IO && k->in[nin]; nin++)
      if (!sl_pipeline_topic_of(p, s->name, 0, k->in[nin])) {
        snprintf(err, errlen, "stage \"%s\" (kind %s) must read a topic of %s", s->name, s->kind,
                 k->in[nin]);
        return SL_ECONFIG;
      }
    if (nin != s->ninputs) {
      snprintf(err, errlen, "stage \"%s\" (kind %s) reads %zu topic(s); its kind reads %zu",
               s->name, s->kind, s->ninputs, nin);
      return SL_ECONFIG;
    }
    if (!k->provider != !s->provider || !k->retry != !s->retry) {
      snprintf(err, errlen,
               "stage \"%s\" (kind %s) must say \"provider\": %s and \"retry\": %s, "
               "as its code does",
               s->name, s->kind, k->provider ? "true" : "false", k->retry ? "true" : "false");
      return SL_ECONFIG;
    }
    for (size_t j = 0; j < SL_PIPELINE_MAX_IO && k->out[j]; j++)
      if (!sl_pipeline_topic_of(p, s->name, 1, k->out[j])) {
        snprintf(err, errlen, "stage \"%s\" (kind %s) must write a topic of %s", s->name, s->kind,
                 k->out[j]);
        return SL_ECONFIG;
      }
  }
  return 0;
}

const char *sl_pipeline_name(const sl_pipeline *p) { return p ? p->name : NULL; }
size_t sl_pipeline_nstages(const sl_pipeline *p) { return p ? p->nstages : 0; }
const sl_pipeline_stage *sl_pipeline_stage_at(const sl_pipeline *p, size_t i) {
  return p && i < p->nstages ? &p->stages[i] : NULL;
}
const sl_pipeline_stage *sl_pipeline_stage_find(const sl_pipeline *p, const char *name) {
  for (size_t i = 0; p && name && i < p->nstages; i++)
    if (strcmp(p->stages[i].name, name) == 0) return &p->stages[i];
  return NULL;
}
size_t sl_pipeline_ntopics(const sl_pipeline *p) { return p ? p->ntopics : 0; }
const sl_pipeline_topic *sl_pipeline_topic_at(const sl_pipeline *p, size_t i) {
  return p && i < p->ntopics ? &p->topics[i] : NULL;
}
const sl_pipeline_topic *sl_pipeline_topic_find(const sl_pipeline *p, const char *name) {
  return p && name ? topic_find(p, name) : NULL;
}

const char *sl_pipeline_topic_of(const sl_pipeline *p, const char *stage, int output,
                                 const char *message) {
  const sl_pipeline_stage *s = sl_pipeline_stage_find(p, stage);
  if (!s || !message) return NULL;
  size_t n = output ? s->noutputs : s->ninputs;
  const char *const *names = output ? s->outputs : s->inputs;
  for (size_t i = 0; i < n; i++)
    if (strcmp(topic_find(p, names[i])->message, message) == 0) return names[i];
  return NULL;
}

const char *sl_pipeline_message_of(const sl_pipeline *p, const char *topic) {
  if (!p || !topic) return NULL;
  const sl_pipeline_topic *t = topic_find(p, topic);
  if (t) return t->message;
  if (strcmp(topic, p->dlq) == 0) return sluice__v1__dead_letter__descriptor.name;
  if (strcmp(topic, p->dlq_audit) == 0) return sluice__v1__replay_audit__descriptor.name;
  if (strcmp(topic, p->apikeys) == 0) return SL_PIPELINE_APIKEYS_MESSAGE;
  if (strcmp(topic, p->datakeys) == 0) return SL_PIPELINE_DATAKEYS_MESSAGE;
  if (strcmp(topic, p->erasures) == 0) return sluice__v1__erasure_audit__descriptor.name;
  const sl_pipeline_stage *s = sl_pipeline_retry_stage(p, topic);
  return s && s->ninputs == 1 ? topic_find(p, s->inputs[0])->message : NULL;
}

const sl_pipeline_stage *sl_pipeline_retry_stage(const sl_pipeline *p, const char *topic) {
  if (!p || !topic || topic_find(p, topic)) return NULL;
  for (size_t i = 0; i < p->nstages; i++) {
    const sl_pipeline_stage *s = &p->stages[i];
    size_t n = strlen(s->name);
    if (s->retry && strncmp(topic, s->name, n) == 0 && strncmp(topic + n, ".retry.", 7) == 0 &&
        topic[n + 7])
      return s;
  }
  return NULL;
}

const ProtobufCMessageDescriptor *sl_pipeline_descriptor(const char *message) {
  for (size_t i = 0; message && i < sizeof messages / sizeof messages[0]; i++)
    if (strcmp(messages[i]->name, message) == 0) return messages[i];
  return NULL;
}

const char *sl_pipeline_dlq(const sl_pipeline *p) { return p ? p->dlq : NULL; }
const char *sl_pipeline_dlq_audit(const sl_pipeline *p) { return p ? p->dlq_audit : NULL; }
const char *sl_pipeline_apikeys(const sl_pipeline *p) { return p ? p->apikeys : NULL; }
const char *sl_pipeline_datakeys(const sl_pipeline *p) { return p ? p->datakeys : NULL; }
const char *sl_pipeline_erasures(const sl_pipeline *p) { return p ? p->erasures : NULL; }
const char *sl_pipeline_retry_tiers(const sl_pipeline *p) { return p ? p->tiers : NULL; }

size_t sl_pipeline_all_topics(const sl_pipeline *p, const char **names, size_t max) {
  size_t n = 0;
  if (!p) return 0;
#define ADD(x)                                                                                     \
  do {                                                                                             \
    if (names && n < max) names[n] = (x);                                                          \
    n++;                                                                                           \
  } while (0)
  for (size_t i = 0; i < p->ntopics; i++) ADD(p->topics[i].name);
  ADD(p->dlq);
  ADD(p->dlq_audit);
  ADD(p->apikeys);
  ADD(p->datakeys);
  ADD(p->erasures);
  for (size_t i = 0; i < p->nstages; i++)
    if (p->stages[i].retry)
      for (int t = 0; t < p->ntiers; t++) ADD(p->stages[i].retry_topics[t]);
#undef ADD
  return n;
}

int sl_pipeline_group(char *buf, size_t len, const char *stage, int retry) {
  if (!buf || !stage) return SL_EINVAL;
  int n = snprintf(buf, len, "sluice-%s%s", stage, retry ? "-retry" : "");
  return n < 0 || (size_t)n >= len ? SL_ETOOBIG : 0;
}

static json_t *names_json(const char *const *names, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(a, json_string(names[i]));
  return a;
}

static int print_json(const sl_pipeline *p, FILE *f) {
  json_t *o = json_object(), *ts = json_array(), *ss = json_array();
  for (size_t i = 0; i < p->ntopics; i++) {
    json_t *t = json_pack("{s:s,s:s}", "name", p->topics[i].name, "message", p->topics[i].message);
    if (p->topics[i].about) json_object_set_new(t, "about", json_string(p->topics[i].about));
    json_array_append_new(ts, t);
  }
  for (size_t i = 0; i < p->nstages; i++) {
    const sl_pipeline_stage *s = &p->stages[i];
    char g[64];
    json_t *j =
        json_pack("{s:s,s:s,s:b,s:b,s:o,s:o}", "name", s->name, "kind", s->kind, "provider",
                  s->provider, "retry", s->retry, "inputs", names_json(s->inputs, s->ninputs),
                  "outputs", names_json(s->outputs, s->noutputs));
    if (s->about) json_object_set_new(j, "about", json_string(s->about));
    if (s->progress) json_object_set_new(j, "progress", json_string(s->progress));
    if (s->plugin) json_object_set_new(j, "plugin", json_string(s->plugin));
    if (s->ninputs) {
      sl_pipeline_group(g, sizeof g, s->name, 0);
      json_object_set_new(j, "group", json_string(g));
    }
    if (s->retry) {
      sl_pipeline_group(g, sizeof g, s->name, 1);
      json_object_set_new(j, "retry_group", json_string(g));
      json_object_set_new(j, "retry_topics", names_json(s->retry_topics, (size_t)p->ntiers));
    }
    json_array_append_new(ss, j);
  }
  const char *all[SL_PIPELINE_MAX_TOPICS + 3 + SL_PIPELINE_MAX_STAGES * SL_RETRY_TIERS_MAX];
  size_t nall = sl_pipeline_all_topics(p, all, sizeof all / sizeof all[0]);
  json_object_set_new(o, "pipeline", json_string(p->name));
  if (p->about) json_object_set_new(o, "about", json_string(p->about));
  json_object_set_new(o, "topics", ts);
  json_object_set_new(o, "dead_letters",
                      json_pack("{s:s,s:s}", "topic", p->dlq, "audit", p->dlq_audit));
  json_object_set_new(o, "api_keys", json_pack("{s:s}", "topic", p->apikeys));
  json_object_set_new(o, "data_keys",
                      json_pack("{s:s,s:s}", "topic", p->datakeys, "audit", p->erasures));
  json_object_set_new(o, "retry_tiers", json_string(p->tiers));
  json_object_set_new(o, "stages", ss);
  json_object_set_new(o, "all_topics", names_json(all, nall));
  int rc = json_dumpf(o, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) == 0 ? 0 : SL_EIO;
  fputc('\n', f);
  json_decref(o);
  return rc;
}

int sl_pipeline_print(const sl_pipeline *p, FILE *f, int json) {
  if (!p || !f) return SL_EINVAL;
  if (json) return print_json(p, f);
  fprintf(f, "pipeline %s%s%s\n\n", p->name, p->about ? ": " : "", p->about ? p->about : "");
  fprintf(f, "%-12s %-12s %-8s %-16s %-36s %s\n", "STAGE", "KIND", "GATED", "PROGRESS", "READS",
          "WRITES");
  for (size_t i = 0; i < p->nstages; i++) {
    const sl_pipeline_stage *s = &p->stages[i];
    char in[256] = "-", outs[256] = "-";
    size_t w = 0;
    for (size_t j = 0; j < s->ninputs && w < sizeof in; j++)
      w += (size_t)snprintf(in + w, sizeof in - w, "%s%s", j ? "," : "", s->inputs[j]);
    w = 0;
    for (size_t j = 0; j < s->noutputs && w < sizeof outs; j++)
      w += (size_t)snprintf(outs + w, sizeof outs - w, "%s%s", j ? "," : "", s->outputs[j]);
    fprintf(f, "%-12s %-12s %-8s %-16s %-36s %s\n", s->name, s->kind,
            s->provider ? "provider" : "-", s->progress ? s->progress : "-", in, outs);
  }
  fprintf(f, "\n%-20s %s\n", "TOPIC", "MESSAGE");
  for (size_t i = 0; i < p->ntopics; i++)
    fprintf(f, "%-20s %s\n", p->topics[i].name, p->topics[i].message);
  fprintf(f, "%-20s %s\n%-20s %s\n", p->dlq, "sluice.v1.DeadLetter (dead letters)", p->dlq_audit,
          "sluice.v1.ReplayAudit (replays)");
  fprintf(f, "%-20s %s\n", p->apikeys, SL_PIPELINE_APIKEYS_MESSAGE " (API keys, compacted)");
  fprintf(f, "%-20s %s\n", p->datakeys, SL_PIPELINE_DATAKEYS_MESSAGE " (data keys, compacted)");
  fprintf(f, "%-20s %s\n", p->erasures, "sluice.v1.ErasureAudit (erasures)");
  fprintf(f, "\nretry tiers %s: ", p->tiers);
  int first = 1;
  for (size_t i = 0; i < p->nstages; i++)
    if (p->stages[i].retry) {
      fprintf(f, "%s%s.retry.*", first ? "" : ", ", p->stages[i].name);
      first = 0;
    }
  fputc('\n', f);
  return ferror(f) ? SL_EIO : 0;
}
