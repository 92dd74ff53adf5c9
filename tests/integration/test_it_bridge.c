/* test_it_bridge.c - durable topics delivered into channels (issue 24, doc/bridge.md), end to
 * end: chanqd with --bridge-file, messages produced over the HTTP API, and game clients that
 * receive them as TopicEvents: a broadcast binding on GLOBAL, and a route binding that finds
 * the player by the PIT it authenticated with. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "bridge.pb-c.h"
#include "it_common.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MT_RELEASE = 200, MT_VIP = 201 };

static const char bindings[] =
    "{\"bindings\": ["
    "{\"topic\": \"release\", \"broadcast\": \"global\", \"msg_type\": 200},"
    "{\"topic\": \"vip\", \"route\": \"user_id\", \"msg_type\": 201}]}";

static void start(void)
{
    const char *path = it_file("bindings.json", bindings);
    const char *args[] = {"--dev",         "--client-fsm", it_client_auth_fsm(),
                          "--bridge-file", path,           NULL};
    it_startv(args);
}

/* POSTs body to path on the HTTP API; returns the status, the answer's body in out. */
static int http_post(const char *path, const char *body, char *out, size_t cap)
{
    char req[2048];
    int n = snprintf(req, sizeof(req),
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     path, strlen(body), body);
    assert_true(n > 0 && (size_t)n < sizeof(req));
    return cq_raw_http(it_srv()->mq_http_port, req, (size_t)n, IT_TIMEOUT_MS, out, cap);
}

static void create_topic(const char *topic)
{
    char body[128], out[512];
    snprintf(body, sizeof(body), "{\"topic\": \"%s\"}", topic);
    assert_int_equal(http_post("/v1/topics", body, out, sizeof(out)), 200);
}

/* Produces one message (its JSON content as written); returns the offset the store gave it. */
static uint64_t produce(const char *topic, const char *content_json)
{
    char path[128], body[1024], out[512];
    snprintf(path, sizeof(path), "/v1/topics/%s/messages", topic);
    snprintf(body, sizeof(body), "{\"content\": %s}", content_json);
    assert_int_equal(http_post(path, body, out, sizeof(out)), 200);
    const char *p = strstr(out, "\"offsets\":[");
    assert_non_null(p);
    return strtoull(p + 11, NULL, 10);
}

/* c's next message is a TopicEvent of msg_type on channel 0 for topic at offset, following
 * prev, with content; returns it (chanqpb__topic_event__free_unpacked). */
static void expect_event(it_conn_t *c, uint32_t msg_type, const char *topic, uint64_t offset,
                         uint64_t prev, const char *content)
{
    chanq_owned_msg_t m;
    it_recv(c, &m);
    assert_int_equal(m.msg_type, msg_type);
    assert_int_equal(m.channel_id, 0);
    assert_int_equal(m.stub_id, 0);
    /* as a server's broadcast reaches a client: the event is the ServerForwardMessage's payload */
    Channeldpb__ServerForwardMessage *f =
        channeldpb__server_forward_message__unpack(NULL, m.body_len, m.body);
    assert_non_null(f);
    assert_int_equal(f->clientconnid, 0);
    Chanqpb__TopicEvent *ev = chanqpb__topic_event__unpack(NULL, f->payload.len, f->payload.data);
    channeldpb__server_forward_message__free_unpacked(f, NULL);
    assert_non_null(ev);
    assert_string_equal(ev->topic, topic);
    assert_int_equal(ev->offset, offset);
    assert_int_equal(ev->prev_offset, prev);
    assert_int_equal(ev->shard, 0);
    assert_int_equal(ev->content.len, strlen(content));
    assert_memory_equal(ev->content.data, content, strlen(content));
    assert_true(ev->time_ms > 1700000000000);
    chanqpb__topic_event__free_unpacked(ev, NULL);
    chanq_owned_msg_done(&m);
}

static it_conn_t *player(const char *pit)
{
    it_conn_t *c = it_connect(false, NULL);
    it_auth(c, pit, "lt");
    return c;
}

/* A broadcast binding: every subscriber of GLOBAL gets each message of "release" once, in
 * offset order, each event pointing at the previous one; a player not subscribed gets none (a
 * routed event that follows is its next message). */
static void test_broadcast_global(void **state)
{
    (void)state;
    start();
    create_topic("release");
    create_topic("vip");
    it_conn_t *a = player("alice"), *b = player("bob"), *n = player("nobody");
    it_sub(a, 1, 0, a->id, -1);
    it_expect_sub(a, 0, 1, a->id, 2 /* CLIENT */, 1 /* GLOBAL */, 1);
    it_sub(b, 2, 0, b->id, -1);
    it_expect_sub(b, 0, 2, b->id, 2, 1, 1);
    uint64_t o[3], prev = 0;
    const char *content[3] = {"{\"version\":\"1.0.1\"}", "\"1.0.2\"", "{\"version\":\"1.1\"}"};
    const char *stored[3] = {"{\"version\":\"1.0.1\"}", "1.0.2", "{\"version\":\"1.1\"}"};
    for (int i = 0; i < 3; i++)
        o[i] = produce("release", content[i]);
    for (int i = 0; i < 3; i++) {
        assert_true(o[i] > prev);
        expect_event(a, MT_RELEASE, "release", o[i], prev, stored[i]);
        expect_event(b, MT_RELEASE, "release", o[i], prev, stored[i]);
        prev = o[i];
    }
    uint64_t v = produce("vip", "{\"user_id\":\"nobody\"}");
    expect_event(n, MT_VIP, "vip", v, 0, "{\"user_id\":\"nobody\"}");
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_events_total"), 4);
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_outputs_total"), 4);
}

/* A route binding: each player gets only the events whose user_id is its PIT, on every one of
 * its connections; content that names no player is counted, not delivered. */
static void test_route_by_pit(void **state)
{
    (void)state;
    start();
    create_topic("vip");
    it_conn_t *a1 = player("alice"), *a2 = player("alice"), *b = player("bob");
    uint64_t o1 = produce("vip", "{\"user_id\":\"alice\",\"level\":3}");
    uint64_t o2 = produce("vip", "{\"user_id\":\"carol\"}"); /* offline: nobody */
    uint64_t o3 = produce("vip", "\"no player here\"");
    uint64_t o4 = produce("vip", "{\"user_id\":\"bob\",\"level\":1}");
    assert_true(o1 < o2 && o2 < o3 && o3 < o4);
    expect_event(a1, MT_VIP, "vip", o1, 0, "{\"user_id\":\"alice\",\"level\":3}");
    expect_event(a2, MT_VIP, "vip", o1, 0, "{\"user_id\":\"alice\",\"level\":3}");
    expect_event(b, MT_VIP, "vip", o4, o3, "{\"user_id\":\"bob\",\"level\":1}");
    /* alice's next message is the next one for her, nothing of carol's or bob's */
    uint64_t o5 = produce("vip", "{\"user_id\":\"alice\"}");
    expect_event(a1, MT_VIP, "vip", o5, o4, "{\"user_id\":\"alice\"}");
    expect_event(a2, MT_VIP, "vip", o5, o4, "{\"user_id\":\"alice\"}");
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_events_total"), 5);
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_unroutable_total"), 1);
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_outputs_total"), 4);
}

/* SIGHUP reads the bindings file again: a topic no longer bound is no longer delivered (nor
 * counted), a new msg_type applies from the next event; a file that does not load keeps the
 * bindings in force. */
static void test_reload(void **state)
{
    (void)state;
    start();
    create_topic("release");
    create_topic("vip");
    create_topic("news"); /* not bound yet */
    it_conn_t *a = player("alice");
    it_sub(a, 1, 0, a->id, -1);
    it_expect_sub(a, 0, 1, a->id, 2, 1, 1);
    uint64_t n1 = produce("news", "\"unbound\"");
    uint64_t o1 = produce("release", "\"1.0\"");
    expect_event(a, MT_RELEASE, "release", o1, 0, "1.0");
    it_file("bindings.json",
            "{\"bindings\": [{\"topic\": \"vip\", \"route\": \"user_id\", \"msg_type\": 202},"
            "{\"topic\": \"news\", \"broadcast\": \"global\", \"msg_type\": 203}]}");
    assert_int_equal(kill(it_srv()->pid, SIGHUP), 0);
    it_log_expect("SIGHUP: 2 bindings reloaded from");
    produce("release", "\"2.0\"");
    uint64_t v1 = produce("vip", "{\"user_id\":\"alice\"}");
    expect_event(a, 202, "vip", v1, 0, "{\"user_id\":\"alice\"}");
    uint64_t n2 = produce("news", "\"bound\"");
    expect_event(a, 203, "news", n2, n1, "bound");
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_events_total"), 3);
    it_file("bindings.json", "{\"bindings\": [{\"topic\": \"vip\"}]}");
    assert_int_equal(kill(it_srv()->pid, SIGHUP), 0);
    it_log_expect("SIGHUP: keeping the current bindings: --bridge-file ");
    uint64_t v2 = produce("vip", "{\"user_id\":\"alice\"}");
    expect_event(a, 202, "vip", v2, v1, "{\"user_id\":\"alice\"}");
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_bridge_events_total"), 4);
}

/* A bindings file that does not load stops chanqd at start, saying which binding and why. */
static void test_bad_file(void **state)
{
    (void)state;
    cq_testsrv_t s;
    memset(&s, 0, sizeof(s));
    assert_int_equal(cq_testsrv_init(&s), 0);
    char path[512];
    assert_int_equal(cq_testsrv_file(&s, "b.json",
                                     "{\"bindings\": [{\"topic\": \"vip\", \"route\": "
                                     "\"user_id\", \"msg_type\": 42}]}",
                                     path, sizeof(path)),
                     0);
    const char *args[] = {"--dev", "--bridge-file", path, NULL};
    assert_int_equal(cq_testsrv_start(&s, args), -ECHILD);
    char *log = cq_testsrv_log(&s);
    assert_non_null(log);
    assert_non_null(strstr(log, "binding 0: \"msg_type\" must be an integer from 100 to 65535"));
    free(log);
    cq_testsrv_stop(&s);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_broadcast_global, it_teardown),
        cmocka_unit_test_teardown(test_route_by_pit, it_teardown),
        cmocka_unit_test_teardown(test_reload, it_teardown),
        cmocka_unit_test(test_bad_file),
    };
    return it_run("bridge", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
