/* commands.c - the table of eddy subcommands. */
#include <string.h>

#include "cmd.h"

extern const struct cmd cmd_alloc;
extern const struct cmd cmd_batch;
extern const struct cmd cmd_bcast;
extern const struct cmd cmd_detect;
extern const struct cmd cmd_dmesg;
extern const struct cmd cmd_exec;
extern const struct cmd cmd_help;
extern const struct cmd cmd_job;
extern const struct cmd cmd_jobs;
extern const struct cmd cmd_overlay;
extern const struct cmd cmd_ping;
extern const struct cmd cmd_proxy;
extern const struct cmd cmd_run;
extern const struct cmd cmd_shutdown;
extern const struct cmd cmd_stack;
extern const struct cmd cmd_start;
extern const struct cmd cmd_submit;
extern const struct cmd cmd_tool;
extern const struct cmd cmd_uri;
extern const struct cmd cmd_version;

const struct cmd *const eddy_commands[] = {
    &cmd_start, &cmd_run,    &cmd_submit,   &cmd_alloc,   &cmd_batch,
    &cmd_proxy, &cmd_jobs,   &cmd_job,      &cmd_bcast,   &cmd_tool,
    &cmd_stack, &cmd_exec,   &cmd_ping,     &cmd_overlay, &cmd_dmesg,
    &cmd_uri,   &cmd_detect, &cmd_shutdown, &cmd_version, &cmd_help,
    NULL,
};

const struct cmd *cmd_lookup(const char *name)
{
    for (int i = 0; eddy_commands[i]; i++)
        if (!strcmp(eddy_commands[i]->name, name))
            return eddy_commands[i];
    return NULL;
}
