/* cq_merge / cq_compact: protobuf merge semantics, channeld's merge options, canonical form,
 * compaction, malformed input, nesting limits and fail-N. */
#include "test_chandata.h"

#include "descriptor.pb-c.h"
#include "cq_varint.h"
#include "test_alloc.h"

#include <errno.h>
#include <string.h>

#define CHAT_MSG_INIT(s, t, tm)                                                                    \
    {                                                                                              \
        PROTOBUF_C_MESSAGE_INIT(&chanqtest__chat_message__descriptor), (char *)(s), (char *)(t),   \
            (tm)                                                                                   \
    }

static void raw(cq_sbuf_t *b, const uint8_t *p, size_t n)
{
    cq_sbuf_init(b);
    assert_int_equal(cq_sbuf_append(b, p, n), 0);
}

#define RAW(b, ...)                                                                                \
    do {                                                                                           \
        static const uint8_t bytes_[] = {__VA_ARGS__};                                             \
        raw((b), bytes_, sizeof(bytes_));                                                          \
    } while (0)

static void expect_bytes(const cq_sbuf_t *b, const uint8_t *p, size_t n)
{
    assert_int_equal(b->len, n);
    assert_memory_equal(b->data, p, n);
}

#define EXPECT(b, ...)                                                                             \
    do {                                                                                           \
        static const uint8_t exp_[] = {__VA_ARGS__};                                               \
        expect_bytes((b), exp_, sizeof(exp_));                                                     \
    } while (0)

static void done(cq_sbuf_t *a, cq_sbuf_t *b, cq_sbuf_t *c)
{
    cq_sbuf_done(a);
    cq_sbuf_done(b);
    cq_sbuf_done(c);
}

/* ---- plain merge ----------------------------------------------------------------------- */

void test_merge_scalars_last_wins(void **state)
{
    const cq_msgdesc_t *d = T("testpb.TestChannelDataMessage");
    Testpb__TestChannelDataMessage ma = TESTPB__TEST_CHANNEL_DATA_MESSAGE__INIT, mb = ma;
    ma.text = "a";
    ma.num = 1;
    mb.text = "b";
    cq_sbuf_t a, b, out;
    pack_msg(&ma.base, &a);
    pack_msg(&mb.base, &b);
    merge_ok(d, &a, &b, NULL, &out);
    EXPECT(&out, 0x0a, 0x01, 'b', 0x10, 0x01);
    done(&a, &b, &out);

    /* The last occurrence within one input wins too, and only one is written. */
    RAW(&a, 0x10, 0x01, 0x0a, 0x01, 'x', 0x10, 0x05, 0x0a, 0x00);
    merge_ok(d, NULL, &a, NULL, &out);
    EXPECT(&out, 0x10, 0x05);
    cq_sbuf_done(&a);
    cq_sbuf_done(&out);
}

void test_merge_implicit_zero(void **state)
{
    const cq_msgdesc_t *d = T("testpb.TestChannelDataMessage");
    cq_sbuf_t a, b, out;
    RAW(&a, 0x10, 0x07);
    RAW(&b, 0x0a, 0x01, 'q'); /* protobuf-c would not put num = 0 on the wire */
    merge_ok(d, &a, &b, NULL, &out);
    EXPECT(&out, 0x0a, 0x01, 'q', 0x10, 0x07);
    done(&a, &b, &out);
    /* A zero that src carries explicitly does not overwrite either: channeld decodes src
     * first (proto.Merge(dst, decode(src))), which loses it. */
    RAW(&a, 0x10, 0x07, 0x0a, 0x01, 'k');
    RAW(&b, 0x10, 0x80, 0x00, 0x0a, 0x00); /* num = 0 (non-canonical varint), text = "" */
    merge_ok(d, &a, &b, NULL, &out);
    EXPECT(&out, 0x0a, 0x01, 'k', 0x10, 0x07);
    done(&a, &b, &out);
    /* Within one input the last value wins, zero included: that field is unset. */
    RAW(&a, 0x10, 0x07, 0x10, 0x00);
    merge_ok(d, NULL, &a, NULL, &out);
    assert_int_equal(out.len, 0);
    cq_sbuf_done(&out);
    merge_ok(d, &a, NULL, NULL, &out);
    assert_int_equal(out.len, 0);
    cq_sbuf_done(&out);
    cq_sbuf_done(&a);
    RAW(&b, 0x10, 0x05, 0x10, 0x00); /* src's decoded value is 0: dst's 7 stays */
    RAW(&a, 0x10, 0x07);
    merge_ok(d, &a, &b, NULL, &out);
    EXPECT(&out, 0x10, 0x07);
    done(&a, &b, &out);
    /* The same rule inside sub-messages: Vec3.x = 0.0 sent explicitly keeps 1.5. */
    const cq_msgdesc_t *e = T("chanqtest.Entity");
    RAW(&a, 0x12, 0x05, 0x0d, 0x00, 0x00, 0xc0, 0x3f);
    RAW(&b, 0x12, 0x05, 0x0d, 0x00, 0x00, 0x00, 0x00);
    merge_ok(e, &a, &b, NULL, &out);
    EXPECT(&out, 0x12, 0x05, 0x0d, 0x00, 0x00, 0xc0, 0x3f);
    done(&a, &b, &out);
}

void test_merge_nested(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.Entity");
    Chanqtest__Vec3 pa = CHANQTEST__VEC3__INIT, pb = CHANQTEST__VEC3__INIT;
    pa.x = 1;
    pa.y = 2;
    pb.y = 5;
    pb.z = 3;
    Chanqtest__Entity ea = CHANQTEST__ENTITY__INIT, eb = CHANQTEST__ENTITY__INIT;
    ea.pos = &pa;
    ea.label = "keep";
    eb.pos = &pb;
    cq_sbuf_t a, b, out;
    pack_msg(&ea.base, &a);
    pack_msg(&eb.base, &b);
    merge_ok(d, &a, &b, NULL, &out);
    Chanqtest__Entity *r = chanqtest__entity__unpack(NULL, out.len, out.data);
    assert_non_null(r);
    assert_non_null(r->pos);
    assert_true(r->pos->x == 1 && r->pos->y == 5 && r->pos->z == 3);
    assert_string_equal(r->label, "keep");
    chanqtest__entity__free_unpacked(r, NULL);
    done(&a, &b, &out);

    /* An empty sub-message in src still sets the field (message fields have presence). */
    Chanqtest__Entity e0 = CHANQTEST__ENTITY__INIT;
    Chanqtest__Vec3 v0 = CHANQTEST__VEC3__INIT;
    e0.pos = &v0;
    pack_msg(&e0.base, &b);
    merge_ok(d, NULL, &b, NULL, &out);
    EXPECT(&out, 0x12, 0x00);
    cq_sbuf_done(&b);
    cq_sbuf_done(&out);
}

void test_merge_repeated_append(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.ChatRoom");
    Chanqtest__ChatMessage m[3] = {CHAT_MSG_INIT("a", "1", 1), CHAT_MSG_INIT("b", "2", 2),
                                   CHAT_MSG_INIT("c", "3", 3)};
    Chanqtest__ChatMessage *pa[] = {&m[0], &m[1]}, *pb[] = {&m[2]};
    Chanqtest__ChatRoom ra = CHANQTEST__CHAT_ROOM__INIT, rb = CHANQTEST__CHAT_ROOM__INIT;
    ra.title = "room";
    ra.n_messages = 2;
    ra.messages = pa;
    rb.n_messages = 1;
    rb.messages = pb;
    cq_sbuf_t a, b, out;
    pack_msg(&ra.base, &a);
    pack_msg(&rb.base, &b);
    merge_ok(d, &a, &b, NULL, &out);
    Chanqtest__ChatRoom *r = chanqtest__chat_room__unpack(NULL, out.len, out.data);
    assert_non_null(r);
    assert_string_equal(r->title, "room");
    assert_int_equal(r->n_messages, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(r->messages[i]->time, i + 1);
    chanqtest__chat_room__free_unpacked(r, NULL);
    done(&a, &b, &out);

    /* Repeated strings append. */
    const cq_msgdesc_t *e = T("chanqtest.Entity");
    RAW(&a, 0x22, 0x01, 'x', 0x22, 0x00);
    RAW(&b, 0x22, 0x01, 'y');
    merge_ok(e, &a, &b, NULL, &out);
    EXPECT(&out, 0x22, 0x01, 'x', 0x22, 0x00, 0x22, 0x01, 'y');
    done(&a, &b, &out);
}

void test_merge_packed_mixing(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.EntityWorld");
    cq_sbuf_t a, b, out;
    RAW(&a, 0x1a, 0x02, 0x01, 0x02);      /* tick_ids packed [1, 2] */
    RAW(&b, 0x18, 0x03, 0x1a, 0x00, 0x18, /* unpacked 3, empty packed run, unpacked 300 */
        0xac, 0x02);
    merge_ok(d, &a, &b, NULL, &out);
    EXPECT(&out, 0x1a, 0x05, 0x01, 0x02, 0x03, 0xac, 0x02);
    done(&a, &b, &out);
    /* uint32 values are truncated to 32 bits, as parsers read them. */
    RAW(&a, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01);
    merge_ok(d, NULL, &a, NULL, &out);
    EXPECT(&out, 0x1a, 0x05, 0xff, 0xff, 0xff, 0xff, 0x0f);
    cq_sbuf_done(&a);
    cq_sbuf_done(&out);
}

/* EntityWorld with entries (key, label, hp or -1000 for none, removed). */
typedef struct ent_spec {
    uint32_t key;
    const char *label;
    int hp;
    bool removed;
} ent_spec_t;

static void pack_world(const ent_spec_t *s, size_t n, const char *name, const uint32_t *ticks,
                       size_t nticks, cq_sbuf_t *out)
{
    Chanqtest__EntityWorld w = CHANQTEST__ENTITY_WORLD__INIT;
    Chanqtest__EntityWorld__EntitiesEntry en[8], *pen[8];
    Chanqtest__Entity e[8];
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++) {
        chanqtest__entity_world__entities_entry__init(&en[i]);
        chanqtest__entity__init(&e[i]);
        e[i].label = (char *)s[i].label;
        e[i].removed = s[i].removed;
        if (s[i].hp != -1000) {
            e[i].hp_presence_case = CHANQTEST__ENTITY__HP_PRESENCE_HP;
            e[i].hp = s[i].hp;
        }
        en[i].key = s[i].key;
        en[i].value = &e[i];
        pen[i] = &en[i];
    }
    w.n_entities = n;
    w.entities = pen;
    w.name = (char *)(name ? name : "");
    w.n_tick_ids = nticks;
    w.tick_ids = (uint32_t *)ticks;
    pack_msg(&w.base, out);
}

static Chanqtest__EntityWorld *unpack_world(const cq_sbuf_t *b)
{
    Chanqtest__EntityWorld *w = chanqtest__entity_world__unpack(NULL, b->len, b->data);
    assert_non_null(w);
    return w;
}

void test_merge_map_per_key(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.EntityWorld");
    ent_spec_t sa[] = {{2, "b", -1000, false}, {1, "a", 5, false}};
    ent_spec_t sb[] = {{1, "c", -1000, false}, {7, "", 0, false}};
    cq_sbuf_t a, b, out;
    pack_world(sa, 2, "w", NULL, 0, &a);
    pack_world(sb, 2, NULL, NULL, 0, &b);
    merge_ok(d, &a, &b, NULL, &out);
    Chanqtest__EntityWorld *w = unpack_world(&out);
    assert_int_equal(w->n_entities, 3); /* one entry per key, in key order */
    assert_int_equal(w->entities[0]->key, 1);
    assert_string_equal(w->entities[0]->value->label, "c");
    assert_int_equal(w->entities[0]->value->hp_presence_case, 0); /* the whole entry was replaced */
    assert_int_equal(w->entities[1]->key, 2);
    assert_string_equal(w->entities[1]->value->label, "b");
    assert_int_equal(w->entities[2]->key, 7);
    assert_true(w->entities[2]->value->hp_presence_case && w->entities[2]->value->hp == 0);
    assert_string_equal(w->name, "w");
    chanqtest__entity_world__free_unpacked(w, NULL);
    done(&a, &b, &out);

    /* Entries are written with key and value even when they are defaults. */
    RAW(&a, 0x0a, 0x00);
    merge_ok(d, NULL, &a, NULL, &out);
    EXPECT(&out, 0x0a, 0x04, 0x08, 0x00, 0x12, 0x00);
    cq_sbuf_done(&a);
    cq_sbuf_done(&out);
}

void test_merge_any_replaced(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.Entity");
    Google__Protobuf__Any xa = GOOGLE__PROTOBUF__ANY__INIT, xb = GOOGLE__PROTOBUF__ANY__INIT;
    xa.type_url = "type.googleapis.com/chanqtest.Vec3";
    xa.value = (ProtobufCBinaryData){3, (uint8_t *)"\x0d\x00\x00"};
    xb.type_url = "type.googleapis.com/testpb.TestChannelDataMessage";
    xb.value = (ProtobufCBinaryData){2, (uint8_t *)"\x10\x01"};
    Chanqtest__Entity ea = CHANQTEST__ENTITY__INIT, eb = CHANQTEST__ENTITY__INIT;
    ea.extra = &xa;
    eb.extra = &xb;
    cq_sbuf_t a, b, out;
    pack_msg(&ea.base, &a);
    pack_msg(&eb.base, &b);
    merge_ok(d, &a, &b, NULL, &out);
    Chanqtest__Entity *r = chanqtest__entity__unpack(NULL, out.len, out.data);
    assert_non_null(r);
    assert_string_equal(r->extra->type_url, xb.type_url);
    assert_int_equal(r->extra->value.len, 2);
    assert_memory_equal(r->extra->value.data, "\x10\x01", 2);
    chanqtest__entity__free_unpacked(r, NULL);
    done(&a, &b, &out);
}

void test_merge_oneof(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.Entity");
    cq_sbuf_t a, b, out;
    RAW(&a, 0x32, 0x03, 'b', 'o', 'b');
    RAW(&b, 0x38, 0x07);
    merge_ok(d, &a, &b, NULL, &out);
    EXPECT(&out, 0x38, 0x07); /* npc cleared */
    done(&a, &b, &out);
    /* Zero and empty members are still set (oneof members have presence). */
    RAW(&a, 0x38, 0x00);
    RAW(&b, 0x32, 0x00);
    merge_ok(d, &a, &b, NULL, &out);
    EXPECT(&out, 0x32, 0x00);
    cq_sbuf_done(&out);
    merge_ok(d, &b, &a, NULL, &out);
    EXPECT(&out, 0x38, 0x00);
    done(&a, &b, &out);
    /* Switching back and forth inside one input. */
    RAW(&a, 0x32, 0x01, 'x', 0x38, 0x02, 0x32, 0x01, 'y');
    merge_ok(d, NULL, &a, NULL, &out);
    EXPECT(&out, 0x32, 0x01, 'y');
    cq_sbuf_done(&a);
    cq_sbuf_done(&out);
}

/* ---- merge options (channeld data_test expectations where they apply) ------------------ */

static Chanqtest__ChatRoom *merge_chat(const int *ta, size_t na, const int *tb, size_t nb,
                                       const char *title_b, const cq_merge_opts_t *opts)
{
    Chanqtest__ChatMessage m[16];
    Chanqtest__ChatMessage *pa[8], *pb[8];
    for (size_t i = 0; i < na; i++) {
        m[i] = (Chanqtest__ChatMessage)CHAT_MSG_INIT("s", "t", ta[i]);
        pa[i] = &m[i];
    }
    for (size_t i = 0; i < nb; i++) {
        m[8 + i] = (Chanqtest__ChatMessage)CHAT_MSG_INIT("s", "t", tb[i]);
        pb[i] = &m[8 + i];
    }
    Chanqtest__ChatRoom ra = CHANQTEST__CHAT_ROOM__INIT, rb = CHANQTEST__CHAT_ROOM__INIT;
    ra.title = "a";
    ra.n_messages = na;
    ra.messages = pa;
    rb.title = (char *)(title_b ? title_b : "");
    rb.n_messages = nb;
    rb.messages = pb;
    cq_sbuf_t a, b, out;
    pack_msg(&ra.base, &a);
    pack_msg(&rb.base, &b);
    merge_ok(T("chanqtest.ChatRoom"), &a, &b, opts, &out);
    Chanqtest__ChatRoom *r = chanqtest__chat_room__unpack(NULL, out.len, out.data);
    assert_non_null(r);
    done(&a, &b, &out);
    return r;
}

static void expect_times(const Chanqtest__ChatRoom *r, const int *t, size_t n)
{
    assert_int_equal(r->n_messages, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(r->messages[i]->time, t[i]);
}

void test_merge_opt_replace_list(void **state)
{
    cq_merge_opts_t o = {.replace_list = true};
    static const int a[] = {1, 2}, b[] = {3};
    Chanqtest__ChatRoom *r = merge_chat(a, 2, b, 1, NULL, &o);
    expect_times(r, b, 1);
    assert_string_equal(r->title, "a");
    chanqtest__chat_room__free_unpacked(r, NULL);
    /* channeld quirk kept: an update without the list clears it. */
    r = merge_chat(a, 2, NULL, 0, "new", &o);
    assert_int_equal(r->n_messages, 0);
    assert_string_equal(r->title, "new");
    chanqtest__chat_room__free_unpacked(r, NULL);

    /* Packed scalar lists too; maps are not lists and keep merging per key. */
    ent_spec_t sa[] = {{1, "a", -1000, false}}, sb[] = {{2, "b", -1000, false}};
    static const uint32_t ta[] = {1, 2, 3}, tb[] = {9};
    cq_sbuf_t wa, wb, out;
    pack_world(sa, 1, NULL, ta, 3, &wa);
    pack_world(sb, 1, NULL, tb, 1, &wb);
    merge_ok(T("chanqtest.EntityWorld"), &wa, &wb, &o, &out);
    Chanqtest__EntityWorld *w = unpack_world(&out);
    assert_int_equal(w->n_tick_ids, 1);
    assert_int_equal(w->tick_ids[0], 9);
    assert_int_equal(w->n_entities, 2);
    chanqtest__entity_world__free_unpacked(w, NULL);
    done(&wa, &wb, &out);
}

void test_merge_opt_limit_first(void **state)
{
    cq_merge_opts_t o = {.list_size_limit = 3};
    static const int a[] = {1, 2, 3, 4}, b[] = {5}, first[] = {1, 2, 3};
    Chanqtest__ChatRoom *r = merge_chat(a, 4, b, 1, NULL, &o);
    expect_times(r, first, 3);
    chanqtest__chat_room__free_unpacked(r, NULL);
    /* Under the limit: untouched. */
    o.list_size_limit = 10;
    static const int all[] = {1, 2, 3, 4, 5};
    r = merge_chat(a, 4, b, 1, NULL, &o);
    expect_times(r, all, 5);
    chanqtest__chat_room__free_unpacked(r, NULL);
}

void test_merge_opt_truncate_top(void **state)
{
    cq_merge_opts_t o = {.list_size_limit = 3, .truncate_top = true};
    static const int a[] = {1, 2, 3, 4}, b[] = {5}, last[] = {3, 4, 5};
    Chanqtest__ChatRoom *r = merge_chat(a, 4, b, 1, NULL, &o);
    expect_times(r, last, 3);
    chanqtest__chat_room__free_unpacked(r, NULL);
    /* Replace, then truncate: the last N of src's list. */
    o.replace_list = true;
    o.list_size_limit = 2;
    static const int nb[] = {7, 8, 9}, tail[] = {8, 9};
    r = merge_chat(a, 4, nb, 3, NULL, &o);
    expect_times(r, tail, 2);
    chanqtest__chat_room__free_unpacked(r, NULL);
    /* Packed scalars count elements, not occurrences. */
    cq_sbuf_t wa, wb, out;
    static const uint32_t ta[] = {1, 2, 3}, tb[] = {4, 5};
    pack_world(NULL, 0, NULL, ta, 3, &wa);
    pack_world(NULL, 0, NULL, tb, 2, &wb);
    cq_merge_opts_t o2 = {.list_size_limit = 2, .truncate_top = true};
    merge_ok(T("chanqtest.EntityWorld"), &wa, &wb, &o2, &out);
    EXPECT(&out, 0x1a, 0x02, 0x04, 0x05);
    done(&wa, &wb, &out);
}

/* An element that the list limit drops is still validated: a malformed ChatMessage fails the
 * whole merge (cq_merge.h), whichever end the limit keeps. */
void test_merge_opt_limit_validates_dropped(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.ChatRoom");
    cq_sbuf_t good, bad, out;
    RAW(&good, 0x12, 0x02, 0x18, 0x01); /* messages: {time: 1} */
    RAW(&bad, 0x12, 0x02, 0x18, 0x80);  /* messages: {time: a truncated varint} */
    cq_merge_opts_t first = {.list_size_limit = 1};
    cq_merge_opts_t last = {.list_size_limit = 1, .truncate_top = true};
    cq_sbuf_init(&out);
    assert_int_equal(cq_sbuf_append(&out, "xy", 2), 0);
    /* The bad element is the second: the first-N limit drops it. */
    assert_int_equal(cq_merge(d, good.data, good.len, bad.data, bad.len, &first, &out), CQ_EDECODE);
    assert_int_equal(out.len, 2);
    /* The bad element is the first: the last-N limit drops it. */
    assert_int_equal(cq_merge(d, bad.data, bad.len, good.data, good.len, &last, &out), CQ_EDECODE);
    assert_int_equal(out.len, 2);
    /* Both good: the limit keeps exactly one element. */
    out.len = 0;
    assert_int_equal(cq_merge(d, good.data, good.len, good.data, good.len, &first, &out), 0);
    EXPECT(&out, 0x12, 0x02, 0x18, 0x01);
    done(&good, &bad, &out);
}

void test_merge_opt_removable(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.EntityWorld");
    ent_spec_t sa[] = {{1, "a", -1000, false}, {2, "b", -1000, false}};
    ent_spec_t sb[] = {{1, "", -1000, true}};
    cq_sbuf_t a, b, out;
    pack_world(sa, 2, NULL, NULL, 0, &a);
    pack_world(sb, 1, NULL, NULL, 0, &b);
    cq_merge_opts_t o = {.check_removable_map = true};
    merge_ok(d, &a, &b, &o, &out);
    Chanqtest__EntityWorld *w = unpack_world(&out);
    assert_int_equal(w->n_entities, 1);
    assert_int_equal(w->entities[0]->key, 2);
    chanqtest__entity_world__free_unpacked(w, NULL);
    cq_sbuf_done(&out);
    /* Without the option (or with NULL options) the entry stays, flagged. */
    cq_merge_opts_t none = {0};
    for (int k = 0; k < 2; k++) {
        merge_ok(d, &a, &b, k ? &none : NULL, &out);
        w = unpack_world(&out);
        assert_int_equal(w->n_entities, 2);
        assert_true(w->entities[0]->value->removed);
        chanqtest__entity_world__free_unpacked(w, NULL);
        cq_sbuf_done(&out);
    }
    done(&a, &b, &out);
}

void test_merge_opts_top_level_only(void **state)
{
    /* Entity.tags is a list inside a map value: list options do not reach it. */
    const cq_msgdesc_t *d = T("chanqtest.EntityWorld");
    Chanqtest__Entity e = CHANQTEST__ENTITY__INIT;
    char *tags[] = {"x", "y", "z"};
    e.n_tags = 3;
    e.tags = tags;
    Chanqtest__EntityWorld__EntitiesEntry en = CHANQTEST__ENTITY_WORLD__ENTITIES_ENTRY__INIT,
                                          *pen = &en;
    en.key = 4;
    en.value = &e;
    uint32_t ticks[] = {1, 2, 3};
    Chanqtest__EntityWorld w = CHANQTEST__ENTITY_WORLD__INIT;
    w.n_entities = 1;
    w.entities = &pen;
    w.n_tick_ids = 3;
    w.tick_ids = ticks;
    cq_sbuf_t a, out;
    pack_msg(&w.base, &a);
    cq_merge_opts_t o = {.list_size_limit = 1};
    merge_ok(d, &a, NULL, &o, &out);
    Chanqtest__EntityWorld *r = unpack_world(&out);
    assert_int_equal(r->n_tick_ids, 1);
    assert_int_equal(r->entities[0]->value->n_tags, 3);
    chanqtest__entity_world__free_unpacked(r, NULL);
    cq_sbuf_done(&a);
    cq_sbuf_done(&out);
}

/* ---- unknown fields, canonical form, compaction ---------------------------------------- */

void test_merge_unknown_fields(void **state)
{
    const cq_msgdesc_t *d = T("testpb.TestChannelDataMessage");
    cq_sbuf_t a, b, out;
    /* field 99 varint; num; field 2 with the wrong wire type (kept as unknown) */
    RAW(&a, 0x98, 0x06, 0x2a, 0x10, 0x01, 0x12, 0x01, 'z');
    /* field 100 LEN; an unknown group 5 holding field 1; text */
    RAW(&b, 0xa2, 0x06, 0x02, 'h', 'i', 0x2b, 0x08, 0x01, 0x2c, 0x0a, 0x01, 't');
    merge_ok(d, &a, &b, NULL, &out);
    EXPECT(&out, 0x0a, 0x01, 't', 0x10, 0x01, /* known fields first */
           0x98, 0x06, 0x2a, 0x12, 0x01, 'z', 0xa2, 0x06, 0x02, 'h', 'i', 0x2b, 0x08, 0x01, 0x2c);
    done(&a, &b, &out);
}

void test_merge_canonical_bytes(void **state)
{
    cq_sbuf_t a, out;
    /* Vec3: z, x twice (last wins), y = 0.0 (implicit zero: dropped), unknown fixed64. */
    RAW(&a, 0x1d, 0x00, 0x00, 0x80, 0x3f, 0x0d, 0x00, 0x00, 0x00, 0x40, 0x0d, 0x00, 0x00, 0x40,
        0x40, 0x15, 0x00, 0x00, 0x00, 0x00, 0x21, 1, 2, 3, 4, 5, 6, 7, 8);
    assert_int_equal(cq_compact(T("chanqtest.Vec3"), a.data, a.len, (cq_sbuf_init(&out), &out)), 0);
    EXPECT(&out, 0x0d, 0x00, 0x00, 0x40, 0x40, 0x1d, 0x00, 0x00, 0x80, 0x3f, 0x21, 1, 2, 3, 4, 5, 6,
           7, 8);
    cq_sbuf_done(&a);
    cq_sbuf_done(&out);
    /* -0.0 is not zero: it stays (as protobuf's C++ and Go serializers keep it). */
    RAW(&a, 0x0d, 0x00, 0x00, 0x00, 0x80);
    assert_int_equal(cq_compact(T("chanqtest.Vec3"), a.data, a.len, (cq_sbuf_init(&out), &out)), 0);
    EXPECT(&out, 0x0d, 0x00, 0x00, 0x00, 0x80);
    cq_sbuf_done(&a);
    cq_sbuf_done(&out);
    /* Entity: hp = -1 as a 5-byte varint becomes the canonical 10 bytes; bool 2 becomes 1. */
    RAW(&a, 0x28, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x08, 0x02);
    assert_int_equal(cq_compact(T("chanqtest.Entity"), a.data, a.len, (cq_sbuf_init(&out), &out)),
                     0);
    EXPECT(&out, 0x08, 0x01, 0x28, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01);
    cq_sbuf_done(&a);
    cq_sbuf_done(&out);
    /* cq_merge appends to out. */
    RAW(&a, 0x10, 0x01);
    cq_sbuf_init(&out);
    assert_int_equal(cq_sbuf_append(&out, "ab", 2), 0);
    assert_int_equal(cq_compact(T("testpb.TestChannelDataMessage"), a.data, a.len, &out), 0);
    EXPECT(&out, 'a', 'b', 0x10, 0x01);
    cq_sbuf_done(&a);
    cq_sbuf_done(&out);
}

void test_merge_compaction_bounded(void **state)
{
    /* An update touching a nested position, a map entry and a scalar, applied 1000 times:
     * the state stops growing after the first merge. */
    const cq_msgdesc_t *d = T("chanqtest.EntityWorld");
    ent_spec_t su[] = {{3, "moving", 42, false}};
    cq_sbuf_t upd, st, next;
    pack_world(su, 1, "world", NULL, 0, &upd);
    cq_sbuf_init(&st);
    size_t first = 0;
    for (int i = 0; i < 1000; i++) {
        merge_ok(d, &st, &upd, NULL, &next);
        if (i == 0)
            first = next.len;
        assert_int_equal(next.len, first);
        cq_sbuf_done(&st);
        st = next;
    }
    cq_sbuf_done(&st);
    cq_sbuf_done(&upd);

    /* A scalar-only update never grows the state. */
    const cq_msgdesc_t *t = T("testpb.TestChannelDataMessage");
    cq_sbuf_init(&st);
    for (uint32_t i = 1; i <= 1000; i++) {
        Testpb__TestChannelDataMessage m = TESTPB__TEST_CHANNEL_DATA_MESSAGE__INIT;
        m.num = i % 300;
        m.text = (i & 1) ? "odd" : "";
        pack_msg(&m.base, &upd);
        merge_ok(t, &st, &upd, NULL, &next);
        assert_true(next.len <= 3 + 2 + 3); /* text "odd" + num: at most 8 bytes */
        cq_sbuf_done(&st);
        cq_sbuf_done(&upd);
        st = next;
    }
    Testpb__TestChannelDataMessage *m =
        testpb__test_channel_data_message__unpack(NULL, st.len, st.data);
    assert_non_null(m);
    assert_int_equal(m->num, 1000 % 300);
    assert_string_equal(m->text, "odd");
    testpb__test_channel_data_message__free_unpacked(m, NULL);
    cq_sbuf_done(&st);
}

/* ---- hostile input --------------------------------------------------------------------- */

static void expect_decode_error(const cq_msgdesc_t *d, const uint8_t *p, size_t n)
{
    cq_sbuf_t out;
    cq_sbuf_init(&out);
    assert_int_equal(cq_sbuf_append(&out, "xy", 2), 0);
    assert_int_equal(cq_merge(d, p, n, NULL, 0, NULL, &out), CQ_EDECODE);
    assert_int_equal(out.len, 2);
    assert_int_equal(cq_merge(d, NULL, 0, p, n, NULL, &out), CQ_EDECODE);
    assert_int_equal(out.len, 2);
    cq_sbuf_done(&out);
}

#define BAD(d, ...)                                                                                \
    do {                                                                                           \
        static const uint8_t bad_[] = {__VA_ARGS__};                                               \
        expect_decode_error((d), bad_, sizeof(bad_));                                              \
    } while (0)

void test_merge_malformed(void **state)
{
    const cq_msgdesc_t *t = T("testpb.TestChannelDataMessage");
    const cq_msgdesc_t *w = T("chanqtest.EntityWorld");
    BAD(t, 0x10);            /* truncated varint value */
    BAD(t, 0x10, 0x80);      /* truncated varint */
    BAD(t, 0x0a, 0x05, 'a'); /* LEN past the end */
    BAD(t, 0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01); /* huge LEN */
    BAD(t, 0x0e, 0x00);                                                       /* wire type 6 */
    BAD(t, 0x0c);                               /* end group without start */
    BAD(t, 0x0b, 0x10, 0x01);                   /* unterminated group */
    BAD(t, 0x0b, 0x14);                         /* group 1 closed as group 2 */
    BAD(t, 0x00, 0x00);                         /* field number 0 */
    BAD(t, 0x1d, 0x00, 0x00);                   /* truncated fixed32 */
    BAD(w, 0x1a, 0x02, 0x01, 0x80);             /* packed run ending inside a varint */
    BAD(w, 0x0a, 0x02, 0x08, 0x80);             /* map entry with a truncated key */
    BAD(w, 0x0a, 0x04, 0x12, 0x02, 0x08, 0x80); /* bad Entity inside a map value */
    BAD(T("chanqtest.Vec3"), 0x0d, 0x00);       /* truncated float */
    BAD(T("chanqtest.Entity"), 0x12, 0x03, 0x0d, 0x00, 0x00); /* bad Vec3 inside Entity */
}

/* A self-recursive type from a hand-made descriptor: message r.M { M f = 1; }. */
static cq_schema_t *recursive_schema(void)
{
    Google__Protobuf__FileDescriptorSet set = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_SET__INIT;
    Google__Protobuf__FileDescriptorProto file = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_PROTO__INIT,
                                          *pf = &file;
    Google__Protobuf__DescriptorProto msg = GOOGLE__PROTOBUF__DESCRIPTOR_PROTO__INIT, *pm = &msg;
    Google__Protobuf__FieldDescriptorProto f = GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__INIT,
                                           *pfl = &f;
    set.n_file = 1;
    set.file = &pf;
    file.name = "r.proto";
    file.package = "r";
    file.syntax = "proto3";
    file.n_message_type = 1;
    file.message_type = &pm;
    msg.name = "M";
    msg.n_field = 1;
    msg.field = &pfl;
    f.name = "f";
    f.has_number = f.has_label = f.has_type = 1;
    f.number = 1;
    f.label = GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__LABEL__LABEL_OPTIONAL;
    f.type = GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__TYPE__TYPE_MESSAGE;
    f.type_name = ".r.M";
    cq_sbuf_t b;
    pack_msg(&set.base, &b);
    cq_schema_t *s;
    assert_int_equal(cq_schema_new(&s), 0);
    assert_int_equal(cq_schema_add_fds(s, b.data, b.len, NULL, 0), 0);
    cq_sbuf_done(&b);
    return s;
}

/* depth levels of M{f: ...} (innermost empty), or of unknown groups when group is true. */
static void nest(cq_sbuf_t *b, int depth, bool group)
{
    cq_sbuf_init(b);
    if (group) {
        for (int i = 0; i < depth; i++)
            assert_int_equal(cq_sbuf_append(b, "\x7b", 1), 0); /* start group 15 */
        for (int i = 0; i < depth; i++)
            assert_int_equal(cq_sbuf_append(b, "\x7c", 1), 0);
        return;
    }
    for (int i = 0; i < depth; i++) {
        cq_sbuf_t nb;
        cq_sbuf_init(&nb);
        uint8_t hdr[11] = {0x0a};
        size_t hn = 1 + cq_varint_put(hdr + 1, b->len);
        assert_int_equal(cq_sbuf_append(&nb, hdr, hn), 0);
        assert_int_equal(cq_sbuf_append(&nb, b->data, b->len), 0);
        cq_sbuf_done(b);
        *b = nb;
    }
}

void test_merge_depth_limit(void **state)
{
    cq_schema_t *s = recursive_schema();
    const cq_msgdesc_t *m = cq_schema_find(s, "r.M");
    cq_sbuf_t in, out;
    nest(&in, 60, false);
    merge_ok(m, &in, &in, NULL, &out); /* fine below the limit: merges into itself */
    expect_bytes(&out, in.data, in.len);
    cq_sbuf_done(&out);
    cq_sbuf_done(&in);
    nest(&in, CQ_MERGE_MAX_DEPTH, false);
    cq_sbuf_t out2;
    merge_ok(m, NULL, &in, NULL, &out2);
    cq_sbuf_done(&out2);
    cq_sbuf_done(&in);
    nest(&in, CQ_MERGE_MAX_DEPTH + 1, false);
    expect_decode_error(m, in.data, in.len);
    cq_sbuf_done(&in);
    nest(&in, 200, true);
    expect_decode_error(m, in.data, in.len);
    cq_sbuf_done(&in);
    nest(&in, 20, true);
    merge_ok(m, NULL, &in, NULL, &out);
    expect_bytes(&out, in.data, in.len);
    cq_sbuf_done(&out);
    cq_sbuf_done(&in);
    cq_schema_free(s);
}

/* ---- fail-N ---------------------------------------------------------------------------- */

void test_merge_failn(void **state)
{
    const cq_msgdesc_t *d = T("chanqtest.EntityWorld");
    ent_spec_t sa[] = {{1, "a", 1, false}, {2, "b", -1000, false}, {3, "c", 3, false}};
    ent_spec_t sb[] = {{2, "x", -1000, true}, {4, "d", 4, false}};
    static const uint32_t ta[] = {1, 2, 3, 4}, tb[] = {5};
    cq_sbuf_t a, b, ref;
    pack_world(sa, 3, "w", ta, 4, &a);
    pack_world(sb, 2, "v", tb, 1, &b);
    cq_merge_opts_t o = {.check_removable_map = true, .list_size_limit = 3, .truncate_top = true};
    merge_ok(d, &a, &b, &o, &ref);
    int ok = 0;
    for (unsigned long n = 1; n < 5000 && !ok; n++) {
        cq_sbuf_t out;
        cq_sbuf_init(&out);
        test_alloc_install(n, false);
        int r = cq_merge(d, a.data, a.len, b.data, b.len, &o, &out);
        assert_true(r == 0 || r == -ENOMEM);
        if (r == 0) {
            expect_bytes(&out, ref.data, ref.len);
            ok = test_alloc_failed() == 0;
        } else {
            assert_int_equal(out.len, 0);
        }
        cq_sbuf_done(&out);
        assert_int_equal(test_alloc_live(), 0);
        test_alloc_remove();
    }
    assert_true(ok);
    done(&a, &b, &ref);
}
