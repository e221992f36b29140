#!/bin/bash
# kvstore_soak.sh [SECONDS] - the soak of docs/deploy.md: deploy/local.sh with
# 2 replicas behind haproxy sharing a Redis store, 32 clients for SECONDS
# (600 = the 10-minute soak), streaming and plain completions and chats with
# malformed requests mixed in. Passes with 0 failed well-formed requests, every
# malformed one answered 400, and no replica's peak KV allocation above its
# --kv-mem. Settings: CLIENTS (32), KV_MEM (64M), THREADS (1), BASE (port, 29000).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-600}
export N=2 THREADS=${THREADS:-1} KV_MEM=${KV_MEM:-64M} BASE=${BASE:-29000}
export PORT=$BASE REPLICA_PORT=$((BASE + 1)) REDIS_PORT=$((BASE + 379)) DIR=$(mktemp -d)
trap '"$root/deploy/local.sh" stop; rm -rf "$DIR"' EXIT
"$root/deploy/local.sh" start
res=$("$(command -v /usr/bin/python3 || command -v python3)" "$root/scripts/kvstore_client.py" soak "http://127.0.0.1:$PORT" "$secs" "${CLIENTS:-32}")
echo "soak: $res"
rc=0
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); sys.exit(0 if d["fail"] == 0 and d["bad_wrong"] == 0 else 1)' "$res" || rc=1
for i in 1 2; do
	url=http://127.0.0.1:$((REPLICA_PORT + i - 1))/metrics
	peak=$(curl -s "$url" | awk '$1 == "tierkv_kv_peak_allocated_bytes" { printf "%d", $2 }')
	budget=$(curl -s "$url" | awk '$1 == "tierkv_kv_budget_bytes" { printf "%d", $2 }')
	hits=$(curl -s "$url" | awk '$1 == "tierkv_kv_store_hit_tokens_total" { printf "%d", $2 }')
	echo "replica $i: KV peak $peak of $budget bytes, store hit tokens $hits"
	[ "$peak" -le "$budget" ] || rc=1
done
[ $rc = 0 ] && echo "soak: PASS" || echo "soak: FAIL"
exit $rc
