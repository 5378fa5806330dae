/* eddy ping - measure round trips to a broker through the tree, like
 * ping(8). */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"

static const char *const usage_text =
    "Usage: eddy ping [-c COUNT] [-i SECONDS] [-s BYTES] RANK\n"
    "\n"
    "Send broker.ping requests to RANK through the broker tree and print\n"
    "each round-trip time, then a summary.  Without -c, ping until\n"
    "interrupted.\n"
    "\n"
    "  -c, --count=N       stop after N replies\n"
    "  -i, --interval=S    wait S seconds between requests (default 1)\n"
    "  -s, --size=BYTES    send a raw payload of BYTES bytes (default 0)\n";

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    interrupted = 1;
}

static unsigned long parse_ulong(const char *what,
                                 const char *s,
                                 unsigned long max)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*s == '\0' || *s == '-' || *end != '\0' || v > max)
        cmd_die("ping", "%s '%s' is not a number from 0 to %lu", what, s, max);
    return v;
}

static void sleep_seconds(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s,
                          .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (!interrupted && nanosleep(&ts, &ts) < 0)
        ;
}

static int ping_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"count", required_argument, NULL, 'c'},
        {"interval", required_argument, NULL, 'i'},
        {"size", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    unsigned long count = 0, size = 0, rank, sent = 0, received = 0;
    double interval = 1.0, min = INFINITY, max = 0, sum = 0, sumsq = 0;
    double start;
    char *end, *payload = NULL;
    int c, rc = 0;
    eddy_t *h;

    while ((c = getopt_long(argc, argv, "+c:i:s:", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            count = parse_ulong("count", optarg, 1000000000);
            break;
        case 'i':
            interval = strtod(optarg, &end);
            if (*optarg == '\0' || *end != '\0' || !(interval >= 0) ||
                interval > 3600)
                cmd_die("ping", "interval '%s' is not a number of seconds",
                        optarg);
            break;
        case 's':
            size = parse_ulong("size", optarg, 16u << 20);
            break;
        default:
            fputs(usage_text, stderr);
            return 1;
        }
    }
    if (optind != argc - 1)
        cmd_die("ping", "expected one RANK (see 'eddy ping -h')");
    rank = parse_ulong("rank", argv[optind], UINT32_MAX - 2);

    h = cmd_open("ping");
    if (rank >= eddy_get_size(h))
        cmd_die("ping", "rank %lu does not exist (instance size %u)", rank,
                eddy_get_size(h));
    if (size > 0 && !(payload = calloc(1, size)))
        cmd_die("ping", "out of memory");
    signal(SIGINT, on_sigint);

    printf("PING rank %lu: %lu bytes of payload\n", rank, size);
    start = cmd_now();
    while (!interrupted && (count == 0 || sent < count)) {
        double t0 = cmd_now(), ms;
        int seq = (int)++sent;
        char json[64];
        eddy_future_t *f;
        int replyseq = -1;

        snprintf(json, sizeof(json), "{\"seq\":%d}", seq);
        f = eddy_rpc(h, "broker.ping", (uint32_t)rank, 0, json, payload, size);
        if (!f || eddy_rpc_get_unpack(f, "{s:i}", "seq", &replyseq) < 0) {
            printf("rank %lu: seq=%d: %s\n", rank, seq,
                   f ? eddy_future_error_string(f) : "cannot send request");
            eddy_future_destroy(f);
            rc = 1;
            break;
        }
        eddy_future_destroy(f);
        ms = (cmd_now() - t0) * 1e3;
        received++;
        sum += ms;
        sumsq += ms * ms;
        min = ms < min ? ms : min;
        max = ms > max ? ms : max;
        printf("from rank %lu: seq=%d time=%.3f ms\n", rank, replyseq, ms);
        fflush(stdout);
        if (count == 0 || sent < count)
            sleep_seconds(interval);
    }
    printf("--- rank %lu ping statistics ---\n", rank);
    printf("%lu sent, %lu received, %.0f%% loss, time %.0f ms\n", sent,
           received,
           sent ? 100.0 * (double)(sent - received) / (double)sent : 0,
           (cmd_now() - start) * 1e3);
    if (received > 0) {
        double avg = sum / (double)received;
        double var = sumsq / (double)received - avg * avg;
        printf("rtt min/avg/max/mdev = %.3f/%.3f/%.3f/%.3f ms\n", min, avg, max,
               sqrt(var > 0 ? var : 0));
    }
    free(payload);
    eddy_close(h);
    return rc;
}

const struct cmd cmd_ping = {
    .name = "ping",
    .summary = "measure round trips to a broker",
    .usage = usage_text,
    .run = ping_run,
};
