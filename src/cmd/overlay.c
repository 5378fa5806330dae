/* eddy overlay status - show the broker tree and which ranks are lost. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"

static const char *const usage_text =
    "Usage: eddy overlay status [--json]\n"
    "\n"
    "Show the tree of brokers as rank 0 sees it: each rank with its\n"
    "hostname and state (up, connecting, lost), then the lost ranks.\n"
    "\n"
    "  -j, --json   print rank 0's answer as JSON\n";

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

static int overlay_run(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "status") != 0) {
        fputs(usage_text, stderr);
        return 1;
    }
    return overlay_status(argc - 1, argv + 1);
}

const struct cmd cmd_overlay = {
    .name = "overlay",
    .summary = "show the broker tree and lost ranks",
    .usage = usage_text,
    .run = overlay_run,
};
