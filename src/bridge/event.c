/* event.c - a committed message as the protobuf bytes of a TopicEvent (proto/bridge.proto),
 * packed straight into a refcounted cq_buf. */
#include "bridge_int.h"

#include "bridge.pb-c.h"
#include "cq_alloc.h"

#include <stdint.h>

/* protobuf-c's message structs hold non-const pointers but pack only reads them. */
static char *unconst(const char *s)
{
    return (char *)(uintptr_t)(s ? s : "");
}

cq_buf_t *cq_topic_event_encode(const cq_topic_event_t *ev)
{
    Chanqpb__TopicEvent m = CHANQPB__TOPIC_EVENT__INIT;
    m.topic = unconst(ev->topic);
    m.shard = ev->shard;
    m.epoch = ev->epoch;
    m.offset = ev->offset;
    m.prev_offset = ev->prev_offset;
    m.time_ms = ev->time_ms;
    m.producer_id = unconst(ev->producer_id);
    m.seq = ev->seq;
    m.content.len = ev->len;
    m.content.data = (uint8_t *)(uintptr_t)ev->content;
    cq_buf_t *b = cq_buf_new(chanqpb__topic_event__get_packed_size(&m)); /* bounds the size */
    if (!b)
        return NULL;
    b->len = (uint32_t)chanqpb__topic_event__pack(&m, b->data);
    return b;
}

cq_buf_t *cq__topic_event_reprev(const cq_buf_t *ev, uint64_t prev_offset)
{
    Chanqpb__TopicEvent *m = chanqpb__topic_event__unpack(&cq__bridge_pb, ev->len, ev->data);
    if (!m)
        return NULL;
    m->prev_offset = prev_offset;
    cq_buf_t *b = cq_buf_new(chanqpb__topic_event__get_packed_size(m));
    if (b)
        b->len = (uint32_t)chanqpb__topic_event__pack(m, b->data);
    chanqpb__topic_event__free_unpacked(m, &cq__bridge_pb);
    return b;
}

static void *pb_alloc(void *ud, size_t n)
{
    (void)ud;
    return cq_malloc(n);
}

static void pb_free(void *ud, void *p)
{
    (void)ud;
    cq_free(p);
}

ProtobufCAllocator cq__bridge_pb = {pb_alloc, pb_free, NULL};
