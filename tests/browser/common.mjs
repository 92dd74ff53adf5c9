// What the browser tests share: where things are, the chanqd under test (env CHANQD) and
// Debian's chromium, and the set-up every test's before() starts with.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync } from 'node:fs';
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
