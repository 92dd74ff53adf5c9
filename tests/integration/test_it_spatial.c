/* test_it_spatial.c - spatial and entity channels against a real chanqd on the 4x1 layout
 * (channeld-protocol.md §4.3, §4.5, §3.7): two servers create the grid and see channeld's
 * exact reply order; LIST, QUERY and DEBUG (with --dev); a client subscribed to a cell gets its
 * owner's data; entity creation with well-known subscriptions; and recovery of a spatial server
 * whose connection drops without DISCONNECT. Clients use the transport under test (TCP or
 * WebSocket through run_transport.sh); servers use TCP. */
#include "it_common.h"

#include <stdio.h>
#include <string.h>

enum { CT_SPATIAL = 4, CT_ENTITY = 5 };
enum {
    MT_QUERY = 11,
    MT_REGIONS = 13,
    MT_CREATE_ENTITY = 15,
    MT_READY = 18,
    MT_RECOVERY_DATA = 20,
    MT_RECOVERY_END = 21,
    MT_DEBUG_REGIONS = 99
};

#define S0 65536u
#define E0 0x80000u

static void start(const char *extra)
{
    const char *args[] = {"--spatial-settings", "4x1", "--dev", extra, NULL};
    it_startv(args);
}

static it_conn_t *server_pit(const char *pit, uint32_t stub, bool *recovered)
{
    it_conn_t *s = it_connect(true, NULL);
    Channeldpb__AuthMessage a = CHANNELDPB__AUTH_MESSAGE__INIT;
    a.playeridentifiertoken = (char *)pit;
    a.logintoken = "lt";
    assert_int_equal(chanq_sync_send(s->s, 0, 0, stub, MT_AUTH, &a.base), 0);
    Channeldpb__AuthResultMessage *ar =
        it_expect(s, MT_AUTH, stub, &channeldpb__auth_result_message__descriptor, NULL);
    assert_int_equal(ar->result, 0);
    s->id = ar->connid;
    if (recovered)
        *recovered = ar->shouldrecover;
    chanq_unpack_free(ar);
    return s;
}

static void create_spatial(it_conn_t *s, uint32_t msg_type, uint32_t stub)
{
    Channeldpb__CreateChannelMessage cc = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    cc.channeltype = CHANNELDPB__CHANNEL_TYPE__SPATIAL;
    cc.metadata = "world";
    assert_int_equal(chanq_sync_send(s->s, 0, 0, stub, msg_type, &cc.base), 0);
}

/* A SUB result on cell for server `who` (stub 0). */
static void expect_cell_sub(it_conn_t *s, uint32_t cell, uint32_t who)
{
    chanq_owned_msg_t env;
    Channeldpb__SubscribedToChannelResultMessage *sr = it_expect(
        s, MT_SUB, 0, &channeldpb__subscribed_to_channel_result_message__descriptor, &env);
    assert_int_equal(env.channel_id, cell);
    chanq_owned_msg_done(&env);
    assert_int_equal(sr->connid, who);
    assert_int_equal(sr->conntype, CONN_SERVER);
    assert_int_equal(sr->channeltype, CT_SPATIAL);
    chanq_unpack_free(sr);
}

static void expect_ready(it_conn_t *s)
{
    chanq_owned_msg_t env;
    Channeldpb__SpatialChannelsReadyMessage *m =
        it_expect(s, MT_READY, 0, &channeldpb__spatial_channels_ready_message__descriptor, &env);
    assert_int_equal(env.channel_id, 0);
    chanq_owned_msg_done(&env);
    assert_int_equal(m->serverindex, 2); /* channeld: the count in both fields */
    assert_int_equal(m->servercount, 2);
    chanq_unpack_free(m);
}

static void expect_created(it_conn_t *s, uint32_t stub, uint32_t first)
{
    Channeldpb__CreateSpatialChannelsResultMessage *m =
        it_expect(s, MT_CREATE_SPATIAL, stub,
                  &channeldpb__create_spatial_channels_result_message__descriptor, NULL);
    assert_int_equal(m->ownerconnid, s->id);
    assert_string_equal(m->metadata, "world");
    assert_int_equal(m->n_spatialchannelid, 2);
    assert_int_equal(m->spatialchannelid[0], first);
    assert_int_equal(m->spatialchannelid[1], first + 1);
    chanq_unpack_free(m);
}

static void expect_regions(it_conn_t *s, uint32_t stub)
{
    Channeldpb__SpatialRegionsUpdateMessage *m = it_expect(
        s, MT_REGIONS, stub, &channeldpb__spatial_regions_update_message__descriptor, NULL);
    assert_int_equal(m->n_regions, 4);
    for (uint32_t k = 0; k < 4; k++) {
        assert_int_equal(m->regions[k]->channelid, S0 + k);
        assert_int_equal(m->regions[k]->serverindex, k / 2);
        assert_true(m->regions[k]->min->x == -2000.0 + 1000.0 * k);
    }
    chanq_unpack_free(m);
}

/* Servers a ("sa") and b ("sb") fill the grid; asserts every reply in channeld's order. */
static void fill(it_conn_t **a, it_conn_t **b)
{
    *a = server_pit("sa", 1, NULL);
    *b = server_pit("sb", 2, NULL);
    create_spatial(*a, MT_CREATE_SPATIAL, 7);
    expect_created(*a, 7, S0);
    expect_cell_sub(*a, S0, (*a)->id);
    expect_cell_sub(*a, S0 + 1, (*a)->id);
    expect_regions(*a, 7);
    create_spatial(*b, MT_CREATE, 9); /* CREATE_CHANNEL{SPATIAL}: answered as msgType 10 */
    expect_cell_sub(*b, S0 + 1, (*b)->id);
    expect_ready(*b);
    expect_created(*b, 9, S0 + 2);
    expect_cell_sub(*b, S0 + 2, (*b)->id);
    expect_cell_sub(*b, S0 + 3, (*b)->id);
    expect_regions(*b, 9);
    expect_cell_sub(*a, S0 + 2, (*a)->id);
    expect_ready(*a);
}

/* Reads s up to the LIST result with stub (asserting nothing of type `never` comes first). */
static void sync_list(it_conn_t *s, uint32_t stub, uint32_t never)
{
    assert_int_equal(chanq_sync_list_channel(s->s, stub, CT_SPATIAL, NULL, 0), 0);
    for (;;) {
        chanq_owned_msg_t m;
        it_recv(s, &m);
        assert_int_not_equal(m.msg_type, never);
        bool done = m.msg_type == MT_LIST && m.stub_id == stub;
        chanq_owned_msg_done(&m);
        if (done)
            return;
    }
}

static void test_create_list_query_debug(void **state)
{
    start(NULL);
    it_conn_t *a, *b;
    fill(&a, &b);
    assert_int_equal(chanq_sync_list_channel(a->s, 3, CT_SPATIAL, NULL, 0), 0);
    Channeldpb__ListChannelResultMessage *l =
        it_expect(a, MT_LIST, 3, &channeldpb__list_channel_result_message__descriptor, NULL);
    assert_int_equal(l->n_channels, 4);
    uint32_t seen = 0;
    for (size_t i = 0; i < l->n_channels; i++) {
        assert_int_equal(l->channels[i]->channeltype, CT_SPATIAL);
        assert_true(l->channels[i]->channelid >= S0 && l->channels[i]->channelid < S0 + 4);
        seen |= 1u << (l->channels[i]->channelid - S0);
    }
    assert_int_equal(seen, 0xf);
    chanq_unpack_free(l);
    Channeldpb__SpatialInfo p[3], *pp[3];
    const double xz[3][2] = {{-1500, 0}, {1500, 499}, {2500, 0}};
    for (int i = 0; i < 3; i++) {
        channeldpb__spatial_info__init(&p[i]);
        p[i].x = xz[i][0];
        p[i].z = xz[i][1];
        pp[i] = &p[i];
    }
    Channeldpb__QuerySpatialChannelMessage q = CHANNELDPB__QUERY_SPATIAL_CHANNEL_MESSAGE__INIT;
    q.n_spatialinfo = 3;
    q.spatialinfo = pp;
    assert_int_equal(chanq_sync_send(b->s, 0, 0, 33, MT_QUERY, &q.base), 0);
    Channeldpb__QuerySpatialChannelResultMessage *qr = it_expect(
        b, MT_QUERY, 33, &channeldpb__query_spatial_channel_result_message__descriptor, NULL);
    assert_int_equal(qr->n_channelid, 3);
    assert_int_equal(qr->channelid[0], S0);
    assert_int_equal(qr->channelid[1], S0 + 3);
    assert_int_equal(qr->channelid[2], 0); /* off the grid */
    chanq_unpack_free(qr);
    Channeldpb__DebugGetSpatialRegionsMessage d =
        CHANNELDPB__DEBUG_GET_SPATIAL_REGIONS_MESSAGE__INIT;
    assert_int_equal(chanq_sync_send(b->s, 0, 0, 34, MT_DEBUG_REGIONS, &d.base), 0);
    expect_regions(b, 34);
}

/* The owner subscribes client c to cell; both get the SUB result. */
static void sub_client(it_conn_t *owner, it_conn_t *c, uint32_t cell, uint32_t stub)
{
    assert_int_equal(chanq_sync_sub_to_channel(owner->s, stub, cell, c->id, NULL), 0);
    chanq_owned_msg_t env;
    Channeldpb__SubscribedToChannelResultMessage *sr = it_expect(
        owner, MT_SUB, stub, &channeldpb__subscribed_to_channel_result_message__descriptor, &env);
    assert_int_equal(env.channel_id, cell);
    assert_int_equal(sr->connid, c->id);
    chanq_owned_msg_done(&env);
    chanq_unpack_free(sr);
    sr = it_expect(c, MT_SUB, 0, &channeldpb__subscribed_to_channel_result_message__descriptor,
                   &env);
    assert_int_equal(env.channel_id, cell);
    assert_int_equal(sr->connid, c->id);
    assert_int_equal(sr->conntype, CONN_CLIENT);
    assert_int_equal(sr->channeltype, CT_SPATIAL);
    chanq_owned_msg_done(&env);
    chanq_unpack_free(sr);
}

#define URL_CELL "type.googleapis.com/chanqworld.SpatialChannelData"

/* The next data fan-out c gets on cell (skipping owner lost/recovered notices) carries the 6
 * bytes of cell_bytes. */
static void expect_cell_data(it_conn_t *c, uint32_t cell, const char *bytes)
{
    for (;;) {
        chanq_owned_msg_t env;
        it_recv(c, &env);
        if (env.msg_type == 22 || env.msg_type == 23) { /* CHANNEL_OWNER_LOST / _RECOVERED */
            assert_int_equal(env.channel_id, cell);
            chanq_owned_msg_done(&env);
            continue;
        }
        assert_int_equal(env.msg_type, MT_DATA);
        assert_int_equal(env.channel_id, cell);
        Channeldpb__ChannelDataUpdateMessage *u =
            chanq_sync_decode(&env, &channeldpb__channel_data_update_message__descriptor);
        assert_non_null(u);
        assert_string_equal(u->data->type_url, URL_CELL);
        assert_int_equal(u->data->value.len, 6);
        assert_memory_equal(u->data->value.data, bytes, 6);
        chanq_unpack_free(u);
        chanq_owned_msg_done(&env);
        return;
    }
}

/* SpatialChannelData {entities {key: k, value: {}}}, encoded by hand: field 1, a 4-byte entry. */
static const char *cell_bytes(uint8_t k, char out[7])
{
    const char b[7] = {0x0a, 0x04, 0x08, (char)k, 0x12, 0x00, 0};
    memcpy(out, b, 7);
    return out;
}

static void test_client_gets_cell_data(void **state)
{
    start(NULL);
    it_conn_t *a, *b;
    fill(&a, &b);
    it_conn_t *c = it_client();
    sub_client(a, c, S0, 4);
    char v[7];
    assert_int_equal(chanq_sync_data_update(a->s, S0, URL_CELL, cell_bytes(5, v), 6), 0);
    expect_cell_data(c, S0, cell_bytes(5, v));
}

static void create_entity(it_conn_t *s, uint32_t chan, uint32_t id, uint32_t stub)
{
    Channeldpb__CreateEntityChannelMessage m = CHANNELDPB__CREATE_ENTITY_CHANNEL_MESSAGE__INIT;
    m.entityid = id;
    m.metadata = "ent";
    m.iswellknown = true;
    assert_int_equal(chanq_sync_send(s->s, chan, 0, stub, MT_CREATE_ENTITY, &m.base), 0);
}

static void expect_entity_sub(it_conn_t *c, uint32_t id, uint32_t ctype, int32_t delay)
{
    chanq_owned_msg_t env;
    Channeldpb__SubscribedToChannelResultMessage *sr = it_expect(
        c, MT_SUB, 0, &channeldpb__subscribed_to_channel_result_message__descriptor, &env);
    assert_int_equal(env.channel_id, id);
    chanq_owned_msg_done(&env);
    assert_int_equal(sr->connid, c->id);
    assert_int_equal(sr->conntype, ctype);
    assert_int_equal(sr->channeltype, CT_ENTITY);
    assert_int_equal(sr->suboptions->fanoutdelayms, delay);
    chanq_unpack_free(sr);
}

static void test_well_known_entity(void **state)
{
    start(NULL);
    it_conn_t *a, *b;
    fill(&a, &b);
    it_conn_t *c1 = it_client();
    create_entity(a, S0, E0 + 1, 5); /* on a cell: the reply's channelId is the cell */
    chanq_owned_msg_t env;
    Channeldpb__CreateChannelResultMessage *cr = it_expect(
        a, MT_CREATE_ENTITY, 5, &channeldpb__create_channel_result_message__descriptor, &env);
    assert_int_equal(env.channel_id, S0);
    chanq_owned_msg_done(&env);
    assert_int_equal(cr->channeltype, CT_ENTITY);
    assert_int_equal(cr->channelid, E0 + 1);
    assert_int_equal(cr->ownerconnid, a->id);
    chanq_unpack_free(cr);
    expect_entity_sub(c1, E0 + 1, CONN_CLIENT, 0); /* an existing client */
    expect_entity_sub(a, E0 + 1, CONN_SERVER, 0);  /* then the owner */
    it_conn_t *c2 = it_client();
    expect_entity_sub(c2, E0 + 1, CONN_CLIENT, 1000); /* a later client: delayed 1 s */
    create_entity(b, 0, E0 + 1, 6);                   /* duplicate: no reply */
    sync_list(b, 7, MT_CREATE_ENTITY);
}

/* Issue 22, as reported: with --spatial-settings 4x1 a game server that created entity
 * channels was closed at its 1,024th subscription ("SUB to channel 525311 over
 * max-subs-per-conn (1024)"): it is subscribed to each entity it owns, and to its cells. A
 * server's subscriptions are counted against --max-subs-per-server instead. */
static void test_server_owns_many_entities(void **state)
{
    start(NULL);
    it_conn_t *a, *b;
    fill(&a, &b); /* a holds its two cells and a border cell */
    Channeldpb__CreateEntityChannelMessage m = CHANNELDPB__CREATE_ENTITY_CHANNEL_MESSAGE__INIT;
    m.metadata = "ent";
    for (uint32_t i = 1; i <= 1100; i++) {
        m.entityid = E0 + i;
        assert_int_equal(chanq_sync_send(a->s, S0, 0, i, MT_CREATE_ENTITY, &m.base), 0);
        Channeldpb__CreateChannelResultMessage *cr = it_expect(
            a, MT_CREATE_ENTITY, i, &channeldpb__create_channel_result_message__descriptor, NULL);
        assert_int_equal(cr->channelid, E0 + i);
        assert_int_equal(cr->ownerconnid, a->id);
        chanq_unpack_free(cr);
        expect_entity_sub(a, E0 + i, CONN_SERVER, 0);
    }
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_limit_closed"), 0);
    sync_list(a, 2000, MT_CREATE_ENTITY); /* still connected, still answered */
}

static void test_spatial_server_recovers(void **state)
{
    start("--server-conn-recoverable");
    it_conn_t *a, *b;
    fill(&a, &b);
    uint32_t old = a->id;
    it_conn_t *c = it_client();
    sub_client(a, c, S0, 4);
    it_log_mark();
    it_close(a); /* no DISCONNECT: the connection just drops */
    /* A successor that authenticates before chanqd saw the drop is a second connection, not a
     * recovery (the old one is still live): wait for the recovery handle. */
    char lost[64];
    snprintf(lost, sizeof(lost), "conn %u lost; recoverable by pit \"sa\"", old);
    it_log_expect(lost);
    for (int n = 2; it_relay && n <= IT_RELAY_NODES; n++) /* every node keeps its handle */
        assert_true(cq_testsrv_log_wait(it_node(n), lost, 10 * IT_TIMEOUT_MS));
    bool recovered = false;
    it_conn_t *a2 = server_pit("sa", 8, &recovered);
    assert_true(recovered);
    /* the old id, or on another relay node its own (ids carry their node) */
    if (!it_relay || a2->id >> 27 == old >> 27)
        assert_int_equal(a2->id, old);
    /* Recovery data for its two cells and its border cell, then RECOVERY_END; no READY. */
    uint32_t seen = 0;
    for (;;) {
        chanq_owned_msg_t m;
        it_recv(a2, &m);
        assert_int_not_equal(m.msg_type, MT_READY);
        bool end = m.msg_type == MT_RECOVERY_END;
        if (m.msg_type == MT_RECOVERY_DATA) {
            assert_true(m.channel_id >= S0 && m.channel_id < S0 + 3);
            seen |= 1u << (m.channel_id - S0);
        }
        chanq_owned_msg_done(&m);
        if (end)
            break;
    }
    assert_int_equal(seen, 0x7);
    /* It owns its cell again: a client message (broadcast 0) reaches the new connection. */
    assert_int_equal(chanq_sync_user_msg(c->s, S0, 0, 100, "hi", 2), 0);
    it_expect_user(a2, S0, 100, 0, 0, c->id, "hi");
    /* The client's subscription survived: the new connection's data reaches it. */
    char v[7];
    assert_int_equal(chanq_sync_data_update(a2->s, S0, URL_CELL, cell_bytes(9, v), 6), 0);
    expect_cell_data(c, S0, cell_bytes(9, v));
    sync_list(b, 10, MT_READY); /* the other server: no READY again */
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_create_list_query_debug), IT_TEST(test_client_gets_cell_data),
    IT_TEST(test_well_known_entity),       IT_TEST(test_server_owns_many_entities),
    IT_TEST(test_spatial_server_recovers),
};

IT_MAIN(tests)
