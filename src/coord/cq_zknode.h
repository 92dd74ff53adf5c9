/* cq_zknode.h - one ZooKeeper node, <root>/<name>, on a session of its own (zk.c, over
 * libzookeeper-mt).
 *
 * Why: a user that keeps one document in one node with compare-and-set (the manager's state
 * store, src/mgr/zkstore.c) needs get, create, a versioned set and a watch, but must not see
 * libzookeeper (zk.c is its only user) nor the coord runtime. Versions are the node's own
 * (ZooKeeper's data version: 0 after the create, +1 per set).
 *
 * Built only when the library was found (users see CQ_HAVE_ZOOKEEPER=1). Calls may come from
 * any thread; the blocking ones (mkparents, get, create, set) wait for their answer at most
 * session_ms + 5 s (CQ_ETIMEOUT), and one caller at a time is expected (they share one wait).
 * Errors: -ENOTCONN (no session: connection lost, expired or closing), CQ_ETIMEOUT, -ENOMEM,
 * -EIO (anything else the ensemble answered).
 */
#ifndef CQ_ZKNODE_H
#define CQ_ZKNODE_H

#include <stddef.h>
#include <stdint.h>

typedef struct cq_zknode cq_zknode_t;

typedef enum cq_zknode_event {
    CQ_ZKNODE_CHANGED, /* the watch fired: the node was created, written or deleted */
    CQ_ZKNODE_EXPIRED, /* the session expired (or its authentication failed): it never comes
                          back, open a new one */
} cq_zknode_event_t;

/* Called from the library's thread, never after cq_zknode_close returned. It may call
 * cq_zknode_watch, not the blocking calls (their answers arrive on that same thread). */
typedef void (*cq_zknode_cb_t)(void *arg, cq_zknode_event_t ev);

/* Starts connecting (does not wait). hosts and name borrowed (copied); root "/x" (a '/' first,
 * none last, under 256 bytes), name relative ("mgr/state"). *ret owned: cq_zknode_close.
 * -EINVAL (a bad root or name), -ENOMEM or the library's refusal (-errno). */
int cq_zknode_open(const char *hosts, const char *root, const char *name, uint32_t session_ms,
                   cq_zknode_cb_t cb, void *arg, cq_zknode_t **ret);

/* Blocks. Creates the node's missing parents (persistent, empty): 0 or < 0. */
int cq_zknode_mkparents(cq_zknode_t *n);

/* Blocks. 0 with *ret_data owned (cq_free; NUL-terminated, "" for an empty node), *ret_len and
 * *ret_ver; -ENOENT when the node does not exist; or < 0. Nothing is written on failure. */
int cq_zknode_get(cq_zknode_t *n, char **ret_data, size_t *ret_len, int64_t *ret_ver);

/* Blocks. Creates the node (persistent) with data: 0 with *ret_ver 0; CQ_ECONFLICT when it
 * exists; -ENOENT when a parent is missing; or < 0. */
int cq_zknode_create(cq_zknode_t *n, const char *data, size_t len, int64_t *ret_ver);

/* Blocks. Writes the node if its version is still expect_ver (>= 0): 0 with *ret_ver, the
 * version after the write; CQ_ECONFLICT when it has another version (or expect_ver is beyond
 * any version); -ENOENT when the node does not exist; or < 0. */
int cq_zknode_set(cq_zknode_t *n, const char *data, size_t len, int64_t expect_ver,
                  int64_t *ret_ver);

/* Does not block. Arms one watch on the node, existing or not: cb(CQ_ZKNODE_CHANGED) once at
 * its next creation, write or deletion (re-arm from cb for more). 0, or < 0 when the request
 * could not be sent (no callback then). */
int cq_zknode_watch(cq_zknode_t *n);

/* Closes the session: no callback runs after it returns. Not while a blocking call on n runs
 * (their wait is in n). Accepts NULL. */
void cq_zknode_close(cq_zknode_t *n);

#endif
