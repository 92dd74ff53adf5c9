/* cq_mqport.h - the durable-topic engine's store port: where the engine's store requests go.
 *
 * The engine (cq_mqsrv_t) never names the store thread: it talks to a port, an ops table plus
 * its ud, with two entries:
 *   submit   hands one request (cq_writer_req_t) to the store; the request comes back later,
 *            filled in, through the engine's completion path;
 *   control  everything that is not a request, by op code: today the store thread's counters
 *            for /metrics.
 * cq_mqport_writer() is the port over one store thread (src/store/cq_writer). Ports that come
 * later plug in here without touching the engine: a shard router (submit picks the writer of a
 * topic's shard; control aggregates the shards' counters) and failover fencing (submit refuses
 * once this node's epoch is stale, and control carries the epoch changes). Tests plug in fakes.
 *
 * Threads: the engine calls both entries on its own thread (the MQ loop). A port must not call
 * back into the engine from submit or control: completions come back through the engine's
 * completion path only.
 */
#ifndef CQ_MQPORT_H
#define CQ_MQPORT_H

#include "cq_writer.h"

/* control op codes. A port answers -ENOTSUP for an op it does not know. */
typedef enum cq_mqport_ctl {
    CQ_MQPORT_WRITER_STATS = 1, /* arg: cq_writer_stats_t *, filled in */
} cq_mqport_ctl_t;

typedef struct cq_mqport_ops {
    /* Hands req to the store. Returns 0 (req taken until it completes) or a negative code (not
     * taken): CQ_EBUSY (pending work over the limit: retry later), CQ_ELIMIT (a produce of more
     * messages than the pending limit: it never fits), CQ_ECLOSED (shut down), -EINVAL. */
    int (*submit)(void *ud, cq_writer_req_t *req);
    /* Runs op (cq_mqport_ctl_t) with arg (borrowed; its type is the op's). Returns 0, -ENOTSUP
     * or the op's error. NULL: every op is -ENOTSUP. */
    int (*control)(void *ud, int op, void *arg);
} cq_mqport_ops_t;

typedef struct cq_mqport {
    const cq_mqport_ops_t *ops; /* borrowed (static) */
    void *ud;                   /* the port's; borrowed, must outlive the engine */
} cq_mqport_t;

/* The port over the store thread w (borrowed, must outlive every engine that uses the port):
 * submit is cq_writer_submit(), CQ_MQPORT_WRITER_STATS is cq_writer_stats(). Any thread. */
cq_mqport_t cq_mqport_writer(cq_writer_t *w);

#endif
