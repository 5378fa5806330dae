/* atp-like.c - an example shell plugin doing what an ATP-style tool
 * needs before a job runs (docs/plugins.md).
 *
 * At shell.start (every task of the job forked and held, nothing run
 * yet) it starts one helper per node, passing it the pids of the node's
 * tasks, and tells every task where its helper is through
 * ATP_LIKE_HELPER_PID.  When the helper ends, the shell tells us.
 *
 * Args (comma separated, all optional): helper=PATH (default
 * "eddy-atp-helper", searched on PATH), out=DIR (given to the helper as
 * ATP_LIKE_OUT).
 *
 * Build: cc -shared -fPIC -I PREFIX/include -o atp-like.so atp-like.c
 * Use:   eddy run -N4 -n8 -o plugin=$PWD/atp-like.so,helper=/x/helper prog
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eddy/shell.h"

static char helper[1024] = "eddy-atp-helper";
static char outdir[1024];

static int helper_exited(eddy_shell_t *sh, pid_t pid, int status, void *arg)
{
    eddy_shell_log(sh, EDDY_SHELL_LOG_DEBUG, "helper %d exited with %d",
                   (int)pid, status);
    return 0;
}

static int start(eddy_shell_t *sh,
                 const char *topic,
                 eddy_shell_task_t *task,
                 void *arg)
{
    uint32_t n = eddy_shell_local_ntasks(sh);
    char(*pids)[16] = calloc(n, sizeof(*pids));
    const char **argv = calloc(n + 2, sizeof(*argv));
    char env[1100], num[16];
    const char *env_add[] = {env, NULL};
    pid_t pid;

    if (!pids || !argv) {
        free(pids);
        free(argv);
        return eddy_shell_fail(sh, "out of memory");
    }
    argv[0] = helper;
    for (uint32_t i = 0; i < n; i++) {
        snprintf(pids[i], sizeof(pids[i]), "%d",
                 (int)eddy_shell_task_pid(eddy_shell_local_task(sh, i)));
        argv[i + 1] = pids[i];
    }
    snprintf(env, sizeof(env), "ATP_LIKE_OUT=%s", outdir);
    pid = eddy_shell_spawn(sh, argv, outdir[0] ? env_add : NULL, helper_exited,
                           NULL);
    free(pids);
    free(argv);
    if (pid < 0)
        return eddy_shell_fail(sh, "cannot start helper %s", helper);
    snprintf(num, sizeof(num), "%d", (int)pid);
    return eddy_shell_setenv(sh, "ATP_LIKE_HELPER_PID", num);
}

int eddy_plugin_init(eddy_shell_plugin_t *p, const char *args)
{
    char copy[2048], *tok, *save = NULL;

    snprintf(copy, sizeof(copy), "%s", args);
    for (tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (!strncmp(tok, "helper=", 7))
            snprintf(helper, sizeof(helper), "%s", tok + 7);
        else if (!strncmp(tok, "out=", 4))
            snprintf(outdir, sizeof(outdir), "%s", tok + 4);
        else
            return eddy_shell_fail(eddy_shell_plugin_shell(p),
                                   "unknown argument '%s'", tok);
    }
    return eddy_shell_plugin_on(p, "shell.start", start, NULL);
}
