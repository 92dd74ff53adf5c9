/* tests/unit/mq: the seed protocol codec (src/mq, doc/protocol-mq.md).
 *
 * Habits from style.md §12: every prefix and two-way split of valid frames, every error path
 * with its exact code and message, and a fail-N allocation loop in which jansson allocates
 * through cq_malloc too (json_set_alloc_funcs in main). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_mq.h"
#include "test_alloc.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------------------- */

/* Returns a frame (malloc'd; free()) of type with msg_id and the given JSON body. */
static uint8_t *mkframe(uint8_t type, uint16_t msg_id, const char *json, size_t *len)
{
    size_t body = strlen(json);
    uint8_t *p = malloc(CQ_MQ_HDR_LEN + body);
    assert_non_null(p);
    cq_mq_header_write(p, (uint32_t)(CQ_MQ_HDR_LEN + body), type, msg_id);
    memcpy(p + CQ_MQ_HDR_LEN, json, body);
    *len = CQ_MQ_HDR_LEN + body;
    return p;
}

static int decode_lim(uint8_t type, const char *json, const cq_mq_limits_t *lim, cq_mq_msg_t **ret,
                      char *err, size_t errlen)
{
    cq_mq_frame_t f = {(const uint8_t *)json, (uint32_t)strlen(json), 7, type};
    return cq_mq_decode(&f, lim, ret, err, errlen);
}

static cq_mq_msg_t *decode_ok(uint8_t type, const char *json)
{
    cq_mq_msg_t *m = NULL;
    char err[256] = "";
    int rc = decode_lim(type, json, NULL, &m, err, sizeof(err));
    if (rc != 0)
        fail_msg("decode %s: %d %s", json, rc, err);
    assert_non_null(m);
    assert_int_equal(m->type, type);
    assert_int_equal(m->msg_id, 7);
    return m;
}

/* Decoding must fail with code and exactly the message want (when want is not NULL). */
static void expect_err_lim(uint8_t type, const char *json, const cq_mq_limits_t *lim, int code,
                           const char *want)
{
    cq_mq_msg_t *m = (cq_mq_msg_t *)(uintptr_t)0x1; /* must stay untouched */
    char err[512] = "";
    int rc = decode_lim(type, json, lim, &m, err, sizeof(err));
    if (rc != code)
        fail_msg("%s: got %d (%s) want %d", json, rc, err, code);
    assert_ptr_equal(m, (cq_mq_msg_t *)(uintptr_t)0x1);
    if (want && strcmp(err, want) != 0)
        fail_msg("%s:\n  got  \"%s\"\n  want \"%s\"", json, err, want);
}

static void expect_err(uint8_t type, const char *json, int code, const char *want)
{
    expect_err_lim(type, json, NULL, code, want);
}

/* encode(m) parses and decodes back to a message that encodes to the same bytes. */
static void roundtrip(const cq_mq_msg_t *m, const cq_mq_limits_t *lim)
{
    uint8_t *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    assert_int_equal(cq_mq_encode(m, &a, &alen), 0);
    cq_mq_frame_t f;
    assert_int_equal(cq_mq_parse(a, alen, lim ? lim->max_total : 0, &f), (ssize_t)alen);
    assert_int_equal(f.type, m->type);
    assert_int_equal(f.msg_id, m->msg_id);
    cq_mq_msg_t *d = NULL, *j = NULL;
    char err[256] = "";
    int rc = cq_mq_decode(&f, lim, &d, err, sizeof(err));
    if (rc)
        fail_msg("round trip of %.*s: %d %s", (int)f.body_len, (const char *)f.body, rc, err);
    assert_int_equal(cq__mq_decode_jansson(&f, lim, &j, err, sizeof(err)), 0);
    assert_int_equal(j->has, d->has);
    assert_int_equal(cq_mq_encode(j, &b, &blen), 0);
    assert_int_equal(alen, blen);
    assert_memory_equal(a, b, alen);
    cq_free(b);
    cq_mq_msg_free(j);
    assert_int_equal(cq_mq_encode(d, &b, &blen), 0);
    assert_int_equal(alen, blen);
    assert_memory_equal(a, b, alen);
    cq_free(b);
    /* the direct writer and the jansson path give the same bytes */
    assert_int_equal(cq__mq_encode_jansson(m, &b, &blen), 0);
    assert_int_equal(alen, blen);
    assert_memory_equal(a, b, alen);
    /* and so does the encoder into a refcounted buffer */
    cq_buf_t *buf = NULL;
    assert_int_equal(cq_mq_encode_buf(m, &buf), 0);
    assert_int_equal(buf->len, alen);
    assert_int_equal(cq_buf_refs(buf), 1);
    assert_memory_equal(buf->data, a, alen);
    cq_buf_unref(buf);
    cq_mq_msg_free(d);
    cq_free(a);
    cq_free(b);
}

/* ---- header and frame parser ----------------------------------------------------------- */

static void test_header_layout(void **state)
{
    (void)state;
    uint8_t h[CQ_MQ_HDR_LEN];
    cq_mq_header_write(h, 0x01020304u, CQ_MQ_REQ_PRODUCE, 0xBEEF);
    static const uint8_t want[CQ_MQ_HDR_LEN] = {0x01, 0x02, 0x03, 0x04, 0x00, 0x0C,
                                                0x01, 0x0B, 0x00, 0xBE, 0xEF, 0x00};
    assert_memory_equal(h, want, sizeof(want));

    size_t n;
    uint8_t *p = mkframe(CQ_MQ_REQ_KEEPALIVE, 0x1234, "{\"askid\":1}", &n);
    static const uint8_t hdr[] = {0, 0, 0, 23, 0, 12, 1, 3, 0, 0x12, 0x34, 0};
    assert_memory_equal(p, hdr, sizeof(hdr));
    cq_mq_frame_t f;
    assert_int_equal(cq_mq_parse(p, n, 0, &f), 23);
    assert_ptr_equal(f.body, p + 12);
    assert_int_equal(f.body_len, 11);
    assert_int_equal(f.type, CQ_MQ_REQ_KEEPALIVE);
    assert_int_equal(f.msg_id, 0x1234);
    /* Its exact length is the smallest limit that admits it. */
    assert_int_equal(cq_mq_parse(p, n, 23, &f), 23);
    assert_int_equal(cq_mq_parse(p, n, 22, &f), CQ_EBADLEN);
    free(p);
}

static const char *valid_bodies[][2] = {
    {"\x01", "{\"askid\":1,\"client_type\":1,\"module_id\":2,\"token\":\"s3cret\"}"},
    {"\x03", "{\"askid\":10,\"client_id\":1}"},
    {"\x05", "{\"askid\":10,\"topic\":\"xx_topic\",\"client_id\":1}"},
    {"\x07", "{\"askid\":10,\"topic\":\"xx_topic\"}"},
    {"\x09", "{\"askid\":10,\"topic\":\"xx_topic\"}"},
    {"\x0b", "{\"askid\":1,\"topic\":\"xx_topic\",\"time\":12910212,\"content\":{\"v\":\"1.2\"}}"},
    {"\x0d", "{\"askid\":1,\"topic\":\"xx_topic\",\"offset\":10,\"max_count\":5}"},
    {"\x0f", "{\"askid\":1,\"topic\":\"xx_topic\",\"offset\":1002}"},
    {"\x0e", "{\"askid\":1,\"err_code\":0,\"topic\":\"t\",\"total\":1000,\"offset\":1002,"
             "\"messages\":[{\"offset_id\":1001,\"message\":\"a\"},"
             "{\"offset_id\":1002,\"message\":{\"b\":[1,2]}}],\"message_count\":2}"},
};
#define NVALID (sizeof(valid_bodies) / sizeof(valid_bodies[0]))

static void test_every_prefix(void **state)
{
    (void)state;
    for (size_t i = 0; i < NVALID; i++) {
        size_t n;
        uint8_t *p = mkframe((uint8_t)valid_bodies[i][0][0], 9, valid_bodies[i][1], &n);
        for (size_t k = 0; k < n; k++) {
            cq_mq_frame_t f = {NULL, 0xdead, 0xbeef, 0x77};
            assert_int_equal(cq_mq_parse(p, k, 0, &f), 0);
            assert_null(f.body); /* *ret is written only on success */
            assert_int_equal(f.body_len, 0xdead);
        }
        cq_mq_frame_t f;
        assert_int_equal(cq_mq_parse(p, n, 0, &f), (ssize_t)n);
        cq_mq_msg_t *m = NULL;
        assert_int_equal(cq_mq_decode(&f, NULL, &m, NULL, 0), 0);
        cq_mq_msg_free(m);
        free(p);
    }
}

/* Two frames back to back, fed through an accumulator split at every point. */
static void test_every_split(void **state)
{
    (void)state;
    for (size_t i = 0; i + 1 < NVALID; i++) {
        size_t n1, n2;
        uint8_t *a = mkframe((uint8_t)valid_bodies[i][0][0], 1, valid_bodies[i][1], &n1);
        uint8_t *b = mkframe((uint8_t)valid_bodies[i + 1][0][0], 2, valid_bodies[i + 1][1], &n2);
        size_t n = n1 + n2;
        uint8_t *all = malloc(n), *acc = malloc(n);
        memcpy(all, a, n1);
        memcpy(all + n1, b, n2);
        for (size_t cut = 0; cut <= n; cut++) {
            size_t have = 0, got = 0, base = 0;
            size_t chunks[2] = {cut, n - cut};
            size_t in = 0;
            for (int c = 0; c < 2; c++) {
                memcpy(acc + have, all + in, chunks[c]);
                have += chunks[c];
                in += chunks[c];
                cq_mq_frame_t f;
                ssize_t r;
                size_t off = 0;
                while ((r = cq_mq_parse(acc + off, have - off, 0, &f)) > 0) {
                    assert_int_equal(f.msg_id, got + 1);
                    assert_int_equal(base + off, got ? n1 : 0);
                    off += (size_t)r;
                    got++;
                }
                assert_int_equal(r, 0);
                memmove(acc, acc + off, have - off);
                have -= off;
                base += off;
            }
            assert_int_equal(got, 2);
            assert_int_equal(have, 0);
        }
        free(a);
        free(b);
        free(all);
        free(acc);
    }
}

static void expect_parse(const uint8_t *h, size_t n, uint32_t max, ssize_t want)
{
    cq_mq_frame_t f;
    assert_int_equal(cq_mq_parse(h, n, max, &f), want);
}

static void test_header_errors(void **state)
{
    (void)state;
    uint8_t h[CQ_MQ_HDR_LEN + 2];
    cq_mq_header_write(h, sizeof(h), 5, 0);
    memcpy(h + CQ_MQ_HDR_LEN, "{}", 2);
    expect_parse(h, sizeof(h), 0, (ssize_t)sizeof(h)); /* the shortest frame */
    /* Total length: decided by the first four bytes, before any body arrives. */
    uint8_t t[CQ_MQ_HDR_LEN];
    for (uint32_t total = 0; total < CQ_MQ_MIN_TOTAL; total++) {
        cq_mq_header_write(h, total, 5, 0);
        expect_parse(h, 3, 0, 0);
        expect_parse(h, 4, 0, CQ_EBADLEN);
        expect_parse(h, sizeof(h), 0, CQ_EBADLEN);
    }
    cq_mq_header_write(t, CQ_MQ_DEFAULT_MAX_TOTAL + 1, 5, 0);
    expect_parse(t, 4, 0, CQ_EBADLEN);
    cq_mq_header_write(t, CQ_MQ_DEFAULT_MAX_TOTAL, 5, 0);
    expect_parse(t, 4, 0, 0); /* needs the rest */
    cq_mq_header_write(t, 0xffffffffu, 5, 0);
    expect_parse(t, 4, 0xffffffffu, 0); /* a caller may allow 4 GiB; nothing is allocated */
    cq_mq_header_write(t, 100, 5, 0);
    expect_parse(t, 4, 99, CQ_EBADLEN);
    expect_parse(t, 4, 1, CQ_EBADLEN); /* limits below 14 are raised to 14 */
    /* Each other header byte: an error as soon as it is there. */
    static const struct {
        size_t at;
        uint8_t bad;
    } cases[] = {{5, 11}, {5, 13}, {4, 1}, {6, 0}, {6, 2}, {8, 1}, {8, 0xff}, {11, 1}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cq_mq_header_write(h, sizeof(h), 5, 0);
        h[cases[i].at] = cases[i].bad;
        size_t decided = cases[i].at < 6 ? 6 : cases[i].at + 1;
        expect_parse(h, decided - 1, 0, 0);
        expect_parse(h, decided, 0, CQ_EHEADER);
        expect_parse(h, sizeof(h), 0, CQ_EHEADER);
    }
    /* Type and message id are not the parser's business. */
    for (unsigned type = 0; type < 256; type += 51) {
        cq_mq_header_write(h, sizeof(h), (uint8_t)type, 0xffff);
        expect_parse(h, sizeof(h), 0, (ssize_t)sizeof(h));
    }
}

/* ---- round trips ----------------------------------------------------------------------- */

static cq_mq_msg_t *msg(uint8_t type)
{
    cq_mq_msg_t *m = cq_mq_msg_new(type, 42);
    assert_non_null(m);
    m->askid = 4000000000u;
    m->has |= CQ_MQ_F_ASKID;
    return m;
}

static void set_topic(cq_mq_msg_t *m, const char *t)
{
    assert_int_equal(cq_mq_msg_set_topic(m, t), 0);
}

static void test_roundtrip_requests(void **state)
{
    (void)state;
    cq_mq_msg_t *m = msg(CQ_MQ_REQ_CONNECT);
    m->client_type = CQ_MQ_CONSUMER;
    m->module_id = 7;
    m->has |= CQ_MQ_F_CLIENT_TYPE | CQ_MQ_F_MODULE_ID;
    assert_int_equal(cq_mq_msg_set_str(m, CQ_MQ_F_TOKEN, "t\xc3\xa9st"), 0);
    roundtrip(m, NULL);
    cq_mq_msg_free(m);

    static const uint8_t topic_types[] = {CQ_MQ_REQ_ADD_TOPIC, CQ_MQ_REQ_WATCH, CQ_MQ_REQ_UNWATCH,
                                          CQ_MQ_REQ_KEEPALIVE};
    for (size_t i = 0; i < sizeof(topic_types); i++) {
        m = msg(topic_types[i]);
        if (topic_types[i] != CQ_MQ_REQ_KEEPALIVE)
            set_topic(m, "version_publish");
        m->client_id = CQ_MQ_MAX_U53;
        m->has |= CQ_MQ_F_CLIENT_ID;
        roundtrip(m, NULL);
        cq_mq_msg_free(m);
    }

    m = msg(CQ_MQ_REQ_PRODUCE); /* single, idempotent */
    set_topic(m, "vip_topup");
    m->producer_id = 99;
    m->seq = 0;
    m->time = 12910212;
    m->has |= CQ_MQ_F_PRODUCER_ID | CQ_MQ_F_SEQ | CQ_MQ_F_TIME | CQ_MQ_F_CONTENT;
    const char *obj = "{\"game_id\":10,\"game_name\":\"xx \xe6\xb8\xb8\xe6\x88\x8f\"}";
    assert_int_equal(cq_mq_msg_add_item(m, 0, -1, obj, strlen(obj), true), 0);
    roundtrip(m, NULL);
    cq_mq_msg_free(m);

    m = msg(CQ_MQ_REQ_PRODUCE); /* batch */
    set_topic(m, "T_1");
    m->has |= CQ_MQ_F_BATCH;
    for (int i = 0; i < 5; i++)
        assert_int_equal(cq_mq_msg_add_item(m, 0, i == 2 ? -1 : i, "x\"y\\", 4, false), 0);
    assert_int_equal(cq_mq_msg_add_item(m, 0, 3, "{}", 2, true), 0);
    roundtrip(m, NULL);
    cq_mq_msg_free(m);

    m = msg(CQ_MQ_REQ_CONSUME);
    set_topic(m, "t");
    m->offset = 0;
    m->max_count = 1000;
    m->has |= CQ_MQ_F_OFFSET | CQ_MQ_F_MAX_COUNT;
    roundtrip(m, NULL);
    m->type = CQ_MQ_REQ_COMMIT;
    m->has &= ~(uint32_t)CQ_MQ_F_MAX_COUNT;
    roundtrip(m, NULL);
    assert_int_equal(cq_mq_msg_set_str(m, CQ_MQ_F_INSTANCE, "vip-1"), 0);
    roundtrip(m, NULL);
    m->type = CQ_MQ_REQ_OFFSET;
    m->has &= ~(uint32_t)CQ_MQ_F_OFFSET;
    roundtrip(m, NULL);
    cq_mq_msg_free(m);
}

static void test_roundtrip_responses(void **state)
{
    (void)state;
    cq_mq_msg_t *req = decode_ok(CQ_MQ_REQ_CONSUME, "{\"askid\":5,\"topic\":\"abc\","
                                                    "\"client_id\":3,\"offset\":1000}");
    cq_mq_msg_t *r = cq_mq_resp_new(req, 0, NULL);
    assert_non_null(r);
    assert_int_equal(r->type, CQ_MQ_RESP_CONSUME);
    assert_int_equal(r->msg_id, 7);
    assert_int_equal(r->askid, 5);
    assert_string_equal(r->topic, "abc");
    assert_int_equal(r->client_id, 3);
    assert_int_equal(r->err_code, 0);
    assert_false(r->has & CQ_MQ_F_ERR_MSG);
    r->total = 1002;
    r->offset = 1002;
    r->has |= CQ_MQ_F_TOTAL | CQ_MQ_F_OFFSET | CQ_MQ_F_MESSAGES;
    assert_int_equal(cq_mq_msg_add_item(r, 1001, 5, "{version=\"1.2\"; }", 17, false), 0);
    assert_int_equal(cq_mq_msg_add_item(r, 1002, -1, "{\"v\":1.5}", 9, true), 0);
    roundtrip(r, NULL);
    uint8_t *out;
    size_t n;
    assert_int_equal(cq_mq_encode(r, &out, &n), 0);
    static const char want[] =
        "{\"askid\":5,\"client_id\":3,\"topic\":\"abc\",\"err_code\":0,\"total\":1002,"
        "\"offset\":1002,\"messages\":[{\"offset_id\":1001,\"message\":\"{version=\\\"1.2\\\"; "
        "}\",\"time\":5},{\"offset_id\":1002,\"message\":{\"v\":1.5}}],\"message_count\":2}";
    assert_int_equal(n, CQ_MQ_HDR_LEN + strlen(want));
    assert_memory_equal(out + CQ_MQ_HDR_LEN, want, strlen(want));
    cq_free(out);
    cq_mq_msg_free(r);
    /* An empty answer is fine and says message_count 0. */
    r = cq_mq_resp_new(req, 0, NULL);
    r->has |= CQ_MQ_F_MESSAGES;
    roundtrip(r, NULL);
    cq_mq_msg_free(r);
    cq_mq_msg_free(req);

    /* Every request type's response, success and failure, echoing what the type carries. */
    for (uint8_t t = 1; t <= 15; t += 2) {
        req = msg(t);
        req->client_id = 11;
        req->client_type = CQ_MQ_PRODUCER;
        req->has |= CQ_MQ_F_CLIENT_ID | CQ_MQ_F_CLIENT_TYPE;
        set_topic(req, "echo_me");
        r = cq_mq_resp_new(req, t == 11 ? CQ_EBUSY : 0, NULL);
        assert_int_equal(r->type, t + 1);
        assert_int_equal(r->askid, 4000000000u);
        if (t == 11) {
            assert_int_equal(r->err_code, CQ_MQ_ERR_BUSY);
            assert_string_equal(r->err_msg, cq_strerror(CQ_EBUSY));
            assert_int_equal(cq_mq_msg_add_offset(r, 17), 0);
            assert_int_equal(cq_mq_msg_add_offset(r, 19), 0);
        }
        r->weight = 10;
        r->topic_nums = 10;
        r->topic_message_total = 1000;
        r->has |= CQ_MQ_F_WEIGHT | CQ_MQ_F_TOPIC_NUMS | CQ_MQ_F_TOPIC_MESSAGE_TOTAL;
        roundtrip(r, NULL);
        cq_mq_msg_free(r);
        cq_mq_msg_free(req);
    }
    /* A push and the generic error answer. */
    r = cq_mq_msg_new(CQ_MQ_PUSH, 0);
    set_topic(r, "t");
    r->has |= CQ_MQ_F_MESSAGES;
    assert_int_equal(cq_mq_msg_add_item(r, 1, 2, "hello", 5, false), 0);
    roundtrip(r, NULL);
    cq_mq_msg_free(r);
    r = cq_mq_msg_new(CQ_MQ_RESP_ERROR, 3);
    r->err_code = CQ_MQ_ERR_UNKNOWN_TYPE;
    r->has |= CQ_MQ_F_ERR_CODE;
    roundtrip(r, NULL);
    cq_mq_msg_free(r);
}

/* The seed's own examples, field for field. */
static void test_decode_seed_examples(void **state)
{
    (void)state;
    cq_mq_msg_t *m = decode_ok(CQ_MQ_REQ_CONNECT, "{\"askid\": 10, \"client_type\": 1, "
                                                  "\"module_id\": 2, \"token\": \"\"}");
    assert_int_equal(m->askid, 10);
    assert_int_equal(m->client_type, CQ_MQ_PRODUCER);
    assert_int_equal(m->module_id, 2);
    assert_string_equal(m->token, "");
    cq_mq_msg_free(m);
    m = decode_ok(CQ_MQ_REQ_PRODUCE, "{\"askid\":1,\"topic\":\"xx_topic\",\"time\":12910212,"
                                     "\"client_id\":1,\"content\":{\n}, \"unknown\": [1]}");
    assert_string_equal(m->topic, "xx_topic");
    assert_int_equal(m->time, 12910212);
    assert_int_equal(m->client_id, 1);
    assert_int_equal(m->nitems, 1);
    assert_string_equal(m->items[0].content, "{}");
    assert_true(m->items[0].json);
    assert_int_equal(m->has, CQ_MQ_F_ASKID | CQ_MQ_F_TOPIC | CQ_MQ_F_TIME | CQ_MQ_F_CLIENT_ID |
                                 CQ_MQ_F_CONTENT);
    cq_mq_msg_free(m);
    m = decode_ok(CQ_MQ_RESP_ADD_TOPIC, "{\"askid\":10,\"topic\":\"xx_topic\",\"err_code\":0,"
                                        "\"topic_message_total\":1000,\"topic_nums\":10}");
    assert_int_equal(m->topic_message_total, 1000);
    assert_int_equal(m->topic_nums, 10);
    cq_mq_msg_free(m);
    m = decode_ok(CQ_MQ_RESP_KEEPALIVE, "{\"askid\":10,\"err_code\":0,\"weight\":10}");
    assert_int_equal(m->weight, 10);
    cq_mq_msg_free(m);
    m = decode_ok(CQ_MQ_REQ_PRODUCE,
                  "{\"askid\":2,\"topic\":\"a\",\"producer_id\":5,\"seq\":9,\"messages\":"
                  "[{\"content\":\"x\",\"time\":3},{\"content\":{\"k\":[true,null]}}]}");
    assert_int_equal(m->nitems, 2);
    assert_int_equal(m->producer_id, 5);
    assert_int_equal(m->seq, 9);
    assert_int_equal(m->items[0].time, 3);
    assert_int_equal(m->items[1].time, -1);
    assert_string_equal(m->items[1].content, "{\"k\":[true,null]}");
    cq_mq_msg_free(m);
}

/* ---- decode errors --------------------------------------------------------------------- */

#define TOPIC_MSG "must be a string matching [A-Za-z0-9_]{1,64}"

static void test_errors_json_and_type(void **state)
{
    (void)state;
    expect_err(0, "{}", CQ_ENOTYPE, "unknown message type 0");
    expect_err(17, "{}", CQ_ENOTYPE, "unknown message type 17");
    expect_err(19, "{}", CQ_ENOTYPE, "unknown message type 19");
    expect_err(25, "{}", CQ_ENOTYPE, "unknown message type 25");
    expect_err(255, "{}", CQ_ENOTYPE, "unknown message type 255");
    expect_err(3, "[]", CQ_EJSON, "keepalive: body must be a JSON object");
    expect_err(3, "1", CQ_EJSON, NULL); /* jansson wants an object or array */
    expect_err(3, "{", CQ_EJSON, NULL);
    expect_err(3, "{\"askid\":1} x", CQ_EJSON, NULL);
    expect_err(
        3, "{\"askid\":1,\"askid\":2}", CQ_EJSON,
        "keepalive: invalid JSON at line 1 column 18: duplicate object key near '\"askid\"'");
    expect_err(3, "{\"askid\":99999999999999999999}", CQ_EJSON, NULL); /* too big integer */
    expect_err(5, "{\"askid\":1,\"topic\":\"a\\u0000b\"}", CQ_EJSON, NULL);
    expect_err(5, "{\"askid\":1,\"topic\":\"\xff\"}", CQ_EJSON, NULL);
    expect_err(3, "", CQ_EJSON, NULL);
}

static void test_errors_fields(void **state)
{
    (void)state;
    expect_err(3, "{}", CQ_EFIELD, "keepalive: field \"askid\": missing");
    expect_err(3, "{\"askid\":\"1\"}", CQ_EFIELD,
               "keepalive: field \"askid\": must be an integer in [0, 4294967295]");
    expect_err(3, "{\"askid\":-1}", CQ_EFIELD, NULL);
    expect_err(3, "{\"askid\":4294967296}", CQ_EFIELD, NULL);
    expect_err(3, "{\"askid\":1.0}", CQ_EFIELD, NULL);
    expect_err(3, "{\"askid\":true}", CQ_EFIELD, NULL);
    expect_err(3, "{\"askid\":null}", CQ_EFIELD, NULL);
    expect_err(3, "{\"askid\":1,\"client_id\":9007199254740992}", CQ_EFIELD,
               "keepalive: field \"client_id\": must be an integer in [0, 9007199254740991]");
    expect_err(1, "{\"askid\":1,\"client_type\":3,\"module_id\":1,\"token\":\"\"}", CQ_EFIELD,
               "connect: field \"client_type\": must be an integer in [1, 2]");
    expect_err(1, "{\"askid\":1,\"client_type\":1,\"token\":\"\"}", CQ_EFIELD,
               "connect: field \"module_id\": missing");
    expect_err(1, "{\"askid\":1,\"client_type\":1,\"module_id\":1}", CQ_EFIELD,
               "connect: field \"token\": missing");
    char big[400];
    snprintf(big, sizeof(big),
             "{\"askid\":1,\"client_type\":1,\"module_id\":1,\"token\":\"%0257d\"}", 0);
    expect_err(1, big, CQ_EFIELD,
               "connect: field \"token\": must be a string of at most 256 bytes");
    expect_err(13, "{\"askid\":1,\"topic\":\"t\"}", CQ_EFIELD,
               "consume: field \"offset\": missing");
    expect_err(13, "{\"askid\":1,\"topic\":\"t\",\"offset\":0,\"max_count\":0}", CQ_EFIELD,
               "consume: field \"max_count\": must be an integer in [1, 4294967295]");
    expect_err(15, "{\"askid\":1,\"topic\":\"t\",\"offset\":-5}", CQ_EFIELD, NULL);
    expect_err(14, "{\"askid\":1}", CQ_EFIELD, "consume_resp: field \"err_code\": missing");
    expect_err(14, "{\"askid\":1,\"err_code\":0,\"message_count\":1}", CQ_EFIELD,
               "consume_resp: field \"message_count\": must equal the number of messages (0)");
    expect_err(14, "{\"askid\":1,\"err_code\":0,\"messages\":[{\"message\":\"a\"}]}", CQ_EFIELD,
               "consume_resp: field \"messages[0].offset_id\": missing");
    expect_err(12, "{\"askid\":1,\"err_code\":0,\"offsets\":[1,\"2\"]}", CQ_EFIELD,
               "produce_resp: field \"offsets[1]\": must be an integer in [0, 9007199254740991]");
    expect_err(18, "{\"topic\":\"t\"}", CQ_EFIELD, "push: field \"messages\": missing");
    expect_err(20, "{\"err_code\":65536}", CQ_EFIELD, NULL);
}

static void test_errors_produce(void **state)
{
    (void)state;
    expect_err(11, "{\"askid\":1,\"topic\":\"t\"}", CQ_EFIELD,
               "produce: field \"content\": exactly one of \"content\" and \"messages\" is "
               "required");
    expect_err(11,
               "{\"askid\":1,\"topic\":\"t\",\"content\":\"a\",\"messages\":[{\"content\":\"b\"}]}",
               CQ_EFIELD, NULL);
    expect_err(11, "{\"askid\":1,\"topic\":\"t\",\"content\":\"a\",\"producer_id\":1}", CQ_EFIELD,
               "produce: field \"seq\": \"producer_id\" and \"seq\" go together");
    expect_err(11, "{\"askid\":1,\"topic\":\"t\",\"content\":\"a\",\"seq\":1}", CQ_EFIELD,
               "produce: field \"producer_id\": \"producer_id\" and \"seq\" go together");
    expect_err(11, "{\"askid\":1,\"topic\":\"t\",\"content\":\"a\",\"producer_id\":0,\"seq\":1}",
               CQ_EFIELD, NULL);
    expect_err(11, "{\"askid\":1,\"topic\":\"t\",\"content\":[1]}", CQ_EFIELD,
               "produce: field \"content\": must be a string or a JSON object");
    expect_err(11, "{\"askid\":1,\"topic\":\"t\",\"content\":null}", CQ_EFIELD, NULL);
    expect_err(11, "{\"askid\":1,\"topic\":\"t\",\"content\":5}", CQ_EFIELD, NULL);
    expect_err(11, "{\"askid\":1,\"topic\":\"t\",\"messages\":[]}", CQ_EFIELD,
               "produce: field \"messages\": must be an array of 1 to 1000 messages");
    expect_err(11, "{\"askid\":1,\"topic\":\"t\",\"messages\":{}}", CQ_EFIELD, NULL);
    expect_err(11, "{\"askid\":1,\"topic\":\"t\",\"messages\":[{\"content\":\"a\"},2]}", CQ_EFIELD,
               "produce: field \"messages[1]\": must be an object");
    expect_err(11, "{\"askid\":1,\"topic\":\"t\",\"messages\":[{\"contnet\":\"a\"}]}", CQ_EFIELD,
               "produce: field \"messages[0].content\": missing");
    expect_err(11, "{\"askid\":1,\"topic\":\"t\",\"messages\":[{\"content\":\"a\",\"time\":-1}]}",
               CQ_EFIELD,
               "produce: field \"messages[0].time\": must be an integer in [0, "
               "9007199254740991]");
    /* The seed's game example says "context"; it is not an alias. */
    expect_err(11, "{\"askid\":1,\"topic\":\"t\",\"context\":{}}", CQ_EFIELD, NULL);
}

static void test_errors_topic(void **state)
{
    (void)state;
    static const char *bad[] = {
        "",
        "a-b",
        "a b",
        "a.b",
        "a'b",
        "a`b",
        "a;b",
        "x; DROP TABLE y",
        "t' OR '1'='1",
        "t`; --",
        "t/*c*/",
        "\\\\x",
        "\\\"q\\\"",
        "\xc3\xa9t\xc3\xa9",
        "a%",
        "0123456789012345678901234567890123456789012345678901234567890123X",
    };
    char json[256], want[256];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        for (uint8_t type = 5; type <= 15; type += 2) {
            snprintf(json, sizeof(json),
                     "{\"askid\":1,\"topic\":\"%s\",\"offset\":1,\"content\":\"c\"}", bad[i]);
            snprintf(want, sizeof(want), "%s: field \"topic\": " TOPIC_MSG, cq_mq_type_name(type));
            expect_err(type, json, CQ_EBADTOPIC, want);
        }
    }
    expect_err(11, "{\"askid\":1,\"topic\":5,\"content\":\"c\"}", CQ_EBADTOPIC,
               "produce: field \"topic\": " TOPIC_MSG);
    expect_err(7, "{\"askid\":1}", CQ_EFIELD, "watch: field \"topic\": missing");
    /* 64 characters of every allowed class is fine. */
    char t64[65];
    for (size_t i = 0; i < 64; i++)
        t64[i] = "Az09_"[i % 5];
    t64[64] = '\0';
    snprintf(json, sizeof(json), "{\"askid\":1,\"topic\":\"%s\"}", t64);
    cq_mq_msg_t *m = decode_ok(7, json);
    assert_string_equal(m->topic, t64);
    cq_mq_msg_free(m);
    assert_true(cq_mq_topic_valid("abc", 3));
    assert_false(cq_mq_topic_valid("abc", 0));
    assert_false(cq_mq_topic_valid("a\0b", 3));
}

static void test_errors_limits(void **state)
{
    (void)state;
    cq_mq_limits_t lim = {0, 10, 3, 4};
    cq_mq_msg_t *m = NULL;
    assert_int_equal(decode_lim(11, "{\"askid\":1,\"topic\":\"t\",\"content\":\"0123456789\"}",
                                &lim, &m, NULL, 0),
                     0);
    cq_mq_msg_free(m);
    expect_err_lim(11, "{\"askid\":1,\"topic\":\"t\",\"content\":\"0123456789a\"}", &lim,
                   CQ_ECONTENT,
                   "produce: field \"content\": content of 11 bytes exceeds the limit of 10 bytes");
    /* An object is measured as its compact JSON: {"a":"1234"} is 12 bytes. */
    expect_err_lim(11, "{\"askid\":1,\"topic\":\"t\",\"content\":{ \"a\" : \"1234\" }}", &lim,
                   CQ_ECONTENT,
                   "produce: field \"content\": content of 12 bytes exceeds the limit of 10 bytes");
    expect_err_lim(11,
                   "{\"askid\":1,\"topic\":\"t\",\"messages\":[{\"content\":\"a\"},"
                   "{\"content\":\"0123456789ab\"}]}",
                   &lim, CQ_ECONTENT,
                   "produce: field \"messages[1].content\": content of 12 bytes exceeds the limit "
                   "of 10 bytes");
    expect_err_lim(11,
                   "{\"askid\":1,\"topic\":\"t\",\"messages\":[{\"content\":\"a\"},"
                   "{\"content\":\"a\"},{\"content\":\"a\"},{\"content\":\"a\"}]}",
                   &lim, CQ_EFIELD,
                   "produce: field \"messages\": must be an array of 1 to 3 messages");
    /* Depth: the top-level object is 1; brackets inside strings do not count. */
    lim.max_content = 100;
    assert_int_equal(
        decode_lim(11, "{\"askid\":1,\"topic\":\"t\",\"content\":{\"a\":[{\"b\":\"[[\\\"[[{{\"}]}}",
                   &lim, &m, NULL, 0),
        0);
    cq_mq_msg_free(m);
    expect_err_lim(11, "{\"askid\":1,\"topic\":\"t\",\"content\":{\"a\":[{\"b\":[]}]}}", &lim,
                   CQ_EJSON, "produce: JSON nested deeper than 4");
    /* Default depth 32, checked before jansson parses (it would recurse 2048 deep). */
    size_t deep = 100000;
    char *d = malloc(2 * deep + 64);
    assert_non_null(d);
    static const char head[] = "{\"askid\":1,\"topic\":\"t\",\"content\":";
    size_t k = sizeof(head) - 1;
    memcpy(d, head, k);
    memset(d + k, '[', deep);
    memset(d + k + deep, ']', deep);
    strcpy(d + k + 2 * deep, "}");
    expect_err(11, d, CQ_EJSON, "produce: JSON nested deeper than 32");
    free(d);
    /* Default content limit 64 KiB. */
    size_t big = CQ_MQ_DEFAULT_MAX_CONTENT + 1;
    char *b = malloc(big + 64);
    assert_non_null(b);
    memcpy(b, head, sizeof(head) - 1);
    b[k++] = '"';
    memset(b + k, 'x', big);
    strcpy(b + k + big, "\"}");
    expect_err(11, b, CQ_ECONTENT, NULL);
    b[k + big - 1] = '"';
    b[k + big] = '}';
    b[k + big + 1] = '\0';
    assert_int_equal(decode_lim(11, b, NULL, &m, NULL, 0), 0);
    assert_int_equal(m->items[0].len, CQ_MQ_DEFAULT_MAX_CONTENT);
    cq_mq_msg_free(m);
    free(b);
}

/* ---- encode, responses, error codes ---------------------------------------------------- */

static void test_encode_errors(void **state)
{
    (void)state;
    uint8_t *out = (uint8_t *)(uintptr_t)1;
    size_t n = 12345;
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_REQ_PRODUCE, 1);
    assert_int_equal(cq_mq_encode(m, &out, &n), CQ_EFIELD); /* askid, topic missing */
    m->has |= CQ_MQ_F_ASKID;
    assert_int_equal(cq_mq_msg_set_topic(m, "a;b"), CQ_EBADTOPIC);
    assert_false(m->has & CQ_MQ_F_TOPIC);
    set_topic(m, "ok");
    assert_int_equal(cq_mq_encode(m, &out, &n), CQ_EFIELD); /* no content */
    m->has |= CQ_MQ_F_CONTENT;
    assert_int_equal(cq_mq_encode(m, &out, &n), CQ_EFIELD); /* no item */
    assert_int_equal(cq_mq_msg_add_item(m, 0, -1, "\xc0\x80", 2, false), CQ_EFIELD);
    assert_int_equal(cq_mq_msg_add_item(m, 0, -1, "[1]", 3, true), CQ_EFIELD);
    assert_int_equal(cq_mq_msg_add_item(m, 0, -1, "{", 1, true), CQ_EFIELD);
    assert_int_equal(cq_mq_msg_add_item(m, 0, -1, "a\0b", 3, false), CQ_EFIELD);
    assert_int_equal(cq_mq_msg_add_item(m, 0, -1, "ok", 2, false), 0);
    m->time = -2;
    m->has |= CQ_MQ_F_TIME;
    assert_int_equal(cq_mq_encode(m, &out, &n), CQ_EFIELD);
    m->time = CQ_MQ_MAX_U53 + 1;
    assert_int_equal(cq_mq_encode(m, &out, &n), CQ_EFIELD);
    m->time = 1;
    m->seq = 1;
    m->has |= CQ_MQ_F_SEQ;
    assert_int_equal(cq_mq_encode(m, &out, &n), CQ_EFIELD); /* seq without producer_id */
    m->has &= ~(uint32_t)CQ_MQ_F_SEQ;
    m->topic[0] = '-';
    assert_int_equal(cq_mq_encode(m, &out, &n), CQ_EBADTOPIC);
    m->topic[0] = 'o';
    m->type = 17;
    assert_int_equal(cq_mq_encode(m, &out, &n), CQ_ENOTYPE);
    assert_ptr_equal(out, (uint8_t *)(uintptr_t)1);
    assert_int_equal(n, 12345);
    m->type = CQ_MQ_REQ_PRODUCE;
    assert_int_equal(cq_mq_encode(m, &out, &n), 0);
    cq_free(out);
    assert_int_equal(cq_mq_msg_set_str(m, CQ_MQ_F_TOPIC, "x"), CQ_EFIELD);
    assert_int_equal(cq_mq_msg_set_str(m, CQ_MQ_F_TOKEN, "\xed\xa0\x80"),
                     CQ_EFIELD); /* surrogate */
    char longs[600];
    memset(longs, 'a', sizeof(longs) - 1);
    longs[sizeof(longs) - 1] = '\0';
    assert_int_equal(cq_mq_msg_set_str(m, CQ_MQ_F_ERR_MSG, longs), CQ_EFIELD);
    cq_mq_msg_free(m);
    m = cq_mq_msg_new(CQ_MQ_RESP_PRODUCE, 0);
    assert_null(cq_mq_resp_new(m, 0, NULL)); /* not a request */
    cq_mq_msg_free(m);
    assert_null(cq_mq_msg_free(NULL));
}

static void check_error_frame(const uint8_t *out, size_t n, uint8_t type, uint16_t msg_id,
                              const char *want_body)
{
    cq_mq_frame_t f;
    assert_int_equal(cq_mq_parse(out, n, 0, &f), (ssize_t)n);
    assert_int_equal(f.type, type);
    assert_int_equal(f.msg_id, msg_id);
    if (f.body_len != strlen(want_body) || memcmp(f.body, want_body, f.body_len) != 0)
        fail_msg("got %.*s\nwant %s", (int)f.body_len, (const char *)f.body, want_body);
}

static void test_encode_error_and_resp(void **state)
{
    (void)state;
    uint8_t *out;
    size_t n;
    /* A produce with a bad topic: answered as produce_resp with the askid echoed. */
    const char *body = "{\"askid\":77,\"topic\":\"a;b\",\"content\":\"x\"}";
    cq_mq_frame_t f = {(const uint8_t *)body, (uint32_t)strlen(body), 300, CQ_MQ_REQ_PRODUCE};
    char err[256];
    cq_mq_msg_t *m = NULL;
    int rc = cq_mq_decode(&f, NULL, &m, err, sizeof(err));
    assert_int_equal(rc, CQ_EBADTOPIC);
    assert_int_equal(cq_mq_encode_error(&f, rc, err, &out, &n), 0);
    check_error_frame(out, n, CQ_MQ_RESP_PRODUCE, 300,
                      "{\"askid\":77,\"err_code\":13,\"err_msg\":\"produce: field \\\"topic\\\": "
                      "must be a string matching [A-Za-z0-9_]{1,64}\"}");
    cq_free(out);
    /* Unknown type: the generic error answer, still with the askid. */
    f.type = 99;
    assert_int_equal(cq_mq_encode_error(&f, CQ_ENOTYPE, NULL, &out, &n), 0);
    check_error_frame(out, n, CQ_MQ_RESP_ERROR, 300,
                      "{\"askid\":77,\"err_code\":4,\"err_msg\":\"unknown or unhandled message "
                      "type\"}");
    cq_free(out);
    /* Bad JSON: no askid to echo, so the generic answer. */
    f.body = (const uint8_t *)"{nope";
    f.body_len = 5;
    f.type = CQ_MQ_REQ_CONSUME;
    assert_int_equal(cq_mq_encode_error(&f, CQ_EJSON, "bad", &out, &n), 0);
    check_error_frame(out, n, CQ_MQ_RESP_ERROR, 300, "{\"err_code\":3,\"err_msg\":\"bad\"}");
    cq_free(out);
    /* A header error (no frame at all). */
    assert_int_equal(cq_mq_encode_error(NULL, CQ_EHEADER, NULL, &out, &n), 0);
    check_error_frame(out, n, CQ_MQ_RESP_ERROR, 0,
                      "{\"err_code\":1,\"err_msg\":\"bad frame header (header length, version or "
                      "serialization)\"}");
    cq_free(out);
    /* A long message is cut at 512 bytes, on a UTF-8 boundary. */
    char longs[700];
    memset(longs, 'a', 511);
    strcpy(longs + 511, "\xc3\xa9 tail");
    m = decode_ok(CQ_MQ_REQ_KEEPALIVE, "{\"askid\":1}");
    cq_mq_msg_t *r = cq_mq_resp_new(m, CQ_ESTORE, longs);
    assert_int_equal(strlen(r->err_msg), 511);
    assert_int_equal(r->err_code, CQ_MQ_ERR_STORAGE);
    cq_mq_msg_free(r);
    r = cq_mq_resp_new(m, 0, "\xff"); /* not UTF-8: left out */
    assert_false(r->has & CQ_MQ_F_ERR_MSG);
    roundtrip(r, NULL);
    cq_mq_msg_free(r);
    cq_mq_msg_free(m);
}

static void test_errcodes(void **state)
{
    (void)state;
    static const struct {
        int err, code;
        const char *name;
    } map[] = {
        {0, 0, "ok"},
        {CQ_EHEADER, 1, "bad_header"},
        {CQ_EBADLEN, 2, "bad_length"},
        {CQ_EJSON, 3, "bad_json"},
        {CQ_ENOTYPE, 4, "unknown_type"},
        {CQ_EFIELD, 5, "bad_field"},
        {CQ_EAUTH, 6, "unauthenticated"},
        {CQ_EACL, 7, "no_permission"},
        {CQ_ENOTOPIC, 8, "unknown_topic"},
        {CQ_EOFFLINE, 9, "topic_offline"},
        {CQ_ECONTENT, 10, "content_too_large"},
        {CQ_EBUSY, 11, "busy"},
        {CQ_ESTORE, 12, "storage"},
        {CQ_EBADTOPIC, 13, "bad_topic_name"},
        {CQ_EOFFRANGE, 17, "offset_out_of_range"},
        {-ENOMEM, 14, "internal"},
        {CQ_EMAGIC, 14, "internal"},
        {1, 14, "internal"},
        {CQ_ESEQCONFLICT, 15, "sequence_conflict"},
        {CQ_ESEQORDER, 16, "sequence_out_of_order"},
        {CQ_ENOTMASTER, 18, "not_master"},
        {CQ_ESRVOFFLINE, 19, "server_offline"},
        {CQ_EREADMASTER, 20, "read_on_master"},
        {CQ_ENOMSG, 21, "no_message"},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        assert_int_equal(cq_mq_errcode(map[i].err), map[i].code);
        assert_string_equal(cq_mq_errcode_name(map[i].code), map[i].name);
    }
    assert_string_equal(cq_mq_errcode_name(22), "unknown");
    assert_string_equal(cq_mq_type_name(11), "produce");
    assert_string_equal(cq_mq_type_name(12), "produce_resp");
    assert_null(cq_mq_type_name(17));
    assert_null(cq_mq_type_name(0));
    assert_true(cq_mq_is_request(15));
    assert_false(cq_mq_is_request(17));
    assert_false(cq_mq_is_request(18));
    assert_true(cq_mq_is_request(CQ_MQ_REQ_OFFSET));
    assert_true(cq_mq_is_request(CQ_MQ_REQ_TOPICS));
    assert_false(cq_mq_is_request(25));
    assert_string_equal(cq_mq_type_name(21), "offset");
    assert_string_equal(cq_mq_type_name(24), "topics_resp");
}

/* The direct writer escapes strings exactly as jansson does: every ASCII byte, multi-byte
 * UTF-8, in contents, err_msg and token; and it refuses what the jansson path refuses. */
static void test_encode_escapes(void **state)
{
    (void)state;
    char all[160];
    size_t n = 0;
    for (int c = 1; c < 0x80; c++)
        all[n++] = (char)c;
    memcpy(all + n, "\xc3\xa9\xe2\x80\xa8\xf0\x9f\x98\x80", 9);
    n += 9;
    all[n] = '\0';
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_RESP_CONSUME, 9);
    m->askid = 1;
    m->offset = 77;
    m->has |= CQ_MQ_F_ASKID | CQ_MQ_F_ERR_CODE | CQ_MQ_F_MESSAGES | CQ_MQ_F_OFFSET;
    assert_int_equal(cq_mq_msg_set_str(m, CQ_MQ_F_ERR_MSG, all), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            cq_mq_msg_add_item(m, 70 + i, i == 1 ? -1 : 5, all + i * 40, n - (size_t)i * 40, false),
            0);
    char *own = cq_malloc(4);
    memcpy(own, "abc", 4);
    assert_int_equal(cq_mq_msg_add_item_take(m, 76, -1, own, 3), 0);
    roundtrip(m, NULL);
    m->items[1].offset = -1; /* out of range: both paths refuse it the same way */
    uint8_t *a = NULL;
    size_t alen = 0;
    assert_int_equal(cq_mq_encode(m, &a, &alen), CQ_EFIELD);
    assert_int_equal(cq__mq_encode_jansson(m, &a, &alen), CQ_EFIELD);
    cq_mq_msg_free(m);
    /* take: not NUL-terminated at len, or not UTF-8: refused (and freed) */
    m = cq_mq_msg_new(CQ_MQ_PUSH, 0);
    own = cq_malloc(4);
    memcpy(own, "abcd", 4);
    assert_int_equal(cq_mq_msg_add_item_take(m, 1, -1, own, 2), CQ_EFIELD);
    own = cq_malloc(3);
    memcpy(own, "\xff\xfe", 3);
    assert_int_equal(cq_mq_msg_add_item_take(m, 1, -1, own, 2), CQ_EFIELD);
    assert_int_equal(m->nitems, 0);
    cq_mq_msg_free(m);
    /* a produce with token-like strings and a batch */
    m = cq_mq_msg_new(CQ_MQ_REQ_PRODUCE, 3);
    m->askid = 2;
    m->has |= CQ_MQ_F_ASKID | CQ_MQ_F_BATCH;
    set_topic(m, "esc");
    assert_int_equal(cq_mq_msg_add_item(m, 0, 9, all, n, false), 0);
    assert_int_equal(cq_mq_msg_add_item(m, 0, -1, "", 0, false), 0);
    roundtrip(m, NULL);
    cq_mq_msg_free(m);
}

/* The direct decoder takes the usual shapes and gives the same message as the jansson path;
 * for everything else (and every error) the jansson path decides: same codes, same texts. */
static void test_decoders_agree(void **state)
{
    (void)state;
    static const struct {
        uint8_t type;
        const char *json;
    } in[] = {
        {11,
         "{\"askid\":1,\"topic\":\"t\",\"content\":\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\u20ac"
         "\\ud83d\\ude00 \xc3\xa9\"}"},
        {11,
         " {\r\n\"askid\" : 4294967295 ,\t\"topic\":\"T_9\",\"producer_id\":9007199254740991,"
         "\"seq\":0,\"messages\":[{\"content\":\"x\",\"time\":0},{\"time\":5,\"content\":\"\"}]} "},
        {14, "{\"askid\":2,\"err_code\":0,\"offset\":3,\"messages\":[{\"offset_id\":3,"
             "\"message\":\"m\",\"time\":1}],\"message_count\":1}"},
        {14, "{\"message_count\":0,\"askid\":2,\"err_code\":0,\"messages\":[]}"},
        {12, "{\"askid\":2,\"err_code\":0,\"offsets\":[1,2,9007199254740991]}"},
        {22, "{\"askid\":2,\"err_code\":0,\"committed\":false,\"offset\":0}"},
        {1, "{\"askid\":1,\"module_id\":2,\"token\":\"s\\u0001\",\"client_type\":2}"},
        /* the jansson path decides these */
        {11, "{\"askid\":1,\"topic\":\"t\",\"content\":{\"k\":1}}"},
        {11, "{\"askid\":1,\"topic\":\"t\",\"content\":\"x\",\"extra\":[1,{}]}"},
        {11, "{\"askid\":1,\"askid\":2,\"topic\":\"t\",\"content\":\"x\"}"},
        {11, "{\"askid\":1,\"topic\":\"t\",\"content\":\"\\u0000\"}"},
        {11, "{\"askid\":1,\"topic\":\"t\",\"content\":\"\\ud800\"}"},
        {11, "{\"askid\":1,\"topic\":\"t\",\"content\":\"\xff\"}"},
        {11, "{\"askid\":01,\"topic\":\"t\",\"content\":\"x\"}"},
        {11, "{\"askid\":1.0,\"topic\":\"t\",\"content\":\"x\"}"},
        {11, "{\"askid\":-1,\"topic\":\"t\",\"content\":\"x\"}"},
        {11, "{\"askid\":1,\"topic\":\"t\",\"content\":\"x\"} x"},
        {11, "{\"askid\":1,\"topic\":\"a-b\",\"content\":\"x\"}"},
        {11, "{\"askid\":1,\"topic\":\"t\",\"messages\":[]}"},
        {11, "{\"askid\":1,\"topic\":\"t\",\"content\":\"x\",\"seq\":1}"},
        {14, "{\"askid\":2,\"err_code\":0,\"messages\":[],\"message_count\":1}"},
        {14, "{\"askid\":2,\"err_code\":0,\"messages\":[{\"message\":\"m\"}]}"},
        {3, "{\"askid\":1,\"client_id\":null}"},
        {3, "{\"askid\":99999999999999999999999}"},
        {3, "{\"askid\":1,"},
        {3, "{\"askid\x01\":1}"}, /* a control byte in a key (the fuzzer's find, with NUL) */
        {3, "[1]"},
    };
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        cq_mq_frame_t f = {(const uint8_t *)in[i].json, (uint32_t)strlen(in[i].json), 7,
                           in[i].type};
        cq_mq_msg_t *a = NULL, *b = NULL;
        char ea[512] = "", eb[512] = "";
        int ra = cq_mq_decode(&f, NULL, &a, ea, sizeof(ea));
        int rb = cq__mq_decode_jansson(&f, NULL, &b, eb, sizeof(eb));
        if (ra != rb || strcmp(ea, eb) != 0)
            fail_msg("%s: %d '%s' vs %d '%s'", in[i].json, ra, ea, rb, eb);
        assert_int_equal(ra == 0, i < 9); /* the first nine decode */
        if (ra == 0) {
            uint8_t *x, *y;
            size_t nx, ny;
            assert_int_equal(a->has, b->has);
            assert_int_equal(cq_mq_encode(a, &x, &nx), 0);
            assert_int_equal(cq_mq_encode(b, &y, &ny), 0);
            assert_int_equal(nx, ny);
            assert_memory_equal(x, y, nx);
            cq_free(x);
            cq_free(y);
        }
        cq_mq_msg_free(a);
        cq_mq_msg_free(b);
    }
    cq_mq_msg_t *m = decode_ok(11, in[0].json);
    assert_string_equal(m->items[0].content,
                        "a\"b\\c/d\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 "
                        "\xc3\xa9");
    cq_mq_msg_free(m);
}

/* offset (21/22) and topics (23/24): the two messages that are not in the seed. */
static void test_offset_and_topics(void **state)
{
    (void)state;
    cq_mq_msg_t *m = decode_ok(CQ_MQ_REQ_OFFSET, "{\"askid\":5,\"topic\":\"orders\"}");
    assert_string_equal(m->topic, "orders");
    cq_mq_msg_t *r = cq_mq_resp_new(m, 0, NULL);
    assert_int_equal(r->type, CQ_MQ_RESP_OFFSET);
    r->offset = 41;
    r->committed = true;
    r->last_offset = 99;
    r->has |= CQ_MQ_F_OFFSET | CQ_MQ_F_COMMITTED | CQ_MQ_F_LAST_OFFSET;
    uint8_t *out;
    size_t n;
    assert_int_equal(cq_mq_encode(r, &out, &n), 0);
    const char *want = "{\"askid\":5,\"topic\":\"orders\",\"err_code\":0,\"offset\":41,"
                       "\"committed\":true,\"last_offset\":99}";
    assert_int_equal(n, CQ_MQ_HDR_LEN + strlen(want));
    assert_memory_equal(out + CQ_MQ_HDR_LEN, want, strlen(want));
    cq_free(out);
    roundtrip(r, NULL);
    cq_mq_msg_free(r);
    cq_mq_msg_free(m);
    expect_err(CQ_MQ_REQ_OFFSET, "{\"askid\":5}", CQ_EFIELD, "offset: field \"topic\": missing");
    expect_err(CQ_MQ_RESP_OFFSET, "{\"askid\":5,\"err_code\":0,\"committed\":1}", CQ_EFIELD,
               "offset_resp: field \"committed\": must be true or false");

    m = decode_ok(CQ_MQ_REQ_TOPICS, "{\"askid\":6}");
    r = cq_mq_resp_new(m, 0, NULL);
    assert_int_equal(r->type, CQ_MQ_RESP_TOPICS);
    r->has |= CQ_MQ_F_TOPICS; /* an empty list is a list */
    roundtrip(r, NULL);
    assert_int_equal(cq_mq_msg_add_topic_info(r, "a_1", true, 30, 7), 0);
    assert_int_equal(cq_mq_msg_add_topic_info(r, "b", false, 0, 0), 0);
    assert_int_equal(cq_mq_msg_add_topic_info(r, "bad-name", false, 0, 0), CQ_EBADTOPIC);
    r->topic_nums = 2;
    r->has |= CQ_MQ_F_TOPIC_NUMS;
    assert_int_equal(cq_mq_encode(r, &out, &n), 0);
    want = "{\"askid\":6,\"err_code\":0,\"topic_nums\":2,\"topics\":[{\"topic\":\"a_1\","
           "\"online\":true,\"retention_days\":30,\"last_offset\":7},{\"topic\":\"b\","
           "\"online\":false,\"retention_days\":0,\"last_offset\":0}]}";
    assert_int_equal(n, CQ_MQ_HDR_LEN + strlen(want));
    assert_memory_equal(out + CQ_MQ_HDR_LEN, want, strlen(want));
    cq_free(out);
    roundtrip(r, NULL);
    cq_mq_msg_free(r);
    cq_mq_msg_free(m);
    m = decode_ok(CQ_MQ_RESP_TOPICS, want);
    assert_int_equal(m->ntopic_infos, 2);
    assert_string_equal(m->topic_infos[0].topic, "a_1");
    assert_true(m->topic_infos[0].online);
    assert_int_equal(m->topic_infos[0].retention_days, 30);
    assert_int_equal(m->topic_infos[0].last_offset, 7);
    assert_false(m->topic_infos[1].online);
    cq_mq_msg_free(m);
    expect_err(CQ_MQ_RESP_TOPICS,
               "{\"askid\":6,\"err_code\":0,\"topics\":[{\"topic\":\"x;\",\"online\":true,"
               "\"retention_days\":1,\"last_offset\":1}]}",
               CQ_EBADTOPIC, "topics_resp: field \"topics[0].topic\": " TOPIC_MSG);
    expect_err(CQ_MQ_RESP_TOPICS,
               "{\"askid\":6,\"err_code\":0,\"topics\":[{\"topic\":\"x\",\"online\":true,"
               "\"retention_days\":1}]}",
               CQ_EFIELD, "topics_resp: field \"topics[0].last_offset\": missing");
    expect_err(CQ_MQ_RESP_TOPICS, "{\"askid\":6,\"err_code\":0,\"topics\":{}}", CQ_EFIELD,
               "topics_resp: field \"topics\": must be an array of at most 10000 topics");
}

/* ---- fail-N ---------------------------------------------------------------------------- */

static const char *failn_produce =
    "{\"askid\":3,\"topic\":\"t\",\"producer_id\":1,\"seq\":2,\"messages\":[{\"content\":\"a\"},"
    "{\"content\":{\"x\":[1,{\"y\":\"z\"}]},\"time\":4},{\"content\":\"b\"},{\"content\":\"c\"},"
    "{\"content\":\"d\"},{\"content\":\"e\"}]}";

/* One operation under allocation failure: decode, answer, encode. */
static int failn_op(void)
{
    cq_mq_frame_t f = {(const uint8_t *)failn_produce, (uint32_t)strlen(failn_produce), 1,
                       CQ_MQ_REQ_PRODUCE};
    cq_mq_msg_t *m = NULL, *r = NULL;
    uint8_t *out = NULL;
    size_t n;
    char err[128];
    int rc = cq_mq_decode(&f, NULL, &m, err, sizeof(err));
    if (rc < 0)
        return rc;
    rc = cq_mq_encode(m, &out, &n);
    cq_free(out);
    out = NULL;
    if (rc == 0 && !(r = cq_mq_resp_new(m, CQ_ESTORE, NULL)))
        rc = -ENOMEM;
    for (int i = 0; rc == 0 && i < 6; i++)
        rc = cq_mq_msg_add_offset(r, i);
    if (rc == 0)
        rc = cq_mq_encode(r, &out, &n);
    cq_free(out);
    cq_mq_msg_free(r);
    cq_mq_msg_free(m);
    return rc;
}

/* Frames encoded into a cq_buf: the same bytes as cq_mq_encode on both writers, when the first
 * guess of the size is too small too (escapes grow the body), and for error answers. */
static void test_encode_buf(void **state)
{
    (void)state;
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_PUSH, 0);
    assert_non_null(m);
    assert_int_equal(cq_mq_msg_set_topic(m, "t"), 0);
    char ctl[2000];
    memset(ctl, 0x01, sizeof(ctl)); /* written as \u0001: six times the guess */
    for (int i = 0; i < 50; i++)
        assert_int_equal(cq_mq_msg_add_item(m, i + 1, -1, ctl, sizeof(ctl), false), 0);
    m->offset = 50;
    m->has |= CQ_MQ_F_MESSAGES | CQ_MQ_F_OFFSET;
    uint8_t *a;
    size_t alen;
    cq_buf_t *b;
    assert_int_equal(cq_mq_encode(m, &a, &alen), 0);
    assert_true(alen > 6 * 50 * sizeof(ctl));
    assert_int_equal(cq_mq_encode_buf(m, &b), 0);
    assert_int_equal(b->len, alen);
    assert_true(b->cap >= b->len);
    assert_memory_equal(b->data, a, alen);
    cq_buf_unref(b);
    cq_free(a);
    /* a JSON-object content takes the jansson path */
    cq_mq_msg_t *p = cq_mq_msg_new(CQ_MQ_REQ_PRODUCE, 3);
    p->askid = 1;
    assert_int_equal(cq_mq_msg_set_topic(p, "t"), 0);
    assert_int_equal(cq_mq_msg_add_item(p, 0, -1, "{\"k\":[1,2]}", 11, true), 0);
    p->has |= CQ_MQ_F_ASKID | CQ_MQ_F_CONTENT;
    assert_int_equal(cq_mq_encode(p, &a, &alen), 0);
    assert_int_equal(cq_mq_encode_buf(p, &b), 0);
    assert_int_equal(b->len, alen);
    assert_memory_equal(b->data, a, alen);
    cq_buf_unref(b);
    cq_free(a);
    /* an error answer */
    const char *body = "{\"askid\":77,\"topic\":\"a;b\"}";
    cq_mq_frame_t f = {(const uint8_t *)body, (uint32_t)strlen(body), 1, CQ_MQ_REQ_WATCH};
    assert_int_equal(cq_mq_encode_error(&f, CQ_EBADTOPIC, "no", &a, &alen), 0);
    assert_int_equal(cq_mq_encode_error_buf(&f, CQ_EBADTOPIC, "no", &b), 0);
    assert_int_equal(b->len, alen);
    assert_memory_equal(b->data, a, alen);
    cq_buf_unref(b);
    cq_free(a);
    /* every allocation failing in turn: a clean -ENOMEM, nothing live */
    for (unsigned long n = 1;; n++) {
        long live = cq_buf_live();
        test_alloc_install(n, false);
        b = NULL;
        int rc = cq_mq_encode_buf(n & 1 ? m : p, &b);
        cq_buf_unref(b);
        unsigned long failed = test_alloc_failed();
        test_alloc_remove();
        assert_int_equal(test_alloc_live(), 0);
        assert_int_equal(cq_buf_live(), live);
        assert_true(rc == 0 || rc == -ENOMEM);
        if (failed == 0 && n > 8)
            break;
    }
    cq_mq_msg_free(p);
    cq_mq_msg_free(m);
}

static void test_fail_n(void **state)
{
    (void)state;
    unsigned long n;
    for (n = 1;; n++) {
        test_alloc_install(n, false);
        int rc = failn_op();
        unsigned long failed = test_alloc_failed();
        test_alloc_remove();
        assert_int_equal(test_alloc_live(), 0);
        if (failed == 0) {
            assert_int_equal(rc, 0);
            break;
        }
        /* 0 is allowed: decode retries a parse that jansson failed for lack of memory. */
        if (rc != -ENOMEM && rc != 0)
            fail_msg("allocation %lu failed but rc = %d", n, rc);
    }
    assert_true(n > 20); /* jansson's allocations were in the loop too */
    /* encode_error may fall back to the generic answer when peeking fails, but never leaks. */
    const char *body = "{\"askid\":77,\"topic\":\"a;b\"}";
    cq_mq_frame_t f = {(const uint8_t *)body, (uint32_t)strlen(body), 1, CQ_MQ_REQ_WATCH};
    for (n = 1;; n++) {
        test_alloc_install(n, false);
        uint8_t *out = NULL;
        size_t len;
        int rc = cq_mq_encode_error(&f, CQ_EBADTOPIC, NULL, &out, &len);
        cq_free(out);
        unsigned long failed = test_alloc_failed();
        test_alloc_remove();
        assert_int_equal(test_alloc_live(), 0);
        assert_true(rc == 0 || rc == -ENOMEM);
        if (failed == 0)
            break;
    }
}

/* Encodes m and compares its body with want, then round-trips it. */
static void expect_body(const cq_mq_msg_t *m, const char *want)
{
    uint8_t *out;
    size_t n;
    assert_int_equal(cq_mq_encode(m, &out, &n), 0);
    if (n != CQ_MQ_HDR_LEN + strlen(want) || memcmp(out + CQ_MQ_HDR_LEN, want, strlen(want)))
        fail_msg("got %.*s\nwant %s", (int)(n - CQ_MQ_HDR_LEN), (const char *)out + CQ_MQ_HDR_LEN,
                 want);
    cq_free(out);
    roundtrip(m, NULL);
}

/* The cluster's fields (issue 11): shard and master, and the idempotence key of consumed and
 * pushed messages, on both encoders and both decoders. */
static void test_cluster_fields(void **state)
{
    (void)state;
    cq_mq_msg_t *m = cq_mq_msg_new(CQ_MQ_RESP_CONNECT, 1);
    m->askid = 1;
    m->client_id = 5;
    m->shard = 3;
    m->master = false;
    m->has |= CQ_MQ_F_ASKID | CQ_MQ_F_ERR_CODE | CQ_MQ_F_CLIENT_ID | CQ_MQ_F_SHARD | CQ_MQ_F_MASTER;
    expect_body(m, "{\"askid\":1,\"client_id\":5,\"err_code\":0,\"shard\":3,\"master\":false}");
    m->type = CQ_MQ_RESP_KEEPALIVE;
    m->has &= ~CQ_MQ_F_CLIENT_ID;
    m->weight = 40;
    m->master = true;
    m->has |= CQ_MQ_F_WEIGHT;
    expect_body(m, "{\"askid\":1,\"err_code\":0,\"weight\":40,\"shard\":3,\"master\":true}");
    cq_mq_msg_free(m);

    m = cq_mq_msg_new(CQ_MQ_PUSH, 0);
    set_topic(m, "t");
    m->shard = 4294967295u;
    m->has |= CQ_MQ_F_MESSAGES | CQ_MQ_F_SHARD | CQ_MQ_F_MASTER; /* push has no master */
    assert_int_equal(cq_mq_msg_add_item(m, 1, 2, "a", 1, false), 0);
    assert_int_equal(cq_mq_msg_add_item(m, 2, -1, "b", 1, false), 0);
    m->items[1].producer_id = CQ_MQ_MAX_U53;
    m->items[1].seq = 0;
    static const char push[] =
        "{\"topic\":\"t\",\"messages\":[{\"offset_id\":1,\"message\":\"a\",\"time\":2},"
        "{\"offset_id\":2,\"message\":\"b\",\"producer_id\":9007199254740991,\"seq\":0}],"
        "\"message_count\":2,\"shard\":4294967295}";
    expect_body(m, push);
    /* a consume answer's budget counts the key's bytes */
    assert_int_equal(cq_mq_answer_item_len(2, -1, "b", 1) + cq_mq_answer_key_len(CQ_MQ_MAX_U53, 0),
                     strlen("{\"offset_id\":2,\"message\":\"b\",\"producer_id\":9007199254740991,"
                            "\"seq\":0}"));
    assert_int_equal(cq_mq_answer_key_len(0, 9), 0);
    /* both decoders read the key back */
    cq_mq_msg_t *d = decode_ok(CQ_MQ_PUSH, push);
    assert_int_equal(d->items[0].producer_id, 0);
    assert_int_equal(d->items[1].producer_id, CQ_MQ_MAX_U53);
    assert_int_equal(d->shard, 4294967295u);
    cq_mq_msg_free(d);
    /* out of range keys are not written */
    m->items[1].seq = -1;
    uint8_t *out;
    size_t n;
    assert_int_equal(cq_mq_encode(m, &out, &n), CQ_EFIELD);
    assert_int_equal(cq__mq_encode_jansson(m, &out, &n), CQ_EFIELD);
    cq_mq_msg_free(m);

    /* producer_id and seq go together; producer_id 0 is no key */
    expect_err(CQ_MQ_PUSH,
               "{\"topic\":\"t\",\"messages\":[{\"offset_id\":1,\"message\":\"a\",\"seq\":1}]}",
               CQ_EFIELD,
               "push: field \"messages[0].producer_id\": missing (producer_id and seq "
               "go together)");
    expect_err(CQ_MQ_PUSH,
               "{\"topic\":\"t\",\"messages\":[{\"offset_id\":1,\"message\":\"a\","
               "\"producer_id\":0,\"seq\":1}]}",
               CQ_EFIELD, NULL);
    expect_err(CQ_MQ_RESP_CONSUME,
               "{\"askid\":1,\"err_code\":0,\"messages\":[{\"offset_id\":1,\"message\":\"a\","
               "\"producer_id\":1}]}",
               CQ_EFIELD,
               "consume_resp: field \"messages[0].seq\": missing (producer_id and "
               "seq go together)");
    expect_err(CQ_MQ_RESP_CONNECT, "{\"askid\":1,\"err_code\":0,\"master\":1}", CQ_EFIELD, NULL);
    expect_err(CQ_MQ_RESP_CONNECT, "{\"askid\":1,\"err_code\":0,\"shard\":-1}", CQ_EFIELD, NULL);
}

int main(void)
{
    json_set_alloc_funcs(cq_malloc, cq_free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_layout),
        cmocka_unit_test(test_every_prefix),
        cmocka_unit_test(test_every_split),
        cmocka_unit_test(test_header_errors),
        cmocka_unit_test(test_roundtrip_requests),
        cmocka_unit_test(test_roundtrip_responses),
        cmocka_unit_test(test_decode_seed_examples),
        cmocka_unit_test(test_errors_json_and_type),
        cmocka_unit_test(test_errors_fields),
        cmocka_unit_test(test_errors_produce),
        cmocka_unit_test(test_errors_topic),
        cmocka_unit_test(test_errors_limits),
        cmocka_unit_test(test_encode_errors),
        cmocka_unit_test(test_encode_error_and_resp),
        cmocka_unit_test(test_errcodes),
        cmocka_unit_test(test_offset_and_topics),
        cmocka_unit_test(test_encode_escapes),
        cmocka_unit_test(test_decoders_agree),
        cmocka_unit_test(test_encode_buf),
        cmocka_unit_test(test_fail_n),
        cmocka_unit_test(test_cluster_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
