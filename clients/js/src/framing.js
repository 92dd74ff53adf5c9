// The channeld stream framing: every packet is a 5-byte header 'C' 'H' len_hi len_lo ct followed
// by len body bytes (1..65535). ct is the body's compression: 0 none, 1 Snappy. This client never
// asks for Snappy, so it sends ct 0 and refuses a compressed packet. The legacy dynamic tag of
// pre-2023 clients is neither sent nor read.

export const HEADER_SIZE = 5;
export const MAX_BODY_SIZE = 0xffff;
export const COMPRESSION_NONE = 0;
export const COMPRESSION_SNAPPY = 1;

const MAGIC_C = 0x43;
const MAGIC_H = 0x48;

/** A framing error: the stream cannot be read any further and the connection must close. */
export class FramingError extends Error {
  constructor(message) {
    super(message);
    this.name = 'FramingError';
  }
}

/** Returns header + body as one new Uint8Array. Throws RangeError if body is empty or too big. */
export function encodeFrame(body) {
  const len = body.length;
  if (len < 1 || len > MAX_BODY_SIZE)
    throw new RangeError(`packet body of ${len} bytes (must be 1..${MAX_BODY_SIZE})`);
  const out = new Uint8Array(HEADER_SIZE + len);
  out[0] = MAGIC_C;
  out[1] = MAGIC_H;
  out[2] = len >> 8;
  out[3] = len & 0xff;
  out[4] = COMPRESSION_NONE;
  out.set(body, HEADER_SIZE);
  return out;
}

/**
 * Reassembles packet bodies from a byte stream that arrives in arbitrary pieces (TCP reads or
 * WebSocket messages). It buffers at most one incomplete packet, so it never holds more than
 * HEADER_SIZE + maxBody bytes; a header announcing a larger body is rejected at once.
 */
export class FrameReader {
  /** @param {{maxBody?: number}} [opts] maxBody: largest accepted body (default and cap 65535). */
  constructor(opts = {}) {
    this.maxBody = Math.min(opts.maxBody ?? MAX_BODY_SIZE, MAX_BODY_SIZE);
    this.buf = new Uint8Array(HEADER_SIZE + this.maxBody);
    this.len = 0;
    this.failed = null;
  }

  /** Bytes held for an incomplete packet. */
  get buffered() {
    return this.len;
  }

  /**
   * Feeds one chunk and returns the bodies of every packet it completes, in order (each a new
   * Uint8Array). Throws FramingError on a bad header; the reader then stays failed.
   */
  push(chunk) {
    if (this.failed)
      throw this.failed;
    const out = [];
    let off = 0;
    while (off < chunk.length) {
      off += this.fill(chunk, off);
      const need = this.packetSize();
      if (need > 0 && this.len === need) {
        out.push(this.buf.slice(HEADER_SIZE, need));
        this.len = 0;
      }
    }
    return out;
  }

  // Copies from chunk[off..] up to the end of the current header or packet; returns the count.
  fill(chunk, off) {
    const need = this.len < HEADER_SIZE ? HEADER_SIZE : this.packetSize();
    const n = Math.min(need - this.len, chunk.length - off);
    this.buf.set(chunk.subarray(off, off + n), this.len);
    this.len += n;
    if (this.len === HEADER_SIZE)
      this.checkHeader();
    return n;
  }

  // Total size of the packet being read, or 0 while its header is incomplete.
  packetSize() {
    if (this.len < HEADER_SIZE)
      return 0;
    return HEADER_SIZE + ((this.buf[2] << 8) | this.buf[3]);
  }

  checkHeader() {
    const b = this.buf;
    const size = (b[2] << 8) | b[3];
    let why = null;
    if (b[0] !== MAGIC_C || b[1] !== MAGIC_H)
      why = `bad packet magic ${hex(b[0])} ${hex(b[1])}`;
    else if (size === 0)
      why = 'packet with an empty body';
    else if (size > this.maxBody)
      why = `packet body of ${size} bytes exceeds the limit of ${this.maxBody}`;
    else if (b[4] !== COMPRESSION_NONE)
      why = `packet compression type ${b[4]} not supported (never requested)`;
    if (why) {
      this.failed = new FramingError(why);
      throw this.failed;
    }
  }
}

function hex(v) {
  return v.toString(16).padStart(2, '0');
}
