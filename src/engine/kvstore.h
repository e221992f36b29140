/* kvstore.h - the engine's side of a shared KV store: which prompt chunks the
 * local prefix tree lacks, grafting checked entries into it, and encoding a
 * sequence's chunks as entries (the entry format: kv/store.h). The network
 * side (Redis) is the server's (src/server/kvstore.c).
 *
 * Callers are the engine's scheduling thread (like every engine call).
 * Prefix sharing (engine param prefix_cache) must be on. */
#ifndef TKV_ENGINE_KVSTORE_H
#define TKV_ENGINE_KVSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "kv/store.h"
#include "tierkv.h"

/* The entry geometry of this engine: model fingerprint fp, the model's
 * layers, KV heads and head size, the engine's page size, q4. TKV_ERR_ARG
 * when the engine has no prefix tree or the head size cannot be stored. */
int tkv_kvs_geometry(struct tkv_engine *e, const struct tkv_model_info *mi, const uint64_t fp[2],
		     struct kv_store_geom *g, struct tkv_error *err);
/* Leading chunks of ids (at most n_chunks) in the local prefix tree, and of
 * those the leading ones known to be in the store; marking them as stored. */
size_t tkv_kvs_local(struct tkv_engine *e, const int32_t *ids, size_t n_chunks);
size_t tkv_kvs_stored(struct tkv_engine *e, const int32_t *ids, size_t n_chunks);
void tkv_kvs_mark_stored(struct tkv_engine *e, const int32_t *ids, size_t n_chunks);

/* Grafts entries bufs[k] (lens[k] bytes; NULL = missing) as chunks c0 + k of
 * ids into the prefix tree, in order, stopping at the first missing, refused
 * or unplaceable one. chain: kv_store_chain of ids (at least c0 + count).
 * Refused entries are counted in verdicts[kv_store_verdict]. Returns the
 * chunks grafted (the tree must hold chunks [0, c0) of ids). */
size_t tkv_kvs_import(struct tkv_engine *e, const struct kv_store_geom *g, const int32_t *ids,
		      const struct kv_hash128 *chain, size_t c0, const uint8_t *const *bufs, const size_t *lens,
		      size_t count, uint64_t verdicts[KV_STORE_N_VERDICTS]);

/* Encodes chunks [c0, c1) of a sequence (ids: its tokens; c1 P <= its
 * tokens) into out (c1 - c0 entries of kv_store_entry_bytes). Returns the
 * chunks encoded (fewer when some position was evicted or memory is short). */
size_t tkv_kvs_export(struct tkv_seq *s, const struct kv_store_geom *g, const int32_t *ids, size_t c0, size_t c1,
		      uint8_t *out);

#endif
