#!/bin/bash
# Prefill and decode speed of tierkv next to llama.cpp's llama-bench on the
# same files, in one run: for each weight type, pp512 and tg128 of both
# engines one after the other (llama.cpp first in odd rounds, tierkv first in
# even ones, so that the machine's moods hit both), tierkv's prefill once more
# with the AVX2 kernels forced (TIERKV_KERNELS=avx2), and decode as a fraction
# of the memory-bandwidth limit (tierkv bench measures the bandwidth reading
# the model's own matrices before every decode run; the limit is that over
# the bytes a token reads, and llama.cpp's rate is set against the same).
# With several rounds the table gives the mean of the rounds and, in
# brackets, each round's own ratio.
# Not run by CI: it needs llama.cpp's binaries and takes minutes.
#
#   scripts/compare_llamacpp.sh [LLAMA_BIN_DIR]
#
# LLAMA_BIN_DIR (default ../llamacpp/build/bin) holds llama-bench and
# llama-quantize. The files are what users download: a generated f16 model
# of the shape (random weights, tierkv gen-model) quantized by llama.cpp's
# llama-quantize to each type.
#
# Environment: TIERKV (default build/tierkv), SHAPE (tinyllama-1.1b; or any
# gen-model shape: llama2-7b, llama3-8b, qwen2.5-1.5b, gemma3-1b, ...), TYPES
# ("Q4_K_M Q5_K_M Q6_K Q8_0 Q4_0", llama-quantize names), LLAMA_ARGS (extra
# llama-bench options, e.g. "--poll 0": its threads then sleep between tasks instead of spinning, which on a machine
# with more busy threads than cores keeps a descheduled thread from stalling
# every barrier), LLAMA_WAIT (the OpenMP wait
# policies llama-bench runs under, default "active passive": each test runs
# once under each, and the table takes llama.cpp's faster. Spinning threads
# win on a quiet machine - passive cost it a third of its decode rate on a
# quiet 2-core AVX2 VM, 21.9 against 34.3 t/s on Q4_0 - while on a machine
# with more busy threads than cores spinning lost: 0.28-0.78 t/s against 17
# passive on Q4_K_M), THREADS (2), REPS (3), ROUNDS (1), PP (512), TG (128), AVX2 (1: also
# tierkv's prefill with AVX2 forced; 0: not), LLAMA_AVX2_BIN (a directory with
# the llama-bench of a second llama.cpp build without AVX-512, e.g. cmake
# -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
# -DGGML_AVX512=OFF: its prefill runs right before tierkv's AVX2-forced one,
# and the table gets the AVX2-against-AVX2 ratio too), MODELS (default
# /tmp/tierkv-models), VOCAB (default: the shape's family's in ../shared/vocab -
# qwen2 for qwen* and phi4*, gemma-4 for gemma*, phi-3 for phi3*, llama-bpe for
# llama3*, llama-spm otherwise),
# OUT (JSON lines of every run, default /tmp/tierkv-compare).
set -eu
cd "$(dirname "$0")/.."
bin=${1:-../llamacpp/build/bin}
tierkv=${TIERKV:-build/tierkv}
shape=${SHAPE:-tinyllama-1.1b}
types=${TYPES:-Q4_K_M Q5_K_M Q6_K Q8_0 Q4_0}
threads=${THREADS:-2}
reps=${REPS:-3}
rounds=${ROUNDS:-1}
pp=${PP:-512}
tg=${TG:-128}
avx2=${AVX2:-1}
models=${MODELS:-/tmp/tierkv-models}
case $shape in
qwen* | phi4*) voc=qwen2 ;;
gemma*) voc=gemma-4 ;;
phi3*) voc=phi-3 ;;
llama3*) voc=llama-bpe ;;
*) voc=llama-spm ;;
esac
vocab=${VOCAB:-../shared/vocab/ggml-vocab-$voc.gguf}
out=${OUT:-/tmp/tierkv-compare}

for f in "$bin/llama-bench" "$bin/llama-quantize" "$tierkv" ${LLAMA_AVX2_BIN:+"$LLAMA_AVX2_BIN/llama-bench"}; do
	[ -x "$f" ] || { echo "compare_llamacpp: $f is not an executable (see the top of this script)" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "compare_llamacpp: python3 is needed for the table" >&2; exit 2; }
mkdir -p "$models" "$out"
rm -f "$out"/*.jsonl

f16=$models/$shape-f16.gguf
[ -s "$f16" ] || "$tierkv" gen-model --shape "$shape" --type f16 --vocab "$vocab" -t "$threads" -o "$f16"
for t in $types; do
	f=$models/$shape-$t.gguf
	[ -s "$f" ] || "$bin/llama-quantize" "$f16" "$f" "$t" "$threads" >"$out/quantize-$t.log" 2>&1 ||
		{ echo "compare_llamacpp: llama-quantize $t failed (see $out/quantize-$t.log)" >&2; exit 1; }
done

llama() { # file type test-args [bin-dir]: one run per wait policy, each in its own file
	for w in ${LLAMA_WAIT:-active passive}; do
		OMP_WAIT_POLICY=$w "${4:-$bin}/llama-bench" -m "$1" $3 ${LLAMA_ARGS:-} -t "$threads" -r "$reps" \
			-o jsonl >>"$out/llama-$2.$w.jsonl"
	done
}
tkv() { # file type test-args [kernels]
	TIERKV_KERNELS=${4:-auto} "$tierkv" bench -m "$1" $3 -t "$threads" -r "$reps" -o json \
		>>"$out/tierkv${4:+-$4}-$2.jsonl"
}
for r in $(seq "$rounds"); do
	for t in $types; do
		f=$models/$shape-$t.gguf
		for test in "-p $pp -n 0" "-p 0 -n $tg"; do
			echo "round $r: $t: $test" >&2
			if [ $((r % 2)) = 1 ]; then
				llama "$f" "$t" "$test"
				tkv "$f" "$t" "$test"
			else
				tkv "$f" "$t" "$test"
				llama "$f" "$t" "$test"
			fi
		done
		if [ "$avx2" = 1 ]; then
			if [ -n "${LLAMA_AVX2_BIN:-}" ]; then
				llama "$f" "$t-avx2" "-p $pp -n 0" "$LLAMA_AVX2_BIN"
			fi
			tkv "$f" "$t" "-p $pp -n 0" avx2
		fi
	done
done

python3 - "$out" "$shape" "$pp" "$tg" "${LLAMA_AVX2_BIN:+1}" "${LLAMA_WAIT:-active passive}" $types <<'EOF'
import json, os, sys, collections
out, shape, pp, tg, l2, waits, types = (sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == '1',
                                        sys.argv[6].split(), sys.argv[7:])
won = collections.Counter()

def load(path):
    """test -> list of mean rates (one per round), and decode limit data"""
    rate, limit, frac, bw, kern = (collections.defaultdict(list) for _ in range(5))
    if not os.path.exists(path):
        return rate, limit, frac, bw, kern
    for line in open(path):
        line = line.strip()
        if not line.startswith('{'):
            continue
        r = json.loads(line)
        test = ('pp%d' % r['n_prompt']) if r['n_prompt'] else ('tg%d' % r['n_gen'])
        rate[test].append(r['avg_ts'])
        if 'frac_of_limit' in r:
            limit[test].append(r['limit_ts'])
            frac[test].append(r['frac_of_limit'])
            bw[test].append(r['mem_bw_gbs'])
        if 'kernels' in r:
            kern[test].append(r['kernels'])
    return rate, limit, frac, bw, kern

def load_llama(stem):
    """llama.cpp's rates per test and round: the faster of its wait policies"""
    runs = {w: load('%s.%s.jsonl' % (stem, w))[0] for w in waits}
    rate = collections.defaultdict(list)
    for test in set().union(*[r.keys() for r in runs.values()]):
        for i in range(max(len(r[test]) for r in runs.values())):
            best = max((r[test][i], w) for w, r in runs.items() if i < len(r[test]))
            rate[test].append(best[0])
            won[best[1]] += 1
    return rate

avg = lambda v: sum(v) / len(v) if v else float('nan')
fmt = lambda v, f='%.2f': (f % v) if v == v else '-'
def ratio(a, b):
    """mean of a over mean of b, and each round's own ratio when there are several"""
    r = fmt(avg(a) / avg(b), '%.2fx')
    if len(a) > 1 and len(a) == len(b):
        r += ' (' + ' / '.join('%.2f' % (x / y) for x, y in zip(a, b)) + ')'
    return r
pt, tt = 'pp' + pp, 'tg' + tg
print('| %s | llama.cpp %s | tierkv %s | ratio | tierkv of limit | llama.cpp of limit '
      '| llama.cpp %s | tierkv %s | ratio | tierkv %s, AVX2 forced | ratio |%s' % (
          shape, tt, tt, pt, pt, pt, ' llama.cpp %s, AVX2 build | AVX2 against AVX2 |' % pt if l2 else ''))
print('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |' + (' ---: | ---: |' if l2 else ''))
bws, kerns = [], set()
for t in types:
    lr = load_llama('%s/llama-%s' % (out, t))
    kr, kl, kf, kb, kk = load('%s/tierkv-%s.jsonl' % (out, t))
    ar = load('%s/tierkv-avx2-%s.jsonl' % (out, t))[0]
    l2r = load_llama('%s/llama-%s-avx2' % (out, t))
    bws += kb[tt]
    for v in kk.values():
        kerns.update(v)
    ltg, ktg, lpp, kpp, apl = avg(lr[tt]), avg(kr[tt]), avg(lr[pt]), avg(kr[pt]), avg(ar[pt])
    lim = avg(kl[tt])
    print('| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |%s' % (
        t, fmt(ltg), fmt(ktg), ratio(kr[tt], lr[tt]), fmt(100 * avg(kf[tt]), '%.0f%%'),
        fmt(100 * ltg / lim, '%.0f%%'), fmt(lpp), fmt(kpp), ratio(kr[pt], lr[pt]), fmt(apl),
        ratio(ar[pt], lr[pt]), ' %s | %s |' % (fmt(avg(l2r[pt])), ratio(ar[pt], l2r[pt])) if l2 else ''))
if bws:
    print('\ntierkv kernels %s; memory bandwidth reading the weights, measured before each decode run: '
          '%.1f-%.1f GB/s; limit = that bandwidth / bytes read per token (weights + K+V)' % (
              ', '.join(sorted(kerns)), min(bws), max(bws)))
print('llama.cpp: the faster of OpenMP wait policies %s for each test and round (%s)' % (
    ' and '.join(waits), ', '.join('%s faster in %d' % (w, won[w]) for w in waits)))
EOF
