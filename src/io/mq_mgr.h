/* mq_mgr.h - the MQ loop's connection to a manager (internal to src/io, used by mq_io.c): one
 * outgoing TCP connection to the first reachable manager of --mgr-servers, the next one after a
 * failure, with a back-off of 0.5 s doubling to 5 s; bytes in and out of the sans-I/O link
 * (cq_mgrlink.h), which reports and applies commands. MQ loop thread only.
 */
#ifndef CQ_IO_MQ_MGR_H
#define CQ_IO_MQ_MGR_H

#include "cq_mgrlink.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define CQ_MQ_MGR_BACKOFF_MIN_MS 500
#define CQ_MQ_MGR_BACKOFF_MAX_MS 5000

typedef struct mq_mgr mq_mgr_t;

/* The host's figures, gathered on the MQ loop when a report is due (cq_mqio_opts_t). */
typedef void (*mq_mgr_figures_fn)(void *ud, cq_mgrlink_host_t *h);

/* Resolves every "HOST:PORT" of servers (comma-separated) and starts connecting on loop. link is
 * borrowed. Returns 0 with *ret owned (cq__mq_mgr_free after the loop closed its handles), or a
 * negative code with err filled. */
int cq__mq_mgr_start(uv_loop_t *loop, const char *servers, cq_mgrlink_t *link,
                     mq_mgr_figures_fn figures, void *ud, mq_mgr_t **ret, char *err, size_t errlen);
/* Every MQ tick: reports when due. sockets and queued: the MQ port's own connections and the
 * bytes they have queued, added to the host's figures. */
void cq__mq_mgr_tick(mq_mgr_t *m, uint64_t now_ms, uint32_t sockets, uint64_t queued);
/* True when h is one of m's handles (NULL m: false). */
bool cq__mq_mgr_owns(const mq_mgr_t *m, const uv_handle_t *h);
/* Closes the connection and the timer (idempotent); the loop runs their close callbacks. */
void cq__mq_mgr_close(mq_mgr_t *m);
/* 1 while connected to a manager. */
bool cq__mq_mgr_connected(const mq_mgr_t *m);
/* Frees m once its handles are closed. Accepts NULL. */
void cq__mq_mgr_free(mq_mgr_t *m);

#endif
