/* test_it_input.c - what the server accepts and refuses on the wire: custom FSM filtering and
 * transitions (§3.3), the legacy tag (§1.2), Snappy (§1.3), and malformed input (§1.2, §8.2:
 * chanq closes instead of wedging), each checked against the logged reason. The log is read
 * as a cursor (it_log_expect): each check finds a line written after the previous one. */
#include "it_common.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The client (on conn c) reaches the GLOBAL owner with msgType type. */
static void roundtrip(it_conn_t *g, it_conn_t *c, uint32_t type, const char *payload)
{
    assert_int_equal(chanq_sync_user_msg(c->s, 0, 0, type, payload, strlen(payload)), 0);
    it_expect_user(g, 0, type, 0, 0, c->id, payload);
}

static void raw_expect_closed(int fd)
{
    uint8_t buf[256];
    int r;
    do {
        r = cq_raw_read_packet(fd, buf, sizeof(buf), IT_TIMEOUT_MS, false);
    } while (r > 0);
    if (!chanq_sync_err_is_closed(r))
        print_error("expected a close, got %s\n", cq_strerror(r));
    assert_true(chanq_sync_err_is_closed(r));
}

/* ---- FSM ---------------------------------------------------------------------------------- */

static const char FSM[] =
    "{\"States\": ["
    " {\"Name\": \"INIT\", \"MsgTypeWhitelist\": \"1\", \"MsgTypeBlacklist\": \"\"},"
    " {\"Name\": \"OPEN\", \"MsgTypeWhitelist\": \"100-200\", \"MsgTypeBlacklist\": \"150\"},"
    " {\"Name\": \"QUIET\", \"MsgTypeWhitelist\": \"7\", \"MsgTypeBlacklist\": \"\"}],"
    " \"InitState\": \"INIT\","
    " \"Transitions\": [{\"FromState\": \"OPEN\", \"ToState\": \"QUIET\", \"MsgType\": 120}]}\n";

static void test_fsm_custom(void **state)
{
    it_start("--client-fsm", it_file("fsm.json", FSM), NULL);
    it_conn_t *g = it_gowner();
    it_conn_t *c = it_client();
    /* g subscribes c to GLOBAL so that c can UNSUB (7) later */
    it_sub(g, 2, 0, c->id, -1);
    it_expect_sub(g, 0, 2, c->id, CONN_CLIENT, CT_GLOBAL, 1);
    it_expect_sub(c, 0, 0, c->id, CONN_CLIENT, CT_GLOBAL, 1);
    int64_t before = cq_testsrv_metric(it_srv(), "fsm_disallowed");
    assert_int_equal(before, 0);
    it_log_mark();

    roundtrip(g, c, 100, "a100");
    roundtrip(g, c, 200, "a200");
    /* blacklisted, above and below the whitelist (3 is CREATE_CHANNEL: has a handler, so
     * the FSM is what refuses it) */
    uint32_t dropped[] = {150, 201, 250, 3};
    for (size_t i = 0; i < 4; i++) {
        /* sent raw: 3 is below user space */
        assert_int_equal(chanq_sync_send_raw(c->s, 0, 0, 0, dropped[i], "no", 2), 0);
        char marker[16];
        snprintf(marker, sizeof(marker), "after-%u", dropped[i]);
        roundtrip(g, c, 101, marker); /* the next thing g sees */
    }
    /* 120 is allowed and moves the connection to QUIET, where only 7 passes */
    roundtrip(g, c, 120, "switch");
    assert_int_equal(chanq_sync_user_msg(c->s, 0, 0, 100, "muted", 5), 0);
    assert_int_equal(chanq_sync_unsub_from_channel(c->s, 9, 0, c->id), 0);
    it_expect_unsub(c, 0, 9, c->id, CONN_CLIENT, CT_GLOBAL);
    it_expect_unsub(g, 0, 0, c->id, CONN_CLIENT, CT_GLOBAL); /* not "muted" */
    assert_int_equal(cq_testsrv_metric_wait_ge(it_srv(), "fsm_disallowed", 5, IT_TIMEOUT_MS), 5);
    for (int i = 0; i < 5; i++) /* 150, 201, 250, 3, then 100 in QUIET */
        it_log_expect("not allowed by the connection's FSM state");
    assert_int_equal(it_log_count("not allowed by the connection's FSM state"), 0);
    /* another client is unaffected by c's state */
    it_conn_t *c2 = it_client();
    roundtrip(g, c2, 100, "c2");
}

/* ---- legacy tag ----------------------------------------------------------------------------- */

static void test_legacy_tag(void **state)
{
    it_need_tcp("the legacy tag is an option of TCP listeners");
    it_start("--client-legacy-tag", NULL);
    /* raw: the §1.2 AUTH request with a legacy header, answered in legacy framing */
    static const uint8_t req[] = {0x43, 0x48, 0x4e, 0x14, 0x00, 0x0a, 0x12, 0x18, 0x01,
                                  0x20, 0x01, 0x2a, 0x0c, 0x0a, 0x04, 0x74, 0x65, 0x73,
                                  0x74, 0x12, 0x04, 0x74, 0x65, 0x73, 0x74};
    static const uint8_t res[] = {0x43, 0x48, 0x4e, 0x0a, 0x00, 0x0a, 0x08, 0x18,
                                  0x01, 0x20, 0x01, 0x2a, 0x02, 0x10, 0x01};
    int fd = cq_raw_connect(it_srv()->client_port);
    assert_true(fd >= 0);
    assert_int_equal(cq_raw_write(fd, req, sizeof(req)), 0);
    uint8_t buf[512];
    int r = cq_raw_read_packet(fd, buf, sizeof(buf), IT_TIMEOUT_MS, true);
    assert_int_equal(r, (int)sizeof(res));
    assert_memory_equal(buf, res, sizeof(res));

    /* libchanq in legacy mode: auth, then messages both ways, small and large (>= 256) */
    it_conn_t *g = it_gowner(); /* server listener: fixed framing */
    chanq_opts_t o;
    chanq_opts_init(&o);
    o.framing = CHANQ_FRAMING_LEGACY;
    it_conn_t *c = it_connect(false, &o);
    it_auth(c, "legacy", "lt");
    roundtrip(g, c, 100, "legacy-up");
    char big[600];
    memset(big, 'L', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    roundtrip(g, c, 101, big);
    it_sfwd(g, 0, BC_SINGLE, 102, c->id, "down");
    it_expect_user(c, 0, 102, BC_SINGLE, 0, c->id, "down");
    it_sfwd(g, 0, BC_SINGLE, 103, c->id, big);
    it_expect_user(c, 0, 103, BC_SINGLE, 0, c->id, big);
    /* raw client: a small server message arrives with a legacy header too */
    it_sfwd(g, 0, BC_SINGLE, 104, 1, "raw");
    r = cq_raw_read_packet(fd, buf, sizeof(buf), IT_TIMEOUT_MS, true);
    assert_true(r > 5);
    assert_int_equal(buf[2], 0x4e);
    assert_int_equal(buf[3], r - 5);
    chanq_owned_msg_t m[2];
    assert_int_equal(cq_decode_packet(buf, (size_t)r, true, m, 2), 1);
    assert_int_equal(m[0].msg_type, 104);
    chanq_owned_msg_done(&m[0]);
    close(fd);
}

/* ---- Snappy ------------------------------------------------------------------------------- */

static void test_snappy_both_ways(void **state)
{
    it_start(NULL);
    it_conn_t *g = it_gowner();
    /* raw socket, bytes produced by a compressing libchanq core */
    chanq_opts_t o;
    chanq_opts_init(&o);
    o.compress = true;
    chanq_client_t *core;
    assert_int_equal(chanq_client_new(&o, &core), 0);
    int fd = cq_raw_connect(it_srv()->client_port);
    assert_true(fd >= 0);
    assert_int_equal(chanq_client_auth(core, 1, "snappy", "lt"), 0);
    const uint8_t *p;
    size_t n;
    assert_int_equal(chanq_client_out(core, &p, &n), 0);
    assert_true(n > 5);
    assert_int_equal(p[4], 1); /* we really send Snappy */
    assert_int_equal(cq_raw_write(fd, p, n), 0);
    chanq_client_out_consume(core, n);

    uint8_t buf[8192];
    chanq_owned_msg_t m[4];
    int r = cq_raw_read_packet(fd, buf, sizeof(buf), IT_TIMEOUT_MS, false);
    assert_true(r > 5);
    assert_int_equal(cq_decode_packet(buf, (size_t)r, false, m, 4), 1);
    assert_int_equal(m[0].msg_type, MT_AUTH);
    assert_int_equal(m[0].stub_id, 1);
    Channeldpb__AuthResultMessage *ar =
        chanq_sync_decode(&m[0], &channeldpb__auth_result_message__descriptor);
    assert_non_null(ar);
    assert_int_equal(ar->result, 0);
    uint32_t cid = ar->connid;
    chanq_unpack_free(ar);
    chanq_owned_msg_done(&m[0]);

    /* up: a compressible Snappy message reaches the owner decoded */
    char big[3000];
    memset(big, 'z', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(chanq_client_user_msg(core, 0, 0, 100, big, strlen(big)), 0);
    assert_int_equal(cq_raw_send_core(fd, core), 0);
    it_expect_user(g, 0, 100, 0, 0, cid, big);

    /* down: the server now compresses what it sends to this connection */
    it_sfwd(g, 0, BC_SINGLE, 101, cid, big);
    r = cq_raw_read_packet(fd, buf, sizeof(buf), IT_TIMEOUT_MS, false);
    assert_true(r > 5);
    assert_int_equal(buf[4], 1);
    assert_true(r < 1000); /* 3000 'z' compress well */
    assert_int_equal(cq_decode_packet(buf, (size_t)r, false, m, 4), 1);
    assert_int_equal(m[0].msg_type, 101);
    Channeldpb__ServerForwardMessage *f =
        chanq_sync_decode(&m[0], &channeldpb__server_forward_message__descriptor);
    assert_non_null(f);
    assert_int_equal(f->clientconnid, cid);
    assert_int_equal(f->payload.len, strlen(big));
    assert_memory_equal(f->payload.data, big, f->payload.len);
    chanq_unpack_free(f);
    chanq_owned_msg_done(&m[0]);
    close(fd);
    chanq_client_free(core);

    /* libchanq with compress on: the whole exchange works through the adapter */
    it_conn_t *c = it_connect(false, &o);
    it_auth(c, "snappy2", "lt");
    roundtrip(g, c, 102, big);
    it_sfwd(g, 0, BC_SINGLE, 103, c->id, big);
    it_expect_user(c, 0, 103, BC_SINGLE, 0, c->id, big);
}

/* ---- malformed input ---------------------------------------------------------------------- */

static void bad_raw(it_conn_t *g, it_conn_t *k, const void *bytes, size_t n, const char *reason,
                    const char *tag)
{
    int fd = cq_raw_connect(it_srv()->client_port);
    assert_true(fd >= 0);
    assert_int_equal(cq_raw_write(fd, bytes, n), 0);
    raw_expect_closed(fd);
    close(fd);
    it_log_expect(reason);
    roundtrip(g, k, 100, tag); /* the healthy connection still works */
}

#define WHY_MAGIC  "bad packet header: bad packet magic (expected 'C','H')"
#define WHY_ZERO   "bad packet header: packet length is zero"
#define WHY_BIG    "bad packet header: packet length exceeds the limit"
#define WHY_NOTPB  "body is not a channeldpb.Packet: body is not a valid protobuf message"
#define WHY_SNAPPY "bad snappy body: body is not a valid snappy block"

static void test_bad_input(void **state)
{
    it_need_visible_close("the test checks that each bad packet closes the client");
    it_start("--max-packet-size", "1024", NULL);
    it_conn_t *g = it_gowner();
    it_conn_t *k = it_client();
    roundtrip(g, k, 100, "before");
    int64_t closed0 = cq_testsrv_metric(it_srv(), "connection_closed");
    assert_int_equal(closed0, 0);
    it_log_mark();

    static const uint8_t magic[] = {0x58, 0x48, 0x00, 0x02, 0x00, 0x0a, 0x00};
    bad_raw(g, k, magic, sizeof(magic), WHY_MAGIC, "after-magic");
    static const uint8_t magic2[] = {0x43, 0x00, 0x00, 0x02, 0x00, 0x0a, 0x00};
    bad_raw(g, k, magic2, sizeof(magic2), WHY_MAGIC, "after-magic2");
    static const uint8_t zero[] = {0x43, 0x48, 0x00, 0x00, 0x00};
    bad_raw(g, k, zero, sizeof(zero), WHY_ZERO, "after-zero");
    static uint8_t big[5 + 2000];
    memset(big, 0, sizeof(big));
    big[0] = 0x43;
    big[1] = 0x48;
    big[2] = 2000 >> 8;
    big[3] = 2000 & 0xff;
    bad_raw(g, k, big, 5, WHY_BIG, "after-oversize-header");
    bad_raw(g, k, big, sizeof(big), WHY_BIG, "after-oversize");
    static const uint8_t notpb[] = {0x43, 0x48, 0x00, 0x03, 0x00, 0xff, 0xff, 0xff};
    bad_raw(g, k, notpb, sizeof(notpb), WHY_NOTPB, "after-notpb");
    /* Snappy (byte 4 = 1): uncompressed length 10, then a literal whose byte is missing */
    static const uint8_t badsnappy[] = {0x43, 0x48, 0x00, 0x02, 0x01, 0x0a, 0x00};
    bad_raw(g, k, badsnappy, sizeof(badsnappy), WHY_SNAPPY, "after-snappy");
    /* a bad packet, then a bad Snappy body, after a good one on an authenticated connection */
    const uint8_t *const victims[] = {notpb, badsnappy};
    const size_t vlen[] = {sizeof(notpb), sizeof(badsnappy)};
    const char *const vwhy[] = {WHY_NOTPB, WHY_SNAPPY};
    for (int i = 0; i < 2; i++) {
        it_conn_t *v = it_client();
        assert_int_equal(chanq_sync_write_raw(v->s, victims[i], vlen[i]), 0);
        it_expect_closed(v);
        char line[64];
        snprintf(line, sizeof(line), "closing conn %u (CLIENT, ", v->id);
        it_log_expect(line);
        it_log_expect(vwhy[i]);
        roundtrip(g, k, 100, "after-victim");
    }
    assert_int_equal(cq_testsrv_metric(it_srv(), "connection_closed"), 9);

    /* unknown channel: dropped, the connection stays */
    it_conn_t *u = it_client();
    assert_int_equal(chanq_sync_user_msg(u->s, 4242, 0, 100, "lost", 4), 0);
    it_log_expect("unknown channel 4242");
    roundtrip(g, u, 100, "u-still-here");
    roundtrip(g, k, 100, "after-unknown");

    /* a type the FSM forbids (CREATE_CHANNEL from a non-authoritative client): dropped */
    it_conn_t *f = it_client();
    assert_int_equal(chanq_sync_create_channel(f->s, 3, CT_PRIVATE, "nope", NULL), 0);
    it_log_expect("not allowed by the connection's FSM state");
    roundtrip(g, f, 100, "f-still-here");
    roundtrip(g, k, 100, "after-fsm");

    /* a packet split into 1-byte writes still parses */
    it_conn_t *s = it_client();
    chanq_client_t *core = chanq_sync_client(s->s);
    assert_int_equal(chanq_client_user_msg(core, 0, 0, 100, "split", 5), 0);
    const uint8_t *p;
    size_t n;
    assert_int_equal(chanq_client_out(core, &p, &n), 0);
    uint8_t copy[64];
    assert_true(n <= sizeof(copy));
    memcpy(copy, p, n);
    chanq_client_out_consume(core, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(chanq_sync_write_raw(s->s, copy + i, 1), 0);
    it_expect_user(g, 0, 100, 0, 0, s->id, "split");
    assert_true(cq_testsrv_running(it_srv()));
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_fsm_custom),
    IT_TEST(test_legacy_tag),
    IT_TEST(test_snappy_both_ways),
    IT_TEST(test_bad_input),
};

IT_MAIN(tests)
