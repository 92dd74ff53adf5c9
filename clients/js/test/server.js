// Starting a real chanqd for tests (the integration test here and tests/browser): a temp dir,
// listeners on 127.0.0.1 port 0, the ports read from the ready file, stopped by PID.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from './helpers.js';

/** chanqd's --help text ('' when it cannot run). */
export function chanqdHelp(bin) {
  try {
    return execFileSync(bin, ['--help'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    return String(err.stdout || '');
  }
}

export function hasFlag(help, flag) {
  return new RegExp(`(^|\\s)--${flag}\\b`, 'm').test(help);
}

export function haveTool(name) {
  try {
    execFileSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** A self-signed certificate for 127.0.0.1/localhost in dir: {cert, key} paths. */
export function makeCert(dir) {
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert,
    '-days', '2', '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost'],
  { stdio: 'ignore' });
  return { cert, key };
}

/** Builds a descriptor set of proto/<name>.proto with protoc-c; returns its path. */
export function buildFds(dir, protoPath, includeDir) {
  const out = join(dir, protoPath.replace(/.*\//, '').replace(/\.proto$/, '.fds'));
  execFileSync('protoc-c', ['--include_imports', `--descriptor_set_out=${out}`, '-I', includeDir, protoPath],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  return out;
}

function parseReady(text) {
  const out = {};
  for (const tok of text.trim().split(/\s+/)) {
    const i = tok.indexOf('=');
    if (i > 0 && tok.slice(i + 1) !== '-')
      out[tok.slice(0, i)] = tok.slice(i + 1);
  }
  return out;
}

// Listeners that may have a fixed default port (ws 12112, kcp 12108): off unless asked for, so
// parallel tests never collide. Only flags this chanqd knows are passed.
const OPTIONAL_LISTENERS = ['ws-addr', 'wss-addr', 'kcp-addr', 'server-ws-addr', 'server-kcp-addr'];

function optionalListenersOff(bin, extraArgs) {
  const help = chanqdHelp(bin);
  return OPTIONAL_LISTENERS.filter((f) => hasFlag(help, f) && !extraArgs.includes(`--${f}`))
    .flatMap((f) => [`--${f}`, '']);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Starts chanqd with the client, server (and given extra) listeners on port 0 and the
 * authoritative client FSM (clients may create channels, subscribe and update data).
 * Resolves {dir, ready: {client, server, ws?, wss?}, log(), stop()}.
 */
export async function startChanqd(bin, extraArgs = [], opts = {}) {
  const dir = opts.dir || mkdtempSync(join(tmpdir(), 'chanq-js-'));
  const readyPath = join(dir, 'ready');
  const logPath = join(dir, 'chanqd.log');
  const args = ['--client-addr', '127.0.0.1:0', '--server-addr', '127.0.0.1:0', '--admin-addr', '',
    '--mq-addr', '', '--mq-http-addr', '', '--store-dir', join(dir, 'store'), '--ready-file', readyPath,
    '--client-fsm', join(repoRoot, 'config', 'client_authoratative_fsm.json'), '--log-level', 'debug',
    ...optionalListenersOff(bin, extraArgs), ...extraArgs];
  const fd = openSync(logPath, 'w');
  const proc = spawn(bin, args, { stdio: ['ignore', fd, fd] });
  let exited = null;
  proc.on('exit', (code, sig) => {
    exited = sig || code;
  });
  const log = () => (existsSync(logPath) ? readFileSync(logPath, 'utf8') : '');
  const stop = async () => {
    if (exited === null) {
      proc.kill('SIGTERM');
      for (let i = 0; i < 100 && exited === null; i++)
        await sleep(50);
      if (exited === null)
        proc.kill('SIGKILL');
    }
    if (!opts.keep)
      rmSync(dir, { recursive: true, force: true });
  };
  // Startup is bounded so a chanqd that never listens fails the test instead of hanging it.
  for (let i = 0; i < 300 && !existsSync(readyPath); i++) {
    if (exited !== null)
      break;
    await sleep(50);
  }
  if (!existsSync(readyPath)) {
    const text = log();
    await stop();
    throw new Error(`chanqd did not start (exit ${exited}); args ${args.join(' ')}\n${text}`);
  }
  return { dir, ready: parseReady(readFileSync(readyPath, 'utf8')), log, stop, proc };
}
