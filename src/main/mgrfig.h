/* mgrfig.h - the host's figures in a server's report to its managers (cq_mgrlink_host_t,
 * doc/mgr.md "Servers"): threads, CPU, memory and connections of the process, the relay's
 * gauges and counters from the core, the replication state from the cluster's monitor.
 */
#ifndef CQ_MAIN_MGRFIG_H
#define CQ_MAIN_MGRFIG_H

#include "cluster.h"
#include "cq_core.h"
#include "cq_mgrlink.h"

typedef struct cq_main_figures {
    cq_shared_t *sh;            /* borrowed: the core's counters (any thread) */
    cq_main_cluster_t *cluster; /* borrowed, or NULL: replication */
    uint64_t cpu_us, wall_us;   /* the previous sample (MQ loop thread only) */
} cq_main_figures_t;

/* The mgr_figures hook of cq_mqio_opts_t (ud: cq_main_figures_t). MQ loop thread. */
void cq_main_figures(void *ud, cq_mgrlink_host_t *h);

#endif
