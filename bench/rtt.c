/* rtt - median RPC round trip to a broker, against rank 0 as baseline.
 *
 * Usage: rtt RANK [COUNT]   (inside an instance: EDDY_URI set)
 * Prints one line per target: median, p90 and mean of COUNT broker.ping
 * round trips, and the ratio of RANK's median to the local broker's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "eddy/core.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int measure(eddy_t *h, unsigned rank, int count, double *median)
{
    double *t = calloc((size_t)count, sizeof(*t)), sum = 0;
    if (!t)
        return -1;
    for (int i = 0; i < count + 10; i++) {
        double t0 = now();
        eddy_future_t *f = eddy_rpc(h, "broker.ping", rank, 0, "{}", NULL, 0);
        if (!f || eddy_rpc_get(f, NULL) < 0) {
            fprintf(stderr, "rtt: rank %u: %s\n", rank,
                    f ? eddy_future_error_string(f) : "send failed");
            eddy_future_destroy(f);
            free(t);
            return -1;
        }
        eddy_future_destroy(f);
        if (i >= 10) /* the first few warm the route */
            t[i - 10] = (now() - t0) * 1e6;
    }
    qsort(t, (size_t)count, sizeof(*t), cmp);
    for (int i = 0; i < count; i++)
        sum += t[i];
    *median = t[count / 2];
    printf("rank %-4u median %8.1f us  p90 %8.1f us  mean %8.1f us\n", rank,
           t[count / 2], t[count * 9 / 10], sum / count);
    free(t);
    return 0;
}

int main(int argc, char **argv)
{
    eddy_error_t err;
    eddy_t *h;
    unsigned rank;
    int count;
    double base, target;

    if (argc < 2) {
        fprintf(stderr, "Usage: rtt RANK [COUNT]\n");
        return 1;
    }
    rank = (unsigned)strtoul(argv[1], NULL, 10);
    count = argc > 2 ? atoi(argv[2]) : 1000;
    if (count < 10)
        count = 10;
    if (!(h = eddy_open(NULL, 0, &err))) {
        fprintf(stderr, "rtt: %s\n", err.text);
        return 1;
    }
    if (measure(h, 0, count, &base) < 0 || measure(h, rank, count, &target) < 0)
        return 1;
    printf("ratio rank %u / rank 0 (local broker): %.2f\n", rank,
           target / base);
    eddy_close(h);
    return 0;
}
