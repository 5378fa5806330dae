/* eddy shutdown - stop every broker of the enclosing instance. */
#include <stdio.h>

#include "cmd.h"

static int shutdown_run(int argc, char **argv)
{
    eddy_t *h;
    eddy_future_t *f;

    if (argc > 1)
        cmd_die("shutdown", "unexpected argument '%s'", argv[1]);
    h = cmd_open("shutdown");
    if (!(f = eddy_rpc(h, "broker.shutdown", 0, 0, NULL, NULL, 0)) ||
        eddy_rpc_get(f, NULL) < 0)
        cmd_die("shutdown", "%s",
                f ? eddy_future_error_string(f) : "cannot send request");
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

const struct cmd cmd_shutdown = {
    .name = "shutdown",
    .summary = "shut the instance down",
    .usage =
        "Usage: eddy shutdown\n"
        "\n"
        "Ask rank 0 to shut the whole instance down: every broker stops\n"
        "its services and exits, leaves first.  'eddy start' then exits.\n",
    .run = shutdown_run,
};
