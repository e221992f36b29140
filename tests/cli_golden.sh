#!/bin/bash
# Greedy generations on stories260K must reproduce the golden texts byte for byte
# (the texts llama.cpp and llama2.c produce), with the f16 and the f32 cache and
# with prompt chunks of several sizes. The texts are the shared fixtures
# ($TIERKV_MODELS/golden) when present, else the copies bundled in tests/golden.
set -u
bin=${TIERKV_BIN:?}
models=${TIERKV_MODELS:-../shared/models}
bundled_golden=$(cd "$(dirname "$0")" && pwd)/golden
golden=$models/golden
[ -d "$golden" ] || golden=$bundled_golden
model=$models/stories260K.gguf
[ -r "$model" ] || model=${TIERKV_BUNDLED:?}/stories260K.gguf
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the bundled copies equal the shared texts wherever both are there
if [ "$golden" != "$bundled_golden" ]; then
	for f in "$golden"/*.txt "$golden"/*.prompt; do
		if cmp -s "$f" "$bundled_golden/$(basename "$f")"; then
			pass=$((pass + 1))
		else
			echo "FAIL bundled copy: tests/golden/$(basename "$f") differs from $f"
			fail=$((fail + 1))
		fi
	done
fi

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
