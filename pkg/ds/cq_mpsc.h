/* cq_mpsc.h - intrusive multi-producer single-consumer queue (Vyukov), lock-free.
 *
 * Any thread may cq_mpsc_push(); only the owning thread may cq_mpsc_pop(). FIFO per producer.
 * Nodes are embedded in the messages; the queue never allocates. The queue struct holds a stub
 * node and must not move after cq_mpsc_init().
 */
#ifndef CQ_MPSC_H
#define CQ_MPSC_H

#include <stdatomic.h>
#include <stddef.h>

typedef struct cq_mpsc_node {
    _Atomic(struct cq_mpsc_node *) next;
} cq_mpsc_node_t;

typedef struct cq_mpsc {
    _Atomic(cq_mpsc_node_t *) head; /* producers exchange here */
    cq_mpsc_node_t *tail;           /* consumer only */
    cq_mpsc_node_t stub;
} cq_mpsc_t;

static inline void cq_mpsc_init(cq_mpsc_t *q)
{
    atomic_store_explicit(&q->stub.next, NULL, memory_order_relaxed);
    atomic_store_explicit(&q->head, &q->stub, memory_order_relaxed);
    q->tail = &q->stub;
}

static inline void cq_mpsc_push(cq_mpsc_t *q, cq_mpsc_node_t *n)
{
    atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
    cq_mpsc_node_t *prev = atomic_exchange_explicit(&q->head, n, memory_order_acq_rel);
    atomic_store_explicit(&prev->next, n, memory_order_release);
}

/* Returns the oldest node, or NULL when empty (or when a producer is mid-push: retry later). */
static inline cq_mpsc_node_t *cq_mpsc_pop(cq_mpsc_t *q)
{
    cq_mpsc_node_t *tail = q->tail;
    cq_mpsc_node_t *next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (tail == &q->stub) {
        if (!next)
            return NULL;
        q->tail = next;
        tail = next;
        next = atomic_load_explicit(&next->next, memory_order_acquire);
    }
    if (next) {
        q->tail = next;
        return tail;
    }
    cq_mpsc_node_t *head = atomic_load_explicit(&q->head, memory_order_acquire);
    if (tail != head)
        return NULL; /* a producer is between exchange and link */
    cq_mpsc_push(q, &q->stub);
    next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (next) {
        q->tail = next;
        return tail;
    }
    return NULL;
}

#endif
