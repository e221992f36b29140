#!/bin/bash
# cli_kvstore.sh - the shared KV store on loopback, with a real redis-server
# and haproxy (docs/deploy.md): a prefix shared across replicas (output equal
# to a replica attaching its own entries), a session continued on another
# replica, a corrupted, a truncated and a foreign-model entry planted (refused,
# counted, output unchanged), Redis killed mid-run (no failed request, one
# warning, metrics, reconnection), AUTH, and a replica stopped behind haproxy.
# Skips (exit 77, loudly) without redis-server/haproxy or a tierkv built
# without hiredis.
source "$(dirname "$0")/lib_cli.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
for cmd in redis-server redis-cli haproxy curl python3; do
	if ! command -v $cmd >/dev/null; then
		echo "SKIP cli_kvstore: $cmd not found (scripts/deps.sh or .ci/run installs it)" >&2
		exit 77
	fi
done
if ! "$bin" serve --help 2>&1 | grep -q -- --kv-store; then
	echo "SKIP cli_kvstore: tierkv built without hiredis (-DTKV_KV_STORE=OFF)" >&2
	exit 77
fi
kjv=${TIERKV_BUNDLED:?}/kjv-2048.gguf
# the system python (a version manager's shim can take seconds to start)
py=$(command -v /usr/bin/python3 || command -v python3)
cli="$py $root/scripts/kvstore_client.py"
rport=$((20000 + RANDOM % 20000))
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	[ -f "$tmp/haproxy.pid" ] && kill "$(cat "$tmp/haproxy.pid")" 2>/dev/null
	redis-cli -p $rport -a secret --no-auth-warning shutdown nosave >/dev/null 2>&1
	[ "${KEEP:-0}" = 1 ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
t_start=$SECONDS
step() { echo "cli_kvstore: $* ($((SECONDS - t_start)) s)"; }
rcli() { redis-cli -p $rport -a secret --no-auth-warning "$@"; }
start_redis() {
	redis-server --port $rport --bind 127.0.0.1 --save '' --appendonly no --requirepass secret \
		--maxmemory 64mb --maxmemory-policy allkeys-lru --daemonize yes --pidfile "$tmp/redis.pid" \
		--logfile "$tmp/redis.log"
	for ((i = 0; i < 50; i++)); do rcli ping 2>/dev/null | grep -q PONG && return; sleep 0.1; done
	bad "redis-server did not start: $(cat "$tmp/redis.log")"
	exit 1
}
# serve NAME MODEL [DB]: starts a replica on a free port; sets port_NAME
serve() {
	TIERKV_KV_STORE_PASSWORD=secret "$bin" serve -m "$2" --port 0 -t 1 \
		--kv-store "redis://127.0.0.1:$rport/${3:-0}" 2>"$tmp/$1.log" &
	pids+=($!)
	eval "pid_$1=$!"
	for ((i = 0; i < 100; i++)); do
		local p
		p=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/$1.log")
		if [ -n "$p" ]; then eval "port_$1=$p"; return; fi
		sleep 0.1
	done
	bad "replica $1 did not start: $(cat "$tmp/$1.log")"
	exit 1
}
# complete PORT PROMPT [MAX [EXTRA-JSON]]: the greedy text, or FAIL:code
complete() {
	local body extra=${4:-} f
	[ -n "$extra" ] || extra='{}'
	f=$(mktemp -p "$tmp")
	body=$($py -c 'import json,sys; d={"prompt":sys.argv[1],"max_tokens":int(sys.argv[2]),"temperature":0}; d.update(json.loads(sys.argv[3])); print(json.dumps(d))' "$2" "${3:-24}" "$extra")
	curl -s -o "$f" -w '%{http_code}' "http://127.0.0.1:$1/v1/completions" -d "$body" >"$f.code"
	if [ "$(cat "$f.code")" != 200 ]; then
		echo "FAIL:$(cat "$f.code") $(head -c 200 "$f")"
		return
	fi
	cp "$f" "$tmp/body"  # the last response, for usage
	$py -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$f"
}
m() { curl -s "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n { printf "%d\n", $2 }'; }
# new_keys BEFORE-FILE: store keys not in BEFORE-FILE
new_keys() { rcli --scan --pattern 'tkv:*' | sort | comm -13 "$1" -; }
wait_written() { # PORT N
	for ((i = 0; i < 100; i++)); do [ "$(m "$1" tierkv_kv_store_entries_written_total)" -ge "$2" ] && return; sleep 0.05; done
}
text() { # SEED: a prompt of ~200 tokens that no other test uses
	$py -c 'import random,sys; r=random.Random(int(sys.argv[1])); w="once upon a time there was a little girl named lily who loved to play in the park with her dog and a big red ball".split(); print(" ".join(r.choice(w) for _ in range(160)))' "$1"
}

start_redis
serve A "$model"
serve B "$model"
step "(1)"
# (1) a prefix shared across replicas
p1=$(text 1)
outA=$(complete $port_A "$p1")
wait_written $port_A 10
outB=$(complete $port_B "$p1")
hit=$(m $port_B tierkv_kv_store_hit_tokens_total)
[ "${hit:-0}" -ge 160 ] && ok || bad "B attached $hit tokens from the store, want >= 160"
[ "$(m $port_B tierkv_kv_store_hits_total)" = 1 ] && ok || bad "B: store hits != 1"
# B alone at the same tier formats: a replica with its own store (db 1) that
# attaches its own entries after a restart
serve C "$model" 1
complete $port_C "$p1" >/dev/null
wait_written $port_C 10
kill $pid_C
serve C2 "$model" 1
outC=$(complete $port_C2 "$p1")
[ "$(m $port_C2 tierkv_kv_store_hit_tokens_total)" = "$hit" ] && ok || bad "C2 did not attach its own entries"
[ -n "$outB" ] && [ "$outB" = "$outC" ] && ok || bad "B's continuation '$outB' != B alone at q4 '$outC'"
[ "${outA#FAIL}" = "$outA" ] && ok || bad "A: $outA"
kill $pid_C2

step "(2)"
# (2) a session continued on another replica: turn 1 on A, turn 2 on B
s1=$(text 2)
t1=$(complete $port_A "$s1" 40 '{"session_id":"conv-1"}')
n1=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["usage"]["prompt_tokens"])' "$tmp/body")
sleep 0.3
before=$(m $port_B tierkv_kv_store_hit_tokens_total)
t2=$(complete $port_B "$s1$t1 and then" 16 '{"session_id":"conv-1"}')
got=$(( $(m $port_B tierkv_kv_store_hit_tokens_total) - before ))
[ "${t2#FAIL}" = "$t2" ] && ok || bad "turn 2: $t2"
[ "$got" -gt "$n1" ] && ok || bad "turn 2 attached $got tokens, want more than turn 1's prompt ($n1): generated tokens not stored"

step "(3)"
# (3) planted entries: corrupted, truncated, from another model
plant() { # SEED HOW: A serves the prompt, its entries are damaged, B must refuse them
	local p keys want out
	p=$(text "$1")
	rcli --scan --pattern 'tkv:*' | sort >"$tmp/before"
	want=$(complete $port_A "$p")
	sleep 0.3
	keys=$(new_keys "$tmp/before")
	[ -n "$keys" ] || { bad "$2: A stored nothing"; return; }
	for k in $keys; do
		case $2 in
		corrupt) rcli setrange "$k" 300 "garbage" >/dev/null ;;
		truncated) rcli eval "return redis.call('SET', KEYS[1], string.sub(redis.call('GET', KEYS[1]), 1, 1000))" 1 "$k" >/dev/null ;;
		foreign) rcli copy "$foreign_key" "$k" replace >/dev/null ;;
		esac
	done
	local r0
	r0=$(m $port_B "tierkv_kv_store_rejected_entries_total{reason=\"$2\"}")
	out=$(complete $port_B "$p")
	[ "$(m $port_B "tierkv_kv_store_rejected_entries_total{reason=\"$2\"}")" -gt "$r0" ] && ok || bad "$2 entry not counted"
	[ "$out" = "$want" ] && ok || bad "$2 entry changed B's output: '$out' vs '$want'"
}
plant 3 corrupt
plant 4 truncated
rcli --scan --pattern 'tkv:*' | sort >"$tmp/before"
serve K "$kjv"
complete $port_K "$(text 5)" 4 >/dev/null
sleep 0.3
foreign_key=$(new_keys "$tmp/before" | head -n1)
kill $pid_K
[ -n "$foreign_key" ] && plant 6 foreign || bad "the kjv-2048 replica stored nothing"

step "(4)"
# (4) Redis killed during a 2-replica run: no failed request, one warning each
load=()
for i in $(seq 1 8); do
	port=$([ $((i % 2)) = 0 ] && echo $port_A || echo $port_B)
	(complete $port "$(text $((100 + i)))" 32 >"$tmp/load$i") &
	load+=($!)
done
sleep 0.3
kill -9 "$(cat "$tmp/redis.pid")"
wait "${load[@]}"
for i in $(seq 1 8); do complete $([ $((i % 2)) = 0 ] && echo $port_A || echo $port_B) "$(text $((200 + i)))" 8 >"$tmp/after$i"; done
fails=$(cat "$tmp"/load* "$tmp"/after* | grep -c '^FAIL' || true)
[ "$fails" = 0 ] && ok || bad "$fails requests failed while Redis was down"
for r in A B; do
	n=$(grep -c "KV store .* unavailable" "$tmp/$r.log")
	[ "$n" = 1 ] && ok || bad "replica $r warned $n times about the outage, want 1"
done
[ "$(m $port_A tierkv_kv_store_up)" = 0 ] && ok || bad "tierkv_kv_store_up != 0 during the outage"
start_redis
sleep 1.1
complete $port_A "$(text 300)" 8 >/dev/null
sleep 0.3
grep -q "KV store .* is back" "$tmp/A.log" && ok || bad "A did not reconnect: $(tail -n3 "$tmp/A.log")"
[ "$(m $port_A tierkv_kv_store_up)" = 1 ] && ok || bad "tierkv_kv_store_up != 1 after reconnecting"

step "(5)"
# (5) a replica stopped behind haproxy
sed -e '/^\tserver r[0-9]/d' \
	-e "s|^\t# @SERVERS@.*|\tserver r1 127.0.0.1:$port_A\n\tserver r2 127.0.0.1:$port_B|" \
	"$root/deploy/haproxy.cfg" >"$tmp/haproxy.cfg"
hport=$((rport + 1))
TKV_LISTEN=127.0.0.1:$hport haproxy -f "$tmp/haproxy.cfg" -D -p "$tmp/haproxy.pid" 2>"$tmp/haproxy.log" ||
	bad "haproxy did not start: $(cat "$tmp/haproxy.log")"
sleep 1
for i in 1 2 3 4; do
	r=$(complete $hport "$(text $((400 + i)))" 8 "{\"session_id\":\"h$i\"}")
	[ "${r#FAIL}" = "$r" ] && ok || bad "through haproxy: $r"
done
kill $pid_B
for i in $(seq 1 6); do
	r=$(complete $hport "$(text $((500 + i)))" 8 "{\"session_id\":\"h$i\"}")
	[ "${r#FAIL}" = "$r" ] && ok || bad "through haproxy with B stopped: $r"
done

echo "cli_kvstore: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
