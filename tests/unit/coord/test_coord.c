/* test_coord.c - src/coord: the shard role machine with a manual clock and scripted events. Each
 * step asserts the exact actions queued (type, text, peer, epoch, version), rendered as one line
 * by acts(); plus may_ack/ack_until at the edges of the lease, and the text formats. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_coord.h"
#include "cq_err.h"
#include "test_alloc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define ADV_A "10.0.0.1:7000"
#define DB_A  "10.0.0.1:3306"
#define ADV_B "10.0.0.2:7000"
#define DB_B  "10.0.0.2:3306"
#define ADV_C "10.0.0.3:7000"
#define DB_C  "10.0.0.3:3306"
#define T0    1000 /* session 6000 ms: ping every 1000, lease = sent + 3000 */

static const char *type_name(cq_coord_act_type_t t)
{
    static const char *const names[] = {
        "?",        "JOIN",       "LIST",        "READ_EPOCH",   "SET_EPOCH",
        "PING",     "LEAVE",      "RECONNECT",   "ROLE",         "DB_PROBE",
        "DB_FENCE", "DB_PROMOTE", "DB_WRITABLE", "DB_READ_ONLY", "DB_FOLLOW",
    };
    return t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

/* Pops every queued action into one line: "JOIN(text) SET_EPOCH(e v text) ROLE(role e) ...". */
static const char *acts(cq_coord_t *co)
{
    static char out[2048];
    cq_coord_act_t a;
    size_t n = 0;
    out[0] = '\0';
    while (cq_coord_next_action(co, &a)) {
        const char *sep = n ? " " : "";
        switch (a.type) {
        case CQ_COORD_ACT_JOIN:
            n += snprintf(out + n, sizeof(out) - n, "%sJOIN(%s)", sep, a.text);
            break;
        case CQ_COORD_ACT_SET_EPOCH:
            n += snprintf(out + n, sizeof(out) - n, "%sSET_EPOCH(%" PRIu64 " v=%d %s)", sep,
                          a.epoch, (int)a.version, a.text);
            break;
        case CQ_COORD_ACT_ROLE:
            n += snprintf(out + n, sizeof(out) - n, "%sROLE(%s %" PRIu64 ")", sep,
                          cq_coord_role_name(a.role), a.epoch);
            break;
        case CQ_COORD_ACT_DB_FENCE:
        case CQ_COORD_ACT_DB_FOLLOW:
            n += snprintf(out + n, sizeof(out) - n, "%s%s(%s)", sep, type_name(a.type), a.peer);
            break;
        default:
            n += snprintf(out + n, sizeof(out) - n, "%s%s", sep, type_name(a.type));
            break;
        }
    }
    return out;
}

/* ---- events ------------------------------------------------------------------------------- */

static void session(cq_coord_t *co, int arg, uint64_t now)
{
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_SESSION, .arg = arg, .session_ms = 6000};
    cq_coord_event(co, &ev, now);
}

static void db(cq_coord_t *co, cq_coord_act_type_t what, int rc, bool replica, uint64_t now)
{
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_DB, .arg = what, .rc = rc, .db_replica = replica};
    cq_coord_event(co, &ev, now);
}

static void joined(cq_coord_t *co, int rc, uint64_t seq, uint64_t now)
{
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_JOINED, .rc = rc, .seq = seq};
    cq_coord_event(co, &ev, now);
}

static cq_coord_member_t mem(uint64_t seq, const char *adv, const char *dbaddr, bool elig)
{
    cq_coord_member_t m = {.seq = seq, .eligible = elig};
    snprintf(m.adv, sizeof(m.adv), "%s", adv);
    snprintf(m.db, sizeof(m.db), "%s", dbaddr);
    return m;
}

static void members(cq_coord_t *co, const cq_coord_member_t *m, size_t n, uint64_t now)
{
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_MEMBERS, .members = m, .nmembers = n};
    cq_coord_event(co, &ev, now);
}

static void simple(cq_coord_t *co, cq_coord_ev_type_t type, int rc, uint64_t now)
{
    cq_coord_ev_t ev = {.type = type, .rc = rc};
    cq_coord_event(co, &ev, now);
}

static void epoch(cq_coord_t *co, bool ping, int rc, uint64_t e, int32_t version, uint64_t owner,
                  const char *owner_db, uint64_t now)
{
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_EPOCH,
                        .is_ping = ping,
                        .rc = rc,
                        .epoch = e,
                        .version = version,
                        .owner_seq = owner};
    snprintf(ev.owner_db, sizeof(ev.owner_db), "%s", owner_db);
    cq_coord_event(co, &ev, now);
}

/* ---- fixtures ----------------------------------------------------------------------------- */

static cq_coord_t *mk(bool promote)
{
    cq_coord_opts_t o = {.shard = 1,
                         .adv = ADV_A,
                         .db = DB_A,
                         .session_ms = 6000,
                         .db_down_ms = 2000,
                         .db_probe_ms = 500,
                         .promote = promote};
    cq_coord_t *co = cq_coord_new(&o);
    assert_non_null(co);
    assert_string_equal(acts(co), "DB_PROBE");
    return co;
}

/* Probe (replica or not), connect, join as seq 5: the machine waits for the LIST. */
static cq_coord_t *mk_joined(bool promote, bool replica, const char *join)
{
    cq_coord_t *co = mk(promote);
    db(co, CQ_COORD_ACT_DB_PROBE, 0, replica, T0);
    assert_string_equal(acts(co), "");
    session(co, CQ_COORD_SESS_CONNECTED, T0);
    assert_string_equal(acts(co), join);
    joined(co, 0, 5, T0);
    assert_string_equal(acts(co), "LIST");
    assert_int_equal(cq_coord_role(co), CQ_COORD_DOWN);
    return co;
}

#define JOIN_A1 "JOIN(v1 adv=" ADV_A " db=" DB_A " elig=1)"
#define JOIN_A0 "JOIN(v1 adv=" ADV_A " db=" DB_A " elig=0)"

/* A master of a fresh shard (no epoch node) at T0: epoch 1, lease T0 + 3000. */
static cq_coord_t *mk_master(void)
{
    cq_coord_t *co = mk_joined(false, false, JOIN_A1);
    cq_coord_member_t m[2] = {mem(5, ADV_A, DB_A, true), mem(6, ADV_B, DB_B, false)};
    members(co, m, 2, T0);
    assert_string_equal(acts(co), "READ_EPOCH PING");
    assert_int_equal(cq_coord_role(co), CQ_COORD_ELECTED);
    epoch(co, false, -ENOENT, 0, -1, 0, "", T0);
    assert_string_equal(acts(co), "SET_EPOCH(1 v=-1 1 5 " DB_A ")");
    epoch(co, true, -ENOENT, 0, -1, 0, "", T0);
    assert_string_equal(acts(co), "");
    simple(co, CQ_COORD_EV_EPOCH_SET, 0, T0);
    assert_string_equal(acts(co), "DB_WRITABLE");
    assert_false(cq_coord_may_ack(co, T0)); /* not before the database is writable */
    db(co, CQ_COORD_ACT_DB_WRITABLE, 0, false, T0);
    assert_string_equal(acts(co), "ROLE(master 1)");
    assert_int_equal(cq_coord_role(co), CQ_COORD_MASTER);
    assert_int_equal(cq_coord_epoch(co), 1);
    assert_int_equal(cq_coord_ack_until(co), T0 + 3000);
    return co;
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_start_to_master(void **state)
{
    (void)state;
    cq_coord_t *co = mk_master();
    const cq_coord_member_t *m = cq_coord_master(co);
    assert_non_null(m);
    assert_int_equal(m->seq, 5);
    assert_string_equal(m->adv, ADV_A);
    assert_true(cq_coord_may_ack(co, T0));
    assert_true(cq_coord_may_ack(co, T0 + 2999));
    assert_false(cq_coord_may_ack(co, T0 + 3000));
    assert_int_equal(cq_coord_next_deadline(co), T0 + 500); /* the database probe */
    cq_coord_free(co);
    assert_null(cq_coord_free(NULL));
}

/* Heartbeats every session/6; each answer moves the lease to its send time + session/2. */
static void test_heartbeat_lease(void **state)
{
    (void)state;
    cq_coord_t *co = mk_master();
    cq_coord_tick(co, T0 + 500);
    assert_string_equal(acts(co), "DB_PROBE");
    db(co, CQ_COORD_ACT_DB_PROBE, 0, false, T0 + 500);
    assert_int_equal(cq_coord_next_deadline(co), T0 + 1000);
    cq_coord_tick(co, T0 + 1000);
    assert_string_equal(acts(co), "PING DB_PROBE");
    cq_coord_tick(co, T0 + 1100); /* one ping in flight at a time */
    assert_string_equal(acts(co), "");
    epoch(co, true, 0, 1, 0, 5, DB_A, T0 + 1200);
    assert_string_equal(acts(co), "");
    assert_int_equal(cq_coord_ack_until(co), T0 + 1000 + 3000);
    /* A late answer of an older ping never moves the lease backwards: the lease needs the
     * machine's own send record, so deliver the next ping's answer with a smaller sent_ms. */
    cq_coord_tick(co, T0 + 2000);
    assert_string_equal(acts(co), "PING");
    cq_coord_ev_t ev = {
        .type = CQ_COORD_EV_EPOCH, .is_ping = true, .epoch = 1, .owner_seq = 5, .sent_ms = 0};
    cq_coord_event(co, &ev, T0 + 2100);
    assert_int_equal(cq_coord_ack_until(co), T0 + 2000 + 3000);
    cq_coord_free(co);
}

/* Promotion: our database is a replica; the previous owner's database is fenced (its failure
 * ignored), then ours is promoted. */
static void test_promote_path(void **state)
{
    (void)state;
    cq_coord_t *co = mk_joined(true, true, JOIN_A1);
    cq_coord_member_t m[2] = {mem(5, ADV_A, DB_A, true), mem(7, ADV_B, DB_B, true)};
    members(co, m, 2, T0);
    assert_string_equal(acts(co), "READ_EPOCH PING");
    epoch(co, false, 0, 3, 7, 2, DB_B, T0);
    assert_string_equal(acts(co), "SET_EPOCH(4 v=7 4 5 " DB_A ")");
    simple(co, CQ_COORD_EV_EPOCH_SET, 0, T0);
    assert_string_equal(acts(co), "DB_FENCE(" DB_B ")");
    db(co, CQ_COORD_ACT_DB_FENCE, -EIO, false, T0);
    assert_string_equal(acts(co), "DB_PROMOTE");
    db(co, CQ_COORD_ACT_DB_PROMOTE, 0, false, T0);
    assert_string_equal(acts(co), "ROLE(master 4)");
    assert_false(cq_coord_may_ack(co, T0)); /* no heartbeat came back yet */
    epoch(co, true, 0, 4, 8, 5, DB_A, T0 + 10);
    assert_true(cq_coord_may_ack(co, T0 + 10));
    assert_int_equal(cq_coord_ack_until(co), T0 + 3000);
    cq_coord_free(co);
}

/* The previous owner was our own database: nothing to fence. */
static void test_same_db_no_fence(void **state)
{
    (void)state;
    cq_coord_t *co = mk_joined(false, false, JOIN_A1);
    cq_coord_member_t m[1] = {mem(5, ADV_A, DB_A, true)};
    members(co, m, 1, T0);
    assert_string_equal(acts(co), "READ_EPOCH PING");
    epoch(co, false, 0, 9, 3, 1, DB_A, T0);
    assert_string_equal(acts(co), "SET_EPOCH(10 v=3 10 5 " DB_A ")");
    simple(co, CQ_COORD_EV_EPOCH_SET, 0, T0);
    assert_string_equal(acts(co), "DB_WRITABLE");
    cq_coord_free(co);
}

/* Promote off and our database a replica: not eligible, a slave that does not follow. */
static void test_slave_not_eligible(void **state)
{
    (void)state;
    cq_coord_t *co = mk_joined(false, true, JOIN_A0);
    cq_coord_member_t m[2] = {mem(3, ADV_B, DB_B, true), mem(5, ADV_A, DB_A, false)};
    members(co, m, 2, T0);
    assert_string_equal(acts(co), "ROLE(slave 0) DB_READ_ONLY");
    assert_int_equal(cq_coord_role(co), CQ_COORD_SLAVE);
    assert_string_equal(cq_coord_master(co)->db, DB_B);
    /* The master leaves: nobody is eligible; we stay a slave, serving reads. */
    cq_coord_member_t m2[1] = {mem(5, ADV_A, DB_A, false)};
    simple(co, CQ_COORD_EV_MEMBERS_CHANGED, 0, T0 + 10);
    assert_string_equal(acts(co), "LIST");
    members(co, m2, 1, T0 + 10);
    assert_string_equal(acts(co), "");
    assert_null(cq_coord_master(co));
    assert_false(cq_coord_may_ack(co, T0 + 10));
    cq_coord_free(co);
}

/* Promote on: the slave follows the master's database, once per master. */
static void test_slave_follow(void **state)
{
    (void)state;
    cq_coord_t *co = mk_joined(true, true, JOIN_A1);
    cq_coord_member_t m[2] = {mem(3, ADV_B, DB_B, true), mem(5, ADV_A, DB_A, true)};
    members(co, m, 2, T0);
    assert_string_equal(acts(co), "ROLE(slave 0) DB_READ_ONLY DB_FOLLOW(" DB_B ")");
    db(co, CQ_COORD_ACT_DB_READ_ONLY, 0, false, T0);
    db(co, CQ_COORD_ACT_DB_FOLLOW, 0, false, T0);
    assert_string_equal(acts(co), "");
    simple(co, CQ_COORD_EV_MEMBERS_CHANGED, 0, T0 + 1);
    assert_string_equal(acts(co), "LIST");
    members(co, m, 2, T0 + 1); /* same master: no second follow, no second read_only */
    assert_string_equal(acts(co), "");
    /* B is gone, C (seq 4) is the master now. */
    cq_coord_member_t m2[2] = {mem(4, ADV_C, DB_C, true), mem(5, ADV_A, DB_A, true)};
    simple(co, CQ_COORD_EV_MEMBERS_CHANGED, 0, T0 + 2);
    assert_string_equal(acts(co), "LIST");
    members(co, m2, 2, T0 + 2);
    assert_string_equal(acts(co), "DB_FOLLOW(" DB_C ")");
    db(co, CQ_COORD_ACT_DB_FOLLOW, -EIO, false, T0 + 3); /* retried after the backoff */
    assert_string_equal(acts(co), "");
    assert_int_equal(cq_coord_next_deadline(co), T0 + 203);
    cq_coord_tick(co, T0 + 202);
    assert_string_equal(acts(co), "");
    cq_coord_tick(co, T0 + 203);
    assert_string_equal(acts(co), "DB_FOLLOW(" DB_C ")");
    cq_coord_free(co);
}

/* SET_EPOCH conflicts: read again and look again; the new list makes us a slave, and the
 * stale completions that arrive later change nothing. */
static void test_conflict_on_set_epoch(void **state)
{
    (void)state;
    cq_coord_t *co = mk_joined(true, false, JOIN_A1);
    cq_coord_member_t m[1] = {mem(5, ADV_A, DB_A, true)};
    members(co, m, 1, T0);
    assert_string_equal(acts(co), "READ_EPOCH PING");
    epoch(co, false, -ENOENT, 0, -1, 0, "", T0);
    assert_string_equal(acts(co), "SET_EPOCH(1 v=-1 1 5 " DB_A ")");
    simple(co, CQ_COORD_EV_EPOCH_SET, CQ_ECONFLICT, T0);
    assert_string_equal(acts(co), "LIST READ_EPOCH");
    epoch(co, false, 0, 1, 0, 4, DB_B, T0);
    assert_string_equal(acts(co), "SET_EPOCH(2 v=0 2 5 " DB_A ")");
    cq_coord_member_t m2[2] = {mem(4, ADV_B, DB_B, true), mem(5, ADV_A, DB_A, true)};
    members(co, m2, 2, T0);
    assert_string_equal(acts(co), "ROLE(slave 1) DB_READ_ONLY DB_FOLLOW(" DB_B ")");
    /* B goes away before our stale SET_EPOCH answers: elected again, but no second SET_EPOCH
     * while the first is in flight. */
    simple(co, CQ_COORD_EV_MEMBERS_CHANGED, 0, T0 + 1);
    assert_string_equal(acts(co), "LIST");
    members(co, m, 1, T0 + 1);
    assert_string_equal(acts(co), "READ_EPOCH");
    epoch(co, false, 0, 2, 1, 5, DB_A, T0 + 1);
    assert_string_equal(acts(co), "");            /* SET_EPOCH still in flight */
    simple(co, CQ_COORD_EV_EPOCH_SET, 0, T0 + 2); /* the stale one: ignored */
    assert_string_equal(acts(co), "SET_EPOCH(3 v=1 3 5 " DB_A ")");
    assert_int_equal(cq_coord_role(co), CQ_COORD_ELECTED);
    cq_coord_free(co);
}

/* A SET_EPOCH with an unknown outcome (connection loss): read again after the backoff. */
static void test_set_epoch_error_rereads(void **state)
{
    (void)state;
    cq_coord_t *co = mk_joined(false, false, JOIN_A1);
    cq_coord_member_t m[1] = {mem(5, ADV_A, DB_A, true)};
    members(co, m, 1, T0);
    assert_string_equal(acts(co), "READ_EPOCH PING");
    epoch(co, false, -ENOENT, 0, -1, 0, "", T0);
    assert_string_equal(acts(co), "SET_EPOCH(1 v=-1 1 5 " DB_A ")");
    simple(co, CQ_COORD_EV_EPOCH_SET, -EIO, T0);
    assert_string_equal(acts(co), "");
    cq_coord_tick(co, T0 + 200);
    assert_string_equal(acts(co), "READ_EPOCH");
    cq_coord_free(co);
}

/* CONNECTING ends may_ack at once; the role stays; a reconnect within the session re-lists
 * and pings, and the lease (still valid) holds again. */
static void test_connecting_drops_may_ack(void **state)
{
    (void)state;
    cq_coord_t *co = mk_master();
    assert_true(cq_coord_may_ack(co, T0 + 100));
    session(co, CQ_COORD_SESS_CONNECTING, T0 + 100);
    assert_string_equal(acts(co), "");
    assert_false(cq_coord_may_ack(co, T0 + 100));
    assert_int_equal(cq_coord_ack_until(co), 0);
    assert_int_equal(cq_coord_role(co), CQ_COORD_MASTER);
    cq_coord_tick(co, T0 + 1000); /* no heartbeat while disconnected */
    assert_string_equal(acts(co), "DB_PROBE");
    cq_coord_ev_t ev = {
        .type = CQ_COORD_EV_SESSION, .arg = CQ_COORD_SESS_CONNECTED, .session_ms = 2000};
    cq_coord_event(co, &ev, T0 + 1100);
    assert_string_equal(acts(co), "LIST PING");
    assert_true(cq_coord_may_ack(co, T0 + 1100));
    assert_int_equal(cq_coord_ack_until(co), T0 + 3000);
    /* An answer whose lease (sent + 1000) is shorter does not move it backwards. */
    epoch(co, true, 0, 1, 0, 5, DB_A, T0 + 1150);
    assert_int_equal(cq_coord_ack_until(co), T0 + 3000);
    cq_coord_free(co);
}

/* A frozen master: past its lease, may_ack is false before any event is processed; the
 * heartbeat that finally answers was sent long ago and grants nothing. */
static void test_lease_expiry_frozen(void **state)
{
    (void)state;
    cq_coord_t *co = mk_master();
    cq_coord_tick(co, T0 + 1000);
    assert_string_equal(acts(co), "PING DB_PROBE");
    assert_true(cq_coord_may_ack(co, T0 + 2999));
    assert_false(cq_coord_may_ack(co, T0 + 3000)); /* the clock jumped: no event needed */
    epoch(co, true, 0, 1, 0, 5, DB_A, T0 + 30000);
    assert_false(cq_coord_may_ack(co, T0 + 30000));
    assert_int_equal(cq_coord_ack_until(co), T0 + 1000 + 3000);
    cq_coord_free(co);
}

/* After a long pause, a stale MEMBERS (we are still the lowest) does not re-grant may_ack. */
static void test_stale_members_after_pause(void **state)
{
    (void)state;
    cq_coord_t *co = mk_master();
    uint64_t now = T0 + 60000;
    simple(co, CQ_COORD_EV_MEMBERS_CHANGED, 0, now);
    assert_string_equal(acts(co), "LIST PING DB_PROBE");
    cq_coord_member_t m[1] = {mem(5, ADV_A, DB_A, true)};
    members(co, m, 1, now);
    assert_string_equal(acts(co), "");
    assert_int_equal(cq_coord_role(co), CQ_COORD_MASTER);
    assert_false(cq_coord_may_ack(co, now));
    epoch(co, true, 0, 1, 0, 5, DB_A, now + 5); /* a fresh heartbeat: the lease again */
    assert_true(cq_coord_may_ack(co, now + 5));
    assert_int_equal(cq_coord_ack_until(co), now + 3000);
    cq_coord_free(co);
}

/* An expiry that races a late write: the engine checks ack_until against its own clock after
 * the jump; then EXPIRED takes the role and zeroes it. */
static void test_expiry_races_late_write(void **state)
{
    (void)state;
    cq_coord_t *co = mk_master();
    uint64_t until = cq_coord_ack_until(co);
    assert_true(until > T0 + 2999);  /* a write checked just before the lease ends: acked */
    assert_false(until > T0 + 3000); /* the same write checked after the jump: refused */
    session(co, CQ_COORD_SESS_EXPIRED, T0 + 3001);
    assert_string_equal(acts(co), "ROLE(down 1) DB_READ_ONLY RECONNECT");
    db(co, CQ_COORD_ACT_DB_READ_ONLY, 0, false, T0 + 3001);
    assert_int_equal(cq_coord_ack_until(co), 0);
    assert_int_equal(cq_coord_role(co), CQ_COORD_DOWN);
    /* The old session's answers are ignored. */
    epoch(co, true, 0, 1, 0, 5, DB_A, T0 + 3002);
    assert_int_equal(cq_coord_ack_until(co), 0);
    session(co, CQ_COORD_SESS_CONNECTED, T0 + 4000);
    assert_string_equal(acts(co), "JOIN(v1 adv=" ADV_A " db=" DB_A " elig=1)");
    joined(co, 0, 9, T0 + 4000);
    assert_string_equal(acts(co), "LIST");
    cq_coord_member_t m[2] = {mem(6, ADV_B, DB_B, true), mem(9, ADV_A, DB_A, true)};
    members(co, m, 2, T0 + 4000);
    assert_string_equal(acts(co), "ROLE(slave 1) DB_READ_ONLY");
    cq_coord_free(co);
}

/* The heartbeat sees a newer epoch: fenced at once (slave, read_only, list again). */
static void test_newer_epoch_fences(void **state)
{
    (void)state;
    cq_coord_t *co = mk_master();
    cq_coord_tick(co, T0 + 1000);
    assert_string_equal(acts(co), "PING DB_PROBE");
    epoch(co, true, 0, 0, 0, 1, DB_B, T0 + 1001); /* an older epoch: ordered before our write */
    assert_string_equal(acts(co), "");
    assert_true(cq_coord_may_ack(co, T0 + 1001));
    cq_coord_tick(co, T0 + 2000);
    assert_string_equal(acts(co), "PING");
    epoch(co, true, 0, 2, 1, 6, DB_B, T0 + 2001);
    assert_string_equal(acts(co), "ROLE(slave 2) DB_READ_ONLY LIST");
    assert_false(cq_coord_may_ack(co, T0 + 2001));
    assert_int_equal(cq_coord_role(co), CQ_COORD_SLAVE);
    assert_int_equal(cq_coord_epoch(co), 2);
    cq_coord_free(co);
}

/* Our epoch number but another owner, or the epoch node gone: fenced too. */
static void test_same_epoch_other_owner_fences(void **state)
{
    (void)state;
    cq_coord_t *co = mk_master();
    cq_coord_tick(co, T0 + 1000);
    assert_string_equal(acts(co), "PING DB_PROBE");
    epoch(co, true, 0, 1, 1, 6, DB_B, T0 + 1001);
    assert_string_equal(acts(co), "ROLE(slave 1) DB_READ_ONLY LIST");
    cq_coord_free(co);

    co = mk_master();
    cq_coord_tick(co, T0 + 1000);
    assert_string_equal(acts(co), "PING DB_PROBE");
    epoch(co, true, -ENOENT, 0, -1, 0, "", T0 + 1001);
    assert_string_equal(acts(co), "ROLE(slave 1) DB_READ_ONLY LIST");
    cq_coord_free(co);
}

/* The master's database is unreachable for db_down_ms: LEAVE; back once the database answers,
 * with a higher seq: a slave. */
static void test_db_down_leave_rejoin(void **state)
{
    (void)state;
    cq_coord_t *co = mk_master();
    cq_coord_tick(co, T0 + 500);
    assert_string_equal(acts(co), "DB_PROBE");
    db(co, CQ_COORD_ACT_DB_PROBE, -EIO, false, T0 + 510); /* down since T0 + 500 */
    cq_coord_tick(co, T0 + 1000);
    assert_string_equal(acts(co), "PING");
    epoch(co, true, 0, 1, 0, 5, DB_A, T0 + 1001);
    cq_coord_tick(co, T0 + 1010);
    assert_string_equal(acts(co), "DB_PROBE");
    db(co, CQ_COORD_ACT_DB_PROBE, -EIO, false, T0 + 1020);
    assert_int_equal(cq_coord_next_deadline(co), T0 + 1520);
    cq_coord_tick(co, T0 + 1520);
    assert_string_equal(acts(co), "DB_PROBE");
    db(co, CQ_COORD_ACT_DB_PROBE, -EIO, false, T0 + 2000);
    assert_string_equal(acts(co), "PING");
    epoch(co, true, 0, 1, 0, 5, DB_A, T0 + 2001);
    assert_int_equal(cq_coord_next_deadline(co), T0 + 2500); /* the down deadline */
    assert_true(cq_coord_may_ack(co, T0 + 2499));
    cq_coord_tick(co, T0 + 2500);
    assert_string_equal(acts(co), "ROLE(down 1) LEAVE");
    assert_false(cq_coord_may_ack(co, T0 + 2500));
    assert_int_equal(cq_coord_role(co), CQ_COORD_DOWN);
    simple(co, CQ_COORD_EV_LEFT, 0, T0 + 2600);
    assert_string_equal(acts(co), "DB_PROBE"); /* the periodic probe was due */
    db(co, CQ_COORD_ACT_DB_PROBE, -EIO, false, T0 + 2610);
    assert_string_equal(acts(co), "");
    cq_coord_tick(co, T0 + 3110);
    assert_string_equal(acts(co), "DB_PROBE");
    db(co, CQ_COORD_ACT_DB_PROBE, 0, false, T0 + 3120);
    assert_string_equal(acts(co), JOIN_A1);
    joined(co, 0, 9, T0 + 3120);
    assert_string_equal(acts(co), "LIST");
    cq_coord_member_t m[2] = {mem(6, ADV_B, DB_B, true), mem(9, ADV_A, DB_A, true)};
    members(co, m, 2, T0 + 3120);
    assert_string_equal(acts(co), "ROLE(slave 1) DB_READ_ONLY");
    cq_coord_free(co);
}

/* A probe that answers resets the down clock. */
static void test_db_flap_keeps_role(void **state)
{
    (void)state;
    cq_coord_t *co = mk_master();
    cq_coord_tick(co, T0 + 500);
    assert_string_equal(acts(co), "DB_PROBE");
    db(co, CQ_COORD_ACT_DB_PROBE, -EIO, false, T0 + 500);
    cq_coord_tick(co, T0 + 1000);
    assert_string_equal(acts(co), "PING DB_PROBE");
    db(co, CQ_COORD_ACT_DB_PROBE, 0, false, T0 + 1000);
    assert_int_equal(cq_coord_next_deadline(co), T0 + 1500);
    cq_coord_tick(co, T0 + 2500);
    assert_string_equal(acts(co), "DB_PROBE");
    assert_int_equal(cq_coord_role(co), CQ_COORD_MASTER);
    cq_coord_free(co);
}

/* DB_WRITABLE fails: stay ELECTED and retry; a list that makes us a slave ends it, and the
 * late completion of the old attempt changes nothing. */
static void test_db_action_retry_then_slave(void **state)
{
    (void)state;
    cq_coord_t *co = mk_joined(false, false, JOIN_A1);
    cq_coord_member_t m[1] = {mem(5, ADV_A, DB_A, true)};
    members(co, m, 1, T0);
    assert_string_equal(acts(co), "READ_EPOCH PING");
    epoch(co, false, -ENOENT, 0, -1, 0, "", T0);
    assert_string_equal(acts(co), "SET_EPOCH(1 v=-1 1 5 " DB_A ")");
    simple(co, CQ_COORD_EV_EPOCH_SET, 0, T0);
    assert_string_equal(acts(co), "DB_WRITABLE");
    db(co, CQ_COORD_ACT_DB_WRITABLE, -EIO, false, T0 + 1);
    assert_string_equal(acts(co), "");
    cq_coord_tick(co, T0 + 201);
    assert_string_equal(acts(co), "DB_WRITABLE");
    simple(co, CQ_COORD_EV_MEMBERS_CHANGED, 0, T0 + 202);
    assert_string_equal(acts(co), "LIST");
    cq_coord_member_t m2[2] = {mem(4, ADV_B, DB_B, true), mem(5, ADV_A, DB_A, true)};
    members(co, m2, 2, T0 + 202);
    assert_string_equal(acts(co), "ROLE(slave 1) DB_READ_ONLY");
    db(co, CQ_COORD_ACT_DB_WRITABLE, 0, false, T0 + 203); /* stale */
    assert_string_equal(acts(co), "");
    assert_int_equal(cq_coord_role(co), CQ_COORD_SLAVE);
    assert_false(cq_coord_may_ack(co, T0 + 203));
    cq_coord_free(co);
}

/* The first probe fails: probe again every db_probe_ms, no JOIN even when connected. */
static void test_start_db_unreachable(void **state)
{
    (void)state;
    cq_coord_t *co = mk(false);
    session(co, CQ_COORD_SESS_CONNECTED, T0);
    assert_string_equal(acts(co), "");
    db(co, CQ_COORD_ACT_DB_PROBE, -ECONNREFUSED, false, T0);
    assert_string_equal(acts(co), "");
    assert_int_equal(cq_coord_next_deadline(co), T0 + 500);
    cq_coord_tick(co, T0 + 499);
    assert_string_equal(acts(co), "");
    cq_coord_tick(co, T0 + 500);
    assert_string_equal(acts(co), "DB_PROBE");
    db(co, CQ_COORD_ACT_DB_PROBE, 0, false, T0 + 501);
    assert_string_equal(acts(co), JOIN_A1);
    /* JOIN fails: retried after the backoff. */
    joined(co, -EIO, 0, T0 + 502);
    assert_string_equal(acts(co), "");
    cq_coord_tick(co, T0 + 702);
    assert_string_equal(acts(co), JOIN_A1);
    cq_coord_free(co);
}

/* EXPIRED before we joined: just RECONNECT; stray completions are ignored. */
static void test_expired_before_join_and_strays(void **state)
{
    (void)state;
    cq_coord_t *co = mk(false);
    session(co, CQ_COORD_SESS_EXPIRED, T0);
    assert_string_equal(acts(co), "RECONNECT");
    joined(co, 0, 3, T0);
    simple(co, CQ_COORD_EV_EPOCH_SET, 0, T0);
    simple(co, CQ_COORD_EV_LEFT, 0, T0);
    db(co, CQ_COORD_ACT_DB_PROMOTE, 0, false, T0);
    assert_string_equal(acts(co), "");
    assert_int_equal(cq_coord_role(co), CQ_COORD_DOWN);
    cq_coord_free(co);
}

/* EXPIRED while JOIN is in flight: its late answer (the old session's node) is ignored, and
 * the new JOIN waits for it: never two JOINs in flight. */
static void test_expired_while_joining(void **state)
{
    (void)state;
    cq_coord_t *co = mk(false);
    db(co, CQ_COORD_ACT_DB_PROBE, 0, false, T0);
    session(co, CQ_COORD_SESS_CONNECTED, T0);
    assert_string_equal(acts(co), JOIN_A1);
    session(co, CQ_COORD_SESS_EXPIRED, T0 + 1);
    assert_string_equal(acts(co), "RECONNECT");
    session(co, CQ_COORD_SESS_CONNECTED, T0 + 2);
    assert_string_equal(acts(co), "");
    joined(co, 0, 3, T0 + 3);
    assert_string_equal(acts(co), JOIN_A1);
    joined(co, 0, 4, T0 + 4);
    assert_string_equal(acts(co), "LIST");
    cq_coord_member_t m[1] = {mem(4, ADV_A, DB_A, true)};
    members(co, m, 1, T0 + 4);
    assert_string_equal(acts(co), "READ_EPOCH PING");
    epoch(co, false, -ENOENT, 0, -1, 0, "", T0 + 4);
    assert_string_equal(acts(co), "SET_EPOCH(1 v=-1 1 4 " DB_A ")");
    cq_coord_free(co);
}

/* Our node missing from the list (deleted under us): DOWN, read_only, JOIN again. A node with
 * our addresses and another seq stands for us. */
static void test_node_missing_and_orphan(void **state)
{
    (void)state;
    cq_coord_t *co = mk_joined(false, false, JOIN_A1);
    cq_coord_member_t m[2] = {mem(3, ADV_B, DB_B, true), mem(5, ADV_A, DB_A, true)};
    members(co, m, 2, T0);
    assert_string_equal(acts(co), "ROLE(slave 0) DB_READ_ONLY");
    simple(co, CQ_COORD_EV_MEMBERS_CHANGED, 0, T0);
    assert_string_equal(acts(co), "LIST");
    members(co, m, 1, T0); /* read_only is still in flight: not asked twice */
    assert_string_equal(acts(co), "ROLE(down 0) JOIN(v1 adv=" ADV_A " db=" DB_A " elig=1)");
    joined(co, 0, 8, T0);
    assert_string_equal(acts(co), "LIST");
    cq_coord_member_t m2[2] = {mem(5, ADV_A, DB_A, true), mem(8, ADV_A, DB_A, true)};
    members(co, m2, 2, T0);
    assert_string_equal(acts(co), "READ_EPOCH PING");
    cq_coord_free(co);
}

/* LIST fails: retried after the backoff. A change during a LIST lists again after it. */
static void test_list_retry_and_change(void **state)
{
    (void)state;
    cq_coord_t *co = mk_joined(false, false, JOIN_A1);
    simple(co, CQ_COORD_EV_MEMBERS_CHANGED, 0, T0);
    assert_string_equal(acts(co), "");
    simple(co, CQ_COORD_EV_MEMBERS, -EIO, T0);
    assert_string_equal(acts(co), "");
    cq_coord_tick(co, T0 + 200);
    assert_string_equal(acts(co), "LIST");
    simple(co, CQ_COORD_EV_MEMBERS_CHANGED, 0, T0 + 201); /* during the LIST */
    assert_string_equal(acts(co), "");
    cq_coord_member_t m[2] = {mem(3, ADV_B, DB_B, true), mem(5, ADV_A, DB_A, true)};
    members(co, m, 2, T0 + 202);
    assert_string_equal(acts(co), "ROLE(slave 0) DB_READ_ONLY LIST");
    cq_coord_free(co);
}

static void test_new_rejects(void **state)
{
    (void)state;
    cq_coord_opts_t o = {.adv = ADV_A, .db = "nohost"};
    assert_null(cq_coord_new(&o));
    o.db = DB_A;
    o.adv = NULL;
    assert_null(cq_coord_new(&o));
    o.adv = "h:0";
    assert_null(cq_coord_new(&o));
}

/* Fail-N: the one allocation of cq_coord_new fails cleanly, with nothing leaked. */
static void test_new_oom(void **state)
{
    (void)state;
    cq_coord_opts_t o = {.adv = ADV_A, .db = DB_A};
    for (unsigned long n = 1;; n++) {
        test_alloc_install(n, true);
        cq_coord_t *co = cq_coord_new(&o);
        bool ok = co != NULL;
        if (co) {
            cq_coord_act_t a;
            assert_true(cq_coord_next_action(co, &a));
            assert_int_equal(a.type, CQ_COORD_ACT_DB_PROBE);
        }
        cq_coord_free(co);
        if (test_alloc_round_end(ok))
            break;
    }
}

static void test_member_text(void **state)
{
    (void)state;
    cq_coord_member_t m = mem(0, "chanq-1.local:7000", "[::1]:3306", true), r;
    char buf[300];
    assert_int_equal(cq_coord_member_format(&m, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "v1 adv=chanq-1.local:7000 db=[::1]:3306 elig=1");
    memset(&r, 0xff, sizeof(r));
    assert_int_equal(cq_coord_member_parse(buf, strlen(buf), &r), 0);
    assert_int_equal(r.seq, 0);
    assert_string_equal(r.adv, m.adv);
    assert_string_equal(r.db, m.db);
    assert_true(r.eligible);
    assert_int_equal(cq_coord_member_parse("v1 adv=a:1 db=b:65535 elig=0", 28, &r), 0);
    assert_false(r.eligible);
    assert_string_equal(r.db, "b:65535");
    assert_int_equal(cq_coord_member_format(&m, buf, 20), -ENOSPC);
    m.db[0] = '\0';
    assert_int_equal(cq_coord_member_format(&m, buf, sizeof(buf)), CQ_EFIELD);

    static const char *const bad[] = {
        "",
        "v2 adv=a:1 db=b:2 elig=1",
        "v1 adv=a:1 db=b:2 elig=2",
        "v1 adv=a:1 db=b:2 elig=1 ",
        " v1 adv=a:1 db=b:2 elig=1",
        "v1  adv=a:1 db=b:2 elig=1",
        "v1 adv=a:1 db=b:2",
        "v1 adv=a:1 db=b:2 elig=1 x=1",
        "v1 db=b:2 adv=a:1 elig=1",
        "v1 adv=a:0 db=b:2 elig=1",
        "v1 adv=a:65536 db=b:2 elig=1",
        "v1 adv=a:01 db=b:2 elig=1",
        "v1 adv=a:1x db=b:2 elig=1",
        "v1 adv=:1 db=b:2 elig=1",
        "v1 adv=a db=b:2 elig=1",
        "v1 adv=a: db=b:2 elig=1",
        "v1 adv=a:1 db=b/c:2 elig=1",
        "v1 adv=a:1 db=b:2 elig=10",
        "v1 adv=a:-1 db=b:2 elig=1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r.eligible = true;
        if (cq_coord_member_parse(bad[i], strlen(bad[i]), &r) != CQ_EFIELD)
            fail_msg("accepted: '%s'", bad[i]);
    }
    /* A NUL inside, and a length that cuts the text. */
    assert_int_equal(cq_coord_member_parse("v1 adv=a:1\0db=b:2 elig=1", 24, &r), CQ_EFIELD);
    assert_int_equal(cq_coord_member_parse("v1 adv=a:1 db=b:2 elig=1", 23, &r), CQ_EFIELD);
    /* The address bound: CQ_COORD_ADDR_MAX characters pass, one more does not. */
    char host[CQ_COORD_ADDR_MAX + 2], text[400];
    memset(host, 'h', sizeof(host));
    host[CQ_COORD_ADDR_MAX - 2] = '\0'; /* + ":1" = ADDR_MAX */
    snprintf(text, sizeof(text), "v1 adv=%s:1 db=b:2 elig=1", host);
    assert_int_equal(cq_coord_member_parse(text, strlen(text), &r), 0);
    assert_int_equal(strlen(r.adv), CQ_COORD_ADDR_MAX);
    host[CQ_COORD_ADDR_MAX - 2] = 'h';
    host[CQ_COORD_ADDR_MAX - 1] = '\0';
    snprintf(text, sizeof(text), "v1 adv=%s:1 db=b:2 elig=1", host);
    assert_int_equal(cq_coord_member_parse(text, strlen(text), &r), CQ_EFIELD);
}

static void test_epoch_text(void **state)
{
    (void)state;
    char buf[200], dbaddr[CQ_COORD_ADDR_MAX + 1];
    uint64_t e = 7, s = 7;
    assert_int_equal(cq_coord_epoch_format(18446744073709551615u, 0, DB_A, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "18446744073709551615 0 " DB_A);
    assert_int_equal(cq_coord_epoch_parse(buf, strlen(buf), &e, &s, dbaddr, sizeof(dbaddr)), 0);
    assert_true(e == 18446744073709551615u);
    assert_int_equal(s, 0);
    assert_string_equal(dbaddr, DB_A);
    assert_int_equal(cq_coord_epoch_format(1, 2, "bad", buf, sizeof(buf)), CQ_EFIELD);
    assert_int_equal(cq_coord_epoch_format(1, 2, DB_A, buf, 5), -ENOSPC);
    static const char *const bad[] = {
        "",         "1 2",      "1 2 h:1 x",   "18446744073709551616 2 h:1",
        "01 2 h:1", "1 -2 h:1", "1 2 h:99999", "1  2 h:1",
        "1 2 h:1 ", "a 2 h:1",  "1 2 h",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        e = s = 42;
        if (cq_coord_epoch_parse(bad[i], strlen(bad[i]), &e, &s, dbaddr, sizeof(dbaddr)) !=
            CQ_EFIELD)
            fail_msg("accepted: '%s'", bad[i]);
        assert_int_equal(e, 42); /* not written on failure */
    }
    /* db does not fit the caller's buffer */
    assert_int_equal(cq_coord_epoch_parse("1 2 hh:1", 8, &e, &s, dbaddr, 4), CQ_EFIELD);
    assert_int_equal(cq_coord_epoch_parse("1 2 hh:1", 8, &e, &s, dbaddr, 5), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_to_master),
        cmocka_unit_test(test_heartbeat_lease),
        cmocka_unit_test(test_promote_path),
        cmocka_unit_test(test_same_db_no_fence),
        cmocka_unit_test(test_slave_not_eligible),
        cmocka_unit_test(test_slave_follow),
        cmocka_unit_test(test_conflict_on_set_epoch),
        cmocka_unit_test(test_set_epoch_error_rereads),
        cmocka_unit_test(test_connecting_drops_may_ack),
        cmocka_unit_test(test_lease_expiry_frozen),
        cmocka_unit_test(test_stale_members_after_pause),
        cmocka_unit_test(test_expiry_races_late_write),
        cmocka_unit_test(test_newer_epoch_fences),
        cmocka_unit_test(test_same_epoch_other_owner_fences),
        cmocka_unit_test(test_db_down_leave_rejoin),
        cmocka_unit_test(test_db_flap_keeps_role),
        cmocka_unit_test(test_db_action_retry_then_slave),
        cmocka_unit_test(test_start_db_unreachable),
        cmocka_unit_test(test_expired_before_join_and_strays),
        cmocka_unit_test(test_expired_while_joining),
        cmocka_unit_test(test_node_missing_and_orphan),
        cmocka_unit_test(test_list_retry_and_change),
        cmocka_unit_test(test_new_rejects),
        cmocka_unit_test(test_new_oom),
        cmocka_unit_test(test_member_text),
        cmocka_unit_test(test_epoch_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
