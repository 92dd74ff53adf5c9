// decodeTopicEvent (src/bridge.js): fixed TopicEvent bytes, as protobuf-c packs them (fields in
// number order, proto3 zeros left out: src/bridge/event.c), worked out by hand and checked with
//   echo '<hex>' | xxd -r -p | protoc --proto_path=proto --decode=chanqpb.TopicEvent bridge.proto
// whose output is quoted above each vector; `protoc --encode` of that text gives the same bytes
// back. Then a bridge delivery through the client's receive path.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ChanqClient, decodeTopicEvent } from '../src/index.js';
import { fakeTransport, hex } from './helpers.js';

// topic: "release" shard: 3 epoch: 2 offset: 1234567890123 prev_offset: 1234567890000
// time_ms: 1700000000123 producer_id: "42" seq: 7 content: "{\"text\":\"v1.2 is out\"}"
const FULL = hex('0a 07 "release" 10 03 18 02 ' +
  '20 cb 89 ec 8f f7 23 28 d0 88 ec 8f f7 23 30 fb d0 95 ff bc 31 ' +
  '3a 02 "42" 40 07 4a 16 7b 22 "text" 22 3a 22 "v1.2 is out" 22 7d');

// topic: "t" shard: 4294967295 epoch: 9007199254740991 offset: 9007199254740991
// prev_offset: 9007199254740990 time_ms: -1 producer_id: "9007199254740991"
// seq: 9007199254740991 content: "\000\377\n"
const LIMITS = hex('0a 01 74 10 ff ff ff ff 0f 18 ff ff ff ff ff ff ff 0f ' +
  '20 ff ff ff ff ff ff ff 0f 28 fe ff ff ff ff ff ff 0f 30 ff ff ff ff ff ff ff ff ff 01 ' +
  '3a 10 "9007199254740991" 40 ff ff ff ff ff ff ff 0f 4a 03 00 ff 0a');

// The first message of a topic produced without an idempotence key, on shard 0 of a single
// node (epoch 0): topic: "announcements" offset: 1 time_ms: 1700000000123 content: "hello"
const FIRST = hex('0a 0d "announcements" 20 01 30 fb d0 95 ff bc 31 4a 05 "hello"');

test('every field of a TopicEvent decodes, the 64-bit ones as Numbers', () => {
  const ev = decodeTopicEvent(FULL);
  assert.deepEqual(ev, {
    topic: 'release',
    shard: 3,
    epoch: 2,
    offset: 1234567890123,
    prevOffset: 1234567890000,
    timeMs: 1700000000123,
    producerId: '42',
    seq: 7,
    content: new TextEncoder().encode('{"text":"v1.2 is out"}'),
  });
  assert.equal(Object.getPrototypeOf(ev.content), Uint8Array.prototype);
  assert.equal(JSON.parse(new TextDecoder().decode(ev.content)).text, 'v1.2 is out');
});

test('the limits: uint32 shard, 2^53 - 1 in the 64-bit fields, a negative time, binary content', () => {
  assert.deepEqual(decodeTopicEvent(LIMITS), {
    topic: 't',
    shard: 4294967295,
    epoch: Number.MAX_SAFE_INTEGER,
    offset: Number.MAX_SAFE_INTEGER,
    prevOffset: Number.MAX_SAFE_INTEGER - 1,
    timeMs: -1,
    producerId: '9007199254740991',
    seq: Number.MAX_SAFE_INTEGER,
    content: Uint8Array.of(0x00, 0xff, 0x0a),
  });
});

test('fields protobuf-c leaves out (zeros, empty strings) come back as 0 and ""', () => {
  assert.deepEqual(decodeTopicEvent(FIRST), {
    topic: 'announcements',
    shard: 0,
    epoch: 0,
    offset: 1,
    prevOffset: 0,
    timeMs: 1700000000123,
    producerId: '',
    seq: 0,
    content: new TextEncoder().encode('hello'),
  });
  assert.deepEqual(decodeTopicEvent(new Uint8Array(0)), {
    topic: '', shard: 0, epoch: 0, offset: 0, prevOffset: 0, timeMs: 0, producerId: '', seq: 0,
    content: new Uint8Array(0),
  });
});

test('a 64-bit value a Number cannot hold exactly is refused, not rounded', () => {
  // offset: 9007199254740992 (2^53)
  assert.throws(() => decodeTopicEvent(hex('0a 01 74 20 80 80 80 80 80 80 80 10')),
    { name: 'RangeError', message: 'TopicEvent.offset is beyond Number.MAX_SAFE_INTEGER (2^53 - 1)' });
  // epoch: 18446744073709551615
  assert.throws(() => decodeTopicEvent(hex('18 ff ff ff ff ff ff ff ff ff 01')),
    { name: 'RangeError', message: 'TopicEvent.epoch is beyond Number.MAX_SAFE_INTEGER (2^53 - 1)' });
  // time_ms: -9007199254740992
  assert.throws(() => decodeTopicEvent(hex('30 80 80 80 80 80 80 80 f0 ff 01')),
    { name: 'RangeError', message: 'TopicEvent.timeMs is beyond Number.MAX_SAFE_INTEGER (2^53 - 1)' });
});

test('truncated bytes throw', () => {
  assert.throws(() => decodeTopicEvent(FULL.subarray(0, FULL.length - 1)),
    { name: 'RangeError', message: /^index out of range: / });
});

test('content is a copy: the body it came from may be reused', () => {
  const body = Uint8Array.from(FIRST);
  const ev = decodeTopicEvent(body);
  body.fill(0);
  assert.equal(new TextDecoder().decode(ev.content), 'hello');
});

// What chanqd sends a subscriber of GLOBAL for a broadcast binding with msg_type 200: a
// MessagePack on channel 0 with stub 0 and broadcast 0 (left out), whose body is
// ServerForwardMessage{clientConnId 0, payload FIRST}, as a server's broadcast is.
//   43 48 00 2a 00                      header, body of 42 bytes
//   0a 28                               Packet.messages, 40 bytes
//   20 c8 01 2a 23                      msgType 200, msgBody of 35 bytes
//   08 00 12 1f <FIRST, 31 bytes>       clientConnId 0, payload
const DELIVERY = hex('43 48 00 2a 00 0a 28 20 c8 01 2a 23 08 00 12 1f 0a 0d "announcements" ' +
  '20 01 30 fb d0 95 ff bc 31 4a 05 "hello"');

test('a bridge delivery: the userMessage event carries the TopicEvent as its payload', async () => {
  const c = new ChanqClient({ rpcTimeoutMs: 0 });
  const t = fakeTransport();
  await c.connect('fake://', { transport: t });
  const users = [];
  c.on('userMessage', (u) => users.push(u));
  t.feed(DELIVERY);
  assert.equal(users.length, 1);
  const u = users[0];
  assert.deepEqual([u.channelId, u.msgType, u.stubId, u.broadcast, u.clientConnId],
    [0, 200, 0, 0, 0]);
  assert.deepEqual(Array.from(u.payload), Array.from(FIRST));
  assert.deepEqual(decodeTopicEvent(u.payload), decodeTopicEvent(FIRST));
});
