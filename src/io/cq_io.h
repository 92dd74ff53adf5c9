/* cq_io.h - the edge: the only module that includes <uv.h>.
 *
 * Starts one thread per worker, each with its own libuv loop, core, wake async, flush prepare
 * hook and housekeeping timer. Worker 0 also runs the acceptors (listening sockets polled with
 * uv_poll; accepted fds go to the worker that owns the new connection id) and the admin HTTP
 * listener (/metrics, /healthz). Threads and ownership: doc/threads.md.
 */
#ifndef CQ_IO_H
#define CQ_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cq_admin.h"
#include "cq_core.h"

typedef struct cq_io cq_io_t;

/* Every string is borrowed for the life of the cq_io_t; "" disables an optional listener. */
typedef struct cq_io_opts {
    const char *client_addr; /* "HOST:PORT"; ":PORT" binds every address */
    const char *server_addr;
    const char *client_network; /* "tcp", "ws" or "kcp": what client_addr listens with */
    const char *server_network;
    const char *admin_addr; /* "" disables */
    cq_admin_t *admin;      /* metrics sources for /metrics; borrowed, required with admin_addr */
    bool client_legacy_tag;
    bool server_legacy_tag;
    int tcp_keepalive_s;
    const char *ready_file; /* "" = none */
    bool defer_ready;       /* the caller writes the ready file with cq_io_write_ready() */
    /* more transports beside client_addr/server_addr */
    const char *ws_addr, *wss_addr, *kcp_addr; /* client listeners */
    const char *server_ws_addr, *server_kcp_addr;
    const char *ws_path;            /* upgrade path, "/" by default */
    const char *ws_origins;         /* comma-separated allow-list; "" = any */
    size_t ws_max_message;          /* largest inbound WebSocket message */
    const char *tls_cert, *tls_key; /* PEM files for wss_addr */
    const char *web_root;           /* static files for plain GETs on WS listeners; "" none */
    bool kcp_fast;                  /* fast KCP profile, else kcp-go's defaults */
    int kcp_idle_timeout_ms;
    int kcp_max_per_addr;
    int pin_workers;           /* CQ_IO_PIN_* */
    int io_uring;              /* CQ_IO_URING_* */
    size_t max_packet_size;    /* largest packet body (for KCP/WS buffers) */
    uint32_t admin_max_conns;  /* admin connections at once; more are closed on accept */
    uint32_t admin_timeout_ms; /* an admin connection's whole life; 0 = unbounded */
} cq_io_opts_t;

enum { CQ_IO_PIN_AUTO = 0, CQ_IO_PIN_ON = 1, CQ_IO_PIN_OFF = 2 };
enum { CQ_IO_URING_AUTO = 0, CQ_IO_URING_ON = 1, CQ_IO_URING_OFF = 2 };

/* Binds the listeners, starts the workers and returns once they run. opts is copied; sh is
 * borrowed and must outlive cq_io_free(). io installs its core ops (wake) in sh with
 * cq_shared_set_ops() before any worker runs. Errors are described in err. */
int cq_io_start(cq_shared_t *sh, const cq_io_opts_t *opts, cq_io_t **ret, char *err, size_t errlen);
/* Writes the ready file (opts.ready_file; nothing if ""): "client=H:P server=H:P admin=H:P
 * mq=H:P mqhttp=H:P ws=H:P wss=H:P kcp=H:P\n", where mq is mq_bound and mqhttp is
 * mqhttp_bound (borrowed; NULL or "" gives "-"; so does any disabled listener). Written to a
 * temp file and
 * renamed, so a reader never sees half a line. Returns 0 or -errno. Main thread. */
int cq_io_write_ready(cq_io_t *io, const char *mq_bound, const char *mqhttp_bound);
/* The bound address ("H:P") of the client listener of transport t (CQ_CONN_TCP: --client-addr,
 * CQ_CONN_WS, CQ_CONN_WSS, CQ_CONN_KCP), or "" when it is off: what a relay node advertises to
 * its managers. Borrowed, fixed once cq_io_start() returned, valid until cq_io_free(). */
const char *cq_io_client_bound(const cq_io_t *io, int t);
/* Blocks until SIGINT/SIGTERM, then stops the workers. Returns 0. Main thread only. On SIGHUP
 * it calls on_hup(ud) (may be NULL) on the main thread and keeps running; SIGHUPs that arrive
 * before a reload starts are merged into that one reload, and one that arrives during a reload
 * causes another after it: a request is never lost. */
int cq_io_run_until_signal(cq_io_t *io, void (*on_hup)(void *ud), void *ud);
/* A metrics source for the admin registry (ud is the cq_io_t): the listeners' counters,
 * chanq_accept_errors_total{port,reason="emfile"} (connections accepted and closed at once
 * because the process was out of file descriptors) and chanq_listener_closes_total{port,reason}
 * (the channel listeners' "cap", the admin listener's "cap" and "timeout"). Any thread. */
int cq_io_metrics_append(void *ud, cq_sbuf_t *out);
/* Stops and joins every worker (idempotent) and frees everything. Accepts NULL. */
cq_io_t *cq_io_free(cq_io_t *io);

#endif
