/* test_smap.c - pkg/ds/cq_smap: the string-keyed map, exact and ASCII case-folding, against a
 * linear reference (the strcasecmp scan it replaces), with growth, deletion clusters,
 * iteration and a fail-N allocation loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cq_smap.h"
#include "test_alloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void test_empty(void **state)
{
    (void)state;
    cq_smap_t m;
    cq_smap_init(&m, true);
    assert_int_equal(cq_smap_count(&m), 0);
    assert_null(cq_smap_get(&m, "x"));
    assert_null(cq_smap_del(&m, "x"));
    uint32_t it = 0;
    assert_false(cq_smap_next(&m, &it, NULL, NULL));
    cq_smap_done(&m);
    cq_smap_done(&m); /* twice is fine */
}

static void test_fold_and_exact(void **state)
{
    (void)state;
    cq_smap_t f, e;
    int a = 1, b = 2, c = 3;
    cq_smap_init(&f, true);
    cq_smap_init(&e, false);
    assert_int_equal(cq_smap_put(&f, "Orders_1", &a), 0);
    assert_int_equal(cq_smap_put(&e, "Orders_1", &a), 0);
    assert_ptr_equal(cq_smap_get(&f, "orders_1"), &a);
    assert_ptr_equal(cq_smap_get(&f, "ORDERS_1"), &a);
    assert_null(cq_smap_get(&f, "orders_"));
    assert_null(cq_smap_get(&f, "orders_12"));
    assert_null(cq_smap_get(&e, "orders_1"));
    assert_ptr_equal(cq_smap_get(&e, "Orders_1"), &a);
    /* '_' (0x5f) and '[' (0x5b) are not letters: never folded */
    assert_null(cq_smap_get(&f, "Orders\x7f"
                                "1"));
    assert_int_equal(cq_smap_put(&f, "a[", &c), 0);
    assert_null(cq_smap_get(&f, "a{"));
    /* replacing keeps one entry and the first key pointer */
    assert_int_equal(cq_smap_put(&f, "ORDERS_1", &b), 0);
    assert_int_equal(cq_smap_count(&f), 2);
    assert_ptr_equal(cq_smap_get(&f, "orders_1"), &b);
    const char *k = NULL;
    void *v = NULL;
    uint32_t it = 0;
    while (cq_smap_next(&f, &it, &k, &v) && v != &b) {
    }
    assert_string_equal(k, "Orders_1");
    assert_ptr_equal(cq_smap_del(&f, "oRdErS_1"), &b);
    assert_null(cq_smap_get(&f, "Orders_1"));
    assert_int_equal(cq_smap_count(&f), 1);
    cq_smap_done(&f);
    cq_smap_done(&e);
}

/* ---- against the linear scan ---------------------------------------------------------------- */

#define NKEYS 3000

typedef struct ref {
    char name[24];
    int present;
} ref_t;

static ref_t keys[NKEYS];

/* The linear reference: the first present key equal to name, ignoring ASCII case. */
static ref_t *ref_get(const char *name)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (keys[i].present && strcasecmp(keys[i].name, name) == 0)
            return &keys[i];
    return NULL;
}

/* Spells key i in a random mix of cases. */
static void spell(size_t i, char *out, size_t cap, unsigned *seed)
{
    snprintf(out, cap, "%s", keys[i].name);
    for (char *p = out; *p; p++)
        if ((rand_r(seed) & 1) && *p >= 'a' && *p <= 'z')
            *p = (char)(*p - 'a' + 'A');
}

static void test_many_mixed_case(void **state)
{
    (void)state;
    unsigned seed = 12345;
    cq_smap_t m;
    cq_smap_init(&m, true);
    for (size_t i = 0; i < NKEYS; i++) {
        snprintf(keys[i].name, sizeof(keys[i].name), "topic_%zu_x", i * 7919 % 100003);
        keys[i].present = 0;
    }
    for (int round = 0; round < 60000; round++) {
        size_t i = (size_t)rand_r(&seed) % NKEYS;
        char q[24];
        spell(i, q, sizeof(q), &seed);
        switch (rand_r(&seed) % 3) {
        case 0:
            if (!keys[i].present) { /* stored under its own spelling, found under any */
                assert_int_equal(cq_smap_put(&m, keys[i].name, &keys[i]), 0);
                keys[i].present = 1;
            }
            break;
        case 1:
            assert_ptr_equal(cq_smap_del(&m, q), ref_get(q));
            keys[i].present = 0;
            break;
        default:
            assert_ptr_equal(cq_smap_get(&m, q), ref_get(q));
            break;
        }
    }
    uint32_t n = 0, it = 0;
    const char *k;
    void *v;
    while (cq_smap_next(&m, &it, &k, &v)) {
        assert_ptr_equal(v, ref_get(k));
        assert_ptr_equal(k, ((ref_t *)v)->name);
        n++;
    }
    assert_int_equal(n, cq_smap_count(&m));
    for (size_t i = 0; i < NKEYS; i++) {
        char q[24];
        spell(i, q, sizeof(q), &seed);
        assert_ptr_equal(cq_smap_get(&m, q), keys[i].present ? &keys[i] : NULL);
    }
    cq_smap_done(&m);
}

/* Deleting inside a cluster that wraps around the table end keeps every key findable. */
static void test_delete_clusters(void **state)
{
    (void)state;
    cq_smap_t m;
    char names[200][16];
    cq_smap_init(&m, false);
    for (int i = 0; i < 200; i++) {
        snprintf(names[i], sizeof(names[i]), "k%d", i);
        assert_int_equal(cq_smap_put(&m, names[i], names[i]), 0);
    }
    for (int i = 0; i < 200; i += 3)
        assert_ptr_equal(cq_smap_del(&m, names[i]), names[i]);
    for (int i = 0; i < 200; i++)
        assert_ptr_equal(cq_smap_get(&m, names[i]), i % 3 ? names[i] : NULL);
    assert_int_equal(cq_smap_count(&m), 200 - 67);
    cq_smap_done(&m);
}

static void test_fail_n(void **state)
{
    (void)state;
    char names[100][16];
    for (int i = 0; i < 100; i++)
        snprintf(names[i], sizeof(names[i]), "Name%d", i);
    for (unsigned long n = 1;; n++) {
        cq_smap_t m;
        cq_smap_init(&m, true);
        test_alloc_install(n, false);
        int r = 0, put = 0;
        for (int i = 0; i < 100 && r == 0; i++)
            if ((r = cq_smap_put(&m, names[i], names[i])) == 0)
                put++;
        assert_true(r == 0 || r == -ENOMEM);
        assert_int_equal(cq_smap_count(&m), put); /* a failed put changed nothing */
        for (int i = 0; i < put; i++)
            assert_ptr_equal(cq_smap_get(&m, names[i]), names[i]);
        cq_smap_done(&m);
        if (test_alloc_round_end(r == 0))
            break;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),           cmocka_unit_test(test_fold_and_exact),
        cmocka_unit_test(test_many_mixed_case), cmocka_unit_test(test_delete_clusters),
        cmocka_unit_test(test_fail_n),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
