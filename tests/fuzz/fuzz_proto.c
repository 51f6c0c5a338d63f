/*
 * fuzz_proto.c — protobuf-c unpacking of every message type of
 * proto/sluice.proto (the list is generated from protoc-c's output by
 * proto_types.cmake, nested messages included), as a stage unpacks what it
 * reads from Kafka or Redis.
 *
 * Input: byte 0 picks the type (modulo the number of types), the rest is
 * the packed message.
 *
 * Oracle (abort() on violation): a message that unpacks passes
 * protobuf_c_message_check, packs to exactly get_packed_size bytes, those
 * bytes unpack again, and packing that gives the same bytes.
 */
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_proto_types.h"

#define CHECK(cond)                                                                        \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "fuzz_proto: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                             \
    }                                                                                      \
  } while (0)

static uint8_t *pack(const ProtobufCMessage *m, size_t *len) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *b = malloc(n ? n : 1);
  CHECK(b != NULL);
  CHECK(protobuf_c_message_pack(m, b) == n);
  *len = n;
  return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const ProtobufCMessageDescriptor *d = fuzz_proto_types[data[0] % FUZZ_PROTO_NTYPES];
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, size - 1, data + 1);
  if (!m) return 0;
  CHECK(m->descriptor == d);
  CHECK(protobuf_c_message_check(m));
  size_t n1, n2;
  uint8_t *b1 = pack(m, &n1);
  ProtobufCMessage *m2 = protobuf_c_message_unpack(d, NULL, n1, b1);
  CHECK(m2 != NULL);
  uint8_t *b2 = pack(m2, &n2);
  CHECK(n1 == n2 && memcmp(b1, b2, n1) == 0);
  free(b1);
  free(b2);
  protobuf_c_message_free_unpacked(m2, NULL);
  protobuf_c_message_free_unpacked(m, NULL);
  return 0;
}
