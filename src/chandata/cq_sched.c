/* cq_sched.c - per-channel fan-out scheduler; the contract is in cq_sched.h. */
#include "cq_sched.h"

#include <errno.h>
#include <string.h>

#include "cq_alloc.h"
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

typedef struct sub {
    uint32_t conn;
    uint32_t interval;
    uint32_t masks;
    uint32_t hidx; /* position in the heap */
    int32_t delay;
    bool skip_self, skip_first, had_first, align;
    int64_t last;     /* start of the next window */
    uint64_t floor;   /* entries with seq < floor are already in a full state it received */
    uint64_t own_seq; /* 1 + seq of its newest own update, 0 = none */
    uint64_t order;   /* subscription order, heap tie-break */
} sub_t;

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
    /* subscribers: by conn id, and a min-heap on due time */
    cq_map_t by_conn;
    sub_t **heap, **due;
    uint32_t nheap, hcap, max_interval;
    uint64_t order_next;
    /* encode-once cache of the current tick */
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
    return u->last + (int64_t)u->interval;
}

/* The grid point of interval iv at or before t (t may be negative). */
static int64_t align_down(int64_t t, uint32_t iv)
{
    int64_t m = t % (int64_t)iv;
    return t - (m < 0 ? m + (int64_t)iv : m);
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

/* ---- heap of subscribers, keyed by (due time, subscription order) ---- */

static bool before(const sub_t *a, const sub_t *b)
{
    int64_t da = due_of(a), db = due_of(b);
    return da < db || (da == db && a->order < b->order);
}

static void heap_set(cq_sched_t *s, uint32_t i, sub_t *u)
{
    s->heap[i] = u;
    u->hidx = i;
}

static void sift_up(cq_sched_t *s, uint32_t i)
{
    sub_t *u = s->heap[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!before(u, s->heap[p]))
            break;
        heap_set(s, i, s->heap[p]);
        i = p;
    }
    heap_set(s, i, u);
}

static void sift_down(cq_sched_t *s, uint32_t i)
{
    sub_t *u = s->heap[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= s->nheap)
            break;
        if (c + 1 < s->nheap && before(s->heap[c + 1], s->heap[c]))
            c++;
        if (!before(s->heap[c], u))
            break;
        heap_set(s, i, s->heap[c]);
        i = c;
    }
    heap_set(s, i, u);
}

/* Capacity is reserved by cq_sched_sub(), so pushing never fails. */
static void heap_push(cq_sched_t *s, sub_t *u)
{
    heap_set(s, s->nheap++, u);
    sift_up(s, u->hidx);
}

static sub_t *heap_remove(cq_sched_t *s, uint32_t i)
{
    sub_t *u = s->heap[i];
    sub_t *tail = s->heap[--s->nheap];
    if (tail != u) {
        heap_set(s, i, tail);
        sift_up(s, i);
        sift_down(s, tail->hidx);
    }
    return u;
}

static int heap_reserve(cq_sched_t *s, uint32_t n)
{
    if (n <= s->hcap)
        return 0;
    uint32_t cap = s->hcap ? s->hcap * 2 : 8;
    sub_t **h = cq_realloc(s->heap, cap * sizeof(*h));
    if (!h)
        return -ENOMEM;
    s->heap = h;
    sub_t **d = cq_realloc(s->due, cap * sizeof(*d));
    if (!d)
        return -ENOMEM;
    s->due = d;
    s->hcap = cap;
    return 0;
}

static void recompute_max_interval(cq_sched_t *s)
{
    s->max_interval = 0;
    for (uint32_t i = 0; i < s->nheap; i++)
        s->max_interval = CQ_MAX(s->max_interval, s->heap[i]->interval);
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

/* Drops the entries no subscriber can need: arrival < min due - max interval <= every window
 * start. With no subscriber at all, everything goes. */
static void drop_safe(cq_sched_t *s)
{
    if (!s->count)
        return;
    if (!s->nheap) {
        drop_front(s, s->count);
        return;
    }
    int64_t bound = due_of(s->heap[0]) - (int64_t)s->max_interval;
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
    for (uint32_t i = 0; i < s->nheap; i++) {
        const sub_t *u = s->heap[i];
        if (!u->had_first)
            continue;
        uint32_t st = start_of(s, u);
        if (st < s->count)
            BIT_SET(bnd, st);
        min = CQ_MIN(min, st);
    }
    return min;
}

/* Last resort: every pair is separated. Folds the two oldest entries; whoever had received the
 * first but not the second gets the full state at its next due time instead. */
static int fold_oldest(cq_sched_t *s)
{
    for (uint32_t i = 0; i < s->nheap; i++) {
        sub_t *u = s->heap[i];
        if (u->had_first && start_of(s, u) == 1)
            u->had_first = false;
    }
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

/* Sets *ret (borrowed from the cache until the end of the tick) to the output for the key: a
 * window [lo, hi) of the buffer, or the full state. Computes the unfiltered bytes and the
 * filtered copy at most once per tick. Returns 0 or -ENOMEM. */
static int get_output(cq_sched_t *s, slot_t key, uint32_t lo, uint32_t hi, cq_buf_t **ret)
{
    slot_t *sl = cache_find(s, key.kind, key.lo, key.hi, key.excl, key.masks);
    if (sl) {
        *ret = sl->b;
        return 0;
    }
    if (cache_reserve(s, 2))
        return -ENOMEM;
    slot_t rkey = key;
    rkey.masks = 0;
    sl = cache_find(s, rkey.kind, rkey.lo, rkey.hi, rkey.excl, 0);
    cq_buf_t *raw = sl ? sl->b : NULL;
    if (!raw) {
        raw = key.kind == K_FULL ? s->ops->full_state(s->ud) : build_window(s, lo, hi, key.excl);
        if (!raw)
            return -ENOMEM;
        cache_put(s, rkey, raw);
    }
    if (!key.masks || !s->ops->filter) {
        *ret = raw;
        return 0;
    }
    cq_buf_t *f = s->ops->filter(s->ud, key.masks, raw);
    if (!f)
        return -ENOMEM;
    cache_put(s, key, f);
    *ret = f;
    return 0;
}

static int send_full(cq_sched_t *s, sub_t *u)
{
    slot_t key = {.kind = K_FULL, .masks = u->masks};
    cq_buf_t *out;
    int r = get_output(s, key, 0, 0, &out);
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
    int r = get_output(s, key, lo, hi, &out);
    if (r)
        return r;
    s->ops->emit(s->ud, u->conn, out);
    return 0;
}

/* Handles the window [last, last + interval) of a subscriber that had its first fan-out. An
 * empty window moves last straight to the window holding the next buffered entry (or the last
 * closed one), so a long gap costs O(1). */
static int run_window(cq_sched_t *s, sub_t *u, int64_t now)
{
    int64_t next = due_of(u);
    uint32_t lo = start_of(s, u);
    uint32_t hi = lb_time(s, lo, next);
    if (lo == hi) {
        int64_t target = hi < s->count ? at(s, hi)->at : now;
        u->last += (target - u->last) / u->interval * u->interval;
        return 0;
    }
    int r = send_window(s, u, lo, hi);
    if (!r)
        u->last = next;
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
                u->last = u->align ? align_down(now, u->interval) : now;
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
    for (uint32_t i = 0; i < s->nheap; i++)
        cq_free(s->heap[i]);
    cache_clear(s);
    cq_map_done(&s->by_conn);
    cq_free(s->ring);
    cq_free(s->parts);
    cq_free(s->heap);
    cq_free(s->due);
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
    if (!s->nheap) {
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
    u->last = a;
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
    if (heap_reserve(s, s->nheap + 1))
        return -ENOMEM;
    sub_t *u = cq_calloc(1, sizeof(*u));
    if (!u)
        return -ENOMEM;
    if (cq_map_put(&s->by_conn, conn_id, u)) {
        cq_free(u);
        return -ENOMEM;
    }
    u->conn = conn_id;
    u->interval = s->tick;
    u->skip_self = true;
    apply_opts(s, u, o);
    u->last = now + u->delay;
    if (u->align)
        u->last = align_down(u->last, u->interval);
    u->had_first = u->skip_first;
    /* A window never reaches back before the subscription unless the delay does: an update
     * buffered in the same ms just before it (arrival == now == last) is not the
     * subscriber's, e.g. it is already in the snapshot a handover sent with skip_first. */
    if (u->delay >= 0)
        u->floor = s->seq_next;
    u->own_seq = find_own(s, conn_id);
    u->order = s->order_next++;
    heap_push(s, u);
    s->max_interval = CQ_MAX(s->max_interval, u->interval);
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
    if (u->interval != iv)
        realign(s, u);
    sift_up(s, u->hidx);
    sift_down(s, u->hidx);
    recompute_max_interval(s);
    return 0;
}

void cq_sched_unsub(cq_sched_t *s, uint32_t conn_id)
{
    cq_assert(!s->busy);
    sub_t *u = cq_map_del(&s->by_conn, conn_id);
    if (!u)
        return;
    heap_remove(s, u->hidx);
    if (u->interval == s->max_interval)
        recompute_max_interval(s);
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
    while (s->nheap && due_of(s->heap[0]) <= now && nd < max_subs)
        s->due[nd++] = heap_remove(s, 0);
    for (uint32_t i = 0; i < nd; i++) {
        int r = run_sub(s, s->due[i], now);
        if (r && !err)
            err = r;
        heap_push(s, s->due[i]);
    }
    cache_clear(s);
    drop_safe(s);
    s->busy = false;
    return err;
}

uint64_t cq_sched_next_due(const cq_sched_t *s)
{
    if (!s->nheap)
        return UINT64_MAX;
    int64_t d = due_of(s->heap[0]);
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
