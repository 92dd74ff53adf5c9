/* fuzz_mqsrv - the durable-topic engine (src/mqsrv) driven by a script: bytes fed to two seed
 * connections and one HTTP connection, store completions in any order and outcome, drains,
 * clock ticks, retention, online flags, closes from either side, stalled readers and store
 * refusals. Everything is deterministic from the input: a fake store port queues the requests
 * and the script completes them; a fake edge writes (or, stalled, holds) what the engine queues.
 *
 * Input: byte 0 picks the engine (bit 0: a permissions table, bit 1: send queue limits of 1 KiB
 * soft and 4 KiB hard) and the ending (bit 2: see below), then ops until the input ends. An op
 * byte is (action << 4) | connection (0, 1: seed, 2: HTTP):
 *   0 feed n+1 bytes (n: next byte)   1 feed n bytes (n: next 2 bytes, big-endian)
 *   2 complete the oldest request     3 complete every request (outcome: next byte each)
 *   4 drain the completions            5 tick the clock by next byte x 100 ms
 *   6 retention                        7 set a topic online or offline (next byte)
 *   8 the edge closes the connection   9 stall / unstall its reader
 *   a the port refuses the next submits with next byte % 4: none, busy, limit, closed
 *   b the cluster (next byte): bit 0 the fence is open, bit 1 the role handed over is master,
 *     the rest the shard (cq_mqsrv_set_role; applied at the next drain)
 * After each op the engine's pending connections are flushed, as once per loop iteration.
 *
 * The contract checked (cq_mqsrv.h, cq_mqhttp.h, doc/protocol-mq.md), with a ledger per
 * connection that reads what the edge fed before the engine does:
 *   seed    every request frame that decodes gets exactly one answer (request type + 1) echoing
 *           its msg id and askid; pushes (18) are not answers. A frame that does not decode gets
 *           one error answer, shaped as cq_mq_encode_error() shapes it. A bad header or length
 *           gets one error frame (msg id 0, err_code 1 or 2; before a successful connect a
 *           frame over 4 KiB is a bad length) and closes the connection, as does
 *           a refused connect; nothing else closes one (but a slow consumer's abort). Closed,
 *           no further answers are owed.
 *   HTTP    one response per complete request, in order; "Connection: close" exactly when the
 *           request does not keep the connection alive or its framing was bad, and then the
 *           connection closes (nothing else closes it, but a slow consumer's abort).
 *   produce answered only once the fake store completed its request: err_code 0 with exactly
 *           the offsets the store assigned, or the error the store returned, or, for a success
 *           drained behind a closed fence, not_master saying the messages may be stored; a
 *           storage error, a success or that never comes from anywhere else.
 *   edge    once the engine closed or aborted a connection it never calls its ops again, and
 *           once the edge closed it (cq_mqsrv_conn_close) the engine never touches it.
 * Ending: with bit 2 of byte 0 clear, the store completes everything (outcome 0), the readers
 * catch up, and every open connection must have had all its answers; with bit 2 set, the
 * connections go away with requests in flight and the engine frees with completions in its
 * inbox. Either way, at the end no request, connection or buffer is left (ASan checks the
 * memory).
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
#include <stdlib.h>
#include <string.h>

#define NCONN       3
#define MAX_PENDING 2048

/* One answer (seed) or response (HTTP) a connection is owed. */
typedef struct expect {
    uint8_t type; /* seed: the answer's type */
    uint16_t msg_id;
    bool has_askid;
    uint32_t askid;
    bool failed;  /* the request did not decode (or its HTTP framing was bad): err_code != 0 */
    int code;     /* > 0: the answer's err_code must be exactly this (a bad header) */
    bool produce; /* HTTP: a produce, checked against the store's completions */
    bool closes;  /* HTTP: the connection closes after this response */
} expect_t;

/* A produce the fake store completed for a connection, waiting for its answer. */
typedef struct done_rec {
    int code;          /* the wire err_code of the store's outcome */
    size_t n;          /* offsets, when code is 0 */
    uint64_t *offsets; /* malloc'd */
} done_rec_t;

/* The edge's side of one connection, from open to the end of the input (never reused, so a
 * call from the engine after the edge closed it is seen). */
typedef struct fconn {
    cq_mqsrv_conn_t *c;  /* conns 0 and 1 */
    cq_mqhttp_conn_t *h; /* conn 2 */
    cq_sbuf_t out;       /* received and not yet checked */
    cq_sbuf_t in;        /* fed and not yet split into requests by the ledger */
    expect_t *exp;       /* owed, oldest first */
    size_t nexp, exp_cap;
    done_rec_t *rec; /* completed produces not yet answered, oldest first */
    size_t nrec, rec_cap;
    uint64_t fed;       /* bytes fed */
    bool stalled;       /* the peer reads nothing */
    bool closed;        /* the engine called close */
    bool aborted;       /* the engine called abort */
    bool hangup;        /* the script closed the socket */
    bool gone;          /* the edge called cq_*_conn_close: the engine must not call its ops */
    bool will_close;    /* the ledger saw a request after which the engine must close */
    bool halted;        /* ... and reads no further requests */
    bool authed;        /* the ledger saw a connect succeed: the full frame size applies */
    uint64_t skip;      /* HTTP: body bytes of a request refused at its head, still to drop */
    struct fconn *next; /* every connection of the input */
} fconn_t;

typedef struct pend {
    cq_writer_req_t *req;
    fconn_t *owner; /* the connection that asked; NULL for the engine's own requests */
} pend_t;

typedef struct fuzz {
    cq_mqsrv_t *s;
    const cq_mqperm_t *perms;
    fconn_t *conn[NCONN];
    fconn_t *all;                /* every connection opened, freed at the end */
    fconn_t *feeding;            /* the connection whose input the engine is reading */
    bool draining;               /* in cq_mqsrv_drain() */
    pend_t pending[MAX_PENDING]; /* a ring, oldest at head */
    size_t head, npending;
    int refuse;           /* what submit answers (0: takes the request) */
    uint64_t next_offset; /* offsets handed out by produces */
    uint64_t now_ms;      /* monotonic, for ticks */
    bool fence;           /* what may_write answers */
} fuzz_t;

static fuzz_t fz;

/* ---- the ledger --------------------------------------------------------------------------- */

static void *grow(void *p, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return p;
    *cap = *cap ? *cap * 2 : 8;
    p = realloc(p, *cap * size);
    FUZZ_CHECK(p != NULL);
    return p;
}

static void expect_push(fconn_t *f, expect_t e)
{
    f->exp = grow(f->exp, &f->exp_cap, f->nexp, sizeof(*f->exp));
    f->exp[f->nexp++] = e;
}

static void expect_drop(fconn_t *f, size_t i)
{
    memmove(f->exp + i, f->exp + i + 1, (f->nexp - i - 1) * sizeof(*f->exp));
    f->nexp--;
}

/* The store completed a produce for f: its answer must say so. */
static void record(fconn_t *f, const cq_writer_req_t *req)
{
    done_rec_t d = {.code = cq_mq_errcode(req->err)};
    if (d.code == 0) {
        d.n = req->n_msgs;
        d.offsets = malloc((d.n ? d.n : 1) * sizeof(*d.offsets));
        FUZZ_CHECK(d.offsets != NULL);
        memcpy(d.offsets, req->offsets, d.n * sizeof(*d.offsets));
    }
    f->rec = grow(f->rec, &f->rec_cap, f->nrec, sizeof(*f->rec));
    f->rec[f->nrec++] = d;
}

/* A produce was answered with err_code code (and, when 0, offsets[0..n)). A success or a
 * storage error is the store's completion, and consumes the oldest one that says exactly that;
 * any other code may also be a refusal before the store (rights, topic, busy, closed) or the
 * answer to a produce frame that did not decode. */
static void produce_answered(fconn_t *f, int code, const int64_t *offsets, size_t n, bool fenced)
{
    size_t i;
    if (fenced) /* a commit the fence closed on: the oldest success not yet answered */
        FUZZ_CHECK(code == CQ_MQ_ERR_NOT_MASTER);
    for (i = 0; i < f->nrec; i++) {
        const done_rec_t *d = &f->rec[i];
        if (fenced && d->code == 0)
            break;
        bool same = !fenced && d->code == code && (code != 0 || d->n == n);
        for (size_t k = 0; same && code == 0 && k < n; k++)
            same = d->offsets[k] == (uint64_t)offsets[k];
        if (same)
            break;
    }
    if (i == f->nrec) {
        if (code == CQ_MQ_OK || code == CQ_MQ_ERR_STORAGE || fenced)
            fprintf(stderr,
                    "produce answered err_code %d (%zu offsets) without a store "
                    "completion that says so\n",
                    code, n);
        FUZZ_CHECK(code != CQ_MQ_OK && code != CQ_MQ_ERR_STORAGE && !fenced);
        return;
    }
    free(f->rec[i].offsets);
    memmove(f->rec + i, f->rec + i + 1, (f->nrec - i - 1) * sizeof(*f->rec));
    f->nrec--;
}

/* What the edge fed f, seen by the ledger first: one owed answer per frame. */
static void expect_frame(fconn_t *f, const cq_mq_frame_t *fr)
{
    cq_mq_msg_t *m = NULL;
    if (cq_mq_decode(fr, NULL, &m, NULL, 0) == 0 && cq_mq_is_request(m->type)) {
        expect_push(f, (expect_t){.type = (uint8_t)(m->type + 1),
                                  .msg_id = m->msg_id,
                                  .has_askid = m->has & CQ_MQ_F_ASKID,
                                  .askid = m->askid});
        if (m->type == CQ_MQ_REQ_CONNECT &&
            (m->client_type == CQ_MQ_PRODUCER || m->client_type == CQ_MQ_CONSUMER)) {
            if (cq_mqperm_auth(fz.perms, m->module_id, m->token))
                f->authed = true;
            else
                f->will_close = f->halted = true; /* answered, then closed */
        }
        cq_mq_msg_free(m);
        return;
    }
    cq_mq_msg_free(m);
    /* the shape cq_mq_encode_error() gives the answer: type, msg id, askid */
    uint8_t *b;
    size_t n;
    cq_mq_frame_t af;
    FUZZ_CHECK(cq_mq_encode_error(fr, CQ_EJSON, NULL, &b, &n) == 0);
    FUZZ_CHECK(cq_mq_parse(b, n, 0xffffffffu, &af) > 0);
    FUZZ_CHECK(cq_mq_decode(&af, NULL, &m, NULL, 0) == 0);
    expect_push(f, (expect_t){.type = m->type,
                              .msg_id = m->msg_id,
                              .has_askid = m->has & CQ_MQ_F_ASKID,
                              .askid = m->askid,
                              .failed = true});
    cq_mq_msg_free(m);
    cq_free(b);
}

static void expect_frames(fconn_t *f, const uint8_t *p, size_t n)
{
    cq_mq_frame_t fr;
    ssize_t r;
    size_t off = 0;
    FUZZ_CHECK(cq_sbuf_append(&f->in, p, n) == 0);
    /* before connect a frame is at most CQ_MQSRV_PREAUTH_FRAME_DFL bytes */
    while (!f->halted && off < f->in.len &&
           (r = cq_mq_parse(f->in.data + off, f->in.len - off,
                            f->authed ? 0 : CQ_MQSRV_PREAUTH_FRAME_DFL, &fr)) != 0) {
        if (r < 0) { /* the stream cannot be resynchronised */
            expect_push(f, (expect_t){.type = CQ_MQ_RESP_ERROR, .code = cq_mq_errcode((int)r)});
            f->will_close = f->halted = true;
            break;
        }
        expect_frame(f, &fr);
        off += (size_t)r;
    }
    cq_sbuf_consume(&f->in, f->halted ? f->in.len : off);
}

/* POST /v1/topics/<t>/messages */
static bool is_produce(const cq_mqhttp_req_t *rq)
{
    static const char pre[] = "/v1/topics/", post[] = "/messages";
    size_t np = sizeof(pre) - 1, ns = sizeof(post) - 1;
    if (rq->method_len != 4 || memcmp(rq->method, "POST", 4) != 0 || rq->path_len <= np + ns)
        return false;
    const char *t = rq->path + np;
    size_t tlen = rq->path_len - np - ns;
    return !memcmp(rq->path, pre, np) && !memcmp(t + tlen, post, ns) && !memchr(t, '/', tlen);
}

static void expect_requests(fconn_t *f, const uint8_t *p, size_t n)
{
    size_t max_body = cq_mqhttp_max_body(fz.s), off = 0;
    size_t skip = f->skip < n ? (size_t)f->skip : n; /* a refused request's body */
    f->skip -= skip;
    FUZZ_CHECK(cq_sbuf_append(&f->in, p + skip, n - skip) == 0);
    while (!f->halted && off < f->in.len) {
        cq_mqhttp_req_t rq;
        const char *at = (const char *)f->in.data + off;
        ssize_t r = cq_mqhttp_parse(at, f->in.len - off, CQ_MQHTTP_HEAD_MAX, &rq);
        if (r == 0)
            break;
        if (r < 0 || rq.chunked || rq.content_length > max_body) { /* answered, then closed */
            expect_push(f, (expect_t){.failed = true, .closes = true});
            f->will_close = f->halted = true;
            break;
        }
        if (f->in.len - off - (size_t)r < rq.content_length)
            break;
        expect_push(f, (expect_t){.produce = is_produce(&rq), .closes = !rq.keep_alive});
        f->will_close = f->halted = !rq.keep_alive;
        off += (size_t)r + (size_t)rq.content_length;
    }
    cq_sbuf_consume(&f->in, f->halted ? f->in.len : off);
}

/* The owed answer that answer m pays off: same type, msg id and askid. A client may owe
 * several under one key and answers come out of request order, so the one chosen keeps the
 * counts right: an error pays off an error owed exactly (a bad header) first, then one owed to
 * a frame that did not decode, then any; a success only a request that decoded. With a correct
 * engine there always is one. Returns f->nexp when there is none. */
static size_t owed_by(const fconn_t *f, const cq_mq_msg_t *m)
{
    bool has_askid = m->has & CQ_MQ_F_ASKID;
    size_t best = f->nexp;
    int best_rank = 0;
    for (size_t i = 0; i < f->nexp; i++) {
        const expect_t *e = &f->exp[i];
        if (e->type != m->type || e->msg_id != m->msg_id || e->has_askid != has_askid ||
            (has_askid && e->askid != m->askid))
            continue;
        int rank = e->code > 0 ? (m->err_code == (uint32_t)e->code) * 3
                   : e->failed ? (m->err_code != 0) * 2
                               : 1;
        if (rank > best_rank) {
            best = i;
            best_rank = rank;
        }
    }
    return best;
}

/* A seed answer reached the edge: it pays off one owed answer; a produce's says what the store
 * did. */
static void seed_answer(fconn_t *f, const cq_mq_msg_t *m)
{
    FUZZ_CHECK(m->has & CQ_MQ_F_ERR_CODE);
    size_t i = owed_by(f, m);
    if (i == f->nexp)
        fprintf(stderr, "answer type %u msg id %u askid %u err_code %u: no request owes it\n",
                m->type, m->msg_id, m->askid, m->err_code);
    FUZZ_CHECK(i < f->nexp); /* never unasked, never twice */
    expect_drop(f, i);
    if (m->type == CQ_MQ_RESP_PRODUCE)
        produce_answered(f, (int)m->err_code, m->offsets, m->err_code ? 0 : m->noffsets,
                         m->err_msg && strstr(m->err_msg, "may be stored"));
}

/* The offsets of an HTTP produce's 200 body, {"offsets":[a,b,...]}. Returns the count. */
static size_t http_offsets(const char *b, size_t n, int64_t **ret)
{
    static const char pre[] = "{\"offsets\":[";
    size_t np = sizeof(pre) - 1, k = 0, cap = 0;
    int64_t *v = NULL;
    FUZZ_CHECK(n >= np + 2 && !memcmp(b, pre, np) && !memcmp(b + n - 2, "]}", 2));
    for (size_t i = np; i < n - 2;) {
        int64_t x = 0;
        FUZZ_CHECK(b[i] >= '0' && b[i] <= '9');
        while (b[i] >= '0' && b[i] <= '9')
            x = x * 10 + (b[i++] - '0');
        FUZZ_CHECK(b[i] == (i == n - 2 ? ']' : ','));
        i += b[i] == ',';
        v = grow(v, &cap, k, sizeof(*v));
        v[k++] = x;
    }
    *ret = v;
    return k;
}

/* A response with nothing owed: it must be the refusal of the request whose head is complete
 * and whose body is not (the API judges a request from its head, before holding its body;
 * doc/protocol-mq.md "Before the body"). It closes unless the body may be skipped (at most
 * CQ_MQHTTP_DISCARD_MAX and keep-alive); the ledger then drops that body as it arrives. Returns
 * false when there is no such request. */
static bool head_refusal(fconn_t *f, int status, bool closes)
{
    cq_mqhttp_req_t rq;
    ssize_t r = f->halted
                    ? 0
                    : cq_mqhttp_parse((const char *)f->in.data, f->in.len, CQ_MQHTTP_HEAD_MAX, &rq);
    if (r <= 0 || rq.chunked || rq.content_length > cq_mqhttp_max_body(fz.s) ||
        f->in.len - (size_t)r >= rq.content_length)
        return false;
    FUZZ_CHECK(status != 200);
    bool skippable = rq.keep_alive && rq.content_length <= CQ_MQHTTP_DISCARD_MAX;
    FUZZ_CHECK(closes == !skippable);
    if (closes) {
        f->will_close = f->halted = true;
        cq_sbuf_consume(&f->in, f->in.len);
        return true;
    }
    f->skip = rq.content_length - (f->in.len - (size_t)r);
    cq_sbuf_consume(&f->in, f->in.len);
    return true;
}

/* True when f's ledger holds a request whose head is complete and whose body is not, and whose
 * refusal from the head would close the connection (not keep-alive, or a body over
 * CQ_MQHTTP_DISCARD_MAX): the engine may close before a stalled peer reads that answer. */
static bool head_would_close(fconn_t *f)
{
    cq_mqhttp_req_t rq;
    if (!f->h || f->halted)
        return false;
    ssize_t r = cq_mqhttp_parse((const char *)f->in.data, f->in.len, CQ_MQHTTP_HEAD_MAX, &rq);
    return r > 0 && !rq.chunked && rq.content_length <= cq_mqhttp_max_body(fz.s) &&
           f->in.len - (size_t)r < rq.content_length &&
           (!rq.keep_alive || rq.content_length > CQ_MQHTTP_DISCARD_MAX);
}

/* An HTTP response reached the edge: it answers the oldest request still owed. */
static void http_answer(fconn_t *f, int status, bool closes, const char *body, size_t blen)
{
    static const char ec[] = "{\"err_code\":";
    if (f->nexp == 0 && head_refusal(f, status, closes))
        return;
    if (f->nexp == 0)
        fprintf(stderr, "HTTP %d: no request owes it\n", status);
    FUZZ_CHECK(f->nexp > 0);
    expect_t e = f->exp[0];
    expect_drop(f, 0);
    FUZZ_CHECK(closes == e.closes);
    FUZZ_CHECK(!e.failed || status != 200);
    if (!e.produce) /* a produce's response consumes its completion, in order */
        return;
    int64_t *offsets = NULL;
    size_t n = 0;
    int code = 0;
    if (status == 200) {
        n = http_offsets(body, blen, &offsets);
    } else {
        FUZZ_CHECK(blen > sizeof(ec) - 1 && !memcmp(body, ec, sizeof(ec) - 1));
        code = atoi(body + sizeof(ec) - 1);
        FUZZ_CHECK(code > 0);
    }
    produce_answered(f, code, offsets, n, memmem(body, blen, "may be stored", 13) != NULL);
    free(offsets);
}

/* ---- the fake store port ------------------------------------------------------------------ */

static int port_submit(void *ud, cq_writer_req_t *req)
{
    (void)ud;
    if (fz.refuse)
        return fz.refuse;
    if (fz.npending == MAX_PENDING)
        return CQ_EBUSY;
    fconn_t *owner = fz.feeding;
    if (!owner && fz.draining && req->op != CQ_WRITER_PURGE)
        owner = fz.conn[2]; /* the HTTP connection's next pipelined request */
    fz.pending[(fz.head + fz.npending++) % MAX_PENDING] = (pend_t){req, owner};
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

static bool fence_open(void *ud)
{
    (void)ud;
    return fz.fence;
}

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
    case CQ_WRITER_HIGH_WATER:
    case CQ_WRITER_TOPIC_STATS: /* replication moved the high water */
        req->offset = fz.next_offset += o >> 4;
        req->count = o;
        break;
    case CQ_WRITER_TOPIC_LIST: /* bit 3: a topic created on the master */
        req->topics = cq_calloc(1, sizeof(*req->topics));
        if (req->topics && (o & 8)) {
            snprintf(req->topics[0].name, sizeof(req->topics[0].name), "new%u", o >> 4);
            req->topics[0].online = o & 16;
            req->n_topics = 1;
        }
        break;
    default:
        break;
    }
}

static void complete_oldest(uint8_t o)
{
    if (!fz.npending)
        return;
    pend_t p = fz.pending[fz.head];
    fz.head = (fz.head + 1) % MAX_PENDING;
    fz.npending--;
    fill(p.req, o);
    if (p.owner && p.req->op == CQ_WRITER_PRODUCE)
        record(p.owner, p.req);
    cq_mqsrv_complete(NULL, p.req);
}

static void drain(void)
{
    fz.draining = true;
    cq_mqsrv_drain(fz.s);
    fz.draining = false;
}

/* ---- the fake edge ------------------------------------------------------------------------ */

static cq_sendq_t *sendq_of(fconn_t *f)
{
    return f->c ? cq_mqsrv_conn_sendq(f->c) : cq_mqhttp_conn_sendq(f->h);
}

/* Reads the HTTP responses in f->out: status line, headers, Content-Length body. */
static void check_http(fconn_t *f)
{
    static const char cl[] = "\r\nContent-Length: ", conn_close[] = "\r\nConnection: close\r\n";
    for (;;) {
        const char *p = (const char *)f->out.data;
        if (f->out.len < 9)
            return;
        FUZZ_CHECK(memcmp(p, "HTTP/1.1 ", 9) == 0);
        const char *end = memmem(p, f->out.len, "\r\n\r\n", 4);
        if (!end)
            return;
        size_t head = (size_t)(end - p) + 4;
        const char *len = memmem(p, head, cl, sizeof(cl) - 1);
        FUZZ_CHECK(head > 13 && p[12] == ' ' && len != NULL);
        size_t blen = strtoul(len + sizeof(cl) - 1, NULL, 10);
        if (f->out.len - head < blen)
            return;
        int status = atoi(p + 9);
        FUZZ_CHECK(status >= 200 && status <= 599);
        http_answer(f, status, memmem(p, head, conn_close, sizeof(conn_close) - 1) != NULL,
                    p + head, blen);
        cq_sbuf_consume(&f->out, head + blen);
    }
}

/* Every frame a seed connection got decodes and is a push or an owed answer. */
static void check_out(fconn_t *f)
{
    if (f->h) {
        check_http(f);
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
        if (m->type != CQ_MQ_PUSH)
            seed_answer(f, m);
        cq_mq_msg_free(m);
        cq_sbuf_consume(&f->out, (size_t)r);
    }
    FUZZ_CHECK(r == 0);
}

/* The engine asks for something after it closed f or after the edge closed it: never. */
static void check_alive(const fconn_t *f)
{
    if (f->gone || f->closed || f->aborted)
        fprintf(stderr, "engine calls a connection it closed (%d) or the edge closed (%d)\n",
                f->closed || f->aborted, f->gone);
    FUZZ_CHECK(!f->gone && !f->closed && !f->aborted);
}

static void edge_flush(void *tctx)
{
    fconn_t *f = tctx;
    check_alive(f);
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
    edge_flush(f);           /* what is queued is written, then the socket closes */
    if (head_would_close(f)) /* a refusal from the head, unread by a stalled peer */
        f->will_close = f->halted = true;
    /* only a bad header, a refused connect or an HTTP request that ends the connection (or
     * pipelining beyond what one request may hold) close it */
    FUZZ_CHECK(f->will_close ||
               (f->h && f->fed > 2 * CQ_MQHTTP_HEAD_MAX + cq_mqhttp_max_body(fz.s)));
    f->closed = true;
}

static void edge_abort(void *tctx, int reason, const char *why)
{
    fconn_t *f = tctx;
    check_alive(f);
    FUZZ_CHECK(reason == CQ_ESLOW && why && *why);
    f->aborted = true;
}

static int edge_peer(void *tctx, char *buf, size_t len)
{
    check_alive(tctx);
    snprintf(buf, len, "fuzz");
    return 0;
}

static const cq_mqsrv_conn_ops_t edge_ops = {{"fuzz", edge_flush, edge_close, edge_peer},
                                             edge_abort};

static void conn_open(int i)
{
    fconn_t *f = calloc(1, sizeof(*f));
    FUZZ_CHECK(f != NULL);
    cq_sbuf_init(&f->out);
    cq_sbuf_init(&f->in);
    f->next = fz.all;
    fz.all = f;
    fz.conn[i] = f;
    if (i < 2)
        FUZZ_CHECK((f->c = cq_mqsrv_conn_new(fz.s, &edge_ops, f)) != NULL);
    else
        FUZZ_CHECK((f->h = cq_mqhttp_conn_new(fz.s, &edge_ops, f)) != NULL);
}

/* The socket is gone: the engine forgets the connection's ops. */
static void conn_gone(int i)
{
    fconn_t *f = fz.conn[i];
    if (f->closed && !f->stalled) /* the close wrote what was queued; nothing came after */
        FUZZ_CHECK(cq_sendq_bytes(sendq_of(f)) == 0);
    cq_mqsrv_conn_close(f->c);
    cq_mqhttp_conn_close(f->h);
    f->c = NULL;
    f->h = NULL;
    f->gone = true;
    fz.conn[i] = NULL;
}

static void conns_free(void)
{
    while (fz.all) {
        fconn_t *f = fz.all;
        fz.all = f->next;
        for (size_t i = 0; i < f->nrec; i++)
            free(f->rec[i].offsets);
        free(f->rec);
        free(f->exp);
        cq_sbuf_done(&f->out);
        cq_sbuf_done(&f->in);
        free(f);
    }
}

static void feed(int i, const uint8_t *p, size_t n)
{
    fconn_t *f = fz.conn[i];
    f->fed += n;
    if (f->c)
        expect_frames(f, p, n);
    else
        expect_requests(f, p, n);
    fz.feeding = f;
    if (f->c)
        cq_mqsrv_conn_input(f->c, p, n);
    else
        cq_mqhttp_conn_input(f->h, p, n);
    fz.feeding = NULL;
    if (f->c && f->will_close) /* a bad header or a refused connect closes at once */
        FUZZ_CHECK(f->closed || f->aborted);
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
                         .sendq_hard_limit = flags & 2 ? 4096 : 0,
                         .may_write = fence_open};
    memset(&fz, 0, sizeof(fz));
    fz.fence = true;
    fz.perms = perms;
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
        drain();
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
        fz.conn[i]->hangup = true;
        return 1;
    case 9:
        fz.conn[i]->stalled = !fz.conn[i]->stalled;
        return 1;
    case 10:
        fz.refuse = refusals[arg & 3];
        return 2;
    case 11:
        fz.fence = arg & 1;
        cq_mqsrv_set_role(fz.s, arg & 2, arg >> 2, fz.now_ms);
        return 2;
    default:
        return 1;
    }
}

/* The store completes everything, the readers catch up: every connection still open has had
 * every answer it was owed, and each completed produce was answered. */
static void settle(void)
{
    fz.refuse = 0;
    fz.fence = true;
    cq_mqsrv_set_role(fz.s, true, 0, 0); /* a master answers every produce it completes */
    for (int i = 0; i < NCONN; i++) {
        fz.conn[i]->stalled = false;
        edge_flush(fz.conn[i]); /* the edge's write continues by itself */
    }
    do {
        while (fz.npending)
            complete_oldest(0);
        drain();
        cq_mqsrv_flush(fz.s);
    } while (fz.npending);
    for (int i = 0; i < NCONN; i++) {
        fconn_t *f = fz.conn[i];
        if (f->closed || f->aborted)
            continue;
        if (f->nexp || f->nrec)
            fprintf(stderr, "conn %d: %zu answers and %zu produce completions unanswered\n", i,
                    f->nexp, f->nrec);
        FUZZ_CHECK(f->nexp == 0 && f->nrec == 0);
        FUZZ_CHECK(!f->will_close); /* the request that ends it was answered: it closed */
        FUZZ_CHECK(f->out.len == 0);
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
            fconn_t *f = fz.conn[i];
            if (f->closed || f->aborted || f->hangup) { /* the socket went; a new client */
                conn_gone(i);
                conn_open(i);
            }
        }
    }
    if (!(data[0] & 4))
        settle();
    for (int i = 0; i < NCONN; i++)
        conn_gone(i);
    fz.refuse = CQ_ECLOSED; /* as a store that shut down: purges resubmitted at the end fail */
    for (uint8_t o = 0; fz.npending; o++)
        complete_oldest(o);
    fz.draining = true;
    fz.s = cq_mqsrv_free(fz.s); /* runs the inbox */
    fz.draining = false;
    FUZZ_CHECK(fz.npending == 0);
    FUZZ_CHECK(cq_buf_live() == bufs);
    conns_free();
    cq_mqperm_free(perms);
    return 0;
}
