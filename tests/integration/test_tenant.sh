#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tenants: fixed at create, carried by every message, counted per UTC day,
# refused past their quotas (stages/presign/quota.h, sl_tenant.h).
#   1. tenant A (an API key's user) submits 2 answers through stt/openai and
#      grade/openai against the fake provider: the messages stt and grade
#      read carry the header sluice-tenant: A, and the day's cost that
#      `sluicectl tenant show` reports is what the view says the answers cost
#      (each provider-calling stage counted its calls against A);
#   2. A's answers per day set to 3 (2 used): a create of 2 more is refused
#      with 429 quota_exceeded, a Retry-After to the next UTC midnight and
#      nothing counted; a create of 1 is accepted (3 of 3); tenant B's
#      creates are not touched;
#   3. the limit lifted at run time (`tenant set --answers-per-day none`,
#      no restart): A creates again;
#   4. A's cost budget set below what it spent: A's create is refused as
#      quota_exceeded (cost units), B's accepted;
#   5. sluicectl refuses bad values with a usage error and changes nothing.
source "$(dirname "$0")/lib.sh"
B=$SLUICE_KAFKA_BROKERS
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
ta="ta-$TEST_NAME-$$" tb="tb-$TEST_NAME-$$"
key_a=$("$SLUICECTL" apikey add --user "$ta" --label "$TEST_NAME" 2>/dev/null)
key_b=$("$SLUICECTL" apikey add --user "$tb" --label "$TEST_NAME" 2>/dev/null)
[[ $key_a == slk_* && $key_b == slk_* ]] || { fail "no API keys"; finish; }

fake_up 50 50 0
stages_up
espeak-ng -s 140 -w "$work/a1.wav" "I usually go hiking on weekends with my friends."
espeak-ng -s 140 -w "$work/a2.wav" "My favourite food is kimchi stew."

# create KEY N: a create of N answers; its status in $work/code, body in $work/body
create() {
  local qs=() i
  for ((i = 1; i <= $2; i++)); do
    qs+=("{\"content_type\":\"audio/wav\",\"size\":$(stat -c %s "$work/a1.wav"),\"prompt\":\"Q$i?\"}")
  done
  curl -sS -o "$work/body" -D "$work/hdrs" -w '%{http_code}' -H "Authorization: Bearer $1" \
    -X POST "$PRESIGN_URL/v1/submissions" -H 'Content-Type: application/json' \
    -d "{\"questions\":[$(IFS=,; echo "${qs[*]}")]}" >"$work/code"
}
code() { cat "$work/code"; }
today() { "$SLUICECTL" tenant show "$1" --json | jq -r ".$2"; }

# --- 1. the tenant travels with the answers and is charged for them ---
KEY_AUTH=(-H "Authorization: Bearer $key_a")
new_submission "$work/a1.wav" "$work/a2.wav"
put_answer 0 "$work/a1.wav"
put_answer 1 "$work/a2.wav"
both_done() { view_of "$SID" "$TOKEN" | jq -e '[.questions[].state] == ["done","done"]' >/dev/null; }
check "A's two answers graded" wait_for 120 both_done
for t in stt.requests grade.requests; do
  hdr=$(kcat -C -b "$B" -t "$t" -o beginning -e -q -f '%k %h\n' 2>/dev/null | awk -v s="$SID/" 'index($1, s) == 1')
  log "$t: $hdr"
  check "both of A's messages on $t carry sluice-tenant=$ta" \
    test "$(grep -c "sluice-tenant=$ta\(,\|\$\)" <<<"$hdr")" -ge 2
done
cost=$(view_of "$SID" "$TOKEN" | jq .cost)
spent_ok() { jq -en --argjson a "$(today "$ta" cost_today)" --argjson b "$cost" '$b > 0 and (($a - $b) | fabs) < 0.01' >/dev/null; }
check "A's cost today is what its answers cost ($cost; tenant show: $(today "$ta" cost_today))" \
  wait_for 10 spent_ok
check "A has 2 answers today" test "$(today "$ta" answers_today)" = 2

# --- 2. answers per day ---
"$SLUICECTL" tenant set "$ta" --answers-per-day 3 >/dev/null
create "$key_a" 2
log "over the quota: $(code) $(cat "$work/body")"
check "a create past A's answers per day is refused: 429 quota_exceeded" \
  jqe '.error.code == "quota_exceeded" and (.error.message | test("2 of its 3 answers"))' \
  "$(cat "$work/body")"
check "the refusal is a 429" test "$(code)" = 429
ra=$(awk 'tolower($1) == "retry-after:" {print $2 + 0}' "$work/hdrs")
left=$(((86400 - $(date -u +%s) % 86400)))
check "Retry-After is the time to the next UTC midnight ($ra s, $left s left)" \
  test "${ra:-0}" -ge $((left - 5)) -a "${ra:-0}" -le $((left + 5))
check "the refused create counted nothing" test "$(today "$ta" answers_today)" = 2
create "$key_a" 1
check "a create within the quota is accepted (3 of 3)" test "$(code)" = 201
create "$key_b" 2
check "B is not limited by A's quota" test "$(code)" = 201
check "A has 3 answers today, B 2" test "$(today "$ta" answers_today)/$(today "$tb" answers_today)" = 3/2

# --- 3. changed at run time ---
"$SLUICECTL" tenant set "$ta" --answers-per-day none >/dev/null
create "$key_a" 2
check "with the limit lifted (no restart) A creates again" test "$(code)" = 201

# --- 4. cost per day ---
"$SLUICECTL" tenant set "$ta" --cost-per-day 0.5 >/dev/null
create "$key_a" 1
log "over the budget: $(code) $(cat "$work/body")"
check "A, past its cost budget, is refused: 429 quota_exceeded naming the cost units" \
  jqe '.error.code == "quota_exceeded" and (.error.message | test("provider cost units"))' \
  "$(cat "$work/body")"
create "$key_b" 1
check "B is not limited by A's budget" test "$(code)" = 201
"$SLUICECTL" tenant show "$ta" >"$work/show.txt"
check "tenant show prints the budget" grep -q '^Cost today .* (budget: 0.5)$' "$work/show.txt"

# --- 5. bad values ---
: >"$work/err"
exit_of() { local rc=0; "$SLUICECTL" tenant set "$@" >/dev/null 2>>"$work/err" || rc=$?; echo "$rc"; }
check "a fractional answers per day is a usage error (exit 2)" \
  test "$(exit_of "$ta" --answers-per-day 2.5)" = 2
check "a weight of 0 is a usage error (exit 2)" test "$(exit_of "$ta" --weight 0)" = 2
check "a tenant with a space is a usage error (exit 2)" test "$(exit_of "has space" --weight 1)" = 2
check "each says why on stderr" test "$(wc -l <"$work/err")" -ge 3
check "nothing changed: A's budget is still 0.5" test "$(today "$ta" cost_per_day)" = 0.5
finish
