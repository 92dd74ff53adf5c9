/* route.c - route bindings' catch-up (cq_route.h): rings of recent routed events with their
 * keys, the cache of players' acknowledged offsets and its batched writes, sessions that walk
 * a logged-in player's cursors up to the live stream, and shared (single-flight) store reads.
 *
 * A session's life: login -> (offset reads, for players not cached) -> walk: per binding, from
 * the ring when it holds everything after the cursor, else through store reads shared by every
 * session at the same place -> a chunk once it holds chunk_events events or every cursor is
 * live -> more, walk ... -> FINAL (every cursor at its live offset when the chunk is made).
 * A cursor only moves forward, over events handed out or not the player's, so none is sent
 * twice and none is skipped. */
#include "cq_route.h"

#include "bridge_int.h"

#include "bridge.pb-c.h"
#include "cq_alloc.h"
#include "cq_bridge.h"
#include "cq_err.h"
#include "cq_map.h"
#include "cq_util.h"
#include "cq_smap.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define BINDS_MAX 64

/* A key's entries in a ring, chained oldest first by sequence number (1-based, each entry's
 * place in the ring's history): a login walks its own events only, not the whole ring (which
 * cost players x events, 41 % of chanqd in strcmp at 10,000 logins). */
typedef struct kent {
    char *key; /* owned; the ring's key index holds this pointer */
    uint64_t first, last;
} kent_t;

typedef struct rent {
    uint64_t offset;
    uint64_t next; /* the sequence number of the next entry of the same key (0: none) */
    kent_t *k;
    cq_buf_t *ev;
    bool dropped; /* invalidated (cq_route_drop): no catch-up delivers it */
} rent_t;

/* One route binding on one shard (a stream): its topic and key field, and the ring of its
 * routed events from that shard. The ring holds every routed event with offset > ring_from
 * (complete from there on). */
typedef struct rbind {
    char topic[65];
    char field[65];
    uint32_t shard;
    uint32_t msg_type;
    rent_t *ring;
    uint32_t head, n, cap;
    uint64_t epoch, ring_from;
    size_t bytes;
    uint64_t head_seq; /* the sequence number of the oldest entry */
    cq_smap_t keys;    /* key -> kent_t */
} rbind_t;

#define UNANCHORED UINT64_MAX /* ring_from before the ring saw an event: never trusted */

/* A player's acknowledged offset in a binding's topic. */
typedef struct oent {
    char mkey[65 + 11 + 129 + 2]; /* topic \x1f shard \x1f consumer id: the map's key */
    char topic[65];
    uint32_t shard;
    char consumer[129];
    uint64_t offset;     /* the highest acknowledged (or read from the store) */
    uint64_t committed;  /* what the store has, as far as this engine knows */
    uint64_t commit_ms;  /* the last write's time */
    bool known;          /* offset is the player's (read from the store, or acknowledged) */
    bool dirty, writing; /* offset not written yet; a write in flight */
    uint64_t tag;        /* the read or write in flight (0: none; READ_AGAIN: a read to redo) */
    uint32_t *waiters;   /* the logins waiting for its read (conn ids) */
    uint32_t nw, capw;
    cq_list_t get_node; /* in the queue of reads waiting for a slot (get_wait) */
} oent_t;

#define READ_AGAIN UINT64_MAX

enum { P_GET = 1, P_WALK, P_READ, P_SEND, P_MORE, P_RETRY };

typedef struct rsess {
    uint32_t conn_id;
    char key[CQ_BRIDGE_KEY_MAX + 1];
    uint8_t phase;
    uint32_t gets;           /* offset reads still awaited */
    uint64_t cur[BINDS_MAX]; /* the last offset looked at, per binding */
    uint64_t read_id;        /* the shared read it waits for (0: none) */
    int read_b;              /* its binding */
    cq_resume_ev_t *evs;     /* the next chunk's events */
    size_t nevs, cap;
    uint64_t last_ms;
    cq_list_t ready_node;      /* in the pace's queue while it waits for a place for a chunk */
    struct rsess *next_in_row; /* a read's waiters with one key (rows_apply) */
} rsess_t;

#define AWAITED UINT64_MAX /* a cursor whose start is being read */

/* A store read, shared by the sessions at the same (binding, from). */
typedef struct rread {
    uint64_t id;
    int b;
    uint64_t from;
    char skey[48]; /* "<b>:<from>": the shared-read index's key */
    uint32_t *conns;
    uint32_t n, cap;
    bool issued;
    uint64_t queued_ms;      /* when it was asked for */
    struct rread *next_wait; /* reads waiting for a slot */
} rread_t;

/* Why a read waits while logins still wait for their offsets: a mass login's offset reads
 * finish in batches (gets_max at a time), and a scan issued for the first batch would be
 * answered before the next batch is ready to join it; each batch would scan the topic again
 * (175 scans of 100,000 rows for 10,000 players, measured). Waiting until the offsets are in,
 * or READ_HOLD_MS at most (logins keep coming), lets them all join one read. 10,000 logins
 * spread over a second (their AUTHs) made 3 scans, where each batch of 64 made its own: 175. */
#define READ_HOLD_MS 1000

typedef struct anode {
    cq_route_action_t a;
    struct anode *next;
} anode_t;

struct cq_route {
    cq_route_limits_t lim;
    uint32_t own; /* this node's shard (its positions are in its store), or CQ_ROUTE_NO_SHARD */
    uint32_t shards[CQ_ROUTE_SHARDS_MAX]; /* a stream per binding and shard */
    uint32_t nshards;
    cq_resume_position_fn position;
    void *ud;
    rbind_t binds[BINDS_MAX];
    int nbinds;
    cq_map_t sessions; /* conn id -> rsess_t */
    cq_map_t reads;    /* read id (low 32 bits) -> rread_t */
    cq_smap_t shared;  /* "<b>:<from>" -> rread_t not yet answered */
    uint32_t reads_issued;
    rread_t *wait_head, *wait_tail;
    uint64_t next_id;
    cq_smap_t offsets;  /* oent_t by mkey */
    cq_map_t ops;       /* offset read / write tag (low 32 bits) -> oent_t */
    uint32_t ops_out;   /* offset reads and writes in flight */
    cq_list_t get_wait; /* offset reads waiting for a slot, in order (oent_t.get_node) */
    cq__pace_t pace;    /* chunks out at once (cq_route_applied) */
    uint32_t getting;   /* logins still waiting for an offset read */
    uint64_t now_ms, flush_ms;
    anode_t *act_head, *act_tail;
    cq_route_stats_t st;
};

/* ---- small parts ---------------------------------------------------------------------------- */

static anode_t *push_action(cq_route_t *r, int kind)
{
    anode_t *n = cq_calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    n->a.kind = kind;
    if (r->act_tail)
        r->act_tail->next = n;
    else
        r->act_head = n;
    r->act_tail = n;
    return n;
}

static uint64_t pushed_of(const cq_route_t *r, const rbind_t *b, uint64_t *epoch)
{
    uint64_t e = 0, pushed = 0;
    r->position(r->ud, b->topic, b->shard, &e, &pushed);
    if (epoch)
        *epoch = e;
    return pushed;
}

static uint64_t fnv(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* "bridge/<field>/<key>" when it is printable ASCII of at most max bytes, else the hash. */
static void id_of(const char *key_field, const char *key, int max, char *out)
{
    int n = snprintf(out, 129, "bridge/%s/%s", key_field, key);
    bool ok = n > 0 && n <= max;
    for (int i = 0; ok && i < n; i++)
        ok = out[i] >= 0x21 && out[i] <= 0x7e;
    if (ok)
        return;
    uint64_t a = fnv(fnv(fnv(0xcbf29ce484222325ull, key_field), "/"), key);
    uint64_t b = fnv(fnv(fnv(0x84222325cbf29ce4ull, key_field), "/"), key);
    snprintf(out, 129, "bridge#%016" PRIx64 "%016" PRIx64, a, b);
}

void cq_route_consumer_id(const char *key_field, const char *key, char *out)
{
    id_of(key_field, key, 128, out);
}

void cq_route_instance_id(const char *key_field, const char *key, char *out)
{
    id_of(key_field, key, CQ_ROUTE_INSTANCE_MAX, out);
}

/* The id of key's position in b: a consumer id in this node's store, or an instance id of the
 * follower's module on a followed shard. */
static void position_id(const cq_route_t *r, const rbind_t *b, const char *key, char *out)
{
    if (b->shard == r->own)
        cq_route_consumer_id(b->field, key, out);
    else
        cq_route_instance_id(b->field, key, out);
}

/* ---- the rings ------------------------------------------------------------------------------ */

static rent_t *ring_at(const rbind_t *b, uint32_t i)
{
    return &b->ring[(b->head + i) % b->cap];
}

static void ring_drop_oldest(rbind_t *b)
{
    rent_t *e = ring_at(b, 0);
    b->ring_from = e->offset; /* complete only after it now */
    b->bytes -= e->ev->len;
    cq_buf_unref(e->ev);
    kent_t *k = e->k; /* e is its key's oldest entry: entries leave in order */
    if (e->next) {
        k->first = e->next;
    } else {
        cq_smap_del(&b->keys, k->key);
        cq_free(k->key);
        cq_free(k);
    }
    *e = (rent_t){0};
    b->head = (b->head + 1) % b->cap;
    b->head_seq++;
    b->n--;
}

static rent_t *ring_seq(const rbind_t *b, uint64_t seq)
{
    return ring_at(b, (uint32_t)(seq - b->head_seq));
}

/* The key's index entry, made if it is new; NULL on OOM. */
static kent_t *key_of(rbind_t *b, const char *key)
{
    kent_t *k = cq_smap_get(&b->keys, key);
    if (k)
        return k;
    if (!(k = cq_calloc(1, sizeof(*k))) || !(k->key = cq_strdup(key)) ||
        cq_smap_put(&b->keys, k->key, k) < 0) {
        if (k)
            cq_free(k->key);
        cq_free(k);
        return NULL;
    }
    return k;
}

static void ring_clear(rbind_t *b)
{
    while (b->n)
        ring_drop_oldest(b);
}

/* Marks b's entry at offset dropped; true when b holds it. The ring is in offset order. */
static bool ring_drop_at(rbind_t *b, uint64_t offset)
{
    uint32_t lo = 0, hi = b->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ring_at(b, mid)->offset < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == b->n || ring_at(b, lo)->offset != offset || ring_at(b, lo)->dropped)
        return false;
    ring_at(b, lo)->dropped = true;
    return true;
}

bool cq_route_drop(cq_route_t *r, const char *topic, uint32_t shard, uint64_t offset)
{
    bool any = false;
    for (int i = 0; topic && i < r->nbinds; i++)
        if (r->binds[i].shard == shard && strcasecmp(r->binds[i].topic, topic) == 0)
            any |= ring_drop_at(&r->binds[i], offset);
    return any;
}

static int bind_index(const cq_route_t *r, const char *topic, const char *field, uint32_t shard)
{
    for (int i = 0; i < r->nbinds; i++)
        if (r->binds[i].shard == shard && strcasecmp(r->binds[i].topic, topic) == 0 &&
            strcmp(r->binds[i].field, field) == 0)
            return i;
    return -1;
}

void cq_route_live(cq_route_t *r, const char *topic, uint32_t shard, uint64_t epoch,
                   uint64_t offset, uint64_t prev_offset, const char *key_field, const char *key,
                   cq_buf_t *event)
{
    int i = topic && key_field ? bind_index(r, topic, key_field, shard) : -1;
    if (i < 0 || !event || !key)
        return;
    rbind_t *b = &r->binds[i];
    if (b->ring_from == UNANCHORED || epoch != b->epoch ||
        (b->n && offset <= ring_at(b, b->n - 1)->offset)) {
        /* the first event seen, or a new history: complete from this event on (no offset
         * exists between its prev_offset and it) */
        ring_clear(b);
        b->epoch = epoch;
        b->ring_from = prev_offset;
    }
    while (b->n && (b->n == b->cap || b->bytes + event->len > r->lim.ring_bytes))
        ring_drop_oldest(b);
    kent_t *k = event->len <= r->lim.ring_bytes ? key_of(b, key) : NULL;
    if (!k) {
        b->ring_from = offset; /* not kept: the ring no longer covers it */
        return;
    }
    uint64_t seq = b->head_seq + b->n;
    if (k->last)
        ring_seq(b, k->last)->next = seq;
    else
        k->first = seq;
    k->last = seq;
    rent_t *e = ring_at(b, b->n);
    *e = (rent_t){offset, 0, k, cq_buf_ref(event), false};
    b->bytes += event->len;
    b->n++;
}

/* ---- engine life ---------------------------------------------------------------------------- */

cq_route_t *cq_route_new(const cq_route_limits_t *lim, uint32_t shard,
                         cq_resume_position_fn position, void *ud)
{
    cq_route_t *r = cq_calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->lim = lim ? *lim : (cq_route_limits_t){0};
    cq_route_limits_t *l = &r->lim;
    l->ring_events = l->ring_events ? l->ring_events : 8192;
    l->ring_bytes = l->ring_bytes ? l->ring_bytes : 8u << 20;
    l->chunk_events = l->chunk_events ? l->chunk_events : 512;
    l->sessions_max = l->sessions_max ? l->sessions_max : 16384;
    l->reads_max = l->reads_max ? l->reads_max : 4;
    l->sends_max = l->sends_max ? l->sends_max : 32;
    l->cache_max = l->cache_max ? l->cache_max : 65536;
    l->gets_max = l->gets_max ? l->gets_max : 256;
    l->flush_ms = l->flush_ms ? l->flush_ms : 1000;
    l->idle_ms = l->idle_ms ? l->idle_ms : 60000;
    r->own = shard;
    if (shard != CQ_ROUTE_NO_SHARD)
        r->shards[r->nshards++] = shard;
    r->position = position;
    r->ud = ud;
    r->next_id = 1;
    cq_map_init(&r->sessions);
    cq_map_init(&r->reads);
    cq_map_init(&r->ops);
    cq_smap_init(&r->shared, false);
    cq_smap_init(&r->offsets, false);
    cq_list_init(&r->get_wait);
    cq__pace_init(&r->pace, l->sends_max);
    return r;
}

void cq_route_action_done(cq_route_action_t *a)
{
    for (size_t i = 0; i < a->nevs; i++)
        cq_buf_unref(a->evs[i].event);
    cq_free(a->evs);
    memset(a, 0, sizeof(*a));
}

static void sess_drop_evs(rsess_t *s)
{
    for (size_t i = 0; i < s->nevs; i++)
        cq_buf_unref(s->evs[i].event);
    cq_free(s->evs);
    s->evs = NULL;
    s->nevs = s->cap = 0;
}

static void read_free(rread_t *rd)
{
    cq_free(rd->conns);
    cq_free(rd);
}

void cq_route_free(cq_route_t *r)
{
    if (!r)
        return;
    uint32_t it = 0, k;
    void *v;
    while (cq_map_next(&r->sessions, &it, &k, &v)) {
        sess_drop_evs(v);
        cq_free(v);
    }
    it = 0;
    while (cq_map_next(&r->reads, &it, &k, &v))
        read_free(v);
    for (uint32_t i = 0; cq_smap_next(&r->offsets, &i, NULL, &v);) {
        cq_free(((oent_t *)v)->waiters);
        cq_free(v);
    }
    cq_map_done(&r->sessions);
    cq_map_done(&r->reads);
    cq_map_done(&r->ops);
    cq_smap_done(&r->shared);
    cq_smap_done(&r->offsets);
    for (anode_t *n = r->act_head, *nx; n; n = nx) {
        nx = n->next;
        cq_route_action_done(&n->a);
        cq_free(n);
    }
    for (int i = 0; i < r->nbinds; i++) {
        ring_clear(&r->binds[i]);
        cq_smap_done(&r->binds[i].keys);
        cq_free(r->binds[i].ring);
    }
    cq_free(r);
}

/* ---- sending -------------------------------------------------------------------------------- */

static int sess_add(rsess_t *s, cq_buf_t *ev, uint32_t msg_type)
{
    if (s->nevs == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        cq_resume_ev_t *v = cq_realloc(s->evs, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        s->evs = v;
        s->cap = cap;
    }
    s->evs[s->nevs++] = (cq_resume_ev_t){cq_buf_ref(ev), msg_type};
    return 0;
}

static bool caught_up(const cq_route_t *r, const rsess_t *s)
{
    for (int i = 0; i < r->nbinds; i++)
        if (s->cur[i] < pushed_of(r, &r->binds[i], NULL))
            return false;
    return true;
}

static void sess_end(cq_route_t *r, rsess_t *s)
{
    cq__pace_unwait(&r->pace, &s->ready_node);
    if (s->phase == P_GET)
        r->getting--;
    cq_map_del(&r->sessions, s->conn_id);
    sess_drop_evs(s);
    cq_free(s);
}

/* Posts s's chunk: FINAL when every cursor is at its live offset now (the held live events are
 * then all in the chunks), which ends the session; else it waits for more. Out of memory for the
 * action drops the chunk's events: the player gets them at its next login (not acknowledged). */
static void send(cq_route_t *r, rsess_t *s)
{
    bool final = caught_up(r, s);
    anode_t *n = push_action(r, CQ_ROUTE_SEND);
    s->last_ms = r->now_ms;
    if (n) {
        cq__pace_sent(&r->pace, false, r->now_ms);
        n->a.conn_id = s->conn_id;
        n->a.final = final;
        n->a.evs = s->evs;
        n->a.nevs = s->nevs;
        s->evs = NULL;
        s->nevs = s->cap = 0;
    } else {
        sess_drop_evs(s);
        if (!final) {
            s->phase = P_MORE; /* the idle cut ends it with a FINAL */
            return;
        }
    }
    if (final) {
        r->st.caught_up++;
        sess_end(r, s);
    } else {
        s->phase = P_MORE;
    }
}

/* A chunk is ready: sent when a place is free and nobody waits before s. */
static void want_send(cq_route_t *r, rsess_t *s)
{
    if (!cq__pace_must_wait(&r->pace)) {
        send(r, s);
        return;
    }
    s->phase = P_SEND;
    cq__pace_wait(&r->pace, &s->ready_node);
}

static void start_ready(cq_route_t *r)
{
    cq_list_t *n;
    while ((n = cq__pace_next(&r->pace)))
        send(r, cq_container_of(n, rsess_t, ready_node));
}

void cq_route_applied(cq_route_t *r, uint32_t n, uint64_t now_ms)
{
    r->now_ms = now_ms;
    cq__pace_applied(&r->pace, n, now_ms);
    start_ready(r);
}

/* ---- the walk ------------------------------------------------------------------------------- */

static void join_read(cq_route_t *r, rsess_t *s, int b);

/* From the ring: the player's events after the cursor, up to a full chunk. The ring is complete
 * after ring_from, so once it is scanned to its end the cursor is the live offset. */
static bool walk_ring(cq_route_t *r, rsess_t *s, int bi, uint64_t pushed)
{
    rbind_t *b = &r->binds[bi];
    const kent_t *k = cq_smap_get(&b->keys, s->key);
    for (uint64_t q = k ? k->first : 0; q;) {
        const rent_t *e = ring_seq(b, q);
        q = e->next;
        if (e->offset <= s->cur[bi])
            continue;
        if (e->offset > pushed)
            break;
        if (e->dropped)
            continue;
        if (s->nevs >= r->lim.chunk_events) {
            s->cur[bi] = e->offset - 1; /* the player's events before e are taken */
            return true;
        }
        if (sess_add(s, e->ev, b->msg_type) < 0)
            return false;
        r->st.events_ring++;
        s->cur[bi] = e->offset;
    }
    s->cur[bi] = pushed;
    return true;
}

/* Moves s on: the ring, or a shared read, until a chunk is full or every cursor is live. */
static void walk(cq_route_t *r, rsess_t *s)
{
    s->last_ms = r->now_ms;
    for (int bi = 0; bi < r->nbinds; bi++) {
        uint64_t pushed = pushed_of(r, &r->binds[bi], NULL);
        while (s->cur[bi] < pushed) {
            if (s->nevs >= r->lim.chunk_events) {
                want_send(r, s);
                return;
            }
            if (s->cur[bi] >= r->binds[bi].ring_from) {
                if (walk_ring(r, s, bi, pushed))
                    continue;
                s->phase = P_RETRY; /* out of memory: walked again at a tick */
                return;
            }
            join_read(r, s, bi);
            return;
        }
    }
    want_send(r, s); /* every cursor is live: the FINAL chunk */
}

/* ---- shared reads --------------------------------------------------------------------------- */

static void issue(cq_route_t *r, rread_t *rd)
{
    anode_t *n = push_action(r, CQ_ROUTE_READ);
    if (!n) {
        /* retried at a tick: the read stays queued */
        if (r->wait_tail)
            r->wait_tail->next_wait = rd;
        else
            r->wait_head = rd;
        r->wait_tail = rd;
        return;
    }
    rd->issued = true;
    r->reads_issued++;
    r->st.reads++;
    n->a.id = rd->id;
    n->a.shard = r->binds[rd->b].shard;
    snprintf(n->a.topic, sizeof(n->a.topic), "%s", r->binds[rd->b].topic);
    n->a.from = rd->from;
    n->a.max = r->lim.chunk_events;
}

static void issue_waiting(cq_route_t *r)
{
    while (r->wait_head && r->reads_issued < r->lim.reads_max &&
           (!r->getting || r->now_ms - r->wait_head->queued_ms >= READ_HOLD_MS)) {
        rread_t *rd = r->wait_head;
        r->wait_head = rd->next_wait;
        if (!r->wait_head)
            r->wait_tail = NULL;
        rd->next_wait = NULL;
        issue(r, rd);
    }
}

/* s needs the rows after its cursor of binding b: it joins the read of the same rows not yet
 * answered, or asks for one (issued when a slot is free). */
static void join_read(cq_route_t *r, rsess_t *s, int b)
{
    char skey[48];
    snprintf(skey, sizeof(skey), "%d:%" PRIu64, b, s->cur[b]);
    rread_t *rd = cq_smap_get(&r->shared, skey);
    if (rd) {
        r->st.reads_shared++;
    } else if ((rd = cq_calloc(1, sizeof(*rd)))) {
        rd->id = r->next_id++;
        rd->b = b;
        rd->from = s->cur[b];
        rd->queued_ms = r->now_ms;
        snprintf(rd->skey, sizeof(rd->skey), "%s", skey);
        if (cq_map_put(&r->reads, (uint32_t)rd->id, rd) < 0 ||
            cq_smap_put(&r->shared, rd->skey, rd) < 0) {
            cq_map_del(&r->reads, (uint32_t)rd->id);
            read_free(rd);
            rd = NULL;
        } else if (r->reads_issued < r->lim.reads_max && !r->getting) {
            issue(r, rd);
        } else {
            if (r->wait_tail)
                r->wait_tail->next_wait = rd;
            else
                r->wait_head = rd;
            r->wait_tail = rd;
        }
    }
    if (rd && rd->n == rd->cap) {
        uint32_t cap = rd->cap ? rd->cap * 2 : 8;
        uint32_t *v = cq_realloc(rd->conns, cap * sizeof(*v));
        if (v) {
            rd->conns = v;
            rd->cap = cap;
        }
    }
    if (!rd || rd->n == rd->cap) {
        s->phase = P_RETRY; /* out of memory: tried again at a tick */
        return;
    }
    rd->conns[rd->n++] = s->conn_id;
    s->phase = P_READ;
    s->read_id = rd->id;
    s->read_b = b;
}

/* The rows after rd->from, handed to the waiters whose key each names (each row's key is parsed
 * once, then found among the waiters' keys); every waiter's cursor moves to the last row at or
 * below the live offset (to the live offset when there is none: the rows up to it are gone). */
static void rows_apply(cq_route_t *r, rread_t *rd, const cq_resume_row_t *rows, size_t n)
{
    rbind_t *b = &r->binds[rd->b];
    uint64_t epoch = 0, pushed = pushed_of(r, b, &epoch);
    rsess_t **ws = rd->n ? cq_malloc(rd->n * sizeof(*ws)) : NULL;
    uint32_t nws = 0;
    cq_smap_t byk;
    cq_smap_init(&byk, false);
    for (uint32_t i = 0; ws && i < rd->n; i++) {
        rsess_t *s = cq_map_get(&r->sessions, rd->conns[i]);
        if (!s || s->phase != P_READ || s->read_id != rd->id)
            continue; /* gone (and perhaps back as another session) */
        s->read_id = 0;
        s->next_in_row = cq_smap_get(&byk, s->key);
        if (cq_smap_put(&byk, s->key, s) < 0) {
            s->phase = P_RETRY; /* out of memory: it reads again at a tick */
            continue;
        }
        ws[nws++] = s;
    }
    uint64_t to = rd->from, prev = rd->from;
    for (size_t k = 0; k < n && nws; k++) {
        if (rows[k].offset > pushed || rows[k].offset <= rd->from)
            continue;
        r->st.rows_read++;
        to = rows[k].offset;
        char key[CQ_BRIDGE_KEY_MAX + 1];
        rsess_t *first = NULL;
        if (cq_bridge_route_key(rows[k].content, rows[k].len, b->field, key) == 1)
            first = cq_smap_get(&byk, key);
        if (first) {
            char pid[24] = "";
            if (rows[k].producer_id)
                snprintf(pid, sizeof(pid), "%" PRIu64, rows[k].producer_id);
            cq_topic_event_t te = {
                b->topic,        b->shard, epoch,       rows[k].offset,  prev,
                rows[k].time_ms, pid,      rows[k].seq, rows[k].content, rows[k].len};
            cq_buf_t *ev = cq_topic_event_encode(&te);
            for (rsess_t *s = first; s && ev; s = s->next_in_row)
                if (sess_add(s, ev, b->msg_type) == 0)
                    r->st.events_store++;
            cq_buf_unref(ev);
        }
        prev = rows[k].offset;
    }
    if (to == rd->from)
        to = pushed; /* nothing left up to the live offset */
    cq_smap_done(&byk);
    for (uint32_t i = 0; i < nws; i++) {
        rsess_t *s = ws[i];
        s->next_in_row = NULL;
        if (s->cur[rd->b] < to)
            s->cur[rd->b] = to;
        walk(r, s);
    }
    if (!ws) /* out of memory: the waiters read again at a tick */
        for (uint32_t i = 0; i < rd->n; i++) {
            rsess_t *s = cq_map_get(&r->sessions, rd->conns[i]);
            if (s && s->phase == P_READ && s->read_id == rd->id) {
                s->phase = P_RETRY;
                s->read_id = 0;
            }
        }
    cq_free(ws);
}

void cq_route_rows(cq_route_t *r, uint64_t read_id, int err, const cq_resume_row_t *rows, size_t n,
                   uint64_t now_ms)
{
    r->now_ms = now_ms;
    rread_t *rd = cq_map_get(&r->reads, (uint32_t)read_id);
    if (!rd || rd->id != read_id)
        return;
    cq_map_del(&r->reads, (uint32_t)read_id);
    cq_smap_del(&r->shared, rd->skey);
    if (rd->issued && r->reads_issued)
        r->reads_issued--;
    if (err < 0) { /* the waiters try again at a tick */
        for (uint32_t i = 0; i < rd->n; i++) {
            rsess_t *s = cq_map_get(&r->sessions, rd->conns[i]);
            if (s && s->phase == P_READ && s->read_id == rd->id) {
                s->phase = P_RETRY;
                s->read_id = 0;
            }
        }
    } else {
        rows_apply(r, rd, rows, n);
    }
    read_free(rd);
    issue_waiting(r);
    start_ready(r);
}

/* ---- offsets -------------------------------------------------------------------------------- */

static oent_t *oent_get(cq_route_t *r, const rbind_t *b, const char *key, bool create)
{
    char consumer[129], mkey[sizeof(((oent_t *)0)->mkey)];
    position_id(r, b, key, consumer);
    snprintf(mkey, sizeof(mkey), "%s\x1f%u\x1f%s", b->topic, b->shard, consumer);
    oent_t *e = cq_smap_get(&r->offsets, mkey);
    if (e || !create)
        return e;
    if (cq_smap_count(&r->offsets) >= r->lim.cache_max) { /* evict one clean entry */
        const char *k;
        void *v;
        for (uint32_t it = 0; cq_smap_next(&r->offsets, &it, &k, &v);) {
            oent_t *o = v;
            if (!o->dirty && !o->writing && !o->tag && !o->nw) {
                cq_smap_del(&r->offsets, o->mkey);
                cq_free(o);
                break;
            }
        }
        if (cq_smap_count(&r->offsets) >= r->lim.cache_max)
            return NULL;
    }
    if (!(e = cq_calloc(1, sizeof(*e))))
        return NULL;
    cq_list_init(&e->get_node);
    snprintf(e->mkey, sizeof(e->mkey), "%s", mkey);
    snprintf(e->topic, sizeof(e->topic), "%s", b->topic);
    e->shard = b->shard;
    snprintf(e->consumer, sizeof(e->consumer), "%s", consumer);
    if (cq_smap_put(&r->offsets, e->mkey, e) < 0) {
        cq_free(e);
        return NULL;
    }
    return e;
}

/* An offset read or write for e. */
static bool op(cq_route_t *r, oent_t *e, int kind)
{
    anode_t *n = push_action(r, kind);
    if (!n)
        return false;
    e->tag = r->next_id++;
    if (cq_map_put(&r->ops, (uint32_t)e->tag, e) < 0) {
        n->a.kind = 0; /* a no-op, dropped by cq_route_next's caller */
        e->tag = 0;
        return false;
    }
    n->a.id = e->tag;
    n->a.shard = e->shard;
    snprintf(n->a.topic, sizeof(n->a.topic), "%s", e->topic);
    snprintf(n->a.consumer, sizeof(n->a.consumer), "%s", e->consumer);
    n->a.offset = e->offset;
    r->ops_out++;
    if (kind == CQ_ROUTE_GET)
        r->st.gets++;
    return true;
}

/* e's offset is read now if a slot is free, else when one frees (get_wait, in order): a mass
 * login's reads then follow each other at the store's pace, not a tick's. */
static void get_offset(cq_route_t *r, oent_t *e)
{
    if (r->ops_out < r->lim.gets_max && cq_list_empty(&r->get_wait) && op(r, e, CQ_ROUTE_GET))
        return;
    e->tag = READ_AGAIN;
    cq_list_insert_tail(&r->get_wait, &e->get_node);
}

static void gets_refill(cq_route_t *r)
{
    while (r->ops_out < r->lim.gets_max && !cq_list_empty(&r->get_wait)) {
        oent_t *e = cq_container_of(r->get_wait.next, oent_t, get_node);
        cq_list_remove(&e->get_node);
        e->tag = 0;
        if (!op(r, e, CQ_ROUTE_GET)) {
            e->tag = READ_AGAIN; /* out of memory: its tick redoes it */
            return;
        }
    }
}

/* The logins waiting for e's offset take it. */
static void got_offset(cq_route_t *r, oent_t *e)
{
    uint32_t *w = e->waiters, nw = e->nw;
    e->waiters = NULL;
    e->nw = e->capw = 0;
    for (uint32_t i = 0; i < nw; i++) {
        rsess_t *s = cq_map_get(&r->sessions, w[i]);
        if (!s || s->phase != P_GET)
            continue;
        for (int bi = 0; bi < r->nbinds; bi++) {
            rbind_t *b = &r->binds[bi];
            if (s->cur[bi] != AWAITED || b->shard != e->shard ||
                strcasecmp(b->topic, e->topic) != 0)
                continue;
            char consumer[129];
            position_id(r, b, s->key, consumer);
            if (strcmp(consumer, e->consumer) != 0)
                continue;
            uint64_t pushed = pushed_of(r, b, NULL);
            s->cur[bi] = e->offset < pushed ? e->offset : pushed;
            if (--s->gets == 0) {
                r->getting--;
                s->phase = P_WALK; /* no longer counted in getting (sess_end) */
                walk(r, s);
            }
            break;
        }
    }
    cq_free(w);
}

static int add_waiter(oent_t *e, uint32_t conn_id)
{
    if (e->nw == e->capw) {
        uint32_t cap = e->capw ? e->capw * 2 : 4;
        uint32_t *v = cq_realloc(e->waiters, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        e->waiters = v;
        e->capw = cap;
    }
    e->waiters[e->nw++] = conn_id;
    return 0;
}

void cq_route_offset(cq_route_t *r, uint64_t tag, int err, uint64_t offset, uint64_t now_ms)
{
    r->now_ms = now_ms;
    oent_t *e = cq_map_del(&r->ops, (uint32_t)tag);
    if (r->ops_out)
        r->ops_out--;
    if (!e || e->tag != tag)
        return;
    e->tag = 0;
    if (e->writing) {
        e->writing = false;
        if (err < 0) {
            e->dirty = true; /* written again at the next flush */
            r->st.commit_errors++;
        } else {
            r->st.commits++; /* on the store's disk */
            if (offset > e->committed)
                e->committed = offset;
        }
    } else {
        /* a read: never committed is 0 (every retained event pending); an error reads again at a
         * tick. An acknowledgement made meanwhile is kept when it is ahead. */
        if (err < 0 && err != -ENOENT) {
            e->tag = READ_AGAIN;
            return;
        }
        uint64_t stored = err < 0 ? 0 : offset;
        e->committed = stored;
        if (stored >=
            e->offset) { /* an acknowledgement made meanwhile is behind: nothing to write */
            e->offset = stored;
            e->dirty = false;
        }
        e->known = true;
        got_offset(r, e);
    }
    gets_refill(r);
    issue_waiting(r);
    start_ready(r);
}

/* ---- logins and acks ------------------------------------------------------------------------ */

void cq_route_login(cq_route_t *r, uint32_t conn_id, const char *key, uint64_t now_ms)
{
    r->now_ms = now_ms;
    r->st.logins++;
    rsess_t *s = NULL;
    bool ok = key && *key && strlen(key) <= CQ_BRIDGE_KEY_MAX &&
              !cq_map_get(&r->sessions, conn_id) &&
              cq_map_count(&r->sessions) < r->lim.sessions_max && (s = cq_calloc(1, sizeof(*s))) &&
              cq_map_put(&r->sessions, conn_id, s) == 0;
    if (!ok) { /* no catch-up, but the hold must end: an empty FINAL */
        cq_free(s);
        r->st.refused++;
        anode_t *n = push_action(r, CQ_ROUTE_SEND);
        if (n) {
            n->a.conn_id = conn_id;
            n->a.final = true;
            cq__pace_sent(&r->pace, false, now_ms);
        }
        return;
    }
    cq_list_init(&s->ready_node);
    s->conn_id = conn_id;
    snprintf(s->key, sizeof(s->key), "%s", key);
    s->last_ms = now_ms;
    s->phase = P_GET;
    for (int bi = 0; bi < r->nbinds; bi++) {
        rbind_t *b = &r->binds[bi];
        oent_t *e = oent_get(r, b, key, true);
        if (e && e->known) {
            uint64_t pushed = pushed_of(r, b, NULL);
            s->cur[bi] = e->offset < pushed ? e->offset : pushed;
            continue;
        }
        s->cur[bi] = AWAITED;
        s->gets++;
        if (!e || add_waiter(e, conn_id) < 0)
            continue; /* out of memory or a full cache: P_GET until the idle cut */
        if (!e->tag)
            get_offset(r, e); /* else its read is in flight, or waits */
    }
    if (s->gets == 0) {
        s->phase = P_WALK;
        walk(r, s);
        return;
    }
    r->getting++;
}

int cq_route_ack(cq_route_t *r, const char *key, const void *body, size_t len, uint64_t now_ms)
{
    r->now_ms = now_ms;
    if (!key || !*key || strlen(key) > CQ_BRIDGE_KEY_MAX)
        return -EINVAL;
    Chanqpb__TopicAckMessage *m = chanqpb__topic_ack_message__unpack(&cq__bridge_pb, len, body);
    if (!m || m->n_positions > CQ_RESUME_POSITIONS_MAX) {
        if (m)
            chanqpb__topic_ack_message__free_unpacked(m, &cq__bridge_pb);
        return -EINVAL;
    }
    r->st.acks++;
    for (size_t k = 0; k < m->n_positions; k++) {
        const Chanqpb__TopicPosition *p = m->positions[k];
        if (!p->topic)
            continue;
        for (int bi = 0; bi < r->nbinds; bi++) {
            rbind_t *b = &r->binds[bi];
            uint64_t epoch = 0, pushed;
            if (b->shard != p->shard || strcasecmp(b->topic, p->topic) != 0)
                continue;
            pushed = pushed_of(r, b, &epoch);
            if (p->epoch != epoch || p->offset > pushed)
                continue;
            oent_t *e = oent_get(r, b, key, true);
            if (!e || p->offset <= e->offset)
                continue;
            e->offset = p->offset;
            e->dirty = true;
            /* not known: the store may hold a later offset (another device's), so it is read
             * first, and the write waits for it (the read keeps the greater) */
            if (!e->known && !e->tag)
                get_offset(r, e);
        }
    }
    chanqpb__topic_ack_message__free_unpacked(m, &cq__bridge_pb);
    return 0;
}

void cq_route_more(cq_route_t *r, uint32_t conn_id, uint64_t now_ms)
{
    r->now_ms = now_ms;
    rsess_t *s = cq_map_get(&r->sessions, conn_id);
    if (s && s->phase == P_MORE)
        walk(r, s);
}

void cq_route_gone(cq_route_t *r, uint32_t conn_id)
{
    rsess_t *s = cq_map_get(&r->sessions, conn_id);
    if (!s)
        return;
    sess_end(r, s); /* a read it waits for finds it gone; it leaves the pace's queue */
    start_ready(r);
}

/* ---- ticks and flushes ---------------------------------------------------------------------- */

static void flush(cq_route_t *r, bool all)
{
    const char *k;
    void *v;
    for (uint32_t it = 0; cq_smap_next(&r->offsets, &it, &k, &v);) {
        oent_t *e = v;
        if (e->tag == READ_AGAIN && e->get_node.next == &e->get_node &&
            r->ops_out < r->lim.gets_max) { /* a failed read, not one waiting in get_wait */
            e->tag = 0;
            if (!op(r, e, CQ_ROUTE_GET))
                e->tag = READ_AGAIN;
            continue;
        }
        if (!e->dirty || !e->known || e->tag || (!all && r->ops_out >= r->lim.gets_max))
            continue;
        if (!all && e->commit_ms && r->now_ms - e->commit_ms < r->lim.flush_ms)
            continue;
        e->dirty = false;
        e->writing = true;
        e->commit_ms = r->now_ms ? r->now_ms : 1;
        if (!op(r, e, CQ_ROUTE_COMMIT)) {
            e->dirty = true;
            e->writing = false;
        }
    }
}

void cq_route_flush_all(cq_route_t *r)
{
    flush(r, true);
}

/* Ends s now with an empty FINAL, so its worker stops holding its routed events; what it had
 * not received comes at its next login (it was not acknowledged). */
static void cut(cq_route_t *r, rsess_t *s)
{
    sess_drop_evs(s);
    anode_t *n = push_action(r, CQ_ROUTE_SEND);
    if (n) {
        n->a.conn_id = s->conn_id;
        n->a.final = true;
        cq__pace_sent(&r->pace, false, r->now_ms);
    }
    sess_end(r, s);
}

void cq_route_tick(cq_route_t *r, uint64_t now_ms)
{
    r->now_ms = now_ms;
    cq__pace_reclaim(&r->pace, now_ms, r->lim.idle_ms); /* cq_resume_tick's rule */
    uint32_t it = 0, k;
    void *v;
    while (cq_map_next(&r->sessions, &it, &k, &v)) {
        rsess_t *s = v;
        if (s->phase == P_RETRY) {
            walk(r, s);
            continue;
        }
        if (s->phase == P_SEND || s->phase == P_READ || now_ms - s->last_ms < r->lim.idle_ms)
            continue;
        cut(r, s);
        r->st.dropped_idle++;
        it = 0; /* the map changed */
    }
    if (r->flush_ms == 0 || now_ms - r->flush_ms >= 100) {
        r->flush_ms = now_ms ? now_ms : 1;
        flush(r, false);
    }
    issue_waiting(r);
    start_ready(r);
}

/* ---- bindings, actions, stats --------------------------------------------------------------- */

void cq_route_topics_clear(cq_route_t *r)
{
    uint32_t it = 0, k;
    void *v;
    while (cq_map_next(&r->sessions, &it, &k, &v)) {
        cut(r, v);
        it = 0;
    }
    it = 0;
    while (cq_map_next(&r->reads, &it, &k, &v)) {
        cq_smap_del(&r->shared, ((rread_t *)v)->skey);
        read_free(v);
    }
    cq_map_done(&r->reads);
    cq_map_init(&r->reads);
    r->wait_head = r->wait_tail = NULL;
    r->reads_issued = 0;
    for (int i = 0; i < r->nbinds; i++) {
        ring_clear(&r->binds[i]);
        cq_smap_done(&r->binds[i].keys);
        cq_free(r->binds[i].ring);
    }
    memset(r->binds, 0, sizeof(r->binds));
    r->nbinds = 0;
}

static int stream_add(cq_route_t *r, const char *topic, const char *key_field, uint32_t shard,
                      uint32_t msg_type);

int cq_route_add_shard(cq_route_t *r, uint32_t shard)
{
    for (uint32_t k = 0; k < r->nshards; k++)
        if (r->shards[k] == shard)
            return 0;
    if (r->nbinds)
        return -EBUSY;
    if (r->nshards == CQ_ROUTE_SHARDS_MAX)
        return -ENOSPC;
    r->shards[r->nshards++] = shard;
    return 0;
}

int cq_route_topic(cq_route_t *r, const char *topic, const char *key_field, uint32_t msg_type)
{
    if (!topic || !*topic || strlen(topic) > 64 || !key_field || !*key_field ||
        strlen(key_field) > 64)
        return -EINVAL;
    if (r->nshards && bind_index(r, topic, key_field, r->shards[0]) >= 0)
        return 0;
    if (r->nbinds + (int)r->nshards > BINDS_MAX)
        return -ENOSPC;
    for (uint32_t k = 0; k < r->nshards; k++) {
        int rc = stream_add(r, topic, key_field, r->shards[k], msg_type);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* One stream of a route binding declared anew. */
static int stream_add(cq_route_t *r, const char *topic, const char *key_field, uint32_t shard,
                      uint32_t msg_type)
{
    rbind_t *b = &r->binds[r->nbinds];
    if (!(b->ring = cq_calloc(r->lim.ring_events, sizeof(*b->ring))))
        return -ENOMEM;
    snprintf(b->topic, sizeof(b->topic), "%s", topic);
    snprintf(b->field, sizeof(b->field), "%s", key_field);
    b->shard = shard;
    b->msg_type = msg_type;
    b->cap = r->lim.ring_events;
    b->head_seq = 1;
    cq_smap_init(&b->keys, false);
    uint64_t pushed = 0;
    /* Known on the engine's thread: the live events from now on are kept. Else (before the MQ
     * engine runs) the ring is anchored by the first live event. */
    b->ring_from = r->position(r->ud, b->topic, shard, &b->epoch, &pushed) ? pushed : UNANCHORED;
    r->nbinds++;
    return 0;
}

bool cq_route_active(const cq_route_t *r)
{
    return r && r->nbinds > 0;
}

bool cq_route_next(cq_route_t *r, cq_route_action_t *a)
{
    for (;;) {
        anode_t *n = r->act_head;
        if (!n)
            return false;
        r->act_head = n->next;
        if (!r->act_head)
            r->act_tail = NULL;
        *a = n->a;
        cq_free(n);
        if (a->kind)
            return true;
    }
}

void cq_route_stats(const cq_route_t *r, cq_route_stats_t *st)
{
    *st = r->st;
    st->sessions = cq_map_count(&r->sessions);
    st->cached = cq_smap_count(&r->offsets);
    st->awaiting_offsets = r->getting;
    uint32_t dirty = 0;
    const char *k;
    void *v;
    for (uint32_t it = 0; cq_smap_next(&r->offsets, &it, &k, &v);)
        dirty += ((const oent_t *)v)->dirty;
    st->dirty = dirty;
}
