/* bridge.c - the engine: bindings grouped by topic, the dedup window per topic, route keys
 * out of the content, one encoded TopicEvent shared by every output (cq_bridge.h). */
#include "bridge_int.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_smap.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

typedef struct bridge_topic {
    const char *name;          /* borrowed from its first binding */
    const cq_binding_t **bind; /* its bindings in the file's order: a slice of by_topic */
    uint32_t nbind;
    bool has_route; /* the content is parsed only for topics with a route */
    cq__dedup_t dd;
    /* Per shard, the duplicate dropped last while nothing of that shard was delivered since:
     * the next event whose prev_offset is `dropped` is delivered with prev_offset `prev` (the
     * last one delivered before), so a receiver sees no hole where the bridge dropped a copy. */
    struct skip {
        uint32_t shard;
        bool set;
        uint64_t dropped, prev;
    } skip[CQ_BRIDGE_SHARDS_MAX];
    uint32_t nskip;
} bridge_topic_t;

struct cq_bridge {
    cq_bindings_t b;
    bridge_topic_t *topics; /* ntopics, in the order of their first binding */
    size_t ntopics;
    const cq_binding_t **by_topic; /* b.n pointers, grouped by topic */
    cq_smap_t idx;                 /* topic name (case-folded) -> bridge_topic_t */
    size_t outputs_max;
    cq_bridge_stats_t st;
};

/* ---- construction ------------------------------------------------------------------------ */

/* Finds or adds the topic of binding b (topics has room for every binding). */
static bridge_topic_t *topic_of(cq_bridge_t *br, const cq_binding_t *b, uint32_t window)
{
    bridge_topic_t *t = cq_smap_get(&br->idx, b->topic);
    if (t)
        return t;
    t = &br->topics[br->ntopics];
    t->name = b->topic;
    cq__dedup_init(&t->dd, window);
    if (cq_smap_put(&br->idx, t->name, t) < 0)
        return NULL;
    br->ntopics++;
    return t;
}

/* Groups the bindings by topic: counts, then slices of by_topic, then fills them. */
static int index_bindings(cq_bridge_t *br, uint32_t window)
{
    for (size_t i = 0; i < br->b.n; i++) {
        bridge_topic_t *t = topic_of(br, &br->b.v[i], window);
        if (!t)
            return -ENOMEM;
        t->nbind++;
        t->has_route |= br->b.v[i].kind == CQ_BIND_ROUTE;
    }
    size_t at = 0;
    for (size_t i = 0; i < br->ntopics; i++) {
        bridge_topic_t *t = &br->topics[i];
        t->bind = br->by_topic + at;
        at += t->nbind;
        if (t->nbind > br->outputs_max)
            br->outputs_max = t->nbind;
        t->nbind = 0; /* counted again while filling */
    }
    for (size_t i = 0; i < br->b.n; i++) {
        bridge_topic_t *t = cq_smap_get(&br->idx, br->b.v[i].topic);
        t->bind[t->nbind++] = &br->b.v[i];
    }
    return 0;
}

cq_bridge_t *cq_bridge_new(cq_bindings_t *b, uint32_t dedup_window)
{
    cq_bridge_t *br = cq_calloc(1, sizeof(*br));
    if (!br) {
        cq_bindings_free(b);
        return NULL;
    }
    br->b = *b;
    *b = (cq_bindings_t){NULL, 0};
    cq_smap_init(&br->idx, true);
    size_t n = br->b.n ? br->b.n : 1;
    br->topics = cq_calloc(n, sizeof(*br->topics));
    br->by_topic = cq_calloc(n, sizeof(*br->by_topic));
    uint32_t window = dedup_window > CQ_BRIDGE_DEDUP_MAX ? CQ_BRIDGE_DEDUP_MAX : dedup_window;
    if (!br->topics || !br->by_topic || index_bindings(br, window) < 0) {
        cq_bridge_free(br);
        return NULL;
    }
    return br;
}

void cq_bridge_free(cq_bridge_t *br)
{
    if (!br)
        return;
    for (size_t i = 0; i < br->ntopics; i++)
        cq__dedup_done(&br->topics[i].dd);
    cq_smap_done(&br->idx);
    cq_free(br->topics);
    cq_free(br->by_topic);
    cq_bindings_free(&br->b);
    cq_free(br);
}

/* ---- queries ----------------------------------------------------------------------------- */

const cq_bindings_t *cq_bridge_bindings(const cq_bridge_t *br)
{
    return &br->b;
}

bool cq_bridge_watches(const cq_bridge_t *br, const char *topic)
{
    return cq_smap_get(&br->idx, topic) != NULL;
}

size_t cq_bridge_ntopics(const cq_bridge_t *br)
{
    return br->ntopics;
}

const char *cq_bridge_topic(const cq_bridge_t *br, size_t i)
{
    return i < br->ntopics ? br->topics[i].name : NULL;
}

size_t cq_bridge_outputs_max(const cq_bridge_t *br)
{
    return br->outputs_max;
}

void cq_bridge_stats(const cq_bridge_t *br, cq_bridge_stats_t *ret_stats)
{
    *ret_stats = br->st;
}

/* ---- route keys -------------------------------------------------------------------------- */

/* The content as a JSON object (returned owned in *ret; NULL when it is not one, which makes
 * every route unroutable). Duplicate keys are refused: two "user_id" fields must not route by
 * whichever one this parser keeps. A failed parse is retried once, as in bindings.c, to tell
 * memory from syntax: -ENOMEM when the retry fails for memory too. */
static int load_content(const cq_topic_event_t *ev, json_t **ret)
{
    const char *s = ev->content ? (const char *)ev->content : "";
    json_error_t jerr;
    json_t *v = json_loadb(s, ev->len, JSON_REJECT_DUPLICATES, &jerr);
    if (!v)
        v = json_loadb(s, ev->len, JSON_REJECT_DUPLICATES, &jerr);
    if (!v && (json_error_code(&jerr) == json_error_out_of_memory || jerr.text[0] == '\0'))
        return -ENOMEM;
    if (v && !json_is_object(v)) {
        json_decref(v);
        v = NULL;
    }
    *ret = v;
    return 0;
}

/* Writes root[field] as a player key into key (CQ_BRIDGE_KEY_MAX + 1 bytes): a non-empty
 * string of at most CQ_BRIDGE_KEY_MAX bytes as it is (jansson refuses \u0000, so it holds no
 * NUL), an integer as its decimal text. False for anything else. */
static bool route_key(json_t *root, const char *field, char *key)
{
    json_t *v = root ? json_object_get(root, field) : NULL;
    if (json_is_integer(v)) {
        snprintf(key, CQ_BRIDGE_KEY_MAX + 1, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return true;
    }
    if (!json_is_string(v))
        return false;
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (n == 0 || n > CQ_BRIDGE_KEY_MAX)
        return false;
    memcpy(key, s, n);
    key[n] = '\0';
    return true;
}

int cq_bridge_route_key(const uint8_t *content, size_t len, const char *field, char *key)
{
    cq_topic_event_t ev = {.content = content, .len = len};
    json_t *root = NULL;
    if (load_content(&ev, &root) < 0)
        return -ENOMEM;
    bool ok = route_key(root, field, key);
    json_decref(root);
    return ok ? 1 : 0;
}

/* ---- events ------------------------------------------------------------------------------ */

static int check_event(const cq_topic_event_t *ev, size_t *ret_idlen)
{
    if (!ev || !ev->topic || (!ev->content && ev->len))
        return -EINVAL;
    size_t idlen = ev->producer_id ? strlen(ev->producer_id) : 0;
    if (idlen > CQ_BRIDGE_PRODUCER_MAX)
        return CQ_EFIELD;
    *ret_idlen = idlen;
    return 0;
}

/* Writes one output (without its buffer) per binding of t that applies and returns how many;
 * *ret_unroutable gets the number of route bindings that gave no key. */
static size_t fill_outputs(const bridge_topic_t *t, json_t *root, cq_bridge_out_t *out,
                           uint64_t *ret_unroutable)
{
    size_t n = 0;
    *ret_unroutable = 0;
    for (uint32_t i = 0; i < t->nbind; i++) {
        const cq_binding_t *b = t->bind[i];
        out[n].key[0] = '\0';
        if (b->kind == CQ_BIND_ROUTE && !route_key(root, b->key, out[n].key)) {
            (*ret_unroutable)++;
            continue;
        }
        out[n].b = b;
        out[n].event = NULL;
        n++;
    }
    return n;
}

/* The outputs of a new (not duplicate) event: keys first, then the one encode, shared. 0 or
 * -ENOMEM, with nothing counted then. */
static int deliver(cq_bridge_t *br, const bridge_topic_t *t, const cq_topic_event_t *ev,
                   cq_bridge_out_t *out, size_t *ret_n)
{
    json_t *root = NULL;
    if (t->has_route && load_content(ev, &root) < 0)
        return -ENOMEM;
    uint64_t unroutable;
    size_t n = fill_outputs(t, root, out, &unroutable);
    json_decref(root);
    cq_buf_t *buf = n ? cq_topic_event_encode(ev) : NULL;
    if (n && !buf)
        return -ENOMEM;
    if (n)
        cq_buf_ref_n(buf, (uint32_t)n - 1); /* one reference per output */
    for (size_t i = 0; i < n; i++)
        out[i].event = buf;
    br->st.unroutable += unroutable;
    *ret_n = n;
    return 0;
}

/* The topic's skip entry of shard (a new one when add and there is room), or NULL. */
static struct skip *skip_of(bridge_topic_t *t, uint32_t shard, bool add)
{
    for (uint32_t i = 0; i < t->nskip; i++)
        if (t->skip[i].shard == shard)
            return &t->skip[i];
    if (!add || t->nskip == CQ_BRIDGE_SHARDS_MAX)
        return NULL;
    t->skip[t->nskip] = (struct skip){.shard = shard};
    return &t->skip[t->nskip++];
}

static void skip_dropped(bridge_topic_t *t, const cq_topic_event_t *ev)
{
    struct skip *k = skip_of(t, ev->shard, true);
    if (!k)
        return;
    k->prev = k->set && ev->prev_offset == k->dropped ? k->prev : ev->prev_offset;
    k->dropped = ev->offset;
    k->set = true;
}

/* The prev_offset ev is delivered with. */
static uint64_t skip_delivered(bridge_topic_t *t, const cq_topic_event_t *ev)
{
    struct skip *k = t->nskip ? skip_of(t, ev->shard, false) : NULL;
    if (!k || !k->set)
        return ev->prev_offset;
    k->set = false;
    return ev->prev_offset == k->dropped ? k->prev : ev->prev_offset;
}

int cq_bridge_event(cq_bridge_t *br, const cq_topic_event_t *ev, cq_bridge_out_t *out, size_t cap)
{
    size_t idlen = 0, n = 0;
    int rc = check_event(ev, &idlen);
    if (rc < 0)
        return rc;
    bridge_topic_t *t = cq_smap_get(&br->idx, ev->topic);
    if (!t)
        return 0;
    if (cap < t->nbind)
        return -ENOSPC;
    if (idlen && cq__dedup_seen(&t->dd, ev->producer_id, idlen, ev->seq)) {
        br->st.events++;
        br->st.duplicates++;
        skip_dropped(t, ev);
        return 0;
    }
    if (idlen && cq__dedup_reserve(&t->dd) < 0)
        return -ENOMEM;
    cq_topic_event_t e = *ev;
    e.prev_offset = skip_delivered(t, ev);
    rc = deliver(br, t, &e, out, &n);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        out[i].prev_offset = e.prev_offset;
    if (idlen)
        cq__dedup_add(&t->dd, ev->producer_id, idlen, ev->seq);
    br->st.events++;
    br->st.outputs += n;
    return (int)n;
}
