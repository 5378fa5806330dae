/* fence-client - one participant of a kvs fence, for the bats suites.
 *
 *   eddy-fence-client ID SEQ RANKS NKEYS [VALSIZE [DUPKEY]]
 *
 * Connects to EDDY_URI, sends kvs.fence for job ID, fence SEQ, broker
 * ranks RANKS, with NKEYS keys "r<rank>.<i>" of VALSIZE bytes (default
 * 1024) plus the key DUPKEY if given, as payload records "KEY\0VALUE\0"
 * (docs/kvs-fence.md); prints "sent" once the broker has the request (a
 * ping behind it on the same connection was answered), then, on success,
 * "keys N bytes B" for the records it got back (B: the values' bytes), and
 * exits 0.  On failure it prints "error: ERRNO: MESSAGE" and exits 1;
 * records that do not match the answer's "count", or a key received twice,
 * are failures too (EPROTO, EEXIST), as they are for the shell.  Waits at
 * most EDDY_FENCE_TIMEOUT seconds (default 60).  With EDDY_FENCE_START_NS
 * (a CLOCK_REALTIME instant in ns), it connects and builds its request,
 * waits for that instant, sends, and prints "ms T": the time from that
 * instant to its answer (the fence time, if every client was ready by
 * then).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jansson.h>

#include "eddy/core.h"

/* Append the record KEY\0VALUE\0 to buf/len. */
static void put(char *buf, size_t *len, const char *key, const char *val)
{
    size_t kl = strlen(key) + 1, vl = strlen(val) + 1;

    memcpy(buf + *len, key, kl);
    memcpy(buf + *len + kl, val, vl);
    *len += kl + vl;
}

/* Check the answer's records like the shell does: 'count' well-formed
 * records, no key twice (a hash set of the keys).  Sets '*bytes' to the
 * values' total.  0, or -1 with errno and a message printed. */
static int check(const char *data, size_t len, json_int_t count, size_t *bytes)
{
    const char *p = data, *end = len ? data + len : data, *nul;
    json_t *seen = json_object();
    json_int_t n = 0;

    while (p < end) {
        if (!(nul = memchr(p, '\0', (size_t)(end - p))) || nul + 1 >= end)
            goto bad;
        if (json_object_get(seen, p)) {
            printf("error: %d: key '%.64s' put twice\n", EEXIST, p);
            json_decref(seen);
            errno = EEXIST;
            return -1;
        }
        json_object_set_new(seen, p, json_true());
        p = nul + 1;
        if (!(nul = memchr(p, '\0', (size_t)(end - p))))
            goto bad;
        *bytes += (size_t)(nul - p);
        p = nul + 1;
        n++;
    }
    json_decref(seen);
    if (n != count) {
        printf("error: %d: %jd records, %jd announced\n", EPROTO, (intmax_t)n,
               (intmax_t)count);
        errno = EPROTO;
        return -1;
    }
    return 0;
bad:
    json_decref(seen);
    printf("error: %d: malformed records\n", EPROTO);
    errno = EPROTO;
    return -1;
}

int main(int argc, char **argv)
{
    eddy_error_t err;
    eddy_t *h;
    eddy_future_t *f, *ping;
    json_t *body;
    const char *tmo = getenv("EDDY_FENCE_TIMEOUT");
    char *text, k[64], *val, *buf;
    const char *start;
    const void *data;
    long nkeys, valsize = 1024;
    size_t bytes = 0, len = 0;
    json_int_t count;
    uint32_t rank;
    int rc = 0;

    if (argc < 5 || argc > 7) {
        fprintf(stderr, "Usage: eddy-fence-client ID SEQ RANKS NKEYS"
                        " [VALSIZE [DUPKEY]]\n");
        return 2;
    }
    nkeys = strtol(argv[4], NULL, 10);
    if (argc > 5)
        valsize = strtol(argv[5], NULL, 10);
    if (nkeys < 0 || valsize < 0 || (argc > 6 && strlen(argv[6]) > 64)) {
        fprintf(stderr, "eddy-fence-client: bad NKEYS, VALSIZE or DUPKEY\n");
        return 2;
    }
    if (!(h = eddy_open(NULL, 0, &err))) {
        printf("error: %d: %s\n", errno, err.text);
        return 1;
    }
    rank = eddy_get_rank(h);
    /* each record: key < 64, value, two NULs; plus DUPKEY "dup" */
    if (!(val = malloc((size_t)valsize + 1)) ||
        !(buf = malloc((size_t)nkeys * ((size_t)valsize + 66) + 72)))
        return 1;
    for (long i = 0; i < nkeys; i++) {
        memset(val, 'a' + (int)((rank + (uint32_t)i) % 26), (size_t)valsize);
        val[valsize] = '\0';
        snprintf(k, sizeof(k), "r%u.%ld", rank, i);
        put(buf, &len, k, val);
    }
    if (argc > 6)
        put(buf, &len, argv[6], "dup");
    body = json_pack("{s:I s:I s:s}", "id",
                     (json_int_t)strtoll(argv[1], NULL, 10), "seq",
                     (json_int_t)strtoll(argv[2], NULL, 10), "ranks", argv[3]);
    text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    free(val);
    if ((start = getenv("EDDY_FENCE_START_NS"))) {
        long long at = strtoll(start, NULL, 10);
        struct timespec ts = {.tv_sec = at / 1000000000,
                              .tv_nsec = at % 1000000000};
        clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL);
    }
    f = eddy_rpc(h, "kvs.fence", EDDY_RANK_ANY, 0, text, len ? buf : NULL, len);
    free(text);
    free(buf);
    /* The broker handles one connection's requests in order: once the
     * ping is answered, the fence request has arrived. */
    ping = eddy_rpc(h, "broker.ping", EDDY_RANK_ANY, 0, NULL, NULL, 0);
    if (!f || !ping || eddy_rpc_get(ping, NULL) < 0) {
        printf("error: %d: cannot send\n", errno);
        return 1;
    }
    eddy_future_destroy(ping);
    printf("sent\n");
    fflush(stdout);
    if (eddy_future_wait_for(f, tmo ? atof(tmo) : 60.0) < 0 ||
        eddy_rpc_get_unpack(f, "{s:I}", "count", &count) < 0 ||
        eddy_rpc_get_raw(f, &data, &len) < 0) {
        printf("error: %d: %s\n", errno, eddy_future_error_string(f));
        eddy_future_destroy(f);
        eddy_close(h);
        return 1;
    }
    if (start) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        printf("ms %.3f\n", ((double)now.tv_sec * 1e9 + (double)now.tv_nsec -
                             (double)strtoll(start, NULL, 10)) /
                                1e6);
    }
    if (check(data, len, count, &bytes) < 0)
        rc = 1;
    else
        printf("keys %jd bytes %zu\n", (intmax_t)count, bytes);
    eddy_future_destroy(f);
    eddy_close(h);
    return rc;
}
