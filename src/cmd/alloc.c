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
    "\n" NESTED_USAGE "  -h, --help              show this help\n";

/* How long the job may take to end once its instance was told to stop. */
#define ALLOC_END_WAIT 30.0

static volatile sig_atomic_t got_term;

static void on_term(int sig)
{
    got_term = sig;
}

/* Run CMD with EDDY_URI=uri; its wait status.  A SIGTERM/SIGHUP to us goes
 * to it. */
static int run_command(const char *uri, eddy_jobid_t id, int argc, char **argv)
{
    const char *shell = getenv("SHELL");
    char *shargv[] = {(char *)(shell && *shell ? shell : "/bin/sh"), NULL};
    char **cmdv = argc > 0 ? argv : shargv;
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_int, old_quit;
    char idstr[32];
    int status = 0;
    pid_t pid, w;

    snprintf(idstr, sizeof(idstr), "%" PRIu64, id);
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
    if ((pid = fork()) < 0)
        cmd_die("alloc", "fork: %s", strerror(errno));
    if (pid == 0) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGQUIT, &old_quit, NULL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        setenv("EDDY_URI", uri, 1);
        setenv("EDDY_ALLOC_JOB_ID", idstr, 1);
        execvp(cmdv[0], cmdv);
        fprintf(stderr, "eddy alloc: cannot run %s: %s\n", cmdv[0],
                strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    for (;;) {
        w = waitpid(pid, &status, 0);
        if (w == pid)
            break;
        if (errno == EINTR && got_term) {
            kill(pid, got_term);
            got_term = 0;
            continue;
        }
        if (errno != EINTR)
            break;
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    return status;
}

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
    struct sigaction sa = {.sa_handler = on_term};
    double t0 = cmd_now();
    eddy_jobid_t id;
    char *uri;
    int status, rc, jstatus;
    eddy_t *h;

    /* 1. options, then the broker job */
    nested_parse("alloc", usage_text, argc, argv, &o);
    h = cmd_open("alloc");
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    id = nested_submit("alloc", h, &o, 0, NULL);
    if (o.verbose)
        fprintf(stderr, "eddy alloc: job %" PRIu64 "\n", id);

    /* 2. wait for the nested instance to be whole */
    if (!(uri = nested_uri_wait(h, id, o.timeout, true))) {
        int e = errno;
        cancel_job(h, id);
        cmd_die("alloc", "job %" PRIu64 ": %s", id,
                e == ESRCH       ? "ended before its instance was ready"
                : e == ETIMEDOUT ? "instance not ready in time (cancelled)"
                                 : strerror(e));
    }
    if (o.verbose)
        fprintf(stderr, "eddy alloc: %d brokers ready in %.3f s at %s\n",
                o.nodes, cmd_now() - t0, uri);

    /* 3. the command, then the end of the instance and of the job */
    status = got_term ? (128 + got_term) << 8
                      : run_command(uri, id, argc - optind, argv + optind);
    if (nested_shutdown(uri) < 0 && errno != ENOENT && errno != ECONNREFUSED)
        cancel_job(h, id);
    jstatus = wait_job(h, id, ALLOC_END_WAIT);
    if (o.verbose)
        fprintf(stderr, "eddy alloc: job %" PRIu64 " ended (status %d)\n", id,
                jstatus);
    free(uri);
    eddy_close(h);
    if (WIFEXITED(status))
        rc = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        rc = 128 + WTERMSIG(status);
    else
        rc = 1;
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
