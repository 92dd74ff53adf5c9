/* test_engine.c - the engine-loop host (src/io/io_engine.c) hosting a stub echo engine (echo.c,
 * echo_io.c), driven over real TCP sockets on 127.0.0.1: the exact bytes come back; the
 * (cap+1)th connection is closed at once, counted and logged; an idle connection is closed;
 * stop closes the listener at once, answers the work in flight, then closes; and when the grace
 * period is over, stop drops what is left. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cq_log.h"
#include "cq_sbuf.h"
#include "echo.h"
#include "echo_io.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 10000 /* bounds every wait below: a failure, never a timing assertion */

/* ---- the log (WARN and above), captured ---------------------------------------------------- */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[4096];

static void log_sink(void *ud, cq_log_level_t lvl, const char *topic, const char *line)
{
    (void)ud;
    if (lvl < CQ_LOG_WARN)
        return;
    pthread_mutex_lock(&log_mu);
    size_t n = strlen(log_text);
    snprintf(log_text + n, sizeof(log_text) - n, "%s: %s\n", topic, line);
    pthread_mutex_unlock(&log_mu);
}

static bool logged(const char *line)
{
    pthread_mutex_lock(&log_mu);
    bool yes = strstr(log_text, line) != NULL;
    pthread_mutex_unlock(&log_mu);
    return yes;
}

static void log_reset(void)
{
    pthread_mutex_lock(&log_mu);
    log_text[0] = '\0';
    pthread_mutex_unlock(&log_mu);
}

/* ---- a running echo front end ------------------------------------------------------------- */

typedef struct fx {
    echo_t *eng;
    echo_io_t *io;
    char bound[80];
    struct sockaddr_in sa;
} fx_t;

static void fx_start(fx_t *f, bool hold, uint32_t max_conns, uint32_t idle_ms, int grace_ms)
{
    char err[256] = "";
    memset(f, 0, sizeof(*f));
    log_reset();
    f->eng = echo_new(hold);
    assert_non_null(f->eng);
    echo_io_opts_t o = {.addr = "127.0.0.1:0",
                        .max_conns = max_conns,
                        .idle_timeout_ms = idle_ms,
                        .shutdown_grace_ms = grace_ms};
    assert_int_equal(
        echo_io_start(&f->io, f->eng, &o, f->bound, sizeof(f->bound), err, sizeof(err)), 0);
    const char *colon = strrchr(f->bound, ':');
    assert_non_null(colon);
    f->sa.sin_family = AF_INET;
    f->sa.sin_port = htons((uint16_t)atoi(colon + 1));
    f->sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

static void fx_done(fx_t *f)
{
    f->io = echo_io_free(f->io);
    f->eng = echo_free(f->eng);
}

/* A connected socket that gives up a read after WAIT_MS; -1 with errno when refused. */
static int dial(const fx_t *f)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct timeval tv = {WAIT_MS / 1000, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (const struct sockaddr *)&f->sa, sizeof(f->sa)) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static void send_str(int fd, const char *s)
{
    assert_int_equal(send(fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t)strlen(s));
}

/* Reads until n bytes, the end of the stream, an error or WAIT_MS; returns the bytes read. */
static size_t recv_n(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, buf + got, n - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return got;
}

static void expect_echo(int fd, const char *s)
{
    char buf[256] = "";
    send_str(fd, s);
    assert_int_equal(recv_n(fd, buf, strlen(s)), strlen(s));
    assert_memory_equal(buf, s, strlen(s));
}

/* The peer closed: the end of the stream, nothing before it. */
static void expect_eof(int fd)
{
    char c;
    assert_int_equal(recv(fd, &c, 1, 0), 0);
}

static void pause_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until the published snapshot holds line (the loop renders it every tick). */
static bool metric_wait(const fx_t *f, const char *line)
{
    int64_t deadline = mono_ms() + WAIT_MS;
    for (;;) {
        cq_sbuf_t b;
        cq_sbuf_init(&b);
        assert_int_equal(echo_io_metrics_append(f->io, &b), 0);
        assert_int_equal(cq_sbuf_append(&b, "", 1), 0);
        bool yes = strstr((const char *)b.data, line) != NULL;
        cq_sbuf_done(&b);
        if (yes || mono_ms() >= deadline)
            return yes;
        pause_ms(5);
    }
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_echo(void **state)
{
    (void)state;
    fx_t f;
    fx_start(&f, false, 8, 0, 1000);
    int fd = dial(&f);
    assert_true(fd >= 0);
    expect_echo(fd, "hello, host");
    expect_echo(fd, "and again");
    /* the engine's part, then the host's */
    assert_true(metric_wait(&f, "chanq_echo_inputs_total 2\n"));
    assert_true(metric_wait(&f, "chanq_echo_connections{port=\"echo\"} 1\n"));
    close(fd);
    assert_true(metric_wait(&f, "chanq_echo_connections{port=\"echo\"} 0\n"));
    fx_done(&f);
}

static void test_cap(void **state)
{
    (void)state;
    fx_t f;
    fx_start(&f, false, 1, 0, 1000);
    int a = dial(&f);
    assert_true(a >= 0);
    expect_echo(a, "first"); /* a is open and counted */
    int b = dial(&f);
    assert_true(b >= 0);
    expect_eof(b); /* accepted and closed at once, nothing written */
    /* the loop refused b before it read a's next bytes */
    expect_echo(a, "still served");
    assert_true(logged("accept: echo listener: echo-max-connections reached; closing new "
                       "connections at once (0 more since the last line)\n"));
    assert_true(metric_wait(&f, "chanq_echo_closes_total{port=\"echo\",reason=\"cap\"} 1\n"));
    assert_true(metric_wait(&f, "chanq_echo_connections{port=\"echo\"} 1\n"));
    close(a);
    close(b);
    fx_done(&f);
}

static void test_idle_timeout(void **state)
{
    (void)state;
    fx_t f;
    fx_start(&f, false, 8, 50, 1000);
    int fd = dial(&f);
    assert_true(fd >= 0);
    expect_echo(fd, "then silence");
    expect_eof(fd); /* the tick closed it: no input for idle_timeout_ms */
    assert_true(metric_wait(&f, "chanq_echo_closes_total{port=\"echo\",reason=\"idle\"} 1\n"));
    assert_true(metric_wait(&f, "chanq_echo_connections{port=\"echo\"} 0\n"));
    close(fd);
    fx_done(&f);
}

static void *stopper(void *arg)
{
    echo_io_stop(arg);
    return NULL;
}

/* Waits until the listener is closed: the shutdown started (DRAIN). */
static bool refused_wait(const fx_t *f)
{
    int64_t deadline = mono_ms() + WAIT_MS;
    for (;;) {
        int fd = dial(f);
        if (fd < 0)
            return errno == ECONNREFUSED;
        close(fd);
        if (mono_ms() >= deadline)
            return false;
        pause_ms(5);
    }
}

static void test_stop_drains(void **state)
{
    (void)state;
    fx_t f;
    fx_start(&f, true, 64, 0, WAIT_MS);
    int fd = dial(&f);
    assert_true(fd >= 0);
    send_str(fd, "in flight");
    assert_true(echo_wait_held(f.eng, 1, WAIT_MS)); /* work in flight: the engine is not idle */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, stopper, f.io), 0);
    assert_true(refused_wait(&f)); /* DRAIN: no new connection */
    char c;
    assert_int_equal(recv(fd, &c, 1, MSG_DONTWAIT), -1); /* still open, nothing written */
    assert_int_equal(errno, EAGAIN);
    echo_complete(f.eng); /* the completion comes back through the engine's wake */
    char buf[16] = "";
    assert_int_equal(recv_n(fd, buf, 9), 9);
    assert_memory_equal(buf, "in flight", 9);
    expect_eof(fd); /* CLOSE: written, then shut down */
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_false(logged("grace period is over"));
    close(fd);
    fx_done(&f);
}

static void test_stop_grace(void **state)
{
    (void)state;
    fx_t f;
    fx_start(&f, true, 64, 0, 0);
    int fd = dial(&f);
    assert_true(fd >= 0);
    send_str(fd, "never answered");
    assert_true(echo_wait_held(f.eng, 1, WAIT_MS));
    echo_io_stop(f.io); /* nothing completes: the grace period ends the wait */
    assert_true(logged("echo: shutdown: the grace period is over: dropping 1 connections\n"));
    expect_eof(fd);
    close(fd);
    fx_done(&f);
}

int main(void)
{
    cq_log_set_sink(log_sink, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echo),         cmocka_unit_test(test_cap),
        cmocka_unit_test(test_idle_timeout), cmocka_unit_test(test_stop_drains),
        cmocka_unit_test(test_stop_grace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
