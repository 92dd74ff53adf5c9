// Byte-stream transports under the client. Each one delivers received bytes in arbitrary pieces
// (the client reassembles packets like a TCP stream) and sends one packet per send() call.
//
//   ws://, wss://   WebSocket, binary messages: the browser's WebSocket, or the npm `ws` package
//                   in Node (which has no global WebSocket before Node 22).
//   tcp://host:port Node only: a plain TCP connection to chanqd's client or server listener.
//
// A transport is {send(bytes), close(), onbytes, onclose}; onclose(reason) fires once.

/**
 * Opens a transport to url. opts.ws: options passed to the `ws` package in Node (for example
 * {rejectUnauthorized: false} for a test certificate). opts.WebSocket: a WebSocket class to use.
 */
export async function openTransport(url, opts = {}) {
  const scheme = url.slice(0, url.indexOf(':')).toLowerCase();
  if (scheme === 'ws' || scheme === 'wss')
    return openWebSocket(url, opts);
  if (scheme === 'tcp')
    return openTcp(url);
  throw new Error(`unsupported URL scheme in ${url} (ws:, wss:, or tcp: in Node)`);
}

async function webSocketClass(opts) {
  if (opts.WebSocket)
    return { WS: opts.WebSocket, node: false };
  if (typeof globalThis.WebSocket === 'function' && !opts.ws)
    return { WS: globalThis.WebSocket, node: false };
  const mod = await import(/* webpackIgnore: true */ 'ws');
  return { WS: mod.WebSocket || mod.default, node: true };
}

// The object a transport returns ({onbytes, onclose, send, close}) and its finish(reason),
// which calls onclose once, whatever ends the connection first.
function transportShell() {
  const t = { onbytes: null, onclose: null };
  let closed = false;
  const finish = (reason) => {
    if (closed)
      return;
    closed = true;
    if (t.onclose)
      t.onclose(reason);
  };
  return { t, finish };
}

async function openWebSocket(url, opts) {
  const { WS, node } = await webSocketClass(opts);
  const sock = node ? new WS(url, opts.ws || {}) : new WS(url);
  sock.binaryType = 'arraybuffer';
  const { t, finish } = transportShell();
  await new Promise((resolve, reject) => {
    sock.onopen = () => resolve();
    sock.onerror = (ev) => reject(new Error(`WebSocket ${url}: ${ev?.message || 'connection failed'}`));
    sock.onclose = (ev) => reject(new Error(`WebSocket ${url} closed (${ev?.code ?? '?'})`));
  });
  sock.onmessage = (ev) => {
    if (typeof ev.data === 'string') {
      sock.close(1003, 'text frames are not part of the protocol');
      finish('text frame received');
      return;
    }
    if (t.onbytes)
      t.onbytes(toBytes(ev.data));
  };
  sock.onerror = (ev) => finish(`WebSocket error: ${ev?.message || 'unknown'}`);
  sock.onclose = (ev) => finish(`WebSocket closed (${ev.code}${ev.reason ? ` ${ev.reason}` : ''})`);
  t.send = (bytes) => sock.send(bytes);
  t.close = () => {
    sock.close(1000);
    finish('closed by the client');
  };
  return t;
}

// WebSocket data: ArrayBuffer (browser, binaryType arraybuffer), Buffer or Buffer[] (ws).
function toBytes(data) {
  if (data instanceof ArrayBuffer)
    return new Uint8Array(data);
  if (Array.isArray(data)) {
    const n = data.reduce((s, b) => s + b.length, 0);
    const out = new Uint8Array(n);
    let off = 0;
    for (const b of data) {
      out.set(b, off);
      off += b.length;
    }
    return out;
  }
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

async function openTcp(url) {
  const net = await import(/* webpackIgnore: true */ 'node:net');
  const u = new URL(url);
  const sock = net.connect({ host: u.hostname, port: Number(u.port) });
  sock.setNoDelay(true);
  await new Promise((resolve, reject) => {
    sock.once('connect', resolve);
    sock.once('error', reject);
  });
  const { t, finish } = transportShell();
  sock.on('data', (buf) => t.onbytes && t.onbytes(new Uint8Array(buf.buffer, buf.byteOffset, buf.length)));
  sock.on('error', (err) => finish(`TCP error: ${err.message}`));
  sock.on('close', () => finish('TCP connection closed'));
  t.send = (bytes) => sock.write(bytes);
  t.close = () => {
    sock.destroy();
    finish('closed by the client');
  };
  return t;
}
