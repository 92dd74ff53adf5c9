// Framing: header encoding, the bounded stream reader, and reassembly with every split.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FrameReader, FramingError, HEADER_SIZE, MAX_BODY_SIZE, encodeFrame } from '../src/framing.js';
import { VEC, concat, hex, toHex } from './helpers.js';

const ALL = [VEC.authRequest, VEC.authResult, VEC.subResult, VEC.dataFanOut, VEC.userMsg, VEC.recoveryEnd];
const STREAM = concat(...ALL);
const BODIES = ALL.map((f) => toHex(f.subarray(HEADER_SIZE)));

function readAll(pieces, opts) {
  const r = new FrameReader(opts);
  const out = [];
  for (const p of pieces)
    out.push(...r.push(p).map(toHex));
  return { out, reader: r };
}

test('encodeFrame writes C H len_hi len_lo 0 and the body', () => {
  for (const f of ALL)
    assert.equal(toHex(encodeFrame(f.subarray(HEADER_SIZE))), toHex(f));
  const big = encodeFrame(new Uint8Array(MAX_BODY_SIZE));
  assert.equal(toHex(big.subarray(0, HEADER_SIZE)), '43 48 ff ff 00');
  assert.equal(big.length, HEADER_SIZE + MAX_BODY_SIZE);
});

test('encodeFrame refuses an empty body and a body over 65535 bytes', () => {
  assert.throws(() => encodeFrame(new Uint8Array(0)), RangeError);
  assert.throws(() => encodeFrame(new Uint8Array(MAX_BODY_SIZE + 1)), RangeError);
});

test('one chunk holding several packets yields every body in order', () => {
  const { out, reader } = readAll([STREAM]);
  assert.deepEqual(out, BODIES);
  assert.equal(reader.buffered, 0);
});

test('every two-way split of the stream reassembles the same bodies', () => {
  for (let i = 0; i <= STREAM.length; i++) {
    const { out, reader } = readAll([STREAM.subarray(0, i), STREAM.subarray(i)]);
    assert.deepEqual(out, BODIES, `split at ${i}`);
    assert.equal(reader.buffered, 0);
  }
});

test('every three-way split of the stream reassembles the same bodies', () => {
  const s = concat(VEC.authResult, VEC.userMsg, VEC.recoveryEnd);
  const want = [VEC.authResult, VEC.userMsg, VEC.recoveryEnd].map((f) => toHex(f.subarray(HEADER_SIZE)));
  for (let i = 0; i <= s.length; i++) {
    for (let j = i; j <= s.length; j++) {
      const { out } = readAll([s.subarray(0, i), s.subarray(i, j), s.subarray(j)]);
      assert.deepEqual(out, want, `splits at ${i}, ${j}`);
    }
  }
});

test('byte-at-a-time delivery: a body appears exactly when its last byte arrives', () => {
  const r = new FrameReader();
  const ends = new Set();
  let end = 0;
  for (const f of ALL)
    ends.add((end += f.length));
  const out = [];
  for (let i = 0; i < STREAM.length; i++) {
    const got = r.push(STREAM.subarray(i, i + 1));
    assert.equal(got.length, ends.has(i + 1) ? 1 : 0, `byte ${i}`);
    out.push(...got.map(toHex));
  }
  assert.deepEqual(out, BODIES);
});

test('empty chunks are harmless', () => {
  const { out } = readAll([new Uint8Array(0), VEC.authResult, new Uint8Array(0)]);
  assert.deepEqual(out, [BODIES[1]]);
});

test('a maximum-size packet is accepted and split anywhere', () => {
  const body = new Uint8Array(MAX_BODY_SIZE).map((_, i) => i * 7);
  const frame = encodeFrame(body);
  for (const cut of [1, 4, 5, 6, 1000, 65535, frame.length - 1]) {
    const r = new FrameReader();
    assert.equal(r.push(frame.subarray(0, cut)).length, 0);
    assert.ok(r.buffered <= HEADER_SIZE + MAX_BODY_SIZE);
    const got = r.push(frame.subarray(cut));
    assert.equal(got.length, 1);
    assert.deepEqual(got[0], body);
  }
});

function assertRejects(bytes, pattern, opts) {
  const r = new FrameReader(opts);
  assert.throws(() => r.push(bytes), (err) => err instanceof FramingError && pattern.test(err.message));
  // A failed reader stays failed: the connection cannot be resynchronised.
  assert.throws(() => r.push(VEC.authResult), FramingError);
}

test('bad magic, empty body, Snappy and the legacy tag are framing errors', () => {
  assertRejects(hex('43 49 00 01 00 00'), /magic/);
  assertRejects(hex('00 48 00 01 00 00'), /magic/);
  assertRejects(hex('43 48 00 00 00'), /empty/);
  assertRejects(hex('43 48 00 02 01 00 00'), /compression/);
  // A legacy tag ('C' 'H' 'N' len) with ct 0 would read as a 0x4E.. length, over this limit.
  assertRejects(hex('43 48 4e 03 00 0a 01 00'), /limit/, { maxBody: 4096 });
});

test('the error is raised as soon as the header is complete, before the body arrives', () => {
  const r = new FrameReader({ maxBody: 1000 });
  assert.deepEqual(r.push(hex('43 48 03')), []);
  assert.deepEqual(r.push(hex('e9')), []);
  assert.throws(() => r.push(hex('00')), FramingError);
});

test('the buffer is bounded: a header over maxBody is refused, not buffered', () => {
  const r = new FrameReader({ maxBody: 100 });
  assert.throws(() => r.push(concat(hex('43 48 00 65 00'), new Uint8Array(101))), /exceeds the limit of 100/);
  assert.ok(r.buffered <= HEADER_SIZE + 100);
  const ok = new FrameReader({ maxBody: 100 });
  assert.equal(ok.push(encodeFrame(new Uint8Array(100).fill(1))).length, 1);
  assert.equal(new FrameReader({ maxBody: 1e9 }).maxBody, MAX_BODY_SIZE);
});
