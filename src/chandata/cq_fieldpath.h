/* cq_fieldpath.h - reading a vector at a field path, and uint32-keyed map edits, on wire bytes.
 *
 * Handover (doc/spatial.md) needs two things from channel data whose types are known only at
 * run time: an entity's position (a message with float or double fields named x, y, z, found
 * at a dotted path of singular message fields such as "transform.position"), and moving
 * entries of a map<uint32, M> between two cells' data. Both work on serialized messages of a
 * schema type (cq_schema.h) without decoding the rest.
 *
 * Semantics follow protobuf's parse of the bytes: a singular message field that occurs more
 * than once is merged, so each vector component is the last one written; a map key that
 * occurs more than once is the last entry.
 *
 * Pure: no I/O, no globals, no locks. Any thread, on descriptors from a published schema.
 * Hostile bytes yield CQ_EDECODE, never a crash.
 */
#ifndef CQ_FIELDPATH_H
#define CQ_FIELDPATH_H

#include "cq_sbuf.h"
#include "cq_schema.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Resolves path (dot-separated field names) in type d: every element must be a singular
 * message field, and the last one's type must have an x, y or z field of type float or
 * double. Returns 0 or CQ_EFIELD (unknown name, repeated/map/scalar on the way, no x/y/z). */
int cq_fieldpath_check_vec3(const cq_msgdesc_t *d, const char *path);

/* Reads the vector at path from message p[0..n) of type d (borrowed). ret[0..2] = x, y, z;
 * a component the bytes do not carry is 0 (proto3's default). Returns 1 when the vector's
 * message is present, 0 when it is absent (ret zeroed), CQ_EFIELD as cq_fieldpath_check_vec3,
 * or CQ_EDECODE on malformed bytes. */
int cq_fieldpath_vec3(const cq_msgdesc_t *d, const char *path, const uint8_t *p, size_t n,
                      double ret[3]);

/* The map<uint32, M> field called field in d, or NULL when d has none by that name (or its
 * key is not a varint type). Borrowed. */
const cq_fielddesc_t *cq_mapops_field(const cq_msgdesc_t *d, const char *field);

/* Copies message p[0..n) to out (appended) without the entries of map field f whose key is
 * one of keys[0..nkeys); the value bytes of the last removed entry of keys[i] are appended
 * to taken[i] (NULL: not collected; each taken[i] is left as is when the key is absent, and
 * *found, when given, gets bit i set when it was there; nkeys <= 64). Returns 0, CQ_EDECODE
 * or -ENOMEM (out->len restored). */
int cq_mapops_take(const cq_fielddesc_t *f, const uint8_t *p, size_t n, const uint32_t *keys,
                   size_t nkeys, cq_sbuf_t *out, cq_sbuf_t *taken, uint64_t *found);

/* Appends one entry {key, value v[0..vlen)} of map field f to out: put after a message that
 * has no entry for key, it sets it (and after one that has, it replaces it). 0 or -ENOMEM. */
int cq_mapops_put(const cq_fielddesc_t *f, uint32_t key, const uint8_t *v, size_t vlen,
                  cq_sbuf_t *out);

/* Appends message p[0..n) without any occurrence of field number `number`, then that field
 * as a google.protobuf.Any {type_url, value v[0..vlen)}: the message with its Any field set.
 * Returns 0, CQ_EDECODE or -ENOMEM. */
int cq_fieldpath_set_any(const uint8_t *p, size_t n, uint32_t number, const char *type_url,
                         const uint8_t *v, size_t vlen, cq_sbuf_t *out);

#endif
