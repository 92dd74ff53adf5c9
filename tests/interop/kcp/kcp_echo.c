/* kcp_echo - test tool: chanq's KCP engine as a UDP echo server (tests/interop/kcp).
 *
 * A plain POSIX UDP socket, a poll() loop and the real monotonic clock drive cq_kcp the way
 * chanqd's io module will: one engine per remote address, created by the first datagram of at
 * least 24 bytes with that datagram's conv, replaced when the same address starts a new
 * conversation (cq_kcp_is_conv_start), fed with cq_kcp_input, flushed once per loop iteration
 * after data was queued, and updated at cq_kcp_check() deadlines. Every byte received is sent
 * back; a short cq_kcp_send count parks the rest until ACKs free space (the engine then stops
 * being read, so its receive window closes: end-to-end backpressure).
 *
 * Usage: kcp_echo [-p PORT] [-P fast|default] [-t SECONDS] [-v]
 * Prints "ready PORT" once bound (PORT 0 picks one). Runs until SIGTERM/SIGINT or -t seconds
 * (default 600), then prints per-session engine statistics on stderr. Test tooling only: it
 * is not product code and never linked into chanqd.
 */
#include "cq_err.h"
#include "cq_kcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_SESS 64
#define IDLE_MS  60000
#define PEND_CAP 16384

typedef struct sess {
    bool used;
    struct sockaddr_in addr;
    cq_kcp_t *k;
    uint64_t last_rx, rx_bytes, errors;
    size_t pend_len; /* echo bytes the engine did not accept yet */
    uint8_t pend[PEND_CAP];
} sess_t;

static int g_fd = -1;
static volatile sig_atomic_t g_stop;
static sess_t g_sess[MAX_SESS];
static cq_kcp_opts_t g_opts;
static bool g_verbose;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void out_cb(void *ud, const uint8_t *d, size_t len)
{
    sess_t *s = ud;
    /* Best effort, like uv_udp_try_send: a failed send is a lost datagram. */
    (void)sendto(g_fd, d, len, MSG_DONTWAIT, (const struct sockaddr *)&s->addr, sizeof(s->addr));
}

static void sess_report(const sess_t *s, const char *why)
{
    cq_kcp_stats_t st;
    cq_kcp_stats(s->k, &st);
    fprintf(stderr,
            "kcp_echo: %s conv=%08x rx_bytes=%llu in_dgrams=%llu out_dgrams=%llu retrans=%llu "
            "fast_retrans=%llu in_dup=%llu srtt=%u rto=%u errors=%llu dead=%d\n",
            why, cq_kcp_conv(s->k), (unsigned long long)s->rx_bytes,
            (unsigned long long)st.in_dgrams, (unsigned long long)st.out_dgrams,
            (unsigned long long)st.retrans, (unsigned long long)st.fast_retrans,
            (unsigned long long)st.in_dup, st.srtt, st.rto, (unsigned long long)s->errors,
            cq_kcp_dead(s->k));
}

static void sess_close(sess_t *s, const char *why)
{
    sess_report(s, why);
    cq_kcp_free(s->k);
    memset(s, 0, sizeof(*s));
}

static sess_t *sess_find(const struct sockaddr_in *a)
{
    for (int i = 0; i < MAX_SESS; i++)
        if (g_sess[i].used && g_sess[i].addr.sin_port == a->sin_port &&
            g_sess[i].addr.sin_addr.s_addr == a->sin_addr.s_addr)
            return &g_sess[i];
    return NULL;
}

static sess_t *sess_open(const struct sockaddr_in *a, uint32_t conv, uint64_t now)
{
    for (int i = 0; i < MAX_SESS; i++) {
        sess_t *s = &g_sess[i];
        if (s->used)
            continue;
        s->k = cq_kcp_new(conv, &g_opts, out_cb, s);
        if (!s->k)
            return NULL;
        s->used = true;
        s->addr = *a;
        s->last_rx = now;
        if (g_verbose)
            fprintf(stderr, "kcp_echo: new conv=%08x from %s:%u\n", conv, inet_ntoa(a->sin_addr),
                    ntohs(a->sin_port));
        return s;
    }
    return NULL;
}

/* Moves received bytes back into the engine; returns true if anything was queued. */
static bool sess_pump(sess_t *s)
{
    static uint8_t buf[PEND_CAP];
    bool queued = false;
    for (;;) {
        if (s->pend_len) {
            ssize_t r = cq_kcp_send(s->k, s->pend, s->pend_len);
            if (r <= 0)
                return queued; /* full (or no memory): retry after ACKs */
            queued = true;
            memmove(s->pend, s->pend + r, s->pend_len - (size_t)r);
            s->pend_len -= (size_t)r;
            if (s->pend_len)
                return queued;
        }
        size_t n = cq_kcp_recv(s->k, buf, sizeof(buf));
        if (n == 0)
            return queued;
        s->rx_bytes += n;
        memcpy(s->pend, buf, n);
        s->pend_len = n;
    }
}

/* The listener's demultiplexing rule (kcp-go's): see cq_kcp.h. */
static void on_datagram(const uint8_t *d, size_t len, const struct sockaddr_in *from, uint64_t now)
{
    uint32_t conv;
    if (cq_kcp_peek_conv(d, len, &conv) < 0)
        return; /* shorter than a segment header: dropped before parsing */
    sess_t *s = sess_find(from);
    if (s && cq_kcp_conv(s->k) != conv) {
        if (!cq_kcp_is_conv_start(d, len))
            return;
        sess_close(s, "replaced");
        s = NULL;
    }
    if (!s && !(s = sess_open(from, conv, now)))
        return;
    s->last_rx = now;
    int r = cq_kcp_input(s->k, d, len, now);
    if (r < 0) {
        s->errors++;
        if (g_verbose)
            fprintf(stderr, "kcp_echo: conv=%08x input: %s\n", conv, cq_strerror(r));
    }
}

static void drain_socket(uint64_t now)
{
    static uint8_t buf[65536];
    for (;;) {
        struct sockaddr_in from;
        socklen_t fl = sizeof(from);
        ssize_t n = recvfrom(g_fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
        if (n < 0)
            return; /* EAGAIN, or an error poll will report again */
        if (fl == sizeof(from) && from.sin_family == AF_INET)
            on_datagram(buf, (size_t)n, &from, now);
    }
}

static void service(uint64_t now)
{
    for (int i = 0; i < MAX_SESS; i++) {
        sess_t *s = &g_sess[i];
        if (!s->used)
            continue;
        if (now - s->last_rx > IDLE_MS) {
            sess_close(s, "idle");
            continue;
        }
        if (sess_pump(s))
            cq_kcp_flush(s->k, now);
        cq_kcp_update(s->k, now);
    }
}

static int poll_timeout(uint64_t now)
{
    uint64_t next = now + 1000;
    for (int i = 0; i < MAX_SESS; i++)
        if (g_sess[i].used) {
            uint64_t c = cq_kcp_check(g_sess[i].k, now);
            next = c < next ? c : next;
        }
    return next > now ? (int)(next - now) : 0;
}

static int open_socket(unsigned port)
{
    g_fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (g_fd < 0)
        return -errno;
    int sz = 4 << 20;
    (void)setsockopt(g_fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    (void)setsockopt(g_fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    if (bind(g_fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        getsockname(g_fd, (struct sockaddr *)&a, &al) < 0)
        return -errno;
    printf("ready %u\n", ntohs(a.sin_port));
    fflush(stdout);
    return 0;
}

static int parse_args(int argc, char **argv, unsigned *port, unsigned *secs)
{
    int c;
    g_opts = cq_kcp_opts_fast();
    while ((c = getopt(argc, argv, "p:P:t:v")) != -1) {
        if (c == 'p') {
            *port = (unsigned)strtoul(optarg, NULL, 10);
        } else if (c == 'P' && strcmp(optarg, "fast") == 0) {
            g_opts = cq_kcp_opts_fast();
        } else if (c == 'P' && strcmp(optarg, "default") == 0) {
            g_opts = cq_kcp_opts_default();
        } else if (c == 't') {
            *secs = (unsigned)strtoul(optarg, NULL, 10);
        } else if (c == 'v') {
            g_verbose = true;
        } else {
            fprintf(stderr, "usage: %s [-p PORT] [-P fast|default] [-t SECONDS] [-v]\n", argv[0]);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    unsigned port = 0, secs = 600;
    if (parse_args(argc, argv, &port, &secs) < 0)
        return 2;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    int r = open_socket(port);
    if (r < 0) {
        fprintf(stderr, "kcp_echo: socket: %s\n", strerror(-r));
        return 1;
    }
    uint64_t end = now_ms() + (uint64_t)secs * 1000u;
    while (!g_stop && now_ms() < end) {
        struct pollfd p = {.fd = g_fd, .events = POLLIN};
        int n = poll(&p, 1, poll_timeout(now_ms()));
        if (n < 0 && errno != EINTR)
            break;
        uint64_t now = now_ms();
        if (n > 0)
            drain_socket(now);
        service(now);
    }
    for (int i = 0; i < MAX_SESS; i++)
        if (g_sess[i].used)
            sess_close(&g_sess[i], "exit");
    close(g_fd);
    return 0;
}
