#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The shared provider rate limit (runtime/src/sl_limiter.c) against the test
# Redis, without the stages:
#  - the script's KEYS/ARGV contract, evaluated by hand with redis-cli:
#    burst, the wait it returns, a cost above the burst, bad arguments, the
#    pause key, and the keys' expiry;
#  - two limiter_probe processes sharing one limit (20/s, burst 1) for 10 s:
#    together they get rate x seconds + burst grants (+-10%), neither starves;
#  - the same limit split into 2 buckets (provider.limit_buckets), one probe
#    on each, at the same time: together still ~rate x seconds (each bucket
#    10/s), while a probe alone on one bucket of another provider gets only
#    its bucket's half (the cost of buckets);
#  - sl_limiter_pause 2000 ms stops the grants for ~2 s, and a shorter pause
#    never shortens a longer one.
# The probe is tools/limiter-probe (binary from $LIMITER_PROBE, default next
# to sluicectl in the build tree). The probes' sanitizer output is checked too.
source "$(dirname "$0")/lib.sh"
PROBE=${LIMITER_PROBE:-$(dirname "$(dirname "$SLUICE_BIN")")/tools/limiter_probe}
if [[ ! -x $PROBE ]]; then
  fail "no limiter_probe binary at $PROBE (build it or set LIMITER_PROBE)"
  exit 1
fi
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
RURL=${SLUICE_REDIS_URL:?devstack env did not set SLUICE_REDIS_URL}
rcli() { redis-cli -u "$RURL" "$@" 2>&1; }
run=$$-$RANDOM # providers unique to this run, so leftovers never interfere
ms_now() { date +%s%3N; }
between() { [[ $1 =~ ^-?[0-9]+$ ]] && (($1 >= $2 && $1 <= $3)); } # between VALUE LOW HIGH
probe() { # probe NAME ARGS... : runs the probe, stdout/stderr in $work/NAME.{out,err}
  local name=$1; shift
  "$PROBE" --redis "$RURL" "$@" >"$work/$name.out" 2>"$work/$name.err"
}

# --- the script contract, by hand ---------------------------------------------
take_lua=$("$PROBE" --print-script take)
pause_lua=$("$PROBE" --print-script pause)
# the keys of provider $1 as the runtime names them (SLUICE_REDIS_BUCKETS:
# tagged for a Redis Cluster)
lk() { "$PROBE" --provider "$1" --print-keys | sed -n 1p; }
pk() { "$PROBE" --provider "$1" --print-keys | sed -n 2p; }
# names P: LK and PK, provider P's keys (asked once: the takes below are timed)
names() { LK=$(lk "$1") PK=$(pk "$1"); }
take() { rcli EVAL "$take_lua" 2 "$LK" "$PK" "$2" "$3" "$4"; }

p=c1-$run
names "$p"
got="$(take "$p" 1 3 1) $(take "$p" 1 3 1) $(take "$p" 1 3 1)"
check "burst 3 from an empty bucket: three grants ($got)" test "$got" = "0 0 0"
w=$(take "$p" 1 3 1)
check "the 4th at 1/s waits ~1000 ms ($w)" between "$w" 900 1000
ttl=$(rcli PTTL "$LK")
check "limit key expires when the bucket is full again (PTTL $ttl, ~3000)" between "$ttl" 2000 3000
check "a refused request took nothing (PTTL still <= 3000)" test "$(rcli PTTL "$LK")" -le 3000

p=c2-$run
names "$p"
got=$(take "$p" 1 3 5)
check "cost 5 > burst 3 goes when the bucket is full ($got)" test "$got" = 0
w=$(take "$p" 1 3 1)
check "then the bucket is in debt: next unit waits ~3000 ms ($w)" between "$w" 2900 3000
w=$(take "$p" 1 3 5)
check "and another cost-5 request waits until the bucket is full (~5000 ms: $w)" between "$w" 4900 5000

p=c3-$run
names "$p"
got=$(take "$p" 20 2 0.5)
check "fractional cost is accepted ($got)" test "$got" = 0
for args in "0 1 1" "-1 1 1" "x 1 1" "1 0.5 1" "1 1 0" "1 1 nan" "1 inf 1"; do
  # shellcheck disable=SC2086
  out=$(take "$p" $args)
  check "bad arguments ($args) -> error reply ($out)" grep -q "ERR sl_limiter" <<<"$out"
done

p=c4-$run
names "$p"
rcli SET "$PK" 1 PX 1500 >/dev/null
w=$(take "$p" 100 10 1)
check "while the pause key exists the reply is its PTTL ($w)" between "$w" 1000 1500
check "a paused request records nothing" test "$(rcli EXISTS "$LK")" = 0
p=c5-$run
names "$p"
rcli SET "$PK" 1 >/dev/null
check "a pause key without a TTL is ignored" test "$(take "$p" 100 10 1)" = 0
got=$(rcli EVAL "$pause_lua" 1 "$PK" 800)
check "the pause script gives a TTL-less pause key one ($got)" test "$got" = 800
got=$(rcli EVAL "$pause_lua" 1 "$PK" 100)
check "the pause script never shortens ($got)" between "$got" 500 800
check "the pause script rejects 0 ms" grep -q "ERR sl_limiter" <<<"$(rcli EVAL "$pause_lua" 1 "$PK" 0)"

# --- the fair take (sl_fair.h), by hand ---------------------------------------
fair_lua=$("$PROBE" --print-script fair)
# fair P RATE BURST TENANT WEIGHT...: one take of provider P's limit naming
# the tenants; prints the reply's two numbers
fair() {
  local p=$1 rate=$2 burst=$3 u s
  shift 3
  u=${LK/sl:limit:/sl:fair:u:} s=${LK/sl:limit:/sl:fair:s:}
  rcli EVAL "$fair_lua" 3 "$LK" "$u" "$s" "$rate" "$burst" 1 $(($# / 2)) "$@" | tr '\n' ' '
}
p=f1-$run
names "$p"
out=""
for i in $(seq 1 8); do out+=$(fair "$p" 1000 100 A 1 B 3 | awk '{print $2}'); done
check "naming A (weight 1) and B (weight 3): B gets 6 of 8 tokens ($out)" \
  test "$(tr -cd 2 <<<"$out" | wc -c)" = 6
p=f2-$run
names "$p"
# A takes one, B (on another replica) joins at A's usage and takes one, A
# takes three more: A is then more than the slack (1) ahead of B
for t in A B A A A; do fair "$p" 1000 100 "$t" 1 >/dev/null; done
got=$(fair "$p" 1000 100 A 1)
check "A, ahead of B (waiting elsewhere) by more than the slack, is told to wait ($got)" \
  grep -Eq '^2 [0-9]+ $' <<<"$got"
got=$(fair "$p" 1000 100 B 1)
check "B, behind, gets the token ($got)" test "$got" = "0 1 "
out=$(rcli EVAL "$fair_lua" 3 "$LK" "${LK/sl:limit:/sl:fair:u:}" "${LK/sl:limit:/sl:fair:s:}" 1000 100 1 2 A 1)
check "n that does not match the tenants given -> error reply ($out)" grep -q "ERR sl_fair" <<<"$out"
got=$(fair "$p" 1000 100 C nan)
check "a weight that is not a number counts as 1 ($got)" test "$got" = "0 1 "

# --- two replicas share one limit -----------------------------------------------
p=share-$run
probe a --provider "$p" --rate 20 --burst 1 --seconds 10 &
pa=$!
probe b --provider "$p" --rate 20 --burst 1 --seconds 10 &
pb=$!
rca=0 rcb=0
wait "$pa" || rca=$?
wait "$pb" || rcb=$?
log "probe a: $(cat "$work/a.out")  probe b: $(cat "$work/b.out")"
check "probe a exited 0 (rc $rca)" test "$rca" = 0
check "probe b exited 0 (rc $rcb)" test "$rcb" = 0
ga=$(jq -r '.granted // 0' "$work/a.out" 2>/dev/null || echo 0)
gb=$(jq -r '.granted // 0' "$work/b.out" 2>/dev/null || echo 0)
wa=$(jq -r '.waits // 0' "$work/a.out" 2>/dev/null || echo 0)
total=$((ga + gb))
want=$((20 * 10 + 1))
check "together $total grants, within 10% of $want" between "$total" $((want * 9 / 10)) $((want * 11 / 10))
check "probe a got a fair share ($ga of $total, >= 25%)" test $((ga * 4)) -ge "$total"
check "probe b got a fair share ($gb of $total, >= 25%)" test $((gb * 4)) -ge "$total"
check "the probes slept on refusals instead of spinning (a: $wa waits)" test "$wa" -le $((ga * 3 + 50))
sleep 0.2
check "an idle limiter's key vanishes" test "$(rcli EXISTS "$(lk "$p")")" = 0

# --- a limit split into buckets keeps the aggregate rate -------------------------
p=split-$run q=lone-$run
probe k0 --provider "$p" --rate 20 --burst 1 --seconds 10 --buckets 2 --bucket 0 &
p0=$!
probe k1 --provider "$p" --rate 20 --burst 1 --seconds 10 --buckets 2 --bucket 1 &
p1=$!
probe lone --provider "$q" --rate 20 --burst 1 --seconds 10 --buckets 2 --bucket 1 &
pl=$!
rc0=0 rc1=0 rcl=0
wait "$p0" || rc0=$?
wait "$p1" || rc1=$?
wait "$pl" || rcl=$?
log "bucket 0: $(cat "$work/k0.out")  bucket 1: $(cat "$work/k1.out")  alone: $(cat "$work/lone.out")"
check "the bucket probes exited 0 (rc $rc0 $rc1 $rcl)" test "$rc0$rc1$rcl" = 000
g0=$(jq -r '.granted // 0' "$work/k0.out" 2>/dev/null || echo 0)
g1=$(jq -r '.granted // 0' "$work/k1.out" 2>/dev/null || echo 0)
gl=$(jq -r '.granted // 0' "$work/lone.out" 2>/dev/null || echo 0)
total=$((g0 + g1))
want=$((20 * 10 + 2)) # a burst of 1 per bucket
check "2 buckets together: $total grants, within 10% of $want" between "$total" $((want * 9 / 10)) $((want * 11 / 10))
check "bucket 0 its half ($g0, ~101)" between "$g0" 91 111
check "bucket 1 its half ($g1, ~101)" between "$g1" 91 111
check "a replica alone on one bucket gets only that half ($gl, ~101)" between "$gl" 91 111

# --- a pause stops every replica ------------------------------------------------
p=pause-$run
probe p --provider "$p" --rate 20 --burst 1 --seconds 6 --trace "$work/p.trace" &
pp=$!
sleep 2
t0=$(ms_now)
rcp=0
probe pause --provider "$p" --pause 2000 || rcp=$?
t1=$(ms_now)
check "limiter_probe --pause succeeded ($(cat "$work/pause.out"))" test "$rcp" = 0
ttl=$(rcli PTTL "$(pk "$p")")
check "the pause key holds ~2000 ms (PTTL $ttl)" between "$ttl" 1500 2000
probe shorter --provider "$p" --pause 300 || fail "limiter_probe --pause 300 failed"
ttl=$(rcli PTTL "$(pk "$p")")
check "a shorter pause does not shorten it (PTTL $ttl)" test "$ttl" -gt 1000
rcpp=0
wait "$pp" || rcpp=$?
check "paused probe exited 0 (rc $rcpp, $(cat "$work/p.out"))" test "$rcpp" = 0
before=$(awk -v t="$t0" '$1 < t' "$work/p.trace" | wc -l)
during=$(awk -v a="$t1" -v b=$((t0 + 1900)) '$1 > a && $1 < b' "$work/p.trace" | wc -l)
first_after=$(awk -v a="$t1" '$1 > a {print $1; exit}' "$work/p.trace")
after=$(awk -v a="$t1" '$1 > a' "$work/p.trace" | wc -l)
log "pause: $before grants before, $during while paused, $after after; resumed $((${first_after:-0} - t0)) ms after the pause"
check "grants flowed before the pause ($before in ~2 s)" between "$before" 30 45
check "no grants while paused" test "$during" = 0
check "grants resumed ~2 s after the pause" between "${first_after:-0}" $((t0 + 1900)) $((t1 + 2300))
# the window after the pause is ~2 s, but how much depends on when the probe
# process got going (its 6 s started before the `sleep 2`): judge the rate
last_ms=$(awk 'END {print $1}' "$work/p.trace")
span=$(( ${last_ms:-0} - ${first_after:-0} ))
rate_after=$(( span > 0 ? (after - 1) * 1000 / span : 0 ))
check "and went on at the rate ($after grants in $span ms: $rate_after/s, ~20)" \
  test "$after" -ge 20 -a "$rate_after" -ge 15 -a "$rate_after" -le 25
total=$(jq -r .granted "$work/p.out" 2>/dev/null || echo 0)
check "the paused run's JSON counts every traced grant ($total)" test "$total" = "$(wc -l <"$work/p.trace")"

# --- tally (the probes are ASan/UBSan builds in build-san) ------------------------
if grep -lE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$work"/*.err >/dev/null 2>&1; then
  fail "sanitizer report from limiter_probe:"
  grep -hE -A20 "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$work"/*.err | head -60 >&2
fi
finish
