/* jobstate.c - see jobstate.h */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "errprintf.h"
#include "idset.h"
#include "jobstate.h"
#include "quote.h"

/* How much of a bad event name a message shows. */
#define QUOTE_MAX 32

static const struct {
    int state;
    const char *name;
    const char *shortname;
} states[] = {
    {JOBSTATE_NEW, "NEW", "N"},           {JOBSTATE_SCHED, "SCHED", "S"},
    {JOBSTATE_RUN, "RUN", "R"},           {JOBSTATE_CLEANUP, "CLEANUP", "C"},
    {JOBSTATE_INACTIVE, "INACTIVE", "I"},
};

#define NSTATES (sizeof(states) / sizeof(states[0]))

/* Fill 'err' with "jobstate: [line N: ]<message>", set errno EINVAL and
 * return -1.  lineno 0 means no log is being replayed. */
static int step_error(eddy_error_t *err, size_t lineno, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int step_error(eddy_error_t *err, size_t lineno, const char *fmt, ...)
{
    char msg[200];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    errno = EINVAL;
    if (lineno > 0)
        return errprintf(err, "jobstate: line %zu: %s", lineno, msg);
    return errprintf(err, "jobstate: %s", msg);
}

const char *jobstate_str(int state)
{
    if (state == JOBSTATE_NONE)
        return "NONE";
    for (size_t i = 0; i < NSTATES; i++)
        if (states[i].state == state)
            return states[i].name;
    return "?";
}

const char *jobstate_shortstr(int state)
{
    if (state == JOBSTATE_NONE)
        return "-";
    for (size_t i = 0; i < NSTATES; i++)
        if (states[i].state == state)
            return states[i].shortname;
    return "?";
}

int jobstate_parse(const char *s, int *state)
{
    if (!s || !state)
        goto inval;
    for (size_t i = 0; i < NSTATES; i++) {
        if (!strcasecmp(s, states[i].name) ||
            !strcasecmp(s, states[i].shortname)) {
            *state = states[i].state;
            return 0;
        }
    }
inval:
    errno = EINVAL;
    return -1;
}

static bool is_state(int state)
{
    return state == JOBSTATE_NONE || strcmp(jobstate_str(state), "?") != 0;
}

/* Context checks: each returns 0, or -1 with 'err' naming event and key.
 * Keys not named here are allowed, for events to grow. */

static int check_release(const char *ev,
                         const json_t *ctx,
                         size_t lineno,
                         eddy_error_t *err)
{
    json_t *ranks = json_object_get(ctx, "ranks");
    json_t *final = json_object_get(ctx, "final");
    idset_t *ids;

    if (!json_is_string(ranks) ||
        !(ids = idset_decode(json_string_value(ranks), NULL)))
        return step_error(err, lineno,
                          "'%s': context 'ranks' must be an idset string", ev);
    idset_destroy(ids);
    if (!json_is_boolean(final))
        return step_error(err, lineno,
                          "'%s': context 'final' must be a boolean", ev);
    return 0;
}

static int check_finish(const char *ev,
                        const json_t *ctx,
                        size_t lineno,
                        eddy_error_t *err)
{
    json_t *status = json_object_get(ctx, "status");

    if (!json_is_integer(status) || json_integer_value(status) < 0 ||
        json_integer_value(status) > INT_MAX)
        return step_error(err, lineno,
                          "'%s': context 'status' must be an integer >= 0", ev);
    return 0;
}

/* Also gives the severity, which decides the transition. */
static int check_exception(const char *ev,
                           const json_t *ctx,
                           size_t lineno,
                           int *severity,
                           eddy_error_t *err)
{
    json_t *type = json_object_get(ctx, "type");
    json_t *sev = json_object_get(ctx, "severity");
    json_t *note = json_object_get(ctx, "note");
    json_t *userid = json_object_get(ctx, "userid");

    if (!json_is_string(type) || json_string_length(type) == 0)
        return step_error(
            err, lineno, "'%s': context 'type' must be a non-empty string", ev);
    if (!json_is_integer(sev) || json_integer_value(sev) < 0 ||
        json_integer_value(sev) > JOBSTATE_SEVERITY_MAX)
        return step_error(err, lineno,
                          "'%s': context 'severity' must be an integer 0-%d",
                          ev, JOBSTATE_SEVERITY_MAX);
    if (note && !json_is_string(note))
        return step_error(err, lineno, "'%s': context 'note' must be a string",
                          ev);
    if (userid && (!json_is_integer(userid) || json_integer_value(userid) < 0))
        return step_error(err, lineno,
                          "'%s': context 'userid' must be an integer >= 0", ev);
    *severity = (int)json_integer_value(sev);
    return 0;
}

/* One step of the state machine; see the table in jobstate.h. */
static int step(int state,
                const char *ev,
                const json_t *ctx,
                size_t lineno,
                int *next,
                eddy_error_t *err)
{
    char q[QUOTE_MAX + 8];
    int valid; /* states where 'ev' may happen */
    int to = state;
    int severity = -1;

    if (!is_state(state))
        return step_error(err, lineno, "invalid state 0x%x", (unsigned)state);
    if (!eventlog_name_valid(ev))
        return step_error(
            err, lineno, "invalid event name '%s'",
            ev ? quote_token(q, sizeof(q), ev, strlen(ev), QUOTE_MAX)
               : "(null)");
    if (ctx && !json_is_object(ctx))
        return step_error(err, lineno, "'%s': context must be an object", ev);

    if (!strcmp(ev, "submit"))
        valid = JOBSTATE_NONE;
    else if (!strcmp(ev, "validate"))
        valid = JOBSTATE_NEW;
    else if (!strcmp(ev, "alloc"))
        valid = JOBSTATE_SCHED;
    else if (!strcmp(ev, "start") || !strcmp(ev, "release") ||
             !strcmp(ev, "finish"))
        valid = JOBSTATE_RUN | JOBSTATE_CLEANUP;
    else if (!strcmp(ev, "clean"))
        valid = JOBSTATE_CLEANUP;
    else /* "exception" and events this module does not know */
        valid = JOBSTATE_ACTIVE;

    if (valid == JOBSTATE_NONE ? state != JOBSTATE_NONE : !(state & valid)) {
        if (state == JOBSTATE_NONE)
            return step_error(err, lineno,
                              "'%s' is not valid in state NONE"
                              " (the first event must be 'submit')",
                              ev);
        return step_error(err, lineno, "'%s' is not valid in state %s", ev,
                          jobstate_str(state));
    }

    if (!strcmp(ev, "submit"))
        to = JOBSTATE_NEW;
    else if (!strcmp(ev, "validate"))
        to = JOBSTATE_SCHED;
    else if (!strcmp(ev, "alloc"))
        to = JOBSTATE_RUN;
    else if (!strcmp(ev, "release")) {
        if (check_release(ev, ctx, lineno, err) < 0)
            return -1;
    } else if (!strcmp(ev, "finish")) {
        if (check_finish(ev, ctx, lineno, err) < 0)
            return -1;
        to = JOBSTATE_CLEANUP;
    } else if (!strcmp(ev, "exception")) {
        if (check_exception(ev, ctx, lineno, &severity, err) < 0)
            return -1;
        if (severity == 0)
            to = JOBSTATE_CLEANUP;
    } else if (!strcmp(ev, "clean"))
        to = JOBSTATE_INACTIVE;
    *next = to;
    return 0;
}

int jobstate_next(int state,
                  const char *event,
                  const json_t *context,
                  int *next,
                  eddy_error_t *err)
{
    if (!next) {
        errno = EINVAL;
        return errprintf(err, "jobstate: invalid argument");
    }
    return step(state, event, context, 0, next, err);
}

int jobstate_result(const eventlog_t *log,
                    struct jobstate_info *info,
                    eddy_error_t *err)
{
    struct jobstate_info r = {.state = JOBSTATE_NONE};
    size_t count = eventlog_count(log);
    bool started = false;

    if (!log || !info) {
        errno = EINVAL;
        return errprintf(err, "jobstate: invalid argument");
    }
    if (count == 0)
        return step_error(
            err, 0, "the eventlog is empty (the first event must be 'submit')");
    for (size_t i = 0; i < count; i++) {
        double ts;
        const char *name;
        const json_t *ctx;
        int next;

        if (eventlog_entry(log, i, &ts, &name, &ctx) < 0)
            return errprintf(err, "jobstate: cannot read line %zu", i + 1);
        if (step(r.state, name, ctx, i + 1, &next, err) < 0)
            return -1;
        /* Twice would mean two runs' worth of facts in one log. */
        if ((!strcmp(name, "start") && started) ||
            (!strcmp(name, "finish") && r.finished))
            return step_error(err, i + 1, "'%s' happened twice", name);
        if (!strcmp(name, "submit"))
            r.t_submit = ts;
        else if (!strcmp(name, "alloc"))
            r.t_alloc = ts;
        else if (!strcmp(name, "start")) {
            r.t_start = ts;
            started = true;
        } else if (!strcmp(name, "finish")) {
            r.t_finish = ts;
            r.finished = true;
            r.status = (int)json_integer_value(json_object_get(ctx, "status"));
        } else if (!strcmp(name, "clean"))
            r.t_clean = ts;
        else if (!strcmp(name, "exception") && !r.fatal &&
                 json_integer_value(json_object_get(ctx, "severity")) == 0) {
            json_t *note = json_object_get(ctx, "note");

            r.fatal = true;
            r.exception_type = json_string_value(json_object_get(ctx, "type"));
            r.exception_note = note ? json_string_value(note) : NULL;
            r.t_exception = ts;
        }
        r.state = next;
    }
    *info = r;
    return 0;
}

int jobstate_from_eventlog(const eventlog_t *log, int *state, eddy_error_t *err)
{
    struct jobstate_info info;

    if (!state) {
        errno = EINVAL;
        return errprintf(err, "jobstate: invalid argument");
    }
    if (jobstate_result(log, &info, err) < 0)
        return -1;
    *state = info.state;
    return 0;
}
