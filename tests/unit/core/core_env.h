/* core_env.h - the core unit tests' harness (test_core.c, test_spatial_core.c): the core as a
 * protocol engine with fake transports, a manual clock, and the workers' inboxes pumped by hand,
 * so cross-worker paths run deterministically in one thread. */
#ifndef CQ_TEST_CORE_ENV_H
#define CQ_TEST_CORE_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "msgtab.h"
#include "world.h"
#include "cq_fsm.h"
#include "cq_sbuf.h"
#include "cq_settings.h"

#define MAXC 32

typedef struct fconn {
    cq_conn_t *conn;
    int worker;
    cq_sbuf_t out;
    int closed, released, stalled;
    int writes; /* transport flushes that wrote something */
} fconn_t;

typedef struct env {
    cq_fsm_t *cfsm, *sfsm;
    cq_settings_t *settings;
    cq_shared_t *sh;
    cq_core_t *cores[4];
    int n;
    fconn_t fc[MAXC];
    int nfc;
    uint64_t now;
} env_t;

/* The environment of the current test (env_up .. env_down). */
extern env_t E;
/* The peer address the fake transport reports (NULL: "fake"). */
extern const char *fake_peer_addr;
/* A client FSM to load instead of the embedded one (NULL: embedded). */
extern const char *client_fsm_json;

/* Creates the shared state and `workers` cores; extra (may be NULL) overrides options. */
void env_up(int workers, const cq_core_opts_t *extra);
/* Drains every inbox until quiet and flushes output; releases closed connections. */
void pump(void);
void env_down(void);
/* A new connection of type (CQ_CONN_SERVER / CQ_CONN_CLIENT), not authenticated. */
fconn_t *connect_as(int type);
/* Feeds raw bytes; returns the core's result. */
int feed(fconn_t *f, const void *p, size_t n);
/* Sends one message (a packet of one MessagePack) and pumps. */
void send_msg(fconn_t *f, uint32_t ch, uint32_t bc, uint32_t stub, uint32_t type,
              const ProtobufCMessage *m);
/* Counts the messages of msg_type in f's output (0 = any), copying the last one's header and
 * body; take() also consumes the output. */
int scan(fconn_t *f, uint32_t msg_type, cq_mp_t *last, uint8_t *body_copy);
int take(fconn_t *f, uint32_t msg_type, cq_mp_t *last, uint8_t *body_copy);
/* AUTH with pit (login token "l"): f's one AuthResult, owned (free_unpacked); the output is
 * left in place (scan). */
Channeldpb__AuthResultMessage *env_auth_pit(fconn_t *f, const char *pit);
/* The message types f received, in order, into types (at most max); consumes the output. */
int take_types(fconn_t *f, uint32_t *types, int max);

/* The type URL of the channel-data tests (unknown to the core: merged by concatenation). */
extern const char ENV_TURL[];
/* AUTH with pit "p" and asserts its one result. */
void env_auth(fconn_t *f);
/* A CHANNEL_DATA_UPDATE of v[0..n) as ENV_TURL to channel ch, from f. */
void env_send_update(fconn_t *f, uint32_t ch, const void *v, size_t n);
/* srv (authenticated) creates a SUBWORLD channel whose data is ENV_TURL init; drops the replies. */
void env_create_data_channel(fconn_t *srv, const char *init);

#endif
