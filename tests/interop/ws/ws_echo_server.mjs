// ws_echo_server.mjs - a WebSocket echo server on npm `ws`, the reference peer that
// ws_conformance.py is validated against (transports.md section 6: npm ws passes all cases).
//
// Usage: node ws_echo_server.mjs [--host 127.0.0.1] [--port 0] [--path /]
//                                [--cert cert.pem --key key.pem]
// Prints "ready <port>" on stdout once listening (wss when --cert/--key are given). Echoes
// every message with its type (text stays text, binary stays binary). Stops on SIGTERM/SIGINT.
//
// `ws` is resolved from $WS_NODE_DIR/node_modules when WS_NODE_DIR is set (an `npm install ws`
// done outside the repository), else from the usual node_modules lookup next to this file.
import { readFileSync } from 'node:fs';
import { createServer as createHttp } from 'node:http';
import { createServer as createHttps } from 'node:https';
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(
  process.env.WS_NODE_DIR ? path.join(process.env.WS_NODE_DIR, 'index.js') : import.meta.url,
);
const { WebSocketServer } = require('ws');

function parseArgs(argv) {
  const o = { host: '127.0.0.1', port: 0, path: '/', cert: '', key: '' };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    if (!(k in o) || i + 1 >= argv.length) {
      console.error(`usage: ws_echo_server.mjs [--host H] [--port P] [--path /] [--cert F --key F]`);
      process.exit(2);
    }
    o[k] = k === 'port' ? Number(argv[i + 1]) : argv[i + 1];
  }
  return o;
}

const opts = parseArgs(process.argv.slice(2));
const tls = opts.cert !== '' && opts.key !== '';
const server = tls
  ? createHttps({ cert: readFileSync(opts.cert), key: readFileSync(opts.key) })
  : createHttp();
// Plain requests without an upgrade get 426, as a ws-only endpoint should.
server.on('request', (req, res) => {
  res.writeHead(426, { 'Content-Type': 'text/plain', Connection: 'close' });
  res.end('Upgrade Required\n');
});

const wss = new WebSocketServer({ server, path: opts.path, perMessageDeflate: false });
wss.on('connection', (ws) => {
  ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
  ws.on('error', () => {}); // protocol errors close the socket; nothing to log
});

server.listen(opts.port, opts.host, () => {
  process.stdout.write(`ready ${server.address().port}\n`);
});

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    wss.close();
    server.close();
    process.exit(0);
  });
}
