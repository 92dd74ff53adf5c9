/* tests/unit/mq: the readers both JSON decoders share (src/mq/scalar.c): each reader's accepted
 * values, its exact error code and text, and that a failure leaves the output alone. The
 * decoders' own suites (mq, mqmgr) pin the same texts through whole messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cq_alloc.h"
#include "cq_err.h"
#include "mq_int.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static char g_err[256];
static const mq_fctx_t C = {"probe", g_err, sizeof(g_err)};

static json_t *J(const char *text)
{
    json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    assert_non_null(v);
    return v;
}

static void test_field_err(void **state)
{
    (void)state;
    assert_int_equal(cq__mq_field_err(&C, CQ_EFIELD, "a.b", "must be %d", 7), CQ_EFIELD);
    assert_string_equal(g_err, "probe: field \"a.b\": must be 7");
    const mq_fctx_t quiet = {"probe", NULL, 0};
    assert_int_equal(cq__mq_field_err(&quiet, CQ_EBADTOPIC, "x", "y"), CQ_EBADTOPIC);
}

static void test_ints(void **state)
{
    (void)state;
    json_t *v = J("10"), *big = J("4294967296"), *s = J("\"1\""), *r = J("1.0");
    int64_t x = -5;
    assert_int_equal(cq__mq_get_int(&C, "n", v, 0, 10, &x), 0);
    assert_int_equal(x, 10);
    x = -5;
    assert_int_equal(cq__mq_get_int(&C, "n", v, 0, 9, &x), CQ_EFIELD);
    assert_string_equal(g_err, "probe: field \"n\": must be an integer in [0, 9]");
    assert_int_equal(x, -5);
    assert_int_equal(cq__mq_get_int(&C, "n", v, 11, 20, &x), CQ_EFIELD);
    assert_string_equal(g_err, "probe: field \"n\": must be an integer in [11, 20]");
    assert_int_equal(cq__mq_get_int(&C, "n", s, -1, 1, &x), CQ_EFIELD);
    assert_string_equal(g_err, "probe: field \"n\": must be an integer in [-1, 1]");
    assert_int_equal(cq__mq_get_int(&C, "n", r, 0, 1, &x), CQ_EFIELD);
    assert_int_equal(cq__mq_get_int(&C, "n", NULL, 0, 1, &x), CQ_EFIELD);
    assert_int_equal(x, -5);

    uint32_t u = 1;
    assert_int_equal(cq__mq_get_u32(&C, "u", big, &u), CQ_EFIELD);
    assert_string_equal(g_err, "probe: field \"u\": must be an integer in [0, 4294967295]");
    assert_int_equal(u, 1);
    json_decref(big);
    big = J("4294967295");
    assert_int_equal(cq__mq_get_u32(&C, "u", big, &u), 0);
    assert_int_equal(u, UINT32_MAX);
    json_decref(v);
    json_decref(big);
    json_decref(s);
    json_decref(r);
}

static void test_bools(void **state)
{
    (void)state;
    json_t *t = J("true"), *f = J("false"), *one = J("1");
    bool b = false;
    assert_int_equal(cq__mq_get_bool(&C, "on", t, &b), 0);
    assert_true(b);
    assert_int_equal(cq__mq_get_bool(&C, "on", f, &b), 0);
    assert_false(b);
    b = true;
    assert_int_equal(cq__mq_get_bool(&C, "on", one, &b), CQ_EFIELD);
    assert_string_equal(g_err, "probe: field \"on\": must be true or false");
    assert_true(b);
    json_decref(t);
    json_decref(f);
    json_decref(one);
}

static void test_strings(void **state)
{
    (void)state;
    json_t *abc = J("\"abc\""), *nul = J("\"a\\u0000b\""), *num = J("3");
    char *out = NULL;
    assert_int_equal(cq__mq_get_strdup(&C, "s", abc, 3, true, &out), 0);
    assert_string_equal(out, "abc");
    cq_free(out);
    out = NULL;
    assert_int_equal(cq__mq_get_strdup(&C, "s", abc, 2, false, &out), CQ_EFIELD);
    assert_string_equal(g_err, "probe: field \"s\": must be a string of at most 2 bytes");
    assert_null(out);
    /* a NUL is a string's byte for the seed protocol's fields, not for text */
    assert_int_equal(cq__mq_get_strdup(&C, "s", nul, 3, false, &out), 0);
    assert_memory_equal(out, "a\0b", 4);
    cq_free(out);
    out = NULL;
    assert_int_equal(cq__mq_get_strdup(&C, "s", nul, 3, true, &out), CQ_EFIELD);
    assert_string_equal(g_err, "probe: field \"s\": must be a string of at most 3 bytes");
    assert_int_equal(cq__mq_get_strdup(&C, "s", num, 3, false, &out), CQ_EFIELD);
    assert_null(out);

    char buf[4] = "zzz";
    assert_int_equal(cq__mq_get_strbuf(&C, "b", abc, 3, buf), 0);
    assert_string_equal(buf, "abc");
    memcpy(buf, "zzz", 4);
    assert_int_equal(cq__mq_get_strbuf(&C, "b", nul, 3, buf), CQ_EFIELD);
    assert_string_equal(g_err, "probe: field \"b\": must be a string of at most 3 bytes");
    assert_string_equal(buf, "zzz");
    json_decref(abc);
    json_decref(nul);
    json_decref(num);
}

static void test_topics(void **state)
{
    (void)state;
    char long_name[80];
    memset(long_name, 'a', 65);
    strcpy(long_name + 65, "\"");
    char text[96] = "\"";
    strcat(text, long_name);
    json_t *ok = J("\"orders_1\""), *bad = J("\"or-ders\""), *big = J(text);
    char t[CQ_MQ_TOPIC_MAX + 1] = "x";
    assert_int_equal(cq__mq_get_topic(&C, "topic", ok, t), 0);
    assert_string_equal(t, "orders_1");
    assert_int_equal(cq__mq_get_topic(&C, "topic", bad, t), CQ_EBADTOPIC);
    assert_string_equal(g_err,
                        "probe: field \"topic\": must be a string matching [A-Za-z0-9_]{1,64}");
    assert_int_equal(cq__mq_get_topic(&C, "topic", big, t), CQ_EBADTOPIC);
    assert_string_equal(t, "orders_1");
    json_decref(ok);
    json_decref(bad);
    json_decref(big);
}

static void test_objects(void **state)
{
    (void)state;
    json_t *o = J("{\"a\":1}"), *arr = J("[]");
    int rc = 0;
    assert_ptr_equal(cq__mq_required(&C, o, "a", "x.a", &rc), json_object_get(o, "a"));
    assert_int_equal(rc, 0);
    assert_null(cq__mq_required(&C, o, "b", "x.b", &rc));
    assert_int_equal(rc, CQ_EFIELD);
    assert_string_equal(g_err, "probe: field \"x.b\": missing");
    assert_int_equal(cq__mq_need_object(&C, "x", o), 0);
    assert_int_equal(cq__mq_need_object(&C, "x", arr), CQ_EFIELD);
    assert_string_equal(g_err, "probe: field \"x\": must be an object");
    json_decref(o);
    json_decref(arr);
}

static int load(const char *body, uint32_t depth, json_t **ret)
{
    cq_mq_frame_t f = {.body = (const uint8_t *)body, .body_len = strlen(body)};
    return cq__mq_load_object(&C, &f, depth, ret);
}

static void test_load_object(void **state)
{
    (void)state;
    json_t *root = NULL;
    assert_int_equal(load("{\"a\":[{}]}", 3, &root), 0);
    assert_true(json_is_object(root));
    json_decref(root);
    root = NULL;
    assert_int_equal(load("{\"a\":[{}]}", 2, &root), CQ_EJSON);
    assert_string_equal(g_err, "probe: JSON nested deeper than 2");
    assert_int_equal(load("[1]", 2, &root), CQ_EJSON);
    assert_string_equal(g_err, "probe: body must be a JSON object");
    assert_int_equal(load("{\"a\":}", 2, &root), CQ_EJSON);
    assert_string_equal(g_err, "probe: invalid JSON at line 1 column 6: unexpected token near '}'");
    assert_null(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_field_err),   cmocka_unit_test(test_ints),
        cmocka_unit_test(test_bools),       cmocka_unit_test(test_strings),
        cmocka_unit_test(test_topics),      cmocka_unit_test(test_objects),
        cmocka_unit_test(test_load_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
