/* test_it_mgrbridge.c - the bridge's bindings from the manager (issue 24; doc/mgr.md "Bindings"),
 * end to end: `chanqd --role mgr` on file state, and a chanqd it manages (--mgr-servers, an MQ
 * port, a --bridge-file that binds "news" to GLOBAL as msg_type 205). In order:
 *  1. while the manager never saved bindings, the server's file is in force: a message of
 *     "news" produced over the HTTP API reaches a client on GLOBAL;
 *  2. PUT /api/bindings binds "release" to GLOBAL as msg_type 200 (bearer token, as the CLI and
 *     the console do): once the server applied it, a message of "release" produced over the
 *     HTTP API reaches the client as a TopicEvent of msg_type 200; "news" no longer does (the
 *     manager's bindings replace the file's);
 *  3. a bad PUT is answered 400 with the bindings parser's exact message, GET /api/bindings
 *     still gives the old document, and "release" is still delivered;
 *  4. SIGHUP no longer reads --bridge-file (logged): the manager's bindings stay in force.
 * Every wait has a safety stop; nothing asserts on elapsed time. Skips without $CHANQD.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "bridge.pb-c.h"
#include "it_common.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_MS   10000
#define ADMIN_TOK "it-admin-token"
#define SRV_TOK   "it-server-token"

enum { MT_RELEASE = 200, MT_NEWS = 205 };

#define RELEASE_DOC                                                                                \
    "{\"bindings\":[{\"topic\":\"release\",\"broadcast\":\"global\",\"msg_type\":200}]}"

static char dir[256], mgr_addr[64];
static pid_t mgr_pid;
static uint16_t http_port;

/* ---- the manager ---------------------------------------------------------------------------- */

static void path_in(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

static void write_file(const char *name, const char *text)
{
    char p[320];
    path_in(p, sizeof(p), name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    chmod(p, 0600);
}

/* The port of key ("mgr=127.0.0.1:P") in the ready line. */
static uint16_t ready_port(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    assert_non_null(p);
    p = strchr(p, ':');
    assert_non_null(p);
    return (uint16_t)atoi(p + 1);
}

static void start_mgr(void)
{
    snprintf(dir, sizeof(dir), "%s/cq-itmgrb.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    assert_non_null(mkdtemp(dir));
    write_file("admin.token", ADMIN_TOK "\n");
    write_file("srv.token", SRV_TOK "\n");
    char adm[320], tok[320], st[320], audit[320], ready[320], logp[320];
    path_in(adm, sizeof(adm), "admin.token");
    path_in(tok, sizeof(tok), "srv.token");
    path_in(st, sizeof(st), "state.json");
    path_in(audit, sizeof(audit), "audit.log");
    path_in(ready, sizeof(ready), "ready");
    path_in(logp, sizeof(logp), "mgr.log");
    const char *argv[] = {getenv("CHANQD"),
                          "--role",
                          "mgr",
                          "--mgr-addr",
                          "127.0.0.1:0",
                          "--mgr-http-addr",
                          "127.0.0.1:0",
                          "--admin-addr",
                          "127.0.0.1:0",
                          "--mgr-state-file",
                          st,
                          "--mgr-admin-token-file",
                          adm,
                          "--mgr-token-file",
                          tok,
                          "--mgr-audit-log",
                          audit,
                          "--ready-file",
                          ready,
                          "--log-level",
                          "debug",
                          NULL};
    mgr_pid = cq_testsrv_spawn_log(argv, logp);
    assert_true(mgr_pid > 0);
    for (int64_t end = cq_test_mono_ms() + WAIT_MS; cq_test_mono_ms() < end; cq_test_sleep_ms(20)) {
        char line[512] = "";
        FILE *f = fopen(ready, "r");
        bool done = f && fgets(line, sizeof(line), f) && strchr(line, '\n');
        if (f)
            fclose(f);
        if (done) {
            snprintf(mgr_addr, sizeof(mgr_addr), "127.0.0.1:%u", ready_port(line, "mgr="));
            http_port = ready_port(line, "http=");
            return;
        }
        assert_int_not_equal(waitpid(mgr_pid, NULL, WNOHANG), mgr_pid);
    }
    fail_msg("the manager did not start: see %s", logp);
}

/* Stops the manager (it must exit 0), then the server (it_teardown). */
static int teardown(void **state)
{
    int st = 0;
    if (mgr_pid > 0) {
        kill(mgr_pid, SIGTERM);
        waitpid(mgr_pid, &st, 0);
        mgr_pid = 0;
    }
    int r = it_teardown(state);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "# the manager exited with status %d (files kept in %s)\n", st, dir);
        return -1;
    }
    if (!getenv("CQ_IT_KEEP")) {
        char cmd[320];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            return -1;
    }
    return r;
}

/* One console API request with the admin bearer token; returns the status, body in body. */
static int api(const char *method, const char *path, const char *json, char *body, size_t cap)
{
    char req[2048];
    size_t blen = json ? strlen(json) : 0;
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " ADMIN_TOK
                     "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     method, path, blen, json ? json : "");
    assert_true(n > 0 && (size_t)n < sizeof(req));
    int status = cq_raw_http(http_port, req, (size_t)n, WAIT_MS, body, cap);
    assert_true(status > 0);
    return status;
}

/* ---- the server and its clients ------------------------------------------------------------- */

static void start_server(void)
{
    char tok[320];
    path_in(tok, sizeof(tok), "srv.token");
    const char *file = it_file("bindings.json", "{\"bindings\": [{\"topic\": \"news\", "
                                                "\"broadcast\": \"global\", \"msg_type\": 205}]}");
    const char *args[] = {"--dev",
                          "--client-fsm",
                          it_client_auth_fsm(),
                          "--bridge-file",
                          file,
                          "--mgr-servers",
                          mgr_addr,
                          "--mgr-token-file",
                          tok,
                          "--mgr-report-ms",
                          "200",
                          NULL};
    it_startv(args);
    /* the first report makes the manager push its configuration: version 1, no bindings */
    it_log_expect("configuration version 1 applied");
}

/* c's next message is the TopicEvent of topic at offset, msg_type on GLOBAL, with content. */
static void expect_event(it_conn_t *c, uint32_t msg_type, const char *topic, uint64_t offset,
                         const char *content)
{
    chanq_owned_msg_t m;
    it_recv(c, &m);
    assert_int_equal(m.msg_type, msg_type);
    assert_int_equal(m.channel_id, 0);
    Channeldpb__ServerForwardMessage *f =
        channeldpb__server_forward_message__unpack(NULL, m.body_len, m.body);
    assert_non_null(f);
    Chanqpb__TopicEvent *ev = chanqpb__topic_event__unpack(NULL, f->payload.len, f->payload.data);
    channeldpb__server_forward_message__free_unpacked(f, NULL);
    assert_non_null(ev);
    assert_string_equal(ev->topic, topic);
    assert_int_equal(ev->offset, offset);
    assert_int_equal(ev->content.len, strlen(content));
    assert_memory_equal(ev->content.data, content, strlen(content));
    chanqpb__topic_event__free_unpacked(ev, NULL);
    chanq_owned_msg_done(&m);
}

/* Produces "news" (which must not be delivered) then "release"; c's next message is the latter. */
static void expect_release_only(it_conn_t *c, const char *content)
{
    it_produce("news", "\"not delivered\"");
    char json[64];
    snprintf(json, sizeof(json), "\"%s\"", content);
    uint64_t o = it_produce("release", json);
    expect_event(c, MT_RELEASE, "release", o, content);
}

static void test_bindings_from_the_manager(void **state)
{
    (void)state;
    start_mgr();
    start_server();
    it_create_topic("news");
    it_create_topic("release");
    it_conn_t *c = it_connect(false, NULL);
    it_auth(c, "alice", "lt");
    it_sub(c, 1, 0, c->id, -1);
    it_expect_sub(c, 0, 1, c->id, CONN_CLIENT, CT_GLOBAL, 1);
    /* 1. no bindings saved on the manager: the file's are in force */
    char body[4096];
    assert_int_equal(api("GET", "/api/bindings", NULL, body, sizeof(body)), 200);
    assert_string_equal(body, "{\"bindings\":[]}");
    uint64_t n1 = it_produce("news", "\"from the file\"");
    expect_event(c, MT_NEWS, "news", n1, "from the file");
    /* 2. the manager's bindings replace the file's on the server */
    assert_int_equal(api("PUT", "/api/bindings",
                         "{\"bindings\": [{\"topic\": \"release\", \"broadcast\": \"global\", "
                         "\"msg_type\": 200}]}",
                         body, sizeof(body)),
                     200);
    assert_string_equal(body, "{\"version\":2}");
    it_log_expect("1 bindings from the manager");
    it_log_expect("configuration version 2 applied");
    expect_release_only(c, "1.0");
    /* 3. a bad document: 400 with the parser's message; the bindings in force stay */
    assert_int_equal(api("PUT", "/api/bindings",
                         "{\"bindings\": [{\"topic\": \"release\", \"broadcast\": \"global\", "
                         "\"msg_type\": 99}]}",
                         body, sizeof(body)),
                     400);
    assert_string_equal(
        body, "{\"error\":\"binding 0: \\\"msg_type\\\" must be an integer from 100 to 65535\"}");
    assert_int_equal(api("GET", "/api/bindings", NULL, body, sizeof(body)), 200);
    assert_string_equal(body, RELEASE_DOC);
    expect_release_only(c, "1.1");
    /* 4. SIGHUP leaves the file alone from now on */
    assert_int_equal(kill(it_srv()->pid, SIGHUP), 0);
    it_log_expect("SIGHUP: --bridge-file not read: the manager's bindings are in force");
    expect_release_only(c, "1.2");
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_events_total"), 4);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(test_bindings_from_the_manager, teardown),
};

IT_MAIN(tests)
