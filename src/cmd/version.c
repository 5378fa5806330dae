/* eddy version - print the version of the command and, if reachable, of
 * the instance. */
#include <stdio.h>
#include <stdlib.h>

#include "cmd.h"

static int version_run(int argc, char **argv)
{
    const char *version;
    eddy_error_t err;
    eddy_t *h;
    eddy_future_t *f;

    printf("eddy %s\n", EDDY_VERSION_STRING);
    if (!getenv("EDDY_URI"))
        return 0;
    if (!(h = eddy_open(NULL, 0, &err))) {
        cmd_warn("version", "%s", err.text);
        return 1;
    }
    if (!(f = eddy_rpc(h, "broker.info", 0, 0, NULL, NULL, 0)) ||
        eddy_rpc_get_unpack(f, "{s:s}", "version", &version) < 0) {
        cmd_warn("version", "broker.info: %s",
                 f ? eddy_future_error_string(f) : "cannot send");
        eddy_future_destroy(f);
        eddy_close(h);
        return 1;
    }
    printf("instance %s, %u brokers\n", version, eddy_get_size(h));
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

const struct cmd cmd_version = {
    .name = "version",
    .summary = "print the version of eddy (and of the instance, if any)",
    .usage = "Usage: eddy version\n"
             "\n"
             "Print the version of this eddy command and, inside an instance\n"
             "($EDDY_URI set), the version and size of the instance.\n",
    .run = version_run,
};
