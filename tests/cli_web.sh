#!/bin/bash
# The web page of tierkv serve in a real browser (headless Chromium through
# chromedriver; tests/web_browser.py): the key prompt, the page's self-test, a
# streamed chat reply to a long prompt, the cache panel's tiers, layers, gauge
# and governor events under a small --kv-mem, the Stop button. Skipped (exit
# 77) only when Chromium or its driver is not installed (Debian: apt-get
# install chromium chromium-driver; CI installs them).
# TIERKV_WEB_SCREENSHOT=FILE.png also saves a screenshot of the page.
set -u
bin=${TIERKV_BIN:?}
models=${TIERKV_MODELS:-../shared/models}
model=$models/stories260K.gguf
[ -r "$model" ] || model=${TIERKV_BUNDLED:?}/stories260K.gguf
here=$(cd "$(dirname "$0")" && pwd)
chromium=$(command -v chromium || command -v chromium-browser || true)
driver=$(command -v chromedriver || true)
[ -z "$driver" ] && [ -x /usr/lib/chromium/chromedriver ] && driver=/usr/lib/chromium/chromedriver
if [ -z "$chromium" ] || [ -z "$driver" ]; then
	echo "SKIPPED: chromium not installed (apt-get install chromium chromium-driver)"
	exit 77
fi
command -v python3 >/dev/null || { echo "FAIL: python3 is needed"; exit 1; }

tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# 100 KiB of KV (a third of what 512 tokens take at f16) and prompt chunks of
# 64 tokens, so that a long prompt drives the governor and fills every tier
key=sk-web-test
kv_mem=102400
"$bin" serve -m "$model" --port 0 --api-key "$key" -t 1 -b 64 --kv-mem $kv_mem 2>"$tmp/server.log" &
pid=$!
url=
for _ in $(seq 200); do
	port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$tmp/server.log" 2>/dev/null | grep -o '[0-9]*$')
	if [ -n "$port" ]; then
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

shot=()
[ -n "${TIERKV_WEB_SCREENSHOT:-}" ] && shot=(--screenshot "$TIERKV_WEB_SCREENSHOT")
timeout 300 python3 "$here/web_browser.py" --url "$url" --key "$key" --model stories260K --n-layer 5 \
	--kv-mem $kv_mem --chromium "$chromium" --chromedriver "$driver" "${shot[@]}"
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
[ "$rc" -ne 0 ] && { echo "server log:"; tail -20 "$tmp/server.log"; }
exit $rc
