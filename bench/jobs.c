/* jobs - job throughput: submit N `true` jobs with every submit in flight
 * at once, then wait for all, against N broker.ping round trips issued the
 * same way (the floor any request to rank 0 pays).
 *
 * Usage: bench-jobs [N]   (inside an instance: EDDY_URI set)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "eddy/core.h"
#include "eddy/job.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int pings(eddy_t *h, int n)
{
    eddy_future_t **f = calloc((size_t)n, sizeof(*f));
    int rc = 0;

    for (int i = 0; i < n; i++)
        f[i] = eddy_rpc(h, "broker.ping", 0, 0, NULL, NULL, 0);
    for (int i = 0; i < n; i++) {
        if (!f[i] || eddy_rpc_get(f[i], NULL) < 0)
            rc = -1;
        eddy_future_destroy(f[i]);
    }
    free(f);
    return rc;
}

static int jobs(eddy_t *h, int n)
{
    eddy_future_t **f = calloc((size_t)n, sizeof(*f));
    eddy_jobid_t *ids = calloc((size_t)n, sizeof(*ids));
    char *argv[] = {(char *)"true", NULL};
    eddy_jobspec_t *js = eddy_jobspec_create();
    int rc = 0;

    if (!f || !ids || !js || eddy_jobspec_add_group(js, 1, argv, 1) < 0)
        return -1;
    for (int i = 0; i < n; i++)
        f[i] = eddy_job_submit(h, js);
    for (int i = 0; i < n; i++) {
        if (!f[i] || eddy_job_submit_get_id(f[i], &ids[i]) < 0) {
            fprintf(stderr, "bench-jobs: submit: %s\n",
                    f[i] ? eddy_future_error_string(f[i]) : "failed");
            rc = -1;
        }
        eddy_future_destroy(f[i]);
        f[i] = NULL;
    }
    for (int i = 0; i < n && rc == 0; i++)
        f[i] = eddy_job_wait(h, ids[i]);
    for (int i = 0; i < n && rc == 0; i++) {
        int status;
        if (!f[i] || eddy_job_wait_get(f[i], &status, NULL) < 0 || status != 0)
            rc = -1;
        eddy_future_destroy(f[i]);
    }
    eddy_jobspec_destroy(js);
    free(ids);
    free(f);
    return rc;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    eddy_error_t err;
    eddy_t *h;
    double t0, t1, t2;

    if (n < 1)
        n = 1;
    if (!(h = eddy_open(NULL, 0, &err))) {
        fprintf(stderr, "bench-jobs: %s\n", err.text);
        return 1;
    }
    t0 = now();
    if (pings(h, n) < 0)
        return 1;
    t1 = now();
    if (jobs(h, n) < 0) {
        fprintf(stderr, "bench-jobs: a job failed\n");
        return 1;
    }
    t2 = now();
    printf("%d pings to rank 0:           %8.3f s  %8.0f /s\n", n, t1 - t0,
           n / (t1 - t0));
    printf("%d true jobs, submit to done: %8.3f s  %8.0f jobs/s\n", n, t2 - t1,
           n / (t2 - t1));
    printf("ratio ping rate / job rate: %.1f\n", (t2 - t1) / (t1 - t0));
    eddy_close(h);
    return 0;
}
