/* cq_writer.h - the store thread: one thread owns a cq_store_t and runs every store operation,
 * batching concurrent produces into group commits (issue 4, "Write path").
 *
 * Model. cq_writer_new() starts one pthread that owns the store handle. Any thread builds a
 * request (cq_writer_req_new + inputs) and hands it over with cq_writer_submit(): a lock-free
 * MPSC queue plus a condition variable that is signalled only when the thread sleeps. The thread
 * runs the request and calls opts.done(ud, req) ON THE WRITER THREAD with the outputs filled in.
 * The server's done pushes the request onto the owning loop's queue and calls uv_async_send; it
 * must not block (every other request waits while it runs) and must not call cq_writer_shutdown()
 * or cq_writer_free(). After done returns the writer never touches the request again.
 *
 * Group commit. This thread is the only writer of every topic, so offsets are handed out and
 * become visible in order (durable.md §0.2). Produce requests are grouped per topic (names
 * compared case-insensitively, as the store does) in submission order; a group is committed with
 * ONE cq_store_append_batch() call, i.e. one transaction, when it holds max_batch messages, when
 * its oldest request has waited max_wait_us since submission, or at once when max_wait_us is 0.
 * Everything submitted while a transaction runs is queued and goes into the next one, so under
 * load transactions grow by themselves. A request is never split across transactions: a group of
 * more than max_batch messages becomes several consecutive transactions, and a single request of
 * more than max_batch messages is committed alone. Each request is acknowledged (err == 0,
 * offsets[] filled) only after the transaction that holds it committed.
 *
 * Failures. A request with bad input fails alone before any batching, at submit when possible:
 *   - CQ_ECONTENT: a message larger than the store's max_content (checked on the writer thread
 *     against the store handle's resolved limit, so one oversize message never fails others);
 *   - -EINVAL: no messages, or content NULL with len > 0.
 * A request that breaks the store's sequence rules (CQ_ESEQCONFLICT, CQ_ESEQORDER: cq_store.h)
 * fails alone: the transaction is rolled back and the batch is appended again without it.
 * Every request of a batch fails with the same code and store text (none is acknowledged, none
 * of its messages is visible) when cq_store_append_batch() fails: CQ_ESTORE (the backend failed:
 * I/O, disk full, lock timeout, lost connection; the transaction was rolled back), CQ_ENOTOPIC
 * (the topic does not exist, so every request in that topic's batch would fail anyway) and
 * -ENOMEM. A failure affects only the batch of one topic; other topics' batches still commit.
 *
 * Counting. The caller keeps a topic's message count from its completions: it reads the count
 * once (at start, or with TOPIC_STATS), then adds each produce's new messages (offsets above
 * prev_offset) and subtracts what purges removed. A transaction whose COMMIT outcome could not
 * be checked fails, but its rows may be stored: they are nobody's new messages, and a retry
 * finds them as duplicates. So after any failed transaction the writer counts the rows of the
 * topic above what it last reported (one range scan) before the topic's next append or purge,
 * and the next completion of that topic (a produce's, whatever its outcome, or a purge's)
 * carries the number in req->unseen. The caller's count is then exact after every path.
 *
 * Non-produce requests (read, commit/get offset, topics, purge, high water, invalidate) run as
 * soon as the thread dequeues them, without waiting for produces queued before them in the same
 * round; they see only committed data.
 *
 * Reads off the writer thread. With opts.reader (a second handle on the same database), READ
 * requests go to a reader thread of their own that owns that handle, so a consume never waits
 * behind a group commit, and the two overlap. A READ still sees only committed data, so
 * everything acknowledged before it was submitted. done then runs on either thread: it must be
 * thread-safe (the server's pushes onto an MPSC queue).
 *
 * Bounded pending work. Every accepted request counts against max_pending until its done has
 * run: a produce counts its messages, any other request counts 1. cq_writer_submit() returns
 * CQ_EBUSY at once (request not taken) when the request would go over the limit.
 *
 * Shutdown. cq_writer_shutdown() stops accepting (later submits return CQ_ECLOSED), runs every
 * request already queued (produces are committed, not dropped; each gets its done), and joins
 * the thread. cq_writer_free() does the same if needed, then closes the store.
 */
#ifndef CQ_WRITER_H
#define CQ_WRITER_H

#include "cq_mpsc.h"
#include "cq_store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CQ_WRITER_MAX_BATCH_DFL 4000
/* 0: group commit without a timer. What arrives while a transaction commits goes into the next
 * one, so batches grow with the load by themselves; a timer would only add latency (bench/
 * RESULTS.md, durable topics). */
#define CQ_WRITER_MAX_WAIT_US_DFL 0
#define CQ_WRITER_MAX_PENDING_DFL 100000
#define CQ_WRITER_ERRMSG_MAX      256
#define CQ_WRITER_READ_MAX        10000 /* largest READ max (records held in memory at once) */

typedef struct cq_writer cq_writer_t;
typedef struct cq_writer_req cq_writer_req_t;

/* Completion callback: runs on the writer thread, once per accepted request. Must not block. */
typedef void (*cq_writer_done_fn)(void *ud, cq_writer_req_t *req);

typedef struct cq_writer_opts {
    size_t max_batch;       /* messages per transaction; 0 = CQ_WRITER_MAX_BATCH_DFL */
    int64_t max_wait_us;    /* wait for more before committing a partial batch, counted from
                             * the oldest request's submit; 0 = commit as soon as the thread is
                             * free (note: a zeroed struct means 0); < 0 = the default */
    size_t max_pending;     /* pending messages (+1 per other request); 0 = the default */
    cq_writer_done_fn done; /* required */
    void *ud;               /* borrowed; passed to done */
    cq_store_t *reader;     /* NULL, or a second handle for READ requests (taken, also on
                             * failure): they run on a reader thread of their own */
} cq_writer_opts_t;

typedef enum cq_writer_op {
    CQ_WRITER_PRODUCE = 1,
    CQ_WRITER_READ,
    CQ_WRITER_COMMIT_OFFSET,
    CQ_WRITER_GET_OFFSET,
    CQ_WRITER_TOPIC_CREATE,
    CQ_WRITER_TOPIC_LIST,
    CQ_WRITER_TOPIC_SET_ONLINE,
    CQ_WRITER_PURGE,
    CQ_WRITER_HIGH_WATER,
    CQ_WRITER_INVALIDATE,
    CQ_WRITER_TOPIC_STATS, /* high water (offset) and messages (count): a new master reloads
                            * what replication moved */
    CQ_WRITER_READ_ONE,    /* the message at offset whatever its state (recs[0], state): an
                            * operator's lookup (cq_store_read_one) */
} cq_writer_op_t;

/* A request. Allocate with cq_writer_req_new(), fill the inputs of its op, submit, read the
 * outputs in done (or later, on any thread that received it), release with cq_writer_req_free().
 * Between submit and done the request belongs to the writer: touch nothing. */
struct cq_writer_req {
    /* private */
    cq_mpsc_node_t node;
    struct cq_writer_req *next; /* writer thread: per-topic group */
    uint64_t submit_ns;         /* monotonic, set by submit */
    size_t cap_msgs;
    size_t weight; /* units counted against max_pending */

    /* public: inputs (set by the caller before submit) */
    cq_writer_op_t op;                  /* read-only: set by cq_writer_req_new() */
    char topic[CQ_STORE_TOPIC_MAX + 1]; /* read-only: set by cq_writer_req_new() */
    void *ud;                           /* the caller's; the writer ignores it */
    cq_store_msg_t *msgs;               /* PRODUCE: owned, with their contents; use add_msg */
    size_t n_msgs;
    char consumer[CQ_STORE_CONSUMER_MAX + 1]; /* COMMIT_OFFSET, GET_OFFSET */
    uint64_t from_offset;                     /* READ: exclusive */
    size_t max;            /* READ: records (1..CQ_WRITER_READ_MAX); PURGE: rows (>= 1) */
    size_t max_bytes;      /* READ: bound of the contents' bytes (cq_store_read_bounded), 0 none */
    uint64_t offset;       /* COMMIT_OFFSET, INVALIDATE, READ_ONE: input; GET_OFFSET, HIGH_WATER,
                            * TOPIC_STATS:       output */
    int64_t now_ms;        /* COMMIT_OFFSET, TOPIC_CREATE: unix ms */
    int64_t older_than_ms; /* PURGE: unix ms */
    int retention_days;    /* TOPIC_CREATE */
    bool online;           /* TOPIC_SET_ONLINE */

    /* public: outputs (valid in done) */
    int err;                           /* 0 or a negative code */
    char errmsg[CQ_WRITER_ERRMSG_MAX]; /* store text on failure, else "" */
    uint64_t *offsets;                 /* PRODUCE: n_msgs entries, owned by the request */
    uint64_t prev_offset; /* PRODUCE: the highest offset committed in the topic before this
                           * request's new messages: the store's high water before the
                           * transaction, or an earlier request's offset in it. An offset
                           * above prev_offset that the engine never saw acknowledged was
                           * committed without its answer (an unknown COMMIT outcome). */
    cq_store_rec_t *recs; /* READ, READ_ONE: n_recs records, owned by the request */
    size_t n_recs;
    cq_store_topic_t *topics; /* TOPIC_LIST: owned by the request */
    size_t n_topics;
    size_t purged;                  /* PURGE */
    int state;                      /* READ_ONE: 1 valid, 0 invalid */
    uint64_t key_producer, key_seq; /* READ_ONE with offset 0: by (producer_id, seq) instead */
    uint64_t count;  /* TOPIC_STATS: messages in the topic (also sets offset: its high water) */
    uint64_t unseen; /* PRODUCE, PURGE, whatever err says: messages of the topic committed
                      * earlier without their answer (a COMMIT whose outcome could not be
                      * checked), counted now; the caller adds them to its count (Counting) */
};

/* Allocates a request for op on topic (ignored, may be NULL, for CQ_WRITER_TOPIC_LIST).
 * consumer is for COMMIT_OFFSET / GET_OFFSET (NULL otherwise). Returns 0 and *ret_req owned,
 * CQ_EBADTOPIC / -EINVAL (bad consumer id or op) / -ENOMEM. Any thread. */
int cq_writer_req_new(cq_writer_op_t op, const char *topic, const char *consumer,
                      cq_writer_req_t **ret_req);
/* Appends one message to a PRODUCE request, copying content (len bytes; may be NULL when len is
 * 0). The size limit is checked by the writer, not here. 0, -EINVAL or -ENOMEM. Any thread that
 * owns req. */
int cq_writer_req_add_msg(cq_writer_req_t *req, const void *content, size_t len,
                          uint64_t producer_id, uint64_t seq);
/* Same, but takes content (cq_malloc'd, len bytes), also on failure. */
int cq_writer_req_add_msg_take(cq_writer_req_t *req, void *content, size_t len,
                               uint64_t producer_id, uint64_t seq);
/* Frees the request with its messages and outputs. Accepts NULL. Not while submitted. */
void cq_writer_req_free(cq_writer_req_t *req);

/* Starts the writer thread, which owns store from now on (taken, also on failure: then it is
 * closed), and the reader thread when o->reader is set (taken likewise). o is borrowed. Returns 0
 * and the writer owned in *ret, or a negative code with what failed in err[errlen] (err NULL or
 * errlen 0: no text; *ret untouched): -EINVAL (store, o or o->done missing), -ENOMEM, or the
 * error of creating a lock or a thread. Any thread. */
int cq_writer_new(cq_store_t *store, const cq_writer_opts_t *o, cq_writer_t **ret, char *err,
                  size_t errlen);

/* Hands req to the writer thread; any thread (including done). On 0 the request is taken until
 * its done. Not taken on: CQ_EBUSY (pending over max_pending: retry later), CQ_ELIMIT (a produce
 * of more messages than max_pending: it can never fit), CQ_ECLOSED (shut down), -EINVAL (bad
 * request: no messages for a produce, read or purge with max 0, read with max over
 * CQ_WRITER_READ_MAX). Never blocks on the store. */
int cq_writer_submit(cq_writer_t *w, cq_writer_req_t *req);

/* Stops accepting, completes every queued request (produces are committed), joins the threads.
 * Idempotent. Call from one thread, not from done. Later submits return CQ_ECLOSED. */
void cq_writer_shutdown(cq_writer_t *w);
/* Shuts down (if not yet) and frees the writer, closing the store(s). Accepts NULL; returns
 * NULL. */
cq_writer_t *cq_writer_free(cq_writer_t *w);

/* Histogram buckets of cq_writer_stats_t: upper bounds (inclusive), the last bucket is +Inf. */
#define CQ_WRITER_HIST_N 12
extern const uint64_t cq_writer_batch_bounds[CQ_WRITER_HIST_N - 1];  /* messages */
extern const uint64_t cq_writer_commit_bounds[CQ_WRITER_HIST_N - 1]; /* microseconds */

/* Counters for /metrics; any thread, relaxed snapshots. */
typedef struct cq_writer_stats {
    uint64_t transactions; /* append transactions attempted (committed + failed) */
    uint64_t failed_txns;  /* append transactions that failed (all their requests failed) */
    uint64_t messages;     /* messages acknowledged (committed) */
    uint64_t produce_reqs; /* produce requests acknowledged */
    uint64_t rejected;     /* produce requests failed alone (CQ_ECONTENT, -EINVAL, sequence) */
    uint64_t busy;         /* submits refused with CQ_EBUSY */
    uint64_t other_ops;    /* non-produce requests run */
    uint64_t max_txn_msgs; /* largest transaction, in messages */
    uint64_t pending;      /* current pending units (see max_pending) */
    uint64_t max_pending;  /* the limit of pending units (the server's load = pending / it) */
    /* Per append transaction (committed or failed), not cumulative: batch[i] counts the
     * transactions of at most cq_writer_batch_bounds[i] messages (and above the previous bound),
     * commit_us[i] those whose cq_store_append_batch() took at most cq_writer_commit_bounds[i]
     * microseconds (the whole transaction: statements and COMMIT). */
    uint64_t batch[CQ_WRITER_HIST_N], commit_us[CQ_WRITER_HIST_N];
    uint64_t batch_sum, commit_us_sum; /* messages; microseconds */
} cq_writer_stats_t;

/* Fills *ret_stats. Batches per transaction = produce_reqs / (transactions - failed_txns). */
void cq_writer_stats(const cq_writer_t *w, cq_writer_stats_t *ret_stats);

/* Tests only: while paused the thread dequeues nothing (submits still queue and still count
 * against max_pending). Shutdown overrides a pause. Any thread. */
void cq__writer_pause(cq_writer_t *w, bool paused);

#endif
