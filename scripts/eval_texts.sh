#!/bin/bash
# Regenerates eval/texts/: stories sampled from the bundled stories260K at
# temperature 1 (no top-k/top-p/min-p) from fixed seeds, each cut at a line or
# word boundary so that it tokenizes (with BOS) to at most CTX tokens.
# A change in the kernels' rounding can change a sample, so the committed
# texts are the fixture: regenerate them on purpose, not as a check.
#   scripts/eval_texts.sh [TIERKV_BIN]     (default build/tierkv)
# SEEDS and OUT override the seeds (1 2 3 4) and the directory (eval/texts),
# e.g. SEEDS="$(seq 101 116)" OUT=/tmp/heldout for a held-out set.
set -eu
cd "$(dirname "$0")/.."
bin=${1:-${TIERKV_BIN:-build/tierkv}}
model=models/stories260K.gguf
ctx=512
out=${OUT:-eval/texts}
mkdir -p "$out"
for seed in ${SEEDS:-1 2 3 4}; do
	f=$out/seed$seed.txt
	"$bin" run -m "$model" --temp 1 --top-k 0 --top-p 1 --min-p 0 -s "$seed" \
		-n 600 -c "$ctx" --ignore-eos -t 1 >"$f" 2>/dev/null
	# drop the last word until the text fits (re-tokenizing may differ from
	# the sampled tokens)
	while n=$("$bin" tokenize -m "$model" -f "$f" --ids | tr -cd , | wc -c); [ $((n + 1)) -gt "$ctx" ]; do
		sed -i -e '$ s/[[:space:]]*[^[:space:]]*$//' -e '${/^$/d}' "$f"
	done
	echo "$f: $((n + 1)) tokens"
done
