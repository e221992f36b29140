/* fuzz_kvstore.c - libFuzzer target for entries read back from the shared KV
 * store (kv/store.h): what Redis returns is outside input.
 *
 * The first input byte picks a geometry (head size 8 or 64, 1-2 layers and
 * KV heads, 16 tokens) and whether the checksum is fixed up first (so the
 * fuzzer also reaches the parameter checks and decoding); the rest is the
 * entry. With bit 4 set the rest is only the payload: a well-formed header
 * for the geometry, zero tokens and the checksum are written around it, so
 * that every input reaches the quantization parameters' checks and, when
 * they pass, decoding (an empty seed corpus found 46 edges in 120 s). The chunk index, parent hash and tokens asked for are taken from the
 * entry's own header when it has one. kv_store_check must never crash; when
 * it accepts, the entry is decoded into pool pages and every key and value is
 * read back and must be finite. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/pool.h"
#include "kv/store.h"

#include "common.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kv_store_geom g = { { 1, 2 }, 1, 1, 8, 16, KV_FMT_Q4 };
	struct kv_hash128 parent = { 0, 0 };
	int32_t tokens[16] = { 0 };
	uint32_t c = 0;
	uint8_t *e;
	size_t n;

	if (size < 1)
		return 0;
	g.head_dim = data[0] & 1 ? 64 : 8;
	g.n_layer = 1 + (data[0] >> 1 & 1);
	g.n_kv_head = 1 + (data[0] >> 2 & 1);
	n = size - 1;
	e = malloc(n ? n : 1);
	if (!e)
		return 0;
	memcpy(e, data + 1, n);
	if (data[0] & 16) {
		size_t eb = kv_store_entry_bytes(&g);
		uint8_t *w = calloc(eb, 1);

		if (!w) {
			free(e);
			return 0;
		}
		memcpy(w, "TKVS", 4);
		w[4] = KV_STORE_VERSION & 0xff;
		w[5] = KV_STORE_VERSION >> 8;
		w[6] = (uint8_t)g.fmt;
		memcpy(w + 8, &g.fp[0], 8);
		memcpy(w + 16, &g.fp[1], 8);
		memcpy(w + 24, &g.n_layer, 4);
		memcpy(w + 28, &g.n_kv_head, 4);
		memcpy(w + 32, &g.head_dim, 4);
		memcpy(w + 36, &g.P, 4);
		{
			uint32_t pl = (uint32_t)(eb - KV_STORE_HEADER - g.P * 4 - 8);
			uint8_t *body = w + KV_STORE_HEADER + g.P * 4;
			uint64_t sum;

			memcpy(w + 44, &pl, 4);
			for (uint32_t i = 0; n && i < pl; i++)
				body[i] = e[i % n];
			sum = kv_store_hash64(w, eb - 8, 0);
			memcpy(w + eb - 8, &sum, 8);
		}
		free(e);
		e = w;
		n = eb;
	} else if (n >= KV_STORE_HEADER + sizeof tokens) {
		memcpy(&c, e + 40, 4);
		memcpy(&parent.lo, e + 48, 8);
		memcpy(&parent.hi, e + 56, 8);
		memcpy(tokens, e + KV_STORE_HEADER, sizeof tokens);
	}
	if ((data[0] & 8) && n >= 8) {
		uint64_t sum = kv_store_hash64(e, n - 8, 0);

		memcpy(e + n - 8, &sum, 8);
	}
	if (kv_store_check(&g, c, &parent, tokens, e, n) == KV_STORE_OK) {
		struct kv_pool_params pp = kv_pool_default_params();
		struct kv_pool *pool = NULL;
		struct kv_page *pages[4];
		float k[64], v[64];

		CHECK(n == kv_store_entry_bytes(&g));
		CHECK(kv_pool_init(&pool, &pp, NULL, NULL) == 0);
		if (kv_store_decode(&g, c, e, pool, pages) == 0) {
			for (uint32_t i = 0; i < g.n_layer * g.n_kv_head; i++) {
				for (uint32_t j = 0; j < g.P; j++) {
					kv_page_load_k(pages[i], j, k);
					kv_page_load_v(pages[i], j, v);
					for (uint32_t d = 0; d < g.head_dim; d++)
						CHECK(isfinite(k[d]) && isfinite(v[d]));
				}
				kv_pool_put(pool, pages[i]);
			}
		}
		kv_pool_free(pool);
	}
	free(e);
	return 0;
}
