/* kvstore_none.c - the shared KV store when tierkv is built without hiredis
 * (-DTKV_KV_STORE=OFF): --kv-store is refused at start-up. */
#include <stdio.h>

#include "server/srv_impl.h"

int srv_kvs_start(struct srv_kvs **out, struct srv *s, char *msg, size_t n)
{
	(void)s;
	*out = NULL;
	snprintf(msg, n, "--kv-store: this tierkv was built without hiredis (apt-get install libhiredis-dev, "
		 "then rebuild)");
	return -1;
}

void srv_kvs_stop(struct srv_kvs *k)
{
	(void)k;
}

void srv_kvs_fetch(struct srv_kvs *k, const int32_t *ids, size_t n)
{
	(void)k;
	(void)ids;
	(void)n;
}

void srv_kvs_save(struct srv_kvs *k, struct tkv_seq *seq, const int32_t *ids, size_t n)
{
	(void)k;
	(void)seq;
	(void)ids;
	(void)n;
}

void srv_kvs_metrics(struct srv_kvs *k, struct srv_buf *b)
{
	(void)k;
	(void)b;
}
