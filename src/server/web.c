/* web.c - the web page served at / (web/ in the source tree).
 *
 * The files of web/ are compiled into the binary: cmake/embed_web.cmake
 * writes them as byte arrays into the build tree's web_files.c
 * (srv_web_files), so the page needs no file, network or CDN at run time.
 * This file maps a URL to one of them. */
#include <string.h>

#include "server/srv_impl.h"

static const char *ctype_of(const char *name)
{
	static const struct { const char *ext, *type; } types[] = {
		{ ".html", "text/html; charset=utf-8" },
		{ ".js", "text/javascript; charset=utf-8" },
		{ ".css", "text/css; charset=utf-8" },
		{ ".svg", "image/svg+xml" },
		{ ".png", "image/png" },
		{ ".txt", "text/plain; charset=utf-8" },
	};
	const char *dot = strrchr(name, '.');

	for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
		if (!strcmp(dot, types[i].ext))
			return types[i].type;
	return "application/octet-stream";
}

const struct srv_web_file *srv_web_find(const char *url, const char **ctype)
{
	const char *name;

	if (url[0] != '/')
		return NULL;
	name = url[1] ? url + 1 : "index.html";
	for (size_t i = 0; i < srv_web_n_files; i++)
		if (!strcmp(srv_web_files[i].name, name)) {
			*ctype = ctype_of(name);
			return &srv_web_files[i];
		}
	return NULL;
}
