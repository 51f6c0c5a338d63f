/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mask.c — a step plugin written the way a third party would: built out of
 * tree against the installed headers (sluice/sl_plugin.h, plugin ABI 2),
 * with no Sluice library linked. It masks listed words in a transcript:
 * reads "text", writes "text", on whatever message carries one
 * (sluice.v1.Transcript between stt and grade).
 *
 *   cc -std=c11 -shared -fPIC -I<prefix>/include mask.c -o step-mask.so
 *
 * Settings: step.mask.words (comma-separated, matched whole and without
 * regard to case), step.mask.with (the replacement, "***"). Used by
 * tests/integration/test_plugin_stage.sh, which places it in the pipeline
 * by configuration only.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sl_plugin.h"

typedef struct {
  const sl_plugin_host *h;
  char words[1024];
  char with[64];
} state;

static const sl_plugin_conf_key conf[] = {
    {"words", SL_PLUGIN_CONF_STR, "", "comma-separated words to mask", 0},
    {"with", SL_PLUGIN_CONF_STR, "***", "what a masked word becomes", 0},
};
static const char *const reads[] = {"text", NULL};
static const char *const writes[] = {"text", NULL};

static int create(const sl_plugin_host *h, const sl_plugin_conf *c, void **out, char *err,
                  size_t errlen) {
  state *s = calloc(1, sizeof *s);
  if (!s) return -1001;
  s->h = h;
  const char *w = h->conf_str(c, "words"), *r = h->conf_str(c, "with");
  if (strlen(w) >= sizeof s->words || strlen(r) >= sizeof s->with) {
    strncpy(err, "step.mask.words or step.mask.with is too long", errlen - 1);
    err[errlen - 1] = '\0';
    free(s);
    return -1002;
  }
  strcpy(s->words, w);
  strcpy(s->with, r);
  *out = s;
  return 0;
}

static void destroy(void *v) { free(v); }

/* is text[0..n) one of the listed words? */
static int listed(const state *s, const char *word, size_t n) {
  const char *p = s->words;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == n) {
      size_t i = 0;
      while (i < n && tolower((unsigned char)p[i]) == tolower((unsigned char)word[i])) i++;
      if (i == n) return 1;
    }
    p += l + (e ? 1 : 0);
  }
  return 0;
}

static void call(void *v, const sl_plugin_input *in, sl_plugin_call *c) {
  state *s = v;
  const sl_plugin_host *h = s->h;
  const char *text = h->in_str(c, "text");
  if (!text) {
    h->complete(c, SL_PLUGIN_FAIL, 0, 0, "bad_input", "the message has no text");
    return;
  }
  size_t cap = strlen(text) * (strlen(s->with) + 1) + 1, o = 0;
  char *out = malloc(cap);
  if (!out) {
    h->complete(c, SL_PLUGIN_RETRY, 0, 0, "out_of_memory", "masking");
    return;
  }
  for (const char *p = text; *p;) {
    size_t n = 0;
    while (isalpha((unsigned char)p[n]) || p[n] == '\'') n++;
    if (n && listed(s, p, n)) {
      memcpy(out + o, s->with, strlen(s->with));
      o += strlen(s->with);
    } else if (n) {
      memcpy(out + o, p, n);
      o += n;
    } else {
      out[o++] = *p;
      n = 1;
    }
    p += n;
  }
  out[o] = '\0';
  int rc = h->out_str(c, "text", out);
  free(out);
  if (rc)
    h->complete(c, SL_PLUGIN_FAIL, 0, 0, "plugin_error", "the host refused the masked text");
  else
    h->complete(c, SL_PLUGIN_DONE, 0, 0, NULL, NULL);
  (void)in;
}

static const sl_plugin desc = {
    .abi_version = SL_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(sl_plugin),
    .kind = SL_PLUGIN_KIND_STEP,
    .name = "mask",
    .version = "1.0.0",
    .description = "masks listed words in a message's text",
    .flags = SL_PLUGIN_SYNC,
    .conf = conf,
    .nconf = sizeof conf / sizeof conf[0],
    .create = create,
    .destroy = destroy,
    .call = call,
    .reads = reads,
    .writes = writes,
};

__attribute__((visibility("default"))) const sl_plugin *sluice_plugin_entry(void);
const sl_plugin *sluice_plugin_entry(void) { return &desc; }
