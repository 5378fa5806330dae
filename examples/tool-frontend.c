/* tool-frontend.c - the whole tool path through libeddy alone: launch a
 * job held at its startup barrier, read its process table, ship a support
 * file to its nodes, start a tool daemon beside it on every node that
 * reads that file, release the job, and wait for it.
 *
 *   cc -o tool-frontend tool-frontend.c $(pkg-config --cflags --libs eddy)
 *   eddy start --test-size=4 ./tool-frontend 4 8 note.txt -- ./a.out
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <eddy/bcast.h>
#include <eddy/core.h>
#include <eddy/job.h>
#include <eddy/mpir.h>
#include <eddy/tool.h>

static void die(const char *what, eddy_future_t *f)
{
    fprintf(stderr, "tool-frontend: %s: %s\n", what,
            f ? eddy_future_error_string(f) : "failed");
    exit(1);
}

/* Poll the job until every task is held at its barrier. */
static void wait_held(eddy_t *h, eddy_jobid_t id, uint32_t ntasks)
{
    for (int tries = 0; tries < 600; tries++) {
        eddy_future_t *f = eddy_job_info(h, id);
        eddy_jobinfo_t *info = eddy_job_info_get(f);
        uint32_t held = 0;

        if (!info)
            die("job info", f);
        (void)eddy_jobinfo_barrier(info, NULL, &held, NULL);
        eddy_jobinfo_destroy(info);
        eddy_future_destroy(f);
        if (held == ntasks)
            return;
        usleep(50000);
    }
    die("the job never reached its barrier", NULL);
}

static void on_tool(eddy_toolid_t tool,
                    const struct eddy_tool_event *ev,
                    void *arg)
{
    (void)tool;
    (void)arg;
    /* the daemon writes each line at once (echo): a piece is a line */
    if (ev->type == EDDY_TOOL_OUTPUT && ev->len &&
        ev->stream == EDDY_JOB_STDOUT)
        printf("  daemon on %s (node %u): %.*s", ev->host, ev->node,
               (int)ev->len, (const char *)ev->data);
    else if (ev->type == EDDY_TOOL_OUTPUT && ev->len)
        fwrite(ev->data, 1, ev->len, stderr);
    else if (ev->type == EDDY_TOOL_FAILED)
        printf("  daemon on node %u failed: %s\n", ev->node, ev->errstr);
}

int main(int argc, char **argv)
{
    eddy_error_t err;
    eddy_t *h;
    eddy_jobspec_t *js;
    eddy_future_t *f;
    eddy_jobid_t id;
    eddy_toolid_t tool;
    eddy_proctable_t *pt;
    struct eddy_procdesc d;
    const char *ok, *why;
    size_t nfailed;
    int nodes, ntasks, fd, status;
    const char *daemon[] = {
        "sh", "-c", "echo \"$(cat support.txt) (tasks $EDDY_TOOL_TASKS)\"",
        NULL};

    if (argc < 6 || strcmp(argv[4], "--")) {
        fprintf(stderr, "Usage: tool-frontend NODES TASKS FILE -- CMD...\n");
        return 2;
    }
    nodes = atoi(argv[1]);
    ntasks = atoi(argv[2]);
    if (!(h = eddy_open(NULL, 0, &err))) {
        fprintf(stderr, "tool-frontend: %s\n", err.text);
        return 1;
    }

    /* 1. the job, every task stopped at its first instruction */
    if (!(js = eddy_jobspec_create()) ||
        eddy_jobspec_add_group(js, argc - 5, argv + 5, 0) < 0 ||
        eddy_jobspec_set_nodes(js, nodes) < 0 ||
        eddy_jobspec_set_tasks(js, ntasks) < 0 ||
        eddy_jobspec_set_stop(js, "exec") < 0)
        die("jobspec", NULL);
    f = eddy_job_submit(h, js);
    if (eddy_job_submit_get_id(f, &id) < 0)
        die("submit", f);
    eddy_future_destroy(f);
    eddy_jobspec_destroy(js);
    printf("job %ju submitted, held at its startup barrier\n", (uintmax_t)id);
    wait_held(h, id, (uint32_t)ntasks);

    /* 2. its process table, as an MPIR debugger would read it */
    f = eddy_job_proctable(h, id);
    if (!(pt = eddy_job_proctable_get(f)))
        die("proctable", f);
    for (uint32_t r = 0; r < eddy_proctable_size(pt); r++)
        if (eddy_proctable_entry(pt, r, &d) == 0)
            printf("  rank %u: %s pid %d %s\n", r, d.hostname, (int)d.pid,
                   d.executable);
    eddy_proctable_destroy(pt);
    eddy_future_destroy(f);

    /* 3. a support file into the job's tmpdir on every node */
    if ((fd = open(argv[3], O_RDONLY)) < 0) {
        perror(argv[3]);
        return 1;
    }
    f = eddy_job_bcast(h, id, fd, "support.txt", 0, EDDY_BCAST_OVERWRITE);
    if (eddy_job_bcast_get(f, &ok, &nfailed) < 0)
        die("bcast", f);
    printf("%s shipped to nodes %s\n", argv[3], ok);
    for (size_t i = 0; i < nfailed; i++) {
        uint32_t rank;
        int errnum;
        if (eddy_job_bcast_failure(f, i, &rank, &errnum, &why) == 0)
            printf("  node %u: %s\n", rank, why);
    }
    eddy_future_destroy(f);
    close(fd);

    /* 4. a daemon on every node, reading it; its output, then its end */
    f = eddy_tool_launch(h, id, daemon, NULL);
    if (eddy_tool_launch_get(f, &tool) < 0)
        die("tool launch", f);
    eddy_future_destroy(f);
    printf("tool %ju launched\n", (uintmax_t)tool);
    f = eddy_tool_attach(h, tool, on_tool, NULL);
    if (eddy_rpc_get(f, NULL) < 0)
        die("tool attach", f);
    eddy_future_destroy(f);

    /* 5. let the job go and wait for its end */
    f = eddy_job_release(h, id);
    if (eddy_rpc_get(f, NULL) < 0)
        die("release", f);
    eddy_future_destroy(f);
    printf("job %ju released\n", (uintmax_t)id);
    f = eddy_job_wait(h, id);
    if (eddy_job_wait_get(f, &status, &why) < 0)
        die("wait", f);
    printf("job %ju finished: status %d%s%s\n", (uintmax_t)id, status,
           why ? ", " : "", why ? why : "");
    eddy_future_destroy(f);
    eddy_close(h);
    return status;
}
