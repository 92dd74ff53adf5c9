// Browser test of the chat demo's Announcements panel (clients/js/demo, issue 24): Debian's
// chromium, driven by playwright-core, opens the page against a real chanqd (env CHANQD) run
// with the demo's bindings file (config/demo_bridge.json: the durable topic "announcements"
// broadcast to GLOBAL as msg_type 200) and durable topics on. Messages are published over the
// MQ HTTP API, as a backend service would, and must show in the panel of every open page, in
// offset order, as text.
// Resume (doc/bridge.md "Resume"): the page keeps its TopicTracker's positions in localStorage
// (per nickname) and resumes after its SUB to GLOBAL, so a page closed, or navigated away, while
// events were published shows them once reopened in the same browser context, exactly once and
// in order, and none of what it showed before; a page with nothing stored shows only what is
// published after it opened; a stored position under another epoch shows the panel's notice.
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

// A page of the demo logged in as nick: a new page in ctx (a new browser context, so nothing
// stored, by default), or `page` itself loading the demo again. beforeLogin(page) runs once the
// page is loaded, before the login (the page restores its positions at the login).
async function openChat(nick, { ctx = null, page = null, beforeLogin = null } = {}) {
  if (!page) {
    ctx ||= await browser.newContext({ viewport: { width: 1100, height: 600 } });
    page = await ctx.newPage();
    page.on('pageerror', (err) => pageErrors.push(`${nick}: ${err.message}`));
    page.on('console', (msg) => msg.type() === 'error' && pageErrors.push(`${nick}: ${msg.text()}`));
  }
  await page.goto(baseUrl);
  if (beforeLogin)
    await beforeLogin(page);
  await page.fill('#nick', nick);
  await page.click('#login button');
  await page.waitForSelector('#status.online', WAIT);
  // Shown once the page's SUB to GLOBAL (the Lobby) was answered: it receives broadcasts.
  await page.waitForSelector('#chat:not([hidden])', WAIT);
  return page;
}

// The page's stored TopicTracker state (the demo's localStorage key for nick), parsed.
function stored(page, nick) {
  return page.evaluate((k) => JSON.parse(localStorage.getItem(k)), `chanq-demo:topics:${nick}`);
}

// The panel's notice line: [hidden, text].
function panelNotice(page) {
  return page.$eval('#announcements-notice', (p) => [p.hidden, p.textContent]);
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

test('announcements published over HTTP show in the demo panel; a reopened page resumes', { skip }, async () => {
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

  // bob's page is closed while o3 is published (his browser, the context, stays, and with it
  // the position his page stored: o2); alice, still open, gets it.
  const bobBrowser = bob.context();
  assert.deepEqual(await panelNotice(bob), [true, '']);
  const [{ shard, epoch }] = (await stored(bob, 'bob')).positions;
  assert.deepEqual((await stored(bob, 'bob')).positions,
    [{ topic: TOPIC, shard, epoch, offset: o2, channelId: 0 }]);
  await bob.close();
  const o3 = await publish('published while bob was away');
  const upTo3 = [...both, [o3, 'published while bob was away']];
  assert.deepEqual(await panelEndsWith(alice, 'published while bob was away'), upTo3);

  // bob comes back: a new page in the same context, a new connection that resumes from o2. It
  // shows o3, once, and nothing it showed before; then the live o4 after it.
  const bob2 = await openChat('bob', { ctx: bobBrowser });
  assert.deepEqual(await panelEndsWith(bob2, 'published while bob was away'),
    [[o3, 'published while bob was away']]);
  const o4 = await publish('published after bob came back');
  const bobAgain = [[o3, 'published while bob was away'], [o4, 'published after bob came back']];
  assert.deepEqual(await panelEndsWith(bob2, 'published after bob came back'), bobAgain);
  const upTo4 = [...upTo3, [o4, 'published after bob came back']];
  assert.deepEqual(await panelEndsWith(alice, 'published after bob came back'), upTo4);
  assert.deepEqual([...both, ...bobAgain], upTo4); // what bob saw, over both pages: alice's
  assert.deepEqual(await panelNotice(bob2), [true, '']);

  // alice's page goes to about:blank while o5 and o6 are published, then back to the demo.
  await alice.goto('about:blank');
  const o5 = await publish({ text: 'first while alice was away' });
  const o6 = await publish('second while alice was away');
  await openChat('alice', { page: alice });
  const aliceAgain = [[o5, 'first while alice was away'], [o6, 'second while alice was away']];
  assert.deepEqual(await panelEndsWith(alice, 'second while alice was away'), aliceAgain);
  assert.deepEqual(await panelNotice(alice), [true, '']);

  // carol has nothing stored: she opens after o1 to o6 and shows only what follows, o7.
  const carol = await openChat('carol');
  const o7 = await publish('published after carol came');
  assert.deepEqual(await panelEndsWith(carol, 'published after carol came'),
    [[o7, 'published after carol came']]);
  assert.deepEqual(await panelNotice(carol), [true, '']);
  assert.deepEqual(await panelEndsWith(bob2, 'published after carol came'),
    [...bobAgain, ...aliceAgain, [o7, 'published after carol came']]);

  // bob's stored position under another epoch (a history that may have been rewritten): the
  // resume is not recovered, the panel says so, o8 (published while he was away) is lost, and
  // the page goes on from the live position, which it stores.
  await bob2.close();
  const o8 = await publish('lost while bob was away');
  const bob3 = await openChat('bob', {
    ctx: bobBrowser,
    beforeLogin: (page) => page.evaluate((k) => {
      const s = JSON.parse(localStorage.getItem(k));
      s.positions[0].epoch += 1;
      localStorage.setItem(k, JSON.stringify(s));
    }, 'chanq-demo:topics:bob'),
  });
  await bob3.waitForSelector('#announcements-notice:not([hidden])', WAIT);
  assert.deepEqual(await panelNotice(bob3), [false, 'some announcements could not be recovered: '
    + `topic ${TOPIC}: epoch ${epoch + 1} is not the shard's (${epoch}): its history may have been rewritten`]);
  const o9 = await publish('published after the epoch changed');
  assert.deepEqual(await panelEndsWith(bob3, 'published after the epoch changed'),
    [[o9, 'published after the epoch changed']]);
  assert.deepEqual((await stored(bob3, 'bob')).positions,
    [{ topic: TOPIC, shard, epoch, offset: o9, channelId: 0 }]);
  assert.deepEqual(await panelEndsWith(alice, 'published after the epoch changed'), [...aliceAgain,
    [o7, 'published after carol came'], [o8, 'lost while bob was away'], [o9, 'published after the epoch changed']]);

  const dir = process.env.CHANQ_ARTIFACTS || mkdtempSync(join(tmpdir(), 'chanq-artifacts-'));
  mkdirSync(dir, { recursive: true });
  for (const [page, name] of [[alice, 'chat-announcements'], [bob3, 'chat-announcements-not-recovered']]) {
    const file = join(dir, `${name}.png`);
    await page.screenshot({ path: file });
    console.log(`screenshot: ${file}`);
  }
  assert.deepEqual(pageErrors, []);
}
