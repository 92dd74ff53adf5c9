/* chanq_spatial.h - libchanq: spatial and entity channels (channeld-protocol.md §4), sans-I/O.
 *
 * Encoders queue messages on a chanq_client_t like the ones in chanq.h (same return codes:
 * 0, CQ_ETOOBIG, -ENOMEM, -EINVAL for a bad argument). Decoders take a received chanq_msg_t and
 * return an owned protobuf-c message (free it with chanq_unpack_free) or fill plain values;
 * they return -EINVAL when the message has another msgType and CQ_EDECODE when its body does
 * not parse (or lacks a required sub-message). Every pointer argument is borrowed.
 *
 * Coordinates follow channeld: left-handed, Y up; the grid uses X and Z (§4.2).
 */
#ifndef CHANQ_SPATIAL_H
#define CHANQ_SPATIAL_H

#include "chanq.h"

/* The entity-channel id range starts here by default (-ecs); spatial cells at 0x10000 (-scs). */
#define CHANQ_ENTITY_CHAN_START  0x80000u
#define CHANQ_SPATIAL_CHAN_START 0x10000u

typedef struct chanq_vec3 {
    double x, y, z;
} chanq_vec3_t;

/* ---- creating spatial channels (§4.3) ---------------------------------------------------- */

/* CREATE_SPATIAL_CHANNEL (10) on channel 0, channelType SPATIAL. sub_opts and data may be NULL
 * (data: each cell's initial state, e.g. an empty chanqworld.SpatialChannelData). The reply is
 * a CreateSpatialChannelsResultMessage with msgType 10 (chanq_decode_spatial_create_result);
 * the border SUB results and SPATIAL_CHANNELS_READY of the last slot come before it. */
int chanq_client_create_spatial(chanq_client_t *c, uint32_t stub_id, const char *metadata,
                                const Channeldpb__ChannelSubscriptionOptions *sub_opts,
                                const chanq_channel_data_t *data);

/* Decodes the reply to CREATE_SPATIAL_CHANNEL (msgType 10). Owned result. */
int chanq_decode_spatial_create_result(const chanq_msg_t *msg,
                                       Channeldpb__CreateSpatialChannelsResultMessage **ret);

/* Decodes SPATIAL_CHANNELS_READY (18). Both outputs may be NULL. Note (§4.3): both fields carry
 * the server count in channeld; chanq keeps that. */
int chanq_decode_spatial_ready(const chanq_msg_t *msg, uint32_t *ret_server_index,
                               uint32_t *ret_server_count);

/* Decodes SPATIAL_REGIONS_UPDATE (13) (also the reply to DEBUG_GET_SPATIAL_REGIONS). Owned. */
int chanq_decode_spatial_regions(const chanq_msg_t *msg,
                                 Channeldpb__SpatialRegionsUpdateMessage **ret);

/* DEBUG_GET_SPATIAL_REGIONS (99) on channel 0 (chanqd --dev only); the reply has msgType 13. */
int chanq_client_debug_spatial_regions(chanq_client_t *c, uint32_t stub_id);

/* ---- QUERY_SPATIAL_CHANNEL (11) ------------------------------------------------------------ */

/* QUERY_SPATIAL_CHANNEL (11) on channel 0 with n points (pts may be NULL when n is 0). */
int chanq_client_query_spatial(chanq_client_t *c, uint32_t stub_id, const chanq_vec3_t *pts,
                               size_t n);

/* Decodes a QuerySpatialChannelResultMessage (msgType 11). Owned. */
int chanq_decode_query_result(const chanq_msg_t *msg,
                              Channeldpb__QuerySpatialChannelResultMessage **ret);

/* Called once with the reply of chanq_client_query_spatial_call: err is 0 and ids[0..n) the
 * channel ids in the order of the points (0 for a point off the grid), or err is CQ_EDECODE /
 * -EINVAL (then ids is NULL, n 0). ids is borrowed for the duration of the call. */
typedef void (*chanq_query_fn)(void *ud, int err, const uint32_t *ids, size_t n);

/* Queries as an RPC: allocates a stub whose callback decodes the reply and calls fn(ud, ...).
 * If the stub is cancelled or the client freed first, fn is never called and nothing leaks.
 * *ret_stub (may be NULL) gets the stub id. Returns like chanq_client_send, -EINVAL for a NULL
 * fn. */
int chanq_client_query_spatial_call(chanq_client_t *c, const chanq_vec3_t *pts, size_t n,
                                    chanq_query_fn fn, void *ud, uint32_t *ret_stub);

/* ---- UPDATE_SPATIAL_INTEREST (14) (§4.4) -------------------------------------------------- */

/* A spatial interest query: any combination of the four shapes (NULL/0 = absent). The server
 * applies them in the order spots, box, sphere, cone. */
typedef struct chanq_interest {
    const chanq_vec3_t *spots; /* n_spots points */
    const uint32_t *dists;     /* NULL, or n_spots damping distances */
    size_t n_spots;
    bool has_box;
    chanq_vec3_t box_center, box_extent;
    bool has_sphere;
    chanq_vec3_t sphere_center;
    double sphere_radius;
    bool has_cone;
    chanq_vec3_t cone_center, cone_dir;
    double cone_angle; /* radians; a half-angle (§4.4) */
    double cone_radius;
} chanq_interest_t;

/* UPDATE_SPATIAL_INTEREST (14) for client conn_id, sent on channel_id (any existing channel;
 * GLOBAL 0 works). Sent by a server on behalf of a client. The outcome arrives as SUB/UNSUB
 * results (the client's UNSUB results carry stub_id). */
int chanq_client_spatial_interest(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                                  uint32_t conn_id, const chanq_interest_t *q);

/* One-shape shortcuts of chanq_client_spatial_interest. */
int chanq_client_interest_spots(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                                uint32_t conn_id, const chanq_vec3_t *spots, const uint32_t *dists,
                                size_t n);
int chanq_client_interest_box(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                              uint32_t conn_id, chanq_vec3_t center, chanq_vec3_t extent);
int chanq_client_interest_sphere(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                                 uint32_t conn_id, chanq_vec3_t center, double radius);
int chanq_client_interest_cone(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                               uint32_t conn_id, chanq_vec3_t center, chanq_vec3_t dir,
                               double angle, double radius);

/* ---- entities (§4.5) ---------------------------------------------------------------------- */

/* CREATE_ENTITY_CHANNEL (15) on channel_id (0 = GLOBAL, or a spatial cell). entity_id must be
 * >= the server's entity range start (chanqd checks; the client only rejects 0 with -EINVAL).
 * sub_opts and data may be NULL; data->merge_opts becomes the mergeOptions. The reply is a
 * CreateChannelResultMessage under msgType 15 (chanq_decode_entity_create_result). */
int chanq_client_create_entity(chanq_client_t *c, uint32_t stub_id, uint32_t channel_id,
                               uint32_t entity_id, const char *metadata,
                               const Channeldpb__ChannelSubscriptionOptions *sub_opts,
                               const chanq_channel_data_t *data, bool well_known);

/* Decodes the reply to CREATE_ENTITY_CHANNEL (msgType 15). Owned. */
int chanq_decode_entity_create_result(const chanq_msg_t *msg,
                                      Channeldpb__CreateChannelResultMessage **ret);

/* ENTITY_GROUP_ADD (16) / ENTITY_GROUP_REMOVE (17) on entity channel entity_id (its owner only);
 * group_type is CHANNELDPB__ENTITY_GROUP_TYPE__HANDOVER or __LOCK; ids[0..n) borrowed. */
int chanq_client_entity_group_add(chanq_client_t *c, uint32_t entity_id, uint32_t group_type,
                                  const uint32_t *ids, size_t n);
int chanq_client_entity_group_remove(chanq_client_t *c, uint32_t entity_id, uint32_t group_type,
                                     const uint32_t *ids, size_t n);

/* ---- handover (§4.6) ------------------------------------------------------------------------ */

/* Decodes CHANNEL_DATA_HANDOVER (12): srcChannelId, dstChannelId, contextConnId and the data Any
 * (a SpatialChannelData of the moved entities; data is NULL when the server sent none). Owned. */
int chanq_decode_handover(const chanq_msg_t *msg, Channeldpb__ChannelDataHandoverMessage **ret);

#endif
