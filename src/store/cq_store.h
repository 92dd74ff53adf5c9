/* cq_store.h - durable topics: the backend-neutral storage interface (issue 4).
 *
 * A store holds topics. A topic is an append-only log of messages; each message gets an offset
 * (the row id) that increases in commit order but is NOT dense: gaps appear (MariaDB reserves id
 * blocks, retries and rollbacks burn ids, purge removes rows). Consumers therefore keep "the last
 * offset I processed" and read with from_offset_exclusive, never compute offset + 1.
 *
 * Backends implement cq_store_ops_t with identical semantics: sqlite (embedded default, a file
 * in the data dir, cq_store_sqlite_ops) and mysql (MariaDB, cq_store_mysql_ops). Callers use the
 * cq_store_* wrappers below, never the ops table directly: the wrappers validate topic names before
 * a backend sees them and reset the handle's error text.
 *
 * Per topic the seed's two tables exist: t_<topic> (offset, create time, content, state 1 valid /
 * 0 invalid, producer id + sequence for idempotent retries) and o_<topic> (consumer id, update
 * time, offset). MariaDB limits table names to 64 characters: there, names over 62 characters
 * get a shortened table name with a hash (src/store/mysql_schema.c).
 *
 * Threads: every call is synchronous and may block on disk or network; call it from the store
 * thread, never from an event loop. A handle is used by one thread at a time (no internal
 * locking); different handles on the same database may be used from different threads or
 * processes. Nothing calls back.
 *
 * Errors: 0 on success, otherwise a negative code. CQ_EBADTOPIC (name not [A-Za-z0-9_]{1,64}),
 * CQ_ENOTOPIC (no such topic), CQ_EEXIST (topic exists; names are unique case-insensitively),
 * CQ_ECONTENT (content over opts.max_content), CQ_ESEQCONFLICT / CQ_ESEQORDER
 * (append: see the sequence rules there), CQ_ESTORE (the backend failed: its text is in
 * cq_store_errmsg()), -EINVAL (bad argument), -ENOMEM, -ENOENT (get_offset: consumer never
 * committed). Output parameters (ret_*) are written only on success.
 */
#ifndef CQ_STORE_H
#define CQ_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cq_sbuf.h"

#define CQ_STORE_TOPIC_MAX         64      /* topic name length limit, bytes */
#define CQ_STORE_CONSUMER_MAX      128     /* consumer id length limit, bytes */
#define CQ_STORE_MAX_CONTENT_DFL   1048576 /* default opts.max_content */
#define CQ_STORE_RETENTION_MAX     36500   /* retention_days upper bound (0 = keep forever) */
#define CQ_STORE_DEFAULT_RETENTION 30      /* the seed's 30 days */

typedef struct cq_store cq_store_t;

/* Open options. All pointers are borrowed for the duration of cq_store_open() only. */
typedef struct cq_store_opts {
    const char *dir;     /* sqlite: data directory (must exist); the file is dir/chanq.db */
    size_t max_content;  /* largest content accepted by append, bytes; 0 = the default */
    int busy_timeout_ms; /* sqlite: wait this long for another process's lock; 0 = 5000.
                          * mysql: innodb_lock_wait_timeout, rounded up to seconds */
    /* mysql only (ignored by sqlite). The database is created if missing. */
    const char *host;     /* server address; NULL = "127.0.0.1" */
    unsigned port;        /* TCP port; 0 = 3306 */
    const char *user;     /* NULL = the client library's default (the login name) */
    const char *password; /* NULL = none */
    const char *database; /* [A-Za-z0-9_]{1,64}; NULL = "chanq" */
} cq_store_opts_t;

/* One message to append. Borrowed by append_batch for the duration of the call. */
typedef struct cq_store_msg {
    const void *content; /* len bytes; may be NULL when len == 0 */
    size_t len;
    int64_t create_ms;    /* unix ms; 0 = the store's wall clock at append time */
    uint64_t producer_id; /* 0 = no deduplication; otherwise (producer_id, seq) is unique */
    uint64_t seq;         /* producer's sequence number (any value, need not be dense) */
    bool hole; /* the caller refused this key earlier without storing it (a retryable hole,
                * doc/protocol-mq.md): exempt from the order rule of append_batch */
} cq_store_msg_t;

/* One message read back. content is owned by the record: release an array of records with
 * cq_store_recs_done(). */
typedef struct cq_store_rec {
    uint64_t offset;
    int64_t create_ms;
    uint64_t producer_id; /* 0 when the message was appended without one */
    uint64_t seq;
    void *content; /* owned; cq_malloc'd (never NULL after a successful read, even for len 0),
                    * len bytes followed by a '\0' (not counted in len) */
    size_t len;
} cq_store_rec_t;

/* One topic, as listed. */
typedef struct cq_store_topic {
    char name[CQ_STORE_TOPIC_MAX + 1];
    bool online;
    int retention_days; /* 0 = keep forever */
    int64_t created_ms;
} cq_store_topic_t;

/* The backend interface. Every function below has the semantics of its cq_store_* wrapper;
 * backends may assume the topic and consumer names were validated. */
typedef struct cq_store_ops {
    const char *name; /* "sqlite", "mysql" */
    int (*open)(const cq_store_opts_t *opts, cq_store_t **ret_store, char *err, size_t errlen);
    void (*close)(cq_store_t *s);
    int (*topic_create)(cq_store_t *s, const char *topic, int retention_days, int64_t now_ms);
    int (*topic_list)(cq_store_t *s, cq_store_topic_t **ret_topics, size_t *ret_n);
    int (*topic_set_online)(cq_store_t *s, const char *topic, bool online);
    int (*append_batch)(cq_store_t *s, const char *topic, const cq_store_msg_t *msgs, size_t n,
                        uint64_t *ret_offsets);
    int (*read)(cq_store_t *s, const char *topic, uint64_t from_offset_exclusive, size_t max,
                size_t max_bytes, cq_store_rec_t *ret_recs, size_t *ret_n);
    int (*invalidate)(cq_store_t *s, const char *topic, uint64_t offset);
    int (*read_one)(cq_store_t *s, const char *topic, uint64_t offset, cq_store_rec_t *ret_rec,
                    int *ret_state);
    int (*find_key)(cq_store_t *s, const char *topic, uint64_t producer_id, uint64_t seq,
                    uint64_t *ret_offset);
    int (*commit_offset)(cq_store_t *s, const char *topic, const char *consumer_id, uint64_t offset,
                         int64_t now_ms);
    int (*get_offset)(cq_store_t *s, const char *topic, const char *consumer_id,
                      uint64_t *ret_offset);
    int (*purge)(cq_store_t *s, const char *topic, int64_t older_than_unix_ms, size_t max_rows,
                 size_t *ret_purged);
    int (*high_water)(cq_store_t *s, const char *topic, uint64_t *ret_offset);
    int (*count)(cq_store_t *s, const char *topic, uint64_t after, uint64_t upto,
                 uint64_t *ret_n);                      /* cq_store_count_range() */
    int (*created_ms)(cq_store_t *s, uint64_t *ret_ms); /* NULL: not known */
} cq_store_ops_t;

/* The embedded SQLite backend (src/store/sqlite.c). */
extern const cq_store_ops_t cq_store_sqlite_ops;
/* The MariaDB/MySQL backend (src/store/mysql.c, MariaDB Connector/C). Built only when
 * libmariadb was found: then CQ_HAVE_MYSQL is defined for everything that uses the store. */
extern const cq_store_ops_t cq_store_mysql_ops;

/* ---- validation ---------------------------------------------------------------------------- */

/* True when name matches [A-Za-z0-9_]{1,64}. name may be NULL (false). Pure; any thread. */
bool cq_store_topic_name_ok(const char *name);
/* True when id is 1..CQ_STORE_CONSUMER_MAX bytes of printable ASCII. Pure; any thread. */
bool cq_store_consumer_id_ok(const char *id);

/* ---- handle -------------------------------------------------------------------------------- */

/* Opens a store with backend ops (borrowed; must outlive the handle). Creates the database if
 * missing and applies every pending migration (forward only; a database newer than this binary
 * is refused with CQ_ESTORE). *ret_store is returned owned; release it with cq_store_close().
 * On failure a message is written to err (if err && errlen). */
int cq_store_open(const cq_store_ops_t *ops, const cq_store_opts_t *opts, cq_store_t **ret_store,
                  char *err, size_t errlen);
/* Closes the handle. Accepts NULL. */
void cq_store_close(cq_store_t *s);
/* Text of the last error on this handle ("" if the last call succeeded). Borrowed: valid until
 * the next call on the handle. */
const char *cq_store_errmsg(const cq_store_t *s);

/* ---- topics -------------------------------------------------------------------------------- */

/* Creates topic with its message and consumer-offset tables, online, in one transaction (MariaDB
 * commits DDL implicitly: there the tables come first and the topic exists once its row commits).
 * retention_days 0..CQ_STORE_RETENTION_MAX (0 = keep forever). now_ms: unix ms, recorded as the
 * creation time. CQ_EEXIST if a topic of that name (any case) exists. */
int cq_store_topic_create(cq_store_t *s, const char *topic, int retention_days, int64_t now_ms);
/* Lists all topics sorted by name. *ret_topics is returned owned (cq_free; NULL when
 * *ret_n == 0). */
int cq_store_topic_list(cq_store_t *s, cq_store_topic_t **ret_topics, size_t *ret_n);
/* Marks a topic online or offline. The store only records the flag: the server refuses produce
 * and consume on an offline topic. */
int cq_store_topic_set_online(cq_store_t *s, const char *topic, bool online);

/* ---- messages ------------------------------------------------------------------------------ */

/* Appends n (>= 1) messages in ONE transaction: either all are committed (durably: when this
 * returns 0 the transaction is on disk) or none is visible. ret_offsets (n entries, caller's
 * array) receives each message's offset, increasing in msgs order for new messages.
 * CQ_ECONTENT when any content is over the limit (the whole batch fails). The caller must
 * serialize appends per topic (one writer per topic) so offsets become visible in order.
 *
 * Idempotence and sequence rules, per (topic, producer_id), for messages with a producer id.
 * The store remembers every message it still holds (a purge forgets the rows it removes), and
 * a producer's last seq is the highest seq among them:
 *   - a message whose (producer_id, seq) is stored, or repeated earlier in the same batch, with
 *     the same content is a retry: not inserted again, it gets the original offset;
 *   - with other content it is CQ_ESEQCONFLICT;
 *   - a new seq must be above the producer's last seq (messages earlier in the batch count), else
 *     CQ_ESEQORDER (a producer that reset its sequence would otherwise lose messages silently);
 *   - except a message marked hole: the caller knows its key was refused before, unstored, and
 *     lets its retry in below the last seq (it is stored in batch order like any new message;
 *     the two rules above still apply to it, and it does not lower the last seq).
 * Seqs need not be dense. Sequence errors fail the whole batch; cq_store_append_bad() then names
 * the first offending message, so that a caller batching several requests can fail that one
 * alone and append the others again. seq is compared as a signed 64-bit value by SQLite: keep
 * seqs below 2^63 (the server keeps them below 2^53). */
int cq_store_append_batch(cq_store_t *s, const char *topic, const cq_store_msg_t *msgs, size_t n,
                          uint64_t *ret_offsets);
/* After cq_store_append_batch() failed with CQ_ESEQCONFLICT or CQ_ESEQORDER: the index in msgs
 * of the message that broke the rule. Otherwise unspecified. */
size_t cq_store_append_bad(const cq_store_t *s);
/* After cq_store_append_batch() returned 0: the topic's high water (see cq_store_high_water())
 * before the batch, read under the batch's lock. Offsets above it and not in the batch's
 * results were committed by someone else (or by an append whose answer was lost) in between.
 * After it failed: the same when the batch got as far as locking the topic (rows above it may
 * then be committed, if the failure was a COMMIT whose outcome could not be checked), else
 * CQ_STORE_BASE_NONE (nothing of the batch was written). */
uint64_t cq_store_append_base(const cq_store_t *s);
#define CQ_STORE_BASE_NONE UINT64_MAX
/* Reads up to max (>= 1) valid (state 1) messages with offset > from_offset_exclusive, in
 * offset order, into ret_recs (caller's array of max entries). *ret_n may be 0. The records'
 * contents are returned owned: release with cq_store_recs_done(ret_recs, *ret_n). */
int cq_store_read(cq_store_t *s, const char *topic, uint64_t from_offset_exclusive, size_t max,
                  cq_store_rec_t *ret_recs, size_t *ret_n);
/* The same, bounded by bytes too: stops before the record that would take the sum of the
 * contents read over max_bytes (0: no byte bound). The first record is returned whatever its
 * size. The backend reads no content it does not return, so one call holds at most about
 * max_bytes (plus one record) in memory. */
int cq_store_read_bounded(cq_store_t *s, const char *topic, uint64_t from_offset_exclusive,
                          size_t max, size_t max_bytes, cq_store_rec_t *ret_recs, size_t *ret_n);
/* Frees the contents of n records (not the array). Accepts recs == NULL. */
void cq_store_recs_done(cq_store_rec_t *recs, size_t n);
/* Sets the message at offset to state 0 (invalid): it is never delivered again. -ENOENT if no
 * such message. */
int cq_store_invalidate(cq_store_t *s, const char *topic, uint64_t offset);
/* The message at offset whatever its state (an operator's lookup, issue 25): *ret_rec (its
 * content owned: cq_store_recs_done) and *ret_state (1 valid, 0 invalid). -ENOENT if no such
 * message. */
int cq_store_read_one(cq_store_t *s, const char *topic, uint64_t offset, cq_store_rec_t *ret_rec,
                      int *ret_state);
/* The offset of the message stored with (producer_id >= 1, seq), whatever its state. -ENOENT if
 * none. */
int cq_store_find_key(cq_store_t *s, const char *topic, uint64_t producer_id, uint64_t seq,
                      uint64_t *ret_offset);
/* Deletes up to max_rows (>= 1) of the oldest messages (by offset) whose create time is before
 * older_than_unix_ms, in one transaction, and stops at the first newer message: call again
 * while *ret_purged == max_rows. */
int cq_store_purge(cq_store_t *s, const char *topic, int64_t older_than_unix_ms, size_t max_rows,
                   size_t *ret_purged);
/* The highest offset ever committed in topic (0 if none), even if purged since. */
int cq_store_high_water(cq_store_t *s, const char *topic, uint64_t *ret_offset);
/* When the store was made: the time its first migration was applied (ms since the Unix epoch),
 * the same on a replica. A standalone server's epoch (doc/bridge.md "TopicEvent"), so that a
 * store made anew is a new history for the positions clients hold. -ENOTSUP when the backend
 * does not say. */
int cq_store_created_ms(cq_store_t *s, uint64_t *ret_ms);

/* The number of valid (state 1) messages in topic: the seed's topic_message_total. Counts the
 * rows (O(rows)): chanqd calls it once per topic at start and keeps the count itself. */
int cq_store_count(cq_store_t *s, const char *topic, uint64_t *ret_n);
/* The number of valid messages with after < offset <= upto (upto is capped at 2^63 - 1): one
 * range scan of the offsets, for a few rows whose count is not known (the store thread counts
 * the rows a COMMIT whose answer was lost left behind). */
int cq_store_count_range(cq_store_t *s, const char *topic, uint64_t after, uint64_t upto,
                         uint64_t *ret_n);

/* ---- consumers ----------------------------------------------------------------------------- */

/* Records consumer_id's offset in topic (upsert; moving backwards is allowed: a rewind). */
int cq_store_commit_offset(cq_store_t *s, const char *topic, const char *consumer_id,
                           uint64_t offset, int64_t now_ms);
/* Reads consumer_id's committed offset; -ENOENT if it never committed one. */
int cq_store_get_offset(cq_store_t *s, const char *topic, const char *consumer_id,
                        uint64_t *ret_offset);

/* ---- the store's file system -------------------------------------------------------------- */

/* Appends, as Prometheus text, the file system figures of dir (the SQLite backend's data
 * directory): chanq_mq_store_avail_bytes (free to an unprivileged writer) and
 * chanq_mq_store_size_bytes (the file system's size). dir borrowed. Any thread: one statvfs(),
 * no store handle. Returns 0 (nothing appended when dir cannot be statted: the series are then
 * absent) or -ENOMEM. */
int cq_store_disk_metrics(const char *dir, cq_sbuf_t *out);

/* ---- tests --------------------------------------------------------------------------------- */

/* Number of SQL statements the backend has prepared or run on this handle. Tests use it to show
 * that rejected input reached no SQL. */
uint64_t cq__store_sql_count(const cq_store_t *s);

/* Fault injection. mysql backend only (sqlite ignores them): LOST_BEFORE_COMMIT /
 * LOST_AFTER_COMMIT: the next append loses its connection right before / right after its COMMIT
 * and must resolve the unknown outcome (fired once); NO_RECONNECT: every connect fails while set.
 * Any backend (cq_store.c, fired once each): FAIL_APPEND: the next append fails with CQ_ESTORE
 * before the backend sees it (nothing stored); ANSWER_LOST: the next append commits, then fails
 * with CQ_ESTORE as if the COMMIT's answer was lost and could not be checked (its rows are
 * stored, the caller is told nothing was acknowledged). */
#define CQ__STORE_FAULT_LOST_BEFORE_COMMIT 1u
#define CQ__STORE_FAULT_LOST_AFTER_COMMIT  2u
#define CQ__STORE_FAULT_NO_RECONNECT       4u
#define CQ__STORE_FAULT_FAIL_APPEND        8u
#define CQ__STORE_FAULT_ANSWER_LOST        16u
/* Sets the fault bits (replacing the previous ones). Store thread. */
void cq__store_fault(cq_store_t *s, unsigned faults);

#endif
