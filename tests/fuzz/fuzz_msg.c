/* fuzz_msg.c - libFuzzer target for the message codec.
 *
 * Each input is decoded as one frame and also fed as a stream, in two or
 * three chunks split where the data says, to the incremental decoder.
 * Whatever decodes must re-encode to a frame that decodes to the same
 * message: a mismatch means the codec accepts something it cannot
 * reproduce, and aborts so the fuzzer keeps the input.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same_msg(const msg_t *a, const msg_t *b)
{
    if (a->type != b->type || a->flags != b->flags ||
        a->matchtag != b->matchtag || a->rank != b->rank ||
        a->errnum != b->errnum || strcmp(a->topic, b->topic) != 0 ||
        a->payload_len != b->payload_len)
        return 0;
    if ((a->body == NULL) != (b->body == NULL))
        return 0;
    if (a->body && !json_equal(a->body, b->body))
        return 0;
    if ((a->payload == NULL) != (b->payload == NULL))
        return 0;
    if (a->payload_len && memcmp(a->payload, b->payload, a->payload_len))
        return 0;
    return 1;
}

static void check_reencode(const msg_t *msg)
{
    void *buf;
    size_t len;
    msg_t *again = NULL;
    eddy_error_t err;

    if (msg->refcount != 1 || !msg->topic)
        abort();
    if (msg_encode(msg, &buf, &len) < 0) {
        /* Only legitimate failure: compact re-encoding of a body that was
         * within the limit can be longer ("1e2" becomes "100.0"). */
        if (errno == EINVAL && msg->body &&
            json_dumpb(msg->body, NULL, 0, JSON_COMPACT) > MSG_BODY_MAX)
            return;
        abort();
    }
    if (msg_decode(buf, len, &again, &err) < 0)
        abort();
    if (!same_msg(msg, again))
        abort();
    msg_decref(again);
    free(buf);
}

static void on_msg(msg_t *msg, void *arg)
{
    (*(int *)arg)++;
    check_reencode(msg);
    msg_decref(msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    msg_t *msg = NULL;
    eddy_error_t err;
    msg_decoder_t *d;
    size_t split[2];
    size_t off = 0;
    int count = 0;
    int rc = 0;

    size_t max_frame = size % 2 ? 0 : 4096;
    int whole_ok = 0;

    if (msg_decode(data, size, &msg, &err) == 0) {
        whole_ok = 1;
        check_reencode(msg);
        msg_decref(msg);
    } else if (msg != NULL)
        abort(); /* output touched on failure */

    /* Split points from the first and last bytes, so the fuzzer explores
     * them along with the content. */
    split[0] = size ? data[0] % (size + 1) : 0;
    split[1] = size ? (size_t)data[size - 1] * 131 % (size + 1) : 0;
    if (split[0] > split[1]) {
        size_t t = split[0];
        split[0] = split[1];
        split[1] = t;
    }
    if (!(d = msg_decoder_create(max_frame)))
        return 0;
    for (int i = 0; i <= 2 && rc == 0; i++) {
        size_t end = i < 2 ? split[i] : size;
        rc = msg_decoder_feed(d, data + off, end - off, on_msg, &count, &err);
        off = end;
        if (msg_decoder_pending(d) > MSG_FRAME_MAX)
            abort();
    }
    /* The stream decoder agrees with the one-shot decoder. */
    if (whole_ok && (max_frame == 0 || size <= max_frame) &&
        (rc != 0 || count != 1 || msg_decoder_pending(d) != 0))
        abort();
    if (rc < 0) {
        /* A failed decoder stays failed. */
        if (msg_decoder_feed(d, data, size, on_msg, &count, &err) != -1)
            abort();
    }
    msg_decoder_destroy(d);
    return 0;
}
