/* SPDX-License-Identifier: Apache-2.0 */
/*
 * abi1.c — a grading plugin as ABI 1 built it (abi_version 1, no declared
 * fields): ABI 2 hosts still run it, adapted (docs/plugin-abi.md). Grades
 * every transcript 42/ABI1.
 */
#include "sluice/sl_plugin.h"

static const sl_plugin_host *host;

static int create(const sl_plugin_host *h, const sl_plugin_conf *c, void **out, char *err,
                  size_t errlen) {
  (void)c;
  (void)err;
  (void)errlen;
  host = h;
  *out = (void *)&host;
  return 0;
}

static void destroy(void *v) { (void)v; }

static void call(void *v, const sl_plugin_input *in, sl_plugin_call *c) {
  (void)v;
  (void)in;
  host->out_num(c, "score", 42);
  host->out_str(c, "level", "ABI1");
  host->complete(c, SL_PLUGIN_DONE, 0, 0, NULL, NULL);
}

static const sl_plugin desc = {
    .abi_version = 1, /* what an ABI 1 build says; the layout is the same */
    .struct_size = sizeof(sl_plugin),
    .kind = SL_PLUGIN_KIND_GRADE,
    .name = "abi1",
    .version = "0.0.0",
    .description = "test: a plugin built for ABI 1",
    .flags = SL_PLUGIN_SYNC,
    .create = create,
    .destroy = destroy,
    .call = call,
};

__attribute__((visibility("default"))) const sl_plugin *sluice_plugin_entry(void);
const sl_plugin *sluice_plugin_entry(void) { return &desc; }
