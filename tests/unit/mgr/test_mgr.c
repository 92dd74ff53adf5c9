/* tests/unit/mgr: the management engine (src/mgr) with a fake edge and a manual clock: the
 * protocol handlers (every bad input, the state after), the state changes and their save with
 * compare-and-set conflicts, the registry (stale, rates, alerts) and the state view. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_mgr.h"
#include "cq_mgrstore.h"
#include "cq_mqmgr.h"
#include "mgr_int.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the fake edge ------------------------------------------------------------------------- */

typedef struct fake {
    char *saved; /* the last document saved */
    int64_t expect_ver;
    int saves, reloads, audits;
} fake_t;

static void f_save(void *ud, const char *json, size_t len, int64_t expect_ver)
{
    fake_t *f = ud;
    free(f->saved);
    f->saved = strndup(json, len);
    f->expect_ver = expect_ver;
    f->saves++;
}
static void f_reload(void *ud)
{
    ((fake_t *)ud)->reloads++;
}
static void f_audit(void *ud, const char *line, size_t len)
{
    ((fake_t *)ud)->audits++;
}
static const cq_mgr_ops_t fops = {f_save, f_reload, f_audit};

typedef struct tconn {
    cq_mgr_conn_t *c;
    int closed, flushed;
} tconn_t;

static void t_flush(void *t)
{
    ((tconn_t *)t)->flushed++;
}
static void t_close(void *t)
{
    ((tconn_t *)t)->closed++;
}
static int t_peer(void *t, char *b, size_t n)
{
    snprintf(b, n, "127.0.0.1:1");
    return 0;
}
static const cq_mgr_conn_ops_t cops = {{"tcp", t_flush, t_close, t_peer}};

static fake_t fk;

static cq_mgr_t *start(void)
{
    memset(&fk, 0, sizeof(fk));
    cq_mgr_opts_t o = {.admin_token = "admin",
                       .server_token = "srv",
                       .http_hosts = "*",
                       .stale_ms = 6000,
                       .lag_alert_ms = 30000};
    char err[128];
    cq_mgr_t *m = cq_mgr_new(&o, &fops, &fk, err, sizeof(err));
    assert_non_null(m);
    return m;
}

static void stop(cq_mgr_t *m)
{
    cq_mgr_free(m);
    free(fk.saved);
    fk.saved = NULL;
}

static tconn_t *open_conn(cq_mgr_t *m)
{
    tconn_t *t = calloc(1, sizeof(*t));
    t->c = cq_mgr_conn_new(m, &cops, t, "127.0.0.1:1");
    assert_non_null(t->c);
    return t;
}

static void close_conn(tconn_t *t)
{
    cq_mgr_conn_close(t->c);
    free(t);
}

static int send_frame(tconn_t *t, uint8_t type, const char *body, uint64_t now)
{
    size_t n = strlen(body);
    uint8_t *p = malloc(12 + n);
    cq_mq_header_write(p, (uint32_t)(12 + n), type, 1);
    memcpy(p + 12, body, n);
    int rc = cq_mgr_conn_input(t->c, p, 12 + n, now);
    free(p);
    return rc;
}

/* Pops the next queued frame of t: its type and body (static buffer). NULL when none. */
static const char *next_frame(tconn_t *t, uint8_t *type)
{
    static char body[1 << 16];
    cq_sendq_t *q = cq_mgr_conn_sendq(t->c);
    if (q->count == 0)
        return NULL;
    cq_buf_t *b = q->ring[q->head].buf;
    cq_mq_frame_t f;
    assert_int_equal(cq_mq_parse(b->data, b->len, 0, &f), (ssize_t)b->len);
    *type = f.type;
    memcpy(body, f.body, f.body_len);
    body[f.body_len] = '\0';
    q->queued -= b->len;
    q->head = (q->head + 1) & (q->cap - 1);
    q->count--;
    cq_buf_unref(b);
    return body;
}

static void expect_frame(tconn_t *t, uint8_t type, const char *want)
{
    uint8_t got_type = 0;
    const char *got = next_frame(t, &got_type);
    if (!got)
        fail_msg("no frame, want %u %s", type, want);
    if (got_type != type || strcmp(got, want) != 0)
        fail_msg("\n  got  %u %s\n  want %u %s", got_type, got, type, want);
}

static void expect_none(tconn_t *t)
{
    uint8_t type;
    const char *got = next_frame(t, &type);
    if (got)
        fail_msg("unexpected frame %u %s", type, got);
}

#define STATE                                                                                      \
    "{\"version\":3,\"modules\":{\"7\":{\"token\":\"m7\",\"produce\":[\"orders\"],\"consume\":"    \
    "[\"*\"],\"admin\":false,\"groups\":[1]},\"8\":{\"token\":\"m8\",\"produce\":[],"              \
    "\"consume\":[],\"admin\":true}},\"topics\":{\"orders\":{\"online\":true,\"retention\":0}},"   \
    "\"offline\":[],\"groups\":{\"1\":{\"name\":\"east\"}}}"

static void load_state(cq_mgr_t *m, const char *json, int64_t ver)
{
    char err[256] = "";
    int rc = cq_mgr_store_loaded(m, json, json ? strlen(json) : 0, ver, err, sizeof(err));
    if (rc)
        fail_msg("load: %d %s", rc, err);
}

static char *sync_body(uint32_t appid, uint32_t group, const char *token, const char *ext)
{
    static char b[2048];
    snprintf(b, sizeof(b),
             "{\"askid\":%u,\"group_id\":%u,\"appid\":%u,\"token\":\"%s\",\"serverinfo\":{"
             "\"threads\":1,\"packages\":2,\"cpu\":3,\"mem\":4,\"sockets\":5}%s%s%s}",
             appid, group, appid, token, ext ? ",\"ext\":" : "", ext ? ext : "", "");
    return b;
}

#define CONFIG_V3                                                                                  \
    "{\"version\":3,\"modules\":{\"7\":{\"token\":\"m7\",\"produce\":[\"orders\"],\"consume\":"    \
    "[\"*\"],\"admin\":false},\"8\":{\"token\":\"m8\",\"produce\":[],\"consume\":[],\"admin\":"    \
    "true}},\"topics\":{\"orders\":{\"online\":true,\"retention\":0}}}"

/* ---- protocol ------------------------------------------------------------------------------- */

static void test_sync_and_svrconfig(void **state)
{
    (void)state;
    cq_mgr_t *m = start();
    load_state(m, STATE, 5);
    tconn_t *s1 = open_conn(m), *s2 = open_conn(m), *sdk = open_conn(m);
    assert_false(cq_mgr_conn_authed(s1->c));
    assert_int_equal(send_frame(s1, 1,
                                sync_body(11, 1, "srv",
                                          "{\"addr\":\"10.0.0.1:12100\",\"shard\":1,\"master\":"
                                          "true}"),
                                1000),
                     0);
    assert_true(cq_mgr_conn_authed(s1->c));
    expect_frame(s1, 2, "{\"askid\":11,\"err_code\":0,\"config_version\":3}");
    expect_frame(s1, 3, "{\"askid\":1,\"cmdid\":1,\"content\":" CONFIG_V3 "}");
    expect_none(s1);
    cq_mgr_flush(m);
    assert_int_equal(s1->flushed, 1);
    /* a second sync: no second publish_config */
    send_frame(s1, 1, sync_body(11, 1, "srv", "{\"addr\":\"10.0.0.1:12100\",\"shard\":1}"), 3000);
    expect_frame(s1, 2, "{\"askid\":11,\"err_code\":0,\"config_version\":3}");
    expect_none(s1);
    send_frame(s2, 1,
               sync_body(12, 2, "srv", "{\"addr\":\"10.0.0.2:12101\",\"shard\":0,\"master\":true}"),
               1600);
    expect_frame(s2, 2, "{\"askid\":12,\"err_code\":0,\"config_version\":3}");
    next_frame(s2, &(uint8_t){0});
    /* module 8 sees every group, ordered by shard; module 7 only group 1 */
    send_frame(sdk, 1, "{\"askid\":5,\"module_id\":8,\"token\":\"m8\"}", 2000);
    expect_frame(sdk, 2,
                 "{\"askid\":5,\"module_id\":8,\"err_code\":0,\"servers\":[{\"ip\":\"10.0.0.2\","
                 "\"port\":12101,\"shard\":0},{\"ip\":\"10.0.0.1\",\"port\":12100,\"shard\":1}]}");
    send_frame(sdk, 1, "{\"askid\":6,\"module_id\":7,\"token\":\"m7\"}", 2000);
    expect_frame(sdk, 2,
                 "{\"askid\":6,\"module_id\":7,\"err_code\":0,\"servers\":[{\"ip\":\"10.0.0.1\","
                 "\"port\":12100,\"shard\":1}]}");
    /* stale after stale_ms without reports: s2 reported at 1600 */
    send_frame(sdk, 1, "{\"askid\":7,\"module_id\":8,\"token\":\"m8\"}", 7601);
    expect_frame(sdk, 2,
                 "{\"askid\":7,\"module_id\":8,\"err_code\":0,\"servers\":[{\"ip\":\"10.0.0.1\","
                 "\"port\":12100,\"shard\":1}]}");
    /* a shard whose master is gone offers its standby, for reads (seed 3.2 (3)) */
    send_frame(
        s1, 1,
        sync_body(11, 1, "srv", "{\"addr\":\"10.0.0.1:12100\",\"shard\":1,\"master\":false}"),
        7700);
    next_frame(s1, &(uint8_t){0});
    send_frame(sdk, 1, "{\"askid\":8,\"module_id\":8,\"token\":\"m8\"}", 7700);
    expect_frame(sdk, 2,
                 "{\"askid\":8,\"module_id\":8,\"err_code\":0,\"servers\":[{\"ip\":\"10.0.0.1\","
                 "\"port\":12100,\"shard\":1}]}");
    /* once the shard has a live master again, the standby is not listed */
    tconn_t *s3 = open_conn(m);
    send_frame(s3, 1,
               sync_body(13, 1, "srv", "{\"addr\":\"10.0.0.3:12102\",\"shard\":1,\"master\":true}"),
               7710);
    next_frame(s3, &(uint8_t){0});
    send_frame(sdk, 1, "{\"askid\":10,\"module_id\":8,\"token\":\"m8\"}", 7720);
    expect_frame(sdk, 2,
                 "{\"askid\":10,\"module_id\":8,\"err_code\":0,\"servers\":[{\"ip\":\"10.0.0.3\","
                 "\"port\":12102,\"shard\":1}]}");
    close_conn(s3);
    assert_int_equal(sdk->closed, 0);
    /* wrong token: err 6 and closed */
    assert_int_equal(send_frame(sdk, 1, "{\"askid\":9,\"module_id\":8,\"token\":\"nope\"}", 7800),
                     CQ_EAUTH);
    expect_frame(sdk, 2,
                 "{\"askid\":9,\"module_id\":8,\"err_code\":6,\"err_msg\":\"svrconfig: unknown "
                 "module_id or wrong token\",\"servers\":[]}");
    assert_int_equal(sdk->closed, 1);
    assert_true(send_frame(sdk, 1, "{}", 7800) < 0); /* nothing more is read */
    close_conn(s1);
    close_conn(s2);
    close_conn(sdk);
    stop(m);
}

/* A topic's retention from the API (issue 25): days to seconds in publish_config, audited by
 * the API; a topic the manager had no entry for keeps the online state its master reports (a
 * retention never toggles a topic); bad days and names refused with the field named. */
static void test_topic_retention(void **state)
{
    (void)state;
    cq_mgr_t *m = start();
    load_state(m, STATE, 5);
    tconn_t *s = open_conn(m);
    send_frame(s, 1,
               sync_body(11, 1, "srv",
                         "{\"addr\":\"10.0.0.1:12100\",\"shard\":1,\"master\":true,"
                         "\"topics\":[{\"name\":\"news\",\"online\":false}]}"),
               1000);
    next_frame(s, &(uint8_t){0}); /* the sync's answer */
    next_frame(s, &(uint8_t){0}); /* the first publish_config */
    char err[256] = "";
    assert_int_equal(cq__mgr_topic_set_retention(m, "orders", 7, 1100, err, sizeof(err)), 4);
    expect_frame(s, 3,
                 "{\"askid\":2,\"cmdid\":1,\"content\":{\"version\":4,\"modules\":{\"7\":{"
                 "\"token\":\"m7\",\"produce\":[\"orders\"],\"consume\":[\"*\"],\"admin\":false},"
                 "\"8\":{\"token\":\"m8\",\"produce\":[],\"consume\":[],\"admin\":true}},"
                 "\"topics\":{\"orders\":{\"online\":true,\"retention\":604800}}}}");
    assert_int_equal(cq__mgr_topic_set_retention(m, "news", 0, 1200, err, sizeof(err)), 5);
    expect_frame(s, 3,
                 "{\"askid\":3,\"cmdid\":1,\"content\":{\"version\":5,\"modules\":{\"7\":{"
                 "\"token\":\"m7\",\"produce\":[\"orders\"],\"consume\":[\"*\"],\"admin\":false},"
                 "\"8\":{\"token\":\"m8\",\"produce\":[],\"consume\":[],\"admin\":true}},"
                 "\"topics\":{\"orders\":{\"online\":true,\"retention\":604800},\"news\":{"
                 "\"online\":false,\"retention\":0}}}}");
    assert_int_equal(cq__mgr_topic_set_retention(m, "orders", 36501, 1300, err, sizeof(err)),
                     CQ_EFIELD);
    assert_string_equal(err, "days: must be an integer in [0, 36500] (0: keep forever)");
    assert_int_equal(cq__mgr_topic_set_retention(m, "no-such", 1, 1300, err, sizeof(err)),
                     CQ_EFIELD);
    assert_string_equal(err, "topic: must be a topic name matching [A-Za-z0-9_]{1,64}");
    /* a topic created from the API: online, with its retention or none (each server's own);
     * one the manager has is refused (409) and nothing is pushed */
    assert_int_equal(cq__mgr_topic_create(m, "refunds", 3, err, sizeof(err)), 6);
    expect_frame(s, 3,
                 "{\"askid\":4,\"cmdid\":1,\"content\":{\"version\":6,\"modules\":{\"7\":{"
                 "\"token\":\"m7\",\"produce\":[\"orders\"],\"consume\":[\"*\"],\"admin\":false},"
                 "\"8\":{\"token\":\"m8\",\"produce\":[],\"consume\":[],\"admin\":true}},"
                 "\"topics\":{\"orders\":{\"online\":true,\"retention\":604800},\"news\":{"
                 "\"online\":false,\"retention\":0},\"refunds\":{\"online\":true,\"retention\":"
                 "259200}}}}");
    assert_int_equal(cq__mgr_topic_create(m, "chargebacks", -1, err, sizeof(err)), 7);
    uint8_t type = 0;
    const char *f = next_frame(s, &type);
    assert_non_null(f);
    assert_int_equal(type, 3);
    assert_non_null(strstr(f, "\"chargebacks\":{\"online\":true}"));
    assert_int_equal(cq__mgr_topic_create(m, "news", -1, err, sizeof(err)), CQ_ECONFLICT);
    assert_string_equal(err, "topic news: exists already (set its retention or flag instead)");
    assert_int_equal(cq__mgr_topic_create(m, "refunds2", 36501, err, sizeof(err)), CQ_EFIELD);
    assert_string_equal(err, "retention_days: must be an integer in [0, 36500] (0: keep forever), "
                             "or absent (each server's own)");
    expect_none(s);
    close_conn(s);
    stop(m);
}

static void test_bad_input(void **state)
{
    (void)state;
    cq_mgr_t *m = start();
    load_state(m, STATE, 5);
    tconn_t *t = open_conn(m);
    assert_int_equal(send_frame(t, 1, "{\"askid\":1,", 1), 0);
    expect_frame(t, 20,
                 "{\"err_code\":3,\"err_msg\":\"request: invalid JSON at line 1 column 11: "
                 "string or '}' expected near end of file\"}");
    assert_int_equal(send_frame(t, 1, "{\"askid\":2,\"module_id\":\"x\",\"token\":\"a\"}", 1), 0);
    expect_frame(t, 2,
                 "{\"askid\":2,\"module_id\":0,\"err_code\":5,\"err_msg\":\"svrconfig: field "
                 "\\\"module_id\\\": must be an integer in [0, 4294967295]\",\"servers\":[]}");
    assert_int_equal(send_frame(t, 1, "{\"askid\":3,\"serverinfo\":{}}", 1), 0);
    expect_frame(t, 2,
                 "{\"askid\":3,\"err_code\":5,\"err_msg\":\"sync_serverinfo: field "
                 "\\\"group_id\\\": missing\",\"config_version\":3}");
    assert_int_equal(send_frame(t, 9, "{\"askid\":4}", 1), 0);
    expect_frame(t, 20, "{\"askid\":4,\"err_code\":4,\"err_msg\":\"unknown message type 9\"}");
    assert_int_equal(
        send_frame(t, 3, "{\"askid\":5,\"cmdid\":2,\"content\":{\"offline\":true}}", 1), 0);
    expect_frame(t, 20,
                 "{\"askid\":5,\"err_code\":4,\"err_msg\":\"command is not accepted on the "
                 "management port\"}");
    assert_int_equal(send_frame(t, 4, "{\"askid\":5,\"cmdid\":2,\"err_code\":0}", 1), 0);
    expect_frame(t, 20,
                 "{\"askid\":5,\"err_code\":6,\"err_msg\":\"command_resp: not authenticated\"}");
    assert_int_equal(send_frame(t, 20, "{\"err_code\":1}", 1), 0);
    expect_none(t);
    assert_int_equal(t->closed, 0);
    /* nested deeper than 32: frame 20 err 3 like any bad body, and the connection serves on
     * (it used to close unanswered, reading an error it had not set: issue 25) */
    char deep[128] = "{\"askid\":6,\"a\":";
    for (int i = 0; i < 40; i++)
        strcat(deep, "[");
    assert_int_equal(send_frame(t, 1, deep, 1), 0);
    expect_frame(t, 20, "{\"err_code\":3,\"err_msg\":\"request: JSON nested deeper than 32\"}");
    assert_int_equal(t->closed, 0);
    assert_int_equal(send_frame(t, 1, "{\"askid\":7,\"module_id\":\"x\",\"token\":\"a\"}", 1), 0);
    expect_frame(t, 2,
                 "{\"askid\":7,\"module_id\":0,\"err_code\":5,\"err_msg\":\"svrconfig: field "
                 "\\\"module_id\\\": must be an integer in [0, 4294967295]\",\"servers\":[]}");
    /* a sync with the wrong server token */
    assert_int_equal(send_frame(t, 1, sync_body(1, 1, "bad", NULL), 1), CQ_EAUTH);
    expect_frame(t, 2,
                 "{\"askid\":1,\"err_code\":6,\"err_msg\":\"sync_serverinfo: wrong token\","
                 "\"config_version\":3}");
    assert_int_equal(t->closed, 1);
    close_conn(t);
    /* a broken header: frame 20 and closed */
    t = open_conn(m);
    uint8_t bad[12] = {0, 0, 0, 20, 0, 11, 1, 1, 0, 0, 1, 0};
    assert_int_equal(cq_mgr_conn_input(t->c, bad, sizeof(bad), 1), CQ_EHEADER);
    expect_frame(t, 20, "{\"err_code\":1,\"err_msg\":\"bad frame header\"}");
    assert_int_equal(t->closed, 1);
    close_conn(t);
    /* over the pre-authentication limit: frame 20 err 2, closed */
    t = open_conn(m);
    uint8_t big[12];
    cq_mq_header_write(big, 70000, 1, 1);
    assert_int_equal(cq_mgr_conn_input(t->c, big, sizeof(big), 1), CQ_EBADLEN);
    expect_frame(t, 20, "{\"err_code\":2,\"err_msg\":\"frame total length out of bounds\"}");
    close_conn(t);
    /* frames split byte by byte are the same */
    t = open_conn(m);
    const char *body = "{\"askid\":5,\"module_id\":8,\"token\":\"m8\"}";
    uint8_t fr[128];
    size_t n = strlen(body);
    cq_mq_header_write(fr, (uint32_t)(12 + n), 1, 1);
    memcpy(fr + 12, body, n);
    for (size_t i = 0; i < 12 + n; i++)
        assert_int_equal(cq_mgr_conn_input(t->c, fr + i, 1, 1), 0);
    expect_frame(t, 2, "{\"askid\":5,\"module_id\":8,\"err_code\":0,\"servers\":[]}");
    close_conn(t);
    stop(m);
}

/* ---- changes, saves, conflicts -------------------------------------------------------------- */

static void test_changes_and_commands(void **state)
{
    (void)state;
    cq_mgr_t *m = start();
    tconn_t *s = open_conn(m);
    load_state(m, NULL, -1); /* nothing stored: version 1 is written */
    assert_int_equal(fk.saves, 1);
    assert_int_equal(fk.expect_ver, -1);
    assert_string_equal(
        fk.saved, "{\"version\":1,\"modules\":{},\"topics\":{},\"offline\":[],\"groups\":{}}");
    cq_mgr_store_done(m, 0, 0);
    send_frame(s, 1, sync_body(11, 1, "srv", "{\"addr\":\"h:1\"}"), 10);
    expect_frame(s, 2, "{\"askid\":11,\"err_code\":0,\"config_version\":1}");
    expect_frame(s, 3, "{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":1,\"topics\":{}}}");
    char err[256] = "";
    /* a module without a token is refused; with one it is added */
    assert_int_equal(cq__mgr_module_put(m, 7, "{\"produce\":[]}", 14, err, sizeof(err)), CQ_EFIELD);
    assert_string_equal(err, "token: required for a new module");
    assert_int_equal(
        cq__mgr_module_put(m, 7, "{\"token\":\"t\",\"prodce\":[]}", 25, err, sizeof(err)),
        CQ_EFIELD);
    assert_string_equal(err, "prodce: unknown key");
    const char *mod = "{\"token\":\"t\",\"produce\":[\"a-b\"]}";
    assert_int_equal(cq__mgr_module_put(m, 7, mod, strlen(mod), err, sizeof(err)), CQ_EFIELD);
    assert_non_null(strstr(err, "modules.7: module 7:"));
    mod = "{\"token\":\"t\",\"produce\":[\"orders\"],\"consume\":[\"*\"],\"admin\":false}";
    assert_int_equal(cq__mgr_module_put(m, 7, mod, strlen(mod), err, sizeof(err)), 2);
    expect_frame(
        s, 3,
        "{\"askid\":2,\"cmdid\":1,\"content\":{\"version\":2,\"modules\":{\"7\":{\"token\":"
        "\"t\",\"produce\":[\"orders\"],\"consume\":[\"*\"],\"admin\":false}},\"topics\":{}"
        "}}");
    assert_int_equal(fk.saves, 2);
    assert_int_equal(fk.expect_ver, 0);
    /* while a save is in flight, changes wait; the token is kept when absent */
    mod = "{\"produce\":[],\"consume\":[],\"admin\":true,\"groups\":[2]}";
    assert_int_equal(cq__mgr_module_put(m, 7, mod, strlen(mod), err, sizeof(err)), 3);
    expect_frame(
        s, 3,
        "{\"askid\":3,\"cmdid\":1,\"content\":{\"version\":3,\"modules\":{\"7\":{\"produce\":"
        "[],\"consume\":[],\"admin\":true,\"token\":\"t\"}},\"topics\":{}}}");
    assert_int_equal(cq__mgr_topic_set_online(m, "orders", false, err, sizeof(err)), 4);
    next_frame(s, &(uint8_t){0});
    assert_int_equal(fk.saves, 2);
    cq_mgr_store_done(m, 0, 1);
    assert_int_equal(fk.saves, 3);
    assert_int_equal(fk.expect_ver, 1);
    assert_non_null(strstr(fk.saved, "\"version\":4"));
    /* a conflict: reload, the pending ops applied on top of the other manager's document */
    cq_mgr_store_done(m, CQ_ECONFLICT, 0);
    assert_int_equal(fk.reloads, 1);
    load_state(m,
               "{\"version\":9,\"modules\":{\"7\":{\"token\":\"x\"},\"9\":{\"token\":\"n\"}},"
               "\"topics\":{},\"offline\":[11],\"groups\":{}}",
               2);
    /* ops 2 (module 7 kept token x) and 3 (topic orders offline) re-applied: version 11 */
    assert_int_equal(fk.saves, 4);
    assert_int_equal(fk.expect_ver, 2);
    assert_string_equal(
        fk.saved, "{\"version\":11,\"modules\":{\"7\":{\"produce\":[],\"consume\":[],\"admin\":"
                  "true,\"groups\":[2],\"token\":\"x\"},\"9\":{\"token\":\"n\"}},\"topics\":{"
                  "\"orders\":{\"online\":false}},\"offline\":[11],\"groups\":{}}");
    /* the server was flagged offline by the other manager: publish_config and offline sent */
    expect_frame(s, 3,
                 "{\"askid\":5,\"cmdid\":1,\"content\":{\"version\":11,\"modules\":{\"7\":{"
                 "\"produce\":[],\"consume\":[],\"admin\":true,\"token\":\"x\"},\"9\":{\"token\":"
                 "\"n\"}},\"topics\":{\"orders\":{\"online\":false}}}}");
    /* a topic the manager knew nothing of: toggling it sets its flag only, never a retention
     * (it used to write 0, keep forever, over every server's 30 days: issue 25) */
    expect_frame(s, 3, "{\"askid\":6,\"cmdid\":2,\"content\":{\"offline\":true}}");
    cq_mgr_store_done(m, 0, 3);
    /* server online again: offline false */
    assert_int_equal(cq__mgr_server_set_offline(m, 11, false, err, sizeof(err)), 12);
    next_frame(s, &(uint8_t){0});
    expect_frame(s, 3, "{\"askid\":8,\"cmdid\":2,\"content\":{\"offline\":false}}");
    /* command answers are counted */
    send_frame(s, 4, "{\"askid\":8,\"cmdid\":2,\"err_code\":0}", 20);
    send_frame(s, 4, "{\"askid\":7,\"cmdid\":1,\"err_code\":5,\"err_msg\":\"x\"}", 20);
    expect_none(s);
    assert_int_equal(cq__mgr_module_delete(m, 42, err, sizeof(err)), -ENOENT);
    assert_int_equal(cq__mgr_module_delete(m, 9, err, sizeof(err)), 13);
    /* the last module stays: deleting it would hand the servers back their own tables */
    assert_int_equal(cq__mgr_module_delete(m, 7, err, sizeof(err)), CQ_ECONFLICT);
    assert_string_equal(err, "module 7: the last module cannot be deleted (the servers would go "
                             "back to their own permissions); add another module first");
    cq_sbuf_t sb;
    cq_sbuf_init(&sb);
    assert_int_equal(cq_mgr_metrics(m, 20, &sb), 0);
    assert_int_equal(cq_sbuf_append(&sb, "", 1), 0);
    assert_non_null(strstr((const char *)sb.data,
                           "chanq_mgr_commands_total{cmd=\"offline\",result=\"ok\"} 1\n"));
    assert_non_null(strstr((const char *)sb.data,
                           "chanq_mgr_commands_total{cmd=\"publish_config\",result=\"ok\"} 0\n"));
    assert_non_null(strstr((const char *)sb.data, "chanq_mgr_config_version 13\n"));
    assert_non_null(strstr((const char *)sb.data, "chanq_mgr_servers{state=\"live\"} 1\n"));
    assert_non_null(strstr((const char *)sb.data, "chanq_mgr_state_save_conflicts_total 1\n"));
    cq_sbuf_done(&sb);
    /* a failed save is retried at the tick */
    cq_mgr_store_done(m, -EIO, 0);
    int saves = fk.saves;
    cq_mgr_tick(m, 30);
    assert_int_equal(fk.saves, saves + 1);
    cq__mgr_audit_write(m, "{}", 2);
    assert_int_equal(fk.audits, 1);
    close_conn(s);
    stop(m);
}

static json_t *view(cq_mgr_t *m, uint64_t now);

/* GET /api/bindings' body (the engine's side). */
static void expect_bindings_json(cq_mgr_t *m, const char *want)
{
    cq_sbuf_t sb;
    cq_sbuf_init(&sb);
    assert_int_equal(cq__mgr_bindings_json(m, &sb), 0);
    assert_int_equal(cq_sbuf_append(&sb, "", 1), 0);
    assert_string_equal((const char *)sb.data, want);
    cq_sbuf_done(&sb);
}

#define VIP_DOC "{\"bindings\":[{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201}]}"
#define GLOBAL_DOC                                                                                 \
    "{\"bindings\":[{\"topic\":\"release\",\"broadcast\":\"global\",\"msg_type\":200}]}"

/* Bindings: none saved sends none (the servers keep their files); a refused document is the
 * parser's exact message and changes nothing; a saved one is versioned, stored, pushed to every
 * server as "bindings" and re-applied after a compare-and-set miss; an empty list stays managed. */
static void test_bindings(void **state)
{
    (void)state;
    cq_mgr_t *m = start();
    tconn_t *s = open_conn(m);
    load_state(m, NULL, -1);
    cq_mgr_store_done(m, 0, 0);
    send_frame(s, 1, sync_body(11, 1, "srv", "{\"addr\":\"h:1\"}"), 10);
    expect_frame(s, 2, "{\"askid\":11,\"err_code\":0,\"config_version\":1}");
    expect_frame(s, 3, "{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":1,\"topics\":{}}}");
    expect_bindings_json(m, "{\"bindings\":[]}");
    json_t *v = view(m, 10);
    assert_true(json_is_null(json_object_get(v, "bindings")));
    json_decref(v);
    /* refused: exactly what cq_bindings_parse says (doc/bridge.md), nothing changes */
    static const struct {
        const char *doc, *msg;
    } bad[] = {
        {"{\"bindings\":[{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":99}]}",
         "binding 0: \"msg_type\" must be an integer from 100 to 65535"},
        {"{\"bindings\":[],\"extra\":1}", "bindings: unknown key \"extra\""},
        {"[]", "bindings: the document must be a JSON object"},
        {"{\"bindings\":[\n{\"topic\":\"a\",}]}",
         "bindings: invalid JSON at line 2, column 14: string or '}' expected near '}'"},
        {"{\"bindings\":[{\"topic\":\"vip\",\"route\":\"uid\",\"msg_type\":201},"
         "{\"topic\":\"VIP\",\"route\":\"uid\",\"msg_type\":202}]}",
         "binding 1: same topic and target as binding 0"},
        {"", "bindings: invalid JSON at line 1, column 0: '[' or '{' expected near end of file"},
    };
    char err[256];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        int64_t rc = cq__mgr_bindings_put(m, bad[i].doc, strlen(bad[i].doc), err, sizeof(err));
        assert_int_equal(rc, CQ_EFIELD);
        if (strcmp(err, bad[i].msg) != 0)
            fail_msg("%s:\n  got  %s\n  want %s", bad[i].doc, err, bad[i].msg);
    }
    expect_none(s);
    assert_int_equal(fk.saves, 1);
    expect_bindings_json(m, "{\"bindings\":[]}");
    /* saved: version 2, stored as the object, pushed after the topics */
    const char *doc =
        "{\"bindings\": [{\"topic\": \"vip\", \"route\": \"user_id\", \"msg_type\": 201}]}";
    assert_int_equal(cq__mgr_bindings_put(m, doc, strlen(doc), err, sizeof(err)), 2);
    expect_frame(
        s, 3,
        "{\"askid\":2,\"cmdid\":1,\"content\":{\"version\":2,\"topics\":{},\"bindings\":" VIP_DOC
        "}}");
    assert_int_equal(fk.saves, 2);
    assert_string_equal(fk.saved, "{\"version\":2,\"modules\":{},\"topics\":{},\"offline\":[],"
                                  "\"groups\":{},\"bindings\":" VIP_DOC "}");
    cq_mgr_store_done(m, 0, 1);
    expect_bindings_json(m, VIP_DOC);
    v = view(m, 10);
    char *text = json_dumps(json_object_get(v, "bindings"), JSON_COMPACT);
    assert_string_equal(text, "[{\"topic\":\"vip\",\"route\":\"user_id\",\"msg_type\":201}]");
    free(text);
    json_decref(v);
    /* a compare-and-set miss: the other manager's document, then our bindings on top */
    assert_int_equal(cq__mgr_bindings_put(m, GLOBAL_DOC, strlen(GLOBAL_DOC), err, sizeof(err)), 3);
    next_frame(s, &(uint8_t){0});
    cq_mgr_store_done(m, CQ_ECONFLICT, 0);
    load_state(m, "{\"version\":7,\"bindings\":" VIP_DOC ",\"offline\":[]}", 4);
    assert_string_equal(fk.saved, "{\"version\":8,\"bindings\":" GLOBAL_DOC ",\"offline\":[],"
                                  "\"modules\":{},\"topics\":{},\"groups\":{}}");
    expect_frame(
        s, 3,
        "{\"askid\":4,\"cmdid\":1,\"content\":{\"version\":8,\"topics\":{},\"bindings\":" GLOBAL_DOC
        "}}");
    cq_mgr_store_done(m, 0, 5);
    /* an empty list removes every binding and stays managed: "bindings" is still sent */
    assert_int_equal(cq__mgr_bindings_put(m, "{\"bindings\":[]}", 15, err, sizeof(err)), 9);
    expect_frame(s, 3,
                 "{\"askid\":5,\"cmdid\":1,\"content\":{\"version\":9,\"topics\":{},\"bindings\":{"
                 "\"bindings\":[]}}}");
    expect_bindings_json(m, "{\"bindings\":[]}");
    v = view(m, 10);
    assert_int_equal(json_array_size(json_object_get(v, "bindings")), 0);
    assert_true(json_is_array(json_object_get(v, "bindings")));
    json_decref(v);
    close_conn(s);
    stop(m);
    /* a stored state with bindings: a new manager pushes them to the first server it hears */
    m = start();
    s = open_conn(m);
    load_state(m, "{\"version\":4,\"bindings\":" GLOBAL_DOC "}", 2);
    send_frame(s, 1, sync_body(11, 1, "srv", "{\"addr\":\"h:1\"}"), 10);
    expect_frame(s, 2, "{\"askid\":11,\"err_code\":0,\"config_version\":4}");
    expect_frame(
        s, 3,
        "{\"askid\":1,\"cmdid\":1,\"content\":{\"version\":4,\"topics\":{},\"bindings\":" GLOBAL_DOC
        "}}");
    close_conn(s);
    stop(m);
}

static void test_bad_stored_state(void **state)
{
    (void)state;
    cq_mgr_t *m = start();
    char err[256] = "";
    static const struct {
        const char *doc, *msg;
    } bad[] = {
        {"[]", "the state must be a JSON object"},
        {"{}", "version: must be an integer in [0, 9007199254740991]"},
        {"{\"version\":1,\"modules\":{\"07\":{}}}", "modules.07: module ids are decimal u32"},
        {"{\"version\":1,\"modules\":{\"7\":{\"token\":\"t\",\"groups\":[-1]}}}",
         "modules.7.groups[0]: must be an integer in [0, 4294967295]"},
        {"{\"version\":1,\"topics\":{\"a\":{}}}", "topics.a.online: must be true or false"},
        {"{\"version\":1,\"topics\":{\"a\":{\"online\":true,\"retention\":-1}}}",
         "topics.a.retention: must be an integer in [0, 9007199254740991]"},
        {"{\"version\":1,\"offline\":[\"1\"]}",
         "offline[0]: must be an integer in [0, 4294967295]"},
        {"{\"version\":1,\"groups\":{\"1\":{\"name\":1}}}",
         "groups.1: must be an object {\"name\": string}"},
        {"{\"version\":1,\"bindings\":[]}", "bindings: the document must be a JSON object"},
        {"{\"version\":1,\"bindings\":{\"bindings\":[{\"topic\":\"a\",\"broadcast\":\"x\","
         "\"msg_type\":200}]}}",
         "binding 0: \"broadcast\" must be \"global\" or \"topic\""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = cq_mgr_store_loaded(m, bad[i].doc, strlen(bad[i].doc), 1, err, sizeof(err));
        assert_true(rc == CQ_EFIELD || rc == CQ_EJSON);
        if (strcmp(err, bad[i].msg) != 0)
            fail_msg("%s:\n  got  %s\n  want %s", bad[i].doc, err, bad[i].msg);
    }
    assert_int_equal(cq_mgr_store_loaded(m, "{", 1, 1, err, sizeof(err)), CQ_EJSON);
    assert_int_equal(fk.saves, 0);
    stop(m);
}

/* ---- registry and view ---------------------------------------------------------------------- */

static json_t *view(cq_mgr_t *m, uint64_t now)
{
    cq_sbuf_t sb;
    cq_sbuf_init(&sb);
    assert_int_equal(cq__mgr_state_json(m, now, &sb), 0);
    json_t *v = json_loadb((const char *)sb.data, sb.len, 0, NULL);
    assert_non_null(v);
    cq_sbuf_done(&sb);
    return v;
}

static void test_view_rates_alerts(void **state)
{
    (void)state;
    cq_mgr_t *m = start();
    load_state(m, STATE, 5);
    tconn_t *a = open_conn(m), *b = open_conn(m);
#define EA                                                                                         \
    "{\"addr\":\"h:1\",\"shard\":0,\"master\":true,\"produced_total\":%d,"                         \
    "\"consumed_total\":0,\"topics\":[{\"name\":\"orders\",\"last_offset\":%d,"                    \
    "\"produced_total\":%d,\"consumers\":[{\"id\":\"c1\",\"offset\":1,\"lag\":%d}]}],"             \
    "\"relay\":{\"connections\":{\"tcp\":2},\"fanouts_total\":%d}}"
    char ext[512];
    snprintf(ext, sizeof(ext), EA, 100, 100, 100, 99, 0);
    send_frame(a, 1, sync_body(1, 1, "srv", ext), 1000);
    snprintf(ext, sizeof(ext), EA, 300, 300, 300, 299, 50);
    send_frame(a, 1, sync_body(1, 1, "srv", ext), 3000);
    send_frame(
        b, 1,
        sync_body(2, 1, "srv",
                  "{\"addr\":\"h:2\",\"shard\":0,\"master\":false,\"repl\":{\"replica\":true,"
                  "\"io_running\":true,\"sql_running\":false,\"lag_seconds\":-1,"
                  "\"behind_ms\":31000},\"relay\":{\"connections\":{\"tcp\":3}}}"),
        3000);
    json_t *v = view(m, 3500);
    json_t *s0 = json_array_get(json_object_get(v, "servers"), 0);
    assert_int_equal(json_integer_value(json_object_get(s0, "appid")), 1);
    assert_true(json_real_value(json_object_get(s0, "produce_rate")) == 100.0);
    assert_false(json_is_true(json_object_get(s0, "stale")));
    assert_int_equal(json_integer_value(json_object_get(s0, "age_ms")), 500);
    /* it reported no configuration version: behind the manager's 3 (flagged in the console) */
    assert_true(json_is_true(json_object_get(s0, "config_behind")));
    json_t *sh = json_array_get(json_object_get(v, "shards"), 0);
    assert_int_equal(json_integer_value(json_object_get(sh, "master")), 1);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(sh, "standbys"), 0)), 2);
    assert_true(json_is_true(json_object_get(sh, "alert")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(sh, "repl"), "behind_ms")),
                     31000);
    json_t *al = json_array_get(json_object_get(v, "alerts"), 0);
    assert_string_equal(json_string_value(json_object_get(al, "kind")), "repl_lag");
    json_t *t0 = json_array_get(json_object_get(v, "topics"), 0);
    assert_string_equal(json_string_value(json_object_get(t0, "name")), "orders");
    assert_true(json_real_value(json_object_get(t0, "produce_rate")) == 100.0);
    assert_int_equal(json_integer_value(json_object_get(
                         json_array_get(json_object_get(t0, "consumers"), 0), "lag")),
                     299);
    json_t *relay = json_object_get(v, "relay");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(relay, "connections"), "tcp")), 5);
    assert_true(json_real_value(json_object_get(relay, "fanouts_per_s")) == 25.0);
    json_t *mods = json_object_get(v, "modules");
    assert_null(json_object_get(json_object_get(mods, "7"), "token"));
    assert_non_null(json_object_get(json_object_get(mods, "7"), "produce"));
    json_decref(v);
    cq_sbuf_t sb;
    cq_sbuf_init(&sb);
    assert_int_equal(cq_mgr_metrics(m, 3500, &sb), 0);
    cq_sbuf_append(&sb, "", 1);
    assert_non_null(
        strstr((const char *)sb.data, "chanq_mgr_repl_behind_seconds{shard=\"0\"} 31.000\n"));
    assert_non_null(strstr((const char *)sb.data, "chanq_mgr_repl_lag_alert{shard=\"0\"} 1\n"));
    cq_sbuf_done(&sb);
    /* the charts (issue 25): a tick samples the same figures, kept for the console */
    cq_mgr_tick(m, 3600);
    cq_sbuf_init(&sb);
    assert_int_equal(cq__mgr_charts_json(m, "topic/orders/", &sb), 0);
    cq_sbuf_append(&sb, "", 1);
    assert_string_equal((const char *)sb.data,
                        "{\"interval_ms\":10000,\"series\":{\"topic/orders/lag/c1@0\":[299.0],"
                        "\"topic/orders/produce\":[100.0]},\"t\":[3600]}");
    cq_sbuf_done(&sb);
    cq_sbuf_init(&sb);
    assert_int_equal(cq__mgr_charts_json(m, "shard/", &sb), 0);
    cq_sbuf_append(&sb, "", 1);
    assert_string_equal((const char *)sb.data,
                        "{\"interval_ms\":10000,\"series\":{\"shard/0/behind_ms\":[31000.0]},"
                        "\"t\":[3600]}");
    cq_sbuf_done(&sb);
    cq_mgr_tick(m, 5000); /* before the next sample is due: none */
    cq_sbuf_init(&sb);
    assert_int_equal(cq__mgr_charts_json(m, "server/1/", &sb), 0);
    cq_sbuf_append(&sb, "", 1);
    assert_string_equal((const char *)sb.data,
                        "{\"interval_ms\":10000,\"series\":{\"server/1/consume\":[0.0],"
                        "\"server/1/produce\":[100.0],\"server/1/sockets\":[5.0]},"
                        "\"t\":[3600]}");
    cq_sbuf_done(&sb);
    /* both stale later: no alert, no relay */
    v = view(m, 20000);
    sh = json_array_get(json_object_get(v, "shards"), 0);
    assert_false(json_is_true(json_object_get(sh, "alert")));
    assert_true(
        json_is_true(json_object_get(json_array_get(json_object_get(v, "servers"), 1), "stale")));
    json_decref(v);
    /* a server at the manager's version is not behind; one at an older version is */
    send_frame(b, 1, sync_body(2, 1, "srv", "{\"addr\":\"h:2\",\"config_version\":3}"), 20500);
    send_frame(a, 1, sync_body(1, 1, "srv", "{\"addr\":\"h:1\",\"config_version\":2}"), 20500);
    v = view(m, 20600);
    assert_true(json_is_true(
        json_object_get(json_array_get(json_object_get(v, "servers"), 0), "config_behind")));
    assert_false(json_is_true(
        json_object_get(json_array_get(json_object_get(v, "servers"), 1), "config_behind")));
    json_decref(v);
    /* a second connection for appid 1 replaces the first */
    tconn_t *a2 = open_conn(m);
    send_frame(a2, 1, sync_body(1, 1, "srv", NULL), 21000);
    assert_int_equal(a->closed, 1);
    close_conn(a);
    close_conn(b);
    close_conn(a2);
    stop(m);
}

/* A relay node's ext: standalone MQ port (shard 0), node, addresses, one link to peer 2. */
static const char *relay_ext(int port, int node, const char *addrs, bool offline, int pkts,
                             int bytes)
{
    static char b[1024];
    snprintf(b, sizeof(b),
             "{\"addr\":\"10.0.0.9:%d\",\"shard\":0,\"master\":true,\"offline\":%s,"
             "\"relay\":{\"connections\":{\"tcp\":%d,\"ws\":1},\"channels\":{\"GLOBAL\":1,"
             "\"SUBWORLD\":2},\"subscribers\":4,\"node\":%d,\"cluster\":\"eu\","
             "\"global_home\":1,\"members\":3,\"addrs\":{%s},\"links\":[{\"peer\":2,\"up\":"
             "true,\"packets_in\":7,\"packets_out\":%d,\"bytes_out\":%d,\"gaps\":1,"
             "\"resets\":0,\"lost\":2}]}}",
             port, offline ? "true" : "false", node + 1, node, addrs, pkts, bytes);
    return b;
}

#define N1_ADDRS "\"tcp\":\"10.0.0.1:7100\",\"ws\":\"10.0.0.1:7180\""
#define N2_ADDRS "\"tcp\":\"10.0.0.2:7100\""

/* svrconfig lists the live relay nodes with a client address, by relay and node, within the
 * module's groups, not offline, the newer report of a restarted node; a relay node's own MQ port
 * is not a durable-topic server nor a shard; the view has every relay node with its link rates. */
static void test_relay_nodes(void **state)
{
    (void)state;
    cq_mgr_t *m = start();
    load_state(m, STATE, 5);
    tconn_t *d = open_conn(m), *r1 = open_conn(m), *r2 = open_conn(m), *r3 = open_conn(m),
            *sdk = open_conn(m);
    send_frame(d, 1,
               sync_body(11, 1, "srv", "{\"addr\":\"10.0.0.5:12100\",\"shard\":1,\"master\":true}"),
               1000);
    send_frame(r1, 1, sync_body(21, 1, "srv", relay_ext(7001, 1, N1_ADDRS, false, 100, 1000)),
               1000);
    send_frame(r2, 1, sync_body(22, 2, "srv", relay_ext(7002, 2, N2_ADDRS, false, 0, 0)), 1500);
    send_frame(r3, 1, sync_body(23, 1, "srv", relay_ext(7003, 3, "", false, 0, 0)), 1500);
    send_frame(sdk, 1, "{\"askid\":5,\"module_id\":8,\"token\":\"m8\"}", 2000);
    expect_frame(sdk, 2,
                 "{\"askid\":5,\"module_id\":8,\"err_code\":0,\"servers\":[{\"ip\":\"10.0.0.5\","
                 "\"port\":12100,\"shard\":1}],\"relay_nodes\":[{\"node\":1,\"cluster\":\"eu\","
                 "\"tcp\":\"10.0.0.1:7100\",\"ws\":\"10.0.0.1:7180\"},{\"node\":2,\"cluster\":"
                 "\"eu\",\"tcp\":\"10.0.0.2:7100\"}]}");
    /* module 7 sees group 1 only */
    send_frame(sdk, 1, "{\"askid\":6,\"module_id\":7,\"token\":\"m7\"}", 2000);
    expect_frame(sdk, 2,
                 "{\"askid\":6,\"module_id\":7,\"err_code\":0,\"servers\":[{\"ip\":\"10.0.0.5\","
                 "\"port\":12100,\"shard\":1}],\"relay_nodes\":[{\"node\":1,\"cluster\":\"eu\","
                 "\"tcp\":\"10.0.0.1:7100\",\"ws\":\"10.0.0.1:7180\"}]}");
    /* node 1's second report (2 s later), node 2 reports offline */
    send_frame(r1, 1, sync_body(21, 1, "srv", relay_ext(7001, 1, N1_ADDRS, false, 300, 5000)),
               3000);
    send_frame(r2, 1, sync_body(22, 2, "srv", relay_ext(7002, 2, N2_ADDRS, true, 0, 0)), 3000);
    send_frame(sdk, 1, "{\"askid\":7,\"module_id\":8,\"token\":\"m8\"}", 3000);
    expect_frame(sdk, 2,
                 "{\"askid\":7,\"module_id\":8,\"err_code\":0,\"servers\":[{\"ip\":\"10.0.0.5\","
                 "\"port\":12100,\"shard\":1}],\"relay_nodes\":[{\"node\":1,\"cluster\":\"eu\","
                 "\"tcp\":\"10.0.0.1:7100\",\"ws\":\"10.0.0.1:7180\"}]}");
    /* the view: every relay node by node, node 1 GLOBAL's home, its link's rates over 2 s */
    json_t *v = view(m, 3000);
    json_t *rn = json_object_get(v, "relay_nodes");
    assert_int_equal(json_array_size(rn), 3);
    json_t *n1 = json_array_get(rn, 0);
    assert_int_equal(json_integer_value(json_object_get(n1, "appid")), 21);
    assert_int_equal(json_integer_value(json_object_get(n1, "node")), 1);
    assert_string_equal(json_string_value(json_object_get(n1, "cluster")), "eu");
    assert_true(json_is_true(json_object_get(n1, "home")));
    assert_false(json_is_true(json_object_get(n1, "stale")));
    assert_int_equal(json_integer_value(json_object_get(n1, "members")), 3);
    assert_string_equal(json_string_value(json_object_get(json_object_get(n1, "addrs"), "ws")),
                        "10.0.0.1:7180");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(n1, "connections"), "tcp")),
                     2);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(n1, "channels"), "SUBWORLD")), 2);
    assert_int_equal(json_integer_value(json_object_get(n1, "subscribers")), 4);
    json_t *l = json_array_get(json_object_get(n1, "links"), 0);
    assert_int_equal(json_integer_value(json_object_get(l, "peer")), 2);
    assert_true(json_is_true(json_object_get(l, "up")));
    assert_int_equal(json_integer_value(json_object_get(l, "packets_out")), 300);
    assert_int_equal(json_integer_value(json_object_get(l, "gaps")), 1);
    assert_int_equal(json_integer_value(json_object_get(l, "lost")), 2);
    assert_true(json_real_value(json_object_get(l, "packets_out_per_s")) == 100.0);
    assert_true(json_real_value(json_object_get(l, "bytes_out_per_s")) == 2000.0);
    assert_true(json_real_value(json_object_get(l, "packets_in_per_s")) == 0.0);
    json_t *n2 = json_array_get(rn, 1);
    assert_false(json_is_true(json_object_get(n2, "home")));
    assert_true(json_is_true(json_object_get(n2, "offline")));
    /* no shard 0 made of relay nodes: only shard 1 */
    json_t *shards = json_object_get(v, "shards");
    assert_int_equal(json_array_size(shards), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(shards, 0), "shard")), 1);
    json_decref(v);
    /* node 1 restarted on another MQ port (appid 24): listed once, with its new addresses */
    tconn_t *r4 = open_conn(m);
    send_frame(
        r4, 1,
        sync_body(24, 1, "srv", relay_ext(7004, 1, "\"kcp\":\"10.0.0.1:7200\"", false, 0, 0)),
        4000);
    send_frame(sdk, 1, "{\"askid\":8,\"module_id\":8,\"token\":\"m8\"}", 4000);
    expect_frame(sdk, 2,
                 "{\"askid\":8,\"module_id\":8,\"err_code\":0,\"servers\":[{\"ip\":\"10.0.0.5\","
                 "\"port\":12100,\"shard\":1}],\"relay_nodes\":[{\"node\":1,\"cluster\":\"eu\","
                 "\"kcp\":\"10.0.0.1:7200\"}]}");
    /* stale after stale_ms (6000) without a report: none left, and the key is left out */
    send_frame(d, 1,
               sync_body(11, 1, "srv", "{\"addr\":\"10.0.0.5:12100\",\"shard\":1,\"master\":true}"),
               10000);
    send_frame(sdk, 1, "{\"askid\":9,\"module_id\":8,\"token\":\"m8\"}", 10001);
    expect_frame(sdk, 2,
                 "{\"askid\":9,\"module_id\":8,\"err_code\":0,\"servers\":[{\"ip\":\"10.0.0.5\","
                 "\"port\":12100,\"shard\":1}]}");
    v = view(m, 10001);
    assert_int_equal(json_array_size(json_object_get(v, "relay_nodes")), 4);
    assert_true(json_is_true(
        json_object_get(json_array_get(json_object_get(v, "relay_nodes"), 0), "stale")));
    json_decref(v);
    close_conn(d);
    close_conn(r1);
    close_conn(r2);
    close_conn(r3);
    close_conn(r4);
    close_conn(sdk);
    stop(m);
}

/* ---- the file store ---------------------------------------------------------------------------
 */

/* ---- message commands (msgcmd.c) ----------------------------------------------------------- */

/* Everything queued on an HTTP connection's send queue (static buffer), taken. */
static const char *http_out(cq_mgr_hconn_t *h)
{
    static char out[1 << 14];
    size_t n = 0;
    cq_sendq_t *q = cq_mgr_hconn_sendq(h);
    while (q->count) {
        cq_buf_t *b = q->ring[q->head].buf;
        assert_true(n + b->len < sizeof(out));
        memcpy(out + n, b->data, b->len);
        n += b->len;
        q->queued -= b->len;
        q->head = (q->head + 1) & (q->cap - 1);
        q->count--;
        cq_buf_unref(b);
    }
    out[n] = '\0';
    return out;
}

static void http_post(cq_mgr_hconn_t *h, const char *path, const char *body, uint64_t now)
{
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "POST %s HTTP/1.1\r\nHost: m\r\nAuthorization: Bearer admin\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     path, strlen(body), body);
    assert_int_equal(cq_mgr_hconn_input(h, (const uint8_t *)req, (size_t)n, now), 0);
}

/* The body of the one answer in out, after checking its status line. */
static const char *answer_is(const char *out, const char *status)
{
    if (strncmp(out, status, strlen(status)) != 0)
        fail_msg("want %s, got:\n%s", status, out);
    const char *b = strstr(out, "\r\n\r\n");
    assert_non_null(b);
    return b + 4;
}

/* Takes the invalidate command t was sent: its askid, after checking the content. */
static uint32_t take_invalidate(tconn_t *t, const char *content)
{
    uint8_t type = 0;
    const char *f = next_frame(t, &type);
    assert_non_null(f);
    assert_int_equal(type, 3);
    unsigned askid = 0;
    char rest[256];
    assert_int_equal(sscanf(f, "{\"askid\":%u,%255s", &askid, rest), 2);
    char want[256];
    snprintf(want, sizeof(want), "\"cmdid\":3,\"content\":%s}", content);
    assert_string_equal(rest, want);
    return askid;
}

static void drain(tconn_t *t)
{
    uint8_t type;
    while (next_frame(t, &type))
        ;
}

/* The API's invalidate goes to the shard's master only (command 3), and is answered when the
 * master answers, when its connection goes, or at the deadline; no master: 503 at once. */
static void test_invalidate_command(void **state)
{
    (void)state;
    cq_mgr_t *m = start();
    load_state(m, STATE, 1);
    tconn_t *ma = open_conn(m), *sl = open_conn(m), *web = calloc(1, sizeof(*web));
    send_frame(ma, 1, sync_body(11, 1, "srv", "{\"shard\":1,\"master\":true}"), 10);
    send_frame(sl, 1, sync_body(12, 1, "srv", "{\"shard\":1,\"master\":false}"), 10);
    drain(ma);
    drain(sl);
    cq_mgr_hconn_t *h = cq_mgr_hconn_new(m, &cops, web, "127.0.0.1");
    assert_non_null(h);
    const char *path = "/api/topics/orders/messages/1/5/invalidate";
    http_post(h, path, "{\"reason\":\"bad release\"}", 20);
    uint32_t askid = take_invalidate(ma, "{\"topic\":\"orders\",\"offset\":5}");
    expect_none(sl);
    assert_string_equal(http_out(h), ""); /* not before the master answers */
    char ans[128];
    snprintf(ans, sizeof(ans), "{\"askid\":%u,\"cmdid\":3,\"err_code\":0}", askid);
    send_frame(ma, 4, ans, 30);
    assert_string_equal(answer_is(http_out(h), "HTTP/1.1 200 "),
                        "{\"topic\":\"orders\",\"shard\":1,\"offset\":5,\"state\":0}");
    /* the master's refusal: its err_code mapped back, its text */
    http_post(h, path, "{\"reason\":\"r\"}", 40);
    askid = take_invalidate(ma, "{\"topic\":\"orders\",\"offset\":5}");
    snprintf(ans, sizeof(ans),
             "{\"askid\":%u,\"cmdid\":3,\"err_code\":21,\"err_msg\":\"no message there\"}", askid);
    send_frame(ma, 4, ans, 50);
    assert_string_equal(answer_is(http_out(h), "HTTP/1.1 404 "),
                        "{\"error\":\"shard 1: no message there\"}");
    /* no answer by the deadline: 504 */
    http_post(h, path, "{\"reason\":\"r\"}", 60);
    take_invalidate(ma, "{\"topic\":\"orders\",\"offset\":5}");
    cq_mgr_tick(m, 60 + 9999);
    assert_string_equal(http_out(h), "");
    cq_mgr_tick(m, 60 + 10000);
    assert_non_null(strstr(answer_is(http_out(h), "HTTP/1.1 504 "),
                           "shard 1: the master did not answer in time"));
    /* no master for the shard: 503 at once, nothing sent */
    http_post(h, "/api/topics/orders/messages/2/5/invalidate", "{\"reason\":\"r\"}", 10070);
    assert_string_equal(answer_is(http_out(h), "HTTP/1.1 503 "),
                        "{\"error\":\"shard 2: no master reports to this manager now\"}");
    expect_none(ma);
    expect_none(sl);
    /* the master's connection goes while it is asked: 503 */
    send_frame(ma, 1, sync_body(11, 1, "srv", "{\"shard\":1,\"master\":true}"), 10080);
    drain(ma);
    http_post(h, path, "{\"reason\":\"r\"}", 10090);
    take_invalidate(ma, "{\"topic\":\"orders\",\"offset\":5}");
    close_conn(ma);
    assert_non_null(strstr(answer_is(http_out(h), "HTTP/1.1 503 "),
                           "shard 1: the master's connection closed before it answered"));
    cq_mgr_hconn_close(h);
    free(web);
    close_conn(sl);
    stop(m);
}

/* Takes the lookup command t was sent: its askid. */
static uint32_t take_lookup(tconn_t *t, const char *content)
{
    uint8_t type = 0;
    const char *f = next_frame(t, &type);
    assert_non_null(f);
    assert_int_equal(type, 3);
    unsigned askid = 0;
    char rest[256], want[256];
    assert_int_equal(sscanf(f, "{\"askid\":%u,%255s", &askid, rest), 2);
    snprintf(want, sizeof(want), "\"cmdid\":4,\"content\":%s}", content);
    assert_string_equal(rest, want);
    return askid;
}

static void http_get(cq_mgr_hconn_t *h, const char *path, uint64_t now)
{
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: m\r\nAuthorization: Bearer admin\r\n\r\n", path);
    assert_int_equal(cq_mgr_hconn_input(h, (const uint8_t *)req, (size_t)n, now), 0);
}

/* The lookup goes to the shard's standby (the master is not loaded), and its answer carries
 * the message as the server read it and, from the master's report, each consumer of the topic
 * with whether its committed offset is past the message (3 modules on either side of it). */
static void test_message_lookup(void **state)
{
    (void)state;
    cq_mgr_t *m = start();
    load_state(m, STATE, 1);
    tconn_t *ma = open_conn(m), *sl = open_conn(m), *web = calloc(1, sizeof(*web));
    send_frame(ma, 1,
               sync_body(11, 1, "srv",
                         "{\"shard\":1,\"master\":true,\"topics\":[{\"name\":\"orders\","
                         "\"last_offset\":9,\"consumers\":[{\"id\":\"m1\",\"offset\":4},"
                         "{\"id\":\"m2\",\"offset\":5},{\"id\":\"m3/a\",\"offset\":6}]}]}"),
               10);
    send_frame(sl, 1, sync_body(12, 1, "srv", "{\"shard\":1,\"master\":false}"), 10);
    drain(ma);
    drain(sl);
    cq_mgr_hconn_t *h = cq_mgr_hconn_new(m, &cops, web, "127.0.0.1");
    http_get(h, "/api/topics/orders/messages/1/5", 20);
    uint32_t askid = take_lookup(sl, "{\"topic\":\"orders\",\"offset\":5}");
    expect_none(ma); /* never the master while a standby reports */
    char ans[256];
    snprintf(ans, sizeof(ans),
             "{\"askid\":%u,\"cmdid\":4,\"err_code\":0,\"message\":{\"offset\":5,\"state\":0,"
             "\"producer_id\":42}}",
             askid);
    send_frame(sl, 4, ans, 30);
    assert_string_equal(
        answer_is(http_out(h), "HTTP/1.1 200 "),
        "{\"topic\":\"orders\",\"shard\":1,\"offset\":5,\"served_by\":12,\"role\":\"standby\","
        "\"message\":{\"offset\":5,\"state\":0,\"producer_id\":42},\"consumers\":[{\"id\":"
        "\"m1\",\"offset\":4,\"consumed\":false},{\"id\":\"m2\",\"offset\":5,\"consumed\":"
        "true},{\"id\":\"m3/a\",\"offset\":6,\"consumed\":true}]}");
    /* by producer key: the offset and the consumers' progress from the message found */
    http_get(h, "/api/topics/orders/messages/1?producer_id=42&seq=3", 35);
    askid = take_lookup(sl, "{\"topic\":\"orders\",\"producer_id\":42,\"seq\":3}");
    snprintf(ans, sizeof(ans),
             "{\"askid\":%u,\"cmdid\":4,\"err_code\":0,\"message\":{\"offset\":6,\"state\":1}}",
             askid);
    send_frame(sl, 4, ans, 36);
    assert_non_null(strstr(answer_is(http_out(h), "HTTP/1.1 200 "),
                           "\"offset\":6,\"served_by\":12,\"role\":\"standby\",\"message\":{"
                           "\"offset\":6,\"state\":1},\"consumers\":[{\"id\":\"m1\",\"offset\":4,"
                           "\"consumed\":false},{\"id\":\"m2\",\"offset\":5,\"consumed\":false},"
                           "{\"id\":\"m3/a\",\"offset\":6,\"consumed\":true}]}"));
    /* no standby: the master */
    close_conn(sl);
    http_get(h, "/api/topics/orders/messages/1/7", 40);
    askid = take_lookup(ma, "{\"topic\":\"orders\",\"offset\":7}");
    snprintf(ans, sizeof(ans),
             "{\"askid\":%u,\"cmdid\":4,\"err_code\":21,\"err_msg\":\"topic orders: no message "
             "at offset 7\"}",
             askid);
    send_frame(ma, 4, ans, 50);
    assert_string_equal(answer_is(http_out(h), "HTTP/1.1 404 "),
                        "{\"error\":\"shard 1: topic orders: no message at offset 7\"}");
    http_get(h, "/api/topics/orders/messages/4/7", 60);
    assert_string_equal(answer_is(http_out(h), "HTTP/1.1 503 "),
                        "{\"error\":\"shard 4: no server reports to this manager now\"}");
    cq_mgr_hconn_close(h);
    free(web);
    close_conn(ma);
    stop(m);
}

static void test_filestore(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_mgr_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/state.json", dir);
    void *fs = NULL;
    assert_int_equal(cq_mgrstore_file_new("", &fs), -EINVAL);
    assert_int_equal(cq_mgrstore_file_new(path, &fs), 0);
    const cq_mgrstore_ops_t *o = &cq_mgrstore_file_ops;
    char *json = NULL;
    size_t len = 0;
    int64_t ver = 0, nv = 0;
    assert_int_equal(o->load(fs, &json, &len, &ver), 0);
    assert_null(json);
    assert_int_equal(ver, -1);
    assert_int_equal(o->save(fs, "{}", 2, 0, &nv), CQ_ECONFLICT);
    assert_int_equal(o->save(fs, "{\"a\":1}", 7, -1, &nv), 0);
    assert_int_equal(nv, 0);
    assert_int_equal(o->save(fs, "{\"a\":2}", 7, 0, &nv), 0);
    assert_int_equal(nv, 1);
    assert_int_equal(o->load(fs, &json, &len, &ver), 0);
    assert_string_equal(json, "{\"a\":2}\n");
    assert_int_equal(ver, 0);
    cq_free(json);
    o->free(fs);
    o->free(NULL);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    json_set_alloc_funcs(cq_malloc, cq_free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_and_svrconfig),
        cmocka_unit_test(test_relay_nodes),
        cmocka_unit_test(test_topic_retention),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_changes_and_commands),
        cmocka_unit_test(test_bindings),
        cmocka_unit_test(test_bad_stored_state),
        cmocka_unit_test(test_view_rates_alerts),
        cmocka_unit_test(test_invalidate_command),
        cmocka_unit_test(test_message_lookup),
        cmocka_unit_test(test_filestore),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
