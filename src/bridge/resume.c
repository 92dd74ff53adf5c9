/* resume.c - the resume engine (cq_resume.h): rings of recent live events, sessions that walk a
 * client's cursors up to the live stream, and the actions that read the store and send chunks.
 *
 * A session's life: request -> (verify reads: does the client's offset still exist?) -> BEGIN
 * chunk (the result, and the first events) -> more, more ... -> FINAL chunk (the cursors reached
 * the live offsets). Every cursor only moves forward and only over events handed out, so no
 * event is sent twice and none is skipped: a chunk takes the events after the cursor from the
 * ring when the ring holds the next one (its prev_offset is the cursor), else from a store read
 * of the rows after the cursor, whose first row follows the cursor (rows are read in offset
 * order, every committed row after it). */
#include "cq_resume.h"

#include "bridge_int.h"

#include "bridge.pb-c.h"
#include "cq_alloc.h"
#include "cq_bridge.h"
#include "cq_err.h"
#include "cq_map.h"
#include "cq_util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define TOPICS_MAX 256

typedef struct ring_ent {
    uint64_t offset, prev;
    cq_buf_t *ev;
} ring_ent_t;

/* A stream: one topic on one shard (this node's own, or one it follows). */
typedef struct rtopic {
    char name[65];
    uint32_t shard;
    uint32_t chan_id; /* the channel its binding delivers to (0: GLOBAL) */
    uint32_t msg_type;
    ring_ent_t *ring; /* cap entries, the oldest at head */
    uint32_t head, n, cap;
    uint64_t epoch; /* of the events in the ring */
    size_t bytes;
} rtopic_t;

/* A topic's cursor in a session: TC_NOW until BEGIN (the client gets the events after the live
 * offset at BEGIN), TC_VERIFY while its offset is checked in the store, then TC_WALK. */
enum { TC_NOW = 0, TC_VERIFY, TC_WALK, TC_SKIP /* bound to another channel than the session's */ };

typedef struct scur {
    uint8_t state;
    uint64_t cursor; /* TC_VERIFY: the client's offset; TC_WALK: the last one the client has */
} scur_t;

enum { PH_VERIFY = 1, PH_READ, PH_MORE, PH_WAIT_SLOT, PH_RETRY, PH_WAIT_SEND };

typedef struct sess {
    uint32_t conn_id, chan_id;
    uint8_t phase;
    bool begun, recovered, refusal;
    bool credit;      /* holds a place for its next chunk (made, or read for) */
    cq_buf_t *result; /* made at BEGIN, sent with the first chunk */
    uint32_t read_id; /* the read in flight (0: none) */
    int read_topic;   /* its topic */
    uint64_t last_ms; /* last progress */
    char error[256];  /* why not recovered (the first reason) */
    scur_t cur[TOPICS_MAX];
    struct sess *next_wait; /* the queue of sessions waiting for a read slot */
    cq_list_t ready_node;   /* in the pace's queue while it waits for a place for a chunk */
} sess_t;

typedef struct action_node {
    cq_resume_action_t a;
    struct action_node *next;
} action_node_t;

struct cq_resume {
    cq_resume_limits_t lim;
    uint32_t shards[CQ_RESUME_SHARDS_MAX]; /* [0]: this node's own; then the followed ones */
    uint32_t nshards;
    cq_resume_position_fn position;
    void *ud;
    rtopic_t topics[TOPICS_MAX];
    int ntopics;
    cq_map_t sessions; /* conn id -> sess_t */
    cq_map_t reads;    /* read id -> sess_t */
    uint32_t next_read;
    uint32_t reads_in_flight;
    sess_t *wait_head, *wait_tail;
    cq__pace_t pace; /* chunk pacing (cq_resume_applied) */
    uint64_t now_ms; /* the latest now given */
    action_node_t *act_head, *act_tail;
    cq_resume_stats_t st;
};

/* ---- small parts ---------------------------------------------------------------------------- */

static int topic_index(const cq_resume_t *r, const char *name, uint32_t shard)
{
    for (int i = 0; i < r->ntopics; i++)
        if (r->topics[i].shard == shard && strcasecmp(r->topics[i].name, name) == 0)
            return i;
    return -1;
}

/* A stream's name in messages: the topic on this node's own shard, "<topic> shard <n>" on a
 * followed one (buf: SNAME_MAX bytes). */
#define SNAME_MAX 80
static const char *sname(const cq_resume_t *r, int i, char *buf)
{
    if (r->topics[i].shard == r->shards[0])
        return r->topics[i].name;
    snprintf(buf, SNAME_MAX, "%s shard %u", r->topics[i].name, r->topics[i].shard);
    return buf;
}

static void push_action(cq_resume_t *r, action_node_t *n)
{
    n->next = NULL;
    if (r->act_tail)
        r->act_tail->next = n;
    else
        r->act_head = n;
    r->act_tail = n;
}

__attribute__((format(printf, 2, 3))) static void reason(sess_t *s, const char *fmt, ...)
{
    s->recovered = false;
    if (s->error[0])
        return; /* the first reason is the one reported */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->error, sizeof(s->error), fmt, ap);
    va_end(ap);
}

/* ---- the rings ------------------------------------------------------------------------------ */

static void ring_drop_oldest(rtopic_t *t)
{
    ring_ent_t *e = &t->ring[t->head];
    t->bytes -= e->ev->len;
    cq_buf_unref(e->ev);
    e->ev = NULL;
    t->head = (t->head + 1) % t->cap;
    t->n--;
}

static void ring_clear(rtopic_t *t)
{
    while (t->n)
        ring_drop_oldest(t);
}

static ring_ent_t *ring_at(const rtopic_t *t, uint32_t i)
{
    return &t->ring[(t->head + i) % t->cap];
}

/* The index of the ring's event that follows cursor (its prev_offset is cursor), or -1. The
 * ring is in offset order, so a binary search. */
static int ring_after(const rtopic_t *t, uint64_t cursor)
{
    uint32_t lo = 0, hi = t->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ring_at(t, mid)->offset <= cursor)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == t->n || ring_at(t, lo)->prev != cursor)
        return -1;
    return (int)lo;
}

/* The index of the ring's event at offset, or -1. */
static int ring_find(const rtopic_t *t, uint64_t offset)
{
    if (!t->n || offset < ring_at(t, 0)->offset)
        return -1;
    uint32_t lo = 0, hi = t->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ring_at(t, mid)->offset < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->n && ring_at(t, lo)->offset == offset ? (int)lo : -1;
}

/* Whether the ring holds the event at offset (so it still existed when it was delivered). */
static bool ring_has(const rtopic_t *t, uint64_t offset)
{
    return ring_find(t, offset) >= 0;
}

/* Removes the ring's entry k; the one after it follows k's prev (its bytes re-encoded with that
 * prev_offset, as a store read would give it). False when that cannot be made (out of memory):
 * then the ring is cleared, and resumes read the store. */
static bool ring_remove(rtopic_t *t, uint32_t k)
{
    ring_ent_t *e = ring_at(t, k);
    uint64_t prev = e->prev;
    cq_buf_t *next = NULL;
    if (k + 1 < t->n && !(next = cq__topic_event_reprev(ring_at(t, k + 1)->ev, prev))) {
        ring_clear(t);
        return false;
    }
    t->bytes -= e->ev->len;
    cq_buf_unref(e->ev);
    for (uint32_t j = k; j + 1 < t->n; j++)
        *ring_at(t, j) = *ring_at(t, j + 1);
    ring_at(t, --t->n)->ev = NULL;
    if (next) {
        ring_ent_t *f = ring_at(t, k);
        t->bytes += next->len;
        t->bytes -= f->ev->len;
        cq_buf_unref(f->ev);
        f->ev = next;
        f->prev = prev;
    }
    return true;
}

bool cq_resume_drop(cq_resume_t *r, const char *topic, uint32_t shard, uint64_t offset)
{
    int i = topic ? topic_index(r, topic, shard) : -1;
    int k = i >= 0 ? ring_find(&r->topics[i], offset) : -1;
    return k >= 0 && ring_remove(&r->topics[i], (uint32_t)k);
}

void cq_resume_live(cq_resume_t *r, const char *topic, uint32_t shard, uint64_t epoch,
                    uint64_t offset, uint64_t prev_offset, cq_buf_t *event)
{
    int i = topic ? topic_index(r, topic, shard) : -1;
    if (i < 0 || !event)
        return;
    rtopic_t *t = &r->topics[i];
    if (t->n && (epoch != t->epoch || offset <= ring_at(t, t->n - 1)->offset))
        ring_clear(t); /* a new history, or the engine started over: the ring restarts */
    t->epoch = epoch;
    while (t->n && (t->n == t->cap || t->bytes + event->len > r->lim.ring_bytes))
        ring_drop_oldest(t);
    if (event->len > r->lim.ring_bytes)
        return;
    ring_ent_t *e = ring_at(t, t->n);
    e->offset = offset;
    e->prev = prev_offset;
    e->ev = cq_buf_ref(event);
    t->bytes += event->len;
    t->n++;
}

/* ---- engine life ---------------------------------------------------------------------------- */

cq_resume_t *cq_resume_new(const cq_resume_limits_t *lim, uint32_t shard,
                           cq_resume_position_fn position, void *ud)
{
    cq_resume_t *r = cq_calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->lim = lim ? *lim : (cq_resume_limits_t){0};
    if (!r->lim.ring_events)
        r->lim.ring_events = 8192;
    if (!r->lim.ring_bytes)
        r->lim.ring_bytes = 8u << 20;
    if (!r->lim.chunk_events)
        r->lim.chunk_events = 512;
    if (!r->lim.chunk_bytes)
        r->lim.chunk_bytes = 256u << 10;
    if (!r->lim.sessions_max)
        r->lim.sessions_max = 16384;
    if (!r->lim.reads_max)
        r->lim.reads_max = 4;
    if (!r->lim.sends_max)
        r->lim.sends_max = 32;
    if (!r->lim.idle_ms)
        r->lim.idle_ms = 60000;
    r->shards[0] = shard;
    r->nshards = 1;
    r->position = position;
    r->ud = ud;
    cq_map_init(&r->sessions);
    cq_map_init(&r->reads);
    cq__pace_init(&r->pace, r->lim.sends_max);
    return r;
}

void cq_resume_action_done(cq_resume_action_t *a)
{
    cq_buf_unref(a->result);
    for (size_t i = 0; i < a->nevs; i++)
        cq_buf_unref(a->evs[i].event);
    cq_free(a->evs);
    memset(a, 0, sizeof(*a));
}

static void sess_free(cq_resume_t *r, sess_t *s)
{
    if (s->read_id)
        cq_map_del(&r->reads, s->read_id);
    if (s->credit)
        r->pace.held--; /* its place goes to the next session at the end of the call */
    cq__pace_unwait(&r->pace, &s->ready_node);
    cq_buf_unref(s->result);
    cq_free(s);
}

void cq_resume_free(cq_resume_t *r)
{
    if (!r)
        return;
    uint32_t it = 0, k;
    void *v;
    while (cq_map_next(&r->sessions, &it, &k, &v)) {
        cq_buf_unref(((sess_t *)v)->result);
        cq_free(v);
    }
    cq_map_done(&r->sessions);
    cq_map_done(&r->reads);
    for (action_node_t *n = r->act_head, *nx; n; n = nx) {
        nx = n->next;
        cq_resume_action_done(&n->a);
        cq_free(n);
    }
    for (int i = 0; i < r->ntopics; i++) {
        ring_clear(&r->topics[i]);
        cq_free(r->topics[i].ring);
    }
    cq_free(r);
}

/* ---- chunks --------------------------------------------------------------------------------- */

/* The result of s: recovered, and one position per topic (where delivery continues). */
static cq_buf_t *result_encode(const cq_resume_t *r, const sess_t *s)
{
    Chanqpb__TopicPosition pos[TOPICS_MAX], *pp[TOPICS_MAX];
    Chanqpb__TopicResumeResultMessage m = CHANQPB__TOPIC_RESUME_RESULT_MESSAGE__INIT;
    size_t n = 0;
    for (int i = 0; i < r->ntopics; i++) {
        if (s->cur[i].state == TC_SKIP)
            continue;
        uint64_t epoch = 0, pushed = 0;
        r->position(r->ud, r->topics[i].name, r->topics[i].shard, &epoch, &pushed);
        chanqpb__topic_position__init(&pos[n]);
        pos[n].topic = (char *)r->topics[i].name;
        pos[n].shard = r->topics[i].shard;
        pos[n].epoch = epoch;
        pos[n].offset = s->cur[i].cursor;
        pp[n] = &pos[n];
        n++;
    }
    m.recovered = s->recovered;
    m.n_positions = n;
    m.positions = pp;
    m.error = (char *)(s->recovered ? "" : s->error);
    n = chanqpb__topic_resume_result_message__get_packed_size(&m);
    cq_buf_t *b = cq_buf_new(n);
    if (b)
        b->len = chanqpb__topic_resume_result_message__pack(&m, b->data);
    return b;
}

typedef struct chunk {
    cq_resume_ev_t *evs;
    size_t n, cap, bytes;
} chunk_t;

static bool chunk_full(const cq_resume_t *r, const chunk_t *c)
{
    return c->n >= r->lim.chunk_events || c->bytes >= r->lim.chunk_bytes;
}

static int chunk_add(chunk_t *c, cq_buf_t *ev, uint32_t msg_type)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        cq_resume_ev_t *v = cq_realloc(c->evs, cap * sizeof(*v));
        if (!v) {
            cq_buf_unref(ev);
            return -ENOMEM;
        }
        c->evs = v;
        c->cap = cap;
    }
    c->evs[c->n++] = (cq_resume_ev_t){ev, msg_type};
    c->bytes += ev->len;
    return 0;
}

/* Takes the ring's events after topic i's cursor into c, up to the live offset or a full
 * chunk. Returns false when the ring does not hold the next event (a read is needed). */
static bool walk_ring(cq_resume_t *r, sess_t *s, int i, uint64_t pushed, chunk_t *c)
{
    rtopic_t *t = &r->topics[i];
    scur_t *u = &s->cur[i];
    int at = ring_after(t, u->cursor);
    if (at < 0)
        return false;
    for (uint32_t k = (uint32_t)at; k < t->n && u->cursor < pushed && !chunk_full(r, c); k++) {
        ring_ent_t *e = ring_at(t, k);
        if (chunk_add(c, cq_buf_ref(e->ev), t->msg_type) < 0)
            break;
        u->cursor = e->offset;
        r->st.events_ring++;
    }
    return true;
}

static void post_read(cq_resume_t *r, sess_t *s, int i);

/* BEGIN: the topics without a walk start at the live offset now, and the result is made, with
 * the cursors as they are before any event is sent (where the client's delivery continues). */
static void begin(cq_resume_t *r, sess_t *s)
{
    for (int i = 0; i < r->ntopics; i++) {
        if (s->cur[i].state != TC_NOW)
            continue;
        uint64_t epoch = 0, pushed = 0;
        r->position(r->ud, r->topics[i].name, r->topics[i].shard, &epoch, &pushed);
        s->cur[i] = (scur_t){TC_WALK, pushed};
    }
    s->result = result_encode(r, s);
    s->begun = true;
    if (s->refusal)
        r->st.refused++;
    else
        s->recovered ? r->st.recovered++ : r->st.not_recovered++;
}

/* Posts the chunk (taken), the result ahead of its events on BEGIN. Out of memory drops the
 * chunk: the client sees the missing events as a hole (prev_offset). */
static void send_chunk(cq_resume_t *r, sess_t *s, chunk_t *c, bool final)
{
    action_node_t *n = cq_calloc(1, sizeof(*n));
    if (!n) {
        for (size_t k = 0; k < c->n; k++)
            cq_buf_unref(c->evs[k].event);
        cq_free(c->evs);
        return;
    }
    n->a.kind = CQ_RESUME_SEND;
    /* The place the session held is now the chunk's, until cq_resume_applied. A refusal or a
     * cut held none, but is counted all the same: every chunk comes back once. */
    cq__pace_sent(&r->pace, s->credit, r->now_ms);
    s->credit = false;
    n->a.conn_id = s->conn_id;
    n->a.chan_id = s->chan_id;
    n->a.flags = (s->result ? CQ_RESUME_F_BEGIN : 0) | (final ? CQ_RESUME_F_FINAL : 0);
    n->a.result = s->result;
    s->result = NULL;
    n->a.evs = c->evs;
    n->a.nevs = c->n;
    push_action(r, n);
}

static void sess_end(cq_resume_t *r, sess_t *s)
{
    cq_map_del(&r->sessions, s->conn_id);
    sess_free(r, s);
}

/* Whether every cursor reached its topic's live offset. */
static bool caught_up(cq_resume_t *r, const sess_t *s)
{
    for (int i = 0; i < r->ntopics; i++) {
        uint64_t epoch = 0, pushed = 0;
        r->position(r->ud, r->topics[i].name, r->topics[i].shard, &epoch, &pushed);
        if (s->cur[i].cursor < pushed)
            return false;
    }
    return true;
}

/* Sends c (taken) and, once caught up, ends the session with it (FINAL); else waits for the
 * connection's worker to ask for more. */
static void deliver(cq_resume_t *r, sess_t *s, chunk_t *c, uint64_t now_ms)
{
    bool final = caught_up(r, s);
    send_chunk(r, s, c, final);
    s->last_ms = now_ms;
    if (final)
        sess_end(r, s);
    else
        s->phase = PH_MORE;
}

/* A topic whose next event the ring does not hold, or -1. */
static int ring_miss(cq_resume_t *r, const sess_t *s)
{
    for (int i = 0; i < r->ntopics; i++) {
        uint64_t epoch = 0, pushed = 0;
        r->position(r->ud, r->topics[i].name, r->topics[i].shard, &epoch, &pushed);
        const scur_t *u = &s->cur[i];
        if (u->state == TC_WALK && u->cursor < pushed && ring_after(&r->topics[i], u->cursor) < 0)
            return i;
    }
    return -1;
}

/* The next chunk of s from the rings, or the read it needs first. BEGIN waits until a chunk
 * can be made: it marks where the live events start being held for the client. */
static void advance(cq_resume_t *r, sess_t *s, uint64_t now_ms)
{
    s->last_ms = now_ms;
    chunk_t c = {0};
    for (int i = 0; i < r->ntopics && !chunk_full(r, &c); i++) {
        uint64_t epoch = 0, pushed = 0;
        r->position(r->ud, r->topics[i].name, r->topics[i].shard, &epoch, &pushed);
        if (s->cur[i].state == TC_WALK && s->cur[i].cursor < pushed) {
            if (!s->begun && ring_after(&r->topics[i], s->cur[i].cursor) < 0)
                continue;
            if (!s->begun)
                begin(r, s);
            walk_ring(r, s, i, pushed, &c);
        }
    }
    int miss = ring_miss(r, s);
    if (c.n == 0 && miss >= 0) {
        cq_free(c.evs);
        post_read(r, s, miss); /* its rows make the chunk (rows_walk) */
        return;
    }
    if (!s->begun)
        begin(r, s);
    deliver(r, s, &c, now_ms);
}

/* ---- pacing --------------------------------------------------------------------------------- */

/* The next chunk of s, when a place is free and no session waits before it; else s waits. */
static void step(cq_resume_t *r, sess_t *s, uint64_t now_ms)
{
    if (!s->credit) {
        if (cq__pace_must_wait(&r->pace)) {
            s->phase = PH_WAIT_SEND;
            cq__pace_wait(&r->pace, &s->ready_node);
            return;
        }
        s->credit = true;
        r->pace.held++;
    }
    advance(r, s, now_ms);
}

/* The waiting sessions take the free places, in order. */
static void start_ready(cq_resume_t *r)
{
    cq_list_t *n;
    while ((n = cq__pace_next(&r->pace))) {
        sess_t *s = cq_container_of(n, sess_t, ready_node);
        s->credit = true;
        r->pace.held++;
        advance(r, s, r->now_ms);
    }
}

void cq_resume_applied(cq_resume_t *r, uint32_t n, uint64_t now_ms)
{
    r->now_ms = now_ms;
    cq__pace_applied(&r->pace, n, now_ms);
    start_ready(r);
}

/* ---- reads ---------------------------------------------------------------------------------- */

/* A verify reads the one row at the client's offset (the first after offset - 1); a walk the
 * rows after the cursor. */
static void queue_read(cq_resume_t *r, sess_t *s, int i)
{
    const scur_t *u = &s->cur[i];
    bool verify = u->state == TC_VERIFY;
    action_node_t *n = cq_calloc(1, sizeof(*n));
    if (!r->next_read)
        r->next_read = 1; /* 0 is "no read" */
    if (!n || cq_map_put(&r->reads, r->next_read, s) < 0) {
        cq_free(n);
        s->phase = PH_RETRY; /* tried again at the next tick */
        return;
    }
    s->phase = verify ? PH_VERIFY : PH_READ;
    s->read_id = r->next_read++;
    n->a.kind = CQ_RESUME_READ;
    n->a.read_id = s->read_id;
    snprintf(n->a.topic, sizeof(n->a.topic), "%s", r->topics[i].name);
    n->a.shard = r->topics[i].shard;
    n->a.from = verify ? u->cursor - 1 : u->cursor;
    n->a.max = verify ? 1 : r->lim.chunk_events;
    r->reads_in_flight++;
    r->st.reads++;
    push_action(r, n);
}

/* Reads for topic i, or waits for a read slot while reads_max are in flight (FIFO). */
static void post_read(cq_resume_t *r, sess_t *s, int i)
{
    s->read_topic = i;
    if (r->reads_in_flight < r->lim.reads_max) {
        queue_read(r, s, i);
        return;
    }
    s->phase = PH_WAIT_SLOT;
    s->next_wait = NULL;
    if (r->wait_tail)
        r->wait_tail->next_wait = s;
    else
        r->wait_head = s;
    r->wait_tail = s;
}

/* The first topic still to verify (its offset must still be in the store), or -1. */
static int next_verify(cq_resume_t *r, const sess_t *s)
{
    for (int i = 0; i < r->ntopics; i++)
        if (s->cur[i].state == TC_VERIFY)
            return i;
    return -1;
}

/* Verifies the next topic or, all verified, goes on to the chunks. */
static void proceed(cq_resume_t *r, sess_t *s, uint64_t now_ms)
{
    int v = next_verify(r, s);
    if (v >= 0)
        post_read(r, s, v);
    else
        step(r, s, now_ms);
}

static void start_waiting(cq_resume_t *r)
{
    while (r->wait_head && r->reads_in_flight < r->lim.reads_max) {
        sess_t *s = r->wait_head;
        r->wait_head = s->next_wait;
        if (!r->wait_head)
            r->wait_tail = NULL;
        s->next_wait = NULL;
        queue_read(r, s, s->read_topic);
    }
}

/* Verify: the first row must be the client's offset itself; else the events after it were
 * purged (or invalidated) and the gap cannot be filled. */
static void rows_verify(cq_resume_t *r, sess_t *s, int i, int err, const cq_resume_row_t *rows,
                        size_t n)
{
    scur_t *u = &s->cur[i];
    char nm[SNAME_MAX];
    if (err < 0)
        reason(s, "topic %s: the store could not be read: %s", sname(r, i, nm), cq_strerror(err));
    else if (n == 0 || rows[0].offset != u->cursor)
        reason(s, "topic %s: offset %" PRIu64 " is no longer stored (retention purged it)",
               sname(r, i, nm), u->cursor);
    else {
        u->state = TC_WALK;
        return;
    }
    u->state = TC_NOW;
}

/* A walk's rows: the events after the cursor, up to the live offset (the later ones are the
 * ring's or the next read's). Rows come in offset order and are every committed row after the
 * cursor, so each row's prev_offset is the one before it. */
static void rows_walk(cq_resume_t *r, sess_t *s, int i, const cq_resume_row_t *rows, size_t n,
                      uint64_t now_ms)
{
    uint64_t epoch = 0, pushed = 0;
    r->position(r->ud, r->topics[i].name, r->topics[i].shard, &epoch, &pushed);
    if (!s->begun)
        begin(r, s);
    scur_t *u = &s->cur[i];
    chunk_t c = {0};
    for (size_t k = 0; k < n && rows[k].offset <= pushed && !chunk_full(r, &c); k++) {
        if (rows[k].offset <= u->cursor)
            continue;
        char pid[24] = "";
        if (rows[k].producer_id)
            snprintf(pid, sizeof(pid), "%" PRIu64, rows[k].producer_id);
        cq_topic_event_t te = {r->topics[i].name, r->topics[i].shard, epoch, rows[k].offset,
                               u->cursor,         rows[k].time_ms,    pid,   rows[k].seq,
                               rows[k].content,   rows[k].len};
        cq_buf_t *ev = cq_topic_event_encode(&te);
        if (!ev || chunk_add(&c, ev, r->topics[i].msg_type) < 0)
            break;
        u->cursor = rows[k].offset;
        r->st.events_store++;
    }
    /* No row after the cursor up to the live offset: they were purged or invalidated since.
     * The client sees the jump as a hole (prev_offset) rather than waiting for ever. */
    if (c.n == 0 && u->cursor < pushed)
        u->cursor = pushed;
    deliver(r, s, &c, now_ms);
}

void cq_resume_rows(cq_resume_t *r, uint64_t read_id, int err, const cq_resume_row_t *rows,
                    size_t n, uint64_t now_ms)
{
    r->now_ms = now_ms;
    sess_t *s = read_id && read_id <= UINT32_MAX ? cq_map_del(&r->reads, (uint32_t)read_id) : NULL;
    if (r->reads_in_flight)
        r->reads_in_flight--;
    if (s) {
        s->read_id = 0;
        if (s->phase == PH_VERIFY) {
            rows_verify(r, s, s->read_topic, err, rows, n);
            proceed(r, s, now_ms);
        } else if (err < 0) {
            s->phase = PH_RETRY;
        } else {
            rows_walk(r, s, s->read_topic, rows, n, now_ms);
        }
    }
    start_waiting(r);
    start_ready(r);
}

/* ---- requests ------------------------------------------------------------------------------- */

/* Only the topics bound to chan_id are s's; the others' cursors are out of every walk. Returns
 * how many are s's. */
static int scope(cq_resume_t *r, sess_t *s, uint32_t chan_id)
{
    int n = 0;
    s->chan_id = chan_id;
    for (int i = 0; i < r->ntopics; i++) {
        if (r->topics[i].chan_id == chan_id)
            n++;
        else
            s->cur[i] = (scur_t){TC_SKIP, UINT64_MAX};
    }
    return n;
}

/* A refusal: a result alone, BEGIN|FINAL, no session kept. */
static void refuse(cq_resume_t *r, uint32_t conn_id, uint32_t chan_id, const char *why)
{
    sess_t *s = cq_calloc(1, sizeof(*s));
    if (!s)
        return; /* the connection's worker ends its wait at its own timeout */
    cq_list_init(&s->ready_node);
    scope(r, s, chan_id);
    s->conn_id = conn_id;
    s->refusal = true;
    snprintf(s->error, sizeof(s->error), "%s", why);
    begin(r, s);
    chunk_t c = {0};
    send_chunk(r, s, &c, true);
    sess_free(r, s);
}

/* Where topic i starts for the client's position p (NULL: none given). */
static void place(cq_resume_t *r, sess_t *s, int i, const Chanqpb__TopicPosition *p)
{
    uint64_t epoch = 0, pushed = 0;
    r->position(r->ud, r->topics[i].name, r->topics[i].shard, &epoch, &pushed);
    scur_t *u = &s->cur[i];
    char nm[SNAME_MAX];
    u->state = TC_NOW;
    if (!p || (p->offset == 0 && p->epoch == 0))
        return; /* no position: from the live stream on */
    if (p->epoch != epoch) {
        reason(s,
               "topic %s: epoch %" PRIu64 " is not the shard's (%" PRIu64
               "): its history may have been rewritten",
               sname(r, i, nm), p->epoch, epoch);
        return;
    }
    if (p->offset > pushed) {
        reason(s, "topic %s: offset %" PRIu64 " is beyond the last delivered offset %" PRIu64,
               sname(r, i, nm), p->offset, pushed);
        return;
    }
    /* Offset 0 under the shard's epoch is a baseline taken while the stream had no event (a
     * result's position): every event since. Nothing precedes it, so there is nothing to
     * verify; the position just before the ring's first event needs no verify either. */
    u->cursor = p->offset;
    u->state = p->offset == 0 || p->offset == pushed || ring_has(&r->topics[i], p->offset) ||
                       ring_after(&r->topics[i], p->offset) >= 0
                   ? TC_WALK
                   : TC_VERIFY;
}

static bool topics_on(const cq_resume_t *r, uint32_t chan_id)
{
    for (int i = 0; i < r->ntopics; i++)
        if (r->topics[i].chan_id == chan_id)
            return true;
    return false;
}

void cq_resume_request(cq_resume_t *r, uint32_t conn_id, uint32_t chan_id, const void *body,
                       size_t len, uint64_t now_ms)
{
    r->now_ms = now_ms;
    r->st.requests++;
    if (!topics_on(r, chan_id)) {
        char why[96];
        snprintf(why, sizeof(why), "no durable topic is bound to channel %u", chan_id);
        refuse(r, conn_id, chan_id, why);
        return;
    }
    if (cq_map_get(&r->sessions, conn_id)) {
        refuse(r, conn_id, chan_id, "a resume is already in progress on this connection");
        return;
    }
    if (cq_map_count(&r->sessions) >= r->lim.sessions_max) {
        refuse(r, conn_id, chan_id, "too many resumes in progress: try again later");
        return;
    }
    Chanqpb__TopicResumeMessage *m =
        chanqpb__topic_resume_message__unpack(&cq__bridge_pb, len, body);
    if (!m || m->n_positions > CQ_RESUME_POSITIONS_MAX) {
        refuse(r, conn_id, chan_id,
               m ? "more than 256 positions" : "the body is not a TopicResumeMessage");
        if (m)
            chanqpb__topic_resume_message__free_unpacked(m, &cq__bridge_pb);
        return;
    }
    sess_t *s = cq_calloc(1, sizeof(*s));
    if (s)
        cq_list_init(&s->ready_node);
    if (!s || cq_map_put(&r->sessions, conn_id, s) < 0) {
        cq_free(s);
        chanqpb__topic_resume_message__free_unpacked(m, &cq__bridge_pb);
        refuse(r, conn_id, chan_id, "out of memory");
        return;
    }
    s->conn_id = conn_id;
    s->recovered = true;
    s->last_ms = now_ms;
    scope(r, s, chan_id);
    for (int i = 0; i < r->ntopics; i++) {
        if (s->cur[i].state == TC_SKIP)
            continue;
        const Chanqpb__TopicPosition *p = NULL;
        for (size_t k = 0; k < m->n_positions; k++)
            if (m->positions[k]->shard == r->topics[i].shard && m->positions[k]->topic &&
                strcasecmp(m->positions[k]->topic, r->topics[i].name) == 0)
                p = m->positions[k];
        place(r, s, i, p);
    }
    chanqpb__topic_resume_message__free_unpacked(m, &cq__bridge_pb);
    proceed(r, s, now_ms);
}

void cq_resume_more(cq_resume_t *r, uint32_t conn_id, uint64_t now_ms)
{
    r->now_ms = now_ms;
    sess_t *s = cq_map_get(&r->sessions, conn_id);
    if (s && s->phase == PH_MORE)
        step(r, s, now_ms);
}

static void unwait(cq_resume_t *r, sess_t *s)
{
    for (sess_t **pp = &r->wait_head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next_wait)
        if (*pp == s) {
            *pp = s->next_wait;
            if (r->wait_tail == s)
                r->wait_tail = prev;
            return;
        }
}

void cq_resume_gone(cq_resume_t *r, uint32_t conn_id)
{
    sess_t *s = cq_map_del(&r->sessions, conn_id);
    if (!s)
        return;
    if (s->phase == PH_WAIT_SLOT)
        unwait(r, s);
    sess_free(r, s); /* a read in flight comes back to no session; it leaves the pace's queue */
    start_ready(r);
}

/* Ends s now with a FINAL chunk (no events), so the connection's worker stops holding its live
 * events; the client sees what it missed as a hole. */
static void cut(cq_resume_t *r, sess_t *s, const char *why)
{
    if (s->phase == PH_WAIT_SLOT)
        unwait(r, s);
    cq__pace_unwait(&r->pace, &s->ready_node);
    reason(s, "%s", why);
    if (!s->begun)
        begin(r, s);
    chunk_t c = {0};
    send_chunk(r, s, &c, true);
    sess_end(r, s);
}

void cq_resume_tick(cq_resume_t *r, uint64_t now_ms)
{
    r->now_ms = now_ms;
    r->st.credits_lost += cq__pace_reclaim(&r->pace, now_ms, r->lim.idle_ms);
    uint32_t it = 0, k;
    void *v;
    while (cq_map_next(&r->sessions, &it, &k, &v)) {
        sess_t *s = v;
        if (s->phase == PH_RETRY) {
            post_read(r, s, s->read_topic);
            continue;
        }
        if (s->read_id || s->phase == PH_WAIT_SLOT || s->phase == PH_WAIT_SEND ||
            now_ms - s->last_ms < r->lim.idle_ms)
            continue;
        cut(r, s, "the resume made no progress in time");
        r->st.dropped_idle++;
        it = 0; /* the map changed */
    }
    start_ready(r);
}

/* ---- topics, actions, stats ----------------------------------------------------------------- */

void cq_resume_topics_clear(cq_resume_t *r)
{
    uint32_t it = 0, k;
    void *v;
    while (cq_map_next(&r->sessions, &it, &k, &v)) {
        cut(r, v, "the bindings were reloaded");
        it = 0;
    }
    for (int i = 0; i < r->ntopics; i++) {
        ring_clear(&r->topics[i]);
        cq_free(r->topics[i].ring);
    }
    memset(r->topics, 0, sizeof(r->topics));
    r->ntopics = 0;
}

int cq_resume_add_shard(cq_resume_t *r, uint32_t shard)
{
    for (uint32_t k = 0; k < r->nshards; k++)
        if (r->shards[k] == shard)
            return 0;
    if (r->ntopics)
        return -EBUSY;
    if (r->nshards == CQ_RESUME_SHARDS_MAX)
        return -ENOSPC;
    r->shards[r->nshards++] = shard;
    return 0;
}

/* One stream of a topic declared anew. */
static int stream_add(cq_resume_t *r, const char *topic, uint32_t shard, uint32_t chan_id,
                      uint32_t msg_type)
{
    rtopic_t *t = &r->topics[r->ntopics];
    if (!(t->ring = cq_calloc(r->lim.ring_events, sizeof(*t->ring))))
        return -ENOMEM;
    snprintf(t->name, sizeof(t->name), "%s", topic);
    t->shard = shard;
    t->chan_id = chan_id;
    t->msg_type = msg_type;
    t->cap = r->lim.ring_events;
    r->ntopics++;
    return 0;
}

int cq_resume_topic(cq_resume_t *r, const char *topic, uint32_t chan_id, uint32_t msg_type)
{
    if (!topic || !*topic || strlen(topic) > 64)
        return -EINVAL;
    int i = topic_index(r, topic, r->shards[0]);
    if (i >= 0)
        return r->topics[i].chan_id == chan_id ? 0 : -EEXIST;
    if (r->ntopics + (int)r->nshards > TOPICS_MAX)
        return -ENOSPC;
    for (uint32_t k = 0; k < r->nshards; k++) {
        int rc = stream_add(r, topic, r->shards[k], chan_id, msg_type);
        if (rc < 0) { /* none of its streams stays */
            while (k--) {
                rtopic_t *t = &r->topics[--r->ntopics];
                cq_free(t->ring);
                memset(t, 0, sizeof(*t));
            }
            return rc;
        }
    }
    return 0;
}

bool cq_resume_next(cq_resume_t *r, cq_resume_action_t *a)
{
    action_node_t *n = r->act_head;
    if (!n)
        return false;
    r->act_head = n->next;
    if (!r->act_head)
        r->act_tail = NULL;
    *a = n->a;
    cq_free(n);
    return true;
}

void cq_resume_stats(const cq_resume_t *r, cq_resume_stats_t *st)
{
    *st = r->st;
    st->sessions = cq_map_count(&r->sessions);
    st->sends_out = r->pace.in_flight;
    st->send_waiting = r->pace.nready;
}
