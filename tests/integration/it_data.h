/* it_data.h - channel-data helpers shared by the integration tests (test_it_data.c, and
 * test_it_relay.c across relay nodes): the chanqtest types of CHANQTEST_FDS, created, subscribed,
 * updated and read back. Every wait is it_common's (IT_TIMEOUT_MS). */
#ifndef IT_DATA_H
#define IT_DATA_H

#include "chanqtest.pb-c.h"
#include "it_common.h"

#define URL_WORLD "type.googleapis.com/chanqtest.EntityWorld"

/* Packs a protobuf-c message into a malloc'd buffer (*len bytes; free it). */
uint8_t *itd_pack(const ProtobufCMessage *m, size_t *len);
/* s creates a SUBWORLD channel "data" with the initial state init of type url and merge options
 * mo (NULL: none), subscribed NO_ACCESS itself; returns the channel id. */
uint32_t itd_create_with(it_conn_t *s, const char *url, const ProtobufCMessage *init,
                         const Channeldpb__ChannelDataMergeOptions *mo);
/* s subscribes c with options o; both get the SUB result with dataAccess `access`. */
void itd_sub_opts(it_conn_t *s, it_conn_t *c, uint32_t ch,
                  const Channeldpb__ChannelSubscriptionOptions *o, uint32_t access);
void itd_update(it_conn_t *c, uint32_t ch, const char *url, const ProtobufCMessage *m);
/* c's next CHANNEL_DATA_UPDATE fan-out on ch, decoded as type d (owned). */
void *itd_next_data(it_conn_t *c, uint32_t ch, const char *url,
                    const ProtobufCMessageDescriptor *d);
Chanqtest__Entity *itd_entity(Chanqtest__Entity *e, const char *label, bool removed);
/* An EntityWorld update: entity key = e (none when e is NULL), and name unless NULL. */
void itd_world_update(it_conn_t *s, uint32_t ch, uint32_t key, Chanqtest__Entity *e,
                      const char *name);

#endif
