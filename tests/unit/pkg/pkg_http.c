/* pkg/http: the HTTP/1.x request-head parser.
 *
 * Habits from style.md §12 (picohttpparser's tests): every truncated prefix is "need more",
 * every two-way split (a first call on the prefix, then last_len) gives the same head, input
 * ends right before a PROT_NONE page so any over-read faults, the byte and header limits hold
 * exactly, each malformed rule reports its fault, and a fail-N loop over the allocating
 * cq_http_parse_all(). */
#include "test_pkg.h"

#include "cq_err.h"
#include "cq_http.h"
#include "test_alloc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const cq_http_opts_t CRLF = {.max_head = 8192};
static const cq_http_opts_t LF = {.max_head = 8192, .flags = CQ_HTTP_BARE_LF};

static const char REQ[] = "POST /v1/topics/t/messages?x=1 HTTP/1.1\r\n"
                          "Host: example.com\r\n"
                          "content-length:5\r\n"
                          "X-Empty:\r\n"
                          "Authorization: \t Bearer 1:tok \t\r\n"
                          "\r\n"
                          "hello";
#define REQ_HEAD (sizeof(REQ) - 1 - 5)

/* ---- helpers ---------------------------------------------------------------------------- */

/* A copy of data[0..len) that ends right before a PROT_NONE page. */
typedef struct guarded {
    char *p;
    void *map;
    size_t maplen;
} guarded_t;

static guarded_t guard(const char *data, size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t span = (len + page - 1) / page * page + page;
    char *map = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + span - page, page, PROT_NONE), 0);
    char *p = map + span - page - len;
    memcpy(p, data, len);
    return (guarded_t){p, map, span};
}

static void unguard(guarded_t g)
{
    munmap(g.map, g.maplen);
}

static ssize_t parse_guarded(const char *s, size_t len, const cq_http_opts_t *o, cq_http_head_t *h,
                             cq_http_header_t *hd, size_t max)
{
    guarded_t g = guard(s, len);
    ssize_t r = cq_http_parse_head(g.p, len, 0, o, h, hd, max);
    unguard(g);
    return r;
}

static void assert_slice(const char *p, size_t n, const char *want)
{
    assert_int_equal(n, strlen(want));
    assert_memory_equal(p, want, n);
}

/* Checks the head of REQ parsed from buf. */
static void check_req(const char *buf, const cq_http_head_t *h, const cq_http_header_t *hd)
{
    assert_ptr_equal(h->method, buf);
    assert_slice(h->method, h->method_len, "POST");
    assert_ptr_equal(h->target, buf + 5);
    assert_slice(h->target, h->target_len, "/v1/topics/t/messages?x=1");
    assert_int_equal(h->minor_version, 1);
    assert_int_equal(h->num_headers, 4);
    static const char *const want[][2] = {{"Host", "example.com"},
                                          {"content-length", "5"},
                                          {"X-Empty", ""},
                                          {"Authorization", "Bearer 1:tok"}};
    for (int i = 0; i < 4; i++) {
        assert_slice(hd[i].name, hd[i].name_len, want[i][0]);
        assert_slice(hd[i].value, hd[i].value_len, want[i][1]);
        assert_true(hd[i].name >= buf && hd[i].value + hd[i].value_len <= buf + REQ_HEAD);
    }
}

/* ---- valid heads ------------------------------------------------------------------------ */

void test_http_fields(void **state)
{
    (void)state;
    cq_http_head_t h;
    cq_http_header_t hd[8];
    assert_int_equal(cq_http_parse_head(REQ, sizeof(REQ) - 1, 0, &CRLF, &h, hd, 8), REQ_HEAD);
    check_req(REQ, &h, hd);
    assert_true(cq_http_name_is(&hd[1], "Content-Length"));
    assert_true(cq_http_name_is(&hd[1], "CONTENT-LENGTH"));
    assert_false(cq_http_name_is(&hd[1], "content-lengt"));
    assert_false(cq_http_name_is(&hd[0], "Hostx"));
    /* the same head in bare-LF mode */
    assert_int_equal(cq_http_parse_head(REQ, sizeof(REQ) - 1, 0, &LF, &h, hd, 8), REQ_HEAD);
    check_req(REQ, &h, hd);
    /* no headers at all, and every minor version digit */
    const char *min = "GET * HTTP/1.0\r\n\r\n";
    assert_int_equal(cq_http_parse_head(min, strlen(min), 0, &CRLF, &h, hd, 8), strlen(min));
    assert_int_equal(h.num_headers, 0);
    assert_int_equal(h.minor_version, 0);
    assert_slice(h.target, h.target_len, "*");
    const char *v9 = "X http://a/b?c HTTP/1.9\r\n\r\n";
    assert_int_equal(cq_http_parse_head(v9, strlen(v9), 0, &CRLF, &h, hd, 8), strlen(v9));
    assert_int_equal(h.minor_version, 9);
    assert_slice(h.target, h.target_len, "http://a/b?c");
}

/* Lenient bytes that some caller accepts: obs-text in the target and values, DEL in a value,
 * tabs inside a value, repeated headers kept in order. */
void test_http_lenient_bytes(void **state)
{
    (void)state;
    const char req[] = "GET /caf\xc3\xa9 HTTP/1.1\r\nA: x\x7fy\r\nA:\tp\tq \r\nB: \xff\r\n\r\n";
    cq_http_head_t h;
    cq_http_header_t hd[4];
    assert_int_equal(cq_http_parse_head(req, sizeof(req) - 1, 0, &CRLF, &h, hd, 4),
                     sizeof(req) - 1);
    assert_slice(h.target, h.target_len, "/caf\xc3\xa9");
    assert_int_equal(h.num_headers, 3);
    assert_slice(hd[0].value, hd[0].value_len, "x\x7fy");
    assert_slice(hd[1].name, hd[1].name_len, "A");
    assert_slice(hd[1].value, hd[1].value_len, "p\tq");
    assert_slice(hd[2].value, hd[2].value_len, "\xff");
}

/* Every proper prefix needs more; every split resumed with last_len finds the same head. */
void test_http_every_prefix_and_split(void **state)
{
    (void)state;
    const cq_http_opts_t *modes[] = {&CRLF, &LF};
    for (int m = 0; m < 2; m++) {
        cq_http_head_t h;
        cq_http_header_t hd[8];
        for (size_t k = 0; k < REQ_HEAD; k++) {
            assert_int_equal(parse_guarded(REQ, k, modes[m], &h, hd, 8), 0);
            assert_int_equal(cq_http_parse_head(REQ, k, 0, modes[m], &h, hd, 8), 0);
            memset(&h, 0xee, sizeof(h));
            ssize_t r = cq_http_parse_head(REQ, sizeof(REQ) - 1, k, modes[m], &h, hd, 8);
            assert_int_equal(r, REQ_HEAD);
            check_req(REQ, &h, hd);
        }
        for (size_t k = REQ_HEAD; k < sizeof(REQ); k++) {
            assert_int_equal(parse_guarded(REQ, k, modes[m], &h, hd, 8), REQ_HEAD);
            ssize_t r = cq_http_parse_head(REQ, k, REQ_HEAD - 1, modes[m], &h, hd, 8);
            assert_int_equal(r, REQ_HEAD);
        }
    }
}

/* Bare LF: only with the flag, where it also ends the head (LF LF, LF CR LF). */
void test_http_bare_lf(void **state)
{
    (void)state;
    cq_http_head_t h;
    cq_http_header_t hd[4];
    static const char *const ends[] = {"GET / HTTP/1.1\nA: b\n\n", "GET / HTTP/1.1\nA: b\n\r\n",
                                       "GET / HTTP/1.1\r\nA: b\r\n\n",
                                       "GET / HTTP/1.1\nA: b\r\n\r\n"};
    for (size_t i = 0; i < 4; i++) {
        size_t n = strlen(ends[i]);
        assert_int_equal(parse_guarded(ends[i], n, &LF, &h, hd, 4), (ssize_t)n);
        assert_int_equal(cq_http_parse_head(ends[i], n, 0, &LF, &h, hd, 4), (ssize_t)n);
        assert_int_equal(h.num_headers, 1);
        assert_slice(hd[0].value, hd[0].value_len, "b");
        for (size_t k = 0; k < n; k++)
            assert_int_equal(parse_guarded(ends[i], k, &LF, &h, hd, 4), 0);
    }
    /* without the flag: "\n\n" does not end a head, and a bare LF is an error */
    assert_int_equal(parse_guarded(ends[0], strlen(ends[0]), &CRLF, &h, hd, 4), 0);
    assert_int_equal(parse_guarded(ends[3], strlen(ends[3]), &CRLF, &h, hd, 4), CQ_EHEADER);
    assert_int_equal(cq_http_fault(ends[3], strlen(ends[3]), &CRLF, NULL),
                     CQ_HTTP_FAULT_REQUEST_LINE);
    const char *hdr_lf = "GET / HTTP/1.1\r\nA: b\nC: d\r\n\r\n";
    assert_int_equal(parse_guarded(hdr_lf, strlen(hdr_lf), &CRLF, &h, hd, 4), CQ_EHEADER);
    assert_int_equal(cq_http_fault(hdr_lf, strlen(hdr_lf), &CRLF, NULL), CQ_HTTP_FAULT_STRAY);
}

/* ---- limits ----------------------------------------------------------------------------- */

void test_http_byte_limit(void **state)
{
    (void)state;
    cq_http_head_t h;
    cq_http_opts_t o = {.max_head = REQ_HEAD};
    /* a head of exactly max_head bytes fits; one byte less does not, even though complete */
    assert_int_equal(cq_http_parse_head(REQ, sizeof(REQ) - 1, 0, &o, &h, NULL, 0), REQ_HEAD);
    o.max_head = REQ_HEAD - 1;
    assert_int_equal(cq_http_parse_head(REQ, sizeof(REQ) - 1, 0, &o, &h, NULL, 0), CQ_EBADLEN);
    assert_int_equal(cq_http_parse_head(REQ, REQ_HEAD, 0, &o, &h, NULL, 0), CQ_EBADLEN);
    /* incomplete: need more below the bound, too large from the bound on */
    assert_int_equal(cq_http_parse_head(REQ, REQ_HEAD - 2, 0, &o, &h, NULL, 0), 0);
    assert_int_equal(parse_guarded(REQ, REQ_HEAD - 1, &o, &h, NULL, 0), CQ_EBADLEN);
    /* the bound holds with last_len too, and in bare-LF mode */
    o.flags = CQ_HTTP_BARE_LF;
    assert_int_equal(cq_http_parse_head(REQ, sizeof(REQ) - 1, 10, &o, &h, NULL, 0), CQ_EBADLEN);
    o.max_head = 4;
    assert_int_equal(cq_http_parse_head("GET / HTTP/1.1\n\n", 16, 0, &o, &h, NULL, 0), CQ_EBADLEN);
}

void test_http_header_limit(void **state)
{
    (void)state;
    char req[256];
    int n = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n");
    cq_http_head_t h;
    cq_http_header_t hd[3];
    assert_int_equal(cq_http_parse_head(req, (size_t)n, 0, &CRLF, &h, hd, 3), n);
    assert_int_equal(h.num_headers, 3);
    assert_slice(hd[2].name, hd[2].name_len, "C");
    assert_int_equal(cq_http_parse_head(req, (size_t)n, 0, &CRLF, &h, hd, 2), CQ_ELIMIT);
    assert_int_equal(cq_http_parse_head(req, (size_t)n, 0, &CRLF, &h, hd, 0), CQ_ELIMIT);
    /* NULL headers: checked and counted, never too many */
    memset(&h, 0, sizeof(h));
    assert_int_equal(cq_http_parse_head(req, (size_t)n, 0, &CRLF, &h, NULL, 0), n);
    assert_int_equal(h.num_headers, 3);
    /* too many is reported before a later malformed line */
    n = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nbad\r\n\r\n");
    assert_int_equal(cq_http_parse_head(req, (size_t)n, 0, &CRLF, &h, hd, 1), CQ_ELIMIT);
    assert_int_equal(cq_http_parse_head(req, (size_t)n, 0, &CRLF, &h, hd, 2), CQ_EHEADER);
}

/* ---- malformed heads -------------------------------------------------------------------- */

typedef struct bad_case {
    const char *req;
    unsigned flags;
    cq_http_fault_t fault;
} bad_case_t;

#define HL "GET / HTTP/1.1\r\n"

static const bad_case_t BAD[] = {
    {"\r\n\r\n", 0, CQ_HTTP_FAULT_REQUEST_LINE},
    {"\n\n", CQ_HTTP_BARE_LF, CQ_HTTP_FAULT_REQUEST_LINE},
    {"\r\nGET / HTTP/1.1\r\n\r\n", 0, CQ_HTTP_FAULT_REQUEST_LINE},
    {"GET\r\n\r\n", 0, CQ_HTTP_FAULT_REQUEST_LINE},
    {"GET /x\r\n\r\n", 0, CQ_HTTP_FAULT_REQUEST_LINE},
    {"GET / HTTP/1.1 x\r\n\r\n", 0, CQ_HTTP_FAULT_REQUEST_LINE},
    {"GET  / HTTP/1.1\r\n\r\n", 0, CQ_HTTP_FAULT_REQUEST_LINE},
    {" / HTTP/1.1\r\n\r\n", 0, CQ_HTTP_FAULT_REQUEST_LINE},
    {"G(T / HTTP/1.1\r\n\r\n", 0, CQ_HTTP_FAULT_REQUEST_LINE},
    {"GET /\r HTTP/1.1\r\n\r\n", 0, CQ_HTTP_FAULT_REQUEST_LINE},
    {"GET /\0 HTTP/1.1\r\n\r\n", 0, CQ_HTTP_FAULT_REQUEST_LINE},
    {"GET /\x01 HTTP/1.1\r\n\r\n", 0, CQ_HTTP_FAULT_TARGET},
    {"GET /\t HTTP/1.1\r\n\r\n", 0, CQ_HTTP_FAULT_TARGET},
    {"GET /\x7f HTTP/1.1\r\n\r\n", 0, CQ_HTTP_FAULT_TARGET},
    {"GET / HTTP/2.0\r\n\r\n", 0, CQ_HTTP_FAULT_VERSION},
    {"GET / HTTP/1.10\r\n\r\n", 0, CQ_HTTP_FAULT_VERSION},
    {"GET / HTTP/1.\r\n\r\n", 0, CQ_HTTP_FAULT_VERSION},
    {"GET / http/1.1\r\n\r\n", 0, CQ_HTTP_FAULT_VERSION},
    {"GET / HTTP/1.x\r\n\r\n", 0, CQ_HTTP_FAULT_VERSION},
    {HL "A: b\rc\r\n\r\n", 0, CQ_HTTP_FAULT_STRAY},
    {HL "A: b\0c\r\n\r\n", 0, CQ_HTTP_FAULT_STRAY},
    {HL "\0A: b\r\n\r\n", 0, CQ_HTTP_FAULT_STRAY},
    {HL "A: b\r\r\n\r\n", 0, CQ_HTTP_FAULT_STRAY},
    {HL "A: b\nc\r\n\r\n", 0, CQ_HTTP_FAULT_STRAY},
    {HL " folded: x\r\n\r\n", 0, CQ_HTTP_FAULT_FOLD},
    {HL "A: b\r\n\tc\r\n\r\n", 0, CQ_HTTP_FAULT_FOLD},
    {HL "NoColon\r\n\r\n", 0, CQ_HTTP_FAULT_HEADER_LINE},
    {HL "Bad Name: v\r\n\r\n", 0, CQ_HTTP_FAULT_HEADER_NAME},
    {HL "A : v\r\n\r\n", 0, CQ_HTTP_FAULT_HEADER_NAME},
    {HL ": v\r\n\r\n", 0, CQ_HTTP_FAULT_HEADER_NAME},
    {HL "A\x80: v\r\n\r\n", 0, CQ_HTTP_FAULT_HEADER_NAME},
    {HL "A: b\x01z\r\n\r\n", 0, CQ_HTTP_FAULT_HEADER_VALUE},
    {HL "A: b\x1f\r\n\r\n", 0, CQ_HTTP_FAULT_HEADER_VALUE},
    /* the first bad line wins, and within a line the first rule in the documented order */
    {HL "NoColon\r\n \r\n\r\n", 0, CQ_HTTP_FAULT_HEADER_LINE},
    {HL " A\x01\r\n\r\n", 0, CQ_HTTP_FAULT_FOLD},
    {HL "A B\r\n\r\n", 0, CQ_HTTP_FAULT_HEADER_LINE},
    {"G(T /\x01 HTTP/2\r\n\r\n", 0, CQ_HTTP_FAULT_REQUEST_LINE},
    {"GET /\x01 HTTP/2\r\n\r\n", 0, CQ_HTTP_FAULT_TARGET},
};

/* The NUL cases need their true length. */
static size_t bad_len(const bad_case_t *c)
{
    const char *s = c->req;
    size_t n = strlen(s);
    if (strstr(s, "\r\n\r\n") || strstr(s, "\n\n"))
        return n;
    /* a NUL inside: the head runs to the first CRLF CRLF after it */
    const char *p = s + n + 1;
    while (!(p[0] == '\r' && p[1] == '\n' && p[2] == '\r' && p[3] == '\n'))
        p++;
    return (size_t)(p + 4 - s);
}

void test_http_malformed(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(BAD) / sizeof(BAD[0]); i++) {
        cq_http_opts_t o = {.max_head = 8192, .flags = BAD[i].flags};
        size_t n = bad_len(&BAD[i]);
        cq_http_head_t h = {0};
        cq_http_header_t hd[4];
        ssize_t r = parse_guarded(BAD[i].req, n, &o, &h, hd, 4);
        size_t head_len = 0;
        cq_http_fault_t f = cq_http_fault(BAD[i].req, n, &o, &head_len);
        if (r != CQ_EHEADER || f != BAD[i].fault)
            fail_msg("case %zu: r=%zd fault=%d, expected fault %d", i, r, (int)f,
                     (int)BAD[i].fault);
        assert_int_equal(head_len, n);
        assert_null(h.method); /* ret_head untouched */
        /* with headers NULL too, and from a guard page when cut anywhere before the end */
        assert_int_equal(parse_guarded(BAD[i].req, n, &o, &h, NULL, 0), CQ_EHEADER);
        for (size_t k = 0; k < n; k++)
            assert_int_equal(parse_guarded(BAD[i].req, k, &o, &h, NULL, 0), 0);
    }
    /* a valid or incomplete head has no fault */
    assert_int_equal(cq_http_fault(REQ, sizeof(REQ) - 1, &CRLF, NULL), CQ_HTTP_FAULT_NONE);
    assert_int_equal(cq_http_fault(REQ, 10, &CRLF, NULL), CQ_HTTP_FAULT_NONE);
}

/* ---- every header ----------------------------------------------------------------------- */

/* A head with count headers "H<i>: <i>". Returns its length. */
static size_t many_headers(char *buf, size_t cap, int count)
{
    size_t n = (size_t)snprintf(buf, cap, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < count; i++)
        n += (size_t)snprintf(buf + n, cap - n, "H%d: %d\r\n", i, i);
    n += (size_t)snprintf(buf + n, cap - n, "\r\n");
    assert_true(n < cap);
    return n;
}

static void check_many(const cq_http_headers_t *hs, int count)
{
    assert_int_equal(hs->n, (size_t)count);
    for (int i = 0; i < count; i++) {
        char name[16], value[16];
        snprintf(name, sizeof(name), "H%d", i);
        snprintf(value, sizeof(value), "%d", i);
        assert_true(cq_http_name_is(&hs->v[i], name));
        assert_slice(hs->v[i].value, hs->v[i].value_len, value);
    }
}

void test_http_parse_all(void **state)
{
    (void)state;
    static char buf[8192];
    int counts[] = {0, 1, CQ_HTTP_INLINE_HEADERS, CQ_HTTP_INLINE_HEADERS + 1, 500};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t n = many_headers(buf, sizeof(buf), counts[c]);
        cq_http_head_t h;
        cq_http_headers_t hs;
        test_alloc_install(0, false);
        assert_int_equal(cq_http_parse_all(buf, n, 0, &CRLF, &h, &hs), (ssize_t)n);
        assert_int_equal(h.num_headers, (size_t)counts[c]);
        check_many(&hs, counts[c]);
        assert_int_equal(test_alloc_live(), counts[c] > CQ_HTTP_INLINE_HEADERS ? 1 : 0);
        cq_http_headers_done(&hs);
        cq_http_headers_done(&hs);
        assert_int_equal(test_alloc_live(), 0);
        test_alloc_remove();
    }
    /* incomplete, too large and malformed heads leave hs empty */
    cq_http_head_t h;
    cq_http_headers_t hs;
    size_t n = many_headers(buf, sizeof(buf), 40);
    assert_int_equal(cq_http_parse_all(buf, n - 1, 0, &CRLF, &h, &hs), 0);
    assert_null(hs.v);
    cq_http_opts_t small = {.max_head = 100};
    assert_int_equal(cq_http_parse_all(buf, n, 0, &small, &h, &hs), CQ_EBADLEN);
    assert_null(hs.v);
    strstr(buf, "H39:")[3] = 'x'; /* the last header line loses its colon */
    assert_int_equal(cq_http_parse_all(buf, n, 0, &CRLF, &h, &hs), CQ_EHEADER);
    assert_null(hs.v);
    cq_http_headers_done(&hs);
}

void test_http_parse_all_fail_n(void **state)
{
    (void)state;
    static char buf[4096];
    size_t n = many_headers(buf, sizeof(buf), 100);
    for (unsigned long k = 1;; k++) {
        test_alloc_install(k, false);
        cq_http_head_t h;
        cq_http_headers_t hs;
        ssize_t r = cq_http_parse_all(buf, n, 0, &CRLF, &h, &hs);
        if (r > 0)
            check_many(&hs, 100);
        else
            assert_int_equal(r, -ENOMEM);
        cq_http_headers_done(&hs);
        if (test_alloc_round_end(r > 0))
            break;
    }
}
