#!/bin/sh
# lc_train.sh DATADIR OUTDIR - the training of models/lc-8k.gguf.
#
# DATADIR is lc_corpus.py's output. Stages 1 and 2 ran on one NVIDIA H200
# (PyTorch 2.11, bf16 autocast, flash attention, 16 data processes):
#   stage 1  7.3 minutes from scratch: 2314 steps of 131072 tokens (303M),
#            rows of 2048 tokens until 55% of the time, then of 8192; AdamW
#            lr 2e-3 (4% warmup, cosine to 2e-4), weight decay 0.1, clip 1;
#            20% of rows hold a retrieval example (11.1% of tokens).
#   stage 2  3.3 minutes from stage 1's weights (as 8-bit blocks, to fit the
#            device's carry limit): 879 steps of 16 x 8192 tokens (115M);
#            lr 6e-4 (6% warmup, cosine to 6e-5); 30% of rows retrieval
#            (15.4% of tokens), weighted to multi-key needles.
# In all 418M tokens, 12.3% of them in retrieval examples.
#   stage 3  (prepared, not yet run; STAGE3=1) 8.3 minutes from the shipped
#            models/lc-8k.gguf (stage 4c's weights): 16 x 8192 rows, lr 4e-4,
#            17% of rows retrieval, 60% of those packed with short examples, answers'
#            loss x4, repeated passages x2, weighted to multi-key needles.
#   CPU=1    two stages after stage 2 on a 2-core CPU
#            (Debian's PyTorch 1.13, bf16 autocast on AVX512-BF16, 2 data
#            processes), about 0.5-0.9k tokens/s:
#     3c     95 minutes, 619 steps of 8192 tokens (5.1M): rows of 1024
#            tokens, then of 2048 for the last 15%; lr 2e-4 (3% warmup,
#            cosine to 2e-5); half the rows retrieval, 80% of those packed
#            with examples of up to 1024 tokens, weighted to multi-key.
#     4c     84 minutes from 3c: rows of 4096 tokens, then of 8192 for the
#            last 45%; lr 1e-4; half the rows retrieval, half of those
#            packed (examples up to 2048 tokens), weighted to multi-key.
# Then, here:
#   lc_train.py export --weights OUTDIR/stage4c --ckpt lc.ckpt
#   tkv-train vocab --spm DATADIR/lc.vocab -o lc-vocab.gguf
#   tkv-train export --ckpt lc.ckpt --vocab lc-vocab.gguf -o lc-8k.gguf --type q8_0 --name "tierkv lc-8k"
set -eu
D=${1:?usage: lc_train.sh DATADIR OUTDIR}
O=${2:?usage: lc_train.sh DATADIR OUTDIR}
T="$(dirname "$0")/lc_train.py"
PY=${PYTHON:-python3}
if [ "${STAGE3:-0}" = 1 ]; then
	# stage 3 alone, from the shipped model
	root="$(cd "$(dirname "$0")/../.." && pwd)"
	mkdir -p "$O/stage3"
	PYTHONUNBUFFERED=1 "$PY" "$T" train --data "$D" --out "$O/stage3" --init "$root/models/lc-8k.gguf" \
		--minutes 8.3 --seq 8192 --seq-short 8192 --lr 4e-4 --warmup 0.05 --min-lr 0.1 --retrieval 0.17 \
		--pack 0.6 --pack-len 2048 --answer-w 4 --repeat-w 2 --task-w 0.1,0.2,0.35,0.1,0.1,0.15 \
		--save-every 100 --eval-trials 4 --seed 3 --procs 16
	exit 0
fi
if [ "${CPU:-0}" = 1 ]; then
	# the CPU stages, after stage 2 (they ran from its Q8_0 file, the first
	# shipped models/lc-8k.gguf: INIT=that file; default the run's stage2)
	mkdir -p "$O/stage3c" "$O/stage4c"
	PYTHONUNBUFFERED=1 "$PY" "$T" train --data "$D" --out "$O/stage3c" --init "${INIT:-$O/stage2}" \
		--minutes 95 --seq 2048 --seq-short 1024 --long-at 0.85 --batch-tokens 8192 --lr 2e-4 --warmup 0.03 \
		--min-lr 0.1 --retrieval 0.5 --pack 0.8 --pack-len 1024 --answer-w 4 --repeat-w 2 \
		--task-w 0.1,0.2,0.5,0.05,0.05,0.1 --save-every 600 --eval-trials 0 --procs 2 --bf16 --seed 4
	PYTHONUNBUFFERED=1 "$PY" "$T" train --data "$D" --out "$O/stage4c" --init "$O/stage3c" \
		--minutes 84 --seq 8192 --seq-short 4096 --long-at 0.55 --batch-tokens 8192 --lr 1e-4 --warmup 0.03 \
		--min-lr 0.1 --retrieval 0.5 --pack 0.5 --pack-len 2048 --answer-w 4 --repeat-w 2 \
		--task-w 0.15,0.2,0.45,0.05,0.05,0.1 --save-every 600 --eval-trials 0 --procs 2 --bf16 --seed 5
	exit 0
fi
mkdir -p "$O/stage1" "$O/stage2"
PYTHONUNBUFFERED=1 "$PY" "$T" train --data "$D" --out "$O/stage1" --minutes 7.3 --procs 16
"$PY" "$T" q8 --weights "$O/stage1" --out "$O/stage1q"
PYTHONUNBUFFERED=1 "$PY" "$T" train --data "$D" --out "$O/stage2" --init "$O/stage1q" --minutes 3.3 \
	--seq 8192 --seq-short 8192 --lr 6e-4 --warmup 0.06 --min-lr 0.1 --retrieval 0.3 \
	--task-w 0.15,0.2,0.3,0.1,0.1,0.15 --save-every 50 --eval-trials 4 --seed 2 --procs 16
