/* test_client_io.c - the blocking (chanq_sync) and libuv (chanq_uv) adapters against a scripted
 * fake server on 127.0.0.1:0, run in a thread. The fake server itself uses the sans-I/O core.
 *
 * Fake server script, per received message:
 *   AUTH (1)  -> AuthResult{SUCCESSFUL, connId 1} with the request's stubId;
 *   100, 102  -> the same message echoed back;
 *   9 DISCONNECT -> orderly close (FIN);   101 -> abortive close (RST);
 *   undecodable input -> orderly close.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "chanq.h"
#include "chanq_sync.h"
#include "chanq_uv.h"

/* ---- fake server ------------------------------------------------------------------------- */

typedef struct fake {
    int lfd;
    uint16_t port;
    pthread_t th;
    chanq_client_t *core;
    int action; /* 0 keep going, 1 FIN, 2 RST */
} fake_t;

static void fake_on_msg(void *ud, const chanq_msg_t *m)
{
    fake_t *f = ud;
    if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__AUTH) {
        Channeldpb__AuthResultMessage ar = CHANNELDPB__AUTH_RESULT_MESSAGE__INIT;
        ar.connid = 1;
        chanq_client_send(f->core, 0, 0, m->stub_id, 1, &ar.base);
    } else if (m->msg_type == 100 || m->msg_type == 102) {
        chanq_client_send_raw(f->core, m->channel_id, m->broadcast, m->stub_id, m->msg_type,
                              m->body, m->body_len);
    } else if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__DISCONNECT) {
        f->action = 1;
    } else if (m->msg_type == 101) {
        f->action = 2;
    }
}

static int fake_flush(fake_t *f, int fd)
{
    const uint8_t *p;
    size_t n;
    if (chanq_client_out(f->core, &p, &n) < 0)
        return -1;
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        chanq_client_out_consume(f->core, (size_t)k);
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    static __thread uint8_t buf[65536];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0)
            break;
        int r = chanq_client_feed(f->core, buf, (size_t)n);
        if (fake_flush(f, fd) < 0 || r < 0 || f->action == 1)
            break;
        if (f->action == 2) {
            struct linger lg = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            break;
        }
    }
    close(fd);
    return NULL;
}

static fake_t *fake_start(void)
{
    fake_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    chanq_opts_t o;
    chanq_opts_init(&o);
    o.on_message = fake_on_msg;
    o.ud = f;
    assert_int_equal(chanq_client_new(&o, &f->core), 0);
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(f->lfd >= 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(f->lfd, 4), 0);
    socklen_t al = sizeof(a);
    assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &al), 0);
    f->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
    return f;
}

static void fake_stop(fake_t *f)
{
    pthread_join(f->th, NULL);
    close(f->lfd);
    chanq_client_free(f->core);
    free(f);
}

/* ---- chanq_sync -------------------------------------------------------------------------- */

static chanq_sync_t *sync_connect(fake_t *f)
{
    chanq_sync_t *c = NULL;
    assert_int_equal(chanq_sync_connect("127.0.0.1", f->port, NULL, 2000, &c), 0);
    assert_non_null(c);
    return c;
}

static void test_sync_auth_echo_eof(void **state)
{
    (void)state;
    fake_t *f = fake_start();
    chanq_sync_t *c = sync_connect(f);
    int result = -1;
    uint32_t conn = 0;
    assert_int_equal(chanq_sync_auth(c, "test", "test", 2000, &result, &conn), 0);
    assert_int_equal(result, 0);
    assert_int_equal(conn, 1);
    assert_int_equal(chanq_client_conn_id(chanq_sync_client(c)), 1);
    assert_int_equal(chanq_client_stub_count(chanq_sync_client(c)), 0);

    chanq_owned_msg_t m;
    assert_int_equal(chanq_sync_recv(c, &m, 50), CQ_ETIMEOUT);
    assert_int_equal(chanq_sync_user_msg(c, 4, 2, 100, "ping", 4), 0);
    assert_int_equal(chanq_sync_recv(c, &m, 2000), 0);
    assert_int_equal(m.msg_type, 100);
    assert_int_equal(m.channel_id, 4);
    assert_int_equal(m.broadcast, 2);
    assert_int_equal(m.body_len, 4);
    assert_memory_equal(m.body, "ping", 4);
    chanq_owned_msg_done(&m);
    assert_null(m.body);

    /* recv_type skips the 100 and returns the 102. */
    assert_int_equal(chanq_sync_user_msg(c, 0, 0, 100, "a", 1), 0);
    assert_int_equal(chanq_sync_user_msg(c, 0, 0, 102, "b", 1), 0);
    assert_int_equal(chanq_sync_recv_type(c, 102, &m, 2000), 0);
    assert_int_equal(m.msg_type, 102);
    assert_memory_equal(m.body, "b", 1);
    chanq_owned_msg_done(&m);

    /* Still open, then closed by the server on DISCONNECT. */
    assert_int_equal(chanq_sync_is_closed(c, 50), 0);
    assert_int_equal(chanq_sync_disconnect(c, 1), 0);
    assert_int_equal(chanq_sync_is_closed(c, 2000), 1);
    int r = chanq_sync_recv(c, &m, 100);
    assert_int_equal(r, CHANQ_SYNC_EOF);
    assert_true(chanq_sync_err_is_closed(r));
    assert_false(chanq_sync_err_is_closed(CQ_ETIMEOUT));
    chanq_sync_free(c);
    fake_stop(f);
}

static void test_sync_messages_before_eof(void **state)
{
    (void)state;
    fake_t *f = fake_start();
    chanq_sync_t *c = sync_connect(f);
    /* Two echoes and the close arrive together: both messages come out before EOF. */
    chanq_client_t *core = chanq_sync_client(c);
    assert_int_equal(chanq_client_user_msg(core, 0, 0, 100, "1", 1), 0);
    assert_int_equal(chanq_client_user_msg(core, 0, 0, 100, "2", 1), 0);
    assert_int_equal(chanq_client_disconnect(core, 1), 0);
    assert_int_equal(chanq_sync_flush(c, 2000), 0);
    assert_int_equal(chanq_sync_is_closed(c, 2000), 1);
    assert_int_equal(chanq_sync_queued(c), 2);
    chanq_owned_msg_t m;
    assert_int_equal(chanq_sync_recv(c, &m, 0), 0);
    assert_memory_equal(m.body, "1", 1);
    chanq_owned_msg_done(&m);
    assert_int_equal(chanq_sync_recv(c, &m, 0), 0);
    assert_memory_equal(m.body, "2", 1);
    chanq_owned_msg_done(&m);
    assert_int_equal(chanq_sync_recv(c, &m, 0), CHANQ_SYNC_EOF);
    chanq_sync_free(c);
    fake_stop(f);
}

static void test_sync_malformed_closes(void **state)
{
    (void)state;
    fake_t *f = fake_start();
    chanq_sync_t *c = sync_connect(f);
    static const uint8_t junk[] = {'X', 'X', 0, 1, 0, 0};
    assert_int_equal(chanq_sync_write_raw(c, junk, sizeof(junk)), 0);
    assert_int_equal(chanq_sync_is_closed(c, 2000), 1);
    chanq_sync_free(c);
    fake_stop(f);
}

static void test_sync_reset(void **state)
{
    (void)state;
    fake_t *f = fake_start();
    chanq_sync_t *c = sync_connect(f);
    assert_int_equal(chanq_sync_user_msg(c, 0, 0, 101, NULL, 0), 0);
    chanq_owned_msg_t m;
    int r = chanq_sync_recv(c, &m, 2000);
    assert_int_equal(r, -ECONNRESET);
    assert_true(chanq_sync_err_is_closed(r));
    assert_int_equal(chanq_sync_is_closed(c, 0), 1);
    chanq_sync_free(c);
    fake_stop(f);
}

static void test_sync_bulk(void **state)
{
    (void)state;
    enum { N = 40, PL = 30000 };
    fake_t *f = fake_start();
    chanq_sync_t *c = sync_connect(f);
    static uint8_t payload[PL];
    chanq_client_t *core = chanq_sync_client(c);
    for (int i = 0; i < N; i++) {
        memset(payload, i, PL);
        assert_int_equal(chanq_client_user_msg(core, (uint32_t)i, 0, 100, payload, PL), 0);
    }
    /* 1.2 MB each way: the flush must keep reading while the socket is full. */
    assert_int_equal(chanq_sync_flush(c, 5000), 0);
    for (int i = 0; i < N; i++) {
        chanq_owned_msg_t m;
        assert_int_equal(chanq_sync_recv(c, &m, 5000), 0);
        assert_int_equal(m.channel_id, (uint32_t)i);
        assert_int_equal(m.body_len, PL);
        assert_int_equal(m.body[0], i);
        assert_int_equal(m.body[PL - 1], i);
        chanq_owned_msg_done(&m);
    }
    assert_int_equal(chanq_sync_disconnect(c, 0), 0);
    assert_int_equal(chanq_sync_is_closed(c, 2000), 1);
    chanq_sync_free(c);
    fake_stop(f);
}

static void test_sync_connect_refused(void **state)
{
    (void)state;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t al = sizeof(a);
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &al), 0);
    close(s); /* nothing listens on that port now */
    chanq_sync_t *c = NULL;
    assert_int_equal(chanq_sync_connect("127.0.0.1", ntohs(a.sin_port), NULL, 1000, &c),
                     -ECONNREFUSED);
    assert_null(c);
    assert_int_equal(chanq_sync_connect(NULL, 1, NULL, 1000, &c), -EINVAL);
}

/* ---- chanq_uv ---------------------------------------------------------------------------- */

typedef struct uv_state {
    int connected, closed, close_err, auth_ok, echoes;
} uv_state_t;

static void uv_on_connect(chanq_uv_t *c, int status, void *ud)
{
    uv_state_t *s = ud;
    assert_int_equal(status, 0);
    s->connected++;
    assert_int_equal(chanq_client_auth(chanq_uv_client(c), 1, "test", "test"), 0);
}

static void uv_on_message(chanq_uv_t *c, const chanq_msg_t *m, void *ud)
{
    uv_state_t *s = ud;
    if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__AUTH) {
        s->auth_ok = chanq_client_conn_id(chanq_uv_client(c)) == 1;
        for (int i = 0; i < 3; i++)
            assert_int_equal(chanq_uv_send_raw(c, 7, 0, 0, 100, "echo", 4), 0);
    } else if (m->msg_type == 100) {
        assert_int_equal(m->channel_id, 7);
        assert_int_equal(m->body_len, 4);
        if (++s->echoes == 3)
            chanq_uv_close(c);
    }
}

static void uv_on_close(chanq_uv_t *c, int err, void *ud)
{
    uv_state_t *s = ud;
    (void)c;
    s->closed++;
    s->close_err = err;
}

static void test_uv_roundtrip(void **state)
{
    (void)state;
    fake_t *f = fake_start();
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct sockaddr_in a;
    assert_int_equal(uv_ip4_addr("127.0.0.1", f->port, &a), 0);
    uv_state_t s = {0};
    chanq_uv_cbs_t cbs = {uv_on_connect, uv_on_message, uv_on_close};
    chanq_uv_t *c = NULL;
    assert_int_equal(chanq_uv_connect(&loop, (struct sockaddr *)&a, NULL, &cbs, &s, &c), 0);
    assert_non_null(c);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(s.connected, 1);
    assert_true(s.auth_ok);
    assert_int_equal(s.echoes, 3);
    assert_int_equal(s.closed, 1);
    assert_int_equal(s.close_err, 0);
    assert_int_equal(uv_loop_close(&loop), 0);
    fake_stop(f); /* our close ends the fake server's read loop */
}

static void uv_on_close_eof(chanq_uv_t *c, int err, void *ud)
{
    uv_on_close(c, err, ud);
}

static void uv_on_message_disc(chanq_uv_t *c, const chanq_msg_t *m, void *ud)
{
    (void)ud;
    if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__AUTH)
        assert_int_equal(chanq_client_disconnect(chanq_uv_client(c), 1), 0);
}

static void test_uv_peer_close(void **state)
{
    (void)state;
    fake_t *f = fake_start();
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct sockaddr_in a;
    assert_int_equal(uv_ip4_addr("127.0.0.1", f->port, &a), 0);
    uv_state_t s = {0};
    chanq_uv_cbs_t cbs = {uv_on_connect, uv_on_message_disc, uv_on_close_eof};
    chanq_uv_t *c = NULL;
    assert_int_equal(chanq_uv_connect(&loop, (struct sockaddr *)&a, NULL, &cbs, &s, &c), 0);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(s.closed, 1);
    assert_int_equal(s.close_err, UV_EOF);
    assert_int_equal(uv_loop_close(&loop), 0);
    fake_stop(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_auth_echo_eof),
        cmocka_unit_test(test_sync_messages_before_eof),
        cmocka_unit_test(test_sync_malformed_closes),
        cmocka_unit_test(test_sync_reset),
        cmocka_unit_test(test_sync_bulk),
        cmocka_unit_test(test_sync_connect_refused),
        cmocka_unit_test(test_uv_roundtrip),
        cmocka_unit_test(test_uv_peer_close),
    };
    return cmocka_run_group_tests_name("client_io", tests, NULL, NULL);
}
