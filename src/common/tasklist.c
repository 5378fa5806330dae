/* tasklist.c - parse "RANK:PID,..." (see tasklist.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/errprintf.h"
#include "src/common/tasklist.h"

/* Elements quoted in messages are cut here so a huge one cannot flood a
 * log line. */
#define QUOTE_MAX 40

struct tasklist {
    struct tasklist_task *tasks;
    size_t n;
};

/* Print at most QUOTE_MAX bytes of [p, e) for a message. */
static int quote_len(const char *p, const char *e)
{
    return (int)(e - p > QUOTE_MAX ? QUOTE_MAX : e - p);
}

/* Parse digits in [p, e) into *v, refusing values >= max.  -1 with
 * errno EINVAL (not digits only) or ERANGE. */
static int parse_num(const char *p, const char *e, uint64_t max, uint64_t *v)
{
    uint64_t x = 0;

    if (p == e) {
        errno = EINVAL;
        return -1;
    }
    for (; p < e; p++) {
        if (*p < '0' || *p > '9') {
            errno = EINVAL;
            return -1;
        }
        x = x * 10 + (uint64_t)(*p - '0');
        if (x >= max) {
            errno = ERANGE;
            return -1;
        }
    }
    *v = x;
    return 0;
}

/* Parse one element [p, e) into *t. */
static int parse_task(const char *p,
                      const char *e,
                      struct tasklist_task *t,
                      eddy_error_t *err)
{
    const char *colon = memchr(p, ':', (size_t)(e - p));
    uint64_t rank, pid;

    if (p == e) {
        errno = EINVAL;
        return errprintf(err, "empty element");
    }
    if (!colon) {
        errno = EINVAL;
        return errprintf(err, "'%.*s' is not RANK:PID", quote_len(p, e), p);
    }
    if (parse_num(p, colon, TASKLIST_RANK_MAX, &rank) < 0) {
        if (errno == ERANGE)
            return errprintf(err, "'%.*s': rank is not below %u",
                             quote_len(p, e), p, TASKLIST_RANK_MAX);
        return errprintf(err, "'%.*s': rank '%.*s' is not a number",
                         quote_len(p, e), p, quote_len(p, colon), p);
    }
    if (parse_num(colon + 1, e, TASKLIST_PID_MAX, &pid) < 0) {
        if (errno == ERANGE)
            return errprintf(err, "'%.*s': pid is not below %d",
                             quote_len(p, e), p, TASKLIST_PID_MAX);
        return errprintf(err, "'%.*s': pid '%.*s' is not a number",
                         quote_len(p, e), p, quote_len(colon + 1, e),
                         colon + 1);
    }
    if (pid == 0) {
        errno = EINVAL;
        return errprintf(err, "'%.*s': pid 0 is not a process", quote_len(p, e),
                         p);
    }
    t->rank = (uint32_t)rank;
    t->pid = (pid_t)pid;
    return 0;
}

static int cmp_rank(const void *a, const void *b)
{
    const struct tasklist_task *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static int cmp_pid(const void *a, const void *b)
{
    const struct tasklist_task *x = a, *y = b;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

/* Fail if a rank or a pid appears twice: sorted copies put twins side by
 * side. */
static int check_unique(const struct tasklist_task *tasks,
                        size_t n,
                        eddy_error_t *err)
{
    struct tasklist_task *s;
    size_t i;

    if (n < 2)
        return 0;
    if (!(s = malloc(n * sizeof(*s))))
        return errprintf(err, "out of memory");
    memcpy(s, tasks, n * sizeof(*s));
    qsort(s, n, sizeof(*s), cmp_rank);
    for (i = 1; i < n; i++) {
        if (s[i].rank == s[i - 1].rank) {
            uint32_t r = s[i].rank;
            free(s);
            errno = EINVAL;
            return errprintf(err, "rank %u is given twice", r);
        }
    }
    qsort(s, n, sizeof(*s), cmp_pid);
    for (i = 1; i < n; i++) {
        if (s[i].pid == s[i - 1].pid) {
            int pid = (int)s[i].pid;
            free(s);
            errno = EINVAL;
            return errprintf(err, "pid %d is given twice", pid);
        }
    }
    free(s);
    return 0;
}

tasklist_t *tasklist_decode(const char *s, eddy_error_t *err)
{
    eddy_error_t e2;
    tasklist_t *tl = NULL;
    const char *p, *end;
    size_t n = 1;

    if (!s) {
        errno = EINVAL;
        errprintf(err, "no task list");
        return NULL;
    }
    /* Count first, so one allocation fits and a hostile list is refused
     * before we allocate for it. */
    for (p = s; *p; p++) {
        if (*p == ',' && ++n > TASKLIST_TASKS_MAX) {
            errno = E2BIG;
            errprintf(err, "tasks: more than %d", TASKLIST_TASKS_MAX);
            return NULL;
        }
    }
    if (!(tl = calloc(1, sizeof(*tl))))
        goto nomem;
    if (*s == '\0')
        return tl;
    if (!(tl->tasks = calloc(n, sizeof(*tl->tasks))))
        goto nomem;
    for (p = s; tl->n < n; p = end + 1) {
        if (!(end = strchr(p, ',')))
            end = p + strlen(p);
        if (parse_task(p, end, &tl->tasks[tl->n], &e2) < 0) {
            if (end == p && *end == '\0')
                errprintf(err, "tasks: trailing ','");
            else
                errprintf(err, "tasks: %s", e2.text);
            goto error;
        }
        tl->n++;
    }
    if (check_unique(tl->tasks, tl->n, &e2) < 0) {
        errprintf(err, "tasks: %s", e2.text);
        goto error;
    }
    return tl;
nomem:
    errno = ENOMEM;
    errprintf(err, "out of memory");
error:
    tasklist_destroy(tl);
    return NULL;
}

void tasklist_destroy(tasklist_t *tl)
{
    int saved = errno;

    if (tl) {
        free(tl->tasks);
        free(tl);
    }
    errno = saved;
}

size_t tasklist_count(const tasklist_t *tl)
{
    return tl ? tl->n : 0;
}

const struct tasklist_task *tasklist_tasks(const tasklist_t *tl)
{
    return tl && tl->n ? tl->tasks : NULL;
}

char *tasklist_encode(const tasklist_t *tl)
{
    /* "1048575:4194303," is 16 bytes */
    size_t cap, len = 0, i;
    char *buf;

    if (!tl) {
        errno = EINVAL;
        return NULL;
    }
    cap = tl->n * 17 + 1;
    if (!(buf = malloc(cap)))
        return NULL;
    buf[0] = '\0';
    for (i = 0; i < tl->n; i++) {
        int w = snprintf(buf + len, cap - len, "%s%u:%d", i ? "," : "",
                         tl->tasks[i].rank, (int)tl->tasks[i].pid);
        if (w < 0 || (size_t)w >= cap - len) {
            free(buf);
            errno = EOVERFLOW;
            return NULL;
        }
        len += (size_t)w;
    }
    return buf;
}
