// Integration: the client against a real chanqd (env CHANQD=path/to/chanqd) over each of its
// transports: WebSocket (--ws-addr), WSS (--wss-addr, test certificate) and plain TCP. A chanqd
// without the WebSocket listeners fails the test (there is no stand-in). Skipped when CHANQD is
// unset.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  BroadcastType,
  ChannelDataAccess,
  ChannelType,
  ChanqClient,
  ConnectionType,
  TypeRegistry,
} from '../src/index.js';
import chatDescriptor from '../gen/chat.js';
import { repoRoot, testpbRoot } from './helpers.js';
import { buildFds, chanqdHelp, hasFlag, haveTool, makeCert, startChanqd } from './server.js';

const BIN = process.env.CHANQD;
const HELP = BIN ? chanqdHelp(BIN) : '';
const TESTPB = 'testpb.TestChannelDataMessage';
const CHAT = 'chatpb.ChatChannelData';

// Each transport: {name, scheme, skip}.
function transports() {
  if (!BIN)
    return [{ name: 'chanqd', skip: 'CHANQD is not set' }];
  const noSsl = haveTool('openssl') ? false : 'openssl is not installed';
  return [
    { name: 'ws', scheme: 'ws', skip: false },
    { name: 'wss', scheme: 'wss', skip: noSsl },
    { name: 'tcp', scheme: 'tcp', skip: false },
  ];
}

function registry() {
  return new TypeRegistry().add(testpbRoot()).add(chatDescriptor);
}

for (const tr of transports()) {
  describe(`chanqd over ${tr.name}`, { skip: tr.skip }, () => {
    let srv;
    let url;
    const connectOpts = {};
    const clients = [];
    let haveChatSchema = false;

    before(async () => {
      if (tr.scheme !== 'tcp')
        assert.ok(hasFlag(HELP, `${tr.scheme}-addr`), `this chanqd has no --${tr.scheme}-addr`);
      const args = [];
      const dir = mkdtempSync(join(tmpdir(), 'chanq-js-'));
      if (haveTool('protoc-c')) {
        args.push('--channel-data-types', buildFds(dir, join(repoRoot, 'proto', 'chat.proto'), join(repoRoot, 'proto')));
        haveChatSchema = true;
      }
      let tls = null;
      if (tr.scheme === 'wss') {
        tls = makeCert(dir);
        connectOpts.ws = { ca: readFileSync(tls.cert) };
      }
      if (tr.scheme === 'ws')
        args.push('--ws-addr', '127.0.0.1:0');
      if (tr.scheme === 'wss')
        args.push('--wss-addr', '127.0.0.1:0', '--tls-cert', tls.cert, '--tls-key', tls.key);
      srv = await startChanqd(BIN, args, { dir });
      const addr = srv.ready[tr.scheme === 'tcp' ? 'client' : tr.scheme];
      assert.ok(addr, `ready file has no ${tr.scheme} address`);
      url = `${tr.scheme}://${addr}${tr.scheme === 'tcp' ? '' : '/'}`;
    });

    after(async () => {
      for (const c of clients)
        c.disconnect();
      if (srv)
        await srv.stop();
    });

    async function client(pit, serverUrl) {
      const c = new ChanqClient({ registry: registry() });
      clients.push(c);
      await c.connect(serverUrl || url, connectOpts);
      const res = await c.auth(pit, 'pw');
      assert.equal(res.result, 0);
      assert.ok(res.connId > 0);
      assert.equal(c.connId, res.connId);
      return c;
    }

    test('auth, create, list, subscribe, data fan-out, user messages, 60 KB, unsub, remove', async () => {
      const a = await client('alice');
      const b = await client('bob');
      assert.notEqual(a.connId, b.connId);

      // A creates a SUBWORLD channel with data; it is the owner and subscribed.
      const aSub = a.waitFor('subscribed', (e) => e.connId === a.connId);
      const created = await a.createChannel(ChannelType.SUBWORLD, `room-${tr.scheme}`,
        { type: TESTPB, value: { text: 'init', num: 1 } },
        { subOptions: { dataAccess: ChannelDataAccess.WRITE_ACCESS, fanOutIntervalMs: 10 } });
      const ch = created.channelId;
      assert.ok(ch > 0);
      assert.equal(created.ownerConnId, a.connId);
      assert.equal(created.channelType, ChannelType.SUBWORLD);
      assert.equal(created.metadata, `room-${tr.scheme}`);
      assert.equal((await aSub).channelId, ch);

      const listed = await b.listChannels(ChannelType.SUBWORLD, [`room-${tr.scheme}`]);
      assert.deepEqual(listed.map((i) => [i.channelId, i.metadata]), [[ch, `room-${tr.scheme}`]]);
      const all = await b.listChannels();
      assert.ok(all.some((i) => i.channelId === 0 && i.channelType === ChannelType.GLOBAL));

      // B subscribes with write access: its reply, the owner's copy, then the full state.
      const ownerSees = a.waitFor('subscribed', (e) => e.connId === b.connId);
      const bFirst = b.waitFor('channelData', (e) => e.channelId === ch);
      const sub = await b.subToChannel(ch, { dataAccess: ChannelDataAccess.WRITE_ACCESS, fanOutIntervalMs: 10 });
      assert.equal(sub.connId, b.connId);
      assert.equal(sub.connType, ConnectionType.CLIENT);
      assert.equal(sub.subOptions.dataAccess, ChannelDataAccess.WRITE_ACCESS);
      assert.equal(sub.subOptions.fanOutIntervalMs, 10);
      assert.ok(b.subscriptions.has(ch));
      assert.equal((await ownerSees).channelId, ch);
      const first = await bFirst;
      assert.equal(first.typeName, TESTPB);
      assert.deepEqual({ ...first.data }, { text: 'init', num: 1 });

      // B updates the data; A receives the fan-out.
      const aData = a.waitFor('channelData', (e) => e.channelId === ch && e.data?.text === 'hello');
      b.updateChannelData(ch, { type: TESTPB, value: { text: 'hello', num: 2 } });
      assert.equal((await aData).data.num, 2);

      // B's user message goes to the owner, wrapped with B's connection id.
      const aMsg = a.waitFor('userMessage', (e) => e.msgType === 100);
      b.sendUserMessage(ch, BroadcastType.ALL, 100, 'ping');
      const m = await aMsg;
      assert.equal(m.channelId, ch);
      assert.equal(m.clientConnId, b.connId);
      assert.equal(Buffer.from(m.payload).toString(), 'ping');

      // A game server (TCP server listener) broadcasts to every subscriber.
      const s = new ChanqClient({ registry: registry() });
      clients.push(s);
      await s.connect(`tcp://${srv.ready.server}`);
      await s.auth('game-server', '');
      const aAll = a.waitFor('userMessage', (e) => e.msgType === 101);
      const bAll = b.waitFor('userMessage', (e) => e.msgType === 101);
      s.sendForward(ch, BroadcastType.ALL, 101, 0, 'to everyone');
      for (const e of await Promise.all([aAll, bAll]))
        assert.equal(Buffer.from(e.payload).toString(), 'to everyone');

      // 60 KB in both directions: a data update fanned out and a user message forwarded.
      const big = 'x'.repeat(60 * 1024);
      const bBig = b.waitFor('channelData', (e) => e.channelId === ch && e.data?.text?.length === big.length);
      a.updateChannelData(ch, { type: TESTPB, value: { text: big, num: 3 } });
      const got = await bBig;
      assert.equal(got.data.text, big);
      assert.equal(got.data.num, 3);
      const blob = new Uint8Array(60 * 1024).map((_, i) => i % 251);
      const aBig = a.waitFor('userMessage', (e) => e.msgType === 102);
      b.sendUserMessage(ch, 0, 102, blob);
      assert.deepEqual(new Uint8Array((await aBig).payload), blob);

      // Unsubscribe and remove.
      const ownerUnsub = a.waitFor('unsubscribed', (e) => e.connId === b.connId);
      const un = await b.unsubFromChannel(ch);
      assert.equal(un.connId, b.connId);
      assert.ok(!b.subscriptions.has(ch));
      assert.equal((await ownerUnsub).channelId, ch);
      const removed = a.waitFor('channelRemoved', (e) => e.channelId === ch);
      a.removeChannel(ch);
      await removed;
      assert.deepEqual(await b.listChannels(ChannelType.SUBWORLD, [`room-${tr.scheme}`]), []);

      const closed = b.waitFor('close');
      b.disconnect();
      await closed;
      assert.equal(b.connected, false);
    });

    // As the demo does it: GLOBAL possessed with merge options only; the first update defines
    // the data type, chanqd merges by the chat schema and keeps the last listSizeLimit messages.
    test('chat data: GLOBAL possessed by a client, lists merged and trimmed', async (t) => {
      if (!haveChatSchema) {
        t.skip('protoc-c is not installed (no chat.fds)');
        return;
      }
      const a = await client('carol');
      const b = await client('dave');
      const mergeOptions = { listSizeLimit: 3, truncateTop: true };
      const subOptions = { dataAccess: ChannelDataAccess.WRITE_ACCESS, fanOutIntervalMs: 10, skipSelfUpdateFanOut: false };
      const g = await a.createChannel(ChannelType.GLOBAL, '', null, { mergeOptions, subOptions });
      assert.equal(g.channelId, 0);
      assert.equal(g.ownerConnId, a.connId);
      const msg = (content) => ({ type: CHAT, value: { chatMessages: [{ sender: 'carol', sendTime: 1700000000000, content }] } });
      const sawLast = a.waitFor('channelData', (e) => e.channelId === 0 && e.data?.chatMessages.some((x) => x.content === 'e'));
      for (const c of ['a', 'b', 'c', 'd', 'e'])
        a.updateChannelData(0, msg(c));
      await sawLast;

      const full = b.waitFor('channelData', (e) => e.channelId === 0);
      await b.subToChannel(0, { dataAccess: ChannelDataAccess.WRITE_ACCESS, fanOutIntervalMs: 10 });
      const state = await full;
      assert.equal(state.typeName, CHAT);
      assert.deepEqual(state.data.chatMessages.map((x) => x.content), ['c', 'd', 'e']);
      assert.equal(state.data.chatMessages[0].sendTime, 1700000000000);

      const aSees = a.waitFor('channelData', (e) => e.channelId === 0 && e.data?.chatMessages.some((x) => x.content === 'from dave'));
      b.updateChannelData(0, { type: CHAT, value: { chatMessages: [{ sender: 'dave', sendTime: 1, content: 'from dave' }] } });
      const upd = await aSees;
      assert.equal(upd.data.chatMessages.at(-1).sender, 'dave');
    });
  });
}
