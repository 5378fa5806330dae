/* detect.c - eddy_detect() and eddy_in_allocation(): the probe a tool
 * runs to learn whether eddy is the manager in charge here.
 *
 * Both read only the environment and the instance's own answers: no files
 * are searched and nothing is cached, so the answer is always the current
 * one and a tool may call them as often as it likes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eddy/job.h"
#include "lib.h"

/* How long eddy_in_allocation() waits for the job's state. */
#define DETECT_JOB_TIMEOUT 10.0

/* EDDY_JOB_ID as a job ID: 1 with '*id', 0 if unset or not a number. */
static int env_jobid(uint64_t *id)
{
    const char *s = getenv("EDDY_JOB_ID");
    unsigned long long v;
    char *end;

    if (!s || *s < '0' || *s > '9')
        return 0;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end != '\0')
        return 0;
    *id = (uint64_t)v;
    return 1;
}

int eddy_in_allocation(eddy_t *h, uint64_t *jobid)
{
    eddy_future_t *f = NULL;
    eddy_jobinfo_t *info = NULL;
    const char *state;
    uint64_t id;
    int rc = 0, e;

    if (!env_jobid(&id))
        return 0;
    if (h) {
        if (!(f = eddy_job_info(h, (eddy_jobid_t)id)) ||
            eddy_future_wait_for(f, DETECT_JOB_TIMEOUT) < 0)
            goto error;
        if (!(info = eddy_job_info_get(f))) {
            if (errno != ENOENT)
                goto error;
            /* A job of another instance (EDDY_JOB_ID leaked into the
             * environment of something that is not one of our tasks). */
            eddy_future_destroy(f);
            return 0;
        }
        state = eddy_jobinfo_state(info);
        rc = state && strcmp(state, "INACTIVE") != 0;
        eddy_jobinfo_destroy(info);
        eddy_future_destroy(f);
        if (!rc)
            return 0;
    }
    if (jobid)
        *jobid = id;
    return 1;
error:
    e = errno;
    eddy_future_destroy(f);
    errno = e;
    return -1;
}

int eddy_detect(struct eddy_detect_info *info, int flags)
{
    const char *uri = getenv("EDDY_URI");
    const char *source = "EDDY_URI";
    eddy_error_t err;
    uint64_t id = 0;
    eddy_t *h;
    int e = errno;

    if (!info || flags != 0) {
        errno = EINVAL;
        return -1;
    }
    memset(info, 0, sizeof(*info));
    if (!uri || !*uri) {
        source = "system";
        if (!(uri = getenv("EDDY_SYSTEM_URI")) || !*uri)
            uri = EDDY_SYSTEM_URI_DEFAULT;
    }
    snprintf(info->uri, sizeof(info->uri), "%s", uri);
    snprintf(info->source, sizeof(info->source), "%s", source);
    if (!(h = eddy_open(uri, 0, &err))) {
        snprintf(info->error, sizeof(info->error), "%s", err.text);
        /* Outside any instance: EDDY_JOB_ID alone cannot be trusted, but
         * it is all there is; report it so the caller can tell "inside a
         * job of an instance that went away" from "outside". */
        info->in_job = env_jobid(&id);
        info->jobid = info->in_job ? id : 0;
        errno = e;
        return 0;
    }
    info->reachable = true;
    snprintf(info->version, sizeof(info->version), "%s", h->version);
    info->size = h->size;
    info->rank = h->rank;
    if (eddy_in_allocation(h, &id) == 1) {
        info->in_job = true;
        info->jobid = id;
    }
    eddy_close(h);
    errno = e;
    return 0;
}
