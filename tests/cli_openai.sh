#!/bin/bash
# The official openai npm client (tests/openai, version pinned in its
# package-lock.json) against tierkv serve on a loopback port: chat and
# streaming chat, models, completions, and its error classes. Skipped (exit
# 77) when node or npm is missing; needs the npm registry for `npm ci`.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib_cli.sh"
. "$here/../scripts/serve_lib.sh"
src=$here/openai
if ! command -v node >/dev/null || ! command -v npm >/dev/null || ! command -v curl >/dev/null; then
	echo "cli_openai: skipped (needs node, npm and curl)"
	exit 77
fi
serve_cleanup_at_exit

cp "$src/package.json" "$src/package-lock.json" "$src/client.mjs" "$tmp/"
if ! (cd "$tmp" && timeout 300 npm ci --no-audit --no-fund --loglevel=error >npm.log 2>&1); then
	echo "FAIL: npm ci:"
	tail -20 "$tmp/npm.log"
	exit 1
fi

key=sk-openai-client-test
serve_up FAIL "$tmp/server.log" -m "$model" --api-key "$key" -t 2

(cd "$tmp" && TIERKV_URL=$serve_url TIERKV_API_KEY=$key timeout 120 node client.mjs)
rc=$?
serve_stop_ok "$tmp/server.log" || exit 1
exit $rc
