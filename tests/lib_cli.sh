# lib_cli.sh - sourced by the CLI tests (tests/cli_*.sh, api_install.sh): the
# binary, the model (the shared fixture, else the bundled copy), a scratch
# directory, the pass/fail counters and expect.
set -u
bin=${TIERKV_BIN:?}
models=${TIERKV_MODELS:-../shared/models}
model=$models/stories260K.gguf
[ -r "$model" ] || model=${TIERKV_BUNDLED:?}/stories260K.gguf
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

# expect WANT-EXIT STDERR-PATTERN ARGS...: `tierkv ARGS` exits with WANT-EXIT
# and its stderr matches the pattern (an empty pattern: anything).
expect() {
	local want=$1 pat=$2
	shift 2
	"$bin" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
	local got=$?
	if [ "$got" -ne "$want" ]; then
		bad "tierkv $*: exit $got, want $want; stderr: $(head -c 300 "$tmp/err")"
	elif [ -n "$pat" ] && ! grep -qE -- "$pat" "$tmp/err"; then
		bad "tierkv $*: stderr lacks /$pat/: $(head -c 300 "$tmp/err")"
	else
		ok
	fi
}
