/* eddy help - list the commands or show one command's usage. */
#include <stdio.h>

#include "cmd.h"

static int help_run(int argc, char **argv)
{
    const struct cmd *cmd;

    if (argc < 2) {
        printf("Usage: eddy COMMAND [ARGS...]\n\nCommands:\n");
        for (int i = 0; eddy_commands[i]; i++)
            printf("  %-10s %s\n", eddy_commands[i]->name,
                   eddy_commands[i]->summary);
        return 0;
    }
    if (!(cmd = cmd_lookup(argv[1])))
        cmd_die("help", "'%s' is not an eddy command", argv[1]);
    fputs(cmd->usage, stdout);
    return 0;
}

const struct cmd cmd_help = {
    .name = "help",
    .summary = "list the commands, or show how to use one",
    .usage = "Usage: eddy help [COMMAND]\n"
             "\n"
             "Without COMMAND, list every eddy command; with it, show its "
             "usage.\n",
    .run = help_run,
};
