/* io_int.h - internals shared by the files of the io module. */
#ifndef CQ_IO_INT_H
#define CQ_IO_INT_H

#include <stdatomic.h>
#include <sys/socket.h>
#include <uv.h>

#include "cq_core.h"
#include "cq_io.h"
#include "cq_list.h"
#include "cq_mpsc.h"
#include "cq_sbuf.h"
#include "io_adminconn.h"

typedef struct cq_io cq_io_t;
struct cq_tls_ctx;
struct io_ws;
struct io_kcp;

/* How an accepted stream socket speaks: raw TCP, WebSocket, or WebSocket over TLS. */
enum { IO_TCP = 0, IO_WS = 1, IO_WSS = 2, IO_KCP = 3 };

/* Slots of cq_io.bound: the actual address of each listener, "-" when disabled. */
enum {
    IO_B_CLIENT,
    IO_B_SERVER,
    IO_B_ADMIN,
    IO_B_WS,
    IO_B_WSS,
    IO_B_KCP,
    IO_B_SERVER_WS,
    IO_B_SERVER_KCP,
    IO_B__COUNT
};

#define IO_MAX_ACCEPTORS 6
#define IO_MAX_UDP       4
#define IO_POOL_BYTES    (4u << 20) /* freed send batches and KCP segments a worker keeps */

/* A listening socket on a loop (accept.c): accept4 from a uv_poll, each accepted socket handed
 * to cb. Out of file descriptors (EMFILE, ENFILE) it does what production servers do instead of
 * retrying accept4 at once (which spins the loop and floods the log): it closes its reserved fd,
 * accepts and closes at once what the backlog holds (libuv's trick: the peers get a close rather
 * than a hang), reopens the reserve, and stops polling for IO_LSN_PAUSE_MS (nginx's habit) while
 * the loop keeps serving its connections. The log line is rate limited (one per IO_LSN_LOG_MS
 * per listener, with the count suppressed since the last one). */
typedef struct io_lsn io_lsn_t;

/* Why a listener's owner closed a connection (chanq_listener_closes_total's reason label). */
enum { IO_CLOSE_CAP, IO_CLOSE_TIMEOUT, IO_CLOSE_PREAUTH, IO_CLOSE_IDLE, IO_CLOSE__COUNT };
typedef void (*io_lsn_cb)(io_lsn_t *l, int fd);

#define IO_LSN_PAUSE_MS 100
#define IO_LSN_LOG_MS   10000

struct io_lsn {
    uv_poll_t poll;
    uv_timer_t pause;
    int fd, reserve; /* reserve: an fd on /dev/null given up when out of fds; -1 when none */
    io_lsn_cb cb;
    void *data;            /* the owner's */
    const char *name;      /* metrics label and logs: "client", "mq", ... (static) */
    uint64_t log_ms;       /* uv_now of the last EMFILE line, 0 before */
    uint64_t suppressed;   /* EMFILE events since that line */
    _Atomic uint64_t shed; /* connections closed at once for lack of fds (any thread reads) */
    _Atomic uint64_t closes[IO_CLOSE__COUNT]; /* by the owner, per reason (IO_CLOSE_*) */
    unsigned reasons;                         /* bit per IO_CLOSE_* the metrics show */
    uint8_t active, paused;
};

/* Binds addr and starts accepting on loop. name is static. bound gets the actual address. */
int cq__io_lsn_start(io_lsn_t *l, uv_loop_t *loop, const char *addr, const char *name, io_lsn_cb cb,
                     void *data, char *bound, size_t blen, char *err, size_t errlen);
/* Stops accepting and closes the socket (from close callbacks: l must stay valid until the
 * loop ran them). Idempotent. */
void cq__io_lsn_close(io_lsn_t *l);
/* Closes fd, accepted over the owner's cap (text for the rate-limited log line), and counts it. */
void cq__io_lsn_refused(io_lsn_t *l, int fd, const char *cap);
/* True when h is one of l's handles (loop walks). */
bool cq__io_lsn_owns(const io_lsn_t *l, const uv_handle_t *h);
/* Counts a close by the owner for reason (IO_CLOSE_*). Any thread. */
void cq__io_lsn_count(io_lsn_t *l, int reason);
/* Appends two counter families (TYPE lines included) over the started listeners in v: accept
 * errors, {port,reason="emfile"}: connections accepted and closed at once because the process
 * was out of file descriptors; and closes by the owner, {port,reason} for each reason in a
 * listener's reasons. Any thread. Returns 0 or -ENOMEM. */
int cq__io_lsn_metrics_all(io_lsn_t *const *v, size_t n, const char *errors_family,
                           const char *closes_family, cq_sbuf_t *out);

typedef struct io_acceptor {
    io_lsn_t lsn;
    int type; /* CQ_CONN_CLIENT or CQ_CONN_SERVER */
    int kind; /* IO_TCP, IO_WS or IO_WSS */
    cq_framing_mode_t mode;
} io_acceptor_t;

/* A stream connection (TCP, WS or WSS) on a worker. ws is NULL for raw TCP. */
typedef struct io_conn {
    uv_tcp_t tcp;
    uv_write_t wreq;
    cq_conn_t *conn;
    struct io_worker *w;
    struct io_ws *ws;      /* WebSocket state (ws.c), NULL for TCP */
    size_t inflight;       /* bytes of the uv_write in flight */
    cq_list_t paused_node; /* in w->paused while reading is paused */
    uint8_t writing;
    uint8_t closing;
    uint8_t kind;        /* IO_TCP, IO_WS, IO_WSS */
    uint8_t ring_queued; /* a send of its batch is queued on the worker's ring (io_ring.c) */
} io_conn_t;

typedef struct io_worker {
    cq_io_t *io;
    int index;
    uv_loop_t loop;
    uv_async_t wake;
    uv_prepare_t prepare;
    uv_timer_t tick;
    uv_timer_t due; /* next channel-data fan-out of this worker */
    uv_thread_t thread;
    int cpu;              /* the CPU it is pinned to, or -1 */
    struct io_ring *ring; /* batched first writes (io_ring.c), NULL when not used */
    cq_core_t *core;
    uint8_t *rbuf;        /* shared by this worker's reads; input is consumed synchronously */
    struct cq_pool *pool; /* recycles its connections' send batches and KCP segments */
    cq_mpsc_t accepts;    /* accepted sockets handed over by worker 0 */
    cq_list_t paused;     /* io_conn_t whose reading is paused (inbound flow control) */
    uint8_t loop_ok, started;
    struct io_kcp *kcp[IO_MAX_UDP]; /* this worker's KCP sockets (kcp.c), NULL when off */
    /* worker 0 only */
    io_acceptor_t acceptors[IO_MAX_ACCEPTORS];
    io_lsn_t admin;       /* the admin HTTP listener (admin_http.c) */
    io_adminset_t admins; /* its open connections (io_adminconn.c) */
} io_worker_t;

struct cq_io {
    cq_shared_t *sh;
    cq_io_opts_t opts;
    _Atomic int stopping;
    char bound[IO_B__COUNT][80];    /* actual listener addresses (IO_B_*), "-" when off */
    struct cq_tls_ctx *tls;         /* certificate and key for WSS, NULL without wss_addr */
    struct cq_kcp_ipcount *kcp_ips; /* KCP peers per source IP, shared by all workers */
    int nworkers;
    io_worker_t workers[];
};

/* io.c */
void cq__io_adopt(io_worker_t *w, int fd, uint32_t id, int type, int kind, cq_framing_mode_t mode);
void cq__io_worker_shutdown(io_worker_t *w);
/* The stream failed (EOF, read or write error): tells the core, which closes the transport. */
void cq__io_conn_lost(io_conn_t *ic, int r, const char *why);
void cq__io_on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf);
/* The transport peer op of stream connections (TCP, WS, WSS): "1.2.3.4:5678". */
int cq__io_tcp_peer(void *tctx, char *buf, size_t len);
/* Stops reading and closes the socket; the core connection is released from the close
 * callback. Idempotent. */
void cq__io_conn_shut(io_conn_t *ic);

/* ws.c: the WebSocket (and WSS) side of a stream connection */
int cq__io_ws_start(io_conn_t *ic); /* after adopt: allocate the WS state */
void cq__io_ws_input(io_conn_t *ic, const uint8_t *p, size_t n);
void cq__io_ws_free(io_conn_t *ic);
extern const cq_transport_ops_t cq__io_ws_ops;
int cq__io_tls_init(cq_io_t *io, char *err, size_t errlen);
void cq__io_tls_done(cq_io_t *io);

/* kcp.c: per-worker UDP sockets running KCP */
int cq__io_kcp_start(io_worker_t *w, char *err, size_t errlen); /* every worker */
void cq__io_kcp_close(io_worker_t *w);

/* accept.c */
int cq__io_acceptors_start(io_worker_t *w, char *err, size_t errlen);
void cq__io_acceptors_close(io_worker_t *w);
void cq__io_drain_accepts(io_worker_t *w);
int cq__io_addr_str(const struct sockaddr *sa, char *buf, size_t len);
int cq__io_resolve(const char *addr, int socktype, struct sockaddr_storage *ss, socklen_t *sl,
                   char *err, size_t errlen);
int cq__io_listen(const char *addr, int *ret_fd, char *bound, size_t blen, char *err,
                  size_t errlen);

/* admin_http.c */
int cq__io_admin_start(io_worker_t *w, char *err, size_t errlen);
/* Closes the listener and every admin connection. */
void cq__io_admin_close(io_worker_t *w);
/* Closes the admin connections older than opts.admin_timeout_ms (worker 0's tick). */
void cq__io_admin_sweep(io_worker_t *w, uint64_t now_ms);

#endif
