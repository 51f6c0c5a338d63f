#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Transport security end to end, on a stack of its own (tools/devstack up
# --secure on ports BASE+900..904): Kafka clients only on SASL_SSL (PLAIN),
# Redis TLS-only with a password and an ACL user, the gateway on https, all
# under a throwaway CA. Checks that
#   - plaintext (and TLS without our CA / without a password) is refused by
#     every secured port;
#   - stages refuse to start, with a clear error and a non-zero exit, on a
#     wrong password or an unknown CA (Kafka and Redis) and on a sasl_*
#     protocol without a password, and never print a password;
#   - the real flow completes with all three secured: presign (https
#     presigned URL) -> PUT over https -> storage event -> ingest -> stt
#     (audio fetched over https) -> grade -> materialize (Redis TLS+ACL) ->
#     results; a multipart upload (presign's signed S3 calls over https)
#     and sluicectl (Kafka SASL_SSL, Redis TLS) work too.
source "$(dirname "$0")/lane.sh" # this test's lane (tools/test runs two)
BASE=${SLUICE_TEST_PORT_BASE:-18080}
_dir=${DEVSTACK_DIR:-${SLUICE_SOURCE_DIR:-$(cd -- "$(dirname -- "$0")/../.." && pwd -P)}/build-san/test-stack}
export DEVSTACK_DIR=$_dir-tls
export DEVSTACK_KAFKA_PORT=$((BASE + 900)) # controller +901, gateway listener +902
export DEVSTACK_REDIS_PORT=$((BASE + 903))
export DEVSTACK_S3_PORT=$((BASE + 904))
export DEVSTACK_SECURE=1
ROOT0=${SLUICE_SOURCE_DIR:-$(cd -- "$(dirname -- "$0")/../.." && pwd -P)}
"$ROOT0/tools/devstack" down --wipe >/dev/null 2>&1 || true # a previous run's leftovers
# A descriptor of the caller's (like the lock of `flock FILE tools/devstack up`,
# or a CI runner's pipe) must not live on in the daemons the stack starts.
fd_marker=$(mktemp)
exec {fd_marker_fd}>"$fd_marker"
source "$(dirname "$0")/lib.sh" # brings the secure stack up and exports its settings
exec {fd_marker_fd}>&-
held=
for pidfile in "$DEVSTACK_DIR"/{kafka,redis,versitygw,versitygw-derived}.pid; do
  pid=$(cat "$pidfile" 2>/dev/null) || continue
  [[ $(readlink -f /proc/"$pid"/fd/* 2>/dev/null) == *"$fd_marker"* ]] && held+=" ${pidfile##*/}"
done
check "the stack's daemons hold no descriptor of the caller's (held by:${held:- none})" test -z "$held"
rm -f "$fd_marker"
at_exit '"$ROOT/tools/devstack" down --wipe >/dev/null 2>&1 || true'
# devstack told other ports than its stack's refuses: stopping nothing and
# wiping the directory would leave the daemons running with no pid files
other=$(DEVSTACK_REDIS_PORT=$((DEVSTACK_REDIS_PORT + 50)) DEVSTACK_S3_PORT=$((DEVSTACK_S3_PORT + 50)) \
  "$ROOT/tools/devstack" down --wipe 2>&1) && rc=0 || rc=$?
check "devstack down with other ports is refused (exit $rc)" test "$rc" -ne 0
check "... saying why: $other" grep -q "runs with other ports than these" <<<"$other"
check "... and the stack is left as it was" \
  sh -c "kill -0 \$(cat '$DEVSTACK_DIR/redis.pid') && kill -0 \$(cat '$DEVSTACK_DIR/versitygw.pid')"
work=$(mktemp -d)
at_exit 'rm -rf "$work"'

CA=$SLUICE_S3_CA_FILE
[[ -s $CA && $SLUICE_KAFKA_SECURITY_PROTOCOL == sasl_ssl && $SLUICE_REDIS_URL == rediss://* &&
  $SLUICE_S3_ENDPOINT == https://* ]] || { fail "devstack env is not the secure one"; finish; }
KPORT=$DEVSTACK_KAFKA_PORT RPORT=$DEVSTACK_REDIS_PORT SPORT=$DEVSTACK_S3_PORT
SECRETS=("$SLUICE_KAFKA_SASL_PASSWORD" "$SLUICE_REDIS_PASSWORD")

# a CA nobody signed our servers with
openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$work/other.key" -out "$work/other-ca.pem" \
  -days 1 -subj "/CN=not the devstack CA" 2>/dev/null

# ---- the secured ports refuse plaintext and strangers -------------------------------
check "redis: a plaintext client gets no answer" \
  test "$(timeout 5 redis-cli -h 127.0.0.1 -p "$RPORT" ping 2>&1 || true)" != PONG
check "redis: TLS without a password is refused (NOAUTH)" \
  grep -q NOAUTH <<<"$(timeout 5 redis-cli --tls --cacert "$CA" -h 127.0.0.1 -p "$RPORT" ping 2>&1 || true)"
check "redis: TLS with the ACL user answers" \
  test "$(REDISCLI_AUTH=$SLUICE_REDIS_PASSWORD timeout 5 redis-cli --tls --cacert "$CA" \
    --user "$SLUICE_REDIS_USERNAME" -h 127.0.0.1 -p "$RPORT" ping 2>/dev/null)" = PONG
check "s3: plain http to the gateway fails" \
  bash -c "! curl -fsS -o /dev/null --max-time 5 http://127.0.0.1:$SPORT/health 2>/dev/null"
check "s3: https without our CA fails verification" \
  bash -c "! curl -fsS -o /dev/null --max-time 5 https://127.0.0.1:$SPORT/health 2>/dev/null"
check "s3: https with our CA works" curl -fsS -o /dev/null --max-time 5 --cacert "$CA" "https://127.0.0.1:$SPORT/health"
# sluicectl as a plaintext Kafka client: the SASL_SSL listener never answers it
plain_env=(env -u SLUICE_KAFKA_SASL_USERNAME -u SLUICE_KAFKA_SASL_PASSWORD -u SLUICE_KAFKA_SSL_CA_FILE
  SLUICE_KAFKA_SECURITY_PROTOCOL=plaintext)
check "kafka: a plaintext client cannot list the DLQ" \
  bash -c '! "$@" >/dev/null 2>&1' _ "${plain_env[@]}" "$SLUICECTL" dlq list --timeout 4
check "kafka: sluicectl on SASL_SSL lists the DLQ" bash -c '"$@" >/dev/null' _ "$SLUICECTL" dlq list --timeout 20

# ---- stages refuse to start when a secured service refuses them --------------------
# refuses NAME PATTERN ENV... : `sluice grade` (Kafka + Redis at start-up) exits
# non-zero within 30 s, logs PATTERN, and prints no password
refuses() {
  local name=$1 pattern=$2 out rc=0
  shift 2
  out=$(env "$@" timeout 30 "$SLUICE_BIN" grade --set "admin.listen=127.0.0.1:$((BASE + 190))" 2>&1) || rc=$?
  printf '%s\n' "$out" >"$work/refuse-$name.log"
  check "$name: grade exits non-zero (rc=$rc, not a timeout)" test "$rc" -ne 0 -a "$rc" -ne 124
  check "$name: the error says why" grep -qiE "$pattern" "$work/refuse-$name.log"
  local s
  for s in "${SECRETS[@]}" wrong-password-123; do
    check "$name: no password in the output" bash -c '! grep -qF -- "$1" "$2"' _ "$s" "$work/refuse-$name.log"
  done
}
refuses kafka-wrong-password "SASL authentication error|Authentication failed" \
  SLUICE_KAFKA_SASL_PASSWORD=wrong-password-123
refuses kafka-unknown-ca "certificate verify failed" SLUICE_KAFKA_SSL_CA_FILE="$work/other-ca.pem"
refuses kafka-no-password "needs kafka.sasl_username and kafka.sasl_password" SLUICE_KAFKA_SASL_PASSWORD=
refuses redis-wrong-password "AUTH refused: WRONGPASS" SLUICE_REDIS_PASSWORD=wrong-password-123
refuses redis-unknown-ca "certificate verification failed" SLUICE_REDIS_TLS_CA_FILE="$work/other-ca.pem"
refuses redis-plaintext "redis\.tls_\* files are set but redis.url" SLUICE_REDIS_URL="redis://127.0.0.1:$RPORT"
refuses redis-url-password "AUTH refused: WRONGPASS" \
  SLUICE_REDIS_URL="rediss://sluice:wrong-password-123@127.0.0.1:$RPORT"

# ---- the real flow, everything secured ---------------------------------------------
stages_up
espeak-ng -s 140 -w "$work/a1.wav" "On weekends I usually go hiking in the mountains with my friends."
espeak-ng -s 140 -w "$work/a2.wav" "My favorite food is pizza because it is warm and delicious."

reply=$(curl -fsS -X POST -H 'Content-Type: application/json' "${KEY_AUTH[@]}" \
  --data '{"questions":[{"no":1,"content_type":"audio/wav","size":1000}]}' "$PRESIGN_URL/v1/submissions")
check "presigned URLs carry https" jqe '.questions[0].url | startswith("https://127.0.0.1:'"$SPORT"'/")' "$reply"

out=$(SUBMIT_TIMEOUT=90 "$ROOT/tools/submit" --prompt "What do you do on weekends?" "$work/a1.wav" \
  2>"$work/submit.log") || { cat "$work/submit.log" >&2; fail "submission did not complete"; finish; }
check "single PUT flow: 1 question, done" \
  test "$(jq -r '[.summary.total, .summary.done, .summary.failed] | join(",")' <<<"$out")" = "1,1,0"
check "single PUT flow: a transcript" test -n "$(jq -r '.questions[0].transcript // empty' <<<"$out")"
check "single PUT flow: a grade" jqe '.questions[0].grade.score | type == "number"' "$out"
sid=$(jq -r .submission_id <<<"$out")

# multipart: presign's CreateMultipartUpload / ListParts / Complete go to S3 over https
mp=$("$SLUICECTL" submit --multipart-threshold 1 --prompt "What is your favorite food?" "$work/a2.wav" \
  --wait 90 --json 2>"$work/mp.log") || { cat "$work/mp.log" >&2; fail "multipart submission failed"; }
check "multipart flow: done with a grade" jqe '.summary.done == 1 and (.questions[0].grade.score | type == "number")' "${mp:-null}"
check "multipart flow: it really went up in parts" grep -q "multipart" "$work/mp.log"

# sluicectl reads Redis over TLS as the ACL user
view=$("$SLUICECTL" submission "$sid" --json 2>"$work/sub.log") || true
check "sluicectl submission reads the view from Redis (TLS, ACL user)" jqe '.redis | type == "object" and has("q1")' "${view:-null}"
st=$("$SLUICECTL" status --json --admin "127.0.0.1:$((BASE + 100))" 2>/dev/null) || true
check "sluicectl status reaches Redis" jqe '.redis == "ok"' "${st:-null}"

rerr=$(curl -fsS "http://127.0.0.1:$((BASE + 100))/metrics" | awk '$1 == "sluice_redis_errors_total" {print $2}')
check "presign counted no Redis errors so far (${rerr:-no metric})" test "${rerr:-x}" = 0

# Redis restarts: the async client reconnects over TLS and sends AUTH again
# (an Idempotency-Key create needs presign's Redis connection)
kill "$(cat "$DEVSTACK_DIR/redis.pid")"
wait_for 10 bash -c '! kill -0 "$(cat "$1")" 2>/dev/null' _ "$DEVSTACK_DIR/redis.pid" || true
"$ROOT/tools/devstack" up >/dev/null
# the restarted Redis has no data (no persistence here): a fresh API key (the
# earlier one comes back with the rebuild below)
SLUICE_API_KEY=$("$SLUICECTL" apikey add --user "$TEST_NAME" 2>/dev/null)
KEY_AUTH=(-H "Authorization: Bearer $SLUICE_API_KEY")
idem() {
  [[ $(curl -sS -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' "${KEY_AUTH[@]}" \
    -H 'Idempotency-Key: tls-reconnect-1' \
    --data '{"questions":[{"no":1,"content_type":"audio/wav","size":1000}]}' \
    "$PRESIGN_URL/v1/submissions") == 201 ]]
}
check "after a Redis restart presign is back on Redis (TLS, AUTH again)" wait_for 20 idem
check "presign logged the reconnect" grep -q '"msg":"redis 127.0.0.1:[0-9]*: connected"' "$STAGES_DIR/presign.log"

# presign's API-key cache subscribes to revocations over TLS too, again after
# the restart; a revocation reaches it through that subscription
cache_on() { grep -c 'API-key cache on' "$STAGES_DIR/presign.log"; }
check "presign's API-key cache subscribed again after the restart (TLS)" wait_for 20 at_least 2 cache_on
# the restart lost the key store: presign rebuilds it from the apikeys topic
# (SASL_SSL), and until then an unknown key is 503 auth_unavailable, not 401
marked() {
  test "$(REDISCLI_AUTH=$SLUICE_REDIS_PASSWORD timeout 5 redis-cli --tls --cacert "$CA" \
    --user "$SLUICE_REDIS_USERNAME" -h 127.0.0.1 -p "$RPORT" EXISTS sl:apikeys:epoch 2>/dev/null)" = 1
}
check "presign rebuilt the API-key store from Kafka over SASL_SSL after the restart" wait_for 40 marked
plain() {
  curl -sS -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' "${KEY_AUTH[@]}" \
    --data '{"questions":[{"no":1,"content_type":"audio/wav","size":1000}]}' "$PRESIGN_URL/v1/submissions"
}
hits() { metric sluice_apikey_cache_lookups_total 'result="hit"' "http://127.0.0.1:$((BASE + 100))"; }
plain >/dev/null
h=$(hits)
check "a known key is answered from presign's cache" test "$(plain)" = 201
check "(a cache hit: $h -> $(hits))" test "$(hits)" -gt "$h"
"$SLUICECTL" apikey revoke "$SLUICE_API_KEY" >/dev/null 2>"$work/revoke.err" ||
  { fail "apikey revoke over TLS failed"; cat "$work/revoke.err" >&2; }
check "the revocation reached the cache over TLS: the next create is 401" test "$(plain)" = 401

# the async clients (presign's idempotency keys and multipart state, the runtime's
# idempotency store) stayed connected over TLS: no reconnect warnings, no errors
check "no Redis refusals in the stage logs" \
  bash -c '! grep -l "redis.*refused" "$1"/*.log' _ "$STAGES_DIR"
for s in "${SECRETS[@]}"; do
  check "no password in any stage log" bash -c '! grep -qF -- "$1" "$2"/*.log' _ "$s" "$STAGES_DIR"
done
finish
