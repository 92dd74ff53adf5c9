/* test_wait.h - waiting for a condition another thread makes true, in a cmocka test: poll it
 * every millisecond, fail the test naming the condition after TEST_WAIT_MS (define it before
 * including this to change it). Header only; needs cq_clock.h, cmocka and unistd.h. */
#ifndef TEST_WAIT_H
#define TEST_WAIT_H

#include <unistd.h>

#include "cq_clock.h"

#ifndef TEST_WAIT_MS
#define TEST_WAIT_MS 30000
#endif

#define WAIT_UNTIL(cond)                                                                           \
    do {                                                                                           \
        uint64_t end_ = cq_clock_mono_ms() + TEST_WAIT_MS;                                         \
        while (!(cond)) {                                                                          \
            if (cq_clock_mono_ms() > end_)                                                         \
                fail_msg("timed out waiting for %s", #cond);                                       \
            usleep(1000);                                                                          \
        }                                                                                          \
    } while (0)

#endif
