/* io_adminconn.h - the connections of an admin HTTP listener (/metrics, /healthz): one request,
 * one answer (cq_admin_respond), then close. Shared by the worker-0 admin listener
 * (admin_http.c) and the engine-loop host's (io_engine.c: the manager's). Loop thread of the set.
 *
 * Limits, because the listener serves before any authentication: at most max connections (more
 * are accepted and closed at once, so the kernel backlog never fills), and a connection lives
 * at most timeout_ms from accept to close, whatever it sends (a slowloris peer dribbling its
 * head, or one that never reads the answer). */
#ifndef CQ_IO_ADMINCONN_H
#define CQ_IO_ADMINCONN_H

#include "cq_admin.h"
#include "cq_list.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct io_lsn io_lsn_t; /* io_int.h, which includes this header */

/* The owner's (embedded in it; all fields set by cq__io_adminset_init). */
typedef struct io_adminset {
    uv_loop_t *loop;
    cq_admin_t *admin;        /* the registry answered from (borrowed) */
    io_lsn_t *lsn;            /* the listener: refusals and timeouts are counted there (borrowed) */
    cq_list_t conns;          /* open connections, oldest first */
    uint32_t n, max;          /* open connections; the cap */
    uint64_t timeout_ms;      /* 0 = none */
    void (*closed)(void *ud); /* after a connection's close callback; NULL: none */
    void *ud;
} io_adminset_t;

void cq__io_adminset_init(io_adminset_t *s, uv_loop_t *loop, cq_admin_t *admin, io_lsn_t *lsn,
                          uint32_t max, uint64_t timeout_ms, void (*closed)(void *ud), void *ud);
/* Takes an accepted fd (the listener's callback). Returns true when a connection handle was made
 * (its closed callback will run once), false when fd was refused or closed at once. */
bool cq__io_adminset_accept(io_adminset_t *s, int fd);
/* Closes the connections older than timeout_ms at now_ms (the owner's tick). */
void cq__io_adminset_sweep(io_adminset_t *s, uint64_t now_ms);
/* Closes every connection (idempotent). */
void cq__io_adminset_close_all(io_adminset_t *s);

#endif
