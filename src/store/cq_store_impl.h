/* cq_store_impl.h - what a store backend shares with cq_store.c. Not for callers.
 *
 * A backend's handle embeds struct cq_store as its first member, so cq_store_t * and the
 * backend's handle convert both ways.
 */
#ifndef CQ_STORE_IMPL_H
#define CQ_STORE_IMPL_H

#include "cq_store.h"

#define CQ_STORE_ERRMSG_MAX 256

struct cq_store {
    const cq_store_ops_t *ops; /* set by cq_store_open() */
    size_t max_content;        /* resolved limit (never 0) */
    uint64_t sql_count;        /* statements prepared or run; see cq__store_sql_count() */
    unsigned fault;            /* tests: CQ__STORE_FAULT_* bits (cq__store_fault()) */
    size_t append_bad;         /* cq_store_append_bad() */
    uint64_t append_base;      /* cq_store_append_base() */
    char errmsg[CQ_STORE_ERRMSG_MAX];
};

/* One forward-only migration: its version and its SQL (embedded from migrations/<backend>/). */
typedef struct cq__migration {
    int version;
    const char *sql;
} cq__migration_t;

/* Applies, in order, each of the n migrations newer than version (the database's) with
 * apply(ud, m), stopping at the first error; a database newer than the last migration is an
 * error. The caller holds the backend's transaction or lock. Returns 0 or a negative error. */
int cq__store_migrate_from(cq_store_t *s, const cq__migration_t *ms, size_t n, int version,
                           int (*apply)(void *ud, const cq__migration_t *m), void *ud);

/* Wall-clock milliseconds, for create/update times stored in rows. */
int64_t cq__store_now_ms(void);

/* Records the text of an error on s and returns code. */
int cq__store_fail(cq_store_t *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
