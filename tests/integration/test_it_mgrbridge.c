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
#include "it_mgr.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define ADMIN_TOK "it-admin-token"
#define SRV_TOK   "it-server-token"

enum { MT_RELEASE = 200, MT_NEWS = 205 };

#define RELEASE_DOC                                                                                \
    "{\"bindings\":[{\"topic\":\"release\",\"broadcast\":\"global\",\"msg_type\":200}]}"

static it_mgr_t mgr;

/* ---- the manager ---------------------------------------------------------------------------- */

static void start_mgr(void)
{
    assert_int_equal(it_mgr_start(&mgr, "itmgrb", ADMIN_TOK, SRV_TOK, NULL, NULL), 0);
}

/* Stops the manager (it must exit 0), then the server (it_teardown). */
static int teardown(void **state)
{
    int m = it_mgr_stop(&mgr);
    int r = it_teardown(state);
    return m < 0 ? -1 : r;
}

/* One console API request with the admin bearer token; returns the status, body in body. */
static int api(const char *method, const char *path, const char *json, char *body, size_t cap)
{
    return it_mgr_api(&mgr, ADMIN_TOK, method, path, json, body, cap);
}

/* ---- the server and its clients ------------------------------------------------------------- */

static void start_server(void)
{
    char tok[320];
    it_mgr_path(&mgr, "srv.token", tok, sizeof(tok));
    const char *file = it_file("bindings.json", "{\"bindings\": [{\"topic\": \"news\", "
                                                "\"broadcast\": \"global\", \"msg_type\": 205}]}");
    const char *args[] = {"--dev",
                          "--client-fsm",
                          it_client_auth_fsm(),
                          "--bridge-file",
                          file,
                          "--mgr-servers",
                          mgr.addr,
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
