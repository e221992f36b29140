#!/bin/bash
# tierkv eval --retrieval end to end on stories260K (which cannot retrieve,
# so only the shape is checked, not accuracy): the table, JSON rows and grid
# have every task, the full cache is row 0 at ratio 1, capped rows stay under
# it, the same seed gives the same prompts and answers, and bad options are
# usage errors (exit code 2).
. "$(dirname "$0")/lib_cli.sh"
kjv=$(dirname "$0")/../eval/kjv
fill=(-f "$kjv/08_Ruth.txt" -f "$kjv/32_Jonah.txt" -f "$kjv/57_Phmn.txt")

tasks="passkey niah multikey multivalue vartrack copy"
if "$bin" eval --retrieval all -m "$model" -c 512 "${fill[@]}" --ctx-lens 400,480 --depths 0,1 --samples 1 \
	--policies tiered,window --budgets 1,0.25 --json "$tmp/r.json" --plot "$tmp/r.svg" --grid tiered -t 2 \
	>"$tmp/r.md" 2>"$tmp/err"; then
	ok
	# 1 full row + 2 policies x 2 budgets
	[ "$(wc -l <"$tmp/r.json")" -eq 5 ] && ok || bad "r.json: want 5 rows, got $(wc -l <"$tmp/r.json")"
	row0=$(head -1 "$tmp/r.json")
	case $row0 in
	'{"policy":"full","budget":1,"limit":"none","failed":0,"samples":24,'*'"ratio":1,'*) ok ;;
	*) bad "row 0 is not the full cache: $row0" ;;
	esac
	while read -r row; do
		for t in $tasks; do
			echo "$row" | grep -q "\"$t\":{\"n\":4,\"correct\":[0-4],\"acc_pct\":" && ok || bad "no $t in $row"
		done
		echo "$row" | grep -q '"tokens":128,"tokens_right":' && ok || bad "copy tokens: $row"
		echo "$row" | grep -q '"lengths":{"400":{"n":12,.*},"480":{"n":12,' && ok || bad "lengths: $row"
		echo "$row" | grep -q '"depths":{"0":{"n":12,.*},"1":{"n":12,' && ok || bad "depths: $row"
		echo "$row" | grep -q '"mean_acc_pct":[0-9.]*,' && ok || bad "mean: $row"
	done <"$tmp/r.json"
	sed -n 2,5p "$tmp/r.json" | cut -c1-40 | tr '\n' ' ' | grep -q \
		'"policy":"window","budget":1,.*"policy":"window","budget":0.25,.*"policy":"tiered","budget":1,.*"policy":"tiered","budget":0.25,' &&
		ok || bad "row order: $(cut -c1-40 "$tmp/r.json")"
	for p in window tiered; do
		ratio=$(grep "\"policy\":\"$p\",\"budget\":0.25," "$tmp/r.json" | sed -n 's/.*"ratio":\([^,]*\),.*/\1/p')
		awk -v r="$ratio" 'BEGIN { exit !(r > 0.1 && r < 0.4) }' && ok || bad "$p at 0.25: ratio $ratio"
	done
	head -1 "$tmp/r.md" | grep -q '^| policy | budget | KV peak | ratio | passkey % | niah % | multikey % | multivalue % | vartrack % | copy % | mean % | s |$' &&
		ok || bad "table header: $(head -1 "$tmp/r.md")"
	grep -q '^| full | 1 | .* | 1.000 |' "$tmp/r.md" && ok || bad "no full row: $(cat "$tmp/r.md")"
	# the table's 5 rows and two grids (header, 2 depths, all)
	[ "$(grep -cE '^\| (full|window|tiered) \|' "$tmp/r.md")" -eq 5 ] && ok || bad "table rows: $(cat "$tmp/r.md")"
	grep -q '^tiered at budget 1: accuracy' "$tmp/r.md" && grep -q '^tiered at budget 0.25: accuracy' "$tmp/r.md" &&
		ok || bad "no grid: $(cat "$tmp/r.md")"
	[ "$(grep -c '^| depth | 400 | 480 | all |$' "$tmp/r.md")" -eq 2 ] && ok || bad "grid header"
	[ "$(grep -cE '^\| (0|1|all) \|' "$tmp/r.md")" -eq 6 ] && ok || bad "grid rows: $(cat "$tmp/r.md")"
	grep -q '</svg>' "$tmp/r.svg" && grep -q 'polyline' "$tmp/r.svg" && ok || bad "no plot in r.svg"
	if command -v python3 >/dev/null; then
		python3 -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' "$tmp/r.svg" && ok || bad "r.svg is not XML"
		python3 -c 'import sys, json; [json.loads(l) for l in open(sys.argv[1])]' "$tmp/r.json" && ok ||
			bad "r.json is not JSON lines"
	fi
	grep -q '\[24/24\] copy, length 480, depth 1' "$tmp/err" && ok || bad "progress: $(tail -3 "$tmp/err")"
else
	bad "eval --retrieval all: exit $? ($(tail -3 "$tmp/err"))"
fi

# the same seed, the same prompts and answers; another seed, other prompts
for s in 5 5 6; do
	"$bin" eval --retrieval passkey,niah -m "$model" "${fill[@]}" --ctx-lens 480 --depths 0.5 --samples 2 \
		--policies window --budgets 0.5 --seed $s -v >/dev/null 2>"$tmp/v$s.err" || bad "seed $s: exit $?"
	grep -E "want|prompt tokens" "$tmp/v$s.err" >>"$tmp/v$s.txt"
done
[ "$(grep -c want "$tmp/v5.txt")" -eq 16 ] && ok || bad "seed 5: want 8 answers twice: $(cat "$tmp/v5.txt")"
diff <(sed -n 1,12p "$tmp/v5.txt") <(sed -n 13,24p "$tmp/v5.txt") >/dev/null && ok || bad "seed 5 twice differs"
diff <(sed -n 1,12p "$tmp/v5.txt") "$tmp/v6.txt" >/dev/null && bad "seeds 5 and 6 agree" || ok

# --mem: a pool row beside the cap row, in the table and the JSON
if "$bin" eval --retrieval passkey -m "$model" "${fill[@]}" --ctx-lens 480 --depths 0.5 --samples 1 \
	--policies tiered --budgets 0.5 --mem --json "$tmp/mem.json" >"$tmp/mem.md" 2>"$tmp/err"; then
	grep -q '^| tiered | 0.5 | cap |' "$tmp/mem.md" && grep -q '^| tiered | 0.5 | pool |' "$tmp/mem.md" && ok ||
		bad "--mem table: $(cat "$tmp/mem.md")"
	[ "$(grep -c '"limit":"pool"' "$tmp/mem.json")" -eq 1 ] && ok || bad "--mem json: $(cat "$tmp/mem.json")"
else
	bad "eval --retrieval --mem: exit $? ($(tail -2 "$tmp/err"))"
fi

# usage and runtime errors
"$bin" eval --help | grep -q -- '--retrieval TASKS' && ok || bad "eval --help lacks --retrieval"
expect 2 "unknown task 'bogus'" eval --retrieval passkey,bogus -m "$model" "${fill[@]}"
expect 2 "unknown task ''" eval --retrieval , -m "$model" "${fill[@]}"
expect 2 "longer than the context" eval --retrieval passkey -m "$model" -c 512 "${fill[@]}" --ctx-lens 480,600
expect 2 "longer than the context" eval --retrieval niah -m "$model" "${fill[@]}" --ctx-lens 1024
expect 2 "1.5 is not in \[0, 1\]" eval --retrieval niah -m "$model" "${fill[@]}" --depths 0,1.5
expect 2 "-0.25 is not in \[0, 1\]" eval --retrieval niah -m "$model" "${fill[@]}" --depths -0.25
expect 2 "not a list" eval --retrieval niah -m "$model" "${fill[@]}" --depths 0.5x
expect 2 "out of range" eval --retrieval niah -m "$model" "${fill[@]}" --ctx-lens 16
expect 2 "niah needs [0-9]+ tokens" eval --retrieval niah -m "$model" "${fill[@]}" --ctx-lens 128
expect 2 "out of range" eval --retrieval niah -m "$model" "${fill[@]}" --samples 0
expect 2 "no filler text" eval --retrieval niah -m "$model"
expect 2 "perplexity eval" eval --retrieval niah -m "$model" "${fill[@]}" --gen 8
expect 2 "unknown policy 'bogus'" eval --retrieval niah -m "$model" "${fill[@]}" --grid bogus
expect 2 "not in --policies" eval --retrieval niah -m "$model" "${fill[@]}" --policies window --grid tiered
expect 2 "use --policies" eval --retrieval niah -m "$model" "${fill[@]}" --kv-policy h2o
expect 1 "cannot open" eval --retrieval niah -m "$model" -f "$tmp/missing.txt"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
