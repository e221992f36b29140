/* serve.c - `tierkv serve`: options for the OpenAI-compatible HTTP server
 * (src/server/). */
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

/* The model and how the server is reached: 0 (*handled set when s was
 * one of these options) or a usage status. */
static int serve_listen(struct cli_args *a, const char *s, struct srv_params *p, int *handled)
{
	long x;
	int rc;

	*handled = 1;
	if (!strcmp(s, "-m") || !strcmp(s, "--model")) {
		if (!(p->model_path = cli_value(a, s)))
			return CLI_USAGE;
	} else if (!strcmp(s, "--alias")) {
		if (!(p->alias = cli_value(a, s)))
			return CLI_USAGE;
	} else if (!strcmp(s, "--host")) {
		if (!(p->host = cli_value(a, s)))
			return CLI_USAGE;
	} else if (!strcmp(s, "--port")) {
		if ((rc = cli_int(a, s, 0, 65535, &x)))
			return rc;
		p->port = (int)x;
	} else if (!strcmp(s, "--api-key")) {
		if (!(p->api_key = cli_value(a, s)))
			return CLI_USAGE;
	} else if (!strcmp(s, "--chat-template")) {
		if (!(p->chat_template = cli_value(a, s)))
			return CLI_USAGE;
	} else {
		*handled = 0;
	}
	return 0;
}

/* The engine's shape and the server's limits: as serve_listen. */
static int serve_limits(struct cli_args *a, const char *s, struct srv_params *p, int *handled)
{
	long x;
	double d;
	size_t sz;
	const char *v;
	int rc;

	*handled = 1;
	if (!strcmp(s, "-c") || !strcmp(s, "--ctx-size")) {
		if ((rc = cli_int(a, s, 0, 1L << 22, &x)))
			return rc;
		p->ep.n_ctx = (uint32_t)x;
	} else if (!strcmp(s, "-b") || !strcmp(s, "--batch-size")) {
		if ((rc = cli_int(a, s, 1, 65536, &x)))
			return rc;
		p->ep.n_batch = (uint32_t)x;
	} else if (!strcmp(s, "-t") || !strcmp(s, "--threads")) {
		if ((rc = cli_int(a, s, 1, 512, &x)))
			return rc;
		p->ep.n_threads = (int)x;
	} else if (!strcmp(s, "--max-seqs")) {
		if ((rc = cli_int(a, s, 1, 4096, &x)))
			return rc;
		p->max_seqs = (int)x;
	} else if (!strcmp(s, "--max-queue")) {
		if ((rc = cli_int(a, s, 0, 1L << 20, &x)))
			return rc;
		p->max_queue = (int)x;
	} else if (!strcmp(s, "--max-body")) {
		if ((rc = cli_size(a, s, &sz)))
			return rc;
		if (sz < 64 || sz > ((size_t)1 << 30))
			return cli_usage_error(a, "--max-body: must be 64 bytes to 1G");
		p->max_body = sz;
	} else if (!strcmp(s, "--max-tokens")) {
		if ((rc = cli_int(a, s, 1, 1L << 22, &x)))
			return rc;
		p->max_tokens = (int)x;
	} else if (!strcmp(s, "--timeout")) {
		if ((rc = cli_float(a, s, 0, 1e7, &d)))
			return rc;
		p->timeout = d;
	} else if (!strcmp(s, "--max-preempt")) {
		if ((rc = cli_int(a, s, 0, 1000, &x)))
			return rc;
		p->max_preempt = (int)x;
	} else if (!strcmp(s, "--kv-expect")) {
		if ((rc = cli_float(a, s, 0.01, 2, &d)))
			return rc;
		p->kv_expect = d;
	} else if (!strcmp(s, "--prefix-cache")) {
		if (!(v = cli_value(a, s)))
			return CLI_USAGE;
		if (!strcmp(v, "on"))
			p->ep.prefix_cache = 1;
		else if (!strcmp(v, "off"))
			p->ep.prefix_cache = 0;
		else
			return cli_usage_error(a, "--prefix-cache: '%s' is not on or off", v);
	} else {
		*handled = 0;
	}
	return 0;
}

/* The shared KV store (--kv-store*): as serve_listen. */
static int serve_store(struct cli_args *a, const char *s, struct srv_params *p, int *handled)
{
	long x;
	double d;
	const char *v;
	int rc;

	*handled = 1;
	if (!strcmp(s, "--kv-store")) {
		if (!(v = cli_value(a, s)))
			return CLI_USAGE;
		if (strncmp(v, "redis://", 8))
			return cli_usage_error(a, "--kv-store: '%s' is not redis://HOST[:PORT][/DB]", v);
		p->kv_store = v;
	} else if (!strcmp(s, "--kv-store-password")) {
		if (!(p->kv_store_password = cli_value(a, s)))
			return CLI_USAGE;
	} else if (!strcmp(s, "--kv-store-ttl")) {
		if ((rc = cli_int(a, s, 1, 1L << 30, &x)))
			return rc;
		p->kv_store_ttl = (int)x;
	} else if (!strcmp(s, "--kv-store-timeout")) {
		if ((rc = cli_float(a, s, 0.001, 60, &d)))
			return rc;
		p->kv_store_timeout = d;
	} else {
		*handled = 0;
	}
	return 0;
}

int cli_serve(int argc, char **argv)
{
	struct cli_args a = { argc, argv, 1, "serve" };
	struct srv_params p = srv_default_params();
	const char *env_key = getenv("TIERKV_API_KEY");
	int rc, handled;

	if (env_key && *env_key)
		p.api_key = env_key;
	for (; a.i < argc; a.i++) {
		const char *s = argv[a.i];

		if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
			serve_help();
			return CLI_OK;
		}
		if (!strcmp(s, "-v") || !strcmp(s, "--verbose")) {
			p.verbose = 1;
			continue;
		}
		if ((rc = serve_listen(&a, s, &p, &handled)) ||
		    (!handled && (rc = serve_limits(&a, s, &p, &handled))) ||
		    (!handled && (rc = serve_store(&a, s, &p, &handled))) ||
		    (!handled && (rc = cli_kv_option(&a, &p.ep, &p.kv_stats, &handled))))
			return rc;
		if (!handled)
			return cli_usage_error(&a, "unknown option '%s'", s);
	}
	if (cli_kv_check(&a, &p.ep))
		return CLI_USAGE;
	if (p.kv_store)
		p.ep.prefix_cache = 1;  /* the store sits behind the local prefix tree */
	if ((rc = cli_model_path("serve", &p.model_path)))
		return rc;
	return srv_run(&p) ? CLI_ERR : CLI_OK;
}
