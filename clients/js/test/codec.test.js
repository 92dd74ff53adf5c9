// The §1.2 test vectors of channeld-protocol.md through the client's real send and receive
// paths (fake transport), byte for byte, plus the client's RPC, batching and error handling.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  ChanqClient,
  ChanqError,
  MessageType,
  TypeRegistry,
  decodePacket,
  encodeFrame,
  encodePacket,
} from '../src/index.js';
import { VEC, concat, fakeTransport, hex, testpbRoot, tick, toHex } from './helpers.js';

async function connected(opts = {}) {
  const registry = new TypeRegistry().add(testpbRoot());
  const c = new ChanqClient({ registry, rpcTimeoutMs: 0, ...opts });
  const t = fakeTransport();
  await c.connect('fake://', { transport: t });
  return { c, t };
}

test('AUTH request is encoded exactly as channeld marshals it', async () => {
  const { c, t } = await connected();
  const p = c.auth('test', 'test');
  await tick();
  assert.equal(t.sent.length, 1);
  assert.equal(toHex(t.sent[0]), toHex(VEC.authRequest));
  t.feed(VEC.authResult);
  const res = await p;
  assert.equal(res.result, 0);
  assert.equal(res.connId, 1);
  assert.equal(res.compressionType, 0);
  assert.equal(c.connId, 1);
});

test('SUB_TO_CHANNEL result on GLOBAL decodes, and re-encodes with the optional zero fields', async () => {
  const { c, t } = await connected();
  c.connId = 1;
  const events = [];
  c.on('subscribed', (e) => events.push(e));
  t.feed(VEC.subResult);
  assert.equal(events.length, 1);
  const e = events[0];
  assert.equal(e.channelId, 0);
  assert.equal(e.connId, 1);
  assert.equal(e.connType, 2);
  assert.equal(e.channelType, 1);
  assert.deepEqual(
    { ...e.subOptions },
    { dataAccess: 1, dataFieldMasks: [], fanOutIntervalMs: 20, fanOutDelayMs: 0, skipSelfUpdateFanOut: true, skipFirstFanOut: false },
  );
  assert.ok(c.subscriptions.has(0));
  // Encoding the same values reproduces `20 00` and `30 00`: explicit presence.
  const body = c.registry.encode('channeldpb.SubscribedToChannelResultMessage', {
    connId: 1,
    subOptions: { dataAccess: 1, fanOutIntervalMs: 20, fanOutDelayMs: 0, skipSelfUpdateFanOut: true, skipFirstFanOut: false },
    connType: 2,
    channelType: 1,
  });
  const frame = encodeFrame(encodePacket([{ msgType: MessageType.SUB_TO_CHANNEL, msgBody: body }]));
  assert.equal(toHex(frame), toHex(VEC.subResult));
});

test('a subscription request sends only the options given', async () => {
  const { c, t } = await connected();
  c.connId = 1;
  c.subToChannel(0, { dataAccess: 2, fanOutIntervalMs: 100 });
  await tick();
  // MessagePack{stub 1, type 6, body{connId 1, subOptions{dataAccess 2, fanOutIntervalMs 100}}}
  assert.equal(toHex(t.sent[0]), toHex(hex('43 48 00 10 00 0a 0e 18 01 20 06 2a 08 08 01 12 04 08 02 18 64')));
});

test('CHANNEL_DATA_UPDATE fan-out decodes to the registered type, and the update encodes identically', async () => {
  const { c, t } = await connected();
  const got = [];
  c.on('channelData', (e) => got.push(e));
  t.feed(VEC.dataFanOut);
  assert.equal(got.length, 1);
  assert.equal(got[0].channelId, 5);
  assert.equal(got[0].typeName, 'testpb.TestChannelDataMessage');
  assert.deepEqual({ ...got[0].data }, { text: 'a', num: 1 });
  c.updateChannelData(5, { type: 'testpb.TestChannelDataMessage', value: { text: 'a', num: 1 } });
  await tick();
  assert.equal(toHex(t.sent[0]), toHex(VEC.dataFanOut));
});

test('channel data of an unregistered type is delivered raw', async () => {
  const c = new ChanqClient({ rpcTimeoutMs: 0 });
  const t = fakeTransport();
  await c.connect('fake://', { transport: t });
  const got = [];
  c.on('channelData', (e) => got.push(e));
  t.feed(VEC.dataFanOut);
  assert.equal(got[0].data, null);
  assert.equal(got[0].typeName, 'testpb.TestChannelDataMessage');
  assert.equal(toHex(got[0].any.value), '0a 01 61 10 01');
});

test('user-space message 100 carrying ServerForwardMessage{7, "hi"}', async () => {
  const { c, t } = await connected();
  const got = [];
  c.on('userMessage', (e) => got.push(e));
  t.feed(VEC.userMsg);
  assert.equal(got.length, 1);
  assert.equal(got[0].msgType, 100);
  assert.equal(got[0].clientConnId, 7);
  assert.equal(Buffer.from(got[0].payload).toString(), 'hi');
  c.sendForward(0, 0, 100, 7, 'hi');
  await tick();
  assert.equal(toHex(t.sent[0]), toHex(VEC.userMsg));
});

test('a client user message carries the raw body', async () => {
  const { c, t } = await connected();
  c.sendUserMessage(3, 2, 101, 'hi');
  await tick();
  const [m] = decodePacket(t.sent[0].subarray(5));
  assert.deepEqual({ ...m, msgBody: Buffer.from(m.msgBody).toString() },
    { channelId: 3, broadcast: 2, stubId: 0, msgType: 101, msgBody: 'hi' });
  assert.throws(() => c.sendUserMessage(3, 0, 99, 'x'), RangeError);
});

test('an empty-body message (RECOVERY_END) round-trips', async () => {
  const { c, t } = await connected();
  const got = [];
  c.on('message', (m) => got.push(m));
  t.feed(VEC.recoveryEnd);
  assert.equal(got.length, 1);
  assert.equal(got[0].msgType, MessageType.RECOVERY_END);
  assert.equal(got[0].msgBody.length, 0);
  const frame = encodeFrame(encodePacket([{ msgType: MessageType.RECOVERY_END, msgBody: new Uint8Array(0) }]));
  assert.equal(toHex(frame), toHex(VEC.recoveryEnd));
});

test('ChannelSubscriptionOptions{fanOutDelayMs: -1} is a 10-byte varint', () => {
  const r = new TypeRegistry();
  assert.equal(toHex(r.encode('channeldpb.ChannelSubscriptionOptions', { fanOutDelayMs: -1 })), toHex(VEC.subOptionsDelayMinus1));
  assert.equal(r.decode('channeldpb.ChannelSubscriptionOptions', VEC.subOptionsDelayMinus1).fanOutDelayMs, -1);
});

test('stub ids are the lowest free id from 1, and replies resolve the matching request', async () => {
  const { c, t } = await connected();
  const a = c.listChannels();
  const b = c.listChannels(3, ['room']);
  await tick();
  const sent = decodePacket(t.sent[0].subarray(5));
  assert.deepEqual(sent.map((m) => m.stubId), [1, 2], 'both requests in one packet');
  const reply = (stub, id) =>
    encodeFrame(encodePacket([{
      msgType: MessageType.LIST_CHANNEL,
      stubId: stub,
      msgBody: c.registry.encode('channeldpb.ListChannelResultMessage', { channels: [{ channelId: id, channelType: 3, metadata: 'room' }] }),
    }]));
  t.feed(concat(reply(2, 9), reply(1, 8)));
  assert.equal((await b)[0].channelId, 9);
  assert.equal((await a)[0].channelId, 8);
  c.listChannels();
  await tick();
  assert.equal(decodePacket(t.sent[1].subarray(5))[0].stubId, 1, 'freed stub ids are reused');
});

test('a reply with an unknown stub id is an event only', async () => {
  const { c, t } = await connected();
  const got = [];
  c.on('message', (m) => got.push(m.stubId));
  t.feed(encodeFrame(encodePacket([{ msgType: MessageType.LIST_CHANNEL, stubId: 42 }])));
  assert.deepEqual(got, [42]);
});

test('a message too big for one packet is refused; 60 KB fits', async () => {
  const { c, t } = await connected();
  assert.throws(() => c.sendUserMessage(0, 0, 100, new Uint8Array(65535)), (e) => e instanceof ChanqError && e.code === 'too-big');
  c.sendUserMessage(0, 0, 100, new Uint8Array(60 * 1024));
  c.sendUserMessage(0, 0, 100, new Uint8Array(10 * 1024));
  await tick();
  assert.equal(t.sent.length, 2, 'the second message does not fit in the first packet');
  for (const f of t.sent)
    assert.ok(f.length <= 5 + 65535);
});

test('a framing error closes the connection and rejects pending RPCs', async () => {
  const { c, t } = await connected();
  const errors = [];
  c.on('error', (e) => errors.push(e));
  const closed = new Promise((resolve) => c.on('close', resolve));
  const p = c.listChannels();
  await tick();
  t.feed(hex('43 48 00 00 00'));
  await closed;
  await assert.rejects(p, (e) => e.code === 'closed');
  assert.equal(errors[0].code, 'protocol');
  assert.equal(t.closedBy, 'client');
  assert.equal(c.connected, false);
});

test('a packet that is not a Packet protobuf closes the connection', async () => {
  const { c, t } = await connected();
  const closed = new Promise((resolve) => c.on('close', resolve));
  t.feed(encodeFrame(hex('0a 7f 00')));
  assert.match(await closed, /closed/);
  assert.equal(c.connected, false);
});

test('an RPC without a reply times out', async () => {
  const { c } = await connected({ rpcTimeoutMs: 20 });
  await assert.rejects(c.listChannels(), (e) => e.code === 'timeout');
  assert.equal(c.pending.size, 0);
});

test('a failed AUTH rejects with code auth', async () => {
  const { c, t } = await connected();
  const p = c.auth('x', 'y');
  await tick();
  t.feed(encodeFrame(encodePacket([{ msgType: 1, stubId: 1, msgBody: hex('08 02') }])));
  await assert.rejects(p, (e) => e.code === 'auth' && e.detail.result === 2);
  assert.equal(c.connId, 0);
});

test('the client reassembles packets split and coalesced across transport reads', async () => {
  const stream = concat(VEC.authResult, VEC.subResult, VEC.dataFanOut, VEC.userMsg, VEC.recoveryEnd);
  for (const size of [1, 2, 3, 7, 16, 33, stream.length]) {
    const { c, t } = await connected();
    const types = [];
    c.on('message', (m) => types.push(m.msgType));
    for (let off = 0; off < stream.length; off += size)
      t.feed(stream.subarray(off, off + size));
    assert.deepEqual(types, [1, 6, 8, 100, 21], `reads of ${size} bytes`);
  }
});
