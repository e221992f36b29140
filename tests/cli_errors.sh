#!/bin/bash
# The CLI's contract on bad input: a clear message on stderr and exit code 2
# for usage errors, 1 for runtime errors, never a crash (exit code >= 128).
. "$(dirname "$0")/lib_cli.sh"

# help and usage
for c in run inspect tokenize; do
	expect 0 "" $c --help
	expect 2 "unknown option" $c --bogus
done
expect 0 "" --help
expect 2 "unknown command" frobnicate
expect 2 "" 
expect 2 "needs a value" run -m
expect 2 "not an integer" run -m "$model" -n abc
expect 2 "out of range" run -m "$model" --top-p 2
expect 2 "out of range" run -m "$model" --kv-pool 65
expect 0 "" run -m "$model" -n 8 --temp 0 --kv-budget 2K --kv-pool 4
expect 2 "exceed 1" run -m "$model" --kv-warm 0.5 --kv-hot 0.6
expect 2 "exceed 1" eval -m "$model" -f "$model" --kv-hot 0.9
expect 0 "" run -m "$model" -n 4 --temp 0 --kv-hot 1 --kv-warm 0
expect 2 "out of range" run -m "$model" -t 0
expect 2 "not a size" run -m "$model" --kv-mem 12Q
expect 2 "not f16 or f32" run -m "$model" --kv-type q3
# layer plans: malformed, or not one entry per layer of the model (5)
expect 2 "entry 2: page tokens" run -m "$model" --kv-layer-plan 16,x
expect 2 "budget weight" run -m "$model" --kv-layer-plan 16:0,16,16,16,16
expect 2 "lists 3 layers; the model has 5" run -m "$model" -p a -n 1 --kv-layer-plan 16,16,8
expect 2 "the mix after 'auto:' must be in" run -m "$model" --kv-heads auto:3
expect 2 "weight 2 must be a number" run -m "$model" --kv-heads 1,0
expect 2 "lists 3 weights; the model has 5 layers" run -m "$model" -p a -n 1 --kv-heads 1,2,3
printf 'Once upon a time there was a cat.' >"$tmp/plan.txt"
expect 2 "lists 2 layers; the model has 5" eval -m "$model" "$tmp/plan.txt" --gen 0 --layer-plans 'auto;16,8'
expect 2 "layer-plans" eval -m "$model" "$tmp/plan.txt" --layer-plans 'auto;;'
expect 0 "" run -m "$model" -p a -n 40 --temp 0 --kv-layer-plan auto --kv-stats
expect 2 "not both" run -m "$model" -p a -f b
expect 2 "no text" tokenize -m "$model"
expect 2 "no model given" inspect

# runtime errors
expect 1 "cannot open|No such file" run -m "$tmp/missing.gguf" -n 4
expect 1 "cannot open" run -m "$model" -f "$tmp/missing.txt"
head -c 1000 "$model" >"$tmp/trunc.gguf"
expect 1 "trunc.gguf" run -m "$tmp/trunc.gguf" -n 4
expect 1 "trunc.gguf" inspect "$tmp/trunc.gguf"
expect 1 "trunc.gguf" tokenize -m "$tmp/trunc.gguf" -p hi
# a kernel level that does not exist stops before loading (util/cpu.h)
TIERKV_KERNELS=sse9 expect 1 "TIERKV_KERNELS=sse9: unknown kernel level" run -m "$model" -n 4
head -c 100000 /dev/urandom >"$tmp/noise.gguf"
expect 1 "noise.gguf" run -m "$tmp/noise.gguf" -n 4
printf 'GGUF\3\0\0\0' >"$tmp/short.gguf"
expect 1 "short.gguf" run -m "$tmp/short.gguf" -n 4
expect 1 "" run -m /dev/null -n 4
expect 1 "" run -m "$tmp" -n 4
# a prompt longer than the context
for i in $(seq 300); do printf 'Once upon a time '; done >"$tmp/long.txt"
expect 1 "context" run -m "$model" -f "$tmp/long.txt" -n 4
# a KV budget too small for the prompt
expect 1 "budget" run -m "$model" -p "Once upon a time" -n 8 --kv-mem 4K
# the full cache never evicts: a budget that runs out during generation stops
# it with a message, and the text so far is printed
expect 1 "budget" run -m "$model" --temp 0 -n 400 --kv-mem 64K --kv-policy full
if [ -s "$tmp/out" ]; then pass=$((pass + 1)); else echo "FAIL: no text before the budget ran out"; fail=$((fail + 1)); fi
# the tiered cache (the default) completes 511 tokens in half of what the full
# cache needs (about 450 KiB for 512 tokens of stories260K)
expect 0 "" run -m "$model" --temp 0 -n 511 --kv-mem 225K --ignore-eos --kv-stats
if grep -q "governor runs [1-9]" "$tmp/err"; then pass=$((pass + 1)); else echo "FAIL: the governor did not act: $(cat "$tmp/err")"; fail=$((fail + 1)); fi
# a budget that cannot hold one page per stream fails clearly; one that can
# hold a few shrinks the window and goes on (4-byte slot metadata: 8K holds
# 100 tokens; 2K cannot hold the first token's pages)
expect 1 "budget" run -m "$model" --temp 0 -n 100 --kv-mem 2K
expect 0 "" run -m "$model" --temp 0 -n 100 --kv-mem 24K
# a standard output that cannot be written (a full disk) is an error
if [ -w /dev/full ]; then
	if "$bin" run -m "$model" --temp 0 -n 20 >/dev/full 2>"$tmp/err" </dev/null; then
		bad "tierkv run >/dev/full: exit 0, want 1"
	elif grep -q "cannot write" "$tmp/err"; then ok; else bad "tierkv run >/dev/full: $(head -c 300 "$tmp/err")"; fi
fi

# success paths of the other commands
expect 0 "" tokenize -m "$model" -p "Hello world" --ids
if grep -qE '^\[1, [0-9, ]+\]$' "$tmp/out"; then pass=$((pass + 1)); else echo "FAIL: tokenize --ids printed $(cat "$tmp/out")"; fail=$((fail + 1)); fi
expect 0 "" inspect "$model"
if grep -q "KV bytes per token: 640 (f16)" "$tmp/out"; then pass=$((pass + 1)); else echo "FAIL: inspect lacks the KV bytes per token"; fail=$((fail + 1)); fi
expect 0 "" run --temp 0 -n 8

# bench: usage errors, then a small run of two policies at two budgets on
# copies of one filled sequence (JSON lines: one per policy x budget, full
# only uncapped; the capped tiered run holds at most its share of f16 bytes)
expect 2 "not in" bench -m "$model" --budgets 1.5
expect 2 "unknown policy" bench -m "$model" --policies full,nope
expect 2 "use --policies" bench -m "$model" --kv-policy tiered
expect 2 "unknown option" bench -m "$model" --kv-bogus 1
expect 0 "" bench -m "$model" -p 0 -n 16 -d 200 -r 2 --policies full,tiered --budgets 1,0.3 --no-bandwidth -o json
if python3 - "$tmp/out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
got = sorted((r['kv_policy'], r['kv_budget']) for r in rows)
assert got == [('full', 1), ('tiered', 0.3), ('tiered', 1)], got
for r in rows:
    assert r['test'] == 'tg16 @ d200' and r['avg_ts'] > 0 and len(r['samples_ts']) == 2, r
    share = r['kv_bytes'] / r['kv_full_f16']
    if r['kv_budget'] < 1:
        assert share <= 0.3 * 1.02, share
    else:
        assert abs(share - 1) < 0.01, share
PY
then pass=$((pass + 1)); else echo "FAIL: bench --policies/--budgets: $(cat "$tmp/out")"; fail=$((fail + 1)); fi

# --budget-at: the same per-sequence bytes at every depth (a fifth of the
# f16 cache at 200 tokens holds at depths 100 and 400 alike)
expect 2 "--budget-at" bench -m "$model" --budget-at 0
expect 0 "" bench -m "$model" -p 0 -n 8 -d 100,400 -r 1 --policies tiered --budgets 0.2 --budget-at 200 \
	--no-bandwidth -o json
if python3 - "$tmp/out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
assert [r['n_depth'] for r in rows] == [100, 400], rows
per_tok = rows[0]['kv_full_f16'] / (100 + 4)          # f16 bytes per token
cap = 0.2 * per_tok * 200
for r in rows:
    assert r['kv_budget_at'] == 200, r
    assert r['kv_bytes'] <= cap * 1.02, (r['kv_bytes'], cap)
# depth 400 is held to the same bytes, a fifth of 200 tokens: far under its own 20%
assert rows[1]['kv_bytes'] < 0.2 * rows[1]['kv_full_f16'] * 0.7, rows[1]
assert rows[1]['kv_bytes'] > cap * 0.5, (rows[1]['kv_bytes'], cap)
PY
then pass=$((pass + 1)); else echo "FAIL: bench --budget-at: $(cat "$tmp/out")"; fail=$((fail + 1)); fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
