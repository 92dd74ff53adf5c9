/* fuzz_merge - the schema-driven merge engine (src/chandata) on hostile bytes.
 *
 * Input: a selector byte (bits 0-2: the message type; bits 3-7: merge options), then two
 * strings A and B, each prefixed with a 2-byte little-endian length (clipped to what is left).
 * The types come from the test descriptor sets (tests/data/ *.proto): the paths are compiled in
 * by meson and may be overridden with CHANQ_FUZZ_FDS and CHANQ_FUZZ_FDS2.
 *
 * Checked: every call returns 0 or CQ_EDECODE; a merge result is canonical
 * (compact(x) == x, hence compact is idempotent); without options merge(A, B) equals
 * merge(compact(A), compact(B)) (merge works on the decoded inputs); field masks succeed on
 * merge results. */
#include "fuzz_common.h"

#include "cq_err.h"
#include "cq_fieldmask.h"
#include "cq_merge.h"
#include "cq_schema.h"

#include <string.h>

#ifndef FUZZ_MERGE_FDS
#define FUZZ_MERGE_FDS "chanqtest.fds"
#endif
#ifndef FUZZ_MERGE_FDS2
#define FUZZ_MERGE_FDS2 "testpb.fds"
#endif

static const char *const type_names[8] = {
    "chanqtest.EntityWorld", "chanqtest.Entity",      "chanqtest.ChatRoom",
    "chanqtest.Vec3",        "google.protobuf.Any",   "testpb.TestChannelDataMessage",
    "chanqtest.EntityWorld", "chanqtest.ChatMessage",
};

static const char *const mask_paths[] = {
    "entities", "entities.pos.x", "entities.label", "name",  "tick_ids", "pos",
    "pos.y",    "extra.type_url", "messages.text",  "title", "text",     "num",
    "value",    "nope.x",         "kind",
};

static cq_schema_t *schema(void)
{
    static cq_schema_t *s;
    if (s)
        return s;
    const char *p1 = getenv("CHANQ_FUZZ_FDS"), *p2 = getenv("CHANQ_FUZZ_FDS2");
    char err[256] = "";
    FUZZ_CHECK(cq_schema_new(&s) == 0);
    if (cq_schema_load_file(s, p1 ? p1 : FUZZ_MERGE_FDS, err, sizeof(err)) < 0 ||
        cq_schema_load_file(s, p2 ? p2 : FUZZ_MERGE_FDS2, err, sizeof(err)) < 0) {
        fprintf(stderr, "fuzz_merge: %s\n", err);
        abort();
    }
    return s;
}

static size_t take(const uint8_t **p, const uint8_t *end, const uint8_t **ret)
{
    size_t left = (size_t)(end - *p);
    size_t n = left >= 2 ? (size_t)((*p)[0] | (*p)[1] << 8) : 0;
    *p += left >= 2 ? 2 : left;
    left = (size_t)(end - *p);
    if (n > left)
        n = left;
    *ret = *p;
    *p += n;
    return n;
}

static bool same(const cq_sbuf_t *a, const cq_sbuf_t *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* x must be canonical: compact(x) == x. */
static void check_canonical(const cq_msgdesc_t *d, const cq_sbuf_t *x)
{
    cq_sbuf_t c;
    cq_sbuf_init(&c);
    FUZZ_CHECK(cq_compact(d, x->data, x->len, &c) == 0);
    FUZZ_CHECK(same(&c, x));
    cq_sbuf_done(&c);
}

static void check_plain(const cq_msgdesc_t *d, const uint8_t *a, size_t na, const uint8_t *b,
                        size_t nb, const cq_sbuf_t *merged)
{
    cq_sbuf_t ca, cb, m2;
    cq_sbuf_init(&ca);
    cq_sbuf_init(&cb);
    cq_sbuf_init(&m2);
    FUZZ_CHECK(cq_compact(d, a, na, &ca) == 0 && cq_compact(d, b, nb, &cb) == 0);
    FUZZ_CHECK(cq_merge(d, ca.data, ca.len, cb.data, cb.len, NULL, &m2) == 0);
    FUZZ_CHECK(same(&m2, merged));
    cq_sbuf_done(&ca);
    cq_sbuf_done(&cb);
    cq_sbuf_done(&m2);
}

static void check_masks(const cq_msgdesc_t *d, uint64_t h, const uint8_t *p, size_t n, bool valid)
{
    const char *paths[4] = {NULL, NULL, NULL, NULL};
    size_t np = h & 3, total = sizeof(mask_paths) / sizeof(mask_paths[0]);
    for (size_t i = 0; i < np; i++)
        paths[i] = mask_paths[(h >> (8 + 4 * i)) % total];
    cq_sbuf_t out;
    cq_sbuf_init(&out);
    int r = cq_fieldmask_filter(d, paths, np, p, n, &out);
    FUZZ_CHECK(r == 0 || (r == CQ_EDECODE && !valid));
    if (r == 0 && valid && np) {
        cq_sbuf_t c;
        cq_sbuf_init(&c);
        FUZZ_CHECK(cq_compact(d, out.data, out.len, &c) == 0); /* a valid message */
        cq_sbuf_done(&c);
    }
    cq_sbuf_done(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 16))
        return 0;
    const cq_msgdesc_t *d = cq_schema_find(schema(), type_names[data[0] & 7]);
    FUZZ_CHECK(d != NULL);
    uint8_t o = data[0] >> 3;
    cq_merge_opts_t opts = {(o & 1) != 0, (o >> 1) & 3, (o & 8) != 0, (o & 16) != 0};
    const uint8_t *p = data + 1, *end = data + size, *a, *b;
    size_t na = take(&p, end, &a), nb = take(&p, end, &b);
    uint64_t h = fuzz_hash(data, size);

    cq_sbuf_t m;
    cq_sbuf_init(&m);
    int r = cq_merge(d, a, na, b, nb, o ? &opts : NULL, &m);
    FUZZ_CHECK(r == 0 || r == CQ_EDECODE);
    FUZZ_CHECK(r == 0 || m.len == 0);
    if (r == 0) {
        check_canonical(d, &m);
        if (!o)
            check_plain(d, a, na, b, nb, &m);
        check_masks(d, h, m.data, m.len, true);
    }
    check_masks(d, h >> 3, a, na, false);
    cq_sbuf_done(&m);
    return 0;
}
