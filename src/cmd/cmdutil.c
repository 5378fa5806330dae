/* cmdutil.c - small helpers every subcommand uses. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
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

int cmd_parse_signal(const char *cmd, const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);

    if (*s && *end == '\0') {
        if (v < 1 || v >= NSIG)
            cmd_die(cmd, "signal %s is out of range (1-%d)", s, NSIG - 1);
        return (int)v;
    }
    if (!strncasecmp(s, "SIG", 3))
        s += 3;
    for (int i = 1; i < NSIG; i++) {
        const char *abbrev = sigabbrev_np(i);
        if (abbrev && !strcasecmp(abbrev, s))
            return i;
    }
    cmd_die(cmd, "'%s' is not a signal", s);
}

int cmd_exit_code(int wstatus)
{
    if (WIFEXITED(wstatus))
        return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus))
        return 128 + WTERMSIG(wstatus);
    return 1;
}
