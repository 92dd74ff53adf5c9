/* fuzz_mqsrv - the durable-topic engine (src/mqsrv) driven by a script: bytes fed to two seed
 * connections and one HTTP connection, store completions in any order and outcome, drains,
 * clock ticks, retention, online flags, closes from either side, stalled readers and store
 * refusals. Everything is deterministic from the input: a fake store port queues the requests
 * and the script completes them; a fake edge writes (or, stalled, holds) what the engine queues.
 *
 * Input: byte 0 picks the engine (bit 0: a permissions table, bit 1: send queue limits of 1 KiB
 * soft and 4 KiB hard), then ops until the input ends. An op byte is (action << 4) | connection
 * (0, 1: seed, 2: HTTP):
 *   0 feed n+1 bytes (n: next byte)   1 feed n bytes (n: next 2 bytes, big-endian)
 *   2 complete the oldest request     3 complete every request (outcome: next byte each)
 *   4 drain the completions            5 tick the clock by next byte x 100 ms
 *   6 retention                        7 set a topic online or offline (next byte)
 *   8 the edge closes the connection   9 stall / unstall its reader
 *   a the port refuses the next submits with next byte % 4: none, busy, limit, closed
 * After each op the engine's pending connections are flushed, as once per loop iteration.
 * Invariants: what a seed connection receives is a stream of whole frames that decode; an HTTP
 * answer starts with a status line; at the end, with every connection closed and every
 * request completed, no request, connection or buffer is left (ASan checks the memory).
 */
#include "fuzz_common.h"

#include "cq_alloc.h"
#include "cq_buf.h"
#include "cq_err.h"
#include "cq_log.h"
#include "cq_mq.h"
#include "cq_mqhttp.h"
#include "cq_mqperm.h"
#include "cq_mqport.h"
#include "cq_sbuf.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#define NCONN       3
#define MAX_PENDING 2048

typedef struct fconn {
    cq_mqsrv_conn_t *c;  /* conns 0 and 1 */
    cq_mqhttp_conn_t *h; /* conn 2 */
    cq_sbuf_t out;       /* received and not yet checked */
    bool stalled, closed, http_seen;
} fconn_t;

typedef struct fuzz {
    cq_mqsrv_t *s;
    fconn_t conn[NCONN];
    cq_writer_req_t *pending[MAX_PENDING]; /* a ring, oldest at head */
    size_t head, npending;
    int refuse;           /* what submit answers (0: takes the request) */
    uint64_t next_offset; /* offsets handed out by produces */
    uint64_t now_ms;      /* monotonic, for ticks */
} fuzz_t;

static fuzz_t fz;

/* ---- the fake store port ------------------------------------------------------------------ */

static int port_submit(void *ud, cq_writer_req_t *req)
{
    (void)ud;
    if (fz.refuse)
        return fz.refuse;
    if (fz.npending == MAX_PENDING)
        return CQ_EBUSY;
    fz.pending[(fz.head + fz.npending++) % MAX_PENDING] = req;
    return 0;
}

static int port_control(void *ud, int op, void *arg)
{
    (void)ud;
    if (op != CQ_MQPORT_WRITER_STATS)
        return -ENOTSUP;
    memset(arg, 0, sizeof(cq_writer_stats_t));
    return 0;
}

static const cq_mqport_ops_t port_ops = {port_submit, port_control};

/* Fills req's outputs as the store thread would, the outcome chosen by o. */
static void fill(cq_writer_req_t *req, uint8_t o)
{
    static const int errs[8] = {0, CQ_ESTORE, -ENOENT, CQ_EEXIST, CQ_ENOTOPIC, -ENOMEM, 0, 0};
    req->err = errs[o & 7];
    if (req->err) {
        snprintf(req->errmsg, sizeof(req->errmsg), "fuzz %u", o);
        return;
    }
    switch (req->op) {
    case CQ_WRITER_PRODUCE:
        for (size_t i = 0; i < req->n_msgs; i++) /* bit 3: an idempotent retry's old offsets */
            req->offsets[i] = o & 8 ? 1 + i : (fz.next_offset += 1 + (o >> 4));
        break;
    case CQ_WRITER_READ: {
        size_t n = (size_t)(o >> 4) < req->max ? (size_t)(o >> 4) : req->max;
        req->recs = cq_calloc(n ? n : 1, sizeof(*req->recs));
        for (size_t i = 0; req->recs && i < n; i++) { /* up to 208 bytes: queues fill fast */
            size_t len = o & 8 && i == 0 ? 1 : 16 + 64 * (i % 4);
            char *c = cq_malloc(len + 1);
            if (!c)
                break;
            memset(c, o & 8 && i == 0 ? 0xff : 'a' + (int)(i % 26), len);
            c[len] = '\0';
            req->recs[i] = (cq_store_rec_t){
                .offset = req->from_offset + i + 1, .create_ms = 5, .content = c, .len = len};
            req->n_recs = i + 1;
        }
        break;
    }
    case CQ_WRITER_GET_OFFSET:
        req->offset = o;
        break;
    case CQ_WRITER_PURGE:
        req->purged = o & 8 ? req->max : 0;
        break;
    default:
        break;
    }
}

static void complete_oldest(uint8_t o)
{
    if (!fz.npending)
        return;
    cq_writer_req_t *req = fz.pending[fz.head];
    fz.head = (fz.head + 1) % MAX_PENDING;
    fz.npending--;
    fill(req, o);
    cq_mqsrv_complete(NULL, req);
}

/* ---- the fake edge ------------------------------------------------------------------------ */

static cq_sendq_t *sendq_of(fconn_t *f)
{
    return f->c ? cq_mqsrv_conn_sendq(f->c) : cq_mqhttp_conn_sendq(f->h);
}

/* Every frame a seed connection got decodes; an HTTP stream starts with a status line. */
static void check_out(fconn_t *f)
{
    if (f->h) {
        if (!f->http_seen && f->out.len >= 9) {
            FUZZ_CHECK(memcmp(f->out.data, "HTTP/1.1 ", 9) == 0);
            f->http_seen = true;
        }
        cq_sbuf_consume(&f->out, f->out.len > 9 ? f->out.len - 9 : 0);
        return;
    }
    cq_mq_frame_t fr;
    ssize_t r;
    while ((r = cq_mq_parse(f->out.data, f->out.len, 0xffffffffu, &fr)) > 0) {
        cq_mq_msg_t *m = NULL;
        char err[256];
        int rc = cq_mq_decode(&fr, NULL, &m, err, sizeof(err));
        if (rc != 0)
            fprintf(stderr, "undecodable answer %.*s: %s\n", (int)fr.body_len,
                    (const char *)fr.body, err);
        FUZZ_CHECK(rc == 0 && !cq_mq_is_request(m->type));
        cq_mq_msg_free(m);
        cq_sbuf_consume(&f->out, (size_t)r);
    }
    FUZZ_CHECK(r == 0);
}

static void edge_flush(void *tctx)
{
    fconn_t *f = tctx;
    cq_sendq_t *q = sendq_of(f);
    const struct iovec *iov;
    int n;
    while (!f->stalled && cq_sendq_prepare(q, &iov, &n) == 0 && n > 0) {
        size_t len = 0;
        for (int i = 0; i < n; i++) {
            FUZZ_CHECK(cq_sbuf_append(&f->out, iov[i].iov_base, iov[i].iov_len) == 0);
            len += iov[i].iov_len;
        }
        cq_sendq_written(q, len);
    }
    check_out(f);
}

static void edge_close(void *tctx)
{
    fconn_t *f = tctx;
    edge_flush(f); /* what is queued is written, then the socket closes */
    f->closed = true;
}

static void edge_abort(void *tctx, int reason, const char *why)
{
    fconn_t *f = tctx;
    FUZZ_CHECK(reason == CQ_ESLOW && why && *why);
    f->closed = true;
}

static int edge_peer(void *tctx, char *buf, size_t len)
{
    (void)tctx;
    snprintf(buf, len, "fuzz");
    return 0;
}

static const cq_mqsrv_conn_ops_t edge_ops = {{"fuzz", edge_flush, edge_close, edge_peer},
                                             edge_abort};

static void conn_open(int i)
{
    fconn_t *f = &fz.conn[i];
    memset(f, 0, sizeof(*f));
    cq_sbuf_init(&f->out);
    if (i < 2)
        FUZZ_CHECK((f->c = cq_mqsrv_conn_new(fz.s, &edge_ops, f)) != NULL);
    else
        FUZZ_CHECK((f->h = cq_mqhttp_conn_new(fz.s, &edge_ops, f)) != NULL);
}

/* The socket is gone: the engine forgets the connection's ops. */
static void conn_gone(int i)
{
    fconn_t *f = &fz.conn[i];
    cq_mqsrv_conn_close(f->c);
    cq_mqhttp_conn_close(f->h);
    cq_sbuf_done(&f->out);
    f->c = NULL;
    f->h = NULL;
}

static void feed(int i, const uint8_t *p, size_t n)
{
    fconn_t *f = &fz.conn[i];
    if (f->c)
        cq_mqsrv_conn_input(f->c, p, n);
    else
        cq_mqhttp_conn_input(f->h, p, n);
}

/* ---- the script --------------------------------------------------------------------------- */

static const char perms_json[] =
    "{\"1\": {\"token\": \"a\", \"admin\": true, \"produce\": [\"*\"], \"consume\": [\"*\"]},"
    " \"2\": {\"token\": \"b\", \"consume\": [\"orders\", \"Paused\"]},"
    " \"3\": {\"token\": \"c\", \"produce\": [\"orders\"]}}";

static cq_mqperm_t *start(uint8_t flags)
{
    cq_mqperm_t *perms = NULL;
    char err[128];
    if (flags & 1)
        FUZZ_CHECK(cq_mqperm_load(perms_json, strlen(perms_json), &perms, err, sizeof(err)) == 0);
    cq_store_topic_t t[3] = {{.name = "orders", .online = true, .retention_days = 30},
                             {.name = "Paused", .online = false, .retention_days = 1},
                             {.name = "keep", .online = true, .retention_days = 0}};
    uint64_t hw[3] = {5, 0, 0};
    cq_mqsrv_opts_t o = {.perms = perms,
                         .topics = t,
                         .high_water = hw,
                         .ntopics = 3,
                         .port = {&port_ops, NULL},
                         .sendq_soft_limit = flags & 2 ? 1024 : 0,
                         .sendq_soft_seconds = 1,
                         .sendq_hard_limit = flags & 2 ? 4096 : 0};
    memset(&fz, 0, sizeof(fz));
    fz.next_offset = 5;
    fz.s = cq_mqsrv_new(&o);
    FUZZ_CHECK(fz.s != NULL);
    cq_mqsrv_set_now(fz.s, 1700000000000);
    for (int i = 0; i < NCONN; i++)
        conn_open(i);
    return perms;
}

/* Runs one op at p[0..n); returns the bytes it used. */
static size_t op(const uint8_t *p, size_t n)
{
    static const char *const topics[] = {"orders", "PAUSED", "keep", "nosuch"};
    static const int refusals[4] = {0, CQ_EBUSY, CQ_ELIMIT, CQ_ECLOSED};
    int i = (p[0] & 3) % NCONN;
    uint8_t arg = n > 1 ? p[1] : 0;
    size_t len;
    switch (p[0] >> 4) {
    case 0:
        if (n < 2)
            return n;
        len = (size_t)arg + 1 < n - 2 ? (size_t)arg + 1 : n - 2;
        feed(i, p + 2, len);
        return 2 + len;
    case 1:
        if (n < 3)
            return n;
        len = (size_t)p[1] << 8 | p[2];
        len = len < n - 3 ? len : n - 3;
        feed(i, p + 3, len);
        return 3 + len;
    case 2:
        complete_oldest(arg);
        return 2;
    case 3:
        while (fz.npending)
            complete_oldest(arg++);
        return 2;
    case 4:
        cq_mqsrv_drain(fz.s);
        return 1;
    case 5:
        fz.now_ms += (uint64_t)arg * 100;
        cq_mqsrv_tick(fz.s, fz.now_ms);
        return 2;
    case 6:
        cq_mqsrv_retention(fz.s, 1700000000000 + (int64_t)arg * 86400000);
        return 2;
    case 7:
        cq_mqsrv_topic_set_online(fz.s, topics[arg & 3], arg & 4);
        return 2;
    case 8:
        fz.conn[i].closed = true;
        return 1;
    case 9:
        fz.conn[i].stalled = !fz.conn[i].stalled;
        return 1;
    case 10:
        fz.refuse = refusals[arg & 3];
        return 2;
    default:
        return 1;
    }
}

/* The engine's warnings are formatted (their format strings run) but not written out. */
static void log_sink(void *ud, cq_log_level_t lvl, const char *topic, const char *line)
{
    (void)ud;
    (void)lvl;
    (void)topic;
    (void)line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    cq_log_set_sink(log_sink, NULL);
    long bufs = cq_buf_live();
    cq_mqperm_t *perms = start(data[0]);
    for (size_t at = 1; at < size;) {
        at += op(data + at, size - at);
        cq_mqsrv_flush(fz.s); /* once per loop iteration */
        for (int i = 0; i < NCONN; i++) {
            if (fz.conn[i].closed) { /* the edge's close callback, then a new client */
                conn_gone(i);
                conn_open(i);
            }
        }
    }
    for (int i = 0; i < NCONN; i++)
        conn_gone(i);
    fz.refuse = CQ_ECLOSED; /* as a store that shut down: purges resubmitted at the end fail */
    for (uint8_t o = 0; fz.npending; o++)
        complete_oldest(o);
    fz.s = cq_mqsrv_free(fz.s); /* runs the inbox */
    FUZZ_CHECK(fz.npending == 0);
    FUZZ_CHECK(cq_buf_live() == bufs);
    cq_mqperm_free(perms);
    return 0;
}
