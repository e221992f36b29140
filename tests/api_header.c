/* api_header.c - tierkv.h from C11 and from C++17 (api_header.sh compiles
 * this file as both, warnings as errors, and links it to libtierkv).
 *
 * Prints the size and alignment of every public struct, so the script can
 * check that the two languages lay them out alike, and calls the library
 * through its C linkage from either. Exit status 0, or 1 when a call fails. */
#include <stdio.h>
#ifndef __cplusplus
#include <stdalign.h>
#endif

#include <tierkv.h>

#define LAYOUT(T) printf("%-28s %4zu %2zu\n", #T, sizeof(struct T), (size_t)alignof(struct T))

int main(void)
{
	struct tkv_alloc *a = NULL;
	struct tkv_alloc_stats as = { 0, 0, 0 };
	struct tkv_engine_params ep = tkv_engine_default_params();
	struct tkv_sampler_params sp = tkv_sampler_default_params();
	struct tkv_detok dt = { { 0 }, 0 };
	struct tkv_model *m = NULL;
	struct tkv_error err = { 0, { 0 } };

	LAYOUT(tkv_error);
	LAYOUT(tkv_alloc_stats);
	LAYOUT(tkv_model_params);
	LAYOUT(tkv_model_info);
	LAYOUT(tkv_kv_policy_params);
	LAYOUT(tkv_kv_layer_plan);
	LAYOUT(tkv_engine_params);
	LAYOUT(tkv_kv_stats);
	LAYOUT(tkv_kv_layer_stats);
	LAYOUT(tkv_batch_item);
	LAYOUT(tkv_weight_span);
	LAYOUT(tkv_detok);
	LAYOUT(tkv_sampler_params);

	if (tkv_alloc_init(&a) != TKV_OK)
		return 1;
	tkv_alloc_get_stats(a, &as);
	tkv_alloc_free(a);
	tkv_detok_reset(&dt);
	/* a missing file is an error with a message, not a crash */
	if (tkv_model_load(&m, "/nonexistent/model.gguf", NULL, &err) != TKV_ERR_IO || m || !err.msg[0])
		return 1;
	return as.live == 0 && ep.kv.policy == TKV_POLICY_ADAPTIVE && sp.temp > 0.0f &&
			       tkv_policy_parse(tkv_policy_name(TKV_POLICY_ADAPTIVE)) == TKV_POLICY_ADAPTIVE
		       ? 0
		       : 1;
}
