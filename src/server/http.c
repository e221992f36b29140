/* http.c - the HTTP side: libmicrohttpd in thread-per-connection mode.
 *
 * Each connection's thread runs http_handle: it routes, checks the API key
 * (before reading the body), collects the body up to --max-body, parses and
 * validates it (api.c), queues the request (sched.c) and then blocks on the
 * request's condition variable: a plain response is sent when generation is
 * done; a stream (SSE) response is produced by stream_read as text arrives.
 * While waiting, the thread peeks at the socket every WAIT_SLICE seconds; a
 * client that closed its end cancels its request, and the scheduler frees the
 * sequence before its next step.
 *
 * Every error is OpenAI-shaped JSON ({"error": {...}}) with a 4xx/5xx code. */
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "server/srv_impl.h"

#define WAIT_SLICE 0.1      /* seconds between checks for a closed connection */
#define DISCARD_FACTOR 16   /* read and drop at most this x --max-body of an oversized chunked body */

enum route { R_NONE = 0, R_HEALTH, R_METRICS, R_MODELS, R_COMPLETIONS, R_CHAT, R_CACHE, R_WEB };

/* One HTTP request (MHD's con_cls). */
struct http_conn {
	enum route route;
	struct srv_buf body;
	size_t discarded;     /* bytes dropped past --max-body */
	bool too_big, nomem, responded;
	bool generating;      /* its request was queued: no idle timeout until it completes */
	double t0;
};

/* The idle timeout MHD closes silent connections after. A connection whose
 * request waits for tokens sends nothing while it is queued or prefilling (a
 * long prompt behind others: minutes), so generate() lifts the timeout for it
 * and http_completed() puts it back; the request's own --timeout still holds. */
static unsigned idle_seconds(const struct srv *s)
{
	return s->p.idle_timeout >= 1 ? (unsigned)s->p.idle_timeout : 1;
}

/* The state of every request that came when there was no memory for its own:
 * it was answered 503 at once and the rest of it is dropped (never written). */
static struct http_conn oom_conn = { .responded = true };

/* ---- responses ------------------------------------------------------------------ */

static void count(struct srv *s, int code)
{
	atomic_fetch_add(&s->st.http[srv_code_slot(code)], 1);
}

static const char oom_json[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
			       "\"param\":null,\"code\":\"out_of_memory\"}}";

/* Queues a response with body (malloc'd, taken; NULL = out of memory). */
static enum MHD_Result reply(struct srv *s, struct MHD_Connection *c, int code, const char *ctype, char *body,
			     const char *ignored)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	if (!body) {
		code = 503;
		ctype = "application/json";
		resp = MHD_create_response_from_buffer(sizeof oom_json - 1, (void *)oom_json, MHD_RESPMEM_PERSISTENT);
	} else {
		resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
		if (!resp)
			free(body);
	}
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", ctype);
	if (code == 503 || code == 429)
		MHD_add_response_header(resp, "Retry-After", "1");
	if (code == 401)
		MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
	if (ignored && *ignored)
		MHD_add_response_header(resp, "X-Tierkv-Ignored-Fields", ignored);
	ret = MHD_queue_response(c, (unsigned)code, resp);
	MHD_destroy_response(resp);
	count(s, code);
	return ret;
}

/* One of the web page's files (compiled in: never freed). The page may load
 * nothing from elsewhere (Content-Security-Policy), and asks for the API key
 * itself when /v1/cache answers 401. */
static enum MHD_Result reply_web(struct srv *s, struct MHD_Connection *c, const char *url)
{
	const char *ctype;
	const struct srv_web_file *f = srv_web_find(url, &ctype);
	struct MHD_Response *resp;
	enum MHD_Result ret;

	if (!f)
		return reply(s, c, 503, NULL, NULL, NULL);
	resp = MHD_create_response_from_buffer(f->len, (void *)f->data, MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", ctype);
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "Content-Security-Policy",
				"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
				"frame-ancestors 'none'");
	ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	count(s, 200);
	return ret;
}

static enum MHD_Result reply_error(struct srv *s, struct MHD_Connection *c, const struct srv_err *e)
{
	if (s->p.verbose || e->http >= 500)
		fprintf(stderr, "tierkv serve: %d %s: %s\n", e->http, e->code ? e->code : "", e->msg);
	return reply(s, c, e->http, "application/json", srv_api_error_json(e), NULL);
}

static enum MHD_Result reply_errf(struct srv *s, struct MHD_Connection *c, int http, const char *type,
				  const char *code, const char *msg)
{
	struct srv_err e;

	srv_errf(&e, http, type, code, NULL, "%s", msg);
	return reply_error(s, c, &e);
}

/* ---- connection state ------------------------------------------------------------ */

static int conn_fd(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);

	return ci ? ci->connect_fd : -1;
}

/* True when the client closed its end (or the socket failed). Pipelined bytes
 * waiting to be read do not count. */
static bool peer_gone(int fd)
{
	char b;
	ssize_t n;

	if (fd < 0)
		return false;
	n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n == 0)
		return true;
	return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

static void abs_deadline(struct timespec *ts, double secs)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)secs;
	ts->tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* Waits under s->mu until r has more than have_text bytes of text or is done.
 * Every WAIT_SLICE seconds (*checked: when the socket was last looked at) it
 * checks whether the client left; if so it cancels r and returns false. */
static bool wait_for(struct srv *s, struct srv_req *r, int fd, size_t have_text, double *checked)
{
	while (!r->done && r->text.len == have_text) {
		struct timespec ts;
		double now;

		abs_deadline(&ts, WAIT_SLICE);
		pthread_cond_timedwait(&r->cv, &s->mu, &ts);
		now = srv_now();
		if (now - *checked < WAIT_SLICE || r->done)
			continue;
		*checked = now;
		if (peer_gone(fd)) {
			r->cancelled = true;
			pthread_cond_signal(&s->sched_cv);
			return false;
		}
	}
	return true;
}

/* ---- authentication ---------------------------------------------------------------- */

/* Compares the presented key with ours in time that depends on our key's
 * length only. */
static bool key_ok(const char *want, const char *got)
{
	size_t wn = strlen(want), gn = got ? strlen(got) : 0;
	unsigned char d = (unsigned char)(wn != gn);

	for (size_t i = 0; i < wn; i++)
		d |= (unsigned char)want[i] ^ (unsigned char)(i < gn ? got[i] : 0);
	return d == 0;
}

static bool authorized(struct srv *s, struct MHD_Connection *c)
{
	const char *h;

	if (!s->p.api_key || !*s->p.api_key)
		return true;
	h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!h || strncasecmp(h, "Bearer ", 7))
		return false;
	h += 7;
	while (*h == ' ')
		h++;
	return key_ok(s->p.api_key, h);
}

/* ---- generation ---------------------------------------------------------------------- */

struct http_stream {
	struct srv *s;
	struct srv_req *r;
	int fd;
	bool role_sent, ended;
	size_t text_sent;        /* bytes of r->text already sent */
	double checked;          /* when the socket was last checked */
	struct srv_buf out;      /* SSE bytes not yet handed to MHD */
	size_t out_off;
	const char *last;        /* out of memory: the static events that end the stream */
	size_t last_off;
};

/* The end of a stream that ran out of memory: an error event and [DONE]. */
static const char oom_events[] = "data: {\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
				 "\"param\":null,\"code\":\"out_of_memory\"}}\n\ndata: [DONE]\n\n";

static int sse(struct srv_buf *b, char *json)
{
	int rc;

	if (!json)
		return -1;
	rc = srv_buf_str(b, "data: ") | srv_buf_str(b, json) | srv_buf_str(b, "\n\n");
	free(json);
	return rc;
}

/* Produces the next SSE events into st->out, waiting for text if needed.
 * 0, or -1 when the client left or memory ran out. */
static int stream_fill(struct http_stream *st)
{
	struct srv *s = st->s;
	struct srv_req *r = st->r;
	struct srv_buf text = { .a = s->alloc };
	struct srv_usage u;
	enum srv_finish fin;
	struct srv_err err;
	bool done;
	int rc = 0;

	if (r->gen.kind == SRV_CHAT && !st->role_sent) {
		st->role_sent = true;
		return sse(&st->out, srv_api_chunk_json(SRV_CHAT, r->id, r->created, s->model_id, true, NULL, 0, NULL));
	}
	pthread_mutex_lock(&s->mu);
	if (!wait_for(s, r, st->fd, st->text_sent, &st->checked)) {
		pthread_mutex_unlock(&s->mu);
		return -1;
	}
	if (r->text.len > st->text_sent && srv_buf_add(&text, r->text.p + st->text_sent, r->text.len - st->text_sent))
		rc = -1;
	st->text_sent = r->text.len;
	done = r->done;
	fin = r->finish;
	err = r->err;
	u.prompt = (uint32_t)r->gen.n_prompt;
	u.completion = r->n_gen_pub;
	pthread_mutex_unlock(&s->mu);
	if (rc)
		return -1;
	if (text.len)
		rc |= sse(&st->out, srv_api_chunk_json(r->gen.kind, r->id, r->created, s->model_id, false, text.p,
						       text.len, NULL));
	srv_buf_free(&text);
	if (done) {
		if (fin == SRV_FIN_ERROR) {
			rc |= sse(&st->out, srv_api_error_json(&err));
		} else {
			rc |= sse(&st->out, srv_api_chunk_json(r->gen.kind, r->id, r->created, s->model_id, false, NULL, 0,
							       srv_finish_name(fin)));
			if (r->gen.include_usage)
				rc |= sse(&st->out, srv_api_usage_chunk_json(r->gen.kind, r->id, r->created, s->model_id, &u));
		}
		rc |= srv_buf_str(&st->out, "data: [DONE]\n\n");
		st->ended = true;
	}
	return rc;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct http_stream *st = cls;

	(void)pos;
	for (;;) {
		if (st->last) {
			size_t left = strlen(st->last) - st->last_off, n = left < max ? left : max;

			if (n == 0)
				return MHD_CONTENT_READER_END_OF_STREAM;
			memcpy(buf, st->last + st->last_off, n);
			st->last_off += n;
			return (ssize_t)n;
		}
		if (st->out_off < st->out.len) {
			size_t n = st->out.len - st->out_off < max ? st->out.len - st->out_off : max;

			memcpy(buf, st->out.p + st->out_off, n);
			st->out_off += n;
			return (ssize_t)n;
		}
		st->out.len = 0;
		st->out_off = 0;
		if (st->ended)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (stream_fill(st)) {
			bool gone;

			pthread_mutex_lock(&st->s->mu);
			gone = st->r->cancelled;
			pthread_mutex_unlock(&st->s->mu);
			if (gone)
				return MHD_CONTENT_READER_END_WITH_ERROR;
			/* out of memory: end with the error event (the request is
			 * cancelled when the response is freed) */
			st->out.len = 0;
			st->out_off = 0;
			st->last = oom_events;
		}
	}
}

/* The response is gone (sent, or the connection failed): cancel the request if
 * it still runs and drop our reference. */
static void stream_free(void *cls)
{
	struct http_stream *st = cls;

	srv_sched_cancel(st->s, st->r);
	srv_req_put(st->r);
	srv_buf_free(&st->out);
	tkv_free(st->s->alloc, st);
}

static enum MHD_Result generate(struct srv *s, struct MHD_Connection *c, struct http_conn *hc, enum srv_kind kind)
{
	struct srv_gen g;
	struct srv_err e;
	struct srv_req *r;
	int fd = conn_fd(c);

	if (srv_api_parse(&s->api, kind, hc->body.p ? hc->body.p : "", hc->body.len, &g, &e)) {
		srv_gen_free(&g);
		return reply_error(s, c, &e);
	}
	if (!(r = srv_req_new(s, &g))) {
		srv_gen_free(&g);
		return reply_errf(s, c, 503, "server_error", "out_of_memory", "out of memory; retry later");
	}
	if (srv_sched_submit(s, r, &e)) {
		srv_req_put(r);
		return reply_error(s, c, &e);
	}
	hc->generating = true;
	MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
	if (r->gen.stream) {
		struct http_stream *st = tkv_calloc(s->alloc, 1, sizeof *st);
		struct MHD_Response *resp;
		enum MHD_Result ret;

		if (st) {
			st->out.a = s->alloc;
			st->s = s;
			st->r = r;
			st->fd = fd;
			st->checked = srv_now();
		}
		resp = st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free) : NULL;
		if (!resp) {
			tkv_free(s->alloc, st);
			srv_sched_cancel(s, r);
			srv_req_put(r);
			return reply(s, c, 503, NULL, NULL, NULL);
		}
		MHD_add_response_header(resp, "Content-Type", "text/event-stream");
		MHD_add_response_header(resp, "Cache-Control", "no-cache");
		if (r->gen.ignored[0])
			MHD_add_response_header(resp, "X-Tierkv-Ignored-Fields", r->gen.ignored);
		ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
		MHD_destroy_response(resp);
		count(s, 200);
		return ret;
	}

	/* a plain response: wait for the whole text */
	{
		char *json;
		struct srv_usage u;
		double checked = srv_now();

		pthread_mutex_lock(&s->mu);
		while (!r->done)
			if (!wait_for(s, r, fd, r->text.len, &checked)) {
				pthread_mutex_unlock(&s->mu);
				srv_req_put(r);
				return MHD_NO; /* the client left: close */
			}
		pthread_mutex_unlock(&s->mu);
		/* done: the scheduler no longer writes r */
		if (r->finish == SRV_FIN_ERROR) {
			e = r->err;
			srv_req_put(r);
			return reply_error(s, c, &e);
		}
		u.prompt = (uint32_t)r->gen.n_prompt;
		u.completion = r->n_gen_pub;
		json = srv_api_response_json(kind, r->id, r->created, s->model_id, r->text.p, r->text.len,
					     srv_finish_name(r->finish), &u);
		if (s->p.verbose)
			fprintf(stderr, "tierkv serve: %s %u+%u tokens, %s, %.3f s\n", r->id, u.prompt, u.completion,
				srv_finish_name(r->finish), srv_now() - r->t_enqueue);
		{
			enum MHD_Result ret = reply(s, c, 200, "application/json", json, r->gen.ignored);

			srv_req_put(r);
			return ret;
		}
	}
}

/* ---- routing ------------------------------------------------------------------------ */

/* The API's paths (each also under /v1). */
static const struct {
	const char *path;
	enum route route;
} routes[] = {
	{ "/health", R_HEALTH },           { "/metrics", R_METRICS },
	{ "/models", R_MODELS },           { "/completions", R_COMPLETIONS },
	{ "/chat/completions", R_CHAT },   { "/cache", R_CACHE },
};

static enum route route_of(const char *url)
{
	const char *ctype;

	if (srv_web_find(url, &ctype))
		return R_WEB;
	if (!strncmp(url, "/v1/", 4))
		url += 3;
	for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
		if (!strcmp(url, routes[i].path))
			return routes[i].route;
	return R_NONE;
}

static bool is_post(enum route r)
{
	return r == R_COMPLETIONS || r == R_CHAT;
}

/* First call for a request: route, method, key, declared size. Returns true
 * when a response was queued (in *ret). */
static bool first_call(struct srv *s, struct MHD_Connection *c, struct http_conn *hc, const char *url,
		       const char *method, enum MHD_Result *ret)
{
	const char *cl;

	hc->route = route_of(url);
	if (hc->route == R_NONE) {
		*ret = reply_errf(s, c, 404, "invalid_request_error", "unknown_url", "unknown URL; the endpoints are "
				  "/v1/completions, /v1/chat/completions, /v1/models, /v1/cache, /health, /metrics "
				  "and the web page at /");
		return true;
	}
	if (strcmp(method, is_post(hc->route) ? "POST" : "GET") &&
	    !(strcmp(method, "HEAD") == 0 && !is_post(hc->route))) {
		struct srv_err e;

		srv_errf(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "this endpoint takes %s",
			 is_post(hc->route) ? "POST" : "GET");
		*ret = reply_error(s, c, &e);
		return true;
	}
	if (hc->route != R_HEALTH && hc->route != R_WEB && !authorized(s, c)) {
		*ret = reply_errf(s, c, 401, "invalid_request_error", "invalid_api_key",
				  "missing or invalid API key (send 'Authorization: Bearer KEY')");
		return true;
	}
	cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl && strtoull(cl, NULL, 10) > s->p.max_body) {
		struct srv_err e;

		srv_errf(&e, 413, "invalid_request_error", "request_too_large", NULL,
			 "the request body is %s bytes; this server takes at most %zu", cl, s->p.max_body);
		*ret = reply_error(s, c, &e);
		return true;
	}
	return false;
}

static enum MHD_Result http_handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
				   const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	struct srv *s = cls;
	struct http_conn *hc = *con_cls;
	enum MHD_Result ret = MHD_YES;

	(void)version;
	if (!hc) {
		if (!(hc = tkv_calloc(s->alloc, 1, sizeof *hc))) {
			/* no state to read the body into: answer now */
			hc = &oom_conn;
			*con_cls = hc;
			return reply(s, c, 503, NULL, NULL, NULL);
		}
		hc->body.a = s->alloc;
		hc->t0 = srv_now();
		*con_cls = hc;
		if (first_call(s, c, hc, url, method, &ret))
			hc->responded = true;
		return ret;
	}
	if (*upload_size) {
		size_t n = *upload_size;

		*upload_size = 0;
		if (hc->responded)
			return MHD_YES;
		if (hc->too_big || hc->body.len + n > s->p.max_body) {
			hc->too_big = true;
			hc->discarded += n;
			return hc->discarded > DISCARD_FACTOR * s->p.max_body ? MHD_NO : MHD_YES;
		}
		if (!hc->nomem && srv_buf_add(&hc->body, upload, n))
			hc->nomem = true;
		return MHD_YES;
	}
	if (hc->responded)
		return MHD_YES;
	hc->responded = true;
	if (hc->too_big) {
		struct srv_err e;

		srv_errf(&e, 413, "invalid_request_error", "request_too_large", NULL,
			 "the request body is over %zu bytes, this server's limit", s->p.max_body);
		return reply_error(s, c, &e);
	}
	if (hc->nomem)
		return reply_errf(s, c, 503, "server_error", "out_of_memory", "out of memory; retry later");
	switch (hc->route) {
	case R_HEALTH: {
		bool stopping;

		pthread_mutex_lock(&s->mu);
		stopping = s->stopping;
		pthread_mutex_unlock(&s->mu);
		if (stopping)
			return reply_errf(s, c, 503, "server_error", "shutting_down", "the server is shutting down");
		return reply(s, c, 200, "application/json", strdup("{\"status\":\"ok\"}"), NULL);
	}
	case R_METRICS:
		return reply(s, c, 200, "text/plain; version=0.0.4; charset=utf-8", srv_metrics_text(s), NULL);
	case R_MODELS:
		return reply(s, c, 200, "application/json", srv_api_models_json(s->model_id, s->started), NULL);
	case R_CACHE:
		return reply(s, c, 200, "application/json", srv_cache_text(s, srv_now()), NULL);
	case R_WEB:
		return reply_web(s, c, url);
	case R_COMPLETIONS:
		return generate(s, c, hc, SRV_COMPLETION);
	case R_CHAT:
		return generate(s, c, hc, SRV_CHAT);
	default:
		return reply_errf(s, c, 404, "invalid_request_error", "unknown_url", "unknown URL");
	}
}

static void http_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	struct srv *s = cls;
	struct http_conn *hc = *con_cls;

	(void)toe;
	if (!hc || hc == &oom_conn)
		return;
	if (hc->generating) /* the connection may carry a next request: idle again */
		MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, idle_seconds(s));
	srv_buf_free(&hc->body);
	tkv_free(s->alloc, hc);
	*con_cls = NULL;
}

static void http_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	fprintf(stderr, "tierkv serve: http: ");
	vfprintf(stderr, fmt, ap);
}

int http_start(struct srv *s, struct srv_err *e)
{
	struct addrinfo hints = { 0 }, *ai = NULL;
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
			 MHD_USE_ERROR_LOG;
	unsigned limit = (unsigned)(s->p.max_seqs + s->p.max_queue + 64);
	int rc;

	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	if ((rc = getaddrinfo(s->p.host, NULL, &hints, &ai)) || !ai)
		return srv_errf(e, 0, NULL, NULL, NULL, "--host %s: %s", s->p.host, gai_strerror(rc));
	if (ai->ai_family == AF_INET6) {
		((struct sockaddr_in6 *)ai->ai_addr)->sin6_port = htons((uint16_t)s->p.port);
		flags |= MHD_USE_IPv6;
	} else {
		((struct sockaddr_in *)ai->ai_addr)->sin_port = htons((uint16_t)s->p.port);
	}
	s->httpd = MHD_start_daemon(flags, (uint16_t)s->p.port, NULL, NULL, http_handle, s,
				    MHD_OPTION_EXTERNAL_LOGGER, http_log, s,
				    MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				    MHD_OPTION_NOTIFY_COMPLETED, http_completed, s,
				    MHD_OPTION_CONNECTION_LIMIT, limit,
				    MHD_OPTION_CONNECTION_TIMEOUT, idle_seconds(s),
				    MHD_OPTION_THREAD_STACK_SIZE, (size_t)1 << 20,
				    MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!s->httpd)
		return srv_errf(e, 0, NULL, NULL, NULL, "cannot listen on %s port %d (in use, or not an address here)",
				s->p.host, s->p.port);
	return 0;
}

int http_port(struct srv *s)
{
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->httpd, MHD_DAEMON_INFO_BIND_PORT);

	return di ? di->port : s->p.port;
}

void http_stop(struct srv *s)
{
	if (s->httpd)
		MHD_stop_daemon(s->httpd);
	s->httpd = NULL;
}
