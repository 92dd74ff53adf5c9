/* cluster.h - chanqd's cluster composition (doc/cluster.md): the coord runtime over ZooKeeper,
 * the control of our own MariaDB, the engine's fence and role, and their metrics.
 *
 * Lifecycle, in chanqd.c: cq_main_cluster_new() before the engine (the engine's options take
 * the fence from it), cq_main_cluster_start() once the engine exists (the role callbacks go to
 * it), cq_main_cluster_stop() before the engine is freed (it zeroes the fence first).
 */
#ifndef CQ_MAIN_CLUSTER_H
#define CQ_MAIN_CLUSTER_H

#include "cq_admin.h"
#include "cq_config.h"
#include "cq_mgrlink.h"
#include "cq_mqport.h"

#include <stdbool.h>

typedef struct cq_main_cluster cq_main_cluster_t;

/* Returns an owned cluster part (c borrowed, must outlive it) or NULL on OOM. Nothing runs yet.
 * Call only when c->zk_hosts is set. */
cq_main_cluster_t *cq_main_cluster_new(const cq_config_t *c);
/* The engine's cluster options: fills may_write, fence_ud, shard and slave of o (the fence) and
 * on_topic, topic_ud (what the engine creates or sets online goes to the topic registry). */
void cq_main_cluster_fence(cq_main_cluster_t *k, cq_mqsrv_opts_t *o);
/* Starts the runtime (ZooKeeper session, database control, metrics) for engine s (borrowed,
 * must outlive the runtime); bound is the MQ listener's address, published unless
 * --cluster-advertise is set. Returns 0 or a negative code with err filled. */
int cq_main_cluster_start(cq_main_cluster_t *k, cq_mqsrv_t *s, cq_admin_t *admin, const char *bound,
                          char *err, size_t errlen);
/* The replication figures of the manager's report (cq_mgrlink_repl_t) from the monitor's last
 * sample: false when no database is controlled (no MariaDB backend) or none was read yet.
 * behind_ms: 0 while nothing received waits to be applied, else ms since that last held. Any
 * thread (the MQ loop calls it when a report is due). */
bool cq_main_cluster_repl(cq_main_cluster_t *k, cq_mgrlink_repl_t *ret);
/* Stops everything and frees k. Accepts NULL. */
void cq_main_cluster_stop(cq_main_cluster_t *k, cq_admin_t *admin);

#endif
