#!/usr/bin/env bash
# The results view survives losing Redis: a submission is graded, Redis is
# emptied (FLUSHALL, what a restart without persistence leaves), and
# materialize notices the missing view marker and replays the topics, so the
# client polling with its token sees the same graded answer again — without
# any stage being restarted. Of two materialize replicas only one replays the
# topics (a Redis lock); the other waits for the view marker.
source "$(dirname "$0")/lib.sh"
# two materialize replicas: only one of them may replay the topics
"$ROOT/tools/stages" up --replicas materialize=2 >/dev/null
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
ADMIN_MAT=http://127.0.0.1:$((BASE + 104))

espeak-ng -s 140 -w "$work/a.wav" "On weekends I usually go hiking in the mountains with my friends."
new_submission "$work/a.wav"
sid=$SID token=$TOKEN
put_answer 0 "$work/a.wav"

view() { view_of "$sid" "$token"; }
done_view() { view >"$work/view.json" && jq -e '.questions[0].state == "done"' "$work/view.json" >/dev/null; }
check "graded before Redis is lost" wait_for 90 done_view
before=$(jq -c '.questions[0] | {state, transcript, grade}' "$work/view.json")

ADMIN_MAT2=http://127.0.0.1:$((BASE + 110)) # replica 2 (tools/stages: + 6 per replica)
rebuilds() { # over both replicas
  { curl -fsS "$ADMIN_MAT/metrics"; curl -fsS "$ADMIN_MAT2/metrics"; } |
    awk '$1 == "sluice_view_rebuilds_total" {s += $2} END {print s + 0}'
}
rebuilds0=$(rebuilds)
said() { cat "$STAGES_DIR"/materialize*.log | grep -c 'rebuilding the view from the topics' || true; }
said0=$(said)
redis-cli -p "$DEVSTACK_REDIS_PORT" FLUSHALL >/dev/null
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "$RESULTS_URL/v1/submissions/$sid")
check "right after the flush the view is being rebuilt (503, not 404: $code)" test "$code" = 503
check "the view comes back without restarting anything" wait_for 60 done_view
after=$(jq -c '.questions[0] | {state, transcript, grade}' "$work/view.json")
check "the rebuilt view is the one the client saw before" test "$before" = "$after"
check "materialize counted a rebuild" test "$(rebuilds)" -gt "$rebuilds0"
sleep 2 # a second replica that would rebuild too has seen the marker gone by now
check "one of the two replicas rebuilt, the other waited ($(($(said) - said0)) rebuilds)" \
  test $(($(said) - said0)) = 1
check "materialize logged why it rebuilt" sh -c "cat '$STAGES_DIR'/materialize*.log | grep -q 'rebuilding the view from the topics'"

finish
