#!/bin/bash
# deploy/local.sh - a tierkv cluster on loopback: redis-server, N tierkv
# replicas sharing their KV store in it, and haproxy in front (docs/deploy.md).
#
#   deploy/local.sh start    start everything in the background, wait until healthy
#   deploy/local.sh stop     stop what `start` started (by the pids it wrote)
#   deploy/local.sh status   /health of each replica and haproxy's address
#
# Settings (environment): N (replicas, 2), MODEL (GGUF, the bundled
# stories260K), THREADS (per replica, 1), KV_MEM (per replica, 256M), PORT
# (haproxy, 8080), REPLICA_PORT (first replica's, 8081), REDIS_PORT (6399),
# REDIS_MAXMEM (1gb), REDIS_PASSWORD (AUTH; none), TTL (3600), DIR (state:
# logs, pids, config; /tmp/tierkv-local), TIERKV (the binary), EXTRA (more
# `tierkv serve` options). Needs redis-server and haproxy (Debian packages
# redis-server and haproxy; scripts/deps.sh installs them).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
N=${N:-2}
MODEL=${MODEL:-$root/models/stories260K.gguf}
THREADS=${THREADS:-1}
KV_MEM=${KV_MEM:-256M}
PORT=${PORT:-8080}
REPLICA_PORT=${REPLICA_PORT:-8081}
REDIS_PORT=${REDIS_PORT:-6399}
REDIS_MAXMEM=${REDIS_MAXMEM:-1gb}
REDIS_PASSWORD=${REDIS_PASSWORD:-}
TTL=${TTL:-3600}
DIR=${DIR:-/tmp/tierkv-local}
TIERKV=${TIERKV:-$root/build/tierkv}
EXTRA=${EXTRA:-}

wait_http() { # URL SECONDS
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		curl -sf -o /dev/null "$1" && return 0
		sleep 0.1
	done
	echo "local.sh: $1 did not answer in $2 s" >&2
	return 1
}

start() {
	mkdir -p "$DIR"
	for cmd in redis-server redis-cli haproxy curl; do
		command -v $cmd >/dev/null || { echo "local.sh: $cmd not found (scripts/deps.sh installs it)" >&2; exit 1; }
	done
	# Redis: memory-only, bounded: maxmemory with LRU eviction over all keys
	# (every entry also has a TTL), no persistence.
	local auth=() url="redis://127.0.0.1:$REDIS_PORT"
	[ -n "$REDIS_PASSWORD" ] && auth=(--requirepass "$REDIS_PASSWORD")
	redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
		--maxmemory "$REDIS_MAXMEM" --maxmemory-policy allkeys-lru "${auth[@]}" \
		--daemonize yes --pidfile "$DIR/redis.pid" --logfile "$DIR/redis.log"
	for ((i = 0; i < 50; i++)); do
		REDISCLI_AUTH="$REDIS_PASSWORD" redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break
		sleep 0.1
	done
	local servers=""
	for ((i = 1; i <= N; i++)); do
		local p=$((REPLICA_PORT + i - 1))
		# the password goes through the environment, not the command line
		TIERKV_KV_STORE_PASSWORD="$REDIS_PASSWORD" "$TIERKV" serve -m "$MODEL" --port "$p" -t "$THREADS" \
			--kv-mem "$KV_MEM" --kv-store "$url" --kv-store-ttl "$TTL" $EXTRA \
			2>"$DIR/replica$i.log" &
		echo $! >"$DIR/replica$i.pid"
		servers+="	server r$i 127.0.0.1:$p\n"
	done
	sed -e '/^\tserver r[0-9]/d' -e "s|^\t# @SERVERS@.*|$servers|" "$here/haproxy.cfg" >"$DIR/haproxy.cfg"
	for ((i = 1; i <= N; i++)); do
		wait_http "http://127.0.0.1:$((REPLICA_PORT + i - 1))/health" 60
	done
	TKV_LISTEN="127.0.0.1:$PORT" haproxy -f "$DIR/haproxy.cfg" -D -p "$DIR/haproxy.pid" 2>"$DIR/haproxy.log"
	wait_http "http://127.0.0.1:$PORT/health" 10
	echo "local.sh: haproxy on http://127.0.0.1:$PORT, $N replicas from port $REPLICA_PORT, redis on $REDIS_PORT; logs in $DIR"
}

stop() {
	local f
	for f in "$DIR"/haproxy.pid "$DIR"/replica*.pid "$DIR"/redis.pid; do
		[ -f "$f" ] || continue
		kill "$(cat "$f")" 2>/dev/null || true
		rm -f "$f"
	done
}

status() {
	for ((i = 1; i <= N; i++)); do
		printf 'replica %d (port %d): ' "$i" $((REPLICA_PORT + i - 1))
		curl -s -m 2 "http://127.0.0.1:$((REPLICA_PORT + i - 1))/health" || printf 'down'
		echo
	done
	printf 'haproxy (port %d): ' "$PORT"
	curl -s -m 2 "http://127.0.0.1:$PORT/health" || printf 'down'
	echo
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
