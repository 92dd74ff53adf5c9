/* Unit tests of the core as a protocol engine: fake transport, manual clock, and the workers'
 * inboxes pumped by hand, so cross-worker paths run deterministically in one thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "channeld.pb-c.h"
#include "cq_core.h"
#include "cq_embedded.h"
#include "cq_err.h"
#include "cq_fsm.h"
#include "cq_sbuf.h"
#include "cq_sendq.h"
#include "cq_settings.h"
#include "cq_wire.h"
#include "core.h"
#include "msgtab.h"
#include "world.h"

#include "core_env.h"

/* ---- tests ------------------------------------------------------------------------------ */

static void test_auth_vector_bytes(void **state)
{
    env_up(1, NULL);
    fconn_t *c = connect_as(CQ_CONN_CLIENT);
    static const uint8_t req[] = {0x43, 0x48, 0x00, 0x14, 0x00, 0x0a, 0x12, 0x18, 0x01,
                                  0x20, 0x01, 0x2a, 0x0c, 0x0a, 0x04, 't',  'e',  's',
                                  't',  0x12, 0x04, 't',  'e',  's',  't'};
    static const uint8_t want[] = {0x43, 0x48, 0x00, 0x0a, 0x00, 0x0a, 0x08, 0x18,
                                   0x01, 0x20, 0x01, 0x2a, 0x02, 0x10, 0x01};
    /* Byte by byte: the parser must wait for the whole packet. */
    for (size_t i = 0; i < sizeof(req); i++)
        assert_int_equal(cq_core_conn_input(E.cores[0], c->conn, req + i, 1, E.now), 0);
    pump();
    assert_int_equal(c->out.len, sizeof(want));
    assert_memory_equal(c->out.data, want, sizeof(want));
    env_down();
}

static void test_auth_timeout_manual_clock(void **state)
{
    cq_core_opts_t o = {0};
    o.auth_timeout_ms = 5000;
    env_up(1, &o);
    fconn_t *c = connect_as(CQ_CONN_CLIENT); /* accepted at 1000 */
    fconn_t *ok = connect_as(CQ_CONN_CLIENT);
    env_auth(ok);
    cq_core_tick(E.cores[0], 5999);
    assert_false(c->closed);
    cq_core_tick(E.cores[0], 6000);
    assert_true(c->closed);
    assert_false(ok->closed);
    assert_int_equal(cq_shared_counter(E.sh, "auth_timeout_closed"), 1);
    env_down();
}

static void test_bad_magic_closes_only_that_conn(void **state)
{
    env_up(1, NULL);
    fconn_t *bad = connect_as(CQ_CONN_CLIENT);
    fconn_t *good = connect_as(CQ_CONN_SERVER);
    env_auth(good);
    assert_int_equal(feed(bad, "XH\x00\x01\x00", 5), CQ_EMAGIC);
    assert_true(bad->closed);
    static const uint8_t zero[] = {0x43, 0x48, 0, 0, 0};
    fconn_t *z = connect_as(CQ_CONN_CLIENT);
    assert_int_equal(feed(z, zero, 5), CQ_EZEROLEN);
    static const uint8_t notpkt[] = {0x43, 0x48, 0, 2, 0, 0x0b, 0x01}; /* field 1, wire type 3 */
    fconn_t *np = connect_as(CQ_CONN_CLIENT);
    assert_int_equal(feed(np, notpkt, sizeof(notpkt)), CQ_EDECODE);
    assert_false(good->closed);
    Channeldpb__ListChannelMessage lm = CHANNELDPB__LIST_CHANNEL_MESSAGE__INIT;
    send_msg(good, 0, 0, 4, 5, &lm.base); /* still served */
    assert_int_equal(take(good, 5, NULL, NULL), 1);
    assert_int_equal(cq_shared_counter(E.sh, "connection_closed"), 3);
    env_down();
}

static void test_unknown_channel_and_fsm_drop_keep_conn(void **state)
{
    env_up(2, NULL);
    fconn_t *srv = connect_as(CQ_CONN_SERVER);
    env_auth(srv);
    Channeldpb__SubscribedToChannelMessage sub = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
    sub.connid = 1;
    send_msg(srv, 777, 0, 5, 6, &sub.base); /* unknown channel: dropped */
    assert_int_equal(take(srv, 0, NULL, NULL), 0);
    assert_false(srv->closed);
    fconn_t *cli = connect_as(CQ_CONN_CLIENT);
    env_auth(cli);
    send_msg(cli, 0, 0, 1, 6, &sub.base); /* client FSM (non-authoritative) forbids 6 */
    assert_int_equal(take(cli, 0, NULL, NULL), 0);
    assert_false(cli->closed);
    assert_int_equal(cq_shared_counter(E.sh, "fsm_disallowed"), 1);
    env_down();
}

/* Server possesses GLOBAL, subscribes clients spread over 3 workers, broadcasts. */
static void setup_broadcast(fconn_t **srv, fconn_t **cl, int ncl)
{
    *srv = connect_as(CQ_CONN_SERVER);
    env_auth(*srv);
    Channeldpb__CreateChannelMessage cc = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    cc.channeltype = CHANNELDPB__CHANNEL_TYPE__GLOBAL;
    send_msg(*srv, 0, 0, 1, 3, &cc.base);
    assert_int_equal(take(*srv, 3, NULL, NULL), 1);
    for (int i = 0; i < ncl; i++) {
        cl[i] = connect_as(CQ_CONN_CLIENT);
        env_auth(cl[i]);
        Channeldpb__SubscribedToChannelMessage sub =
            CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
        sub.connid = cq_conn_id(cl[i]->conn);
        send_msg(*srv, 0, 0, 0, 6, &sub.base);
        assert_int_equal(take(cl[i], 6, NULL, NULL), 1);
    }
    take(*srv, 0, NULL, NULL);
}

static void test_broadcast_across_workers(void **state)
{
    env_up(3, NULL);
    fconn_t *srv, *cl[5];
    setup_broadcast(&srv, cl, 5);
    uint8_t sfm[] = {0x12, 0x02, 'h', 'i'};
    cq_mp_t mp = {0, 32, 9, 150, sfm, sizeof(sfm)};
    cq_buf_t *rec = cq_wire_record_raw(&mp);
    uint8_t pkt[128];
    cq_framing_header(pkt, rec->len, 0, CQ_FRAMING_FIXED);
    memcpy(pkt + 5, rec->data, rec->len);
    assert_int_equal(feed(srv, pkt, 5 + rec->len), 0);
    for (int i = 0; i < 5; i++) {
        cq_mp_t got;
        assert_int_equal(take(cl[i], 150, &got, NULL), 1);
        assert_int_equal(got.broadcast, 32);
        assert_int_equal(got.stub_id, 9);
        assert_int_equal(got.body_len, sizeof(sfm));
    }
    assert_int_equal(take(srv, 150, NULL, NULL), 0); /* ALL_BUT_SERVER */
    cq_buf_unref(rec);
    env_down();
}

/* Appends one MessagePack {ch, bc, type, body} to a packet under construction. */
static size_t add_msg(uint8_t *pkt, size_t len, uint32_t ch, uint32_t bc, uint32_t type,
                      const uint8_t *body, size_t blen)
{
    cq_mp_t mp = {ch, bc, 0, type, body, (uint32_t)blen};
    cq_buf_t *rec = cq_wire_record_raw(&mp);
    memcpy(pkt + len, rec->data, rec->len);
    len += rec->len;
    cq_buf_unref(rec);
    return len;
}

/* A burst in one packet, read in one loop iteration: broadcasts on two channels, a message
 * forwarded to one client, and broadcasts that leave out the sender. The worker fans the
 * broadcasts of one channel out as one segment; every recipient must still see exactly its
 * messages in the order they were sent, on every worker. */
static void test_broadcast_burst_keeps_order(void **state)
{
    env_up(2, NULL);
    fconn_t *srv, *cl[4];
    setup_broadcast(&srv, cl, 4);
    Channeldpb__CreateChannelMessage cc = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    cc.channeltype = CHANNELDPB__CHANNEL_TYPE__SUBWORLD;
    uint8_t body[256];
    cq_mp_t mp;
    send_msg(srv, 0, 0, 7, 3, &cc.base);
    assert_int_equal(take(srv, 3, &mp, body), 1);
    Channeldpb__CreateChannelResultMessage *cr =
        channeldpb__create_channel_result_message__unpack(NULL, mp.body_len, body);
    uint32_t sub_ch = cr->channelid;
    channeldpb__create_channel_result_message__free_unpacked(cr, NULL);
    for (int i = 0; i < 4; i += 2) { /* clients 0 and 2 also read the subworld */
        Channeldpb__SubscribedToChannelMessage sub =
            CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
        sub.connid = cq_conn_id(cl[i]->conn);
        send_msg(srv, sub_ch, 0, 0, 6, &sub.base);
        assert_int_equal(take(cl[i], 6, NULL, NULL), 1);
    }
    take(srv, 0, NULL, NULL);
    uint8_t pay[] = {0x12, 0x02, 'h', 'i'};
    uint8_t one[] = {0x08, (uint8_t)cq_conn_id(cl[1]->conn), 0x12, 0x02, 'h', 'i'};
    static uint8_t pkt[4096];
    size_t len = 5;
    len = add_msg(pkt, len, 0, 32, 101, pay, sizeof(pay));
    len = add_msg(pkt, len, 0, 32, 102, pay, sizeof(pay));
    len = add_msg(pkt, len, 0, 1, 103, one, sizeof(one)); /* to client 1 only */
    len = add_msg(pkt, len, 0, 32, 104, pay, sizeof(pay));
    len = add_msg(pkt, len, sub_ch, 32, 105, pay, sizeof(pay));
    len = add_msg(pkt, len, 0, 32, 106, pay, sizeof(pay));
    len = add_msg(pkt, len, sub_ch, 32, 107, pay, sizeof(pay));
    len = add_msg(pkt, len, sub_ch, 32, 108, pay, sizeof(pay));
    len = add_msg(pkt, len, 0, 2 | 32, 109, pay, sizeof(pay)); /* all but sender and servers */
    cq_framing_header(pkt, (uint32_t)(len - 5), 0, CQ_FRAMING_FIXED);
    assert_int_equal(feed(srv, pkt, len), 0);
    static const uint32_t both[] = {101, 102, 104, 105, 106, 107, 108, 109};
    static const uint32_t global[] = {101, 102, 104, 106, 109};
    static const uint32_t single[] = {101, 102, 103, 104, 106, 109};
    uint32_t got[32];
    for (int i = 0; i < 4; i++) {
        int n = take_types(cl[i], got, 32);
        const uint32_t *want = i == 1 ? single : i % 2 == 0 ? both : global;
        int nwant = i == 1 ? 6 : i % 2 == 0 ? 8 : 5;
        assert_int_equal(n, nwant);
        for (int k = 0; k < n; k++)
            assert_int_equal(got[k], want[k]);
    }
    assert_int_equal(take(srv, 0, NULL, NULL), 0);
    /* Subscriber counts per message: 4 + 4 + 4 + 2 + 4 + 2 + 2 + 4 broadcast deliveries. */
    assert_int_equal(cq_shared_counter(E.sh, "chanq_fanouts_total"), 26);
    env_down();
}

/* A subscription and an unsubscription in the middle of one burst (one packet, one
 * iteration): the new subscriber gets only what follows its SUB result, the leaving one
 * everything before its UNSUB result. */
static void test_burst_subscribe_between(void **state)
{
    env_up(1, NULL);
    fconn_t *srv, *cl[3];
    setup_broadcast(&srv, cl, 2);
    cl[2] = connect_as(CQ_CONN_CLIENT);
    env_auth(cl[2]);
    uint8_t pay[] = {0x12, 0x02, 'h', 'i'};
    Channeldpb__SubscribedToChannelMessage sub = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
    sub.connid = cq_conn_id(cl[2]->conn);
    Channeldpb__UnsubscribedFromChannelMessage un =
        CHANNELDPB__UNSUBSCRIBED_FROM_CHANNEL_MESSAGE__INIT;
    un.connid = cq_conn_id(cl[0]->conn);
    static uint8_t pkt[1024];
    uint8_t body[64];
    size_t len = 5;
    len = add_msg(pkt, len, 0, 32, 101, pay, sizeof(pay));
    len = add_msg(pkt, len, 0, 32, 102, pay, sizeof(pay));
    len = add_msg(pkt, len, 0, 0, 6, body,
                  channeldpb__subscribed_to_channel_message__pack(&sub, body));
    len = add_msg(pkt, len, 0, 32, 103, pay, sizeof(pay));
    len = add_msg(pkt, len, 0, 0, 7, body,
                  channeldpb__unsubscribed_from_channel_message__pack(&un, body));
    len = add_msg(pkt, len, 0, 32, 104, pay, sizeof(pay));
    cq_framing_header(pkt, (uint32_t)(len - 5), 0, CQ_FRAMING_FIXED);
    assert_int_equal(feed(srv, pkt, len), 0);
    static const uint32_t want0[] = {101, 102, 103, 7};
    static const uint32_t want1[] = {101, 102, 103, 104};
    static const uint32_t want2[] = {6, 103, 104};
    const uint32_t *want[3] = {want0, want1, want2};
    const int nwant[3] = {4, 4, 3};
    uint32_t got[16];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(take_types(cl[i], got, 16), nwant[i]);
        for (int k = 0; k < nwant[i]; k++)
            assert_int_equal(got[k], want[i][k]);
    }
    env_down();
}

static void test_slow_consumer_cut_others_served(void **state)
{
    cq_core_opts_t o = {0};
    o.sendq_hard_limit = 4096;
    env_up(2, &o);
    fconn_t *srv, *cl[4];
    setup_broadcast(&srv, cl, 4);
    cl[1]->stalled = 1;                     /* never drains */
    uint8_t body[300] = {0x12, 0xa8, 0x02}; /* SFM payload of 296 bytes */
    cq_mp_t mp = {0, 32, 0, 100, body, sizeof(body) - 1};
    int got[4] = {0};
    for (int m = 0; m < 200; m++) {
        cq_buf_t *rec = cq_wire_record_raw(&mp);
        uint8_t pkt[512];
        cq_framing_header(pkt, rec->len, 0, CQ_FRAMING_FIXED);
        memcpy(pkt + 5, rec->data, rec->len);
        assert_int_equal(feed(srv, pkt, 5 + rec->len), 0);
        cq_buf_unref(rec);
        for (int i = 0; i < 4; i++)
            if (!cl[i]->stalled)
                got[i] += take(cl[i], 100, NULL, NULL);
    }
    assert_true(cl[1]->closed);
    assert_int_equal(got[0], 200);
    assert_int_equal(got[2], 200);
    assert_int_equal(got[3], 200);
    assert_int_equal(cq_shared_counter(E.sh, "slow_consumer_closed"), 1);
    env_down();
}

static void test_channel_id_reuse_and_list(void **state)
{
    env_up(2, NULL);
    fconn_t *srv = connect_as(CQ_CONN_SERVER);
    env_auth(srv);
    Channeldpb__CreateChannelMessage cc = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    cc.channeltype = CHANNELDPB__CHANNEL_TYPE__SUBWORLD;
    cc.metadata = "room";
    uint8_t body[256];
    cq_mp_t mp;
    uint32_t ids[3];
    for (int i = 0; i < 2; i++) {
        send_msg(srv, 0, 0, 7, 3, &cc.base);
        assert_int_equal(take(srv, 3, &mp, body), 1);
        Channeldpb__CreateChannelResultMessage *r =
            channeldpb__create_channel_result_message__unpack(NULL, mp.body_len, body);
        ids[i] = r->channelid;
        channeldpb__create_channel_result_message__free_unpacked(r, NULL);
    }
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    Channeldpb__RemoveChannelMessage rm = CHANNELDPB__REMOVE_CHANNEL_MESSAGE__INIT;
    rm.channelid = 1;
    send_msg(srv, 0, 0, 0, 4, &rm.base);
    assert_int_equal(take(srv, 4, NULL, NULL), 1); /* the owner was subscribed */
    send_msg(srv, 0, 0, 7, 3, &cc.base);
    assert_int_equal(take(srv, 3, &mp, body), 1);
    Channeldpb__CreateChannelResultMessage *r =
        channeldpb__create_channel_result_message__unpack(NULL, mp.body_len, body);
    ids[2] = r->channelid;
    channeldpb__create_channel_result_message__free_unpacked(r, NULL);
    assert_int_equal(ids[2], 1); /* the freed id is reused first */
    Channeldpb__ListChannelMessage lm = CHANNELDPB__LIST_CHANNEL_MESSAGE__INIT;
    send_msg(srv, 0, 0, 3, 5, &lm.base);
    static uint8_t lbody[4096];
    assert_int_equal(take(srv, 5, &mp, lbody), 1);
    Channeldpb__ListChannelResultMessage *lr =
        channeldpb__list_channel_result_message__unpack(NULL, mp.body_len, lbody);
    assert_int_equal(lr->n_channels, 3); /* GLOBAL + 2 */
    channeldpb__list_channel_result_message__free_unpacked(lr, NULL);
    env_down();
}

/* --server-bypass-auth auto: the bypass holds for server connections from loopback only; true
 * holds for every address. The token file would refuse the login ("srv" wants "right"). */
static int bypass_result(bool loopback_only, const char *peer)
{
    char path[] = "/tmp/chanq-tokens-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char tokens[] = "{\"srv\": \"right\"}";
    assert_int_equal(write(fd, tokens, strlen(tokens)), (ssize_t)strlen(tokens));
    close(fd);
    cq_core_opts_t o = {.auth_provider = CQ_AUTH_FILE,
                        .auth_token_file = path,
                        .server_bypass_loopback = loopback_only};
    env_up(1, &o);
    fake_peer_addr = peer;
    fconn_t *f = connect_as(CQ_CONN_SERVER);
    Channeldpb__AuthResultMessage *ar;
    ar = env_auth_pit(f, "srv");
    int res = ar->result;
    channeldpb__auth_result_message__free_unpacked(ar, NULL);
    fake_peer_addr = NULL;
    env_down();
    unlink(path);
    return res;
}

static void test_server_bypass_loopback(void **state)
{
    assert_int_equal(bypass_result(true, "192.0.2.1:5000"), 2);     /* INVALID_LT */
    assert_int_equal(bypass_result(true, "[2001:db8::1]:5000"), 2); /* INVALID_LT */
    assert_int_equal(bypass_result(true, "127.0.0.1:5000"), 0);
    assert_int_equal(bypass_result(true, "[::1]:5000"), 0);
    assert_int_equal(bypass_result(false, "192.0.2.1:5000"), 0); /* true: channeld's bypass */
}

static void tick_all(uint64_t now)
{
    E.now = now;
    for (int i = 0; i < E.n; i++)
        cq_core_tick(E.cores[i], now);
    pump();
}

/* Reference 3.7: a dropped server's successor with the same PIT takes over its id, channels
 * and subscriptions; subscribers hear OWNER_LOST then OWNER_RECOVERED. Three workers, so the
 * recovered id lives off its home worker and must be routed. */
static void test_server_recovery(void **state)
{
    cq_core_opts_t o = {0};
    o.server_recoverable = true;
    env_up(3, &o);
    fconn_t *s1 = connect_as(CQ_CONN_SERVER); /* id 1, worker 1 */
    Channeldpb__AuthResultMessage *ar;
    ar = env_auth_pit(s1, "game-1");
    take(s1, 0, NULL, NULL);
    assert_int_equal(ar->connid, 1);
    assert_false(ar->shouldrecover);
    channeldpb__auth_result_message__free_unpacked(ar, NULL);
    fconn_t *cl = connect_as(CQ_CONN_CLIENT); /* id 2, worker 2 */
    env_auth(cl);
    Channeldpb__CreateChannelMessage cc = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    cc.channeltype = CHANNELDPB__CHANNEL_TYPE__SUBWORLD;
    send_msg(s1, 0, 0, 1, 3, &cc.base); /* channel 1, worker 1 */
    take(s1, 0, NULL, NULL);
    Channeldpb__SubscribedToChannelMessage sub = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
    sub.connid = 2;
    send_msg(s1, 1, 0, 0, 6, &sub.base);
    assert_int_equal(take(cl, 6, NULL, NULL), 1);
    take(s1, 0, NULL, NULL);

    cq_core_conn_lost(E.cores[s1->worker], s1->conn, 0, "peer closed");
    pump();
    cq_mp_t mp;
    assert_int_equal(take(cl, 22, &mp, NULL), 1); /* CHANNEL_OWNER_LOST */
    assert_int_equal(mp.channel_id, 1);

    fconn_t *s2 = connect_as(CQ_CONN_SERVER); /* id 3, worker 0 */
    ar = env_auth_pit(s2, "game-1");
    assert_int_equal(ar->connid, 1); /* took over the old id */
    assert_true(ar->shouldrecover);
    channeldpb__auth_result_message__free_unpacked(ar, NULL);
    uint8_t body[512];
    assert_int_equal(take(s2, 20, &mp, body), 1); /* RECOVERY_CHANNEL_DATA */
    Channeldpb__ChannelDataRecoveryMessage *rm =
        channeldpb__channel_data_recovery_message__unpack(NULL, mp.body_len, body);
    assert_int_equal(rm->channelid, 1);
    assert_int_equal(rm->ownerconnid, 1);
    assert_int_equal(rm->channeltype, CHANNELDPB__CHANNEL_TYPE__SUBWORLD);
    assert_true(rm->suboptions->skipfirstfanout);
    channeldpb__channel_data_recovery_message__free_unpacked(rm, NULL);

    tick_all(E.now + 1000);
    assert_int_equal(take(cl, 23, NULL, NULL), 1); /* CHANNEL_OWNER_RECOVERED */
    assert_int_equal(take(s2, 21, &mp, NULL), 1);  /* RECOVERY_END on channel 0 */
    assert_int_equal(mp.channel_id, 0);

    /* The recovered owner is reachable: a client message is forwarded to it. */
    uint8_t hello[] = {'h', 'i'};
    cq_mp_t um = {1, 0, 0, 120, hello, sizeof(hello)};
    cq_buf_t *rec = cq_wire_record_raw(&um);
    uint8_t pkt[64];
    cq_framing_header(pkt, rec->len, 0, CQ_FRAMING_FIXED);
    memcpy(pkt + 5, rec->data, rec->len);
    assert_int_equal(feed(cl, pkt, 5 + rec->len), 0);
    cq_buf_unref(rec);
    assert_int_equal(take(s2, 120, NULL, NULL), 1);
    env_down();
}

static void test_unrecovered_channel_removed_after_timeout(void **state)
{
    cq_core_opts_t o = {0};
    o.server_recoverable = true;
    o.server_recover_timeout_ms = 3000;
    env_up(2, &o);
    fconn_t *s1 = connect_as(CQ_CONN_SERVER);
    Channeldpb__AuthResultMessage *ar;
    ar = env_auth_pit(s1, "game-2");
    channeldpb__auth_result_message__free_unpacked(ar, NULL);
    fconn_t *cl = connect_as(CQ_CONN_CLIENT);
    env_auth(cl);
    Channeldpb__CreateChannelMessage cc = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    cc.channeltype = CHANNELDPB__CHANNEL_TYPE__PRIVATE;
    send_msg(s1, 0, 0, 1, 3, &cc.base);
    Channeldpb__SubscribedToChannelMessage sub = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
    sub.connid = cq_conn_id(cl->conn);
    send_msg(s1, 1, 0, 0, 6, &sub.base);
    take(cl, 0, NULL, NULL);
    cq_core_conn_lost(E.cores[s1->worker], s1->conn, 0, "peer closed");
    pump();
    assert_int_equal(take(cl, 4, NULL, NULL), 0); /* kept while recoverable */
    tick_all(E.now + 2999);
    assert_int_equal(take(cl, 4, NULL, NULL), 0);
    tick_all(E.now + 1);
    assert_int_equal(take(cl, 4, NULL, NULL), 1); /* REMOVE_CHANNEL after the timeout */
    env_down();
}

/* Hot structs have budgets: at 10k connections x N subscriptions, bytes matter. */
static void test_struct_size_budgets(void **state)
{
    assert_true(sizeof(cq_conn_t) <= 224);
    assert_true(sizeof(cq_sub_t) <= 96);
    assert_true(sizeof(cq_sendq_ent_t) <= 16);
    assert_true(sizeof(cq_conn_chan_t) <= 8);
    assert_true(sizeof(cq_buf_t) <= 16);
}

/* A sender whose messages go to a worker that is behind stops being read (TCP pushes back)
 * until that worker's inbox drains: the inbox cannot grow without bound. */
static void test_inbound_flow_control(void **state)
{
    env_up(2, NULL);
    fconn_t *srv = connect_as(CQ_CONN_SERVER); /* id 1: worker 1; GLOBAL lives on worker 0 */
    env_auth(srv);
    assert_int_equal(srv->worker, 1);
    static uint8_t body[60000];
    body[0] = 0x12; /* ServerForwardMessage.payload, length 59996 */
    body[1] = 0xdc;
    body[2] = 0xd4;
    body[3] = 0x03;
    cq_mp_t mp = {0, 2, 0, 100, body, sizeof(body)};
    cq_buf_t *rec = cq_wire_record_raw(&mp);
    static uint8_t pkt[70000];
    cq_framing_header(pkt, rec->len, 0, CQ_FRAMING_FIXED);
    memcpy(pkt + 5, rec->data, rec->len);
    int sent = 0;
    while (!cq_conn_paused(srv->conn) && sent < 1000) {
        /* no pump: worker 0 never drains */
        assert_int_equal(cq_core_conn_input(E.cores[1], srv->conn, pkt, 5 + rec->len, E.now), 0);
        sent++;
    }
    assert_true(cq_conn_paused(srv->conn));
    assert_true(sent * 60000 >= (int)CQ_INBOX_HIGH);
    assert_true(sent * 60000 <= (int)CQ_INBOX_HIGH + 2 * 60000 + 4096);
    assert_false(cq_core_conn_resume(E.cores[1], srv->conn));
    pump(); /* worker 0 catches up */
    assert_true(cq_core_conn_resume(E.cores[1], srv->conn));
    assert_false(cq_conn_paused(srv->conn));
    cq_buf_unref(rec);
    env_down();
}

static int log_lines;
static char last_line[1024];

static void count_sink(void *ud, cq_log_level_t lvl, const char *topic, const char *line)
{
    log_lines++;
    snprintf(last_line, sizeof(last_line), "%s", line);
}

/* A peer cannot flood the log: per-message logs are capped per worker and second, and the
 * number suppressed is reported when the next second starts. */
static void test_drop_logs_rate_limited(void **state)
{
    env_up(1, NULL);
    fconn_t *cli = connect_as(CQ_CONN_CLIENT);
    env_auth(cli);
    log_lines = 0;
    cq_log_set_sink(count_sink, NULL);
    Channeldpb__SubscribedToChannelMessage sub = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
    for (int i = 0; i < 200; i++)
        send_msg(cli, 0, 0, 1, 6, &sub.base); /* FSM-forbidden: dropped, logged */
    assert_int_equal(log_lines, CQ_LOG_BURST);
    assert_int_equal(cq_shared_counter(E.sh, "fsm_disallowed"), 200); /* all counted */
    E.now += 1000;
    send_msg(cli, 0, 0, 1, 6, &sub.base);
    assert_int_equal(log_lines, CQ_LOG_BURST + 2); /* the summary, then the new line */
    cq_log_set_sink(NULL, NULL);
    env_down();
}

/* ---- channel data (no schema loaded: the type is unknown, merged by concatenation) ---- */

/* Returns the value bytes of the only CHANNEL_DATA_UPDATE received (as a string), or "" if
 * none; asserts there is at most one. */
static const char *take_data(fconn_t *f, uint32_t ch)
{
    static char val[256];
    cq_mp_t mp;
    uint8_t body[512];
    int n = take(f, 8, &mp, body);
    assert_true(n <= 1);
    if (!n)
        return "";
    assert_int_equal(mp.channel_id, ch);
    Channeldpb__ChannelDataUpdateMessage *m =
        channeldpb__channel_data_update_message__unpack(NULL, mp.body_len, body);
    assert_non_null(m);
    assert_string_equal(m->data->type_url, ENV_TURL);
    snprintf(val, sizeof(val), "%.*s", (int)m->data->value.len, (char *)m->data->value.data);
    channeldpb__channel_data_update_message__free_unpacked(m, NULL);
    return val;
}

static void advance(uint64_t to)
{
    E.now = to;
    for (int i = 0; i < E.n; i++)
        cq_core_run_due(E.cores[i], to);
    pump();
}

/* The seed's timeline through the real core: updates from the owner are merged and fanned out
 * per subscriber interval; one subscriber on each of two workers; one shares C1's windows. */
static void test_channel_data_fanout(void **state)
{
    env_up(2, NULL);
    fconn_t *srv = connect_as(CQ_CONN_SERVER);
    env_auth(srv);
    env_create_data_channel(srv, "S"); /* channel 1 */
    fconn_t *c1 = connect_as(CQ_CONN_CLIENT), *c2 = connect_as(CQ_CONN_CLIENT);
    fconn_t *c3 = connect_as(CQ_CONN_CLIENT);
    env_auth(c1);
    env_auth(c2);
    env_auth(c3);
    Channeldpb__ChannelSubscriptionOptions o1 = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    o1.has_fanoutintervalms = o1.has_skipfirstfanout = 1;
    o1.fanoutintervalms = 50;
    o1.skipfirstfanout = 1;
    Channeldpb__ChannelSubscriptionOptions o2 = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    o2.has_fanoutintervalms = o2.has_fanoutdelayms = 1;
    o2.fanoutintervalms = 100;
    o2.fanoutdelayms = -50;
    Channeldpb__SubscribedToChannelMessage sub = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
    E.now = 0;
    fconn_t *who[3] = {c1, c2, c3};
    Channeldpb__ChannelSubscriptionOptions *opt[3] = {&o1, &o2, &o1};
    for (int i = 0; i < 3; i++) {
        sub.connid = cq_conn_id(who[i]->conn);
        sub.suboptions = opt[i];
        send_msg(srv, 1, 0, 0, 6, &sub.base);
        take(who[i], 0, NULL, NULL);
    }
    take(srv, 0, NULL, NULL);
    const char *u[] = {"1", "2", "3"};
    uint64_t at[] = {60, 120, 240};
    int k = 0;
    const char *c1_seen[7] = {0}, *c2_seen[4] = {0};
    for (uint64_t t = 10; t <= 300; t += 10) {
        advance(t);
        if (k < 3 && at[k] == t) {
            env_send_update(srv, 1, u[k], 1);
            k++;
        }
        if (t % 50 == 0) {
            c1_seen[t / 50] = strdup(take_data(c1, 1));
            assert_string_equal(take_data(c3, 1), c1_seen[t / 50]); /* same windows */
        }
        if (t % 100 == 50)
            c2_seen[t / 100] = strdup(take_data(c2, 1));
    }
    /* F1 nothing, F2 = U1, F3 = U2, F4 nothing, F5 = U3, F6 nothing */
    const char *want1[] = {"", "", "1", "2", "", "3", ""};
    for (int i = 1; i <= 6; i++)
        assert_string_equal(c1_seen[i], want1[i]);
    /* F7 = the full state (S), F8 = U1+U2 (concatenation merge), F9 = U3 */
    assert_string_equal(c2_seen[0], "S");
    assert_string_equal(c2_seen[1], "12");
    assert_string_equal(c2_seen[2], "3");
    for (int i = 0; i < 7; i++)
        free((void *)c1_seen[i]);
    for (int i = 0; i < 4; i++)
        free((void *)c2_seen[i]);
    env_down();
}

/* Only the owner or a WRITE_ACCESS subscriber may update; a server stands in for the owner. */
static void test_channel_data_write_access(void **state)
{
    client_fsm_json = "{\"States\": [{\"Name\": \"INIT\", \"MsgTypeWhitelist\": \"1\"},"
                      " {\"Name\": \"OPEN\", \"MsgTypeWhitelist\": \"3-8,15-65535\"}]}";
    env_up(1, NULL);
    fconn_t *srv = connect_as(CQ_CONN_SERVER);
    env_auth(srv);
    Channeldpb__CreateChannelMessage cc = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    cc.channeltype = CHANNELDPB__CHANNEL_TYPE__SUBWORLD;
    send_msg(srv, 0, 0, 1, 3, &cc.base);
    take(srv, 0, NULL, NULL);
    fconn_t *ro = connect_as(CQ_CONN_CLIENT), *rw = connect_as(CQ_CONN_CLIENT);
    env_auth(ro);
    env_auth(rw);
    Channeldpb__ChannelSubscriptionOptions w = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    w.has_dataaccess = w.has_skipselfupdatefanout = 1;
    w.dataaccess = 2;
    w.skipselfupdatefanout = 0;
    Channeldpb__SubscribedToChannelMessage sub = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
    sub.connid = cq_conn_id(ro->conn);
    send_msg(srv, 1, 0, 0, 6, &sub.base);
    sub.connid = cq_conn_id(rw->conn);
    sub.suboptions = &w;
    send_msg(srv, 1, 0, 0, 6, &sub.base);
    take(ro, 0, NULL, NULL);
    take(rw, 0, NULL, NULL);
    env_send_update(ro, 1, "x", 1);           /* READ_ACCESS: refused */
    fconn_t *sf = connect_as(CQ_CONN_CLIENT); /* skip-first: never the full state */
    env_auth(sf);
    Channeldpb__ChannelSubscriptionOptions f = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    f.has_skipfirstfanout = 1;
    f.skipfirstfanout = 1;
    sub.connid = cq_conn_id(sf->conn);
    sub.suboptions = &f;
    send_msg(srv, 1, 0, 0, 6, &sub.base);
    take(sf, 0, NULL, NULL);
    env_send_update(rw, 1, "a", 1); /* first update defines the data, and is an update too */
    advance(E.now + 100);
    assert_string_equal(take_data(sf, 1), "a");
    assert_string_equal(take_data(ro, 1), "a"); /* full state */
    assert_string_equal(take_data(rw, 1), "a");
    env_send_update(rw, 1, "b", 1);
    advance(E.now + 100);
    assert_string_equal(take_data(ro, 1), "b");
    assert_string_equal(take_data(rw, 1), "b"); /* skipSelfUpdateFanOut false */
    assert_string_equal(take_data(sf, 1), "b");
    env_down();
}

/* Each access reads its own level; the levels pass exactly channeld's set of connections. */
static void test_acl_levels(void **state)
{
    cq_chan_settings_t st = {0};
    cq_chan_t ch = {.owner = 5, .settings = &st};
    st.acl = (cq_acl_t){CQ_ACL_ANY, CQ_ACL_OWNER_ONLY, CQ_ACL_OWNER_AND_GLOBAL_OWNER};
    /* who: the owner 5, the GLOBAL owner 9, anyone else 7, and "nobody" 0 */
    assert_true(cq__acl_allows(&ch, CQ_ACCESS_SUB, 7, 9));
    assert_true(cq__acl_allows(&ch, CQ_ACCESS_SUB, 0, 9));
    assert_true(cq__acl_allows(&ch, CQ_ACCESS_UNSUB, 5, 9));
    assert_false(cq__acl_allows(&ch, CQ_ACCESS_UNSUB, 9, 9));
    assert_false(cq__acl_allows(&ch, CQ_ACCESS_UNSUB, 7, 9));
    assert_true(cq__acl_allows(&ch, CQ_ACCESS_REMOVE, 5, 9));
    assert_true(cq__acl_allows(&ch, CQ_ACCESS_REMOVE, 9, 9));
    assert_false(cq__acl_allows(&ch, CQ_ACCESS_REMOVE, 7, 9));
    assert_false(cq__acl_allows(&ch, CQ_ACCESS_REMOVE, 0, 0)); /* no GLOBAL owner: 0 is nobody */
    st.acl = (cq_acl_t){CQ_ACL_NONE, CQ_ACL_NONE, CQ_ACL_NONE};
    assert_false(cq__acl_allows(&ch, CQ_ACCESS_SUB, 5, 9));
    assert_false(cq__acl_allows(&ch, CQ_ACCESS_UNSUB, 9, 9));
    ch.owner = 0;
    st.acl.remove = CQ_ACL_OWNER_ONLY;
    assert_false(cq__acl_allows(&ch, CQ_ACCESS_REMOVE, 0, 9)); /* no owner: nobody is it */
}

/* The table is indexed by type, and handles exactly channeld's client-to-server types. */
static void test_msg_table_rows(void **state)
{
    static const uint32_t handled[] = {1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14, 15, 16, 17, 90, 92, 99};
    size_t k = 0;
    for (uint32_t t = 0; t < CQ_USER_SPACE_START; t++) {
        const cq_msg_def_t *d = cq__msg_def(t);
        if (k < sizeof(handled) / sizeof(handled[0]) && t == handled[k]) {
            k++;
            assert_non_null(d);
            assert_ptr_equal(d, &cq__msg_table[t]);
            assert_int_equal(d->type, t);
            assert_non_null(d->name);
            if (t == MT_TOPIC_RESUME)
                assert_null(d->body); /* the bridge decodes it */
            else
                assert_non_null(d->body);
            assert_true(d->where >= CQ_WHERE_SENDER && d->where <= CQ_WHERE_GLOBAL);
        } else {
            assert_null(d);
        }
    }
    assert_int_equal(k, sizeof(handled) / sizeof(handled[0]));
    assert_string_equal(cq__msg_def(6)->name, "SUB_TO_CHANNEL");
    assert_int_equal(cq__msg_def(1)->where, CQ_WHERE_SENDER);
    assert_int_equal(cq__msg_def(1)->flags, CQ_MSGF_CLOSE_OFF_GLOBAL);
    assert_int_equal(cq__msg_def(9)->where, CQ_WHERE_GLOBAL);
    assert_int_equal(cq__msg_def(4)->where, CQ_WHERE_CHANNEL);
    uint32_t users[] = {100, 101, 65535, UINT32_MAX};
    for (size_t i = 0; i < 4; i++) {
        assert_ptr_equal(cq__msg_def(users[i]), &cq__msg_user);
        assert_null(cq__msg_def(users[i])->body);
        assert_int_equal(cq__msg_def(users[i])->flags, CQ_MSGF_SERVER_SFM);
    }
}

/* The per-type exceptions: SUB/UNSUB on an unknown channel are dropped without a log line,
 * other types are logged; channel-0 types elsewhere are ignored; AUTH elsewhere closes. */
static void test_msg_flags_behaviour(void **state)
{
    env_up(2, NULL);
    fconn_t *srv = connect_as(CQ_CONN_SERVER);
    env_auth(srv);
    Channeldpb__CreateChannelMessage cc = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    cc.channeltype = CHANNELDPB__CHANNEL_TYPE__SUBWORLD;
    send_msg(srv, 0, 0, 1, 3, &cc.base); /* channel 1 */
    take(srv, 0, NULL, NULL);
    log_lines = 0;
    cq_log_set_sink(count_sink, NULL);
    Channeldpb__SubscribedToChannelMessage sub = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
    sub.connid = cq_conn_id(srv->conn);
    send_msg(srv, 777, 0, 1, 6, &sub.base);
    Channeldpb__UnsubscribedFromChannelMessage us =
        CHANNELDPB__UNSUBSCRIBED_FROM_CHANNEL_MESSAGE__INIT;
    us.connid = cq_conn_id(srv->conn);
    send_msg(srv, 777, 0, 1, 7, &us.base);
    assert_int_equal(log_lines, 0);
    assert_int_equal(cq_shared_counter(E.sh, "messages_dropped"), 2);
    Channeldpb__RemoveChannelMessage rm = CHANNELDPB__REMOVE_CHANNEL_MESSAGE__INIT;
    rm.channelid = 777;
    send_msg(srv, 777, 0, 1, 4, &rm.base);
    assert_int_equal(log_lines, 1);
    assert_non_null(strstr(last_line, "dropped msgType 4: unknown channel 777"));
    assert_int_equal(cq_shared_counter(E.sh, "messages_dropped"), 3);
    Channeldpb__ListChannelMessage lm = CHANNELDPB__LIST_CHANNEL_MESSAGE__INIT;
    send_msg(srv, 1, 0, 1, 5, &lm.base); /* LIST must go to channel 0 */
    assert_int_equal(log_lines, 2);
    assert_non_null(strstr(last_line, "msgType 5 must target channel 0, not 1; ignored"));
    assert_int_equal(take(srv, 0, NULL, NULL), 0);
    assert_int_equal(cq_shared_counter(E.sh, "messages_dropped"), 3);
    cq_log_set_sink(NULL, NULL);
    Channeldpb__AuthMessage a = CHANNELDPB__AUTH_MESSAGE__INIT;
    cq_buf_t *rec = cq_wire_record_msg(1, 0, 0, 1, &a.base);
    uint8_t pkt[64];
    cq_framing_header(pkt, rec->len, 0, CQ_FRAMING_FIXED);
    memcpy(pkt + 5, rec->data, rec->len);
    assert_int_equal(feed(srv, pkt, 5 + rec->len), CQ_EBADTARGET);
    assert_true(srv->closed);
    cq_buf_unref(rec);
    env_down();
}

/* ---- the causal flush (place.c cq__xmsg_post): node records keep their cause's order ---- */

static size_t relayed_len[8];
static int nrelayed;

static int fake_relay_send(void *ud, uint16_t node, cq_buf_t *rec)
{
    (void)ud;
    assert_int_equal(node, 2);
    if (nrelayed < 8)
        relayed_len[nrelayed] = rec->len;
    nrelayed++;
    return 0;
}

/* A CLOSE for node 2 whose body is `len - 1` letters: records of different lengths. */
static cq_xmsg_t *close_of_len(size_t len)
{
    cq_xmsg_t *m = cq__xmsg_new(XM_CLOSE, len);
    assert_non_null(m);
    memset(m->body, 'x', len - 1);
    m->body[len - 1] = 0;
    m->conn_id = 0x20000001u; /* a connection of node 2 (two node bits) */
    return m;
}

/* Worker 0 queues a record for node 2 and then posts to worker 1, which queues its own record
 * for node 2 and flushes before worker 0 ends its iteration. Worker 0's record must reach the
 * relay first: worker 1's was caused by worker 0's message (the spatial creation chain whose
 * SUB results reached a server of another node out of order). */
static void test_local_post_flushes_node_records(void **state)
{
    (void)state;
    cq_core_opts_t o = {.relay_node = 1, .relay_node_bits = 2};
    env_up(2, &o);
    cq_shared_set_relay(E.sh, fake_relay_send, NULL);
    nrelayed = 0;
    cq_core_t *a = E.cores[0], *b = E.cores[1];

    cq__node_post(a, 2, close_of_len(2));
    assert_int_equal(nrelayed, 0);               /* queued for the end of the iteration */
    cq_xmsg_t *m = cq__xmsg_new(XM_LSUB_DEL, 0); /* a delivery: causes nothing remote */
    assert_non_null(m);
    cq__xmsg_post(a, 1, m);
    assert_int_equal(nrelayed, 0);
    m = cq__xmsg_new(XM_CLOSE, 0); /* of no connection of worker 1: a no-op there */
    assert_non_null(m);
    m->conn_id = 77;
    cq__xmsg_post(a, 1, m);
    assert_int_equal(nrelayed, 1); /* handed over before worker 1 can see m */
    assert_int_equal(a->n_rdirty, 0);

    cq__node_post(b, 2, close_of_len(40)); /* worker 1, "caused" by m */
    cq_core_flush(b);
    cq_core_flush(a); /* nothing left to send */
    assert_int_equal(nrelayed, 2);
    assert_true(relayed_len[0] < relayed_len[1]);

    /* with nothing queued for a node, a local post sends nothing */
    m = cq__xmsg_new(XM_CLOSE, 0);
    assert_non_null(m);
    m->conn_id = 77;
    cq__xmsg_post(a, 1, m);
    assert_int_equal(nrelayed, 2);
    pump();
    env_down();

    /* the deliveries, exactly */
    for (int k = 0; k < XM__COUNT; k++) {
        bool want = k == XM_SEND || k == XM_FANOUT || k == XM_LSUB_ADD || k == XM_LSUB_DEL ||
                    k == XM_SENDMANY || k == XM_ADJACENT;
        assert_int_equal(cq__xm_delivers(k), want);
    }
}

/* Every cross-worker message kind has a row. */
static void test_xm_rows(void **state)
{
    /* every kind has its own row, at its own index */
    static const struct {
        int kind;
        const char *name;
    } want[] = {
        {XM_DISPATCH, "DISPATCH"},
        {XM_SEND, "SEND"},
        {XM_FANOUT, "FANOUT"},
        {XM_LSUB_ADD, "LSUB_ADD"},
        {XM_LSUB_DEL, "LSUB_DEL"},
        {XM_CONN_GONE, "CONN_GONE"},
        {XM_CLOSE, "CLOSE"},
        {XM_CREATE, "CREATE"},
        {XM_FREE_ID, "FREE_ID"},
        {XM_META, "META"},
        {XM_REMOVE, "REMOVE"},
        {XM_ROUTE, "ROUTE"},
        {XM_SENDMANY, "SENDMANY"},
        {XM_SCHEMA, "SCHEMA"},
        {XM_RECOVER, "RECOVER"},
        {XM_RESYNC, "RESYNC"},
        {XM_SP_CELL, "SP_CELL"},
        {XM_DIR_ADD, "DIR_ADD"},
        {XM_ENTITY, "ENTITY"},
        {XM_WK_SUB, "WK_SUB"},
        {XM_INTEREST, "INTEREST"},
        {XM_ADJACENT, "ADJACENT"},
        {XM_HANDOVER, "HANDOVER"},
        {XM_NODE_CONN, "NODE_CONN"},
        {XM_GLOBAL_OWNER, "GLOBAL_OWNER"},
        {XM_NODE_RESET, "NODE_RESET"},
        {XM_NODE_REHOME, "NODE_REHOME"},
        {XM_NODE_CONN_ACK, "NODE_CONN_ACK"},
        {XM_BOUNCE, "BOUNCE"},
        {XM_INJECT_BC, "INJECT_BC"},
        {XM_INJECT_ROUTE, "INJECT_ROUTE"},
        {XM_RESUME, "RESUME"},
        {XM_TOPIC_CHAN, "TOPIC_CHAN"},
    };
    assert_int_equal(sizeof(want) / sizeof(want[0]), XM__COUNT);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_non_null(cq__xm_name(want[i].kind));
        assert_string_equal(cq__xm_name(want[i].kind), want[i].name);
    }
    assert_null(cq__xm_name(XM__COUNT));
    assert_null(cq__xm_name(-1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_struct_size_budgets),
        cmocka_unit_test(test_auth_vector_bytes),
        cmocka_unit_test(test_auth_timeout_manual_clock),
        cmocka_unit_test(test_bad_magic_closes_only_that_conn),
        cmocka_unit_test(test_unknown_channel_and_fsm_drop_keep_conn),
        cmocka_unit_test(test_broadcast_across_workers),
        cmocka_unit_test(test_broadcast_burst_keeps_order),
        cmocka_unit_test(test_burst_subscribe_between),
        cmocka_unit_test(test_slow_consumer_cut_others_served),
        cmocka_unit_test(test_channel_id_reuse_and_list),
        cmocka_unit_test(test_server_recovery),
        cmocka_unit_test(test_server_bypass_loopback),
        cmocka_unit_test(test_inbound_flow_control),
        cmocka_unit_test(test_drop_logs_rate_limited),
        cmocka_unit_test(test_channel_data_fanout),
        cmocka_unit_test(test_channel_data_write_access),
        cmocka_unit_test(test_unrecovered_channel_removed_after_timeout),
        cmocka_unit_test(test_acl_levels),
        cmocka_unit_test(test_msg_table_rows),
        cmocka_unit_test(test_msg_flags_behaviour),
        cmocka_unit_test(test_xm_rows),
        cmocka_unit_test(test_local_post_flushes_node_records),
    };
    return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
