/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib/s3event.h — reading S3 bucket notifications (internal to ingest and the
 * presign webhook; pure functions, no I/O, so they are also fuzz targets).
 *
 * The AWS event format: {"Records":[{"eventName":"s3:ObjectCreated:Put",
 * "s3":{"bucket":{"name":…},"object":{"key":…,"size":…,"eTag":…}}}]}.
 * Versity Gateway also sends {"Event":"s3:TestEvent"} once at start-up.
 */
#ifndef SLUICE_LIB_S3EVENT_H
#define SLUICE_LIB_S3EVENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define SL__S3KEY_MAX 1024

/* One record of an event, as far as ingest needs it. Strings point into the
 * json_t the record came from (valid while it lives) except key/sid. */
typedef struct {
  const char *event_name; /* "s3:ObjectCreated:Put" … */
  const char *bucket;
  const char *raw_key;     /* as sent (URL-encoded on AWS) */
  char key[SL__S3KEY_MAX]; /* decoded */
  char sid[37];            /* submission id, when the key is ours */
  unsigned qno;            /* question number, when the key is ours */
  int64_t size;            /* -1 when the event has no size */
  const char *etag;        /* or NULL */
  int created;             /* 1 for s3:ObjectCreated:* */
  int ours;                /* 1 when key parsed as submissions/<uuid>/q<N>.<ext> */
} sl__s3rec;

/* "submissions/<36-char lowercase-or-upper hex uuid>/q<1-4 digits>.<ext>"
 * -> sid, qno. 0, or SL_EPARSE. */
int sl__object_key_parse(const char *key, char sid[37], unsigned *qno);

/* Decodes %XX and '+' into out (len bytes with the NUL). 0, SL_ETOOBIG or
 * SL_EPARSE (a NUL byte encoded as %00). */
int sl__url_decode(const char *in, char *out, size_t len);

/* Parses an event. On 0, *root holds the parsed document (caller
 * json_decref()s it) and *records its Records array (borrowed), or NULL
 * for a test event. On SL_EPARSE, why says what is wrong and *root is NULL. */
int sl__s3event_load(const void *buf, size_t len, json_t **root, json_t **records, char *why,
                     size_t whylen);

/* Reads record r into out. 0, or SL_EPARSE with why set (a record lacking
 * eventName, bucket or key, or with a key too long to decode). A key that is
 * not ours is not an error here: out->ours says so. */
int sl__s3event_record(json_t *r, sl__s3rec *out, char *why, size_t whylen);

/* An ETag without its surrounding quotes (the gateway's events and a HEAD
 * quote it, other stores may not), into out (len bytes with the NUL). */
void sl__etag_bare(const char *in, char *out, size_t len);

/* The field of the submission's hash under which ingest records an upload
 * (question qno, bare ETag): "u<qno>:<etag>", into out (len bytes with the
 * NUL). Written by ingest (first_upload_time), read by the sweep. */
void sl__upload_field(unsigned qno, const char *etag, char *out, size_t len);

#endif
