/* test_it_close.c - how the server ends a client connection, as each transport shows it. A
 * shared scenario: over TCP the close itself is checked; over ws and wss (the python3-websockets
 * bridge, which records the server's Close frame for each TCP connection) also the exact
 * WebSocket Close code (doc/transports.md, "Close codes"): a malformed channeld packet is a
 * protocol error (1002), a refusal under the server's rules a policy violation (1008), a
 * DISCONNECT a normal close (1000). */
#include "it_common.h"

#include "cq_err.h"

#include <string.h>
#include <unistd.h>

/* Packet framing is fine, the body is not a channeldpb.Packet. */
static const uint8_t NOT_PB[] = {0x43, 0x48, 0x00, 0x03, 0x00, 0xff, 0xff, 0xff};
/* "XH" instead of "CH". */
static const uint8_t BAD_MAGIC[] = {0x58, 0x48, 0x00, 0x02, 0x00, 0x0a, 0x00};

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

static bool over_ws(void)
{
    return strncmp(it_transport, "ws", 2) == 0;
}

static void test_bad_packet_is_1002(void **state)
{
    it_need_visible_close("the test checks how the server closes a client");
    it_start(NULL);
    /* an authenticated client sends a body that is not a Packet */
    it_conn_t *c = it_client();
    assert_int_equal(chanq_sync_write_raw(c->s, NOT_PB, sizeof(NOT_PB)), 0);
    it_expect_closed_ws(c, 1002);
    assert_true(cq_testsrv_log_wait(it_srv(), "body is not a channeldpb.Packet", IT_TIMEOUT_MS));

    /* a fresh connection's first bytes are not a packet header */
    int fd = cq_raw_connect(it_srv()->client_port);
    assert_true(fd >= 0);
    assert_int_equal(cq_raw_write(fd, BAD_MAGIC, sizeof(BAD_MAGIC)), 0);
    raw_expect_closed(fd);
    if (over_ws())
        assert_int_equal(it_ws_close_code(fd), 1002);
    close(fd);
}

static void test_auth_timeout_is_1008(void **state)
{
    it_need_visible_close("the test checks how the server closes a client");
    it_start("--auth-timeout-ms", "200", NULL);
    it_conn_t *c = it_connect(false, NULL);
    it_expect_closed_ws(c, 1008);
    assert_true(
        cq_testsrv_log_wait(it_srv(), "not authenticated within auth-timeout-ms", IT_TIMEOUT_MS));
}

static void test_disconnect_is_1000(void **state)
{
    it_need_visible_close("the test checks how the server closes a client");
    it_start(NULL);
    it_conn_t *s = it_server();
    it_conn_t *c = it_client();
    assert_int_equal(chanq_sync_disconnect(s->s, c->id), 0);
    it_expect_closed_ws(c, 1000);
    assert_true(cq_testsrv_log_wait(it_srv(), "DISCONNECT requested", IT_TIMEOUT_MS));
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_bad_packet_is_1002),
    IT_TEST(test_auth_timeout_is_1008),
    IT_TEST(test_disconnect_is_1000),
};

IT_MAIN(tests)
