/* cq_fieldmask_filter: top-level and nested paths, map values, repeated messages, unknown
 * components, the input never modified, malformed input and fail-N. */
#include "test_chandata.h"

#include "test_alloc.h"

#include <errno.h>
#include <string.h>

/* A world with two entities carrying every kind of field, plus name and ticks. */
static void sample_world(cq_sbuf_t *out)
{
    static Chanqtest__Vec3 pos[2] = {
        {PROTOBUF_C_MESSAGE_INIT(&chanqtest__vec3__descriptor), 1, 2, 3},
        {PROTOBUF_C_MESSAGE_INIT(&chanqtest__vec3__descriptor), 4, 5, 6}};
    static char *tags[] = {"t1", "t2"};
    Chanqtest__Entity e[2];
    Chanqtest__EntityWorld__EntitiesEntry en[2], *pen[2];
    for (int i = 0; i < 2; i++) {
        chanqtest__entity__init(&e[i]);
        e[i].pos = &pos[i];
        e[i].label = i ? "second" : "first";
        e[i].n_tags = 2;
        e[i].tags = tags;
        e[i].hp_presence_case = CHANQTEST__ENTITY__HP_PRESENCE_HP;
        e[i].hp = 10 * (i + 1);
        e[i].kind_case = CHANQTEST__ENTITY__KIND_NPC;
        e[i].npc = "orc";
        chanqtest__entity_world__entities_entry__init(&en[i]);
        en[i].key = (uint32_t)(i + 1);
        en[i].value = &e[i];
        pen[i] = &en[i];
    }
    uint32_t ticks[] = {7, 8};
    Chanqtest__EntityWorld w = CHANQTEST__ENTITY_WORLD__INIT;
    w.n_entities = 2;
    w.entities = pen;
    w.name = "earth";
    w.n_tick_ids = 2;
    w.tick_ids = ticks;
    pack_msg(&w.base, out);
}

static Chanqtest__EntityWorld *filter_world(const char *const *paths, size_t n)
{
    cq_sbuf_t in, out;
    sample_world(&in);
    filter_ok(T("chanqtest.EntityWorld"), paths, n, &in, &out);
    Chanqtest__EntityWorld *w = chanqtest__entity_world__unpack(NULL, out.len, out.data);
    assert_non_null(w);
    cq_sbuf_done(&in);
    cq_sbuf_done(&out);
    return w;
}

void test_mask_top_level(void **state)
{
    static const char *const p1[] = {"name"};
    Chanqtest__EntityWorld *w = filter_world(p1, 1);
    assert_string_equal(w->name, "earth");
    assert_int_equal(w->n_entities, 0);
    assert_int_equal(w->n_tick_ids, 0);
    chanqtest__entity_world__free_unpacked(w, NULL);

    static const char *const p2[] = {"entities", "tick_ids"};
    w = filter_world(p2, 2);
    assert_string_equal(w->name, "");
    assert_int_equal(w->n_entities, 2);
    assert_int_equal(w->n_tick_ids, 2);
    assert_string_equal(w->entities[1]->value->label, "second");
    assert_int_equal(w->entities[1]->value->n_tags, 2);
    chanqtest__entity_world__free_unpacked(w, NULL);
}

void test_mask_nested(void **state)
{
    /* Through a singular message field: ChatRoom has none, Entity.pos does. */
    const cq_msgdesc_t *d = T("chanqtest.Entity");
    Chanqtest__Vec3 v = CHANQTEST__VEC3__INIT;
    v.x = 1;
    v.y = 2;
    v.z = 3;
    Chanqtest__Entity e = CHANQTEST__ENTITY__INIT;
    e.pos = &v;
    e.label = "l";
    e.hp_presence_case = CHANQTEST__ENTITY__HP_PRESENCE_HP;
    e.hp = 9;
    cq_sbuf_t in, out;
    pack_msg(&e.base, &in);
    static const char *const p[] = {"pos.y", "hp", "pos.nope"};
    filter_ok(d, p, 3, &in, &out);
    Chanqtest__Entity *r = chanqtest__entity__unpack(NULL, out.len, out.data);
    assert_non_null(r);
    assert_non_null(r->pos);
    assert_true(r->pos->x == 0 && r->pos->y == 2 && r->pos->z == 0);
    assert_string_equal(r->label, "");
    assert_true(r->hp_presence_case == CHANQTEST__ENTITY__HP_PRESENCE_HP && r->hp == 9);
    chanqtest__entity__free_unpacked(r, NULL);
    cq_sbuf_done(&out);
    /* A whole-field path together with a nested one keeps the whole field (union). */
    static const char *const q[] = {"pos.y", "pos"};
    filter_ok(d, q, 2, &in, &out);
    r = chanqtest__entity__unpack(NULL, out.len, out.data);
    assert_true(r->pos->x == 1 && r->pos->y == 2 && r->pos->z == 3);
    chanqtest__entity__free_unpacked(r, NULL);
    cq_sbuf_done(&out);
    /* A path continuing into a scalar keeps the scalar. */
    static const char *const s[] = {"label.deeper"};
    filter_ok(d, s, 1, &in, &out);
    static const uint8_t lab[] = {0x1a, 0x01, 'l'};
    assert_int_equal(out.len, sizeof(lab));
    assert_memory_equal(out.data, lab, sizeof(lab));
    cq_sbuf_done(&out);
    cq_sbuf_done(&in);
}

void test_mask_map_values(void **state)
{
    static const char *const p[] = {"entities.pos.x", "entities.label"};
    Chanqtest__EntityWorld *w = filter_world(p, 2);
    assert_int_equal(w->n_entities, 2);
    for (int i = 0; i < 2; i++) {
        const Chanqtest__Entity *e = w->entities[i]->value;
        assert_int_equal(w->entities[i]->key, i + 1); /* keys are kept */
        assert_non_null(e->pos);
        assert_true(e->pos->x == (i ? 4 : 1) && e->pos->y == 0 && e->pos->z == 0);
        assert_string_equal(e->label, i ? "second" : "first");
        assert_int_equal(e->n_tags, 0);
        assert_int_equal(e->hp_presence_case, 0);
        assert_int_equal(e->kind_case, CHANQTEST__ENTITY__KIND__NOT_SET);
    }
    assert_string_equal(w->name, "");
    chanqtest__entity_world__free_unpacked(w, NULL);
}

void test_mask_repeated_messages(void **state)
{
    Chanqtest__ChatMessage m[2] = {
        {PROTOBUF_C_MESSAGE_INIT(&chanqtest__chat_message__descriptor), "ann", "hi", 1},
        {PROTOBUF_C_MESSAGE_INIT(&chanqtest__chat_message__descriptor), "bob", "yo", 2}};
    Chanqtest__ChatMessage *pm[] = {&m[0], &m[1]};
    Chanqtest__ChatRoom r = CHANQTEST__CHAT_ROOM__INIT;
    r.title = "t";
    r.n_messages = 2;
    r.messages = pm;
    cq_sbuf_t in, out;
    pack_msg(&r.base, &in);
    static const char *const p[] = {"messages.text", "messages.time"};
    filter_ok(T("chanqtest.ChatRoom"), p, 2, &in, &out);
    Chanqtest__ChatRoom *x = chanqtest__chat_room__unpack(NULL, out.len, out.data);
    assert_non_null(x);
    assert_string_equal(x->title, "");
    assert_int_equal(x->n_messages, 2);
    assert_string_equal(x->messages[1]->sender, "");
    assert_string_equal(x->messages[1]->text, "yo");
    assert_int_equal(x->messages[1]->time, 2);
    chanqtest__chat_room__free_unpacked(x, NULL);
    cq_sbuf_done(&in);
    cq_sbuf_done(&out);
}

void test_mask_unknown_and_empty(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.EntityWorld");
    cq_sbuf_t in, out;
    sample_world(&in);
    /* No paths: everything, byte for byte. */
    filter_ok(d, NULL, 0, &in, &out);
    assert_int_equal(out.len, in.len);
    assert_memory_equal(out.data, in.data, in.len);
    cq_sbuf_done(&out);
    /* Only unknown components: nothing. */
    static const char *const p[] = {"nope", "entities_x", "", "..", "name.", NULL};
    filter_ok(d, p, 4, &in, &out);
    assert_int_equal(out.len, 0);
    cq_sbuf_done(&out);
    /* "name." is "name"; NULL entries are skipped; unknown fields of the input are dropped. */
    assert_int_equal(cq_sbuf_append(&in, "\xf8\x07\x01", 3), 0); /* field 127 = 1 */
    filter_ok(d, p, 6, &in, &out);
    static const uint8_t nm[] = {0x12, 0x05, 'e', 'a', 'r', 't', 'h'};
    assert_int_equal(out.len, sizeof(nm));
    assert_memory_equal(out.data, nm, sizeof(nm));
    cq_sbuf_done(&out);
    cq_sbuf_done(&in);
}

void test_mask_input_untouched(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.EntityWorld");
    cq_sbuf_t in, copy, out;
    sample_world(&in);
    cq_sbuf_init(&copy);
    assert_int_equal(cq_sbuf_append(&copy, in.data, in.len), 0);
    static const char *const p[] = {"entities.pos", "name"};
    for (int i = 0; i < 3; i++) {
        filter_ok(d, p, 2, &in, &out);
        assert_true(out.len < in.len);
        cq_sbuf_done(&out);
    }
    assert_int_equal(in.len, copy.len);
    assert_memory_equal(in.data, copy.data, in.len);
    /* Masking then merging the master state still sees every field. */
    cq_sbuf_t merged;
    merge_ok(d, &in, NULL, NULL, &merged);
    assert_int_equal(merged.len, in.len);
    cq_sbuf_done(&merged);
    cq_sbuf_done(&in);
    cq_sbuf_done(&copy);
}

void test_mask_malformed(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.EntityWorld");
    static const char *const p[] = {"entities.pos.x"};
    static const uint8_t bad1[] = {0x0a, 0x05, 0x08};                   /* LEN past the end */
    static const uint8_t bad2[] = {0x0a, 0x04, 0x12, 0x02, 0x12, 0x05}; /* bad value */
    cq_sbuf_t out;
    cq_sbuf_init(&out);
    assert_int_equal(cq_fieldmask_filter(d, p, 1, bad1, sizeof(bad1), &out), CQ_EDECODE);
    assert_int_equal(cq_fieldmask_filter(d, p, 1, bad2, sizeof(bad2), &out), CQ_EDECODE);
    assert_int_equal(out.len, 0);
    cq_sbuf_done(&out);
}

void test_mask_failn(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.EntityWorld");
    static const char *const p[] = {"entities.pos.x", "name"};
    cq_sbuf_t in, ref;
    sample_world(&in);
    filter_ok(d, p, 2, &in, &ref);
    int ok = 0;
    for (unsigned long n = 1; n < 1000 && !ok; n++) {
        cq_sbuf_t out;
        cq_sbuf_init(&out);
        test_alloc_install(n, false);
        int r = cq_fieldmask_filter(d, p, 2, in.data, in.len, &out);
        assert_true(r == 0 || r == -ENOMEM);
        if (r == 0) {
            assert_int_equal(out.len, ref.len);
            assert_memory_equal(out.data, ref.data, ref.len);
            ok = test_alloc_failed() == 0;
        } else {
            assert_int_equal(out.len, 0);
        }
        cq_sbuf_done(&out);
        assert_int_equal(test_alloc_live(), 0);
        test_alloc_remove();
    }
    assert_true(ok);
    cq_sbuf_done(&in);
    cq_sbuf_done(&ref);
}
