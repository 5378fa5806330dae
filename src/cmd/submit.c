/* eddy submit - queue a job and print its ID. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#include "cmd.h"
#include "jobopts.h"

static const char *const usage_text =
    "Usage: eddy submit [OPTIONS] CMD [ARGS...] [: [-n N] CMD [ARGS...]]...\n"
    "\n"
    "Queue a job in the instance in $EDDY_URI and print its ID.  The job\n"
    "runs when its resources are free; 'eddy job attach ID' shows its\n"
    "output, 'eddy job wait ID' waits for it.  With --output, --error or\n"
    "--input, a background 'eddy submit' process stays attached to the job\n"
    "to write its output files and send it the input file; it ends shortly\n"
    "after the job (its files are complete when it has exited).\n"
    "Groups separated by ':' make an MPMD job, as with 'eddy run'.\n"
    "\n" JOBOPTS_USAGE "  -h, --help              show this help\n";

/* The background writer: attach to the job from a new session, with no
 * terminal and our standard streams on /dev/null (so that a caller
 * reading our output is not held open until the job ends). */
static void start_writer(const struct jobopts *o, eddy_jobid_t id)
{
    struct jobio io = {0};
    pid_t pid;
    int fd;
    eddy_t *h;

    fflush(NULL);
    if ((pid = fork()) < 0)
        cmd_die("submit", "job %" PRIu64 ": cannot start the output writer: %s",
                id, strerror(errno));
    if (pid > 0)
        return;
    (void)setsid();
    if ((fd = open("/dev/null", O_RDWR)) >= 0) {
        dup2(fd, STDIN_FILENO);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        if (fd > STDERR_FILENO)
            close(fd);
    }
    /* nor hold any other descriptor of our caller (a test harness waits
     * for its pipes to close) */
    (void)close_range(STDERR_FILENO + 1, ~0u, 0);
    h = cmd_open("submit");
    io.label = o->label;
    io.output = o->output;
    io.error = o->error;
    io.forward_stdin = o->input != NULL;
    io.input = o->input;
    io.input_ranks = o->input_ranks;
    io.quiet_exceptions = true;
    /* no output template: stdout stays /dev/null, as the user asked only
     * for the other stream or for input */
    (void)jobio_attach("submit", h, id, &io);
    eddy_close(h);
    _exit(0);
}

static int submit_run(int argc, char **argv)
{
    struct jobopts o;
    eddy_jobid_t id;
    eddy_t *h;

    jobopts_parse("submit", argc, argv, &o);
    if (o.debug)
        cmd_die("submit", "--debug needs a starter that stays with the job: "
                          "use 'eddy run --debug' or 'eddy job attach "
                          "--debug ID'");
    if (o.input_ranks && !o.input)
        cmd_die("submit", "--input-ranks needs --input (a submitted job "
                          "reads no stdin of ours)");
    h = cmd_open("submit");
    id = jobopts_submit("submit", h, &o, o.input != NULL);
    eddy_close(h);
    printf("%" PRIu64 "\n", id);
    if (fflush(stdout) != 0)
        cmd_die("submit", "job %" PRIu64 ": cannot print the ID: %s", id,
                strerror(errno));
    if (o.output || o.error || o.input)
        start_writer(&o, id);
    jobopts_release(&o);
    return 0;
}

const struct cmd cmd_submit = {
    .name = "submit",
    .summary = "queue a job and print its ID",
    .usage = usage_text,
    .run = submit_run,
};
