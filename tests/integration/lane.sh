# SPDX-License-Identifier: Apache-2.0
# tests/integration/lane.sh - which test stack a test runs on (sourced by
# lib.sh, and first of all by tests that derive ports before lib.sh).
#
# tools/test starts two stacks, lanes a and b, and ctest hands every test that
# needs one a lane of its own (RESOURCE_GROUPS "stack:1" in tests/CMakeLists.txt,
# the lanes in tests/stacks.json), so two such tests run at once. Lane a is
# the default coordinates (DEVSTACK_*, SLUICE_TEST_PORT_BASE); lane b's are
# the TEST_LANE_B_* that tools/test exports. A test that holds both lanes
# (load and timing measurements) runs on group 0's, alone.
[[ -n ${TEST_LANE_DONE:-} ]] && return 0 # once per test: test_tls moves on to a stack of its own
TEST_LANE_DONE=1
case ${CTEST_RESOURCE_GROUP_0_STACK:-} in
*id:b*)
  if [[ -n ${TEST_LANE_B_DIR:-} ]]; then
    export DEVSTACK_DIR=$TEST_LANE_B_DIR
    export DEVSTACK_KAFKA_PORT=$TEST_LANE_B_KAFKA_PORT
    export DEVSTACK_REDIS_PORT=$TEST_LANE_B_REDIS_PORT
    export DEVSTACK_S3_PORT=$TEST_LANE_B_S3_PORT
    export SLUICE_TEST_PORT_BASE=$TEST_LANE_B_PORT_BASE
    export DEVSTACK_CORS_ORIGINS=http://127.0.0.1:$TEST_LANE_B_PORT_BASE
  fi
  ;;
esac
