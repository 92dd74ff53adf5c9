/* relaynode.h - chanqd as one node of a relay (issue 23, doc/relay-cluster.md): the NATS
 * network, the relay thread over it, and their metrics.
 *
 * Lifecycle, in chanqd.c: cq_main_relay_start() once the admin registry exists, when
 * --relay-nats is set; cq_main_relay_stop() before the workers stop. Without --relay-nats none
 * of it runs and chanqd is one node alone, needing no NATS server.
 */
#ifndef CQ_MAIN_RELAYNODE_H
#define CQ_MAIN_RELAYNODE_H

#include "cq_admin.h"
#include "cq_config.h"
#include "cq_core.h"
#include "cq_mgrlink.h"

#include <stddef.h>

typedef struct cq_main_relay cq_main_relay_t;

/* Links a report carries at most: every peer a node can have (CQ_RELAY_MAX_PEERS), which is
 * what the codec takes (CQ_MQMGR_LINKS_MAX). */
#define CQ_MAIN_RELAY_LINKS 255

/* Record kinds on the links (one byte each, cq_link.h). */
enum {
    CQ_RELAY_REC_HELLO = 1, /* "v1 node=N epoch=E": the sender is up; the peer's link is live */
};

/* Connects to NATS (a server that is not up yet is retried in the background), starts the
 * relay thread, subscribes to this node's subject and registers the metrics source "relay".
 * c is borrowed and must outlive the node. Returns 0 with *ret owned, or a negative code with
 * err filled. */
int cq_main_relay_start(const cq_config_t *c, cq_shared_t *sh, cq_admin_t *admin,
                        cq_main_relay_t **ret, char *err, size_t errlen);
/* Once the workers run: takes what other nodes send, and joins the relay in ZooKeeper (the
 * other nodes learn of this one and greet it). Returns 0 or a negative code with err filled. */
int cq_main_relay_join(cq_main_relay_t *k, char *err, size_t errlen);
/* Says HELLO to node (a member that appeared). Any thread. */
void cq_main_relay_hello(cq_main_relay_t *k, uint16_t node);
/* What this node tells its managers (doc/mgr.md, ext.relay): r's node, cluster (borrowed from
 * the config), GLOBAL's home and members, and its links by peer into links[0..cap) (r->links):
 * the figures /metrics shows, read the way /metrics reads them (the relay's stats lock, once).
 * Any thread. 0, or -ENOMEM (r's identity is set, no links). */
int cq_main_relay_report(cq_main_relay_t *k, cq_mgrlink_relay_t *r, cq_mgrlink_link_t *links,
                         size_t cap);
/* Stops the network, then the relay thread; frees. Accepts NULL. */
void cq_main_relay_stop(cq_main_relay_t *k, cq_admin_t *admin);

#endif
