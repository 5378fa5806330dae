/* eddy overlay status - show the broker tree and which ranks are lost. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"

static const char *const usage_text =
    "Usage: eddy overlay status [--json]\n"
    "       eddy overlay info [-r RANK] [--json]\n"
    "\n"
    "status: show the tree of brokers as rank 0 sees it: each rank with\n"
    "its hostname and state (up, connecting, lost), then the lost ranks.\n"
    "info: show one broker (default: the one EDDY_URI names): rank,\n"
    "hostname, cores offered to jobs, parent, children, uptime, pid.\n"
    "\n"
    "  -r, --rank=RANK  the broker to ask (info)\n"
    "  -j, --json       print the broker's answer as JSON\n";

struct node {
    json_int_t parent;
    const char *state;
    const char *hostname;
};

static void print_tree(const struct node *nodes,
                       size_t n,
                       size_t rank,
                       char *prefix,
                       size_t plen,
                       size_t psize)
{
    size_t nkids = 0, seen = 0;

    for (size_t i = 0; i < n; i++)
        if (nodes[i].parent == (json_int_t)rank)
            nkids++;
    for (size_t i = 0; i < n; i++) {
        if (nodes[i].parent != (json_int_t)rank)
            continue;
        bool last = ++seen == nkids;
        printf("%s%s%zu %s: %s\n", prefix, last ? "└─ " : "├─ ", i,
               nodes[i].hostname, nodes[i].state);
        if (plen + 8 < psize) {
            snprintf(prefix + plen, psize - plen, "%s", last ? "   " : "│  ");
            print_tree(nodes, n, i, prefix, strlen(prefix), psize);
            prefix[plen] = '\0';
        }
    }
}

static int overlay_status(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    bool json_out = false;
    int c;
    eddy_t *h;
    eddy_future_t *f;
    const char *body, *lost = "";
    json_t *o, *ranks, *r;
    json_int_t size, fanout;
    struct node *nodes;
    size_t i;
    char prefix[512] = "";

    while ((c = getopt_long(argc, argv, "j", opts, NULL)) != -1) {
        if (c != 'j') {
            fputs(usage_text, stderr);
            return 1;
        }
        json_out = true;
    }
    if (optind < argc)
        cmd_die("overlay", "unexpected argument '%s'", argv[optind]);
    h = cmd_open("overlay");
    if (!(f = eddy_rpc(h, "overlay.status", 0, 0, NULL, NULL, 0)) ||
        eddy_rpc_get(f, &body) < 0)
        cmd_die("overlay", "status: %s",
                f ? eddy_future_error_string(f) : "cannot send request");
    if (json_out) {
        printf("%s\n", body);
        goto done;
    }
    if (!(o = json_loads(body, 0, NULL)) ||
        json_unpack(o, "{s:I s:I s:o s?s}", "size", &size, "fanout", &fanout,
                    "ranks", &ranks, "lost", &lost) < 0 ||
        !json_is_array(ranks) || size < 1 ||
        (size_t)size != json_array_size(ranks))
        cmd_die("overlay", "rank 0 sent a malformed overlay.status answer");
    if (!(nodes = calloc((size_t)size, sizeof(*nodes))))
        cmd_die("overlay", "out of memory");
    for (i = 0; i < (size_t)size; i++) {
        nodes[i].parent = -1;
        nodes[i].state = "?";
        nodes[i].hostname = "?";
    }
    json_array_foreach(ranks, i, r)
    {
        json_int_t rank = -1;
        json_t *parent = NULL;
        const char *state = "?", *host = "?";
        if (json_unpack(r, "{s:I s?o s?s s?s}", "rank", &rank, "parent",
                        &parent, "state", &state, "hostname", &host) < 0 ||
            rank < 0 || rank >= size)
            continue;
        nodes[rank].parent =
            json_is_integer(parent) ? json_integer_value(parent) : -1;
        nodes[rank].state = state;
        nodes[rank].hostname = host ? host : "?";
    }
    printf("0 %s: %s\n", nodes[0].hostname, nodes[0].state);
    print_tree(nodes, (size_t)size, 0, prefix, 0, sizeof(prefix));
    printf("%lld brokers, fanout %lld, lost: %s\n", (long long)size,
           (long long)fanout, lost && *lost ? lost : "none");
    free(nodes);
    json_decref(o);
done:
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

static int overlay_info(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"rank", required_argument, NULL, 'r'},
        {NULL, 0, NULL, 0},
    };
    bool json_out = false;
    uint32_t rank = EDDY_RANK_ANY;
    unsigned long v;
    char *end;
    int c;
    eddy_t *h;
    eddy_future_t *f;
    const char *body, *host, *version;
    json_int_t r, size, cores, pid;
    double uptime;
    json_t *parent, *children;

    while ((c = getopt_long(argc, argv, "jr:", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            json_out = true;
            break;
        case 'r':
            v = strtoul(optarg, &end, 10);
            if (*optarg == '\0' || *optarg == '-' || *end != '\0' ||
                v >= EDDY_RANK_UPSTREAM)
                cmd_die("overlay", "rank '%s' is not a rank number", optarg);
            rank = (uint32_t)v;
            break;
        default:
            fputs(usage_text, stderr);
            return 1;
        }
    }
    if (optind < argc)
        cmd_die("overlay", "unexpected argument '%s'", argv[optind]);
    h = cmd_open("overlay");
    if (!(f = eddy_rpc(h, "broker.info", rank, 0, NULL, NULL, 0)) ||
        eddy_rpc_get(f, &body) < 0)
        cmd_die("overlay", "info: %s",
                f ? eddy_future_error_string(f) : "cannot send request");
    if (json_out) {
        printf("%s\n", body);
    } else {
        if (eddy_rpc_get_unpack(f, "{s:I s:I s:s s:I s:I s:F s:s s:o s:o}",
                                "rank", &r, "size", &size, "hostname", &host,
                                "cores", &cores, "pid", &pid, "uptime", &uptime,
                                "version", &version, "parent", &parent,
                                "children", &children) < 0)
            cmd_die("overlay", "info: %s", eddy_future_error_string(f));
        printf("rank      %lld of %lld\n", (long long)r, (long long)size);
        printf("hostname  %s\n", host);
        printf("cores     %lld\n", (long long)cores);
        if (json_is_integer(parent))
            printf("parent    %lld\n", (long long)json_integer_value(parent));
        else
            printf("parent    none\n");
        printf("children  %zu\n", json_array_size(children));
        printf("pid       %lld\n", (long long)pid);
        printf("uptime    %.3f s\n", uptime);
        printf("version   %s\n", version);
    }
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

/* The nested subcommands of `eddy overlay`. */
static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} overlay_cmds[] = {
    {"status", overlay_status},
    {"info", overlay_info},
};

static int overlay_run(int argc, char **argv)
{
    for (size_t i = 0;
         argc >= 2 && i < sizeof(overlay_cmds) / sizeof(overlay_cmds[0]); i++) {
        if (!strcmp(argv[1], overlay_cmds[i].name))
            return overlay_cmds[i].run(argc - 1, argv + 1);
    }
    if (argc >= 2)
        cmd_warn("overlay", "'%s' is not an overlay command", argv[1]);
    fputs(usage_text, stderr);
    return 1;
}

const struct cmd cmd_overlay = {
    .name = "overlay",
    .summary = "show the broker tree, lost ranks, and one broker's details",
    .usage = usage_text,
    .run = overlay_run,
};
