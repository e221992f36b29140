#!/bin/bash
# governor_band.sh [TIERKV_BIN] - where the memory governor keeps the pool:
# for every evicting policy, the pool's time-weighted mean and its minimum
# after the governor's first run, as shares of --kv-mem (the band is
# 0.70-0.80), with one sequence (`tierkv run`, 470 greedy tokens of
# stories260K under --kv-mem 105K, 35% of the f16 K+V of 480 tokens) and
# with 16 (`bench --serve -N 16 -L 400` under --kv-mem 2M). Prints a
# markdown table. Settings: MODEL, KV_MEM1 (105K), KV_MEM16 (2M), N_GEN (470).
set -eu
cd "$(dirname "$0")/.."
bin=${1:-${TIERKV_BIN:-build/tierkv}}
model=${MODEL:-models/stories260K.gguf}
pols="window h2o snapkv tova attn-threshold semantic streaming kivi tiered adaptive"
echo "| policy | 1 sequence: mean | min | 16 sequences: mean | min | held |"
echo "|---|---:|---:|---:|---:|---:|"
for p in $pols; do
	one=$("$bin" run -m "$model" -p "Once upon a time" -n "${N_GEN:-470}" --temp 0 --ignore-eos \
		--kv-policy "$p" --kv-mem "${KV_MEM1:-105K}" --kv-stats 2>&1 >/dev/null |
		sed -n 's/.*averaged [^(]*(\([0-9.]*\)).*least [^(]*(\([0-9.]*\)).*/\1 \2/p')
	[ -n "$one" ] || one="- -"
	many=$("$bin" bench --serve -m "$model" -N 16 -L 400 --kv-mem "${KV_MEM16:-2M}" --policies "$p" -o json |
		python3 -c 'import json,sys; d=json.loads(sys.stdin.readline()); b=d["kv_mem"]; print("%.3f %.3f %d" % (d["pool_mean"]/b, d["pool_min"]/b, d["held"]))')
	set -- $one $many
	echo "| $p | $1 | $2 | $3 | $4 | $5 |"
done
