/* fuzz_bridge - the bridge engine (src/bridge): the bindings document, then a script of events
 * through cq_bridge_event, and the resume and acknowledge decoders (proto/bridge.proto).
 *
 * Input: a bindings document, then optionally a 0 byte and a script: one byte for the dedup
 * window (its value mod 9), then events of 5 bytes plus content:
 *
 *   [topic: index into the bound topics mod (n + 1), n = "zz-unbound"; bit 7 upper-cases it]
 *   [producer: mod 6 -> NULL, "", "p1", "p2", a 64-byte id, a 65-byte id (refused)]
 *   [seq mod 8] [content length, u16 little-endian, clamped to what is left] [content]
 *
 * When the document is refused, a fixed one is used, so the events always reach the engine.
 * Invariants: a refused document has a message and CQ_ECONFIG; a parsed one obeys its rules;
 * the engine's duplicates are exactly a naive model's (the last `window` keyed events per
 * topic); every output of an event shares one buffer holding one reference per output, which
 * decodes back to the event; a route's key is the content's field; the counters add up. And
 * the whole input and the script are unpacked as each of the bridge's messages, as the core
 * would (protobuf-c into a capped arena), and re-packed (repack() has the invariants). */
#include "fuzz_common.h"

#include "bridge.pb-c.h"
#include "cq_alloc.h"
#include "cq_bridge.h"
#include "cq_err.h"
#include "cq_resume.h"
#include "cq_route.h"
#include "cq_wire.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char fallback[] =
    "{\"bindings\":[{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201},"
    "{\"topic\":\"vip\",\"broadcast\":\"topic\",\"msg_type\":202},"
    "{\"topic\":\"rel\",\"broadcast\":\"global\",\"msg_type\":200},"
    "{\"topic\":\"Vip\",\"route\":\"guild\",\"msg_type\":203}]}";

#define ID64 "i234567890123456789012345678901234567890123456789012345678901234"

/* ---- the resume and acknowledge decoders ------------------------------------------------ */

/* The bridge's messages are unpacked as the core unpacks every body: protobuf-c into the frame's
 * arena with a byte cap (cq_wire_unpack). */
#define ARENA_CAP (16u * 1024u)
static cq_wire_arena_t arena, arena2;

static void check_positions(Chanqpb__TopicPosition *const *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(p[i] && p[i]->topic);
}

/* What every decoded message must hold: its repeated positions are there, strings are set. */
static void check_decoded(const ProtobufCMessage *m)
{
    if (m->descriptor == &chanqpb__topic_resume_message__descriptor) {
        const Chanqpb__TopicResumeMessage *r = (const void *)m;
        check_positions(r->positions, r->n_positions);
    } else if (m->descriptor == &chanqpb__topic_ack_message__descriptor) {
        const Chanqpb__TopicAckMessage *a = (const void *)m;
        check_positions(a->positions, a->n_positions);
    } else if (m->descriptor == &chanqpb__topic_resume_result_message__descriptor) {
        const Chanqpb__TopicResumeResultMessage *r = (const void *)m;
        check_positions(r->positions, r->n_positions);
        FUZZ_CHECK(r->error != NULL);
    } else {
        const Chanqpb__TopicEvent *e = (const void *)m;
        FUZZ_CHECK(e->topic && e->producer_id && (e->content.len == 0 || e->content.data));
    }
}

/* A successful unpack stays within the arena's cap and re-packs; when those bytes unpack again
 * they re-pack identically. They need not unpack (fuzz_wire_packet.c says why: protobuf-c
 * re-emits an unknown field 0 read from an overlong tag as the tag 00, which it refuses, and
 * truncates strings at an embedded NUL). */
static void repack(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n)
{
    ProtobufCMessage *m = cq_wire_unpack(d, p, n, &arena);
    FUZZ_CHECK(arena.arena.used <= ARENA_CAP);
    if (m) {
        check_decoded(m);
        size_t a_len = protobuf_c_message_get_packed_size(m);
        uint8_t *a = malloc(a_len + 1);
        FUZZ_CHECK(a && protobuf_c_message_pack(m, a) == a_len);
        ProtobufCMessage *m2 = cq_wire_unpack(d, a, a_len, &arena2);
        if (m2) {
            size_t b_len = protobuf_c_message_get_packed_size(m2);
            uint8_t *b = malloc(b_len + 1);
            FUZZ_CHECK(b && protobuf_c_message_pack(m2, b) == b_len);
            FUZZ_CHECK(a_len == b_len && memcmp(a, b, a_len) == 0);
            free(b);
        }
        free(a);
    }
    cq_wire_arena_reset(&arena);
    cq_wire_arena_reset(&arena2);
}

static void unpack_all(const uint8_t *p, size_t n)
{
    repack(&chanqpb__topic_resume_message__descriptor, p, n);
    repack(&chanqpb__topic_ack_message__descriptor, p, n);
    repack(&chanqpb__topic_resume_result_message__descriptor, p, n);
    repack(&chanqpb__topic_event__descriptor, p, n);
}

/* ---- the document ------------------------------------------------------------------------ */

static void check_bindings(const cq_bindings_t *b)
{
    FUZZ_CHECK(b->n <= CQ_BRIDGE_BINDINGS_MAX);
    for (size_t i = 0; i < b->n; i++) {
        const cq_binding_t *x = &b->v[i];
        FUZZ_CHECK(x->topic && strlen(x->topic) >= 1 && strlen(x->topic) <= 64);
        FUZZ_CHECK(x->msg_type >= 100 && x->msg_type <= 65535);
        if (x->kind == CQ_BIND_BROADCAST)
            FUZZ_CHECK(!x->key && x->channel &&
                       (!strcmp(x->channel, "global") || !strcmp(x->channel, "topic")));
        else
            FUZZ_CHECK(x->kind == CQ_BIND_ROUTE && !x->channel && x->key && x->key[0] &&
                       strlen(x->key) <= CQ_BRIDGE_FIELD_MAX);
    }
}

static cq_bridge_t *bridge_from(const uint8_t *doc, size_t n, uint32_t window)
{
    cq_bindings_t b = {NULL, 0};
    char err[256] = "";
    int rc = cq_bindings_parse((const char *)doc, n, &b, err, sizeof(err));
    if (rc == 0) {
        check_bindings(&b);
    } else {
        FUZZ_CHECK(rc == CQ_ECONFIG && err[0] != '\0');
        FUZZ_CHECK(cq_bindings_parse(fallback, strlen(fallback), &b, NULL, 0) == 0);
    }
    cq_bridge_t *br = cq_bridge_new(&b, window);
    FUZZ_CHECK(br && !b.v);
    return br;
}

/* ---- the naive dedup model ---------------------------------------------------------------- */

typedef struct key {
    char id[CQ_BRIDGE_PRODUCER_MAX + 1];
    uint64_t seq;
} mkey_t;

typedef struct model {
    mkey_t *ring; /* per topic: window keys, oldest first */
    uint32_t *count;
    uint32_t window;
} model_t;

/* True (and nothing changes) if (id, seq) is among topic t's last window keys; else adds it. */
static bool model_seen(model_t *m, size_t t, const char *id, uint64_t seq)
{
    mkey_t *r = m->ring + t * m->window;
    for (uint32_t i = 0; i < m->count[t]; i++)
        if (r[i].seq == seq && strcmp(r[i].id, id) == 0)
            return true;
    if (m->window == 0)
        return false;
    if (m->count[t] == m->window) {
        memmove(r, r + 1, (m->window - 1) * sizeof(*r));
        m->count[t]--;
    }
    snprintf(r[m->count[t]].id, sizeof(r->id), "%s", id);
    r[m->count[t]++].seq = seq;
    return false;
}

/* ---- events ------------------------------------------------------------------------------ */

/* The bound topic of br that name folds to (its index), or ntopics. */
static size_t topic_index(const cq_bridge_t *br, const char *name)
{
    size_t i = 0;
    while (i < cq_bridge_ntopics(br) && strcasecmp(cq_bridge_topic(br, i), name) != 0)
        i++;
    return i;
}

static void check_key(const cq_topic_event_t *ev, const cq_bridge_out_t *o)
{
    size_t n = strlen(o->key);
    FUZZ_CHECK(n >= 1 && n <= CQ_BRIDGE_KEY_MAX);
    json_t *root = json_loadb((const char *)ev->content, ev->len, JSON_REJECT_DUPLICATES, NULL);
    FUZZ_CHECK(root != NULL);
    json_t *v = json_object_get(root, o->b->key);
    if (json_is_string(v)) {
        FUZZ_CHECK(strcmp(json_string_value(v), o->key) == 0);
    } else {
        char text[32];
        FUZZ_CHECK(json_is_integer(v));
        snprintf(text, sizeof(text), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        FUZZ_CHECK(strcmp(text, o->key) == 0);
    }
    json_decref(root);
}

static void check_outputs(const cq_topic_event_t *ev, cq_bridge_out_t *out, int n)
{
    if (n == 0)
        return;
    FUZZ_CHECK(cq_buf_refs(out[0].event) == (uint32_t)n);
    Chanqpb__TopicEvent *m =
        chanqpb__topic_event__unpack(NULL, out[0].event->len, out[0].event->data);
    FUZZ_CHECK(m && strcmp(m->topic, ev->topic) == 0 && m->seq == ev->seq);
    FUZZ_CHECK(strcmp(m->producer_id, ev->producer_id ? ev->producer_id : "") == 0);
    FUZZ_CHECK(m->content.len == ev->len &&
               (!ev->len || !memcmp(m->content.data, ev->content, ev->len)));
    chanqpb__topic_event__free_unpacked(m, NULL);
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(out[i].event == out[0].event);
        FUZZ_CHECK(strcasecmp(out[i].b->topic, ev->topic) == 0);
        if (out[i].b->kind == CQ_BIND_ROUTE)
            check_key(ev, &out[i]);
        else
            FUZZ_CHECK(out[i].key[0] == '\0');
    }
    for (int i = 0; i < n; i++)
        cq_buf_unref(out[i].event);
}

static const char *producer(uint8_t sel)
{
    static const char *const ids[] = {NULL, "", "p1", "p2", ID64, ID64 "5"};
    return ids[sel % 6];
}

typedef struct run {
    cq_bridge_t *br;
    model_t m;
    cq_bridge_stats_t want;
    cq_bridge_out_t *out;
} run_t;

static void one_event(run_t *r, const uint8_t *rec, const uint8_t *content, size_t len)
{
    size_t nt = cq_bridge_ntopics(r->br);
    char topic[CQ_BRIDGE_BINDINGS_MAX + 72];
    size_t t = rec[0] % 128 % (nt + 1);
    snprintf(topic, sizeof(topic), "%s", t < nt ? cq_bridge_topic(r->br, t) : "zz-unbound");
    for (char *c = topic; (rec[0] & 0x80) && *c; c++)
        *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
    cq_topic_event_t ev = {topic, 0, 1, 7, 3, 5, producer(rec[1]), rec[2] % 8, content, len};
    int n = cq_bridge_event(r->br, &ev, r->out, cq_bridge_outputs_max(r->br));
    const char *id = ev.producer_id ? ev.producer_id : "";
    if (strlen(id) > CQ_BRIDGE_PRODUCER_MAX) {
        FUZZ_CHECK(n == CQ_EFIELD);
        return;
    }
    FUZZ_CHECK(n >= 0);
    FUZZ_CHECK(topic_index(r->br, topic) == (t < nt ? t : nt));
    if (t == nt) {
        FUZZ_CHECK(n == 0);
        return;
    }
    r->want.events++;
    if (id[0] && model_seen(&r->m, t, id, ev.seq)) {
        FUZZ_CHECK(n == 0);
        r->want.duplicates++;
    }
    r->want.outputs += (uint64_t)n;
    check_outputs(&ev, r->out, n);
}

static void run_script(cq_bridge_t *br, uint32_t window, const uint8_t *p, size_t n)
{
    run_t r = {br, {NULL, NULL, window}, {0, 0, 0, 0}, NULL};
    size_t nt = cq_bridge_ntopics(br);
    r.m.ring = calloc((nt ? nt : 1) * (window ? window : 1), sizeof(mkey_t));
    r.m.count = calloc(nt ? nt : 1, sizeof(uint32_t));
    r.out = calloc(cq_bridge_outputs_max(br) + 1, sizeof(cq_bridge_out_t));
    FUZZ_CHECK(r.m.ring && r.m.count && r.out);
    while (n >= 5) {
        size_t len = (size_t)p[3] | (size_t)p[4] << 8;
        if (len > n - 5)
            len = n - 5;
        one_event(&r, p, len ? p + 5 : NULL, len);
        p += 5 + len;
        n -= 5 + len;
    }
    cq_bridge_stats_t st;
    cq_bridge_stats(br, &st);
    FUZZ_CHECK(st.events == r.want.events && st.duplicates == r.want.duplicates);
    FUZZ_CHECK(st.outputs == r.want.outputs);
    free(r.m.ring);
    free(r.m.count);
    free(r.out);
}

/* ---- the resume engine: the input as a TopicResumeMessage ---------------------------------
 *
 * One topic "rel" whose live offset is 20, the ring holding 13..20 (dense). The session is
 * driven to its end: reads answered with the rows after their from, every chunk asked for.
 * Invariants: exactly one BEGIN, first, with a result that decodes; the events' offsets rise
 * strictly, never past 20, and each prev_offset is the offset before it (or the result's
 * position); a FINAL ends it within a bounded number of steps. */

static bool fz_position(void *ud, const char *topic, uint32_t shard, uint64_t *epoch,
                        uint64_t *pushed)
{
    (void)ud;
    (void)shard;
    if (strcasecmp(topic, "rel") != 0)
        return false;
    *epoch = 3;
    *pushed = 20;
    return true;
}

static void fz_rows(cq_resume_t *r, const cq_resume_action_t *a)
{
    cq_resume_row_t rows[64];
    size_t n = 0;
    for (uint64_t o = a->from + 1; o <= 20 && n < a->max && n < 64; o++, n++)
        rows[n] = (cq_resume_row_t){o, 1000, 0, 0, (const uint8_t *)"x", 1};
    cq_resume_rows(r, a->read_id, 0, rows, n, 0);
}

static void fz_send(const cq_resume_action_t *a, int *begins, uint64_t *last)
{
    if (a->flags & CQ_RESUME_F_BEGIN) {
        FUZZ_CHECK(*begins == 0);
        (*begins)++;
        Chanqpb__TopicResumeResultMessage *m =
            chanqpb__topic_resume_result_message__unpack(NULL, a->result->len, a->result->data);
        FUZZ_CHECK(m && m->n_positions == 1 && m->positions[0]->offset <= 20);
        *last = m->positions[0]->offset;
        chanqpb__topic_resume_result_message__free_unpacked(m, NULL);
    }
    FUZZ_CHECK(*begins == 1);
    for (size_t i = 0; i < a->nevs; i++) {
        Chanqpb__TopicEvent *e =
            chanqpb__topic_event__unpack(NULL, a->evs[i].event->len, a->evs[i].event->data);
        FUZZ_CHECK(e && e->offset > *last && e->offset <= 20 && e->prev_offset == *last);
        *last = e->offset;
        chanqpb__topic_event__free_unpacked(e, NULL);
    }
}

static void run_resume(const uint8_t *d, size_t n)
{
    /* one chunk at a time: each must come back (applied) before the next is made */
    cq_resume_limits_t lim = {.ring_events = 8, .chunk_events = 4, .sends_max = 1};
    cq_resume_t *r = cq_resume_new(&lim, 0, fz_position, NULL);
    if (!r || cq_resume_topic(r, "rel", 0, 200) < 0) {
        cq_resume_free(r);
        return;
    }
    for (uint64_t o = 13; o <= 20; o++) {
        cq_topic_event_t te = {"rel", 0, 3, o, o - 1, 1000, "", 0, (const uint8_t *)"x", 1};
        cq_buf_t *b = cq_topic_event_encode(&te);
        if (b)
            cq_resume_live(r, "rel", 0, 3, o, o - 1, b);
        cq_buf_unref(b);
    }
    cq_resume_request(r, 7, 0, d, n, 0);
    int begins = 0, steps = 0;
    uint64_t last = 0;
    bool final = false;
    cq_resume_action_t a;
    while (!final && steps++ < 64) {
        if (!cq_resume_next(r, &a)) {
            cq_resume_more(r, 7, 0);
            if (!cq_resume_next(r, &a))
                break;
        }
        if (a.kind == CQ_RESUME_READ) {
            fz_rows(r, &a);
        } else {
            FUZZ_CHECK(a.kind == CQ_RESUME_SEND && a.conn_id == 7);
            fz_send(&a, &begins, &last);
            final = (a.flags & CQ_RESUME_F_FINAL) != 0;
            cq_resume_applied(r, 1, 0);
        }
        cq_resume_action_done(&a);
    }
    FUZZ_CHECK(final);
    cq_resume_free(r);
}

/* ---- the route engine: the input as a TopicAckMessage ---------------------------------------
 *
 * The same topic "rel" (live offset 20), bound by route on "user_id"; offset o names the player
 * "u<o % 3>". The ring saw 13..20. Player u1 acknowledges with the input as the body (from
 * another connection first, so its offset is cached), then logs in; its stored offset is the
 * input's first byte mod 21 (0xff: never committed). Invariants: the ack is refused with
 * -EINVAL exactly when the body does not decode or has more than 256 positions; the login ends
 * with exactly one FINAL; its events rise strictly, name u1 only, and are exactly u1's events
 * after max(stored, acknowledged) (an ack counts only on shard 0, epoch 3, offset <= 20). */

static void fz_route_row_content(uint64_t o, char *buf, size_t len)
{
    snprintf(buf, len, "{\"user_id\":\"u%u\"}", (unsigned)(o % 3));
}

static void run_route(const uint8_t *d, size_t n)
{
    cq_route_limits_t lim = {.ring_events = 8, .chunk_events = 4, .sends_max = 1};
    cq_route_t *r = cq_route_new(&lim, 0, fz_position, NULL);
    if (!r || cq_route_topic(r, "rel", "user_id", 201) < 0) {
        cq_route_free(r);
        return;
    }
    for (uint64_t o = 13; o <= 20; o++) {
        char c[32], key[8];
        fz_route_row_content(o, c, sizeof(c));
        snprintf(key, sizeof(key), "u%u", (unsigned)(o % 3));
        cq_topic_event_t te = {"rel", 0, 3, o, o - 1, 1000, "", 0, (const uint8_t *)c, strlen(c)};
        cq_buf_t *b = cq_topic_event_encode(&te);
        if (b)
            cq_route_live(r, "rel", 0, 3, o, o - 1, "user_id", key, b);
        cq_buf_unref(b);
    }
    uint64_t stored = n && d[0] != 0xff ? d[0] % 21 : 0, acked = 0;
    Chanqpb__TopicAckMessage *m = chanqpb__topic_ack_message__unpack(NULL, n, d);
    bool good = m && m->n_positions <= CQ_RESUME_POSITIONS_MAX;
    for (size_t k = 0; good && k < m->n_positions; k++) {
        const Chanqpb__TopicPosition *p = m->positions[k];
        if (p->topic && strcasecmp(p->topic, "rel") == 0 && p->shard == 0 && p->epoch == 3 &&
            p->offset <= 20 && p->offset > acked)
            acked = p->offset;
    }
    if (m)
        chanqpb__topic_ack_message__free_unpacked(m, NULL);
    FUZZ_CHECK(cq_route_ack(r, "u1", d, n, 0) == (good ? 0 : -EINVAL));
    cq_route_login(r, 7, "u1", 0);
    uint64_t from = stored > acked ? stored : acked, last = from;
    int finals = 0, steps = 0;
    cq_route_action_t a;
    while (!finals && steps++ < 256) {
        if (!cq_route_next(r, &a)) {
            cq_route_more(r, 7, 0);
            if (!cq_route_next(r, &a))
                break;
        }
        if (a.kind == CQ_ROUTE_GET) {
            cq_route_offset(r, a.id, n && d[0] == 0xff ? -ENOENT : 0, stored, 0);
        } else if (a.kind == CQ_ROUTE_READ) {
            cq_resume_row_t rows[64];
            char text[64][32];
            size_t k = 0;
            for (uint64_t o = a.from + 1; o <= 20 && k < a.max && k < 64; o++, k++) {
                fz_route_row_content(o, text[k], sizeof(text[k]));
                rows[k] =
                    (cq_resume_row_t){o, 1000, 0, 0, (const uint8_t *)text[k], strlen(text[k])};
            }
            cq_route_rows(r, a.id, 0, rows, k, 0);
        } else if (a.kind == CQ_ROUTE_COMMIT) {
            cq_route_offset(r, a.id, 0, a.offset, 0);
        } else {
            FUZZ_CHECK(a.kind == CQ_ROUTE_SEND && a.conn_id == 7);
            for (size_t i = 0; i < a.nevs; i++) {
                Chanqpb__TopicEvent *e =
                    chanqpb__topic_event__unpack(NULL, a.evs[i].event->len, a.evs[i].event->data);
                FUZZ_CHECK(e && e->offset > last && e->offset <= 20 && e->offset % 3 == 1);
                /* no event of u1's skipped: every offset between is another player's */
                for (uint64_t o = last + 1; o < e->offset; o++)
                    FUZZ_CHECK(o % 3 != 1);
                last = e->offset;
                chanqpb__topic_event__free_unpacked(e, NULL);
            }
            finals += a.final;
            cq_route_applied(r, 1, 0);
        }
        cq_route_action_done(&a);
    }
    FUZZ_CHECK(finals == 1);
    for (uint64_t o = last + 1; o <= 20; o++) /* nothing of u1's left out at the end */
        FUZZ_CHECK(o % 3 != 1);
    cq_route_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool inited;
    if (!inited) {
        cq_wire_arena_init(&arena, ARENA_CAP);
        cq_wire_arena_init(&arena2, 4 * ARENA_CAP); /* re-packed unknown fields can need more */
        inited = true;
    }
    const uint8_t *zero = memchr(data, 0, size);
    size_t doc_len = zero ? (size_t)(zero - data) : size;
    unpack_all(data, size);
    run_resume(data, size);
    run_route(data, size);
    const uint8_t *script = zero ? zero + 1 : NULL;
    size_t script_len = zero ? size - doc_len - 1 : 0;
    uint32_t window = script_len ? script[0] % 9 : 4;
    cq_bridge_t *br = bridge_from(data, doc_len, window);
    if (script_len) {
        unpack_all(script + 1, script_len - 1);
        run_script(br, window, script + 1, script_len - 1);
    }
    cq_bridge_free(br);
    return 0;
}
