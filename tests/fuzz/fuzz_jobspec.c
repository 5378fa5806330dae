/* fuzz_jobspec.c - libFuzzer target for jobspec_decode_str().
 *
 * Jobspecs come from users through the job manager, so the validator sees
 * hostile JSON.  Anything it accepts must survive encode -> decode with
 * every accessor unchanged (the canonical form is what the job manager
 * stores and hands to shells), and its encoding must be stable.  Anything
 * it refuses must say why.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/jobspec.h"

static bool same_json(const json_t *a, const json_t *b)
{
    return (!a && !b) || (a && b && json_equal(a, b));
}

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_same(const jobspec_t *a, const jobspec_t *b)
{
    if (jobspec_version(a) != jobspec_version(b) ||
        jobspec_nnodes(a) != jobspec_nnodes(b) ||
        jobspec_slots_per_node(a) != jobspec_slots_per_node(b) ||
        jobspec_nslots(a) != jobspec_nslots(b) ||
        jobspec_ntasks(a) != jobspec_ntasks(b) ||
        jobspec_cores_per_slot(a) != jobspec_cores_per_slot(b) ||
        jobspec_exclusive(a) != jobspec_exclusive(b) ||
        jobspec_ngroups(a) != jobspec_ngroups(b) ||
        jobspec_duration(a) != jobspec_duration(b) ||
        !same_str(jobspec_cwd(a), jobspec_cwd(b)) ||
        !same_str(jobspec_job_name(a), jobspec_job_name(b)) ||
        !same_json(jobspec_environment(a), jobspec_environment(b)) ||
        !same_json(jobspec_shell_options(a), jobspec_shell_options(b)) ||
        !same_json(jobspec_user(a), jobspec_user(b)))
        abort();
    for (uint32_t g = 0; g < jobspec_ngroups(a); g++) {
        int argc = jobspec_group_argc(a, g);
        const char *const *av = jobspec_group_argv(a, g);
        const char *const *bv = jobspec_group_argv(b, g);
        int first = jobspec_group_first_rank(a, g);
        int n = jobspec_group_ntasks(a, g);

        if (argc < 1 || argc != jobspec_group_argc(b, g) || av[argc] ||
            bv[argc] || av[0][0] == '\0')
            abort();
        for (int i = 0; i < argc; i++) {
            if (strcmp(av[i], bv[i]) != 0)
                abort();
        }
        if (n < 1 || n != jobspec_group_ntasks(b, g) ||
            first != jobspec_group_first_rank(b, g))
            abort();
        /* The rank -> group map agrees at both ends of every group. */
        if (jobspec_task_group(a, (uint32_t)first) != (int)g ||
            jobspec_task_group(a, (uint32_t)(first + n - 1)) != (int)g)
            abort();
    }
    if (jobspec_ntasks(a) != jobspec_nslots(a) ||
        jobspec_task_group(a, jobspec_ntasks(a)) != -1)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    eddy_error_t err = {{0}};
    jobspec_t *js, *js2;
    json_t *o, *o2;
    char *s;

    if (!(js = jobspec_decode_str((const char *)data, size, &err))) {
        if (err.text[0] == '\0')
            abort(); /* every failure explains itself */
        return 0;
    }
    if (!(o = jobspec_encode(js)) || !(s = json_dumps(o, JSON_COMPACT)))
        abort();
    if (!(js2 = jobspec_decode_str(s, strlen(s), &err)))
        abort();
    check_same(js, js2);
    /* Canonical means stable. */
    if (!(o2 = jobspec_encode(js2)) || !json_equal(o, o2))
        abort();
    json_decref(o2);
    free(s);
    json_decref(o);
    jobspec_destroy(js2);
    jobspec_destroy(js);
    return 0;
}
