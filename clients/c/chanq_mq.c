/* chanq_mq.c - the sans-I/O durable-topic client core (see chanq_mq.h). */
#include "chanq_mq.h"

#include "cq_alloc.h"

#include <errno.h>
#include <string.h>

#define MAX_PENDING 65535u

typedef struct pending {
    uint32_t askid;
    uint8_t type; /* request type */
    chanq_mq_done_cb cb;
    void *ud;
} pending_t;

typedef struct watch {
    char topic[CQ_MQ_TOPIC_MAX + 1];
    chanq_mq_push_cb cb;
    void *ud;
} watch_t;

typedef struct pseq {
    int64_t producer_id, next;
} pseq_t;

struct chanq_mq {
    chanq_mq_opts_t opts;
    uint32_t next_askid;
    int64_t client_id;
    uint8_t *in; /* unparsed input */
    size_t in_len, in_cap;
    uint8_t *out; /* queued output, out_off bytes already sent */
    size_t out_off, out_len, out_cap;
    pending_t *pend;
    size_t npend, pend_cap;
    watch_t *watches;
    size_t nwatches, watches_cap;
    pseq_t *seqs;
    size_t nseqs, seqs_cap;
    char instance[CQ_MQ_INSTANCE_MAX + 1]; /* commit and offset carry it ("": none) */
};

/* Grows *arr (of elem-byte entries, *cap of them) to hold need entries. */
static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 8;
    while (ncap < need)
        ncap *= 2;
    void *p = cq_realloc(*arr, ncap * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = ncap;
    return 0;
}

int chanq_mq_err(uint32_t err_code)
{
    static const int map[] = {
        [CQ_MQ_OK] = 0,
        [CQ_MQ_ERR_BAD_HEADER] = CQ_EHEADER,
        [CQ_MQ_ERR_BAD_LENGTH] = CQ_EBADLEN,
        [CQ_MQ_ERR_BAD_JSON] = CQ_EJSON,
        [CQ_MQ_ERR_UNKNOWN_TYPE] = CQ_ENOTYPE,
        [CQ_MQ_ERR_BAD_FIELD] = CQ_EFIELD,
        [CQ_MQ_ERR_UNAUTHENTICATED] = CQ_EAUTH,
        [CQ_MQ_ERR_NO_PERMISSION] = CQ_EACL,
        [CQ_MQ_ERR_UNKNOWN_TOPIC] = CQ_ENOTOPIC,
        [CQ_MQ_ERR_TOPIC_OFFLINE] = CQ_EOFFLINE,
        [CQ_MQ_ERR_CONTENT_TOO_LARGE] = CQ_ECONTENT,
        [CQ_MQ_ERR_BUSY] = CQ_EBUSY,
        [CQ_MQ_ERR_STORAGE] = CQ_ESTORE,
        [CQ_MQ_ERR_BAD_TOPIC_NAME] = CQ_EBADTOPIC,
        [CQ_MQ_ERR_INTERNAL] = -EREMOTEIO,
        [CQ_MQ_ERR_SEQUENCE_CONFLICT] = CQ_ESEQCONFLICT,
        [CQ_MQ_ERR_SEQUENCE_OUT_OF_ORDER] = CQ_ESEQORDER,
        [CQ_MQ_ERR_OFFSET_OUT_OF_RANGE] = CQ_EOFFRANGE,
        [CQ_MQ_ERR_NOT_MASTER] = CQ_ENOTMASTER,
        [CQ_MQ_ERR_SERVER_OFFLINE] = CQ_ESRVOFFLINE,
        [CQ_MQ_ERR_READ_ON_MASTER] = CQ_EREADMASTER,
        [CQ_MQ_ERR_NO_MESSAGE] = CQ_ENOMSG,
    };
    if (err_code < sizeof(map) / sizeof(map[0]))
        return map[err_code];
    return -EREMOTEIO;
}

int chanq_mq_read_master(const char *err_msg, char *addr, size_t cap)
{
    const char *p = NULL;
    for (const char *q = err_msg; q && (q = strstr(q, "master=")); q++)
        p = q + 7;
    size_t n = p ? strcspn(p, " \t\r\n\",;") : 0;
    if (n == 0 || n >= cap)
        return -EINVAL;
    memcpy(addr, p, n);
    addr[n] = '\0';
    return 0;
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

chanq_mq_t *chanq_mq_new(const chanq_mq_opts_t *opts)
{
    chanq_mq_t *c = cq_calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    if (opts)
        c->opts = *opts;
    c->next_askid = 1;
    c->client_id = -1;
    return c;
}

chanq_mq_t *chanq_mq_free(chanq_mq_t *c)
{
    if (!c)
        return NULL;
    cq_free(c->in);
    cq_free(c->out);
    cq_free(c->pend);
    cq_free(c->watches);
    cq_free(c->seqs);
    cq_free(c);
    return NULL;
}

void chanq_mq_fail_all(chanq_mq_t *c, int err)
{
    /* A callback may queue new requests: complete only the ones pending now, oldest first. */
    size_t n = c->npend;
    while (n-- > 0 && c->npend > 0) {
        pending_t p = c->pend[0];
        memmove(c->pend, c->pend + 1, (c->npend - 1) * sizeof(*c->pend));
        c->npend--;
        if (p.cb)
            p.cb(c, err, NULL, p.ud);
    }
}

static pending_t *find_pending(chanq_mq_t *c, uint32_t askid)
{
    for (size_t i = 0; i < c->npend; i++)
        if (c->pend[i].askid == askid)
            return &c->pend[i];
    return NULL;
}

int chanq_mq_cancel(chanq_mq_t *c, uint32_t askid)
{
    pending_t *p = find_pending(c, askid);
    if (!p)
        return -ENOENT;
    p->cb = NULL;
    p->ud = NULL;
    return 0;
}

size_t chanq_mq_pending(const chanq_mq_t *c)
{
    return c->npend;
}

int64_t chanq_mq_client_id(const chanq_mq_t *c)
{
    return c->client_id;
}

/* ---- watches and sequences ----------------------------------------------------------------- */

static watch_t *find_watch(chanq_mq_t *c, const char *topic)
{
    for (size_t i = 0; i < c->nwatches; i++)
        if (strcmp(c->watches[i].topic, topic) == 0)
            return &c->watches[i];
    return NULL;
}

static void remove_watch(chanq_mq_t *c, const char *topic)
{
    watch_t *w = find_watch(c, topic);
    if (w)
        *w = c->watches[--c->nwatches];
}

static pseq_t *find_seq(const chanq_mq_t *c, int64_t producer_id)
{
    for (size_t i = 0; i < c->nseqs; i++)
        if (c->seqs[i].producer_id == producer_id)
            return &c->seqs[i];
    return NULL;
}

int64_t chanq_mq_next_seq(const chanq_mq_t *c, int64_t producer_id)
{
    const pseq_t *s = find_seq(c, producer_id);
    return s ? s->next : 0;
}

/* Records that seq .. seq + n - 1 of producer_id were used. */
static int advance_seq(chanq_mq_t *c, int64_t producer_id, int64_t seq, size_t n)
{
    pseq_t *s = find_seq(c, producer_id);
    if (!s) {
        if (grow((void **)&c->seqs, &c->seqs_cap, c->nseqs + 1, sizeof(*c->seqs)) < 0)
            return -ENOMEM;
        s = &c->seqs[c->nseqs++];
        *s = (pseq_t){producer_id, 0};
    }
    if (seq + (int64_t)n > s->next)
        s->next = seq + (int64_t)n;
    return 0;
}

/* ---- output -------------------------------------------------------------------------------- */

const uint8_t *chanq_mq_out(const chanq_mq_t *c, size_t *ret_len)
{
    *ret_len = c->out_len - c->out_off;
    return c->out ? c->out + c->out_off : NULL;
}

void chanq_mq_out_consume(chanq_mq_t *c, size_t n)
{
    if (n > c->out_len - c->out_off)
        n = c->out_len - c->out_off;
    c->out_off += n;
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
}

static int out_append(chanq_mq_t *c, const uint8_t *p, size_t n)
{
    if (c->out_off > 0 && c->out_off >= c->out_len / 2) {
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->out_off = 0;
    }
    if (grow((void **)&c->out, &c->out_cap, c->out_len + n, 1) < 0)
        return -ENOMEM;
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
    return 0;
}

/* ---- requests ------------------------------------------------------------------------------ */

/* A new request message with a fresh askid (not in use by a pending request). */
static int req_new(chanq_mq_t *c, uint8_t type, const char *topic, cq_mq_msg_t **ret)
{
    if (c->npend >= MAX_PENDING)
        return CQ_ELIMIT;
    uint32_t askid;
    do {
        askid = c->next_askid++;
        if (c->next_askid == 0)
            c->next_askid = 1;
    } while (find_pending(c, askid));
    cq_mq_msg_t *m = cq_mq_msg_new(type, (uint16_t)askid);
    if (!m)
        return -ENOMEM;
    m->askid = askid;
    m->has |= CQ_MQ_F_ASKID;
    if (topic) {
        int r = cq_mq_msg_set_topic(m, topic);
        if (r < 0) {
            cq_mq_msg_free(m);
            return r;
        }
        m->has |= CQ_MQ_F_TOPIC;
    }
    /* a consumer instance keeps an offset of its own (doc/protocol-mq.md "commit") */
    if ((type == CQ_MQ_REQ_COMMIT || type == CQ_MQ_REQ_OFFSET) && c->instance[0]) {
        int r = cq_mq_msg_set_str(m, CQ_MQ_F_INSTANCE, c->instance);
        if (r < 0) {
            cq_mq_msg_free(m);
            return r;
        }
    }
    *ret = m;
    return 0;
}

int chanq_mq_set_instance(chanq_mq_t *c, const char *instance)
{
    size_t n = instance ? strlen(instance) : 0;
    if (!c || n > CQ_MQ_INSTANCE_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (instance[i] <= 0x20 || instance[i] > 0x7e)
            return -EINVAL;
    memcpy(c->instance, n ? instance : "", n + 1);
    return 0;
}

/* Encodes m (taken), queues it and records the pending request. */
static int req_send(chanq_mq_t *c, cq_mq_msg_t *m, chanq_mq_done_cb cb, void *ud,
                    uint32_t *ret_askid)
{
    uint8_t *b = NULL;
    size_t n = 0;
    pending_t p = {m->askid, m->type, cb, ud};
    int r = grow((void **)&c->pend, &c->pend_cap, c->npend + 1, sizeof(*c->pend));
    if (r == 0)
        r = cq_mq_encode(m, &b, &n);
    cq_mq_msg_free(m);
    if (r == 0)
        r = out_append(c, b, n);
    cq_free(b);
    if (r < 0)
        return r;
    c->pend[c->npend++] = p;
    if (ret_askid)
        *ret_askid = p.askid;
    return 0;
}

int chanq_mq_connect(chanq_mq_t *c, uint32_t module_id, const char *token, uint32_t client_type,
                     chanq_mq_done_cb cb, void *ud, uint32_t *ret_askid)
{
    cq_mq_msg_t *m;
    int r = req_new(c, CQ_MQ_REQ_CONNECT, NULL, &m);
    if (r < 0)
        return r;
    m->module_id = module_id;
    m->client_type = client_type;
    m->has |= CQ_MQ_F_MODULE_ID | CQ_MQ_F_CLIENT_TYPE;
    r = cq_mq_msg_set_str(m, CQ_MQ_F_TOKEN, token ? token : "");
    if (r < 0) {
        cq_mq_msg_free(m);
        return r;
    }
    return req_send(c, m, cb, ud, ret_askid);
}

int chanq_mq_keepalive(chanq_mq_t *c, chanq_mq_done_cb cb, void *ud, uint32_t *ret_askid)
{
    cq_mq_msg_t *m;
    int r = req_new(c, CQ_MQ_REQ_KEEPALIVE, NULL, &m);
    return r < 0 ? r : req_send(c, m, cb, ud, ret_askid);
}

int chanq_mq_add_topic(chanq_mq_t *c, const char *topic, chanq_mq_done_cb cb, void *ud,
                       uint32_t *ret_askid)
{
    cq_mq_msg_t *m;
    int r = req_new(c, CQ_MQ_REQ_ADD_TOPIC, topic, &m);
    return r < 0 ? r : req_send(c, m, cb, ud, ret_askid);
}

static int produce_fill(cq_mq_msg_t *m, const chanq_mq_produce_t *req)
{
    for (size_t i = 0; i < req->n; i++) {
        const chanq_mq_content_t *x = &req->msgs[i];
        int r = cq_mq_msg_add_item(m, 0, x->time, x->data ? x->data : "", x->len, x->json);
        if (r < 0)
            return r;
    }
    m->has |= req->n == 1 ? CQ_MQ_F_CONTENT : CQ_MQ_F_BATCH;
    if (req->time >= 0) {
        m->time = req->time;
        m->has |= CQ_MQ_F_TIME;
    }
    return 0;
}

int chanq_mq_produce(chanq_mq_t *c, const chanq_mq_produce_t *req, chanq_mq_done_cb cb, void *ud,
                     uint32_t *ret_askid)
{
    if (req->n == 0 || !req->msgs || req->producer_id < 0)
        return CQ_EFIELD;
    cq_mq_msg_t *m;
    int r = req_new(c, CQ_MQ_REQ_PRODUCE, req->topic, &m);
    if (r < 0)
        return r;
    r = produce_fill(m, req);
    int64_t seq = req->seq >= 0 ? req->seq : chanq_mq_next_seq(c, req->producer_id);
    if (r == 0 && req->producer_id > 0) {
        m->producer_id = req->producer_id;
        m->seq = seq;
        m->has |= CQ_MQ_F_PRODUCER_ID | CQ_MQ_F_SEQ;
        /* Reserve the entry before queueing so that advancing cannot fail afterwards. */
        r = advance_seq(c, req->producer_id, 0, 0);
    }
    if (r < 0) {
        cq_mq_msg_free(m);
        return r;
    }
    r = req_send(c, m, cb, ud, ret_askid);
    if (r == 0 && req->producer_id > 0)
        (void)advance_seq(c, req->producer_id, seq, req->n);
    return r;
}

/* Requests with a topic and an offset: consume (max_count) and commit. */
static int offset_req(chanq_mq_t *c, uint8_t type, const char *topic, int64_t offset,
                      uint32_t max_count, chanq_mq_done_cb cb, void *ud, uint32_t *ret_askid)
{
    cq_mq_msg_t *m;
    int r = req_new(c, type, topic, &m);
    if (r < 0)
        return r;
    m->offset = offset;
    m->has |= CQ_MQ_F_OFFSET;
    if (max_count) {
        m->max_count = max_count;
        m->has |= CQ_MQ_F_MAX_COUNT;
    }
    return req_send(c, m, cb, ud, ret_askid);
}

int chanq_mq_consume(chanq_mq_t *c, const char *topic, int64_t offset, uint32_t max_count,
                     chanq_mq_done_cb cb, void *ud, uint32_t *ret_askid)
{
    return offset_req(c, CQ_MQ_REQ_CONSUME, topic, offset, max_count, cb, ud, ret_askid);
}

int chanq_mq_commit(chanq_mq_t *c, const char *topic, int64_t offset, chanq_mq_done_cb cb, void *ud,
                    uint32_t *ret_askid)
{
    return offset_req(c, CQ_MQ_REQ_COMMIT, topic, offset, 0, cb, ud, ret_askid);
}

int chanq_mq_offset(chanq_mq_t *c, const char *topic, chanq_mq_done_cb cb, void *ud,
                    uint32_t *ret_askid)
{
    cq_mq_msg_t *m;
    int r = req_new(c, CQ_MQ_REQ_OFFSET, topic, &m);
    return r < 0 ? r : req_send(c, m, cb, ud, ret_askid);
}

int chanq_mq_topics(chanq_mq_t *c, chanq_mq_done_cb cb, void *ud, uint32_t *ret_askid)
{
    cq_mq_msg_t *m;
    int r = req_new(c, CQ_MQ_REQ_TOPICS, NULL, &m);
    return r < 0 ? r : req_send(c, m, cb, ud, ret_askid);
}

int chanq_mq_watch(chanq_mq_t *c, const char *topic, chanq_mq_push_cb on_push, void *push_ud,
                   chanq_mq_done_cb cb, void *ud, uint32_t *ret_askid)
{
    cq_mq_msg_t *m;
    int r = req_new(c, CQ_MQ_REQ_WATCH, topic, &m);
    if (r < 0)
        return r;
    watch_t *w = find_watch(c, topic);
    if (!w) {
        r = grow((void **)&c->watches, &c->watches_cap, c->nwatches + 1, sizeof(*c->watches));
        if (r < 0) {
            cq_mq_msg_free(m);
            return r;
        }
        w = &c->watches[c->nwatches++];
        memcpy(w->topic, m->topic, sizeof(w->topic));
    }
    w->cb = on_push;
    w->ud = push_ud;
    r = req_send(c, m, cb, ud, ret_askid);
    if (r < 0)
        remove_watch(c, topic);
    return r;
}

int chanq_mq_unwatch(chanq_mq_t *c, const char *topic, chanq_mq_done_cb cb, void *ud,
                     uint32_t *ret_askid)
{
    cq_mq_msg_t *m;
    int r = req_new(c, CQ_MQ_REQ_UNWATCH, topic, &m);
    if (r < 0)
        return r;
    r = req_send(c, m, cb, ud, ret_askid);
    if (r == 0)
        remove_watch(c, topic);
    return r;
}

/* ---- input --------------------------------------------------------------------------------- */

static void unsolicited(chanq_mq_t *c, cq_mq_msg_t *m)
{
    if (c->opts.on_push)
        c->opts.on_push(c, m, c->opts.ud);
    else
        cq_mq_msg_free(m);
}

static void on_push(chanq_mq_t *c, cq_mq_msg_t *m)
{
    watch_t *w = find_watch(c, m->topic);
    if (w && w->cb)
        w->cb(c, m, w->ud);
    else
        unsolicited(c, m);
}

/* A response (or an error frame with an askid): completes its pending request. */
static void on_response(chanq_mq_t *c, cq_mq_msg_t *m)
{
    pending_t *pp = (m->has & CQ_MQ_F_ASKID) ? find_pending(c, m->askid) : NULL;
    if (!pp || (m->type != pp->type + 1 && m->type != CQ_MQ_RESP_ERROR)) {
        unsolicited(c, m);
        return;
    }
    pending_t p = *pp;
    *pp = c->pend[--c->npend];
    int err = chanq_mq_err(m->err_code);
    if (err == 0 && m->type == CQ_MQ_RESP_CONNECT && (m->has & CQ_MQ_F_CLIENT_ID))
        c->client_id = m->client_id;
    if (err < 0 && m->type == CQ_MQ_RESP_WATCH && (m->has & CQ_MQ_F_TOPIC))
        remove_watch(c, m->topic);
    if (p.cb)
        p.cb(c, err, m, p.ud);
    else
        cq_mq_msg_free(m);
}

static int dispatch(chanq_mq_t *c, const cq_mq_frame_t *f)
{
    cq_mq_limits_t lim = {.max_total = c->opts.max_total};
    cq_mq_msg_t *m = NULL;
    int r = cq_mq_decode(f, &lim, &m, NULL, 0);
    if (r < 0)
        return r;
    if (cq_mq_is_request(m->type)) {
        cq_mq_msg_free(m);
        return CQ_ENOTYPE;
    }
    if (m->type == CQ_MQ_PUSH)
        on_push(c, m);
    else
        on_response(c, m);
    return 0;
}

int chanq_mq_feed(chanq_mq_t *c, const uint8_t *p, size_t n)
{
    if (grow((void **)&c->in, &c->in_cap, c->in_len + n, 1) < 0)
        return -ENOMEM;
    if (n)
        memcpy(c->in + c->in_len, p, n);
    c->in_len += n;
    size_t off = 0;
    int r = 0;
    while (off < c->in_len) {
        cq_mq_frame_t f;
        ssize_t k = cq_mq_parse(c->in + off, c->in_len - off, c->opts.max_total, &f);
        if (k <= 0) {
            r = (int)k;
            break;
        }
        off += (size_t)k;
        r = dispatch(c, &f);
        if (r < 0)
            break;
    }
    if (off > 0) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
    return r;
}
