#!/bin/bash
# Serving under one KV memory size: tierkv serve next to llama-server on the
# same model file, N concurrent streamed completions of LEN random prompt
# tokens and GEN generated tokens each (ignore_eos, greedy), every engine given
# the same bytes for its KV cache:
#   - llama-server, f16 cache: -c (KV bytes / f16 bytes per token) split over
#     -np slots of LEN + GEN tokens each (its per-slot context must hold a
#     whole conversation); the requests past its slots wait in its queue;
#   - llama-server, q8_0 cache (-ctk q8_0 -ctv q8_0): 34 bytes per 32 values,
#     so more slots in the same bytes;
#   - tierkv serve --kv-mem KV, policies full and tiered (tiered with
#     --kv-floor FLOOR: no sequence squeezed below FLOOR x its f16 cache).
# For each: time to first token (p50, p90, max over the N requests, queueing
# included), the wall time of the batch, generated tokens/s over it, and each
# stream's own decode rate after its first token (median). The engines take
# turns per round (llama-server first in odd rounds, tierkv first in even ones)
# so that the machine's moods hit both. Not run by CI: it needs llama.cpp and
# takes minutes.
#
#   scripts/compare_server.sh [MODEL]      (default models/lc-8k.gguf)
#
# Environment: LLAMA_BIN (../llamacpp/build/bin), TIERKV (build/tierkv),
# N (16), LEN (3800), GEN (256), KV (64M: a size with K/M/G), FLOOR (0.25),
# THREADS (2), ROUNDS (1), SEED (1), BASE (port, 29000), OUT (JSON lines,
# /tmp/tierkv-compare-server).
set -eu
cd "$(dirname "$0")/.."
model=${1:-models/lc-8k.gguf}
bin=${LLAMA_BIN:-../llamacpp/build/bin}
tierkv=${TIERKV:-build/tierkv}
N=${N:-16} LEN=${LEN:-3800} GEN=${GEN:-256} KV=${KV:-64M} FLOOR=${FLOOR:-0.25}
THREADS=${THREADS:-2} ROUNDS=${ROUNDS:-1} SEED=${SEED:-1} BASE=${BASE:-29000}
out=${OUT:-/tmp/tierkv-compare-server}
for f in "$bin/llama-server" "$tierkv"; do
	[ -x "$f" ] || { echo "compare_server: $f is not an executable (see the top of this script)" >&2; exit 2; }
done
[ -s "$model" ] || { echo "compare_server: no model file $model" >&2; exit 2; }
py=$(command -v /usr/bin/python3 || command -v python3)
client="$py scripts/kvstore_client.py"
mkdir -p "$out"
rm -f "$out"/*.jsonl

# KV bytes and the model's f16 K+V bytes per token (every layer global).
kvbytes=$($py -c 'import sys; s=sys.argv[1]; m={"K":1<<10,"M":1<<20,"G":1<<30}
print(int(float(s[:-1])*m[s[-1].upper()]) if s[-1].upper() in m else int(s))' "$KV")
meta() { "$tierkv" inspect -m "$model" | awk -v k="$1" '$1 ~ "\\." k "$" {print $NF; exit}'; }
layers=$(meta block_count) heads=$(meta attention.head_count) kvheads=$(meta attention.head_count_kv)
embd=$(meta embedding_length) vocab=$(meta vocab_size)
[ -n "$vocab" ] || vocab=$("$tierkv" inspect -m "$model" | awk '/tokenizer.ggml.tokens/ {gsub(/[^0-9]/, "", $5); print $5; exit}')
per_tok=$((layers * kvheads * (embd / heads) * 2 * 2))
slot=$((LEN + GEN))
np16=$((kvbytes / (per_tok * slot)))
np8=$((kvbytes * 32 / (per_tok * 17 * slot)))
echo "model $model: $layers layers, $kvheads KV heads of $((embd / heads)), f16 K+V $per_tok B/token, vocab $vocab"
echo "KV memory $KV ($kvbytes B): llama-server f16 -np $np16 -c $((np16 * slot)), q8_0 -np $np8 -c $((np8 * slot))"
[ "$np16" -ge 1 ] || { echo "compare_server: $KV holds no f16 conversation of $slot tokens" >&2; exit 2; }

spid=
stop_server() { [ -n "$spid" ] && { kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null || true; }; spid=; }
trap stop_server EXIT
wait_up() { # PORT LOG
	for _ in $(seq 600); do
		if curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1; then return 0; fi
		kill -0 "$spid" 2>/dev/null || { echo "compare_server: the server died:" >&2; tail -5 "$2" >&2; exit 1; }
		sleep 0.2
	done
	echo "compare_server: the server did not come up" >&2; exit 1
}
run_one() { # NAME ROUND COMMAND...
	local name=$1 round=$2 port=$((BASE + RANDOM % 1000)); shift 2
	"$@" --port "$port" >"$out/$name.log" 2>&1 &
	spid=$!
	wait_up "$port" "$out/$name.log"
	echo "round $round: $name" >&2
	$client conc "http://127.0.0.1:$port" "$N" "$LEN" "$GEN" "$vocab" "$SEED" |
		$py -c 'import json,sys; d=json.load(sys.stdin); d["engine"]=sys.argv[1]; d["round"]=int(sys.argv[2]); print(json.dumps(d))' \
			"$name" "$round" >>"$out/$name.jsonl"
	stop_server
}
llama() { # NAME ROUND NP TYPE
	run_one "$1" "$2" "$bin/llama-server" -m "$model" -t "$THREADS" -c $(($3 * slot)) -np "$3" -ctk "$4" -ctv "$4" \
		--no-kv-unified --host 127.0.0.1
}
tkv() { # NAME ROUND POLICY OPTIONS...
	local name=$1 round=$2 pol=$3; shift 3
	run_one "$name" "$round" "$tierkv" serve -m "$model" -t "$THREADS" -c "$slot" --max-seqs "$N" \
		--max-queue $((N * 2)) --kv-mem "$KV" --kv-policy "$pol" "$@"
}
for r in $(seq "$ROUNDS"); do
	llama_all() {
		llama llama-f16 "$r" "$np16" f16
		[ "$np8" -ge 1 ] && llama llama-q8_0 "$r" "$np8" q8_0
	}
	tkv_all() {
		tkv tierkv-full "$r" full
		tkv tierkv-tiered "$r" tiered --kv-floor "$FLOOR"
	}
	if [ $((r % 2)) -eq 1 ]; then llama_all; tkv_all; else tkv_all; llama_all; fi
done

$py - "$out" "$N" "$GEN" "$np16" "$np8" <<'EOF'
import glob, json, statistics, sys
out, n, gen, np16, np8 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
held = {"llama-f16": "%d slots" % np16, "llama-q8_0": "%d slots" % np8, "tierkv-full": "pool", "tierkv-tiered": "pool"}
print("| engine | KV held as | ok | TTFT p50 s | TTFT p90 s | TTFT max s | wall s | gen t/s | stream t/s (median) |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
rows = {}
for f in sorted(glob.glob(out + "/*.jsonl")):
    for line in open(f):
        d = json.loads(line)
        ok = [q for q in d["requests"] if "error" not in q]
        tt = sorted(q["ttft_s"] for q in ok) or [float("nan")]
        rate = [(gen - 1) / (q["total_s"] - q["ttft_s"]) for q in ok if q["total_s"] > q["ttft_s"]]
        row = (len(ok), tt[len(tt) // 2], tt[min(len(tt) - 1, int(0.9 * len(tt)))], tt[-1], d["wall_s"],
               len(ok) * gen / d["wall_s"], statistics.median(rate) if rate else float("nan"))
        rows.setdefault(d["engine"], []).append(row)
for eng in ["llama-f16", "llama-q8_0", "tierkv-full", "tierkv-tiered"]:
    for row in rows.get(eng, []):
        print("| %s | %s | %d/%d | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f |" % ((eng, held[eng], row[0], n) + row[1:]))
EOF
