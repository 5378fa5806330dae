/* tool.c - the tool daemon API of eddy/tool.h: requests to the tool
 * service at rank 0 (docs/tools.md); attach goes through the output-log
 * machinery job attach uses (logattach.c).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eddy/tool.h"
#include "lib.h"

/* IDs are JSON integers; jansson's are signed 64-bit. */
#define ID_MAX ((uint64_t)INT64_MAX)

static json_t *env_object(const char *const *env)
{
    json_t *o = json_object();

    if (!o)
        goto nomem;
    for (size_t i = 0; env && env[i]; i++) {
        const char *eq = strchr(env[i], '=');
        char *name;
        int rc;

        if (!eq || eq == env[i]) {
            json_decref(o);
            errno = EINVAL;
            return NULL;
        }
        if (!(name = strndup(env[i], (size_t)(eq - env[i]))))
            goto nomem;
        rc = json_object_set_new(o, name, json_string(eq + 1));
        free(name);
        if (rc < 0)
            goto nomem;
    }
    return o;
nomem:
    json_decref(o);
    errno = ENOMEM;
    return NULL;
}

eddy_future_t *eddy_tool_launch(eddy_t *h,
                                eddy_jobid_t id,
                                const char *const *argv,
                                const struct eddy_tool_options *opts)
{
    json_t *body = NULL, *cmd = NULL, *env = NULL;

    if (!h || !argv || !argv[0] || !*argv[0] || id > ID_MAX) {
        errno = EINVAL;
        return NULL;
    }
    if (!(cmd = json_array()))
        goto nomem;
    for (size_t i = 0; argv[i]; i++)
        if (json_array_append_new(cmd, json_string(argv[i])) < 0)
            goto nomem;
    if (opts && opts->env && !(env = env_object(opts->env))) {
        json_decref(cmd);
        return NULL; /* errno set */
    }
    /* "o" steals 'cmd', also when json_pack() fails */
    body = json_pack("{s:I s:o}", "id", (json_int_t)id, "cmd", cmd);
    cmd = NULL;
    if (!body)
        goto nomem;
    if ((env && json_object_set_new(body, "env", env) < 0) ||
        (opts && opts->cwd &&
         json_object_set_new(body, "cwd", json_string(opts->cwd)) < 0) ||
        (opts && opts->nodes &&
         json_object_set_new(body, "nodes", json_string(opts->nodes)) < 0) ||
        (opts && (opts->flags & EDDY_TOOL_KEEP) &&
         json_object_set_new(body, "keep", json_true()) < 0)) {
        env = NULL;
        goto nomem;
    }
    return rpc_send(h, "tool.launch", 0, 0, body, NULL, 0);
nomem:
    json_decref(cmd);
    json_decref(env);
    json_decref(body);
    errno = ENOMEM;
    return NULL;
}

int eddy_tool_launch_get(eddy_future_t *f, eddy_toolid_t *tool)
{
    json_int_t id;

    if (eddy_rpc_get_unpack(f, "{s:I}", "tool", &id) < 0)
        return -1;
    if (id < 0) {
        errno = EPROTO;
        return -1;
    }
    if (tool)
        *tool = (eddy_toolid_t)id;
    return 0;
}

/* ---- attach ---------------------------------------------------------- */

struct tool_attach {
    eddy_toolid_t tool;
    eddy_tool_event_f cb;
    void *arg;
};

static int get_int(const json_t *o, const char *key, int *out)
{
    const json_t *v = json_object_get(o, key);

    if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN ||
        json_integer_value(v) > INT32_MAX)
        return -1;
    *out = (int)json_integer_value(v);
    return 0;
}

/* One record of a launch's log: {"type","node","host",...} (docs/tools.md). */
static int tool_record(const json_t *body,
                       const void *data,
                       size_t len,
                       void *arg,
                       char *why,
                       size_t whysize)
{
    struct tool_attach *ta = arg;
    struct eddy_tool_event ev = {0};
    const char *type, *stream = NULL;
    json_int_t node;

    if (json_unpack((json_t *)body, "{s:s s:I s:s s?s}", "type", &type, "node",
                    &node, "host", &ev.host, "stream", &stream) < 0 ||
        node < 0 || node > UINT32_MAX) {
        snprintf(why, whysize, "expected {\"type\", \"node\", \"host\", ...}");
        return -1;
    }
    ev.node = (uint32_t)node;
    if (!strcmp(type, "output") || !strcmp(type, "eof")) {
        if (!stream || (strcmp(stream, "stdout") && strcmp(stream, "stderr"))) {
            snprintf(why, whysize, "stream: expected stdout or stderr");
            return -1;
        }
        ev.type = EDDY_TOOL_OUTPUT;
        ev.stream =
            !strcmp(stream, "stdout") ? EDDY_JOB_STDOUT : EDDY_JOB_STDERR;
        if (!strcmp(type, "output")) {
            if (len == 0)
                return 0; /* nothing to deliver; len 0 means EOF */
            ev.data = data;
            ev.len = len;
        }
    } else if (!strcmp(type, "exit")) {
        ev.type = EDDY_TOOL_EXIT;
        if (get_int(body, "status", &ev.status) < 0) {
            snprintf(why, whysize, "status: expected an integer");
            return -1;
        }
    } else if (!strcmp(type, "failed")) {
        ev.type = EDDY_TOOL_FAILED;
        if (get_int(body, "errnum", &ev.errnum) < 0 ||
            json_unpack((json_t *)body, "{s:s}", "errstr", &ev.errstr) < 0) {
            snprintf(why, whysize, "expected \"errnum\" and \"errstr\"");
            return -1;
        }
    } else {
        return 0; /* a record type this library does not know: skip it */
    }
    ta->cb(ta->tool, &ev, ta->arg);
    return 0;
}

eddy_future_t *eddy_tool_attach(eddy_t *h,
                                eddy_toolid_t tool,
                                eddy_tool_event_f cb,
                                void *arg)
{
    struct tool_attach *ta;

    if (!h || !cb || tool > ID_MAX) {
        errno = EINVAL;
        return NULL;
    }
    if (!(ta = calloc(1, sizeof(*ta)))) {
        errno = ENOMEM;
        return NULL;
    }
    ta->tool = tool;
    ta->cb = cb;
    ta->arg = arg;
    return logattach_create(h, "tool.attach", "tool.credit", "tool", tool,
                            tool_record, ta, free);
}

size_t eddy_tool_attach_dropped(eddy_future_t *f)
{
    return logattach_dropped(f);
}

/* ---- control --------------------------------------------------------- */

eddy_future_t *eddy_tool_kill(eddy_t *h,
                              eddy_toolid_t tool,
                              int signum,
                              const char *nodes)
{
    if (!h || tool > ID_MAX || signum <= 0 || signum >= NSIG) {
        errno = EINVAL;
        return NULL;
    }
    if (nodes)
        return eddy_rpc_pack(h, "tool.kill", 0, 0, "{s:I s:i s:s}", "tool",
                             (json_int_t)tool, "signum", signum, "nodes",
                             nodes);
    return eddy_rpc_pack(h, "tool.kill", 0, 0, "{s:I s:i}", "tool",
                         (json_int_t)tool, "signum", signum);
}

eddy_future_t *eddy_tool_list(eddy_t *h, eddy_jobid_t id)
{
    if (!h || id > ID_MAX) {
        errno = EINVAL;
        return NULL;
    }
    return eddy_rpc_pack(h, "tool.list", 0, 0, "{s:I}", "id", (json_int_t)id);
}
