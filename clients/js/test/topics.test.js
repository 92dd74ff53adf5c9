// TopicTracker (src/bridge.js): the rules of accept with exact outcomes, the resume and ack
// messages decoded back field by field and byte for byte (the same vector as libchanq's
// tests/unit/clients/test_topics.c), the result's rules, the bounds, and the messages through
// the client's send and receive paths.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  ChanqClient,
  TOPIC_ACK,
  TOPIC_DEDUP_WINDOW,
  TOPIC_MAX_POSITIONS,
  TOPIC_RESUME,
  TOPIC_RESUME_RESULT,
  TopicTracker,
  chanqpbRoot,
  decodePacket,
  encodeFrame,
  encodePacket,
} from '../src/index.js';
import { fakeTransport, hex, tick } from './helpers.js';

const ResumeMsg = chanqpbRoot.lookupType('chanqpb.TopicResumeMessage');
const ResultMsg = chanqpbRoot.lookupType('chanqpb.TopicResumeResultMessage');
const AckMsg = chanqpbRoot.lookupType('chanqpb.TopicAckMessage');

// An event as decodeTopicEvent returns it (content left empty: the tracker does not read it).
function ev(topic, shard, epoch, offset, prevOffset, producerId = '', seq = 0) {
  return { topic, shard, epoch, offset, prevOffset, timeMs: 0, producerId, seq, content: new Uint8Array(0) };
}

// What decoding gives back, every field present.
function positionsOf(type, body) {
  return type.toObject(type.decode(body), { longs: Number, defaults: true, arrays: true }).positions;
}

function result(recovered, error, positions) {
  return ResultMsg.encode({ recovered, error, positions }).finish();
}

function stats(t, want) {
  assert.deepEqual(t.stats(), {
    accepted: 0, duplicates: 0, holes: 0, skipped: 0, epochChanges: 0, positions: 0, keys: 0, ...want,
  });
}

// ---- rules 2 to 6 ------------------------------------------------------------------------------

test('rule 2: the first event of a (topic, shard) is accepted and makes its position', () => {
  const t = new TopicTracker();
  assert.equal(t.position('news', 0), undefined);
  assert.equal(t.accept(7, ev('news', 0, 3, 40, 39)), true);
  assert.deepEqual(t.position('news', 0), { epoch: 3, offset: 40, channelId: 7 });
  assert.equal(t.accept(0, ev('news', 1, 5, 2, 0)), true);
  assert.equal(t.accept(0, ev('news2', 0, 3, 1, 0)), true);
  assert.deepEqual(t.position('news', 1), { epoch: 5, offset: 2, channelId: 0 });
  assert.deepEqual(t.position('news2', 0), { epoch: 3, offset: 1, channelId: 0 });
  assert.deepEqual(t.position('news', 0), { epoch: 3, offset: 40, channelId: 7 });
  assert.equal(t.position('news', 2), undefined);
  assert.equal(t.position('new', 0), undefined);
  stats(t, { accepted: 3, positions: 3 });
});

test('rule 5: prevOffset equal to the position is the next event; the channel follows', () => {
  const t = new TopicTracker();
  assert.equal(t.accept(0, ev('news', 0, 1, 10, 0)), true);
  assert.equal(t.accept(0, ev('news', 0, 1, 17, 10)), true);
  assert.deepEqual(t.position('news', 0), { epoch: 1, offset: 17, channelId: 0 });
  assert.equal(t.accept(4, ev('news', 0, 1, 18, 17)), true);
  assert.deepEqual(t.position('news', 0), { epoch: 1, offset: 18, channelId: 4 });
  stats(t, { accepted: 3, positions: 1 });
});

test('rule 4: an offset at or below the position is a duplicate', () => {
  const t = new TopicTracker();
  assert.equal(t.accept(0, ev('news', 0, 1, 10, 0)), true);
  assert.equal(t.accept(0, ev('news', 0, 1, 10, 9)), false);
  assert.equal(t.accept(3, ev('news', 0, 1, 9, 10)), false);
  assert.equal(t.accept(0, ev('news', 0, 1, 1, 0)), false);
  assert.deepEqual(t.position('news', 0), { epoch: 1, offset: 10, channelId: 0 });
  stats(t, { accepted: 1, duplicates: 3, positions: 1 });
  assert.equal(t.duplicates, 3);
});

test('rule 3: another epoch is a new history, accepted even lower or while resuming', () => {
  const t = new TopicTracker();
  assert.equal(t.accept(0, ev('news', 0, 4, 50, 49)), true);
  assert.equal(t.accept(0, ev('news', 0, 5, 30, 29)), true);
  assert.deepEqual(t.position('news', 0), { epoch: 5, offset: 30, channelId: 0 });
  t.resumeMessage(0);
  assert.equal(t.accept(0, ev('news', 0, 4, 90, 70)), true);
  assert.deepEqual(t.position('news', 0), { epoch: 4, offset: 90, channelId: 0 });
  assert.equal(t.accept(0, ev('news', 0, 4, 90, 89)), false);
  stats(t, { accepted: 3, duplicates: 1, epochChanges: 2, positions: 1 });
});

test('rule 6, no resume pending: a hole is accepted and counted', () => {
  const t = new TopicTracker();
  assert.equal(t.accept(0, ev('news', 0, 1, 10, 0)), true);
  assert.equal(t.accept(0, ev('news', 0, 1, 20, 15)), true);
  assert.deepEqual(t.position('news', 0), { epoch: 1, offset: 20, channelId: 0 });
  assert.equal(t.accept(0, ev('news', 0, 1, 21, 20)), true);
  stats(t, { accepted: 3, holes: 1, positions: 1 });
  assert.equal(t.holes, 1);
});

test('rule 6 while resuming: a hole on the channel is skipped, on another is not', () => {
  const t = new TopicTracker();
  assert.equal(t.accept(5, ev('news', 0, 1, 10, 0)), true);
  assert.equal(t.accept(6, ev('chat', 0, 1, 10, 0)), true);
  assert.equal(t.isPending(5), false);
  t.resumeMessage(5);
  assert.equal(t.isPending(5), true);
  assert.equal(t.isPending(6), false);
  assert.equal(t.accept(5, ev('news', 0, 1, 12, 11)), false);
  assert.deepEqual(t.position('news', 0), { epoch: 1, offset: 10, channelId: 5 });
  assert.equal(t.accept(6, ev('chat', 0, 1, 12, 11)), true);
  assert.equal(t.accept(5, ev('news', 0, 1, 11, 10)), true);
  stats(t, { accepted: 4, holes: 1, skipped: 1, positions: 2 });
  assert.deepEqual(t.onResult(5, result(true, '', [])),
    { recovered: true, error: '', positions: [], refused: [] });
  assert.equal(t.isPending(5), false);
  assert.equal(t.accept(5, ev('news', 0, 1, 14, 13)), true);
  assert.deepEqual(t.position('news', 0), { epoch: 1, offset: 14, channelId: 5 });
  stats(t, { accepted: 5, holes: 2, skipped: 1, positions: 2 });
});

// ---- rule 1: the dedup window ------------------------------------------------------------------

test('rule 1: a (producerId, seq) drops its copy on another shard; keys are per topic', () => {
  const t = new TopicTracker();
  assert.equal(t.accept(0, ev('news', 0, 1, 5, 0, '17', 9)), true);
  assert.equal(t.accept(0, ev('news', 1, 1, 3, 0, '17', 9)), false);
  assert.equal(t.position('news', 1), undefined);
  assert.equal(t.accept(0, ev('news', 1, 1, 3, 0, '17', 10)), true);
  assert.equal(t.accept(0, ev('news', 2, 1, 3, 0, '1', 79)), true); // '17',9 vs '1',79
  assert.equal(t.accept(0, ev('sport', 0, 1, 3, 0, '17', 9)), true);
  assert.equal(t.accept(0, ev('news', 0, 1, 6, 5, '', 9)), true);
  assert.equal(t.accept(0, ev('news', 3, 1, 6, 0, '', 9)), true);
  assert.deepEqual(t.position('news', 0), { epoch: 1, offset: 6, channelId: 0 });
  assert.deepEqual(t.position('news', 1), { epoch: 1, offset: 3, channelId: 0 });
  stats(t, { accepted: 6, duplicates: 1, positions: 5, keys: 4 });
});

test('rule 1: only an accepted event records its key', () => {
  const t = new TopicTracker();
  assert.equal(t.accept(0, ev('news', 0, 1, 5, 0)), true);
  assert.equal(t.accept(0, ev('news', 0, 1, 5, 4, '8', 1)), false); // rule 4
  t.resumeMessage(0);
  assert.equal(t.accept(0, ev('news', 0, 1, 9, 7, '8', 2)), false); // skipped
  assert.equal(t.accept(0, ev('news', 1, 1, 2, 0, '8', 1)), true);
  assert.equal(t.accept(0, ev('news', 0, 1, 9, 5, '8', 2)), true);
  assert.equal(t.accept(0, ev('news', 2, 1, 2, 0, '8', 1)), false);
  assert.equal(t.accept(0, ev('news', 2, 1, 2, 0, '8', 2)), false);
  stats(t, { accepted: 3, duplicates: 3, skipped: 1, positions: 2, keys: 2 });
});

// Accepts ('1', 1) on shard 0, then `newer` keys ('2', 1..newer) on shard 1, then offers ('1',
// 1) on shard 2: returns what accept answered.
function windowStory(newer) {
  const t = new TopicTracker();
  assert.equal(t.accept(0, ev('news', 0, 1, 1, 0, '1', 1)), true);
  for (let i = 1; i <= newer; i++)
    assert.equal(t.accept(0, ev('news', 1, 1, i, i - 1, '2', i)), true);
  const r = t.accept(0, ev('news', 2, 1, 1, 0, '1', 1));
  assert.equal(t.stats().keys, Math.min(newer + 1, TOPIC_DEDUP_WINDOW));
  assert.equal(t.accept(0, ev('news', 3, 1, 1, 0, '2', newer)), false);
  return r;
}

test('rule 1: the window holds the last 4096 accepted keys', () => {
  assert.equal(TOPIC_DEDUP_WINDOW, 4096);
  assert.equal(windowStory(TOPIC_DEDUP_WINDOW - 1), false);
  assert.equal(windowStory(TOPIC_DEDUP_WINDOW), true);
  assert.equal(windowStory(3 * TOPIC_DEDUP_WINDOW + 7), true);
});

// ---- bounds ------------------------------------------------------------------------------------

test('the 1025th (topic, shard) is refused; held ones keep working; a result lists it', () => {
  assert.equal(TOPIC_MAX_POSITIONS, 1024);
  const t = new TopicTracker();
  for (let s = 0; s < TOPIC_MAX_POSITIONS; s++)
    assert.equal(t.accept(0, ev('news', s, 1, 1, 0)), true);
  assert.throws(() => t.accept(0, ev('news', 1024, 1, 1, 0, '9', 1)),
    { name: 'RangeError', message: 'the tracker holds 1024 positions: news/1024 refused' });
  assert.throws(() => t.accept(0, ev('other', 0, 1, 1, 0)), RangeError);
  assert.equal(t.position('news', 1024), undefined);
  assert.equal(t.accept(0, ev('news', 1023, 1, 2, 1, '9', 1)), true); // key 9/1 was not kept
  assert.deepEqual(t.position('news', 1023), { epoch: 1, offset: 2, channelId: 0 });
  stats(t, { accepted: 1025, positions: 1024, keys: 1 });
  const r = t.onResult(0, result(true, '', [
    { topic: 'other', shard: 0, epoch: 1, offset: 5 }, { topic: 'news', shard: 7, epoch: 1, offset: 9 }]));
  assert.deepEqual(r.refused, [{ topic: 'other', shard: 0, epoch: 1, offset: 5 }]);
  assert.equal(t.position('other', 0), undefined);
  assert.deepEqual(t.position('news', 7), { epoch: 1, offset: 9, channelId: 0 });
});

// ---- the messages ------------------------------------------------------------------------------

// TopicResumeMessage{positions: [{topic: "chat", epoch: 1, offset: 3}]} (shard 0 left out), as
// protobuf-c packs it: tests/unit/clients/test_topics.c checks libchanq's bytes against it.
const RESUME_CHAT = hex('0a 0a 0a 04 "chat" 18 01 20 03');

test('resumeMessage: the channel\'s positions, field by field and byte for byte; pending', () => {
  const t = new TopicTracker();
  assert.equal(t.accept(5, ev('news', 2, 7, 40, 0)), true);
  assert.equal(t.accept(0, ev('chat', 0, 1, 3, 0)), true);
  assert.equal(t.accept(5, ev('news', 0, 0x123456789, 0xfedcba987654, 0)), true);
  assert.equal(t.accept(5, ev('scores', 4000000000, 2, 9, 0)), true);
  const m = t.resumeMessage(5);
  assert.deepEqual([m.msgType, m.channelId], [90, 5]);
  assert.equal(TOPIC_RESUME, 90);
  assert.ok(m.body instanceof Uint8Array);
  assert.deepEqual(positionsOf(ResumeMsg, m.body), [
    { topic: 'news', shard: 2, epoch: 7, offset: 40 },
    { topic: 'news', shard: 0, epoch: 0x123456789, offset: 0xfedcba987654 },
    { topic: 'scores', shard: 4000000000, epoch: 2, offset: 9 },
  ]);
  assert.equal(t.isPending(5), true);
  assert.equal(t.isPending(0), false);
  const g = t.resumeMessage(0);
  assert.deepEqual([g.msgType, g.channelId], [90, 0]);
  assert.deepEqual(Array.from(g.body), Array.from(RESUME_CHAT));
  const none = t.resumeMessage(9);
  assert.deepEqual([none.msgType, none.channelId, none.body.length], [90, 9, 0]);
  assert.equal(t.isPending(9), true);
  t.onResult(9, result(true, '', []));
  assert.deepEqual([t.isPending(9), t.isPending(5), t.isPending(0)], [false, true, true]);
});

test('resume(client): one MessagePack on the channel, stub 0, broadcast 0, type 90', async () => {
  const t = new TopicTracker();
  assert.equal(t.accept(0, ev('chat', 0, 1, 3, 0)), true);
  const c = new ChanqClient({ rpcTimeoutMs: 0 });
  assert.throws(() => t.resume(c, 0), { name: 'ChanqError', code: 'closed' });
  assert.equal(t.isPending(0), false);
  const tr = fakeTransport();
  await c.connect('fake://', { transport: tr });
  t.resume(c, 0);
  assert.equal(t.isPending(0), true);
  await tick();
  assert.equal(tr.sent.length, 1);
  // 43 48 00 12 00 | 0a 10 | 20 5a 2a 0c <RESUME_CHAT>: the header, Packet.messages of 16 bytes,
  // MessagePack{msgType 90, msgBody of 12 bytes} (channelId, stubId and broadcast 0 left out).
  assert.deepEqual(Array.from(tr.sent[0]),
    Array.from(hex('43 48 00 12 00 0a 10 20 5a 2a 0c 0a 0a 0a 04 "chat" 18 01 20 03')));
  const [pack] = decodePacket(tr.sent[0].subarray(5));
  assert.deepEqual([pack.channelId, pack.stubId, pack.broadcast, pack.msgType], [0, 0, 0, 90]);
  c.disconnect();
});

test('ackMessage: every position, type 92 on channel 0; ack(client) sends it', async () => {
  const t = new TopicTracker();
  const empty = t.ackMessage();
  assert.deepEqual([empty.msgType, empty.channelId, empty.body.length], [92, 0, 0]);
  assert.equal(TOPIC_ACK, 92);
  assert.equal(t.accept(5, ev('news', 1, 3, 12, 0)), true);
  assert.equal(t.accept(0, ev('chat', 0, 1, 3, 0)), true);
  const m = t.ackMessage();
  assert.deepEqual([m.msgType, m.channelId], [92, 0]);
  assert.deepEqual(positionsOf(AckMsg, m.body), [
    { topic: 'news', shard: 1, epoch: 3, offset: 12 },
    { topic: 'chat', shard: 0, epoch: 1, offset: 3 },
  ]);
  assert.equal(t.isPending(0), false);
  const c = new ChanqClient({ rpcTimeoutMs: 0 });
  const tr = fakeTransport();
  await c.connect('fake://', { transport: tr });
  t.ack(c);
  await tick();
  const [pack] = decodePacket(tr.sent[0].subarray(5));
  assert.deepEqual([pack.channelId, pack.stubId, pack.broadcast, pack.msgType], [0, 0, 0, 92]);
  assert.deepEqual(Array.from(pack.msgBody), Array.from(m.body));
  c.disconnect();
});

test('onResult: recovered keeps the further offset; another epoch or not recovered take the result\'s', () => {
  const t = new TopicTracker();
  for (const s of [0, 1, 2])
    assert.equal(t.accept(3, ev('a', s, 1, 10, 0)), true);
  assert.equal(t.accept(8, ev('a', 3, 1, 10, 0)), true);
  const ps = [{ topic: 'a', shard: 0, epoch: 1, offset: 8 }, { topic: 'a', shard: 1, epoch: 1, offset: 12 },
    { topic: 'a', shard: 2, epoch: 2, offset: 4 }, { topic: 'b', shard: 0, epoch: 6, offset: 20 }];
  assert.deepEqual(t.onResult(3, result(true, '', ps)), { recovered: true, error: '', positions: ps, refused: [] });
  assert.equal(t.lastError, '');
  assert.deepEqual(t.position('a', 0), { epoch: 1, offset: 10, channelId: 3 });
  assert.deepEqual(t.position('a', 1), { epoch: 1, offset: 12, channelId: 3 });
  assert.deepEqual(t.position('a', 2), { epoch: 2, offset: 4, channelId: 3 });
  assert.deepEqual(t.position('b', 0), { epoch: 6, offset: 20, channelId: 3 });
  assert.deepEqual(t.position('a', 3), { epoch: 1, offset: 10, channelId: 8 });
  const nr = [{ topic: 'a', shard: 0, epoch: 1, offset: 2 }, { topic: 'a', shard: 3, epoch: 1, offset: 30 }];
  const r = t.onResult(8, result(false, 'offset 3 of a/0 purged', nr));
  assert.deepEqual(r, { recovered: false, error: 'offset 3 of a/0 purged', positions: nr, refused: [] });
  assert.equal(t.lastError, 'offset 3 of a/0 purged');
  assert.deepEqual(t.position('a', 0), { epoch: 1, offset: 2, channelId: 8 });
  assert.deepEqual(t.position('a', 3), { epoch: 1, offset: 30, channelId: 8 });
  assert.deepEqual(t.position('a', 1), { epoch: 1, offset: 12, channelId: 3 });
  stats(t, { accepted: 4, positions: 5 });
});

test('onResult: bytes that are not a result throw, after the resume has ended', () => {
  const t = new TopicTracker();
  assert.equal(t.accept(0, ev('a', 0, 1, 10, 0)), true);
  t.resumeMessage(0);
  const body = result(false, 'gone', [{ topic: 'a', shard: 0, epoch: 1, offset: 9 }]);
  assert.throws(() => t.onResult(0, body.subarray(0, body.length - 1)), RangeError);
  assert.equal(t.isPending(0), false);
  assert.deepEqual(t.position('a', 0), { epoch: 1, offset: 10, channelId: 0 });
  assert.equal(t.accept(0, ev('a', 0, 1, 20, 15)), true);
  stats(t, { accepted: 2, holes: 1, positions: 1 });
  // A position beyond 2^53 - 1: offset 2^63 (a 10-byte varint).
  const big = hex('12 10 0a 01 "a" 18 01 20 80 80 80 80 80 80 80 80 80 01');
  assert.throws(() => t.onResult(0, big),
    { name: 'RangeError', message: 'TopicPosition of a/0 is beyond Number.MAX_SAFE_INTEGER (2^53 - 1)' });
  assert.deepEqual(t.position('a', 0), { epoch: 1, offset: 20, channelId: 0 });
  // An empty body is a valid result: not recovered, no positions.
  assert.deepEqual(t.onResult(0, new Uint8Array(0)), { recovered: false, error: '', positions: [], refused: [] });
});

test('the guarantee on one shard: 1..7 handled once each, in order, across a resume', () => {
  const t = new TopicTracker();
  const input = [[1, 0], [2, 1], [3, 2], 'resume', [6, 5], [3, 2], 'result',
    [4, 3], [5, 4], [3, 2], [6, 5], [6, 5], [7, 6]];
  const handled = [];
  for (const x of input) {
    if (x === 'resume')
      t.resumeMessage(0);
    else if (x === 'result')
      t.onResult(0, result(true, '', [{ topic: 'news', shard: 0, epoch: 1, offset: 3 }]));
    else if (t.accept(0, ev('news', 0, 1, x[0], x[1])))
      handled.push(x[0]);
  }
  assert.deepEqual(handled, [1, 2, 3, 4, 5, 6, 7]);
  assert.deepEqual(t.position('news', 0), { epoch: 1, offset: 7, channelId: 0 });
  stats(t, { accepted: 7, duplicates: 3, skipped: 1, positions: 1 });
});

test('a result through the client\'s receive path: a `message` event with msgType 91', async () => {
  const t = new TopicTracker();
  assert.equal(t.accept(5, ev('news', 0, 1, 3, 0)), true);
  t.resumeMessage(5);
  const c = new ChanqClient({ rpcTimeoutMs: 0 });
  const tr = fakeTransport();
  await c.connect('fake://', { transport: tr });
  const got = [];
  c.on('message', (m) => {
    if (m.msgType === TOPIC_RESUME_RESULT)
      got.push(t.onResult(m.channelId, m.msgBody));
  });
  const body = result(false, 'epoch changed', [{ topic: 'news', shard: 0, epoch: 2, offset: 1 }]);
  tr.feed(encodeFrame(encodePacket([{ channelId: 5, msgType: 91, msgBody: body }])));
  assert.equal(got.length, 1);
  assert.deepEqual(got[0], {
    recovered: false, error: 'epoch changed', positions: [{ topic: 'news', shard: 0, epoch: 2, offset: 1 }], refused: [],
  });
  assert.equal(t.isPending(5), false);
  assert.deepEqual(t.position('news', 0), { epoch: 2, offset: 1, channelId: 5 });
  c.disconnect();
});

// ---- toJSON / fromJSON: the state a reloaded page resumes from ---------------------------------

test('toJSON: positions in the order made, with their channel, and the keys, oldest first', () => {
  const t = new TopicTracker();
  assert.deepEqual(t.toJSON(), { positions: [], keys: [] });
  assert.equal(t.accept(5, ev('news', 2, 7, 40, 0, '17', 9)), true);
  assert.equal(t.accept(0, ev('chat', 0, 1, 3, 0)), true);
  assert.equal(t.accept(0, ev('news', 2, 7, 41, 40, '1', 79)), true);
  assert.equal(t.accept(5, ev('big', 4294967295, 2 ** 53 - 1, 2 ** 53 - 1, 0)), true);
  assert.deepEqual(JSON.parse(JSON.stringify(t)), {
    positions: [
      { topic: 'news', shard: 2, epoch: 7, offset: 41, channelId: 0 },
      { topic: 'chat', shard: 0, epoch: 1, offset: 3, channelId: 0 },
      { topic: 'big', shard: 4294967295, epoch: 2 ** 53 - 1, offset: 2 ** 53 - 1, channelId: 5 },
    ],
    keys: ['4:news2:179', '4:news1:179'],
  });
});

test('fromJSON: the same positions and keys, nothing pending, the counters at 0; the resume', () => {
  const t = new TopicTracker();
  assert.equal(t.accept(0, ev('chat', 0, 1, 3, 0, '8', 1)), true);
  assert.equal(t.accept(5, ev('news', 2, 7, 40, 0)), true);
  t.resumeMessage(0);
  const u = TopicTracker.fromJSON(JSON.parse(JSON.stringify(t)));
  assert.ok(u instanceof TopicTracker);
  assert.deepEqual(u.position('chat', 0), { epoch: 1, offset: 3, channelId: 0 });
  assert.deepEqual(u.position('news', 2), { epoch: 7, offset: 40, channelId: 5 });
  assert.equal(u.isPending(0), false);
  stats(u, { positions: 2, keys: 1 });
  assert.equal(u.lastError, '');
  // The resume of GLOBAL carries the position as before the reload, byte for byte.
  assert.deepEqual(Array.from(u.resumeMessage(0).body), Array.from(RESUME_CHAT));
  // The rules go on from the restored state: the key, the offset, the next event, a skipped hole.
  assert.equal(u.accept(0, ev('chat', 1, 1, 9, 0, '8', 1)), false);
  assert.equal(u.accept(0, ev('chat', 0, 1, 3, 2)), false);
  assert.equal(u.accept(0, ev('chat', 0, 1, 6, 5)), false);
  assert.equal(u.accept(0, ev('chat', 0, 1, 4, 3)), true);
  stats(u, { accepted: 1, duplicates: 2, skipped: 1, positions: 2, keys: 1 });
  assert.deepEqual(JSON.parse(JSON.stringify(u)), JSON.parse(JSON.stringify(TopicTracker.fromJSON(u.toJSON()))));
  // keys may be left out; the empty state is an empty tracker.
  stats(TopicTracker.fromJSON({ positions: [{ topic: 'a', shard: 0, epoch: 0, offset: 0, channelId: 0 }] }),
    { positions: 1 });
  stats(TopicTracker.fromJSON({ positions: [], keys: [] }), {});
});

test('fromJSON: a value toJSON cannot have made throws, naming what is wrong', () => {
  const p = (o) => ({ positions: [{ topic: 'a', shard: 0, epoch: 1, offset: 2, channelId: 0 }, { topic: 'b', shard: 0, epoch: 1, offset: 2, channelId: 0, ...o }] });
  const type = (v, message) => assert.throws(() => TopicTracker.fromJSON(v), { name: 'TypeError', message });
  const state = 'a TopicTracker state is an object whose "positions" is an array';
  type(null, state);
  type('x', state);
  type([], state);
  type({}, state);
  type({ positions: {} }, state);
  type({ positions: [], keys: 'k' }, 'a TopicTracker state\'s "keys" is an array');
  type({ positions: [null] }, 'positions[0]: not an object');
  type(p({ topic: '' }), 'positions[1]: topic is not a non-empty string');
  type(p({ topic: 3 }), 'positions[1]: topic is not a non-empty string');
  const shard = 'positions[1]: shard is not an integer from 0 to 2^32 - 1';
  type(p({ shard: -1 }), shard);
  type(p({ shard: 2 ** 32 }), shard);
  type(p({ shard: 1.5 }), shard);
  type(p({ shard: '1' }), shard);
  const long = 'positions[1]: epoch and offset are not integers from 0 to 2^53 - 1';
  type(p({ epoch: -1 }), long);
  type(p({ epoch: 2 ** 53 }), long);
  type(p({ offset: '2' }), long);
  type(p({ offset: undefined }), long);
  const chan = 'positions[1]: channelId is not an integer from 0 to 2^32 - 1';
  type(p({ channelId: undefined }), chan);
  type(p({ channelId: 2 ** 32 }), chan);
  type(p({ topic: 'a' }), 'positions[1]: a/0 is listed twice');
  assert.equal(TopicTracker.fromJSON(p({ topic: 'a', shard: 1 })).stats().positions, 2);
  type({ positions: [], keys: ['k', 7] }, 'keys[1]: not a string');
  const many = Array.from({ length: TOPIC_MAX_POSITIONS + 1 }, (_, s) => ({ topic: 'a', shard: s, epoch: 1, offset: 1, channelId: 0 }));
  assert.throws(() => TopicTracker.fromJSON({ positions: many }), { name: 'RangeError', message: 'more than 1024 positions' });
  assert.equal(TopicTracker.fromJSON({ positions: many.slice(1) }).stats().positions, TOPIC_MAX_POSITIONS);
  const keys = Array.from({ length: TOPIC_DEDUP_WINDOW + 1 }, (_, i) => `k${i}`);
  assert.throws(() => TopicTracker.fromJSON({ positions: [], keys }), { name: 'RangeError', message: 'more than 4096 keys' });
  assert.equal(TopicTracker.fromJSON({ positions: [], keys: keys.slice(1) }).stats().keys, TOPIC_DEDUP_WINDOW);
});
