/* mqbench - load generator for chanqd's durable topics (issue 4), and the raw MariaDB baseline.
 *
 *   mqbench raw-mysql --mysql-port P [--mysql-host H --mysql-user U --mysql-database D]
 *           [--raw-method text|array]
 *       One Connector/C connection, autocommit, INSERTs of --batch rows (default 1000) of --size
 *       bytes into a table of the shape chanqd uses for a topic (t_<topic>: id AUTO_INCREMENT,
 *       create_time, content, state, producer_id, seq, UNIQUE(producer_id, seq)). Method text
 *       (default): one multi-row text INSERT per batch; array: one prepared INSERT executed with
 *       array binding (STMT_ATTR_ARRAY_SIZE, MariaDB's bulk protocol: the fastest method in
 *       durable.md, and the one chanqd's store uses). Reports rows/s and the latency of one
 *       INSERT (= one durable commit).
 *   mqbench produce --addr H:P[,H:P...] [--producers 8 --window 4 --batch 100]
 *       P producer connections driven by one poll() loop over the sans-I/O core (chanq_mq.h),
 *       each keeping W produce requests of B messages in flight. Only acked messages (the
 *       produce_resp, which chanqd sends after the commit) count; latency is per request, from
 *       queueing it to its answer. With several addresses (one chanqd per shard, issue 11)
 *       producer i connects to address i mod N, so the load is split evenly, and the topic is
 *       created on each; the figures are those of the whole run (all shards together).
 *   mqbench rate --addr H:P [--rate 2000]
 *       One connection, open loop: single-message produces scheduled every 1/rate s (not
 *       waiting for acks); latency from the scheduled send time to the ack.
 *   mqbench consume --addr H:P [--max-count 1000 --max-msgs N]
 *       One connection reads the topic from offset 0, one consume request at a time, until it
 *       is caught up (an empty answer) or has read --max-msgs messages.
 *
 * Common: --topic T (default "bench"), --size 256 (content bytes), --duration 5 and --warmup 1
 * (seconds; produce, rate and raw-mysql), --label L (copied to the output), --pid NAME=PID
 * (repeatable: the CPU that process used during the measured window, in % of one core, read
 * from /proc/PID/stat). The topic is created with add_topic (chanqd without a permissions file
 * lets every module create topics).
 *
 * Output: one JSON line (starts with '{') and one readable line (starts with '#').
 */
#include "bench_util.h"
#include "chanq_mq.h"
#include "chanq_mq_sync.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef MQBENCH_HAVE_MARIADB
#include <mysql.h>
#endif

#define MAX_PIDS    4
#define MAX_ADDRS   16
#define MAX_CONNS   256
#define RATE_CAP    20000 /* requests in flight in rate mode before it stops scheduling */
#define MODULE_ID   1u
#define READ_BUF_SZ 65536

/* ---- options ---------------------------------------------------------------------------- */

typedef struct opts {
    const char *mode;
    const char *addr;
    const char *topic;
    const char *label;
    size_t size;
    double duration, warmup;
    int producers, window, batch;
    double rate;
    uint32_t max_count;
    long max_msgs;
    const char *my_host, *my_user, *my_password, *my_db;
    bool raw_array; /* raw-mysql: --raw-method array */
    unsigned my_port;
    int npids;
    char pid_name[MAX_PIDS][32];
    int pid[MAX_PIDS];
} opts_t;

static opts_t O = {
    .topic = "bench",
    .label = "",
    .size = 256,
    .duration = 5,
    .warmup = 1,
    .producers = 8,
    .window = 4,
    .batch = 100,
    .rate = 2000,
    .max_count = 1000,
    .max_msgs = 0,
    .my_host = "127.0.0.1",
    .my_user = "root",
    .my_password = "",
    .my_db = "rawbench",
    .my_port = 3306,
};

static char *content; /* O.size bytes of printable ASCII, NUL-terminated */

/* ---- time, samples, CPU ------------------------------------------------------------------ */

static int64_t now_ns(void)
{
    return (int64_t)bench_now_ns();
}

typedef struct samples {
    double *v; /* ms */
    size_t n, cap;
} samples_t;

static void samples_add(samples_t *s, double ms)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4096;
        double *v = realloc(s->v, cap * sizeof(*v));
        if (!v) {
            fprintf(stderr, "mqbench: out of memory\n");
            exit(1);
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = ms;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile (p in 0..100); -1 when there are no samples. */
static double samples_pct(samples_t *s, double p)
{
    if (s->n == 0)
        return -1;
    qsort(s->v, s->n, sizeof(*s->v), cmp_double);
    size_t k = (size_t)((p / 100.0) * (double)s->n + 0.999999);
    if (k < 1)
        k = 1;
    if (k > s->n)
        k = s->n;
    return s->v[k - 1];
}

typedef struct cpu_mark {
    double cpu_s[MAX_PIDS]; /* utime + stime in seconds, -1 when unreadable */
    int64_t self_us;        /* this process's user + system CPU */
    int64_t t;
} cpu_mark_t;

static void cpu_mark(cpu_mark_t *m)
{
    struct rusage ru;
    for (int i = 0; i < O.npids; i++)
        m->cpu_s[i] = bench_proc_cpu_s(O.pid[i], NULL);
    getrusage(RUSAGE_SELF, &ru);
    m->self_us = (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
                 ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
    m->t = now_ns();
}

/* Appends ,"cpu":{"mqbench":pct,"name":pct,...} to out (% of one core). */
static void cpu_json(const cpu_mark_t *a, const cpu_mark_t *b, char *out, size_t cap)
{
    double secs = (double)(b->t - a->t) / 1e9;
    size_t len = strlen(out);
    len += (size_t)snprintf(out + len, cap - len, ",\"cpu\":{\"mqbench\":%.1f",
                            secs > 0 ? 100.0 * (double)(b->self_us - a->self_us) / 1e6 / secs : -1);
    for (int i = 0; i < O.npids && len < cap; i++) {
        double pct = -1;
        if (a->cpu_s[i] >= 0 && b->cpu_s[i] >= 0 && secs > 0)
            pct = 100.0 * (b->cpu_s[i] - a->cpu_s[i]) / secs;
        len += (size_t)snprintf(out + len, cap - len, ",\"%s\":%.1f", O.pid_name[i], pct);
    }
    if (len < cap)
        snprintf(out + len, cap - len, "}");
}

/* ---- durable-topic connections ------------------------------------------------------------- */

typedef struct conn {
    int fd;
    chanq_mq_t *mq;
    bool ready, dead;
    int inflight;
    int64_t next_due; /* rate mode: scheduled time of the next produce */
} conn_t;

typedef struct req {
    conn_t *c;
    int64_t t0;
    uint32_t n;
} req_t;

static struct {
    int64_t measure_from, measure_to;
    long long acked, errors, acked_total;
    int first_err;
    samples_t lat;
} R;

static void die(const char *what, int err)
{
    fprintf(stderr, "mqbench: %s: %d (%s)\n", what, err, err < 0 ? strerror(-err) : "");
    exit(1);
}

/* --addr split at its commas (one chanqd per shard); points into addr_buf. */
static char addr_buf[1024];
static const char *addrs[MAX_ADDRS];
static int naddrs;

static void split_addr_list(const char *list)
{
    if (strlen(list) >= sizeof(addr_buf))
        die("--addr too long", -EINVAL);
    snprintf(addr_buf, sizeof(addr_buf), "%s", list);
    naddrs = 0;
    for (char *save = NULL, *a = strtok_r(addr_buf, ",", &save); a;
         a = strtok_r(NULL, ",", &save)) {
        if (naddrs == MAX_ADDRS)
            die("too many --addr entries", -EINVAL);
        addrs[naddrs++] = a;
    }
    if (naddrs == 0)
        die("empty --addr", -EINVAL);
}

static int split_addr(const char *addr, char *host, size_t cap, uint16_t *port)
{
    return chanq_mq_sync_parse_addr(addr, host, cap, port);
}

static int tcp_connect(const char *addr)
{
    char host[256], ps[16];
    uint16_t port;
    if (split_addr(addr, host, sizeof(host), &port) != 0)
        die("bad --addr", -EINVAL);
    snprintf(ps, sizeof(ps), "%u", (unsigned)port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int r = getaddrinfo(host, ps, &hints, &ai);
    if (r != 0) {
        fprintf(stderr, "mqbench: %s: %s\n", host, gai_strerror(r));
        exit(1);
    }
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
        die("connect", -errno);
    freeaddrinfo(ai);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

static void on_connect(chanq_mq_t *mq, int err, cq_mq_msg_t *resp, void *ud)
{
    (void)mq;
    conn_t *c = ud;
    cq_mq_msg_free(resp);
    if (err != 0)
        die("connect refused", err);
    c->ready = true;
}

static void on_produce(chanq_mq_t *mq, int err, cq_mq_msg_t *resp, void *ud)
{
    (void)mq;
    req_t *q = ud;
    int64_t t = now_ns();
    q->c->inflight--;
    if (err != 0 || !resp || resp->noffsets != q->n) {
        R.errors++;
        if (!R.first_err)
            R.first_err = err ? err : -EPROTO;
    } else {
        R.acked_total += q->n;
        if (t >= R.measure_from && t < R.measure_to) {
            R.acked += q->n;
            samples_add(&R.lat, (double)(t - q->t0) / 1e6);
        }
    }
    cq_mq_msg_free(resp);
    free(q);
}

static int send_produce(conn_t *c, const chanq_mq_content_t *msgs, uint32_t n, int64_t t0)
{
    req_t *q = malloc(sizeof(*q));
    if (!q)
        return -ENOMEM;
    *q = (req_t){.c = c, .t0 = t0, .n = n};
    chanq_mq_produce_t p = {
        .topic = O.topic, .msgs = msgs, .n = n, .producer_id = 0, .seq = -1, .time = -1};
    int r = chanq_mq_produce(c->mq, &p, on_produce, q, NULL);
    if (r != 0) {
        free(q);
        return r;
    }
    c->inflight++;
    return 0;
}

static void conn_flush(conn_t *c)
{
    size_t len;
    const uint8_t *p;
    while (!c->dead && (p = chanq_mq_out(c->mq, &len)) != NULL && len > 0) {
        ssize_t w = send(c->fd, p, len, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return;
            die("send", -errno);
        }
        chanq_mq_out_consume(c->mq, (size_t)w);
    }
}

static void conn_read(conn_t *c)
{
    static uint8_t buf[READ_BUF_SZ];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
        if (n > 0) {
            int r = chanq_mq_feed(c->mq, buf, (size_t)n);
            if (r != 0)
                die("stream error", r);
            continue;
        }
        if (n == 0)
            die("server closed the connection", CQ_ECLOSED);
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return;
        if (errno != EINTR)
            die("recv", -errno);
    }
}

/* Creates the topic on the chanqd at addr (add_topic over a blocking connection). */
static void ensure_topic(const char *addr)
{
    char host[256], err[256] = "";
    uint16_t port;
    if (split_addr(addr, host, sizeof(host), &port) != 0)
        die("bad --addr", -EINVAL);
    chanq_mq_sync_t *s = NULL;
    int r = chanq_mq_sync_connect(host, port, MODULE_ID, NULL, CQ_MQ_PRODUCER, 10000, err,
                                  sizeof(err), &s);
    if (r != 0) {
        fprintf(stderr, "mqbench: connect %s: %d %s\n", addr, r, err);
        exit(1);
    }
    r = chanq_mq_sync_add_topic(s, O.topic);
    if (r != 0) {
        fprintf(stderr, "mqbench: add_topic %s: %d %s\n", O.topic, r, chanq_mq_sync_errmsg(s));
        exit(1);
    }
    chanq_mq_sync_close(s);
}

/* produce (rate == false) or rate (rate == true). */
static void run_produce(bool rate)
{
    int nconn = rate ? 1 : O.producers;
    uint32_t batch = rate ? 1u : (uint32_t)O.batch;
    if (nconn < 1 || nconn > MAX_CONNS || batch < 1 || O.window < 1 || (rate && O.rate <= 0))
        die("bad --producers/--batch/--window/--rate", -EINVAL);
    split_addr_list(O.addr);
    for (int i = 0; i < naddrs; i++)
        ensure_topic(addrs[i]);

    chanq_mq_content_t *msgs = calloc(batch, sizeof(*msgs));
    conn_t *cs = calloc((size_t)nconn, sizeof(*cs));
    struct pollfd *pfd = calloc((size_t)nconn, sizeof(*pfd));
    if (!msgs || !cs || !pfd)
        die("calloc", -ENOMEM);
    for (uint32_t i = 0; i < batch; i++)
        msgs[i] = (chanq_mq_content_t){.data = content, .len = O.size, .json = false, .time = -1};
    for (int i = 0; i < nconn; i++) {
        cs[i].fd = tcp_connect(addrs[i % naddrs]);
        cs[i].mq = chanq_mq_new(NULL);
        if (!cs[i].mq)
            die("chanq_mq_new", -ENOMEM);
        int r = chanq_mq_connect(cs[i].mq, MODULE_ID, "", CQ_MQ_PRODUCER, on_connect, &cs[i], NULL);
        if (r != 0)
            die("chanq_mq_connect", r);
    }

    int64_t start = now_ns();
    R.measure_from = start + (int64_t)(O.warmup * 1e9);
    R.measure_to = R.measure_from + (int64_t)(O.duration * 1e9);
    int64_t interval = rate ? (int64_t)(1e9 / O.rate) : 0;
    bool marked = false;
    cpu_mark_t c0 = {0}, c1 = {0};
    for (int i = 0; i < nconn; i++)
        cs[i].next_due = start;

    for (;;) {
        int64_t t = now_ns();
        if (!marked && t >= R.measure_from) {
            cpu_mark(&c0);
            marked = true;
        }
        if (t >= R.measure_to)
            break;
        int64_t wake = R.measure_to;
        for (int i = 0; i < nconn; i++) {
            conn_t *c = &cs[i];
            if (!c->ready)
                continue;
            if (rate) {
                while (c->next_due <= t && c->inflight < RATE_CAP) {
                    int r = send_produce(c, msgs, 1, c->next_due);
                    if (r != 0)
                        die("produce", r);
                    c->next_due += interval;
                }
                if (c->next_due < wake)
                    wake = c->next_due;
            } else {
                while (c->inflight < O.window) {
                    int r = send_produce(c, msgs, batch, t);
                    if (r != 0)
                        die("produce", r);
                }
            }
            conn_flush(c);
        }
        for (int i = 0; i < nconn; i++) {
            size_t len = 0;
            chanq_mq_out(cs[i].mq, &len);
            pfd[i] =
                (struct pollfd){.fd = cs[i].fd, .events = (short)(POLLIN | (len ? POLLOUT : 0))};
        }
        int64_t wait = wake - now_ns();
        if (wait < 0)
            wait = 0;
        struct timespec ts = {.tv_sec = wait / 1000000000, .tv_nsec = wait % 1000000000};
        int n = ppoll(pfd, (nfds_t)nconn, &ts, NULL);
        if (n < 0 && errno != EINTR)
            die("ppoll", -errno);
        for (int i = 0; n > 0 && i < nconn; i++) {
            if (pfd[i].revents & (POLLIN | POLLERR | POLLHUP))
                conn_read(&cs[i]);
            if (pfd[i].revents & POLLOUT)
                conn_flush(&cs[i]);
        }
    }
    cpu_mark(&c1);

    double secs = (double)(R.measure_to - R.measure_from) / 1e9;
    double p50 = samples_pct(&R.lat, 50), p99 = samples_pct(&R.lat, 99);
    double p999 = samples_pct(&R.lat, 99.9), mx = samples_pct(&R.lat, 100);
    char out[2048];
    snprintf(out, sizeof(out),
             "{\"mode\":\"%s\",\"label\":\"%s\",\"size\":%zu,\"producers\":%d,\"window\":%d,"
             "\"batch\":%u,\"rate\":%.0f,\"secs\":%.2f,\"acked\":%lld,\"msgs_per_s\":%.0f,"
             "\"requests\":%zu,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"p999_ms\":%.3f,\"max_ms\":%.3f,"
             "\"errors\":%lld,\"first_err\":%d",
             O.mode, O.label, O.size, nconn, rate ? 0 : O.window, batch, rate ? O.rate : 0, secs,
             R.acked, (double)R.acked / secs, R.lat.n, p50, p99, p999, mx, R.errors, R.first_err);
    cpu_json(&c0, &c1, out, sizeof(out));
    printf("%s}\n", out);
    printf("# %s %s: %.0f acked msg/s (%lld in %.1f s, %d conns x %d x %u), ack p50 %.2f ms p99 "
           "%.2f ms, %lld errors\n",
           O.mode, O.label, (double)R.acked / secs, R.acked, secs, nconn, rate ? 0 : O.window,
           batch, p50, p99, R.errors);

    for (int i = 0; i < nconn; i++) {
        chanq_mq_fail_all(cs[i].mq, CQ_ECLOSED); /* frees the outstanding req_t */
        chanq_mq_free(cs[i].mq);
        close(cs[i].fd);
    }
    free(cs);
    free(pfd);
    free(msgs);
    free(R.lat.v);
}

static void run_consume(void)
{
    char host[256], err[256] = "";
    uint16_t port;
    if (split_addr(O.addr, host, sizeof(host), &port) != 0)
        die("bad --addr", -EINVAL);
    ensure_topic(O.addr);
    chanq_mq_sync_t *s = NULL;
    int r = chanq_mq_sync_connect(host, port, MODULE_ID, NULL, CQ_MQ_CONSUMER, 10000, err,
                                  sizeof(err), &s);
    if (r != 0) {
        fprintf(stderr, "mqbench: connect %s: %d %s\n", O.addr, r, err);
        exit(1);
    }
    chanq_mq_sync_set_timeout(s, 60000);
    cpu_mark_t c0, c1;
    cpu_mark(&c0);
    int64_t t0 = now_ns();
    int64_t off = 0;
    long long msgs = 0, bytes = 0, reqs = 0;
    samples_t lat = {0};
    for (;;) {
        cq_mq_msg_t *m = NULL;
        int64_t q0 = now_ns();
        r = chanq_mq_sync_consume(s, O.topic, off, O.max_count, &m);
        if (r != 0) {
            fprintf(stderr, "mqbench: consume: %d %s\n", r, chanq_mq_sync_errmsg(s));
            exit(1);
        }
        samples_add(&lat, (double)(now_ns() - q0) / 1e6);
        reqs++;
        size_t n = m->nitems;
        for (size_t i = 0; i < n; i++)
            bytes += (long long)m->items[i].len;
        if (n > 0)
            off = m->items[n - 1].offset;
        msgs += (long long)n;
        cq_mq_msg_free(m);
        if (n == 0 || (O.max_msgs > 0 && msgs >= O.max_msgs))
            break;
    }
    int64_t t1 = now_ns();
    cpu_mark(&c1);
    double secs = (double)(t1 - t0) / 1e9;
    double p50 = samples_pct(&lat, 50), p99 = samples_pct(&lat, 99);
    char out[2048];
    snprintf(out, sizeof(out),
             "{\"mode\":\"consume\",\"label\":\"%s\",\"max_count\":%u,\"secs\":%.3f,\"msgs\":%lld,"
             "\"bytes\":%lld,\"requests\":%lld,\"msgs_per_s\":%.0f,\"req_p50_ms\":%.3f,"
             "\"req_p99_ms\":%.3f,\"last_offset\":%" PRId64,
             O.label, O.max_count, secs, msgs, bytes, reqs, (double)msgs / secs, p50, p99, off);
    cpu_json(&c0, &c1, out, sizeof(out));
    printf("%s}\n", out);
    printf("# consume %s: %.0f msg/s (%lld msgs in %.2f s, %lld requests of <= %u), request p50 "
           "%.2f ms p99 %.2f ms\n",
           O.label, (double)msgs / secs, msgs, secs, reqs, O.max_count, p50, p99);
    free(lat.v);
    chanq_mq_sync_close(s);
}

/* ---- raw MariaDB baseline --------------------------------------------------------------- */

#ifdef MQBENCH_HAVE_MARIADB
static void my_check(MYSQL *my, int r, const char *what)
{
    if (r != 0) {
        fprintf(stderr, "mqbench: %s: %s\n", what, mysql_error(my));
        exit(1);
    }
}

/* Runs INSERTs (the text q[0..len), or the bound statement st) for the measured window and
 * prints the result. */
static void raw_loop(MYSQL *my, MYSQL_STMT *st, const char *q, size_t len)
{
    int64_t start = now_ns();
    int64_t from = start + (int64_t)(O.warmup * 1e9), to = from + (int64_t)(O.duration * 1e9);
    long long rows = 0;
    samples_t lat = {0};
    cpu_mark_t c0 = {0}, c1;
    bool marked = false;
    int64_t t_first = 0, t_last = 0;
    for (;;) {
        int64_t t = now_ns();
        if (t >= to)
            break;
        if (!marked && t >= from) {
            cpu_mark(&c0);
            marked = true;
            t_first = t;
        }
        if (st && mysql_stmt_execute(st) != 0) {
            fprintf(stderr, "mqbench: insert: %s\n", mysql_stmt_error(st));
            exit(1);
        }
        if (!st)
            my_check(my, mysql_real_query(my, q, len), "insert");
        int64_t t2 = now_ns();
        if (marked) {
            rows += (long long)(st ? mysql_stmt_affected_rows(st) : mysql_affected_rows(my));
            samples_add(&lat, (double)(t2 - t) / 1e6);
            t_last = t2;
        }
    }
    cpu_mark(&c1);
    const char *method = st ? "array" : "text";
    double secs = (double)(t_last - t_first) / 1e9;
    double p50 = samples_pct(&lat, 50), p99 = samples_pct(&lat, 99);
    char out[2048];
    snprintf(out, sizeof(out),
             "{\"mode\":\"raw-mysql\",\"method\":\"%s\",\"label\":\"%s\",\"size\":%zu,"
             "\"batch\":%d,\"secs\":%.2f,\"rows\":%lld,\"msgs_per_s\":%.0f,\"p50_ms\":%.3f,"
             "\"p99_ms\":%.3f",
             method, O.label, O.size, O.batch, secs, rows, secs > 0 ? (double)rows / secs : 0, p50,
             p99);
    cpu_json(&c0, &c1, out, sizeof(out));
    printf("%s}\n", out);
    printf("# raw-mysql (%s) %s: %.0f rows/s (%lld rows in %.1f s, INSERTs of %d rows), commit "
           "p50 %.2f ms p99 %.2f ms\n",
           method, O.label, secs > 0 ? (double)rows / secs : 0, rows, secs, O.batch, p50, p99);
    free(lat.v);
}

/* One prepared INSERT bound to column arrays of --batch rows (the same rows every time, NULL
 * producer_id and seq), executed with STMT_ATTR_ARRAY_SIZE. */
static void raw_array_loop(MYSQL *my)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "INSERT INTO `t_%s` (create_time, content, state, producer_id, seq) "
             "VALUES (?, ?, 1, ?, ?)",
             O.topic);
    size_t n = (size_t)O.batch;
    long long *ms = calloc(n, sizeof(*ms));
    const char **c = calloc(n, sizeof(*c));
    unsigned long *clen = calloc(n, sizeof(*clen));
    unsigned long long *nul = calloc(n, sizeof(*nul));
    char *ind = calloc(n, 1);
    MYSQL_STMT *st = mysql_stmt_init(my);
    if (!ms || !c || !clen || !nul || !ind || !st)
        die("malloc", -ENOMEM);
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    for (size_t i = 0; i < n; i++) {
        ms[i] = (long long)rt.tv_sec * 1000 + rt.tv_nsec / 1000000;
        c[i] = content;
        clen[i] = (unsigned long)O.size;
        ind[i] = STMT_INDICATOR_NULL;
    }
    MYSQL_BIND b[4];
    memset(b, 0, sizeof(b));
    b[0].buffer_type = MYSQL_TYPE_LONGLONG;
    b[0].buffer = ms;
    b[1].buffer_type = MYSQL_TYPE_BLOB;
    b[1].buffer = (void *)c;
    b[1].length = clen;
    for (int i = 2; i < 4; i++) {
        b[i].buffer_type = MYSQL_TYPE_LONGLONG;
        b[i].buffer = nul;
        b[i].is_unsigned = 1;
        b[i].u.indicator = ind;
    }
    unsigned int rows = (unsigned int)n;
    if (mysql_stmt_prepare(st, sql, strlen(sql)) != 0 ||
        mysql_stmt_attr_set(st, STMT_ATTR_ARRAY_SIZE, &rows) != 0 ||
        mysql_stmt_bind_param(st, b) != 0) {
        fprintf(stderr, "mqbench: prepare: %s\n", mysql_stmt_error(st));
        exit(1);
    }
    raw_loop(my, st, NULL, 0);
    mysql_stmt_close(st);
    free(ms);
    free(c);
    free(clen);
    free(nul);
    free(ind);
}

static void run_raw_mysql(void)
{
    MYSQL *my = mysql_init(NULL);
    if (!my)
        die("mysql_init", -ENOMEM);
    if (!mysql_real_connect(my, O.my_host, O.my_user, O.my_password, NULL, O.my_port, NULL, 0)) {
        fprintf(stderr, "mqbench: mysql connect: %s\n", mysql_error(my));
        exit(1);
    }
    char sql[1024];
    snprintf(sql, sizeof(sql), "CREATE DATABASE IF NOT EXISTS `%s`", O.my_db);
    my_check(my, mysql_query(my, sql), "create database");
    my_check(my, mysql_select_db(my, O.my_db), "use");
    /* the shape of chanqd's per-topic table (src/store/mysql_schema.c) */
    snprintf(sql, sizeof(sql),
             "CREATE TABLE IF NOT EXISTS `t_%s` ("
             "id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, "
             "create_time BIGINT NOT NULL, content LONGBLOB NOT NULL, "
             "state TINYINT NOT NULL DEFAULT 1, producer_id BIGINT UNSIGNED NULL, "
             "seq BIGINT UNSIGNED NULL, UNIQUE KEY producer_seq (producer_id, seq)"
             ") ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
             O.topic);
    my_check(my, mysql_query(my, sql), "create table");
    my_check(my, mysql_autocommit(my, 1), "autocommit");
    if (O.raw_array) {
        raw_array_loop(my);
        mysql_close(my);
        return;
    }

    /* One statement: INSERT ... VALUES (ms,'content',1,NULL,NULL), ... (content is ASCII
     * letters, no escaping needed). */
    size_t rowlen = O.size + 64;
    size_t cap = 256 + (size_t)O.batch * rowlen;
    char *q = malloc(cap);
    if (!q)
        die("malloc", -ENOMEM);
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    long long ms = (long long)rt.tv_sec * 1000 + rt.tv_nsec / 1000000;
    size_t len = (size_t)snprintf(
        q, cap, "INSERT INTO `t_%s` (create_time, content, state, producer_id, seq) VALUES ",
        O.topic);
    for (int i = 0; i < O.batch; i++)
        len += (size_t)snprintf(q + len, cap - len, "%s(%lld,'%s',1,NULL,NULL)", i ? "," : "", ms,
                                content);

    raw_loop(my, NULL, q, len);
    free(q);
    mysql_close(my);
}
#endif

/* ---- main ------------------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: mqbench raw-mysql|produce|rate|consume [--addr H:P[,H:P...]] [--topic T]\n"
            "  [--size N]\n"
            "  [--duration S] [--warmup S] [--producers P] [--window W] [--batch B] [--rate R]\n"
            "  [--max-count N] [--max-msgs N] [--label L] [--pid NAME=PID]...\n"
            "  [--mysql-host H] [--mysql-port P] [--mysql-user U] [--mysql-password PW]\n"
            "  [--mysql-database D] [--raw-method text|array]\n");
    exit(64);
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"addr", required_argument, NULL, 'a'},
        {"topic", required_argument, NULL, 't'},
        {"size", required_argument, NULL, 's'},
        {"duration", required_argument, NULL, 'd'},
        {"warmup", required_argument, NULL, 'w'},
        {"producers", required_argument, NULL, 'P'},
        {"window", required_argument, NULL, 'W'},
        {"batch", required_argument, NULL, 'B'},
        {"rate", required_argument, NULL, 'r'},
        {"max-count", required_argument, NULL, 'c'},
        {"max-msgs", required_argument, NULL, 'm'},
        {"label", required_argument, NULL, 'l'},
        {"pid", required_argument, NULL, 'p'},
        {"mysql-host", required_argument, NULL, 1},
        {"mysql-port", required_argument, NULL, 2},
        {"mysql-user", required_argument, NULL, 3},
        {"mysql-password", required_argument, NULL, 4},
        {"mysql-database", required_argument, NULL, 5},
        {"raw-method", required_argument, NULL, 6},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    if (argc < 2)
        usage();
    O.mode = argv[1];
    optind = 2;
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'a':
            O.addr = optarg;
            break;
        case 't':
            O.topic = optarg;
            break;
        case 's':
            O.size = strtoul(optarg, NULL, 10);
            break;
        case 'd':
            O.duration = atof(optarg);
            break;
        case 'w':
            O.warmup = atof(optarg);
            break;
        case 'P':
            O.producers = atoi(optarg);
            break;
        case 'W':
            O.window = atoi(optarg);
            break;
        case 'B':
            O.batch = atoi(optarg);
            break;
        case 'r':
            O.rate = atof(optarg);
            break;
        case 'c':
            O.max_count = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'm':
            O.max_msgs = atol(optarg);
            break;
        case 'l':
            O.label = optarg;
            break;
        case 'p': {
            const char *eq = strchr(optarg, '=');
            if (!eq || O.npids == MAX_PIDS || (size_t)(eq - optarg) >= sizeof(O.pid_name[0]))
                usage();
            memcpy(O.pid_name[O.npids], optarg, (size_t)(eq - optarg));
            O.pid_name[O.npids][eq - optarg] = '\0';
            O.pid[O.npids++] = atoi(eq + 1);
            break;
        }
        case 1:
            O.my_host = optarg;
            break;
        case 2:
            O.my_port = (unsigned)atoi(optarg);
            break;
        case 3:
            O.my_user = optarg;
            break;
        case 4:
            O.my_password = optarg;
            break;
        case 5:
            O.my_db = optarg;
            break;
        case 6:
            if (strcmp(optarg, "array") != 0 && strcmp(optarg, "text") != 0)
                usage();
            O.raw_array = strcmp(optarg, "array") == 0;
            break;
        default:
            usage();
        }
    }
    if (O.size < 1 || O.batch < 1 || O.duration <= 0 || O.warmup < 0)
        usage();
    content = malloc(O.size + 1);
    if (!content)
        die("malloc", -ENOMEM);
    for (size_t i = 0; i < O.size; i++)
        content[i] = (char)('a' + (int)(i % 26));
    content[O.size] = '\0';
    signal(SIGPIPE, SIG_IGN);

    if (strcmp(O.mode, "raw-mysql") == 0) {
#ifdef MQBENCH_HAVE_MARIADB
        run_raw_mysql();
#else
        fprintf(stderr, "mqbench: built without MariaDB Connector/C (libmariadb)\n");
        return 2;
#endif
    } else if (!O.addr) {
        usage();
    } else if (strcmp(O.mode, "produce") == 0) {
        run_produce(false);
    } else if (strcmp(O.mode, "rate") == 0) {
        run_produce(true);
    } else if (strcmp(O.mode, "consume") == 0) {
        run_consume();
    } else {
        usage();
    }
    free(content);
    return 0;
}
