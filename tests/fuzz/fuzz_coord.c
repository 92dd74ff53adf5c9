/* fuzz_coord.c - the shard role machine (src/coord) driven by a fake runtime: the input is a
 * sequence of steps (advance the clock and tick, complete an outstanding action with a chosen
 * result, session changes, member changes, stray completions). The fake keeps a small model of
 * the epoch node (compare-and-set by version) and completes every action exactly once, as the
 * runtime's contract says. Invariants after every step:
 *   - never two actions of one kind in flight (so never two SET_EPOCH);
 *   - may_ack(t) implies MASTER, the engine told MASTER, a connected session, an epoch write and
 *     a database made writable since the last expiry, and t < ack_until;
 *   - ack_until never exceeds what the answered heartbeats justify (issue time + session / 2).
 * The raw input also goes through the member and epoch text parsers. */
#include "fuzz_common.h"

#include "cq_coord.h"
#include "cq_err.h"

#include <errno.h>
#include <string.h>

#define ADV_A  "10.0.0.1:7000"
#define DB_A   "10.0.0.1:3306"
#define OUTMAX 64

typedef struct fake {
    cq_coord_t *co;
    uint64_t now;
    const uint8_t *p, *end;
    /* Outstanding actions, with the now at which they were queued. */
    cq_coord_act_t out[OUTMAX];
    uint64_t out_at[OUTMAX];
    size_t nout;
    /* The world. */
    bool connected;
    uint32_t session_ms;
    uint64_t next_seq, my_seq;
    bool my_elig;
    uint64_t zk_epoch, zk_owner;
    int32_t zk_version; /* -1: no node */
    char zk_db[CQ_COORD_ADDR_MAX + 1];
    /* What the machine earned since the last expiry. */
    cq_coord_role_t told;
    bool epoch_written, db_writable;
    uint64_t lease_max;
} fake_t;

static uint8_t byte(fake_t *f)
{
    return f->p < f->end ? *f->p++ : 0;
}

/* ---- taking the actions ------------------------------------------------------------------- */

static void take(fake_t *f)
{
    cq_coord_act_t a;
    while (cq_coord_next_action(f->co, &a)) {
        if (a.type == CQ_COORD_ACT_ROLE) {
            f->told = a.role;
            continue;
        }
        if (a.type == CQ_COORD_ACT_RECONNECT)
            continue;
        for (size_t i = 0; i < f->nout; i++)
            FUZZ_CHECK(f->out[i].type != a.type); /* never two of a kind in flight */
        FUZZ_CHECK(f->nout < OUTMAX);
        if (a.type == CQ_COORD_ACT_JOIN) {
            cq_coord_member_t m;
            FUZZ_CHECK(cq_coord_member_parse(a.text, strlen(a.text), &m) == 0);
            f->my_elig = m.eligible;
        }
        f->out[f->nout] = a;
        f->out_at[f->nout++] = f->now;
    }
}

static void check(fake_t *f)
{
    static const uint64_t offs[] = {0, 1, 100, 1000, 100000};
    uint64_t until = cq_coord_ack_until(f->co);
    FUZZ_CHECK(until <= f->lease_max);
    for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
        uint64_t t = f->now + offs[i];
        if (!cq_coord_may_ack(f->co, t))
            continue;
        FUZZ_CHECK(cq_coord_role(f->co) == CQ_COORD_MASTER);
        FUZZ_CHECK(f->told == CQ_COORD_MASTER);
        FUZZ_CHECK(f->connected);
        FUZZ_CHECK(f->epoch_written && f->db_writable);
        FUZZ_CHECK(t < until);
    }
}

static void event(fake_t *f, cq_coord_ev_t *ev)
{
    cq_coord_event(f->co, ev, f->now);
    take(f);
    check(f);
}

/* ---- completions -------------------------------------------------------------------------- */

static void members_from_bytes(fake_t *f, cq_coord_ev_t *ev, cq_coord_member_t *m)
{
    static const char *const advs[] = {ADV_A, "10.0.0.2:7000", "10.0.0.3:7000"};
    static const char *const dbs[] = {DB_A, "10.0.0.2:3306", "10.0.0.3:3306"};
    size_t n = byte(f) % 5;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = byte(f);
        m[i] = (cq_coord_member_t){.eligible = b & 1};
        m[i].seq = (b & 2) ? f->my_seq : (b >> 4);
        snprintf(m[i].adv, sizeof(m[i].adv), "%s", advs[(b >> 2) % 3]);
        snprintf(m[i].db, sizeof(m[i].db), "%s", dbs[(b >> 2) % 3]);
    }
    ev->members = m;
    ev->nmembers = n;
}

/* The epoch node as the model has it (or random values when wild). */
static void epoch_answer(fake_t *f, cq_coord_ev_t *ev, bool wild)
{
    ev->type = CQ_COORD_EV_EPOCH;
    if (wild) {
        uint8_t b = byte(f);
        ev->epoch = b & 7;
        ev->owner_seq = b >> 3;
        ev->version = (int32_t)(byte(f) & 7);
        snprintf(ev->owner_db, sizeof(ev->owner_db), "%s", (b & 1) ? DB_A : "10.0.0.2:3306");
        return;
    }
    if (f->zk_version < 0) {
        ev->rc = -ENOENT;
        ev->version = -1;
        return;
    }
    ev->epoch = f->zk_epoch;
    ev->version = f->zk_version;
    ev->owner_seq = f->zk_owner;
    snprintf(ev->owner_db, sizeof(ev->owner_db), "%s", f->zk_db);
}

static void set_epoch(fake_t *f, const cq_coord_act_t *a, cq_coord_ev_t *ev)
{
    char db[CQ_COORD_ADDR_MAX + 1];
    uint64_t e, seq;
    ev->type = CQ_COORD_EV_EPOCH_SET;
    if (a->version != f->zk_version) {
        ev->rc = CQ_ECONFLICT;
        return;
    }
    FUZZ_CHECK(cq_coord_epoch_parse(a->text, strlen(a->text), &e, &seq, db, sizeof(db)) == 0);
    /* Not e == zk_epoch + 1: a wild read may have fed the machine another epoch. */
    FUZZ_CHECK(e == a->epoch && seq != 0 && strcmp(db, DB_A) == 0);
    f->zk_epoch = e;
    f->zk_owner = seq;
    f->zk_version++;
    memcpy(f->zk_db, db, sizeof(db));
}

/* Completes out[i]: how = 0 as the world says, 1 failed, 2 wild (random answer). */
static void complete(fake_t *f, size_t i, int how)
{
    cq_coord_act_t a = f->out[i];
    uint64_t at = f->out_at[i];
    cq_coord_member_t m[4];
    cq_coord_ev_t ev = {0};
    f->out[i] = f->out[--f->nout];
    f->out_at[i] = f->out_at[f->nout];
    bool ok = how != 1 && f->connected;
    switch (a.type) {
    case CQ_COORD_ACT_JOIN:
        ev.type = CQ_COORD_EV_JOINED;
        ev.rc = ok ? 0 : -EIO;
        if (ok)
            ev.seq = f->my_seq = ++f->next_seq;
        break;
    case CQ_COORD_ACT_LIST:
        ev.type = CQ_COORD_EV_MEMBERS;
        ev.rc = ok ? 0 : -EIO;
        if (ok && how == 2) {
            members_from_bytes(f, &ev, m);
        } else if (ok) {
            m[0] = (cq_coord_member_t){.seq = f->my_seq, .eligible = f->my_elig};
            snprintf(m[0].adv, sizeof(m[0].adv), "%s", ADV_A);
            snprintf(m[0].db, sizeof(m[0].db), "%s", DB_A);
            ev.members = m;
            ev.nmembers = 1;
        }
        break;
    case CQ_COORD_ACT_READ_EPOCH:
    case CQ_COORD_ACT_PING:
        ev.is_ping = a.type == CQ_COORD_ACT_PING;
        ev.sent_ms = at;
        if (ok)
            epoch_answer(f, &ev, how == 2);
        else
            ev = (cq_coord_ev_t){.type = CQ_COORD_EV_EPOCH, .is_ping = ev.is_ping, .rc = -EIO};
        if (ok && ev.is_ping) {
            uint64_t lease = at + f->session_ms / 2;
            f->lease_max = lease > f->lease_max ? lease : f->lease_max;
        }
        break;
    case CQ_COORD_ACT_SET_EPOCH:
        if (ok)
            set_epoch(f, &a, &ev);
        else
            ev = (cq_coord_ev_t){.type = CQ_COORD_EV_EPOCH_SET, .rc = -EIO};
        f->epoch_written |= ev.rc == 0;
        break;
    case CQ_COORD_ACT_LEAVE:
        ev.type = CQ_COORD_EV_LEFT;
        ev.rc = ok ? 0 : -EIO;
        break;
    default: /* DB_*: the database does not need the session */
        ev.type = CQ_COORD_EV_DB;
        ev.arg = a.type;
        ev.rc = how == 1 ? -EIO : 0;
        ev.db_replica = how == 2;
        if (ev.rc == 0 && (a.type == CQ_COORD_ACT_DB_PROMOTE || a.type == CQ_COORD_ACT_DB_WRITABLE))
            f->db_writable = f->epoch_written;
        break;
    }
    event(f, &ev);
}

/* ---- steps -------------------------------------------------------------------------------- */

static void session(fake_t *f, unsigned arg)
{
    static const int kinds[] = {CQ_COORD_SESS_CONNECTED, CQ_COORD_SESS_CONNECTING,
                                CQ_COORD_SESS_EXPIRED};
    cq_coord_ev_t ev = {.type = CQ_COORD_EV_SESSION, .arg = kinds[arg % 3]};
    if (ev.arg == CQ_COORD_SESS_CONNECTED) {
        f->connected = true;
        ev.session_ms = f->session_ms; /* one session keeps its timeout */
    } else {
        f->connected = false;
    }
    if (ev.arg == CQ_COORD_SESS_EXPIRED) {
        /* A new session (maybe another timeout); what was earned is gone. */
        f->session_ms = 1000 + (arg / 3) * 1000;
        f->epoch_written = f->db_writable = false;
        f->lease_max = 0;
    }
    event(f, &ev);
}

static void stray(fake_t *f, unsigned arg)
{
    static const cq_coord_ev_type_t types[] = {CQ_COORD_EV_JOINED, CQ_COORD_EV_MEMBERS,
                                               CQ_COORD_EV_EPOCH,  CQ_COORD_EV_EPOCH_SET,
                                               CQ_COORD_EV_LEFT,   CQ_COORD_EV_DB};
    static const cq_coord_act_type_t acts[] = {CQ_COORD_ACT_JOIN,       CQ_COORD_ACT_LIST,
                                               CQ_COORD_ACT_READ_EPOCH, CQ_COORD_ACT_SET_EPOCH,
                                               CQ_COORD_ACT_LEAVE,      CQ_COORD_ACT_DB_PROMOTE};
    size_t k = arg % 6;
    for (size_t i = 0; i < f->nout; i++)
        if (f->out[i].type == acts[k] || (k == 2 && f->out[i].type == CQ_COORD_ACT_PING))
            return; /* not a stray: the contract forbids a second completion */
    cq_coord_ev_t ev = {.type = types[k], .arg = CQ_COORD_ACT_DB_PROMOTE, .seq = 77, .epoch = 9};
    event(f, &ev);
}

static void step(fake_t *f)
{
    uint8_t b = byte(f);
    unsigned arg = b >> 3;
    switch (b & 7) {
    case 0:
        f->now += arg == 31 ? 20000 : arg * 50;
        cq_coord_tick(f->co, f->now);
        take(f);
        check(f);
        break;
    case 1:
        if (f->nout)
            complete(f, arg % f->nout, 2);
        break;
    case 2:
        session(f, arg);
        break;
    case 3: {
        cq_coord_ev_t ev = {.type = CQ_COORD_EV_MEMBERS_CHANGED};
        event(f, &ev);
        break;
    }
    case 4: /* jump to the machine's next deadline and tick */
        if (cq_coord_next_deadline(f->co) != UINT64_MAX && cq_coord_next_deadline(f->co) > f->now)
            f->now = cq_coord_next_deadline(f->co);
        cq_coord_tick(f->co, f->now);
        take(f);
        check(f);
        break;
    case 5:
    case 6:
        if (f->nout)
            complete(f, 0, (b & 7) == 6);
        break;
    default:
        stray(f, arg);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cq_coord_member_t m;
    uint64_t e, s;
    char db[CQ_COORD_ADDR_MAX + 1];
    (void)cq_coord_member_parse((const char *)data, size, &m);
    (void)cq_coord_epoch_parse((const char *)data, size, &e, &s, db, sizeof(db));

    cq_coord_opts_t o = {.shard = 1,
                         .adv = ADV_A,
                         .db = DB_A,
                         .session_ms = 6000,
                         .db_down_ms = 2000,
                         .db_probe_ms = 500,
                         .promote = size & 1};
    fake_t f = {.now = 1000, .p = data, .end = data + size, .session_ms = 6000, .zk_version = -1};
    f.co = cq_coord_new(&o);
    if (!f.co)
        return 0;
    take(&f);
    for (int i = 0; i < 4096 && f.p < f.end; i++)
        step(&f);
    cq_coord_free(f.co);
    return 0;
}
