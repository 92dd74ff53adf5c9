/* cq_mqmgr.h - the management port's codec (issue 13; doc/protocol-mq.md "Management port"):
 * the messages SDKs, servers and the manager (src/mgr) exchange. Pure, no I/O.
 *
 * Frames are the MQ port's (cq_mq_parse, cq_mq_header_write, the 12-byte header); the types
 * are scoped to the management port:
 *   1 req_svrconfig (SDK -> mgr) / req_sync_serverinfo (server -> mgr): a type-1 body with the
 *     key "serverinfo" is a sync, any other a svrconfig;
 *   2 the response of either: a body with the key "servers" answers a svrconfig (its encoder
 *     always writes "servers", [] on error), any other a sync;
 *   3 req_command (mgr -> server), 4 resp_command (server -> mgr);
 *   20 the error frame (CQ_MQ_RESP_ERROR), as on the MQ port.
 *
 * cq_mqmgr_decode() validates a body into an owned cq_mqmgr_msg_t (err names the field, as
 * cq_mq_decode does: `sync_serverinfo: field "ext.repl.lag_seconds": must be an integer in
 * [-1, 9007199254740991]`); cq_mqmgr_encode() writes one (compact JSON, fields in a fixed
 * order: equal messages give equal bytes). Any thread; no state between calls.
 */
#ifndef CQ_MQMGR_H
#define CQ_MQMGR_H

#include "cq_buf.h"
#include "cq_mq.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CQ_MQMGR_REQ          1  /* req_svrconfig or req_sync_serverinfo */
#define CQ_MQMGR_RESP         2  /* resp of either */
#define CQ_MQMGR_REQ_COMMAND  3  /* mgr -> server */
#define CQ_MQMGR_RESP_COMMAND 4  /* server -> mgr */
#define CQ_MQMGR_ERROR        20 /* = CQ_MQ_RESP_ERROR */

#define CQ_MQMGR_CMD_PUBLISH_CONFIG 1
#define CQ_MQMGR_CMD_OFFLINE        2
#define CQ_MQMGR_CMD_INVALIDATE     3 /* {"topic": T, "offset": N}: the master sets it state 0 */
#define CQ_MQMGR_CMD_MESSAGE        4 /* {"topic": T, "offset": N}: the answer's "message" */

#define CQ_MQMGR_PREAUTH_MAX_TOTAL (64u * 1024u) /* frame limit before the first auth'd request */
#define CQ_MQMGR_MAX_TOTAL         (CQ_MQ_HDR_LEN + (1u << 20))
#define CQ_MQMGR_HOST_MAX          255 /* "ip" of a svrconfig server entry, "ext.addr" */
#define CQ_MQMGR_ID_MAX            128 /* a consumer id in ext.topics[].consumers[] */
#define CQ_MQMGR_TOPICS_MAX        256 /* ext.topics entries */
#define CQ_MQMGR_CONSUMERS_MAX     64  /* consumers of one ext.topics entry */
#define CQ_MQMGR_SERVERS_MAX       4096
#define CQ_MQMGR_CFG_TOPICS_MAX    10000 /* topics of a publish_config */
#define CQ_MQMGR_CLUSTER_MAX       32    /* a relay's name (--relay-cluster) */
#define CQ_MQMGR_NODE_MAX          1023  /* a relay node's id */
#define CQ_MQMGR_LINKS_MAX         255   /* ext.relay.links entries (a node's peers) */
#define CQ_MQMGR_RELAY_NODES_MAX   256   /* relay_nodes of a svrconfig answer */

typedef enum cq_mqmgr_kind {
    CQ_MQMGR_SVRCONFIG = 1,  /* type 1 */
    CQ_MQMGR_SYNC,           /* type 1 with "serverinfo" */
    CQ_MQMGR_SVRCONFIG_RESP, /* type 2 with "servers" */
    CQ_MQMGR_SYNC_RESP,      /* type 2 */
    CQ_MQMGR_COMMAND,        /* type 3 */
    CQ_MQMGR_COMMAND_RESP,   /* type 4 */
    CQ_MQMGR_ERROR_FRAME,    /* type 20: {askid O, err_code, err_msg O} */
} cq_mqmgr_kind_t;

/* The seed's serverinfo (u32 each): cpu in percent of one core, mem in MiB, packages = pending
 * durable writes + queued sends, sockets = connections. */
typedef struct cq_mqmgr_info {
    uint32_t threads, packages, cpu, mem, sockets;
} cq_mqmgr_info_t;

/* Bits of cq_mqmgr_ext_t.has: which optional ext fields the report had. */
enum {
    CQ_MQMGR_X_ADDR = 1u << 0,
    CQ_MQMGR_X_SHARD = 1u << 1,
    CQ_MQMGR_X_MASTER = 1u << 2,
    CQ_MQMGR_X_OFFLINE = 1u << 3,
    CQ_MQMGR_X_DRAINING = 1u << 4,
    CQ_MQMGR_X_CONFIG_VERSION = 1u << 5,
    CQ_MQMGR_X_PRODUCED = 1u << 6,
    CQ_MQMGR_X_CONSUMED = 1u << 7,
    CQ_MQMGR_X_REPL = 1u << 8,
    CQ_MQMGR_X_TOPICS = 1u << 9,
    CQ_MQMGR_X_RELAY = 1u << 10,
    CQ_MQMGR_X_EXT = 1u << 11, /* the "ext" object was there at all */
};

/* ext.repl; absent fields keep these values: false, lag_seconds -1, 0. */
typedef struct cq_mqmgr_repl {
    bool replica, io_running, sql_running;
    int64_t lag_seconds; /* -1 unknown */
    int64_t lag_transactions;
    int64_t behind_ms; /* 0 when caught up */
} cq_mqmgr_repl_t;

typedef struct cq_mqmgr_consumer {
    char id[CQ_MQMGR_ID_MAX + 1];
    int64_t offset, lag;
} cq_mqmgr_consumer_t;

/* One entry of ext.topics; absent fields: online true, numbers 0, no consumers. */
typedef struct cq_mqmgr_topic {
    char name[CQ_MQ_TOPIC_MAX + 1];
    bool online;
    int64_t last_offset, produced_total;
    cq_mqmgr_consumer_t *consumers; /* owned, nconsumers */
    size_t nconsumers;
} cq_mqmgr_topic_t;

#define CQ_MQMGR_NTRANSPORTS 4 /* tcp, ws, wss, kcp */
#define CQ_MQMGR_NCHANTYPES  5 /* GLOBAL, PRIVATE, SUBWORLD, SPATIAL, ENTITY */
extern const char *const cq_mqmgr_transport_names[CQ_MQMGR_NTRANSPORTS];
extern const char *const cq_mqmgr_chantype_names[CQ_MQMGR_NCHANTYPES];

/* One entry of ext.relay.links: the reporting node's link with peer, as its chanq_relay_link_*
 * metrics count it (packets: NATS messages; in = delivered in order). Absent numbers are 0. */
typedef struct cq_mqmgr_link {
    uint32_t peer; /* 1..CQ_MQMGR_NODE_MAX */
    bool up;       /* the peer is a member and its HELLO came */
    int64_t packets_in, packets_out, bytes_out, gaps, resets, lost;
} cq_mqmgr_link_t;

/* ext.relay; absent fields are 0 (or ""). node > 0: the server is a relay node and reports its
 * identity (node, cluster, the client addresses by transport: "" when off), GLOBAL's home, the
 * members it sees and its links; node 0: none of these is encoded. */
typedef struct cq_mqmgr_relay {
    int64_t connections[CQ_MQMGR_NTRANSPORTS];
    int64_t channels[CQ_MQMGR_NCHANTYPES];
    int64_t subscribers, fanouts_total, slow_consumer_closes_total;
    uint32_t node, global_home, members;
    char cluster[CQ_MQMGR_CLUSTER_MAX + 1];
    char addrs[CQ_MQMGR_NTRANSPORTS][CQ_MQMGR_HOST_MAX + 1];
    cq_mqmgr_link_t *links; /* owned, nlinks, by peer */
    size_t nlinks;
} cq_mqmgr_relay_t;

/* chanq's extension of a sync (every field optional; has says which were there). */
typedef struct cq_mqmgr_ext {
    uint32_t has; /* CQ_MQMGR_X_* */
    char addr[CQ_MQMGR_HOST_MAX + 1];
    uint32_t shard;
    bool master, offline, draining;
    int64_t config_version, produced_total, consumed_total;
    cq_mqmgr_repl_t repl;
    cq_mqmgr_topic_t *topics; /* owned, ntopics */
    size_t ntopics;
    cq_mqmgr_relay_t relay;
} cq_mqmgr_ext_t;

/* One server of a svrconfig answer. */
typedef struct cq_mqmgr_server {
    char ip[CQ_MQMGR_HOST_MAX + 1];
    uint16_t port; /* 1..65535 */
    uint32_t shard;
} cq_mqmgr_server_t;

/* One relay node of a svrconfig answer (relay_nodes): where a client connects, by transport
 * ("" when the node does not serve it). */
typedef struct cq_mqmgr_relay_node {
    uint32_t node;
    char cluster[CQ_MQMGR_CLUSTER_MAX + 1];
    char addrs[CQ_MQMGR_NTRANSPORTS][CQ_MQMGR_HOST_MAX + 1];
} cq_mqmgr_relay_node_t;

/* One topic of a publish_config: {"<name>": {online, retention}}. */
typedef struct cq_mqmgr_cfg_topic {
    char name[CQ_MQ_TOPIC_MAX + 1];
    bool online;
    /* seconds, 0 = keep; CQ_MQMGR_RETENTION_UNSET (absent on the wire): the manager never set
     * one, and each server keeps its own */
    int64_t retention;
} cq_mqmgr_cfg_topic_t;
#define CQ_MQMGR_RETENTION_UNSET (-1)

/* A publish_config's content. */
typedef struct cq_mqmgr_config {
    int64_t version;
    char *modules; /* owned compact JSON text of the "modules" object: exactly the
                    * --mq-permissions-file document (cq_mqperm_load reads it); NULL when
                    * absent: the manager has no module, the servers keep their own table */
    size_t modules_len;
    cq_mqmgr_cfg_topic_t *topics; /* owned, ntopics, in the order received */
    size_t ntopics;
    char *bindings; /* owned compact JSON text of the "bindings" object: exactly a --bridge-file
                     * document ({"bindings":[...]}, cq_bindings_parse reads it; the codec only
                     * checks it is an object); NULL when absent: the manager never saved
                     * bindings, the servers keep their own file */
    size_t bindings_len;
} cq_mqmgr_config_t;

/* A decoded or to-be-encoded message. Plain data: the fields of its kind are meaningful,
 * pointers are owned and released by cq_mqmgr_msg_free(). has_err_msg: err_msg set. */
typedef struct cq_mqmgr_msg {
    cq_mqmgr_kind_t kind;
    uint16_t msg_id;
    uint32_t askid;
    bool has_askid;             /* the error frame's askid is optional */
    uint32_t module_id;         /* svrconfig, svrconfig_resp */
    char *token;                /* owned; svrconfig, sync (<= 256 bytes) */
    uint32_t group_id, appid;   /* sync */
    cq_mqmgr_info_t info;       /* sync */
    cq_mqmgr_ext_t ext;         /* sync */
    uint32_t err_code;          /* responses, error frame */
    char *err_msg;              /* owned or NULL; responses, error frame (<= 512 bytes) */
    int64_t config_version;     /* sync_resp */
    cq_mqmgr_server_t *servers; /* owned; svrconfig_resp */
    size_t nservers;
    cq_mqmgr_relay_node_t *relay_nodes; /* owned; svrconfig_resp ("relay_nodes", encoded when */
    size_t nrelay_nodes;                /* there is at least one) */
    uint32_t cmdid;                     /* command, command_resp */
    cq_mqmgr_config_t config;           /* command 1 */
    bool offline;                       /* command 2 */
    char topic[CQ_MQ_TOPIC_MAX + 1];    /* commands 3, 4 */
    uint64_t offset;                    /* commands 3, 4: 1..2^53-1 */
    uint64_t key_producer, key_seq;     /* command 4 without an offset: by producer key */
    char *message; /* owned compact JSON text of command_resp's "message" object (command 4's
                    * answer: the message looked up), or NULL when absent */
    size_t message_len;
} cq_mqmgr_msg_t;

/* The frame type of a kind (1, 2, 3, 4, 20). */
uint8_t cq_mqmgr_kind_type(cq_mqmgr_kind_t kind);
/* "svrconfig", "sync_serverinfo", "svrconfig_resp", "sync_serverinfo_resp", "command",
 * "command_resp", "error"; never NULL. */
const char *cq_mqmgr_kind_name(cq_mqmgr_kind_t kind);

/* Returns an owned, zeroed message of kind (ext.repl.lag_seconds -1), or NULL on OOM. */
cq_mqmgr_msg_t *cq_mqmgr_msg_new(cq_mqmgr_kind_t kind, uint16_t msg_id);
/* Frees m and everything it owns. Accepts NULL; returns NULL. */
cq_mqmgr_msg_t *cq_mqmgr_msg_free(cq_mqmgr_msg_t *m);
/* Sets m->token or m->err_msg (which points at one of them) to a copy of s (NULL clears).
 * CQ_EFIELD when s is not UTF-8 without NUL, -ENOMEM. */
int cq_mqmgr_msg_set_str(cq_mqmgr_msg_t *m, char **which, const char *s);
/* Builders of the arrays of a message built by hand, not of a decoded one (copied; validated as
 * decode would): CQ_EFIELD, CQ_EBADTOPIC, CQ_ELIMIT (over the *_MAX above), -ENOMEM. */
int cq_mqmgr_msg_add_server(cq_mqmgr_msg_t *m, const char *ip, uint16_t port, uint32_t shard);
int cq_mqmgr_msg_add_topic(cq_mqmgr_msg_t *m, const char *name, bool online, int64_t last_offset,
                           int64_t produced_total); /* ext.topics; sets CQ_MQMGR_X_TOPICS */
int cq_mqmgr_msg_add_consumer(cq_mqmgr_msg_t *m, const char *id, int64_t offset,
                              int64_t lag); /* to the last ext.topics entry */
/* ext.relay.links (sets CQ_MQMGR_X_RELAY): l is copied. */
int cq_mqmgr_msg_add_link(cq_mqmgr_msg_t *m, const cq_mqmgr_link_t *l);
/* relay_nodes of a svrconfig answer: addrs[CQ_MQMGR_NTRANSPORTS] ("" or NULL: off). */
int cq_mqmgr_msg_add_relay_node(cq_mqmgr_msg_t *m, uint32_t node, const char *cluster,
                                const char *const *addrs);
/* publish_config: modules is the text of a JSON object (parsed, stored compact). */
int cq_mqmgr_config_set_modules(cq_mqmgr_config_t *c, const char *modules, size_t len);
/* publish_config: bindings is the text of a JSON object, the bindings document (parsed, stored
 * compact). CQ_EFIELD when it is not a JSON object, -ENOMEM. */
int cq_mqmgr_config_set_bindings(cq_mqmgr_config_t *c, const char *bindings, size_t len);
/* command_resp's "message": the text of a JSON object (parsed, stored compact). CQ_EFIELD when
 * it is not one, -ENOMEM. */
int cq_mqmgr_msg_set_message(cq_mqmgr_msg_t *m, const char *json, size_t len);
/* A message found by command 4, for its answer's "message" (borrowed for the call). */
typedef struct cq_mqmgr_found {
    uint64_t offset;
    int state; /* 1 valid, 0 invalid */
    int64_t create_ms;
    uint64_t producer_id, seq;
    const void *content;
    size_t len;
    size_t cap; /* content bytes sent at most: as text when UTF-8 (cut at a character), else
                 * the first cap / 2 bytes as hex ("content_hex") */
} cq_mqmgr_found_t;
/* Sets command_resp's "message" to f's fields (protocol-mq.md command 4). 0 or -ENOMEM. */
int cq_mqmgr_msg_set_found(cq_mqmgr_msg_t *m, const cq_mqmgr_found_t *f);
/* retention: seconds (0: keep), or CQ_MQMGR_RETENTION_UNSET. */
int cq_mqmgr_config_add_topic(cq_mqmgr_config_t *c, const char *name, bool online,
                              int64_t retention);

/* Decodes f (a frame parsed by cq_mq_parse) into *ret (returned owned). The type's kind is
 * told by the keys (see above). max_depth: JSON nesting, 0 = CQ_MQ_DEFAULT_MAX_DEPTH.
 * Errors: CQ_ENOTYPE (a type other than 1, 2, 3, 4, 20), CQ_EJSON (invalid JSON, duplicate keys,
 * not an object, too deep), CQ_EFIELD (missing, wrong JSON type, out of range, unknown cmdid),
 * CQ_EBADTOPIC, CQ_ELIMIT (too many entries), -ENOMEM, with the text in err. Unknown keys are
 * ignored everywhere. */
int cq_mqmgr_decode(const cq_mq_frame_t *f, uint32_t max_depth, cq_mqmgr_msg_t **ret, char *err,
                    size_t errlen);

/* Encodes m as a frame into a refcounted buffer (returned owned, one reference). CQ_EFIELD (a
 * value out of range or a string that is not UTF-8), -ENOMEM. */
int cq_mqmgr_encode_buf(const cq_mqmgr_msg_t *m, cq_buf_t **ret);
/* The same into a cq_malloc'd array (*ret, cq_free) of *ret_len bytes. */
int cq_mqmgr_encode(const cq_mqmgr_msg_t *m, uint8_t **ret, size_t *ret_len);
/* The same frame, appended to out when it is at most max bytes (CQ_EBADLEN otherwise); out is
 * unchanged on failure. */
int cq_mqmgr_encode_to(const cq_mqmgr_msg_t *m, size_t max, struct cq_sbuf *out);

/* The answer to a request f refused with err (contract 1): a type 1 or 3 body refused for what
 * it says (CQ_EFIELD, CQ_EBADTOPIC, CQ_EAUTH...) → that type's response (svrconfig: askid and
 * module_id echoed when valid, servers []; sync: askid, config_version; command: askid, cmdid
 * echoed when valid) with err_code cq_mq_errcode(err) and err_msg (cut to 512 bytes);
 * anything else (CQ_EJSON, CQ_ENOTYPE, CQ_EBADLEN, CQ_EHEADER, a response) → an error frame 20
 * with the askid when the body has a valid one. f may be NULL (frame 20, msg_id 0). */
int cq_mqmgr_encode_error_buf(const cq_mq_frame_t *f, int err, const char *err_msg,
                              int64_t config_version, cq_buf_t **ret);

#endif
