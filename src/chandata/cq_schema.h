/* cq_schema.h - protobuf message types loaded at run time from descriptor sets.
 *
 * A schema holds the message types of one or more FileDescriptorSets, as written by
 * `protoc --include_imports --descriptor_set_out=...`. Each message type becomes a
 * cq_msgdesc_t that the wire-level merge (cq_merge.h) and field-mask filter (cq_fieldmask.h)
 * walk. Only what those need is kept: field numbers, names, wire-level kinds, labels, packing,
 * maps, presence and oneofs.
 *
 * Threads: a schema is built by one thread (cq_schema_new, cq_schema_add_fds,
 * cq_schema_load_file). Once published it is immutable, and any number of threads may call the
 * const functions on it and read the descriptors concurrently. Descriptors are owned by the
 * schema and live until cq_schema_free().
 */
#ifndef CQ_SCHEMA_H
#define CQ_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cq_schema cq_schema_t;
typedef struct cq_msgdesc cq_msgdesc_t;

/* Wire-level kind of a field: how its values are encoded and compared. */
typedef enum cq_fkind {
    CQ_FK_VARINT = 1, /* int32, int64, uint32, uint64 (see cq_fielddesc_t.bits32/is_signed) */
    CQ_FK_ZIGZAG32,   /* sint32 */
    CQ_FK_ZIGZAG64,   /* sint64 */
    CQ_FK_BOOL,
    CQ_FK_ENUM,    /* int32 on the wire */
    CQ_FK_FIXED32, /* fixed32, sfixed32, float */
    CQ_FK_FIXED64, /* fixed64, sfixed64, double */
    CQ_FK_STRING,
    CQ_FK_BYTES,
    CQ_FK_MESSAGE, /* also map fields (msg is then the synthetic map entry type) */
} cq_fkind_t;

/* One field of a message type. Read-only. */
typedef struct cq_fielddesc {
    uint32_t number;
    const char *name;        /* as in the .proto, e.g. "tick_ids" */
    cq_fkind_t kind;         /* wire-level kind */
    uint8_t pb_type;         /* FieldDescriptorProto.Type (1..18) as declared */
    bool bits32;             /* value is 32 bits wide (int32/uint32/sint32/enum) */
    bool is_signed;          /* int32/int64/sint32/sint64/enum/sfixed32/sfixed64 */
    bool repeated;           /* repeated (maps are repeated too) */
    bool packed;             /* repeated scalar written packed (proto3 default) */
    bool is_map;             /* map<K, V>: msg is the entry type, see map_key/map_value */
    bool has_presence;       /* explicit presence: proto2, proto3 optional, oneof, message */
    int32_t oneof;           /* index into the message's oneofs, or -1 (proto3 optional: -1) */
    const cq_msgdesc_t *msg; /* CQ_FK_MESSAGE: the field's message type, else NULL */
    const char *type_name;   /* ".pkg.Msg" / ".pkg.Enum" for message and enum fields */
} cq_fielddesc_t;

/* A message type. Read-only; owned by its schema. */
struct cq_msgdesc {
    const char *full_name; /* "pkg.Outer.Inner" */
    bool proto3;           /* declared in a proto3 file */
    bool map_entry;        /* synthetic map entry type (key = 1, value = 2) */
    size_t n_fields;       /* fields sorted by number */
    const cq_fielddesc_t *fields;
    size_t n_oneofs;               /* real oneofs (synthetic proto3-optional ones excluded) */
    const cq_fielddesc_t *map_key; /* map entries only, else NULL */
    const cq_fielddesc_t *map_value;
    const cq_fielddesc_t *removed; /* a singular bool field named "removed", or NULL */
};

/* Creates an empty schema. *ret is returned owned (cq_schema_free). 0 or -ENOMEM. */
int cq_schema_new(cq_schema_t **ret);

/* Adds every message type of the serialized FileDescriptorSet fds[0..len) (borrowed; not
 * referenced after the call). A file whose name is already loaded is skipped; a message type
 * whose full name is already loaded from another file is an error. type_name references are
 * resolved across every loaded file (so a set may depend on one loaded earlier). On failure
 * the schema is unchanged and, if err/errlen are given, a NUL-terminated reason is written.
 * Returns 0, CQ_EDECODE (not a FileDescriptorSet), CQ_ECONFIG (unresolved type, group field,
 * duplicate type, bad field, unsupported syntax) or -ENOMEM. Builder thread only. */
int cq_schema_add_fds(cq_schema_t *s, const uint8_t *fds, size_t len, char *err, size_t errlen);

/* Reads a descriptor set file (at most 64 MiB) and adds it as cq_schema_add_fds() does.
 * Returns the same codes plus -errno from reading the file. Builder thread only. */
int cq_schema_load_file(cq_schema_t *s, const char *path, char *err, size_t errlen);

/* Looks up a message type by full name ("pkg.Msg"; a leading '.' is accepted). Returns a
 * borrowed descriptor (valid until cq_schema_free) or NULL. Any thread. */
const cq_msgdesc_t *cq_schema_find(const cq_schema_t *s, const char *full_name);

/* Looks up the message type of an Any type URL: the part after the last '/'
 * ("type.googleapis.com/pkg.Msg" -> "pkg.Msg"). Borrowed result or NULL. Any thread. */
const cq_msgdesc_t *cq_schema_find_type_url(const cq_schema_t *s, const char *type_url);

/* Number of message types loaded (nested and map entry types included). Any thread. */
size_t cq_schema_count(const cq_schema_t *s);

/* Frees the schema and every descriptor in it. Accepts NULL; returns NULL. */
cq_schema_t *cq_schema_free(cq_schema_t *s);

/* The field with this number, or NULL (binary search). Borrowed. Any thread. */
const cq_fielddesc_t *cq_msgdesc_field(const cq_msgdesc_t *d, uint32_t number);

/* The field with this name, or NULL (linear search). Borrowed. Any thread. */
const cq_fielddesc_t *cq_msgdesc_field_by_name(const cq_msgdesc_t *d, const char *name,
                                               size_t name_len);

#endif
