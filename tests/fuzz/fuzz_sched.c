/* fuzz_sched.c - the channel-data fan-out scheduler (src/chandata/cq_sched) on a manual clock.
 *
 * Input: a 3-byte header (byte 0: bits 0-2 the tick, bit 3 an overload policy, bit 4 a 20 ms
 * quantum; byte 1: the start time / 8; byte 2: the buffer limit, 255 for the default), then
 * steps of one op byte (low 4 bits the op, high 4 bits its argument) and the op's own bytes
 * (see step()): sub with every option, re-sub with a new interval, unsub, updates, tick and
 * tick_max, resync, the overload level, the quantum, clock steps and jumps, a buffer limit, and
 * injected callback failures. Connections are 1..NCONN.
 *
 * Updates are the tokens of tests/unit/chandata/test_sched.c: "u%07zu" in order, merged by
 * concatenation; the full state is "S" + every token so far; a non-zero masks id m prefixes a
 * message with "m<m>:". An update the scheduler refused (an injected merge failure while
 * folding) is taken as never made: its token is not counted and the state does not hold it.
 * Checked (abort on violation):
 *   - a message goes only to a subscribed connection, with exactly its masks prefix;
 *   - a full state is exactly "S" + every token, and is sent only to a connection whose
 *     had_first was false when the tick began (new, resynced, or resynchronised by a fold), as
 *     its first message of that tick, and such a connection's first message is a full state;
 *   - ops->full_state is called at most once per tick (unless it failed);
 *   - any other message is a non-empty run of tokens that arrived before the tick (its window
 *     closed), continuing exactly where the connection's stream left off (nothing lost,
 *     repeated or out of order); the only tokens it may skip are its own while skip_self was
 *     on during its subscription. A skip_first subscription's stream starts at the first token
 *     from its subscription on that arrives at or after its first window start (with a
 *     negative delay: at any token up to its subscription);
 *   - after every step: cq_sched_buffered() <= cq_sched_buf_max(), cq_sched_count() is the
 *     model's, cq_sched_next_due() is the subscribers' earliest due time, and each window closes
 *     after it starts and at most max(interval, CQ_COARSEN_SPAN_CAP_MS) + the quantum - 1 later;
 *   - after a tick that returned 0, cq_sched_next_due() > now; after tick_max with budget B
 *     that returned 0, exactly max(0, due - B) subscribers are still due, and those it served
 *     were due no later than those it left;
 *   - calls fail only when a failure was injected (sub never does);
 *   - at the end, at level 0 with no failure, two ticks far in the future leave every
 *     subscriber with had_first, its stream at the last token (or only own skipped tokens
 *     left), and after cq_sched_free() (one more update still buffered) no buffer is live. */
#include "fuzz_common.h"

#include "cq_buf.h"
#include "cq_coarsen.h"
#include "cq_err.h"
#include "cq_sched.h"
#include "test_buf.h"

#include <errno.h>
#include <string.h>

#define NCONN   16
#define TOK_LEN 8
#define QUANTUM 20 /* ms, when one is set */

typedef struct conn {
    bool subbed;
    bool skip_self, ever_skip_self;
    uint32_t masks;
    size_t pos; /* next token expected (see the anchors) */
    /* Where a skip_first stream starts, until its first message: pend, the first token from
     * pend_from on that arrived at or after pend_at; loose, any token up to pos. */
    bool pend, loose;
    size_t pend_from;
    int64_t pend_at;
    /* At the start of the current tick. */
    bool had_first;
    uint64_t due;
    uint32_t nmsg; /* messages in the current tick */
} conn_t;

typedef struct fx {
    cq_sched_t *s;
    cq_coarsen_t co;
    const uint8_t *p, *end;
    uint64_t now;
    uint32_t tick; /* the scheduler's, 0 taken as 1 */
    uint32_t nsub;
    conn_t c[NCONN + 1];
    /* the tokens: sender and arrival of each */
    uint32_t *tok_sender;
    int64_t *tok_at;
    size_t ntok, tcap;
    char *state; /* "S" + every token */
    size_t slen, scap;
    int fail_merge, fail_full, fail_filter;
    uint32_t nfull; /* full_state calls in the current tick */
} fx_t;

static uint8_t byte(fx_t *f)
{
    return f->p < f->end ? *f->p++ : 0;
}

/* ---- callbacks ---- */

static bool take_fail(int *n)
{
    if (*n <= 0)
        return false;
    --*n;
    return true;
}

static cq_buf_t *cb_merge(void *ud, cq_buf_t *const *parts, size_t n)
{
    fx_t *f = ud;
    FUZZ_CHECK(n >= 2);
    if (take_fail(&f->fail_merge))
        return NULL;
    cq_buf_t *b = test_buf_concat(parts, n);
    FUZZ_CHECK(b);
    return b;
}

static cq_buf_t *cb_full(void *ud)
{
    fx_t *f = ud;
    f->nfull++;
    if (take_fail(&f->fail_full))
        return NULL;
    cq_buf_t *b = cq_buf_from(f->state, f->slen);
    FUZZ_CHECK(b);
    return b;
}

static cq_buf_t *cb_filter(void *ud, uint32_t masks_id, cq_buf_t *bytes)
{
    fx_t *f = ud;
    FUZZ_CHECK(masks_id != 0);
    if (take_fail(&f->fail_filter))
        return NULL;
    char pre[16];
    int n = snprintf(pre, sizeof(pre), "m%u:", masks_id);
    cq_buf_t *b = cq_buf_new((size_t)n + bytes->len);
    FUZZ_CHECK(b);
    memcpy(b->data, pre, (size_t)n);
    memcpy(b->data + n, bytes->data, bytes->len);
    b->len = (uint32_t)n + bytes->len;
    return b;
}

/* ---- the stream check ---- */

/* The number of the token at p. */
static size_t tok_num(const uint8_t *p)
{
    FUZZ_CHECK(p[0] == 'u');
    size_t v = 0;
    for (int i = 1; i < TOK_LEN; i++) {
        FUZZ_CHECK(p[i] >= '0' && p[i] <= '9');
        v = v * 10 + (size_t)(p[i] - '0');
    }
    return v;
}

/* The first token from `from` on that arrived at or after `at` (ntok if none yet). */
static size_t first_from(const fx_t *f, size_t from, int64_t at)
{
    while (from < f->ntok && f->tok_at[from] < at)
        from++;
    return from;
}

/* Moves cur over tokens the connection may have skipped (its own, with skip_self) up to k. */
static size_t skip_own(const fx_t *f, uint32_t id, size_t cur, size_t k)
{
    const conn_t *c = &f->c[id];
    for (; cur < k; cur++)
        FUZZ_CHECK(c->ever_skip_self && f->tok_sender[cur] == id);
    return cur;
}

/* Where the connection's stream goes on: resolves a skip_first anchor given first token k. */
static size_t stream_start(fx_t *f, uint32_t id, size_t k)
{
    conn_t *c = &f->c[id];
    size_t cur = c->pos;
    if (c->pend)
        cur = first_from(f, c->pend_from, c->pend_at);
    else if (c->loose)
        cur = k <= c->pos ? k : c->pos;
    c->pend = c->loose = false;
    return cur;
}

static void check_full(fx_t *f, uint32_t id, const uint8_t *body, size_t len)
{
    conn_t *c = &f->c[id];
    FUZZ_CHECK(!c->had_first && c->nmsg == 0);
    FUZZ_CHECK(len == f->slen && memcmp(body, f->state, len) == 0);
    c->pos = f->ntok;
    c->pend = c->loose = false;
}

static void check_window(fx_t *f, uint32_t id, const uint8_t *body, size_t len)
{
    conn_t *c = &f->c[id];
    FUZZ_CHECK(c->had_first || c->nmsg > 0);
    FUZZ_CHECK(len > 0 && len % TOK_LEN == 0);
    size_t cur = stream_start(f, id, tok_num(body));
    for (size_t off = 0; off < len; off += TOK_LEN) {
        size_t k = tok_num(body + off);
        FUZZ_CHECK(k < f->ntok && k >= cur);
        FUZZ_CHECK(f->tok_at[k] < (int64_t)f->now); /* its window has closed */
        cur = skip_own(f, id, cur, k) + 1;
    }
    c->pos = cur;
}

static void cb_emit(void *ud, uint32_t id, cq_buf_t *msg)
{
    fx_t *f = ud;
    FUZZ_CHECK(id >= 1 && id <= NCONN && f->c[id].subbed);
    conn_t *c = &f->c[id];
    const uint8_t *body = msg->data;
    size_t len = msg->len;
    if (c->masks) {
        char pre[16];
        size_t n = (size_t)snprintf(pre, sizeof(pre), "m%u:", c->masks);
        FUZZ_CHECK(len >= n && memcmp(body, pre, n) == 0);
        body += n;
        len -= n;
    }
    if (len && body[0] == 'S')
        check_full(f, id, body, len);
    else
        check_window(f, id, body, len);
    c->nmsg++;
}

static const cq_sched_ops_t ops = {cb_merge, cb_full, cb_filter, cb_emit};

/* ---- the ops ---- */

static const uint32_t intervals[16] = {0,  1,  2,  5,   10,  15,  20,   30,
                                       50, 64, 99, 100, 150, 250, 1000, 1500};

static uint32_t interval_of(uint8_t b)
{
    return b & 0x10 ? b : intervals[b & 15];
}

static cq_sched_info_t info_of(const fx_t *f, uint32_t id)
{
    cq_sched_info_t in;
    FUZZ_CHECK(cq_sched_info(f->s, id, &in) == 0);
    return in;
}

/* A new subscription: where its stream starts (header of this file). */
static void model_new_sub(fx_t *f, uint32_t id, const cq_sched_info_t *in)
{
    conn_t *c = &f->c[id];
    *c = (conn_t){.subbed = true, .pos = f->ntok};
    f->nsub++;
    FUZZ_CHECK(in->had_first == in->skip_first);
    if (!in->skip_first)
        return;
    if (in->delay_ms < 0) {
        c->loose = true;
        return;
    }
    c->pend = true;
    c->pend_from = f->ntok;
    c->pend_at = in->last_ms;
}

/* A re-subscription moved the first window of a skip_first stream that has not started: tokens
 * that arrived from the old start on stay in it; before, the new start counts from now on. */
static void model_resub(fx_t *f, uint32_t id, const cq_sched_info_t *in)
{
    conn_t *c = &f->c[id];
    if (!c->pend)
        return;
    if ((int64_t)f->now >= c->pend_at) {
        c->pend_from = first_from(f, c->pend_from, c->pend_at);
        c->pend_at = INT64_MIN;
    } else {
        c->pend_from = f->ntok;
        c->pend_at = in->last_ms;
    }
}

static void do_sub(fx_t *f, uint32_t id, const cq_sched_subopts_t *o)
{
    bool was = f->c[id].subbed;
    FUZZ_CHECK(cq_sched_sub(f->s, id, o, f->now) == 0);
    cq_sched_info_t in = info_of(f, id);
    if (was)
        model_resub(f, id, &in);
    else
        model_new_sub(f, id, &in);
    conn_t *c = &f->c[id];
    c->skip_self = in.skip_self;
    c->ever_skip_self |= in.skip_self;
    c->masks = in.masks_id;
    if (o && (o->set & CQ_SCHED_SET_INTERVAL)) /* clamped to >= max(1, tick) */
        FUZZ_CHECK(in.interval_ms == (o->interval_ms > f->tick ? o->interval_ms : f->tick));
}

static void op_sub(fx_t *f, uint32_t id)
{
    uint8_t f1 = byte(f), f2 = byte(f), iv = byte(f), dl = byte(f);
    cq_sched_subopts_t o = {
        .set = f1 & 0x3f,
        .interval_ms = interval_of(iv),
        .delay_ms = (int8_t)dl * 3,
        .skip_self = f1 & 0x40,
        .skip_first = f1 & 0x80,
        .masks_id = (f2 >> 1) & 3,
        .align = f2 & 1,
    };
    if (o.masks_id == 3)
        o.masks_id = 0;
    do_sub(f, id, f2 & 0x80 ? NULL : &o);
}

static void op_resub_interval(fx_t *f, uint32_t id)
{
    cq_sched_subopts_t o = {.set = CQ_SCHED_SET_INTERVAL, .interval_ms = interval_of(byte(f))};
    do_sub(f, id, &o);
}

static void op_unsub(fx_t *f, uint32_t id)
{
    cq_sched_unsub(f->s, id);
    if (f->c[id].subbed)
        f->nsub--;
    f->c[id].subbed = false;
}

static void grow_tokens(fx_t *f)
{
    if (f->ntok == f->tcap) {
        f->tcap = f->tcap ? f->tcap * 2 : 64;
        f->tok_sender = realloc(f->tok_sender, f->tcap * sizeof(*f->tok_sender));
        f->tok_at = realloc(f->tok_at, f->tcap * sizeof(*f->tok_at));
        FUZZ_CHECK(f->tok_sender && f->tok_at);
    }
    while (f->slen + TOK_LEN > f->scap) {
        f->scap *= 2;
        f->state = realloc(f->state, f->scap);
        FUZZ_CHECK(f->state);
    }
}

static void op_update(fx_t *f, uint32_t sender)
{
    grow_tokens(f);
    char tok[TOK_LEN + 1];
    snprintf(tok, sizeof(tok), "u%07zu", f->ntok);
    cq_buf_t *b = cq_buf_from(tok, TOK_LEN);
    FUZZ_CHECK(b);
    int fails = f->fail_merge;
    int r = cq_sched_update(f->s, b, sender, f->now);
    cq_buf_unref(b);
    if (r) { /* refused: taken as never made */
        FUZZ_CHECK(r == -ENOMEM && f->fail_merge < fails);
        return;
    }
    f->tok_sender[f->ntok] = sender;
    f->tok_at[f->ntok] = (int64_t)f->now;
    f->ntok++;
    memcpy(f->state + f->slen, tok, TOK_LEN);
    f->slen += TOK_LEN;
}

/* Notes what each subscriber was before a tick; returns how many were due. */
static uint32_t before_tick(fx_t *f)
{
    uint32_t due = 0;
    for (uint32_t id = 1; id <= NCONN; id++) {
        conn_t *c = &f->c[id];
        c->nmsg = 0;
        if (!c->subbed)
            continue;
        cq_sched_info_t in = info_of(f, id);
        c->had_first = in.had_first;
        c->due = in.due_ms;
        due += c->due <= f->now;
    }
    return due;
}

/* tick_max(budget) served exactly min(budget, due) subscribers, the earliest. */
static void check_budget(fx_t *f, uint32_t due, uint32_t budget)
{
    uint32_t left = 0;
    uint64_t served_max = 0, left_min = UINT64_MAX;
    for (uint32_t id = 1; id <= NCONN; id++) {
        const conn_t *c = &f->c[id];
        if (!c->subbed || c->due > f->now)
            continue;
        if (info_of(f, id).due_ms <= f->now) {
            left++;
            left_min = c->due < left_min ? c->due : left_min;
        } else if (c->due > served_max) {
            served_max = c->due;
        }
    }
    FUZZ_CHECK(left == (due > budget ? due - budget : 0));
    FUZZ_CHECK(served_max <= left_min);
    if (!left)
        FUZZ_CHECK(cq_sched_next_due(f->s) > f->now);
}

static void op_tick(fx_t *f, uint32_t budget)
{
    uint32_t due = before_tick(f);
    int fails = f->fail_merge + f->fail_full + f->fail_filter;
    bool full_ok = f->fail_full == 0;
    f->nfull = 0;
    int r = budget == UINT32_MAX ? cq_sched_tick(f->s, f->now)
                                 : cq_sched_tick_max(f->s, f->now, budget);
    if (r) {
        FUZZ_CHECK(r == -ENOMEM && f->fail_merge + f->fail_full + f->fail_filter < fails);
        return;
    }
    FUZZ_CHECK(f->nfull <= 1 || !full_ok); /* once per tick, unless it failed */
    check_budget(f, due, budget);
}

static void op_resync(fx_t *f, uint32_t id)
{
    cq_sched_resync(f->s, id);
    if (f->c[id].subbed)
        FUZZ_CHECK(!info_of(f, id).had_first);
}

static void op_buf_max(fx_t *f, uint32_t max)
{
    uint32_t old = cq_sched_buf_max(f->s), n = cq_sched_buffered(f->s);
    int r = cq_sched_set_buf_max(f->s, max);
    if (max < CQ_SCHED_BUF_MIN || max > 4096)
        FUZZ_CHECK(r == -EINVAL);
    else
        FUZZ_CHECK(r == (n ? -EBUSY : 0));
    FUZZ_CHECK(cq_sched_buf_max(f->s) == (r ? old : max));
}

static void op_fail(fx_t *f, uint8_t arg)
{
    int n = arg / 3 + 1;
    if (arg % 3 == 0)
        f->fail_merge = n;
    else if (arg % 3 == 1)
        f->fail_full = n;
    else
        f->fail_filter = n;
}

/* The timer is the earliest due time, and every window is as long as its interval stretched at
 * most to the overload cap, plus the quantum's delay. */
static void check_subs(const fx_t *f)
{
    uint64_t min = UINT64_MAX;
    for (uint32_t id = 1; id <= NCONN; id++) {
        cq_sched_info_t in;
        if (!f->c[id].subbed) {
            FUZZ_CHECK(cq_sched_info(f->s, id, &in) == CQ_ENOCONN);
            continue;
        }
        in = info_of(f, id);
        min = in.due_ms < min ? in.due_ms : min;
        int64_t cap =
            in.interval_ms > CQ_COARSEN_SPAN_CAP_MS ? in.interval_ms : CQ_COARSEN_SPAN_CAP_MS;
        if (in.due_ms > 0)
            FUZZ_CHECK((int64_t)in.due_ms > in.last_ms &&
                       (int64_t)in.due_ms <= in.last_ms + cap + QUANTUM - 1);
    }
    FUZZ_CHECK(cq_sched_next_due(f->s) == min);
    FUZZ_CHECK(cq_sched_buffered(f->s) <= cq_sched_buf_max(f->s));
    FUZZ_CHECK(cq_sched_count(f->s) == f->nsub);
}

/* The ops on one connection (0, 1, 2, 7); false if op is another. */
static bool step_conn(fx_t *f, uint8_t op, uint32_t id)
{
    if (op == 0)
        op_sub(f, id);
    else if (op == 1)
        op_resub_interval(f, id);
    else if (op == 2)
        op_unsub(f, id);
    else if (op == 7)
        op_resync(f, id);
    else
        return false;
    return true;
}

/* The clock (10, 11, 12, and 15 which ticks too); false if op is another. */
static bool step_clock(fx_t *f, uint8_t op, uint8_t arg)
{
    if (op == 10 || op == 15)
        f->now += arg;
    else if (op == 11)
        f->now += byte(f);
    else if (op == 12)
        f->now += (uint64_t)(byte(f) + 1) * 997; /* a large jump */
    else
        return false;
    if (op == 15)
        op_tick(f, UINT32_MAX);
    return true;
}

static void step(fx_t *f)
{
    uint8_t op = byte(f), arg = op >> 4;
    op &= 15;
    if (step_conn(f, op, arg % NCONN + 1) || step_clock(f, op, arg)) {
        /* done */
    } else if (op == 3) {
        op_update(f, arg); /* 0: no sender */
    } else if (op == 4) {  /* a burst: arg + 1 updates in one ms */
        uint8_t who = byte(f);
        for (uint32_t i = 0; i <= arg; i++)
            op_update(f, (who + i) % (NCONN + 1));
    } else if (op == 5 || op == 6) {
        op_tick(f, op == 5 ? UINT32_MAX : arg % 4u + 1);
    } else if (op == 8) {
        f->co.level = arg % (CQ_COARSEN_MAX + 1);
    } else if (op == 9) {
        cq_sched_set_quantum(f->s, arg & 1 ? QUANTUM : 0);
    } else if (op == 13) {
        op_fail(f, arg);
    } else {
        op_buf_max(f, byte(f) * 17u); /* 0..4335: both sides of the accepted range */
    }
    check_subs(f);
}

/* Level 0, no failure, two ticks far ahead: every stream has every token. */
static void finish(fx_t *f)
{
    f->co.level = 0;
    f->fail_merge = f->fail_full = f->fail_filter = 0;
    f->now += 20000;
    op_tick(f, UINT32_MAX);
    f->now += 20000;
    op_tick(f, UINT32_MAX);
    for (uint32_t id = 1; id <= NCONN; id++) {
        conn_t *c = &f->c[id];
        if (!c->subbed)
            continue;
        FUZZ_CHECK(info_of(f, id).had_first);
        size_t cur = stream_start(f, id, c->pos);
        FUZZ_CHECK(skip_own(f, id, cur, f->ntok) == f->ntok);
    }
    op_update(f, 0); /* freed while buffered */
}

static void setup(fx_t *f)
{
    static const uint32_t ticks[8] = {0, 1, 5, 10, 20, 3, 7, 50};
    uint8_t h = byte(f);
    f->tick = ticks[h & 7] ? ticks[h & 7] : 1;
    f->s = cq_sched_new(&ops, f, ticks[h & 7]);
    FUZZ_CHECK(f->s);
    cq_coarsen_init(&f->co, NULL);
    if (h & 8)
        cq_sched_set_coarsen(f->s, &f->co);
    if (h & 16)
        cq_sched_set_quantum(f->s, QUANTUM);
    f->now = (uint64_t)byte(f) * 8;
    FUZZ_CHECK(cq_sched_sub(f->s, 0, NULL, f->now) == -EINVAL);
    uint8_t m = byte(f);
    if (m != 255)
        FUZZ_CHECK(cq_sched_set_buf_max(f->s, CQ_SCHED_BUF_MIN + m % 61) == 0);
    f->scap = 256;
    f->state = malloc(f->scap);
    FUZZ_CHECK(f->state);
    f->state[0] = 'S';
    f->slen = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FUZZ_CHECK(cq_buf_live() == 0);
    fx_t f = {.p = data, .end = data + size};
    setup(&f);
    while (f.p < f.end)
        step(&f);
    finish(&f);
    cq_sched_free(f.s);
    FUZZ_CHECK(cq_buf_live() == 0);
    free(f.tok_sender);
    free(f.tok_at);
    free(f.state);
    return 0;
}
