/* zkgroup.c - the group membership's pure parts (zkgroup_int.h): what zk.c asks ZooKeeper for
 * and what it makes of the answers. Children's names come from the ensemble, where anyone may
 * write, so nothing here trusts them: a name that is not exactly ours is not a member. */
#include "zkgroup_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cq__zkgroup_path_check(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    if (n < 2 || n >= CQ_ZKGROUP_PATH_MAX || path[0] != '/' || path[n - 1] == '/')
        return -EINVAL;
    /* each part: not empty, not "." nor ".." (ZooKeeper refuses them) */
    for (const char *p = path; *p;) {
        const char *q = strchr(p + 1, '/');
        size_t len = q ? (size_t)(q - p - 1) : strlen(p + 1);
        if (len == 0 || (len == 1 && p[1] == '.') || (len == 2 && p[1] == '.' && p[2] == '.'))
            return -EINVAL;
        p += len + 1;
    }
    return 0;
}

int cq__zkgroup_name_check(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > CQ_ZKGROUP_NAME_MAX || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-';
        if (!ok)
            return -EINVAL;
    }
    return 0;
}

int cq__zkgroup_homes_path(const char *path, const char *name, char *out, size_t outlen)
{
    if (cq__zkgroup_path_check(path) < 0 || (name && cq__zkgroup_name_check(name) < 0))
        return -EINVAL;
    int parent = (int)(strrchr(path, '/') - path); /* "/members": 0, the root */
    int n = name ? snprintf(out, outlen, "%.*s/homes/%s", parent, path, name)
                 : snprintf(out, outlen, "%.*s/homes", parent, path);
    return n < 0 || (size_t)n >= outlen ? -EINVAL : 0;
}

int cq__zkgroup_prefix(const char *path, uint64_t sess, char *out, size_t outlen)
{
    int n = snprintf(out, outlen, "%s/" CQ__ZKGROUP_PREFIX "%016" PRIx64 "_", path, sess);
    return n < 0 || (size_t)n >= outlen ? -EINVAL : 0;
}

static bool all_of(const char *p, size_t n, const char *set)
{
    for (size_t i = 0; i < n; i++)
        if (!p[i] || !strchr(set, p[i]))
            return false;
    return true;
}

bool cq__zkgroup_child_parse(const char *name, cq__zkgroup_child_t *ret)
{
    if (strlen(name) != CQ__ZKGROUP_CHILD_LEN || strncmp(name, CQ__ZKGROUP_PREFIX, 2) != 0 ||
        name[18] != '_' || !all_of(name + 2, 16, "0123456789abcdef") ||
        !all_of(name + 19, 10, "0123456789"))
        return false;
    *ret = (cq__zkgroup_child_t){.sess = strtoull(name + 2, NULL, 16),
                                 .seq = strtoull(name + 19, NULL, 10)};
    return true;
}

int cq__zkgroup_child_path(const char *path, const cq__zkgroup_child_t *c, char *out, size_t outlen)
{
    int n = snprintf(out, outlen, "%s/" CQ__ZKGROUP_PREFIX "%016" PRIx64 "_%010" PRIu64, path,
                     c->sess, c->seq);
    return n < 0 || (size_t)n >= outlen ? -EINVAL : 0;
}

static int child_cmp(const void *a, const void *b)
{
    const cq__zkgroup_child_t *x = a, *y = b;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->sess < y->sess ? -1 : x->sess > y->sess; /* only forged names share a seq */
}

/* The index of the child we keep among ours, or n. */
static size_t find_self(const cq__zkgroup_child_t *c, size_t n, uint64_t sess, bool joined,
                        uint64_t self_seq)
{
    for (size_t i = 0; i < n; i++) /* sorted: the first of ours is the lowest */
        if (c[i].sess == sess && (!joined || c[i].seq == self_seq))
            return i;
    return n;
}

void cq__zkgroup_plan(cq__zkgroup_child_t *c, size_t n, uint64_t sess, bool joined,
                      uint64_t self_seq, size_t max, cq__zkgroup_plan_t *ret)
{
    *ret = (cq__zkgroup_plan_t){0};
    if (n > 0)
        qsort(c, n, sizeof c[0], child_cmp);
    size_t self = find_self(c, n, sess, joined, self_seq);
    if (self < n) {
        ret->found = true;
        ret->self_seq = c[self].seq;
    }
    for (size_t i = 0; i < n; i++) {
        if (c[i].sess == sess && i != self) {
            c[i].role = CQ__ZKG_EXTRA;
        } else if (ret->listed == max) {
            c[i].role = CQ__ZKG_CUT;
            ret->truncated = true;
        } else {
            c[i].role = i == self ? CQ__ZKG_SELF : CQ__ZKG_MEMBER;
            ret->listed++;
        }
    }
}
