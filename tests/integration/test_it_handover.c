/* test_it_handover.c - spatial interest, ADJACENT broadcast and entity handover (issue 12,
 * channeld-protocol.md §4.4, §1.8, §4.6) against a real chanqd: world.fds loaded, the 4x1
 * layout plus a Handover section written by the test, two spatial servers.
 *
 * 4x1: cells 65536..65539 cover x in [-2000,-1000), [-1000,0), [0,1000), [1000,2000). Server 0
 * owns 65536/65537 and watches 65538 (border); server 1 owns 65538/65539 and watches 65537. */
#include "it_world.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world.pb-c.h"

#define S0      65536u
#define ENT     524288u
#define URL_ENT "type.googleapis.com/chanqworld.EntityChannelData"
#define STEPS   39 /* x = -1950 + 100 k, k = 1..STEPS: 65536 -> 65537 (k 10) -> 65538 (k 20) ... */

enum {
    MT_HANDOVER = 12,
    MT_REGIONS = 13,
    MT_INTEREST = 14,
    MT_CREATE_ENTITY = 15,
    MT_GROUP_ADD = 16,
    MT_GROUP_REMOVE = 17,
    MT_READY = 18,
    MT_USER = 200,
};
enum { CT_SPATIAL = 4, CT_ENTITY = 5, BC_ADJ = 64 };

static const char LAYOUT[] =
    "{\"SpatialControllerType\": \"Static2DSpatialController\",\n"
    " \"Config\": {\"WorldOffsetX\": -2000, \"WorldOffsetZ\": -500, \"GridWidth\": 1000,\n"
    "  \"GridHeight\": 1000, \"GridCols\": 4, \"GridRows\": 1, \"ServerCols\": 2,\n"
    "  \"ServerRows\": 1, \"ServerInterestBorderSize\": 1},\n"
    " \"Handover\": {\"PositionPath\": \"transform.position\", \"Axes\": \"xyz\",\n"
    "  \"EntitiesField\": \"entities\", \"EntityDataField\": \"entityData\"}}\n";

/* LAYOUT with "SubscribeClients": false: a handover subscribes servers only. */
static const char LAYOUT_NO_CLIENTS[] =
    "{\"SpatialControllerType\": \"Static2DSpatialController\",\n"
    " \"Config\": {\"WorldOffsetX\": -2000, \"WorldOffsetZ\": -500, \"GridWidth\": 1000,\n"
    "  \"GridHeight\": 1000, \"GridCols\": 4, \"GridRows\": 1, \"ServerCols\": 2,\n"
    "  \"ServerRows\": 1, \"ServerInterestBorderSize\": 1},\n"
    " \"Handover\": {\"PositionPath\": \"transform.position\", \"Axes\": \"xyz\",\n"
    "  \"EntitiesField\": \"entities\", \"EntityDataField\": \"entityData\",\n"
    "  \"SubscribeClients\": false}}\n";

static void start_with(const char *layout)
{
    const char *fds = getenv("WORLD_FDS");
    assert_non_null(fds);
    it_start("--channel-data-types", fds, "--spatial-settings", it_file("4x1.json", layout), NULL);
}

/* ---- receiving ------------------------------------------------------------------------ */

static void check_sub(const chanq_owned_msg_t *m, uint32_t chan, uint32_t who, uint32_t ctype,
                      uint32_t chtype, uint32_t interval)
{
    assert_int_equal(m->msg_type, MT_SUB);
    assert_int_equal(m->channel_id, chan);
    assert_int_equal(m->stub_id, 0);
    Channeldpb__SubscribedToChannelResultMessage *r =
        chanq_sync_decode(m, &channeldpb__subscribed_to_channel_result_message__descriptor);
    assert_non_null(r);
    assert_int_equal(r->connid, who);
    assert_int_equal(r->conntype, ctype);
    assert_int_equal(r->channeltype, chtype);
    if (interval) {
        assert_non_null(r->suboptions);
        assert_int_equal(r->suboptions->fanoutintervalms, interval);
    }
    chanq_unpack_free(r);
}

/* A SUB result (stub 0) for chan with the given subscriber, skipping data. */
static void expect_sub0(it_conn_t *c, uint32_t chan, uint32_t who, uint32_t ctype, uint32_t chtype,
                        uint32_t interval)
{
    chanq_owned_msg_t m;
    it_next(c, true, &m);
    if (m.msg_type != MT_SUB || m.channel_id != chan)
        print_error("conn %u: expected SUB on %u, got type %u chan %u\n", c->id, chan, m.msg_type,
                    m.channel_id);
    check_sub(&m, chan, who, ctype, chtype, interval);
    chanq_owned_msg_done(&m);
}

/* n SUB results (stub 0) on cells first..first+n-1 in any order (they leave different workers),
 * each for subscriber who, with intervals iv[cell - first] (0: not checked). */
static void expect_cell_subs(it_conn_t *c, uint32_t first, uint32_t n, uint32_t who, uint32_t ctype,
                             const uint32_t *iv)
{
    bool seen[8] = {0};
    for (uint32_t i = 0; i < n; i++) {
        chanq_owned_msg_t m;
        it_next(c, true, &m);
        assert_int_equal(m.msg_type, MT_SUB);
        assert_in_range(m.channel_id, first, first + n - 1);
        uint32_t k = m.channel_id - first;
        assert_false(seen[k]);
        seen[k] = true;
        check_sub(&m, m.channel_id, who, ctype, CT_SPATIAL, iv ? iv[k] : 0);
        chanq_owned_msg_done(&m);
    }
}

/* m is an UNSUB result with stub for cl on one of cells[0..n); returns the cell's index. */
static int check_unsub(const chanq_owned_msg_t *m, uint32_t stub, const uint32_t *cells, uint32_t n,
                       uint32_t who)
{
    assert_int_equal(m->msg_type, MT_UNSUB);
    assert_int_equal(m->stub_id, stub);
    int k = -1;
    for (uint32_t i = 0; i < n; i++)
        if (cells[i] == m->channel_id)
            k = (int)i;
    assert_true(k >= 0);
    Channeldpb__UnsubscribedFromChannelResultMessage *r =
        chanq_sync_decode(m, &channeldpb__unsubscribed_from_channel_result_message__descriptor);
    assert_non_null(r);
    assert_int_equal(r->connid, who);
    assert_int_equal(r->conntype, CONN_CLIENT);
    assert_int_equal(r->channeltype, CT_SPATIAL);
    chanq_unpack_free(r);
    return k;
}

/* n UNSUB results with stub for who, one per cell of cells (any order), data skipped. */
static void expect_unsubs(it_conn_t *c, uint32_t stub, const uint32_t *cells, uint32_t n,
                          uint32_t who)
{
    bool seen[8] = {0};
    for (uint32_t i = 0; i < n; i++) {
        chanq_owned_msg_t m;
        it_next(c, true, &m);
        int k = check_unsub(&m, stub, cells, n, who);
        assert_false(seen[k]);
        seen[k] = true;
        chanq_owned_msg_done(&m);
    }
}

/* ---- sending ---------------------------------------------------------------------------- */

static void expect_created(it_conn_t *s, uint32_t stub, uint32_t a, uint32_t b)
{
    Channeldpb__CreateSpatialChannelsResultMessage *r =
        it_expect_skip(s, MT_CREATE_SPATIAL, 0, stub,
                       &channeldpb__create_spatial_channels_result_message__descriptor);
    assert_int_equal(r->n_spatialchannelid, 2);
    assert_int_equal(r->spatialchannelid[0], a);
    assert_int_equal(r->spatialchannelid[1], b);
    assert_int_equal(r->ownerconnid, s->id);
    chanq_unpack_free(r);
}

static void expect_ready(it_conn_t *s)
{
    Channeldpb__SpatialChannelsReadyMessage *r =
        it_expect_skip(s, MT_READY, 0, 0, &channeldpb__spatial_channels_ready_message__descriptor);
    assert_int_equal(r->serverindex, 2);
    assert_int_equal(r->servercount, 2);
    chanq_unpack_free(r);
}

/* Two servers take the two slots of 4x1 (the order B's controller documents). */
static void fill_grid(it_conn_t **s0, it_conn_t **s1)
{
    *s0 = it_server();
    *s1 = it_server();
    it_create_spatial(*s0, 7);
    expect_created(*s0, 7, S0, S0 + 1);
    expect_sub0(*s0, S0, (*s0)->id, CONN_SERVER, CT_SPATIAL, 20);
    expect_sub0(*s0, S0 + 1, (*s0)->id, CONN_SERVER, CT_SPATIAL, 20);
    chanq_unpack_free(it_expect_skip(*s0, MT_REGIONS, 0, 7, NULL));
    it_create_spatial(*s1, 9);
    expect_sub0(*s1, S0 + 1, (*s1)->id, CONN_SERVER, CT_SPATIAL, 20);
    expect_ready(*s1);
    expect_created(*s1, 9, S0 + 2, S0 + 3);
    expect_sub0(*s1, S0 + 2, (*s1)->id, CONN_SERVER, CT_SPATIAL, 20);
    expect_sub0(*s1, S0 + 3, (*s1)->id, CONN_SERVER, CT_SPATIAL, 20);
    chanq_unpack_free(it_expect_skip(*s1, MT_REGIONS, 0, 9, NULL));
    expect_sub0(*s0, S0 + 2, (*s0)->id, CONN_SERVER, CT_SPATIAL, 20);
    expect_ready(*s0);
}

/* Every test's start: chanqd with the layout, both servers holding their slots, one client. */
typedef struct world {
    it_conn_t *s0, *s1, *cl;
} world_t;

static world_t world(const char *layout)
{
    world_t w;
    start_with(layout);
    fill_grid(&w.s0, &w.s1);
    w.cl = it_client();
    return w;
}

/* UPDATE_SPATIAL_INTEREST for client `who`, sent by s on GLOBAL. */
static void sphere_interest(it_conn_t *s, uint32_t stub, uint32_t who, double x, double r)
{
    Channeldpb__SpatialInfo ctr = CHANNELDPB__SPATIAL_INFO__INIT;
    ctr.x = x;
    Channeldpb__SphereAOI sp = CHANNELDPB__SPHERE_AOI__INIT;
    sp.center = &ctr;
    sp.radius = r;
    Channeldpb__SpatialInterestQuery q = CHANNELDPB__SPATIAL_INTEREST_QUERY__INIT;
    q.sphereaoi = &sp;
    Channeldpb__UpdateSpatialInterestMessage m = CHANNELDPB__UPDATE_SPATIAL_INTEREST_MESSAGE__INIT;
    m.connid = who;
    m.query = &q;
    it_send(s, 0, 0, stub, MT_INTEREST, &m.base);
}

static void spots_interest(it_conn_t *s, uint32_t who, const double *xs, size_t n)
{
    Channeldpb__SpatialInfo pts[4], *pp[4];
    for (size_t i = 0; i < n; i++) {
        channeldpb__spatial_info__init(&pts[i]);
        pts[i].x = xs[i];
        pp[i] = &pts[i];
    }
    Channeldpb__SpotsAOI sp = CHANNELDPB__SPOTS_AOI__INIT;
    sp.n_spots = n;
    sp.spots = pp;
    Channeldpb__SpatialInterestQuery q = CHANNELDPB__SPATIAL_INTEREST_QUERY__INIT;
    q.spotsaoi = &sp;
    Channeldpb__UpdateSpatialInterestMessage m = CHANNELDPB__UPDATE_SPATIAL_INTEREST_MESSAGE__INIT;
    m.connid = who;
    m.query = &q;
    it_send(s, 0, 0, 0, MT_INTEREST, &m.base);
}

/* s0 puts entity id's reference into cell's data. */
static void put_ref(it_conn_t *s, uint32_t cell, uint32_t id, uint32_t owner)
{
    it_put_cell_ref(s, cell, id, "tank", owner);
    assert_int_equal(chanq_sync_flush(s->s, IT_TIMEOUT_MS), 0);
}

/* EntityChannelData at x; seq > 0 appends seq to the trail. */
static uint8_t *entity_data(float x, uint32_t seq, size_t *len)
{
    Chanqworld__Vector3f pos = CHANQWORLD__VECTOR3F__INIT;
    pos.x = x;
    Chanqworld__TransformState tr = CHANQWORLD__TRANSFORM_STATE__INIT;
    tr.position = &pos;
    Chanqworld__EntityChannelData d = CHANQWORLD__ENTITY_CHANNEL_DATA__INIT;
    d.transform = &tr;
    d.name = seq ? "" : "tank";
    d.seq = seq;
    uint32_t trail[1] = {seq};
    d.n_trail = seq ? 1 : 0;
    d.trail = trail;
    return it_pack(&d.base, len);
}

/* s (the owner of x's cell) creates entity id on GLOBAL at x; consumes the result and its SUB
 * result. */
static void create_entity(it_conn_t *s, uint32_t id, float x)
{
    size_t len;
    uint8_t *v = entity_data(x, 0, &len);
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    any.type_url = URL_ENT;
    any.value.data = v;
    any.value.len = len;
    Channeldpb__CreateEntityChannelMessage m = CHANNELDPB__CREATE_ENTITY_CHANNEL_MESSAGE__INIT;
    m.entityid = id;
    m.metadata = "tank";
    m.data = &any;
    it_send(s, 0, 0, 31, MT_CREATE_ENTITY, &m.base);
    free(v);
    /* §4.5 step 3: created on GLOBAL with a position on the grid (4x1: x from -2000, cells of
     * 1000), the reply comes with channelId = the position's cell. */
    uint32_t cell = 0x10000u + (uint32_t)((x + 2000.0f) / 1000.0f);
    Channeldpb__CreateChannelResultMessage *r = it_expect_skip(
        s, MT_CREATE_ENTITY, cell, 31, &channeldpb__create_channel_result_message__descriptor);
    assert_int_equal(r->channelid, id);
    assert_int_equal(r->ownerconnid, s->id);
    assert_int_equal(r->channeltype, CT_ENTITY);
    chanq_unpack_free(r);
    expect_sub0(s, id, s->id, CONN_SERVER, CT_ENTITY, 0);
}

/* The owner (or a server) moves ENT to x with seq; contextConnId ctx. */
static void move(it_conn_t *s, float x, uint32_t seq, uint32_t ctx)
{
    size_t len;
    uint8_t *v = entity_data(x, seq, &len);
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    any.type_url = URL_ENT;
    any.value.data = v;
    any.value.len = len;
    Channeldpb__ChannelDataUpdateMessage u = CHANNELDPB__CHANNEL_DATA_UPDATE_MESSAGE__INIT;
    u.data = &any;
    u.contextconnid = ctx;
    it_send(s, ENT, 0, 0, MT_DATA, &u.base);
    free(v);
}

/* ENTITY_GROUP_ADD/REMOVE on ENT's channel for member. */
static void group(it_conn_t *s, Channeldpb__EntityGroupType type, bool add, uint32_t member)
{
    uint32_t ids[1] = {member};
    if (add) {
        Channeldpb__AddEntityGroupMessage m = CHANNELDPB__ADD_ENTITY_GROUP_MESSAGE__INIT;
        m.type = type;
        m.n_entitiestoadd = 1;
        m.entitiestoadd = ids;
        it_send(s, ENT, 0, 0, MT_GROUP_ADD, &m.base);
    } else {
        Channeldpb__RemoveEntityGroupMessage m = CHANNELDPB__REMOVE_ENTITY_GROUP_MESSAGE__INIT;
        m.type = type;
        m.n_entitiestoremove = 1;
        m.entitiestoremove = ids;
        it_send(s, ENT, 0, 0, MT_GROUP_REMOVE, &m.base);
    }
}

/* ---- checking handovers ----------------------------------------------------------------- */

/* The exact bytes of SpatialChannelData{entities: {id: ref}} (owner = the ref's owner). */
static uint8_t *ref_bytes(uint32_t id, uint32_t owner, size_t *len)
{
    return it_cell_ref(id, "tank", owner, len);
}

/* Decodes m as a handover src -> dst with contextConnId ctx; returns it (owned). */
static Channeldpb__ChannelDataHandoverMessage *check_ho(const chanq_owned_msg_t *m, uint32_t src,
                                                        uint32_t dst, uint32_t ctx)
{
    if (m->msg_type != MT_HANDOVER || m->channel_id != dst)
        print_error("expected HANDOVER on %u, got type %u chan %u\n", dst, m->msg_type,
                    m->channel_id);
    assert_int_equal(m->msg_type, MT_HANDOVER);
    assert_int_equal(m->channel_id, dst);
    assert_int_equal(m->stub_id, 0);
    Channeldpb__ChannelDataHandoverMessage *h =
        chanq_sync_decode(m, &channeldpb__channel_data_handover_message__descriptor);
    assert_non_null(h);
    assert_int_equal(h->srcchannelid, src);
    assert_int_equal(h->dstchannelid, dst);
    assert_int_equal(h->contextconnid, ctx);
    return h;
}

/* A handover whose data is exactly ENT's reference (a subscriber that already had ENT). */
static void check_ho_ref(const chanq_owned_msg_t *m, uint32_t src, uint32_t dst, uint32_t ctx,
                         uint32_t id, uint32_t owner)
{
    Channeldpb__ChannelDataHandoverMessage *h = check_ho(m, src, dst, ctx);
    assert_non_null(h->data);
    assert_string_equal(h->data->type_url, URL_CELL);
    size_t len;
    uint8_t *want = ref_bytes(id, owner, &len);
    assert_int_equal(h->data->value.len, len);
    assert_memory_equal(h->data->value.data, want, len);
    free(want);
    chanq_unpack_free(h);
}

/* A handover with no data (a subscriber of the source only). */
static void check_ho_ids(const chanq_owned_msg_t *m, uint32_t src, uint32_t dst, uint32_t ctx)
{
    Channeldpb__ChannelDataHandoverMessage *h = check_ho(m, src, dst, ctx);
    assert_null(h->data);
    chanq_unpack_free(h);
}

/* A handover to a new subscriber: entity id's reference plus its full data, which must be the
 * walk's state after some update k (trail 1..k, seq k, at x0 + 100 k). Returns k. */
static uint32_t check_ho_full(const chanq_owned_msg_t *m, uint32_t src, uint32_t dst, uint32_t ctx,
                              uint32_t id, uint32_t owner, float x0)
{
    Channeldpb__ChannelDataHandoverMessage *h = check_ho(m, src, dst, ctx);
    assert_non_null(h->data);
    assert_string_equal(h->data->type_url, URL_CELL);
    Chanqworld__SpatialChannelData *d =
        chanqworld__spatial_channel_data__unpack(NULL, h->data->value.len, h->data->value.data);
    assert_non_null(d);
    assert_int_equal(d->n_entities, 1);
    assert_int_equal(d->entities[0]->key, id);
    Chanqworld__SpatialEntityState *st = d->entities[0]->value;
    assert_non_null(st->objref);
    assert_int_equal(st->objref->netid, id);
    assert_string_equal(st->objref->classpath, "tank");
    assert_int_equal(st->objref->owningconnid, owner);
    assert_non_null(st->entitydata);
    assert_string_equal(st->entitydata->type_url, URL_ENT);
    Chanqworld__EntityChannelData *e = chanqworld__entity_channel_data__unpack(
        NULL, st->entitydata->value.len, st->entitydata->value.data);
    assert_non_null(e);
    uint32_t k = e->seq;
    assert_int_equal(e->n_trail, k);
    for (uint32_t i = 0; i < k; i++)
        assert_int_equal(e->trail[i], i + 1);
    assert_string_equal(e->name, "tank");
    assert_non_null(e->transform);
    assert_non_null(e->transform->position);
    assert_true(e->transform->position->x == x0 + 100.0f * (float)k);
    chanqworld__entity_channel_data__free_unpacked(e, NULL);
    chanqworld__spatial_channel_data__free_unpacked(d, NULL);
    chanq_unpack_free(h);
    return k;
}

/* ---- the client's view of the walk ------------------------------------------------------ */

typedef struct view {
    uint32_t trail[STEPS + 8];
    uint32_t n;         /* trail elements seen so far, in arrival order */
    uint32_t handovers; /* CHANNEL_DATA_HANDOVERs seen */
    bool subscribed;    /* the SUB result for ENT arrived */
} view_t;

static void view_trail(view_t *v, const uint32_t *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        assert_true(v->n < STEPS + 8);
        v->trail[v->n++] = t[i];
    }
}

/* ENT's fan-out: appends its trail. A fan-out before the subscription is a failure. */
static void view_data(view_t *v, const chanq_owned_msg_t *m)
{
    assert_true(v->subscribed);
    assert_true(v->handovers > 0); /* the handover with the full data comes first */
    Channeldpb__ChannelDataUpdateMessage *u =
        chanq_sync_decode(m, &channeldpb__channel_data_update_message__descriptor);
    assert_non_null(u);
    assert_non_null(u->data);
    assert_string_equal(u->data->type_url, URL_ENT);
    Chanqworld__EntityChannelData *e =
        chanqworld__entity_channel_data__unpack(NULL, u->data->value.len, u->data->value.data);
    assert_non_null(e);
    view_trail(v, e->trail, e->n_trail);
    chanqworld__entity_channel_data__free_unpacked(e, NULL);
    chanq_unpack_free(u);
}

/* One message of the client during the walk. Cell fan-outs (their own data) are ignored. */
static void view_msg(view_t *v, it_conn_t *cl, uint32_t ctx, uint32_t owner0)
{
    static const uint32_t src[3] = {S0, S0 + 1, S0 + 2};
    chanq_owned_msg_t m;
    it_next(cl, false, &m);
    if (m.msg_type == MT_DATA && m.channel_id != ENT) {
        assert_in_range(m.channel_id, S0, S0 + 3);
    } else if (m.msg_type == MT_DATA) {
        view_data(v, &m);
    } else if (m.msg_type == MT_SUB) {
        assert_false(v->subscribed); /* only the first handover subscribes it */
        assert_int_equal(v->handovers, 0);
        check_sub(&m, ENT, cl->id, CONN_CLIENT, CT_ENTITY, 0);
        v->subscribed = true;
    } else {
        assert_true(v->subscribed);
        assert_in_range(v->handovers, 0, 2);
        uint32_t s = src[v->handovers];
        if (v->handovers == 0) {
            uint32_t k = check_ho_full(&m, s, s + 1, ctx, ENT, owner0, -1950.0f);
            assert_in_range(k, 10, 20); /* k 10 moved it; s1 sends k 21 after 65538 */
            for (uint32_t i = 1; i <= k; i++)
                view_trail(v, &i, 1);
        } else {
            check_ho_ref(&m, s, s + 1, ctx, ENT, owner0);
        }
        v->handovers++;
    }
    chanq_owned_msg_done(&m);
}

/* ---- tests ------------------------------------------------------------------------------ */

/* A sphere around x -1500 (cell 65536), radius 2500: every cell with its damped interval; the
 * owners get copies. A second, smaller update unsubscribes the cells it no longer covers with
 * the update's stub; an invalid query changes nothing. */
static void test_interest_sphere(void **state)
{
    (void)state;
    world_t w = world(LAYOUT);
    it_conn_t *s0 = w.s0, *s1 = w.s1, *cl = w.cl;
    sphere_interest(s0, 21, cl->id, -1500, 2500);
    static const uint32_t iv[4] = {20, 50, 100, 100};
    expect_cell_subs(cl, S0, 4, cl->id, CONN_CLIENT, iv);
    expect_cell_subs(s0, S0, 2, cl->id, CONN_CLIENT, iv);
    expect_cell_subs(s1, S0 + 2, 2, cl->id, CONN_CLIENT, iv + 2);
    /* Radius 400 keeps 65536 only (silently: same interval); the others are left with the
     * request's stub, the owners get copies with stub 0. */
    sphere_interest(s0, 22, cl->id, -1500, 400);
    static const uint32_t gone[3] = {S0 + 1, S0 + 2, S0 + 3};
    expect_unsubs(cl, 22, gone, 3, cl->id);
    expect_unsubs(s0, 0, gone, 1, cl->id);
    expect_unsubs(s1, 0, gone + 1, 2, cl->id);
    /* A sphere without its centre changes nothing (§8.2); the next valid one moves the client
     * from 65536 to 65539: its messages come first, nothing with stub 23 came before. */
    Channeldpb__SphereAOI sp = CHANNELDPB__SPHERE_AOI__INIT;
    sp.radius = 400;
    Channeldpb__SpatialInterestQuery q = CHANNELDPB__SPATIAL_INTEREST_QUERY__INIT;
    q.sphereaoi = &sp;
    Channeldpb__UpdateSpatialInterestMessage bad =
        CHANNELDPB__UPDATE_SPATIAL_INTEREST_MESSAGE__INIT;
    bad.connid = cl->id;
    bad.query = &q;
    it_send(s0, 0, 0, 23, MT_INTEREST, &bad.base);
    sphere_interest(s0, 24, cl->id, 1500, 400);
    static const uint32_t first[1] = {S0};
    chanq_owned_msg_t m[2];
    it_next(cl, true, &m[0]);
    it_next(cl, true, &m[1]);
    int u = m[0].msg_type == MT_UNSUB ? 0 : 1; /* two workers: either order */
    check_unsub(&m[u], 24, first, 1, cl->id);
    check_sub(&m[1 - u], S0 + 3, cl->id, CONN_CLIENT, CT_SPATIAL, 20);
    chanq_owned_msg_done(&m[0]);
    chanq_owned_msg_done(&m[1]);
    expect_unsubs(s0, 0, first, 1, cl->id);
    expect_sub0(s1, S0 + 3, cl->id, CONN_CLIENT, CT_SPATIAL, 20);
}

/* Walks ENT from x -1950 to 1950 across the four cells and both servers. */
static void test_handover_walk(void **state)
{
    (void)state;
    world_t w = world(LAYOUT);
    it_conn_t *s0 = w.s0, *s1 = w.s1, *cl = w.cl;
    put_ref(s0, S0, ENT, s0->id);
    sphere_interest(s0, 21, cl->id, -1500, 2500);
    expect_cell_subs(cl, S0, 4, cl->id, CONN_CLIENT, NULL);
    expect_cell_subs(s0, S0, 2, cl->id, CONN_CLIENT, NULL);
    expect_cell_subs(s1, S0 + 2, 2, cl->id, CONN_CLIENT, NULL);
    create_entity(s0, ENT, -1950.0f);
    view_t v = {0};
    for (uint32_t k = 1; k <= STEPS; k++) {
        move(k <= 20 ? s0 : s1, -1950.0f + 100.0f * (float)k, k, cl->id);
        if (k != 20)
            continue;
        /* s1 owns ENT once it reaches 65538: it gets 65536->65537 (a new subscriber: its SUB
         * result and the full data), then 65537->65538 (the reference only). */
        expect_sub0(s1, ENT, s1->id, CONN_SERVER, CT_ENTITY, 0);
        chanq_owned_msg_t m;
        it_next(s1, true, &m);
        assert_in_range(check_ho_full(&m, S0, S0 + 1, cl->id, ENT, s0->id, -1950.0f), 10, 20);
        chanq_owned_msg_done(&m);
        it_next(s1, true, &m);
        check_ho_ref(&m, S0 + 1, S0 + 2, cl->id, ENT, s0->id);
        chanq_owned_msg_done(&m);
    }
    while (v.handovers < 3 || v.n < STEPS)
        view_msg(&v, cl, cl->id, s0->id);
    for (uint32_t i = 0; i < v.n; i++)
        assert_int_equal(v.trail[i], i + 1);
    assert_int_equal(v.n, STEPS);
    /* s0, the owner at 65536->65537, gets a copy of the two SUB results (as for any SUB), then
     * 65536->65537 and 65537->65538 as a subscriber of both, 65538->65539 ids only. */
    chanq_owned_msg_t m;
    bool seen_s1 = false, seen_cl = false;
    for (int i = 0; i < 2; i++) {
        it_next(s0, true, &m);
        Channeldpb__SubscribedToChannelResultMessage *r =
            chanq_sync_decode(&m, &channeldpb__subscribed_to_channel_result_message__descriptor);
        assert_non_null(r);
        bool is_s1 = r->connid == s1->id;
        chanq_unpack_free(r);
        check_sub(&m, ENT, is_s1 ? s1->id : cl->id, is_s1 ? CONN_SERVER : CONN_CLIENT, CT_ENTITY,
                  0);
        assert_false(is_s1 ? seen_s1 : seen_cl);
        *(is_s1 ? &seen_s1 : &seen_cl) = true;
        chanq_owned_msg_done(&m);
    }
    it_next(s0, true, &m);
    check_ho_ref(&m, S0, S0 + 1, cl->id, ENT, s0->id);
    chanq_owned_msg_done(&m);
    it_next(s0, true, &m);
    check_ho_ref(&m, S0 + 1, S0 + 2, cl->id, ENT, s0->id);
    chanq_owned_msg_done(&m);
    it_next(s0, true, &m);
    check_ho_ids(&m, S0 + 2, S0 + 3, cl->id);
    chanq_owned_msg_done(&m);
    it_next(s1, true, &m);
    check_ho_ref(&m, S0 + 2, S0 + 3, cl->id, ENT, s0->id);
    chanq_owned_msg_done(&m);
    /* The owner is s1 now: the client's message for the owner goes there. */
    assert_int_equal(chanq_sync_user_msg(cl->s, ENT, 0, MT_USER, "hi", 2), 0);
    assert_int_equal(chanq_sync_flush(cl->s, IT_TIMEOUT_MS), 0);
    it_next(s1, true, &m);
    assert_int_equal(m.msg_type, MT_USER);
    assert_int_equal(m.channel_id, ENT);
    Channeldpb__ServerForwardMessage *f =
        chanq_sync_decode(&m, &channeldpb__server_forward_message__descriptor);
    assert_non_null(f);
    assert_int_equal(f->clientconnid, cl->id);
    assert_int_equal(f->payload.len, 2);
    assert_memory_equal(f->payload.data, "hi", 2);
    chanq_unpack_free(f);
    chanq_owned_msg_done(&m);
    /* s0 kept its subscription to ENT (it watches 65538): a last update reaches it, after
     * nothing but fan-outs (no UNSUB result). */
    move(s1, 1950.0f, STEPS + 1, cl->id);
    for (bool last = false; !last;) {
        it_next(s0, false, &m);
        assert_int_equal(m.msg_type, MT_DATA);
        if (m.channel_id == ENT) {
            Channeldpb__ChannelDataUpdateMessage *u =
                chanq_sync_decode(&m, &channeldpb__channel_data_update_message__descriptor);
            assert_non_null(u);
            assert_non_null(u->data);
            Chanqworld__EntityChannelData *e = chanqworld__entity_channel_data__unpack(
                NULL, u->data->value.len, u->data->value.data);
            assert_non_null(e);
            last = e->seq == STEPS + 1;
            chanqworld__entity_channel_data__free_unpacked(e, NULL);
            chanq_unpack_free(u);
        }
        chanq_owned_msg_done(&m);
    }
}

/* A LOCK group keeps ENT in 65537 (no handover, s0 stays the owner), and the refusal is not
 * retried on the next update in the same cell; once the group is gone the next update hands it
 * over (contextConnId tells which update did). */
static void test_locked_group_stays(void **state)
{
    (void)state;
    world_t w = world(LAYOUT);
    it_conn_t *s0 = w.s0, *s1 = w.s1, *cl = w.cl;
    put_ref(s0, S0 + 1, ENT, s0->id);
    create_entity(s0, ENT, -50.0f);
    group(s0, CHANNELDPB__ENTITY_GROUP_TYPE__LOCK, true, ENT);
    it_log_mark();
    move(s0, 50.0f, 1, 0);
    it_log_expect("entity 524288: 65537 -> 65538 refused: locked");
    move(s0, 150.0f, 2, 0);
    /* Still s0's: the client's message for the owner reaches s0. */
    assert_int_equal(chanq_sync_user_msg(cl->s, ENT, 0, MT_USER, "one", 3), 0);
    assert_int_equal(chanq_sync_flush(cl->s, IT_TIMEOUT_MS), 0);
    chanq_owned_msg_t m;
    it_next(s0, true, &m);
    assert_int_equal(m.msg_type, MT_USER);
    assert_int_equal(m.channel_id, ENT);
    chanq_owned_msg_done(&m);
    group(s0, CHANNELDPB__ENTITY_GROUP_TYPE__LOCK, false, ENT);
    move(s0, 250.0f, 3, cl->id);
    /* The first handover s0 sees is the third update's: the locked ones handed nothing over. */
    it_next(s0, true, &m);
    check_ho_ref(&m, S0 + 1, S0 + 2, cl->id, ENT, s0->id);
    chanq_owned_msg_done(&m);
    assert_int_equal(it_log_count("refused: locked"), 0);
    /* s1 was subscribed by the handover (new: the full data, trail 1..3). */
    expect_sub0(s1, ENT, s1->id, CONN_SERVER, CT_ENTITY, 0);
    it_next(s1, true, &m);
    assert_int_equal(check_ho_full(&m, S0 + 1, S0 + 2, cl->id, ENT, s0->id, -50.0f), 3);
    chanq_owned_msg_done(&m);
    assert_int_equal(chanq_sync_user_msg(cl->s, ENT, 0, MT_USER, "two", 3), 0);
    assert_int_equal(chanq_sync_flush(cl->s, IT_TIMEOUT_MS), 0);
    it_next(s1, true, &m);
    assert_int_equal(m.msg_type, MT_USER);
    assert_int_equal(m.channel_id, ENT);
    chanq_owned_msg_done(&m);
}

/* A HANDOVER group moves together: ENT's move hands ENT and ENT+1 over from 65537 to 65538, one
 * CHANNEL_DATA_HANDOVER per entity (each with its own reference, and its own full data for the
 * new subscriber s1), and s1 owns both afterwards. */
static void test_group_handover(void **state)
{
    (void)state;
    world_t w = world(LAYOUT);
    it_conn_t *s0 = w.s0, *s1 = w.s1, *cl = w.cl;
    put_ref(s0, S0 + 1, ENT, s0->id);
    put_ref(s0, S0 + 1, ENT + 1, s0->id);
    create_entity(s0, ENT, -50.0f);
    create_entity(s0, ENT + 1, -40.0f);
    group(s0, CHANNELDPB__ENTITY_GROUP_TYPE__HANDOVER, true, ENT + 1);
    move(s0, 50.0f, 1, cl->id);
    /* s1: per entity its SUB result, then its handover (the entities' workers interleave). */
    int subbed[2] = {0, 0}, handed[2] = {0, 0};
    for (int i = 0; i < 4; i++) {
        chanq_owned_msg_t m;
        it_next(s1, true, &m);
        if (m.msg_type == MT_SUB) {
            uint32_t k = m.channel_id - ENT;
            assert_in_range(k, 0, 1);
            check_sub(&m, ENT + k, s1->id, CONN_SERVER, CT_ENTITY, 0);
            subbed[k]++;
        } else {
            Channeldpb__ChannelDataHandoverMessage *h = check_ho(&m, S0 + 1, S0 + 2, cl->id);
            Chanqworld__SpatialChannelData *d = chanqworld__spatial_channel_data__unpack(
                NULL, h->data->value.len, h->data->value.data);
            assert_non_null(d);
            assert_int_equal(d->n_entities, 1);
            uint32_t k = d->entities[0]->key - ENT;
            assert_in_range(k, 0, 1);
            chanqworld__spatial_channel_data__free_unpacked(d, NULL);
            chanq_unpack_free(h);
            assert_int_equal(subbed[k], 1); /* the subscription first */
            /* ENT: after update 1 at x 50; ENT+1: as created at x -40 (no update). */
            assert_int_equal(
                check_ho_full(&m, S0 + 1, S0 + 2, cl->id, ENT + k, s0->id, k ? -40.0f : -50.0f),
                k ? 0 : 1);
            handed[k]++;
        }
        chanq_owned_msg_done(&m);
    }
    assert_int_equal(handed[0], 1);
    assert_int_equal(handed[1], 1);
    /* s0 watches 65538: one handover per entity with its reference only. */
    bool seen[2] = {false, false};
    for (int i = 0; i < 2; i++) {
        chanq_owned_msg_t m;
        it_next(s0, true, &m);
        Channeldpb__ChannelDataHandoverMessage *h = check_ho(&m, S0 + 1, S0 + 2, cl->id);
        Chanqworld__SpatialChannelData *d =
            chanqworld__spatial_channel_data__unpack(NULL, h->data->value.len, h->data->value.data);
        assert_non_null(d);
        uint32_t k = d->entities[0]->key - ENT;
        assert_in_range(k, 0, 1);
        assert_false(seen[k]);
        seen[k] = true;
        chanqworld__spatial_channel_data__free_unpacked(d, NULL);
        chanq_unpack_free(h);
        check_ho_ref(&m, S0 + 1, S0 + 2, cl->id, ENT + k, s0->id);
        chanq_owned_msg_done(&m);
    }
    /* Both are s1's now. */
    for (uint32_t k = 0; k < 2; k++) {
        assert_int_equal(chanq_sync_user_msg(cl->s, ENT + k, 0, MT_USER, "x", 1), 0);
        assert_int_equal(chanq_sync_flush(cl->s, IT_TIMEOUT_MS), 0);
        chanq_owned_msg_t m;
        it_next(s1, true, &m);
        assert_int_equal(m.msg_type, MT_USER);
        assert_int_equal(m.channel_id, ENT + k);
        chanq_owned_msg_done(&m);
    }
}

/* The next user message of c (data skipped): ServerForwardMessage{0, payload} on chan. */
static void expect_fwd(it_conn_t *c, uint32_t chan, uint32_t bc, uint32_t client,
                       const char *payload)
{
    chanq_owned_msg_t m;
    it_next(c, true, &m);
    if (m.msg_type != MT_USER + 100 || m.channel_id != chan)
        print_error("conn %u: expected user msg on %u (%s), got type %u chan %u\n", c->id, chan,
                    payload, m.msg_type, m.channel_id);
    assert_int_equal(m.msg_type, MT_USER + 100);
    assert_int_equal(m.channel_id, chan);
    assert_int_equal(m.broadcast, bc);
    Channeldpb__ServerForwardMessage *f =
        chanq_sync_decode(&m, &channeldpb__server_forward_message__descriptor);
    assert_non_null(f);
    assert_int_equal(f->clientconnid, client);
    assert_int_equal(f->payload.len, strlen(payload));
    assert_memory_equal(f->payload.data, payload, f->payload.len);
    chanq_unpack_free(f);
    chanq_owned_msg_done(&m);
}

static void spots_for(it_conn_t *s0, it_conn_t *s1, it_conn_t *cl, const double *xs, size_t n)
{
    spots_interest(s0, cl->id, xs, n);
    uint32_t first = (uint32_t)((xs[0] + 2000) / 1000) + S0;
    expect_cell_subs(cl, first, (uint32_t)n, cl->id, CONN_CLIENT, NULL);
    uint32_t mine = 0, theirs = 0;
    for (uint32_t k = first; k < first + n; k++)
        *(k < S0 + 2 ? &mine : &theirs) += 1;
    if (mine)
        expect_cell_subs(s0, first, mine, cl->id, CONN_CLIENT, NULL);
    if (theirs)
        expect_cell_subs(s1, first + mine, theirs, cl->id, CONN_CLIENT, NULL);
}

/* ADJACENT_CHANNELS from 65537 reaches the subscribers of 65536..65538 once each (bit 8: not
 * those of 65537 only); filters skip the sender, servers or clients. A marker sent to each
 * connection through the same channel's worker after the broadcasts shows what did not come. */
static void test_adjacent(void **state)
{
    (void)state;
    world_t w = world(LAYOUT);
    it_conn_t *s0 = w.s0, *s1 = w.s1;
    it_conn_t *a = w.cl, *b = it_client(), *cc = it_client(), *d = it_client();
    static const double xa[] = {-1500}, xb[] = {1500}, xc[] = {-500}, xd[] = {-1500, -500, 500};
    spots_for(s0, s1, a, xa, 1);
    spots_for(s0, s1, b, xb, 1);
    spots_for(s0, s1, cc, xc, 1);
    spots_for(s0, s1, d, xd, 3);
    it_conn_t *all[6] = {s0, s1, a, b, cc, d};
    static const struct {
        uint32_t bc;
        const char *payload;
        bool to[6]; /* s0 s1 a b cc d */
    } rounds[] = {
        {BC_ADJ, "adj", {1, 1, 1, 0, 1, 1}},
        {BC_ADJ | BC_BUT_OWNER, "adj-no-centre", {1, 1, 1, 0, 0, 1}},
        {BC_ADJ | BC_BUT_SENDER | BC_BUT_SERVER, "adj-clients", {0, 0, 1, 0, 1, 1}},
        {BC_ADJ | BC_BUT_SENDER | BC_BUT_CLIENT, "adj-servers", {0, 1, 0, 0, 0, 0}},
    };
    for (size_t r = 0; r < sizeof(rounds) / sizeof(rounds[0]); r++) {
        it_sfwd(s0, S0 + 1, rounds[r].bc, MT_USER + 100, 0, rounds[r].payload);
        for (int i = 0; i < 6; i++)
            it_sfwd(s0, S0 + 1, BC_SINGLE, MT_USER + 100, all[i]->id, "mark");
        for (int i = 0; i < 6; i++) {
            if (rounds[r].to[i])
                expect_fwd(all[i], S0 + 1, rounds[r].bc, 0, rounds[r].payload);
            expect_fwd(all[i], S0 + 1, BC_SINGLE, all[i]->id, "mark");
        }
    }
}

/* s subscribes conn `who` to ENT; who must get a NEW subscription's result (so it was not
 * subscribed before: a re-subscription with the same access answers nothing). */
static void expect_not_subscribed(it_conn_t *s, it_conn_t *who)
{
    Channeldpb__SubscribedToChannelMessage m = CHANNELDPB__SUBSCRIBED_TO_CHANNEL_MESSAGE__INIT;
    m.connid = who->id;
    it_send(s, ENT, 0, 0, MT_SUB, &m.base);
    expect_sub0(who, ENT, who->id, CONN_CLIENT, CT_ENTITY, 20);
}

/* A client watching only 65537 (spots) is subscribed to ENT by the handover that brings ENT into
 * 65537 (its SUB result, then the handover with ENT's full data), and loses that subscription
 * (an ids-only handover and an UNSUB result) when ENT leaves for 65538, which it does not watch:
 * an entity that left every cell a client watches leaves the client. */
static void test_handover_subscription_follows_interest(void **state)
{
    (void)state;
    world_t w = world(LAYOUT);
    it_conn_t *s0 = w.s0, *s1 = w.s1, *cl = w.cl;
    const double at[1] = {-500};
    spots_interest(s0, cl->id, at, 1);
    expect_sub0(cl, S0 + 1, cl->id, CONN_CLIENT, CT_SPATIAL, 20);
    expect_sub0(s0, S0 + 1, cl->id, CONN_CLIENT, CT_SPATIAL, 20); /* the cell owner's copy */
    put_ref(s0, S0, ENT, s0->id);
    create_entity(s0, ENT, -1500.0f);
    move(s0, -500.0f, 1, 0); /* 65536 -> 65537 */
    expect_sub0(cl, ENT, cl->id, CONN_CLIENT, CT_ENTITY, 20);
    chanq_owned_msg_t m;
    it_next(cl, true, &m);
    assert_int_equal(check_ho_full(&m, S0, S0 + 1, 0, ENT, s0->id, -600.0f), 1);
    chanq_owned_msg_done(&m);
    move(s0, 500.0f, 2, 0); /* 65537 -> 65538: cl watches the source only */
    int ids = 0, unsubs = 0;
    for (int i = 0; i < 2; i++) { /* two workers' messages: either order */
        it_next(cl, true, &m);
        if (m.msg_type == MT_HANDOVER) {
            check_ho_ids(&m, S0 + 1, S0 + 2, 0);
            ids++;
        } else {
            assert_int_equal(m.msg_type, MT_UNSUB);
            assert_int_equal(m.channel_id, ENT);
            assert_int_equal(m.stub_id, 0);
            Channeldpb__UnsubscribedFromChannelResultMessage *u = chanq_sync_decode(
                &m, &channeldpb__unsubscribed_from_channel_result_message__descriptor);
            assert_non_null(u);
            assert_int_equal(u->connid, cl->id);
            assert_int_equal(u->conntype, CONN_CLIENT);
            assert_int_equal(u->channeltype, CT_ENTITY);
            chanq_unpack_free(u);
            unsubs++;
        }
        chanq_owned_msg_done(&m);
    }
    assert_int_equal(ids, 1);
    assert_int_equal(unsubs, 1);
    expect_not_subscribed(s1, cl);
}

/* "SubscribeClients": false: the client watching the destination gets the handover with ENT's
 * reference only (no entity data: it is not subscribed), and no SUB result. */
static void test_handover_servers_only(void **state)
{
    (void)state;
    world_t w = world(LAYOUT_NO_CLIENTS);
    it_conn_t *s0 = w.s0, *s1 = w.s1, *cl = w.cl;
    const double at[1] = {-500};
    spots_interest(s0, cl->id, at, 1);
    expect_sub0(cl, S0 + 1, cl->id, CONN_CLIENT, CT_SPATIAL, 20);
    expect_sub0(s0, S0 + 1, cl->id, CONN_CLIENT, CT_SPATIAL, 20); /* the cell owner's copy */
    put_ref(s0, S0, ENT, s0->id);
    create_entity(s0, ENT, -1500.0f);
    move(s0, -500.0f, 1, 0);
    chanq_owned_msg_t m;
    it_next(cl, true, &m);
    check_ho_ref(&m, S0, S0 + 1, 0, ENT, s0->id);
    chanq_owned_msg_done(&m);
    expect_not_subscribed(s0, cl);
    (void)s1;
}

/* The destination cell holds the entity's newer entry already (its owner wrote it with the
 * update that moved the entity, which reached the cell before the handover did): the handover
 * keeps it, and a later subscriber's full state has it, not the source's older entry. Before
 * the fix the source's entry replaced it, and the cell's data went back in time for good. */
static void test_handover_keeps_newer_entry(void **state)
{
    (void)state;
    world_t w = world(LAYOUT_NO_CLIENTS);
    it_conn_t *s0 = w.s0, *cl = w.cl;
    const double at[1] = {-500};
    spots_interest(s0, cl->id, at, 1);
    expect_sub0(cl, S0 + 1, cl->id, CONN_CLIENT, CT_SPATIAL, 20);
    expect_sub0(s0, S0 + 1, cl->id, CONN_CLIENT, CT_SPATIAL, 20); /* the cell owner's copy */
    put_ref(s0, S0, ENT, 111);                                    /* the source's entry */
    create_entity(s0, ENT, -1500.0f);
    put_ref(s0, S0 + 1, ENT, 222); /* the newer one, in the destination before the move */
    move(s0, -500.0f, 1, 0);
    chanq_owned_msg_t m;
    it_next(cl, true, &m);
    check_ho_ref(&m, S0, S0 + 1, 0, ENT, 111); /* the handover carries what the source had */
    chanq_owned_msg_done(&m);
    it_conn_t *s2 = it_server(); /* a new subscriber of the destination */
    it_sub(s2, 7, S0 + 1, s2->id, 1);
    it_expect_sub(s2, S0 + 1, 7, s2->id, CONN_SERVER, CT_SPATIAL, 1);
    it_next(s2, false, &m); /* its first fan-out: the cell's full state */
    assert_int_equal(m.msg_type, MT_DATA);
    assert_int_equal(m.channel_id, S0 + 1);
    Channeldpb__ChannelDataUpdateMessage *u =
        chanq_sync_decode(&m, &channeldpb__channel_data_update_message__descriptor);
    assert_non_null(u);
    assert_non_null(u->data);
    Chanqworld__SpatialChannelData *d =
        chanqworld__spatial_channel_data__unpack(NULL, u->data->value.len, u->data->value.data);
    assert_non_null(d);
    assert_int_equal(d->n_entities, 1);
    assert_int_equal(d->entities[0]->key, ENT);
    assert_non_null(d->entities[0]->value->objref);
    assert_int_equal(d->entities[0]->value->objref->owningconnid, 222);
    chanqworld__spatial_channel_data__free_unpacked(d, NULL);
    chanq_unpack_free(u);
    chanq_owned_msg_done(&m);
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_handover_subscription_follows_interest),
    IT_TEST(test_handover_servers_only),
    IT_TEST(test_handover_keeps_newer_entry),
    IT_TEST(test_interest_sphere),
    IT_TEST(test_handover_walk),
    IT_TEST(test_locked_group_stays),
    IT_TEST(test_group_handover),
    IT_TEST(test_adjacent),
};

IT_MAIN(tests)
