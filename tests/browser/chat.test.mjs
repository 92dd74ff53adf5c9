// Browser test of the chat-rooms demo (clients/js/demo): Debian's chromium, driven by
// playwright-core, opens the page over https in two browser contexts against a real chanqd
// (env CHANQD) with wss, a generated certificate and the chat descriptor set. Both join, each
// sees the other's Lobby messages, then a room made by one is joined by the other; when its
// creator leaves, the room goes and the Lobby keeps working.
// Screenshots go to $CHANQ_ARTIFACTS (default: a new temp dir); their paths are printed.
// Run it with tests/browser/run.sh, which installs the npm packages and builds the demo.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { makeCert, startChanqd } from '../../clients/js/test/server.js';
import { BIN, CHROMIUM, WAIT, jsDir, prepare, repo, skip } from './common.mjs';

const webRoot = join(jsDir, 'dist', 'demo');

let srv;
let browser;
let baseUrl;
const pageErrors = [];
let failed = false;

before(async () => {
  if (skip)
    return;
  // chanqd serves the page and the wss endpoint itself; there is no stand-in for either.
  const { dir, fds } = prepare(webRoot, 'chanq-browser-', 'chat.proto', ['wss-addr', 'web-root']);
  const { cert, key } = makeCert(dir);
  const args = ['--channel-data-types', fds, '--wss-addr', '127.0.0.1:0', '--tls-cert', cert,
    '--tls-key', key, '--web-root', webRoot];
  srv = await startChanqd(BIN, args, { dir });
  assert.ok(srv.ready.wss, 'the ready file has no wss address');
  baseUrl = `https://${srv.ready.wss}/`;
  const { chromium } = createRequire(join(jsDir, 'package.json'))('playwright-core');
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--ignore-certificate-errors'],
  });
});

after(async () => {
  await browser?.close();
  if (srv) {
    if (failed)
      console.log(`chanqd log:\n${srv.log()}`);
    await srv.stop();
  }
});

async function openChat(nick) {
  const ctx = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 900, height: 600 } });
  const page = await ctx.newPage();
  page.on('pageerror', (err) => pageErrors.push(`${nick}: ${err.message}`));
  page.on('console', (msg) => msg.type() === 'error' && pageErrors.push(`${nick}: ${msg.text()}`));
  await page.goto(baseUrl);
  await page.fill('#nick', nick);
  await page.click('#login button');
  await page.waitForSelector('#status.online', WAIT);
  await page.waitForSelector('#chat:not([hidden])', WAIT);
  assert.match(await page.textContent('#status'), new RegExp(`^${nick} · conn \\d+$`));
  return page;
}

async function say(page, text) {
  await page.fill('#text', text);
  await page.press('#text', 'Enter');
}

// Waits until the open room shows a message with this content; returns [sender, content].
async function seen(page, text) {
  const li = page.locator('#messages li', { hasText: text });
  await li.first().waitFor(WAIT);
  return [await li.first().locator('.sender').textContent(), await li.first().locator('.content').textContent()];
}

function artifactsDir() {
  const d = process.env.CHANQ_ARTIFACTS || mkdtempSync(join(tmpdir(), 'chanq-artifacts-'));
  mkdirSync(d, { recursive: true });
  return d;
}

test('two browsers chat in the Lobby and in a new room', { skip }, async () => {
  try {
    await chat();
  } catch (err) {
    failed = true;
    throw err;
  }
});

async function chat() {
  const alice = await openChat('alice');
  const bob = await openChat('bob');
  assert.equal(await alice.textContent('#room-title'), 'Lobby');
  assert.equal(await bob.textContent('#room-title'), 'Lobby');

  await say(alice, 'hello from alice');
  assert.deepEqual(await seen(bob, 'hello from alice'), ['alice', 'hello from alice']);
  await say(bob, 'hi alice');
  assert.deepEqual(await seen(alice, 'hi alice'), ['bob', 'hi alice']);
  // Each page also shows its own message, as merged by chanqd, marked as its own.
  await seen(alice, 'hello from alice');
  assert.equal(await alice.locator('#messages li.mine').count(), 1);
  assert.equal(await bob.locator('#messages li').count(), 2);

  // alice creates a room; bob finds it in the list and joins it.
  await alice.fill('#room-name', 'games');
  await alice.press('#room-name', 'Enter');
  await alice.waitForFunction(() => document.querySelector('#room-title').textContent === 'games', null, WAIT);
  await bob.click('#refresh');
  const entry = bob.locator('#rooms li', { hasText: 'games' });
  await entry.waitFor(WAIT);
  await entry.click();
  await bob.waitForFunction(() => document.querySelector('#room-title').textContent === 'games', null, WAIT);
  await say(alice, 'anyone for chess?');
  assert.deepEqual(await seen(bob, 'anyone for chess?'), ['alice', 'anyone for chess?']);
  await say(bob, 'me!');
  assert.deepEqual(await seen(alice, 'me!'), ['bob', 'me!']);
  assert.equal(await bob.locator('#messages li', { hasText: 'hello from alice' }).count(), 0,
    'rooms keep their own message lists');

  const dir = artifactsDir();
  for (const [name, page] of [['alice', alice], ['bob', bob]]) {
    const file = join(dir, `chat-${name}.png`);
    await page.screenshot({ path: file });
    console.log(`screenshot: ${file}`);
  }

  // alice leaves: her room goes (its owner left) and bob is back in the Lobby, which keeps its
  // messages and still takes new ones (bob's page takes over the GLOBAL channel).
  await alice.context().close();
  await bob.waitForFunction(() => document.querySelector('#room-title').textContent === 'Lobby', null, WAIT);
  assert.match(await bob.textContent('#notice'), /games.*removed/);
  assert.equal(await bob.locator('#rooms li', { hasText: 'games' }).count(), 0);
  await say(bob, 'still here');
  assert.deepEqual(await seen(bob, 'still here'), ['bob', 'still here']);
  assert.deepEqual(await seen(bob, 'hello from alice'), ['alice', 'hello from alice']);
  const last = join(dir, 'chat-bob-after-alice-left.png');
  await bob.screenshot({ path: last });
  console.log(`screenshot: ${last}`);
  assert.deepEqual(pageErrors, []);
}
