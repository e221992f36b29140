#!/bin/bash
# Builds tierkv and runs every test: the release build (unit tests, goldens,
# tokenizer fixtures, CLI contract), then the unit tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer.
# Fixtures: TIERKV_MODELS (default ../shared/models) and ../shared/vocab.
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)

echo "== release build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== ASan + UBSan build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTKV_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	ctest --test-dir build-asan --output-on-failure -j"$jobs"
