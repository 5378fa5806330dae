/* eddy uri - print the URI of the enclosing instance, or of the nested
 * instance that job ID is (eddy alloc, eddy batch). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "jobopts.h"
#include "nested.h"

/* How long `eddy uri ID` waits for a pending nested instance. */
#define URI_NESTED_WAIT 60.0

/* The nested instance's URI, as its rank 0 announced it in the job's
 * output; waits while the job is pending or starting.  Its local:// URI
 * if that answers here (and not 'want_tcp'), else its tcp:// one. */
static int nested_uri(const char *arg, bool want_tcp)
{
    eddy_jobid_t id = jobid_parse("uri", arg);
    eddy_t *h = cmd_open("uri");
    char *tcp = NULL;
    char *uri = nested_uri_wait(h, id, URI_NESTED_WAIT, false, &tcp);

    if (!uri) {
        int e = errno;
        if (e == ESRCH)
            cmd_die("uri", "job %" PRIu64 " is not a running nested instance",
                    id);
        if (e == ETIMEDOUT)
            cmd_die("uri", "job %" PRIu64 ": no instance after %.0f s", id,
                    URI_NESTED_WAIT);
        cmd_die("uri", "job %" PRIu64 ": %s", id,
                e == ENOENT ? "no such job" : strerror(e));
    }
    eddy_close(h);
    if (tcp && (want_tcp || !nested_local_ok(uri)))
        printf("%s\n", tcp);
    else if (want_tcp)
        cmd_die("uri", "job %" PRIu64 ": the instance announced no tcp:// URI",
                id);
    else
        printf("%s\n", uri);
    free(uri);
    free(tcp);
    return 0;
}

static int uri_run(int argc, char **argv)
{
    const char *var = "EDDY_URI";
    const char *uri;
    eddy_error_t err;
    eddy_t *h;

    if (argc > 1 && strcmp(argv[1], "--tcp") == 0) {
        var = "EDDY_TCP_URI";
        argc--;
        argv++;
    }
    if (argc > 2)
        cmd_die("uri", "unexpected argument '%s' (see 'eddy uri -h')", argv[2]);
    if (argc == 2)
        return nested_uri(argv[1], strcmp(var, "EDDY_TCP_URI") == 0);
    if (!(uri = getenv(var))) {
        if (strcmp(var, "EDDY_TCP_URI") == 0)
            cmd_die("uri", "EDDY_TCP_URI is not set: the instance does not "
                           "listen for remote clients (eddy start "
                           "--listen=ADDR:PORT)");
        cmd_die("uri", "EDDY_URI is not set: not inside an eddy instance");
    }
    /* Check that it answers, so scripts can rely on the printed URI. */
    if (!(h = eddy_open(uri, 0, &err)))
        cmd_die("uri", "%s", err.text);
    eddy_close(h);
    printf("%s\n", uri);
    return 0;
}

const struct cmd cmd_uri = {
    .name = "uri",
    .summary = "print the URI of this instance or of a nested one",
    .usage = "Usage: eddy uri [--tcp] [ID]\n"
             "\n"
             "Without ID, print the URI of the instance this shell runs in\n"
             "($EDDY_URI), after checking that the instance answers.  With\n"
             "--tcp, the URI remote clients use ($EDDY_TCP_URI, set by\n"
             "'eddy start --listen'), after connecting with the token.\n"
             "With ID, print the URI of the nested instance that job ID of\n"
             "this instance is (eddy alloc, eddy batch), waiting for it to\n"
             "be ready if the job is still starting: its local:// URI if\n"
             "that socket answers here, else (or with --tcp) its tcp://\n"
             "URI, which needs the nested instance's token ('eddy proxy\n"
             "ID' fetches it; docs/alloc.md).\n",
    .run = uri_run,
};
