/* SPDX-License-Identifier: Apache-2.0 */
/*
 * earlydone.c — an async STT plugin that completes its call before its
 * upload is over: call() starts a POST of the input audio as a multipart
 * file part (to stt.earlydone.url) and completes at once, so the host's
 * done() — and with it the stage freeing the audio — runs while libcurl
 * is still to send the part. The ABI lets a plugin do that (the host
 * copies or keeps what a request needs), so the bytes must still arrive
 * intact (tests/unit/test_formstream.c). The reply is ignored.
 */
#include <stdio.h>
#include <string.h>

#include "sluice/sl_plugin.h"

typedef struct {
  const sl_plugin_host *h;
  const char *url;
} state;

static const sl_plugin_conf_key conf[] = {
    {"url", SL_PLUGIN_CONF_STR, "", "where the audio is POSTed", 0},
};

static state st;

static int create(const sl_plugin_host *h, const sl_plugin_conf *c, void **out, char *err,
                  size_t errlen) {
  st.h = h;
  st.url = h->conf_str(c, "url");
  if (!st.url[0]) {
    snprintf(err, errlen, "stt.earlydone.url is required");
    return -1002;
  }
  *out = &st;
  return 0;
}

static void destroy(void *v) { (void)v; }

static void on_reply(const sl_plugin_http_response *r, void *ud) {
  (void)r;
  (void)ud; /* the call is long over: nothing of it may be touched */
}

static void call(void *v, const sl_plugin_input *in, sl_plugin_call *c) {
  state *s = v;
  sl_plugin_form_part part = {"file", in->audio, in->audio_len, "a.wav", "audio/wav"};
  sl_plugin_http_request q = {.struct_size = sizeof q,
                              .method = "POST",
                              .url = s->url,
                              .form = &part,
                              .nform = 1,
                              .timeout_ms = 10000};
  if (s->h->http_send(c, &q, on_reply, NULL) != 0) {
    s->h->complete(c, SL_PLUGIN_RETRY, 0, 0, "unreachable", "http_send failed");
    return;
  }
  s->h->out_str(c, "text", "sent");
  s->h->complete(c, SL_PLUGIN_DONE, 0, 0, NULL, NULL);
}

static const sl_plugin desc = {
    .abi_version = SL_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(sl_plugin),
    .kind = SL_PLUGIN_KIND_STT,
    .name = "earlydone",
    .version = "1.0.0",
    .description = "test: completes before its upload is sent",
    .flags = 0,
    .conf = conf,
    .nconf = sizeof conf / sizeof conf[0],
    .create = create,
    .destroy = destroy,
    .call = call,
};

__attribute__((visibility("default"))) const sl_plugin *sluice_plugin_entry(void);
const sl_plugin *sluice_plugin_entry(void) { return &desc; }
