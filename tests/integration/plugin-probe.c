/* plugin-probe.c - a shell plugin for t0510-plugins.bats: writes one line
 * per callback, with the data the callback can see, to OUT.NODE (NODE =
 * the shell's node index), and fails where told.
 *
 * Args (comma separated): out=PREFIX (default $PROBE_OUT), tag=WORD (put
 * in every line; default "probe"), fail=TOPIC (init, shell.init,
 * task.init, shell.start, task.exit, shell.exit), nostart (do not
 * register shell.start), log (eddy_shell_log a line at shell.init).
 * Environment: PROBE_INIT=TAG set at shell.init, PROBE_START=TAG at
 * shell.start, PROBE_TASK=RANK in task.init.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eddy/shell.h"

static char out_prefix[512];
static char out_path[600];
static char tag[64] = "probe";
static char fail_at[32];
static int want_start = 1;
static int want_log;

/* One line per write(): shells and tasks append to the same file. */
static void out(eddy_shell_t *sh, const char *fmt, ...)
{
    char line[8192];
    int n, fd;
    va_list ap;

    if (!out_path[0])
        snprintf(out_path, sizeof(out_path), "%s.%u", out_prefix,
                 eddy_shell_node_index(sh));
    n = snprintf(line, sizeof(line), "%s ", tag);
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    if ((fd = open(out_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                   0644)) >= 0) {
        (void)!write(fd, line, (size_t)n);
        close(fd);
    }
}

static int maybe_fail(eddy_shell_t *sh, const char *topic)
{
    if (strcmp(fail_at, topic) != 0)
        return 0;
    return eddy_shell_fail(sh, "probe told to fail at %s", topic);
}

static int on_cb(eddy_shell_t *sh,
                 const char *topic,
                 eddy_shell_task_t *t,
                 void *arg)
{
    char buf[4096];
    size_t off = 0;

    if (!strcmp(topic, "shell.init")) {
        for (uint32_t i = 0; i < eddy_shell_local_ntasks(sh); i++)
            off += (size_t)snprintf(
                buf + off, sizeof(buf) - off, "%s%u", i ? "," : "",
                eddy_shell_task_rank(eddy_shell_local_task(sh, i)));
        buf[off] = '\0';
        out(sh,
            "shell.init job=%ju ntasks=%u nnodes=%u node=%u rank=%u "
            "local=%s table=%zu",
            (uintmax_t)eddy_shell_jobid(sh), eddy_shell_ntasks(sh),
            eddy_shell_nnodes(sh), eddy_shell_node_index(sh),
            eddy_shell_node_rank(sh), buf, eddy_shell_proctable_count(sh));
        if (eddy_shell_setenv(sh, "PROBE_INIT", tag) < 0)
            return -1;
        if (want_log)
            eddy_shell_log(sh, EDDY_SHELL_LOG_INFO, "%s says hello", tag);
    } else if (!strcmp(topic, "task.init")) {
        char rank[16];
        snprintf(rank, sizeof(rank), "%u", eddy_shell_task_rank(t));
        out(sh, "task.init rank=%u pid=%d self=%d", eddy_shell_task_rank(t),
            (int)eddy_shell_task_pid(t), (int)getpid());
        if (eddy_shell_task_setenv(t, "PROBE_TASK", rank) < 0)
            return -1;
    } else if (!strcmp(topic, "shell.start")) {
        struct eddy_shell_proc p;
        for (size_t i = 0; i < eddy_shell_proctable_count(sh); i++) {
            if (eddy_shell_proctable_get(sh, i, &p) < 0)
                return eddy_shell_fail(sh, "proctable %zu: %s", i,
                                       strerror(errno));
            off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%s%u:%d:%u",
                                    i ? "," : "", p.rank, (int)p.pid, p.node);
            if (off >= sizeof(buf))
                break;
        }
        out(sh, "shell.start table=%s", buf);
        for (uint32_t i = 0; i < eddy_shell_local_ntasks(sh); i++) {
            eddy_shell_task_t *lt = eddy_shell_local_task(sh, i);
            out(sh, "shell.start local rank=%u pid=%d",
                eddy_shell_task_rank(lt), (int)eddy_shell_task_pid(lt));
        }
        if (eddy_shell_setenv(sh, "PROBE_START", tag) < 0)
            return -1;
    } else if (!strcmp(topic, "task.exit")) {
        out(sh, "task.exit rank=%u code=%d", eddy_shell_task_rank(t),
            eddy_shell_task_exit_code(t));
    } else {
        out(sh, "%s", topic);
    }
    return maybe_fail(sh, topic);
}

int eddy_plugin_init(eddy_shell_plugin_t *p, const char *args)
{
    static const char *const topics[] = {"shell.init",  "task.init",
                                         "shell.start", "task.exit",
                                         "shell.exit",  NULL};
    eddy_shell_t *sh = eddy_shell_plugin_shell(p);
    char copy[1024], *tok, *save = NULL;
    const char *env = getenv("PROBE_OUT");

    if (env)
        snprintf(out_prefix, sizeof(out_prefix), "%s", env);
    snprintf(copy, sizeof(copy), "%s", args);
    for (tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (!strncmp(tok, "out=", 4))
            snprintf(out_prefix, sizeof(out_prefix), "%s", tok + 4);
        else if (!strncmp(tok, "tag=", 4))
            snprintf(tag, sizeof(tag), "%s", tok + 4);
        else if (!strncmp(tok, "fail=", 5))
            snprintf(fail_at, sizeof(fail_at), "%s", tok + 5);
        else if (!strcmp(tok, "nostart"))
            want_start = 0;
        else if (!strcmp(tok, "log"))
            want_log = 1;
        else
            return eddy_shell_fail(sh, "unknown argument '%s'", tok);
    }
    if (!out_prefix[0])
        return eddy_shell_fail(sh, "no out= and no PROBE_OUT");
    out(sh, "init args=%s", args);
    for (int i = 0; topics[i]; i++) {
        if (!want_start && !strcmp(topics[i], "shell.start"))
            continue;
        if (eddy_shell_plugin_on(p, topics[i], on_cb, NULL) < 0)
            return -1;
    }
    return maybe_fail(sh, "init");
}
