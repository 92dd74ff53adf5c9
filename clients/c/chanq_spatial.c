/* chanq_spatial.c - spatial and entity channel encoders and decoders (chanq_spatial.h). */
#include "chanq_spatial.h"

#include "cq_alloc.h"

#include <errno.h>

/* ---- helpers ------------------------------------------------------------------------------ */

static Channeldpb__SpatialInfo info_of(chanq_vec3_t v)
{
    Channeldpb__SpatialInfo i = CHANNELDPB__SPATIAL_INFO__INIT;
    i.x = v.x;
    i.y = v.y;
    i.z = v.z;
    return i;
}

/* Checks the msgType, then unpacks the body as d. */
static int decode_as(const chanq_msg_t *msg, uint32_t msg_type, const ProtobufCMessageDescriptor *d,
                     void **ret)
{
    if (!msg || !ret || msg->msg_type != msg_type)
        return -EINVAL;
    void *m = chanq_unpack(d, msg->body, msg->body_len);
    if (!m)
        return CQ_EDECODE;
    *ret = m;
    return 0;
}

/* Points as SpatialInfo pointers for a repeated field: *ret_infos and *ret_ptrs are owned
 * (cq_free both; NULL when n is 0). */
static int infos_new(const chanq_vec3_t *pts, size_t n, Channeldpb__SpatialInfo **ret_infos,
                     Channeldpb__SpatialInfo ***ret_ptrs)
{
    *ret_infos = NULL;
    *ret_ptrs = NULL;
    if (n == 0)
        return 0;
    if (!pts)
        return -EINVAL;
    Channeldpb__SpatialInfo *infos = cq_calloc(n, sizeof(*infos));
    Channeldpb__SpatialInfo **ptrs = cq_calloc(n, sizeof(*ptrs));
    if (!infos || !ptrs) {
        cq_free(infos);
        cq_free(ptrs);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        infos[i] = info_of(pts[i]);
        ptrs[i] = &infos[i];
    }
    *ret_infos = infos;
    *ret_ptrs = ptrs;
    return 0;
}

/* ---- creating spatial channels -------------------------------------------------------------- */

int chanq_client_create_spatial(chanq_client_t *c, uint32_t stub_id, const char *metadata,
                                const Channeldpb__ChannelSubscriptionOptions *sub_opts,
                                const chanq_channel_data_t *data)
{
    Channeldpb__CreateChannelMessage m = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    m.channeltype = CHANNELDPB__CHANNEL_TYPE__SPATIAL;
    m.metadata = (char *)(metadata ? metadata : "");
    m.suboptions = (Channeldpb__ChannelSubscriptionOptions *)sub_opts;
    if (data) {
        any.type_url = (char *)(data->type_url ? data->type_url : "");
        any.value.data = (uint8_t *)data->value;
        any.value.len = data->len;
        m.data = &any;
        m.mergeoptions = (Channeldpb__ChannelDataMergeOptions *)data->merge_opts;
    }
    return chanq_client_send(c, 0, 0, stub_id, CHANNELDPB__MESSAGE_TYPE__CREATE_SPATIAL_CHANNEL,
                             &m.base);
}

int chanq_decode_spatial_create_result(const chanq_msg_t *msg,
                                       Channeldpb__CreateSpatialChannelsResultMessage **ret)
{
    return decode_as(msg, CHANNELDPB__MESSAGE_TYPE__CREATE_SPATIAL_CHANNEL,
                     &channeldpb__create_spatial_channels_result_message__descriptor, (void **)ret);
}

int chanq_decode_spatial_ready(const chanq_msg_t *msg, uint32_t *ret_server_index,
                               uint32_t *ret_server_count)
{
    Channeldpb__SpatialChannelsReadyMessage *m = NULL;
    int r = decode_as(msg, CHANNELDPB__MESSAGE_TYPE__SPATIAL_CHANNELS_READY,
                      &channeldpb__spatial_channels_ready_message__descriptor, (void **)&m);
    if (r < 0)
        return r;
    if (ret_server_index)
        *ret_server_index = m->serverindex;
    if (ret_server_count)
        *ret_server_count = m->servercount;
    chanq_unpack_free(m);
    return 0;
}

int chanq_decode_spatial_regions(const chanq_msg_t *msg,
                                 Channeldpb__SpatialRegionsUpdateMessage **ret)
{
    Channeldpb__SpatialRegionsUpdateMessage *m = NULL;
    int r = decode_as(msg, CHANNELDPB__MESSAGE_TYPE__SPATIAL_REGIONS_UPDATE,
                      &channeldpb__spatial_regions_update_message__descriptor, (void **)&m);
    if (r < 0)
        return r;
    /* A region without its bounds is useless to a map: treat it as malformed. */
    for (size_t i = 0; i < m->n_regions; i++) {
        if (!m->regions[i]->min || !m->regions[i]->max) {
            chanq_unpack_free(m);
            return CQ_EDECODE;
        }
    }
    *ret = m;
    return 0;
}

int chanq_client_debug_spatial_regions(chanq_client_t *c, uint32_t stub_id)
{
    Channeldpb__DebugGetSpatialRegionsMessage m =
        CHANNELDPB__DEBUG_GET_SPATIAL_REGIONS_MESSAGE__INIT;
    return chanq_client_send(c, 0, 0, stub_id, CHANNELDPB__MESSAGE_TYPE__DEBUG_GET_SPATIAL_REGIONS,
                             &m.base);
}

/* ---- query ----------------------------------------------------------------------------------- */

int chanq_client_query_spatial(chanq_client_t *c, uint32_t stub_id, const chanq_vec3_t *pts,
                               size_t n)
{
    Channeldpb__QuerySpatialChannelMessage m = CHANNELDPB__QUERY_SPATIAL_CHANNEL_MESSAGE__INIT;
    Channeldpb__SpatialInfo *infos;
    Channeldpb__SpatialInfo **ptrs;
    int r = infos_new(pts, n, &infos, &ptrs);
    if (r < 0)
        return r;
    m.n_spatialinfo = n;
    m.spatialinfo = ptrs;
    r = chanq_client_send(c, 0, 0, stub_id, CHANNELDPB__MESSAGE_TYPE__QUERY_SPATIAL_CHANNEL,
                          &m.base);
    cq_free(ptrs);
    cq_free(infos);
    return r;
}

int chanq_decode_query_result(const chanq_msg_t *msg,
                              Channeldpb__QuerySpatialChannelResultMessage **ret)
{
    return decode_as(msg, CHANNELDPB__MESSAGE_TYPE__QUERY_SPATIAL_CHANNEL,
                     &channeldpb__query_spatial_channel_result_message__descriptor, (void **)ret);
}

typedef struct query_call {
    chanq_query_fn fn;
    void *ud;
} query_call_t;

/* The stub callback of chanq_client_query_spatial_call: owns qc from here on. */
static void query_reply(void *ud, const chanq_msg_t *msg)
{
    query_call_t qc = *(query_call_t *)ud;
    cq_free(ud);
    Channeldpb__QuerySpatialChannelResultMessage *m = NULL;
    int r = chanq_decode_query_result(msg, &m);
    if (r < 0) {
        qc.fn(qc.ud, r, NULL, 0);
        return;
    }
    qc.fn(qc.ud, 0, m->channelid, m->n_channelid);
    chanq_unpack_free(m);
}

int chanq_client_query_spatial_call(chanq_client_t *c, const chanq_vec3_t *pts, size_t n,
                                    chanq_query_fn fn, void *ud, uint32_t *ret_stub)
{
    if (!fn)
        return -EINVAL;
    query_call_t *qc = cq_malloc(sizeof(*qc));
    if (!qc)
        return -ENOMEM;
    *qc = (query_call_t){fn, ud};
    uint32_t stub;
    int r = chanq_client_stub_alloc_owned(c, query_reply, qc, cq_free, &stub);
    if (r < 0) {
        cq_free(qc);
        return r;
    }
    r = chanq_client_query_spatial(c, stub, pts, n);
    if (r < 0) {
        chanq_client_stub_cancel(c, stub); /* frees qc */
        return r;
    }
    if (ret_stub)
        *ret_stub = stub;
    return 0;
}

/* ---- interest -------------------------------------------------------------------------------- */

/* The shapes of q as protobuf-c messages on the caller's stack (see send_interest). */
typedef struct interest_pb {
    Channeldpb__SpatialInterestQuery q;
    Channeldpb__SpotsAOI spots;
    Channeldpb__BoxAOI box;
    Channeldpb__SphereAOI sphere;
    Channeldpb__ConeAOI cone;
    Channeldpb__SpatialInfo box_c, box_e, sph_c, cone_c, cone_d;
    Channeldpb__SpatialInfo *spot_infos; /* owned */
    Channeldpb__SpatialInfo **spot_ptrs; /* owned */
} interest_pb_t;

static void interest_shapes(interest_pb_t *p, const chanq_interest_t *q)
{
    if (q->has_box) {
        p->box_c = info_of(q->box_center);
        p->box_e = info_of(q->box_extent);
        p->box.center = &p->box_c;
        p->box.extent = &p->box_e;
        p->q.boxaoi = &p->box;
    }
    if (q->has_sphere) {
        p->sph_c = info_of(q->sphere_center);
        p->sphere.center = &p->sph_c;
        p->sphere.radius = q->sphere_radius;
        p->q.sphereaoi = &p->sphere;
    }
    if (q->has_cone) {
        p->cone_c = info_of(q->cone_center);
        p->cone_d = info_of(q->cone_dir);
        p->cone.center = &p->cone_c;
        p->cone.direction = &p->cone_d;
        p->cone.angle = q->cone_angle;
        p->cone.radius = q->cone_radius;
        p->q.coneaoi = &p->cone;
    }
}

static void interest_init(interest_pb_t *p)
{
    *p = (interest_pb_t){.q = CHANNELDPB__SPATIAL_INTEREST_QUERY__INIT,
                         .spots = CHANNELDPB__SPOTS_AOI__INIT,
                         .box = CHANNELDPB__BOX_AOI__INIT,
                         .sphere = CHANNELDPB__SPHERE_AOI__INIT,
                         .cone = CHANNELDPB__CONE_AOI__INIT};
}

int chanq_client_spatial_interest(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                                  uint32_t conn_id, const chanq_interest_t *q)
{
    if (!q)
        return -EINVAL;
    interest_pb_t p;
    interest_init(&p);
    int r = infos_new(q->spots, q->n_spots, &p.spot_infos, &p.spot_ptrs);
    if (r < 0)
        return r;
    if (q->n_spots) {
        p.spots.n_spots = q->n_spots;
        p.spots.spots = p.spot_ptrs;
        p.spots.n_dists = q->dists ? q->n_spots : 0;
        p.spots.dists = (uint32_t *)q->dists;
        p.q.spotsaoi = &p.spots;
    }
    interest_shapes(&p, q);
    Channeldpb__UpdateSpatialInterestMessage m = CHANNELDPB__UPDATE_SPATIAL_INTEREST_MESSAGE__INIT;
    m.connid = conn_id;
    m.query = &p.q;
    r = chanq_client_send(c, channel_id, 0, stub_id,
                          CHANNELDPB__MESSAGE_TYPE__UPDATE_SPATIAL_INTEREST, &m.base);
    cq_free(p.spot_ptrs);
    cq_free(p.spot_infos);
    return r;
}

int chanq_client_interest_spots(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                                uint32_t conn_id, const chanq_vec3_t *spots, const uint32_t *dists,
                                size_t n)
{
    chanq_interest_t q = {.spots = spots, .dists = dists, .n_spots = n};
    return chanq_client_spatial_interest(c, stub_id, channel_id, conn_id, &q);
}

int chanq_client_interest_box(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                              uint32_t conn_id, chanq_vec3_t center, chanq_vec3_t extent)
{
    chanq_interest_t q = {.has_box = true, .box_center = center, .box_extent = extent};
    return chanq_client_spatial_interest(c, stub_id, channel_id, conn_id, &q);
}

int chanq_client_interest_sphere(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                                 uint32_t conn_id, chanq_vec3_t center, double radius)
{
    chanq_interest_t q = {.has_sphere = true, .sphere_center = center, .sphere_radius = radius};
    return chanq_client_spatial_interest(c, stub_id, channel_id, conn_id, &q);
}

int chanq_client_interest_cone(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                               uint32_t conn_id, chanq_vec3_t center, chanq_vec3_t dir,
                               double angle, double radius)
{
    chanq_interest_t q = {.has_cone = true,
                          .cone_center = center,
                          .cone_dir = dir,
                          .cone_angle = angle,
                          .cone_radius = radius};
    return chanq_client_spatial_interest(c, stub_id, channel_id, conn_id, &q);
}

/* ---- entities -------------------------------------------------------------------------------- */

int chanq_client_create_entity(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                               uint32_t entity_id, const char *metadata,
                               const Channeldpb__ChannelSubscriptionOptions *sub_opts,
                               const chanq_channel_data_t *data, bool well_known)
{
    if (entity_id == 0)
        return -EINVAL;
    Channeldpb__CreateEntityChannelMessage m = CHANNELDPB__CREATE_ENTITY_CHANNEL_MESSAGE__INIT;
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    m.entityid = entity_id;
    m.metadata = (char *)(metadata ? metadata : "");
    m.suboptions = (Channeldpb__ChannelSubscriptionOptions *)sub_opts;
    m.iswellknown = well_known;
    if (data) {
        any.type_url = (char *)(data->type_url ? data->type_url : "");
        any.value.data = (uint8_t *)data->value;
        any.value.len = data->len;
        m.data = &any;
        m.mergeoptions = (Channeldpb__ChannelDataMergeOptions *)data->merge_opts;
    }
    return chanq_client_send(c, channel_id, 0, stub_id,
                             CHANNELDPB__MESSAGE_TYPE__CREATE_ENTITY_CHANNEL, &m.base);
}

int chanq_decode_entity_create_result(const chanq_msg_t *msg,
                                      Channeldpb__CreateChannelResultMessage **ret)
{
    return decode_as(msg, CHANNELDPB__MESSAGE_TYPE__CREATE_ENTITY_CHANNEL,
                     &channeldpb__create_channel_result_message__descriptor, (void **)ret);
}

int chanq_client_entity_group_add(chanq_client_t *c, uint32_t entity_id, uint32_t group_type,
                                  const uint32_t *ids, size_t n)
{
    if (n && !ids)
        return -EINVAL;
    Channeldpb__AddEntityGroupMessage m = CHANNELDPB__ADD_ENTITY_GROUP_MESSAGE__INIT;
    m.type = (Channeldpb__EntityGroupType)group_type;
    m.n_entitiestoadd = n;
    m.entitiestoadd = (uint32_t *)ids;
    return chanq_client_send(c, entity_id, 0, 0, CHANNELDPB__MESSAGE_TYPE__ENTITY_GROUP_ADD,
                             &m.base);
}

int chanq_client_entity_group_remove(chanq_client_t *c, uint32_t entity_id, uint32_t group_type,
                                     const uint32_t *ids, size_t n)
{
    if (n && !ids)
        return -EINVAL;
    Channeldpb__RemoveEntityGroupMessage m = CHANNELDPB__REMOVE_ENTITY_GROUP_MESSAGE__INIT;
    m.type = (Channeldpb__EntityGroupType)group_type;
    m.n_entitiestoremove = n;
    m.entitiestoremove = (uint32_t *)ids;
    return chanq_client_send(c, entity_id, 0, 0, CHANNELDPB__MESSAGE_TYPE__ENTITY_GROUP_REMOVE,
                             &m.base);
}

/* ---- handover -------------------------------------------------------------------------------- */

int chanq_decode_handover(const chanq_msg_t *msg, Channeldpb__ChannelDataHandoverMessage **ret)
{
    return decode_as(msg, CHANNELDPB__MESSAGE_TYPE__CHANNEL_DATA_HANDOVER,
                     &channeldpb__channel_data_handover_message__descriptor, (void **)ret);
}
