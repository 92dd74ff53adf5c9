/* cq_sched.c - per-channel fan-out scheduler; the contract is in cq_sched.h. */
#include "cq_sched.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cq_alloc.h"
#include "cq_coarsen.h"
#include "cq_err.h"
#include "cq_map.h"
#include "cq_util.h"

#define BUF_LIMIT  4096u /* largest accepted buffer limit (stack bitmap in compact()) */
#define RING_FIRST 8u

/* One buffered update. seq orders entries for full-state floors and encode-once keys; a folded
 * entry keeps the seq of its first part and the arrival of its last. */
typedef struct ent {
    cq_buf_t *b;
    int64_t at;
    uint64_t seq;
    uint32_t sender;
} ent_t;

typedef struct grp grp_t;

/* What a tick reads comes first, in 64 bytes (run_group prefetches them). */
typedef struct sub {
    int64_t last;     /* start of the next window */
    int64_t due;      /* when it is sent: its end, or the quantum's next grid point (align) */
    uint64_t floor;   /* entries with seq < floor are already in a full state it received */
    uint64_t own_seq; /* 1 + seq of its newest own update, 0 = none */
    grp_t *g;         /* the group of its due time */
    uint32_t conn;
    uint32_t interval;
    uint32_t masks;
    uint32_t gi;   /* position in its group's members */
    uint32_t wlen; /* the window ends at last + wlen: span, or the span's next grid point */
    bool skip_self, skip_first, had_first, align;
    int32_t delay;
    uint64_t order; /* subscription order: ties in due time are served in it */
} sub_t;

/* The subscribers due at one time (see "due groups" below). */
struct grp {
    int64_t due;
    uint32_t hidx;   /* in the heap of groups; UINT32_MAX while a tick holds it */
    uint32_t n, cap; /* v[0..n): members in arrival order, NULL where one left */
    uint32_t live;   /* non-NULL members */
    bool unsorted;   /* a member joined after a later subscriber: sort before serving */
    uint64_t max_order;
    sub_t **v;
    grp_t *next_free;
};

#define GRP_KEEP       8 /* empty groups kept for reuse */
#define PREFETCH_AHEAD 4 /* members fetched ahead while a group is served */

enum { K_WIN, K_FULL };

/* One encode-once result of the current tick; holds a reference on b. */
typedef struct slot {
    uint64_t lo, hi; /* first and last seq of the run (0, 0 for the full state) */
    uint32_t excl, masks;
    uint32_t kind, used;
    cq_buf_t *b;
} slot_t;

struct cq_sched {
    const cq_sched_ops_t *ops;
    void *ud;
    uint32_t tick;
    bool busy; /* inside a callback-calling function: no re-entry */
    /* update buffer: ring of rcap (power of two) entries, at most max used */
    ent_t *ring;
    cq_buf_t **parts; /* rcap scratch pointers for ops->merge */
    uint32_t rcap, head, count, max;
    uint64_t seq_next;
    int64_t last_at;
    /* subscribers: by conn id, and in due groups (a min-heap, and a table by due time) */
    cq_map_t by_conn;
    uint32_t max_span; /* >= every subscriber's due - last (drop_safe) */
    uint32_t quantum;  /* aligned windows are sent on this grid; 0: when they end */
    cq_coarsen_t *co;  /* the worker's overload level (borrowed); NULL: never coarsened */
    grp_t **gheap, **gtab, *gfree;
    uint32_t ngrp, ghcap, gtcap, gtcount, nfree;
    grp_t **held; /* the groups a tick took off the heap (ghcap slots) */
    uint32_t nheld;
    uint64_t order_next;
    /* encode-once cache of the current tick, and its last answer (memo.b borrowed from it) */
    slot_t memo;
    slot_t *cache;
    uint32_t ccap, ccount;
};

/* ---- small helpers ---- */

/* Times are int64 so that sub time + a negative delay can go below 0; clamped far from overflow. */
static int64_t to_ms(uint64_t now_ms)
{
    const uint64_t lim = (uint64_t)INT64_MAX / 4;
    return (int64_t)(now_ms > lim ? lim : now_ms);
}

static int64_t due_of(const sub_t *u)
{
    return u->due;
}

static int64_t end_of(const sub_t *u)
{
    return u->last + (int64_t)u->wlen;
}

/* The grid point of interval iv at or before t (t may be negative). */
static int64_t align_down(int64_t t, uint32_t iv)
{
    int64_t m = t % (int64_t)iv;
    return t - (m < 0 ? m + (int64_t)iv : m);
}

/* u's window length now: its interval, stretched at an overload level above 0. */
static inline uint32_t span_of(const cq_sched_t *s, const sub_t *u)
{
    return s->co && s->co->level ? cq_coarsen_span(s->co, u->interval) : u->interval;
}

/* Starts u's next window at last. Its length is the interval stretched by the worker's overload
 * level (cq_coarsen.h), fixed now for the whole window; an aligned window ends on the grid of
 * that length, so the aligned subscriptions of many connections still close together. */
static void start_window(cq_sched_t *s, sub_t *u, int64_t last)
{
    uint32_t span = span_of(s, u);
    if (span != u->interval)
        s->co->st.stretched++;
    int64_t end = u->align ? align_down(last, span) + span : last + span;
    u->last = last;
    u->wlen = (uint32_t)(end - last);
    u->due = u->align && s->quantum ? align_down(end + s->quantum - 1, s->quantum) : end;
    if (u->due - last > (int64_t)s->max_span)
        s->max_span = (uint32_t)(u->due - last);
}

static uint32_t clamp_interval(const cq_sched_t *s, uint32_t ms)
{
    return ms < s->tick ? s->tick : ms;
}

static ent_t *at(const cq_sched_t *s, uint32_t i)
{
    return &s->ring[(s->head + i) & (s->rcap - 1)];
}

/* First index in [lo, count) whose arrival is >= t (count if none). */
static uint32_t lb_time(const cq_sched_t *s, uint32_t lo, int64_t t)
{
    uint32_t hi = s->count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (at(s, mid)->at < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* First index whose seq is >= seq (count if none). */
static uint32_t lb_seq(const cq_sched_t *s, uint64_t seq)
{
    uint32_t lo = 0, hi = s->count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (at(s, mid)->seq < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* First buffered entry the subscriber still needs. */
static uint32_t start_of(const cq_sched_t *s, const sub_t *u)
{
    uint32_t a = lb_time(s, 0, u->last);
    uint32_t b = lb_seq(s, u->floor);
    return a > b ? a : b;
}

/* ---- due groups ----
 *
 * Subscribers whose next window closes at the same time form one group, and the groups form a
 * min-heap on that time. Aligned subscriptions (a spatial world's clients) come due together,
 * window after window, so a tick moves them from one group to the next in arrival order: O(1)
 * per subscriber, where a heap of subscribers paid a sift each (a fifth of chanqd's CPU in a
 * 1000-client world, bench/RESULTS.md issue 28). A group's time is a lower bound of its members'
 * due times: normally equal, later only for a member that could not move (out of memory), which
 * the next tick retries. A table by time finds a group in O(1). */

static bool grp_before(const grp_t *a, const grp_t *b)
{
    return a->due < b->due;
}

static void gheap_set(cq_sched_t *s, uint32_t i, grp_t *g)
{
    s->gheap[i] = g;
    g->hidx = i;
}

static void gsift_up(cq_sched_t *s, uint32_t i)
{
    grp_t *g = s->gheap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!grp_before(g, s->gheap[p]))
            break;
        gheap_set(s, i, s->gheap[p]);
        i = p;
    }
    gheap_set(s, i, g);
}

static void gsift_down(cq_sched_t *s, uint32_t i)
{
    grp_t *g = s->gheap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= s->ngrp)
            break;
        if (c + 1 < s->ngrp && grp_before(s->gheap[c + 1], s->gheap[c]))
            c++;
        if (!grp_before(s->gheap[c], g))
            break;
        gheap_set(s, i, s->gheap[c]);
        i = c;
    }
    gheap_set(s, i, g);
}

/* Capacity was reserved when the group was made (grp_new), so pushing never fails. */
static void gheap_push(cq_sched_t *s, grp_t *g)
{
    gheap_set(s, s->ngrp++, g);
    gsift_up(s, g->hidx);
}

static void gheap_remove(cq_sched_t *s, grp_t *g)
{
    uint32_t i = g->hidx;
    grp_t *tail = s->gheap[--s->ngrp];
    g->hidx = UINT32_MAX;
    if (tail != g) {
        gheap_set(s, i, tail);
        gsift_up(s, i);
        gsift_down(s, tail->hidx);
    }
}

/* The table of groups by due time: open addressing, backward-shift deletion. */
static uint32_t gtab_home(const cq_sched_t *s, int64_t due)
{
    uint64_t h = (uint64_t)due * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & (s->gtcap - 1);
}

static grp_t *gtab_find(const cq_sched_t *s, int64_t due)
{
    if (!s->gtcount)
        return NULL;
    for (uint32_t i = gtab_home(s, due);; i = (i + 1) & (s->gtcap - 1)) {
        grp_t *g = s->gtab[i];
        if (!g || g->due == due)
            return g;
    }
}

static void gtab_put(cq_sched_t *s, grp_t *g)
{
    uint32_t i = gtab_home(s, g->due);
    while (s->gtab[i])
        i = (i + 1) & (s->gtcap - 1);
    s->gtab[i] = g;
    s->gtcount++;
}

static void gtab_del(cq_sched_t *s, const grp_t *g)
{
    uint32_t mask = s->gtcap - 1, i = gtab_home(s, g->due);
    while (s->gtab[i] != g)
        i = (i + 1) & mask;
    s->gtab[i] = NULL;
    s->gtcount--;
    for (uint32_t j = (i + 1) & mask; s->gtab[j]; j = (j + 1) & mask) {
        uint32_t h = gtab_home(s, s->gtab[j]->due);
        /* moves back an entry whose home is not in (i, j] */
        if (i <= j ? (h <= i || h > j) : (h <= i && h > j)) {
            s->gtab[i] = s->gtab[j];
            s->gtab[j] = NULL;
            i = j;
        }
    }
}

/* Room for one more group in the table (load <= 1/2) and the heap, counting the groups a tick
 * holds, which go back on the heap after others were made. 0 or -ENOMEM. */
static int grp_reserve(cq_sched_t *s)
{
    if (s->ngrp + s->nheld + 1 > s->ghcap) {
        uint32_t cap = s->ghcap ? s->ghcap * 2 : 8;
        grp_t **h = cq_realloc(s->gheap, cap * sizeof(*h));
        if (!h)
            return -ENOMEM;
        s->gheap = h;
        grp_t **d = cq_realloc(s->held, cap * sizeof(*d));
        if (!d)
            return -ENOMEM;
        s->held = d;
        s->ghcap = cap;
    }
    if ((s->gtcount + 1) * 2 <= s->gtcap)
        return 0;
    uint32_t cap = s->gtcap ? s->gtcap * 2 : 16;
    grp_t **t = cq_calloc(cap, sizeof(*t)), **old = s->gtab;
    if (!t)
        return -ENOMEM;
    uint32_t ocap = s->gtcap;
    s->gtab = t;
    s->gtcap = cap;
    s->gtcount = 0;
    for (uint32_t i = 0; i < ocap; i++)
        if (old[i])
            gtab_put(s, old[i]);
    cq_free(old);
    return 0;
}

/* A new empty group for due, listed in the table and the heap; NULL on out of memory. Groups
 * come and go every window, so a few are kept for reuse with their member arrays. */
static grp_t *grp_new(cq_sched_t *s, int64_t due)
{
    if (grp_reserve(s))
        return NULL;
    grp_t *g = s->gfree;
    if (g) {
        s->gfree = g->next_free;
        s->nfree--;
    } else if (!(g = cq_calloc(1, sizeof(*g)))) {
        return NULL;
    }
    g->due = due;
    g->n = g->live = 0;
    g->unsorted = false;
    g->max_order = 0;
    gtab_put(s, g);
    gheap_push(s, g);
    return g;
}

/* Unlists an empty group (from the heap too unless the tick holds it) and keeps or frees it. */
static void grp_release(cq_sched_t *s, grp_t *g)
{
    if (g->hidx != UINT32_MAX)
        gheap_remove(s, g);
    gtab_del(s, g);
    if (s->nfree < GRP_KEEP) {
        g->next_free = s->gfree;
        s->gfree = g;
        s->nfree++;
        return;
    }
    cq_free(g->v);
    cq_free(g);
}

static int grp_append(grp_t *g, sub_t *u)
{
    if (g->n == g->cap) {
        uint32_t cap = g->cap ? g->cap * 2 : 8;
        sub_t **v = cq_realloc(g->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        g->v = v;
        g->cap = cap;
    }
    u->g = g;
    u->gi = g->n;
    g->v[g->n++] = u;
    g->live++;
    g->unsorted |= u->order < g->max_order;
    g->max_order = CQ_MAX(g->max_order, u->order);
    return 0;
}

/* Puts u into the group of its due time. 0 or -ENOMEM (u is then in no group). */
static int grp_place(cq_sched_t *s, sub_t *u)
{
    int64_t due = due_of(u);
    grp_t *g = gtab_find(s, due);
    bool fresh = !g;
    if (fresh && !(g = grp_new(s, due)))
        return -ENOMEM;
    if (grp_append(g, u) == 0)
        return 0;
    if (fresh)
        grp_release(s, g);
    return -ENOMEM;
}

/* Takes u out of its group; an emptied group goes. Not during a tick. */
static void grp_leave(cq_sched_t *s, sub_t *u)
{
    grp_t *g = u->g;
    g->v[u->gi] = NULL;
    u->g = NULL;
    if (--g->live == 0) {
        grp_release(s, g);
        return;
    }
    if (g->n > 16 && g->live < g->n / 2) { /* squeeze the holes out, keeping the order */
        uint32_t w = 0;
        for (uint32_t i = 0; i < g->n; i++)
            if (g->v[i]) {
                g->v[w] = g->v[i];
                g->v[w]->gi = w;
                w++;
            }
        g->n = w;
    }
}

/* Moves u to the group of its (changed) due time; on out of memory it stays where it is. */
static int grp_move(cq_sched_t *s, sub_t *u)
{
    grp_t *old = u->g;
    if (old && old->due == due_of(u))
        return 0;
    uint32_t gi = u->gi;
    if (grp_place(s, u)) {
        u->g = old;
        u->gi = gi;
        return -ENOMEM;
    }
    grp_t *now = u->g;
    uint32_t ni = u->gi;
    u->g = old;
    u->gi = gi;
    if (old)
        grp_leave(s, u);
    u->g = now;
    u->gi = ni;
    return 0;
}

/* Runs body for every subscriber u (no tick running: every group is in the heap). */
#define FOR_EACH_SUB(s, u, body)                                                                   \
    for (uint32_t gi_ = 0; gi_ < (s)->ngrp; gi_++)                                                 \
        for (uint32_t mi_ = 0; mi_ < (s)->gheap[gi_]->n; mi_++) {                                  \
            sub_t *u = (s)->gheap[gi_]->v[mi_];                                                    \
            if (u) {                                                                               \
                body;                                                                              \
            }                                                                                      \
        }

static void recompute_max_span(cq_sched_t *s)
{
    s->max_span = 0;
    FOR_EACH_SUB(s, u, s->max_span = CQ_MAX(s->max_span, (uint32_t)(u->due - u->last)));
}

/* ---- update buffer ---- */

static int ring_grow(cq_sched_t *s)
{
    uint32_t cap = s->rcap ? s->rcap * 2 : RING_FIRST;
    ent_t *r = cq_malloc(cap * sizeof(*r));
    cq_buf_t **p = cq_realloc(s->parts, cap * sizeof(*p));
    if (p)
        s->parts = p;
    if (!r || !p) {
        cq_free(r);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < s->count; i++)
        r[i] = *at(s, i);
    cq_free(s->ring);
    s->ring = r;
    s->rcap = cap;
    s->head = 0;
    return 0;
}

static void drop_front(cq_sched_t *s, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        cq_buf_unref(at(s, i)->b);
    s->head = (s->head + n) & (s->rcap - 1);
    s->count -= n;
}

/* Drops the entries no subscriber can need: arrival < min due - max span <= every window
 * start. With no subscriber at all, everything goes. */
static void drop_safe(cq_sched_t *s)
{
    if (!s->count)
        return;
    if (!s->ngrp) {
        drop_front(s, s->count);
        return;
    }
    int64_t bound = s->gheap[0]->due - (int64_t)s->max_span;
    drop_front(s, lb_time(s, 0, bound));
}

/* Merges entries [j, e) of the buffer into one entry written at index w (w <= j). Returns 0 or
 * -ENOMEM (then nothing changed). */
static int fold_run(cq_sched_t *s, uint32_t w, uint32_t j, uint32_t e)
{
    ent_t first = *at(s, j), last = *at(s, e - 1);
    uint32_t sender = first.sender;
    for (uint32_t i = j; i < e; i++) {
        s->parts[i - j] = at(s, i)->b;
        if (at(s, i)->sender != sender)
            sender = 0;
    }
    cq_buf_t *m = s->ops->merge(s->ud, s->parts, e - j);
    if (!m)
        return -ENOMEM;
    for (uint32_t i = j; i < e; i++)
        cq_buf_unref(at(s, i)->b);
    *at(s, w) = (ent_t){m, last.at, first.seq, sender};
    return 0;
}

#define BIT_TEST(bm, i) (((bm)[(i) / 64] >> ((i) % 64)) & 1u)
#define BIT_SET(bm, i)  ((bm)[(i) / 64] |= (uint64_t)1 << ((i) % 64))

/* One folding pass: joins runs of entries not separated by a window start (bit in bnd), of one
 * sender unless `mixed`, until count reaches target. Returns 0 or -ENOMEM. */
static int fold_pass(cq_sched_t *s, const uint64_t *bnd, bool mixed, uint32_t target)
{
    uint32_t need = s->count - target, removed = 0, w = 0, j = 0;
    int err = 0;
    while (j < s->count) {
        uint32_t e = j + 1;
        while (!err && e < s->count && removed + (e - j) <= need && !BIT_TEST(bnd, e) &&
               (mixed || at(s, e)->sender == at(s, j)->sender))
            e++;
        if (e - j > 1 && fold_run(s, w, j, e) == 0) {
            removed += e - j - 1;
        } else {
            if (e - j > 1)
                err = -ENOMEM;
            e = j + 1;
            *at(s, w) = *at(s, j);
        }
        w++;
        j = e;
    }
    s->count = w;
    return err;
}

/* Marks the window start of every subscriber that still needs buffered entries; returns the
 * smallest start (count if none). */
static uint32_t mark_starts(const cq_sched_t *s, uint64_t *bnd)
{
    uint32_t min = s->count;
    FOR_EACH_SUB(s, u, {
        if (u->had_first) {
            uint32_t st = start_of(s, u);
            if (st < s->count)
                BIT_SET(bnd, st);
            min = CQ_MIN(min, st);
        }
    });
    return min;
}

/* Last resort: every pair is separated. Folds the two oldest entries; whoever had received the
 * first but not the second gets the full state at its next due time instead. */
static int fold_oldest(cq_sched_t *s)
{
    FOR_EACH_SUB(s, u, {
        if (u->had_first && start_of(s, u) == 1)
            u->had_first = false;
    });
    int r = fold_run(s, 0, 0, 2);
    if (r)
        return r;
    for (uint32_t i = 2; i < s->count; i++)
        *at(s, i - 1) = *at(s, i);
    s->count--;
    return 0;
}

/* Called with a full buffer: drops what nobody needs, then folds down to 3/4 of the limit. */
static int compact(cq_sched_t *s)
{
    uint64_t bm[BUF_LIMIT / 64] = {0};
    uint32_t min = mark_starts(s, bm);
    if (min) {
        drop_front(s, min);
        memset(bm, 0, sizeof(bm));
        mark_starts(s, bm);
    }
    uint32_t target = s->max - s->max / 4;
    int r = 0;
    if (s->count > target)
        r = fold_pass(s, bm, false, target);
    if (!r && s->count > target) {
        memset(bm, 0, sizeof(bm));
        mark_starts(s, bm);
        r = fold_pass(s, bm, true, target);
    }
    if (!r && s->count == s->max)
        r = fold_oldest(s);
    return r;
}

/* ---- encode-once cache (valid for one tick) ---- */

static uint32_t slot_hash(uint32_t kind, uint64_t lo, uint64_t hi, uint32_t excl, uint32_t masks)
{
    uint64_t h = lo * 0x9E3779B97F4A7C15ull;
    h ^= (hi + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full;
    h ^= (((uint64_t)excl << 32) | masks) * 0x165667B19E3779F9ull;
    h ^= kind;
    h ^= h >> 29;
    return (uint32_t)(h ^ (h >> 32));
}

static slot_t *cache_find(const cq_sched_t *s, uint32_t kind, uint64_t lo, uint64_t hi,
                          uint32_t excl, uint32_t masks)
{
    if (!s->ccount)
        return NULL;
    for (uint32_t i = slot_hash(kind, lo, hi, excl, masks);; i++) {
        slot_t *sl = &s->cache[i & (s->ccap - 1)];
        if (!sl->used)
            return NULL;
        if (sl->kind == kind && sl->lo == lo && sl->hi == hi && sl->excl == excl &&
            sl->masks == masks)
            return sl;
    }
}

/* Inserts a slot; capacity was reserved. Takes b's reference. */
static void cache_put(cq_sched_t *s, slot_t key, cq_buf_t *b)
{
    uint32_t i = slot_hash(key.kind, key.lo, key.hi, key.excl, key.masks);
    while (s->cache[i & (s->ccap - 1)].used)
        i++;
    key.used = 1;
    key.b = b;
    s->cache[i & (s->ccap - 1)] = key;
    s->ccount++;
}

/* Makes room for n more slots (load factor <= 1/2). Returns 0 or -ENOMEM. */
static int cache_reserve(cq_sched_t *s, uint32_t n)
{
    if ((s->ccount + n) * 2 <= s->ccap)
        return 0;
    uint32_t cap = s->ccap ? s->ccap * 2 : 16;
    while ((s->ccount + n) * 2 > cap)
        cap *= 2;
    slot_t *old = s->cache;
    uint32_t ocap = s->ccap;
    s->cache = cq_calloc(cap, sizeof(slot_t));
    if (!s->cache) {
        s->cache = old;
        return -ENOMEM;
    }
    s->ccap = cap;
    s->ccount = 0;
    for (uint32_t i = 0; i < ocap; i++)
        if (old[i].used)
            cache_put(s, old[i], old[i].b);
    cq_free(old);
    return 0;
}

static void cache_clear(cq_sched_t *s)
{
    s->memo.used = 0;
    for (uint32_t i = 0; s->ccount && i < s->ccap; i++) {
        if (s->cache[i].used) {
            cq_buf_unref(s->cache[i].b);
            s->cache[i].used = 0;
            s->ccount--;
        }
    }
}

/* ---- fan-out ---- */

/* Returns owned: the merge of entries [lo, hi) without those of sender excl (if not 0). */
static cq_buf_t *build_window(cq_sched_t *s, uint32_t lo, uint32_t hi, uint32_t excl)
{
    size_t n = 0;
    for (uint32_t i = lo; i < hi; i++)
        if (!excl || at(s, i)->sender != excl)
            s->parts[n++] = at(s, i)->b;
    cq_assert(n > 0);
    if (n == 1)
        return cq_buf_ref(s->parts[0]);
    return s->ops->merge(s->ud, s->parts, n);
}

static bool same_key(const slot_t *a, const slot_t *b)
{
    return a->kind == b->kind && a->lo == b->lo && a->hi == b->hi && a->excl == b->excl &&
           a->masks == b->masks;
}

static int get_output_slow(cq_sched_t *s, const slot_t *k, uint32_t lo, uint32_t hi, cq_buf_t **ret)
{
    slot_t *sl = cache_find(s, k->kind, k->lo, k->hi, k->excl, k->masks);
    if (sl) {
        *ret = sl->b;
        return 0;
    }
    if (cache_reserve(s, 2))
        return -ENOMEM;
    slot_t rkey = *k;
    rkey.masks = 0;
    sl = cache_find(s, rkey.kind, rkey.lo, rkey.hi, rkey.excl, 0);
    cq_buf_t *raw = sl ? sl->b : NULL;
    if (!raw) {
        raw = k->kind == K_FULL ? s->ops->full_state(s->ud) : build_window(s, lo, hi, k->excl);
        if (!raw)
            return -ENOMEM;
        cache_put(s, rkey, raw);
    }
    if (!k->masks || !s->ops->filter) {
        *ret = raw;
        return 0;
    }
    cq_buf_t *f = s->ops->filter(s->ud, k->masks, raw);
    if (!f)
        return -ENOMEM;
    cache_put(s, *k, f);
    *ret = f;
    return 0;
}

/* Sets *ret (borrowed from the cache until the end of the tick) to the output for the key: a
 * window [lo, hi) of the buffer, or the full state. Computes the unfiltered bytes and the
 * filtered copy at most once per tick. Returns 0 or -ENOMEM. A group's members mostly share
 * their window, so the previous answer is checked before the cache. */
static int get_output(cq_sched_t *s, const slot_t *k, uint32_t lo, uint32_t hi, cq_buf_t **ret)
{
    if (s->memo.used && same_key(&s->memo, k)) {
        *ret = s->memo.b;
        return 0;
    }
    int r = get_output_slow(s, k, lo, hi, ret);
    if (r == 0) {
        s->memo = *k;
        s->memo.b = *ret;
        s->memo.used = 1;
    }
    return r;
}

static int send_full(cq_sched_t *s, sub_t *u)
{
    slot_t key = {.kind = K_FULL, .masks = u->masks};
    cq_buf_t *out;
    int r = get_output(s, &key, 0, 0, &out);
    if (r)
        return r;
    s->ops->emit(s->ud, u->conn, out);
    return 0;
}

/* Sends the window [lo, hi) (non-empty) to u, minus its own updates if skip_self. */
static int send_window(cq_sched_t *s, sub_t *u, uint32_t lo, uint32_t hi)
{
    slot_t key = {.kind = K_WIN, .lo = at(s, lo)->seq, .hi = at(s, hi - 1)->seq, .masks = u->masks};
    if (u->skip_self && u->own_seq > at(s, lo)->seq) {
        uint32_t own = 0;
        for (uint32_t i = lo; i < hi; i++)
            own += at(s, i)->sender == u->conn;
        if (own == hi - lo)
            return 0;
        if (own)
            key.excl = u->conn;
    }
    cq_buf_t *out;
    int r = get_output(s, &key, lo, hi, &out);
    if (r)
        return r;
    s->ops->emit(s->ud, u->conn, out);
    return 0;
}

/* The end of the last window of length span, from due on, that closed by t (t >= due). */
static int64_t last_closed(int64_t due, uint32_t span, int64_t t)
{
    return due + (t - due) / (int64_t)span * (int64_t)span;
}

/* Handles the window [last, due) of a subscriber that had its first fan-out. An empty window
 * moves last straight to the window holding the next buffered entry (or the last closed one),
 * so a long gap costs O(1). Under overload (cq_coarsen_merging) the windows that closed since
 * are merged into this one: a late worker sends one fan-out per subscriber, not one per missed
 * window. */
static int run_window(cq_sched_t *s, sub_t *u, int64_t now)
{
    uint32_t span = span_of(s, u);
    int64_t next = end_of(u);
    if (cq_coarsen_merging(s->co) && next + span <= now) {
        int64_t end = last_closed(next, span, now);
        s->co->st.merged += (uint64_t)((end - next) / span);
        next = end;
    }
    uint32_t lo = start_of(s, u);
    uint32_t hi = lb_time(s, lo, next);
    if (lo == hi) {
        start_window(s, u, last_closed(next, span, hi < s->count ? at(s, hi)->at : now));
        return 0;
    }
    int r = send_window(s, u, lo, hi);
    if (!r)
        start_window(s, u, next);
    return r;
}

/* Sends everything due to one subscriber: the full state first if it never had it, then one
 * message per closed non-empty window. */
static int run_sub(cq_sched_t *s, sub_t *u, int64_t now)
{
    while (due_of(u) <= now) {
        int r;
        if (!u->had_first) {
            r = send_full(s, u);
            if (!r) {
                u->had_first = true;
                /* the floor keeps what the full state held out of the aligned window */
                start_window(s, u, u->align ? align_down(now, u->interval) : now);
                u->floor = s->seq_next;
            }
        } else {
            r = run_window(s, u, now);
        }
        if (r)
            return r;
    }
    return 0;
}

static int by_order(const void *a, const void *b)
{
    const sub_t *x = *(sub_t *const *)a, *y = *(sub_t *const *)b;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Groups of aligned subscriptions move whole and stay in order; a group that took members from
 * several (the 20, 50 and 100 ms windows all close at every 100 ms mark) is sorted once. */
static void grp_sort(grp_t *g)
{
    uint32_t w = 0;
    for (uint32_t i = 0; i < g->n; i++)
        if (g->v[i])
            g->v[w++] = g->v[i];
    g->n = w;
    qsort(g->v, w, sizeof(*g->v), by_order);
    for (uint32_t i = 0; i < w; i++)
        g->v[i]->gi = i;
    g->unsorted = false;
}

/* Serves the due group g, which the caller took off the heap (it stays in the table, so a
 * member that cannot move, for want of memory or of budget, is kept in it), in arrival order
 * while *nd < max. A served member joins the group of its next due time; g goes back on the heap
 * with the members it kept, or goes. Returns the first error of run_sub. */
static int run_group(cq_sched_t *s, grp_t *g, int64_t now, uint32_t max, uint32_t *nd)
{
    int err = 0;
    uint32_t w = 0;
    grp_t *hint = NULL; /* the group the last moved member joined */
    if (g->unsorted)
        grp_sort(g);
    for (uint32_t i = 0; i < g->n; i++) {
        sub_t *u = g->v[i];
        /* Members are separate allocations: fetching one a few ahead hides the cache miss that
         * was half of this loop's time in a 1000-client world (perf annotate, issue 28). */
        if (i + PREFETCH_AHEAD < g->n && g->v[i + PREFETCH_AHEAD]) {
            const char *p = (const char *)g->v[i + PREFETCH_AHEAD];
            __builtin_prefetch(p);
            __builtin_prefetch(p + 63); /* calloc aligns to 16: the 64 bytes may span two lines */
        }
        if (!u)
            continue;
        if (*nd < max) {
            ++*nd;
            int r = run_sub(s, u, now);
            if (r && !err)
                err = r;
            if (due_of(u) != g->due) {
                /* aligned members mostly go to the same next group: skip the table then */
                if (hint && hint->due == due_of(u) && grp_append(hint, u) == 0)
                    continue;
                if (grp_place(s, u) == 0) {
                    hint = u->g;
                    continue;
                }
            }
        }
        u->g = g;
        u->gi = w;
        g->v[w++] = u;
    }
    g->n = g->live = w;
    g->unsorted = false; /* what stayed kept its order */
    if (w)
        gheap_push(s, g);
    else
        grp_release(s, g);
    return err;
}

/* ---- public API ---- */

cq_sched_t *cq_sched_new(const cq_sched_ops_t *ops, void *ud, uint32_t tick_ms)
{
    cq_assert(ops && ops->merge && ops->full_state && ops->emit);
    cq_sched_t *s = cq_calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->ops = ops;
    s->ud = ud;
    s->tick = tick_ms ? tick_ms : 1;
    s->max = CQ_SCHED_BUF_MAX;
    s->seq_next = 1;
    s->last_at = INT64_MIN;
    cq_map_init(&s->by_conn);
    return s;
}

cq_sched_t *cq_sched_free(cq_sched_t *s)
{
    if (!s)
        return NULL;
    cq_assert(!s->busy);
    if (s->count)
        drop_front(s, s->count);
    FOR_EACH_SUB(s, u, cq_free(u));
    for (uint32_t i = 0; i < s->ngrp; i++) {
        cq_free(s->gheap[i]->v);
        cq_free(s->gheap[i]);
    }
    for (grp_t *g = s->gfree, *n; g; g = n) {
        n = g->next_free;
        cq_free(g->v);
        cq_free(g);
    }
    cache_clear(s);
    cq_map_done(&s->by_conn);
    cq_free(s->ring);
    cq_free(s->parts);
    cq_free(s->gheap);
    cq_free(s->held);
    cq_free(s->gtab);
    cq_free(s->cache);
    cq_free(s);
    return NULL;
}

int cq_sched_set_buf_max(cq_sched_t *s, uint32_t max)
{
    if (max < CQ_SCHED_BUF_MIN || max > BUF_LIMIT)
        return -EINVAL;
    if (s->count)
        return -EBUSY;
    s->max = max;
    return 0;
}

/* Appends one entry; the caller made room. Takes a reference on b. */
static void append(cq_sched_t *s, cq_buf_t *b, uint32_t sender, int64_t arrival)
{
    uint64_t seq = s->seq_next++;
    *at(s, s->count++) = (ent_t){cq_buf_ref(b), arrival, seq, sender};
    s->last_at = arrival;
    sub_t *u = sender ? cq_map_get(&s->by_conn, sender) : NULL;
    if (u)
        u->own_seq = seq + 1;
}

int cq_sched_update(cq_sched_t *s, cq_buf_t *bytes, uint32_t sender, uint64_t now_ms)
{
    cq_assert(!s->busy);
    if (!bytes)
        return -EINVAL;
    if (!s->ngrp) {
        drop_safe(s);
        return 0; /* nobody to keep it for: later subscribers start from the full state */
    }
    int64_t arrival = CQ_MAX(to_ms(now_ms), s->last_at);
    s->busy = true;
    drop_safe(s);
    if (s->count >= s->max)
        (void)compact(s); /* on -ENOMEM it may still have made room */
    if (s->count < s->max && s->count == s->rcap)
        (void)ring_grow(s);
    s->busy = false;
    if (s->count >= s->max || s->count == s->rcap)
        return -ENOMEM;
    append(s, bytes, sender, arrival);
    return 0;
}

/* Merges the set fields of o over u (§2.4); timing state is left alone. */
static void apply_opts(cq_sched_t *s, sub_t *u, const cq_sched_subopts_t *o)
{
    if (!o)
        return;
    if (o->set & CQ_SCHED_SET_INTERVAL)
        u->interval = clamp_interval(s, o->interval_ms);
    if (o->set & CQ_SCHED_SET_DELAY)
        u->delay = o->delay_ms;
    if (o->set & CQ_SCHED_SET_SKIP_SELF)
        u->skip_self = o->skip_self;
    if (o->set & CQ_SCHED_SET_SKIP_FIRST)
        u->skip_first = o->skip_first;
    if (o->set & CQ_SCHED_SET_MASKS)
        u->masks = o->masks_id;
    if (o->set & CQ_SCHED_SET_ALIGN)
        u->align = o->align;
}

/* An aligned subscriber whose interval changed: its next window starts on the new grid, at or
 * before the old start. What it already received (before the old start) is floored out, so
 * nothing is sent twice, and nothing is skipped. */
static void realign(cq_sched_t *s, sub_t *u)
{
    int64_t old = u->last, a = align_down(old, u->interval);
    if (!u->align || a == old)
        return;
    uint32_t i = lb_time(s, 0, old);
    uint64_t first = i < s->count ? at(s, i)->seq : s->seq_next;
    start_window(s, u, a);
    if (u->had_first && first > u->floor)
        u->floor = first;
}

/* 1 + seq of the newest buffered update from conn, 0 if none. */
static uint64_t find_own(const cq_sched_t *s, uint32_t conn)
{
    for (uint32_t i = s->count; i-- > 0;)
        if (at(s, i)->sender == conn)
            return at(s, i)->seq + 1;
    return 0;
}

static int sub_new(cq_sched_t *s, uint32_t conn_id, const cq_sched_subopts_t *o, int64_t now)
{
    sub_t *u = cq_calloc(1, sizeof(*u));
    if (!u)
        return -ENOMEM;
    u->conn = conn_id;
    u->interval = s->tick;
    u->skip_self = true;
    apply_opts(s, u, o);
    start_window(s, u, u->align ? align_down(now + u->delay, u->interval) : now + u->delay);
    u->had_first = u->skip_first;
    /* A window never reaches back before the subscription unless the delay does: an update
     * buffered in the same ms just before it (arrival == now == last) is not the
     * subscriber's, e.g. it is already in the snapshot a handover sent with skip_first. */
    if (u->delay >= 0)
        u->floor = s->seq_next;
    u->own_seq = find_own(s, conn_id);
    u->order = s->order_next++;
    if (cq_map_put(&s->by_conn, conn_id, u)) {
        cq_free(u);
        return -ENOMEM;
    }
    if (grp_place(s, u)) {
        cq_map_del(&s->by_conn, conn_id);
        cq_free(u);
        return -ENOMEM;
    }
    return 0;
}

int cq_sched_sub(cq_sched_t *s, uint32_t conn_id, const cq_sched_subopts_t *o, uint64_t now_ms)
{
    cq_assert(!s->busy);
    if (!conn_id)
        return -EINVAL;
    sub_t *u = cq_map_get(&s->by_conn, conn_id);
    if (!u)
        return sub_new(s, conn_id, o, to_ms(now_ms));
    uint32_t iv = u->interval;
    apply_opts(s, u, o);
    if (u->interval != iv) {
        start_window(s, u, u->last); /* the new interval's due, then its grid (align) */
        realign(s, u);
    }
    int r = grp_move(s, u);
    recompute_max_span(s);
    return r;
}

void cq_sched_unsub(cq_sched_t *s, uint32_t conn_id)
{
    cq_assert(!s->busy);
    sub_t *u = cq_map_del(&s->by_conn, conn_id);
    if (!u)
        return;
    grp_leave(s, u);
    if ((uint32_t)(u->due - u->last) == s->max_span)
        recompute_max_span(s);
    cq_free(u);
}

int cq_sched_tick(cq_sched_t *s, uint64_t now_ms)
{
    return cq_sched_tick_max(s, now_ms, UINT32_MAX);
}

int cq_sched_tick_max(cq_sched_t *s, uint64_t now_ms, uint32_t max_subs)
{
    cq_assert(!s->busy);
    int64_t now = to_ms(now_ms);
    uint32_t nd = 0;
    int err = 0;
    s->busy = true;
    /* Every due group is taken first, as many as the budget may serve, so a group put back (a
     * member that failed) waits for the next tick like the rest of its retries. */
    uint32_t want = 0;
    while (s->ngrp && s->gheap[0]->due <= now && want < max_subs) {
        grp_t *g = s->gheap[0];
        gheap_remove(s, g);
        s->held[s->nheld++] = g;
        want += g->live;
    }
    for (uint32_t i = 0; i < s->nheld; i++) {
        int r = run_group(s, s->held[i], now, max_subs, &nd);
        if (r && !err)
            err = r;
    }
    s->nheld = 0;
    cache_clear(s);
    drop_safe(s);
    s->busy = false;
    return err;
}

void cq_sched_set_quantum(cq_sched_t *s, uint32_t quantum_ms)
{
    s->quantum = quantum_ms;
}

void cq_sched_set_coarsen(cq_sched_t *s, cq_coarsen_t *co)
{
    s->co = co;
}

void cq_sched_resync(cq_sched_t *s, uint32_t conn_id)
{
    cq_assert(!s->busy);
    sub_t *u = cq_map_get(&s->by_conn, conn_id);
    if (u)
        u->had_first = false;
}

uint64_t cq_sched_next_due(const cq_sched_t *s)
{
    if (!s->ngrp)
        return UINT64_MAX;
    int64_t d = s->gheap[0]->due;
    return d < 0 ? 0 : (uint64_t)d;
}

uint32_t cq_sched_buffered(const cq_sched_t *s)
{
    return s->count;
}

uint32_t cq_sched_count(const cq_sched_t *s)
{
    return cq_map_count(&s->by_conn);
}

uint32_t cq_sched_buf_max(const cq_sched_t *s)
{
    return s->max;
}

int cq_sched_info(const cq_sched_t *s, uint32_t conn_id, cq_sched_info_t *ret_info)
{
    const sub_t *u = cq_map_get(&s->by_conn, conn_id);
    if (!u)
        return CQ_ENOCONN;
    int64_t d = due_of(u);
    *ret_info = (cq_sched_info_t){
        .interval_ms = u->interval,
        .delay_ms = u->delay,
        .skip_self = u->skip_self,
        .skip_first = u->skip_first,
        .had_first = u->had_first,
        .masks_id = u->masks,
        .last_ms = u->last,
        .due_ms = d < 0 ? 0 : (uint64_t)d,
    };
    return 0;
}
