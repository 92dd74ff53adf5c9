/* test_topics.c - unit tests of durable-topic resume on the client (clients/c/chanq_topics.h):
 * every rule of chanq_topics_accept with exact outcomes, the resume and ack messages decoded
 * back field by field, the result's rules, the bounds, and fail-N allocation loops. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chanq_topics.h"
#include "test_alloc.h"

/* ---- helpers ------------------------------------------------------------------------------ */

/* A TopicEvent as the bridge sends it (the fields the tracker reads; content left empty). */
static Chanqpb__TopicEvent ev(const char *topic, uint32_t shard, uint64_t epoch, uint64_t offset,
                              uint64_t prev, const char *producer_id, uint64_t seq)
{
    Chanqpb__TopicEvent e = CHANQPB__TOPIC_EVENT__INIT;
    e.topic = (char *)topic;
    e.shard = shard;
    e.epoch = epoch;
    e.offset = offset;
    e.prev_offset = prev;
    e.producer_id = (char *)producer_id;
    e.seq = seq;
    return e;
}

static int acc(chanq_topics_t *t, uint32_t ch, const char *topic, uint32_t shard, uint64_t epoch,
               uint64_t offset, uint64_t prev)
{
    Chanqpb__TopicEvent e = ev(topic, shard, epoch, offset, prev, "", 0);
    return chanq_topics_accept(t, ch, &e);
}

static int acc_key(chanq_topics_t *t, uint32_t ch, const char *topic, uint32_t shard,
                   uint64_t offset, uint64_t prev, const char *pid, uint64_t seq)
{
    Chanqpb__TopicEvent e = ev(topic, shard, 1, offset, prev, pid, seq);
    return chanq_topics_accept(t, ch, &e);
}

static void pos_is(const chanq_topics_t *t, const char *topic, uint32_t shard, uint64_t epoch,
                   uint64_t offset, uint32_t channel)
{
    chanq_topic_pos_t p;
    assert_int_equal(chanq_topics_position(t, topic, shard, &p), 0);
    assert_int_equal(p.epoch, epoch);
    assert_int_equal(p.offset, offset);
    assert_int_equal(p.channel, channel);
}

static void no_pos(const chanq_topics_t *t, const char *topic, uint32_t shard)
{
    chanq_topic_pos_t p;
    assert_int_equal(chanq_topics_position(t, topic, shard, &p), -ENOENT);
}

typedef struct counts {
    uint64_t accepted, duplicates, holes, skipped, epoch_changes;
    size_t positions, keys;
} counts_t;

static void stats_are(const chanq_topics_t *t, counts_t want)
{
    chanq_topics_stats_t s;
    chanq_topics_stats(t, &s);
    assert_int_equal(s.accepted, want.accepted);
    assert_int_equal(s.duplicates, want.duplicates);
    assert_int_equal(s.holes, want.holes);
    assert_int_equal(s.skipped, want.skipped);
    assert_int_equal(s.epoch_changes, want.epoch_changes);
    assert_int_equal(s.positions, want.positions);
    assert_int_equal(s.keys, want.keys);
}

static chanq_topics_t *mk(void)
{
    chanq_topics_t *t = chanq_topics_new();
    assert_non_null(t);
    return t;
}

static chanq_client_t *mk_client(chanq_msg_fn fn, void *ud)
{
    chanq_opts_t o;
    chanq_opts_init(&o);
    o.on_message = fn;
    o.ud = ud;
    chanq_client_t *c = NULL;
    assert_int_equal(chanq_client_new(&o, &c), 0);
    return c;
}

/* One message a client queued, read back through a second client. */
typedef struct sent {
    int n;
    chanq_msg_t m;
    uint8_t body[4096];
} sent_t;

static void on_sent(void *ud, const chanq_msg_t *m)
{
    sent_t *s = ud;
    s->n++;
    s->m = *m;
    assert_true(m->body_len <= sizeof(s->body));
    if (m->body_len)
        memcpy(s->body, m->body, m->body_len);
    s->m.body = s->body;
}

/* Takes everything c queued (exactly one message) and decodes it into *s. */
static void take_one(chanq_client_t *c, sent_t *s)
{
    const uint8_t *p;
    size_t n;
    memset(s, 0, sizeof(*s));
    assert_int_equal(chanq_client_out(c, &p, &n), 0);
    chanq_client_t *rx = mk_client(on_sent, s);
    assert_int_equal(chanq_client_feed(rx, p, n), 1);
    chanq_client_out_consume(c, n);
    chanq_client_free(rx);
    assert_int_equal(s->n, 1);
}

static void position_is(const Chanqpb__TopicPosition *p, const char *topic, uint32_t shard,
                        uint64_t epoch, uint64_t offset)
{
    assert_string_equal(p->topic, topic);
    assert_int_equal(p->shard, shard);
    assert_int_equal(p->epoch, epoch);
    assert_int_equal(p->offset, offset);
}

/* A TopicResumeResultMessage's bytes in buf; returns their length. */
static size_t result_body(uint8_t *buf, size_t cap, bool recovered, const char *error,
                          const Chanqpb__TopicPosition *ps, size_t n)
{
    Chanqpb__TopicResumeResultMessage m = CHANQPB__TOPIC_RESUME_RESULT_MESSAGE__INIT;
    Chanqpb__TopicPosition *ptrs[8];
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++)
        ptrs[i] = (Chanqpb__TopicPosition *)&ps[i];
    m.recovered = recovered;
    m.error = (char *)error;
    m.positions = ptrs;
    m.n_positions = n;
    size_t len = protobuf_c_message_get_packed_size(&m.base);
    assert_true(len <= cap);
    return protobuf_c_message_pack(&m.base, buf);
}

static Chanqpb__TopicPosition tp(const char *topic, uint32_t shard, uint64_t epoch, uint64_t offset)
{
    Chanqpb__TopicPosition p = CHANQPB__TOPIC_POSITION__INIT;
    p.topic = (char *)topic;
    p.shard = shard;
    p.epoch = epoch;
    p.offset = offset;
    return p;
}

/* ---- rules 2 to 6 ------------------------------------------------------------------------- */

/* Rule 2: the first event of a (topic, shard) is accepted whatever its prev_offset, and its
 * position is made on the event's channel; other shards and topics are separate. */
static void test_first_event_makes_position(void **state)
{
    (void)state;
    chanq_topics_t *t = mk();
    no_pos(t, "news", 0);
    assert_int_equal(acc(t, 7, "news", 0, 3, 40, 39), 1);
    pos_is(t, "news", 0, 3, 40, 7);
    assert_int_equal(acc(t, 0, "news", 1, 5, 2, 0), 1);
    pos_is(t, "news", 1, 5, 2, 0);
    assert_int_equal(acc(t, 0, "news2", 0, 3, 1, 0), 1);
    pos_is(t, "news2", 0, 3, 1, 0);
    pos_is(t, "news", 0, 3, 40, 7);
    no_pos(t, "news", 2);
    no_pos(t, "new", 0);
    stats_are(t, (counts_t){.accepted = 3, .positions = 3});
    chanq_topics_free(t);
}

/* Rule 5: prev_offset == the position's offset is the next event (offsets are not dense). */
static void test_next_event_advances(void **state)
{
    (void)state;
    chanq_topics_t *t = mk();
    assert_int_equal(acc(t, 0, "news", 0, 1, 10, 0), 1);
    assert_int_equal(acc(t, 0, "news", 0, 1, 17, 10), 1);
    pos_is(t, "news", 0, 1, 17, 0);
    /* The position follows the channel of the last accepted event. */
    assert_int_equal(acc(t, 4, "news", 0, 1, 18, 17), 1);
    pos_is(t, "news", 0, 1, 18, 4);
    stats_are(t, (counts_t){.accepted = 3, .positions = 1});
    chanq_topics_free(t);
}

/* Rule 4: an offset at or below the position's is dropped as a duplicate, whatever its
 * prev_offset, and changes nothing but the counter. */
static void test_old_offset_is_duplicate(void **state)
{
    (void)state;
    chanq_topics_t *t = mk();
    assert_int_equal(acc(t, 0, "news", 0, 1, 10, 0), 1);
    assert_int_equal(acc(t, 0, "news", 0, 1, 10, 9), 0);
    assert_int_equal(acc(t, 3, "news", 0, 1, 9, 10), 0);
    assert_int_equal(acc(t, 0, "news", 0, 1, 1, 0), 0);
    pos_is(t, "news", 0, 1, 10, 0);
    stats_are(t, (counts_t){.accepted = 1, .duplicates = 3, .positions = 1});
    chanq_topics_free(t);
}

/* Rule 3: another epoch (higher or lower) is a new history: accepted even at a lower offset
 * or over a hole, even while a resume is pending; the position takes the event's. */
static void test_epoch_change_accepted(void **state)
{
    (void)state;
    chanq_topics_t *t = mk();
    chanq_client_t *c = mk_client(NULL, NULL);
    assert_int_equal(acc(t, 0, "news", 0, 4, 50, 49), 1);
    assert_int_equal(acc(t, 0, "news", 0, 5, 30, 29), 1);
    pos_is(t, "news", 0, 5, 30, 0);
    assert_int_equal(chanq_topics_resume(t, c, 0), 0);
    assert_int_equal(acc(t, 0, "news", 0, 4, 90, 70), 1);
    pos_is(t, "news", 0, 4, 90, 0);
    /* Under the new epoch the other rules apply again. */
    assert_int_equal(acc(t, 0, "news", 0, 4, 90, 89), 0);
    stats_are(t, (counts_t){.accepted = 3, .duplicates = 1, .epoch_changes = 2, .positions = 1});
    chanq_client_free(c);
    chanq_topics_free(t);
}

/* Rule 6 with no resume pending: a hole is accepted and counted (nothing better is possible). */
static void test_hole_accepted_when_not_resuming(void **state)
{
    (void)state;
    chanq_topics_t *t = mk();
    assert_int_equal(acc(t, 0, "news", 0, 1, 10, 0), 1);
    assert_int_equal(acc(t, 0, "news", 0, 1, 20, 15), 1);
    pos_is(t, "news", 0, 1, 20, 0);
    assert_int_equal(acc(t, 0, "news", 0, 1, 21, 20), 1);
    stats_are(t, (counts_t){.accepted = 3, .holes = 1, .positions = 1});
    chanq_topics_free(t);
}

/* Rule 6 while a resume of the event's channel is pending: the hole is skipped (the catch-up
 * brings it); a hole on another channel is not; after the result holes are accepted again. */
static void test_hole_skipped_while_resuming(void **state)
{
    (void)state;
    chanq_topics_t *t = mk();
    chanq_client_t *c = mk_client(NULL, NULL);
    assert_int_equal(acc(t, 5, "news", 0, 1, 10, 0), 1);
    assert_int_equal(acc(t, 6, "chat", 0, 1, 10, 0), 1);
    assert_false(chanq_topics_pending(t, 5));
    assert_int_equal(chanq_topics_resume(t, c, 5), 0);
    assert_true(chanq_topics_pending(t, 5));
    assert_false(chanq_topics_pending(t, 6));
    assert_int_equal(acc(t, 5, "news", 0, 1, 12, 11), 0);
    pos_is(t, "news", 0, 1, 10, 5);
    assert_int_equal(acc(t, 6, "chat", 0, 1, 12, 11), 1);
    /* The next event is still accepted while pending. */
    assert_int_equal(acc(t, 5, "news", 0, 1, 11, 10), 1);
    stats_are(t, (counts_t){.accepted = 4, .holes = 1, .skipped = 1, .positions = 2});
    uint8_t body[64];
    size_t n = result_body(body, sizeof(body), true, "", NULL, 0);
    bool rec = false;
    assert_int_equal(chanq_topics_on_result(t, 5, body, n, &rec), 0);
    assert_true(rec);
    assert_false(chanq_topics_pending(t, 5));
    assert_int_equal(acc(t, 5, "news", 0, 1, 14, 13), 1);
    pos_is(t, "news", 0, 1, 14, 5);
    stats_are(t, (counts_t){.accepted = 5, .holes = 2, .skipped = 1, .positions = 2});
    chanq_client_free(c);
    chanq_topics_free(t);
}

/* ---- rule 1: the dedup window ------------------------------------------------------------ */

/* A (producer_id, seq) accepted on one shard drops its copy on another (before any position
 * rule: the copy's shard gets no position); the key is scoped by topic; an empty producer_id
 * is never a duplicate and takes no room. */
static void test_key_drops_copy_on_other_shard(void **state)
{
    (void)state;
    chanq_topics_t *t = mk();
    assert_int_equal(acc_key(t, 0, "news", 0, 5, 0, "17", 9), 1);
    assert_int_equal(acc_key(t, 0, "news", 1, 3, 0, "17", 9), 0);
    no_pos(t, "news", 1);
    assert_int_equal(acc_key(t, 0, "news", 1, 3, 0, "17", 10), 1);
    assert_int_equal(acc_key(t, 0, "news", 2, 3, 0, "1", 79), 1); /* "17",9 vs "1",79 */
    assert_int_equal(acc_key(t, 0, "sport", 0, 3, 0, "17", 9), 1);
    assert_int_equal(acc_key(t, 0, "news", 0, 6, 5, "", 9), 1);
    assert_int_equal(acc_key(t, 0, "news", 3, 6, 0, "", 9), 1);
    Chanqpb__TopicEvent e = ev("news", 4, 1, 1, 0, NULL, 9); /* NULL is "" */
    assert_int_equal(chanq_topics_accept(t, 0, &e), 1);
    pos_is(t, "news", 0, 1, 6, 0);
    pos_is(t, "news", 1, 1, 3, 0);
    stats_are(t, (counts_t){.accepted = 7, .duplicates = 1, .positions = 6, .keys = 4});
    chanq_topics_free(t);
}

/* Only an accepted event's key is recorded: a copy dropped by rule 4 or skipped over a hole
 * leaves its key free, so the first accepted copy of it is handled. */
static void test_key_recorded_only_when_accepted(void **state)
{
    (void)state;
    chanq_topics_t *t = mk();
    chanq_client_t *c = mk_client(NULL, NULL);
    assert_int_equal(acc_key(t, 0, "news", 0, 5, 0, "", 0), 1);
    assert_int_equal(acc_key(t, 0, "news", 0, 5, 4, "8", 1), 0); /* rule 4 */
    assert_int_equal(chanq_topics_resume(t, c, 0), 0);
    assert_int_equal(acc_key(t, 0, "news", 0, 9, 7, "8", 2), 0); /* skipped */
    assert_int_equal(acc_key(t, 0, "news", 1, 2, 0, "8", 1), 1);
    assert_int_equal(acc_key(t, 0, "news", 0, 9, 5, "8", 2), 1);
    assert_int_equal(acc_key(t, 0, "news", 2, 2, 0, "8", 1), 0);
    assert_int_equal(acc_key(t, 0, "news", 2, 2, 0, "8", 2), 0);
    stats_are(t,
              (counts_t){.accepted = 3, .duplicates = 3, .skipped = 1, .positions = 2, .keys = 2});
    chanq_client_free(c);
    chanq_topics_free(t);
}

/* Accepts key ("1", 1) on shard 0, then `newer` keys ("2", 1..newer) on shard 1, then offers
 * ("1", 1) on shard 2: returns what accept answered. */
static int window_story(unsigned newer)
{
    chanq_topics_t *t = mk();
    assert_int_equal(acc_key(t, 0, "news", 0, 1, 0, "1", 1), 1);
    for (unsigned i = 1; i <= newer; i++)
        assert_int_equal(acc_key(t, 0, "news", 1, i, i - 1, "2", i), 1);
    int r = acc_key(t, 0, "news", 2, 1, 0, "1", 1);
    chanq_topics_stats_t s;
    chanq_topics_stats(t, &s);
    assert_int_equal(s.keys, newer + 1 > CHANQ_TOPICS_WINDOW ? CHANQ_TOPICS_WINDOW : newer + 1);
    /* The newest keys are all still there: the oldest of them is dropped. */
    assert_int_equal(acc_key(t, 0, "news", 3, 1, 0, "2", newer), 0);
    chanq_topics_free(t);
    return r;
}

/* The window holds the last 4096 accepted keys: after 4095 newer keys key 1 is a duplicate,
 * after 4096 it is forgotten and accepted. */
static void test_window_forgets_oldest_key(void **state)
{
    (void)state;
    assert_int_equal(CHANQ_TOPICS_WINDOW, 4096);
    assert_int_equal(window_story(CHANQ_TOPICS_WINDOW - 1), 0);
    assert_int_equal(window_story(CHANQ_TOPICS_WINDOW), 1);
    assert_int_equal(window_story(3 * CHANQ_TOPICS_WINDOW + 7), 1);
}

/* ---- bounds and bad input ----------------------------------------------------------------- */

/* 1024 positions are held; the 1025th (topic, shard) is refused with CQ_ELIMIT and changes
 * nothing, while held ones keep working. A result naming a new one is refused the same way. */
static void test_1025th_position_refused(void **state)
{
    (void)state;
    assert_int_equal(CHANQ_TOPICS_MAX_POSITIONS, 1024);
    chanq_topics_t *t = mk();
    for (uint32_t s = 0; s < CHANQ_TOPICS_MAX_POSITIONS; s++)
        assert_int_equal(acc_key(t, 0, "news", s, 1, 0, "", 0), 1);
    assert_int_equal(acc_key(t, 0, "news", CHANQ_TOPICS_MAX_POSITIONS, 1, 0, "9", 1), CQ_ELIMIT);
    assert_int_equal(acc_key(t, 0, "other", 0, 1, 0, "", 0), CQ_ELIMIT);
    no_pos(t, "news", CHANQ_TOPICS_MAX_POSITIONS);
    assert_int_equal(acc_key(t, 0, "news", 1023, 2, 1, "9", 1), 1); /* key 9/1 was not kept */
    pos_is(t, "news", 1023, 1, 2, 0);
    pos_is(t, "news", 0, 1, 1, 0);
    stats_are(t, (counts_t){.accepted = 1025, .positions = 1024, .keys = 1});
    Chanqpb__TopicPosition ps[2] = {tp("other", 0, 1, 5), tp("news", 7, 1, 9)};
    uint8_t body[128];
    size_t n = result_body(body, sizeof(body), true, "", ps, 2);
    assert_int_equal(chanq_topics_on_result(t, 0, body, n, NULL), CQ_ELIMIT);
    no_pos(t, "other", 0);
    pos_is(t, "news", 7, 1, 9, 0);
    chanq_topics_free(t);
}

/* Bad arguments and names: nothing is tracked. */
static void test_bad_input(void **state)
{
    (void)state;
    chanq_topics_t *t = mk();
    chanq_client_t *c = mk_client(NULL, NULL);
    Chanqpb__TopicEvent e = ev("news", 0, 1, 1, 0, "", 0);
    assert_int_equal(chanq_topics_accept(NULL, 0, &e), -EINVAL);
    assert_int_equal(chanq_topics_accept(t, 0, NULL), -EINVAL);
    char name[CHANQ_TOPICS_TOPIC_MAX + 2];
    memset(name, 'a', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0'; /* 65 characters */
    const char *bad[] = {"", "a-b", "a b", "é", name, NULL};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        e.topic = (char *)bad[i];
        assert_int_equal(chanq_topics_accept(t, 0, &e), CQ_EBADTOPIC);
    }
    name[CHANQ_TOPICS_TOPIC_MAX] = '\0'; /* 64 is the longest name */
    e.topic = name;
    assert_int_equal(chanq_topics_accept(t, 0, &e), 1);
    pos_is(t, name, 0, 1, 1, 0);
    char pid[CHANQ_TOPICS_PRODUCER_MAX + 2];
    memset(pid, '7', sizeof(pid) - 1);
    pid[sizeof(pid) - 1] = '\0';
    e = ev("Az_09", 0, 1, 1, 0, pid, 1);
    assert_int_equal(chanq_topics_accept(t, 0, &e), CQ_EFIELD);
    pid[CHANQ_TOPICS_PRODUCER_MAX] = '\0';
    assert_int_equal(chanq_topics_accept(t, 0, &e), 1);
    assert_int_equal(chanq_topics_accept(t, 0, &e), 0);
    stats_are(t, (counts_t){.accepted = 2, .duplicates = 1, .positions = 2, .keys = 1});
    chanq_topic_pos_t p;
    assert_int_equal(chanq_topics_position(t, "a-b", 0, &p), -ENOENT);
    assert_int_equal(chanq_topics_position(NULL, "news", 0, &p), -EINVAL);
    assert_int_equal(chanq_topics_position(t, NULL, 0, &p), -EINVAL);
    assert_int_equal(chanq_topics_position(t, "news", 0, NULL), -EINVAL);
    assert_int_equal(chanq_topics_resume(NULL, c, 0), -EINVAL);
    assert_int_equal(chanq_topics_resume(t, NULL, 0), -EINVAL);
    assert_int_equal(chanq_topics_ack(NULL, c), -EINVAL);
    assert_int_equal(chanq_topics_ack(t, NULL), -EINVAL);
    assert_int_equal(chanq_topics_on_result(NULL, 0, "", 0, NULL), -EINVAL);
    assert_int_equal(chanq_topics_on_result(t, 0, NULL, 1, NULL), -EINVAL);
    assert_false(chanq_topics_pending(NULL, 0));
    assert_string_equal(chanq_topics_result_error(NULL), "");
    assert_int_equal(chanq_client_out_pending(c), 0);
    assert_null(chanq_topics_free(NULL));
    chanq_client_free(c);
    chanq_topics_free(t);
}

/* ---- the messages ------------------------------------------------------------------------- */

/* The resume message: type 90 on the resumed channel, stub 0, broadcast 0, the positions of
 * that channel (in the order they were made), every field; an empty one for a channel with
 * none. The channel is pending until its result. */
static void test_resume_message(void **state)
{
    (void)state;
    chanq_topics_t *t = mk();
    chanq_client_t *c = mk_client(NULL, NULL);
    assert_int_equal(acc(t, 5, "news", 2, 7, 40, 0), 1);
    assert_int_equal(acc(t, 0, "chat", 0, 1, 3, 0), 1);
    assert_int_equal(acc(t, 5, "news", 0, 0x123456789ull, 0xfedcba987654ull, 0), 1);
    assert_int_equal(acc(t, 5, "scores", 4000000000u, 2, 9, 0), 1);
    assert_int_equal(chanq_topics_resume(t, c, 5), 0);
    sent_t s;
    take_one(c, &s);
    assert_int_equal(s.m.channel_id, 5);
    assert_int_equal(s.m.msg_type, CHANQ_MSG_TOPIC_RESUME);
    assert_int_equal(s.m.msg_type, 90);
    assert_int_equal(s.m.stub_id, 0);
    assert_int_equal(s.m.broadcast, 0);
    Chanqpb__TopicResumeMessage *m =
        chanq_unpack(&chanqpb__topic_resume_message__descriptor, s.m.body, s.m.body_len);
    assert_non_null(m);
    assert_int_equal(m->n_positions, 3);
    position_is(m->positions[0], "news", 2, 7, 40);
    position_is(m->positions[1], "news", 0, 0x123456789ull, 0xfedcba987654ull);
    position_is(m->positions[2], "scores", 4000000000u, 2, 9);
    chanq_unpack_free(m);
    assert_true(chanq_topics_pending(t, 5));
    assert_false(chanq_topics_pending(t, 0));
    /* Channel 0 (GLOBAL) has one: TopicResumeMessage{positions: [{topic: "chat", epoch: 1,
     * offset: 3}]}, shard 0 left out; clients/js/test/topics.test.js expects these bytes too. */
    static const uint8_t resume_chat[] = {0x0a, 0x0a, 0x0a, 0x04, 'c',  'h',
                                          'a',  't',  0x18, 0x01, 0x20, 0x03};
    assert_int_equal(chanq_topics_resume(t, c, 0), 0);
    take_one(c, &s);
    assert_int_equal(s.m.channel_id, 0);
    assert_int_equal(s.m.msg_type, 90);
    assert_int_equal(s.m.body_len, sizeof(resume_chat));
    assert_memory_equal(s.m.body, resume_chat, sizeof(resume_chat));
    m = chanq_unpack(&chanqpb__topic_resume_message__descriptor, s.m.body, s.m.body_len);
    assert_non_null(m);
    assert_int_equal(m->n_positions, 1);
    position_is(m->positions[0], "chat", 0, 1, 3);
    chanq_unpack_free(m);
    /* None: an empty body, and the channel is pending all the same. */
    assert_int_equal(chanq_topics_resume(t, c, 9), 0);
    take_one(c, &s);
    assert_int_equal(s.m.channel_id, 9);
    assert_int_equal(s.m.msg_type, 90);
    assert_int_equal(s.m.body_len, 0);
    assert_true(chanq_topics_pending(t, 9));
    /* Resuming a pending channel again sends again and it stays pending once. */
    assert_int_equal(chanq_topics_resume(t, c, 9), 0);
    take_one(c, &s);
    uint8_t body[8];
    size_t n = result_body(body, sizeof(body), true, "", NULL, 0);
    assert_int_equal(chanq_topics_on_result(t, 9, body, n, NULL), 0);
    assert_false(chanq_topics_pending(t, 9));
    assert_true(chanq_topics_pending(t, 5));
    assert_true(chanq_topics_pending(t, 0));
    chanq_client_free(c);
    chanq_topics_free(t);
}

/* The ack: type 92 on channel 0, stub 0, every position the tracker holds. */
static void test_ack_message(void **state)
{
    (void)state;
    chanq_topics_t *t = mk();
    chanq_client_t *c = mk_client(NULL, NULL);
    assert_int_equal(chanq_topics_ack(t, c), 0);
    sent_t s;
    take_one(c, &s);
    assert_int_equal(s.m.msg_type, CHANQ_MSG_TOPIC_ACK);
    assert_int_equal(s.m.msg_type, 92);
    assert_int_equal(s.m.body_len, 0);
    assert_int_equal(acc(t, 5, "news", 1, 3, 12, 0), 1);
    assert_int_equal(acc(t, 0, "chat", 0, 1, 3, 0), 1);
    assert_int_equal(chanq_topics_ack(t, c), 0);
    take_one(c, &s);
    assert_int_equal(s.m.channel_id, 0);
    assert_int_equal(s.m.msg_type, 92);
    assert_int_equal(s.m.stub_id, 0);
    assert_int_equal(s.m.broadcast, 0);
    Chanqpb__TopicAckMessage *m =
        chanq_unpack(&chanqpb__topic_ack_message__descriptor, s.m.body, s.m.body_len);
    assert_non_null(m);
    assert_int_equal(m->n_positions, 2);
    position_is(m->positions[0], "news", 1, 3, 12);
    position_is(m->positions[1], "chat", 0, 1, 3);
    chanq_unpack_free(m);
    assert_false(chanq_topics_pending(t, 0)); /* an ack is no resume */
    chanq_client_free(c);
    chanq_topics_free(t);
}

/* The result's rules: recovered and the same epoch keep the larger offset; another epoch, or
 * not recovered, take the result's (even lower); an unknown (topic, shard) is made on the
 * result's channel; the error text is kept until the next result. */
static void test_result_rules(void **state)
{
    (void)state;
    chanq_topics_t *t = mk();
    assert_int_equal(acc(t, 3, "a", 0, 1, 10, 0), 1);
    assert_int_equal(acc(t, 3, "a", 1, 1, 10, 0), 1);
    assert_int_equal(acc(t, 3, "a", 2, 1, 10, 0), 1);
    assert_int_equal(acc(t, 8, "a", 3, 1, 10, 0), 1);
    Chanqpb__TopicPosition ps[4] = {tp("a", 0, 1, 8), tp("a", 1, 1, 12), tp("a", 2, 2, 4),
                                    tp("b", 0, 6, 20)};
    uint8_t body[256];
    size_t n = result_body(body, sizeof(body), true, "", ps, 4);
    bool rec = false;
    assert_int_equal(chanq_topics_on_result(t, 3, body, n, &rec), 0);
    assert_true(rec);
    assert_string_equal(chanq_topics_result_error(t), "");
    pos_is(t, "a", 0, 1, 10, 3); /* ours was further */
    pos_is(t, "a", 1, 1, 12, 3); /* the result's was */
    pos_is(t, "a", 2, 2, 4, 3);  /* another epoch */
    pos_is(t, "b", 0, 6, 20, 3); /* made */
    pos_is(t, "a", 3, 1, 10, 8); /* not in the result */
    /* Not recovered: every position named is the result's, lower or not. */
    Chanqpb__TopicPosition nr[2] = {tp("a", 0, 1, 2), tp("a", 3, 1, 30)};
    n = result_body(body, sizeof(body), false, "offset 3 of a/0 purged", nr, 2);
    assert_int_equal(chanq_topics_on_result(t, 8, body, n, &rec), 0);
    assert_false(rec);
    assert_string_equal(chanq_topics_result_error(t), "offset 3 of a/0 purged");
    pos_is(t, "a", 0, 1, 2, 8);
    pos_is(t, "a", 3, 1, 30, 8);
    pos_is(t, "a", 1, 1, 12, 3);
    /* A bad topic in a result is refused, the rest applied. */
    Chanqpb__TopicPosition bad[2] = {tp("a-b", 0, 1, 2), tp("a", 1, 1, 13)};
    n = result_body(body, sizeof(body), true, "", bad, 2);
    rec = false;
    assert_int_equal(chanq_topics_on_result(t, 3, body, n, &rec), CQ_EBADTOPIC);
    assert_true(rec);
    assert_string_equal(chanq_topics_result_error(t), "");
    pos_is(t, "a", 1, 1, 13, 3);
    stats_are(t, (counts_t){.accepted = 4, .positions = 5});
    chanq_topics_free(t);
}

/* A result that does not parse ends the resume (holes are accepted again) as not recovered. */
static void test_result_garbage(void **state)
{
    (void)state;
    chanq_topics_t *t = mk();
    chanq_client_t *c = mk_client(NULL, NULL);
    assert_int_equal(acc(t, 0, "a", 0, 1, 10, 0), 1);
    assert_int_equal(chanq_topics_resume(t, c, 0), 0);
    uint8_t body[64];
    Chanqpb__TopicPosition ps[1] = {tp("a", 0, 1, 9)};
    size_t n = result_body(body, sizeof(body), false, "gone", ps, 1);
    bool rec = true;
    assert_int_equal(chanq_topics_on_result(t, 0, body, n - 1, &rec), CQ_EDECODE);
    assert_false(rec);
    assert_false(chanq_topics_pending(t, 0));
    assert_string_equal(chanq_topics_result_error(t), "");
    pos_is(t, "a", 0, 1, 10, 0);
    assert_int_equal(acc(t, 0, "a", 0, 1, 20, 15), 1);
    stats_are(t, (counts_t){.accepted = 2, .holes = 1, .positions = 1});
    /* An empty body is a valid result: not recovered, no positions. */
    rec = true;
    assert_int_equal(chanq_topics_on_result(t, 0, NULL, 0, &rec), 0);
    assert_false(rec);
    chanq_client_free(c);
    chanq_topics_free(t);
}

/* The guarantee end to end on one shard: handled 1..3, lost 4 and 5, resumed; before the
 * result a live 6 (a hole) and a repeat of 3 come; the result says recovered from 3; the
 * catch-up brings 4 and 5, then the live 6 and 7. The app handles 1..7 once each, in order. */
static void test_resume_story(void **state)
{
    (void)state;
    chanq_topics_t *t = mk();
    chanq_client_t *c = mk_client(NULL, NULL);
    static const struct {
        uint64_t offset, prev;
    } in[] = {{1, 0}, {2, 1}, {3, 2}, /* resume here */ {6, 5},
              {3, 2}, /* result here */
              {4, 3}, {5, 4}, {3, 2}, {6, 5},
              {6, 5}, {7, 6}};
    uint64_t handled[16];
    size_t nh = 0;
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        if (i == 3)
            assert_int_equal(chanq_topics_resume(t, c, 0), 0);
        if (i == 5) {
            Chanqpb__TopicPosition ps[1] = {tp("news", 0, 1, 3)};
            uint8_t body[64];
            size_t n = result_body(body, sizeof(body), true, "", ps, 1);
            assert_int_equal(chanq_topics_on_result(t, 0, body, n, NULL), 0);
        }
        int r = acc(t, 0, "news", 0, 1, in[i].offset, in[i].prev);
        assert_true(r == 0 || r == 1);
        if (r)
            handled[nh++] = in[i].offset;
    }
    assert_int_equal(nh, 7);
    for (size_t i = 0; i < nh; i++)
        assert_int_equal(handled[i], i + 1);
    pos_is(t, "news", 0, 1, 7, 0);
    stats_are(t, (counts_t){.accepted = 7, .duplicates = 3, .skipped = 1, .positions = 1});
    chanq_client_free(c);
    chanq_topics_free(t);
}

/* ---- allocation failures ------------------------------------------------------------------ */

/* Makes a tracker, accepts a keyed event, resumes, takes a result with an error text, acks:
 * true when every step succeeded; a failed one must have reported -ENOMEM. */
static bool alloc_story(void)
{
    bool ok = false;
    chanq_client_t *c = NULL;
    chanq_topics_t *t = chanq_topics_new();
    if (!t)
        goto done;
    Chanqpb__TopicEvent e = ev("news", 0, 1, 1, 0, "5", 1);
    int r = chanq_topics_accept(t, 0, &e);
    if (r < 0) {
        assert_int_equal(r, -ENOMEM);
        goto done;
    }
    chanq_opts_t o;
    chanq_opts_init(&o);
    if (chanq_client_new(&o, &c) < 0)
        goto done;
    if (chanq_topics_resume(t, c, 0) < 0)
        goto done;
    assert_true(chanq_topics_pending(t, 0));
    Chanqpb__TopicPosition ps[1] = {tp("news", 0, 1, 1)};
    uint8_t body[64];
    size_t n = result_body(body, sizeof(body), false, "why", ps, 1);
    r = chanq_topics_on_result(t, 0, body, n, NULL);
    if (r < 0) {
        /* Unpacking out of memory reads as a body that does not parse. */
        assert_true(r == -ENOMEM || r == CQ_EDECODE);
        assert_true(r == CQ_EDECODE || chanq_topics_pending(t, 0));
        goto done;
    }
    if (chanq_topics_ack(t, c) < 0)
        goto done;
    ok = strcmp(chanq_topics_result_error(t), "why") == 0;
done:
    chanq_client_free(c);
    chanq_topics_free(t);
    return ok;
}

static void test_out_of_memory(void **state)
{
    (void)state;
    for (unsigned long fail = 1;; fail++) {
        test_alloc_install(fail, false);
        if (test_alloc_round_end(alloc_story()))
            break;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_event_makes_position),
        cmocka_unit_test(test_next_event_advances),
        cmocka_unit_test(test_old_offset_is_duplicate),
        cmocka_unit_test(test_epoch_change_accepted),
        cmocka_unit_test(test_hole_accepted_when_not_resuming),
        cmocka_unit_test(test_hole_skipped_while_resuming),
        cmocka_unit_test(test_key_drops_copy_on_other_shard),
        cmocka_unit_test(test_key_recorded_only_when_accepted),
        cmocka_unit_test(test_window_forgets_oldest_key),
        cmocka_unit_test(test_1025th_position_refused),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_resume_message),
        cmocka_unit_test(test_ack_message),
        cmocka_unit_test(test_result_rules),
        cmocka_unit_test(test_result_garbage),
        cmocka_unit_test(test_resume_story),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests_name("topics", tests, NULL, NULL);
}
