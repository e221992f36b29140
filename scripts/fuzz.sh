#!/bin/bash
# Usage: scripts/fuzz.sh NAME SECONDS [libFuzzer options...]
#
# Builds the libFuzzer target fuzz_NAME (fuzz/fuzz_NAME.c) with clang, ASan and
# UBSan in build-fuzz/, then runs it for SECONDS on the seed corpus
# fuzz/corpus/NAME (read only; new inputs go to build-fuzz/corpus/NAME) with
# fuzz/NAME.dict when it exists. Crashes are saved in build-fuzz/artifacts/NAME/;
# replay one with: build-fuzz/fuzz/fuzz_NAME FILE
set -euo pipefail
name=${1:?usage: scripts/fuzz.sh NAME SECONDS [libFuzzer options...]}
secs=${2:?usage: scripts/fuzz.sh NAME SECONDS [libFuzzer options...]}
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-fuzz

TKV_FUZZ_DEPS=1 "$root/scripts/deps.sh"
cmake -S "$root" -B "$build" -DTKV_FUZZ=ON -DCMAKE_C_COMPILER=clang \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target "fuzz_$name"

seeds=$root/fuzz/corpus/$name
work=$build/corpus/$name
art=$build/artifacts/$name
mkdir -p "$work" "$art"
[ -d "$seeds" ] || mkdir -p "$seeds"
opts=(-max_total_time="$secs" -artifact_prefix="$art/" -print_final_stats=1)
[ -f "$root/fuzz/$name.dict" ] && opts+=(-dict="$root/fuzz/$name.dict")
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
	exec "$build/fuzz/fuzz_$name" "${opts[@]}" "$@" "$work" "$seeds"
