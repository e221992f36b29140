#!/bin/sh
# corpus.sh OUTDIR [TKV_TRAIN] - the King James Bible corpus and vocabulary
# for tkv-train.
#
# Needs Debian's bible-kjv (the text, public domain) and sentencepiece
# (spm_train, spm_export_vocab). Writes to OUTDIR:
#   books/NN_Abbr.txt   one document per book: the verses' text, one verse a
#                       line, without the references (66 files)
#   train/ dev/ reserved/  the books of each split (copies)
#   train.txt           the training books concatenated (input of spm_train)
#   dev.txt             the dev books concatenated (llama-perplexity's input)
#   kjv.model kjv.vocab the SentencePiece BPE vocabulary (2048 pieces with
#                       byte fallback), trained on the training books only
# and, given the path of the tkv-train binary:
#   kjv-vocab.gguf      that vocabulary as a GGUF tokenizer (tkv-train vocab)
#   train.tok dev.tok   the splits' tokens, one document per book (tkv-train prep)
# Splits: dev = Ruth, Jonah, Philemon, Jude; reserved (never trained on nor
# used for model selection) = Esther, Joel, Titus, 2 John, 3 John; train = the
# other 57 books. The same packages give the same files.
set -eu
out=${1:?usage: corpus.sh OUTDIR}
vocab_size=${VOCAB_SIZE:-2048}
command -v bible >/dev/null || { echo "corpus.sh: needs bible (apt-get install bible-kjv)" >&2; exit 1; }
command -v spm_train >/dev/null || { echo "corpus.sh: needs spm_train (apt-get install sentencepiece)" >&2; exit 1; }
mkdir -p "$out/books" "$out/train" "$out/dev" "$out/reserved"
rm -f "$out"/books/*.txt "$out"/train/*.txt "$out"/dev/*.txt "$out"/reserved/*.txt
bible -f "Gen1:1-Rev22:21" | awk -v dir="$out/books" '
{
	match($0, /^[0-9]?[A-Za-z]+/)
	book = substr($0, 1, RLENGTH)
	if (book != last) { n++; last = book; if (f) close(f); f = sprintf("%s/%02d_%s.txt", dir, n, book) }
	sub(/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ /, "")
	print > f
}'
[ "$(ls "$out/books" | wc -l)" -eq 66 ] || { echo "corpus.sh: expected 66 books" >&2; exit 1; }
for f in "$out"/books/*.txt; do
	b=$(basename "$f" .txt); b=${b#*_}
	case $b in
	Ruth|Jonah|Phmn|Jude) cp "$f" "$out/dev/" ;;
	Est|Joel|Titus|2Jn|3Jn) cp "$f" "$out/reserved/" ;;
	*) cp "$f" "$out/train/" ;;
	esac
done
cat "$out"/train/*.txt > "$out/train.txt"
cat "$out"/dev/*.txt > "$out/dev.txt"
spm_train --input="$out/train.txt" --model_prefix="$out/kjv" --vocab_size="$vocab_size" \
	--model_type=bpe --byte_fallback=true --character_coverage=1.0 \
	--normalization_rule_name=identity --remove_extra_whitespaces=false --split_digits=true \
	--unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --num_threads=2 \
	--input_sentence_size=0 --shuffle_input_sentence=false --minloglevel=2 >/dev/null 2>&1
spm_export_vocab --model="$out/kjv.model" --output="$out/kjv.vocab" --output_format=vocab
if [ -n "${2:-}" ]; then
	"$2" vocab --spm "$out/kjv.vocab" -o "$out/kjv-vocab.gguf"
	"$2" prep --vocab "$out/kjv-vocab.gguf" -o "$out/train.tok" "$out"/train/*.txt
	"$2" prep --vocab "$out/kjv-vocab.gguf" -o "$out/dev.tok" "$out"/dev/*.txt
fi
echo "corpus.sh: $(ls "$out/train" | wc -l) train, $(ls "$out/dev" | wc -l) dev, $(ls "$out/reserved" | wc -l) reserved books; $(wc -l < "$out/kjv.vocab") pieces -> $out" >&2
