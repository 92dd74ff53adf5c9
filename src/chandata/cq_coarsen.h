/* cq_coarsen.h - graceful overload of channel-data fan-out: when a worker falls behind, its
 * schedulers merge more updates into each fan-out instead of queueing late ones.
 *
 * A pure policy engine: lateness samples and `now` in, a level out; no clock, no I/O. One
 * belongs to one worker (cq_core), which feeds it how late it served its earliest due fan-out
 * (cq_core_run_due) and hands it, borrowed, to every scheduler of its channels
 * (cq_sched_set_coarsen). Owned by that worker's thread.
 *
 * ---- The policy (doc/spatial.md "Overload") ----
 *
 * Level 0 is normal service. Samples at or above up_ms for sustain_ms raise the level by one (a
 * worker descheduled for a moment on a busy machine is on time again at its next sample), and
 * so does one sample at or above burst_ms (a worker that stood still that long has that many
 * windows to catch up on, which the merge makes one fan-out each); at most once per step_ms,
 * so that the new level has time to show its effect. Samples below down_ms for hold_ms lower
 * it by one, and the calm run starts again (hysteresis: up, fast; down, slowly).
 * At level L a subscription's window is stretched by a power of two chosen by its interval,
 * far interest first, near interest last:
 *
 *   level | interval >= 100 ms (far) | 50..99 ms (mid) | < 50 ms (near)
 *   ------+--------------------------+-----------------+---------------
 *     0   |            x1            |       x1        |      x1
 *     1   |            x2            |       x1        |      x1
 *     2   |            x4            |       x2        |      x1
 *     3   |            x4            |       x4        |      x2
 *     4   |            x8            |       x4        |      x2
 *
 * (a spatial world's d2, d1 and d0 damping are 100, 50 and 20 ms). A stretched window never
 * exceeds max(interval, CQ_COARSEN_SPAN_CAP_MS), so a subscriber's data is at most that old
 * plus the worker's lateness. The stretch applies when a window starts, and aligned windows
 * go to the grid of the stretched span, so a world's clients still come due together.
 * Above level 0 a subscriber that missed several windows gets them merged into one fan-out.
 * The level changes only channel data: replies, handovers, subscriptions and ownership are
 * never delayed by it.
 */
#ifndef CQ_COARSEN_H
#define CQ_COARSEN_H

#include <stdbool.h>
#include <stdint.h>

#define CQ_COARSEN_MAX 4u /* highest level */
#define CQ_COARSEN_SPAN_CAP_MS                                                                     \
    1000u /* a stretched window is never longer (unless its interval)                              \
           */
#define CQ_COARSEN_UP_MS      30u
#define CQ_COARSEN_DOWN_MS    10u
#define CQ_COARSEN_STEP_MS    250u
#define CQ_COARSEN_SUSTAIN_MS 100u
#define CQ_COARSEN_BURST_MS   120u
#define CQ_COARSEN_HOLD_MS    1000u

typedef struct cq_coarsen_cfg {
    uint32_t up_ms;      /* lateness at or above which the level rises */
    uint32_t down_ms;    /* lateness below which the level may fall */
    uint32_t step_ms;    /* at least this long between two rises */
    uint32_t sustain_ms; /* lateness at or above up_ms this long before a rise */
    uint32_t burst_ms;   /* one sample this late is enough for a rise */
    uint32_t hold_ms;    /* lateness below down_ms this long before each fall */
} cq_coarsen_cfg_t;

/* What a worker's schedulers did because of the level; counted by the schedulers (same
 * thread), read by the core for /metrics. */
typedef struct cq_coarsen_stats {
    uint64_t stretched; /* windows that started with a stretched span */
    uint64_t merged;    /* closed windows folded into a later fan-out (one missed window each) */
    uint64_t rises, falls;
} cq_coarsen_stats_t;

typedef struct cq_coarsen {
    cq_coarsen_cfg_t cfg;
    uint32_t level;
    uint64_t changed_ms; /* when the level last changed (0: never) */
    uint64_t calm_since; /* 1 + start of the current run of calm samples; 0: not calm */
    uint64_t late_since; /* 1 + start of the current run of late samples; 0: not late */
    uint32_t last_late;  /* the last sample */
    cq_coarsen_stats_t st;
} cq_coarsen_t;

/* Level 0 with cfg (copied; NULL or 0 fields: the CQ_COARSEN_* defaults). */
void cq_coarsen_init(cq_coarsen_t *co, const cq_coarsen_cfg_t *cfg);

/* One lateness sample: how late, in ms, the worker served its earliest due fan-out at now_ms
 * (0 when nothing was overdue). Returns +1 if the level rose, -1 if it fell, 0 otherwise. */
int cq_coarsen_observe(cq_coarsen_t *co, uint64_t now_ms, uint32_t late_ms);

/* The stretch factor (a power of two) of a window of interval_ms at level; level is clamped to
 * CQ_COARSEN_MAX. */
uint32_t cq_coarsen_factor(uint32_t level, uint32_t interval_ms);

/* The window length for interval_ms at co's level (co NULL: interval_ms). */
uint32_t cq_coarsen_span(const cq_coarsen_t *co, uint32_t interval_ms);

/* True when missed windows are merged into one fan-out (level above 0). */
static inline bool cq_coarsen_merging(const cq_coarsen_t *co)
{
    return co && co->level > 0;
}

#endif
