/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto_seeds.c — writes the seed corpus of fuzz_proto: one file per
 * message the stages write (SubmissionCreated with questions,
 * UploadCompleted, Transcript with words, QuestionStatus in each state,
 * GradeResult with criteria, DeadLetter with a storage event payload,
 * ReplayAudit, StoredOutputs), each as <type index byte><packed message>.
 * Built with the fuzz targets (not a test); run by hand when the schema
 * changes: proto_seeds tests/fuzz/corpus/fuzz_proto
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_proto_types.h"

static const char *dir;

static void put(const char *name, const ProtobufCMessage *m) {
  size_t idx = 0;
  while (idx < FUZZ_PROTO_NTYPES && fuzz_proto_types[idx] != m->descriptor) idx++;
  if (idx == FUZZ_PROTO_NTYPES) abort();
  size_t n = protobuf_c_message_get_packed_size(m);
  unsigned char *b = malloc(n + 1);
  if (!b) abort();
  b[0] = (unsigned char)idx;
  protobuf_c_message_pack(m, b + 1);
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(b, 1, n + 1, f) != n + 1 || fclose(f) != 0) {
    perror(path);
    exit(1);
  }
  free(b);
}

#define SID "0192f3a4-5b6c-7d8e-9f01-23456789abcd"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: proto_seeds DIR\n");
    return 2;
  }
  dir = argv[1];

  Sluice__V1__QuestionSpec q1 = SLUICE__V1__QUESTION_SPEC__INIT, q2 = q1;
  q1.no = 1, q1.content_type = "audio/wav", q1.size = 480044;
  q1.prompt = "Tell me about your weekend.", q1.object_key = "submissions/" SID "/q1.wav";
  q2.no = 2, q2.content_type = "audio/ogg", q2.size = 91234;
  q2.prompt = "Describe your home.", q2.object_key = "submissions/" SID "/q2.ogg";
  Sluice__V1__QuestionSpec *qs[] = {&q1, &q2};
  Sluice__V1__SubmissionCreated sc = SLUICE__V1__SUBMISSION_CREATED__INIT;
  sc.submission_id = SID, sc.accepted_at_ms = 1764470000123, sc.bucket = "sluice";
  sc.n_questions = 2, sc.questions = qs;
  sc.results_token_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
  put("submission_created", &sc.base);
  put("question_spec", &q1.base);

  Sluice__V1__UploadCompleted uc = SLUICE__V1__UPLOAD_COMPLETED__INIT;
  uc.submission_id = SID, uc.question_no = 1, uc.bucket = "sluice";
  uc.object_key = q1.object_key, uc.size = 480044, uc.etag = "\"5d41402abc4b2a76b9719d911017c592\"";
  uc.content_type = "audio/wav", uc.prompt = q1.prompt;
  uc.accepted_at_ms = 1764470000123, uc.uploaded_at_ms = 1764470004567;
  put("upload_completed", &uc.base);

  Sluice__V1__Word w1 = SLUICE__V1__WORD__INIT, w2 = w1, w3 = w1;
  w1.word = "i", w1.start_s = 0.12, w1.end_s = 0.3;
  w2.word = "like", w2.start_s = 0.3, w2.end_s = 0.71;
  w3.word = "hiking", w3.start_s = 0.71, w3.end_s = 1.4;
  Sluice__V1__Word *ws[] = {&w1, &w2, &w3};
  Sluice__V1__Transcript tr = SLUICE__V1__TRANSCRIPT__INIT;
  tr.upload = &uc, tr.text = "i like hiking", tr.duration_s = 1.52, tr.n_words = 3, tr.words = ws;
  tr.engine = "pocketsphinx", tr.language = "en", tr.cost_units = 1.52;
  put("transcript", &tr.base);
  put("word", &w2.base);

  Sluice__V1__Criterion c1 = SLUICE__V1__CRITERION__INIT, c2 = c1;
  c1.name = "fluency", c1.score = 61.5, c1.comment = "steady pace";
  c2.name = "vocabulary", c2.score = 48, c2.comment = "";
  Sluice__V1__Criterion *cs[] = {&c1, &c2};
  Sluice__V1__GradeResult gr = SLUICE__V1__GRADE_RESULT__INIT;
  gr.score = 58, gr.level = "IM1", gr.feedback = "Add more detail.", gr.words_per_minute = 112.5;
  gr.lexical_variety = 0.62, gr.filler_rate = 3.1, gr.relevance = 0.8, gr.engine = "rubric";
  gr.n_criteria = 2, gr.criteria = cs, gr.cost_units = 0;
  put("grade_result", &gr.base);
  put("criterion", &c1.base);

  Sluice__V1__QuestionStatus st = SLUICE__V1__QUESTION_STATUS__INIT;
  st.submission_id = SID, st.question_no = 1, st.at_ms = 1764470004600;
  st.accepted_at_ms = 1764470000123;
  st.state = SLUICE__V1__QUESTION_STATE__QUEUED, st.stage = "ingest";
  put("status_queued", &st.base);
  st.state = SLUICE__V1__QUESTION_STATE__GRADING, st.stage = "stt";
  st.transcript = "i like hiking", st.duration_s = 1.52;
  put("status_grading", &st.base);
  st.state = SLUICE__V1__QUESTION_STATE__DONE, st.stage = "grade", st.grade = &gr;
  put("status_done", &st.base);
  st.grade = NULL, st.transcript = "", st.duration_s = 0;
  st.state = SLUICE__V1__QUESTION_STATE__FAILED, st.stage = "stt";
  st.error_class = "provider_rejected", st.error_message = "HTTP 400: unsupported audio";
  put("status_failed", &st.base);

  static const char event[] =
      "{\"Records\":[{\"eventName\":\"s3:ObjectCreated:Put\",\"s3\":{\"bucket\":{\"name\":"
      "\"sluice\"},\"object\":{\"key\":\"submissions/" SID "/q1.wav\",\"size\":480044}}}]}";
  Sluice__V1__DeadLetter dl = SLUICE__V1__DEAD_LETTER__INIT;
  dl.stage = "ingest", dl.topic = "storage-events", dl.partition = 2, dl.offset = 1234;
  dl.payload.data = (uint8_t *)event, dl.payload.len = sizeof event - 1;
  dl.error_class = "bad_input", dl.error_message = "object key is not a submission key";
  dl.attempts = 1, dl.first_failure_ms = 1764470004600, dl.last_failure_ms = 1764470004600;
  dl.replay_topic = "storage-events", dl.subject_key = SID "/1";
  put("dead_letter_event", &dl.base);
  uint8_t packed_uc[512];
  size_t n = protobuf_c_message_pack(&uc.base, packed_uc);
  dl.stage = "stt", dl.topic = "stt.retry.30s", dl.partition = 0, dl.offset = 77;
  dl.key.data = (uint8_t *)SID "/1", dl.key.len = sizeof SID "/1" - 1;
  dl.payload.data = packed_uc, dl.payload.len = n;
  dl.error_class = "provider_unavailable", dl.error_message = "HTTP 503: overloaded";
  dl.attempts = 6, dl.replay_topic = "stt.requests";
  put("dead_letter_stt", &dl.base);

  Sluice__V1__ReplayAudit__Entry e1 = SLUICE__V1__REPLAY_AUDIT__ENTRY__INIT;
  e1.dlq_partition = 0, e1.dlq_offset = 17, e1.target_topic = "stt.requests";
  e1.key.data = (uint8_t *)SID "/1", e1.key.len = sizeof SID "/1" - 1;
  Sluice__V1__ReplayAudit__Entry *es[] = {&e1};
  Sluice__V1__ReplayAudit ra = SLUICE__V1__REPLAY_AUDIT__INIT;
  ra.id = "0192f3a5-0000-7000-8000-000000000001", ra.actor = "ops", ra.host = "node-1";
  ra.at_ms = 1764470100000, ra.filters = "--stage stt --class provider_unavailable";
  ra.dry_run = 1, ra.n_entries = 1, ra.entries = es;
  put("replay_audit", &ra.base);
  put("replay_audit_entry", &e1.base);

  uint8_t packed_st[1024];
  st.state = SLUICE__V1__QUESTION_STATE__GRADING, st.stage = "stt", st.error_class = "";
  st.error_message = "", st.transcript = "i like hiking";
  size_t sn = protobuf_c_message_pack(&st.base, packed_st);
  uint8_t packed_tr[1024];
  size_t tn = protobuf_c_message_pack(&tr.base, packed_tr);
  Sluice__V1__StoredOutputs__Output o1 = SLUICE__V1__STORED_OUTPUTS__OUTPUT__INIT, o2 = o1;
  o1.topic = "grade.requests", o1.key = SID "/1", o1.value.data = packed_tr, o1.value.len = tn;
  o2.topic = "results", o2.key = SID "/1", o2.value.data = packed_st, o2.value.len = sn;
  Sluice__V1__StoredOutputs__Output *os[] = {&o1, &o2};
  Sluice__V1__StoredOutputs so = SLUICE__V1__STORED_OUTPUTS__INIT;
  so.n_outputs = 2, so.outputs = os, so.stored_at_ms = 1764470005000;
  put("stored_outputs", &so.base);
  put("stored_outputs_output", &o2.base);
  return 0;
}
