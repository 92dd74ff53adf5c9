// A client given a list of URLs moves along it when its connection is lost (README "Moving"):
// round robin from the lost URL with the backoff, AUTH again with the same credentials, SUB again
// to its own subscriptions with the options their results carried, then 'moved'. Fake transports
// play the servers, byte for byte through the real framing and codec.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  ChanqClient,
  FrameReader,
  MOVE_DEFAULTS,
  MessageType as MT,
  decodePacket,
  encodeFrame,
  encodePacket,
  moveBackoffMs,
} from '../src/index.js';
import { fakeTransport, tick } from './helpers.js';

const PB = 'channeldpb.';

// Fake servers by URL: a URL listed in `refuse` fails to open; the others get a fake transport
// that records what the client sends and can close from the server's side.
function network(refuse = []) {
  const net = { opened: [], conns: {} };
  net.open = async (url) => {
    net.opened.push(url);
    if (refuse.includes(url))
      throw new Error(`connect ${url}: refused`);
    const t = fakeTransport();
    t.serverClose = (reason) => t.onclose?.(reason);
    t.reader = new FrameReader();
    t.read = 0;
    (net.conns[url] ||= []).push(t);
    return t;
  };
  net.last = (url) => net.conns[url].at(-1);
  return net;
}

// The messages the client sent on t since the previous call.
function received(t) {
  const out = [];
  for (; t.read < t.sent.length; t.read++) {
    for (const body of t.reader.push(t.sent[t.read]))
      out.push(...decodePacket(body));
  }
  return out;
}

function reply(c, t, packs) {
  t.feed(encodeFrame(encodePacket(packs.map((p) => ({
    channelId: p.channelId || 0, broadcast: 0, stubId: p.stubId || 0, msgType: p.msgType,
    msgBody: c.registry.encode(PB + p.type, p.body),
  })))));
}

// Waits (bounded) until the client has sent something on url's latest connection.
async function sentOn(net, url, t0 = Date.now()) {
  for (;;) {
    const t = net.conns[url]?.at(-1);
    if (t) {
      const got = received(t);
      if (got.length)
        return { t, got };
    }
    assert.ok(Date.now() - t0 < 3000, `nothing sent on ${url}`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

// A client disconnected when the test ends, so that a failed assertion leaves no move running.
function client(t, opts = {}) {
  const c = new ChanqClient(opts);
  t.after(() => c.disconnect());
  return c;
}

const OPTS = { dataAccess: 1, fanOutIntervalMs: 40, dataFieldMasks: ['name'], fanOutDelayMs: 0,
  skipSelfUpdateFanOut: false, skipFirstFanOut: false };

// Connects to net's a (of a, b, c), authenticates as conn 7, subscribes itself to 5 and is
// subscribed to 6 by a server.
async function settled(t, net, move = {}) {
  const c = client(t, { rpcTimeoutMs: 1000 });
  await c.connect(['tcp://a', 'tcp://b', 'tcp://c'], { openTransport: net.open, move: { backoffMinMs: 1, ...move } });
  assert.deepEqual(net.opened, ['tcp://a']);
  const a = net.last('tcp://a');
  const authed = c.auth('pit-1', 'lt-1');
  let { got } = await sentOn(net, 'tcp://a');
  reply(c, a, [{ msgType: MT.AUTH, stubId: got[0].stubId, type: 'AuthResultMessage', body: { connId: 7 } }]);
  await authed;
  const subbed = c.subToChannel(5, { dataAccess: 1, fanOutIntervalMs: 40, dataFieldMasks: ['name'] });
  ({ got } = await sentOn(net, 'tcp://a'));
  const result = { connId: 7, subOptions: OPTS, connType: 2, channelType: 3 };
  reply(c, a, [{ channelId: 5, msgType: MT.SUB_TO_CHANNEL, stubId: got[0].stubId, type: 'SubscribedToChannelResultMessage', body: result },
    { channelId: 6, msgType: MT.SUB_TO_CHANNEL, type: 'SubscribedToChannelResultMessage', body: result }]);
  await subbed;
  assert.deepEqual([...c.subscriptions.keys()], [5, 6]);
  assert.deepEqual([...c.ownSubscriptions.keys()], [5]); // 6 is the server's
  return { c, a };
}

test('the backoff: immediate, then doubling from backoffMinMs up to backoffMaxMs', () => {
  const o = { ...MOVE_DEFAULTS, backoffMinMs: 100, backoffMaxMs: 1000 };
  assert.deepEqual([0, 1, 2, 3, 4, 5, 6].map((k) => moveBackoffMs(o, k)), [0, 100, 200, 400, 800, 1000, 1000]);
});

test('a lost connection moves to the next URL that answers: AUTH and its own SUBs again, then moved', async (t) => {
  const net = network(['tcp://b']);
  const { c, a } = await settled(t, net);
  const lost = c.listChannels();
  const events = [];
  c.on('moving', (e) => events.push(['moving', e]));
  c.on('close', (r) => events.push(['close', r]));
  const moved = c.waitFor('moved', undefined, 3000);
  a.serverClose('TCP connection closed');
  await assert.rejects(lost, { code: 'closed' });
  assert.equal(c.moving, true);
  assert.equal(c.connected, false);
  assert.equal(c.subscriptions.size, 0);
  assert.throws(() => c.sendUserMessage(5, 0, 100, 'x'), { code: 'closed' });
  const { t: tc, got } = await sentOn(net, 'tcp://c');
  assert.deepEqual(net.opened, ['tcp://a', 'tcp://b', 'tcp://c']);
  assert.equal(got.length, 1);
  assert.equal(got[0].msgType, MT.AUTH);
  assert.deepEqual(c.registry.decode(PB + 'AuthMessage', got[0].msgBody),
    { playerIdentifierToken: 'pit-1', loginToken: 'lt-1' });
  reply(c, tc, [{ msgType: MT.AUTH, stubId: got[0].stubId, type: 'AuthResultMessage', body: { connId: 0x18000003 } }]);
  const ev = await moved;
  assert.deepEqual(ev, { from: 'tcp://a', to: 'tcp://c', fromIndex: 0, toIndex: 2, oldConnId: 7,
    connId: 0x18000003, resubscribed: 1, tries: 2, reason: 'TCP connection closed' });
  assert.deepEqual(events, [['moving', { from: 'tcp://a', fromIndex: 0, oldConnId: 7, reason: 'TCP connection closed' }]]);
  assert.equal(c.connId, 0x18000003);
  await tick();
  const sub = received(tc);
  assert.equal(sub.length, 1);
  assert.equal(sub[0].msgType, MT.SUB_TO_CHANNEL);
  assert.equal(sub[0].channelId, 5);
  assert.deepEqual(c.registry.decode(PB + 'SubscribedToChannelMessage', sub[0].msgBody),
    { connId: 0x18000003, subOptions: OPTS });
  reply(c, tc, [{ channelId: 5, msgType: MT.SUB_TO_CHANNEL, stubId: sub[0].stubId, type: 'SubscribedToChannelResultMessage',
    body: { connId: 0x18000003, subOptions: OPTS, connType: 2, channelType: 3 } }]);
  await tick();
  assert.deepEqual(c.subscriptions.get(5), OPTS);
  assert.deepEqual(c.ownSubscriptions.get(5), { options: OPTS, channelType: 3 });
  assert.equal(c.moves, 1);
  c.disconnect();
  assert.equal(events.at(-1)[0], 'close');
});

test('an AUTH the new node refuses ends the move: close, and no more tries', async (t) => {
  const net = network();
  const { c, a } = await settled(t, net);
  const closed = new Promise((r) => c.once('close', r));
  a.serverClose('reset');
  const { t: tb, got } = await sentOn(net, 'tcp://b');
  reply(c, tb, [{ msgType: MT.AUTH, stubId: got[0].stubId, type: 'AuthResultMessage', body: { result: 2 } }]);
  assert.match(await closed, /^reset; the move failed: authentication failed/);
  assert.equal(tb.closedBy, 'client');
  assert.equal(c.moving, false);
  assert.equal(c.connected, false);
  assert.deepEqual(net.opened, ['tcp://a', 'tcp://b']);
});

test('an AUTH unanswered within authTimeoutMs fails that try; after maxTries the client closes', async (t) => {
  const net = network(['tcp://c']);
  const { c, a } = await settled(t, net, { authTimeoutMs: 20, maxTries: 3 });
  const closed = new Promise((r) => c.once('close', r));
  a.serverClose('reset');
  const reason = await closed; // b: no answer; c: refused; a: no answer
  assert.match(reason, /^reset; the move failed: no reply to msgType 1/);
  assert.deepEqual(net.opened, ['tcp://a', 'tcp://b', 'tcp://c', 'tcp://a']);
  assert.equal(net.last('tcp://b').closedBy, 'client');
  assert.equal(net.last('tcp://a').closedBy, 'client');
});

test('a client that never authenticated moves without AUTH; disconnect() during a move stops it', async (t) => {
  const net = network(['tcp://b', 'tcp://c']);
  const c = client(t, { rpcTimeoutMs: 1000 });
  await c.connect(['tcp://a', 'tcp://b', 'tcp://c'], { openTransport: net.open, move: { backoffMinMs: 1 } });
  const moved = c.waitFor('moved', undefined, 3000);
  net.last('tcp://a').serverClose('gone');
  const ev = await moved; // b and c refuse; a again
  assert.equal(ev.to, 'tcp://a');
  assert.equal(ev.connId, 0);
  assert.equal(ev.tries, 3);
  assert.equal(received(net.last('tcp://a')).length, 0);
  const net2 = network(['tcp://b', 'tcp://c']);
  const c2 = client(t);
  await c2.connect(['tcp://a', 'tcp://b', 'tcp://c'], { openTransport: net2.open, move: { backoffMinMs: 5000 } });
  const closes = [];
  c2.on('close', (r) => closes.push(r));
  net2.last('tcp://a').serverClose('gone');
  await new Promise((r) => setTimeout(r, 5)); // b refused; the 5 s backoff before c runs
  c2.disconnect();
  await new Promise((r) => setTimeout(r, 5));
  assert.deepEqual(closes, ['gone; the move failed: disconnected']);
  assert.deepEqual(net2.opened, ['tcp://a', 'tcp://b']);
});

test('the first connection tries the list in order; none answering rejects with the last error', async (t) => {
  const net = network(['tcp://a', 'tcp://b']);
  const c = client(t);
  await c.connect(['tcp://a', 'tcp://b', 'tcp://c'], { openTransport: net.open, move: { backoffMinMs: 1 } });
  assert.deepEqual(net.opened, ['tcp://a', 'tcp://b', 'tcp://c']);
  assert.equal(c.urlIndex, 2);
  const none = network(['tcp://a', 'tcp://b']);
  await assert.rejects(new ChanqClient().connect(['tcp://a', 'tcp://b'], { openTransport: none.open,
    move: { backoffMinMs: 1, maxTries: 3 } }), /connect tcp:\/\/a: refused/);
  assert.deepEqual(none.opened, ['tcp://a', 'tcp://b', 'tcp://a']);
  await assert.rejects(new ChanqClient().connect([]), RangeError);
});

test('one URL as a string: a lost connection closes the client, as before', async () => {
  const c = new ChanqClient();
  const t = fakeTransport();
  await c.connect('fake://', { transport: t });
  const closed = new Promise((r) => c.once('close', r));
  t.onclose('gone');
  assert.equal(await closed, 'gone');
  assert.equal(c.moving, false);
});
