// Integration: a JS client of a relay node that dies moves to another node (issue 23,
// doc/relay-cluster.md "Clients that move"). Three chanqd relay nodes (env CHANQD) over a real
// ZooKeeper and nats-server, started with tests/support/zk.sh and nats.sh; a game server on node
// 1 owns a channel; the client, given [node 3, node 2] over WebSocket, subscribed itself. Node 3
// is SIGKILLed: the client moves to node 2, authenticates and subscribes there again with the
// same options, and the server's broadcasts reach it again (the time is printed, not asserted).
// Skipped when CHANQD is unset, chanqd has no --relay-nats, or ZooKeeper or nats-server is not
// installed.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { BroadcastType, ChannelType, ChanqClient } from '../src/index.js';
import { repoRoot } from './helpers.js';
import { chanqdHelp, hasFlag, startChanqd } from './server.js';

const BIN = process.env.CHANQD;
const HELP = BIN ? chanqdHelp(BIN) : '';
const SUPPORT = join(repoRoot, 'tests', 'support');
const TICK_MS = 5;

function skipReason() {
  if (!BIN)
    return 'CHANQD is not set';
  if (!hasFlag(HELP, 'relay-nats'))
    return 'this chanqd has no --relay-nats';
  return false;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Runs tests/support/NAME.sh; returns its stdout, or null when the service is not installed
// (exit 2).
function support(name, args, env = {}) {
  const r = spawnSync(join(SUPPORT, `${name}.sh`), args, { encoding: 'utf8', env: { ...process.env, ...env } });
  if (r.status === 2)
    return null;
  assert.equal(r.status, 0, `${name}.sh ${args.join(' ')}: ${r.stderr}`);
  return r.stdout.trim();
}

async function metric(admin, name) {
  const res = await fetch(`http://${admin}/metrics`);
  const m = (await res.text()).match(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\d+)`, 'm'));
  return m ? Number(m[1]) : 0;
}

async function userMessage(c, msgType, timeoutMs = 5000) {
  const m = await c.waitFor('userMessage', (e) => e.msgType === msgType, timeoutMs);
  return Buffer.from(m.payload).toString();
}

describe('a client of a relay node that dies moves to another node', { skip: skipReason() }, () => {
  let dir = null;
  const nodes = [];
  const clients = [];
  let zkBase = null;
  let natsDir = null;
  let unavailable = null;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'chanq-js-relay-'));
    zkBase = join(dir, 'zk');
    const hosts = support('zk', ['start', zkBase], { CQ_ZK_NODES: '1' });
    if (hosts === null) {
      zkBase = null;
      unavailable = 'ZooKeeper is not installed';
      return;
    }
    natsDir = join(dir, 'nats');
    const urls = support('nats', ['start', natsDir, '1']);
    if (urls === null) {
      natsDir = null;
      unavailable = 'nats-server is not installed';
      return;
    }
    const cluster = `js${process.pid}`;
    for (let n = 1; n <= 3; n++) {
      mkdirSync(join(dir, `node${n}`));
      nodes[n] = await startChanqd(BIN, ['--dev', '--ws-addr', '127.0.0.1:0', '--admin-addr', '127.0.0.1:0',
        '--relay-nats', urls, '--relay-zk-hosts', hosts, '--relay-cluster', cluster, '--relay-node-id', String(n),
        '--zk-session-ms', '2000'], { dir: join(dir, `node${n}`) });
    }
    // every node has heard the two others over NATS (their HELLO)
    for (let n = 1; n <= 3; n++) {
      for (let i = 0; (await metric(nodes[n].ready.admin, 'chanq_relay_peers_up')) < 2; i++) {
        assert.ok(i < 3000, `node ${n} never saw its peers`);
        await sleep(10);
      }
    }
  });

  after(async () => {
    for (const c of clients)
      c.disconnect();
    for (const n of nodes.filter(Boolean))
      await n.stop();
    if (natsDir)
      support('nats', ['stop', natsDir]);
    if (zkBase)
      support('zk', ['stop', zkBase]);
    if (dir)
      rmSync(dir, { recursive: true, force: true });
  });

  test('it authenticates and subscribes again on node 2, and receives again', async (t) => {
    if (unavailable) {
      t.skip(unavailable);
      return;
    }
    const server = new ChanqClient();
    clients.push(server);
    await server.connect(`tcp://${nodes[1].ready.server}`);
    await server.auth('server', '');
    const { channelId: ch } = await server.createChannel(ChannelType.SUBWORLD, 'move');
    assert.equal(ch >>> 12, 1); // a channel of node 1

    const ws = (n) => `ws://${nodes[n].ready.ws}/`;
    const mover = new ChanqClient();
    clients.push(mover);
    await mover.connect([ws(3), ws(2)]);
    const { connId: id3 } = await mover.auth('pit', 'lt');
    assert.equal(id3 >>> 27, 3); // ids carry their node (--relay-node-bits 4)
    const first = await mover.subToChannel(ch, { dataAccess: 1, fanOutIntervalMs: 40, dataFieldMasks: ['name'] });
    assert.equal(first.connId, id3);
    assert.deepEqual(mover.ownSubscriptions.get(ch), { options: first.subOptions, channelType: ChannelType.SUBWORLD });
    const bc = BroadcastType.ALL | BroadcastType.ALL_BUT_SENDER;
    const before = userMessage(mover, 150);
    server.sendForward(ch, bc, 150, 0, 'before');
    assert.equal(await before, 'before');

    const moved = mover.waitFor('moved', undefined, 30000);
    const again = mover.waitFor('subscribed', (e) => e.channelId === ch && e.connId !== id3, 30000);
    const ticked = mover.waitFor('userMessage', (e) => e.msgType === 160, 30000);
    const t0 = performance.now();
    nodes[3].proc.kill('SIGKILL');
    let received = false;
    ticked.then(() => {
      received = true;
    }, () => {});
    for (let k = 0; !received; k++) {
      assert.ok(performance.now() - t0 < 30000, 'no broadcast reached the moved client');
      server.sendForward(ch, bc, 160, 0, `tick-${k}`);
      await sleep(TICK_MS);
    }
    const dt = performance.now() - t0;
    const ev = await moved;
    const sub = await again;
    console.log(`node 3 killed: the JS client received a broadcast (one every ${TICK_MS} ms) again after ${dt.toFixed(0)} ms`);
    assert.equal(ev.from, ws(3));
    assert.equal(ev.to, ws(2));
    assert.equal(ev.oldConnId, id3);
    assert.equal(ev.connId >>> 27, 2);
    assert.equal(ev.resubscribed, 1);
    assert.equal(ev.tries, 1);
    assert.equal(mover.connId, ev.connId);
    assert.equal(sub.connId, ev.connId);
    assert.deepEqual(sub.subOptions, first.subOptions);
    assert.match(Buffer.from((await ticked).payload).toString(), /^tick-\d+$/);
    const last = userMessage(mover, 161);
    server.sendForward(ch, bc, 161, 0, 'after-move');
    assert.equal(await last, 'after-move');
  });
});
