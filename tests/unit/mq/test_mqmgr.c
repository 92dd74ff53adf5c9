/* tests/unit/mq: the management port's codec (src/mq/mgr_*.c, cq_mqmgr.h): every message
 * decoded from a literal body and encoded back to the same bytes, each field error with its
 * exact code and text, the error answers, and a fail-N allocation loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_mqmgr.h"
#include "test_alloc.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int decode(uint8_t type, const char *json, cq_mqmgr_msg_t **m, char *err, size_t errlen)
{
    cq_mq_frame_t f = {(const uint8_t *)json, (uint32_t)strlen(json), 9, type};
    return cq_mqmgr_decode(&f, 0, m, err, errlen);
}

static cq_mqmgr_msg_t *decode_ok(uint8_t type, const char *json, cq_mqmgr_kind_t kind)
{
    cq_mqmgr_msg_t *m = NULL;
    char err[512] = "";
    int rc = decode(type, json, &m, err, sizeof(err));
    if (rc)
        fail_msg("decode %s: %d %s", json, rc, err);
    assert_int_equal(m->kind, kind);
    assert_int_equal(m->msg_id, 9);
    return m;
}

/* The body of m's encoding must be exactly want, and decode to a message encoding the same. */
static void expect_body(const cq_mqmgr_msg_t *m, const char *want)
{
    uint8_t *p = NULL;
    size_t n = 0;
    assert_int_equal(cq_mqmgr_encode(m, &p, &n), 0);
    cq_mq_frame_t f;
    assert_int_equal(cq_mq_parse(p, n, 0, &f), (ssize_t)n);
    assert_int_equal(f.type, cq_mqmgr_kind_type(m->kind));
    assert_int_equal(f.msg_id, m->msg_id);
    if (f.body_len != strlen(want) || memcmp(f.body, want, f.body_len) != 0)
        fail_msg("\n  got  %.*s\n  want %s", (int)f.body_len, (const char *)f.body, want);
    cq_mqmgr_msg_t *d = NULL;
    char err[512];
    assert_int_equal(cq_mqmgr_decode(&f, 0, &d, err, sizeof(err)), 0);
    assert_int_equal(d->kind, m->kind);
    cq_buf_t *b = NULL;
    assert_int_equal(cq_mqmgr_encode_buf(d, &b), 0);
    assert_int_equal(b->len, n);
    assert_memory_equal(b->data, p, n);
    cq_buf_unref(b);
    cq_mqmgr_msg_free(d);
    cq_free(p);
}

static void expect_err(uint8_t type, const char *json, int code, const char *want)
{
    cq_mqmgr_msg_t *m = (cq_mqmgr_msg_t *)(uintptr_t)1;
    char err[512] = "";
    int rc = decode(type, json, &m, err, sizeof(err));
    if (rc != code)
        fail_msg("%s: got %d (%s) want %d", json, rc, err, code);
    assert_ptr_equal(m, (cq_mqmgr_msg_t *)(uintptr_t)1);
    if (want && strcmp(err, want) != 0)
        fail_msg("%s:\n  got  \"%s\"\n  want \"%s\"", json, err, want);
}

/* ---- every message --------------------------------------------------------------------- */

static void test_svrconfig(void **state)
{
    (void)state;
    const char *b = "{\"askid\":5,\"module_id\":7,\"token\":\"s3cret\"}";
    cq_mqmgr_msg_t *m = decode_ok(1, b, CQ_MQMGR_SVRCONFIG);
    assert_int_equal(m->askid, 5);
    assert_int_equal(m->module_id, 7);
    assert_string_equal(m->token, "s3cret");
    expect_body(m, b);
    cq_mqmgr_msg_free(m);

    b = "{\"askid\":5,\"module_id\":7,\"err_code\":0,\"servers\":[{\"ip\":\"10.0.0.1\",\"port\":"
        "12100,\"shard\":0},{\"ip\":\"10.0.0.2\",\"port\":12101,\"shard\":1}]}";
    m = decode_ok(2, b, CQ_MQMGR_SVRCONFIG_RESP);
    assert_int_equal(m->nservers, 2);
    assert_string_equal(m->servers[1].ip, "10.0.0.2");
    assert_int_equal(m->servers[1].port, 12101);
    assert_int_equal(m->servers[1].shard, 1);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);

    /* built by hand: the same bytes */
    m = cq_mqmgr_msg_new(CQ_MQMGR_SVRCONFIG_RESP, 9);
    m->askid = 5;
    m->module_id = 7;
    assert_int_equal(cq_mqmgr_msg_add_server(m, "10.0.0.1", 12100, 0), 0);
    assert_int_equal(cq_mqmgr_msg_add_server(m, "10.0.0.2", 12101, 1), 0);
    assert_int_equal(cq_mqmgr_msg_add_server(m, "x", 0, 1), CQ_EFIELD);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);
}

/* A relay node's report (ext.relay with its identity and links) and a svrconfig answer listing
 * relay nodes: decoded, encoded back to the same bytes, built by hand to the same bytes. */
static const char *const sync_relay =
    "{\"askid\":1,\"group_id\":0,\"appid\":3,\"token\":\"t\",\"serverinfo\":{\"threads\":4,"
    "\"packages\":5,\"cpu\":6,\"mem\":7,\"sockets\":8},\"ext\":{\"relay\":{\"connections\":{"
    "\"tcp\":1,\"ws\":2,\"wss\":0,\"kcp\":0},\"channels\":{\"GLOBAL\":1,\"PRIVATE\":0,"
    "\"SUBWORLD\":2,\"SPATIAL\":0,\"ENTITY\":0},\"subscribers\":6,\"fanouts_total\":7,"
    "\"slow_consumer_closes_total\":0,\"node\":2,\"cluster\":\"eu-1\",\"global_home\":1,"
    "\"members\":3,\"addrs\":{\"tcp\":\"10.0.0.2:12108\",\"ws\":\"10.0.0.2:12180\"},"
    "\"links\":[{\"peer\":1,\"up\":true,\"packets_in\":10,\"packets_out\":11,"
    "\"bytes_out\":12000,\"gaps\":2,\"resets\":1,\"lost\":3},{\"peer\":3,\"up\":false,"
    "\"packets_in\":0,\"packets_out\":0,\"bytes_out\":0,\"gaps\":0,\"resets\":0,\"lost\":0}]}}}";

static void test_relay_node(void **state)
{
    (void)state;
    cq_mqmgr_msg_t *m = decode_ok(1, sync_relay, CQ_MQMGR_SYNC);
    const cq_mqmgr_relay_t *r = &m->ext.relay;
    assert_int_equal(m->ext.has, CQ_MQMGR_X_EXT | CQ_MQMGR_X_RELAY);
    assert_int_equal(r->node, 2);
    assert_string_equal(r->cluster, "eu-1");
    assert_int_equal(r->global_home, 1);
    assert_int_equal(r->members, 3);
    assert_string_equal(r->addrs[0], "10.0.0.2:12108");
    assert_string_equal(r->addrs[1], "10.0.0.2:12180");
    assert_string_equal(r->addrs[2], "");
    assert_string_equal(r->addrs[3], "");
    assert_int_equal(r->nlinks, 2);
    assert_int_equal(r->links[0].peer, 1);
    assert_true(r->links[0].up);
    assert_int_equal(r->links[0].packets_in, 10);
    assert_int_equal(r->links[0].packets_out, 11);
    assert_int_equal(r->links[0].bytes_out, 12000);
    assert_int_equal(r->links[0].gaps, 2);
    assert_int_equal(r->links[0].resets, 1);
    assert_int_equal(r->links[0].lost, 3);
    assert_int_equal(r->links[1].peer, 3);
    assert_false(r->links[1].up);
    expect_body(m, sync_relay);
    cq_mqmgr_msg_free(m);

    m = cq_mqmgr_msg_new(CQ_MQMGR_SYNC, 9);
    m->askid = 1;
    m->appid = 3;
    assert_int_equal(cq_mqmgr_msg_set_str(m, &m->token, "t"), 0);
    m->info = (cq_mqmgr_info_t){4, 5, 6, 7, 8};
    cq_mqmgr_relay_t *b = &m->ext.relay;
    b->connections[0] = 1;
    b->connections[1] = 2;
    b->channels[0] = 1;
    b->channels[2] = 2;
    b->subscribers = 6;
    b->fanouts_total = 7;
    b->node = 2;
    snprintf(b->cluster, sizeof(b->cluster), "eu-1");
    b->global_home = 1;
    b->members = 3;
    snprintf(b->addrs[0], sizeof(b->addrs[0]), "10.0.0.2:12108");
    snprintf(b->addrs[1], sizeof(b->addrs[1]), "10.0.0.2:12180");
    cq_mqmgr_link_t l = {1, true, 10, 11, 12000, 2, 1, 3};
    assert_int_equal(cq_mqmgr_msg_add_link(m, &l), 0);
    assert_int_equal(m->ext.has, CQ_MQMGR_X_EXT | CQ_MQMGR_X_RELAY);
    l = (cq_mqmgr_link_t){.peer = 3};
    assert_int_equal(cq_mqmgr_msg_add_link(m, &l), 0);
    l.peer = 0;
    assert_int_equal(cq_mqmgr_msg_add_link(m, &l), CQ_EFIELD);
    l = (cq_mqmgr_link_t){.peer = 4, .lost = -1};
    assert_int_equal(cq_mqmgr_msg_add_link(m, &l), CQ_EFIELD);
    expect_body(m, sync_relay);
    /* a node id over the range is refused by the encoder */
    b->node = CQ_MQMGR_NODE_MAX + 1;
    uint8_t *p = NULL;
    size_t n = 0;
    assert_int_equal(cq_mqmgr_encode(m, &p, &n), CQ_EFIELD);
    /* node 0: not a relay node, none of its fields is encoded */
    b->node = 0;
    assert_int_equal(cq_mqmgr_encode(m, &p, &n), 0);
    assert_null(memmem(p, n, "\"node\"", 6));
    assert_null(memmem(p, n, "\"links\"", 7));
    cq_free(p);
    /* links are bounded */
    b->node = 2;
    for (uint32_t k = (uint32_t)b->nlinks; k < CQ_MQMGR_LINKS_MAX; k++) {
        l = (cq_mqmgr_link_t){.peer = k + 1};
        assert_int_equal(cq_mqmgr_msg_add_link(m, &l), 0);
    }
    assert_int_equal(cq_mqmgr_msg_add_link(m, &l), CQ_ELIMIT);
    cq_mqmgr_msg_free(m);
}

static const char *const svrconfig_relay =
    "{\"askid\":5,\"module_id\":7,\"err_code\":0,\"servers\":[{\"ip\":\"10.0.0.1\",\"port\":"
    "12100,\"shard\":1}],\"relay_nodes\":[{\"node\":1,\"cluster\":\"eu-1\",\"tcp\":"
    "\"10.0.0.2:12108\",\"ws\":\"10.0.0.2:12180\",\"wss\":\"relay.example:443\",\"kcp\":"
    "\"10.0.0.2:12109\"},{\"node\":2,\"cluster\":\"eu-1\",\"tcp\":\"10.0.0.3:12108\"}]}";

static void test_svrconfig_relay_nodes(void **state)
{
    (void)state;
    cq_mqmgr_msg_t *m = decode_ok(2, svrconfig_relay, CQ_MQMGR_SVRCONFIG_RESP);
    assert_int_equal(m->nservers, 1);
    assert_int_equal(m->nrelay_nodes, 2);
    assert_int_equal(m->relay_nodes[0].node, 1);
    assert_string_equal(m->relay_nodes[0].cluster, "eu-1");
    assert_string_equal(m->relay_nodes[0].addrs[2], "relay.example:443");
    assert_string_equal(m->relay_nodes[1].addrs[0], "10.0.0.3:12108");
    assert_string_equal(m->relay_nodes[1].addrs[1], "");
    expect_body(m, svrconfig_relay);
    cq_mqmgr_msg_free(m);

    m = cq_mqmgr_msg_new(CQ_MQMGR_SVRCONFIG_RESP, 9);
    m->askid = 5;
    m->module_id = 7;
    assert_int_equal(cq_mqmgr_msg_add_server(m, "10.0.0.1", 12100, 1), 0);
    const char *a1[4] = {"10.0.0.2:12108", "10.0.0.2:12180", "relay.example:443", "10.0.0.2:12109"};
    const char *a2[4] = {"10.0.0.3:12108", NULL, "", NULL};
    assert_int_equal(cq_mqmgr_msg_add_relay_node(m, 1, "eu-1", a1), 0);
    assert_int_equal(cq_mqmgr_msg_add_relay_node(m, 2, "eu-1", a2), 0);
    assert_int_equal(cq_mqmgr_msg_add_relay_node(m, 0, "eu-1", a2), CQ_EFIELD);
    assert_int_equal(cq_mqmgr_msg_add_relay_node(m, 3, "", a2), CQ_EFIELD);
    assert_int_equal(cq_mqmgr_msg_add_relay_node(m, 3, "a-name-longer-than-32-bytes-xxxxx", a2),
                     CQ_EFIELD);
    expect_body(m, svrconfig_relay);
    for (uint32_t k = 2; k < CQ_MQMGR_RELAY_NODES_MAX; k++)
        assert_int_equal(cq_mqmgr_msg_add_relay_node(m, 3, "eu-1", a2), 0);
    assert_int_equal(cq_mqmgr_msg_add_relay_node(m, 3, "eu-1", a2), CQ_ELIMIT);
    cq_mqmgr_msg_free(m);

    /* what a later manager may add is ignored: keys unknown at the top and in an entry */
    m = decode_ok(2,
                  "{\"askid\":5,\"module_id\":7,\"err_code\":0,\"servers\":[],\"future\":{},"
                  "\"relay_nodes\":[{\"node\":4,\"cluster\":\"x\",\"quic\":\"h:1\",\"tcp\":"
                  "\"h:2\"}]}",
                  CQ_MQMGR_SVRCONFIG_RESP);
    assert_int_equal(m->nrelay_nodes, 1);
    assert_int_equal(m->relay_nodes[0].node, 4);
    assert_string_equal(m->relay_nodes[0].addrs[0], "h:2");
    cq_mqmgr_msg_free(m);

#define SC "{\"askid\":1,\"module_id\":1,\"err_code\":0,\"servers\":[],\"relay_nodes\":"
    expect_err(2, SC "{}}", CQ_EFIELD,
               "svrconfig_resp: field \"relay_nodes\": must be an array of at most 256 relay "
               "nodes");
    expect_err(2, SC "[1]}", CQ_EFIELD,
               "svrconfig_resp: field \"relay_nodes[0]\": must be an object");
    expect_err(2, SC "[{\"cluster\":\"a\"}]}", CQ_EFIELD,
               "svrconfig_resp: field \"relay_nodes[0].node\": missing");
    expect_err(2, SC "[{\"node\":1024,\"cluster\":\"a\"}]}", CQ_EFIELD,
               "svrconfig_resp: field \"relay_nodes[0].node\": must be an integer in [1, 1023]");
    expect_err(2, SC "[{\"node\":1}]}", CQ_EFIELD,
               "svrconfig_resp: field \"relay_nodes[0].cluster\": missing");
    expect_err(2, SC "[{\"node\":1,\"cluster\":\"\"}]}", CQ_EFIELD,
               "svrconfig_resp: field \"relay_nodes[0].cluster\": must not be empty");
    expect_err(2, SC "[{\"node\":1,\"cluster\":\"a\",\"kcp\":5}]}", CQ_EFIELD,
               "svrconfig_resp: field \"relay_nodes[0].kcp\": must be a string of at most 255 "
               "bytes");
#undef SC
}

static const char *const sync_full =
    "{\"askid\":1,\"group_id\":2,\"appid\":3,\"token\":\"t\",\"serverinfo\":{\"threads\":4,"
    "\"packages\":5,\"cpu\":6,\"mem\":7,\"sockets\":8},\"ext\":{\"addr\":\"127.0.0.1:12100\","
    "\"shard\":1,\"master\":true,\"offline\":false,\"draining\":false,\"config_version\":9,"
    "\"produced_total\":100,\"consumed_total\":50,\"repl\":{\"replica\":true,\"io_running\":"
    "true,\"sql_running\":false,\"lag_seconds\":-1,\"lag_transactions\":3,\"behind_ms\":4000},"
    "\"topics\":[{\"name\":\"orders\",\"online\":true,\"last_offset\":10,\"produced_total\":11,"
    "\"consumers\":[{\"id\":\"c1\",\"offset\":7,\"lag\":3}]}],\"relay\":{\"connections\":{"
    "\"tcp\":1,\"ws\":2,\"wss\":3,\"kcp\":4},\"channels\":{\"GLOBAL\":1,\"PRIVATE\":2,"
    "\"SUBWORLD\":3,\"SPATIAL\":4,\"ENTITY\":5},\"subscribers\":6,\"fanouts_total\":7,"
    "\"slow_consumer_closes_total\":8}}}";

static void test_sync(void **state)
{
    (void)state;
    cq_mqmgr_msg_t *m = decode_ok(1, sync_full, CQ_MQMGR_SYNC);
    assert_int_equal(m->group_id, 2);
    assert_int_equal(m->appid, 3);
    assert_int_equal(m->info.threads, 4);
    assert_int_equal(m->info.sockets, 8);
    assert_int_equal(m->ext.has, 0xfff);
    assert_string_equal(m->ext.addr, "127.0.0.1:12100");
    assert_true(m->ext.master);
    assert_int_equal(m->ext.config_version, 9);
    assert_int_equal(m->ext.repl.lag_seconds, -1);
    assert_int_equal(m->ext.repl.behind_ms, 4000);
    assert_int_equal(m->ext.ntopics, 1);
    assert_int_equal(m->ext.topics[0].consumers[0].lag, 3);
    assert_int_equal(m->ext.relay.connections[3], 4);
    assert_int_equal(m->ext.relay.channels[4], 5);
    assert_int_equal(m->ext.relay.slow_consumer_closes_total, 8);
    expect_body(m, sync_full);
    cq_mqmgr_msg_free(m);

    /* no ext; unknown keys ignored; a partial ext keeps its defaults */
    const char *b = "{\"askid\":1,\"group_id\":2,\"appid\":3,\"token\":\"\",\"serverinfo\":{"
                    "\"threads\":0,\"packages\":0,\"cpu\":0,\"mem\":0,\"sockets\":0}}";
    m = decode_ok(1, b, CQ_MQMGR_SYNC);
    assert_int_equal(m->ext.has, 0);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);
    m = decode_ok(1,
                  "{\"askid\":1,\"group_id\":2,\"appid\":3,\"token\":\"\",\"x\":[1],\"serverinfo\":"
                  "{\"threads\":0,\"packages\":0,\"cpu\":0,\"mem\":0,\"sockets\":0,\"y\":1},"
                  "\"ext\":{\"repl\":{},\"topics\":[{\"name\":\"a\"}],\"z\":{}}}",
                  CQ_MQMGR_SYNC);
    assert_int_equal(m->ext.has, CQ_MQMGR_X_EXT | CQ_MQMGR_X_REPL | CQ_MQMGR_X_TOPICS);
    assert_int_equal(m->ext.repl.lag_seconds, -1);
    assert_true(m->ext.topics[0].online);
    assert_int_equal(m->ext.topics[0].nconsumers, 0);
    cq_mqmgr_msg_free(m);

    b = "{\"askid\":1,\"err_code\":0,\"config_version\":12}";
    m = decode_ok(2, b, CQ_MQMGR_SYNC_RESP);
    assert_int_equal(m->config_version, 12);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);
    b = "{\"askid\":1,\"err_code\":6,\"err_msg\":\"bad token\",\"config_version\":0}";
    m = decode_ok(2, b, CQ_MQMGR_SYNC_RESP);
    assert_int_equal(m->err_code, 6);
    assert_string_equal(m->err_msg, "bad token");
    expect_body(m, b);
    cq_mqmgr_msg_free(m);
}

static void test_sync_built(void **state)
{
    (void)state;
    cq_mqmgr_msg_t *m = cq_mqmgr_msg_new(CQ_MQMGR_SYNC, 9);
    m->askid = 1;
    m->group_id = 2;
    m->appid = 3;
    assert_int_equal(cq_mqmgr_msg_set_str(m, &m->token, "t"), 0);
    m->info = (cq_mqmgr_info_t){4, 5, 6, 7, 8};
    m->ext.has = 0xfff & ~(unsigned)CQ_MQMGR_X_TOPICS;
    snprintf(m->ext.addr, sizeof(m->ext.addr), "127.0.0.1:12100");
    m->ext.shard = 1;
    m->ext.master = true;
    m->ext.config_version = 9;
    m->ext.produced_total = 100;
    m->ext.consumed_total = 50;
    m->ext.repl = (cq_mqmgr_repl_t){true, true, false, -1, 3, 4000};
    assert_int_equal(cq_mqmgr_msg_add_consumer(m, "c1", 7, 3), CQ_EFIELD); /* no topic yet */
    assert_int_equal(cq_mqmgr_msg_add_topic(m, "orders", true, 10, 11), 0);
    assert_int_equal(cq_mqmgr_msg_add_topic(m, "bad-name", true, 10, 11), CQ_EBADTOPIC);
    assert_int_equal(cq_mqmgr_msg_add_consumer(m, "c1", 7, 3), 0);
    for (int i = 0; i < 4; i++)
        m->ext.relay.connections[i] = i + 1;
    for (int i = 0; i < 5; i++)
        m->ext.relay.channels[i] = i + 1;
    m->ext.relay.subscribers = 6;
    m->ext.relay.fanouts_total = 7;
    m->ext.relay.slow_consumer_closes_total = 8;
    expect_body(m, sync_full);
    /* many topics and consumers grow their arrays */
    for (int i = 1; i < CQ_MQMGR_TOPICS_MAX; i++) {
        char name[16];
        snprintf(name, sizeof(name), "t%d", i);
        assert_int_equal(cq_mqmgr_msg_add_topic(m, name, false, 0, 0), 0);
    }
    assert_int_equal(cq_mqmgr_msg_add_topic(m, "over", false, 0, 0), CQ_ELIMIT);
    for (int i = 0; i < CQ_MQMGR_CONSUMERS_MAX; i++)
        assert_int_equal(cq_mqmgr_msg_add_consumer(m, "c", i, 0), 0);
    assert_int_equal(cq_mqmgr_msg_add_consumer(m, "c", 0, 0), CQ_ELIMIT);
    uint8_t *p;
    size_t n;
    assert_int_equal(cq_mqmgr_encode(m, &p, &n), 0);
    cq_mq_frame_t f;
    assert_int_equal(cq_mq_parse(p, n, 0, &f), (ssize_t)n);
    cq_mqmgr_msg_t *d = NULL;
    assert_int_equal(cq_mqmgr_decode(&f, 0, &d, NULL, 0), 0);
    assert_int_equal(d->ext.ntopics, CQ_MQMGR_TOPICS_MAX);
    assert_int_equal(d->ext.topics[CQ_MQMGR_TOPICS_MAX - 1].nconsumers, CQ_MQMGR_CONSUMERS_MAX);
    cq_mqmgr_msg_free(d);
    cq_free(p);
    cq_mqmgr_msg_free(m);
}

static void test_commands(void **state)
{
    (void)state;
    const char *b =
        "{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":4,\"modules\":{\"7\":{"
        "\"token\":\"x\",\"produce\":[\"orders\"],\"consume\":[\"*\"],\"admin\":false}},"
        "\"topics\":{\"orders\":{\"online\":false,\"retention\":3600},\"b\":{"
        "\"online\":true,\"retention\":0}}}}";
    cq_mqmgr_msg_t *m = decode_ok(3, b, CQ_MQMGR_COMMAND);
    assert_int_equal(m->cmdid, 1);
    assert_int_equal(m->config.version, 4);
    assert_string_equal(m->config.modules, "{\"7\":{\"token\":\"x\",\"produce\":[\"orders\"],"
                                           "\"consume\":[\"*\"],\"admin\":false}}");
    assert_int_equal(m->config.modules_len, strlen(m->config.modules));
    assert_int_equal(m->config.ntopics, 2);
    assert_string_equal(m->config.topics[0].name, "orders");
    assert_false(m->config.topics[0].online);
    assert_int_equal(m->config.topics[0].retention, 3600);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);

    m = cq_mqmgr_msg_new(CQ_MQMGR_COMMAND, 9);
    m->askid = 1;
    m->cmdid = 1;
    m->config.version = 4;
    const char *mods = "{ \"7\": {\"token\": \"x\", \"produce\": [\"orders\"], \"consume\": "
                       "[\"*\"], \"admin\": false} }";
    assert_int_equal(cq_mqmgr_config_set_modules(&m->config, mods, strlen(mods)), 0);
    assert_int_equal(cq_mqmgr_config_set_modules(&m->config, "[1]", 3), CQ_EFIELD);
    assert_int_equal(cq_mqmgr_config_set_modules(&m->config, "{", 1), CQ_EFIELD);
    assert_int_equal(cq_mqmgr_config_add_topic(&m->config, "orders", false, 3600), 0);
    assert_int_equal(cq_mqmgr_config_add_topic(&m->config, "b", true, 0), 0);
    assert_int_equal(cq_mqmgr_config_add_topic(&m->config, "", true, 0), CQ_EBADTOPIC);
    assert_int_equal(cq_mqmgr_config_add_topic(&m->config, "c", true, -2), CQ_EFIELD);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);

    /* a topic whose retention the manager never set: no "retention" on the wire, and it
     * decodes back as unset (a server keeps its own), not as 0 (keep forever) */
    b = "{\"askid\":2,\"cmdid\":1,\"content\":{\"version\":4,\"topics\":{\"u\":{"
        "\"online\":false}}}}";
    m = decode_ok(3, b, CQ_MQMGR_COMMAND);
    assert_int_equal(m->config.ntopics, 1);
    assert_int_equal(m->config.topics[0].retention, CQ_MQMGR_RETENTION_UNSET);
    cq_mqmgr_msg_free(m);
    m = cq_mqmgr_msg_new(CQ_MQMGR_COMMAND, 9);
    m->askid = 2;
    m->cmdid = 1;
    m->config.version = 4;
    assert_int_equal(cq_mqmgr_config_add_topic(&m->config, "u", false, CQ_MQMGR_RETENTION_UNSET),
                     0);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);

    /* the bindings document travels as an object, after the topics; its content is the
     * server's to check */
    b = "{\"askid\":3,\"cmdid\":1,\"content\":{\"version\":5,\"topics\":{},\"bindings\":{"
        "\"bindings\":[{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201}]}}}";
    m = decode_ok(3, b, CQ_MQMGR_COMMAND);
    assert_null(m->config.modules);
    assert_string_equal(
        m->config.bindings,
        "{\"bindings\":[{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201}]}");
    assert_int_equal(m->config.bindings_len, strlen(m->config.bindings));
    expect_body(m, b);
    cq_mqmgr_msg_free(m);
    m = cq_mqmgr_msg_new(CQ_MQMGR_COMMAND, 9);
    m->askid = 3;
    m->cmdid = 1;
    m->config.version = 5;
    const char *bs = "{ \"bindings\": [ {\"topic\": \"vip\", \"route\": \"user_id\", "
                     "\"msg_type\": 201} ] }";
    assert_int_equal(cq_mqmgr_config_set_bindings(&m->config, bs, strlen(bs)), 0);
    assert_int_equal(cq_mqmgr_config_set_bindings(&m->config, "[]", 2), CQ_EFIELD);
    assert_int_equal(cq_mqmgr_config_set_bindings(&m->config, "{", 1), CQ_EFIELD);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);

    b = "{\"askid\":2,\"cmdid\":2,\"content\":{\"offline\":true}}";
    m = decode_ok(3, b, CQ_MQMGR_COMMAND);
    assert_int_equal(m->cmdid, 2);
    assert_true(m->offline);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);

    b = "{\"askid\":5,\"cmdid\":3,\"content\":{\"topic\":\"ev\",\"offset\":9007199254740991}}";
    m = decode_ok(3, b, CQ_MQMGR_COMMAND);
    assert_int_equal(m->cmdid, CQ_MQMGR_CMD_INVALIDATE);
    assert_string_equal(m->topic, "ev");
    assert_int_equal(m->offset, 9007199254740991ULL);
    expect_body(m, b);
    m->offset = 0; /* out of range: not encoded */
    uint8_t *raw = NULL;
    size_t raw_len = 0;
    assert_int_equal(cq_mqmgr_encode(m, &raw, &raw_len), CQ_EFIELD);
    m->offset = 1;
    snprintf(m->topic, sizeof(m->topic), "a-b");
    assert_int_equal(cq_mqmgr_encode(m, &raw, &raw_len), CQ_EBADTOPIC);
    cq_mqmgr_msg_free(m);
    b = "{\"askid\":6,\"cmdid\":4,\"content\":{\"topic\":\"ev\",\"offset\":3}}";
    m = decode_ok(3, b, CQ_MQMGR_COMMAND);
    assert_int_equal(m->cmdid, CQ_MQMGR_CMD_MESSAGE);
    assert_int_equal(m->offset, 3);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);
    b = "{\"askid\":7,\"cmdid\":4,\"content\":{\"topic\":\"ev\",\"producer_id\":77,\"seq\":0}}";
    m = decode_ok(3, b, CQ_MQMGR_COMMAND);
    assert_int_equal(m->offset, 0);
    assert_int_equal(m->key_producer, 77);
    assert_int_equal(m->key_seq, 0);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);
    b = "{\"askid\":6,\"cmdid\":4,\"err_code\":0,\"message\":{\"offset\":3,\"state\":0}}";
    m = decode_ok(4, b, CQ_MQMGR_COMMAND_RESP);
    assert_string_equal(m->message, "{\"offset\":3,\"state\":0}");
    expect_body(m, b);
    assert_int_equal(cq_mqmgr_msg_set_message(m, "[1]", 3), CQ_EFIELD);
    assert_int_equal(cq_mqmgr_msg_set_message(m, "{ \"a\" : 1 }", 11), 0);
    assert_string_equal(m->message, "{\"a\":1}");
    /* command 4's found message: text cut at a character, or hex when not UTF-8 */
    cq_mqmgr_found_t f = {9, 0, 1700000000000, 77, 3, "ab\xc3\xa9", 4, 3};
    assert_int_equal(cq_mqmgr_msg_set_found(m, &f), 0);
    assert_string_equal(m->message, "{\"offset\":9,\"state\":0,\"create_time\":1700000000000,"
                                    "\"producer_id\":77,\"seq\":3,\"size\":4,\"truncated\":true,"
                                    "\"content\":\"ab\"}");
    f = (cq_mqmgr_found_t){9, 1, 5, 0, 0, "\xff\x00\x01", 3, 4};
    assert_int_equal(cq_mqmgr_msg_set_found(m, &f), 0);
    assert_string_equal(m->message, "{\"offset\":9,\"state\":1,\"create_time\":5,\"producer_id\":0,"
                                    "\"seq\":0,\"size\":3,\"truncated\":true,\"content_hex\":"
                                    "\"ff00\"}");
    cq_mqmgr_msg_free(m);
    b = "{\"askid\":5,\"cmdid\":3,\"err_code\":21,\"err_msg\":\"no message at offset 9\"}";
    m = decode_ok(4, b, CQ_MQMGR_COMMAND_RESP);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);

    b = "{\"askid\":2,\"cmdid\":2,\"err_code\":0}";
    m = decode_ok(4, b, CQ_MQMGR_COMMAND_RESP);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);
    b = "{\"askid\":2,\"cmdid\":1,\"err_code\":5,\"err_msg\":\"modules: bad\"}";
    m = decode_ok(4, b, CQ_MQMGR_COMMAND_RESP);
    assert_string_equal(m->err_msg, "modules: bad");
    expect_body(m, b);
    cq_mqmgr_msg_free(m);

    b = "{\"err_code\":4,\"err_msg\":\"unknown message type 9\"}";
    m = decode_ok(20, b, CQ_MQMGR_ERROR_FRAME);
    assert_false(m->has_askid);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);
    b = "{\"askid\":3,\"err_code\":3}";
    m = decode_ok(20, b, CQ_MQMGR_ERROR_FRAME);
    assert_true(m->has_askid);
    expect_body(m, b);
    cq_mqmgr_msg_free(m);
}

/* ---- errors ---------------------------------------------------------------------------- */

#define INFO "\"serverinfo\":{\"threads\":0,\"packages\":0,\"cpu\":0,\"mem\":0,\"sockets\":0}"
#define SYNC "{\"askid\":1,\"group_id\":2,\"appid\":3,\"token\":\"t\"," INFO

static void test_errors(void **state)
{
    (void)state;
    expect_err(5, "{}", CQ_ENOTYPE, "unknown message type 5");
    expect_err(0, "{}", CQ_ENOTYPE, "unknown message type 0");
    expect_err(1, "{", CQ_EJSON, NULL);
    expect_err(1, "[]", CQ_EJSON, "request: body must be a JSON object");
    expect_err(3, "{\"a\":1,\"a\":2}", CQ_EJSON, NULL);
    char deep[80] = "{\"a\":";
    for (int i = 0; i < 40; i++)
        strcat(deep, "[");
    expect_err(1, deep, CQ_EJSON, "request: JSON nested deeper than 32");

    expect_err(1, "{\"module_id\":7,\"token\":\"x\"}", CQ_EFIELD,
               "svrconfig: field \"askid\": missing");
    expect_err(1, "{\"askid\":-1,\"module_id\":7,\"token\":\"x\"}", CQ_EFIELD,
               "svrconfig: field \"askid\": must be an integer in [0, 4294967295]");
    expect_err(1, "{\"askid\":1,\"token\":\"x\"}", CQ_EFIELD,
               "svrconfig: field \"module_id\": missing");
    expect_err(1, "{\"askid\":1,\"module_id\":\"7\",\"token\":\"x\"}", CQ_EFIELD,
               "svrconfig: field \"module_id\": must be an integer in [0, 4294967295]");
    expect_err(1, "{\"askid\":1,\"module_id\":7}", CQ_EFIELD,
               "svrconfig: field \"token\": missing");
    expect_err(1, "{\"askid\":1,\"module_id\":7,\"token\":5}", CQ_EFIELD,
               "svrconfig: field \"token\": must be a string of at most 256 bytes");

    expect_err(1, "{\"askid\":1,\"appid\":3,\"token\":\"t\"," INFO "}", CQ_EFIELD,
               "sync_serverinfo: field \"group_id\": missing");
    expect_err(1, "{\"askid\":1,\"group_id\":2,\"token\":\"t\"," INFO "}", CQ_EFIELD,
               "sync_serverinfo: field \"appid\": missing");
    expect_err(1, "{\"askid\":1,\"group_id\":2,\"appid\":3," INFO "}", CQ_EFIELD,
               "sync_serverinfo: field \"token\": missing");
    expect_err(1, "{\"askid\":1,\"group_id\":2,\"appid\":3,\"token\":\"t\",\"serverinfo\":1}",
               CQ_EFIELD, "sync_serverinfo: field \"serverinfo\": must be an object");
    expect_err(1,
               "{\"askid\":1,\"group_id\":2,\"appid\":3,\"token\":\"t\",\"serverinfo\":{\"threads"
               "\":0,\"packages\":0,\"cpu\":0,\"mem\":0}}",
               CQ_EFIELD, "sync_serverinfo: field \"serverinfo.sockets\": missing");
    expect_err(1,
               "{\"askid\":1,\"group_id\":2,\"appid\":3,\"token\":\"t\",\"serverinfo\":{\"threads"
               "\":0,\"packages\":0,\"cpu\":1.5,\"mem\":0,\"sockets\":0}}",
               CQ_EFIELD,
               "sync_serverinfo: field \"serverinfo.cpu\": must be an integer in [0, 4294967295]");
    static const struct {
        const char *ext, *msg;
        int code;
    } ext[] = {
        {"[]", "field \"ext\": must be an object", CQ_EFIELD},
        {"{\"addr\":1}", "field \"ext.addr\": must be a string of at most 255 bytes", CQ_EFIELD},
        {"{\"shard\":-1}", "field \"ext.shard\": must be an integer in [0, 4294967295]", CQ_EFIELD},
        {"{\"master\":1}", "field \"ext.master\": must be true or false", CQ_EFIELD},
        {"{\"offline\":null}", "field \"ext.offline\": must be true or false", CQ_EFIELD},
        {"{\"draining\":0}", "field \"ext.draining\": must be true or false", CQ_EFIELD},
        {"{\"config_version\":-1}",
         "field \"ext.config_version\": must be an integer in [0, 9007199254740991]", CQ_EFIELD},
        {"{\"produced_total\":9007199254740992}",
         "field \"ext.produced_total\": must be an integer in [0, 9007199254740991]", CQ_EFIELD},
        {"{\"consumed_total\":\"1\"}",
         "field \"ext.consumed_total\": must be an integer in [0, 9007199254740991]", CQ_EFIELD},
        {"{\"repl\":[]}", "field \"ext.repl\": must be an object", CQ_EFIELD},
        {"{\"repl\":{\"replica\":1}}", "field \"ext.repl.replica\": must be true or false",
         CQ_EFIELD},
        {"{\"repl\":{\"io_running\":1}}", "field \"ext.repl.io_running\": must be true or false",
         CQ_EFIELD},
        {"{\"repl\":{\"sql_running\":1}}", "field \"ext.repl.sql_running\": must be true or false",
         CQ_EFIELD},
        {"{\"repl\":{\"lag_seconds\":-2}}",
         "field \"ext.repl.lag_seconds\": must be an integer in [-1, 9007199254740991]", CQ_EFIELD},
        {"{\"repl\":{\"lag_transactions\":-1}}",
         "field \"ext.repl.lag_transactions\": must be an integer in [0, 9007199254740991]",
         CQ_EFIELD},
        {"{\"repl\":{\"behind_ms\":true}}",
         "field \"ext.repl.behind_ms\": must be an integer in [0, 9007199254740991]", CQ_EFIELD},
        {"{\"topics\":{}}", "field \"ext.topics\": must be an array of at most 256 topics",
         CQ_EFIELD},
        {"{\"topics\":[1]}", "field \"ext.topics[0]\": must be an object", CQ_EFIELD},
        {"{\"topics\":[{}]}", "field \"ext.topics[0].name\": missing", CQ_EFIELD},
        {"{\"topics\":[{\"name\":\"a-b\"}]}",
         "field \"ext.topics[0].name\": must be a string matching [A-Za-z0-9_]{1,64}",
         CQ_EBADTOPIC},
        {"{\"topics\":[{\"name\":\"a\",\"online\":1}]}",
         "field \"ext.topics[0].online\": must be true or false", CQ_EFIELD},
        {"{\"topics\":[{\"name\":\"a\",\"last_offset\":-1}]}",
         "field \"ext.topics[0].last_offset\": must be an integer in [0, 9007199254740991]",
         CQ_EFIELD},
        {"{\"topics\":[{\"name\":\"a\",\"produced_total\":-1}]}",
         "field \"ext.topics[0].produced_total\": must be an integer in [0, 9007199254740991]",
         CQ_EFIELD},
        {"{\"topics\":[{\"name\":\"a\",\"consumers\":{}}]}",
         "field \"ext.topics[0].consumers\": must be an array of at most 64 consumers", CQ_EFIELD},
        {"{\"topics\":[{\"name\":\"a\"},{\"name\":\"b\",\"consumers\":[7]}]}",
         "field \"ext.topics[1].consumers[0]\": must be an object", CQ_EFIELD},
        {"{\"topics\":[{\"name\":\"a\",\"consumers\":[{}]}]}",
         "field \"ext.topics[0].consumers[0].id\": missing", CQ_EFIELD},
        {"{\"topics\":[{\"name\":\"a\",\"consumers\":[{\"id\":1}]}]}",
         "field \"ext.topics[0].consumers[0].id\": must be a string of at most 128 bytes",
         CQ_EFIELD},
        {"{\"topics\":[{\"name\":\"a\",\"consumers\":[{\"id\":\"c\",\"offset\":-1}]}]}",
         "field \"ext.topics[0].consumers[0].offset\": must be an integer in [0, "
         "9007199254740991]",
         CQ_EFIELD},
        {"{\"topics\":[{\"name\":\"a\",\"consumers\":[{\"id\":\"c\",\"lag\":-1}]}]}",
         "field \"ext.topics[0].consumers[0].lag\": must be an integer in [0, 9007199254740991]",
         CQ_EFIELD},
        {"{\"relay\":1}", "field \"ext.relay\": must be an object", CQ_EFIELD},
        {"{\"relay\":{\"connections\":[]}}", "field \"ext.relay.connections\": must be an object",
         CQ_EFIELD},
        {"{\"relay\":{\"connections\":{\"kcp\":-1}}}",
         "field \"ext.relay.connections.kcp\": must be an integer in [0, 9007199254740991]",
         CQ_EFIELD},
        {"{\"relay\":{\"channels\":{\"ENTITY\":-1}}}",
         "field \"ext.relay.channels.ENTITY\": must be an integer in [0, 9007199254740991]",
         CQ_EFIELD},
        {"{\"relay\":{\"subscribers\":-1}}",
         "field \"ext.relay.subscribers\": must be an integer in [0, 9007199254740991]", CQ_EFIELD},
        {"{\"relay\":{\"fanouts_total\":-1}}",
         "field \"ext.relay.fanouts_total\": must be an integer in [0, 9007199254740991]",
         CQ_EFIELD},
        {"{\"relay\":{\"slow_consumer_closes_total\":-1}}",
         "field \"ext.relay.slow_consumer_closes_total\": must be an integer in [0, "
         "9007199254740991]",
         CQ_EFIELD},
        {"{\"relay\":{\"node\":0,\"cluster\":\"a\"}}",
         "field \"ext.relay.node\": must be an integer in [1, 1023]", CQ_EFIELD},
        {"{\"relay\":{\"node\":1}}", "field \"ext.relay.cluster\": missing", CQ_EFIELD},
        {"{\"relay\":{\"node\":1,\"cluster\":\"a\",\"global_home\":-1}}",
         "field \"ext.relay.global_home\": must be an integer in [0, 1023]", CQ_EFIELD},
        {"{\"relay\":{\"node\":1,\"cluster\":\"a\",\"addrs\":[]}}",
         "field \"ext.relay.addrs\": must be an object", CQ_EFIELD},
        {"{\"relay\":{\"node\":1,\"cluster\":\"a\",\"addrs\":{\"ws\":1}}}",
         "field \"ext.relay.addrs.ws\": must be a string of at most 255 bytes", CQ_EFIELD},
        {"{\"relay\":{\"node\":1,\"cluster\":\"a\",\"links\":{}}}",
         "field \"ext.relay.links\": must be an array of at most 255 links", CQ_EFIELD},
        {"{\"relay\":{\"node\":1,\"cluster\":\"a\",\"links\":[{}]}}",
         "field \"ext.relay.links[0].peer\": missing", CQ_EFIELD},
        {"{\"relay\":{\"node\":1,\"cluster\":\"a\",\"links\":[{\"peer\":2,\"up\":1}]}}",
         "field \"ext.relay.links[0].up\": must be true or false", CQ_EFIELD},
        {"{\"relay\":{\"node\":1,\"cluster\":\"a\",\"links\":[{\"peer\":2,\"lost\":-1}]}}",
         "field \"ext.relay.links[0].lost\": must be an integer in [0, 9007199254740991]",
         CQ_EFIELD},
    };
    for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
        char body[512], want[256];
        snprintf(body, sizeof(body), SYNC ",\"ext\":%s}", ext[i].ext);
        snprintf(want, sizeof(want), "sync_serverinfo: %s", ext[i].msg);
        expect_err(1, body, ext[i].code, want);
    }
}

static void test_errors_responses_commands(void **state)
{
    (void)state;
    expect_err(2, "{\"askid\":1,\"module_id\":1,\"err_code\":0,\"servers\":{}}", CQ_EFIELD,
               "svrconfig_resp: field \"servers\": must be an array of at most 4096 servers");
    expect_err(2, "{\"askid\":1,\"err_code\":0,\"servers\":[]}", CQ_EFIELD,
               "svrconfig_resp: field \"module_id\": missing");
    expect_err(2, "{\"askid\":1,\"module_id\":1,\"servers\":[]}", CQ_EFIELD,
               "svrconfig_resp: field \"err_code\": missing");
    expect_err(2, "{\"askid\":1,\"module_id\":1,\"err_code\":0,\"servers\":[{\"port\":1}]}",
               CQ_EFIELD, "svrconfig_resp: field \"servers[0].ip\": missing");
    expect_err(2, "{\"askid\":1,\"module_id\":1,\"err_code\":0,\"servers\":[{\"ip\":\"a\"}]}",
               CQ_EFIELD, "svrconfig_resp: field \"servers[0].port\": missing");
    expect_err(2,
               "{\"askid\":1,\"module_id\":1,\"err_code\":0,\"servers\":[{\"ip\":\"a\",\"port\":"
               "65536}]}",
               CQ_EFIELD,
               "svrconfig_resp: field \"servers[0].port\": must be an integer in [1, 65535]");
    expect_err(2,
               "{\"askid\":1,\"module_id\":1,\"err_code\":0,\"servers\":[{\"ip\":\"a\",\"port\":1,"
               "\"shard\":-1}]}",
               CQ_EFIELD,
               "svrconfig_resp: field \"servers[0].shard\": must be an integer in [0, 4294967295]");
    expect_err(2, "{\"askid\":1,\"err_code\":0}", CQ_EFIELD,
               "sync_serverinfo_resp: field \"config_version\": missing");
    expect_err(2, "{\"askid\":1,\"err_code\":70000,\"config_version\":0}", CQ_EFIELD,
               "sync_serverinfo_resp: field \"err_code\": must be an integer in [0, 65535]");
    expect_err(2, "{\"askid\":1,\"err_code\":1,\"err_msg\":3,\"config_version\":0}", CQ_EFIELD,
               "sync_serverinfo_resp: field \"err_msg\": must be a string of at most 512 bytes");

    expect_err(3, "{\"askid\":1,\"content\":{}}", CQ_EFIELD, "command: field \"cmdid\": missing");
    expect_err(3, "{\"askid\":1,\"cmdid\":5,\"content\":{}}", CQ_EFIELD,
               "command: field \"cmdid\": must be 1 (publish_config), 2 (offline), 3 "
               "(invalidate) or 4 (message)");
    expect_err(3, "{\"askid\":1,\"cmdid\":4,\"content\":{\"topic\":\"a\"}}", CQ_EFIELD,
               "command: field \"content.offset\": missing");
    expect_err(
        3, "{\"askid\":1,\"cmdid\":4,\"content\":{\"topic\":\"a\",\"producer_id\":0}}", CQ_EFIELD,
        "command: field \"content.producer_id\": must be an integer in [1, 9007199254740991]");
    expect_err(3, "{\"askid\":1,\"cmdid\":4,\"content\":{\"topic\":\"a\",\"producer_id\":1}}",
               CQ_EFIELD, "command: field \"content.seq\": missing");
    expect_err(4, "{\"askid\":1,\"cmdid\":4,\"err_code\":0,\"message\":[]}", CQ_EFIELD,
               "command_resp: field \"message\": must be an object");
    expect_err(3, "{\"askid\":1,\"cmdid\":3,\"content\":{\"offset\":1}}", CQ_EFIELD,
               "command: field \"content.topic\": missing");
    expect_err(3, "{\"askid\":1,\"cmdid\":3,\"content\":{\"topic\":\"a-b\",\"offset\":1}}",
               CQ_EBADTOPIC,
               "command: field \"content.topic\": must be a string matching [A-Za-z0-9_]{1,64}");
    expect_err(3, "{\"askid\":1,\"cmdid\":3,\"content\":{\"topic\":\"a\"}}", CQ_EFIELD,
               "command: field \"content.offset\": missing");
    expect_err(3, "{\"askid\":1,\"cmdid\":3,\"content\":{\"topic\":\"a\",\"offset\":0}}", CQ_EFIELD,
               "command: field \"content.offset\": must be an integer in [1, 9007199254740991]");
    expect_err(3, "{\"askid\":1,\"cmdid\":2}", CQ_EFIELD, "command: field \"content\": missing");
    expect_err(3, "{\"askid\":1,\"cmdid\":2,\"content\":[]}", CQ_EFIELD,
               "command: field \"content\": must be an object");
    expect_err(3, "{\"askid\":1,\"cmdid\":2,\"content\":{}}", CQ_EFIELD,
               "command: field \"content.offline\": missing");
    expect_err(3, "{\"askid\":1,\"cmdid\":2,\"content\":{\"offline\":\"yes\"}}", CQ_EFIELD,
               "command: field \"content.offline\": must be true or false");
    expect_err(3, "{\"askid\":1,\"cmdid\":1,\"content\":{\"modules\":{},\"topics\":{}}}", CQ_EFIELD,
               "command: field \"content.version\": missing");
    /* without modules: the manager has none, the server keeps its own table */
    cq_mqmgr_msg_t *nm = decode_ok(
        3, "{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":1,\"topics\":{}}}", CQ_MQMGR_COMMAND);
    assert_null(nm->config.modules);
    expect_body(nm, "{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":1,\"topics\":{}}}");
    cq_mqmgr_msg_free(nm);
    expect_err(3,
               "{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":1,\"modules\":[],\"topics\":{}}}",
               CQ_EFIELD, "command: field \"content.modules\": must be an object");
    expect_err(3, "{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":1,\"modules\":{}}}", CQ_EFIELD,
               "command: field \"content.topics\": missing");
    expect_err(
        3, "{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":1,\"topics\":{},\"bindings\":[]}}",
        CQ_EFIELD, "command: field \"content.bindings\": must be an object");
    expect_err(
        3, "{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":1,\"modules\":{},\"topics\":[]}}",
        CQ_EFIELD, "command: field \"content.topics\": must be an object of at most 10000 topics");
    expect_err(3,
               "{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":1,\"modules\":{},\"topics\":{\"a-"
               "b\":{}}}}",
               CQ_EBADTOPIC,
               "command: field \"content.topics.a-b\": must be a topic name matching "
               "[A-Za-z0-9_]{1,64}");
    expect_err(3,
               "{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":1,\"modules\":{},\"topics\":{\"a"
               "\":1}}}",
               CQ_EFIELD, "command: field \"content.topics.a\": must be an object");
    expect_err(3,
               "{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":1,\"modules\":{},\"topics\":{\"a"
               "\":{}}}}",
               CQ_EFIELD, "command: field \"content.topics.a.online\": missing");
    expect_err(3,
               "{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":1,\"modules\":{},\"topics\":{\"a"
               "\":{\"online\":true,\"retention\":-1}}}}",
               CQ_EFIELD,
               "command: field \"content.topics.a.retention\": must be an integer in [0, "
               "9007199254740991]");
    expect_err(4, "{\"askid\":1,\"err_code\":0}", CQ_EFIELD,
               "command_resp: field \"cmdid\": missing");
    expect_err(4, "{\"askid\":1,\"cmdid\":1}", CQ_EFIELD,
               "command_resp: field \"err_code\": missing");
    expect_err(20, "{\"askid\":-1,\"err_code\":1}", CQ_EFIELD,
               "error: field \"askid\": must be an integer in [0, 4294967295]");
    expect_err(20, "{}", CQ_EFIELD, "error: field \"err_code\": missing");
}

/* ---- error answers --------------------------------------------------------------------- */

static void expect_answer(uint8_t type, const char *body, int err, const char *msg,
                          uint8_t want_type, const char *want)
{
    cq_mq_frame_t f = {(const uint8_t *)body, (uint32_t)strlen(body), 3, type};
    cq_buf_t *b = NULL;
    assert_int_equal(cq_mqmgr_encode_error_buf(&f, err, msg, 42, &b), 0);
    cq_mq_frame_t g;
    assert_int_equal(cq_mq_parse(b->data, b->len, 0, &g), (ssize_t)b->len);
    assert_int_equal(g.type, want_type);
    assert_int_equal(g.msg_id, 3);
    if (g.body_len != strlen(want) || memcmp(g.body, want, g.body_len) != 0)
        fail_msg("\n  got  %.*s\n  want %s", (int)g.body_len, (const char *)g.body, want);
    cq_buf_unref(b);
}

static void test_error_answers2(void **state)
{
    (void)state;
    expect_answer(1, "{\"askid\":4,\"module_id\":7}", CQ_EFIELD, "m", 2,
                  "{\"askid\":4,\"module_id\":7,\"err_code\":5,\"err_msg\":\"m\",\"servers\":[]}");
    expect_answer(1, "{\"askid\":\"x\"}", CQ_EFIELD, "m", 2,
                  "{\"askid\":0,\"module_id\":0,\"err_code\":5,\"err_msg\":\"m\",\"servers\":[]}");
    expect_answer(1, "{\"askid\":4,\"serverinfo\":1}", CQ_EFIELD, "m", 2,
                  "{\"askid\":4,\"err_code\":5,\"err_msg\":\"m\",\"config_version\":42}");
    expect_answer(1, "{\"askid\":4,\"serverinfo\":1}", CQ_EAUTH, NULL, 2,
                  "{\"askid\":4,\"err_code\":6,\"err_msg\":\"authentication failed\","
                  "\"config_version\":42}");
    expect_answer(1, "{\"askid\":4,\"serverinfo\":1}", CQ_EHEADER, "h", 20,
                  "{\"askid\":4,\"err_code\":1,\"err_msg\":\"h\"}");
    expect_answer(3, "{\"askid\":4,\"cmdid\":9}", CQ_EFIELD, "m", 4,
                  "{\"askid\":4,\"cmdid\":9,\"err_code\":5,\"err_msg\":\"m\"}");
    expect_answer(4, "{\"askid\":4}", CQ_EFIELD, "m", 20,
                  "{\"askid\":4,\"err_code\":5,\"err_msg\":\"m\"}");
    expect_answer(1, "{\"askid\":4", CQ_EJSON, "bad", 20, "{\"err_code\":3,\"err_msg\":\"bad\"}");
    expect_answer(9, "{\"askid\":4}", CQ_ENOTYPE, "unknown message type 9", 20,
                  "{\"askid\":4,\"err_code\":4,\"err_msg\":\"unknown message type 9\"}");
    cq_buf_t *b = NULL;
    assert_int_equal(cq_mqmgr_encode_error_buf(NULL, CQ_EBADLEN, NULL, 0, &b), 0);
    assert_int_equal(b->data[7], 20);
    assert_memory_equal(b->data + 12,
                        "{\"err_code\":2,\"err_msg\":\"frame total length out of bounds\"}",
                        b->len - 12);
    cq_buf_unref(b);
    /* an err_msg over 512 bytes is cut on a character boundary */
    char longmsg[600];
    memset(longmsg, 'a', sizeof(longmsg));
    memcpy(longmsg + 510, "\xc3\xa9", 2);
    longmsg[599] = '\0';
    cq_mq_frame_t f = {(const uint8_t *)"{}", 2, 3, 4};
    assert_int_equal(cq_mqmgr_encode_error_buf(&f, CQ_EFIELD, longmsg, 0, &b), 0);
    cq_mq_frame_t g;
    assert_int_equal(cq_mq_parse(b->data, b->len, 0, &g), (ssize_t)b->len);
    cq_mqmgr_msg_t *m = NULL;
    assert_int_equal(cq_mqmgr_decode(&g, 0, &m, NULL, 0), 0);
    assert_int_equal(strlen(m->err_msg), 512);
    cq_mqmgr_msg_free(m);
    cq_buf_unref(b);
}

static void test_encode_refusals(void **state)
{
    (void)state;
    cq_mqmgr_msg_t *m = cq_mqmgr_msg_new(CQ_MQMGR_SVRCONFIG, 1);
    uint8_t *p = NULL;
    size_t n;
    char tok[300];
    memset(tok, 'a', sizeof(tok));
    tok[299] = '\0';
    assert_int_equal(cq_mqmgr_msg_set_str(m, &m->token, tok), 0);
    assert_int_equal(cq_mqmgr_encode(m, &p, &n), CQ_EFIELD);
    assert_int_equal(cq_mqmgr_msg_set_str(m, &m->token, "\xff"), CQ_EFIELD);
    m->kind = 0;
    assert_int_equal(cq_mqmgr_encode(m, &p, &n), CQ_ENOTYPE);
    m->kind = CQ_MQMGR_SYNC;
    m->ext.has = CQ_MQMGR_X_REPL;
    m->ext.repl.lag_seconds = -2;
    assert_int_equal(cq_mqmgr_encode(m, &p, &n), CQ_EFIELD);
    cq_mqmgr_msg_free(m);
    assert_string_equal(cq_mqmgr_kind_name(CQ_MQMGR_SYNC), "sync_serverinfo");
    assert_string_equal(cq_mqmgr_kind_name(99), "?");
    assert_int_equal(cq_mqmgr_kind_type(CQ_MQMGR_ERROR_FRAME), 20);
}

/* ---- allocation failures ----------------------------------------------------------------- */

/* Every allocation failing in turn: -ENOMEM or (jansson's parse is retried once) success,
 * and nothing left live. */
static int failn_round(const cq_mq_frame_t *f, bool answer)
{
    cq_mqmgr_msg_t *m = NULL;
    cq_buf_t *b = NULL;
    int rc = cq_mqmgr_decode(f, 0, &m, NULL, 0);
    if (rc == 0)
        rc = cq_mqmgr_encode_buf(m, &b);
    if (rc == 0)
        cq_buf_unref(b);
    cq_mqmgr_msg_free(m);
    if (rc == 0 && answer && (rc = cq_mqmgr_encode_error_buf(f, CQ_EFIELD, "x", 0, &b)) == 0)
        cq_buf_unref(b);
    return rc;
}

static void failn_loop(const char *body, uint8_t type)
{
    cq_mq_frame_t f = {(const uint8_t *)body, (uint32_t)strlen(body), 1, type};
    unsigned long n;
    for (n = 1;; n++) {
        test_alloc_install(n, false);
        int rc = failn_round(&f, type != 1);
        unsigned long failed = test_alloc_failed();
        test_alloc_remove();
        assert_int_equal(test_alloc_live(), 0);
        if (failed == 0) {
            assert_int_equal(rc, 0);
            break;
        }
        if (rc != -ENOMEM && rc != 0)
            fail_msg("allocation %lu failed but rc = %d", n, rc);
    }
    assert_true(n > 20);
}

static void test_fail_n(void **state)
{
    (void)state;
    failn_loop(sync_full, 1);
    failn_loop(sync_relay, 1);
    /* (not svrconfig_relay: jansson 2.14 asserts in lex_scan_string when one of the
     * allocations made while it lexes that body fails, before any code of ours runs) */
    failn_loop("{\"askid\":5,\"module_id\":7,\"err_code\":0,\"servers\":[],\"relay_nodes\":"
               "[{\"node\":1,\"cluster\":\"eu\",\"tcp\":\"h:1\",\"kcp\":\"h:2\"}]}",
               2);
    failn_loop("{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":4,\"modules\":{\"7\":{}},"
               "\"topics\":{\"a\":{\"online\":true}},\"bindings\":{\"bindings\":[]}}}",
               3);
}

int main(void)
{
    json_set_alloc_funcs(cq_malloc, cq_free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_svrconfig),
        cmocka_unit_test(test_sync),
        cmocka_unit_test(test_sync_built),
        cmocka_unit_test(test_commands),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_errors_responses_commands),
        cmocka_unit_test(test_error_answers2),
        cmocka_unit_test(test_encode_refusals),
        cmocka_unit_test(test_fail_n),
        cmocka_unit_test(test_relay_node),
        cmocka_unit_test(test_svrconfig_relay_nodes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
