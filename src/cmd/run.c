/* eddy run - submit a job, follow its output and wait for it. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "jobopts.h"
#include "mpir.h"

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
    "With --stop, run does not release the job itself: it says on stderr\n"
    "when the job is held and keeps following it; release it from\n"
    "elsewhere (a debugger, a tool, 'eddy job release ID').\n"
    "With --debug, or when a debugger set MPIR_being_debugged, run is an\n"
    "MPIR starter (docs/mpir.md): the job starts with --stop=exec, and\n"
    "once every task is stopped run fills MPIR_proctable, calls\n"
    "MPIR_Breakpoint() and, when the debugger continues it, releases the\n"
    "tasks the debugger did not attach to.\n"
    "\n" JOBOPTS_USAGE
    "      --debug             be an MPIR starter for a debugger (above)\n"
    "  -h, --help              show this help\n";

/* With --stop: say once when the job is held, and how to let it go.
 * Runs from the handle's loop while jobio_attach() follows the job. */
static void on_held(eddy_future_t *f, void *arg)
{
    eddy_jobid_t id = *(const eddy_jobid_t *)arg;
    const char *name, *context;
    json_t *ctx;
    const char *where = NULL;
    double ts;

    if (eddy_job_event_get(f, &ts, &name, &context) < 0)
        return; /* the end of the eventlog (or an error attach reports) */
    if (!strcmp(name, "barrier-held")) {
        ctx = json_loads(context ? context : "{}", 0, NULL);
        if (json_unpack(ctx, "{s:s}", "where", &where) < 0)
            where = "startup";
        fprintf(stderr,
                "eddy run: job %" PRIu64 " held at %s barrier; release "
                "with: eddy job release %" PRIu64 "\n",
                id, where, id);
        json_decref(ctx);
    }
    eddy_future_reset(f);
}

static int run_run(int argc, char **argv)
{
    struct jobopts o;
    struct jobio io = {0};
    eddy_future_t *held = NULL;
    eddy_jobid_t id;
    eddy_t *h;
    int status;
    bool debug;

    /* 1. the job description; a debugger needs the tasks stopped at exec */
    jobopts_parse("run", argc, argv, &o);
    debug = mpir_wanted(o.debug);
    if (debug) {
        if (o.stop && strcmp(o.stop, "exec") != 0)
            cmd_die("run",
                    "--debug starts the job with --stop=exec, not "
                    "--stop=%s",
                    o.stop);
        if (eddy_jobspec_set_stop(o.js, "exec") < 0)
            cmd_die("run", "%s", strerror(errno));
    }

    /* 2. submit it */
    h = cmd_open("run");
    id = jobopts_submit("run", h, &o, true);

    /* 3. as an MPIR starter: hand the stopped job to the debugger, then
     * let go of what it did not take */
    if (debug && mpir_wait_held("run", h, id)) {
        eddy_future_t *f;
        mpir_acquire("run", h, id, false);
        mpir_spawned("run", h, id);
        if (!(f = eddy_job_release_untraced(h, id)) ||
            eddy_rpc_get(f, NULL) < 0)
            cmd_warn("run", "job %" PRIu64 ": release: %s", id,
                     f ? eddy_future_error_string(f) : strerror(errno));
        eddy_future_destroy(f);
    }

    /* 4. with --stop nobody but the user can release the job: tell them
     * when it is held, without stopping to wait for it */
    if (o.stop && !debug &&
        (!(held = eddy_job_event_watch(h, id, EDDY_JOB_EVENT_FOLLOW)) ||
         eddy_future_then(held, -1, on_held, &id) < 0))
        cmd_die("run", "job %" PRIu64 ": cannot watch: %s", id,
                strerror(errno));

    /* 5. follow it to the end */
    io.label = o.label;
    io.output = o.output;
    io.error = o.error;
    io.forward_stdin = true;
    io.input = o.input;
    io.input_ranks = o.input_ranks;
    io.signals = true;
    io.owner = true;
    if (debug)
        io.on_fatal = mpir_aborting;
    status = jobio_attach("run", h, id, &io);
    eddy_future_destroy(held);
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
