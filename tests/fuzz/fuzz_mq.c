/* fuzz_mq - the seed protocol codec (src/mq): frame parse + decode of arbitrary bytes.
 *
 * Two views of the input: as a byte stream of frames (cq_mq_parse, every prefix of a frame
 * needs more data, then cq_mq_decode), and as one body whose type is the first byte (so the
 * JSON decoder is reached without a valid header). Invariants: a decoded message re-encodes to
 * a frame that parses to the same length, type and msg_id and decodes again to a message that
 * encodes to the same bytes, which the jansson-only encoder gives too; the direct decoder and the
 * jansson-only one agree on every input (result and message); a failed decode returns one
 * of its documented codes with a message, and its error answer (cq_mq_encode_error) parses and
 * decodes. */
#include "fuzz_common.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_mq.h"

#include <errno.h>
#include <string.h>

#define FUZZ_MAX_INPUT (1u << 20)

static void check_reencode(const cq_mq_msg_t *m, const cq_mq_limits_t *lim)
{
    uint8_t *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    FUZZ_CHECK(cq_mq_encode(m, &a, &alen) == 0);
    cq_mq_frame_t f;
    FUZZ_CHECK(cq_mq_parse(a, alen, 0xffffffffu, &f) == (ssize_t)alen);
    FUZZ_CHECK(f.type == m->type && f.msg_id == m->msg_id);
    cq_mq_msg_t *d = NULL;
    char err[256];
    int rc = cq_mq_decode(&f, lim, &d, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "re-decode of %.*s: %d %s\n", (int)f.body_len, (const char *)f.body, rc,
                err);
    FUZZ_CHECK(rc == 0);
    FUZZ_CHECK(cq_mq_encode(d, &b, &blen) == 0);
    FUZZ_CHECK(alen == blen && memcmp(a, b, alen) == 0);
    cq_free(b);
    /* the direct writer and the jansson path agree byte for byte */
    FUZZ_CHECK(cq__mq_encode_jansson(m, &b, &blen) == 0);
    FUZZ_CHECK(alen == blen && memcmp(a, b, alen) == 0);
    cq_mq_msg_free(d);
    cq_free(a);
    cq_free(b);
}

static void check_error_answer(const cq_mq_frame_t *f, int rc, const char *err)
{
    uint8_t *out = NULL;
    size_t n = 0;
    FUZZ_CHECK(cq_mq_encode_error(f, rc, err, &out, &n) == 0);
    cq_mq_frame_t g;
    FUZZ_CHECK(cq_mq_parse(out, n, 0xffffffffu, &g) == (ssize_t)n);
    FUZZ_CHECK(g.msg_id == f->msg_id);
    cq_mq_msg_t *m = NULL;
    FUZZ_CHECK(cq_mq_decode(&g, NULL, &m, NULL, 0) == 0);
    FUZZ_CHECK(m->err_code == (uint32_t)cq_mq_errcode(rc) && m->err_code != 0);
    cq_mq_msg_free(m);
    cq_free(out);
}

/* The direct reader and the jansson path agree: same result, same message. */
static void check_decoders_agree(const cq_mq_frame_t *f, const cq_mq_limits_t *lim, int rc,
                                 const cq_mq_msg_t *m)
{
    cq_mq_msg_t *j = NULL;
    int jrc = cq__mq_decode_jansson(f, lim, &j, NULL, 0);
    FUZZ_CHECK(jrc == rc);
    if (rc != 0)
        return;
    uint8_t *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    FUZZ_CHECK(m->has == j->has && m->nitems == j->nitems && m->noffsets == j->noffsets);
    FUZZ_CHECK(cq_mq_encode(m, &a, &alen) == 0 && cq_mq_encode(j, &b, &blen) == 0);
    FUZZ_CHECK(alen == blen && memcmp(a, b, alen) == 0);
    cq_free(a);
    cq_free(b);
    cq_mq_msg_free(j);
}

static void decode_one(const cq_mq_frame_t *f, const cq_mq_limits_t *lim)
{
    cq_mq_msg_t *m = NULL;
    char err[512] = "";
    int rc = cq_mq_decode(f, lim, &m, err, sizeof(err));
    if (rc != -ENOMEM)
        check_decoders_agree(f, lim, rc, m);
    if (rc == 0) {
        check_reencode(m, lim);
        cq_mq_msg_free(m);
        return;
    }
    FUZZ_CHECK(m == NULL);
    FUZZ_CHECK(rc == CQ_ENOTYPE || rc == CQ_EJSON || rc == CQ_EFIELD || rc == CQ_EBADTOPIC ||
               rc == CQ_ECONTENT);
    FUZZ_CHECK(err[0] != '\0');
    check_error_answer(f, rc, err);
}

static void run_stream(const uint8_t *p, size_t n, const cq_mq_limits_t *lim)
{
    size_t off = 0;
    for (;;) {
        cq_mq_frame_t f;
        ssize_t r = cq_mq_parse(p + off, n - off, lim->max_total, &f);
        if (r <= 0) {
            FUZZ_CHECK(r == 0 || r == CQ_EBADLEN || r == CQ_EHEADER);
            return;
        }
        FUZZ_CHECK((size_t)r <= n - off && (size_t)r >= CQ_MQ_MIN_TOTAL);
        FUZZ_CHECK(f.body == p + off + CQ_MQ_HDR_LEN && f.body_len == (size_t)r - CQ_MQ_HDR_LEN);
        for (size_t k = 0; k < (size_t)r; k++) {
            cq_mq_frame_t g;
            FUZZ_CHECK(cq_mq_parse(p + off, k, lim->max_total, &g) == 0);
        }
        decode_one(&f, lim);
        off += (size_t)r;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > FUZZ_MAX_INPUT)
        return 0;
    /* Small limits half of the time, so the limit checks are reached. */
    uint64_t h = fuzz_hash(data, size);
    cq_mq_limits_t small = {256, 16, 3, 4}, dflt = {0, 0, 0, 0};
    const cq_mq_limits_t *lim = (h & 1) ? &small : &dflt;
    run_stream(data, size, lim);
    if (size >= 1 && size - 1 <= 0xffffffffu - CQ_MQ_HDR_LEN) {
        cq_mq_frame_t f = {data + 1, (uint32_t)(size - 1), (uint16_t)h, data[0]};
        decode_one(&f, lim);
    }
    return 0;
}
