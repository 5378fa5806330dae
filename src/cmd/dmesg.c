/* eddy dmesg - print a broker's recent log lines. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cmd.h"

static const char *const usage_text =
    "Usage: eddy dmesg [-r RANK]\n"
    "\n"
    "Print the recent log of a broker (default: rank 0), oldest first.\n"
    "Each broker keeps its last lines in memory; the full log is the file\n"
    "broker-RANK.log in the instance's run directory.\n"
    "\n"
    "  -r, --rank=RANK   the broker to ask\n";

static int dmesg_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"rank", required_argument, NULL, 'r'},
        {NULL, 0, NULL, 0},
    };
    unsigned long rank = 0;
    char *end;
    int c;
    eddy_t *h;
    eddy_future_t *f;
    json_t *lines;
    size_t i;
    json_t *line;

    while ((c = getopt_long(argc, argv, "r:", opts, NULL)) != -1) {
        switch (c) {
        case 'r':
            rank = strtoul(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || rank > UINT32_MAX - 2)
                cmd_die("dmesg", "rank '%s' is not a rank number", optarg);
            break;
        default:
            fputs(usage_text, stderr);
            return 1;
        }
    }
    if (optind < argc)
        cmd_die("dmesg", "unexpected argument '%s'", argv[optind]);

    h = cmd_open("dmesg");
    if (!(f = eddy_rpc(h, "broker.dmesg", (uint32_t)rank, 0, NULL, NULL, 0)) ||
        eddy_rpc_get_unpack(f, "{s:o}", "lines", &lines) < 0)
        cmd_die("dmesg", "rank %lu: %s", rank,
                f ? eddy_future_error_string(f) : "cannot send request");
    json_array_foreach(lines, i, line)
    {
        double t = 0;
        const char *level = "?", *text = "";
        char stamp[64];
        struct tm tm;
        time_t sec;

        if (json_unpack(line, "{s:F s:s s:s}", "t", &t, "level", &level, "text",
                        &text) < 0)
            continue;
        sec = (time_t)t;
        gmtime_r(&sec, &tm);
        strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
        printf("%s.%03dZ %s: %s\n", stamp, (int)((t - (double)sec) * 1000),
               level, text);
    }
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

const struct cmd cmd_dmesg = {
    .name = "dmesg",
    .summary = "print a broker's recent log",
    .usage = usage_text,
    .run = dmesg_run,
};
