/* eddy detect - is an eddy instance in charge here, and are we in a job?
 *
 * A thin printer over eddy_detect(): what a tool-launch library would ask
 * through the API, for scripts and for people.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"

static const char usage_text[] =
    "Usage: eddy detect [--json]\n"
    "\n"
    "Say whether an eddy instance is reachable from here ($EDDY_URI, else\n"
    "the system instance: $EDDY_SYSTEM_URI or " EDDY_SYSTEM_URI_DEFAULT "),\n"
    "its version and size, and whether this process runs inside one of its\n"
    "jobs ($EDDY_JOB_ID).\n"
    "\n"
    "      --json   print one JSON object\n"
    "\n"
    "Exit status: 0 an instance is reachable, 1 none is (\"no instance\"),\n"
    "2 usage error.\n";

static void print_text(const struct eddy_detect_info *in)
{
    if (in->reachable) {
        printf("instance: %s (%s)\n", in->uri, in->source);
        printf("version: %s\n", in->version);
        printf("size: %u\n", (unsigned)in->size);
    } else {
        printf("no instance: %s\n", in->error);
    }
    if (in->in_job)
        printf("job: %llu\n", (unsigned long long)in->jobid);
    else
        printf("job: none\n");
}

static int print_json(const struct eddy_detect_info *in)
{
    json_t *o;
    char *s;

    if (!(o = json_pack("{s:b s:s s:s s:s s:I s:I s:b s:I s:s}", "reachable",
                        in->reachable, "uri", in->uri, "source", in->source,
                        "version", in->version, "size", (json_int_t)in->size,
                        "rank", (json_int_t)in->rank, "in_job", in->in_job,
                        "jobid", (json_int_t)in->jobid, "error", in->error)) ||
        !(s = json_dumps(o, JSON_COMPACT))) {
        json_decref(o);
        cmd_die("detect", "out of memory");
    }
    printf("%s\n", s);
    free(s);
    json_decref(o);
    return 0;
}

static int detect_run(int argc, char **argv)
{
    struct eddy_detect_info info;
    bool json = false;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else {
            fprintf(stderr, "eddy detect: unexpected argument '%s'\n%s",
                    argv[i], usage_text);
            return 2;
        }
    }
    if (eddy_detect(&info, 0) < 0)
        cmd_die("detect", "eddy_detect: %s", strerror(errno));
    if (json)
        print_json(&info);
    else
        print_text(&info);
    return info.reachable ? 0 : 1;
}

const struct cmd cmd_detect = {
    .name = "detect",
    .summary = "say whether an instance is in charge here",
    .usage = usage_text,
    .run = detect_run,
};
