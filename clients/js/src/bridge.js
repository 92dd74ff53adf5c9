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

// ---- resume (issue 24): positions, duplicates, and the resume, result and ack messages -------

/** Client to server: resume a channel's topics from the client's positions (TopicResumeMessage). */
export const TOPIC_RESUME = 90;
/** Server to client: the answer, a TopicResumeResultMessage (the body itself, not forwarded). */
export const TOPIC_RESUME_RESULT = 91;
/** Client to server, on channel 0: handled up to these positions (TopicAckMessage). */
export const TOPIC_ACK = 92;
/** The (topic, shard) positions a TopicTracker holds (as libchanq's chanq_topics.h). */
export const TOPIC_MAX_POSITIONS = 1024;
/** The (topic, producerId, seq) keys a TopicTracker remembers. */
export const TOPIC_DEDUP_WINDOW = 4096;

const TopicResumeMessage = chanqpbRoot.lookupType('chanqpb.TopicResumeMessage');
const TopicResumeResultMessage = chanqpbRoot.lookupType('chanqpb.TopicResumeResultMessage');
const TopicAckMessage = chanqpbRoot.lookupType('chanqpb.TopicAckMessage');

// A shard number has no ':', so the prefix ends the key unambiguously.
const posKey = (topic, shard) => `${shard}:${topic}`;
// Length-prefixed, so ("ab", "c") and ("a", "bc") differ. Keys are per topic, as the server's
// are (doc/protocol-mq.md: the idempotence rules are per topic and producer_id).
const dedupKey = (ev) => `${ev.topic.length}:${ev.topic}${ev.producerId.length}:${ev.producerId}${ev.seq}`;

const isU32 = (v) => Number.isInteger(v) && v >= 0 && v <= 0xffffffff;
const isU53 = (v) => Number.isSafeInteger(v) && v >= 0;

// Why p is not a position toJSON() makes ('' when it is one).
function badPosition(p) {
  if (p === null || typeof p !== 'object')
    return 'not an object';
  if (typeof p.topic !== 'string' || p.topic === '')
    return 'topic is not a non-empty string';
  if (!isU32(p.shard))
    return 'shard is not an integer from 0 to 2^32 - 1';
  if (!isU53(p.epoch) || !isU53(p.offset))
    return 'epoch and offset are not integers from 0 to 2^53 - 1';
  if (!isU32(p.channelId))
    return 'channelId is not an integer from 0 to 2^32 - 1';
  return '';
}

/**
 * Decides which durable-topic events the app handles, and asks for what a lost connection
 * missed (doc/bridge.md). One per app: it outlives connections. It holds a position per (topic,
 * shard): {epoch, offset} of the last event handled, and the channel it came on.
 */
export class TopicTracker {
  constructor() {
    this.positions = new Map(); // posKey -> {topic, shard, epoch, offset, channelId}
    this.keys = new Map();      // dedupKey -> true, oldest first (a Map keeps insertion order)
    this.pending = new Set();   // channels whose resume is sent and its result not received
    this.accepted = 0;
    this.duplicates = 0;        // rules 1 and 4
    this.holes = 0;             // rule 6, accepted (no resume pending)
    this.skipped = 0;           // rule 6, dropped (the catch-up brings it)
    this.epochChanges = 0;      // rule 3
    this.lastError = '';        // the last result's error text
  }

  /**
   * Whether the app handles ev (a decodeTopicEvent result) received on channelId, by libchanq's
   * rules (chanq_topics.h): 1 a (producerId, seq) of the same topic among the last
   * TOPIC_DEDUP_WINDOW accepted keys: drop; 2 no position yet: accept; 3 another epoch: accept;
   * 4 offset <= position: drop; 5 prevOffset == position: accept; 6 a hole: drop while a resume
   * of channelId is pending, else accept (counted in holes). An accepted event's epoch and
   * offset become the position. Throws a RangeError for a new (topic, shard) while
   * TOPIC_MAX_POSITIONS are held.
   */
  accept(channelId, ev) {
    const key = ev.producerId ? dedupKey(ev) : null;
    if (key !== null && this.keys.has(key)) {
      this.duplicates++;
      return false;
    }
    const pk = posKey(ev.topic, ev.shard);
    const p = this.positions.get(pk);
    if (!p && this.positions.size >= TOPIC_MAX_POSITIONS)
      throw new RangeError(`the tracker holds ${TOPIC_MAX_POSITIONS} positions: ${ev.topic}/${ev.shard} refused`);
    if (p && !this.judge(channelId, p, ev))
      return false;
    this.positions.set(pk, { topic: ev.topic, shard: ev.shard, epoch: ev.epoch, offset: ev.offset, channelId });
    if (key !== null)
      this.remember(key);
    this.accepted++;
    return true;
  }

  // Rules 3 to 6 for an event of a held position.
  judge(channelId, p, ev) {
    if (ev.epoch !== p.epoch) {
      this.epochChanges++;
      return true;
    }
    if (ev.offset <= p.offset) {
      this.duplicates++;
      return false;
    }
    if (ev.prevOffset === p.offset)
      return true;
    if (this.pending.has(channelId)) {
      this.skipped++;
      return false;
    }
    this.holes++;
    return true;
  }

  remember(key) {
    this.keys.set(key, true);
    if (this.keys.size > TOPIC_DEDUP_WINDOW)
      this.keys.delete(this.keys.keys().next().value);
  }

  /** The position of (topic, shard): {epoch, offset, channelId}, or undefined. */
  position(topic, shard) {
    const p = this.positions.get(posKey(topic, shard));
    return p && { epoch: p.epoch, offset: p.offset, channelId: p.channelId };
  }

  /** Whether a resume of channelId is pending (sent, its result not received). */
  isPending(channelId) {
    return this.pending.has(channelId);
  }

  // The positions of channelId (every one when undefined) as TopicPositions. protobufjs leaves
  // out proto3 zeros as protobuf-c does, so libchanq and this client send the same bytes.
  positionList(channelId) {
    const out = [];
    for (const p of this.positions.values()) {
      if (channelId === undefined || p.channelId === channelId)
        out.push({ topic: p.topic, shard: p.shard, epoch: p.epoch, offset: p.offset });
    }
    return out;
  }

  /**
   * The TopicResumeMessage of channelId: {msgType: 90, channelId, body}, body holding the
   * positions received on that channel (in the order they were made). Marks the channel
   * pending: send it (stub 0, broadcast 0) after AUTH and SUB_TO_CHANNEL on the new connection.
   */
  resumeMessage(channelId) {
    const body = this.resumeBody(channelId);
    this.pending.add(channelId);
    return { msgType: TOPIC_RESUME, channelId, body };
  }

  /**
   * Sends the resume of channelId with client.send (a ChanqClient), then marks the channel
   * pending; what client.send throws (not connected, too big) is thrown, and nothing is marked.
   */
  resume(client, channelId) {
    client.send(channelId, TOPIC_RESUME, this.resumeBody(channelId));
    this.pending.add(channelId);
  }

  resumeBody(channelId) {
    return TopicResumeMessage.encode({ positions: this.positionList(channelId) }).finish();
  }

  /**
   * Takes the body of a TopicResumeResultMessage (msgType 91, the `message` event's msgBody)
   * received on channelId: the channel is no longer pending, and each position of the result
   * is applied: not recovered, or another epoch, takes the result's; recovered under the same
   * epoch keeps the further offset; one the tracker did not hold is made on channelId (unless
   * TOPIC_MAX_POSITIONS are held: it is listed in refused). Returns {recovered, error,
   * positions, refused}; recovered false means the app reloads its state from its own backend.
   * Bytes that are not a result throw protobufjs's error (a RangeError for a 64-bit value
   * beyond Number.MAX_SAFE_INTEGER), after the pending mark is cleared.
   */
  onResult(channelId, bodyBytes) {
    this.pending.delete(channelId);
    this.lastError = '';
    const r = TopicResumeResultMessage.toObject(TopicResumeResultMessage.decode(bodyBytes), TO_OBJECT);
    for (const p of r.positions) {
      if (!Number.isSafeInteger(p.epoch) || !Number.isSafeInteger(p.offset))
        throw new RangeError(`TopicPosition of ${p.topic}/${p.shard} is beyond Number.MAX_SAFE_INTEGER (2^53 - 1)`);
    }
    const refused = [];
    for (const rp of r.positions) {
      if (!this.applyPosition(channelId, r.recovered, rp))
        refused.push(rp);
    }
    this.lastError = r.error;
    return { recovered: r.recovered, error: r.error, positions: r.positions, refused };
  }

  applyPosition(channelId, recovered, rp) {
    const pk = posKey(rp.topic, rp.shard);
    let p = this.positions.get(pk);
    if (!p) {
      if (this.positions.size >= TOPIC_MAX_POSITIONS)
        return false;
      p = { topic: rp.topic, shard: rp.shard, epoch: 0, offset: 0, channelId };
      this.positions.set(pk, p);
    }
    if (!recovered || rp.epoch !== p.epoch || rp.offset > p.offset) {
      p.epoch = rp.epoch;
      p.offset = rp.offset;
    }
    p.channelId = channelId;
    return true;
  }

  /** The TopicAckMessage of every position: {msgType: 92, channelId: 0, body}. */
  ackMessage() {
    const body = TopicAckMessage.encode({ positions: this.positionList(undefined) }).finish();
    return { msgType: TOPIC_ACK, channelId: 0, body };
  }

  /** Sends ackMessage() with client.send. */
  ack(client) {
    const m = this.ackMessage();
    client.send(m.channelId, m.msgType, m.body);
  }

  /**
   * The state a later page or process resumes from, as a plain object for JSON.stringify (e.g.
   * into localStorage): {positions: [{topic, shard, epoch, offset, channelId}, ...] in the order
   * they were made, keys: [...] the dedup window's keys, oldest first (opaque strings)}. The
   * counters, lastError and the pending marks are not in it: a pending resume belongs to the
   * connection it was sent on.
   */
  toJSON() {
    const positions = [];
    for (const p of this.positions.values())
      positions.push({ topic: p.topic, shard: p.shard, epoch: p.epoch, offset: p.offset, channelId: p.channelId });
    return { positions, keys: [...this.keys.keys()] };
  }

  /**
   * A new tracker holding what toJSON() returned (parsed back from JSON), nothing pending and the
   * counters at 0. Throws a TypeError for a value toJSON() cannot have made (`positions[<i>]:
   * ...`, `keys[<i>]: ...`), and a RangeError for more than TOPIC_MAX_POSITIONS positions or
   * TOPIC_DEDUP_WINDOW keys. `keys` may be left out.
   */
  static fromJSON(obj) {
    if (obj === null || typeof obj !== 'object' || !Array.isArray(obj.positions))
      throw new TypeError('a TopicTracker state is an object whose "positions" is an array');
    const keys = obj.keys === undefined ? [] : obj.keys;
    if (!Array.isArray(keys))
      throw new TypeError('a TopicTracker state\'s "keys" is an array');
    if (obj.positions.length > TOPIC_MAX_POSITIONS)
      throw new RangeError(`more than ${TOPIC_MAX_POSITIONS} positions`);
    if (keys.length > TOPIC_DEDUP_WINDOW)
      throw new RangeError(`more than ${TOPIC_DEDUP_WINDOW} keys`);
    const t = new TopicTracker();
    obj.positions.forEach((p, i) => {
      const why = badPosition(p);
      if (why)
        throw new TypeError(`positions[${i}]: ${why}`);
      const pk = posKey(p.topic, p.shard);
      if (t.positions.has(pk))
        throw new TypeError(`positions[${i}]: ${p.topic}/${p.shard} is listed twice`);
      t.positions.set(pk, { topic: p.topic, shard: p.shard, epoch: p.epoch, offset: p.offset, channelId: p.channelId });
    });
    keys.forEach((k, i) => {
      if (typeof k !== 'string')
        throw new TypeError(`keys[${i}]: not a string`);
      t.keys.set(k, true);
    });
    return t;
  }

  /** The counters: {accepted, duplicates, holes, skipped, epochChanges, positions, keys}. */
  stats() {
    return {
      accepted: this.accepted,
      duplicates: this.duplicates,
      holes: this.holes,
      skipped: this.skipped,
      epochChanges: this.epochChanges,
      positions: this.positions.size,
      keys: this.keys.size,
    };
  }
}
