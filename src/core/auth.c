/* auth.c - AUTH: providers (dev: accept all; file: PIT -> login token) and the handler.
 *
 * AUTH is the one message handled on the sender's worker (its row in msgtab.c says so): it
 * changes only the connection (state, FSM state, PIT), which lives there, and needs no
 * channel. The token table is shared by every worker and replaced as a whole on SIGHUP
 * (cq_shared_reload_tokens): a check looks the token up under tokens_mu, and a reload swaps the
 * table under it, so no worker ever reads a table being freed. AUTH is not a hot path (one per
 * connection), so a mutex costs nothing that matters. The check is synchronous because both
 * providers are local; an asynchronous provider would have to answer through the inbox like
 * any other cross-worker work.
 *
 * Brute force: besides the per-connection limit (--max-failed-auth; a success resets it), every
 * failure counts in the per-address budget shared with the durable-topic ports
 * (pkg/auth/cq_authlim.h). An address over its budget gets INVALID_LT and a close for any AUTH,
 * a right one included, until its block ends. Tokens are compared in constant time, and failure
 * log lines are rate limited process-wide. */
#include "core.h"
#include "msgtab.h"
#include "world.h"

#include "cq_alloc.h"
#include "cq_authlim.h"
#include "cq_clock.h"
#include "cq_err.h"
#include "cq_util.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* Loads path into a new table (*ret, owned). Every entry is checked before the table is used,
 * so a reload with one bad entry changes nothing. */
static int tokens_read(const char *path, json_t **ret, char *err, size_t errlen)
{
    if (!path || !*path) {
        snprintf(err, errlen, "auth-provider=file needs --auth-token-file");
        return CQ_ECONFIG;
    }
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        snprintf(err, errlen, "%s:%d:%d: %s", path, je.line, je.column, je.text);
        return CQ_EJSON;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: expected a JSON object of PIT -> login token", path);
        json_decref(root);
        return CQ_ECONFIG;
    }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        if (!json_is_string(v)) {
            snprintf(err, errlen, "%s: token of PIT \"%s\" is not a string", path, k);
            json_decref(root);
            return CQ_ECONFIG;
        }
    }
    *ret = root;
    return 0;
}

/* At start, before any worker runs: no lock needed. */
int cq__tokens_load(cq_shared_t *sh, const char *path, char *err, size_t errlen)
{
    json_t *t;
    int r = tokens_read(path, &t, err, errlen);
    if (r == 0)
        sh->tokens = t;
    return r;
}

int cq_shared_reload_tokens(cq_shared_t *sh, const char *path, char *err, size_t errlen)
{
    json_t *t, *old;
    if (sh->o.auth_provider != CQ_AUTH_FILE) {
        snprintf(err, errlen, "the auth provider is not file");
        return CQ_ECONFIG;
    }
    int r = tokens_read(path, &t, err, errlen);
    if (r < 0)
        return r;
    /* The old table is freed after the swap, outside the lock: a check reads it only while it
     * holds the lock, so none can be reading it any more. */
    pthread_mutex_lock(&sh->tokens_mu);
    old = sh->tokens;
    sh->tokens = t;
    pthread_mutex_unlock(&sh->tokens_mu);
    json_decref(old);
    return 0;
}

void cq__tokens_free(cq_shared_t *sh)
{
    if (sh->tokens)
        json_decref((json_t *)sh->tokens);
    sh->tokens = NULL;
}

static uint64_t mono_ms(void)
{
    return cq_clock_mono_ns() / 1000000u;
}

/* channeld lets every server connection skip authentication (-sba). With file auth, anyone who
 * reaches the server port could then pose as a game server, so by default (auto) only loopback
 * peers skip it (doc/security.md). */
static bool bypass(const cq_shared_t *sh, const cq_conn_t *conn, const char *peer)
{
    return conn->type == CQ_CONN_SERVER && sh->o.server_bypass_auth &&
           (!sh->o.server_bypass_loopback || cq_peer_is_loopback(peer));
}

/* The provider: returns an AuthResult value (0 success, 1 INVALID_PIT, 2 INVALID_LT). dev
 * accepts everything (chanqd refuses it without --dev unless every listener is on loopback). file
 * wants a known PIT, then its login token, compared in constant time so that the answer's timing
 * does not reveal how much of a guess was right. */
static int provider_check(cq_shared_t *sh, const cq_conn_t *conn, const char *peer, const char *pit,
                          const char *lt)
{
    if (bypass(sh, conn, peer) || sh->o.auth_provider != CQ_AUTH_FILE)
        return CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__SUCCESSFUL;
    int res = CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__SUCCESSFUL;
    pthread_mutex_lock(&sh->tokens_mu);
    json_t *want = json_object_get((json_t *)sh->tokens, pit ? pit : "");
    if (!pit || !*pit || !want)
        res = CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__INVALID_PIT;
    else if (!lt || !cq_token_eq(json_string_value(want), lt))
        res = CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__INVALID_LT;
    pthread_mutex_unlock(&sh->tokens_mu);
    return res;
}
/* The first AUTH's PIT stays the connection's identity (recovery finds a successor by it); a
 * repeated AUTH does not change it. Only the first success moves the FSM on, to the next state
 * in array order, as channeld does whatever the FSM's Transitions say. A success resets the
 * connection's failure count (not the address's: cq_authlim). */
static void auth_success(cq_core_t *c, cq_conn_t *conn, const char *pit)
{
    if (!conn->pit)
        conn->pit = cq_strdup(pit ? pit : "");
    bool first = conn->state == CONN_UNAUTH;
    if (first)
        conn->fsm_state = (uint8_t)cq_fsm_next_state(conn->fsm, conn->fsm_state);
    conn->state = CONN_AUTHED;
    conn->failed_auth = 0;
    cq_list_remove(&conn->unauth_node);
    /* Bridge events routed to its PIT reach it from now on (inject.c). Out of memory, it stays
     * connected but is not found by them: said once, loudly, rather than closed mid-AUTH. */
    if (first && cq__inject_index(c, conn) < 0)
        CQ_WARN("auth", "conn %u: out of memory: routed bridge events will not reach it", conn->id);
    else if (first)
        cq__route_login(c, conn);
}

/* A failed AUTH (its result already sent): counts, the address budget, a rate-limited log
 * line, and the close when the connection or its address is over its limit. Below them the
 * connection stays, so a client may try again, as channeld lets it. */
static void auth_failed(cq_core_t *c, cq_conn_t *conn, const char *peer, int res, bool blocked)
{
    cq_authlim_t *lim = c->sh->o.authlim;
    uint64_t now = mono_ms();
    char note[48];
    CQ_METRIC_ADD(c, M_AUTH_FAILED, conn->type, 1);
    bool now_blocked = !blocked && cq_authlim_failed(lim, peer, now);
    if (cq_authlim_log_allow(lim, now, note, sizeof(note)))
        CQ_INFO("auth", "conn %u (%s): authentication failed (%s), attempt %u%s%s", conn->id, peer,
                blocked    ? "address blocked after too many failures"
                : res == 1 ? "INVALID_PIT"
                           : "INVALID_LT",
                conn->failed_auth + 1u, now_blocked ? ", address now blocked" : "", note);
    if (blocked)
        cq_core_conn_close(c, conn, CQ_EAUTH, "too many failed authentications from its address");
    else if (++conn->failed_auth >= c->sh->o.max_failed_auth && c->sh->o.max_failed_auth)
        cq_core_conn_close(c, conn, CQ_EAUTH, "too many failed AUTH attempts");
}

/* AuthResult (stub echoed) to the sender and a copy to the GLOBAL owner, failures included
 * (§1.7). An address over its failure budget gets INVALID_LT before its credentials are
 * checked, a right token included: otherwise the guessing would go on and the right guess
 * would still be answered. Recovery is applied after the reply, so the AuthResult that
 * announces it (shouldRecover) precedes the RECOVERY_CHANNEL_DATA. */
static void auth_finish(cq_core_t *c, const cq_req_t *r, const char *pit, const char *peer, int res,
                        bool blocked);

/* A recoverable server whose PIT names a connection of another relay node that is not known to
 * be lost yet: its node most likely died a moment ago (a game server reconnects at once, its
 * node's loss is seen after the ZooKeeper session). Its AUTH waits for that loss to be seen,
 * and so recovers what the relay kept; the wait ends when the predecessor is gone from the
 * directory, or after relay_loss_ms (it is alive: a second server with its PIT, which then
 * recovers nothing, as on one node). */
/* A held AUTH: what its AuthResult needs (kept apart: a connection's size is budgeted). */
typedef struct cq_authhold {
    cq_list_t node;
    cq_conn_t *conn;
    uint32_t stub, bc, chan;
    uint64_t since_ms;
} cq_authhold_t;

static bool auth_hold(cq_core_t *c, cq_conn_t *conn, const cq_req_t *r, const char *pit)
{
    uint32_t pred = cq__recover_pending(c->sh, conn->type, pit);
    if (!pred)
        return false;
    cq_authhold_t *h = cq_calloc(1, sizeof(*h));
    if (!h || (!conn->pit && !(conn->pit = cq_strdup(pit)))) {
        cq_free(h);
        return false; /* out of memory: it authenticates now, and recovers what it can */
    }
    *h = (cq_authhold_t){.conn = conn,
                         .stub = r->mp.stub_id,
                         .bc = r->mp.broadcast,
                         .chan = r->mp.channel_id,
                         .since_ms = c->now_ms};
    cq_list_insert_tail(&c->auth_held, &h->node);
    conn->auth_held = 1;
    cq_list_remove(&conn->unauth_node); /* its wait is bounded here, not by auth-timeout-ms */
    CQ_INFO("auth",
            "conn %u: AUTH held: pit \"%s\" is conn %u's of node %u, not yet known lost (for "
            "%u ms at most)",
            conn->id, pit, pred, cq__id_conn_node(&c->sh->ids, pred, NULL),
            c->sh->o.relay_loss_ms ? c->sh->o.relay_loss_ms : 3000);
    return true;
}

static void hold_free(cq_authhold_t *h)
{
    cq_list_remove(&h->node);
    h->conn->auth_held = 0;
    cq_free(h);
}

void cq__auth_unhold(cq_core_t *c, cq_conn_t *conn)
{
    cq_list_t *n, *t;
    cq_list_foreach_safe(n, t, &c->auth_held)
    {
        cq_authhold_t *h = cq_container_of(n, cq_authhold_t, node);
        if (h->conn == conn)
            hold_free(h);
    }
}

void cq__auth_free_all(cq_core_t *c)
{
    while (!cq_list_empty(&c->auth_held))
        hold_free(cq_container_of(c->auth_held.next, cq_authhold_t, node));
}

/* Housekeeping: a held AUTH goes on once its predecessor is gone or its wait is over. */
void cq__auth_tick(cq_core_t *c, uint64_t now_ms)
{
    uint32_t wait = c->sh->o.relay_loss_ms ? c->sh->o.relay_loss_ms : 3000;
    cq_list_t *n, *t;
    cq_list_foreach_safe(n, t, &c->auth_held)
    {
        cq_authhold_t *h = cq_container_of(n, cq_authhold_t, node);
        cq_conn_t *conn = h->conn;
        if (now_ms - h->since_ms < wait && cq__recover_pending(c->sh, conn->type, conn->pit))
            continue;
        cq_req_t r = {0};
        r.conn = conn;
        r.conn_id = conn->id;
        r.mp.stub_id = h->stub;
        r.mp.broadcast = h->bc;
        r.mp.channel_id = h->chan;
        hold_free(h);
        char peer[64] = "?";
        conn->tops->peer(conn->tctx, peer, sizeof(peer));
        auth_finish(c, &r, conn->pit, peer, 0, false);
    }
}

void cq__handle_auth(cq_core_t *c, cq_req_t *r)
{
    cq_conn_t *conn = r->conn;
    Channeldpb__AuthMessage *m = cq__req_body(c, r);
    if (!m || !conn)
        return;
    if (conn->auth_held)
        return; /* the first AUTH's answer is on its way */
    char peer[64] = "?";
    conn->tops->peer(conn->tctx, peer, sizeof(peer));
    bool blocked = cq_authlim_blocked(c->sh->o.authlim, peer, CQ_AUTHLIM_CHANNEL, mono_ms());
    int res = blocked ? CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__INVALID_LT
                      : provider_check(c->sh, conn, peer, m->playeridentifiertoken, m->logintoken);
    if (res == 0 && conn->state == CONN_UNAUTH && auth_hold(c, conn, r, m->playeridentifiertoken))
        return;
    auth_finish(c, r, m->playeridentifiertoken, peer, res, blocked);
}

/* The AUTH's outcome (r: its stub, broadcast and channel, and the connection). */
static void auth_finish(cq_core_t *c, const cq_req_t *r, const char *pit, const char *peer, int res,
                        bool blocked)
{
    cq_conn_t *conn = r->conn;
    uint32_t old = 0;
    bool recovering = false, first = false;
    if (res == 0) {
        first = conn->state == CONN_UNAUTH;
        auth_success(c, conn, pit);
        recovering = first && cq__recover_takeover(c, conn, &old);
        if (first) /* other nodes know it from its AUTH on, by the id it keeps */
            cq__node_conn_up(c, conn);
    }
    Channeldpb__AuthResultMessage out = CHANNELDPB__AUTH_RESULT_MESSAGE__INIT;
    out.result = (Channeldpb__AuthResultMessage__AuthResult)res;
    out.connid = conn->id;
    out.shouldrecover = recovering;
    out.compressiontype = (Channeldpb__CompressionType)c->sh->o.compression_type;
    cq__reply(c, r, r->mp.channel_id, MT_AUTH, &out.base);
    cq__notify_gowner(c, conn->id, r->mp.channel_id, MT_AUTH, &out.base);
    if (res == 0) {
        CQ_INFO("auth", "conn %u (%s) authenticated, pit \"%s\"", conn->id,
                conn->type == CQ_CONN_SERVER ? "SERVER" : "CLIENT", pit ? pit : "");
        if (recovering)
            cq__recover_start(c, conn->id, old, conn->pit);
        else if (first && conn->type == CQ_CONN_CLIENT) /* well-known entities, once */
            cq__entity_client_authed(c, conn->id);
        return;
    }
    auth_failed(c, conn, peer, res, blocked);
}
