// Type declarations for @chanq/client (src/index.js).
import type { Root } from 'protobufjs';

// ---- enumerations (values of proto/channeld.proto) --------------------------------------------

export declare const MessageType: Readonly<{
  INVALID: 0; AUTH: 1; CREATE_CHANNEL: 3; REMOVE_CHANNEL: 4; LIST_CHANNEL: 5; SUB_TO_CHANNEL: 6;
  UNSUB_FROM_CHANNEL: 7; CHANNEL_DATA_UPDATE: 8; DISCONNECT: 9; CREATE_SPATIAL_CHANNEL: 10;
  QUERY_SPATIAL_CHANNEL: 11; CHANNEL_DATA_HANDOVER: 12; SPATIAL_REGIONS_UPDATE: 13;
  UPDATE_SPATIAL_INTEREST: 14; CREATE_ENTITY_CHANNEL: 15; ENTITY_GROUP_ADD: 16;
  ENTITY_GROUP_REMOVE: 17; SPATIAL_CHANNELS_READY: 18; RECOVERY_CHANNEL_DATA: 20; RECOVERY_END: 21;
  CHANNEL_OWNER_LOST: 22; CHANNEL_OWNER_RECOVERED: 23; DEBUG_GET_SPATIAL_REGIONS: 99;
  USER_SPACE_START: 100; [name: string]: number;
}>;
export declare const BroadcastType: Readonly<{
  NO_BROADCAST: 0; SINGLE_CONNECTION: 1; ALL: 2; ALL_BUT_SENDER: 4; ALL_BUT_OWNER: 8;
  ALL_BUT_CLIENT: 16; ALL_BUT_SERVER: 32; ADJACENT_CHANNELS: 64;
}>;
export declare const ConnectionType: Readonly<{ NO_CONNECTION: 0; SERVER: 1; CLIENT: 2 }>;
export declare const ChannelType: Readonly<{
  UNKNOWN: 0; GLOBAL: 1; PRIVATE: 2; SUBWORLD: 3; SPATIAL: 4; ENTITY: 5;
  TEST: 100; TEST1: 101; TEST2: 102; TEST3: 103; TEST4: 104;
}>;
export declare const CompressionType: Readonly<{ NO_COMPRESSION: 0; SNAPPY: 1 }>;
export declare const ChannelDataAccess: Readonly<{ NO_ACCESS: 0; READ_ACCESS: 1; WRITE_ACCESS: 2 }>;
export declare const AuthResult: Readonly<{ SUCCESSFUL: 0; INVALID_PIT: 1; INVALID_LT: 2 }>;

// ---- messages (plain objects; every field present when received) ----------------------------

export interface Any { typeUrl: string; value: Uint8Array }
/** Channel data or a message body given by type: {type: 'chatpb.ChatChannelData', value: {...}}. */
export interface TypedValue { type: string; value?: Record<string, unknown> }

export interface MessagePack {
  channelId: number; broadcast: number; stubId: number; msgType: number; msgBody: Uint8Array;
}

export interface ChannelSubscriptionOptions {
  dataAccess?: number;
  dataFieldMasks?: string[];
  fanOutIntervalMs?: number;
  fanOutDelayMs?: number;
  skipSelfUpdateFanOut?: boolean;
  skipFirstFanOut?: boolean;
}

export interface ChannelDataMergeOptions {
  shouldReplaceList?: boolean;
  listSizeLimit?: number;
  truncateTop?: boolean;
  shouldCheckRemovableMapField?: boolean;
}

export interface AuthResultMessage {
  result: number; connId: number; compressionType: number; shouldRecover: boolean;
}
export interface CreateChannelResultMessage {
  channelType: number; metadata: string; ownerConnId: number; channelId: number;
}
export interface ChannelInfo { channelId: number; channelType: number; metadata: string }
export interface SubscribedToChannelResultMessage {
  connId: number; subOptions: Required<ChannelSubscriptionOptions>; connType: number; channelType: number;
}
export interface UnsubscribedFromChannelResultMessage {
  connId: number; connType: number; channelType: number;
}

// ---- spatial (channeld-protocol.md §4) --------------------------------------------------------

export declare const EntityGroupType: Readonly<{ HANDOVER: 0; LOCK: 1 }>;
/** A point; absent coordinates are 0 (and are left out on the wire, as Go leaves zeros out). */
export interface SpatialInfo { x?: number; y?: number; z?: number }
export interface SpatialRegion {
  min: Required<SpatialInfo>; max: Required<SpatialInfo>; channelId: number; serverIndex: number;
}
export interface CreateSpatialChannelsResultMessage {
  spatialChannelId: number[]; metadata: string; ownerConnId: number;
}
/** The friendly form of a SpatialInterestQuery (see spatialQuery). */
export interface SpatialQuery {
  spots?: (SpatialInfo & { dist?: number })[];
  box?: { center?: SpatialInfo; extent?: SpatialInfo };
  sphere?: { center?: SpatialInfo; radius: number };
  /** angle: the half-angle in radians. */
  cone?: { center?: SpatialInfo; direction?: SpatialInfo; angle: number; radius: number };
}
/** channeldpb.SpatialInterestQuery as sent. */
export interface SpatialInterestQuery {
  spotsAOI?: { spots: SpatialInfo[]; dists?: number[] };
  boxAOI?: { center?: SpatialInfo; extent?: SpatialInfo };
  sphereAOI?: { center?: SpatialInfo; radius?: number };
  coneAOI?: { center?: SpatialInfo; direction?: SpatialInfo; angle?: number; radius?: number };
}
/** A SpatialInterestQuery from the friendly form (a SpatialInterestQuery passes through). */
export declare function spatialQuery(q: SpatialQuery | SpatialInterestQuery): SpatialInterestQuery;
/** Damping (§4.4): 0 -> 20, 1 -> 50, 2 -> 100, farther -> defaultMs (20). */
export declare function dampingIntervalMs(dist: number, defaultMs?: number): number;
/** Gives every Any nested in a decoded message typeName and data (decoded, or null). */
export declare function unpackNested<T>(registry: TypeRegistry, obj: T): T;

export interface HandoverEvent {
  /** The MessagePack channelId: the destination cell. */
  channelId: number;
  srcChannelId: number; dstChannelId: number; contextConnId: number;
  /** The data's type ('' when the handover carried none), e.g. "chanqworld.SpatialChannelData". */
  typeName: string;
  /** The decoded data (its nested Anys have typeName and data), or null when unregistered. */
  data: Record<string, any> | null;
  any: Any;
}

// ---- the bridge: durable topics delivered into channels (proto/bridge.proto, doc/bridge.md) ----

/**
 * chanqpb.TopicEvent: one committed message of a durable topic, the body of a bridge delivery
 * (a user-space message of the binding's msgType; read it from the `message` event's msgBody: it
 * is not wrapped in a ServerForwardMessage). The 64-bit fields are Numbers, exact: chanqd's
 * values are at most 2^53 - 1, and decodeTopicEvent refuses any that is not.
 */
export interface TopicEvent {
  topic: string;
  /** The shard that stored it; order holds per shard. */
  shard: number;
  /** The shard's history generation (a position under another epoch is not to be trusted). */
  epoch: number;
  offset: number;
  /** The shard's previous offset (0: none): a receiver whose last offset is this missed nothing. */
  prevOffset: number;
  /** The message's time as stored, ms since the Unix epoch. */
  timeMs: number;
  /** The producer's idempotence key as decimal text ('' when none); with seq, drops duplicates. */
  producerId: string;
  seq: number;
  /** The message as produced (a copy). */
  content: Uint8Array;
}
/**
 * Decodes a TopicEvent, every field present (0, '' or empty when absent). Throws on bytes that
 * are not a TopicEvent, and a RangeError for a 64-bit value beyond Number.MAX_SAFE_INTEGER.
 */
export declare function decodeTopicEvent(bytes: Uint8Array): TopicEvent;
/** The chanqpb root: TopicEvent, TopicPosition, TopicResume(Result)Message, TopicAckMessage. */
export declare const chanqpbRoot: Root;

/** Client to server: TopicResumeMessage, on the resumed channel (0: GLOBAL). */
export declare const TOPIC_RESUME: 90;
/** Server to client: TopicResumeResultMessage (the msgBody itself, not a ServerForwardMessage). */
export declare const TOPIC_RESUME_RESULT: 91;
/** Client to server, channel 0: TopicAckMessage. */
export declare const TOPIC_ACK: 92;
/** The (topic, shard) positions a TopicTracker holds. */
export declare const TOPIC_MAX_POSITIONS: 1024;
/** The (topic, producerId, seq) keys a TopicTracker remembers to drop duplicates. */
export declare const TOPIC_DEDUP_WINDOW: 4096;

/** chanqpb.TopicPosition: every event of (topic, shard) under epoch up to offset is handled. */
export interface TopicPosition {
  topic: string;
  shard: number;
  epoch: number;
  offset: number;
}
/** A message to send with client.send(channelId, msgType, body) (stub 0, broadcast 0). */
export interface TopicOutMessage {
  msgType: 90 | 92;
  channelId: number;
  body: Uint8Array;
}
export interface TopicResumeResult {
  /** false: a gap could not be filled (purged, or another epoch): reload from your backend. */
  recovered: boolean;
  /** Why not recovered ('' when recovered). */
  error: string;
  /** Where delivery continues from, one per bound (topic, shard) of the channel. */
  positions: TopicPosition[];
  /** Positions of the result the tracker could not hold (TOPIC_MAX_POSITIONS reached). */
  refused: TopicPosition[];
}
export interface TopicTrackerStats {
  accepted: number;
  /** Dropped as a (producerId, seq) already accepted, or an offset at or below the position. */
  duplicates: number;
  /** Accepted over a hole (no resume pending). */
  holes: number;
  /** Dropped over a hole while a resume of its channel was pending (the catch-up brings it). */
  skipped: number;
  /** Accepted under another epoch than the position's. */
  epochChanges: number;
  positions: number;
  keys: number;
}
/**
 * Decides which durable-topic events the app handles and resumes after a reconnect (issue 24):
 * one per app, it outlives connections. The same rules as libchanq's chanq_topics.h.
 */
export declare class TopicTracker {
  constructor();
  accepted: number;
  duplicates: number;
  holes: number;
  skipped: number;
  epochChanges: number;
  /** The last result's error text. */
  lastError: string;
  /**
   * true: handle ev; false: a duplicate, or a hole the pending resume's catch-up brings.
   * Throws a RangeError for a new (topic, shard) while TOPIC_MAX_POSITIONS are held.
   */
  accept(channelId: number, ev: TopicEvent): boolean;
  position(topic: string, shard: number): { epoch: number; offset: number; channelId: number } | undefined;
  isPending(channelId: number): boolean;
  /** The TopicResumeMessage of the channel's positions; marks the channel pending. */
  resumeMessage(channelId: number): TopicOutMessage;
  /** Sends the resume with client.send, then marks the channel pending. */
  resume(client: ChanqClient, channelId: number): void;
  /** Takes a TopicResumeResultMessage's body (msgType 91) received on channelId. */
  onResult(channelId: number, bodyBytes: Uint8Array): TopicResumeResult;
  /** The TopicAckMessage of every position, for channel 0. */
  ackMessage(): TopicOutMessage;
  ack(client: ChanqClient): void;
  stats(): TopicTrackerStats;
  /** The positions and the dedup window's keys, for JSON.stringify (e.g. into localStorage). */
  toJSON(): TopicTrackerState;
  /** A new tracker from a parsed toJSON() result; throws a TypeError or RangeError for any other value. */
  static fromJSON(state: TopicTrackerState): TopicTracker;
}
/** What TopicTracker.toJSON() returns: positions in the order they were made, keys oldest first. */
export interface TopicTrackerState {
  positions: Array<TopicPosition & { channelId: number }>;
  /** Opaque; may be left out for fromJSON. */
  keys?: string[];
}

// ---- events ---------------------------------------------------------------------------------

export interface ChannelDataEvent {
  channelId: number;
  /** Full message name from the Any type URL, e.g. "chatpb.ChatChannelData". */
  typeName: string;
  /** The decoded data, or null when typeName is not in the client's registry. */
  data: Record<string, any> | null;
  any: Any;
  contextConnId: number;
}
export interface UserMessageEvent {
  channelId: number; msgType: number; broadcast: number; stubId: number;
  /** The sending client (0 for a message that came from a server). */
  clientConnId: number;
  payload: Uint8Array;
}
export interface ChanqEvents {
  open: string;
  /** Every message received, with msg = its decoded body (null for unknown types). */
  message: MessagePack & { msg: Record<string, any> | null };
  channelData: ChannelDataEvent;
  userMessage: UserMessageEvent;
  subscribed: SubscribedToChannelResultMessage & { channelId: number };
  unsubscribed: UnsubscribedFromChannelResultMessage & { channelId: number };
  channelRemoved: { channelId: number };
  channelCreated: CreateChannelResultMessage;
  /** A CREATE_SPATIAL_CHANNEL result (10): the requester's, or the GLOBAL owner's copy. */
  spatialChannelsCreated: CreateSpatialChannelsResultMessage & { channelId: number; stubId: number };
  /** A CREATE_ENTITY_CHANNEL result (15); requestChannelId is 0 or the cell it was sent on. */
  entityChannelCreated: CreateChannelResultMessage & { requestChannelId: number };
  /** SPATIAL_REGIONS_UPDATE (13), also the answer to debugGetSpatialRegions(). */
  spatialRegions: { channelId: number; stubId: number; regions: SpatialRegion[] };
  /** SPATIAL_CHANNELS_READY (18): both fields carry the server count (§4.3). */
  spatialChannelsReady: { serverIndex: number; serverCount: number };
  /** CHANNEL_DATA_HANDOVER (12). */
  handover: HandoverEvent;
  error: Error;
  /**
   * The connection closed; the argument says why. A client connected to a list of URLs closes
   * only on disconnect() or when its move fails ("<reason>; the move failed: <why>").
   */
  close: string;
  /** A moving client lost its connection: the move starts (pending RPCs were rejected). */
  moving: { from: string; fromIndex: number; oldConnId: number; reason: string };
  /** The move ended: connected to `to`, authenticated and subscribed again (SUB results follow). */
  moved: MovedEvent;
}

/** connect(urls): the move policy (libchanq's chanq_move_opts_t). */
export interface MoveOptions {
  /** Wait before the second try after a loss, doubling per try (default 100). */
  backoffMinMs?: number;
  /** Cap of the wait (default 2000). */
  backoffMaxMs?: number;
  /** Failed tries in a row before giving up; 0 = no limit (default). */
  maxTries?: number;
  /** A try whose transport is not open by then fails (default 2000). */
  connectTimeoutMs?: number;
  /** A try whose AuthResult does not come by then fails (default 5000). */
  authTimeoutMs?: number;
}
export declare const MOVE_DEFAULTS: Readonly<Required<MoveOptions>>;
/** The wait before try k of a move: 0 for k = 0, then backoffMinMs * 2^(k-1) up to backoffMaxMs. */
export declare function moveBackoffMs(o: Required<MoveOptions>, k: number): number;

export interface MovedEvent {
  from: string; to: string; fromIndex: number; toIndex: number;
  /** 0 when the lost connection had not authenticated (then nothing was sent again). */
  oldConnId: number;
  connId: number;
  /** SUB_TO_CHANNEL sent again: one per entry of ownSubscriptions. */
  resubscribed: number;
  /** Connection tries it took (1: the first URL after the lost one answered). */
  tries: number;
  reason: string;
}

// ---- client ---------------------------------------------------------------------------------

export type ChanqErrorCode = 'timeout' | 'closed' | 'auth' | 'too-big' | 'protocol';
export declare class ChanqError extends Error {
  code: ChanqErrorCode;
  detail?: unknown;
}

export interface Transport {
  send(bytes: Uint8Array): void;
  close(): void;
  onbytes: ((bytes: Uint8Array) => void) | null;
  onclose: ((reason: string) => void) | null;
}

export interface ConnectOptions {
  /** Options for the npm `ws` package in Node, e.g. {ca} or {rejectUnauthorized: false}. */
  ws?: Record<string, unknown>;
  /** A WebSocket class to use instead of the global one or `ws`. */
  WebSocket?: unknown;
  /** An already open transport to use instead of url. */
  transport?: Transport;
  /** With a list of URLs: the move policy. */
  move?: MoveOptions;
  /** With a list of URLs: the first connection's bound (default rpcTimeoutMs). */
  timeoutMs?: number;
  /** With a list of URLs: opens each transport (default openTransport). */
  openTransport?: (url: string, opts: ConnectOptions) => Promise<Transport>;
}

export interface RpcOptions {
  /** Overrides the client's rpcTimeoutMs for this request; 0 = wait forever. */
  timeoutMs?: number;
  broadcast?: number;
}

export interface ClientOptions {
  registry?: TypeRegistry;
  /** Reject an RPC that has no reply after this many ms (default 10000; 0 = never). */
  rpcTimeoutMs?: number;
  /** Largest packet body accepted from the server (default and cap 65535). */
  maxPacketBody?: number;
}

export declare class ChanqClient {
  constructor(opts?: ClientOptions);
  readonly registry: TypeRegistry;
  /** This connection's id, set by a successful auth(). */
  connId: number;
  compressionType: number;
  /** channelId -> effective options of this connection's subscriptions. */
  readonly subscriptions: Map<number, Required<ChannelSubscriptionOptions>>;
  /** channelId -> ChannelType of those subscriptions. */
  readonly subscriptionTypes: Map<number, number>;
  /**
   * channelId -> the subscriptions this connection made itself (subToChannel for itself, result
   * received), with the options and channel type of their result: what a move subscribes again.
   * Kept across moves; subscriptions a server made are not in it.
   */
  readonly ownSubscriptions: Map<number, { options: Required<ChannelSubscriptionOptions>; channelType: number }>;
  readonly connected: boolean;
  /** True from the loss of a moving client's connection to the end of its move. */
  readonly moving: boolean;
  /** connect(urls): the list, and the index of the URL of the latest connection. */
  readonly urls: string[] | null;
  readonly urlIndex: number;
  /** Moves completed. */
  readonly moves: number;

  /**
   * ws://, wss:// (browser or Node) or tcp://host:port (Node). With an array of URLs (relay
   * nodes) the client connects to the first that answers and, when its connection is lost,
   * moves to the next: AUTH again with the same credentials, SUB again to ownSubscriptions,
   * then 'moved'. Rejects when no URL answered within opts.timeoutMs or opts.move.maxTries.
   */
  connect(url: string | string[], opts?: ConnectOptions): Promise<void>;
  disconnect(): void;

  on<K extends keyof ChanqEvents>(event: K, fn: (arg: ChanqEvents[K]) => void): () => void;
  off<K extends keyof ChanqEvents>(event: K, fn: (arg: ChanqEvents[K]) => void): void;
  once<K extends keyof ChanqEvents>(event: K, fn: (arg: ChanqEvents[K]) => void): () => void;
  /** The first event for which pred is true; rejects on close or after timeoutMs. */
  waitFor<K extends keyof ChanqEvents>(event: K, pred?: (arg: ChanqEvents[K]) => boolean,
    timeoutMs?: number): Promise<ChanqEvents[K]>;

  auth(pit: string, lt: string): Promise<AuthResultMessage>;
  createChannel(channelType: number, metadata?: string, data?: TypedValue | Any | null,
    opts?: RpcOptions & { subOptions?: ChannelSubscriptionOptions; mergeOptions?: ChannelDataMergeOptions },
  ): Promise<CreateChannelResultMessage>;
  removeChannel(channelId: number): void;
  listChannels(typeFilter?: number, metadataFilters?: string[], opts?: RpcOptions): Promise<ChannelInfo[]>;
  subToChannel(channelId: number, options?: ChannelSubscriptionOptions, connId?: number,
    opts?: RpcOptions): Promise<SubscribedToChannelResultMessage>;
  unsubFromChannel(channelId: number, connId?: number, opts?: RpcOptions):
    Promise<UnsubscribedFromChannelResultMessage>;
  updateChannelData(channelId: number, data: TypedValue | Any): void;
  sendUserMessage(channelId: number, broadcast: number, msgType: number,
    body: Uint8Array | string | TypedValue, opts?: { stubId?: number }): void;
  /** Server connections: a user message wrapped in ServerForwardMessage. */
  sendForward(channelId: number, broadcast: number, msgType: number, clientConnId: number,
    payload: Uint8Array | string | TypedValue, opts?: { stubId?: number }): void;

  // Spatial and entity channels (servers, except debugGetSpatialRegions and spatialSubscriptions).
  /** CREATE_SPATIAL_CHANNEL (or CREATE_CHANNEL{SPATIAL} with msgType 3): the slot's cells. */
  createSpatialChannels(metadata?: string, data?: TypedValue | Any | null,
    opts?: RpcOptions & { msgType?: 3 | 10; subOptions?: ChannelSubscriptionOptions;
      mergeOptions?: ChannelDataMergeOptions },
  ): Promise<CreateSpatialChannelsResultMessage>;
  /** QUERY_SPATIAL_CHANNEL: the cell of each point, 0 when off the grid. */
  querySpatialChannel(points: SpatialInfo[], opts?: RpcOptions): Promise<number[]>;
  /** UPDATE_SPATIAL_INTEREST for connId; the results go to connId as SUB/UNSUB results. */
  updateSpatialInterest(connId: number, query: SpatialQuery | SpatialInterestQuery,
    opts?: { channelId?: number; stubId?: number }): void;
  /** CREATE_ENTITY_CHANNEL; resolves with the CreateChannelResultMessage (msgType 15). */
  createEntityChannel(entityId: number, data?: TypedValue | Any | null,
    opts?: RpcOptions & { channelId?: number; metadata?: string; subOptions?: ChannelSubscriptionOptions;
      mergeOptions?: ChannelDataMergeOptions; isWellKnown?: boolean },
  ): Promise<CreateChannelResultMessage>;
  addEntityGroup(entityId: number, type: number, entities: number[]): void;
  removeEntityGroup(entityId: number, type: number, entities: number[]): void;
  /** DEBUG_GET_SPATIAL_REGIONS (chanqd --dev): every cell's region, in cell order. */
  debugGetSpatialRegions(opts?: RpcOptions): Promise<SpatialRegion[]>;
  /** This connection's SPATIAL subscriptions: cell -> options (fanOutIntervalMs = damping). */
  spatialSubscriptions(): Map<number, Required<ChannelSubscriptionOptions>>;

  /**
   * Any request by stubId; resolves with the reply carrying the same stubId (and, with
   * opts.replyTypes, one of those msgTypes).
   */
  request(channelId: number, msgType: number, body: Uint8Array, opts?: RpcOptions & { replyTypes?: number[] }):
    Promise<{ pack: MessagePack; msg: Record<string, any> | null }>;
  /** Queues one MessagePack (sent with others of the same event-loop turn in one packet). */
  send(channelId: number, msgType: number, body?: Uint8Array,
    opts?: { broadcast?: number; stubId?: number }): void;
}

export declare class TypeRegistry {
  /** Adds message types from a protobufjs Root or its JSON descriptor. */
  add(rootOrJson: Root | Record<string, unknown>): this;
  find(name: string): import('protobufjs').Type | null;
  get(name: string): import('protobufjs').Type;
  encode(name: string, value: Record<string, unknown>): Uint8Array;
  decode(name: string, bytes: Uint8Array): Record<string, any>;
  pack(name: string, value: Record<string, unknown>): Any;
  unpack(any: Any): { typeName: string; value: Record<string, any> | null };
}

// ---- framing and codec ----------------------------------------------------------------------

export declare const HEADER_SIZE: 5;
export declare const MAX_BODY_SIZE: 65535;
export declare const COMPRESSION_NONE: 0;
export declare const TYPE_URL_PREFIX: 'type.googleapis.com/';
export declare class FramingError extends Error {}
export declare function encodeFrame(body: Uint8Array): Uint8Array;
export declare class FrameReader {
  constructor(opts?: { maxBody?: number });
  readonly maxBody: number;
  /** Bytes held for an incomplete packet (never more than 5 + maxBody). */
  readonly buffered: number;
  /** The bodies of the packets this chunk completes; throws FramingError on a bad header. */
  push(chunk: Uint8Array): Uint8Array[];
}
export declare function encodePacket(messages: Partial<MessagePack>[]): Uint8Array;
export declare function decodePacket(body: Uint8Array): MessagePack[];
export declare function encodeAny(any: Any): Uint8Array;
export declare function typeNameOf(typeUrl: string): string;
export declare const channeldRoot: Root;
export declare function openTransport(url: string, opts?: ConnectOptions): Promise<Transport>;
