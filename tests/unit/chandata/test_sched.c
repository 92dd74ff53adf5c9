/* Unit tests of the channel-data fan-out scheduler (cq_sched) on a manual clock.
 *
 * Updates are opaque bytes merged by concatenation (protobuf's own merge of serialized
 * messages), so every emitted message can be compared as an exact byte string. Times in the
 * tests are relative to T0 so that subscriptions may start before "0" as in the design note.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cq_err.h"
#include "cq_sched.h"
#include "test_alloc.h"
#include "test_buf.h"

#define T0   1000
#define MAXC 64

typedef struct rec {
    uint32_t conn;
    int64_t t;
    cq_buf_t *b; /* one reference held by the fixture */
} rec_t;

typedef struct fx {
    cq_sched_t *s;
    int64_t now; /* relative to T0 */
    char *state; /* "S" followed by every update, for the full state */
    size_t slen, scap;
    rec_t *recs;
    size_t nrec, rcap;
    bool keep;  /* record every emission */
    bool check; /* token mode: verify each connection's stream (see check_msg) */
    size_t ntok;
    size_t pos[MAXC]; /* next token each connection expects */
    uint64_t received[MAXC];
    int n_merge, n_full, n_filter, fail_merge;
} fx_t;

/* ---- fixture callbacks ---- */

static cq_buf_t *cb_merge(void *ud, cq_buf_t *const *parts, size_t n)
{
    fx_t *f = ud;
    f->n_merge++;
    if (f->fail_merge) {
        f->fail_merge--;
        return NULL;
    }
    return test_buf_concat(parts, n);
}

static cq_buf_t *cb_full(void *ud)
{
    fx_t *f = ud;
    f->n_full++;
    return cq_buf_from(f->state, f->slen);
}

static cq_buf_t *cb_filter(void *ud, uint32_t masks_id, cq_buf_t *bytes)
{
    fx_t *f = ud;
    f->n_filter++;
    char pre[16];
    int n = snprintf(pre, sizeof(pre), "m%u:", masks_id);
    cq_buf_t *b = cq_buf_new((size_t)n + bytes->len);
    if (!b)
        return NULL;
    memcpy(b->data, pre, (size_t)n);
    memcpy(b->data + n, bytes->data, bytes->len);
    b->len = (uint32_t)n + bytes->len;
    return b;
}

/* Token mode: updates are "u%07zu"; a full state is "S" + all tokens so far. Each connection
 * must see every token exactly once and in order after the point its stream starts. */
static void check_msg(fx_t *f, uint32_t conn, const cq_buf_t *m)
{
    assert_true(conn < MAXC);
    size_t off = 0, p = f->pos[conn];
    if (m->len && m->data[0] == 'S') {
        off = 1;
        p = 0;
    }
    assert_int_equal((m->len - off) % 8, 0);
    for (; off < m->len; off += 8, p++) {
        char tok[9];
        snprintf(tok, sizeof(tok), "u%07zu", p);
        assert_memory_equal(m->data + off, tok, 8);
    }
    f->pos[conn] = p;
    f->received[conn]++;
}

static void cb_emit(void *ud, uint32_t conn, cq_buf_t *msg)
{
    fx_t *f = ud;
    if (f->check)
        check_msg(f, conn, msg);
    if (!f->keep)
        return;
    if (f->nrec == f->rcap) {
        f->rcap = f->rcap ? f->rcap * 2 : 64;
        f->recs = realloc(f->recs, f->rcap * sizeof(*f->recs));
        assert_non_null(f->recs);
    }
    f->recs[f->nrec++] = (rec_t){conn, f->now, cq_buf_ref(msg)};
}

static const cq_sched_ops_t ops = {cb_merge, cb_full, cb_filter, cb_emit};

/* ---- fixture helpers ---- */

static fx_t *fx_new(uint32_t tick_ms)
{
    fx_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->keep = true;
    f->scap = 64;
    f->state = malloc(f->scap);
    assert_non_null(f->state);
    f->state[0] = 'S';
    f->slen = 1;
    f->s = cq_sched_new(&ops, f, tick_ms);
    assert_non_null(f->s);
    return f;
}

static void fx_free(fx_t *f)
{
    cq_sched_free(f->s);
    for (size_t i = 0; i < f->nrec; i++)
        cq_buf_unref(f->recs[i].b);
    free(f->recs);
    free(f->state);
    free(f);
    assert_int_equal(cq_buf_live(), 0);
}

static uint64_t abs_ms(int64_t rel)
{
    return (uint64_t)(T0 + rel);
}

/* Sends update `bytes` from `sender` at relative time t (also merged into the state). */
static int upd_n(fx_t *f, const char *bytes, size_t n, uint32_t sender, int64_t t)
{
    f->now = t;
    while (f->slen + n > f->scap) {
        f->scap *= 2;
        f->state = realloc(f->state, f->scap);
        assert_non_null(f->state);
    }
    memcpy(f->state + f->slen, bytes, n);
    f->slen += n;
    cq_buf_t *b = cq_buf_from(bytes, n);
    if (!b)
        return -ENOMEM;
    int r = cq_sched_update(f->s, b, sender, abs_ms(t));
    cq_buf_unref(b);
    return r;
}

static void upd(fx_t *f, const char *bytes, uint32_t sender, int64_t t)
{
    assert_int_equal(upd_n(f, bytes, strlen(bytes), sender, t), 0);
}

/* Token mode update: the next token. */
static void upd_tok(fx_t *f, uint32_t sender, int64_t t)
{
    char tok[9];
    snprintf(tok, sizeof(tok), "u%07zu", f->ntok++);
    assert_int_equal(upd_n(f, tok, 8, sender, t), 0);
}

static int tick(fx_t *f, int64_t t)
{
    f->now = t;
    int r = cq_sched_tick(f->s, abs_ms(t));
    assert_true(cq_sched_next_due(f->s) > abs_ms(t) || r < 0);
    return r;
}

static void sub(fx_t *f, uint32_t conn, const cq_sched_subopts_t *o, int64_t t)
{
    assert_int_equal(cq_sched_sub(f->s, conn, o, abs_ms(t)), 0);
}

static cq_sched_subopts_t opts(uint32_t interval, int32_t delay, bool skip_first)
{
    return (cq_sched_subopts_t){
        .set = CQ_SCHED_SET_INTERVAL | CQ_SCHED_SET_DELAY | CQ_SCHED_SET_SKIP_FIRST,
        .interval_ms = interval,
        .delay_ms = delay,
        .skip_first = skip_first,
    };
}

static void expect(const fx_t *f, size_t i, uint32_t conn, int64_t t, const char *bytes)
{
    assert_true(i < f->nrec);
    const rec_t *r = &f->recs[i];
    assert_int_equal(r->conn, conn);
    assert_int_equal(r->t, t);
    assert_int_equal(r->b->len, strlen(bytes));
    assert_memory_equal(r->b->data, bytes, r->b->len);
}

/* ---- the design note's timeline ---- */

enum { C0 = 10, C1 = 11, C2 = 12 };

static void run_timeline(fx_t *f, int64_t from)
{
    for (int64_t t = from; t <= 300; t += 10) {
        if (t == 60)
            upd(f, "U1", C0, t);
        if (t == 120)
            upd(f, "U2", C0, t);
        if (t == 240)
            upd(f, "U3", C0, t);
        assert_int_equal(tick(f, t), 0);
    }
}

/* Both subscribe at 0: C1 with skip_first, C2 with delay -50. Exactly F1..F9, nothing else. */
static void test_timeline_exact(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_subopts_t o1 = opts(50, 0, true), o2 = opts(100, -50, false);
    sub(f, C1, &o1, 0);
    sub(f, C2, &o2, 0);
    run_timeline(f, 0);
    assert_int_equal(f->nrec, 6);
    expect(f, 0, C2, 50, "S");     /* F7 = full state; F1 (C1 at 50) = nothing */
    expect(f, 1, C1, 100, "U1");   /* F2 */
    expect(f, 2, C1, 150, "U2");   /* F3 */
    expect(f, 3, C2, 150, "U1U2"); /* F8; F4 (C1 at 200) = nothing */
    expect(f, 4, C1, 250, "U3");   /* F5 */
    expect(f, 5, C2, 250, "U3");   /* F9; F6 (C1 at 300) = nothing */
    /* F5 and F9 select the same run of the buffer: encoded once. */
    assert_ptr_equal(f->recs[4].b, f->recs[5].b);
    assert_int_equal(f->n_full, 1);
    assert_int_equal(f->n_merge, 1);
    fx_free(f);
}

/* Both subscribe at -50 with default options: C1's own first full state (F0) falls at 0, just
 * before the diagram; F1..F9 follow unchanged. */
static void test_timeline_defaults(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_subopts_t o1 = {.set = CQ_SCHED_SET_INTERVAL, .interval_ms = 50};
    cq_sched_subopts_t o2 = {.set = CQ_SCHED_SET_INTERVAL, .interval_ms = 100};
    sub(f, C1, &o1, -50);
    sub(f, C2, &o2, -50);
    run_timeline(f, -50);
    assert_int_equal(f->nrec, 7);
    expect(f, 0, C1, 0, "S");
    expect(f, 1, C2, 50, "S");
    expect(f, 2, C1, 100, "U1");
    expect(f, 3, C1, 150, "U2");
    expect(f, 4, C2, 150, "U1U2");
    expect(f, 5, C1, 250, "U3");
    expect(f, 6, C2, 250, "U3");
    fx_free(f);
}

/* ---- subscription options ---- */

static void test_skip_first(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_subopts_t keep = opts(1000, 0, true), o = opts(50, 0, true);
    sub(f, 1, &keep, 0); /* holds the buffer */
    upd(f, "early", C0, 5);
    sub(f, 2, &o, 10);
    upd(f, "a", C0, 20);
    for (int64_t t = 10; t <= 100; t += 10)
        assert_int_equal(tick(f, t), 0);
    assert_int_equal(f->nrec, 1);
    expect(f, 0, 2, 60, "a"); /* never the full state, nothing from before sub + delay */
    assert_int_equal(f->n_full, 0);
    fx_free(f);
}

/* An update in the same ms just before a skip_first subscription (the snapshot a handover
 * sends) is not repeated in its first window; one just after it is sent. */
static void test_skip_first_same_ms(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_subopts_t keep = opts(1000, 0, true), o = opts(50, 0, true);
    sub(f, 1, &keep, 0);
    upd(f, "snap", C0, 10);
    sub(f, 2, &o, 10);
    upd(f, "b", C0, 10);
    for (int64_t t = 10; t <= 100; t += 10)
        assert_int_equal(tick(f, t), 0);
    assert_int_equal(f->nrec, 1);
    expect(f, 0, 2, 60, "b");
    fx_free(f);
}

/* ---- windows on the interval grid (align, spatial cells and entities) ---- */

static cq_sched_subopts_t aligned(uint32_t interval, bool skip_first)
{
    cq_sched_subopts_t o = opts(interval, 0, skip_first);
    o.set |= CQ_SCHED_SET_ALIGN;
    o.align = true;
    return o;
}

/* Subscribed at 7 with interval 10: the first window closes on the grid at 10 (channeld's rule
 * would say 17) and holds what came after the subscription only; then every 10 ms on the grid. */
static void test_align_first_window(void **state)
{
    (void)state;
    fx_t *f = fx_new(1);
    cq_sched_subopts_t keep = opts(1000, 0, true), o = aligned(10, true);
    sub(f, 1, &keep, 0); /* holds the buffer */
    upd(f, "early", C0, 5);
    sub(f, 2, &o, 7);
    upd(f, "a", C0, 8);
    for (int64_t t = 7; t <= 30; t++) {
        if (t == 23)
            upd(f, "b", C0, t);
        assert_int_equal(tick(f, t), 0);
    }
    assert_int_equal(f->nrec, 2);
    expect(f, 0, 2, 10, "a");
    expect(f, 1, 2, 30, "b");
    fx_free(f);
}

/* Without skip_first the full state comes at the first grid point, and the next window starts
 * on the grid even when the tick that sent it was late. */
static void test_align_full_state(void **state)
{
    (void)state;
    fx_t *f = fx_new(1);
    cq_sched_subopts_t o = aligned(10, false);
    sub(f, 2, &o, 7);
    upd(f, "a", C0, 8);
    assert_int_equal(tick(f, 13), 0); /* late: due at 10 */
    upd(f, "b", C0, 14);
    for (int64_t t = 14; t <= 20; t++)
        assert_int_equal(tick(f, t), 0);
    assert_int_equal(f->nrec, 2);
    expect(f, 0, 2, 13, "Sa");
    expect(f, 1, 2, 20, "b");
    fx_free(f);
}

/* An interval change re-aligns the next window on the new grid, sending nothing twice and
 * skipping nothing: interval 50 -> 20 at 55 moves the window [50, 100) to [40, 60). */
static void test_align_new_interval(void **state)
{
    (void)state;
    fx_t *f = fx_new(1);
    cq_sched_subopts_t o = aligned(50, true), o20 = aligned(20, true);
    sub(f, 2, &o, 0);
    upd(f, "u10", C0, 10);
    assert_int_equal(tick(f, 50), 0);
    upd(f, "u52", C0, 52);
    sub(f, 2, &o20, 55);
    for (int64_t t = 55; t <= 80; t++) {
        if (t == 61)
            upd(f, "u61", C0, t);
        assert_int_equal(tick(f, t), 0);
    }
    assert_int_equal(f->nrec, 3);
    expect(f, 0, 2, 50, "u10");
    expect(f, 1, 2, 60, "u52");
    expect(f, 2, 2, 80, "u61");
    fx_free(f);
}

static void test_negative_delay(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_subopts_t keep = opts(1000, 0, true);
    sub(f, 1, &keep, 0);
    upd(f, "x", C0, 80);
    cq_sched_subopts_t full = opts(50, -30, false), skip = opts(50, -30, true);
    sub(f, 2, &full, 100); /* last = 70: full state at 120 instead of 150 */
    sub(f, 3, &skip, 100); /* window [70, 120) holds x, which arrived before the subscription */
    cq_sched_info_t in;
    assert_int_equal(cq_sched_info(f->s, 2, &in), 0);
    assert_int_equal(in.last_ms, T0 + 70);
    assert_int_equal(in.due_ms, T0 + 120);
    assert_int_equal(cq_sched_next_due(f->s), T0 + 120);
    for (int64_t t = 100; t <= 120; t += 10)
        assert_int_equal(tick(f, t), 0);
    assert_int_equal(f->nrec, 2);
    expect(f, 0, 2, 120, "Sx");
    expect(f, 1, 3, 120, "x");
    fx_free(f);
}

/* A, B, D skip their own updates; C does not. B and C are in the same situation (their window
 * holds none of their own updates) and share one buffer with each other only. */
static void test_skip_self(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    enum { A = 1, B = 2, C = 3, D = 4 };
    cq_sched_subopts_t o = opts(50, 0, true);
    sub(f, A, &o, 0);
    sub(f, B, &o, 0);
    cq_sched_subopts_t oc = o;
    oc.set |= CQ_SCHED_SET_SKIP_SELF;
    oc.skip_self = false;
    sub(f, C, &oc, 0);
    sub(f, D, &o, 0);
    upd(f, "a1", A, 10);
    upd(f, "o1", C0, 20);
    upd(f, "d1", D, 30);
    assert_int_equal(tick(f, 50), 0);
    assert_int_equal(f->nrec, 4);
    expect(f, 0, A, 50, "o1d1");
    expect(f, 1, B, 50, "a1o1d1");
    expect(f, 2, C, 50, "a1o1d1");
    expect(f, 3, D, 50, "a1o1");
    assert_ptr_equal(f->recs[1].b, f->recs[2].b);
    assert_ptr_not_equal(f->recs[0].b, f->recs[1].b);
    assert_ptr_not_equal(f->recs[3].b, f->recs[1].b);
    /* A window holding only A's own update sends A nothing; C (skip_self off) gets it back. */
    upd(f, "a2", A, 60);
    assert_int_equal(tick(f, 100), 0);
    assert_int_equal(f->nrec, 7);
    expect(f, 4, B, 100, "a2");
    expect(f, 5, C, 100, "a2");
    expect(f, 6, D, 100, "a2");
    fx_free(f);
}

/* An update sent before subscribing is still recognised as the subscriber's own. */
static void test_skip_self_before_sub(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_subopts_t keep = opts(1000, 0, true), o = opts(50, -20, true);
    sub(f, 1, &keep, 0);
    upd(f, "e0", 5, 35);
    upd(f, "o0", C0, 38);
    sub(f, 5, &o, 40); /* window [20, 70) */
    assert_int_equal(tick(f, 70), 0);
    assert_int_equal(f->nrec, 1);
    expect(f, 0, 5, 70, "o0");
    fx_free(f);
}

/* ---- windows ---- */

/* Interval 10 from 0, updates at 5, 15, 35 ([20, 30) stays empty) and 40 (in the open window
 * [40, 50)), the first tick at 40. */
static void fall_behind(fx_t *f)
{
    cq_sched_subopts_t o = opts(10, 0, true);
    sub(f, 1, &o, 0);
    upd(f, "u5", C0, 5);
    upd(f, "u15", C0, 15);
    upd(f, "u35", C0, 35);
    upd(f, "u40", C0, 40);
    assert_int_equal(tick(f, 40), 0);
}

/* Fell behind: interval 10, no tick for 40 ms: one message per closed non-empty window. */
static void test_missed_windows(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    fall_behind(f);
    assert_int_equal(f->nrec, 3);
    expect(f, 0, 1, 40, "u5");
    expect(f, 1, 1, 40, "u15");
    expect(f, 2, 1, 40, "u35");
    cq_sched_info_t in;
    assert_int_equal(cq_sched_info(f->s, 1, &in), 0);
    assert_int_equal(in.last_ms, T0 + 40);
    assert_int_equal(tick(f, 50), 0);
    assert_int_equal(f->nrec, 4);
    expect(f, 3, 1, 50, "u40");
    fx_free(f);
}

/* A clock jump of ~11 days at a 10 ms interval costs O(1) per non-empty window. */
static void test_clock_jump(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_subopts_t o = opts(10, 0, true);
    sub(f, 1, &o, 0);
    upd(f, "a", C0, 3);
    int64_t far = 1000000003;
    upd(f, "b", C0, far - 2);
    assert_int_equal(tick(f, far), 0);
    assert_int_equal(f->nrec, 1);
    expect(f, 0, 1, far, "a");
    assert_int_equal(cq_sched_next_due(f->s), T0 + 1000000000 + 10);
    assert_int_equal(tick(f, far + 7), 0);
    assert_int_equal(f->nrec, 2);
    expect(f, 1, 1, far + 7, "b");
    fx_free(f);
}

/* Half-open windows: an update on a boundary is sent once, whichever side of the tick it is. */
static void test_boundary_once(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_subopts_t o = opts(50, 0, true);
    sub(f, 1, &o, 0);
    upd(f, "b50", C0, 50); /* before the tick at 50 */
    assert_int_equal(tick(f, 50), 0);
    assert_int_equal(f->nrec, 0);
    assert_int_equal(tick(f, 100), 0);
    upd(f, "b100", C0, 100); /* after the tick at 100 */
    for (int64_t t = 110; t <= 300; t += 10)
        assert_int_equal(tick(f, t), 0);
    assert_int_equal(f->nrec, 2);
    expect(f, 0, 1, 100, "b50");
    expect(f, 1, 1, 150, "b100");
    fx_free(f);
}

/* The full state covers updates that arrived in the same ms before it; they are not re-sent. */
static void test_full_state_floor(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_subopts_t o = opts(50, 0, false);
    sub(f, 1, &o, 0);
    upd(f, "p", C0, 50);
    assert_int_equal(tick(f, 50), 0);
    upd(f, "q", C0, 50);
    assert_int_equal(tick(f, 100), 0);
    assert_int_equal(f->nrec, 2);
    expect(f, 0, 1, 50, "Sp");
    expect(f, 1, 1, 100, "q");
    fx_free(f);
}

static void test_interval_zero(void **state)
{
    (void)state;
    fx_t *f = fx_new(0); /* tick 0 is treated as 1 */
    cq_sched_subopts_t o = opts(0, 0, true);
    sub(f, 1, &o, 0);
    cq_sched_info_t in;
    assert_int_equal(cq_sched_info(f->s, 1, &in), 0);
    assert_int_equal(in.interval_ms, 1);
    upd(f, "z", C0, 0);
    assert_int_equal(tick(f, 100000), 0); /* returns */
    assert_int_equal(f->nrec, 1);
    assert_int_equal(cq_sched_next_due(f->s), T0 + 100001);
    fx_free(f);

    f = fx_new(20); /* clamped to the channel tick */
    sub(f, 1, &o, 0);
    assert_int_equal(cq_sched_info(f->s, 1, &in), 0);
    assert_int_equal(in.interval_ms, 20);
    assert_int_equal(tick(f, 5000), 0);
    fx_free(f);
}

/* ---- encode once ---- */

static void test_encode_once(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    const uint32_t masks[5] = {0, 0, 7, 7, 9};
    for (uint32_t i = 0; i < 5; i++) {
        cq_sched_subopts_t o = opts(50, 0, false);
        o.set |= CQ_SCHED_SET_MASKS;
        o.masks_id = masks[i];
        sub(f, i + 1, &o, 0);
    }
    assert_int_equal(tick(f, 50), 0);
    assert_int_equal(f->nrec, 5);
    assert_int_equal(f->n_full, 1);
    assert_int_equal(f->n_filter, 2);
    expect(f, 0, 1, 50, "S");
    expect(f, 2, 3, 50, "m7:S");
    expect(f, 4, 5, 50, "m9:S");
    assert_ptr_equal(f->recs[0].b, f->recs[1].b);
    assert_ptr_equal(f->recs[2].b, f->recs[3].b);
    assert_ptr_not_equal(f->recs[0].b, f->recs[2].b);
    assert_ptr_not_equal(f->recs[2].b, f->recs[4].b);
    /* each emission was one reference: the fixture holds it, the cache dropped its own */
    assert_int_equal(cq_buf_refs(f->recs[0].b), 2);

    upd(f, "x", C0, 60);
    upd(f, "y", C0, 70);
    assert_int_equal(tick(f, 100), 0);
    assert_int_equal(f->nrec, 10);
    assert_int_equal(f->n_merge, 1);
    assert_int_equal(f->n_filter, 4);
    expect(f, 5, 1, 100, "xy");
    expect(f, 7, 3, 100, "m7:xy");
    expect(f, 9, 5, 100, "m9:xy");
    assert_ptr_equal(f->recs[5].b, f->recs[6].b);
    assert_ptr_equal(f->recs[7].b, f->recs[8].b);
    assert_ptr_not_equal(f->recs[5].b, f->recs[7].b);
    fx_free(f);
}

/* ---- option updates and unsubscribe ---- */

static void test_option_update(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_subopts_t o = opts(50, 0, true);
    sub(f, 1, &o, 0);
    assert_int_equal(tick(f, 50), 0);
    cq_sched_subopts_t up = {.set = CQ_SCHED_SET_INTERVAL | CQ_SCHED_SET_SKIP_FIRST,
                             .interval_ms = 100,
                             .skip_first = false};
    sub(f, 1, &up, 60); /* timing state kept: last 50, now due at 150; no full state */
    assert_int_equal(cq_sched_count(f->s), 1);
    cq_sched_info_t in;
    assert_int_equal(cq_sched_info(f->s, 1, &in), 0);
    assert_int_equal(in.last_ms, T0 + 50);
    assert_int_equal(in.interval_ms, 100);
    assert_true(in.had_first);
    assert_int_equal(cq_sched_next_due(f->s), T0 + 150);
    upd(f, "a", C0, 70);
    assert_int_equal(tick(f, 100), 0);
    assert_int_equal(f->nrec, 0);
    cq_sched_subopts_t m = {.set = CQ_SCHED_SET_MASKS, .masks_id = 5};
    sub(f, 1, &m, 120);
    assert_int_equal(tick(f, 150), 0);
    assert_int_equal(f->nrec, 1);
    expect(f, 0, 1, 150, "m5:a");
    assert_int_equal(cq_sched_info(f->s, 1, &in), 0);
    assert_int_equal(in.interval_ms, 100); /* unset fields kept */
    fx_free(f);
}

static void test_unsub(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_subopts_t o = opts(50, 0, true);
    sub(f, 1, &o, 0);
    sub(f, 2, &o, 0);
    upd(f, "a", C0, 10);
    cq_sched_unsub(f->s, 1);
    cq_sched_unsub(f->s, 77); /* unknown: ignored */
    assert_int_equal(cq_sched_count(f->s), 1);
    cq_sched_info_t in;
    assert_int_equal(cq_sched_info(f->s, 1, &in), CQ_ENOCONN);
    assert_int_equal(tick(f, 50), 0);
    assert_int_equal(f->nrec, 1);
    expect(f, 0, 2, 50, "a");
    cq_sched_unsub(f->s, 2);
    assert_int_equal(cq_sched_next_due(f->s), UINT64_MAX);
    upd(f, "b", C0, 60);
    assert_int_equal(cq_sched_buffered(f->s), 0); /* nobody to keep it for */
    assert_int_equal(tick(f, 100), 0);
    assert_int_equal(f->nrec, 1);
    assert_int_equal(cq_sched_sub(f->s, 0, &o, abs_ms(100)), -EINVAL);
    assert_int_equal(cq_sched_update(f->s, NULL, 0, abs_ms(100)), -EINVAL);
    fx_free(f);
}

/* A tick bounded to k subscribers serves the k earliest due; the rest stay due and are served
 * by the next call with the same window contents. */
static void test_tick_max(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_subopts_t o = opts(50, 0, true);
    for (uint32_t c = 1; c <= 10; c++)
        sub(f, c, &o, 0);
    upd(f, "a", 99, 10);
    f->now = 50;
    assert_int_equal(cq_sched_tick_max(f->s, abs_ms(50), 3), 0);
    assert_int_equal(f->nrec, 3);
    assert_true(cq_sched_next_due(f->s) <= abs_ms(50)); /* still due */
    assert_int_equal(cq_sched_tick_max(f->s, abs_ms(50), 100), 0);
    assert_int_equal(f->nrec, 10);
    for (size_t i = 0; i < 10; i++)
        expect(f, i, (uint32_t)i + 1, 50, "a");
    assert_true(cq_sched_next_due(f->s) > abs_ms(50));
    fx_free(f);
}

/* ---- buffer bounds ---- */

/* 100k updates 1 ms apart, a 20 ms and a 1 s subscriber: the buffer stays within its limit and
 * both streams are exactly every update once, in order. */
static void test_bounded_100k(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    f->keep = false;
    f->check = true;
    cq_sched_subopts_t fast = opts(20, 0, true), slow = opts(1000, 0, true);
    sub(f, 1, &fast, 0);
    sub(f, 2, &slow, 0);
    uint32_t peak = 0;
    for (int64_t t = 0; t < 100000; t++) {
        upd_tok(f, C0, t);
        peak = cq_sched_buffered(f->s) > peak ? cq_sched_buffered(f->s) : peak;
        if (t % 10 == 0)
            assert_int_equal(tick(f, t), 0);
    }
    assert_int_equal(tick(f, 102000), 0);
    assert_true(peak <= CQ_SCHED_BUF_MAX);
    assert_int_equal(peak, CQ_SCHED_BUF_MAX); /* the slow window did need folding */
    assert_int_equal(f->pos[1], f->ntok);
    assert_int_equal(f->pos[2], f->ntok);
    assert_true(f->received[2] >= 50 && f->received[2] <= 102);
    fx_free(f);
}

/* Every adjacent pair separated by a window start: the two oldest are folded and the one
 * subscriber between them is resynchronised with the full state. */
static void test_fold_resync(void **state)
{
    (void)state;
    fx_t *f = fx_new(1);
    assert_int_equal(cq_sched_set_buf_max(f->s, 4), 0);
    cq_sched_subopts_t o = opts(1000, 0, true);
    sub(f, 9, &o, 0);
    upd(f, "e0", C0, 1);
    sub(f, 1, &o, 2);
    upd(f, "e1", C0, 3);
    sub(f, 2, &o, 4);
    upd(f, "e2", C0, 5);
    sub(f, 3, &o, 6);
    upd(f, "e3", C0, 7);
    upd(f, "e4", C0, 8);
    assert_int_equal(cq_sched_buffered(f->s), 4);
    assert_int_equal(cq_sched_set_buf_max(f->s, 8), -EBUSY);
    cq_sched_info_t in;
    assert_int_equal(cq_sched_info(f->s, 1, &in), 0);
    assert_false(in.had_first);
    for (int64_t t = 1000; t <= 1006; t += 2)
        assert_int_equal(tick(f, t), 0);
    assert_int_equal(f->nrec, 4);
    expect(f, 0, 9, 1000, "e0e1e2e3e4");
    expect(f, 1, 1, 1002, "Se0e1e2e3e4");
    expect(f, 2, 2, 1004, "e2e3e4");
    expect(f, 3, 3, 1006, "e3e4");
    fx_free(f);
}

/* ---- overload: stretched windows, merged catch-up, resync (cq_coarsen.h) ---- */

/* Emissions to conn, and the time of the last one. */
static size_t count_to(const fx_t *f, uint32_t conn, int64_t *ret_last)
{
    size_t n = 0;
    for (size_t i = 0; i < f->nrec; i++)
        if (f->recs[i].conn == conn) {
            n++;
            *ret_last = f->recs[i].t;
        }
    return n;
}

/* At level 2 a world's near (20 ms), mid (50) and far (100) windows are 20, 100 and 400 ms on
 * their grids; back at level 0 the next windows are the plain intervals again. The far one
 * carries every update of its 400 ms, merged once. */
static void test_coarsen_stretch(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_coarsen_t co;
    cq_coarsen_init(&co, NULL);
    co.level = 2;
    cq_sched_set_coarsen(f->s, &co);
    cq_sched_subopts_t near = aligned(20, true), mid = aligned(50, true), far = aligned(100, true);
    sub(f, 1, &near, 0);
    sub(f, 2, &mid, 0);
    sub(f, 3, &far, 0);
    assert_int_equal(co.st.stretched, 2); /* mid and far started stretched windows */
    char u[8];
    for (int64_t t = 0; t <= 600; t += 10) {
        snprintf(u, sizeof(u), "%03d", (int)(t / 10));
        if (t < 600)
            upd(f, u, C0, t);
        assert_int_equal(tick(f, t), 0);
    }
    int64_t last = -1;
    assert_int_equal(count_to(f, 1, &last), 30); /* 20, 40, ..., 600 */
    assert_int_equal(last, 600);
    assert_int_equal(count_to(f, 2, &last), 6); /* 100, 200, ..., 600 */
    assert_int_equal(last, 600);
    /* The grid is the clock's: T0 + 200 and T0 + 600 are multiples of 400. */
    assert_int_equal(count_to(f, 3, &last), 2);
    assert_int_equal(last, 600);
    expect(f, f->nrec - 1, 3, 600,
           "020021022023024025026027028029030031032033034035036037038039"
           "040041042043044045046047048049050051052053054055056057058059");
    cq_sched_info_t in;
    assert_int_equal(cq_sched_info(f->s, 3, &in), 0);
    assert_int_equal(in.due_ms, T0 + 1000);
    co.level = 0; /* windows that start from now on are plain */
    assert_int_equal(cq_sched_info(f->s, 2, &in), 0);
    assert_int_equal(in.due_ms, T0 + 700); /* started at 600, stretched: on the 100 ms grid */
    upd(f, "x", C0, 610);
    assert_int_equal(tick(f, 700), 0);
    assert_int_equal(cq_sched_info(f->s, 2, &in), 0);
    assert_int_equal(in.due_ms, T0 + 750); /* the next one is 50 ms again */
    assert_int_equal(co.st.merged, 0);
    fx_free(f);
}

/* Above level 0 a late tick sends one merged fan-out, not one per missed window; the windows
 * it folded are counted. At level 0 the same run gives one message per window
 * (test_missed_windows). */
static void test_coarsen_merge_missed(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_coarsen_t co;
    cq_coarsen_init(&co, NULL);
    cq_sched_set_coarsen(f->s, &co);
    co.level = 1; /* 10 ms is near interest: not stretched at level 1, but merged */
    fall_behind(f);
    assert_int_equal(f->nrec, 1);
    expect(f, 0, 1, 40, "u5u15u35");
    assert_int_equal(co.st.merged, 3);
    assert_int_equal(co.st.stretched, 0);
    assert_int_equal(tick(f, 50), 0);
    assert_int_equal(f->nrec, 2);
    expect(f, 1, 1, 50, "u40");
    fx_free(f);
}

/* A connection that could not take its fan-out is resynchronised: its next fan-out, at its
 * next due time, is the full state (even with skip_first), then windows go on from there with
 * nothing repeated; the other subscriber is untouched. */
static void test_resync(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_subopts_t o = opts(20, 0, true);
    sub(f, 1, &o, 0);
    sub(f, 2, &o, 0);
    upd(f, "a", C0, 5);
    assert_int_equal(tick(f, 20), 0);
    assert_int_equal(f->nrec, 2);
    cq_sched_resync(f->s, 1);
    cq_sched_resync(f->s, 99); /* unknown: ignored */
    upd(f, "b", C0, 25);
    assert_int_equal(tick(f, 30), 0);
    assert_int_equal(f->nrec, 2); /* not due before 40 */
    assert_int_equal(tick(f, 40), 0);
    assert_int_equal(f->nrec, 4);
    expect(f, 2, 1, 40, "Sab");
    expect(f, 3, 2, 40, "b");
    upd(f, "c", C0, 45);
    assert_int_equal(tick(f, 60), 0);
    assert_int_equal(f->nrec, 6);
    expect(f, 4, 1, 60, "c");
    expect(f, 5, 2, 60, "c");
    fx_free(f);
}

/* With a 20 ms quantum a 50 ms aligned window is sent at the next 20 ms point with the same
 * content: [0, 50) at 60, [50, 100) at 100, [100, 150) at 160; the 20 ms one is unchanged. */
static void test_quantum(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_set_quantum(f->s, 20);
    cq_sched_subopts_t near = aligned(20, true), mid = aligned(50, true);
    sub(f, 1, &near, 0);
    sub(f, 2, &mid, 0);
    for (int64_t t = 0; t <= 200; t += 10) {
        char u[8];
        snprintf(u, sizeof(u), "%02d", (int)(t / 10));
        upd(f, u, C0, t);
        assert_int_equal(tick(f, t), 0);
    }
    int64_t last = -1;
    assert_int_equal(count_to(f, 1, &last), 10); /* 20, 40, ..., 200 */
    assert_int_equal(count_to(f, 2, &last), 4);
    size_t k = 0;
    const char *want[4][2] = {
        {"60", "0001020304"}, {"100", "0506070809"}, {"160", "1011121314"}, {"200", "1516171819"}};
    for (size_t i = 0; i < f->nrec; i++) {
        if (f->recs[i].conn != 2)
            continue;
        expect(f, i, 2, atoi(want[k][0]), want[k][1]);
        k++;
    }
    fx_free(f);
}

/* A token-stream subscriber: skip_self off, so its stream holds every update. */
static void sub_stream(fx_t *f, uint32_t c, uint32_t interval, int32_t delay, bool align, int64_t t)
{
    cq_sched_subopts_t o = opts(interval, delay, false);
    o.set |= CQ_SCHED_SET_SKIP_SELF | CQ_SCHED_SET_ALIGN;
    o.skip_self = false;
    o.align = align;
    sub(f, c, &o, t);
}

/* One random step of what a world does to its subscriptions, beside the updates. */
static void churn_once(fx_t *f, cq_coarsen_t *co, uint32_t n, int64_t t)
{
    static const uint32_t iv[3] = {20, 50, 100};
    if (rand() % 50 == 0)
        co->level = (uint32_t)(rand() % (CQ_COARSEN_MAX + 1));
    if (rand() % 40 == 0)
        cq_sched_resync(f->s, 1 + (uint32_t)rand() % n);
    if (rand() % 30 == 0) { /* a new interval, as an interest update gives a cell */
        cq_sched_subopts_t o = {.set = CQ_SCHED_SET_INTERVAL, .interval_ms = iv[rand() % 3]};
        sub(f, 1 + (uint32_t)rand() % n, &o, t);
    }
    if (rand() % 60 == 0) { /* left and came back: the full state restarts its stream */
        uint32_t c = 1 + (uint32_t)rand() % n;
        cq_sched_unsub(f->s, c);
        sub_stream(f, c, iv[rand() % 3], 0, rand() % 2, t);
    }
}

/* Random token streams (check_msg): 20 rounds of random subscribers, updates from any of them
 * and ticks. With churn, also aligned windows, a quantum, a moving overload level, resyncs, new
 * intervals, and subscribers that leave and come back. Every connection must see every update
 * exactly once and in order, and have them all at the end. */
static void run_streams(unsigned seed, bool churn)
{
    srand(seed);
    for (int round = 0; round < 20; round++) {
        fx_t *f = fx_new(5);
        cq_coarsen_t co;
        cq_coarsen_init(&co, NULL);
        if (churn) {
            cq_sched_set_coarsen(f->s, &co);
            cq_sched_set_quantum(f->s, (uint32_t)(rand() % 2) * 20);
        }
        f->keep = false;
        f->check = true;
        assert_int_equal(cq_sched_set_buf_max(f->s, 8 + (uint32_t)(rand() % 24)), 0);
        uint32_t n = 2 + (uint32_t)(rand() % 30);
        for (uint32_t c = 1; c <= n; c++)
            sub_stream(f, c, (uint32_t)(rand() % 200), rand() % 100 - 50, churn && rand() % 2,
                       rand() % 50);
        int64_t t = 50;
        for (int i = 0; i < 3000; i++) {
            t += rand() % 3;
            upd_tok(f, (uint32_t)(rand() % (n + 1)), t);
            assert_true(cq_sched_buffered(f->s) <= cq_sched_buf_max(f->s));
            if (churn)
                churn_once(f, &co, n, t);
            if (rand() % 4 == 0)
                assert_int_equal(tick(f, t), 0);
        }
        co.level = 0;
        assert_int_equal(tick(f, t + 2000), 0);
        assert_int_equal(tick(f, t + 4000), 0);
        for (uint32_t c = 1; c <= n; c++)
            assert_int_equal(f->pos[c], f->ntok);
        fx_free(f);
    }
}

static void test_random_streams(void **state)
{
    (void)state;
    run_streams(12345, false);
}

static void test_coarsen_random_streams(void **state)
{
    (void)state;
    run_streams(777, true);
}

/* ---- failures ---- */

/* A failing merge leaves the subscriber's window in place; the next tick delivers it. */
static void test_merge_failure_retry(void **state)
{
    (void)state;
    fx_t *f = fx_new(10);
    cq_sched_subopts_t o = opts(50, 0, true);
    sub(f, 1, &o, 0);
    upd(f, "a", C0, 10);
    upd(f, "b", C0, 20);
    f->fail_merge = 1;
    assert_int_equal(tick(f, 50), -ENOMEM);
    assert_int_equal(f->nrec, 0);
    assert_int_equal(tick(f, 60), 0);
    assert_int_equal(f->nrec, 1);
    expect(f, 0, 1, 60, "ab");
    fx_free(f);
}

/* A scenario with folding, masks, full states and catch-up, for the fail-N loop. */
static void scenario(fx_t *f)
{
    (void)cq_sched_set_buf_max(f->s, 8);
    for (uint32_t c = 1; c <= 6; c++) {
        cq_sched_subopts_t o = opts(10 + 15 * c, (int32_t)c - 3, c % 2);
        o.set |= CQ_SCHED_SET_MASKS;
        o.masks_id = c % 3;
        (void)cq_sched_sub(f->s, c, &o, abs_ms(0));
    }
    for (int64_t t = 0; t < 300; t += 3) {
        (void)upd_n(f, "abc", 3, (uint32_t)(t % 7), t);
        if (t % 9 == 0)
            (void)cq_sched_tick(f->s, abs_ms(t));
        if (t == 150)
            cq_sched_unsub(f->s, 2);
    }
    (void)cq_sched_tick(f->s, abs_ms(2000));
}

static void test_fail_n(void **state)
{
    (void)state;
    for (unsigned long n = 1;; n++) {
        test_alloc_install(0, false);
        fx_t *f = fx_new(10);
        test_alloc_install(n, false);
        scenario(f);
        unsigned long failed = test_alloc_failed();
        fx_free(f);
        assert_int_equal(test_alloc_live(), 0);
        test_alloc_remove();
        if (!failed)
            break;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timeline_exact),
        cmocka_unit_test(test_timeline_defaults),
        cmocka_unit_test(test_skip_first),
        cmocka_unit_test(test_skip_first_same_ms),
        cmocka_unit_test(test_align_first_window),
        cmocka_unit_test(test_align_full_state),
        cmocka_unit_test(test_align_new_interval),
        cmocka_unit_test(test_negative_delay),
        cmocka_unit_test(test_skip_self),
        cmocka_unit_test(test_skip_self_before_sub),
        cmocka_unit_test(test_missed_windows),
        cmocka_unit_test(test_clock_jump),
        cmocka_unit_test(test_boundary_once),
        cmocka_unit_test(test_full_state_floor),
        cmocka_unit_test(test_interval_zero),
        cmocka_unit_test(test_encode_once),
        cmocka_unit_test(test_option_update),
        cmocka_unit_test(test_unsub),
        cmocka_unit_test(test_tick_max),
        cmocka_unit_test(test_bounded_100k),
        cmocka_unit_test(test_fold_resync),
        cmocka_unit_test(test_random_streams),
        cmocka_unit_test(test_quantum),
        cmocka_unit_test(test_coarsen_stretch),
        cmocka_unit_test(test_coarsen_merge_missed),
        cmocka_unit_test(test_resync),
        cmocka_unit_test(test_coarsen_random_streams),
        cmocka_unit_test(test_merge_failure_retry),
        cmocka_unit_test(test_fail_n),
    };
    return cmocka_run_group_tests_name("sched", tests, NULL, NULL);
}
