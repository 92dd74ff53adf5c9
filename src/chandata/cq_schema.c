/* cq_schema.c - message descriptors from FileDescriptorSets (see cq_schema.h).
 *
 * The set is unpacked with the protobuf-c code generated from proto/descriptor.proto (our own
 * minimal text of google/protobuf/descriptor.proto), through an allocator that calls
 * cq_malloc so the fail-N tests reach it. New types are built into a staging list, resolved
 * against the loaded and the new types together, and committed only when everything resolved,
 * so a failed load leaves the schema unchanged.
 */
#include "cq_schema.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_file.h"
#include "descriptor.pb-c.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FDS_FILE (64u << 20)
#define MAX_FIELD_NO 536870911u /* 2^29 - 1 */

typedef Google__Protobuf__FileDescriptorSet fds_pb_t;
typedef Google__Protobuf__FileDescriptorProto file_pb_t;
typedef Google__Protobuf__DescriptorProto msg_pb_t;
typedef Google__Protobuf__FieldDescriptorProto field_pb_t;

struct cq_schema {
    cq_msgdesc_t **msgs; /* sorted by full_name */
    size_t n_msgs;
    char **files; /* names of the loaded .proto files */
    size_t n_files;
};

/* A growable list of message descriptors being built. */
typedef struct stage {
    cq_msgdesc_t **v;
    size_t n, cap;
} stage_t;

/* ------------------------------------------------------------------------------------------ */
/* protobuf-c allocator over cq_malloc, remembering whether an allocation failed */

typedef struct pb_alloc_state {
    bool oom;
} pb_alloc_state_t;

static void *pb_alloc(void *data, size_t size)
{
    void *p = cq_malloc(size ? size : 1);
    if (!p)
        ((pb_alloc_state_t *)data)->oom = true;
    return p;
}

static void pb_free(void *data, void *p)
{
    (void)data;
    cq_free(p);
}

/* ------------------------------------------------------------------------------------------ */
/* descriptors */

static void msgdesc_free(cq_msgdesc_t *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n_fields; i++) {
        cq_free((void *)d->fields[i].name);
        cq_free((void *)d->fields[i].type_name);
    }
    cq_free((void *)d->fields);
    cq_free((void *)d->full_name);
    cq_free(d);
}

static void stage_done(stage_t *st)
{
    for (size_t i = 0; i < st->n; i++)
        msgdesc_free(st->v[i]);
    cq_free(st->v);
    st->v = NULL;
    st->n = st->cap = 0;
}

static int stage_push(stage_t *st, cq_msgdesc_t *d)
{
    if (st->n == st->cap) {
        size_t ncap = st->cap ? st->cap * 2 : 16;
        cq_msgdesc_t **nv = cq_realloc(st->v, ncap * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        st->v = nv;
        st->cap = ncap;
    }
    st->v[st->n++] = d;
    return 0;
}

static int cmp_field_no(const void *a, const void *b)
{
    const cq_fielddesc_t *x = a, *y = b;
    return x->number < y->number ? -1 : x->number > y->number;
}

static int cmp_msg_name(const void *a, const void *b)
{
    const cq_msgdesc_t *const *x = a, *const *y = b;
    return strcmp((*x)->full_name, (*y)->full_name);
}

/* Sets kind, pb_type, bits32 and is_signed from FieldDescriptorProto.Type. */
static int set_kind(cq_fielddesc_t *f, int type)
{
    static const struct {
        uint8_t kind, bits32, is_signed;
    } map[19] = {
        [1] = {CQ_FK_FIXED64, 0, 0},   [2] = {CQ_FK_FIXED32, 0, 0},   [3] = {CQ_FK_VARINT, 0, 1},
        [4] = {CQ_FK_VARINT, 0, 0},    [5] = {CQ_FK_VARINT, 1, 1},    [6] = {CQ_FK_FIXED64, 0, 0},
        [7] = {CQ_FK_FIXED32, 0, 0},   [8] = {CQ_FK_BOOL, 0, 0},      [9] = {CQ_FK_STRING, 0, 0},
        [11] = {CQ_FK_MESSAGE, 0, 0},  [12] = {CQ_FK_BYTES, 0, 0},    [13] = {CQ_FK_VARINT, 1, 0},
        [14] = {CQ_FK_ENUM, 1, 1},     [15] = {CQ_FK_FIXED32, 0, 1},  [16] = {CQ_FK_FIXED64, 0, 1},
        [17] = {CQ_FK_ZIGZAG32, 1, 1}, [18] = {CQ_FK_ZIGZAG64, 0, 1},
    };
    if (type < 1 || type > 18 || !map[type].kind)
        return -1; /* 10 = group, or unknown */
    f->kind = (cq_fkind_t)map[type].kind;
    f->pb_type = (uint8_t)type;
    f->bits32 = map[type].bits32;
    f->is_signed = map[type].is_signed;
    return 0;
}

static bool kind_packable(cq_fkind_t k)
{
    return k != CQ_FK_STRING && k != CQ_FK_BYTES && k != CQ_FK_MESSAGE;
}

/* Fills f from fp (everything but msg, which is resolved later). */
static int build_field(cq_fielddesc_t *f, const field_pb_t *fp, const msg_pb_t *mp, bool proto3,
                       const char *mname, char *err, size_t errlen)
{
    if (!fp->name || !fp->has_number || fp->number < 1 || (uint32_t)fp->number > MAX_FIELD_NO)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: field without a valid name/number", mname);
    if (!fp->has_type || set_kind(f, (int)fp->type) < 0)
        return cq_err_fmt(err, errlen, CQ_ECONFIG,
                          "%s.%s: unsupported field type (groups are "
                          "not supported)",
                          mname, fp->name);
    f->number = (uint32_t)fp->number;
    f->repeated = fp->has_label &&
                  fp->label == GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__LABEL__LABEL_REPEATED;
    bool optional3 = fp->has_proto3_optional && fp->proto3_optional;
    f->oneof = -1;
    if (fp->has_oneof_index && !optional3) {
        if (fp->oneof_index < 0 || (size_t)fp->oneof_index >= mp->n_oneof_decl || f->repeated)
            return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s.%s: bad oneof_index", mname, fp->name);
        f->oneof = fp->oneof_index;
    }
    if (f->repeated && kind_packable(f->kind))
        f->packed = fp->options && fp->options->has_packed ? fp->options->packed : proto3;
    f->has_presence =
        !f->repeated && (!proto3 || optional3 || f->oneof >= 0 || f->kind == CQ_FK_MESSAGE);
    if ((f->kind == CQ_FK_MESSAGE || f->kind == CQ_FK_ENUM) && !fp->type_name)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s.%s: no type_name", mname, fp->name);
    f->name = cq_strdup(fp->name);
    f->type_name = fp->type_name ? cq_strdup(fp->type_name) : NULL;
    if (!f->name || (fp->type_name && !f->type_name))
        return -ENOMEM;
    return 0;
}

static char *join_name(const char *prefix, const char *name)
{
    size_t a = prefix ? strlen(prefix) : 0, b = strlen(name);
    char *s = cq_malloc(a + b + 2);
    if (!s)
        return NULL;
    if (a) {
        memcpy(s, prefix, a);
        s[a++] = '.';
    }
    memcpy(s + a, name, b + 1);
    return s;
}

/* Field lists, oneof count, map entry key/value and the "removed" flag field. */
static int build_fields(cq_msgdesc_t *d, const msg_pb_t *mp, bool proto3, char *err, size_t errlen)
{
    cq_fielddesc_t *fs = cq_calloc(mp->n_field ? mp->n_field : 1, sizeof(*fs));
    if (!fs)
        return -ENOMEM;
    d->fields = fs;
    for (size_t i = 0; i < mp->n_field; i++) {
        d->n_fields = i + 1; /* so msgdesc_free frees what was built */
        int r = build_field(&fs[i], mp->field[i], mp, proto3, d->full_name, err, errlen);
        if (r < 0)
            return r;
        if (fs[i].oneof >= 0 && (size_t)fs[i].oneof + 1 > d->n_oneofs)
            d->n_oneofs = (size_t)fs[i].oneof + 1;
    }
    qsort(fs, d->n_fields, sizeof(*fs), cmp_field_no);
    for (size_t i = 0; i < d->n_fields; i++) {
        if (i && fs[i].number == fs[i - 1].number)
            return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: duplicate field number %u",
                              d->full_name, fs[i].number);
        if (!fs[i].repeated && fs[i].kind == CQ_FK_BOOL && !strcmp(fs[i].name, "removed"))
            d->removed = &fs[i];
    }
    if (d->map_entry) {
        d->map_key = cq_msgdesc_field(d, 1);
        d->map_value = cq_msgdesc_field(d, 2);
        if (!d->map_key || !d->map_value || d->map_key->repeated || d->map_value->repeated)
            return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: bad map entry", d->full_name);
    }
    return 0;
}

static int build_msg(stage_t *st, const msg_pb_t *mp, const char *prefix, bool proto3, int depth,
                     char *err, size_t errlen)
{
    if (!mp->name || !mp->name[0])
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "message without a name in %s",
                          prefix ? prefix : "(root)");
    if (depth > 32)
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: types nested too deeply", mp->name);
    cq_msgdesc_t *d = cq_calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->proto3 = proto3;
    d->map_entry = mp->options && mp->options->has_map_entry && mp->options->map_entry;
    int r = -ENOMEM;
    d->full_name = join_name(prefix, mp->name);
    if (!d->full_name || (r = stage_push(st, d)) < 0) {
        msgdesc_free(d);
        return r;
    }
    r = build_fields(d, mp, proto3, err, errlen);
    for (size_t i = 0; r == 0 && i < mp->n_nested_type; i++)
        r = build_msg(st, mp->nested_type[i], d->full_name, proto3, depth + 1, err, errlen);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* loading */

static bool file_loaded(const cq_schema_t *s, const fds_pb_t *set, size_t upto, const char *name)
{
    for (size_t i = 0; i < s->n_files; i++)
        if (!strcmp(s->files[i], name))
            return true;
    for (size_t i = 0; i < upto; i++)
        if (set->file[i]->name && !strcmp(set->file[i]->name, name))
            return true;
    return false;
}

static int build_file(stage_t *st, const file_pb_t *fp, char *err, size_t errlen)
{
    bool proto3;
    if (!fp->syntax || !strcmp(fp->syntax, "proto2") || !fp->syntax[0])
        proto3 = false;
    else if (!strcmp(fp->syntax, "proto3"))
        proto3 = true;
    else
        return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s: unsupported syntax \"%s\"", fp->name,
                          fp->syntax);
    const char *pkg = fp->package && fp->package[0] ? fp->package : NULL;
    for (size_t i = 0; i < fp->n_message_type; i++) {
        int r = build_msg(st, fp->message_type[i], pkg, proto3, 0, err, errlen);
        if (r < 0)
            return r;
    }
    return 0;
}

static const cq_msgdesc_t *find_in(cq_msgdesc_t *const *v, size_t n, const char *name)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, v[mid]->full_name);
        if (!c)
            return v[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* Resolves the message fields of the staged types against all (sorted) types. */
static int resolve(stage_t *st, cq_msgdesc_t *const *all, size_t n_all, char *err, size_t errlen)
{
    for (size_t i = 0; i < st->n; i++) {
        cq_msgdesc_t *d = st->v[i];
        for (size_t j = 0; j < d->n_fields; j++) {
            cq_fielddesc_t *f = (cq_fielddesc_t *)&d->fields[j];
            if (f->kind != CQ_FK_MESSAGE)
                continue;
            const char *tn = f->type_name[0] == '.' ? f->type_name + 1 : f->type_name;
            f->msg = find_in(all, n_all, tn);
            if (!f->msg)
                return cq_err_fmt(err, errlen, CQ_ECONFIG, "%s.%s: unknown type %s", d->full_name,
                                  f->name, f->type_name);
            f->is_map = f->repeated && f->msg->map_entry;
        }
    }
    return 0;
}

/* Merges the staged types with the loaded ones into a new sorted array (*ret, owned). */
static int merge_names(const cq_schema_t *s, const stage_t *st, cq_msgdesc_t ***ret, char *err,
                       size_t errlen)
{
    size_t n = s->n_msgs + st->n;
    cq_msgdesc_t **all = cq_malloc((n ? n : 1) * sizeof(*all));
    if (!all)
        return -ENOMEM;
    if (s->n_msgs)
        memcpy(all, s->msgs, s->n_msgs * sizeof(*all));
    if (st->n)
        memcpy(all + s->n_msgs, st->v, st->n * sizeof(*all));
    qsort(all, n, sizeof(*all), cmp_msg_name);
    for (size_t i = 1; i < n; i++) {
        if (!strcmp(all[i]->full_name, all[i - 1]->full_name)) {
            int r = cq_err_fmt(err, errlen, CQ_ECONFIG, "duplicate type %s", all[i]->full_name);
            cq_free(all);
            return r;
        }
    }
    *ret = all;
    return 0;
}

/* Appends the new file names to s->files. */
static int add_file_names(cq_schema_t *s, const fds_pb_t *set, const bool *take)
{
    size_t add = 0;
    for (size_t i = 0; i < set->n_file; i++)
        add += take[i];
    char **nf = cq_realloc(s->files, (s->n_files + add + 1) * sizeof(*nf));
    if (!nf)
        return -ENOMEM;
    s->files = nf;
    size_t n = s->n_files;
    for (size_t i = 0; i < set->n_file; i++) {
        if (!take[i])
            continue;
        nf[n] = cq_strdup(set->file[i]->name);
        if (!nf[n]) {
            for (size_t j = s->n_files; j < n; j++)
                cq_free(nf[j]);
            return -ENOMEM;
        }
        n++;
    }
    s->n_files = n;
    return 0;
}

static int add_set(cq_schema_t *s, const fds_pb_t *set, bool *take, char *err, size_t errlen)
{
    stage_t st = {0};
    cq_msgdesc_t **all = NULL;
    int r = 0;
    for (size_t i = 0; i < set->n_file && r == 0; i++) {
        const file_pb_t *fp = set->file[i];
        if (!fp->name) {
            r = cq_err_fmt(err, errlen, CQ_ECONFIG, "file without a name");
            break;
        }
        take[i] = !file_loaded(s, set, i, fp->name);
        if (take[i])
            r = build_file(&st, fp, err, errlen);
    }
    if (r == 0)
        r = merge_names(s, &st, &all, err, errlen);
    if (r == 0)
        r = resolve(&st, all, s->n_msgs + st.n, err, errlen);
    if (r == 0)
        r = add_file_names(s, set, take);
    if (r < 0) {
        cq_free(all);
        stage_done(&st);
        return r;
    }
    cq_free(s->msgs);
    s->msgs = all;
    s->n_msgs += st.n;
    cq_free(st.v); /* the descriptors now belong to s */
    return 0;
}

int cq_schema_add_fds(cq_schema_t *s, const uint8_t *fds, size_t len, char *err, size_t errlen)
{
    pb_alloc_state_t st = {false};
    ProtobufCAllocator alloc = {pb_alloc, pb_free, &st};
    fds_pb_t *set = google__protobuf__file_descriptor_set__unpack(&alloc, len, fds);
    if (!set) {
        if (st.oom)
            return -ENOMEM;
        return cq_err_fmt(err, errlen, CQ_EDECODE, "not a FileDescriptorSet");
    }
    bool *take = cq_calloc(set->n_file ? set->n_file : 1, sizeof(*take));
    int r = take ? add_set(s, set, take, err, errlen) : -ENOMEM;
    cq_free(take);
    google__protobuf__file_descriptor_set__free_unpacked(set, &alloc);
    return r;
}

int cq_schema_load_file(cq_schema_t *s, const char *path, char *err, size_t errlen)
{
    char *buf = NULL;
    size_t len = 0;
    int r = cq_file_read(path, MAX_FDS_FILE, &buf, &len);
    if (r < 0)
        return cq_err_fmt(err, errlen, r, "%s: %s", path, cq_strerror(r));
    r = cq_schema_add_fds(s, (const uint8_t *)buf, len, err, errlen);
    cq_free(buf);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* lifetime and lookups */

int cq_schema_new(cq_schema_t **ret)
{
    cq_schema_t *s = cq_calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    *ret = s;
    return 0;
}

cq_schema_t *cq_schema_free(cq_schema_t *s)
{
    if (!s)
        return NULL;
    for (size_t i = 0; i < s->n_msgs; i++)
        msgdesc_free(s->msgs[i]);
    for (size_t i = 0; i < s->n_files; i++)
        cq_free(s->files[i]);
    cq_free(s->msgs);
    cq_free(s->files);
    cq_free(s);
    return NULL;
}

const cq_msgdesc_t *cq_schema_find(const cq_schema_t *s, const char *full_name)
{
    if (!s || !full_name)
        return NULL;
    if (full_name[0] == '.')
        full_name++;
    return find_in(s->msgs, s->n_msgs, full_name);
}

const cq_msgdesc_t *cq_schema_find_type_url(const cq_schema_t *s, const char *type_url)
{
    if (!type_url)
        return NULL;
    const char *slash = strrchr(type_url, '/');
    return cq_schema_find(s, slash ? slash + 1 : type_url);
}

size_t cq_schema_count(const cq_schema_t *s)
{
    return s ? s->n_msgs : 0;
}

const cq_fielddesc_t *cq_msgdesc_field(const cq_msgdesc_t *d, uint32_t number)
{
    size_t lo = 0, hi = d->n_fields;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t n = d->fields[mid].number;
        if (n == number)
            return &d->fields[mid];
        if (number < n)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const cq_fielddesc_t *cq_msgdesc_field_by_name(const cq_msgdesc_t *d, const char *name,
                                               size_t name_len)
{
    for (size_t i = 0; i < d->n_fields; i++) {
        const char *fn = d->fields[i].name;
        if (!strncmp(fn, name, name_len) && fn[name_len] == '\0')
            return &d->fields[i];
    }
    return NULL;
}
