#include "cq_snappy.h"

#include "cq_err.h"

#include <snappy-c.h>

size_t cq_snappy_max_compressed(size_t n)
{
    return snappy_max_compressed_length(n);
}

int cq_snappy_compress(const uint8_t *in, size_t n, uint8_t *out, size_t *ret_len)
{
    size_t olen = snappy_max_compressed_length(n);
    if (snappy_compress((const char *)in, n, (char *)out, &olen) != SNAPPY_OK)
        return CQ_ESNAPPY;
    *ret_len = olen;
    return 0;
}

int cq_snappy_uncompress(const uint8_t *in, size_t n, uint8_t *out, size_t cap, size_t *ret_len)
{
    size_t dlen;
    if (snappy_uncompressed_length((const char *)in, n, &dlen) != SNAPPY_OK)
        return CQ_ESNAPPY;
    if (dlen > cap)
        return CQ_ETOOBIG;
    if (snappy_uncompress((const char *)in, n, (char *)out, &dlen) != SNAPPY_OK)
        return CQ_ESNAPPY;
    *ret_len = dlen;
    return 0;
}
