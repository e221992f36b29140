#!/bin/bash
# kvstore_bench.sh MODEL - the shared KV store's figures (docs/deploy.md):
# replica B's time to first token for a prompt replica A already served
# against an unseen prompt of the same length, whether B's greedy continuation
# equals B computing it alone at the same tier formats (a replica whose chunks
# went through its own store entries), and the bytes stored per token.
#
# Settings: LEN (prompt tokens, 2000), THREADS (2), GEN (32), BASE (port, 28000),
# TIERKV (binary). Needs redis-server and python3.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
model=${1:?usage: kvstore_bench.sh MODEL.gguf}
LEN=${LEN:-2000} THREADS=${THREADS:-2} GEN=${GEN:-32} BASE=${BASE:-28000}
TIERKV=${TIERKV:-$root/build/tierkv}
py=$(command -v /usr/bin/python3 || command -v python3)
cli="$py $root/scripts/kvstore_client.py"
dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	redis-cli -p $((BASE + 379)) shutdown nosave >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT
redis-server --port $((BASE + 379)) --bind 127.0.0.1 --save '' --appendonly no --maxmemory 2gb \
	--maxmemory-policy allkeys-lru --daemonize yes --logfile "$dir/redis.log"
sleep 0.5
serve() { # NAME PORT DB
	"$TIERKV" serve -m "$model" --port "$2" -t "$THREADS" --kv-store "redis://127.0.0.1:$((BASE + 379))/$3" \
		2>"$dir/$1.log" &
	pids+=($!)
	for ((i = 0; i < 600; i++)); do curl -sf -o /dev/null "http://127.0.0.1:$2/health" && return; sleep 0.1; done
	echo "replica $1 did not start: $(cat "$dir/$1.log")" >&2
	exit 1
}
stop_last() { kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true; unset 'pids[-1]'; }
wait_written() { # URL CHUNKS
	for ((i = 0; i < 600; i++)); do
		[ "$($cli metric "$1" tierkv_kv_store_entries_written_total)" -ge "$2" ] && return
		sleep 0.1
	done
}
$cli ids "$LEN" 1 >"$dir/p1.json"
$cli ids "$LEN" 2 >"$dir/p2.json"
chunks=$(((LEN - 1) / 16))
A=http://127.0.0.1:$((BASE + 1)) B=http://127.0.0.1:$((BASE + 2)) C=http://127.0.0.1:$((BASE + 3))
serve A $((BASE + 1)) 0
serve B $((BASE + 2)) 0
$cli ttft "$A" "$dir/p1.json" "$GEN" >"$dir/a.json"
wait_written "$A" "$chunks"
# time to first token as the server measures it (arrival to first token)
ttft() { $cli metric "$1" tierkv_time_to_first_token_seconds_sum; }
t0=$(ttft "$B")
$cli ttft "$B" "$dir/p1.json" "$GEN" >"$dir/b_hit.json"
t1=$(ttft "$B")
$cli ttft "$B" "$dir/p2.json" "$GEN" >"$dir/b_miss.json"
t2=$(ttft "$B")
hit_tokens=$($cli metric "$B" tierkv_kv_store_hit_tokens_total)
bpt=$($cli metric "$B" tierkv_kv_store_bytes_per_token)
ratio=$($cli metric "$B" tierkv_kv_store_bytes_per_token_ratio)
lookup_s=$($cli metric "$B" tierkv_kv_store_lookup_seconds_sum)
# B alone at the same tier formats: a replica with its own store (db 1)
# computes the prompt and stores it; a fresh one then attaches its own entries.
serve C $((BASE + 3)) 1
$cli ttft "$C" "$dir/p1.json" "$GEN" >/dev/null
wait_written "$C" "$chunks"
stop_last
serve C2 $((BASE + 3)) 1
$cli ttft "$C" "$dir/p1.json" "$GEN" >"$dir/c_self.json"
$py - "$dir" "$hit_tokens" "$bpt" "$ratio" "$lookup_s" "$LEN" "$THREADS" "$t0" "$t1" "$t2" <<'PY'
import json, sys
d, hit, bpt, ratio, lookup, n, th, t0, t1, t2 = sys.argv[1:]
hit_s, miss_s = float(t1) - float(t0), float(t2) - float(t1)
a = json.load(open(d + "/a.json")); bh = json.load(open(d + "/b_hit.json"))
bm = json.load(open(d + "/b_miss.json")); cs = json.load(open(d + "/c_self.json"))
print("prompt %s tokens, %s threads" % (n, th))
print("A (computes)        client TTFT %.3f s" % a["ttft_s"])
print("B, served by A      TTFT %.3f s (server), %.3f s (client); store hit %s tokens, lookups %.3f s" % (hit_s, bh["ttft_s"], hit, float(lookup)))
print("B, unseen prompt    TTFT %.3f s (server), %.3f s (client)" % (miss_s, bm["ttft_s"]))
print("ratio hit / unseen  %.4f (target <= 0.1)" % (hit_s / miss_s))
print("stored per token    %s bytes = %.1f%% of f16 K+V (target <= 35%%)" % (bpt, 100 * float(ratio)))
print("continuation == B alone at the same tier formats: %s" % (bh["text"] == cs["text"]))
print("continuation == A's (f16 prefix, informational): %s" % (bh["text"] == a["text"]))
PY
