/* eddy run - submit a job, follow its output and wait for it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cmd.h"
#include "jobopts.h"

static const char *const usage_text =
    "Usage: eddy run [OPTIONS] CMD [ARGS...] [: [-n N] CMD [ARGS...]]...\n"
    "\n"
    "Run a job in the instance in $EDDY_URI and wait for it.  Its output\n"
    "is printed as it comes (or written to files), our stdin goes to its\n"
    "tasks, and the exit status is the job's: the largest task exit code,\n"
    "128+N for a task killed by signal N, 1 if the job never ran.\n"
    "Groups separated by ':' make an MPMD job (as with mpiexec): each\n"
    "group runs its own command with its own -n, ranks are given to the\n"
    "groups in order, and each group is one appnum.  Ctrl-C sends SIGINT\n"
    "to every task; a second Ctrl-C within a second cancels the job.\n"
    "\n" JOBOPTS_USAGE "  -h, --help              show this help\n";

static int run_run(int argc, char **argv)
{
    struct jobopts o;
    struct jobio io = {0};
    eddy_jobid_t id;
    eddy_t *h;
    int status;

    /* 1. the job description */
    jobopts_parse("run", argc, argv, &o);

    /* 2. submit it */
    h = cmd_open("run");
    id = jobopts_submit("run", h, &o, true);

    /* 3. follow it to the end */
    io.label = o.label;
    io.output = o.output;
    io.error = o.error;
    io.forward_stdin = true;
    io.input = o.input;
    io.input_ranks = o.input_ranks;
    io.signals = true;
    io.owner = true;
    status = jobio_attach("run", h, id, &io);
    eddy_close(h);
    jobopts_release(&o);
    return status;
}

const struct cmd cmd_run = {
    .name = "run",
    .summary = "run a job and wait for it, printing its output",
    .usage = usage_text,
    .run = run_run,
};
