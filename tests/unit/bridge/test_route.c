/* Unit tests of route bindings' catch-up (src/bridge/route.c, cq_route.h): a login's offset
 * read, store reads filtered by key and shared between the players at the same place, the
 * ring, the FINAL that always comes, acknowledgements written batched, pacing, the consumer
 * ids, and the idle cut. The MQ engine's position is a fake the tests move by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bridge.pb-c.h"
#include "cq_bridge.h"
#include "cq_route.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- the fake MQ engine: one topic "vip", shard 2, epoch 5 (and a followed shard 4, epoch
 * 9, in test_followed_shard) ---- */

static uint64_t f_pushed, f_pushed4;

static bool position(void *ud, const char *topic, uint32_t shard, uint64_t *epoch, uint64_t *pushed)
{
    (void)ud;
    if (strcasecmp(topic, "vip") != 0 || (shard != 2 && shard != 4))
        return false;
    *epoch = shard == 2 ? 5 : 9;
    *pushed = shard == 2 ? f_pushed : f_pushed4;
    return true;
}

/* The content of offset o: {"user_id":"<player>","n":o}, the player being u<o % 3>. */
static void content_of(uint64_t o, char *buf, size_t len)
{
    snprintf(buf, len, "{\"user_id\":\"u%llu\",\"n\":%llu}", (unsigned long long)(o % 3),
             (unsigned long long)o);
}

static cq_buf_t *event_of(uint64_t o)
{
    char c[64];
    content_of(o, c, sizeof(c));
    cq_topic_event_t te = {"vip", 2, 5, o, o - 1, 1000, "", 0, (const uint8_t *)c, strlen(c)};
    cq_buf_t *b = cq_topic_event_encode(&te);
    assert_non_null(b);
    return b;
}

/* Live events from+1 .. to, each routed to its player. */
static void live(cq_route_t *r, uint64_t from, uint64_t to)
{
    for (uint64_t o = from + 1; o <= to; o++) {
        cq_buf_t *b = event_of(o);
        char key[8];
        snprintf(key, sizeof(key), "u%llu", (unsigned long long)(o % 3));
        f_pushed = o;
        cq_route_live(r, "vip", 2, 5, o, o - 1, "user_id", key, b);
        cq_buf_unref(b);
    }
}

static cq_route_t *engine(cq_route_limits_t lim)
{
    f_pushed = 0;
    cq_route_t *r = cq_route_new(&lim, 2, position, NULL);
    assert_non_null(r);
    assert_int_equal(cq_route_topic(r, "vip", "user_id", 300), 0);
    return r;
}

static void expect_get(cq_route_t *r, const char *consumer, uint64_t *tag)
{
    cq_route_action_t a;
    assert_true(cq_route_next(r, &a));
    assert_int_equal(a.kind, CQ_ROUTE_GET);
    assert_string_equal(a.topic, "vip");
    assert_string_equal(a.consumer, consumer);
    *tag = a.id;
    cq_route_action_done(&a);
}

static void expect_read(cq_route_t *r, uint64_t from, uint32_t max, uint64_t *id)
{
    cq_route_action_t a;
    assert_true(cq_route_next(r, &a));
    assert_int_equal(a.kind, CQ_ROUTE_READ);
    assert_string_equal(a.topic, "vip");
    assert_int_equal(a.from, from);
    assert_int_equal(a.max, max);
    *id = a.id;
    cq_route_action_done(&a);
}

/* The next action is a SEND to conn, final or not, whose events are the offsets in want
 * (terminated by 0), each a TopicEvent of "vip" with its content. */
static void expect_send(cq_route_t *r, uint32_t conn, bool final, const uint64_t *want)
{
    cq_route_action_t a;
    assert_true(cq_route_next(r, &a));
    assert_int_equal(a.kind, CQ_ROUTE_SEND);
    assert_int_equal(a.conn_id, conn);
    assert_int_equal(a.final, final);
    size_t n = 0;
    while (want[n])
        n++;
    assert_int_equal(a.nevs, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(a.evs[i].msg_type, 300);
        Chanqpb__TopicEvent *e =
            chanqpb__topic_event__unpack(NULL, a.evs[i].event->len, a.evs[i].event->data);
        assert_non_null(e);
        assert_string_equal(e->topic, "vip");
        assert_int_equal(e->shard, 2);
        assert_int_equal(e->epoch, 5);
        assert_int_equal(e->offset, want[i]);
        char c[64];
        content_of(want[i], c, sizeof(c));
        assert_int_equal(e->content.len, strlen(c));
        assert_memory_equal(e->content.data, c, strlen(c));
        chanqpb__topic_event__free_unpacked(e, NULL);
    }
    cq_route_action_done(&a);
}

static void expect_commit(cq_route_t *r, const char *consumer, uint64_t offset, uint64_t *tag)
{
    cq_route_action_t a;
    assert_true(cq_route_next(r, &a));
    assert_int_equal(a.kind, CQ_ROUTE_COMMIT);
    assert_string_equal(a.topic, "vip");
    assert_string_equal(a.consumer, consumer);
    assert_int_equal(a.offset, offset);
    *tag = a.id;
    cq_route_action_done(&a);
}

static void expect_none(cq_route_t *r)
{
    cq_route_action_t a;
    assert_false(cq_route_next(r, &a));
}

/* Store rows from+1 .. to (every offset a row). */
static void rows(cq_route_t *r, uint64_t id, uint64_t from, uint64_t to)
{
    cq_resume_row_t v[64];
    char text[64][64];
    size_t n = 0;
    for (uint64_t o = from + 1; o <= to; o++, n++) {
        content_of(o, text[n], sizeof(text[n]));
        v[n] = (cq_resume_row_t){o, 1000, 0, 0, (const uint8_t *)text[n], strlen(text[n])};
    }
    cq_route_rows(r, id, 0, v, n, 0);
}

static void ack(cq_route_t *r, const char *key, uint32_t shard, uint64_t epoch, uint64_t offset)
{
    Chanqpb__TopicPosition p = CHANQPB__TOPIC_POSITION__INIT, *pp = &p;
    p.topic = "vip";
    p.shard = shard;
    p.epoch = epoch;
    p.offset = offset;
    Chanqpb__TopicAckMessage m = CHANQPB__TOPIC_ACK_MESSAGE__INIT;
    m.n_positions = 1;
    m.positions = &pp;
    uint8_t buf[128];
    size_t n = chanqpb__topic_ack_message__pack(&m, buf);
    assert_int_equal(cq_route_ack(r, key, buf, n, 0), 0);
}

/* ---- tests ---- */

/* A player never seen: its offset is read (never committed), then every retained event that
 * names it, from the store, then FINAL. Two players at the same place share each read: the read
 * waits while logins still wait for their offsets (at most READ_HOLD_MS, below). */
static void test_login_from_store_shared(void **state)
{
    (void)state;
    cq_route_t *r = engine((cq_route_limits_t){.chunk_events = 64});
    f_pushed = 12; /* committed before the engine started: the ring does not have them */
    cq_route_topics_clear(r);
    assert_int_equal(cq_route_topic(r, "vip", "user_id", 300), 0);
    cq_route_login(r, 7, "u1", 0);
    cq_route_login(r, 8, "u2", 0);
    uint64_t t1, t2, id;
    expect_get(r, "bridge/user_id/u1", &t1);
    expect_get(r, "bridge/user_id/u2", &t2);
    expect_none(r);
    cq_route_offset(r, t1, -ENOENT, 0, 0);
    expect_none(r); /* u1's read waits while u2's offset is being read, so u2 can join it */
    cq_route_offset(r, t2, -ENOENT, 0, 0);
    expect_read(r, 0, 64, &id); /* one read for both */
    rows(r, id, 0, 12);
    expect_send(r, 7, true, (uint64_t[]){1, 4, 7, 10, 0});
    expect_send(r, 8, true, (uint64_t[]){2, 5, 8, 11, 0});
    expect_none(r);
    cq_route_stats_t st;
    cq_route_stats(r, &st);
    assert_int_equal(st.reads, 1);
    assert_int_equal(st.reads_shared, 1);
    assert_int_equal(st.events_store, 8);
    assert_int_equal(st.caught_up, 2);
    assert_int_equal(st.sessions, 0);
    assert_int_equal(st.awaiting_offsets, 0);
    cq_route_free(r);
}

/* A stored offset: only what follows it; the live events the ring holds are its from there on,
 * and the login of a player with nothing pending is an empty FINAL. */
static void test_login_stored_then_ring(void **state)
{
    (void)state;
    cq_route_t *r = engine((cq_route_limits_t){.chunk_events = 64});
    f_pushed = 6;
    cq_route_topics_clear(r);
    assert_int_equal(cq_route_topic(r, "vip", "user_id", 300), 0);
    live(r, 6, 15); /* the ring: 7..15 */
    cq_route_login(r, 3, "u0", 0);
    uint64_t t, id;
    expect_get(r, "bridge/user_id/u0", &t);
    cq_route_offset(r, t, 0, 3, 0); /* it handled 3 */
    expect_read(r, 3, 64, &id);
    rows(r, id, 3, 6);
    expect_send(r, 3, true, (uint64_t[]){6, 9, 12, 15, 0});
    /* known now: a second login of u0 reads nothing, and its ack moves it */
    ack(r, "u0", 2, 5, 12);
    cq_route_login(r, 4, "u0", 0);
    expect_send(r, 4, true, (uint64_t[]){15, 0});
    cq_route_stats_t st;
    cq_route_stats(r, &st);
    assert_int_equal(st.events_ring, 4);
    assert_int_equal(st.events_store, 1);
    cq_route_free(r);
}

/* Acks: other shards and epochs, and offsets past the live one, are ignored; a known entry is
 * written at the next flush, once, with the highest offset; a failed write is written again. */
static void test_acks_batched(void **state)
{
    (void)state;
    cq_route_t *r = engine((cq_route_limits_t){.flush_ms = 1000});
    live(r, 0, 9);
    cq_route_login(r, 1, "u1", 0);
    uint64_t t;
    expect_get(r, "bridge/user_id/u1", &t);
    cq_route_offset(r, t, -ENOENT, 0, 0);
    expect_send(r, 1, true, (uint64_t[]){1, 4, 7, 0});
    ack(r, "u1", 3, 5, 4);  /* another shard */
    ack(r, "u1", 2, 4, 4);  /* another epoch */
    ack(r, "u1", 2, 5, 10); /* past the live offset */
    cq_route_tick(r, 100);
    expect_none(r);
    ack(r, "u1", 2, 5, 4);
    ack(r, "u1", 2, 5, 7);
    ack(r, "u1", 2, 5, 1); /* behind: ignored */
    cq_route_tick(r, 200);
    expect_commit(r, "bridge/user_id/u1", 7, &t);
    cq_route_tick(r, 300);
    expect_none(r);
    cq_route_offset(r, t, -EIO, 0, 300);
    cq_route_tick(r, 1100); /* dirty again, but not before flush_ms since the last write */
    expect_none(r);
    cq_route_tick(r, 1200);
    expect_commit(r, "bridge/user_id/u1", 7, &t);
    cq_route_offset(r, t, 0, 7, 1200);
    cq_route_stats_t st;
    cq_route_stats(r, &st);
    assert_int_equal(st.commits, 1); /* done: the failed one is not counted */
    assert_int_equal(st.commit_errors, 1);
    assert_int_equal(st.dirty, 0);
    /* an ack for a player not cached reads its stored offset first, and keeps the greater */
    ack(r, "u2", 2, 5, 5);
    expect_get(r, "bridge/user_id/u2", &t);
    cq_route_tick(r, 2300);
    expect_none(r);
    cq_route_offset(r, t, 0, 8, 2300);
    cq_route_tick(r, 2400);
    expect_none(r); /* the store's 8 is ahead of the ack's 5: nothing to write */
    cq_route_free(r);
}

/* Chunks of chunk_events, each after more; live events between chunks come in the chunks; the
 * FINAL is made when the cursors are live at that moment. Two chunks out at once at most. */
static void test_chunks_and_pacing(void **state)
{
    (void)state;
    cq_route_t *r = engine((cq_route_limits_t){.chunk_events = 2, .sends_max = 2});
    live(r, 0, 12);
    for (uint32_t c = 1; c <= 3; c++) {
        cq_route_login(r, c, "u1", 0);
        uint64_t t;
        if (c == 1) {
            expect_get(r, "bridge/user_id/u1", &t);
            cq_route_offset(r, t, -ENOENT, 0, 0);
        }
    }
    expect_send(r, 1, false, (uint64_t[]){1, 4, 0});
    expect_send(r, 2, false, (uint64_t[]){1, 4, 0});
    expect_none(r); /* 3 waits for a place */
    cq_route_applied(r, 1, 0);
    expect_send(r, 3, false, (uint64_t[]){1, 4, 0});
    live(r, 12, 13);
    cq_route_applied(r, 3, 0);
    cq_route_more(r, 1, 0);
    expect_send(r, 1, false, (uint64_t[]){7, 10, 0});
    cq_route_more(r, 1, 0);
    expect_send(r, 1, true, (uint64_t[]){13, 0});
    cq_route_gone(r, 2);
    cq_route_more(r, 2, 0);
    expect_none(r);
    cq_route_stats_t st;
    cq_route_stats(r, &st);
    assert_int_equal(st.sessions, 1);
    cq_route_free(r);
}

/* A session that is not asked for more within idle_ms ends with an empty FINAL; a reload ends
 * every session the same way; a login over sessions_max gets an empty FINAL at once. */
static void test_idle_reload_refused(void **state)
{
    (void)state;
    cq_route_t *r =
        engine((cq_route_limits_t){.chunk_events = 1, .idle_ms = 1000, .sessions_max = 1});
    live(r, 0, 6);
    cq_route_login(r, 1, "u1", 0);
    uint64_t t;
    expect_get(r, "bridge/user_id/u1", &t);
    cq_route_offset(r, t, -ENOENT, 0, 0);
    expect_send(r, 1, false, (uint64_t[]){1, 0});
    cq_route_login(r, 2, "u2", 0);
    expect_send(r, 2, true, (uint64_t[]){0});
    cq_route_tick(r, 999);
    expect_none(r);
    cq_route_tick(r, 1000);
    expect_send(r, 1, true, (uint64_t[]){0});
    cq_route_login(r, 3, "u1", 1000);
    expect_send(r, 3, false, (uint64_t[]){1, 0});
    cq_route_topics_clear(r);
    expect_send(r, 3, true, (uint64_t[]){0});
    assert_false(cq_route_active(r));
    cq_route_stats_t st;
    cq_route_stats(r, &st);
    assert_int_equal(st.dropped_idle, 1);
    assert_int_equal(st.refused, 1);
    assert_int_equal(st.sessions, 0);
    cq_route_free(r);
}

static void test_consumer_ids(void **state)
{
    (void)state;
    char out[129];
    cq_route_consumer_id("user_id", "42", out);
    assert_string_equal(out, "bridge/user_id/42");
    cq_route_consumer_id("user_id", "a b", out); /* a space is not printable ASCII here */
    assert_int_equal(strlen(out), 7 + 32);
    assert_memory_equal(out, "bridge#", 7);
    char again[129];
    cq_route_consumer_id("user_id", "a b", again);
    assert_string_equal(out, again);
    cq_route_consumer_id("user_id", "a c", again);
    assert_string_not_equal(out, again);
    char long_key[128];
    memset(long_key, 'k', 127);
    long_key[127] = '\0';
    cq_route_consumer_id("user_id", long_key, out);
    assert_memory_equal(out, "bridge#", 7);
    /* an instance id on a followed shard: the same up to 100 bytes, the hash past them */
    cq_route_instance_id("user_id", "42", out);
    assert_string_equal(out, "bridge/user_id/42");
    long_key[100 - 15] = '\0'; /* "bridge/user_id/" + 85 = 100 bytes */
    cq_route_instance_id("user_id", long_key, out);
    assert_int_equal(strlen(out), 100);
    long_key[100 - 15] = 'k';
    long_key[101 - 15] = '\0';
    cq_route_instance_id("user_id", long_key, out);
    assert_int_equal(strlen(out), 7 + 32);
    cq_route_consumer_id("user_id", long_key, again);
    assert_int_equal(strlen(again), 101); /* this node's own store takes 128 */
}

/* A followed shard (4, epoch 9) beside the own one (2): a stream each. A login reads its offset
 * on both, the followed one as an instance id with the action naming shard 4; reads of the
 * followed shard name it too; the catch-up walks both and the FINAL waits for both cursors; an
 * ack of shard 4 writes to shard 4, one of a shard without a stream is ignored. */
static void test_followed_shard(void **state)
{
    (void)state;
    f_pushed = 0;
    f_pushed4 = 0;
    cq_route_t *r = cq_route_new(&(cq_route_limits_t){.ring_events = 4}, 2, position, NULL);
    assert_non_null(r);
    assert_int_equal(cq_route_add_shard(r, 4), 0);
    assert_int_equal(cq_route_topic(r, "vip", "user_id", 300), 0);
    assert_int_equal(cq_route_add_shard(r, 6), -EBUSY);
    live(r, 0, 3);
    for (uint64_t o = 1; o <= 12; o++) { /* shard 4: u1's are 1, 4, 7, 10; the ring keeps 9..12 */
        char c[64], key[8];
        content_of(o, c, sizeof(c));
        snprintf(key, sizeof(key), "u%llu", (unsigned long long)(o % 3));
        cq_topic_event_t te = {"vip", 4, 9, o, o - 1, 1000, "", 0, (const uint8_t *)c, strlen(c)};
        cq_buf_t *b = cq_topic_event_encode(&te);
        f_pushed4 = o;
        cq_route_live(r, "vip", 4, 9, o, o - 1, "user_id", key, b);
        cq_buf_unref(b);
    }
    cq_route_login(r, 1, "u1", 0);
    cq_route_action_t a;
    uint64_t t2, t4;
    assert_true(cq_route_next(r, &a));
    assert_int_equal(a.kind, CQ_ROUTE_GET);
    assert_int_equal(a.shard, 2);
    assert_string_equal(a.consumer, "bridge/user_id/u1");
    t2 = a.id;
    cq_route_action_done(&a);
    assert_true(cq_route_next(r, &a));
    assert_int_equal(a.kind, CQ_ROUTE_GET);
    assert_int_equal(a.shard, 4);
    assert_string_equal(a.consumer, "bridge/user_id/u1");
    t4 = a.id;
    cq_route_action_done(&a);
    cq_route_offset(r, t2, -ENOENT, 0, 0);
    expect_none(r); /* the walk waits for shard 4's offset */
    cq_route_offset(r, t4, 0, 2, 0);
    assert_true(cq_route_next(r, &a)); /* shard 2 from the ring: 1; shard 4 after 2: a read */
    assert_int_equal(a.kind, CQ_ROUTE_READ);
    assert_int_equal(a.shard, 4);
    assert_int_equal(a.from, 2);
    uint64_t id = a.id;
    cq_route_action_done(&a);
    cq_resume_row_t v[10];
    char text[10][64];
    for (uint64_t o = 3; o <= 12; o++) {
        content_of(o, text[o - 3], sizeof(text[0]));
        v[o - 3] =
            (cq_resume_row_t){o, 1000, 0, 0, (const uint8_t *)text[o - 3], strlen(text[o - 3])};
    }
    cq_route_rows(r, id, 0, v, 10, 0);
    assert_true(cq_route_next(r, &a));
    assert_int_equal(a.kind, CQ_ROUTE_SEND);
    assert_true(a.final);
    uint64_t want[][2] = {{2, 1}, {4, 4}, {4, 7}, {4, 10}};
    assert_int_equal(a.nevs, 4);
    for (size_t i = 0; i < 4; i++) {
        Chanqpb__TopicEvent *e =
            chanqpb__topic_event__unpack(NULL, a.evs[i].event->len, a.evs[i].event->data);
        assert_int_equal(e->shard, want[i][0]);
        assert_int_equal(e->epoch, want[i][0] == 2 ? 5 : 9);
        assert_int_equal(e->offset, want[i][1]);
        chanqpb__topic_event__free_unpacked(e, NULL);
    }
    cq_route_action_done(&a);
    ack(r, "u1", 6, 9, 10); /* no stream on shard 6 */
    ack(r, "u1", 4, 5, 10); /* shard 2's epoch */
    cq_route_tick(r, 100);
    expect_none(r);
    ack(r, "u1", 4, 9, 10);
    cq_route_tick(r, 200);
    assert_true(cq_route_next(r, &a));
    assert_int_equal(a.kind, CQ_ROUTE_COMMIT);
    assert_int_equal(a.shard, 4);
    assert_string_equal(a.consumer, "bridge/user_id/u1");
    assert_int_equal(a.offset, 10);
    cq_route_action_done(&a);
    expect_none(r);
    cq_route_free(r);
}

/* A relay node has no store of its own: its streams are the followed shards' alone. */
static void test_no_own_shard(void **state)
{
    (void)state;
    f_pushed4 = 0;
    cq_route_t *r = cq_route_new(NULL, CQ_ROUTE_NO_SHARD, position, NULL);
    assert_int_equal(cq_route_add_shard(r, 4), 0);
    assert_int_equal(cq_route_topic(r, "vip", "user_id", 300), 0);
    cq_route_login(r, 1, "u1", 0);
    cq_route_action_t a;
    assert_true(cq_route_next(r, &a));
    assert_int_equal(a.kind, CQ_ROUTE_GET);
    assert_int_equal(a.shard, 4);
    uint64_t t = a.id;
    cq_route_action_done(&a);
    expect_none(r);
    cq_route_offset(r, t, -ENOENT, 0, 0);
    uint64_t none[] = {0};
    expect_send(r, 1, true, none);
    cq_route_free(r);
}

/* The hold has a bound: logins that keep coming do not keep a read waiting past 1 s. */
static void test_read_hold_bound(void **state)
{
    (void)state;
    cq_route_t *r = engine((cq_route_limits_t){.chunk_events = 64});
    f_pushed = 12;
    cq_route_topics_clear(r);
    assert_int_equal(cq_route_topic(r, "vip", "user_id", 300), 0);
    cq_route_login(r, 7, "u1", 1000);
    cq_route_login(r, 8, "u2", 1000);
    uint64_t t1, t2, id;
    expect_get(r, "bridge/user_id/u1", &t1);
    expect_get(r, "bridge/user_id/u2", &t2);
    cq_route_offset(r, t1, -ENOENT, 0, 1000);
    cq_route_tick(r, 1999);
    expect_none(r);
    cq_route_tick(r, 2000); /* u2 still waits for its offset: the read goes anyway */
    expect_read(r, 0, 64, &id);
    rows(r, id, 0, 12);
    expect_send(r, 7, true, (uint64_t[]){1, 4, 7, 10, 0});
    cq_route_offset(r, t2, -ENOENT, 0, 2000); /* too late to share: its own read */
    expect_read(r, 0, 64, &id);
    cq_route_stats_t st;
    cq_route_stats(r, &st);
    assert_int_equal(st.reads, 2);
    assert_int_equal(st.reads_shared, 0);
    cq_route_free(r);
}

/* The ring serves each player its own events only, in order, across chunks, with other
 * players' events in between; when the ring's turnover passed the cursor, the store fills the
 * gap and the ring takes over again. */
static void test_ring_by_key(void **state)
{
    (void)state;
    cq_route_t *r = engine((cq_route_limits_t){.chunk_events = 1, .ring_events = 6});
    live(r, 0, 9); /* the ring: 4..9, complete after 3 */
    cq_route_login(r, 5, "u0", 0);
    uint64_t t, id;
    expect_get(r, "bridge/user_id/u0", &t);
    cq_route_offset(r, t, 0, 3, 0); /* handled 3: the ring has u0's 6 and 9 */
    expect_send(r, 5, false, (uint64_t[]){6, 0});
    live(r, 9, 15); /* the ring: 10..15, complete after 9: u0's 9 left it */
    cq_route_applied(r, 1, 0);
    cq_route_more(r, 5, 0);
    expect_read(r, 8, 1, &id); /* the cursor is before 9 */
    rows(r, id, 8, 9);
    expect_send(r, 5, false, (uint64_t[]){9, 0});
    cq_route_applied(r, 1, 0);
    cq_route_more(r, 5, 0);
    expect_send(r, 5, false, (uint64_t[]){12, 0});
    cq_route_applied(r, 1, 0);
    cq_route_more(r, 5, 0);
    expect_send(r, 5, true, (uint64_t[]){15, 0});
    cq_route_stats_t st;
    cq_route_stats(r, &st);
    assert_int_equal(st.events_ring, 3);
    assert_int_equal(st.events_store, 1);
    cq_route_free(r);
}

/* An invalidated message (issue 25): the ring keeps it, no catch-up from the ring delivers it. */
static void test_ring_drop(void **state)
{
    (void)state;
    cq_route_t *r = engine((cq_route_limits_t){.chunk_events = 8, .ring_events = 16});
    live(r, 0, 9);                                /* u0: 3, 6, 9 */
    assert_false(cq_route_drop(r, "vip", 2, 10)); /* not in the ring */
    assert_false(cq_route_drop(r, "vip", 3, 6));  /* another shard */
    assert_true(cq_route_drop(r, "VIP", 2, 6));
    assert_false(cq_route_drop(r, "vip", 2, 6)); /* once */
    cq_route_login(r, 5, "u0", 0);
    uint64_t t;
    expect_get(r, "bridge/user_id/u0", &t);
    cq_route_offset(r, t, 0, 1, 0);
    expect_send(r, 5, true, (uint64_t[]){3, 9, 0});
    cq_route_free(r);
}

/* Offset reads beyond gets_max wait their turn and go as soon as a slot frees, in order, not
 * at a tick (a mass login would otherwise take gets_max logins per tick). */
static void test_gets_queue(void **state)
{
    (void)state;
    cq_route_t *r = engine((cq_route_limits_t){.gets_max = 1});
    live(r, 0, 3);
    cq_route_login(r, 1, "u1", 0);
    cq_route_login(r, 2, "u2", 0);
    cq_route_login(r, 3, "u0", 0);
    uint64_t t;
    expect_get(r, "bridge/user_id/u1", &t);
    expect_none(r);
    cq_route_offset(r, t, -ENOENT, 0, 0);
    expect_send(r, 1, true, (uint64_t[]){1, 0});
    expect_get(r, "bridge/user_id/u2", &t);
    cq_route_offset(r, t, -ENOENT, 0, 0);
    expect_send(r, 2, true, (uint64_t[]){2, 0});
    expect_get(r, "bridge/user_id/u0", &t);
    cq_route_gone(r, 3); /* its read comes back to no session */
    cq_route_offset(r, t, -ENOENT, 0, 0);
    expect_none(r);
    cq_route_stats_t st;
    cq_route_stats(r, &st);
    assert_int_equal(st.gets, 3);
    assert_int_equal(st.awaiting_offsets, 0); /* each login counted out once */
    cq_route_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_login_from_store_shared),
        cmocka_unit_test(test_login_stored_then_ring),
        cmocka_unit_test(test_acks_batched),
        cmocka_unit_test(test_chunks_and_pacing),
        cmocka_unit_test(test_idle_reload_refused),
        cmocka_unit_test(test_consumer_ids),
        cmocka_unit_test(test_followed_shard),
        cmocka_unit_test(test_no_own_shard),
        cmocka_unit_test(test_read_hold_bound),
        cmocka_unit_test(test_ring_by_key),
        cmocka_unit_test(test_ring_drop),
        cmocka_unit_test(test_gets_queue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
