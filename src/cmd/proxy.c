/* eddy proxy - run a command against a nested instance of this one. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd.h"
#include "jobopts.h"
#include "nested.h"

static const char *const usage_text =
    "Usage: eddy proxy [--tcp] ID [CMD [ARG...]]\n"
    "\n"
    "Run CMD (default: an interactive $SHELL) with EDDY_URI set to the\n"
    "nested instance that job ID of the instance in $EDDY_URI is (eddy\n"
    "alloc, eddy batch), so that eddy commands in it talk to that\n"
    "instance, and exit with CMD's status.  Works from any node of this\n"
    "instance: on the nested rank 0's host CMD gets its local:// URI;\n"
    "elsewhere its tcp:// URI, and the instance's token, fetched from\n"
    "that host through this instance, sealed to a key made for the call,\n"
    "goes to a private file named by EDDY_TOKEN_FILE, removed when CMD\n"
    "exits (docs/alloc.md).\n"
    "\n"
    "      --tcp               use the tcp:// URI even on rank 0's host\n"
    "  -h, --help              show this help\n"
    "\n"
    "Internal: 'eddy proxy --seal-token=PUBKEY FILE' prints the token in\n"
    "FILE sealed to PUBKEY (what the fetch runs on rank 0's host).\n";

/* How long to wait for a pending nested instance. */
#define PROXY_WAIT 60.0

static int proxy_run(int argc, char **argv)
{
    const char *sealkey = "--seal-token=";
    struct nested_conn conn;
    bool want_tcp = false;
    eddy_jobid_t id;
    char *uri, *tcp = NULL;
    int arg = 1, status, rc;
    eddy_t *h;

    if (argc > 1 && !strncmp(argv[1], sealkey, strlen(sealkey))) {
        if (argc != 3)
            cmd_die("proxy", "--seal-token=PUBKEY takes one FILE");
        return nested_seal_token(argv[1] + strlen(sealkey), argv[2]);
    }
    if (argc > arg && !strcmp(argv[arg], "--tcp")) {
        want_tcp = true;
        arg++;
    }
    if (argc <= arg)
        cmd_die("proxy", "no job ID given (see 'eddy proxy -h')");
    id = jobid_parse("proxy", argv[arg++]);
    h = cmd_open("proxy");
    nested_catch_signals();
    if (!(uri = nested_uri_wait(h, id, PROXY_WAIT, false, &tcp)))
        cmd_die("proxy", "job %" PRIu64 ": %s", id,
                errno == ESRCH    ? "not a running nested instance"
                : errno == ENOENT ? "no such job"
                : errno == EINTR  ? "interrupted"
                                  : strerror(errno));
    if (nested_connect("proxy", h, id, uri, tcp, want_tcp, &conn) < 0)
        return 1;
    eddy_close(h);
    free(uri);
    free(tcp);
    /* Wait for CMD rather than exec it, to remove the token copy after;
     * a signal while we connected means no CMD at all. */
    status = nested_got_signal()
                 ? (128 + nested_got_signal()) << 8
                 : nested_run("proxy", conn.uri, argc - arg, argv + arg);
    nested_conn_release(&conn);
    rc = cmd_exit_code(status);
    return rc;
}

const struct cmd cmd_proxy = {
    .name = "proxy",
    .summary = "run a command against a nested instance",
    .usage = usage_text,
    .run = proxy_run,
};
