#!/bin/bash
# Builds tierkv and generates text with the bundled stories260K model.
# Extra arguments go to `tierkv run` (e.g. -p "Once upon a time" -n 100).
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
if [ $# -eq 0 ]; then
	set -- -p "Once upon a time" -n 200 --temp 0
fi
exec build/tierkv run "$@"
