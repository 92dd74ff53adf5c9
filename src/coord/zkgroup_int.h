/* zkgroup_int.h - the pure parts of the group membership (cq_zkgroup.h): paths, names, the
 * member node's name, and what a listing means (zkgroup.c; zk.c does the I/O). */
#ifndef CQ_ZKGROUP_INT_H
#define CQ_ZKGROUP_INT_H

#include "cq_zkgroup.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CQ__ZKGROUP_PREFIX "m_"
/* "m_" + 16 hex + "_" + 10 digits: ZooKeeper's counter is printed %010d (it would turn
 * negative after 2^31 creations under one parent: such a name does not parse). */
#define CQ__ZKGROUP_CHILD_LEN (2 + 16 + 1 + 10)
/* Room for conf.path and a member's or a home's name under it. */
#define CQ__ZKGROUP_FULL_MAX (CQ_ZKGROUP_PATH_MAX + 8 + CQ_ZKGROUP_NAME_MAX + 1)

/* 0 when path is a usable parent of the members (see conf.path), else -EINVAL. */
int cq__zkgroup_path_check(const char *path);
/* 0 when name is a home's name (1..CQ_ZKGROUP_NAME_MAX of [A-Za-z0-9_.-], not "." or ".."). */
int cq__zkgroup_name_check(const char *name);

/* <parent of path>/homes, or <parent of path>/homes/<name> when name is not NULL, into out:
 * 0, or -EINVAL (a bad path or name, or out too small). "/a/members" -> "/a/homes/x";
 * "/members" -> "/homes/x". */
int cq__zkgroup_homes_path(const char *path, const char *name, char *out, size_t outlen);

/* What the create of our member node is given: "<path>/m_<sess, 16 hex>_" (ZooKeeper appends
 * the seq). 0 or -EINVAL (out too small). */
int cq__zkgroup_prefix(const char *path, uint64_t sess, char *out, size_t outlen);

typedef enum {
    CQ__ZKG_MEMBER, /* in the list */
    CQ__ZKG_SELF,   /* in the list: ours */
    CQ__ZKG_EXTRA,  /* ours too, but not the one we keep (a create retried): delete it */
    CQ__ZKG_CUT,    /* beyond CQ_ZKGROUP_MEMBERS_MAX: left out */
} cq__zkgroup_role_t;

typedef struct cq__zkgroup_child {
    uint64_t sess;
    uint64_t seq;
    cq__zkgroup_role_t role; /* set by cq__zkgroup_plan */
} cq__zkgroup_child_t;

/* A child's name (no path) -> its session and seq; false when it is not a member's name. */
bool cq__zkgroup_child_parse(const char *name, cq__zkgroup_child_t *ret);
/* "<path>/<child's name>" into out: 0 or -EINVAL (out too small). */
int cq__zkgroup_child_path(const char *path, const cq__zkgroup_child_t *c, char *out,
                           size_t outlen);

typedef struct cq__zkgroup_plan {
    size_t listed;  /* children in the list (MEMBER or SELF) */
    bool truncated; /* some were CUT */
    bool found;     /* ours is among the children (its seq in self_seq) */
    uint64_t self_seq;
} cq__zkgroup_plan_t;

/* Sorts c[0..n) by seq and sets each child's role. Ours are the children of session sess:
 * the one we keep is self_seq when joined (found false when it is not there), else the lowest;
 * the others are EXTRA. At most max children, in seq order, are listed; the rest are CUT. */
void cq__zkgroup_plan(cq__zkgroup_child_t *c, size_t n, uint64_t sess, bool joined,
                      uint64_t self_seq, size_t max, cq__zkgroup_plan_t *ret);

#endif
