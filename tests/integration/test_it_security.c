/* test_it_security.c - issue 10's authentication hardening against a real chanqd: the dev
 * provider needs --dev off loopback, the per-address failure budget over reconnects and across
 * ports, the per-connection count a success resets, SIGHUP reloads of the token and permission
 * files, and the MQ HTTP API answering unauthenticated uploads from the head (memory bounded).
 */
#include "it_common.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char TOKENS[] = "{\"alice\": \"secret\", \"bob\": \"pw\"}\n";
static const char PERMS[] =
    "{\"1\": {\"token\": \"s1\", \"admin\": true, \"produce\": [\"*\"], \"consume\": [\"*\"]}}";

static int auth_result(it_conn_t *c, const char *pit, const char *lt)
{
    int res = -1;
    uint32_t cid = 0;
    int r = chanq_sync_auth(c->s, pit, lt, IT_TIMEOUT_MS, &res, &cid);
    assert_int_equal(r, 0);
    return res;
}

/* ---- a minimal HTTP exchange on the MQ HTTP port ------------------------------------------- */

/* Reads what the server sends until it closes or the head and Content-Length body are in; the
 * text (NUL-terminated) goes to out. Returns the status, or -1 when nothing came. */
static int http_read(int fd, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    while (n + 1 < cap) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, IT_TIMEOUT_MS) <= 0)
            break;
        ssize_t k = read(fd, out + n, cap - 1 - n);
        if (k <= 0)
            break;
        n += (size_t)k;
        out[n] = '\0';
        const char *end = strstr(out, "\r\n\r\n"), *cl = strstr(out, "Content-Length: ");
        if (end && cl && n >= (size_t)(end + 4 - out) + strtoul(cl + 16, NULL, 10))
            break;
    }
    int status = -1;
    if (sscanf(out, "HTTP/1.1 %d", &status) != 1)
        return -1;
    return status;
}

static int http_open(void)
{
    int fd = cq_raw_connect(it_srv()->mq_http_port);
    assert_true(fd >= 0);
    return fd;
}

/* One request on a new connection: returns the status, the response text in out. */
static int http_once(const char *req, char *out, size_t cap)
{
    int fd = http_open();
    assert_int_equal(cq_raw_write(fd, req, strlen(req)), 0);
    int st = http_read(fd, out, cap);
    close(fd);
    return st;
}

/* ---- dev provider ------------------------------------------------------------------------- */

/* Without --dev, the dev provider may not listen beyond loopback: chanqd exits with one line
 * saying why and what to do. With --dev it starts. */
static void test_dev_provider_needs_dev(void **state)
{
    (void)state;
    cq_testsrv_t s;
    assert_int_equal(cq_testsrv_init(&s), 0);
    const char *const args[] = {"--client-addr", "0.0.0.0:0", NULL};
    assert_int_equal(cq_testsrv_start(&s, args), -ECHILD);
    assert_true(cq_testsrv_log_wait(
        &s,
        "chanqd: --auth-provider=dev accepts every login and --client-addr 0.0.0.0:0 is not a "
        "loopback address: configure --auth-provider=file with --auth-token-file, keep the "
        "listeners on loopback, or add --dev\n",
        IT_TIMEOUT_MS));
    assert_int_equal(s.exit_status, 2);
    cq_testsrv_stop(&s);
    it_start("--client-addr", "0.0.0.0:0", "--dev", NULL);
    it_conn_t *c = it_connect(false, NULL);
    assert_int_equal(auth_result(c, "anyone", "anything"), 0);
}

/* ---- the per-address budget --------------------------------------------------------------- */

/* N wrong guesses, each on a new connection from 127.0.0.1: the (N+1)th AUTH is refused with
 * INVALID_LT and a close although its token is right; the MQ HTTP API (same budget) refuses
 * the address too; the metrics count exactly that. */
static void test_budget_over_reconnects(void **state)
{
    (void)state;
    const char *tok = it_file("tokens.json", TOKENS);
    const char *perms = it_file("perms.json", PERMS);
    it_start("--auth-provider", "file", "--auth-token-file", tok, "--mq-permissions-file", perms,
             "--auth-addr-max-failures", "4", "--auth-addr-backoff-ms", "600000", NULL);
    for (int i = 0; i < 4; i++) {
        it_conn_t *c = it_connect(false, NULL);
        assert_int_equal(auth_result(c, "alice", "guess"), 2);
        it_close(c);
    }
    it_conn_t *c = it_connect(false, NULL);
    assert_int_equal(auth_result(c, "alice", "secret"), 2);
    it_expect_closed(c);
    assert_true(cq_testsrv_log_wait(it_srv(), "too many failed authentications from its address",
                                    IT_TIMEOUT_MS));
    char out[4096];
    assert_int_equal(http_once("GET /v1/topics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               "Authorization: Bearer 1:s1\r\n\r\n",
                               out, sizeof(out)),
                     429);
    assert_non_null(strstr(out, "{\"err_code\":6,\"err_msg\":\"too many failed authentications "
                                "from this address, retry later\"}"));
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_auth_addr_refused_total"), 2);
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_auth_addr_blocks_total"), 1);
    assert_int_equal(cq_testsrv_metric(it_srv(), "auth_failed"), 5);
}

/* A client FSM that lets an authenticated connection AUTH again (the built-in ones do not). */
static const char REAUTH_FSM[] =
    "{\"States\": [{\"Name\": \"INIT\", \"MsgTypeWhitelist\": \"1\", \"MsgTypeBlacklist\": \"\"},"
    " {\"Name\": \"OPEN\", \"MsgTypeWhitelist\": \"1-65535\", \"MsgTypeBlacklist\": \"\"}],"
    " \"InitState\": \"INIT\","
    " \"Transitions\": [{\"FromState\": \"INIT\", \"ToState\": \"OPEN\", \"MsgType\": 1}]}";

/* The per-connection count (--max-failed-auth) restarts at a successful AUTH: fail, succeed,
 * fail keeps a limit of 2 from closing; two more failures then do. */
static void test_success_resets_conn_count(void **state)
{
    (void)state;
    const char *tok = it_file("tokens.json", TOKENS);
    const char *fsm = it_file("fsm.json", REAUTH_FSM);
    it_start("--auth-provider", "file", "--auth-token-file", tok, "--max-failed-auth", "2",
             "--client-fsm", fsm, NULL);
    it_conn_t *c = it_connect(false, NULL);
    assert_int_equal(auth_result(c, "alice", "bad1"), 2);
    assert_int_equal(auth_result(c, "alice", "secret"), 0);
    assert_int_equal(auth_result(c, "alice", "bad2"), 2);
    assert_int_equal(auth_result(c, "bob", "pw"), 0); /* still open: the count was 1 */
    assert_int_equal(auth_result(c, "bob", "bad3"), 2);
    assert_int_equal(auth_result(c, "bob", "bad4"), 2); /* the 2nd since the success closes */
    it_expect_closed(c);
    assert_true(cq_testsrv_log_wait(it_srv(), "too many failed AUTH attempts", IT_TIMEOUT_MS));
}

/* ---- SIGHUP ------------------------------------------------------------------------------- */

static void test_sighup_reload(void **state)
{
    (void)state;
    const char *tok = it_file("tokens.json", TOKENS);
    const char *perms = it_file("perms.json", PERMS);
    it_start("--auth-provider", "file", "--auth-token-file", tok, "--mq-permissions-file", perms,
             NULL);
    it_conn_t *c = it_connect(false, NULL);
    assert_int_equal(auth_result(c, "alice", "secret"), 0);
    it_file("tokens.json", "{\"alice\": \"newpw\"}");
    it_file("perms.json", "{\"1\": {\"token\": \"s1b\", \"consume\": [\"*\"]}}");
    assert_int_equal(kill(it_srv()->pid, SIGHUP), 0);
    assert_true(cq_testsrv_log_wait(it_srv(), "SIGHUP: tokens reloaded", IT_TIMEOUT_MS));
    assert_true(cq_testsrv_log_wait(it_srv(), "permissions table replaced", IT_TIMEOUT_MS));
    c = it_connect(false, NULL);
    assert_int_equal(auth_result(c, "alice", "secret"), 2);
    assert_int_equal(auth_result(c, "alice", "newpw"), 0);
    char out[4096];
    const char old[] = "GET /v1/topics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Authorization: Bearer 1:s1\r\n\r\n";
    const char neu[] = "GET /v1/topics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Authorization: Bearer 1:s1b\r\n\r\n";
    assert_int_equal(http_once(old, out, sizeof(out)), 401);
    assert_int_equal(http_once(neu, out, sizeof(out)), 200);
    /* a file that does not load keeps the tables in force */
    it_file("tokens.json", "{\"alice\": 5}");
    it_file("perms.json", "{\"1\": {\"consume\": [\"*\"]}}");
    assert_int_equal(kill(it_srv()->pid, SIGHUP), 0);
    assert_true(
        cq_testsrv_log_wait(it_srv(), "SIGHUP: keeping the current MQ permissions", IT_TIMEOUT_MS));
    assert_true(cq_testsrv_log_wait(it_srv(), "SIGHUP: keeping the current tokens", IT_TIMEOUT_MS));
    c = it_connect(false, NULL);
    assert_int_equal(auth_result(c, "alice", "newpw"), 0);
    assert_int_equal(http_once(neu, out, sizeof(out)), 200);
}

/* ---- MQ HTTP: the head decides before the body -------------------------------------------- */

/* VmRSS of pid in KiB. */
static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    long kib = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

/* Writes up to n bytes of filler, stopping when the server closed (or stopped reading). */
static void push_body(int fd, size_t n)
{
    static char chunk[64 * 1024];
    memset(chunk, 'x', sizeof(chunk));
    for (size_t sent = 0; sent < n;) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (poll(&p, 1, 200) <= 0 || (p.revents & (POLLERR | POLLHUP)))
            return;
        ssize_t k = send(fd, chunk, sizeof(chunk), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k <= 0)
            return;
        sent += (size_t)k;
    }
}

/* 8 unauthenticated clients announce 60 MB bodies: each is answered from its head at once,
 * with the exact status, and the connection closed; what they send after is never held. */
static void test_http_answers_from_the_head(void **state)
{
    (void)state;
    const char *perms = it_file("perms.json", PERMS);
    it_start("--mq-permissions-file", perms, "--mq-max-content", "64k", NULL);
    static const struct {
        const char *head;
        int status;
        const char *body;
    } cases[8] = {
        {"Content-Type: application/json\r\n", 401,
         "{\"err_code\":6,\"err_msg\":\"missing or malformed \\\"Authorization: Bearer "
         "<module_id>:<token>\\\"\"}"},
        {"Content-Type: application/json\r\nAuthorization: Bearer 1:nope\r\n", 401,
         "{\"err_code\":6,\"err_msg\":\"unknown module_id or wrong token\"}"},
        {"Content-Type: application/json\r\nAuthorization: Bearer 9:s1\r\n", 401,
         "{\"err_code\":6,\"err_msg\":\"unknown module_id or wrong token\"}"},
        {"Content-Type: text/plain\r\nAuthorization: Bearer 1:s1\r\n", 415,
         "{\"err_code\":1,\"err_msg\":\"POST needs Content-Type: application/json\"}"},
        {"Authorization: Bearer 1:s1\r\n", 415,
         "{\"err_code\":1,\"err_msg\":\"POST needs Content-Type: application/json\"}"},
        {"Content-Type: application/json\r\nOrigin: https://evil.example\r\n", 403,
         "{\"err_code\":7,\"err_msg\":\"Origin \\\"https://evil.example\\\" is not allowed "
         "(--mq-http-origins)\"}"},
        {"Content-Type: application/json\r\nHost: rebind.example\r\n", 421,
         "{\"err_code\":7,\"err_msg\":\"Host \\\"rebind.example\\\" is not a name of this API "
         "(--mq-http-hosts)\"}"},
        {"Content-Type: application/json\r\n", 401, "{\"err_code\":6,"},
    };
    int fds[8];
    char req[512], out[4096];
    for (int i = 0; i < 8; i++) {
        bool own_host = strstr(cases[i].head, "Host:") != NULL;
        snprintf(req, sizeof(req),
                 "POST /v1/topics/orders/messages HTTP/1.1\r\n%s%sContent-Length: 60000000\r\n\r\n",
                 own_host ? "" : "Host: 127.0.0.1:1\r\n", cases[i].head);
        fds[i] = http_open();
        assert_int_equal(cq_raw_write(fds[i], req, strlen(req)), 0);
        int st = http_read(fds[i], out, sizeof(out));
        if (st != cases[i].status || !strstr(out, cases[i].body))
            print_error("case %d: %s\n", i, out);
        assert_int_equal(st, cases[i].status);
        assert_non_null(strstr(out, "Connection: close\r\n"));
        assert_non_null(strstr(out, cases[i].body));
    }
    for (int i = 0; i < 8; i++) {
        push_body(fds[i], 16u << 20); /* the server no longer reads it */
        close(fds[i]);
    }
    long kib = rss_kib(it_srv()->pid);
    print_message("# chanqd VmRSS after 8 refused 60 MB uploads: %ld KiB\n", kib);
    assert_true(kib > 0 && kib < 96 * 1024);
    /* an announced body over the limit is refused at once too, authenticated or not */
    assert_int_equal(http_once("POST /v1/topics/orders/messages HTTP/1.1\r\nHost: localhost\r\n"
                               "Content-Type: application/json\r\nAuthorization: Bearer 1:s1\r\n"
                               "Content-Length: 999999999\r\n\r\n",
                               out, sizeof(out)),
                     413);
}

static const struct CMUnitTest tests[] = {
    IT_TEST(test_dev_provider_needs_dev),     IT_TEST(test_budget_over_reconnects),
    IT_TEST(test_success_resets_conn_count),  IT_TEST(test_sighup_reload),
    IT_TEST(test_http_answers_from_the_head),
};

IT_MAIN(tests)
