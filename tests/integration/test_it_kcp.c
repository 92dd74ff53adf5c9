/* test_it_kcp.c - chanqd's KCP listener, driven by chanq's own KCP engine as the client over a
 * real UDP socket (the kcp-go interop runs are in the shared scenarios, --transport=kcp).
 *
 * Covers what the bridge cannot show: loss injected on both directions, a 40 KB packet each way,
 * idle timeout, the per-address limit, a malformed datagram closing only its connection, and the
 * tombstone that keeps a closed connection's retransmissions from opening a new one.
 */
#include "it_common.h"

#include "chanq.h"
#include "chanq_sync.h"
#include "channeld.pb-c.h"
#include "cq_alloc.h"
#include "cq_clock.h"
#include "cq_kcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXQ 256

typedef struct kc {
    int fd;
    cq_kcp_t *k;
    chanq_client_t *cli;
    uint32_t rng;
    unsigned loss_pct; /* datagrams dropped in each direction */
    chanq_owned_msg_t q[MAXQ];
    int qh, qn;
    uint32_t conn_id;
} kc_t;

static uint32_t rnd(kc_t *c)
{
    c->rng = c->rng * 1103515245u + 12345u;
    return c->rng >> 8;
}

static void kc_out(void *ud, const uint8_t *d, size_t n)
{
    kc_t *c = ud;
    if (c->loss_pct && rnd(c) % 100 < c->loss_pct)
        return;
    (void)!send(c->fd, d, n, 0);
}

static void kc_msg(void *ud, const chanq_msg_t *m)
{
    kc_t *c = ud;
    if (c->qn == MAXQ)
        return;
    if (chanq_owned_msg_copy(m, &c->q[(c->qh + c->qn) % MAXQ]) == 0)
        c->qn++;
}

static kc_t *kc_new(uint16_t port, uint32_t conv)
{
    kc_t *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->rng = conv;
    c->fd = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(c->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(c->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cq_kcp_opts_t o = cq_kcp_opts_fast();
    c->k = cq_kcp_new(conv, &o, kc_out, c);
    assert_non_null(c->k);
    chanq_opts_t co;
    chanq_opts_init(&co);
    co.on_message = kc_msg;
    co.ud = c;
    assert_int_equal(chanq_client_new(&co, &c->cli), 0);
    return c;
}

static void kc_free(kc_t *c)
{
    if (!c)
        return;
    while (c->qn) {
        chanq_owned_msg_done(&c->q[c->qh]);
        c->qh = (c->qh + 1) % MAXQ;
        c->qn--;
    }
    cq_kcp_free(c->k);
    chanq_client_free(c->cli);
    close(c->fd);
    free(c);
}

/* Moves queued client bytes into KCP, runs timers, reads datagrams for up to ms. */
static void kc_pump(kc_t *c, int ms)
{
    uint64_t end = cq_clock_mono_ms() + (uint64_t)ms;
    for (;;) {
        const uint8_t *p;
        size_t n;
        while (chanq_client_out(c->cli, &p, &n) == 0 && n) {
            ssize_t took = cq_kcp_send(c->k, p, n);
            assert_true(took >= 0);
            if (took == 0)
                break;
            chanq_client_out_consume(c->cli, (size_t)took);
        }
        uint64_t now = cq_clock_mono_ms();
        cq_kcp_update(c->k, now);
        uint8_t buf[65536];
        size_t got;
        while ((got = cq_kcp_recv(c->k, buf, sizeof(buf))) > 0)
            assert_true(chanq_client_feed(c->cli, buf, got) >= 0);
        if (now >= end)
            return;
        uint64_t next = cq_kcp_check(c->k, now);
        int wait = (int)(next > now ? next - now : 0);
        if (wait > (int)(end - now))
            wait = (int)(end - now);
        struct pollfd pf = {c->fd, POLLIN, 0};
        if (poll(&pf, 1, wait) > 0) {
            ssize_t k = recv(c->fd, buf, sizeof(buf), 0);
            if (k > 0 && !(c->loss_pct && rnd(c) % 100 < c->loss_pct))
                cq_kcp_input(c->k, buf, (size_t)k, cq_clock_mono_ms());
        }
    }
}

/* Waits for a message of msg_type (others are dropped). Returns true if one arrived. */
static bool kc_wait(kc_t *c, uint32_t msg_type, chanq_owned_msg_t *out, int timeout_ms)
{
    uint64_t end = cq_clock_mono_ms() + (uint64_t)timeout_ms;
    for (;;) {
        while (c->qn) {
            chanq_owned_msg_t m = c->q[c->qh];
            c->qh = (c->qh + 1) % MAXQ;
            c->qn--;
            if (m.msg_type == msg_type) {
                *out = m;
                return true;
            }
            chanq_owned_msg_done(&m);
        }
        if (cq_clock_mono_ms() >= end)
            return false;
        kc_pump(c, 20);
    }
}

static void kc_auth(kc_t *c)
{
    assert_int_equal(chanq_client_auth(c->cli, 1, "kcp", "lt"), 0);
    chanq_owned_msg_t m;
    assert_true(kc_wait(c, MT_AUTH, &m, IT_TIMEOUT_MS * 2));
    Channeldpb__AuthResultMessage *ar =
        chanq_unpack(&channeldpb__auth_result_message__descriptor, m.body, m.body_len);
    assert_non_null(ar);
    assert_int_equal(ar->result, CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__SUCCESSFUL);
    c->conn_id = ar->connid;
    assert_true(c->conn_id > 0);
    chanq_unpack_free(ar);
    chanq_owned_msg_done(&m);
}

/* Waits until the connection_num gauge equals want; returns the last value read. */
static int64_t wait_conns(int64_t want)
{
    int64_t v = -1;
    for (int i = 0; i < IT_TIMEOUT_MS / 50; i++) {
        v = cq_testsrv_metric(it_srv(), "connection_num");
        if (v == want)
            break;
        usleep(50 * 1000);
    }
    return v;
}

static void start_kcp(const char *extra)
{
    if (extra)
        it_start("--kcp-idle-timeout-ms", extra, NULL);
    else
        it_start(NULL);
    assert_true(it_srv()->kcp_port > 0);
}

/* A server broadcast reaches a KCP client, with 10% loss each way, big packets both ways. */
static void test_kcp_broadcast_lossy_big(void **state)
{
    start_kcp(NULL);
    it_conn_t *srv = it_gowner();
    kc_t *c = kc_new(it_srv()->kcp_port, 0x12345678u);
    c->loss_pct = 10;
    kc_auth(c);
    /* The client FSM lets only servers subscribe clients to GLOBAL. */
    assert_int_equal(chanq_sync_sub_to_channel(srv->s, 2, 0, c->conn_id, NULL), 0);
    chanq_owned_msg_t m;
    assert_true(kc_wait(c, MT_SUB, &m, IT_TIMEOUT_MS * 2));
    chanq_owned_msg_done(&m);

    /* 20 broadcasts in order, then a 40 KB one. */
    char payload[41000];
    for (int i = 0; i < 20; i++) {
        snprintf(payload, sizeof(payload), "msg-%02d", i);
        it_sfwd(srv, 0, BC_ALL, 200, 0, payload);
    }
    memset(payload, 'x', 40000);
    payload[40000] = '\0';
    it_sfwd(srv, 0, BC_ALL, 201, 0, payload);
    for (int i = 0; i < 20; i++) {
        assert_true(kc_wait(c, 200, &m, IT_TIMEOUT_MS * 3));
        Channeldpb__ServerForwardMessage *f =
            chanq_unpack(&channeldpb__server_forward_message__descriptor, m.body, m.body_len);
        assert_non_null(f);
        char want[16];
        snprintf(want, sizeof(want), "msg-%02d", i);
        assert_int_equal(f->payload.len, strlen(want));
        assert_memory_equal(f->payload.data, want, strlen(want));
        chanq_unpack_free(f);
        chanq_owned_msg_done(&m);
    }
    assert_true(kc_wait(c, 201, &m, IT_TIMEOUT_MS * 3));
    Channeldpb__ServerForwardMessage *f =
        chanq_unpack(&channeldpb__server_forward_message__descriptor, m.body, m.body_len);
    assert_non_null(f);
    assert_int_equal(f->payload.len, 40000);
    assert_int_equal(f->payload.data[39999], 'x');
    chanq_unpack_free(f);
    chanq_owned_msg_done(&m);

    /* 40 KB from the KCP client to the GLOBAL owner. */
    uint8_t big[40000];
    memset(big, 'y', sizeof(big));
    assert_int_equal(chanq_client_user_msg(c->cli, 0, BC_SINGLE, 202, big, sizeof(big)), 0);
    kc_pump(c, 50);
    chanq_owned_msg_t sm;
    for (;;) {
        kc_pump(c, 10);
        int r = chanq_sync_recv(srv->s, &sm, 50);
        if (r == 0 && sm.msg_type == 202)
            break;
        if (r == 0)
            chanq_owned_msg_done(&sm);
    }
    Channeldpb__ServerForwardMessage *g =
        chanq_unpack(&channeldpb__server_forward_message__descriptor, sm.body, sm.body_len);
    assert_non_null(g);
    assert_int_equal(g->clientconnid, c->conn_id);
    assert_int_equal(g->payload.len, sizeof(big));
    assert_memory_equal(g->payload.data, big, sizeof(big));
    chanq_unpack_free(g);
    chanq_owned_msg_done(&sm);
    kc_free(c);
}

/* Item 13: --kcp-profile kcp-go under 10% loss each way, with a client tuned as game clients
 * tune kcp-go (the fast profile: NoDelay 1,10,2,1, windows 128, ACK no-delay). 200 broadcasts
 * of 1000 bytes, one every 10 ms, all arrive in order. The elapsed time is printed for the record
 * (issue 10 measured 5.2-7.3 s against 1.9-2.3 s for a kcp-go server); it is not asserted. */
static void test_kcp_go_profile_lossy_broadcasts(void **state)
{
    it_start("--kcp-profile", "kcp-go", NULL);
    assert_true(it_srv()->kcp_port > 0);
    it_conn_t *srv = it_gowner();
    kc_t *c = kc_new(it_srv()->kcp_port, 0x13131313u);
    c->loss_pct = 10;
    kc_auth(c);
    assert_int_equal(chanq_sync_sub_to_channel(srv->s, 2, 0, c->conn_id, NULL), 0);
    chanq_owned_msg_t m;
    assert_true(kc_wait(c, MT_SUB, &m, IT_TIMEOUT_MS * 2));
    chanq_owned_msg_done(&m);
    uint64_t t0 = cq_clock_mono_ms();
    int got = 0;
    char payload[1001];
    memset(payload, 'p', sizeof(payload) - 1);
    payload[sizeof(payload) - 1] = '\0';
    for (int i = 0; i < 200 || got < 200;) {
        if (i < 200 && cq_clock_mono_ms() >= t0 + 10u * (uint64_t)i) {
            memcpy(payload, "b-", 2);
            payload[2] = (char)('0' + i / 100);
            payload[3] = (char)('0' + i / 10 % 10);
            payload[4] = (char)('0' + i % 10);
            i++;
            it_sfwd(srv, 0, BC_ALL, 200, 0, payload);
        }
        while (got < 200 && kc_wait(c, 200, &m, 0)) {
            Channeldpb__ServerForwardMessage *f =
                chanq_unpack(&channeldpb__server_forward_message__descriptor, m.body, m.body_len);
            assert_non_null(f);
            char want[16];
            snprintf(want, sizeof(want), "b-%03d", got++);
            assert_int_equal(f->payload.len, 1000);
            assert_memory_equal(f->payload.data, want, 5);
            assert_int_equal(f->payload.data[999], 'p');
            chanq_unpack_free(f);
            chanq_owned_msg_done(&m);
        }
        assert_true(cq_clock_mono_ms() < t0 + 60000); /* a safety stop, not a timing check */
        kc_pump(c, 2);
    }
    print_message("# 200 broadcasts over kcp-go profile, 10%% loss: %llu ms\n",
                  (unsigned long long)(cq_clock_mono_ms() - t0));
    kc_free(c);
}

/* Silence closes the connection after --kcp-idle-timeout-ms. */
static void test_kcp_idle_timeout(void **state)
{
    start_kcp("1000");
    kc_t *c = kc_new(it_srv()->kcp_port, 0x1111u);
    kc_auth(c);
    assert_int_equal(cq_testsrv_metric(it_srv(), "connection_num"), 1);
    sleep(2); /* no pumping: chanqd hears nothing */
    assert_int_equal(wait_conns(0), 0);
    kc_free(c);
}

/* A datagram with an unknown command closes that connection only; another keeps working, and
 * the closed one's later datagrams (same conv) do not open a new connection. */
static void test_kcp_malformed_closes_one(void **state)
{
    start_kcp(NULL);
    it_conn_t *srv = it_gowner();
    kc_t *a = kc_new(it_srv()->kcp_port, 0xaaaa0001u);
    kc_t *b = kc_new(it_srv()->kcp_port, 0xbbbb0002u);
    kc_auth(a);
    kc_auth(b);
    assert_int_equal(cq_testsrv_metric(it_srv(), "connection_num"), 3);
    uint8_t bad[24] = {0};
    uint32_t conv = 0xaaaa0001u;
    memcpy(bad, &conv, 4);
    bad[4] = 99; /* no such command */
    assert_int_equal(send(a->fd, bad, sizeof(bad), 0), (ssize_t)sizeof(bad));
    assert_int_equal(wait_conns(2), 2);
    /* b still gets messages. */
    it_sfwd(srv, 0, BC_SINGLE, 300, b->conn_id, "still here");
    chanq_owned_msg_t m;
    assert_true(kc_wait(b, 300, &m, IT_TIMEOUT_MS));
    chanq_owned_msg_done(&m);
    /* a's conversation is a tombstone: what it sends reaches nobody and opens nothing. */
    assert_int_equal(chanq_client_user_msg(a->cli, 0, 0, 301, "x", 1), 0);
    kc_pump(a, 500);
    assert_int_equal(chanq_sync_recv_type(srv->s, 301, &m, 300), CQ_ETIMEOUT);
    assert_int_equal(cq_testsrv_metric(it_srv(), "connection_num"), 2);
    /* A new conversation from the same port (PUSH sn 0, new conv) replaces it. */
    kc_t *a2 = kc_new(it_srv()->kcp_port, 0xaaaa0003u);
    close(a2->fd);
    a2->fd = dup(a->fd);
    kc_auth(a2);
    assert_int_equal(cq_testsrv_metric(it_srv(), "connection_num"), 3);
    kc_free(a);
    kc_free(a2);
    kc_free(b);
}

/* --kcp-max-per-addr bounds the connections one source address can open. */
static void test_kcp_per_addr_limit(void **state)
{
    it_start("--kcp-max-per-addr", "2", NULL);
    kc_t *c[3];
    for (int i = 0; i < 3; i++)
        c[i] = kc_new(it_srv()->kcp_port, 0x5000u + (uint32_t)i);
    kc_auth(c[0]);
    kc_auth(c[1]);
    assert_int_equal(chanq_client_auth(c[2]->cli, 1, "kcp", "lt"), 0);
    chanq_owned_msg_t m;
    assert_false(kc_wait(c[2], MT_AUTH, &m, 800));
    for (int i = 0; i < 3; i++)
        kc_free(c[i]);
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_kcp_broadcast_lossy_big), IT_TEST(test_kcp_go_profile_lossy_broadcasts),
    IT_TEST(test_kcp_idle_timeout),        IT_TEST(test_kcp_malformed_closes_one),
    IT_TEST(test_kcp_per_addr_limit),
};

IT_MAIN(tests)
