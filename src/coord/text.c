/* text.c - the member and epoch node data (see cq_coord.h), parsed strictly: bounded lengths,
 * single spaces, digits only, ports 1..65535. ZooKeeper data comes from other processes (and
 * operators), so nothing here trusts it. */
#include "coord_int.h"
#include "cq_err.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef struct tok {
    const char *p;
    size_t n;
} tok_t;

/* Splits text at single spaces into exactly want tokens; false on empty tokens (leading,
 * trailing or double spaces), a NUL byte, or another count. */
static bool split(const char *text, size_t len, tok_t *toks, size_t want)
{
    size_t k = 0, start = 0;
    if (memchr(text, '\0', len))
        return false;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && text[i] != ' ')
            continue;
        if (i == start || k == want)
            return false;
        toks[k].p = text + start;
        toks[k].n = i - start;
        k++;
        start = i + 1;
    }
    return k == want;
}

/* Strips prefix from t; false when t does not start with it. */
static bool strip(tok_t *t, const char *prefix)
{
    size_t n = strlen(prefix);
    if (t->n < n || memcmp(t->p, prefix, n) != 0)
        return false;
    t->p += n;
    t->n -= n;
    return true;
}

/* Decimal digits without a leading zero (except "0"), no overflow. */
static bool parse_u64(tok_t t, uint64_t *ret)
{
    uint64_t v = 0;
    if (t.n == 0 || t.n > 20 || (t.n > 1 && t.p[0] == '0'))
        return false;
    for (size_t i = 0; i < t.n; i++) {
        unsigned d = (unsigned char)t.p[i] - '0';
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *ret = v;
    return true;
}

static bool host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_' || c == ':' || c == '[' || c == ']';
}

bool cq__coord_addr_valid(const char *p, size_t n)
{
    const char *colon = NULL;
    uint64_t port;
    if (n == 0 || n > CQ_COORD_ADDR_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!host_char(p[i]))
            return false;
        if (p[i] == ':')
            colon = p + i;
    }
    if (!colon || colon == p)
        return false;
    tok_t t = {colon + 1, (size_t)(p + n - colon - 1)};
    return t.n <= 5 && parse_u64(t, &port) && port >= 1 && port <= 65535;
}

/* Copies a valid address token into out (CQ_COORD_ADDR_MAX + 1 bytes). */
static bool take_addr(tok_t t, char *out)
{
    if (!cq__coord_addr_valid(t.p, t.n))
        return false;
    memcpy(out, t.p, t.n);
    out[t.n] = '\0';
    return true;
}

int cq_coord_member_format(const cq_coord_member_t *m, char *out, size_t outlen)
{
    if (!cq__coord_addr_valid(m->adv, strnlen(m->adv, sizeof(m->adv))) ||
        !cq__coord_addr_valid(m->db, strnlen(m->db, sizeof(m->db))))
        return CQ_EFIELD;
    int n = snprintf(out, outlen, "v1 adv=%s db=%s elig=%d", m->adv, m->db, m->eligible ? 1 : 0);
    return n < 0 || (size_t)n >= outlen ? -ENOSPC : 0;
}

int cq_coord_member_parse(const char *text, size_t len, cq_coord_member_t *ret)
{
    tok_t t[4];
    cq_coord_member_t m = {0};
    if (!split(text, len, t, 4) || t[0].n != 2 || memcmp(t[0].p, "v1", 2) != 0)
        return CQ_EFIELD;
    if (!strip(&t[1], "adv=") || !take_addr(t[1], m.adv))
        return CQ_EFIELD;
    if (!strip(&t[2], "db=") || !take_addr(t[2], m.db))
        return CQ_EFIELD;
    if (!strip(&t[3], "elig=") || t[3].n != 1 || (t[3].p[0] != '0' && t[3].p[0] != '1'))
        return CQ_EFIELD;
    m.eligible = t[3].p[0] == '1';
    *ret = m;
    return 0;
}

int cq_coord_epoch_format(uint64_t epoch, uint64_t seq, const char *db, char *out, size_t outlen)
{
    if (!cq__coord_addr_valid(db, strnlen(db, CQ_COORD_ADDR_MAX + 1)))
        return CQ_EFIELD;
    int n = snprintf(out, outlen, "%" PRIu64 " %" PRIu64 " %s", epoch, seq, db);
    return n < 0 || (size_t)n >= outlen ? -ENOSPC : 0;
}

int cq_coord_epoch_parse(const char *text, size_t len, uint64_t *ret_epoch, uint64_t *ret_seq,
                         char *ret_db, size_t dblen)
{
    tok_t t[3];
    uint64_t epoch, seq;
    char db[CQ_COORD_ADDR_MAX + 1];
    if (!split(text, len, t, 3) || !parse_u64(t[0], &epoch) || !parse_u64(t[1], &seq) ||
        !take_addr(t[2], db) || t[2].n >= dblen)
        return CQ_EFIELD;
    *ret_epoch = epoch;
    *ret_seq = seq;
    memcpy(ret_db, db, t[2].n + 1);
    return 0;
}
