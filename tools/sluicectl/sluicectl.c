/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sluicectl.c — the operator's command line (docs/sluicectl.md).
 *
 *   sluicectl dlq list   [FILTERS] [--json]
 *   sluicectl dlq show   PARTITION:OFFSET [--json]
 *   sluicectl dlq replay [FILTERS] [--rate N] [--dry-run] [--actor NAME] [--yes]
 *   sluicectl dlq audit  [--json]
 *   sluicectl topics ensure [--partitions N] [--replication R] [--config K=V]... TOPIC...
 *   sluicectl topics list [--all] [--json]
 *   sluicectl status [--admin HOST:PORT]... [--redis URL] [--watch [--interval S]] [--json]
 *   sluicectl submission ID [--redis URL] [--json]
 *   sluicectl submit [--prompt TEXT]... FILE... [--presign URL] [--wait S] [--json]
 *                    [--multipart-threshold BYTES] [--part-size BYTES] [--api-key KEY]
 *   sluicectl apikey add --user ID [--label TEXT] | list | revoke KEY-OR-ID |
 *                   rotate-secret KEY-OR-ID
 *
 * This file parses the command line (options may come anywhere after the
 * program name, as --opt VALUE or --opt=VALUE) and dispatches. Connection
 * settings come from the same environment as the stages
 * (SLUICE_KAFKA_BROKERS, SLUICE_PIPELINE_FILE: the stages and topics) or
 * --brokers / --topic / --audit-topic. Errors go to stderr with a non-zero
 * exit: 2 for usage, 1 for failures.
 *
 * `dlq inject` (not in the usage text) writes one made-up dead letter; it
 * exists for tests and drills.
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "sluicectl.h"
#include "sluice/sl_conf.h"
#include "sluice/sl_trace.h"
#include "sluice/sl_kafka.h"
#include "sluice/sl_pipeline.h"
#include "sluice/sl_redis.h"
#include "sluice/sl_rkey.h"
#include "sluice/sl_stage.h"

enum {
  O_BROKERS,
  O_TOPIC,
  O_TIMEOUT,
  O_AUDIT_TOPIC,
  O_STAGE,
  O_CLASS,
  O_SUBMISSION,
  O_SINCE,
  O_UNTIL,
  O_LIMIT,
  O_JSON,
  O_RATE,
  O_DRY_RUN,
  O_ACTOR,
  O_YES,
  O_PARTITIONS,
  O_REPLICATION,
  O_CONFIG,
  O_ALL,
  O_KEY,
  O_REPLAY_TOPIC,
  O_PAYLOAD_FILE,
  O_MESSAGE,
  O_ORIGIN_TOPIC,
  O_ATTEMPTS,
  O_FAILED_AT,
  O_COUNT_N,
  O_ADMIN,
  O_REDIS,
  O_WATCH,
  O_INTERVAL,
  O_PRESIGN,
  O_PROMPT,
  O_WAIT,
  O_MP_THRESHOLD,
  O_PART_SIZE,
  O_USER,
  O_LABEL,
  O_API_KEY,
  O_WEIGHT,
  O_TENANTS,
  O_ANSWERS_PER_DAY,
  O_COST_PER_DAY,
  O_HELP,
  O_COUNT
};

static const struct {
  const char *name;
  int takes_value;
} opt_table[O_COUNT] = {
    [O_BROKERS] = {"--brokers", 1},
    [O_TOPIC] = {"--topic", 1},
    [O_TIMEOUT] = {"--timeout", 1},
    [O_AUDIT_TOPIC] = {"--audit-topic", 1},
    [O_STAGE] = {"--stage", 1},
    [O_CLASS] = {"--class", 1},
    [O_SUBMISSION] = {"--submission", 1},
    [O_SINCE] = {"--since", 1},
    [O_UNTIL] = {"--until", 1},
    [O_LIMIT] = {"--limit", 1},
    [O_JSON] = {"--json", 0},
    [O_RATE] = {"--rate", 1},
    [O_DRY_RUN] = {"--dry-run", 0},
    [O_ACTOR] = {"--actor", 1},
    [O_YES] = {"--yes", 0},
    [O_PARTITIONS] = {"--partitions", 1},
    [O_REPLICATION] = {"--replication", 1},
    [O_CONFIG] = {"--config", 1},
    [O_ALL] = {"--all", 0},
    [O_KEY] = {"--key", 1},
    [O_REPLAY_TOPIC] = {"--replay-topic", 1},
    [O_PAYLOAD_FILE] = {"--payload-file", 1},
    [O_MESSAGE] = {"--message", 1},
    [O_ORIGIN_TOPIC] = {"--origin-topic", 1},
    [O_ATTEMPTS] = {"--attempts", 1},
    [O_FAILED_AT] = {"--failed-at", 1},
    [O_COUNT_N] = {"--count", 1},
    [O_HELP] = {"--help", 0},
    [O_ADMIN] = {"--admin", 1},
    [O_REDIS] = {"--redis", 1},
    [O_WATCH] = {"--watch", 0},
    [O_INTERVAL] = {"--interval", 1},
    [O_PRESIGN] = {"--presign", 1},
    [O_PROMPT] = {"--prompt", 1},
    [O_WAIT] = {"--wait", 1},
    [O_MP_THRESHOLD] = {"--multipart-threshold", 1},
    [O_PART_SIZE] = {"--part-size", 1},
    [O_USER] = {"--user", 1},
    [O_LABEL] = {"--label", 1},
    [O_API_KEY] = {"--api-key", 1},
    [O_WEIGHT] = {"--weight", 1},
    [O_TENANTS] = {"--tenants", 0},
    [O_ANSWERS_PER_DAY] = {"--answers-per-day", 1},
    [O_COST_PER_DAY] = {"--cost-per-day", 1},
};

#define B(x) (1ull << (x))
#define COMMON (B(O_BROKERS) | B(O_TOPIC) | B(O_TIMEOUT) | B(O_HELP))
#define FILTERS (B(O_STAGE) | B(O_CLASS) | B(O_SUBMISSION) | B(O_SINCE) | B(O_UNTIL) | B(O_LIMIT))

typedef struct {
  const char *group, *name;
  unsigned long long allowed;
  int min_args, max_args;
  int (*run)(const sc_opts *o);
  const char *args_help;
} command;

static const command commands[] = {
    {"dlq", "list", COMMON | FILTERS | B(O_JSON), 0, 0, sc_dlq_list, ""},
    {"dlq", "show", COMMON | B(O_JSON), 1, 1, sc_dlq_show, "PARTITION:OFFSET"},
    {"dlq", "replay",
     COMMON | FILTERS | B(O_RATE) | B(O_DRY_RUN) | B(O_ACTOR) | B(O_YES) | B(O_AUDIT_TOPIC), 0, 0,
     sc_dlq_replay, ""},
    {"dlq", "audit", COMMON | B(O_JSON) | B(O_AUDIT_TOPIC), 0, 0, sc_dlq_audit, ""},
    {"dlq", "inject",
     COMMON | B(O_STAGE) | B(O_CLASS) | B(O_KEY) | B(O_REPLAY_TOPIC) | B(O_PAYLOAD_FILE) |
         B(O_MESSAGE) | B(O_ORIGIN_TOPIC) | B(O_ATTEMPTS) | B(O_FAILED_AT) | B(O_COUNT_N),
     0, 0, sc_dlq_inject, ""},
    {"topics", "ensure", COMMON | B(O_PARTITIONS) | B(O_REPLICATION) | B(O_CONFIG), 1, 100000,
     sc_topics_ensure, "TOPIC..."},
    {"topics", "list", COMMON | B(O_ALL) | B(O_JSON), 0, 0, sc_topics_list, ""},
    /* one-word commands (name NULL) */
    {"status", NULL,
     B(O_BROKERS) | B(O_TIMEOUT) | B(O_HELP) | B(O_ADMIN) | B(O_REDIS) | B(O_WATCH) |
         B(O_INTERVAL) | B(O_JSON) | B(O_TENANTS),
     0, 0, sc_status, ""},
    {"submission", "delete",
     B(O_BROKERS) | B(O_TIMEOUT) | B(O_HELP) | B(O_REDIS) | B(O_JSON) | B(O_ACTOR), 1, 1,
     sc_submission_delete, "ID (a submission id)"},
    {"submission", NULL, B(O_BROKERS) | B(O_TIMEOUT) | B(O_HELP) | B(O_REDIS) | B(O_JSON), 1, 1,
     sc_submission, "ID (a submission id)"},
    {"erasures", NULL, B(O_BROKERS) | B(O_TIMEOUT) | B(O_HELP) | B(O_JSON), 0, 0, sc_erasures, ""},
    {"keys", NULL, B(O_HELP) | B(O_JSON), 0, 1, sc_keys, "[ID] (a submission id)"},
    {"submit", NULL,
     B(O_HELP) | B(O_PRESIGN) | B(O_PROMPT) | B(O_WAIT) | B(O_JSON) | B(O_MP_THRESHOLD) |
         B(O_PART_SIZE) | B(O_API_KEY),
     1, 1000, sc_submit, "FILE..."},
    {"apikey", "add",
     B(O_HELP) | B(O_REDIS) | B(O_BROKERS) | B(O_TIMEOUT) | B(O_USER) | B(O_LABEL) | B(O_JSON), 0,
     0, sc_apikey_add, ""},
    {"apikey", "list", B(O_HELP) | B(O_REDIS) | B(O_JSON), 0, 0, sc_apikey_list, ""},
    {"tenant", "set",
     B(O_HELP) | B(O_REDIS) | B(O_WEIGHT) | B(O_ANSWERS_PER_DAY) | B(O_COST_PER_DAY), 1, 1,
     sc_tenant_set, "TENANT"},
    {"tenant", "show", B(O_HELP) | B(O_REDIS) | B(O_JSON), 1, 1, sc_tenant_show, "TENANT"},
    {"apikey", "revoke", B(O_HELP) | B(O_REDIS) | B(O_BROKERS) | B(O_TIMEOUT), 1, 1,
     sc_apikey_revoke, "KEY-OR-ID"},
    {"apikey", "rotate-secret", B(O_HELP) | B(O_REDIS) | B(O_BROKERS) | B(O_TIMEOUT), 1, 1,
     sc_apikey_rotate_secret, "KEY-OR-ID"},
};

static void usage(FILE *f) {
  fprintf(f,
          "usage: sluicectl dlq list   [FILTERS] [--json]\n"
          "       sluicectl dlq show   PARTITION:OFFSET [--json]\n"
          "       sluicectl dlq replay [FILTERS] [--rate N] [--dry-run] [--actor NAME] [--yes]\n"
          "                            [--audit-topic T]\n"
          "       sluicectl dlq audit  [--json] [--audit-topic T]\n"
          "       sluicectl topics ensure [--partitions N] [--replication R]\n"
          "                               [--config KEY=VALUE]... TOPIC...\n"
          "       sluicectl topics list [--all] [--json]\n"
          "       sluicectl status [--admin HOST:PORT]... [--redis URL] [--watch] [--interval S]\n"
          "                        [--json] [--tenants]\n"
          "       sluicectl submission ID [--redis URL] [--json]\n"
          "       sluicectl submission delete ID [--redis URL] [--actor NAME] [--json]\n"
          "       sluicectl erasures [--json]\n"
          "       sluicectl keys [ID] [--json]\n"
          "       sluicectl submit [--prompt TEXT]... FILE... [--presign URL] [--wait S] [--json]\n"
          "                        [--multipart-threshold BYTES] [--part-size BYTES]\n"
          "                        [--api-key KEY]\n"
          "       sluicectl apikey add --user ID [--label TEXT] [--redis URL] [--brokers B] "
          "[--json]\n"
          "       sluicectl apikey list [--redis URL] [--json]\n"
          "       sluicectl apikey revoke KEY-OR-ID [--redis URL] [--brokers B]\n"
          "       sluicectl apikey rotate-secret KEY-OR-ID [--redis URL] [--brokers B]\n"
          "       sluicectl tenant set TENANT [--weight W] [--answers-per-day N]\n"
          "                                   [--cost-per-day UNITS] [--redis URL]\n"
          "       sluicectl tenant show TENANT [--redis URL] [--json]\n"
          "FILTERS: --stage S  --class C  --submission ID  --since T  --until T  --limit N\n"
          "  on the dead letter's stage, error class, key prefix <ID>/ and last failure time;\n"
          "  T is an RFC3339 time (2026-11-29T12:00:00Z) or a duration ago (90s, 15m, 2h, 3d);\n"
          "  --limit keeps the N oldest (by last failure) of the matching ones.\n"
          "replay: --rate messages/s (10); more than %d replays need --yes.\n"
          "every command: --brokers HOST:PORT (SLUICE_KAFKA_BROKERS, 127.0.0.1:9092)\n"
          "  --topic NAME, --audit-topic NAME (the pipeline's dead-letter topics, dlq and\n"
          "  dlq.audit; the pipeline is SLUICE_PIPELINE_FILE or the built-in one)\n"
          "  --timeout SECONDS (10: the longest wait on Kafka)\n"
          "status: --admin the stages' admin endpoints, repeatable or comma-separated\n"
          "  (SLUICECTL_ADMIN; default 127.0.0.1:9180..9185, the ports tools/stages uses);\n"
          "  --redis (SLUICE_REDIS_URL, redis://127.0.0.1:6379); --watch redraws every\n"
          "  --interval seconds (2); --tenants adds each provider stage's tenants: calls\n"
          "  waiting at its limiter, granted and deferred (summed over replicas).\n"
          "submission delete: erases submission ID everywhere (docs/privacy.md): its data\n"
          "  key destroyed (a tombstone on the data-key topic, then Redis), its objects in\n"
          "  both buckets (SLUICE_S3_*) and its Redis keys deleted, the erasure recorded on\n"
          "  the erasures topic (--actor); repeat it if it stops half way.\n"
          "erasures: the erasure records (who, when, what was erased; never content).\n"
          "keys: the Redis keys of submission ID's view and of its bucket (all buckets'\n"
          "  without ID) under SLUICE_REDIS_BUCKETS; connects to nothing.\n"
          "submit: the Nth --prompt goes with the Nth FILE; --presign (PRESIGN_URL,\n"
          "  http://127.0.0.1:8080); --wait gives up polling after S seconds (600);\n"
          "  files of at least --multipart-threshold bytes (16777216) go up in parts of\n"
          "  --part-size bytes (8388608; at least 5242880) through presign's /s3/multipart;\n"
          "  --api-key (SLUICE_API_KEY; prefer the variable: arguments show in ps).\n"
          "apikey: add prints a new key once (Redis keeps only its SHA-256); list shows ids;\n"
          "  revoke takes the key or its id. add and revoke write the record (a revocation:\n"
          "  a tombstone) to the pipeline's compacted API-key topic first (--brokers), which\n"
          "  presign rebuilds the key store from after Redis lost it. add also prints the\n"
          "  key's webhook signing secret once (stderr; --json: webhook_secret);\n"
          "  rotate-secret prints a new one (the previous one keeps signing beside it).\n"
          "tenant: set changes a tenant's settings in Redis, read by presign at every create\n"
          "  (no restart): its weight (1), answers it may create per UTC day and provider\n"
          "  cost units it may spend per UTC day; \"none\" removes a limit. A create past\n"
          "  either is refused with 429 quota_exceeded. show prints them and today's use.\n"
          "transport security comes from the stages' variables: SLUICE_KAFKA_SECURITY_PROTOCOL,\n"
          "  SLUICE_KAFKA_SASL_*, SLUICE_KAFKA_SSL_*, SLUICE_REDIS_PASSWORD, SLUICE_REDIS_TLS_*,\n"
          "  SLUICE_S3_CA_FILE (see docs/configuration.md).\n"
          "exit status: 0 success, 1 failure, 2 usage error\n",
          SC_CONFIRM_ABOVE);
}

static int usage_error(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "sluicectl: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n(sluicectl --help for usage)\n");
  return SC_EXIT_USAGE;
}

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v && *v ? v : dflt;
}

static int find_option(const char *arg, size_t len) {
  for (int i = 0; i < O_COUNT; i++)
    if (strlen(opt_table[i].name) == len && strncmp(opt_table[i].name, arg, len) == 0) return i;
  if (len == 2 && strncmp(arg, "-h", 2) == 0) return O_HELP;
  return -1;
}

/* converts the option values that need it; 0 or SC_EXIT_USAGE */
static int convert(sc_opts *o, const char *const *val, const unsigned long long seen) {
  long v;
  int64_t now = sl_now_ms();
  if (seen & B(O_SINCE)) {
    if (sc_parse_time(val[O_SINCE], now, &o->since_ms))
      return usage_error("bad time \"%s\" for --since (want e.g. 2026-11-29T12:00:00Z or 2h)%s",
                         val[O_SINCE], "");
    o->since_arg = val[O_SINCE];
    o->has_since = 1;
  }
  if (seen & B(O_UNTIL)) {
    if (sc_parse_time(val[O_UNTIL], now, &o->until_ms))
      return usage_error("bad time \"%s\" for --until (want e.g. 2026-11-29T12:00:00Z or 2h)%s",
                         val[O_UNTIL], "");
    o->until_arg = val[O_UNTIL];
    o->has_until = 1;
  }
  if (seen & B(O_FAILED_AT)) {
    if (sc_parse_time(val[O_FAILED_AT], now, &o->failed_at_ms))
      return usage_error("bad time \"%s\" for --failed-at%s", val[O_FAILED_AT], "");
    o->has_failed_at = 1;
  }
  if (seen & B(O_LIMIT)) {
    if (sc_parse_long(val[O_LIMIT], 1, 1000000000L, &v))
      return usage_error("--limit wants a positive integer, not \"%s\"%s", val[O_LIMIT], "");
    o->limit = v;
  }
  if (seen & B(O_TIMEOUT)) {
    if (sc_parse_long(val[O_TIMEOUT], 1, 300, &v))
      return usage_error("--timeout wants 1..300 seconds, not \"%s\"%s", val[O_TIMEOUT], "");
    o->timeout_ms = (int)v * 1000;
  }
  if (seen & B(O_PARTITIONS)) {
    if (sc_parse_long(val[O_PARTITIONS], 1, 100000, &v))
      return usage_error("--partitions wants a positive integer, not \"%s\"%s", val[O_PARTITIONS],
                         "");
    o->partitions = (int)v;
  }
  if (seen & B(O_REPLICATION)) {
    if (sc_parse_long(val[O_REPLICATION], 1, 1000, &v))
      return usage_error("--replication wants a positive integer, not \"%s\"%s", val[O_REPLICATION],
                         "");
    o->replication = (int)v;
  }
  if (seen & B(O_ATTEMPTS)) {
    if (sc_parse_long(val[O_ATTEMPTS], 1, 1000000, &v))
      return usage_error("--attempts wants a positive integer, not \"%s\"%s", val[O_ATTEMPTS], "");
    o->attempts = v;
  }
  if (seen & B(O_COUNT_N)) {
    if (sc_parse_long(val[O_COUNT_N], 1, 100000, &v))
      return usage_error("--count wants a positive integer, not \"%s\"%s", val[O_COUNT_N], "");
    o->count = v;
  }
  if (seen & B(O_INTERVAL)) {
    if (sc_parse_long(val[O_INTERVAL], 1, 3600, &v))
      return usage_error("--interval wants 1..3600 seconds, not \"%s\"%s", val[O_INTERVAL], "");
    o->interval_s = (int)v;
  }
  if (seen & B(O_WAIT)) {
    if (sc_parse_long(val[O_WAIT], 1, 86400, &v))
      return usage_error("--wait wants 1..86400 seconds, not \"%s\"%s", val[O_WAIT], "");
    o->wait_s = (int)v;
  }
  if (seen & B(O_MP_THRESHOLD)) {
    if (sc_parse_long(val[O_MP_THRESHOLD], 1, LONG_MAX, &v))
      return usage_error("--multipart-threshold wants a size in bytes (> 0), not \"%s\"%s",
                         val[O_MP_THRESHOLD], "");
    o->mp_threshold = v;
  }
  if (seen & B(O_PART_SIZE)) {
    if (sc_parse_long(val[O_PART_SIZE], 1, LONG_MAX, &v) || v < SC_MIN_PART_SIZE ||
        v > SC_MAX_PART_SIZE)
      return usage_error("--part-size wants bytes from 5242880 (5 MiB, the smallest part S3 "
                         "takes but for the last) to 5368709120 (5 GiB), not \"%s\"%s",
                         val[O_PART_SIZE], "");
    o->part_size = v;
  }
  if ((seen & B(O_INTERVAL)) && !(seen & B(O_WATCH)))
    return usage_error("--interval only goes with --watch%s%s", "", "");
  if (seen & B(O_RATE)) {
    char *end;
    double r = strtod(val[O_RATE], &end);
    if (*end || end == val[O_RATE] || !(r > 0) || r > 1e6)
      return usage_error("--rate wants messages per second (> 0), not \"%s\"%s", val[O_RATE], "");
    o->rate = r;
  }
  return 0;
}

static int any_env(const char *name) {
  (void)name;
  return 1;
}

int main(int argc, char **argv) {
  sl_pipeline *pipeline = NULL;
  sc_opts o;
  memset(&o, 0, sizeof o);
  /* the stages' own settings table, from the same SLUICE_* environment:
   * brokers, Redis, transport security and the pipeline, with the stages'
   * defaults (no second list of them here) */
  sl_common_conf cc;
  memset(&cc, 0, sizeof cc);
  sl_conf_bind cb = {sl_common_conf_table, sl_common_conf_table_len, &cc};
  char cerr[1024];
  sl_conf_set_known_env(any_env);
  if (sl_conf_load(&cb, 1, NULL, NULL, 0, cerr, sizeof cerr) != 0) {
    fprintf(stderr, "sluicectl: %s\n", cerr);
    sl_conf_release(&cb, 1);
    return SC_EXIT_USAGE;
  }
  if (sl_rkey_setup((int)cc.redis_buckets) != 0) { /* the API keys' names follow it */
    fprintf(stderr, "sluicectl: redis.buckets %lld is not between 0 and %d\n",
            (long long)cc.redis_buckets, SL_RKEY_MAX_BUCKETS);
    sl_conf_release(&cb, 1);
    return SC_EXIT_USAGE;
  }
  o.brokers = cc.kafka_brokers;
  o.timeout_ms = 10000;
  o.rate = 10;
  o.partitions = -1;
  o.replication = -1;
  o.redis_url = cc.redis_url;
  o.presign_url = env_or("PRESIGN_URL", "http://127.0.0.1:8080");
  o.api_key = env_or("SLUICE_API_KEY", NULL);
  o.interval_s = 2;
  o.wait_s = 600;
  o.mp_threshold = (int64_t)16 << 20;
  o.part_size = (int64_t)8 << 20;
  const char *admin_env = getenv("SLUICECTL_ADMIN");
  if (admin_env && *admin_env && sc_add_admins(&o, admin_env)) {
    fprintf(stderr, "sluicectl: SLUICECTL_ADMIN: too many endpoints (at most %d)\n", SC_MAX_ADMINS);
    sl_conf_release(&cb, 1);
    return SC_EXIT_USAGE;
  }
  int admin_from_env = o.nadmins > 0;

  const char *val[O_COUNT] = {0};
  unsigned long long seen = 0;
  char **pos = calloc((size_t)argc + 1, sizeof *pos);
  if (!pos) {
    sl_conf_release(&cb, 1);
    return SC_EXIT_FAIL;
  }
  int npos = 0, rc = SC_EXIT_USAGE, only_pos = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (only_pos || a[0] != '-' || a[1] == '\0') {
      pos[npos++] = argv[i];
      continue;
    }
    if (strcmp(a, "--") == 0) {
      only_pos = 1;
      continue;
    }
    const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    int id = find_option(a, len);
    if (id < 0) {
      /* the name only, not a value given with = */
      fprintf(stderr, "sluicectl: unknown option \"%.*s\"\n(sluicectl --help for usage)\n",
              (int)len, a);
      goto out;
    }
    const char *v = NULL;
    if (opt_table[id].takes_value) {
      if (eq) {
        v = eq + 1;
      } else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
        v = argv[++i];
      } else {
        rc = usage_error("%s needs a value%s", opt_table[id].name, "");
        goto out;
      }
      if (!*v && id != O_MESSAGE) {
        rc = usage_error("%s needs a non-empty value%s", opt_table[id].name, "");
        goto out;
      }
    } else if (eq) {
      rc = usage_error("%s takes no value%s", opt_table[id].name, "");
      goto out;
    }
    if (id == O_ADMIN) {
      if (admin_from_env) { /* the command line replaces the environment */
        o.nadmins = 0;
        admin_from_env = 0;
      }
      if (sc_add_admins(&o, v)) {
        rc = usage_error("too many --admin endpoints (at most %s)%s", SC_MAX_ADMINS_TEXT, "");
        goto out;
      }
    }
    if (id == O_PROMPT) {
      if (o.nprompts == SC_MAX_FILES) {
        rc = usage_error("too many --prompt options%s%s", "", "");
        goto out;
      }
      o.prompts[o.nprompts++] = v;
    }
    if (id == O_CONFIG) {
      if (o.nconfigs == SC_MAX_CONFIGS) {
        rc = usage_error("too many --config options%s%s", "", "");
        goto out;
      }
      o.configs[o.nconfigs++] = v;
    }
    val[id] = v;
    seen |= B(id);
  }
  if ((seen & B(O_HELP)) || (npos >= 1 && strcmp(pos[0], "help") == 0)) {
    usage(stdout);
    rc = SC_EXIT_OK;
    goto out;
  }
  if (npos == 0) {
    fprintf(stderr, "sluicectl: no command given\n");
    usage(stderr);
    goto out;
  }
  const command *cmd = NULL;
  for (size_t i = 0; i < sizeof commands / sizeof commands[0] && !cmd; i++)
    if (strcmp(commands[i].group, pos[0]) == 0 &&
        (!commands[i].name || (npos >= 2 && strcmp(commands[i].name, pos[1]) == 0)))
      cmd = &commands[i];
  if (!cmd) {
    int known_group = 0;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
      if (strcmp(commands[i].group, pos[0]) == 0) known_group = 1;
    if (known_group && npos < 2)
      fprintf(stderr, "sluicectl: \"%s\" needs a subcommand\n", pos[0]);
    else if (npos < 2)
      fprintf(stderr, "sluicectl: unknown command \"%s\"\n", pos[0]);
    else
      fprintf(stderr, "sluicectl: unknown command \"%s %s\"\n", pos[0], pos[1]);
    usage(stderr);
    goto out;
  }
  char cname[64];
  snprintf(cname, sizeof cname, "%s%s%s", cmd->group, cmd->name ? " " : "",
           cmd->name ? cmd->name : "");
  for (int id = 0; id < O_COUNT; id++) {
    if ((seen & B(id)) && !(cmd->allowed & B(id))) {
      rc = usage_error("option %s does not apply to \"%s\"", opt_table[id].name, cname);
      goto out;
    }
  }
  o.args = pos + (cmd->name ? 2 : 1);
  o.nargs = npos - (cmd->name ? 2 : 1);
  if (o.nargs < cmd->min_args || o.nargs > cmd->max_args) {
    const char *c = cname;
    if (cmd->max_args == 0)
      rc = usage_error("\"%s\" takes no arguments (got \"%s\")", c, o.args[0]);
    else
      rc = usage_error("\"%s\" wants %s", c, cmd->args_help);
    goto out;
  }
  if ((rc = convert(&o, val, seen))) goto out;
  if (seen & B(O_BROKERS)) o.brokers = val[O_BROKERS];
  o.stage = val[O_STAGE];
  o.cls = val[O_CLASS];
  o.submission = val[O_SUBMISSION];
  o.json = !!(seen & B(O_JSON));
  o.all = !!(seen & B(O_ALL));
  o.tenants = !!(seen & B(O_TENANTS));
  o.dry_run = !!(seen & B(O_DRY_RUN));
  o.yes = !!(seen & B(O_YES));
  o.actor = val[O_ACTOR];
  o.key = val[O_KEY];
  o.replay_topic = val[O_REPLAY_TOPIC];
  o.payload_file = val[O_PAYLOAD_FILE];
  o.message = val[O_MESSAGE];
  o.origin_topic = val[O_ORIGIN_TOPIC];
  o.watch = !!(seen & B(O_WATCH));
  if (seen & B(O_REDIS)) o.redis_url = val[O_REDIS];
  if (seen & B(O_PRESIGN)) o.presign_url = val[O_PRESIGN];
  if (seen & B(O_API_KEY)) o.api_key = val[O_API_KEY];
  if (seen & B(O_USER)) o.user = val[O_USER];
  if (seen & B(O_LABEL)) o.label = val[O_LABEL];
  if (seen & B(O_WEIGHT)) o.weight = val[O_WEIGHT];
  if (seen & B(O_ANSWERS_PER_DAY)) o.answers_per_day = val[O_ANSWERS_PER_DAY];
  if (seen & B(O_COST_PER_DAY)) o.cost_per_day = val[O_COST_PER_DAY];
  if (o.nprompts > o.nargs && cmd->run == sc_submit) {
    rc = usage_error("%s --prompt options for fewer files%s", "more", "");
    goto out;
  }
  if (sl_common_secure(&cc, 0, cerr, sizeof cerr) != 0) {
    fprintf(stderr, "sluicectl: %s\n", cerr);
    rc = SC_EXIT_USAGE;
    goto out;
  }
  char perr[1024];
  if (sl_pipeline_load(&pipeline, cc.pipeline_file, perr, sizeof perr) != 0) {
    fprintf(stderr, "sluicectl: %s\n", perr);
    rc = SC_EXIT_USAGE;
    goto out;
  }
  o.pipeline = pipeline;
  o.topic = (seen & B(O_TOPIC)) ? val[O_TOPIC] : sl_pipeline_dlq(pipeline);
  o.audit_topic = (seen & B(O_AUDIT_TOPIC)) ? val[O_AUDIT_TOPIC] : sl_pipeline_dlq_audit(pipeline);
  /* a replay records its span ("dlq replay", linked to the dead letter's
   * trace) where the stages send theirs */
  sl_trace_conf tc = {.endpoint = cc.trace_endpoint,
                      .service = "sluicectl",
                      .sample_ratio = 1,
                      .queue_spans = 4096,
                      .batch_spans = 512,
                      .flush_ms = 1000,
                      .timeout_ms = (int)(cc.trace_timeout_ms > 0 && cc.trace_timeout_ms <= 60000
                                              ? cc.trace_timeout_ms
                                              : 2000)};
  if (sl_trace_start(&tc) != 0)
    fprintf(stderr, "sluicectl: trace.endpoint: not a URL (no spans)\n");
  rc = cmd->run(&o);
  sl_trace_stop(); /* what was recorded goes out */
  sl_kafka_security_reset();
  sl_redis_security_reset();
out:
  sl_pipeline_free(pipeline);
  sl_conf_release(&cb, 1);
  free(pos);
  return rc;
}
