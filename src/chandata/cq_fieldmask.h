/* cq_fieldmask.h - FieldMask filtering of serialized messages (subscription dataFieldMasks).
 *
 * Keeps only the fields named by a list of paths, on wire bytes, writing a new message: the
 * input (normally the channel's master state) is never modified, which fixes channeld's
 * in-place masking of the shared copy (channeld-protocol §2.6).
 *
 * Path semantics: a path is dot-separated field names as written in the .proto ("entities",
 * "room.title"). A path naming a field keeps all of it. A longer path keeps only the named
 * sub-fields of a message field; through a repeated message field it applies to every element
 * and through a map field to every value (map keys are always kept). A path continuing into a
 * scalar field keeps that field. Paths are a union: "room" together with "room.title" keeps all
 * of room. Unknown path components name nothing (a list of only unknown paths yields an empty
 * message); empty components are skipped ("a..b" is "a.b"). Unknown fields of the message are
 * dropped whenever a mask applies to their level. An empty path list keeps everything.
 *
 * Pure; any thread, on descriptors from a published schema.
 */
#ifndef CQ_FIELDMASK_H
#define CQ_FIELDMASK_H

#include "cq_sbuf.h"
#include "cq_schema.h"

#include <stddef.h>
#include <stdint.h>

/* Filters message p[0..n) of type d by paths[0..n_paths) (all borrowed) and APPENDS the
 * result to out. Fields are written in input order (a canonical input, such as cq_merge
 * output, gives a canonical result). Returns 0, CQ_EDECODE (malformed input, nesting over
 * CQ_MERGE_MAX_DEPTH) or -ENOMEM; on failure out->len is restored. */
int cq_fieldmask_filter(const cq_msgdesc_t *d, const char *const *paths, size_t n_paths,
                        const uint8_t *p, size_t n, cq_sbuf_t *out);

#endif
