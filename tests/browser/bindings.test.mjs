// Browser test of the console's Bindings view (src/mgr/console, doc/mgr.md "Console"): a real
// `chanqd --role mgr` (env CHANQD; file state) and one chanqd it manages (SQLite, --mgr-servers).
// Debian's chromium (playwright-core) drives the page:
//   - before any save the view says the servers use their own --bridge-file;
//   - a bad document is refused with the manager's exact message under the editor (the bindings
//     parser's; for bad JSON its line and column), and nothing changes;
//   - the first save asks to confirm (it replaces every server's file bindings); saved, the table
//     shows each binding and the managed server applies the version;
//   - a save that removes a binding asks to confirm, naming it; dismissed, nothing is sent;
//   - what the operator types survives the page's polls; "Discard changes" brings the saved
//     document back;
//   - the audit view lists the saves; the manager exits 0 on SIGTERM.
// Run it with tests/browser/run.sh (TESTS=bindings for this one alone).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { CHROMIUM, WAIT, jsDir, skip, sleep, startChanqd } from './common.mjs';

const ADMIN_TOKEN = 'bindings-test-admin-token-0123456789';
let dir;
let browser;
let failed = false;
const procs = {}; // name -> {proc, ready, log(), exited()}
const pageErrors = [];

async function start(name, args) {
  procs[name] = await startChanqd(dir, name, args);
  return procs[name];
}

async function api(method, path) {
  const res = await fetch(`http://${procs.mgr.ready.http}${path}`,
    { method, headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } });
  const data = await res.json();
  assert.equal(res.status, 200, `${method} ${path}: ${JSON.stringify(data)}`);
  return data;
}

before(async () => {
  if (skip)
    return;
  dir = mkdtempSync(join(tmpdir(), 'chanq-bindings-'));
  const { chromium } = createRequire(join(jsDir, 'package.json'))('playwright-core');
  const launching = chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] })
    .then((b) => { browser = b; });
  try {
    writeFileSync(join(dir, 'admin.token'), ADMIN_TOKEN + '\n', { mode: 0o600 });
    writeFileSync(join(dir, 'server.token'), 'bindings-test-server-secret\n', { mode: 0o600 });
    const mgr = await start('mgr', ['--role', 'mgr', '--mgr-addr', '127.0.0.1:0', '--mgr-http-addr',
      '127.0.0.1:0', '--admin-addr', '127.0.0.1:0', '--mgr-state-file', join(dir, 'state.json'),
      '--mgr-audit-log', join(dir, 'audit.log'), '--mgr-admin-token-file', join(dir, 'admin.token'),
      '--mgr-token-file', join(dir, 'server.token')]);
    await start('srv', ['--client-addr', '127.0.0.1:0', '--server-addr', '127.0.0.1:0',
      '--admin-addr', '127.0.0.1:0', '--mq-addr', '127.0.0.1:0', '--mq-http-addr', '',
      '--ws-addr', '', '--kcp-addr', '', '--store-backend', 'sqlite', '--store-dir', join(dir, 'data'),
      '--appid', '41', '--mgr-servers', mgr.ready.mgr, '--mgr-token-file', join(dir, 'server.token'),
      '--mgr-report-ms', '300']);
    await launching;
  } catch (err) {
    failed = true;
    await launching.catch(() => {});
    throw err;
  }
});

after(async () => {
  await browser?.close();
  const exits = {};
  for (const [name, p] of Object.entries(procs)) {
    if (p.exited() === null)
      p.proc.kill('SIGTERM');
    for (let i = 0; i < 300 && p.exited() === null; i++) // a safety stop: 15 s
      await sleep(50);
    exits[name] = p.exited();
    if (exits[name] === null)
      p.proc.kill('SIGKILL');
    if (failed || exits[name] !== 0)
      console.log(`${name} (exit ${exits[name]}) log:\n${p.log().slice(-5000)}`);
  }
  if (dir && !failed && Object.values(exits).every((e) => e === 0))
    rmSync(dir, { recursive: true, force: true });
  if (procs.mgr)
    assert.equal(exits.mgr, 0, 'the manager exits 0 on SIGTERM');
});

test('the console: the Bindings view', { skip }, async () => {
  try {
    await bindingsPage();
  } catch (err) {
    failed = true;
    throw err;
  }
});

const waitText = (page, id, want) => page.waitForFunction(([i, w]) => {
  const e = document.querySelector(`[data-testid="${i}"]`);
  return e && e.textContent === w;
}, [id, want], WAIT);

async function save(page, dialogs, answer) {
  dialogs.answer = answer;
  await page.click('[data-testid="bindings-save"]');
}

async function bindingsPage() {
  const ctx = await browser.newContext({ viewport: { width: 1300, height: 900 } });
  const page = await ctx.newPage();
  page.on('pageerror', (err) => pageErrors.push(err.message));
  // Only the refused saves may fail (400), and the browser's own favicon request.
  page.on('response', (r) => {
    const u = new URL(r.url());
    const refused = u.pathname === '/api/bindings' && r.status() === 400;
    if (r.status() >= 400 && u.pathname !== '/favicon.ico' && !refused)
      pageErrors.push(`${r.status()} ${r.request().method()} ${u.pathname}`);
  });
  const dialogs = { seen: [], answer: null };
  page.on('dialog', async (d) => {
    dialogs.seen.push(d.message());
    if (dialogs.answer)
      await d.accept();
    else
      await d.dismiss();
  });
  await page.goto(`http://${procs.mgr.ready.http}/`);
  await page.fill('[data-testid="login-token"]', ADMIN_TOKEN);
  await page.click('[data-testid="login-submit"]');
  await page.waitForSelector('[data-testid="shards-view"]:not([hidden])', WAIT);
  await page.click('[data-testid="nav-bindings"]');
  await page.waitForSelector('[data-testid="bindings-view"]:not([hidden])', WAIT);
  await waitText(page, 'bindings-managed', 'Not managed: each server uses its own --bridge-file. ' +
    'The first save makes these bindings the only ones on every server of this manager.');
  assert.equal(await page.inputValue('[data-testid="bindings-editor"]'), '{\n  "bindings": []\n}');

  // Refused: the parser's message under the editor, nothing saved.
  await page.fill('[data-testid="bindings-editor"]',
    '{"bindings": [{"topic": "vip", "route": "user_id", "msg_type": 99}]}');
  await save(page, dialogs, true);
  await waitText(page, 'bindings-error', 'binding 0: "msg_type" must be an integer from 100 to 65535');
  assert.equal(dialogs.seen.length, 1); // the first save's question, even for a refused one
  assert.match(dialogs.seen[0], /^The first save replaces the --bridge-file bindings of every server/);
  await page.fill('[data-testid="bindings-editor"]', '{"bindings": [\n  {"topic": "vip",}\n]}');
  await save(page, dialogs, true);
  await waitText(page, 'bindings-error',
    "bindings: invalid JSON at line 2, column 19: string or '}' expected near '}'");
  assert.equal(dialogs.seen.length, 1); // not JSON: no question, the manager says what is wrong
  assert.deepEqual(await api('GET', '/api/bindings'), { bindings: [] });

  // The first save, confirmed: the table, the managed note, the server applies the version.
  const two = { bindings: [{ topic: 'vip', route: 'user_id', msg_type: 201 },
    { topic: 'release', broadcast: 'global', msg_type: 200 }] };
  await page.fill('[data-testid="bindings-editor"]', JSON.stringify(two, null, 2));
  await save(page, dialogs, true);
  await waitText(page, 'binding-topic-1', 'release');
  assert.equal(dialogs.seen.length, 2);
  await waitText(page, 'bindings-error', '');
  assert.equal(await page.locator('[data-testid="bindings-error"]').isHidden(), true);
  await waitText(page, 'binding-target-0', 'route user_id');
  await waitText(page, 'binding-msgtype-0', '201');
  await waitText(page, 'binding-target-1', 'broadcast global');
  await waitText(page, 'bindings-managed', 'Managed: 2 bindings in force on every server of this ' +
    'manager (their --bridge-file is no longer read).');
  assert.deepEqual(await api('GET', '/api/bindings'), two);
  const version = (await api('GET', '/api/state')).version;
  for (let i = 0; i < 100; i++) { // a safety stop: 10 s
    const s = (await api('GET', '/api/state')).servers.find((x) => x.appid === 41);
    if (s && s.config_version === version)
      break;
    await sleep(100);
  }
  const srv = (await api('GET', '/api/state')).servers.find((x) => x.appid === 41);
  assert.equal(srv?.config_version, version, 'the managed server applied the bindings');
  assert.match(procs.srv.log(), /2 bindings from the manager/);

  // Removing one asks first, naming it; dismissed, nothing is sent and the edit stays.
  const one = { bindings: [two.bindings[1]] };
  await page.fill('[data-testid="bindings-editor"]', JSON.stringify(one));
  await save(page, dialogs, false);
  for (let i = 0; i < 100 && dialogs.seen.length < 3; i++)
    await sleep(50);
  assert.equal(dialogs.seen[2], 'Remove 1 binding (vip \u2192 route user_id)? Their events are no ' +
    'longer delivered. Save?');
  await sleep(1500); // the page polls every second: the operator's text stays
  assert.equal(await page.inputValue('[data-testid="bindings-editor"]'), JSON.stringify(one));
  assert.deepEqual(await api('GET', '/api/bindings'), two);
  // Discard brings the saved document back; confirmed, the removal is saved.
  await page.click('[data-testid="bindings-reset"]');
  assert.equal(await page.inputValue('[data-testid="bindings-editor"]'), JSON.stringify(two, null, 2));
  await page.fill('[data-testid="bindings-editor"]', JSON.stringify(one));
  await save(page, dialogs, true);
  await waitText(page, 'binding-topic-0', 'release');
  await page.waitForFunction(() => !document.querySelector('[data-testid="binding-row-1"]'), null, WAIT);
  assert.equal(dialogs.seen.length, 4);
  assert.deepEqual(await api('GET', '/api/bindings'), one);

  // The audit view: the saves, the refused ones too.
  await page.click('[data-testid="nav-audit"]');
  await page.waitForSelector('[data-testid="audit-row-0"]', WAIT);
  const rows = await page.$$eval('[data-testid^="audit-action-"]', (es) => es.map((e) => e.textContent));
  const results = await page.$$eval('[data-testid^="audit-result-"]', (es) => es.map((e) => e.textContent));
  assert.deepEqual(rows.slice(0, 4), ['bindings.put', 'bindings.put', 'bindings.put', 'bindings.put']);
  assert.deepEqual(results.slice(0, 4), ['ok', 'ok',
    "bindings: invalid JSON at line 2, column 19: string or '}' expected near '}'",
    'binding 0: "msg_type" must be an integer from 100 to 65535']);
  assert.deepEqual(pageErrors, []);
  await ctx.close();
}
