/* inspect.c - `tierkv inspect MODEL`: metadata, tensor table, KV bytes per token. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "model/gguf.h" /* the file itself, key by key: a named exception to tierkv.h (docs/api.md) */
#include "tierkv.h"

static void inspect_help(void)
{
	printf("usage: tierkv inspect [--no-tensors] [--full-arrays] MODEL.gguf\n"
	       "\n"
	       "Prints the GGUF header, every metadata key, the tensor table and, for llama\n"
	       "models, the KV cache bytes one token costs.\n"
	       "\n"
	       "  --no-tensors    skip the tensor table\n"
	       "  --full-arrays   print every element of arrays (default: the first 8)\n"
	       "  -h, --help      this text\n");
}

/* Prints a string with control characters escaped. */
static void put_str(const char *p, uint64_t n, uint64_t max)
{
	putchar('"');
	for (uint64_t i = 0; i < n && i < max; i++) {
		unsigned char c = (unsigned char)p[i];

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			printf("\\x%02x", c);
		else
			putchar(c);
	}
	putchar('"');
	if (n > max)
		printf("...(%llu bytes)", (unsigned long long)n);
}

static void put_scalar(const struct gguf_kv *kv)
{
	switch (kv->type) {
	case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
		printf("%llu", (unsigned long long)kv->v.u64);
		break;
	case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
		printf("%lld", (long long)kv->v.i64);
		break;
	case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64:
		printf("%g", kv->v.f64);
		break;
	case GGUF_TYPE_BOOL:
		printf("%s", kv->v.u64 ? "true" : "false");
		break;
	case GGUF_TYPE_STRING:
		put_str(kv->v.str.ptr, kv->v.str.len, 200);
		break;
	default:
		break;
	}
}

static void put_array(const struct gguf_kv *kv, uint64_t max)
{
	uint64_t n = kv->v.arr.n;

	printf("[%s x %llu] [", gguf_type_name(kv->v.arr.type), (unsigned long long)n);
	for (uint64_t i = 0; i < n && i < max; i++) {
		if (i)
			printf(", ");
		switch (kv->v.arr.type) {
		case GGUF_TYPE_STRING:
			put_str(kv->v.arr.strs[i].ptr, kv->v.arr.strs[i].len, 64);
			break;
		case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64:
			printf("%g", gguf_arr_f64(kv, i));
			break;
		case GGUF_TYPE_UINT64:
			printf("%llu", (unsigned long long)gguf_arr_i64(kv, i));
			break;
		default:
			printf("%lld", (long long)gguf_arr_i64(kv, i));
			break;
		}
	}
	printf("%s]", n > max ? ", ..." : "");
}

int cli_inspect(int argc, char **argv)
{
	struct cli_args a = { argc, argv, 1, "inspect" };
	const char *path = NULL;
	int tensors = 1;
	uint64_t max = 8;
	struct gguf_file *g = NULL;
	struct tkv_error err = { 0 };
	struct tkv_model *m = NULL;
	char b[32];
	int st;

	for (; a.i < argc; a.i++) {
		const char *s = argv[a.i];

		if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
			inspect_help();
			return CLI_OK;
		} else if (!strcmp(s, "--no-tensors")) {
			tensors = 0;
		} else if (!strcmp(s, "--full-arrays")) {
			max = UINT64_MAX;
		} else if (!strcmp(s, "-m") || !strcmp(s, "--model")) {
			if (!(path = cli_value(&a, s)))
				return CLI_USAGE;
		} else if (s[0] == '-' && s[1]) {
			return cli_usage_error(&a, "unknown option '%s'", s);
		} else if (!path) {
			path = s;
		} else {
			return cli_usage_error(&a, "one model at a time ('%s' and '%s')", path, s);
		}
	}
	if (!path)
		return cli_usage_error(&a, "no model given");
	if ((st = gguf_open(&g, path, NULL, &err))) {
		fprintf(stderr, "tierkv inspect: %s\n", err.msg);
		return CLI_ERR;
	}
	printf("file: %s\n", path);
	printf("gguf version %u, %llu metadata keys, %llu tensors, alignment %u, data at 0x%llx, size %s\n",
	       gguf_version(g), (unsigned long long)gguf_n_kv(g), (unsigned long long)gguf_n_tensors(g),
	       gguf_alignment(g), (unsigned long long)gguf_data_offset(g),
	       cli_fmt_bytes(b, sizeof b, (double)gguf_size(g)));
	printf("\nmetadata:\n");
	for (uint64_t i = 0; i < gguf_n_kv(g); i++) {
		const struct gguf_kv *kv = gguf_kv_at(g, i);

		printf("  %-44.*s %-7s = ", (int)kv->key.len, kv->key.ptr, gguf_type_name(kv->type));
		if (kv->type == GGUF_TYPE_ARRAY)
			put_array(kv, max);
		else
			put_scalar(kv);
		putchar('\n');
	}
	if (tensors) {
		printf("\ntensors:\n  %-5s %-32s %-6s %-26s %12s %12s\n", "#", "name", "type", "shape", "offset", "bytes");
		for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
			const struct gguf_tensor *t = gguf_tensor_at(g, i);
			char shape[64];
			int n = 0;

			for (uint32_t d = 0; d < t->n_dims; d++)
				n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%llu", d ? " x " : "",
					      (unsigned long long)t->ne[d]);
			printf("  %-5llu %-32.*s %-6s %-26s %12llx %12llu\n", (unsigned long long)i,
			       (int)t->name.len, t->name.ptr, tkv_dtype_name(t->type), shape,
			       (unsigned long long)t->offset, (unsigned long long)t->nbytes);
		}
	}
	gguf_close(g);

	/* the model view: only for files that load as a llama model */
	if ((st = tkv_model_load(&m, path, NULL, &err)) == TKV_OK) {
		struct tkv_model_info in;
		size_t per_tok = tkv_model_kv_bytes_per_token(m);

		tkv_model_get_info(m, &in);
		printf("\nmodel: %s%s%s, %llu parameters, weights %s\n", in.arch, in.name[0] ? " / " : "", in.name,
		       (unsigned long long)in.n_params, tkv_dtype_name(in.weight_type));
		printf("  vocab %u, context %u, dim %u, layers %u, heads %u, kv heads %u, head dim %u, ffn %u\n",
		       in.n_vocab, in.n_ctx_train, in.dim, in.n_layer, in.n_head, in.n_kv_head, in.head_dim, in.n_ff);
		if (in.n_expert)
			printf("  experts %u per layer, %u per token, expert ffn %u\n", in.n_expert, in.n_expert_used,
			       in.n_ff_exp);
		printf("  rope: %u dims, base %g, linear scale %g; rms eps %g\n", in.n_rot, in.rope_base,
		       in.rope_scale, in.rms_eps);
		if (in.n_swa_layers || in.attn_softcap > 0.0f || in.final_softcap > 0.0f)
			printf("  sliding window %u tokens on %u of %u layers; soft-caps: attention %g, output %g\n",
			       in.n_swa, in.n_swa_layers, in.n_layer, in.attn_softcap, in.final_softcap);
		printf("  KV bytes per token: %zu (f16), %zu (f32)%s; full context (%u tokens): %s (f16)\n",
		       per_tok, per_tok * 2, tkv_model_kv_bytes(m, 1) != per_tok ? " in the global layers" : "",
		       in.n_ctx_train, cli_fmt_bytes(b, sizeof b, (double)tkv_model_kv_bytes(m, in.n_ctx_train)));
		tkv_model_free(m);
	} else {
		printf("\nmodel: not loadable for inference: %s\n", err.msg);
	}
	return CLI_OK;
}
