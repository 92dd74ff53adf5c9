/* Unit tests of bridge events (issue 24, src/core/inject.c): records injected by a thread that
 * is no worker, broadcast to a channel's subscribers or routed to the clients authenticated with
 * a PIT. Driven like test_core: 3 workers, fake transports, inboxes pumped by hand; the test's
 * thread plays the outside producer. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bridge.pb-c.h"
#include "channeld.pb-c.h"
#include "cq_core.h"
#include "cq_err.h"
#include "cq_wire.h"
#include "core.h"

#include "core_env.h"

/* ---- wakes: the producer must wake the workers it posted to ------------------------------- */

static int wakes[CQ_MAX_WORKERS];

static void count_wake(void *ud, int w)
{
    (void)ud;
    wakes[w]++;
}

static const cq_core_ops_t counting_ops = {count_wake};

static void up(void)
{
    env_up(3, NULL);
    memset(wakes, 0, sizeof(wakes));
    cq_shared_set_ops(E.sh, &counting_ops, NULL);
}

/* ---- helpers ---------------------------------------------------------------------------- */

/* AUTH with pit; asserts its one AuthResult, SUCCESSFUL, and consumes the output. */
static void auth_pit(fconn_t *f, const char *pit)
{
    Channeldpb__AuthResultMessage *ar = env_auth_pit(f, pit);
    assert_int_equal(ar->result, CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__SUCCESSFUL);
    channeldpb__auth_result_message__free_unpacked(ar, NULL);
    take(f, 0, NULL, NULL);
}

static fconn_t *player(int type, const char *pit)
{
    fconn_t *f = connect_as(type);
    auth_pit(f, pit);
    return f;
}

/* srv creates a SUBWORLD channel (it is subscribed as its owner); returns its id. */
static uint32_t create_chan(fconn_t *srv)
{
    Channeldpb__CreateChannelMessage cc = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    cc.channeltype = CHANNELDPB__CHANNEL_TYPE__SUBWORLD;
    send_msg(srv, 0, 0, 1, 3, &cc.base);
    cq_mp_t mp;
    uint8_t body[256];
    assert_int_equal(scan(srv, 3, &mp, body), 1);
    Channeldpb__CreateChannelResultMessage *res =
        channeldpb__create_channel_result_message__unpack(NULL, mp.body_len, body);
    assert_non_null(res);
    uint32_t id = res->channelid;
    channeldpb__create_channel_result_message__free_unpacked(res, NULL);
    take(srv, 0, NULL, NULL);
    assert_true(id > 0);
    return id;
}

/* srv (the owner) subscribes cl to ch. */
static void subscribe(fconn_t *srv, fconn_t *cl, uint32_t ch)
{
    Channeldpb__SubscribedToChannelMessage sub = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
    sub.connid = cq_conn_id(cl->conn);
    send_msg(srv, ch, 0, 0, 6, &sub.base);
    assert_int_equal(take(cl, 6, NULL, NULL), 1);
    take(srv, 0, NULL, NULL);
}

/* A protobuf message's bytes, as the bridge would hand them: a field 1 string. */
static cq_buf_t *event_body(const char *text)
{
    size_t n = strlen(text);
    uint8_t b[128] = {0x0a, (uint8_t)n};
    memcpy(b + 2, text, n);
    cq_buf_t *buf = cq_buf_from(b, n + 2);
    assert_non_null(buf);
    return buf;
}

/* f received exactly the records of types want[0..n), in order, each on channel ch with
 * broadcast 0 and stub 0, the one of type want[i] with body bodies[i]; consumes the output. */
static void got_exactly(fconn_t *f, uint32_t ch, const uint32_t *want, cq_buf_t *const *bodies,
                        int n)
{
    for (int i = 0; i < n; i++) {
        cq_mp_t mp;
        uint8_t body[256];
        assert_int_equal(scan(f, want[i], &mp, body), 1);
        assert_int_equal(mp.channel_id, ch);
        assert_int_equal(mp.broadcast, 0);
        assert_int_equal(mp.stub_id, 0);
        /* a server's broadcast as a client gets it: ServerForwardMessage{0, the event} */
        Channeldpb__ServerForwardMessage *sf =
            channeldpb__server_forward_message__unpack(NULL, mp.body_len, body);
        assert_non_null(sf);
        assert_int_equal(sf->clientconnid, 0);
        assert_int_equal(sf->payload.len, bodies[i]->len);
        assert_memory_equal(sf->payload.data, bodies[i]->data, bodies[i]->len);
        channeldpb__server_forward_message__free_unpacked(sf, NULL);
    }
    uint32_t types[16];
    assert_int_equal(take_types(f, types, 16), n);
    for (int i = 0; i < n; i++)
        assert_int_equal(types[i], want[i]);
}

static int nothing(fconn_t *f)
{
    return take(f, 0, NULL, NULL) == 0;
}

/* ---- broadcast -------------------------------------------------------------------------- */

/* Every subscriber on every worker, the owner included, gets each event once, in order, with
 * its exact type, channel and body; a client that is not subscribed gets nothing. */
static void test_broadcast_reaches_subscribers_once(void **state)
{
    (void)state;
    up();
    fconn_t *srv = player(CQ_CONN_SERVER, "srv"), *cl[4];
    uint32_t ch = create_chan(srv);
    bool on[3] = {false};
    for (int i = 0; i < 4; i++) {
        cl[i] = player(CQ_CONN_CLIENT, "p");
        subscribe(srv, cl[i], ch);
        on[cl[i]->worker] = true;
    }
    assert_true(on[0] && on[1] && on[2]); /* subscribers on every worker */
    fconn_t *other = player(CQ_CONN_CLIENT, "p");
    cq_buf_t *b[2] = {event_body("version 2.1"), event_body("vip")};
    uint32_t types[2] = {30001, 30002};
    memset(wakes, 0, sizeof(wakes));
    assert_int_equal(cq_shared_inject_broadcast(E.sh, ch, types[0], b[0]), 0);
    assert_int_equal(cq_shared_inject_broadcast(E.sh, ch, types[1], b[1]), 0);
    int home = cq_shared_chan_worker(E.sh, ch);
    for (int w = 0; w < 3; w++) /* the channel's worker is woken, once per event */
        assert_int_equal(wakes[w], w == home ? 2 : 0);
    pump();
    for (int i = 0; i < 4; i++)
        got_exactly(cl[i], ch, types, b, 2);
    got_exactly(srv, ch, types, b, 2); /* ALL: the owner too */
    assert_true(nothing(other));
    assert_int_equal(cq_shared_counter(E.sh, "chanq_bridge_undeliverable_total"), 0);
    cq_buf_unref(b[0]);
    cq_buf_unref(b[1]);
    env_down();
}

/* A channel that does not exist when the event arrives: counted, dropped, nobody gets it. The
 * body is borrowed: the caller may drop it at once. */
static void test_broadcast_unknown_channel_counted(void **state)
{
    (void)state;
    up();
    fconn_t *srv = player(CQ_CONN_SERVER, "srv");
    uint32_t ch = create_chan(srv);
    fconn_t *cl = player(CQ_CONN_CLIENT, "p");
    subscribe(srv, cl, ch);
    cq_buf_t *b = event_body("x");
    assert_int_equal(cq_shared_inject_broadcast(E.sh, ch + 1, 30001, b), 0);
    assert_int_equal(cq_shared_inject_broadcast(E.sh, 0x10000 + 7, 30001, b), 0);
    cq_buf_unref(b);
    pump();
    assert_true(nothing(cl));
    assert_true(nothing(srv));
    assert_int_equal(cq_shared_counter(E.sh, "chanq_bridge_undeliverable_total"), 2);
    char text[16384];
    size_t n = cq_shared_metrics(E.sh, text, sizeof(text));
    assert_true(n < sizeof(text));
    text[n] = 0;
    assert_non_null(strstr(text, "\nchanq_bridge_undeliverable_total 2\n"));
    env_down();
}

/* ---- route ------------------------------------------------------------------------------ */

/* Both of alice's client connections, on two workers, get the event once; a server with her
 * PIT, another player and a connection not authenticated yet get nothing. Once that connection
 * authenticates as alice, the next event reaches it too, and only that one; a repeated AUTH
 * (a client FSM that allows it) does not make a connection get it twice. */
static void test_route_reaches_the_players_clients(void **state)
{
    (void)state;
    client_fsm_json = "{\"States\": [{\"Name\": \"INIT\", \"MsgTypeWhitelist\": \"1\"},"
                      " {\"Name\": \"OPEN\", \"MsgTypeWhitelist\": \"1-65535\"}]}";
    up();
    fconn_t *a1 = player(CQ_CONN_CLIENT, "alice");
    fconn_t *a2 = player(CQ_CONN_CLIENT, "alice");
    fconn_t *srv = player(CQ_CONN_SERVER, "alice");
    fconn_t *bob = player(CQ_CONN_CLIENT, "bob");
    fconn_t *late = connect_as(CQ_CONN_CLIENT);
    assert_int_not_equal(a1->worker, a2->worker);
    cq_buf_t *b[2] = {event_body("vip 3"), event_body("vip 4")};
    uint32_t t1 = 30010, t2 = 30011;
    memset(wakes, 0, sizeof(wakes));
    assert_int_equal(cq_shared_inject_route(E.sh, "alice", t1, b[0]), 3);
    for (int w = 0; w < 3; w++) /* every worker, once */
        assert_int_equal(wakes[w], 1);
    pump();
    got_exactly(a1, 0, &t1, &b[0], 1);
    got_exactly(a2, 0, &t1, &b[0], 1);
    assert_true(nothing(srv));
    assert_true(nothing(bob));
    assert_true(nothing(late));
    auth_pit(late, "alice");
    auth_pit(a1, "alice"); /* again */
    assert_int_equal(cq_shared_inject_route(E.sh, "alice", t2, b[1]), 3);
    pump();
    got_exactly(a1, 0, &t2, &b[1], 1);
    got_exactly(a2, 0, &t2, &b[1], 1);
    got_exactly(late, 0, &t2, &b[1], 1);
    assert_true(nothing(srv));
    assert_true(nothing(bob));
    cq_buf_unref(b[0]);
    cq_buf_unref(b[1]);
    env_down();
}

/* A player with more connections on one worker than the handler keeps on its stack: every one
 * gets each event once, in order. */
static void test_route_many_connections(void **state)
{
    (void)state;
    up();
    fconn_t *a[27];
    for (int i = 0; i < 27; i++)
        a[i] = player(CQ_CONN_CLIENT, "alice");
    cq_buf_t *b[2] = {event_body("one"), event_body("two")};
    uint32_t types[2] = {30030, 30031};
    assert_int_equal(cq_shared_inject_route(E.sh, "alice", types[0], b[0]), 3);
    assert_int_equal(cq_shared_inject_route(E.sh, "alice", types[1], b[1]), 3);
    pump();
    for (int i = 0; i < 27; i++)
        got_exactly(a[i], 0, types, b, 2);
    cq_buf_unref(b[0]);
    cq_buf_unref(b[1]);
    env_down();
}

/* The connections of pit in worker w's index. */
static uint32_t indexed(int w, const char *pit)
{
    const cq_pitconns_t *e = cq_smap_get(&E.cores[w]->pits, pit);
    return e ? e->n : 0;
}

/* A connection leaves the index at its close, before its release, and the entry goes with the
 * last one: an event injected after the close (released or not yet) reaches only the others,
 * and after the last close nobody (ASan: no connection is touched once released). */
static void test_route_after_close(void **state)
{
    (void)state;
    up();
    fconn_t *a1 = player(CQ_CONN_CLIENT, "alice");
    fconn_t *a2 = player(CQ_CONN_CLIENT, "alice");
    fconn_t *a3 = player(CQ_CONN_CLIENT, "alice");
    assert_true(a1->worker != a2->worker && a2->worker != a3->worker && a1->worker != a3->worker);
    for (int w = 0; w < 3; w++)
        assert_int_equal(indexed(w, "alice"), 1);
    cq_buf_t *b = event_body("e");
    uint32_t t = 30020;
    cq_core_conn_close(E.cores[a1->worker], a1->conn, 0, "test close");
    assert_int_equal(indexed(a1->worker, "alice"), 0); /* a1 was alone on its worker */
    /* injected while a1 is closing, not released yet */
    assert_int_equal(cq_shared_inject_route(E.sh, "alice", t, b), 3);
    pump(); /* handles it, then releases a1 */
    assert_true(a1->released);
    got_exactly(a2, 0, &t, &b, 1);
    got_exactly(a3, 0, &t, &b, 1);
    /* a2 released without a close (a worker's end): it leaves the index too */
    cq_core_conn_release(E.cores[a2->worker], a2->conn);
    a2->closed = a2->released = 1;
    cq_core_conn_close(E.cores[a3->worker], a3->conn, 0, "test close");
    pump();
    assert_int_equal(cq_shared_inject_route(E.sh, "alice", t, b), 3);
    pump();
    for (int w = 0; w < 3; w++)
        assert_int_equal(cq_smap_count(&E.cores[w]->pits), 0);
    cq_buf_unref(b);
    env_down();
}

/* ---- limits and refusals ---------------------------------------------------------------- */

/* An event's bytes count against the inboxes it waits in, as a worker's post does, and leave
 * them once handled. */
static void test_inbox_counts_events(void **state)
{
    (void)state;
    up();
    static uint8_t big[4000];
    cq_buf_t *b = cq_buf_from(big, sizeof(big));
    assert_int_equal(cq_shared_inject_broadcast(E.sh, 5, 30001, b), 0);
    int home = cq_shared_chan_worker(E.sh, 5);
    for (int w = 0; w < 3; w++) {
        int64_t q = atomic_load(&E.cores[w]->inbox_bytes);
        if (w == home)
            assert_true(q >= (int64_t)sizeof(big) && q < (int64_t)sizeof(big) + 512);
        else
            assert_int_equal(q, 0);
    }
    assert_int_equal(cq_shared_inject_route(E.sh, "nobody", 30002, b), 3);
    for (int w = 0; w < 3; w++)
        assert_true(atomic_load(&E.cores[w]->inbox_bytes) >=
                    (int64_t)sizeof(big) * (w == home ? 2 : 1));
    cq_buf_unref(b);
    pump();
    for (int w = 0; w < 3; w++)
        assert_int_equal(atomic_load(&E.cores[w]->inbox_bytes), 0);
    env_down();
}

static void test_refusals(void **state)
{
    (void)state;
    up();
    cq_buf_t *b = event_body("x");
    assert_int_equal(cq_shared_inject_route(E.sh, NULL, 30001, b), -EINVAL);
    assert_int_equal(cq_shared_inject_route(E.sh, "", 30001, b), -EINVAL);
    static uint8_t huge[CQ_WIRE_MAX_RECORD];
    cq_buf_t *h = cq_buf_from(huge, sizeof(huge));
    assert_int_equal(cq_shared_inject_broadcast(E.sh, 0, 30001, h), CQ_ETOOBIG);
    assert_int_equal(cq_shared_inject_route(E.sh, "alice", 30001, h), CQ_ETOOBIG);
    cq_buf_unref(h);
    /* an empty body: a ServerForwardMessage with clientConnId 0 and no payload */
    fconn_t *a = player(CQ_CONN_CLIENT, "alice");
    assert_int_equal(cq_shared_inject_route(E.sh, "alice", 30003, NULL), 3);
    pump();
    cq_mp_t mp;
    uint8_t body[16];
    assert_int_equal(take(a, 30003, &mp, body), 1);
    assert_int_equal(mp.body_len, 2);
    assert_memory_equal(body, "\x08\x00", 2);
    for (int w = 0; w < 3; w++)
        assert_int_equal(atomic_load(&E.cores[w]->inbox_bytes), 0);
    cq_buf_unref(b);
    env_down();
}

/* ---- resume (resume.c): the request, the chunks, the hold ---------------------------------- */

typedef struct ask {
    int what;
    uint32_t conn_id;
    size_t len;
    uint32_t chan; /* REQUEST: the channel before the body */
} ask_t;
static ask_t asks[16];
static int nasks;

static int record_ask(void *ud, int what, uint32_t conn_id, const void *body, size_t len)
{
    (void)ud;
    (void)body;
    const uint8_t *b = body;
    if (nasks < 16)
        asks[nasks] = (ask_t){what, conn_id, len,
                              what == CQ_RESUME_ASK_REQUEST && len >= 4
                                  ? (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                                        (uint32_t)b[3] << 24
                                  : 0};
    nasks++;
    return 0;
}

/* f's one record is a TopicResumeResultMessage (91) on ch (the request's), refused with error. */
static void got_refusal(fconn_t *f, uint32_t ch, const char *error)
{
    cq_mp_t mp;
    uint8_t body[512];
    assert_int_equal(take(f, 91, &mp, body), 1);
    assert_int_equal(mp.channel_id, ch);
    Chanqpb__TopicResumeResultMessage *r =
        chanqpb__topic_resume_result_message__unpack(NULL, mp.body_len, body);
    assert_non_null(r);
    assert_false(r->recovered);
    assert_string_equal(r->error, error);
    chanqpb__topic_resume_result_message__free_unpacked(r, NULL);
}

static void send_resume(fconn_t *f, uint32_t ch)
{
    Chanqpb__TopicResumeMessage m = CHANQPB__TOPIC_RESUME_MESSAGE__INIT;
    send_msg(f, ch, 0, 0, 90, &m.base);
}

/* The request goes to the hook once (a second one, or one off GLOBAL, is refused with a
 * result); BEGIN queues the result then the chunk's events and holds the live bridge events
 * back from that connection only (a server's broadcast still passes); a chunk with room asks
 * for more; FINAL ends the hold; a close with a resume asked tells the bridge. */
static void test_resume_hold(void **state)
{
    (void)state;
    up();
    nasks = 0;
    fconn_t *srv = player(CQ_CONN_SERVER, "srv"), *cl[3];
    uint32_t ch = create_chan(srv);
    for (int i = 0; i < 3; i++) {
        cl[i] = player(CQ_CONN_CLIENT, "p");
        subscribe(srv, cl[i], ch);
    }
    fconn_t *r = cl[1];
    uint32_t rid = cq_conn_id(r->conn);
    send_resume(r, 0);
    got_refusal(r, 0, "no durable topic is bound to a channel on this server");
    cq_shared_set_resume(E.sh, record_ask, NULL);
    send_resume(r, ch); /* any channel: the bridge knows which have topics */
    assert_true(nothing(r));
    assert_int_equal(nasks, 1);
    assert_int_equal(asks[0].what, CQ_RESUME_ASK_REQUEST);
    assert_int_equal(asks[0].conn_id, rid);
    assert_int_equal(asks[0].len, 4); /* the channel, then the (empty) body */
    assert_int_equal(asks[0].chan, ch);
    send_resume(r, 0);
    got_refusal(r, 0, "a resume is already in progress on this connection");
    assert_int_equal(nasks, 1);

    cq_buf_t *e[4] = {event_body("e1"), event_body("c1"), event_body("e2"), event_body("c2")};
    cq_buf_t *e3 = event_body("e3");
    uint32_t t200[2] = {200, 200};
    /* before BEGIN the live events flow */
    assert_int_equal(cq_shared_inject_broadcast(E.sh, ch, 200, e[0]), 0);
    pump();
    for (int i = 0; i < 3; i++)
        got_exactly(cl[i], ch, t200, e, 1);
    /* BEGIN: the result, then c1; from then on e2 is held back from r only */
    cq_buf_t *res = cq_buf_from("", 2); /* recovered: true */
    assert_int_equal(
        cq_shared_resume_chunk(E.sh, ch, rid, CQ_RESUME_CHUNK_BEGIN, res, &e[1], t200, 1), 0);
    pump();
    cq_mp_t mp;
    uint8_t body[64];
    assert_int_equal(scan(r, 91, &mp, body), 1);
    assert_int_equal(mp.channel_id, ch); /* on the resume's channel */
    assert_int_equal(mp.body_len, 2);
    assert_memory_equal(body, "", 2);
    uint32_t types[4];
    assert_int_equal(take_types(r, types, 4), 2);
    assert_int_equal(types[0], 91);
    assert_int_equal(types[1], 200);
    assert_int_equal(nasks, 3); /* applied, and room: the next chunk is asked for at once */
    assert_int_equal(asks[1].what, CQ_RESUME_ASK_APPLIED);
    assert_int_equal(asks[1].conn_id, rid);
    assert_int_equal(asks[2].what, CQ_RESUME_ASK_MORE);
    assert_int_equal(asks[2].conn_id, rid);
    assert_int_equal(cq_shared_inject_broadcast(E.sh, ch, 200, e[2]), 0);
    pump();
    assert_true(nothing(r));
    got_exactly(cl[0], ch, t200, &e[2], 1);
    got_exactly(cl[2], ch, t200, &e[2], 1);
    take(srv, 0, NULL, NULL);
    /* a server's ALL broadcast is no bridge event: not held */
    Channeldpb__ServerForwardMessage sf = CHANNELDPB__SERVER_FORWARD_MESSAGE__INIT;
    send_msg(srv, ch, 2 /* ALL */, 0, 30000, &sf.base);
    assert_int_equal(take(r, 30000, NULL, NULL), 1);
    /* the hold is the resume's channel's: a bridge event on another channel passes */
    uint32_t ch2 = create_chan(srv);
    subscribe(srv, r, ch2);
    take(srv, 0, NULL, NULL);
    take(r, 0, NULL, NULL);
    assert_int_equal(cq_shared_inject_broadcast(E.sh, ch2, 200, e3), 0);
    pump();
    got_exactly(r, ch2, t200, &e3, 1);
    /* FINAL: c2 (the chunk carries what was held), then the live ones again */
    assert_int_equal(
        cq_shared_resume_chunk(E.sh, ch, rid, CQ_RESUME_CHUNK_FINAL, NULL, &e[3], t200, 1), 0);
    pump();
    assert_int_equal(take_types(r, types, 4), 1);
    assert_int_equal(types[0], 200);
    assert_int_equal(nasks, 4); /* FINAL asks for nothing more */
    assert_int_equal(asks[3].what, CQ_RESUME_ASK_APPLIED);
    assert_int_equal(cq_shared_inject_broadcast(E.sh, ch, 200, e3), 0);
    pump();
    got_exactly(r, ch, t200, &e3, 1);
    /* a new resume, then a close: the bridge hears GONE */
    send_resume(r, 0);
    assert_int_equal(nasks, 5);
    cq_core_conn_close(E.cores[r->worker], r->conn, -ECONNRESET, "test");
    pump();
    assert_int_equal(nasks, 6);
    assert_int_equal(asks[5].what, CQ_RESUME_ASK_GONE);
    assert_int_equal(asks[5].conn_id, rid);
    /* a chunk that finds its connection closed still reports back, once however many runs it
     * was cut into, or the bridge's places for chunks would run out */
    size_t big_n = 40000;
    cq_buf_t *big = cq_buf_new(big_n), *evs[8];
    memset(big->data, 'x', big_n);
    big->len = big_n;
    uint32_t t8[8];
    for (int i = 0; i < 8; i++) {
        evs[i] = big;
        t8[i] = 200;
    }
    assert_int_equal(cq_shared_resume_chunk(E.sh, ch, rid, CQ_RESUME_CHUNK_BEGIN, res, evs, t8, 8),
                     0);
    pump();
    assert_int_equal(nasks, 7);
    assert_int_equal(asks[6].what, CQ_RESUME_ASK_APPLIED);
    assert_int_equal(asks[6].conn_id, rid);
    cq_buf_unref(big);
    for (int i = 0; i < 4; i++)
        cq_buf_unref(e[i]);
    cq_buf_unref(e3);
    cq_buf_unref(res);
    env_down();
}

/* A login's catch-up holds the player's routed events back (its chunks carry them, every
 * shard's); after its FINAL they flow again. */
static void test_route_hold(void **state)
{
    (void)state;
    client_fsm_json = "{\"States\": [{\"Name\": \"INIT\", \"MsgTypeWhitelist\": \"1\"},"
                      " {\"Name\": \"OPEN\", \"MsgTypeWhitelist\": \"1-65535\"}]}";
    up();
    nasks = 0;
    cq_shared_set_resume(E.sh, record_ask, NULL);
    cq_shared_set_route(E.sh, true);
    fconn_t *a = player(CQ_CONN_CLIENT, "alice");
    assert_int_equal(nasks, 1);
    assert_int_equal(asks[0].what, CQ_RESUME_ASK_LOGIN);
    cq_buf_t *b[2] = {event_body("held"), event_body("after")};
    uint32_t t = 30030;
    assert_int_equal(cq_shared_inject_route(E.sh, "alice", t, b[0]), 3);
    pump();
    got_exactly(a, 0, &t, b, 0); /* the held one is the catch-up's */
    assert_int_equal(cq_shared_route_chunk(E.sh, a->conn->id, true, NULL, NULL, 0), 0);
    pump();
    assert_int_equal(cq_shared_inject_route(E.sh, "alice", t, b[1]), 3);
    pump();
    got_exactly(a, 0, &t, &b[1], 1);
    cq_buf_unref(b[0]);
    cq_buf_unref(b[1]);
    env_down();
}

/* A relay node delivers to its own connections: a broadcast is one XM_FANOUT to every worker
 * of the node (each walks its own subscribers), a routed event one message per worker. */
static void test_relay_node_local(void **state)
{
    (void)state;
    cq_core_opts_t o = {.relay_node = 1, .relay_node_bits = 2};
    env_up(3, &o);
    cq_buf_t *b = event_body("x");
    int64_t in[3];
    assert_int_equal(cq_shared_inject_broadcast(E.sh, 0, 30001, b), 0);
    for (int w = 0; w < 3; w++) /* every worker of the node, once each */
        assert_true((in[w] = (int64_t)atomic_load(&E.cores[w]->inbox_bytes)) > 0);
    assert_int_equal(cq_shared_inject_route(E.sh, "alice", 30001, b), 3);
    for (int w = 0; w < 3; w++)
        assert_true((int64_t)atomic_load(&E.cores[w]->inbox_bytes) > in[w]);
    pump(); /* no subscriber and no player here: nothing, and nothing leaks */
    /* a "topic" channel lives on GLOBAL's home: none known yet, none made (the bridge asks
     * again once there is one); this node the home: made here, with this node's id bits */
    nasks = 0;
    cq_shared_set_resume(E.sh, record_ask, NULL);
    assert_int_equal(cq_shared_topic_channel(E.sh, "topic:x"), 0);
    pump();
    assert_int_equal(nasks, 1);
    assert_int_equal(asks[0].what, CQ_RESUME_ASK_TOPIC_CHAN);
    assert_int_equal(asks[0].conn_id, 0);
    cq_shared_relay_global_home(E.sh, 1);
    assert_int_equal(cq_shared_relay_home(E.sh), 1);
    assert_int_equal(cq_shared_topic_channel(E.sh, "topic:x"), 0);
    pump();
    assert_int_equal(nasks, 2);
    assert_int_equal(asks[1].what, CQ_RESUME_ASK_TOPIC_CHAN);
    uint32_t id = asks[1].conn_id;
    assert_int_equal(id >> (16 - 2), 1); /* 16-bit non-spatial ids, the top 2 bits the node's */
    assert_int_equal(cq_shared_topic_channel(E.sh, "topic:x"), 0); /* found, not made again */
    pump();
    assert_int_equal(nasks, 3);
    assert_int_equal(asks[2].conn_id, id);
    cq_buf_unref(b);
    env_down();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_broadcast_reaches_subscribers_once),
        cmocka_unit_test(test_broadcast_unknown_channel_counted),
        cmocka_unit_test(test_route_reaches_the_players_clients),
        cmocka_unit_test(test_route_many_connections),
        cmocka_unit_test(test_route_after_close),
        cmocka_unit_test(test_inbox_counts_events),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_route_hold),
        cmocka_unit_test(test_relay_node_local),
        cmocka_unit_test(test_resume_hold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
