/* eddy batch - submit a script to run in a nested instance of its own. */
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "cmd.h"
#include "nested.h"

static const char *const usage_text =
    "Usage: eddy batch [OPTIONS] SCRIPT [ARG...]\n"
    "\n"
    "Submit a job to the instance in $EDDY_URI whose tasks are one\n"
    "eddy-broker per node, forming a nested instance; its rank 0 runs\n"
    "SCRIPT with EDDY_URI set to it and shuts the instance down when\n"
    "SCRIPT exits.  Print the job ID at once.  The script's output is the\n"
    "job's ('eddy job attach ID'), after two stderr lines\n"
    "EDDY_TCP_URI=URI and EDDY_URI=URI; 'eddy uri ID' prints the URI\n"
    "while it runs, and 'eddy proxy ID' connects to it from any node.\n"
    "\n" NESTED_USAGE "  -h, --help              show this help\n";

static int batch_run(int argc, char **argv)
{
    struct nested_opts o;
    eddy_jobid_t id;
    eddy_t *h;

    nested_parse("batch", usage_text, argc, argv, &o);
    if (o.tcp)
        cmd_die("batch", "--tcp is an option of eddy alloc and eddy proxy");
    if (optind >= argc)
        cmd_die("batch", "no SCRIPT given (see 'eddy batch -h')");
    h = cmd_open("batch");
    if (!o.name)
        o.name = argv[optind];
    id = nested_submit("batch", h, &o, argc - optind, argv + optind);
    eddy_close(h);
    printf("%" PRIu64 "\n", id);
    return fflush(stdout) == 0 ? 0 : 1;
}

const struct cmd cmd_batch = {
    .name = "batch",
    .summary = "submit a script to run in a nested instance",
    .usage = usage_text,
    .run = batch_run,
};
