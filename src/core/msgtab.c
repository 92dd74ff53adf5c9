/* msgtab.c - the message table: one row per built-in message type the server handles.
 *
 * A row says everything the inbound pipeline (dispatch.c) needs to know about a type: what its
 * body must decode as, which handler runs, where it runs and the type's exceptions to the common
 * path. dispatch.c has no per-type code, so a new type is a row here plus a handler. The table
 * is indexed by the type (designated initializers), so the lookup on every inbound message is
 * one bounds check and one load.
 *
 * Handlers live by message family, in the file that keeps what the family touches: auth.c
 * (AUTH), chan.c (CREATE/REMOVE/LIST_CHANNEL), sub.c (SUB/UNSUB), data.c (CHANNEL_DATA_UPDATE),
 * conn.c (DISCONNECT), forward.c (user-space), and for the spatial world spatial.c
 * (CREATE_SPATIAL/QUERY_SPATIAL_CHANNEL, DEBUG_GET_SPATIAL_REGIONS), interest.c
 * (UPDATE_SPATIAL_INTEREST) and entity.c (CREATE_ENTITY_CHANNEL, ENTITY_GROUP_ADD/REMOVE).
 *
 * Adding a message type: to an existing family, its handler goes in that family's file and is
 * declared next to its siblings; a new family (doc/architecture.md walks one through) is
 *   1. its number in the MT_ enum in msgtab.h (and its body in proto/channeld.proto if it is a
 *      new message);
 *   2. a file src/core/<family>.c including core.h and msgtab.h (and world.h for the spatial
 *      world) with void cq__handle_<name>(cq_core_t *c, cq_req_t *r): it gets the decoded body
 *      from cq__req_body(c, r), answers with cq__reply()/cq__notify(), and reaches other
 *      workers only through the placement seam (place.h); the file listed in core_src in
 *      src/core/meson.build (fuzz_core compiles core_src too);
 *   3. the handler declared in core.h (connections, channels, subscriptions, data, forwarding)
 *      or world.h (the spatial world), under a comment naming the file;
 *   4. its row below: type, channeld's name, body descriptor, handler, where it runs and its
 *      flags; and the type in the handled list of test_msg_table_rows (tests/unit/core).
 * Who may send it is the business of the FSM files in config/, not of the table.
 * User-space types (>= CQ_USER_SPACE_START) share one row, cq__msg_user (forward.c). */
#include "core.h"
#include "msgtab.h"
#include "world.h"

#include "bridge.pb-c.h"

/* clang-format off */
const cq_msg_def_t cq__msg_table[CQ_USER_SPACE_START] = {
    [MT_AUTH] = {MT_AUTH, "AUTH",
        &channeldpb__auth_message__descriptor, cq__handle_auth,
        CQ_WHERE_SENDER, CQ_MSGF_CLOSE_OFF_GLOBAL},
    [MT_CREATE_CHANNEL] = {MT_CREATE_CHANNEL, "CREATE_CHANNEL",
        &channeldpb__create_channel_message__descriptor, cq__handle_create,
        CQ_WHERE_GLOBAL, 0},
    [MT_REMOVE_CHANNEL] = {MT_REMOVE_CHANNEL, "REMOVE_CHANNEL",
        &channeldpb__remove_channel_message__descriptor, cq__handle_remove,
        CQ_WHERE_CHANNEL, 0},
    [MT_LIST_CHANNEL] = {MT_LIST_CHANNEL, "LIST_CHANNEL",
        &channeldpb__list_channel_message__descriptor, cq__handle_list,
        CQ_WHERE_GLOBAL, 0},
    [MT_SUB] = {MT_SUB, "SUB_TO_CHANNEL",
        &channeldpb__subscribed_to_channel_message__descriptor, cq__handle_sub,
        CQ_WHERE_CHANNEL, CQ_MSGF_QUIET_NO_CHANNEL},
    [MT_UNSUB] = {MT_UNSUB, "UNSUB_FROM_CHANNEL",
        &channeldpb__unsubscribed_from_channel_message__descriptor, cq__handle_unsub,
        CQ_WHERE_CHANNEL, CQ_MSGF_QUIET_NO_CHANNEL},
    [MT_DATA_UPDATE] = {MT_DATA_UPDATE, "CHANNEL_DATA_UPDATE",
        &channeldpb__channel_data_update_message__descriptor, cq__handle_data_update,
        CQ_WHERE_CHANNEL, 0},
    [MT_DISCONNECT] = {MT_DISCONNECT, "DISCONNECT",
        &channeldpb__disconnect_message__descriptor, cq__handle_disconnect,
        CQ_WHERE_GLOBAL, 0},
    /* Without a spatial controller this is CREATE_CHANNEL under another number. */
    [MT_CREATE_SPATIAL] = {MT_CREATE_SPATIAL, "CREATE_SPATIAL_CHANNEL",
        &channeldpb__create_channel_message__descriptor, cq__handle_create,
        CQ_WHERE_GLOBAL, 0},
    [MT_QUERY_SPATIAL] = {MT_QUERY_SPATIAL, "QUERY_SPATIAL_CHANNEL",
        &channeldpb__query_spatial_channel_message__descriptor, cq__handle_query_spatial,
        CQ_WHERE_GLOBAL, 0},
    /* Any existing channel (channeld: the client's cell, or GLOBAL); handled where connId lives. */
    [MT_UPDATE_INTEREST] = {MT_UPDATE_INTEREST, "UPDATE_SPATIAL_INTEREST",
        &channeldpb__update_spatial_interest_message__descriptor, cq__handle_update_interest,
        CQ_WHERE_CHANNEL, 0},
    /* On GLOBAL or a spatial cell. */
    [MT_CREATE_ENTITY] = {MT_CREATE_ENTITY, "CREATE_ENTITY_CHANNEL",
        &channeldpb__create_entity_channel_message__descriptor, cq__handle_create_entity,
        CQ_WHERE_CHANNEL, 0},
    /* On the entity's channel, from its owner. */
    [MT_GROUP_ADD] = {MT_GROUP_ADD, "ENTITY_GROUP_ADD",
        &channeldpb__add_entity_group_message__descriptor, cq__handle_group_add,
        CQ_WHERE_CHANNEL, 0},
    [MT_GROUP_REMOVE] = {MT_GROUP_REMOVE, "ENTITY_GROUP_REMOVE",
        &channeldpb__remove_entity_group_message__descriptor, cq__handle_group_remove,
        CQ_WHERE_CHANNEL, 0},
    /* chanq's own: a bridge resume (resume.c); the body is the bridge's to decode. */
    [MT_TOPIC_RESUME] = {MT_TOPIC_RESUME, "TOPIC_RESUME",
        NULL, cq__handle_topic_resume,
        CQ_WHERE_SENDER, 0},
    /* chanq's own: a player's acknowledgement of routed bridge events (resume.c). */
    [MT_TOPIC_ACK] = {MT_TOPIC_ACK, "TOPIC_ACK",
        &chanqpb__topic_ack_message__descriptor, cq__handle_topic_ack,
        CQ_WHERE_SENDER, 0},
    /* --dev only (the handler checks). */
    [MT_DEBUG_REGIONS] = {MT_DEBUG_REGIONS, "DEBUG_GET_SPATIAL_REGIONS",
        &channeldpb__debug_get_spatial_regions_message__descriptor, cq__handle_debug_regions,
        CQ_WHERE_GLOBAL, 0},
};

/* Every user-space type: the body is the game's own, forwarded as it is (a server's must be a
 * ServerForwardMessage, checked without decoding it). */
const cq_msg_def_t cq__msg_user = {CQ_USER_SPACE_START, "USER_SPACE",
    NULL, cq__handle_user,
    CQ_WHERE_CHANNEL, CQ_MSGF_SERVER_SFM};
/* clang-format on */

void *cq__req_body(cq_core_t *c, const cq_req_t *r)
{
    const cq_msg_def_t *d = cq__msg_def(r->mp.msg_type);
    if (!d || !d->body)
        return NULL;
    return cq_wire_unpack(d->body, r->mp.body, r->mp.body_len, &c->arena);
}
