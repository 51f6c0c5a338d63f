# SPDX-License-Identifier: Apache-2.0
# tools/lib/common.sh — the shell helpers that the tools (tools/devstack,
# tools/k8s/cluster), the bench runners (bench/*/run) and the integration
# tests (through tests/integration/lib.sh) share, written once. Source it by
# its path from the repository root:
#   source "$root/tools/lib/common.sh"
# It defines functions only: no settings, no output, nothing run, so that
# sourcing it under `set -euo pipefail` changes nothing else.
#
# b64url                      stdin -> base64url without padding (JWT parts)
# jwt_hs256 SECRET SUB TTL_S  an HS256 JWT for sub SUB, issued now, expiring
#                             TTL_S seconds from now (what `sluice presign`
#                             accepts with auth.jwt_hs256_secret = SECRET)
# wait_for SECONDS COMMAND... runs COMMAND until it succeeds (0) or SECONDS
#                             have passed (1), every WAIT_FOR_POLL_S (0.5) s

b64url() { basenc --base64url -w0 | tr -d '='; }

jwt_hs256() {
  local secret=$1 sub=$2 ttl=$3 now h p s
  now=$(date +%s)
  h=$(printf '{"alg":"HS256","typ":"JWT"}' | b64url)
  p=$(printf '{"sub":"%s","iat":%d,"exp":%d}' "$sub" "$now" $((now + ttl)) | b64url)
  s=$(printf '%s.%s' "$h" "$p" | openssl dgst -sha256 -hmac "$secret" -binary | b64url)
  printf '%s.%s.%s\n' "$h" "$p" "$s"
}

wait_for() {
  local end=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < end)) || return 1
    sleep "${WAIT_FOR_POLL_S:-0.5}"
  done
}
