/* Unit tests of cq_fieldpath (vector at a path, uint32-keyed map edits) on hand-written wire
 * bytes, against the types of tests/data/fptest.proto and proto/world.proto (argv[1], argv[2]:
 * their descriptor sets). Every expected value is written out below. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cq_err.h"
#include "cq_fieldpath.h"
#include "cq_merge.h"
#include "cq_schema.h"

static cq_schema_t *g_schema;

static const cq_msgdesc_t *T(const char *name)
{
    const cq_msgdesc_t *d = cq_schema_find(g_schema, name);
    assert_non_null(d);
    return d;
}

/* ---- a tiny encoder ---- */

static void put(cq_sbuf_t *b, const void *p, size_t n)
{
    assert_int_equal(cq_sbuf_append(b, p, n), 0);
}

static void varint(cq_sbuf_t *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    do {
        t[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(b, t, n);
}

static void tag(cq_sbuf_t *b, uint32_t num, uint32_t wt)
{
    varint(b, (uint64_t)num << 3 | wt);
}

static void f32(cq_sbuf_t *b, uint32_t num, float v)
{
    tag(b, num, 5);
    put(b, &v, 4);
}

static void f64(cq_sbuf_t *b, uint32_t num, double v)
{
    tag(b, num, 1);
    put(b, &v, 8);
}

static void len(cq_sbuf_t *b, uint32_t num, const cq_sbuf_t *sub)
{
    tag(b, num, 2);
    varint(b, sub->len);
    put(b, sub->data, sub->len);
}

/* ---- position reader ---- */

/* EntityChannelData{transform{position{x, y, z}}} */
static void world_entity(cq_sbuf_t *out, float x, float y, float z)
{
    cq_sbuf_t v, t;
    cq_sbuf_init(&v);
    cq_sbuf_init(&t);
    f32(&v, 1, x);
    f32(&v, 2, y);
    f32(&v, 3, z);
    len(&t, 2, &v);
    len(out, 1, &t);
    cq_sbuf_done(&v);
    cq_sbuf_done(&t);
}

static void test_vec_float_path(void **state)
{
    (void)state;
    const cq_msgdesc_t *d = T("chanqworld.EntityChannelData");
    cq_sbuf_t b;
    cq_sbuf_init(&b);
    tag(&b, 3, 0); /* seq 7 before the transform */
    varint(&b, 7);
    world_entity(&b, -1950.5f, 2.25f, 100.0f);
    double v[3];
    assert_int_equal(cq_fieldpath_vec3(d, "transform.position", b.data, b.len, v), 1);
    assert_true(v[0] == -1950.5 && v[1] == 2.25 && v[2] == 100.0);
    /* A later occurrence merges: only x is rewritten. */
    cq_sbuf_t v2, t2;
    cq_sbuf_init(&v2);
    cq_sbuf_init(&t2);
    f32(&v2, 1, 50.0f);
    len(&t2, 2, &v2);
    len(&b, 1, &t2);
    assert_int_equal(cq_fieldpath_vec3(d, "transform.position", b.data, b.len, v), 1);
    assert_true(v[0] == 50.0 && v[1] == 2.25 && v[2] == 100.0);
    assert_int_equal(cq_fieldpath_check_vec3(d, "transform.position"), 0);
    cq_sbuf_done(&v2);
    cq_sbuf_done(&t2);
    cq_sbuf_done(&b);
}

static void test_vec_double_and_nested(void **state)
{
    (void)state;
    cq_sbuf_t v, h, w;
    cq_sbuf_init(&v);
    cq_sbuf_init(&h);
    cq_sbuf_init(&w);
    f64(&v, 3, 0.125);
    f64(&v, 1, -1e9);
    len(&h, 1, &v);
    len(&w, 1, &h);
    double r[3];
    assert_int_equal(cq_fieldpath_vec3(T("fptest.Holder"), "pos", h.data, h.len, r), 1);
    assert_true(r[0] == -1e9 && r[1] == 0 && r[2] == 0.125);
    assert_int_equal(cq_fieldpath_vec3(T("fptest.Wrap"), "h.pos", w.data, w.len, r), 1);
    assert_true(r[0] == -1e9 && r[1] == 0 && r[2] == 0.125);
    /* A vector type with only x: y and z read 0. */
    cq_sbuf_t x, h2;
    cq_sbuf_init(&x);
    cq_sbuf_init(&h2);
    f32(&x, 1, 3.5f);
    len(&h2, 5, &x);
    assert_int_equal(cq_fieldpath_vec3(T("fptest.Holder"), "part", h2.data, h2.len, r), 1);
    assert_true(r[0] == 3.5 && r[1] == 0 && r[2] == 0);
    cq_sbuf_done(&v);
    cq_sbuf_done(&h);
    cq_sbuf_done(&w);
    cq_sbuf_done(&x);
    cq_sbuf_done(&h2);
}

static void test_vec_missing(void **state)
{
    (void)state;
    const cq_msgdesc_t *d = T("chanqworld.EntityChannelData");
    double r[3] = {9, 9, 9};
    /* No transform at all; a transform without position; empty bytes. */
    cq_sbuf_t b, t;
    cq_sbuf_init(&b);
    cq_sbuf_init(&t);
    tag(&b, 2, 2);
    varint(&b, 1);
    put(&b, "n", 1);
    assert_int_equal(cq_fieldpath_vec3(d, "transform.position", b.data, b.len, r), 0);
    assert_true(r[0] == 0 && r[1] == 0 && r[2] == 0);
    tag(&t, 1, 0);
    varint(&t, 1); /* removed = true */
    len(&b, 1, &t);
    assert_int_equal(cq_fieldpath_vec3(d, "transform.position", b.data, b.len, r), 0);
    assert_int_equal(cq_fieldpath_vec3(d, "transform.position", NULL, 0, r), 0);
    /* An empty position message is present: all zero. */
    cq_sbuf_t e, t2;
    cq_sbuf_init(&e);
    cq_sbuf_init(&t2);
    len(&t2, 2, &e);
    len(&b, 1, &t2);
    assert_int_equal(cq_fieldpath_vec3(d, "transform.position", b.data, b.len, r), 1);
    cq_sbuf_done(&b);
    cq_sbuf_done(&t);
    cq_sbuf_done(&t2);
}

static void test_vec_bad_paths(void **state)
{
    (void)state;
    const cq_msgdesc_t *h = T("fptest.Holder");
    double r[3];
    static const char *const bad[] = {
        "",     "nope", "pos.x", "list",  "byId",  "n",      "none",
        "ints", "pos.", ".pos",  "h.pos", "pos..", "part.x",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(cq_fieldpath_check_vec3(h, bad[i]), CQ_EFIELD);
        assert_int_equal(cq_fieldpath_vec3(h, bad[i], NULL, 0, r), CQ_EFIELD);
    }
    assert_int_equal(cq_fieldpath_check_vec3(T("chanqworld.EntityChannelData"), "transform"),
                     CQ_EFIELD); /* TransformState has no x/y/z */
    assert_int_equal(cq_fieldpath_check_vec3(NULL, "pos"), CQ_EFIELD);
}

static void test_vec_malformed(void **state)
{
    (void)state;
    const cq_msgdesc_t *d = T("chanqworld.EntityChannelData");
    double r[3];
    /* truncated length; position with a varint x; transform as a varint; bad tag */
    static const uint8_t trunc[] = {0x0a, 0x05, 0x12, 0x03, 0x0d};
    static const uint8_t varint_x[] = {0x0a, 0x04, 0x12, 0x02, 0x08, 0x01};
    static const uint8_t scalar_t[] = {0x08, 0x01};
    static const uint8_t short_f[] = {0x0a, 0x04, 0x12, 0x02, 0x0d, 0x00};
    static const uint8_t badtag[] = {0x0f};
    assert_int_equal(cq_fieldpath_vec3(d, "transform.position", trunc, sizeof(trunc), r),
                     CQ_EDECODE);
    assert_int_equal(cq_fieldpath_vec3(d, "transform.position", varint_x, sizeof(varint_x), r),
                     CQ_EDECODE);
    assert_int_equal(cq_fieldpath_vec3(d, "transform.position", scalar_t, sizeof(scalar_t), r),
                     CQ_EDECODE);
    assert_int_equal(cq_fieldpath_vec3(d, "transform.position", short_f, sizeof(short_f), r),
                     CQ_EDECODE);
    assert_int_equal(cq_fieldpath_vec3(d, "transform.position", badtag, sizeof(badtag), r),
                     CQ_EDECODE);
    assert_true(r[0] == 0 && r[1] == 0 && r[2] == 0);
}

/* ---- map ops ---- */

/* SpatialEntityState{objRef{netId = id}} */
static void state_of(cq_sbuf_t *out, uint32_t id)
{
    cq_sbuf_t ref;
    cq_sbuf_init(&ref);
    tag(&ref, 1, 0);
    varint(&ref, id);
    len(out, 1, &ref);
    cq_sbuf_done(&ref);
}

static void entry(cq_sbuf_t *out, uint32_t key, uint32_t id)
{
    cq_sbuf_t e, v;
    cq_sbuf_init(&e);
    cq_sbuf_init(&v);
    tag(&e, 1, 0);
    varint(&e, key);
    state_of(&v, id);
    len(&e, 2, &v);
    len(out, 1, &e);
    cq_sbuf_done(&e);
    cq_sbuf_done(&v);
}

static void test_map_take_put(void **state)
{
    (void)state;
    const cq_msgdesc_t *d = T("chanqworld.SpatialChannelData");
    const cq_fielddesc_t *f = cq_mapops_field(d, "entities");
    assert_non_null(f);
    assert_int_equal(f->number, 1);
    cq_sbuf_t in, out, want, taken[3], v;
    cq_sbuf_init(&in);
    cq_sbuf_init(&out);
    cq_sbuf_init(&want);
    cq_sbuf_init(&v);
    for (int i = 0; i < 3; i++)
        cq_sbuf_init(&taken[i]);
    entry(&in, 524288, 1);
    entry(&in, 524289, 2);
    entry(&in, 524290, 3);
    entry(&in, 524288, 4); /* a later entry for the same key wins */
    uint32_t keys[3] = {524288, 524290, 600000};
    uint64_t found = 0;
    assert_int_equal(cq_mapops_take(f, in.data, in.len, keys, 3, &out, taken, &found), 0);
    assert_int_equal(found, 3); /* bits 0 and 1 */
    entry(&want, 524289, 2);
    assert_int_equal(out.len, want.len);
    assert_memory_equal(out.data, want.data, want.len);
    state_of(&v, 4);
    assert_int_equal(taken[0].len, v.len);
    assert_memory_equal(taken[0].data, v.data, v.len);
    v.len = 0;
    state_of(&v, 3);
    assert_int_equal(taken[1].len, v.len);
    assert_memory_equal(taken[1].data, v.data, v.len);
    assert_int_equal(taken[2].len, 0);
    /* put back the taken entry: bytes equal to a hand-written entry */
    want.len = 0;
    entry(&want, 524290, 3);
    out.len = 0;
    assert_int_equal(cq_mapops_put(f, 524290, taken[1].data, taken[1].len, &out), 0);
    assert_int_equal(out.len, want.len);
    assert_memory_equal(out.data, want.data, want.len);
    /* the result decodes with the schema (compaction validates every byte) */
    cq_sbuf_t c;
    cq_sbuf_init(&c);
    assert_int_equal(cq_compact(d, out.data, out.len, &c), 0);
    assert_memory_equal(c.data, want.data, want.len);
    cq_sbuf_done(&c);
    cq_sbuf_done(&in);
    cq_sbuf_done(&out);
    cq_sbuf_done(&want);
    cq_sbuf_done(&v);
    for (int i = 0; i < 3; i++)
        cq_sbuf_done(&taken[i]);
}

static void test_map_field_lookup(void **state)
{
    (void)state;
    assert_null(cq_mapops_field(T("chanqworld.SpatialChannelData"), "nope"));
    assert_null(cq_mapops_field(T("chanqworld.SpatialChannelData"), ""));
    assert_null(cq_mapops_field(T("fptest.Holder"), "list"));   /* not a map */
    assert_null(cq_mapops_field(T("fptest.Holder"), "byName")); /* string keys */
    assert_non_null(cq_mapops_field(T("fptest.Holder"), "byId"));
    assert_null(cq_mapops_field(NULL, "entities"));
}

static void test_map_malformed(void **state)
{
    (void)state;
    const cq_fielddesc_t *f = cq_mapops_field(T("chanqworld.SpatialChannelData"), "entities");
    uint32_t k = 1;
    cq_sbuf_t out;
    cq_sbuf_init(&out);
    put(&out, "ab", 2);
    static const uint8_t trunc[] = {0x0a, 0x09, 0x08};
    static const uint8_t keylen[] = {0x0a, 0x03, 0x0a, 0x01, 0x00}; /* key as LEN */
    static const uint8_t entvar[] = {0x08, 0x01};                   /* entry as varint */
    assert_int_equal(cq_mapops_take(f, trunc, sizeof(trunc), &k, 1, &out, NULL, NULL), CQ_EDECODE);
    assert_int_equal(cq_mapops_take(f, keylen, sizeof(keylen), &k, 1, &out, NULL, NULL),
                     CQ_EDECODE);
    assert_int_equal(cq_mapops_take(f, entvar, sizeof(entvar), &k, 1, &out, NULL, NULL),
                     CQ_EDECODE);
    assert_int_equal(out.len, 2); /* restored */
    cq_sbuf_done(&out);
}

static void test_set_any(void **state)
{
    (void)state;
    /* SpatialEntityState{objRef{netId 5}, entityData = old} -> entityData replaced */
    cq_sbuf_t in, out, want, any, old;
    cq_sbuf_init(&in);
    cq_sbuf_init(&out);
    cq_sbuf_init(&want);
    cq_sbuf_init(&any);
    cq_sbuf_init(&old);
    state_of(&in, 5);
    put(&old, "\x0a\x01q", 3);
    len(&in, 3, &old);
    const char *url = "type.googleapis.com/chanqworld.EntityChannelData";
    static const uint8_t data[] = {0x18, 0x07}; /* seq 7 */
    assert_int_equal(cq_fieldpath_set_any(in.data, in.len, 3, url, data, sizeof(data), &out), 0);
    state_of(&want, 5);
    tag(&any, 1, 2);
    varint(&any, strlen(url));
    put(&any, url, strlen(url));
    tag(&any, 2, 2);
    varint(&any, sizeof(data));
    put(&any, data, sizeof(data));
    len(&want, 3, &any);
    assert_int_equal(out.len, want.len);
    assert_memory_equal(out.data, want.data, want.len);
    static const uint8_t bad[] = {0x1a, 0x05};
    size_t before = out.len;
    assert_int_equal(cq_fieldpath_set_any(bad, sizeof(bad), 3, url, data, 2, &out), CQ_EDECODE);
    assert_int_equal(out.len, before);
    cq_sbuf_done(&in);
    cq_sbuf_done(&out);
    cq_sbuf_done(&want);
    cq_sbuf_done(&any);
    cq_sbuf_done(&old);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s fptest.fds world.fds\n", argv[0]);
        return 2;
    }
    char err[256];
    if (cq_schema_new(&g_schema) < 0 || cq_schema_load_file(g_schema, argv[1], err, sizeof(err)) ||
        cq_schema_load_file(g_schema, argv[2], err, sizeof(err))) {
        fprintf(stderr, "schema: %s\n", err);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vec_float_path),   cmocka_unit_test(test_vec_double_and_nested),
        cmocka_unit_test(test_vec_missing),      cmocka_unit_test(test_vec_bad_paths),
        cmocka_unit_test(test_vec_malformed),    cmocka_unit_test(test_map_take_put),
        cmocka_unit_test(test_map_field_lookup), cmocka_unit_test(test_map_malformed),
        cmocka_unit_test(test_set_any),
    };
    int r = cmocka_run_group_tests_name("fieldpath", tests, NULL, NULL);
    cq_schema_free(g_schema);
    return r;
}
