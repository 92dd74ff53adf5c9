/* fuzz_http - the shared HTTP/1.x request-head parser (pkg/http) and the admin endpoint's use
 * of it, on arbitrary bytes.
 *
 * The input is what a listener would have read. It is parsed in both line-end modes, with the
 * default bound and with a small one derived from the input. Invariants: the head length is
 * within the bound and no shorter prefix holds a head; resuming from any prefix (last_len)
 * gives the same result; slices lie inside the head and follow the grammar; the header count
 * is the same stored or not, the header limit fails exactly when it is exceeded, and
 * cq_http_parse_all() agrees; a malformed head names a fault and its length. The admin parser
 * accepts what the shared one accepts within its own limits, and nothing its old parser (kept
 * here as a reference) refused or read differently. */
#include "fuzz_common.h"

#include "cq_admin.h"
#include "cq_err.h"
#include "cq_http.h"

#include <string.h>

#define FUZZ_MAX_INPUT (1u << 16)
#define MAX_HDRS       64

static bool is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool inside(const char *buf, size_t end, const char *p, size_t n)
{
    return p >= buf && p + n <= buf + end;
}

static void check_head(const char *buf, size_t end, const cq_http_head_t *h,
                       const cq_http_header_t *hd, size_t stored)
{
    FUZZ_CHECK(h->method == buf && h->method_len > 0);
    for (size_t i = 0; i < h->method_len; i++)
        FUZZ_CHECK(is_tchar((unsigned char)h->method[i]));
    FUZZ_CHECK(h->target == buf + h->method_len + 1 && h->target_len > 0);
    FUZZ_CHECK(inside(buf, end, h->target, h->target_len));
    for (size_t i = 0; i < h->target_len; i++)
        FUZZ_CHECK((unsigned char)h->target[i] > 0x20 && h->target[i] != 0x7f);
    FUZZ_CHECK(h->minor_version >= 0 && h->minor_version <= 9);
    const char *prev = h->target + h->target_len;
    for (size_t i = 0; i < stored; i++) {
        FUZZ_CHECK(hd[i].name > prev && inside(buf, end, hd[i].name, hd[i].name_len));
        FUZZ_CHECK(hd[i].name_len > 0 && hd[i].name[hd[i].name_len] == ':');
        FUZZ_CHECK(inside(buf, end, hd[i].value, hd[i].value_len));
        if (hd[i].value_len) {
            char a = hd[i].value[0], z = hd[i].value[hd[i].value_len - 1];
            FUZZ_CHECK(a != ' ' && a != '\t' && z != ' ' && z != '\t');
        }
        prev = hd[i].value + hd[i].value_len;
    }
}

/* The admin endpoint's parser before it used pkg/http, frozen as the reference: it checked the
 * request line only. (It read a NUL-terminated buffer; the fuzzer's is not, so the version
 * check is bounded by the head here.) */
static ssize_t admin_parse_v0(const char *p, size_t n, char *method, size_t mlen, char *path,
                              size_t plen)
{
    const char *end = NULL;
    for (size_t i = 3; i < n; i++) {
        if (p[i - 3] == '\r' && p[i - 2] == '\n' && p[i - 1] == '\r' && p[i] == '\n') {
            end = p + i + 1;
            break;
        }
    }
    if (!end)
        return n >= CQ_ADMIN_MAX_HEAD ? -1 : 0;
    const char *sp1 = memchr(p, ' ', (size_t)(end - p));
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1)) : NULL;
    if (!sp1 || !sp2 || (size_t)(sp1 - p) >= mlen || (size_t)(sp2 - sp1 - 1) >= plen || sp1 == p ||
        sp2 == sp1 + 1 || (size_t)(end - sp2 - 1) < 7 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0)
        return -1;
    memcpy(method, p, (size_t)(sp1 - p));
    method[sp1 - p] = '\0';
    memcpy(path, sp1 + 1, (size_t)(sp2 - sp1 - 1));
    path[sp2 - sp1 - 1] = '\0';
    char *q = strchr(path, '?');
    if (q)
        *q = '\0';
    return end - p;
}

/* The admin endpoint: accepts exactly what the shared parser accepts in CRLF mode within its
 * limits, and only heads its old parser accepted the same way (the shared parser also checks
 * the header lines, so some heads the old one took are now answered 400; none the other way).
 * A head that is incomplete for one is incomplete or refused by the other. */
static void check_admin(const char *buf, size_t len)
{
    char method[16], path[256], m0[16], p0[256];
    ssize_t a = cq_admin_parse_head(buf, len, method, sizeof(method), path, sizeof(path));
    ssize_t a0 = admin_parse_v0(buf, len, m0, sizeof(m0), p0, sizeof(p0));
    cq_http_opts_t o = {.max_head = len > CQ_ADMIN_MAX_HEAD ? len : CQ_ADMIN_MAX_HEAD};
    cq_http_head_t h;
    ssize_t r = cq_http_parse_head(buf, len, 0, &o, &h, NULL, 0);
    FUZZ_CHECK(a == 0 || a == -1 || a == r);
    FUZZ_CHECK(r <= 0 || a != 0);
    if (r > 0 && h.method_len < sizeof(method) && h.target_len < sizeof(path))
        FUZZ_CHECK(a == r);
    if (a > 0) {
        FUZZ_CHECK(a0 == a);
        FUZZ_CHECK(strcmp(method, m0) == 0 && strcmp(path, p0) == 0);
        FUZZ_CHECK(strlen(method) == h.method_len && memcmp(method, h.method, h.method_len) == 0);
    }
    if (a0 == -1)
        FUZZ_CHECK(a == -1);
}

static void check_fault(const char *buf, size_t len, const cq_http_opts_t *o)
{
    size_t head_len = 0;
    cq_http_fault_t f = cq_http_fault(buf, len, o, &head_len);
    FUZZ_CHECK(f != CQ_HTTP_FAULT_NONE);
    FUZZ_CHECK(head_len > 0 && head_len <= len && head_len <= o->max_head);
}

static void run(const char *buf, size_t len, const cq_http_opts_t *o, uint64_t *rnd)
{
    cq_http_head_t h;
    cq_http_header_t hd[MAX_HDRS];
    ssize_t r = cq_http_parse_head(buf, len, 0, o, &h, NULL, 0);
    FUZZ_CHECK(r == 0 || r == CQ_EBADLEN || r == CQ_EHEADER || r > 0);
    if (r == 0)
        FUZZ_CHECK(len < o->max_head);
    if (r == CQ_EHEADER)
        check_fault(buf, len, o);
    if (r > 0) {
        FUZZ_CHECK((size_t)r <= len && (size_t)r <= o->max_head);
        cq_http_head_t h2;
        FUZZ_CHECK(cq_http_parse_head(buf, (size_t)r - 1, 0, o, &h2, NULL, 0) == 0);
    }
    /* resuming from a prefix that did not hold the head */
    for (int i = 0; i < 4 && len > 0; i++) {
        size_t k = (size_t)(fuzz_next(rnd) % len);
        cq_http_head_t h2;
        if (cq_http_parse_head(buf, k, 0, o, &h2, NULL, 0) == 0)
            FUZZ_CHECK(cq_http_parse_head(buf, len, k, o, &h2, NULL, 0) == r);
    }
    /* stored headers: same count, and the limit fails exactly when exceeded */
    size_t cap = (size_t)(fuzz_next(rnd) % (MAX_HDRS + 1));
    ssize_t s = cq_http_parse_head(buf, len, 0, o, &h, hd, cap);
    if (r > 0) {
        cq_http_head_t all;
        cq_http_parse_head(buf, len, 0, o, &all, NULL, 0);
        FUZZ_CHECK(s == (all.num_headers > cap ? CQ_ELIMIT : r));
        if (s > 0)
            check_head(buf, (size_t)r, &h, hd, h.num_headers);
        cq_http_headers_t hs;
        FUZZ_CHECK(cq_http_parse_all(buf, len, 0, o, &h, &hs) == r);
        FUZZ_CHECK(hs.n == all.num_headers);
        check_head(buf, (size_t)r, &h, hs.v, hs.n);
        cq_http_headers_done(&hs);
    } else {
        FUZZ_CHECK(s == r || (r == CQ_EHEADER && s == CQ_ELIMIT));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FUZZ_MAX_INPUT)
        return 0;
    const char *buf = (const char *)data;
    uint64_t rnd = fuzz_hash(data, size) | 1;
    for (unsigned flags = 0; flags <= CQ_HTTP_BARE_LF; flags += CQ_HTTP_BARE_LF) {
        cq_http_opts_t big = {.max_head = 8192, .flags = flags};
        cq_http_opts_t small = {.max_head = 1 + (size_t)(rnd % 300), .flags = flags};
        run(buf, size, &big, &rnd);
        run(buf, size, &small, &rnd);
    }
    check_admin(buf, size);
    return 0;
}
