#!/bin/bash
# tierkv eval end to end: the full cache against itself is exact (delta
# perplexity 0, KL 0, top-1 100%, generations identical); a capped policy
# stays under its budget and writes its JSON and SVG; bad arguments are usage
# errors.
. "$(dirname "$0")/lib_cli.sh"
text=$(dirname "$0")/../eval/texts/seed1.txt

# has FILE FIELD VALUE: the JSON line of FILE's first row has "FIELD":VALUE
has() { head -1 "$1" | grep -q "\"$2\":$3[,}]" && ok || bad "$1: want \"$2\":$3 in $(head -1 "$1")"; }

# the full cache against itself, with generation and the copy test
if "$bin" eval -m "$model" -f "$text" --policies full --gen 16 --copy-test --json "$tmp/full.json" \
	>"$tmp/full.md" 2>"$tmp/err"; then
	ok
	has "$tmp/full.json" policy '"full"'
	has "$tmp/full.json" dppl_pct 0
	has "$tmp/full.json" kl 0
	has "$tmp/full.json" top1_pct 100
	has "$tmp/full.json" ratio 1
	has "$tmp/full.json" first_div 16
	has "$tmp/full.json" bleu 1
	has "$tmp/full.json" rouge_l 1
	has "$tmp/full.json" evicted 0
	[ "$(wc -l <"$tmp/full.json")" -eq 1 ] && ok || bad "full.json: want 1 row"
	grep -q '^| full | 1 |.*| +0.00 | 0.00000 | 100.00 |' "$tmp/full.md" && ok || bad "table: $(cat "$tmp/full.md")"
	copy=$(head -1 "$tmp/full.json" | sed -n 's/.*"copy_nll":\([^,]*\),"copy_nll_full":\([^,]*\),.*/\1 \2/p')
	set -- $copy
	[ -n "$copy" ] && [ "$1" = "$2" ] && ok || bad "copy NLL against itself: '$copy'"
else
	bad "eval full: exit $? ($(tail -2 "$tmp/err"))"
fi

# a capped policy on a short text: rows in order, bytes under the full cache
head -c 400 "$text" >"$tmp/short.txt"
if "$bin" eval -m "$model" "$tmp/short.txt" --policies window,h2o --budgets 1,0.5 --gen 8 \
	--json "$tmp/w.json" --plot "$tmp/w.svg" >"$tmp/w.md" 2>"$tmp/err"; then
	ok
	[ "$(wc -l <"$tmp/w.json")" -eq 5 ] && ok || bad "w.json: want 5 rows, got $(wc -l <"$tmp/w.json")"
	[ "$(grep -c '^| ' "$tmp/w.md")" -eq 6 ] && ok || bad "table: want header + 5 rows: $(cat "$tmp/w.md")"
	row=$(sed -n 3p "$tmp/w.json")
	case $row in
	*'"policy":"window","budget":0.5,'*) ok ;;
	*) bad "third row: $row" ;;
	esac
	ratio=$(echo "$row" | sed -n 's/.*"ratio":\([^,]*\),.*/\1/p')
	awk -v r="$ratio" 'BEGIN { exit !(r > 0.2 && r < 0.75) }' && ok || bad "window at 0.5: ratio $ratio"
	grep -q '</svg>' "$tmp/w.svg" && grep -q 'polyline' "$tmp/w.svg" && ok || bad "no plot in w.svg"
	if command -v python3 >/dev/null; then
		python3 -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' "$tmp/w.svg" && ok || bad "w.svg is not XML"
	fi
else
	bad "eval window,h2o: exit $? ($(tail -2 "$tmp/err"))"
fi

# --mem: each budget also as a whole-pool limit, the pool never above it
if "$bin" eval -m "$model" "$text" --policies tiered --budgets 0.35 --mem --gen 0 --json "$tmp/m.json" \
	>"$tmp/m.md" 2>"$tmp/err"; then
	ok
	[ "$(wc -l <"$tmp/m.json")" -eq 3 ] && ok || bad "m.json: want 3 rows, got $(wc -l <"$tmp/m.json")"
	grep -q '"policy":"tiered","budget":0.35,"limit":"cap"' "$tmp/m.json" && ok || bad "no cap row: $(cat "$tmp/m.json")"
	pool=$(grep '"limit":"pool"' "$tmp/m.json")
	[ -n "$pool" ] && ok || bad "no pool row: $(cat "$tmp/m.json")"
	full=$(head -1 "$tmp/m.json" | sed -n 's/.*"kv_full_bytes":\([^,]*\),.*/\1/p')
	peak=$(echo "$pool" | sed -n 's/.*"alloc_peak_bytes":\([^,]*\),.*/\1/p')
	awk -v p="$peak" -v f="$full" 'BEGIN { exit !(p > 0 && p <= 0.35 * f + 1) }' && ok ||
		bad "pool row: peak $peak of the pool over 0.35 x $full"
	grep -q '^| tiered | 0.35 | pool |' "$tmp/m.md" && ok || bad "table: $(cat "$tmp/m.md")"
else
	bad "eval --mem: exit $? ($(tail -2 "$tmp/err"))"
fi

# usage and runtime errors
"$bin" eval --help >/dev/null && ok || bad "eval --help"
expect 2 "no text" eval -m "$model"
expect 2 "unknown policy 'bogus'" eval -m "$model" -f "$text" --policies window,bogus
expect 2 "not in \(0, 1\]" eval -m "$model" -f "$text" --budgets 1,1.5
expect 2 "not a list" eval -m "$model" -f "$text" --budgets 0.5x
expect 2 "use --policies" eval -m "$model" -f "$text" --kv-policy h2o
expect 2 "unknown option" eval -m "$model" -f "$text" --bogus
expect 1 "cannot open" eval -m "$model" -f "$tmp/missing.txt"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
