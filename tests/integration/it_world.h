/* it_world.h - helpers of the integration tests that drive a spatial world (test_it_handover.c,
 * test_it_overload.c): packing, sending, reading past channel data, the spatial creation.
 * Same threading and failure rules as it_common.h: cmocka asserts, one test thread. */
#ifndef IT_WORLD_H
#define IT_WORLD_H

#include "it_common.h"

#define URL_CELL "type.googleapis.com/chanqworld.SpatialChannelData"

/* m packed into a new buffer (free it); *len its length. */
uint8_t *it_pack(const ProtobufCMessage *m, size_t *len);

/* Sends one message and flushes it. */
void it_send(it_conn_t *c, uint32_t chan, uint32_t bc, uint32_t stub, uint32_t type,
             const ProtobufCMessage *m);

/* The next message for c, past channel-data fan-outs when skip_data (m is owned: done it). */
void it_next(it_conn_t *c, bool skip_data, chanq_owned_msg_t *m);

/* The next message that is not channel data must be (type, chan, stub); returns its body
 * decoded with d (owned: chanq_unpack_free), or NULL when d is NULL. */
void *it_expect_skip(it_conn_t *c, uint32_t type, uint32_t chan, uint32_t stub,
                     const ProtobufCMessageDescriptor *d);

/* The bytes of SpatialChannelData{entities: {key: {objRef: {netId: key, classPath: cls,
 * owningConnId: owner}}}}, a cell's entry for one entity (free them); *len their length. */
uint8_t *it_cell_ref(uint32_t key, const char *cls, uint32_t owner, size_t *len);

/* Writes that entry into cell's data (CHANNEL_DATA_UPDATE from c, not flushed). */
void it_put_cell_ref(it_conn_t *c, uint32_t cell, uint32_t key, const char *cls, uint32_t owner);

/* CREATE_SPATIAL_CHANNEL with empty SpatialChannelData, stub echoed. */
void it_create_spatial(it_conn_t *s, uint32_t stub);

#endif
