/* jobstate.h - job states and the events that move a job between them.
 *
 * After Flux RFC 21, simplified: a job's state is a pure function of its
 * eventlog (eventlog.h).  The job manager appends an event, asks
 * jobstate_next() what the state becomes, and anyone holding the log can
 * replay it with jobstate_from_eventlog().  docs/eventlog.md draws the
 * diagram.
 *
 *   (none) --submit--> NEW --validate--> SCHED --alloc--> RUN
 *   RUN --finish--> CLEANUP --clean--> INACTIVE
 *   NEW, SCHED, RUN --exception (severity 0)--> CLEANUP
 *
 * Events (name: states where valid; required context):
 *   submit     (none) -> NEW        first event of every log
 *   validate   NEW -> SCHED         the job was checked and may run
 *   alloc      SCHED -> RUN         resources assigned ({"R": ...} optional)
 *   start      RUN, CLEANUP         shells started (no change; CLEANUP too
 *                                   because a fatal exception may race the
 *                                   shells' start report)
 *   release    RUN, CLEANUP         resources given back: {"ranks": idset
 *                                   string, "final": bool} (no change)
 *   finish     RUN -> CLEANUP       tasks ended: {"status": int >= 0}, the
 *              CLEANUP (no change)  wait status or highest exit code;
 *                                   valid in CLEANUP for a job whose tasks
 *                                   were killed by a fatal exception
 *   exception  NEW..CLEANUP         {"type": non-empty string, "severity":
 *                                   0..7, "note"?: string, "userid"?: int
 *                                   >= 0}; severity 0 is fatal and moves
 *                                   NEW, SCHED, RUN to CLEANUP; others do
 *                                   not change the state
 *   clean      CLEANUP -> INACTIVE  everything is cleaned up
 *   any other valid event name: NEW..CLEANUP, no change (room for
 *   "debug.*" and future events).
 * Nothing is valid after INACTIVE, and only "submit" before it.  Extra
 * context keys are allowed everywhere.
 *
 * The module does no I/O.
 */
#ifndef EDDY_COMMON_JOBSTATE_H
#define EDDY_COMMON_JOBSTATE_H

#include <stdbool.h>

#include <jansson.h>

#include "eddy/core.h"
#include "eventlog.h"

/* One bit each, so a set of states is a mask ("list RUN|CLEANUP jobs"). */
enum {
    JOBSTATE_NONE = 0, /* before "submit": no job yet */
    JOBSTATE_NEW = 0x01,
    JOBSTATE_SCHED = 0x02,
    JOBSTATE_RUN = 0x04,
    JOBSTATE_CLEANUP = 0x08,
    JOBSTATE_INACTIVE = 0x10,
};

#define JOBSTATE_PENDING (JOBSTATE_NEW | JOBSTATE_SCHED)
#define JOBSTATE_RUNNING (JOBSTATE_RUN | JOBSTATE_CLEANUP)
#define JOBSTATE_ACTIVE (JOBSTATE_PENDING | JOBSTATE_RUNNING)
#define JOBSTATE_ALL (JOBSTATE_ACTIVE | JOBSTATE_INACTIVE)

/* Exception severities run from 0 (fatal) to this. */
#define JOBSTATE_SEVERITY_MAX 7

/* "NEW", "SCHED", "RUN", "CLEANUP", "INACTIVE"; "NONE" for JOBSTATE_NONE;
 * "?" for anything else (never NULL).  Static strings. */
const char *jobstate_str(int state);

/* "N", "S", "R", "C", "I"; "-" for JOBSTATE_NONE; "?" otherwise. */
const char *jobstate_shortstr(int state);

/* Parse a state name, long or short form, any case ("run", "R").  0 and
 * *state set on success; -1 with errno EINVAL otherwise (NONE is not
 * accepted: it is not a state a job can be asked about). */
int jobstate_parse(const char *s, int *state);

/* The state after 'event' (with 'context', an object or NULL) happens in
 * 'state' (a single state or JOBSTATE_NONE).  On success set *next and
 * return 0.  -1 with errno EINVAL and 'err' saying why, *next untouched,
 * when the state is not a state, the event name is invalid, the event is
 * not valid in this state ("jobstate: 'alloc' is not valid in state RUN"),
 * or its context lacks what the event requires ("jobstate: 'finish':
 * context 'status' must be an integer >= 0"). */
int jobstate_next(int state,
                  const char *event,
                  const json_t *context,
                  int *next,
                  eddy_error_t *err);

/* Replay a whole log: the first event must be "submit", each event must be
 * valid where it occurs, and "finish" and "start" may occur at most once.
 * On success set *state (the state after the last event) and return 0.
 * -1 with errno EINVAL and 'err' naming the line ("jobstate: line 4:
 * 'alloc' is not valid in state RUN"), *state untouched.  An empty log is
 * an error. */
int jobstate_from_eventlog(const eventlog_t *log,
                           int *state,
                           eddy_error_t *err);

/* What a job's log says about how it went.  Timestamps are 0 for events
 * that did not happen (the first occurrence counts). */
struct jobstate_info {
    int state;                  /* as jobstate_from_eventlog() */
    double t_submit;            /* "submit" */
    double t_alloc;             /* "alloc" */
    double t_start;             /* "start" */
    double t_finish;            /* "finish" */
    double t_clean;             /* "clean" */
    bool finished;              /* a "finish" event happened ... */
    int status;                 /* ... and this was its status (else 0) */
    bool fatal;                 /* a fatal exception happened; the first one: */
    const char *exception_type; /* its type (borrowed from the log) */
    const char *exception_note; /* its note, NULL if none (borrowed) */
    double t_exception;         /* its timestamp */
};

/* Replay 'log' as jobstate_from_eventlog() does and fill *info.  Borrowed
 * strings live as long as the log.  -1 with errno EINVAL and 'err' set,
 * *info untouched, if the log does not replay. */
int jobstate_result(const eventlog_t *log,
                    struct jobstate_info *info,
                    eddy_error_t *err);

#endif /* !EDDY_COMMON_JOBSTATE_H */
