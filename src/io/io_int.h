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

typedef struct cq_io cq_io_t;

typedef struct io_acceptor {
    uv_poll_t poll;
    int fd;
    int type; /* CQ_CONN_CLIENT or CQ_CONN_SERVER */
    cq_framing_mode_t mode;
    uint8_t active;
} io_acceptor_t;

typedef struct io_worker {
    cq_io_t *io;
    int index;
    uv_loop_t loop;
    uv_async_t wake;
    uv_prepare_t prepare;
    uv_timer_t tick;
    uv_timer_t due; /* next channel-data fan-out of this worker */
    uv_thread_t thread;
    cq_core_t *core;
    uint8_t *rbuf;     /* shared by this worker's reads; input is consumed synchronously */
    cq_mpsc_t accepts; /* accepted sockets handed over by worker 0 */
    cq_list_t paused;  /* io_conn_t whose reading is paused (inbound flow control) */
    uint8_t loop_ok, started;
    /* worker 0 only */
    io_acceptor_t acceptors[2];
    uv_tcp_t admin;
    uint8_t admin_active;
} io_worker_t;

struct cq_io {
    cq_shared_t *sh;
    cq_io_opts_t opts;
    _Atomic int stopping;
    char bound[3][80]; /* client, server, admin actual addresses */
    int nworkers;
    io_worker_t workers[];
};

/* io.c */
void cq__io_adopt(io_worker_t *w, int fd, uint32_t id, int type, cq_framing_mode_t mode);
void cq__io_worker_shutdown(io_worker_t *w);

/* accept.c */
int cq__io_acceptors_start(io_worker_t *w, char *err, size_t errlen);
void cq__io_acceptors_close(io_worker_t *w);
void cq__io_drain_accepts(io_worker_t *w);
int cq__io_addr_str(const struct sockaddr *sa, char *buf, size_t len);
int cq__io_listen(const char *addr, int *ret_fd, char *bound, size_t blen, char *err,
                  size_t errlen);

/* admin_http.c */
int cq__io_admin_start(io_worker_t *w, char *err, size_t errlen);
void cq__io_admin_close(io_worker_t *w);

#endif
