/* test_zkgroup.c - src/coord/zkgroup.c, the group membership's pure parts: the paths it builds
 * (and the bounds it keeps), member node names read strictly, and what a listing means: the
 * order, ours, our doubles, and the cap. tests/integration/test_it_zkgroup.c runs the rest on
 * a real ensemble. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "zkgroup_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void test_path_check(void **state)
{
    (void)state;
    assert_int_equal(cq__zkgroup_path_check("/m"), 0);
    assert_int_equal(cq__zkgroup_path_check("/chanq/relay/c1/members"), 0);
    assert_int_equal(cq__zkgroup_path_check("/a/.b/..c"), 0); /* dots inside a name */
    const char *bad[] = {"",      "/",      "m",       "m/", "/m/",  "//m",
                         "/a//b", "/a/./b", "/a/../b", "/.", "/a/.."};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(cq__zkgroup_path_check(bad[i]), -EINVAL);
    assert_int_equal(cq__zkgroup_path_check(NULL), -EINVAL);
    /* The bound: CQ_ZKGROUP_PATH_MAX - 1 bytes is the longest. */
    char p[CQ_ZKGROUP_PATH_MAX + 1];
    memset(p, 'x', sizeof p);
    p[0] = '/';
    p[CQ_ZKGROUP_PATH_MAX - 1] = '\0';
    assert_int_equal(cq__zkgroup_path_check(p), 0);
    p[CQ_ZKGROUP_PATH_MAX - 1] = 'x';
    p[CQ_ZKGROUP_PATH_MAX] = '\0';
    assert_int_equal(cq__zkgroup_path_check(p), -EINVAL);
}

static void test_name_check(void **state)
{
    (void)state;
    assert_int_equal(cq__zkgroup_name_check("GLOBAL"), 0);
    assert_int_equal(cq__zkgroup_name_check("spatial-ctl.0_A9"), 0);
    assert_int_equal(cq__zkgroup_name_check("..."), 0);
    const char *bad[] = {"", ".", "..", "a/b", "a b", "é", "a\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(cq__zkgroup_name_check(bad[i]), -EINVAL);
    assert_int_equal(cq__zkgroup_name_check(NULL), -EINVAL);
    char n[CQ_ZKGROUP_NAME_MAX + 2];
    memset(n, 'a', sizeof n);
    n[CQ_ZKGROUP_NAME_MAX] = '\0';
    assert_int_equal(cq__zkgroup_name_check(n), 0);
    n[CQ_ZKGROUP_NAME_MAX] = 'a';
    n[CQ_ZKGROUP_NAME_MAX + 1] = '\0';
    assert_int_equal(cq__zkgroup_name_check(n), -EINVAL);
}

static void test_homes_path(void **state)
{
    (void)state;
    char out[CQ__ZKGROUP_FULL_MAX];
    assert_int_equal(cq__zkgroup_homes_path("/chanq/relay/c1/members", "GLOBAL", out, sizeof out),
                     0);
    assert_string_equal(out, "/chanq/relay/c1/homes/GLOBAL");
    assert_int_equal(cq__zkgroup_homes_path("/chanq/relay/c1/members", NULL, out, sizeof out), 0);
    assert_string_equal(out, "/chanq/relay/c1/homes");
    assert_int_equal(cq__zkgroup_homes_path("/members", "x", out, sizeof out), 0);
    assert_string_equal(out, "/homes/x");
    assert_int_equal(cq__zkgroup_homes_path("/members", "a/b", out, sizeof out), -EINVAL);
    assert_int_equal(cq__zkgroup_homes_path("members", "x", out, sizeof out), -EINVAL);
    /* out too small: refused, not cut */
    char small[12];
    assert_int_equal(cq__zkgroup_homes_path("/a/members", "GLO", small, sizeof small), -EINVAL);
    assert_int_equal(cq__zkgroup_homes_path("/a/members", "GL", small, sizeof small), 0);
    assert_string_equal(small, "/a/homes/GL"); /* 11 bytes and the NUL */
    /* The longest path and name fit the buffer the group keeps. */
    char p[CQ_ZKGROUP_PATH_MAX], n[CQ_ZKGROUP_NAME_MAX + 1];
    memset(p, 'p', sizeof p);
    p[0] = '/';
    p[1] = 'q';
    p[2] = '/';
    p[sizeof p - 1] = '\0';
    memset(n, 'n', sizeof n);
    n[sizeof n - 1] = '\0';
    assert_int_equal(cq__zkgroup_homes_path(p, n, out, sizeof out), 0);
    assert_int_equal(strlen(out), 2 + strlen("/homes/") + CQ_ZKGROUP_NAME_MAX);
}

static void test_names(void **state)
{
    (void)state;
    char out[CQ__ZKGROUP_FULL_MAX];
    assert_int_equal(cq__zkgroup_prefix("/g/members", 0x100004cf10c0000ULL, out, sizeof out), 0);
    assert_string_equal(out, "/g/members/m_0100004cf10c0000_");
    cq__zkgroup_child_t c;
    assert_true(cq__zkgroup_child_parse("m_0100004cf10c0000_0000000012", &c));
    assert_int_equal(c.sess, 0x100004cf10c0000ULL);
    assert_int_equal(c.seq, 12);
    assert_true(cq__zkgroup_child_parse("m_ffffffffffffffff_9999999999", &c));
    assert_int_equal(c.sess, UINT64_MAX);
    assert_int_equal(c.seq, 9999999999ULL);
    assert_int_equal(cq__zkgroup_child_path("/g/members", &c, out, sizeof out), 0);
    assert_string_equal(out, "/g/members/m_ffffffffffffffff_9999999999");
    c = (cq__zkgroup_child_t){.sess = 7, .seq = 3};
    assert_int_equal(cq__zkgroup_child_path("/g", &c, out, sizeof out), 0);
    assert_string_equal(out, "/g/m_0000000000000007_0000000003");
    const char *bad[] = {
        "",
        "m_",
        "m_0100004cf10c0000_000000001",   /* 9 digits */
        "m_0100004cf10c0000_00000000123", /* 11 */
        "m_0100004cf10c000_00000000123",  /* 15 hex */
        "m_0100004CF10C0000_0000000012",  /* upper case */
        "m_0100004cf10c0000-0000000012",  /* separator */
        "x_0100004cf10c0000_0000000012",  /* prefix */
        "m_0100004cf10c0000_-000000012",  /* a counter past 2^31 */
        "m_0100004cf10c0000_+000000012",  /* a sign */
        "m_0100004cf10c0000_ 000000012",  /* a space */
        "m_0x00004cf10c0000_0000000012",  /* 0x */
        "m_0000000000000012",             /* the coord runtime's member names */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(cq__zkgroup_child_parse(bad[i], &c));
    char small[20];
    assert_int_equal(cq__zkgroup_prefix("/g/members", 1, small, sizeof small), -EINVAL);
    assert_int_equal(cq__zkgroup_child_path("/g", &c, small, sizeof small), -EINVAL);
}

/* The roles as one string, in the sorted order: "seq:role ..." with M, S, X (extra), C (cut). */
static const char *roles(const cq__zkgroup_child_t *c, size_t n)
{
    static char out[512];
    size_t off = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        off += (size_t)snprintf(out + off, sizeof out - off, "%s%llu:%c", i ? " " : "",
                                (unsigned long long)c[i].seq, "MSXC"[c[i].role]);
    return out;
}

static void test_plan(void **state)
{
    (void)state;
    cq__zkgroup_plan_t p;
    /* Sorted by seq; ours (session 9) flagged when joined as seq 5. */
    cq__zkgroup_child_t c[] = {{1, 7, 0}, {9, 5, 0}, {2, 0, 0}, {3, 12, 0}};
    cq__zkgroup_plan(c, 4, 9, true, 5, CQ_ZKGROUP_MEMBERS_MAX, &p);
    assert_string_equal(roles(c, 4), "0:M 5:S 7:M 12:M");
    assert_int_equal(p.listed, 4);
    assert_true(p.found);
    assert_int_equal(p.self_seq, 5);
    assert_false(p.truncated);

    /* Joined as 5, but the list has another of ours (a create retried): that one goes. */
    cq__zkgroup_child_t d[] = {{9, 8, 0}, {1, 7, 0}, {9, 5, 0}};
    cq__zkgroup_plan(d, 3, 9, true, 5, CQ_ZKGROUP_MEMBERS_MAX, &p);
    assert_string_equal(roles(d, 3), "5:S 7:M 8:X");
    assert_int_equal(p.listed, 2);
    assert_true(p.found);

    /* Not sure we joined: the lowest of ours is kept, the others go. */
    cq__zkgroup_child_t e[] = {{9, 8, 0}, {1, 7, 0}, {9, 5, 0}};
    cq__zkgroup_plan(e, 3, 9, false, 0, CQ_ZKGROUP_MEMBERS_MAX, &p);
    assert_string_equal(roles(e, 3), "5:S 7:M 8:X");
    assert_true(p.found);
    assert_int_equal(p.self_seq, 5);

    /* Joined as 5, but it is gone (deleted by someone): not found; the other of ours goes. */
    cq__zkgroup_child_t f[] = {{9, 8, 0}, {1, 7, 0}};
    cq__zkgroup_plan(f, 2, 9, true, 5, CQ_ZKGROUP_MEMBERS_MAX, &p);
    assert_string_equal(roles(f, 2), "7:M 8:X");
    assert_false(p.found);
    assert_int_equal(p.listed, 1);

    /* Nothing of ours, and an empty list. */
    cq__zkgroup_plan(f, 1, 4, false, 0, CQ_ZKGROUP_MEMBERS_MAX, &p);
    assert_false(p.found);
    assert_int_equal(p.listed, 1);
    cq__zkgroup_plan(NULL, 0, 4, false, 0, CQ_ZKGROUP_MEMBERS_MAX, &p);
    assert_false(p.found);
    assert_int_equal(p.listed, 0);
    assert_false(p.truncated);
}

/* The cap: the lowest seqs are listed, the rest CUT (ours too, when beyond it); our doubles
 * do not count against it. */
static void test_plan_cap(void **state)
{
    (void)state;
    cq__zkgroup_plan_t p;
    cq__zkgroup_child_t c[] = {{1, 4, 0}, {9, 3, 0}, {2, 2, 0}, {9, 1, 0}, {3, 0, 0}};
    cq__zkgroup_plan(c, 5, 9, true, 3, 3, &p);
    assert_string_equal(roles(c, 5), "0:M 1:X 2:M 3:S 4:C");
    assert_int_equal(p.listed, 3);
    assert_true(p.truncated);
    assert_true(p.found);

    cq__zkgroup_child_t d[] = {{1, 4, 0}, {9, 3, 0}, {2, 2, 0}, {3, 0, 0}};
    cq__zkgroup_plan(d, 4, 9, true, 3, 2, &p);
    assert_string_equal(roles(d, 4), "0:M 2:M 3:C 4:C");
    assert_int_equal(p.listed, 2);
    assert_true(p.truncated);
    assert_true(p.found); /* still ours: not joined again */

    /* Exactly at the cap: nothing cut. */
    cq__zkgroup_plan(d, 4, 9, true, 3, 4, &p);
    assert_string_equal(roles(d, 4), "0:M 2:M 3:S 4:M");
    assert_false(p.truncated);

    /* The real cap over 1030 children. */
    static cq__zkgroup_child_t big[CQ_ZKGROUP_MEMBERS_MAX + 6];
    size_t n = sizeof big / sizeof big[0];
    for (size_t i = 0; i < n; i++)
        big[i] = (cq__zkgroup_child_t){.sess = 100 + i, .seq = n - 1 - i};
    cq__zkgroup_plan(big, n, 100 + n - 1, true, 0, CQ_ZKGROUP_MEMBERS_MAX, &p);
    assert_int_equal(p.listed, CQ_ZKGROUP_MEMBERS_MAX);
    assert_true(p.truncated);
    assert_int_equal(big[0].role, CQ__ZKG_SELF);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(big[i].seq, i);
        if (i > 0)
            assert_int_equal(big[i].role,
                             i < CQ_ZKGROUP_MEMBERS_MAX ? CQ__ZKG_MEMBER : CQ__ZKG_CUT);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_check), cmocka_unit_test(test_name_check),
        cmocka_unit_test(test_homes_path), cmocka_unit_test(test_names),
        cmocka_unit_test(test_plan),       cmocka_unit_test(test_plan_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
