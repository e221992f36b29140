/* tokenize.c - `tierkv tokenize`: token ids and pieces of a text. Needs only
 * the vocabulary, so a vocab-only GGUF works. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void tokenize_help(void)
{
	printf("usage: tierkv tokenize -m MODEL [-p TEXT | -f FILE] [--ids] [--no-bos] [--no-special]\n"
	       "\n"
	       "Prints one token per line as 'id -> 'piece'', or with --ids the ids as\n"
	       "[1, 15043, 3186]. A vocabulary-only GGUF is enough.\n"
	       "\n"
	       "  -m, --model PATH   GGUF with tokenizer metadata (default: the bundled model)\n"
	       "  -p, --prompt TEXT  text to tokenize\n"
	       "  -f, --file PATH    read the text from a file\n"
	       "      --ids          print only the ids, as a list\n"
	       "      --no-bos       do not add the BOS token\n"
	       "      --no-special   treat special-token text as plain text\n"
	       "  -h, --help         this text\n");
}

int cli_tokenize(int argc, char **argv)
{
	struct cli_args a = { argc, argv, 1, "tokenize" };
	const char *model = NULL, *text = NULL, *file = NULL;
	int ids_only = 0, bos = 1, special = 1, rc = CLI_ERR, st;
	struct tkv_vocab *v = NULL;
	struct tkv_error err = { 0 };
	char *buf = NULL;
	size_t len = 0, n = 0;
	int32_t *ids = NULL;

	for (; a.i < argc; a.i++) {
		const char *s = argv[a.i];

		if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
			tokenize_help();
			return CLI_OK;
		} else if (!strcmp(s, "-m") || !strcmp(s, "--model")) {
			if (!(model = cli_value(&a, s)))
				return CLI_USAGE;
		} else if (!strcmp(s, "-p") || !strcmp(s, "--prompt")) {
			if (!(text = cli_value(&a, s)))
				return CLI_USAGE;
		} else if (!strcmp(s, "-f") || !strcmp(s, "--file")) {
			if (!(file = cli_value(&a, s)))
				return CLI_USAGE;
		} else if (!strcmp(s, "--ids")) {
			ids_only = 1;
		} else if (!strcmp(s, "--no-bos")) {
			bos = 0;
		} else if (!strcmp(s, "--no-special")) {
			special = 0;
		} else {
			return cli_usage_error(&a, "unknown option '%s'", s);
		}
	}
	if (text && file)
		return cli_usage_error(&a, "give -p or -f, not both");
	if (!text && !file)
		return cli_usage_error(&a, "no text: give -p TEXT or -f FILE");
	if (!model && !(model = cli_bundled_model()))
		return cli_usage_error(&a, "no -m given and the bundled model was not found");
	if (file) {
		if (!(buf = cli_read_file(file, &len)))
			return CLI_ERR;
		text = buf;
	} else {
		len = strlen(text);
	}
	if ((st = tkv_vocab_load(&v, model, NULL, &err)))
		goto fail;
	tkv_vocab_tokenize(v, text, len, bos && tkv_vocab_add_bos(v), special, NULL, 0, &n);
	ids = malloc((n ? n : 1) * sizeof *ids);
	if (!ids) {
		tkv_errf(&err, TKV_ERR_NOMEM, "out of memory for %zu tokens", n);
		goto fail;
	}
	if ((st = tkv_vocab_tokenize(v, text, len, bos && tkv_vocab_add_bos(v), special, ids, n, &n))) {
		tkv_errf(&err, st, "cannot tokenize the text");
		goto fail;
	}
	if (ids_only) {
		putchar('[');
		for (size_t i = 0; i < n; i++)
			printf("%s%d", i ? ", " : "", ids[i]);
		printf("]\n");
	} else {
		for (size_t i = 0; i < n; i++) {
			size_t plen = 0;
			const char *p = tkv_vocab_token_text(v, ids[i], &plen);

			printf("%6d -> '%.*s'\n", ids[i], (int)plen, p ? p : "");
		}
	}
	rc = fflush(stdout) ? CLI_ERR : CLI_OK;
	goto out;
fail:
	fprintf(stderr, "tierkv tokenize: %s\n", err.msg[0] ? err.msg : tkv_status_str(st));
out:
	free(ids);
	free(buf);
	tkv_vocab_free(v);
	return rc;
}
