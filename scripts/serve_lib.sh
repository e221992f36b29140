# serve_lib.sh - sourced by the scripts and tests that run `tierkv serve` on
# loopback (scripts/loadtest.sh, scripts/soak.sh, tests/cli_server.sh,
# tests/cli_openai.sh, tests/cli_web.sh): start a server on a free port and
# wait until it answers, stop it and keep its exit code. Needs $bin (the
# tierkv binary: serve_build sets it in the scripts) and curl.

# serve_build: bin=$TIERKV_BIN, default build/tierkv, built (Release) first
# when it is missing. Run from the source root.
serve_build() {
	bin=${TIERKV_BIN:-build/tierkv}
	if [ ! -x "$bin" ]; then
		cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
		cmake --build build -j"$(nproc)" --target tierkv-cli >/dev/null
	fi
}

# serve_start LOG ARGS...: runs `$bin serve --port 0 ARGS...` in the
# background with its stderr in LOG; sets serve_pid, and serve_url once the
# port the server printed answers /health. Returns 1 (serve_url empty) when
# the server exited or did not answer within 30 s.
serve_start() {
	local log=$1 port
	shift
	"$bin" serve --port 0 "$@" 2>"$log" &
	serve_pid=$!
	serve_url=
	for _ in $(seq 300); do
		port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" 2>/dev/null | grep -o '[0-9]*$' || true)
		if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null; then
			serve_url=http://127.0.0.1:$port
			return 0
		fi
		kill -0 "$serve_pid" 2>/dev/null || break
		sleep 0.1
	done
	return 1
}

# serve_up WHO LOG ARGS...: serve_start LOG ARGS..., or "WHO: the server did
# not start:" with the log, and exit 1.
serve_up() {
	local who=$1 log=$2
	shift 2
	serve_start "$log" "$@" && return 0
	echo "$who: the server did not start:"
	cat "$log"
	exit 1
}

# serve_cleanup_at_exit: at exit, kills a server still running (serve_pid)
# and removes $tmp.
serve_cleanup_at_exit() {
	serve_pid=
	trap '[ -n "$serve_pid" ] && kill -KILL "$serve_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
}

# serve_stop: SIGTERM to serve_pid, then its exit code in serve_rc.
serve_stop() {
	serve_rc=0
	kill -TERM "$serve_pid"
	wait "$serve_pid" || serve_rc=$?
	serve_pid=
}

# serve_stop_ok LOG: serve_stop; when the server did not exit 0, says so with
# the end of LOG and returns 1.
serve_stop_ok() {
	serve_stop
	[ "$serve_rc" -eq 0 ] && return 0
	echo "FAIL: the server exited $serve_rc"
	tail -20 "$1"
	return 1
}
