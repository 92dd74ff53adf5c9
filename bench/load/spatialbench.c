/* spatialbench.c - the spatial benchmark's load generator (issue 12; bench/spatial.sh runs it).
 *
 * One libuv loop drives --servers spatial servers and --clients client connections against one
 * chanqd (started with --spatial-settings benchmark and world.fds). Setup: the servers create
 * the spatial channels; every client authenticates and gets an entity (id entity-start + i) at a
 * random position, created by the server owning that cell (CREATE_ENTITY_CHANNEL on the cell).
 * Run: every entity walks at random and its owner sends an EntityChannelData update --rate
 * times a second; once a second each entity's owner sets its client's interest to a sphere of
 * --radius cells around the entity (UPDATE_SPATIAL_INTEREST). Ownership moves on
 * CHANNEL_DATA_HANDOVER (destination owner) or a SUB result with WRITE for the server itself.
 *
 * Measured, after --warmup seconds, for --seconds:
 *   fanouts/s at the clients (CHANNEL_DATA_UPDATE on entity channels) against the ideal: every
 *     second, the sum over the clients' entity subscriptions of min(1000/interval, rate);
 *   latency: the sender records each update's send time by (entity, seq) (a ring in this
 *     process: equivalent to a timestamp in the data, without growing it); a client that
 *     receives an update reads every new seq of its trail and records now - send time, per
 *     interval bucket of that subscription (20, 50, 100, other), as p50/p99;
 *   gaps and duplicates: a trail seq <= the last one seen on that subscription is a duplicate, a
 *     jump of more than 1 a gap (after the first fan-out);
 *   handovers/s: entities handed to a destination owner (CHANNEL_DATA_HANDOVER at servers);
 *   lost handovers: at the end (after a drain), entities whose position's cell belongs to
 *     another server than the one that last received them;
 *   chanqd CPU (--pid): (utime+stime) delta / wall time, from /proc/PID/stat.
 * Prints one JSON line. Exit status 0, 1 on setup failure, 2 on bad options; with --check, 3 if
 * a count check fails (every entity created, updates sent, fan-outs received, no lost handover).
 */
#include "bench_util.h"
#include "chanq_spatial.h"
#include "chanq_uv.h"
#include "cq_alloc.h"
#include "world.pb-c.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SRV    64
#define RING       64
#define URL_ENTITY "type.googleapis.com/chanqworld.EntityChannelData"
#define URL_CELLS  "type.googleapis.com/chanqworld.SpatialChannelData"
#define N_BUCKETS  4
#define LAT_CAP    (1u << 21)

static const uint32_t bucket_iv[N_BUCKETS] = {20, 50, 100, 0};

typedef struct opts {
    char host[64];
    int port;
    int servers, clients;
    double rate, seconds, warmup, radius_cells, speed_cells;
    uint32_t seed, entity_start;
    int pid;
    bool check;
} opts_t;

typedef struct region {
    uint32_t chan, server_index;
    double x0, z0, x1, z1;
} region_t;

typedef struct sub {
    uint32_t chan, interval, last_seq;
    bool seen;
} sub_t;

typedef struct peer {
    chanq_uv_t *cu;
    int idx;
    bool server;
    uint32_t conn_id;
    int index; /* server: its server index */
    uint32_t first_cell;
    sub_t *subs; /* client: its entity subscriptions */
    size_t n_subs, cap_subs;
} peer_t;

typedef struct ent {
    uint32_t id, seq;
    double x, z, heading;
    int owner;
    bool created;
    uint64_t sent_ns[RING];
} ent_t;

typedef struct lat {
    uint32_t *us; /* microseconds */
    size_t n;
} lat_t;

typedef struct bench {
    opts_t o;
    uv_loop_t *loop;
    uv_timer_t timer;
    peer_t *srv, *cli;
    ent_t *ents;
    region_t *regions;
    size_t n_regions;
    double x0, z0, x1, z1, cell_w;
    int authed, created_srv, ready, created_ent, closed;
    int phase; /* 0 setup, 1 warmup, 2 measure, 3 drain, 4 done */
    uint64_t t0, t_measure, t_end, next_update_ns, next_interest_ns, next_ideal_ns;
    size_t cursor; /* next entity to update */
    double cpu0;
    uint64_t updates, fanouts, handovers, dups, gaps;
    double ideal;
    lat_t lat[N_BUCKETS];
    int err;
} bench_t;

static bench_t B;

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

static const region_t *region_at(double x, double z)
{
    if (B.n_regions == 0)
        return NULL;
    /* Regular grid: index from the first region's size, then verify. */
    int cols = (int)llround((B.x1 - B.x0) / B.cell_w);
    double h = B.regions[0].z1 - B.regions[0].z0;
    long gx = (long)floor((x - B.x0) / B.cell_w), gz = (long)floor((z - B.z0) / h);
    size_t i = (size_t)(gx + gz * cols);
    if (gx < 0 || gz < 0 || gx >= cols || i >= B.n_regions)
        return NULL;
    return &B.regions[i];
}

static const region_t *region_of_chan(uint32_t chan)
{
    for (size_t i = 0; i < B.n_regions; i++)
        if (B.regions[i].chan == chan)
            return &B.regions[i];
    return NULL;
}

static int srv_of_index(uint32_t si)
{
    for (int k = 0; k < B.o.servers; k++)
        if (B.srv[k].index == (int)si)
            return k;
    return -1;
}

static int cell_owner(double x, double z)
{
    const region_t *r = region_at(x, z);
    return r ? srv_of_index(r->server_index) : -1;
}

static ent_t *ent_of(uint32_t id)
{
    if (id < B.o.entity_start || id - B.o.entity_start >= (uint32_t)B.o.clients)
        return NULL;
    return &B.ents[id - B.o.entity_start];
}

static sub_t *sub_find(peer_t *p, uint32_t chan, bool add)
{
    for (size_t i = 0; i < p->n_subs; i++)
        if (p->subs[i].chan == chan)
            return &p->subs[i];
    if (!add)
        return NULL;
    if (p->n_subs == p->cap_subs) {
        size_t nc = p->cap_subs ? p->cap_subs * 2 : 16;
        sub_t *ns = cq_realloc(p->subs, nc * sizeof(*ns));
        if (!ns)
            return NULL;
        p->subs = ns;
        p->cap_subs = nc;
    }
    p->subs[p->n_subs] = (sub_t){chan, 0, 0, false};
    return &p->subs[p->n_subs++];
}

static int bucket_of(uint32_t iv)
{
    for (int b = 0; b < N_BUCKETS - 1; b++)
        if (iv == bucket_iv[b])
            return b;
    return N_BUCKETS - 1;
}

static void lat_add(int b, uint64_t ns)
{
    lat_t *l = &B.lat[b];
    if (!l->us)
        l->us = cq_malloc(LAT_CAP * sizeof(*l->us));
    if (l->us && l->n < LAT_CAP)
        l->us[l->n++] = (uint32_t)(ns / 1000);
}

/* ---- inbound: servers ------------------------------------------------------------------------ */

static void on_regions(const chanq_msg_t *m)
{
    Channeldpb__SpatialRegionsUpdateMessage *ru = NULL;
    if (B.n_regions || chanq_decode_spatial_regions(m, &ru) < 0 || ru->n_regions == 0) {
        chanq_unpack_free(ru);
        return;
    }
    B.regions = cq_calloc(ru->n_regions, sizeof(*B.regions));
    if (!B.regions) {
        chanq_unpack_free(ru);
        return;
    }
    B.x0 = B.z0 = INFINITY;
    B.x1 = B.z1 = -INFINITY;
    for (size_t i = 0; i < ru->n_regions; i++) {
        const Channeldpb__SpatialRegion *r = ru->regions[i];
        B.regions[i] =
            (region_t){r->channelid, r->serverindex, r->min->x, r->min->z, r->max->x, r->max->z};
        B.x0 = fmin(B.x0, r->min->x);
        B.z0 = fmin(B.z0, r->min->z);
        B.x1 = fmax(B.x1, r->max->x);
        B.z1 = fmax(B.z1, r->max->z);
    }
    B.cell_w = B.regions[0].x1 - B.regions[0].x0;
    B.n_regions = ru->n_regions;
    chanq_unpack_free(ru);
}

static void set_owner(ent_t *e, int k, bool handover)
{
    if (handover && B.phase == 2)
        B.handovers++;
    e->owner = k;
}

static void on_handover(peer_t *p, const chanq_msg_t *m)
{
    Channeldpb__ChannelDataHandoverMessage *h = NULL;
    if (chanq_decode_handover(m, &h) < 0)
        return;
    const region_t *dst = region_of_chan(h->dstchannelid);
    Chanqworld__SpatialChannelData *d = NULL;
    if (dst && srv_of_index(dst->server_index) == p->idx && h->data)
        d = chanqworld__spatial_channel_data__unpack(chanq_pb_allocator(), h->data->value.len,
                                                     h->data->value.data);
    for (size_t i = 0; d && i < d->n_entities; i++) {
        ent_t *e = ent_of(d->entities[i]->key);
        if (e)
            set_owner(e, p->idx, true);
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
    if (r && r->connid == p->conn_id && r->suboptions && r->suboptions->has_dataaccess &&
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
    case CHANNELDPB__MESSAGE_TYPE__SPATIAL_REGIONS_UPDATE:
        on_regions(m);
        break;
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

static void on_client_sub(peer_t *p, const chanq_msg_t *m, bool sub)
{
    if (!ent_of(m->channel_id))
        return;
    if (!sub) {
        sub_t *s = sub_find(p, m->channel_id, false);
        if (s)
            *s = p->subs[--p->n_subs];
        return;
    }
    Channeldpb__SubscribedToChannelResultMessage *r = chanq_unpack(
        &channeldpb__subscribed_to_channel_result_message__descriptor, m->body, m->body_len);
    sub_t *s = r ? sub_find(p, m->channel_id, true) : NULL;
    if (s && r->suboptions && r->suboptions->has_fanoutintervalms)
        s->interval = r->suboptions->fanoutintervalms;
    chanq_unpack_free(r);
}

static void on_client_data(peer_t *p, const chanq_msg_t *m)
{
    ent_t *e = ent_of(m->channel_id);
    sub_t *s = e ? sub_find(p, m->channel_id, true) : NULL;
    Channeldpb__ChannelDataUpdateMessage *u = NULL;
    if (!s || chanq_decode_data_update(m, &u) < 0)
        return;
    Chanqworld__EntityChannelData *d = chanqworld__entity_channel_data__unpack(
        chanq_pb_allocator(), u->data->value.len, u->data->value.data);
    uint64_t now = bench_now_ns();
    bool measure = B.phase == 2;
    if (measure)
        B.fanouts++;
    bool had = s->seen, fresh = false;
    for (size_t i = 0; d && i < d->n_trail; i++) {
        uint32_t seq = d->trail[i];
        if (s->seen && seq <= s->last_seq)
            continue; /* a full first fan-out repeats older seqs */
        if (s->seen && seq > s->last_seq + 1 && measure)
            B.gaps++;
        s->seen = fresh = true;
        s->last_seq = seq;
        if (measure && e->seq - seq < RING)
            lat_add(bucket_of(s->interval), now - e->sent_ns[seq % RING]);
    }
    /* A fan-out carrying no new seq repeats data the subscriber already had. */
    if (had && !fresh && measure)
        B.dups++;
    if (d)
        chanqworld__entity_channel_data__free_unpacked(d, chanq_pb_allocator());
    chanq_unpack_free(u);
}

static void on_client_msg(peer_t *p, const chanq_msg_t *m)
{
    if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__CHANNEL_DATA_UPDATE)
        on_client_data(p, m);
    else if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__SUB_TO_CHANNEL)
        on_client_sub(p, m, true);
    else if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__UNSUB_FROM_CHANNEL)
        on_client_sub(p, m, false);
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

/* ---- outbound ----------------------------------------------------------------------------------
 */

static int connect_peer(peer_t *p)
{
    static const chanq_uv_cbs_t cbs = {on_connect, on_message, on_close};
    struct sockaddr_in a;
    int r = uv_ip4_addr(B.o.host, B.o.port, &a);
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

static void create_entities(void)
{
    Channeldpb__ChannelDataMergeOptions mo = CHANNELDPB__CHANNEL_DATA_MERGE_OPTIONS__INIT;
    mo.listsizelimit = 32;
    mo.truncatetop = 1;
    for (int i = 0; i < B.o.clients; i++) {
        ent_t *e = &B.ents[i];
        e->id = B.o.entity_start + (uint32_t)i;
        e->x = B.x0 + (0.001 + 0.998 * rnd()) * (B.x1 - B.x0);
        e->z = B.z0 + (0.001 + 0.998 * rnd()) * (B.z1 - B.z0);
        e->heading = rnd() * 2 * M_PI;
        e->owner = cell_owner(e->x, e->z);
        const region_t *cell = region_at(e->x, e->z);
        if (e->owner < 0 || !cell || !B.srv[e->owner].cu) {
            B.err = CQ_EDECODE;
            return;
        }
        uint8_t buf[128];
        size_t n = pack_entity(e, buf, sizeof(buf));
        chanq_channel_data_t d = {URL_ENTITY, buf, n, &mo};
        chanq_client_create_entity(chanq_uv_client(B.srv[e->owner].cu), 0, cell->chan, e->id, "sb",
                                   NULL, &d, false);
    }
}

static void send_interests(void)
{
    double r = B.o.radius_cells * B.cell_w;
    for (int i = 0; i < B.o.clients; i++) {
        ent_t *e = &B.ents[i];
        peer_t *c = &B.cli[i], *s = &B.srv[e->owner];
        if (c->conn_id && s->cu)
            chanq_client_interest_sphere(chanq_uv_client(s->cu), 0, 0, c->conn_id,
                                         (chanq_vec3_t){e->x, 0, e->z}, r);
    }
}

static void step(ent_t *e, double dt)
{
    double speed = B.o.speed_cells * B.cell_w;
    e->heading += (rnd() - 0.5) * 0.6;
    double nx = e->x + cos(e->heading) * speed * dt, nz = e->z + sin(e->heading) * speed * dt;
    if (nx < B.x0 + 1 || nx > B.x1 - 1) {
        e->heading = M_PI - e->heading;
        nx = fmin(fmax(nx, B.x0 + 1), B.x1 - 1);
    }
    if (nz < B.z0 + 1 || nz > B.z1 - 1) {
        e->heading = -e->heading;
        nz = fmin(fmax(nz, B.z0 + 1), B.z1 - 1);
    }
    e->x = nx;
    e->z = nz;
}

/* Sends the updates due by now: entity i is due at slot i of each 1/rate period. */
static void send_updates(uint64_t now)
{
    uint64_t period = (uint64_t)(1e9 / B.o.rate), slot = period / (uint64_t)B.o.clients;
    if (slot == 0)
        slot = 1;
    while (B.next_update_ns <= now) {
        ent_t *e = &B.ents[B.cursor];
        step(e, 1.0 / B.o.rate);
        e->seq++;
        e->sent_ns[e->seq % RING] = bench_now_ns();
        uint8_t buf[128];
        size_t n = pack_entity(e, buf, sizeof(buf));
        peer_t *s = &B.srv[e->owner];
        if (s->cu &&
            chanq_client_data_update(chanq_uv_client(s->cu), e->id, URL_ENTITY, buf, n) == 0 &&
            B.phase == 2)
            B.updates++;
        B.cursor = (B.cursor + 1) % (size_t)B.o.clients;
        B.next_update_ns += slot;
    }
}

/* Once a second while measuring: the ideal fan-outs of the current subscriptions. */
static void add_ideal(void)
{
    for (int i = 0; i < B.o.clients; i++)
        for (size_t j = 0; j < B.cli[i].n_subs; j++) {
            uint32_t iv = B.cli[i].subs[j].interval ? B.cli[i].subs[j].interval : 20;
            B.ideal += fmin(1000.0 / iv, B.o.rate);
        }
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
    } else if (stage == 1 && B.created_srv == B.o.servers && B.ready >= B.o.servers &&
               B.n_regions) {
        for (int k = 0; k < B.o.servers; k++) {
            const region_t *r = region_of_chan(B.srv[k].first_cell);
            B.srv[k].index = r ? (int)r->server_index : -1;
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
        B.next_update_ns = B.next_interest_ns = now;
        B.t_measure = now + (uint64_t)(B.o.warmup * 1e9);
        B.t_end = B.t_measure + (uint64_t)(B.o.seconds * 1e9);
    }
    if (B.phase == 1 && now >= B.t_measure) {
        B.phase = 2;
        B.cpu0 = B.o.pid ? bench_proc_cpu_s(B.o.pid, NULL) : 0;
        B.next_ideal_ns = now + 1000000000ull;
    }
    if (B.phase == 1 || B.phase == 2) {
        send_updates(now);
        if (now >= B.next_interest_ns) {
            send_interests();
            B.next_interest_ns += 1000000000ull;
        }
    }
    if (B.phase == 2 && now >= B.next_ideal_ns) {
        add_ideal();
        B.next_ideal_ns += 1000000000ull;
    }
    if (B.phase == 2 && now >= B.t_end) {
        B.phase = 3;
        B.t_end = now + 1000000000ull; /* drain: the last handovers */
    }
    if (B.phase == 3 && now >= B.t_end)
        B.phase = 4;
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
        n += cell_owner(B.ents[i].x, B.ents[i].z) != B.ents[i].owner;
    return n;
}

static void report(double cpu_s)
{
    double secs = B.o.seconds;
    printf("{\"servers\":%d,\"clients\":%d,\"rate\":%g,\"seconds\":%g,\"created\":%d,"
           "\"updates\":%" PRIu64 ",\"updates_per_s\":%.0f,\"fanouts\":%" PRIu64
           ",\"fanouts_per_s\":%.0f,\"ideal_per_s\":%.0f,\"handovers\":%" PRIu64
           ",\"handovers_per_s\":%.1f,\"lost_handovers\":%d,\"gaps\":%" PRIu64 ",\"dups\":%" PRIu64
           ",\"cpu_cores\":%.3f",
           B.o.servers, B.o.clients, B.o.rate, secs, B.created_ent, B.updates, B.updates / secs,
           B.fanouts, B.fanouts / secs, B.ideal / secs, B.handovers, B.handovers / secs,
           lost_handovers(), B.gaps, B.dups, cpu_s >= 0 ? cpu_s / secs : -1.0);
    for (int b = 0; b < N_BUCKETS; b++) {
        lat_t *l = &B.lat[b];
        if (l->n)
            qsort(l->us, l->n, sizeof(*l->us), cmp_u32);
        char name[16];
        snprintf(name, sizeof(name), b < N_BUCKETS - 1 ? "%u" : "other", bucket_iv[b]);
        printf(",\"lat_%s\":{\"n\":%zu,\"p50_ms\":%.2f,\"p99_ms\":%.2f}", name, l->n, pct(l, 0.5),
               pct(l, 0.99));
    }
    printf(",\"ok\":%s}\n", B.err ? "false" : "true");
}

/* ---- options and main --------------------------------------------------------------------------
 */

static int parse_opts(opts_t *o, int argc, char **argv)
{
    static const struct option lo[] = {{"server", 1, 0, 'S'},
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
                                       {0, 0, 0, 0}};
    *o = (opts_t){"127.0.0.1", 11288, 9, 2000, 10, 10, 2, 1.5, 0.5, 1, CHANQ_ENTITY_CHAN_START,
                  0,           false};
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'S': {
            const char *colon = strrchr(optarg, ':');
            if (!colon || (size_t)(colon - optarg) >= sizeof(o->host))
                return -EINVAL;
            memcpy(o->host, optarg, (size_t)(colon - optarg));
            o->host[colon - optarg] = '\0';
            o->port = atoi(colon + 1);
            break;
        }
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
        default:
            return -EINVAL;
        }
    }
    if (o->servers < 1 || o->servers > MAX_SRV || o->clients < 1 || o->rate <= 0 ||
        o->seconds <= 0 || o->port <= 0 || o->port > 65535)
        return -EINVAL;
    return 0;
}

int main(int argc, char **argv)
{
    if (parse_opts(&B.o, argc, argv) < 0) {
        fprintf(stderr, "usage: spatialbench [--server H:P] [--servers 9] [--clients 2000] "
                        "[--rate 10] [--seconds 10] [--warmup 2] [--radius 1.5 (cells)] "
                        "[--speed 0.5 (cells/s)] [--seed N] [--entity-start ID] [--pid N] "
                        "[--check]\n");
        return 2;
    }
    B.loop = uv_default_loop();
    B.srv = cq_calloc((size_t)B.o.servers, sizeof(*B.srv));
    B.cli = cq_calloc((size_t)B.o.clients, sizeof(*B.cli));
    B.ents = cq_calloc((size_t)B.o.clients, sizeof(*B.ents));
    if (!B.srv || !B.cli || !B.ents)
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
    double cpu = B.o.pid ? bench_proc_cpu_s(B.o.pid, NULL) - B.cpu0 : -1;
    report(cpu);
    int rc = B.err ? 1 : 0;
    if (!rc && B.o.check &&
        (B.created_ent != B.o.clients || B.updates == 0 || B.fanouts == 0 || lost_handovers()))
        rc = 3;
    for (int i = 0; i < B.o.clients; i++)
        cq_free(B.cli[i].subs);
    for (int b = 0; b < N_BUCKETS; b++)
        cq_free(B.lat[b].us);
    cq_free(B.regions);
    cq_free(B.srv);
    cq_free(B.cli);
    cq_free(B.ents);
    uv_loop_close(B.loop);
    return rc;
}
