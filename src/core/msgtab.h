/* msgtab.h - the messages the core handles: channeld's message types and broadcast flags,
 * the request a handler gets, the message table (msgtab.c) and the inbound pipeline that reads
 * it (dispatch.c). Not a public header.
 *
 * A handler is declared with its family, in the header of the files that keep what it
 * touches: core.h for connections, channels, subscriptions, data and user-space messages,
 * world.h for the spatial world. */
#ifndef CQ_MSGTAB_H
#define CQ_MSGTAB_H

#include "cq_core.h"

#include "channeld.pb-c.h"
#include "cq_wire.h"
#include "place.h"

#define CQ_USER_SPACE_START 100u

/* MessageType values handled by the core. */
enum {
    MT_AUTH = 1,
    MT_CREATE_CHANNEL = 3,
    MT_REMOVE_CHANNEL = 4,
    MT_LIST_CHANNEL = 5,
    MT_SUB = 6,
    MT_UNSUB = 7,
    MT_DATA_UPDATE = 8,
    MT_DISCONNECT = 9,
    MT_CREATE_SPATIAL = 10,
    MT_QUERY_SPATIAL = 11,
    MT_DATA_HANDOVER = 12,
    MT_REGIONS_UPDATE = 13,
    MT_UPDATE_INTEREST = 14,
    MT_CREATE_ENTITY = 15,
    MT_GROUP_ADD = 16,
    MT_GROUP_REMOVE = 17,
    MT_SPATIAL_READY = 18,
    MT_RECOVERY_CHANNEL_DATA = 20,
    MT_RECOVERY_END = 21,
    MT_CHANNEL_OWNER_LOST = 22,
    MT_CHANNEL_OWNER_RECOVERED = 23,
    MT_TOPIC_RESUME = 90, /* chanq's own (doc/protocol.md): a bridge resume (resume.c) */
    MT_TOPIC_ACK = 92,    /* chanq's own: a player acknowledges routed events (resume.c) */
    MT_DEBUG_REGIONS = 99,
};

enum {
    BC_SINGLE = 1,
    BC_ALL = 2,
    BC_BUT_SENDER = 4,
    BC_BUT_OWNER = 8,
    BC_BUT_CLIENT = 16,
    BC_BUT_SERVER = 32,
    BC_ADJACENT = 64,
    /* chanq's, never on the wire: a bridge event, held back from a resuming connection */
    BC_BRIDGE = 1u << 16
};

/* A request being handled: the inbound message and who sent it. conn is set only when the
 * sender is a connection of this worker. */
struct cq_req {
    uint32_t conn_id;
    uint8_t conn_type;
    cq_mp_t mp;
    cq_conn_t *conn;
    uint8_t bounced; /* came back from another node that vouched for its target (node.c) */
};

/* ---- the message table (msgtab.c) ---- */

/* Where a type's handler runs. */
typedef enum cq_msg_where {
    CQ_WHERE_SENDER = 1, /* on the sender's worker, as soon as the message is admitted */
    CQ_WHERE_CHANNEL,    /* on the worker that owns the MessagePack's channel */
    CQ_WHERE_GLOBAL,     /* channel 0 only (GLOBAL's worker); another channel is ignored */
} cq_msg_where_t;

/* A type's exceptions to the common path (cq_msg_def_t.flags). */
enum {
    CQ_MSGF_CLOSE_OFF_GLOBAL = 1u << 0, /* sent on a channel other than 0: close the sender */
    CQ_MSGF_QUIET_NO_CHANNEL = 1u << 1, /* unknown channel: dropped and counted, not logged */
    CQ_MSGF_SERVER_SFM = 1u << 2,       /* a SERVER's body must be a ServerForwardMessage */
};

typedef void (*cq_msg_handler_t)(cq_core_t *c, cq_req_t *r);

/* One row per message type. */
typedef struct cq_msg_def {
    uint32_t type;                          /* the MessageType; also the row's index */
    const char *name;                       /* channeld's MessageType name */
    const ProtobufCMessageDescriptor *body; /* the body must decode as this; NULL: not decoded */
    cq_msg_handler_t handler;
    uint8_t where; /* cq_msg_where_t */
    uint8_t flags; /* CQ_MSGF_* */
} cq_msg_def_t;

extern const cq_msg_def_t cq__msg_table[CQ_USER_SPACE_START]; /* handler NULL: none */
extern const cq_msg_def_t cq__msg_user; /* every type >= CQ_USER_SPACE_START */

/* The row of a message type, or NULL when the server has no handler for it. Borrowed,
 * static. */
static inline const cq_msg_def_t *cq__msg_def(uint32_t type)
{
    if (type >= CQ_USER_SPACE_START)
        return &cq__msg_user;
    return cq__msg_table[type].handler ? &cq__msg_table[type] : NULL;
}

/* The request's body unpacked as its row's type into the worker's arena (valid until the arena
 * is reset after the message), or NULL when it does not decode or the type has no body. */
void *cq__req_body(cq_core_t *c, const cq_req_t *r);

/* dispatch.c */
int cq__dispatch_packet(cq_core_t *c, cq_conn_t *conn, const uint8_t *body, size_t len);
void cq__handle_req(cq_core_t *c, cq_req_t *r);

#endif
