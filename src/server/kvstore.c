/* kvstore.c - the shared KV store in Redis (`tierkv serve --kv-store redis://...`).
 *
 * Entries (kv/store.h) are prompt chunks of P tokens for every stream, at q4,
 * under the key
 *
 *   tkv:<model fingerprint, 32 hex>:L<layers>h<kv heads>d<head size>p<P>q4:<chain hash, 32 hex>
 *
 * where the chain hash covers every token id of the prefix up to the end of
 * the chunk. Each entry is written with SET ... EX ttl; a lookup refreshes
 * the TTL of what it used. The store is bounded by that TTL and by Redis'
 * maxmemory with an LRU policy (docs/deploy.md).
 *
 * Two connections: the scheduler thread's, for lookups (pipelined GETs, one
 * round trip, under a deadline: --kv-store-timeout), and a writer thread's,
 * which takes encoded chunks from a bounded queue and SETs them, so a slow
 * Redis never holds up generation. Either connection failing (refused,
 * closed, timed out, an error reply) marks the store down: one warning, and
 * the server serves without it; each thread tries to reconnect at most once a
 * second, and the first success prints one line that it is back. OOM replies
 * (maxmemory with noeviction) count as "full", one warning per episode.
 *
 * Nothing read back is trusted: the engine checks every entry (size, header,
 * fingerprint and geometry, checksum, chunk, parent and tokens, finite
 * parameters) before grafting it into the prefix tree; refused ones are
 * counted by reason. */
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/kvstore.h"
#include "server/srv_impl.h"

_Static_assert(KV_STORE_N_VERDICTS <= 8, "srv_kvs_stats.rejected holds every verdict");

#define RETRY_S 1.0                        /* between reconnection attempts */
#define MAX_LOOKUP_CHUNKS 1024             /* chunks asked for in one lookup */
#define MAX_QUEUE_BYTES ((size_t)512 << 20) /* encoded chunks waiting for the writer */

struct job {
	struct job *next;
	size_t count;       /* entries */
	size_t first;       /* chunk index of the first */
	struct kv_hash128 *keys;  /* [count] chain hashes */
	uint8_t *buf;       /* count * entry bytes */
};

struct conn {
	redisContext *c;
	double retry_at;    /* monotonic seconds: no attempt before */
};

struct srv_kvs {
	struct srv *srv;
	struct kv_store_geom g;
	size_t eb;                  /* entry bytes */
	char host[256];
	int port, db, ttl;
	char user[128], pass[256];
	char shown[320];            /* the URL without its password */
	char prefix[128];           /* "tkv:<fp>:<geometry>:" */
	double timeout;             /* seconds: lookup deadline, connect and write timeout */
	struct conn look;           /* scheduler thread */
	struct conn wr;             /* writer thread */

	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *q_head, *q_tail;
	size_t q_bytes;
	bool stop;
	pthread_t writer;
	bool writer_started;

	atomic_int up;              /* 1 while the last command worked */
	atomic_int full;            /* 1 after an OOM reply until a write works */
	struct srv_kvs_stats st;
};

/* ---- configuration -------------------------------------------------------------- */

/* redis://[[user]:password@]host[:port][/db] */
static int parse_url(struct srv_kvs *k, const char *url, char *msg, size_t n)
{
	const char *p, *at, *slash, *colon;
	size_t hl;

	if (strncmp(url, "redis://", 8)) {
		snprintf(msg, n, "--kv-store '%.100s': expected redis://HOST[:PORT][/DB]", url);
		return -1;
	}
	p = url + 8;
	k->port = 6379;
	k->db = 0;
	slash = strchr(p, '/');
	at = strchr(p, '@');
	if (at && (!slash || at < slash)) {
		const char *c = memchr(p, ':', (size_t)(at - p));

		if (!c || (size_t)(c - p) >= sizeof k->user || (size_t)(at - c - 1) >= sizeof k->pass) {
			snprintf(msg, n, "--kv-store: credentials must be [USER]:PASSWORD@ before the host");
			return -1;
		}
		memcpy(k->user, p, (size_t)(c - p));
		memcpy(k->pass, c + 1, (size_t)(at - c - 1));
		p = at + 1;
	}
	hl = slash ? (size_t)(slash - p) : strlen(p);
	colon = memchr(p, ':', hl);
	if (colon) {
		char *end;
		long port = strtol(colon + 1, &end, 10);

		if (end != p + hl || port < 1 || port > 65535) {
			snprintf(msg, n, "--kv-store: bad port in '%.100s'", url);
			return -1;
		}
		k->port = (int)port;
		hl = (size_t)(colon - p);
	}
	if (hl == 0 || hl >= sizeof k->host) {
		snprintf(msg, n, "--kv-store: no host in '%.100s'", url);
		return -1;
	}
	memcpy(k->host, p, hl);
	if (slash && slash[1]) {
		char *end;
		long db = strtol(slash + 1, &end, 10);

		if (*end || db < 0 || db > 1000000) {
			snprintf(msg, n, "--kv-store: bad database number in '%.100s'", url);
			return -1;
		}
		k->db = (int)db;
	}
	snprintf(k->shown, sizeof k->shown, "redis://%.60s%s%.200s:%d/%d", k->user, k->pass[0] ? ":***@" : "",
		 k->host, k->port, k->db);
	return 0;
}

/* The model's fingerprint: a hash of its file's size, first 8 MiB (header,
 * metadata, tensor table) and 64 samples of 64 KiB spread over the rest, plus
 * the KV type. -1 when the file cannot be read. */
static int fingerprint(const char *path, int kv_type, uint64_t fp[2])
{
	int fd = open(path, O_RDONLY);
	struct stat sb;
	uint8_t *buf;
	size_t cap = (size_t)8 << 20;
	int rc = -1;

	if (fd < 0)
		return -1;
	buf = malloc(cap);
	if (buf && fstat(fd, &sb) == 0) {
		uint64_t size = (uint64_t)sb.st_size, h0 = size ^ (uint64_t)kv_type << 56, h1 = ~h0;
		ssize_t got = pread(fd, buf, cap, 0);

		if (got >= 0) {
			h0 = kv_store_hash64(buf, (size_t)got, h0);
			h1 = kv_store_hash64(buf, (size_t)got, h1);
			rc = 0;
			for (int i = 0; i < 64 && size > cap; i++) {
				off_t at = (off_t)(cap + (size - cap) / 64 * (uint64_t)i);

				got = pread(fd, buf, 65536, at);
				if (got < 0) {
					rc = -1;
					break;
				}
				h0 = kv_store_hash64(buf, (size_t)got, h0);
				h1 = kv_store_hash64(buf, (size_t)got, h1 ^ (uint64_t)i);
			}
			fp[0] = h0;
			fp[1] = h1;
		}
	}
	free(buf);
	close(fd);
	return rc;
}

/* ---- connections ------------------------------------------------------------------- */

static struct timeval tv_of(double s)
{
	struct timeval tv = { (time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6) };

	return tv;
}

static void went_down(struct srv_kvs *k, struct conn *cn, const char *reason)
{
	char why[160];

	snprintf(why, sizeof why, "%s", reason);  /* reason may live in cn->c */
	if (cn->c) {
		redisFree(cn->c);
		cn->c = NULL;
	}
	cn->retry_at = srv_now() + RETRY_S;
	atomic_fetch_add(&k->st.errors, 1);
	if (atomic_exchange(&k->up, 0)) {
		atomic_fetch_add(&k->st.outages, 1);
		fprintf(stderr, "tierkv serve: warning: KV store %s unavailable (%s); serving without it until "
			"it is back\n", k->shown, why);
	}
}

static void came_up(struct srv_kvs *k)
{
	if (!atomic_exchange(&k->up, 1) && atomic_load(&k->st.outages) > 0)
		fprintf(stderr, "tierkv serve: KV store %s is back\n", k->shown);
}

/* A command's reply on a fresh connection; false (and the connection gone)
 * when it fails. */
static bool setup_cmd(struct srv_kvs *k, struct conn *cn, const char *what, redisReply *r)
{
	char why[160];

	if (r && r->type != REDIS_REPLY_ERROR) {
		freeReplyObject(r);
		return true;
	}
	snprintf(why, sizeof why, "%s: %.100s", what, r ? r->str : cn->c->errstr);
	if (r)
		freeReplyObject(r);
	went_down(k, cn, why);
	return false;
}

/* Drops a connection that failed before it was used this time: a Redis that
 * restarted closed it while idle, which is no outage if a new one works. */
static void drop_stale(struct conn *cn)
{
	redisFree(cn->c);
	cn->c = NULL;
	cn->retry_at = 0;
}

/* A usable connection (*fresh: made by this call), or NULL (down and not yet time to retry, or the
 * attempt failed). */
static redisContext *get_conn(struct srv_kvs *k, struct conn *cn, bool *fresh)
{
	double now = srv_now();

	*fresh = false;
	if (cn->c)
		return cn->c;
	*fresh = true;
	if (now < cn->retry_at)
		return NULL;
	cn->c = redisConnectWithTimeout(k->host, k->port, tv_of(k->timeout));
	if (!cn->c || cn->c->err) {
		char why[160];

		snprintf(why, sizeof why, "%s", cn->c ? cn->c->errstr : "out of memory");
		went_down(k, cn, why);
		return NULL;
	}
	redisSetTimeout(cn->c, tv_of(k->timeout));
	if (k->pass[0]) {
		redisReply *r = k->user[0] ? redisCommand(cn->c, "AUTH %s %s", k->user, k->pass)
					   : redisCommand(cn->c, "AUTH %s", k->pass);

		if (!setup_cmd(k, cn, "AUTH", r))
			return NULL;
	}
	if (k->db && !setup_cmd(k, cn, "SELECT", redisCommand(cn->c, "SELECT %d", k->db)))
		return NULL;
	came_up(k);
	return cn->c;
}

static int key_of(const struct srv_kvs *k, const struct kv_hash128 *h, char *out, size_t n)
{
	return snprintf(out, n, "%s%016llx%016llx", k->prefix, (unsigned long long)h->hi, (unsigned long long)h->lo);
}

/* ---- the writer thread --------------------------------------------------------------- */

static void job_free(struct job *j)
{
	if (j) {
		free(j->keys);
		free(j->buf);
		free(j);
	}
}

static void write_job(struct srv_kvs *k, struct job *j)
{
	char key[192];
	size_t ok = 0;
	bool oom = false;

	for (int attempt = 0; attempt < 2; attempt++) {
		bool fresh, retry = false;
		redisContext *c = get_conn(k, &k->wr, &fresh);
		size_t sent = 0;

		if (!c)
			break;
		for (; sent < j->count; sent++) {
			int kl = key_of(k, &j->keys[sent], key, sizeof key);

			if (redisAppendCommand(c, "SET %b %b EX %d", key, (size_t)kl, j->buf + sent * k->eb, k->eb,
					       k->ttl) != REDIS_OK)
				break;
		}
		for (size_t i = 0; i < sent; i++) {
			redisReply *r = NULL;

			if (redisGetReply(c, (void **)&r) != REDIS_OK) {
				if (i == 0 && !fresh && attempt == 0) {
					drop_stale(&k->wr);
					retry = true;
				} else {
					went_down(k, &k->wr, c->errstr[0] ? c->errstr : "write failed");
				}
				break;
			}
			if (r->type == REDIS_REPLY_ERROR) {
				if (!strncmp(r->str, "OOM", 3))
					oom = true;
				else
					atomic_fetch_add(&k->st.errors, 1);
			} else {
				ok++;
			}
			freeReplyObject(r);
		}
		if (!retry)
			break;
	}
	atomic_fetch_add(&k->st.entries_written, ok);
	atomic_fetch_add(&k->st.bytes_written, ok * k->eb);
	atomic_fetch_add(&k->st.writes_dropped, j->count - ok);
	if (oom) {
		atomic_fetch_add(&k->st.full, 1);
		if (!atomic_exchange(&k->full, 1))
			fprintf(stderr, "tierkv serve: warning: KV store %s is full (maxmemory, noeviction): "
				"new entries are dropped until it has room\n", k->shown);
	} else if (ok) {
		atomic_store(&k->full, 0);
	}
	if (ok)
		came_up(k);
}

static void *writer_main(void *arg)
{
	struct srv_kvs *k = arg;

	pthread_mutex_lock(&k->mu);
	for (;;) {
		struct job *j;

		while (!k->stop && !k->q_head)
			pthread_cond_wait(&k->cv, &k->mu);
		if (k->stop)
			break;
		j = k->q_head;
		k->q_head = j->next;
		if (!k->q_head)
			k->q_tail = NULL;
		k->q_bytes -= j->count * k->eb;
		pthread_mutex_unlock(&k->mu);
		write_job(k, j);
		job_free(j);
		pthread_mutex_lock(&k->mu);
	}
	pthread_mutex_unlock(&k->mu);
	return NULL;
}

/* ---- start, stop ---------------------------------------------------------------------- */

int srv_kvs_start(struct srv_kvs **out, struct srv *s, char *msg, size_t n)
{
	struct srv_kvs *k = calloc(1, sizeof *k);
	struct tkv_error err = { 0 };
	const char *env = getenv("TIERKV_KV_STORE_PASSWORD");
	uint64_t fp[2];
	bool fresh;

	*out = NULL;
	if (!k) {
		snprintf(msg, n, "out of memory");
		return -1;
	}
	k->srv = s;
	k->timeout = s->p.kv_store_timeout > 0 ? s->p.kv_store_timeout : 0.5;
	k->ttl = s->p.kv_store_ttl > 0 ? s->p.kv_store_ttl : 3600;
	pthread_mutex_init(&k->mu, NULL);
	pthread_cond_init(&k->cv, NULL);
	if (parse_url(k, s->p.kv_store, msg, n))
		goto fail;
	if (s->p.kv_store_password || (env && *env))
		snprintf(k->pass, sizeof k->pass, "%s", s->p.kv_store_password ? s->p.kv_store_password : env);
	if (fingerprint(s->p.model_path, (int)s->p.ep.kv_type, fp)) {
		snprintf(msg, n, "--kv-store: cannot read the model file to fingerprint it: %s", strerror(errno));
		goto fail;
	}
	if (tkv_kvs_geometry(s->engine, &s->info, fp, &k->g, &err)) {
		snprintf(msg, n, "--kv-store: %s", err.msg);
		goto fail;
	}
	k->eb = kv_store_entry_bytes(&k->g);
	snprintf(k->prefix, sizeof k->prefix, "tkv:%016llx%016llx:L%uh%ud%up%u%s:", (unsigned long long)fp[1],
		 (unsigned long long)fp[0], k->g.n_layer, k->g.n_kv_head, k->g.head_dim, k->g.P,
		 kv_fmt_name(k->g.fmt));
	atomic_store(&k->up, 1);
	if (!get_conn(k, &k->look, &fresh))
		fprintf(stderr, "tierkv serve: the KV store is retried every %.0f s\n", RETRY_S);
	if (pthread_create(&k->writer, NULL, writer_main, k)) {
		snprintf(msg, n, "--kv-store: cannot start the writer thread");
		goto fail;
	}
	k->writer_started = true;
	fprintf(stderr, "tierkv serve: KV store %s: %zu-token chunks at %s, %zu bytes per token stored "
		"(%.1f%% of f16 K+V), TTL %d s\n", k->shown, (size_t)k->g.P, kv_fmt_name(k->g.fmt),
		k->eb / k->g.P, 100.0 * (double)k->eb / (double)k->g.P /
		(4.0 * k->g.n_layer * k->g.n_kv_head * k->g.head_dim), k->ttl);
	*out = k;
	return 0;
fail:
	srv_kvs_stop(k);
	return -1;
}

void srv_kvs_stop(struct srv_kvs *k)
{
	if (!k)
		return;
	if (k->writer_started) {
		pthread_mutex_lock(&k->mu);
		k->stop = true;
		pthread_cond_signal(&k->cv);
		pthread_mutex_unlock(&k->mu);
		pthread_join(k->writer, NULL);
	}
	while (k->q_head) {
		struct job *j = k->q_head;

		k->q_head = j->next;
		job_free(j);
	}
	if (k->look.c)
		redisFree(k->look.c);
	if (k->wr.c)
		redisFree(k->wr.c);
	pthread_cond_destroy(&k->cv);
	pthread_mutex_destroy(&k->mu);
	free(k);
}

/* ---- lookups (scheduler thread) ---------------------------------------------------------- */

void srv_kvs_fetch(struct srv_kvs *k, const int32_t *ids, size_t n)
{
	size_t n_chunks = n > 0 ? (n - 1) / k->g.P : 0, local, want, got = 0, asked = 0;
	struct kv_hash128 *chain = NULL;
	redisReply **rep = NULL;
	const uint8_t **bufs = NULL;
	size_t *lens = NULL;
	uint64_t verdicts[KV_STORE_N_VERDICTS] = { 0 };
	double t0 = srv_now();
	redisContext *c;
	char key[192];

	if (n_chunks == 0)
		return;
	local = tkv_kvs_local(k->srv->engine, ids, n_chunks);
	if (local >= n_chunks)
		return;
	want = n_chunks - local < MAX_LOOKUP_CHUNKS ? n_chunks - local : MAX_LOOKUP_CHUNKS;
	atomic_fetch_add(&k->st.lookups, 1);
	chain = malloc((local + want) * sizeof *chain);
	rep = calloc(want, sizeof *rep);
	bufs = calloc(want, sizeof *bufs);
	lens = calloc(want, sizeof *lens);
	if (!chain || !rep || !bufs || !lens)
		goto out;
	kv_store_chain(ids, local + want, k->g.P, chain);
	for (int attempt = 0;; attempt++) {
		bool fresh, retry = false;

		if (!(c = get_conn(k, &k->look, &fresh))) {
			atomic_fetch_add(&k->st.skipped, 1);
			goto out;
		}
		/* one round trip: GET and a TTL refresh for every chunk not held locally */
		for (asked = 0; asked < want; asked++) {
			int kl = key_of(k, &chain[local + asked], key, sizeof key);

			if (redisAppendCommand(c, "GET %b", key, (size_t)kl) != REDIS_OK ||
			    redisAppendCommand(c, "EXPIRE %b %d", key, (size_t)kl, k->ttl) != REDIS_OK)
				break;
		}
		for (size_t i = 0; i < 2 * asked; i++) {
			redisReply *r = NULL;

			if (redisGetReply(c, (void **)&r) != REDIS_OK) {
				if (i == 0 && !fresh && attempt == 0) {
					drop_stale(&k->look);
					retry = true;
					break;
				}
				went_down(k, &k->look, c->errstr[0] ? c->errstr : "lookup failed");
				goto out;
			}
			if (i % 2 == 0)
				rep[i / 2] = r;
			else
				freeReplyObject(r);
			if (srv_now() - t0 > k->timeout) {
				atomic_fetch_add(&k->st.timeouts, 1);
				went_down(k, &k->look, "lookup past --kv-store-timeout");
				goto out;
			}
		}
		if (!retry)
			break;
	}
	for (size_t i = 0; i < asked; i++) {
		if (rep[i]->type == REDIS_REPLY_STRING) {
			bufs[i] = (const uint8_t *)rep[i]->str;
			lens[i] = (size_t)rep[i]->len;
		} else if (rep[i]->type != REDIS_REPLY_NIL) {
			bufs[i] = (const uint8_t *)"";   /* a key of another type: refused as truncated */
			lens[i] = 0;
		}
	}
	got = tkv_kvs_import(k->srv->engine, &k->g, ids, chain, local, bufs, lens, asked, verdicts);
	came_up(k);
out:
	for (int v = 1; v < KV_STORE_N_VERDICTS; v++)
		atomic_fetch_add(&k->st.rejected[v], verdicts[v]);
	atomic_fetch_add(&k->st.hit_tokens, got * k->g.P);
	atomic_fetch_add(&k->st.bytes_read, got * k->eb);
	atomic_fetch_add(got ? &k->st.hits : &k->st.misses, 1);
	atomic_fetch_add(&k->st.lookup_ns, (uint64_t)((srv_now() - t0) * 1e9));
	for (size_t i = 0; rep && i < want; i++)
		if (rep[i])
			freeReplyObject(rep[i]);
	free(chain);
	free(rep);
	free(bufs);
	free(lens);
}

/* ---- saving (scheduler thread) --------------------------------------------------------------- */

void srv_kvs_save(struct srv_kvs *k, struct tkv_seq *seq, const int32_t *ids, size_t n)
{
	size_t n_chunks = n / k->g.P, from, count, done;
	struct job *j;
	struct tkv_engine *e = k->srv->engine;

	if (n_chunks == 0)
		return;
	from = tkv_kvs_stored(e, ids, n_chunks);
	if (from >= n_chunks)
		return;
	if (!atomic_load(&k->up) && srv_now() < k->wr.retry_at) {
		atomic_fetch_add(&k->st.writes_dropped, n_chunks - from);
		return;
	}
	count = n_chunks - from;
	pthread_mutex_lock(&k->mu);
	if (k->q_bytes + count * k->eb > MAX_QUEUE_BYTES) {
		pthread_mutex_unlock(&k->mu);
		atomic_fetch_add(&k->st.writes_dropped, count);
		return;
	}
	pthread_mutex_unlock(&k->mu);
	j = calloc(1, sizeof *j);
	if (!j || !(j->keys = malloc(n_chunks * sizeof *j->keys)) || !(j->buf = malloc(count * k->eb))) {
		job_free(j);
		atomic_fetch_add(&k->st.writes_dropped, count);
		return;
	}
	done = tkv_kvs_export(seq, &k->g, ids, from, n_chunks, j->buf);
	if (done == 0) {
		job_free(j);
		return;
	}
	kv_store_chain(ids, from + done, k->g.P, j->keys);
	memmove(j->keys, j->keys + from, done * sizeof *j->keys);
	j->count = done;
	j->first = from;
	tkv_kvs_mark_stored(e, ids, from + done);
	pthread_mutex_lock(&k->mu);
	if (k->q_tail)
		k->q_tail->next = j;
	else
		k->q_head = j;
	k->q_tail = j;
	k->q_bytes += done * k->eb;
	pthread_cond_signal(&k->cv);
	pthread_mutex_unlock(&k->mu);
}

/* ---- metrics ---------------------------------------------------------------------------------- */

void srv_kvs_metrics(struct srv_kvs *k, struct srv_buf *b)
{
	struct srv_kvs_stats *st = &k->st;
	double f16 = 4.0 * k->g.n_layer * k->g.n_kv_head * k->g.head_dim;

#define KVS_COUNTER(name, help, v)                                                                   \
	srv_buf_printf(b, "# HELP tierkv_kv_store_%s %s\n# TYPE tierkv_kv_store_%s counter\ntierkv_kv_store_%s %llu\n", \
		       name, help, name, name, (unsigned long long)(v))
#define KVS_GAUGE(name, help, v)                                                                     \
	srv_buf_printf(b, "# HELP tierkv_kv_store_%s %s\n# TYPE tierkv_kv_store_%s gauge\ntierkv_kv_store_%s %.17g\n", \
		       name, help, name, name, (double)(v))
	KVS_GAUGE("up", "1 while the KV store answers, 0 during an outage.", atomic_load(&k->up));
	KVS_COUNTER("lookups_total", "Prompts whose local prefix missed and asked the store.", atomic_load(&st->lookups));
	KVS_COUNTER("hits_total", "Lookups that attached at least one stored chunk.", atomic_load(&st->hits));
	KVS_COUNTER("misses_total", "Lookups that attached nothing.", atomic_load(&st->misses));
	KVS_COUNTER("skipped_total", "Lookups skipped while the store was down.", atomic_load(&st->skipped));
	KVS_COUNTER("hit_tokens_total", "Prompt tokens attached from the store instead of computed.",
		    atomic_load(&st->hit_tokens));
	KVS_COUNTER("read_bytes_total", "Entry bytes attached from the store.", atomic_load(&st->bytes_read));
	KVS_COUNTER("written_bytes_total", "Entry bytes written to the store.", atomic_load(&st->bytes_written));
	KVS_COUNTER("entries_written_total", "Chunks written to the store.", atomic_load(&st->entries_written));
	KVS_COUNTER("writes_dropped_total", "Chunks not written (store down or full, queue full).",
		    atomic_load(&st->writes_dropped));
	KVS_COUNTER("errors_total", "Failed store commands and connections.", atomic_load(&st->errors));
	KVS_COUNTER("outages_total", "Times the store went down (one warning each).", atomic_load(&st->outages));
	KVS_COUNTER("timeouts_total", "Lookups past --kv-store-timeout.", atomic_load(&st->timeouts));
	KVS_COUNTER("full_total", "Write batches refused for memory (OOM replies).", atomic_load(&st->full));
	srv_buf_printf(b, "# HELP tierkv_kv_store_rejected_entries_total Entries read back and refused, by reason.\n"
		       "# TYPE tierkv_kv_store_rejected_entries_total counter\n");
	for (int v = 1; v < KV_STORE_N_VERDICTS; v++)
		srv_buf_printf(b, "tierkv_kv_store_rejected_entries_total{reason=\"%s\"} %llu\n",
			       kv_store_verdict_name(v), (unsigned long long)atomic_load(&st->rejected[v]));
	srv_buf_printf(b, "# HELP tierkv_kv_store_lookup_seconds Time spent in store lookups.\n"
		       "# TYPE tierkv_kv_store_lookup_seconds summary\n"
		       "tierkv_kv_store_lookup_seconds_sum %.9f\ntierkv_kv_store_lookup_seconds_count %llu\n",
		       (double)atomic_load(&st->lookup_ns) * 1e-9, (unsigned long long)atomic_load(&st->lookups));
	KVS_GAUGE("entry_bytes", "Bytes of one stored chunk (all layers and KV heads).", k->eb);
	KVS_GAUGE("bytes_per_token", "Bytes stored per token.", (double)k->eb / k->g.P);
	KVS_GAUGE("bytes_per_token_ratio", "Bytes stored per token / f16 K+V bytes per token.",
		  (double)k->eb / k->g.P / f16);
#undef KVS_COUNTER
#undef KVS_GAUGE
}
