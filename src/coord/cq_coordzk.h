/* cq_coordzk.h - ZooKeeper over libzookeeper-mt (zk.c): the coord runtime's ZK ops and the
 * manager's state store.
 *
 * Built only when the library was found (meson defines CQ_HAVE_ZOOKEEPER=1 for the users of
 * src/coord). The ops' ud is unused (NULL). Sessions ask for conf.session_ms; the ensemble
 * bounds it (minSessionTimeout/maxSessionTimeout) and EV_SESSION carries the negotiated one.
 */
#ifndef CQ_COORDZK_H
#define CQ_COORDZK_H

#include "cq_coordrt.h"
#include "cq_mgrstore.h"

#include <stddef.h>
#include <stdint.h>

extern const cq_coord_zk_ops_t cq_coord_zk_libzk;

/* ---- the manager's state store (doc/cluster.md "The manager's state in ZooKeeper") ----------
 * The whole state document in one node, <root>/mgr/state, on a session of its own. These are
 * the functions of the manager's store table (cq_mgrstore.h: load, save, watch, free, in that
 * order, ud = the store); cq_coord_zkstore_ops is that table, ud from cq_coord_zkstore_new.
 *
 * new: starts connecting (does not wait); *ret owned (free). -EINVAL (no hosts; a root that is
 * not "/x"), -ENOMEM or the library's refusal.
 * load: blocks (the store thread). Creates <root>/mgr when missing. 0 with *json owned
 * (cq_free; NUL-terminated), *len and *ver = the node's version; 0 with *json NULL and *ver -1
 * when there is no document yet; or < 0 (-ENOTCONN, CQ_ETIMEOUT after session_ms + 5 s).
 * save: blocks. expect_ver -1 creates the node (CQ_ECONFLICT when it exists); else writes it if
 * its version is still expect_ver (CQ_ECONFLICT on a miss or when it was deleted). *new_ver:
 * the node's version after the write.
 * watch: calls changed(arg) from the library's thread whenever the node is created, changed or
 * deleted (our own saves included: compare versions), and once when the session expired (the
 * next load opens a new session). Re-armed by itself; a second call replaces changed.
 * free: closes the session; no callback runs after it returns. Accepts NULL.
 */
int cq_coord_zkstore_new(const char *hosts, const char *root, uint32_t session_ms, void **ret);
int cq_coord_zkstore_load(void *ud, char **json, size_t *len, int64_t *ver);
int cq_coord_zkstore_save(void *ud, const char *json, size_t len, int64_t expect_ver,
                          int64_t *new_ver);
void cq_coord_zkstore_watch(void *ud, void (*changed)(void *arg), void *arg);
void cq_coord_zkstore_free(void *ud);
extern const cq_mgrstore_ops_t cq_coord_zkstore_ops;

#endif
