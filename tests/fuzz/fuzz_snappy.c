/* fuzz_snappy - Snappy block decoding with an output cap, then round trips.
 *
 * The input is a compressed body as a peer would send it (header byte 4 = 1). Decoding must
 * return 0, CQ_ESNAPPY or CQ_ETOOBIG and never write past the cap; a successful decode must
 * survive compress -> uncompress unchanged. The raw input is also compressed and decompressed
 * (it must come back byte for byte). */
#include "fuzz_common.h"

#include "cq_err.h"
#include "cq_snappy.h"

#include <string.h>

#define CAP            65535u /* the largest uncompressed packet body */
#define FUZZ_MAX_INPUT (1u << 17)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t out[CAP], out2[CAP + 1], comp[CAP * 2 + 64];
    if (size > FUZZ_MAX_INPUT)
        return 0;

    /* Exactly CAP bytes of room: ASan reports any write past it (out2 is one longer). */
    uint8_t *exact = malloc(CAP);
    FUZZ_CHECK(exact != NULL);
    size_t len = SIZE_MAX;
    int r = cq_snappy_uncompress(data, size, exact, CAP, &len);
    FUZZ_CHECK(r == 0 || r == CQ_ESNAPPY || r == CQ_ETOOBIG);
    if (r == 0) {
        FUZZ_CHECK(len <= CAP);
        memcpy(out, exact, len);
        size_t clen = SIZE_MAX, dlen = SIZE_MAX;
        FUZZ_CHECK(cq_snappy_max_compressed(len) <= sizeof(comp));
        FUZZ_CHECK(cq_snappy_compress(out, len, comp, &clen) == 0);
        FUZZ_CHECK(clen <= cq_snappy_max_compressed(len));
        FUZZ_CHECK(cq_snappy_uncompress(comp, clen, out2, len, &dlen) == 0);
        FUZZ_CHECK(dlen == len && memcmp(out, out2, len) == 0);
        /* One byte less room is refused up front. */
        if (len)
            FUZZ_CHECK(cq_snappy_uncompress(comp, clen, out2, len - 1, &dlen) == CQ_ETOOBIG);
    } else {
        FUZZ_CHECK(len == SIZE_MAX); /* ret_len untouched on failure */
    }
    free(exact);

    /* The raw input round-trips. */
    size_t n = size < CAP ? size : CAP;
    size_t clen = 0, dlen = 0;
    FUZZ_CHECK(cq_snappy_compress(data, n, comp, &clen) == 0);
    FUZZ_CHECK(cq_snappy_uncompress(comp, clen, out2, CAP, &dlen) == 0);
    FUZZ_CHECK(dlen == n && (n == 0 || memcmp(out2, data, n) == 0));
    return 0;
}
