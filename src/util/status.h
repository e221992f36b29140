/* status.h - the one status type of tierkv and the error record that goes with it.
 *
 * Every library function that can fail returns an int status: TKV_OK (0) or a
 * negative TKV_ERR_*. When it also takes a `struct tkv_error *err` (which may be
 * NULL), it writes one message a user can act on, naming what is wrong and where. */
#ifndef TKV_UTIL_STATUS_H
#define TKV_UTIL_STATUS_H

#include "tierkv.h"

#if defined(__GNUC__)
#define TKV_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TKV_PRINTF(a, b)
#endif

/* tkv_errf (set an error record and return its status) is public: tierkv.h. */

#endif
