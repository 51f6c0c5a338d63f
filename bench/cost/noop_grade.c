/* SPDX-License-Identifier: Apache-2.0 */
/*
 * noop_grade.c — a grading plugin that does nothing, for bench/cost only
 * (built into build/bench/, never installed or shipped): every call
 * completes at once, DONE, with engine "noop" and no score. grade with it
 * is the runtime around a plugin that costs nothing at all — the issue's
 * "instant provider" — where grade-rubric still pays the rubric's own
 * tokenizing and feedback (a few µs). Loaded by file path:
 * `sluice grade --plugin build/bench/grade-noop.so`.
 */
#include <stddef.h>

#include "sluice/sl_plugin.h"

static int create(const sl_plugin_host *h, const sl_plugin_conf *c, void **out, char *err,
                  size_t errlen) {
  (void)c;
  (void)err;
  (void)errlen;
  *out = (void *)h; /* the host table is all a call needs */
  return 0;
}

static void destroy(void *v) { (void)v; }

static void call(void *v, const sl_plugin_input *in, sl_plugin_call *c) {
  const sl_plugin_host *h = v;
  (void)in;
  if (h->out_str(c, "engine", "noop"))
    h->complete(c, SL_PLUGIN_RETRY, 0, 0, "out_of_memory", "recording the result failed");
  else
    h->complete(c, SL_PLUGIN_DONE, 0, 0, NULL, NULL);
}

static const sl_plugin desc = {
    .abi_version = SL_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(sl_plugin),
    .kind = SL_PLUGIN_KIND_GRADE,
    .name = "noop",
    .version = "1.0.0",
    .description = "bench only: completes every call at once with no grade",
    .flags = SL_PLUGIN_SYNC,
    .conf = NULL,
    .nconf = 0,
    .create = create,
    .destroy = destroy,
    .call = call,
};

__attribute__((visibility("default"))) const sl_plugin *sluice_plugin_entry(void);
const sl_plugin *sluice_plugin_entry(void) { return &desc; }
