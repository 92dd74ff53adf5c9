/* Unit tests of the spatial controller and the entity channels in the core (helper B, issue
 * 12): the harness of test_core.c (fake transport, manual clock, inboxes pumped by hand so
 * cross-worker paths run deterministically in one thread) on the 4x1 layout. */
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
#include "cq_schema.h"
#include "cq_sbuf.h"
#include "cq_sendq.h"
#include "cq_settings.h"
#include "cq_wire.h"
#include "core.h"
#include "msgtab.h"
#include "world.h"

#include "core_env.h"

/* ---- spatial helpers -------------------------------------------------------------------- */

#define S0 65536u
#define E0 0x80000u

typedef struct rmsg {
    uint32_t type, chan, stub;
    size_t len;
    uint8_t body[8192];
} rmsg_t;

static rmsg_t R[32];

/* Decodes every MessagePack f received, in order, into R; consumes the output. */
static int msgs(fconn_t *f)
{
    int n = 0;
    size_t off = 0;
    while (off < f->out.len) {
        cq_frame_t fr;
        ssize_t k =
            cq_framing_parse(f->out.data + off, f->out.len - off, CQ_FRAMING_FIXED, 65535, &fr);
        assert_true(k > 0);
        cq_packet_iter_t it;
        cq_mp_t mp;
        cq_wire_packet_iter_init(&it, fr.body, fr.len);
        while (cq_wire_packet_next(&it, &mp) == 1) {
            assert_true(n < 32 && mp.body_len <= sizeof(R[0].body));
            R[n] = (rmsg_t){mp.msg_type, mp.channel_id, mp.stub_id, mp.body_len, {0}};
            if (mp.body_len)
                memcpy(R[n].body, mp.body, mp.body_len);
            n++;
        }
        off += (size_t)k;
    }
    f->out.len = 0;
    return n;
}

static void expect(int i, uint32_t type, uint32_t chan, uint32_t stub)
{
    assert_int_equal(R[i].type, type);
    assert_int_equal(R[i].chan, chan);
    assert_int_equal(R[i].stub, stub);
}

/* R[i] is a SUB result for conn `who`; returns its options' interval and delay. */
static void expect_sub(int i, uint32_t chan, uint32_t who, uint32_t ctype, uint32_t chtype,
                       uint32_t interval, int32_t delay)
{
    expect(i, 6, chan, 0);
    Channeldpb__SubscribedToChannelResultMessage *m =
        channeldpb__subscribed_to_channel_result_message__unpack(NULL, R[i].len, R[i].body);
    assert_non_null(m);
    assert_int_equal(m->connid, who);
    assert_int_equal(m->conntype, ctype);
    assert_int_equal(m->channeltype, chtype);
    assert_non_null(m->suboptions);
    assert_int_equal(m->suboptions->fanoutintervalms, interval);
    assert_int_equal(m->suboptions->fanoutdelayms, delay);
    channeldpb__subscribed_to_channel_result_message__free_unpacked(m, NULL);
}

static void expect_ready(int i, uint32_t count)
{
    expect(i, 18, 0, 0);
    Channeldpb__SpatialChannelsReadyMessage *m =
        channeldpb__spatial_channels_ready_message__unpack(NULL, R[i].len, R[i].body);
    assert_non_null(m);
    assert_int_equal(m->serverindex, count);
    assert_int_equal(m->servercount, count);
    channeldpb__spatial_channels_ready_message__free_unpacked(m, NULL);
}

static void expect_created(int i, uint32_t stub, uint32_t owner, uint32_t a, uint32_t b)
{
    expect(i, 10, 0, stub);
    Channeldpb__CreateSpatialChannelsResultMessage *m =
        channeldpb__create_spatial_channels_result_message__unpack(NULL, R[i].len, R[i].body);
    assert_non_null(m);
    assert_int_equal(m->ownerconnid, owner);
    assert_int_equal(m->n_spatialchannelid, 2);
    assert_int_equal(m->spatialchannelid[0], a);
    assert_int_equal(m->spatialchannelid[1], b);
    assert_string_equal(m->metadata, "world");
    channeldpb__create_spatial_channels_result_message__free_unpacked(m, NULL);
}

static void expect_regions(int i, uint32_t stub)
{
    expect(i, 13, 0, stub);
    Channeldpb__SpatialRegionsUpdateMessage *m =
        channeldpb__spatial_regions_update_message__unpack(NULL, R[i].len, R[i].body);
    assert_non_null(m);
    assert_int_equal(m->n_regions, 4);
    for (uint32_t k = 0; k < 4; k++) { /* 4x1: offset (-2000, -500), 1000 x 1000, 2 servers */
        assert_int_equal(m->regions[k]->channelid, S0 + k);
        assert_int_equal(m->regions[k]->serverindex, k / 2);
        assert_true(m->regions[k]->min->x == -2000.0 + 1000.0 * k);
        assert_true(m->regions[k]->max->x == -1000.0 + 1000.0 * k);
        assert_true(m->regions[k]->min->z == -500.0 && m->regions[k]->max->z == 500.0);
    }
    channeldpb__spatial_regions_update_message__free_unpacked(m, NULL);
}

static cq_spatial_cfg_t CFG;

static void spatial_up(int workers, cq_core_opts_t *o)
{
    char err[256];
    assert_int_equal(cq_spatial_cfg_load("4x1", &CFG, err, sizeof(err)), 0);
    CFG.chan_start = S0;
    CFG.entity_start = E0;
    o->spatial = &CFG;
    o->entity_chan_start = E0;
    env_up(workers, o);
}

static void spatial_down(void)
{
    env_down();
    cq_spatial_cfg_done(&CFG);
}

static void auth_pit(fconn_t *f, const char *pit)
{
    Channeldpb__AuthMessage a = CHANNELDPB__AUTH_MESSAGE__INIT;
    a.playeridentifiertoken = (char *)pit;
    a.logintoken = "l";
    send_msg(f, 0, 0, 0, 1, &a.base);
    assert_int_equal(take(f, 1, NULL, NULL), 1);
}

static uint32_t cid(fconn_t *f)
{
    return cq_conn_id(f->conn);
}

/* CREATE_SPATIAL_CHANNEL (msg_type 10) or CREATE_CHANNEL{SPATIAL} (3) with metadata "world". */
static void create_spatial(fconn_t *f, uint32_t msg_type, uint32_t stub)
{
    Channeldpb__CreateChannelMessage cc = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    cc.channeltype = CHANNELDPB__CHANNEL_TYPE__SPATIAL;
    cc.metadata = "world";
    send_msg(f, 0, 0, stub, msg_type, &cc.base);
}

static cq_chan_t *chan_of(uint32_t id)
{
    return cq__chan_get(E.cores[id % (uint32_t)E.n], id);
}

/* Two servers fill the 4x1 grid; both outputs consumed. */
static void fill_4x1(fconn_t **a, fconn_t **b)
{
    *a = connect_as(CQ_CONN_SERVER);
    auth_pit(*a, "sa");
    *b = connect_as(CQ_CONN_SERVER);
    auth_pit(*b, "sb");
    create_spatial(*a, 10, 7);
    create_spatial(*b, 3, 9);
    msgs(*a);
    msgs(*b);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_create_order_4x1(void **state)
{
    cq_core_opts_t o = {0};
    spatial_up(3, &o);
    fconn_t *a = connect_as(CQ_CONN_SERVER), *b = connect_as(CQ_CONN_SERVER);
    auth_pit(a, "sa");
    auth_pit(b, "sb");
    create_spatial(a, 10, 7);
    /* The first server: only its own replies. */
    assert_int_equal(msgs(a), 4);
    expect_created(0, 7, cid(a), S0, S0 + 1);
    expect_sub(1, S0, cid(a), 1, 4, 20, 0);
    expect_sub(2, S0 + 1, cid(a), 1, 4, 20, 0);
    expect_regions(3, 7);
    /* The last one: its border SUB, READY, then its replies (msgType 10 for a type-3 request). */
    create_spatial(b, 3, 9);
    assert_int_equal(msgs(b), 6);
    expect_sub(0, S0 + 1, cid(b), 1, 4, 20, 0);
    expect_ready(1, 2);
    expect_created(2, 9, cid(b), S0 + 2, S0 + 3);
    expect_sub(3, S0 + 2, cid(b), 1, 4, 20, 0);
    expect_sub(4, S0 + 3, cid(b), 1, 4, 20, 0);
    expect_regions(5, 9);
    assert_int_equal(msgs(a), 2);
    expect_sub(0, S0 + 2, cid(a), 1, 4, 20, 0);
    expect_ready(1, 2);
    /* The cells: owners and silent subscriptions where they live. */
    for (uint32_t k = 0; k < 4; k++) {
        cq_chan_t *ch = chan_of(S0 + k);
        assert_non_null(ch);
        assert_int_equal(ch->type, 4);
        assert_int_equal(ch->owner, k < 2 ? cid(a) : cid(b));
        assert_int_equal(cq_map_count(&ch->subs), k == 1 || k == 2 ? 2 : 1);
    }
    assert_int_equal(atomic_load(&E.sh->slot_owner[0]), cid(a));
    assert_int_equal(atomic_load(&E.sh->slot_owner[1]), cid(b));
    /* LIST shows GLOBAL and the 4 cells. */
    Channeldpb__ListChannelMessage lm = CHANNELDPB__LIST_CHANNEL_MESSAGE__INIT;
    lm.typefilter = CHANNELDPB__CHANNEL_TYPE__SPATIAL;
    send_msg(a, 0, 0, 3, 5, &lm.base);
    assert_int_equal(msgs(a), 1);
    Channeldpb__ListChannelResultMessage *l =
        channeldpb__list_channel_result_message__unpack(NULL, R[0].len, R[0].body);
    assert_int_equal(l->n_channels, 4);
    channeldpb__list_channel_result_message__free_unpacked(l, NULL);
    spatial_down();
}

static void test_create_global_owner_copies(void **state)
{
    cq_core_opts_t o = {0};
    spatial_up(2, &o);
    fconn_t *g = connect_as(CQ_CONN_SERVER);
    auth_pit(g, "g");
    Channeldpb__CreateChannelMessage cc = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    cc.channeltype = CHANNELDPB__CHANNEL_TYPE__GLOBAL;
    send_msg(g, 0, 0, 1, 3, &cc.base);
    msgs(g);
    fconn_t *a = connect_as(CQ_CONN_SERVER), *b = connect_as(CQ_CONN_SERVER);
    auth_pit(a, "sa");
    auth_pit(b, "sb");
    msgs(g); /* AuthResult copies */
    create_spatial(a, 10, 7);
    assert_int_equal(msgs(a), 4);
    expect_regions(3, 0); /* another GLOBAL owner: stub 0 */
    create_spatial(b, 10, 8);
    assert_int_equal(msgs(b), 6);
    expect_created(2, 8, cid(b), S0 + 2, S0 + 3);
    expect_regions(5, 0);
    assert_int_equal(msgs(g), 3);
    expect_created(0, 0, cid(a), S0, S0 + 1);
    expect_ready(1, 2);
    expect_created(2, 0, cid(b), S0 + 2, S0 + 3);
    spatial_down();
}

static void test_slot_exhaustion_is_silent(void **state)
{
    cq_core_opts_t o = {0};
    spatial_up(2, &o);
    fconn_t *a, *b;
    fill_4x1(&a, &b);
    fconn_t *c = connect_as(CQ_CONN_SERVER);
    auth_pit(c, "sc");
    create_spatial(c, 10, 5);
    assert_int_equal(msgs(c), 0);
    assert_int_equal(msgs(a) + msgs(b), 0);
    assert_false(c->closed);
    /* A client cannot create spatial channels either. */
    fconn_t *cl = connect_as(CQ_CONN_CLIENT);
    auth_pit(cl, "cl");
    assert_int_equal(cq_map_count(&E.cores[0]->chaninfo), 5);
    spatial_down();
}

static void test_slot_reuse_keeps_subscriptions(void **state)
{
    cq_core_opts_t o = {0};
    spatial_up(3, &o);
    fconn_t *a, *b;
    fill_4x1(&a, &b);
    fconn_t *cl = connect_as(CQ_CONN_CLIENT);
    auth_pit(cl, "cl");
    Channeldpb__SubscribedToChannelMessage sub = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
    sub.connid = cid(cl);
    send_msg(a, S0, 0, 2, 6, &sub.base); /* the cell's owner subscribes the client */
    assert_int_equal(msgs(cl), 1);
    msgs(a);
    cq_core_conn_close(E.cores[a->worker], a->conn, 0, "bye");
    pump();
    assert_int_equal(atomic_load(&E.sh->slot_owner[0]), 0);
    assert_non_null(chan_of(S0)); /* cells stay without an owner */
    assert_int_equal(chan_of(S0)->owner, 0);
    assert_int_equal(msgs(cl), 0); /* no REMOVE_CHANNEL */
    assert_int_equal(msgs(b), 1);  /* b owns 65538, a's border cell: a's UNSUB result */
    expect(0, 7, S0 + 2, 0);
    fconn_t *c = connect_as(CQ_CONN_SERVER);
    auth_pit(c, "sc");
    create_spatial(c, 10, 4);
    assert_int_equal(msgs(c), 6); /* the last slot filled again: border and READY redone */
    expect_sub(0, S0 + 2, cid(c), 1, 4, 20, 0);
    expect_ready(1, 2);
    expect_created(2, 4, cid(c), S0, S0 + 1);
    assert_int_equal(msgs(b), 2);
    expect_sub(0, S0 + 1, cid(b), 1, 4, 20, 0);
    expect_ready(1, 2);
    cq_chan_t *ch = chan_of(S0);
    assert_int_equal(ch->owner, cid(c));
    assert_non_null(cq_map_get(&ch->subs, cid(cl))); /* taken over, not re-created */
    assert_non_null(cq_map_get(&ch->subs, cid(c)));
    assert_int_equal(atomic_load(&E.sh->slot_owner[0]), cid(c));
    spatial_down();
}

static void test_recovery_keeps_slot(void **state)
{
    cq_core_opts_t o = {0};
    o.server_recoverable = true;
    o.server_recover_timeout_ms = 5000;
    spatial_up(2, &o);
    fconn_t *a, *b;
    fill_4x1(&a, &b);
    uint32_t old = cid(a);
    cq_core_conn_lost(E.cores[a->worker], a->conn, -104, "reset");
    pump();
    assert_int_equal(atomic_load(&E.sh->slot_owner[0]), old); /* kept while recoverable */
    fconn_t *a2 = connect_as(CQ_CONN_SERVER);
    auth_pit(a2, "sa");
    assert_int_equal(cid(a2), old);
    assert_int_equal(chan_of(S0)->owner, old);
    assert_non_null(cq_map_get(&chan_of(S0 + 2)->subs, old)); /* border subscription back */
    msgs(b);
    for (int i = 0; i < E.n; i++)
        cq_core_tick(E.cores[i], E.now + 6000);
    pump();
    int n = msgs(b);
    for (int i = 0; i < n; i++)
        assert_int_not_equal(R[i].type, 18); /* READY not redone */
    assert_int_equal(atomic_load(&E.sh->slot_owner[0]), old);
    spatial_down();
}

static void test_recovery_timeout_frees_slot(void **state)
{
    cq_core_opts_t o = {0};
    o.server_recoverable = true;
    o.server_recover_timeout_ms = 5000;
    spatial_up(2, &o);
    fconn_t *a, *b;
    fill_4x1(&a, &b);
    uint32_t old = cid(a);
    cq_core_conn_lost(E.cores[a->worker], a->conn, -104, "reset");
    pump();
    for (int i = 0; i < E.n; i++)
        cq_core_tick(E.cores[i], E.now + 4000);
    assert_int_equal(atomic_load(&E.sh->slot_owner[0]), old);
    for (int i = 0; i < E.n; i++)
        cq_core_tick(E.cores[i], E.now + 5000);
    pump();
    assert_int_equal(atomic_load(&E.sh->slot_owner[0]), 0);
    assert_non_null(chan_of(S0)); /* cells are not removed on the timeout either */
    spatial_down();
}

static void query(fconn_t *f, uint32_t stub)
{
    Channeldpb__SpatialInfo p[4];
    Channeldpb__SpatialInfo *pp[4];
    const double xz[4][2] = {{-1500, 0}, {1500, 499}, {2500, 0}, {-1500, 600}};
    for (int i = 0; i < 4; i++) {
        channeldpb__spatial_info__init(&p[i]);
        p[i].x = xz[i][0];
        p[i].z = xz[i][1];
        pp[i] = &p[i];
    }
    Channeldpb__QuerySpatialChannelMessage q = CHANNELDPB__QUERY_SPATIAL_CHANNEL_MESSAGE__INIT;
    q.n_spatialinfo = 4;
    q.spatialinfo = pp;
    send_msg(f, 0, 0, stub, 11, &q.base);
}

static void test_query_ids(void **state)
{
    cq_core_opts_t o = {0};
    spatial_up(2, &o);
    fconn_t *a = connect_as(CQ_CONN_SERVER);
    auth_pit(a, "sa");
    query(a, 33);
    assert_int_equal(msgs(a), 1);
    expect(0, 11, 0, 33);
    Channeldpb__QuerySpatialChannelResultMessage *m =
        channeldpb__query_spatial_channel_result_message__unpack(NULL, R[0].len, R[0].body);
    assert_int_equal(m->n_channelid, 4);
    assert_int_equal(m->channelid[0], S0);
    assert_int_equal(m->channelid[1], S0 + 3);
    assert_int_equal(m->channelid[2], 0); /* off the grid in x */
    assert_int_equal(m->channelid[3], 0); /* off the grid in z */
    channeldpb__query_spatial_channel_result_message__free_unpacked(m, NULL);
    spatial_down();
    /* Without a controller: no answer (channeld). */
    env_up(1, NULL);
    a = connect_as(CQ_CONN_SERVER);
    auth_pit(a, "sa");
    query(a, 34);
    assert_int_equal(msgs(a), 0);
    env_down();
}

static void test_debug_regions_dev_only(void **state)
{
    Channeldpb__DebugGetSpatialRegionsMessage d =
        CHANNELDPB__DEBUG_GET_SPATIAL_REGIONS_MESSAGE__INIT;
    cq_core_opts_t o = {0};
    spatial_up(2, &o);
    fconn_t *a = connect_as(CQ_CONN_SERVER);
    auth_pit(a, "sa");
    send_msg(a, 0, 0, 12, 99, &d.base);
    assert_int_equal(msgs(a), 0);
    spatial_down();
    o = (cq_core_opts_t){0};
    o.dev = true;
    spatial_up(2, &o);
    a = connect_as(CQ_CONN_SERVER);
    auth_pit(a, "sa");
    send_msg(a, 0, 0, 12, 99, &d.base);
    assert_int_equal(msgs(a), 1);
    expect_regions(0, 12);
    spatial_down();
}

static void create_entity(fconn_t *f, uint32_t chan, uint32_t id, bool wk, uint32_t stub)
{
    Channeldpb__CreateEntityChannelMessage m = CHANNELDPB__CREATE_ENTITY_CHANNEL_MESSAGE__INIT;
    m.entityid = id;
    m.metadata = "ent";
    m.iswellknown = wk;
    send_msg(f, chan, 0, stub, 15, &m.base);
}

static void expect_entity_created(int i, uint32_t chan, uint32_t stub, uint32_t id, uint32_t owner)
{
    expect(i, 15, chan, stub);
    Channeldpb__CreateChannelResultMessage *m =
        channeldpb__create_channel_result_message__unpack(NULL, R[i].len, R[i].body);
    assert_int_equal(m->channeltype, 5);
    assert_int_equal(m->channelid, id);
    assert_int_equal(m->ownerconnid, owner);
    assert_string_equal(m->metadata, "ent");
    channeldpb__create_channel_result_message__free_unpacked(m, NULL);
}

static void test_entity_range_and_duplicate(void **state)
{
    cq_core_opts_t o = {0};
    spatial_up(3, &o);
    fconn_t *a, *b;
    fill_4x1(&a, &b);
    create_entity(a, 0, E0 - 1, false, 3); /* below the range */
    assert_int_equal(msgs(a), 0);
    create_entity(a, S0, E0 + 1, false, 4); /* on a cell: channelId = the cell */
    assert_int_equal(msgs(a), 2);
    expect_entity_created(0, S0, 4, E0 + 1, cid(a));
    expect_sub(1, E0 + 1, cid(a), 1, 5, 20, 0);
    create_entity(b, 0, E0 + 1, false, 5); /* duplicate id */
    assert_int_equal(msgs(b), 0);
    assert_int_equal(chan_of(E0 + 1)->owner, cid(a));
    assert_non_null(cq_map_get(&E.cores[0]->chaninfo, E0 + 1)); /* LIST shows it */
    Channeldpb__RemoveChannelMessage rm = CHANNELDPB__REMOVE_CHANNEL_MESSAGE__INIT;
    rm.channelid = E0 + 1;
    send_msg(a, 0, 0, 0, 4, &rm.base);
    assert_null(chan_of(E0 + 1));
    assert_null(cq_map_get(&E.cores[0]->chaninfo, E0 + 1));
    spatial_down();
}

static void test_well_known_entities(void **state)
{
    cq_core_opts_t o = {0};
    spatial_up(3, &o);
    fconn_t *s = connect_as(CQ_CONN_SERVER);
    auth_pit(s, "s");
    fconn_t *c1 = connect_as(CQ_CONN_CLIENT);
    auth_pit(c1, "c1");
    fconn_t *c0 = connect_as(CQ_CONN_CLIENT); /* connected, not authenticated */
    create_entity(s, 0, E0 + 7, true, 6);
    assert_int_equal(msgs(c0), 0); /* not an existing CLIENT yet */
    assert_int_equal(msgs(s), 2);
    expect_entity_created(0, 0, 6, E0 + 7, cid(s));
    expect_sub(1, E0 + 7, cid(s), 1, 5, 20, 0);
    assert_int_equal(msgs(c1), 1);
    expect_sub(0, E0 + 7, cid(c1), 2, 5, 20, 0); /* default options */
    fconn_t *c2 = connect_as(CQ_CONN_CLIENT);
    Channeldpb__AuthMessage am = CHANNELDPB__AUTH_MESSAGE__INIT;
    am.playeridentifiertoken = "c2";
    am.logintoken = "l";
    send_msg(c2, 0, 0, 0, 1, &am.base);
    assert_int_equal(msgs(c2), 2);
    expect(0, 1, 0, 0);
    expect_sub(1, E0 + 7, cid(c2), 2, 5, 20, 1000); /* later: delayed 1 s */
    assert_int_equal(msgs(s), 0);                   /* the owner gets no copies */
    send_msg(c0, 0, 0, 0, 1, &am.base);             /* c0 authenticates now: delayed too */
    assert_int_equal(msgs(c0), 2);
    expect_sub(1, E0 + 7, cid(c0), 2, 5, 20, 1000);
    assert_int_equal(E.sh->n_wk, 1);
    Channeldpb__RemoveChannelMessage rm = CHANNELDPB__REMOVE_CHANNEL_MESSAGE__INIT;
    rm.channelid = E0 + 7;
    send_msg(s, 0, 0, 0, 4, &rm.base);
    assert_int_equal(E.sh->n_wk, 0);
    fconn_t *c3 = connect_as(CQ_CONN_CLIENT);
    auth_pit(c3, "c3");
    assert_int_equal(msgs(c3), 0);
    spatial_down();
}

/* ---- §4.5 step 3: an entity created on GLOBAL with a position ---------------------------- */

static const char *world_fds; /* argv[1]: build/proto/world.fds */

static const char WORLD_4X1[] =
    "{\"Config\": {\"WorldOffsetX\": -2000, \"WorldOffsetZ\": -500, \"GridWidth\": 1000,"
    " \"GridHeight\": 1000, \"GridCols\": 4, \"GridRows\": 1, \"ServerCols\": 2,"
    " \"ServerRows\": 1, \"ServerInterestBorderSize\": 1},"
    " \"Handover\": {\"PositionPath\": \"transform.position\", \"Axes\": \"xyz\"}}";

/* chanqworld.EntityChannelData {transform {position {x, z}}}, encoded by hand (14 bytes). */
static size_t entity_at(float x, float z, uint8_t *out)
{
    static const uint8_t head[] = {0x0a, 0x0c, 0x12, 0x0a};
    memcpy(out, head, 4);
    out[4] = 0x0d; /* position.x: field 1, fixed32 */
    memcpy(out + 5, &x, 4);
    out[9] = 0x1d; /* position.z: field 3, fixed32 */
    memcpy(out + 10, &z, 4);
    return 14;
}

static void create_entity_at(fconn_t *f, uint32_t chan, uint32_t id, float x, float z,
                             uint32_t stub)
{
    uint8_t bytes[14];
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    any.type_url = "type.googleapis.com/chanqworld.EntityChannelData";
    any.value.len = entity_at(x, z, bytes);
    any.value.data = bytes;
    Channeldpb__CreateEntityChannelMessage m = CHANNELDPB__CREATE_ENTITY_CHANNEL_MESSAGE__INIT;
    m.entityid = id;
    m.metadata = "ent";
    m.data = &any;
    send_msg(f, chan, 0, stub, 15, &m.base);
}

static void test_entity_owned_by_cell_server(void **state)
{
    char err[256];
    cq_schema_t *schema;
    assert_int_equal(cq_schema_new(&schema), 0);
    assert_int_equal(cq_schema_load_file(schema, world_fds, err, sizeof(err)), 0);
    assert_int_equal(cq_spatial_cfg_parse(WORLD_4X1, strlen(WORLD_4X1), &CFG, err, sizeof(err)), 0);
    CFG.chan_start = S0;
    CFG.entity_start = E0;
    cq_core_opts_t o = {0};
    o.spatial = &CFG;
    o.entity_chan_start = E0;
    o.schema = schema;
    env_up(3, &o);
    fconn_t *m = connect_as(CQ_CONN_SERVER); /* the "master" server creating on GLOBAL */
    auth_pit(m, "m");
    fconn_t *a, *b;
    fill_4x1(&a, &b);
    /* x 1500 is in cell 65539 (server 1 = b): b owns it and gets the reply, channelId the cell,
     * the request's stub; then b's SUB result. The sender hears nothing. */
    create_entity_at(m, 0, E0 + 3, 1500.0f, 0.0f, 21);
    assert_int_equal(msgs(m), 0);
    assert_int_equal(msgs(a), 0);
    assert_int_equal(msgs(b), 2);
    expect_entity_created(0, S0 + 3, 21, E0 + 3, cid(b));
    expect_sub(1, E0 + 3, cid(b), 1, 5, 20, 0);
    cq_chan_t *ch = chan_of(E0 + 3);
    assert_int_equal(ch->owner, cid(b));
    assert_int_equal(ch->ts.entity->cell, S0 + 3);
    assert_null(chan_of(S0 + 3)->ts.entity); /* only the ENTITY type keeps state of its own */
    assert_non_null(cq_map_get(&ch->subs, cid(b)));
    assert_null(cq_map_get(&ch->subs, cid(m)));
    /* Off the grid: no cell, the sender keeps it (reply on GLOBAL). */
    create_entity_at(m, 0, E0 + 4, 9000.0f, 0.0f, 22);
    assert_int_equal(msgs(m), 2);
    expect_entity_created(0, 0, 22, E0 + 4, cid(m));
    /* Created on a cell: no redirection even with a position (step 3 is for GLOBAL only). */
    create_entity_at(m, S0 + 2, E0 + 5, -1500.0f, 0.0f, 23);
    assert_int_equal(msgs(a), 0);
    assert_int_equal(msgs(m), 2);
    expect_entity_created(0, S0 + 2, 23, E0 + 5, cid(m));
    assert_int_equal(chan_of(E0 + 5)->ts.entity->cell, S0);
    env_down();
    cq_spatial_cfg_done(&CFG);
    cq_schema_free(schema);
}

static void group_msg(fconn_t *f, uint32_t ent, uint32_t type, uint32_t other)
{
    Channeldpb__AddEntityGroupMessage m = CHANNELDPB__ADD_ENTITY_GROUP_MESSAGE__INIT;
    m.type = CHANNELDPB__ENTITY_GROUP_TYPE__HANDOVER;
    m.n_entitiestoadd = 1;
    m.entitiestoadd = &other;
    send_msg(f, ent, 0, 0, type, &m.base); /* Add and Remove have the same field numbers */
}

static size_t handover_set(uint32_t e)
{
    uint32_t out[8];
    return cq_entgroups_handover_set(E.sh->groups, e, out, 8);
}

static void test_groups_owner_only(void **state)
{
    cq_core_opts_t o = {0};
    spatial_up(2, &o);
    fconn_t *a = connect_as(CQ_CONN_SERVER), *b = connect_as(CQ_CONN_SERVER);
    auth_pit(a, "a");
    auth_pit(b, "b");
    create_entity(a, 0, E0 + 1, false, 1);
    create_entity(a, 0, E0 + 2, false, 2);
    msgs(a);
    group_msg(b, E0 + 1, 16, E0 + 2); /* not the owner: dropped */
    assert_int_equal(handover_set(E0 + 1), 1);
    group_msg(a, E0 + 1, 16, E0 + 2);
    assert_int_equal(handover_set(E0 + 1), 2);
    assert_int_equal(handover_set(E0 + 2), 2);
    group_msg(b, E0 + 1, 17, E0 + 2); /* not the owner: dropped */
    assert_int_equal(handover_set(E0 + 1), 2);
    group_msg(a, E0 + 1, 17, E0 + 2);
    assert_int_equal(handover_set(E0 + 1), 1);
    assert_int_equal(msgs(a) + msgs(b), 0); /* no replies */
    spatial_down();
}

int main(int argc, char **argv)
{
    world_fds = argc > 1 ? argv[1] : "proto/world.fds";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_order_4x1),
        cmocka_unit_test(test_create_global_owner_copies),
        cmocka_unit_test(test_slot_exhaustion_is_silent),
        cmocka_unit_test(test_slot_reuse_keeps_subscriptions),
        cmocka_unit_test(test_recovery_keeps_slot),
        cmocka_unit_test(test_recovery_timeout_frees_slot),
        cmocka_unit_test(test_query_ids),
        cmocka_unit_test(test_debug_regions_dev_only),
        cmocka_unit_test(test_entity_range_and_duplicate),
        cmocka_unit_test(test_well_known_entities),
        cmocka_unit_test(test_entity_owned_by_cell_server),
        cmocka_unit_test(test_groups_owner_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
