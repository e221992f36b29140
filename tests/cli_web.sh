#!/bin/bash
# The web page of tierkv serve in a real browser (headless Chromium through
# chromedriver; tests/web_browser.py): the key prompt, the page's self-test, a
# streamed chat reply to a long prompt, the cache panel's tiers, layers, gauge
# and governor events under a small --kv-mem, the Stop button. Skipped (exit
# 77) only when Chromium or its driver is not installed (Debian: apt-get
# install chromium chromium-driver; CI installs them).
# TIERKV_WEB_SCREENSHOT=FILE.png also saves a screenshot of the page.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib_cli.sh"
. "$here/../scripts/serve_lib.sh"
chromium=$(command -v chromium || command -v chromium-browser || true)
driver=$(command -v chromedriver || true)
[ -z "$driver" ] && [ -x /usr/lib/chromium/chromedriver ] && driver=/usr/lib/chromium/chromedriver
if [ -z "$chromium" ] || [ -z "$driver" ]; then
	echo "SKIPPED: chromium not installed (apt-get install chromium chromium-driver)"
	exit 77
fi
command -v python3 >/dev/null || { echo "FAIL: python3 is needed"; exit 1; }

serve_cleanup_at_exit

# 100 KiB of KV (a third of what 512 tokens take at f16) and prompt chunks of
# 64 tokens, so that a long prompt drives the governor and fills every tier
key=sk-web-test
kv_mem=102400
serve_up FAIL "$tmp/server.log" -m "$model" --api-key "$key" -t 1 -b 64 --kv-mem $kv_mem

shot=()
[ -n "${TIERKV_WEB_SCREENSHOT:-}" ] && shot=(--screenshot "$TIERKV_WEB_SCREENSHOT")
timeout 300 python3 "$here/web_browser.py" --url "$serve_url" --key "$key" --model stories260K --n-layer 5 \
	--kv-mem $kv_mem --chromium "$chromium" --chromedriver "$driver" "${shot[@]}"
rc=$?
serve_stop_ok "$tmp/server.log" || exit 1
[ "$rc" -ne 0 ] && { echo "server log:"; tail -20 "$tmp/server.log"; }
exit $rc
