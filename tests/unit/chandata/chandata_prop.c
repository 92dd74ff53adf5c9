/* Property tests: for random messages A and B of the test types, cq_merge(A, B, NULL) decodes
 * (protobuf-c) to the same message as protobuf-c's parse of A||B, compared by re-packing both.
 * Map entries are normalised first (last entry per key, sorted by key): protobuf-c keeps
 * duplicate map entries as a list, protobuf's map semantics keep the last. The merge result
 * must also be a fixed point of cq_compact() and equal to cq_compact(A||B). Fixed seed. */
#include "test_chandata.h"

#include <stdlib.h>
#include <string.h>

#define ITERS 3000

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return n ? (uint32_t)(rng_state % n) : 0;
}

/* Strings and blobs come from small pools so that equal and empty values are common. The
 * generated structs point into the pools and into per-iteration arenas; nothing is freed. */
static char *rnd_str(void)
{
    static char *pool[] = {"", "a", "bob", "zz top", "x\001y", "longer string value 123"};
    return pool[rnd(6)];
}

static float rnd_float(void)
{
    static const float pool[] = {0.0f, 1.5f, -2.25f, 1e30f, 3.0f};
    return pool[rnd(5)];
}

typedef struct arena {
    void *blocks[4096];
    size_t n;
} arena_t;

static void *amalloc(arena_t *a, size_t n)
{
    assert_true(a->n < 4096);
    void *p = calloc(1, n ? n : 1);
    assert_non_null(p);
    a->blocks[a->n++] = p;
    return p;
}

static void afree(arena_t *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->blocks[i]);
    a->n = 0;
}

static Chanqtest__Entity *rnd_entity(arena_t *a)
{
    Chanqtest__Entity *e = amalloc(a, sizeof(*e));
    chanqtest__entity__init(e);
    e->removed = rnd(4) == 0;
    if (rnd(2)) {
        e->pos = amalloc(a, sizeof(*e->pos));
        chanqtest__vec3__init(e->pos);
        e->pos->x = rnd_float();
        e->pos->y = rnd_float();
        e->pos->z = rnd_float();
    }
    e->label = rnd_str();
    e->n_tags = rnd(4);
    e->tags = amalloc(a, e->n_tags * sizeof(char *));
    for (size_t i = 0; i < e->n_tags; i++)
        e->tags[i] = rnd_str();
    if (rnd(2)) {
        e->hp_presence_case = CHANQTEST__ENTITY__HP_PRESENCE_HP;
        e->hp = (int32_t)rnd(5) - 2;
    }
    switch (rnd(3)) {
    case 1:
        e->kind_case = CHANQTEST__ENTITY__KIND_NPC;
        e->npc = rnd_str();
        break;
    case 2:
        e->kind_case = CHANQTEST__ENTITY__KIND_PLAYER_CONN;
        e->player_conn = rnd(3) ? rnd(100000) : 0;
        break;
    }
    if (rnd(3) == 0) {
        e->extra = amalloc(a, sizeof(*e->extra));
        google__protobuf__any__init(e->extra);
        e->extra->type_url = rnd_str();
        char *v = rnd_str();
        e->extra->value.data = (uint8_t *)v;
        e->extra->value.len = strlen(v);
    }
    return e;
}

static void rnd_world(arena_t *a, Chanqtest__EntityWorld *w)
{
    chanqtest__entity_world__init(w);
    w->n_entities = rnd(5);
    w->entities = amalloc(a, w->n_entities * sizeof(*w->entities));
    for (size_t i = 0; i < w->n_entities; i++) {
        Chanqtest__EntityWorld__EntitiesEntry *en = amalloc(a, sizeof(*en));
        chanqtest__entity_world__entities_entry__init(en);
        en->key = rnd(6);
        en->value = rnd(8) ? rnd_entity(a) : NULL;
        w->entities[i] = en;
    }
    w->name = rnd_str();
    w->n_tick_ids = rnd(5);
    w->tick_ids = amalloc(a, w->n_tick_ids * sizeof(uint32_t));
    for (size_t i = 0; i < w->n_tick_ids; i++)
        w->tick_ids[i] = rnd(3) ? rnd(1000) : 0xffffffffu;
}

static int cmp_entry(const void *x, const void *y)
{
    const Chanqtest__EntityWorld__EntitiesEntry *const *a = x, *const *b = y;
    return (*a)->key < (*b)->key ? -1 : (*a)->key > (*b)->key;
}

/* Canonical bytes of a decoded world: last entry per key, sorted by key, a missing value as
 * an empty Entity (that is what the entry means). */
static void world_canon(const Chanqtest__EntityWorld *w, cq_sbuf_t *out)
{
    Chanqtest__EntityWorld c = *w;
    Chanqtest__EntityWorld__EntitiesEntry **v = calloc(w->n_entities + 1, sizeof(*v));
    Chanqtest__EntityWorld__EntitiesEntry *copies = calloc(w->n_entities + 1, sizeof(*copies));
    Chanqtest__Entity empty = CHANQTEST__ENTITY__INIT;
    size_t n = 0;
    for (size_t i = 0; i < w->n_entities; i++) {
        bool later = false;
        for (size_t j = i + 1; j < w->n_entities; j++)
            later |= w->entities[j]->key == w->entities[i]->key;
        if (later)
            continue;
        copies[n] = *w->entities[i];
        if (!copies[n].value)
            copies[n].value = &empty;
        v[n] = &copies[n];
        n++;
    }
    qsort(v, n, sizeof(*v), cmp_entry);
    c.entities = v;
    c.n_entities = n;
    pack_msg(&c.base, out);
    free(v);
    free(copies);
}

typedef void (*canon_fn)(const ProtobufCMessage *m, cq_sbuf_t *out);

static void world_canon_msg(const ProtobufCMessage *m, cq_sbuf_t *out)
{
    world_canon((const Chanqtest__EntityWorld *)m, out);
}

static void plain_canon(const ProtobufCMessage *m, cq_sbuf_t *out)
{
    pack_msg(m, out);
}

/* Checks the property for one pair of packed messages. */
static void check_pair(const cq_msgdesc_t *d, const ProtobufCMessageDescriptor *pd, canon_fn canon,
                       const cq_sbuf_t *a, const cq_sbuf_t *b, uint32_t iter)
{
    cq_sbuf_t cat, merged, again, ccat, exp, got;
    cq_sbuf_init(&cat);
    assert_int_equal(cq_sbuf_append(&cat, a->data, a->len), 0);
    assert_int_equal(cq_sbuf_append(&cat, b->data, b->len), 0);
    merge_ok(d, a, b, NULL, &merged);

    ProtobufCMessage *pe = protobuf_c_message_unpack(pd, NULL, cat.len, cat.data);
    ProtobufCMessage *pg = protobuf_c_message_unpack(pd, NULL, merged.len, merged.data);
    assert_non_null(pe);
    if (!pg)
        fail_msg("iteration %u: protobuf-c cannot parse the merge result", iter);
    canon(pe, &exp);
    canon(pg, &got);
    if (exp.len != got.len || memcmp(exp.data, got.data, exp.len) != 0)
        fail_msg("iteration %u: merge differs from protobuf-c's parse of A||B", iter);

    cq_sbuf_init(&again);
    assert_int_equal(cq_compact(d, merged.data, merged.len, &again), 0);
    assert_int_equal(again.len, merged.len);
    assert_memory_equal(again.data, merged.data, merged.len);
    cq_sbuf_init(&ccat);
    assert_int_equal(cq_compact(d, cat.data, cat.len, &ccat), 0);
    assert_int_equal(ccat.len, merged.len);
    assert_memory_equal(ccat.data, merged.data, merged.len);

    protobuf_c_message_free_unpacked(pe, NULL);
    protobuf_c_message_free_unpacked(pg, NULL);
    cq_sbuf_done(&cat);
    cq_sbuf_done(&merged);
    cq_sbuf_done(&again);
    cq_sbuf_done(&ccat);
    cq_sbuf_done(&exp);
    cq_sbuf_done(&got);
}

void test_prop_world(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.EntityWorld");
    rng_state = 0x9e3779b97f4a7c15ULL;
    arena_t *ar = calloc(1, sizeof(*ar));
    for (uint32_t it = 0; it < ITERS; it++) {
        Chanqtest__EntityWorld wa, wb;
        rnd_world(ar, &wa);
        rnd_world(ar, &wb);
        cq_sbuf_t a, b;
        pack_msg(&wa.base, &a);
        pack_msg(&wb.base, &b);
        check_pair(d, &chanqtest__entity_world__descriptor, world_canon_msg, &a, &b, it);
        cq_sbuf_done(&a);
        cq_sbuf_done(&b);
        afree(ar);
    }
    free(ar);
}

void test_prop_chat(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.ChatRoom");
    rng_state = 0x1234567887654321ULL;
    arena_t *ar = calloc(1, sizeof(*ar));
    for (uint32_t it = 0; it < ITERS; it++) {
        Chanqtest__ChatRoom r[2];
        cq_sbuf_t p[2];
        for (int k = 0; k < 2; k++) {
            chanqtest__chat_room__init(&r[k]);
            r[k].title = rnd_str();
            r[k].n_messages = rnd(5);
            r[k].messages = amalloc(ar, r[k].n_messages * sizeof(*r[k].messages));
            for (size_t i = 0; i < r[k].n_messages; i++) {
                Chanqtest__ChatMessage *m = amalloc(ar, sizeof(*m));
                chanqtest__chat_message__init(m);
                m->sender = rnd_str();
                m->text = rnd_str();
                m->time = rnd(3) ? (int64_t)rnd(1u << 31) * 1000 : -(int64_t)rnd(100);
                r[k].messages[i] = m;
            }
            pack_msg(&r[k].base, &p[k]);
        }
        check_pair(d, &chanqtest__chat_room__descriptor, plain_canon, &p[0], &p[1], it);
        cq_sbuf_done(&p[0]);
        cq_sbuf_done(&p[1]);
        afree(ar);
    }
    free(ar);
}

void test_prop_testpb(void **state)
{
    const cq_msgdesc_t *d = T("testpb.TestChannelDataMessage");
    rng_state = 0xdeadbeefcafef00dULL;
    for (uint32_t it = 0; it < ITERS; it++) {
        Testpb__TestChannelDataMessage m[2];
        cq_sbuf_t p[2];
        for (int k = 0; k < 2; k++) {
            testpb__test_channel_data_message__init(&m[k]);
            m[k].text = rnd_str();
            m[k].num = rnd(2) ? rnd(1000) : 0;
            pack_msg(&m[k].base, &p[k]);
        }
        check_pair(d, &testpb__test_channel_data_message__descriptor, plain_canon, &p[0], &p[1],
                   it);
        cq_sbuf_done(&p[0]);
        cq_sbuf_done(&p[1]);
    }
}
