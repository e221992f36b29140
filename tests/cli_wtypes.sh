#!/bin/bash
# cli_wtypes.sh - every weight type end to end: `tierkv gen-model` writes a
# 2-layer model of kjv-2048's shape (rows of whole 256-blocks, so every 2-D
# tensor gets the type) with tierkv's own quantizer; inspect shows the type on
# all 16 matrices; `tierkv eval` gives the same perplexity with the selected
# kernels (AVX2 where the CPU has it) as with the scalar references
# (TIERKV_KERNELS=ref) within float rounding; `tierkv run` generates. Then a
# type tierkv does not compute (a q3_k file with one tensor relabelled iq3_s,
# the same block bytes) is refused naming the tensor.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib_cli.sh"
vocab=${TIERKV_BUNDLED:?}/kjv-2048.gguf
text=$here/../eval/kjv/57_Phmn.txt
# relative perplexity difference allowed between the kernel sets: the weight
# dots' integer parts are equal, but the float sums round in another order and
# attention's vectorized exp differs from expf; on this near-uniform random
# model that moves perplexity by up to 6e-4 (as much as prefilling 64 tokens
# instead of 256 does). A wrong bit in a dot kernel moves it by far more.
tol=2e-3

ppl() { # MODEL [ENV...]: the full cache's perplexity over 256 tokens
	local m=$1
	shift
	env "$@" "$bin" eval -m "$m" -f "$text" --policies full --budgets 1 --gen 0 -c 256 -t 2 \
		--json "$tmp/e.json" >/dev/null 2>"$tmp/err" || { echo "eval failed: $(head -c 300 "$tmp/err")" >&2; return 1; }
	sed -n 's/.*"ppl":\([0-9.e+-]*\).*/\1/p' "$tmp/e.json" | head -1
}

for t in q2_k q3_k q4_0 q4_1 q4_k q5_0 q5_1 q5_k q6_k q8_0 iq4_nl iq4_xs; do
	m=$tmp/$t.gguf
	expect 0 "" gen-model --shape kjv-2048 --layers 2 --type "$t" --vocab "$vocab" -o "$m" -t 2 --seed 7
	[ -s "$m" ] || continue
	n=$("$bin" inspect -m "$m" | awk -v t="$t" '$2 ~ /weight$/ && $3 == t' | wc -l)
	[ "$n" -eq 16 ] && ok || bad "$t: $n of 16 matrices have the type"
	a=$(ppl "$m") && b=$(ppl "$m" TIERKV_KERNELS=ref) || { bad "$t: eval"; continue; }
	if awk -v a="$a" -v b="$b" -v t="$tol" 'BEGIN { d = (a - b) / b; exit !(a > 1 && d < t && d > -t) }'; then
		ok
	else
		bad "$t: perplexity $a with the selected kernels, $b with the references"
	fi
	expect 0 "" run -m "$m" -p "And the LORD" -n 16 --temp 0 -t 2
done

# a type without kernels: relabel blk.0.attn_q.weight of the q3_k file as
# iq3_s (GGUF type 21: blocks of 256 in 110 bytes, as q3_k), so the file stays
# valid and only the loader refuses it
m=$tmp/q3_k.gguf
name=blk.0.attn_q.weight
off=$(grep -boa "$name" "$m" | head -1 | cut -d: -f1)
if [ -n "$off" ]; then
	# after the name: u32 n_dims, 2 x u64 dims, then the u32 type
	printf '\x15\x00\x00\x00' | dd of="$m" bs=1 seek=$((off + ${#name} + 4 + 16)) conv=notrunc status=none
	expect 1 "tensor '$name': unsupported tensor type iq3_s" run -m "$m" -p "x" -n 1
else
	bad "no $name in $m"
fi

echo "cli_wtypes: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
