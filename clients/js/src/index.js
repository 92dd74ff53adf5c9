// @chanq/client: a JavaScript client for chanqd (channeld wire protocol) over WebSocket.
export {
  TOPIC_ACK,
  TOPIC_DEDUP_WINDOW,
  TOPIC_MAX_POSITIONS,
  TOPIC_RESUME,
  TOPIC_RESUME_RESULT,
  TopicTracker,
  chanqpbRoot,
  decodeTopicEvent,
} from './bridge.js';
export { ChanqClient, ChanqError, MOVE_DEFAULTS, moveBackoffMs } from './client.js';
export {
  COMPRESSION_NONE,
  FrameReader,
  FramingError,
  HEADER_SIZE,
  MAX_BODY_SIZE,
  encodeFrame,
} from './framing.js';
export {
  AuthResult,
  BroadcastType,
  ChannelDataAccess,
  ChannelType,
  CompressionType,
  ConnectionType,
  MessageType,
  TYPE_URL_PREFIX,
  TypeRegistry,
  channeldRoot,
  decodePacket,
  encodeAny,
  encodePacket,
  typeNameOf,
} from './proto.js';
export { EntityGroupType, dampingIntervalMs, spatialQuery, unpackNested } from './spatial.js';
export { openTransport } from './transport.js';
