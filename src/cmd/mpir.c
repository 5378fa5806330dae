/* mpir.c - the MPIR starter symbols of the eddy command (mpir.h).
 *
 * The names, types and values below are fixed by the MPIR Process
 * Acquisition Interface 1.1: debuggers look them up by name in the
 * starter's symbol table and read MPIR_PROCDESC's layout from its debug
 * information, so the command is built with -g, the symbols are global
 * and marked used, and MPIR_Breakpoint() can be neither inlined nor
 * dropped.  They break the project's naming rules on purpose.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eddy/mpir.h"
#include "eddy/tool.h"
#include "cmd.h"
#include "jobopts.h"
#include "mpir.h"

/* --- the interface (names and types from the spec) ---------------------- */

typedef struct {
    char *host_name;       /* where the process runs */
    char *executable_name; /* the program it runs */
    int pid;               /* its pid on that host */
} MPIR_PROCDESC;

#define MPIR_NULL 0
#define MPIR_DEBUG_SPAWNED 1
#define MPIR_DEBUG_ABORTING 2

#define MPIR_SYMBOL __attribute__((used))

MPIR_SYMBOL MPIR_PROCDESC *MPIR_proctable;
MPIR_SYMBOL int MPIR_proctable_size;
MPIR_SYMBOL volatile int MPIR_debug_state = MPIR_NULL;
MPIR_SYMBOL volatile int MPIR_being_debugged;
MPIR_SYMBOL char *MPIR_debug_abort_string;
/* Flags whose presence tells the debugger: we are the starter, not an MPI
 * process; attaching to some of the processes is fine; there are no
 * message queues to show; the processes are acquired before main (stopped
 * at their first instruction), so the debugger should run them to main. */
MPIR_SYMBOL int MPIR_i_am_starter = 1;
MPIR_SYMBOL int MPIR_partial_attach_ok = 1;
MPIR_SYMBOL int MPIR_ignore_queues = 1;
MPIR_SYMBOL int MPIR_acquired_pre_main = 1;
MPIR_SYMBOL int MPIR_force_to_main = 1;
/* Optional tool-daemon launch: a debugger writes a daemon's path and its
 * arguments (each NUL-terminated, the list ended by an empty one) before
 * it continues from MPIR_Breakpoint; sizes as the spec gives them. */
#define MPIR_EXECUTABLE_PATH_MAX 256
#define MPIR_SERVER_ARGUMENTS_MAX 1024
MPIR_SYMBOL char MPIR_executable_path[MPIR_EXECUTABLE_PATH_MAX];
MPIR_SYMBOL char MPIR_server_arguments[MPIR_SERVER_ARGUMENTS_MAX];
/* The job ID, as other launchers publish it (a string) and as a number. */
MPIR_SYMBOL char *totalview_jobid;
MPIR_SYMBOL volatile uint64_t eddy_jobid;

/* The debugger's breakpoint.  The empty asm with a memory clobber keeps
 * the compiler from proving the call useless and removing it. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((noipa))
#endif
__attribute__((noinline, used)) void
MPIR_Breakpoint(void)
{
    __asm__ volatile("" ::: "memory");
}

/* --- driving it ------------------------------------------------------- */

static char jobid_text[32];
static eddy_proctable_t *acquired; /* MPIR_proctable points into it */

bool mpir_wanted(bool debug)
{
    if (debug)
        MPIR_being_debugged = 1;
    return MPIR_being_debugged != 0;
}

bool mpir_wait_held(const char *cmd, eddy_t *h, eddy_jobid_t id)
{
    eddy_future_t *f;
    const char *name, *context;
    double ts;
    bool held = false;

    if (!(f = eddy_job_event_watch(h, id, EDDY_JOB_EVENT_FOLLOW)))
        cmd_die(cmd, "job %" PRIu64 ": cannot watch: %s", id, strerror(errno));
    while (eddy_job_event_get(f, &ts, &name, &context) == 0) {
        if (!strcmp(name, "barrier-held")) {
            held = true;
            break;
        }
        if (!strcmp(name, "exception") || !strcmp(name, "finish") ||
            !strcmp(name, "clean"))
            break;
        eddy_future_reset(f);
    }
    eddy_future_destroy(f);
    return held;
}

/* Wait for the job's "start" event (or its end). */
static void wait_start(const char *cmd, eddy_t *h, eddy_jobid_t id)
{
    eddy_future_t *f;
    const char *name, *context;
    double ts;

    if (!(f = eddy_job_event_watch(h, id, EDDY_JOB_EVENT_FOLLOW)))
        cmd_die(cmd, "job %" PRIu64 ": cannot watch: %s", id, strerror(errno));
    while (eddy_job_event_get(f, &ts, &name, &context) == 0) {
        if (!strcmp(name, "start") || !strcmp(name, "finish") ||
            !strcmp(name, "clean"))
            break;
        eddy_future_reset(f);
    }
    eddy_future_destroy(f);
}

static eddy_proctable_t *fetch(const char *cmd,
                               eddy_t *h,
                               eddy_jobid_t id,
                               bool wait)
{
    eddy_future_t *f;
    eddy_proctable_t *pt;

    if (!(f = eddy_job_proctable(h, id)))
        cmd_die(cmd, "job %" PRIu64 ": proctable: %s", id, strerror(errno));
    if (!(pt = eddy_job_proctable_get(f))) {
        if (errno == EAGAIN && wait) {
            eddy_future_destroy(f);
            wait_start(cmd, h, id);
            return fetch(cmd, h, id, false);
        }
        jobid_die(cmd, id, f);
    }
    eddy_future_destroy(f);
    return pt;
}

void mpir_acquire(const char *cmd, eddy_t *h, eddy_jobid_t id, bool wait)
{
    eddy_proctable_t *pt = fetch(cmd, h, id, wait);
    size_t n = eddy_proctable_size(pt);
    MPIR_PROCDESC *table;
    struct eddy_procdesc d;

    if (n > INT32_MAX || !(table = calloc(n ? n : 1, sizeof(*table))))
        cmd_die(cmd, "job %" PRIu64 ": proctable: out of memory", id);
    /* MPIR wants a string per entry; a debugger reads each one, so the
     * copies are shared: entries point into the table's strings, which
     * live as long as the process. */
    for (uint32_t r = 0; r < n; r++) {
        if (eddy_proctable_entry(pt, r, &d) < 0)
            cmd_die(cmd, "job %" PRIu64 ": proctable: %s", id, strerror(errno));
        table[r].host_name = (char *)d.hostname;
        table[r].executable_name = (char *)d.executable;
        table[r].pid = (int)d.pid;
    }
    snprintf(jobid_text, sizeof(jobid_text), "%" PRIu64, id);
    totalview_jobid = jobid_text;
    eddy_jobid = id;
    MPIR_proctable = table;
    MPIR_proctable_size = (int)n;
    acquired = pt;
}

/* Launch the daemon a debugger asked for in MPIR_executable_path on every
 * node of the job; its output is left to `eddy tool attach`. */
static void launch_server(const char *cmd, eddy_t *h, eddy_jobid_t id)
{
    const char *argv[MPIR_SERVER_ARGUMENTS_MAX / 2 + 2];
    size_t n = 0, off = 0;
    eddy_future_t *f;
    eddy_toolid_t tool;

    MPIR_executable_path[MPIR_EXECUTABLE_PATH_MAX - 1] = '\0';
    MPIR_server_arguments[MPIR_SERVER_ARGUMENTS_MAX - 1] = '\0';
    argv[n++] = MPIR_executable_path;
    while (off < MPIR_SERVER_ARGUMENTS_MAX && MPIR_server_arguments[off]) {
        argv[n++] = &MPIR_server_arguments[off];
        off += strlen(&MPIR_server_arguments[off]) + 1;
    }
    argv[n] = NULL;
    if (!(f = eddy_tool_launch(h, id, argv, NULL)) ||
        eddy_tool_launch_get(f, &tool) < 0)
        cmd_die(cmd, "job %" PRIu64 ": MPIR_executable_path %s: %s", id,
                MPIR_executable_path,
                f ? eddy_future_error_string(f) : strerror(errno));
    eddy_future_destroy(f);
    fprintf(stderr,
            "eddy %s: job %" PRIu64 ": tool %" PRIu64 ": %s started on every "
            "node (eddy tool attach %" PRIu64 ")\n",
            cmd, id, tool, MPIR_executable_path, tool);
}

void mpir_spawned(const char *cmd, eddy_t *h, eddy_jobid_t id)
{
    MPIR_debug_state = MPIR_DEBUG_SPAWNED;
    MPIR_Breakpoint();
    if (MPIR_executable_path[0])
        launch_server(cmd, h, id);
}

void mpir_aborting(const char *type, const char *note)
{
    static char text[512];

    snprintf(text, sizeof(text), "%s%s%s", type, *note ? ": " : "", note);
    MPIR_debug_abort_string = text;
    MPIR_debug_state = MPIR_DEBUG_ABORTING;
    MPIR_Breakpoint();
}
