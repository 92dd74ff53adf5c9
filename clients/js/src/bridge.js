// The bridge's messages (proto/bridge.proto, doc/bridge.md): a durable topic's committed message
// as a bound channel or player receives it, the body of a user-space message of the binding's
// msgType. The chanqpb root comes from the generated descriptor, like channeldpb's.
import protobuf from 'protobufjs/light.js';
import bridgeDescriptor from '../gen/bridge.js';
import { TO_OBJECT } from './proto.js';

/** The chanqpb root (TopicEvent, TopicPosition, TopicResume*, TopicAckMessage). */
export const chanqpbRoot = protobuf.Root.fromJSON(bridgeDescriptor);

const TopicEvent = chanqpbRoot.lookupType('chanqpb.TopicEvent');

// The 64-bit fields. They are Numbers, as every 64-bit field the client hands out: chanqd's
// offsets, sequence numbers and times are 53-bit values (doc/protocol-mq.md, u53) and epochs
// count failovers. A value a Number cannot hold exactly is refused rather than rounded: a
// rounded offset would make a receiver see a hole, or a duplicate, that is not there.
const LONG_FIELDS = ['epoch', 'offset', 'prevOffset', 'timeMs', 'seq'];

/**
 * Decodes a TopicEvent (the body of a bridge delivery, as received: it is not wrapped in a
 * ServerForwardMessage) into {topic, shard, epoch, offset, prevOffset, timeMs, producerId, seq,
 * content}, every field present (0, '' or empty when absent). The 64-bit fields are Numbers;
 * content is a copy of the message's bytes. Throws what protobufjs throws for bytes that are
 * not a TopicEvent, and a RangeError for a 64-bit value beyond Number.MAX_SAFE_INTEGER.
 */
export function decodeTopicEvent(bytes) {
  const o = TopicEvent.toObject(TopicEvent.decode(bytes), TO_OBJECT);
  for (const k of LONG_FIELDS) {
    if (!Number.isSafeInteger(o[k]))
      throw new RangeError(`TopicEvent.${k} is beyond Number.MAX_SAFE_INTEGER (2^53 - 1)`);
  }
  return {
    topic: o.topic,
    shard: o.shard,
    epoch: o.epoch,
    offset: o.offset,
    prevOffset: o.prevOffset,
    timeMs: o.timeMs,
    producerId: o.producerId,
    seq: o.seq,
    content: Uint8Array.from(o.content),
  };
}
