/* eddy uri - print the URI of the enclosing instance. */
#include <stdio.h>
#include <stdlib.h>

#include "cmd.h"

static int uri_run(int argc, char **argv)
{
    const char *uri = getenv("EDDY_URI");
    eddy_error_t err;
    eddy_t *h;

    if (argc > 1)
        cmd_die("uri", "unexpected argument '%s' (see 'eddy uri -h')", argv[1]);
    if (!uri)
        cmd_die("uri", "EDDY_URI is not set: not inside an eddy instance");
    /* Check that it answers, so scripts can rely on the printed URI. */
    if (!(h = eddy_open(uri, 0, &err)))
        cmd_die("uri", "%s", err.text);
    eddy_close(h);
    printf("%s\n", uri);
    return 0;
}

const struct cmd cmd_uri = {
    .name = "uri",
    .summary = "print the URI of the enclosing instance",
    .usage = "Usage: eddy uri\n"
             "\n"
             "Print the URI of the instance this shell runs in ($EDDY_URI),\n"
             "after checking that the instance answers.\n",
    .run = uri_run,
};
