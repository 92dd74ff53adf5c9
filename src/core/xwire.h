/* xwire.h - a cross-worker message (cq_xmsg_t, place.h) as bytes, for a relay link record
 * (issue 23; src/relay/cq_link.h carries records as `kind | u32 len | bytes`, and these are the
 * bytes). Not a public header; for the core files that send or receive records. This
 * is the one home of the format: doc/relay-cluster.md "Records" points here.
 *
 * ---- Record format (version 1, little-endian) ----
 *
 *   0  u8  version                 1
 *   1  u8  kind                    XM_*, below XM__COUNT, never a local kind (below)
 *   2  u8  flags                   CQ_XWIRE_F_*: which optional parts follow; no other bit
 *   3  u8  conn_type
 *   4  u32 conn_id
 *   8  u32 chan_id
 *   12 u32 u1
 *   16 u32 u2
 *   20 u32 u3
 *   24 the optional parts, each present when its flag is set, in this order:
 *      F_MP    24 bytes: u32 channel_id, u32 broadcast, u32 stub_id, u32 msg_type,
 *              u32 off, u32 len: the MessagePack, whose body is body[off .. off + len);
 *              present when any of the six is non-zero; len 0 has off 0
 *      F_BODY  u32 len (>= 1), then len bytes: body[]
 *      F_BUF   u32 len, then len bytes: the buffer's bytes (len may be 0)
 *   and nothing after them.
 * Not carried: ptr (a message with one cannot leave the process, hence no XM_SCHEMA), cost
 * (the receiver's post counts it again), the inbox's queue node, and the buffer's aux and
 * capacity.
 *
 * ---- Where mp.body points ----
 *
 * A message's MessagePack body is read from the start of body[]: xm_req (core.c), the only
 * reader of mp, takes mp.body_len bytes from body[0] and ignores the pointer. Today the pointer
 * itself never points there. cq__xmsg_req and chain_post (spatial.c) copy the request's body
 * into body[] but keep the request's pointer, which points into the sender's read buffer
 * (dispatch.c), a stack buffer (interest.c) or the body[] of the message being handled. All of
 * these are gone or reused by the time the message is handled. So the encoder never
 * dereferences mp.body:
 *   - inside body[]: the slice (mp.body - body, mp.body_len), so that the decoded pointer
 *     points where the original did (no sender puts it anywhere but body[0] today);
 *   - NULL or outside body[]: (0, mp.body_len), the bytes xm_req reads.
 * Either way the slice must lie within body[]. The decoded message's mp.body points at its own
 * body[] + off, or is NULL when the message has no body, as place.h says it should.
 *
 * ---- Shapes the handlers rely on ----
 *
 * A record is decoded only into a message that its kind's handler can run safely:
 *   - SEND, FANOUT, SENDMANY and ADJACENT carry a buffer (their handlers deliver it);
 *   - CONN_GONE, CLOSE, META and DIR_ADD have no body or a NUL-terminated one (read as text);
 *     RECOVER and TOPIC_CHAN always have a NUL-terminated body (their handlers read it).
 * The encoder refuses a message that breaks these rules, so everything it encodes decodes.
 * Ids and u1..u3 are carried as they are: whether they make sense on the receiving node (a
 * worker index in XM_ROUTE, a connection that lives elsewhere) is for the sender and the
 * receiver to decide, not the codec.
 *
 * ---- Local kinds ----
 *
 * Some kinds never leave the process, and a record of one is refused both ways: XM_SCHEMA (it
 * carries a pointer) and XM_INJECT_BC / XM_INJECT_ROUTE (bridge events, inject.c: posted on
 * this node by an outside thread; a relay node refuses them before they exist, and each node's
 * bridge will inject its own). XM_NODE_* and XM_BOUNCE are not local: they exist to cross.
 *
 * Canonical: one message has exactly one encoding, and the decoder accepts nothing else, so
 * encode(decode(bytes)) == bytes for every record that decodes (the fuzz target checks it).
 */
#ifndef CQ_XWIRE_H
#define CQ_XWIRE_H

#include <stddef.h>
#include <stdint.h>

#include "cq_sbuf.h"
#include "place.h"

#define CQ_XWIRE_VERSION 1u
#define CQ_XWIRE_FIXED   24u /* bytes before the optional parts */
#define CQ_XWIRE_MP_LEN  24u

enum {
    CQ_XWIRE_F_MP = 1u,
    CQ_XWIRE_F_BODY = 2u,
    CQ_XWIRE_F_BUF = 4u,
};

/* Appends the encoding of m (borrowed) to out. Returns 0; -EINVAL with nothing appended for a
 * message that cannot leave the process (ptr set, a local kind or one not below XM__COUNT, an
 * mp slice outside body[], a shape above broken, or an encoding over UINT32_MAX bytes);
 * -ENOMEM with nothing appended. */
int cq__xwire_encode(const cq_xmsg_t *m, cq_sbuf_t *out);

/* Decodes p[0..n), exactly one encoding, into a new message (*ret, owned, from cq__xmsg_new:
 * body copied into body[], buf a new buffer holding one reference or NULL, mp.body into
 * body[], cost 0). Reads nothing past p + n and allocates at most n plus two headers. Returns
 * 0; CQ_ELINK for a malformed record (unknown version, kind or flag, a local kind, a length past
 * the end, trailing bytes, an mp slice outside body[], a non-canonical or unsafe shape);
 * -ENOMEM. *ret is set only on success. */
int cq__xwire_decode(const uint8_t *p, size_t n, cq_xmsg_t **ret);

#endif
