// Browser test of the spatial world (clients/js/world): a real chanqd (env CHANQD) with --dev,
// the 4x1 layout and its Handover section (config/spatial_world_4x1.json), the world
// descriptor set and the page on its ws listener; the world bots (clients/js/world/bots.mjs)
// run in this process: 2 spatial servers, 8 entities, the player pinned at (-1500, 0, 0) with
// a sphere interest of radius 2500. Debian's chromium (playwright-core) opens the page and the
// test reads back window.__world:
//   - the map: 4 regions, 2 servers, each cell's bounds and server by §4.2;
//   - the interest, from the page's SUB results: §4.4's worked example (centre (-1500, 0, 0),
//     r 2500 -> distances 0, 1, 2, 2) damped to 20, 50, 100, 100 ms;
//   - the entities: all 8 drawn, the wandering ones move between two samples, the player not;
//   - a handover: the page counts CHANNEL_DATA_HANDOVERs; each is between neighbouring cells and
//     names entities, and the bots' servers saw the same (src, dst).
// Screenshots go to $CHANQ_ARTIFACTS (default: a new temp dir). Run it with tests/browser/run.sh.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { startChanqd } from '../../clients/js/test/server.js';
import { BIN, CHROMIUM, WAIT, jsDir, prepare, repo, skip } from './common.mjs';
import { runBots } from '../../clients/js/world/bots.mjs';

const webRoot = join(jsDir, 'dist', 'world');
const ENTITIES = 8;
const PLAYER = 0x80000;

let srv;
let bots;
let browser;
let baseUrl;
const pageErrors = [];
let failed = false;

before(async () => {
  if (skip)
    return;
  const { dir, fds } = prepare(webRoot, 'chanq-world-', 'world.proto',
    ['ws-addr', 'web-root', 'spatial-settings']);
  const args = ['--dev', '--spatial-settings', join(repo, 'config', 'spatial_world_4x1.json'),
    '--channel-data-types', fds, '--ws-addr', '127.0.0.1:0', '--web-root', webRoot];
  srv = await startChanqd(BIN, args, { dir });
  assert.ok(srv.ready.ws, 'the ready file has no ws address');
  baseUrl = `http://${srv.ready.ws}/`;
  bots = await runBots({ url: `tcp://${srv.ready.server}`, entities: ENTITIES, speed: 400, seed: 7,
    radius: 2500, playerAt: [-1500, 0] });
  const { chromium } = createRequire(join(jsDir, 'package.json'))('playwright-core');
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
});

after(async () => {
  await browser?.close();
  bots?.stop();
  if (srv) {
    if (failed)
      console.log(`chanqd log:\n${srv.log()}`);
    await srv.stop();
  }
});

function artifactsDir() {
  const d = process.env.CHANQ_ARTIFACTS || mkdtempSync(join(tmpdir(), 'chanq-artifacts-'));
  mkdirSync(d, { recursive: true });
  return d;
}

async function shot(page, name) {
  const file = join(artifactsDir(), `world-${name}.png`);
  await page.screenshot({ path: file });
  console.log(`screenshot: ${file}`);
}

test('the browser world shows the grid, the interest, moving entities and a handover', { skip }, async () => {
  try {
    await worldPage();
  } catch (err) {
    failed = true;
    throw err;
  }
});

async function worldPage() {
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 700 } });
  const page = await ctx.newPage();
  page.on('pageerror', (err) => pageErrors.push(err.message));
  page.on('console', (msg) => msg.type() === 'error' && pageErrors.push(msg.text()));
  await page.goto(baseUrl);
  await page.waitForSelector('#status.online', WAIT);

  // The map: §4.2 regions of the 4x1 layout (offset (-2000, -500), 1000x1000 cells, 2x1 servers).
  await page.waitForFunction(() => window.__world.ready, null, WAIT);
  const regions = await page.evaluate(() => window.__world.regions.map((r) => [r.channelId, r.serverIndex, r.minX, r.minZ, r.maxX, r.maxZ]));
  assert.deepEqual(regions, [
    [65536, 0, -2000, -500, -1000, 500],
    [65537, 0, -1000, -500, 0, 500],
    [65538, 1, 0, -500, 1000, 500],
    [65539, 1, 1000, -500, 2000, 500],
  ]);
  assert.equal(await page.evaluate(() => window.__world.servers), 2);

  // The player and its interest, from the SUB results chanqd sent the page.
  await page.waitForFunction((p) => window.__world.player === p, PLAYER, WAIT);
  await page.waitForFunction(() => Object.keys(window.__world.interest).length === 4, null, WAIT);
  assert.deepEqual(await page.evaluate(() => window.__world.interest),
    { 65536: 20, 65537: 50, 65538: 100, 65539: 100 });

  // Entities: every one is drawn; the wanderers move, the pinned player does not.
  await page.waitForFunction((n) => Object.values(window.__world.entities).filter((e) => e.updates > 0).length === n,
    ENTITIES, WAIT);
  const ids = await page.evaluate(() => Object.keys(window.__world.entities).map(Number).sort((a, b) => a - b));
  assert.deepEqual(ids, Array.from({ length: ENTITIES }, (_, i) => PLAYER + i));
  const sample = () => page.evaluate(() => Object.fromEntries(Object.entries(window.__world.entities).map(([id, e]) => [id, [e.x, e.z, e.seq]])));
  const first = await sample();
  await page.waitForFunction((s) => Object.entries(window.__world.entities)
    .filter(([id]) => Number(id) !== 0x80000)
    .every(([id, e]) => e.seq > s[id][2] && (e.x !== s[id][0] || e.z !== s[id][1])), first, WAIT);
  const second = await sample();
  assert.deepEqual(second[PLAYER].slice(0, 2), [-1500, 0], 'the player stays where it was pinned');
  assert.deepEqual(first[PLAYER].slice(0, 2), [-1500, 0]);
  assert.equal(await page.evaluate(() => window.__world.entities[0x80000].name), 'player');
  await shot(page, 'map');

  // A handover: between neighbouring cells, naming known entities, and seen by the bots too.
  await page.waitForFunction(() => window.__world.handoverCount > 0, null, { timeout: 60000 });
  const hs = await page.evaluate(() => window.__world.handovers);
  assert.ok(hs.length > 0);
  for (const h of hs) {
    assert.ok(h.src >= 65536 && h.src <= 65539 && h.dst >= 65536 && h.dst <= 65539, JSON.stringify(h));
    assert.equal(Math.abs(h.src - h.dst), 1, `a handover between neighbours: ${JSON.stringify(h)}`);
    assert.ok(h.ids.length > 0, `the handover names its entities: ${JSON.stringify(h)}`);
    for (const id of h.ids)
      assert.ok(id > PLAYER && id < PLAYER + ENTITIES, `entity ${id}`);
  }
  const botSaw = new Set(bots.state.handovers.map((h) => `${h.src}>${h.dst}`));
  assert.ok(botSaw.has(`${hs[0].src}>${hs[0].dst}`), `the bots saw ${hs[0].src} -> ${hs[0].dst}`);
  await shot(page, 'handover');
  assert.deepEqual(pageErrors, []);
  assert.deepEqual(await page.evaluate(() => window.__world.errors), []);
  assert.deepEqual(bots.state.errors, []);
  await ctx.close();
}
