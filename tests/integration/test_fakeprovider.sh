#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `sluice-fakeprovider` as the tests and benchmarks rely on it:
#   1. replies: transcriptions in json, text and verbose_json (segments,
#      words when asked, duration from the WAV header), the same audio gives
#      the same text; chat completions in JSON-schema mode hold a grade
#      document that satisfies the schema, the same text gives the same
#      grade; bad input is a 400 in OpenAI's error shape; each answer waits
#      at least its endpoint's configured latency; /stats counts every call
#      by endpoint and status
#   2. quota: a burst above quota_rps gets 429 with Retry-After, and /stats
#      agrees with what the client saw
#   3. outage windows: 503 inside each scripted window, 200 between them
#   4. bad replies (every JSON-mode reply violates the schema), truncated
#      bodies (not parseable), no json_schema support (400 naming
#      response_format, json_object still works)
#   5. configuration errors are refused at start with a clear message
#   6. it holds more connections than one stage's 1000 calls in flight: a
#      provider at scale has no 1024-connection cap (B's autoscaled stt and
#      grade replicas got 503s from the fake's HTTP server, not from its
#      scripted failures)
source "$(dirname "$0")/lib.sh"
P=$((BASE + 60)) # fake providers on P, P+2, ...; their admin ports on P+1, P+3, ...
mkdir -p "$STAGES_DIR"
T=$STAGES_DIR/tmp
mkdir -p "$T"
pids=() conns=()
at_exit 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; true'
fp_up() { # fp_up PORT ARGS... : starts a fake provider, waits for /stats
  local port=$1; shift
  "$FAKEPROVIDER" --set fakeprovider.listen=127.0.0.1:$port \
    --set admin.listen=127.0.0.1:$((port + 1)) "$@" >>"$STAGES_DIR/fakeprovider-$port.log" 2>&1 &
  pids+=($!)
  wait_for 10 curl -fsS -o /dev/null "http://127.0.0.1:$port/stats" 2>/dev/null ||
    fail "fakeprovider on $port not up"
}
# jqe [JQ ARGS...] FILTER [FILE]: the JSON comes from FILE or stdin. jq 1.6
# -e passes on an input with no JSON value at all, so an empty one fails here.
jqe() {
  local last=${*: -1} in
  if [[ -f $last ]]; then
    [[ -s $last ]] && jq -e "$@" >/dev/null
  else
    in=$(cat)
    [[ -n ${in//[[:space:]]/} ]] && jq -e "$@" <<<"$in" >/dev/null
  fi
}
schema_ok='(.score|type=="number" and . >= 0 and . <= 100)
  and (.level|IN("NL","NM","NH","IL","IM1","IM2","IM3","IH","AL"))
  and (.criteria|type=="array" and length > 0
       and all(.[]; (.name|type=="string") and (.score|type=="number" and . >= 0 and . <= 100)
                    and (.comment|type=="string")))
  and (.feedback|type=="string" and length > 0)'
chat_body() { # chat_body TEXT RESPONSE_FORMAT_JSON
  jq -cn --arg t "$1" --argjson rf "$2" \
    '{model:"fake-grader",messages:[{role:"system",content:"Grade the answer."},
      {role:"user",content:$t}],response_format:$rf}'
}
SCHEMA_RF='{"type":"json_schema","json_schema":{"name":"grade","strict":true,"schema":{"type":"object"}}}'
espeak-ng -w "$T/a.wav" "on weekends I go hiking with my friends" 2>/dev/null || fail "espeak-ng"
espeak-ng -w "$T/b.wav" "my favourite food is kimchi stew because it is warm and spicy" 2>/dev/null
printf 'this is not audio at all, just some text\n' >"$T/not.wav"

# 1 ---------------------------------------------------------------------
U=http://127.0.0.1:$P
fp_up $P --set fakeprovider.stt_latency_ms=400 --set fakeprovider.stt_jitter_ms=0 \
  --set fakeprovider.chat_latency_ms=700 --set fakeprovider.chat_jitter_ms=0
stt() { curl -sS -o "$T/out" -w '%{http_code} %{time_total}\n' "$U/v1/audio/transcriptions" "$@"; }
read -r code t_stt < <(stt -F file=@"$T/a.wav" -F model=whisper-1 -F response_format=verbose_json \
  -F 'timestamp_granularities[]=word' -F 'timestamp_granularities[]=segment')
check "verbose_json: 200 ($code)" test "$code" = 200
check "verbose_json: text, language, segments with id/start/end/text, words" jqe \
  '(.text|length > 10) and .language == "english" and (.segments|length > 0)
   and all(.segments[]; has("id") and has("start") and has("end") and has("text"))
   and (.words|length > 3) and all(.words[]; .end >= .start)' "$T/out"
# espeak-ng writes the canonical 44-byte header: byte rate at 28, data size at 40
wav_s=$(awk -v r="$(od -An -t u4 -j 28 -N 4 "$T/a.wav")" -v d="$(od -An -t u4 -j 40 -N 4 "$T/a.wav")" \
  'BEGIN { printf "%.3f", d / r }')
check "verbose_json: duration from the WAV header ($(jq .duration "$T/out") vs $wav_s s)" \
  awk -v a="$(jq .duration "$T/out")" -v b="$wav_s" 'BEGIN { exit !(a - b < 0.02 && b - a < 0.02) }'
check "transcription waited at least stt_latency_ms (${t_stt}s >= 0.4)" \
  awk -v t="$t_stt" 'BEGIN { exit !(t >= 0.4) }'
text_a=$(jq -r .text "$T/out")
read -r code _ < <(stt -F file=@"$T/a.wav" -F model=whisper-1)
check "json: only {text}, the same text for the same audio" \
  jqe --arg t "$text_a" 'keys == ["text"] and .text == $t' "$T/out"
read -r code _ < <(stt -F file=@"$T/a.wav" -F model=whisper-1 -F response_format=verbose_json)
check "verbose_json without word granularity has no words" jqe 'has("words") | not' "$T/out"
read -r code _ < <(stt -F file=@"$T/a.wav" -F model=whisper-1 -F response_format=text)
check "text: the plain transcript ($code)" test "$code" = 200 -a "$(cat "$T/out")" = "$text_a"
read -r code _ < <(stt -F file=@"$T/not.wav" -F model=whisper-1)
check "not audio: 400 invalid_request_error on file ($code)" test "$code" = 400
check "not audio: OpenAI error shape" jqe '.error.type == "invalid_request_error" and .error.param == "file"' "$T/out"
read -r code _ < <(stt -F model=whisper-1)
check "no file: 400 ($code)" test "$code" = 400
read -r code _ < <(stt -F file=@"$T/b.wav")
check "no model: 400 ($code)" test "$code" = 400
read -r code _ < <(curl -sS -o "$T/out" -w '%{http_code} x\n' "$U/v1/audio/transcriptions" \
  -H 'Content-Type: multipart/form-data; boundary=zzz' --data-binary 'garbage')
check "malformed multipart: 400 ($code)" test "$code" = 400

chat() { curl -sS -o "$T/out" -w '%{http_code} %{time_total}\n' "$U/v1/chat/completions" \
  -H 'Content-Type: application/json' --data-binary "$1"; }
long="On weekends I usually go hiking in the mountains with my friends, and afterwards we cook dinner together while talking about books, films and our plans for the summer holidays."
read -r code t_chat < <(chat "$(chat_body "$long" "$SCHEMA_RF")")
check "chat json_schema: 200 ($code)" test "$code" = 200
check "chat: a chat.completion with choices, message, finish_reason and usage" jqe \
  '.object == "chat.completion" and (.id|startswith("chatcmpl-")) and .model == "fake-grader"
   and .choices[0].message.role == "assistant" and .choices[0].finish_reason == "stop"
   and .usage.total_tokens == .usage.prompt_tokens + .usage.completion_tokens' "$T/out"
check "chat: content satisfies the grade schema" \
  jqe ".choices[0].message.content | fromjson | $schema_ok" "$T/out"
check "chat waited at least chat_latency_ms (${t_chat}s >= 0.7)" \
  awk -v t="$t_chat" 'BEGIN { exit !(t >= 0.7) }'
g1=$(jq -r '.choices[0].message.content' "$T/out")
chat "$(chat_body "$long" '{"type":"json_object"}')" >/dev/null
g2=$(jq -r '.choices[0].message.content' "$T/out")
check "chat: the same text gets the same grade (json_object mode too)" test "$g1" = "$g2"
chat "$(chat_body "yes" "$SCHEMA_RF")" >/dev/null
short=$(jq -r '.choices[0].message.content | fromjson | .score' "$T/out")
check "chat: a one-word answer scores lower ($short) than a long one ($(jq -r .score <<<"$g1"))" \
  test "$short" -lt "$(jq -r .score <<<"$g1")"
read -r code _ < <(chat 'not json')
check "chat: a body that is not JSON is 400 ($code)" test "$code" = 400
read -r code _ < <(chat '{"model":"m","messages":[]}')
check "chat: empty messages is 400 ($code)" test "$code" = 400
curl -sS -o /dev/null "$U/v1/nothing" -d x || true
# the collector that stores nothing (bench/cost): any body, 200, an empty
# protobuf reply, not a provider call (not in the counts below)
head -c 300000 /dev/urandom >"$T/spans"
read -r code size < <(curl -sS -o /dev/null -w '%{http_code} %{size_download}\n' \
  -H 'Content-Type: application/x-protobuf' --data-binary @"$T/spans" "$U/v1/traces")
check "traces: a 300 kB OTLP body is taken (200, $size bytes back)" test "$code $size" = "200 0"
stats=$(curl -fsS "$U/stats")
log "stats: $stats"
check "stats: transcriptions 4 x 200, 4 x 400" \
  jqe '.by_endpoint.transcriptions == {"200":4,"400":4}' <<<"$stats"
check "stats: chat 3 x 200, 2 x 400; total 13; the stray path counted apart" \
  jqe '.by_endpoint.chat == {"200":3,"400":2} and .total == 13 and .by_endpoint.other["404"] == 1
         and .in_flight == 0 and .bad_replies == 0 and .truncated == 0' <<<"$stats"

# 2 ---------------------------------------------------------------------
U=http://127.0.0.1:$((P + 2))
fp_up $((P + 2)) --set fakeprovider.quota_rps=2 --set fakeprovider.chat_latency_ms=0 \
  --set fakeprovider.chat_jitter_ms=0
body=$(chat_body "hello" '{"type":"json_object"}')
for i in $(seq 1 12); do
  curl -sS -D "$T/h$i" -o /dev/null -w '%{http_code}\n' "$U/v1/chat/completions" \
    -H 'Content-Type: application/json' --data-binary "$body" >"$T/c$i" &
done
wait_jobs() { local j; for j in $(jobs -p); do case " ${pids[*]} " in *" $j "*) ;; *) wait "$j" || true ;; esac; done; }
wait_jobs
n200=$(cat "$T"/c* | grep -c '^200$' || true)
n429=$(cat "$T"/c* | grep -c '^429$' || true)
check "quota 2/s: a burst of 12 got $n200 x 200 and $n429 x 429 (200s <= 3, all others 429)" \
  test "$n200" -le 3 -a "$((n200 + n429))" = 12 -a "$n429" -ge 9
ra=$(grep -ih '^retry-after:' "$T"/h* | head -1 | tr -dc '0-9')
check "429 carries Retry-After >= 1 ($ra)" test "${ra:-0}" -ge 1
stats=$(curl -fsS "$U/stats")
check "stats agree with the client: $n200 x 200, $n429 x 429" \
  jqe --argjson a "$n200" --argjson b "$n429" '.calls["200"] == $a and .calls["429"] == $b' <<<"$stats"
sleep 1.2
read -r code _ < <(curl -sS -o /dev/null -w '%{http_code} x\n' "$U/v1/chat/completions" --data-binary "$body")
check "after Retry-After the quota admits again ($code)" test "$code" = 200
rm -f "$T"/c* "$T"/h*

# 3 ---------------------------------------------------------------------
U=http://127.0.0.1:$((P + 4))
fp_up $((P + 4)) --set fakeprovider.outage=3-5,6.5-8 --set fakeprovider.chat_latency_ms=0 \
  --set fakeprovider.chat_jitter_ms=0
up() { curl -fsS "$U/stats" | jq .uptime_s; }
at() { # at SECONDS: waits until the provider's uptime reaches SECONDS
  local end=$((SECONDS + 20))
  until awk -v u="$(up)" -v t="$1" 'BEGIN { exit !(u >= t) }'; do
    ((SECONDS < end)) || { fail "uptime never reached $1 s"; return 0; }
    sleep 0.1
  done
}
call() { curl -sS -o /dev/null -w '%{http_code}' "$U/v1/chat/completions" --data-binary "$body"; }
u0=$(up)
if awk -v u="$u0" 'BEGIN { exit !(u < 2.5) }'; then
  check "before the first window: 200" test "$(call)" = 200
else
  log "start-up took ${u0}s; skipping the before-window call"
fi
at 3.3; check "inside window 3-5 s: 503" test "$(call)" = 503
at 4.5; check "still inside: 503" test "$(call)" = 503
at 5.3; check "between windows: 200" test "$(call)" = 200
at 6.8; check "inside window 6.5-8 s: 503" test "$(call)" = 503
at 8.3; check "after the last window: 200" test "$(call)" = 200
check "stats: 3 x 503 counted" jqe '.calls["503"] == 3' <<<"$(curl -fsS "$U/stats")"

# 4 ---------------------------------------------------------------------
U=http://127.0.0.1:$((P + 6))
fp_up $((P + 6)) --set fakeprovider.bad_reply_rate=1 --set fakeprovider.chat_latency_ms=0 \
  --set fakeprovider.chat_jitter_ms=0
bad=0
for i in $(seq 1 10); do
  curl -fsS "$U/v1/chat/completions" --data-binary "$(chat_body "$long $i" "$SCHEMA_RF")" >"$T/out"
  jq -e '.object == "chat.completion"' "$T/out" >/dev/null || fail "bad reply $i is not a chat.completion"
  jq -e ".choices[0].message.content | (try fromjson catch null) | if type == \"object\" then $schema_ok else false end" \
    "$T/out" >/dev/null || bad=$((bad + 1))
done
check "bad_reply_rate=1: all 10 JSON-mode contents violate the schema ($bad)" test "$bad" = 10
check "stats: bad_replies = 10" jqe '.bad_replies == 10' <<<"$(curl -fsS "$U/stats")"

U=http://127.0.0.1:$((P + 8))
fp_up $((P + 8)) --set fakeprovider.truncate_rate=1 --set fakeprovider.json_schema=false \
  --set fakeprovider.stt_latency_ms=0 --set fakeprovider.chat_latency_ms=0 \
  --set fakeprovider.stt_jitter_ms=0 --set fakeprovider.chat_jitter_ms=0
curl -fsS "$U/v1/audio/transcriptions" -F file=@"$T/a.wav" -F model=m >"$T/out" || fail "truncated: not 200"
check "truncate_rate=1: a complete HTTP answer holding half a JSON document" \
  sh -c "! jq . '$T/out' >/dev/null 2>&1 && test -s '$T/out'"
read -r code _ < <(curl -sS -o "$T/out" -w '%{http_code} x\n' "$U/v1/chat/completions" \
  --data-binary "$(chat_body "$long" "$SCHEMA_RF")")
check "json_schema=false: 400 naming response_format ($code)" \
  sh -c "test $code = 400 && jq -e '.error.param == \"response_format\"' '$T/out' >/dev/null"
read -r code _ < <(curl -sS -o /dev/null -w '%{http_code} x\n' "$U/v1/chat/completions" \
  --data-binary "$(chat_body "$long" '{"type":"json_object"}')")
check "json_schema=false: json_object mode still answers ($code)" test "$code" = 200
check "stats: truncated = 2" jqe '.truncated == 2' <<<"$(curl -fsS "$U/stats")"

# 5 ---------------------------------------------------------------------
for bad_set in fakeprovider.outage=5-3 fakeprovider.latency_dist=gaussian \
  fakeprovider.bad_reply_rate=1.5; do
  rc=0
  err=$("$FAKEPROVIDER" --set admin.listen=127.0.0.1:$((P + 11)) \
    --set fakeprovider.listen=127.0.0.1:$((P + 10)) --set "$bad_set" 2>&1 >/dev/null) || rc=$?
  msg=$(grep '^sluice-fakeprovider: ' <<<"$err" || true)
  check "$bad_set refused at start (exit $rc: $msg)" test "$rc" -ne 0 -a -n "$msg"
done

# 6 ---------------------------------------------------------------------
fp_up $((P + 12))
U6=http://127.0.0.1:$((P + 12))
held=0
(( $(ulimit -n) >= 1400 )) || ulimit -n 1400 2>/dev/null || true
for _ in $(seq 1100); do
  { exec {fd}<>"/dev/tcp/127.0.0.1/$((P + 12))"; } 2>/dev/null || break
  held=$((held + 1))
  conns+=("$fd")
done
code=$(curl -sS -o /dev/null -w '%{http_code}' "$U6/stats")
check "1100 open connections ($held held): /stats still answers 200 ($code)" \
  test "$held" = 1100 -a "$code" = 200
for fd in "${conns[@]}"; do exec {fd}>&-; done

rc=0
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" || rc=$?; done
pids=()
check "fake providers stopped cleanly" test "$rc" = 0
for f in "$STAGES_DIR"/fakeprovider-*.log; do
  grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$f" &&
    fail "sanitizer report in $f: $(grep -m3 -E 'ERROR|runtime error' "$f")"
done
finish
