/* engine.h - the management engine's own internals (mgr.c, state.c, registry.c, proto.c,
 * metrics.c): the state document, the server registry and the connections. Not for api.c,
 * which goes through mgr_int.h. Engine thread only.
 */
#ifndef CQ_MGR_ENGINE_H
#define CQ_MGR_ENGINE_H

#include "cq_authlim.h"
#include "cq_list.h"
#include "cq_mgr.h"
#include "cq_mqmgr.h"
#include "hist.h"
#include "mgr_int.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- the state document (state.c) ---------------------------------------------------------
 * The document is kept as a jansson object, validated: {"version", "modules", "topics",
 * "offline", "groups"} always present after cq__mgr_state_check(); "bindings" (a --bridge-file
 * document, doc/bridge.md) only once bindings were saved: its absence is what tells the servers
 * to keep their own files. Changes are kept as ops until saved, so that after a compare-and-set
 * miss they can be applied again on top of what the other manager wrote. */
typedef enum mgr_op_kind {
    MGR_OP_MODULE_PUT,
    MGR_OP_MODULE_DELETE,
    MGR_OP_TOPIC,           /* online flag */
    MGR_OP_SERVER,          /* offline flag */
    MGR_OP_BINDINGS,        /* the bindings document replaced */
    MGR_OP_TOPIC_RETENTION, /* retention set (a topic new to the state takes flag as online) */
    MGR_OP_TOPIC_CREATE,    /* a topic new to the state, online; retention when not UNSET */
} mgr_op_kind_t;

typedef struct mgr_op {
    mgr_op_kind_t kind;
    uint32_t id;                     /* module id, appid */
    char topic[CQ_MQ_TOPIC_MAX + 1]; /* MGR_OP_TOPIC */
    bool flag;                       /* online (topic), offline (server) */
    int64_t retention;               /* MGR_OP_TOPIC_RETENTION: seconds, 0 = keep forever */
    json_t *module;                  /* MGR_OP_MODULE_PUT: the module object as requested */
    json_t *bindings;                /* MGR_OP_BINDINGS: the document, already checked */
} mgr_op_t;

/* Validates doc (borrowed) as a state document; fills missing sections with empty ones.
 * 0 or CQ_EJSON/CQ_EFIELD with err naming the field ("modules.7.produce[0]: ..."). */
int cq__mgr_state_check(json_t *doc, char *err, size_t errlen);
/* Checks a bindings document (json[0..len), borrowed) as the servers will (cq_bindings_parse):
 * 0, or CQ_EFIELD with err exactly the parser's message ("binding 2: \"msg_type\" must be an
 * integer from 100 to 65535", doc/bridge.md), or -ENOMEM. */
int cq__mgr_bindings_check(const char *json, size_t len, char *err, size_t errlen);
/* A new empty document, version 0. NULL on OOM. */
json_t *cq__mgr_state_empty(void);
/* Applies op to doc (version not touched). 0, CQ_EFIELD (err), -ENOENT (absent module), -ENOMEM. */
int cq__mgr_state_apply(json_t *doc, const mgr_op_t *op, char *err, size_t errlen);
/* The "version" of doc. */
int64_t cq__mgr_state_version(const json_t *doc);
/* True when appid is in doc's offline list. */
bool cq__mgr_state_offline(const json_t *doc, uint32_t appid);
/* The module object of id, or NULL. */
json_t *cq__mgr_state_module(const json_t *doc, uint32_t id);
/* The publish_config content of doc (modules without "groups"; bindings when saved once), as a
 * command to encode. */
int cq__mgr_state_config(const json_t *doc, cq_mqmgr_config_t *cfg);
/* Frees what op owns. */
void cq__mgr_op_done(mgr_op_t *op);

/* ---- the registry (registry.c) ---------------------------------------------------------- */
typedef struct mgr_server {
    uint32_t appid, group_id;
    cq_mgr_conn_t *conn;  /* its current connection, or NULL */
    cq_mqmgr_msg_t *last; /* the last sync (owned) */
    cq_mqmgr_msg_t *prev; /* the one before (owned; rates), or NULL */
    uint64_t last_ms, prev_ms;
} mgr_server_t;

#define MGR_SERVERS_MAX 4096

/* The server of appid, created when create (NULL on OOM or when full of live servers). */
mgr_server_t *cq__mgr_server_get(cq_mgr_t *m, uint32_t appid, bool create);
/* Records a sync report (taken) at now_ms. */
void cq__mgr_server_report(mgr_server_t *s, cq_mqmgr_msg_t *report, uint64_t now_ms);
bool cq__mgr_server_stale(const cq_mgr_t *m, const mgr_server_t *s, uint64_t now_ms);
/* Effective flags of a report: master (absent = true: seed servers do not say), shard. */
bool cq__mgr_server_master(const mgr_server_t *s);
uint32_t cq__mgr_server_shard(const mgr_server_t *s);
/* A relay node's ext.relay (its report carries a node id), or NULL. */
const cq_mqmgr_relay_t *cq__mgr_server_relay_node(const mgr_server_t *s);
/* A relay node that is no shard's server (shard 0): its MQ port is there for its reports, so it
 * is listed as a relay node (svrconfig's relay_nodes), not as a durable-topic server or a
 * shard. */
bool cq__mgr_server_relay_only(const mgr_server_t *s);
/* The live relay nodes (not stale, not offline by flag or report), at most cap, sorted by relay
 * then node; of two reports for one (relay, node) (a node restarted on another MQ port, a new
 * appid) the newer, into ret[0..*ret_n). 0 or -ENOMEM. */
int cq__mgr_relay_nodes(const cq_mgr_t *m, uint64_t now_ms, const mgr_server_t **ret, size_t cap,
                        size_t *ret_n);
/* Messages per second between the last two reports of a running total (0 without two). */
double cq__mgr_rate(int64_t now_v, int64_t prev_v, uint64_t now_ms, uint64_t prev_ms);
/* True when appid is offline: flagged in the state. */
bool cq__mgr_server_offline(const cq_mgr_t *m, const mgr_server_t *s);
/* Whether shard's standby lags over lag_alert_ms, and by how much (behind_ms). */
bool cq__mgr_shard_alert(const cq_mgr_t *m, uint32_t shard, uint64_t now_ms, int64_t *behind_ms);

/* ---- connections (proto.c) -------------------------------------------------------------- */
#define MGR_CMDS_PENDING 64

struct cq_mgr_conn {
    cq_mgr_t *m;
    cq_mgr_conn_ops_t ops;
    void *tctx;
    char peer[64];
    cq_sbuf_t in;
    cq_sendq_t sendq;
    cq_list_t node;       /* m->conns */
    cq_list_t flush_node; /* m->flushq while output is queued */
    bool authed, closing, synced;
    mgr_server_t *srv; /* the server this connection reports for, or NULL */
    struct {
        uint32_t askid, cmdid;
    } cmds[MGR_CMDS_PENDING]; /* commands sent and not answered (ring) */
    uint32_t ncmds, cmd_head;
    uint64_t frames; /* whole frames taken (the edge's idle timeout) */
};

/* Queues a buffer (borrowed) on c and marks it for the flush. false: c was closed (slow). */
bool cq__mgr_conn_send(cq_mgr_conn_t *c, cq_buf_t *b);
/* Sends publish_config (the current state) or offline to c. */
void cq__mgr_send_config(cq_mgr_conn_t *c);
void cq__mgr_send_offline(cq_mgr_conn_t *c, bool offline);
/* After a state change: publish_config to every connected server, and the offline command to
 * each whose flag differs between old_doc (borrowed, may be NULL) and the current document. */
void cq__mgr_broadcast(cq_mgr_t *m, const json_t *old_doc);

/* ---- message commands (msgcmd.c) -------------------------------------------------------- */
#define MGR_WAITS_MAX 64
#define MGR_WAIT_MS   10000 /* a master that has not answered by then: the API answers 504 */

/* An invalidate (command 3) or a lookup (command 4) sent to a server, waiting for its answer;
 * ud is the API's. */
typedef struct mgr_wait {
    uint32_t askid, cmdid, shard;
    cq_mgr_conn_t *c;
    void *ud;
    uint64_t deadline_ms;
    uint64_t offset;                /* 0: a lookup by producer key */
    uint64_t key_producer, key_seq; /* that key */
    char topic[CQ_MQ_TOPIC_MAX + 1];
} mgr_wait_t;

/* A command answer on c: true when it was a wait's (the API is told), false otherwise. */
bool cq__mgr_wait_answer(cq_mgr_conn_t *c, const cq_mqmgr_msg_t *resp);
/* c is closing: its waits end with CQ_ECLOSED. */
void cq__mgr_waits_lost(cq_mgr_conn_t *c);
/* Every wait ends with CQ_ECLOSED (the engine is freed). */
void cq__mgr_waits_end(cq_mgr_t *m);
/* The waits past their deadline end with CQ_ETIMEOUT. */
void cq__mgr_waits_tick(cq_mgr_t *m, uint64_t now_ms);

/* ---- the engine (mgr.c) ------------------------------------------------------------------ */
enum { MGR_CMD_PUBLISH = 0, MGR_CMD_OFFLINE = 1 };
enum { MGR_RES_OK = 0, MGR_RES_ERROR = 1, MGR_RES_LOST = 2 };

struct cq_mgr {
    cq_mgr_opts_t o;
    char *admin_token, *server_token, *http_hosts, *audit_path;
    const cq_mgr_ops_t *ops;
    void *ud;
    cq_mgr_api_t *api;
    cq_authlim_t *authlim;
    /* the state */
    json_t *doc;       /* current, with the pending ops applied */
    int64_t store_ver; /* the store's version doc was based on (-1: none) */
    bool loaded;       /* a load answered at least once */
    mgr_op_t *pending; /* changes not saved yet, oldest first */
    size_t npending, pending_cap;
    size_t ninflight; /* pending[0..ninflight) are in the save in flight */
    bool saving, save_failed, reload_wanted;
    /* the registry */
    mgr_server_t **servers; /* by appid, sorted */
    size_t nservers, servers_cap;
    /* connections */
    cq_list_t conns, flushq;
    uint32_t next_askid;
    mgr_wait_t waits[MGR_WAITS_MAX]; /* invalidates in flight (msgcmd.c) */
    size_t nwaits;
    uint64_t now_ms; /* the last clock seen (input, tick) */
    /* metrics */
    uint64_t commands[2][3]; /* [publish_config|offline][ok|error|lost] */
    uint64_t svrconfig_total, sync_total, audit_total, save_conflicts, save_errors;
    /* the console's charts (hist.h), sampled at o.chart_ms */
    mgr_hist_t *hist;
    uint64_t sampled_ms;
};

/* Samples the charts' figures from the registry into m->hist (view.c). */
void cq__mgr_sample(cq_mgr_t *m, uint64_t now_ms);

/* Appends the chanq_mgr_* metrics (metrics.c). */
int cq__mgr_metrics(const cq_mgr_t *m, uint64_t now_ms, cq_sbuf_t *out);
/* Records a change: applies op at once (version + 1), broadcasts, queues the save. Returns the
 * new version or < 0 (op is released either way). */
int64_t cq__mgr_change(cq_mgr_t *m, mgr_op_t *op, char *err, size_t errlen);
/* Starts a save when one is due and none is in flight. */
void cq__mgr_save_kick(cq_mgr_t *m);

#endif
