/* cmdutil.c - small helpers every subcommand uses. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"

static void vwarn(const char *name, const char *fmt, va_list ap)
{
    fprintf(stderr, "eddy %s: ", name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void cmd_warn(const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwarn(name, fmt, ap);
    va_end(ap);
}

void cmd_die(const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwarn(name, fmt, ap);
    va_end(ap);
    exit(1);
}

bool cmd_wants_help(const struct cmd *cmd, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        /* Stop at the first operand: in `eddy exec -r 0 ls -h` the -h is
         * the program's. */
        if (argv[i][0] != '-')
            break;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(cmd->usage, stdout);
            return true;
        }
    }
    return false;
}

eddy_t *cmd_open(const char *name)
{
    eddy_error_t err;
    eddy_t *h = eddy_open(NULL, 0, &err);
    if (!h)
        cmd_die(name, "%s", err.text);
    return h;
}

double cmd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
