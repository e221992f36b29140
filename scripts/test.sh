#!/bin/bash
# Builds tierkv and runs every test: the release build (unit tests, goldens,
# tokenizer fixtures, CLI contract), the same suite again on the scalar
# reference kernels (TIERKV_KERNELS=ref), then the unit tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer, then a fuzz smoke: every
# libFuzzer target in fuzz/ built with clang (ASan + UBSan) and run for
# TKV_FUZZ_SECONDS (default 30; 0 skips it) on its committed corpus, which
# replays every regression input first.
# Fixtures: TIERKV_MODELS (default ../shared/models) and ../shared/vocab.
set -eu
cd "$(dirname "$0")/.."
fuzz_secs=${TKV_FUZZ_SECONDS:-30}
if [ "$fuzz_secs" != 0 ]; then TKV_FUZZ_DEPS=1 scripts/deps.sh; else scripts/deps.sh; fi
jobs=$(nproc)

echo "== release build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== release build, reference kernels (TIERKV_KERNELS=ref)"
TIERKV_KERNELS=ref ctest --test-dir build --output-on-failure -j"$jobs"

echo "== ASan + UBSan build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTKV_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	ctest --test-dir build-asan --output-on-failure -j"$jobs"

echo "== fuzz smoke (clang, ASan + UBSan)"
if [ "$fuzz_secs" = 0 ]; then
	echo "fuzz smoke skipped (TKV_FUZZ_SECONDS=0)"
	exit 0
fi
mkdir -p build-fuzz
for src in fuzz/fuzz_*.c; do
	name=$(basename "$src" .c)
	name=${name#fuzz_}
	log=build-fuzz/smoke-$name.log
	if scripts/fuzz.sh "$name" "$fuzz_secs" >"$log" 2>&1; then
		echo "fuzz_$name: $(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1)"
	else
		tail -n 60 "$log"
		echo "fuzz smoke: fuzz_$name failed; the log is $log, the input in build-fuzz/artifacts/$name/"
		exit 1
	fi
done
