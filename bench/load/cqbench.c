/* cqbench.c - load generator for the shape "1 publisher -> N subscribers".
 *
 * Targets: chanqd (libchanq's libuv adapter: a SERVER connection possesses GLOBAL and publishes
 * ServerForwardMessage with broadcast ALL_BUT_SERVER; N CLIENT connections are subscribed to
 * GLOBAL by the server), redis-server (RESP PUBLISH / SUBSCRIBE over raw uv_tcp) and nats-server
 * (NATS text protocol PUB / SUB over raw uv_tcp). Every target is driven by the same single
 * libuv loop and the same accounting.
 *
 * Modes:
 *   closed  publish as fast as possible with at most --window messages outstanding, where
 *           "outstanding" is measured against the slowest subscriber (a message is done when
 *           all N subscribers have received it);
 *   rate    publish --rate messages/s from a 1 ms timer; every delivery gives a latency sample
 *           (receive time - send timestamp carried in the payload);
 *   idle    open N authenticated, subscribed connections and do nothing for --duration s.
 *   data    chanq only, channel data: the SERVER connection creates a SUBWORLD channel with
 *           initial data (testpb.TestChannelDataMessage), subscribes the N CLIENT connections
 *           with fanOutIntervalMs = --interval, and sends --rate CHANNEL_DATA_UPDATEs/s on it.
 *           Every merged fan-out a subscriber receives is one "delivery"; its latency is that
 *           of the newest update it carries (scalars are last-wins, so the merged text and num
 *           are those of the last update of the window). Ideal: subs * 1000 / interval
 *           fan-outs/s.
 *
 * The payload is --size bytes (>= 24): u64 sequence, u64 CLOCK_MONOTONIC ns, u64 CLOCK_REALTIME
 * ns, then filler. In data mode it is a serialized TestChannelDataMessage of --size bytes
 * (>= 32): text = the CLOCK_REALTIME send time in ns as decimal, a space, 'x' padding;
 * num = sequence + 1 (proto3 does not encode 0).
 *
 * I/O: the publisher uses uv_tcp (chanq: libchanq's libuv adapter; redis/nats: raw uv_tcp).
 * Subscribers use their own non-blocking sockets watched by uv_poll_t and read with recvmsg()
 * and SO_TIMESTAMPNS (chanq: the libchanq sans-I/O core fed from those reads).
 * Transports (chanq subscribers only, --transport; the publisher stays on TCP):
 *   tcp  the client listener;
 *   ws   chanqd's WebSocket listener (--ws-addr): HTTP upgrade, then masked binary frames out
 *        and unmasked server frames in (ws_client.h); frame payloads are the CH byte stream;
 *   kcp  chanqd's KCP listener (--kcp-addr): a connected UDP socket per subscriber and the
 *        sans-I/O KCP engine (cq_kcp.h, the "fast" profile as chanqd's default), driven by
 *        one shared 10 ms timer; the in-order KCP payload is the CH byte stream. KCP has no
 *        close, so at the end of a run the publisher sends DISCONNECT for every subscriber
 *        (its connection is a SERVER connection) before cqbench exits, and the server does
 *        not keep fanning out to dead peers until its idle timeout.
 * Deliveries are counted in the same place (on_payload) whatever the transport. One client
 * thread must read N sockets for every message, so the callback-time ("app") latency of the
 * last subscriber includes the client's own serial processing of the N-1 before it; the kernel
 * receive timestamp ("kernel rx" latency) excludes that and is the server-side figure.
 * The server process (--pid) is sampled from /proc for CPU (utime+stime) and VmRSS.
 * Output: one JSON line (starts with '{') and one readable line (starts with '#') per run.
 */
#include "bench_util.h"
#include "chanq_uv.h"
#include "cq_kcp.h"
#include "ws_client.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define GLOBAL_CHANNEL    0u
#define BC_ALL_BUT_SERVER 32u
#define USER_MSG_TYPE     100u
#define CT_GLOBAL         1u
#define TOPIC             "cqbench"
#define SETUP_TIMEOUT_MS  120000
#define STALL_SECONDS     5
#define DRAIN_MAX_MS      5000
#define EXIT_FLUSH_MS     2000 /* kcp: longest wait for the DISCONNECTs to be written */
#define KCP_READ_BATCH    64   /* datagrams read per readable event */
#define KCP_TICK_MS       10   /* the shared KCP timer (the fast profile's interval) */
#define KCP_SOCKBUF       (1 << 20)
#define WS_PATH           "/"
/* data mode */
#define CT_SUBWORLD      3u
#define MT_SUB_TO_CHAN   6u
#define MT_DATA_UPDATE   8u
#define TESTPB_TYPE_URL  "type.googleapis.com/testpb.TestChannelDataMessage"
#define DATA_INITIAL_TXT "cqbench initial state"

typedef enum { TGT_CHANQ, TGT_REDIS, TGT_NATS } target_t;
typedef enum { MODE_CLOSED, MODE_RATE, MODE_IDLE, MODE_DATA } bmode_t;
typedef enum { PH_SETUP, PH_WARMUP, PH_MEASURE, PH_DRAIN, PH_DONE } phase_t;
typedef enum { TR_TCP, TR_WS, TR_KCP } transport_t;

static const char *const target_names[] = {"chanq", "redis", "nats"};
static const char *const mode_names[] = {"closed", "rate", "idle", "data"};
static const char *const transport_names[] = {"tcp", "ws", "kcp"};

/* ---- small helpers ----------------------------------------------------------------------- */

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("cqbench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static uint64_t now_ns(void)
{
    return bench_now_ns();
}

typedef struct bbuf {
    uint8_t *p;
    size_t len, cap;
} bbuf_t;

static void bbuf_append(bbuf_t *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p)
            die("out of memory");
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void bbuf_consume(bbuf_t *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

/* Index of the "\r\n" ending the line at p[0..n), or SIZE_MAX if it is not complete yet. */
static size_t find_crlf(const uint8_t *p, size_t n)
{
    size_t off = 0;
    while (off < n) {
        const uint8_t *r = memchr(p + off, '\r', n - off);
        if (!r)
            return SIZE_MAX;
        size_t i = (size_t)(r - p);
        if (i + 1 >= n)
            return SIZE_MAX;
        if (p[i + 1] == '\n')
            return i;
        off = i + 1;
    }
    return SIZE_MAX;
}

static bool parse_i64(const uint8_t *p, size_t n, int64_t *out)
{
    bool neg = false;
    int64_t v = 0;
    size_t i = 0;
    if (i < n && p[i] == '-') {
        neg = true;
        i++;
    }
    if (i == n)
        return false;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (p[i] - '0');
    }
    *out = neg ? -v : v;
    return true;
}

/* ---- /proc sampling ---------------------------------------------------------------------- */

/* VmRSS in KiB, or -1. */
static long proc_rss_kb(int pid)
{
    if (pid <= 0)
        return -1;
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* Time the threads of pid spent waiting on a run queue (runnable, not running), in seconds,
 * summed over /proc/PID/task/TID/schedstat; -1 if unavailable. A high value means the process
 * was starved of CPU (the machine was busy), not that it was idle. pid 0: this process. */
static double proc_runq_wait_s(int pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", pid > 0 ? pid : (int)getpid());
    DIR *d = opendir(path);
    if (!d)
        return -1;
    double sum = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sp[400];
        snprintf(sp, sizeof(sp), "%s/%s/schedstat", path, e->d_name);
        FILE *f = fopen(sp, "r");
        if (!f)
            continue;
        unsigned long long run, wait;
        if (fscanf(f, "%llu %llu", &run, &wait) == 2)
            sum += (double)wait / 1e9;
        fclose(f);
    }
    closedir(d);
    return sum;
}

/* Datagrams the kernel dropped on the UDP sockets bound to port (the "drops" column of
 * /proc/net/udp, summed: chanqd binds one SO_REUSEPORT socket per worker), or -1. */
static long long proc_udp_drops(unsigned port)
{
    FILE *f = fopen("/proc/net/udp", "r");
    if (!f)
        return -1;
    char line[512];
    long long sum = 0;
    unsigned lport;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, " %*u: %*8x:%4x", &lport) != 1 || lport != port)
            continue;
        /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops */
        char *save = NULL, *tok = strtok_r(line, " \t\n", &save);
        for (int i = 0; tok && i < 12; i++)
            tok = strtok_r(NULL, " \t\n", &save);
        if (tok)
            sum += atoll(tok);
    }
    fclose(f);
    return sum;
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void loadavg(char *out, size_t len)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double a = 0, b = 0, c = 0;
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &a, &b, &c) != 3)
            a = b = c = 0;
        fclose(f);
    }
    snprintf(out, len, "%.2f %.2f %.2f", a, b, c);
}

/* ---- options and state ------------------------------------------------------------------- */

static struct {
    target_t target;
    bmode_t mode;
    struct sockaddr_in addr;  /* client listener (chanq) or the server (redis, nats) */
    struct sockaddr_in saddr; /* chanq server listener */
    bool have_saddr;
    transport_t transport;       /* of the chanq subscribers */
    struct sockaddr_in ws_addr;  /* chanq WebSocket listener */
    struct sockaddr_in kcp_addr; /* chanq KCP listener (UDP) */
    char ws_host[64];            /* "HOST:PORT" of ws_addr, for the Host header */
    bool have_ws, have_kcp;
    int pid;
    int subs;
    int size;
    int window;
    double duration;
    double warmup;
    double rate;
    int parallel;
    int interval; /* data mode: fanOutIntervalMs of every subscription */
    const char *label;
} O = {
    .target = TGT_CHANQ,
    .mode = MODE_CLOSED,
    .subs = 100,
    .size = 64,
    .window = 500,
    .duration = 3,
    .warmup = 1,
    .rate = 1000,
    .parallel = 64,
    .interval = 20,
    .label = "",
};

typedef struct bconn {
    int idx; /* -1 for the publisher */
    bool ready;
    bool connected;
    bool writing;
    uint64_t next_seq;
    /* chanq: the publisher uses the libuv adapter, subscribers the sans-I/O core */
    chanq_uv_t *cu;
    chanq_client_t *core;
    /* subscribers: own non-blocking socket watched by a uv_poll_t (for recvmsg timestamps) */
    int fd;
    uv_poll_t poll;
    bench_ws_t *ws;   /* --transport ws: the WebSocket session */
    cq_kcp_t *kcp;    /* --transport kcp: the KCP engine */
    uint64_t rx_real; /* kernel receive timestamp (CLOCK_REALTIME ns) of the current read */
    /* publisher over raw uv_tcp (redis, nats) */
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    bbuf_t in;  /* received, not yet parsed */
    bbuf_t out; /* queued, not yet handed to the kernel */
    bbuf_t wr;  /* owned by the uv_write in flight */
} bconn_t;

typedef struct samples {
    uint32_t *v;
    size_t n, cap;
} samples_t;

static struct {
    uv_loop_t *loop;
    bconn_t pub;
    bconn_t *subs;
    int started, connecting, nready;
    phase_t phase;
    uint64_t sent, acked;
    uint32_t *ring; /* closed mode: deliveries per outstanding sequence */
    uint64_t deliveries, lost, dup, bad, closed;
    /* data mode: the channel, first (full-state) fan-outs, fan-outs whose newest update is
     * not newer than the subscriber's previous one (duplicates or reordering) */
    uint32_t chan_id;
    uint64_t full_fanouts, stale;
    uint64_t fanout_bytes; /* sum of the Any value sizes received */
    uint8_t *payload;
    uint64_t t_pub0;
    /* measurement window */
    uint64_t m_t0, m_t1, m_del0, m_del1, m_seq0, m_seq1;
    double cpu0, cpu1, ccpu0, ccpu1;
    double ucpu0, ucpu1;                 /* the server's user-mode share of cpu0, cpu1 */
    double wait0, wait1, cwait0, cwait1; /* run-queue wait of the server and of cqbench */
    long rss_base, rss_ready, rss_end;
    uint64_t setup_t0, setup_ns;
    /* latency samples (ns, clamped to UINT32_MAX): application (payload -> callback) and
     * kernel (payload -> socket receive timestamp) */
    samples_t lat, klat;
    /* stall detection */
    uint64_t wd_last;
    int wd_still;
    uint64_t drain_t0;
    /* subscriber wire traffic: reads (TCP/WS recvmsg calls, KCP datagrams) and bytes read,
     * datagrams sent (KCP: ACKs and window updates), duplicate KCP segments received; the
     * m_* pairs are their values at the start and end of the measurement window */
    uint64_t rx_reads, rx_bytes, tx_dgrams;
    uint64_t m_reads[2], m_bytes[2], m_txd[2], m_kdup[2];
    long long m_udrops[2]; /* kcp: drops on the server's UDP sockets (-1: unknown) */
    int exit_code;
    uint64_t exit_t0;
    uv_timer_t phase_timer, rate_timer, watchdog, drain_timer, kcp_timer, exit_timer;
    uv_check_t pump;
    char load_start[64];
    uint8_t rbuf[65536];
} G;

static void all_ready(void);
static void start_more(void);
static void finish(const char *error);

/* ---- deliveries -------------------------------------------------------------------------- */

static void add_sample(samples_t *s, int64_t ns)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1u << 16;
        uint32_t *p = realloc(s->v, s->cap * sizeof(*p));
        if (!p)
            die("out of memory");
        s->v = p;
    }
    s->v[s->n++] = ns < 0 ? 0 : ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

static uint64_t real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void on_payload(bconn_t *s, const uint8_t *p, size_t n)
{
    if (n < 24 || n != (size_t)O.size) {
        G.bad++;
        return;
    }
    uint64_t seq, ts, rts;
    memcpy(&seq, p, 8);
    memcpy(&ts, p + 8, 8);
    memcpy(&rts, p + 16, 8);
    G.deliveries++;
    if (seq != s->next_seq) {
        if (seq > s->next_seq)
            G.lost += seq - s->next_seq;
        else
            G.dup++;
    }
    s->next_seq = seq + 1;
    if (O.mode == MODE_CLOSED) {
        if (seq >= G.acked && seq < G.sent) {
            uint32_t w = (uint32_t)O.window;
            if (++G.ring[seq % w] == (uint32_t)O.subs) {
                while (G.acked < G.sent && G.ring[G.acked % w] == (uint32_t)O.subs) {
                    G.ring[G.acked % w] = 0;
                    G.acked++;
                }
            }
        }
    } else if (O.mode == MODE_RATE) {
        if (seq >= G.m_seq0 && seq < G.m_seq1) {
            add_sample(&G.lat, (int64_t)(now_ns() - ts));
            if (s->rx_real)
                add_sample(&G.klat, (int64_t)(s->rx_real - rts));
        }
    }
}

static void sub_ready(bconn_t *s)
{
    if (s->ready)
        return;
    s->ready = true;
    G.connecting--;
    G.nready++;
    if (G.nready == O.subs)
        all_ready();
    else
        start_more();
}

static void conn_lost(bconn_t *c, int err)
{
    G.closed++;
    if (G.phase != PH_DONE)
        fprintf(stderr, "cqbench: %s connection %d lost: %s\n", target_names[O.target], c->idx,
                err == 0                      ? "closed"
                : err <= -1000 && err > -1100 ? cq_strerror(err)
                                              : uv_strerror(err));
    if (G.phase == PH_SETUP)
        finish("connection lost during setup");
}

/* ---- raw TCP (redis, nats) --------------------------------------------------------------- */

static void raw_flush(bconn_t *c);

static void raw_written(uv_write_t *req, int status)
{
    bconn_t *c = req->data;
    c->writing = false;
    c->wr.len = 0;
    if (status < 0) {
        conn_lost(c, status);
        return;
    }
    raw_flush(c);
}

static void raw_flush(bconn_t *c)
{
    if (c->writing || !c->connected || c->out.len == 0)
        return;
    uv_buf_t b = uv_buf_init((char *)c->out.p, (unsigned)c->out.len);
    int k = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (k < 0 && k != UV_EAGAIN) {
        conn_lost(c, k);
        return;
    }
    size_t done = k > 0 ? (size_t)k : 0;
    bbuf_consume(&c->out, done);
    if (c->out.len == 0)
        return;
    bbuf_t t = c->wr; /* empty: no write in flight */
    c->wr = c->out;
    c->out = t;
    c->out.len = 0;
    c->writing = true;
    b = uv_buf_init((char *)c->wr.p, (unsigned)c->wr.len);
    int r = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, raw_written);
    if (r < 0) {
        c->writing = false;
        conn_lost(c, r);
    }
}

/* Subscriber writes are a few small handshake lines or packets: they always fit the socket
 * buffer, so a short write is treated as an error. */
static void sub_write(bconn_t *c, const void *p, size_t n)
{
    ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL);
    if (k != (ssize_t)n)
        die("subscriber %d: short write (%zd of %zu): %s", c->idx, k, n, strerror(errno));
}

static void conn_write(bconn_t *c, const char *s, size_t n)
{
    if (c->idx < 0) {
        bbuf_append(&c->out, s, n);
        raw_flush(c);
    } else {
        sub_write(c, s, n);
    }
}

/* One RESP value. Up to three top-level bulk elements of an array are captured. */
typedef struct resp {
    char type;
    int64_t num;
    const uint8_t *el[3];
    size_t ell[3];
} resp_t;

/* Returns the bytes used, 0 when incomplete, SIZE_MAX on a protocol error. */
static size_t resp_value(const uint8_t *p, size_t n, resp_t *v, int depth)
{
    if (n < 3 || depth > 4)
        return depth > 4 ? SIZE_MAX : 0;
    size_t e = find_crlf(p, n);
    if (e == SIZE_MAX)
        return 0;
    int64_t num = 0;
    v->type = (char)p[0];
    switch (p[0]) {
    case '+':
        return e + 2;
    case '-':
        fprintf(stderr, "cqbench: redis error: %.*s\n", (int)e - 1, (const char *)p + 1);
        return e + 2;
    case ':':
        if (!parse_i64(p + 1, e - 1, &v->num))
            return SIZE_MAX;
        return e + 2;
    case '$': {
        if (!parse_i64(p + 1, e - 1, &num))
            return SIZE_MAX;
        if (num < 0)
            return e + 2;
        size_t need = e + 2 + (size_t)num + 2;
        if (n < need)
            return 0;
        v->el[0] = p + e + 2;
        v->ell[0] = (size_t)num;
        return need;
    }
    case '*': {
        if (!parse_i64(p + 1, e - 1, &num))
            return SIZE_MAX;
        size_t off = e + 2;
        for (int64_t i = 0; i < num; i++) {
            resp_t sub = {0};
            size_t k = resp_value(p + off, n - off, &sub, depth + 1);
            if (k == 0 || k == SIZE_MAX)
                return k;
            if (i < 3 && sub.type == '$') {
                v->el[i] = sub.el[0];
                v->ell[i] = sub.ell[0];
            } else if (sub.type == ':') {
                v->num = sub.num;
            }
            off += k;
        }
        return off;
    }
    default:
        return SIZE_MAX;
    }
}

static bool eq(const uint8_t *p, size_t n, const char *s)
{
    size_t l = strlen(s);
    return p && n == l && memcmp(p, s, l) == 0;
}

static size_t redis_parse(bconn_t *c, const uint8_t *p, size_t n)
{
    size_t off = 0;
    for (;;) {
        resp_t v = {0};
        size_t k = resp_value(p + off, n - off, &v, 0);
        if (k == 0)
            break;
        if (k == SIZE_MAX)
            die("redis: protocol error");
        if (c->idx < 0) {
            if (v.type == '+' && !c->ready) { /* PONG */
                c->ready = true;
                start_more();
            }
        } else if (v.type == '*') {
            if (eq(v.el[0], v.ell[0], "message"))
                on_payload(c, v.el[2], v.ell[2]);
            else if (eq(v.el[0], v.ell[0], "subscribe"))
                sub_ready(c);
        }
        off += k;
    }
    return off;
}

static size_t nats_parse(bconn_t *c, const uint8_t *p, size_t n)
{
    size_t off = 0;
    for (;;) {
        const uint8_t *q = p + off;
        size_t left = n - off;
        size_t e = find_crlf(q, left);
        if (e == SIZE_MAX)
            break;
        if (e > 4 && memcmp(q, "MSG ", 4) == 0) {
            size_t j = e;
            while (j > 0 && q[j - 1] != ' ')
                j--;
            int64_t size;
            if (!parse_i64(q + j, e - j, &size) || size < 0)
                die("nats: bad MSG line");
            size_t need = e + 2 + (size_t)size + 2;
            if (left < need)
                break;
            on_payload(c, q + e + 2, (size_t)size);
            off += need;
            continue;
        }
        if (e == 4 && memcmp(q, "PING", 4) == 0) {
            conn_write(c, "PONG\r\n", 6);
        } else if (e == 4 && memcmp(q, "PONG", 4) == 0) {
            if (c->idx < 0) {
                if (!c->ready) {
                    c->ready = true;
                    start_more();
                }
            } else {
                sub_ready(c);
            }
        } else if (e > 0 && q[0] == '-') {
            fprintf(stderr, "cqbench: nats error: %.*s\n", (int)e, (const char *)q);
        }
        off += e + 2;
    }
    return off;
}

static void sub_chanq_flush(bconn_t *c);
static void sub_lost(bconn_t *c, int err);

/* -- chanq subscribers over WebSocket: the frame payloads are the CH byte stream -- */

static void ws_on_data(void *ud, const uint8_t *p, size_t n)
{
    bconn_t *c = ud;
    if (chanq_client_error(c->core))
        return; /* already reported */
    int r = chanq_client_feed(c->core, p, n);
    if (r < 0)
        conn_lost(c, r);
}

static void ws_on_send(void *ud, const uint8_t *p, size_t n)
{
    sub_write(ud, p, n);
}

static const bench_ws_cbs_t ws_cbs = {ws_on_data, ws_on_send};

static void ws_input(bconn_t *c, const uint8_t *p, size_t n)
{
    int r = bench_ws_feed(c->ws, p, n, &ws_cbs, c);
    if (r < 0) {
        if (r == CQ_EWSPROTO && G.phase != PH_DONE)
            fprintf(stderr, "cqbench: subscriber %d: websocket: %s\n", c->idx, bench_ws_why(c->ws));
        sub_lost(c, r);
        return;
    }
    sub_chanq_flush(c); /* the AUTH queued before the 101, then any reply */
}

/* Writes the upgrade request; the AUTH already queued in the core waits for the 101. */
static void ws_start(bconn_t *c)
{
    char req[512];
    c->ws = calloc(1, sizeof(*c->ws));
    if (!c->ws)
        die("out of memory");
    int n = bench_ws_request(c->ws, O.ws_host, WS_PATH, req, sizeof(req));
    if (n < 0)
        die("websocket request: %s", strerror(-n));
    sub_write(c, req, (size_t)n);
}

/* Hands received bytes to the target's parser; keeps an incomplete tail in c->in. */
static void consume_input(bconn_t *c, const uint8_t *data, size_t n)
{
    if (O.target == TGT_CHANQ && c->ws) {
        ws_input(c, data, n);
        return;
    }
    if (O.target == TGT_CHANQ) {
        int r = chanq_client_feed(c->core, data, n);
        if (r < 0) {
            conn_lost(c, r);
            return;
        }
        sub_chanq_flush(c);
        return;
    }
    const uint8_t *p;
    size_t len;
    bool direct = c->in.len == 0;
    if (direct) {
        p = data;
        len = n;
    } else {
        bbuf_append(&c->in, data, n);
        p = c->in.p;
        len = c->in.len;
    }
    size_t used = O.target == TGT_REDIS ? redis_parse(c, p, len) : nats_parse(c, p, len);
    if (direct) {
        if (used < len)
            bbuf_append(&c->in, p + used, len - used);
    } else {
        bbuf_consume(&c->in, used);
    }
}

/* The handshake a connection sends once TCP is up (chanq: AUTH, see cq_sub_start). */
static void send_hello(bconn_t *c)
{
    char buf[160];
    int k;
    if (O.target == TGT_REDIS) {
        k = snprintf(buf, sizeof(buf), "%s", c->idx < 0 ? "PING\r\n" : "SUBSCRIBE " TOPIC "\r\n");
    } else {
        k = snprintf(buf, sizeof(buf), "CONNECT {\"verbose\":false,\"pedantic\":false}\r\n");
        if (c->idx >= 0)
            k += snprintf(buf + k, sizeof(buf) - (size_t)k, "SUB " TOPIC " %d\r\n", c->idx + 1);
        k += snprintf(buf + k, sizeof(buf) - (size_t)k, "PING\r\n");
    }
    conn_write(c, buf, (size_t)k);
}

/* -- the publisher over uv_tcp (redis, nats) -- */

static void raw_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)h;
    (void)hint;
    *b = uv_buf_init((char *)G.rbuf, sizeof(G.rbuf));
}

static void raw_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    bconn_t *c = s->data;
    if (n < 0) {
        uv_read_stop(s);
        c->connected = false;
        conn_lost(c, (int)n);
        return;
    }
    if (n > 0)
        consume_input(c, (const uint8_t *)buf->base, (size_t)n);
}

static void raw_connected(uv_connect_t *req, int status)
{
    bconn_t *c = req->data;
    if (status < 0) {
        conn_lost(c, status);
        return;
    }
    c->connected = true;
    uv_read_start((uv_stream_t *)&c->tcp, raw_alloc, raw_read);
    send_hello(c);
}

static void raw_connect(bconn_t *c)
{
    uv_tcp_init(G.loop, &c->tcp);
    uv_tcp_nodelay(&c->tcp, 1);
    c->tcp.data = c;
    c->creq.data = c;
    c->wreq.data = c;
    int r = uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&O.addr, raw_connected);
    if (r < 0)
        die("connect: %s", uv_strerror(r));
}

/* -- subscribers: non-blocking socket + uv_poll_t + recvmsg(SO_TIMESTAMPNS) -- */

static void cq_sub_start(bconn_t *c);
static void kcp_readable(bconn_t *c);

static void sub_lost(bconn_t *c, int err)
{
    uv_poll_stop(&c->poll);
    c->connected = false;
    conn_lost(c, err);
}

/* One recvmsg() into G.rbuf, with the kernel receive timestamp in c->rx_real. Returns the byte
 * count, 0 when nothing is ready, or -1 after the connection was lost (EOF or an error). */
static ssize_t sub_recv(bconn_t *c)
{
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {G.rbuf, sizeof(G.rbuf)};
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof(ctl.buf);
    ssize_t n = recvmsg(c->fd, &mh, 0);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return 0;
        sub_lost(c, -errno);
        return -1;
    }
    if (n == 0) {
        if (!c->kcp)
            sub_lost(c, UV_EOF);
        return c->kcp ? 0 : -1;
    }
    c->rx_real = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(cm), sizeof(ts));
            c->rx_real = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        }
    }
    G.rx_reads++;
    G.rx_bytes += (uint64_t)n;
    return n;
}

static void sub_on_poll(uv_poll_t *h, int status, int events)
{
    bconn_t *c = h->data;
    if (status < 0) {
        sub_lost(c, status);
        return;
    }
    if (!c->connected) {
        if (!(events & UV_WRITABLE))
            return;
        int err = 0;
        socklen_t el = sizeof(err);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err) {
            sub_lost(c, -err);
            return;
        }
        c->connected = true;
        uv_poll_start(&c->poll, UV_READABLE, sub_on_poll);
        if (O.target == TGT_CHANQ)
            cq_sub_start(c);
        else
            send_hello(c);
        return;
    }
    if (!(events & UV_READABLE))
        return;
    if (c->kcp) {
        kcp_readable(c);
        return;
    }
    ssize_t n = sub_recv(c);
    if (n > 0)
        consume_input(c, G.rbuf, (size_t)n);
}

static void kcp_connect(bconn_t *c);

static void sub_connect(bconn_t *c)
{
    if (O.target == TGT_CHANQ && O.transport == TR_KCP) {
        kcp_connect(c);
        return;
    }
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        die("socket: %s", strerror(errno));
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(c->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
    const struct sockaddr_in *a = O.transport == TR_WS ? &O.ws_addr : &O.addr;
    if (connect(c->fd, (const struct sockaddr *)a, sizeof(*a)) < 0 && errno != EINPROGRESS)
        die("connect: %s", strerror(errno));
    int r = uv_poll_init(G.loop, &c->poll, c->fd);
    if (r < 0)
        die("uv_poll_init: %s", uv_strerror(r));
    c->poll.data = c;
    uv_poll_start(&c->poll, UV_WRITABLE, sub_on_poll);
}

/* -- chanq subscribers over KCP: a connected UDP socket and a cq_kcp engine each -- */

/* The engine's output: one datagram. One that cannot be sent is lost; the ARQ resends it. */
static void kcp_out(void *ud, const uint8_t *dgram, size_t len)
{
    bconn_t *c = ud;
    if (send(c->fd, dgram, len, MSG_NOSIGNAL) == (ssize_t)len)
        G.tx_dgrams++;
}

static void kcp_write(bconn_t *c, const uint8_t *p, size_t n)
{
    ssize_t k = cq_kcp_send(c->kcp, p, n);
    if (k != (ssize_t)n)
        die("subscriber %d: KCP send queue full", c->idx);
    cq_kcp_flush(c->kcp, uv_now(G.loop));
}

/* Feeds the in-order KCP payload to the chanq core. */
static void kcp_deliver(bconn_t *c)
{
    size_t len;
    const uint8_t *p;
    while ((p = cq_kcp_peek(c->kcp, &len)) != NULL && len) {
        int r = chanq_client_feed(c->core, p, len);
        cq_kcp_consume(c->kcp, len);
        if (r < 0) {
            sub_lost(c, r);
            return;
        }
    }
    sub_chanq_flush(c);
}

static void kcp_readable(bconn_t *c)
{
    uint64_t now = uv_now(G.loop);
    for (int i = 0; i < KCP_READ_BATCH && c->connected; i++) {
        ssize_t n = sub_recv(c);
        if (n <= 0)
            return;
        int r = cq_kcp_input(c->kcp, G.rbuf, (size_t)n, now);
        if (r < 0) {
            sub_lost(c, r);
            return;
        }
        kcp_deliver(c);
    }
}

/* Every KCP_TICK_MS: retransmissions, window updates and data not sent at once. */
static void on_kcp_tick(uv_timer_t *t)
{
    (void)t;
    uint64_t now = uv_now(G.loop);
    for (int i = 0; i < G.started; i++)
        if (G.subs[i].kcp && G.subs[i].connected)
            cq_kcp_update(G.subs[i].kcp, now);
}

static void kcp_connect(bconn_t *c)
{
    c->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        die("socket: %s", strerror(errno));
    int one = 1, size = KCP_SOCKBUF;
    setsockopt(c->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
    setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    if (connect(c->fd, (const struct sockaddr *)&O.kcp_addr, sizeof(O.kcp_addr)) < 0)
        die("connect (udp): %s", strerror(errno));
    uint32_t conv = 0;
    while (conv == 0)
        if (getrandom(&conv, sizeof(conv), 0) != (ssize_t)sizeof(conv))
            die("getrandom failed");
    cq_kcp_opts_t ko = cq_kcp_opts_fast();
    c->kcp = cq_kcp_new(conv, &ko, kcp_out, c);
    if (!c->kcp)
        die("cq_kcp_new failed");
    int r = uv_poll_init(G.loop, &c->poll, c->fd);
    if (r < 0)
        die("uv_poll_init: %s", uv_strerror(r));
    c->poll.data = c;
    uv_poll_start(&c->poll, UV_READABLE, sub_on_poll);
    c->connected = true;
    if (!uv_is_active((uv_handle_t *)&G.kcp_timer))
        uv_timer_start(&G.kcp_timer, on_kcp_tick, KCP_TICK_MS, KCP_TICK_MS);
    cq_sub_start(c);
}

static uint64_t kcp_dup_total(void)
{
    uint64_t n = 0;
    cq_kcp_stats_t st;
    for (int i = 0; i < G.started; i++) {
        if (G.subs[i].kcp) {
            cq_kcp_stats(G.subs[i].kcp, &st);
            n += st.in_dup;
        }
    }
    return n;
}

/* ---- chanq ------------------------------------------------------------------------------- */

/* One field of a serialized protobuf message: its number, wire type, varint value (wire type
 * 0; the length for wire type 2) and bytes (wire types 1, 2, 5; borrowed from the input). */
typedef struct pbf {
    uint32_t num;
    unsigned wt;
    uint64_t v;
    const uint8_t *p;
    size_t len;
} pbf_t;

static bool pb_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned sh = 0; *pp < end && sh < 64; sh += 7) {
        uint8_t b = *(*pp)++;
        v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* Reads the field at *pp and advances past it: 1 = a field, 0 = end of input, -1 = malformed. */
static int pb_next(const uint8_t **pp, const uint8_t *end, pbf_t *f)
{
    uint64_t tag;
    if (*pp >= end)
        return 0;
    if (!pb_varint(pp, end, &tag))
        return -1;
    *f = (pbf_t){.num = (uint32_t)(tag >> 3), .wt = (unsigned)(tag & 7)};
    size_t k;
    switch (f->wt) {
    case 0:
        return pb_varint(pp, end, &f->v) ? 1 : -1;
    case 1:
    case 5:
        k = f->wt == 1 ? 8 : 4;
        break;
    case 2:
        if (!pb_varint(pp, end, &f->v) || f->v > (uint64_t)(end - *pp))
            return -1;
        k = (size_t)f->v;
        break;
    default:
        return -1;
    }
    if ((size_t)(end - *pp) < k)
        return -1;
    f->p = *pp;
    f->len = k;
    *pp += k;
    return 1;
}

/* ServerForwardMessage.payload (field 2), or NULL. */
static const uint8_t *sfm_payload(const uint8_t *p, size_t n, size_t *plen)
{
    const uint8_t *end = p + n;
    pbf_t f;
    while (pb_next(&p, end, &f) > 0) {
        if (f.num == 2 && f.wt == 2) {
            *plen = f.len;
            return f.p;
        }
    }
    return NULL;
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/* Serializes TestChannelDataMessage{text = "<rts> xxx...", num} into out (O.size bytes
 * available); returns its length (O.size, or one byte less at a varint-length boundary). */
static size_t testpb_encode(uint8_t *out, uint64_t rts, uint64_t num)
{
    size_t size = (size_t)O.size;
    size_t tail = 1 + varint_len(num); /* field 2: tag + varint */
    size_t tlen = size - tail - 1 - varint_len(size);
    size_t k = 0;
    out[k++] = 0x0a; /* field 1, length-delimited */
    k += put_varint(out + k, tlen);
    int d = snprintf((char *)out + k, tlen + 1, "%" PRIu64 " ", rts);
    if (d < 0 || (size_t)d >= tlen)
        die("--size too small for the data payload");
    memset(out + k + (size_t)d, 'x', tlen - (size_t)d);
    k += tlen;
    out[k++] = 0x10; /* field 2, varint */
    k += put_varint(out + k, num);
    return k;
}

/* A merged fan-out of the data channel: counts it and takes a latency sample from its newest
 * update. The initial state (no timestamp, num 0) is counted as a first fan-out. */
static void on_data_fanout(bconn_t *s, const chanq_msg_t *m)
{
    Channeldpb__ChannelDataUpdateMessage *u;
    if (chanq_decode_data_update(m, &u) < 0) {
        G.bad++;
        return;
    }
    if (!u->data->type_url || strcmp(u->data->type_url, TESTPB_TYPE_URL) != 0) {
        G.bad++;
        chanq_unpack_free(u);
        return;
    }
    chanq_testdata_t td;
    int r = chanq_testdata_decode(u->data->value.data, u->data->value.len, &td);
    const uint8_t *txt = (const uint8_t *)td.text;
    size_t tl = r < 0 ? 0 : td.text_len;
    uint64_t num = r < 0 ? 0 : td.num;
    G.deliveries++;
    G.fanout_bytes += u->data->value.len;
    uint64_t rts = 0;
    size_t i = 0;
    while (txt && i < tl && i < 20 && txt[i] >= '0' && txt[i] <= '9')
        rts = rts * 10 + (uint64_t)(txt[i++] - '0');
    bool stamped = i > 0 && i < tl && txt[i] == ' ';
    chanq_unpack_free(u);
    if (r < 0) {
        G.bad++;
        return;
    }
    if (!num || !stamped) {
        G.full_fanouts++;
        return;
    }
    if (num <= s->next_seq)
        G.stale++;
    s->next_seq = num;
    uint64_t seq = num - 1;
    if (seq >= G.m_seq0 && seq < G.m_seq1) {
        add_sample(&G.lat, (int64_t)(real_ns() - rts));
        if (s->rx_real)
            add_sample(&G.klat, (int64_t)(s->rx_real - rts));
    }
}

static void cq_on_close(chanq_uv_t *u, int err, void *ud)
{
    bconn_t *c = ud;
    (void)u;
    c->cu = NULL;
    c->connected = false;
    conn_lost(c, err);
}

static void cq_sub_msg(void *ud, const chanq_msg_t *m)
{
    bconn_t *c = ud;
    if (O.mode == MODE_DATA) {
        if (m->channel_id != G.chan_id)
            return;
        if (m->msg_type == MT_DATA_UPDATE)
            on_data_fanout(c, m);
        else if (m->msg_type == MT_SUB_TO_CHAN)
            sub_ready(c);
        return;
    }
    if (m->msg_type == USER_MSG_TYPE) {
        size_t plen = 0;
        const uint8_t *pl = sfm_payload(m->body, m->body_len, &plen);
        if (pl)
            on_payload(c, pl, plen);
        else
            G.bad++;
    } else if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__SUB_TO_CHANNEL &&
               m->channel_id == GLOBAL_CHANNEL) {
        sub_ready(c);
    }
}

static void cq_pub_msg(chanq_uv_t *u, const chanq_msg_t *m, void *ud)
{
    (void)u;
    (void)ud;
    (void)m; /* AUTH copies, SUB results: nothing to do */
}

static void cq_sub_auth(void *ud, const chanq_msg_t *m)
{
    bconn_t *c = ud;
    (void)m;
    uint32_t id = chanq_client_conn_id(c->core);
    if (!id) {
        finish("chanq: client AUTH failed");
        return;
    }
    if (!G.pub.cu) {
        finish("chanq: publisher gone");
        return;
    }
    int r;
    if (O.mode == MODE_DATA) {
        Channeldpb__ChannelSubscriptionOptions so = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
        so.has_fanoutintervalms = true;
        so.fanoutintervalms = (uint32_t)O.interval;
        r = chanq_client_sub_to_channel(chanq_uv_client(G.pub.cu), 0, G.chan_id, id, &so);
    } else {
        r = chanq_client_sub_to_channel(chanq_uv_client(G.pub.cu), 0, GLOBAL_CHANNEL, id, NULL);
    }
    if (r < 0)
        die("sub_to_channel: %s", cq_strerror(r));
}

static void cq_pub_created(void *ud, const chanq_msg_t *m)
{
    bconn_t *c = ud;
    Channeldpb__CreateChannelResultMessage *res =
        chanq_unpack(&channeldpb__create_channel_result_message__descriptor, m->body, m->body_len);
    if (!res) {
        finish("chanq: bad CREATE_CHANNEL result");
        return;
    }
    if (O.mode == MODE_DATA) {
        G.chan_id = res->channelid;
        if (!G.chan_id || res->channeltype != CHANNELDPB__CHANNEL_TYPE__SUBWORLD) {
            chanq_unpack_free(res);
            finish("chanq: CREATE_CHANNEL(SUBWORLD) failed");
            return;
        }
    }
    chanq_unpack_free(res);
    c->ready = true;
    start_more();
}

static void cq_pub_auth(void *ud, const chanq_msg_t *m)
{
    bconn_t *c = ud;
    (void)m;
    if (!chanq_client_conn_id(chanq_uv_client(c->cu))) {
        finish("chanq: server AUTH failed");
        return;
    }
    chanq_client_t *core = chanq_uv_client(c->cu);
    uint32_t stub;
    if (chanq_client_stub_alloc(core, cq_pub_created, c, &stub) < 0)
        die("stub_alloc failed");
    int r;
    if (O.mode == MODE_DATA) {
        /* initial state: TestChannelDataMessage{text: DATA_INITIAL_TXT} (num 0: not encoded) */
        uint8_t init[64];
        size_t n = strlen(DATA_INITIAL_TXT);
        init[0] = 0x0a;
        init[1] = (uint8_t)n;
        memcpy(init + 2, DATA_INITIAL_TXT, n);
        chanq_channel_data_t data = {.type_url = TESTPB_TYPE_URL, .value = init, .len = n + 2};
        r = chanq_client_create_channel_data(core, stub, CT_SUBWORLD, "cqbench", NULL, &data);
    } else {
        r = chanq_client_create_channel(core, stub, CT_GLOBAL, "cqbench", NULL);
    }
    if (r < 0)
        die("create_channel failed: %s", cq_strerror(r));
}

static void cq_on_connect(chanq_uv_t *u, int status, void *ud)
{
    bconn_t *c = ud;
    if (status < 0)
        return; /* on_close follows */
    c->connected = true;
    chanq_client_t *core = chanq_uv_client(u);
    uint32_t stub;
    int r = chanq_client_stub_alloc(core, cq_pub_auth, c, &stub);
    if (r == 0)
        r = chanq_client_auth(core, stub, "cqbench-server", "cqbench");
    if (r < 0)
        die("auth: %s", cq_strerror(r));
}

/* The publisher: a SERVER connection through libchanq's libuv adapter. */
static void cq_connect_pub(bconn_t *c)
{
    chanq_uv_cbs_t cbs = {
        .on_connect = cq_on_connect,
        .on_message = cq_pub_msg,
        .on_close = cq_on_close,
    };
    int r = chanq_uv_connect(G.loop, (const struct sockaddr *)&O.saddr, NULL, &cbs, c, &c->cu);
    if (r < 0)
        die("connect: %s", uv_strerror(r));
}

/* Puts a subscriber's outbound CH bytes on its transport: the socket (tcp), one masked binary
 * message (ws), or the KCP engine, flushed at once (kcp). */
static void sub_send(bconn_t *c, const uint8_t *p, size_t n)
{
    if (c->kcp) {
        kcp_write(c, p, n);
        return;
    }
    if (!c->ws) {
        sub_write(c, p, n);
        return;
    }
    uint8_t *f = malloc(n + BENCH_WS_FRAME_HDR);
    if (!f)
        die("out of memory");
    int k = bench_ws_frame(BENCH_WS_BINARY, p, n, f);
    if (k < 0)
        die("websocket: no random masking key");
    sub_write(c, f, (size_t)k);
    free(f);
}

/* Writes what a subscriber's sans-I/O core has queued (ws: once the upgrade is done). */
static void sub_chanq_flush(bconn_t *c)
{
    const uint8_t *p;
    size_t n;
    if (c->ws && !bench_ws_open(c->ws))
        return;
    int r = chanq_client_out(c->core, &p, &n);
    if (r < 0)
        die("chanq_client_out: %s", cq_strerror(r));
    if (n) {
        sub_send(c, p, n);
        chanq_client_out_consume(c->core, n);
    }
}

/* A subscriber (CLIENT) is connected: create its core and authenticate. */
static void cq_sub_start(bconn_t *c)
{
    chanq_opts_t o;
    chanq_opts_init(&o);
    o.on_message = cq_sub_msg;
    o.ud = c;
    uint32_t stub;
    int r = chanq_client_new(&o, &c->core);
    if (r == 0)
        r = chanq_client_stub_alloc(c->core, cq_sub_auth, c, &stub);
    if (r == 0)
        r = chanq_client_auth(c->core, stub, "cqbench", "cqbench");
    if (r < 0)
        die("auth: %s", cq_strerror(r));
    if (O.transport == TR_WS)
        ws_start(c);
    sub_chanq_flush(c);
}

/* ---- publishing -------------------------------------------------------------------------- */

static void publish_one(void)
{
    uint64_t seq = G.sent++, ts = now_ns(), rts = real_ns();
    if (O.mode == MODE_DATA) {
        size_t n = testpb_encode(G.payload, rts, seq + 1);
        int r = chanq_client_data_update(chanq_uv_client(G.pub.cu), G.chan_id, TESTPB_TYPE_URL,
                                         G.payload, n);
        if (r < 0)
            die("data update: %s", cq_strerror(r));
        return;
    }
    memcpy(G.payload, &seq, 8);
    memcpy(G.payload + 8, &ts, 8);
    memcpy(G.payload + 16, &rts, 8);
    switch (O.target) {
    case TGT_CHANQ: {
        int r = chanq_client_server_forward(chanq_uv_client(G.pub.cu), GLOBAL_CHANNEL,
                                            BC_ALL_BUT_SERVER, USER_MSG_TYPE, 0, G.payload,
                                            (size_t)O.size);
        if (r < 0)
            die("publish: %s", cq_strerror(r));
        break;
    }
    case TGT_REDIS: {
        char head[96];
        int k = snprintf(head, sizeof(head), "*3\r\n$7\r\nPUBLISH\r\n$%zu\r\n" TOPIC "\r\n$%d\r\n",
                         strlen(TOPIC), O.size);
        bbuf_append(&G.pub.out, head, (size_t)k);
        bbuf_append(&G.pub.out, G.payload, (size_t)O.size);
        bbuf_append(&G.pub.out, "\r\n", 2);
        break;
    }
    case TGT_NATS: {
        char head[64];
        int k = snprintf(head, sizeof(head), "PUB " TOPIC " %d\r\n", O.size);
        bbuf_append(&G.pub.out, head, (size_t)k);
        bbuf_append(&G.pub.out, G.payload, (size_t)O.size);
        bbuf_append(&G.pub.out, "\r\n", 2);
        break;
    }
    }
}

static bool publishing(void)
{
    return (G.phase == PH_WARMUP || G.phase == PH_MEASURE) && G.pub.connected;
}

/* Closed loop: runs after each poll; refills the window. For chanq the adapter flushes the
 * queued messages in its prepare hook before the loop next blocks. */
static void on_pump(uv_check_t *h)
{
    (void)h;
    if (!publishing())
        return;
    bool any = false;
    while (G.sent - G.acked < (uint64_t)O.window) {
        publish_one();
        any = true;
    }
    if (any && O.target != TGT_CHANQ)
        raw_flush(&G.pub);
}

static void on_rate_tick(uv_timer_t *t)
{
    (void)t;
    if (!publishing())
        return;
    uint64_t due = (uint64_t)((double)(now_ns() - G.t_pub0) * O.rate / 1e9);
    bool any = false;
    while (G.sent < due) {
        publish_one();
        any = true;
    }
    if (any && O.target != TGT_CHANQ)
        raw_flush(&G.pub);
}

/* ---- phases ------------------------------------------------------------------------------ */

static void start_more(void)
{
    if (!G.pub.ready)
        return;
    while (G.started < O.subs && G.connecting < O.parallel) {
        bconn_t *s = &G.subs[G.started];
        s->idx = G.started++;
        G.connecting++;
        sub_connect(s);
    }
}

static void measure_end(uv_timer_t *t);

/* Subscriber wire counters at the start (i = 0) or end (i = 1) of the measurement window. */
static void snap_wire(int i)
{
    G.m_reads[i] = G.rx_reads;
    G.m_bytes[i] = G.rx_bytes;
    G.m_txd[i] = G.tx_dgrams;
    G.m_kdup[i] = kcp_dup_total();
    G.m_udrops[i] = O.transport == TR_KCP ? proc_udp_drops(ntohs(O.kcp_addr.sin_port)) : -1;
}

static void measure_start(uv_timer_t *t)
{
    (void)t;
    G.phase = PH_MEASURE;
    G.m_t0 = now_ns();
    G.m_del0 = G.deliveries;
    G.m_seq0 = G.sent;
    G.cpu0 = bench_proc_cpu_s(O.pid, &G.ucpu0);
    G.ccpu0 = self_cpu_s();
    G.wait0 = proc_runq_wait_s(O.pid);
    G.cwait0 = proc_runq_wait_s(0);
    snap_wire(0);
    uv_timer_start(&G.phase_timer, measure_end, (uint64_t)(O.duration * 1000), 0);
}

static void on_drain(uv_timer_t *t)
{
    (void)t;
    bool done = G.deliveries >= G.sent * (uint64_t)O.subs;
    if (done || now_ns() - G.drain_t0 > (uint64_t)DRAIN_MAX_MS * 1000000u)
        finish(NULL);
}

static void measure_end(uv_timer_t *t)
{
    (void)t;
    G.m_t1 = now_ns();
    G.m_del1 = G.deliveries;
    G.m_seq1 = G.sent;
    G.cpu1 = bench_proc_cpu_s(O.pid, &G.ucpu1);
    G.ccpu1 = self_cpu_s();
    G.wait1 = proc_runq_wait_s(O.pid);
    G.cwait1 = proc_runq_wait_s(0);
    G.rss_end = proc_rss_kb(O.pid);
    snap_wire(1);
    if (O.mode == MODE_IDLE || O.mode == MODE_DATA) {
        finish(NULL); /* data: fan-outs are counted by arrival within the window */
        return;
    }
    G.phase = PH_DRAIN;
    G.drain_t0 = now_ns();
    uv_timer_stop(&G.rate_timer);
    uv_timer_start(&G.drain_timer, on_drain, 10, 10);
}

static void all_ready(void)
{
    G.setup_ns = now_ns() - G.setup_t0;
    G.rss_ready = proc_rss_kb(O.pid);
    G.phase = PH_WARMUP;
    if (O.mode == MODE_CLOSED) {
        uv_check_start(&G.pump, on_pump);
    } else if (O.mode == MODE_RATE || O.mode == MODE_DATA) {
        G.t_pub0 = now_ns();
        uv_timer_start(&G.rate_timer, on_rate_tick, 1, 1);
    }
    /* idle: the warm-up is a settle time; nothing is sent */
    uv_timer_start(&G.phase_timer, measure_start, (uint64_t)(O.warmup * 1000), 0);
}

static void on_watchdog(uv_timer_t *t)
{
    (void)t;
    if (G.phase == PH_SETUP) {
        if (now_ns() - G.setup_t0 > (uint64_t)SETUP_TIMEOUT_MS * 1000000u)
            finish("setup timed out");
        return;
    }
    if (O.mode == MODE_IDLE || G.phase == PH_DONE)
        return;
    if (G.deliveries == G.wd_last && G.sent * (uint64_t)O.subs > G.deliveries) {
        if (++G.wd_still >= STALL_SECONDS)
            finish("stalled: no delivery for 5 s");
    } else {
        G.wd_still = 0;
    }
    G.wd_last = G.deliveries;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct pct {
    double p50, p99, max, mean; /* microseconds; -1 without samples */
} pct_t;

static pct_t pct(samples_t *s)
{
    pct_t r = {-1, -1, -1, -1};
    if (!s->n)
        return r;
    qsort(s->v, s->n, sizeof(*s->v), cmp_u32);
    r.p50 = s->v[(s->n - 1) / 2] / 1e3;
    r.p99 = s->v[(size_t)((double)(s->n - 1) * 0.99)] / 1e3;
    r.max = s->v[s->n - 1] / 1e3;
    double sum = 0;
    for (size_t i = 0; i < s->n; i++)
        sum += s->v[i];
    r.mean = sum / (double)s->n / 1e3;
    return r;
}

static void on_exit_tick(uv_timer_t *t)
{
    (void)t;
    bool flushed = !G.pub.cu || chanq_uv_pending(G.pub.cu) == 0;
    if (flushed || now_ns() - G.exit_t0 > (uint64_t)EXIT_FLUSH_MS * 1000000u)
        exit(G.exit_code);
}

/* KCP has no close: the publisher (a SERVER connection) asks chanqd to DISCONNECT every
 * subscriber, so the server stops fanning out to them once cqbench is gone. Returns true if
 * DISCONNECTs were queued; the exit then waits until they are written (on_exit_tick). */
static bool kcp_disconnect_all(void)
{
    if (O.target != TGT_CHANQ || O.transport != TR_KCP || !G.pub.cu)
        return false;
    chanq_client_t *pc = chanq_uv_client(G.pub.cu);
    for (int i = 0; i < G.started; i++) {
        uint32_t id = G.subs[i].core ? chanq_client_conn_id(G.subs[i].core) : 0;
        if (id && chanq_client_disconnect(pc, id) < 0)
            return false;
    }
    return true;
}

static void finish(const char *error)
{
    if (G.phase == PH_DONE)
        return;
    bool measured = G.m_t1 != 0;
    G.phase = PH_DONE;
    double secs = measured ? (double)(G.m_t1 - G.m_t0) / 1e9 : 0;
    double dels = measured ? (double)(G.m_del1 - G.m_del0) : 0;
    double cpu = measured && G.cpu0 >= 0 && G.cpu1 >= 0 ? G.cpu1 - G.cpu0 : -1;
    double ccpu = measured ? G.ccpu1 - G.ccpu0 : -1;
    double dps = secs > 0 ? dels / secs : 0;
    double dpc = cpu > 0 ? dels / cpu : -1;
    double cores = cpu >= 0 && secs > 0 ? cpu / secs : -1;
    uint64_t expected = G.sent * (uint64_t)O.subs;
    uint64_t missing = expected > G.deliveries ? expected - G.deliveries : 0;
    /* data: a fan-out per subscriber and window; nothing else is "expected" per message */
    double ideal = O.mode == MODE_DATA ? O.subs * 1000.0 / O.interval : 0;
    if (O.mode == MODE_DATA)
        missing = 0;
    double fanout_b = G.deliveries ? (double)G.fanout_bytes / (double)G.deliveries : 0;
    double ucores = measured && cpu >= 0 && secs > 0 ? (G.ucpu1 - G.ucpu0) / secs : -1;
    double swait = measured && O.pid > 0 && G.wait0 >= 0 && G.wait1 >= 0 ? G.wait1 - G.wait0 : -1;
    double cwait = measured && G.cwait0 >= 0 && G.cwait1 >= 0 ? G.cwait1 - G.cwait0 : -1;
    pct_t la = pct(&G.lat), lk = pct(&G.klat);
    long long udrops =
        measured && G.m_udrops[0] >= 0 && G.m_udrops[1] >= 0 ? G.m_udrops[1] - G.m_udrops[0] : -1;
    long rss = G.rss_end > 0 ? G.rss_end : proc_rss_kb(O.pid);
    double rss_per_conn = -1;
    int conns = O.subs + 1;
    if (O.mode == MODE_IDLE && rss > 0 && G.rss_base > 0)
        rss_per_conn = (double)(rss - G.rss_base) * 1024.0 / conns;
    char load_end[64];
    loadavg(load_end, sizeof(load_end));

    printf("{\"target\":\"%s\",\"label\":\"%s\",\"mode\":\"%s\",\"subs\":%d,\"size\":%d,"
           "\"window\":%d,\"rate\":%.0f,\"duration_s\":%.3f,\"sent\":%" PRIu64
           ",\"deliveries\":%.0f,\"deliveries_total\":%" PRIu64 ",\"missing\":%" PRIu64
           ",\"lost\":%" PRIu64 ",\"dup\":%" PRIu64 ",\"bad\":%" PRIu64 ",\"closed\":%" PRIu64
           ",\"deliveries_per_s\":%.0f,\"server_cpu_s\":%.3f,\"server_cores\":%.4f,"
           "\"deliveries_per_server_cpu_s\":%.0f,\"client_cpu_s\":%.3f,"
           "\"lat_samples\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,\"mean_us\":%.1f,"
           "\"klat_samples\":%zu,\"kp50_us\":%.1f,\"kp99_us\":%.1f,\"kmax_us\":%.1f,"
           "\"rss_base_kb\":%ld,\"rss_ready_kb\":%ld,\"rss_kb\":%ld,\"rss_per_conn_b\":%.0f,"
           "\"setup_s\":%.3f,\"interval_ms\":%d,\"ideal_per_s\":%.0f,\"of_ideal\":%.4f,"
           "\"initial_fanouts\":%" PRIu64 ",\"stale\":%" PRIu64 ",\"fanout_value_b\":%.1f,"
           "\"server_runq_wait_s\":%.3f,\"client_runq_wait_s\":%.3f,\"server_user_cores\":%.4f,"
           "\"transport\":\"%s\",\"sub_reads\":%" PRIu64 ",\"sub_rx_bytes\":%" PRIu64
           ",\"sub_tx_dgrams\":%" PRIu64 ",\"kcp_dup_segs\":%" PRIu64 ",\"server_udp_drops\":%lld,"
           "\"load_start\":\"%s\",\"load_end\":\"%s\",\"error\":%s%s%s}\n",
           target_names[O.target], O.label, mode_names[O.mode], O.subs, O.size, O.window, O.rate,
           secs, G.sent, dels, G.deliveries, missing, G.lost, G.dup, G.bad, G.closed, dps, cpu,
           cores, dpc, ccpu, G.lat.n, la.p50, la.p99, la.max, la.mean, G.klat.n, lk.p50, lk.p99,
           lk.max, G.rss_base, G.rss_ready, rss, rss_per_conn, (double)G.setup_ns / 1e9,
           O.mode == MODE_DATA ? O.interval : 0, ideal, ideal > 0 ? dps / ideal : 0, G.full_fanouts,
           G.stale, fanout_b, swait, cwait, ucores, transport_names[O.transport],
           G.m_reads[1] - G.m_reads[0], G.m_bytes[1] - G.m_bytes[0], G.m_txd[1] - G.m_txd[0],
           G.m_kdup[1] - G.m_kdup[0], udrops, G.load_start, load_end, error ? "\"" : "",
           error ? error : "null", error ? "\"" : "");
    printf("# %s %s %s %s subs=%d size=%d: %.0f deliveries/s, server %.2f cores, %.0f "
           "deliveries/server-cpu-s, client cpu %.2f s",
           target_names[O.target], O.label, mode_names[O.mode], transport_names[O.transport],
           O.subs, O.size, dps, cores, dpc, ccpu);
    if (O.mode == MODE_RATE)
        printf(", latency (app) p50 %.1f us p99 %.1f us max %.1f us, (kernel rx) p50 %.1f us p99 "
               "%.1f us max %.1f us",
               la.p50, la.p99, la.max, lk.p50, lk.p99, lk.max);
    if (O.mode == MODE_DATA)
        printf(" (ideal %.0f/s = %.1f %%), latency of the newest update (app) p50 %.1f us p99 "
               "%.1f us max %.1f us, (kernel rx) p50 %.1f us p99 %.1f us, %.0f B/fan-out, rss "
               "%ld kB, stale %" PRIu64 ", run-queue wait server %.2f s client %.2f s",
               ideal, ideal > 0 ? 100.0 * dps / ideal : 0, la.p50, la.p99, la.max, lk.p50, lk.p99,
               fanout_b, rss, G.stale, swait, cwait);
    if (O.mode == MODE_IDLE)
        printf(", rss %ld kB (base %ld kB) = %.0f B/conn", rss, G.rss_base, rss_per_conn);
    printf(", missing %" PRIu64 ", load %s%s%s\n", missing, G.load_start, error ? ", ERROR: " : "",
           error ? error : "");
    fflush(stdout);
    /* The server side is torn down by its own process; exiting closes every socket. */
    G.exit_code = error ? 1 : 0;
    if (kcp_disconnect_all()) {
        G.exit_t0 = now_ns();
        uv_timer_start(&G.exit_timer, on_exit_tick, 10, 10);
        return;
    }
    exit(G.exit_code);
}

/* ---- main -------------------------------------------------------------------------------- */

static void parse_addr(const char *s, struct sockaddr_in *out)
{
    const char *colon = strrchr(s, ':');
    if (!colon)
        die("bad address %s (want HOST:PORT)", s);
    char host[64];
    size_t hl = (size_t)(colon - s);
    if (hl == 0 || hl >= sizeof(host))
        die("bad address %s", s);
    memcpy(host, s, hl);
    host[hl] = '\0';
    if (uv_ip4_addr(host, atoi(colon + 1), out) != 0)
        die("bad address %s", s);
}

static void set_ws_addr(const char *s)
{
    parse_addr(s, &O.ws_addr);
    snprintf(O.ws_host, sizeof(O.ws_host), "%s", s);
    O.have_ws = true;
}

/* Reads "client=H:P server=H:P ... ws=H:P ... kcp=H:P" from a chanqd ready file ("-": none). */
static void read_ready_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        die("%s: %s", path, strerror(errno));
    char line[1024], c[128] = "", s[128] = "", ws[128] = "", kcp[128] = "";
    if (!fgets(line, sizeof(line), f))
        die("%s: empty", path);
    fclose(f);
    for (char *tok = strtok(line, " \n"); tok; tok = strtok(NULL, " \n")) {
        if (strncmp(tok, "client=", 7) == 0)
            snprintf(c, sizeof(c), "%s", tok + 7);
        else if (strncmp(tok, "server=", 7) == 0)
            snprintf(s, sizeof(s), "%s", tok + 7);
        else if (strncmp(tok, "ws=", 3) == 0)
            snprintf(ws, sizeof(ws), "%s", tok + 3);
        else if (strncmp(tok, "kcp=", 4) == 0)
            snprintf(kcp, sizeof(kcp), "%s", tok + 4);
    }
    if (!c[0] || !s[0])
        die("%s: no client= / server= address", path);
    parse_addr(c, &O.addr);
    parse_addr(s, &O.saddr);
    O.have_saddr = true;
    if (ws[0] && strcmp(ws, "-") != 0)
        set_ws_addr(ws);
    if (kcp[0] && strcmp(kcp, "-") != 0) {
        parse_addr(kcp, &O.kcp_addr);
        O.have_kcp = true;
    }
}

static void usage(FILE *f)
{
    fputs("Usage: cqbench --target chanq|redis|nats [options]\n"
          "  --addr HOST:PORT         redis / nats server, or chanqd's client listener\n"
          "  --server-addr HOST:PORT  chanqd's server listener\n"
          "  --ready-file FILE        chanqd ready file (sets the chanq addresses)\n"
          "  --transport tcp|ws|kcp   chanq subscribers' transport (default tcp; the publisher\n"
          "                           always uses TCP)\n"
          "  --ws-addr HOST:PORT      chanqd's WebSocket listener (ws://HOST:PORT/)\n"
          "  --kcp-addr HOST:PORT     chanqd's KCP listener (UDP)\n"
          "  --pid PID                server process to sample (CPU, RSS)\n"
          "  --mode closed|rate|idle|data  default closed (data: chanq channel data)\n"
          "  --subs N                 subscriber connections (default 100)\n"
          "  --size BYTES             payload size, >= 24 (default 64)\n"
          "  --window N               closed mode: messages outstanding (default 500)\n"
          "  --rate R                 rate / data mode: messages per second (default 1000)\n"
          "  --interval MS            data mode: fanOutIntervalMs of the subscribers (default 20)\n"
          "  --duration S             measured seconds (default 3)\n"
          "  --warmup S               seconds before measuring (idle: settle time; default 1)\n"
          "  --parallel N             connection setups in flight (default 64)\n"
          "  --label TEXT             copied to the output\n",
          f);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"target", required_argument, NULL, 't'},
        {"addr", required_argument, NULL, 'a'},
        {"server-addr", required_argument, NULL, 's'},
        {"ready-file", required_argument, NULL, 'f'},
        {"pid", required_argument, NULL, 'p'},
        {"mode", required_argument, NULL, 'm'},
        {"subs", required_argument, NULL, 'n'},
        {"size", required_argument, NULL, 'z'},
        {"window", required_argument, NULL, 'w'},
        {"rate", required_argument, NULL, 'r'},
        {"duration", required_argument, NULL, 'd'},
        {"warmup", required_argument, NULL, 'W'},
        {"parallel", required_argument, NULL, 'P'},
        {"interval", required_argument, NULL, 'i'},
        {"label", required_argument, NULL, 'l'},
        {"transport", required_argument, NULL, 'T'},
        {"ws-addr", required_argument, NULL, 'S'},
        {"kcp-addr", required_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool have_addr = false;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 't':
            if (strcmp(optarg, "chanq") == 0 || strcmp(optarg, "chanqd") == 0)
                O.target = TGT_CHANQ;
            else if (strcmp(optarg, "redis") == 0)
                O.target = TGT_REDIS;
            else if (strcmp(optarg, "nats") == 0)
                O.target = TGT_NATS;
            else
                die("unknown target %s", optarg);
            break;
        case 'a':
            parse_addr(optarg, &O.addr);
            have_addr = true;
            break;
        case 's':
            parse_addr(optarg, &O.saddr);
            O.have_saddr = true;
            break;
        case 'f':
            read_ready_file(optarg);
            have_addr = true;
            break;
        case 'p':
            O.pid = atoi(optarg);
            break;
        case 'm':
            if (strcmp(optarg, "closed") == 0)
                O.mode = MODE_CLOSED;
            else if (strcmp(optarg, "rate") == 0)
                O.mode = MODE_RATE;
            else if (strcmp(optarg, "idle") == 0)
                O.mode = MODE_IDLE;
            else if (strcmp(optarg, "data") == 0)
                O.mode = MODE_DATA;
            else
                die("unknown mode %s", optarg);
            break;
        case 'n':
            O.subs = atoi(optarg);
            break;
        case 'z':
            O.size = atoi(optarg);
            break;
        case 'w':
            O.window = atoi(optarg);
            break;
        case 'r':
            O.rate = atof(optarg);
            break;
        case 'd':
            O.duration = atof(optarg);
            break;
        case 'W':
            O.warmup = atof(optarg);
            break;
        case 'P':
            O.parallel = atoi(optarg);
            break;
        case 'i':
            O.interval = atoi(optarg);
            break;
        case 'l':
            O.label = optarg;
            break;
        case 'T':
            if (strcmp(optarg, "tcp") == 0)
                O.transport = TR_TCP;
            else if (strcmp(optarg, "ws") == 0)
                O.transport = TR_WS;
            else if (strcmp(optarg, "kcp") == 0)
                O.transport = TR_KCP;
            else
                die("unknown transport %s", optarg);
            break;
        case 'S':
            set_ws_addr(optarg);
            break;
        case 'K':
            parse_addr(optarg, &O.kcp_addr);
            O.have_kcp = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!have_addr || (O.target == TGT_CHANQ && !O.have_saddr)) {
        usage(stderr);
        die("missing --addr (and --server-addr for chanq)");
    }
    if (O.subs < 1 || O.size < 24 || O.size > 60000 || O.window < 1 || O.rate <= 0 ||
        O.duration <= 0 || O.warmup < 0 || O.parallel < 1 || O.interval < 1)
        die("bad numeric option");
    if (O.mode == MODE_DATA && (O.target != TGT_CHANQ || O.size < 32 || O.size > 4096))
        die("--mode data needs --target chanq and 32 <= --size <= 4096");
    if (O.transport != TR_TCP && O.target != TGT_CHANQ)
        die("--transport ws|kcp needs --target chanq");
    if ((O.transport == TR_WS && !O.have_ws) || (O.transport == TR_KCP && !O.have_kcp))
        die("--transport %s needs --%s-addr (or a ready file with %s=)",
            transport_names[O.transport], transport_names[O.transport],
            transport_names[O.transport]);

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    loadavg(G.load_start, sizeof(G.load_start));
    G.rss_base = proc_rss_kb(O.pid);
    G.loop = uv_default_loop();
    G.subs = calloc((size_t)O.subs, sizeof(*G.subs));
    G.payload = malloc((size_t)O.size);
    if (O.mode == MODE_CLOSED)
        G.ring = calloc((size_t)O.window, sizeof(*G.ring));
    if (!G.subs || !G.payload || (O.mode == MODE_CLOSED && !G.ring))
        die("out of memory");
    memset(G.payload, 'x', (size_t)O.size);
    G.m_seq1 = UINT64_MAX;
    G.pub.idx = -1;

    uv_timer_init(G.loop, &G.phase_timer);
    uv_timer_init(G.loop, &G.rate_timer);
    uv_timer_init(G.loop, &G.drain_timer);
    uv_timer_init(G.loop, &G.watchdog);
    uv_timer_init(G.loop, &G.kcp_timer);
    uv_timer_init(G.loop, &G.exit_timer);
    uv_check_init(G.loop, &G.pump);
    uv_timer_start(&G.watchdog, on_watchdog, 1000, 1000);
    uv_unref((uv_handle_t *)&G.watchdog);

    G.setup_t0 = now_ns();
    if (O.target == TGT_CHANQ)
        cq_connect_pub(&G.pub);
    else
        raw_connect(&G.pub);
    uv_run(G.loop, UV_RUN_DEFAULT);
    finish("event loop ended early");
    return 1;
}
