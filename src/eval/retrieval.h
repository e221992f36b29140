/* retrieval.h - the retrieval tasks of `tierkv eval --retrieval`: prompt
 * generators over filler text and scorers of greedy answers.
 *
 * A sample is one prompt of a task at a length and a needle depth: filler
 * taken from the corpus (the -f files) at a random spot, in whole lines or
 * sentences (the last one cut at a word), with the task's needles placed at
 * depths given as fractions of the filler's tokens, between the task's header
 * and its question. Five formats (docs/retrieval.md gives the exact strings):
 *
 *   passkey     llama.cpp's examples/passkey: a number in 1..50000
 *   niah        RULER's single needle: "One of the special magic numbers for
 *               KEY is: VALUE." (a 7-digit value), the key asked
 *   multikey    four such needles with distinct keys at distinct random
 *               depths, the asked one at the chosen depth
 *   multivalue  four needles with one key and four values; all asked
 *   vartrack    RULER's variable tracking: a chain of four assignments
 *   copy        a 64-token passage of whole lines from another spot; the
 *               prompt ends with its first 16 tokens, the next 32 are the
 *               answer
 *
 * A sample's length L counts the whole sequence it takes: BOS, the prompt and
 * the task's answer tokens (so L <= the context always fits); the prompt is
 * within a percent or a few tokens of L minus the answer, never over. The
 * prompt is tokenized as one string; the token index of every needle, of the
 * haystack's start and of the question's start come from the tokens' byte
 * offsets in it.
 *
 * Everything is deterministic: a sample is a function of the corpus, the
 * task, L, the depth and its seed (retr_sample_seed mixes a run's seed with
 * those), not of the other samples or of the order they are made in.
 *
 * Memory: the corpus and samples allocate through the counting allocator
 * given to retr_corpus_init (NULL = uncounted); the tokenizer is borrowed. */
#ifndef TKV_EVAL_RETRIEVAL_H
#define TKV_EVAL_RETRIEVAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tierkv.h"


#define RETR_MAX_NEEDLES 4
#define RETR_KEY_MAX 24        /* a key: up to two 10-letter words, '-', NUL */
#define RETR_VAR_LEN 5         /* vartrack variable names: 5 uppercase letters */
#define RETR_COPY_PASSAGE 64   /* copy: tokens of the passage */
#define RETR_COPY_PREFIX 16    /* ... given again at the end of the prompt */
#define RETR_COPY_ANSWER 32    /* ... and the tokens expected after them */
#define RETR_ANSWER_MAX 256    /* bytes of a sample's expected answer as text */

enum retr_task_id {
	RETR_PASSKEY = 0,
	RETR_NIAH,
	RETR_MULTIKEY,
	RETR_MULTIVALUE,
	RETR_VARTRACK,
	RETR_COPY,
	RETR_TASK_COUNT
};

struct retr_corpus;

/* One prompt and what its answer must be. */
struct retr_sample {
	enum retr_task_id task;
	size_t length;                 /* L: prompt + answer tokens */
	double depth;                  /* requested, in [0, 1] */
	uint64_t seed;
	char *text;                    /* (text_len) the prompt without BOS, NUL-terminated; owned */
	size_t text_len;
	int32_t *ids;                  /* (n_ids) BOS (when the vocab adds one) + the prompt's tokens; owned */
	size_t n_ids;
	size_t hay_begin;              /* first token of the haystack (after BOS and the header) */
	size_t n_context;              /* ids[0..n_context): BOS, header, haystack; the rest is the question */
	size_t n_needles;
	size_t needle_tok[RETR_MAX_NEEDLES];   /* token index of each needle, in order of appearance */
	double needle_depth[RETR_MAX_NEEDLES]; /* the depth asked of each */
	size_t asked;                  /* the needle the question asks for (niah, multikey) */
	char keys[RETR_MAX_NEEDLES][RETR_KEY_MAX];    /* each needle's key (niah, multikey, multivalue) */
	uint32_t values[RETR_MAX_NEEDLES];            /* passkey: [0]; magic numbers; vartrack: [0] */
	char vars[RETR_MAX_NEEDLES][RETR_VAR_LEN + 1]; /* vartrack: the chain, in order */
	int32_t expect[RETR_COPY_ANSWER];             /* copy: the tokens expected */
	size_t n_expect;
	char answer[RETR_ANSWER_MAX];  /* the expected answer as text (for reports) */
};

/* A scored answer. */
struct retr_score {
	bool correct;
	size_t tok_match, tok_total;   /* copy: greedy tokens equal to the passage's, of 32 */
};

/* A task: its name, the most tokens its answer is generated for, whether
 * the answer is one line, its generator (fills s->text, ids and the answer
 * from s->task, length, depth and seed; on failure s holds nothing) and its
 * scorer (text: the generated tokens ids[0..n) decoded, up to the first
 * newline for a one-line answer). */
struct retr_task {
	const char *name;
	size_t n_answer;
	bool one_line;      /* the answer ends at its first newline (all but copy) */
	int (*make)(const struct retr_corpus *c, struct retr_sample *s, struct tkv_error *err);
	bool (*score)(const struct retr_sample *s, const char *text, const int32_t *ids, size_t n,
		      size_t *tok_match);
};

extern const struct retr_task retr_tasks[RETR_TASK_COUNT];

/* The task of that name (exactly as in retr_tasks), or -1. */
int retr_task_find(const char *name);

/* Builds the corpus from n texts (borrowed for the call; lens[i] bytes each,
 * any bytes): their lines, their sentences (lines split after '.', '?' or
 * '!' and a space) and the distinct lowercase words of 4-10 letters (the
 * keys). The vocabulary v is borrowed and must outlive the corpus. TKV_ERR_ARG (with a
 * message) when the texts have no line, or fewer than 8 such words;
 * TKV_ERR_NOMEM. */
int retr_corpus_init(struct retr_corpus **out, const struct tkv_vocab *v, const char *const *texts, const size_t *lens,
		     size_t n, struct tkv_alloc *a, struct tkv_error *err);
void retr_corpus_free(struct retr_corpus *c);

/* The seed of one sample: run_seed mixed with the task, L, the depth and the
 * sample's index. */
uint64_t retr_sample_seed(uint64_t run_seed, enum retr_task_id task, size_t length, double depth, size_t index);

/* Makes the sample of task at length L and depth (in [0, 1]) from seed into
 * s (overwritten; free with retr_sample_free). TKV_ERR_ARG with a message
 * when L cannot hold the task's fixed text and answer, TKV_ERR_UNSUPPORTED
 * when the tokenizer does not give the text back byte for byte (the offsets
 * need it), TKV_ERR_NOMEM. */
int retr_sample_make(const struct retr_corpus *c, enum retr_task_id task, size_t length, double depth,
		     uint64_t seed, struct retr_sample *s, struct tkv_error *err);
void retr_sample_free(const struct retr_corpus *c, struct retr_sample *s);

/* Decodes ids[0..n) as output text into buf (cap bytes, always NUL-terminated;
 * control tokens add nothing). Returns the length written. */
size_t retr_decode(const struct retr_corpus *c, const int32_t *ids, size_t n, char *buf, size_t cap);
/* Whether a greedy answer to s is over after gen[n - 1]: an
 * end-of-generation token, or (one-line answers) a piece with a newline. */
bool retr_answer_done(const struct retr_corpus *c, const struct retr_sample *s, const int32_t *gen, size_t n);
/* Scores the generated ids[0..n) of sample s. */
void retr_score(const struct retr_corpus *c, const struct retr_sample *s, const int32_t *ids, size_t n,
		struct retr_score *out);

#endif
