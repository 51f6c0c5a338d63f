/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_xml.c — storage replies to the multipart calls presign makes
 * (CreateMultipartUpload, ListParts, CompleteMultipartUpload,
 * AbortMultipartUpload and S3 <Error> documents), read with libxml2 by
 * sl_s3_parse_reply (runtime/src/sl_s3.c).
 *
 * Input: byte 0 picks the call (bits 0-1) and the HTTP status (bits 2-5,
 * from a list of those storage sends), the rest is the body.
 *
 * Oracle (abort() on violation): the result code is one of 0, SL_ENOTFOUND,
 * SL_EINVAL, SL_EUNAVAIL, SL_ESTORAGE and equals r.rc; strings are
 * NUL-terminated within their fields; a successful create has an upload id;
 * a successful list has parts numbered 1..10000 with sizes >= 0 and, when
 * truncated, a marker >= 1.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sl_err.h"
#include "sluice/sl_s3.h"

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_xml: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);           \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

#define TERMINATED(f) (memchr((f), '\0', sizeof(f)) != NULL)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const long statuses[16] = {200, 200, 200, 204, 400, 403, 404, 409,
                                    500, 503, 0,   301, 200, 200, 206, 599};
  if (size < 1) return 0;
  int op = SL_S3_OP_CREATE + (data[0] & 3);
  long status = statuses[(data[0] >> 2) & 15];
  sl_s3_result r;
  memset(&r, 0, sizeof r);
  int rc = sl_s3_parse_reply(op, status, (const char *)data + 1, size - 1, &r);
  CHECK(rc == r.rc);
  CHECK(rc == 0 || rc == SL_ENOTFOUND || rc == SL_EINVAL || rc == SL_EUNAVAIL || rc == SL_ESTORAGE);
  CHECK(TERMINATED(r.code) && TERMINATED(r.message) && TERMINATED(r.upload_id) &&
        TERMINATED(r.etag));
  if (rc == 0 && op == SL_S3_OP_CREATE) CHECK(r.upload_id[0] != '\0');
  if (rc == 0 && op == SL_S3_OP_LIST) {
    CHECK(r.nparts <= SL_S3_MAX_PART_NO);
    for (size_t i = 0; i < r.nparts; i++) {
      CHECK(r.parts[i].number >= 1 && r.parts[i].number <= SL_S3_MAX_PART_NO);
      CHECK(r.parts[i].size >= 0 && TERMINATED(r.parts[i].etag));
    }
    CHECK(!r.truncated || r.next_marker >= 1);
  }
  if (rc != 0) CHECK(r.message[0] != '\0');
  free(r.parts);
  return 0;
}
