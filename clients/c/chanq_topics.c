/* chanq_topics.c - the client's side of durable-topic resume (chanq_topics.h): positions per
 * (topic, shard), the dedup window, and the resume, result and ack messages. */
#include "chanq_topics.h"

#include "cq_alloc.h"

#include <errno.h>
#include <string.h>

#define NIL UINT32_MAX
/* The position index: open addressing over twice the positions, so it is at most half full
 * and a probe stays short. Positions are never removed, so no tombstones are needed. */
#define POS_SLOTS (2u * CHANQ_TOPICS_MAX_POSITIONS)

typedef struct pos {
    char topic[CHANQ_TOPICS_TOPIC_MAX + 1];
    uint32_t shard;
    chanq_topic_pos_t p;
} pos_t;

/* One key of the window. The topic is not copied: pos names a position of the key's topic
 * (positions live as long as the tracker), which holds its name. */
typedef struct win_key {
    uint64_t seq;
    uint32_t hash;
    uint32_t next; /* the next key of the same bucket, or NIL */
    uint16_t pos;
    uint8_t idlen;
    char id[CHANQ_TOPICS_PRODUCER_MAX];
} win_key_t;

struct chanq_topics {
    pos_t *pos; /* CHANQ_TOPICS_MAX_POSITIONS, n_pos in use, in the order they were made */
    size_t n_pos;
    uint16_t *index; /* POS_SLOTS: position + 1, 0 = empty */
    /* The window: a FIFO ring of keys and a chained hash index over it (as the bridge's,
     * src/bridge/dedup.c), so a lookup walks one short chain and the oldest key leaves when a
     * new one enters a full ring. NULL until the first keyed event. */
    win_key_t *keys;   /* CHANQ_TOPICS_WINDOW */
    uint32_t *buckets; /* CHANQ_TOPICS_WINDOW chain heads (key index or NIL) */
    uint32_t head;     /* the oldest key */
    uint32_t count;    /* keys in use */
    /* Channels whose resume is pending: a handful at most, scanned only over a hole. */
    uint32_t *pending; /* CHANQ_TOPICS_MAX_POSITIONS */
    size_t n_pending;
    char *error; /* the last result's error text (owned), NULL when none */
    chanq_topics_stats_t st;
};

/* ---- hashing and names -------------------------------------------------------------------- */

static uint32_t fnv(uint32_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

/* murmur3's fmix32: the low bits a mask keeps depend on every input byte. */
static uint32_t fmix(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

static uint32_t pos_hash(const char *topic, size_t tlen, uint32_t shard)
{
    uint8_t s[4] = {(uint8_t)shard, (uint8_t)(shard >> 8), (uint8_t)(shard >> 16),
                    (uint8_t)(shard >> 24)};
    return fmix(fnv(fnv(2166136261u, topic, tlen), s, sizeof(s)));
}

/* The topic and the producer id are both hashed with their lengths' terminator (the NUL), so
 * ("ab", "c") and ("a", "bc") differ. */
static uint32_t key_hash(const char *topic, size_t tlen, const char *id, size_t idlen, uint64_t seq)
{
    uint8_t s[8];
    for (int i = 0; i < 8; i++)
        s[i] = (uint8_t)(seq >> (8 * i));
    uint32_t h = fnv(2166136261u, topic, tlen + 1);
    h = fnv(h, id, idlen + 1);
    return fmix(fnv(h, s, sizeof(s)));
}

/* The length of a topic name ([A-Za-z0-9_], 1 to CHANQ_TOPICS_TOPIC_MAX), or 0 if it is not
 * one. */
static size_t topic_len(const char *s)
{
    if (!s)
        return 0;
    size_t n = 0;
    for (; s[n]; n++) {
        char ch = s[n];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_';
        if (!ok || n == CHANQ_TOPICS_TOPIC_MAX)
            return 0;
    }
    return n;
}

/* ---- positions ---------------------------------------------------------------------------- */

static uint32_t pos_find(const chanq_topics_t *t, const char *topic, size_t tlen, uint32_t shard)
{
    for (uint32_t s = pos_hash(topic, tlen, shard) & (POS_SLOTS - 1);;
         s = (s + 1) & (POS_SLOTS - 1)) {
        if (t->index[s] == 0)
            return NIL;
        const pos_t *p = &t->pos[t->index[s] - 1];
        if (p->shard == shard && strcmp(p->topic, topic) == 0)
            return t->index[s] - 1u;
    }
}

/* Makes the position of (topic, shard), known to be absent, at (0, 0) on channel. Returns its
 * index, or NIL when the tracker is full. */
static uint32_t pos_make(chanq_topics_t *t, const char *topic, size_t tlen, uint32_t shard,
                         uint32_t channel)
{
    if (t->n_pos == CHANQ_TOPICS_MAX_POSITIONS)
        return NIL;
    uint32_t i = (uint32_t)t->n_pos++;
    pos_t *p = &t->pos[i];
    memcpy(p->topic, topic, tlen + 1);
    p->shard = shard;
    p->p = (chanq_topic_pos_t){.channel = channel};
    uint32_t s = pos_hash(topic, tlen, shard) & (POS_SLOTS - 1);
    while (t->index[s] != 0)
        s = (s + 1) & (POS_SLOTS - 1);
    t->index[s] = (uint16_t)(i + 1);
    t->st.positions = t->n_pos;
    return i;
}

/* ---- the dedup window --------------------------------------------------------------------- */

static int keys_reserve(chanq_topics_t *t)
{
    if (t->keys)
        return 0;
    t->keys = cq_malloc(CHANQ_TOPICS_WINDOW * sizeof(*t->keys));
    t->buckets = cq_malloc(CHANQ_TOPICS_WINDOW * sizeof(*t->buckets));
    if (!t->keys || !t->buckets) {
        cq_free(t->keys);
        cq_free(t->buckets);
        t->keys = NULL;
        t->buckets = NULL;
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < CHANQ_TOPICS_WINDOW; i++)
        t->buckets[i] = NIL;
    return 0;
}

static bool key_seen(const chanq_topics_t *t, uint32_t h, const char *topic, const char *id,
                     size_t idlen, uint64_t seq)
{
    for (uint32_t i = t->buckets[h & (CHANQ_TOPICS_WINDOW - 1)]; i != NIL; i = t->keys[i].next) {
        const win_key_t *k = &t->keys[i];
        if (k->hash == h && k->seq == seq && k->idlen == idlen && memcmp(k->id, id, idlen) == 0 &&
            strcmp(t->pos[k->pos].topic, topic) == 0)
            return true;
    }
    return false;
}

/* Takes key i out of its bucket's chain. */
static void key_unlink(chanq_topics_t *t, uint32_t i)
{
    uint32_t *p = &t->buckets[t->keys[i].hash & (CHANQ_TOPICS_WINDOW - 1)];
    while (*p != i)
        p = &t->keys[*p].next;
    *p = t->keys[i].next;
}

static void key_add(chanq_topics_t *t, uint32_t h, uint32_t pos, const char *id, size_t idlen,
                    uint64_t seq)
{
    uint32_t i;
    if (t->count == CHANQ_TOPICS_WINDOW) { /* full: the oldest key's slot takes the newest */
        i = t->head;
        key_unlink(t, i);
        t->head = (t->head + 1) % CHANQ_TOPICS_WINDOW;
    } else {
        i = (t->head + t->count) % CHANQ_TOPICS_WINDOW;
        t->count++;
    }
    win_key_t *k = &t->keys[i];
    k->seq = seq;
    k->hash = h;
    k->pos = (uint16_t)pos;
    k->idlen = (uint8_t)idlen;
    memcpy(k->id, id, idlen);
    uint32_t *b = &t->buckets[h & (CHANQ_TOPICS_WINDOW - 1)];
    k->next = *b;
    *b = i;
    t->st.keys = t->count;
}

/* ---- pending resumes ---------------------------------------------------------------------- */

static size_t pending_find(const chanq_topics_t *t, uint32_t channel)
{
    size_t i = 0;
    while (i < t->n_pending && t->pending[i] != channel)
        i++;
    return i;
}

bool chanq_topics_pending(const chanq_topics_t *t, uint32_t channel)
{
    return t && pending_find(t, channel) < t->n_pending;
}

static void pending_clear(chanq_topics_t *t, uint32_t channel)
{
    size_t i = pending_find(t, channel);
    if (i < t->n_pending)
        t->pending[i] = t->pending[--t->n_pending];
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

chanq_topics_t *chanq_topics_new(void)
{
    chanq_topics_t *t = cq_calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->pos = cq_malloc(CHANQ_TOPICS_MAX_POSITIONS * sizeof(*t->pos));
    t->index = cq_calloc(POS_SLOTS, sizeof(*t->index));
    t->pending = cq_malloc(CHANQ_TOPICS_MAX_POSITIONS * sizeof(*t->pending));
    if (!t->pos || !t->index || !t->pending)
        return chanq_topics_free(t);
    return t;
}

chanq_topics_t *chanq_topics_free(chanq_topics_t *t)
{
    if (!t)
        return NULL;
    cq_free(t->pos);
    cq_free(t->index);
    cq_free(t->keys);
    cq_free(t->buckets);
    cq_free(t->pending);
    cq_free(t->error);
    cq_free(t);
    return NULL;
}

/* ---- accept ------------------------------------------------------------------------------- */

/* Rules 3 to 6 for an event of a held position p: 1 accept, 0 drop (counted). */
static int judge(chanq_topics_t *t, uint32_t channel, const chanq_topic_pos_t *p,
                 const Chanqpb__TopicEvent *ev)
{
    if (ev->epoch != p->epoch) {
        t->st.epoch_changes++;
        return 1;
    }
    if (ev->offset <= p->offset) {
        t->st.duplicates++;
        return 0;
    }
    if (ev->prev_offset == p->offset)
        return 1;
    if (chanq_topics_pending(t, channel)) {
        t->st.skipped++;
        return 0;
    }
    t->st.holes++;
    return 1;
}

int chanq_topics_accept(chanq_topics_t *t, uint32_t channel, const Chanqpb__TopicEvent *ev)
{
    if (!t || !ev)
        return -EINVAL;
    size_t tlen = topic_len(ev->topic);
    if (tlen == 0)
        return CQ_EBADTOPIC;
    const char *id = ev->producer_id ? ev->producer_id : "";
    size_t idlen = strlen(id);
    if (idlen > CHANQ_TOPICS_PRODUCER_MAX)
        return CQ_EFIELD;
    uint32_t h = 0;
    if (idlen) {
        int r = keys_reserve(t);
        if (r < 0)
            return r;
        h = key_hash(ev->topic, tlen, id, idlen, ev->seq);
        if (key_seen(t, h, ev->topic, id, idlen, ev->seq)) {
            t->st.duplicates++;
            return 0;
        }
    }
    uint32_t i = pos_find(t, ev->topic, tlen, ev->shard);
    if (i == NIL) {
        i = pos_make(t, ev->topic, tlen, ev->shard, channel);
        if (i == NIL)
            return CQ_ELIMIT;
    } else if (!judge(t, channel, &t->pos[i].p, ev)) {
        return 0;
    }
    t->pos[i].p = (chanq_topic_pos_t){.epoch = ev->epoch, .offset = ev->offset, .channel = channel};
    if (idlen)
        key_add(t, h, i, id, idlen, ev->seq);
    t->st.accepted++;
    return 1;
}

/* ---- resume, ack ------------------------------------------------------------------------- */

/* The positions on channel (every position when all) as TopicPositions pointing into the
 * tracker: *ret_ptrs is owned (cq_free; NULL when *ret_n is 0) and borrows the tracker. */
static int positions_new(const chanq_topics_t *t, bool all, uint32_t channel,
                         Chanqpb__TopicPosition ***ret_ptrs, size_t *ret_n)
{
    *ret_ptrs = NULL;
    *ret_n = 0;
    size_t n = 0;
    for (size_t i = 0; i < t->n_pos; i++)
        n += all || t->pos[i].p.channel == channel;
    if (n == 0)
        return 0;
    /* One block: the pointer array, then the messages it points to. */
    Chanqpb__TopicPosition **ptrs = cq_malloc(n * (sizeof(*ptrs) + sizeof(**ptrs)));
    if (!ptrs)
        return -ENOMEM;
    Chanqpb__TopicPosition *msgs = (Chanqpb__TopicPosition *)(ptrs + n);
    size_t j = 0;
    for (size_t i = 0; i < t->n_pos; i++) {
        const pos_t *p = &t->pos[i];
        if (!all && p->p.channel != channel)
            continue;
        msgs[j] = (Chanqpb__TopicPosition)CHANQPB__TOPIC_POSITION__INIT;
        msgs[j].topic = (char *)p->topic; /* protobuf-c's field is not const; only read */
        msgs[j].shard = p->shard;
        msgs[j].epoch = p->p.epoch;
        msgs[j].offset = p->p.offset;
        ptrs[j] = &msgs[j];
        j++;
    }
    *ret_ptrs = ptrs;
    *ret_n = n;
    return 0;
}

int chanq_topics_resume(chanq_topics_t *t, chanq_client_t *c, uint32_t channel)
{
    if (!t || !c)
        return -EINVAL;
    bool was = chanq_topics_pending(t, channel);
    if (!was && t->n_pending == CHANQ_TOPICS_MAX_POSITIONS)
        return CQ_ELIMIT;
    Chanqpb__TopicResumeMessage m = CHANQPB__TOPIC_RESUME_MESSAGE__INIT;
    int r = positions_new(t, false, channel, &m.positions, &m.n_positions);
    if (r < 0)
        return r;
    r = chanq_client_send(c, channel, 0, 0, CHANQ_MSG_TOPIC_RESUME, &m.base);
    cq_free(m.positions);
    if (r == 0 && !was)
        t->pending[t->n_pending++] = channel;
    return r;
}

int chanq_topics_ack(const chanq_topics_t *t, chanq_client_t *c)
{
    if (!t || !c)
        return -EINVAL;
    Chanqpb__TopicAckMessage m = CHANQPB__TOPIC_ACK_MESSAGE__INIT;
    int r = positions_new(t, true, 0, &m.positions, &m.n_positions);
    if (r < 0)
        return r;
    r = chanq_client_send(c, 0, 0, 0, CHANQ_MSG_TOPIC_ACK, &m.base);
    cq_free(m.positions);
    return r;
}

/* ---- the result --------------------------------------------------------------------------- */

/* Applies one position of a result received on channel. Returns 0, CQ_EBADTOPIC or CQ_ELIMIT. */
static int result_apply(chanq_topics_t *t, uint32_t channel, bool recovered,
                        const Chanqpb__TopicPosition *rp)
{
    size_t tlen = topic_len(rp->topic);
    if (tlen == 0)
        return CQ_EBADTOPIC;
    uint32_t i = pos_find(t, rp->topic, tlen, rp->shard);
    if (i == NIL)
        i = pos_make(t, rp->topic, tlen, rp->shard, channel);
    if (i == NIL)
        return CQ_ELIMIT;
    chanq_topic_pos_t *p = &t->pos[i].p;
    /* A new position (0, 0) takes the result's too: made just now, it handled nothing. */
    if (!recovered || rp->epoch != p->epoch || rp->offset > p->offset) {
        p->epoch = rp->epoch;
        p->offset = rp->offset;
    }
    p->channel = channel;
    return 0;
}

int chanq_topics_on_result(chanq_topics_t *t, uint32_t channel, const void *body, size_t len,
                           bool *recovered)
{
    if (!t || (!body && len))
        return -EINVAL;
    if (recovered)
        *recovered = false;
    Chanqpb__TopicResumeResultMessage *m =
        chanq_unpack(&chanqpb__topic_resume_result_message__descriptor, body, len);
    char *err = m && m->error && m->error[0] ? cq_strdup(m->error) : NULL;
    if (m && m->error && m->error[0] && !err) {
        chanq_unpack_free(m);
        return -ENOMEM;
    }
    /* A result that does not parse still ends the resume: holes are no longer skipped. */
    pending_clear(t, channel);
    cq_free(t->error);
    t->error = err;
    if (!m)
        return CQ_EDECODE;
    int first = 0;
    for (size_t i = 0; i < m->n_positions; i++) {
        int r = result_apply(t, channel, m->recovered, m->positions[i]);
        if (r < 0 && first == 0)
            first = r;
    }
    if (recovered)
        *recovered = m->recovered;
    chanq_unpack_free(m);
    return first;
}

const char *chanq_topics_result_error(const chanq_topics_t *t)
{
    return t && t->error ? t->error : "";
}

/* ---- state -------------------------------------------------------------------------------- */

int chanq_topics_position(const chanq_topics_t *t, const char *topic, uint32_t shard,
                          chanq_topic_pos_t *ret)
{
    if (!t || !topic || !ret)
        return -EINVAL;
    size_t tlen = topic_len(topic);
    uint32_t i = tlen ? pos_find(t, topic, tlen, shard) : NIL;
    if (i == NIL)
        return -ENOENT;
    *ret = t->pos[i].p;
    return 0;
}

void chanq_topics_stats(const chanq_topics_t *t, chanq_topics_stats_t *ret)
{
    *ret = t->st;
}
