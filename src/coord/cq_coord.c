/* cq_coord.c - a shard's roles and fencing as a sans-I/O state machine. See cq_coord.h for the
 * behaviour; this file keeps it in three layers:
 *   - completions (on_*): each event first checks that its action is in flight and not stale,
 *     then moves the state;
 *   - transitions (become_*): change the role and what is wanted;
 *   - run(): issues every action that is wanted, not in flight and not backing off. It runs
 *     after every event and tick, so retries and timers need no code of their own.
 * Actions of one kind are never in flight twice: an action made stale by a role change still
 * blocks its kind until its completion arrives (and is then ignored). */
#include "coord_int.h"
#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_util.h"

#include <errno.h>
#include <string.h>

#define RETRY_MS  200 /* backoff after a failed action */
#define QUEUE_MAX 32  /* actions one event or tick can queue, with room to spare */
#define NKINDS    (CQ_COORD_ACT_DB_FOLLOW + 1)
#define BIT(t)    (1u << (t))

/* The ZooKeeper operations of a session: stale once the session expired. */
#define ZK_OPS                                                                                     \
    (BIT(CQ_COORD_ACT_JOIN) | BIT(CQ_COORD_ACT_LIST) | BIT(CQ_COORD_ACT_READ_EPOCH) |              \
     BIT(CQ_COORD_ACT_SET_EPOCH) | BIT(CQ_COORD_ACT_PING) | BIT(CQ_COORD_ACT_LEAVE))
/* The steps of taking the role: stale once the role is lost. */
#define ELECT_OPS                                                                                  \
    (BIT(CQ_COORD_ACT_READ_EPOCH) | BIT(CQ_COORD_ACT_SET_EPOCH) | BIT(CQ_COORD_ACT_PING) |         \
     BIT(CQ_COORD_ACT_DB_FENCE) | BIT(CQ_COORD_ACT_DB_PROMOTE) | BIT(CQ_COORD_ACT_DB_WRITABLE))
/* A slave's database actions: stale once we take the role. */
#define SLAVE_OPS (BIT(CQ_COORD_ACT_DB_READ_ONLY) | BIT(CQ_COORD_ACT_DB_FOLLOW))

typedef enum phase {
    PH_PROBE,  /* probing our database until it answers; not a member */
    PH_JOIN,   /* database answered: JOIN once the session is connected */
    PH_MEMBER, /* our node exists (my_seq) */
    PH_LEAVE,  /* deleting our node (the database went down under the master) */
} phase_t;

typedef enum elect_step {
    EL_READ,  /* READ_EPOCH */
    EL_SET,   /* SET_EPOCH(read + 1, read version) */
    EL_FENCE, /* DB_FENCE the previous owner's database */
    EL_DB,    /* DB_PROMOTE or DB_WRITABLE our database */
} elect_step_t;

struct cq_coord {
    cq_coord_opts_t o; /* o.adv, o.db point to adv, db */
    char adv[CQ_COORD_ADDR_MAX + 1];
    char db[CQ_COORD_ADDR_MAX + 1];
    uint32_t session_ms; /* negotiated */
    uint64_t now;        /* the latest now seen */

    phase_t phase;
    cq_coord_role_t role;
    cq_coord_role_t told; /* the last ROLE action's role */
    bool connected;
    bool eligible;   /* from the probe that let us join */
    bool db_replica; /* from the last probe */
    uint64_t my_seq;
    bool have_master;
    cq_coord_member_t master;

    /* Taking the role. */
    elect_step_t step;
    uint64_t read_epoch;
    int32_t read_version;
    char owner_db[CQ_COORD_ADDR_MAX + 1]; /* the previous owner's database ("" none) */
    uint64_t epoch;                       /* ours once epoch_ok, else the last one seen */
    bool epoch_ok;
    uint64_t lease; /* may_ack before this */

    /* Actions: in flight, stale (completion to ignore), retry times; the timers. */
    uint32_t inflight, stale;
    uint64_t retry_at[NKINDS];
    uint64_t ping_at, ping_sent;
    uint64_t probe_at, probe_sent;
    bool db_down;
    uint64_t down_since;
    bool list_needed, want_ro;
    uint64_t follow_seq, follow_try_seq; /* the master we follow / asked to follow */

    cq_coord_act_t q[QUEUE_MAX];
    size_t qhead, qlen;
};

static void run(cq_coord_t *co);

/* ---- actions ------------------------------------------------------------------------------ */

static cq_coord_act_t *push(cq_coord_t *co, cq_coord_act_type_t type)
{
    cq_assert(co->qlen < QUEUE_MAX); /* the runtime drains after every event and tick */
    cq_coord_act_t *a = &co->q[(co->qhead + co->qlen++) % QUEUE_MAX];
    memset(a, 0, sizeof(*a));
    a->type = type;
    return a;
}

static bool can_issue(const cq_coord_t *co, cq_coord_act_type_t type)
{
    return !(co->inflight & BIT(type)) && co->now >= co->retry_at[type];
}

static cq_coord_act_t *issue(cq_coord_t *co, cq_coord_act_type_t type)
{
    co->inflight |= BIT(type);
    return push(co, type);
}

/* A completion of type arrived: true when it is to be acted on. */
static bool done(cq_coord_t *co, cq_coord_act_type_t type)
{
    if (!(co->inflight & BIT(type)))
        return false; /* nothing asked: a stray completion */
    co->inflight &= ~BIT(type);
    if (co->stale & BIT(type)) {
        co->stale &= ~BIT(type);
        return false;
    }
    return true;
}

static void backoff(cq_coord_t *co, cq_coord_act_type_t type)
{
    co->retry_at[type] = co->now + RETRY_MS;
}

static void tell(cq_coord_t *co, cq_coord_role_t role)
{
    if (co->told == role)
        return;
    cq_coord_act_t *a = push(co, CQ_COORD_ACT_ROLE);
    a->role = role;
    a->epoch = co->epoch;
    co->told = role;
}

static void copy_addr(char *dst, const char *src)
{
    size_t n = strnlen(src, CQ_COORD_ADDR_MAX);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static bool leading(const cq_coord_t *co)
{
    return co->role == CQ_COORD_ELECTED || co->role == CQ_COORD_MASTER;
}

/* ---- transitions -------------------------------------------------------------------------- */

static void ro_step(cq_coord_t *co)
{
    if (co->want_ro && !leading(co) && can_issue(co, CQ_COORD_ACT_DB_READ_ONLY))
        issue(co, CQ_COORD_ACT_DB_READ_ONLY);
}

static void lose_role(cq_coord_t *co, cq_coord_role_t role)
{
    if (leading(co))
        co->stale |= co->inflight & ELECT_OPS;
    co->role = role;
    co->lease = 0;
    co->epoch_ok = false;
    co->db_down = false;
}

static void become_slave(cq_coord_t *co)
{
    cq_coord_role_t was = co->role;
    lose_role(co, CQ_COORD_SLAVE);
    tell(co, CQ_COORD_SLAVE);
    if (was != CQ_COORD_SLAVE) {
        co->want_ro = true;
        ro_step(co);
    }
}

/* ro: make our database read_only (not when it is unreachable anyway). */
static void become_down(cq_coord_t *co, bool ro)
{
    cq_coord_role_t was = co->role;
    lose_role(co, CQ_COORD_DOWN);
    tell(co, CQ_COORD_DOWN);
    if (!ro)
        co->want_ro = false;
    else if (was != CQ_COORD_DOWN)
        co->want_ro = true;
    ro_step(co);
}

static void become_elected(cq_coord_t *co)
{
    co->role = CQ_COORD_ELECTED;
    co->step = EL_READ;
    co->epoch_ok = false;
    co->lease = 0;
    co->want_ro = false;
    co->stale |= co->inflight & SLAVE_OPS;
    co->follow_seq = 0; /* promoting stops replication: follow again after losing */
    co->ping_at = co->now;
    co->probe_at = co->now + co->o.db_probe_ms;
    co->db_down = false;
}

static void become_master(cq_coord_t *co)
{
    co->role = CQ_COORD_MASTER;
    tell(co, CQ_COORD_MASTER);
}

/* The master's database was unreachable for db_down_ms: give up the role and the node. */
static void give_up(cq_coord_t *co)
{
    become_down(co, false);
    co->phase = PH_LEAVE;
}

static void check_down(cq_coord_t *co)
{
    if (leading(co) && co->db_down && co->now - co->down_since >= co->o.db_down_ms)
        give_up(co);
}

/* Our node is gone (session expired, deleted): back to joining, or probing after a LEAVE. */
static void forget_node(cq_coord_t *co, phase_t phase)
{
    co->phase = phase;
    co->my_seq = 0;
    co->have_master = false;
    co->list_needed = false;
}

/* ---- completions -------------------------------------------------------------------------- */

static void on_session(cq_coord_t *co, const cq_coord_ev_t *ev)
{
    switch (ev->arg) {
    case CQ_COORD_SESS_CONNECTED:
        co->connected = true;
        co->session_ms = ev->session_ms ? ev->session_ms : co->o.session_ms;
        if (co->phase == PH_MEMBER) { /* same session: our node is still there */
            co->list_needed = true;
            co->ping_at = co->now;
        }
        break;
    case CQ_COORD_SESS_CONNECTING:
        co->connected = false; /* may_ack ends now; the role waits for the outcome */
        break;
    case CQ_COORD_SESS_EXPIRED:
        co->connected = false;
        co->stale |= co->inflight & ZK_OPS;
        become_down(co, true);
        forget_node(co, co->phase == PH_LEAVE || co->phase == PH_PROBE ? PH_PROBE : PH_JOIN);
        push(co, CQ_COORD_ACT_RECONNECT);
        break;
    default:
        break;
    }
}

static void on_joined(cq_coord_t *co, const cq_coord_ev_t *ev)
{
    if (!done(co, CQ_COORD_ACT_JOIN) || co->phase != PH_JOIN)
        return;
    if (ev->rc < 0) {
        backoff(co, CQ_COORD_ACT_JOIN);
        return;
    }
    co->my_seq = ev->seq;
    co->phase = PH_MEMBER;
    co->list_needed = true;
}

static bool is_self(const cq_coord_t *co, const cq_coord_member_t *m)
{
    /* Same addresses, other seq: a node of ours whose JOIN answer was lost (it lives as long
     * as our session), so it stands for us. */
    return m->seq == co->my_seq || (strcmp(m->adv, co->adv) == 0 && strcmp(m->db, co->db) == 0);
}

static void on_members(cq_coord_t *co, const cq_coord_ev_t *ev)
{
    const cq_coord_member_t *master = NULL;
    bool present = false;
    if (!done(co, CQ_COORD_ACT_LIST) || co->phase != PH_MEMBER)
        return;
    if (ev->rc < 0) {
        co->list_needed = true;
        backoff(co, CQ_COORD_ACT_LIST);
        return;
    }
    for (size_t i = 0; i < ev->nmembers; i++) {
        const cq_coord_member_t *m = &ev->members[i];
        present |= is_self(co, m);
        if (m->eligible && (!master || m->seq < master->seq))
            master = m;
    }
    co->have_master = master != NULL;
    if (master)
        co->master = *master;
    if (!present) { /* our node was deleted under us: join again */
        become_down(co, true);
        forget_node(co, PH_JOIN);
    } else if (master && is_self(co, master)) {
        if (!leading(co))
            become_elected(co);
    } else {
        become_slave(co);
    }
}

/* A heartbeat saw an epoch that is not ours: someone else took the role. An older epoch is a
 * read that was ordered before our write, not a fence. */
static bool fenced(const cq_coord_t *co, const cq_coord_ev_t *ev)
{
    if (ev->rc == -ENOENT)
        return true;
    return ev->epoch > co->epoch || (ev->epoch == co->epoch && ev->owner_seq != co->my_seq);
}

static void on_ping(cq_coord_t *co, const cq_coord_ev_t *ev)
{
    if (!done(co, CQ_COORD_ACT_PING) || !leading(co))
        return;
    if (ev->rc != 0 && ev->rc != -ENOENT)
        return; /* the next ping goes at its time */
    if (co->epoch_ok && fenced(co, ev)) {
        if (ev->rc == 0 && ev->epoch > co->epoch)
            co->epoch = ev->epoch;
        become_slave(co);
        co->list_needed = true;
        return;
    }
    uint64_t lease = co->ping_sent + co->session_ms / 2;
    if (lease > co->lease)
        co->lease = lease;
}

static void on_read_epoch(cq_coord_t *co, const cq_coord_ev_t *ev)
{
    if (!done(co, CQ_COORD_ACT_READ_EPOCH) || co->role != CQ_COORD_ELECTED || co->step != EL_READ)
        return;
    if (ev->rc == -ENOENT) {
        co->read_epoch = 0;
        co->read_version = -1;
        co->owner_db[0] = '\0';
    } else if (ev->rc == 0) {
        co->read_epoch = ev->epoch;
        co->read_version = ev->version;
        copy_addr(co->owner_db, ev->owner_db);
    } else {
        backoff(co, CQ_COORD_ACT_READ_EPOCH);
        return;
    }
    co->epoch = co->read_epoch;
    co->step = EL_SET;
}

static void on_epoch_set(cq_coord_t *co, const cq_coord_ev_t *ev)
{
    if (!done(co, CQ_COORD_ACT_SET_EPOCH) || co->role != CQ_COORD_ELECTED || co->step != EL_SET)
        return;
    co->step = EL_READ;
    if (ev->rc == CQ_ECONFLICT) { /* someone wrote first: read again, and look again */
        co->list_needed = true;
        return;
    }
    if (ev->rc < 0) { /* unknown outcome: the version tells on the next read */
        backoff(co, CQ_COORD_ACT_READ_EPOCH);
        return;
    }
    co->epoch = co->read_epoch + 1;
    co->epoch_ok = true;
    co->step = co->owner_db[0] && strcmp(co->owner_db, co->db) != 0 ? EL_FENCE : EL_DB;
}

static void on_probe(cq_coord_t *co, const cq_coord_ev_t *ev)
{
    co->probe_at = co->now + co->o.db_probe_ms;
    if (ev->rc < 0) {
        if (leading(co) && !co->db_down) {
            co->db_down = true;
            co->down_since = co->probe_sent;
        }
        check_down(co);
        return;
    }
    co->db_down = false;
    co->db_replica = ev->db_replica;
    if (co->phase == PH_PROBE) {
        co->eligible = co->o.promote || !ev->db_replica;
        co->phase = PH_JOIN;
    }
}

static void on_db(cq_coord_t *co, const cq_coord_ev_t *ev)
{
    cq_coord_act_type_t type = (cq_coord_act_type_t)ev->arg;
    if (type < CQ_COORD_ACT_DB_PROBE || type > CQ_COORD_ACT_DB_FOLLOW || !done(co, type))
        return;
    switch (type) {
    case CQ_COORD_ACT_DB_PROBE:
        on_probe(co, ev);
        break;
    case CQ_COORD_ACT_DB_FENCE: /* best effort: the old database may be down */
        if (co->role == CQ_COORD_ELECTED && co->step == EL_FENCE)
            co->step = EL_DB;
        break;
    case CQ_COORD_ACT_DB_PROMOTE:
    case CQ_COORD_ACT_DB_WRITABLE:
        if (co->role != CQ_COORD_ELECTED || co->step != EL_DB)
            break;
        if (ev->rc < 0) {
            backoff(co, type);
            break;
        }
        if (type == CQ_COORD_ACT_DB_PROMOTE)
            co->db_replica = false;
        become_master(co);
        break;
    case CQ_COORD_ACT_DB_READ_ONLY:
        if (ev->rc < 0)
            backoff(co, type);
        else
            co->want_ro = false;
        break;
    default: /* DB_FOLLOW */
        if (ev->rc < 0)
            backoff(co, type);
        else
            co->follow_seq = co->follow_try_seq;
        break;
    }
}

static void on_left(cq_coord_t *co, const cq_coord_ev_t *ev)
{
    if (!done(co, CQ_COORD_ACT_LEAVE) || co->phase != PH_LEAVE)
        return;
    if (ev->rc < 0 && ev->rc != -ENOENT) {
        backoff(co, CQ_COORD_ACT_LEAVE);
        return;
    }
    forget_node(co, PH_PROBE); /* join again once the database answers */
}

/* ---- issuing what is wanted --------------------------------------------------------------- */

static bool probing(const cq_coord_t *co)
{
    return co->phase == PH_PROBE || (co->phase == PH_MEMBER && leading(co));
}

static bool pinging(const cq_coord_t *co)
{
    return co->phase == PH_MEMBER && leading(co) && co->connected;
}

static void probe_step(cq_coord_t *co)
{
    if (probing(co) && can_issue(co, CQ_COORD_ACT_DB_PROBE) && co->now >= co->probe_at) {
        issue(co, CQ_COORD_ACT_DB_PROBE);
        co->probe_sent = co->now;
    }
}

static void ping_step(cq_coord_t *co)
{
    if (pinging(co) && can_issue(co, CQ_COORD_ACT_PING) && co->now >= co->ping_at) {
        issue(co, CQ_COORD_ACT_PING);
        co->ping_sent = co->now;
        co->ping_at = co->now + CQ_MAX(co->session_ms / 6, 50u);
    }
}

static void join_step(cq_coord_t *co)
{
    if (!co->connected || !can_issue(co, CQ_COORD_ACT_JOIN))
        return;
    cq_coord_member_t m = {.eligible = co->eligible};
    copy_addr(m.adv, co->adv);
    copy_addr(m.db, co->db);
    cq_coord_act_t *a = issue(co, CQ_COORD_ACT_JOIN);
    int rc = cq_coord_member_format(&m, a->text, sizeof(a->text));
    cq_assert(rc == 0); /* the addresses were checked by cq_coord_new */
}

static void elect_step(cq_coord_t *co)
{
    cq_coord_act_t *a;
    int rc;
    switch (co->step) {
    case EL_READ:
        if (co->connected && can_issue(co, CQ_COORD_ACT_READ_EPOCH))
            issue(co, CQ_COORD_ACT_READ_EPOCH);
        break;
    case EL_SET:
        if (!co->connected || !can_issue(co, CQ_COORD_ACT_SET_EPOCH))
            break;
        a = issue(co, CQ_COORD_ACT_SET_EPOCH);
        a->epoch = co->read_epoch + 1;
        a->version = co->read_version;
        rc = cq_coord_epoch_format(a->epoch, co->my_seq, co->db, a->text, sizeof(a->text));
        cq_assert(rc == 0); /* our address was checked by cq_coord_new */
        break;
    case EL_FENCE:
        if (can_issue(co, CQ_COORD_ACT_DB_FENCE))
            copy_addr(issue(co, CQ_COORD_ACT_DB_FENCE)->peer, co->owner_db);
        break;
    case EL_DB: {
        cq_coord_act_type_t t = co->db_replica ? CQ_COORD_ACT_DB_PROMOTE : CQ_COORD_ACT_DB_WRITABLE;
        /* Both kinds block: a retry may switch kind after a probe. */
        if (can_issue(co, t) &&
            !(co->inflight & (BIT(CQ_COORD_ACT_DB_PROMOTE) | BIT(CQ_COORD_ACT_DB_WRITABLE))))
            issue(co, t);
        break;
    }
    }
}

static void follow_step(cq_coord_t *co)
{
    if (!co->o.promote || !co->have_master || strcmp(co->master.db, co->db) == 0 ||
        co->follow_seq == co->master.seq || !can_issue(co, CQ_COORD_ACT_DB_FOLLOW))
        return;
    copy_addr(issue(co, CQ_COORD_ACT_DB_FOLLOW)->peer, co->master.db);
    co->follow_try_seq = co->master.seq;
}

static void member_step(cq_coord_t *co)
{
    if (co->list_needed && co->connected && can_issue(co, CQ_COORD_ACT_LIST)) {
        issue(co, CQ_COORD_ACT_LIST);
        co->list_needed = false;
    }
    switch (co->role) {
    case CQ_COORD_SLAVE:
        follow_step(co);
        break;
    case CQ_COORD_ELECTED:
        elect_step(co);
        break;
    default:
        break;
    }
    ping_step(co);
}

static void run(cq_coord_t *co)
{
    ro_step(co);
    switch (co->phase) {
    case PH_PROBE:
        break;
    case PH_JOIN:
        join_step(co);
        break;
    case PH_MEMBER:
        member_step(co);
        break;
    case PH_LEAVE:
        if (co->connected && can_issue(co, CQ_COORD_ACT_LEAVE))
            issue(co, CQ_COORD_ACT_LEAVE);
        break;
    }
    probe_step(co);
}

/* ---- API ---------------------------------------------------------------------------------- */

cq_coord_t *cq_coord_new(const cq_coord_opts_t *o)
{
    if (!o->adv || !o->db || !cq__coord_addr_valid(o->adv, strlen(o->adv)) ||
        !cq__coord_addr_valid(o->db, strlen(o->db)))
        return NULL;
    cq_coord_t *co = cq_calloc(1, sizeof(*co));
    if (!co)
        return NULL;
    co->o = *o;
    copy_addr(co->adv, o->adv);
    copy_addr(co->db, o->db);
    co->o.adv = co->adv;
    co->o.db = co->db;
    if (!co->o.session_ms)
        co->o.session_ms = 10000;
    if (!co->o.db_down_ms)
        co->o.db_down_ms = 5000;
    if (!co->o.db_probe_ms)
        co->o.db_probe_ms = 500;
    co->session_ms = co->o.session_ms;
    issue(co, CQ_COORD_ACT_DB_PROBE); /* the first action: may we join, and as what */
    return co;
}

cq_coord_t *cq_coord_free(cq_coord_t *co)
{
    cq_free(co);
    return NULL;
}

void cq_coord_event(cq_coord_t *co, const cq_coord_ev_t *ev, uint64_t now)
{
    co->now = CQ_MAX(co->now, now);
    switch (ev->type) {
    case CQ_COORD_EV_SESSION:
        on_session(co, ev);
        break;
    case CQ_COORD_EV_JOINED:
        on_joined(co, ev);
        break;
    case CQ_COORD_EV_MEMBERS:
        on_members(co, ev);
        break;
    case CQ_COORD_EV_MEMBERS_CHANGED:
        co->list_needed = co->phase == PH_MEMBER;
        break;
    case CQ_COORD_EV_EPOCH:
        if (ev->is_ping)
            on_ping(co, ev);
        else
            on_read_epoch(co, ev);
        break;
    case CQ_COORD_EV_EPOCH_SET:
        on_epoch_set(co, ev);
        break;
    case CQ_COORD_EV_DB:
        on_db(co, ev);
        break;
    case CQ_COORD_EV_LEFT:
        on_left(co, ev);
        break;
    }
    run(co);
}

void cq_coord_tick(cq_coord_t *co, uint64_t now)
{
    co->now = CQ_MAX(co->now, now);
    check_down(co);
    run(co);
}

bool cq_coord_next_action(cq_coord_t *co, cq_coord_act_t *ret)
{
    if (!co->qlen)
        return false;
    *ret = co->q[co->qhead];
    co->qhead = (co->qhead + 1) % QUEUE_MAX;
    co->qlen--;
    return true;
}

uint64_t cq_coord_next_deadline(const cq_coord_t *co)
{
    uint64_t t = UINT64_MAX;
    if (probing(co) && !(co->inflight & BIT(CQ_COORD_ACT_DB_PROBE)))
        t = CQ_MIN(t, co->probe_at);
    if (pinging(co) && !(co->inflight & BIT(CQ_COORD_ACT_PING)))
        t = CQ_MIN(t, co->ping_at);
    if (leading(co) && co->db_down)
        t = CQ_MIN(t, co->down_since + co->o.db_down_ms);
    for (size_t i = 0; i < NKINDS; i++) /* a backoff that is not over yet */
        if (co->retry_at[i] > co->now)
            t = CQ_MIN(t, co->retry_at[i]);
    return t;
}

bool cq_coord_may_ack(const cq_coord_t *co, uint64_t now)
{
    return now < cq_coord_ack_until(co);
}

uint64_t cq_coord_ack_until(const cq_coord_t *co)
{
    if (co->role != CQ_COORD_MASTER || !co->connected || !co->epoch_ok)
        return 0;
    return co->lease;
}

cq_coord_role_t cq_coord_role(const cq_coord_t *co)
{
    return co->role;
}

uint64_t cq_coord_epoch(const cq_coord_t *co)
{
    return co->epoch;
}

const cq_coord_member_t *cq_coord_master(const cq_coord_t *co)
{
    return co->have_master ? &co->master : NULL;
}

const char *cq_coord_role_name(cq_coord_role_t r)
{
    switch (r) {
    case CQ_COORD_DOWN:
        return "down";
    case CQ_COORD_SLAVE:
        return "slave";
    case CQ_COORD_ELECTED:
        return "elected";
    case CQ_COORD_MASTER:
        return "master";
    }
    return "?";
}
