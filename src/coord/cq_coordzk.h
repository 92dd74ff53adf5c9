/* cq_coordzk.h - ZooKeeper over libzookeeper-mt (zk.c): the coord runtime's ZK ops. (zk.c also
 * implements the one-node client of cq_zknode.h.)
 *
 * Built only when the library was found (meson defines CQ_HAVE_ZOOKEEPER=1 for the users of
 * src/coord). The ops' ud is unused (NULL). Sessions ask for conf.session_ms; the ensemble
 * bounds it (minSessionTimeout/maxSessionTimeout) and EV_SESSION carries the negotiated one.
 */
#ifndef CQ_COORDZK_H
#define CQ_COORDZK_H

#include "cq_coordrt.h"

extern const cq_coord_zk_ops_t cq_coord_zk_libzk;

#endif
