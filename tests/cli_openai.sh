#!/bin/bash
# The official openai npm client (tests/openai, version pinned in its
# package-lock.json) against tierkv serve on a loopback port: chat and
# streaming chat, models, completions, and its error classes. Skipped (exit
# 77) when node or npm is missing; needs the npm registry for `npm ci`.
set -u
bin=${TIERKV_BIN:?}
models=${TIERKV_MODELS:-../shared/models}
model=$models/stories260K.gguf
[ -r "$model" ] || model=${TIERKV_BUNDLED:?}/stories260K.gguf
src=$(cd "$(dirname "$0")/openai" && pwd)
if ! command -v node >/dev/null || ! command -v npm >/dev/null || ! command -v curl >/dev/null; then
	echo "cli_openai: skipped (needs node, npm and curl)"
	exit 77
fi
tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

cp "$src/package.json" "$src/package-lock.json" "$src/client.mjs" "$tmp/"
if ! (cd "$tmp" && timeout 300 npm ci --no-audit --no-fund --loglevel=error >npm.log 2>&1); then
	echo "FAIL: npm ci:"
	tail -20 "$tmp/npm.log"
	exit 1
fi

key=sk-openai-client-test
"$bin" serve -m "$model" --port 0 --api-key "$key" -t 2 2>"$tmp/server.log" &
pid=$!
url=
for _ in $(seq 200); do
	port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$tmp/server.log" 2>/dev/null | grep -o '[0-9]*$')
	if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null; then
		url=http://127.0.0.1:$port
		break
	fi
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
if [ -z "$url" ]; then
	echo "FAIL: the server did not start:"
	cat "$tmp/server.log"
	exit 1
fi

(cd "$tmp" && TIERKV_URL=$url TIERKV_API_KEY=$key timeout 120 node client.mjs)
rc=$?
kill -TERM "$pid"
wait "$pid"
src_rc=$?
pid=
if [ "$src_rc" -ne 0 ]; then
	echo "FAIL: the server exited $src_rc"
	tail -20 "$tmp/server.log"
	exit 1
fi
exit $rc
