/* Unit tests of the resume engine (src/bridge/resume.c, cq_resume.h): catch-ups from the ring
 * and from store reads, the exact results (recovered, positions, error text), chunking paced
 * by cq_resume_more, live events that arrive between chunks, refusals, the read slots, a
 * connection gone mid-read, the idle cut and a reload. The MQ engine's position is a fake the
 * tests move by hand; events are TopicEvents encoded as the bridge encodes them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bridge.pb-c.h"
#include "cq_bridge.h"
#include "cq_resume.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- the fake MQ engine: one topic "news", shard 3; and a followed shard 4 ---- */

static uint64_t f_epoch = 7, f_pushed, f_epoch4 = 40, f_pushed4;

static bool position(void *ud, const char *topic, uint32_t shard, uint64_t *epoch, uint64_t *pushed)
{
    (void)ud;
    if (strcasecmp(topic, "news") != 0 || (shard != 3 && shard != 4))
        return false;
    *epoch = shard == 3 ? f_epoch : f_epoch4;
    *pushed = shard == 3 ? f_pushed : f_pushed4;
    return true;
}

static cq_buf_t *event_of(uint64_t offset, uint64_t prev)
{
    char content[32];
    snprintf(content, sizeof(content), "e%llu", (unsigned long long)offset);
    cq_topic_event_t te = {"news",
                           3,
                           f_epoch,
                           offset,
                           prev,
                           1000 + (int64_t)offset,
                           "",
                           0,
                           (const uint8_t *)content,
                           strlen(content)};
    cq_buf_t *b = cq_topic_event_encode(&te);
    assert_non_null(b);
    return b;
}

/* Live events from+1 .. to (each prev the one before, dense for simplicity). */
static void live(cq_resume_t *r, uint64_t from, uint64_t to)
{
    for (uint64_t o = from + 1; o <= to; o++) {
        cq_buf_t *b = event_of(o, o - 1);
        f_pushed = o;
        cq_resume_live(r, "news", 3, f_epoch, o, o - 1, b);
        cq_buf_unref(b);
    }
}

static cq_resume_t *engine(uint32_t ring, uint32_t chunk, uint32_t reads)
{
    f_epoch = 7;
    f_pushed = 0;
    cq_resume_limits_t lim = {.ring_events = ring, .chunk_events = chunk, .reads_max = reads};
    cq_resume_t *r = cq_resume_new(&lim, 3, position, NULL);
    assert_non_null(r);
    assert_int_equal(cq_resume_topic(r, "news", 0, 200), 0);
    return r;
}

/* A TopicResumeMessage with one position (offset 0 and epoch 0: none), as bytes in buf. */
static size_t resume_body(uint8_t *buf, const char *topic, uint32_t shard, uint64_t epoch,
                          uint64_t offset)
{
    Chanqpb__TopicPosition p = CHANQPB__TOPIC_POSITION__INIT, *pp = &p;
    p.topic = (char *)topic;
    p.shard = shard;
    p.epoch = epoch;
    p.offset = offset;
    Chanqpb__TopicResumeMessage m = CHANQPB__TOPIC_RESUME_MESSAGE__INIT;
    m.n_positions = topic ? 1 : 0;
    m.positions = &pp;
    return chanqpb__topic_resume_message__pack(&m, buf);
}

static void request(cq_resume_t *r, uint32_t conn, uint64_t epoch, uint64_t offset)
{
    uint8_t body[256];
    size_t n = resume_body(body, "news", 3, epoch, offset);
    cq_resume_request(r, conn, 0, body, n, 0);
}

/* The next action must be a SEND to conn with flags; its events' offsets (and prevs) are
 * checked against first..last, each prev the offset before it (prev0 for the first). */
static void expect_send(cq_resume_t *r, uint32_t conn, uint32_t flags, uint64_t first,
                        uint64_t last, uint64_t prev0, cq_resume_action_t *keep)
{
    cq_resume_action_t a;
    assert_true(cq_resume_next(r, &a));
    assert_int_equal(a.kind, CQ_RESUME_SEND);
    assert_int_equal(a.conn_id, conn);
    assert_int_equal(a.flags, flags);
    assert_int_equal(a.result != NULL, (flags & CQ_RESUME_F_BEGIN) != 0);
    size_t want = last >= first ? (size_t)(last - first + 1) : 0;
    assert_int_equal(a.nevs, want);
    uint64_t prev = prev0;
    for (size_t i = 0; i < a.nevs; i++) {
        assert_int_equal(a.evs[i].msg_type, 200);
        Chanqpb__TopicEvent *e =
            chanqpb__topic_event__unpack(NULL, a.evs[i].event->len, a.evs[i].event->data);
        assert_non_null(e);
        assert_string_equal(e->topic, "news");
        assert_int_equal(e->shard, 3);
        assert_int_equal(e->epoch, f_epoch);
        assert_int_equal(e->offset, first + i);
        assert_int_equal(e->prev_offset, prev);
        char content[32];
        snprintf(content, sizeof(content), "e%llu", (unsigned long long)(first + i));
        assert_int_equal(e->content.len, strlen(content));
        assert_memory_equal(e->content.data, content, strlen(content));
        prev = e->offset;
        chanqpb__topic_event__free_unpacked(e, NULL);
    }
    if (keep)
        *keep = a;
    else
        cq_resume_action_done(&a);
}

/* The result in a (a BEGIN): recovered, the one position's offset and epoch, the error. */
static void expect_result(cq_resume_action_t *a, bool recovered, uint64_t offset, const char *error)
{
    Chanqpb__TopicResumeResultMessage *m =
        chanqpb__topic_resume_result_message__unpack(NULL, a->result->len, a->result->data);
    assert_non_null(m);
    assert_int_equal(m->recovered, recovered);
    assert_int_equal(m->n_positions, 1);
    assert_string_equal(m->positions[0]->topic, "news");
    assert_int_equal(m->positions[0]->shard, 3);
    assert_int_equal(m->positions[0]->epoch, f_epoch);
    assert_int_equal(m->positions[0]->offset, offset);
    assert_string_equal(m->error, error);
    chanqpb__topic_resume_result_message__free_unpacked(m, NULL);
    cq_resume_action_done(a);
}

static void expect_read(cq_resume_t *r, uint64_t from, uint32_t max, uint64_t *read_id)
{
    cq_resume_action_t a;
    assert_true(cq_resume_next(r, &a));
    assert_int_equal(a.kind, CQ_RESUME_READ);
    assert_string_equal(a.topic, "news");
    assert_int_equal(a.from, from);
    assert_int_equal(a.max, max);
    *read_id = a.read_id;
    cq_resume_action_done(&a);
}

/* Store rows from+1 .. to, with the contents event_of gives. */
static void rows(cq_resume_t *r, uint64_t read_id, uint64_t from, uint64_t to)
{
    cq_resume_row_t v[64];
    char text[64][32];
    size_t n = 0;
    for (uint64_t o = from + 1; o <= to; o++, n++) {
        snprintf(text[n], sizeof(text[n]), "e%llu", (unsigned long long)o);
        v[n] = (cq_resume_row_t){o, 1000 + (int64_t)o,        0,
                                 0, (const uint8_t *)text[n], strlen(text[n])};
    }
    cq_resume_rows(r, read_id, 0, v, n, 0);
}

static void expect_none(cq_resume_t *r)
{
    cq_resume_action_t a;
    assert_false(cq_resume_next(r, &a));
}

/* ---- tests ---- */

/* The ring holds everything after the position: one chunk, BEGIN|FINAL, no read. */
static void test_ring_catch_up(void **state)
{
    (void)state;
    cq_resume_t *r = engine(0, 0, 0);
    live(r, 0, 10);
    request(r, 41, 7, 4);
    cq_resume_action_t a;
    expect_send(r, 41, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL, 5, 10, 4, &a);
    expect_result(&a, true, 4, "");
    expect_none(r);
    cq_resume_stats_t st;
    cq_resume_stats(r, &st);
    assert_int_equal(st.recovered, 1);
    assert_int_equal(st.events_ring, 6);
    assert_int_equal(st.reads, 0);
    assert_int_equal(st.sessions, 0);
    cq_resume_free(r);
}

/* An invalidated message (issue 25) leaves the ring: a resume served from memory skips it, and
 * the event after it carries the prev before it, as a store read gives it. */
static void test_ring_drop(void **state)
{
    (void)state;
    cq_resume_t *r = engine(0, 0, 0);
    live(r, 0, 10);
    assert_false(cq_resume_drop(r, "news", 3, 11)); /* not in the ring */
    assert_false(cq_resume_drop(r, "news", 4, 7));  /* another shard's stream */
    assert_false(cq_resume_drop(r, "other", 3, 7));
    assert_true(cq_resume_drop(r, "news", 3, 7));
    assert_false(cq_resume_drop(r, "news", 3, 7)); /* gone */
    assert_true(cq_resume_drop(r, "news", 3, 10)); /* the newest */
    live(r, 10, 11);
    request(r, 41, 7, 4);
    cq_resume_action_t a;
    assert_true(cq_resume_next(r, &a));
    assert_int_equal(a.kind, CQ_RESUME_SEND);
    assert_int_equal(a.flags, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL);
    static const uint64_t want[][2] = {{5, 4}, {6, 5}, {8, 6}, {9, 8}, {11, 10}};
    assert_int_equal(a.nevs, 5);
    for (size_t i = 0; i < a.nevs; i++) {
        Chanqpb__TopicEvent *e =
            chanqpb__topic_event__unpack(NULL, a.evs[i].event->len, a.evs[i].event->data);
        assert_non_null(e);
        assert_int_equal(e->offset, want[i][0]);
        assert_int_equal(e->prev_offset, want[i][1]);
        char content[32];
        snprintf(content, sizeof(content), "e%llu", (unsigned long long)want[i][0]);
        assert_int_equal(e->content.len, strlen(content));
        assert_memory_equal(e->content.data, content, strlen(content));
        chanqpb__topic_event__free_unpacked(e, NULL);
    }
    cq_resume_action_done(&a);
    /* a client that had 7 already: the ring has no event after it, the store is read */
    request(r, 42, 7, 7);
    assert_true(cq_resume_next(r, &a));
    assert_int_equal(a.kind, CQ_RESUME_READ);
    cq_resume_action_done(&a);
    cq_resume_free(r);
}

/* ---- a followed shard: a stream per (topic, shard) ---- */

static void live4(cq_resume_t *r, uint64_t from, uint64_t to)
{
    for (uint64_t o = from + 1; o <= to; o++) {
        char content[32];
        snprintf(content, sizeof(content), "e%llu", (unsigned long long)o);
        cq_topic_event_t te = {
            "news", 4, f_epoch4, o, o - 1, 0, "", 0, (const uint8_t *)content, strlen(content)};
        cq_buf_t *b = cq_topic_event_encode(&te);
        f_pushed4 = o;
        cq_resume_live(r, "news", 4, f_epoch4, o, o - 1, b);
        cq_buf_unref(b);
    }
}

static size_t two_positions(uint8_t *buf, uint64_t e3, uint64_t o3, uint64_t e4, uint64_t o4)
{
    Chanqpb__TopicPosition p[2] = {CHANQPB__TOPIC_POSITION__INIT, CHANQPB__TOPIC_POSITION__INIT};
    Chanqpb__TopicPosition *pp[2] = {&p[0], &p[1]};
    p[0].topic = p[1].topic = (char *)"news";
    p[0].shard = 3, p[0].epoch = e3, p[0].offset = o3;
    p[1].shard = 4, p[1].epoch = e4, p[1].offset = o4;
    Chanqpb__TopicResumeMessage m = CHANQPB__TOPIC_RESUME_MESSAGE__INIT;
    m.n_positions = 2;
    m.positions = pp;
    return chanqpb__topic_resume_message__pack(&m, buf);
}

/* The events of a (shard, offset, prev) list, in order. */
static void expect_evs(const cq_resume_action_t *a, const uint64_t (*want)[3], size_t n)
{
    assert_int_equal(a->nevs, n);
    for (size_t i = 0; i < n; i++) {
        Chanqpb__TopicEvent *e =
            chanqpb__topic_event__unpack(NULL, a->evs[i].event->len, a->evs[i].event->data);
        assert_non_null(e);
        assert_int_equal(e->shard, want[i][0]);
        assert_int_equal(e->offset, want[i][1]);
        assert_int_equal(e->prev_offset, want[i][2]);
        assert_int_equal(e->epoch, want[i][0] == 3 ? f_epoch : f_epoch4);
        chanqpb__topic_event__free_unpacked(e, NULL);
    }
}

/* A node that follows shard 4 resumes both shards of a topic: each from its own position, its
 * own ring and its own reads (a READ names the shard), each under its own epoch; the result
 * has a position per shard. */
static void test_two_shards(void **state)
{
    (void)state;
    f_epoch = 7, f_pushed = 0, f_epoch4 = 40, f_pushed4 = 100;
    cq_resume_limits_t lim = {.ring_events = 8};
    cq_resume_t *r = cq_resume_new(&lim, 3, position, NULL);
    assert_int_equal(cq_resume_add_shard(r, 4), 0);
    assert_int_equal(cq_resume_add_shard(r, 3), 0); /* its own: nothing to add */
    assert_int_equal(cq_resume_topic(r, "news", 0, 200), 0);
    assert_int_equal(cq_resume_add_shard(r, 5), -EBUSY);
    live(r, 0, 10);
    live4(r, 100, 115); /* the ring keeps 108..115 */
    uint8_t body[256];
    size_t n = two_positions(body, 7, 8, 40, 110);
    cq_resume_request(r, 41, 0, body, n, 0);
    cq_resume_action_t a;
    assert_true(cq_resume_next(r, &a));
    assert_int_equal(a.kind, CQ_RESUME_SEND);
    assert_int_equal(a.flags, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL);
    const uint64_t w1[][3] = {{3, 9, 8},     {3, 10, 9},    {4, 111, 110}, {4, 112, 111},
                              {4, 113, 112}, {4, 114, 113}, {4, 115, 114}};
    expect_evs(&a, w1, 7);
    Chanqpb__TopicResumeResultMessage *m =
        chanqpb__topic_resume_result_message__unpack(NULL, a.result->len, a.result->data);
    assert_true(m->recovered);
    assert_int_equal(m->n_positions, 2);
    assert_int_equal(m->positions[0]->shard, 3);
    assert_int_equal(m->positions[0]->offset, 8);
    assert_int_equal(m->positions[1]->shard, 4);
    assert_int_equal(m->positions[1]->epoch, 40);
    assert_int_equal(m->positions[1]->offset, 110);
    chanqpb__topic_resume_result_message__free_unpacked(m, NULL);
    cq_resume_action_done(&a);
    expect_none(r);
    /* shard 4 from before its ring: verified, then read, on shard 4 */
    n = two_positions(body, 7, 10, 40, 103);
    cq_resume_request(r, 42, 0, body, n, 0);
    assert_true(cq_resume_next(r, &a));
    assert_int_equal(a.kind, CQ_RESUME_READ);
    assert_int_equal(a.shard, 4);
    assert_int_equal(a.from, 102);
    assert_int_equal(a.max, 1);
    uint64_t id = a.read_id;
    cq_resume_action_done(&a);
    cq_resume_row_t row = {103, 0, 0, 0, (const uint8_t *)"e103", 4};
    cq_resume_rows(r, id, 0, &row, 1, 0);
    assert_true(cq_resume_next(r, &a));
    assert_int_equal(a.kind, CQ_RESUME_READ);
    assert_int_equal(a.shard, 4);
    assert_int_equal(a.from, 103);
    id = a.read_id;
    cq_resume_action_done(&a);
    cq_resume_row_t rows4[4];
    const char *txt[4] = {"e104", "e105", "e106", "e107"};
    for (int i = 0; i < 4; i++)
        rows4[i] = (cq_resume_row_t){104 + (uint64_t)i, 0, 0, 0, (const uint8_t *)txt[i], 4};
    cq_resume_rows(r, id, 0, rows4, 4, 0);
    assert_true(cq_resume_next(r, &a));
    assert_int_equal(a.flags, CQ_RESUME_F_BEGIN);
    const uint64_t w2[][3] = {{4, 104, 103}, {4, 105, 104}, {4, 106, 105}, {4, 107, 106}};
    expect_evs(&a, w2, 4);
    cq_resume_action_done(&a);
    cq_resume_applied(r, 1, 0);
    cq_resume_more(r, 42, 0);
    assert_true(cq_resume_next(r, &a));
    assert_int_equal(a.flags, CQ_RESUME_F_FINAL);
    assert_int_equal(a.nevs, 8); /* 108..115 from the ring */
    cq_resume_action_done(&a);
    /* an old epoch on shard 4: not recovered, and the message names the shard */
    n = two_positions(body, 7, 10, 39, 112);
    cq_resume_request(r, 43, 0, body, n, 0);
    assert_true(cq_resume_next(r, &a));
    m = chanqpb__topic_resume_result_message__unpack(NULL, a.result->len, a.result->data);
    assert_false(m->recovered);
    assert_string_equal(m->error, "topic news shard 4: epoch 39 is not the shard's (40): its "
                                  "history may have been rewritten");
    chanqpb__topic_resume_result_message__free_unpacked(m, NULL);
    cq_resume_action_done(&a);
    cq_resume_free(r);
}

/* No position (or epoch 0 and offset 0): delivery continues from the live offset, nothing
 * replayed. */
static void test_no_position(void **state)
{
    (void)state;
    cq_resume_t *r = engine(0, 0, 0);
    live(r, 0, 5);
    uint8_t body[64];
    size_t n = resume_body(body, NULL, 0, 0, 0);
    cq_resume_request(r, 9, 0, body, n, 0);
    cq_resume_action_t a;
    expect_send(r, 9, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL, 1, 0, 0, &a);
    expect_result(&a, true, 5, "");
    request(r, 10, 0, 0);
    expect_send(r, 10, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL, 1, 0, 0, &a);
    expect_result(&a, true, 5, "");
    /* another shard's or topic's position is not this one's */
    n = resume_body(body, "news", 4, 7, 2);
    cq_resume_request(r, 11, 0, body, n, 0);
    expect_send(r, 11, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL, 1, 0, 0, &a);
    expect_result(&a, true, 5, "");
    cq_resume_free(r);
}

/* A baseline: the result of a resume with no position, while the stream had no event, says
 * offset 0 under the shard's epoch. A client that drops before the stream's first event resumes
 * from it and gets every event since: from the ring while it holds the first, else from the
 * store (rows after 0: nothing to verify). */
static void test_baseline_offset_zero(void **state)
{
    (void)state;
    cq_resume_t *r = engine(8, 64, 0);
    uint8_t body[64];
    size_t n = resume_body(body, NULL, 0, 0, 0);
    cq_resume_request(r, 9, 0, body, n, 0);
    cq_resume_action_t a;
    expect_send(r, 9, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL, 1, 0, 0, &a);
    expect_result(&a, true, 0, ""); /* the baseline: epoch 7, offset 0 */
    live(r, 0, 5);
    request(r, 10, 7, 0);
    expect_send(r, 10, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL, 1, 5, 0, &a);
    expect_result(&a, true, 0, "");
    live(r, 5, 30); /* the ring keeps 23..30 */
    request(r, 11, 7, 0);
    uint64_t id;
    expect_read(r, 0, 64, &id); /* a walk from 0, no verify */
    rows(r, id, 0, 22);
    expect_send(r, 11, CQ_RESUME_F_BEGIN, 1, 22, 0, &a);
    expect_result(&a, true, 0, "");
    cq_resume_more(r, 11, 0);
    expect_send(r, 11, CQ_RESUME_F_FINAL, 23, 30, 22, NULL);
    /* the position just before the ring's first event: no verify either */
    request(r, 12, 7, 22);
    expect_send(r, 12, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL, 23, 30, 22, &a);
    expect_result(&a, true, 22, "");
    cq_resume_stats_t st;
    cq_resume_stats(r, &st);
    assert_int_equal(st.reads, 1);
    assert_int_equal(st.not_recovered, 0);
    cq_resume_free(r);
}

/* An old epoch, or an offset past the live one: recovered false with the reason, from now. */
static void test_not_recovered(void **state)
{
    (void)state;
    cq_resume_t *r = engine(0, 0, 0);
    live(r, 0, 5);
    request(r, 1, 6, 3);
    cq_resume_action_t a;
    expect_send(r, 1, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL, 1, 0, 0, &a);
    expect_result(&a, false, 5,
                  "topic news: epoch 6 is not the shard's (7): its history may have been "
                  "rewritten");
    request(r, 2, 7, 9);
    expect_send(r, 2, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL, 1, 0, 0, &a);
    expect_result(&a, false, 5, "topic news: offset 9 is beyond the last delivered offset 5");
    cq_resume_stats_t st;
    cq_resume_stats(r, &st);
    assert_int_equal(st.not_recovered, 2);
    cq_resume_free(r);
}

/* The position is older than the ring: verified in the store (the row at the offset), the
 * rows after it read, then the ring takes over. */
static void test_store_then_ring(void **state)
{
    (void)state;
    cq_resume_t *r = engine(8, 64, 0);
    live(r, 0, 30); /* the ring keeps 23..30 */
    request(r, 5, 7, 10);
    uint64_t id;
    expect_read(r, 9, 1, &id);
    expect_none(r);
    rows(r, id, 9, 10); /* the row at 10 exists */
    expect_read(r, 10, 64, &id);
    rows(r, id, 10, 22);
    cq_resume_action_t a;
    expect_send(r, 5, CQ_RESUME_F_BEGIN, 11, 22, 10, &a);
    expect_result(&a, true, 10, "");
    expect_none(r); /* paced: nothing until the worker asks */
    cq_resume_more(r, 5, 0);
    expect_send(r, 5, CQ_RESUME_F_FINAL, 23, 30, 22, NULL);
    cq_resume_stats_t st;
    cq_resume_stats(r, &st);
    assert_int_equal(st.events_store, 12);
    assert_int_equal(st.events_ring, 8);
    assert_int_equal(st.reads, 2);
    cq_resume_free(r);
}

/* The row at the offset is gone (retention): recovered false, from the live offset. */
static void test_purged(void **state)
{
    (void)state;
    cq_resume_t *r = engine(8, 0, 0);
    live(r, 0, 30);
    request(r, 5, 7, 10);
    uint64_t id;
    expect_read(r, 9, 1, &id);
    rows(r, id, 11, 12); /* the oldest row left is 12 */
    cq_resume_action_t a;
    expect_send(r, 5, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL, 1, 0, 0, &a);
    expect_result(&a, false, 30, "topic news: offset 10 is no longer stored (retention purged it)");
    cq_resume_free(r);
}

/* Chunks of chunk_events, each after a more; live events that commit between chunks are
 * delivered by the session (the worker holds the live ones), and FINAL comes once caught up. */
static void test_chunks_and_live(void **state)
{
    (void)state;
    cq_resume_t *r = engine(0, 4, 0);
    live(r, 0, 10);
    request(r, 3, 7, 2);
    cq_resume_action_t a;
    expect_send(r, 3, CQ_RESUME_F_BEGIN, 3, 6, 2, &a);
    expect_result(&a, true, 2, "");
    live(r, 10, 12); /* committed while the client catches up */
    cq_resume_more(r, 3, 0);
    expect_send(r, 3, 0, 7, 10, 6, NULL);
    cq_resume_more(r, 3, 0);
    expect_send(r, 3, CQ_RESUME_F_FINAL, 11, 12, 10, NULL);
    cq_resume_more(r, 3, 0); /* the session is over */
    expect_none(r);
    cq_resume_free(r);
}

/* Refusals are results too: a body that does not decode, a second resume in progress. */
static void test_refusals(void **state)
{
    (void)state;
    cq_resume_t *r = engine(0, 4, 0);
    live(r, 0, 10);
    cq_resume_request(r, 8, 0, "\xff\xff", 2, 0);
    cq_resume_action_t a;
    expect_send(r, 8, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL, 1, 0, 0, &a);
    expect_result(&a, false, 10, "the body is not a TopicResumeMessage");
    request(r, 8, 7, 1);
    expect_send(r, 8, CQ_RESUME_F_BEGIN, 2, 5, 1, NULL);
    request(r, 8, 7, 1);
    expect_send(r, 8, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL, 1, 0, 0, &a);
    expect_result(&a, false, 10, "a resume is already in progress on this connection");
    cq_resume_stats_t st;
    cq_resume_stats(r, &st);
    assert_int_equal(st.refused, 2);
    assert_int_equal(st.sessions, 1);
    cq_resume_free(r);
}

/* reads_max 1: the second session's read waits for the first's rows. A connection gone while
 * its read is in flight gets nothing when the rows come back. */
static void test_read_slots_and_gone(void **state)
{
    (void)state;
    cq_resume_t *r = engine(4, 64, 1);
    live(r, 0, 20);
    request(r, 1, 7, 3);
    request(r, 2, 7, 5);
    uint64_t id1, id2;
    expect_read(r, 2, 1, &id1);
    expect_none(r);
    cq_resume_gone(r, 1);
    rows(r, id1, 2, 3);
    expect_read(r, 4, 1, &id2); /* the slot went to session 2 */
    expect_none(r);
    rows(r, id2, 4, 5);
    expect_read(r, 5, 64, &id2);
    rows(r, id2, 5, 16);
    expect_send(r, 2, CQ_RESUME_F_BEGIN, 6, 16, 5, NULL);
    cq_resume_more(r, 2, 0);
    expect_send(r, 2, CQ_RESUME_F_FINAL, 17, 20, 16, NULL);
    cq_resume_free(r);
}

/* A session that is not asked for more within idle_ms is cut with an empty FINAL; a reload
 * cuts every session the same way. */
static void test_idle_and_reload(void **state)
{
    (void)state;
    cq_resume_limits_t lim = {.chunk_events = 2, .idle_ms = 1000};
    f_epoch = 7;
    f_pushed = 0;
    cq_resume_t *r = cq_resume_new(&lim, 3, position, NULL);
    assert_non_null(r);
    assert_int_equal(cq_resume_topic(r, "news", 0, 200), 0);
    live(r, 0, 10);
    request(r, 1, 7, 2);
    expect_send(r, 1, CQ_RESUME_F_BEGIN, 3, 4, 2, NULL);
    cq_resume_tick(r, 999);
    expect_none(r);
    cq_resume_tick(r, 1000);
    expect_send(r, 1, CQ_RESUME_F_FINAL, 1, 0, 0, NULL);
    request(r, 2, 7, 2);
    expect_send(r, 2, CQ_RESUME_F_BEGIN, 3, 4, 2, NULL);
    cq_resume_topics_clear(r);
    expect_send(r, 2, CQ_RESUME_F_FINAL, 1, 0, 0, NULL);
    cq_resume_stats_t st;
    cq_resume_stats(r, &st);
    assert_int_equal(st.dropped_idle, 1);
    assert_int_equal(st.sessions, 0);
    cq_resume_free(r);
}

/* sends_max 2: two chunks at the workers at once; the other sessions wait their turn in order,
 * whether new or asking for more, and take the places cq_resume_applied frees. A session that
 * waits and goes away gives up its turn. */
static void test_pacing(void **state)
{
    (void)state;
    cq_resume_limits_t lim = {.chunk_events = 4, .sends_max = 2};
    f_epoch = 7;
    f_pushed = 0;
    cq_resume_t *r = cq_resume_new(&lim, 3, position, NULL);
    assert_non_null(r);
    assert_int_equal(cq_resume_topic(r, "news", 0, 200), 0);
    live(r, 0, 20);
    for (uint32_t conn = 1; conn <= 4; conn++)
        request(r, conn, 7, 2);
    expect_send(r, 1, CQ_RESUME_F_BEGIN, 3, 6, 2, NULL);
    expect_send(r, 2, CQ_RESUME_F_BEGIN, 3, 6, 2, NULL);
    expect_none(r);
    cq_resume_stats_t st;
    cq_resume_stats(r, &st);
    assert_int_equal(st.sends_out, 2);
    assert_int_equal(st.send_waiting, 2);
    cq_resume_more(r, 1, 0); /* behind 3 and 4 */
    expect_none(r);
    cq_resume_applied(r, 1, 0);
    expect_send(r, 3, CQ_RESUME_F_BEGIN, 3, 6, 2, NULL);
    expect_none(r);
    cq_resume_gone(r, 4); /* waiting: its turn goes to 1 when a place is free */
    cq_resume_applied(r, 1, 0);
    expect_send(r, 1, 0, 7, 10, 6, NULL);
    expect_none(r);
    cq_resume_applied(r, 2, 0);
    expect_none(r); /* nobody waits */
    cq_resume_stats(r, &st);
    assert_int_equal(st.sends_out, 0);
    assert_int_equal(st.send_waiting, 0);
    assert_int_equal(st.sessions, 3);
    cq_resume_applied(r, 5, 0); /* more than were out: nothing goes below zero */
    cq_resume_more(r, 2, 0);
    expect_send(r, 2, 0, 7, 10, 6, NULL);
    cq_resume_free(r);
}

/* A session that reads the store holds its place over the read: the chunk its rows make is the
 * one the place was for. Refusals count too, and places of chunks that never come back are
 * taken back after idle_ms without progress. */
static void test_pacing_reads_and_lost(void **state)
{
    (void)state;
    cq_resume_limits_t lim = {
        .ring_events = 4, .chunk_events = 64, .sends_max = 1, .idle_ms = 1000};
    f_epoch = 7;
    f_pushed = 0;
    cq_resume_t *r = cq_resume_new(&lim, 3, position, NULL);
    assert_non_null(r);
    assert_int_equal(cq_resume_topic(r, "news", 0, 200), 0);
    live(r, 0, 20); /* the ring keeps 17..20 */
    request(r, 1, 7, 10);
    uint64_t id;
    expect_read(r, 9, 1, &id); /* the verify read takes no place */
    rows(r, id, 9, 10);
    expect_read(r, 10, 64, &id); /* the walk read does */
    request(r, 2, 7, 18);        /* from the ring, but the place is taken */
    expect_none(r);
    rows(r, id, 10, 16);
    expect_send(r, 1, CQ_RESUME_F_BEGIN, 11, 16, 10, NULL);
    expect_none(r);
    cq_resume_applied(r, 1, 10);
    expect_send(r, 2, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL, 19, 20, 18, NULL);
    cq_resume_request(r, 3, 0, "\xff", 1, 10); /* a refusal is a chunk too */
    cq_resume_action_t a;
    expect_send(r, 3, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL, 1, 0, 0, &a);
    expect_result(&a, false, 20, "the body is not a TopicResumeMessage");
    cq_resume_more(r, 1, 10); /* waits: two chunks are out */
    expect_none(r);
    cq_resume_tick(r, 1009);
    expect_none(r);
    cq_resume_tick(r, 1010); /* nothing came back for idle_ms */
    expect_send(r, 1, CQ_RESUME_F_FINAL, 17, 20, 16, NULL);
    cq_resume_stats_t st;
    cq_resume_stats(r, &st);
    assert_int_equal(st.credits_lost, 2);
    assert_int_equal(st.sends_out, 1);
    assert_int_equal(st.dropped_idle, 0);
    cq_resume_free(r);
}

/* A topic bound to a "topic" channel resumes on that channel only: a request on another
 * channel is refused, and the chunks name the request's channel. A topic has one channel. */
static void test_channels(void **state)
{
    (void)state;
    f_epoch = 7;
    f_pushed = 0;
    cq_resume_t *r = cq_resume_new(NULL, 3, position, NULL);
    assert_non_null(r);
    assert_int_equal(cq_resume_topic(r, "news", 5, 200), 0);
    assert_int_equal(cq_resume_topic(r, "news", 5, 200), 0);
    assert_int_equal(cq_resume_topic(r, "news", 0, 200), -EEXIST);
    live(r, 0, 4);
    uint8_t body[256];
    size_t n = resume_body(body, "news", 3, 7, 2);
    cq_resume_request(r, 1, 0, body, n, 0);
    cq_resume_action_t a;
    assert_true(cq_resume_next(r, &a));
    assert_int_equal(a.chan_id, 0);
    Chanqpb__TopicResumeResultMessage *m =
        chanqpb__topic_resume_result_message__unpack(NULL, a.result->len, a.result->data);
    assert_non_null(m);
    assert_false(m->recovered);
    assert_int_equal(m->n_positions, 0);
    assert_string_equal(m->error, "no durable topic is bound to channel 0");
    chanqpb__topic_resume_result_message__free_unpacked(m, NULL);
    cq_resume_action_done(&a);
    cq_resume_request(r, 1, 5, body, n, 0);
    assert_true(cq_resume_next(r, &a));
    assert_int_equal(a.kind, CQ_RESUME_SEND);
    assert_int_equal(a.chan_id, 5);
    assert_int_equal(a.flags, CQ_RESUME_F_BEGIN | CQ_RESUME_F_FINAL);
    assert_int_equal(a.nevs, 2);
    expect_result(&a, true, 2, "");
    cq_resume_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_catch_up),
        cmocka_unit_test(test_ring_drop),
        cmocka_unit_test(test_two_shards),
        cmocka_unit_test(test_no_position),
        cmocka_unit_test(test_baseline_offset_zero),
        cmocka_unit_test(test_not_recovered),
        cmocka_unit_test(test_store_then_ring),
        cmocka_unit_test(test_purged),
        cmocka_unit_test(test_chunks_and_live),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_read_slots_and_gone),
        cmocka_unit_test(test_idle_and_reload),
        cmocka_unit_test(test_pacing),
        cmocka_unit_test(test_pacing_reads_and_lost),
        cmocka_unit_test(test_channels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
