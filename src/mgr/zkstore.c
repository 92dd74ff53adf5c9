/* zkstore.c - the manager's state document in one ZooKeeper node, <root>/mgr/state
 * (cq_mgrstore.h; doc/cluster.md "The manager's state in ZooKeeper").
 *
 * Over src/coord's one-node client (cq_zknode.h), so libzookeeper stays in src/coord/zk.c. What
 * is the manager's lives here: which node, a session of its own (a manager runs no coord
 * runtime) opened again after it expired, the parents created before a load or a first save,
 * a versioned write that finds no node counted as a conflict, and the watch re-armed from its
 * own callback. Blocking: load and save run on the edge's store thread; op_mu serializes the
 * calls, since they share the session.
 */
#include "cq_mgrstore.h"
#include "cq_zknode.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define ZS_HOSTS_MAX 512 /* the connect string, with its NUL */
#define ZS_ROOT_MAX  496 /* the root, with its NUL: room for "/mgr/state" */
#define ZS_NODE      "mgr/state"

typedef struct zk_store {
    cq_zknode_t *node;     /* the current session; replaced after an expiry (op_mu) */
    pthread_mutex_t op_mu; /* serializes load/save/watch/reopen */
    pthread_mutex_t mu;    /* node (read by the callback), expired, changed */
    bool expired;          /* the session died: reopen before the next request */
    void (*changed)(void *arg);
    void *changed_arg;
    char hosts[ZS_HOSTS_MAX];
    char root[ZS_ROOT_MAX];
    uint32_t session_ms;
} zk_store_t;

/* The node's callback (the library's thread). A change re-arms the watch on the current session
 * before the manager hears of it, so a change right after is not missed; an expiry marks the
 * session for reopening and tells the manager, whose reload opens it and re-arms the watch. Our
 * own saves fire it too: the manager compares versions. */
static void zs_event(void *arg, cq_zknode_event_t ev)
{
    zk_store_t *st = arg;
    pthread_mutex_lock(&st->mu);
    if (ev == CQ_ZKNODE_EXPIRED)
        st->expired = true;
    void (*fn)(void *) = st->changed;
    void *fn_arg = st->changed_arg;
    cq_zknode_t *cur = st->node;
    pthread_mutex_unlock(&st->mu);
    if (ev == CQ_ZKNODE_CHANGED && cur)
        (void)cq_zknode_watch(cur);
    if (fn)
        fn(fn_arg);
}

static int zs_open(zk_store_t *st)
{
    cq_zknode_t *n = NULL;
    int rc = cq_zknode_open(st->hosts, st->root, ZS_NODE, st->session_ms, zs_event, st, &n);
    pthread_mutex_lock(&st->mu);
    st->node = n;
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* An expired session cannot come back: close it and open a new one (op_mu held). */
static int zs_ensure(zk_store_t *st)
{
    pthread_mutex_lock(&st->mu);
    bool expired = st->expired;
    st->expired = false;
    cq_zknode_t *old = st->node;
    if (expired || !old)
        st->node = NULL; /* the old session's callback re-arms nothing now */
    bool watched = st->changed != NULL;
    pthread_mutex_unlock(&st->mu);
    if (!expired && old)
        return 0;
    cq_zknode_close(old);
    int rc = zs_open(st);
    if (rc == 0 && watched)
        (void)cq_zknode_watch(st->node);
    return rc;
}

int cq_mgrstore_zk_load(void *ud, char **json, size_t *len, int64_t *ver)
{
    zk_store_t *st = ud;
    *json = NULL;
    *len = 0;
    *ver = -1;
    pthread_mutex_lock(&st->op_mu);
    int rc = zs_ensure(st);
    if (rc == 0)
        rc = cq_zknode_mkparents(st->node); /* creates <root>/mgr when missing */
    if (rc == 0) {
        rc = cq_zknode_get(st->node, json, len, ver);
        if (rc == -ENOENT)
            rc = 0; /* no document yet: ver -1 */
    }
    pthread_mutex_unlock(&st->op_mu);
    return rc;
}

int cq_mgrstore_zk_save(void *ud, const char *json, size_t len, int64_t expect_ver,
                        int64_t *new_ver)
{
    zk_store_t *st = ud;
    *new_ver = -1;
    if (len > INT32_MAX)
        return -EINVAL;
    pthread_mutex_lock(&st->op_mu);
    int rc = zs_ensure(st);
    if (rc == 0 && expect_ver < 0)
        rc = cq_zknode_mkparents(st->node);
    if (rc == 0) {
        if (expect_ver < 0)
            rc = cq_zknode_create(st->node, json, len, new_ver);
        else
            rc = cq_zknode_set(st->node, json, len, expect_ver, new_ver);
        /* A node that vanished under a versioned write was changed by someone else. */
        if (rc == -ENOENT)
            rc = CQ_ECONFLICT;
    }
    pthread_mutex_unlock(&st->op_mu);
    return rc;
}

void cq_mgrstore_zk_watch(void *ud, void (*changed)(void *arg), void *arg)
{
    zk_store_t *st = ud;
    pthread_mutex_lock(&st->op_mu);
    pthread_mutex_lock(&st->mu);
    st->changed = changed;
    st->changed_arg = arg;
    pthread_mutex_unlock(&st->mu);
    if (zs_ensure(st) == 0)
        (void)cq_zknode_watch(st->node);
    pthread_mutex_unlock(&st->op_mu);
}

void cq_mgrstore_zk_free(void *ud)
{
    zk_store_t *st = ud;
    if (!st)
        return;
    cq_zknode_close(st->node); /* no callback runs once it returns */
    pthread_mutex_destroy(&st->mu);
    pthread_mutex_destroy(&st->op_mu);
    cq_free(st);
}

int cq_mgrstore_zk_new(const char *hosts, const char *root, uint32_t session_ms, void **ret)
{
    *ret = NULL;
    if (!hosts || !hosts[0] || !root || strlen(hosts) >= ZS_HOSTS_MAX ||
        strlen(root) >= ZS_ROOT_MAX)
        return -EINVAL;
    zk_store_t *st = cq_calloc(1, sizeof *st);
    if (!st)
        return -ENOMEM;
    pthread_mutex_init(&st->op_mu, NULL);
    pthread_mutex_init(&st->mu, NULL);
    snprintf(st->hosts, sizeof st->hosts, "%s", hosts);
    snprintf(st->root, sizeof st->root, "%s", root);
    st->session_ms = session_ms ? session_ms : 10000;
    int rc = zs_open(st);
    if (rc < 0) {
        cq_mgrstore_zk_free(st);
        return rc;
    }
    *ret = st;
    return 0;
}

const cq_mgrstore_ops_t cq_mgrstore_zk_ops = {
    .load = cq_mgrstore_zk_load,
    .save = cq_mgrstore_zk_save,
    .watch = cq_mgrstore_zk_watch,
    .free = cq_mgrstore_zk_free,
};
