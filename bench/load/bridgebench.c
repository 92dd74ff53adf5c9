/* bridgebench.c - issue 24's benchmark client (bench/bridge.sh): durable topics delivered into
 * channels by chanqd's bridge (doc/bridge.md), and resume. chanqd runs with --bridge-file
 * binding --topic to GLOBAL (broadcast) as --msg-type; the addresses come from its ready file.
 * Players are CLIENT connections that AUTH and SUB to GLOBAL; events are produced over the
 * seed protocol (--mq-addr), each one's content carrying its sequence number and its send time
 * (CLOCK_REALTIME), so a player's latency is its receive time minus the send time: the kernel
 * receive time (SO_TIMESTAMPNS: "kernel rx", what chanqd and the network took) and the time
 * the event reached the app ("app", plus this process's own queueing). Modes:
 *
 *   live       --subs N players; once all are subscribed, one producer connection sends
 *              single-message produces at --rate per second, open loop (scheduled every
 *              1/rate s, not waiting for answers) for --warmup + --duration s. Measured over
 *              the --duration window: each player's latency per event, and the produce
 *              answer's latency (chanqd answers after the commit: the store's commit time as
 *              a producer sees it), both from the same send time. Then every player must have
 *              every acknowledged event once, in order (--drain s at most).
 *   catchup    one player, holding its position with libchanq's chanq_topics: it gets one event,
 *              drops, --events N are produced while it is away (batches of --batch), then it
 *              reconnects, SUBs and resumes (TopicResume, type 90): the catch-up rate is N /
 *              (last catch-up event - resume request). chanqd's ring (--bridge-ring-events)
 *              decides whether the position is served from memory or read from the store; the
 *              run reports which (chanq_bridge_resume_events_total{source}).
 *   reconnect  --players M players get one event, then --before s of quiet (live traffic only),
 *              then all drop; --events R are produced; all reconnect at once and resume: the
 *              time until every player has its R events, where it went (AUTH, SUB, result,
 *              last event), and chanq_bridge_resume_reads_total. Meanwhile a child process
 *              (--live-subs K > 0) keeps a SERVER connection broadcasting --live-rate 64-byte
 *              messages/s on a SUBWORLD channel to K subscribers: their latency before the drop
 *              and during the reconnect (a separate process, so that this one's work on M
 *              sockets does not queue the live samples). --no-resume is the control: the
 *              players come back and SUB without resuming (a player is back at its SUB
 *              result), so what the resumes add shows apart from the reconnect itself.
 *   routelogin a route binding's catch-up at login (doc/bridge.md "Route bindings"; --topic and
 *              --msg-type name a binding {"route": "user_id"}): --players M players "p<i>" that
 *              never connected (no position: each login reads its offset from the store and
 *              finds none); --events R events per player are produced while they are away,
 *              content {"user_id":"p<i>","n":<k>}, interleaved (k-th round of every player, so
 *              one player's events are one every M offsets); --before s of quiet; then all log
 *              in at once, without a request or a SUB. Each must get exactly its R events: its
 *              own (user_id), n = 0, 1... in order, each at the offset its produce returned,
 *              nothing more (once all have them, the run waits for chanqd's catch-ups to end,
 *              chanq_bridge_route_sessions 0, and drains 300 ms). Measured: the time until all
 *              have them, per player (from the reconnect, and from its AUTH answer), the live
 *              channel's latency before and during (the reconnect's live process), and the
 *              chanq_bridge_route_* counters (logins, store reads issued and shared, rows,
 *              events by source, offset reads).
 *
 * Output: one JSON line (starts with '{') and one readable line (starts with '#'). Exit 1 when
 * the run failed (an event missing, repeated or out of order, a resume not recovered, a
 * timeout): the JSON's "error" says which.
 */
#include "bridgebench.h"
#include "chanq_mq.h"
#include "chanq_mq_sync.h"
#include "chanq_topics.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODULE_ID         1u
#define LIVE_MSG_TYPE     100u
#define BC_ALL_BUT_SERVER 32u
#define CT_SUBWORLD       3u
#define LIVE_PAYLOAD      64
#define LIVE_SAMPLES_MAX  (4u << 20)

static struct {
    const char *mode, *label, *ready, *topic, *live_dump;
    const char *mq_ready; /* --mq-ready-file: where to produce (a followed shard's server) */
    uint32_t msg_type;
    int subs, players, events, batch, live_subs, conc, pid;
    bool no_resume, login_first;
    size_t size;
    double rate, duration, warmup, drain, before, live_rate, timeout;
} O = {.label = "",
       .topic = "bench",
       .msg_type = 200,
       .subs = 100,
       .players = 10000,
       .events = 0,
       .batch = 500,
       .live_subs = 8,
       .conc = 200,
       .size = 64,
       .rate = 2000,
       .duration = 5,
       .warmup = 1,
       .drain = 10,
       .before = 3,
       .live_rate = 100,
       .timeout = 120};

static struct {
    struct sockaddr_in client, server, admin, mq;
    char mq_addr[64];
} A;

/* ---- players -------------------------------------------------------------------------------- */

typedef struct player {
    bb_conn_t c;
    int idx;
    bb_track_t tk;
    chanq_topics_t *lib;                      /* catchup: libchanq's tracker instead of tk */
    uint64_t got;                             /* events accepted in the current phase */
    uint64_t t_auth, t_sub, t_result, t_done; /* monotonic ns */
    int retries;
    bool subscribed, result, recovered, done;
    char err[160];
} player_t;

static struct {
    uv_loop_t *loop;
    player_t *p;
    int n, nsub, inflight, next;
    int phase;
    void (*on_sub)(player_t *p);
    void (*on_event)(player_t *p, const bb_event_t *ev, bb_sock_t *s);
    void (*on_result)(player_t *p);
    /* a mode whose players do not SUB, or read their messages their own way (routelogin) */
    void (*on_authed)(bb_conn_t *c);
    void (*on_msg)(bb_conn_t *c, const chanq_msg_t *m);
    uv_timer_t timer, tick;
    uint64_t t_begin;
    const char *error;
} G;

static void fail(const char *why);

static void stop_loop(uv_timer_t *t)
{
    uv_stop(t->loop);
}

static void player_event(player_t *p, const chanq_msg_t *m)
{
    bb_event_t ev;
    if (!bb_event_parse(m->body, m->body_len, &ev)) {
        fail("a bridge event did not parse");
        return;
    }
    int r;
    if (p->lib) {
        Chanqpb__TopicEvent *e = chanq_topic_event_decode(m->body, m->body_len);
        r = e ? chanq_topics_accept(p->lib, m->channel_id, e) : CQ_EDECODE;
        chanq_unpack_free(e);
    } else {
        r = bb_track_accept(&p->tk, &ev);
    }
    if (r < 0)
        bb_die("player %d: accept: %s", p->idx, cq_strerror(r));
    if (r == 1) {
        p->got++;
        if (G.on_event)
            G.on_event(p, &ev, p->c.sock);
    }
}

static void player_result(player_t *p, const chanq_msg_t *m)
{
    bool ok;
    p->result = true;
    p->t_result = bench_now_ns();
    if (p->lib) {
        int r = chanq_topics_on_result(p->lib, m->channel_id, m->body, m->body_len, &p->recovered);
        snprintf(p->err, sizeof(p->err), "%s",
                 r < 0 ? cq_strerror(r) : chanq_topics_result_error(p->lib));
        ok = r == 0;
    } else {
        ok = bb_track_result(&p->tk, m->body, m->body_len, &p->recovered, p->err, sizeof(p->err));
    }
    if (!ok)
        fail("a TopicResumeResult did not parse");
    else if (G.on_result)
        G.on_result(p);
}

static void player_msg(bb_conn_t *c, const chanq_msg_t *m)
{
    player_t *p = c->ud;
    if (m->channel_id != 0)
        return;
    if (m->msg_type == O.msg_type)
        player_event(p, m);
    else if (m->msg_type == CHANQ_MSG_TOPIC_RESUME_RESULT)
        player_result(p, m);
}

static void player_subbed(void *ud, const chanq_msg_t *m)
{
    player_t *p = ud;
    (void)m;
    p->subscribed = true;
    p->t_sub = bench_now_ns();
    G.nsub++;
    G.on_sub(p);
}

static void player_authed(bb_conn_t *c)
{
    player_t *p = c->ud;
    p->t_auth = bench_now_ns();
    bb_conn_sub(c, 0, 0, player_subbed, p);
}

static void player_connect(player_t *p);

static void on_retry(uv_timer_t *t)
{
    player_t *p = t->data;
    uv_close((uv_handle_t *)t, (uv_close_cb)free);
    player_connect(p);
}

/* A player whose connection failed tries again 100 ms later, as a game client would; the
 * retries are counted and reported. */
static void player_lost(bb_conn_t *c, int err)
{
    player_t *p = c->ud;
    if (G.error)
        return;
    if (p->subscribed && p->done) {
        fprintf(stderr, "bridgebench: player %d lost after its events: %s\n", p->idx,
                uv_strerror(err));
        return;
    }
    p->retries++;
    p->subscribed = false;
    uv_timer_t *t = malloc(sizeof(*t));
    if (!t)
        bb_die("out of memory");
    uv_timer_init(G.loop, t);
    t->data = p;
    uv_timer_start(t, on_retry, 100, 0);
}

static void player_connect(player_t *p)
{
    snprintf(p->c.pit, sizeof(p->c.pit), "p%d", p->idx);
    p->c.on_authed = G.on_authed ? G.on_authed : player_authed;
    p->c.on_msg = G.on_msg ? G.on_msg : player_msg;
    p->c.on_lost = player_lost;
    p->c.ud = p;
    bb_conn_open(&p->c, G.loop, &A.client);
}

static void players_new(int n)
{
    G.n = n;
    G.p = calloc((size_t)n, sizeof(*G.p));
    if (!G.p)
        bb_die("out of memory");
    for (int i = 0; i < n; i++)
        G.p[i].idx = i;
}

/* Connects players in order, at most O.conc handshakes at a time (the setup, not measured). */
static void players_connect_more(void)
{
    while (G.inflight < O.conc && G.next < G.n) {
        G.inflight++;
        player_connect(&G.p[G.next++]);
    }
}

/* The resume request of a player that holds its own position (bb_track_t): one position. */
static void player_resume(player_t *p)
{
    Chanqpb__TopicPosition pos = CHANQPB__TOPIC_POSITION__INIT, *pp = &pos;
    pos.topic = (char *)O.topic;
    pos.epoch = p->tk.epoch;
    pos.offset = p->tk.offset;
    Chanqpb__TopicResumeMessage m = CHANQPB__TOPIC_RESUME_MESSAGE__INIT;
    m.n_positions = 1;
    m.positions = &pp;
    int r = chanq_client_send(p->c.core, 0, 0, 0, CHANQ_MSG_TOPIC_RESUME, &m.base);
    if (r < 0)
        bb_die("resume: %s", cq_strerror(r));
    p->tk.pending = true;
}

/* ---- producing ------------------------------------------------------------------------------ */

static chanq_mq_sync_t *mq_open(void)
{
    char host[64], err[256] = "";
    uint16_t port;
    chanq_mq_sync_t *s = NULL;
    if (chanq_mq_sync_parse_addr(A.mq_addr, host, sizeof(host), &port) < 0)
        bb_die("bad mq address %s", A.mq_addr);
    int r = chanq_mq_sync_connect(host, port, MODULE_ID, NULL, CQ_MQ_PRODUCER, 10000, err,
                                  sizeof(err), &s);
    if (r < 0)
        bb_die("mq connect %s: %s %s", A.mq_addr, cq_strerror(r), err);
    chanq_mq_sync_set_timeout(s, 60000);
    return s;
}

static void topic_create(void)
{
    chanq_mq_sync_t *s = mq_open();
    int r = chanq_mq_sync_add_topic(s, O.topic);
    if (r < 0)
        bb_die("add_topic %s: %s %s", O.topic, cq_strerror(r), chanq_mq_sync_errmsg(s));
    chanq_mq_sync_close(s);
    /* --mq-ready-file: a front that follows the topic's server starts at the topic's live
     * position once its watch is in (it asks again every second while the topic is unknown) */
    if (O.mq_ready)
        usleep(1500 * 1000);
}

/* Writes event seq's content into buf (cap bytes); returns its length (<= cap). */
typedef size_t (*content_fn)(char *buf, size_t cap, uint64_t seq);

/* The timed content of the broadcast modes: O.size bytes, sequence number and send time. */
static size_t content_timed(char *buf, size_t cap, uint64_t seq)
{
    bb_content_make(buf, cap, seq, bb_real_ns());
    return cap;
}

/* Produces n events (sequence numbers from *seq on; content by make, at most slot bytes) in
 * requests of O.batch, each answered after its commit; returns the last offset. offs_out, when
 * not NULL, gets each event's offset at its index from the first sequence number. */
static uint64_t produce_n(uint64_t *seq, int n, size_t slot, content_fn make, uint64_t *offs_out)
{
    size_t b = (size_t)(n < O.batch ? n : O.batch);
    char *buf = malloc(b * slot);
    chanq_mq_content_t *msgs = calloc(b, sizeof(*msgs));
    int64_t *offs = calloc(b, sizeof(*offs));
    if (!buf || !msgs || !offs)
        bb_die("out of memory");
    chanq_mq_sync_t *s = mq_open();
    uint64_t last = 0;
    for (int done = 0; done < n;) {
        size_t k = (size_t)(n - done) < b ? (size_t)(n - done) : b;
        for (size_t i = 0; i < k; i++) {
            size_t len = make(buf + i * slot, slot, (*seq)++);
            msgs[i] = (chanq_mq_content_t){buf + i * slot, len, false, -1};
        }
        chanq_mq_produce_t req = {O.topic, msgs, k, 0, -1, -1};
        int r = chanq_mq_sync_produce(s, &req, offs);
        if (r < 0)
            bb_die("produce: %s %s", cq_strerror(r), chanq_mq_sync_errmsg(s));
        for (size_t i = 0; offs_out && i < k; i++)
            offs_out[done + (int)i] = (uint64_t)offs[i];
        last = (uint64_t)offs[k - 1];
        done += (int)k;
    }
    chanq_mq_sync_close(s);
    free(buf);
    free(msgs);
    free(offs);
    return last;
}

static uint64_t publish(uint64_t *seq, int n)
{
    return produce_n(seq, n, O.size, content_timed, NULL);
}

/* Waits (polling /metrics) until the bridge took at least min events in all: the produces were
 * answered after the commit, the bridge takes them from the MQ loop just after. */
static void bridge_wait_events(double min)
{
    uint64_t t0 = bench_now_ns();
    for (;;) {
        double v = bb_metric_now(&A.admin, "chanq_bridge_events_total");
        if (v >= min)
            return;
        if (bench_now_ns() - t0 > 30000000000ull)
            bb_die("the bridge took %.0f events in 30 s, not %.0f", v, min);
        usleep(10000);
    }
}

/* ---- metrics of a run ----------------------------------------------------------------------- */

/* The route bindings' counters (chanq_bridge_route_*, doc/bridge.md "Route bindings"). */
typedef struct route_snap {
    double started, caught_up, refused, idle, reads, shared, rows, ring, store, acks, off_reads,
        off_writes;
} route_snap_t;

typedef struct snap {
    double reads, ring, store, recovered, not_recovered, refused, idle, events;
    double commit_count, commit_sum, commit_le[12];
    route_snap_t rt;
} snap_t;

static const char *const commit_le[12] = {"0.00025", "0.0005", "0.001", "0.002", "0.005", "0.01",
                                          "0.02",    "0.05",   "0.1",   "0.5",   "1",     "+Inf"};

static void route_snap_read(const char *b, route_snap_t *r)
{
    r->started = bb_metric(b, "chanq_bridge_route_logins_total{outcome=\"started\"}");
    r->caught_up = bb_metric(b, "chanq_bridge_route_logins_total{outcome=\"caught_up\"}");
    r->refused = bb_metric(b, "chanq_bridge_route_logins_total{outcome=\"refused\"}");
    r->idle = bb_metric(b, "chanq_bridge_route_logins_total{outcome=\"idle\"}");
    r->reads = bb_metric(b, "chanq_bridge_route_reads_total{kind=\"issued\"}");
    r->shared = bb_metric(b, "chanq_bridge_route_reads_total{kind=\"shared\"}");
    r->rows = bb_metric(b, "chanq_bridge_route_rows_total");
    r->ring = bb_metric(b, "chanq_bridge_route_events_total{source=\"ring\"}");
    r->store = bb_metric(b, "chanq_bridge_route_events_total{source=\"store\"}");
    r->acks = bb_metric(b, "chanq_bridge_route_acks_total");
    r->off_reads = bb_metric(b, "chanq_bridge_route_offset_ops_total{op=\"read\"}");
    r->off_writes = bb_metric(b, "chanq_bridge_route_offset_ops_total{op=\"write\"}");
}

static void snap_take(snap_t *s)
{
    char *b = bb_metrics_fetch(&A.admin), name[128];
    if (!b)
        bb_die("GET /metrics failed");
    s->reads = bb_metric(b, "chanq_bridge_resume_reads_total");
    s->ring = bb_metric(b, "chanq_bridge_resume_events_total{source=\"ring\"}");
    s->store = bb_metric(b, "chanq_bridge_resume_events_total{source=\"store\"}");
    s->recovered = bb_metric(b, "chanq_bridge_resumes_total{outcome=\"recovered\"}");
    s->not_recovered = bb_metric(b, "chanq_bridge_resumes_total{outcome=\"not_recovered\"}");
    s->refused = bb_metric(b, "chanq_bridge_resumes_total{outcome=\"refused\"}");
    s->idle = bb_metric(b, "chanq_bridge_resume_idle_total");
    s->events = bb_metric(b, "chanq_bridge_events_total");
    s->commit_count = bb_metric(b, "chanq_mq_writer_commit_seconds_count");
    s->commit_sum = bb_metric(b, "chanq_mq_writer_commit_seconds_sum");
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof(name), "chanq_mq_writer_commit_seconds_bucket{le=\"%s\"}",
                 commit_le[i]);
        s->commit_le[i] = bb_metric(b, name);
    }
    route_snap_read(b, &s->rt);
    free(b);
}

/* The store's commit histogram between two snapshots: the bucket bound (ms) under which 99 % of
 * the transactions took; -1 without transactions. */
static double commit_p99_le_ms(const snap_t *a, const snap_t *b)
{
    double n = b->commit_count - a->commit_count;
    if (n <= 0)
        return -1;
    for (int i = 0; i < 11; i++)
        if (b->commit_le[i] - a->commit_le[i] >= 0.99 * n)
            return atof(commit_le[i]) * 1e3;
    return 1e9;
}

static void print_snap_delta(const snap_t *a, const snap_t *b)
{
    printf(",\"resume_reads\":%.0f,\"resume_ring_events\":%.0f,\"resume_store_events\":%.0f,"
           "\"resumes_recovered\":%.0f,\"resumes_not_recovered\":%.0f,\"resumes_refused\":%.0f,"
           "\"resume_idle\":%.0f,\"bridge_events\":%.0f,\"commits\":%.0f,\"commit_mean_ms\":%.3f,"
           "\"commit_p99_le_ms\":%g",
           b->reads - a->reads, b->ring - a->ring, b->store - a->store, b->recovered - a->recovered,
           b->not_recovered - a->not_recovered, b->refused - a->refused, b->idle - a->idle,
           b->events - a->events, b->commit_count - a->commit_count,
           b->commit_count > a->commit_count
               ? 1e3 * (b->commit_sum - a->commit_sum) / (b->commit_count - a->commit_count)
               : -1,
           commit_p99_le_ms(a, b));
}

static void print_route_delta(const route_snap_t *a, const route_snap_t *b)
{
    printf(",\"route_logins\":%.0f,\"route_caught_up\":%.0f,\"route_refused\":%.0f,"
           "\"route_idle\":%.0f,\"route_reads\":%.0f,\"route_reads_shared\":%.0f,"
           "\"route_rows\":%.0f,\"route_ring_events\":%.0f,\"route_store_events\":%.0f,"
           "\"route_acks\":%.0f,\"route_offset_reads\":%.0f,\"route_offset_writes\":%.0f",
           b->started - a->started, b->caught_up - a->caught_up, b->refused - a->refused,
           b->idle - a->idle, b->reads - a->reads, b->shared - a->shared, b->rows - a->rows,
           b->ring - a->ring, b->store - a->store, b->acks - a->acks, b->off_reads - a->off_reads,
           b->off_writes - a->off_writes);
}

static void print_end(const char *error)
{
    printf(",\"error\":%s%s%s}\n", error ? "\"" : "", error ? error : "null", error ? "\"" : "");
}

/* ---- mode live ------------------------------------------------------------------------------ */

static struct {
    chanq_mq_t *mq;
    bb_sock_t *sock;
    uv_timer_t pub;
    uint64_t t_start, t_warm, t_end, real_warm, real_end;
    uint64_t sent, acked, perr, deliveries, cap;
    uint64_t *send_real, *ack_rx, *last_rx; /* per sequence number (realtime ns) */
    bool measuring, pub_done;
    double cpu_srv0, cpu_srv1, cpu_cli0, cpu_cli1;
    bb_samples_t lat_k, lat_a, ack_k, ack_a;
    snap_t s0, s1;
} L;

static bool in_window(uint64_t send_real)
{
    return send_real >= L.real_warm && send_real < L.real_end;
}

static void live_check_done(void);

static void live_event(player_t *p, const bb_event_t *ev, bb_sock_t *s)
{
    uint64_t seq, send;
    L.deliveries++;
    if (!bb_content_read(ev->content, ev->content_len, &seq, &send)) {
        fail("an event's content is not the benchmark's");
        return;
    }
    if (in_window(send)) {
        bb_samples_add(&L.lat_k, (int64_t)(s->rx_real - send));
        bb_samples_add(&L.lat_a, (int64_t)(bb_real_ns() - send));
    }
    if (seq < L.cap && s->rx_real > L.last_rx[seq])
        L.last_rx[seq] = s->rx_real;
    if (L.pub_done && p->got >= L.acked)
        live_check_done();
}

static void live_finish(void);

static void live_drained(uv_timer_t *t)
{
    (void)t;
    live_finish();
}

static void live_check_done(void)
{
    if (!L.pub_done || L.acked + L.perr < L.sent)
        return;
    for (int i = 0; i < G.n; i++)
        if (G.p[i].got < L.acked)
            return;
    live_finish();
}

static void live_on_produce(chanq_mq_t *mq, int err, cq_mq_msg_t *resp, void *ud)
{
    uint64_t seq = (uint64_t)(uintptr_t)ud;
    (void)mq;
    cq_mq_msg_free(resp);
    if (err) {
        L.perr++;
        fprintf(stderr, "bridgebench: produce %" PRIu64 ": %s\n", seq, cq_strerror(err));
    } else {
        L.acked++;
    }
    uint64_t send = L.send_real[seq];
    L.ack_rx[seq] = L.sock->rx_real;
    if (!err && in_window(send)) {
        bb_samples_add(&L.ack_k, (int64_t)(L.sock->rx_real - send));
        bb_samples_add(&L.ack_a, (int64_t)(bb_real_ns() - send));
    }
}

static void live_produce_one(void)
{
    char content[4096];
    uint64_t seq = L.sent, now = bb_real_ns();
    if (seq == L.cap)
        return; /* the schedule is behind by more than the run: nothing more is sent */
    bb_content_make(content, O.size, seq, now);
    chanq_mq_content_t msg = {content, O.size, false, -1};
    chanq_mq_produce_t req = {O.topic, &msg, 1, 0, -1, -1};
    L.send_real[seq] = now;
    int r = chanq_mq_produce(L.mq, &req, live_on_produce, (void *)(uintptr_t)seq, NULL);
    if (r < 0)
        bb_die("produce: %s", cq_strerror(r));
    L.sent++;
}

/* Every ms: the produces due by now (open loop), the window's edges. */
static void live_on_pub(uv_timer_t *t)
{
    uint64_t now = bench_now_ns();
    if (!L.measuring && now >= L.t_warm) {
        L.measuring = true;
        L.cpu_srv0 = bench_proc_cpu_s(O.pid, NULL);
        L.cpu_cli0 = bb_self_cpu_s();
    }
    if (now >= L.t_end) {
        uv_timer_stop(t);
        L.cpu_srv1 = bench_proc_cpu_s(O.pid, NULL);
        L.cpu_cli1 = bb_self_cpu_s();
        L.pub_done = true;
        uv_timer_start(&G.timer, live_drained, (uint64_t)(O.drain * 1e3), 0);
        live_check_done(); /* everything may be in already */
        return;
    }
    uint64_t due = (uint64_t)((double)(now - L.t_start) * O.rate / 1e9) + 1;
    while (L.sent < due && L.sent < L.cap)
        live_produce_one();
    bb_sock_flush(L.sock);
}

static void live_on_connect(chanq_mq_t *mq, int err, cq_mq_msg_t *resp, void *ud)
{
    (void)mq;
    (void)ud;
    cq_mq_msg_free(resp);
    if (err)
        bb_die("mq connect: %s", cq_strerror(err));
    snap_take(&L.s0);
    L.t_start = bench_now_ns();
    L.t_warm = L.t_start + (uint64_t)(O.warmup * 1e9);
    L.t_end = L.t_warm + (uint64_t)(O.duration * 1e9);
    L.real_warm = bb_real_ns() + (L.t_warm - L.t_start);
    L.real_end = L.real_warm + (uint64_t)(O.duration * 1e9);
    uv_timer_init(G.loop, &L.pub);
    uv_timer_start(&L.pub, live_on_pub, 1, 1);
}

static void mq_sock_input(bb_sock_t *s, const uint8_t *p, size_t n)
{
    int r = chanq_mq_feed(L.mq, p, n);
    if (r < 0)
        bb_die("the producer's stream: %s", cq_strerror(r));
    live_check_done();
    bb_sock_flush(s);
}

static void mq_sock_lost(bb_sock_t *s, int err)
{
    (void)s;
    bb_die("the producer's connection was lost: %s", uv_strerror(err));
}

static void mq_sock_connected(bb_sock_t *s)
{
    (void)s;
}

static const uint8_t *mq_sock_out(bb_sock_t *s, size_t *ret_len)
{
    (void)s;
    return chanq_mq_out(L.mq, ret_len);
}

static void mq_sock_consume(bb_sock_t *s, size_t n)
{
    (void)s;
    chanq_mq_out_consume(L.mq, n);
}

static const bb_sock_ops_t mq_ops = {mq_sock_connected, mq_sock_input, mq_sock_lost, mq_sock_out,
                                     mq_sock_consume};

static void live_sub(player_t *p)
{
    (void)p;
    G.inflight--;
    players_connect_more();
    if (G.nsub < G.n)
        return;
    L.mq = chanq_mq_new(NULL);
    if (!L.mq)
        bb_die("out of memory");
    int r = chanq_mq_connect(L.mq, MODULE_ID, "", CQ_MQ_PRODUCER, live_on_connect, NULL, NULL);
    if (r < 0)
        bb_die("mq connect: %s", cq_strerror(r));
    L.sock = bb_sock_open(G.loop, &A.mq, &mq_ops, NULL);
}

/* Per event of the window: its last player's receive time minus the producer's receive time of
 * its answer (kernel rx both): what delivering it to every player added to the commit, as the
 * producer saw it (negative when the last player had it before the producer had the answer). */
static void live_spread(bb_samples_t *out)
{
    for (uint64_t i = 0; i < L.sent; i++)
        if (in_window(L.send_real[i]) && L.ack_rx[i] && L.last_rx[i])
            bb_samples_add(out, (int64_t)(L.last_rx[i] - L.ack_rx[i]));
}

static void live_finish(void)
{
    uint64_t missing = 0, dup = 0, holes = 0;
    bb_samples_t spread = {0};
    live_spread(&spread);
    for (int i = 0; i < G.n; i++) {
        missing += G.p[i].got < L.acked ? L.acked - G.p[i].got : 0;
        dup += G.p[i].tk.dup;
        holes += G.p[i].tk.holes;
    }
    snap_take(&L.s1);
    const char *error = G.error        ? G.error
                        : missing      ? "events missing"
                        : dup || holes ? "events repeated or out of order"
                        : L.perr       ? "produces failed"
                                       : NULL;
    double srv = L.cpu_srv1 - L.cpu_srv0, cli = L.cpu_cli1 - L.cpu_cli0;
    printf("{\"label\":\"%s\",\"mode\":\"live\",\"subs\":%d,\"rate\":%.0f,\"duration_s\":%.1f,"
           "\"size\":%zu,\"sent\":%" PRIu64 ",\"acked\":%" PRIu64 ",\"produce_errors\":%" PRIu64
           ",\"deliveries\":%" PRIu64 ",\"missing\":%" PRIu64 ",\"dup\":%" PRIu64
           ",\"holes\":%" PRIu64 ",\"samples\":%zu,\"kp50_us\":%.1f,\"kp99_us\":%.1f,"
           "\"kp999_us\":%.1f,\"kmax_us\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
           "\"ack_kp50_us\":%.1f,\"ack_kp99_us\":%.1f,\"ack_p50_us\":%.1f,\"ack_p99_us\":%.1f,"
           "\"spread_p50_us\":%.1f,\"spread_p99_us\":%.1f,\"server_cpu_s\":%.2f,"
           "\"client_cpu_s\":%.2f",
           O.label, G.n, O.rate, O.duration, O.size, L.sent, L.acked, L.perr, L.deliveries, missing,
           dup, holes, L.lat_k.n, bb_pct_us(&L.lat_k, 0.5), bb_pct_us(&L.lat_k, 0.99),
           bb_pct_us(&L.lat_k, 0.999), bb_pct_us(&L.lat_k, 1), bb_pct_us(&L.lat_a, 0.5),
           bb_pct_us(&L.lat_a, 0.99), bb_pct_us(&L.ack_k, 0.5), bb_pct_us(&L.ack_k, 0.99),
           bb_pct_us(&L.ack_a, 0.5), bb_pct_us(&L.ack_a, 0.99), bb_pct_us(&spread, 0.5),
           bb_pct_us(&spread, 0.99), srv, cli);
    free(spread.v);
    print_snap_delta(&L.s0, &L.s1);
    print_end(error);
    printf("# live %s: %d players, %.0f events/s for %.1f s: delivery (kernel rx) p50 %.2f ms "
           "p99 %.2f ms max %.2f ms, (app) p99 %.2f ms; produce answer (kernel rx) p50 %.2f ms "
           "p99 %.2f ms; store commit p99 <= %g ms; missing %" PRIu64 ", dup %" PRIu64
           ", holes %" PRIu64 "; chanqd %.2f CPU-s%s%s\n",
           O.label, G.n, O.rate, O.duration, bb_pct_us(&L.lat_k, 0.5) / 1e3,
           bb_pct_us(&L.lat_k, 0.99) / 1e3, bb_pct_us(&L.lat_k, 1) / 1e3,
           bb_pct_us(&L.lat_a, 0.99) / 1e3, bb_pct_us(&L.ack_k, 0.5) / 1e3,
           bb_pct_us(&L.ack_k, 0.99) / 1e3, commit_p99_le_ms(&L.s0, &L.s1), missing, dup, holes,
           srv, error ? ", ERROR: " : "", error ? error : "");
    fflush(stdout);
    exit(error ? 1 : 0);
}

static void run_live(void)
{
    if (O.rate <= 0 || O.rate > 100000 || O.size > 4096)
        bb_die("bad --rate or --size");
    topic_create();
    L.cap = (uint64_t)(O.rate * (O.warmup + O.duration)) + 16;
    L.send_real = calloc(L.cap, sizeof(*L.send_real));
    L.ack_rx = calloc(L.cap, sizeof(*L.ack_rx));
    L.last_rx = calloc(L.cap, sizeof(*L.last_rx));
    if (!L.send_real || !L.ack_rx || !L.last_rx)
        bb_die("out of memory");
    players_new(O.subs);
    G.on_sub = live_sub;
    G.on_event = live_event;
    players_connect_more();
}

/* ---- mode catchup --------------------------------------------------------------------------- */

static struct {
    uint64_t seq, last, t_resume, t_first, t_end;
    double publish_s, cpu_srv0, cpu_cli0;
    snap_t s0, s1;
} C;

static void catchup_finish(const char *error)
{
    player_t *p = &G.p[0];
    chanq_topics_stats_t st;
    chanq_topic_pos_t pos = {0};
    chanq_topics_stats(p->lib, &st);
    chanq_topics_position(p->lib, O.topic, 0, &pos);
    double cpu_srv = bench_proc_cpu_s(O.pid, NULL) - C.cpu_srv0;
    double cpu_cli = bb_self_cpu_s() - C.cpu_cli0;
    snap_take(&C.s1);
    if (!error && (pos.offset != C.last || st.duplicates || st.holes))
        error = "the catch-up is not every event once, in order";
    double secs = C.t_end ? (double)(C.t_end - C.t_resume) / 1e9 : -1;
    printf("{\"label\":\"%s\",\"mode\":\"catchup\",\"events\":%d,\"size\":%zu,"
           "\"publish_s\":%.3f,\"recovered\":%s,\"resume_error\":\"%s\",\"result_ms\":%.2f,"
           "\"first_ms\":%.2f,\"secs\":%.4f,\"events_per_s\":%.0f,\"caught_up\":%" PRIu64
           ",\"dup\":%" PRIu64 ",\"holes\":%" PRIu64 ",\"skipped\":%" PRIu64
           ",\"server_cpu_s\":%.3f,\"client_cpu_s\":%.3f",
           O.label, O.events, O.size, C.publish_s, p->recovered ? "true" : "false", p->err,
           p->t_result ? (double)(p->t_result - C.t_resume) / 1e6 : -1,
           C.t_first ? (double)(C.t_first - C.t_resume) / 1e6 : -1, secs,
           secs > 0 ? O.events / secs : -1, p->got, st.duplicates, st.holes, st.skipped, cpu_srv,
           cpu_cli);
    print_snap_delta(&C.s0, &C.s1);
    print_end(error);
    printf("# catchup %s: %d events in %.1f ms = %.0f events/s (result after %.2f ms, %s); "
           "from the ring %.0f, the store %.0f (%.0f reads); chanqd %.3f CPU-s, client %.3f%s%s\n",
           O.label, O.events, secs * 1e3, secs > 0 ? O.events / secs : -1,
           p->t_result ? (double)(p->t_result - C.t_resume) / 1e6 : -1,
           p->recovered ? "recovered" : "NOT recovered", C.s1.ring - C.s0.ring,
           C.s1.store - C.s0.store, C.s1.reads - C.s0.reads, cpu_srv, cpu_cli,
           error ? ", ERROR: " : "", error ? error : "");
    fflush(stdout);
    exit(error ? 1 : 0);
}

static void catchup_event(player_t *p, const bb_event_t *ev, bb_sock_t *s)
{
    (void)ev;
    (void)s;
    if (G.phase == 0) {
        G.phase = 1; /* the position is held: away */
        uv_stop(G.loop);
        return;
    }
    if (!C.t_first)
        C.t_first = bench_now_ns();
    if (p->got == (uint64_t)O.events) {
        C.t_end = bench_now_ns();
        catchup_finish(NULL);
    }
}

static void catchup_sub(player_t *p)
{
    if (G.phase == 0) {
        C.seq = 0;
        publish(&C.seq, 1); /* the event that makes the player's position */
        return;
    }
    p->got = 0;
    snap_take(&C.s0);
    C.cpu_srv0 = bench_proc_cpu_s(O.pid, NULL);
    C.cpu_cli0 = bb_self_cpu_s();
    C.t_resume = bench_now_ns();
    int r = chanq_topics_resume(p->lib, p->c.core, 0);
    if (r < 0)
        bb_die("chanq_topics_resume: %s", cq_strerror(r));
    bb_conn_flush(&p->c);
}

static void catchup_result(player_t *p)
{
    if (!p->recovered)
        catchup_finish("the resume was not recovered");
}

static void run_catchup(void)
{
    if (O.events < 1)
        bb_die("--events must be at least 1");
    topic_create();
    players_new(1);
    player_t *p = &G.p[0];
    p->lib = chanq_topics_new();
    if (!p->lib)
        bb_die("out of memory");
    G.on_sub = catchup_sub;
    G.on_event = catchup_event;
    G.on_result = catchup_result;
    player_connect(p);
    uv_run(G.loop, UV_RUN_DEFAULT); /* until the position is held */
    bb_conn_close(&p->c);
    double before = bb_metric_now(&A.admin, "chanq_bridge_events_total");
    uint64_t t0 = bench_now_ns();
    C.last = publish(&C.seq, O.events);
    C.publish_s = (double)(bench_now_ns() - t0) / 1e9;
    bridge_wait_events(before + O.events);
    player_connect(p);
}

/* ---- mode reconnect: the live channel's process --------------------------------------------- */

typedef struct live_sample {
    uint64_t rx_real;
    int64_t kern, app;
} live_sample_t;

typedef struct live_shm {
    atomic_int ready, stop;
    atomic_uint_least64_t n, sent, lost;
    live_sample_t s[LIVE_SAMPLES_MAX];
} live_shm_t;

static struct {
    live_shm_t *shm;
    uv_loop_t loop;
    bb_conn_t owner, *subs;
    uint32_t chan;
    int nsubbed;
    uint64_t sent, t_start, *next_seq;
    uv_timer_t pub, tick;
} K;

static void live_pub(uv_timer_t *t)
{
    (void)t;
    uint64_t due = (uint64_t)((double)(bench_now_ns() - K.t_start) * O.live_rate / 1e9) + 1;
    uint8_t p[LIVE_PAYLOAD] = {0};
    while (K.sent < due) {
        uint64_t seq = K.sent++, real = bb_real_ns();
        memcpy(p, &seq, 8);
        memcpy(p + 8, &real, 8);
        int r = chanq_client_server_forward(K.owner.core, K.chan, BC_ALL_BUT_SERVER, LIVE_MSG_TYPE,
                                            0, p, sizeof(p));
        if (r < 0)
            bb_die("live publish: %s", cq_strerror(r));
    }
    atomic_store(&K.shm->sent, K.sent);
    bb_conn_flush(&K.owner);
}

/* ServerForwardMessage.payload (field 2) of a LIVE_PAYLOAD-byte payload: tag 0x12, length. */
static const uint8_t *sfm_payload(const chanq_msg_t *m)
{
    for (uint32_t i = 0; i + 2 + LIVE_PAYLOAD <= m->body_len; i++)
        if (m->body[i] == 0x12 && m->body[i + 1] == LIVE_PAYLOAD)
            return m->body + i + 2;
    return NULL;
}

static void live_sub_msg(bb_conn_t *c, const chanq_msg_t *m)
{
    const uint8_t *p;
    if (m->channel_id != K.chan || m->msg_type != LIVE_MSG_TYPE || !(p = sfm_payload(m)))
        return;
    uint64_t seq, send, *next = &K.next_seq[(bb_conn_t *)c - K.subs];
    memcpy(&seq, p, 8);
    memcpy(&send, p + 8, 8);
    if (seq > *next)
        atomic_fetch_add(&K.shm->lost, seq - *next);
    *next = seq + 1;
    uint64_t i = atomic_load(&K.shm->n);
    if (i < LIVE_SAMPLES_MAX) {
        K.shm->s[i] = (live_sample_t){c->sock->rx_real, (int64_t)(c->sock->rx_real - send),
                                      (int64_t)(bb_real_ns() - send)};
        atomic_store(&K.shm->n, i + 1);
    }
}

static void live_subbed(void *ud, const chanq_msg_t *m)
{
    (void)ud;
    (void)m;
    if (++K.nsubbed < O.live_subs)
        return;
    K.t_start = bench_now_ns();
    uv_timer_start(&K.pub, live_pub, 1, 1);
    atomic_store(&K.shm->ready, 1);
}

static void live_sub_authed(bb_conn_t *c)
{
    bb_conn_sub(&K.owner, K.chan, c->id, live_subbed, NULL);
    bb_conn_flush(&K.owner);
}

static void live_lost(bb_conn_t *c, int err)
{
    bb_die("live channel: %s lost: %s", c->pit, uv_strerror(err));
}

static void live_created(void *ud, const chanq_msg_t *m)
{
    (void)ud;
    Channeldpb__CreateChannelResultMessage *res =
        chanq_unpack(&channeldpb__create_channel_result_message__descriptor, m->body, m->body_len);
    K.chan = res ? res->channelid : 0;
    chanq_unpack_free(res);
    if (!K.chan)
        bb_die("live channel: CREATE_CHANNEL(SUBWORLD) failed");
    for (int i = 0; i < O.live_subs; i++) {
        bb_conn_t *c = &K.subs[i];
        snprintf(c->pit, sizeof(c->pit), "live%d", i);
        c->on_authed = live_sub_authed;
        c->on_msg = live_sub_msg;
        c->on_lost = live_lost;
        bb_conn_open(c, &K.loop, &A.client);
    }
}

static void live_owner_authed(bb_conn_t *c)
{
    uint32_t stub;
    int r = chanq_client_stub_alloc(c->core, live_created, NULL, &stub);
    if (r == 0)
        r = chanq_client_create_channel(c->core, stub, CT_SUBWORLD, "bridgebench-live", NULL);
    if (r < 0)
        bb_die("live channel: create: %s", cq_strerror(r));
}

static void live_tick(uv_timer_t *t)
{
    (void)t;
    if (atomic_load(&K.shm->stop))
        _exit(0);
}

static void live_child(void)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    uv_loop_init(&K.loop);
    K.subs = calloc((size_t)O.live_subs, sizeof(*K.subs));
    K.next_seq = calloc((size_t)O.live_subs, sizeof(*K.next_seq));
    if (!K.subs || !K.next_seq)
        bb_die("out of memory");
    uv_timer_init(&K.loop, &K.pub);
    uv_timer_init(&K.loop, &K.tick);
    uv_timer_start(&K.tick, live_tick, 10, 10);
    snprintf(K.owner.pit, sizeof(K.owner.pit), "bridgebench-live");
    K.owner.on_authed = live_owner_authed;
    K.owner.on_lost = live_lost;
    bb_conn_open(&K.owner, &K.loop, &A.server);
    uv_run(&K.loop, UV_RUN_DEFAULT);
    _exit(3);
}

static pid_t live_start(void)
{
    K.shm =
        mmap(NULL, sizeof(live_shm_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (K.shm == MAP_FAILED)
        bb_die("mmap: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        bb_die("fork: %s", strerror(errno));
    if (pid == 0)
        live_child();
    return pid;
}

/* The live samples received in [from, to) (realtime ns): p50, p99, max in us (kernel rx), p99
 * (app), and their count. */
typedef struct live_pcts {
    size_t n;
    double kp50, kp99, kmax, ap99;
} live_pcts_t;

static live_pcts_t live_window(uint64_t from, uint64_t to)
{
    bb_samples_t k = {0}, a = {0};
    uint64_t n = atomic_load(&K.shm->n);
    for (uint64_t i = 0; i < n; i++) {
        if (K.shm->s[i].rx_real >= from && K.shm->s[i].rx_real < to) {
            bb_samples_add(&k, K.shm->s[i].kern);
            bb_samples_add(&a, K.shm->s[i].app);
        }
    }
    live_pcts_t r = {k.n, bb_pct_us(&k, 0.5), bb_pct_us(&k, 0.99), bb_pct_us(&k, 1),
                     bb_pct_us(&a, 0.99)};
    free(k.v);
    free(a.v);
    return r;
}

/* Writes every live sample to O.live_dump: a header with the phases' times, then one line per
 * sample (receive time, kernel rx latency, app latency; realtime ns), for a look at when the
 * slow ones came. */
static void live_dump(uint64_t before, uint64_t drop, uint64_t recon, uint64_t all)
{
    FILE *f = fopen(O.live_dump, "w");
    if (!f) {
        fprintf(stderr, "bridgebench: %s: %s\n", O.live_dump, strerror(errno));
        return;
    }
    fprintf(f, "# before %" PRIu64 " drop %" PRIu64 " reconnect %" PRIu64 " all %" PRIu64 "\n",
            before, drop, recon, all);
    uint64_t n = atomic_load(&K.shm->n);
    for (uint64_t i = 0; i < n; i++)
        fprintf(f, "%" PRIu64 " %" PRId64 " %" PRId64 "\n", K.shm->s[i].rx_real, K.shm->s[i].kern,
                K.shm->s[i].app);
    fclose(f);
}

/* ---- mode reconnect ------------------------------------------------------------------------- */

enum { R_SETUP, R_POSITION, R_BEFORE, R_AWAY, R_BACK };

static struct {
    pid_t child;
    uint64_t seq, pos_offset, last, t_recon, t_all;
    uint64_t real_before, real_drop, real_recon, real_all;
    int npos, ndone, nnot;
    double cpu_srv0, cpu_srv1, cpu_cli0, cpu_cli1;
    char first_err[160];
    snap_t s0, s1;
} R;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* p50, p99 and max (ms) of one per-player time, counted from another of the player's times
 * (from_off) or, with NO_FROM, from the reconnect. */
#define NO_FROM ((size_t)-1)

static void recon_times(size_t off, size_t from_off, double out[3])
{
    uint64_t *v = calloc((size_t)G.n, sizeof(*v));
    int k = 0;
    if (!v)
        bb_die("out of memory");
    for (int i = 0; i < G.n; i++) {
        const char *p = (const char *)&G.p[i];
        uint64_t t = *(const uint64_t *)(p + off);
        uint64_t from = from_off == NO_FROM ? R.t_recon : *(const uint64_t *)(p + from_off);
        if (t >= from && from >= R.t_recon)
            v[k++] = t - from;
    }
    qsort(v, (size_t)k, sizeof(v[0]), cmp_u64);
    out[0] = k ? (double)v[(k - 1) / 2] / 1e6 : -1;
    out[1] = k ? (double)v[(size_t)((k - 1) * 0.99)] / 1e6 : -1;
    out[2] = k ? (double)v[k - 1] / 1e6 : -1;
    free(v);
}

/* The end of the reconnect's window (the last player back at t, monotonic ns), and the CPU
 * times then. */
static void recon_mark_all(uint64_t t)
{
    R.t_all = t;
    R.real_all = bb_real_ns();
    R.cpu_srv1 = bench_proc_cpu_s(O.pid, NULL);
    R.cpu_cli1 = bb_self_cpu_s();
}

/* The end of a reconnect's measurement (modes reconnect and routelogin): the window closed now
 * if no last player closed it (an error), the live process stopped, the metrics after, and the
 * live traffic's latency in the quiet window (lb) and during the reconnect (ld). */
static void recon_stop(live_pcts_t *lb, live_pcts_t *ld)
{
    if (!R.t_all)
        recon_mark_all(bench_now_ns());
    if (R.child > 0) {
        atomic_store(&K.shm->stop, 1);
        waitpid(R.child, NULL, 0);
    }
    snap_take(&R.s1);
    *lb = *ld = (live_pcts_t){0};
    if (R.child <= 0)
        return;
    *lb = live_window(R.real_before, R.real_drop);
    *ld = live_window(R.real_recon, R.real_all);
    if (O.live_dump)
        live_dump(R.real_before, R.real_drop, R.real_recon, R.real_all);
}

static void recon_finish(const char *error)
{
    uint64_t dup = 0, holes = 0, skipped = 0;
    int retries = 0, done = 0;
    for (int i = 0; i < G.n; i++) {
        dup += G.p[i].tk.dup;
        holes += G.p[i].tk.holes;
        skipped += G.p[i].tk.skipped;
        retries += G.p[i].retries;
        done += G.p[i].done;
    }
    live_pcts_t lb, ld;
    recon_stop(&lb, &ld);
    if (!error && (dup || holes))
        error = "events repeated or out of order";
    double auth[3], sub[3], res[3], fin[3], span[3];
    recon_times(offsetof(player_t, t_auth), NO_FROM, auth);
    recon_times(offsetof(player_t, t_sub), NO_FROM, sub);
    recon_times(offsetof(player_t, t_result), NO_FROM, res);
    recon_times(offsetof(player_t, t_done), NO_FROM, fin);
    recon_times(offsetof(player_t, t_done), offsetof(player_t, t_sub), span);
    double all_ms = (double)(R.t_all - R.t_recon) / 1e6;
    printf("{\"label\":\"%s\",\"mode\":\"reconnect\",\"resume\":%s,\"players\":%d,\"events\":%d,"
           "\"all_ms\":%.1f,\"done\":%d,\"auth_p50_ms\":%.1f,\"auth_max_ms\":%.1f,"
           "\"sub_p50_ms\":%.1f,\"sub_max_ms\":%.1f,\"result_p50_ms\":%.1f,\"result_max_ms\":%.1f,"
           "\"done_p50_ms\":%.1f,\"done_p99_ms\":%.1f,\"done_max_ms\":%.1f,"
           "\"resume_p50_ms\":%.1f,\"resume_p99_ms\":%.1f,\"resume_max_ms\":%.1f,\"retries\":%d,"
           "\"not_recovered\":%d,\"resume_error\":\"%s\",\"dup\":%" PRIu64 ",\"holes\":%" PRIu64
           ",\"skipped\":%" PRIu64 ",\"live_subs\":%d,\"live_rate\":%.0f,\"live_lost\":%" PRIu64
           ",\"live_before_n\":%zu,\"live_before_kp50_us\":%.1f,\"live_before_kp99_us\":%.1f,"
           "\"live_before_kmax_us\":%.1f,\"live_before_p99_us\":%.1f,\"live_during_n\":%zu,"
           "\"live_during_kp50_us\":%.1f,\"live_during_kp99_us\":%.1f,"
           "\"live_during_kmax_us\":%.1f,\"live_during_p99_us\":%.1f,\"server_cpu_s\":%.2f,"
           "\"client_cpu_s\":%.2f",
           O.label, O.no_resume ? "false" : "true", G.n, O.events, all_ms, done, auth[0], auth[2],
           sub[0], sub[2], res[0], res[2], fin[0], fin[1], fin[2], span[0], span[1], span[2],
           retries, R.nnot, R.first_err, dup, holes, skipped, O.live_subs, O.live_rate,
           R.child > 0 ? (uint64_t)atomic_load(&K.shm->lost) : 0, lb.n, lb.kp50, lb.kp99, lb.kmax,
           lb.ap99, ld.n, ld.kp50, ld.kp99, ld.kmax, ld.ap99, R.cpu_srv1 - R.cpu_srv0,
           R.cpu_cli1 - R.cpu_cli0);
    print_snap_delta(&R.s0, &R.s1);
    print_end(error);
    printf("# reconnect %s: %d players x %d events: %s %.0f ms after the reconnect "
           "(AUTH max %.0f, SUB max %.0f, result max %.0f, last event p50 %.0f max %.0f ms; "
           "resume request to last event p50 %.0f max %.0f ms; %d retries); resume store "
           "reads %.0f; live p99 (kernel rx) %.2f ms before, %.2f ms "
           "during (max %.2f ms); chanqd %.2f CPU-s%s%s\n",
           O.label, G.n, O.events,
           O.no_resume ? "all subscribed again (no resume)" : "all caught up", all_ms, auth[2],
           sub[2], res[2], fin[0], fin[2], span[0], span[2], retries, R.s1.reads - R.s0.reads,
           lb.kp99 / 1e3, ld.kp99 / 1e3, ld.kmax / 1e3, R.cpu_srv1 - R.cpu_srv0,
           error ? ", ERROR: " : "", error ? error : "");
    fflush(stdout);
    exit(error ? 1 : 0);
}

/* A player has what it came back for (its events; with --no-resume, its SUB). */
static void recon_player_done(player_t *p)
{
    p->done = true;
    p->t_done = bench_now_ns();
    if (++R.ndone < G.n)
        return;
    recon_mark_all(p->t_done);
    recon_finish(NULL);
}

static void recon_event(player_t *p, const bb_event_t *ev, bb_sock_t *s)
{
    (void)s;
    if (G.phase == R_POSITION) {
        if (++R.npos == G.n)
            uv_stop(G.loop);
        return;
    }
    if (G.phase != R_BACK || O.no_resume) {
        recon_finish("an event came to a player that did not resume");
        return;
    }
    if (p->done || p->got < (uint64_t)O.events)
        return;
    if (ev->offset != R.last) {
        recon_finish("a player's last event is not the last one produced");
        return;
    }
    recon_player_done(p);
}

static void recon_sub(player_t *p)
{
    if (G.phase == R_SETUP) {
        G.inflight--;
        players_connect_more();
        if (G.nsub == G.n)
            uv_stop(G.loop);
        return;
    }
    if (O.no_resume)
        recon_player_done(p);
    else
        player_resume(p);
}

static void recon_result(player_t *p)
{
    if (p->recovered)
        return;
    if (!R.nnot++)
        snprintf(R.first_err, sizeof(R.first_err), "%s", p->err);
}

static void route_finish(const char *error);

static void on_deadline(uv_timer_t *t)
{
    (void)t;
    if (!strcmp(O.mode, "reconnect"))
        recon_finish("timed out");
    else if (!strcmp(O.mode, "routelogin"))
        route_finish("timed out");
    else if (!strcmp(O.mode, "catchup"))
        catchup_finish("timed out");
    fail("timed out");
}

/* Runs the loop until a callback stops it (a phase is over). */
static void run_phase(void)
{
    uv_run(G.loop, UV_RUN_DEFAULT);
    if (G.error)
        fail(G.error);
}

/* Waits until chanqd counts at most max open channel connections (the dropped players gone). */
static void wait_connections(double max)
{
    uint64_t t0 = bench_now_ns();
    double v;
    while ((v = bb_metric_now(&A.admin, "connection_num")) > max) {
        if (bench_now_ns() - t0 > 30000000000ull)
            bb_die("chanqd still counts %.0f connections 30 s after the drop", v);
        uv_run(G.loop, UV_RUN_NOWAIT); /* the closes */
        usleep(20000);
    }
}

/* Waits until the live channel's process publishes (its subscribers are in). */
static void live_wait_ready(void)
{
    while (R.child > 0 && !atomic_load(&K.shm->ready)) {
        if (waitpid(R.child, NULL, WNOHANG) == R.child)
            bb_die("the live channel's process ended");
        usleep(10000);
    }
}

/* The quiet window before the reconnect (live traffic only): O.before s from R.real_before to
 * R.real_drop, after half a second for the work just done to settle (reconnect: the position
 * event's fan-out to every player holds GLOBAL's worker for tens of ms with 10,000 of them;
 * routelogin: the store's work after the produces). */
static void recon_quiet(void)
{
    uv_timer_start(&G.timer, stop_loop, 500, 0);
    run_phase();
    R.real_before = bb_real_ns();
    uv_timer_start(&G.timer, stop_loop, (uint64_t)(O.before * 1e3), 0);
    run_phase();
    R.real_drop = bb_real_ns();
}

/* Every player connects at once: the measured window starts (metrics, CPU, times before). */
static void recon_back(void)
{
    snap_take(&R.s0);
    G.phase = R_BACK;
    R.cpu_srv0 = bench_proc_cpu_s(O.pid, NULL);
    R.cpu_cli0 = bb_self_cpu_s();
    R.t_recon = bench_now_ns();
    R.real_recon = bb_real_ns();
    for (int i = 0; i < G.n; i++)
        player_connect(&G.p[i]); /* all at once */
    run_phase();
}

static void run_reconnect(void)
{
    if (O.events < 1 || O.players < 1)
        bb_die("--events and --players must be at least 1");
    topic_create();
    players_new(O.players);
    G.on_sub = recon_sub;
    G.on_event = recon_event;
    G.on_result = recon_result;
    G.phase = R_SETUP;
    players_connect_more();
    run_phase();
    G.phase = R_POSITION;
    R.pos_offset = publish(&R.seq, 1);
    run_phase();
    live_wait_ready();
    G.phase = R_BEFORE;
    recon_quiet();
    G.phase = R_AWAY;
    for (int i = 0; i < G.n; i++) {
        bb_conn_close(&G.p[i].c);
        G.p[i].got = 0;
        G.p[i].subscribed = false;
    }
    wait_connections(O.live_subs > 0 ? O.live_subs + 1 : 0);
    double before = bb_metric_now(&A.admin, "chanq_bridge_events_total");
    R.last = publish(&R.seq, O.events);
    bridge_wait_events(before + O.events);
    recon_back();
}

/* ---- mode routelogin ------------------------------------------------------------------------ */

/* Player i's event n is the one of sequence number n * players + i: the players' events are
 * interleaved, so one player's are scattered through the topic, one every `players` offsets,
 * as a game's top-ups would be. */
static struct {
    uint64_t *offs; /* each sequence number's offset, from the produce answers */
    uint64_t bad, foreign, dup, order, bad_offset;
    int nfirst; /* --login-first: players logged in */
    double produce_s;
    uv_timer_t settle;
    char first_err[160];
} RL;

/* Event seq's content: {"user_id":"p<i>","n":<n>}, JSON for the route binding on user_id. */
static size_t route_content(char *buf, size_t cap, uint64_t seq)
{
    int n = snprintf(buf, cap, "{\"user_id\":\"p%d\",\"n\":%d}", (int)(seq % (uint64_t)O.players),
                     (int)(seq / (uint64_t)O.players));
    if (n < 0 || (size_t)n >= cap)
        bb_die("routelogin: content longer than %zu bytes", cap);
    return (size_t)n;
}

/* Reads route_content's content back, exactly (nothing before or after); false otherwise. */
static bool route_content_read(const bb_event_t *ev, int *who, int *n)
{
    char s[64];
    int end = -1;
    if (ev->content_len >= sizeof(s))
        return false;
    memcpy(s, ev->content, ev->content_len);
    s[ev->content_len] = '\0';
    return sscanf(s, "{\"user_id\":\"p%d\",\"n\":%d}%n", who, n, &end) == 2 &&
           end == (int)ev->content_len && *who >= 0 && *who < O.players && *n >= 0 && *n < O.events;
}

static void route_finish(const char *error);

static void route_end(uv_timer_t *t)
{
    (void)t;
    route_finish(RL.first_err[0] ? RL.first_err : NULL);
}

/* A deviation, counted; the first one is the run's error, and the run ends a second after it
 * (what else comes meanwhile is counted too) rather than at the deadline. */
static void route_error(uint64_t *count, const player_t *p, const char *what, int who, int n)
{
    (*count)++;
    if (RL.first_err[0])
        return;
    snprintf(RL.first_err, sizeof(RL.first_err),
             "player p%d: %s (content p%d n %d, after %" PRIu64 " of its events)", p->idx, what,
             who, n, p->got);
    uv_timer_start(&G.timer, route_end, 1000, 0);
}

/* Every player has its events: once chanqd has no catch-up open (no chunk left to come), a
 * drain of 300 ms, so that an event that would come after them is counted. */
static void route_settle(uv_timer_t *t)
{
    double open = bb_metric_now(&A.admin, "chanq_bridge_route_sessions");
    if (open == 0) {
        uv_timer_stop(t);
        uv_timer_start(t, route_end, 300, 0);
    } else if (bench_now_ns() - R.t_all > 10000000000ull) {
        route_finish("catch-ups still open 10 s after every player had its events");
    }
}

static void route_player_done(player_t *p)
{
    if (p->done)
        return;
    p->done = true;
    p->t_done = bench_now_ns();
    if (++R.ndone < G.n)
        return;
    recon_mark_all(p->t_done);
    uv_timer_start(&RL.settle, route_settle, 0, 50);
}

/* One routed event: it must be the player's own next one (n == what it has), at the offset its
 * produce returned; anything else is a deviation of its kind. */
static void route_msg(bb_conn_t *c, const chanq_msg_t *m)
{
    player_t *p = c->ud;
    bb_event_t ev;
    int who = -1, n = -1;
    if (m->channel_id != 0 || m->msg_type != O.msg_type)
        return;
    if (!bb_event_parse(m->body, m->body_len, &ev) || !route_content_read(&ev, &who, &n))
        route_error(&RL.bad, p, "an event that is not one of the run's", who, n);
    else if (who != p->idx)
        route_error(&RL.foreign, p, "another player's event", who, n);
    else if ((uint64_t)n < p->got)
        route_error(&RL.dup, p, "an event again", who, n);
    else if ((uint64_t)n > p->got)
        route_error(&RL.order, p, "an event before an earlier one", who, n);
    else if (ev.offset != RL.offs[(size_t)n * (size_t)G.n + (size_t)p->idx])
        route_error(&RL.bad_offset, p, "its event at another offset than produced", who, n);
    else if (++p->got == (uint64_t)O.events)
        route_player_done(p);
}

/* The login: its catch-up starts at chanqd with nothing sent. A login after a lost connection
 * gets everything again (nothing was acknowledged). The login is this mode's SUB: a player
 * lost once done is not reconnected (player_lost). */
static void route_authed(bb_conn_t *c)
{
    player_t *p = c->ud;
    p->t_auth = bench_now_ns();
    p->got = 0;
    p->subscribed = true;
    if (G.phase != R_SETUP)
        return;
    G.inflight--; /* --login-first */
    players_connect_more();
    if (++RL.nfirst == G.n)
        uv_stop(G.loop);
}

/* Waits until chanqd has no login catch-up open (its offset reads done, its FINALs made). */
static void route_wait_sessions(void)
{
    uint64_t t0 = bench_now_ns();
    double v;
    while ((v = bb_metric_now(&A.admin, "chanq_bridge_route_sessions")) != 0) {
        if (bench_now_ns() - t0 > 30000000000ull)
            bb_die("chanqd still has %.0f login catch-ups open after 30 s", v);
        uv_run(G.loop, UV_RUN_NOWAIT);
        usleep(20000);
    }
}

/* --login-first: every player logs in once while nothing is pending, then leaves, so that
 * chanqd has their offsets cached ("none acknowledged"), as for players seen since its start:
 * the logins of the run then read no offset. */
static void route_login_first(void)
{
    G.phase = R_SETUP;
    players_connect_more();
    run_phase();
    route_wait_sessions();
    for (int i = 0; i < G.n; i++) {
        bb_conn_close(&G.p[i].c);
        G.p[i].subscribed = false;
        G.p[i].t_auth = 0;
    }
    wait_connections(O.live_subs > 0 ? O.live_subs + 1 : 0);
}

static void route_finish(const char *error)
{
    uint64_t missing = 0;
    int retries = 0;
    for (int i = 0; i < G.n; i++) {
        missing += G.p[i].got < (uint64_t)O.events ? (uint64_t)O.events - G.p[i].got : 0;
        retries += G.p[i].retries;
    }
    live_pcts_t lb, ld;
    recon_stop(&lb, &ld);
    if (!error && missing)
        error = "events missing";
    double auth[3], fin[3], span[3];
    recon_times(offsetof(player_t, t_auth), NO_FROM, auth);
    recon_times(offsetof(player_t, t_done), NO_FROM, fin);
    recon_times(offsetof(player_t, t_done), offsetof(player_t, t_auth), span);
    double all_ms = (double)(R.t_all - R.t_recon) / 1e6;
    const route_snap_t *a = &R.s0.rt, *b = &R.s1.rt;
    printf("{\"label\":\"%s\",\"mode\":\"routelogin\",\"login_first\":%s,\"players\":%d,"
           "\"events\":%d,"
           "\"produce_s\":%.2f,\"all_ms\":%.1f,\"done\":%d,\"auth_p50_ms\":%.1f,"
           "\"auth_max_ms\":%.1f,\"done_p50_ms\":%.1f,\"done_p99_ms\":%.1f,\"done_max_ms\":%.1f,"
           "\"login_p50_ms\":%.1f,\"login_p99_ms\":%.1f,\"login_max_ms\":%.1f,\"retries\":%d,"
           "\"missing\":%" PRIu64 ",\"dup\":%" PRIu64 ",\"order\":%" PRIu64 ",\"foreign\":%" PRIu64
           ",\"bad_offset\":%" PRIu64 ",\"bad\":%" PRIu64
           ",\"live_subs\":%d,\"live_rate\":%.0f,\"live_lost\":%" PRIu64
           ",\"live_before_n\":%zu,\"live_before_kp50_us\":%.1f,\"live_before_kp99_us\":%.1f,"
           "\"live_before_kmax_us\":%.1f,\"live_before_p99_us\":%.1f,\"live_during_n\":%zu,"
           "\"live_during_kp50_us\":%.1f,\"live_during_kp99_us\":%.1f,"
           "\"live_during_kmax_us\":%.1f,\"live_during_p99_us\":%.1f,\"server_cpu_s\":%.2f,"
           "\"client_cpu_s\":%.2f",
           O.label, O.login_first ? "true" : "false", G.n, O.events, RL.produce_s, all_ms, R.ndone,
           auth[0], auth[2], fin[0], fin[1], fin[2], span[0], span[1], span[2], retries, missing,
           RL.dup, RL.order, RL.foreign, RL.bad_offset, RL.bad, O.live_subs, O.live_rate,
           R.child > 0 ? (uint64_t)atomic_load(&K.shm->lost) : 0, lb.n, lb.kp50, lb.kp99, lb.kmax,
           lb.ap99, ld.n, ld.kp50, ld.kp99, ld.kmax, ld.ap99, R.cpu_srv1 - R.cpu_srv0,
           R.cpu_cli1 - R.cpu_cli0);
    print_route_delta(a, b);
    print_end(error);
    printf("# routelogin %s: %d players x %d events: %s %.0f ms after the reconnect (AUTH max "
           "%.0f ms; last event p50 %.0f p99 %.0f max %.0f ms; %d retries); logins %.0f, store "
           "reads %.0f (+%.0f shared) for %.0f rows, events from the ring %.0f, the store %.0f, "
           "offset reads %.0f; live p99 (kernel rx) %.2f ms before, %.2f ms during (max %.2f "
           "ms); chanqd %.2f CPU-s%s%s\n",
           O.label, G.n, O.events, error ? "NOT all caught up" : "all caught up", all_ms, auth[2],
           fin[0], fin[1], fin[2], retries, b->started - a->started, b->reads - a->reads,
           b->shared - a->shared, b->rows - a->rows, b->ring - a->ring, b->store - a->store,
           b->off_reads - a->off_reads, lb.kp99 / 1e3, ld.kp99 / 1e3, ld.kmax / 1e3,
           R.cpu_srv1 - R.cpu_srv0, error ? ", ERROR: " : "", error ? error : "");
    fflush(stdout);
    exit(error ? 1 : 0);
}

/* The players never connected before (their offsets are cold: each login reads its offset from
 * the store, and finds none); their events are produced while they are away, then all log in
 * at once. */
static void run_routelogin(void)
{
    if (O.events < 1 || O.players < 1 || (int64_t)O.players * O.events > 100000000)
        bb_die("--events and --players must be at least 1 (and their product at most 1e8)");
    size_t total = (size_t)O.players * (size_t)O.events;
    topic_create();
    players_new(O.players);
    RL.offs = calloc(total, sizeof(*RL.offs));
    if (!RL.offs)
        bb_die("out of memory");
    G.on_authed = route_authed;
    G.on_msg = route_msg;
    uv_timer_init(G.loop, &RL.settle);
    live_wait_ready();
    if (O.login_first)
        route_login_first();
    G.phase = R_AWAY;
    double before = bb_metric_now(&A.admin, "chanq_bridge_events_total");
    uint64_t seq = 0, t0 = bench_now_ns();
    produce_n(&seq, (int)total, 64, route_content, RL.offs);
    RL.produce_s = (double)(bench_now_ns() - t0) / 1e9;
    bridge_wait_events(before + (double)total);
    recon_quiet();
    recon_back();
}

/* ---- main ----------------------------------------------------------------------------------- */

static void fail(const char *why)
{
    G.error = why;
    if (!strcmp(O.mode, "live"))
        live_finish();
    else if (!strcmp(O.mode, "catchup"))
        catchup_finish(why);
    else if (!strcmp(O.mode, "reconnect"))
        recon_finish(why);
    else if (!strcmp(O.mode, "routelogin"))
        route_finish(why);
    bb_die("%s", why);
}

static void usage(FILE *f)
{
    fputs("Usage: bridgebench live|catchup|reconnect|routelogin --ready-file PATH [options]\n"
          "  --ready-file PATH  chanqd's ready file (client, server, admin, mq addresses)\n"
          "  --mq-ready-file P  produce to this chanqd's mq address instead (a shard the first\n"
          "                     one follows: --bridge-follow)\n"
          "  --topic NAME       the topic bound to GLOBAL (default bench)\n"
          "  --msg-type N       its binding's msg_type (default 200)\n"
          "  --size B           event content bytes, >= 48 (default 64)\n"
          "  --pid PID          chanqd's pid, for its CPU time\n"
          "  --label TEXT       copied to the output\n"
          "  --timeout S        the whole run's (default 120)\n"
          " live:      --subs N (100) --rate R (2000/s) --duration S (5) --warmup S (1)\n"
          "            --drain S (10)\n"
          " catchup:   --events N (produced while away) --batch N (500 per produce)\n"
          " reconnect: --players M (10000) --events R --before S (3) --live-subs K (8)\n"
          "            --live-rate R (100/s) --conc N (200 setup handshakes at a time)\n"
          "            --no-resume (the control: players come back and SUB, no resume)\n"
          "            --live-dump FILE (every live sample, for a look at when)\n"
          " routelogin: --topic, --msg-type of a route binding on user_id (e.g. vip, 201)\n"
          "            --players M (10000) --events R per player --before S --live-subs K\n"
          "            --live-rate R --batch N (500 per produce) --conc N\n"
          "            --login-first (each player logs in once before: its offset cached)\n",
          f);
}

static void parse_args(int argc, char **argv)
{
    static const struct option opts[] = {
        {"ready-file", required_argument, NULL, 'f'},
        {"mq-ready-file", required_argument, NULL, 'Q'},
        {"topic", required_argument, NULL, 't'},
        {"msg-type", required_argument, NULL, 'm'},
        {"size", required_argument, NULL, 'z'},
        {"pid", required_argument, NULL, 'P'},
        {"label", required_argument, NULL, 'l'},
        {"timeout", required_argument, NULL, 'T'},
        {"subs", required_argument, NULL, 's'},
        {"rate", required_argument, NULL, 'r'},
        {"duration", required_argument, NULL, 'd'},
        {"warmup", required_argument, NULL, 'w'},
        {"drain", required_argument, NULL, 'D'},
        {"events", required_argument, NULL, 'e'},
        {"batch", required_argument, NULL, 'b'},
        {"players", required_argument, NULL, 'p'},
        {"before", required_argument, NULL, 'B'},
        {"live-subs", required_argument, NULL, 'k'},
        {"live-rate", required_argument, NULL, 'R'},
        {"conc", required_argument, NULL, 'c'},
        {"no-resume", no_argument, NULL, 'N'},
        {"live-dump", required_argument, NULL, 'F'},
        {"login-first", no_argument, NULL, 'L'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'f':
            O.ready = optarg;
            break;
        case 'Q':
            O.mq_ready = optarg;
            break;
        case 't':
            O.topic = optarg;
            break;
        case 'm':
            O.msg_type = (uint32_t)atoi(optarg);
            break;
        case 'z':
            O.size = (size_t)atol(optarg);
            break;
        case 'P':
            O.pid = atoi(optarg);
            break;
        case 'l':
            O.label = optarg;
            break;
        case 'T':
            O.timeout = atof(optarg);
            break;
        case 's':
            O.subs = atoi(optarg);
            break;
        case 'r':
            O.rate = atof(optarg);
            break;
        case 'd':
            O.duration = atof(optarg);
            break;
        case 'w':
            O.warmup = atof(optarg);
            break;
        case 'D':
            O.drain = atof(optarg);
            break;
        case 'e':
            O.events = atoi(optarg);
            break;
        case 'b':
            O.batch = atoi(optarg);
            break;
        case 'p':
            O.players = atoi(optarg);
            break;
        case 'B':
            O.before = atof(optarg);
            break;
        case 'k':
            O.live_subs = atoi(optarg);
            break;
        case 'R':
            O.live_rate = atof(optarg);
            break;
        case 'c':
            O.conc = atoi(optarg);
            break;
        case 'N':
            O.no_resume = true;
            break;
        case 'F':
            O.live_dump = optarg;
            break;
        case 'L':
            O.login_first = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            exit(2);
        }
    }
    if (optind != argc - 1 || !O.ready) {
        usage(stderr);
        exit(2);
    }
    O.mode = argv[optind];
    if (O.size < 48 || O.batch < 1 || O.conc < 1 || O.subs < 1 || O.live_subs < 0 ||
        O.live_rate <= 0 || O.timeout <= 0 || O.msg_type < 100)
        bb_die("bad numeric option");
}

int main(int argc, char **argv)
{
    char a[64];
    parse_args(argc, argv);
    bb_ready_field(O.ready, "client", a, sizeof(a));
    bb_parse_addr(a, &A.client);
    bb_ready_field(O.ready, "server", a, sizeof(a));
    bb_parse_addr(a, &A.server);
    bb_ready_field(O.ready, "admin", a, sizeof(a));
    bb_parse_addr(a, &A.admin);
    bb_ready_field(O.mq_ready ? O.mq_ready : O.ready, "mq", A.mq_addr, sizeof(A.mq_addr));
    bb_parse_addr(A.mq_addr, &A.mq);
    signal(SIGPIPE, SIG_IGN);
    G.t_begin = bench_now_ns();
    bool recon = !strcmp(O.mode, "reconnect") || !strcmp(O.mode, "routelogin");
    if (recon && O.live_subs > 0)
        R.child = live_start(); /* before this process's loop exists */
    if (!strcmp(O.mode, "live") || !strcmp(O.mode, "catchup") || recon) {
        G.loop = uv_default_loop();
        uv_timer_init(G.loop, &G.timer);
        uv_timer_init(G.loop, &G.tick);
        uv_timer_start(&G.tick, on_deadline, (uint64_t)(O.timeout * 1e3), 0);
        uv_unref((uv_handle_t *)&G.tick); /* the deadline keeps no phase's loop alive */
    } else {
        usage(stderr);
        exit(2);
    }
    if (!strcmp(O.mode, "live"))
        run_live();
    else if (!strcmp(O.mode, "catchup"))
        run_catchup();
    else if (!strcmp(O.mode, "routelogin"))
        run_routelogin();
    else
        run_reconnect();
    uv_run(G.loop, UV_RUN_DEFAULT);
    fail("the event loop ended early");
    return 1;
}
