/* mysql_append.c - produce in the MariaDB backend: an idempotent batch append, and what happens
 * when the connection breaks at its COMMIT.
 *
 * Appends to one topic are serialized by the row lock on its topics row (SELECT ... FOR UPDATE,
 * taken first in the append transaction), so ids become visible in commit order even with
 * several writers, and the row carries the topic's high water. A batch is then: one lookup of
 * the batch's (producer_id, seq) pairs already stored (retries get their original offsets;
 * repeats inside the batch get their first occurrence's), then array-bound INSERTs of the new
 * messages (finding 1 of doc durable.md: batching is what makes a durable queue fast), the new
 * ids derived from the insert id (proven consecutive, see append_ids()) or read back, the high
 * water updated, COMMIT.
 *
 * The statements that run on every append are kept prepared (stc_*): an append is then one
 * locked topic lookup, the dedup lookup (keyed messages only), one array-bound INSERT per 1000
 * rows (MariaDB's bulk protocol; a multi-row INSERT on servers without it), one MAX(id) that
 * proves the new ids are consecutive (else they are read back), the high-water UPDATE and COMMIT.
 *
 * When the connection breaks at COMMIT the transaction may have committed, so the append
 * connects once more to find out (append_resolve()): the batch is acknowledged if its rows are
 * there, failed if not, and failed as "unknown" if the server cannot be reached; a retry with
 * the same producer_id and seq then gets the stored offsets if it did commit.
 */
#include "mysql_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- append -------------------------------------------------------------------------------- */

/* A batch goes to the server in statements of at most CHUNK_ROWS rows and, unless one message is
 * bigger, CHUNK_BYTES of content (the server's max_allowed_packet is 16 MiB by default). */
#define CHUNK_ROWS  4000
#define CHUNK_BYTES (4u << 20)
#define LOOKUP_ROWS 256 /* keys per OR-lookup statement */
#define DENSE_SLACK                                                                                \
    64 /* a producer's keys are looked up as one seq range when it spans at most                   \
        * 2 * keys + DENSE_SLACK sequence numbers */

/* A message with a producer id; sorted by (producer_id, seq, index). */
typedef struct dkey {
    uint64_t producer_id, seq;
    size_t idx;
} dkey_t;

/* The column arrays of one array-bound INSERT (CHUNK_ROWS entries each). */
typedef struct bulk_cols {
    int64_t time[CHUNK_ROWS];
    const void *content[CHUNK_ROWS];
    unsigned long len[CHUNK_ROWS];
    uint64_t pid[CHUNK_ROWS], seq[CHUNK_ROWS];
    char ind[CHUNK_ROWS]; /* producer_id and seq: STMT_INDICATOR_NULL or _NONE */
} bulk_cols_t;

/* One append_batch call. Offsets come from three places: rows already stored (a retry), the
 * first occurrence of a (producer_id, seq) repeated in the batch, or new rows. */
typedef struct append_ctx {
    my_store_t *q;
    const my_topic_t *t;
    const cq_store_msg_t *msgs;
    size_t n;
    uint64_t *offs; /* per message; 0 = not known yet (ids start at 1) */
    size_t *first;  /* per message: index of the first message with its (producer_id, seq) */
    dkey_t *keys;   /* the messages with a producer id, sorted */
    size_t nkeys;
    size_t *newv; /* the messages to insert (not stored yet, first occurrences), in batch order */
    size_t nnew;
    uint64_t hw; /* the highest offset so far: the topic's high water, then each new row's */
    int64_t now_ms;
    bulk_cols_t *cols; /* when the server takes array-bound statements */
} append_ctx_t;

/* Checks every message before any is sent: the whole batch fails on the first bad one. */
static int append_check(my_store_t *q, const cq_store_msg_t *msgs, size_t n)
{
    cq_store_t *s = &q->base;
    for (size_t i = 0; i < n; i++) {
        const cq_store_msg_t *m = &msgs[i];
        if (m->len > s->max_content)
            return cq__store_fail(s, CQ_ECONTENT, "message %zu: %zu bytes, over the limit of %zu",
                                  i, m->len, s->max_content);
        if (m->len > INT32_MAX || (m->len && !m->content))
            return cq__store_fail(s, -EINVAL, "message %zu: bad content", i);
    }
    return 0;
}

static int dkey_cmp(const void *a, const void *b)
{
    const dkey_t *x = a, *y = b;
    if (x->producer_id != y->producer_id)
        return x->producer_id < y->producer_id ? -1 : 1;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static bool dkey_same(const dkey_t *x, const dkey_t *y)
{
    return x->producer_id == y->producer_id && x->seq == y->seq;
}

/* Sorts the keys and points every repeat of a (producer_id, seq) at its first occurrence. */
static void append_keys(append_ctx_t *c)
{
    for (size_t i = 0; i < c->n; i++) {
        c->first[i] = i;
        if (c->msgs[i].producer_id)
            c->keys[c->nkeys++] = (dkey_t){c->msgs[i].producer_id, c->msgs[i].seq, i};
    }
    if (c->nkeys > 1)
        qsort(c->keys, c->nkeys, sizeof(*c->keys), dkey_cmp);
    for (size_t k = 1; k < c->nkeys; k++) {
        if (dkey_same(&c->keys[k], &c->keys[k - 1]))
            c->first[c->keys[k].idx] = c->first[c->keys[k - 1].idx];
    }
}

/* Records the stored offset of (producer_id, seq) on its first occurrence in the batch; keys
 * that are not in the batch (a range lookup returns them too) are ignored. */
static void append_found(append_ctx_t *c, uint64_t producer_id, uint64_t seq, uint64_t id)
{
    dkey_t key = {producer_id, seq, 0};
    size_t lo = 0, hi = c->nkeys;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (dkey_cmp(&c->keys[mid], &key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < c->nkeys && dkey_same(&c->keys[lo], &key))
        c->offs[c->keys[lo].idx] = id;
}

/* Builds head followed by k copies of item, minus the last trim bytes. Returned owned. */
static char *sql_repeat(my_store_t *q, const char *head, const char *item, size_t k, size_t trim)
{
    size_t hl = strlen(head), il = strlen(item);
    char *sql = cq_malloc(hl + k * il + 1);
    if (!sql) {
        cq__store_fail(&q->base, -ENOMEM, "out of memory for a %zu-row statement", k);
        return NULL;
    }
    memcpy(sql, head, hl);
    for (size_t j = 0; j < k; j++)
        memcpy(sql + hl + j * il, item, il);
    sql[hl + k * il - trim] = '\0';
    return sql;
}

/* Reads the rows of a lookup: (producer_id, seq, id). */
static int append_lookup_rows(append_ctx_t *c, MYSQL_STMT *st)
{
    MYSQL_BIND res[3];
    uint64_t pid = 0, seq = 0, id = 0;
    cq__mysql_r_u64(&res[0], &pid, NULL);
    cq__mysql_r_u64(&res[1], &seq, NULL);
    cq__mysql_r_u64(&res[2], &id, NULL);
    if (mysql_stmt_store_result(st) != 0)
        return cq__mysql_st_fail(c->q, st, "dedup lookup");
    if (mysql_stmt_bind_result(st, res) != 0)
        return cq__mysql_st_fail(c->q, st, "bind result");
    int r;
    while ((r = cq__mysql_st_fetch(c->q, st, NULL)) == 1)
        append_found(c, pid, seq, id);
    return r;
}

/* Finds the stored offsets of the keys at sel[0..k) in one statement. */
static int append_lookup_chunk(append_ctx_t *c, const size_t *sel, size_t k)
{
    char head[MY_SQL_MAX];
    my_pbind_t p;
    MYSQL_STMT *st = NULL;
    int r = MY_TOPIC_SQL(c->q, head, "SELECT producer_id, seq, id FROM `t_%s` WHERE ", c->t->tbl);
    if (r < 0)
        return r;
    char *sql = sql_repeat(c->q, head, "(producer_id = ? AND seq = ?) OR ", k, strlen(" OR "));
    if (!sql)
        return -ENOMEM;
    r = cq__mysql_p_init_heap(c->q, &p, 2 * k);
    for (size_t j = 0; r == 0 && j < k; j++) {
        cq__mysql_p_u64(&p, c->keys[sel[j]].producer_id);
        cq__mysql_p_u64(&p, c->keys[sel[j]].seq);
    }
    if (r == 0)
        r = cq__mysql_st_run(c->q, sql, &p, &st);
    if (r == 0)
        r = append_lookup_rows(c, st);
    if (st)
        mysql_stmt_close(st);
    cq__mysql_p_done(&p);
    cq_free(sql);
    return r;
}

/* Finds the stored offsets of producer_id's keys with lo <= seq <= hi in one range scan of the
 * UNIQUE(producer_id, seq) index. */
static int append_lookup_range(append_ctx_t *c, uint64_t producer_id, uint64_t lo, uint64_t hi)
{
    char sql[MY_SQL_MAX];
    my_pbind_t p;
    MYSQL_STMT *st = NULL;
    int r = MY_TOPIC_SQL(c->q, sql,
                         "SELECT producer_id, seq, id FROM `t_%s` "
                         "WHERE producer_id = ? AND seq BETWEEN ? AND ?",
                         c->t->tbl);
    cq__mysql_p_init(&p);
    cq__mysql_p_u64(&p, producer_id);
    cq__mysql_p_u64(&p, lo);
    cq__mysql_p_u64(&p, hi);
    if (r == 0)
        r = cq__mysql_stc_run(c->q, sql, &p, &st);
    if (r == 0)
        r = append_lookup_rows(c, st);
    cq__mysql_stc_done(st);
    return r;
}

/* Finds the offsets of the messages already stored (retries): one range scan per producer whose
 * keys are dense, statements of LOOKUP_ROWS keys for the others. */
static int append_lookup(append_ctx_t *c)
{
    size_t sel[LOOKUP_ROWS], k = 0;
    int r = 0;
    for (size_t pos = 0, end; r == 0 && pos < c->nkeys; pos = end) {
        uint64_t pid = c->keys[pos].producer_id;
        size_t distinct = 0;
        for (end = pos; end < c->nkeys && c->keys[end].producer_id == pid; end++)
            distinct += c->first[c->keys[end].idx] == c->keys[end].idx;
        uint64_t lo = c->keys[pos].seq, hi = c->keys[end - 1].seq;
        if (hi - lo <= 2 * (uint64_t)distinct + DENSE_SLACK) {
            r = append_lookup_range(c, pid, lo, hi);
            continue;
        }
        for (size_t i = pos; r == 0 && i < end; i++) {
            if (c->first[c->keys[i].idx] != c->keys[i].idx)
                continue;
            sel[k++] = i;
            if (k == LOOKUP_ROWS) {
                r = append_lookup_chunk(c, sel, k);
                k = 0;
            }
        }
    }
    if (r == 0 && k)
        r = append_lookup_chunk(c, sel, k);
    return r;
}

/* ---- sequence rules (cq_store.h) ----------------------------------------------------------- */

/* Fails the batch with a sequence error on message i. */
static int seq_fail(append_ctx_t *c, int code, size_t i, const char *why, uint64_t other)
{
    const cq_store_msg_t *m = &c->msgs[i];
    c->q->base.append_bad = i;
    return cq__store_fail(&c->q->base, code,
                          "message %zu: producer_id %" PRIu64 " seq %" PRIu64 " %s %" PRIu64, i,
                          m->producer_id, m->seq, why, other);
}

static bool same_content(const cq_store_msg_t *a, const cq_store_msg_t *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->content, b->content, a->len) == 0);
}

/* A (producer_id, seq) repeated in the batch must repeat its first occurrence's content. */
static int seq_check_repeats(append_ctx_t *c)
{
    for (size_t i = 0; i < c->n; i++) {
        size_t f = c->first[i];
        if (f != i && !same_content(&c->msgs[i], &c->msgs[f]))
            return seq_fail(c, CQ_ESEQCONFLICT, i, "has other content than message", (uint64_t)f);
    }
    return 0;
}

/* Marks, among the k stored messages at idx[0..k), those whose stored content equals theirs:
 * one statement matching (id, content) pairs. */
static int seq_match_chunk(append_ctx_t *c, const size_t *idx, size_t k, bool *same)
{
    char head[MY_SQL_MAX];
    my_pbind_t p;
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res[1];
    uint64_t id = 0;
    int r = MY_TOPIC_SQL(c->q, head, "SELECT id FROM `t_%s` WHERE ", c->t->tbl);
    if (r < 0)
        return r;
    char *sql = sql_repeat(c->q, head, "(id = ? AND content = ?) OR ", k, strlen(" OR "));
    if (!sql)
        return -ENOMEM;
    r = cq__mysql_p_init_heap(c->q, &p, 2 * k);
    for (size_t j = 0; r == 0 && j < k; j++) {
        const cq_store_msg_t *m = &c->msgs[idx[j]];
        cq__mysql_p_u64(&p, c->offs[idx[j]]);
        cq__mysql_p_bytes(&p, MYSQL_TYPE_BLOB, m->content ? m->content : "", m->len);
    }
    if (r == 0)
        r = cq__mysql_st_run(c->q, sql, &p, &st);
    cq__mysql_r_u64(&res[0], &id, NULL);
    while (r == 0 && (r = cq__mysql_st_fetch(c->q, st, res)) == 1) {
        for (size_t j = 0; j < k; j++)
            same[j] = same[j] || c->offs[idx[j]] == id;
        r = 0;
    }
    if (st)
        mysql_stmt_close(st);
    cq__mysql_p_done(&p);
    cq_free(sql);
    return r;
}

/* A stored (producer_id, seq) must be retried with its stored content. Retries are rare, so
 * their content goes to the server once more (statements of LOOKUP_ROWS messages and about
 * CHUNK_BYTES) rather than a hash being kept with every row. */
static int seq_check_stored(append_ctx_t *c)
{
    size_t idx[LOOKUP_ROWS], k = 0, bytes = 0;
    bool same[LOOKUP_ROWS];
    int r = 0;
    for (size_t i = 0; r == 0 && i <= c->n; i++) {
        bool flush = k && (i == c->n || k == LOOKUP_ROWS || bytes + c->msgs[i].len > CHUNK_BYTES);
        if (flush) {
            memset(same, 0, sizeof(same));
            r = seq_match_chunk(c, idx, k, same);
            for (size_t j = 0; r == 0 && j < k; j++)
                if (!same[j])
                    r = seq_fail(c, CQ_ESEQCONFLICT, idx[j],
                                 "is stored with other content at offset", c->offs[idx[j]]);
            k = bytes = 0;
        }
        if (r == 0 && i < c->n && c->offs[i] && c->first[i] == i) {
            idx[k++] = i;
            bytes += c->msgs[i].len;
        }
    }
    return r;
}

/* The highest stored seq of producer_id; *ret_any false when it has no stored message. */
static int seq_last(append_ctx_t *c, uint64_t producer_id, uint64_t *ret_last, bool *ret_any)
{
    char sql[MY_SQL_MAX];
    my_pbind_t p;
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res[1];
    my_bool is_null = 1;
    *ret_last = 0;
    cq__mysql_r_u64(&res[0], ret_last, &is_null);
    cq__mysql_p_init(&p);
    cq__mysql_p_u64(&p, producer_id);
    int r = MY_TOPIC_SQL(c->q, sql, "SELECT MAX(seq) FROM `t_%s` WHERE producer_id = ?", c->t->tbl);
    if (r == 0)
        r = cq__mysql_stc_run(c->q, sql, &p, &st);
    if (r == 0)
        r = cq__mysql_st_fetch(c->q, st, res);
    cq__mysql_stc_done(st);
    *ret_any = r == 1 && !is_null;
    return r < 0 ? r : 0;
}

/* New seqs of a producer must rise above its last stored seq, in batch order. The keys are
 * sorted by seq, so its new messages (first occurrences not stored) must also be in batch
 * order, the first above the stored last. Holes (retries of keys the caller refused unstored)
 * are exempt: they may lie below, and come in any order. */
static int seq_check_order(append_ctx_t *c)
{
    int r = 0;
    for (size_t pos = 0, end; r == 0 && pos < c->nkeys; pos = end) {
        uint64_t pid = c->keys[pos].producer_id, last = 0;
        bool any = false, looked = false;
        size_t prev = SIZE_MAX; /* the previous new message's index */
        for (end = pos; end < c->nkeys && c->keys[end].producer_id == pid; end++) {
            size_t i = c->keys[end].idx;
            if (r < 0 || c->offs[i] || c->first[i] != i || c->msgs[i].hole)
                continue; /* a retry, a repeat or a hole */
            if (!looked && (r = seq_last(c, pid, &last, &any)) == 0)
                looked = true;
            if (r == 0 && prev == SIZE_MAX && any && c->msgs[i].seq < last)
                r = seq_fail(c, CQ_ESEQORDER, i, "is below its last stored seq", last);
            else if (r == 0 && prev != SIZE_MAX && i < prev)
                r = seq_fail(c, CQ_ESEQORDER, prev, "comes after the batch's seq", c->msgs[i].seq);
            prev = i;
        }
    }
    return r;
}

/* Records the offset of new message i; offsets must rise above everything before them. */
static int append_new_id(append_ctx_t *c, size_t i, uint64_t id)
{
    if (id <= c->hw)
        return cq__store_fail(&c->q->base, CQ_ESTORE,
                              "mysql append: offset %" PRIu64 " not above %" PRIu64
                              " (AUTO_INCREMENT went back)",
                              id, c->hw);
    c->offs[i] = id;
    c->hw = id;
    return 0;
}

/* Reads back the ids of the k rows one INSERT just added (first_id is the first): with the
 * topic locked they are the k lowest ids >= first_id. */
static int append_read_back(append_ctx_t *c, uint64_t first_id, const size_t *idx, size_t k)
{
    char sql[MY_SQL_MAX];
    my_pbind_t p;
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res[1];
    uint64_t id = 0;
    size_t j = 0;
    cq__mysql_r_u64(&res[0], &id, NULL);
    cq__mysql_p_init(&p);
    cq__mysql_p_u64(&p, first_id);
    cq__mysql_p_u64(&p, k);
    int r = MY_TOPIC_SQL(c->q, sql, "SELECT id FROM `t_%s` WHERE id >= ? ORDER BY id LIMIT ?",
                         c->t->tbl);
    if (r == 0)
        r = cq__mysql_st_run(c->q, sql, &p, &st);
    if (r == 0 && mysql_stmt_bind_result(st, res) != 0)
        r = cq__mysql_st_fail(c->q, st, "bind result");
    while (r == 0 && j < k && (r = cq__mysql_st_fetch(c->q, st, NULL)) == 1)
        r = append_new_id(c, idx[j++], id);
    if (st)
        mysql_stmt_close(st);
    if (r >= 0 && j != k)
        r = cq__store_fail(&c->q->base, CQ_ESTORE, "mysql append: %zu of %zu new rows found", j, k);
    return r < 0 ? r : 0;
}

/* The ids of the k rows one INSERT just added, first_id being the first (the statement's
 * insert id). They are derived as first_id + j, without reading them back, when that is proven:
 * auto_increment_increment is 1, every id of the statement is >= first_id (the counter only
 * grows) and distinct, and with the topic locked no one else adds rows, so MAX(id) ==
 * first_id + k - 1 means the k ids are exactly first_id..first_id + k - 1, given in row order.
 * Otherwise (or if MAX(id) says anything else) they are read back. */
static int append_ids(append_ctx_t *c, uint64_t first_id, const size_t *idx, size_t k)
{
    if (k == 1) /* a one-row INSERT reports its id exactly */
        return append_new_id(c, idx[0], first_id);
    char sql[MY_SQL_MAX];
    uint64_t max = 0;
    bool found = false;
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res[1];
    my_bool is_null = 0;
    int r = 0;
    if (c->q->autoinc_inc == 1) {
        cq__mysql_r_u64(&res[0], &max, &is_null);
        r = MY_TOPIC_SQL(c->q, sql, "SELECT MAX(id) FROM `t_%s`", c->t->tbl);
        if (r == 0)
            r = cq__mysql_stc_run(c->q, sql, NULL, &st);
        if (r == 0 && (r = cq__mysql_st_fetch(c->q, st, res)) == 1)
            found = !is_null, r = 0;
        cq__mysql_stc_done(st);
        if (r < 0)
            return r;
    }
    if (!found || max != first_id + k - 1)
        return append_read_back(c, first_id, idx, k);
    for (size_t j = 0; r == 0 && j < k; j++)
        r = append_new_id(c, idx[j], first_id + j);
    return r;
}

/* Checks the affected rows of an INSERT of k rows and returns its first id in *ret_first. */
static int insert_result(append_ctx_t *c, MYSQL_STMT *st, size_t k, uint64_t *ret_first)
{
    if (mysql_stmt_affected_rows(st) != k)
        return cq__store_fail(&c->q->base, CQ_ESTORE, "mysql append: %zu rows sent, %llu inserted",
                              k, (unsigned long long)mysql_stmt_affected_rows(st));
    *ret_first = mysql_stmt_insert_id(st);
    return 0;
}

/* Inserts the messages at idx[0..k) (new, in batch order) with one array-bound execution of a
 * kept INSERT (durable.md: the fastest durable way, 148-171k rows/s). */
static int insert_bulk(append_ctx_t *c, const size_t *idx, size_t k)
{
    char sql[MY_SQL_MAX];
    bulk_cols_t *b = c->cols;
    MYSQL_BIND bind[4];
    MYSQL_STMT *st = NULL;
    uint64_t first_id = 0;
    unsigned int rows = (unsigned int)k;
    for (size_t j = 0; j < k; j++) {
        const cq_store_msg_t *m = &c->msgs[idx[j]];
        b->time[j] = m->create_ms ? m->create_ms : c->now_ms;
        b->content[j] = m->content ? m->content : "";
        b->len[j] = (unsigned long)m->len;
        b->pid[j] = m->producer_id;
        b->seq[j] = m->seq;
        b->ind[j] = m->producer_id ? STMT_INDICATOR_NONE : STMT_INDICATOR_NULL;
    }
    memset(bind, 0, sizeof(bind));
    bind[0].buffer_type = MYSQL_TYPE_LONGLONG;
    bind[0].buffer = b->time;
    bind[1].buffer_type = MYSQL_TYPE_BLOB;
    bind[1].buffer = (void *)b->content; /* column-wise: an array of pointers */
    bind[1].length = b->len;
    for (int i = 2; i < 4; i++) {
        bind[i].buffer_type = MYSQL_TYPE_LONGLONG;
        bind[i].buffer = i == 2 ? b->pid : b->seq;
        bind[i].is_unsigned = 1;
        bind[i].u.indicator = b->ind;
    }
    int r = MY_TOPIC_SQL(c->q, sql,
                         "INSERT INTO `t_%s` (create_time, content, state, producer_id, seq) "
                         "VALUES (?, ?, 1, ?, ?)",
                         c->t->tbl);
    if (r == 0)
        r = cq__mysql_stc_get(c->q, sql, &st);
    if (r == 0 && mysql_stmt_attr_set(st, STMT_ATTR_ARRAY_SIZE, &rows) != 0)
        r = cq__mysql_st_fail(c->q, st, "array size");
    if (r == 0 && mysql_stmt_bind_param(st, bind) != 0)
        r = cq__mysql_st_fail(c->q, st, "bind");
    if (r == 0) {
        c->q->base.sql_count++;
        if (mysql_stmt_execute(st) != 0)
            r = cq__mysql_st_fail(c->q, st, "insert");
    }
    if (r == 0)
        r = insert_result(c, st, k, &first_id);
    cq__mysql_stc_done(st);
    return r < 0 ? r : append_ids(c, first_id, idx, k);
}

/* The same with one multi-row INSERT, for servers without array binding (MySQL). */
static int insert_rows(append_ctx_t *c, const size_t *idx, size_t k)
{
    char head[MY_SQL_MAX];
    my_pbind_t p;
    MYSQL_STMT *st = NULL;
    uint64_t first_id = 0;
    int r = MY_TOPIC_SQL(
        c->q, head, "INSERT INTO `t_%s` (create_time, content, state, producer_id, seq) VALUES ",
        c->t->tbl);
    if (r < 0)
        return r;
    char *sql = sql_repeat(c->q, head, "(?, ?, 1, ?, ?), ", k, strlen(", "));
    if (!sql)
        return -ENOMEM;
    r = cq__mysql_p_init_heap(c->q, &p, 4 * k);
    for (size_t j = 0; r == 0 && j < k; j++) {
        const cq_store_msg_t *m = &c->msgs[idx[j]];
        cq__mysql_p_i64(&p, m->create_ms ? m->create_ms : c->now_ms);
        cq__mysql_p_bytes(&p, MYSQL_TYPE_BLOB, m->content, m->len);
        if (m->producer_id) {
            cq__mysql_p_u64(&p, m->producer_id);
            cq__mysql_p_u64(&p, m->seq);
        } else {
            cq__mysql_p_null(&p);
            cq__mysql_p_null(&p);
        }
    }
    if (r == 0)
        r = cq__mysql_st_run(c->q, sql, &p, &st);
    if (r == 0)
        r = insert_result(c, st, k, &first_id);
    if (st)
        mysql_stmt_close(st);
    cq__mysql_p_done(&p);
    cq_free(sql);
    return r < 0 ? r : append_ids(c, first_id, idx, k);
}

/* Inserts the new messages in batch order, in statements of at most CHUNK_ROWS rows and about
 * CHUNK_BYTES of content. */
static int append_insert(append_ctx_t *c)
{
    for (size_t i = 0; i < c->n; i++) {
        if (!c->offs[i] && c->first[i] == i)
            c->newv[c->nnew++] = i;
    }
    int r = 0;
    for (size_t pos = 0, k; r == 0 && pos < c->nnew; pos += k) {
        size_t bytes = c->msgs[c->newv[pos]].len;
        for (k = 1; pos + k < c->nnew && k < CHUNK_ROWS; k++) {
            bytes += c->msgs[c->newv[pos + k]].len;
            if (bytes > CHUNK_BYTES)
                break;
        }
        r = c->cols ? insert_bulk(c, &c->newv[pos], k) : insert_rows(c, &c->newv[pos], k);
    }
    return r;
}

static int append_rows(append_ctx_t *c)
{
    append_keys(c);
    int r = seq_check_repeats(c);
    if (r == 0)
        r = append_lookup(c);
    if (r == 0)
        r = seq_check_stored(c);
    if (r == 0)
        r = seq_check_order(c);
    if (r == 0)
        r = append_insert(c);
    if (r < 0)
        return r;
    for (size_t i = 0; i < c->n; i++)
        c->offs[i] = c->offs[c->first[i]];
    if (c->hw == c->t->high_water)
        return 0;
    my_pbind_t p;
    MYSQL_STMT *st = NULL;
    cq__mysql_p_init(&p);
    cq__mysql_p_u64(&p, c->hw);
    cq__mysql_p_str(&p, c->t->name);
    r = cq__mysql_stc_run(c->q, "UPDATE topics SET high_water = ? WHERE name = ?", &p, &st);
    cq__mysql_stc_done(st);
    return r;
}

/* After a lost connection at COMMIT: is the last new row of the batch stored, as sent, and did
 * the topic's high water (updated in the same transaction) reach it? Runs on a new connection. */
static int append_verify(append_ctx_t *c, bool *ret_committed)
{
    char sql[MY_SQL_MAX];
    size_t i = c->newv[c->nnew - 1];
    const cq_store_msg_t *m = &c->msgs[i];
    my_topic_t now;
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res[4];
    int64_t ctime = 0;
    uint64_t pid = 0, seq = 0, len = 0;
    my_bool pid_null = 0, seq_null = 0;
    memset(res, 0, sizeof(res));
    res[0].buffer_type = MYSQL_TYPE_LONGLONG;
    res[0].buffer = &ctime;
    cq__mysql_r_u64(&res[1], &pid, &pid_null);
    cq__mysql_r_u64(&res[2], &seq, &seq_null);
    cq__mysql_r_u64(&res[3], &len, NULL);
    int r = cq__mysql_topic_resolve(c->q, c->t->name, false, &now);
    if (r < 0 || now.high_water < c->offs[i])
        return r; /* not committed (or cannot tell: r < 0) */
    r = MY_TOPIC_SQL(
        c->q, sql, "SELECT create_time, producer_id, seq, LENGTH(content) FROM `t_%s` WHERE id = ?",
        c->t->tbl);
    my_pbind_t p;
    cq__mysql_p_init(&p);
    cq__mysql_p_u64(&p, c->offs[i]);
    if (r == 0)
        r = cq__mysql_st_run(c->q, sql, &p, &st);
    if (r == 0)
        r = cq__mysql_st_fetch(c->q, st, res);
    if (st)
        mysql_stmt_close(st);
    if (r == 1)
        *ret_committed =
            ctime == (m->create_ms ? m->create_ms : c->now_ms) && len == m->len &&
            (m->producer_id ? !pid_null && pid == m->producer_id && !seq_null && seq == m->seq
                            : pid_null);
    return r < 0 ? r : 0;
}

/* The connection broke at COMMIT (c's rows were sent): the transaction may or may not have
 * committed. Decided on a new connection by append_verify(); when the server cannot be reached
 * the batch fails as unknown, and a retry with the same producer_id and seq finds the rows if
 * they committed (the idempotence key), so nothing is acknowledged twice or lost. */
static int append_resolve(append_ctx_t *c)
{
    my_store_t *q = c->q;
    char lost[CQ_STORE_ERRMSG_MAX];
    snprintf(lost, sizeof(lost), "%s", q->base.errmsg);
    if (c->nnew == 0) { /* nothing was written: every offset is an earlier commit's */
        q->base.errmsg[0] = '\0';
        return 0;
    }
    bool committed = false;
    int r = cq__mysql_connect(q);
    if (r == 0)
        r = cq__mysql_tx_end(q, append_verify(c, &committed));
    if (r < 0) {
        cq__mysql_disconnect(
            q); /* the call must not be run again (RUN): the outcome is still unknown */
        /* what the caller then does (retry with the same keys) is the server's to say, once */
        return cq__store_fail(&q->base, CQ_ESTORE, "%.180s; COMMIT outcome unknown (cannot check)",
                              lost);
    }
    if (!committed)
        return cq__store_fail(&q->base, CQ_ESTORE, "%.180s; the transaction did not commit", lost);
    q->base.errmsg[0] = '\0';
    return 0;
}

/* Commits the batch; a lost connection is resolved by append_resolve(). Tests inject a lost
 * connection before or after the COMMIT (cq__store_fault). */
static int append_commit(append_ctx_t *c)
{
    my_store_t *q = c->q;
    unsigned fault = q->base.fault;
    int r = 0;
    q->base.fault &= ~(CQ__STORE_FAULT_LOST_BEFORE_COMMIT | CQ__STORE_FAULT_LOST_AFTER_COMMIT);
    if (!(fault & CQ__STORE_FAULT_LOST_BEFORE_COMMIT))
        r = cq__mysql_tx_commit(q);
    if (r == 0 &&
        (fault & (CQ__STORE_FAULT_LOST_BEFORE_COMMIT | CQ__STORE_FAULT_LOST_AFTER_COMMIT))) {
        r = cq__store_fail(&q->base, CQ_ESTORE, "mysql commit: connection lost (injected)");
        q->lost = true;
    }
    if (r < 0 && q->lost)
        return append_resolve(c);
    if (r < 0)
        cq__mysql_tx_rollback(q);
    return r;
}

int cq__mysql_append_batch(cq_store_t *s, const char *topic, const cq_store_msg_t *msgs, size_t n,
                           uint64_t *ret_offsets)
{
    my_store_t *q = my_store(s);
    my_topic_t t;
    append_ctx_t c = {.q = q, .t = &t, .msgs = msgs, .n = n, .now_ms = cq__store_now_ms()};
    c.offs = cq_calloc(n, sizeof(*c.offs));
    c.first = cq_calloc(n, sizeof(*c.first));
    c.keys = cq_calloc(n, sizeof(*c.keys));
    c.newv = cq_calloc(n, sizeof(*c.newv));
    c.cols = q->bulk ? cq_malloc(sizeof(*c.cols)) : NULL;
    int r = 0;
    if (!c.offs || !c.first || !c.keys || !c.newv || (q->bulk && !c.cols)) {
        r = cq__store_fail(s, -ENOMEM, "out of memory for a batch of %zu", n);
        goto out;
    }
    r = cq__mysql_topic_resolve(q, topic, true, &t);
    if (r == 0)
        r = append_check(q, msgs, n);
    if (r == 0) {
        c.hw = t.high_water;
        s->append_base = t.high_water;
        r = append_rows(&c);
    }
    if (r == 0)
        r = append_commit(&c);
    else
        cq__mysql_tx_rollback(q);
    if (r == 0)
        memcpy(ret_offsets, c.offs, n * sizeof(*c.offs));
out:
    cq_free(c.offs);
    cq_free(c.first);
    cq_free(c.keys);
    cq_free(c.newv);
    cq_free(c.cols);
    return r;
}
