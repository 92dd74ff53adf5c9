/* test_spatial_client.c - unit tests of libchanq's spatial and entity messages
 * (clients/c/chanq_spatial.h): every encoder against protobuf-c's packing of the same message
 * and against hand-built bytes, every decoder on hand-built bytes, malformed input, and
 * fail-N allocation loops (no leak on any failure path). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chanq_spatial.h"
#include "test_alloc.h"

/* ---- harness ------------------------------------------------------------------------------ */

/* The single message one encoder queued, parsed back by a fresh client. */
typedef struct one {
    chanq_msg_t m;
    uint8_t body[4096];
    int n;
} one_t;

static void keep(void *ud, const chanq_msg_t *m)
{
    one_t *o = ud;
    o->n++;
    o->m = *m;
    assert_true(m->body_len <= sizeof(o->body));
    if (m->body_len)
        memcpy(o->body, m->body, m->body_len);
    o->m.body = o->body;
}

static chanq_client_t *mk(one_t *o)
{
    chanq_opts_t opts;
    chanq_opts_init(&opts);
    opts.on_message = o ? keep : NULL;
    opts.ud = o;
    chanq_client_t *c = NULL;
    assert_int_equal(chanq_client_new(&opts, &c), 0);
    return c;
}

/* Takes c's output and parses it back: exactly one message. */
static void take_one(chanq_client_t *c, one_t *o)
{
    const uint8_t *p;
    size_t n;
    assert_int_equal(chanq_client_out(c, &p, &n), 0);
    memset(o, 0, sizeof(*o));
    chanq_client_t *r = mk(o);
    assert_int_equal(chanq_client_feed(r, p, n), 1);
    chanq_client_out_consume(c, n);
    chanq_client_free(r);
    assert_int_equal(o->n, 1);
}

/* Asserts the header fields and that the body equals protobuf-c's packing of want. */
static void assert_msg(const one_t *o, uint32_t chan, uint32_t stub, uint32_t type,
                       const ProtobufCMessage *want)
{
    assert_int_equal(o->m.channel_id, chan);
    assert_int_equal(o->m.broadcast, 0);
    assert_int_equal(o->m.stub_id, stub);
    assert_int_equal(o->m.msg_type, type);
    uint8_t buf[4096];
    size_t n = protobuf_c_message_get_packed_size(want);
    assert_true(n <= sizeof(buf));
    assert_int_equal(protobuf_c_message_pack(want, buf), n);
    assert_int_equal(o->m.body_len, n);
    if (n)
        assert_memory_equal(o->m.body, buf, n);
}

static chanq_msg_t msg_of(uint32_t type, const void *body, size_t len)
{
    return (chanq_msg_t){0, 0, 0, type, len ? body : NULL, (uint32_t)len};
}

static Channeldpb__SpatialInfo info(double x, double y, double z)
{
    Channeldpb__SpatialInfo i = CHANNELDPB__SPATIAL_INFO__INIT;
    i.x = x;
    i.y = y;
    i.z = z;
    return i;
}

/* ---- encoders: hand-built bytes ------------------------------------------------------------ */

/* QuerySpatialChannelMessage{[SpatialInfo{x 1, z -2}]}: y = 0 is not written (proto3). */
static void test_query_bytes(void **state)
{
    (void)state;
    static const uint8_t want[] = {0x0a, 0x12, 0x09, 0, 0, 0, 0, 0, 0, 0xf0,
                                   0x3f, 0x19, 0,    0, 0, 0, 0, 0, 0, 0xc0};
    chanq_client_t *c = mk(NULL);
    chanq_vec3_t pt = {1, 0, -2};
    assert_int_equal(chanq_client_query_spatial(c, 7, &pt, 1), 0);
    one_t o;
    take_one(c, &o);
    assert_int_equal(o.m.msg_type, 11);
    assert_int_equal(o.m.channel_id, 0);
    assert_int_equal(o.m.stub_id, 7);
    assert_int_equal(o.m.body_len, sizeof(want));
    assert_memory_equal(o.m.body, want, sizeof(want));
    chanq_client_free(c);
}

/* UpdateSpatialInterestMessage{connId 5, query{sphereAOI{center (0,0,0)... x 2, radius 1}}}. */
static void test_sphere_bytes(void **state)
{
    (void)state;
    static const uint8_t want[] = {0x08, 0x05, /* connId 5 */
                                   0x12, 0x16, /* query, 22 bytes */
                                   0x1a, 0x14, /* sphereAOI, 20 bytes */
                                   0x0a, 0x09, 0x09, 0, 0, 0, 0, 0,    0,
                                   0,    0x40,                                /* center{x 2} */
                                   0x11, 0,    0,    0, 0, 0, 0, 0xf0, 0x3f}; /* radius 1 */
    chanq_client_t *c = mk(NULL);
    assert_int_equal(chanq_client_interest_sphere(c, 0, 65536, 5, (chanq_vec3_t){2, 0, 0}, 1), 0);
    one_t o;
    take_one(c, &o);
    assert_int_equal(o.m.msg_type, 14);
    assert_int_equal(o.m.channel_id, 65536);
    assert_int_equal(o.m.body_len, sizeof(want));
    assert_memory_equal(o.m.body, want, sizeof(want));
    chanq_client_free(c);
}

/* ---- encoders: against protobuf-c ---------------------------------------------------------- */

static void test_create_spatial(void **state)
{
    (void)state;
    chanq_client_t *c = mk(NULL);
    Channeldpb__ChannelSubscriptionOptions so = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    so.has_fanoutintervalms = 1;
    so.fanoutintervalms = 50;
    Channeldpb__ChannelDataMergeOptions mo = CHANNELDPB__CHANNEL_DATA_MERGE_OPTIONS__INIT;
    mo.shouldcheckremovablemapfield = 1;
    static const char url[] = "type.googleapis.com/chanqworld.SpatialChannelData";
    chanq_channel_data_t d = {url, "", 0, &mo};
    assert_int_equal(chanq_client_create_spatial(c, 3, "world", &so, &d), 0);
    one_t o;
    take_one(c, &o);

    Channeldpb__CreateChannelMessage m = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    any.type_url = (char *)url;
    m.channeltype = CHANNELDPB__CHANNEL_TYPE__SPATIAL;
    m.metadata = "world";
    m.suboptions = &so;
    m.data = &any;
    m.mergeoptions = &mo;
    assert_msg(&o, 0, 3, 10, &m.base);

    /* Without data and options: channelType 4 and the metadata only. */
    assert_int_equal(chanq_client_create_spatial(c, 0, NULL, NULL, NULL), 0);
    take_one(c, &o);
    static const uint8_t bare[] = {0x08, 0x04};
    assert_int_equal(o.m.body_len, sizeof(bare));
    assert_memory_equal(o.m.body, bare, sizeof(bare));
    chanq_client_free(c);
}

static void test_query_many(void **state)
{
    (void)state;
    chanq_client_t *c = mk(NULL);
    chanq_vec3_t pts[3] = {{-1500, 0, 0}, {499.5, 10, -499.5}, {1e9, 0, 0}};
    assert_int_equal(chanq_client_query_spatial(c, 1, pts, 3), 0);
    one_t o;
    take_one(c, &o);
    Channeldpb__SpatialInfo i0 = info(-1500, 0, 0), i1 = info(499.5, 10, -499.5),
                            i2 = info(1e9, 0, 0);
    Channeldpb__SpatialInfo *ps[3] = {&i0, &i1, &i2};
    Channeldpb__QuerySpatialChannelMessage m = CHANNELDPB__QUERY_SPATIAL_CHANNEL_MESSAGE__INIT;
    m.n_spatialinfo = 3;
    m.spatialinfo = ps;
    assert_msg(&o, 0, 1, 11, &m.base);

    /* No point: an empty body. NULL points with n > 0: -EINVAL, nothing queued. */
    assert_int_equal(chanq_client_query_spatial(c, 2, NULL, 0), 0);
    take_one(c, &o);
    assert_int_equal(o.m.body_len, 0);
    assert_int_equal(chanq_client_query_spatial(c, 2, NULL, 1), -EINVAL);
    assert_int_equal(chanq_client_out_pending(c), 0);
    chanq_client_free(c);
}

static void test_interest_shapes(void **state)
{
    (void)state;
    chanq_client_t *c = mk(NULL);
    one_t o;
    Channeldpb__UpdateSpatialInterestMessage m = CHANNELDPB__UPDATE_SPATIAL_INTEREST_MESSAGE__INIT;
    Channeldpb__SpatialInterestQuery q = CHANNELDPB__SPATIAL_INTEREST_QUERY__INIT;
    m.connid = 9;
    m.query = &q;

    /* Spots with dists. */
    chanq_vec3_t spots[2] = {{-1500, 0, 0}, {500, 0, 0}};
    uint32_t dists[2] = {0, 2};
    assert_int_equal(chanq_client_interest_spots(c, 4, 0, 9, spots, dists, 2), 0);
    take_one(c, &o);
    Channeldpb__SpatialInfo s0 = info(-1500, 0, 0), s1 = info(500, 0, 0);
    Channeldpb__SpatialInfo *sp[2] = {&s0, &s1};
    Channeldpb__SpotsAOI spa = CHANNELDPB__SPOTS_AOI__INIT;
    spa.n_spots = 2;
    spa.spots = sp;
    spa.n_dists = 2;
    spa.dists = dists;
    q.spotsaoi = &spa;
    assert_msg(&o, 0, 4, 14, &m.base);

    /* Spots without dists: no dists field at all. */
    assert_int_equal(chanq_client_interest_spots(c, 0, 0, 9, spots, NULL, 2), 0);
    take_one(c, &o);
    spa.n_dists = 0;
    spa.dists = NULL;
    assert_msg(&o, 0, 0, 14, &m.base);
    q.spotsaoi = NULL;

    /* Box. */
    assert_int_equal(chanq_client_interest_box(c, 0, 65537, 9, (chanq_vec3_t){-500, 0, 0},
                                               (chanq_vec3_t){600, 0, 400}),
                     0);
    take_one(c, &o);
    Channeldpb__SpatialInfo bc = info(-500, 0, 0), be = info(600, 0, 400);
    Channeldpb__BoxAOI box = CHANNELDPB__BOX_AOI__INIT;
    box.center = &bc;
    box.extent = &be;
    q.boxaoi = &box;
    assert_msg(&o, 65537, 0, 14, &m.base);
    q.boxaoi = NULL;

    /* Cone. */
    assert_int_equal(chanq_client_interest_cone(c, 0, 0, 9, (chanq_vec3_t){0, 0, 0},
                                                (chanq_vec3_t){1, 0, 0}, 0.5, 1500),
                     0);
    take_one(c, &o);
    Channeldpb__SpatialInfo cc = info(0, 0, 0), cd = info(1, 0, 0);
    Channeldpb__ConeAOI cone = CHANNELDPB__CONE_AOI__INIT;
    cone.center = &cc;
    cone.direction = &cd;
    cone.angle = 0.5;
    cone.radius = 1500;
    q.coneaoi = &cone;
    assert_msg(&o, 0, 0, 14, &m.base);

    /* All four at once, through the generic builder. */
    chanq_interest_t all = {.spots = spots,
                            .dists = dists,
                            .n_spots = 2,
                            .has_box = true,
                            .box_center = {-500, 0, 0},
                            .box_extent = {600, 0, 400},
                            .has_sphere = true,
                            .sphere_center = {-1500, 0, 0},
                            .sphere_radius = 2500,
                            .has_cone = true,
                            .cone_center = {0, 0, 0},
                            .cone_dir = {1, 0, 0},
                            .cone_angle = 0.5,
                            .cone_radius = 1500};
    assert_int_equal(chanq_client_spatial_interest(c, 6, 0, 9, &all), 0);
    take_one(c, &o);
    spa.n_dists = 2;
    spa.dists = dists;
    q.spotsaoi = &spa;
    q.boxaoi = &box;
    Channeldpb__SpatialInfo sc = info(-1500, 0, 0);
    Channeldpb__SphereAOI sph = CHANNELDPB__SPHERE_AOI__INIT;
    sph.center = &sc;
    sph.radius = 2500;
    q.sphereaoi = &sph;
    assert_msg(&o, 0, 6, 14, &m.base);

    /* Empty query (clears the interest): query present but empty. */
    chanq_interest_t none = {0};
    assert_int_equal(chanq_client_spatial_interest(c, 0, 0, 9, &none), 0);
    take_one(c, &o);
    static const uint8_t empty[] = {0x08, 0x09, 0x12, 0x00};
    assert_int_equal(o.m.body_len, sizeof(empty));
    assert_memory_equal(o.m.body, empty, sizeof(empty));
    assert_int_equal(chanq_client_spatial_interest(c, 0, 0, 9, NULL), -EINVAL);
    assert_int_equal(chanq_client_interest_spots(c, 0, 0, 9, NULL, NULL, 1), -EINVAL);
    assert_int_equal(chanq_client_out_pending(c), 0);
    chanq_client_free(c);
}

static void test_entity_messages(void **state)
{
    (void)state;
    chanq_client_t *c = mk(NULL);
    one_t o;
    Channeldpb__ChannelSubscriptionOptions so = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    so.has_dataaccess = 1;
    so.dataaccess = CHANNELDPB__CHANNEL_DATA_ACCESS__WRITE_ACCESS;
    Channeldpb__ChannelDataMergeOptions mo = CHANNELDPB__CHANNEL_DATA_MERGE_OPTIONS__INIT;
    mo.listsizelimit = 16;
    mo.truncatetop = 1;
    static const char url[] = "type.googleapis.com/chanqworld.EntityChannelData";
    static const uint8_t val[] = {0x18, 0x01};
    chanq_channel_data_t d = {url, val, sizeof(val), &mo};
    assert_int_equal(chanq_client_create_entity(c, 5, 65537, 0x80001, "e1", &so, &d, true), 0);
    take_one(c, &o);
    Channeldpb__CreateEntityChannelMessage m = CHANNELDPB__CREATE_ENTITY_CHANNEL_MESSAGE__INIT;
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    any.type_url = (char *)url;
    any.value.data = (uint8_t *)val;
    any.value.len = sizeof(val);
    m.entityid = 0x80001;
    m.metadata = "e1";
    m.suboptions = &so;
    m.data = &any;
    m.mergeoptions = &mo;
    m.iswellknown = 1;
    assert_msg(&o, 65537, 5, 15, &m.base);
    assert_int_equal(chanq_client_create_entity(c, 0, 0, 0, NULL, NULL, NULL, false), -EINVAL);

    uint32_t ids[3] = {0x80001, 0x80002, 0x80003};
    assert_int_equal(chanq_client_entity_group_add(c, 0x80001, 1, ids, 3), 0);
    take_one(c, &o);
    Channeldpb__AddEntityGroupMessage ga = CHANNELDPB__ADD_ENTITY_GROUP_MESSAGE__INIT;
    ga.type = CHANNELDPB__ENTITY_GROUP_TYPE__LOCK;
    ga.n_entitiestoadd = 3;
    ga.entitiestoadd = ids;
    assert_msg(&o, 0x80001, 0, 16, &ga.base);

    assert_int_equal(chanq_client_entity_group_remove(c, 0x80002, 0, ids + 1, 2), 0);
    take_one(c, &o);
    Channeldpb__RemoveEntityGroupMessage gr = CHANNELDPB__REMOVE_ENTITY_GROUP_MESSAGE__INIT;
    gr.type = CHANNELDPB__ENTITY_GROUP_TYPE__HANDOVER;
    gr.n_entitiestoremove = 2;
    gr.entitiestoremove = ids + 1;
    assert_msg(&o, 0x80002, 0, 17, &gr.base);
    assert_int_equal(chanq_client_entity_group_add(c, 0x80001, 0, NULL, 2), -EINVAL);

    assert_int_equal(chanq_client_debug_spatial_regions(c, 8), 0);
    take_one(c, &o);
    assert_int_equal(o.m.msg_type, 99);
    assert_int_equal(o.m.stub_id, 8);
    assert_int_equal(o.m.channel_id, 0);
    assert_int_equal(o.m.body_len, 0);
    chanq_client_free(c);
}

/* ---- decoders: hand-built bytes ------------------------------------------------------------ */

static void test_decode_create_result(void **state)
{
    (void)state;
    /* {spatialChannelId [65536, 65537] (packed), metadata "w", ownerConnId 3} */
    static const uint8_t b[] = {0x0a, 0x06, 0x80, 0x80, 0x04, 0x81, 0x80,
                                0x04, 0x12, 0x01, 0x77, 0x18, 0x03};
    chanq_msg_t m = msg_of(10, b, sizeof(b));
    Channeldpb__CreateSpatialChannelsResultMessage *r = NULL;
    assert_int_equal(chanq_decode_spatial_create_result(&m, &r), 0);
    assert_int_equal(r->n_spatialchannelid, 2);
    assert_int_equal(r->spatialchannelid[0], 65536);
    assert_int_equal(r->spatialchannelid[1], 65537);
    assert_string_equal(r->metadata, "w");
    assert_int_equal(r->ownerconnid, 3);
    chanq_unpack_free(r);
    m.msg_type = 3;
    assert_int_equal(chanq_decode_spatial_create_result(&m, &r), -EINVAL);
    m = msg_of(10, b, sizeof(b) - 1); /* the ownerConnId varint is cut */
    assert_int_equal(chanq_decode_spatial_create_result(&m, &r), CQ_EDECODE);
}

static void test_decode_ready(void **state)
{
    (void)state;
    static const uint8_t b[] = {0x08, 0x02, 0x10, 0x02};
    chanq_msg_t m = msg_of(18, b, sizeof(b));
    uint32_t idx = 99, cnt = 99;
    assert_int_equal(chanq_decode_spatial_ready(&m, &idx, &cnt), 0);
    assert_int_equal(idx, 2);
    assert_int_equal(cnt, 2);
    assert_int_equal(chanq_decode_spatial_ready(&m, NULL, NULL), 0);
    m = msg_of(18, NULL, 0); /* an empty body: both 0 */
    assert_int_equal(chanq_decode_spatial_ready(&m, &idx, &cnt), 0);
    assert_int_equal(idx, 0);
    assert_int_equal(cnt, 0);
    static const uint8_t bad[] = {0x08};
    m = msg_of(18, bad, sizeof(bad));
    assert_int_equal(chanq_decode_spatial_ready(&m, &idx, &cnt), CQ_EDECODE);
    m = msg_of(13, b, sizeof(b));
    assert_int_equal(chanq_decode_spatial_ready(&m, &idx, &cnt), -EINVAL);
}

static void test_decode_regions(void **state)
{
    (void)state;
    /* One region of 4x1: min (-2000, 0, -500), max (-1000, 0, 500), channel 65536, server 0
     * (serverIndex 0 is not written), then a second with server 1 and no bounds. */
    static const uint8_t b[] = {
        0x0a, 0x2c,                                                 /* region 1, 44 bytes */
        0x0a, 0x12, 0x09, 0,    0, 0, 0,    0,    0x40, 0x9f, 0xc0, /* min.x -2000 */
        0x19, 0,    0,    0,    0, 0, 0x40, 0x7f, 0xc0,             /* min.z -500 */
        0x12, 0x12, 0x09, 0,    0, 0, 0,    0,    0x40, 0x8f, 0xc0, /* max.x -1000 */
        0x19, 0,    0,    0,    0, 0, 0x40, 0x7f, 0x40,             /* max.z 500 */
        0x18, 0x80, 0x80, 0x04,                                     /* channelId 65536 */
    };
    chanq_msg_t m = msg_of(13, b, sizeof(b));
    Channeldpb__SpatialRegionsUpdateMessage *r = NULL;
    assert_int_equal(chanq_decode_spatial_regions(&m, &r), 0);
    assert_int_equal(r->n_regions, 1);
    assert_true(r->regions[0]->min->x == -2000);
    assert_true(r->regions[0]->min->z == -500);
    assert_true(r->regions[0]->max->x == -1000);
    assert_true(r->regions[0]->max->z == 500);
    assert_int_equal(r->regions[0]->channelid, 65536);
    assert_int_equal(r->regions[0]->serverindex, 0);
    chanq_unpack_free(r);

    /* A region without bounds is rejected. */
    uint8_t b2[sizeof(b) + 4];
    memcpy(b2, b, sizeof(b));
    memcpy(b2 + sizeof(b), (uint8_t[]){0x0a, 0x02, 0x20, 0x01}, 4);
    m = msg_of(13, b2, sizeof(b2));
    r = NULL;
    assert_int_equal(chanq_decode_spatial_regions(&m, &r), CQ_EDECODE);
    assert_null(r);
    m = msg_of(13, b, sizeof(b) - 3);
    assert_int_equal(chanq_decode_spatial_regions(&m, &r), CQ_EDECODE);
}

static void test_decode_handover(void **state)
{
    (void)state;
    static const char url[] = "type.googleapis.com/chanqworld.SpatialChannelData";
    uint8_t b[128];
    size_t n = 0;
    static const uint8_t head[] = {0x08, 0x80, 0x80, 0x04, 0x10, 0x81,
                                   0x80, 0x04, 0x18, 0x05, 0x22};
    memcpy(b, head, sizeof(head));
    n = sizeof(head);
    b[n++] = (uint8_t)(2 + sizeof(url) - 1 + 2 + 4);
    b[n++] = 0x0a;
    b[n++] = (uint8_t)(sizeof(url) - 1);
    memcpy(b + n, url, sizeof(url) - 1);
    n += sizeof(url) - 1;
    /* value: SpatialChannelData{entities {key 0x80000: {}}} */
    memcpy(b + n, (uint8_t[]){0x12, 0x04, 0x0a, 0x02, 0x08, 0x01}, 6);
    n += 6;
    chanq_msg_t m = msg_of(12, b, n);
    m.channel_id = 65537;
    Channeldpb__ChannelDataHandoverMessage *h = NULL;
    assert_int_equal(chanq_decode_handover(&m, &h), 0);
    assert_int_equal(h->srcchannelid, 65536);
    assert_int_equal(h->dstchannelid, 65537);
    assert_int_equal(h->contextconnid, 5);
    assert_non_null(h->data);
    assert_string_equal(h->data->type_url, url);
    assert_int_equal(h->data->value.len, 4);
    assert_memory_equal(h->data->value.data, ((uint8_t[]){0x0a, 0x02, 0x08, 0x01}), 4);
    chanq_unpack_free(h);

    /* Ids only, no data. */
    m = msg_of(12, head, 10);
    assert_int_equal(chanq_decode_handover(&m, &h), 0);
    assert_null(h->data);
    chanq_unpack_free(h);
    /* Cut inside the Any; a wrong type. */
    m = msg_of(12, b, n - 3);
    assert_int_equal(chanq_decode_handover(&m, &h), CQ_EDECODE);
    m = msg_of(8, b, n);
    assert_int_equal(chanq_decode_handover(&m, &h), -EINVAL);
}

static void test_decode_entity_result(void **state)
{
    (void)state;
    /* {channelType ENTITY, metadata "e", ownerConnId 2, channelId 0x80001} */
    static const uint8_t b[] = {0x08, 0x05, 0x12, 0x01, 0x65, 0x18, 0x02, 0x20, 0x81, 0x80, 0x20};
    chanq_msg_t m = msg_of(15, b, sizeof(b));
    Channeldpb__CreateChannelResultMessage *r = NULL;
    assert_int_equal(chanq_decode_entity_create_result(&m, &r), 0);
    assert_int_equal(r->channeltype, 5);
    assert_string_equal(r->metadata, "e");
    assert_int_equal(r->ownerconnid, 2);
    assert_int_equal(r->channelid, 0x80001);
    chanq_unpack_free(r);
    m.msg_type = 3;
    assert_int_equal(chanq_decode_entity_create_result(&m, &r), -EINVAL);
}

/* ---- query RPC ------------------------------------------------------------------------------ */

typedef struct qres {
    int calls, err;
    uint32_t ids[8];
    size_t n;
} qres_t;

static void on_query(void *ud, int err, const uint32_t *ids, size_t n)
{
    qres_t *q = ud;
    q->calls++;
    q->err = err;
    q->n = n;
    assert_true(n <= 8);
    if (n)
        memcpy(q->ids, ids, n * sizeof(*ids));
}

/* Feeds c one packet carrying msgType type with stub and body. */
static void feed_reply(chanq_client_t *c, uint32_t stub, uint32_t type, const void *b, size_t n)
{
    chanq_client_t *srv = mk(NULL);
    assert_int_equal(chanq_client_send_raw(srv, 0, 0, stub, type, b, n), 0);
    const uint8_t *p;
    size_t len;
    assert_int_equal(chanq_client_out(srv, &p, &len), 0);
    assert_int_equal(chanq_client_feed(c, p, len), 1);
    chanq_client_free(srv);
}

static void test_query_call(void **state)
{
    (void)state;
    one_t other = {0};
    chanq_client_t *c = mk(&other);
    qres_t q = {0};
    chanq_vec3_t pts[3] = {{-1500, 0, 0}, {1500, 0, 0}, {9000, 0, 0}};
    uint32_t stub = 0;
    assert_int_equal(chanq_client_query_spatial_call(c, pts, 3, on_query, &q, &stub), 0);
    assert_int_equal(stub, 1);
    assert_int_equal(chanq_client_stub_count(c), 1);
    /* The result: [65536, 65539, 0]. */
    static const uint8_t res[] = {0x0a, 0x07, 0x80, 0x80, 0x04, 0x83, 0x80, 0x04, 0x00};
    feed_reply(c, stub, 11, res, sizeof(res));
    assert_int_equal(q.calls, 1);
    assert_int_equal(q.err, 0);
    assert_int_equal(q.n, 3);
    assert_int_equal(q.ids[0], 65536);
    assert_int_equal(q.ids[1], 65539);
    assert_int_equal(q.ids[2], 0);
    assert_int_equal(chanq_client_stub_count(c), 0);
    assert_int_equal(other.n, 0);

    /* A garbled reply reaches the callback as CQ_EDECODE. */
    assert_int_equal(chanq_client_query_spatial_call(c, pts, 1, on_query, &q, &stub), 0);
    feed_reply(c, stub, 11, (uint8_t[]){0x0a, 0x05, 0x80}, 3);
    assert_int_equal(q.calls, 2);
    assert_int_equal(q.err, CQ_EDECODE);
    assert_int_equal(q.n, 0);
    assert_int_equal(chanq_client_query_spatial_call(c, pts, 1, NULL, &q, &stub), -EINVAL);
    assert_int_equal(chanq_client_query_spatial_call(c, NULL, 1, on_query, &q, &stub), -EINVAL);
    assert_int_equal(chanq_client_stub_count(c), 0);
    chanq_client_free(c);
}

/* A query whose stub is cancelled, and one pending when the client is freed, never call back
 * and leak nothing; every allocation failure is reported and leaks nothing. */
static void test_query_call_no_leak(void **state)
{
    (void)state;
    for (unsigned long fail = 1;; fail++) {
        test_alloc_install(fail, false);
        chanq_client_t *c = NULL;
        chanq_opts_t opts;
        chanq_opts_init(&opts);
        bool ok = chanq_client_new(&opts, &c) == 0;
        qres_t q = {0};
        chanq_vec3_t pts[2] = {{0, 0, 0}, {1, 0, 1}};
        uint32_t s1 = 0, s2 = 0;
        ok = ok && chanq_client_query_spatial_call(c, pts, 2, on_query, &q, &s1) == 0;
        ok = ok && chanq_client_query_spatial_call(c, pts, 2, on_query, &q, &s2) == 0;
        ok = ok && chanq_client_stub_cancel(c, s1) == 0;
        ok = ok && chanq_client_interest_spots(c, 0, 0, 3, pts, NULL, 2) == 0;
        chanq_client_free(c);
        assert_int_equal(q.calls, 0);
        if (test_alloc_round_end(ok))
            break;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_query_bytes),          cmocka_unit_test(test_sphere_bytes),
        cmocka_unit_test(test_create_spatial),       cmocka_unit_test(test_query_many),
        cmocka_unit_test(test_interest_shapes),      cmocka_unit_test(test_entity_messages),
        cmocka_unit_test(test_decode_create_result), cmocka_unit_test(test_decode_ready),
        cmocka_unit_test(test_decode_regions),       cmocka_unit_test(test_decode_handover),
        cmocka_unit_test(test_decode_entity_result), cmocka_unit_test(test_query_call),
        cmocka_unit_test(test_query_call_no_leak),
    };
    return cmocka_run_group_tests_name("spatial-client", tests, NULL, NULL);
}
