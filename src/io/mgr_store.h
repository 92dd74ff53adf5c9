/* mgr_store.h - the manager's store thread (internal to src/io, used by mgr_io.c): runs the state
 * store's blocking load and save (cq_mgrstore.h: a file or ZooKeeper) one at a time, a save
 * first, and queues their results for the loop, which it wakes. Only the latest state matters,
 * so it keeps at most one save waiting (a newer document replaces it) and a load is a flag (any
 * number of asks before it runs is one load), not a job queue.
 *
 * Why not a "blocking job thread" of the engine-loop host: the other blocking sides of chanqd
 * each have their own semantics (the MQ port's writer groups commits per topic, src/store; the
 * coord runtime's database thread runs its actions in order, src/coord), and the next front ends
 * need none (a NATS link and the bridge's tails are sockets on the loop; their writes go through
 * the store port). What every such thread needs from the host is its thread-safe wake
 * (cq__io_engine_wake), which this one takes as a callback. */
#ifndef CQ_IO_MGR_STORE_H
#define CQ_IO_MGR_STORE_H

#include "cq_mgrstore.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mgr_store mgr_store_t;

/* One result, in the order the calls ran. */
typedef struct mgr_store_res {
    struct mgr_store_res *next;
    bool save; /* a save's answer, else a load's */
    int rc;
    char *json; /* load: owned (freed with the result) */
    size_t len;
    int64_t ver;
} mgr_store_res_t;

/* Takes the store (ud is freed with ops->free by cq__mgr_store_free, and here when this fails).
 * wake(wake_ud) is called from the store thread, under the object's lock, when results wait.
 * Returns an owned object, or NULL on OOM. Main thread. */
mgr_store_t *cq__mgr_store_new(const cq_mgrstore_ops_t *ops, void *ud, void (*wake)(void *),
                               void *wake_ud);
/* Sets the store's watch, asks for the first load and starts the thread. 0 or -EAGAIN. */
int cq__mgr_store_start(mgr_store_t *s);
/* Saves json[0..len) (copied) if the stored version is still expect_ver; replaces a save that
 * has not started. Out of memory is answered as a failed save (-ENOMEM). Loop thread. */
void cq__mgr_store_save(mgr_store_t *s, const char *json, size_t len, int64_t expect_ver);
/* Asks for a load (the document may have changed). Any thread. */
void cq__mgr_store_load(mgr_store_t *s);
/* The results so far, oldest first (owned: cq__mgr_store_res_free each). Loop thread. */
mgr_store_res_t *cq__mgr_store_take(mgr_store_t *s);
void cq__mgr_store_res_free(mgr_store_res_t *r);
/* Joins the thread after the call it runs (idempotent). Main thread. */
void cq__mgr_store_stop(mgr_store_t *s);
/* Stops, frees the store (after ops->free returns no watch callback runs) and what is left.
 * Accepts NULL; returns NULL. */
mgr_store_t *cq__mgr_store_free(mgr_store_t *s);

#endif
