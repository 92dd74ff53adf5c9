/* test_it_limits.c - listeners that cannot be wedged (issue 10 items 1-3): a real chanqd, raw
 * sockets, and the exact outcome of each limit:
 *   - the open-file limit: chanqd raises it and refuses to start when the caps do not fit; run
 *     out of file descriptors (RLIMIT_NOFILE 256, 276 idle connections to the MQ port), it
 *     sheds what it cannot accept, keeps answering its connections, logs a bounded number of
 *     lines, counts every shed connection, and serves every port again once the attacker left;
 *   - slowloris on the MQ seed port (before and after connect), the MQ HTTP API and the admin
 *     listener: each dribbling connection is closed by the server, counted per reason;
 *   - the connection caps refuse exactly connection N+1;
 *   - before connect a seed frame is at most --mq-preauth-max-frame; partial frames of all
 *     connections share --mq-input-budget.
 * Timeouts only stop a test that would hang; nothing asserts on elapsed time, except the rule
 * for the number of EMFILE log lines, which is written in terms of the time the test measured.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_mq.h"
#include "cq_testsrv.h"
#include "it_mq.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TMO     5000  /* one answer */
#define SAFETY  15000 /* a server close that must come */
#define NATTACK 276

static void start(const char *const *args)
{
    assert_int_equal(cq_testsrv_init(&srv), 0);
    assert_int_equal(itmq_start_logged(args), 0);
}

/* Runs chanqd under RLIMIT_NOFILE soft = hard = 256 (a wrapper script around $CHANQD). */
static int start_low_nofile(const char *const *args)
{
    static char real[4096];
    char script[8192], path[512];
    assert_int_equal(cq_testsrv_init(&srv), 0);
    snprintf(real, sizeof(real), "%s", getenv("CHANQD"));
    snprintf(script, sizeof(script), "#!/bin/sh\nexec prlimit --nofile=256:256 %s \"$@\"\n", real);
    assert_int_equal(cq_testsrv_file(&srv, "chanqd-256", script, path, sizeof(path)), 0);
    assert_int_equal(chmod(path, 0755), 0);
    setenv("CHANQD", path, 1);
    int r = cq_testsrv_start(&srv, args);
    setenv("CHANQD", real, 1);
    return r;
}

/* ---- raw sockets -------------------------------------------------------------------------- */

/* Waits for the server to close fd: true on EOF or reset, false if nothing within tmo. Bytes
 * that arrive first are read and dropped. */
static bool wait_closed(int fd, int tmo)
{
    int64_t end = itmq_now_ms() + tmo;
    char b[4096];
    while (itmq_now_ms() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(end - itmq_now_ms())) <= 0)
            continue;
        ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return true;
    }
    return false;
}

/* True when fd is closed by the peer now (no waiting). */
static bool is_closed(int fd)
{
    char b[256];
    ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT | MSG_PEEK);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Reads until EOF (at most cap-1 bytes, NUL-terminated). Returns the length or -1 on timeout. */
static ssize_t read_all(int fd, char *buf, size_t cap, int tmo)
{
    size_t len = 0;
    int64_t end = itmq_now_ms() + tmo;
    while (len + 1 < cap && itmq_now_ms() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(end - itmq_now_ms())) <= 0)
            continue;
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            break;
        }
        len += (size_t)n;
    }
    buf[len] = '\0';
    return itmq_now_ms() < end ? (ssize_t)len : -1;
}

/* One HTTP/1.0 request on a new connection; the whole response (until the server closes) in
 * buf. Returns its length, or a negative value when the connection failed or was shed. */
static ssize_t http_req(uint16_t port, const char *req, char *buf, size_t cap)
{
    int fd = cq_raw_connect(port);
    if (fd < 0)
        return fd;
    ssize_t n = cq_raw_write(fd, req, strlen(req)) == 0 ? read_all(fd, buf, cap, TMO) : -1;
    close(fd);
    return n;
}

/* The value of one exact series (name and labels as printed) from /metrics, or -1. */
static int64_t metric(const char *series)
{
    static char buf[1 << 20];
    ssize_t got = http_req(srv.admin_port, "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    if (got <= 0) {
        fprintf(stderr, "# metric %s: %zd\n", series, got);
        return -1;
    }
    size_t sl = strlen(series);
    for (char *p = strstr(buf, series); p; p = strstr(p + 1, series))
        if ((p == buf || p[-1] == '\n') && p[sl] == ' ')
            return strtoll(p + sl + 1, NULL, 10);
    fprintf(stderr, "# metric %s not in the %zd bytes of /metrics\n", series, got);
    return -1;
}

/* Polls until series == want (the MQ snapshot is up to 250 ms old); returns the last value. */
static int64_t metric_wait(const char *series, int64_t want)
{
    int64_t v = -1, end = itmq_now_ms() + SAFETY;
    while (itmq_now_ms() < end && (v = metric(series)) != want)
        usleep(50 * 1000);
    return v;
}

/* ---- the seed protocol, blocking ---------------------------------------------------------- */

static void mq_send(int fd, cq_mq_msg_t *m)
{
    uint8_t *b;
    size_t n;
    assert_int_equal(cq_mq_encode(m, &b, &n), 0);
    assert_int_equal(cq_raw_write(fd, b, n), 0);
    cq_free(b);
    cq_mq_msg_free(m);
}

/* Reads one frame within tmo and decodes it; NULL on EOF or timeout. */
static cq_mq_msg_t *mq_recv(int fd, int tmo)
{
    uint8_t hdr[CQ_MQ_HDR_LEN];
    size_t got = 0, total = 0;
    uint8_t *buf = NULL;
    int64_t end = itmq_now_ms() + tmo;
    while (itmq_now_ms() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(end - itmq_now_ms())) <= 0)
            continue;
        uint8_t *dst = total ? buf + got : hdr + got;
        size_t want = total ? total - got : CQ_MQ_HDR_LEN - got;
        ssize_t n = recv(fd, dst, want, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
        if (!total && got == CQ_MQ_HDR_LEN) {
            total = (size_t)hdr[0] << 24 | (size_t)hdr[1] << 16 | (size_t)hdr[2] << 8 | hdr[3];
            buf = malloc(total);
            memcpy(buf, hdr, CQ_MQ_HDR_LEN);
        }
        if (total && got == total) {
            cq_mq_frame_t f;
            cq_mq_msg_t *m = NULL;
            cq_mq_limits_t lim = {.max_content = CQ_MQ_DEFAULT_MAX_CONTENT,
                                  .max_batch = CQ_MQ_DEFAULT_MAX_BATCH,
                                  .max_depth = CQ_MQ_DEFAULT_MAX_DEPTH};
            char err[256];
            if (cq_mq_parse(buf, total, 0, &f) > 0)
                cq_mq_decode(&f, &lim, &m, err, sizeof(err));
            free(buf);
            return m;
        }
    }
    free(buf);
    return NULL;
}

/* Sends a keepalive and asserts its answer (err_code 0) arrives. */
static void keepalive(int fd)
{
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_REQ_KEEPALIVE, 1);
    m->askid = 77;
    m->has |= CQ_MQ_F_ASKID;
    mq_send(fd, m);
    cq_mq_msg_t *a = mq_recv(fd, TMO);
    assert_non_null(a);
    assert_int_equal(a->type, CQ_MQ_RESP_KEEPALIVE);
    assert_int_equal(a->askid, 77);
    assert_int_equal(a->err_code, 0);
    cq_mq_msg_free(a);
}

/* A new seed connection that completed connect (no permissions file: any module). */
static int mq_connected(void)
{
    int fd = cq_raw_connect(srv.mq_port);
    assert_true(fd >= 0);
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_REQ_CONNECT, 1);
    m->askid = 1;
    m->module_id = 5;
    m->client_type = 1;
    m->has |= CQ_MQ_F_ASKID | CQ_MQ_F_MODULE_ID | CQ_MQ_F_CLIENT_TYPE;
    cq_mq_msg_set_str(m, CQ_MQ_F_TOKEN, "t");
    mq_send(fd, m);
    cq_mq_msg_t *a = mq_recv(fd, TMO);
    assert_non_null(a);
    assert_int_equal(a->type, CQ_MQ_RESP_CONNECT);
    assert_int_equal(a->err_code, 0);
    cq_mq_msg_free(a);
    return fd;
}

/* A frame header declaring total bytes (type keepalive, msg id 9). */
static void frame_header(uint8_t *b, uint32_t total)
{
    cq_mq_header_write(b, total, CQ_MQ_REQ_KEEPALIVE, 9);
}

/* Asserts the next thing on fd is an error frame (type 20, msg id 0) with err_code, then EOF. */
static void expect_error_close(int fd, uint32_t code)
{
    cq_mq_msg_t *a = mq_recv(fd, TMO);
    assert_non_null(a);
    assert_int_equal(a->type, CQ_MQ_RESP_ERROR);
    assert_int_equal(a->msg_id, 0);
    assert_int_equal(a->err_code, code);
    cq_mq_msg_free(a);
    assert_true(wait_closed(fd, SAFETY));
}

/* ---- the open-file limit ------------------------------------------------------------------ */

static void test_caps_must_fit(void **state)
{
    (void)state;
    const char *args[] = {"--max-connections", "1000", NULL};
    assert_int_equal(start_low_nofile(args), -ECHILD);
    char *log = cq_testsrv_log(&srv);
    assert_non_null(log);
    /* 1000 + 1024 (mq) + 256 (mq http) + 16 (admin) + 256 (reserve) */
    assert_non_null(strstr(log, "open-file limit 256 is below the 2552 file descriptors the "
                                "caps need (--max-connections 1000 + --mq-max-connections 1024 "
                                "+ --mq-http-max-connections 256 + --admin-max-connections 16 "
                                "+ --fd-reserve 256)"));
    free(log);
}

static int count_lines(const char *needle)
{
    char *log = cq_testsrv_log(&srv);
    int n = 0;
    for (char *p = log ? strstr(log, needle) : NULL; p; p = strstr(p + 1, needle))
        n++;
    free(log);
    return n;
}

/* The request that must work on every port once the attacker left. */
static void every_port_serves(void)
{
    char buf[4096];
    chanq_sync_t *c = NULL;
    int res = -1;
    uint32_t id = 0;
    for (int server = 0; server < 2; server++) {
        assert_int_equal(chanq_sync_connect("127.0.0.1", server ? srv.server_port : srv.client_port,
                                            NULL, TMO, &c),
                         0);
        assert_int_equal(chanq_sync_auth(c, server ? "server" : "pit", "lt", TMO, &res, &id), 0);
        assert_int_equal(res, 0);
        assert_int_not_equal(id, 0);
        chanq_sync_free(c);
    }
    int fd = mq_connected();
    keepalive(fd);
    close(fd);
    assert_true(http_req(srv.mq_http_port, "GET /v1/health HTTP/1.0\r\n\r\n", buf, sizeof(buf)) >
                0);
    assert_non_null(strstr(buf, "HTTP/1.1 200 "));
    assert_true(http_req(srv.admin_port, "GET /healthz HTTP/1.0\r\n\r\n", buf, sizeof(buf)) > 0);
    assert_non_null(strstr(buf, "\r\n\r\nok\n"));
}

static void test_emfile(void **state)
{
    (void)state;
    /* The caps fit (2 channel + 246 + 4 + 4 + 0 = 256), but the reserve of 0 leaves out the
     * ~30 fds chanqd holds for itself: the MQ port runs out of fds before its cap. */
    const char *args[] = {"--max-connections",
                          "2",
                          "--mq-max-connections",
                          "246",
                          "--mq-http-max-connections",
                          "4",
                          "--admin-max-connections",
                          "4",
                          "--fd-reserve",
                          "0",
                          "--mq-auth-timeout-ms",
                          "0",
                          "--mq-idle-timeout-ms",
                          "0",
                          "--ws-addr",
                          "",
                          "--kcp-addr",
                          "",
                          NULL};
    assert_int_equal(start_low_nofile(args), 0);
    int keeper = mq_connected();
    int att[NATTACK];
    int64_t t0 = itmq_now_ms();
    for (int i = 0; i < NATTACK; i++) {
        att[i] = cq_raw_connect(srv.mq_port); /* the kernel completes it: backlog 1024 */
        assert_true(att[i] >= 0);
    }
    /* The accept queue is FIFO: once this probe is shed, every attacker before it was either
     * accepted or shed. */
    int probe = cq_raw_connect(srv.mq_port);
    assert_true(probe >= 0);
    assert_true(wait_closed(probe, SAFETY));
    close(probe);
    int shed = 0;
    for (int i = 0; i < NATTACK; i++)
        shed += is_closed(att[i]);
    assert_true(shed > 0 && shed < NATTACK);
    /* Out of fds, the MQ loop still answers its connection, and the other listeners shed what
     * they cannot accept (a channel listener used to spin on EMFILE, logging each time). */
    keepalive(keeper);
    int cprobe = cq_raw_connect(srv.client_port);
    int aprobe = cq_raw_connect(srv.admin_port);
    assert_true(wait_closed(cprobe, SAFETY));
    assert_true(wait_closed(aprobe, SAFETY));
    close(cprobe);
    close(aprobe);
    keepalive(keeper);
    for (int i = 0; i < NATTACK; i++)
        close(att[i]);
    int64_t held_s = (itmq_now_ms() - t0) / 1000;
    /* The server closed the attacker's connections it held: only the keeper is left. */
    assert_int_equal(metric_wait("chanq_mq_connections{port=\"mq\"}", 1), 1);
    assert_int_equal(
        metric_wait("chanq_mq_accept_errors_total{port=\"mq\",reason=\"emfile\"}", shed + 1),
        shed + 1);
    assert_int_equal(metric("chanq_accept_errors_total{port=\"client\",reason=\"emfile\"}"), 1);
    /* The log rule: at most one line per 10 s per listener while starved, the first at once. */
    int lines = count_lines("mq listener: accept failed: Too many open files");
    assert_true(lines >= 1);
    assert_true(lines <= 1 + held_s / 10 + 1);
    lines = count_lines("client listener: accept failed: Too many open files");
    assert_true(lines >= 1);
    assert_true(lines <= 1 + held_s / 10 + 1);
    keepalive(keeper);
    every_port_serves();
    close(keeper);
    assert_true(cq_testsrv_running(&srv));
}

/* ---- slowloris: each port closes a peer that dribbles --------------------------------------- */

#define NSLOW 3

/* Writes one byte to each open fd every 100 ms, the bytes of req[0..len) and then 'a's (a
 * header value, a frame body), until the server closed them all. Returns how many were closed
 * (NSLOW unless the safety stop hit). */
static int dribble(int *fd, const char *req, size_t len)
{
    bool closed[NSLOW] = {false};
    int nclosed = 0;
    int64_t end = itmq_now_ms() + SAFETY;
    for (size_t k = 0; nclosed < NSLOW && itmq_now_ms() < end; k++) {
        for (int i = 0; i < NSLOW; i++) {
            if (closed[i])
                continue;
            const char *b = k < len ? req + k : "a";
            if (send(fd[i], b, 1, MSG_NOSIGNAL) < 0 || is_closed(fd[i])) {
                closed[i] = true;
                nclosed++;
            }
        }
        usleep(100 * 1000);
    }
    return nclosed;
}

static void open_n(int *fd, uint16_t port)
{
    for (int i = 0; i < NSLOW; i++) {
        fd[i] = cq_raw_connect(port);
        assert_true(fd[i] >= 0);
    }
}

static void close_n(int *fd)
{
    for (int i = 0; i < NSLOW; i++)
        close(fd[i]);
}

/* The header of a 4096-byte keepalive frame and the start of its body: never whole. */
static const char slow_frame[] = "\x00\x00\x10\x00\x00\x0c\x01\x03\x00\x00\x09\x00"
                                 "{\"askid\":1,\"pad\":\"";
static const char slow_http[] = "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a";
static const char slow_admin[] = "GET /metrics HTTP/1.1\r\nX-Slow: a";
#define LEN(s) (sizeof(s) - 1)

static void test_slowloris(void **state)
{
    (void)state;
    const char *args[] = {"--mq-auth-timeout-ms",
                          "600",
                          "--mq-idle-timeout-ms",
                          "900",
                          "--mq-http-timeout-ms",
                          "600",
                          "--admin-timeout-ms",
                          "600",
                          "--ws-addr",
                          "",
                          "--kcp-addr",
                          "",
                          NULL};
    start(args);
    int fd[NSLOW];
    /* a frame dribbled before connect: the pre-auth timeout */
    open_n(fd, srv.mq_port);
    assert_int_equal(dribble(fd, slow_frame, LEN(slow_frame)), NSLOW);
    close_n(fd);
    assert_int_equal(
        metric_wait("chanq_mq_closes_total{port=\"mq\",reason=\"preauth_timeout\"}", NSLOW), NSLOW);
    /* connected, then a frame one byte at a time: idle (bytes are not a whole frame) */
    for (int i = 0; i < NSLOW; i++)
        fd[i] = mq_connected();
    assert_int_equal(dribble(fd, slow_frame, LEN(slow_frame)), NSLOW);
    close_n(fd);
    assert_int_equal(metric_wait("chanq_mq_closes_total{port=\"mq\",reason=\"idle\"}", NSLOW),
                     NSLOW);
    assert_int_equal(metric("chanq_mq_closes_total{port=\"mq\",reason=\"preauth_timeout\"}"),
                     NSLOW);
    /* the HTTP API: a request head one byte at a time */
    open_n(fd, srv.mq_http_port);
    assert_int_equal(dribble(fd, slow_http, LEN(slow_http)), NSLOW);
    close_n(fd);
    assert_int_equal(
        metric_wait("chanq_mq_closes_total{port=\"mqhttp\",reason=\"timeout\"}", NSLOW), NSLOW);
    /* the admin listener */
    open_n(fd, srv.admin_port);
    assert_int_equal(dribble(fd, slow_admin, LEN(slow_admin)), NSLOW);
    close_n(fd);
    assert_int_equal(
        metric_wait("chanq_listener_closes_total{port=\"admin\",reason=\"timeout\"}", NSLOW),
        NSLOW);
    /* nothing else was closed for those reasons */
    assert_int_equal(metric("chanq_mq_closes_total{port=\"mq\",reason=\"idle\"}"), NSLOW);
    assert_int_equal(metric("chanq_mq_closes_total{port=\"mq\",reason=\"cap\"}"), 0);
}

/* ---- idle: a watcher that takes pushes is not idle ----------------------------------------- */

/* A connected watcher sends nothing after its watch. While pushes reach it, it is not idle; once
 * they stop, the idle timeout closes it. (The soak found a watcher of a busy topic closed.) */
static void test_idle_watcher(void **state)
{
    (void)state;
    const char *args[] = {"--mq-idle-timeout-ms", "1000", "--ws-addr", "", "--kcp-addr", "", NULL};
    start(args);
    int w = mq_connected(), p = mq_connected();
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_REQ_WATCH, 2);
    m->askid = 2;
    m->has |= CQ_MQ_F_ASKID;
    assert_int_equal(cq_mq_msg_set_topic(m, "idle_t"), 0);
    m->has |= CQ_MQ_F_TOPIC;
    mq_send(w, m);
    cq_mq_msg_t *a = mq_recv(w, TMO);
    assert_non_null(a);
    assert_int_equal(a->type, CQ_MQ_RESP_WATCH);
    assert_int_equal(a->err_code, 8); /* unknown topic: create it, then watch again */
    cq_mq_msg_free(a);
    m = cq_mq_msg_new(CQ_MQ_REQ_ADD_TOPIC, 3);
    m->askid = 3;
    m->has |= CQ_MQ_F_ASKID;
    assert_int_equal(cq_mq_msg_set_topic(m, "idle_t"), 0);
    m->has |= CQ_MQ_F_TOPIC;
    mq_send(p, m);
    a = mq_recv(p, TMO);
    assert_non_null(a);
    assert_int_equal(a->err_code, 0);
    cq_mq_msg_free(a);
    m = cq_mq_msg_new(CQ_MQ_REQ_WATCH, 4);
    m->askid = 4;
    m->has |= CQ_MQ_F_ASKID;
    assert_int_equal(cq_mq_msg_set_topic(m, "idle_t"), 0);
    m->has |= CQ_MQ_F_TOPIC;
    mq_send(w, m);
    a = mq_recv(w, TMO);
    assert_non_null(a);
    assert_int_equal(a->err_code, 0);
    cq_mq_msg_free(a);
    /* 3 s of pushes, one every 200 ms: three idle timeouts without a frame from the watcher */
    for (int i = 0; i < 15; i++) {
        m = cq_mq_msg_new(CQ_MQ_REQ_PRODUCE, (uint16_t)(10 + i));
        m->askid = (uint32_t)(10 + i);
        m->has |= CQ_MQ_F_ASKID;
        assert_int_equal(cq_mq_msg_set_topic(m, "idle_t"), 0);
        m->has |= CQ_MQ_F_TOPIC;
        assert_int_equal(cq_mq_msg_add_item(m, 0, -1, "x", 1, false), 0);
        m->has |= CQ_MQ_F_CONTENT;
        mq_send(p, m);
        a = mq_recv(p, TMO);
        assert_non_null(a);
        assert_int_equal(a->type, CQ_MQ_RESP_PRODUCE);
        assert_int_equal(a->err_code, 0);
        cq_mq_msg_free(a);
        a = mq_recv(w, TMO);
        assert_non_null(a);
        assert_int_equal(a->type, CQ_MQ_PUSH);
        assert_int_equal(a->offset, a->items[0].offset);
        cq_mq_msg_free(a);
        keepalive(p); /* the producer's keepalive spaces the produces */
        struct timespec d = {0, 200 * 1000 * 1000};
        nanosleep(&d, NULL);
    }
    assert_int_equal(metric("chanq_mq_closes_total{port=\"mq\",reason=\"idle\"}"), 0);
    close(p); /* the producer leaves (not an idle close); pushes stop: the watcher is idle now */
    assert_true(wait_closed(w, TMO));
    assert_int_equal(metric_wait("chanq_mq_closes_total{port=\"mq\",reason=\"idle\"}", 1), 1);
    close(w);
}

/* ---- caps: connection N+1 is refused, N are served ---------------------------------------- */

static void test_caps(void **state)
{
    (void)state;
    const char *args[] = {"--mq-max-connections",
                          "3",
                          "--mq-http-max-connections",
                          "2",
                          "--admin-max-connections",
                          "2",
                          "--ws-addr",
                          "",
                          "--kcp-addr",
                          "",
                          NULL};
    start(args);
    char buf[4096];
    int mq[4], http[3], adm[3];
    for (int i = 0; i < 3; i++)
        mq[i] = mq_connected();
    mq[3] = cq_raw_connect(srv.mq_port);
    assert_true(wait_closed(mq[3], SAFETY)); /* accepted and closed at once */
    for (int i = 0; i < 3; i++)
        keepalive(mq[i]);
    /* HTTP: two held open (keep-alive, answered), the third is closed unanswered */
    for (int i = 0; i < 2; i++) {
        http[i] = cq_raw_connect(srv.mq_http_port);
        const char *rq = "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        assert_int_equal(cq_raw_write(http[i], rq, strlen(rq)), 0);
        ssize_t n = recv(http[i], buf, sizeof(buf), 0);
        assert_true(n > 12);
        assert_memory_equal(buf, "HTTP/1.1 200", 12);
    }
    http[2] = cq_raw_connect(srv.mq_http_port);
    assert_int_equal(cq_raw_write(http[2], "GET /v1/health HTTP/1.0\r\n\r\n", 27), 0);
    assert_int_equal(read_all(http[2], buf, sizeof(buf), SAFETY), 0);
    for (int i = 0; i < 3; i++)
        close(http[i]);
    /* admin: two idle connections held, the third gets nothing but the close */
    for (int i = 0; i < 3; i++)
        adm[i] = cq_raw_connect(srv.admin_port);
    assert_int_equal(cq_raw_write(adm[2], "GET /healthz HTTP/1.0\r\n\r\n", 25), 0);
    assert_int_equal(read_all(adm[2], buf, sizeof(buf), SAFETY), 0);
    /* the two held ones are answered; the server closes them itself (its count drops first) */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(cq_raw_write(adm[i], "GET /healthz HTTP/1.0\r\n\r\n", 25), 0);
        assert_true(read_all(adm[i], buf, sizeof(buf), SAFETY) > 0);
        assert_non_null(strstr(buf, "\r\n\r\nok\n"));
    }
    for (int i = 0; i < 3; i++)
        close(adm[i]);
    assert_int_equal(metric_wait("chanq_mq_closes_total{port=\"mq\",reason=\"cap\"}", 1), 1);
    assert_int_equal(metric_wait("chanq_mq_closes_total{port=\"mqhttp\",reason=\"cap\"}", 1), 1);
    assert_int_equal(metric("chanq_listener_closes_total{port=\"admin\",reason=\"cap\"}"), 1);
    /* a freed slot is taken again */
    close(mq[0]);
    close(mq[3]);
    assert_int_equal(metric_wait("chanq_mq_connections{port=\"mq\"}", 2), 2);
    mq[0] = mq_connected();
    keepalive(mq[0]);
    for (int i = 0; i < 3; i++)
        close(mq[i]);
}

/* ---- memory before connect, and the input budget ------------------------------------------ */

/* Sends a keepalive padded to total bytes and asserts its answer. */
static void padded_keepalive(int fd, uint32_t total)
{
    uint8_t *b = malloc(total);
    size_t blen = total - CQ_MQ_HDR_LEN;
    frame_header(b, total);
    memset(b + CQ_MQ_HDR_LEN, 'x', blen);
    memcpy(b + CQ_MQ_HDR_LEN, "{\"askid\":77,\"pad\":\"", 19);
    memcpy(b + total - 2, "\"}", 2);
    assert_int_equal(cq_raw_write(fd, b, total), 0);
    free(b);
    cq_mq_msg_t *a = mq_recv(fd, TMO);
    assert_non_null(a);
    assert_int_equal(a->type, CQ_MQ_RESP_KEEPALIVE);
    assert_int_equal(a->askid, 77);
    assert_int_equal(a->err_code, 0);
    cq_mq_msg_free(a);
}

static void test_preauth_frame(void **state)
{
    (void)state;
    const char *args[] = {"--ws-addr", "", "--kcp-addr", "", NULL};
    start(args);
    uint8_t hdr[CQ_MQ_HDR_LEN];
    /* before connect: a header announcing 4097 bytes is refused at once (default 4 KiB) */
    int fd = cq_raw_connect(srv.mq_port);
    frame_header(hdr, 4097);
    assert_int_equal(cq_raw_write(fd, hdr, sizeof(hdr)), 0);
    expect_error_close(fd, 2); /* bad_length */
    close(fd);
    /* 4096 bytes are allowed before connect, 5000 after it */
    fd = cq_raw_connect(srv.mq_port);
    padded_keepalive(fd, 4096);
    close(fd);
    fd = mq_connected();
    padded_keepalive(fd, 5000);
    close(fd);
}

/* Sends the header of a frame of total bytes and n bytes of its body. */
static void partial(int fd, uint32_t total, size_t n)
{
    uint8_t *b = malloc(CQ_MQ_HDR_LEN + n);
    frame_header(b, total);
    memset(b + CQ_MQ_HDR_LEN, 'x', n);
    memcpy(b + CQ_MQ_HDR_LEN, "{\"askid\":77,\"pad\":\"", 19);
    assert_int_equal(cq_raw_write(fd, b, CQ_MQ_HDR_LEN + n), 0);
    free(b);
}

static void test_input_budget(void **state)
{
    (void)state;
    const char *args[] = {"--mq-input-budget", "2m", "--ws-addr", "", "--kcp-addr", "", NULL};
    start(args);
    const uint32_t total = 1000000;
    int a = mq_connected(), b = mq_connected(), c = mq_connected();
    partial(a, total, 900000 - CQ_MQ_HDR_LEN); /* 900,000 bytes held */
    partial(b, total, 900000 - CQ_MQ_HDR_LEN);
    assert_int_equal(metric_wait("chanq_mq_input_bytes", 1800000), 1800000);
    /* 1,800,000 + 300,000 > 2 MiB: c is answered busy (11) and closed */
    partial(c, total, 300000 - CQ_MQ_HDR_LEN);
    expect_error_close(c, 11);
    close(c);
    assert_int_equal(metric_wait("chanq_mq_input_refused_total", 1), 1);
    assert_int_equal(metric_wait("chanq_mq_input_bytes", 1800000), 1800000);
    /* a's frame completes and is answered; what it held is released */
    size_t rest = total - 900000;
    char *tail = malloc(rest);
    memset(tail, 'x', rest);
    memcpy(tail + rest - 2, "\"}", 2);
    assert_int_equal(cq_raw_write(a, tail, rest), 0);
    free(tail);
    cq_mq_msg_t *m = mq_recv(a, TMO);
    assert_non_null(m);
    assert_int_equal(m->type, CQ_MQ_RESP_KEEPALIVE);
    assert_int_equal(m->err_code, 0);
    cq_mq_msg_free(m);
    assert_int_equal(metric_wait("chanq_mq_input_bytes", 900000), 900000);
    close(a);
    close(b);
    assert_int_equal(metric_wait("chanq_mq_input_bytes", 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_caps_must_fit, itmq_teardown),
        cmocka_unit_test_teardown(test_emfile, itmq_teardown),
        cmocka_unit_test_teardown(test_slowloris, itmq_teardown),
        cmocka_unit_test_teardown(test_idle_watcher, itmq_teardown),
        cmocka_unit_test_teardown(test_caps, itmq_teardown),
        cmocka_unit_test_teardown(test_preauth_frame, itmq_teardown),
        cmocka_unit_test_teardown(test_input_budget, itmq_teardown),
    };
    return cmocka_run_group_tests_name("limits", tests, NULL, NULL);
}
