/* SPDX-License-Identifier: Apache-2.0 */
/*
 * submit.c — `sluicectl submit FILE...`: the client a person or a script
 * uses, behaving exactly as an app should (docs/openapi.yaml):
 *   1. POST /v1/submissions with one question per file (type from the
 *      extension, size from the file, the Nth --prompt for the Nth file);
 *   2. PUT each file to its presigned URL with the headers the reply lists,
 *      with a progress bar on stderr; a file of at least
 *      --multipart-threshold bytes goes instead in parts of --part-size
 *      through presign's /s3/multipart endpoints (multipart.c: resumable,
 *      parts retried);
 *   3. poll the results URL with the bearer token and If-None-Match, waiting
 *      what Retry-After says, until every question is done or failed or the
 *      API says poll.stop;
 *   4. print a table, or with --json the final results document.
 * Exit status: 0 every question done, 1 anything else (failed questions,
 * an API error, a failed upload, --wait exceeded), 2 bad arguments
 * (unreadable file, unknown audio type, a file needing more than 10000
 * parts).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "sl_client.h"
#include "sluicectl.h"

static void api_error(const char *what, const sc_http_reply *r) {
  if (r->status == 0) {
    fprintf(stderr, "sluicectl: %s: %s\n", what, r->error[0] ? r->error : "no answer");
    return;
  }
  json_t *j = json_loads(r->body ? r->body : "", 0, NULL);
  json_t *e = json_object_get(j, "error");
  const char *code = json_string_value(json_object_get(e, "code"));
  const char *msg = json_string_value(json_object_get(e, "message"));
  if (code)
    fprintf(stderr, "sluicectl: %s: HTTP %ld %s: %s\n", what, r->status, code, msg ? msg : "");
  else
    fprintf(stderr, "sluicectl: %s: HTTP %ld %.300s\n", what, r->status, r->body ? r->body : "");
  json_decref(j);
}

static void sleep_s(long s) {
  struct timespec ts = {s, 0};
  nanosleep(&ts, NULL);
}

static void print_table(json_t *res) {
  json_t *sum = json_object_get(res, "summary");
  printf("submission %s: %lld of %lld done, %lld failed\n\n",
         json_string_value(json_object_get(res, "submission_id")),
         (long long)json_integer_value(json_object_get(sum, "done")),
         (long long)json_integer_value(json_object_get(sum, "total")),
         (long long)json_integer_value(json_object_get(sum, "failed")));
  printf("%-3s %-8s %6s %-6s %10s  %s\n", "NO", "STATE", "SCORE", "LEVEL", "ACCEPT>DONE",
         "TRANSCRIPT / ERROR");
  size_t i;
  json_t *q;
  json_array_foreach(json_object_get(res, "questions"), i, q) {
    json_t *g = json_object_get(q, "grade");
    char score[16] = "-", lat[32] = "-";
    if (json_is_number(json_object_get(g, "score")))
      snprintf(score, sizeof score, "%.0f", json_number_value(json_object_get(g, "score")));
    if (json_is_integer(json_object_get(q, "accept_to_done_ms")))
      snprintf(lat, sizeof lat, "%.1fs",
               (double)json_integer_value(json_object_get(q, "accept_to_done_ms")) / 1000.0);
    const char *level = json_string_value(json_object_get(g, "level"));
    const char *text = json_string_value(json_object_get(q, "transcript"));
    json_t *err = json_object_get(q, "error");
    char what[200];
    if (err)
      snprintf(what, sizeof what, "%s: %s", json_string_value(json_object_get(err, "class")),
               json_string_value(json_object_get(err, "message")));
    else
      snprintf(what, sizeof what, "%.120s", text ? text : "-");
    printf("%-3lld %-8s %6s %-6s %10s  %s\n",
           (long long)json_integer_value(json_object_get(q, "no")),
           json_string_value(json_object_get(q, "state")), score, level ? level : "-", lat, what);
  }
  size_t k;
  json_array_foreach(json_object_get(res, "questions"), k, q) {
    const char *fb = json_string_value(json_object_get(json_object_get(q, "grade"), "feedback"));
    if (fb)
      printf("\nq%lld feedback: %s", (long long)json_integer_value(json_object_get(q, "no")), fb);
  }
  printf("\n");
}

int sc_submit(const sc_opts *o) {
  if (!o->api_key || !*o->api_key) {
    fprintf(stderr, "sluicectl: submit needs an API key: set SLUICE_API_KEY (or --api-key); "
                    "an operator creates one with `sluicectl apikey add --user ID`\n");
    return SC_EXIT_USAGE;
  }
  /* check every file before anything is created */
  int64_t *sizes = calloc((size_t)o->nargs, sizeof *sizes);
  sl_client_question *qs = sizes ? calloc((size_t)o->nargs, sizeof *qs) : NULL;
  if (!qs) {
    free(sizes);
    return SC_EXIT_FAIL;
  }
  for (int i = 0; i < o->nargs; i++) {
    struct stat st;
    const char *ct = sl_client_content_type(o->args[i]);
    if (stat(o->args[i], &st) != 0 || !S_ISREG(st.st_mode)) {
      fprintf(stderr, "sluicectl: no such file: %s\n", o->args[i]);
      free(qs);
      free(sizes);
      return SC_EXIT_USAGE;
    }
    if (!ct) {
      fprintf(stderr,
              "sluicectl: %s: unknown audio type (want .wav .flac .ogg .oga .opus .webm .mp3 "
              ".m4a .mp4)\n",
              o->args[i]);
      free(qs);
      free(sizes);
      return SC_EXIT_USAGE;
    }
    sizes[i] = (int64_t)st.st_size;
    if (sizes[i] >= o->mp_threshold &&
        (sizes[i] + o->part_size - 1) / o->part_size > SC_MAX_PARTS) {
      fprintf(stderr,
              "sluicectl: %s: %lld bytes would need more than %d parts of %lld bytes "
              "(raise --part-size)\n",
              o->args[i], (long long)sizes[i], SC_MAX_PARTS, (long long)o->part_size);
      free(qs);
      free(sizes);
      return SC_EXIT_USAGE;
    }
    qs[i] = (sl_client_question){i + 1, ct, sizes[i], i < o->nprompts ? o->prompts[i] : NULL};
  }
  char *body = sl_client_create_body(qs, (size_t)o->nargs);
  free(qs);
  char url[1024];
  snprintf(url, sizeof url, "%s/v1/submissions", o->presign_url);
  char keyhdr[8300]; /* an API key, or a JWT (up to 8 KiB) */
  snprintf(keyhdr, sizeof keyhdr, "Authorization: Bearer %s", o->api_key);
  const char *create_hdrs[] = {keyhdr, NULL};
  sc_http_reply r;
  double created_at = sc_mono_s();
  int rc = body ? sc_http_send("POST", url, create_hdrs, body, 30000, &r) : -1;
  free(body);
  if (rc != 0 || r.status != 201) {
    api_error("creating the submission", &r);
    sc_http_reply_free(&r);
    free(sizes);
    return SC_EXIT_FAIL;
  }
  sl_client_created created;
  char perr[256];
  rc = sl_client_created_parse(r.body, r.body ? strlen(r.body) : 0, (size_t)o->nargs, &created,
                               perr, sizeof perr);
  sc_http_reply_free(&r);
  if (rc != 0) {
    fprintf(stderr, "sluicectl: presign's reply: %s\n", perr);
    sl_client_created_free(&created);
    free(sizes);
    return SC_EXIT_FAIL;
  }
  const char *sid = created.submission_id, *token = created.results_token,
             *results = created.results_url;
  fprintf(stderr, "submission %s: %d question(s)\n", sid, o->nargs);

  int status = SC_EXIT_OK;
  for (int i = 0; i < o->nargs && status == SC_EXIT_OK; i++) {
    const sl_client_upload *up = &created.uploads[i];
    if (sizes[i] >= o->mp_threshold) {
      fprintf(stderr, "  uploading q%d %s (%lld bytes, multipart)\n", i + 1, o->args[i],
              (long long)sizes[i]);
      sc_mpu_job job = {o->presign_url, token,      sid,      i + 1,
                        up->object_key, o->args[i], sizes[i], o->part_size};
      if (sc_multipart_upload(&job) != 0) {
        fprintf(stderr, "sluicectl: uploading %s failed\n", o->args[i]);
        status = SC_EXIT_FAIL;
      }
      continue;
    }
    fprintf(stderr, "  uploading q%d %s\n", i + 1, o->args[i]);
    if (sc_http_put_file(up->url, o->args[i], (const char *const *)up->headers, 600000, &r) != 0 ||
        r.status / 100 != 2) {
      char what[600];
      snprintf(what, sizeof what, "uploading %s", o->args[i]);
      api_error(what, &r);
      status = SC_EXIT_FAIL;
    }
    sc_http_reply_free(&r);
  }
  free(sizes);
  if (status != SC_EXIT_OK) {
    sl_client_created_free(&created);
    return status;
  }

  char auth[300], inm[200];
  snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
  char etag[128] = "";
  json_t *last = NULL;
  double deadline = sc_mono_s() + o->wait_s;
  char last_line[512] = "";
  for (;;) {
    const char *h[3] = {auth, NULL, NULL};
    if (etag[0]) {
      snprintf(inm, sizeof inm, "If-None-Match: %s", etag);
      h[1] = inm;
    }
    long wait = 1;
    if (sc_http_get(results, h, 30000, &r) == 0 && r.status == 200) {
      json_decref(last);
      last = json_loads(r.body, 0, NULL);
      snprintf(etag, sizeof etag, "%s", r.etag);
      char line[512] = "";
      size_t i;
      json_t *q;
      json_array_foreach(json_object_get(last, "questions"), i, q) {
        size_t l = strlen(line);
        snprintf(line + l, sizeof line - l, "%sq%lld:%s", i ? " " : "",
                 (long long)json_integer_value(json_object_get(q, "no")),
                 json_string_value(json_object_get(q, "state")));
      }
      if (strcmp(line, last_line) != 0) fprintf(stderr, "  %s\n", line);
      snprintf(last_line, sizeof last_line, "%s", line);
      json_t *sum = json_object_get(last, "summary");
      if (json_is_true(json_object_get(sum, "complete"))) {
        sc_http_reply_free(&r);
        break;
      }
      if (json_is_true(json_object_get(json_object_get(last, "poll"), "stop"))) {
        fprintf(stderr, "sluicectl: the results API says to stop polling before completion\n");
        sc_http_reply_free(&r);
        status = SC_EXIT_FAIL;
        break;
      }
      json_int_t ra =
          json_integer_value(json_object_get(json_object_get(last, "poll"), "retry_after_s"));
      if (ra > 0) wait = (long)ra;
    } else if (r.status == 404 && sc_mono_s() < created_at + 30) {
      /* the view appears a moment after the create (materialize reads the
       * submissions topic); not there yet is not an error */
    } else if (r.status != 304) {
      api_error("polling the results", &r);
      if (r.status / 100 == 4 && r.status != 429) { /* will not get better */
        sc_http_reply_free(&r);
        status = SC_EXIT_FAIL;
        break;
      }
    }
    if (r.retry_after_s > 0) wait = r.retry_after_s; /* the header has the last word */
    sc_http_reply_free(&r);
    if (sc_mono_s() + (double)wait > deadline) {
      fprintf(stderr, "sluicectl: submission %s not complete after %d s (--wait)\n", sid,
              o->wait_s);
      status = SC_EXIT_FAIL;
      break;
    }
    sleep_s(wait);
  }
  if (last) {
    if (o->json) {
      char *txt = json_dumps(last, JSON_COMPACT);
      if (txt) printf("%s\n", txt);
      free(txt);
    } else {
      print_table(last);
    }
    json_t *sum = json_object_get(last, "summary");
    if (status == SC_EXIT_OK && json_integer_value(json_object_get(sum, "done")) !=
                                    json_integer_value(json_object_get(sum, "total")))
      status = SC_EXIT_FAIL;
  }
  json_decref(last);
  sl_client_created_free(&created);
  return status;
}
