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
 *           fan-outs/s. With --target floor (the floor writer, cqfloor.c, at --addr) there is
 *           no publisher and no protocol: N plain TCP connections, each receiving one packet
 *           of --size bytes per window ('C' 'H' len 0, u64 window number, u64 CLOCK_REALTIME
 *           ns of the window's end), counted and timed as the fan-outs are; ideal and output
 *           as for chanq.
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
 * Relay nodes and clusters (issue 23, bench/relay.sh): --sub-addrs spreads the subscribers over
 * several addresses in turn (the client listeners of a relay's nodes, or the servers of a NATS
 * cluster) while the publisher stays on --addr / --server-addr; --pid takes a list, and the
 * server's CPU, RSS and run-queue wait are then the sums over it (server_cpu_each_s in the JSON
 * has each process's CPU seconds over the window, in --pid's order). With two or more
 * --sub-addrs, lat_by_sub_addr has the rate and data modes' latencies of each address's
 * subscribers apart: publisher-local and cross-node subscribers of the same messages, in one
 * run.
 * The server process (--pid) is sampled from /proc for CPU (utime+stime) and VmRSS; with
 * --perf-stat EVENTS also by `perf stat -e EVENTS -p PID`, counting over the measurement window
 * only (started disabled, enabled and disabled through its control pipe): task-clock gives the
 * server's CPU time, cycles and instructions where the machine counts them.
 * Output: one JSON line (starts with '{') and one readable line (starts with '#') per run.
 *
 * This file holds the command line and main(); cqbench_int.h lists the files of each job.
 */
#include "cqbench_int.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

const char *const target_names[] = {"chanq", "redis", "nats", "floor"};
const char *const mode_names[] = {"closed", "rate", "idle", "data"};
const char *const transport_names[] = {"tcp", "ws", "kcp"};

cqb_opts_t O = {
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

cqb_state_t G;

/* ---- main -------------------------------------------------------------------------------- */

static void parse_addr(const char *s, struct sockaddr_in *out)
{
    const char *colon = strrchr(s, ':');
    if (!colon)
        cqb_die("bad address %s (want HOST:PORT)", s);
    char host[64];
    size_t hl = (size_t)(colon - s);
    if (hl == 0 || hl >= sizeof(host))
        cqb_die("bad address %s", s);
    memcpy(host, s, hl);
    host[hl] = '\0';
    if (uv_ip4_addr(host, atoi(colon + 1), out) != 0)
        cqb_die("bad address %s", s);
}

/* --pid P1,P2,...: every server process of the run (at most MAX_PIDS). */
static void parse_pids(const char *s)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    O.npids = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (O.npids == MAX_PIDS || atoi(t) <= 0)
            cqb_die("bad --pid %s (at most %d positive pids)", s, MAX_PIDS);
        O.pids[O.npids++] = atoi(t);
    }
    O.pid = O.npids ? O.pids[0] : 0;
    O.pid_arg = s;
}

/* --sub-addrs HOST:PORT,...: the addresses the subscribers take in turn. */
static void parse_sub_addrs(const char *s)
{
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", s);
    O.nsub_addrs = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (O.nsub_addrs == MAX_SUB_ADDRS)
            cqb_die("--sub-addrs: at most %d addresses", MAX_SUB_ADDRS);
        parse_addr(t, &O.sub_addrs[O.nsub_addrs++]);
    }
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
        cqb_die("%s: %s", path, strerror(errno));
    char line[1024], c[128] = "", s[128] = "", ws[128] = "", kcp[128] = "";
    if (!fgets(line, sizeof(line), f))
        cqb_die("%s: empty", path);
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
        cqb_die("%s: no client= / server= address", path);
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
    fputs("Usage: cqbench --target chanq|redis|nats|floor [options]\n"
          "  --addr HOST:PORT         redis / nats / floor server, or chanqd's client listener\n"
          "  --server-addr HOST:PORT  chanqd's server listener\n"
          "  --ready-file FILE        chanqd ready file (sets the chanq addresses)\n"
          "  --transport tcp|ws|kcp   chanq subscribers' transport (default tcp; the publisher\n"
          "                           always uses TCP)\n"
          "  --ws-addr HOST:PORT      chanqd's WebSocket listener (ws://HOST:PORT/)\n"
          "  --kcp-addr HOST:PORT     chanqd's KCP listener (UDP)\n"
          "  --pid PID[,PID...]       server process(es) to sample (CPU, RSS; summed over the\n"
          "                           list, e.g. a relay's chanqd nodes and nats-server)\n"
          "  --sub-addrs H:P[,H:P...] subscriber i connects to the (i mod count)-th address\n"
          "                           instead of --addr (tcp; chanq: the client listeners of\n"
          "                           several relay nodes; nats: the servers of a cluster);\n"
          "                           the publisher stays on --addr / --server-addr; the\n"
          "                           latencies are also given per address\n"
          "  --mode closed|rate|idle|data  default closed (data: chanq channel data, or the\n"
          "                           floor writer's packets with --target floor)\n"
          "  --subs N                 subscriber connections (default 100)\n"
          "  --size BYTES             payload size, >= 24 (default 64; floor: the packet size)\n"
          "  --window N               closed mode: messages outstanding (default 500)\n"
          "  --rate R                 rate / data mode: messages per second (default 1000)\n"
          "  --interval MS            data mode: fanOutIntervalMs of the subscribers (default 20)\n"
          "  --duration S             measured seconds (default 3)\n"
          "  --warmup S               seconds before measuring (idle: settle time; default 1)\n"
          "  --parallel N             connection setups in flight (default 64)\n"
          "  --label TEXT             copied to the output\n"
          "  --perf-stat EVENTS       also count the server (--pid) with perf stat -e EVENTS\n"
          "                           over the window (e.g. task-clock or\n"
          "                           cycles,instructions,task-clock)\n",
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
        {"perf-stat", required_argument, NULL, 'E'},
        {"sub-addrs", required_argument, NULL, 'A'},
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
            else if (strcmp(optarg, "floor") == 0)
                O.target = TGT_FLOOR;
            else
                cqb_die("unknown target %s", optarg);
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
            parse_pids(optarg);
            break;
        case 'A':
            parse_sub_addrs(optarg);
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
                cqb_die("unknown mode %s", optarg);
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
                cqb_die("unknown transport %s", optarg);
            break;
        case 'S':
            set_ws_addr(optarg);
            break;
        case 'K':
            parse_addr(optarg, &O.kcp_addr);
            O.have_kcp = true;
            break;
        case 'E':
            O.perf_events = optarg[0] ? optarg : NULL;
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
        cqb_die("missing --addr (and --server-addr for chanq)");
    }
    if (O.subs < 1 || O.size < 24 || O.size > 60000 || O.window < 1 || O.rate <= 0 ||
        O.duration <= 0 || O.warmup < 0 || O.parallel < 1 || O.interval < 1)
        cqb_die("bad numeric option");
    if (O.mode == MODE_DATA && O.target == TGT_CHANQ && (O.size < 32 || O.size > 4096))
        cqb_die("--mode data needs 32 <= --size <= 4096");
    if ((O.mode == MODE_DATA) != (O.target == TGT_FLOOR) && O.target != TGT_CHANQ)
        cqb_die("--mode data needs --target chanq or floor, and --target floor --mode data");
    if (O.nsub_addrs && O.transport != TR_TCP)
        cqb_die("--sub-addrs needs --transport tcp");
    if (O.transport != TR_TCP && O.target != TGT_CHANQ)
        cqb_die("--transport ws|kcp needs --target chanq");
    if ((O.transport == TR_WS && !O.have_ws) || (O.transport == TR_KCP && !O.have_kcp))
        cqb_die("--transport %s needs --%s-addr (or a ready file with %s=)",
                transport_names[O.transport], transport_names[O.transport],
                transport_names[O.transport]);

    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    cqb_loadavg(G.load_start, sizeof(G.load_start));
    G.rss_base = cqb_servers_rss_kb();
    G.loop = uv_default_loop();
    G.subs = calloc((size_t)O.subs, sizeof(*G.subs));
    G.payload = malloc((size_t)O.size);
    if (O.mode == MODE_CLOSED)
        G.ring = calloc((size_t)O.window, sizeof(*G.ring));
    if (!G.subs || !G.payload || (O.mode == MODE_CLOSED && !G.ring))
        cqb_die("out of memory");
    memset(G.payload, 'x', (size_t)O.size);
    G.m_seq1 = UINT64_MAX;
    G.pub.idx = -1;
    G.perf_task_s = G.perf_cycles = G.perf_instr = -1;

    uv_timer_init(G.loop, &G.phase_timer);
    uv_timer_init(G.loop, &G.rate_timer);
    uv_timer_init(G.loop, &G.drain_timer);
    uv_timer_init(G.loop, &G.watchdog);
    uv_timer_init(G.loop, &G.kcp_timer);
    uv_timer_init(G.loop, &G.exit_timer);
    uv_check_init(G.loop, &G.pump);
    uv_timer_start(&G.watchdog, cqb_on_watchdog, 1000, 1000);
    uv_unref((uv_handle_t *)&G.watchdog);

    G.setup_t0 = cqb_now_ns();
    if (O.target == TGT_CHANQ) {
        cqb_chanq_connect_pub(&G.pub);
    } else if (O.target == TGT_FLOOR) {
        G.pub.ready = true; /* no publisher: the floor writer writes on its own */
        cqb_start_more();
    } else {
        cqb_raw_connect(&G.pub);
    }
    uv_run(G.loop, UV_RUN_DEFAULT);
    cqb_finish("event loop ended early");
    return 1;
}
