# SPDX-License-Identifier: Apache-2.0
# Sluice — the two commands that matter:
#   make demo   set up everything on a fresh Debian 12 machine, run the whole
#               pipeline end to end on synthesized spoken answers
#   make test   set up everything and run the unit and integration tests
#               (AddressSanitizer + UndefinedBehaviorSanitizer build)
# Others: make bootstrap | build | unit | test-browser | image | test-image | deb | test-deb | bench-presign | bench-api | bench-poll | bench-sse | bench-sse-delay | bench-cost | bench-grading | bench-cluster | bench-stt | fuzz | fuzz-merge | stack-up | stack-down | clean

BUILD     ?= build
SAN_BUILD ?= build-san
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
CMAKE_GEN ?= -G Ninja

.PHONY: all bootstrap build build-san demo test test-browser test-nodes test-image image deb test-deb test-k8s unit stack-up stack-down clean bench bench-quick bench-presign bench-api bench-poll bench-sse bench-sse-delay bench-cost bench-grading bench-cluster bench-stt fuzz fuzz-merge

all: build

bootstrap:
	tools/bootstrap

build:
	cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD)

build-san:
	cmake -S . -B $(SAN_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DSLUICE_ASAN=ON -DSLUICE_UBSAN=ON
	cmake --build $(SAN_BUILD)

demo: bootstrap build
	tools/demo

test: bootstrap build build-san
	tools/test $(SAN_BUILD)

# The browser client's end-to-end tests alone (headless Chromium, own test stack).
test-browser: bootstrap build-san
	tools/test $(SAN_BUILD) -L browser

# Kafka broker faults on a three-node cluster (tests/integration/test_kafka_nodes.sh)
# alone; `make test` runs it too
test-nodes: bootstrap build-san
	tools/test $(SAN_BUILD) -L nodes

# The container image of deploy/Dockerfile (sluice:dev) with Debian's Docker,
# on a local debootstrap base (no Docker Hub needed); test-image also runs it
# read-only as non-root: --version, every --help, the plugins, every stage
# ready on the dev stack (tools/image, docs/deploy.md). Not part of `make test`.
image:
	tools/image build

test-image: build
	BUILD=$(BUILD) tools/image test

# The Debian package (CPack): build/sluice_<version>_<arch>.deb with
# sluice@<stage>.service; test-deb installs it in the local Debian image and
# starts every stage from it (tests/deploy/test_deb.sh, docs/deploy.md).
deb: build
	cd $(BUILD) && cpack -G DEB

test-deb: build
	BUILD=$(BUILD) tools/image test-deb

# The chart installed on a real one-node Kubernetes cluster built here from
# upstream sources (tools/k8s/cluster), with the image above, against a dev
# stack on the cluster's network: install, graded answers through the
# Services, scaling, a deleted pod and a helm upgrade under load, the topics
# hook Job, a dlq replay Job; the host restored at the end (tests/deploy/
# test_k8s.sh, docs/deploy.md). Needs root. Not part of `make test`.
test-k8s: build
	BUILD=$(BUILD) tools/k8s/test

unit: build-san
	ctest --test-dir $(SAN_BUILD) -L unit --output-on-failure

# Presigned URLs/s/core: Sluice's signer vs boto3 and the AWS SDK for JS v3
# (needs Node >= 20 and python3-venv; results go to docs/benchmarks-history.md).
# The published single-node load scenarios A-E end to end (about an hour;
# appends to docs/benchmarks-history.md, plots in docs/img/).
bench: bootstrap build
	BUILD=$(BUILD) bench/pipeline/run

# The same scenarios scaled down (A C D E, a few minutes): fails on any lost
# or duplicated answer. `make test` runs it too (ctest label "bench").
bench-quick: bootstrap build
	BUILD=$(BUILD) bench/pipeline/run --quick

bench-presign: build
	BUILD=$(BUILD) bench/presign/run

# Create latency of POST /v1/submissions (15 questions, durable Kafka write),
# open loop at 67/s plus a ramp, beside a bare librdkafka produce of the same
# message in the same seconds (bench/api/bare_produce); results go to
# docs/benchmarks-history.md. Set DEVSTACK_DIR and DEVSTACK_*_PORT for a stack of its
# own (its creates stay).
bench-api: build
	BUILD=$(BUILD) bench/api/run

# Polling throughput of GET /v1/submissions/{id} with If-None-Match (304),
# against the full 200 and a trivial route of the same server, same run;
# results go to docs/benchmarks-history.md.
bench-poll: build
	BUILD=$(BUILD) bench/poll/run

# Server-sent event streams one results process holds (10,000 by default) and
# the memory each costs, against the process's idle RSS in the same run.
bench-sse: build
	BUILD=$(BUILD) bench/sse/run

# The delay from a status reaching Kafka to an event stream, beside a client
# polling at the browser's policy on the same statuses (about 2 minutes);
# results go to docs/benchmarks-history.md.
bench-sse-delay: build
	BUILD=$(BUILD) bench/sse/delay

# CPU per message of each consuming stage driven at its maximum (a backlog
# the stage before it wrote, the fake provider answering at once), beside a
# raw librdkafka consume -> produce -> commit loop on the same messages, and
# materialize's applies beside a bare EVALSHA loop of its script, measured in
# the same run (about 10 minutes); results go to docs/benchmarks-history.md.
bench-cost: build
	BUILD=$(BUILD) bench/cost/run

# The grader on controlled speech: espeak-ng answers at three rates with
# 0.3/0.8/1.5 s pauses through preflight and the rubric; prints the table
# docs/grading.md keeps (about 20 s).
bench-grading: build
	BUILD=$(BUILD) bench/grading/run

# One Redis against a three-primary Redis Cluster in the same run: the
# pipeline's questions per second and materialize's applies per second with
# their CPU (about 12 minutes); results go to docs/benchmarks-history.md.
bench-cluster: build
	BUILD=$(BUILD) bench/cluster/run

# Offline speech recognition: word error rate, CPU per second of audio, memory
# and questions/s of PocketSphinx beside Whisper tiny.en and base on the 24
# synthesized answers of bench/stt/sentences.tsv (a few minutes; results go to
# docs/benchmarks-history.md). Hold /tmp/sluice-bench.lock on a shared machine.
bench-stt: build
	SLUICE_WHISPER_MODELS=tiny.en,base tools/bootstrap
	BUILD=$(BUILD) bench/stt/run

# libFuzzer targets of tests/fuzz (clang, ASan+UBSan) in build-fuzz: each runs
# FUZZ_SECONDS (per target: FUZZ_SECONDS_http=...) on a copy of its committed
# corpus; crashes land in build-fuzz/crashes/<target>/ and fail the run.
# `make unit` replays the corpora and tests/fuzz/regressions without clang.
fuzz:
	CC=clang cmake -S . -B $(FUZZ_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_FUZZ=ON
	cmake --build $(FUZZ_BUILD)
	FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run $(FUZZ_BUILD)

# Minimises what `make fuzz` found into tests/fuzz/corpus (review, then commit).
fuzz-merge:
	tests/fuzz/run --merge $(FUZZ_BUILD)

stack-up:
	tools/devstack up

stack-down:
	tools/stages down
	tools/devstack down

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(FUZZ_BUILD)
