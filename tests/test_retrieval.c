/* test_retrieval.c - the retrieval tasks' generators and scorers
 * (src/eval/retrieval.c) with stories260K's tokenizer over the KJV books of
 * eval/kjv: prompt lengths within a percent under the target, needles where
 * the sample says and at the depth asked, the templates, determinism by
 * seed, distinct keys, values and variables, scorers that take right answers
 * and refuse near misses, and allocation failures. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/retrieval.h"
#include "model/model.h"
#include "model/tokenizer.h"

#define N_BOOKS 4
#define DEPTH_TOL 0.02   /* needle position: share of the haystack's tokens */
#define LEN_TOL 0.02     /* prompt length under the target: share of the target */
#define STARTS(text, lit) (!strncmp((text), lit, sizeof lit - 1))

static const char *const books[N_BOOKS] = { "08_Ruth.txt", "32_Jonah.txt", "57_Phmn.txt", "65_Jude.txt" };

struct fix {
	struct tkv_model *m;
	const struct tok *tok;
	char *texts[N_BOOKS];
	size_t lens[N_BOOKS];
	struct retr_corpus *c;
	struct tkv_alloc alloc;
	size_t max_line;   /* tokens of the longest line of the books */
};

static struct fix F;

static int setup(void **state)
{
	struct tkv_model_params mp = tkv_model_default_params();
	struct tkv_error err = { 0 };
	const char *path = tu_model_path("stories260K.gguf"), *dir = getenv("TIERKV_EVAL_DIR");
	char buf[4096];

	(void)state;
	memset(&F, 0, sizeof F);
	if (!path)
		fail_msg("stories260K.gguf not found (set TIERKV_MODELS)");
	if (tkv_model_load(&F.m, path, &mp, &err))
		fail_msg("%s", err.msg);
	F.tok = model_tokenizer(F.m);
	for (int i = 0; i < N_BOOKS; i++) {
		snprintf(buf, sizeof buf, "%s/kjv/%s", dir && *dir ? dir : "eval", books[i]);
		if (!(F.texts[i] = tu_read_file(buf, &F.lens[i])))
			fail_msg("cannot read %s (set TIERKV_EVAL_DIR)", buf);
	}
	for (int i = 0; i < N_BOOKS; i++)
		for (char *p = F.texts[i], *nl; *p; p = nl + 1) {
			size_t n = 0;

			if (!(nl = strchr(p, '\n')))
				nl = p + strlen(p) - 1;
			tok_encode(F.tok, p, (size_t)(nl - p), false, false, NULL, 0, &n);
			if (n > F.max_line)
				F.max_line = n;
		}
	if (retr_corpus_init(&F.c, tok_vocab(F.tok), (const char *const *)F.texts, F.lens, N_BOOKS, &F.alloc, &err))
		fail_msg("%s", err.msg);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	retr_corpus_free(F.c);
	for (int i = 0; i < N_BOOKS; i++)
		free(F.texts[i]);
	tkv_model_free(F.m);
	return 0;
}

/* Tokens of text alone (no BOS). */
static size_t n_tokens(const char *text)
{
	size_t n = 0;

	tok_encode(F.tok, text, strlen(text), false, false, NULL, 0, &n);
	return n;
}

/* The text of needle i of s, as the generator writes it (copy: none). */
static bool needle_text(const struct retr_sample *s, size_t i, char *buf, size_t cap)
{
	switch (s->task) {
	case RETR_PASSKEY:
		snprintf(buf, cap, "The pass key is %u. Remember it. %u is the pass key.", s->values[0], s->values[0]);
		return true;
	case RETR_NIAH:
	case RETR_MULTIKEY:
	case RETR_MULTIVALUE:
		snprintf(buf, cap, "One of the special magic numbers for %s is: %u.", s->keys[i], s->values[i]);
		return true;
	case RETR_VARTRACK:
		if (i == 0)
			snprintf(buf, cap, "VAR %s = %u.", s->vars[0], s->values[0]);
		else
			snprintf(buf, cap, "VAR %s = VAR %s.", s->vars[i], s->vars[i - 1]);
		return true;
	default:
		return false;
	}
}

/* The prompt's text from token k on starts with want (after one separator). */
static void assert_text_at(const struct retr_sample *s, size_t k, const char *want)
{
	char got[1024];
	const char *p = got;

	retr_decode(F.c, s->ids + k, s->n_ids - k < 200 ? s->n_ids - k : 200, got, sizeof got);
	if (*p == ' ' || *p == '\n')
		p++;
	if (strncmp(p, want, strlen(want)))
		fail_msg("%s: token %zu reads '%.60s', want '%s'", retr_tasks[s->task].name, k, p, want);
}

/* Length, needles, depths and template of one sample. */
static void check_sample(const struct retr_sample *s)
{
	const struct retr_task *t = &retr_tasks[s->task];
	size_t target = s->length - t->n_answer, hay, nd_total = 0, nd_tok[RETR_MAX_NEEDLES];
	char nd[RETR_MAX_NEEDLES][256];

	assert_true(s->n_ids <= target);
	if ((double)s->n_ids < (1.0 - LEN_TOL) * (double)target)
		fail_msg("%s at %zu, depth %g: %zu tokens, target %zu", t->name, s->length, s->depth, s->n_ids, target);
	assert_int_equal(s->ids[0], tok_bos(F.tok));
	/* the prompt as a whole string gives exactly its tokens */
	{
		int32_t *ids = malloc((s->n_ids + 8) * sizeof *ids);
		size_t n = 0;

		assert_non_null(ids);
		assert_int_equal(tok_encode(F.tok, s->text, s->text_len, true, false, ids, s->n_ids + 8, &n), TKV_OK);
		assert_int_equal(n, s->n_ids);
		assert_memory_equal(ids, s->ids, n * sizeof *ids);
		free(ids);
	}
	assert_true(s->hay_begin >= 1 && s->hay_begin < s->n_context && s->n_context < s->n_ids);
	assert_true(s->n_needles >= 1 && s->n_needles <= RETR_MAX_NEEDLES);
	for (size_t i = 0; i < s->n_needles; i++) {
		assert_true(s->needle_tok[i] >= s->hay_begin && s->needle_tok[i] < s->n_context);
		if (i)
			assert_true(s->needle_tok[i] > s->needle_tok[i - 1]);
		if (needle_text(s, i, nd[i], sizeof nd[i])) {
			char *first = strstr(s->text, nd[i]);

			assert_non_null(first);
			if (s->task != RETR_MULTIVALUE && s->task != RETR_VARTRACK)
				assert_null(strstr(first + 1, nd[i]));
			assert_text_at(s, s->needle_tok[i], nd[i]);
			nd_tok[i] = n_tokens(nd[i]);
		} else {
			nd_tok[i] = RETR_COPY_PASSAGE;
		}
		nd_total += nd_tok[i];
	}
	/* each needle at its depth: filler tokens before it over all filler,
	 * give or take half a line (needles go between lines) */
	hay = s->n_context - s->hay_begin;
	for (size_t i = 0, before = 0; i < s->n_needles; i++) {
		double fill = (double)hay - (double)nd_total;
		double want = s->needle_depth[i] * fill + (double)before;
		double got = (double)(s->needle_tok[i] - s->hay_begin);

		double tol = DEPTH_TOL * (double)hay + (double)F.max_line / 2;

		if (got - want > tol || want - got > tol)
			fail_msg("%s at %zu: needle %zu asked at depth %g is at token %.0f of %zu (want %.0f)", t->name,
				 s->length, i, s->needle_depth[i], got, hay, want);
		before += nd_tok[i];
	}
	switch (s->task) {
	case RETR_PASSKEY:
		assert_true(STARTS(s->text, "There is an important info hidden inside a lot of irrelevant text. "
				   "Find it and memorize them. I will quiz you about the important information there. "));
		assert_string_equal(s->text + s->text_len - 38, " What is the pass key? The pass key is");
		assert_null(strchr(s->text, '\n'));
		break;
	case RETR_NIAH:
	case RETR_MULTIKEY: {
		char q[512];

		snprintf(q, sizeof q, "\nWhat is the special magic number for %s mentioned in the provided text? The "
			 "special magic number for %s mentioned in the provided text is", s->keys[s->asked],
			 s->keys[s->asked]);
		assert_true(STARTS(s->text, "Some special magic numbers are hidden within the following text. Make "
				   "sure to memorize it. I will quiz you about the numbers afterwards.\n"));
		assert_string_equal(s->text + s->text_len - strlen(q), q);
		assert_text_at(s, s->n_context, q + 1);
		break;
	}
	case RETR_MULTIVALUE: {
		char q[512];

		snprintf(q, sizeof q, "\nWhat are all the special magic numbers for %s mentioned in the provided text? "
			 "The special magic numbers for %s mentioned in the provided text are", s->keys[0], s->keys[0]);
		assert_string_equal(s->text + s->text_len - strlen(q), q);
		break;
	}
	case RETR_VARTRACK: {
		char q[512];

		snprintf(q, sizeof q, "\nQuestion: Find all variables that are assigned the value %u in the text "
			 "above. Answer: According to the chain(s) of variables assigned in the text above, 4 "
			 "variables are assigned the value %u, they are:", s->values[0], s->values[0]);
		assert_true(STARTS(s->text, "Memorize and track the chain(s) of variable assignment hidden in the "
				   "following text.\n"));
		assert_string_equal(s->text + s->text_len - strlen(q), q);
		break;
	}
	case RETR_COPY: {
		size_t nt = s->needle_tok[0];

		/* the prompt ends with a newline and the passage's first 16 tokens,
		 * the answer is its next 32 */
		assert_int_equal(s->n_expect, RETR_COPY_ANSWER);
		assert_memory_equal(s->expect, s->ids + nt + RETR_COPY_PREFIX, RETR_COPY_ANSWER * sizeof *s->ids);
		assert_memory_equal(s->ids + s->n_ids - (RETR_COPY_PREFIX - 1), s->ids + nt + 1,
				    (RETR_COPY_PREFIX - 1) * sizeof *s->ids);
		break;
	}
	default:
		fail();
	}
}

static void test_tasks_table(void **state)
{
	(void)state;
	for (int i = 0; i < RETR_TASK_COUNT; i++) {
		assert_int_equal(retr_task_find(retr_tasks[i].name), i);
		assert_non_null(retr_tasks[i].make);
		assert_non_null(retr_tasks[i].score);
		assert_true(retr_tasks[i].n_answer >= 12 && retr_tasks[i].n_answer <= 64);
	}
	assert_int_equal(retr_task_find("copy"), RETR_COPY);
	assert_int_equal(retr_task_find("bogus"), -1);
	assert_int_equal(retr_task_find("Passkey"), -1);
	assert_true(retr_tasks[RETR_MULTIVALUE].n_answer >= 48);
	assert_int_equal(retr_tasks[RETR_COPY].n_answer, RETR_COPY_ANSWER);
}

/* Every task at two lengths and five depths. */
static void test_lengths_and_depths(void **state)
{
	static const size_t lens[] = { 1024, 4096 };
	static const double depths[] = { 0, 0.25, 0.5, 0.75, 1 };

	(void)state;
	for (int t = 0; t < RETR_TASK_COUNT; t++)
		for (size_t l = 0; l < 2; l++)
			for (size_t d = 0; d < 5; d++) {
				struct retr_sample s;
				struct tkv_error err = { 0 };
				uint64_t seed = retr_sample_seed(7, (enum retr_task_id)t, lens[l], depths[d], 0);

				if (retr_sample_make(F.c, (enum retr_task_id)t, lens[l], depths[d], seed, &s, &err))
					fail_msg("%s at %zu, depth %g: %s", retr_tasks[t].name, lens[l], depths[d], err.msg);
				assert_int_equal(s.task, t);
				assert_int_equal(s.length, lens[l]);
				check_sample(&s);
				retr_sample_free(F.c, &s);
			}
}

static void test_determinism(void **state)
{
	(void)state;
	assert_true(retr_sample_seed(1, RETR_NIAH, 4096, 0.5, 0) == retr_sample_seed(1, RETR_NIAH, 4096, 0.5, 0));
	assert_true(retr_sample_seed(1, RETR_NIAH, 4096, 0.5, 0) != retr_sample_seed(1, RETR_NIAH, 4096, 0.5, 1));
	assert_true(retr_sample_seed(1, RETR_NIAH, 4096, 0.5, 0) != retr_sample_seed(2, RETR_NIAH, 4096, 0.5, 0));
	assert_true(retr_sample_seed(1, RETR_NIAH, 4096, 0.5, 0) != retr_sample_seed(1, RETR_COPY, 4096, 0.5, 0));
	assert_true(retr_sample_seed(1, RETR_NIAH, 4096, 0.5, 0) != retr_sample_seed(1, RETR_NIAH, 4096, 0.25, 0));
	for (int t = 0; t < RETR_TASK_COUNT; t++) {
		struct retr_sample a, b, c;
		struct tkv_error err = { 0 };

		assert_int_equal(retr_sample_make(F.c, (enum retr_task_id)t, 2048, 0.3, 11, &a, &err), TKV_OK);
		assert_int_equal(retr_sample_make(F.c, (enum retr_task_id)t, 2048, 0.3, 11, &b, &err), TKV_OK);
		assert_int_equal(retr_sample_make(F.c, (enum retr_task_id)t, 2048, 0.3, 12, &c, &err), TKV_OK);
		assert_string_equal(a.text, b.text);
		assert_int_equal(a.n_ids, b.n_ids);
		assert_memory_equal(a.ids, b.ids, a.n_ids * sizeof *a.ids);
		assert_string_equal(a.answer, b.answer);
		assert_int_equal(a.n_context, b.n_context);
		assert_memory_equal(a.needle_tok, b.needle_tok, sizeof a.needle_tok);
		assert_true(strcmp(a.text, c.text) != 0);
		retr_sample_free(F.c, &a);
		retr_sample_free(F.c, &b);
		retr_sample_free(F.c, &c);
	}
}

/* A key is a lowercase corpus word of 4-10 letters, or two joined by '-'. */
static void check_key(const char *k)
{
	const char *dash = strchr(k, '-');

	for (int part = 0; part < (dash ? 2 : 1); part++) {
		const char *w = part ? dash + 1 : k;
		size_t len = part || !dash ? strlen(w) : (size_t)(dash - k);
		char word[16];
		bool found = false;

		assert_true(len >= 4 && len <= 10);
		for (size_t i = 0; i < len; i++)
			assert_true(w[i] >= 'a' && w[i] <= 'z');
		snprintf(word, sizeof word, "%.*s", (int)len, w);
		for (int b = 0; b < N_BOOKS && !found; b++)
			found = strstr(F.texts[b], word) != NULL;
		if (!found)
			fail_msg("key word '%s' is not in the filler", word);
	}
}

static void test_distinct(void **state)
{
	int pairs = 0, singles = 0;

	(void)state;
	for (uint64_t seed = 1; seed <= 24; seed++) {
		struct retr_sample s;
		struct tkv_error err = { 0 };

		assert_int_equal(retr_sample_make(F.c, RETR_MULTIKEY, 1024, 0.5, seed, &s, &err), TKV_OK);
		assert_int_equal(s.n_needles, 4);
		assert_true(s.asked < 4);
		assert_true(s.needle_depth[s.asked] == 0.5);
		for (size_t i = 0; i < 4; i++) {
			check_key(s.keys[i]);
			strchr(s.keys[i], '-') ? pairs++ : singles++;
			assert_true(s.values[i] >= 1000000 && s.values[i] <= 9999999);
			for (size_t j = 0; j < i; j++) {
				assert_true(strcmp(s.keys[i], s.keys[j]) != 0);
				assert_true(s.values[i] != s.values[j]);
			}
		}
		assert_int_equal(strtoul(s.answer, NULL, 10), s.values[s.asked]);
		retr_sample_free(F.c, &s);

		assert_int_equal(retr_sample_make(F.c, RETR_MULTIVALUE, 1024, 0.2, seed, &s, &err), TKV_OK);
		for (size_t i = 0; i < 4; i++) {
			assert_string_equal(s.keys[i], s.keys[0]);
			for (size_t j = 0; j < i; j++)
				assert_true(s.values[i] != s.values[j]);
		}
		retr_sample_free(F.c, &s);

		assert_int_equal(retr_sample_make(F.c, RETR_VARTRACK, 1024, 0.2, seed, &s, &err), TKV_OK);
		assert_true(s.values[0] >= 10000 && s.values[0] <= 99999);
		for (size_t i = 0; i < 4; i++) {
			assert_int_equal(strlen(s.vars[i]), RETR_VAR_LEN);
			for (size_t k = 0; k < RETR_VAR_LEN; k++)
				assert_true(s.vars[i][k] >= 'A' && s.vars[i][k] <= 'Z');
			for (size_t j = 0; j < i; j++)
				assert_true(strcmp(s.vars[i], s.vars[j]) != 0);
		}
		retr_sample_free(F.c, &s);

		assert_int_equal(retr_sample_make(F.c, RETR_PASSKEY, 1024, 0.2, seed, &s, &err), TKV_OK);
		assert_true(s.values[0] >= 1 && s.values[0] <= 50000);
		retr_sample_free(F.c, &s);
	}
	/* about half the keys are pairs */
	assert_true(pairs > 16 && singles > 16);
}

static void test_bad_requests(void **state)
{
	struct retr_sample s;
	struct tkv_error err = { 0 };
	struct retr_corpus *c = NULL;
	const char *none[1] = { "\n\n  \n" }, *few[1] = { "the king\nand the queen went home" };
	size_t none_len[1] = { 5 }, few_len[1] = { 32 };

	(void)state;
	assert_int_equal(retr_sample_make(F.c, RETR_NIAH, 64, 0.5, 1, &s, &err), TKV_ERR_ARG);
	assert_non_null(strstr(err.msg, "niah needs"));
	assert_null(s.text);
	assert_int_equal(retr_sample_make(F.c, RETR_COPY, 32, 0.5, 1, &s, &err), TKV_ERR_ARG);
	assert_int_equal(retr_sample_make(F.c, RETR_NIAH, 1024, 1.5, 1, &s, &err), TKV_ERR_ARG);
	assert_int_equal(retr_sample_make(F.c, RETR_NIAH, 1024, -0.1, 1, &s, &err), TKV_ERR_ARG);
	assert_int_equal(retr_corpus_init(&c, tok_vocab(F.tok), none, none_len, 1, NULL, &err), TKV_ERR_ARG);
	assert_null(c);
	assert_int_equal(retr_corpus_init(&c, tok_vocab(F.tok), few, few_len, 1, NULL, &err), TKV_ERR_ARG);
	assert_non_null(strstr(err.msg, "words"));
	assert_null(c);
	retr_corpus_free(NULL);
	retr_sample_free(F.c, NULL);
}

/* A sample with only what the scorers read. */
static struct retr_sample scored(enum retr_task_id t)
{
	struct retr_sample s;

	memset(&s, 0, sizeof s);
	s.task = t;
	return s;
}

static bool says(const struct retr_sample *s, const char *text)
{
	size_t tm = 0;

	return retr_tasks[s->task].score(s, text, NULL, 0, &tm);
}

static void test_score_numbers(void **state)
{
	struct retr_sample pk = scored(RETR_PASSKEY), nk = scored(RETR_MULTIKEY);

	(void)state;
	pk.values[0] = 12345;
	assert_true(says(&pk, " 12345."));
	assert_true(says(&pk, "12345"));
	assert_true(says(&pk, "   12345 is the pass key"));
	assert_false(says(&pk, " 123456"));
	assert_false(says(&pk, " 1234"));
	assert_false(says(&pk, " 1234."));
	assert_false(says(&pk, " 012345"));
	assert_false(says(&pk, " The pass key is 12345."));
	assert_false(says(&pk, ""));
	assert_false(says(&pk, "\n12345"));

	nk.values[0] = 1111111;
	nk.values[2] = 1234567;
	nk.asked = 2;
	assert_true(says(&nk, " 1234567."));
	assert_true(says(&nk, " 1234567\n"));
	assert_false(says(&nk, " 12345678"));
	assert_false(says(&nk, " 123456."));
	assert_false(says(&nk, " 1111111."));   /* another needle's value */
}

static void test_score_multivalue(void **state)
{
	struct retr_sample s = scored(RETR_MULTIVALUE);

	(void)state;
	s.values[0] = 1111111;
	s.values[1] = 2222222;
	s.values[2] = 3333333;
	s.values[3] = 4444444;
	assert_true(says(&s, " 1111111, 2222222, 3333333, and 4444444."));
	assert_true(says(&s, " 4444444, 2222222, 1111111, and 3333333."));   /* any order */
	assert_true(says(&s, "1111111 2222222 3333333 4444444 5555555"));    /* extra numbers pass */
	assert_false(says(&s, " 1111111, 2222222, and 3333333."));           /* one missing */
	assert_false(says(&s, " 1111111, 2222222, 3333333, and 44444445.")); /* not a whole number */
	assert_false(says(&s, " 1111111, 2222222, 3333333, and 444444."));
	assert_false(says(&s, " 11111112222222, 3333333, and 4444444."));
}

static void test_score_vartrack(void **state)
{
	struct retr_sample s = scored(RETR_VARTRACK);
	static const char *const v[4] = { "ABCDE", "FGHIJ", "KLMNO", "PQRST" };

	(void)state;
	for (int i = 0; i < 4; i++)
		memcpy(s.vars[i], v[i], 6);
	assert_true(says(&s, " ABCDE FGHIJ KLMNO PQRST"));
	assert_true(says(&s, " PQRST KLMNO ABCDE FGHIJ."));            /* a set */
	assert_true(says(&s, " VAR ABCDE, VAR FGHIJ, KLMNO and PQRST")); /* other words ignored */
	assert_true(says(&s, " ABCDE FGHIJ KLMNO PQRST ABCDE"));
	assert_false(says(&s, " ABCDE FGHIJ KLMNO PQRST UVWXY"));      /* an extra variable */
	assert_false(says(&s, " ABCDE FGHIJ KLMNO"));                  /* one missing */
	assert_false(says(&s, " ABCDEF FGHIJ KLMNO PQRST"));           /* not the name */
	assert_false(says(&s, " abcde FGHIJ KLMNO PQRST"));
	assert_false(says(&s, ""));
}

/* The answer as tokens: retr_score decodes them and stops at a newline. */
static void test_score_tokens(void **state)
{
	struct retr_sample s = scored(RETR_MULTIVALUE), cp = scored(RETR_COPY);
	struct retr_score sc;
	int32_t ids[64], nl;
	size_t n = 0;
	const char *right = " 1111111, 2222222, 3333333, and 4444444.", *split = " 1111111, 2222222\n3333333, 4444444.";

	(void)state;
	s.values[0] = 1111111;
	s.values[1] = 2222222;
	s.values[2] = 3333333;
	s.values[3] = 4444444;
	assert_int_equal(tok_encode(F.tok, right + 1, strlen(right + 1), false, false, ids, 64, &n), TKV_OK);
	retr_score(F.c, &s, ids, n, &sc);
	assert_true(sc.correct);
	assert_int_equal(tok_encode(F.tok, split + 1, strlen(split + 1), false, false, ids, 64, &n), TKV_OK);
	retr_score(F.c, &s, ids, n, &sc);
	assert_false(sc.correct);   /* the values after the newline do not count */

	/* copy compares tokens */
	cp.n_expect = RETR_COPY_ANSWER;
	for (int i = 0; i < RETR_COPY_ANSWER; i++)
		cp.expect[i] = ids[i] = 100 + i;
	retr_score(F.c, &cp, ids, RETR_COPY_ANSWER, &sc);
	assert_true(sc.correct);
	assert_int_equal(sc.tok_match, 32);
	assert_int_equal(sc.tok_total, 32);
	ids[31] = 99;
	retr_score(F.c, &cp, ids, RETR_COPY_ANSWER, &sc);
	assert_false(sc.correct);
	assert_int_equal(sc.tok_match, 31);
	ids[31] = 131;
	retr_score(F.c, &cp, ids, RETR_COPY_ANSWER - 1, &sc);   /* stopped early */
	assert_false(sc.correct);
	assert_int_equal(sc.tok_match, 31);

	/* an answer ends at a newline or an end-of-generation token */
	assert_int_equal(tok_encode(F.tok, "\n", 1, false, false, ids, 64, &n), TKV_OK);
	nl = ids[n - 1];
	ids[0] = 300;
	ids[1] = nl;
	assert_false(retr_answer_done(F.c, &s, ids, 1));
	assert_true(retr_answer_done(F.c, &s, ids, 2));
	assert_false(retr_answer_done(F.c, &cp, ids, 2));   /* copy goes on over lines */
	ids[1] = tok_eos(F.tok);
	assert_true(retr_answer_done(F.c, &s, ids, 2));
	assert_true(retr_answer_done(F.c, &cp, ids, 2));
	assert_false(retr_answer_done(F.c, &s, ids, 0));
}

/* Every allocation of the corpus and of a sample of each task, failed in
 * turn: TKV_ERR_NOMEM, and nothing left allocated. */
static void test_alloc_failures(void **state)
{
	const char *texts[2] = { F.texts[2], F.texts[3] };
	size_t lens[2] = { F.lens[2], F.lens[3] };

	(void)state;
	for (unsigned long long k = 1;; k++) {
		struct tkv_alloc a = { 0 };
		struct retr_corpus *c = NULL;
		struct tkv_error err = { 0 };
		int st = TKV_OK;

		a.fail_at = k;
		st = retr_corpus_init(&c, tok_vocab(F.tok), texts, lens, 2, &a, &err);
		for (int t = 0; !st && t < RETR_TASK_COUNT; t++) {
			struct retr_sample s;

			st = retr_sample_make(c, (enum retr_task_id)t, 640, 0.5, 3, &s, &err);
			if (!st)
				retr_sample_free(c, &s);
		}
		retr_corpus_free(c);
		assert_int_equal(atomic_load(&a.live), 0);
		if (st == TKV_OK) {
			assert_true(k > 8);
			break;
		}
		assert_int_equal(st, TKV_ERR_NOMEM);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tasks_table),
		cmocka_unit_test(test_lengths_and_depths),
		cmocka_unit_test(test_determinism),
		cmocka_unit_test(test_distinct),
		cmocka_unit_test(test_bad_requests),
		cmocka_unit_test(test_score_numbers),
		cmocka_unit_test(test_score_multivalue),
		cmocka_unit_test(test_score_vartrack),
		cmocka_unit_test(test_score_tokens),
		cmocka_unit_test(test_alloc_failures),
	};

	return cmocka_run_group_tests_name("retrieval", tests, setup, teardown);
}
