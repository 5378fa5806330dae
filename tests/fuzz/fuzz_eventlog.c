/* fuzz_eventlog.c - libFuzzer target for eventlog_decode() and replay.
 *
 * Eventlogs come back from storage and from other brokers, so the decoder
 * sees outside input.  Any text that decodes must survive encode/decode
 * unchanged (followers rebuild logs from eventlog_encode_from() text),
 * its encoding must be canonical (stable), and replaying it into a job
 * state must either succeed or explain itself.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/eventlog.h"
#include "src/common/jobstate.h"

/* The bound a job manager would use; longer input is refused up front. */
#define FUZZ_MAX_BYTES 65536

static void check_same(const eventlog_t *a, const eventlog_t *b)
{
    if (eventlog_count(a) != eventlog_count(b) ||
        eventlog_size(a) != eventlog_size(b))
        abort();
    for (size_t i = 0; i < eventlog_count(a); i++) {
        double ta, tb;
        const char *na, *nb;
        const json_t *ca, *cb;

        if (eventlog_entry(a, i, &ta, &na, &ca) < 0 ||
            eventlog_entry(b, i, &tb, &nb, &cb) < 0)
            abort();
        if (ta != tb || strcmp(na, nb) != 0)
            abort();
        if ((ca == NULL) != (cb == NULL) || (ca && !json_equal(ca, cb)))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    eddy_error_t err;
    eventlog_t *log, *log2;
    char *enc, *enc2, *tail;
    struct jobstate_info info;
    int state;

    err.text[0] = '\0';
    if (!(log = eventlog_decode((const char *)data, size, FUZZ_MAX_BYTES,
                                &err))) {
        if (strlen(err.text) == 0)
            abort(); /* every failure explains itself */
        return 0;
    }
    if (!(enc = eventlog_encode(log)) || strlen(enc) != eventlog_size(log))
        abort();
    if (!(log2 = eventlog_decode(enc, strlen(enc), FUZZ_MAX_BYTES, &err)))
        abort();
    check_same(log, log2);
    if (!(enc2 = eventlog_encode(log2)) || strcmp(enc, enc2) != 0)
        abort();
    /* A follower's view: the tail after the first half is a suffix. */
    if (!(tail = eventlog_encode_from(log, eventlog_count(log) / 2)))
        abort();
    if (strlen(tail) > strlen(enc) ||
        strcmp(enc + strlen(enc) - strlen(tail), tail) != 0)
        abort();

    err.text[0] = '\0';
    if (jobstate_from_eventlog(log, &state, &err) == 0) {
        if (jobstate_result(log, &info, &err) < 0 || info.state != state)
            abort();
        if (strcmp(jobstate_str(state), "?") == 0)
            abort();
    } else if (strlen(err.text) == 0) {
        abort();
    }
    free(tail);
    free(enc2);
    free(enc);
    eventlog_destroy(log2);
    eventlog_destroy(log);
    return 0;
}
