#!/bin/bash
# Soak test of tierkv serve on loopback: 64 clients for 10 minutes against one
# server under a tight --kv-mem, about 10% of the requests malformed (bad
# JSON, types, values, roles, token ids, a body over --max-body, no API key,
# wrong method) and 10% long streams the client drops after a few events; the
# server's RSS and /metrics KV bytes are sampled every 5 seconds.
#
#   scripts/soak.sh [-d SECONDS] [-c CLIENTS] [--kv-mem SIZE] [-m MODEL] [-- SERVER OPTIONS...]
#
# SOAK_SECONDS sets the default duration (600). The script starts its own
# server (TIERKV_BIN, default build/tierkv, built if missing) on a free
# 127.0.0.1 port with an API key, and stops it with SIGTERM at the end.
# Reports requests sent / answered / errored by kind, p50 / p99 latency, the
# server's peak RSS and RSS early vs at the end, and peak KV bytes against
# --kv-mem. Exits 1 when a request got no answer (no HTTP response, a stream
# without its end, a malformed request not answered with a JSON 4xx), the
# server crashed or did not exit 0, the KV peak passed --kv-mem, or the RSS
# grew: after a warm-up of a tenth of the run, the median RSS of the last
# third of the samples may pass the median of the first third by at most
# SOAK_RSS_TOL percent (5) or SOAK_RSS_SLACK KiB (1024), whichever is larger
# (checked when there are at least 6 samples after the warm-up).
set -eu
cd "$(dirname "$0")/.."
clients=64 secs=${SOAK_SECONDS:-600} kv_mem=2M model=""
rss_tol=${SOAK_RSS_TOL:-5} rss_slack=${SOAK_RSS_SLACK:-1024}
while [ $# -gt 0 ]; do
	case $1 in
	-d) secs=$2; shift 2 ;;
	-c) clients=$2; shift 2 ;;
	--kv-mem) kv_mem=$2; shift 2 ;;
	-m) model=$2; shift 2 ;;
	--) shift; break ;;
	-h|--help) sed -n '2,21p' "$0"; exit 0 ;;
	*) echo "soak: unknown option $1" >&2; exit 2 ;;
	esac
done
[ "$clients" -ge 1 ] && [ "$clients" -le 512 ] || { echo "soak: -c 1..512" >&2; exit 2; }
[ "$secs" -ge 5 ] && [ "$secs" -le 86400 ] || { echo "soak: -d 5..86400" >&2; exit 2; }
. scripts/serve_lib.sh
serve_build
[ -n "$model" ] || model=models/stories260K.gguf
command -v curl >/dev/null || { echo "soak: curl is needed" >&2; exit 2; }

tmp=$(mktemp -d)
serve_cleanup_at_exit
key=sk-soak-$$
serve_up soak "$tmp/server.log" -m "$model" --host 127.0.0.1 --api-key "$key" --kv-mem "$kv_mem" \
	--max-seqs "$clients" --max-queue $((clients * 2)) --max-body 64K --max-tokens 512 --timeout 120 "$@"
url=$serve_url
head -n 1 "$tmp/server.log"

# a body over --max-body (64K)
{ printf '{"prompt":"'; head -c 70000 /dev/zero | tr '\0' 'a'; printf '"}'; } >"$tmp/big.json"

# Malformed request K: prints "METHOD PATH EXPECTED-CODES AUTH BODY".
bad_request() {
	case $1 in
	0) echo 'POST /v1/completions 400 key {"prompt": "a",' ;;
	1) echo 'POST /v1/chat/completions 400 key not json at all' ;;
	2) echo 'POST /v1/completions 400 key {"prompt":"a","temperature":"hot"}' ;;
	3) echo 'POST /v1/chat/completions 400 key {"messages":[{"role":"wizard","content":"hi"}]}' ;;
	4) echo 'POST /v1/completions 400 key {"prompt":"a","max_tokens":1e300}' ;;
	5) echo 'POST /v1/completions 400 key {"prompt":[1,99999]}' ;;
	6) echo 'POST /v1/chat/completions 400 key {"messages":[]}' ;;
	7) echo 'POST /v1/completions 413 key @big' ;;
	8) echo 'POST /v1/completions 401 none {"prompt":"Once upon a time"}' ;;
	9) echo 'GET /v1/completions 405 key -' ;;
	esac
}

# client ID END: requests until END; one line per request:
#   KIND CODE SECONDS VERDICT   (KIND ok|bad|cut; VERDICT ok|noanswer|wrong|cut)
client() {
	local id=$1 end=$2 n=0 out=$tmp/c$1 r code t verdict kind
	RANDOM=$id
	while [ "$(date +%s)" -lt "$end" ]; do
		local dice=$((RANDOM % 10)) mt=$((16 + RANDOM % 113)) path body
		if [ "$dice" -eq 0 ]; then
			kind=bad
			local spec method want auth
			spec=$(bad_request $((RANDOM % 10)))
			read -r method path want auth body <<<"$spec"
			local args=(-X "$method" -H 'Content-Type: application/json')
			[ "$auth" = key ] && args+=(-H "Authorization: Bearer $key")
			case $body in
			@big) args+=(--data-binary @"$tmp/big.json") ;;
			-) ;;
			*) args+=(--data-binary "$body") ;;
			esac
			r=$(curl -s -o "$out.body" -w '%{http_code} %{time_total}' --max-time 60 "${args[@]}" \
				"$url$path" 2>/dev/null) || true
			code=${r%% *}
			t=${r#* }
			if [ -z "$r" ] || [ "$code" = 000 ]; then
				verdict=noanswer
			elif [ "$code" = "$want" ] && grep -q '^{"error":{"message":' "$out.body"; then
				verdict=ok
			else
				verdict=wrong
			fi
		elif [ "$dice" -eq 1 ]; then
			# a long stream the client drops after 1 to 10 events: head exits,
			# curl's next write fails and it closes the connection
			kind=cut
			body="{\"prompt\":\"Once upon a time\",\"max_tokens\":500,\"ignore_eos\":true,\"stream\":true}"
			t=$(date +%s.%N)
			{ curl -s -N --max-time 60 -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
				-d "$body" "$url/v1/completions" 2>/dev/null || true; } | head -n $((2 * (1 + RANDOM % 10))) \
				>"$out.body"
			t=$(awk -v s="$t" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')
			code=000
			verdict=noanswer
			grep -q '^data: ' "$out.body" && code=200 verdict=cut
			grep -q '^data: \[DONE\]' "$out.body" && verdict=ok
		else
			kind=ok
			case $((RANDOM % 4)) in
			0) path=/v1/chat/completions
			   body="{\"messages\":[{\"role\":\"user\",\"content\":\"Tell story $n\"}],\"max_tokens\":$mt}" ;;
			1) path=/v1/chat/completions
			   body="{\"messages\":[{\"role\":\"user\",\"content\":\"Hi $id\"}],\"max_tokens\":$mt,\"stream\":true}" ;;
			2) path=/v1/completions
			   body="{\"prompt\":\"Once upon a time\",\"max_tokens\":$mt,\"seed\":$n}" ;;
			3) path=/v1/completions
			   body="{\"prompt\":\"Lily and Ben went\",\"max_tokens\":$mt,\"stream\":true}" ;;
			esac
			r=$(curl -s -o "$out.body" -w '%{http_code} %{time_total}' --max-time 180 \
				-H "Authorization: Bearer $key" -H 'Content-Type: application/json' -d "$body" \
				"$url$path" 2>/dev/null) || true
			code=${r%% *}
			t=${r#* }
			verdict=ok
			if [ -z "$r" ] || [ "$code" = 000 ]; then
				verdict=noanswer
			elif [ "$code" = 200 ] && grep -q '^data: ' "$out.body" && ! grep -q '^data: \[DONE\]' "$out.body"; then
				verdict=noanswer   # a stream without its end
			elif [ "$code" != 200 ] && ! grep -q '^{"error":{"message":' "$out.body"; then
				verdict=wrong      # an error that is not OpenAI-shaped
			fi
		fi
		echo "$kind ${code:-000} ${t:-0} $verdict" >>"$out.log"
		n=$((n + 1))
	done
}

metric() { awk -v m="$1" '$1 == m { print $2 }' "$2"; }

echo "soak: $clients clients for $secs s against $url, --kv-mem $kv_mem"
start=$(date +%s)
end=$((start + secs))
pids=()
for i in $(seq "$clients"); do
	client "$i" "$end" &
	pids+=($!)
done
# samples: seconds RSS-KiB KV-allocated KV-peak live queued
echo "t rss_kib kv_allocated kv_peak live queued" >"$tmp/samples"
crashed=0
while [ "$(date +%s)" -lt "$end" ]; do
	if ! kill -0 "$serve_pid" 2>/dev/null; then
		crashed=1
		break
	fi
	rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$serve_pid/status" 2>/dev/null || echo 0)
	if curl -s --max-time 10 -H "Authorization: Bearer $key" "$url/metrics" >"$tmp/m" 2>/dev/null; then
		echo "$(($(date +%s) - start)) ${rss:-0} $(metric tierkv_kv_allocated_bytes "$tmp/m") \
$(metric tierkv_kv_peak_allocated_bytes "$tmp/m") $(metric tierkv_live_sequences "$tmp/m") \
$(metric tierkv_queue_length "$tmp/m")" >>"$tmp/samples"
	fi
	sleep 5
done
wait "${pids[@]}"
kill -0 "$serve_pid" 2>/dev/null || crashed=1
sleep 1
curl -s --max-time 10 -H "Authorization: Bearer $key" "$url/metrics" >"$tmp/metrics" || true
rss_end=$(awk '/^VmRSS/ { print $2 }' "/proc/$serve_pid/status" 2>/dev/null || echo 0)
if [ "$crashed" -eq 0 ]; then
	serve_stop
	src=$serve_rc
else
	src=0
	wait "$serve_pid" || src=$?
	serve_pid=
fi

cat "$tmp"/c*.log >"$tmp/all"
sent=$(wc -l <"$tmp/all")
count() { awk "$1" "$tmp/all" | wc -l; }
n_ok=$(count '$1 == "ok"')
n_bad=$(count '$1 == "bad"')
n_cut=$(count '$1 == "cut"')
ok200=$(count '$1 == "ok" && $2 == 200 && $4 == "ok"')
okerr=$(count '$1 == "ok" && $2 != 200 && $4 == "ok"')
bad_ok=$(count '$1 == "bad" && $4 == "ok"')
cut_mid=$(count '$1 == "cut" && $4 == "cut"')
noanswer=$(count '$4 == "noanswer"')
wrong=$(count '$4 == "wrong"')
awk '$1 == "ok" && $2 == 200 && $4 == "ok" { print $3 }' "$tmp/all" | sort -n >"$tmp/lat"
pct() { # nearest-rank percentile of the sorted latencies
	local n k
	n=$(wc -l <"$tmp/lat")
	[ "$n" -gt 0 ] || { echo "-"; return; }
	k=$(((n * $1 + 99) / 100))
	[ "$k" -ge 1 ] || k=1
	sed -n "${k}p" "$tmp/lat"
}
budget=$(metric tierkv_kv_budget_bytes "$tmp/metrics")
peak_kv=$(metric tierkv_kv_peak_allocated_bytes "$tmp/metrics")
[ -n "$peak_kv" ] || peak_kv=$(awk 'NR > 1 && $4 > p { p = $4 } END { print p + 0 }' "$tmp/samples")
budget=${budget:-0}
# RSS: the first sample after a tenth of the run (allocator arenas warmed) vs the last
read -r rss_first rss_early rss_last rss_peak n_samples < <(awk -v w=$((secs / 10)) '
	NR > 1 { n++; if (!first) first = $2; if ($2 > peak) peak = $2; if (!early && $1 >= w) early = $2; last = $2 }
	END { if (!early) early = last; print first + 0, early + 0, last + 0, peak + 0, n + 0 }' "$tmp/samples")
[ "$rss_end" -gt "$rss_peak" ] && rss_peak=$rss_end
gen=$(metric tierkv_generated_tokens_total "$tmp/metrics")
pre=$(metric tierkv_preemptions_total "$tmp/metrics")
cancelled=$(awk '$1 == "tierkv_requests_finished_total{reason=\"cancelled\"}" { print $2 }' "$tmp/metrics")
gov=$(metric tierkv_kv_governor_runs_total "$tmp/metrics")

echo "requests: sent $sent; answered $((ok200 + okerr + bad_ok)), errored $((okerr + bad_ok)); no answer $noanswer, wrong answer $wrong"
echo "  normal $n_ok: 200 $ok200, JSON error $okerr; malformed $n_bad: JSON 4xx as expected $bad_ok;" \
	"streams dropped by the client: $n_cut, $cut_mid of them mid-stream (server: ${cancelled:-?} cancelled)"
echo "  codes: $(awk '{ print $1 ":" $2 }' "$tmp/all" | sort | uniq -c | awk '{ printf "%s %s, ", $2, $1 }' | sed 's/, $//')"
echo "latency (normal, 200): p50 $(pct 50) s, p99 $(pct 99) s, max $(tail -n 1 "$tmp/lat" 2>/dev/null || echo -) s"
echo "generated tokens: ${gen:-?}, preemptions ${pre:-?}, governor runs ${gov:-?}"
awk -v f="$rss_first" -v e="$rss_early" -v l="$rss_last" -v p="$rss_peak" -v n="$n_samples" 'BEGIN {
	d = l - e; flat = (d <= 0.05 * e || d <= 4096) ? "flat" : "GROWING";
	printf "server RSS: peak %.1f MiB; first sample %.1f MiB, after a tenth of the run %.1f MiB, at the end %.1f MiB (%+.1f MiB, %s; %d samples)\n",
		p / 1024, f / 1024, e / 1024, l / 1024, d / 1024, flat, n }'
# RSS flat: medians of the first and last thirds of the samples after the warm-up
read -r rss_n rss_m1 rss_m3 rss_grow < <(awk -v w=$((secs / 10)) -v tol="$rss_tol" -v slack="$rss_slack" '
	function median(lo, hi,   i, j, k, n, t, v) {
		n = 0
		for (i = lo; i <= hi; i++) v[++n] = r[i]
		for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j] < v[j - 1]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
		k = int((n + 1) / 2)
		return n % 2 ? v[k] : (v[k] + v[k + 1]) / 2
	}
	NR > 1 && $1 >= w && $2 > 0 { r[++n] = $2 }
	END {
		if (n < 6) { print n + 0, 0, 0, 0; exit }
		t = int(n / 3); m1 = median(1, t); m3 = median(n - t + 1, n)
		allow = m1 * tol / 100; if (allow < slack) allow = slack
		print n, m1, m3, (m3 - m1 > allow) ? 1 : 0
	}' "$tmp/samples")
if [ "$rss_n" -ge 6 ]; then
	awk -v n="$rss_n" -v a="$rss_m1" -v b="$rss_m3" -v tol="$rss_tol" -v slack="$rss_slack" -v g="$rss_grow" 'BEGIN {
		printf "RSS check: median %.2f MiB over the first third of %d samples after the warm-up, %.2f MiB over the last third (%+.2f MiB, %+.1f%%; allowed %s%% or %.1f MiB): %s\n",
			a / 1024, n, b / 1024, (b - a) / 1024, a ? 100 * (b - a) / a : 0, tol, slack / 1024, g ? "GROWING" : "flat" }'
else
	echo "RSS check: skipped, $rss_n samples after the warm-up (need 6: run for 40 s or more)"
fi
awk -v p="$peak_kv" -v b="$budget" 'BEGIN { printf "KV: peak %d of %d bytes (--kv-mem), %.1f%%\n", p, b, b ? 100 * p / b : 0 }'
echo "server: $([ "$crashed" -eq 1 ] && echo CRASHED || echo alive), exit code $src"

rc=0
[ "$noanswer" -eq 0 ] || { echo "soak: FAIL: $noanswer requests got no answer"; rc=1; }
[ "$wrong" -eq 0 ] || { echo "soak: FAIL: $wrong wrong answers:"; awk '$4 == "wrong"' "$tmp/all" | sort | uniq -c | head; rc=1; }
[ "$crashed" -eq 0 ] && [ "$src" -eq 0 ] || { echo "soak: FAIL: the server crashed or exited $src"; tail -n 20 "$tmp/server.log"; rc=1; }
[ "$budget" -eq 0 ] || [ "${peak_kv%.*}" -le "$budget" ] || { echo "soak: FAIL: KV peak over --kv-mem"; rc=1; }
[ "$rss_grow" -eq 0 ] || { echo "soak: FAIL: the server's RSS grew"; rc=1; }
exit $rc
