/* spatialbench.c - the spatial benchmark's load generator (issue 12; bench/spatial.sh runs it).
 *
 * One libuv loop drives --servers spatial servers (on chanqd's server port, --server) and
 * --clients client connections (on its client port, --client; without it, on the server port as
 * before issue 28, which made every client a SERVER connection: a handover then subscribed each
 * one to every entity entering a cell it reads, as §4.6 does for servers) against one chanqd
 * started with the same --spatial-settings FILE and world.fds. Setup: the servers create
 * the spatial channels; every client authenticates and gets an entity (id entity-start + i) at a
 * random position, created by the server owning that cell (CREATE_ENTITY_CHANNEL on the cell).
 *
 * Run (the lead's design for issue 12: damping applies to CELL subscriptions, so positions
 * reach clients through the cells' data): every entity walks at random and, --rate times a
 * second, its owner sends
 *   (a) an EntityChannelData update to the ENTITY channel (what drives chanqd's handover), and
 *   (b) a SpatialChannelData update {entities: {E: {objRef, entityData: Any(EntityChannelData)}}}
 *       to the entity's current cell (map entries replace per key).
 * Clients are not subscribed to entity channels. When its entity enters another cell (and at
 * the start), the entity's owner sets the client's interest to a sphere of --radius cells
 * around it (UPDATE_SPATIAL_INTEREST, sent on the entity channel). The benchmark runs the same
 * query through the spatial engine (cq_spatial_query) to know each subscription's damping
 * distance and interval: chanqd applies a changed interval silently (no SUB result).
 * Ownership moves on CHANNEL_DATA_HANDOVER (destination owner), taken in chanqd's order by
 * chaining each record's source to the previous one's destination (ho_apply), or, before an
 * entity's first handover, a SUB result with WRITE.
 *
 * Measured, after --warmup seconds, for --seconds:
 *   fanouts/s at the clients (CHANNEL_DATA_UPDATE on cell channels) against the ideal: each
 *     second, for every expected cell subscription, the number of its interval windows in that
 *     second during which the cell's data changed (a millisecond bitmap per cell, set when the
 *     benchmark sends the cell an update and, for both cells, when a handover reaches the
 *     destination owner); fanout_pct leaves out the "stray" fan-outs of cells the last
 *     interest dropped (before their UNSUB), which the ideal does not expect;
 *   latency per damping distance (0, 1, 2, 3+): receive time - the newest send time among the
 *     fan-out's entries, skipping a subscription's first fan-out (the full state). The send
 *     time of (entity, seq) is kept in a ring in this process, which stands for a timestamp in
 *     the data without growing it; the fan-out carries the seq;
 *   handovers/s: entities handed to a destination owner (CHANNEL_DATA_HANDOVER at servers);
 *   lost handovers: at the end (after a drain), entities whose cell belongs to another server
 *     than the one that owns them here (refused updates are in chanqd's log: bench/spatial.sh);
 *   chanqd CPU (--pid): (utime+stime) delta / wall time, from /proc/PID/stat;
 *   converge_s: from the load's stop until every client has received, in every cell it reads,
 *     the last update the cell's owner wrote for each entity now in it (its copy is the owner's
 *     last state), checked every 10 ms; -1 if the drain ended first.
 * Prints one JSON line. Exit status 0, 1 on setup failure, 2 on bad options; with --check, 3 if
 * a count check fails (every entity created, updates sent, fan-outs received, no lost handover).
 */
#include "bench_util.h"
#include "chanq_spatial.h"
#include "chanq_uv.h"
#include "cq_alloc.h"
#include "cq_spatial.h"
#include "world.pb-c.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SRV     64
#define RING        512 /* send times kept per entity: 51 s at 10 Hz, longer than a run */
#define URL_ENTITY  "type.googleapis.com/chanqworld.EntityChannelData"
#define URL_CELLS   "type.googleapis.com/chanqworld.SpatialChannelData"
#define N_BUCKETS   4 /* damping distance 0, 1, 2, 3+ */
#define LAT_CAP     (1u << 22)
#define MAX_HITS    64
#define DRAIN_MAX_S 15u

typedef struct opts {
    char host[64]; /* the servers' port (--server) */
    int port;
    char chost[64]; /* the clients' port (--client); "" = the servers' */
    int cport;
    int servers, clients;
    double rate, seconds, warmup, radius_cells, speed_cells;
    uint32_t seed, entity_start;
    int pid;
    bool check;
    const char *settings;
} opts_t;

typedef struct sub {
    uint32_t chan, interval, dist;
    bool seen;       /* its first (full-state) fan-out arrived */
    uint64_t newest; /* the newest send time it has received */
} sub_t;

typedef struct peer {
    chanq_uv_t *cu;
    int idx;
    bool server;
    uint32_t conn_id;
    int index; /* server: its server index */
    uint32_t first_cell;
    sub_t subs[MAX_HITS]; /* client: the cell subscriptions its last interest asked for */
    size_t n_subs;
} peer_t;

typedef struct ent {
    uint32_t id, seq, cell, interest_cell; /* cell channel ids; 0 = none yet */
    double x, z, heading;
    int owner;
    bool created;
    /* Handovers in chanqd's order: ho_cell is the cell of the last one applied (its creation
     * cell before any); a record whose source is not ho_cell waits in pend (see ho_apply). */
    uint32_t ho_cell;
    uint8_t npend, nho;
    struct {
        uint32_t src, dst;
        int owner;
    } pend[4];
    uint64_t sent_ns[RING];
    uint64_t owned_ns; /* send time of its last update written by its cell's owner */
} ent_t;

typedef struct lat {
    uint32_t *us; /* microseconds */
    size_t n;
    uint32_t interval;
} lat_t;

typedef struct bench {
    opts_t o;
    cq_spatial_cfg_t g;
    uint32_t n_cells;
    uint8_t (*sent_ms)[125]; /* per cell: the milliseconds of this second with an update */
    uint64_t *cell_last;     /* per cell: the newest send time of its entities (converged) */
    uint64_t sec_start;
    uv_loop_t *loop;
    uv_timer_t timer;
    peer_t *srv, *cli;
    ent_t *ents;
    int authed, created_srv, ready, created_ent, closed;
    int phase; /* 0 setup, 1 warmup, 2 measure, 3 drain, 4 done */
    uint64_t t0, t_measure, t_end, next_update_ns, next_ideal_ns;
    size_t cursor; /* next entity to update */
    double drain_s;
    double converge_s;  /* load stop -> every client has every cell's last update; -1: not */
    uint64_t next_conv; /* next convergence check (drain) */
    double cpu0, cpu_chanqd, self0, cpu_self; /* CPU seconds: at the start, over the window */
    uint64_t updates, fanouts, fanouts_first, fanouts_stray, fanouts_old, handovers, interests,
        subs_sum, subs_samples;
    double ideal;
    lat_t lat[N_BUCKETS];
    int err;
} bench_t;

static bench_t B;

static int lost_handovers(void);
static void mark_sent(uint32_t cell, uint64_t now);

/* ---- helpers ------------------------------------------------------------------------------- */

static double rnd(void)
{
    static uint32_t x;
    if (!x)
        x = B.o.seed ? B.o.seed : 1;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return (double)x / 4294967296.0;
}

/* The cell channel at (x, z) as chanqd sees it (the position travels as float), or 0. */
static uint32_t cell_at(double x, double z)
{
    uint32_t idx;
    if (cq_spatial_cell_of(&B.g, (float)x, (float)z, &idx) < 0)
        return 0;
    return cq_spatial_chan_id(&B.g, idx);
}

static int srv_of_index(uint32_t si)
{
    for (int k = 0; k < B.o.servers; k++)
        if (B.srv[k].index == (int)si)
            return k;
    return -1;
}

static int srv_of_cell(uint32_t chan)
{
    uint32_t idx;
    if (!cq_spatial_chan_index(&B.g, chan, &idx))
        return -1;
    return srv_of_index(cq_spatial_cell_server(&B.g, idx));
}

static ent_t *ent_of(uint32_t id)
{
    if (id < B.o.entity_start || id - B.o.entity_start >= (uint32_t)B.o.clients)
        return NULL;
    return &B.ents[id - B.o.entity_start];
}

static sub_t *sub_find(peer_t *p, uint32_t chan)
{
    for (size_t i = 0; i < p->n_subs; i++)
        if (p->subs[i].chan == chan)
            return &p->subs[i];
    return NULL;
}

static void lat_add(uint32_t dist, uint32_t interval, uint64_t ns)
{
    lat_t *l = &B.lat[dist < N_BUCKETS ? dist : N_BUCKETS - 1];
    if (!l->us)
        l->us = cq_malloc(LAT_CAP * sizeof(*l->us));
    l->interval = interval;
    if (l->us && l->n < LAT_CAP)
        l->us[l->n++] = (uint32_t)(ns / 1000);
}

/* ---- a minimal protobuf reader (the clients' hot path: no allocation) -------------------- */

typedef struct pbr {
    const uint8_t *p, *end;
} pbr_t;

static bool pb_varint(pbr_t *r, uint64_t *v)
{
    *v = 0;
    for (int sh = 0; sh < 64 && r->p < r->end; sh += 7) {
        uint8_t b = *r->p++;
        *v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* The next field: its number, and its varint value (wire type 0) or bytes (2). Skips fixed32
 * and fixed64. Returns false at the end or on malformed input. */
static bool pb_next(pbr_t *r, uint32_t *field, uint64_t *v, pbr_t *sub)
{
    uint64_t key, len;
    if (r->p >= r->end || !pb_varint(r, &key))
        return false;
    *field = (uint32_t)(key >> 3);
    switch (key & 7) {
    case 0:
        return pb_varint(r, v);
    case 1:
    case 5: {
        size_t n = (key & 7) == 1 ? 8 : 4;
        if ((size_t)(r->end - r->p) < n)
            return false;
        r->p += n;
        *v = 0;
        return true;
    }
    case 2:
        if (!pb_varint(r, &len) || len > (uint64_t)(r->end - r->p))
            return false;
        *sub = (pbr_t){r->p, r->p + len};
        r->p += len;
        return true;
    default:
        return false;
    }
}

/* The bytes of field f (wire type 2) in r, the last one if repeated. */
static bool pb_find(pbr_t r, uint32_t f, pbr_t *ret)
{
    uint32_t field;
    uint64_t v;
    pbr_t sub;
    bool found = false;
    while (pb_next(&r, &field, &v, &sub))
        if (field == f) {
            *ret = sub;
            found = true;
        }
    return found;
}

/* The seq (field 3) of an EntityChannelData inside a SpatialEntityState (entityData = 3, Any's
 * value = 2), or false. */
static bool entry_seq(pbr_t state, uint32_t *seq)
{
    pbr_t any, ecd;
    if (!pb_find(state, 3, &any) || !pb_find(any, 2, &ecd))
        return false;
    uint32_t field;
    uint64_t v;
    pbr_t sub;
    while (pb_next(&ecd, &field, &v, &sub))
        if (field == 3) {
            *seq = (uint32_t)v;
            return true;
        }
    return false;
}

/* The newest send time among the entries of a SpatialChannelData fan-out, or 0. */
static uint64_t newest_sent(const uint8_t *body, size_t len)
{
    pbr_t msg = {body, body + len}, any, scd;
    if (!pb_find(msg, 1, &any) || !pb_find(any, 2, &scd))
        return 0;
    uint64_t newest = 0;
    uint32_t field;
    uint64_t v;
    pbr_t entry;
    while (pb_next(&scd, &field, &v, &entry)) {
        if (field != 1)
            continue;
        uint64_t key = 0;
        uint32_t f2, seq;
        pbr_t state = {0}, sub;
        while (pb_next(&entry, &f2, &v, &sub)) {
            if (f2 == 1)
                key = v;
            else if (f2 == 2)
                state = sub;
        }
        ent_t *e = ent_of((uint32_t)key);
        if (e && state.p && entry_seq(state, &seq) && e->seq - seq < RING && seq &&
            e->sent_ns[seq % RING] > newest)
            newest = e->sent_ns[seq % RING];
    }
    return newest;
}

/* ---- inbound: servers ------------------------------------------------------------------------ */

static void set_owner(ent_t *e, int k, bool handover)
{
    if (handover && B.phase == 2)
        B.handovers++;
    e->owner = k;
}

/* Applies handover src -> dst (dst owned by server k) to e in chanqd's order. chanqd hands an
 * entity over once at a time, each from the cell the last one ended in, but the records go to
 * the destination owners, which are different connections: two handovers that chanqd ran in one
 * loop iteration can be read here in either order, and taking the later-read one as the last
 * made a correct run report a lost handover. The chain of cells gives the order back. */
static void ho_apply(ent_t *e, uint32_t src, uint32_t dst, int k)
{
    if (src != e->ho_cell && e->npend < 4) {
        e->pend[e->npend].src = src;
        e->pend[e->npend].dst = dst;
        e->pend[e->npend++].owner = k;
        return;
    }
    set_owner(e, k, true);
    e->ho_cell = dst;
    e->nho = 1;
    for (int i = 0; i < e->npend; i++)
        if (e->pend[i].src == e->ho_cell) {
            int o = e->pend[i].owner;
            uint32_t d = e->pend[i].dst;
            e->pend[i] = e->pend[--e->npend];
            set_owner(e, o, true);
            e->ho_cell = d;
            i = -1; /* the next link may be any of the rest */
        }
}

static void on_handover(peer_t *p, const chanq_msg_t *m)
{
    Channeldpb__ChannelDataHandoverMessage *h = NULL;
    if (chanq_decode_handover(m, &h) < 0)
        return;
    Chanqworld__SpatialChannelData *d = NULL;
    bool dst_owner = srv_of_cell(h->dstchannelid) == p->idx;
    if (dst_owner) { /* the handover changed both cells' data: fan-outs are due (once) */
        mark_sent(h->srcchannelid, bench_now_ns());
        mark_sent(h->dstchannelid, bench_now_ns());
    }
    if (dst_owner && h->data)
        d = chanqworld__spatial_channel_data__unpack(chanq_pb_allocator(), h->data->value.len,
                                                     h->data->value.data);
    for (size_t i = 0; d && i < d->n_entities; i++) {
        ent_t *e = ent_of(d->entities[i]->key);
        if (e)
            ho_apply(e, h->srcchannelid, h->dstchannelid, p->idx);
    }
    if (d)
        chanqworld__spatial_channel_data__free_unpacked(d, chanq_pb_allocator());
    chanq_unpack_free(h);
}

static void on_server_sub(peer_t *p, const chanq_msg_t *m)
{
    ent_t *e = ent_of(m->channel_id);
    if (!e)
        return;
    Channeldpb__SubscribedToChannelResultMessage *r = chanq_unpack(
        &channeldpb__subscribed_to_channel_result_message__descriptor, m->body, m->body_len);
    /* Only before its first handover: later, the handover records say who owns it, in order
     * (ho_apply), and a SUB result read from another connection could come out of it. */
    if (r && !e->nho && r->connid == p->conn_id && r->suboptions && r->suboptions->has_dataaccess &&
        r->suboptions->dataaccess == CHANNELDPB__CHANNEL_DATA_ACCESS__WRITE_ACCESS)
        set_owner(e, p->idx, false);
    chanq_unpack_free(r);
}

static void on_server_msg(peer_t *p, const chanq_msg_t *m)
{
    switch (m->msg_type) {
    case CHANNELDPB__MESSAGE_TYPE__CREATE_SPATIAL_CHANNEL: {
        Channeldpb__CreateSpatialChannelsResultMessage *r = NULL;
        if (chanq_decode_spatial_create_result(m, &r) == 0 && r->n_spatialchannelid) {
            p->first_cell = r->spatialchannelid[0];
            B.created_srv++;
        }
        chanq_unpack_free(r);
        break;
    }
    case CHANNELDPB__MESSAGE_TYPE__SPATIAL_CHANNELS_READY:
        B.ready++;
        break;
    case CHANNELDPB__MESSAGE_TYPE__CREATE_ENTITY_CHANNEL: {
        Channeldpb__CreateChannelResultMessage *r = NULL;
        ent_t *e = chanq_decode_entity_create_result(m, &r) == 0 ? ent_of(r->channelid) : NULL;
        if (e && !e->created) {
            e->created = true;
            B.created_ent++;
        }
        chanq_unpack_free(r);
        break;
    }
    case CHANNELDPB__MESSAGE_TYPE__SUB_TO_CHANNEL:
        on_server_sub(p, m);
        break;
    case CHANNELDPB__MESSAGE_TYPE__CHANNEL_DATA_HANDOVER:
        on_handover(p, m);
        break;
    default:
        break;
    }
}

/* ---- inbound: clients ------------------------------------------------------------------------ */

static void on_client_data(peer_t *p, const chanq_msg_t *m)
{
    uint32_t idx;
    if (!cq_spatial_chan_index(&B.g, m->channel_id, &idx))
        return;
    uint64_t now = bench_now_ns();
    if (B.phase != 2 && B.phase != 3)
        return;
    bool measure = B.phase == 2; /* the drain only follows convergence */
    B.fanouts += measure;
    sub_t *s = sub_find(p, m->channel_id);
    if (!s) {
        B.fanouts_stray += measure; /* a cell the last interest dropped, before its UNSUB */
        return;
    }
    uint64_t t = newest_sent(m->body, m->body_len);
    if (!s->seen) {
        s->seen = true; /* the first fan-out is the full state */
        s->newest = t;
        B.fanouts_first += measure;
        return;
    }
    if (t <= s->newest) {
        B.fanouts_old += measure; /* nothing newer (e.g. a handover moving older entries) */
        return;
    }
    s->newest = t;
    if (measure && t <= now)
        lat_add(s->dist, s->interval, now - t);
}

static void on_client_msg(peer_t *p, const chanq_msg_t *m)
{
    if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__CHANNEL_DATA_UPDATE)
        on_client_data(p, m);
}

static void on_message(chanq_uv_t *c, const chanq_msg_t *m, void *ud)
{
    (void)c;
    peer_t *p = ud;
    if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__AUTH && !p->conn_id) {
        p->conn_id = chanq_client_conn_id(chanq_uv_client(p->cu));
        B.authed += p->conn_id != 0;
        return;
    }
    if (p->server)
        on_server_msg(p, m);
    else
        on_client_msg(p, m);
}

static void on_connect(chanq_uv_t *c, int status, void *ud)
{
    peer_t *p = ud;
    if (status < 0)
        return;
    char pit[32];
    snprintf(pit, sizeof(pit), "%s-%d", p->server ? "sbsrv" : "sbcli", p->idx);
    chanq_client_auth(chanq_uv_client(c), 0, pit, "");
}

static void on_close(chanq_uv_t *c, int err, void *ud)
{
    (void)c;
    peer_t *p = ud;
    p->cu = NULL;
    B.closed++;
    if (err && B.phase < 4 && !B.err) {
        fprintf(stderr, "spatialbench: %s %d closed: %s\n", p->server ? "server" : "client", p->idx,
                err < -999 ? cq_strerror(err) : uv_strerror(err));
        B.err = err;
    }
}

/* ---- outbound ------------------------------------------------------------------------------- */

static int connect_peer(peer_t *p)
{
    static const chanq_uv_cbs_t cbs = {on_connect, on_message, on_close};
    struct sockaddr_in a;
    bool cli = !p->server && B.o.chost[0];
    int r = uv_ip4_addr(cli ? B.o.chost : B.o.host, cli ? B.o.cport : B.o.port, &a);
    return r < 0 ? r : chanq_uv_connect(B.loop, (const struct sockaddr *)&a, NULL, &cbs, p, &p->cu);
}

static size_t pack_entity(const ent_t *e, uint8_t *buf, size_t cap)
{
    Chanqworld__Vector3f pos = CHANQWORLD__VECTOR3F__INIT;
    Chanqworld__TransformState tr = CHANQWORLD__TRANSFORM_STATE__INIT;
    Chanqworld__EntityChannelData d = CHANQWORLD__ENTITY_CHANNEL_DATA__INIT;
    uint32_t trail = e->seq;
    pos.x = (float)e->x;
    pos.z = (float)e->z;
    tr.position = &pos;
    d.transform = &tr;
    d.seq = e->seq;
    d.n_trail = e->seq ? 1 : 0;
    d.trail = &trail;
    size_t n = chanqworld__entity_channel_data__get_packed_size(&d);
    return n <= cap ? chanqworld__entity_channel_data__pack(&d, buf) : 0;
}

/* SpatialChannelData {entities: {E: {objRef {netId E}, entityData: Any(ecd)}}}. */
static size_t pack_cell_entry(const ent_t *e, const uint8_t *ecd, size_t ecd_len, uint8_t *buf,
                              size_t cap)
{
    Chanqworld__EntityRef ref = CHANQWORLD__ENTITY_REF__INIT;
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    Chanqworld__SpatialEntityState st = CHANQWORLD__SPATIAL_ENTITY_STATE__INIT;
    Chanqworld__SpatialChannelData__EntitiesEntry ent =
        CHANQWORLD__SPATIAL_CHANNEL_DATA__ENTITIES_ENTRY__INIT;
    Chanqworld__SpatialChannelData d = CHANQWORLD__SPATIAL_CHANNEL_DATA__INIT;
    Chanqworld__SpatialChannelData__EntitiesEntry *ents[1] = {&ent};
    ref.netid = e->id;
    any.type_url = URL_ENTITY;
    any.value.data = (uint8_t *)ecd;
    any.value.len = ecd_len;
    st.objref = &ref;
    st.entitydata = &any;
    ent.key = e->id;
    ent.value = &st;
    d.n_entities = 1;
    d.entities = ents;
    size_t n = chanqworld__spatial_channel_data__get_packed_size(&d);
    return n <= cap ? chanqworld__spatial_channel_data__pack(&d, buf) : 0;
}

static void create_entities(void)
{
    Channeldpb__ChannelDataMergeOptions mo = CHANNELDPB__CHANNEL_DATA_MERGE_OPTIONS__INIT;
    mo.listsizelimit = 32;
    mo.truncatetop = 1;
    double w = B.g.cell_w * B.g.cols, h = B.g.cell_h * B.g.rows;
    for (int i = 0; i < B.o.clients; i++) {
        ent_t *e = &B.ents[i];
        e->id = B.o.entity_start + (uint32_t)i;
        e->x = B.g.off_x + (0.001 + 0.998 * rnd()) * w;
        e->z = B.g.off_z + (0.001 + 0.998 * rnd()) * h;
        e->heading = rnd() * 2 * M_PI;
        e->cell = cell_at(e->x, e->z);
        e->ho_cell = e->cell;
        e->owner = srv_of_cell(e->cell);
        if (e->owner < 0 || !B.srv[e->owner].cu) {
            B.err = CQ_EDECODE;
            return;
        }
        uint8_t buf[128];
        size_t n = pack_entity(e, buf, sizeof(buf));
        chanq_channel_data_t d = {URL_ENTITY, buf, n, &mo};
        chanq_client_create_entity(chanq_uv_client(B.srv[e->owner].cu), 0, e->cell, e->id, "sb",
                                   NULL, &d, false);
    }
}

/* The entity's owner sets its client's sphere interest; the benchmark runs the same query to
 * know the subscriptions' damping distances (kept seen flags for the cells that stay). */
static void send_interest(int i)
{
    ent_t *e = &B.ents[i];
    peer_t *c = &B.cli[i], *s = &B.srv[e->owner];
    if (!c->conn_id || !s->cu)
        return;
    double r = B.o.radius_cells * B.g.cell_w;
    cq_spatial_vec_t ctr = {(float)e->x, 0, (float)e->z};
    cq_spatial_query_t q = {0};
    q.sphere = q.sphere_has_center = true;
    q.sphere_center = ctr;
    q.sphere_radius = r;
    cq_spatial_hits_t hits = {0};
    if (cq_spatial_query(&B.g, &q, &hits) < 0 ||
        chanq_client_interest_sphere(chanq_uv_client(s->cu), 0, e->id, c->conn_id,
                                     (chanq_vec3_t){ctr.x, 0, ctr.z}, r) < 0) {
        cq_spatial_hits_done(&hits);
        return;
    }
    sub_t next[MAX_HITS];
    size_t n = 0;
    for (uint32_t k = 0; k < hits.n && n < MAX_HITS; k++) {
        const sub_t *old = sub_find(c, hits.v[k].chan_id);
        next[n++] = (sub_t){hits.v[k].chan_id, cq_spatial_damping_ms(hits.v[k].dist, 20),
                            hits.v[k].dist, old && old->seen, old ? old->newest : 0};
    }
    memcpy(c->subs, next, n * sizeof(*next));
    c->n_subs = n;
    e->interest_cell = e->cell;
    B.interests++;
    cq_spatial_hits_done(&hits);
}

static void step(ent_t *e, double dt)
{
    double speed = B.o.speed_cells * B.g.cell_w;
    double x0 = B.g.off_x, z0 = B.g.off_z;
    double x1 = x0 + B.g.cell_w * B.g.cols, z1 = z0 + B.g.cell_h * B.g.rows;
    e->heading += (rnd() - 0.5) * 0.6;
    double nx = e->x + cos(e->heading) * speed * dt, nz = e->z + sin(e->heading) * speed * dt;
    if (nx < x0 + 1 || nx > x1 - 1) {
        e->heading = M_PI - e->heading;
        nx = fmin(fmax(nx, x0 + 1), x1 - 1);
    }
    if (nz < z0 + 1 || nz > z1 - 1) {
        e->heading = -e->heading;
        nz = fmin(fmax(nz, z0 + 1), z1 - 1);
    }
    e->x = nx;
    e->z = nz;
}

static void mark_sent(uint32_t cell, uint64_t now)
{
    uint32_t idx;
    if (B.phase != 2 || !cq_spatial_chan_index(&B.g, cell, &idx))
        return;
    uint64_t ms = (now - B.sec_start) / 1000000;
    if (ms > 999)
        ms = 999;
    B.sent_ms[idx][ms / 8] |= (uint8_t)(1u << (ms % 8));
}

/* One entity's tick: walk, (a) the entity update, (b) the cell update, and a new interest when
 * the entity entered another cell. */
static void update_entity(ent_t *e, int i, uint64_t now)
{
    step(e, 1.0 / B.o.rate);
    e->seq++;
    e->sent_ns[e->seq % RING] = now;
    e->cell = cell_at(e->x, e->z);
    peer_t *s = &B.srv[e->owner];
    if (!s->cu || !e->cell)
        return;
    uint8_t ecd[128], cell[256];
    size_t n = pack_entity(e, ecd, sizeof(ecd));
    size_t m = pack_cell_entry(e, ecd, n, cell, sizeof(cell));
    chanq_client_t *cc = chanq_uv_client(s->cu);
    if (chanq_client_data_update(cc, e->id, URL_ENTITY, ecd, n) == 0 &&
        chanq_client_data_update(cc, e->cell, URL_CELLS, cell, m) == 0) {
        B.updates += B.phase == 2;
        if (srv_of_cell(e->cell) == e->owner)
            e->owned_ns = now;
    }
    mark_sent(e->cell, now);
    if (e->cell != e->interest_cell)
        send_interest(i);
}

/* Sends the updates due by now: entity i is due at slot i of each 1/rate period. */
static void send_updates(uint64_t now)
{
    uint64_t period = (uint64_t)(1e9 / B.o.rate), slot = period / (uint64_t)B.o.clients;
    if (slot == 0)
        slot = 1;
    while (B.next_update_ns <= now) {
        update_entity(&B.ents[B.cursor], (int)B.cursor, bench_now_ns());
        B.cursor = (B.cursor + 1) % (size_t)B.o.clients;
        B.next_update_ns += slot;
    }
}

/* Windows of iv ms in this second in which cell idx was sent an update. */
static uint32_t windows(uint32_t idx, uint32_t iv)
{
    uint32_t n = 0;
    for (uint32_t w0 = 0; w0 < 1000; w0 += iv) {
        for (uint32_t ms = w0; ms < w0 + iv && ms < 1000; ms++)
            if (B.sent_ms[idx][ms / 8] & (1u << (ms % 8))) {
                n++;
                break;
            }
    }
    return n;
}

/* After the load stopped: every client has received, in every cell it reads, the last update
 * the cell's owner wrote for the entities now in it (a fan-out's newest send time is at least
 * that), i.e. its copy of each cell is the owner's last state. An entity that left a cell was
 * taken out of it by its handover, so only the entities a cell holds now count; an update sent
 * by the entity's previous owner while its handover was on its way is not the owner's. */
static bool converged(void)
{
    memset(B.cell_last, 0, B.n_cells * sizeof(*B.cell_last));
    for (int i = 0; i < B.o.clients; i++) {
        const ent_t *e = &B.ents[i];
        uint32_t idx;
        if (e->owned_ns && cq_spatial_chan_index(&B.g, e->cell, &idx) &&
            e->owned_ns > B.cell_last[idx])
            B.cell_last[idx] = e->owned_ns;
    }
    for (int i = 0; i < B.o.clients; i++) {
        const peer_t *p = &B.cli[i];
        for (size_t k = 0; k < p->n_subs; k++) {
            uint32_t idx;
            const sub_t *s = &p->subs[k];
            if (!cq_spatial_chan_index(&B.g, s->chan, &idx) || !B.cell_last[idx])
                continue;
            if (!s->seen || s->newest < B.cell_last[idx])
                return false;
        }
    }
    return true;
}

/* Once a second while measuring: the ideal fan-outs of the expected subscriptions. */
static void add_ideal(uint64_t now)
{
    static const uint32_t ivs[3] = {20, 50, 100};
    uint32_t(*cnt)[3] = cq_calloc(B.n_cells, sizeof(*cnt));
    if (!cnt)
        return;
    for (uint32_t c = 0; c < B.n_cells; c++)
        for (int k = 0; k < 3; k++)
            cnt[c][k] = windows(c, ivs[k]);
    for (int i = 0; i < B.o.clients; i++) {
        const peer_t *p = &B.cli[i];
        B.subs_sum += p->n_subs;
        B.subs_samples++;
        for (size_t j = 0; j < p->n_subs; j++) {
            uint32_t idx, iv = p->subs[j].interval;
            if (!cq_spatial_chan_index(&B.g, p->subs[j].chan, &idx))
                continue;
            int k = iv == 20 ? 0 : iv == 50 ? 1 : iv == 100 ? 2 : -1;
            B.ideal += k >= 0 ? cnt[idx][k] : windows(idx, iv ? iv : 20);
        }
    }
    cq_free(cnt);
    memset(B.sent_ms, 0, B.n_cells * sizeof(*B.sent_ms));
    B.sec_start = now;
}

/* ---- phases ------------------------------------------------------------------------------------
 */

static bool setup_step(void)
{
    int all = B.o.servers + B.o.clients;
    static int stage;
    if (stage == 0 && B.authed == all) {
        chanq_channel_data_t d = {URL_CELLS, "", 0, NULL};
        for (int k = 0; k < B.o.servers; k++)
            chanq_client_create_spatial(chanq_uv_client(B.srv[k].cu), 1, "sb", NULL, &d);
        stage = 1;
    } else if (stage == 1 && B.created_srv == B.o.servers && B.ready >= B.o.servers) {
        for (int k = 0; k < B.o.servers; k++) {
            uint32_t idx;
            B.srv[k].index = cq_spatial_chan_index(&B.g, B.srv[k].first_cell, &idx)
                                 ? (int)cq_spatial_cell_server(&B.g, idx)
                                 : -1;
        }
        create_entities();
        stage = 2;
    } else if (stage == 2 && B.created_ent == B.o.clients) {
        return true;
    }
    return false;
}

static void on_timer(uv_timer_t *t)
{
    uint64_t now = bench_now_ns();
    if (B.err || (B.phase == 0 && now - B.t0 > 60e9)) {
        if (!B.err)
            B.err = CQ_ETIMEOUT;
        B.phase = 4;
    }
    if (B.phase == 0 && setup_step()) {
        B.phase = 1;
        B.next_update_ns = now;
        B.t_measure = now + (uint64_t)(B.o.warmup * 1e9);
        B.t_end = B.t_measure + (uint64_t)(B.o.seconds * 1e9);
    }
    if (B.phase == 1 && now >= B.t_measure) {
        B.phase = 2;
        B.cpu0 = B.o.pid ? bench_proc_cpu_s(B.o.pid, NULL) : 0;
        B.self0 = bench_proc_cpu_s(getpid(), NULL);
        B.next_ideal_ns = now + 1000000000ull;
        B.t_end = now + (uint64_t)(B.o.seconds * 1e9); /* the ideal's seconds end with it */
        B.sec_start = now;
        memset(B.sent_ms, 0, B.n_cells * sizeof(*B.sent_ms));
    }
    if (B.phase == 1 || B.phase == 2)
        send_updates(now);
    if (B.phase == 2 && now >= B.next_ideal_ns) {
        add_ideal(now);
        B.next_ideal_ns += 1000000000ull;
    }
    if (B.phase == 2 && now >= B.t_end) {
        B.phase = 3;
        B.cpu_chanqd = B.o.pid ? bench_proc_cpu_s(B.o.pid, NULL) - B.cpu0 : -1;
        B.cpu_self = bench_proc_cpu_s(getpid(), NULL) - B.self0;
        B.t_end = now; /* drain: the last handovers */
    }
    /* The drain lasts 1 s, and up to DRAIN_MAX_S while an entity's handover is still on its way
     * (a backlogged run delivers them late: late is not lost). Checked every 100 ms. */
    if (B.phase == 3 && B.converge_s < 0 && now >= B.next_conv) {
        B.next_conv = now + 10000000ull; /* every 10 ms */
        if (converged())
            B.converge_s = (double)(now - B.t_end) / 1e9;
    }
    static uint64_t next_check;
    if (B.phase == 3 && now >= B.t_end + 1000000000ull && now >= next_check) {
        next_check = now + 100000000ull;
        if (now >= B.t_end + DRAIN_MAX_S * 1000000000ull ||
            (lost_handovers() == 0 && B.converge_s >= 0)) {
            B.drain_s = (double)(now - B.t_end) / 1e9;
            B.phase = 4;
        }
    }
    if (B.phase == 4) {
        uv_timer_stop(t);
        for (int i = 0; i < B.o.servers + B.o.clients; i++) {
            peer_t *p = i < B.o.servers ? &B.srv[i] : &B.cli[i - B.o.servers];
            if (p->cu)
                chanq_uv_close(p->cu);
        }
        uv_close((uv_handle_t *)t, NULL);
    }
}

/* ---- report ------------------------------------------------------------------------------------
 */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(lat_t *l, double q)
{
    if (!l->n)
        return -1;
    return l->us[(size_t)(q * (double)(l->n - 1))] / 1000.0;
}

static int lost_handovers(void)
{
    int n = 0;
    for (int i = 0; i < B.o.clients; i++)
        n += srv_of_cell(cell_at(B.ents[i].x, B.ents[i].z)) != B.ents[i].owner;
    return n;
}

static void report(double cpu_s)
{
    double secs = B.o.seconds;
    printf("{\"servers\":%d,\"clients\":%d,\"rate\":%g,\"seconds\":%g,\"created\":%d,"
           "\"updates\":%" PRIu64 ",\"updates_per_s\":%.0f,\"interests\":%" PRIu64
           ",\"subs_per_client\":%.2f,\"fanouts\":%" PRIu64
           ",\"fanouts_per_s\":%.0f,\"first_per_s\":%.0f,\"stray_per_s\":%.0f,\"old_per_s\":%.0f,"
           "\"ideal_per_s\":%.0f,"
           "\"fanout_pct\":%.1f,\"handovers\":%" PRIu64
           ",\"handovers_per_s\":%.1f,\"lost_handovers\":%d,\"drain_s\":%.1f,"
           "\"converge_s\":%.3f,\"cpu_cores\":%.3f,"
           "\"bench_cpu_cores\":"
           "%.3f",
           B.o.servers, B.o.clients, B.o.rate, secs, B.created_ent, B.updates, B.updates / secs,
           B.interests, B.subs_samples ? (double)B.subs_sum / (double)B.subs_samples : 0.0,
           B.fanouts, B.fanouts / secs, B.fanouts_first / secs, B.fanouts_stray / secs,
           B.fanouts_old / secs, B.ideal / secs,
           B.ideal > 0 ? 100.0 * (double)(B.fanouts - B.fanouts_stray) / B.ideal : 0.0, B.handovers,
           B.handovers / secs, lost_handovers(), B.drain_s, B.converge_s,
           cpu_s >= 0 ? cpu_s / secs : -1.0, B.cpu_self / secs);
    for (int b = 0; b < N_BUCKETS; b++) {
        lat_t *l = &B.lat[b];
        if (l->n)
            qsort(l->us, l->n, sizeof(*l->us), cmp_u32);
        printf(",\"lat_d%d%s\":{\"interval_ms\":%u,\"n\":%zu,\"p50_ms\":%.2f,\"p99_ms\":%.2f}", b,
               b == N_BUCKETS - 1 ? "plus" : "", l->interval, l->n, pct(l, 0.5), pct(l, 0.99));
    }
    printf(",\"ok\":%s}\n", B.err ? "false" : "true");
}

/* ---- options and main --------------------------------------------------------------------------
 */

static int parse_hostport(const char *arg, char *host, size_t cap, int *port)
{
    const char *colon = strrchr(arg, ':');
    if (!colon || (size_t)(colon - arg) >= cap)
        return -EINVAL;
    memcpy(host, arg, (size_t)(colon - arg));
    host[colon - arg] = '\0';
    *port = atoi(colon + 1);
    return *port > 0 && *port <= 65535 ? 0 : -EINVAL;
}

static int parse_opts(opts_t *o, int argc, char **argv)
{
    static const struct option lo[] = {{"server", 1, 0, 'S'},
                                       {"client", 1, 0, 'L'},
                                       {"servers", 1, 0, 'n'},
                                       {"clients", 1, 0, 'c'},
                                       {"rate", 1, 0, 'r'},
                                       {"seconds", 1, 0, 't'},
                                       {"warmup", 1, 0, 'w'},
                                       {"radius", 1, 0, 'R'},
                                       {"speed", 1, 0, 'v'},
                                       {"seed", 1, 0, 's'},
                                       {"entity-start", 1, 0, 'E'},
                                       {"pid", 1, 0, 'p'},
                                       {"check", 0, 0, 'C'},
                                       {"spatial-settings", 1, 0, 'G'},
                                       {0, 0, 0, 0}};
    *o = (opts_t){
        "127.0.0.1", 11288, "",  0, 9, 2000, 10, 10, 2, 1.5, 0.5, 1, CHANQ_ENTITY_CHAN_START,
        0,           false, NULL};
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'S':
            if (parse_hostport(optarg, o->host, sizeof(o->host), &o->port) < 0)
                return -EINVAL;
            break;
        case 'L':
            if (parse_hostport(optarg, o->chost, sizeof(o->chost), &o->cport) < 0)
                return -EINVAL;
            break;
        case 'n':
            o->servers = atoi(optarg);
            break;
        case 'c':
            o->clients = atoi(optarg);
            break;
        case 'r':
            o->rate = atof(optarg);
            break;
        case 't':
            o->seconds = atof(optarg);
            break;
        case 'w':
            o->warmup = atof(optarg);
            break;
        case 'R':
            o->radius_cells = atof(optarg);
            break;
        case 'v':
            o->speed_cells = atof(optarg);
            break;
        case 's':
            o->seed = (uint32_t)strtoul(optarg, NULL, 0);
            break;
        case 'E':
            o->entity_start = (uint32_t)strtoul(optarg, NULL, 0);
            break;
        case 'p':
            o->pid = atoi(optarg);
            break;
        case 'C':
            o->check = true;
            break;
        case 'G':
            o->settings = optarg;
            break;
        default:
            return -EINVAL;
        }
    }
    if (o->servers < 1 || o->servers > MAX_SRV || o->clients < 1 || o->rate <= 0 ||
        o->seconds <= 0 || o->port <= 0 || o->port > 65535 || !o->settings)
        return -EINVAL;
    return 0;
}

int main(int argc, char **argv)
{
    if (parse_opts(&B.o, argc, argv) < 0) {
        fprintf(stderr,
                "usage: spatialbench [--server H:P] [--client H:P] [--servers 9] [--clients 2000] "
                "[--rate 10] [--seconds 10] [--warmup 2] [--radius 1.5 (cells)] "
                "[--speed 0.5 (cells/s)] [--seed N] [--entity-start ID] [--pid N] "
                "[--check] --spatial-settings FILE (chanqd's)\n");
        return 2;
    }
    char err[256];
    if (cq_spatial_cfg_load(B.o.settings, &B.g, err, sizeof(err)) < 0) {
        fprintf(stderr, "spatialbench: %s: %s\n", B.o.settings, err);
        return 2;
    }
    B.n_cells = cq_spatial_cells(&B.g);
    B.sent_ms = cq_calloc(B.n_cells, sizeof(*B.sent_ms));
    B.cell_last = cq_calloc(B.n_cells, sizeof(*B.cell_last));
    B.converge_s = -1;
    B.loop = uv_default_loop();
    B.srv = cq_calloc((size_t)B.o.servers, sizeof(*B.srv));
    B.cli = cq_calloc((size_t)B.o.clients, sizeof(*B.cli));
    B.ents = cq_calloc((size_t)B.o.clients, sizeof(*B.ents));
    if (!B.srv || !B.cli || !B.ents || !B.sent_ms || !B.cell_last)
        return 1;
    for (int i = 0; i < B.o.servers + B.o.clients; i++) {
        peer_t *p = i < B.o.servers ? &B.srv[i] : &B.cli[i - B.o.servers];
        p->server = i < B.o.servers;
        p->idx = p->server ? i : i - B.o.servers;
        p->index = -1;
        if (connect_peer(p) < 0) {
            fprintf(stderr, "spatialbench: connect failed\n");
            return 1;
        }
    }
    B.t0 = bench_now_ns();
    uv_timer_init(B.loop, &B.timer);
    uv_timer_start(&B.timer, on_timer, 1, 1);
    uv_run(B.loop, UV_RUN_DEFAULT);
    report(B.cpu_chanqd);
    int rc = B.err ? 1 : 0;
    if (!rc && B.o.check &&
        (B.created_ent != B.o.clients || B.updates == 0 || B.fanouts == 0 || lost_handovers()))
        rc = 3;
    for (int b = 0; b < N_BUCKETS; b++)
        cq_free(B.lat[b].us);
    cq_free(B.sent_ms);
    cq_free(B.cell_last);
    cq_spatial_cfg_done(&B.g);
    cq_free(B.srv);
    cq_free(B.cli);
    cq_free(B.ents);
    uv_loop_close(B.loop);
    return rc;
}
