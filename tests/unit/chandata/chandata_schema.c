/* Schema loading: names, nesting, maps, packing, presence, oneofs, errors, fail-N. */
#include "test_chandata.h"

#include "descriptor.pb-c.h"
#include "test_alloc.h"

#include <errno.h>
#include <string.h>

static const cq_fielddesc_t *F(const cq_msgdesc_t *d, const char *name)
{
    const cq_fielddesc_t *f = cq_msgdesc_field_by_name(d, name, strlen(name));
    if (!f)
        fail_msg("%s has no field %s", d->full_name, name);
    return f;
}

void test_schema_types(void **state)
{
    const char *names[] = {
        "chanqtest.Vec3",        "chanqtest.Entity",
        "chanqtest.EntityWorld", "chanqtest.EntityWorld.EntitiesEntry",
        "chanqtest.ChatMessage", "chanqtest.ChatRoom",
        "google.protobuf.Any",   "testpb.TestChannelDataMessage",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        assert_string_equal(T(names[i])->full_name, names[i]);
    assert_int_equal(cq_schema_count(g_schema), 8);
    assert_true(T("chanqtest.ChatRoom")->proto3);
    assert_false(T("chanqtest.ChatRoom")->map_entry);
}

void test_schema_fields(void **state)
{
    const cq_msgdesc_t *w = T("chanqtest.EntityWorld");
    assert_int_equal(w->n_fields, 3);
    for (size_t i = 0; i < w->n_fields; i++)
        assert_int_equal(w->fields[i].number, i + 1);
    const cq_fielddesc_t *ticks = F(w, "tick_ids");
    assert_int_equal(ticks->kind, CQ_FK_VARINT);
    assert_true(ticks->bits32 && !ticks->is_signed && ticks->repeated && ticks->packed);
    assert_false(ticks->has_presence);
    const cq_fielddesc_t *name = F(w, "name");
    assert_int_equal(name->kind, CQ_FK_STRING);
    assert_false(name->has_presence || name->repeated || name->packed);

    const cq_msgdesc_t *e = T("chanqtest.Entity");
    assert_int_equal(e->n_oneofs, 1); /* the synthetic oneof of `optional hp` is not counted */
    assert_ptr_equal(e->removed, F(e, "removed"));
    assert_int_equal(F(e, "removed")->kind, CQ_FK_BOOL);
    assert_ptr_equal(F(e, "pos")->msg, T("chanqtest.Vec3"));
    assert_ptr_equal(F(e, "extra")->msg, T("google.protobuf.Any"));
    assert_string_equal(F(e, "extra")->type_name, ".google.protobuf.Any");
    assert_true(F(e, "tags")->repeated);
    assert_false(F(e, "tags")->packed); /* strings are never packed */
    assert_int_equal(F(e, "hp")->oneof, -1);
    assert_true(F(e, "hp")->has_presence && F(e, "hp")->is_signed && F(e, "hp")->bits32);
    assert_int_equal(F(e, "npc")->oneof, 0);
    assert_int_equal(F(e, "player_conn")->oneof, 0);
    assert_true(F(e, "npc")->has_presence && F(e, "player_conn")->has_presence);
    assert_int_equal(F(T("chanqtest.Vec3"), "x")->kind, CQ_FK_FIXED32);
    const cq_fielddesc_t *t = F(T("chanqtest.ChatMessage"), "time");
    assert_true(t->kind == CQ_FK_VARINT && t->is_signed && !t->bits32);
    assert_null(cq_msgdesc_field(e, 9));
    assert_ptr_equal(cq_msgdesc_field(e, 7), F(e, "player_conn"));
    assert_null(T("chanqtest.Vec3")->removed);
}

void test_schema_maps_and_presence(void **state)
{
    const cq_msgdesc_t *w = T("chanqtest.EntityWorld");
    const cq_fielddesc_t *ents = F(w, "entities");
    assert_true(ents->is_map && ents->repeated && !ents->packed);
    const cq_msgdesc_t *en = ents->msg;
    assert_ptr_equal(en, T("chanqtest.EntityWorld.EntitiesEntry"));
    assert_true(en->map_entry);
    assert_int_equal(en->map_key->number, 1);
    assert_int_equal(en->map_key->kind, CQ_FK_VARINT);
    assert_ptr_equal(en->map_value->msg, T("chanqtest.Entity"));
    assert_true(F(T("chanqtest.Entity"), "pos")->has_presence); /* message fields */
    assert_false(F(T("chanqtest.Entity"), "label")->has_presence);
}

void test_schema_lookup(void **state)
{
    const cq_msgdesc_t *d = T("testpb.TestChannelDataMessage");
    assert_ptr_equal(cq_schema_find(g_schema, ".testpb.TestChannelDataMessage"), d);
    assert_ptr_equal(
        cq_schema_find_type_url(g_schema, "type.googleapis.com/testpb.TestChannelDataMessage"), d);
    assert_ptr_equal(cq_schema_find_type_url(g_schema, "testpb.TestChannelDataMessage"), d);
    assert_null(cq_schema_find_type_url(g_schema, "type.googleapis.com/testpb.Nope"));
    assert_null(cq_schema_find(g_schema, "testpb"));
    assert_null(cq_schema_find(g_schema, ""));
    assert_null(cq_schema_find(NULL, "x"));
    assert_null(cq_schema_find_type_url(g_schema, NULL));
}

/* ---- hand-made descriptor sets --------------------------------------------------------- */

typedef struct one_field_set {
    Google__Protobuf__FileDescriptorSet set;
    Google__Protobuf__FileDescriptorProto file, *files[1];
    Google__Protobuf__DescriptorProto msg, *msgs[1];
    Google__Protobuf__FieldDescriptorProto field, *fields[1];
} one_field_set_t;

/* file `fname`, package pkg, message `M` with one optional field `f` = number of `type`. */
static void mk_set(one_field_set_t *s, const char *fname, const char *pkg, const char *syntax,
                   int number, int type, const char *type_name)
{
    google__protobuf__file_descriptor_set__init(&s->set);
    google__protobuf__file_descriptor_proto__init(&s->file);
    google__protobuf__descriptor_proto__init(&s->msg);
    google__protobuf__field_descriptor_proto__init(&s->field);
    s->files[0] = &s->file;
    s->msgs[0] = &s->msg;
    s->fields[0] = &s->field;
    s->set.n_file = 1;
    s->set.file = s->files;
    s->file.name = (char *)fname;
    s->file.package = (char *)pkg;
    s->file.syntax = (char *)syntax;
    s->file.n_message_type = 1;
    s->file.message_type = s->msgs;
    s->msg.name = "M";
    s->msg.n_field = 1;
    s->msg.field = s->fields;
    s->field.name = "f";
    s->field.has_number = 1;
    s->field.number = number;
    s->field.has_label = 1;
    s->field.label = GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__LABEL__LABEL_OPTIONAL;
    s->field.has_type = 1;
    s->field.type = (Google__Protobuf__FieldDescriptorProto__Type)type;
    s->field.type_name = (char *)type_name;
}

static int add_set(cq_schema_t *sc, one_field_set_t *s, char *err, size_t errlen)
{
    cq_sbuf_t b;
    pack_msg(&s->set.base, &b);
    int r = cq_schema_add_fds(sc, b.data, b.len, err, errlen);
    cq_sbuf_done(&b);
    return r;
}

void test_schema_bad_input(void **state)
{
    cq_schema_t *sc;
    char err[128];
    assert_int_equal(cq_schema_new(&sc), 0);
    static const uint8_t junk[] = {0x0a, 0x05, 0x01};
    assert_int_equal(cq_schema_add_fds(sc, junk, sizeof(junk), err, sizeof(err)), CQ_EDECODE);
    assert_int_equal(cq_schema_load_file(sc, "/nonexistent/x.fds", err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "/nonexistent/x.fds"));

    one_field_set_t s;
    mk_set(&s, "g.proto", "p", "proto2", 1, 10, ".p.M"); /* group */
    assert_int_equal(add_set(sc, &s, err, sizeof(err)), CQ_ECONFIG);
    assert_non_null(strstr(err, "group"));
    mk_set(&s, "u.proto", "p", "proto3", 1, 11, ".p.Missing");
    assert_int_equal(add_set(sc, &s, err, sizeof(err)), CQ_ECONFIG);
    assert_non_null(strstr(err, "p.Missing"));
    mk_set(&s, "e.proto", "p", "editions", 1, 5, NULL);
    assert_int_equal(add_set(sc, &s, err, sizeof(err)), CQ_ECONFIG);
    mk_set(&s, "z.proto", "p", "proto3", 0, 5, NULL);
    assert_int_equal(add_set(sc, &s, NULL, 0), CQ_ECONFIG);
    mk_set(&s, "t.proto", "p", "proto3", 1, 99, NULL);
    assert_int_equal(add_set(sc, &s, NULL, 0), CQ_ECONFIG);
    assert_int_equal(cq_schema_count(sc), 0); /* every failure left it unchanged */

    mk_set(&s, "ok.proto", "p", "proto3", 1, 5, NULL);
    assert_int_equal(add_set(sc, &s, err, sizeof(err)), 0);
    assert_int_equal(cq_schema_count(sc), 1);
    mk_set(&s, "other.proto", "p", "proto3", 1, 5, NULL); /* p.M again, another file */
    assert_int_equal(add_set(sc, &s, err, sizeof(err)), CQ_ECONFIG);
    assert_non_null(strstr(err, "duplicate"));
    assert_int_equal(cq_schema_count(sc), 1);
    assert_null(cq_schema_free(sc));
}

void test_schema_reload_and_deps(void **state)
{
    cq_schema_t *sc;
    char err[128] = "";
    assert_int_equal(cq_schema_new(&sc), 0);
    assert_int_equal(cq_schema_load_file(sc, g_chanqtest_fds, err, sizeof(err)), 0);
    size_t n = cq_schema_count(sc);
    assert_int_equal(cq_schema_load_file(sc, g_chanqtest_fds, err, sizeof(err)), 0);
    assert_int_equal(cq_schema_count(sc), n); /* same files: skipped */

    /* A later set may refer to a type loaded earlier. */
    one_field_set_t s;
    mk_set(&s, "dep.proto", "q", "proto3", 4, 11, ".chanqtest.Vec3");
    assert_int_equal(add_set(sc, &s, err, sizeof(err)), 0);
    const cq_msgdesc_t *m = cq_schema_find(sc, "q.M");
    assert_non_null(m);
    assert_ptr_equal(m->fields[0].msg, cq_schema_find(sc, "chanqtest.Vec3"));
    assert_false(m->proto3 && !m->fields[0].has_presence);
    /* proto2 scalars have explicit presence; repeated proto2 scalars are not packed. */
    mk_set(&s, "p2.proto", NULL, NULL, 3, 5, NULL);
    s.field.label = GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__LABEL__LABEL_REPEATED;
    assert_int_equal(add_set(sc, &s, err, sizeof(err)), 0);
    m = cq_schema_find(sc, "M");
    assert_non_null(m);
    assert_false(m->proto3);
    assert_true(m->fields[0].repeated && !m->fields[0].packed);
    assert_null(cq_schema_free(sc));
}

void test_schema_failn(void **state)
{
    cq_sbuf_t fds;
    read_file(g_chanqtest_fds, &fds);
    int ok = 0;
    for (unsigned long n = 1; n < 2000 && !ok; n++) {
        test_alloc_install(n, false);
        cq_schema_t *sc = NULL;
        char err[128];
        int r = cq_schema_new(&sc);
        if (r == 0)
            r = cq_schema_add_fds(sc, fds.data, fds.len, err, sizeof(err));
        assert_true(r == 0 || r == -ENOMEM);
        if (r == 0) {
            assert_non_null(cq_schema_find(sc, "chanqtest.Entity"));
            ok = test_alloc_failed() == 0;
        } else if (sc) {
            assert_int_equal(cq_schema_count(sc), 0);
        }
        cq_schema_free(sc);
        assert_int_equal(test_alloc_live(), 0);
        test_alloc_remove();
    }
    assert_true(ok);
    cq_sbuf_done(&fds);
}
