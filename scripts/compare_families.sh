#!/bin/bash
# Each model family against llama.cpp on the same generated file: for every
# family shape, `tierkv gen-model` writes an f16 file (LAYERS layers) and
# llama-quantize a Q4_K_M one from it; on each, llama-perplexity saves its
# next-token distributions over CHUNKS chunks of CTX tokens of a fixed text
# (--kl-divergence-base) and `tierkv eval --kl-base` scores tierkv's against
# them: mean KL(llama.cpp || tierkv), top-1 agreement, both mean entropies.
# A row passes at KL <= 1e-3 nats and top-1 >= 99% over >= 512 positions,
# with llama.cpp's mean entropy below half of ln(vocab) (peaked
# distributions: near-uniform ones would hide differences). The floor column
# is llama.cpp against itself: the same file with flash attention off (-fa
# off; the base is written with it on), a change of float rounding only -
# on quantized files the 8-bit activations turn such rounding differences
# into whole quantization steps, which random layers amplify, so that column
# is the noise no engine that rounds differently can go below. Not run by CI:
# it needs llama.cpp's binaries (see scripts/compare_llamacpp.sh to build
# them) and takes minutes.
#
#   scripts/compare_families.sh [SHAPE ...]
#
# SHAPE is a gen-model shape (default: one per family, below; the
# mixture-of-experts shapes qwen3-30b-a3b, 6.1 GB of f16 at 4 layers, and
# mixtral-mini among them). Environment:
# LLAMACPP (the bin directory, default ../llamacpp/build/bin), TIERKV
# (build/tierkv), FLOOR (1: the llama.cpp -fa off run; 0: not), BATCHES (tierkv's -b for each run, default "64 1": batched
# prefill and one token a call), THREADS (2), LAYERS (4), CTX (1026: 512 scored positions,
# Gemma-3-1B's 512-token window slides), CHUNKS (1), VOCABS (../shared/vocab), OUT (files and
# results, default /tmp/tierkv-families). The text is eval/kjv/*.txt (Ruth,
# Jonah, Philemon, Jude), the same for every family.
set -eu
cd "$(dirname "$0")/.."
llamacpp=${LLAMACPP:-../llamacpp/build/bin}
tierkv=${TIERKV:-build/tierkv}
threads=${THREADS:-2}
batches=${BATCHES:-64 1}
layers=${LAYERS:-4}
ctx=${CTX:-1026}
chunks=${CHUNKS:-1}
vocabs=${VOCABS:-../shared/vocab}
out=${OUT:-/tmp/tierkv-families}

# shape:vocabulary (the shapes' own, or the nearest in ../shared/vocab: see docs/architecture.md)
all="qwen2.5-0.5b:qwen2 qwen3-0.6b:qwen2 gemma2-2b:gemma-4 gemma3-1b:gemma-4 phi3-mini:phi-3
phi4-mini:qwen2 mistral-7b:llama-spm llama3.2-1b:llama-bpe qwen3-30b-a3b:qwen2 mixtral-mini:llama-spm"
if [ $# -gt 0 ]; then
	want=" $* "
	list=""
	for sv in $all; do
		case "$want" in *" ${sv%%:*} "*) list="$list $sv" ;; esac
	done
	[ -n "$list" ] || { echo "compare_families: no known shape in: $*" >&2; exit 2; }
else
	list=$all
fi
for f in "$llamacpp/llama-perplexity" "$llamacpp/llama-quantize" "$tierkv"; do
	[ -x "$f" ] || { echo "compare_families: $f is not an executable" >&2; exit 2; }
done
mkdir -p "$out"
text=$out/text.txt
cat eval/kjv/*.txt > "$text"

printf '| family | shape | weights | tierkv -b | positions | mean KL (nats) | max KL | top-1 %% | floor: llama.cpp -fa off, KL / top-1 %% | entropy llama.cpp | entropy tierkv | ln(vocab)/2 | ppl llama.cpp | ppl tierkv | result |\n' > "$out/table.md"
printf '|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n' >> "$out/table.md"
fail=0
for sv in $list; do
	shape=${sv%%:*}
	voc=$vocabs/ggml-vocab-${sv#*:}.gguf
	f16=$out/$shape-L$layers-f16.gguf
	q4=$out/$shape-L$layers-q4_k_m.gguf
	[ -s "$f16" ] || "$tierkv" gen-model --shape "$shape" --layers "$layers" --type f16 --vocab "$voc" -o "$f16" -t "$threads"
	[ -s "$q4" ] || "$llamacpp/llama-quantize" "$f16" "$q4" Q4_K_M "$threads" > "$out/$shape-quantize.log" 2>&1
	for m in "$f16" "$q4"; do
		name=$(basename "$m" .gguf)
		base=$out/$name.kld
		"$llamacpp/llama-perplexity" -m "$m" -f "$text" -c "$ctx" -b "$ctx" --chunks "$chunks" -t "$threads" \
			-fa on --kl-divergence-base "$base" > "$out/$name-llamacpp.log" 2>&1 ||
			{ echo "compare_families: llama-perplexity failed on $m (see $out/$name-llamacpp.log)" >&2; exit 1; }
		ppl=$(sed -n 's/.*Final estimate: PPL = \([0-9.e+]*\).*/\1/p' "$out/$name-llamacpp.log" | tail -1)
		floor=-
		if [ "${FLOOR:-1}" = 1 ]; then
			"$llamacpp/llama-perplexity" -m "$m" -f "$text" -c "$ctx" -b "$ctx" --chunks "$chunks" -t "$threads" \
				-fa off --kl-divergence-base "$base" --kl-divergence > "$out/$name-llamacpp-faoff.log" 2>&1 ||
				{ echo "compare_families: llama-perplexity -fa off failed on $m (see $out/$name-llamacpp-faoff.log)" >&2; exit 1; }
			floor="$(sed -n 's/^Mean *KLD: *\([-0-9.e+]*\).*/\1/p' "$out/$name-llamacpp-faoff.log" | tail -1) / $(sed -n 's/^Same top p: *\([0-9.]*\).*/\1/p' "$out/$name-llamacpp-faoff.log" | tail -1)"
		fi
		for b in $batches; do
			"$tierkv" eval --kl-base "$base" -m "$m" -t "$threads" -b "$b" --json "$out/$name-b$b.json" \
				> "$out/$name-b$b-tierkv.md" 2> "$out/$name-b$b-tierkv.log" ||
				{ echo "compare_families: tierkv eval failed on $m (see $out/$name-b$b-tierkv.log)" >&2; exit 1; }
			python3 - "$out/$name-b$b.json" "$shape" "$name" "${ppl:--}" "$b" "$floor" >> "$out/table.md" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
arch = {"qwen2.5": "qwen2", "qwen3-30b": "qwen3moe", "mixtral": "llama (Mixtral experts)", "qwen3": "qwen3", "gemma2": "gemma2", "gemma3": "gemma3", "phi3": "phi3",
        "phi4": "phi3", "mistral": "llama (sliding window)", "llama3.2": "llama"}
fam = next(v for k, v in arch.items() if sys.argv[2].startswith(k))
w = "Q4_K_M" if sys.argv[3].endswith("q4_k_m") else "f16"
ok = r["kl"] <= 1e-3 and r["top1"] >= 0.99 and r["positions"] >= 512 and r["entropy_base"] < r["half_ln_vocab"]
print(f"| {fam} | {sys.argv[2]} | {w} | {sys.argv[5]} | {r['positions']} | {r['kl']:.6f} | {r['kl_max']:.5f} | "
      f"{100 * r['top1']:.2f} | {sys.argv[6]} | {r['entropy_base']:.3f} | {r['entropy']:.3f} | {r['half_ln_vocab']:.3f} | {sys.argv[4]} | "
      f"{r['ppl']:.4g} | {'pass' if ok else 'FAIL'} |")
sys.exit(0 if ok else 1)
PY
			tail -1 "$out/table.md"
		done
		rm -f "$base"
	done
done
cat "$out/table.md"
exit $fail
