/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_s3event.c — S3 bucket notifications as ingest (and the presign
 * webhook) read them: sl__s3event_load on the raw message, then
 * sl__s3event_record on every record (stages/lib/s3event.c).
 *
 * Oracle (abort() on violation): load either fails with a reason and no
 * document, or succeeds with a document and a non-empty Records array (or
 * none for the test event); every record either fails with a reason or has
 * eventName, bucket and raw key set, a NUL-terminated decoded key no longer
 * than the raw one, and, when it is ours, a 36-character id and a question
 * number 1..9999 that sl__object_key_parse gives again from the key.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/s3event.h"

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_s3event: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);       \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_t *root, *records;
  char why[256];
  why[0] = '\0';
  if (sl__s3event_load(data, size, &root, &records, why, sizeof why) != 0) {
    CHECK(!root && !records && why[0]);
    return 0;
  }
  CHECK(root != NULL);
  CHECK(!records || (json_is_array(records) && json_array_size(records) > 0));
  size_t i;
  json_t *r;
  json_array_foreach(records, i, r) {
    sl__s3rec rec;
    why[0] = '\0';
    if (sl__s3event_record(r, &rec, why, sizeof why) != 0) {
      CHECK(why[0]);
      continue;
    }
    CHECK(rec.event_name && rec.bucket && rec.raw_key);
    CHECK(memchr(rec.key, '\0', sizeof rec.key) != NULL);
    CHECK(strlen(rec.key) <= strlen(rec.raw_key));
    CHECK(rec.size == -1 || rec.size > 0);
    CHECK(rec.created == (strncmp(rec.event_name, "s3:ObjectCreated:", 17) == 0));
    if (rec.ours) {
      char sid[37];
      unsigned q = 0;
      CHECK(strlen(rec.sid) == 36 && rec.qno >= 1 && rec.qno <= 9999);
      CHECK(sl__object_key_parse(rec.key, sid, &q) == 0 && q == rec.qno &&
            strcmp(sid, rec.sid) == 0);
    }
  }
  json_decref(root);
  return 0;
}
