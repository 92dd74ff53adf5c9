/* chanq_move.c - the sans-I/O engine of a connection that moves along an address list. */
#include "chanq_move.h"

#include "cq_alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct addr {
    char *text; /* "host:port" as given */
    char *host; /* brackets of an IPv6 address removed */
    uint16_t port;
} addr_t;

struct chanq_move {
    chanq_move_opts_t o;
    addr_t *addrs;
    size_t n;
    chanq_move_state_t state;
    size_t target;
    size_t lost_from;      /* the address whose loss started the move */
    bool moving;           /* after a loss, until UP or FAILED */
    uint32_t tries;        /* failed tries of this move (or of the start) */
    int64_t due, deadline; /* WAIT; CONNECTING, AUTH */
    int64_t now;           /* the latest time an event gave: a callback inside a feed has none */
    int err, reason;
    uint32_t old_conn_id;
    uint32_t moves;
    chanq_client_t *c; /* AUTH: the client whose AuthResult is awaited (borrowed) */
    uint32_t auth_stub;
};

void chanq_move_opts_init(chanq_move_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->backoff_min_ms = 100;
    o->backoff_max_ms = 2000;
    o->connect_timeout_ms = 2000;
    o->auth_timeout_ms = 5000;
}

/* ---- the list ---------------------------------------------------------------------------- */

static char *dup_n(const char *s, size_t n)
{
    char *d = cq_malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Splits "host:port" or "[v6]:port" (s[0..n), n > 0) into *a. */
static int addr_parse(const char *s, size_t n, addr_t *a)
{
    const char *colon = NULL;
    for (size_t i = 0; i < n; i++)
        if (s[i] == ':')
            colon = s + i;
    if (!colon || colon == s || colon == s + n - 1)
        return -EINVAL;
    const char *h = s, *he = colon;
    if (*h == '[') {
        if (he[-1] != ']' || he - h < 3)
            return -EINVAL;
        h++, he--;
    } else if (memchr(h, ':', (size_t)(he - h))) {
        return -EINVAL; /* an IPv6 address needs its brackets */
    }
    unsigned long port = 0;
    for (const char *p = colon + 1; p < s + n; p++) {
        if (*p < '0' || *p > '9' || (port = port * 10 + (unsigned long)(*p - '0')) > 65535)
            return -EINVAL;
    }
    if (!port)
        return -EINVAL;
    a->text = dup_n(s, n);
    a->host = dup_n(h, (size_t)(he - h));
    a->port = (uint16_t)port;
    if (a->text && a->host)
        return 0;
    cq_free(a->text);
    cq_free(a->host);
    return -ENOMEM;
}

static int list_parse(chanq_move_t *m, const char *list)
{
    m->addrs = cq_calloc(CHANQ_MOVE_MAX_ADDRS, sizeof(*m->addrs));
    if (!m->addrs)
        return -ENOMEM;
    const char *p = list;
    for (;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (!len || m->n == CHANQ_MOVE_MAX_ADDRS)
            return -EINVAL;
        int r = addr_parse(p, len, &m->addrs[m->n]);
        if (r < 0)
            return r;
        m->n++;
        if (!e)
            return 0;
        p = e + 1;
    }
}

int chanq_move_new(const char *addrs, const chanq_move_opts_t *o, chanq_move_t **ret_m)
{
    if (!addrs || !ret_m)
        return -EINVAL;
    chanq_move_t *m = cq_calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    if (o)
        m->o = *o;
    else
        chanq_move_opts_init(&m->o);
    int r = list_parse(m, addrs);
    if (r < 0) {
        chanq_move_free(m);
        return r;
    }
    *ret_m = m;
    return 0;
}

chanq_move_t *chanq_move_free(chanq_move_t *m)
{
    if (!m)
        return NULL;
    if (m->state == CHANQ_MOVE_AUTH)
        chanq_client_stub_cancel(m->c, m->auth_stub); /* its ud is this engine */
    for (size_t i = 0; i < m->n; i++) {
        cq_free(m->addrs[i].text);
        cq_free(m->addrs[i].host);
    }
    cq_free(m->addrs);
    cq_free(m);
    return NULL;
}

size_t chanq_move_addr_count(const chanq_move_t *m)
{
    return m->n;
}

const char *chanq_move_host(const chanq_move_t *m, size_t i)
{
    return i < m->n ? m->addrs[i].host : NULL;
}

uint16_t chanq_move_port(const chanq_move_t *m, size_t i)
{
    return i < m->n ? m->addrs[i].port : 0;
}

const char *chanq_move_addr(const chanq_move_t *m, size_t i)
{
    return i < m->n ? m->addrs[i].text : NULL;
}

chanq_move_state_t chanq_move_state(const chanq_move_t *m)
{
    return m->state;
}

size_t chanq_move_target(const chanq_move_t *m)
{
    return m->target;
}

int64_t chanq_move_due(const chanq_move_t *m)
{
    return m->due;
}

int64_t chanq_move_deadline(const chanq_move_t *m)
{
    return m->deadline;
}

int chanq_move_error(const chanq_move_t *m)
{
    return m->err;
}

uint32_t chanq_move_moves(const chanq_move_t *m)
{
    return m->moves;
}

const chanq_move_opts_t *chanq_move_opts(const chanq_move_t *m)
{
    return &m->o;
}

/* ---- the policy -------------------------------------------------------------------------- */

/* The wait before try k (k >= 1) of a move or of the start. */
static uint32_t backoff_ms(const chanq_move_opts_t *o, uint32_t k)
{
    uint64_t d = o->backoff_min_ms;
    for (uint32_t i = 1; i < k && d < o->backoff_max_ms; i++)
        d *= 2;
    return d < o->backoff_max_ms ? (uint32_t)d : o->backoff_max_ms;
}

static void wait_for(chanq_move_t *m, size_t target, int64_t due)
{
    m->state = CHANQ_MOVE_WAIT;
    m->target = target;
    m->due = due;
    m->deadline = 0;
}

void chanq_move_start(chanq_move_t *m, int64_t now)
{
    m->now = now;
    m->moving = false;
    m->tries = 0;
    m->err = 0;
    wait_for(m, 0, now);
}

void chanq_move_connecting(chanq_move_t *m, int64_t now)
{
    m->now = now;
    m->state = CHANQ_MOVE_CONNECTING;
    m->deadline = now + m->o.connect_timeout_ms;
}

/* Reports the move that ended with this connection. */
static void moved(chanq_move_t *m, uint32_t conn_id, size_t resubscribed)
{
    m->state = CHANQ_MOVE_UP;
    m->moving = false;
    m->moves++;
    chanq_moved_t ev = {m->lost_from,
                        m->target,
                        m->addrs[m->lost_from].text,
                        m->addrs[m->target].text,
                        m->old_conn_id,
                        conn_id,
                        resubscribed,
                        m->tries + 1,
                        m->reason};
    m->tries = 0;
    if (m->o.on_moved)
        m->o.on_moved(m->o.ud, &ev);
}

/* The AuthResult of the AUTH a move queued (called from inside the client's feed). */
static void on_auth(void *ud, const chanq_msg_t *msg)
{
    chanq_move_t *m = ud;
    chanq_client_t *c = m->c;
    m->c = NULL;
    Channeldpb__AuthResultMessage *ar =
        msg->msg_type == CHANNELDPB__MESSAGE_TYPE__AUTH
            ? chanq_unpack(&channeldpb__auth_result_message__descriptor, msg->body, msg->body_len)
            : NULL;
    bool ok =
        ar && ar->result == CHANNELDPB__AUTH_RESULT_MESSAGE__AUTH_RESULT__SUCCESSFUL && ar->connid;
    bool refused = ar && !ok;
    /* The core decoded the result before this stub: out of memory there, it has no id; a try
     * that ends so is failed, not a move under id 0. */
    ok = ok && chanq_client_conn_id(c) == ar->connid;
    chanq_unpack_free(ar);
    if (refused) {
        m->state = CHANQ_MOVE_FAILED;
        m->moving = false;
        m->err = CQ_EAUTH;
        return;
    }
    if (!ok) {
        chanq_move_failed(m, CQ_EDECODE, m->now);
        return;
    }
    size_t n = 0;
    int r = chanq_client_resubscribe(c, &n);
    if (r < 0) {
        chanq_move_failed(m, r, m->now);
        return;
    }
    moved(m, chanq_client_conn_id(c), n);
}

static int queue_auth(chanq_move_t *m, chanq_client_t *c)
{
    int r = chanq_client_reset(c);
    if (r < 0 || !m->old_conn_id)
        return r;
    r = chanq_client_stub_alloc(c, on_auth, m, &m->auth_stub);
    if (r < 0)
        return r;
    r = chanq_client_reauth(c, m->auth_stub);
    if (r < 0) {
        chanq_client_stub_cancel(c, m->auth_stub);
        return r == -ENOENT ? 0 : r; /* no credentials: nothing to redo */
    }
    m->c = c;
    return 1;
}

void chanq_move_connected(chanq_move_t *m, chanq_client_t *c, int64_t now)
{
    m->now = now;
    if (!m->moving) {
        m->state = CHANQ_MOVE_UP;
        m->tries = 0;
        return;
    }
    int r = queue_auth(m, c);
    if (r < 0) {
        chanq_move_failed(m, r, now);
        return;
    }
    if (r == 0) {
        moved(m, 0, 0);
        return;
    }
    m->state = CHANQ_MOVE_AUTH;
    m->deadline = now + m->o.auth_timeout_ms;
}

void chanq_move_failed(chanq_move_t *m, int err, int64_t now)
{
    m->now = now;
    if (m->state == CHANQ_MOVE_AUTH && m->c) {
        chanq_client_stub_cancel(m->c, m->auth_stub);
        m->c = NULL;
    }
    m->tries++;
    if (m->o.max_tries && m->tries >= m->o.max_tries) {
        m->state = CHANQ_MOVE_FAILED;
        m->moving = false;
        m->err = err;
        return;
    }
    wait_for(m, (m->target + 1) % m->n, now + backoff_ms(&m->o, m->tries));
}

void chanq_move_lost(chanq_move_t *m, const chanq_client_t *c, int err, int64_t now)
{
    m->now = now;
    if (m->state != CHANQ_MOVE_UP) {
        chanq_move_failed(m, err, now);
        return;
    }
    m->moving = true;
    m->lost_from = m->target;
    m->old_conn_id = chanq_client_conn_id(c);
    m->reason = err;
    m->tries = 0;
    wait_for(m, (m->target + 1) % m->n, now);
}

int chanq_move_tick(chanq_move_t *m, int64_t now)
{
    m->now = now;
    if ((m->state != CHANQ_MOVE_CONNECTING && m->state != CHANQ_MOVE_AUTH) || now < m->deadline)
        return 0;
    chanq_move_failed(m, CQ_ETIMEOUT, now);
    return 1;
}
