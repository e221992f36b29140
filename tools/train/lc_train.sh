#!/bin/sh
# lc_train.sh DATADIR OUTDIR - the training of models/lc-8k.gguf.
#
# DATADIR is lc_corpus.py's output. Both stages ran on one NVIDIA H200
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
#            models/lc-8k.gguf: 16 x 8192 rows, lr 4e-4, 17% of rows
#            retrieval, 60% of those packed with short examples, answers'
#            loss x4, repeated passages x2, weighted to multi-key needles.
# Then, here:
#   lc_train.py export --weights OUTDIR/stage2 --ckpt lc.ckpt
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
mkdir -p "$O/stage1" "$O/stage2"
PYTHONUNBUFFERED=1 "$PY" "$T" train --data "$D" --out "$O/stage1" --minutes 7.3 --procs 16
"$PY" "$T" q8 --weights "$O/stage1" --out "$O/stage1q"
PYTHONUNBUFFERED=1 "$PY" "$T" train --data "$D" --out "$O/stage2" --init "$O/stage1q" --minutes 3.3 \
	--seq 8192 --seq-short 8192 --lr 6e-4 --warmup 0.06 --min-lr 0.1 --retrieval 0.3 \
	--task-w 0.15,0.2,0.3,0.1,0.1,0.15 --save-every 50 --eval-trials 4 --seed 2 --procs 16
