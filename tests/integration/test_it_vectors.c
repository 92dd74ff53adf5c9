/* test_it_vectors.c - the §1.2 test vectors byte for byte against a real chanqd. */
#include "it_common.h"

#include <string.h>
#include <unistd.h>

static const uint8_t AUTH_REQ[] = {0x43, 0x48, 0x00, 0x14, 0x00, 0x0a, 0x12, 0x18, 0x01,
                                   0x20, 0x01, 0x2a, 0x0c, 0x0a, 0x04, 0x74, 0x65, 0x73,
                                   0x74, 0x12, 0x04, 0x74, 0x65, 0x73, 0x74};
static const uint8_t AUTH_RES[] = {0x43, 0x48, 0x00, 0x0a, 0x00, 0x0a, 0x08, 0x18,
                                   0x01, 0x20, 0x01, 0x2a, 0x02, 0x10, 0x01};
static const uint8_t SUB_RES[] = {0x43, 0x48, 0x00, 0x18, 0x00, 0x0a, 0x16, 0x20, 0x06, 0x2a,
                                  0x12, 0x08, 0x01, 0x12, 0x0a, 0x08, 0x01, 0x18, 0x14, 0x20,
                                  0x00, 0x28, 0x01, 0x30, 0x00, 0x18, 0x02, 0x20, 0x01};
static const uint8_t USER_HI[] = {0x43, 0x48, 0x00, 0x0c, 0x00, 0x0a, 0x0a, 0x20, 0x64,
                                  0x2a, 0x06, 0x08, 0x07, 0x12, 0x02, 0x68, 0x69};

static void expect_packet(int fd, const uint8_t *want, size_t n)
{
    uint8_t buf[512];
    int r = cq_raw_read_packet(fd, buf, sizeof(buf), IT_TIMEOUT_MS, false);
    if (r < 0)
        print_error("raw read: %s\n", cq_strerror(r));
    assert_int_equal(r, (int)n);
    assert_memory_equal(buf, want, n);
}

/* §1.2: AUTH request bytes in, AUTH result bytes out (fresh server: connId 1). Then a server
 * possesses GLOBAL and subscribes conn 1: the client receives the SUB_TO_CHANNEL result vector
 * (stub 0: it is the subject, not the sender) with the built-in hifi defaults. */
static void test_vector_auth_and_sub(void **state)
{
    it_start(NULL);
    int fd = cq_raw_connect(it_srv()->client_port);
    assert_true(fd >= 0);
    assert_int_equal(cq_raw_write(fd, AUTH_REQ, sizeof(AUTH_REQ)), 0);
    expect_packet(fd, AUTH_RES, sizeof(AUTH_RES));

    it_conn_t *g = it_gowner();
    assert_int_equal(g->id, 2);
    assert_int_equal(chanq_sync_sub_to_channel(g->s, 9, 0, 1, NULL), 0);
    /* The sender gets the same result with its stub echoed. */
    it_expect_sub(g, 0, 9, 1, CONN_CLIENT, CT_GLOBAL, 1);
    expect_packet(fd, SUB_RES, sizeof(SUB_RES));
    close(fd);
}

/* §1.2: the owner of GLOBAL receives user msg 100 from client conn 7 as
 * ServerForwardMessage{7, "hi"}, byte for byte. */
static void test_vector_user_forward(void **state)
{
    it_start(NULL);
    int fd = cq_raw_connect(it_srv()->server_port);
    assert_true(fd >= 0);
    chanq_client_t *core;
    chanq_opts_t o;
    chanq_opts_init(&o);
    assert_int_equal(chanq_client_new(&o, &core), 0);
    assert_int_equal(chanq_client_auth(core, 1, "server", ""), 0);
    assert_int_equal(cq_raw_send_core(fd, core), 0);
    uint8_t buf[1024];
    chanq_owned_msg_t msgs[8];
    int r = cq_raw_read_packet(fd, buf, sizeof(buf), IT_TIMEOUT_MS, false);
    assert_true(r > 0);
    int n = cq_decode_packet(buf, (size_t)r, false, msgs, 8);
    assert_int_equal(n, 1);
    assert_int_equal(msgs[0].msg_type, MT_AUTH);
    Channeldpb__AuthResultMessage *ar =
        chanq_sync_decode(&msgs[0], &channeldpb__auth_result_message__descriptor);
    assert_non_null(ar);
    assert_int_equal(ar->connid, 1);
    chanq_unpack_free(ar);
    chanq_owned_msg_done(&msgs[0]);

    /* Clients 2..7, each authenticated before the next connects (ids are sequential). */
    it_conn_t *c = NULL;
    for (uint32_t want = 2; want <= 7; want++) {
        c = it_client();
        assert_int_equal(c->id, want);
    }

    /* Possess GLOBAL; read until the creator's SUB result. */
    assert_int_equal(chanq_client_create_channel(core, 2, CT_GLOBAL, "", NULL), 0);
    assert_int_equal(cq_raw_send_core(fd, core), 0);
    bool got_sub = false, got_create = false;
    while (!got_sub) {
        r = cq_raw_read_packet(fd, buf, sizeof(buf), IT_TIMEOUT_MS, false);
        assert_true(r > 0);
        n = cq_decode_packet(buf, (size_t)r, false, msgs, 8);
        assert_true(n > 0);
        for (int i = 0; i < n; i++) {
            got_create |= msgs[i].msg_type == MT_CREATE && msgs[i].stub_id == 2;
            got_sub |= msgs[i].msg_type == MT_SUB;
            chanq_owned_msg_done(&msgs[i]);
        }
    }
    assert_true(got_create);

    assert_int_equal(chanq_sync_user_msg(c->s, 0, 0, 100, "hi", 2), 0);
    expect_packet(fd, USER_HI, sizeof(USER_HI));
    chanq_client_free(core);
    close(fd);
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_vector_auth_and_sub),
    IT_TEST(test_vector_user_forward),
};

IT_MAIN(tests)
