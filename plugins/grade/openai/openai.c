/* SPDX-License-Identifier: Apache-2.0 */
/*
 * openai.c — grade/openai: grading through any OpenAI-compatible
 * POST /v1/chat/completions with structured output.
 *
 * Async, like stt/openai: call() renders the prompt template, sends one
 * chat completion through host->http_send and the callback finishes or
 * sends again. State per call lives in a small request object; the
 * instance holds configuration, the JSON schema and one flag.
 *
 * Structured output: response_format {type: json_schema, strict: true} with
 * the grade schema below; or {type: json_object} (JSON mode) when
 * structured_output = json_object, or from the moment a server answers 400
 * naming response_format to a json_schema request (then the same call is
 * sent again in JSON mode — not counted as a regeneration — and the instance
 * stays in JSON mode, logged once). The system prompt spells the schema out,
 * so JSON mode gets the same document.
 *
 * The user message is the prompt template rendered: besides the question,
 * the transcript and its length, {{timing}} is the answer's timing in plain
 * words (preflight's measures, as rubric v2 words its fluency evidence) and
 * {{rubric}} the offline rubric's five criteria with their scores and
 * evidence (rubric.h, linked in), so that the model grades from the same
 * evidence the rubric shows and can cite it.
 *
 * The reply content is validated against that one schema (grade_check()):
 * an object with exactly score (number 0..100), level (NL NM NH IL IM1 IM2
 * IM3 IH AL), criteria (1..16 objects of name (1..64 bytes), score
 * (0..100), comment (string)) and feedback (non-empty string). An invalid
 * reply is regenerated: the bad reply and the reason go back to the model
 * as two more messages, up to max_regenerations times (1 by default); then
 * the call FAILs with class invalid_grade, the reason, and the last reply
 * attached as out_str "raw_reply" (cut to max_raw_reply bytes); no grade
 * is reported. A reply the server cut at max_tokens (finish_reason
 * "length") is invalid the same way, whatever its content. A refusal
 * (message.refusal) FAILs as model_refused. A 2xx body that is not JSON is
 * RETRY provider_bad_reply (transient); a JSON body without
 * choices[0].message is FAIL provider_bad_reply. HTTP statuses as in
 * common/openai_http.h. Token usage (usage.total_tokens, summed over
 * regenerations) is reported as cost_units.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/openai_http.h"
#include "grade/rubric/rubric.h"
#include "sluice/sl_err.h"
#include "sluice/sl_plugin.h"

#define MAX_TEMPLATE 16384
#define MAX_CRITERIA 16

static const char default_system[] =
    "You are an examiner for a speaking test in the style of the OPIc. You grade one spoken "
    "answer from its automatic transcript (lowercase, no punctuation, may contain "
    "recognition errors). Judge fluency, vocabulary range, grammar and structure, and how well "
    "the answer addresses the question. Measurements of when the words were spoken and an "
    "automatic rubric's scores come with the answer: use them as evidence, and name the evidence "
    "in each criterion's comment. Reply with only a JSON object with exactly these "
    "fields: \"score\" (number 0 to 100), \"level\" (one of NL, NM, NH, IL, IM1, IM2, IM3, IH, "
    "AL), \"criteria\" (array of 1 to 16 objects with \"name\" (string), \"score\" (number 0 "
    "to 100) and \"comment\" (string)), \"feedback\" (two or three sentences for the learner).";

static const char default_template[] = "Question: {{prompt}}\n"
                                       "Answer length: {{duration_s}} seconds.\n"
                                       "Timing: {{timing}}\n"
                                       "Rubric criteria, measured:\n{{rubric}}\n"
                                       "Transcript of the answer:\n{{transcript}}";

static const sl_plugin_conf_key conf_keys[] = {
    {"base_url", SL_PLUGIN_CONF_STR, "https://api.openai.com",
     "server base URL; requests go to {base_url}/v1/chat/completions (a trailing /v1 is "
     "accepted)",
     0},
    {"api_key", SL_PLUGIN_CONF_STR, "",
     "API key sent as Authorization: Bearer (empty: no header, for local servers)", 1},
    {"model", SL_PLUGIN_CONF_STR, "gpt-4o-mini", "model name sent with each request", 0},
    {"structured_output", SL_PLUGIN_CONF_STR, "json_schema",
     "json_schema (strict structured output) or json_object (JSON mode); json_schema falls "
     "back to json_object when the server rejects it",
     0},
    {"system_prompt", SL_PLUGIN_CONF_STR, NULL,
     "system message (empty: the built-in examiner instructions, which spell out the schema)", 0},
    {"prompt_template", SL_PLUGIN_CONF_STR, NULL,
     "user message; placeholders {{prompt}}, {{transcript}}, {{duration_s}}, {{language}}, "
     "{{words}}, {{timing}} (the answer's timing in words), {{rubric}} (the offline rubric's "
     "criteria with scores and evidence) (empty: the built-in template)",
     0},
    {"temperature", SL_PLUGIN_CONF_DOUBLE, "0", "sampling temperature (0..2)", 0},
    {"max_tokens", SL_PLUGIN_CONF_INT, "0", "max_tokens for the reply (0: not sent)", 0},
    {"max_regenerations", SL_PLUGIN_CONF_INT, "1",
     "how many times an invalid reply is asked for again before the call fails as invalid_grade",
     0},
    {"max_raw_reply", SL_PLUGIN_CONF_INT, "2048",
     "bytes of an invalid reply attached to the failure (raw_reply)", 0},
    {"timeout_ms", SL_PLUGIN_CONF_INT, "60000", "timeout of each request", 0},
    {"connect_timeout_ms", SL_PLUGIN_CONF_INT, "5000", "connection timeout", 0},
    {"max_response", SL_PLUGIN_CONF_INT, "1048576",
     "largest reply accepted, bytes (a larger one is a transfer error: retry)", 0},
};

typedef struct {
  const sl_plugin_host *h;
  char url[1024];
  char auth[600];
  char model[128];
  char *system, *tmpl; /* host->alloc'd copies */
  int json_schema;     /* 0 after a fallback to json_object */
  double temperature;
  int64_t max_tokens, max_regen;
  size_t max_raw;
  long timeout_ms, connect_timeout_ms;
  size_t max_response;
  json_t *schema;
  /* the request body's parts that are the same for every call, serialized
   * once: it is what json_dumps gives for the whole body, put together
   * (send_req) with the conversation after the system message */
  char *body_head;    /* {"model":…,"messages":[<system message> */
  char *body_tail[2]; /* ],"temperature":…,"response_format":…} for
                         json_object [0] and json_schema [1] */
  sl_plugin_metric *m_bad_reply, *m_regen, *m_invalid, *m_fallback;
} grade_state;

typedef struct {
  grade_state *s;
  sl_plugin_call *call;
  char key[160];
  json_t *messages; /* grows with each regeneration */
  int regenerations;
  int sent_schema; /* the last request asked for json_schema */
  double wpm;      /* words per minute of the transcript, or -1 */
  int64_t tokens;
} grade_req;

/* ---------- the grade schema and its validation ---------- */

static const char *const levels[] = {"NL", "NM", "NH", "IL", "IM1", "IM2", "IM3", "IH", "AL"};

static json_t *make_schema(void) {
  json_t *lv = json_array();
  for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
    json_array_append_new(lv, json_string(levels[i]));
  return json_pack(
      "{s:s,s:b,s:[s,s,s,s],s:{s:{s:s,s:i,s:i},s:{s:s,s:o},s:{s:s,s:i,s:i,s:{s:s,s:b,s:[s,s,s],"
      "s:{s:{s:s},s:{s:s,s:i,s:i},s:{s:s}}}},s:{s:s}}}",
      "type", "object", "additionalProperties", 0, "required", "score", "level", "criteria",
      "feedback", "properties", "score", "type", "number", "minimum", 0, "maximum", 100, "level",
      "type", "string", "enum", lv, "criteria", "type", "array", "minItems", 1, "maxItems",
      MAX_CRITERIA, "items", "type", "object", "additionalProperties", 0, "required", "name",
      "score", "comment", "properties", "name", "type", "string", "score", "type", "number",
      "minimum", 0, "maximum", 100, "comment", "type", "string", "feedback", "type", "string");
}

static int score_ok(const json_t *v) {
  if (!json_is_number(v)) return 0;
  double d = json_number_value(v);
  return isfinite(d) && d >= 0 && d <= 100;
}

/* Validates a reply content against the grade schema. Returns the parsed
 * document (caller decrefs) or NULL with the reason in why. */
static json_t *grade_check(const char *content, char *why, size_t len) {
  json_error_t e;
  json_t *o = json_loads(content, 0, &e);
  if (!o) {
    snprintf(why, len, "not JSON: %s at offset %d", e.text, e.position);
    return NULL;
  }
  const char *k;
  json_t *v;
  if (!json_is_object(o)) {
    snprintf(why, len, "not a JSON object");
    goto bad;
  }
  json_object_foreach(o, k, v) {
    if (strcmp(k, "score") != 0 && strcmp(k, "level") != 0 && strcmp(k, "criteria") != 0 &&
        strcmp(k, "feedback") != 0) {
      snprintf(why, len, "unexpected field \"%.40s\"", k);
      goto bad;
    }
  }
  if (!score_ok(json_object_get(o, "score"))) {
    snprintf(why, len, "score must be a number from 0 to 100");
    goto bad;
  }
  const char *lvl = json_string_value(json_object_get(o, "level"));
  int found = 0;
  for (size_t i = 0; lvl && i < sizeof levels / sizeof levels[0]; i++)
    found |= strcmp(lvl, levels[i]) == 0;
  if (!found) {
    snprintf(why, len, "level must be one of NL NM NH IL IM1 IM2 IM3 IH AL");
    goto bad;
  }
  const char *fb = json_string_value(json_object_get(o, "feedback"));
  if (!fb || !*fb) {
    snprintf(why, len, "feedback must be a non-empty string");
    goto bad;
  }
  json_t *cr = json_object_get(o, "criteria");
  if (!json_is_array(cr) || json_array_size(cr) < 1 || json_array_size(cr) > MAX_CRITERIA) {
    snprintf(why, len, "criteria must be an array of 1 to %d objects", MAX_CRITERIA);
    goto bad;
  }
  size_t i;
  json_array_foreach(cr, i, v) {
    const char *name = json_string_value(json_object_get(v, "name"));
    if (!json_is_object(v) || json_object_size(v) != 3 || !name || !*name || strlen(name) > 64 ||
        !score_ok(json_object_get(v, "score")) || !json_is_string(json_object_get(v, "comment"))) {
      snprintf(why, len,
               "criteria[%zu] must be exactly {name: 1-64 characters, score: 0-100, comment: "
               "string}",
               i);
      goto bad;
    }
  }
  return o;
bad:
  json_decref(o);
  return NULL;
}

/* ---------- the prompt template ---------- */

static const char *const placeholders[] = {"prompt", "transcript", "duration_s", "language",
                                           "words",  "timing",     "rubric"};
#define NPLACEHOLDERS (sizeof placeholders / sizeof placeholders[0])

/* Checks that every {{name}} is known. */
static int template_ok(const char *t, char *err, size_t errlen) {
  for (const char *p = strstr(t, "{{"); p; p = strstr(p + 2, "{{")) {
    const char *e = strstr(p + 2, "}}");
    size_t n = e ? (size_t)(e - p - 2) : 0, i;
    for (i = 0; e && i < NPLACEHOLDERS; i++)
      if (strlen(placeholders[i]) == n && strncmp(p + 2, placeholders[i], n) == 0) break;
    if (!e || i == NPLACEHOLDERS) {
      snprintf(err, errlen, "grade.openai.prompt_template: unknown placeholder %.30s", p);
      return 0;
    }
  }
  return 1;
}

static size_t count_words(const char *s) {
  size_t n = 0;
  for (int in = 0; *s; s++) {
    int w = *s != ' ' && *s != '\t' && *s != '\n' && *s != '\r';
    if (w && !in) n++;
    in = w;
  }
  return n;
}

/* The evidence {{timing}} and {{rubric}} stand for: the rubric graded with
 * the answer's timing (the plugin's call c). Either is a sentence saying
 * why it is missing when it cannot be had. */
typedef struct {
  char timing[SL_RUBRIC_EVIDENCE];
  char rubric[SL_RUBRIC_NCRIT * (SL_RUBRIC_EVIDENCE + 48)];
} evidence;

static void measure(const sl_plugin_host *h, sl_plugin_call *c, const sl_plugin_input *in,
                    evidence *ev) {
  sl_rubric_timing t;
  sl_rubric_result *r = h->alloc(sizeof *r);
  const sl_rubric_timing *tp = sl_rubric_timing_read(h, c, &t);
  if (!r || sl_rubric_grade_timed(in->transcript ? in->transcript : "",
                                  in->duration_s > 0 ? in->duration_s : 0.001,
                                  in->prompt && *in->prompt ? in->prompt : NULL, tp, r) != 0) {
    snprintf(ev->timing, sizeof ev->timing, "(not measured)");
    snprintf(ev->rubric, sizeof ev->rubric, "(not measured: %s)",
             r ? "the transcript is longer than the rubric reads" : "out of memory");
  } else {
    if (!r->timed)
      snprintf(ev->timing, sizeof ev->timing,
               "(not measured: when the words were spoken is not known)");
    else
      snprintf(ev->timing, sizeof ev->timing, "%s", r->evidence[SL_RUBRIC_FLUENCY]);
    sl_rubric_criteria_text(r, ev->rubric, sizeof ev->rubric);
  }
  h->free(r);
}

/* Renders the template into a jansson string (NULL on out of memory). */
static json_t *render(const char *t, const sl_plugin_input *in, const evidence *ev) {
  char dur[32], words[32];
  snprintf(dur, sizeof dur, "%.1f", in->duration_s > 0 ? in->duration_s : 0.0);
  const char *tr = in->transcript && *in->transcript ? in->transcript : "(nothing was recognized)";
  snprintf(words, sizeof words, "%zu", count_words(in->transcript ? in->transcript : ""));
  const char *vals[NPLACEHOLDERS] = {in->prompt && *in->prompt ? in->prompt : "(not given)",
                                     tr,
                                     dur,
                                     in->language && *in->language ? in->language : "en",
                                     words,
                                     ev->timing,
                                     ev->rubric};
  size_t cap = strlen(t) + 1;
  for (size_t i = 0; i < NPLACEHOLDERS; i++)
    cap += strlen(vals[i]) * 4; /* each may repeat; bounded below */
  char *out = malloc(cap), *o = out;
  if (!out) return NULL;
  for (const char *p = t; *p;) {
    size_t i = NPLACEHOLDERS;
    if (p[0] == '{' && p[1] == '{')
      for (i = 0; i < NPLACEHOLDERS; i++) {
        size_t n = strlen(placeholders[i]);
        if (strncmp(p + 2, placeholders[i], n) == 0 && strncmp(p + 2 + n, "}}", 2) == 0) break;
      }
    if (i < NPLACEHOLDERS) {
      size_t vl = strlen(vals[i]);
      if ((size_t)(o - out) + vl + 1 > cap) break; /* a placeholder used more than 4 times */
      memcpy(o, vals[i], vl);
      o += vl;
      p += 4 + strlen(placeholders[i]);
    } else {
      if ((size_t)(o - out) + 2 > cap) break;
      *o++ = *p++;
    }
  }
  *o = '\0';
  json_t *j = json_string(out);
  free(out);
  return j;
}

/* The response_format a request asks for. */
static json_t *response_format(const grade_state *s, int schema) {
  return schema ? json_pack("{s:s,s:{s:s,s:b,s:O}}", "type", "json_schema", "json_schema", "name",
                            "opic_grade", "strict", 1, "schema", s->schema)
                : json_pack("{s:s}", "type", "json_object");
}

/* Serializes the body's constant parts once (0, or SL_ENOMEM): the model
 * and the system message before the rest of the conversation, the
 * temperature, response_format (either kind) and max_tokens after it. A
 * body of a placeholder conversation is cut where the placeholder is, so
 * the parts are exactly what json_dumps writes around it. */
static int body_parts(grade_state *s) {
  static const char mark[] = "\x01sluice-conversation\x01";
  for (int k = 0; k < 2; k++) {
    json_t *msgs = json_pack("[{s:s,s:s},s]", "role", "system", "content", s->system, mark);
    json_t *body =
        msgs ? json_pack("{s:s,s:o,s:f,s:o}", "model", s->model, "messages", msgs, "temperature",
                         s->temperature, "response_format", response_format(s, k))
             : NULL;
    if (body && s->max_tokens > 0)
      json_object_set_new(body, "max_tokens", json_integer((json_int_t)s->max_tokens));
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    char *at = text ? strstr(text, ",\"\\u0001sluice-conversation\\u0001\"") : NULL;
    if (!at) {
      free(text);
      return SL_ENOMEM;
    }
    const char *after = at + strlen(",\"\\u0001sluice-conversation\\u0001\"");
    size_t tl = strlen(after) + 1;
    if ((s->body_tail[k] = malloc(tl)) != NULL) memcpy(s->body_tail[k], after, tl);
    *at = '\0';
    if (k == 0)
      s->body_head = text;
    else
      free(text);
    if (!s->body_tail[k] || !s->body_head) return SL_ENOMEM;
  }
  return 0;
}

/* ---------- instance ---------- */

static char *dup_host(const sl_plugin_host *h, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = h->alloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static void destroy(void *v) {
  grade_state *s = v;
  if (!s) return;
  json_decref(s->schema);
  free(s->body_head);
  free(s->body_tail[0]);
  free(s->body_tail[1]);
  s->h->free(s->system);
  s->h->free(s->tmpl);
  s->h->free(s);
}

static int create(const sl_plugin_host *h, const sl_plugin_conf *c, void **out, char *err,
                  size_t errlen) {
  grade_state *s = h->alloc(sizeof *s);
  if (!s) return SL_ENOMEM;
  memset(s, 0, sizeof *s);
  s->h = h;
  const char *base = h->conf_str(c, "base_url"), *so = h->conf_str(c, "structured_output");
  const char *key = h->conf_str(c, "api_key"), *sys = h->conf_str(c, "system_prompt");
  const char *tmpl = h->conf_str(c, "prompt_template"), *model = h->conf_str(c, "model");
  if (!*sys) sys = default_system;
  if (!*tmpl) tmpl = default_template;
  s->temperature = h->conf_double(c, "temperature");
  s->max_tokens = h->conf_int(c, "max_tokens");
  s->max_regen = h->conf_int(c, "max_regenerations");
  int64_t max_raw = h->conf_int(c, "max_raw_reply");
  s->timeout_ms = (long)h->conf_int(c, "timeout_ms");
  s->connect_timeout_ms = (long)h->conf_int(c, "connect_timeout_ms");
  int64_t max_resp = h->conf_int(c, "max_response");
  int rc = SL_ECONFIG;
  if (strncmp(base, "http://", 7) != 0 && strncmp(base, "https://", 8) != 0)
    snprintf(err, errlen, "grade.openai.base_url must start with http:// or https://");
  else if (oai_url(base, "/chat/completions", s->url, sizeof s->url) != 0)
    snprintf(err, errlen, "grade.openai.base_url is too long");
  else if (strcmp(so, "json_schema") != 0 && strcmp(so, "json_object") != 0)
    snprintf(err, errlen, "grade.openai.structured_output must be json_schema or json_object");
  else if (!*model || strlen(model) >= sizeof s->model)
    snprintf(err, errlen, "grade.openai.model must be 1 to %zu bytes", sizeof s->model - 1);
  else if (strpbrk(key, "\r\n") ||
           (*key && snprintf(s->auth, sizeof s->auth, "Authorization: Bearer %s", key) >=
                        (int)sizeof s->auth))
    snprintf(err, errlen, "grade.openai.api_key must be one line of at most 500 bytes");
  else if (!(s->temperature >= 0 && s->temperature <= 2))
    snprintf(err, errlen, "grade.openai.temperature must be from 0 to 2");
  else if (s->max_tokens < 0 || s->max_regen < 0 || s->max_regen > 10 || max_raw < 0 ||
           max_raw > 65536)
    snprintf(err, errlen,
             "grade.openai.max_tokens must be >= 0, max_regenerations 0..10, max_raw_reply "
             "0..65536");
  else if (s->timeout_ms <= 0 || s->connect_timeout_ms <= 0 || max_resp < 1024)
    snprintf(err, errlen,
             "grade.openai.timeout_ms and connect_timeout_ms must be > 0, max_response >= 1024");
  else if (strlen(sys) > MAX_TEMPLATE || strlen(tmpl) > MAX_TEMPLATE)
    snprintf(err, errlen, "grade.openai.system_prompt and prompt_template: at most %d bytes",
             MAX_TEMPLATE);
  else if (template_ok(tmpl, err, errlen))
    rc = 0;
  if (!rc) {
    snprintf(s->model, sizeof s->model, "%s", model);
    s->json_schema = strcmp(so, "json_schema") == 0;
    s->max_raw = (size_t)max_raw;
    s->max_response = (size_t)max_resp;
    s->system = dup_host(h, sys);
    s->tmpl = dup_host(h, tmpl);
    s->schema = make_schema();
    if (!s->system || !s->tmpl || !s->schema || body_parts(s) != 0) rc = SL_ENOMEM;
  }
  if (rc) {
    destroy(s);
    return rc;
  }
  if (h->counter) {
    const char *l = "plugin=\"grade/openai\"";
    s->m_bad_reply = h->counter("sluice_openai_bad_replies_total", l,
                                "Provider replies that were not the expected JSON");
    s->m_regen = h->counter("sluice_openai_regenerations_total", l,
                            "Model replies that violated the grade schema and were asked again");
    s->m_invalid = h->counter("sluice_openai_invalid_replies_total", l,
                              "Calls failed because every reply violated the grade schema");
    s->m_fallback = h->counter("sluice_openai_json_mode_fallbacks_total", l,
                               "Switches from json_schema to json_object after a server refusal");
  }
  *out = s;
  return 0;
}

/* ---------- calls ---------- */

static void bump(const grade_state *s, sl_plugin_metric *m) {
  if (m && s->h->counter_add) s->h->counter_add(m, 1);
}

static void finish(grade_req *q, sl_plugin_outcome o, int64_t retry_ms, int throttled,
                   const char *cls, const char *reason) {
  const sl_plugin_host *h = q->s->h;
  sl_plugin_call *call = q->call;
  json_decref(q->messages);
  h->free(q);
  h->complete(call, o, retry_ms, throttled, cls, reason);
}

static void on_reply(const sl_plugin_http_response *r, void *ud);

/* Sends the conversation in q->messages. Returns 0 or a negative code (the
 * caller completes the call). The body is the serialized constant parts
 * around the conversation after its system message (the same bytes as
 * json_dumps of the whole body: the system prompt and the schema are not
 * serialized again for every call). */
static int send_req(grade_req *q) {
  grade_state *s = q->s;
  q->sent_schema = s->json_schema;
  const char *tail = s->body_tail[s->json_schema ? 1 : 0];
  size_t cap = strlen(s->body_head) + strlen(tail) + 1, len = 0;
  char *text = NULL;
  size_t n = json_array_size(q->messages);
  char **parts = calloc(n ? n : 1, sizeof *parts);
  int rc = parts ? 0 : SL_ENOMEM;
  for (size_t i = 1; rc == 0 && i < n; i++) { /* [0] is the system message: in body_head */
    parts[i] = json_dumps(json_array_get(q->messages, i), JSON_COMPACT);
    if (!parts[i])
      rc = SL_ENOMEM;
    else
      cap += 1 + strlen(parts[i]);
  }
  if (rc == 0 && (text = malloc(cap)) == NULL) rc = SL_ENOMEM;
  if (rc == 0) {
    len = (size_t)snprintf(text, cap, "%s", s->body_head);
    for (size_t i = 1; i < n; i++) len += (size_t)snprintf(text + len, cap - len, ",%s", parts[i]);
    len += (size_t)snprintf(text + len, cap - len, "%s", tail);
  }
  for (size_t i = 0; parts && i < n; i++) free(parts[i]);
  free(parts);
  if (rc) return rc;
  const char *hdrs[4] = {"Content-Type: application/json", "Accept: application/json", NULL, NULL};
  if (s->auth[0]) hdrs[2] = s->auth;
  sl_plugin_http_request req = {.struct_size = sizeof req,
                                .method = "POST",
                                .url = s->url,
                                .headers = hdrs,
                                .body = text,
                                .body_len = len,
                                .timeout_ms = s->timeout_ms,
                                .connect_timeout_ms = s->connect_timeout_ms,
                                .max_response = s->max_response};
  rc = s->h->http_send ? s->h->http_send(q->call, &req, on_reply, q) : SL_EINVAL;
  free(text); /* the host copied the body */
  return rc;
}

static void resend_or_finish(grade_req *q) {
  if (send_req(q) != 0)
    finish(q, SL_PLUGIN_RETRY, 0, 0, "http_send_failed", "the host could not start the request");
}

static int report(grade_req *q, const json_t *doc) {
  const sl_plugin_host *h = q->s->h;
  char engine[160];
  snprintf(engine, sizeof engine, "openai:%s", q->s->model);
  int rc = h->out_num(q->call, "score", json_number_value(json_object_get(doc, "score")));
  if (!rc) rc = h->out_str(q->call, "level", json_string_value(json_object_get(doc, "level")));
  if (!rc)
    rc = h->out_str(q->call, "feedback", json_string_value(json_object_get(doc, "feedback")));
  if (!rc) rc = h->out_str(q->call, "engine", engine);
  if (!rc && q->wpm >= 0) rc = h->out_num(q->call, "words_per_minute", q->wpm);
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(doc, "criteria"), i, c) {
    if (rc) break;
    rc = h->out_criterion(q->call, json_string_value(json_object_get(c, "name")),
                          json_number_value(json_object_get(c, "score")),
                          json_string_value(json_object_get(c, "comment")));
  }
  return rc;
}

/* Is this 400 about response_format (a server without json_schema)? */
static int rejects_response_format(const sl_plugin_http_response *r) {
  if (r->status != 400 || !r->body) return 0;
  char msg[600];
  oai_snippet(r->body, r->body_len, 580, msg, sizeof msg);
  return strstr(msg, "response_format") || strstr(msg, "json_schema");
}

static void on_reply(const sl_plugin_http_response *r, void *ud) {
  grade_req *q = ud;
  grade_state *s = q->s;
  const sl_plugin_host *h = s->h;
  oai_verdict v;
  if (!oai_judge(r, s->timeout_ms, &v)) {
    if (q->sent_schema && rejects_response_format(r)) {
      if (s->json_schema) { /* the first call to learn it; others in flight just resend */
        s->json_schema = 0;
        bump(s, s->m_fallback);
        h->log(SL_PLUGIN_LOG_WARN, q->key,
               "grade/openai: the server refused response_format json_schema (%s); using "
               "json_object from now on",
               v.reason);
      }
      resend_or_finish(q);
      return;
    }
    finish(q, v.outcome, v.retry_after_ms, v.throttled, v.error_class, v.reason);
    return;
  }
  json_t *o = r->body && r->body_len ? json_loadb(r->body, r->body_len, 0, NULL) : NULL;
  if (!json_is_object(o)) {
    char snip[160], reason[400];
    oai_snippet(r->body, r->body_len, 120, snip, sizeof snip);
    snprintf(reason, sizeof reason,
             "reply is not a JSON object (truncated or not JSON; HTTP %ld, %zu bytes): %s",
             r->status, r->body_len, snip);
    json_decref(o);
    bump(s, s->m_bad_reply);
    h->log(SL_PLUGIN_LOG_WARN, q->key, "grade/openai: %s", reason);
    finish(q, SL_PLUGIN_RETRY, 0, 0, "provider_bad_reply", reason);
    return;
  }
  json_int_t used =
      json_integer_value(json_object_get(json_object_get(o, "usage"), "total_tokens"));
  if (used > 0) q->tokens += used;
  json_t *msg = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
  const char *content = json_string_value(json_object_get(msg, "content"));
  const char *refusal = json_string_value(json_object_get(msg, "refusal"));
  if (!content) {
    char reason[480];
    const char *cls = refusal ? "model_refused" : "provider_bad_reply";
    if (refusal)
      snprintf(reason, sizeof reason, "the model refused: %.400s", refusal);
    else
      snprintf(reason, sizeof reason, "reply has no choices[0].message.content string");
    json_decref(o);
    finish(q, SL_PLUGIN_FAIL, 0, 0, cls, reason);
    return;
  }
  char why[200];
  const char *fin = json_string_value(
      json_object_get(json_array_get(json_object_get(o, "choices"), 0), "finish_reason"));
  json_t *doc = NULL;
  if (fin && strcmp(fin, "length") == 0)
    snprintf(why, sizeof why, "the reply was cut off at the token limit (finish_reason length)");
  else
    doc = grade_check(content, why, sizeof why);
  if (doc) {
    int rc = report(q, doc);
    if (!rc) rc = h->out_num(q->call, "cost_units", (double)q->tokens);
    json_decref(doc);
    json_decref(o);
    if (rc)
      finish(q, SL_PLUGIN_RETRY, 0, 0, "out_of_memory", "recording the grade failed");
    else
      finish(q, SL_PLUGIN_DONE, 0, 0, NULL, NULL);
    return;
  }
  if (q->regenerations < s->max_regen) {
    /* ask again, showing the model its reply and what is wrong with it */
    char fix[400];
    snprintf(fix, sizeof fix,
             "That reply is invalid: %s. Reply again with only the JSON object, following the "
             "required fields exactly.",
             why);
    size_t cl = strlen(content);
    json_t *bad = json_stringn(content, cl < 4096 ? cl : 4096);
    json_array_append_new(q->messages, json_pack("{s:s,s:o}", "role", "assistant", "content", bad));
    json_array_append_new(q->messages, json_pack("{s:s,s:s}", "role", "user", "content", fix));
    q->regenerations++;
    bump(s, s->m_regen);
    h->log(SL_PLUGIN_LOG_INFO, q->key, "grade/openai: invalid reply (%s); regeneration %d of %lld",
           why, q->regenerations, (long long)s->max_regen);
    json_decref(o);
    resend_or_finish(q);
    return;
  }
  char snip[160], reason[600];
  size_t cl = strlen(content), rl = cl < s->max_raw ? cl : s->max_raw;
  char *raw = h->alloc(rl + 1);
  if (raw) {
    memcpy(raw, content, rl);
    raw[rl] = '\0';
  }
  oai_snippet(content, cl, 120, snip, sizeof snip);
  snprintf(reason, sizeof reason,
           "model reply violates the grade schema after %d attempt%s: %s; reply: %s",
           q->regenerations + 1, q->regenerations ? "s" : "", why, snip);
  if (s->max_raw && raw) h->out_str(q->call, "raw_reply", raw);
  h->free(raw);
  if (q->tokens > 0) h->out_num(q->call, "cost_units", (double)q->tokens);
  bump(s, s->m_invalid);
  json_decref(o);
  finish(q, SL_PLUGIN_FAIL, 0, 0, "invalid_grade", reason);
}

static void call(void *v, const sl_plugin_input *in, sl_plugin_call *c) {
  grade_state *s = v;
  const sl_plugin_host *h = s->h;
  grade_req *q = h->alloc(sizeof *q);
  if (!q) {
    h->complete(c, SL_PLUGIN_RETRY, 0, 0, "out_of_memory", "no memory for the request");
    return;
  }
  memset(q, 0, sizeof *q);
  q->s = s;
  q->call = c;
  snprintf(q->key, sizeof q->key, "%s", in->key ? in->key : "");
  q->wpm = in->duration_s > 0
               ? (double)count_words(in->transcript ? in->transcript : "") * 60.0 / in->duration_s
               : -1;
  evidence *ev = h->alloc(sizeof *ev);
  json_t *user = NULL;
  if (ev) {
    measure(h, c, in, ev);
    user = render(s->tmpl, in, ev);
    h->free(ev);
  }
  q->messages = user ? json_pack("[{s:s,s:s},{s:s,s:o}]", "role", "system", "content", s->system,
                                 "role", "user", "content", user)
                     : NULL;
  if (!q->messages) {
    finish(q, SL_PLUGIN_RETRY, 0, 0, "out_of_memory", "no memory for the request");
    return;
  }
  resend_or_finish(q);
}

static const sl_plugin desc = {
    .abi_version = SL_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(sl_plugin),
    .kind = SL_PLUGIN_KIND_GRADE,
    .name = "openai",
    .version = "2.0.0",
    .description = "Grading by an LLM through an OpenAI-compatible POST /v1/chat/completions "
                   "with JSON-schema structured output (JSON mode as fallback), given the answer's "
                   "timing and the offline rubric's criteria as evidence; the reply is validated, "
                   "asked for again once when invalid, then failed as invalid_grade",
    .flags = 0,
    .conf = conf_keys,
    .nconf = sizeof conf_keys / sizeof conf_keys[0],
    .create = create,
    .destroy = destroy,
    .call = call,
};

__attribute__((visibility("default"))) const sl_plugin *sluice_plugin_entry(void);
const sl_plugin *sluice_plugin_entry(void) { return &desc; }
