#!/bin/bash
# tierkv chat: a conversation through a pseudo-terminal (tests/chat_pty.py:
# turns, Ctrl-C mid-reply, /stats, /reset, a forced template, Ctrl-C twice and
# end of input), then piped input: binary bytes, invalid UTF-8 and an
# over-long line get a message and the conversation goes on; usage errors.
. "$(dirname "$0")/lib_cli.sh"

python3 "$(dirname "$0")/chat_pty.py" "$bin" "$model" && ok || bad "chat through a pseudo-terminal"

# chat_run INPUT-FILE ARGS...: stdout to $tmp/out, stderr to $tmp/err, exit code in $got
chat_run() {
	local in=$1
	shift
	"$bin" chat -m "$model" --temp 0 -n 8 -v "$@" <"$in" >"$tmp/out" 2>"$tmp/err"
	got=$?
}
# has FILE PATTERN WHAT: the file matches the extended pattern
has() { grep -qE -- "$2" "$1" && ok || bad "$3: no /$2/ in $(head -c 600 "$1")"; }

# bad input between good turns
{
	printf 'Hello\n'
	printf 'a\000b binary\n'
	head -c 300 /dev/urandom | tr -d '\n'; printf '\n'
	printf 'caf\303 broken\n'
	printf 'over %070000d long\n' 0
	printf 'Goodbye\n'
} >"$tmp/bad.txt"
chat_run "$tmp/bad.txt"
[ "$got" -eq 0 ] && ok || bad "bad input: exit $got"
has "$tmp/err" "control byte \(binary input\?\) \(byte 0x00 at offset 1\): ignored" "a NUL byte"
has "$tmp/err" "is not valid UTF-8 \(byte 0xc3 at offset 3\): ignored" "invalid UTF-8"
has "$tmp/err" "the line is 70010 bytes, more than 65536: ignored" "an over-long line"
has "$tmp/err" "\[turn 2: fed [0-9]+ new tokens, reused [1-9][0-9]* cached positions" "the turn after bad input"
[ "$(grep -c '^\[turn' "$tmp/err")" -eq 2 ] && ok || bad "bad input: $(grep -c '^\[turn' "$tmp/err") turns, want 2"

# a message longer than the cache (-c 32) is refused; the conversation goes on
{ printf 'Once upon a time there was a little girl named Lily who loved to play outside in the sun with her friends\n'; printf 'Hi\n'; } >"$tmp/long.txt"
chat_run "$tmp/long.txt" -c 32
[ "$got" -eq 0 ] && ok || bad "-c 32: exit $got"
has "$tmp/err" "more than the cache is sized for \(-c 32\): ignored" "a message over -c"
has "$tmp/err" "\[turn 1: fed [0-9]+ new tokens, reused 0" "the turn after a refused message"

# --max-pos: the conversation starts over from the system prompt
printf 'One\nTwo\nThree\nFour\n' >"$tmp/four.txt"
chat_run "$tmp/four.txt" --max-pos 40 -sys "Be brief." -n 12 --ignore-eos
[ "$got" -eq 0 ] && ok || bad "--max-pos: exit $got"
has "$tmp/err" "the conversation starts over from the system prompt" "--max-pos restart"
[ "$(grep -c '^\[turn' "$tmp/err")" -eq 4 ] && ok || bad "--max-pos: $(grep -c '^\[turn' "$tmp/err") turns, want 4"

# policy full under a small --kv-mem: the cache fills, the conversation starts over and goes on
printf 'One\nTwo\nThree\n/stats\n' >"$tmp/full.txt"
chat_run "$tmp/full.txt" --kv-policy full --kv-mem 200K -n 200 --ignore-eos
[ "$got" -eq 0 ] && ok || bad "policy full: exit $got"
has "$tmp/err" "budget exhausted.*the conversation starts over" "policy full, cache full"
[ "$(grep -c '^\[turn' "$tmp/err")" -eq 3 ] && ok || bad "policy full: $(grep -c '^\[turn' "$tmp/err") turns, want 3"

# forced templates: the second turn feeds only the turn end and the new turn
# (also where the template rewrites its history: Mistral Nemo writes the
# system text into the newest user turn); tierkv tokenize counts the tokens
n_tokens() { "$bin" tokenize -m "$model" --ids --no-bos -f "$1" | tr ',' '\n' | grep -c '[0-9]'; }
printf 'Hi\nMore\n' >"$tmp/two.txt"
for fam in gemma llama-3 mistral-nemo phi-3; do
	case $fam in
	gemma) printf '<end_of_turn>\n<start_of_turn>user\nMore<end_of_turn>\n<start_of_turn>model\n' ;;
	llama-3) printf '<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nMore<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n' ;;
	mistral-nemo) printf '</s>[INST]Be brief.\n\nMore[/INST]' ;;
	phi-3) printf '<|end|>\n<|user|>\nMore<|end|>\n<|assistant|>\n' ;;
	esac >"$tmp/delta.txt"
	chat_run "$tmp/two.txt" --chat-template $fam -sys "Be brief." -n 12
	want=$(n_tokens "$tmp/delta.txt")
	has "$tmp/err" "\[turn 2: fed $want new tokens" "--chat-template $fam, turn 2 (want $want)"
done

# empty input: exit 0 at once; usage errors
chat_run /dev/null
[ "$got" -eq 0 ] && ok || bad "empty input: exit $got"
expect 0 "" chat --help
expect 2 "unknown option" chat --bogus
expect 2 "unknown format 'nope'" chat -m "$model" --chat-template nope
expect 2 "needs a value" chat -m "$model" -sys
expect 1 "" chat -m "$tmp/missing.gguf"

echo "cli_chat: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
