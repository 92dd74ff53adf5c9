/* cq_mgr.h - the management service's engine (issue 13, doc/mgr.md): the seed's management
 * protocol (svrconfig for SDKs, sync_serverinfo and commands for servers, doc/protocol-mq.md
 * "Management port"), the managed configuration (modules, permissions, topics, offline flags,
 * groups) and the admin console's JSON API. Sans-I/O: bytes and now in, bytes and actions out.
 * src/io/mgr_io.c is its edge (one loop thread); the configuration store (a file or ZooKeeper,
 * cq_mgrstore.h) runs on its own thread and hands results back through cq_mgr_store_done().
 *
 * Threads: every function runs on the engine's thread (the edge's loop) unless it says "any
 * thread".
 */
#ifndef CQ_MGR_H
#define CQ_MGR_H

#include "cq_sbuf.h"
#include "cq_sendq.h"
#include "cq_transport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cq_mgr cq_mgr_t;
typedef struct cq_mgr_conn cq_mgr_conn_t;   /* a management-protocol connection */
typedef struct cq_mgr_hconn cq_mgr_hconn_t; /* a console/API HTTP connection */

typedef struct cq_mgr_opts {
    const char *admin_token;  /* the console's admin token (borrowed, copied); required */
    const char *server_token; /* what servers present in sync; "" refuses them unless dev */
    const char *http_hosts;   /* Host names the console answers ("*" any) */
    const char *audit_path;   /* informative: the edge writes the lines (ops.audit) */
    bool dev;                 /* --dev: servers need no token */
    uint32_t stale_ms;        /* a server's reports older than this: stale */
    uint32_t lag_alert_ms;    /* replication lag alert threshold */
    uint32_t chart_ms;        /* the charts' sample period (0: 10000); they keep an hour */
    size_t preauth_max_frame; /* frame limit before the first authenticated request */
    size_t max_frame;         /* frame limit after it */
} cq_mgr_opts_t;

/* The edge's side of the engine. */
typedef struct cq_mgr_ops {
    /* Saves the whole state document (json borrowed for the call) with compare-and-set on
     * expect_ver, off the engine's thread; the edge later calls cq_mgr_store_done(). At most one
     * save is in flight (the engine waits for its result before the next). */
    void (*save)(void *ud, const char *json, size_t len, int64_t expect_ver);
    /* Asks for the stored document again (after a conflict, or a watch); answered by
     * cq_mgr_store_loaded(). */
    void (*reload)(void *ud);
    /* Appends one audit line (JSON, no newline; borrowed) to the audit log. */
    void (*audit)(void *ud, const char *line, size_t len);
} cq_mgr_ops_t;

/* The edge's side of one connection (either port): flush/close/peer as every chanq transport
 * (cq_transport.h); answers are queued on the connection's send queue. */
typedef struct cq_mgr_conn_ops {
    cq_transport_ops_t t;
} cq_mgr_conn_ops_t;

/* Returns an owned engine (cq_mgr_free) or NULL with a reason in err. ops borrowed (static). */
cq_mgr_t *cq_mgr_new(const cq_mgr_opts_t *opts, const cq_mgr_ops_t *ops, void *ud, char *err,
                     size_t errlen);
/* Accepts NULL; returns NULL. Connections must have been closed. */
cq_mgr_t *cq_mgr_free(cq_mgr_t *m);

/* The store's answers (engine thread; the edge hops them over with its async handle).
 * loaded: json borrowed, ver its version (-1 = no document yet: the engine starts empty and
 * saves version 1). Returns 0, or CQ_EJSON/CQ_EFIELD when the stored document is bad (err
 * names the field; the engine keeps its current state). */
int cq_mgr_store_loaded(cq_mgr_t *m, const char *json, size_t len, int64_t ver, char *err,
                        size_t errlen);
/* done: err 0 and new_ver after a save; CQ_ECONFLICT when another manager wrote first (the
 * engine reloads, re-applies its pending change and saves again); another code: kept in memory,
 * saved again at the next tick. */
void cq_mgr_store_done(cq_mgr_t *m, int err, int64_t new_ver);
/* True when every change is saved and no save is in flight (the edge's shutdown waits for it,
 * within its grace period). */
bool cq_mgr_store_idle(const cq_mgr_t *m);
/* SIGHUP: replaces the admin token and the servers' token (borrowed, copied). Connections and
 * console sessions already authenticated stay. 0 or -ENOMEM (the old tokens are kept). */
int cq_mgr_set_tokens(cq_mgr_t *m, const char *admin_token, const char *server_token);

/* Management-protocol connections. peer_ip borrowed (copied). */
cq_mgr_conn_t *cq_mgr_conn_new(cq_mgr_t *m, const cq_mgr_conn_ops_t *ops, void *tctx,
                               const char *peer_ip);
/* Feeds bytes (borrowed). Returns 0, or < 0 when the connection must close (t.close was
 * called; what is queued is still written). */
int cq_mgr_conn_input(cq_mgr_conn_t *c, const uint8_t *p, size_t n, uint64_t now_ms);
/* The socket is gone: ops never called again; frees c. Accepts NULL. */
void cq_mgr_conn_close(cq_mgr_conn_t *c);
cq_sendq_t *cq_mgr_conn_sendq(cq_mgr_conn_t *c);
/* For the edge's timeouts: whether the connection sent an authenticated request yet. */
bool cq_mgr_conn_authed(const cq_mgr_conn_t *c);
/* Whole frames the connection sent so far (the edge's idle timeout: bytes alone, a frame dribbled
 * one byte at a time, are no progress). */
uint64_t cq_mgr_conn_frames(const cq_mgr_conn_t *c);

/* Console/API connections (implemented in api.c). */
cq_mgr_hconn_t *cq_mgr_hconn_new(cq_mgr_t *m, const cq_mgr_conn_ops_t *ops, void *tctx,
                                 const char *peer_ip);
int cq_mgr_hconn_input(cq_mgr_hconn_t *h, const uint8_t *p, size_t n, uint64_t now_ms);
void cq_mgr_hconn_close(cq_mgr_hconn_t *h);
cq_sendq_t *cq_mgr_hconn_sendq(cq_mgr_hconn_t *h);

/* Calls t.flush of every connection that queued output since the last call (uv_prepare). */
void cq_mgr_flush(cq_mgr_t *m);
/* Housekeeping: stale marks, alerts, a failed save retried, sessions expired. now_ms is the
 * wall clock in ms (reports carry rates; audit lines carry times). */
void cq_mgr_tick(cq_mgr_t *m, uint64_t now_ms);

/* Prometheus text of the chanq_mgr_* metrics, appended to out. Engine thread (the edge keeps a
 * snapshot for the admin listener). 0 or -ENOMEM. */
int cq_mgr_metrics(const cq_mgr_t *m, uint64_t now_ms, cq_sbuf_t *out);

#endif
