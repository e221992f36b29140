#!/bin/bash
# kvmem_similarity.sh [TIERKV_BIN...] - greedy text under --kv-mem against the
# full cache: for each prompt, N_GEN greedy tokens of stories260K with the full
# cache and with the policy under --kv-mem, and the word-level similarity of
# the two texts (Python's difflib ratio over whitespace-split words). Prints
# per binary the mean over the prompts, its standard error and the lowest.
# Several binaries are run on the same prompts (compare builds in one run).
# Settings: MODEL (models/stories260K.gguf), KV_MEM (105K: 35% of the f16 K+V
# of 480 tokens), POLICY (adaptive, the default), N_GEN (470), PROMPTS (a file, one prompt a
# line; default the 30 story openings below).
set -eu
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- build/tierkv
model=${MODEL:-models/stories260K.gguf}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${PROMPTS:-}" ]; then
	cp "$PROMPTS" "$tmp/prompts"
else
	cat > "$tmp/prompts" <<'P'
Once upon a time
Tom and his dog
The sun was hot
A little bird
The girl found a
Lily and Ben went
One day, a big
The old man had
Sam wanted to play
It was a rainy
Mia had a red ball
The cat sat on
There was a small boat
Jack liked to run
Anna and her mom
The big tree in the park
A boy named Tim
The dog was very happy
Sue saw a shiny
In a small house
The bunny hopped
Max was sad because
The princess wanted
Grandma baked a
The frog jumped into
Ben found a box
A kind bear
The children went to the beach
Lucy had a doll
The moon was bright
P
fi
for bin in "$@"; do
	i=0
	while IFS= read -r p; do
		[ -n "$p" ] || continue
		"$bin" run -m "$model" -p "$p" -n "${N_GEN:-470}" --temp 0 --ignore-eos > "$tmp/full.$i" 2>/dev/null
		"$bin" run -m "$model" -p "$p" -n "${N_GEN:-470}" --temp 0 --ignore-eos \
			--kv-policy "${POLICY:-adaptive}" --kv-mem "${KV_MEM:-105K}" > "$tmp/mem.$i" 2>/dev/null
		i=$((i + 1))
	done < "$tmp/prompts"
	python3 - "$tmp" "$i" "$bin" <<'PY'
import difflib, math, sys
d, n, b = sys.argv[1], int(sys.argv[2]), sys.argv[3]
r = [difflib.SequenceMatcher(None, open(f"{d}/full.{i}").read().split(), open(f"{d}/mem.{i}").read().split()).ratio()
     for i in range(n)]
m = sum(r) / n
se = math.sqrt(sum((x - m) ** 2 for x in r) / (n - 1) / n) if n > 1 else 0.0
print(f"{b}: {n} prompts, similarity mean {m:.3f} (standard error {se:.3f}), lowest {min(r):.3f}")
PY
done
