/* test_move.c - what a moving connection redoes: the core's record of its own subscriptions and
 * credentials (clients/c/chanq.h), and the sans-I/O move engine (clients/c/chanq_move.h):
 * addresses, round robin, backoff, AUTH and SUB again with the exact bytes, the moved event. A
 * second core plays the server: it encodes the replies fed to the client under test. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chanq.h"
#include "chanq_move.h"
#include "test_alloc.h"

enum { MT_AUTH = 1, MT_REMOVE = 4, MT_SUB = 6, MT_UNSUB = 7 };
enum { CONN_CLIENT = 2, CT_SUBWORLD = 3 };

/* ---- a scripted server ------------------------------------------------------------------- */

typedef struct world {
    chanq_client_t *c;   /* under test */
    chanq_client_t *srv; /* encodes what the server sends */
    int msgs;            /* messages the client passed to on_message */
} world_t;

static void count_msg(void *ud, const chanq_msg_t *m)
{
    (void)m;
    ((world_t *)ud)->msgs++;
}

static void world_init(world_t *w)
{
    memset(w, 0, sizeof(*w));
    chanq_opts_t o;
    chanq_opts_init(&o);
    o.on_message = count_msg;
    o.ud = w;
    assert_int_equal(chanq_client_new(&o, &w->c), 0);
    chanq_opts_init(&o);
    assert_int_equal(chanq_client_new(&o, &w->srv), 0);
}

static void world_done(world_t *w)
{
    chanq_client_free(w->c);
    chanq_client_free(w->srv);
}

/* Feeds the client what the server queued. */
static void deliver(world_t *w)
{
    const uint8_t *p;
    size_t n;
    assert_int_equal(chanq_client_out(w->srv, &p, &n), 0);
    assert_true(chanq_client_feed(w->c, p, n) >= 0);
    chanq_client_out_consume(w->srv, n);
}

static void srv_auth_result(world_t *w, uint32_t stub, int result, uint32_t conn_id)
{
    Channeldpb__AuthResultMessage ar = CHANNELDPB__AUTH_RESULT_MESSAGE__INIT;
    ar.result = (Channeldpb__AuthResultMessage__AuthResult)result;
    ar.connid = conn_id;
    assert_int_equal(chanq_client_send(w->srv, 0, 0, stub, MT_AUTH, &ar.base), 0);
    deliver(w);
}

static void srv_sub_result(world_t *w, uint32_t ch, uint32_t stub, uint32_t conn_id,
                           const Channeldpb__ChannelSubscriptionOptions *o)
{
    Channeldpb__SubscribedToChannelResultMessage r =
        CHANNELDPB__SUBSCRIBED_TO_CHANNEL_RESULT_MESSAGE__INIT;
    r.connid = conn_id;
    r.suboptions = (Channeldpb__ChannelSubscriptionOptions *)o;
    r.conntype = (Channeldpb__ConnectionType)CONN_CLIENT;
    r.channeltype = (Channeldpb__ChannelType)CT_SUBWORLD;
    assert_int_equal(chanq_client_send(w->srv, ch, 0, stub, MT_SUB, &r.base), 0);
    deliver(w);
}

static void srv_unsub_result(world_t *w, uint32_t ch, uint32_t conn_id)
{
    Channeldpb__UnsubscribedFromChannelResultMessage r =
        CHANNELDPB__UNSUBSCRIBED_FROM_CHANNEL_RESULT_MESSAGE__INIT;
    r.connid = conn_id;
    r.conntype = (Channeldpb__ConnectionType)CONN_CLIENT;
    assert_int_equal(chanq_client_send(w->srv, ch, 0, 0, MT_UNSUB, &r.base), 0);
    deliver(w);
}

/* The bytes the client queued (consumed). */
static uint8_t *take_out(chanq_client_t *c, size_t *ret_n)
{
    const uint8_t *p;
    size_t n;
    assert_int_equal(chanq_client_out(c, &p, &n), 0);
    uint8_t *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    memcpy(copy, p, n);
    chanq_client_out_consume(c, n);
    *ret_n = n;
    return copy;
}

/* Asserts the client's pending output is exactly what `expect` queued on a fresh core. */
typedef void (*encode_fn)(chanq_client_t *fresh, void *arg);
static void assert_out_is(chanq_client_t *c, encode_fn expect, void *arg)
{
    chanq_opts_t o;
    chanq_opts_init(&o);
    chanq_client_t *fresh;
    assert_int_equal(chanq_client_new(&o, &fresh), 0);
    expect(fresh, arg);
    size_t n1, n2;
    uint8_t *a = take_out(c, &n1), *b = take_out(fresh, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    free(a);
    free(b);
    chanq_client_free(fresh);
}

/* Options with every kind of field, as chanqd's SUB result carries them. */
static char *g_masks[] = {"name", "entities"};
static Channeldpb__ChannelSubscriptionOptions opts_full(void)
{
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    o.has_dataaccess = 1;
    o.dataaccess = CHANNELDPB__CHANNEL_DATA_ACCESS__READ_ACCESS;
    o.n_datafieldmasks = 2;
    o.datafieldmasks = g_masks;
    o.has_fanoutintervalms = 1;
    o.fanoutintervalms = 50;
    o.has_fanoutdelayms = 1;
    o.fanoutdelayms = -1;
    o.has_skipselfupdatefanout = 1;
    o.skipselfupdatefanout = 1;
    return o;
}

static void assert_opts_equal(const chanq_sub_t *s, const Channeldpb__ChannelSubscriptionOptions *o)
{
    size_t n = protobuf_c_message_get_packed_size(&o->base);
    uint8_t *want = malloc(n ? n : 1);
    assert_non_null(want);
    protobuf_c_message_pack(&o->base, want);
    assert_int_equal(s->opts_len, n);
    assert_memory_equal(s->opts, want, n);
    free(want);
}

/* An authenticated client (conn_id) that subscribed itself to ch with o (result answered). */
static void authed(world_t *w, uint32_t conn_id)
{
    assert_int_equal(chanq_client_auth(w->c, 1, "pit-1", "lt-1"), 0);
    srv_auth_result(w, 1, 0, conn_id);
    assert_int_equal(chanq_client_conn_id(w->c), conn_id);
}

static void self_sub(world_t *w, uint32_t ch, uint32_t stub,
                     const Channeldpb__ChannelSubscriptionOptions *o)
{
    assert_int_equal(chanq_client_sub_to_channel(w->c, stub, ch, 0, NULL), 0);
    srv_sub_result(w, ch, stub, chanq_client_conn_id(w->c), o);
}

/* ---- the core's record --------------------------------------------------------------------- */

/* Its own requests' results are recorded with the result's options and the channel type;
 * subscriptions a server made, and results naming another connection, are not. */
static void test_records_own_subscriptions(void **state)
{
    (void)state;
    world_t w;
    world_init(&w);
    authed(&w, 7);
    Channeldpb__ChannelSubscriptionOptions o = opts_full();
    self_sub(&w, 5, 3, &o);
    srv_sub_result(&w, 6, 0, 7, &o); /* a server subscribed us to 6 */
    assert_int_equal(chanq_client_sub_to_channel(w.c, 4, 8, 7, NULL), 0); /* naming our id */
    srv_sub_result(&w, 8, 0, 99, &o); /* the owner's copy of another's SUB on 8 */
    assert_int_equal(chanq_client_sub_count(w.c), 1);
    Channeldpb__ChannelSubscriptionOptions o2 = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    srv_sub_result(&w, 8, 4, 7, &o2);
    assert_int_equal(chanq_client_sub_count(w.c), 2);
    const chanq_sub_t *s = chanq_client_sub_at(w.c, 0);
    assert_int_equal(s->channel_id, 5);
    assert_int_equal(s->channel_type, CT_SUBWORLD);
    assert_opts_equal(s, &o);
    assert_ptr_equal(chanq_client_sub_find(w.c, 8), chanq_client_sub_at(w.c, 1));
    assert_int_equal(chanq_client_sub_find(w.c, 8)->opts_len, 0);
    assert_null(chanq_client_sub_find(w.c, 6));
    assert_null(chanq_client_sub_at(w.c, 2));
    /* a server subscribing another connection does not mark the channel */
    assert_int_equal(chanq_client_sub_to_channel(w.c, 0, 9, 12, NULL), 0);
    srv_sub_result(&w, 9, 0, 7, &o);
    assert_null(chanq_client_sub_find(w.c, 9));
    assert_int_equal(w.msgs, 6); /* every result still reached the application */
    world_done(&w);
}

/* A later result updates the record; UNSUB naming us and REMOVE_CHANNEL forget it; the others
 * keep their order. */
static void test_update_and_forget(void **state)
{
    (void)state;
    world_t w;
    world_init(&w);
    authed(&w, 7);
    Channeldpb__ChannelSubscriptionOptions o = opts_full();
    Channeldpb__ChannelSubscriptionOptions e = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    self_sub(&w, 1, 0, &e);
    self_sub(&w, 2, 0, &e);
    self_sub(&w, 3, 0, &e);
    self_sub(&w, 4, 0, &e);
    srv_sub_result(&w, 2, 0, 7, &o); /* options changed */
    assert_opts_equal(chanq_client_sub_find(w.c, 2), &o);
    srv_unsub_result(&w, 3, 99); /* another connection's */
    assert_int_equal(chanq_client_sub_count(w.c), 4);
    srv_unsub_result(&w, 3, 7);
    Channeldpb__RemoveChannelMessage rm = CHANNELDPB__REMOVE_CHANNEL_MESSAGE__INIT;
    rm.channelid = 1;
    assert_int_equal(chanq_client_send(w.srv, 1, 0, 0, MT_REMOVE, &rm.base), 0);
    deliver(&w);
    assert_int_equal(chanq_client_sub_count(w.c), 2);
    assert_int_equal(chanq_client_sub_at(w.c, 0)->channel_id, 2);
    assert_int_equal(chanq_client_sub_at(w.c, 1)->channel_id, 4);
    world_done(&w);
}

typedef struct resub_arg {
    uint32_t conn_id;
    const Channeldpb__ChannelSubscriptionOptions *o;
} resub_arg_t;

static void expect_auth(chanq_client_t *fresh, void *arg)
{
    assert_int_equal(chanq_client_auth(fresh, *(uint32_t *)arg, "pit-1", "lt-1"), 0);
}

static void expect_resub(chanq_client_t *fresh, void *arg)
{
    resub_arg_t *a = arg;
    Channeldpb__ChannelSubscriptionOptions e = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    assert_int_equal(chanq_client_sub_to_channel(fresh, 0, 5, a->conn_id, a->o), 0);
    assert_int_equal(chanq_client_sub_to_channel(fresh, 0, 8, a->conn_id, &e), 0);
}

static int g_drops;
static void drop_count(void *ud)
{
    (void)ud;
    g_drops++;
}

static void never(void *ud, const chanq_msg_t *m)
{
    (void)ud, (void)m;
    fail_msg("a cancelled stub fired");
}

/* reset starts a new connection: unsent bytes, the conn id, stubs (dropped) and the asked
 * channels go; the records and credentials stay, so AUTH and the SUBs are queued again with
 * the same bytes. */
static void test_reset_reauth_resubscribe(void **state)
{
    (void)state;
    world_t w;
    world_init(&w);
    uint32_t stub = 3;
    assert_int_equal(chanq_client_reauth(w.c, stub), -ENOENT);
    authed(&w, 7);
    Channeldpb__ChannelSubscriptionOptions o = opts_full(),
                                           e = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    self_sub(&w, 5, 2, &o);
    self_sub(&w, 8, 0, &e);
    assert_int_equal(chanq_client_sub_to_channel(w.c, 0, 11, 0, NULL), 0); /* no result yet */
    uint32_t s1, s2;
    assert_int_equal(chanq_client_stub_alloc(w.c, never, NULL, &s1), 0);
    assert_int_equal(chanq_client_stub_alloc_owned(w.c, never, NULL, drop_count, &s2), 0);
    assert_int_equal(chanq_client_user_msg(w.c, 5, 0, 100, "x", 1), 0);
    g_drops = 0;
    assert_int_equal(chanq_client_reset(w.c), 0);
    assert_int_equal(g_drops, 1);
    assert_int_equal(chanq_client_stub_count(w.c), 0);
    assert_int_equal(chanq_client_out_pending(w.c), 0);
    assert_int_equal(chanq_client_conn_id(w.c), 0);
    assert_int_equal(chanq_client_sub_count(w.c), 2);
    assert_int_equal(chanq_client_reauth(w.c, stub), 0);
    assert_out_is(w.c, expect_auth, &stub);
    srv_auth_result(&w, stub, 0, 0x10000009u);
    size_t n = 9;
    assert_int_equal(chanq_client_resubscribe(w.c, &n), 0);
    assert_int_equal(n, 2);
    resub_arg_t a = {0x10000009u, &o};
    assert_out_is(w.c, expect_resub, &a);
    /* 11's request died with the old connection: a late result for it is not ours */
    srv_sub_result(&w, 11, 0, 0x10000009u, &e);
    assert_null(chanq_client_sub_find(w.c, 11));
    world_done(&w);
}

/* ---- the engine: addresses --------------------------------------------------------------- */

static void test_addr_list(void **state)
{
    (void)state;
    chanq_move_t *m = NULL;
    assert_int_equal(chanq_move_new("127.0.0.1:1,node-2.example:65535,[::1]:80", NULL, &m), 0);
    assert_int_equal(chanq_move_addr_count(m), 3);
    assert_string_equal(chanq_move_host(m, 0), "127.0.0.1");
    assert_int_equal(chanq_move_port(m, 0), 1);
    assert_string_equal(chanq_move_host(m, 1), "node-2.example");
    assert_int_equal(chanq_move_port(m, 1), 65535);
    assert_string_equal(chanq_move_host(m, 2), "::1");
    assert_string_equal(chanq_move_addr(m, 2), "[::1]:80");
    assert_null(chanq_move_addr(m, 3));
    assert_int_equal(chanq_move_state(m), CHANQ_MOVE_IDLE);
    chanq_move_free(m);
    static const char *const bad[] = {"",        "h",    "h:",   ":1",       "h:0",
                                      "h:65536", "h:1,", ",h:1", "h:1,,h:2", "::1:80",
                                      "[::1:80", "h:1x", "[]:80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        m = NULL;
        assert_int_equal(chanq_move_new(bad[i], NULL, &m), -EINVAL);
        assert_null(m);
    }
    char many[CHANQ_MOVE_MAX_ADDRS * 8 + 16] = "";
    for (int i = 0; i <= CHANQ_MOVE_MAX_ADDRS; i++)
        strcat(many, i ? ",h:1" : "h:1");
    assert_int_equal(chanq_move_new(many, NULL, &m), -EINVAL);
    many[strlen(many) - 4] = 0;
    assert_int_equal(chanq_move_new(many, NULL, &m), 0);
    assert_int_equal(chanq_move_addr_count(m), CHANQ_MOVE_MAX_ADDRS);
    chanq_move_free(m);
}

/* ---- the engine: the policy -------------------------------------------------------------- */

static chanq_move_t *engine(const char *addrs, uint32_t max_tries, chanq_moved_fn fn, void *ud)
{
    chanq_move_opts_t o;
    chanq_move_opts_init(&o);
    o.backoff_min_ms = 100;
    o.backoff_max_ms = 1000;
    o.max_tries = max_tries;
    o.connect_timeout_ms = 300;
    o.auth_timeout_ms = 700;
    o.on_moved = fn;
    o.ud = ud;
    chanq_move_t *m = NULL;
    assert_int_equal(chanq_move_new(addrs, &o, &m), 0);
    return m;
}

static void assert_wait(chanq_move_t *m, size_t target, int64_t due)
{
    assert_int_equal(chanq_move_state(m), CHANQ_MOVE_WAIT);
    assert_int_equal(chanq_move_target(m), target);
    assert_int_equal(chanq_move_due(m), due);
}

/* The start tries the list in order; failed tries back off 100, 200, 400, 800, then 1000 (the
 * cap); after max_tries the engine gives up with the last error. */
static void test_start_round_robin_backoff(void **state)
{
    (void)state;
    chanq_move_t *m = engine("a:1,b:2,c:3", 8, NULL, NULL);
    chanq_move_start(m, 1000);
    assert_wait(m, 0, 1000);
    static const int64_t waits[] = {100, 200, 400, 800, 1000, 1000, 1000};
    int64_t now = 1000;
    for (int k = 0; k < 7; k++) {
        chanq_move_connecting(m, now);
        assert_int_equal(chanq_move_state(m), CHANQ_MOVE_CONNECTING);
        assert_int_equal(chanq_move_deadline(m), now + 300);
        now += 5;
        chanq_move_failed(m, -ECONNREFUSED, now);
        assert_wait(m, (size_t)(k + 1) % 3, now + waits[k]);
        now += waits[k];
    }
    chanq_move_connecting(m, now);
    assert_int_equal(chanq_move_tick(m, now + 299), 0);
    assert_int_equal(chanq_move_tick(m, now + 300), 1); /* the 8th try timed out */
    assert_int_equal(chanq_move_state(m), CHANQ_MOVE_FAILED);
    assert_int_equal(chanq_move_error(m), CQ_ETIMEOUT);
    assert_int_equal(chanq_move_moves(m), 0);
    chanq_move_free(m);
}

typedef struct seen {
    int n;
    chanq_moved_t ev;
    char from[32], to[32];
} seen_t;

static void on_moved(void *ud, const chanq_moved_t *ev)
{
    seen_t *s = ud;
    s->n++;
    s->ev = *ev;
    snprintf(s->from, sizeof(s->from), "%s", ev->from_addr);
    snprintf(s->to, sizeof(s->to), "%s", ev->to_addr);
    s->ev.from_addr = s->ev.to_addr = NULL;
}

/* An authenticated client subscribed to 5 by itself (options o) and to 6 by a server, up on
 * address 1 of "a:1,b:2,c:3". */
static void up_on_b(world_t *w, chanq_move_t *m, const Channeldpb__ChannelSubscriptionOptions *o)
{
    world_init(w);
    chanq_move_start(m, 0);
    chanq_move_connecting(m, 0);
    chanq_move_failed(m, -ECONNREFUSED, 0);
    chanq_move_connecting(m, 100);
    chanq_move_connected(m, w->c, 100);
    assert_int_equal(chanq_move_state(m), CHANQ_MOVE_UP);
    assert_int_equal(chanq_move_target(m), 1);
    assert_int_equal(chanq_client_out_pending(w->c), 0); /* the first connection redoes nothing */
    authed(w, 7);
    self_sub(w, 5, 2, o);
    srv_sub_result(w, 6, 0, 7, o);
}

/* The connection on b is lost: the move goes to c at once, resets the client, sends AUTH with the
 * same credentials, and on its result SUB to 5 (not 6: a server's) with the same options; then
 * the moved event. */
static void test_move_redoes_auth_and_own_subs(void **state)
{
    (void)state;
    seen_t seen = {0};
    chanq_move_t *m = engine("a:1,b:2,c:3", 0, on_moved, &seen);
    world_t w;
    Channeldpb__ChannelSubscriptionOptions o = opts_full();
    up_on_b(&w, m, &o);
    assert_int_equal(chanq_client_user_msg(w.c, 5, 0, 100, "lost", 4), 0); /* never sent */
    chanq_move_lost(m, w.c, CQ_ECLOSED, 5000);
    assert_wait(m, 2, 5000);
    chanq_move_connecting(m, 5000);
    chanq_move_connected(m, w.c, 5010);
    assert_int_equal(chanq_move_state(m), CHANQ_MOVE_AUTH);
    assert_int_equal(chanq_move_deadline(m), 5010 + 700);
    uint32_t stub = 1; /* the reset client's first stub */
    assert_out_is(w.c, expect_auth, &stub);
    assert_int_equal(seen.n, 0);
    w.msgs = 0;
    srv_auth_result(&w, stub, 0, 0x18000003u);
    assert_int_equal(w.msgs, 0); /* the engine's stub took the AuthResult */
    assert_int_equal(chanq_move_state(m), CHANQ_MOVE_UP);
    assert_int_equal(chanq_move_moves(m), 1);
    assert_int_equal(seen.n, 1);
    assert_int_equal(seen.ev.from, 1);
    assert_int_equal(seen.ev.to, 2);
    assert_string_equal(seen.from, "b:2");
    assert_string_equal(seen.to, "c:3");
    assert_int_equal(seen.ev.old_conn_id, 7);
    assert_int_equal(seen.ev.conn_id, 0x18000003u);
    assert_int_equal(seen.ev.resubscribed, 1);
    assert_int_equal(seen.ev.tries, 1);
    assert_int_equal(seen.ev.reason, CQ_ECLOSED);
    size_t n;
    uint8_t *out = take_out(w.c, &n);
    chanq_client_t *check;
    chanq_opts_t co;
    chanq_opts_init(&co);
    assert_int_equal(chanq_client_new(&co, &check), 0);
    assert_int_equal(chanq_client_sub_to_channel(check, 0, 5, 0x18000003u, &o), 0);
    size_t n2;
    uint8_t *want = take_out(check, &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(out, want, n);
    free(out);
    free(want);
    chanq_client_free(check);
    /* its result records 5 again under the new id */
    srv_sub_result(&w, 5, 0, 0x18000003u, &o);
    assert_int_equal(chanq_client_sub_count(w.c), 1);
    assert_opts_equal(chanq_client_sub_at(w.c, 0), &o);
    chanq_move_free(m);
    world_done(&w);
}

/* Tries that fail inside a move: c refuses, a's AUTH times out (its stub goes), b's connection
 * is lost during AUTH; b again, refused AUTH: the move gives up with CQ_EAUTH. */
static void test_move_failures(void **state)
{
    (void)state;
    seen_t seen = {0};
    chanq_move_t *m = engine("a:1,b:2,c:3", 0, on_moved, &seen);
    world_t w;
    Channeldpb__ChannelSubscriptionOptions o = opts_full();
    up_on_b(&w, m, &o);
    chanq_move_lost(m, w.c, -ECONNRESET, 1000);
    assert_wait(m, 2, 1000);
    chanq_move_connecting(m, 1000);
    chanq_move_failed(m, -ECONNREFUSED, 1001);
    assert_wait(m, 0, 1101);
    chanq_move_connecting(m, 1101);
    chanq_move_connected(m, w.c, 1102);
    assert_int_equal(chanq_client_stub_count(w.c), 1);
    assert_int_equal(chanq_move_tick(m, 1801), 0);
    assert_int_equal(chanq_move_tick(m, 1802), 1);
    assert_int_equal(chanq_client_stub_count(w.c), 0);
    assert_wait(m, 1, 1802 + 200);
    chanq_move_connecting(m, 2002);
    chanq_move_connected(m, w.c, 2003);
    chanq_move_lost(m, w.c, CQ_ECLOSED, 2004);
    assert_int_equal(chanq_client_stub_count(w.c), 0);
    assert_wait(m, 2, 2004 + 400);
    chanq_move_connecting(m, 2404);
    chanq_move_connected(m, w.c, 2405);
    srv_auth_result(&w, 1, CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__INVALID_LT, 0);
    assert_int_equal(chanq_move_state(m), CHANQ_MOVE_FAILED);
    assert_int_equal(chanq_move_error(m), CQ_EAUTH);
    assert_int_equal(seen.n, 0);
    chanq_move_free(m);
    world_done(&w);
}

/* A connection that never authenticated is only made again (moved with conn id 0), on the same
 * address when the list has one; the fourth try is the fourth: tries counts them. */
static void test_move_unauthenticated_one_address(void **state)
{
    (void)state;
    seen_t seen = {0};
    chanq_move_t *m = engine("only:9", 0, on_moved, &seen);
    world_t w;
    world_init(&w);
    chanq_move_start(m, 0);
    chanq_move_connecting(m, 0);
    chanq_move_connected(m, w.c, 0);
    chanq_move_lost(m, w.c, CQ_ECLOSED, 10);
    assert_wait(m, 0, 10);
    for (int i = 0; i < 3; i++) {
        chanq_move_connecting(m, chanq_move_due(m));
        chanq_move_failed(m, -ECONNREFUSED, chanq_move_due(m));
        assert_int_equal(chanq_move_target(m), 0);
    }
    chanq_move_connecting(m, chanq_move_due(m));
    assert_int_equal(chanq_client_user_msg(w.c, 5, 0, 100, "old", 3), 0);
    chanq_move_connected(m, w.c, chanq_move_due(m));
    assert_int_equal(chanq_move_state(m), CHANQ_MOVE_UP);
    assert_int_equal(chanq_client_out_pending(w.c), 0); /* reset: nothing to redo */
    assert_int_equal(seen.n, 1);
    assert_int_equal(seen.ev.old_conn_id, 0);
    assert_int_equal(seen.ev.conn_id, 0);
    assert_int_equal(seen.ev.tries, 4);
    assert_string_equal(seen.from, "only:9");
    assert_string_equal(seen.to, "only:9");
    chanq_move_free(m);
    world_done(&w);
}

/* An engine freed while waiting for the AuthResult takes its stub with it. */
static void test_free_during_auth(void **state)
{
    (void)state;
    chanq_move_t *m = engine("a:1,b:2,c:3", 0, NULL, NULL);
    world_t w;
    Channeldpb__ChannelSubscriptionOptions o = opts_full();
    up_on_b(&w, m, &o);
    chanq_move_lost(m, w.c, CQ_ECLOSED, 0);
    chanq_move_connecting(m, 0);
    chanq_move_connected(m, w.c, 0);
    assert_int_equal(chanq_client_stub_count(w.c), 1);
    chanq_move_free(m);
    assert_int_equal(chanq_client_stub_count(w.c), 0);
    world_done(&w);
}

/* ---- out of memory ------------------------------------------------------------------------ */

/* Feeds c what srv queued; false when anything failed. */
static bool pass_on(chanq_client_t *srv, chanq_client_t *c)
{
    const uint8_t *p;
    size_t n;
    if (chanq_client_out(srv, &p, &n) < 0 || chanq_client_feed(c, p, n) < 0)
        return false;
    chanq_client_out_consume(srv, n);
    return true;
}

static bool srv_reply(chanq_client_t *srv, chanq_client_t *c, uint32_t ch, uint32_t type,
                      uint32_t stub, const ProtobufCMessage *msg)
{
    return chanq_client_send(srv, ch, 0, stub, type, msg) == 0 && pass_on(srv, c);
}

/* A whole move with every allocation checked: connect, AUTH, SUB itself, lose, move, AUTH and SUB
 * again. True when it all happened; false when something reported a failure or left out what an
 * allocation failure cost (a result not recorded). Frees everything. */
static bool move_story(void)
{
    bool ok = false;
    chanq_client_t *c = NULL, *srv = NULL;
    chanq_move_t *m = NULL;
    chanq_opts_t o;
    chanq_opts_init(&o);
    if (chanq_client_new(&o, &c) < 0 || chanq_client_new(&o, &srv) < 0 ||
        chanq_move_new("a:1,[::1]:2", NULL, &m) < 0)
        goto done;
    chanq_move_start(m, 0);
    chanq_move_connecting(m, 0);
    chanq_move_connected(m, c, 0);
    Channeldpb__AuthResultMessage ar = CHANNELDPB__AUTH_RESULT_MESSAGE__INIT;
    ar.connid = 7;
    if (chanq_client_auth(c, 1, "pit", "lt") < 0 || !srv_reply(srv, c, 0, MT_AUTH, 1, &ar.base) ||
        chanq_client_conn_id(c) != 7)
        goto done;
    Channeldpb__ChannelSubscriptionOptions so = opts_full();
    Channeldpb__SubscribedToChannelResultMessage sr =
        CHANNELDPB__SUBSCRIBED_TO_CHANNEL_RESULT_MESSAGE__INIT;
    sr.connid = 7;
    sr.suboptions = &so;
    if (chanq_client_sub_to_channel(c, 2, 5, 0, NULL) < 0 ||
        !srv_reply(srv, c, 5, MT_SUB, 2, &sr.base) || !chanq_client_sub_find(c, 5))
        goto done;
    chanq_move_lost(m, c, CQ_ECLOSED, 10);
    chanq_move_connecting(m, 10);
    chanq_move_connected(m, c, 10);
    ar.connid = 9;
    if (chanq_move_state(m) != CHANQ_MOVE_AUTH || !srv_reply(srv, c, 0, MT_AUTH, 1, &ar.base))
        goto done;
    ok = chanq_move_state(m) == CHANQ_MOVE_UP && chanq_client_out_pending(c) > 0;
done:
    chanq_move_free(m);
    chanq_client_free(c);
    chanq_client_free(srv);
    return ok;
}

/* Allocation N fails, for every N: the move reports it (or fails its try), and nothing leaks. */
static void test_out_of_memory(void **state)
{
    (void)state;
    for (unsigned long fail = 1;; fail++) {
        test_alloc_install(fail, false);
        if (test_alloc_round_end(move_story()))
            break;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records_own_subscriptions),
        cmocka_unit_test(test_update_and_forget),
        cmocka_unit_test(test_reset_reauth_resubscribe),
        cmocka_unit_test(test_addr_list),
        cmocka_unit_test(test_start_round_robin_backoff),
        cmocka_unit_test(test_move_redoes_auth_and_own_subs),
        cmocka_unit_test(test_move_failures),
        cmocka_unit_test(test_move_unauthenticated_one_address),
        cmocka_unit_test(test_free_during_auth),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
