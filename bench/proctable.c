/* proctable - the size on the wire of a job's process table and the time
 * to gather it, against a broker.ping round trip to rank 0 (the floor of
 * any request).
 *
 * Usage: bench-proctable ID [RUNS]   (inside an instance: EDDY_URI set)
 * Prints: tasks, payload bytes, distinct string bytes, bytes per task
 * beyond the strings, and the median gather and ping times.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eddy/core.h"
#include "eddy/mpir.h"

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

/* Sum of the lengths (with NUL) of the distinct hostnames and executables:
 * what any encoding must carry at least once. */
static size_t distinct_bytes(const eddy_proctable_t *pt)
{
    size_t n = eddy_proctable_size(pt), total = 0, nseen = 0;
    const char **seen = calloc(2 * n + 1, sizeof(*seen));
    struct eddy_procdesc d;

    for (uint32_t r = 0; seen && r < n; r++) {
        const char *s[2];
        eddy_proctable_entry(pt, r, &d);
        s[0] = d.hostname;
        s[1] = d.executable;
        for (int k = 0; k < 2; k++) {
            size_t i;
            for (i = 0; i < nseen && strcmp(seen[i], s[k]); i++)
                ;
            if (i == nseen) {
                seen[nseen++] = s[k];
                total += strlen(s[k]) + 1;
            }
        }
    }
    free(seen);
    return total;
}

int main(int argc, char **argv)
{
    eddy_error_t err;
    eddy_t *h;
    eddy_future_t *f;
    eddy_proctable_t *pt = NULL;
    const void *data;
    size_t len = 0, strings;
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    double tg[64], tp[64];

    if (argc < 2 || runs < 1 || runs > 64) {
        fprintf(stderr, "usage: bench-proctable ID [RUNS<=64]\n");
        return 1;
    }
    if (!(h = eddy_open(NULL, 0, &err))) {
        fprintf(stderr, "bench-proctable: %s\n", err.text);
        return 1;
    }
    for (int i = 0; i < runs; i++) {
        double t0 = now();
        if (!(f = eddy_job_proctable(h, strtoull(argv[1], NULL, 10))) ||
            eddy_rpc_get_raw(f, &data, &len) < 0) {
            fprintf(stderr, "bench-proctable: %s\n",
                    f ? eddy_future_error_string(f) : "rpc failed");
            return 1;
        }
        tg[i] = now() - t0;
        if (i == runs - 1 && !(pt = eddy_job_proctable_get(f))) {
            fprintf(stderr, "bench-proctable: %s\n",
                    eddy_future_error_string(f));
            return 1;
        }
        eddy_future_destroy(f);
        t0 = now();
        f = eddy_rpc(h, "broker.ping", 0, 0, NULL, NULL, 0);
        if (!f || eddy_rpc_get(f, NULL) < 0)
            return 1;
        tp[i] = now() - t0;
        eddy_future_destroy(f);
    }
    qsort(tg, (size_t)runs, sizeof(double), cmp);
    qsort(tp, (size_t)runs, sizeof(double), cmp);
    strings = distinct_bytes(pt);
    printf("proctable: %zu tasks, %zu bytes on the wire, %zu bytes of "
           "distinct strings, %.2f bytes/task beyond them\n",
           eddy_proctable_size(pt), len, strings,
           ((double)len - (double)strings) / (double)eddy_proctable_size(pt));
    printf("gather %.4f s  ping %.4f s  ratio %.1f (median of %d)\n",
           tg[runs / 2], tp[runs / 2], tg[runs / 2] / tp[runs / 2], runs);
    eddy_proctable_destroy(pt);
    eddy_close(h);
    return 0;
}
