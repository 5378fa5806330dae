/* pmi-client - a tiny PMI-1 program for the bats suites and bench/run.
 *
 *   eddy-pmi-client            PMI_Init, put a 1023-byte value (the
 *                              largest the server takes, vallen_max 1024
 *                              with the NUL), PMI_Barrier, get the next
 *                              rank's value and check it, PMI_Finalize.
 *                              Rank 0 prints "pmi barrier ok: N ranks,
 *                              barrier S s" (the time of the barrier as
 *                              rank 0 saw it).
 *   eddy-pmi-client --times    the same, and every rank also prints
 *                              "times ENTER EXIT": CLOCK_REALTIME when it
 *                              entered and left the barrier, so that the
 *                              cost of the barrier itself is the last exit
 *                              minus the last entry (without the start-up
 *                              skew rank 0's own wait includes).
 *   eddy-pmi-client --stamp    no PMI: print the CLOCK_REALTIME at which
 *                              the program started, "stamp SECONDS", to
 *                              measure when held tasks start running.
 *   eddy-pmi-client --init-stamp
 *                              PMI_Init, then print "stamp SECONDS" as
 *                              soon as it returns (when a task held in
 *                              init runs again), then PMI_Barrier (as MPI
 *                              programs do, so early exits do not compete
 *                              with late starters) and PMI_Finalize.
 *
 * Exit 0 on success; 1 with a message naming the rank otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eddy/pmi.h"

enum { VALLEN = 1023 };

static double now(clockid_t clk)
{
    struct timespec ts;

    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The value rank 'r' puts: printable, different for every rank. */
static void make_value(char *buf, int r)
{
    int n = snprintf(buf, VALLEN + 1, "rank%d:", r);

    for (int i = n; i < VALLEN; i++)
        buf[i] = (char)('a' + (r + i) % 26);
    buf[VALLEN] = '\0';
}

int main(int argc, char **argv)
{
    static char kvs[256], key[64], val[VALLEN + 1], got[VALLEN + 1],
        want[VALLEN + 1];
    int spawned, rank, size, next, rc;
    double t0, t1, r0, r1;
    int times = argc > 1 && !strcmp(argv[1], "--times");

    if (argc > 1 && !strcmp(argv[1], "--stamp")) {
        printf("stamp %.6f\n", now(CLOCK_REALTIME));
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--init-stamp")) {
        if ((rc = PMI_Init(&spawned)) != PMI_SUCCESS) {
            fprintf(stderr, "pmi-client: init: error %d\n", rc);
            return 1;
        }
        printf("stamp %.6f\n", now(CLOCK_REALTIME));
        fflush(stdout);
        if ((rc = PMI_Barrier()) != PMI_SUCCESS ||
            (rc = PMI_Finalize()) != PMI_SUCCESS) {
            fprintf(stderr, "pmi-client: barrier/finalize: error %d\n", rc);
            return 1;
        }
        return 0;
    }
    if ((rc = PMI_Init(&spawned)) != PMI_SUCCESS ||
        (rc = PMI_Get_rank(&rank)) != PMI_SUCCESS ||
        (rc = PMI_Get_size(&size)) != PMI_SUCCESS ||
        (rc = PMI_KVS_Get_my_name(kvs, sizeof(kvs))) != PMI_SUCCESS) {
        fprintf(stderr, "pmi-client: init: error %d\n", rc);
        return 1;
    }
    snprintf(key, sizeof(key), "k%d", rank);
    make_value(val, rank);
    if ((rc = PMI_KVS_Put(kvs, key, val)) != PMI_SUCCESS ||
        (rc = PMI_KVS_Commit(kvs)) != PMI_SUCCESS) {
        fprintf(stderr, "pmi-client: rank %d: put: error %d\n", rank, rc);
        return 1;
    }
    r0 = now(CLOCK_REALTIME);
    t0 = now(CLOCK_MONOTONIC);
    if ((rc = PMI_Barrier()) != PMI_SUCCESS) {
        fprintf(stderr, "pmi-client: rank %d: barrier: error %d\n", rank, rc);
        return 1;
    }
    t1 = now(CLOCK_MONOTONIC);
    r1 = now(CLOCK_REALTIME);
    next = (rank + 1) % size;
    snprintf(key, sizeof(key), "k%d", next);
    make_value(want, next);
    if ((rc = PMI_KVS_Get(kvs, key, got, sizeof(got))) != PMI_SUCCESS) {
        fprintf(stderr, "pmi-client: rank %d: get %s: error %d\n", rank, key,
                rc);
        return 1;
    }
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "pmi-client: rank %d: %s has the wrong value\n", rank,
                key);
        return 1;
    }
    if ((rc = PMI_Finalize()) != PMI_SUCCESS) {
        fprintf(stderr, "pmi-client: rank %d: finalize: error %d\n", rank, rc);
        return 1;
    }
    if (times)
        printf("times %.6f %.6f\n", r0, r1);
    if (rank == 0)
        printf("pmi barrier ok: %d ranks, barrier %.6f s\n", size, t1 - t0);
    return 0;
}
