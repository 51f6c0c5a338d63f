#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# presign's API-key cache (stages/presign/keycache.h) saves the Redis round
# trip of a known key, and a revoked key is still refused at once:
#  1. a key's second create is answered from the cache (the hit counter
#     moves, Redis counts no HGET for it);
#  2. `sluicectl apikey revoke` reaches the cache: the very next create with
#     the key is 401, twenty times over, with entries that would otherwise
#     live 10 minutes;
#  3. the revocation channel's connection is killed in Redis (CLIENT KILL
#     TYPE pubsub) and the record deleted by hand, which publishes nothing:
#     the next create is 401, because the cache is dropped with the
#     subscription that might have missed a revocation; once it is back, keys
#     are cached again;
#  4. a record deleted by hand while the subscription is up is refused once
#     presign.apikey_cache_ms has passed (the bound the setting documents);
#  5. a Redis user who may not subscribe to the channel (ACL) gets no cache:
#     every create is looked up in Redis and still answered, and the refused
#     SUBSCRIBE, retried every 500 ms, is logged once.
source "$(dirname "$0")/lib.sh"
mkdir -p "$STAGES_DIR"
port=$((BASE + 68))
admin_port=$((BASE + 69))
ADMIN=http://127.0.0.1:$admin_port
body='{"questions":[{"no":1,"content_type":"audio/wav","size":100}]}'
pid=
at_exit '[[ -n $pid ]] && kill -KILL $pid 2>/dev/null; true'

start_presign() { # start_presign CACHE_MS [WAIT_FOR_CACHE]
  SLUICE_PRESIGN_LISTEN=127.0.0.1:$port SLUICE_ADMIN_LISTEN=127.0.0.1:$admin_port \
    SLUICE_PRESIGN_APIKEY_CACHE_MS=$1 "$SLUICE_BIN" presign >>"$STAGES_DIR/presign.log" 2>&1 &
  pid=$!
  wait_for 30 admin_ready "$admin_port" || fail "presign did not get ready"
  [[ ${2:-1} == 1 ]] || return 0
  # the subscription is up once presign says so (before that nothing is cached)
  wait_for 10 grep -q "API-key cache on" "$STAGES_DIR/presign.log" ||
    fail "the API-key cache did not come up"
}
stop_presign() {
  kill -TERM "$pid"
  wait "$pid" || fail "presign did not exit cleanly"
  pid=
}
create() { # create KEY -> HTTP status
  curl -sS -m 20 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $1" \
    -X POST -H 'Content-Type: application/json' --data "$body" \
    "http://127.0.0.1:$port/v1/submissions" || echo 000
}
hits() { metric sluice_apikey_cache_lookups_total 'result="hit"' "$ADMIN"; }
cached() { # cached KEY: a create with KEY is accepted and counted as a cache hit
  local h st
  h=$(hits)
  st=$(create "$1")
  [[ $st == 201 ]] && (($(hits) > h))
}
hgets() { RC INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_hget:calls=\([0-9]*\),.*/\1/p' | grep . || echo 0; }
newkey() { "$SLUICECTL" apikey add --user "$1" --label test_apikey_cache 2>/dev/null; }
revocations() { metric sluice_apikey_revocations_total '' "$ADMIN"; }
subscriptions() { grep -c 'API-key cache on' "$STAGES_DIR/presign.log"; }
record() { apikey_record "$(printf '%s' "$1" | sha256sum | cut -d' ' -f1)"; }

start_presign 600000

# 1. the second create is the cache's
k=$(newkey cache-one)
check "a new key's first create is accepted" test "$(create "$k")" = 201
h0=$(hits)
g0=$(hgets)
check "its second create is accepted" test "$(create "$k")" = 201
check "and answered from the cache (hits $h0 -> $(hits))" test "$(hits)" -eq $((h0 + 1))
check "without an HGET in Redis ($g0 -> $(hgets))" test "$(hgets)" -eq "$g0"

# 2. revocations are pushed: the next create is refused, every time
refused=0
for i in $(seq 20); do
  k=$(newkey "cache-revoke-$i")
  create "$k" >/dev/null
  cached "$k" || { fail "round $i: key not served from the cache"; continue; }
  "$SLUICECTL" apikey revoke "$k" >/dev/null || fail "round $i: revoke failed"
  [[ $(create "$k") == 401 ]] && refused=$((refused + 1))
done
check "a revoked key's next create is 401 ($refused of 20)" test "$refused" -eq 20
check "presign counted the pushed revocations ($(revocations))" test "$(revocations)" -ge 20

# 3. the subscription is cut: nothing cached survives it
k=$(newkey cache-cut)
create "$k" >/dev/null
check "before the cut the key is served from the cache" cached "$k"
killed=$(RC CLIENT KILL TYPE pubsub)
check "Redis cut presign's subscription ($killed client)" test "$killed" -ge 1
RC DEL "$(record "$k")" >/dev/null
check "a key deleted by hand right after the cut is refused" test "$(create "$k")" = 401
wait_for 10 at_least 2 subscriptions ||
  fail "the subscription did not come back"
k=$(newkey cache-after)
create "$k" >/dev/null
check "once the subscription is back keys are cached again" cached "$k"
stop_presign

# 4. a record deleted some other way lives presign.apikey_cache_ms at most
start_presign 2000
k=$(newkey cache-ttl)
create "$k" >/dev/null
check "a key is cached with a 2 s lifetime" cached "$k"
RC DEL "$(record "$k")" >/dev/null
sleep 2.5
check "2.5 s after its record was deleted by hand the key is refused" test "$(create "$k")" = 401
stop_presign

# 4b. a full cache (presign.apikey_cache_max) takes a new key only in place
# of an expired one
SLUICE_PRESIGN_APIKEY_CACHE_MAX=2 start_presign 2000
ka=$(newkey cache-full-a) kb=$(newkey cache-full-b) kc=$(newkey cache-full-c)
create "$ka" >/dev/null
create "$kb" >/dev/null
check "two keys fill a cache of 2" cached "$ka"
check "both are cached" cached "$kb"
create "$kc" >/dev/null
g0=$(hgets)
check "a third key is answered while the cache is full" test "$(create "$kc")" = 201
check "and looked up in Redis, not cached ($g0 -> $(hgets) HGETs)" test "$(hgets)" -gt "$g0"
check "the two cached keys are still hits" cached "$ka"
sleep 2.2 # both entries expire
create "$kc" >/dev/null # a miss: its answer takes an expired entry's place
check "once they expire the third key is cached" cached "$kc"
g0=$(hgets)
create "$ka" >/dev/null
create "$kb" >/dev/null
check "the expired keys are looked up again ($g0 -> $(hgets) HGETs)" test "$(hgets)" -ge $((g0 + 2))
stop_presign

# 5. no permission to subscribe: no cache, and creates still work
pw=$(openssl rand -hex 16)
RC ACL SETUSER sl-nochannels on ">$pw" '~*' '+@all' resetchannels >/dev/null
at_exit 'redis-cli -u "$SLUICE_REDIS_URL" ACL DELUSER sl-nochannels >/dev/null 2>&1'
: >"$STAGES_DIR/presign.log"
SLUICE_REDIS_URL=redis://sl-nochannels:$pw@127.0.0.1:$DEVSTACK_REDIS_PORT start_presign 600000 0
k=$(newkey cache-noperm)
g0=$(hgets)
codes="$(create "$k") $(create "$k") $(create "$k")"
check "without the channel permission creates are answered ($codes)" test "$codes" = "201 201 201"
check "each looked up in Redis ($g0 -> $(hgets) HGETs)" test "$(hgets)" -ge $((g0 + 3))
check "none from the cache" test "$(hits)" = 0
sleep 2 # four more refused SUBSCRIBEs
n=$(grep -c 'NOPERM' "$STAGES_DIR/presign.log" || true)
check "the refused SUBSCRIBE is logged once ($n lines)" test "$n" = 1
stop_presign

grep -q '"msg":"stopped"' "$STAGES_DIR/presign.log" || fail "presign did not log a clean stop"
finish
