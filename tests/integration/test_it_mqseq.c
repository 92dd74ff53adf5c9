/* test_it_mqseq.c - idempotent produce and pushes to watchers, end to end (issue 10, items 9 and
 * 10): a real chanqd on SQLite (--backend=sqlite) or on the MariaDB server run_mariadb.sh
 * started (--backend=mysql, CQ_MARIADB_PORT), driven over the seed protocol and the HTTP API.
 *
 *   - (producer_id, seq) reused with other content is sequence_conflict (15), a seq below the
 *     producer's last one that is not a retry is sequence_out_of_order (16), a seq past 2^53 - 1
 *     is bad_field (5) naming "seq"; the refused messages are not stored;
 *   - an idempotent retry is acknowledged with the original offsets and not pushed again;
 *   - MariaDB only: a loopback TCP proxy between chanqd and MariaDB lets one COMMIT through and
 *     drops its reply (then refuses connections, so chanqd cannot check the outcome): the produce
 *     is answered storage (12) although it committed. The producer's retry gets the original
 *     offsets after a later produce moved the topic on, and a watcher must still receive every
 *     message exactly once, in offset order;
 *   - MariaDB only: the proxy holds one COMMIT, then cuts its connection without carrying it
 *     out and refuses the one connection chanqd makes to check: that produce is answered
 *     storage (12), nothing stored, while a later seq of the same producer, in flight behind
 *     it, commits. The retry with the same producer_id and seq is acknowledged.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_alloc.h"
#include "cq_mq.h"
#include "cq_testsrv.h"
#include "it_mq.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TMO     5000
#define MAX_U53 ((((int64_t)1) << 53) - 1)

/* ---- server and seed client (it_mq.h) ----------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    itmq_init("cqseq");
    return 0;
}

/* Starts chanqd on the test's store; db_port: where MariaDB is reached (the proxy, or 0 for
 * the server itself). */
static void start_srv_via(unsigned db_port)
{
    itmq_start_via(db_port, NULL, ITMQ_SEED | ITMQ_HTTP);
}

/* A producer connection that created topic and watches it. */
static mqc_t *watcher(const char *topic)
{
    mqc_t *c = mqc_connected(1, "");
    assert_int_equal(mqc_call_code(c, mqc_req(c, CQ_MQ_REQ_ADD_TOPIC, topic)), CQ_MQ_OK);
    assert_int_equal(mqc_call_code(c, mqc_req(c, CQ_MQ_REQ_WATCH, topic)), CQ_MQ_OK);
    return c;
}

/* Produces the n texts (pid 0: no idempotence key; message i has seq + i). Returns the
 * response: err_code, err_msg, offsets. */
static cq_mq_msg_t *produce_texts(mqc_t *c, const char *topic, const char *const *texts, size_t n,
                                  int64_t pid, int64_t seq)
{
    cq_mq_msg_t *m = mqc_req(c, CQ_MQ_REQ_PRODUCE, topic);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(cq_mq_msg_add_item(m, 0, -1, texts[i], strlen(texts[i]), false), 0);
    m->has |= n == 1 ? CQ_MQ_F_CONTENT : CQ_MQ_F_BATCH;
    if (pid) {
        m->producer_id = pid;
        m->seq = seq;
        m->has |= CQ_MQ_F_PRODUCER_ID | CQ_MQ_F_SEQ;
    }
    return mqc_call(c, m);
}

/* Produces one text; returns its err_code and, on success, its offset in *off. */
static uint32_t produce1(mqc_t *c, const char *topic, const char *text, int64_t pid, int64_t seq,
                         int64_t *off)
{
    cq_mq_msg_t *r = produce_texts(c, topic, &text, 1, pid, seq);
    uint32_t code = r->err_code;
    if (code == 0) {
        assert_int_equal(r->noffsets, 1);
        if (off)
            *off = r->offsets[0];
    }
    cq_mq_msg_free(r);
    return code;
}

/* Asserts that topic holds exactly the n texts, in order, at offs. */
static void expect_log(mqc_t *c, const char *topic, const char *const *texts, const int64_t *offs,
                       size_t n)
{
    cq_mq_msg_t *r = mqc_call(c, mqc_consume_msg(c, topic, 0, 100));
    assert_int_equal(r->err_code, 0);
    assert_int_equal(r->nitems, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(r->items[i].offset, offs[i]);
        assert_string_equal(r->items[i].content, texts[i]);
    }
    cq_mq_msg_free(r);
}

/* Reads pushes on w until n messages came; asserts their offsets and contents, in order. */
static void expect_pushed(mqc_t *w, const char *const *texts, const int64_t *offs, size_t n)
{
    size_t got = 0;
    while (got < n) {
        cq_mq_msg_t *m = mqc_recv(w);
        assert_int_equal(m->type, CQ_MQ_PUSH);
        for (size_t i = 0; i < m->nitems; i++, got++) {
            assert_true(got < n);
            if (m->items[i].offset != offs[got])
                fprintf(stderr, "# push %zu: offset %lld, want %lld\n", got,
                        (long long)m->items[i].offset, (long long)offs[got]);
            assert_int_equal(m->items[i].offset, offs[got]);
            assert_string_equal(m->items[i].content, texts[got]);
        }
        cq_mq_msg_free(m);
    }
}

/* ---- a tiny HTTP client -----------------------------------------------------------------------
 */

typedef struct hresp {
    int status;
    json_t *body; /* owned */
} hresp_t;

/* One request on a new connection (Connection: close); reads the whole answer. */
static hresp_t http(const char *method, const char *path, const char *body)
{
    char req[4096], resp[8192];
    int fd = cq_raw_connect(srv.mq_http_port);
    assert_true(fd >= 0);
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nContent-Type: application/json\r\n"
                     "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
                     method, path, (unsigned)srv.mq_http_port, strlen(body), body);
    assert_true(n > 0 && (size_t)n < sizeof(req));
    assert_int_equal(cq_raw_write(fd, req, (size_t)n), 0);
    size_t len = 0;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        assert_int_equal(poll(&p, 1, TMO), 1);
        ssize_t k = recv(fd, resp + len, sizeof(resp) - 1 - len, 0);
        assert_true(k >= 0);
        if (k == 0)
            break;
        len += (size_t)k;
    }
    close(fd);
    resp[len] = '\0';
    hresp_t r = {0, NULL};
    assert_int_equal(sscanf(resp, "HTTP/1.1 %d", &r.status), 1);
    const char *b = strstr(resp, "\r\n\r\n");
    assert_non_null(b);
    r.body = json_loads(b + 4, 0, NULL);
    assert_non_null(r.body);
    return r;
}

static int64_t jint(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    assert_true(json_is_integer(v));
    return (int64_t)json_integer_value(v);
}

/* POSTs body as a produce to topic; asserts status and err_code (0: success, returns the first
 * offset). A failure's err_msg must contain want_msg when given. */
static int64_t http_produce(const char *topic, const char *body, int status, int err_code,
                            const char *want_msg)
{
    char path[128];
    snprintf(path, sizeof(path), "/v1/topics/%s/messages", topic);
    hresp_t r = http("POST", path, body);
    if (r.status != status) {
        char *s = json_dumps(r.body, 0);
        fprintf(stderr, "# %s: %d %s\n", body, r.status, s);
        free(s);
    }
    assert_int_equal(r.status, status);
    int64_t off = 0;
    if (err_code) {
        assert_int_equal(jint(r.body, "err_code"), err_code);
        const char *msg = json_string_value(json_object_get(r.body, "err_msg"));
        assert_non_null(msg);
        if (want_msg && !strstr(msg, want_msg))
            fprintf(stderr, "# err_msg: %s\n", msg);
        assert_true(!want_msg || strstr(msg, want_msg));
    } else {
        json_t *offs = json_object_get(r.body, "offsets");
        assert_true(json_is_array(offs));
        off = (int64_t)json_integer_value(json_array_get(offs, 0));
    }
    json_decref(r.body);
    return off;
}

/* ---- a MariaDB proxy that loses one COMMIT's answer ------------------------------------------ */

/* PASS forwards; ARMED loses the next COMMIT's answer, then BLOCKED refuses every connection;
 * HOLD keeps the next COMMIT (then HELD, posting held), until CUT closes its connection without
 * carrying it out, and REFUSE_ONCE refuses the next connection, then passes. */
enum { PX_PASS, PX_ARMED, PX_BLOCKED, PX_HOLD, PX_HELD, PX_CUT, PX_REFUSE_ONCE };

typedef struct px_pair {
    int cfd, sfd; /* client (chanqd) side, server (MariaDB) side; -1 when unused */
    uint8_t *in;  /* client bytes not yet forwarded: whole packets go on */
    size_t len, cap;
    bool drop; /* forwarded the armed COMMIT: drop the server's answer, then close */
    bool hold; /* holds a COMMIT (PX_HOLD): forwards nothing more */
} px_pair_t;

#define PX_PAIRS 32

typedef struct proxy {
    int lfd;
    uint16_t port, upstream;
    pthread_t th;
    atomic_int mode;    /* PX_* */
    atomic_int dropped; /* COMMIT answers dropped */
    sem_t held;         /* posted when a COMMIT is held */
    atomic_bool stop;
    bool running; /* px_start ran, px_stop did not */
    px_pair_t pairs[PX_PAIRS];
} proxy_t;

static proxy_t px;

static void px_pair_close(px_pair_t *p)
{
    close(p->cfd);
    close(p->sfd);
    free(p->in);
    *p = (px_pair_t){.cfd = -1, .sfd = -1};
}

static void px_accept(proxy_t *x)
{
    int cfd = accept(x->lfd, NULL, NULL);
    if (cfd < 0)
        return;
    int once = PX_REFUSE_ONCE;
    if (atomic_load(&x->mode) == PX_BLOCKED ||
        atomic_compare_exchange_strong(&x->mode, &once, PX_PASS)) { /* the database is away */
        close(cfd);
        return;
    }
    int sfd = cq_raw_connect(x->upstream);
    for (int i = 0; sfd >= 0 && i < PX_PAIRS; i++) {
        if (x->pairs[i].cfd < 0) {
            x->pairs[i] = (px_pair_t){.cfd = cfd, .sfd = sfd};
            return;
        }
    }
    close(cfd);
    if (sfd >= 0)
        close(sfd);
}

/* Client bytes: forwards whole MySQL packets (3-byte length, sequence id, payload). When armed,
 * the packet COM_QUERY "COMMIT" goes on and its pair starts dropping the server's answer. */
static bool px_from_client(proxy_t *x, px_pair_t *p)
{
    if (p->cap - p->len < 65536) {
        p->cap = p->cap ? p->cap * 2 : 1 << 17;
        p->in = realloc(p->in, p->cap);
        assert_non_null(p->in);
    }
    ssize_t k = recv(p->cfd, p->in + p->len, p->cap - p->len, 0);
    if (k <= 0)
        return false;
    p->len += (size_t)k;
    size_t off = 0;
    while (p->len - off >= 4) {
        size_t plen = p->in[off] | (size_t)p->in[off + 1] << 8 | (size_t)p->in[off + 2] << 16;
        if (p->len - off < 4 + plen)
            break;
        int armed = PX_ARMED, hold = PX_HOLD;
        bool commit = plen == 7 && memcmp(p->in + off + 4,
                                          "\x03"
                                          "COMMIT",
                                          7) == 0;
        if (commit && atomic_compare_exchange_strong(&x->mode, &hold, PX_HELD)) {
            p->hold = true; /* kept, not forwarded */
            sem_post(&x->held);
            break;
        }
        if (commit && atomic_compare_exchange_strong(&x->mode, &armed, PX_BLOCKED))
            p->drop = true;
        if (cq_raw_write(p->sfd, p->in + off, 4 + plen) < 0)
            return false;
        off += 4 + plen;
    }
    memmove(p->in, p->in + off, p->len - off);
    p->len -= off;
    return true;
}

/* Server bytes: forwarded, unless they answer the dropped COMMIT (it was carried out). */
static bool px_from_server(proxy_t *x, px_pair_t *p)
{
    uint8_t b[65536];
    ssize_t k = recv(p->sfd, b, sizeof(b), 0);
    if (k <= 0)
        return false;
    if (p->drop) {
        atomic_fetch_add(&x->dropped, 1);
        return false;
    }
    return cq_raw_write(p->cfd, b, (size_t)k) == 0;
}

/* CUT: the held COMMIT's connection closes, never carried out; chanqd's check is refused. */
static void px_cut(proxy_t *x)
{
    int cut = PX_CUT;
    if (!atomic_compare_exchange_strong(&x->mode, &cut, PX_REFUSE_ONCE))
        return;
    for (int i = 0; i < PX_PAIRS; i++)
        if (x->pairs[i].cfd >= 0 && x->pairs[i].hold)
            px_pair_close(&x->pairs[i]);
}

static void *px_run(void *arg)
{
    proxy_t *x = arg;
    while (!atomic_load(&x->stop)) {
        px_cut(x);
        struct pollfd fds[1 + 2 * PX_PAIRS];
        int map[1 + 2 * PX_PAIRS];
        nfds_t n = 0;
        fds[n] = (struct pollfd){x->lfd, POLLIN, 0};
        map[n++] = -1;
        for (int i = 0; i < PX_PAIRS; i++) {
            if (x->pairs[i].cfd < 0)
                continue;
            fds[n] = (struct pollfd){x->pairs[i].cfd, x->pairs[i].hold ? 0 : POLLIN, 0};
            map[n++] = 2 * i;
            fds[n] = (struct pollfd){x->pairs[i].sfd, POLLIN, 0};
            map[n++] = 2 * i + 1;
        }
        if (poll(fds, n, 50) <= 0)
            continue;
        for (nfds_t j = 0; j < n; j++) {
            if (!fds[j].revents)
                continue;
            if (map[j] < 0) {
                px_accept(x);
                continue;
            }
            px_pair_t *p = &x->pairs[map[j] / 2];
            if (p->cfd < 0)
                continue; /* closed by its other half in this round */
            bool ok = map[j] % 2 ? px_from_server(x, p) : px_from_client(x, p);
            if (!ok)
                px_pair_close(p);
        }
    }
    return NULL;
}

static void px_start(uint16_t upstream)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    memset(&px, 0, sizeof(px));
    for (int i = 0; i < PX_PAIRS; i++)
        px.pairs[i] = (px_pair_t){.cfd = -1, .sfd = -1};
    px.upstream = upstream;
    assert_int_equal(sem_init(&px.held, 0, 0), 0);
    px.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); /* not chanqd's to keep */
    assert_true(px.lfd >= 0);
    assert_int_equal(bind(px.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(px.lfd, 16), 0);
    assert_int_equal(getsockname(px.lfd, (struct sockaddr *)&a, &alen), 0);
    px.port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&px.th, NULL, px_run, &px), 0);
    px.running = true;
}

static void px_stop(void)
{
    if (!px.running)
        return;
    px.running = false;
    atomic_store(&px.stop, true);
    pthread_join(px.th, NULL);
    for (int i = 0; i < PX_PAIRS; i++)
        if (px.pairs[i].cfd >= 0)
            px_pair_close(&px.pairs[i]);
    close(px.lfd);
    sem_destroy(&px.held);
}

/* The MariaDB cases' teardown: chanqd first (it may still talk to the database), then the
 * proxy, also when the case failed: a proxy thread left running would share px with the next
 * case's and wedge its connections. */
static int teardown_px(void **state)
{
    itmq_teardown(state);
    px_stop();
    return 0;
}

/* ---- cases ---------------------------------------------------------------------------------- */

/* (producer_id, seq) with other content: 15, nothing stored, the original still answers. */
static void test_conflict_seed(void **state)
{
    (void)state;
    start_srv_via(0);
    mqc_t *w = watcher("orders"), *c = mqc_connected(1, "");
    int64_t o1 = 0, o2 = 0, again = 0;
    assert_int_equal(produce1(c, "orders", "buy 1", 5, 1, &o1), CQ_MQ_OK);
    cq_mq_msg_t *r = produce_texts(c, "orders", (const char *[]){"buy 2"}, 1, 5, 1);
    assert_int_equal(r->err_code, CQ_MQ_ERR_SEQUENCE_CONFLICT);
    assert_int_equal(r->noffsets, 0);
    assert_non_null(strstr(r->err_msg, "other content"));
    cq_mq_msg_free(r);
    /* A batch whose second message (seq 2) is new and whose first conflicts fails whole. */
    r = produce_texts(c, "orders", (const char *[]){"buy 1!", "buy 3"}, 2, 5, 1);
    assert_int_equal(r->err_code, CQ_MQ_ERR_SEQUENCE_CONFLICT);
    cq_mq_msg_free(r);
    /* Same content: a retry, the original offset; other producers are not affected. */
    assert_int_equal(produce1(c, "orders", "buy 1", 5, 1, &again), CQ_MQ_OK);
    assert_int_equal(again, o1);
    assert_int_equal(produce1(c, "orders", "buy 2", 6, 1, &o2), CQ_MQ_OK);
    assert_true(o2 > o1);
    expect_pushed(w, (const char *[]){"buy 1", "buy 2"}, (int64_t[]){o1, o2}, 2);
    expect_log(c, "orders", (const char *[]){"buy 1", "buy 2"}, (int64_t[]){o1, o2}, 2);
    mqc_close(w);
    mqc_close(c);
}

/* A seq below the producer's last one that is not a retry: 16; retries of older ones work. */
static void test_order_seed(void **state)
{
    (void)state;
    start_srv_via(0);
    mqc_t *w = watcher("orders"), *c = mqc_connected(1, "");
    int64_t o[4] = {0}, again = 0;
    cq_mq_msg_t *r = produce_texts(c, "orders", (const char *[]){"s10", "s11"}, 2, 9, 10);
    assert_int_equal(r->err_code, CQ_MQ_OK);
    o[0] = r->offsets[0];
    o[1] = r->offsets[1];
    cq_mq_msg_free(r);
    r = produce_texts(c, "orders", (const char *[]){"s5"}, 1, 9, 5); /* the producer reset */
    assert_int_equal(r->err_code, CQ_MQ_ERR_SEQUENCE_OUT_OF_ORDER);
    assert_int_equal(r->noffsets, 0);
    assert_non_null(strstr(r->err_msg, "below its last"));
    cq_mq_msg_free(r);
    assert_int_equal(produce1(c, "orders", "s10", 9, 10, &again), CQ_MQ_OK); /* an old retry */
    assert_int_equal(again, o[0]);
    assert_int_equal(produce1(c, "orders", "s7", 9, 7, NULL), CQ_MQ_ERR_SEQUENCE_OUT_OF_ORDER);
    assert_int_equal(produce1(c, "orders", "s20", 9, 20, &o[2]), CQ_MQ_OK); /* gaps are fine */
    assert_int_equal(produce1(c, "orders", "s5", 10, 5, &o[3]), CQ_MQ_OK);  /* another producer */
    expect_pushed(w, (const char *[]){"s10", "s11", "s20", "s5"}, o, 4);
    mqc_close(w);
    mqc_close(c);
}

/* seq stays a JSON-safe integer: the last message of a batch has seq + n - 1. */
static void test_seq_range_seed(void **state)
{
    (void)state;
    start_srv_via(0);
    mqc_t *c = mqc_connected(1, "");
    assert_int_equal(mqc_call_code(c, mqc_req(c, CQ_MQ_REQ_ADD_TOPIC, "orders")), CQ_MQ_OK);
    cq_mq_msg_t *r = produce_texts(c, "orders", (const char *[]){"a", "b", "c"}, 3, 4, MAX_U53 - 1);
    assert_int_equal(r->err_code, CQ_MQ_ERR_BAD_FIELD);
    assert_non_null(strstr(r->err_msg, "field \"seq\""));
    cq_mq_msg_free(r);
    r = produce_texts(c, "orders", (const char *[]){"a", "b"}, 2, 4, MAX_U53 - 1);
    assert_int_equal(r->err_code, CQ_MQ_OK); /* exactly the limit */
    cq_mq_msg_free(r);
    mqc_close(c);
}

/* The same rules over the HTTP API, with their statuses. */
static void test_rules_http(void **state)
{
    (void)state;
    start_srv_via(0);
    hresp_t r = http("POST", "/v1/topics", "{\"topic\":\"orders\"}");
    assert_int_equal(r.status, 200);
    json_decref(r.body);
    int64_t o1 =
        http_produce("orders", "{\"content\":\"x\",\"producer_id\":3,\"seq\":4}", 200, 0, NULL);
    assert_int_equal(
        http_produce("orders", "{\"content\":\"x\",\"producer_id\":3,\"seq\":4}", 200, 0, NULL),
        o1);
    http_produce("orders", "{\"content\":\"y\",\"producer_id\":3,\"seq\":4}", 409,
                 CQ_MQ_ERR_SEQUENCE_CONFLICT, "other content");
    http_produce("orders", "{\"content\":\"z\",\"producer_id\":3,\"seq\":2}", 409,
                 CQ_MQ_ERR_SEQUENCE_OUT_OF_ORDER, "below its last");
    /* Inside one request: a repeat with other content, and a seq going down. */
    http_produce("orders",
                 "{\"messages\":[{\"content\":\"p\",\"producer_id\":3,\"seq\":8},"
                 "{\"content\":\"q\",\"producer_id\":3,\"seq\":8}]}",
                 409, CQ_MQ_ERR_SEQUENCE_CONFLICT, "other content");
    http_produce("orders",
                 "{\"messages\":[{\"content\":\"p\",\"producer_id\":3,\"seq\":9},"
                 "{\"content\":\"q\",\"producer_id\":3,\"seq\":6}]}",
                 409, CQ_MQ_ERR_SEQUENCE_OUT_OF_ORDER, NULL);
    http_produce("orders", "{\"content\":\"w\",\"producer_id\":3,\"seq\":9007199254740992}", 400,
                 CQ_MQ_ERR_BAD_FIELD, "seq");
    int64_t o2 = http_produce(
        "orders", "{\"content\":\"w\",\"producer_id\":3,\"seq\":9007199254740991}", 200, 0, NULL);
    assert_true(o2 > o1);
    /* Nothing refused was stored. */
    mqc_t *c = mqc_connected(1, "");
    expect_log(c, "orders", (const char *[]){"x", "w"}, (int64_t[]){o1, o2}, 2);
    mqc_close(c);
}

/* An idempotent retry is acknowledged again but pushed once. */
static void test_retry_pushed_once(void **state)
{
    (void)state;
    start_srv_via(0);
    mqc_t *w = watcher("feed"), *p = mqc_connected(1, "");
    const char *const texts[] = {"r-1", "r-2"};
    cq_mq_msg_t *a = produce_texts(p, "feed", texts, 2, 11, 1);
    assert_int_equal(a->err_code, CQ_MQ_OK);
    expect_pushed(w, texts, a->offsets, 2);
    cq_mq_msg_t *b = produce_texts(p, "feed", texts, 2, 11, 1);
    assert_int_equal(b->err_code, CQ_MQ_OK);
    assert_memory_equal(b->offsets, a->offsets, 2 * sizeof(int64_t));
    int64_t next = 0;
    assert_int_equal(produce1(p, "feed", "n", 0, 0, &next), CQ_MQ_OK);
    expect_pushed(w, (const char *[]){"n"}, &next, 1); /* the next push is the new message */
    cq_mq_msg_free(a);
    cq_mq_msg_free(b);
    mqc_close(w);
    mqc_close(p);
}

/* The topic's counters, add_topic's topic_message_total and consume's total, are both want. */
static void expect_counts(mqc_t *c, const char *topic, int64_t want)
{
    cq_mq_msg_t *r = mqc_call(c, mqc_req(c, CQ_MQ_REQ_ADD_TOPIC, topic));
    assert_int_equal(r->err_code, 0);
    assert_int_equal(r->topic_message_total, want);
    cq_mq_msg_free(r);
    r = mqc_call(c, mqc_consume_msg(c, topic, 0, 1));
    assert_int_equal(r->err_code, 0);
    assert_int_equal(r->total, want);
    cq_mq_msg_free(r);
}

/* MariaDB: COMMIT carried out, its answer lost, the outcome not checkable: storage (12). The
 * watcher still gets every message once, in offset order, though the retry's offsets are
 * below a later produce's; every answer counts the messages consume returns, the ones of the
 * lost answer included. */
static void test_push_gap_mariadb(void **state)
{
    (void)state;
    px_start((uint16_t)mysql_port);
    start_srv_via(px.port);
    mqc_t *w = watcher("gap"), *p = mqc_connected(1, ""), *q = mqc_connected(1, "");
    const char *const a[] = {"a-1", "a-2", "a-3"};
    atomic_store(&px.mode, PX_ARMED);
    cq_mq_msg_t *r = produce_texts(p, "gap", a, 3, 7, 1);
    assert_int_equal(r->err_code, CQ_MQ_ERR_STORAGE);
    /* the database's words, then once what was done and what to do */
    const char *post = "; COMMIT outcome unknown (cannot check); nothing was acknowledged: retry "
                       "with the same producer_id and seq";
    print_message("# err_msg: %s\n", r->err_msg);
    assert_true(strlen(r->err_msg) > strlen(post));
    assert_string_equal(r->err_msg + strlen(r->err_msg) - strlen(post), post);
    assert_int_equal(strncmp(r->err_msg, "produce: storage error: ", 24), 0);
    size_t acks = 0;
    for (const char *at = r->err_msg; (at = strstr(at, "acknowledged")) != NULL; at++)
        acks++;
    assert_int_equal(acks, 1);
    cq_mq_msg_free(r);
    assert_int_equal(atomic_load(&px.dropped), 1); /* MariaDB carried the COMMIT out */
    assert_true(cq_testsrv_log_wait(&srv, "COMMIT outcome unknown", TMO));
    atomic_store(&px.mode, PX_PASS); /* the database is back */
    int64_t all[5];
    r = produce_texts(q, "gap", (const char *[]){"b"}, 1, 0, 0);
    assert_int_equal(r->err_code, CQ_MQ_OK);
    assert_int_equal(r->total, 4); /* a-1..a-3 are stored */
    all[3] = r->offsets[0];
    cq_mq_msg_free(r);
    r = produce_texts(p, "gap", a, 3, 7, 1); /* the retry finds the committed rows */
    assert_int_equal(r->err_code, CQ_MQ_OK);
    assert_int_equal(r->total, 4); /* not counted twice */
    memcpy(all, r->offsets, 3 * sizeof(int64_t));
    cq_mq_msg_free(r);
    assert_true(all[2] < all[3]);
    r = produce_texts(q, "gap", (const char *[]){"c"}, 1, 0, 0);
    assert_int_equal(r->err_code, CQ_MQ_OK);
    assert_int_equal(r->total, 5);
    all[4] = r->offsets[0];
    cq_mq_msg_free(r);
    expect_pushed(w, (const char *[]){"a-1", "a-2", "a-3", "b", "c"}, all, 5);
    expect_log(w, "gap", (const char *[]){"a-1", "a-2", "a-3", "b", "c"}, all, 5);
    expect_counts(w, "gap", 5);
    mqc_close(w);
    mqc_close(p);
    mqc_close(q);
}

/* Sends a produce of text (producer pid, seq) without waiting; returns its askid. */
static uint32_t produce_send(mqc_t *c, const char *topic, const char *text, int64_t pid,
                             int64_t seq)
{
    cq_mq_msg_t *m = mqc_req(c, CQ_MQ_REQ_PRODUCE, topic);
    assert_int_equal(cq_mq_msg_add_item(m, 0, -1, text, strlen(text), false), 0);
    m->producer_id = pid;
    m->seq = seq;
    m->has |= CQ_MQ_F_CONTENT | CQ_MQ_F_PRODUCER_ID | CQ_MQ_F_SEQ;
    uint32_t askid = m->askid;
    mqc_send(c, m);
    return askid;
}

/* MariaDB: seqs 2 and 3 of one producer in flight; seq 2's COMMIT is held, then its connection
 * cut without it being carried out, and chanqd's check refused: storage (12), nothing stored.
 * Seq 3 commits once the database answers again. The retry of seq 2, below the producer's last
 * stored seq now, is acknowledged (this server refused it: a retryable hole), with an offset
 * after seq 3's: offsets follow the commits. */
static void test_retry_below_last_mariadb(void **state)
{
    (void)state;
    px_start((uint16_t)mysql_port);
    start_srv_via(px.port);
    mqc_t *p = mqc_connected(1, "");
    assert_int_equal(mqc_call_code(p, mqc_req(p, CQ_MQ_REQ_ADD_TOPIC, "holes")), CQ_MQ_OK);
    int64_t off[5] = {0};
    assert_int_equal(produce1(p, "holes", "h1", 5, 1, &off[1]), CQ_MQ_OK);
    atomic_store(&px.mode, PX_HOLD);
    uint32_t ask2 = produce_send(p, "holes", "h2", 5, 2);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += TMO / 1000;
    assert_int_equal(sem_timedwait(&px.held, &ts), 0); /* seq 2's transaction is at its COMMIT */
    uint32_t ask3 = produce_send(p, "holes", "h3", 5, 3);
    atomic_store(&px.mode, PX_CUT);
    for (int i = 0; i < 2; i++) {
        cq_mq_msg_t *r = mqc_recv(p);
        assert_int_equal(r->type, CQ_MQ_RESP_PRODUCE);
        if (r->askid == ask2) {
            print_message("# err_msg: %s\n", r->err_msg);
            assert_int_equal(r->err_code, CQ_MQ_ERR_STORAGE);
            const char *post =
                "; nothing was acknowledged: retry with the same producer_id and seq";
            assert_string_equal(r->err_msg + strlen(r->err_msg) - strlen(post), post);
        } else {
            assert_int_equal(r->askid, ask3);
            assert_int_equal(r->err_code, CQ_MQ_OK);
            off[3] = r->offsets[0];
        }
        cq_mq_msg_free(r);
    }
    assert_true(off[3] > off[1]);
    assert_int_equal(produce1(p, "holes", "h2", 5, 2, &off[2]), CQ_MQ_OK); /* the retry */
    assert_true(off[2] > off[3]);
    int64_t again = 0;
    assert_int_equal(produce1(p, "holes", "h2", 5, 2, &again), CQ_MQ_OK); /* a duplicate now */
    assert_int_equal(again, off[2]);
    assert_int_equal(produce1(p, "holes", "h0", 5, 0, NULL), CQ_MQ_ERR_SEQUENCE_OUT_OF_ORDER);
    assert_int_equal(produce1(p, "holes", "h4", 5, 4, &off[4]), CQ_MQ_OK);
    expect_log(p, "holes", (const char *[]){"h1", "h3", "h2", "h4"},
               (int64_t[]){off[1], off[3], off[2], off[4]}, 4);
    expect_counts(p, "holes", 4);
    mqc_close(p);
}

int main(int argc, char **argv)
{
    if (!itmq_backend(argc, argv, true))
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_conflict_seed, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_order_seed, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_seq_range_seed, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_rules_http, setup, itmq_teardown),
        cmocka_unit_test_setup_teardown(test_retry_pushed_once, setup, itmq_teardown),
        /* MariaDB only */
        cmocka_unit_test_setup_teardown(test_push_gap_mariadb, setup, teardown_px),
        cmocka_unit_test_setup_teardown(test_retry_below_last_mariadb, setup, teardown_px),
    };
    size_t n = sizeof(tests) / sizeof(tests[0]) - (use_mysql ? 0 : 2);
    return _cmocka_run_group_tests(use_mysql ? "it-mqseq-mariadb" : "it-mqseq-sqlite", tests, n,
                                   NULL, NULL);
}
