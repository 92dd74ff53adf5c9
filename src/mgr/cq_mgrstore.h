/* cq_mgrstore.h - where the manager's state document lives (common.md contract 2, doc/mgr.md):
 * a local file (filestore.c, without --zk-hosts) or one ZooKeeper node <zk-root>/mgr/state
 * (zkstore.c, with --zk-hosts). The edge (src/io/mgr_io.c) runs load and
 * save on its store thread, blocking, and hands the results to the engine (cq_mgr_store_loaded,
 * cq_mgr_store_done).
 *
 * Versions: *ver / expect_ver / *new_ver are the STORE's versions (a ZooKeeper node version, the
 * file backend's write counter), not the document's "version" field. -1 = no document yet:
 * save(expect_ver -1) creates it (CQ_ECONFLICT when one exists).
 */
#ifndef CQ_MGRSTORE_H
#define CQ_MGRSTORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct cq_mgrstore_ops {
    /* all run on the store's own thread or synchronously; results come back through cb */
    /* 0 with *json owned (cq_free; NUL-terminated), *len, *ver; 0 with *json NULL and *ver -1
     * when there is no document yet; or < 0. */
    int (*load)(void *ud, char **json, size_t *len, int64_t *ver);
    /* Writes the whole document if the stored version is still expect_ver. 0 with *new_ver,
     * CQ_ECONFLICT on a miss, or another < 0. */
    int (*save)(void *ud, const char *json, size_t len, int64_t expect_ver, int64_t *new_ver);
    /* changed(arg) is called from any thread when the document may have changed under us (our
     * own saves included). NULL: the backend never changes by itself (the file). */
    void (*watch)(void *ud, void (*changed)(void *arg), void *arg);
    void (*free)(void *ud); /* accepts NULL */
} cq_mgrstore_ops_t;

/* The file backend: path borrowed (copied). One manager per file: the write counter lives in
 * memory (load of an existing file: version 0; of a missing file: -1, no document). Saves are
 * atomic (path.tmp written, fsync'd, renamed over path, directory fsync'd), mode 0600.
 * Returns 0 with *ret (the ud of cq_mgrstore_file_ops) or -ENOMEM / -EINVAL (empty path). */
int cq_mgrstore_file_new(const char *path, void **ret);
extern const cq_mgrstore_ops_t cq_mgrstore_file_ops;

/* The ZooKeeper backend (zkstore.c, over src/coord's one-node client cq_zknode.h; built only
 * with libzookeeper-mt: CQ_HAVE_ZOOKEEPER, mgr_zk_dep; doc/cluster.md "The manager's state in
 * ZooKeeper"). The whole state document in one node, <root>/mgr/state, on a session of its own.
 * These are the functions of cq_mgrstore_zk_ops, ud from cq_mgrstore_zk_new.
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
int cq_mgrstore_zk_new(const char *hosts, const char *root, uint32_t session_ms, void **ret);
int cq_mgrstore_zk_load(void *ud, char **json, size_t *len, int64_t *ver);
int cq_mgrstore_zk_save(void *ud, const char *json, size_t len, int64_t expect_ver,
                        int64_t *new_ver);
void cq_mgrstore_zk_watch(void *ud, void (*changed)(void *arg), void *arg);
void cq_mgrstore_zk_free(void *ud);
extern const cq_mgrstore_ops_t cq_mgrstore_zk_ops;

#endif
