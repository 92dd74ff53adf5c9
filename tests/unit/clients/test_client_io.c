/* test_client_io.c - the blocking (chanq_sync) and libuv (chanq_uv) adapters against a scripted
 * fake server on 127.0.0.1:0, run in a thread. The fake server itself uses the sans-I/O core.
 *
 * Fake server script, per received message:
 *   AUTH (1)  -> AuthResult{SUCCESSFUL, connId 1 or its own} with the request's stubId
 *                (INVALID_LT when it refuses);
 *   SUB (6)   -> SubscribedToChannelResult{its connId, the request's options} on the channel;
 *   100, 102  -> the same message echoed back;
 *   9 DISCONNECT -> orderly close (FIN);   101 -> abortive close (RST);
 *   undecodable input -> orderly close.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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
    int action;       /* 0 keep going, 1 FIN, 2 RST */
    uint32_t conn_id; /* what AUTH answers (1 unless set before the client connects) */
    bool refuse;      /* AUTH answers INVALID_LT */
    char auth[64];    /* "pit/lt" of the last AUTH */
} fake_t;

static void fake_auth(fake_t *f, const chanq_msg_t *m)
{
    Channeldpb__AuthMessage *am =
        chanq_unpack(&channeldpb__auth_message__descriptor, m->body, m->body_len);
    if (am)
        snprintf(f->auth, sizeof(f->auth), "%s/%s", am->playeridentifiertoken, am->logintoken);
    chanq_unpack_free(am);
    Channeldpb__AuthResultMessage ar = CHANNELDPB__AUTH_RESULT_MESSAGE__INIT;
    ar.connid = f->refuse ? 0 : f->conn_id;
    ar.result = f->refuse ? CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__INVALID_LT
                          : CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__SUCCESSFUL;
    chanq_client_send(f->core, 0, 0, m->stub_id, 1, &ar.base);
}

static void fake_sub(fake_t *f, const chanq_msg_t *m)
{
    Channeldpb__SubscribedToChannelMessage *sm =
        chanq_unpack(&channeldpb__subscribed_to_channel_message__descriptor, m->body, m->body_len);
    if (!sm)
        return;
    Channeldpb__SubscribedToChannelResultMessage r =
        CHANNELDPB__SUBSCRIBED_TO_CHANNEL_RESULT_MESSAGE__INIT;
    r.connid = f->conn_id;
    r.suboptions = sm->suboptions;
    r.conntype = CHANNELDPB__CONNECTION_TYPE__CLIENT;
    r.channeltype = CHANNELDPB__CHANNEL_TYPE__SUBWORLD;
    chanq_client_send(f->core, m->channel_id, 0, m->stub_id, 6, &r.base);
    chanq_unpack_free(sm);
}

static void fake_on_msg(void *ud, const chanq_msg_t *m)
{
    fake_t *f = ud;
    if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__AUTH) {
        fake_auth(f, m);
    } else if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__SUB_TO_CHANNEL) {
        fake_sub(f, m);
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

static fake_t *fake_start_as(uint32_t conn_id, bool refuse)
{
    fake_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->conn_id = conn_id;
    f->refuse = refuse;
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

static fake_t *fake_start(void)
{
    return fake_start_as(1, false);
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

/* ---- chanq_sync moving along a list ------------------------------------------------------- */

typedef struct moves {
    int n;
    chanq_moved_t last;
} moves_t;

static void note_move(void *ud, const chanq_moved_t *ev)
{
    moves_t *m = ud;
    m->n++;
    m->last = *ev;
    m->last.from_addr = m->last.to_addr = NULL; /* borrowed for the callback only */
}

static chanq_sync_t *connect_list(fake_t **f, size_t n, uint16_t dead_port, uint32_t max_tries,
                                  moves_t *mv)
{
    char list[128] = "";
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(list);
        snprintf(list + len, sizeof(list) - len, "%s127.0.0.1:%u", i ? "," : "",
                 f[i] ? f[i]->port : dead_port);
    }
    chanq_move_opts_t mo;
    chanq_move_opts_init(&mo);
    mo.backoff_min_ms = 10;
    mo.max_tries = max_tries;
    mo.on_moved = note_move;
    mo.ud = mv;
    chanq_sync_t *c = NULL;
    assert_int_equal(chanq_sync_connect_list(list, NULL, &mo, 2000, &c), 0);
    return c;
}

/* A port nothing listens on. */
static uint16_t dead_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t al = sizeof(a);
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &al), 0);
    close(s);
    return ntohs(a.sin_port);
}

/* The next message is the SUB result of channel 7 for conn_id, with the options packed as
 * `want` (stub 0: a move's own SUB). */
static void expect_sub_result(chanq_sync_t *c, uint32_t stub, uint32_t conn_id,
                              const chanq_sub_t *want)
{
    chanq_owned_msg_t m;
    assert_int_equal(chanq_sync_recv(c, &m, 2000), 0);
    assert_int_equal(m.msg_type, 6);
    assert_int_equal(m.channel_id, 7);
    assert_int_equal(m.stub_id, stub);
    Channeldpb__SubscribedToChannelResultMessage *r =
        chanq_sync_decode(&m, &channeldpb__subscribed_to_channel_result_message__descriptor);
    assert_non_null(r);
    assert_int_equal(r->connid, conn_id);
    uint8_t packed[64];
    size_t n = protobuf_c_message_get_packed_size(&r->suboptions->base);
    assert_true(n <= sizeof(packed));
    protobuf_c_message_pack(&r->suboptions->base, packed);
    assert_int_equal(n, want->opts_len);
    assert_memory_equal(packed, want->opts, n);
    chanq_unpack_free(r);
    chanq_owned_msg_done(&m);
}

/* f1 resets the connection while a call waits: the call returns CHANQ_SYNC_MOVED, the client is
 * on f2, authenticated with the same credentials and subscribed again with the same options;
 * then f2 resets it during a recv, which carries on to f3 and returns f3's SUB result. */
static void test_sync_moves(void **state)
{
    (void)state;
    fake_t *f[3] = {fake_start_as(1, false), fake_start_as(0x10000002u, false),
                    fake_start_as(0x18000003u, false)};
    moves_t mv = {0};
    chanq_sync_t *c = connect_list(f, 3, 0, 0, &mv);
    const chanq_move_t *e = chanq_sync_move(c);
    assert_non_null(e);
    assert_int_equal(chanq_move_target(e), 0);
    int result = -1;
    assert_int_equal(chanq_sync_auth(c, "pit-x", "lt-y", 2000, &result, NULL), 0);
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    o.has_dataaccess = 1;
    o.dataaccess = CHANNELDPB__CHANNEL_DATA_ACCESS__READ_ACCESS;
    o.has_fanoutintervalms = 1;
    o.fanoutintervalms = 33;
    assert_int_equal(chanq_sync_sub_to_channel(c, 5, 7, 0, &o), 0);
    chanq_sub_t want = {7, 3, NULL, 0};
    uint8_t packed[64];
    want.opts_len = protobuf_c_message_get_packed_size(&o.base);
    protobuf_c_message_pack(&o.base, packed);
    want.opts = packed;
    expect_sub_result(c, 5, 1, &want);
    assert_non_null(chanq_client_sub_find(chanq_sync_client(c), 7));

    chanq_owned_msg_t m;
    assert_int_equal(chanq_sync_call(c, 9, 0, 101, NULL, &m, 2000), CHANQ_SYNC_MOVED);
    assert_int_equal(mv.n, 1);
    assert_int_equal(mv.last.from, 0);
    assert_int_equal(mv.last.to, 1);
    assert_int_equal(mv.last.old_conn_id, 1);
    assert_int_equal(mv.last.conn_id, 0x10000002u);
    assert_int_equal(mv.last.resubscribed, 1);
    assert_int_equal(mv.last.reason, -ECONNRESET);
    assert_string_equal(f[1]->auth, "pit-x/lt-y");
    assert_int_equal(chanq_client_conn_id(chanq_sync_client(c)), 0x10000002u);
    expect_sub_result(c, 0, 0x10000002u, &want);

    assert_int_equal(chanq_sync_user_msg(c, 0, 0, 101, NULL, 0), 0); /* f2 resets */
    expect_sub_result(c, 0, 0x18000003u, &want);                     /* the recv moved to f3 */
    assert_int_equal(mv.n, 2);
    assert_int_equal(mv.last.from, 1);
    assert_int_equal(mv.last.to, 2);
    assert_int_equal(mv.last.old_conn_id, 0x10000002u);
    assert_int_equal(mv.last.conn_id, 0x18000003u);
    assert_string_equal(f[2]->auth, "pit-x/lt-y");
    assert_int_equal(chanq_sync_user_msg(c, 4, 0, 100, "here", 4), 0);
    assert_int_equal(chanq_sync_recv(c, &m, 2000), 0);
    assert_int_equal(m.msg_type, 100);
    assert_memory_equal(m.body, "here", 4);
    chanq_owned_msg_done(&m);
    assert_int_equal(chanq_move_moves(e), 2);
    assert_int_equal(chanq_move_target(e), 2);
    chanq_sync_free(c);
    for (int i = 0; i < 3; i++)
        fake_stop(f[i]);
}

/* The move tries a dead address, then f2 refuses the AUTH: the engine gives up with CQ_EAUTH,
 * which every operation returns from then on. With max_tries 1 and the dead address alone
 * after f1, the error is the refused connection. A one-address list that never answered fails
 * to connect with the refusal. */
static void test_sync_move_gives_up(void **state)
{
    (void)state;
    uint16_t dead = dead_port();
    for (int round = 0; round < 2; round++) {
        fake_t *f[3] = {fake_start(), NULL, round == 0 ? fake_start_as(2, true) : NULL};
        moves_t mv = {0};
        chanq_sync_t *c = connect_list(f, round == 0 ? 3 : 2, dead, round == 0 ? 0 : 1, &mv);
        assert_int_equal(chanq_sync_auth(c, "pit", "lt", 2000, NULL, NULL), 0);
        assert_int_equal(chanq_sync_user_msg(c, 0, 0, 101, NULL, 0), 0);
        chanq_owned_msg_t m;
        int want = round == 0 ? CQ_EAUTH : -ECONNREFUSED;
        assert_int_equal(chanq_sync_recv(c, &m, 2000), want);
        assert_int_equal(chanq_sync_user_msg(c, 0, 0, 100, "x", 1), want);
        assert_int_equal(chanq_sync_recv(c, &m, 0), want);
        assert_int_equal(mv.n, 0);
        assert_int_equal(chanq_move_state(chanq_sync_move(c)), CHANQ_MOVE_FAILED);
        chanq_sync_free(c);
        for (int i = 0; i < 3; i++)
            if (f[i])
                fake_stop(f[i]);
    }
    char list[32];
    snprintf(list, sizeof(list), "127.0.0.1:%u", dead);
    chanq_sync_t *c = NULL;
    chanq_move_opts_t mo;
    chanq_move_opts_init(&mo);
    mo.max_tries = 2;
    mo.backoff_min_ms = 1;
    assert_int_equal(chanq_sync_connect_list(list, NULL, &mo, 2000, &c), -ECONNREFUSED);
    assert_null(c);
    assert_int_equal(chanq_sync_connect_list("127.0.0.1", NULL, NULL, 2000, &c), -EINVAL);
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

/* ---- chanq_uv moving along a list -------------------------------------------------------- */

typedef struct uvm {
    int connected, connect_status, closed, close_err, echoes;
    moves_t mv;
    uint32_t last_sub_conn; /* connId of the last SUB result */
} uvm_t;

static void uvm_on_connect(chanq_uv_t *c, int status, void *ud)
{
    uvm_t *s = ud;
    s->connected++;
    s->connect_status = status;
    if (status == 0)
        assert_int_equal(chanq_client_auth(chanq_uv_client(c), 1, "pit-u", "lt-u"), 0);
}

/* AUTH result: SUB itself to 7; its first SUB result: f1 is told to reset; a SUB result after
 * the move: an echo; the echo: close. */
static void uvm_on_message(chanq_uv_t *c, const chanq_msg_t *m, void *ud)
{
    uvm_t *s = ud;
    chanq_client_t *core = chanq_uv_client(c);
    if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__AUTH) {
        Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
        o.has_fanoutintervalms = 1;
        o.fanoutintervalms = 21;
        assert_int_equal(chanq_client_sub_to_channel(core, 3, 7, 0, &o), 0);
    } else if (m->msg_type == CHANNELDPB__MESSAGE_TYPE__SUB_TO_CHANNEL) {
        Channeldpb__SubscribedToChannelResultMessage *r = chanq_unpack(
            &channeldpb__subscribed_to_channel_result_message__descriptor, m->body, m->body_len);
        assert_non_null(r);
        s->last_sub_conn = r->connid;
        assert_int_equal(r->suboptions->fanoutintervalms, 21);
        chanq_unpack_free(r);
        if (s->mv.n == 0)
            assert_int_equal(chanq_uv_send_raw(c, 0, 0, 0, 101, NULL, 0), 0);
        else
            assert_int_equal(chanq_uv_send_raw(c, 7, 0, 0, 100, "moved", 5), 0);
    } else if (m->msg_type == 100) {
        s->echoes++;
        chanq_uv_close(c);
    }
}

static void uvm_on_close(chanq_uv_t *c, int err, void *ud)
{
    uvm_t *s = ud;
    (void)c;
    s->closed++;
    s->close_err = err;
}

static void uvm_run(const char *list, uint32_t max_tries, uvm_t *s)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    chanq_move_opts_t mo;
    chanq_move_opts_init(&mo);
    mo.backoff_min_ms = 10;
    mo.max_tries = max_tries;
    mo.on_moved = note_move;
    mo.ud = &s->mv;
    chanq_uv_cbs_t cbs = {uvm_on_connect, uvm_on_message, uvm_on_close};
    chanq_uv_t *c = NULL;
    assert_int_equal(chanq_uv_connect_list(&loop, list, NULL, &mo, &cbs, s, &c), 0);
    assert_non_null(chanq_uv_move(c));
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* f1 resets the connection once subscribed: the client moves to f2 (no close), authenticates
 * with the same credentials, subscribes to 7 again with the same options, and echoes there. */
static void test_uv_moves(void **state)
{
    (void)state;
    fake_t *f1 = fake_start(), *f2 = fake_start_as(0x10000002u, false);
    char list[64];
    snprintf(list, sizeof(list), "127.0.0.1:%u,127.0.0.1:%u", f1->port, f2->port);
    uvm_t s = {0};
    uvm_run(list, 0, &s);
    assert_int_equal(s.connected, 1);
    assert_int_equal(s.connect_status, 0);
    assert_int_equal(s.mv.n, 1);
    assert_int_equal(s.mv.last.from, 0);
    assert_int_equal(s.mv.last.to, 1);
    assert_int_equal(s.mv.last.old_conn_id, 1);
    assert_int_equal(s.mv.last.conn_id, 0x10000002u);
    assert_int_equal(s.mv.last.resubscribed, 1);
    assert_int_equal(s.mv.last.reason, UV_ECONNRESET);
    assert_string_equal(f2->auth, "pit-u/lt-u");
    assert_int_equal(s.last_sub_conn, 0x10000002u);
    assert_int_equal(s.echoes, 1);
    assert_int_equal(s.closed, 1);
    assert_int_equal(s.close_err, 0);
    fake_stop(f1);
    fake_stop(f2);
}

/* After f1's reset the only other address refuses: with max_tries 1 the client closes with that
 * error. A list whose one address never answers reports it through on_connect, then on_close. */
static void test_uv_move_gives_up(void **state)
{
    (void)state;
    uint16_t dead = dead_port();
    fake_t *f1 = fake_start();
    char list[64];
    snprintf(list, sizeof(list), "127.0.0.1:%u,127.0.0.1:%u", f1->port, dead);
    uvm_t s = {0};
    uvm_run(list, 1, &s);
    assert_int_equal(s.connected, 1);
    assert_int_equal(s.mv.n, 0);
    assert_int_equal(s.closed, 1);
    assert_int_equal(s.close_err, UV_ECONNREFUSED);
    fake_stop(f1);
    snprintf(list, sizeof(list), "127.0.0.1:%u", dead);
    memset(&s, 0, sizeof(s));
    uvm_run(list, 2, &s);
    assert_int_equal(s.connected, 1);
    assert_int_equal(s.connect_status, UV_ECONNREFUSED);
    assert_int_equal(s.closed, 1);
    assert_int_equal(s.close_err, UV_ECONNREFUSED);
    uv_loop_t loop;
    chanq_uv_t *c = NULL;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(chanq_uv_connect_list(&loop, "localhost:1", NULL, NULL, NULL, NULL, &c),
                     UV_EINVAL);
    assert_null(c);
    assert_int_equal(uv_loop_close(&loop), 0);
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
        cmocka_unit_test(test_sync_moves),
        cmocka_unit_test(test_sync_move_gives_up),
        cmocka_unit_test(test_uv_roundtrip),
        cmocka_unit_test(test_uv_peer_close),
        cmocka_unit_test(test_uv_moves),
        cmocka_unit_test(test_uv_move_gives_up),
    };
    return cmocka_run_group_tests_name("client_io", tests, NULL, NULL);
}
