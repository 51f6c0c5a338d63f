/* SPDX-License-Identifier: Apache-2.0 */
/*
 * misbehave.c — a grading plugin that breaks the call contract on purpose,
 * chosen by the transcript: "forget" returns without completing, "twice"
 * completes two times, "badoutcome" reports an outcome that does not exist,
 * anything else is graded 50/IM1. The host must turn each breach into a
 * FAIL of class plugin_error (or ignore the second completion), not crash.
 * A prompt or transcript containing MISBEHAVE_ABORT kills the process
 * (abort()): a poison input, for the stage runtime's stage.max_starts.
 * Its configuration has one key of each type to test the config plumbing.
 */
#include <stdlib.h>
#include <string.h>

#include "sluice/sl_plugin.h"

typedef struct {
  const sl_plugin_host *h;
  double level_score;
} state;

static const sl_plugin_conf_key conf[] = {
    {"score", SL_PLUGIN_CONF_DOUBLE, "50", "score given to well-behaved calls", 0},
    {"label", SL_PLUGIN_CONF_STR, "IM1", "level given to well-behaved calls", 0},
    {"count", SL_PLUGIN_CONF_INT, "3", "an integer setting (unused)", 0},
    {"strict", SL_PLUGIN_CONF_BOOL, "false", "a boolean setting (unused)", 0},
    {"token", SL_PLUGIN_CONF_STR, "", "a secret setting (unused)", 1},
};

/* in a prompt or a transcript: the call aborts the process */
#define MISBEHAVE_ABORT "sluice-test-abort"

static state st;
static const sl_plugin_conf *cfg;

static int create(const sl_plugin_host *h, const sl_plugin_conf *c, void **out, char *err,
                  size_t errlen) {
  (void)err;
  (void)errlen;
  st.h = h;
  st.level_score = h->conf_double(c, "score");
  cfg = c;
  *out = &st;
  return 0;
}

static void destroy(void *v) { (void)v; }

static void call(void *v, const sl_plugin_input *in, sl_plugin_call *c) {
  state *s = v;
  const sl_plugin_host *h = s->h;
  if (strstr(in->transcript, MISBEHAVE_ABORT) ||
      (in->prompt && strstr(in->prompt, MISBEHAVE_ABORT)))
    abort(); /* what an OOM kill or a segfault does to the stage, on purpose */
  if (strcmp(in->transcript, "forget") == 0) return;
  if (strcmp(in->transcript, "badoutcome") == 0) {
    h->complete(c, (sl_plugin_outcome)7, 0, 0, "x", "y");
    return;
  }
  h->out_num(c, "score", s->level_score);
  h->out_str(c, "level", h->conf_str(cfg, "label"));
  h->out_str(c, "feedback", "fixed");
  h->complete(c, SL_PLUGIN_DONE, 0, 0, NULL, NULL);
  if (strcmp(in->transcript, "twice") == 0)
    h->complete(c, SL_PLUGIN_FAIL, 0, 0, "late", "a second completion");
}

static const sl_plugin desc = {
    .abi_version = SL_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(sl_plugin),
    .kind = SL_PLUGIN_KIND_GRADE,
    .name = "misbehave",
    .version = "0.0.0",
    .description = "test: breaks the call contract on request",
    .flags = SL_PLUGIN_SYNC,
    .conf = conf,
    .nconf = sizeof conf / sizeof conf[0],
    .create = create,
    .destroy = destroy,
    .call = call,
};

__attribute__((visibility("default"))) const sl_plugin *sluice_plugin_entry(void);
const sl_plugin *sluice_plugin_entry(void) { return &desc; }
