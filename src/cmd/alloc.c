/* eddy alloc - run a command against a nested instance made of a job. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd.h"
#include "nested.h"

static const char *const usage_text =
    "Usage: eddy alloc [OPTIONS] [CMD [ARG...]]\n"
    "\n"
    "Allocate N nodes of the instance in $EDDY_URI as one job whose tasks\n"
    "are one eddy-broker per node (bootstrapped through the job's PMI),\n"
    "run CMD (default: an interactive $SHELL) with EDDY_URI set to that\n"
    "nested instance, then shut the instance down and exit with CMD's\n"
    "status.  Jobs submitted inside run on the allocation's nodes only.\n"
    "CMD gets the nested rank 0's local:// URI when its socket answers\n"
    "here, else its tcp:// URI with a private copy of its token\n"
    "($EDDY_TOKEN_FILE, removed at the end; docs/alloc.md).\n"
    "\n" NESTED_USAGE
    "      --tcp               use the tcp:// URI even on rank 0's host\n"
    "  -h, --help              show this help\n";

/* How long the job may take to end once its instance was told to stop. */
#define ALLOC_END_WAIT 30.0

static void cancel_job(eddy_t *h, eddy_jobid_t id)
{
    eddy_future_t *f = eddy_job_cancel(h, id);

    if (f)
        (void)eddy_future_wait_for(f, 5.0);
    eddy_future_destroy(f);
}

/* Wait for the job to end; cancel it if it takes too long.  Its status
 * (0 when the brokers exited cleanly). */
static int wait_job(eddy_t *h, eddy_jobid_t id, double timeout)
{
    eddy_future_t *f = eddy_job_wait(h, id);
    const char *exc = NULL;
    int status = 1;

    if (!f)
        cmd_die("alloc", "job %" PRIu64 ": cannot wait: %s", id,
                strerror(errno));
    if (eddy_future_wait_for(f, timeout) < 0) {
        cmd_warn("alloc",
                 "job %" PRIu64 ": still running %.0f s after its instance "
                 "was shut down: cancelling it",
                 id, timeout);
        cancel_job(h, id);
        (void)eddy_future_wait_for(f, timeout);
    }
    if (eddy_job_wait_get(f, &status, &exc) < 0)
        status = 1;
    eddy_future_destroy(f);
    return status;
}

static int alloc_run(int argc, char **argv)
{
    struct nested_opts o;
    struct nested_conn conn;
    double t0 = cmd_now();
    eddy_jobid_t id;
    char *uri, *tcp = NULL, idstr[32];
    int status, rc, jstatus;
    eddy_t *h;

    /* 1. options, then the broker job */
    nested_parse("alloc", usage_text, argc, argv, &o);
    h = cmd_open("alloc");
    nested_catch_signals();
    id = nested_submit("alloc", h, &o, 0, NULL);
    if (o.verbose)
        fprintf(stderr, "eddy alloc: job %" PRIu64 "\n", id);

    /* 2. wait for the nested instance to be whole */
    if (!(uri = nested_uri_wait(h, id, o.timeout, true, &tcp))) {
        int e = errno;
        cancel_job(h, id);
        cmd_die("alloc", "job %" PRIu64 ": %s", id,
                e == ESRCH       ? "ended before its instance was ready"
                : e == ETIMEDOUT ? "instance not ready in time (cancelled)"
                : e == EINTR     ? "interrupted while it started (cancelled)"
                                 : strerror(e));
    }
    /* 3. how to reach it from here: local://, else tcp:// and the token */
    if (nested_connect("alloc", h, id, uri, tcp, o.tcp, &conn) < 0) {
        cancel_job(h, id);
        (void)wait_job(h, id, ALLOC_END_WAIT);
        cmd_die("alloc", "job %" PRIu64 " cancelled", id);
    }
    if (o.verbose)
        fprintf(stderr, "eddy alloc: %d brokers ready in %.3f s at %s\n",
                o.nodes, cmd_now() - t0, conn.uri);

    /* 4. the command, then the end of the instance and of the job */
    snprintf(idstr, sizeof(idstr), "%" PRIu64, id);
    setenv("EDDY_ALLOC_JOB_ID", idstr, 1);
    status = nested_got_signal()
                 ? (128 + nested_got_signal()) << 8
                 : nested_run("alloc", conn.uri, argc - optind, argv + optind);
    if (nested_shutdown(conn.uri) < 0 && errno != ENOENT &&
        errno != ECONNREFUSED)
        cancel_job(h, id);
    jstatus = wait_job(h, id, ALLOC_END_WAIT);
    if (o.verbose)
        fprintf(stderr, "eddy alloc: job %" PRIu64 " ended (status %d)\n", id,
                jstatus);
    nested_conn_release(&conn);
    free(uri);
    free(tcp);
    eddy_close(h);
    rc = cmd_exit_code(status);
    if (rc == 0 && jstatus != 0)
        rc = 1;
    return rc;
}

const struct cmd cmd_alloc = {
    .name = "alloc",
    .summary = "run a command in a nested instance on allocated nodes",
    .usage = usage_text,
    .run = alloc_run,
};
