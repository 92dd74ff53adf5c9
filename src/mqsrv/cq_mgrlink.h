/* cq_mgrlink.h - a server's link to its managers (issue 13, doc/mgr.md "Servers"): the client
 * side of the management protocol (doc/protocol-mq.md "Management port"), sans I/O.
 *
 * The edge (src/io/mq_mgr.c) keeps one TCP connection to a manager on the MQ loop and feeds
 * its bytes in; this engine
 *   - builds req_sync_serverinfo (type 1) frames from the host's figures (cq_mgrlink_host_t,
 *     gathered by the composition root) and the durable engine's (role, offline, topics,
 *     consumers, totals), every report_ms;
 *   - answers req_command (type 3) with resp_command (type 4): cmdid 1 publish_config swaps the
 *     permissions (cq_mqsrv_set_perms, the SIGHUP path), hands the bindings document to the
 *     bridge (opts.apply_bindings) and manages the topics' online flags (set by a master
 *     through the operation layer; a slave records them and sets them once it is master) and
 *     retention (cq_mqsrv_topic_set_retention); cmdid 2 offline takes the server out of service
 *     or back (cq_mqsrv_set_offline);
 *   - reads the sync answers (type 2): err 6 (a wrong --mgr-token-file secret) closes.
 * A bad publish_config is answered err 5 naming the field and changes nothing: modules that do
 * not load ("content.modules: <why>"), bindings the bridge refuses ("content.bindings: <why>").
 *
 * Threads: the engine's (the MQ loop) only, like the cq_mqsrv_t it drives.
 */
#ifndef CQ_MGRLINK_H
#define CQ_MGRLINK_H

#include "cq_mqsrv.h"
#include "cq_sbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cq_mgrlink cq_mgrlink_t;

#define CQ_MGRLINK_TOPICS_MAX    256 /* topics per report (contract 1) */
#define CQ_MGRLINK_CONSUMERS_MAX 64  /* consumers per topic per report */
/* The first sync of a connection authenticates it: the manager takes at most 64 KiB before
 * that, 1 MiB after. A report over its limit drops topics (the last ones) until it fits. */
#define CQ_MGRLINK_FIRST_MAX   (64u * 1024u)
#define CQ_MGRLINK_MAX         (1024u * 1024u)
#define CQ_MGRLINK_CONTENT_CAP 4096 /* bytes of a looked-up message's content sent (command 4) */
#define CQ_MGRLINK_RETRY_MS    1000 /* a managed topic flag not applied yet is tried this often */

/* Replication of this server's database (ext.repl); see doc/mgr.md. */
typedef struct cq_mgrlink_repl {
    bool replica, io_running, sql_running;
    int64_t lag_seconds;       /* -1: unknown */
    uint64_t lag_transactions; /* received, not applied */
    uint64_t behind_ms;        /* 0 caught up; else ms since it last had applied everything */
} cq_mgrlink_repl_t;

/* The relay side (ext.relay), from the core's counters. */
enum {
    CQ_MGRLINK_CHAN_GLOBAL,
    CQ_MGRLINK_CHAN_PRIVATE,
    CQ_MGRLINK_CHAN_SUBWORLD,
    CQ_MGRLINK_CHAN_SPATIAL,
    CQ_MGRLINK_CHAN_ENTITY,
    CQ_MGRLINK_CHAN_N
};
/* A relay node's link with one peer (the chanq_relay_link_* metrics). */
typedef struct cq_mgrlink_link {
    uint16_t peer;
    bool up; /* a member whose HELLO came */
    uint64_t packets_in, packets_out, bytes_out, gaps, resets, lost;
} cq_mgrlink_link_t;

enum { CQ_MGRLINK_TCP, CQ_MGRLINK_WS, CQ_MGRLINK_WSS, CQ_MGRLINK_KCP, CQ_MGRLINK_TRANSPORTS };

typedef struct cq_mgrlink_relay {
    uint64_t tcp, ws, wss, kcp; /* open connections by transport */
    uint64_t channels[CQ_MGRLINK_CHAN_N];
    uint64_t subscribers, fanouts_total, slow_consumer_closes_total;
    /* A relay node's identity (node 0: chanqd is one node alone, and the rest is unset). */
    uint16_t node, global_home; /* global_home 0: not known yet */
    uint32_t members;
    const char *cluster;                      /* borrowed */
    const char *addrs[CQ_MGRLINK_TRANSPORTS]; /* borrowed "H:P"; NULL or "": off */
    const cq_mgrlink_link_t *links;           /* borrowed, nlinks, by peer */
    size_t nlinks;
} cq_mgrlink_relay_t;

/* What the process knows and the durable engine does not: gathered by the composition root's
 * figures hook on the MQ loop (doc/mgr.md "Servers" has the units). */
typedef struct cq_mgrlink_host {
    uint32_t threads;      /* the process's threads (/proc/self/status) */
    uint32_t cpu;          /* % of one core over the last report period */
    uint32_t mem;          /* resident MiB */
    uint32_t sockets;      /* open connections of every port */
    uint64_t queued_bytes; /* bytes queued for sending on the MQ port (packages: per KiB) */
    bool has_repl;         /* a replica database is controlled (MariaDB in a cluster) */
    cq_mgrlink_repl_t repl;
    bool has_relay;
    cq_mgrlink_relay_t relay;
} cq_mgrlink_host_t;

typedef struct cq_mgrlink_opts {
    uint32_t group_id, appid;
    const char *token; /* the --mgr-token-file secret (copied); NULL or "" = none */
    const char *addr;  /* the advertised seed address (copied); NULL or "": the bound one */
    uint32_t report_ms;
    /* Puts the manager's bindings document (publish_config's "bindings", json[0..len) borrowed,
     * compact JSON) in force, on the engine's thread: 0, or < 0 with err saying why (the
     * command is then answered err 5 "content.bindings: <err>" and nothing of it changes).
     * Called only when the document differs from the last one applied: the same document
     * again (every other change the manager pushes carries it) leaves the bridge as it is.
     * NULL: the server takes no bindings (a relay node has no bridge): they are ignored, and
     * the rest of the command applies. */
    int (*apply_bindings)(void *ud, const char *json, size_t len, char *err, size_t errlen);
    void *bindings_ud;
    /* The store is no shard of the durable system (a relay node's own): the manager's topics
     * it has not got are not created on it. */
    bool no_shard;
} cq_mgrlink_opts_t;

typedef struct cq_mgrlink_stats {
    uint64_t syncs, sync_errors, commands, command_errors;
    uint64_t config_version; /* of the last publish_config applied (0: none) */
    uint64_t mgr_version;    /* the manager's config_version in its last sync answer */
} cq_mgrlink_stats_t;

/* Returns an owned link over s (borrowed, must outlive it), or NULL on OOM. */
cq_mgrlink_t *cq_mgrlink_new(cq_mqsrv_t *s, const cq_mgrlink_opts_t *o);
/* The MQ listener's bound address (borrowed), before the loop runs: it becomes the advertised
 * address unless opts.addr set one, and appid 0 becomes shard * 65536 + its port. */
void cq_mgrlink_bound(cq_mgrlink_t *l, const char *bound);
/* The appid reports carry. */
uint32_t cq_mgrlink_appid(const cq_mgrlink_t *l);
/* True once a manager's module table replaced this server's own (a publish_config with
 * modules); from then on SIGHUP leaves the permissions file alone. Any thread; NULL: false. */
bool cq_mgrlink_perms_managed(cq_mgrlink_t *l);
/* Accepts NULL; returns NULL. */
cq_mgrlink_t *cq_mgrlink_free(cq_mgrlink_t *l);

/* A connection to a manager is up: the next sync is due at once (it authenticates us and makes
 * the manager push the configuration). Input and output of a previous connection are dropped. */
void cq_mgrlink_connected(cq_mgrlink_t *l);
/* The connection is gone; no sync is due until the next one. */
void cq_mgrlink_disconnected(cq_mgrlink_t *l);
/* Feeds bytes from the manager (borrowed): commands are applied and answered. Returns 0, or a
 * negative code when the connection must close: CQ_EAUTH (the manager refused our sync),
 * CQ_EBADLEN/CQ_EHEADER (a broken stream), CQ_EJSON (an answer that is not JSON), or the
 * error frame's code. */
int cq_mgrlink_input(cq_mgrlink_t *l, const uint8_t *p, size_t n, uint64_t now_ms);
/* True while connected and a sync is due at now_ms (monotonic ms). */
bool cq_mgrlink_sync_due(const cq_mgrlink_t *l, uint64_t now_ms);
/* Queues a sync of h's figures (borrowed) and the engine's. 0 or -ENOMEM. */
int cq_mgrlink_sync(cq_mgrlink_t *l, const cq_mgrlink_host_t *h, uint64_t now_ms);
/* Housekeeping: managed topic flags a master has not applied yet are set (every
 * CQ_MGRLINK_RETRY_MS), and a managed topic that appeared since gets its retention. Call on the
 * MQ tick. */
void cq_mgrlink_tick(cq_mgrlink_t *l, uint64_t now_ms);
/* The bytes to send to the manager (borrowed): the edge writes them and consumes what it wrote
 * (cq_sbuf_consume). */
cq_sbuf_t *cq_mgrlink_output(cq_mgrlink_t *l);
void cq_mgrlink_stats(const cq_mgrlink_t *l, cq_mgrlink_stats_t *ret);

#endif
