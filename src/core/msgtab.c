/* msgtab.c - the message table: one row per built-in message type the server handles.
 *
 * A row says everything the inbound pipeline (dispatch.c) needs to know about a type: what its
 * body must decode as, which handler runs, where it runs and the type's exceptions to the common
 * path. dispatch.c has no per-type code, so a new type is a row here plus a handler in its own
 * file. The table is indexed by the type (designated initializers), so the lookup on every
 * inbound message is one bounds check and one load.
 *
 * Adding a message type (the spatial and entity types 10-18 and 99 of channeld, for example):
 *   1. name its number in the MT_ enum in msgtab.h;
 *   2. write the handler in its own file, handle_<name>.c (handle_disconnect.c is the
 *      example): void cq__handle_<name>(cq_core_t *c, cq_req_t *r). It gets the decoded body
 *      from cq__req_body(c, r), answers with cq__reply()/cq__notify(), and reaches other
 *      workers only through the placement seam (place.c). Declare it in core.h or world.h and add
 *      the file to meson.build;
 *   3. add its row below: type, channeld's name, body descriptor, handler, where it runs and
 *      its flags.
 * Who may send it is the business of the FSM files in config/, not of the table.
 * User-space types (>= CQ_USER_SPACE_START) share one row, cq__msg_user (forward.c). */
#include "core.h"
#include "msgtab.h"
#include "world.h"

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
