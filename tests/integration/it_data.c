/* it_data.c - channel-data helpers shared by the integration tests (it_data.h). */
#include "it_data.h"

#include <stdlib.h>
#include <string.h>

/* Packs a protobuf-c message into a malloc'd buffer. */
uint8_t *itd_pack(const ProtobufCMessage *m, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(*len ? *len : 1);
    protobuf_c_message_pack(m, b);
    return b;
}

uint32_t itd_create_with(it_conn_t *s, const char *url, const ProtobufCMessage *init,
                         const Channeldpb__ChannelDataMergeOptions *mo)
{
    size_t len;
    uint8_t *v = itd_pack(init, &len);
    chanq_channel_data_t d = {url, v, len, mo};
    /* The owner takes no fan-outs (NO_ACCESS), so its replies are not interleaved with data. */
    Channeldpb__ChannelSubscriptionOptions own = CHANNELDPB__CHANNEL_SUBSCRIPTION_OPTIONS__INIT;
    own.has_dataaccess = 1;
    own.dataaccess = CHANNELDPB__CHANNEL_DATA_ACCESS__NO_ACCESS;
    assert_int_equal(
        chanq_client_create_channel_data(chanq_sync_client(s->s), 7, CT_SUBWORLD, "data", &own, &d),
        0);
    assert_int_equal(chanq_sync_flush(s->s, IT_TIMEOUT_MS), 0);
    free(v);
    Channeldpb__CreateChannelResultMessage *cr =
        it_expect(s, MT_CREATE, 7, &channeldpb__create_channel_result_message__descriptor, NULL);
    uint32_t ch = cr->channelid;
    chanq_unpack_free(cr);
    it_expect_sub(s, ch, 0, s->id, CONN_SERVER, CT_SUBWORLD, 0);
    return ch;
}

/* The server subscribes c with options; both get the SUB result. */
void itd_sub_opts(it_conn_t *s, it_conn_t *c, uint32_t ch,
                  const Channeldpb__ChannelSubscriptionOptions *o, uint32_t access)
{
    assert_int_equal(chanq_sync_sub_to_channel(s->s, 11, ch, c->id, o), 0);
    it_expect_sub(s, ch, 11, c->id, CONN_CLIENT, CT_SUBWORLD, access);
    it_expect_sub(c, ch, 0, c->id, CONN_CLIENT, CT_SUBWORLD, access);
}

void itd_update(it_conn_t *c, uint32_t ch, const char *url, const ProtobufCMessage *m)
{
    size_t len;
    uint8_t *v = itd_pack(m, &len);
    assert_int_equal(chanq_sync_data_update(c->s, ch, url, v, len), 0);
    free(v);
}

/* Next CHANNEL_DATA_UPDATE fan-out on ch, decoded as type d (owned). */
void *itd_next_data(it_conn_t *c, uint32_t ch, const char *url, const ProtobufCMessageDescriptor *d)
{
    chanq_owned_msg_t env;
    Channeldpb__ChannelDataUpdateMessage *u =
        it_expect(c, MT_DATA, 0, &channeldpb__channel_data_update_message__descriptor, &env);
    assert_int_equal(env.channel_id, ch);
    chanq_owned_msg_done(&env);
    assert_non_null(u->data);
    assert_string_equal(u->data->type_url, url);
    void *m = protobuf_c_message_unpack(d, NULL, u->data->value.len, u->data->value.data);
    assert_non_null(m);
    chanq_unpack_free(u);
    return m;
}

Chanqtest__Entity *itd_entity(Chanqtest__Entity *e, const char *label, bool removed)
{
    chanqtest__entity__init(e);
    e->label = (char *)label;
    e->removed = removed;
    return e;
}

void itd_world_update(it_conn_t *s, uint32_t ch, uint32_t key, Chanqtest__Entity *e,
                      const char *name)
{
    Chanqtest__EntityWorld w = CHANQTEST__ENTITY_WORLD__INIT;
    Chanqtest__EntityWorld__EntitiesEntry kv = CHANQTEST__ENTITY_WORLD__ENTITIES_ENTRY__INIT;
    Chanqtest__EntityWorld__EntitiesEntry *kvs[1] = {&kv};
    if (e) {
        kv.key = key;
        kv.value = e;
        w.n_entities = 1;
        w.entities = kvs;
    }
    w.name = (char *)(name ? name : "");
    itd_update(s, ch, URL_WORLD, &w.base);
}
