/* msg.c - eddy messages and their wire codec.
 *
 * Everything that comes off the wire is treated as hostile: each header
 * field is checked before any length in it is trusted, and the incremental
 * decoder sizes its buffers from a header only once that header has passed
 * the limits.  Payload bytes are copied exactly once, from the caller's
 * buffer into the buffer the message will own.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errprintf.h"
#include "msg.h"

/* Parsed, validated fixed header. */
struct hdr {
    uint8_t type;
    uint8_t flags;
    uint32_t matchtag;
    uint32_t rank;
    uint32_t errnum;
    uint32_t topic_len;
    uint32_t body_len;
    uint32_t payload_len;
};

struct msg_decoder {
    size_t max_frame;
    bool failed;
    int failed_errno;
    eddy_error_t failed_err; /* repeated by every feed after a failure */

    uint8_t hdrbuf[MSG_HEADER_SIZE];
    size_t hdr_have;
    struct hdr hdr; /* valid once hdr_have == MSG_HEADER_SIZE */

    uint8_t *meta; /* topic then body of the partial frame */
    size_t meta_have;
    uint8_t *payload; /* becomes the message's payload */
    size_t payload_have;
};

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           (uint32_t)p[3];
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | (unsigned)p[1]);
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static bool valid_type(unsigned type)
{
    return type == MSG_REQUEST || type == MSG_RESPONSE || type == MSG_EVENT;
}

/* Printable ASCII, space included, as msg.h promises. */
static bool topic_char_ok(unsigned char c)
{
    return c >= 0x20 && c <= 0x7e;
}

static bool valid_topic(const char *topic)
{
    size_t len;

    if (!topic)
        return false;
    len = strlen(topic);
    if (len == 0 || len > MSG_TOPIC_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (!topic_char_ok((unsigned char)topic[i]))
            return false;
    }
    return true;
}

static size_t frame_size(const struct hdr *h)
{
    return (size_t)MSG_HEADER_SIZE + h->topic_len + h->body_len +
           h->payload_len;
}

/* Check the first 'n' (up to 4) header bytes, which can be judged alone:
 * the stream decoder calls this as bytes trickle in, so a peer speaking
 * another protocol is rejected at once rather than after 28 bytes. */
static int check_prefix(const uint8_t *p, size_t n, eddy_error_t *err)
{
    if (n > 0 && p[0] != MSG_MAGIC) {
        errno = EPROTO;
        return errprintf(err, "msg: bad magic 0x%02x (expected 0x%02x)", p[0],
                         MSG_MAGIC);
    }
    if (n > 1 && p[1] != MSG_VERSION) {
        errno = EPROTO;
        return errprintf(err, "msg: unsupported version %u (expected %u)", p[1],
                         MSG_VERSION);
    }
    if (n > 2 && !valid_type(p[2])) {
        errno = EPROTO;
        return errprintf(err, "msg: unknown type %u", p[2]);
    }
    if (n > 3 && (p[3] & ~MSG_FLAG_MASK)) {
        errno = EPROTO;
        return errprintf(err, "msg: unknown flags 0x%02x in flags 0x%02x",
                         p[3] & ~MSG_FLAG_MASK, p[3]);
    }
    return 0;
}

/* Check the fixed header at 'p' and fill 'h'.  Fields are checked in wire
 * order so the first bad one is the one reported. */
static int parse_header(const uint8_t *p,
                        size_t max_frame,
                        struct hdr *h,
                        eddy_error_t *err)
{
    uint16_t reserved;

    if (check_prefix(p, 4, err) < 0)
        return -1;
    h->type = p[2];
    h->flags = p[3];
    h->matchtag = get32(p + 4);
    h->rank = get32(p + 8);
    h->errnum = get32(p + 12);
    h->topic_len = get16(p + 16);
    reserved = get16(p + 18);
    h->body_len = get32(p + 20);
    h->payload_len = get32(p + 24);

    if (h->topic_len == 0) {
        errno = EPROTO;
        return errprintf(err, "msg: topic_len is 0 (a topic is required)");
    }
    if (h->topic_len > MSG_TOPIC_MAX) {
        errno = EMSGSIZE;
        return errprintf(err, "msg: topic_len %u exceeds %u",
                         (unsigned)h->topic_len, (unsigned)MSG_TOPIC_MAX);
    }
    if (reserved != 0) {
        errno = EPROTO;
        return errprintf(err, "msg: reserved is 0x%04x, must be 0",
                         (unsigned)reserved);
    }
    if (h->body_len > MSG_BODY_MAX) {
        errno = EMSGSIZE;
        return errprintf(err, "msg: body_len %u exceeds %u",
                         (unsigned)h->body_len, (unsigned)MSG_BODY_MAX);
    }
    if (h->payload_len > MSG_PAYLOAD_MAX) {
        errno = EMSGSIZE;
        return errprintf(err, "msg: payload_len %u exceeds %u",
                         (unsigned)h->payload_len, (unsigned)MSG_PAYLOAD_MAX);
    }
    if (frame_size(h) > max_frame) {
        errno = EMSGSIZE;
        return errprintf(err, "msg: frame of %zu bytes exceeds limit %zu",
                         frame_size(h), max_frame);
    }
    return 0;
}

static const char *json_typename(const json_t *o)
{
    switch (json_typeof(o)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

static msg_t *msg_alloc(int type, const char *topic, size_t topic_len)
{
    msg_t *msg = calloc(1, sizeof(*msg));

    if (!msg)
        return NULL;
    if (!(msg->topic = malloc(topic_len + 1))) {
        free(msg);
        errno = ENOMEM;
        return NULL;
    }
    memcpy(msg->topic, topic, topic_len);
    msg->topic[topic_len] = '\0';
    msg->refcount = 1;
    msg->type = (uint8_t)type;
    return msg;
}

/* Build a message from a validated header, 'meta' (topic then body) and
 * the payload: either 'payload_owned' (a malloc'ed buffer that is consumed,
 * also on failure) or a copy of 'payload_src'. */
static int build_msg(const struct hdr *h,
                     const uint8_t *meta,
                     const void *payload_src,
                     void *payload_owned,
                     msg_t **msgp,
                     eddy_error_t *err)
{
    const uint8_t *body = meta + h->topic_len;
    json_t *o = NULL;
    msg_t *msg;

    for (uint32_t i = 0; i < h->topic_len; i++) {
        if (!topic_char_ok(meta[i])) {
            errno = EPROTO;
            errprintf(err,
                      "msg: topic byte %u is 0x%02x, not printable "
                      "ASCII",
                      (unsigned)i, meta[i]);
            goto error;
        }
    }
    if (h->body_len > 0) {
        json_error_t jerr;

        if (memchr(body, '\0', h->body_len)) {
            errno = EPROTO;
            errprintf(err, "msg: body contains a NUL byte");
            goto error;
        }
        o = json_loadb((const char *)body, h->body_len,
                       JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
        if (!o) {
            errno = EPROTO;
            errprintf(err, "msg: body is not valid JSON: %s (offset %d)",
                      jerr.text, jerr.position);
            goto error;
        }
        if (!json_is_object(o)) {
            errno = EPROTO;
            errprintf(err, "msg: body is a JSON %s, not an object",
                      json_typename(o));
            goto error;
        }
    }
    if (!(msg = msg_alloc(h->type, (const char *)meta, h->topic_len))) {
        errprintf(err, "msg: out of memory");
        goto error;
    }
    if (h->payload_len > 0 && !payload_owned) {
        if (!(payload_owned = malloc(h->payload_len))) {
            msg_decref(msg);
            errno = ENOMEM;
            errprintf(err, "msg: out of memory for a %u-byte payload",
                      (unsigned)h->payload_len);
            goto error;
        }
        memcpy(payload_owned, payload_src, h->payload_len);
    }
    msg->flags = h->flags;
    msg->matchtag = h->matchtag;
    msg->rank = h->rank;
    msg->errnum = h->errnum;
    msg->body = o;
    msg->payload = h->payload_len > 0 ? payload_owned : NULL;
    msg->payload_len = h->payload_len;
    if (h->payload_len == 0)
        free(payload_owned);
    *msgp = msg;
    return 0;
error:
    json_decref(o);
    free(payload_owned);
    return -1;
}

msg_t *msg_create(int type,
                  const char *topic,
                  json_t *body,
                  const void *payload,
                  size_t payload_len)
{
    msg_t *msg = NULL;

    if (!valid_type((unsigned)type) || !valid_topic(topic) ||
        (body && !json_is_object(body)) || (payload_len > 0 && !payload) ||
        payload_len > MSG_PAYLOAD_MAX) {
        errno = EINVAL;
        goto error;
    }
    if (!(msg = msg_alloc(type, topic, strlen(topic))))
        goto error;
    if (payload_len > 0) {
        if (!(msg->payload = malloc(payload_len))) {
            errno = ENOMEM;
            goto error;
        }
        memcpy(msg->payload, payload, payload_len);
        msg->payload_len = payload_len;
    }
    msg->body = body;
    return msg;
error:
    msg_decref(msg);
    json_decref(body);
    return NULL;
}

msg_t *msg_create_shared(int type,
                         const char *topic,
                         json_t *body,
                         const msg_t *owner)
{
    msg_t *msg;

    if (!owner) {
        json_decref(body);
        errno = EINVAL;
        return NULL;
    }
    if (!(msg = msg_create(type, topic, body, NULL, 0)))
        return NULL;
    if (owner->payload_len > 0) {
        msg->payload_owner = msg_incref((msg_t *)owner);
        msg->payload = owner->payload;
        msg->payload_len = owner->payload_len;
    }
    return msg;
}

msg_t *msg_incref(msg_t *msg)
{
    if (msg)
        msg->refcount++;
    return msg;
}

void msg_decref(msg_t *msg)
{
    int saved_errno = errno;

    if (msg && --msg->refcount <= 0) {
        free(msg->topic);
        json_decref(msg->body);
        if (msg->payload_owner)
            msg_decref(msg->payload_owner);
        else
            free(msg->payload);
        free(msg);
    }
    errno = saved_errno;
}

msg_t *msg_create_response(const msg_t *req, json_t *body)
{
    msg_t *msg;

    if (!req) {
        json_decref(body);
        errno = EINVAL;
        return NULL;
    }
    if (!(msg = msg_create(MSG_RESPONSE, req->topic, body, NULL, 0)))
        return NULL;
    msg->matchtag = req->matchtag;
    /* The request's target is the response's sender. */
    msg->rank = req->rank;
    return msg;
}

/* json_string() refuses text that is not UTF-8; an error message must
 * still get through, so fall back to ASCII with '?' for other bytes. */
static json_t *errstr_string(const char *text)
{
    json_t *s;
    char *copy;
    size_t len;

    if ((s = json_string(text)))
        return s;
    len = strlen(text);
    if (!(copy = malloc(len + 1)))
        return NULL;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        copy[i] = c < 0x80 ? (char)c : '?';
    }
    copy[len] = '\0';
    s = json_string(copy);
    free(copy);
    return s;
}

msg_t *msg_create_error(const msg_t *req, int errnum, const char *text)
{
    json_t *body = NULL;
    msg_t *msg;

    if (!req) {
        errno = EINVAL;
        return NULL;
    }
    if (text) {
        json_t *s;

        if (!(body = json_object()) || !(s = errstr_string(text)) ||
            json_object_set_new(body, "errstr", s) < 0) {
            json_decref(body);
            errno = ENOMEM;
            return NULL;
        }
    }
    if (!(msg = msg_create_response(req, body)))
        return NULL;
    msg->errnum = (uint32_t)errnum;
    return msg;
}

const char *msg_errstr(const msg_t *msg)
{
    if (!msg || !msg->body)
        return NULL;
    return json_string_value(json_object_get(msg->body, "errstr"));
}

/* The frame's bytes, or all but its payload, into a new buffer. */
static int encode(const msg_t *msg, bool with_payload, void **buf, size_t *len)
{
    char *body = NULL;
    size_t body_len = 0;
    size_t topic_len;
    size_t total;
    uint8_t *p;

    if (!msg || !buf || !len || !valid_type(msg->type) ||
        (msg->flags & ~MSG_FLAG_MASK) || !valid_topic(msg->topic) ||
        (msg->body && !json_is_object(msg->body)) ||
        (msg->payload_len > 0 && !msg->payload) ||
        msg->payload_len > MSG_PAYLOAD_MAX) {
        errno = EINVAL;
        return -1;
    }
    if (msg->body) {
        /* Only fails on memory or a structure jansson cannot encode. */
        if (!(body = json_dumps(msg->body, JSON_COMPACT))) {
            errno = EINVAL;
            return -1;
        }
        body_len = strlen(body);
        if (body_len > MSG_BODY_MAX) {
            free(body);
            errno = EINVAL;
            return -1;
        }
    }
    topic_len = strlen(msg->topic);
    total = MSG_HEADER_SIZE + topic_len + body_len +
            (with_payload ? msg->payload_len : 0);
    if (!(p = malloc(total))) {
        free(body);
        errno = ENOMEM;
        return -1;
    }
    p[0] = MSG_MAGIC;
    p[1] = MSG_VERSION;
    p[2] = msg->type;
    p[3] = msg->flags;
    put32(p + 4, msg->matchtag);
    put32(p + 8, msg->rank);
    put32(p + 12, msg->errnum);
    put16(p + 16, (uint16_t)topic_len);
    put16(p + 18, 0);
    put32(p + 20, (uint32_t)body_len);
    put32(p + 24, (uint32_t)msg->payload_len);
    memcpy(p + MSG_HEADER_SIZE, msg->topic, topic_len);
    if (body_len > 0)
        memcpy(p + MSG_HEADER_SIZE + topic_len, body, body_len);
    if (with_payload && msg->payload_len > 0)
        memcpy(p + MSG_HEADER_SIZE + topic_len + body_len, msg->payload,
               msg->payload_len);
    free(body);
    *buf = p;
    *len = total;
    return 0;
}

int msg_encode(const msg_t *msg, void **buf, size_t *len)
{
    return encode(msg, true, buf, len);
}

int msg_encode_head(const msg_t *msg, void **buf, size_t *len)
{
    return encode(msg, false, buf, len);
}

int msg_decode(const void *buf, size_t len, msg_t **msgp, eddy_error_t *err)
{
    const uint8_t *p = buf;
    struct hdr h;

    if (!msgp || (!buf && len > 0)) {
        errno = EINVAL;
        return errprintf(err, "msg: invalid argument");
    }
    if (len < MSG_HEADER_SIZE) {
        errno = EPROTO;
        return errprintf(err,
                         "msg: frame of %zu bytes is shorter than the "
                         "%d-byte header",
                         len, MSG_HEADER_SIZE);
    }
    if (parse_header(p, MSG_FRAME_MAX, &h, err) < 0)
        return -1;
    if (frame_size(&h) != len) {
        errno = EPROTO;
        return errprintf(err,
                         "msg: frame is %zu bytes but its header "
                         "announces %zu",
                         len, frame_size(&h));
    }
    return build_msg(&h, p + MSG_HEADER_SIZE,
                     p + MSG_HEADER_SIZE + h.topic_len + h.body_len, NULL, msgp,
                     err);
}

static size_t clamp_max_frame(size_t max_frame)
{
    if (max_frame == 0 || max_frame > MSG_FRAME_MAX)
        return MSG_FRAME_MAX;
    return max_frame;
}

msg_decoder_t *msg_decoder_create(size_t max_frame)
{
    msg_decoder_t *d = calloc(1, sizeof(*d));

    if (!d)
        return NULL;
    d->max_frame = clamp_max_frame(max_frame);
    return d;
}

static void decoder_reset(msg_decoder_t *d)
{
    free(d->meta);
    free(d->payload);
    d->meta = NULL;
    d->payload = NULL;
    d->hdr_have = 0;
    d->meta_have = 0;
    d->payload_have = 0;
}

void msg_decoder_destroy(msg_decoder_t *d)
{
    int saved_errno = errno;

    if (d) {
        decoder_reset(d);
        free(d);
    }
    errno = saved_errno;
}

void msg_decoder_set_max_frame(msg_decoder_t *d, size_t max_frame)
{
    if (d)
        d->max_frame = clamp_max_frame(max_frame);
}

size_t msg_decoder_pending(const msg_decoder_t *d)
{
    if (!d)
        return 0;
    return d->hdr_have + d->meta_have + d->payload_have;
}

size_t msg_decoder_frame_size(const msg_decoder_t *d)
{
    if (!d || d->failed || d->hdr_have < MSG_HEADER_SIZE)
        return 0;
    return frame_size(&d->hdr);
}

/* Enter the failed state, remembering errno and the message so that later
 * feeds report the same error. */
static int decoder_fail(msg_decoder_t *d, eddy_error_t *err)
{
    int saved_errno = errno;

    decoder_reset(d);
    d->failed = true;
    d->failed_errno = saved_errno;
    if (err)
        d->failed_err = *err;
    else
        snprintf(d->failed_err.text, sizeof(d->failed_err.text), "msg: %s",
                 strerror(saved_errno));
    errno = saved_errno;
    return -1;
}

/* The header in d->hdrbuf is complete: check it and allocate the buffers
 * for the rest of the frame, now that the sizes are known to be bounded. */
static int decoder_start_frame(msg_decoder_t *d, eddy_error_t *err)
{
    size_t meta_len;

    if (parse_header(d->hdrbuf, d->max_frame, &d->hdr, err) < 0)
        return -1;
    meta_len = d->hdr.topic_len + d->hdr.body_len;
    if (!(d->meta = malloc(meta_len)) ||
        (d->hdr.payload_len > 0 &&
         !(d->payload = malloc(d->hdr.payload_len)))) {
        errno = ENOMEM;
        return errprintf(err, "msg: out of memory for a %zu-byte frame",
                         frame_size(&d->hdr));
    }
    return 0;
}

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* The partial frame is complete: make the message and deliver it. */
static int decoder_finish(msg_decoder_t *d,
                          msg_decoder_f cb,
                          void *arg,
                          eddy_error_t *e)
{
    void *payload = d->payload;
    msg_t *msg;

    /* build_msg consumes the payload buffer either way. */
    d->payload = NULL;
    if (build_msg(&d->hdr, d->meta, NULL, payload, &msg, e) < 0)
        return decoder_fail(d, e);
    /* Ready for the next frame before the callback runs. */
    decoder_reset(d);
    cb(msg, arg);
    return 0;
}

int msg_decoder_feed(msg_decoder_t *d,
                     const void *data,
                     size_t len,
                     msg_decoder_f cb,
                     void *arg,
                     eddy_error_t *err)
{
    const uint8_t *p = data;
    eddy_error_t tmp;
    eddy_error_t *e = err ? err : &tmp;

    if (!d || !cb || (!data && len > 0)) {
        errno = EINVAL;
        return errprintf(err, "msg: invalid argument");
    }
    if (d->failed) {
        if (err)
            *err = d->failed_err;
        errno = d->failed_errno;
        return -1;
    }
    while (len > 0) {
        msg_t *msg;

        if (d->hdr_have == 0 && len >= MSG_HEADER_SIZE) {
            /* Fast path: a whole frame in the caller's buffer is decoded
             * in place, without staging it in ours. */
            struct hdr h;
            size_t n;

            if (parse_header(p, d->max_frame, &h, e) < 0)
                return decoder_fail(d, e);
            n = frame_size(&h);
            if (len >= n) {
                if (build_msg(&h, p + MSG_HEADER_SIZE,
                              p + MSG_HEADER_SIZE + h.topic_len + h.body_len,
                              NULL, &msg, e) < 0)
                    return decoder_fail(d, e);
                p += n;
                len -= n;
                cb(msg, arg);
                continue;
            }
        }
        if (d->hdr_have < MSG_HEADER_SIZE) {
            size_t n = min_size(MSG_HEADER_SIZE - d->hdr_have, len);

            memcpy(d->hdrbuf + d->hdr_have, p, n);
            d->hdr_have += n;
            p += n;
            len -= n;
            if (d->hdr_have < MSG_HEADER_SIZE) {
                if (check_prefix(d->hdrbuf, d->hdr_have, e) < 0)
                    return decoder_fail(d, e);
                break;
            }
            if (decoder_start_frame(d, e) < 0)
                return decoder_fail(d, e);
        }
        size_t meta_len = d->hdr.topic_len + d->hdr.body_len;
        if (d->meta_have < meta_len) {
            size_t n = min_size(meta_len - d->meta_have, len);

            memcpy(d->meta + d->meta_have, p, n);
            d->meta_have += n;
            p += n;
            len -= n;
        }
        if (d->meta_have == meta_len && d->payload_have < d->hdr.payload_len) {
            size_t n = min_size(d->hdr.payload_len - d->payload_have, len);

            memcpy(d->payload + d->payload_have, p, n);
            d->payload_have += n;
            p += n;
            len -= n;
        }
        if (d->meta_have == meta_len && d->payload_have == d->hdr.payload_len &&
            decoder_finish(d, cb, arg, e) < 0)
            return -1;
    }
    return 0;
}

size_t msg_decoder_payload_room(msg_decoder_t *d, void **ptr)
{
    if (!d || d->failed || d->hdr_have < MSG_HEADER_SIZE ||
        d->meta_have < (size_t)d->hdr.topic_len + d->hdr.body_len ||
        d->payload_have >= d->hdr.payload_len)
        return 0;
    *ptr = d->payload + d->payload_have;
    return d->hdr.payload_len - d->payload_have;
}

int msg_decoder_payload_filled(
    msg_decoder_t *d, size_t n, msg_decoder_f cb, void *arg, eddy_error_t *err)
{
    eddy_error_t tmp;
    void *ptr;

    if (!d || !cb || n == 0 || n > msg_decoder_payload_room(d, &ptr)) {
        errno = EINVAL;
        return errprintf(err, "msg: invalid argument");
    }
    d->payload_have += n;
    if (d->payload_have == d->hdr.payload_len)
        return decoder_finish(d, cb, arg, err ? err : &tmp);
    return 0;
}

const char *msg_typestr(int type)
{
    switch (type) {
    case MSG_REQUEST:
        return "request";
    case MSG_RESPONSE:
        return "response";
    case MSG_EVENT:
        return "event";
    }
    return "unknown";
}

void msg_describe(const msg_t *msg, char *buf, size_t size)
{
    char rank[16];
    char errnum[24] = "";
    size_t body_len = 0;

    if (!buf || size == 0)
        return;
    if (!msg) {
        snprintf(buf, size, "(null)");
        return;
    }
    if (msg->rank == MSG_RANK_ANY)
        snprintf(rank, sizeof(rank), "any");
    else if (msg->rank == MSG_RANK_UPSTREAM)
        snprintf(rank, sizeof(rank), "upstream");
    else
        snprintf(rank, sizeof(rank), "%u", (unsigned)msg->rank);
    if (msg->errnum != 0)
        snprintf(errnum, sizeof(errnum), " errnum=%u", (unsigned)msg->errnum);
    /* Size without building the text: json_dumpb with no buffer. */
    if (msg->body)
        body_len = json_dumpb(msg->body, NULL, 0, JSON_COMPACT);
    snprintf(buf, size,
             "%s topic=%s tag=%u rank=%s flags=0x%x%s body=%zu "
             "payload=%zu",
             msg_typestr(msg->type), msg->topic ? msg->topic : "(null)",
             (unsigned)msg->matchtag, rank, (unsigned)msg->flags, errnum,
             body_len, msg->payload_len);
}
