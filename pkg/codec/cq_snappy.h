/* cq_snappy.h - Snappy block format (not the framing format); the only user of snappy-c.h.
 *
 * Pure functions, thread-safe, no allocation beyond what the caller provides.
 */
#ifndef CQ_SNAPPY_H
#define CQ_SNAPPY_H

#include <stddef.h>
#include <stdint.h>

size_t cq_snappy_max_compressed(size_t n);
/* Compresses in[0..n) into out (room for cq_snappy_max_compressed(n)). Sets *ret_len.
 * Returns 0 or CQ_ESNAPPY. */
int cq_snappy_compress(const uint8_t *in, size_t n, uint8_t *out, size_t *ret_len);
/* Decompresses a block whose decoded length must be <= cap. out has room for cap bytes.
 * Returns 0, CQ_ESNAPPY for a corrupt block, or CQ_ETOOBIG when it would exceed cap. */
int cq_snappy_uncompress(const uint8_t *in, size_t n, uint8_t *out, size_t cap, size_t *ret_len);

#endif
