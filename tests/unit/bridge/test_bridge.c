/* tests/unit/bridge: the bridge engine (src/bridge, doc/bridge.md).
 *
 * The bindings document (the example, the bounds, every refusal with its exact code and
 * message), TopicEvent bytes (exact for one event, and decoded back by protobuf-c with every
 * field equal), the engine's outputs (one encode shared by every binding, route keys), the
 * dedup window (against a naive model too), argument errors that leave no trace, and fail-N
 * allocation loops in which jansson allocates through cq_malloc too (json_set_alloc_funcs in
 * main). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bridge.pb-c.h"
#include "cq_alloc.h"
#include "cq_bridge.h"
#include "cq_err.h"
#include "test_alloc.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char example[] =
    "{\"bindings\":[{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201},"
    "{\"topic\":\"release\",\"broadcast\":\"global\",\"msg_type\":200}]}";

/* ---- helpers ----------------------------------------------------------------------------- */

static cq_bindings_t parse_ok(const char *json)
{
    cq_bindings_t b = {NULL, 0};
    char err[256] = "";
    int rc = cq_bindings_parse(json, strlen(json), &b, err, sizeof(err));
    if (rc != 0)
        fail_msg("parse %s: %d %s", json, rc, err);
    return b;
}

/* Parsing must fail with code and exactly the message want, leaving the output untouched. */
static void expect_refused(const char *json, size_t len, int code, const char *want)
{
    cq_binding_t sentinel;
    cq_bindings_t b = {&sentinel, 77};
    char err[256] = "";
    int rc = cq_bindings_parse(json, len, &b, err, sizeof(err));
    if (rc != code)
        fail_msg("%.200s: got %d (%s) want %d", json, rc, err, code);
    assert_ptr_equal(b.v, &sentinel);
    assert_int_equal(b.n, 77);
    if (strcmp(err, want) != 0)
        fail_msg("%.200s:\n  got  \"%s\"\n  want \"%s\"", json, err, want);
}

static void refused(const char *json, const char *want)
{
    expect_refused(json, strlen(json), CQ_ECONFIG, want);
}

/* A document of one binding whose members are body. */
static void refused1(const char *body, const char *want)
{
    char doc[512];
    snprintf(doc, sizeof(doc), "{\"bindings\":[%s]}", body);
    refused(doc, want);
}

static cq_bridge_t *bridge_of(const char *json, uint32_t window)
{
    cq_bindings_t b = parse_ok(json);
    cq_bridge_t *br = cq_bridge_new(&b, window);
    assert_non_null(br);
    assert_null(b.v); /* moved */
    assert_int_equal(b.n, 0);
    return br;
}

static cq_topic_event_t ev_of(const char *topic, const char *producer, uint64_t seq,
                              const char *content)
{
    cq_topic_event_t ev = {topic,
                           0,
                           1,
                           seq,
                           0,
                           0,
                           producer,
                           seq,
                           (const uint8_t *)content,
                           content ? strlen(content) : 0};
    return ev;
}

/* Runs an event, checks it yields want outputs (>= 0) and releases them. */
static void event_n(cq_bridge_t *br, const cq_topic_event_t *ev, int want)
{
    cq_bridge_out_t out[8];
    int n = cq_bridge_event(br, ev, out, 8);
    assert_int_equal(n, want);
    for (int i = 0; i < n; i++)
        cq_buf_unref(out[i].event);
}

static void expect_stats(const cq_bridge_t *br, uint64_t events, uint64_t outputs, uint64_t dups,
                         uint64_t unroutable)
{
    cq_bridge_stats_t st;
    cq_bridge_stats(br, &st);
    assert_int_equal(st.events, events);
    assert_int_equal(st.outputs, outputs);
    assert_int_equal(st.duplicates, dups);
    assert_int_equal(st.unroutable, unroutable);
}

/* Ends a fail-N round: nothing leaked; a round in which nothing failed succeeded and ends the
 * loop; otherwise the result is -ENOMEM, or 0 when jansson's failure was absorbed by the
 * parse's retry (bindings.c, bridge.c). */
static bool failn_end(unsigned long n, int rc)
{
    unsigned long failed = test_alloc_failed();
    test_alloc_remove();
    assert_int_equal(test_alloc_live(), 0);
    if (failed == 0) {
        assert_int_equal(rc, 0);
        return true;
    }
    if (rc != 0 && rc != -ENOMEM)
        fail_msg("allocation %lu failed but rc = %d", n, rc);
    return false;
}

/* ---- the bindings document --------------------------------------------------------------- */

static void test_parse_example(void **state)
{
    (void)state;
    cq_bindings_t b = parse_ok(example);
    assert_int_equal(b.n, 2);
    assert_string_equal(b.v[0].topic, "vip");
    assert_int_equal(b.v[0].kind, CQ_BIND_ROUTE);
    assert_string_equal(b.v[0].key, "user_id");
    assert_null(b.v[0].channel);
    assert_int_equal(b.v[0].msg_type, 201);
    assert_string_equal(b.v[1].topic, "release");
    assert_int_equal(b.v[1].kind, CQ_BIND_BROADCAST);
    assert_string_equal(b.v[1].channel, "global");
    assert_null(b.v[1].key);
    assert_int_equal(b.v[1].msg_type, 200);
    cq_bindings_free(&b);
    assert_null(b.v);
    assert_int_equal(b.n, 0);
    cq_bindings_free(&b); /* twice: an empty array */
    cq_bindings_free(NULL);
}

static void test_parse_bounds_accepted(void **state)
{
    (void)state;
    /* msg_type at both ends, "topic" channels, a 64-character topic, a 64-byte field name,
     * one topic bound twice to different targets, two topics to the same target */
    const char *t64 = "T234567890123456789012345678901234567890123456789012345678901234";
    const char *f64 = "f234567890123456789012345678901234567890123456789012345678901234";
    char doc[1024];
    snprintf(doc, sizeof(doc),
             "{\"bindings\":[{\"topic\":\"%s\",\"broadcast\":\"topic\",\"msg_type\":100},"
             "{\"topic\":\"a\",\"route\":\"%s\",\"msg_type\":65535},"
             "{\"topic\":\"a\",\"route\":\"uid\",\"msg_type\":300},"
             "{\"topic\":\"a\",\"broadcast\":\"global\",\"msg_type\":300},"
             "{\"topic\":\"a\",\"broadcast\":\"topic\",\"msg_type\":300},"
             "{\"topic\":\"b\",\"broadcast\":\"topic\",\"msg_type\":300}]}",
             t64, f64);
    cq_bindings_t b = parse_ok(doc);
    assert_int_equal(b.n, 6);
    assert_string_equal(b.v[0].topic, t64);
    assert_string_equal(b.v[0].channel, "topic");
    assert_int_equal(b.v[0].msg_type, 100);
    assert_string_equal(b.v[1].key, f64);
    assert_int_equal(b.v[1].msg_type, 65535);
    cq_bindings_free(&b);
    /* no binding at all */
    b = parse_ok("{\"bindings\":[]}");
    assert_int_equal(b.n, 0);
    cq_bindings_free(&b);
    /* exactly CQ_BRIDGE_BINDINGS_MAX */
    size_t cap = 64 * (CQ_BRIDGE_BINDINGS_MAX + 1) + 32;
    char *big = malloc(cap);
    assert_non_null(big);
    size_t at = (size_t)snprintf(big, cap, "{\"bindings\":[");
    for (int i = 0; i < CQ_BRIDGE_BINDINGS_MAX; i++)
        at += (size_t)snprintf(big + at, cap - at,
                               "%s{\"topic\":\"t%d\",\"route\":\"k\",\"msg_type\":100}",
                               i ? "," : "", i);
    snprintf(big + at, cap - at, "]}");
    b = parse_ok(big);
    assert_int_equal(b.n, CQ_BRIDGE_BINDINGS_MAX);
    cq_bindings_free(&b);
    /* one more is refused */
    snprintf(big + at, cap - at, ",{\"topic\":\"x\",\"route\":\"k\",\"msg_type\":100}]}");
    refused(big, "bindings: more than 256 bindings");
    free(big);
}

static void test_parse_document_refusals(void **state)
{
    (void)state;
    /* the size bound comes before any parsing */
    size_t len = CQ_BRIDGE_FILE_MAX + 1;
    char *big = malloc(len);
    assert_non_null(big);
    memset(big, ' ', len);
    expect_refused(big, len, CQ_ECONFIG, "bindings: larger than 1048576 bytes");
    free(big);
    refused("[]", "bindings: the document must be a JSON object");
    refused("{}", "bindings: \"bindings\" must be an array");
    refused("{\"bindings\":{}}", "bindings: \"bindings\" must be an array");
    refused("{\"bindings\":null}", "bindings: \"bindings\" must be an array");
    refused("{\"bindings\":[],\"extra\":1}", "bindings: unknown key \"extra\"");
    refused("{\"Bindings\":[]}", "bindings: unknown key \"Bindings\"");
    /* invalid JSON: the position is ours, the reason is jansson's (it may word it otherwise in
     * another version), so only the part up to the reason is compared exactly */
    const char *bad[] = {"", "{\"bindings\":[}", "{\"bindings\":[]} x",
                         "{\"bindings\":[],\"bindings\":[]}"};
    const char *want[] = {"bindings: invalid JSON at line 1, column 0: ",
                          "bindings: invalid JSON at line 1, column 14: ",
                          "bindings: invalid JSON at line 1, column 17: ",
                          "bindings: invalid JSON at line 1, column 25: "};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cq_bindings_t b = {NULL, 0};
        char err[256] = "";
        assert_int_equal(cq_bindings_parse(bad[i], strlen(bad[i]), &b, err, sizeof(err)),
                         CQ_ECONFIG);
        if (strncmp(err, want[i], strlen(want[i])) != 0 || strlen(err) <= strlen(want[i]))
            fail_msg("%s: got \"%s\" want \"%s<reason>\"", bad[i], err, want[i]);
        assert_null(b.v);
    }
    /* NULL with len 0 is empty input; no error buffer is fine too */
    cq_bindings_t b = {NULL, 0};
    assert_int_equal(cq_bindings_parse(NULL, 0, &b, NULL, 0), CQ_ECONFIG);
    assert_null(b.v);
}

static void test_parse_binding_refusals(void **state)
{
    (void)state;
    const char *topic_msg = "binding 0: \"topic\" must be a topic name ([A-Za-z0-9_], 1 to 64 "
                            "characters)";
    const char *target_msg = "binding 0: exactly one of \"broadcast\" and \"route\" is required";
    const char *bc_msg = "binding 0: \"broadcast\" must be \"global\" or \"topic\"";
    const char *rt_msg = "binding 0: \"route\" must be a field name (a string of 1 to 64 "
                         "bytes)";
    const char *mt_msg = "binding 0: \"msg_type\" must be an integer from 100 to 65535";
    refused1("1", "binding 0: must be an object");
    refused1("[]", "binding 0: must be an object");
    refused1("{\"topic\":\"a\",\"route\":\"k\",\"msg_type\":200,\"chan\":1}",
             "binding 0: unknown key \"chan\"");
    /* unknown keys are reported before anything else */
    refused1("{\"Topic\":\"a\"}", "binding 0: unknown key \"Topic\"");
    refused1("{\"route\":\"k\",\"msg_type\":200}", topic_msg);
    refused1("{\"topic\":\"a-b\",\"route\":\"k\",\"msg_type\":200}", topic_msg);
    refused1("{\"topic\":\"\",\"route\":\"k\",\"msg_type\":200}", topic_msg);
    refused1("{\"topic\":7,\"route\":\"k\",\"msg_type\":200}", topic_msg);
    refused1("{\"topic\":\"T2345678901234567890123456789012345678901234567890123456789012345\","
             "\"route\":\"k\",\"msg_type\":200}",
             topic_msg);
    refused1("{\"topic\":\"a\",\"msg_type\":200}", target_msg);
    refused1("{\"topic\":\"a\",\"route\":\"k\",\"broadcast\":\"global\",\"msg_type\":200}",
             target_msg);
    refused1("{\"topic\":\"a\",\"broadcast\":\"GLOBAL\",\"msg_type\":200}", bc_msg);
    refused1("{\"topic\":\"a\",\"broadcast\":\"chan\",\"msg_type\":200}", bc_msg);
    refused1("{\"topic\":\"a\",\"broadcast\":true,\"msg_type\":200}", bc_msg);
    refused1("{\"topic\":\"a\",\"broadcast\":null,\"msg_type\":200}", bc_msg);
    refused1("{\"topic\":\"a\",\"route\":\"\",\"msg_type\":200}", rt_msg);
    refused1("{\"topic\":\"a\",\"route\":5,\"msg_type\":200}", rt_msg);
    refused1("{\"topic\":\"a\",\"route\":"
             "\"f2345678901234567890123456789012345678901234567890123456789012345\","
             "\"msg_type\":200}",
             rt_msg);
    refused1("{\"topic\":\"a\",\"route\":\"k\"}", mt_msg);
    refused1("{\"topic\":\"a\",\"route\":\"k\",\"msg_type\":99}", mt_msg);
    refused1("{\"topic\":\"a\",\"route\":\"k\",\"msg_type\":65536}", mt_msg);
    refused1("{\"topic\":\"a\",\"route\":\"k\",\"msg_type\":-200}", mt_msg);
    refused1("{\"topic\":\"a\",\"route\":\"k\",\"msg_type\":200.0}", mt_msg);
    refused1("{\"topic\":\"a\",\"route\":\"k\",\"msg_type\":\"200\"}", mt_msg);
    refused1("{\"topic\":\"a\",\"route\":\"k\",\"msg_type\":true}", mt_msg);
    /* the index names the binding (0-based) */
    refused("{\"bindings\":[{\"topic\":\"a\",\"route\":\"k\",\"msg_type\":200},"
            "{\"topic\":\"b\",\"route\":\"k\",\"msg_type\":200},"
            "{\"topic\":\"c\",\"route\":\"k\",\"msg_type\":20}]}",
            "binding 2: \"msg_type\" must be an integer from 100 to 65535");
}

static void test_parse_duplicates(void **state)
{
    (void)state;
    refused("{\"bindings\":[{\"topic\":\"a\",\"broadcast\":\"global\",\"msg_type\":200},"
            "{\"topic\":\"a\",\"broadcast\":\"global\",\"msg_type\":201}]}",
            "binding 1: same topic and target as binding 0");
    /* topic names compare case-insensitively, as the store's */
    refused("{\"bindings\":[{\"topic\":\"b\",\"route\":\"k\",\"msg_type\":200},"
            "{\"topic\":\"VIP\",\"route\":\"user_id\",\"msg_type\":200},"
            "{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":300}]}",
            "binding 2: same topic and target as binding 1");
    /* field names do not: "uid" and "UID" are two fields of the content */
    cq_bindings_t b =
        parse_ok("{\"bindings\":[{\"topic\":\"a\",\"route\":\"uid\",\"msg_type\":200},"
                 "{\"topic\":\"a\",\"route\":\"UID\",\"msg_type\":200}]}");
    assert_int_equal(b.n, 2);
    cq_bindings_free(&b);
}

static void test_parse_fail_n(void **state)
{
    (void)state;
    unsigned long n;
    for (n = 1;; n++) {
        test_alloc_install(n, false);
        cq_bindings_t b = {NULL, 0};
        char err[256] = "";
        int rc = cq_bindings_parse(example, strlen(example), &b, err, sizeof(err));
        if (rc == 0)
            assert_int_equal(b.n, 2);
        else if (rc == -ENOMEM)
            assert_string_equal(err, "bindings: out of memory");
        cq_bindings_free(&b);
        if (failn_end(n, rc))
            break;
    }
    assert_true(n > 10); /* jansson's allocations were in the loop too */
}

/* ---- the event --------------------------------------------------------------------------- */

static void test_event_bytes(void **state)
{
    (void)state;
    cq_topic_event_t ev = {"t", 1, 2, 3, 1, 5, "p", 7, (const uint8_t *)"{}", 2};
    static const uint8_t want[] = {0x0a, 0x01, 't',  0x10, 0x01, 0x18, 0x02, 0x20, 0x03, 0x28, 0x01,
                                   0x30, 0x05, 0x3a, 0x01, 'p',  0x40, 0x07, 0x4a, 0x02, '{',  '}'};
    long live = cq_buf_live();
    cq_buf_t *b = cq_topic_event_encode(&ev);
    assert_non_null(b);
    assert_int_equal(cq_buf_refs(b), 1);
    assert_int_equal(b->len, sizeof(want));
    assert_memory_equal(b->data, want, sizeof(want));
    cq_buf_unref(b);
    /* proto3: zero and empty fields are not written at all */
    cq_topic_event_t zero = {"", 0, 0, 0, 0, 0, NULL, 0, NULL, 0};
    b = cq_topic_event_encode(&zero);
    assert_non_null(b);
    assert_int_equal(b->len, 0);
    cq_buf_unref(b);
    assert_int_equal(cq_buf_live(), live);
}

static void test_event_decodes_back(void **state)
{
    (void)state;
    static const uint8_t content[] = {0, 1, 2, 0xff, '{', '}'};
    cq_topic_event_t ev = {"Orders_2",       UINT32_MAX,     UINT64_MAX,         (1ULL << 53) - 1,
                           (1ULL << 53) - 9, INT64_MIN,      "9007199254740991", UINT64_MAX - 1,
                           content,          sizeof(content)};
    cq_buf_t *b = cq_topic_event_encode(&ev);
    assert_non_null(b);
    Chanqpb__TopicEvent *m = chanqpb__topic_event__unpack(NULL, b->len, b->data);
    assert_non_null(m);
    assert_string_equal(m->topic, ev.topic);
    assert_int_equal(m->shard, ev.shard);
    assert_true(m->epoch == ev.epoch);
    assert_true(m->offset == ev.offset);
    assert_true(m->prev_offset == ev.prev_offset);
    assert_true(m->time_ms == ev.time_ms);
    assert_string_equal(m->producer_id, ev.producer_id);
    assert_true(m->seq == ev.seq);
    assert_int_equal(m->content.len, sizeof(content));
    assert_memory_equal(m->content.data, content, sizeof(content));
    chanqpb__topic_event__free_unpacked(m, NULL);
    cq_buf_unref(b);
}

static void test_event_encode_fail(void **state)
{
    (void)state;
    cq_topic_event_t ev = ev_of("t", "p", 1, "{}");
    test_alloc_install(1, true);
    cq_buf_t *b = cq_topic_event_encode(&ev);
    test_alloc_remove();
    assert_null(b);
    assert_int_equal(test_alloc_live(), 0);
}

/* ---- the engine: outputs ----------------------------------------------------------------- */

static void test_engine_topics(void **state)
{
    (void)state;
    cq_bridge_t *br =
        bridge_of("{\"bindings\":[{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201},"
                  "{\"topic\":\"release\",\"broadcast\":\"global\",\"msg_type\":200},"
                  "{\"topic\":\"VIP\",\"broadcast\":\"topic\",\"msg_type\":202},"
                  "{\"topic\":\"vip\",\"route\":\"uid\",\"msg_type\":203}]}",
                  16);
    assert_int_equal(cq_bridge_ntopics(br), 2);
    assert_string_equal(cq_bridge_topic(br, 0), "vip");
    assert_string_equal(cq_bridge_topic(br, 1), "release");
    assert_null(cq_bridge_topic(br, 2));
    assert_int_equal(cq_bridge_outputs_max(br), 3);
    assert_true(cq_bridge_watches(br, "vip"));
    assert_true(cq_bridge_watches(br, "Vip"));
    assert_true(cq_bridge_watches(br, "RELEASE"));
    assert_false(cq_bridge_watches(br, "other"));
    assert_false(cq_bridge_watches(br, "vi"));
    const cq_bindings_t *b = cq_bridge_bindings(br);
    assert_int_equal(b->n, 4);
    assert_int_equal(b->v[3].msg_type, 203);
    cq_bridge_free(br);
    cq_bridge_free(NULL);
    /* no bindings: nothing is watched */
    br = bridge_of("{\"bindings\":[]}", 16);
    assert_int_equal(cq_bridge_ntopics(br), 0);
    assert_int_equal(cq_bridge_outputs_max(br), 0);
    assert_false(cq_bridge_watches(br, "vip"));
    cq_topic_event_t ev = ev_of("vip", "p", 1, "{}");
    event_n(br, &ev, 0);
    expect_stats(br, 0, 0, 0, 0);
    cq_bridge_free(br);
}

static void test_engine_shared_encode(void **state)
{
    (void)state;
    cq_bridge_t *br = bridge_of(
        "{\"bindings\":[{\"topic\":\"release\",\"broadcast\":\"global\",\"msg_type\":200},"
        "{\"topic\":\"other\",\"broadcast\":\"global\",\"msg_type\":201},"
        "{\"topic\":\"Release\",\"broadcast\":\"topic\",\"msg_type\":202}]}",
        16);
    const cq_bindings_t *b = cq_bridge_bindings(br);
    long live = cq_buf_live();
    cq_topic_event_t ev = ev_of("release", "", 1, "v2.0");
    cq_bridge_out_t out[2];
    assert_int_equal(cq_bridge_event(br, &ev, out, 2), 2);
    assert_int_equal(cq_buf_live(), live + 1); /* encoded once */
    assert_ptr_equal(out[0].b, &b->v[0]);
    assert_ptr_equal(out[1].b, &b->v[2]);
    assert_ptr_equal(out[0].event, out[1].event);
    assert_int_equal(cq_buf_refs(out[0].event), 2);
    assert_string_equal(out[0].key, "");
    assert_string_equal(out[1].key, "");
    cq_buf_t *want = cq_topic_event_encode(&ev);
    assert_int_equal(out[0].event->len, want->len);
    assert_memory_equal(out[0].event->data, want->data, want->len);
    cq_buf_unref(want);
    cq_buf_unref(out[0].event);
    assert_int_equal(cq_buf_refs(out[1].event), 1);
    cq_buf_unref(out[1].event);
    assert_int_equal(cq_buf_live(), live);
    expect_stats(br, 1, 2, 0, 0);
    cq_bridge_free(br);
}

/* The key a route binding on "user_id" takes from content, or NULL for unroutable. */
static void expect_route(cq_bridge_t *br, const char *content, const char *want)
{
    cq_bridge_stats_t before, after;
    cq_bridge_stats(br, &before);
    cq_topic_event_t ev = ev_of("vip", NULL, 0, content);
    cq_bridge_out_t out[2];
    memset(out, 0x5a, sizeof(out));
    int n = cq_bridge_event(br, &ev, out, 2);
    cq_bridge_stats(br, &after);
    if (!want) {
        if (n != 0)
            fail_msg("%s: routed to \"%s\"", content, out[0].key);
        assert_int_equal(after.unroutable, before.unroutable + 1);
        return;
    }
    assert_int_equal(n, 1);
    assert_int_equal(out[0].b->kind, CQ_BIND_ROUTE);
    if (strcmp(out[0].key, want) != 0)
        fail_msg("%s: key \"%s\" want \"%s\"", content, out[0].key, want);
    assert_int_equal(after.unroutable, before.unroutable);
    cq_buf_unref(out[0].event);
}

static void test_engine_route_keys(void **state)
{
    (void)state;
    cq_bridge_t *br = bridge_of(
        "{\"bindings\":[{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201}]}", 16);
    char k127[200], k128[200];
    memset(k127, 'k', 127);
    memset(k128, 'k', 128);
    char c127[256], c128[256];
    snprintf(c127, sizeof(c127), "{\"user_id\":\"%.127s\"}", k127);
    snprintf(c128, sizeof(c128), "{\"user_id\":\"%.128s\"}", k128);
    k127[127] = '\0';
    expect_route(br, "{\"user_id\":\"alice\",\"level\":3}", "alice");
    expect_route(br, "{\"level\":3,\"user_id\":\"bob\"}", "bob");
    expect_route(br, "{\"user_id\":\"\\u00e9t\\u00e9\"}", "\xc3\xa9t\xc3\xa9");
    expect_route(br, "{\"user_id\":42}", "42");
    expect_route(br, "{\"user_id\":-7}", "-7");
    expect_route(br, "{\"user_id\":9223372036854775807}", "9223372036854775807");
    expect_route(br, c127, k127);
    expect_route(br, c128, NULL);                              /* too long */
    expect_route(br, "{\"user_id\":\"\"}", NULL);              /* empty */
    expect_route(br, "{\"user_id\":\"a\\u0000b\"}", NULL);     /* a NUL: jansson refuses it */
    expect_route(br, "{\"uid\":\"alice\"}", NULL);             /* missing */
    expect_route(br, "{\"User_id\":\"alice\"}", NULL);         /* field names are exact */
    expect_route(br, "{\"x\":{\"user_id\":\"alice\"}}", NULL); /* top level only */
    expect_route(br, "{\"user_id\":{\"id\":1}}", NULL);
    expect_route(br, "{\"user_id\":[1]}", NULL);
    expect_route(br, "{\"user_id\":true}", NULL);
    expect_route(br, "{\"user_id\":null}", NULL);
    expect_route(br, "{\"user_id\":1.5}", NULL);
    expect_route(br, "[{\"user_id\":\"alice\"}]", NULL); /* not an object */
    expect_route(br, "\"alice\"", NULL);
    expect_route(br, "user_id=alice", NULL); /* not JSON */
    expect_route(br, "{\"user_id\":\"alice\"", NULL);
    expect_route(br, "", NULL);
    expect_route(br, "{\"user_id\":\"a\",\"user_id\":\"b\"}", NULL); /* which one? neither */
    expect_stats(br, 24, 7, 0, 17);
    cq_bridge_free(br);
}

static void test_engine_route_and_broadcast(void **state)
{
    (void)state;
    cq_bridge_t *br =
        bridge_of("{\"bindings\":[{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201},"
                  "{\"topic\":\"vip\",\"broadcast\":\"topic\",\"msg_type\":202},"
                  "{\"topic\":\"vip\",\"route\":\"guild\",\"msg_type\":203}]}",
                  16);
    const cq_bindings_t *b = cq_bridge_bindings(br);
    cq_bridge_out_t out[3];
    /* both routes apply: outputs in the bindings' order, each with its own key */
    cq_topic_event_t ev = ev_of("vip", NULL, 0, "{\"user_id\":\"u1\",\"guild\":77}");
    assert_int_equal(cq_bridge_event(br, &ev, out, 3), 3);
    assert_ptr_equal(out[0].b, &b->v[0]);
    assert_string_equal(out[0].key, "u1");
    assert_ptr_equal(out[1].b, &b->v[1]);
    assert_string_equal(out[1].key, "");
    assert_ptr_equal(out[2].b, &b->v[2]);
    assert_string_equal(out[2].key, "77");
    assert_int_equal(cq_buf_refs(out[0].event), 3);
    for (int i = 0; i < 3; i++)
        cq_buf_unref(out[i].event);
    /* one route does not apply: the others still do */
    ev = ev_of("vip", NULL, 0, "{\"guild\":\"g\"}");
    assert_int_equal(cq_bridge_event(br, &ev, out, 3), 2);
    assert_ptr_equal(out[0].b, &b->v[1]);
    assert_ptr_equal(out[1].b, &b->v[2]);
    assert_string_equal(out[1].key, "g");
    assert_ptr_equal(out[0].event, out[1].event);
    assert_int_equal(cq_buf_refs(out[0].event), 2);
    cq_buf_unref(out[0].event);
    cq_buf_unref(out[1].event);
    /* not JSON: the broadcast only */
    long live = cq_buf_live();
    ev = ev_of("vip", NULL, 0, "plain text");
    assert_int_equal(cq_bridge_event(br, &ev, out, 3), 1);
    assert_ptr_equal(out[0].b, &b->v[1]);
    assert_int_equal(cq_buf_refs(out[0].event), 1);
    cq_buf_unref(out[0].event);
    assert_int_equal(cq_buf_live(), live);
    expect_stats(br, 3, 6, 0, 3);
    cq_bridge_free(br);
}

static void test_engine_no_output_no_buffer(void **state)
{
    (void)state;
    cq_bridge_t *br = bridge_of(
        "{\"bindings\":[{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201}]}", 16);
    long live = cq_buf_live();
    cq_topic_event_t ev = ev_of("vip", "p", 1, "{}");
    event_n(br, &ev, 0);
    assert_int_equal(cq_buf_live(), live);
    /* the event was seen all the same: its copy is a duplicate */
    event_n(br, &ev, 0);
    expect_stats(br, 2, 0, 1, 1);
    cq_bridge_free(br);
}

/* ---- the engine: dedup ------------------------------------------------------------------- */

static const char two_topics[] =
    "{\"bindings\":[{\"topic\":\"a\",\"broadcast\":\"global\",\"msg_type\":200},"
    "{\"topic\":\"b\",\"broadcast\":\"global\",\"msg_type\":201}]}";

static void test_dedup_window(void **state)
{
    (void)state;
    cq_bridge_t *br = bridge_of(two_topics, 3);
    cq_topic_event_t ev = ev_of("a", "p1", 1, "x");
    event_n(br, &ev, 1);
    /* the copy (another shard, another offset) is dropped, and writes nothing */
    cq_topic_event_t copy = ev;
    copy.shard = 1;
    copy.offset = 99;
    cq_bridge_out_t out[1];
    memset(out, 0x5a, sizeof(out));
    assert_int_equal(cq_bridge_event(br, &copy, out, 1), 0);
    assert_ptr_equal(out[0].event, (void *)0x5a5a5a5a5a5a5a5aULL);
    expect_stats(br, 2, 1, 1, 0);
    /* the topic compares case-insensitively: still a duplicate */
    cq_topic_event_t upper = ev_of("A", "p1", 1, "x");
    event_n(br, &upper, 0);
    /* another topic, another producer, another seq: not duplicates */
    cq_topic_event_t other = ev_of("b", "p1", 1, "x");
    event_n(br, &other, 1);
    cq_topic_event_t p2 = ev_of("a", "p2", 1, "x");
    event_n(br, &p2, 1);
    cq_topic_event_t s2 = ev_of("a", "p1", 2, "x");
    event_n(br, &s2, 1);
    cq_topic_event_t prefix = ev_of("a", "p", 11, "x"); /* ("p", 11) is not ("p1", 1) */
    event_n(br, &prefix, 1);
    expect_stats(br, 7, 5, 2, 0);
    /* topic a's window (3) now holds (p2,1), (p1,2), (p,11): (p1,1) is out of it and accepted
     * again, which pushes (p2,1) out, and (p2,1) back pushes (p1,2) out */
    event_n(br, &ev, 1);
    event_n(br, &s2, 0);
    event_n(br, &ev, 0);
    event_n(br, &p2, 1);
    event_n(br, &s2, 1);
    /* topic b kept its own window */
    event_n(br, &other, 0);
    expect_stats(br, 13, 8, 5, 0);
    cq_bridge_free(br);
}

/* Delivers ev (one output) and returns the prev_offset it was encoded with, checked against the
 * encoded bytes. */
static uint64_t delivered_prev(cq_bridge_t *br, const cq_topic_event_t *ev)
{
    cq_bridge_out_t out[1];
    assert_int_equal(cq_bridge_event(br, ev, out, 1), 1);
    Chanqpb__TopicEvent *te =
        chanqpb__topic_event__unpack(NULL, out[0].event->len, out[0].event->data);
    assert_non_null(te);
    assert_int_equal(te->prev_offset, out[0].prev_offset);
    uint64_t prev = te->prev_offset;
    chanqpb__topic_event__free_unpacked(te, NULL);
    cq_buf_unref(out[0].event);
    return prev;
}

static cq_topic_event_t at(const char *pid, uint64_t seq, uint32_t shard, uint64_t off,
                           uint64_t prev)
{
    cq_topic_event_t ev = ev_of("a", pid, seq, "x");
    ev.shard = shard;
    ev.offset = off;
    ev.prev_offset = prev;
    return ev;
}

/* A dropped copy leaves no hole: the shard's next event names, as its prev_offset, the last
 * event of that shard the bridge delivered. Two copies in a row are skipped together; the
 * other shards and a shard's later events are left as they are. */
static void test_dedup_no_hole(void **state)
{
    (void)state;
    cq_bridge_t *br = bridge_of(two_topics, 64);
    cq_topic_event_t e;
    e = at("p", 1, 1, 10, 5);
    assert_int_equal(delivered_prev(br, &e), 5);
    e = at("p", 2, 2, 20, 15);
    assert_int_equal(delivered_prev(br, &e), 15);
    e = at("p", 1, 2, 21, 20); /* the copy of (p,1) on shard 2: dropped */
    event_n(br, &e, 0);
    e = at("p", 3, 1, 11, 10); /* shard 1 is not touched */
    assert_int_equal(delivered_prev(br, &e), 10);
    e = at("p", 3, 2, 22, 21); /* and (p,3) on shard 2 after it: a copy too */
    event_n(br, &e, 0);
    e = at("p", 4, 2, 23, 22); /* the next of shard 2 follows 20, the last delivered */
    assert_int_equal(delivered_prev(br, &e), 20);
    e = at("p", 5, 2, 24, 23); /* from then on, as it comes */
    assert_int_equal(delivered_prev(br, &e), 23);
    /* a copy whose next event does not name it (a gap the receiver must see) keeps that gap */
    e = at("p", 4, 2, 30, 24);
    event_n(br, &e, 0);
    e = at("p", 6, 2, 40, 35);
    assert_int_equal(delivered_prev(br, &e), 35);
    cq_bridge_free(br);
}

static void test_dedup_empty_producer(void **state)
{
    (void)state;
    cq_bridge_t *br = bridge_of(two_topics, 3);
    cq_topic_event_t empty = ev_of("a", "", 5, "x");
    cq_topic_event_t none = ev_of("a", NULL, 5, "x");
    for (int i = 0; i < 4; i++) {
        event_n(br, &empty, 1);
        event_n(br, &none, 1);
    }
    /* keyless events take no room in the window */
    cq_topic_event_t k = ev_of("a", "p", 1, "x");
    event_n(br, &k, 1);
    for (int i = 0; i < 4; i++)
        event_n(br, &empty, 1);
    event_n(br, &k, 0);
    expect_stats(br, 14, 13, 1, 0);
    cq_bridge_free(br);
    /* window 0: deduplication off */
    br = bridge_of(two_topics, 0);
    event_n(br, &k, 1);
    event_n(br, &k, 1);
    expect_stats(br, 2, 2, 0, 0);
    cq_bridge_free(br);
}

/* Keys whose 32-bit hashes collide (dedup.c's key_hash, found by brute force; if the hash
 * changes they no longer collide and this only checks distinct keys): the window compares the
 * keys themselves, so neither is taken for the other. */
static void test_dedup_hash_collisions(void **state)
{
    (void)state;
    cq_bridge_t *br = bridge_of(two_topics, 16);
    cq_topic_event_t s1 = ev_of("a", "p", 7763552665091384ULL, "x");
    cq_topic_event_t s2 = ev_of("a", "p", 889808344426153ULL, "x");
    cq_topic_event_t i1 = ev_of("a", "60042084", 1, "x");
    cq_topic_event_t i2 = ev_of("a", "30569087", 1, "x");
    event_n(br, &s1, 1);
    event_n(br, &s2, 1);
    event_n(br, &i1, 1);
    event_n(br, &i2, 1);
    event_n(br, &s1, 0);
    event_n(br, &s2, 0);
    event_n(br, &i1, 0);
    event_n(br, &i2, 0);
    expect_stats(br, 8, 4, 4, 0);
    cq_bridge_free(br);
}

/* The ring and its hash index against a naive model (the last `window` keys in a plain array):
 * few producers and seqs, so the same keys come back at every distance from the window's edge
 * and chains are evicted from in every position. */
static void dedup_model_run(uint32_t window, uint32_t nprod, uint32_t nseq, int rounds)
{
    cq_bridge_t *br = bridge_of(two_topics, window);
    char(*ids)[8] = calloc(window, sizeof(*ids));
    uint64_t *seqs = calloc(window, sizeof(*seqs));
    assert_true(ids && seqs);
    uint32_t head = 0, count = 0;
    uint64_t rng = 0x9e3779b97f4a7c15ULL, dups = 0;
    for (int i = 0; i < rounds; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        char id[8];
        snprintf(id, sizeof(id), "p%u", (unsigned)(rng % nprod));
        uint64_t seq = (rng >> 20) % nseq;
        bool seen = false;
        for (uint32_t j = 0; j < count && !seen; j++) {
            uint32_t at = (head + j) % window;
            seen = seqs[at] == seq && strcmp(ids[at], id) == 0;
        }
        cq_topic_event_t ev = ev_of("a", id, seq, "x");
        event_n(br, &ev, seen ? 0 : 1);
        if (seen) {
            dups++;
            continue;
        }
        uint32_t at = count == window ? head : (head + count) % window;
        if (count == window)
            head = (head + 1) % window;
        else
            count++;
        memcpy(ids[at], id, sizeof(id));
        seqs[at] = seq;
    }
    cq_bridge_stats_t st;
    cq_bridge_stats(br, &st);
    assert_int_equal(st.duplicates, dups);
    assert_true(dups > (uint64_t)rounds / 10 && dups < (uint64_t)rounds * 9 / 10);
    free(ids);
    free(seqs);
    cq_bridge_free(br);
}

static void test_dedup_model(void **state)
{
    (void)state;
    dedup_model_run(1, 2, 3, 2000);
    dedup_model_run(7, 3, 8, 20000);
    dedup_model_run(64, 5, 40, 50000);
    dedup_model_run(1000, 7, 400, 50000);
}

static void test_dedup_window_bound(void **state)
{
    (void)state;
    /* a window above the bound is the bound: CQ_BRIDGE_DEDUP_MAX + 1 keys later, the first is
     * accepted again */
    cq_bridge_t *br = bridge_of(two_topics, UINT32_MAX);
    char id[16];
    for (uint32_t i = 0; i <= CQ_BRIDGE_DEDUP_MAX; i++) {
        snprintf(id, sizeof(id), "p%u", i);
        cq_topic_event_t ev = ev_of("a", id, 1, NULL);
        event_n(br, &ev, 1);
    }
    cq_topic_event_t again = ev_of("a", "p1", 1, NULL);
    event_n(br, &again, 0);
    cq_topic_event_t first = ev_of("a", "p0", 1, NULL);
    event_n(br, &first, 1);
    cq_bridge_free(br);
}

/* ---- the engine: errors ------------------------------------------------------------------ */

static void test_engine_errors(void **state)
{
    (void)state;
    cq_bridge_t *br =
        bridge_of("{\"bindings\":[{\"topic\":\"a\",\"broadcast\":\"global\",\"msg_type\":200},"
                  "{\"topic\":\"a\",\"broadcast\":\"topic\",\"msg_type\":201}]}",
                  8);
    long live = cq_buf_live();
    cq_bridge_out_t out[2];
    assert_int_equal(cq_bridge_event(br, NULL, out, 2), -EINVAL);
    cq_topic_event_t ev = ev_of(NULL, "p", 1, "x");
    assert_int_equal(cq_bridge_event(br, &ev, out, 2), -EINVAL);
    ev = ev_of("a", "p", 1, NULL);
    ev.len = 1;
    assert_int_equal(cq_bridge_event(br, &ev, out, 2), -EINVAL);
    char id[CQ_BRIDGE_PRODUCER_MAX + 2];
    memset(id, 'i', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    ev = ev_of("a", id, 1, "x");
    assert_int_equal(cq_bridge_event(br, &ev, out, 2), CQ_EFIELD);
    ev = ev_of("a", "p", 1, "x");
    assert_int_equal(cq_bridge_event(br, &ev, out, 1), -ENOSPC);
    /* nothing was counted or remembered */
    expect_stats(br, 0, 0, 0, 0);
    assert_int_equal(cq_buf_live(), live);
    event_n(br, &ev, 2);
    /* the longest producer id is accepted, and deduplicated */
    id[CQ_BRIDGE_PRODUCER_MAX] = '\0';
    ev = ev_of("a", id, 1, "x");
    event_n(br, &ev, 2);
    event_n(br, &ev, 0);
    /* an unbound topic: 0, nothing counted, even with a small cap */
    ev = ev_of("b", "p", 1, "x");
    assert_int_equal(cq_bridge_event(br, &ev, out, 0), 0);
    expect_stats(br, 3, 4, 1, 0);
    cq_bridge_free(br);
}

/* The whole life under a failing allocator: parse, new, a keyed event that needs the window,
 * the content and the encode, then its copy. An event that fails leaves no trace: the same
 * event right after (with allocation N behind us) yields its outputs, not a duplicate. */
static int failn_round(void)
{
    cq_bindings_t b = {NULL, 0};
    static const char doc[] =
        "{\"bindings\":[{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201},"
        "{\"topic\":\"vip\",\"broadcast\":\"topic\",\"msg_type\":202}]}";
    int rc = cq_bindings_parse(doc, strlen(doc), &b, NULL, 0);
    if (rc < 0)
        return rc;
    cq_bridge_t *br = cq_bridge_new(&b, 4);
    assert_null(b.v);
    if (!br)
        return -ENOMEM;
    cq_topic_event_t ev = ev_of("vip", "p", 1, "{\"user_id\":\"alice\",\"n\":[1,2,3]}");
    cq_bridge_out_t out[2];
    rc = cq_bridge_event(br, &ev, out, 2);
    bool failed = rc == -ENOMEM;
    if (failed) {
        expect_stats(br, 0, 0, 0, 0);
        rc = cq_bridge_event(br, &ev, out, 2);
    }
    assert_int_equal(rc, 2);
    assert_string_equal(out[0].key, "alice");
    cq_buf_unref(out[0].event);
    cq_buf_unref(out[1].event);
    assert_int_equal(cq_bridge_event(br, &ev, out, 2), 0);
    expect_stats(br, 2, 2, 1, 0);
    cq_bridge_free(br);
    return failed ? -ENOMEM : 0;
}

static void test_engine_fail_n(void **state)
{
    (void)state;
    unsigned long n;
    for (n = 1;; n++) {
        long live = cq_buf_live();
        test_alloc_install(n, false);
        int rc = failn_round();
        assert_int_equal(cq_buf_live(), live);
        if (failn_end(n, rc))
            break;
    }
    assert_true(n > 15);
}

int main(void)
{
    json_set_alloc_funcs(cq_malloc, cq_free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_example),
        cmocka_unit_test(test_parse_bounds_accepted),
        cmocka_unit_test(test_parse_document_refusals),
        cmocka_unit_test(test_parse_binding_refusals),
        cmocka_unit_test(test_parse_duplicates),
        cmocka_unit_test(test_parse_fail_n),
        cmocka_unit_test(test_event_bytes),
        cmocka_unit_test(test_event_decodes_back),
        cmocka_unit_test(test_event_encode_fail),
        cmocka_unit_test(test_engine_topics),
        cmocka_unit_test(test_engine_shared_encode),
        cmocka_unit_test(test_engine_route_keys),
        cmocka_unit_test(test_engine_route_and_broadcast),
        cmocka_unit_test(test_engine_no_output_no_buffer),
        cmocka_unit_test(test_dedup_window),
        cmocka_unit_test(test_dedup_no_hole),
        cmocka_unit_test(test_dedup_empty_producer),
        cmocka_unit_test(test_dedup_hash_collisions),
        cmocka_unit_test(test_dedup_model),
        cmocka_unit_test(test_dedup_window_bound),
        cmocka_unit_test(test_engine_errors),
        cmocka_unit_test(test_engine_fail_n),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
