/* fuzz_core - the core dispatch (src/core) driven by packet sequences, like mosquitto's
 * per-handler harness.
 *
 * Each input runs against a fresh core: a cq_shared_t with 2 workers whose inboxes are drained
 * by hand on this thread (no io), the shipped FSMs and channel settings, the test descriptor
 * sets as the channel-data schema, a manual clock, and fake transports. Six connection slots
 * start as: 0 SERVER authed, 1 SERVER authed, 2 CLIENT authed, 3 CLIENT authed (legacy
 * framing), 4 CLIENT not authed, 5 SERVER not authed.
 *
 * Input: one option byte, then operations. Options: bit 0 server-conn-recoverable, bit 1 a
 * 4 KiB send-queue hard limit (slow consumers), bit 2 a permissive client FSM (every type
 * allowed), bit 3 auth and idle timeouts, bit 4 at most 2 subscriptions per connection, bit 5
 * no schema (every data type unknown), bit 6 a spatial controller (the 4x1 layout with a
 * Handover section for chanqworld's types, and --dev for DEBUG_GET_SPATIAL_REGIONS). An operation
 * is one byte: bits 0-2 pick the slot (mod 6), bits 3-5 the action, bits 6-7 are flags: 0-3 packet:
 * a 2-byte little-endian length n, then n bytes of Packet body, framed by the harness; flag 6 feeds
 * it in two reads, flag 7 compresses it with Snappy; 4    raw: a 1-byte length n, then n bytes fed
 * as they are (headers, partial packets); 5    clock: advance by (next byte) * 20 ms, then tick and
 * run the due channel fan-outs; 6    the connection goes away: lost (flag 6) or closed; 7    a new
 * connection in the slot if it is free: SERVER (flag 6) or CLIENT, authed with PIT "p<slot>" if
 * flag 7. After each operation the inboxes are drained until quiet and output is flushed.
 *
 * CHANQ_FUZZ_LOG=1 prints the core's log lines and every message each connection receives, to
 * check what a seed does.
 *
 * Checked: the server only ever writes well-formed packets (framing, Snappy, Packet envelope)
 * on each connection's framing; inboxes go quiet (no message ping-pong); nothing leaks
 * (cq_buf_live() is 0 after teardown, and ASan's leak check). */
#include "fuzz_common.h"

#include "channeld.pb-c.h"
#include "core.h"
#include "msgtab.h"
#include "world.h"
#include "cq_embedded.h"
#include "cq_err.h"
#include "cq_framing.h"
#include "cq_log.h"
#include "cq_sbuf.h"
#include "cq_schema.h"
#include "cq_sendq.h"
#include "cq_settings.h"
#include "cq_snappy.h"
#include "cq_wire.h"

#include <string.h>

#ifndef FUZZ_CORE_FDS
#define FUZZ_CORE_FDS "chanqtest.fds"
#endif
#ifndef FUZZ_CORE_FDS2
#define FUZZ_CORE_FDS2 "testpb.fds"
#endif
#ifndef FUZZ_CORE_FDS3
#define FUZZ_CORE_FDS3 "world.fds"
#endif

/* 4x1 (channeld's layout) with chanq's Handover section for proto/world.proto. */
static const char spatial_json[] =
    "{\"SpatialControllerType\": \"Static2DSpatialController\", \"Config\": {"
    "\"WorldOffsetX\": -2000, \"WorldOffsetZ\": -500, \"GridWidth\": 1000, "
    "\"GridHeight\": 1000, \"GridCols\": 4, \"GridRows\": 1, \"ServerCols\": 2, "
    "\"ServerRows\": 1, \"ServerInterestBorderSize\": 1}, \"Handover\": {"
    "\"PositionPath\": \"transform.position\", \"Axes\": \"xyz\", "
    "\"EntitiesField\": \"entities\", \"EntityDataField\": \"entityData\"}}";

#define NSLOT      6
#define NWORKER    2
#define MAX_PACKET 8192u
#define MAX_ROUNDS 1000

static const char permissive_fsm[] =
    "{\"States\": [{\"Name\": \"INIT\", \"MsgTypeWhitelist\": \"1\"},"
    " {\"Name\": \"OPEN\", \"MsgTypeWhitelist\": \"1-65535\"}]}";

/* ---- loaded once: immutable, shared by every input ---------------------------------------- */

static struct {
    cq_fsm_t *client, *permissive, *server;
    cq_settings_t *settings;
    cq_schema_t *schema;
    cq_spatial_cfg_t spatial;
    bool verbose; /* CHANQ_FUZZ_LOG: print log lines and what each connection receives */
} G;

static void discard(void *ud, cq_log_level_t lvl, const char *topic, const char *line)
{
    (void)ud;
    (void)lvl;
    (void)topic;
    (void)line;
}

static void load_once(void)
{
    if (G.settings)
        return;
    char err[256] = "";
    const char *p1 = getenv("CHANQ_FUZZ_FDS"), *p2 = getenv("CHANQ_FUZZ_FDS2");
    const char *p3 = getenv("CHANQ_FUZZ_FDS3");
    FUZZ_CHECK(cq_fsm_load_json(cq_embedded_client_fsm, cq_embedded_client_fsm_len, &G.client, err,
                                sizeof(err)) == 0);
    FUZZ_CHECK(cq_fsm_load_json(permissive_fsm, strlen(permissive_fsm), &G.permissive, err,
                                sizeof(err)) == 0);
    FUZZ_CHECK(cq_fsm_load_json(cq_embedded_server_fsm, cq_embedded_server_fsm_len, &G.server, err,
                                sizeof(err)) == 0);
    FUZZ_CHECK(cq_schema_new(&G.schema) == 0);
    if (cq_schema_load_file(G.schema, p1 ? p1 : FUZZ_CORE_FDS, err, sizeof(err)) < 0 ||
        cq_schema_load_file(G.schema, p2 ? p2 : FUZZ_CORE_FDS2, err, sizeof(err)) < 0 ||
        cq_schema_load_file(G.schema, p3 ? p3 : FUZZ_CORE_FDS3, err, sizeof(err)) < 0) {
        fprintf(stderr, "fuzz_core: %s\n", err);
        abort();
    }
    FUZZ_CHECK(cq_settings_load_json(cq_embedded_settings, cq_embedded_settings_len, &G.settings,
                                     err, sizeof(err)) == 0);
    FUZZ_CHECK(cq_spatial_cfg_parse(spatial_json, strlen(spatial_json), &G.spatial, err,
                                    sizeof(err)) == 0);
    G.spatial.chan_start = CQ_CHAN_ID_SPATIAL_START;
    G.spatial.entity_start = CQ_CHAN_ID_ENTITY_START;
    /* Log lines are formatted (so their arguments are exercised) and thrown away, unless
     * CHANQ_FUZZ_LOG is set (to see what a seed does). */
    cq_log_set_level(CQ_LOG_DEBUG);
    G.verbose = getenv("CHANQ_FUZZ_LOG") != NULL;
    if (!G.verbose)
        cq_log_set_sink(discard, NULL);
}

/* ---- one input's world ------------------------------------------------------------------ */

typedef struct slot {
    cq_conn_t *conn;
    int worker;
    int closed;
    cq_framing_mode_t mode;
    cq_sbuf_t out; /* written bytes not yet checked (a partial packet) */
} slot_t;

static struct {
    cq_shared_t *sh;
    cq_core_t *cores[NWORKER];
    int woken[NWORKER];
    slot_t slots[NSLOT];
    uint64_t now;
} W;

static void wake(void *ud, int w)
{
    (void)ud;
    W.woken[w] = 1;
}

static const cq_core_ops_t core_ops = {wake};

static void print_packet(const slot_t *s, const uint8_t *body, size_t len)
{
    cq_packet_iter_t it;
    cq_mp_t mp;
    cq_wire_packet_iter_init(&it, body, len);
    while (cq_wire_packet_next(&it, &mp) == 1)
        fprintf(stderr, "  slot %d <- msgType %u channel %u stub %u, %u body bytes\n",
                (int)(s - W.slots), mp.msg_type, mp.channel_id, mp.stub_id, mp.body_len);
}

/* Every complete packet the server wrote must parse as a Packet. */
static void check_output(slot_t *s)
{
    size_t off = 0;
    static uint8_t plain[CQ_FRAME_MAX_BODY];
    while (off < s->out.len) {
        cq_frame_t f;
        ssize_t k =
            cq_framing_parse(s->out.data + off, s->out.len - off, s->mode, CQ_FRAME_MAX_BODY, &f);
        FUZZ_CHECK(k >= 0);
        if (k == 0)
            break;
        const uint8_t *body = f.body;
        size_t len = f.len;
        if (f.ct == CQ_CT_SNAPPY) {
            FUZZ_CHECK(cq_snappy_uncompress(f.body, f.len, plain, sizeof(plain), &len) == 0);
            body = plain;
        }
        FUZZ_CHECK(cq_wire_packet_validate(body, len) >= 1);
        if (G.verbose)
            print_packet(s, body, len);
        off += (size_t)k;
    }
    cq_sbuf_consume(&s->out, off);
}

static void fake_flush(void *tctx)
{
    slot_t *s = tctx;
    cq_sendq_t *q = cq_conn_sendq(s->conn);
    for (;;) {
        const struct iovec *iov;
        int n;
        FUZZ_CHECK(cq_sendq_prepare(q, &iov, &n) == 0);
        if (!n)
            break;
        size_t tot = 0;
        for (int i = 0; i < n; i++) {
            FUZZ_CHECK(cq_sbuf_append(&s->out, iov[i].iov_base, iov[i].iov_len) == 0);
            tot += iov[i].iov_len;
        }
        FUZZ_CHECK(cq_sendq_written(q, tot));
    }
    check_output(s);
}

static void fake_close(void *tctx)
{
    ((slot_t *)tctx)->closed = 1;
}

static int fake_peer(void *tctx, char *buf, size_t len)
{
    snprintf(buf, len, "fuzz:%d", (int)((slot_t *)tctx - W.slots));
    return 0;
}

static const cq_transport_ops_t fake_ops = {"fuzz", fake_flush, fake_close, fake_peer};

/* Drains the woken inboxes until nothing moves, flushes, and releases closed connections. */
static void pump(void)
{
    int rounds = 0;
    for (bool busy = true; busy; rounds++) {
        FUZZ_CHECK(rounds < MAX_ROUNDS);
        busy = false;
        for (int w = 0; w < NWORKER; w++) {
            if (!W.woken[w])
                continue;
            W.woken[w] = 0;
            busy = true;
            cq_core_drain(W.cores[w], W.now);
        }
    }
    for (int w = 0; w < NWORKER; w++)
        cq_core_flush(W.cores[w]);
    for (int i = 0; i < NSLOT; i++) {
        slot_t *s = &W.slots[i];
        if (s->conn && s->closed) {
            cq_core_conn_release(W.cores[s->worker], s->conn);
            s->conn = NULL;
        }
    }
}

static void feed(slot_t *s, const uint8_t *p, size_t n)
{
    if (s->conn && !s->closed)
        cq_core_conn_input(W.cores[s->worker], s->conn, p, n, W.now);
}

/* Frames body as one packet on the slot's framing (Snappy-compressed when asked) and feeds it,
 * in one or two reads. An empty body gets the zero-length header the server refuses. */
static void feed_packet(slot_t *s, const uint8_t *body, size_t n, bool split, bool snappy)
{
    static uint8_t pkt[CQ_FRAME_HDR_LEN + 2 * MAX_PACKET];
    size_t len = n;
    uint8_t ct = CQ_CT_NONE;
    if (snappy && n && cq_snappy_max_compressed(n) <= sizeof(pkt) - CQ_FRAME_HDR_LEN &&
        cq_snappy_compress(body, n, pkt + CQ_FRAME_HDR_LEN, &len) == 0) {
        ct = CQ_CT_SNAPPY;
    } else {
        len = n;
        if (n)
            memcpy(pkt + CQ_FRAME_HDR_LEN, body, n);
    }
    if (len)
        cq_framing_header(pkt, (uint32_t)len, ct, s->mode);
    else
        memcpy(pkt, "CH\0\0\0", CQ_FRAME_HDR_LEN);
    size_t total = CQ_FRAME_HDR_LEN + len, half = split ? total / 2 : total;
    feed(s, pkt, half);
    if (half < total)
        feed(s, pkt + half, total - half);
}

static void connect_slot(int i, int type, bool authed)
{
    slot_t *s = &W.slots[i];
    uint32_t id = cq_shared_conn_id_alloc(W.sh, type);
    if (!id)
        return;
    s->worker = cq_shared_conn_worker(W.sh, id);
    s->closed = 0;
    s->out.len = 0;
    s->conn = cq_core_conn_new(W.cores[s->worker], id, type, s->mode, &fake_ops, s, W.now);
    FUZZ_CHECK(s->conn != NULL);
    if (!authed)
        return;
    Channeldpb__AuthMessage a = CHANNELDPB__AUTH_MESSAGE__INIT;
    char pit[8];
    snprintf(pit, sizeof(pit), "p%d", i);
    a.playeridentifiertoken = pit;
    a.logintoken = "lt";
    cq_buf_t *rec = cq_wire_record_msg(0, 0, 0, MT_AUTH, &a.base);
    FUZZ_CHECK(rec != NULL);
    feed_packet(s, rec->data, rec->len, false, false);
    cq_buf_unref(rec);
    pump();
}

static void world_up(uint8_t opt)
{
    memset(&W, 0, sizeof(W));
    cq_core_opts_t o = {0};
    o.workers = NWORKER;
    o.client_fsm = (opt & 4) ? G.permissive : G.client;
    o.server_fsm = G.server;
    o.settings = G.settings;
    o.server_bypass_auth = true;
    o.server_recoverable = (opt & 1) != 0;
    o.server_recover_timeout_ms = 3000;
    o.max_packet_size = 65535;
    o.max_connections = 64;
    o.max_channels = 64;
    o.max_subs_per_conn = (opt & 16) ? 2 : 0;
    o.max_subs_per_server = (opt & 16) ? 3 : 0;
    o.conn_id_bits = 31;
    o.sendq_hard_limit = (opt & 2) ? 4096 : 1u << 20;
    o.sendq_soft_limit = (opt & 2) ? 2048 : 0;
    o.sendq_soft_seconds = 1;
    o.auth_timeout_ms = (opt & 8) ? 2000 : 0;
    o.idle_timeout_ms = (opt & 8) ? 5000 : 0;
    o.max_failed_auth = 3;
    o.schema = (opt & 32) ? NULL : G.schema;
    o.max_channel_data = 16384;
    o.spatial = (opt & 64) ? &G.spatial : NULL;
    o.dev = (opt & 64) != 0;
    o.entity_chan_start = CQ_CHAN_ID_ENTITY_START;
    char err[256];
    FUZZ_CHECK(cq_shared_new(&o, &core_ops, NULL, &W.sh, err, sizeof(err)) == 0);
    for (int w = 0; w < NWORKER; w++)
        FUZZ_CHECK((W.cores[w] = cq_core_new(W.sh, w)) != NULL);
    W.now = 1000;
    for (int i = 0; i < NSLOT; i++)
        cq_sbuf_init(&W.slots[i].out);
    W.slots[3].mode = CQ_FRAMING_LEGACY;
    static const int type[NSLOT] = {CQ_CONN_SERVER, CQ_CONN_SERVER, CQ_CONN_CLIENT,
                                    CQ_CONN_CLIENT, CQ_CONN_CLIENT, CQ_CONN_SERVER};
    for (int i = 0; i < NSLOT; i++)
        connect_slot(i, type[i], i < 4);
}

static void world_down(void)
{
    for (int i = 0; i < NSLOT; i++) {
        slot_t *s = &W.slots[i];
        if (s->conn)
            cq_core_conn_close(W.cores[s->worker], s->conn, 0, "fuzz end");
    }
    pump();
    for (int w = 0; w < NWORKER; w++)
        cq_core_free(W.cores[w]);
    for (int i = 0; i < NSLOT; i++)
        cq_sbuf_done(&W.slots[i].out);
    cq_shared_free(W.sh);
    FUZZ_CHECK(cq_buf_live() == 0);
}

/* ---- operations ------------------------------------------------------------------------- */

static void advance(uint64_t ms)
{
    W.now += ms;
    for (int w = 0; w < NWORKER; w++) {
        cq_core_tick(W.cores[w], W.now);
        if (cq_core_next_due(W.cores[w]) <= W.now)
            cq_core_run_due(W.cores[w], W.now);
    }
}

/* The input as it is consumed; reads past the end give zeros and empty slices. */
typedef struct rd {
    const uint8_t *p, *end;
} rd_t;

static uint8_t rd_u8(rd_t *r)
{
    return r->p < r->end ? *r->p++ : 0;
}

static size_t rd_bytes(rd_t *r, size_t n, const uint8_t **ret)
{
    size_t left = (size_t)(r->end - r->p);
    n = n < left ? n : left;
    *ret = r->p;
    r->p += n;
    return n;
}

static void op_packet(rd_t *r, slot_t *s, bool split, bool snappy)
{
    size_t n = rd_u8(r);
    n |= (size_t)rd_u8(r) << 8;
    const uint8_t *body;
    n = rd_bytes(r, n < MAX_PACKET ? n : MAX_PACKET, &body);
    feed_packet(s, body, n, split, snappy);
}

static void op_raw(rd_t *r, slot_t *s)
{
    const uint8_t *p;
    size_t n = rd_bytes(r, rd_u8(r), &p);
    feed(s, p, n);
}

static void op_gone(slot_t *s, bool lost)
{
    if (!s->conn || s->closed)
        return;
    if (lost)
        cq_core_conn_lost(W.cores[s->worker], s->conn, 0, "fuzz: peer gone");
    else
        cq_core_conn_close(W.cores[s->worker], s->conn, 0, "fuzz: closed");
}

static void run_op(rd_t *r)
{
    uint8_t op = rd_u8(r);
    int i = (op & 7) % NSLOT;
    slot_t *s = &W.slots[i];
    bool f6 = (op & 0x40) != 0, f7 = (op & 0x80) != 0;
    switch ((op >> 3) & 7) {
    case 4:
        op_raw(r, s);
        break;
    case 5:
        advance((uint64_t)rd_u8(r) * 20);
        break;
    case 6:
        op_gone(s, f6);
        break;
    case 7:
        if (!s->conn)
            connect_slot(i, f6 ? CQ_CONN_SERVER : CQ_CONN_CLIENT, f7);
        break;
    default:
        op_packet(r, s, f6, f7);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    load_once();
    world_up(data[0]);
    rd_t r = {data + 1, data + size};
    while (r.p < r.end) {
        run_op(&r);
        pump();
    }
    world_down();
    return 0;
}
