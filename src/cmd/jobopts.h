/* jobopts.h - what `eddy run`, `eddy submit` and `eddy job` share.
 *
 * Two pieces:
 *
 *  1. The job options of run and submit (counts, environment, cwd, time
 *     limit, name, I/O).  jobopts_parse() reads a command line of the form
 *        [OPTIONS] CMD [ARGS...] [: [-n N] CMD [ARGS...]]...
 *     (MPMD groups separated by ':' as with mpiexec; every option but -n
 *     applies to the whole job and goes before the first command) and
 *     builds the job description.  jobopts_release() frees it.
 *
 *  2. The job I/O engine of run, `job attach` and the background writer of
 *     `submit --output`: jobio_attach() attaches to a job's output
 *     (replayed from the start, then live), prints it (optionally
 *     labelled "RANK: ") or writes it to files named by a template with
 *     {{id}}, {{rank}} and {{node}}, feeds the job's stdin from ours or
 *     from a file, forwards SIGINT/SIGTERM (Ctrl-C twice within a second
 *     cancels the job), prints the job's exceptions, and returns the job's
 *     status once it is INACTIVE and all output has been delivered.
 *
 * Commands are programs: on bad input and on fatal errors these functions
 * print "eddy CMD: why" and exit(1).
 */
#ifndef EDDY_CMD_JOBOPTS_H
#define EDDY_CMD_JOBOPTS_H

#include <stdbool.h>

#include "eddy/core.h"
#include "eddy/job.h"

/* The option text shared by the usage of run and submit. */
#define JOBOPTS_USAGE                                                          \
    "  -N, --nodes=N           number of nodes (brokers)\n"                    \
    "  -n, --ntasks=N          number of tasks (of this group, with ':')\n"    \
    "  -c, --cores-per-task=N  cores per task (default 1)\n"                   \
    "      --tasks-per-node=N  tasks on each node (with -N)\n"                 \
    "      --exclusive         nodes for this job alone (with -N)\n"           \
    "      --env=K=V           set K in the tasks' environment\n"              \
    "      --env=-K            remove K from it\n"                             \
    "      --env=K             pass K from our environment\n"                  \
    "      --env-remove=GLOB   remove every variable matching GLOB\n"          \
    "      --cwd=DIR           working directory (default: the current)\n"     \
    "  -t, --time-limit=T      time limit: seconds, or with s, m, h, d\n"      \
    "      --job-name=NAME     name shown by 'eddy jobs'\n"                    \
    "  -l, --label-io          prefix output lines with 'RANK: '\n"            \
    "      --output=FILE       write stdout to FILE ({{id}}, {{rank}},\n"      \
    "                          {{node}} are replaced; with {{rank}} each\n"    \
    "                          rank gets its own file)\n"                      \
    "      --error=FILE        write stderr to FILE (default: as --output)\n"  \
    "      --input=FILE        read the tasks' stdin from FILE\n"              \
    "      --input-ranks=IDSET only these ranks get stdin (others: EOF)\n"     \
    "      --stop=MODE         hold the tasks at a startup barrier until\n"    \
    "                          'eddy job release ID': fork (forked, pids\n"    \
    "                          known, program not started), exec (stopped\n"   \
    "                          at the program's first instruction, for a\n"    \
    "                          debugger), init (at PMI init; never\n"          \
    "                          triggers for a program that does not use\n"     \
    "                          PMI, which then just runs)\n"                   \
    "  -o plugin=PATH[,ARGS]   load shell plugin PATH (a .so, see\n"           \
    "                          docs/plugins.md) with ARGS into the job's\n"    \
    "                          shells; repeatable, loaded in order\n"

struct jobopts {
    eddy_jobspec_t *js;
    bool label;
    const char *output; /* template or NULL */
    const char *error;  /* template or NULL */
    const char *input;  /* file or NULL */
    const char *input_ranks;
    const char *stop; /* --stop mode or NULL */
    bool debug;       /* --debug: be an MPIR starter (run only) */
};

/* Parse argv[1..argc-1] as described above into 'o' (zeroed first) and
 * build o->js.  'cmd' names the command in messages.  Exits on error. */
void jobopts_parse(const char *cmd, int argc, char **argv, struct jobopts *o);

/* Submit o->js through 'h' and return the job's ID, or exit with the
 * reason it was refused (naming the field at fault, or "can never fit").
 * 'with_stdin': the job's stdin will be sent with eddy_job_stdin()
 * (otherwise its tasks read /dev/null). */
eddy_jobid_t jobopts_submit(const char *cmd,
                            eddy_t *h,
                            const struct jobopts *o,
                            bool with_stdin);

/* Submit 'js' (borrowed) through 'h' and return the job's ID, or exit
 * with the reason it was refused; what jobopts_submit() and the nested
 * instance commands share. */
eddy_jobid_t jobspec_submit(const char *cmd, eddy_t *h, eddy_jobspec_t *js);

/* Free o->js.  Accepts a zeroed struct. */
void jobopts_release(struct jobopts *o);

/* How jobio_attach() deals with a job. */
struct jobio {
    bool label;
    const char *output;      /* stdout file template, or NULL: our stdout */
    const char *error;       /* stderr file template, or NULL: as output */
    bool forward_stdin;      /* send our stdin (or 'input') to the job */
    const char *input;       /* file to send instead of our stdin */
    const char *input_ranks; /* ranks that get it (NULL: all) */
    bool signals;            /* forward SIGINT/SIGTERM, Ctrl-C twice cancels */
    bool quiet_exceptions;   /* do not print the job's exceptions */
    bool owner;              /* we submitted the job: a signal before it starts
                                cancels it (else we just detach) */
    /* called for each fatal exception of the job, after it is printed,
     * with its type and note (the MPIR starter's abort breakpoint) */
    void (*on_fatal)(const char *type, const char *note);
};

/* Attach to job 'id' through 'h' as 'io' says, until the job is INACTIVE
 * and all its output is out.  Returns the job status (the largest task
 * exit code, 128+signal for a task killed by one), or 1 if the job never
 * ran.  Exits on error (unknown job, lost connection). */
int jobio_attach(const char *cmd,
                 eddy_t *h,
                 eddy_jobid_t id,
                 const struct jobio *io);

/* A job ID from the command line, or exit with "eddy CMD: 'S' is not a
 * job ID". */
eddy_jobid_t jobid_parse(const char *cmd, const char *s);

/* Print "eddy CMD: job ID: why" for the failed future 'f' (without
 * repeating "job ID" when the message already starts with it) and exit. */
void jobid_die(const char *cmd, eddy_jobid_t id, eddy_future_t *f)
    __attribute__((noreturn));

#endif /* !EDDY_CMD_JOBOPTS_H */
