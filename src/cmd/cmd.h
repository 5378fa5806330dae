/* cmd.h - the eddy command's subcommands.
 *
 * Each subcommand lives in its own file src/cmd/<name>.c and defines one
 * `const struct cmd cmd_<name>`; commands.c lists them all.  main() looks
 * the first argument up in that table and calls run(argc, argv) with
 * argv[0] set to the subcommand name.  Every subcommand answers -h/--help
 * by printing its usage to stdout and returning 0.
 */
#ifndef EDDY_CMD_CMD_H
#define EDDY_CMD_CMD_H

#include <stdbool.h>
#include <stdio.h>

#include "eddy/core.h"

struct cmd {
    const char *name;    /* "exec" */
    const char *summary; /* one line for `eddy help` */
    const char *usage;   /* full help text, printed by -h and `eddy help X` */
    int (*run)(int argc, char **argv);
};

/* NULL-terminated table of every subcommand (commands.c). */
extern const struct cmd *const eddy_commands[];

const struct cmd *cmd_lookup(const char *name);

/* Print "eddy NAME: message" to stderr and exit(1).  Commands are programs,
 * so they may exit; library code never does. */
void cmd_die(const char *name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* Print "eddy NAME: message" to stderr. */
void cmd_warn(const char *name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* True if argv has -h or --help before any "--": print usage, caller
 * returns 0. */
bool cmd_wants_help(const struct cmd *cmd, int argc, char **argv);

/* Open the instance named by $EDDY_URI, or die with the library's message
 * naming the command. */
eddy_t *cmd_open(const char *name);

/* A signal given as a number, a name or an abbreviation ("9", "SIGKILL",
 * "kill"), or die with a message naming the command. */
int cmd_parse_signal(const char *cmd, const char *s);

/* The exit status a shell gives for a child's wait(2) status: its exit
 * code, 128+N if signal N killed it, 1 otherwise. */
int cmd_exit_code(int wstatus);

/* Seconds on a monotonic clock. */
double cmd_now(void);

#endif /* !EDDY_CMD_CMD_H */
