/* tokenizer.h - text <-> token ids from GGUF metadata.
 *
 * Two models, chosen by `tokenizer.ggml.model`:
 *  - "llama": SentencePiece (scores, byte fallback <0xXX>, "▁" for spaces, a
 *    leading space added unless `tokenizer.ggml.add_space_prefix` is false).
 *  - "gpt2": byte-level BPE (ranked merges, GPT-2 byte<->unicode mapping) with a
 *    pre-tokenizer chosen by `tokenizer.ggml.pre` ("llama-bpe"/"llama3",
 *    "qwen2", "default"/"gpt-2", ...).
 * Special tokens (control / user-defined types from `tokenizer.ggml.token_type`)
 * are matched in the text when parse_special is set (user-defined ones always).
 * Encoding matches llama.cpp's llama_tokenize token for token, including its
 * handling of invalid UTF-8 (each bad byte is U+FFFD for BPE, a byte token for
 * SPM). Where llama.cpp throws (a code point past U+10FFFF in BPE input, an SPM
 * vocab without the needed <0xXX> token) we use U+FFFD / <unk> instead.
 *
 * Ownership: a tok borrows nothing from the gguf_file after tok_init returns
 * (it copies what it needs), so the file may be closed. It is read-only after
 * tok_init: any number of threads may encode and decode with one tok at once. */
#ifndef TKV_MODEL_TOKENIZER_H
#define TKV_MODEL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tierkv.h"

struct gguf_file;
struct tok;

enum tok_kind { TOK_SPM = 1, TOK_BPE = 2 };

/* tierkv.h's struct tkv_vocab is this tokenizer under its public name: nothing
 * defines struct tkv_vocab, so a pointer to one is always a struct tok. */
static inline const struct tok *tok_of_vocab(const struct tkv_vocab *v)
{
	return (const struct tok *)(const void *)v;
}

static inline const struct tkv_vocab *tok_vocab(const struct tok *t)
{
	return (const struct tkv_vocab *)(const void *)t;
}

/* Builds the tokenizer from the file's tokenizer.* keys. TKV_ERR_FORMAT with a
 * message when keys are missing or inconsistent (e.g. token_type length differs
 * from tokens), TKV_ERR_UNSUPPORTED for an unknown model/pre-tokenizer,
 * TKV_ERR_NOMEM. On success *out is the caller's (free with tok_free); on failure
 * it is NULL. Every allocation, then and in tok_encode, goes through a (may be
 * NULL), which must outlive the tok. */
int tok_init(struct tok **out, const struct gguf_file *g, struct tkv_alloc *a,
	     struct tkv_error *err);
/* t may be NULL. */
void tok_free(struct tok *t);

enum tok_kind tok_kind(const struct tok *t);
int32_t tok_n_vocab(const struct tok *t);
int32_t tok_bos(const struct tok *t);  /* -1 when none */
int32_t tok_eos(const struct tok *t);  /* -1 when none */
bool tok_add_bos(const struct tok *t); /* tokenizer.ggml.add_bos_token (SPM default true) */
/* True when encoding adds a leading space (SPM default), so a detokenizer drops
 * the space that starts the first decoded piece. */
bool tok_add_space_prefix(const struct tok *t);
/* True for control and unknown tokens (the ones tok_decode hides unless special). */
bool tok_is_control(const struct tok *t, int32_t id);
/* True for the tokens encoding splits out of the text: control, user-defined
 * and unknown ones. */
bool tok_is_special(const struct tok *t, int32_t id);
/* True for end-of-generation tokens (eos, eot, <|im_end|>, ...). */
bool tok_is_eog(const struct tok *t, int32_t id);

/* Encodes len bytes of text (any bytes; invalid UTF-8 is handled, never read past
 * len). Writes up to n_max ids; *n_out receives the number the full encoding
 * needs, so a call with n_max too small returns TKV_ERR_ARG and the caller can
 * retry with *n_out (ids may be NULL when n_max is 0). add_bos prepends BOS (if
 * the vocab has one). SPM adds its leading space to the start of the text and
 * after every special token, as llama.cpp does. Other failures: TKV_ERR_NOMEM
 * (scratch memory; *n_out is 0), TKV_ERR_ARG for NULL arguments or a run of text
 * between special tokens longer than 256 MiB. */
int tok_encode(const struct tok *t, const char *text, size_t len, bool add_bos,
	       bool parse_special, int32_t *ids, size_t n_max, size_t *n_out);

/* The text piece of id as stored in the vocabulary (borrowed, len in *len), or
 * NULL for an out-of-range id. */
const char *tok_piece(const struct tok *t, int32_t id, size_t *len);

/* The bytes id stands for in output text: "▁" -> ' ', <0x0A> -> '\n', BPE bytes
 * unmapped; control and unknown tokens give 0 bytes unless `special`, unused
 * ones always 0 (as llama.cpp's token_to_piece). Writes up to cap bytes to buf
 * and returns the full byte count (may exceed cap), or TKV_ERR_ARG for an
 * invalid id. No piece is longer than tok_stream_min_cap(t) / 3 bytes. */
int tok_decode(const struct tok *t, int32_t id, bool special, char *buf, size_t cap);

/* Streaming decode that never emits a partial UTF-8 sequence: bytes of an
 * incomplete character wait for the next token; invalid sequences come out as
 * U+FFFD (one per maximal invalid subpart). Control tokens add nothing.
 * Zero-initialise; tok_stream_flush emits what is left. */
struct tok_stream {
	unsigned char pend[8];
	size_t n_pend;
};
/* Appends the bytes of id; writes complete UTF-8 to out (cap bytes) and returns
 * the count written, or a negative status. 64 bytes are enough for common
 * pieces; tok_stream_min_cap(t) bytes are enough for every piece of the vocab.
 * When the output does not fit, returns TKV_ERR_ARG and leaves s unchanged. */
int tok_stream_push(const struct tok *t, struct tok_stream *s, int32_t id,
		    char *out, size_t cap);
/* Emits U+FFFD for an incomplete character still pending (needs cap >= 3 then)
 * and resets s; returns the count written. */
int tok_stream_flush(struct tok_stream *s, char *out, size_t cap);
/* Output room that makes tok_stream_push always succeed with this vocab. */
size_t tok_stream_min_cap(const struct tok *t);

#endif
