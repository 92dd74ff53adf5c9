/* cq_merge.h - schema-driven protobuf merge and compaction on wire bytes.
 *
 * cq_merge(d, dst, src) computes what protobuf's merge of the decoded src into the decoded dst
 * yields (Go's proto.Merge(dst, src), as channeld does), and writes it in a compact canonical
 * encoding. For messages written by protobuf serializers this is also the parse of dst||src;
 * the one difference is a proto3 implicit-presence scalar that src's bytes carry explicitly
 * as zero: decoding src loses it, so it does not overwrite dst (parsing dst||src would).
 *   - known fields in field-number order, then unknown fields in order of appearance;
 *   - one occurrence of each singular field; singular scalars are last-wins, singular
 *     sub-messages are merged recursively, repeated fields append, repeated scalars are packed
 *     where the field is packed (and unpacked where not);
 *   - map entries are replaced per key (the last entry for a key wins whole) and written in
 *     key order, each with its key and value fields;
 *   - setting one member of a oneof clears the others;
 *   - proto3 implicit-presence scalars holding zero are not written (and a zero from src
 *     never overwrites: see above);
 *   - varints are re-encoded canonically (int32 and enum sign-extended, 32-bit types truncated,
 *     bool as 0/1).
 * Then, when opts is given, channeld's ChannelDataMergeOptions are applied to the TOP-LEVEL
 * fields only (channel-protocol §2.5): replace_list replaces every top-level repeated (non-map)
 * field by src's - clearing it when src does not carry it; list_size_limit keeps the first N
 * elements (last N if truncate_top); check_removable_map deletes top-level map entries whose
 * message value has a bool field named "removed" set to true.
 *
 * Pure: no I/O, no globals, no locks. Any thread, on descriptors from a published schema.
 * Hostile input yields CQ_EDECODE, never a crash: nesting is limited to CQ_MERGE_MAX_DEPTH
 * levels and every length is checked. Every input byte is validated, including sub-messages
 * that the result drops (replaced map entries, cleared oneof members, replaced or truncated
 * lists), so an input that protobuf would reject is rejected as a whole.
 */
#ifndef CQ_MERGE_H
#define CQ_MERGE_H

#include "cq_sbuf.h"
#include "cq_schema.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CQ_MERGE_MAX_DEPTH 64

/* channeld's ChannelDataMergeOptions. */
typedef struct cq_merge_opts {
    bool replace_list;        /* shouldReplaceList */
    uint32_t list_size_limit; /* listSizeLimit; 0 = no limit */
    bool truncate_top;        /* truncateTop: keep the last N instead of the first N */
    bool check_removable_map; /* shouldCheckRemovableMapField */
} cq_merge_opts_t;

/* Merges src[0..slen) into dst[0..dlen), both serialized messages of type d (all borrowed),
 * and APPENDS the canonical result to out. opts (borrowed) may be NULL: plain protobuf merge,
 * no removal. Returns 0, CQ_EDECODE (malformed input, too deep), CQ_ETOOBIG (inputs over
 * 2 GiB) or -ENOMEM; on failure out->len is restored (its contents past it are unspecified). */
int cq_merge(const cq_msgdesc_t *d, const uint8_t *dst, size_t dlen, const uint8_t *src,
             size_t slen, const cq_merge_opts_t *opts, cq_sbuf_t *out);

/* Appends the canonical encoding of message p[0..n) of type d to out: cq_merge() with an
 * empty dst and no options. compact(compact(x)) == compact(x). Same return codes. */
int cq_compact(const cq_msgdesc_t *d, const uint8_t *p, size_t n, cq_sbuf_t *out);

/* ---- internal: wire helpers shared with cq_fieldmask.c ------------------------------------ */

/* One field read from the wire: tag fields, the whole field [start, end) and its payload
 * (varint bytes, fixed bytes, LEN content, or group content). */
typedef struct cq__wfield {
    uint32_t number;
    uint8_t wt;
    const uint8_t *start, *end;
    const uint8_t *pay;
    size_t pay_len;
} cq__wfield_t;

/* Reads the field at *p (p < end), skipping nested groups up to the depth limit, and advances
 * *p. Returns 0 or CQ_EDECODE. */
int cq__merge_read_field(const uint8_t **p, const uint8_t *end, int depth, cq__wfield_t *ret);

/* True when wire type wt is a valid encoding of field f (packed form included). */
bool cq__merge_wt_ok(const cq_fielddesc_t *f, uint8_t wt);

/* Appends a tag; 0 or -ENOMEM. */
int cq__merge_put_tag(cq_sbuf_t *out, uint32_t number, uint8_t wt);

/* Appends a varint; 0 or -ENOMEM. */
int cq__merge_put_varint(cq_sbuf_t *out, uint64_t v);

/* Length-delimited bodies written in place: cq__merge_begin_len() reserves the length and
 * returns the body offset through *ret_off; cq__merge_end_len() writes the body's length. */
int cq__merge_begin_len(cq_sbuf_t *out, size_t *ret_off);
int cq__merge_end_len(cq_sbuf_t *out, size_t off);

#endif
