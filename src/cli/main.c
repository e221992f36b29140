/* main.c - `tierkv` entry point: dispatches to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tierkv COMMAND [options]\n"
		"\n"
		"commands:\n"
		"  run        generate text from a prompt (default model: the bundled stories260K)\n"
		"  inspect    print a GGUF model's metadata, tensors and KV bytes per token\n"
		"  tokenize   print the tokens of a text\n"
		"  gen-model  write a llama GGUF with random weights of a real shape (for benchmarks)\n"
		"  bench      measure prefill and decode speed against the memory-bandwidth limit\n"
		"  chat       a conversation in the terminal (chat template, KV of earlier turns kept)\n"
		"  serve      OpenAI-compatible HTTP server with continuous batching\n"
		"  eval       compare cache policies and budgets with the full cache on texts\n"
		"\n"
		"'tierkv COMMAND --help' describes each command's options.\n"
		"Exit codes: 0 ok, 1 runtime error, 2 usage error.\n");
}

/* The subcommands, each with argv[0] its own name. */
static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
} commands[] = {
	{ "run", cli_run },
	{ "inspect", cli_inspect },
	{ "tokenize", cli_tokenize },
	{ "gen-model", cli_gen_model },
	{ "bench", cli_bench },
	{ "chat", cli_chat },
	{ "serve", cli_serve },
	{ "eval", cli_eval },
};

int main(int argc, char **argv)
{
	const char *cmd;

	if (argc < 2) {
		usage(stderr);
		return CLI_USAGE;
	}
	cmd = argv[1];
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		usage(stdout);
		return CLI_OK;
	}
	if (!strcmp(cmd, "--version")) {
		printf("tierkv 0.1.0 (kernels %s)\n", tkv_kernel_level());
		return CLI_OK;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (!strcmp(cmd, commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "tierkv: unknown command '%s'\n", cmd);
	usage(stderr);
	return CLI_USAGE;
}
