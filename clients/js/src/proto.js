// Protobuf side of the client: the channeldpb types (from the generated descriptor of
// proto/channeld.proto), the Packet/MessagePack envelope, google.protobuf.Any packing and a type
// registry for channel data and user message bodies.
import protobuf from 'protobufjs/light.js';
import channeldDescriptor from '../gen/channeld.js';

export const TYPE_URL_PREFIX = 'type.googleapis.com/';

/** The channeldpb root (channeldpb.* and google.protobuf.Any). */
export const channeldRoot = protobuf.Root.fromJSON(channeldDescriptor);

const Packet = channeldRoot.lookupType('channeldpb.Packet');
const Any = channeldRoot.lookupType('google.protobuf.Any');

function enumValues(name) {
  return Object.freeze({ ...channeldRoot.lookupEnum(`channeldpb.${name}`).values });
}

export const MessageType = Object.freeze({
  ...enumValues('MessageType'),
  USER_SPACE_START: 100,
});
export const BroadcastType = enumValues('BroadcastType');
export const ConnectionType = enumValues('ConnectionType');
export const ChannelType = enumValues('ChannelType');
export const CompressionType = enumValues('CompressionType');
export const ChannelDataAccess = enumValues('ChannelDataAccess');
export const AuthResult = Object.freeze({
  ...channeldRoot.lookupEnum('channeldpb.AuthResultMessage.AuthResult').values,
});

/** Plain-object conversion used for everything handed to the application. */
export const TO_OBJECT = Object.freeze({ longs: Number, enums: Number, defaults: true, arrays: true });

/** Encodes a Packet body from MessagePack objects {channelId, broadcast, stubId, msgType, msgBody}. */
export function encodePacket(messages) {
  return Packet.encode({ messages }).finish();
}

/** Decodes a Packet body into MessagePack objects with every field present (zero when absent). */
export function decodePacket(body) {
  const p = Packet.decode(body);
  return p.messages.map((m) => ({
    channelId: m.channelId,
    broadcast: m.broadcast,
    stubId: m.stubId,
    msgType: m.msgType,
    msgBody: m.msgBody,
  }));
}

/** Strips the type URL prefix: "type.googleapis.com/pkg.Msg" -> "pkg.Msg". */
export function typeNameOf(typeUrl) {
  const i = typeUrl.lastIndexOf('/');
  return i < 0 ? typeUrl : typeUrl.slice(i + 1);
}

/**
 * Message types known to the client, looked up by full name ("chatpb.ChatChannelData"). It
 * starts with channeldpb and google.protobuf.Any; add the game's own types with add().
 */
export class TypeRegistry {
  constructor() {
    this.roots = [channeldRoot];
    this.cache = new Map();
  }

  /** Adds types from a protobufjs Root or its JSON descriptor (Root#toJSON, scripts/gen-proto). */
  add(rootOrJson) {
    const root = rootOrJson instanceof protobuf.Root ? rootOrJson : protobuf.Root.fromJSON(rootOrJson);
    this.roots.push(root);
    this.cache.clear();
    return this;
  }

  /** The protobufjs Type called name, or null. */
  find(name) {
    const key = name.startsWith('.') ? name.slice(1) : name;
    if (this.cache.has(key))
      return this.cache.get(key);
    let type = null;
    for (const root of this.roots) {
      const t = root.lookup(key);
      if (t instanceof protobuf.Type) {
        type = t;
        break;
      }
    }
    this.cache.set(key, type);
    return type;
  }

  /** Like find(), but throws when the type is unknown. */
  get(name) {
    const t = this.find(name);
    if (!t)
      throw new Error(`unknown protobuf message type ${name}`);
    return t;
  }

  /** Serializes a plain object as message type name. */
  encode(name, value) {
    const t = this.get(name);
    const err = t.verify(value);
    if (err)
      throw new TypeError(`${name}: ${err}`);
    return t.encode(t.fromObject(value)).finish();
  }

  /** Parses bytes as message type name into a plain object (every field present). */
  decode(name, bytes) {
    const t = this.get(name);
    return t.toObject(t.decode(bytes), TO_OBJECT);
  }

  /** google.protobuf.Any {typeUrl, value} for a value of message type name. */
  pack(name, value) {
    return { typeUrl: TYPE_URL_PREFIX + name, value: this.encode(name, value) };
  }

  /**
   * Unpacks an Any: {typeName, value}, where value is the decoded plain object, or null when
   * the type is not registered (the raw bytes stay in any.value).
   */
  unpack(any) {
    const typeName = typeNameOf(any.typeUrl || '');
    const t = this.find(typeName);
    return { typeName, value: t ? t.toObject(t.decode(any.value), TO_OBJECT) : null };
  }
}

/** Serializes google.protobuf.Any {typeUrl, value}. */
export function encodeAny(any) {
  return Any.encode(any).finish();
}
