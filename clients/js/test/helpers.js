// Shared test helpers: hex conversion, the §1.2 test vectors of channeld-protocol.md, a fake
// transport and the testpb channel data type.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** "43 48 00 0a" or with quoted ASCII ("..." pieces) -> Uint8Array. */
export function hex(text) {
  const out = [];
  for (const tok of text.match(/"[^"]*"|[0-9a-fA-F]{2}/g)) {
    if (tok.startsWith('"'))
      out.push(...Buffer.from(tok.slice(1, -1), 'latin1'));
    else
      out.push(parseInt(tok, 16));
  }
  return Uint8Array.from(out);
}

export function toHex(bytes) {
  return Buffer.from(bytes).toString('hex').replace(/(..)(?!$)/g, '$1 ');
}

export function concat(...parts) {
  const n = parts.reduce((s, p) => s + p.length, 0);
  const out = new Uint8Array(n);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

// The test vectors of channeld-protocol.md §1.2, header and body, byte for byte.
export const VEC = {
  authRequest: hex('43 48 00 14 00 0a 12 18 01 20 01 2a 0c 0a 04 74 65 73 74 12 04 74 65 73 74'),
  authResult: hex('43 48 00 0a 00 0a 08 18 01 20 01 2a 02 10 01'),
  subResult: hex('43 48 00 18 00 0a 16 20 06 2a 12 08 01 12 0a 08 01 18 14 20 00 28 01 30 00 18 02 20 01'),
  dataFanOut: hex('43 48 00 44 00 0a 42 08 05 20 08 2a 3c 0a 3a 0a 31 ' +
    '"type.googleapis.com/testpb.TestChannelDataMessage" 12 05 0a 01 61 10 01'),
  userMsg: hex('43 48 00 0c 00 0a 0a 20 64 2a 06 08 07 12 02 68 69'),
  recoveryEnd: hex('43 48 00 04 00 0a 02 20 15'),
  subOptionsDelayMinus1: hex('20 ff ff ff ff ff ff ff ff ff 01'),
};

/** testpb.TestChannelDataMessage from tests/data/testpb.proto, parsed at run time. */
export function testpbRoot() {
  return protobuf.loadSync(join(repoRoot, 'tests', 'data', 'testpb.proto'));
}

/** A transport that records what the client sends and lets the test inject bytes. */
export function fakeTransport() {
  const t = {
    sent: [],
    closedBy: null,
    onbytes: null,
    onclose: null,
    send(bytes) {
      t.sent.push(Uint8Array.from(bytes));
    },
    close() {
      if (t.closedBy === null) {
        t.closedBy = 'client';
        t.onclose?.('closed by the client');
      }
    },
    feed(bytes) {
      t.onbytes(bytes);
    },
  };
  return t;
}

/** Resolves after pending microtasks (the client flushes queued messages in one). */
export function tick() {
  return new Promise((resolve) => setImmediate(resolve));
}
