#!/bin/bash
# cli_families.sh - every model family end to end on small generated files
# (gen-model's test-* shapes: kjv-2048's vocabulary, dim 256, windows of 16
# tokens, gemma2's attention soft-cap at 4 so that random logits reach it,
# phi3's LongRoPE original context 32 so the 64-token chunk takes the long
# factors):
#   - against llama.cpp: tests/families/SHAPE.kld are llama-perplexity's
#     next-token distributions (--kl-divergence-base, -c 64 --chunks 1 on
#     eval/kjv/57_Phmn.txt) for the file gen-model writes from the same seed;
#     `tierkv eval --kl-base` must agree within KL 1e-3 nats and top-1 100%
#     on its 31 positions, and llama.cpp's distributions must be peaked (mean
#     entropy below half of ln(vocab)). llama.cpp ignores
#     llama.attention.sliding_window, so test-mistral (every layer sliding)
#     has no base: its masking is test_kv_attn's and gemma2/3's above.
#   - mixture of experts (test-qwen3moe: 16 experts, 4 a token;
#     test-mixtral: llama with 8 experts, 2 a token) the same way, and again
#     decoding one token a call (-b 1: only the selected experts' rows run),
#     and files with a bad stack of experts (a wrong expert count in a 3-D
#     tensor's shape, a missing stack, more experts used than there are) are
#     refused with a message that names the tensor or the key, not a crash.
#   - the cache meets the window: after any number of tokens a sliding
#     layer's streams hold exactly window - 1 slots (what the next token
#     sees) and the global layers every token; --kv-stats counts that.
# Regenerate the bases (after a change to gen-model's test shapes):
#   for s in test-llama3 test-qwen2 test-qwen3 test-gemma2 test-gemma3 test-phi3 test-qwen3moe test-mixtral; do
#     tierkv gen-model --shape $s --type f16 --vocab models/kjv-2048.gguf -o /tmp/$s.gguf
#     llama-perplexity -m /tmp/$s.gguf -f eval/kjv/57_Phmn.txt -c 64 -b 64 --chunks 1 \
#       --kl-divergence-base tests/families/$s.kld; done
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib_cli.sh"
vocab=${TIERKV_BUNDLED:?}/kjv-2048.gguf
text=$here/../eval/kjv/57_Phmn.txt

against_llamacpp() { # SHAPE MODEL [EVAL OPTIONS]: KL and top-1 against tests/families/SHAPE.kld
	local s=$1 m=$2
	shift 2
	rm -f "$tmp/$s.json"
	expect 0 "" eval --kl-base "$here/families/$s.kld" -m "$m" -t 2 --json "$tmp/$s.json" "$@"
	[ -s "$tmp/$s.json" ] || { bad "$s $*: no result"; return; }
	if python3 - "$tmp/$s.json" <<'PY'; then ok; else bad "$s $*: $(cat "$tmp/$s.json")"; fi
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if r["positions"] == 31 and r["kl"] <= 1e-3 and r["top1"] == 1.0 and
         r["entropy_base"] < r["half_ln_vocab"] else 1)
PY
}
for s in test-llama3 test-qwen2 test-qwen3 test-gemma2 test-gemma3 test-phi3 test-qwen3moe test-mixtral; do
	m=$tmp/$s.gguf
	expect 0 "" gen-model --shape "$s" --type f16 --vocab "$vocab" -o "$m" -t 2
	against_llamacpp "$s" "$m"
	case $s in *moe|*mixtral) against_llamacpp "$s" "$m" -b 1 ;; esac
done

# bad stacks of experts: refused at load with the tensor or key named
patch_moe() { # IN OUT WHAT: a copy of IN with one thing broken
	python3 - "$@" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
def at(key):  # the byte after a GGUF string (u64 length, bytes) holding key
    k = key.encode()
    i = b.find(struct.pack("<Q", len(k)) + k)
    assert i > 0, key
    return i + 8 + len(k)
what = sys.argv[3]
if what == "count":    # the stack holds 15 experts, not 16: n_dims u32, then ne[0..2]
    i = at("blk.1.ffn_up_exps.weight")
    assert struct.unpack_from("<I", b, i)[0] == 3
    struct.pack_into("<Q", b, i + 4 + 16, 15)
elif what == "missing":  # ffn_gate_exps renamed
    i = at("blk.0.ffn_gate_exps.weight")
    b[i - len(".weight") - 1] = ord("z")
elif what == "used":   # 17 of 16 experts a token: type u32, then the value
    i = at("qwen3moe.expert_used_count")
    struct.pack_into("<I", b, i + 4, 17)
open(sys.argv[2], "wb").write(b)
PY
}
good=$tmp/test-qwen3moe.gguf
for what in count missing used; do
	patch_moe "$good" "$tmp/bad.gguf" "$what" || { bad "patch $what"; continue; }
	case $what in
	count) pat="blk.1.ffn_up_exps.weight' has shape \[256, 256, 15, 1\], expected \[256, 256, 16\]" ;;
	missing) pat="missing tensor 'blk.0.ffn_gate_exps.weight'" ;;
	used) pat="16 experts, 17 used per token" ;;
	esac
	expect 1 "$pat" run -m "$tmp/bad.gguf" -p "In the beginning" -n 1 -t 2
done

# a base from another model is refused, not scored
expect 1 "tokens per distribution" eval --kl-base "$here/families/test-qwen2.kld" -m "$model" -t 2

# windows: K+V bytes after generating, each stream's slots (256 bytes of f16 K+V per slot)
kv_slots() { # MODEL TOKENS: K+V bytes / 256 after a prompt and TOKENS generated tokens
	"$bin" run -m "$1" -f "$text" -c 1024 -n "$2" --temp 0 -t 2 --kv-stats >/dev/null 2>"$tmp/err" ||
		{ echo "run failed: $(head -c 300 "$tmp/err")" >&2; return 1; }
	sed -n 's/.*KV cache: .* K+V for \([0-9]*\) tokens.*/\1/p' "$tmp/err" >"$tmp/n"
	sed -n 's/.*hot *\([0-9]*\) slots.*/\1/p' "$tmp/err"
}
head -c 2000 "$text" >"$tmp/p.txt"
text=$tmp/p.txt
for s in test-mistral test-gemma3; do
	m=$tmp/$s.gguf
	[ -s "$m" ] || expect 0 "" gen-model --shape "$s" --type f16 --vocab "$vocab" -o "$m" -t 2
	for gen in 1 40; do
		slots=$(kv_slots "$m" "$gen") || { bad "$s: run"; continue; }
		n=$(cat "$tmp/n")
		# test-mistral: 2 sliding layers x 2 KV heads; test-gemma3: 5 sliding layers and
		# one global one of 1 KV head
		case $s in
		test-mistral) want=$((2 * 2 * 15)) ;;
		test-gemma3) want=$((5 * 15 + n)) ;;
		esac
		[ "$slots" = "$want" ] && ok || bad "$s after $n tokens: $slots slots, want $want"
		grep -q "a full f16 cache: .*ratio 1.000" "$tmp/err" && ok || bad "$s: $(grep 'full f16' "$tmp/err")"
	done
done

echo "cli_families: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
