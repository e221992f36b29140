#!/bin/bash
# Greedy generations on stories260K must reproduce the golden texts byte for byte
# (the texts llama.cpp and llama2.c produce), with the f16 and the f32 cache and
# with prompt chunks of several sizes.
set -u
bin=${TIERKV_BIN:?}
models=${TIERKV_MODELS:-../shared/models}
golden=$models/golden
model=$models/stories260K.gguf
[ -r "$model" ] || model=${TIERKV_BUNDLED:?}/stories260K.gguf
if [ ! -d "$golden" ]; then
	echo "golden texts not found in $golden (set TIERKV_MODELS)"
	echo "0 passed, 1 failed"
	exit 1
fi
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() { # name expected-file args...
	local name=$1 want=$2
	shift 2
	if ! "$bin" run -m "$model" --temp 0 "$@" >"$tmp/out" 2>"$tmp/err"; then
		echo "FAIL $name: exit $? ($(tail -1 "$tmp/err"))"
		fail=$((fail + 1))
		return
	fi
	# a CLI may end its output with one newline: compare without it
	if [ "$(tail -c1 "$tmp/out" | od -An -c | tr -d ' ')" = '\n' ]; then
		head -c -1 "$tmp/out" >"$tmp/out2" && mv "$tmp/out2" "$tmp/out"
	fi
	if cmp -s "$tmp/out" "$want"; then
		pass=$((pass + 1))
	else
		echo "FAIL $name: output differs from $want at byte $(cmp "$tmp/out" "$want" | awk '{print $5}' | tr -d ,)"
		fail=$((fail + 1))
	fi
}

for kv in f16 f32; do
	check "default/$kv" "$golden/default.txt" -n 256 --kv-type $kv
	for p in "$golden"/prompt*.prompt; do
		n=$(basename "$p" .prompt)
		for b in 64 1 3; do
			check "$n/$kv/b$b" "$golden/$n.txt" -p "$(cat "$p")" -n 200 --kv-type $kv -b $b
		done
	done
done
# one thread and the bundled copy of the model give the same text
check "default/t1" "$golden/default.txt" -n 256 -t 1
model=${TIERKV_BUNDLED:?}/stories260K.gguf check "bundled" "$golden/default.txt" -n 256

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
