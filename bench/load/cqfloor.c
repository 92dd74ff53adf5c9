/* cqfloor.c - the kernel's floor for the channel-data shape: a plain C writer that does the
 * writes chanqd does in the data shape and nothing else, so that chanqd's CPU per fan-out can be
 * set against the cost of the write(2)s themselves in the same run (bench/run.sh, target floor).
 *
 * It listens on --addr (port 0: any; the address actually bound goes to --ready-file as
 * "addr=HOST:PORT"), accepts every connection, and for each one writes one --size byte packet
 * per --interval ms window with one plain write(2) on a non-blocking socket (TCP_NODELAY, as
 * chanqd's client sockets), from one thread and one epoll loop: no framework, no queue, no
 * encoding beyond stamping the packet. A connection's windows end on the interval's grid of
 * CLOCK_MONOTONIC in ms, offset by its bucket: with --align 0 (default) the n-th accepted
 * connection is in bucket n % interval, so windows are spread evenly over the interval like
 * chanqd's SUBWORLD subscriptions (staggered by subscription time; cq_sched aligns only spatial
 * and entity channels); with --align 1 every connection is in bucket 0 and all the writes of a
 * window leave in one burst on the grid. A window's packet is built once per bucket and
 * written to each of its connections (chanqd's encode-once fan-out).
 *
 * Packet (--size bytes, >= 21): chanq's 5-byte header 'C' 'H' len_hi len_lo 0 (len = size - 5),
 * then u64 window number (window end ms / interval), u64 CLOCK_REALTIME ns of the window's end
 * (its due time; kernel-rx latency is measured against it), then 'x' filler. Little-endian.
 *
 * Overload: a window whose end has passed is served once, at the next turn of the loop; windows
 * missed in between are skipped (the window number jumps), as chanqd serves a subscriber once
 * per loop iteration when it falls behind. A write that would block (the reader is slow) skips
 * that connection's packet; a short write keeps the rest and sends it when the socket is
 * writable, and the connection skips windows until then. Both are counted and printed to stderr
 * on SIGTERM / SIGINT, then cqfloor exits 0.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#ifdef CQ_HAVE_LIBURING
#include <liburing.h>
#endif

#define HDR_LEN    5
#define MIN_SIZE   (HDR_LEN + 16)
#define MAX_SIZE   65540
#define MAX_EVENTS 256
/* epoll data tags of the non-connection fds (connections use their index) */
#define TAG_LISTEN UINT64_MAX
#define TAG_TIMER  (UINT64_MAX - 1)
#define TAG_SIGNAL (UINT64_MAX - 2)

typedef struct conn {
    int fd;            /* -1 once closed */
    int64_t first_due; /* ms: the first window end after the accept */
    uint8_t *pend;     /* the rest of a short write, or NULL */
    size_t pend_len;   /* bytes of pend left */
    size_t pend_off;
} conn_t;

typedef struct bucket {
    uint32_t *idx; /* the connections whose windows end at ms = this bucket (mod interval) */
    size_t n, cap;
    int64_t last; /* the last window end served (ms), or -1 */
} bucket_t;

static struct {
    int interval, size;
    bool align;
    const char *addr, *ready;
} opt = {.interval = 20, .size = 132, .addr = "127.0.0.1:0"};

static struct {
    int ep, lfd, tfd, sfd;
    conn_t *c;
    size_t nc, cap, accepted, open;
    bucket_t *b;
    uint8_t *pkt;
    int64_t armed; /* ms the timer is armed for, or -1 */
    uint64_t writes, bytes, windows, skipped_full, skipped_pend, short_writes, closed;
} S;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("cqfloor: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int64_t now_ms(void)
{
    return (int64_t)(clock_ns(CLOCK_MONOTONIC) / 1000000u);
}

/* The window end (ms) of bucket b at or before t. */
static int64_t due_at_or_before(int64_t t, int b)
{
    int64_t iv = opt.interval, m = ((t - b) % iv + iv) % iv;
    return t - m;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- connections ------------------------------------------------------------------------ */

static void conn_close(uint32_t i)
{
    conn_t *c = &S.c[i];
    if (c->fd < 0)
        return;
    close(c->fd); /* also leaves the epoll set */
    c->fd = -1;
    free(c->pend);
    c->pend = NULL;
    S.open--;
    S.closed++;
}

static void bucket_add(bucket_t *b, uint32_t i)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        b->idx = realloc(b->idx, b->cap * sizeof(*b->idx));
        if (!b->idx)
            die("out of memory");
    }
    b->idx[b->n++] = i;
}

static void arm_timer(void);

static void on_accept(void)
{
    for (;;) {
        int fd = accept4(S.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                break;
            die("accept: %s", strerror(errno));
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (S.nc == S.cap) {
            S.cap = S.cap ? 2 * S.cap : 1024;
            S.c = realloc(S.c, S.cap * sizeof(*S.c));
            if (!S.c)
                die("out of memory");
        }
        uint32_t i = (uint32_t)S.nc++;
        int b = opt.align ? 0 : (int)(S.accepted % (size_t)opt.interval);
        S.accepted++;
        S.open++;
        S.c[i] = (conn_t){.fd = fd, .first_due = due_at_or_before(now_ms(), b) + opt.interval};
        bucket_add(&S.b[b], i);
        /* readable = the peer closed (it sends nothing); writable only while a write is owed */
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = i};
        if (epoll_ctl(S.ep, EPOLL_CTL_ADD, fd, &ev) < 0)
            die("epoll_ctl: %s", strerror(errno));
    }
    arm_timer();
}

static void want_out(uint32_t i, bool on)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0u), .data.u64 = i};
    epoll_ctl(S.ep, EPOLL_CTL_MOD, S.c[i].fd, &ev);
}

static void on_conn(uint32_t i, uint32_t events)
{
    conn_t *c = &S.c[i];
    if (c->fd < 0)
        return;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        char buf[512];
        ssize_t k = read(c->fd, buf, sizeof(buf));
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
            conn_close(i);
            return;
        }
    }
    if ((events & EPOLLOUT) && c->pend) {
        ssize_t k = write(c->fd, c->pend + c->pend_off, c->pend_len);
        if (k < 0 && errno != EAGAIN && errno != EINTR) {
            conn_close(i);
            return;
        }
        if (k > 0) {
            S.bytes += (uint64_t)k;
            c->pend_off += (size_t)k;
            c->pend_len -= (size_t)k;
        }
        if (c->pend_len == 0) {
            free(c->pend);
            c->pend = NULL;
            want_out(i, false);
        }
    }
}

/* ---- the fan-out ------------------------------------------------------------------------ */

/* One write of the bucket's packet to connection i. */
static void write_one(uint32_t i)
{
    conn_t *c = &S.c[i];
    if (c->pend) {
        S.skipped_pend++;
        return;
    }
    size_t n = (size_t)opt.size;
    ssize_t k = write(c->fd, S.pkt, n);
    S.writes++;
    if (k == (ssize_t)n) {
        S.bytes += n;
        return;
    }
    if (k < 0) {
        if (errno == EAGAIN)
            S.skipped_full++;
        else if (errno != EINTR)
            conn_close(i);
        return;
    }
    S.bytes += (uint64_t)k;
    S.short_writes++;
    c->pend_len = n - (size_t)k;
    c->pend_off = 0;
    c->pend = malloc(c->pend_len);
    if (!c->pend)
        die("out of memory");
    memcpy(c->pend, S.pkt + k, c->pend_len);
    want_out(i, true);
}

#ifdef CQ_HAVE_LIBURING
/* --uring: the bucket's writes as one io_uring submission (a send per connection, issued
 * inline by the kernel at submit), to measure what batching the system calls saves against
 * one write(2) each. A send that would block is counted as skipped, like write_one's EAGAIN. */
static struct io_uring ring;
static bool ring_ok;

static void write_bucket_uring(const bucket_t *bk, int64_t due)
{
    size_t n = (size_t)opt.size, queued = 0;
    for (size_t j = 0; j < bk->n; j++) {
        uint32_t i = bk->idx[j];
        if (S.c[i].fd < 0 || S.c[i].first_due > due || S.c[i].pend)
            continue;
        struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
        if (!sqe) {
            io_uring_submit(&ring);
            sqe = io_uring_get_sqe(&ring);
        }
        io_uring_prep_send(sqe, S.c[i].fd, S.pkt, n, MSG_DONTWAIT);
        io_uring_sqe_set_data64(sqe, i);
        queued++;
    }
    if (!queued)
        return;
    io_uring_submit_and_wait(&ring, (unsigned)queued);
    struct io_uring_cqe *cqe;
    while (queued && io_uring_peek_cqe(&ring, &cqe) == 0) {
        S.writes++;
        if (cqe->res == (int)n)
            S.bytes += n;
        else if (cqe->res == -EAGAIN)
            S.skipped_full++;
        else if (cqe->res < 0)
            conn_close((uint32_t)cqe->user_data);
        else
            S.short_writes++, S.bytes += (uint64_t)cqe->res;
        io_uring_cqe_seen(&ring, cqe);
        queued--;
    }
}
#endif

/* Serves every bucket whose latest window end (at or before now) has not been served yet. */
static void on_tick(void)
{
    uint64_t exp;
    if (read(S.tfd, &exp, sizeof(exp)) < 0 && errno != EAGAIN)
        die("timerfd read: %s", strerror(errno));
    S.armed = -1;
    int64_t now = now_ms();
    /* CLOCK_REALTIME - CLOCK_MONOTONIC, to stamp a window end in realtime */
    int64_t off = (int64_t)(clock_ns(CLOCK_REALTIME) - clock_ns(CLOCK_MONOTONIC));
    for (int b = 0; b < opt.interval; b++) {
        bucket_t *bk = &S.b[b];
        if (!bk->n)
            continue;
        int64_t due = due_at_or_before(now, b);
        if (due <= bk->last)
            continue;
        bk->last = due;
        put_u64(S.pkt + HDR_LEN, (uint64_t)(due / opt.interval));
        put_u64(S.pkt + HDR_LEN + 8, (uint64_t)(due * 1000000 + off));
        bool any = false;
#ifdef CQ_HAVE_LIBURING
        if (ring_ok) {
            write_bucket_uring(bk, due);
            S.windows++;
            continue;
        }
#endif
        for (size_t j = 0; j < bk->n; j++) {
            uint32_t i = bk->idx[j];
            if (S.c[i].fd < 0 || S.c[i].first_due > due)
                continue;
            write_one(i);
            any = true;
        }
        S.windows += any;
    }
    arm_timer();
}

/* Arms the timer for the next ms (after the last one served) at which a bucket is due. */
static void arm_timer(void)
{
    int64_t now = now_ms(), next = -1;
    for (int k = 1; k <= opt.interval; k++) {
        int64_t t = now + k;
        if (S.b[t % opt.interval].n) {
            next = t;
            break;
        }
    }
    if (next < 0 || (S.armed >= 0 && S.armed <= next))
        return; /* armed already for that ms or an earlier one (maybe expired, not yet read) */
    S.armed = next;
    struct itimerspec its = {0};
    its.it_value.tv_sec = next / 1000;
    its.it_value.tv_nsec = (long)(next % 1000) * 1000000;
    if (timerfd_settime(S.tfd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        die("timerfd_settime: %s", strerror(errno));
}

/* ---- setup ------------------------------------------------------------------------------ */

static void listen_on(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    char host[64];
    if (!colon || (size_t)(colon - addr) >= sizeof(host))
        die("bad address %s (want HOST:PORT)", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        die("bad address %s", addr);
    S.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(S.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (S.lfd < 0 || bind(S.lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(S.lfd, 4096) < 0)
        die("listen on %s: %s", addr, strerror(errno));
    socklen_t sl = sizeof(sa);
    getsockname(S.lfd, (struct sockaddr *)&sa, &sl);
    if (opt.ready) {
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s.tmp", opt.ready);
        FILE *f = fopen(tmp, "w");
        if (!f)
            die("%s: %s", tmp, strerror(errno));
        fprintf(f, "addr=%s:%u\n", host, (unsigned)ntohs(sa.sin_port));
        if (fclose(f) != 0 || rename(tmp, opt.ready) != 0)
            die("%s: %s", opt.ready, strerror(errno));
    }
}

static void add_fd(int fd, uint64_t tag)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};
    if (epoll_ctl(S.ep, EPOLL_CTL_ADD, fd, &ev) < 0)
        die("epoll_ctl: %s", strerror(errno));
}

static void usage(FILE *f)
{
    fputs("Usage: cqfloor [options]\n"
          "  --addr HOST:PORT     listen address (default 127.0.0.1:0)\n"
          "  --ready-file FILE    written with \"addr=HOST:PORT\" once listening\n"
          "  --interval MS        window length (default 20)\n"
          "  --size BYTES         bytes per write, header included, >= 21 (default 132: chanqd's\n"
          "                       fan-out in bench/run.sh's data shape)\n"
          "  --align 0|1          1: every connection's windows on the same grid (one burst per\n"
          "                       interval); 0 (default): spread over the interval\n"
          "  --uring              submit each window's writes as one io_uring batch (the floor\n"
          "                       of chanqd's io_uring path; needs liburing at build time)\n",
          f);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"addr", required_argument, NULL, 'a'},     {"ready-file", required_argument, NULL, 'f'},
        {"interval", required_argument, NULL, 'i'}, {"size", required_argument, NULL, 'z'},
        {"align", required_argument, NULL, 'A'},    {"uring", no_argument, NULL, 'U'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'a':
            opt.addr = optarg;
            break;
        case 'f':
            opt.ready = optarg;
            break;
        case 'i':
            opt.interval = atoi(optarg);
            break;
        case 'z':
            opt.size = atoi(optarg);
            break;
        case 'A':
            opt.align = atoi(optarg) != 0;
            break;
        case 'U':
#ifdef CQ_HAVE_LIBURING
            ring_ok = io_uring_queue_init(4096, &ring, 0) == 0;
            if (!ring_ok)
                die("io_uring_queue_init failed");
#else
            die("--uring: built without liburing");
#endif
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (opt.interval < 1 || opt.interval > 60000 || opt.size < MIN_SIZE || opt.size > MAX_SIZE)
        die("bad --interval or --size (%d..%d)", MIN_SIZE, MAX_SIZE);

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    S.b = calloc((size_t)opt.interval, sizeof(*S.b));
    S.pkt = malloc((size_t)opt.size);
    if (!S.b || !S.pkt)
        die("out of memory");
    for (int b = 0; b < opt.interval; b++)
        S.b[b].last = -1;
    uint32_t body = (uint32_t)opt.size - HDR_LEN;
    memset(S.pkt, 'x', (size_t)opt.size);
    S.pkt[0] = 'C';
    S.pkt[1] = 'H';
    S.pkt[2] = (uint8_t)(body >> 8);
    S.pkt[3] = (uint8_t)body;
    S.pkt[4] = 0;
    S.armed = -1;

    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGTERM);
    sigaddset(&ss, SIGINT);
    sigprocmask(SIG_BLOCK, &ss, NULL);
    signal(SIGPIPE, SIG_IGN);
    S.ep = epoll_create1(EPOLL_CLOEXEC);
    S.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    S.sfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
    if (S.ep < 0 || S.tfd < 0 || S.sfd < 0)
        die("epoll / timerfd / signalfd: %s", strerror(errno));
    listen_on(opt.addr);
    add_fd(S.lfd, TAG_LISTEN);
    add_fd(S.tfd, TAG_TIMER);
    add_fd(S.sfd, TAG_SIGNAL);

    struct epoll_event ev[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(S.ep, ev, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait: %s", strerror(errno));
        }
        for (int k = 0; k < n; k++) {
            uint64_t tag = ev[k].data.u64;
            if (tag == TAG_LISTEN) {
                on_accept();
            } else if (tag == TAG_TIMER) {
                on_tick();
            } else if (tag == TAG_SIGNAL) {
                fprintf(stderr,
                        "cqfloor: %zu accepted, %zu open, %" PRIu64 " closed; %" PRIu64
                        " bucket windows, %" PRIu64 " writes, %" PRIu64 " bytes, %" PRIu64
                        " skipped (socket full), %" PRIu64 " skipped (short write pending), "
                        "%" PRIu64 " short writes\n",
                        S.accepted, S.open, S.closed, S.windows, S.writes, S.bytes, S.skipped_full,
                        S.skipped_pend, S.short_writes);
                return 0;
            } else {
                on_conn((uint32_t)tag, ev[k].events);
            }
        }
    }
}
