// ChanqClient: a channeld-protocol client for chanqd over WebSocket (browser or Node) or TCP
// (Node). Requests that have a reply are RPCs by stubId and return Promises; everything the
// server pushes is delivered as events.
import { FrameReader, FramingError, HEADER_SIZE, MAX_BODY_SIZE, encodeFrame } from './framing.js';
import {
  AuthResult,
  MessageType as MT,
  TypeRegistry,
  TYPE_URL_PREFIX,
  decodePacket,
  encodeAny,
} from './proto.js';
import { installSpatial } from './spatial.js';
import { openTransport } from './transport.js';

const PB = 'channeldpb.';

// Body type of each message the server sends to a connection, by msgType. User-space messages
// (>= 100) arrive wrapped in ServerForwardMessage.
const REPLY_TYPES = new Map([
  [MT.AUTH, 'AuthResultMessage'],
  [MT.CREATE_CHANNEL, 'CreateChannelResultMessage'],
  [MT.REMOVE_CHANNEL, 'RemoveChannelMessage'],
  [MT.LIST_CHANNEL, 'ListChannelResultMessage'],
  [MT.SUB_TO_CHANNEL, 'SubscribedToChannelResultMessage'],
  [MT.UNSUB_FROM_CHANNEL, 'UnsubscribedFromChannelResultMessage'],
  [MT.CHANNEL_DATA_UPDATE, 'ChannelDataUpdateMessage'],
  [MT.CREATE_SPATIAL_CHANNEL, 'CreateSpatialChannelsResultMessage'],
  [MT.QUERY_SPATIAL_CHANNEL, 'QuerySpatialChannelResultMessage'],
  [MT.CHANNEL_DATA_HANDOVER, 'ChannelDataHandoverMessage'],
  [MT.SPATIAL_REGIONS_UPDATE, 'SpatialRegionsUpdateMessage'],
  [MT.CREATE_ENTITY_CHANNEL, 'CreateChannelResultMessage'],
  [MT.SPATIAL_CHANNELS_READY, 'SpatialChannelsReadyMessage'],
  [MT.RECOVERY_CHANNEL_DATA, 'ChannelDataRecoveryMessage'],
  [MT.RECOVERY_END, 'EndRecoveryMesssage'],
  [MT.CHANNEL_OWNER_LOST, 'ChannelOwnerLostMessage'],
  [MT.CHANNEL_OWNER_RECOVERED, 'ChannelOwnerRecoveredMessage'],
]);

const MAX_STUB_ID = 0xffffffff;
const utf8 = new TextEncoder();

/** The move policy's defaults (connect(urls, {move})): libchanq's chanq_move_opts_init. */
export const MOVE_DEFAULTS = Object.freeze({
  backoffMinMs: 100, backoffMaxMs: 2000, maxTries: 0, connectTimeoutMs: 2000, authTimeoutMs: 5000,
});

/** The wait before try k of a move (or of the first connection): 0 for k = 0, then backoffMinMs
 * doubling per try up to backoffMaxMs. */
export function moveBackoffMs(o, k) {
  return k <= 0 ? 0 : Math.min(o.backoffMinMs * 2 ** (k - 1), o.backoffMaxMs);
}

/** An error from the client: code is 'timeout', 'closed', 'auth', 'too-big' or 'protocol'. */
export class ChanqError extends Error {
  constructor(code, message, detail) {
    super(message);
    this.name = 'ChanqError';
    this.code = code;
    if (detail !== undefined)
      this.detail = detail;
  }
}

// Bytes a MessagePack adds to a Packet: tag 0x0a plus the varint length.
function embeddedSize(len) {
  let n = 1;
  for (let v = len; v >= 0x80; v >>>= 7)
    n++;
  return 1 + n + len;
}

function writeVarint(out, off, v) {
  while (v >= 0x80) {
    out[off++] = (v & 0x7f) | 0x80;
    v >>>= 7;
  }
  out[off++] = v;
  return off;
}

export class ChanqClient {
  /**
   * @param {object} [opts]
   * @param {TypeRegistry} [opts.registry] message types for channel data and user bodies
   * @param {number} [opts.rpcTimeoutMs] reject an RPC with no reply after this long; 0 = never
   * @param {number} [opts.maxPacketBody] largest packet body accepted from the server (<= 65535)
   */
  constructor(opts = {}) {
    this.registry = opts.registry || new TypeRegistry();
    this.rpcTimeoutMs = opts.rpcTimeoutMs ?? 10000;
    this.maxPacketBody = Math.min(opts.maxPacketBody ?? MAX_BODY_SIZE, MAX_BODY_SIZE);
    this.connId = 0;
    this.compressionType = 0;
    /** channelId -> effective ChannelSubscriptionOptions of this connection's subscriptions. */
    this.subscriptions = new Map();
    /** channelId -> ChannelType of those subscriptions (from the SUB results). */
    this.subscriptionTypes = new Map();
    /**
     * channelId -> {options, channelType}: the subscriptions this connection made itself (its own
     * subToChannel, whose result arrived), which a move makes again. Kept across moves.
     */
    this.ownSubscriptions = new Map();
    this.askedSubs = new Set(); // channels of a subToChannel for itself awaiting their result
    this.credentials = null; // {pit, lt} of the last auth(), which a move sends again
    this.urls = null; // connect(urls): the address list of a client that moves
    this.urlIndex = 0;
    this.moveOpts = null;
    this.connectOpts = {};
    this.moveTask = null;
    this.moveSleep = null;
    this.stopped = false;
    this.moves = 0;
    this.transport = null;
    this.reader = null;
    this.listeners = new Map();
    this.pending = new Map();
    this.outq = [];
    this.outSize = 0;
    this.flushQueued = false;
  }

  get connected() {
    return this.transport !== null;
  }

  /** True between the loss of a moving client's connection and the end of its move. */
  get moving() {
    return this.moveTask !== null;
  }

  // ---- events -------------------------------------------------------------------------------

  /** Adds a listener; returns a function that removes it. */
  on(event, fn) {
    if (!this.listeners.has(event))
      this.listeners.set(event, new Set());
    this.listeners.get(event).add(fn);
    return () => this.off(event, fn);
  }

  off(event, fn) {
    this.listeners.get(event)?.delete(fn);
  }

  once(event, fn) {
    const off = this.on(event, (...args) => {
      off();
      fn(...args);
    });
    return off;
  }

  /** Resolves with the first event for which pred(arg) is true (rejects on close/timeout). */
  waitFor(event, pred = () => true, timeoutMs = this.rpcTimeoutMs) {
    return new Promise((resolve, reject) => {
      let timer = null;
      const done = () => {
        offEv();
        offClose();
        if (timer)
          clearTimeout(timer);
      };
      const offEv = this.on(event, (arg) => {
        if (pred(arg)) {
          done();
          resolve(arg);
        }
      });
      const offClose = this.on('close', (reason) => {
        done();
        reject(new ChanqError('closed', `connection closed while waiting for ${event}: ${reason}`));
      });
      if (timeoutMs > 0) {
        timer = setTimeout(() => {
          done();
          reject(new ChanqError('timeout', `no ${event} event within ${timeoutMs} ms`));
        }, timeoutMs);
      }
    });
  }

  emit(event, arg) {
    const set = this.listeners.get(event);
    if (!set)
      return;
    for (const fn of [...set]) {
      try {
        fn(arg);
      } catch (err) {
        if (event !== 'error')
          this.emit('error', err);
      }
    }
  }

  // ---- connection ---------------------------------------------------------------------------

  /**
   * Connects to url: ws://host:port/path, wss://..., or tcp://host:port (Node only).
   * opts.ws: options for the Node `ws` package (e.g. {rejectUnauthorized: false});
   * opts.transport: an already open transport {send, close, onbytes, onclose} to use instead.
   *
   * url may be an array of URLs (relay nodes): the client connects to the first that answers,
   * in order, and moves along the list when its connection is lost (see README "Moving").
   * opts.move: the policy (MOVE_DEFAULTS); opts.timeoutMs bounds the first connection (default
   * rpcTimeoutMs); opts.openTransport(url, opts): opens a transport (default openTransport).
   */
  async connect(url, opts = {}) {
    if (this.transport || this.moveTask)
      throw new ChanqError('protocol', 'already connected');
    this.stopped = false;
    if (Array.isArray(url))
      return this.connectList(url, opts);
    this.urls = null;
    const t = opts.transport || (await openTransport(url, opts));
    this.attach(t, url);
  }

  attach(t, url) {
    this.transport = t;
    this.reader = new FrameReader({ maxBody: this.maxPacketBody });
    // A transport dropped by a move may still call back: only the current one counts.
    t.onbytes = (bytes) => {
      if (this.transport === t)
        this.receive(bytes);
    };
    t.onclose = (reason) => {
      if (this.transport === t)
        this.closed(reason);
    };
    this.emit('open', url);
  }

  /** Closes the connection (and stops a move); pending RPCs are rejected. */
  disconnect() {
    this.stopped = true;
    if (this.moveSleep)
      this.moveSleep();
    if (!this.transport)
      return;
    this.flush();
    this.transport.close();
  }

  closed(reason) {
    if (!this.transport)
      return;
    this.transport = null;
    this.outq = [];
    this.outSize = 0;
    this.subscriptions.clear();
    this.subscriptionTypes.clear();
    this.askedSubs.clear();
    for (const [stub, p] of this.pending) {
      this.pending.delete(stub);
      if (p.timer)
        clearTimeout(p.timer);
      p.reject(new ChanqError('closed', `connection closed: ${reason}`));
    }
    if (this.urls && this.moveTask)
      return; // a try of a move ended: the move goes on
    if (this.urls && !this.stopped) {
      this.startMove(reason);
      return;
    }
    this.emit('close', reason);
  }

  // ---- moving along a list of URLs ----------------------------------------------------------

  async connectList(urls, opts) {
    if (!urls.length)
      throw new RangeError('connect: the list of URLs is empty');
    this.urls = [...urls];
    this.moveOpts = { ...MOVE_DEFAULTS, ...(opts.move || {}) };
    this.connectOpts = opts;
    const timeoutMs = opts.timeoutMs ?? this.rpcTimeoutMs;
    await this.runTries(0, async () => 0, timeoutMs > 0 ? Date.now() + timeoutMs : Infinity);
  }

  // Waits ms, or less when disconnect() is called.
  sleep(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.moveSleep = done;
    }).finally(() => {
      this.moveSleep = null;
    });
  }

  // Opens url within connectTimeoutMs; a transport that opens later is closed at once.
  openWithTimeout(url) {
    const open = this.connectOpts.openTransport || openTransport;
    const ms = this.moveOpts.connectTimeoutMs;
    return new Promise((resolve, reject) => {
      let done = false;
      const timer = ms > 0 ? setTimeout(() => {
        done = true;
        reject(new ChanqError('timeout', `${url}: not connected within ${ms} ms`));
      }, ms) : null;
      Promise.resolve().then(() => open(url, this.connectOpts)).then((t) => {
        if (done) {
          t.close();
          return;
        }
        done = true;
        clearTimeout(timer);
        resolve(t);
      }, (err) => {
        if (!done) {
          done = true;
          clearTimeout(timer);
          reject(err);
        }
      });
    });
  }

  // Tries the URLs from index start on, round robin with the backoff, until one is connected
  // and redo(index) resolved: resolves {index, tries, redone}. Rejects with the last error after
  // maxTries or past the deadline, with a refused AUTH at once, or when disconnect() is called.
  async runTries(start, redo, deadline = Infinity) {
    const o = this.moveOpts;
    let last = null;
    for (let k = 0; ; k++) {
      const wait = moveBackoffMs(o, k);
      if (Date.now() + wait > deadline)
        throw last || new ChanqError('timeout', 'no address answered in time');
      if (wait)
        await this.sleep(wait);
      if (this.stopped)
        throw new ChanqError('closed', 'disconnected');
      const index = (start + k) % this.urls.length;
      try {
        const t = await this.openWithTimeout(this.urls[index]);
        if (this.stopped) {
          t.close();
          throw new ChanqError('closed', 'disconnected');
        }
        this.urlIndex = index;
        this.attach(t, this.urls[index]);
        const redone = await redo(index);
        return { index, tries: k + 1, redone };
      } catch (err) {
        if (this.transport && (err.code === 'auth' || this.stopped))
          this.transport.close(); // the AUTH was refused: so would it be elsewhere
        if (err.code === 'auth' || this.stopped)
          throw err;
        last = err;
        if (o.maxTries && k + 1 >= o.maxTries)
          throw last;
      }
    }
  }

  // On a new connection after a loss: AUTH again with the same credentials, then SUB again to
  // each of this client's own subscriptions (a server's are the server's to redo). Resolves the
  // number of SUBs sent; their results arrive as ordinary 'subscribed' events.
  async redo(oldConnId) {
    if (!oldConnId || !this.credentials)
      return 0;
    try {
      await this.authWith(this.credentials.pit, this.credentials.lt, this.moveOpts.authTimeoutMs);
    } catch (err) {
      if (err.code !== 'auth' && this.transport)
        this.transport.close(); // this try failed (timeout, or closed): the next address
      throw err;
    }
    let n = 0;
    for (const [channelId, rec] of this.ownSubscriptions) {
      // a channel that is gone answers nothing: the RPC times out, which is no failure here
      this.subToChannel(channelId, rec.options).catch(() => {});
      n++;
    }
    return n;
  }

  startMove(reason) {
    const fromIndex = this.urlIndex;
    const oldConnId = this.connId;
    this.connId = 0;
    this.compressionType = 0;
    this.emit('moving', { from: this.urls[fromIndex], fromIndex, oldConnId, reason });
    const start = (fromIndex + 1) % this.urls.length;
    this.moveTask = this.runTries(start, () => this.redo(oldConnId)).then(({ index, tries, redone }) => {
      this.moveTask = null;
      this.moves++;
      this.emit('moved', {
        from: this.urls[fromIndex], to: this.urls[index], fromIndex, toIndex: index, oldConnId,
        connId: this.connId, resubscribed: redone, tries, reason,
      });
    }, (err) => {
      this.moveTask = null;
      this.emit('close', `${reason}; the move failed: ${err.message}`);
    });
  }

  fail(code, message) {
    const err = new ChanqError(code, message);
    this.emit('error', err);
    if (this.transport)
      this.transport.close();
  }

  // ---- sending ------------------------------------------------------------------------------

  /**
   * Queues one MessagePack. Messages queued in the same turn of the event loop go out together
   * in as few packets as fit in 65535 bytes. Throws ChanqError 'too-big' when this message
   * alone cannot fit in a packet.
   */
  send(channelId, msgType, body, opts = {}) {
    if (!this.transport)
      throw new ChanqError('closed', 'not connected');
    const pack = this.registry.encode(PB + 'MessagePack', {
      channelId,
      broadcast: opts.broadcast || 0,
      stubId: opts.stubId || 0,
      msgType,
      msgBody: body || new Uint8Array(0),
    });
    const size = embeddedSize(pack.length);
    if (size > MAX_BODY_SIZE)
      throw new ChanqError('too-big', `message of ${size} bytes does not fit in a packet (max ${MAX_BODY_SIZE})`);
    if (this.outSize + size > MAX_BODY_SIZE)
      this.flush();
    this.outq.push(pack);
    this.outSize += size;
    if (!this.flushQueued) {
      this.flushQueued = true;
      queueMicrotask(() => this.flush());
    }
  }

  flush() {
    this.flushQueued = false;
    if (!this.outq.length || !this.transport)
      return;
    const body = new Uint8Array(this.outSize);
    let off = 0;
    for (const pack of this.outq) {
      body[off++] = 0x0a;
      off = writeVarint(body, off, pack.length);
      body.set(pack, off);
      off += pack.length;
    }
    this.outq = [];
    this.outSize = 0;
    this.transport.send(encodeFrame(body));
  }

  /**
   * Sends a request with a fresh stubId and resolves with the reply that carries the same
   * stubId: {pack, msg}, where msg is the decoded body (null for unknown types).
   */
  request(channelId, msgType, body, opts = {}) {
    return this.rpc(channelId, msgType, body, opts, (pack, msg) => ({ pack, msg }), opts.replyTypes ?? null);
  }

  // replyTypes: the msgTypes that answer this request (null = any). A message with the stubId
  // but another type (e.g. the SPATIAL_REGIONS_UPDATE that follows a spatial create with the
  // same stub, §4.3) is then only an event and cannot resolve a later request that reused it.
  rpc(channelId, msgType, body, opts, shape, replyTypes = [msgType]) {
    const stubId = this.allocStub();
    return new Promise((resolve, reject) => {
      const p = { resolve, reject, shape, timer: null, replyTypes };
      this.pending.set(stubId, p);
      const timeoutMs = opts.timeoutMs ?? this.rpcTimeoutMs;
      if (timeoutMs > 0) {
        p.timer = setTimeout(() => {
          this.pending.delete(stubId);
          reject(new ChanqError('timeout', `no reply to msgType ${msgType} (stub ${stubId}) within ${timeoutMs} ms`));
        }, timeoutMs);
      }
      try {
        this.send(channelId, msgType, body, { broadcast: opts.broadcast, stubId });
      } catch (err) {
        this.pending.delete(stubId);
        if (p.timer)
          clearTimeout(p.timer);
        reject(err);
      }
    });
  }

  // The lowest free stub id >= 1, as channeld's clients allocate them.
  allocStub() {
    for (let id = 1; id <= MAX_STUB_ID; id++) {
      if (!this.pending.has(id))
        return id;
    }
    throw new ChanqError('protocol', 'no free stub id');
  }

  enc(name, value) {
    return this.registry.encode(PB + name, value);
  }

  // ---- protocol requests --------------------------------------------------------------------

  /**
   * AUTH; resolves with the AuthResultMessage and sets connId. Rejects 'auth' on failure. The
   * credentials are kept: a moving client sends them again on its new connection.
   */
  auth(pit, lt) {
    this.credentials = { pit, lt };
    return this.authWith(pit, lt, this.rpcTimeoutMs);
  }

  async authWith(pit, lt, timeoutMs) {
    const res = await this.rpc(0, MT.AUTH, this.enc('AuthMessage', { playerIdentifierToken: pit, loginToken: lt }),
      { timeoutMs }, (_pack, msg) => msg);
    if (res.result !== AuthResult.SUCCESSFUL)
      throw new ChanqError('auth', `authentication failed (result ${res.result})`, res);
    this.connId = res.connId;
    this.compressionType = res.compressionType;
    return res;
  }

  /**
   * CREATE_CHANNEL; resolves with the CreateChannelResultMessage ({channelId, channelType,
   * metadata, ownerConnId}). data: {type: 'pkg.Msg', value: {...}} or an Any {typeUrl, value}.
   * opts.subOptions: the creator's subscription; opts.mergeOptions: ChannelDataMergeOptions.
   */
  createChannel(channelType, metadata = '', data = null, opts = {}) {
    const body = this.enc('CreateChannelMessage', {
      channelType,
      metadata,
      subOptions: opts.subOptions,
      data: data ? this.toAny(data) : undefined,
      mergeOptions: opts.mergeOptions,
    });
    return this.rpc(0, MT.CREATE_CHANNEL, body, opts, (_pack, msg) => msg);
  }

  /** REMOVE_CHANNEL (owner or ACL permitting). There is no reply to the requester as such. */
  removeChannel(channelId) {
    this.send(0, MT.REMOVE_CHANNEL, this.enc('RemoveChannelMessage', { channelId }));
  }

  /** LIST_CHANNEL; resolves with [{channelId, channelType, metadata}]. */
  listChannels(typeFilter = 0, metadataFilters = [], opts = {}) {
    const body = this.enc('ListChannelMessage', { typeFilter, metadataFilters });
    return this.rpc(0, MT.LIST_CHANNEL, body, opts, (_pack, msg) => msg.channels);
  }

  /**
   * SUB_TO_CHANNEL; resolves with the SubscribedToChannelResultMessage. options: {dataAccess,
   * fanOutIntervalMs, fanOutDelayMs, dataFieldMasks, skipSelfUpdateFanOut, skipFirstFanOut};
   * only the fields given are sent. connId: whom to subscribe (servers only; 0 = self).
   * chanqd replies to a re-subscription only when dataAccess changes, so a re-subscription with
   * the same access times out.
   */
  subToChannel(channelId, options = {}, connId = 0, opts = {}) {
    if (!connId || connId === this.connId)
      this.askedSubs.add(channelId); // its own: recorded for a move when the result arrives
    const body = this.enc('SubscribedToChannelMessage', { connId: connId || this.connId, subOptions: options });
    return this.rpc(channelId, MT.SUB_TO_CHANNEL, body, opts, (_pack, msg) => msg);
  }

  /** UNSUB_FROM_CHANNEL; resolves with the UnsubscribedFromChannelResultMessage. */
  unsubFromChannel(channelId, connId = 0, opts = {}) {
    const body = this.enc('UnsubscribedFromChannelMessage', { connId: connId || this.connId });
    return this.rpc(channelId, MT.UNSUB_FROM_CHANNEL, body, opts, (_pack, msg) => msg);
  }

  /**
   * CHANNEL_DATA_UPDATE with data {type: 'pkg.Msg', value: {...}} or an Any {typeUrl, value}.
   * The server merges it and fans it out; there is no reply.
   */
  updateChannelData(channelId, data) {
    this.send(channelId, MT.CHANNEL_DATA_UPDATE, this.enc('ChannelDataUpdateMessage', { data: this.toAny(data) }));
  }

  /**
   * A user-space message (msgType >= 100). body: Uint8Array, string (UTF-8) or
   * {type: 'pkg.Msg', value: {...}}. From a client chanqd forwards it to the channel owner
   * wrapped in ServerForwardMessage; opts.stubId makes it an RPC-style request.
   */
  sendUserMessage(channelId, broadcast, msgType, body, opts = {}) {
    if (msgType < MT.USER_SPACE_START)
      throw new RangeError(`user message type ${msgType} is below ${MT.USER_SPACE_START}`);
    this.send(channelId, msgType, this.bodyBytes(body), { broadcast, stubId: opts.stubId });
  }

  /**
   * For server connections: a user-space message wrapped in ServerForwardMessage, as game
   * servers send them (broadcast ALL etc., or SINGLE_CONNECTION to clientConnId).
   */
  sendForward(channelId, broadcast, msgType, clientConnId, payload, opts = {}) {
    const body = this.enc('ServerForwardMessage', { clientConnId, payload: this.bodyBytes(payload) });
    this.send(channelId, msgType, body, { broadcast, stubId: opts.stubId });
  }

  toAny(data) {
    if (data.typeUrl !== undefined)
      return { typeUrl: data.typeUrl, value: data.value };
    return this.registry.pack(data.type, data.value ?? {});
  }

  bodyBytes(body) {
    if (body instanceof Uint8Array)
      return body;
    if (typeof body === 'string')
      return utf8.encode(body);
    if (body && body.type)
      return this.registry.encode(body.type, body.value ?? {});
    throw new TypeError('message body must be a Uint8Array, a string or {type, value}');
  }

  // ---- receiving ----------------------------------------------------------------------------

  receive(bytes) {
    let bodies;
    try {
      bodies = this.reader.push(bytes);
    } catch (err) {
      this.fail('protocol', err instanceof FramingError ? err.message : String(err));
      return;
    }
    for (const body of bodies) {
      let packs;
      try {
        packs = decodePacket(body);
      } catch (err) {
        this.fail('protocol', `malformed packet (${body.length + HEADER_SIZE} bytes): ${err.message}`);
        return;
      }
      for (const pack of packs)
        this.dispatch(pack);
    }
  }

  dispatch(pack) {
    let msg = null;
    const name = pack.msgType >= MT.USER_SPACE_START ? 'ServerForwardMessage' : REPLY_TYPES.get(pack.msgType);
    if (name) {
      try {
        msg = this.registry.decode(PB + name, pack.msgBody);
      } catch (err) {
        this.emit('error', new ChanqError('protocol', `cannot decode msgType ${pack.msgType}: ${err.message}`, pack));
        return;
      }
    }
    let p = pack.stubId ? this.pending.get(pack.stubId) : undefined;
    if (p && p.replyTypes && !p.replyTypes.includes(pack.msgType))
      p = undefined;
    if (p) {
      this.pending.delete(pack.stubId);
      if (p.timer)
        clearTimeout(p.timer);
    }
    this.track(pack, msg);
    this.emit('message', { ...pack, msg });
    this.emitTyped(pack, msg);
    if (p)
      p.resolve(p.shape(pack, msg));
  }

  // Keeps this.subscriptions current, and this.ownSubscriptions: the SUB result of a request
  // this client made for itself records it (a later result updates it).
  track(pack, msg) {
    const ch = pack.channelId;
    if (pack.msgType === MT.SUB_TO_CHANNEL && msg.connId === this.connId) {
      this.subscriptions.set(ch, msg.subOptions);
      this.subscriptionTypes.set(ch, msg.channelType);
      if (this.askedSubs.delete(ch) || this.ownSubscriptions.has(ch))
        this.ownSubscriptions.set(ch, { options: msg.subOptions, channelType: msg.channelType });
    } else if (pack.msgType === MT.UNSUB_FROM_CHANNEL && msg.connId === this.connId) {
      this.forget(ch);
    } else if (pack.msgType === MT.REMOVE_CHANNEL) {
      this.forget(msg.channelId);
    }
  }

  forget(channelId) {
    this.subscriptions.delete(channelId);
    this.subscriptionTypes.delete(channelId);
    this.ownSubscriptions.delete(channelId);
    this.askedSubs.delete(channelId);
  }

  emitTyped(pack, msg) {
    const channelId = pack.channelId;
    switch (pack.msgType) {
    case MT.CHANNEL_DATA_UPDATE:
      this.emitChannelData(channelId, msg);
      break;
    case MT.SUB_TO_CHANNEL:
      this.emit('subscribed', { channelId, ...msg });
      break;
    case MT.UNSUB_FROM_CHANNEL:
      this.emit('unsubscribed', { channelId, ...msg });
      break;
    case MT.REMOVE_CHANNEL:
      this.emit('channelRemoved', { channelId: msg.channelId });
      break;
    case MT.CREATE_CHANNEL:
      this.emit('channelCreated', msg);
      break;
    default:
      if (this.emitSpatial(pack, msg))
        break;
      if (pack.msgType >= MT.USER_SPACE_START) {
        this.emit('userMessage', {
          channelId,
          msgType: pack.msgType,
          broadcast: pack.broadcast,
          stubId: pack.stubId,
          clientConnId: msg.clientConnId,
          payload: msg.payload,
        });
      }
    }
  }

  emitChannelData(channelId, msg) {
    const any = msg.data || { typeUrl: '', value: new Uint8Array(0) };
    let unpacked;
    try {
      unpacked = this.registry.unpack(any);
    } catch (err) {
      this.emit('error', new ChanqError('protocol', `cannot decode channel data ${any.typeUrl}: ${err.message}`));
      return;
    }
    this.emit('channelData', {
      channelId,
      typeName: unpacked.typeName,
      data: unpacked.value,
      any,
      contextConnId: msg.contextConnId,
    });
  }
}

installSpatial(ChanqClient);

export { TYPE_URL_PREFIX, encodeAny };
