/* cq_sched.h - per-channel channel-data fan-out scheduler (channeld §2.6, with chanq's fixes).
 *
 * A pure protocol engine: no I/O and no clock reads. The caller passes `now_ms` (the channel's
 * loop-cached time, non-decreasing) into every call. Updates are opaque byte strings; the
 * scheduler never parses protobuf. It buffers updates, decides which subscriber is due, and
 * hands out one accumulated message per fan-out window through the callbacks of
 * cq_sched_ops_t.
 *
 * Threads: one scheduler belongs to one channel, and a channel belongs to one worker thread.
 * Every function must be called on that thread. The callbacks run on it, synchronously, from
 * inside cq_sched_update() (merge only) and cq_sched_tick() (all of them); they must not call
 * back into the same scheduler (checked with cq_assert).
 *
 * ---- Timing rule (the one that reproduces the design note's timeline) ----
 *
 * A subscriber has {last, interval, had_first}. At subscribe time last = now + delay_ms (delay
 * may be negative) and had_first = skip_first. The subscriber is due when now >= last +
 * interval. This is channeld's actual behaviour (§2.4: the first fan-out happens at
 * sub + delay + interval, not at sub + delay as the proto comment says) and the rule of issue 3.
 *   - First fan-out (had_first false): the FULL state (ops->full_state), then had_first = true,
 *     last = now (the full state already holds every update merged so far; updates buffered
 *     before it are never re-sent to this subscriber, even those with arrival == now).
 *   - Otherwise the window is the half-open [last, last + interval): every buffered update with
 *     last <= arrival < last + interval, in arrival order, minus the subscriber's own updates when
 *     skip_self is set. A non-empty window is sent as one message; then last += interval (not
 *     now), and the next window is examined in the same tick. So a subscriber that fell behind
 *     gets one message per missed non-empty window (10 ms interval, tick at last + 40 ms: the
 *     four closed windows [L, L+10) .. [L+30, L+40), one message for each that holds data).
 *     Empty windows are skipped in O(1), so a clock jump does not loop per window.
 *   - Half-open windows send an update that lands exactly on a boundary once (channeld's closed
 *     windows could send it twice). An update that arrives at t after the tick at t goes into the
 *     window that starts at t, so nothing is lost whatever the order of calls within one ms.
 *   - interval_ms is clamped to >= max(1, tick_ms), so interval 0 cannot spin.
 * Design note timeline (U1 60, U2 120, U3 240; C1 every 50 ms, C2 every 100 ms, ticks every 10 ms):
 * C1 subscribed at 0 with skip_first (or at -50, receiving the full state at 0) and C2 at 0
 * with delay -50 (or at -50 without delay) give exactly F1 nothing at 50, F2 = U1 at 100,
 * F3 = U2 at 150, F4 nothing, F5 = U3 at 250, F6 nothing at 300, F7 = full state at 50,
 * F8 = U1+U2 at 150, F9 = U3 at 250. The full-state-at-sub+delay rule would send C2's full state
 * at its subscription instead.
 *
 * Due subscribers are walked in order of due time (last + interval), ties in subscription order,
 * each one through all its closed windows before the next; per-connection order is what matters
 * on the wire. Subscribers due at the same time form a group, and a min-heap orders the groups:
 * aligned subscriptions (a world's clients) come due together window after window, so a tick
 * moves each from one group to the next in O(1), and cq_sched_next_due() is O(1).
 *
 * ---- Overload (cq_coarsen.h, cq_sched_set_coarsen) ----
 *
 * With the worker's overload level above 0 a window's length is its interval stretched by the
 * level (fixed when the window starts), and a subscriber more than one window late gets every
 * closed window merged into one fan-out. cq_sched_resync() makes a subscriber's next fan-out the
 * full state (its connection could not take the last one). With the level at 0 and no resync
 * every rule above holds unchanged.
 *
 * ---- Encode once ----
 *
 * Within one tick, all subscribers whose window selects the same run of buffered updates, with
 * the same excluded sender (only set when skip_self applies and the run holds one of the
 * subscriber's own updates) and the same masks id get the same cq_buf pointer, merged once and
 * filtered once. Keys are runs of the buffer, not times, so C1's [200, 250) and C2's [150, 250)
 * share a buffer when both hold only U3. The full state is fetched once per tick and filtered
 * once per masks id.
 *
 * ---- Update buffer ----
 *
 * Each accepted update is kept as {cq_buf reference, arrival, sender}; arrival is now_ms,
 * raised to the previous arrival if the caller's clock went backwards. The buffer never holds
 * more than the limit (CQ_SCHED_BUF_MAX by default):
 *   - an entry is dropped once no subscriber can need it (older than every subscriber's window
 *     start: cheaply, arrival < min due time - max interval; exactly, when compacting);
 *   - when the buffer is full of entries still needed, it is compacted down to 3/4 of the limit
 *     by FOLDING runs of adjacent entries (ops->merge) that no subscriber's window start
 *     separates. A folded entry takes the arrival of its newest part, so no subscriber loses or
 *     repeats an update; one whose window closes inside the run receives it one window later.
 *     Runs of one sender are folded first; a run of mixed senders is marked sender 0, so a
 *     skip_self subscriber may see its own update echoed inside it. Only if every pair is
 *     separated (more distinct window starts than slots) are the oldest two folded anyway; a
 *     subscriber that had received the first but not the second is then resynchronised with the
 *     full state at its next due time.
 * Entries no subscriber needs are dropped even if a later subscriber with a negative delay and
 * skip_first would have wanted them.
 */
#ifndef CQ_SCHED_H
#define CQ_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cq_buf.h"
#include "cq_coarsen.h"

/* Default bound of the update buffer, in entries (channeld's 512). */
#define CQ_SCHED_BUF_MAX 512u
/* Smallest limit cq_sched_set_buf_max() accepts. */
#define CQ_SCHED_BUF_MIN 4u

typedef struct cq_sched cq_sched_t;

/* Callbacks supplied by the channel. `ud` is the pointer given to cq_sched_new(). A callback that
 * returns a buffer returns it owned (the scheduler drops the reference) or NULL on failure. */
typedef struct cq_sched_ops {
    /* Merges parts[0..n), n >= 2, in arrival order, into one update (protobuf: their
     * concatenation; the first part is the base, the later ones are merged with the channel's
     * merge options). The parts are borrowed. Called from cq_sched_tick() for a window and from
     * cq_sched_update() when the buffer is folded. */
    cq_buf_t *(*merge)(void *ud, cq_buf_t *const *parts, size_t n);
    /* Returns the channel's whole current data, for first fan-outs. At most once per tick. */
    cq_buf_t *(*full_state)(void *ud);
    /* Applies the field masks named by masks_id (never 0) to `bytes` (borrowed, must not be
     * modified) and returns the filtered copy. Once per distinct output per tick. May be NULL
     * if no subscriber ever has a non-zero masks id. */
    cq_buf_t *(*filter)(void *ud, uint32_t masks_id, cq_buf_t *bytes);
    /* Delivers one fan-out to conn_id. `msg` is borrowed: take a reference (cq_buf_ref) to keep
     * it past the call. The same pointer may be passed to several connections in one tick. */
    void (*emit)(void *ud, uint32_t conn_id, cq_buf_t *msg);
} cq_sched_ops_t;

/* Which fields of cq_sched_subopts_t are present (protobuf "set" fields). */
enum {
    CQ_SCHED_SET_INTERVAL = 1u << 0,
    CQ_SCHED_SET_DELAY = 1u << 1,
    CQ_SCHED_SET_SKIP_SELF = 1u << 2,
    CQ_SCHED_SET_SKIP_FIRST = 1u << 3,
    CQ_SCHED_SET_MASKS = 1u << 4,
    CQ_SCHED_SET_ALIGN = 1u << 5,
};

/* Subscription options (§2.4). Fields whose CQ_SCHED_SET_* bit is clear are ignored: a new
 * subscriber then gets interval = tick, delay 0, skip_self true, skip_first false, masks 0 (the
 * caller normally passes the channel type's defaults explicitly). */
typedef struct cq_sched_subopts {
    uint32_t set;         /* CQ_SCHED_SET_* */
    uint32_t interval_ms; /* clamped to >= max(1, tick_ms) */
    int32_t delay_ms;     /* may be negative */
    bool skip_self;       /* do not send the subscriber its own updates */
    bool skip_first;      /* never send the full state */
    uint32_t masks_id;    /* 0 = no masks; equal masks must have equal ids */
    /* Windows on the interval's grid of the clock (window starts are multiples of the
     * interval), so that the subscriptions of one connection to many channels (a client's
     * spatial cells) come due in the same millisecond and leave in one write. The first window
     * then ends at the first grid point after subscription + delay (up to one interval before
     * channeld's sub + delay + interval), and never holds an update from before the
     * subscription (delay >= 0); a new interval re-aligns the next window without resending
     * or skipping an update. */
    bool align;
} cq_sched_subopts_t;

/* Read-only view of one subscriber, for tests and /debug. */
typedef struct cq_sched_info {
    uint32_t interval_ms; /* after clamping */
    int32_t delay_ms;
    bool skip_self, skip_first, had_first;
    uint32_t masks_id;
    int64_t last_ms; /* start of the next window (may be negative) */
    uint64_t due_ms; /* when the next window closes (0 if already past 0) */
} cq_sched_info_t;

/* Creates a scheduler. `ops` is borrowed and must outlive the scheduler; merge, full_state and
 * emit are required. `ud` is passed to every callback. tick_ms is the channel's tick interval
 * (0 is treated as 1). Returns owned, or NULL on OOM. */
cq_sched_t *cq_sched_new(const cq_sched_ops_t *ops, void *ud, uint32_t tick_ms);

/* Frees the scheduler, dropping every buffered reference. Accepts NULL; returns NULL. Must not be
 * called from a callback. */
cq_sched_t *cq_sched_free(cq_sched_t *s);

/* Sets the buffer limit (>= CQ_SCHED_BUF_MIN) before any update is buffered. Returns 0, -EINVAL
 * for a bad limit, or -EBUSY when updates are already buffered. */
int cq_sched_set_buf_max(cq_sched_t *s, uint32_t max);

/* Buffers one accepted update (already merged into the channel data by the caller). `bytes` is
 * borrowed: the scheduler takes its own reference on success. `sender` is the conn id of the
 * sender, 0 for none. With no subscriber nothing is buffered. May call ops->merge (folding).
 * Returns 0, -EINVAL (NULL bytes) or -ENOMEM (nothing buffered; the update will then reach
 * subscribers only through a full state). */
int cq_sched_update(cq_sched_t *s, cq_buf_t *bytes, uint32_t sender, uint64_t now_ms);

/* Subscribes conn_id (not 0) with the options in `o` (borrowed; NULL = all defaults), or, if it is
 * already subscribed, merges the set fields of `o` over its options and keeps its timing state
 * (last, had_first): a new interval moves its next due time, a new delay or skip_first has no
 * effect on timing, a new masks id applies from the next fan-out. Calls no callback. Returns 0,
 * -EINVAL or -ENOMEM. */
int cq_sched_sub(cq_sched_t *s, uint32_t conn_id, const cq_sched_subopts_t *o, uint64_t now_ms);

/* Removes conn_id from the schedule; no fan-out reaches it afterwards. Unknown ids are ignored.
 * Must not be called from a callback (defer it to after the tick). */
void cq_sched_unsub(cq_sched_t *s, uint32_t conn_id);

/* Runs the fan-out for time now_ms: every due subscriber receives its closed windows through
 * ops->emit. Calls all four callbacks. Returns 0, or -ENOMEM if a callback returned NULL: the
 * subscribers concerned keep their state and are retried by the next tick (possibly still in
 * this one, when their next due time is a group this tick has yet to serve). */
int cq_sched_tick(cq_sched_t *s, uint64_t now_ms);

/* Like cq_sched_tick, but serves at most max_subs due subscribers (earliest first); the rest stay
 * due (cq_sched_next_due() <= now) for the next call, so a caller can bound the time one call
 * takes and let other work run in between. */
int cq_sched_tick_max(cq_sched_t *s, uint64_t now_ms, uint32_t max_subs);

/* Aligned subscriptions' fan-outs leave on the grid of quantum_ms (0, the default: when their
 * window ends): a window that ends between two grid points is sent at the next one, with the
 * same content. A client's 20 ms and 50 ms cells then share every write (50 a second, not 60)
 * for at most quantum - 1 ms more latency on the 50 ms ones. Applies from each subscriber's
 * next window on. */
void cq_sched_set_quantum(cq_sched_t *s, uint32_t quantum_ms);

/* Borrows the worker's overload policy (NULL: none, the default): from the next window on,
 * windows are stretched by its level and missed windows merged (cq_coarsen.h). co must outlive
 * the scheduler; the scheduler counts what it stretched and merged in co->st. */
void cq_sched_set_coarsen(cq_sched_t *s, cq_coarsen_t *co);

/* conn_id's connection could not take its last fan-out (it was not queued: the connection is
 * behind, doc/spatial.md "Overload"): its next fan-out, at its next due time, is the full
 * state, which holds everything it missed, even with skip_first. Unknown ids are ignored.
 * Calls no callback; not from inside one. */
void cq_sched_resync(cq_sched_t *s, uint32_t conn_id);

/* Earliest time any subscriber is due (for the caller's timer), UINT64_MAX if none. O(1). */
uint64_t cq_sched_next_due(const cq_sched_t *s);

/* Introspection: buffered updates, subscribers, the buffer limit. */
uint32_t cq_sched_buffered(const cq_sched_t *s);
uint32_t cq_sched_count(const cq_sched_t *s);
uint32_t cq_sched_buf_max(const cq_sched_t *s);

/* Fills *ret_info for conn_id. Returns 0 or CQ_ENOCONN. */
int cq_sched_info(const cq_sched_t *s, uint32_t conn_id, cq_sched_info_t *ret_info);

#endif
