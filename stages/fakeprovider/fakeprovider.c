/*
 * fakeprovider.c — `sluice fakeprovider`: a stand-in for paid AI providers,
 * speaking the OpenAI-compatible HTTP API the provider plugins use:
 *   POST /v1/audio/transcriptions  -> {"text","language","duration","segments"}
 *   POST /v1/chat/completions      -> a chat.completion whose message content
 *                                     is a JSON grade; usage counts tokens
 *   GET  /stats                    -> calls by status, in flight, peak in flight
 * Each reply waits a latency drawn uniformly from latency ± jitter (a libuv
 * timer per request: thousands of requests wait at once on one thread).
 * Failures to simulate: a failure probability (503), a quota in requests/s
 * above which it answers 429 with Retry-After, and an outage window
 * ("START-END" seconds after start) during which everything is 503.
 * Deterministic for a given seed. @locality one loop thread.
 */
#define _POSIX_C_SOURCE 200809L
#include "../stages.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "sluice/sl_err.h"
#include "sluice/sl_http.h"
#include "sluice/sl_log.h"
#include "sluice/sl_metrics.h"

typedef struct {
  char *listen;
  int64_t stt_latency_ms, stt_jitter_ms, chat_latency_ms, chat_jitter_ms;
  double failure_rate;
  double quota_rps;
  char *outage;
  int64_t seed;
  int64_t max_body;
} fake_conf;

#define F(x) offsetof(fake_conf, x)
const sl_conf_entry sl__fakeprovider_table[] = {
    {"fakeprovider.listen", SL_CONF_STR, "127.0.0.1:8090", F(listen), "listen address", 0},
    {"fakeprovider.stt_latency_ms", SL_CONF_INT, "3000", F(stt_latency_ms),
     "mean latency of /v1/audio/transcriptions", 0},
    {"fakeprovider.stt_jitter_ms", SL_CONF_INT, "500", F(stt_jitter_ms),
     "latency spread (uniform, +-) of transcriptions", 0},
    {"fakeprovider.chat_latency_ms", SL_CONF_INT, "4500", F(chat_latency_ms),
     "mean latency of /v1/chat/completions", 0},
    {"fakeprovider.chat_jitter_ms", SL_CONF_INT, "500", F(chat_jitter_ms),
     "latency spread (uniform, +-) of chat completions", 0},
    {"fakeprovider.failure_rate", SL_CONF_DOUBLE, "0", F(failure_rate),
     "probability that a call answers 503", 0},
    {"fakeprovider.quota_rps", SL_CONF_DOUBLE, "0", F(quota_rps),
     "requests per second above which calls get 429 + Retry-After (0: no quota)", 0},
    {"fakeprovider.outage", SL_CONF_STR, "", F(outage),
     "START-END seconds after start during which every call is 503, e.g. 60-360", 0},
    {"fakeprovider.seed", SL_CONF_INT, "1", F(seed), "random seed (latency and failures)", 0},
    {"fakeprovider.max_body", SL_CONF_INT, "67108864", F(max_body),
     "largest request body accepted (audio uploads)", 0},
};
const size_t sl__fakeprovider_table_len =
    sizeof sl__fakeprovider_table / sizeof sl__fakeprovider_table[0];

typedef struct pending pending;

typedef struct {
  fake_conf *fc;
  pending *waiting; /* replies not yet due */
  uv_loop_t loop;
  sl_http_server *srv;
  uv_signal_t sigterm, sigint;
  uint64_t rng;
  int64_t started_ms;
  double outage_from, outage_to;
  /* quota: a token bucket of quota_rps with a one-second burst */
  double tokens;
  int64_t tokens_at_ms;
  int64_t in_flight, peak;
  uint64_t n200, n429, n503, n404, n400;
  sl_metric *m_calls[4];
} fake;

struct pending {
  uv_timer_t timer;
  pending *prev, *next;
  fake *F;
  sl_http_req *req;
  int status;
  int chat;
  size_t req_len;
};

static double rnd(fake *F) { /* xorshift64*, uniform in [0,1) */
  F->rng ^= F->rng >> 12;
  F->rng ^= F->rng << 25;
  F->rng ^= F->rng >> 27;
  return (double)((F->rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static const char *transcripts[] = {
    "on weekends i usually go hiking in the mountains with my friends and we bring sandwiches",
    "my favorite food is kimchi stew because it is spicy and warm and my mother makes it",
    "i live in a small apartment near the river and there is a park next to my building",
    "last summer i traveled to the beach with my brother and we swam every day",
};

static void reply(pending *p) {
  fake *F = p->F;
  char body[2048];
  int n = 0;
  const char *extra = NULL;
  if (p->status == 429) {
    extra = "Retry-After: 1\r\n";
    n = snprintf(body, sizeof body,
                 "{\"error\":{\"message\":\"Rate limit reached\",\"type\":\"requests\","
                 "\"code\":\"rate_limit_exceeded\"}}");
  } else if (p->status == 503) {
    n = snprintf(body, sizeof body,
                 "{\"error\":{\"message\":\"The server is overloaded or not ready yet.\","
                 "\"type\":\"server_error\",\"code\":null}}");
  } else if (!p->chat) {
    const char *t = transcripts[F->rng % (sizeof transcripts / sizeof transcripts[0])];
    double dur = (double)p->req_len / 32000.0; /* ~16 kHz 16-bit mono */
    n = snprintf(body, sizeof body,
                 "{\"task\":\"transcribe\",\"language\":\"english\",\"duration\":%.2f,"
                 "\"text\":\"%s\",\"segments\":[{\"id\":0,\"start\":0.0,\"end\":%.2f,"
                 "\"text\":\"%s\"}]}",
                 dur, t, dur, t);
  } else {
    int score = 40 + (int)(rnd(F) * 50);
    n = snprintf(body, sizeof body,
                 "{\"id\":\"chatcmpl-fake%llu\",\"object\":\"chat.completion\",\"created\":%lld,"
                 "\"model\":\"fake-grader\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                 "\"assistant\",\"content\":\"{\\\"score\\\":%d,\\\"level\\\":\\\"IM2\\\","
                 "\\\"feedback\\\":\\\"Clear answer; add more detail.\\\"}\"},"
                 "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":%zu,"
                 "\"completion_tokens\":24,\"total_tokens\":%zu}}",
                 (unsigned long long)(F->n200 + 1), (long long)(sl_now_ms() / 1000), score,
                 p->req_len / 4 + 1, p->req_len / 4 + 25);
  }
  sl_http_respond(p->req, p->status, "application/json", extra, body, (size_t)n);
  F->in_flight--;
  if (p->status == 200) F->n200++, sl_metric_add(F->m_calls[0], 1);
  if (p->status == 429) F->n429++, sl_metric_add(F->m_calls[1], 1);
  if (p->status == 503) F->n503++, sl_metric_add(F->m_calls[2], 1);
}

static void on_timer_closed(uv_handle_t *h) { free(h->data); }

static void unlink_p(pending *p) {
  if (p->prev) p->prev->next = p->next;
  else p->F->waiting = p->next;
  if (p->next) p->next->prev = p->prev;
}

static void on_due(uv_timer_t *t) {
  pending *p = t->data;
  unlink_p(p);
  reply(p);
  uv_close((uv_handle_t *)&p->timer, on_timer_closed);
}

static int over_quota(fake *F) {
  if (F->fc->quota_rps <= 0) return 0;
  int64_t now = sl_now_ms();
  F->tokens += (double)(now - F->tokens_at_ms) / 1000.0 * F->fc->quota_rps;
  if (F->tokens > F->fc->quota_rps) F->tokens = F->fc->quota_rps;
  F->tokens_at_ms = now;
  if (F->tokens < 1.0) return 1;
  F->tokens -= 1.0;
  return 0;
}

static void stats(fake *F, sl_http_req *req) {
  char body[512];
  int n = snprintf(body, sizeof body,
                   "{\"calls\":{\"200\":%llu,\"429\":%llu,\"503\":%llu},\"total\":%llu,"
                   "\"in_flight\":%lld,\"peak_in_flight\":%lld,\"uptime_s\":%.1f,"
                   "\"rejected\":{\"400\":%llu,\"404\":%llu}}\n",
                   (unsigned long long)F->n200, (unsigned long long)F->n429,
                   (unsigned long long)F->n503,
                   (unsigned long long)(F->n200 + F->n429 + F->n503), (long long)F->in_flight,
                   (long long)F->peak, (double)(sl_now_ms() - F->started_ms) / 1000.0,
                   (unsigned long long)F->n400, (unsigned long long)F->n404);
  sl_http_respond(req, 200, "application/json", "Cache-Control: no-store\r\n", body, (size_t)n);
}

static void handle(sl_http_req *req, void *ud) {
  fake *F = ud;
  const char *path = sl_http_req_path(req), *m = sl_http_req_method(req);
  if (strcmp(path, "/stats") == 0 && strcmp(m, "GET") == 0) {
    stats(F, req);
    return;
  }
  int chat = strcmp(path, "/v1/chat/completions") == 0;
  int stt = strcmp(path, "/v1/audio/transcriptions") == 0;
  if (!chat && !stt) {
    F->n404++;
    sl_http_respond_error(req, 404, "not_found", "no such endpoint", NULL);
    return;
  }
  if (strcmp(m, "POST") != 0) {
    F->n400++;
    sl_http_respond_error(req, 405, "method_not_allowed", "use POST", "Allow: POST\r\n");
    return;
  }
  size_t blen;
  sl_http_req_body(req, &blen);
  if (blen == 0) {
    F->n400++;
    sl_http_respond_error(req, 400, "invalid_request_error", "empty request body", NULL);
    return;
  }
  pending *p = calloc(1, sizeof *p);
  if (!p) {
    sl_http_respond_error(req, 500, "internal", "out of memory", NULL);
    return;
  }
  p->F = F;
  p->req = req;
  p->chat = chat;
  p->req_len = blen;
  double up = (double)(sl_now_ms() - F->started_ms) / 1000.0;
  if (F->outage_to > F->outage_from && up >= F->outage_from && up < F->outage_to)
    p->status = 503;
  else if (over_quota(F))
    p->status = 429;
  else if (rnd(F) < F->fc->failure_rate)
    p->status = 503;
  else
    p->status = 200;
  int64_t lat = chat ? F->fc->chat_latency_ms : F->fc->stt_latency_ms;
  int64_t jit = chat ? F->fc->chat_jitter_ms : F->fc->stt_jitter_ms;
  int64_t delay = lat + (int64_t)((rnd(F) * 2.0 - 1.0) * (double)jit);
  if (p->status == 429) delay = 5; /* refusals are quick */
  if (delay < 0) delay = 0;
  F->in_flight++;
  if (F->in_flight > F->peak) F->peak = F->in_flight;
  uv_timer_init(&F->loop, &p->timer);
  p->timer.data = p;
  p->next = F->waiting;
  if (F->waiting) F->waiting->prev = p;
  F->waiting = p;
  uv_timer_start(&p->timer, on_due, (uint64_t)delay, 0);
}

static void on_signal(uv_signal_t *h, int sig) {
  fake *F = h->data;
  sl_log(SL_LOG_INFO, NULL, "signal %d: shutting down", sig);
  sl_http_server_free(F->srv);
  F->srv = NULL;
  uv_close((uv_handle_t *)&F->sigterm, NULL);
  uv_close((uv_handle_t *)&F->sigint, NULL);
  uv_stop(&F->loop);
}

static void walk_close(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

int sl__fakeprovider_main(int argc, char **argv) {
  sl_common_conf cc = {0};
  fake_conf fc = {0};
  sl_conf_bind own[] = {{sl__fakeprovider_table, sl__fakeprovider_table_len, &fc}};
  sl_admin *admin = NULL;
  int rc = sl__stage_start(argc, argv, "fakeprovider",
                           "A stand-in for paid STT/LLM providers (OpenAI-compatible API).", &cc,
                           own, 1, "127.0.0.1:9190", &admin);
  if (rc) return rc;
  fake F = {.fc = &fc, .rng = (uint64_t)fc.seed * 0x9E3779B97F4A7C15ULL + 1};
  F.started_ms = F.tokens_at_ms = sl_now_ms();
  F.tokens = fc.quota_rps;
  const char *lbl[] = {"status=\"200\"", "status=\"429\"", "status=\"503\""};
  for (int i = 0; i < 3; i++)
    F.m_calls[i] = sl_metrics_counter("sluice_fakeprovider_calls_total", lbl[i],
                                      "Calls answered by the fake provider, by status");
  if (fc.outage && *fc.outage &&
      (sscanf(fc.outage, "%lf-%lf", &F.outage_from, &F.outage_to) != 2 ||
       F.outage_to <= F.outage_from)) {
    fprintf(stderr, "sluice fakeprovider: fakeprovider.outage must be START-END seconds\n");
    sl__stage_finish(&cc, own, 1, admin);
    return 2;
  }
  uv_loop_init(&F.loop);
  sl_http_limits lim = {.max_body = (size_t)fc.max_body, .request_timeout_ms = 60000};
  rc = sl_http_server_new(&F.srv, &F.loop, fc.listen, &lim, handle, &F);
  if (rc == 0) {
    uv_signal_init(&F.loop, &F.sigterm);
    uv_signal_init(&F.loop, &F.sigint);
    F.sigterm.data = F.sigint.data = &F;
    uv_signal_start(&F.sigterm, on_signal, SIGTERM);
    uv_signal_start(&F.sigint, on_signal, SIGINT);
    sl_log(SL_LOG_INFO, NULL,
           "listening on http://%s (stt %lld±%lld ms, chat %lld±%lld ms, failures %.0f%%, "
           "quota %g/s%s%s)",
           fc.listen, (long long)fc.stt_latency_ms, (long long)fc.stt_jitter_ms,
           (long long)fc.chat_latency_ms, (long long)fc.chat_jitter_ms, fc.failure_rate * 100,
           fc.quota_rps, fc.outage && *fc.outage ? ", outage " : "",
           fc.outage ? fc.outage : "");
    sl_admin_set_ready(admin, 1);
    uv_run(&F.loop, UV_RUN_DEFAULT);
  } else {
    sl_log(SL_LOG_ERROR, NULL, "listen %s: %s", fc.listen, sl_strerror(rc));
  }
  while (F.waiting) { /* replies not yet due: answer them now */
    pending *p = F.waiting;
    unlink_p(p);
    F.in_flight--;
    uv_timer_stop(&p->timer);
    sl_http_respond_error(p->req, 503, "shutting_down", "the provider is stopping", NULL);
    uv_close((uv_handle_t *)&p->timer, on_timer_closed);
  }
  uv_walk(&F.loop, walk_close, NULL);
  uv_run(&F.loop, UV_RUN_DEFAULT);
  uv_loop_close(&F.loop);
  sl__stage_finish(&cc, own, 1, admin);
  return rc ? 1 : 0;
}
