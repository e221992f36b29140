/* status.c - status strings and error messages. */
#include "util/status.h"

#include <stdarg.h>
#include <stdio.h>

const char *tkv_status_str(int status)
{
	switch (status) {
	case TKV_OK: return "ok";
	case TKV_ERR_NOMEM: return "out of memory";
	case TKV_ERR_IO: return "I/O error";
	case TKV_ERR_FORMAT: return "bad file format";
	case TKV_ERR_ARG: return "invalid argument";
	case TKV_ERR_UNSUPPORTED: return "unsupported";
	case TKV_ERR_KV_FULL: return "KV cache memory budget exhausted";
	case TKV_ERR_CTX_FULL: return "context length exceeded";
	case TKV_ERR_INTERNAL: return "internal error";
	}
	return "unknown status";
}

int tkv_errf(struct tkv_error *err, int status, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		err->status = status;
		vsnprintf(err->msg, sizeof err->msg, fmt, ap);
		va_end(ap);
	}
	return status;
}
