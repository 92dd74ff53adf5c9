/* it_common.h - cmocka helpers shared by the integration tests (tests/integration/).
 *
 * Each test function starts its own chanqd with it_start(); the per-test teardown
 * (it_teardown) frees every connection opened through these helpers and stops the server, so
 * nothing leaks from one test to the next even when an assertion fails. Every wait is bounded
 * by IT_TIMEOUT_MS; nothing asserts on elapsed time.
 *
 * The worker count comes from the command line (`--workers=N`, see it_main) so that meson runs
 * each executable with --workers 1 and --workers 3.
 */
#ifndef IT_COMMON_H
#define IT_COMMON_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "chanq_sync.h"
#include "cq_testsrv.h"

#define IT_TIMEOUT_MS 3000

/* Message types and flags used by the tests. */
enum {
    MT_AUTH = 1,
    MT_CREATE = 3,
    MT_REMOVE = 4,
    MT_LIST = 5,
    MT_SUB = 6,
    MT_UNSUB = 7,
    MT_DATA = 8,
    MT_DISCONNECT = 9,
    MT_CREATE_SPATIAL = 10,
};
enum {
    BC_SINGLE = 1,
    BC_ALL = 2,
    BC_BUT_SENDER = 4,
    BC_BUT_OWNER = 8,
    BC_BUT_CLIENT = 16,
    BC_BUT_SERVER = 32
};
enum { CT_GLOBAL = 1, CT_PRIVATE = 2, CT_SUBWORLD = 3, CT_TEST = 100 };
enum { CONN_SERVER = 1, CONN_CLIENT = 2 };

typedef struct it_conn {
    chanq_sync_t *s;
    uint32_t id;      /* connId from AuthResult, 0 before */
    bool server;      /* connected to the server listener */
    bool skip_copies; /* it_recv skips stub-0 AUTH/CREATE copies (GLOBAL owner noise) */
} it_conn_t;

extern int it_workers;
/* How client connections reach chanqd (`--transport=tcp|ws|kcp|kcp-lossy`, default tcp). The
 * others go through a real third-party client stack: the test's TCP connection enters a bridge
 * process (python3-websockets, $CHANQ_WS_BRIDGE; kcp-go, $CHANQ_KCP_PEER) that speaks WebSocket
 * or KCP to chanqd; kcp-lossy adds kcp-go's UDP proxy dropping 10% of datagrams each way.
 * Server connections always use TCP. */
extern const char *it_transport;

/* Parses --workers=N (default 1) and --transport=NAME, and runs the group with it_teardown
 * per test. */
int it_run(const char *name, const struct CMUnitTest *tests, size_t n, int argc, char **argv);
#define IT_MAIN(tests)                                                                             \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        return it_run(__FILE__, tests, sizeof(tests) / sizeof(tests[0]), argc, argv);              \
    }
#define IT_TEST(f) cmocka_unit_test_setup_teardown(f, NULL, it_teardown)

int it_teardown(void **state);

/* Starts chanqd with the given extra args (NULL-terminated) plus --workers N. Asserts. */
void it_start(const char *arg0, ...);
void it_startv(const char *const *args);
cq_testsrv_t *it_srv(void);

/* Writes a file in the server's temp dir (before or after it_start) and returns its path
 * (valid until teardown). */
const char *it_file(const char *name, const char *content);

/* The server's MQ HTTP API (durable topics): POSTs body (JSON) to path and returns the status,
 * the answer's body in out; creates topic (asserting 200); produces one message whose content
 * is content_json as written and returns the offset the store gave it. */
int it_mq_post(const char *path, const char *body, char *out, size_t cap);
void it_create_topic(const char *topic);
uint64_t it_produce(const char *topic, const char *content_json);
/* The same on another server the test started (a durable source of relay nodes). */
int it_mq_post_to(cq_testsrv_t *srv, const char *path, const char *body, char *out, size_t cap);
void it_create_topic_on(cq_testsrv_t *srv, const char *topic);
uint64_t it_produce_on(cq_testsrv_t *srv, const char *topic, const char *content_json);

/* The server log read as a cursor, so that each check sees only what was logged after the
 * previous one. it_start() puts the cursor at the start of the log. it_log_mark() moves it to
 * the log's current end (and returns that offset). it_log_expect() waits up to IT_TIMEOUT_MS
 * for needle after the cursor, asserts it is there, and moves the cursor just past it.
 * it_log_count() counts the occurrences of needle after the cursor without moving it. */
size_t it_log_mark(void);
void it_log_expect(const char *needle);
int it_log_count(const char *needle);

/* Connects without authenticating (asserts). */
it_conn_t *it_connect(bool server, const chanq_opts_t *opts);
/* Like it_connect, to another server the test started itself (relay nodes: test_it_relay.c);
 * the teardown frees the connection all the same. */
it_conn_t *it_connect_to(cq_testsrv_t *srv, bool server, const chanq_opts_t *opts);
/* Client connections to srv, another server the test started itself, go through a bridge of
 * it_transport too (nothing for tcp); the teardown stops it. */
void it_bridge(cq_testsrv_t *srv);
/* Starts chanqd with args (it_startv without relay mode: one node, it_srv()). */
void it_start_one(const char *const *args);

/* ---- three nodes as one relay (it_relay.c, issue 23) ---- */
#define IT_RELAY_NODES 3
/* Relay mode (`--relay` on the command line): it_startv starts IT_RELAY_NODES nodes and
 * it_connect spreads connections over them (servers on 1, 2, 3...; clients on 3, 1, 2...). */
extern bool it_relay;
/* Starts the nodes of a relay of their own (node 1 is it_srv()), each with args, and waits
 * until they all hear each other. Needs CQ_NATS_URLS and CQ_ZK_HOSTS (run_nats.sh, run_zk.sh). */
void it_relay_startv(const char *const *args);
/* Node n (1 .. IT_RELAY_NODES); the relay's name (its NATS subjects, its ZooKeeper subtree). */
cq_testsrv_t *it_node(int n);
const char *it_relay_name(void);
/* Node n's --relay-nats from the next start on (borrowed; NULL: CQ_NATS_URLS). */
void it_relay_set_nats(int n, const char *urls);
/* The node the next connection of this kind goes to in relay mode. */
int it_relay_pick(bool server);
/* A file holding channeld's client_authoratative_fsm.json (clients may SUB and UNSUB
 * themselves), for --client-fsm; removed at exit. */
const char *it_client_auth_fsm(void);
/* Stops nodes 2 .. IT_RELAY_NODES (it_teardown calls it); -1 if one did not exit 0. */
int it_relay_stop(void);
/* it_run for a group that needs nats-server and ZooKeeper: a TAP skip (0) when CQ_NATS_URLS
 * or CQ_ZK_HOSTS is not set. */
int it_relay_run(const char *name, const struct CMUnitTest *tests, size_t n, int argc, char **argv);
/* The id of the bridge's "topic" channel of topic ("topic:<topic>", SUBWORLD), as c's LIST
 * finds it (polled: the bridge makes it at start). */
uint32_t it_topic_channel(it_conn_t *c, const char *topic);
/* c acknowledges (topic, shard) up to offset under epoch: a TopicAckMessage (type 92, channel
 * 0; doc/bridge.md "Route bindings"), which has no answer. */
void it_topic_ack(it_conn_t *c, const char *topic, uint32_t shard, uint64_t epoch, uint64_t offset);
/* Authenticates c with pit/lt and asserts SUCCESSFUL; sets c->id. */
void it_auth(it_conn_t *c, const char *pit, const char *lt);
/* Connect + AUTH("pit","lt") on the client / server listener. */
it_conn_t *it_client(void);
it_conn_t *it_server(void);
/* A server that possessed GLOBAL (consumes its CreateChannelResult and SUB result);
 * skip_copies is set. */
it_conn_t *it_gowner(void);
/* Closes a connection now (also removes it from the teardown list). */
void it_close(it_conn_t *c);

/* Next message within IT_TIMEOUT_MS (asserts one arrives). */
void it_recv(it_conn_t *c, chanq_owned_msg_t *m);
/* Next message must have msg_type and stub_id; returns its body decoded as d (or NULL if d is
 * NULL); free with chanq_unpack_free. The envelope is stored in *env when env is not NULL
 * (caller frees with chanq_owned_msg_done). */
void *it_expect(it_conn_t *c, uint32_t msg_type, uint32_t stub_id,
                const ProtobufCMessageDescriptor *d, chanq_owned_msg_t *env);
/* Skip the calling test (with why) unless clients use TCP (e.g. the legacy tag, a TCP
 * listener option), or when a client's close cannot be observed (KCP has no close: a KCP
 * client that leaves is noticed only at the idle timeout, a closed one never hears of it). */
void it_need_tcp(const char *why);
void it_need_visible_close(const char *why);

/* Asserts the server closes c within IT_TIMEOUT_MS. Over KCP, which has no close, the client
 * cannot observe it: the server's log must then show it closing c (by id) after c connected;
 * an unauthenticated KCP client cannot be matched, and the test is skipped at this point. */
void it_expect_closed(it_conn_t *c);

/* Over ws/wss: the status code of the server's WebSocket Close frame for the client TCP
 * connection fd (a libchanq or raw connection to the bridge), as the bridge recorded it before
 * closing fd's TCP side: 1005 for a Close without a code, 1006 for no Close at all, -1 when
 * nothing is recorded. Call after the close was seen. */
int it_ws_close_code(int fd);
/* it_expect_closed(c), then over ws/wss asserts that the server's Close frame carried
 * ws_code (over TCP there is no code to check). */
void it_expect_closed_ws(it_conn_t *c, int ws_code);

/* Creates a channel (stub `stub`) and consumes the CreateChannelResult (asserting its fields)
 * and the creator's SUB result. Returns the new channel id. */
uint32_t it_create(it_conn_t *c, uint32_t type, const char *metadata, uint32_t stub);

/* Expectation helpers for common results. */
void it_expect_sub(it_conn_t *c, uint32_t chan, uint32_t stub, uint32_t conn_id, uint32_t conn_type,
                   uint32_t chan_type, uint32_t data_access);
void it_expect_unsub(it_conn_t *c, uint32_t chan, uint32_t stub, uint32_t conn_id,
                     uint32_t conn_type, uint32_t chan_type);
void it_expect_remove(it_conn_t *c, uint32_t removed_chan);
/* A user-space message: asserts envelope fields and the ServerForwardMessage body. */
void it_expect_user(it_conn_t *c, uint32_t chan, uint32_t msg_type, uint32_t broadcast,
                    uint32_t stub, uint32_t client_conn_id, const char *payload);

/* SUB self to chan with explicit dataAccess, stub echoed; returns nothing (see it_expect_sub). */
void it_sub(it_conn_t *c, uint32_t stub, uint32_t chan, uint32_t conn_id, int data_access);

/* A SERVER user message (ServerForwardMessage{client, payload}) on ch, with its stub. */
void it_sfwd_stub(it_conn_t *c, uint32_t ch, uint32_t bc, uint32_t type, uint32_t stub,
                  uint32_t client, const char *payload);
/* A marker broadcast (ALL, type 199) from `from` follows; each of all[0..4) gets the test message
 * (type, bc, stub, client, payload) first iff its bit is in mask, then the marker. Only one
 * connection's messages are ordered: `from` must be the test message's sender. */
void it_check_marked(it_conn_t *const all[4], it_conn_t *from, uint32_t ch, unsigned mask,
                     uint32_t type, uint32_t bc, uint32_t stub, uint32_t client,
                     const char *payload);

/* Recipient bits of it_check_marked's all[]: owner, other server (the sender), two clients. */
enum { IT_R_S = 1, IT_R_O = 2, IT_R_C1 = 4, IT_R_C2 = 8, IT_R_ALL = 15 };
/* Every broadcast flag combination from all[1] on ch: exactly its recipients get it (§1.8). */
void it_check_bc_cases(it_conn_t *const all[4], uint32_t ch);
/* A SERVER connection (to srv, or it_connect's when NULL) authenticated with pit, stub echoed;
 * *ret is its AuthResult (owned: chanq_unpack_free). */
it_conn_t *it_server_pit(cq_testsrv_t *srv, const char *pit, uint32_t stub,
                         Channeldpb__AuthResultMessage **ret);
/* c's next message is msg_type on chan with an empty body. */
void it_expect_empty(it_conn_t *c, uint32_t msg_type, uint32_t chan);

/* Sends a SERVER user message (ServerForwardMessage{client, payload}) on chan. */
void it_sfwd(it_conn_t *c, uint32_t chan, uint32_t bc, uint32_t msg_type, uint32_t client,
             const char *payload);

#endif
