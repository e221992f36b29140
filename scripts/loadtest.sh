#!/bin/bash
# Load test of tierkv serve on loopback: N concurrent clients (default 64)
# send requests back to back for a bounded time (default 60 s) — chat and
# completions, plain and streamed, max_tokens 16..128 — then the script
# reports requests sent / answered / errored and p50 / p99 / max latency.
#
#   scripts/loadtest.sh [-c CLIENTS] [-d SECONDS] [-m MODEL] [-- SERVER OPTIONS...]
#
# It starts its own server (TIERKV_BIN, default build/tierkv, built if
# missing) on a free 127.0.0.1 port and stops it at the end; traffic never
# leaves the machine. Exit 1 if any request errored or the server did not exit
# cleanly.
set -eu
cd "$(dirname "$0")/.."
clients=64 secs=60 model=""
while [ $# -gt 0 ]; do
	case $1 in
	-c) clients=$2; shift 2 ;;
	-d) secs=$2; shift 2 ;;
	-m) model=$2; shift 2 ;;
	--) shift; break ;;
	-h|--help) sed -n '2,12p' "$0"; exit 0 ;;
	*) echo "loadtest: unknown option $1" >&2; exit 2 ;;
	esac
done
[ "$clients" -ge 1 ] && [ "$clients" -le 1024 ] || { echo "loadtest: -c 1..1024" >&2; exit 2; }
[ "$secs" -ge 1 ] && [ "$secs" -le 3600 ] || { echo "loadtest: -d 1..3600" >&2; exit 2; }
. scripts/serve_lib.sh
serve_build
[ -n "$model" ] || model=models/stories260K.gguf

tmp=$(mktemp -d)
serve_cleanup_at_exit
serve_up loadtest "$tmp/server.log" -m "$model" --max-seqs "$clients" --max-queue $((clients * 2)) "$@"
url=$serve_url
head -n 1 "$tmp/server.log"

# client ID: requests until the deadline; one line per request: code seconds
client() {
	local id=$1 end=$2 n=0 out=$tmp/c$1
	while [ "$(date +%s)" -lt "$end" ]; do
		local mt=$((16 + (id * 7 + n * 13) % 113)) body path
		case $(((id + n) % 4)) in
		0) path=/v1/chat/completions
		   body="{\"messages\":[{\"role\":\"user\",\"content\":\"Tell story $n\"}],\"max_tokens\":$mt}" ;;
		1) path=/v1/chat/completions
		   body="{\"messages\":[{\"role\":\"user\",\"content\":\"Hi $id\"}],\"max_tokens\":$mt,\"stream\":true}" ;;
		2) path=/v1/completions
		   body="{\"prompt\":\"Once upon a time\",\"max_tokens\":$mt,\"seed\":$n}" ;;
		3) path=/v1/completions
		   body="{\"prompt\":\"Lily and Ben went\",\"max_tokens\":$mt,\"stream\":true}" ;;
		esac
		r=$(curl -s -o "$out.body" -w '%{http_code} %{time_total}' --max-time 300 \
			-H 'Content-Type: application/json' -d "$body" "$url$path" 2>/dev/null) || r="000 ${r#* }"
		# a stream that did not end with [DONE] is an error too
		case $r in
		200*) if grep -q '^data: ' "$out.body" && ! grep -q '^data: \[DONE\]' "$out.body"; then
			r="599 ${r#* }"; fi ;;
		esac
		echo "$r" >>"$out.log"
		n=$((n + 1))
	done
}

echo "loadtest: $clients clients for $secs s against $url"
start=$(date +%s.%N)
end=$(($(date +%s) + secs))
pids=()
for i in $(seq "$clients"); do
	client "$i" "$end" &
	pids+=($!)
done
peak_rss=0
while [ "$(date +%s)" -lt "$end" ]; do
	rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$serve_pid/status" 2>/dev/null || echo 0)
	[ "${rss:-0}" -gt "$peak_rss" ] && peak_rss=$rss
	sleep 1
done
wait "${pids[@]}"
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')
curl -s "$url/metrics" >"$tmp/metrics"
serve_stop
src=$serve_rc

cat "$tmp"/c*.log >"$tmp/all"
sent=$(wc -l <"$tmp/all")
answered=$(awk '$1 == 200' "$tmp/all" | wc -l)
errored=$((sent - answered))
awk '$1 == 200 { print $2 }' "$tmp/all" | sort -n >"$tmp/lat"
pct() { # p: nearest-rank percentile of the sorted latencies
	local n
	n=$(wc -l <"$tmp/lat")
	[ "$n" -gt 0 ] || { echo "-"; return; }
	local k=$(((n * $1 + 99) / 100))
	[ "$k" -ge 1 ] || k=1
	sed -n "${k}p" "$tmp/lat"
}
gen=$(awk '/^tierkv_generated_tokens_total / { print $2 }' "$tmp/metrics")
peak_kv=$(awk '/^tierkv_kv_peak_allocated_bytes / { print $2 }' "$tmp/metrics")
budget=$(awk '/^tierkv_kv_budget_bytes / { print $2 }' "$tmp/metrics")
mae=$(awk '/^tierkv_predictor_mae_tokens / { print $2 }' "$tmp/metrics")
pre=$(awk '/^tierkv_preemptions_total / { print $2 }' "$tmp/metrics")
echo "requests: sent $sent, answered $answered, errored $errored"
echo "latency (answered): p50 $(pct 50) s, p99 $(pct 99) s, max $(tail -n 1 "$tmp/lat" 2>/dev/null || echo -) s"
awk -v g="${gen:-0}" -v t="$elapsed" 'BEGIN { printf "generated tokens: %d (%.1f tokens/s)\n", g, g / t }'
echo "server: peak RSS $((peak_rss / 1024)) MiB, peak KV ${peak_kv:-?} of ${budget:-?} bytes, preemptions ${pre:-?}, predictor MAE ${mae:-?} tokens, exit code $src"
if [ "$errored" -gt 0 ]; then
	echo "error codes:"
	awk '$1 != 200 { print $1 }' "$tmp/all" | sort | uniq -c
fi
[ "$errored" -eq 0 ] && [ "$src" -eq 0 ]
