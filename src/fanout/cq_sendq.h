/* cq_sendq.h - per-connection send queue of shared encoded buffers.
 *
 * Entries are references to refcounted cq_bufs: a RECORD is one encoded Packet.messages entry
 * (shared by every recipient of a fan-out) and is batched with neighbouring records under one
 * 5-byte header when flushed; a PACKET is a complete packet (header included), used for
 * Snappy-compressed output. Nothing is copied per connection: a flush builds an iovec over the
 * shared bytes plus a small per-batch scratch holding the headers.
 *
 * A SLICE is a run of whole records inside a buffer its owner appends to (a worker's fan-out
 * buffer, see cq_sendq_push_slice): a broadcast of many small records to many connections then
 * costs each queue one entry that grows, not one entry (and one reference) per record.
 *
 * A flush forms one batch (cq_sendq_prepare) and must write it completely (cq_sendq_written,
 * possibly over several calls) before the next batch is formed, because the headers of a batch
 * fix which records each packet holds. Owned by the connection's worker thread.
 */
#ifndef CQ_SENDQ_H
#define CQ_SENDQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "cq_buf.h"
#include "cq_framing.h"
#include "cq_pool.h"

enum { CQ_SENDQ_RECORD = 0, CQ_SENDQ_PACKET = 1, CQ_SENDQ_SLICE = 2 };

/* Results of cq_sendq_push_slice other than errors. */
enum { CQ_SENDQ_EXTENDED = 0, CQ_SENDQ_ADDED = 1, CQ_SENDQ_APART = 2 };

/* A slice never grows past this (it must fit one packet with room for legacy padding). */
#define CQ_SENDQ_SLICE_MAX (60u * 1024u)

typedef struct cq_sendq_ent {
    cq_buf_t *buf;
    uint32_t off;      /* first byte of buf (a SLICE; 0 otherwise) */
    uint32_t len : 29; /* bytes from off */
    uint32_t kind : 2;
    uint32_t run : 1; /* a SLICE that starts a run (not the continuation of the one before) */
} cq_sendq_ent_t;

/* Slice runs a queue may hold waiting (a batch in flight holds at most as many). */
#define CQ_SENDQ_RUNS 8

typedef struct cq_sendq_batch cq_sendq_batch_t;

typedef struct cq_sendq {
    cq_sendq_ent_t *ring;
    uint32_t head, count, cap;
    uint8_t mode;            /* cq_framing_mode_t of the peer */
    uint8_t runs;            /* slice runs among the waiting entries */
    uint8_t held;            /* cq_sendq_hold: no batch is formed */
    size_t queued;           /* bytes queued or in flight, not yet written */
    uint64_t soft_since_ms;  /* when queued first went over the soft limit; 0 when under */
    cq_sendq_batch_t *batch; /* the batch being written, or NULL */
    cq_pool_t *pool;         /* where batches come from (borrowed); NULL: cq_malloc */
} cq_sendq_t;

/* An empty queue whose batches come from cq_malloc. */
void cq_sendq_init(cq_sendq_t *q, cq_framing_mode_t mode);
/* Batches come from pool from now on (borrowed: it must outlive the queue's batches; NULL:
 * cq_malloc). The pool is single-threaded, so every queue using it must be flushed, written
 * and done on the pool's thread (a worker's own connections). Only while no batch is formed
 * (cq_sendq_idle or just after init). */
void cq_sendq_set_pool(cq_sendq_t *q, cq_pool_t *pool);
/* While held, no new batch is formed (cq_sendq_prepare gives none, a batch already formed goes
 * on): what is queued waits, counted against the limits, whoever moves the queue (the core's
 * flush, a transport's own timer or write completion). The core holds a relay node's new
 * connection until the other nodes know it (doc/relay-cluster.md). */
void cq_sendq_hold(cq_sendq_t *q, bool on);
/* Drops every reference and frees the storage; the queue is empty again, with the same mode and
 * pool. */
void cq_sendq_done(cq_sendq_t *q);

/* Queues buf (borrowed: the queue takes its own reference). Returns 0, -ENOMEM, or CQ_ESLOW
 * when the queued bytes would exceed hard_limit (nothing is queued then). */
int cq_sendq_push(cq_sendq_t *q, cq_buf_t *buf, uint32_t kind, size_t hard_limit);
/* Like cq_sendq_push, but takes a reference the caller already holds (a fan-out takes its
 * recipients' references in one atomic add). On error the caller still owns it. */
int cq_sendq_push_ref(cq_sendq_t *q, cq_buf_t *buf, uint32_t kind, size_t hard_limit);

/* Queues bytes [off, off + len) of buf: whole records the caller appended to buf, a buffer
 * only the caller's thread writes, and only past its len (bytes below it never change).
 * prev is the buffer the caller appended to before buf (compared, never read; NULL: none).
 * The slice continues the last entry when that is a slice of buf ending at off, or a slice
 * ending at the end of prev with off 0; otherwise it starts a run, which a queue takes only
 * while it holds fewer than CQ_SENDQ_RUNS waiting. A run is contiguous in the caller's buffers,
 * so beyond its queued bytes a connection keeps alive at most the partly used first and last
 * buffer of each run: 2 x CQ_SENDQ_RUNS buffers waiting and as many in flight.
 * Returns CQ_SENDQ_EXTENDED (the last entry grew; no reference used), CQ_SENDQ_ADDED (a new
 * entry, which took one reference on buf the caller holds), CQ_SENDQ_APART (not taken: queue
 * the record by itself), CQ_ESLOW over hard_limit, or -ENOMEM. */
int cq_sendq_push_slice(cq_sendq_t *q, cq_buf_t *buf, uint32_t off, uint32_t len,
                        const cq_buf_t *prev, size_t hard_limit);

static inline bool cq_sendq_idle(const cq_sendq_t *q)
{
    return q->count == 0 && q->batch == NULL;
}
/* Something to write now: a batch in flight, or entries while the queue is not held. A
 * transport that polls its queue on its own (KCP) asks this, not !idle, or a held queue would
 * keep it busy. */
static inline bool cq_sendq_writable(const cq_sendq_t *q)
{
    return q->batch || (q->count && !q->held);
}
static inline size_t cq_sendq_bytes(const cq_sendq_t *q)
{
    return q->queued;
}

/* Returns the unwritten iovecs of the current batch, forming a new batch from queued entries if
 * none is in flight. *ret_n is 0 when there is nothing to write. Returns 0 or -ENOMEM. The
 * iovecs stay valid until the batch is fully written or cq_sendq_done(). */
int cq_sendq_prepare(cq_sendq_t *q, const struct iovec **ret_iov, int *ret_n);

/* Records that n bytes of the current batch were written; releases the entries and the batch
 * when complete. Returns true when the batch is complete. */
bool cq_sendq_written(cq_sendq_t *q, size_t n);

/* Soft limit bookkeeping: returns CQ_ESLOW when queued bytes have stayed above soft_limit for
 * soft_ms or more, else 0. */
int cq_sendq_check_soft(cq_sendq_t *q, size_t soft_limit, uint64_t soft_ms, uint64_t now_ms);

/* Builds a complete Snappy packet (header included) from one record, as channeld compresses
 * every packet to a peer that sent Snappy; a plain packet only when the compressed body would
 * not fit a packet (or, for legacy peers, would need padding). Returns an owned PACKET buffer
 * or NULL on OOM. */
cq_buf_t *cq_sendq_compress_record(const cq_buf_t *record, cq_framing_mode_t mode);

#endif
