/* fence-client - one participant of a kvs fence, for the bats suites.
 *
 *   eddy-fence-client ID SEQ RANKS NKEYS [VALSIZE [DUPKEY]]
 *
 * Connects to EDDY_URI, sends kvs.fence for job ID, fence SEQ, broker
 * ranks RANKS, with NKEYS keys "r<rank>.<i>" of VALSIZE bytes (default
 * 1024) plus the key DUPKEY if given; prints "sent" once the broker has the
 * request (a ping behind it on the same connection was answered), then,
 * on success, "keys N bytes B" for the map it got back, and exits 0.  On
 * failure it prints "error: ERRNO: MESSAGE" and exits 1.  Waits at most
 * EDDY_FENCE_TIMEOUT seconds (default 60).  With EDDY_FENCE_START_NS (a
 * CLOCK_REALTIME instant in ns), it connects and builds its request, waits
 * for that instant, sends, and prints "ms T": the time from that instant to
 * its answer (the fence time, if every client was ready by then).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jansson.h>

#include "eddy/core.h"

int main(int argc, char **argv)
{
    eddy_error_t err;
    eddy_t *h;
    eddy_future_t *f, *ping;
    json_t *body, *kvs, *resp, *map, *v;
    const char *json, *key, *tmo = getenv("EDDY_FENCE_TIMEOUT");
    char *text, k[64], *val;
    const char *start;
    long nkeys, valsize = 1024;
    size_t bytes = 0;
    uint32_t rank;

    if (argc < 5 || argc > 7) {
        fprintf(stderr, "Usage: eddy-fence-client ID SEQ RANKS NKEYS"
                        " [VALSIZE [DUPKEY]]\n");
        return 2;
    }
    nkeys = strtol(argv[4], NULL, 10);
    if (argc > 5)
        valsize = strtol(argv[5], NULL, 10);
    if (!(h = eddy_open(NULL, 0, &err))) {
        printf("error: %d: %s\n", errno, err.text);
        return 1;
    }
    rank = eddy_get_rank(h);
    if (!(val = malloc((size_t)valsize + 1)))
        return 1;
    kvs = json_object();
    for (long i = 0; i < nkeys; i++) {
        memset(val, 'a' + (int)((rank + (uint32_t)i) % 26), (size_t)valsize);
        val[valsize] = '\0';
        snprintf(k, sizeof(k), "r%u.%ld", rank, i);
        json_object_set_new(kvs, k, json_string(val));
    }
    if (argc > 6)
        json_object_set_new(kvs, argv[6], json_string("dup"));
    body = json_pack("{s:I s:I s:s s:o}", "id",
                     (json_int_t)strtoll(argv[1], NULL, 10), "seq",
                     (json_int_t)strtoll(argv[2], NULL, 10), "ranks", argv[3],
                     "kvs", kvs);
    text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    free(val);
    if ((start = getenv("EDDY_FENCE_START_NS"))) {
        long long at = strtoll(start, NULL, 10);
        struct timespec ts = {.tv_sec = at / 1000000000,
                              .tv_nsec = at % 1000000000};
        clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL);
    }
    f = eddy_rpc(h, "kvs.fence", EDDY_RANK_ANY, 0, text, NULL, 0);
    free(text);
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
        eddy_rpc_get(f, &json) < 0) {
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
    resp = json_loads(json, 0, NULL);
    map = resp ? json_object_get(resp, "kvs") : NULL;
    json_object_foreach(map, key, v) bytes += json_string_length(v);
    printf("keys %zu bytes %zu\n", json_object_size(map), bytes);
    json_decref(resp);
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}
