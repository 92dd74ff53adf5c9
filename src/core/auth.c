/* auth.c - AUTH: providers (dev: accept all; file: PIT -> login token) and the handler.
 *
 * AUTH is the one message handled on the sender's worker (its row in msgtab.c says so): it
 * changes only the connection (state, FSM state, PIT), which lives there, and needs no
 * channel. The token file is loaded once into the shared state and never changes, so
 * checking a token reads no mutable shared state. The check is synchronous because both
 * providers are local; an asynchronous provider would have to answer through the inbox like
 * any other cross-worker work. */
#include "core_int.h"

#include "cq_alloc.h"
#include "cq_err.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

int cq__tokens_load(cq_shared_t *sh, const char *path, char *err, size_t errlen)
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
    sh->tokens = root;
    return 0;
}

void cq__tokens_free(cq_shared_t *sh)
{
    if (sh->tokens)
        json_decref((json_t *)sh->tokens);
    sh->tokens = NULL;
}

/* The provider: returns an AuthResult value (0 success, 1 INVALID_PIT, 2 INVALID_LT). */
static int provider_check(const cq_shared_t *sh, const cq_conn_t *conn, const char *pit,
                          const char *lt)
{
    if (conn->type == CQ_CONN_SERVER && sh->o.server_bypass_auth)
        return CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__SUCCESSFUL;
    if (sh->o.auth_provider != CQ_AUTH_FILE)
        return CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__SUCCESSFUL;
    json_t *want = json_object_get((json_t *)sh->tokens, pit ? pit : "");
    if (!pit || !*pit || !want)
        return CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__INVALID_PIT;
    if (!lt || strcmp(json_string_value(want), lt) != 0)
        return CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__INVALID_LT;
    return CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__SUCCESSFUL;
}

static void auth_success(cq_core_t *c, cq_conn_t *conn, const char *pit)
{
    if (!conn->pit)
        conn->pit = cq_strdup(pit ? pit : "");
    if (conn->state == CONN_UNAUTH)
        conn->fsm_state = (uint8_t)cq_fsm_next_state(conn->fsm, conn->fsm_state);
    conn->state = CONN_AUTHED;
    conn->failed_auth = 0;
    cq_list_remove(&conn->unauth_node);
}

void cq__handle_auth(cq_core_t *c, cq_req_t *r)
{
    cq_conn_t *conn = r->conn;
    Channeldpb__AuthMessage *m = cq__req_body(c, r);
    if (!m || !conn)
        return;
    int res = provider_check(c->sh, conn, m->playeridentifiertoken, m->logintoken);
    uint32_t old = 0;
    bool recovering = false;
    if (res == 0) {
        bool first = conn->state == CONN_UNAUTH;
        auth_success(c, conn, m->playeridentifiertoken);
        recovering = first && cq__recover_takeover(c, conn, &old);
    }
    Channeldpb__AuthResultMessage out = CHANNELDPB__AUTH_RESULT_MESSAGE__INIT;
    out.result = (Channeldpb__AuthResultMessage__AuthResult)res;
    out.connid = conn->id;
    out.shouldrecover = recovering;
    out.compressiontype = (Channeldpb__CompressionType)c->sh->o.compression_type;
    cq__reply(c, r, r->mp.channel_id, MT_AUTH, &out.base);
    uint32_t gowner = atomic_load(&c->sh->global_owner);
    if (gowner && gowner != conn->id)
        cq__notify(c, gowner, r->mp.channel_id, MT_AUTH, &out.base);
    if (res == 0) {
        CQ_INFO("auth", "conn %u (%s) authenticated, pit \"%s\"", conn->id,
                conn->type == CQ_CONN_SERVER ? "SERVER" : "CLIENT",
                m->playeridentifiertoken ? m->playeridentifiertoken : "");
        if (recovering)
            cq__recover_apply(c, old, conn->pit);
        return;
    }
    CQ_METRIC_ADD(c, M_AUTH_FAILED, conn->type, 1);
    CQ_INFO("auth", "conn %u: authentication failed (%s), attempt %u", conn->id,
            res == 1 ? "INVALID_PIT" : "INVALID_LT", conn->failed_auth + 1u);
    if (++conn->failed_auth >= c->sh->o.max_failed_auth && c->sh->o.max_failed_auth)
        cq_core_conn_close(c, conn, CQ_EAUTH, "too many failed AUTH attempts");
}
