/* test_it_relay.c - three chanqd nodes as one relay (issue 23, doc/relay-cluster.md): real
 * nats-server and ZooKeeper (run_zk.sh and run_nats.sh start them: CQ_ZK_HOSTS, CQ_NATS_URLS),
 * the game server on node 1 and the other connections spread over nodes 1-3. The channeld flow
 * of test_it_forward.c holds across nodes: the owner subscribes connections of other nodes, a
 * broadcast reaches exactly the recipients its flags name, SINGLE_CONNECTION reaches a client of
 * another node, a client's message reaches the owner wrapped with its id, and a client that
 * leaves is gone from the channel with the owner told. */
#include "cq_core.h"
#include "cq_link.h"
#include "cq_relay.h"
#include "cq_relay_nats.h"
#include "it_data.h"
#include "cq_wire.h"
#include "xwire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>

#define NODES IT_RELAY_NODES

static cq_testsrv_t *node(int n)
{
    return it_node(n);
}

/* The three nodes (it_relay.c), with what these tests need on each: clients that may SUB and
 * UNSUB themselves, and the chanqtest data types. */
static void relay_start_with(const char *extra)
{
    const char *args[] = {"--dev",
                          "--client-fsm",
                          it_client_auth_fsm(),
                          "--channel-data-types",
                          getenv("CHANQTEST_FDS"),
                          extra,
                          NULL};
    it_relay_startv(args);
}

static void relay_start(void)
{
    relay_start_with(NULL);
}

/* What the links saw, for the log of a failure: every count is 0 in a run without loss. */
static void relay_report(void)
{
    static const char *const names[] = {
        "chanq_relay_link_gaps_total", "chanq_relay_link_resets_total",
        "chanq_relay_messages_dropped_total", "chanq_relay_unknown_records_total",
        "chanq_relay_bad_packets_total"};
    for (int n = 1; n <= NODES; n++)
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && node(n)->pid; i++) {
            int64_t v = cq_testsrv_metric(node(n), names[i]);
            if (v)
                printf("# node %d: %s %lld\n", n, names[i], (long long)v);
        }
}

static int relay_teardown(void **state)
{
    relay_report();
    return it_teardown(state);
}

static it_conn_t *on_node(int n, bool server)
{
    it_conn_t *c = it_connect_to(node(n), server, NULL);
    it_auth(c, server ? "server" : "pit", server ? "" : "lt");
    return c;
}

/* The world of test_it_forward.c, spread: the owner s and client c1 on node 1, the other
 * server o on node 2, client c2 on node 3. */
typedef struct world {
    it_conn_t *s, *o, *c1, *c2;
    uint32_t ch;
} world_t;

static void world_init(world_t *w)
{
    relay_start();
    w->s = on_node(1, true);
    w->o = on_node(2, true);
    w->c1 = on_node(1, false);
    w->c2 = on_node(3, false);
    /* ids carry their node in the top 4 of 31 bits (--relay-node-bits 4) */
    assert_int_equal(w->s->id >> 27, 1);
    assert_int_equal(w->o->id >> 27, 2);
    assert_int_equal(w->c2->id >> 27, 3);
    w->ch = it_create(w->s, CT_SUBWORLD, "fwd", 1);
    assert_int_equal(w->ch >> 12, 1); /* a channel of node 1 */
    it_sub(w->o, 2, w->ch, w->o->id, -1);
    it_expect_sub(w->o, w->ch, 2, w->o->id, CONN_SERVER, CT_SUBWORLD, 1);
    it_expect_sub(w->s, w->ch, 0, w->o->id, CONN_SERVER, CT_SUBWORLD, 1);
    it_conn_t *cs[2] = {w->c1, w->c2};
    for (int i = 0; i < 2; i++) {
        it_sub(w->s, 3, w->ch, cs[i]->id, -1);
        it_expect_sub(w->s, w->ch, 3, cs[i]->id, CONN_CLIENT, CT_SUBWORLD, 1);
        it_expect_sub(cs[i], w->ch, 0, cs[i]->id, CONN_CLIENT, CT_SUBWORLD, 1);
    }
}

/* it_check_marked over the world's four, the marker from `from`. */
static void check_from(world_t *w, it_conn_t *from, unsigned mask, uint32_t type, uint32_t bc,
                       uint32_t stub, uint32_t client, const char *payload)
{
    it_conn_t *all[4] = {w->s, w->o, w->c1, w->c2};
    it_check_marked(all, from, w->ch, mask, type, bc, stub, client, payload);
}

static void check_recipients(world_t *w, unsigned mask, uint32_t type, uint32_t bc, uint32_t stub,
                             uint32_t client, const char *payload)
{
    check_from(w, w->o, mask, type, bc, stub, client, payload);
}

enum { R_S = IT_R_S, R_O = IT_R_O, R_C1 = IT_R_C1, R_C2 = IT_R_C2, R_ALL = IT_R_ALL };

/* Every broadcast flag from a server of node 2 on a channel of node 1, with subscribers on all
 * three nodes: exactly the recipients of one node. */
static void test_broadcast_flags(void **state)
{
    (void)state;
    world_t w;
    world_init(&w);
    check_recipients(&w, 0, 0, 0, 0, 0, "");
    it_conn_t *all[4] = {w.s, w.o, w.c1, w.c2};
    it_check_bc_cases(all, w.ch);
    /* the owner's broadcasts too (node 1 to nodes 2 and 3) */
    it_sfwd_stub(w.s, w.ch, BC_ALL | BC_BUT_SENDER, 121, 0, w.c2->id, "from-owner");
    check_from(&w, w.s, R_O | R_C1 | R_C2, 121, BC_ALL | BC_BUT_SENDER, 0, w.c2->id, "from-owner");
}

/* SINGLE_CONNECTION from the owner to a client of node 3, and a client of node 3 to the owner. */
static void test_single_and_client_to_owner(void **state)
{
    (void)state;
    world_t w;
    world_init(&w);
    it_sfwd_stub(w.s, w.ch, BC_SINGLE, 130, 4, w.c2->id, "only-c2");
    check_from(&w, w.s, R_C2, 130, BC_SINGLE, 4, w.c2->id, "only-c2");
    it_sfwd_stub(w.o, w.ch, BC_SINGLE, 131, 5, w.c1->id, "only-c1");
    check_recipients(&w, R_C1, 131, BC_SINGLE, 5, w.c1->id, "only-c1");
    uint32_t bcs[] = {0, BC_ALL, BC_ALL | BC_BUT_SERVER};
    for (size_t i = 0; i < sizeof(bcs) / sizeof(bcs[0]); i++) {
        char payload[32];
        snprintf(payload, sizeof(payload), "from-c2-%zu", i);
        assert_int_equal(
            chanq_sync_send_raw(w.c2->s, w.ch, bcs[i], 9, 140, payload, strlen(payload)), 0);
        it_expect_user(w.s, w.ch, 140, bcs[i], 9, w.c2->id, payload);
        check_recipients(&w, 0, 0, 0, 0, 0, "");
    }
}

/* c leaves: it closes its socket; over KCP, which has no close a server could see, the owner
 * disconnects it (DISCONNECT crosses to c's node as a CLOSE). */
static void leave(world_t *w, it_conn_t *c)
{
    if (strncmp(it_transport, "kcp", 3) == 0)
        assert_int_equal(chanq_sync_disconnect(w->s->s, c->id), 0);
    else
        it_close(c);
}

/* A client of node 3 unsubscribes itself, then another closes: the owner gets the UNSUB
 * results, and broadcasts reach neither any more. */
static void test_unsub_and_close(void **state)
{
    (void)state;
    world_t w;
    world_init(&w);
    uint32_t c2 = w.c2->id, c1 = w.c1->id;
    assert_int_equal(chanq_sync_unsub_from_channel(w.c2->s, 5, w.ch, c2), 0);
    it_expect_unsub(w.c2, w.ch, 5, c2, CONN_CLIENT, CT_SUBWORLD);
    it_expect_unsub(w.s, w.ch, 0, c2, CONN_CLIENT, CT_SUBWORLD);
    it_sfwd_stub(w.o, w.ch, BC_ALL, 150, 0, 0, "after-unsub");
    it_expect_user(w.s, w.ch, 150, BC_ALL, 0, 0, "after-unsub");
    it_expect_user(w.o, w.ch, 150, BC_ALL, 0, 0, "after-unsub");
    it_expect_user(w.c1, w.ch, 150, BC_ALL, 0, 0, "after-unsub");
    /* c2 subscribes again by itself, then leaves by closing */
    it_sub(w.c2, 6, w.ch, c2, -1);
    it_expect_sub(w.c2, w.ch, 6, c2, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(w.s, w.ch, 0, c2, CONN_CLIENT, CT_SUBWORLD, 1);
    leave(&w, w.c2);
    it_expect_unsub(w.s, w.ch, 0, c2, CONN_CLIENT, CT_SUBWORLD);
    leave(&w, w.c1); /* a local client, for comparison */
    it_expect_unsub(w.s, w.ch, 0, c1, CONN_CLIENT, CT_SUBWORLD);
    it_sfwd_stub(w.o, w.ch, BC_ALL, 151, 0, 0, "after-close");
    it_expect_user(w.s, w.ch, 151, BC_ALL, 0, 0, "after-close");
    it_expect_user(w.o, w.ch, 151, BC_ALL, 0, 0, "after-close");
    /* node 3 told node 1 of the close: its directory no longer holds c2 (a SUB of it fails
     * silently, as for any gone connection: no result) */
    it_sub(w.s, 7, w.ch, c2, -1);
    it_sfwd_stub(w.s, w.ch, BC_SINGLE, 152, 0, 0, "sync");
    it_expect_user(w.s, w.ch, 152, BC_SINGLE, 0, 0, "sync");
}

/* Channel data of a channel of node 1, to subscribers on nodes 1, 2 and 3: each gets the full
 * state first, then the merged updates; a field mask holds on another node as on this one. */
static void test_channel_data(void **state)
{
    (void)state;
    relay_start();
    it_conn_t *s = on_node(1, true);
    it_conn_t *local = on_node(1, false), *full = on_node(2, false), *masked = on_node(3, false);
    Chanqtest__EntityWorld w0 = CHANQTEST__ENTITY_WORLD__INIT;
    w0.name = "world";
    Channeldpb__ChannelDataMergeOptions mo = CHANNELDPB__CHANNEL_DATA_MERGE_OPTIONS__INIT;
    mo.shouldcheckremovablemapfield = 1;
    uint32_t ch = itd_create_with(s, URL_WORLD, &w0.base, &mo);
    Channeldpb__ChannelSubscriptionOptions o = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    itd_sub_opts(s, local, ch, &o, 1);
    itd_sub_opts(s, full, ch, &o, 1);
    char *mask[] = {"name"};
    Channeldpb__ChannelSubscriptionOptions om = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    om.n_datafieldmasks = 1;
    om.datafieldmasks = mask;
    itd_sub_opts(s, masked, ch, &om, 1);
    it_conn_t *all[3] = {local, full, masked};
    for (int i = 0; i < 3; i++) { /* the full state first */
        Chanqtest__EntityWorld *w =
            itd_next_data(all[i], ch, URL_WORLD, &chanqtest__entity_world__descriptor);
        assert_string_equal(w->name, "world");
        assert_int_equal(w->n_entities, 0);
        chanqtest__entity_world__free_unpacked(w, NULL);
    }
    Chanqtest__Entity e1, e2, gone;
    itd_world_update(s, ch, 1, itd_entity(&e1, "a", false), NULL);
    itd_world_update(s, ch, 2, itd_entity(&e2, "b", false), NULL);
    itd_world_update(s, ch, 1, itd_entity(&gone, "", true), NULL);
    itd_world_update(s, ch, 0, NULL, "world2");
    /* every subscriber's copy converges to the owner's state: entity 2 "b" (1 came and went),
     * name "world2"; the masked one sees the name only */
    for (int i = 0; i < 3; i++) {
        int got_b = 0, got_a = 0;
        for (;;) {
            Chanqtest__EntityWorld *w =
                itd_next_data(all[i], ch, URL_WORLD, &chanqtest__entity_world__descriptor);
            if (all[i] == masked)
                assert_int_equal(w->n_entities, 0);
            for (size_t k = 0; k < w->n_entities; k++) {
                got_b |= w->entities[k]->key == 2 && !strcmp(w->entities[k]->value->label, "b");
                got_a |= w->entities[k]->key == 1 && !strcmp(w->entities[k]->value->label, "a");
            }
            bool done = strcmp(w->name, "world2") == 0;
            chanqtest__entity_world__free_unpacked(w, NULL);
            if (done)
                break;
        }
        assert_int_equal(got_b, all[i] != masked);
        (void)got_a; /* merged away or not, by the window it fell in */
    }
    /* a late subscriber on node 3 gets the master state: entity 1 is gone */
    it_conn_t *late = on_node(3, false);
    itd_sub_opts(s, late, ch, &o, 1);
    Chanqtest__EntityWorld *w =
        itd_next_data(late, ch, URL_WORLD, &chanqtest__entity_world__descriptor);
    assert_string_equal(w->name, "world2");
    assert_int_equal(w->n_entities, 1);
    assert_int_equal(w->entities[0]->key, 2);
    assert_string_equal(w->entities[0]->value->label, "b");
    chanqtest__entity_world__free_unpacked(w, NULL);
}

static void ignore_packet(void *ud, const uint8_t *p, size_t n)
{
    (void)ud, (void)p, (void)n;
}

/* A NATS connection of the test's own, connected, and node's subject in subj: to publish on it
 * what no node sent. */
static cq_relay_nats_t *publisher(int node, char *subj, size_t len)
{
    cq_relay_nats_t *n = NULL;
    char err[256] = "";
    cq_relay_nats_conf_t nc = {.urls = getenv("CQ_NATS_URLS"), .on_packet = ignore_packet};
    assert_int_equal(cq_relay_nats_open(&nc, &n, err, sizeof(err)), 0);
    cq_relay_nats_stats_t ns;
    for (int i = 0; i < 3000 && (cq_relay_nats_stats(n, &ns), !ns.connected); i++)
        cq_test_sleep_ms(1);
    assert_true(ns.connected);
    assert_int_equal(cq_relay_subject(it_relay_name(), (uint16_t)node, subj, len), 0);
    return n;
}

/* A packet from node `src` to node `dst` under epoch, with one record (kind, body), sequence
 * number seq (the earlier ones are packed and thrown away). */
static cq_buf_t *forge_n(uint16_t src, uint16_t dst, uint32_t epoch, uint64_t seq, uint8_t kind,
                         const char *body, size_t len)
{
    cq_link_tx_t *tx = cq_link_tx_new(src, dst, epoch, 1 << 20);
    cq_link_rec_t rec = {kind, (uint32_t)len, (const uint8_t *)body};
    cq_buf_t *p = NULL;
    for (uint64_t i = 1; i <= seq; i++) {
        cq_buf_unref(p);
        assert_int_equal(cq_link_tx_pack(tx, &rec, 1, &p), 0);
    }
    cq_link_tx_free(tx);
    return p;
}

static cq_buf_t *forge(uint16_t src, uint16_t dst, uint32_t epoch, uint64_t seq, uint8_t kind,
                       const char *body)
{
    return forge_n(src, dst, epoch, seq, kind, body, strlen(body));
}

/* An XMSGS record body (u32 length + xwire bytes, NUL-free here) holding a SEND of a
 * user-space message "forged" to conn on ch; returns its length. */
static size_t forged_send(uint32_t conn, uint32_t ch, char *out, size_t cap)
{
    static const char body[] = "forged";
    cq_mp_t mp = {ch, 0, 0, 150, (const uint8_t *)body, sizeof(body) - 1};
    cq_xmsg_t *m = cq__xmsg_new(XM_SEND, 0);
    m->conn_id = conn;
    m->buf = cq_wire_record_raw(&mp);
    cq_sbuf_t o;
    cq_sbuf_init(&o);
    uint32_t len = 0;
    assert_int_equal(cq_sbuf_append(&o, &len, sizeof(len)), 0);
    assert_int_equal(cq__xwire_encode(m, &o), 0);
    len = (uint32_t)(o.len - sizeof(len));
    memcpy(o.data, &len, sizeof(len));
    assert_true(o.len < cap);
    memcpy(out, o.data, o.len);
    out[o.len] = 0;
    size_t n = o.len;
    cq_sbuf_done(&o);
    cq__xmsg_free(m);
    return n;
}

/* Hostile packets on node 1's subject, published straight to NATS: garbage, a truncated packet,
 * a packet for another node, a node that is not one of the relay's (its messages, and a record
 * of a kind nobody knows), a sequence far ahead. Each is counted and dropped; nothing reaches a
 * connection, and the relay carries on. */
static void test_forged_packets(void **state)
{
    (void)state;
    world_t w;
    world_init(&w);
    char subj[CQ_RELAY_SUBJECT_MAX];
    cq_relay_nats_t *n = publisher(1, subj, sizeof(subj));
    cq_testsrv_t *n1 = it_srv();
    int64_t bad = cq_testsrv_metric(n1, "chanq_relay_bad_packets_total");
    int64_t refused = cq_testsrv_metric(n1, "chanq_relay_messages_refused_total");
    int64_t unknown = cq_testsrv_metric(n1, "chanq_relay_unknown_records_total");
    int64_t gaps = cq_testsrv_metric(n1, "chanq_relay_link_gaps_total");
    static const char junk[] = "CQL1 this is not a packet";
    assert_int_equal(cq_relay_nats_ops.publish(n, subj, (const uint8_t *)junk, sizeof(junk)), 0);
    cq_buf_t *p = forge(2, 1, 7, 1, CQ_CORE_REC_XMSGS, "truncated");
    assert_int_equal(cq_relay_nats_ops.publish(n, subj, p->data, p->len - 3), 0);
    cq_buf_unref(p);
    p = forge(2, 3, 7, 1, CQ_CORE_REC_XMSGS, "for node 3"); /* on node 1's subject */
    assert_int_equal(cq_relay_nats_ops.publish(n, subj, p->data, p->len), 0);
    cq_buf_unref(p);
    assert_int_equal(
        cq_testsrv_metric_wait_ge(n1, "chanq_relay_bad_packets_total", bad + 3, IT_TIMEOUT_MS),
        bad + 3);
    /* node 9 is no node of the relay: its messages are refused, even a well-formed SEND to c1 */
    char sendrec[256];
    size_t sendlen = forged_send(w.c1->id, w.ch, sendrec, sizeof(sendrec));
    p = forge_n(9, 1, 7, 1, CQ_CORE_REC_XMSGS, sendrec, sendlen);
    assert_int_equal(cq_relay_nats_ops.publish(n, subj, p->data, p->len), 0);
    cq_buf_unref(p);
    assert_int_equal(cq_testsrv_metric_wait_ge(n1, "chanq_relay_messages_refused_total",
                                               refused + 1, IT_TIMEOUT_MS),
                     refused + 1);
    p = forge(9, 1, 7, 2, 77, "a kind nobody knows");
    assert_int_equal(cq_relay_nats_ops.publish(n, subj, p->data, p->len), 0);
    cq_buf_unref(p);
    assert_int_equal(cq_testsrv_metric_wait_ge(n1, "chanq_relay_unknown_records_total", unknown + 1,
                                               IT_TIMEOUT_MS),
                     unknown + 1);
    /* a sequence far ahead (from node 11): a gap, asked for, never answered */
    p = forge(11, 1, 7, 40, 77, "far ahead");
    assert_int_equal(cq_relay_nats_ops.publish(n, subj, p->data, p->len), 0);
    cq_buf_unref(p);
    assert_int_equal(
        cq_testsrv_metric_wait_ge(n1, "chanq_relay_link_gaps_total", gaps + 1, IT_TIMEOUT_MS),
        gaps + 1);
    cq_relay_nats_close(n);
    /* nothing forged reached a connection: the next message everyone gets is this broadcast */
    check_recipients(&w, 0, 0, 0, 0, 0, "");
    assert_int_equal(cq_testsrv_metric(n1, "chanq_relay_unknown_records_total"), unknown + 1);
}

/* Node n's epoch, from its /metrics (chanq_relay_node{...,epoch="E"}). */
static uint32_t node_epoch(int n)
{
    static char body[1 << 20]; /* the whole /metrics text */
    static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    assert_int_equal(
        cq_raw_http(node(n)->admin_port, req, sizeof(req) - 1, IT_TIMEOUT_MS, body, sizeof(body)),
        200);
    const char *p = strstr(body, "chanq_relay_node{");
    assert_non_null(p);
    p = strstr(p, "epoch=\"");
    assert_non_null(p);
    return (uint32_t)strtoul(p + 7, NULL, 10);
}

/* The stream from node 2 to node 1 breaks: a packet far ahead of node 2's stream, as if all
 * between had been lost (forged here with node 2's epoch), is asked for and never comes, and the
 * stream resets. Node 1 cannot know what was lost, so its connections subscribed to a channel of
 * node 2 are closed (they reconnect and subscribe again), and node 2's owner gets the UNSUB;
 * node 2's connections stay, and its stream starts again with its next packet. */
static void test_link_reset(void **state)
{
    (void)state;
    world_t w;
    world_init(&w);
    uint32_t ch2 = it_create(w.o, CT_SUBWORLD, "on-node-2", 8); /* lives on node 2 */
    assert_int_equal(ch2 >> 12, 2);
    it_sub(w.o, 9, ch2, w.c1->id, -1);
    it_expect_sub(w.o, ch2, 9, w.c1->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(w.c1, ch2, 0, w.c1->id, CONN_CLIENT, CT_SUBWORLD, 1);
    int64_t resets = cq_testsrv_metric(it_srv(), "chanq_relay_link_resets_total");
    char subj[CQ_RELAY_SUBJECT_MAX];
    cq_relay_nats_t *n = publisher(1, subj, sizeof(subj));
    cq_buf_t *p = forge(2, 1, node_epoch(2), 100000, 77, "far ahead");
    assert_int_equal(cq_relay_nats_ops.publish(n, subj, p->data, p->len), 0);
    cq_buf_unref(p);
    cq_relay_nats_close(n);
    assert_int_equal(cq_testsrv_metric_wait_ge(it_srv(), "chanq_relay_link_resets_total",
                                               resets + 1, IT_TIMEOUT_MS),
                     resets + 1);
    /* c1 (node 1, subscribed to node 2's channel) is closed; node 2's owner hears of it */
    it_expect_unsub(w.o, ch2, 0, w.c1->id, CONN_CLIENT, CT_SUBWORLD);
    it_expect_unsub(w.s, w.ch, 0, w.c1->id, CONN_CLIENT, CT_SUBWORLD); /* c1 was in w.ch too */
    it_expect_closed(w.c1);
    /* the rest carries on: node 2's broadcast on node 1's channel reaches nodes 1, 2 and 3 */
    it_sfwd_stub(w.o, w.ch, BC_ALL, 170, 0, 0, "after-reset");
    it_expect_user(w.s, w.ch, 170, BC_ALL, 0, 0, "after-reset");
    it_expect_user(w.o, w.ch, 170, BC_ALL, 0, 0, "after-reset");
    it_expect_user(w.c2, w.ch, 170, BC_ALL, 0, 0, "after-reset");
}

/* GLOBAL lives on its home (node 1 here: it claimed first), the channel directory with it: a
 * game server of node 2 possesses GLOBAL; a client that authenticates on node 3 is reported to
 * it; a channel created by a server of node 3 lives on node 3 and is in the LIST a client of
 * node 1 gets; the GLOBAL owner removes it; a client's message on GLOBAL reaches the owner. */
static void test_global_across_nodes(void **state)
{
    (void)state;
    relay_start();
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_relay_peers_up"), 2);
    it_conn_t *g = on_node(2, true);
    assert_int_equal(chanq_sync_create_channel(g->s, 1, CT_GLOBAL, "", NULL), 0);
    Channeldpb__CreateChannelResultMessage *cr =
        it_expect(g, MT_CREATE, 1, &channeldpb__create_channel_result_message__descriptor, NULL);
    assert_int_equal(cr->channelid, 0);
    assert_int_equal(cr->ownerconnid, g->id);
    chanq_unpack_free(cr);
    it_expect_sub(g, 0, 0, g->id, CONN_SERVER, CT_GLOBAL, 1);
    /* a client of node 3: its AuthResult reaches the GLOBAL owner on node 2 */
    it_conn_t *c3 = on_node(3, false);
    chanq_owned_msg_t env;
    Channeldpb__AuthResultMessage *ar =
        it_expect(g, MT_AUTH, 0, &channeldpb__auth_result_message__descriptor, &env);
    assert_int_equal(env.channel_id, 0);
    chanq_owned_msg_done(&env);
    assert_int_equal(ar->connid, c3->id);
    assert_int_equal(ar->result, 0);
    chanq_unpack_free(ar);
    /* a server of node 3 creates a channel: it lives on node 3; the owner gets the copy */
    it_conn_t *s3 = on_node(3, true);
    ar = it_expect(g, MT_AUTH, 0, &channeldpb__auth_result_message__descriptor, NULL);
    assert_int_equal(ar->connid, s3->id);
    chanq_unpack_free(ar);
    uint32_t ch = it_create(s3, CT_SUBWORLD, "on-node-3", 4);
    assert_int_equal(ch >> 12, 3);
    cr = it_expect(g, MT_CREATE, 0, &channeldpb__create_channel_result_message__descriptor, NULL);
    assert_int_equal(cr->channelid, ch);
    assert_int_equal(cr->ownerconnid, s3->id);
    chanq_unpack_free(cr);
    /* a client of node 1 lists it */
    it_conn_t *c1 = on_node(1, false);
    ar = it_expect(g, MT_AUTH, 0, &channeldpb__auth_result_message__descriptor, NULL);
    assert_int_equal(ar->connid, c1->id);
    chanq_unpack_free(ar);
    assert_int_equal(chanq_sync_list_channel(c1->s, 5, 0, NULL, 0), 0);
    Channeldpb__ListChannelResultMessage *lr =
        it_expect(c1, MT_LIST, 5, &channeldpb__list_channel_result_message__descriptor, NULL);
    bool found = false;
    for (size_t i = 0; i < lr->n_channels; i++)
        found |= lr->channels[i]->channelid == ch &&
                 !strcmp(lr->channels[i]->metadata, "on-node-3") &&
                 (uint32_t)lr->channels[i]->channeltype == CT_SUBWORLD;
    assert_true(found);
    chanq_unpack_free(lr);
    /* a client's message on GLOBAL reaches its owner, wherever both are */
    assert_int_equal(chanq_sync_user_msg(c3->s, 0, 0, 150, "hi-global", 9), 0);
    it_expect_user(g, 0, 150, 0, 0, c3->id, "hi-global");
    /* the GLOBAL owner may remove a channel of another node; its owner hears of it */
    assert_int_equal(chanq_sync_remove_channel(g->s, 6, ch), 0);
    it_expect_remove(s3, ch);
    /* the directory hears of it one hop later (doc/relay-cluster.md: LIST after a removal on
     * another node): LIST until it is gone */
    for (uint32_t stub = 7;; stub++) {
        assert_int_equal(chanq_sync_list_channel(c1->s, stub, 0, NULL, 0), 0);
        lr = it_expect(c1, MT_LIST, stub, &channeldpb__list_channel_result_message__descriptor,
                       NULL);
        found = false;
        for (size_t i = 0; i < lr->n_channels; i++)
            found |= lr->channels[i]->channelid == ch;
        chanq_unpack_free(lr);
        if (!found)
            break;
        assert_true(stub < 7 + 1000);
        cq_test_sleep_ms(1);
    }
}

/* After node 1 (GLOBAL's home) was killed: the new home, the same on nodes 2 and 3. */
static int64_t new_home(void)
{
    int64_t h2 = 0, h3 = 0;
    for (int i = 0; i < 10000; i++) {
        h2 = cq_testsrv_metric(node(2), "chanq_relay_global_home");
        h3 = cq_testsrv_metric(node(3), "chanq_relay_global_home");
        if (h2 == h3 && (h2 == 2 || h2 == 3))
            break;
        cq_test_sleep_ms(2);
    }
    assert_int_equal(h2, h3);
    assert_true(h2 == 2 || h2 == 3);
    return h2;
}

/* SIGKILL node 1, GLOBAL's home: a client of node 2 subscribed to GLOBAL is closed (GLOBAL's
 * state died with its home); node 2 or 3 claims the home; GLOBAL starts there ownerless, so a
 * server of node 3 possesses it; the new home's directory holds the channels of the nodes that
 * remain (a LIST from node 2 shows node 3's channel). */
static void test_home_killed(void **state)
{
    (void)state;
    relay_start();
    for (int n = 1; n <= NODES; n++)
        assert_int_equal(cq_testsrv_metric(node(n), "chanq_relay_global_home"), 1);
    it_conn_t *s3 = on_node(3, true), *g = on_node(2, true), *c2 = on_node(2, false);
    uint32_t ch3 = it_create(s3, CT_SUBWORLD, "kept", 2);
    assert_int_equal(chanq_sync_create_channel(g->s, 1, CT_GLOBAL, "", NULL), 0);
    Channeldpb__CreateChannelResultMessage *cr =
        it_expect(g, MT_CREATE, 1, &channeldpb__create_channel_result_message__descriptor, NULL);
    assert_int_equal(cr->ownerconnid, g->id);
    chanq_unpack_free(cr);
    it_expect_sub(g, 0, 0, g->id, CONN_SERVER, CT_GLOBAL, 1);
    it_sub(c2, 3, 0, c2->id, -1);
    it_expect_sub(c2, 0, 3, c2->id, CONN_CLIENT, CT_GLOBAL, 1);
    assert_int_equal(cq_testsrv_kill(it_srv(), SIGKILL), 128 + SIGKILL);
    /* GLOBAL's subscriber on node 2 is closed when node 2 sees node 1 leave (KCP has no close
     * a client could see) */
    if (strncmp(it_transport, "kcp", 3) != 0) {
        chanq_owned_msg_t m;
        int r = chanq_sync_recv(c2->s, &m, 20000);
        assert_true(r < 0 && r != CQ_ETIMEOUT);
    }
    /* the new home: the same on nodes 2 and 3, not node 1 */
    int64_t h2 = new_home();
    printf("# GLOBAL's home moved to node %lld\n", (long long)h2);
    /* GLOBAL is ownerless there: a server of node 3 possesses it */
    assert_int_equal(chanq_sync_create_channel(s3->s, 4, CT_GLOBAL, "", NULL), 0);
    cr = it_expect(s3, MT_CREATE, 4, &channeldpb__create_channel_result_message__descriptor, NULL);
    assert_int_equal(cr->channelid, 0);
    assert_int_equal(cr->ownerconnid, s3->id);
    chanq_unpack_free(cr);
    it_expect_sub(s3, 0, 0, s3->id, CONN_SERVER, CT_GLOBAL, 1);
    /* the new home's directory has node 3's channel again */
    it_conn_t *c2b = on_node(2, false);
    bool found = false;
    for (uint32_t stub = 5; !found; stub++) {
        assert_int_equal(chanq_sync_list_channel(c2b->s, stub, 0, NULL, 0), 0);
        Channeldpb__ListChannelResultMessage *lr = it_expect(
            c2b, MT_LIST, stub, &channeldpb__list_channel_result_message__descriptor, NULL);
        for (size_t i = 0; i < lr->n_channels; i++)
            found |=
                lr->channels[i]->channelid == ch3 && !strcmp(lr->channels[i]->metadata, "kept");
        chanq_unpack_free(lr);
        assert_true(stub < 5 + 1000);
        if (!found)
            cq_test_sleep_ms(1);
    }
}

enum { MT_RECOVERY_DATA = 20, MT_RECOVERY_END = 21, MT_OWNER_LOST = 22, MT_OWNER_RECOVERED = 23 };

/* -scr on a node that is not GLOBAL's home: a game server of node 2 drops, the subscriber of
 * its channel on node 3 hears CHANNEL_OWNER_LOST, a successor with the same PIT on node 2 takes
 * over the old id and the channel, and the subscriber hears CHANNEL_OWNER_RECOVERED. */
static void test_server_recovers_on_its_node(void **state)
{
    (void)state;
    relay_start_with("--server-conn-recoverable");
    Channeldpb__AuthResultMessage *ar;
    it_conn_t *s1 = it_server_pit(node(2), "zone-9", 1, &ar);
    assert_false(ar->shouldrecover);
    chanq_unpack_free(ar);
    uint32_t old_id = s1->id;
    it_conn_t *c = it_connect_to(node(3), false, NULL);
    it_auth(c, "pit", "lt");
    uint32_t ch = it_create(s1, CT_SUBWORLD, "zone", 2);
    assert_int_equal(ch >> 12, 2);
    it_sub(s1, 3, ch, c->id, -1);
    it_expect_sub(s1, ch, 3, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(c, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_close(s1);
    it_expect_empty(c, MT_OWNER_LOST, ch);
    it_conn_t *s2 = it_server_pit(node(2), "zone-9", 9, &ar);
    assert_true(ar->shouldrecover);
    chanq_unpack_free(ar);
    assert_int_equal(s2->id, old_id);
    chanq_owned_msg_t m;
    for (;;) { /* RECOVERY_CHANNEL_DATA for what it held, then RECOVERY_END */
        it_recv(s2, &m);
        bool end = m.msg_type == MT_RECOVERY_END;
        chanq_owned_msg_done(&m);
        if (end)
            break;
    }
    it_expect_empty(c, MT_OWNER_RECOVERED, ch);
    assert_int_equal(chanq_sync_user_msg(c->s, ch, 0, 100, "back?", 5), 0);
    it_expect_user(s2, ch, 100, 0, 0, c->id, "back?");
}

/* A server with pit on node n whose AuthResult may wait for its predecessor's loss to be seen
 * (the node's ZooKeeper session, 2 s here, plus 1 s at most): a longer wait than it_expect's. */
static it_conn_t *successor(int n, const char *pit, uint32_t stub, bool *recovered)
{
    it_conn_t *s = it_connect_to(node(n), true, NULL);
    Channeldpb__AuthMessage a = CHANNELDPB__AUTH_MESSAGE__INIT;
    a.playeridentifiertoken = (char *)pit;
    a.logintoken = "lt";
    assert_int_equal(chanq_sync_send(s->s, 0, 0, stub, MT_AUTH, &a.base), 0);
    chanq_owned_msg_t env;
    assert_int_equal(chanq_sync_recv(s->s, &env, 10 * IT_TIMEOUT_MS), 0);
    assert_int_equal(env.msg_type, MT_AUTH);
    assert_int_equal(env.stub_id, stub);
    Channeldpb__AuthResultMessage *ar =
        channeldpb__auth_result_message__unpack(NULL, env.body_len, env.body);
    assert_non_null(ar);
    assert_int_equal(ar->result, 0);
    s->id = ar->connid;
    *recovered = ar->shouldrecover;
    channeldpb__auth_result_message__free_unpacked(ar, NULL);
    chanq_owned_msg_done(&env);
    return s;
}

/* Reads the successor's RECOVERY_CHANNEL_DATA up to RECOVERY_END: the channels, as a bit per
 * entry of chans[0..n), each with the owner it names checked against owners[]. */
static unsigned expect_recovery(it_conn_t *s, const uint32_t *chans, const uint32_t *owners, int n)
{
    unsigned seen = 0;
    for (;;) {
        chanq_owned_msg_t env;
        it_recv(s, &env);
        if (env.msg_type == MT_RECOVERY_END) {
            assert_int_equal(env.channel_id, 0);
            chanq_owned_msg_done(&env);
            return seen;
        }
        assert_int_equal(env.msg_type, MT_RECOVERY_DATA);
        Channeldpb__ChannelDataRecoveryMessage *rd =
            channeldpb__channel_data_recovery_message__unpack(NULL, env.body_len, env.body);
        assert_non_null(rd);
        int i = 0;
        while (i < n && chans[i] != rd->channelid)
            i++;
        assert_true(i < n);
        assert_int_equal(env.channel_id, chans[i]);
        assert_int_equal(rd->ownerconnid, owners[i]);
        assert_false(seen & (1u << i)); /* once each */
        seen |= 1u << i;
        channeldpb__channel_data_recovery_message__free_unpacked(rd, NULL);
        chanq_owned_msg_done(&env);
    }
}

/* -scr across nodes: a game server of node 2 drops, and its successor (same PIT) connects to
 * node 3 at once, before node 3 may have heard of the drop (its AUTH waits for it). It keeps
 * its own id (ids carry their node) and gets back, under it, its channel of node 2 and its
 * subscription to a channel of node 1 (whose RECOVER may arrive before the CONN_GONE: it
 * waits); the subscriber on node 3 hears CHANNEL_OWNER_LOST and _RECOVERED, and client
 * messages reach the owner on its new node. */
static void test_server_recovers_on_another_node(void **state)
{
    (void)state;
    relay_start_with("--server-conn-recoverable");
    Channeldpb__AuthResultMessage *ar;
    it_conn_t *s1 = it_server_pit(node(2), "zone-5", 1, &ar);
    chanq_unpack_free(ar);
    uint32_t old_id = s1->id;
    it_conn_t *o = on_node(1, true), *c = on_node(3, false);
    uint32_t ch = it_create(s1, CT_SUBWORLD, "zone", 2);
    uint32_t ch1 = it_create(o, CT_SUBWORLD, "other", 3);
    it_sub(s1, 3, ch, c->id, -1);
    it_expect_sub(s1, ch, 3, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_expect_sub(c, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD, 1);
    it_sub(o, 4, ch1, s1->id, -1);
    it_expect_sub(o, ch1, 4, s1->id, CONN_SERVER, CT_SUBWORLD, 1);
    it_expect_sub(s1, ch1, 0, s1->id, CONN_SERVER, CT_SUBWORLD, 1);
    it_close(s1);
    bool recovered = false;
    it_conn_t *s2 = successor(3, "zone-5", 9, &recovered);
    assert_true(recovered);
    assert_int_equal(s2->id >> 27, 3); /* its own id, of node 3 */
    assert_int_not_equal(s2->id, old_id);
    it_expect_empty(c, MT_OWNER_LOST, ch);
    uint32_t chans[2] = {ch, ch1}, owners[2] = {s2->id, o->id};
    assert_int_equal(expect_recovery(s2, chans, owners, 2), 0x3);
    it_expect_empty(c, MT_OWNER_RECOVERED, ch);
    /* the channel of node 2 is owned from node 3 now, both ways */
    assert_int_equal(chanq_sync_user_msg(c->s, ch, 0, 100, "back?", 5), 0);
    it_expect_user(s2, ch, 100, 0, 0, c->id, "back?");
    it_sfwd(s2, ch, (BC_ALL | BC_BUT_SENDER), 101, 0, "yes");
    it_expect_user(c, ch, 101, (BC_ALL | BC_BUT_SENDER), 0, 0, "yes");
    /* and its subscription to node 1's channel is back */
    it_sfwd(o, ch1, BC_ALL, 102, 0, "still here");
    it_expect_user(s2, ch1, 102, BC_ALL, 0, 0, "still here");
    /* no node keeps a handle: the PIT recovers nothing a second time */
    it_close(s2);
    it_conn_t *s3 = successor(1, "zone-5", 10, &recovered);
    assert_true(recovered);
    assert_int_equal(expect_recovery(s3, chans, (const uint32_t[]){s3->id, o->id}, 2), 0x3);
}

/* SIGKILL node 1, GLOBAL's home, under the game server that possessed GLOBAL there with -scr:
 * the other nodes keep what it held (its PIT came with its announcement), GLOBAL's new home
 * keeps its possession of GLOBAL, and its successor, which reconnects to node 2 at once (its
 * AUTH waits until node 2 sees node 1's loss), recovers GLOBAL there and its subscription to a
 * channel of node 3; a client of node 3 then reaches it through GLOBAL. */
static void test_home_killed_server_recovers(void **state)
{
    (void)state;
    relay_start_with("--server-conn-recoverable");
    Channeldpb__AuthResultMessage *ar;
    it_conn_t *g = it_server_pit(node(1), "game", 1, &ar);
    chanq_unpack_free(ar);
    uint32_t old_id = g->id;
    /* before g possesses GLOBAL: no copies of their AuthResult and CreateChannelResult */
    it_conn_t *o = on_node(3, true);
    uint32_t ch3 = it_create(o, CT_SUBWORLD, "three", 3);
    /* a LIST, answered by GLOBAL's home, comes back behind the copies on their way there */
    assert_int_equal(chanq_sync_list_channel(o->s, 7, 0, NULL, 0), 0);
    chanq_unpack_free(
        it_expect(o, MT_LIST, 7, &channeldpb__list_channel_result_message__descriptor, NULL));
    assert_int_equal(chanq_sync_create_channel(g->s, 2, CT_GLOBAL, "", NULL), 0);
    Channeldpb__CreateChannelResultMessage *cr =
        it_expect(g, MT_CREATE, 2, &channeldpb__create_channel_result_message__descriptor, NULL);
    assert_int_equal(cr->ownerconnid, g->id);
    chanq_unpack_free(cr);
    it_expect_sub(g, 0, 0, g->id, CONN_SERVER, CT_GLOBAL, 1);
    it_sub(o, 4, ch3, g->id, -1);
    it_expect_sub(o, ch3, 4, g->id, CONN_SERVER, CT_SUBWORLD, 1);
    it_expect_sub(g, ch3, 0, g->id, CONN_SERVER, CT_SUBWORLD, 1);
    /* The home tells the other nodes GLOBAL's owner one relay hop after the possession: a home
     * killed before that takes the possession with it (doc/relay-cluster.md). Not that case. */
    for (int n = 2; n <= NODES; n++)
        assert_int_equal(
            cq_testsrv_metric_wait_ge(node(n), "chanq_relay_global_owner", g->id, IT_TIMEOUT_MS),
            g->id);
    assert_int_equal(cq_testsrv_kill(it_srv(), SIGKILL), 128 + SIGKILL);
    int64_t t0 = cq_test_mono_ms();
    bool recovered = false;
    it_conn_t *g2 = successor(2, "game", 5, &recovered);
    int64_t t_auth = cq_test_mono_ms() - t0;
    assert_true(recovered);
    assert_int_equal(g2->id >> 27, 2);
    assert_int_not_equal(g2->id, old_id);
    int64_t h2 = new_home();
    printf(
        "# node 1 killed: the successor's AuthResult after %lld ms, GLOBAL's home is node %lld\n",
        (long long)t_auth, (long long)h2);
    uint32_t chans[2] = {0, ch3}, owners[2] = {g2->id, o->id};
    assert_int_equal(expect_recovery(g2, chans, owners, 2), 0x3);
    /* GLOBAL is the successor's at the new home: a client of node 3 that joins it reaches it,
     * and its broadcast reaches the client */
    it_conn_t *c = on_node(3, false);
    ar = it_expect(g2, MT_AUTH, 0, &channeldpb__auth_result_message__descriptor, NULL);
    assert_int_equal(ar->connid, c->id); /* GLOBAL's owner's copy */
    chanq_unpack_free(ar);
    it_sub(c, 6, 0, c->id, -1);
    it_expect_sub(c, 0, 6, c->id, CONN_CLIENT, CT_GLOBAL, 1);
    it_expect_sub(g2, 0, 0, c->id, CONN_CLIENT, CT_GLOBAL, 1);
    assert_int_equal(chanq_sync_user_msg(c->s, 0, 0, 100, "new home", 8), 0);
    it_expect_user(g2, 0, 100, 0, 0, c->id, "new home");
    it_sfwd(g2, 0, (BC_ALL | BC_BUT_OWNER), 101, 0, "welcome");
    /* GLOBAL's home tells its subscribers CHANNEL_OWNER_RECOVERED 1 s after it gave GLOBAL
     * back, by its own clock: c, which subscribed about then, may hear that first */
    chanq_owned_msg_t m;
    assert_int_equal(chanq_sync_recv(c->s, &m, IT_TIMEOUT_MS), 0);
    if (m.msg_type == MT_OWNER_RECOVERED) {
        assert_int_equal(m.channel_id, 0);
        assert_int_equal(m.body_len, 0);
        chanq_owned_msg_done(&m);
        assert_int_equal(chanq_sync_recv(c->s, &m, IT_TIMEOUT_MS), 0);
    }
    assert_int_equal(m.msg_type, 101);
    assert_int_equal(m.channel_id, 0);
    assert_int_equal(m.broadcast, BC_ALL | BC_BUT_OWNER);
    Channeldpb__ServerForwardMessage *f =
        channeldpb__server_forward_message__unpack(NULL, m.body_len, m.body);
    assert_non_null(f);
    assert_int_equal(f->clientconnid, 0);
    assert_int_equal(f->payload.len, 7);
    assert_memory_equal(f->payload.data, "welcome", 7);
    channeldpb__server_forward_message__free_unpacked(f, NULL);
    chanq_owned_msg_done(&m);
    /* its subscription to node 3's channel is back */
    it_sfwd(o, ch3, BC_ALL, 102, 0, "three");
    it_expect_user(g2, ch3, 102, BC_ALL, 0, 0, "three");
}

/* SIGKILL node 3 while its client c2 is subscribed to a channel of node 1: node 1 learns from
 * ZooKeeper that node 3 left (its session ends: --zk-session-ms 2000 here) and drops c2 as if
 * it had closed, so the owner gets the UNSUB result; nodes 1 and 2 carry on. */
static void test_node_killed(void **state)
{
    (void)state;
    world_t w;
    world_init(&w);
    uint32_t c2 = w.c2->id;
    int64_t t0 = cq_test_mono_ms();
    assert_int_equal(cq_testsrv_kill(it_node(3), SIGKILL), 128 + SIGKILL);
    chanq_owned_msg_t m;
    assert_int_equal(chanq_sync_recv(w.s->s, &m, 20000), 0);
    int64_t dt = cq_test_mono_ms() - t0;
    assert_int_equal(m.msg_type, MT_UNSUB);
    assert_int_equal(m.channel_id, w.ch);
    Channeldpb__UnsubscribedFromChannelResultMessage *u =
        channeldpb__unsubscribed_from_channel_result_message__unpack(NULL, m.body_len, m.body);
    assert_non_null(u);
    assert_int_equal(u->connid, c2);
    assert_int_equal(u->conntype, CONN_CLIENT);
    channeldpb__unsubscribed_from_channel_result_message__free_unpacked(u, NULL);
    chanq_owned_msg_done(&m);
    printf("# node 3 killed: its client gone from node 1's channel after %lld ms\n", (long long)dt);
    /* the survivors: a broadcast from node 2 reaches nodes 1 and 2 */
    it_sfwd_stub(w.o, w.ch, BC_ALL, 160, 0, 0, "survivors");
    it_expect_user(w.s, w.ch, 160, BC_ALL, 0, 0, "survivors");
    it_expect_user(w.o, w.ch, 160, BC_ALL, 0, 0, "survivors");
    it_expect_user(w.c1, w.ch, 160, BC_ALL, 0, 0, "survivors");
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_relay_members"), 2);
    assert_int_equal(cq_testsrv_metric(it_srv(), "chanq_relay_peers_up"), 1);
    it_close(w.c2); /* its node is gone: the test's side of the socket only */
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_broadcast_flags, relay_teardown),
        cmocka_unit_test_teardown(test_single_and_client_to_owner, relay_teardown),
        cmocka_unit_test_teardown(test_unsub_and_close, relay_teardown),
        cmocka_unit_test_teardown(test_channel_data, relay_teardown),
        cmocka_unit_test_teardown(test_forged_packets, relay_teardown),
        cmocka_unit_test_teardown(test_global_across_nodes, relay_teardown),
        cmocka_unit_test_teardown(test_link_reset, relay_teardown),
        cmocka_unit_test_teardown(test_node_killed, relay_teardown),
        cmocka_unit_test_teardown(test_home_killed, relay_teardown),
        cmocka_unit_test_teardown(test_server_recovers_on_its_node, relay_teardown),
        cmocka_unit_test_teardown(test_server_recovers_on_another_node, relay_teardown),
        cmocka_unit_test_teardown(test_home_killed_server_recovers, relay_teardown),
    };
    return it_relay_run("relay", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
