/* it_world.c - see it_world.h. */
#include "it_world.h"

#include <stdlib.h>

#include "world.pb-c.h"

uint8_t *it_pack(const ProtobufCMessage *m, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(*len ? *len : 1);
    assert_non_null(b);
    protobuf_c_message_pack(m, b);
    return b;
}

void it_send(it_conn_t *c, uint32_t chan, uint32_t bc, uint32_t stub, uint32_t type,
             const ProtobufCMessage *m)
{
    assert_int_equal(chanq_sync_send(c->s, chan, bc, stub, type, m), 0);
    assert_int_equal(chanq_sync_flush(c->s, IT_TIMEOUT_MS), 0);
}

void it_next(it_conn_t *c, bool skip_data, chanq_owned_msg_t *m)
{
    for (;;) {
        it_recv(c, m);
        if (!skip_data || m->msg_type != MT_DATA)
            return;
        chanq_owned_msg_done(m);
    }
}

void *it_expect_skip(it_conn_t *c, uint32_t type, uint32_t chan, uint32_t stub,
                     const ProtobufCMessageDescriptor *d)
{
    chanq_owned_msg_t m;
    it_next(c, true, &m);
    if (m.msg_type != type || m.channel_id != chan || m.stub_id != stub)
        print_error("conn %u: expected type %u chan %u stub %u, got type %u chan %u stub %u\n",
                    c->id, type, chan, stub, m.msg_type, m.channel_id, m.stub_id);
    assert_int_equal(m.msg_type, type);
    assert_int_equal(m.channel_id, chan);
    assert_int_equal(m.stub_id, stub);
    void *b = d ? chanq_sync_decode(&m, d) : NULL;
    assert_true(!d || b);
    chanq_owned_msg_done(&m);
    return b;
}

void it_create_spatial(it_conn_t *s, uint32_t stub)
{
    Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
    any.type_url = URL_CELL;
    Channeldpb__CreateChannelMessage cc = CHANNELDPB__CREATE_CHANNEL_MESSAGE__INIT;
    cc.channeltype = CHANNELDPB__CHANNEL_TYPE__SPATIAL;
    cc.metadata = "world";
    cc.data = &any;
    it_send(s, 0, 0, stub, MT_CREATE_SPATIAL, &cc.base);
}

uint8_t *it_cell_ref(uint32_t key, const char *cls, uint32_t owner, size_t *len)
{
    Chanqworld__EntityRef ref = CHANQWORLD__ENTITY_REF__INIT;
    ref.netid = key;
    ref.classpath = (char *)cls;
    ref.owningconnid = owner;
    Chanqworld__SpatialEntityState st = CHANQWORLD__SPATIAL_ENTITY_STATE__INIT;
    st.objref = &ref;
    Chanqworld__SpatialChannelData__EntitiesEntry kv =
        CHANQWORLD__SPATIAL_CHANNEL_DATA__ENTITIES_ENTRY__INIT;
    Chanqworld__SpatialChannelData__EntitiesEntry *kvs[1] = {&kv};
    kv.key = key;
    kv.value = &st;
    Chanqworld__SpatialChannelData d = CHANQWORLD__SPATIAL_CHANNEL_DATA__INIT;
    d.n_entities = 1;
    d.entities = kvs;
    return it_pack(&d.base, len);
}

void it_put_cell_ref(it_conn_t *c, uint32_t cell, uint32_t key, const char *cls, uint32_t owner)
{
    size_t len;
    uint8_t *v = it_cell_ref(key, cls, owner, &len);
    assert_int_equal(chanq_sync_data_update(c->s, cell, URL_CELL, v, len), 0);
    free(v);
}
