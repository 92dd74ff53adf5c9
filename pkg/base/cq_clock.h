/* cq_clock.h - clocks for the edge only.
 *
 * Logic never reads the clock itself: the loop caches "now" and passes it in (protocol engines
 * take now_ms as an argument), so tests drive them with a manual clock.
 */
#ifndef CQ_CLOCK_H
#define CQ_CLOCK_H

#include <stdint.h>

uint64_t cq_clock_mono_ms(void);
uint64_t cq_clock_mono_ns(void);
int64_t cq_clock_unix_ns(void);

#endif
