/* eddy proxy - run a command against a nested instance of this one. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "jobopts.h"
#include "nested.h"

static const char *const usage_text =
    "Usage: eddy proxy ID [CMD [ARG...]]\n"
    "\n"
    "Run CMD (default: an interactive $SHELL) with EDDY_URI set to the\n"
    "nested instance that job ID of the instance in $EDDY_URI is (eddy\n"
    "alloc, eddy batch), so that eddy commands in it talk to that\n"
    "instance.  The nested URI is its rank 0's local socket: run proxy on\n"
    "that node (with brokers on one host, anywhere).\n";

static int proxy_run(int argc, char **argv)
{
    const char *shell = getenv("SHELL");
    char *shargv[] = {(char *)(shell && *shell ? shell : "/bin/sh"), NULL};
    eddy_error_t err;
    eddy_jobid_t id;
    char **cmdv;
    char *uri;
    eddy_t *h, *nh;

    if (argc < 2)
        cmd_die("proxy", "no job ID given (see 'eddy proxy -h')");
    id = jobid_parse("proxy", argv[1]);
    cmdv = argc > 2 ? argv + 2 : shargv;
    h = cmd_open("proxy");
    if (!(uri = nested_uri_wait(h, id, 60.0, false)))
        cmd_die("proxy", "job %" PRIu64 ": %s", id,
                errno == ESRCH    ? "not a running nested instance"
                : errno == ENOENT ? "no such job"
                                  : strerror(errno));
    eddy_close(h);
    /* Fail here, with the reason, rather than in every command of CMD. */
    if (!(nh = eddy_open(uri, 0, &err)))
        cmd_die("proxy", "job %" PRIu64 ": %s", id, err.text);
    eddy_close(nh);
    if (setenv("EDDY_URI", uri, 1) < 0)
        cmd_die("proxy", "setenv: %s", strerror(errno));
    free(uri);
    execvp(cmdv[0], cmdv);
    fprintf(stderr, "eddy proxy: cannot run %s: %s\n", cmdv[0],
            strerror(errno));
    return errno == ENOENT ? 127 : 126;
}

const struct cmd cmd_proxy = {
    .name = "proxy",
    .summary = "run a command against a nested instance",
    .usage = usage_text,
    .run = proxy_run,
};
