#!/bin/sh
# kjv_train.sh DATADIR RUNDIR - the training run of models/kjv-2048.gguf.
#
# DATADIR is what corpus.sh wrote plus kjv-vocab.gguf, train.tok and dev.tok
# (tools/train/README.md). 260 AdamW steps, 1.8M tokens (about 1.5 epochs of
# the 1.17M training tokens): steps 0-180 in 16 windows of 512 tokens, steps
# 180-260 in 2 windows of 2048 so that every position of the 2048 context is
# trained. Peak learning rate 1.5e-3 after 40 warmup
# steps, cosine to 1.5e-4 at step 260, weight decay 0.1, gradient norm
# clipped to 1. A checkpoint every 2 minutes; running the script again
# resumes from the last one. TKV_TRAIN names the binary (default
# build/tools/train/tkv-train).
set -eu
D=${1:?usage: kjv_train.sh DATADIR RUNDIR}
R=${2:?usage: kjv_train.sh DATADIR RUNDIR}
BIN=${TKV_TRAIN:-build/tools/train/tkv-train}
TOTAL=260 SPLIT=180
COMMON="--train $D/train.tok --dev $D/dev.tok --ckpt $R/kjv.ckpt --steps $TOTAL --warmup 40 --lr 1.5e-3 \
 --min-lr 0.1 --wd 0.1 --clip 1.0 --eval-every 20 --ckpt-every 120 --seed 1 -t ${THREADS:-2} --log $R/train.log"
mkdir -p "$R"
if [ ! -f "$R/kjv.ckpt" ]; then
	nice -n 19 "$BIN" train --vocab "$D/kjv-vocab.gguf" --dim 256 --layers 6 --heads 8 --kv-heads 4 --ff 768 \
		--ctx 2048 --seq 512 --batch 16 --run-steps $SPLIT $COMMON
fi
while :; do
	step=$(grep '^checkpoint' "$R/train.log" | tail -1 | awk '{print $3}')
	[ "$step" -ge $TOTAL ] && break
	if [ "$step" -lt $SPLIT ]; then
		nice -n 19 "$BIN" train --resume --seq 512 --batch 16 --run-steps $((SPLIT - step)) $COMMON
	else
		nice -n 19 "$BIN" train --resume --seq 2048 --batch 2 --run-steps $((TOTAL - step)) $COMMON
	fi
done
