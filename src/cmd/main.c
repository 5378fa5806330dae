/* eddy - the command: git-style subcommands, each in its own file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "src/common/stdfds.h"

static void usage(FILE *f)
{
    fprintf(f, "Usage: eddy COMMAND [ARGS...]\n\nCommands:\n");
    for (int i = 0; eddy_commands[i]; i++)
        fprintf(f, "  %-10s %s\n", eddy_commands[i]->name,
                eddy_commands[i]->summary);
    fprintf(f, "\nRun 'eddy help COMMAND' or 'eddy COMMAND -h' for more.\n");
}

int main(int argc, char **argv)
{
    const struct cmd *cmd;

    /* 0. a closed stdin/stdout must not become our broker socket */
    stdfds_sanitize();

    /* 1. no command, or a request for help: list the commands */
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version"))
        argv[1] = (char *)"version";

    /* 2. find the subcommand and hand it the rest of the line */
    if (!(cmd = cmd_lookup(argv[1]))) {
        fprintf(stderr, "eddy: '%s' is not an eddy command. See 'eddy help'.\n",
                argv[1]);
        return 1;
    }
    if (cmd_wants_help(cmd, argc - 1, argv + 1))
        return 0;
    return cmd->run(argc - 1, argv + 1);
}
