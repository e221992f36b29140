#!/bin/bash
# Prefill and decode speed of tierkv next to llama.cpp's llama-bench, on the
# same generated TinyLlama-1.1B-shape files (Q4_0 and Q8_0), the same thread
# count and the same tests (pp512, tg128, and tg128 at each extra depth).
# Not run by CI: it needs a llama-bench binary and takes minutes.
#
#   scripts/compare_llamacpp.sh [LLAMA_BENCH]
#
# LLAMA_BENCH defaults to ../llamacpp/build/bin/llama-bench. Building it (from
# the npm package node-llama-cpp, which carries llama.cpp as a git bundle):
#   npm pack node-llama-cpp@3.21.1 && tar xzf node-llama-cpp-3.21.1.tgz
#   git clone package/llama/gitRelease.bundle ../llamacpp && cd ../llamacpp
#   cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF
#   cmake --build build --target llama-bench -j
#
# Environment: TIERKV (default build/tierkv), THREADS (2), REPS (5), ROUNDS (1:
# each round runs llama.cpp then tierkv on every file; the table shows the mean
# of the rounds), DEPTHS (extra decode depths, default "512"), TYPES ("q4_0
# q8_0"), MODELS (where the generated files go, default /tmp/tierkv-models),
# VOCAB (default ../shared/vocab/ggml-vocab-llama-spm.gguf), OUT (JSON lines
# of every run, default /tmp/tierkv-compare).
set -eu
cd "$(dirname "$0")/.."
llama_bench=${1:-../llamacpp/build/bin/llama-bench}
tierkv=${TIERKV:-build/tierkv}
threads=${THREADS:-2}
reps=${REPS:-5}
rounds=${ROUNDS:-1}
depths=${DEPTHS:-512}
types=${TYPES:-q4_0 q8_0}
models=${MODELS:-/tmp/tierkv-models}
vocab=${VOCAB:-../shared/vocab/ggml-vocab-llama-spm.gguf}
out=${OUT:-/tmp/tierkv-compare}

for f in "$llama_bench" "$tierkv"; do
	[ -x "$f" ] || { echo "compare_llamacpp: $f is not an executable (see the top of this script)" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "compare_llamacpp: python3 is needed for the table" >&2; exit 2; }
mkdir -p "$models" "$out"
rm -f "$out"/*.jsonl
dlist=0
for d in $depths; do dlist="$dlist,$d"; done

for t in $types; do
	f=$models/tinyllama-1.1b-$t.gguf
	[ -s "$f" ] || "$tierkv" gen-model --shape tinyllama-1.1b --type "$t" --vocab "$vocab" -o "$f"
done
for r in $(seq "$rounds"); do
	for t in $types; do
		f=$models/tinyllama-1.1b-$t.gguf
		echo "round $r: $t: llama-bench" >&2
		"$llama_bench" -m "$f" -p 512 -n 0 -t "$threads" -r "$reps" -o jsonl >>"$out/llama-$t.jsonl"
		"$llama_bench" -m "$f" -p 0 -n 128 -d "$dlist" -t "$threads" -r "$reps" -o jsonl >>"$out/llama-$t.jsonl"
		echo "round $r: $t: tierkv bench" >&2
		"$tierkv" bench -m "$f" -p 512 -n 0 -t "$threads" -r "$reps" -o json >>"$out/tierkv-$t.jsonl"
		"$tierkv" bench -m "$f" -p 0 -n 128 -d "$dlist" -t "$threads" -r "$reps" -o json >>"$out/tierkv-$t.jsonl"
	done
done

python3 - "$out" $types <<'EOF'
import json, sys, collections
out, types = sys.argv[1], sys.argv[2:]

# Per test: the mean of the runs' mean rates (what llama-bench prints), and
# the best single repetition (the least disturbed by other processes).
def load(path):
    mean, best, frac, limit, bw = (collections.defaultdict(list) for _ in range(5))
    for line in open(path):
        line = line.strip()
        if not line.startswith('{'):
            continue
        r = json.loads(line)
        test = ('pp%d' % r['n_prompt']) if r['n_prompt'] else ('tg%d' % r['n_gen'])
        if r.get('n_depth'):
            test += ' @ d%d' % r['n_depth']
        mean[test].append(r['avg_ts'])
        best[test].append(max(r['samples_ts']))
        if 'frac_of_limit' in r:
            frac[test].append(r['frac_of_limit'])
            limit[test].append(r['limit_ts'])
            bw[test].append(r['mem_bw_gbs'])
    return mean, best, frac, limit, bw

avg = lambda v: sum(v) / len(v)
print('| model | test | llama.cpp t/s | tierkv t/s | tierkv / llama.cpp | best run: llama.cpp / tierkv | tierkv of BW limit | llama.cpp of BW limit |')
print('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |')
bws = []
for t in types:
    lm, lb, _, _, _ = load('%s/llama-%s.jsonl' % (out, t))
    tm, tb, fr, li, bw = load('%s/tierkv-%s.jsonl' % (out, t))
    for test in tm:
        l = avg(lm[test]) if lm.get(test) else float('nan')
        k = avg(tm[test])
        fk = fl = ''
        if fr.get(test):
            fk = '%.0f%%' % (100 * avg(fr[test]))
            fl = '%.0f%%' % (100 * l / avg(li[test])) if l == l else ''
            bws += bw[test]
        print('| TinyLlama-1.1B %s | %s | %.2f | %.2f | %.2fx | %.2f / %.2f | %s | %s |' % (
            t.upper(), test, l, k, k / l, max(lb[test]) if lb.get(test) else float('nan'), max(tb[test]), fk, fl))
if bws:
    print('\nmemory bandwidth reading the weights (tierkv bench, before each decode run): %.1f-%.1f GB/s' % (min(bws), max(bws)))
EOF
