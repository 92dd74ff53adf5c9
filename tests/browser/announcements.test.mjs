// Browser test of the chat demo's Announcements panel (clients/js/demo, issue 24): Debian's
// chromium, driven by playwright-core, opens the page against a real chanqd (env CHANQD) run
// with the demo's bindings file (config/demo_bridge.json: the durable topic "announcements"
// broadcast to GLOBAL as msg_type 200) and durable topics on. Messages are published over the
// MQ HTTP API, as a backend service would, and must show in the panel of every open page, in
// offset order, as text.
// A page closed at publish time and reopened afterwards: resume is not built yet, so today it
// shows only what was published after it opened. The assertion marked RESUME is the one that
// changes when resume lands.
// Run it with tests/browser/run.sh, which installs the npm packages and builds the demo.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { startChanqd } from '../../clients/js/test/server.js';
import { BIN, CHROMIUM, WAIT, jsDir, prepare, repo, skip } from './common.mjs';

const webRoot = join(jsDir, 'dist', 'demo');
const TOPIC = 'announcements'; // config/demo_bridge.json

let srv;
let browser;
let baseUrl;
let mqHttp;
const pageErrors = [];
let failed = false;

before(async () => {
  if (skip)
    return;
  const { dir, fds } = prepare(webRoot, 'chanq-browser-', 'chat.proto',
    ['web-root', 'bridge-file', 'mq-http-addr']);
  // The demo's own bindings file, so the test sees what scripts/demo.sh sets up.
  const args = ['--channel-data-types', fds, '--ws-addr', '127.0.0.1:0', '--web-root', webRoot,
    '--mq-addr', '127.0.0.1:0', '--mq-http-addr', '127.0.0.1:0',
    '--bridge-file', join(repo, 'config', 'demo_bridge.json')];
  srv = await startChanqd(BIN, args, { dir });
  assert.ok(srv.ready.ws, 'the ready file has no ws address');
  assert.ok(srv.ready.mqhttp, 'the ready file has no mqhttp address');
  baseUrl = `http://${srv.ready.ws}/`;
  mqHttp = `http://${srv.ready.mqhttp}`;
  const { chromium } = createRequire(join(jsDir, 'package.json'))('playwright-core');
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
});

after(async () => {
  await browser?.close();
  if (srv) {
    if (failed)
      console.log(`chanqd log:\n${srv.log()}`);
    await srv.stop();
  }
});

// POSTs a JSON body to the MQ HTTP API; resolves {status, body (parsed)}.
async function post(path, body) {
  const res = await fetch(mqHttp + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

// Publishes one message; returns the offset the store acknowledged it at.
async function publish(content) {
  const r = await post(`/v1/topics/${TOPIC}/messages`, { content });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.offsets.length, 1);
  return r.body.offsets[0];
}

// A page of the demo in ctx (a new browser context by default), logged in as nick.
async function openChat(nick, ctx = null) {
  ctx ||= await browser.newContext({ viewport: { width: 1100, height: 600 } });
  const page = await ctx.newPage();
  page.on('pageerror', (err) => pageErrors.push(`${nick}: ${err.message}`));
  page.on('console', (msg) => msg.type() === 'error' && pageErrors.push(`${nick}: ${msg.text()}`));
  await page.goto(baseUrl);
  await page.fill('#nick', nick);
  await page.click('#login button');
  await page.waitForSelector('#status.online', WAIT);
  // Shown once the page's SUB to GLOBAL (the Lobby) was answered: it receives broadcasts.
  await page.waitForSelector('#chat:not([hidden])', WAIT);
  return page;
}

// Waits until the panel's last announcement is `text`; returns the panel as [offset, text] rows.
async function panelEndsWith(page, text) {
  await page.waitForFunction((t) => {
    const li = document.querySelector('#announcements li:last-child .content');
    return li !== null && li.textContent === t;
  }, text, WAIT);
  return page.$$eval('#announcements li', (lis) =>
    lis.map((li) => [Number(li.dataset.offset), li.querySelector('.content').textContent]));
}

test('announcements published over HTTP show in the demo panel; a reopened page', { skip }, async () => {
  try {
    await announcements();
  } catch (err) {
    failed = true;
    throw err;
  }
});

async function announcements() {
  // The topic must exist before it can be produced to (scripts/demo.sh creates it likewise).
  const created = await post('/v1/topics', { topic: TOPIC });
  assert.deepEqual(created, { status: 200, body: { topic: TOPIC, created: true } });

  const alice = await openChat('alice');
  const bob = await openChat('bob');
  assert.equal(await alice.locator('#announcements-panel h2').textContent(), 'Announcements');
  assert.equal(await alice.locator('#announcements li').count(), 0);

  // A JSON object shows its "text"; other text shows as it is, never as HTML.
  const html = '<b>not bold</b><img src=x onerror="window.__xss=1">';
  const o1 = await publish({ text: 'maintenance at 18:00' });
  const o2 = await publish(html);
  assert.ok(o2 > o1);
  const both = [[o1, 'maintenance at 18:00'], [o2, html]];
  assert.deepEqual(await panelEndsWith(alice, html), both);
  assert.deepEqual(await panelEndsWith(bob, html), both);
  assert.equal(await alice.locator('#announcements b, #announcements img').count(), 0);
  assert.equal(await alice.evaluate(() => window.__xss), undefined);

  // bob's page is closed while o3 is published (his browser, the context, stays: what a page
  // stores, such as a position, would survive); alice, still open, gets it.
  const bobBrowser = bob.context();
  await bob.close();
  const o3 = await publish('published while bob was away');
  assert.deepEqual(await panelEndsWith(alice, 'published while bob was away'),
    [...both, [o3, 'published while bob was away']]);

  // bob comes back: the page reopened in the same context, a new connection, subscribed to
  // GLOBAL again.
  const bob2 = await openChat('bob', bobBrowser);
  const o4 = await publish('published after bob came back');
  // RESUME (issue 24 §4, not built yet): today the reopened page shows only what was published
  // after it opened, o4; o3 was committed before bob2 subscribed and nothing replays it. When
  // resume lands (the page keeping its position where the context keeps it, and resuming from
  // o2), this becomes [[o3, 'published while bob was away'], [o4, 'published after bob came
  // back']]: this is the assertion to change then.
  assert.deepEqual(await panelEndsWith(bob2, 'published after bob came back'),
    [[o4, 'published after bob came back']]);
  assert.deepEqual(await panelEndsWith(alice, 'published after bob came back'),
    [...both, [o3, 'published while bob was away'], [o4, 'published after bob came back']]);

  const dir = process.env.CHANQ_ARTIFACTS || mkdtempSync(join(tmpdir(), 'chanq-artifacts-'));
  mkdirSync(dir, { recursive: true });
  const file = join(dir, 'chat-announcements.png');
  await alice.screenshot({ path: file });
  console.log(`screenshot: ${file}`);
  assert.deepEqual(pageErrors, []);
}
