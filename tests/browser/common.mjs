// What the browser tests share: where things are, the chanqd under test (env CHANQD) and
// Debian's chromium, and the set-up every test's before() starts with.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildFds, chanqdHelp, hasFlag } from '../../clients/js/test/server.js';

export const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const jsDir = join(repo, 'clients', 'js');
export const BIN = process.env.CHANQD;
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
export const WAIT = { timeout: 20000 }; // upper bound for a page to show something, not a timing check
export const skip = !BIN ? 'CHANQD is not set'
  : !existsSync(CHROMIUM) ? `no chromium at ${CHROMIUM}` : false;

// Asserts the page in webRoot is built and that this chanqd has every --flag; returns a new temp
// dir (named after prefix) and the descriptor set of proto/<proto> built in it.
export function prepare(webRoot, prefix, proto, flags) {
  assert.ok(existsSync(join(webRoot, 'index.html')), `${webRoot} is not built (npm run build)`);
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const fds = buildFds(dir, join(repo, 'proto', proto), join(repo, 'proto'));
  const help = chanqdHelp(BIN);
  for (const flag of flags)
    assert.ok(hasFlag(help, flag), `this chanqd has no --${flag}`);
  return { dir, fds };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A ready line's "key=value ..." words as an object.
export function parseKv(line) {
  const out = {};
  for (const tok of line.trim().split(/\s+/)) {
    const i = tok.indexOf('=');
    if (i > 0)
      out[tok.slice(0, i)] = tok.slice(i + 1);
  }
  return out;
}

// Starts chanqd (BIN) with args plus --ready-file DIR/NAME.ready --log-level debug, its output in
// DIR/NAME.log, and waits for the ready file (a safety stop of 10 s). Returns {proc, ready (the
// ready line's words), log(), exited()}; throws with the log when it did not start.
export async function startChanqd(dir, name, args) {
  const ready = join(dir, `${name}.ready`);
  const logPath = join(dir, `${name}.log`);
  const proc = spawn(BIN, [...args, '--ready-file', ready, '--log-level', 'debug'],
    { stdio: ['ignore', openSync(logPath, 'w'), openSync(logPath, 'a')] });
  let exited = null;
  proc.on('exit', (c, s) => { exited = s || c; });
  const log = () => (existsSync(logPath) ? readFileSync(logPath, 'utf8') : '');
  for (let i = 0; i < 200 && !existsSync(ready) && exited === null; i++)
    await sleep(50);
  if (!existsSync(ready))
    throw new Error(`${name} did not start (exit ${exited}):\n${log()}`);
  return { proc, ready: parseKv(readFileSync(ready, 'utf8')), log, exited: () => exited };
}
