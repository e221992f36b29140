#!/bin/bash
# `cmake --install` to a temporary prefix gives include/tierkv.h,
# lib/libtierkv.a and lib/pkgconfig/tierkv.pc; examples/embed.c builds against
# them with `pkg-config --cflags --libs tierkv` alone and, run on the bundled
# model, prints byte for byte what `tierkv run --temp 0` prints with the same
# prompt, length and per-sequence budget (the tiered cache at a quarter of the
# f16 cache), and frees every byte it counted.
set -u
. "$(dirname "$0")/lib_cli.sh"
src=${TIERKV_SRC:?} build=${TIERKV_BUILD:?}
cc=${TIERKV_CC:-cc} san=${TIERKV_SAN_FLAGS:-}
prefix=$tmp/prefix

if ! cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
	bad "cmake --install: $(tail -3 "$tmp/install.log")"
fi
for f in include/tierkv.h lib/libtierkv.a lib/pkgconfig/tierkv.pc bin/tierkv; do
	[ -f "$prefix/$f" ] && ok || bad "the install lacks $f"
done

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
if ! flags=$(pkg-config --cflags --libs tierkv 2>"$tmp/pc.err"); then
	bad "pkg-config --cflags --libs tierkv: $(cat "$tmp/pc.err")"
# shellcheck disable=SC2086 # flags and san: word lists
elif ! "$cc" -std=c11 -Wall -Wextra -Werror $san "$src/examples/embed.c" $flags -o "$tmp/embed" \
	2>"$tmp/cc.err"; then
	bad "cc embed.c \$(pkg-config --cflags --libs tierkv): $(head -c 600 "$tmp/cc.err")"
else
	ok
	prompt="Once upon a time" n=48
	if "$tmp/embed" "$model" "$prompt" "$n" >"$tmp/embed.out" 2>"$tmp/embed.err"; then
		ok
	else
		bad "embed exited $?: $(head -c 300 "$tmp/embed.err")"
	fi
	# the budget the example chose (a quarter of the f16 K+V of prompt and generation)
	budget=$(sed -n 's/.*(budget \([0-9]*\)).*/\1/p' "$tmp/embed.err")
	if [ -z "$budget" ]; then
		bad "embed did not report its budget: $(head -c 300 "$tmp/embed.err")"
	elif "$bin" run -m "$model" -p "$prompt" -n "$n" --temp 0 --kv-budget "$budget" >"$tmp/run.out" 2>/dev/null &&
		cmp -s "$tmp/embed.out" "$tmp/run.out"; then
		ok
	else
		bad "embed's text differs from tierkv run's (budget $budget):"
		diff <(cat "$tmp/embed.out"; echo) <(cat "$tmp/run.out"; echo) | head -8
	fi
	grep -q 'cold [1-9]' "$tmp/embed.err" && ok || bad "the budget left no cold slot: $(cat "$tmp/embed.err")"
	grep -q ', 0 live after' "$tmp/embed.err" && ok || bad "embed leaked counted bytes: $(cat "$tmp/embed.err")"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
