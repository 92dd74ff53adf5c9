/* cq_limits.h - the core's hard limits that other modules' bounds must agree with.
 *
 * It includes nothing, so a module that may not depend on the core (src/config) can have its
 * tests check their bounds against it at compile time. */
#ifndef CQ_LIMITS_H
#define CQ_LIMITS_H

/* Workers (threads, one core each); --workers is bounded by it (tests/unit/config). */
#define CQ_MAX_WORKERS 64

#endif
