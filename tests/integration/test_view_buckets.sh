#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The view on Redis Cluster (issue 42), against one Redis node in cluster
# mode (CROSSSLOT enforced) with redis.buckets 8: a shard that lost its data
# or failed over to a lagging replica is repaired alone.
#
# First one bucket loses everything (every key of its slot: the submissions'
# hashes and the bucket's sequence, offsets, marker, feed and pending set,
# what a primary failing over to an empty replica leaves): materialize
# rebuilds that bucket only — the other buckets keep their markers, the
# replay writes back only that bucket's question states — and its
# submission comes back. Then another bucket goes back in time with its
# marker (its sequence lower, a submission's hash gone: a replica that lagged
# took over): materialize notices it from that bucket's sequence and repairs
# that bucket alone too.
export TEST_REDIS_CLUSTER1=${TEST_REDIS_CLUSTER1:-lane}
source "$(dirname "$0")/lib.sh"
[[ ${SLUICE_REDIS_BUCKETS:-0} -gt 1 ]] || {
  log "needs SLUICE_REDIS_BUCKETS > 1 (got ${SLUICE_REDIS_BUCKETS:-0})"
  exit 1
}
stages_up
view_marked
work=$(mktemp -d)
at_exit 'rm -rf "$work"'
ADMIN_MAT=$(admin materialize)
head -c 2000 /dev/urandom >"$work/a.bin"

bucket_of() { "$SLUICECTL" keys "$1" | awk '$1 == "bucket" {print $2}'; }
key_of() { "$SLUICECTL" keys "$1" | awk -v n="$2" '$1 == n {print $2}'; }
# one submission in each of two different buckets
declare -A by_bucket=() tokens=()
while ((${#by_bucket[@]} < 2)); do
  new_submission "$work/a.bin" || fail "presign refused a create"
  b=$(bucket_of "$SID")
  [[ -n ${by_bucket[$b]:-} ]] && continue
  by_bucket[$b]=$SID
  tokens[$SID]=$TOKEN
done
buckets=("${!by_bucket[@]}")
A=${buckets[0]} C=${buckets[1]}
sid_a=${by_bucket[$A]} sid_c=${by_bucket[$C]}
log "bucket $A: $sid_a; bucket $C: $sid_c"
in_view() { test "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer ${tokens[$1]}" "$RESULTS_URL/v1/submissions/$1")" = 200; }
check "the first submission is in the view" wait_for 30 in_view "$sid_a"
check "the second submission is in the view" wait_for 30 in_view "$sid_c"

metric_sum() { curl -fsS "$ADMIN_MAT/metrics" | awk -v m="$1" '$1 == m {s += $2} END {print s + 0}'; }
markers() { # bucket=value of every marker
  local k
  for k in $(view_keys marker); do printf '%s=%s\n' "$k" "$(RC GET "$k")"; done
}
rebuilt() { grep -c 'marked complete' "$STAGES_DIR"/materialize*.log || true; }

# ---- 1. bucket A loses every key of its slot ----
tag=$(key_of "$sid_a" seq)
tag=${tag#sl:view:seq}
mapfile -t lost < <(RC --scan --pattern "*$tag*")
questions=0
for k in "${lost[@]}"; do
  [[ $k == sl:sub:* ]] && questions=$((questions + $(RC HKEYS "$k" | grep -c '^r[0-9]' || true)))
done
others0=$(markers | grep -v -F "$tag")
repaired0=$(metric_sum sluice_view_repaired_total)
rebuilt0=$(rebuilt)
log "bucket $A ($tag): ${#lost[@]} keys, $questions question(s) in its hashes"
RC DEL "${lost[@]}" >/dev/null
check "the lost submission comes back" wait_for 60 in_view "$sid_a"
marked_a() { test "$(RC EXISTS "$(key_of "$sid_a" marker)")" = 1; }
check "bucket $A is marked again" wait_for 30 marked_a
check "materialize rebuilt one bucket of $SLUICE_REDIS_BUCKETS" \
  grep -q "the view marker is missing in 1 of $SLUICE_REDIS_BUCKETS bucket" "$STAGES_DIR"/materialize*.log
check "the other buckets kept their markers (not rebuilt)" test "$(markers | grep -v -F "$tag")" = "$others0"
repaired=$(($(metric_sum sluice_view_repaired_total) - repaired0))
log "the rebuild wrote $repaired question state(s) back; $questions were lost"
check "it wrote back at least the lost question states ($repaired >= $questions)" test "$repaired" -ge "$questions"
# a rebuild of a bucket raises its sequence to its marker (epoch) x 1000
epoch_a=$(RC GET "$(key_of "$sid_a" marker)")
seq_c=$(key_of "$sid_c" seq)
check "bucket $C's sequence was not raised ($(RC GET "$seq_c") < ${epoch_a}000)" \
  test "$(RC GET "$seq_c")" -lt "${epoch_a}000"
check "the other bucket's submission is still there" in_view "$sid_c"

# ---- 2. bucket C goes back in time with its marker ----
sleep 2 # the watcher has read bucket C's sequence (every second)
rollbacks0=$(metric_sum sluice_view_rollbacks_total)
others0=$(markers | grep -v -F "${seq_c#sl:view:seq}")
v=$(RC GET "$seq_c")
RC DEL "$(key_of "$sid_c" submission)" >/dev/null
RC SET "$seq_c" $((v - 5)) >/dev/null
check "the submission lost with bucket $C's writes comes back" wait_for 60 in_view "$sid_c"
check "materialize counted the rollback" test "$(metric_sum sluice_view_rollbacks_total)" -gt "$rollbacks0"
check "it named bucket $C" grep -q "Redis went back in time in bucket $C " "$STAGES_DIR"/materialize*.log
check "the other buckets kept their markers" \
  test "$(markers | grep -v -F "${seq_c#sl:view:seq}")" = "$others0"
check "bucket $A's submission is still there" in_view "$sid_a"
check "no CROSSSLOT in the stage logs" sh -c "! grep -l CROSSSLOT '$STAGES_DIR'/*.log"

finish
