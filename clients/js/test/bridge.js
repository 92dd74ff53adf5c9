// Test stand-in for chanqd's WebSocket listener, for a chanqd that has no --ws-addr/--wss-addr
// (or no --web-root) yet: one HTTP(S) port that serves static files on plain GETs and relays each
// WebSocket connection byte for byte to chanqd's TCP client listener. TCP reads are relayed as
// they come, so packets reach the client split and coalesced at random across WebSocket
// messages, which the client must reassemble.
import { createReadStream, existsSync, readFileSync, statSync } from 'node:fs';
import { createServer as createHttp } from 'node:http';
import { createServer as createHttps } from 'node:https';
import { connect } from 'node:net';
import { extname, join, normalize, sep } from 'node:path';
import { WebSocketServer } from 'ws';

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.map': 'application/json' };

function serveFile(root, req, res) {
  if (!root || req.method !== 'GET') {
    res.writeHead(root ? 405 : 404).end();
    return;
  }
  let file = normalize(join(root, decodeURIComponent(new URL(req.url, 'http://x').pathname)));
  if (file !== root && !file.startsWith(root + sep)) {
    res.writeHead(403).end();
    return;
  }
  if (existsSync(file) && statSync(file).isDirectory())
    file = join(file, 'index.html');
  if (!existsSync(file)) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { 'content-type': TYPES[extname(file)] || 'application/octet-stream' });
  createReadStream(file).pipe(res);
}

/**
 * Starts the bridge on 127.0.0.1 at a free port. opts: {chanqd: 'host:port' of the TCP client
 * listener, webRoot?: directory to serve, cert?/key?: PEM paths for HTTPS (else plain HTTP)}.
 * Resolves {port, close()}.
 */
export async function startBridge(opts) {
  const root = opts.webRoot ? normalize(opts.webRoot) : null;
  const handler = (req, res) => serveFile(root, req, res);
  const server = opts.cert
    ? createHttps({ cert: readFileSync(opts.cert), key: readFileSync(opts.key) }, handler)
    : createHttp(handler);
  const wss = new WebSocketServer({ server });
  const [host, port] = opts.chanqd.split(':');
  wss.on('connection', (ws) => {
    const tcp = connect({ host, port: Number(port) });
    tcp.on('data', (buf) => ws.send(buf, { binary: true }));
    tcp.on('close', () => ws.close());
    tcp.on('error', () => ws.close());
    ws.on('message', (data) => tcp.write(data));
    ws.on('close', () => tcp.destroy());
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: server.address().port,
    close: () => new Promise((resolve) => {
      for (const c of wss.clients)
        c.terminate();
      wss.close();
      server.close(() => resolve());
    }),
  };
}
