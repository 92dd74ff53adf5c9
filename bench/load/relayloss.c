/* relayloss.c - a relay node's loss, timed (issue 23; bench/relay.sh part "loss").
 *
 * One SERVER connection (the owner, on --server: a node that survives) creates a SUBWORLD
 * channel and subscribes --victims-n CLIENT connections of the node to be killed (--victims)
 * and --survivors-n CLIENT connections of the nodes that stay (--survivors, a list taken in
 * turn), and broadcasts --rate ServerForwardMessages/s (ALL_BUT_SERVER) on the channel. Once
 * every client has received a broadcast and --steady seconds have passed, it SIGKILLs
 * --kill-pid (the victims' chanqd) and times:
 *   detect    kill -> the owner has the UnsubscribedFromChannelResult of every victim (the
 *             surviving nodes saw the node leave in ZooKeeper and dropped its connections, as
 *             channeld does when a connection closes); first and last;
 *   eof       kill -> a victim's socket is closed (the kernel closes a killed process's
 *             sockets);
 *   moved     kill -> a victim that reconnected at once to --move-to (another node), AUTHed,
 *             and was subscribed again by the owner (which learns the new id in-process here;
 *             a game server learns it from GLOBAL's AuthResult copy) receives a broadcast;
 *   gap       the longest time between two broadcasts on any survivor from the kill to the
 *             end, and the survivors' broadcasts lost (sequence gaps): what the surviving
 *             nodes' connections saw meanwhile.
 * The run ends when every victim's UNSUB arrived and every moved victim receives again, plus
 * --tail seconds for the survivors, or after --timeout s (an error).
 * Output: one JSON line (starts with '{') and one readable line (starts with '#').
 *
 * Everything runs on one libuv loop; every connection is libchanq's libuv adapter.
 */
#include "bench_util.h"
#include "chanq_uv.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ADDRS         8
#define USER_MSG_TYPE     100u
#define BC_ALL_BUT_SERVER 32u
#define CT_SUBWORLD       3u
#define PAYLOAD_SIZE      64

typedef enum { ROLE_VICTIM, ROLE_SURVIVOR, ROLE_MOVED } role_t;

typedef struct lconn {
    int idx; /* victims first, then survivors */
    role_t role;
    chanq_uv_t *cu;
    uint32_t id;     /* the connection id of the current connection (0 before AUTH) */
    uint32_t old_id; /* a victim's id on the killed node */
    bool subscribed, got_one;
    uint64_t next_seq;
    uint64_t last_rx;                /* ns of the last broadcast received */
    uint64_t t_eof, t_unsub, t_back; /* ns after the kill (0: not yet) */
} lconn_t;

static struct {
    struct sockaddr_in server, victims, move_to, survivors[MAX_ADDRS];
    int nsurvivors, victims_n, survivors_n, kill_pid;
    double rate, steady, tail, timeout;
    const char *label;
} O = {.victims_n = 50,
       .survivors_n = 50,
       .rate = 200,
       .steady = 1,
       .tail = 1,
       .timeout = 30,
       .label = ""};

static struct {
    uv_loop_t *loop;
    chanq_uv_t *owner;
    uint32_t chan;
    lconn_t *c;
    int n, nsubscribed, nwarm, nunsub, nback, neof;
    uint64_t sent, t_begin, t_start, t_kill, t_done;
    uint64_t max_gap, max_gap_at, lost, dup, bad; /* max_gap_at: when that gap ended */
    uv_timer_t pub_timer, kill_timer, tick;
    bool killed, done;
} G;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("relayloss: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static double ms_after_kill(uint64_t t)
{
    return t && G.t_kill ? (double)(t - G.t_kill) / 1e6 : -1;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* min, median and max of the victims' times (ns after the kill) picked by field; -1 if none */
static void stats(size_t off, double out[3])
{
    double *v = malloc((size_t)O.victims_n * sizeof(*v));
    int k = 0;
    if (!v)
        die("out of memory");
    for (int i = 0; i < O.victims_n; i++) {
        uint64_t t = *(const uint64_t *)((const char *)&G.c[i] + off);
        if (t)
            v[k++] = ms_after_kill(t);
    }
    out[0] = out[1] = out[2] = -1;
    if (k) {
        qsort(v, (size_t)k, sizeof(v[0]), cmp_dbl);
        out[0] = v[0];
        out[1] = v[(k - 1) / 2];
        out[2] = v[k - 1];
    }
    free(v);
}

static void finish(const char *error)
{
    double d[3], e[3], m[3];
    stats(offsetof(lconn_t, t_unsub), d);
    stats(offsetof(lconn_t, t_eof), e);
    stats(offsetof(lconn_t, t_back), m);
    printf("{\"label\":\"%s\",\"victims\":%d,\"survivors\":%d,\"rate\":%.0f,\"sent\":%" PRIu64
           ",\"unsubs\":%d,\"detect_first_ms\":%.1f,\"detect_p50_ms\":%.1f,\"detect_ms\":%.1f,"
           "\"eof_max_ms\":%.1f,\"moved\":%d,\"moved_first_ms\":%.1f,\"moved_p50_ms\":%.1f,"
           "\"moved_ms\":%.1f,\"survivor_max_gap_ms\":%.1f,\"survivor_max_gap_end_ms\":%.1f,"
           "\"survivor_lost\":%" PRIu64 ",\"dup\":%" PRIu64 ",\"bad\":%" PRIu64
           ",\"error\":%s%s%s}\n",
           O.label, O.victims_n, O.survivors_n, O.rate, G.sent, G.nunsub, d[0], d[1], d[2], e[2],
           G.nback, m[0], m[1], m[2], (double)G.max_gap / 1e6, ms_after_kill(G.max_gap_at), G.lost,
           G.dup, G.bad, error ? "\"" : "", error ? error : "null", error ? "\"" : "");
    printf("# relayloss %s: %d victims' UNSUBs at the owner %.0f .. %.0f ms after the kill "
           "(median %.0f), sockets closed by %.0f ms; %d moved clients receiving again after "
           "%.0f .. %.0f ms (median %.0f); survivors: longest gap %.1f ms (ending %.0f ms after "
           "the kill), %" PRIu64 " lost%s%s\n",
           O.label, G.nunsub, d[0], d[2], d[1], e[2], G.nback, m[0], m[2], m[1],
           (double)G.max_gap / 1e6, ms_after_kill(G.max_gap_at), G.lost, error ? ", ERROR: " : "",
           error ? error : "");
    fflush(stdout);
    exit(error ? 1 : 0);
}

/* ---- broadcasts ---------------------------------------------------------------------------- */

static void on_pub(uv_timer_t *t)
{
    (void)t;
    if (!G.owner)
        return;
    uint64_t due = (uint64_t)((double)(bench_now_ns() - G.t_start) * O.rate / 1e9) + 1;
    uint8_t p[PAYLOAD_SIZE] = {0};
    while (G.sent < due) {
        uint64_t seq = G.sent++, ts = bench_now_ns();
        memcpy(p, &seq, 8);
        memcpy(p + 8, &ts, 8);
        int r = chanq_client_server_forward(chanq_uv_client(G.owner), G.chan, BC_ALL_BUT_SERVER,
                                            USER_MSG_TYPE, 0, p, sizeof(p));
        if (r < 0)
            die("publish: %s", cq_strerror(r));
    }
}

/* ServerForwardMessage.payload (field 2) of a 64-byte payload: tag 0x12, length 64. */
static const uint8_t *sfm_payload(const chanq_msg_t *m)
{
    for (uint32_t i = 0; i + 2 + PAYLOAD_SIZE <= m->body_len; i++)
        if (m->body[i] == 0x12 && m->body[i + 1] == PAYLOAD_SIZE)
            return m->body + i + 2;
    return NULL;
}

static void check_done(void);

static void on_broadcast(lconn_t *c, const chanq_msg_t *m)
{
    const uint8_t *p = sfm_payload(m);
    if (!p) {
        G.bad++;
        return;
    }
    uint64_t seq, now = bench_now_ns();
    memcpy(&seq, p, 8);
    if (c->got_one && seq != c->next_seq) {
        if (seq > c->next_seq && c->role == ROLE_SURVIVOR)
            G.lost += seq - c->next_seq;
        else if (seq < c->next_seq)
            G.dup++;
    }
    if (c->role == ROLE_SURVIVOR && G.killed && c->last_rx) {
        uint64_t from = c->last_rx > G.t_kill ? c->last_rx : G.t_kill;
        if (now - from > G.max_gap) {
            G.max_gap = now - from;
            G.max_gap_at = now;
        }
    }
    c->next_seq = seq + 1;
    c->last_rx = now;
    if (!c->got_one) {
        c->got_one = true;
        if (c->role == ROLE_MOVED) {
            c->t_back = now;
            G.nback++;
            check_done();
        } else {
            G.nwarm++;
        }
    }
}

/* ---- connections ---------------------------------------------------------------------------- */

static void connect_client(lconn_t *c, const struct sockaddr_in *a);

static void on_client_msg(chanq_uv_t *u, const chanq_msg_t *m, void *ud)
{
    lconn_t *c = ud;
    (void)u;
    if (m->channel_id != G.chan)
        return;
    if (m->msg_type == USER_MSG_TYPE)
        on_broadcast(c, m);
    else if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__SUB_TO_CHANNEL && !c->subscribed) {
        c->subscribed = true;
        if (c->role != ROLE_MOVED)
            G.nsubscribed++;
    }
}

static void on_client_auth(void *ud, const chanq_msg_t *m)
{
    lconn_t *c = ud;
    (void)m;
    c->id = chanq_client_conn_id(chanq_uv_client(c->cu));
    if (!c->id)
        finish("client AUTH failed");
    int r = chanq_client_sub_to_channel(chanq_uv_client(G.owner), 0, G.chan, c->id, NULL);
    if (r < 0)
        die("sub: %s", cq_strerror(r));
}

static void on_client_connect(chanq_uv_t *u, int status, void *ud)
{
    lconn_t *c = ud;
    if (status < 0)
        return; /* on_close follows */
    uint32_t stub;
    chanq_client_t *core = chanq_uv_client(u);
    int r = chanq_client_stub_alloc(core, on_client_auth, c, &stub);
    if (r == 0)
        r = chanq_client_auth(core, stub, "relayloss", "relayloss");
    if (r < 0)
        die("auth: %s", cq_strerror(r));
}

/* A victim's socket closed by the kill: reconnect at once to another node. */
static void on_client_close(chanq_uv_t *u, int err, void *ud)
{
    lconn_t *c = ud;
    (void)u;
    c->cu = NULL;
    if (G.done)
        return;
    if (!G.killed || c->role != ROLE_VICTIM) {
        fprintf(stderr, "relayloss: client %d lost: %s\n", c->idx,
                err <= -1000 && err > -1100 ? cq_strerror(err) : uv_strerror(err));
        finish("a connection was lost before the kill, or on a surviving node");
    }
    c->t_eof = bench_now_ns();
    G.neof++;
    c->old_id = c->id;
    c->id = 0;
    c->role = ROLE_MOVED;
    c->subscribed = c->got_one = false;
    connect_client(c, &O.move_to);
}

static void connect_client(lconn_t *c, const struct sockaddr_in *a)
{
    static const chanq_uv_cbs_t cbs = {on_client_connect, on_client_msg, on_client_close};
    int r = chanq_uv_connect(G.loop, (const struct sockaddr *)a, NULL, &cbs, c, &c->cu);
    if (r < 0)
        die("connect: %s", uv_strerror(r));
}

/* The owner: UNSUB results for the victims' old ids. */
static void on_owner_msg(chanq_uv_t *u, const chanq_msg_t *m, void *ud)
{
    (void)u;
    (void)ud;
    if (m->msg_type != CHANNELDPB__MESSAGE_TYPE__UNSUB_FROM_CHANNEL || m->channel_id != G.chan)
        return;
    Channeldpb__UnsubscribedFromChannelResultMessage *res = chanq_unpack(
        &channeldpb__unsubscribed_from_channel_result_message__descriptor, m->body, m->body_len);
    if (!res) {
        G.bad++;
        return;
    }
    uint32_t id = res->connid;
    chanq_unpack_free(res);
    for (int i = 0; i < O.victims_n; i++) {
        lconn_t *c = &G.c[i];
        uint32_t old = c->role == ROLE_MOVED ? c->old_id : c->id;
        if (old == id && !c->t_unsub && G.killed) {
            c->t_unsub = bench_now_ns();
            G.nunsub++;
            check_done();
            return;
        }
    }
    fprintf(stderr, "relayloss: unexpected UNSUB of connection %u\n", id);
    G.bad++;
}

static void on_owner_close(chanq_uv_t *u, int err, void *ud)
{
    (void)u;
    (void)ud;
    G.owner = NULL;
    if (!G.done) {
        fprintf(stderr, "relayloss: owner lost: %s\n",
                err <= -1000 && err > -1100 ? cq_strerror(err) : uv_strerror(err));
        finish("the owner's connection was lost");
    }
}

static void on_created(void *ud, const chanq_msg_t *m)
{
    (void)ud;
    Channeldpb__CreateChannelResultMessage *res =
        chanq_unpack(&channeldpb__create_channel_result_message__descriptor, m->body, m->body_len);
    G.chan = res ? res->channelid : 0;
    chanq_unpack_free(res);
    if (!G.chan)
        finish("CREATE_CHANNEL(SUBWORLD) failed");
    for (int i = 0; i < G.n; i++)
        connect_client(&G.c[i], G.c[i].role == ROLE_VICTIM
                                    ? &O.victims
                                    : &O.survivors[(i - O.victims_n) % O.nsurvivors]);
}

static void on_owner_auth(void *ud, const chanq_msg_t *m)
{
    (void)ud;
    (void)m;
    chanq_client_t *core = chanq_uv_client(G.owner);
    uint32_t stub;
    if (!chanq_client_conn_id(core))
        finish("server AUTH failed");
    int r = chanq_client_stub_alloc(core, on_created, NULL, &stub);
    if (r == 0)
        r = chanq_client_create_channel(core, stub, CT_SUBWORLD, "relayloss", NULL);
    if (r < 0)
        die("create: %s", cq_strerror(r));
}

static void on_owner_connect(chanq_uv_t *u, int status, void *ud)
{
    (void)ud;
    if (status < 0)
        return;
    uint32_t stub;
    chanq_client_t *core = chanq_uv_client(u);
    int r = chanq_client_stub_alloc(core, on_owner_auth, NULL, &stub);
    if (r == 0)
        r = chanq_client_auth(core, stub, "relayloss-server", "relayloss");
    if (r < 0)
        die("auth: %s", cq_strerror(r));
}

/* ---- phases --------------------------------------------------------------------------------- */

static void on_end(uv_timer_t *t)
{
    (void)t;
    G.done = true;
    finish(NULL);
}

static void check_done(void)
{
    if (G.t_done || G.nunsub < O.victims_n || G.nback < O.victims_n)
        return;
    G.t_done = bench_now_ns();
    uv_timer_start(&G.kill_timer, on_end, (uint64_t)(O.tail * 1000), 0);
}

static void on_kill(uv_timer_t *t)
{
    (void)t;
    G.killed = true;
    G.t_kill = bench_now_ns();
    if (kill(O.kill_pid, SIGKILL) < 0)
        die("kill %d: %s", O.kill_pid, strerror(errno));
}

/* Every 10 ms: start the broadcasts once all are subscribed, the kill once all receive; the
 * timeout (from the start). */
static void on_tick(uv_timer_t *t)
{
    (void)t;
    uint64_t now = bench_now_ns();
    if (now - G.t_begin > (uint64_t)(O.timeout * 1e9))
        finish(G.killed ? "timed out after the kill" : "timed out before the kill");
    if (G.nsubscribed == G.n && !uv_is_active((uv_handle_t *)&G.pub_timer)) {
        G.t_start = now;
        uv_timer_start(&G.pub_timer, on_pub, 1, 1);
    }
    if (G.nwarm == G.n && !G.killed && !uv_is_active((uv_handle_t *)&G.kill_timer))
        uv_timer_start(&G.kill_timer, on_kill, (uint64_t)(O.steady * 1000), 0);
}

/* ---- main ----------------------------------------------------------------------------------- */

static void parse_addr(const char *s, struct sockaddr_in *out)
{
    const char *colon = strrchr(s, ':');
    char host[64];
    size_t hl = colon ? (size_t)(colon - s) : 0;
    if (!colon || hl == 0 || hl >= sizeof(host))
        die("bad address %s (want HOST:PORT)", s);
    memcpy(host, s, hl);
    host[hl] = '\0';
    if (uv_ip4_addr(host, atoi(colon + 1), out) != 0)
        die("bad address %s", s);
}

static void usage(FILE *f)
{
    fputs("Usage: relayloss --server H:P --victims H:P --kill-pid PID --move-to H:P\n"
          "                 --survivors H:P[,H:P...] [options]\n"
          "  --server H:P       the owner's SERVER listener (a node that survives)\n"
          "  --victims H:P      the CLIENT listener of the node to kill\n"
          "  --kill-pid PID     that node's chanqd, SIGKILLed once all receive\n"
          "  --move-to H:P      the CLIENT listener a victim reconnects to\n"
          "  --survivors LIST   CLIENT listeners of surviving nodes, taken in turn\n"
          "  --victims-n N      clients on the node to kill (default 50)\n"
          "  --survivors-n N    clients on the surviving nodes (default 50)\n"
          "  --rate R           broadcasts per second (default 200)\n"
          "  --steady S         seconds of broadcasts before the kill (default 1)\n"
          "  --tail S           seconds of broadcasts after the last event (default 1)\n"
          "  --timeout S        the whole run's, an error when passed (default 30)\n"
          "  --label TEXT       copied to the output\n",
          f);
}

static void parse_args(int argc, char **argv)
{
    static const struct option opts[] = {
        {"server", required_argument, NULL, 's'},
        {"victims", required_argument, NULL, 'v'},
        {"kill-pid", required_argument, NULL, 'k'},
        {"move-to", required_argument, NULL, 'm'},
        {"survivors", required_argument, NULL, 'S'},
        {"victims-n", required_argument, NULL, 'n'},
        {"survivors-n", required_argument, NULL, 'N'},
        {"rate", required_argument, NULL, 'r'},
        {"steady", required_argument, NULL, 'w'},
        {"tail", required_argument, NULL, 't'},
        {"timeout", required_argument, NULL, 'T'},
        {"label", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    unsigned have = 0;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 's':
            parse_addr(optarg, &O.server);
            have |= 1;
            break;
        case 'v':
            parse_addr(optarg, &O.victims);
            have |= 2;
            break;
        case 'k':
            O.kill_pid = atoi(optarg);
            have |= 4;
            break;
        case 'm':
            parse_addr(optarg, &O.move_to);
            have |= 8;
            break;
        case 'S': {
            char buf[512];
            snprintf(buf, sizeof(buf), "%s", optarg);
            for (char *sv = NULL, *t = strtok_r(buf, ",", &sv); t; t = strtok_r(NULL, ",", &sv)) {
                if (O.nsurvivors == MAX_ADDRS)
                    die("--survivors: at most %d addresses", MAX_ADDRS);
                parse_addr(t, &O.survivors[O.nsurvivors++]);
            }
            have |= 16;
            break;
        }
        case 'n':
            O.victims_n = atoi(optarg);
            break;
        case 'N':
            O.survivors_n = atoi(optarg);
            break;
        case 'r':
            O.rate = atof(optarg);
            break;
        case 'w':
            O.steady = atof(optarg);
            break;
        case 't':
            O.tail = atof(optarg);
            break;
        case 'T':
            O.timeout = atof(optarg);
            break;
        case 'l':
            O.label = optarg;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            exit(2);
        }
    }
    if (have != 31 || O.kill_pid <= 0) {
        usage(stderr);
        die("missing --server, --victims, --kill-pid, --move-to or --survivors");
    }
    if (O.victims_n < 1 || O.survivors_n < 0 || O.rate <= 0 || O.rate > 10000 || O.steady < 0 ||
        O.tail < 0 || O.timeout <= 0)
        die("bad numeric option");
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    G.loop = uv_default_loop();
    G.t_begin = bench_now_ns();
    G.n = O.victims_n + O.survivors_n;
    G.c = calloc((size_t)G.n, sizeof(*G.c));
    if (!G.c)
        die("out of memory");
    for (int i = 0; i < G.n; i++) {
        G.c[i].idx = i;
        G.c[i].role = i < O.victims_n ? ROLE_VICTIM : ROLE_SURVIVOR;
    }
    uv_timer_init(G.loop, &G.pub_timer);
    uv_timer_init(G.loop, &G.kill_timer);
    uv_timer_init(G.loop, &G.tick);
    uv_timer_start(&G.tick, on_tick, 10, 10);
    static const chanq_uv_cbs_t cbs = {on_owner_connect, on_owner_msg, on_owner_close};
    int r =
        chanq_uv_connect(G.loop, (const struct sockaddr *)&O.server, NULL, &cbs, NULL, &G.owner);
    if (r < 0)
        die("connect: %s", uv_strerror(r));
    uv_run(G.loop, UV_RUN_DEFAULT);
    finish("event loop ended early");
    return 1;
}
