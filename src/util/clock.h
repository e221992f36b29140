/* clock.h - the monotonic clock in nanoseconds, for the thread pool's spin
 * window and the engine's time-weighted pool figures. */
#ifndef TKV_UTIL_CLOCK_H
#define TKV_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t util_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
