/* soak_mq.c - the soak's durable topic: one producer, one watcher, one consumer.
 *
 * The producer sends batches of `mq_batch` messages at `mq_rate` messages/s with an idempotence
 * key (a producer_id of this run, seq 0, 1, 2... per message), at most `mq_window` produces in
 * flight. Message seq's content is "soak <seq> " padded with 'm' to `mq_size` bytes, so every
 * message read back can be checked byte for byte. The ack gives each seq its offset.
 * The watcher (watching before the first produce) and the consumer (consume from offset 0 until
 * caught up, then polling, committing its position every second) note the offset at which
 * they read each seq. At the end every acked seq must have been pushed exactly once and consumed
 * exactly once, both at its acked offset, and consumed offsets must only increase.
 *
 * Connections: uv_tcp_t around the sans-I/O core (chanq_mq.h); what the core queues is written
 * after every tick and every read (one uv_write in flight, the rest waits in the core).
 */
#include "chanq_mq.h"
#include "soak_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODULE_ID       1u
#define CONSUME_MAX     1000u
#define POLL_IDLE_MS    50u
#define COMMIT_EVERY_MS 1000u
#define OFF_NONE        0    /* offsets start at 1 */
#define OFF_TWICE       (-1) /* read more than once */

typedef struct mconn {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    chanq_mq_t *mq;
    const char *name;
    uint8_t *wbuf; /* the bytes of the uv_write in flight; NULL when none */
    uint32_t client_type;
    bool open, closing, ready, handle_live;
    uint64_t step_t;
} mconn_t;

static mconn_t prod = {.name = "producer", .client_type = CQ_MQ_PRODUCER};
static mconn_t watcher = {.name = "watcher", .client_type = CQ_MQ_CONSUMER};
static mconn_t cons = {.name = "consumer", .client_type = CQ_MQ_CONSUMER};

/* Per seq: the acked, pushed and consumed offsets (OFF_NONE, an offset, or OFF_TWICE). */
static int64_t *acked, *pushed, *consumed;
static size_t cap;
static uint64_t produced; /* seqs handed to produce requests: 0..produced-1 */
static int64_t producer_id;
static int inflight;
static uint64_t t_run0;
static char *content; /* scratch: one message's content */
static int64_t cons_off;
static bool cons_busy; /* a consume or commit is pending */
static uint64_t cons_next_t, commit_t;
static int64_t committed_off;

static void flush(mconn_t *c);

/* ---- bookkeeping ---------------------------------------------------------------------------- */

static void grow(uint64_t need)
{
    if (need <= cap)
        return;
    size_t ncap = cap ? cap * 2 : 65536;
    while (ncap < need)
        ncap *= 2;
    int64_t **v[] = {&acked, &pushed, &consumed};
    for (size_t i = 0; i < 3; i++) {
        int64_t *p = realloc(*v[i], ncap * sizeof(int64_t));
        if (!p)
            soak_die("out of memory");
        memset(p + cap, 0, (ncap - cap) * sizeof(int64_t));
        *v[i] = p;
    }
    cap = ncap;
}

/* Writes seq's content into content[0..SO.mq_size) (NUL-terminated). */
static void make_content(uint64_t seq)
{
    int k = snprintf(content, (size_t)SO.mq_size + 1, "soak %" PRIu64 " ", seq);
    if (k < SO.mq_size)
        memset(content + k, 'm', (size_t)(SO.mq_size - k));
    content[SO.mq_size] = '\0';
}

/* Checks one message read by who (push or consume) and records its offset in tab. */
static void note_read(const char *who, int64_t *tab, const cq_mq_item_t *it)
{
    unsigned long long seq;
    if (sscanf(it->content, "soak %llu ", &seq) != 1 || seq >= produced) {
        soak_fail(SK_MQLOST, "%s: offset %" PRId64 " holds a message this run never produced", who,
                  it->offset);
        return;
    }
    make_content(seq);
    if (it->json || it->len != (size_t)SO.mq_size || memcmp(it->content, content, it->len) != 0)
        soak_fail(SK_MQLOST, "%s: offset %" PRId64 " (seq %llu) has the wrong content", who,
                  it->offset, seq);
    if (tab[seq] != OFF_NONE) {
        soak_fail(SK_MQLOST, "%s: seq %llu read twice (offsets %" PRId64 " and %" PRId64 ")", who,
                  seq, tab[seq], it->offset);
        tab[seq] = OFF_TWICE;
        return;
    }
    tab[seq] = it->offset;
    if (tab == pushed)
        SS.mq_pushed++;
    else
        SS.mq_consumed++;
}

/* A failed request: counts it, and says whether the answer was an error. */
static bool answer_failed(const char *what, int err, const cq_mq_msg_t *resp)
{
    if (err == 0 && resp)
        return false;
    if (!resp && soak_phase == PH_DONE)
        return true; /* our own close at the end completes what was pending */
    soak_fail(SK_ERRCODE, "%s: %s (err_code %u: %s)", what, cq_strerror(err),
              resp ? resp->err_code : 0, resp && resp->err_msg ? resp->err_msg : "no answer");
    return true;
}

/* ---- connections ------------------------------------------------------------------------------
 */

static void on_handle_closed(uv_handle_t *h)
{
    mconn_t *c = h->data;
    c->handle_live = false;
    free(c->wbuf);
    c->wbuf = NULL;
    chanq_mq_fail_all(c->mq, CQ_ECLOSED);
}

static void mclose(mconn_t *c, bool expected, const char *why)
{
    if (!expected && !c->closing)
        soak_fail(SK_CLOSE, "%s closed: %s", c->name, why);
    c->closing = true;
    c->open = false;
    c->ready = false;
    c->step_t = 0;
    if (c->handle_live && !uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

static void on_written(uv_write_t *w, int status)
{
    mconn_t *c = w->data;
    free(c->wbuf);
    c->wbuf = NULL;
    if (status < 0) {
        mclose(c, false, uv_strerror(status));
        return;
    }
    flush(c);
}

static void flush(mconn_t *c)
{
    size_t n;
    if (!c->open || c->wbuf)
        return;
    const uint8_t *out = chanq_mq_out(c->mq, &n);
    if (!n)
        return;
    uv_buf_t b = uv_buf_init((char *)out, (unsigned)n);
    int k = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (k < 0 && k != UV_EAGAIN) {
        mclose(c, false, uv_strerror(k));
        return;
    }
    size_t done = k > 0 ? (size_t)k : 0;
    if (done == n) {
        chanq_mq_out_consume(c->mq, n);
        return;
    }
    c->wbuf = malloc(n - done);
    if (!c->wbuf)
        soak_die("out of memory");
    memcpy(c->wbuf, out + done, n - done);
    chanq_mq_out_consume(c->mq, n);
    b = uv_buf_init((char *)c->wbuf, (unsigned)(n - done));
    c->wreq.data = c;
    int r = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written);
    if (r < 0)
        mclose(c, false, uv_strerror(r));
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    static char rbuf[65536];
    (void)h;
    (void)hint;
    *buf = uv_buf_init(rbuf, sizeof(rbuf));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    mconn_t *c = s->data;
    if (n < 0) {
        mclose(c, c->closing, n == UV_EOF ? "eof" : uv_strerror((int)n));
        return;
    }
    int r = chanq_mq_feed(c->mq, (const uint8_t *)buf->base, (size_t)n);
    if (r < 0) {
        soak_fail(SK_PROTO, "%s: undecodable answer: %s", c->name, cq_strerror(r));
        mclose(c, true, "");
        return;
    }
    flush(c);
}

static void on_connect_resp(chanq_mq_t *mq, int err, cq_mq_msg_t *resp, void *ud);

static void on_tcp(uv_connect_t *req, int status)
{
    mconn_t *c = req->data;
    if (status < 0) {
        mclose(c, false, uv_strerror(status));
        return;
    }
    c->open = true;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    flush(c);
}

static void mdial(mconn_t *c)
{
    c->mq = chanq_mq_new(NULL);
    if (!c->mq)
        soak_die("out of memory");
    uv_tcp_init(soak_loop, &c->tcp);
    c->tcp.data = c;
    c->handle_live = true;
    c->creq.data = c;
    c->step_t = soak_now_ms();
    /* Queued first, so that requests queued before the TCP connect completes follow it. */
    int r = chanq_mq_connect(c->mq, MODULE_ID, "", c->client_type, on_connect_resp, c, NULL);
    if (r < 0)
        soak_die("chanq_mq_connect: %s", cq_strerror(r));
    r = uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&soak_mq_addr, on_tcp);
    if (r < 0)
        soak_die("mq connect: %s", uv_strerror(r));
}

/* ---- the three clients ------------------------------------------------------------------------
 */

static void on_watched(chanq_mq_t *mq, int err, cq_mq_msg_t *resp, void *ud)
{
    (void)mq;
    if (!answer_failed("watch", err, resp)) {
        watcher.ready = true;
        watcher.step_t = 0;
    }
    cq_mq_msg_free(resp);
    (void)ud;
}

static void on_push(chanq_mq_t *mq, cq_mq_msg_t *m, void *ud)
{
    (void)mq;
    (void)ud;
    for (size_t i = 0; i < m->nitems; i++)
        note_read("push", pushed, &m->items[i]);
    cq_mq_msg_free(m);
}

static void consume_next(void);

static void on_consumed(chanq_mq_t *mq, int err, cq_mq_msg_t *resp, void *ud)
{
    (void)mq;
    (void)ud;
    cons_busy = false;
    if (answer_failed("consume", err, resp)) {
        cq_mq_msg_free(resp);
        cons_next_t = soak_now_ms() + POLL_IDLE_MS;
        return;
    }
    for (size_t i = 0; i < resp->nitems; i++) {
        const cq_mq_item_t *it = &resp->items[i];
        if (it->offset <= cons_off)
            soak_fail(SK_MQLOST, "consume: offset %" PRId64 " after %" PRId64, it->offset,
                      cons_off);
        else
            cons_off = it->offset;
        note_read("consume", consumed, it);
    }
    cons_next_t = resp->nitems ? 0 : soak_now_ms() + POLL_IDLE_MS;
    cq_mq_msg_free(resp);
    cons.ready = true;
    cons.step_t = 0;
    consume_next();
}

static void on_committed(chanq_mq_t *mq, int err, cq_mq_msg_t *resp, void *ud)
{
    (void)mq;
    (void)ud;
    cons_busy = false;
    answer_failed("commit", err, resp);
    cq_mq_msg_free(resp);
    consume_next();
}

/* The consumer's next request: a commit once a second, else a consume (if it is due). */
static void consume_next(void)
{
    uint64_t now = soak_now_ms();
    if (cons_busy || !cons.open || !prod.ready)
        return;
    int r;
    if (cons_off > committed_off && now - commit_t >= COMMIT_EVERY_MS) {
        commit_t = now;
        committed_off = cons_off;
        r = chanq_mq_commit(cons.mq, SO.topic, cons_off, on_committed, NULL, NULL);
    } else if (now >= cons_next_t) {
        r = chanq_mq_consume(cons.mq, SO.topic, cons_off, CONSUME_MAX, on_consumed, NULL, NULL);
    } else {
        return;
    }
    if (r < 0)
        soak_die("consume/commit: %s", cq_strerror(r));
    cons_busy = true;
    flush(&cons);
}

static void on_topic(chanq_mq_t *mq, int err, cq_mq_msg_t *resp, void *ud)
{
    (void)mq;
    (void)ud;
    if (!answer_failed("add_topic", err, resp)) {
        prod.ready = true;
        prod.step_t = 0;
        int r = chanq_mq_watch(watcher.mq, SO.topic, on_push, NULL, on_watched, NULL, NULL);
        if (r < 0)
            soak_die("watch: %s", cq_strerror(r));
        watcher.step_t = soak_now_ms();
        flush(&watcher);
        cons.step_t = soak_now_ms();
        consume_next();
    }
    cq_mq_msg_free(resp);
}

static void on_connect_resp(chanq_mq_t *mq, int err, cq_mq_msg_t *resp, void *ud)
{
    mconn_t *c = ud;
    (void)mq;
    if (answer_failed("connect", err, resp)) {
        cq_mq_msg_free(resp);
        return;
    }
    cq_mq_msg_free(resp);
    if (c == &prod) {
        int r = chanq_mq_add_topic(prod.mq, SO.topic, on_topic, NULL, NULL);
        if (r < 0)
            soak_die("add_topic: %s", cq_strerror(r));
        flush(&prod);
    }
}

/* ---- producing --------------------------------------------------------------------------------
 */

typedef struct batch {
    uint64_t seq0;
    size_t n;
} batch_t;

static void on_produced(chanq_mq_t *mq, int err, cq_mq_msg_t *resp, void *ud)
{
    batch_t *b = ud;
    (void)mq;
    inflight--;
    if (!answer_failed("produce", err, resp)) {
        if (resp->noffsets != b->n)
            soak_fail(SK_PROTO, "produce: %zu offsets for %zu messages", resp->noffsets, b->n);
        for (size_t i = 0; i < resp->noffsets && i < b->n; i++) {
            acked[b->seq0 + i] = resp->offsets[i];
            SS.mq_acked++;
        }
    }
    cq_mq_msg_free(resp);
    free(b);
}

static void produce_batch(size_t n)
{
    chanq_mq_content_t *msgs = calloc(n, sizeof(*msgs));
    char *texts = malloc(n * ((size_t)SO.mq_size + 1));
    batch_t *b = malloc(sizeof(*b));
    if (!msgs || !texts || !b)
        soak_die("out of memory");
    grow(produced + n);
    for (size_t i = 0; i < n; i++) {
        char *t = texts + i * ((size_t)SO.mq_size + 1);
        make_content(produced + i);
        memcpy(t, content, (size_t)SO.mq_size + 1);
        msgs[i] = (chanq_mq_content_t){.data = t, .len = (size_t)SO.mq_size, .time = -1};
    }
    *b = (batch_t){.seq0 = produced, .n = n};
    chanq_mq_produce_t p = {.topic = SO.topic,
                            .msgs = msgs,
                            .n = n,
                            .producer_id = producer_id,
                            .seq = (int64_t)produced,
                            .time = -1};
    int r = chanq_mq_produce(prod.mq, &p, on_produced, b, NULL);
    if (r < 0)
        soak_die("produce: %s", cq_strerror(r));
    free(msgs);
    free(texts);
    produced += n;
    SS.mq_produced += n;
    inflight++;
}

void soak_mq_tick(uint64_t now)
{
    mconn_t *all[] = {&prod, &watcher, &cons};
    for (size_t i = 0; i < 3; i++) {
        if (all[i]->step_t && now - all[i]->step_t > SOAK_STEP_TIMEOUT_MS) {
            soak_fail(SK_STALL, "%s: no answer to its setup request within %u ms", all[i]->name,
                      SOAK_STEP_TIMEOUT_MS);
            all[i]->step_t = 0;
        }
    }
    consume_next();
    if (soak_phase != PH_RUN || !prod.ready || SO.mq_rate <= 0)
        return;
    if (!t_run0)
        t_run0 = now;
    double want = SO.mq_rate * (double)(now - t_run0) / 1000.0;
    while (want >= (double)(produced + (uint64_t)SO.mq_batch)) {
        if (inflight >= SO.mq_window) {
            SS.mq_behind++; /* the server is slower than the rate: counted, not a violation */
            break;
        }
        produce_batch((size_t)SO.mq_batch);
    }
    flush(&prod);
}

/* ---- the phases ---------------------------------------------------------------------------------
 */

void soak_mq_start(void)
{
    if (SO.mq_rate <= 0)
        return;
    content = malloc((size_t)SO.mq_size + 1);
    if (!content)
        soak_die("out of memory");
    producer_id = 1 + (int64_t)(getpid() % 1000000);
    mdial(&prod);
    mdial(&watcher);
    mdial(&cons);
}

bool soak_mq_ready(void)
{
    return SO.mq_rate <= 0 || (prod.ready && watcher.ready && cons.ready);
}

bool soak_mq_drained(void)
{
    return SO.mq_rate <= 0 ||
           (inflight == 0 && SS.mq_pushed >= produced && SS.mq_consumed >= produced);
}

void soak_mq_check(void)
{
    if (inflight)
        soak_fail(SK_MQLOST, "%d produces never answered", inflight);
    for (uint64_t s = 0; s < produced; s++) {
        if (acked[s] <= 0) {
            soak_fail(SK_MQLOST, "seq %" PRIu64 " was never acked", s);
            continue;
        }
        if (pushed[s] != acked[s])
            soak_fail(SK_MQLOST,
                      "seq %" PRIu64 " acked at offset %" PRId64 ", pushed at %" PRId64
                      " (0: never, -1: twice)",
                      s, acked[s], pushed[s]);
        if (consumed[s] != acked[s])
            soak_fail(SK_MQLOST,
                      "seq %" PRIu64 " acked at offset %" PRId64 ", consumed at %" PRId64
                      " (0: never, -1: twice)",
                      s, acked[s], consumed[s]);
    }
}

void soak_mq_close(void)
{
    mclose(&prod, true, "");
    mclose(&watcher, true, "");
    mclose(&cons, true, "");
}

/* Frees the cores once the loop has closed the handles. */
void soak_mq_free(void)
{
    prod.mq = chanq_mq_free(prod.mq);
    watcher.mq = chanq_mq_free(watcher.mq);
    cons.mq = chanq_mq_free(cons.mq);
    free(acked);
    free(pushed);
    free(consumed);
    free(content);
}
