/* cqbench_int.h - what the files of the cqbench load generator share. Not a library header.
 *
 * cqbench is one process with one libuv loop (see cqbench.c for what it measures); its files:
 *   cqbench.c         the command line, main
 *   cqbench_util.c    small helpers, clocks, /proc sampling
 *   cqbench_drive.c   the run: deliveries and their accounting, publishing (the closed loop and
 *                     the rate timer), the phases (setup, warm-up, measure, drain), the watchdog
 *   cqbench_raw.c     redis-server and nats-server: RESP and NATS text parsing, the raw uv_tcp
 *                     publisher, the input path of every connection
 *   cqbench_sub.c     the subscribers' sockets (uv_poll_t + recvmsg with kernel timestamps) and
 *                     their WebSocket and KCP transports
 *   cqbench_chanq.c   chanqd: the channel client protocol (AUTH, CREATE_CHANNEL, SUB_TO_CHANNEL,
 *                     ServerForwardMessage) over libchanq
 *   cqbench_data.c    the data shape: the TestChannelDataMessage payload and merged fan-outs,
 *                     and the packets of the floor writer (cqfloor.c)
 *   cqbench_perf.c    perf stat on the server process over the measurement window
 *   cqbench_report.c  percentiles, the JSON and readable result lines, the exit
 * Everything runs on the loop thread. The options (O) and the run's state (G) are process-wide:
 * cqbench measures one run per process.
 */
#ifndef CQBENCH_INT_H
#define CQBENCH_INT_H

#include "chanq_uv.h"
#include "cq_kcp.h"
#include "ws_client.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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
#define MAX_PIDS          8  /* --pid P1,P2,...: the server processes summed */
#define MAX_SUB_ADDRS     16 /* --sub-addrs A1,A2,...: the subscribers' round robin */
/* data mode */
#define CT_SUBWORLD      3u
#define MT_SUB_TO_CHAN   6u
#define MT_DATA_UPDATE   8u
#define TESTPB_TYPE_URL  "type.googleapis.com/testpb.TestChannelDataMessage"
#define DATA_INITIAL_TXT "cqbench initial state"

typedef enum { TGT_CHANQ, TGT_REDIS, TGT_NATS, TGT_FLOOR } target_t;
typedef enum { MODE_CLOSED, MODE_RATE, MODE_IDLE, MODE_DATA } bmode_t;
typedef enum { PH_SETUP, PH_WARMUP, PH_MEASURE, PH_DRAIN, PH_DONE } phase_t;
typedef enum { TR_TCP, TR_WS, TR_KCP } transport_t;

extern const char *const target_names[];
extern const char *const mode_names[];
extern const char *const transport_names[];

/* A growing byte buffer (realloc; out of memory is fatal). */
typedef struct bbuf {
    uint8_t *p;
    size_t len, cap;
} bbuf_t;

/* ---- options and state ------------------------------------------------------------------- */

typedef struct cqb_opts {
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
    int pid;            /* the first of --pid's list (0: none) */
    int pids[MAX_PIDS]; /* --pid P1,P2,...: every server process, CPU and RSS summed */
    int npids;
    const char *pid_arg;                         /* --pid as given, for perf stat -p */
    struct sockaddr_in sub_addrs[MAX_SUB_ADDRS]; /* --sub-addrs: subscriber i connects to */
    int nsub_addrs;                              /* sub_addrs[i % nsub_addrs] (0: --addr) */
    int subs;
    int size;
    int window;
    double duration;
    double warmup;
    double rate;
    int parallel;
    int interval; /* data mode: fanOutIntervalMs of every subscription */
    const char *label;
    const char *perf_events; /* --perf-stat: perf stat's -e list, or NULL */
} cqb_opts_t;

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

typedef struct cqb_state {
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
    double cpu_each0[MAX_PIDS], cpu_each1[MAX_PIDS]; /* cpu0, cpu1 per --pid process */
    double ucpu0, ucpu1;                 /* the server's user-mode share of cpu0, cpu1 */
    double wait0, wait1, cwait0, cwait1; /* run-queue wait of the server and of cqbench */
    long rss_base, rss_ready, rss_end;
    uint64_t setup_t0, setup_ns;
    /* latency samples (ns, clamped to UINT32_MAX): application (payload -> callback) and
     * kernel (payload -> socket receive timestamp) */
    samples_t lat, klat;
    samples_t lat_by[MAX_SUB_ADDRS], klat_by[MAX_SUB_ADDRS]; /* per --sub-addrs address */
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
    /* --perf-stat over the window: CPU seconds (task-clock), cycles, instructions (-1: not
     * measured or not supported) */
    double perf_task_s;
    double perf_cycles, perf_instr;
    int exit_code;
    uint64_t exit_t0;
    uv_timer_t phase_timer, rate_timer, watchdog, drain_timer, kcp_timer, exit_timer;
    uv_check_t pump;
    char load_start[64];
    uint8_t rbuf[65536];
} cqb_state_t;

extern cqb_opts_t O; /* set by main() before the loop starts, read-only afterwards */
extern cqb_state_t G;

/* ---- cqbench_util.c ---------------------------------------------------------------------- */

/* Prints "cqbench: " and the message to stderr and exits with status 2. */
void cqb_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Monotonic and CLOCK_REALTIME clocks in nanoseconds. */
uint64_t cqb_now_ns(void);
uint64_t cqb_real_ns(void);

/* Appends n bytes of d (copied) to b; drops the first n bytes of b. */
void cqb_bbuf_append(bbuf_t *b, const void *d, size_t n);
void cqb_bbuf_consume(bbuf_t *b, size_t n);

/* /proc sampling: VmRSS of pid in KiB (-1 if unknown); run-queue wait of pid's threads in
 * seconds (pid 0: this process; -1 if unknown); kernel drops on the UDP sockets bound to port
 * (-1 if unknown); this process's CPU seconds; the load average as "a b c" into out. */
long cqb_proc_rss_kb(int pid);
double cqb_proc_runq_wait_s(int pid);
/* The same, summed over every --pid process (-1 if one is unreadable): CPU seconds (each one's
 * into each[] when not NULL, the user-mode sum into *user), VmRSS in KiB, run-queue wait. */
double cqb_servers_cpu_s(double *user, double *each);
long cqb_servers_rss_kb(void);
double cqb_servers_runq_wait_s(void);
long long cqb_proc_udp_drops(unsigned port);
double cqb_self_cpu_s(void);
void cqb_loadavg(char *out, size_t len);

/* ---- cqbench_drive.c --------------------------------------------------------------------- */

/* Records a latency sample of ns nanoseconds (clamped to 0..UINT32_MAX). */
void cqb_add_sample(samples_t *s, int64_t ns);

/* One latency of subscriber s: app_ns into G.lat, kernel_ns into G.klat when the read had a
 * kernel timestamp, and with several --sub-addrs both into s's address's lat_by, klat_by. */
void cqb_add_latency(const bconn_t *s, int64_t app_ns, int64_t kernel_ns);

/* One delivered payload of n bytes on subscriber s: counted, checked for order, and (closed
 * mode) acknowledged when every subscriber has it or (rate mode) sampled for latency. */
void cqb_on_payload(bconn_t *s, const uint8_t *p, size_t n);

/* Subscriber s is subscribed: counts it and starts more connections, or the warm-up. */
void cqb_sub_ready(bconn_t *s);

/* Connection c is gone (err 0: closed); fails the run during setup. */
void cqb_conn_lost(bconn_t *c, int err);

/* Starts subscriber connections up to --parallel in flight, once the publisher is ready. */
void cqb_start_more(void);

/* The 1 s watchdog: setup timeout and stall detection. */
void cqb_on_watchdog(uv_timer_t *t);

/* ---- cqbench_raw.c ----------------------------------------------------------------------- */

/* Hands received bytes of c to the target's parser (chanq: its core); keeps an incomplete
 * tail in c->in. */
void cqb_consume_input(bconn_t *c, const uint8_t *data, size_t n);

/* redis / nats: the handshake c sends once TCP is up. */
void cqb_send_hello(bconn_t *c);

/* The redis / nats publisher over uv_tcp: connect; write what G.pub.out holds. */
void cqb_raw_connect(bconn_t *c);
void cqb_raw_flush(bconn_t *c);

/* ---- cqbench_sub.c ----------------------------------------------------------------------- */

/* Opens subscriber c's socket on its transport (tcp, ws or kcp) and starts connecting. */
void cqb_sub_connect(bconn_t *c);

/* Writes n bytes on a subscriber's socket; a short write is fatal (handshakes and small
 * packets always fit the socket buffer). */
void cqb_sub_write(bconn_t *c, const void *p, size_t n);

/* Puts a subscriber's outbound CH bytes on its transport (tcp, one ws message, or kcp). */
void cqb_sub_send(bconn_t *c, const uint8_t *p, size_t n);

/* WebSocket subscribers: write the upgrade request; feed received bytes. */
void cqb_ws_start(bconn_t *c);
void cqb_ws_input(bconn_t *c, const uint8_t *p, size_t n);

/* KCP: duplicate data segments received by all subscribers so far. */
uint64_t cqb_kcp_dup_total(void);

/* ---- cqbench_chanq.c --------------------------------------------------------------------- */

/* The publisher: a SERVER connection through libchanq's libuv adapter. */
void cqb_chanq_connect_pub(bconn_t *c);

/* A subscriber (CLIENT) is connected: create its core and authenticate. */
void cqb_chanq_sub_start(bconn_t *c);

/* Writes what a subscriber's sans-I/O core has queued (ws: once the upgrade is done). */
void cqb_sub_chanq_flush(bconn_t *c);

/* ---- cqbench_data.c ---------------------------------------------------------------------- */

/* Serializes TestChannelDataMessage{text = "<rts> xxx...", num} into out (O.size bytes
 * available); returns its length. */
size_t cqb_testpb_encode(uint8_t *out, uint64_t rts, uint64_t num);

/* A merged fan-out m of the data channel on subscriber s: counted, sampled for latency. */
void cqb_on_data_fanout(bconn_t *s, const chanq_msg_t *m);

/* --target floor: parses the floor writer's packets in p[0..n) received by s (each one
 * counted and sampled like a fan-out); returns the bytes used (an incomplete tail stays). */
size_t cqb_floor_parse(bconn_t *s, const uint8_t *p, size_t n);

/* ---- cqbench_perf.c ---------------------------------------------------------------------- */

/* --perf-stat: starts `perf stat -e O.perf_events -p O.pid` with its counters disabled (a
 * no-op without --perf-stat or --pid); enables them (at the start of the window; waits for
 * perf's ack); disables them, ends perf and reads its counts into G.perf_* (at the end). A
 * failure leaves G.perf_* at -1 and says why on stderr; the run goes on. */
void cqb_perf_start(void);
void cqb_perf_enable(void);
void cqb_perf_stop(void);

/* ---- cqbench_report.c -------------------------------------------------------------------- */

/* Ends the run (error NULL: success): prints the JSON and the readable line and exits (kcp:
 * after the DISCONNECTs are written). Runs once; later calls do nothing. */
void cqb_finish(const char *error);

#endif
