/* mgrfig.h - the host's figures in a server's report to its managers (cq_mgrlink_host_t,
 * doc/mgr.md "Servers"): threads, CPU, memory and connections of the process, the relay's
 * gauges and counters from the core, the replication state from the cluster's monitor.
 */
#ifndef CQ_MAIN_MGRFIG_H
#define CQ_MAIN_MGRFIG_H

#include "cluster.h"
#include "cq_core.h"
#include "cq_io.h"
#include "cq_mgrlink.h"
#include "relaynode.h"

#define CQ_MAIN_ADDR_MAX 300

typedef struct cq_main_figures {
    cq_shared_t *sh;            /* borrowed: the core's counters (any thread) */
    cq_main_cluster_t *cluster; /* borrowed, or NULL: replication */
    cq_main_relay_t *relay;     /* borrowed, or NULL: not a relay node */
    uint64_t cpu_us, wall_us;   /* the previous sample (MQ loop thread only) */
    /* a relay node's client addresses as reported ("" off or not advertisable), set once by
     * cq_main_figures_addrs; its links, refilled per report (MQ loop thread) */
    char addrs[CQ_MGRLINK_TRANSPORTS][CQ_MAIN_ADDR_MAX];
    cq_mgrlink_link_t links[CQ_MAIN_RELAY_LINKS];
} cq_main_figures_t;

/* The mgr_figures hook of cq_mqio_opts_t (ud: cq_main_figures_t). MQ loop thread. */
void cq_main_figures(void *ud, cq_mgrlink_host_t *h);
/* A relay node's client addresses from io's bound listeners, with their host replaced by
 * advertise_host unless it is ""; a wildcard host (0.0.0.0, [::]) left as bound is not
 * advertisable and is reported as off (logged once here). Main thread, before the MQ loop. */
void cq_main_figures_addrs(cq_main_figures_t *f, const cq_io_t *io, const char *advertise_host);

#endif
