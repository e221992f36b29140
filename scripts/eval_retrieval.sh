#!/bin/bash
# eval_retrieval.sh MODEL OUTDIR - the retrieval table of a long-context model:
# every task (passkey, niah, multikey, multivalue, vartrack, copy) at 4096 and
# 8192 tokens, for the full cache and every policy at budgets 1, 1/4, 1/8,
# 1/16 and 1/32, with the reserved KJV books (Esther, Joel, Titus, 2 John,
# 3 John: never trained on, see tools/train/corpus.sh) as filler.
#
# Writes OUTDIR/retrieval.md (the table and the --grid of GRID), retrieval.json
# (one object per row), retrieval.svg (mean accuracy against the KV ratio),
# retrieval.log (progress, stderr) and books/ (the filler). Not a test: it
# takes hours on a CPU (see docs/retrieval.md for the cost).
#
# Filler: KJV=DIR takes DIR/reserved/*.txt (corpus.sh's output, or
# lc_corpus.py's OUTDIR/kjv); without it the books are cut from Debian's
# bible-kjv (apt-get install bible-kjv) the way corpus.sh cuts them.
# Overrides: TIERKV (the binary, default build/tierkv), LENS (4096,8192),
# BUDGETS, POLICIES (all), DEPTHS (0,0.25,0.5,0.75,1), SAMPLES (2), SEED (1),
# TASKS (all), GRID (tiered), THREADS, EXTRA (more eval options, e.g.
# "-c 8192 --kv-mem 1G").
set -eu
model=${1:?usage: eval_retrieval.sh MODEL OUTDIR}
out=${2:?usage: eval_retrieval.sh MODEL OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TIERKV:-$root/build/tierkv}
[ -x "$bin" ] || { echo "eval_retrieval.sh: no $bin (build first: cmake -B build && cmake --build build)" >&2; exit 1; }
[ -r "$model" ] || { echo "eval_retrieval.sh: cannot read $model" >&2; exit 1; }
mkdir -p "$out/books"
rm -f "$out"/books/*.txt

if [ -n "${KJV:-}" ]; then
	ls "$KJV"/reserved/*.txt >/dev/null || { echo "eval_retrieval.sh: no $KJV/reserved/*.txt" >&2; exit 1; }
	cp "$KJV"/reserved/*.txt "$out/books/"
else
	command -v bible >/dev/null || { echo "eval_retrieval.sh: needs bible (apt-get install bible-kjv) or KJV=DIR" >&2; exit 1; }
	# corpus.sh's cut: one file per book, a verse a line, no references
	bible -f "Gen1:1-Rev22:21" | awk -v dir="$out/books" '
	{
		match($0, /^[0-9]?[A-Za-z]+/)
		book = substr($0, 1, RLENGTH)
		if (book != last) { n++; last = book; if (f) close(f); f = sprintf("%s/%02d_%s.txt", dir, n, book) }
		if (book !~ /^(Est|Joel|Titus|2Jn|3Jn)$/) next
		sub(/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ /, "")
		print > f
	}'
fi
[ "$(ls "$out"/books/*.txt | wc -l)" -eq 5 ] || { echo "eval_retrieval.sh: expected the 5 reserved books in $out/books" >&2; exit 1; }
files=()
for f in "$out"/books/*.txt; do files+=(-f "$f"); done

threads=()
[ -n "${THREADS:-}" ] && threads=(-t "$THREADS")
# shellcheck disable=SC2086
"$bin" eval -m "$model" --retrieval "${TASKS:-all}" "${files[@]}" \
	--ctx-lens "${LENS:-4096,8192}" --depths "${DEPTHS:-0,0.25,0.5,0.75,1}" \
	--samples "${SAMPLES:-2}" --seed "${SEED:-1}" \
	--policies "${POLICIES:-all}" --budgets "${BUDGETS:-1,0.25,0.125,0.0625,0.03125}" \
	--grid "${GRID:-tiered}" --json "$out/retrieval.json" --plot "$out/retrieval.svg" \
	"${threads[@]}" ${EXTRA:-} >"$out/retrieval.md" 2> >(tee "$out/retrieval.log" >&2)
echo "eval_retrieval.sh: $out/retrieval.md, retrieval.json, retrieval.svg" >&2
