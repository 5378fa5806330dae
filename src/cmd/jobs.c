/* eddy jobs - list the jobs of the instance. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"
#include "jobopts.h"

static const char *const usage_text =
    "Usage: eddy jobs [-a] [--json]\n"
    "\n"
    "List the jobs of the instance in $EDDY_URI, oldest first: ID, state\n"
    "(NEW, SCHED, RUN, CLEANUP, INACTIVE), name, tasks, nodes, and the\n"
    "time since submission, or why a job waits (SCHED), or the exit status\n"
    "of a finished job.\n"
    "\n"
    "  -a, --all     also list finished (INACTIVE) jobs\n"
    "  -j, --json    print {\"jobs\": [...]} with the fields of\n"
    "                docs/jobs-protocol.md (JOBSUMMARY)\n"
    "  -h, --help    show this help\n";

/* "12.3s", "4m05s", "2h03m" */
static void format_elapsed(char *buf, size_t size, double secs)
{
    if (secs < 0)
        secs = 0;
    if (secs < 60)
        snprintf(buf, size, "%.1fs", secs);
    else if (secs < 3600)
        snprintf(buf, size, "%dm%02ds", (int)secs / 60, (int)secs % 60);
    else
        snprintf(buf, size, "%dh%02dm", (int)secs / 3600,
                 ((int)secs % 3600) / 60);
}

static void print_json(const eddy_joblist_t *l)
{
    json_t *jobs = json_array(), *o;
    char *s;

    if (!jobs)
        cmd_die("jobs", "out of memory");
    for (size_t i = 0; i < eddy_joblist_count(l); i++) {
        const char *text = eddy_jobinfo_json(eddy_joblist_at(l, i));
        if (!text || !(o = json_loads(text, 0, NULL)))
            cmd_die("jobs", "malformed job list entry %zu", i);
        json_array_append_new(jobs, o);
    }
    if (!(o = json_pack("{s:o}", "jobs", jobs)) ||
        !(s = json_dumps(o, JSON_COMPACT)))
        cmd_die("jobs", "out of memory");
    printf("%s\n", s);
    free(s);
    json_decref(o);
}

static void print_table(const eddy_joblist_t *l)
{
    struct timespec now;
    char extra[128];

    clock_gettime(CLOCK_REALTIME, &now);
    printf("%-10s %-8s %-16s %6s %6s  %s\n", "ID", "STATE", "NAME", "NTASKS",
           "NNODES", "TIME/REASON");
    for (size_t i = 0; i < eddy_joblist_count(l); i++) {
        const eddy_jobinfo_t *j = eddy_joblist_at(l, i);
        const char *state = eddy_jobinfo_state(j);
        const char *name = eddy_jobinfo_name(j);
        const char *reason = eddy_jobinfo_reason(j);
        int status;

        if (!strcmp(state, "SCHED") && reason && *reason)
            snprintf(extra, sizeof(extra), "%s", reason);
        else if (eddy_jobinfo_status(j, &status) == 0)
            snprintf(extra, sizeof(extra), "exit %d", status);
        else if (!strcmp(state, "INACTIVE"))
            snprintf(extra, sizeof(extra), "never ran");
        else
            format_elapsed(extra, sizeof(extra),
                           now.tv_sec + now.tv_nsec * 1e-9 -
                               eddy_jobinfo_time(j, "submit"));
        printf("%-10" PRIu64 " %-8s %-16.16s %6" PRIu32 " %6" PRIu32 "  %s\n",
               eddy_jobinfo_id(j), state, name && *name ? name : "-",
               eddy_jobinfo_ntasks(j), eddy_jobinfo_nnodes(j), extra);
    }
}

static int jobs_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"all", no_argument, NULL, 'a'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool all = false, json_out = false;
    eddy_future_t *f;
    eddy_joblist_t *l;
    eddy_t *h;
    int c;

    while ((c = getopt_long(argc, argv, "ajh", opts, NULL)) != -1) {
        switch (c) {
        case 'a':
            all = true;
            break;
        case 'j':
            json_out = true;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        default:
            fputs(usage_text, stderr);
            return 1;
        }
    }
    if (optind < argc)
        cmd_die("jobs", "unexpected argument '%s'", argv[optind]);
    h = cmd_open("jobs");
    if (!(f = eddy_job_list(h, all ? EDDY_JOB_LIST_ALL : 0)) ||
        !(l = eddy_job_list_get(f)))
        cmd_die("jobs", "%s",
                f ? eddy_future_error_string(f) : "cannot list the jobs");
    if (json_out)
        print_json(l);
    else
        print_table(l);
    eddy_joblist_destroy(l);
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

const struct cmd cmd_jobs = {
    .name = "jobs",
    .summary = "list the jobs",
    .usage = usage_text,
    .run = jobs_run,
};
