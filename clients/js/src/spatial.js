// Spatial and entity channels (channeld-protocol.md §4): the requests a spatial game server
// sends (CREATE_SPATIAL_CHANNEL, QUERY_SPATIAL_CHANNEL, UPDATE_SPATIAL_INTEREST,
// CREATE_ENTITY_CHANNEL, ENTITY_GROUP_ADD/REMOVE), DEBUG_GET_SPATIAL_REGIONS (chanqd --dev), and
// the events for what the server pushes (12 handover, 13 regions, 18 ready, 10/15 results).
// installSpatial() adds the methods to ChanqClient.prototype (client.js calls it).
import { ChannelType, MessageType as MT, typeNameOf } from './proto.js';

export const EntityGroupType = Object.freeze({ HANDOVER: 0, LOCK: 1 });

// Damping (§4.4): the fan-out interval a cell gets at a distance, in cell diagonals.
const DAMPING_MS = [20, 50, 100];

/** The fan-out interval of a cell at `dist` cell diagonals; defaultMs past distance 2. */
export function dampingIntervalMs(dist, defaultMs = 20) {
  return dist < DAMPING_MS.length ? DAMPING_MS[dist] : defaultMs;
}

// SpatialInfo with only the non-zero coordinates set: Go's proto3 marshalling leaves zeros out,
// and so the bytes are the same as channeld's clients send.
function vec(p) {
  if (!p)
    return undefined;
  const out = {};
  for (const k of ['x', 'y', 'z']) {
    if (p[k])
      out[k] = p[k];
  }
  return out;
}

/**
 * SpatialInterestQuery from a friendly shape list, or passed through when it is already one
 * (has spotsAOI/boxAOI/sphereAOI/coneAOI). Friendly form:
 *   {spots: [{x, y, z, dist?}], box: {center, extent}, sphere: {center, radius},
 *    cone: {center, direction, angle (radians, half-angle), radius}}
 * A missing centre/extent/direction is left absent (chanqd rejects the query, §8.2).
 */
export function spatialQuery(q) {
  if (!q || typeof q !== 'object')
    throw new TypeError('spatial interest query must be an object');
  if (q.spotsAOI || q.boxAOI || q.sphereAOI || q.coneAOI)
    return q;
  const out = {};
  if (q.spots) {
    out.spotsAOI = { spots: q.spots.map(vec), dists: q.spots.some((s) => s.dist !== undefined) ? q.spots.map((s) => s.dist ?? 0) : [] };
  }
  if (q.box)
    out.boxAOI = { center: vec(q.box.center), extent: vec(q.box.extent) };
  if (q.sphere)
    out.sphereAOI = { center: vec(q.sphere.center), radius: q.sphere.radius };
  if (q.cone) {
    out.coneAOI = { center: vec(q.cone.center), direction: vec(q.cone.direction), angle: q.cone.angle,
      radius: q.cone.radius };
  }
  return out;
}

function isAny(v) {
  return v && typeof v === 'object' && typeof v.typeUrl === 'string' && v.value instanceof Uint8Array;
}

/**
 * Walks a decoded message and gives every google.protobuf.Any inside it (at any depth, in maps
 * and lists too) two more properties: typeName and data (the decoded value, or null when the
 * type is not in the registry). The Any's own typeUrl and value stay.
 */
export function unpackNested(registry, obj, depth = 0) {
  if (!obj || typeof obj !== 'object' || obj instanceof Uint8Array || depth > 32)
    return obj;
  if (isAny(obj)) {
    const u = registry.unpack(obj);
    obj.typeName = u.typeName;
    obj.data = u.value === null ? null : unpackNested(registry, u.value, depth + 1);
    return obj;
  }
  for (const v of Array.isArray(obj) ? obj : Object.values(obj))
    unpackNested(registry, v, depth + 1);
  return obj;
}

const methods = {
  /**
   * CREATE_SPATIAL_CHANNEL (10), or CREATE_CHANNEL{SPATIAL} with opts.msgType 3 (servers only):
   * takes the first free server slot. Resolves with CreateSpatialChannelsResultMessage
   * {spatialChannelId: [...], metadata, ownerConnId} (reply msgType 10 in both cases).
   */
  createSpatialChannels(metadata = '', data = null, opts = {}) {
    const msgType = opts.msgType ?? MT.CREATE_SPATIAL_CHANNEL;
    const body = this.enc('CreateChannelMessage', {
      channelType: ChannelType.SPATIAL,
      metadata,
      subOptions: opts.subOptions,
      data: data ? this.toAny(data) : undefined,
      mergeOptions: opts.mergeOptions,
    });
    return this.rpc(0, msgType, body, opts, (_pack, msg) => msg, [MT.CREATE_SPATIAL_CHANNEL, MT.CREATE_CHANNEL]);
  },

  /** QUERY_SPATIAL_CHANNEL (11): the cell channel id of each point {x, y, z}, 0 when off-grid. */
  querySpatialChannel(points, opts = {}) {
    const body = this.enc('QuerySpatialChannelMessage', { spatialInfo: points.map(vec) });
    return this.rpc(0, MT.QUERY_SPATIAL_CHANNEL, body, opts, (_pack, msg) => msg.channelId,
      [MT.QUERY_SPATIAL_CHANNEL]);
  },

  /**
   * UPDATE_SPATIAL_INTEREST (14) for connection connId (servers send it for their clients).
   * query: see spatialQuery(). chanqd answers with SUB/UNSUB results to connId (and copies to
   * the cells' owners), not to the sender as such, so nothing is returned. opts.channelId: the
   * target channel (default 0, GLOBAL); opts.stubId: echoed in connId's UNSUB results.
   */
  updateSpatialInterest(connId, query, opts = {}) {
    const body = this.enc('UpdateSpatialInterestMessage', { connId, query: spatialQuery(query) });
    this.send(opts.channelId ?? 0, MT.UPDATE_SPATIAL_INTEREST, body, { stubId: opts.stubId });
  },

  /**
   * CREATE_ENTITY_CHANNEL (15) for entity id entityId (>= the server's entity channel start).
   * opts: metadata, subOptions, mergeOptions, isWellKnown, channelId (0 = GLOBAL, or a spatial
   * cell). Resolves with the CreateChannelResultMessage (reply msgType 15).
   */
  createEntityChannel(entityId, data = null, opts = {}) {
    const body = this.enc('CreateEntityChannelMessage', {
      entityId,
      metadata: opts.metadata ?? '',
      subOptions: opts.subOptions,
      data: data ? this.toAny(data) : undefined,
      mergeOptions: opts.mergeOptions,
      isWellKnown: opts.isWellKnown || false,
    });
    return this.rpc(opts.channelId ?? 0, MT.CREATE_ENTITY_CHANNEL, body, opts, (_pack, msg) => msg,
      [MT.CREATE_ENTITY_CHANNEL]);
  },

  /** ENTITY_GROUP_ADD (16) on entity channel entityId (its owner only): no reply. */
  addEntityGroup(entityId, type, entities) {
    this.send(entityId, MT.ENTITY_GROUP_ADD, this.enc('AddEntityGroupMessage', { type, EntitiesToAdd: entities }));
  },

  /** ENTITY_GROUP_REMOVE (17) on entity channel entityId (its owner only): no reply. */
  removeEntityGroup(entityId, type, entities) {
    this.send(entityId, MT.ENTITY_GROUP_REMOVE,
      this.enc('RemoveEntityGroupMessage', { type, EntitiesToRemove: entities }));
  },

  /**
   * DEBUG_GET_SPATIAL_REGIONS (99, chanqd --dev only): resolves with the regions
   * [{min, max, channelId, serverIndex}] in cell order (reply msgType 13).
   */
  debugGetSpatialRegions(opts = {}) {
    return this.rpc(0, MT.DEBUG_GET_SPATIAL_REGIONS, new Uint8Array(0), opts, (_pack, msg) => msg.regions,
      [MT.SPATIAL_REGIONS_UPDATE]);
  },

  /**
   * This connection's subscriptions to SPATIAL channels (what UPDATE_SPATIAL_INTEREST made):
   * Map cell channel id -> effective subscription options (fanOutIntervalMs = its damping).
   */
  spatialSubscriptions() {
    const out = new Map();
    for (const [id, opts] of this.subscriptions) {
      if (this.subscriptionTypes.get(id) === ChannelType.SPATIAL)
        out.set(id, opts);
    }
    return out;
  },

  // Events for the spatial messages; true when pack was one of them.
  emitSpatial(pack, msg) {
    const channelId = pack.channelId;
    switch (pack.msgType) {
    case MT.CREATE_SPATIAL_CHANNEL:
      this.emit('spatialChannelsCreated', { channelId, stubId: pack.stubId, ...msg });
      return true;
    case MT.CREATE_ENTITY_CHANNEL:
      this.emit('entityChannelCreated', { ...msg, requestChannelId: channelId });
      return true;
    case MT.SPATIAL_REGIONS_UPDATE:
      this.emit('spatialRegions', { channelId, stubId: pack.stubId, regions: msg.regions });
      return true;
    case MT.SPATIAL_CHANNELS_READY:
      this.emit('spatialChannelsReady', { serverIndex: msg.serverIndex, serverCount: msg.serverCount });
      return true;
    case MT.CHANNEL_DATA_HANDOVER:
      this.emitHandover(pack, msg);
      return true;
    default:
      return false;
    }
  },

  emitHandover(pack, msg) {
    const any = msg.data || { typeUrl: '', value: new Uint8Array(0) };
    let data = null;
    if (any.typeUrl) {
      try {
        data = unpackNested(this.registry, this.registry.unpack(any).value);
      } catch (err) {
        this.emit('error', new Error(`cannot decode handover data ${any.typeUrl}: ${err.message}`));
        return;
      }
    }
    this.emit('handover', {
      channelId: pack.channelId,
      srcChannelId: msg.srcChannelId,
      dstChannelId: msg.dstChannelId,
      contextConnId: msg.contextConnId,
      typeName: any.typeUrl ? typeNameOf(any.typeUrl) : '',
      data,
      any,
    });
  },
};

/** Adds the spatial methods to a client class's prototype. */
export function installSpatial(cls) {
  for (const [name, fn] of Object.entries(methods))
    Object.defineProperty(cls.prototype, name, { value: fn, writable: true, configurable: true });
}
