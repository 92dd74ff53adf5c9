/* test_it_mgrproto.c - the management port of `chanqd --role mgr` at byte level (doc/protocol-mq.md
 * "Management port"; issue 13). One manager (file state, port 0, --ready-file) serves every case
 * in order; fake servers and SDKs are raw TCP connections speaking frames, the console's JSON API
 * is driven with the admin bearer token:
 *  1. input errors: a broken header gets error frame 20 (err 1 / 2) and the connection closes;
 *     bad JSON (20, err 3), an unknown type (20, err 4) and a field error (type 2, err 5 naming
 *     the field) leave it serving; a pre-auth connection that says nothing is closed
 *     (--mgr-auth-timeout-ms);
 *  2. tokens: svrconfig with a wrong module token and sync with a wrong server token get err 6
 *     and the connection closes;
 *  3. syncs: three fake servers report (two masters, one standby); each gets its sync answer with
 *     the config version and then publish_config with the exact content of the state; svrconfig
 *     lists exactly the two masters, by shard;
 *  4. offline through the JSON API: the server receives cmdid 2 {offline:true} and svrconfig no
 *     longer lists it; online again: listed;
 *  5. stale: a server that stops reporting drops out of svrconfig after --mgr-stale-ms and
 *     /api/state marks it stale;
 *  6. SIGHUP: a new --mgr-token-file is read; the old secret gets err 6, the new one is taken;
 *  7. bindings through the JSON API: none in publish_config until saved; then every server's
 *     publish_config carries the document as saved; a server's refusal (err 5) is logged by the
 *     manager with the server's text; a bad PUT is 400 with the parser's message and pushes
 *     nothing; an empty list is still sent.
 * Every wait has a 10 s safety stop; nothing asserts on elapsed time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_mq.h"
#include "cq_mqmgr.h"
#include "cq_testsrv.h"
#include "it_mgr.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS   10000
#define ADMIN_TOK "it-admin-token"
#define SRV_TOK   "it-server-token"
#define M7_TOK    "m7-token"

static it_mgr_t mgr;

/* ---- the manager -------------------------------------------------------------------------- */

static int start_mgr(void **state)
{
    (void)state;
    static const char *const extra[] = {"--mgr-stale-ms", "3000", "--mgr-auth-timeout-ms", "500",
                                        NULL};
    return it_mgr_start(&mgr, "itmgrp", ADMIN_TOK, SRV_TOK, NULL, extra);
}

static int stop_mgr(void **state)
{
    (void)state;
    return it_mgr_stop(&mgr);
}

/* ---- frames ------------------------------------------------------------------------------- */

static int mconnect(void)
{
    int fd = cq_raw_connect(mgr.port);
    assert_true(fd >= 0);
    return fd;
}

static void send_frame(int fd, uint8_t type, const char *body)
{
    size_t n = strlen(body);
    uint8_t *b = malloc(CQ_MQ_HDR_LEN + n);
    assert_non_null(b);
    cq_mq_header_write(b, (uint32_t)(CQ_MQ_HDR_LEN + n), type, 1);
    memcpy(b + CQ_MQ_HDR_LEN, body, n);
    assert_int_equal(cq_raw_write(fd, b, CQ_MQ_HDR_LEN + n), 0);
    free(b);
}

/* Reads exactly n bytes; false on EOF. */
static bool read_full(int fd, uint8_t *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, WAIT_MS) != 1)
            fail_msg("no answer within %d ms", WAIT_MS);
        ssize_t k = read(fd, p + got, n - got);
        if (k <= 0)
            return false;
        got += (size_t)k;
    }
    return true;
}

/* The next frame, decoded (owned); its frame type in *type (may be NULL). */
static cq_mqmgr_msg_t *recv_msg(int fd, uint8_t *type)
{
    uint8_t h[CQ_MQ_HDR_LEN];
    assert_true(read_full(fd, h, sizeof(h)));
    uint32_t total = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
    assert_true(total >= CQ_MQ_HDR_LEN && total <= CQ_MQMGR_MAX_TOTAL);
    uint8_t *b = malloc(total);
    assert_non_null(b);
    memcpy(b, h, sizeof(h));
    assert_true(read_full(fd, b + CQ_MQ_HDR_LEN, total - CQ_MQ_HDR_LEN));
    cq_mq_frame_t f;
    assert_int_equal(cq_mq_parse(b, total, CQ_MQMGR_MAX_TOTAL, &f), (ssize_t)total);
    cq_mqmgr_msg_t *m = NULL;
    char err[256];
    int r = cq_mqmgr_decode(&f, 0, &m, err, sizeof(err));
    if (r < 0)
        fail_msg("undecodable frame %u: %s: %.*s", f.type, err, (int)f.body_len, f.body);
    if (type)
        *type = f.type;
    free(b);
    return m;
}

/* True when the manager closed fd (EOF) within the safety stop. */
static bool closed_by_peer(int fd)
{
    uint8_t c;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, WAIT_MS) != 1)
        return false;
    return read(fd, &c, 1) <= 0;
}

/* svrconfig on a fresh connection: the answer (owned). */
static cq_mqmgr_msg_t *svrconfig(const char *token)
{
    int fd = mconnect();
    char body[256];
    snprintf(body, sizeof(body), "{\"askid\":9,\"module_id\":7,\"token\":\"%s\"}", token);
    send_frame(fd, CQ_MQMGR_REQ, body);
    cq_mqmgr_msg_t *m = recv_msg(fd, NULL);
    close(fd);
    assert_int_equal(m->kind, CQ_MQMGR_SVRCONFIG_RESP);
    assert_int_equal(m->askid, 9);
    return m;
}

/* "127.0.0.1:P/shard,..." of a svrconfig answer. */
static void servers_text(const cq_mqmgr_msg_t *m, char *out, size_t cap)
{
    out[0] = '\0';
    for (size_t i = 0; i < m->nservers; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s:%u/%u", i ? "," : "", m->servers[i].ip,
                 m->servers[i].port, m->servers[i].shard);
}

static void expect_servers(const char *want)
{
    char got[512];
    cq_mqmgr_msg_t *m = svrconfig(M7_TOK);
    assert_int_equal(m->err_code, 0);
    servers_text(m, got, sizeof(got));
    cq_mqmgr_msg_free(m);
    assert_string_equal(got, want);
}

/* ---- the JSON API ------------------------------------------------------------------------- */

static int api(const char *method, const char *path, const char *json, char *body, size_t cap)
{
    return it_mgr_api(&mgr, ADMIN_TOK, method, path, json, body, cap);
}

/* ---- fake servers ------------------------------------------------------------------------- */

typedef struct fake {
    int fd;
    uint32_t appid, shard;
    bool master;
} fake_t;

static void sync_send(fake_t *s, const char *token)
{
    char body[512];
    snprintf(body, sizeof(body),
             "{\"askid\":%u,\"group_id\":1,\"appid\":%u,\"token\":\"%s\",\"serverinfo\":"
             "{\"threads\":2,\"packages\":0,\"cpu\":1,\"mem\":10,\"sockets\":1},\"ext\":"
             "{\"addr\":\"127.0.0.1:%u\",\"shard\":%u,\"master\":%s}}",
             s->appid, s->appid, token, 5000 + s->appid % 100, s->shard,
             s->master ? "true" : "false");
    send_frame(s->fd, CQ_MQMGR_REQ, body);
}

/* Reads until the sync answer, answering commands (ok); returns its config_version. Commands
 * seen are appended to cmds ("1:v3,2:true,...") when not NULL. */
static int64_t sync_answer(fake_t *s, char *cmds, size_t cap)
{
    for (;;) {
        uint8_t type;
        cq_mqmgr_msg_t *m = recv_msg(s->fd, &type);
        if (m->kind == CQ_MQMGR_SYNC_RESP) {
            assert_int_equal(m->askid, s->appid);
            assert_int_equal(m->err_code, 0);
            int64_t v = m->config_version;
            cq_mqmgr_msg_free(m);
            return v;
        }
        assert_int_equal(m->kind, CQ_MQMGR_COMMAND);
        if (cmds && m->cmdid == CQ_MQMGR_CMD_OFFLINE)
            snprintf(cmds + strlen(cmds), cap - strlen(cmds), "2:%s,",
                     m->offline ? "true" : "false");
        else if (cmds)
            snprintf(cmds + strlen(cmds), cap - strlen(cmds), "1:v%lld,",
                     (long long)m->config.version);
        char body[128];
        snprintf(body, sizeof(body), "{\"askid\":%u,\"cmdid\":%u,\"err_code\":0}", m->askid,
                 m->cmdid);
        send_frame(s->fd, CQ_MQMGR_RESP_COMMAND, body);
        cq_mqmgr_msg_free(m);
    }
}

/* One report: sync, its answer (commands before it answered). */
static int64_t report(fake_t *s, char *cmds, size_t cap)
{
    sync_send(s, SRV_TOK);
    return sync_answer(s, cmds, cap);
}

/* The next command s receives (owned); answered ok. */
static cq_mqmgr_msg_t *next_command(fake_t *s)
{
    cq_mqmgr_msg_t *m = recv_msg(s->fd, NULL);
    assert_int_equal(m->kind, CQ_MQMGR_COMMAND);
    char body[128];
    snprintf(body, sizeof(body), "{\"askid\":%u,\"cmdid\":%u,\"err_code\":0}", m->askid, m->cmdid);
    send_frame(s->fd, CQ_MQMGR_RESP_COMMAND, body);
    return m;
}

static fake_t fa = {-1, 101, 0, true}, fb = {-1, 102, 0, false}, fc = {-1, 103, 1, true};

/* ---- 1. input errors ---------------------------------------------------------------------- */

static void test_input_errors(void **state)
{
    char body[256];
    /* the module the later cases use */
    assert_int_equal(api("PUT", "/api/modules/7",
                         "{\"token\":\"" M7_TOK "\",\"produce\":[\"orders\"],\"consume\":[\"*\"],"
                         "\"admin\":false}",
                         body, sizeof(body)),
                     200);
    assert_string_equal(body, "{\"version\":2}");

    /* total length under the header: error frame 20, err 2, closed */
    int fd = mconnect();
    uint8_t bad[12] = {0, 0, 0, 5, 0, 12, 1, 1, 1, 0, 1, 0};
    assert_int_equal(cq_raw_write(fd, bad, sizeof(bad)), 0);
    uint8_t type;
    cq_mqmgr_msg_t *m = recv_msg(fd, &type);
    assert_int_equal(type, CQ_MQMGR_ERROR);
    assert_int_equal(m->err_code, CQ_MQ_ERR_BAD_LENGTH);
    cq_mqmgr_msg_free(m);
    assert_true(closed_by_peer(fd));
    close(fd);

    /* a wrong header length field: err 1, closed */
    fd = mconnect();
    cq_mq_header_write(bad, 14, CQ_MQMGR_REQ, 1);
    bad[5] = 11;
    assert_int_equal(cq_raw_write(fd, bad, sizeof(bad)), 0);
    m = recv_msg(fd, &type);
    assert_int_equal(type, CQ_MQMGR_ERROR);
    assert_int_equal(m->err_code, CQ_MQ_ERR_BAD_HEADER);
    cq_mqmgr_msg_free(m);
    assert_true(closed_by_peer(fd));
    close(fd);

    /* bad JSON, an unknown type, a field error: answered, the connection keeps serving */
    fd = mconnect();
    send_frame(fd, CQ_MQMGR_REQ, "{\"askid\":1,");
    m = recv_msg(fd, &type);
    assert_int_equal(type, CQ_MQMGR_ERROR);
    assert_int_equal(m->err_code, CQ_MQ_ERR_BAD_JSON);
    cq_mqmgr_msg_free(m);
    send_frame(fd, 9, "{\"askid\":2}");
    m = recv_msg(fd, &type);
    assert_int_equal(type, CQ_MQMGR_ERROR);
    assert_int_equal(m->err_code, CQ_MQ_ERR_UNKNOWN_TYPE);
    assert_true(m->has_askid);
    assert_int_equal(m->askid, 2);
    cq_mqmgr_msg_free(m);
    send_frame(fd, CQ_MQMGR_REQ, "{\"askid\":3,\"token\":\"x\"}");
    m = recv_msg(fd, &type);
    assert_int_equal(type, CQ_MQMGR_RESP);
    assert_int_equal(m->kind, CQ_MQMGR_SVRCONFIG_RESP);
    assert_int_equal(m->askid, 3);
    assert_int_equal(m->err_code, CQ_MQ_ERR_BAD_FIELD);
    assert_non_null(m->err_msg);
    assert_non_null(strstr(m->err_msg, "module_id"));
    cq_mqmgr_msg_free(m);
    send_frame(fd, CQ_MQMGR_REQ, "{\"askid\":4,\"module_id\":7,\"token\":\"" M7_TOK "\"}");
    m = recv_msg(fd, &type);
    assert_int_equal(m->kind, CQ_MQMGR_SVRCONFIG_RESP);
    assert_int_equal(m->askid, 4);
    assert_int_equal(m->err_code, 0);
    assert_int_equal(m->nservers, 0);
    cq_mqmgr_msg_free(m);
    close(fd);

    /* silent before authenticating: closed by --mgr-auth-timeout-ms (500) */
    fd = mconnect();
    assert_true(closed_by_peer(fd));
    close(fd);
}

/* ---- 2. tokens ---------------------------------------------------------------------------- */

static void test_wrong_tokens(void **state)
{
    int fd = mconnect();
    send_frame(fd, CQ_MQMGR_REQ, "{\"askid\":5,\"module_id\":7,\"token\":\"nope\"}");
    cq_mqmgr_msg_t *m = recv_msg(fd, NULL);
    assert_int_equal(m->kind, CQ_MQMGR_SVRCONFIG_RESP);
    assert_int_equal(m->err_code, CQ_MQ_ERR_UNAUTHENTICATED);
    assert_int_equal(m->nservers, 0);
    cq_mqmgr_msg_free(m);
    assert_true(closed_by_peer(fd));
    close(fd);

    fake_t x = {mconnect(), 199, 0, true};
    sync_send(&x, "wrong-server-token");
    m = recv_msg(x.fd, NULL);
    assert_int_equal(m->kind, CQ_MQMGR_SYNC_RESP);
    assert_int_equal(m->askid, 199);
    assert_int_equal(m->err_code, CQ_MQ_ERR_UNAUTHENTICATED);
    cq_mqmgr_msg_free(m);
    assert_true(closed_by_peer(x.fd));
    close(x.fd);
}

/* ---- 3. syncs, publish_config, svrconfig -------------------------------------------------- */

static void test_sync_and_svrconfig(void **state)
{
    fake_t *all[3] = {&fa, &fb, &fc};
    for (int i = 0; i < 3; i++) {
        fake_t *s = all[i];
        s->fd = mconnect();
        sync_send(s, SRV_TOK);
        assert_int_equal(sync_answer(s, NULL, 0), 2); /* nothing pushed before the answer */
        cq_mqmgr_msg_t *m = next_command(s);          /* the first sync's publish_config */
        assert_int_equal(m->cmdid, CQ_MQMGR_CMD_PUBLISH_CONFIG);
        assert_int_equal(m->config.version, 2);
        assert_string_equal(m->config.modules,
                            "{\"7\":{\"token\":\"" M7_TOK "\",\"produce\":"
                            "[\"orders\"],\"consume\":[\"*\"],\"admin\":false}}");
        assert_int_equal(m->config.ntopics, 0);
        cq_mqmgr_msg_free(m);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(report(all[i], NULL, 0), 2);
    /* the two masters (not the standby 102), by shard */
    expect_servers("127.0.0.1:5001/0,127.0.0.1:5003/1");
}

/* ---- 4. offline and online through the JSON API ------------------------------------------- */

static void test_offline(void **state)
{
    char body[256];
    assert_int_equal(api("POST", "/api/servers/101/offline", "{}", body, sizeof(body)), 200);
    assert_string_equal(body, "{\"version\":3}");
    char cmds[256] = "";
    assert_int_equal(report(&fa, cmds, sizeof(cmds)), 3);
    assert_string_equal(cmds, "1:v3,2:true,");
    cmds[0] = '\0';
    assert_int_equal(report(&fc, cmds, sizeof(cmds)), 3);
    assert_string_equal(cmds, "1:v3,"); /* the others get the new version, no offline */
    assert_int_equal(report(&fb, NULL, 0), 3);
    expect_servers("127.0.0.1:5003/1");

    assert_int_equal(api("POST", "/api/servers/101/online", "{}", body, sizeof(body)), 200);
    assert_string_equal(body, "{\"version\":4}");
    cmds[0] = '\0';
    assert_int_equal(report(&fa, cmds, sizeof(cmds)), 4);
    assert_string_equal(cmds, "1:v4,2:false,");
    assert_int_equal(report(&fb, NULL, 0), 4);
    assert_int_equal(report(&fc, NULL, 0), 4);
    expect_servers("127.0.0.1:5001/0,127.0.0.1:5003/1");
}

/* ---- 5. stale ----------------------------------------------------------------------------- */

static void test_stale(void **state)
{
    /* 103 stops reporting (its connection stays open); 101 goes on */
    char got[512] = "";
    for (int64_t end = cq_test_mono_ms() + WAIT_MS; cq_test_mono_ms() < end;
         cq_test_sleep_ms(200)) {
        report(&fa, NULL, 0);
        cq_mqmgr_msg_t *m = svrconfig(M7_TOK);
        servers_text(m, got, sizeof(got));
        cq_mqmgr_msg_free(m);
        if (strcmp(got, "127.0.0.1:5001/0") == 0)
            break;
    }
    assert_string_equal(got, "127.0.0.1:5001/0");
    static char body[1 << 16];
    assert_int_equal(api("GET", "/api/state", NULL, body, sizeof(body)), 200);
    const char *c = strstr(body, "\"appid\":103");
    assert_non_null(c);
    const char *next = strstr(c + 1, "\"appid\":");
    const char *stale = strstr(c, "\"stale\":true");
    assert_non_null(stale);
    assert_true(!next || stale < next);
    /* reporting again makes it live */
    report(&fc, NULL, 0);
    report(&fa, NULL, 0);
    expect_servers("127.0.0.1:5001/0,127.0.0.1:5003/1");
    close(fa.fd);
    close(fb.fd);
    close(fc.fd);
}

/* ---- 6. SIGHUP reloads the server token ---------------------------------------------------- */

static void test_sighup_tokens(void **state)
{
    it_mgr_write(&mgr, "srv.token", "it-server-token-2\n", NULL, 0);
    assert_int_equal(kill(mgr.pid, SIGHUP), 0);
    /* the old token works until the reload ran, then is refused (err 6, closed) */
    uint32_t code = 0;
    for (int64_t end = cq_test_mono_ms() + WAIT_MS; cq_test_mono_ms() < end && code == 0;
         cq_test_sleep_ms(50)) {
        fake_t x = {mconnect(), 150, 0, true};
        sync_send(&x, SRV_TOK);
        cq_mqmgr_msg_t *m = recv_msg(x.fd, NULL);
        if (m->kind == CQ_MQMGR_SYNC_RESP)
            code = m->err_code;
        cq_mqmgr_msg_free(m);
        close(x.fd);
    }
    assert_int_equal(code, CQ_MQ_ERR_UNAUTHENTICATED);
    fake_t y = {mconnect(), 151, 0, true};
    sync_send(&y, "it-server-token-2");
    assert_int_equal(sync_answer(&y, NULL, 0), 4); /* the new token; the version is still 4 */
    close(y.fd);
}

/* ---- 7. bindings -------------------------------------------------------------------------- */

/* Waits for needle in the manager's log. */
static void mgr_log_expect(const char *needle)
{
    char p[320];
    it_mgr_path(&mgr, "mgr.log", p, sizeof(p));
    for (int64_t end = cq_test_mono_ms() + WAIT_MS; cq_test_mono_ms() < end; cq_test_sleep_ms(50)) {
        FILE *f = fopen(p, "r");
        static char text[1 << 20];
        size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
        if (f)
            fclose(f);
        text[n] = '\0';
        if (strstr(text, needle))
            return;
    }
    fail_msg("the manager's log has no \"%s\"", needle);
}

static void answer_cmd(fake_t *s, const cq_mqmgr_msg_t *m, int err, const char *why)
{
    char body[256];
    snprintf(body, sizeof(body), "{\"askid\":%u,\"cmdid\":%u,\"err_code\":%d%s%s%s}", m->askid,
             m->cmdid, err, why ? ",\"err_msg\":\"" : "", why ? why : "", why ? "\"" : "");
    send_frame(s->fd, CQ_MQMGR_RESP_COMMAND, body);
}

/* The next frame of s is publish_config of version (not answered: owned). */
static cq_mqmgr_msg_t *next_publish(fake_t *s, int64_t version)
{
    cq_mqmgr_msg_t *m = recv_msg(s->fd, NULL);
    assert_int_equal(m->kind, CQ_MQMGR_COMMAND);
    assert_int_equal(m->cmdid, CQ_MQMGR_CMD_PUBLISH_CONFIG);
    assert_int_equal(m->config.version, version);
    return m;
}

#define NEW_TOK "it-server-token-2" /* since test_sighup_tokens */

static void test_bindings(void **state)
{
    fake_t z = {mconnect(), 160, 0, true};
    sync_send(&z, NEW_TOK);
    assert_int_equal(sync_answer(&z, NULL, 0), 4);
    cq_mqmgr_msg_t *m = next_publish(&z, 4);
    assert_null(m->config.bindings); /* never saved: the server keeps its own file */
    answer_cmd(&z, m, 0, NULL);
    cq_mqmgr_msg_free(m);
    char body[512];
    assert_int_equal(api("PUT", "/api/bindings",
                         "{\"bindings\": [{\"topic\": \"vip\", \"route\": \"user_id\", "
                         "\"msg_type\": 201}]}",
                         body, sizeof(body)),
                     200);
    assert_string_equal(body, "{\"version\":5}");
    m = next_publish(&z, 5);
    assert_string_equal(
        m->config.bindings,
        "{\"bindings\":[{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201}]}");
    assert_string_equal(m->config.modules, "{\"7\":{\"token\":\"" M7_TOK "\",\"produce\":"
                                           "[\"orders\"],\"consume\":[\"*\"],\"admin\":false}}");
    answer_cmd(&z, m, 5, "content.bindings: this server takes no bindings");
    cq_mqmgr_msg_free(m);
    mgr_log_expect("command publish_config failed: 5 content.bindings: this server takes no "
                   "bindings");
    /* refused by the manager: nothing pushed, the version stays */
    assert_int_equal(
        api("PUT", "/api/bindings",
            "{\"bindings\": [{\"topic\": \"vip\", \"route\": \"\", \"msg_type\": 201}]}", body,
            sizeof(body)),
        400);
    assert_string_equal(body, "{\"error\":\"binding 0: \\\"route\\\" must be a field name (a "
                              "string of 1 to 64 bytes)\"}");
    sync_send(&z, NEW_TOK);
    assert_int_equal(sync_answer(&z, NULL, 0), 5); /* no command before the answer */
    assert_int_equal(api("PUT", "/api/bindings", "{\"bindings\": []}", body, sizeof(body)), 200);
    assert_string_equal(body, "{\"version\":6}");
    m = next_publish(&z, 6);
    assert_string_equal(m->config.bindings, "{\"bindings\":[]}");
    answer_cmd(&z, m, 0, NULL);
    cq_mqmgr_msg_free(m);
    sync_send(&z, NEW_TOK);
    assert_int_equal(sync_answer(&z, NULL, 0), 6);
    close(z.fd);
}

int main(void)
{
    if (!getenv("CHANQD")) {
        printf("1..0 # SKIP CHANQD is not set\n");
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_errors),
        cmocka_unit_test(test_wrong_tokens),
        cmocka_unit_test(test_sync_and_svrconfig),
        cmocka_unit_test(test_offline),
        cmocka_unit_test(test_stale),
        cmocka_unit_test(test_sighup_tokens),
        cmocka_unit_test(test_bindings),
    };
    return cmocka_run_group_tests_name("it-mgrproto", tests, start_mgr, stop_mgr);
}
