#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_claim_outcome.sh on a one-node Redis Cluster with redis.buckets 8 (lib.sh,
# TEST_REDIS_CLUSTER1): the same checks, where a script or command
# whose keys cross slots is refused (CROSSSLOT).
export TEST_REDIS_CLUSTER1=1
exec bash "$(dirname "$0")/test_claim_outcome.sh"
