/* pkg/ds: the u32 map, the intrusive list and the MPSC queue. */
#include "test_pkg.h"

#include "cq_list.h"
#include "cq_map.h"
#include "cq_mpsc.h"
#include "cq_util.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- cq_map ---------------------------------------------------------------------------- */

static void *pv(uintptr_t v)
{
    return (void *)(v * 16u + 16u);
}

void test_map_empty(void **state)
{
    (void)state;
    cq_map_t m;
    cq_map_init(&m);
    assert_int_equal(cq_map_count(&m), 0);
    assert_null(cq_map_get(&m, 0));
    assert_null(cq_map_get(&m, 12345));
    assert_null(cq_map_del(&m, 7));
    uint32_t it = 0, k = 99;
    void *v = pv(1);
    assert_int_equal(cq_map_next(&m, &it, &k, &v), 0);
    assert_int_equal(k, 99); /* ret_* untouched when there is nothing */
    assert_ptr_equal(v, pv(1));
    cq_map_done(&m);
    cq_map_done(&m); /* done on a done map is harmless */
    assert_null(m.slots);
}

void test_map_put_get_replace(void **state)
{
    (void)state;
    cq_map_t m;
    cq_map_init(&m);
    /* Key 0 and UINT32_MAX are ordinary keys: presence is the used flag, not a sentinel key. */
    const uint32_t keys[] = {0, 1, UINT32_MAX, 0x80000000u, 42};
    for (size_t i = 0; i < CQ_ARRAY_SIZE(keys); i++)
        assert_int_equal(cq_map_put(&m, keys[i], pv(i)), 0);
    assert_int_equal(cq_map_count(&m), CQ_ARRAY_SIZE(keys));
    for (size_t i = 0; i < CQ_ARRAY_SIZE(keys); i++)
        assert_ptr_equal(cq_map_get(&m, keys[i]), pv(i));
    /* Replace keeps the count. */
    assert_int_equal(cq_map_put(&m, 0, pv(100)), 0);
    assert_int_equal(cq_map_count(&m), CQ_ARRAY_SIZE(keys));
    assert_ptr_equal(cq_map_get(&m, 0), pv(100));
    /* A NULL value is storable, but get cannot tell it from absent: del reports it. */
    assert_int_equal(cq_map_put(&m, 9, NULL), 0);
    assert_int_equal(cq_map_count(&m), CQ_ARRAY_SIZE(keys) + 1);
    assert_null(cq_map_del(&m, 9));
    assert_int_equal(cq_map_count(&m), CQ_ARRAY_SIZE(keys));
    assert_ptr_equal(cq_map_del(&m, UINT32_MAX), pv(2));
    assert_null(cq_map_get(&m, UINT32_MAX));
    assert_null(cq_map_del(&m, UINT32_MAX));
    assert_int_equal(cq_map_count(&m), CQ_ARRAY_SIZE(keys) - 1);
    cq_map_done(&m);
    assert_int_equal(cq_map_count(&m), 0);
}

void test_map_grow(void **state)
{
    (void)state;
    cq_map_t m;
    cq_map_init(&m);
    const uint32_t n = 20000;
    for (uint32_t k = 0; k < n; k++) {
        assert_int_equal(cq_map_put(&m, k * 7919u, pv(k)), 0);
        /* Power-of-two capacity and load factor <= 3/4 after every insert. */
        assert_int_equal(m.cap & (m.cap - 1), 0);
        assert_true((uint64_t)m.count * 4 <= (uint64_t)m.cap * 3);
    }
    assert_int_equal(cq_map_count(&m), n);
    for (uint32_t k = 0; k < n; k++)
        assert_ptr_equal(cq_map_get(&m, k * 7919u), pv(k));
    assert_null(cq_map_get(&m, 7919u * n));
    /* Delete every other key; the rest must stay reachable. */
    for (uint32_t k = 0; k < n; k += 2)
        assert_ptr_equal(cq_map_del(&m, k * 7919u), pv(k));
    assert_int_equal(cq_map_count(&m), n / 2);
    for (uint32_t k = 0; k < n; k++) {
        if (k % 2)
            assert_ptr_equal(cq_map_get(&m, k * 7919u), pv(k));
        else
            assert_null(cq_map_get(&m, k * 7919u));
    }
    cq_map_done(&m);
}

/* The slot a key lands in when it is alone in an 8-slot map: its home slot for mask 7. */
static uint32_t home8(uint32_t key)
{
    cq_map_t m;
    cq_map_init(&m);
    assert_int_equal(cq_map_put(&m, key, pv(0)), 0);
    assert_int_equal(m.cap, 8);
    uint32_t home = UINT32_MAX;
    for (uint32_t i = 0; i < m.cap; i++)
        if (m.slots[i].used)
            home = i;
    cq_map_done(&m);
    return home;
}

/* Linear probing invariant: no empty slot between an entry's home and the entry. */
static void check_chains8(const cq_map_t *m)
{
    assert_int_equal(m->cap, 8);
    uint32_t used = 0;
    for (uint32_t i = 0; i < 8; i++) {
        if (!m->slots[i].used)
            continue;
        used++;
        for (uint32_t j = home8(m->slots[i].key); j != i; j = (j + 1) & 7)
            assert_true(m->slots[j].used);
    }
    assert_int_equal(used, m->count);
}

/* A cluster that wraps from slot 7 to slot 0, with keys of two different homes, deleted in
 * every order: backward-shift must move the right entries across the wrap. */
void test_map_delete_wraparound_cluster(void **state)
{
    (void)state;
    uint32_t at7[3] = {0}, at0[1] = {0}, at1[1] = {0}, n7 = 0, n0 = 0, n1 = 0;
    for (uint32_t k = 1; n7 < 3 || n0 < 1 || n1 < 1; k++) {
        uint32_t h = home8(k);
        if (h == 7 && n7 < 3)
            at7[n7++] = k;
        else if (h == 0 && n0 < 1)
            at0[n0++] = k;
        else if (h == 1 && n1 < 1)
            at1[n1++] = k;
    }
    const uint32_t keys[5] = {at7[0], at7[1], at7[2], at0[0], at1[0]};
    /* Every permutation of deletion order (5! = 120). */
    int perm[5] = {0, 1, 2, 3, 4};
    int c[5] = {0};
    int count = 0;
    for (int i = 0;;) {
        cq_map_t m;
        cq_map_init(&m);
        for (int j = 0; j < 5; j++)
            assert_int_equal(cq_map_put(&m, keys[j], pv((uintptr_t)j)), 0);
        check_chains8(&m);
        /* 3 keys homed at 7 fill 7, 0, 1; the 0 and 1 keys are pushed to 2 and 3. */
        assert_true(m.slots[7].used && m.slots[0].used && m.slots[1].used);
        bool gone[5] = {false};
        for (int d = 0; d < 5; d++) {
            int victim = perm[d];
            assert_ptr_equal(cq_map_del(&m, keys[victim]), pv((uintptr_t)victim));
            gone[victim] = true;
            check_chains8(&m);
            for (int j = 0; j < 5; j++) {
                if (gone[j])
                    assert_null(cq_map_get(&m, keys[j]));
                else
                    assert_ptr_equal(cq_map_get(&m, keys[j]), pv((uintptr_t)j));
            }
        }
        assert_int_equal(cq_map_count(&m), 0);
        cq_map_done(&m);
        count++;
        /* Heap's algorithm, iterative. */
        while (i < 5 && c[i] >= i) {
            c[i] = 0;
            i++;
        }
        if (i >= 5)
            break;
        int a = (i % 2) ? c[i] : 0;
        int t = perm[a];
        perm[a] = perm[i];
        perm[i] = t;
        c[i]++;
        i = 0;
    }
    assert_int_equal(count, 120);
}

#define REF_KEYS 512u

typedef struct ref {
    bool present[REF_KEYS];
    void *val[REF_KEYS];
    uint32_t count;
} ref_t;

static void check_against_ref(const cq_map_t *m, const ref_t *r, uint32_t base)
{
    assert_int_equal(cq_map_count(m), r->count);
    for (uint32_t k = 0; k < REF_KEYS; k++) {
        void *v = cq_map_get(m, base + k);
        assert_ptr_equal(v, r->present[k] ? r->val[k] : NULL);
    }
    /* Iteration yields each present key exactly once. */
    bool seen[REF_KEYS] = {false};
    uint32_t it = 0, k, n = 0;
    void *v;
    while (cq_map_next(m, &it, &k, &v)) {
        uint32_t i = k - base;
        assert_true(i < REF_KEYS);
        assert_true(r->present[i]);
        assert_false(seen[i]);
        assert_ptr_equal(v, r->val[i]);
        seen[i] = true;
        n++;
    }
    assert_int_equal(n, r->count);
}

/* Random put/replace/delete against a plain array, over several key ranges and seeds: small
 * ranges keep the map small and dense, so clusters, wraps and shifts happen all the time. */
void test_map_random_vs_reference(void **state)
{
    (void)state;
    static const struct {
        uint64_t seed;
        uint32_t range; /* keys base .. base + range - 1 */
        uint32_t base;
        unsigned del_pct;
    } runs[] = {
        {1, 6, 0, 50},     {2, 12, 0, 45},
        {3, 24, 1000, 50}, {4, 100, 0, 40},
        {5, 512, 0, 30},   {6, 512, UINT32_MAX - 511, 50},
        {7, 64, 0, 60},    {8, 300, 0x7ffffff0u, 35},
    };
    static ref_t r;
    for (size_t run = 0; run < CQ_ARRAY_SIZE(runs); run++) {
        uint64_t s = runs[run].seed * 0x9E3779B97F4A7C15ULL;
        cq_map_t m;
        cq_map_init(&m);
        memset(&r, 0, sizeof(r));
        uint32_t base = runs[run].base;
        for (int op = 0; op < 20000; op++) {
            uint32_t k = (uint32_t)(test_rand(&s) % runs[run].range);
            if (test_rand(&s) % 100 < runs[run].del_pct) {
                void *got = cq_map_del(&m, base + k);
                assert_ptr_equal(got, r.present[k] ? r.val[k] : NULL);
                if (r.present[k])
                    r.count--;
                r.present[k] = false;
                r.val[k] = NULL;
            } else {
                void *v = pv((uintptr_t)op);
                assert_int_equal(cq_map_put(&m, base + k, v), 0);
                if (!r.present[k])
                    r.count++;
                r.present[k] = true;
                r.val[k] = v;
            }
            if (op % 97 == 0 || runs[run].range <= 24)
                check_against_ref(&m, &r, base);
        }
        check_against_ref(&m, &r, base);
        /* Drain it all. */
        for (uint32_t k = 0; k < REF_KEYS; k++) {
            if (!r.present[k])
                continue;
            assert_ptr_equal(cq_map_del(&m, base + k), r.val[k]);
            r.present[k] = false;
            r.count--;
        }
        check_against_ref(&m, &r, base);
        cq_map_done(&m);
    }
}

void test_map_iterate(void **state)
{
    (void)state;
    cq_map_t m;
    cq_map_init(&m);
    uint64_t sum = 0;
    for (uint32_t k = 1; k <= 1000; k++)
        assert_int_equal(cq_map_put(&m, k, pv(k)), 0);
    uint32_t it = 0, k, n = 0;
    void *v;
    while (cq_map_next(&m, &it, &k, &v)) {
        assert_ptr_equal(v, pv(k));
        sum += k;
        n++;
    }
    assert_int_equal(n, 1000);
    assert_int_equal(sum, 1000u * 1001u / 2u);
    /* Exhausted iterators stay exhausted; NULL outputs are allowed. */
    assert_int_equal(cq_map_next(&m, &it, NULL, NULL), 0);
    it = 0;
    assert_int_equal(cq_map_next(&m, &it, NULL, NULL), 1);
    cq_map_done(&m);
}

/* ---- cq_list --------------------------------------------------------------------------- */

typedef struct item {
    int id;
    cq_list_t link;
} item_t;

static void expect_order(cq_list_t *head, const int *ids, int n)
{
    cq_list_t *pos;
    int i = 0;
    cq_list_foreach(pos, head)
    {
        assert_true(i < n);
        assert_int_equal(cq_container_of(pos, item_t, link)->id, ids[i]);
        i++;
    }
    assert_int_equal(i, n);
    /* And backwards through prev. */
    i = n;
    for (pos = head->prev; pos != head; pos = pos->prev)
        assert_int_equal(cq_container_of(pos, item_t, link)->id, ids[--i]);
    assert_int_equal(i, 0);
}

void test_list_basics(void **state)
{
    (void)state;
    cq_list_t head;
    item_t it[5];
    cq_list_init(&head);
    assert_true(cq_list_empty(&head));
    for (int i = 0; i < 5; i++) {
        it[i].id = i;
        cq_list_init(&it[i].link);
    }
    cq_list_insert_tail(&head, &it[1].link);
    cq_list_insert_tail(&head, &it[2].link);
    cq_list_insert_head(&head, &it[0].link);
    cq_list_insert_tail(&head, &it[3].link);
    assert_false(cq_list_empty(&head));
    expect_order(&head, (const int[]){0, 1, 2, 3}, 4);

    cq_list_remove(&it[2].link);
    expect_order(&head, (const int[]){0, 1, 3}, 3);
    /* Removed nodes point to themselves, so a second remove is harmless. */
    assert_ptr_equal(it[2].link.next, &it[2].link);
    cq_list_remove(&it[2].link);
    expect_order(&head, (const int[]){0, 1, 3}, 3);
    /* Removing an unlinked (initialised) node is harmless too. */
    cq_list_remove(&it[4].link);
    expect_order(&head, (const int[]){0, 1, 3}, 3);

    cq_list_remove(&it[0].link);
    cq_list_remove(&it[3].link);
    expect_order(&head, (const int[]){1}, 1);
    cq_list_remove(&it[1].link);
    assert_true(cq_list_empty(&head));
}

void test_list_foreach_safe_remove(void **state)
{
    (void)state;
    cq_list_t head, *pos, *tmp;
    item_t it[10];
    cq_list_init(&head);
    for (int i = 0; i < 10; i++) {
        it[i].id = i;
        cq_list_insert_tail(&head, &it[i].link);
    }
    /* Remove the odd ones while walking. */
    cq_list_foreach_safe(pos, tmp, &head)
    {
        if (cq_container_of(pos, item_t, link)->id % 2)
            cq_list_remove(pos);
    }
    expect_order(&head, (const int[]){0, 2, 4, 6, 8}, 5);
    cq_list_foreach_safe(pos, tmp, &head) cq_list_remove(pos);
    assert_true(cq_list_empty(&head));
}

/* ---- cq_mpsc --------------------------------------------------------------------------- */

typedef struct msg {
    cq_mpsc_node_t node;
    uint32_t producer;
    uint32_t seq;
} msg_t;

static msg_t *msg_of(cq_mpsc_node_t *n)
{
    return n ? cq_container_of(n, msg_t, node) : NULL;
}

void test_mpsc_single_thread(void **state)
{
    (void)state;
    cq_mpsc_t q;
    msg_t m[8];
    cq_mpsc_init(&q);
    assert_null(cq_mpsc_pop(&q));
    for (uint32_t round = 0; round < 3; round++) {
        for (uint32_t i = 0; i < 8; i++) {
            m[i].seq = i;
            cq_mpsc_push(&q, &m[i].node);
        }
        for (uint32_t i = 0; i < 8; i++)
            assert_int_equal(msg_of(cq_mpsc_pop(&q))->seq, i);
        assert_null(cq_mpsc_pop(&q));
        assert_null(cq_mpsc_pop(&q));
    }
    /* Interleaved: push 1, pop 1 (the last-node path through the stub), repeatedly. */
    for (uint32_t i = 0; i < 8; i++) {
        cq_mpsc_push(&q, &m[i].node);
        assert_ptr_equal(cq_mpsc_pop(&q), &m[i].node);
        assert_null(cq_mpsc_pop(&q));
    }
}

/* A producer stalled between the exchange and the link makes pop return NULL; once the link
 * lands, everything comes out in order. Simulated by doing the first half of a push by hand. */
void test_mpsc_half_push(void **state)
{
    (void)state;
    cq_mpsc_t q;
    msg_t a = {.seq = 1}, b = {.seq = 2}, c = {.seq = 3};
    cq_mpsc_init(&q);
    cq_mpsc_push(&q, &a.node);
    cq_mpsc_push(&q, &b.node);
    atomic_store(&c.node.next, NULL);
    cq_mpsc_node_t *prev = atomic_exchange(&q.head, &c.node);
    assert_ptr_equal(prev, &b.node);
    assert_ptr_equal(cq_mpsc_pop(&q), &a.node);
    assert_null(cq_mpsc_pop(&q)); /* b is the tail, c is not linked yet */
    assert_null(cq_mpsc_pop(&q));
    atomic_store(&prev->next, &c.node); /* the stalled producer resumes */
    assert_ptr_equal(cq_mpsc_pop(&q), &b.node);
    assert_ptr_equal(cq_mpsc_pop(&q), &c.node);
    assert_null(cq_mpsc_pop(&q));
}

#define MPSC_PRODUCERS    4
#define MPSC_PER_PRODUCER 200000u

typedef struct producer {
    pthread_t th;
    cq_mpsc_t *q;
    msg_t *msgs;
    uint32_t id;
    atomic_int *go;
} producer_t;

static void *produce(void *arg)
{
    producer_t *p = arg;
    while (!atomic_load(p->go))
        sched_yield();
    for (uint32_t i = 0; i < MPSC_PER_PRODUCER; i++) {
        p->msgs[i].producer = p->id;
        p->msgs[i].seq = i;
        cq_mpsc_push(p->q, &p->msgs[i].node);
        if ((i & 1023) == 0)
            sched_yield();
    }
    return NULL;
}

void test_mpsc_4_producers(void **state)
{
    (void)state;
    static cq_mpsc_t q;
    producer_t prod[MPSC_PRODUCERS];
    uint32_t next[MPSC_PRODUCERS] = {0};
    atomic_int go = 0;
    cq_mpsc_init(&q);
    for (uint32_t i = 0; i < MPSC_PRODUCERS; i++) {
        prod[i].q = &q;
        prod[i].id = i;
        prod[i].go = &go;
        prod[i].msgs = calloc(MPSC_PER_PRODUCER, sizeof(msg_t));
        assert_non_null(prod[i].msgs);
        assert_int_equal(pthread_create(&prod[i].th, NULL, produce, &prod[i]), 0);
    }
    atomic_store(&go, 1);
    uint64_t got = 0, empty_polls = 0;
    const uint64_t total = (uint64_t)MPSC_PRODUCERS * MPSC_PER_PRODUCER;
    while (got < total) {
        msg_t *m = msg_of(cq_mpsc_pop(&q));
        if (!m) {
            empty_polls++; /* empty, or a producer mid-push: retry */
            if ((empty_polls & 63) == 0)
                sched_yield();
            continue;
        }
        assert_true(m->producer < MPSC_PRODUCERS);
        /* FIFO per producer, no loss and no duplicates: exactly the next sequence number. */
        assert_int_equal(m->seq, next[m->producer]);
        assert_ptr_equal(m, &prod[m->producer].msgs[m->seq]);
        next[m->producer]++;
        got++;
    }
    for (uint32_t i = 0; i < MPSC_PRODUCERS; i++) {
        assert_int_equal(pthread_join(prod[i].th, NULL), 0);
        assert_int_equal(next[i], MPSC_PER_PRODUCER);
    }
    assert_null(cq_mpsc_pop(&q));
    for (uint32_t i = 0; i < MPSC_PRODUCERS; i++)
        free(prod[i].msgs);
}
