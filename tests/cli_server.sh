#!/bin/bash
# tierkv serve, end to end over loopback: starts servers on free ports with the
# bundled stories260K, runs the API with curl (completions, chat, streaming,
# models, health, metrics), every bad-input case (each must be an
# OpenAI-shaped JSON error with the right code, and the server must go on
# serving), client disconnects, 16 concurrent requests, then stops the servers
# with SIGTERM and checks that they exit 0 (under ASan: without leaks).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib_cli.sh"
. "$here/../scripts/serve_lib.sh"
command -v curl >/dev/null || { echo "cli_server: curl is needed (apt-get install curl)"; exit 1; }
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT

# start NAME ARGS...: starts a server on a free port; sets NAME_pid and NAME_url
start() {
	local name=$1
	shift
	serve_start "$tmp/$name.log" -m "$model" "$@"
	local started=$?
	pids+=("$serve_pid")
	eval "${name}_pid=$serve_pid"
	if [ "$started" -ne 0 ]; then
		echo "FAIL: server $name did not start:"
		cat "$tmp/$name.log"
		exit 1
	fi
	eval "${name}_url=$serve_url"
}

# stop NAME: SIGTERM, then the exit code must be 0
stop() {
	local pid
	pid=$(eval echo "\$${1}_pid")
	kill -TERM "$pid"
	wait "$pid"
	local rc=$?
	if [ "$rc" -eq 0 ]; then ok; else bad "server $1 exited $rc"; tail -20 "$tmp/$1.log"; fi
}

KEY=sk-test-key-123
AUTH=(-H "Authorization: Bearer $KEY")
start main --api-key "$KEY" --max-body 64K --max-tokens 256 --max-seqs 16 -t 2
URL=$main_url

# req NAME METHOD PATH [curl args...]: body in $tmp/NAME.body, code in $tmp/NAME.code, headers in $tmp/NAME.hdr
req() {
	local name=$1 method=$2 path=$3
	shift 3
	curl -s -X "$method" -o "$tmp/$name.body" -D "$tmp/$name.hdr" -w '%{http_code}' "${AUTH[@]}" \
		-H 'Content-Type: application/json' "$@" "$URL$path" >"$tmp/$name.code" 2>/dev/null
}
post() { # name path json
	req "$1" POST "$2" --data-binary "$3"
}
expect_code() { # name code
	local got
	got=$(cat "$tmp/$1.code")
	if [ "$got" = "$2" ]; then ok; else bad "$1: HTTP $got, want $2: $(head -c 300 "$tmp/$1.body")"; fi
}
expect_body() { # name regex (grep -E)
	if grep -qE -- "$2" "$tmp/$1.body"; then ok; else bad "$1: body lacks /$2/: $(head -c 400 "$tmp/$1.body")"; fi
}
expect_error() { # name code [param]: an OpenAI-shaped error
	expect_code "$1" "$2"
	expect_body "$1" '^\{"error":\{"message":"([^"\\]|\\.)+","type":"[a-z_]+","param":(null|"[^"]*"),"code":(null|"[a-z_]+")\}\}$'
	[ -z "${3:-}" ] || expect_body "$1" "\"param\":\"$3\""
	if grep -qE '/work|/home|/tmp|\.gguf|0x[0-9a-f]{6,}' "$tmp/$1.body"; then bad "$1: path or pointer in the error"; else ok; fi
}

# ---- safe defaults -----------------------------------------------------------------
# without --host the listening socket is 127.0.0.1:PORT only (/proc/net/tcp:
# local address 0100007F, state 0A = LISTEN; nothing on IPv6)
port_hex=$(printf '%04X' "${URL##*:}")
if grep -qE "^ *[0-9]+: 0100007F:$port_hex 00000000:0000 0A " /proc/net/tcp &&
	! grep -qE "^ *[0-9]+: [0-9A-F]+:$port_hex [0-9A-F]+:0000 0A " /proc/net/tcp6 2>/dev/null &&
	[ "$(grep -cE "^ *[0-9]+: [0-9A-F]+:$port_hex [0-9A-F]+:0000 0A " /proc/net/tcp)" -eq 1 ]; then
	ok
else
	bad "the server does not listen on 127.0.0.1:${URL##*:} only"
fi

# ---- the API -----------------------------------------------------------------------
req health GET /health
expect_code health 200
expect_body health '"status":"ok"'
req models GET /v1/models
expect_code models 200
expect_body models '"object":"list","data":\[\{"id":"stories260K","object":"model"'

post cmpl /v1/completions '{"model":"x","prompt":"Once upon a time","max_tokens":30,"temperature":0}'
expect_code cmpl 200
expect_body cmpl '"object":"text_completion"'
expect_body cmpl '"text":", there was a little girl named Lily\. She loved to play outside'
expect_body cmpl '"finish_reason":"length"'
expect_body cmpl '"usage":\{"prompt_tokens":5,"completion_tokens":30,"total_tokens":35\}'
grep -qi '^Content-Type: application/json' "$tmp/cmpl.hdr" && ok || bad "cmpl: content type"

# the same request streamed gives the same text
post cmpl_s /v1/completions '{"prompt":"Once upon a time","max_tokens":30,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}'
expect_code cmpl_s 200
grep -qi '^Content-Type: text/event-stream' "$tmp/cmpl_s.hdr" && ok || bad "cmpl_s: content type"
[ "$(tail -n 2 "$tmp/cmpl_s.body" | head -n 1)" = "data: [DONE]" ] && ok || bad "cmpl_s: does not end with data: [DONE]"
streamed=$(grep '^data: {' "$tmp/cmpl_s.body" | sed 's/^data: //' | grep -o '"text":"[^"]*"' | sed 's/^"text":"//; s/"$//' | tr -d '\n')
plain=$(grep -o '"text":"[^"]*"' "$tmp/cmpl.body" | sed 's/^"text":"//; s/"$//')
[ "$streamed" = "$plain" ] && ok || bad "stream text '$streamed' differs from '$plain'"
expect_body cmpl_s '"finish_reason":"length"'
expect_body cmpl_s '"choices":\[\],"usage":\{"prompt_tokens":5,"completion_tokens":30,"total_tokens":35\}'

post chat /v1/chat/completions '{"messages":[{"role":"system","content":"You tell stories."},{"role":"user","content":"Once upon a time"}],"max_tokens":20,"temperature":0}'
expect_code chat 200
expect_body chat '"object":"chat.completion"'
expect_body chat '"message":\{"role":"assistant","content":"'
expect_body chat '"finish_reason":"(stop|length)"'
expect_body chat '"usage":\{"prompt_tokens":[0-9]+,"completion_tokens":[0-9]+'

post chat_s /v1/chat/completions '{"messages":[{"role":"user","content":[{"type":"text","text":"Hello"}]}],"max_tokens":20,"stream":true}'
expect_code chat_s 200
head -n 1 "$tmp/chat_s.body" | grep -q '"object":"chat.completion.chunk".*"delta":{"role":"assistant","content":""}' && ok ||
	bad "chat_s: first chunk lacks the role: $(head -n 1 "$tmp/chat_s.body")"
expect_body chat_s '"delta":\{\},"logprobs":null,"finish_reason":"(stop|length)"'
expect_body chat_s '^data: \[DONE\]$'

# stop strings: the text ends before the first match
post stop /v1/completions '{"prompt":"Once upon a time","max_tokens":60,"temperature":0,"stop":["Lily","never matches"]}'
expect_code stop 200
expect_body stop '"text":", there was a little girl named ","index":0,"logprobs":null,"finish_reason":"stop"'
post stop_s /v1/completions '{"prompt":"Once upon a time","max_tokens":60,"temperature":0,"stop":"Lily","stream":true}'
s_text=$(grep '^data: {' "$tmp/stop_s.body" | grep -o '"text":"[^"]*"' | sed 's/^"text":"//; s/"$//' | tr -d '\n')
[ "$s_text" = ", there was a little girl named " ] && ok || bad "streamed stop text '$s_text'"

# a seed makes sampling repeatable; sampling params are accepted
body='{"prompt":"The cat","max_tokens":24,"temperature":0.9,"top_p":0.9,"top_k":20,"min_p":0.02,"seed":42,"frequency_penalty":0.5,"presence_penalty":0.2,"repeat_penalty":1.1}'
post seed1 /v1/completions "$body"
post seed2 /v1/completions "$body"
expect_code seed1 200
cmp -s "$tmp/seed1.body" "$tmp/seed2.body" && bad "ids should differ" || ok
[ "$(grep -o '"text":"[^"]*"' "$tmp/seed1.body")" = "$(grep -o '"text":"[^"]*"' "$tmp/seed2.body")" ] && ok || bad "same seed, different text"

# token-id prompts; unknown fields are ignored and named in a header
post ids /v1/completions '{"prompt":[1,403,407,261,378],"max_tokens":5,"temperature":0,"frobnicate":1}'
expect_code ids 200
expect_body ids '"prompt_tokens":5'
grep -qi '^X-Tierkv-Ignored-Fields: frobnicate' "$tmp/ids.hdr" && ok || bad "no X-Tierkv-Ignored-Fields header"

# ---- bad input ---------------------------------------------------------------------------
post e_json /v1/completions '{"prompt": "a",'
expect_error e_json 400
post e_json2 /v1/chat/completions 'not json at all'
expect_error e_json2 400
post e_arr /v1/completions '[1,2,3]'
expect_error e_arr 400
post e_dup /v1/completions '{"prompt":"a","prompt":"b"}'
expect_error e_dup 400
post e_bin /v1/completions $'\xff\xfe\x00garbage'
expect_error e_bin 400
post e_type /v1/completions '{"prompt":"a","temperature":"hot"}'
expect_error e_type 400 temperature
post e_range /v1/completions '{"prompt":"a","temperature":5}'
expect_error e_range 400 temperature
post e_topp /v1/completions '{"prompt":"a","top_p":0}'
expect_error e_topp 400 top_p
post e_mt /v1/completions '{"prompt":"a","max_tokens":1000}'
expect_error e_mt 400 max_tokens
post e_mt0 /v1/completions '{"prompt":"a","max_tokens":0}'
expect_error e_mt0 400 max_tokens
post e_mtf /v1/completions '{"prompt":"a","max_tokens":2.5}'
expect_error e_mtf 400 max_tokens
post e_n /v1/completions '{"prompt":"a","n":2}'
expect_error e_n 400 n
post e_stream /v1/completions '{"prompt":"a","stream":"yes"}'
expect_error e_stream 400 stream
post e_stop /v1/completions '{"prompt":"a","stop":[1]}'
expect_error e_stop 400 stop
post e_stop5 /v1/completions '{"prompt":"a","stop":["a","b","c","d","e"]}'
expect_error e_stop5 400 stop
post e_noprompt /v1/completions '{"max_tokens":4}'
expect_error e_noprompt 400 prompt
post e_ptype /v1/completions '{"prompt":{"text":"a"}}'
expect_error e_ptype 400 prompt
post e_ids /v1/completions '{"prompt":[1,99999]}'
expect_error e_ids 400 prompt
post e_nomsg /v1/chat/completions '{"prompt":"a"}'
expect_error e_nomsg 400 messages
post e_msgs /v1/chat/completions '{"messages":"hi"}'
expect_error e_msgs 400 messages
post e_empty /v1/chat/completions '{"messages":[]}'
expect_error e_empty 400 messages
post e_role /v1/chat/completions '{"messages":[{"role":"wizard","content":"hi"}]}'
expect_error e_role 400
post e_content /v1/chat/completions '{"messages":[{"role":"user","content":42}]}'
expect_error e_content 400
post e_image /v1/chat/completions '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}'
expect_error e_image 400
post e_tools /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]}'
expect_error e_tools 400 tools
post e_logprobs /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"logprobs":true}'
expect_error e_logprobs 400 logprobs
# a prompt longer than the context (512 tokens)
long=$(for i in $(seq 300); do printf 'Once upon a time '; done)
post e_ctx /v1/completions "{\"prompt\":\"$long\"}"
expect_error e_ctx 400 prompt
expect_body e_ctx '"code":"context_length_exceeded"'
# bodies over --max-body (64K): declared, and chunked
head -c 70000 /dev/zero | tr '\0' 'a' | sed 's/^/{"prompt":"/; s/$/"}/' >"$tmp/big.json"
req e_big POST /v1/completions --data-binary @"$tmp/big.json"
expect_error e_big 413
req e_chunked POST /v1/completions -H 'Transfer-Encoding: chunked' --data-binary @"$tmp/big.json"
expect_error e_chunked 413
# URLs, methods, keys
req e_404 GET /v1/nothing
expect_error e_404 404
req e_405 GET /v1/completions
expect_error e_405 405
AUTH=()
post e_nokey /v1/completions '{"prompt":"a"}'
expect_error e_nokey 401
grep -qi '^WWW-Authenticate: Bearer' "$tmp/e_nokey.hdr" && ok || bad "401 without WWW-Authenticate"
AUTH=(-H "Authorization: Bearer sk-test-key-124")
post e_badkey /v1/completions '{"prompt":"a"}'
expect_error e_badkey 401
AUTH=(-H "Authorization: Bearer sk-test-key-1234")
req e_longkey GET /v1/models
expect_error e_longkey 401
AUTH=(-H "Authorization: Bearer sk-test-key-12")
req e_shortkey GET /v1/models
expect_error e_shortkey 401
AUTH=(-H "Authorization: Basic $KEY")
req e_basic GET /v1/models
expect_error e_basic 401
AUTH=()
req health2 GET /health
expect_code health2 200
# the web page loads without the key (it asks for it); its data does not
req page GET /
expect_code page 200
grep -qi '^Content-Type: text/html' "$tmp/page.hdr" && ok || bad "page: content type"
grep -qi "^Content-Security-Policy: default-src 'self'" "$tmp/page.hdr" && ok || bad "page: no Content-Security-Policy"
expect_body page '<script src="/app.js"></script>'
if grep -qiE '(src|href)="(https?:)?//' "$tmp/page.body"; then bad "page: loads something from elsewhere"; else ok; fi
req page_js GET /app.js
expect_code page_js 200
grep -qi '^Content-Type: text/javascript' "$tmp/page_js.hdr" && ok || bad "app.js: content type"
req page_head HEAD /
expect_code page_head 200
req page_404 GET /nothing.js
expect_error page_404 404
req page_post POST / --data-binary '{}'
expect_error page_post 405
req e_cache_nokey GET /v1/cache
expect_error e_cache_nokey 401
AUTH=(-H "Authorization: Bearer $KEY")
req cache GET /v1/cache
expect_code cache 200
expect_body cache '^\{"object":"cache","model":"stories260K","policy":"adaptive",'
expect_body cache '"budget":\{"kv_mem":[0-9]+,"allocated":[0-9]+,"peak":[0-9]+,'
expect_body cache '"sequences":\[\{"id":"(chat)?cmpl-[0-9a-f]+","state":"(stop|length)"'
expect_body cache '"events":\[\{"id":[0-9]+,"t":[0-9.e-]+,"kind":"[a-z]+","text":"[^"]+"\}'
expect_body cache '"kind":"finish","text":"(chat)?cmpl-[0-9a-f]+ (stop|length): [0-9]+ prompt \+ [0-9]+ generated tokens'
req cache_v GET /cache
expect_code cache_v 200

# ---- 16 concurrent requests: all answered ----------------------------------------------------
jobs_=()
for i in $(seq 16); do
	case $((i % 4)) in
	0) post "c$i" /v1/completions "{\"prompt\":\"Once upon a time\",\"max_tokens\":$((20 + i * 5)),\"seed\":$i}" & ;;
	1) post "c$i" /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Story $i\"}],\"max_tokens\":40}" & ;;
	2) post "c$i" /v1/completions "{\"prompt\":\"Lily and Ben\",\"max_tokens\":64,\"stream\":true}" & ;;
	3) post "c$i" /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi $i\"}],\"stream\":true,\"max_tokens\":30}" & ;;
	esac
	jobs_+=($!)
done
wait "${jobs_[@]}"
for i in $(seq 16); do
	expect_code "c$i" 200
	if [ $((i % 4)) -ge 2 ]; then expect_body "c$i" '^data: \[DONE\]$'; else expect_body "c$i" '"usage":\{'; fi
done

# ---- metrics ---------------------------------------------------------------------------------------
sleep 0.3
req metrics GET /metrics
expect_code metrics 200
for m in 'tierkv_requests_total [1-9]' 'tierkv_generated_tokens_total [1-9]' 'tierkv_prompt_tokens_total [1-9]' \
	'tierkv_tokens_per_second ' 'tierkv_queue_length 0' 'tierkv_live_sequences 0' \
	'tierkv_kv_tier_bytes\{tier="hot"\} ' 'tierkv_kv_tier_bytes\{tier="cold"\} ' 'tierkv_kv_evicted_total ' \
	'tierkv_kv_governor_runs_total ' 'tierkv_prefix_hits_total 0' 'tierkv_predictor_mae_tokens [0-9]' \
	'tierkv_http_responses_total\{code="413"\} 2' 'tierkv_http_responses_total\{code="401"\} 6' \
	'# TYPE tierkv_requests_total counter'; do
	expect_body metrics "^$m"
done
# still serving after everything above
post final /v1/completions '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}'
expect_code final 200
stop main

# ---- a small server: queue limit, KV preemption, timeouts ------------------------------------------
start small --max-seqs 1 --max-queue 1 -c 2048 --max-tokens 2000 -t 1
URL=$small_url
AUTH=()
jobs_=()
for i in 1 2 3 4 5 6; do
	post "q$i" /v1/completions '{"prompt":"Once","max_tokens":1500,"ignore_eos":true}' &
	jobs_+=($!)
	sleep 0.02
done
# while they run: one sequence at a time (--max-seqs 1), at most one waiting
curl -s "$URL/metrics" >"$tmp/qmetrics"
awk '/^tierkv_live_sequences / { l = $2 } /^tierkv_queue_length / { q = $2 } END { exit !(l <= 1 && q <= 1) }' \
	"$tmp/qmetrics" && ok || bad "--max-seqs 1 --max-queue 1: $(grep -E '^tierkv_(live_sequences|queue_length) ' "$tmp/qmetrics" | tr '\n' ' ')"
wait "${jobs_[@]}"
n200=0 n503=0
for i in 1 2 3 4 5 6; do
	case $(cat "$tmp/q$i.code") in 200) n200=$((n200 + 1)) ;; 503) n503=$((n503 + 1)); expect_error "q$i" 503 ;; esac
done
[ $((n200 + n503)) -eq 6 ] && [ "$n503" -ge 1 ] && [ "$n200" -ge 2 ] && ok || bad "queue limit: $n200 x 200, $n503 x 503"
grep -q '"code":"queue_full"' "$tmp"/q*.body && ok || bad "no queue_full error"
grep -qi '^Retry-After: 1' $(grep -l '"code":"queue_full"' "$tmp"/q*.body | sed 's/\.body$/.hdr/') && ok ||
	bad "a 503 queue_full without Retry-After"
stop small

# the full cache in a budget too small for all: requests are preempted or queued, all answered
# (short requests first teach the predictor to expect short outputs, so the
# long ones are admitted too optimistically and must be preempted)
start tight --kv-policy full --kv-mem 400K --max-seqs 8 -t 2
URL=$tight_url
for i in $(seq 6); do
	post "w$i" /v1/completions "{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"ignore_eos\":true}"
done
jobs_=()
for i in $(seq 8); do
	post "t$i" /v1/completions "{\"prompt\":\"Once upon a time\",\"max_tokens\":200,\"ignore_eos\":true,\"seed\":$i}" &
	jobs_+=($!)
done
wait "${jobs_[@]}"
for i in $(seq 8); do expect_code "t$i" 200; done
req tmetrics GET /metrics
grep -E '^tierkv_kv_peak_allocated_bytes ' "$tmp/tmetrics.body" | awk '{ exit !($2 <= 409600) }' && ok ||
	bad "peak KV over --kv-mem: $(grep -E '^tierkv_kv_peak_allocated_bytes ' "$tmp/tmetrics.body")"
expect_body tmetrics '^tierkv_preemptions_total [1-9]'
expect_body tmetrics '^tierkv_predictor_samples_total [1-9]'

stop tight

# long generations (4000 tokens take well over a second): disconnects cancel
# their requests, and --timeout ends the one that runs too long
start slow --timeout 1 -c 4096 --max-tokens 4000 -t 1
URL=$slow_url
curl -s -N --max-time 0.3 "$URL/v1/completions" \
	-d '{"prompt":"Once","max_tokens":4000,"ignore_eos":true,"stream":true}' >/dev/null 2>&1
curl -s --max-time 0.3 "$URL/v1/completions" -d '{"prompt":"Once","max_tokens":4000,"ignore_eos":true}' >/dev/null 2>&1
sleep 0.3
req cmetrics GET /metrics
expect_body cmetrics '^tierkv_requests_finished_total\{reason="cancelled"\} 2'
expect_body cmetrics '^tierkv_live_sequences 0'
post to /v1/completions '{"prompt":"Once","max_tokens":4000,"ignore_eos":true}'
expect_error to 504
expect_body to '"code":"timeout"'
stop slow

# a request waiting its turn sends nothing for longer than --idle-timeout (one
# sequence at a time, two 4000-token generations ahead of it): the connection
# stays open and the stream arrives whole
start idle --idle-timeout 1 --max-seqs 1 -c 4096 --max-tokens 4000 -t 1
URL=$idle_url
jobs_=()
for i in 1 2; do
	post "il$i" /v1/completions '{"prompt":"Once","max_tokens":4000,"ignore_eos":true}' &
	jobs_+=($!)
done
sleep 0.3
post is /v1/completions '{"prompt":"Once","max_tokens":40,"ignore_eos":true,"stream":true}'
wait "${jobs_[@]}"
for i in 1 2; do
	expect_code "il$i" 200
	expect_body "il$i" '"completion_tokens":4000'
done
expect_code is 200
expect_body is '"text":"[^"]'
expect_body is '"finish_reason":"length"'
expect_body is '^data: \[DONE\]$'
stop idle

# prefix sharing: requests with a common system prompt reuse its pages
start pfx --prefix-cache on -t 2
URL=$pfx_url
sys=$(for i in $(seq 20); do printf 'Lily liked to play in the park with Ben. '; done)
for i in 1 2 3 4; do
	post "p$i" /v1/chat/completions "{\"messages\":[{\"role\":\"system\",\"content\":\"$sys\"},{\"role\":\"user\",\"content\":\"Story $i\"}],\"max_tokens\":4}"
	expect_code "p$i" 200
done
sleep 0.3
req pmetrics GET /metrics
expect_body pmetrics '^tierkv_prefix_hits_total [1-9]'
stop pfx

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
