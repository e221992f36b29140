#!/bin/bash
# Decode speed and KV memory at long context depths: tierkv's policies next to
# llama.cpp's llama-bench with flash attention and its f16, q8_0 and q4_0
# caches, on the same generated TinyLlama-1.1B-shape Q4_0 file and threads.
# Not run by CI: it needs a llama-bench binary (see compare_llamacpp.sh for
# how to build one) and takes long: every llama-bench repetition refills its
# cache to the depth, tierkv fills once per policy and runs on copies.
#
#   scripts/compare_longctx.sh [LLAMA_BENCH]
#
# Environment: TIERKV (default build/tierkv), THREADS (2), REPS (2), NGEN (32),
# DEPTHS ("4096"), CACHES (llama.cpp cache types, "f16 q8_0 q4_0"), POLICIES
# (tierkv, "full,tiered"), BUDGETS (tierkv per-sequence K+V caps as fractions
# of the f16 cache, "1,0.25"), TYPE (weights, q4_0), MODELS (/tmp/tierkv-models),
# VOCAB, OUT (JSON lines of every run, /tmp/tierkv-longctx), KVOPTS (extra
# tierkv --kv-* options), BUDGET_AT (budgets as fractions of the f16 cache at
# this many tokens, the same bytes at every depth; default: each depth's own).
# Each row also gives its rate as a share of the same cache's rate at depth 0
# when DEPTHS includes 0.
set -eu
cd "$(dirname "$0")/.."
llama_bench=${1:-../llamacpp/build/bin/llama-bench}
tierkv=${TIERKV:-build/tierkv}
threads=${THREADS:-2}
reps=${REPS:-2}
ngen=${NGEN:-32}
depths=${DEPTHS:-4096}
caches=${CACHES:-f16 q8_0 q4_0}
policies=${POLICIES:-full,tiered}
budgets=${BUDGETS:-1,0.25}
type=${TYPE:-q4_0}
models=${MODELS:-/tmp/tierkv-models}
vocab=${VOCAB:-../shared/vocab/ggml-vocab-llama-spm.gguf}
out=${OUT:-/tmp/tierkv-longctx}
kvopts=${KVOPTS:-}
budget_at=${BUDGET_AT:+--budget-at $BUDGET_AT}

for f in "$llama_bench" "$tierkv"; do
	[ -x "$f" ] || { echo "compare_longctx: $f is not an executable" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "compare_longctx: python3 is needed for the table" >&2; exit 2; }
mkdir -p "$models" "$out"
rm -f "$out"/*.jsonl
f=$models/tinyllama-1.1b-$type.gguf
[ -s "$f" ] || "$tierkv" gen-model --shape tinyllama-1.1b --type "$type" --vocab "$vocab" -o "$f"
dlist=$(echo $depths | tr ' ' ',')

# one depth at a time, llama.cpp then tierkv, so both see the same machine
for d in $depths; do
	for c in $caches; do
		echo "d$d: llama-bench, $c cache" >&2
		"$llama_bench" -m "$f" -p 0 -n "$ngen" -d "$d" -t "$threads" -r "$reps" -fa 1 -ctk "$c" -ctv "$c" \
			-o jsonl >>"$out/llama.jsonl"
	done
	echo "d$d: tierkv bench, $policies at $budgets" >&2
	# shellcheck disable=SC2086
	"$tierkv" bench -m "$f" -p 0 -n "$ngen" -d "$d" -t "$threads" -r "$reps" --policies "$policies" \
		--budgets "$budgets" $budget_at $kvopts -o json >>"$out/tierkv.jsonl"
done

python3 - "$out" "$f" <<'EOF'
import json, sys, collections
out, model = sys.argv[1], sys.argv[2]
# llama.cpp's cache bytes per token: 2 (K, V) x layers x KV width x bytes per
# element of the cache type (q8_0: 34 bytes per 32, q4_0: 18 per 32).
BPE = {'f16': 2.0, 'q8_0': 34 / 32, 'q4_0': 18 / 32}
tk = [json.loads(l) for l in open(out + '/tierkv.jsonl') if l.startswith('{')]
ll = [json.loads(l) for l in open(out + '/llama.jsonl') if l.startswith('{')]
# TinyLlama-1.1B: 22 layers, 4 KV heads of 64
width = 22 * 256
rows = collections.OrderedDict()
for r in ll:
    d, c = r['n_depth'], r['type_k']
    kv = 2 * width * BPE.get(c, 2.0) * (d + r['n_gen'] / 2)
    rows[(d, 'llama.cpp ' + c + ' cache')] = (r['avg_ts'], r['stddev_ts'], kv, kv)
for r in tk:
    d = r['n_depth']
    at = r.get('kv_budget_at', 0)
    name = 'tierkv %s' % r['kv_policy'] + ('' if r['kv_budget'] >= 1 else
                                          ' at %g' % r['kv_budget'] + (' of %d tokens' % at if at else ''))
    rows[(d, name)] = (r['avg_ts'], r['stddev_ts'], r['kv_bytes'], r['kv_allocated'])
print('| depth | cache | t/s | of depth 0 | vs llama.cpp f16 | vs llama.cpp q4_0 | K+V bytes | of llama.cpp f16 | allocated | of llama.cpp f16 |')
print('| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
for (d, name), (ts, sd, kv, alloc) in rows.items():
    f16 = rows.get((d, 'llama.cpp f16 cache'))
    q4 = rows.get((d, 'llama.cpp q4_0 cache'))
    ratio = lambda ref: '%.2fx' % (ts / ref[0]) if ref else ''
    frac = lambda b: '%.1f%%' % (100 * b / f16[2]) if f16 else ''
    d0 = rows.get((0, name))
    of0 = '%.0f%%' % (100 * ts / d0[0]) if d0 and d else ''
    print('| %d | %s | %.2f ± %.2f | %s | %s | %s | %.1f MB | %s | %.1f MB | %s |' % (
        d, name, ts, sd, of0, ratio(f16), ratio(q4), kv / 1e6, frac(kv), alloc / 1e6, frac(alloc)))
print('\nllama.cpp cache bytes are computed (2 x 22 layers x 256 x bytes per element x tokens); '
      "tierkv's are measured: K+V data, and all pool bytes (page metadata and slack included).")
EOF
