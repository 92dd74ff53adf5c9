/* fuzz_wsup - the WebSocket upgrade parser (src/transport/ws/cq_wsup) on arbitrary bytes.
 *
 * The input is what a connection would read before the upgrade. It is parsed under two
 * configurations (defaults; path "/chat" with an Origin allow-list and a 512-byte limit), each
 * fed whole and in chunks whose sizes are derived from the input. Invariants: every chunking
 * gives the same result, status and head length; the bytes reported as used never exceed what
 * was fed; an error has one of the documented statuses and a reason; a complete request has
 * the fields its kind requires; every response builder succeeds for it. */
#include "fuzz_common.h"

#include "cq_err.h"
#include "cq_wsup.h"

#include <errno.h>
#include <string.h>

#define FUZZ_MAX_INPUT (1u << 16)

typedef struct outcome {
    int r, status;
    size_t head; /* bytes of the input taken by the head (complete requests) */
    uint64_t fields;
} outcome_t;

static uint64_t fields_hash(const cq_wsup_request_t *q)
{
    const char *s[] = {q->path, q->query, q->host, q->origin, q->key, q->protocol};
    uint64_t h = q->head;
    for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++)
        h = (h ^ (s[i] ? fuzz_hash((const uint8_t *)s[i], strlen(s[i])) : i)) * 0x100000001b3ULL;
    return h;
}

static void check_request(const cq_wsup_t *p, int r)
{
    const cq_wsup_request_t *q = cq_wsup_request(p);
    FUZZ_CHECK(q != NULL);
    FUZZ_CHECK(q->path != NULL && q->path[0] == '/');
    char buf[4096];
    if (r == CQ_WSUP_WEBSOCKET) {
        FUZZ_CHECK(q->key != NULL && strlen(q->key) == 24);
        FUZZ_CHECK(q->host != NULL);
        FUZZ_CHECK(!q->head);
        FUZZ_CHECK(cq_wsup_response_101(q, NULL, buf, sizeof(buf)) > 0);
    } else {
        FUZZ_CHECK(q->key == NULL);
        FUZZ_CHECK(cq_wsup_response_file(200, q->path, 12345, buf, sizeof(buf)) > 0);
    }
}

static void check_error(const cq_wsup_t *p)
{
    static const int allowed[] = {400, 403, 404, 405, 426, 431};
    int st = cq_wsup_status(p);
    bool ok = false;
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
        ok |= st == allowed[i];
    FUZZ_CHECK(ok);
    const char *reason = cq_wsup_reason(p);
    FUZZ_CHECK(reason != NULL && reason[0] != '\0' && strlen(reason) <= 200);
    char buf[512];
    FUZZ_CHECK(cq_wsup_response_error(st, reason, buf, sizeof(buf)) > 0);
    FUZZ_CHECK(cq_wsup_request(p) == NULL);
}

/* Feeds data in chunks (chunk 0: whole; 1: one byte at a time; else pseudo-random sizes). */
static outcome_t run(const cq_wsup_config_t *cfg, const uint8_t *data, size_t size, int chunk)
{
    outcome_t o = {0};
    cq_wsup_t *p = cq_wsup_new(cfg);
    FUZZ_CHECK(p != NULL);
    uint64_t rnd = fuzz_hash(data, size) | 1;
    size_t off = 0;
    int r = CQ_WSUP_NEED_MORE;
    while (off < size && r == CQ_WSUP_NEED_MORE) {
        size_t n = size - off;
        if (chunk == 1)
            n = 1;
        else if (chunk > 1 && n > 1)
            n = 1 + fuzz_next(&rnd) % (n < 64 ? n : 64);
        size_t used = (size_t)-1;
        r = cq_wsup_feed(p, data + off, n, &used);
        FUZZ_CHECK(used <= n);
        if (r == CQ_WSUP_NEED_MORE)
            FUZZ_CHECK(used == n);
        if (r > 0)
            o.head = off + used;
        off += n;
    }
    o.r = r;
    o.status = cq_wsup_status(p);
    if (r > 0) {
        check_request(p, r);
        o.fields = fields_hash(cq_wsup_request(p));
    } else if (r < 0) {
        FUZZ_CHECK(r == CQ_EHTTP);
        check_error(p);
    }
    cq_wsup_free(p);
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FUZZ_MAX_INPUT)
        return 0;
    static const cq_wsup_config_t cfgs[] = {
        {0},
        {.path = "/chat", .origins = "https://a.example, http://localhost:8080", .max_head = 512},
        {.same_origin = true},
    };
    for (size_t c = 0; c < sizeof(cfgs) / sizeof(cfgs[0]); c++) {
        outcome_t whole = run(&cfgs[c], data, size, 0);
        for (int chunk = 1; chunk <= 2; chunk++) {
            outcome_t o = run(&cfgs[c], data, size, chunk);
            FUZZ_CHECK(o.r == whole.r && o.status == whole.status);
            FUZZ_CHECK(o.head == whole.head && o.fields == whole.fields);
        }
    }
    return 0;
}
