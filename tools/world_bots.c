/* world_bots.c - spatial servers and wandering entities for chanq's browser world (issue 12).
 *
 * Connects --servers spatial servers (2 by default, for the 4x1 layout; any layout works: the
 * server count must equal its ServerCols x ServerRows) to chanqd's server listener, creates the
 * spatial channels (CREATE_SPATIAL_CHANNEL with an empty chanqworld.SpatialChannelData), then
 * creates --entities entity channels (ids from --entity-start, 0x80000) each owned by the server
 * whose cell holds it, and walks them at random inside the world, sending an EntityChannelData
 * update (transform.position, seq, trail [seq]) per entity --rate times a second.
 *
 * Ownership follows chanqd: an entity's updates go through the connection that owns it, and
 * that changes when a server receives CHANNEL_DATA_HANDOVER as the destination cell's owner, or
 * a SUB result with WRITE access on the entity channel for itself (whichever comes first).
 *
 * --player-conn ID --interest-radius R: once a second the owner of the first entity sends
 * UPDATE_SPATIAL_INTEREST {sphere at the entity, radius R} for client connection ID, so a
 * browser (or any client) sees one player's interest move.
 *
 * At the end it prints one line of JSON: updates sent, handovers seen (entities handed to a
 * destination owner), handover messages received by the servers, owner changes, and
 * stale_owners (entities whose cell's server is not the owner they ended with, after a drain).
 * Exit status: 0, 1 on a setup failure, 2 on bad options.
 */
#include "chanq_spatial.h"
#include "chanq_sync.h"
#include "cq_alloc.h"
#include "world.pb-c.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SRV     16
#define STUB_CREATE 1
#define WAIT_MS     5000
#define URL_ENTITY  "type.googleapis.com/chanqworld.EntityChannelData"
#define URL_CELLS   "type.googleapis.com/chanqworld.SpatialChannelData"

typedef struct opts {
    char host[256];
    uint16_t port;
    int servers;
    int entities;
    double rate;
    double seconds;
    double speed; /* world units per second; 0 = a quarter cell */
    uint32_t seed;
    uint32_t entity_start;
    uint32_t player_conn;
    double interest_radius;
} opts_t;

typedef struct region {
    uint32_t chan;
    uint32_t server_index;
    double x0, z0, x1, z1;
} region_t;

typedef struct srv {
    chanq_sync_t *s;
    uint32_t conn_id;
    int index;    /* server index of its cells (from the regions); -1 before */
    bool created; /* got its CreateSpatialChannelsResult */
} srv_t;

typedef struct ent {
    uint32_t id;
    double x, z, heading;
    int owner; /* index into world_t.srv */
    uint32_t seq;
    uint32_t color;
    bool created;
} ent_t;

typedef struct world {
    opts_t o;
    srv_t srv[MAX_SRV];
    region_t *regions;
    size_t n_regions;
    double x0, z0, x1, z1, cell_w;
    ent_t *ents;
    uint32_t *cell_owner_tmp; /* per server: the first cell of its CreateSpatialChannelsResult */
    int ready, created;
    uint64_t updates, handovers, handover_msgs, owner_changes;
    uint32_t rng;
} world_t;

/* ---- small helpers ------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* xorshift32: reproducible walks from --seed. */
static double rnd(world_t *w)
{
    uint32_t x = w->rng;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    w->rng = x;
    return (double)x / 4294967296.0;
}

static const region_t *region_at(const world_t *w, double x, double z)
{
    for (size_t i = 0; i < w->n_regions; i++) {
        const region_t *r = &w->regions[i];
        if (x >= r->x0 && x < r->x1 && z >= r->z0 && z < r->z1)
            return r;
    }
    return NULL;
}

static const region_t *region_of_chan(const world_t *w, uint32_t chan)
{
    for (size_t i = 0; i < w->n_regions; i++)
        if (w->regions[i].chan == chan)
            return &w->regions[i];
    return NULL;
}

/* The connection (index into w->srv) that owns server index si, or -1. */
static int srv_of_index(const world_t *w, uint32_t si)
{
    for (int k = 0; k < w->o.servers; k++)
        if (w->srv[k].index == (int)si)
            return k;
    return -1;
}

static int cell_owner(const world_t *w, double x, double z)
{
    const region_t *r = region_at(w, x, z);
    return r ? srv_of_index(w, r->server_index) : -1;
}

static ent_t *ent_of(world_t *w, uint32_t id)
{
    if (id < w->o.entity_start || id - w->o.entity_start >= (uint32_t)w->o.entities)
        return NULL;
    return &w->ents[id - w->o.entity_start];
}

static void set_owner(world_t *w, ent_t *e, int k)
{
    if (e->owner != k) {
        e->owner = k;
        w->owner_changes++;
    }
}

/* ---- inbound -------------------------------------------------------------------------------- */

static void on_regions(world_t *w, const chanq_msg_t *m)
{
    Channeldpb__SpatialRegionsUpdateMessage *ru = NULL;
    if (chanq_decode_spatial_regions(m, &ru) < 0 || ru->n_regions == 0) {
        chanq_unpack_free(ru);
        return;
    }
    region_t *rs = cq_calloc(ru->n_regions, sizeof(*rs));
    if (!rs) {
        chanq_unpack_free(ru);
        return;
    }
    w->x0 = w->z0 = INFINITY;
    w->x1 = w->z1 = -INFINITY;
    for (size_t i = 0; i < ru->n_regions; i++) {
        const Channeldpb__SpatialRegion *r = ru->regions[i];
        rs[i] =
            (region_t){r->channelid, r->serverindex, r->min->x, r->min->z, r->max->x, r->max->z};
        w->x0 = fmin(w->x0, r->min->x);
        w->z0 = fmin(w->z0, r->min->z);
        w->x1 = fmax(w->x1, r->max->x);
        w->z1 = fmax(w->z1, r->max->z);
    }
    w->cell_w = rs[0].x1 - rs[0].x0;
    cq_free(w->regions);
    w->regions = rs;
    w->n_regions = ru->n_regions;
    chanq_unpack_free(ru);
}

static void on_create_result(world_t *w, int k, const chanq_msg_t *m)
{
    Channeldpb__CreateSpatialChannelsResultMessage *r = NULL;
    if (m->stub_id != STUB_CREATE || chanq_decode_spatial_create_result(m, &r) < 0)
        return;
    w->srv[k].created = true;
    /* The server index comes from the regions of this first cell (create_spatial maps it once
     * the regions are known). */
    if (r->n_spatialchannelid)
        w->cell_owner_tmp[k] = r->spatialchannelid[0];
    chanq_unpack_free(r);
}

/* A SUB result with WRITE on an entity channel for this server: it owns the entity now. */
static void on_sub_result(world_t *w, int k, const chanq_msg_t *m)
{
    ent_t *e = ent_of(w, m->channel_id);
    if (!e)
        return;
    Channeldpb__SubscribedToChannelResultMessage *r = chanq_unpack(
        &channeldpb__subscribed_to_channel_result_message__descriptor, m->body, m->body_len);
    if (r && r->connid == w->srv[k].conn_id && r->suboptions && r->suboptions->has_dataaccess &&
        r->suboptions->dataaccess == CHANNELDPB__CHANNEL_DATA_ACCESS__WRITE_ACCESS)
        set_owner(w, e, k);
    chanq_unpack_free(r);
}

/* CHANNEL_DATA_HANDOVER at server k: if k owns the destination cell, it owns the moved
 * entities (the SpatialChannelData's keys) from now on. */
static void on_handover(world_t *w, int k, const chanq_msg_t *m)
{
    Channeldpb__ChannelDataHandoverMessage *h = NULL;
    if (chanq_decode_handover(m, &h) < 0)
        return;
    w->handover_msgs++;
    const region_t *dst = region_of_chan(w, h->dstchannelid);
    bool mine = dst && srv_of_index(w, dst->server_index) == k;
    Chanqworld__SpatialChannelData *d = NULL;
    if (mine && h->data)
        d = chanqworld__spatial_channel_data__unpack(chanq_pb_allocator(), h->data->value.len,
                                                     h->data->value.data);
    for (size_t i = 0; d && i < d->n_entities; i++) {
        ent_t *e = ent_of(w, d->entities[i]->key);
        if (e) {
            w->handovers++;
            set_owner(w, e, k);
        }
    }
    if (d)
        chanqworld__spatial_channel_data__free_unpacked(d, chanq_pb_allocator());
    chanq_unpack_free(h);
}

static void on_msg(world_t *w, int k, const chanq_msg_t *m)
{
    switch (m->msg_type) {
    case CHANNELDPB__MESSAGE_TYPE__CREATE_SPATIAL_CHANNEL:
        on_create_result(w, k, m);
        break;
    case CHANNELDPB__MESSAGE_TYPE__SPATIAL_REGIONS_UPDATE:
        on_regions(w, m);
        break;
    case CHANNELDPB__MESSAGE_TYPE__SPATIAL_CHANNELS_READY:
        w->ready++;
        break;
    case CHANNELDPB__MESSAGE_TYPE__CREATE_ENTITY_CHANNEL: {
        ent_t *e = NULL;
        Channeldpb__CreateChannelResultMessage *r = NULL;
        if (chanq_decode_entity_create_result(m, &r) == 0)
            e = ent_of(w, r->channelid);
        if (e && !e->created) {
            e->created = true;
            w->created++;
        }
        chanq_unpack_free(r);
        break;
    }
    case CHANNELDPB__MESSAGE_TYPE__SUB_TO_CHANNEL:
        on_sub_result(w, k, m);
        break;
    case CHANNELDPB__MESSAGE_TYPE__CHANNEL_DATA_HANDOVER:
        on_handover(w, k, m);
        break;
    default:
        break;
    }
}

/* Waits up to timeout_ms for input on any server, then handles every message received.
 * Returns 0, or the error of a connection that failed. */
static int pump(world_t *w, int timeout_ms)
{
    struct pollfd p[MAX_SRV];
    for (int k = 0; k < w->o.servers; k++)
        p[k] = (struct pollfd){chanq_sync_fd(w->srv[k].s), POLLIN, 0};
    bool queued = false;
    for (int k = 0; k < w->o.servers; k++)
        queued = queued || chanq_sync_queued(w->srv[k].s) > 0;
    if (poll(p, (nfds_t)w->o.servers, queued ? 0 : timeout_ms) < 0 && errno != EINTR)
        return -errno;
    for (int k = 0; k < w->o.servers; k++) {
        chanq_owned_msg_t om;
        int r;
        while ((r = chanq_sync_recv(w->srv[k].s, &om, 0)) == 0) {
            chanq_msg_t m = {om.channel_id, om.broadcast, om.stub_id,
                             om.msg_type,   om.body,      om.body_len};
            on_msg(w, k, &m);
            chanq_owned_msg_done(&om);
        }
        if (r != CQ_ETIMEOUT)
            return r;
    }
    return 0;
}

/* Pumps until *done reaches want or WAIT_MS pass. Returns 0 or an error (CQ_ETIMEOUT). */
static int pump_until(world_t *w, const int *done, int want)
{
    double end = now_s() + WAIT_MS / 1000.0;
    while (*done < want) {
        if (now_s() > end)
            return CQ_ETIMEOUT;
        int r = pump(w, 50);
        if (r < 0)
            return r;
    }
    return 0;
}

/* ---- setup -------------------------------------------------------------------------------- */

static int connect_servers(world_t *w)
{
    for (int k = 0; k < w->o.servers; k++) {
        int r = chanq_sync_connect(w->o.host, w->o.port, NULL, WAIT_MS, &w->srv[k].s);
        if (r < 0)
            return r;
        char pit[32];
        snprintf(pit, sizeof(pit), "world-bot-%d", k);
        int res = -1;
        r = chanq_sync_auth(w->srv[k].s, pit, "", WAIT_MS, &res, &w->srv[k].conn_id);
        if (r < 0 || res != 0)
            return r < 0 ? r : CQ_EAUTH;
        w->srv[k].index = -1;
    }
    return 0;
}

static int create_spatial(world_t *w)
{
    chanq_channel_data_t d = {URL_CELLS, "", 0, NULL};
    for (int k = 0; k < w->o.servers; k++) {
        int r = chanq_client_create_spatial(chanq_sync_client(w->srv[k].s), STUB_CREATE, "world",
                                            NULL, &d);
        if (r == 0)
            r = chanq_sync_flush(w->srv[k].s, WAIT_MS);
        if (r < 0)
            return r;
        double end = now_s() + WAIT_MS / 1000.0;
        while (!w->srv[k].created && now_s() < end)
            if ((r = pump(w, 50)) < 0)
                return r;
        if (!w->srv[k].created)
            return CQ_ETIMEOUT;
    }
    int r = pump_until(w, &w->ready, w->o.servers);
    if (r < 0 || w->n_regions == 0)
        return r < 0 ? r : CQ_EDECODE;
    for (int k = 0; k < w->o.servers; k++) {
        const region_t *reg = region_of_chan(w, w->cell_owner_tmp[k]);
        if (!reg)
            return CQ_EDECODE;
        w->srv[k].index = (int)reg->server_index;
    }
    return 0;
}

static size_t pack_entity(const ent_t *e, bool full, uint8_t *buf, size_t cap)
{
    Chanqworld__Vector3f pos = CHANQWORLD__VECTOR3F__INIT;
    Chanqworld__TransformState tr = CHANQWORLD__TRANSFORM_STATE__INIT;
    Chanqworld__EntityChannelData d = CHANQWORLD__ENTITY_CHANNEL_DATA__INIT;
    char name[32];
    uint32_t trail = e->seq;
    pos.x = (float)e->x;
    pos.z = (float)e->z;
    tr.position = &pos;
    d.transform = &tr;
    d.seq = e->seq;
    d.n_trail = 1;
    d.trail = &trail;
    if (full) {
        snprintf(name, sizeof(name), "bot-%" PRIu32, e->id);
        d.name = name;
        d.color = e->color;
    }
    size_t n = chanqworld__entity_channel_data__get_packed_size(&d);
    return n <= cap ? chanqworld__entity_channel_data__pack(&d, buf) : 0;
}

static int create_entities(world_t *w)
{
    Channeldpb__ChannelDataMergeOptions mo = CHANNELDPB__CHANNEL_DATA_MERGE_OPTIONS__INIT;
    mo.listsizelimit = 32; /* keeps the trail bounded: the last 32 seqs */
    mo.truncatetop = 1;
    for (int i = 0; i < w->o.entities; i++) {
        ent_t *e = &w->ents[i];
        e->id = w->o.entity_start + (uint32_t)i;
        e->x = w->x0 + rnd(w) * (w->x1 - w->x0);
        e->z = w->z0 + rnd(w) * (w->z1 - w->z0);
        e->heading = rnd(w) * 2 * M_PI;
        e->color = (uint32_t)(rnd(w) * 0xffffff);
        e->owner = cell_owner(w, e->x, e->z);
        const region_t *cell = region_at(w, e->x, e->z);
        if (e->owner < 0 || !cell)
            return CQ_EDECODE;
        uint8_t buf[256];
        size_t n = pack_entity(e, true, buf, sizeof(buf));
        chanq_channel_data_t d = {URL_ENTITY, buf, n, &mo};
        int r = chanq_client_create_entity(chanq_sync_client(w->srv[e->owner].s), 0, cell->chan,
                                           e->id, "bot", NULL, &d, false);
        if (r < 0)
            return r;
    }
    for (int k = 0; k < w->o.servers; k++) {
        int r = chanq_sync_flush(w->srv[k].s, WAIT_MS);
        if (r < 0)
            return r;
    }
    return pump_until(w, &w->created, w->o.entities);
}

/* ---- the walk ------------------------------------------------------------------------------ */

static void step(world_t *w, ent_t *e, double dt)
{
    double speed = w->o.speed > 0 ? w->o.speed : w->cell_w / 4;
    e->heading += (rnd(w) - 0.5) * 0.6;
    double nx = e->x + cos(e->heading) * speed * dt;
    double nz = e->z + sin(e->heading) * speed * dt;
    /* Bounce off the world's edges (1 unit inside, so the position stays on the grid). */
    if (nx < w->x0 + 1 || nx > w->x1 - 1) {
        e->heading = M_PI - e->heading;
        nx = fmin(fmax(nx, w->x0 + 1), w->x1 - 1);
    }
    if (nz < w->z0 + 1 || nz > w->z1 - 1) {
        e->heading = -e->heading;
        nz = fmin(fmax(nz, w->z0 + 1), w->z1 - 1);
    }
    e->x = nx;
    e->z = nz;
}

static int tick(world_t *w, double dt)
{
    for (int i = 0; i < w->o.entities; i++) {
        ent_t *e = &w->ents[i];
        step(w, e, dt);
        e->seq++;
        uint8_t buf[256];
        size_t n = pack_entity(e, false, buf, sizeof(buf));
        int r = chanq_client_data_update(chanq_sync_client(w->srv[e->owner].s), e->id, URL_ENTITY,
                                         buf, n);
        if (r < 0)
            return r;
        w->updates++;
    }
    for (int k = 0; k < w->o.servers; k++) {
        int r = chanq_sync_flush(w->srv[k].s, WAIT_MS);
        if (r < 0)
            return r;
    }
    return 0;
}

static int send_interest(world_t *w)
{
    const ent_t *e = &w->ents[0];
    chanq_sync_t *s = w->srv[e->owner].s;
    int r = chanq_client_interest_sphere(chanq_sync_client(s), 0, 0, w->o.player_conn,
                                         (chanq_vec3_t){e->x, 0, e->z}, w->o.interest_radius);
    return r < 0 ? r : chanq_sync_flush(s, WAIT_MS);
}

static int run(world_t *w)
{
    double period = 1.0 / w->o.rate, start = now_s(), next = start, next_interest = start;
    while (next - start < w->o.seconds) {
        int r;
        if (w->o.player_conn && w->o.entities > 0 && now_s() >= next_interest) {
            if ((r = send_interest(w)) < 0)
                return r;
            next_interest += 1.0;
        }
        if ((r = tick(w, period)) < 0)
            return r;
        next += period;
        double wait;
        while ((wait = next - now_s()) > 0)
            if ((r = pump(w, (int)(wait * 1000) + 1)) < 0)
                return r;
    }
    /* Drain: handovers triggered by the last updates. */
    double end = now_s() + 0.5;
    while (now_s() < end) {
        int r = pump(w, 50);
        if (r < 0)
            return r;
    }
    return 0;
}

static int stale_owners(const world_t *w)
{
    int n = 0;
    for (int i = 0; i < w->o.entities; i++)
        if (cell_owner(w, w->ents[i].x, w->ents[i].z) != w->ents[i].owner)
            n++;
    return n;
}

/* ---- options and main ---------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: world_bots [--server HOST:PORT] [--servers N] [--entities N] [--rate HZ]\n"
               "  [--seconds S] [--speed U/S] [--seed N] [--entity-start ID]\n"
               "  [--player-conn ID --interest-radius R]\n");
}

static int parse_hostport(opts_t *o, const char *s)
{
    const char *colon = strrchr(s, ':');
    if (!colon || (size_t)(colon - s) >= sizeof(o->host))
        return -EINVAL;
    memcpy(o->host, s, (size_t)(colon - s));
    o->host[colon - s] = '\0';
    long p = strtol(colon + 1, NULL, 10);
    if (p <= 0 || p > 65535)
        return -EINVAL;
    o->port = (uint16_t)p;
    return 0;
}

static int parse_opts(opts_t *o, int argc, char **argv)
{
    static const struct option lo[] = {{"server", 1, 0, 'S'},      {"servers", 1, 0, 'n'},
                                       {"entities", 1, 0, 'e'},    {"rate", 1, 0, 'r'},
                                       {"seconds", 1, 0, 't'},     {"speed", 1, 0, 'v'},
                                       {"seed", 1, 0, 's'},        {"entity-start", 1, 0, 'E'},
                                       {"player-conn", 1, 0, 'p'}, {"interest-radius", 1, 0, 'R'},
                                       {"help", 0, 0, 'h'},        {0, 0, 0, 0}};
    *o = (opts_t){"127.0.0.1", 11288, 2, 20, 10, 30, 0, 1, CHANQ_ENTITY_CHAN_START, 0, 1500};
    int ch;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'S':
            if (parse_hostport(o, optarg) < 0)
                return -EINVAL;
            break;
        case 'n':
            o->servers = atoi(optarg);
            break;
        case 'e':
            o->entities = atoi(optarg);
            break;
        case 'r':
            o->rate = atof(optarg);
            break;
        case 't':
            o->seconds = atof(optarg);
            break;
        case 'v':
            o->speed = atof(optarg);
            break;
        case 's':
            o->seed = (uint32_t)strtoul(optarg, NULL, 0);
            break;
        case 'E':
            o->entity_start = (uint32_t)strtoul(optarg, NULL, 0);
            break;
        case 'p':
            o->player_conn = (uint32_t)strtoul(optarg, NULL, 0);
            break;
        case 'R':
            o->interest_radius = atof(optarg);
            break;
        default:
            return -EINVAL;
        }
    }
    if (o->servers < 1 || o->servers > MAX_SRV || o->entities < 0 || o->rate <= 0 ||
        o->seconds < 0 || o->interest_radius <= 0)
        return -EINVAL;
    return 0;
}

static void world_free(world_t *w)
{
    for (int k = 0; k < w->o.servers; k++)
        chanq_sync_free(w->srv[k].s);
    cq_free(w->regions);
    cq_free(w->ents);
    cq_free(w->cell_owner_tmp);
}

int main(int argc, char **argv)
{
    static world_t w;
    if (parse_opts(&w.o, argc, argv) < 0) {
        usage(stderr);
        return 2;
    }
    w.rng = w.o.seed ? w.o.seed : 1;
    w.ents = cq_calloc((size_t)w.o.entities + 1, sizeof(*w.ents));
    w.cell_owner_tmp = cq_calloc(MAX_SRV, sizeof(*w.cell_owner_tmp));
    const char *stage = "alloc";
    int r = w.ents && w.cell_owner_tmp ? 0 : -ENOMEM;
    if (r == 0 && (r = connect_servers(&w)) < 0)
        stage = "connect";
    if (r == 0 && (r = create_spatial(&w)) < 0)
        stage = "create spatial channels";
    if (r == 0 && (r = create_entities(&w)) < 0)
        stage = "create entities";
    if (r == 0 && (r = run(&w)) < 0)
        stage = "run";
    if (r < 0)
        fprintf(stderr, "world_bots: %s: %s\n", stage, cq_strerror(r));
    printf("{\"entities\":%d,\"servers\":%d,\"created\":%d,\"updates_sent\":%" PRIu64
           ",\"handovers_seen\":%" PRIu64 ",\"handover_msgs\":%" PRIu64
           ",\"owner_changes\":%" PRIu64 ",\"stale_owners\":%d,\"ok\":%s}\n",
           w.o.entities, w.o.servers, w.created, w.updates, w.handovers, w.handover_msgs,
           w.owner_changes, r == 0 ? stale_owners(&w) : -1, r == 0 ? "true" : "false");
    world_free(&w);
    return r < 0 ? 1 : 0;
}
