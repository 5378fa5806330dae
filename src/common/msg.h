/* msg.h - eddy messages and their wire codec (pure: no I/O).
 *
 * A frame on the wire is a fixed 28-byte header in network byte order,
 * then the topic (no NUL), the JSON body (text, no NUL) and a raw payload:
 *
 *   off size field
 *    0   1   magic       MSG_MAGIC (0xED)
 *    1   1   version     MSG_VERSION (1)
 *    2   1   type        MSG_REQUEST | MSG_RESPONSE | MSG_EVENT
 *    3   1   flags       MSG_FLAG_*
 *    4   4   matchtag    pairs responses with requests (per connection)
 *    8   4   rank        requests: target rank; responses/events: sender
 *   12   4   errnum      0, or the errno of a failed response
 *   16   2   topic_len   1..MSG_TOPIC_MAX
 *   18   2   reserved    must be 0
 *   20   4   body_len    0..MSG_BODY_MAX (0 means no body, i.e. {})
 *   24   4   payload_len 0..MSG_PAYLOAD_MAX
 *
 * Lifecycle of a message:
 *  1. msg_create() or msg_decode() makes one with refcount 1.
 *  2. msg_incref()/msg_decref() share it (e.g. an event queued on many
 *     connections); the last decref frees it.
 *  3. msg_encode() produces the frame bytes, msg_decoder_feed() turns a
 *     byte stream back into messages.
 *
 * Invariants: topic is a NUL-terminated string of printable ASCII; body is
 * NULL or a JSON object; payload is NULL iff payload_len is 0.
 */
#ifndef EDDY_COMMON_MSG_H
#define EDDY_COMMON_MSG_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "eddy/core.h"

#define MSG_MAGIC 0xED
#define MSG_VERSION 1
#define MSG_HEADER_SIZE 28

/* Limits, so that a peer can never make us allocate without bound. */
#define MSG_TOPIC_MAX 255           /* topics are short service names */
#define MSG_BODY_MAX (4u << 20)     /* JSON is for metadata, not bulk */
#define MSG_PAYLOAD_MAX (16u << 20) /* bulk chunks (bcast) fit easily */
#define MSG_FRAME_MAX                                                          \
    (MSG_HEADER_SIZE + MSG_TOPIC_MAX + MSG_BODY_MAX + MSG_PAYLOAD_MAX)

enum msg_type {
    MSG_REQUEST = 1,
    MSG_RESPONSE = 2,
    MSG_EVENT = 3,
};

enum msg_flags {
    MSG_FLAG_STREAMING = 0x01,  /* request: many responses wanted */
    MSG_FLAG_EOS = 0x02,        /* response: the last of a stream */
    MSG_FLAG_NORESPONSE = 0x04, /* request: send no response */
    MSG_FLAG_CANCEL = 0x08,     /* request: cancel the request with the
                                   same matchtag on this connection */
};
#define MSG_FLAG_MASK 0x0f

/* Special target ranks (see eddy/core.h): the first broker to see such a
 * request rewrites it to a real rank. */
#define MSG_RANK_ANY EDDY_RANK_ANY
#define MSG_RANK_UPSTREAM EDDY_RANK_UPSTREAM

typedef struct msg {
    int refcount;
    uint8_t type;
    uint8_t flags;
    uint32_t matchtag;
    uint32_t rank;
    uint32_t errnum;
    char *topic;
    json_t *body;  /* NULL or a JSON object; owned */
    void *payload; /* owned, unless payload_owner is set */
    size_t payload_len;
    struct msg *payload_owner; /* msg_create_shared(): whose payload this
                                  is (a reference held); else NULL */
} msg_t;

/* Create a message.  'body' may be NULL; its reference is stolen (also on
 * failure).  'payload' is copied.  NULL with errno EINVAL (bad type, topic
 * or body not an object) or ENOMEM. */
msg_t *msg_create(int type,
                  const char *topic,
                  json_t *body,
                  const void *payload,
                  size_t payload_len);

msg_t *msg_incref(msg_t *msg);
void msg_decref(msg_t *msg); /* accepts NULL, leaves errno alone */

/* A response to 'req': same matchtag and topic, MSG_RESPONSE, no flags.
 * 'body' is stolen as in msg_create(). */
msg_t *msg_create_response(const msg_t *req, json_t *body);

/* An error response to 'req' with errnum and, if 'text' is not NULL, body
 * {"errstr": text}. */
msg_t *msg_create_error(const msg_t *req, int errnum, const char *text);

/* The "errstr" of an error response, or NULL. */
const char *msg_errstr(const msg_t *msg);

/* Encode into a new buffer (caller frees '*buf').  -1 with errno EINVAL
 * (message breaks a limit or an invariant) or ENOMEM. */
int msg_encode(const msg_t *msg, void **buf, size_t *len);

/* Like msg_create() with the payload of 'owner' shared, not copied: the
 * new message holds a reference to 'owner' (messages are not changed once
 * made, so bulk data can be passed on to many without a copy each).
 * 'body' is stolen.  NULL with errno as msg_create(). */
msg_t *msg_create_shared(int type,
                         const char *topic,
                         json_t *body,
                         const msg_t *owner);

/* Like msg_encode() without the payload: the frame's first bytes (whose
 * header still counts the payload), for a sender that writes
 * msg->payload itself right after them (no copy of bulk data). */
int msg_encode_head(const msg_t *msg, void **buf, size_t *len);

/* Decode exactly one frame occupying all of buf[0..len).  On failure -1
 * with errno EPROTO (malformed: the message says which field and why),
 * EMSGSIZE (a length over its limit) or ENOMEM, and '*msgp' untouched. */
int msg_decode(const void *buf, size_t len, msg_t **msgp, eddy_error_t *err);

/* Incremental decoder for a byte stream.
 *  1. msg_decoder_create(max_frame) (0 = MSG_FRAME_MAX)
 *  2. msg_decoder_feed() any split of the stream; each complete frame is
 *     decoded and passed to 'cb' (which owns the message).  The decoder
 *     buffers at most one partial frame, never more than max_frame bytes.
 *  3. After a protocol error the decoder stays failed: every further feed
 *     returns -1 (the connection must be closed).
 *  4. msg_decoder_destroy().
 */
typedef struct msg_decoder msg_decoder_t;
typedef void (*msg_decoder_f)(msg_t *msg, void *arg);

msg_decoder_t *msg_decoder_create(size_t max_frame);
void msg_decoder_destroy(msg_decoder_t *d);
int msg_decoder_feed(msg_decoder_t *d,
                     const void *data,
                     size_t len,
                     msg_decoder_f cb,
                     void *arg,
                     eddy_error_t *err);

/* Reading a large payload straight into place (no copy through a read
 * buffer): while the decoder is inside a frame's payload, the room left in
 * it, with '*ptr' where the next byte goes; 0 otherwise (then feed bytes
 * with msg_decoder_feed()).  The room stays valid until the next call of
 * either function. */
size_t msg_decoder_payload_room(msg_decoder_t *d, void **ptr);

/* 'n' bytes (1 .. the room) were written at the room's start: account for
 * them, and deliver the frame through 'cb' if they complete it.  0, or -1
 * with errno (EINVAL for a bad 'n'; a frame that cannot be built fails the
 * decoder as msg_decoder_feed() does). */
int msg_decoder_payload_filled(
    msg_decoder_t *d, size_t n, msg_decoder_f cb, void *arg, eddy_error_t *err);
/* Change the largest frame accepted (0 = MSG_FRAME_MAX) for frames whose
 * header has not been seen yet, e.g. raise it once a peer authenticated. */
void msg_decoder_set_max_frame(msg_decoder_t *d, size_t max_frame);
/* Bytes of an incomplete frame currently buffered. */
size_t msg_decoder_pending(const msg_decoder_t *d);
/* Total size of the incomplete frame being buffered, once its header is
 * complete (0 before that, or between frames): with pending(), says how
 * much of a frame a peer sent before hanging up. */
size_t msg_decoder_frame_size(const msg_decoder_t *d);

/* One line describing a message, for EDDY_TRACE and logs:
 * "request topic=broker.ping tag=3 rank=5 flags=0x1 body=27 payload=0". */
void msg_describe(const msg_t *msg, char *buf, size_t size);

const char *msg_typestr(int type);

#endif /* !EDDY_COMMON_MSG_H */
