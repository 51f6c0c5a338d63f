/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lateread.c — an async grading plugin that reads its input late: call()
 * only starts an HTTP request (to grade.lateread.url), and the callback,
 * on the loop after call() returned, reads the transcript twice — through
 * the input pointer it was given and through host->in_str("text") — and
 * writes both back (feedback and level). The ABI says the input is the
 * host's until complete(), so both must still be the transcript then
 * (tests/integration/test_async_input.sh).
 */
#include <stdio.h>
#include <string.h>

#include "sluice/sl_plugin.h"

typedef struct {
  const sl_plugin_host *h;
  const char *url;
} state;

typedef struct {
  state *s;
  const sl_plugin_input *in;
  sl_plugin_call *call;
} pending;

static const sl_plugin_conf_key conf[] = {
    {"url", SL_PLUGIN_CONF_STR, "", "any URL answering GET (the fake provider's /stats)", 0},
};

static state st;
static pending slots[4096];
static unsigned next_slot;

static int create(const sl_plugin_host *h, const sl_plugin_conf *c, void **out, char *err,
                  size_t errlen) {
  st.h = h;
  st.url = h->conf_str(c, "url");
  if (!st.url[0]) {
    snprintf(err, errlen, "grade.lateread.url is required");
    return -1002;
  }
  *out = &st;
  return 0;
}

static void destroy(void *v) { (void)v; }

static void on_reply(const sl_plugin_http_response *r, void *ud) {
  pending *p = ud;
  const sl_plugin_host *h = p->s->h;
  (void)r;
  const char *by_name = h->in_str(p->call, "text");
  char seen[600];
  snprintf(seen, sizeof seen, "%s", p->in->transcript ? p->in->transcript : "(null)");
  h->out_num(p->call, "score", 50);
  h->out_str(p->call, "level", "IM1");
  h->out_str(p->call, "feedback", seen);
  h->out_str(p->call, "engine", by_name ? by_name : "(none)");
  h->complete(p->call, SL_PLUGIN_DONE, 0, 0, NULL, NULL);
}

static void call(void *v, const sl_plugin_input *in, sl_plugin_call *c) {
  state *s = v;
  pending *p = &slots[next_slot++ % (sizeof slots / sizeof slots[0])];
  *p = (pending){s, in, c};
  sl_plugin_http_request q = {
      .struct_size = sizeof q, .method = "GET", .url = s->url, .timeout_ms = 5000};
  if (s->h->http_send(c, &q, on_reply, p) != 0)
    s->h->complete(c, SL_PLUGIN_RETRY, 0, 0, "unreachable", "http_send failed");
}

static const char *const reads[] = {"text", NULL};

static const sl_plugin desc = {
    .abi_version = SL_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(sl_plugin),
    .kind = SL_PLUGIN_KIND_GRADE,
    .name = "lateread",
    .version = "1.0.0",
    .description = "test: reads its input after call() returned",
    .flags = 0,
    .conf = conf,
    .nconf = sizeof conf / sizeof conf[0],
    .create = create,
    .destroy = destroy,
    .call = call,
    .reads = reads,
};

__attribute__((visibility("default"))) const sl_plugin *sluice_plugin_entry(void);
const sl_plugin *sluice_plugin_entry(void) { return &desc; }
