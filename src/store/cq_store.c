/* cq_store.c - the backend-neutral half of the store: validation, error text, dispatch. */
#include "cq_store_impl.h"

#include "cq_clock.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

/* ---- validation ---------------------------------------------------------------------------- */

static bool name_char_ok(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

bool cq_store_topic_name_ok(const char *name)
{
    if (!name)
        return false;
    size_t i = 0;
    for (; name[i]; i++) {
        if (i >= CQ_STORE_TOPIC_MAX || !name_char_ok(name[i]))
            return false;
    }
    return i > 0;
}

bool cq_store_consumer_id_ok(const char *id)
{
    if (!id)
        return false;
    size_t i = 0;
    for (; id[i]; i++) {
        if (i >= CQ_STORE_CONSUMER_MAX || id[i] < 0x20 || id[i] > 0x7e)
            return false;
    }
    return i > 0;
}

/* ---- handle -------------------------------------------------------------------------------- */

int cq__store_fail(cq_store_t *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->errmsg, sizeof(s->errmsg), fmt, ap);
    va_end(ap);
    return code;
}

int cq_store_open(const cq_store_ops_t *ops, const cq_store_opts_t *opts, cq_store_t **ret_store,
                  char *err, size_t errlen)
{
    if (!ops || !opts || !ret_store)
        return cq_err_fmt(err, errlen, -EINVAL, "store: missing argument");
    cq_store_t *s = NULL;
    int r = ops->open(opts, &s, err, errlen);
    if (r < 0)
        return r;
    s->ops = ops;
    s->max_content = opts->max_content ? opts->max_content : CQ_STORE_MAX_CONTENT_DFL;
    *ret_store = s;
    return 0;
}

void cq_store_close(cq_store_t *s)
{
    if (s)
        s->ops->close(s);
}

const char *cq_store_errmsg(const cq_store_t *s)
{
    return s ? s->errmsg : "";
}

uint64_t cq__store_sql_count(const cq_store_t *s)
{
    return s->sql_count;
}

void cq__store_fault(cq_store_t *s, unsigned faults)
{
    s->fault = faults;
}

/* Common entry check: resets the error text and validates the topic name. */
static int enter(cq_store_t *s, const char *topic)
{
    s->errmsg[0] = '\0';
    if (!cq_store_topic_name_ok(topic))
        return cq__store_fail(s, CQ_EBADTOPIC, "bad topic name");
    return 0;
}

/* ---- topics -------------------------------------------------------------------------------- */

int cq_store_topic_create(cq_store_t *s, const char *topic, int retention_days, int64_t now_ms)
{
    int r = enter(s, topic);
    if (r < 0)
        return r;
    if (retention_days < 0 || retention_days > CQ_STORE_RETENTION_MAX)
        return cq__store_fail(s, -EINVAL, "retention_days %d out of 0..%d", retention_days,
                              CQ_STORE_RETENTION_MAX);
    return s->ops->topic_create(s, topic, retention_days, now_ms);
}

int cq_store_topic_list(cq_store_t *s, cq_store_topic_t **ret_topics, size_t *ret_n)
{
    s->errmsg[0] = '\0';
    return s->ops->topic_list(s, ret_topics, ret_n);
}

int cq_store_topic_set_online(cq_store_t *s, const char *topic, bool online)
{
    int r = enter(s, topic);
    return r < 0 ? r : s->ops->topic_set_online(s, topic, online);
}

/* ---- messages ------------------------------------------------------------------------------ */

int cq_store_append_batch(cq_store_t *s, const char *topic, const cq_store_msg_t *msgs, size_t n,
                          uint64_t *ret_offsets)
{
    int r = enter(s, topic);
    if (r < 0)
        return r;
    s->append_base = CQ_STORE_BASE_NONE; /* until the backend locked the topic */
    if (!msgs || n == 0 || !ret_offsets)
        return cq__store_fail(s, -EINVAL, "append: empty batch");
    unsigned fault = s->fault & (CQ__STORE_FAULT_FAIL_APPEND | CQ__STORE_FAULT_ANSWER_LOST);
    s->fault &= ~fault;
    if (fault & CQ__STORE_FAULT_FAIL_APPEND)
        return cq__store_fail(s, CQ_ESTORE, "append failed (injected)");
    r = s->ops->append_batch(s, topic, msgs, n, ret_offsets);
    if (r == 0 && (fault & CQ__STORE_FAULT_ANSWER_LOST))
        r = cq__store_fail(s, CQ_ESTORE,
                           "connection lost at COMMIT (injected); COMMIT outcome unknown "
                           "(cannot check)");
    return r;
}

size_t cq_store_append_bad(const cq_store_t *s)
{
    return s->append_bad;
}

uint64_t cq_store_append_base(const cq_store_t *s)
{
    return s->append_base;
}

int cq_store_read_bounded(cq_store_t *s, const char *topic, uint64_t from_offset_exclusive,
                          size_t max, size_t max_bytes, cq_store_rec_t *ret_recs, size_t *ret_n)
{
    int r = enter(s, topic);
    if (r < 0)
        return r;
    if (max == 0 || !ret_recs || !ret_n)
        return cq__store_fail(s, -EINVAL, "read: max must be >= 1");
    return s->ops->read(s, topic, from_offset_exclusive, max, max_bytes, ret_recs, ret_n);
}

int cq_store_read(cq_store_t *s, const char *topic, uint64_t from_offset_exclusive, size_t max,
                  cq_store_rec_t *ret_recs, size_t *ret_n)
{
    return cq_store_read_bounded(s, topic, from_offset_exclusive, max, 0, ret_recs, ret_n);
}

void cq_store_recs_done(cq_store_rec_t *recs, size_t n)
{
    if (!recs)
        return;
    for (size_t i = 0; i < n; i++) {
        cq_free(recs[i].content);
        recs[i].content = NULL;
    }
}

int cq_store_invalidate(cq_store_t *s, const char *topic, uint64_t offset)
{
    int r = enter(s, topic);
    return r < 0 ? r : s->ops->invalidate(s, topic, offset);
}

int cq_store_read_one(cq_store_t *s, const char *topic, uint64_t offset, cq_store_rec_t *ret_rec,
                      int *ret_state)
{
    int r = enter(s, topic);
    return r < 0 ? r : s->ops->read_one(s, topic, offset, ret_rec, ret_state);
}

int cq_store_find_key(cq_store_t *s, const char *topic, uint64_t producer_id, uint64_t seq,
                      uint64_t *ret_offset)
{
    int r = enter(s, topic);
    if (r == 0 && producer_id == 0)
        r = cq__store_fail(s, -EINVAL, "find_key: producer_id must be >= 1");
    return r < 0 ? r : s->ops->find_key(s, topic, producer_id, seq, ret_offset);
}

int cq_store_purge(cq_store_t *s, const char *topic, int64_t older_than_unix_ms, size_t max_rows,
                   size_t *ret_purged)
{
    int r = enter(s, topic);
    if (r < 0)
        return r;
    if (max_rows == 0 || !ret_purged)
        return cq__store_fail(s, -EINVAL, "purge: max_rows must be >= 1");
    return s->ops->purge(s, topic, older_than_unix_ms, max_rows, ret_purged);
}

int cq_store_count(cq_store_t *s, const char *topic, uint64_t *ret_n)
{
    return cq_store_count_range(s, topic, 0, INT64_MAX, ret_n);
}

int cq_store_count_range(cq_store_t *s, const char *topic, uint64_t after, uint64_t upto,
                         uint64_t *ret_n)
{
    int r = enter(s, topic);
    if (r == 0 && !ret_n)
        r = cq__store_fail(s, -EINVAL, "count: no output");
    if (upto > INT64_MAX) /* SQLite's integers are signed */
        upto = INT64_MAX;
    return r < 0 ? r : s->ops->count(s, topic, after, upto, ret_n);
}

int cq_store_created_ms(cq_store_t *s, uint64_t *ret_ms)
{
    s->errmsg[0] = '\0';
    return s->ops->created_ms ? s->ops->created_ms(s, ret_ms) : -ENOTSUP;
}

int cq_store_high_water(cq_store_t *s, const char *topic, uint64_t *ret_offset)
{
    int r = enter(s, topic);
    return r < 0 ? r : s->ops->high_water(s, topic, ret_offset);
}

/* ---- consumers ----------------------------------------------------------------------------- */

static int enter_consumer(cq_store_t *s, const char *topic, const char *consumer_id)
{
    int r = enter(s, topic);
    if (r < 0)
        return r;
    if (!cq_store_consumer_id_ok(consumer_id))
        return cq__store_fail(s, -EINVAL, "bad consumer id (1..%d printable ASCII bytes)",
                              CQ_STORE_CONSUMER_MAX);
    return 0;
}

int cq_store_commit_offset(cq_store_t *s, const char *topic, const char *consumer_id,
                           uint64_t offset, int64_t now_ms)
{
    int r = enter_consumer(s, topic, consumer_id);
    return r < 0 ? r : s->ops->commit_offset(s, topic, consumer_id, offset, now_ms);
}

int cq_store_get_offset(cq_store_t *s, const char *topic, const char *consumer_id,
                        uint64_t *ret_offset)
{
    int r = enter_consumer(s, topic, consumer_id);
    return r < 0 ? r : s->ops->get_offset(s, topic, consumer_id, ret_offset);
}

int64_t cq__store_now_ms(void)
{
    return cq_clock_unix_ns() / 1000000;
}

int cq__store_migrate_from(cq_store_t *s, const cq__migration_t *ms, size_t n, int version,
                           int (*apply)(void *ud, const cq__migration_t *m), void *ud)
{
    int latest = ms[n - 1].version;
    if (version > latest)
        return cq__store_fail(s, CQ_ESTORE,
                              "database schema version %d is newer than this binary's %d", version,
                              latest);
    int r = 0;
    for (size_t i = 0; r == 0 && i < n; i++) {
        if (ms[i].version > version)
            r = apply(ud, &ms[i]);
    }
    return r;
}

/* ---- the store's file system --------------------------------------------------------------- */

int cq_store_disk_metrics(const char *dir, cq_sbuf_t *out)
{
    struct statvfs v;
    if (!dir || statvfs(dir, &v) < 0)
        return 0;
    unsigned long long unit = v.f_frsize ? v.f_frsize : v.f_bsize;
    return cq_sbuf_printf(out,
                          "# HELP chanq_mq_store_avail_bytes Bytes free to chanqd on the file "
                          "system of the store's directory (--store-dir).\n"
                          "# TYPE chanq_mq_store_avail_bytes gauge\n"
                          "chanq_mq_store_avail_bytes %llu\n"
                          "# HELP chanq_mq_store_size_bytes Size of the file system of the "
                          "store's directory (--store-dir).\n"
                          "# TYPE chanq_mq_store_size_bytes gauge\n"
                          "chanq_mq_store_size_bytes %llu\n",
                          unit * (unsigned long long)v.f_bavail,
                          unit * (unsigned long long)v.f_blocks);
}
