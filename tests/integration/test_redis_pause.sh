#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Redis stops answering (SIGSTOP) while a submission is created: materialize
# cannot apply the SubmissionCreated, sends it through its retry tier, and
# applies it once Redis is back (SIGCONT). The retry copy must be handled as
# what it is — a SubmissionCreated — not by the topic it came back on
# (materialize.retry.*): no dead letter, and the view appears with the
# submission's questions. A dead letter's replay_topic is where its message
# first came from.
#
# presign authenticates with a JWT and has no rate limits here, so creating a
# submission needs no Redis at all (API keys and the limiter live there).
source "$(dirname "$0")/lib.sh"
RPID=$(cat "$DEVSTACK_DIR/redis.pid")
at_exit "kill -CONT $RPID 2>/dev/null; true" # whatever happens, Redis runs again
export SLUICE_PRESIGN_RATE_PER_USER=0 SLUICE_PRESIGN_RATE_PER_ADDRESS=0
SLUICE_AUTH_JWT_HS256_SECRET=$(openssl rand -hex 32)
export SLUICE_AUTH_JWT_HS256_SECRET
export SLUICE_RETRY_TIERS=1s,2s
retry_topics 1s 2s
stages_up
JWT=$(jwt_hs256 "$SLUICE_AUTH_JWT_HS256_SECRET" redis-pause 600)
work=$(mktemp -d)
at_exit 'rm -rf "$work"'

kill -STOP "$RPID"
log "redis stopped (SIGSTOP)"
code=$(curl -sS -o "$work/created" -w '%{http_code}' -H "Authorization: Bearer $JWT" \
  -H 'Content-Type: application/json' -X POST "$PRESIGN_URL/v1/submissions" \
  --data '{"questions":[{"no":1,"content_type":"audio/wav","size":1000},{"no":2,"content_type":"audio/wav","size":1000}]}')
check "created while Redis is stopped ($code)" test "$code" = 201
sid=$(jq -r .submission_id "$work/created")
token=$(jq -r .results_token "$work/created")
# materialize's apply times out (2 s) and goes to its retry tier
wait_for 20 grep -q "retry 1 via materialize.retry" "$STAGES_DIR/materialize.log" ||
  fail "materialize did not send the submission through its retry tier"
kill -CONT "$RPID"
log "redis running again (SIGCONT)"

view() { curl -fsS -H "Authorization: Bearer $token" "$RESULTS_URL/v1/submissions/$sid" 2>/dev/null; }
# the retry copy is applied about a second (its tier) after Redis is back
has_questions() { jqe '.questions | length == 2' "$(view || true)"; }
wait_for 30 has_questions || true
v=$(view || true)
log "view: $(jq -c '{complete, questions: [.questions[] | {no, state}]}' <<<"$v" 2>/dev/null)"
check "the view exists after Redis is back" test -n "$v"
check "  ... with both declared questions, waiting for uploads" \
  jqe '[.questions[].no] == [1,2] and ([.questions[].state] | all(. == "awaiting_upload"))' "$v"
dls=$("$SLUICECTL" dlq list --json --submission "$sid" 2>/dev/null || true)
check "no dead letter for the submission (got: $(jq -c '{class: .error_class, topic: .original.topic}' <<<"$dls" 2>/dev/null | tr '\n' ' '))" \
  test -z "$dls"
check "no bad_message dead letters from materialize" \
  sh -c "! grep -q '\"bad_message\"\|(bad_message)' '$STAGES_DIR/materialize.log'"
finish
