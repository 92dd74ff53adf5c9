/* cq_framing.h - the channeld packet header: pure, three-way, no allocation.
 *
 * Current format (channeld >= PR #36): 'C' 'H' len_hi len_lo ct, then len body bytes.
 * Legacy "dynamic tag" (opt-in per listener): 'C' 'H' 'N' len ct for bodies < 256, and
 * 'C' 'H' hi lo ct up to 65535; a byte 1 other than 'H' carried length bits (>= 64 KiB), which
 * always exceeds the body limit. ct: 0 none, 1 Snappy block.
 */
#ifndef CQ_FRAMING_H
#define CQ_FRAMING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CQ_FRAME_HDR_LEN  5
#define CQ_FRAME_MAX_BODY 65535u
#define CQ_CT_NONE        0
#define CQ_CT_SNAPPY      1

typedef enum { CQ_FRAMING_FIXED = 0, CQ_FRAMING_LEGACY = 1 } cq_framing_mode_t;

typedef struct cq_frame {
    const uint8_t *body; /* slice into the caller's buffer */
    uint32_t len;        /* body length as sent (compressed length when ct = 1) */
    uint8_t ct;          /* compression byte, as received */
} cq_frame_t;

/* Parses one packet at p[0..n).
 * Returns the bytes consumed (> 0) and fills *ret; 0 if more bytes are needed; or a negative
 * error as soon as the bytes seen prove the packet bad: CQ_EMAGIC, CQ_EZEROLEN, or CQ_ETOOBIG
 * (length > max_body). *ret is written only on success. */
ssize_t cq_framing_parse(const uint8_t *p, size_t n, cq_framing_mode_t mode, uint32_t max_body,
                         cq_frame_t *ret);

/* Writes the 5-byte header for a body of len bytes (1..65535). */
void cq_framing_header(uint8_t out[CQ_FRAME_HDR_LEN], uint32_t len, uint8_t ct,
                       cq_framing_mode_t mode);

/* Legacy readers misread bodies of 0x4E00..0x4EFF bytes ('N' as the high byte). Returns how
 * many padding bytes a legacy-mode sender must append (as an unknown protobuf field, see
 * cq_wire_pad) to move len out of that range; 0 if none. */
uint32_t cq_framing_legacy_pad(uint32_t len);

#endif
