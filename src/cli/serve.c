/* serve.c - `tierkv serve`: options for the OpenAI-compatible HTTP server
 * (src/server/). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "server/srv.h"

static void serve_help(void)
{
	printf("usage: tierkv serve [-m MODEL] [--host ADDR] [--port N] [options]\n"
	       "\n"
	       "Serves the model over HTTP with an OpenAI-compatible API: POST /v1/completions,\n"
	       "POST /v1/chat/completions (\"stream\": true for server-sent events), GET /v1/models,\n"
	       "GET /health and GET /metrics (Prometheus). Concurrent requests share one KV budget\n"
	       "and advance together, one token per batched step. Stops on SIGINT or SIGTERM.\n"
	       "\n"
	       "  -m, --model PATH      GGUF model (default: the bundled stories260K.gguf)\n"
	       "      --alias NAME      model id in the API (default: the file name without .gguf)\n"
	       "      --host ADDR       address to listen on (default 127.0.0.1; 0.0.0.0 exposes the server)\n"
	       "      --port N          TCP port; 0 = any free one, printed on stderr (default 8080)\n"
	       "      --api-key KEY     require 'Authorization: Bearer KEY' (also TIERKV_API_KEY)\n"
	       "      --chat-template F chat format: %s\n"
	       "                        (default: the model's tokenizer.chat_template, else plain)\n"
	       "  -c, --ctx-size N      context length per sequence in tokens (default: the model's)\n"
	       "  -b, --batch-size N    rows per forward pass, prompt chunks included (default 256)\n"
	       "  -t, --threads N       threads (default: physical cores)\n"
	       "      --max-seqs N      sequences generating at once (default 32)\n"
	       "      --max-queue N     requests waiting for admission before 503s (default 256)\n"
	       "      --max-body SIZE   largest request body, e.g. 1M (default 1M; larger: 413)\n"
	       "      --max-tokens N    largest max_tokens a request may ask for; also the default (4096)\n"
	       "      --timeout S       seconds a request may take, queue included; 0 = none (600)\n"
	       "      --idle-timeout S  seconds an idle connection stays open (60); a request waiting\n"
	       "                        for its tokens is not idle\n"
	       "      --max-preempt N   times a request may be preempted for KV memory before a 503 (3)\n"
	       "      --kv-expect R     expected KV bytes per token over a full f16 token, for admission\n"
	       "                        (default: from the policy's tiers)\n"
	       "      --prefix-cache on|off  share the KV pages of common prompt prefixes (off)\n"
	       "      --kv-store redis://[[USER]:PASS@]HOST[:PORT][/DB]  share prefix chunks with other\n"
	       "                        replicas through Redis (turns --prefix-cache on; docs/deploy.md)\n"
	       "      --kv-store-password P  Redis AUTH password (or TIERKV_KV_STORE_PASSWORD)\n"
	       "      --kv-store-ttl S  seconds a stored chunk lives after its last use (3600)\n"
	       "      --kv-store-timeout S  Redis connect timeout and lookup deadline (0.5)\n"
	       "  -v, --verbose         log every request on stderr\n"
	       "  -h, --help            this text\n\n",
	       tkv_chat_family_names());
	cli_kv_help();
}

#define SRV_OPT(kind, field, min, max) kind, offsetof(struct srv_params, field), min, max

/* The server's plain options; -c, -b, -t and the cache's options are the
 * engine's (cli_engine_option). */
static const struct cli_opt serve_table[] = {
	CLI_HELP_OPT,
	{ "-v", "--verbose", SRV_OPT(CLI_OPT_FLAG, verbose, 0, 0) },
	{ "-m", "--model", SRV_OPT(CLI_OPT_STR, model_path, 0, 0) },
	{ NULL, "--alias", SRV_OPT(CLI_OPT_STR, alias, 0, 0) },
	{ NULL, "--host", SRV_OPT(CLI_OPT_STR, host, 0, 0) },
	{ NULL, "--port", SRV_OPT(CLI_OPT_INT, port, 0, 65535) },
	{ NULL, "--api-key", SRV_OPT(CLI_OPT_STR, api_key, 0, 0) },
	{ NULL, "--chat-template", SRV_OPT(CLI_OPT_STR, chat_template, 0, 0) },
	{ NULL, "--max-seqs", SRV_OPT(CLI_OPT_INT, max_seqs, 1, 4096) },
	{ NULL, "--max-queue", SRV_OPT(CLI_OPT_INT, max_queue, 0, 1L << 20) },
	{ NULL, "--max-tokens", SRV_OPT(CLI_OPT_INT, max_tokens, 1, 1L << 22) },
	{ NULL, "--timeout", SRV_OPT(CLI_OPT_DOUBLE, timeout, 0, 1e7) },
	{ NULL, "--idle-timeout", SRV_OPT(CLI_OPT_DOUBLE, idle_timeout, 1, 86400) },
	{ NULL, "--max-preempt", SRV_OPT(CLI_OPT_INT, max_preempt, 0, 1000) },
	{ NULL, "--kv-expect", SRV_OPT(CLI_OPT_DOUBLE, kv_expect, 0.01, 2) },
	{ NULL, "--kv-store-password", SRV_OPT(CLI_OPT_STR, kv_store_password, 0, 0) },
	{ NULL, "--kv-store-ttl", SRV_OPT(CLI_OPT_INT, kv_store_ttl, 1, 1L << 30) },
	{ NULL, "--kv-store-timeout", SRV_OPT(CLI_OPT_DOUBLE, kv_store_timeout, 0.001, 60) },
};

/* The options the table cannot hold (a checked size, on/off, a URL), then
 * the engine's and the cache's. 0 or CLI_USAGE. */
static int serve_option(struct cli_args *a, void *ctx)
{
	struct srv_params *p = ctx;
	const char *s = a->argv[a->i], *v;
	size_t sz;
	int rc;

	if (!strcmp(s, "--max-body")) {
		if ((rc = cli_size(a, s, &sz)))
			return rc;
		if (sz < 64 || sz > ((size_t)1 << 30))
			return cli_usage_error(a, "--max-body: must be 64 bytes to 1G");
		p->max_body = sz;
		return 0;
	}
	if (!strcmp(s, "--prefix-cache")) {
		if (!(v = cli_value(a, s)))
			return CLI_USAGE;
		if (!strcmp(v, "on"))
			p->ep.prefix_cache = 1;
		else if (!strcmp(v, "off"))
			p->ep.prefix_cache = 0;
		else
			return cli_usage_error(a, "--prefix-cache: '%s' is not on or off", v);
		return 0;
	}
	if (!strcmp(s, "--kv-store")) {
		if (!(v = cli_value(a, s)))
			return CLI_USAGE;
		if (strncmp(v, "redis://", 8))
			return cli_usage_error(a, "--kv-store: '%s' is not redis://HOST[:PORT][/DB]", v);
		p->kv_store = v;
		return 0;
	}
	return cli_engine_or_unknown(a, &p->ep, &p->kv_stats);
}

int cli_serve(int argc, char **argv)
{
	struct cli_args a = { argc, argv, 1, "serve" };
	struct srv_params p = srv_default_params();
	const char *env_key = getenv("TIERKV_API_KEY");
	int rc;

	if (env_key && *env_key)
		p.api_key = env_key;
	if ((rc = cli_parse_options(&a, CLI_TABLE(serve_table), &p, serve_option)))
		return cli_parse_end(rc, serve_help);
	if (cli_kv_check(&a, &p.ep))
		return CLI_USAGE;
	if (p.kv_store)
		p.ep.prefix_cache = 1;  /* the store sits behind the local prefix tree */
	if ((rc = cli_model_path("serve", &p.model_path)))
		return rc;
	return srv_run(&p) ? CLI_ERR : CLI_OK;
}
