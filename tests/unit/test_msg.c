/* test_msg.c - message codec: round trips, hostile frames, the stream
 * decoder under every split of its input, refcounting. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "src/common/msg.h"

/* Compare everything that travels on the wire. */
static void assert_msg_equal(const msg_t *a, const msg_t *b)
{
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->flags, b->flags);
    assert_int_equal(a->matchtag, b->matchtag);
    assert_int_equal(a->rank, b->rank);
    assert_int_equal(a->errnum, b->errnum);
    assert_string_equal(a->topic, b->topic);
    if (a->body == NULL || b->body == NULL)
        assert_ptr_equal(a->body, b->body);
    else
        assert_true(json_equal(a->body, b->body));
    assert_int_equal(a->payload_len, b->payload_len);
    if (a->payload_len > 0)
        assert_memory_equal(a->payload, b->payload, a->payload_len);
    else {
        assert_null(a->payload);
        assert_null(b->payload);
    }
}

static msg_t *roundtrip(const msg_t *m)
{
    void *buf;
    size_t len;
    msg_t *out = NULL;
    eddy_error_t err = {{0}};

    assert_int_equal(msg_encode(m, &buf, &len), 0);
    if (msg_decode(buf, len, &out, &err) < 0)
        fail_msg("decode: %s", err.text);
    free(buf);
    return out;
}

static void test_roundtrip_all(void **state)
{
    char topic[MSG_TOPIC_MAX + 1];
    uint8_t payload[100];

    memset(topic, 'x', MSG_TOPIC_MAX);
    topic[MSG_TOPIC_MAX] = '\0';
    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)(i * 7);

    for (int type = MSG_REQUEST; type <= MSG_EVENT; type++) {
        for (int flags = 0; flags <= MSG_FLAG_MASK; flags++) {
            for (int variant = 0; variant < 4; variant++) {
                json_t *body = NULL;
                size_t plen = 0;
                if (variant & 1)
                    body = json_pack("{s:i s:s s:[i,f] s:{}}", "a", 1, "s",
                                     "h\u00e9llo \"q\"", "l", 2, 2.5, "o");
                if (variant & 2)
                    plen = sizeof(payload);
                msg_t *m = msg_create(type, flags & 1 ? topic : "svc.ping",
                                      body, payload, plen);
                assert_non_null(m);
                m->flags = (uint8_t)flags;
                m->matchtag = 0xdeadbeef;
                m->rank = flags & 2 ? MSG_RANK_ANY : 42;
                m->errnum = type == MSG_RESPONSE ? ENOENT : 0;
                msg_t *out = roundtrip(m);
                assert_msg_equal(m, out);
                msg_decref(out);
                msg_decref(m);
            }
        }
    }
}

static void test_create_invalid(void **state)
{
    char big[MSG_TOPIC_MAX + 2];
    uint8_t x = 1;

    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';

    errno = 0;
    assert_null(msg_create(0, "t", NULL, NULL, 0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(msg_create(4, "t", NULL, NULL, 0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(msg_create(MSG_REQUEST, NULL, NULL, NULL, 0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(msg_create(MSG_REQUEST, "", NULL, NULL, 0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(msg_create(MSG_REQUEST, big, NULL, NULL, 0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(msg_create(MSG_REQUEST, "a\tb", NULL, NULL, 0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(msg_create(MSG_REQUEST, "caf\xc3\xa9", NULL, NULL, 0));
    assert_int_equal(errno, EINVAL);
    /* A non-object body is rejected, and still stolen (ASan: no leak). */
    errno = 0;
    assert_null(msg_create(MSG_REQUEST, "t", json_array(), NULL, 0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(msg_create(MSG_REQUEST, "t", json_object(), NULL, 5));
    assert_int_equal(errno, EINVAL);

    /* payload_len 0 means no payload whatever the pointer. */
    msg_t *m = msg_create(MSG_EVENT, "t", NULL, &x, 0);
    assert_non_null(m);
    assert_null(m->payload);
    assert_int_equal(m->payload_len, 0);
    msg_decref(m);
}

static void test_encode_invalid(void **state)
{
    msg_t *m = msg_create(MSG_REQUEST, "t", NULL, NULL, 0);
    void *buf = (void *)1;
    size_t len = 7;

    assert_non_null(m);
    m->flags = 0x10;
    errno = 0;
    assert_int_equal(msg_encode(m, &buf, &len), -1);
    assert_int_equal(errno, EINVAL);
    assert_ptr_equal(buf, (void *)1);
    assert_int_equal(len, 7);
    m->flags = 0;
    m->type = 9;
    errno = 0;
    assert_int_equal(msg_encode(m, &buf, &len), -1);
    assert_int_equal(errno, EINVAL);
    m->type = MSG_REQUEST;
    m->payload_len = 10; /* payload NULL: breaks the invariant */
    errno = 0;
    assert_int_equal(msg_encode(m, &buf, &len), -1);
    assert_int_equal(errno, EINVAL);
    m->payload_len = 0;
    assert_int_equal(msg_encode(m, &buf, &len), 0);
    assert_int_equal(len, MSG_HEADER_SIZE + 1);
    free(buf);
    msg_decref(m);
}

/* Build a raw frame with explicit fields (no validation). */
static size_t raw_frame(uint8_t *out,
                        size_t size,
                        const uint8_t hdr4[4],
                        uint16_t topic_len_field,
                        uint16_t reserved,
                        uint32_t body_len_field,
                        uint32_t payload_len_field,
                        const char *rest,
                        size_t rest_len)
{
    assert_true(size >= MSG_HEADER_SIZE + rest_len);
    memset(out, 0, MSG_HEADER_SIZE);
    memcpy(out, hdr4, 4);
    out[4] = 0;
    out[7] = 9; /* matchtag 9 */
    out[16] = (uint8_t)(topic_len_field >> 8);
    out[17] = (uint8_t)topic_len_field;
    out[18] = (uint8_t)(reserved >> 8);
    out[19] = (uint8_t)reserved;
    for (int i = 0; i < 4; i++) {
        out[20 + i] = (uint8_t)(body_len_field >> (24 - 8 * i));
        out[24 + i] = (uint8_t)(payload_len_field >> (24 - 8 * i));
    }
    memcpy(out + MSG_HEADER_SIZE, rest, rest_len);
    return MSG_HEADER_SIZE + rest_len;
}

static const uint8_t good4[4] = {MSG_MAGIC, MSG_VERSION, MSG_REQUEST, 0};

static void count_cb(msg_t *msg, void *arg)
{
    (*(int *)arg)++;
    msg_decref(msg);
}

static void expect_decode_error(const uint8_t *buf,
                                size_t len,
                                int errnum,
                                const char *needle)
{
    msg_t *m = (msg_t *)0x1;
    eddy_error_t err = {{0}};

    errno = 0;
    assert_int_equal(msg_decode(buf, len, &m, &err), -1);
    if (errno != errnum || !strstr(err.text, needle))
        fail_msg("expected errno %d and '%s', got errno %d '%s'", errnum,
                 needle, errno, err.text);
    assert_ptr_equal(m, (msg_t *)0x1);

    /* The stream decoder reports the same error. */
    msg_decoder_t *d = msg_decoder_create(0);
    assert_non_null(d);
    memset(&err, 0, sizeof(err));
    errno = 0;
    int count = 0;
    int rc = msg_decoder_feed(d, buf, len, count_cb, &count, &err);
    /* Short or mismatched lengths are just a partial stream to it. */
    if (len >= MSG_HEADER_SIZE && strstr(needle, "announces") == NULL &&
        strstr(needle, "shorter") == NULL) {
        assert_int_equal(rc, -1);
        assert_int_equal(count, 0);
        assert_int_equal(errno, errnum);
        assert_non_null(strstr(err.text, needle));
    }
    msg_decoder_destroy(d);
}

static void test_decode_malformed(void **state)
{
    uint8_t buf[256];
    uint8_t h[4];
    size_t n;

    /* Sanity: the base frame is good. */
    msg_t *m = NULL;
    n = raw_frame(buf, sizeof(buf), good4, 3, 0, 7, 2, "a.b{\"x\":1}zz", 12);
    assert_int_equal(msg_decode(buf, n, &m, NULL), 0);
    assert_string_equal(m->topic, "a.b");
    assert_int_equal(m->matchtag, 9);
    assert_int_equal(json_integer_value(json_object_get(m->body, "x")), 1);
    assert_memory_equal(m->payload, "zz", 2);
    msg_decref(m);

    expect_decode_error(buf, 0, EPROTO, "shorter");
    expect_decode_error(buf, MSG_HEADER_SIZE - 1, EPROTO, "shorter");

    memcpy(h, good4, 4);
    h[0] = 0xEE;
    n = raw_frame(buf, sizeof(buf), h, 1, 0, 0, 0, "a", 1);
    expect_decode_error(buf, n, EPROTO, "magic");

    memcpy(h, good4, 4);
    h[1] = 2;
    n = raw_frame(buf, sizeof(buf), h, 1, 0, 0, 0, "a", 1);
    expect_decode_error(buf, n, EPROTO, "version 2");

    for (int t = 0; t < 256; t += 4) { /* 0, 4, 8, ...: never valid */
        memcpy(h, good4, 4);
        h[2] = (uint8_t)t;
        n = raw_frame(buf, sizeof(buf), h, 1, 0, 0, 0, "a", 1);
        expect_decode_error(buf, n, EPROTO, "type");
    }

    memcpy(h, good4, 4);
    h[3] = 0x11;
    n = raw_frame(buf, sizeof(buf), h, 1, 0, 0, 0, "a", 1);
    expect_decode_error(buf, n, EPROTO, "flags");
    h[3] = 0x80;
    n = raw_frame(buf, sizeof(buf), h, 1, 0, 0, 0, "a", 1);
    expect_decode_error(buf, n, EPROTO, "flags");

    n = raw_frame(buf, sizeof(buf), good4, 1, 1, 0, 0, "a", 1);
    expect_decode_error(buf, n, EPROTO, "reserved");

    n = raw_frame(buf, sizeof(buf), good4, 0, 0, 0, 0, "", 0);
    expect_decode_error(buf, n, EPROTO, "topic_len is 0");

    n = raw_frame(buf, sizeof(buf), good4, 300, 0, 0, 0, "a", 1);
    expect_decode_error(buf, n, EMSGSIZE, "topic_len 300 exceeds 255");

    n = raw_frame(buf, sizeof(buf), good4, 1, 0, MSG_BODY_MAX + 1, 0, "a", 1);
    expect_decode_error(buf, n, EMSGSIZE, "body_len");
    n = raw_frame(buf, sizeof(buf), good4, 1, 0, 0xffffffff, 0, "a", 1);
    expect_decode_error(buf, n, EMSGSIZE, "body_len");

    n = raw_frame(buf, sizeof(buf), good4, 1, 0, 0, MSG_PAYLOAD_MAX + 1, "a",
                  1);
    expect_decode_error(buf, n, EMSGSIZE, "payload_len");

    /* Lengths that do not add up to the buffer. */
    n = raw_frame(buf, sizeof(buf), good4, 2, 0, 0, 0, "abc", 3);
    expect_decode_error(buf, n, EPROTO, "announces");
    n = raw_frame(buf, sizeof(buf), good4, 2, 0, 0, 5, "ab", 2);
    expect_decode_error(buf, n, EPROTO, "announces");

    /* Topics with bytes that are not printable ASCII. */
    n = raw_frame(buf, sizeof(buf), good4, 3, 0, 0, 0, "a\0b", 3);
    expect_decode_error(buf, n, EPROTO, "topic byte 1");
    n = raw_frame(buf, sizeof(buf), good4, 3, 0, 0, 0, "ab\n", 3);
    expect_decode_error(buf, n, EPROTO, "topic byte 2");
    n = raw_frame(buf, sizeof(buf), good4, 2, 0, 0, 0,
                  "\x7f"
                  "a",
                  2);
    expect_decode_error(buf, n, EPROTO, "topic byte 0");
    n = raw_frame(buf, sizeof(buf), good4, 2, 0, 0, 0, "\xc3\xa9", 2);
    expect_decode_error(buf, n, EPROTO, "topic byte 0");

    /* Bodies. */
    n = raw_frame(buf, sizeof(buf), good4, 1, 0, 4, 0, "a{\"x\"", 5);
    expect_decode_error(buf, n, EPROTO, "not valid JSON");
    n = raw_frame(buf, sizeof(buf), good4, 1, 0, 3, 0, "a[1]", 4);
    expect_decode_error(buf, n, EPROTO, "array, not an object");
    n = raw_frame(buf, sizeof(buf), good4, 1, 0, 1, 0, "a7", 2);
    expect_decode_error(buf, n, EPROTO, "not an object");
    n = raw_frame(buf, sizeof(buf), good4, 1, 0, 4, 0, "anull", 5);
    expect_decode_error(buf, n, EPROTO, "null, not an object");
    n = raw_frame(buf, sizeof(buf), good4, 1, 0, 4, 0, "a{}{}", 5);
    expect_decode_error(buf, n, EPROTO, "not valid JSON");
    n = raw_frame(buf, sizeof(buf), good4, 1, 0, 13, 0, "a{\"k\":1,\"k\":2}",
                  14);
    expect_decode_error(buf, n, EPROTO, "not valid JSON");
    n = raw_frame(buf, sizeof(buf), good4, 1, 0, 8, 0, "a{\"k\":\"\xff\"}", 9);
    expect_decode_error(buf, n, EPROTO, "not valid JSON");
    n = raw_frame(buf, sizeof(buf), good4, 1, 0, 3, 0, "a{\0}", 4);
    expect_decode_error(buf, n, EPROTO, "NUL");
    n = raw_frame(buf, sizeof(buf), good4, 1, 0, 14, 0, "a{\"k\":\"\\u0000\"}",
                  15);
    expect_decode_error(buf, n, EPROTO, "not valid JSON");
}

/* A stream of assorted messages for the decoder tests. */
#define NSTREAM 12

static msg_t *stream_msgs[NSTREAM];

static uint8_t *make_stream(size_t *lenp)
{
    uint8_t *stream = NULL;
    size_t total = 0;

    for (int i = 0; i < NSTREAM; i++) {
        size_t plen = (size_t)(i % 3) * (size_t)(i * 1000);
        uint8_t *payload = malloc(plen ? plen : 1);
        assert_non_null(payload);
        for (size_t k = 0; k < plen; k++)
            payload[k] = (uint8_t)(k ^ (size_t)i);
        json_t *body =
            i % 2 ? json_pack("{s:i s:s}", "i", i, "name", "stream") : NULL;
        stream_msgs[i] =
            msg_create(MSG_REQUEST + i % 3, "test.stream", body, payload, plen);
        assert_non_null(stream_msgs[i]);
        stream_msgs[i]->matchtag = (uint32_t)i;
        free(payload);

        void *buf;
        size_t len;
        assert_int_equal(msg_encode(stream_msgs[i], &buf, &len), 0);
        stream = realloc(stream, total + len);
        assert_non_null(stream);
        memcpy(stream + total, buf, len);
        total += len;
        free(buf);
    }
    *lenp = total;
    return stream;
}

static void free_stream(uint8_t *stream)
{
    for (int i = 0; i < NSTREAM; i++)
        msg_decref(stream_msgs[i]);
    free(stream);
}

struct collect {
    int count;
};

static void collect_cb(msg_t *msg, void *arg)
{
    struct collect *c = arg;

    assert_true(c->count < NSTREAM);
    assert_msg_equal(stream_msgs[c->count], msg);
    c->count++;
    msg_decref(msg);
}

static void test_decoder_bytewise(void **state)
{
    size_t len;
    uint8_t *stream = make_stream(&len);
    msg_decoder_t *d = msg_decoder_create(0);
    struct collect c = {0};

    assert_non_null(d);
    for (size_t i = 0; i < len; i++) {
        assert_int_equal(
            msg_decoder_feed(d, stream + i, 1, collect_cb, &c, NULL), 0);
        /* Never more than one partial frame buffered. */
        assert_true(msg_decoder_pending(d) < len);
    }
    assert_int_equal(c.count, NSTREAM);
    assert_int_equal(msg_decoder_pending(d), 0);
    msg_decoder_destroy(d);
    free_stream(stream);
}

static void test_decoder_random_splits(void **state)
{
    size_t len;
    uint8_t *stream = make_stream(&len);

    srand(12345);
    for (int round = 0; round < 200; round++) {
        msg_decoder_t *d = msg_decoder_create(0);
        struct collect c = {0};
        size_t off = 0;

        assert_non_null(d);
        while (off < len) {
            size_t n = (size_t)rand() % (round % 2 ? 64 : 20000) + 1;
            if (n > len - off)
                n = len - off;
            assert_int_equal(
                msg_decoder_feed(d, stream + off, n, collect_cb, &c, NULL), 0);
            off += n;
        }
        assert_int_equal(c.count, NSTREAM);
        assert_int_equal(msg_decoder_pending(d), 0);
        msg_decoder_destroy(d);
    }
    /* All at once (the in-place fast path). */
    msg_decoder_t *d = msg_decoder_create(0);
    struct collect c = {0};
    assert_int_equal(msg_decoder_feed(d, stream, len, collect_cb, &c, NULL), 0);
    assert_int_equal(c.count, NSTREAM);
    msg_decoder_destroy(d);
    free_stream(stream);
}

static void test_decoder_oversize(void **state)
{
    uint8_t buf[64];
    eddy_error_t err = {{0}};
    int count = 0;
    msg_decoder_t *d = msg_decoder_create(1000);

    assert_non_null(d);
    /* A header announcing a 2000-byte payload: rejected as soon as the
     * header is complete, before any of the body has been sent. */
    raw_frame(buf, sizeof(buf), good4, 1, 0, 0, 2000, "a", 1);
    assert_int_equal(
        msg_decoder_feed(d, buf, MSG_HEADER_SIZE - 1, count_cb, &count, &err),
        0);
    assert_int_equal(msg_decoder_pending(d), MSG_HEADER_SIZE - 1);
    assert_int_equal(msg_decoder_frame_size(d), 0); /* header incomplete */
    errno = 0;
    assert_int_equal(msg_decoder_feed(d, buf + MSG_HEADER_SIZE - 1, 1, count_cb,
                                      &count, &err),
                     -1);
    assert_int_equal(errno, EMSGSIZE);
    assert_non_null(strstr(err.text, "exceeds limit 1000"));
    assert_int_equal(msg_decoder_pending(d), 0);
    assert_int_equal(count, 0);
    msg_decoder_destroy(d);

    /* The whole header in one feed: same. */
    d = msg_decoder_create(1000);
    errno = 0;
    assert_int_equal(
        msg_decoder_feed(d, buf, MSG_HEADER_SIZE, count_cb, &count, NULL), -1);
    assert_int_equal(errno, EMSGSIZE);
    msg_decoder_destroy(d);

    /* Raising the limit lets the same frame through. */
    d = msg_decoder_create(1000);
    msg_decoder_set_max_frame(d, 0);
    uint8_t *big = calloc(1, MSG_HEADER_SIZE + 1 + 2000);
    assert_non_null(big);
    raw_frame(big, MSG_HEADER_SIZE + 1, good4, 1, 0, 0, 2000, "a", 1);
    assert_int_equal(msg_decoder_feed(d, big, MSG_HEADER_SIZE + 1 + 2000,
                                      count_cb, &count, NULL),
                     0);
    assert_int_equal(count, 1);
    free(big);
    msg_decoder_destroy(d);
}

static void test_decoder_stays_failed(void **state)
{
    size_t len;
    uint8_t *stream = make_stream(&len);
    struct collect c = {0};
    eddy_error_t err = {{0}};
    msg_decoder_t *d = msg_decoder_create(0);

    assert_non_null(d);
    /* One good frame, then garbage in the same feed. */
    size_t first = MSG_HEADER_SIZE + strlen("test.stream");
    uint8_t *buf = malloc(first + 40);
    assert_non_null(buf);
    memcpy(buf, stream, first);
    memset(buf + first, 'G', 40);
    errno = 0;
    assert_int_equal(msg_decoder_feed(d, buf, first + 40, collect_cb, &c, &err),
                     -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(err.text, "magic 0x47"));
    assert_int_equal(c.count, 1);

    /* A good stream afterwards still fails, with the same error. */
    memset(&err, 0, sizeof(err));
    errno = 0;
    assert_int_equal(msg_decoder_feed(d, stream, len, collect_cb, &c, &err),
                     -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(err.text, "magic 0x47"));
    assert_int_equal(c.count, 1);
    assert_int_equal(msg_decoder_pending(d), 0);

    free(buf);
    msg_decoder_destroy(d);
    free_stream(stream);

    /* Another protocol is refused from its first byte, not after a whole
     * header's worth (a short probe must not hang the connection). */
    d = msg_decoder_create(0);
    errno = 0;
    assert_int_equal(msg_decoder_feed(d, "G", 1, collect_cb, &c, &err), -1);
    assert_int_equal(errno, EPROTO);
    msg_decoder_destroy(d);
    uint8_t v2[] = {MSG_MAGIC, 2};
    d = msg_decoder_create(0);
    errno = 0;
    assert_int_equal(msg_decoder_feed(d, v2, 2, collect_cb, &c, &err), -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(err.text, "version 2"));
    msg_decoder_destroy(d);
}

static void test_big_payload(void **state)
{
    size_t plen = 1u << 20;
    uint8_t *payload = malloc(plen);
    void *buf;
    size_t len;
    struct collect c = {0};

    assert_non_null(payload);
    for (size_t i = 0; i < plen; i++)
        payload[i] = (uint8_t)(i * 31 + 7);
    stream_msgs[0] = msg_create(MSG_EVENT, "bcast.chunk",
                                json_pack("{s:I}", "off", (json_int_t)1 << 40),
                                payload, plen);
    assert_non_null(stream_msgs[0]);
    assert_int_equal(msg_encode(stream_msgs[0], &buf, &len), 0);
    assert_int_equal(len, MSG_HEADER_SIZE + strlen("bcast.chunk") +
                              strlen("{\"off\":1099511627776}") + plen);

    msg_decoder_t *d = msg_decoder_create(0);
    for (size_t off = 0; off < len; off += 65536) {
        size_t n = len - off < 65536 ? len - off : 65536;
        assert_int_equal(
            msg_decoder_feed(d, (uint8_t *)buf + off, n, collect_cb, &c, NULL),
            0);
    }
    assert_int_equal(c.count, 1);
    msg_decoder_destroy(d);
    free(buf);
    free(payload);
    msg_decref(stream_msgs[0]);
    stream_msgs[0] = NULL;
}

static void test_refcount(void **state)
{
    msg_t *m = msg_create(MSG_EVENT, "ev", json_object(), "abc", 3);

    assert_non_null(m);
    assert_int_equal(m->refcount, 1);
    assert_ptr_equal(msg_incref(m), m);
    assert_ptr_equal(msg_incref(m), m);
    assert_int_equal(m->refcount, 3);
    msg_decref(m);
    msg_decref(m);
    assert_int_equal(m->refcount, 1);
    assert_string_equal(m->topic, "ev"); /* still alive (ASan would say) */
    errno = 1234;
    msg_decref(m); /* frees it */
    assert_int_equal(errno, 1234);
    msg_decref(NULL);
    assert_int_equal(errno, 1234);
    assert_null(msg_incref(NULL));
}

static void test_response_and_error(void **state)
{
    msg_t *req = msg_create(MSG_REQUEST, "job.submit", NULL, NULL, 0);

    assert_non_null(req);
    req->matchtag = 77;
    req->rank = 3;
    req->flags = MSG_FLAG_STREAMING;

    msg_t *rsp = msg_create_response(req, json_pack("{s:i}", "id", 5));
    assert_non_null(rsp);
    assert_int_equal(rsp->type, MSG_RESPONSE);
    assert_int_equal(rsp->matchtag, 77);
    assert_int_equal(rsp->flags, 0);
    assert_int_equal(rsp->errnum, 0);
    assert_string_equal(rsp->topic, "job.submit");
    assert_null(msg_errstr(rsp));
    msg_decref(rsp);

    msg_t *e = msg_create_error(req, ENOENT, "no such job");
    assert_non_null(e);
    assert_int_equal(e->type, MSG_RESPONSE);
    assert_int_equal(e->errnum, ENOENT);
    assert_int_equal(e->matchtag, 77);
    msg_t *out = roundtrip(e);
    assert_string_equal(msg_errstr(out), "no such job");
    msg_decref(out);
    msg_decref(e);

    e = msg_create_error(req, EPERM, NULL);
    assert_non_null(e);
    assert_null(e->body);
    assert_null(msg_errstr(e));
    msg_decref(e);

    /* Text that is not UTF-8 still makes an error response. */
    e = msg_create_error(req, EIO, "bad \xff byte");
    assert_non_null(e);
    assert_string_equal(msg_errstr(e), "bad ? byte");
    msg_decref(e);

    msg_decref(req);
}

static void test_describe(void **state)
{
    char buf[256];
    msg_t *m = msg_create(MSG_REQUEST, "broker.ping",
                          json_pack("{s:s}", "a", "b"), "xyz", 3);

    assert_non_null(m);
    m->matchtag = 3;
    m->rank = 5;
    m->flags = MSG_FLAG_STREAMING;
    msg_describe(m, buf, sizeof(buf));
    assert_string_equal(buf, "request topic=broker.ping tag=3 rank=5 "
                             "flags=0x1 body=9 payload=3");
    m->type = MSG_RESPONSE;
    m->errnum = 2;
    m->rank = MSG_RANK_ANY;
    msg_describe(m, buf, sizeof(buf));
    assert_non_null(strstr(buf, "response "));
    assert_non_null(strstr(buf, "rank=any"));
    assert_non_null(strstr(buf, "errnum=2"));
    /* Truncation is safe. */
    msg_describe(m, buf, 8);
    assert_int_equal(strlen(buf), 7);
    msg_decref(m);

    assert_string_equal(msg_typestr(MSG_EVENT), "event");
    assert_string_equal(msg_typestr(99), "unknown");
}

static void test_decoder_args(void **state)
{
    msg_decoder_t *d = msg_decoder_create(0);
    int count = 0;

    errno = 0;
    assert_int_equal(msg_decoder_feed(d, NULL, 5, count_cb, &count, NULL), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(msg_decoder_feed(d, NULL, 0, count_cb, &count, NULL), 0);
    assert_int_equal(msg_decoder_pending(NULL), 0);
    assert_int_equal(msg_decoder_frame_size(NULL), 0);
    errno = 42;
    msg_decoder_destroy(d);
    msg_decoder_destroy(NULL);
    assert_int_equal(errno, 42);
}

/* Reading a payload in place: header and meta through msg_decoder_feed(),
 * the payload through payload_room/payload_filled, as msgconn does. */
static int inplace_count;
static msg_t *inplace_msg;

static void inplace_cb(msg_t *msg, void *arg)
{
    (void)arg;
    inplace_count++;
    msg_decref(inplace_msg);
    inplace_msg = msg;
}

static void test_decoder_payload_in_place(void **state)
{
    size_t plen = (1u << 20) + 3, len, head, off;
    unsigned char *payload = malloc(plen);
    msg_decoder_t *d = msg_decoder_create(0);
    void *buf, *room;
    msg_t *m;

    (void)state;
    assert_non_null(payload);
    assert_non_null(d);
    for (size_t i = 0; i < plen; i++)
        payload[i] = (unsigned char)(i * 7);
    m = msg_create(MSG_REQUEST, "bcast.chunk", json_pack("{s:i}", "sid", 3),
                   payload, plen);
    assert_non_null(m);
    assert_int_equal(msg_encode(m, &buf, &len), 0);
    head = len - plen;
    /* no room before the payload starts */
    assert_int_equal(msg_decoder_payload_room(d, &room), 0);
    assert_int_equal(msg_decoder_feed(d, buf, head, inplace_cb, NULL, NULL), 0);
    /* in pieces of odd sizes, straight into the room */
    for (off = 0; off < plen;) {
        size_t n = msg_decoder_payload_room(d, &room);
        size_t k = n < 100000 ? n : 100000;
        assert_int_equal(n, plen - off);
        memcpy(room, (char *)buf + head + off, k);
        assert_int_equal(
            msg_decoder_payload_filled(d, k, inplace_cb, NULL, NULL), 0);
        off += k;
    }
    assert_int_equal(inplace_count, 1);
    assert_non_null(inplace_msg);
    assert_string_equal(inplace_msg->topic, "bcast.chunk");
    assert_int_equal(inplace_msg->payload_len, plen);
    assert_memory_equal(inplace_msg->payload, payload, plen);
    /* back to the start of a frame: no room, and filled refuses */
    assert_int_equal(msg_decoder_payload_room(d, &room), 0);
    errno = 0;
    assert_int_equal(msg_decoder_payload_filled(d, 1, inplace_cb, NULL, NULL),
                     -1);
    assert_int_equal(errno, EINVAL);
    /* more than the room is refused, nothing changes */
    assert_int_equal(msg_decoder_feed(d, buf, head, inplace_cb, NULL, NULL), 0);
    errno = 0;
    assert_int_equal(
        msg_decoder_payload_filled(d, plen + 1, inplace_cb, NULL, NULL), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(msg_decoder_payload_room(d, &room), plen);
    msg_decoder_destroy(d);
    msg_decref(inplace_msg);
    inplace_msg = NULL;
    free(buf);
    msg_decref(m);
    free(payload);
}

/* A shared payload: no copy, the owner outlives its sharers, and the
 * encoded head plus the payload make the whole frame. */
static void test_shared_and_head(void **state)
{
    msg_t *owner = msg_create(MSG_REQUEST, "a", NULL, "0123456789", 10);
    msg_t *s1, *s2;
    void *whole, *head;
    size_t wlen, hlen;

    (void)state;
    assert_non_null(owner);
    s1 = msg_create_shared(MSG_REQUEST, "b", json_object(), owner);
    s2 = msg_create_shared(MSG_REQUEST, "c", NULL, owner);
    assert_non_null(s1);
    assert_non_null(s2);
    assert_ptr_equal(s1->payload, owner->payload);
    assert_int_equal(s2->payload_len, 10);
    assert_int_equal(owner->refcount, 3);
    msg_decref(owner); /* the sharers keep it */
    assert_memory_equal(s1->payload, "0123456789", 10);
    assert_int_equal(msg_encode(s1, &whole, &wlen), 0);
    assert_int_equal(msg_encode_head(s1, &head, &hlen), 0);
    assert_int_equal(hlen + 10, wlen);
    assert_memory_equal(head, whole, hlen);
    assert_memory_equal((char *)whole + hlen, "0123456789", 10);
    free(whole);
    free(head);
    msg_decref(s1);
    msg_decref(s2);
    errno = 0;
    assert_null(msg_create_shared(MSG_REQUEST, "d", json_object(), NULL));
    assert_int_equal(errno, EINVAL);
}

int main(void)
{
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all),
        cmocka_unit_test(test_create_invalid),
        cmocka_unit_test(test_encode_invalid),
        cmocka_unit_test(test_decode_malformed),
        cmocka_unit_test(test_decoder_bytewise),
        cmocka_unit_test(test_decoder_random_splits),
        cmocka_unit_test(test_decoder_oversize),
        cmocka_unit_test(test_decoder_stays_failed),
        cmocka_unit_test(test_big_payload),
        cmocka_unit_test(test_refcount),
        cmocka_unit_test(test_response_and_error),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_decoder_args),
        cmocka_unit_test(test_decoder_payload_in_place),
        cmocka_unit_test(test_shared_and_head),
    };

    /* A hung test fails instead of blocking the suite. */
    alarm(60 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
