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

/* The server log's length now: checks below look only at what was logged after it. */
static size_t log_len(void)
{
    char *log = cq_testsrv_log(it_srv());
    size_t n = log ? strlen(log) : 0;
    free(log);
    return n;
}

/* True if needle appears in the log after offset off within timeout_ms. */
static bool log_has_from(size_t off, const char *needle, int timeout_ms)
{
    uint64_t end = cq_clock_mono_ms() + (uint64_t)timeout_ms;
    for (;;) {
        char *log = cq_testsrv_log(it_srv());
        bool found = log && strlen(log) > off && strstr(log + off, needle);
        free(log);
        if (found || cq_clock_mono_ms() >= end)
            return found;
        usleep(10 * 1000);
    }
}

/* Polls the metric until it equals want (or IT_TIMEOUT_MS passes); returns the last value. */
static int64_t wait_metric(const char *name, int64_t want)
{
    int64_t v = -1;
    for (int i = 0; i < IT_TIMEOUT_MS / 20; i++) {
        v = cq_testsrv_metric(it_srv(), name);
        if (v == want)
            break;
        usleep(20 * 1000);
    }
    return v;
}

/* Moves the client's queued bytes into its engine and sends them with one flush, as one
 * datagram for a small request; nothing is resent after (the engine is not updated). */
static size_t kc_send_once(kc_t *c)
{
    const uint8_t *p;
    size_t n;
    while (chanq_client_out(c->cli, &p, &n) == 0 && n) {
        ssize_t took = cq_kcp_send(c->k, p, n);
        assert_true(took > 0);
        chanq_client_out_consume(c->cli, (size_t)took);
    }
    cq_kcp_flush(c->k, cq_clock_mono_ms());
    cq_kcp_stats_t st;
    cq_kcp_stats(c->k, &st);
    assert_int_equal(st.out_dgrams, 1);
    return (size_t)st.out_bytes;
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

/* --kcp-max-per-addr bounds the connections one source address can open: the server refuses
 * the third address's one datagram (chanq_kcp_refused_total, its log line) and opens nothing. */
static void test_kcp_per_addr_limit(void **state)
{
    it_start("--kcp-max-per-addr", "2", NULL);
    kc_t *c[3];
    for (int i = 0; i < 3; i++)
        c[i] = kc_new(it_srv()->kcp_port, 0x5000u + (uint32_t)i);
    kc_auth(c[0]);
    kc_auth(c[1]);
    assert_int_equal(cq_testsrv_metric(it_srv(), "connection_num"), 2);
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_kcp_refused_total"), 0);
    size_t off = log_len();
    assert_int_equal(chanq_client_auth(c[2]->cli, 1, "kcp", "lt"), 0);
    kc_send_once(c[2]);
    assert_int_equal(wait_metric("chanq_kcp_refused_total", 1), 1);
    assert_true(log_has_from(off, "refusing a KCP connection: --kcp-max-per-addr reached", 0));
    assert_int_equal(cq_testsrv_metric(it_srv(), "connection_num"), 2);
    for (int i = 0; i < 3; i++)
        kc_free(c[i]);
}

/* Item 15: datagrams from a live session's address with another conv that do not start a
 * conversation (an ACK, a PUSH with sn 1) are dropped: the session is neither closed nor
 * replaced, and keeps receiving. */
static void test_kcp_other_conv_keeps_session(void **state)
{
    start_kcp(NULL);
    it_conn_t *srv = it_gowner();
    kc_t *a = kc_new(it_srv()->kcp_port, 0xc0c00001u);
    kc_auth(a);
    assert_int_equal(cq_testsrv_metric(it_srv(), "connection_num"), 2);
    size_t off = log_len();
    uint8_t d[24 + 4] = {0};
    uint32_t conv = 0xc0c00002u;
    memcpy(d, &conv, 4);
    d[4] = CQ_KCP_CMD_ACK;
    assert_int_equal(send(a->fd, d, 24, 0), 24);
    d[4] = CQ_KCP_CMD_PUSH;
    d[12] = 1; /* sn 1 */
    d[20] = 4; /* len 4 */
    assert_int_equal(send(a->fd, d, sizeof(d), 0), (ssize_t)sizeof(d));
    kc_pump(a, 300); /* lets chanqd read both before the forward below */
    it_sfwd(srv, 0, BC_SINGLE, 310, a->conn_id, "after");
    chanq_owned_msg_t m;
    assert_true(kc_wait(a, 310, &m, IT_TIMEOUT_MS));
    Channeldpb__ServerForwardMessage *f =
        chanq_unpack(&channeldpb__server_forward_message__descriptor, m.body, m.body_len);
    assert_non_null(f);
    assert_int_equal(f->payload.len, 5);
    assert_memory_equal(f->payload.data, "after", 5);
    chanq_unpack_free(f);
    chanq_owned_msg_done(&m);
    assert_int_equal(cq_testsrv_metric(it_srv(), "connection_num"), 2);
    char closing[64];
    snprintf(closing, sizeof(closing), "closing conn %u (", a->conn_id);
    assert_false(log_has_from(off, closing, 0));
    assert_false(log_has_from(off, "KCP peer started a new conversation", 0));
    kc_free(a);
}

/* Item 14: one AUTH datagram from an address that never acknowledges (a spoofed source). Over
 * the whole idle timeout chanqd sends back at most 3 times its bytes: the ACK, the AuthResult
 * and its resends while they fit, then 24-byte WASKs while they fit, then nothing. */
static void test_kcp_spoofed_auth(void **state)
{
    start_kcp("2000");
    kc_t *c = kc_new(it_srv()->kcp_port, 0x0badu);
    assert_int_equal(chanq_client_auth(c->cli, 1, "kcp", "lt"), 0);
    size_t budget = 3 * kc_send_once(c);
    size_t lens[64];
    uint8_t cmds[64];
    int n = 0;
    uint64_t quiet_until = 0, stop = cq_clock_mono_ms() + 30000;
    for (;;) { /* what comes back until the session is closed, and half a second more */
        struct pollfd pf = {c->fd, POLLIN, 0};
        if (poll(&pf, 1, 50) > 0) {
            uint8_t buf[2048];
            ssize_t k = recv(c->fd, buf, sizeof(buf), 0);
            assert_true(k >= 24 && n < 64);
            uint32_t conv;
            memcpy(&conv, buf, 4);
            assert_int_equal(conv, 0x0badu);
            lens[n] = (size_t)k;
            cmds[n++] = buf[4];
        }
        uint64_t now = cq_clock_mono_ms();
        if (!quiet_until && n && cq_testsrv_metric(it_srv(), "connection_num") == 0)
            quiet_until = now + 500;
        if (quiet_until && now >= quiet_until)
            break;
        assert_true(now < stop); /* a safety stop */
    }
    assert_true(n >= 2);
    assert_int_equal(cmds[0], CQ_KCP_CMD_ACK); /* at once (ACK no-delay) */
    assert_int_equal(lens[0], 24);
    assert_int_equal(cmds[1], CQ_KCP_CMD_PUSH); /* the AuthResult */
    size_t push = lens[1], out = 24 + push;
    int i = 2;
    for (;; i++) { /* each later timeout: the resend if it fits, else a WASK if that fits */
        size_t want = out + push <= budget ? push : out + 24 <= budget ? 24 : 0;
        if (!want)
            break;
        assert_true(i < n);
        assert_int_equal(lens[i], want);
        assert_int_equal(cmds[i], want == 24 ? CQ_KCP_CMD_WASK : CQ_KCP_CMD_PUSH);
        out += want;
    }
    assert_int_equal(n, i);
    assert_true(out <= budget);
    print_message("# spoofed AUTH: %zu bytes in, %d datagrams and %zu bytes back\n", budget / 3, n,
                  out);
    assert_true(cq_testsrv_metric(it_srv(), "chanq_kcp_amp_blocked_total") > 0);
    kc_free(c);
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_kcp_broadcast_lossy_big), IT_TEST(test_kcp_go_profile_lossy_broadcasts),
    IT_TEST(test_kcp_idle_timeout),        IT_TEST(test_kcp_malformed_closes_one),
    IT_TEST(test_kcp_per_addr_limit),      IT_TEST(test_kcp_other_conv_keeps_session),
    IT_TEST(test_kcp_spoofed_auth),
};

IT_MAIN(tests)
