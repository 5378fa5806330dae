/* test_jobspec.c - unit tests for src/common/jobspec.c */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/common/jobspec.h"

/* JSON written with single quotes (readable in C), turned into real JSON.
 * Caller frees. */
static char *q(const char *s)
{
    char *out = strdup(s);

    assert_non_null(out);
    for (char *p = out; *p; p++) {
        if (*p == '\'')
            *p = '"';
    }
    return out;
}

static jobspec_t *decode_ok(const char *squoted)
{
    eddy_error_t err = {{0}};
    char *s = q(squoted);
    jobspec_t *js = jobspec_decode_str(s, strlen(s), &err);

    if (!js)
        fail_msg("decode of %s failed: %s", s, err.text);
    free(s);
    return js;
}

/* Decoding must fail with 'errnum' and a message containing 'msg'. */
static void check_bad(const char *squoted, int errnum, const char *msg)
{
    eddy_error_t err = {{0}};
    char *s = q(squoted);
    jobspec_t *js;

    errno = 0;
    js = jobspec_decode_str(s, strlen(s), &err);
    if (js)
        fail_msg("decode of %s unexpectedly succeeded", s);
    if (errno != errnum)
        fail_msg("decode of %s: errno %d, want %d (%s)", s, errno, errnum,
                 err.text);
    if (strncmp(err.text, "jobspec: ", 9) != 0 || !strstr(err.text, msg))
        fail_msg("decode of %s: message '%s' lacks '%s'", s, err.text, msg);
    free(s);
}

static bool json_same(const json_t *a, const json_t *b)
{
    return (!a && !b) || (a && b && json_equal(a, b));
}

static bool str_same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Every accessor of 'a' and 'b' agrees. */
static void check_equal(const jobspec_t *a, const jobspec_t *b)
{
    assert_int_equal(jobspec_version(a), jobspec_version(b));
    assert_int_equal(jobspec_nnodes(a), jobspec_nnodes(b));
    assert_int_equal(jobspec_slots_per_node(a), jobspec_slots_per_node(b));
    assert_int_equal(jobspec_nslots(a), jobspec_nslots(b));
    assert_int_equal(jobspec_ntasks(a), jobspec_ntasks(b));
    assert_int_equal(jobspec_cores_per_slot(a), jobspec_cores_per_slot(b));
    assert_int_equal(jobspec_exclusive(a), jobspec_exclusive(b));
    assert_int_equal(jobspec_ngroups(a), jobspec_ngroups(b));
    for (uint32_t g = 0; g < jobspec_ngroups(a); g++) {
        int argc = jobspec_group_argc(a, g);
        const char *const *av = jobspec_group_argv(a, g);
        const char *const *bv = jobspec_group_argv(b, g);
        assert_int_equal(argc, jobspec_group_argc(b, g));
        for (int i = 0; i < argc; i++)
            assert_string_equal(av[i], bv[i]);
        assert_null(av[argc]);
        assert_null(bv[argc]);
        assert_int_equal(jobspec_group_ntasks(a, g),
                         jobspec_group_ntasks(b, g));
        assert_int_equal(jobspec_group_first_rank(a, g),
                         jobspec_group_first_rank(b, g));
    }
    assert_true(jobspec_duration(a) == jobspec_duration(b));
    assert_true(str_same(jobspec_cwd(a), jobspec_cwd(b)));
    assert_true(str_same(jobspec_job_name(a), jobspec_job_name(b)));
    assert_true(json_same(jobspec_environment(a), jobspec_environment(b)));
    assert_true(json_same(jobspec_shell_options(a), jobspec_shell_options(b)));
    assert_true(json_same(jobspec_user(a), jobspec_user(b)));
}

/* encode -> decode gives an equal jobspec, and the encoding is stable. */
static void check_roundtrip(const jobspec_t *js)
{
    eddy_error_t err = {{0}};
    json_t *o = jobspec_encode(js), *o2;
    jobspec_t *js2;
    char *s;

    assert_non_null(o);
    s = json_dumps(o, JSON_COMPACT);
    assert_non_null(s);
    js2 = jobspec_decode_str(s, strlen(s), &err);
    if (!js2)
        fail_msg("re-decode of %s failed: %s", s, err.text);
    check_equal(js, js2);
    o2 = jobspec_encode(js2);
    assert_non_null(o2);
    assert_true(json_equal(o, o2));
    json_decref(o2);
    json_decref(o);
    free(s);
    jobspec_destroy(js2);
}

/* Every rank maps to the group that holds it. */
static void check_mapping(const jobspec_t *js)
{
    uint32_t ng = jobspec_ngroups(js), next = 0;

    for (uint32_t g = 0; g < ng; g++) {
        int first = jobspec_group_first_rank(js, g);
        int n = jobspec_group_ntasks(js, g);
        assert_int_equal(first, next);
        assert_true(n >= 1);
        assert_int_equal(jobspec_task_group(js, (uint32_t)first), g);
        assert_int_equal(jobspec_task_group(js, (uint32_t)(first + n - 1)), g);
        next += (uint32_t)n;
    }
    assert_int_equal(next, jobspec_ntasks(js));
    errno = 0;
    assert_int_equal(jobspec_task_group(js, next), -1);
    assert_int_equal(errno, EINVAL);
}

/* A minimal valid document with 'res' as resources[0] and 'tasks' as the
 * tasks array (single-quoted JSON fragments). */
static char *doc(const char *res, const char *tasks, const char *attr)
{
    char *s;
    int n = asprintf(&s, "{'version':1,'resources':[%s],'tasks':%s%s%s}", res,
                     tasks, attr ? ",'attributes':" : "", attr ? attr : "");
    assert_true(n > 0);
    return s;
}

#define SLOT8                                                                  \
    "{'type':'slot','count':8,'label':'task','with':[{'type':'core',"          \
    "'count':1}]}"
#define ONE_TASK "[{'command':['a'],'slot':'task','count':{'per_slot':1}}]"

static void bad_doc(const char *res,
                    const char *tasks,
                    const char *attr,
                    int errnum,
                    const char *msg)
{
    char *s = doc(res, tasks, attr);
    check_bad(s, errnum, msg);
    free(s);
}

static void test_single_group(void **state)
{
    jobspec_t *js = decode_ok(
        "{'version':1,'resources':[{'type':'node','count':2,"
        "'exclusive':true,'with':[{'type':'slot','count':4,'label':'task',"
        "'with':[{'type':'core','count':2}]}]}],"
        "'tasks':[{'command':['hostname','-s'],'slot':'task',"
        "'count':{'per_slot':1}}],"
        "'attributes':{'system':{'duration':3600,'cwd':'/tmp',"
        "'environment':{'PATH':'/bin','EMPTY':''},"
        "'shell':{'options':{'stop':'init','verbose':2}},"
        "'job':{'name':'hello'}},'user':{'x':[1,2]}}}");

    assert_int_equal(jobspec_version(js), 1);
    assert_int_equal(jobspec_nnodes(js), 2);
    assert_int_equal(jobspec_slots_per_node(js), 4);
    assert_int_equal(jobspec_nslots(js), 8);
    assert_int_equal(jobspec_ntasks(js), 8);
    assert_int_equal(jobspec_cores_per_slot(js), 2);
    assert_true(jobspec_exclusive(js));
    assert_int_equal(jobspec_ngroups(js), 1);
    assert_int_equal(jobspec_group_argc(js, 0), 2);
    assert_string_equal(jobspec_group_argv(js, 0)[0], "hostname");
    assert_string_equal(jobspec_group_argv(js, 0)[1], "-s");
    assert_null(jobspec_group_argv(js, 0)[2]);
    assert_int_equal(jobspec_group_ntasks(js, 0), 8);
    assert_int_equal(jobspec_group_first_rank(js, 0), 0);
    assert_true(jobspec_duration(js) == 3600.0);
    assert_string_equal(jobspec_cwd(js), "/tmp");
    assert_string_equal(
        json_string_value(json_object_get(jobspec_environment(js), "PATH")),
        "/bin");
    assert_int_equal(json_object_size(jobspec_environment(js)), 2);
    assert_string_equal(
        json_string_value(json_object_get(jobspec_shell_options(js), "stop")),
        "init");
    assert_string_equal(jobspec_job_name(js), "hello");
    assert_non_null(json_object_get(jobspec_user(js), "x"));
    check_mapping(js);
    check_roundtrip(js);

    /* Group accessors refuse an index out of range. */
    errno = 0;
    assert_int_equal(jobspec_group_argc(js, 1), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(jobspec_group_argv(js, 1));
    assert_int_equal(errno, EINVAL);
    assert_int_equal(jobspec_group_ntasks(js, 1), -1);
    assert_int_equal(jobspec_group_first_rank(js, 7), -1);
    jobspec_destroy(js);
}

static void test_no_node_level(void **state)
{
    char *s = doc(SLOT8, ONE_TASK, NULL);
    jobspec_t *js = decode_ok(s);
    json_t *o;

    free(s);
    assert_int_equal(jobspec_nnodes(js), 0);
    assert_int_equal(jobspec_slots_per_node(js), 0);
    assert_int_equal(jobspec_nslots(js), 8);
    assert_int_equal(jobspec_cores_per_slot(js), 1);
    assert_false(jobspec_exclusive(js));
    /* Defaults when attributes are absent. */
    assert_true(jobspec_duration(js) == 0);
    assert_null(jobspec_cwd(js));
    assert_null(jobspec_environment(js));
    assert_null(jobspec_shell_options(js));
    assert_null(jobspec_job_name(js));
    assert_null(jobspec_user(js));
    check_mapping(js);
    check_roundtrip(js);
    /* The canonical form has the slot at the top and per_slot. */
    o = jobspec_encode(js);
    assert_string_equal(
        json_string_value(json_object_get(
            json_array_get(json_object_get(o, "resources"), 0), "type")),
        "slot");
    assert_non_null(json_object_get(
        json_object_get(json_array_get(json_object_get(o, "tasks"), 0),
                        "count"),
        "per_slot"));
    json_decref(o);
    jobspec_destroy(js);

    /* A single group may also give its total, equal to the slots. */
    s = doc(SLOT8, "[{'command':['a'],'slot':'task','count':{'total':8}}]",
            "{'system':{'duration':1.5},'user':{}}");
    js = decode_ok(s);
    free(s);
    assert_int_equal(jobspec_group_ntasks(js, 0), 8);
    assert_true(jobspec_duration(js) == 1.5);
    assert_int_equal(json_object_size(jobspec_user(js)), 0);
    check_roundtrip(js);
    jobspec_destroy(js);
}

static void test_mpmd(void **state)
{
    char *s = doc(SLOT8,
                  "[{'command':['master'],'slot':'task','count':{'total':1}},"
                  "{'command':['worker','-v'],'slot':'task','count':{'total':"
                  "3}},"
                  "{'command':['io'],'slot':'task','count':{'total':4}}]",
                  NULL);
    jobspec_t *js = decode_ok(s);

    free(s);
    assert_int_equal(jobspec_ngroups(js), 3);
    assert_int_equal(jobspec_ntasks(js), 8);
    assert_int_equal(jobspec_group_first_rank(js, 0), 0);
    assert_int_equal(jobspec_group_first_rank(js, 1), 1);
    assert_int_equal(jobspec_group_first_rank(js, 2), 4);
    assert_int_equal(jobspec_group_ntasks(js, 1), 3);
    assert_string_equal(jobspec_group_argv(js, 1)[1], "-v");
    assert_int_equal(jobspec_task_group(js, 0), 0);
    assert_int_equal(jobspec_task_group(js, 1), 1);
    assert_int_equal(jobspec_task_group(js, 3), 1);
    assert_int_equal(jobspec_task_group(js, 4), 2);
    assert_int_equal(jobspec_task_group(js, 7), 2);
    assert_int_equal(jobspec_task_group(js, 8), -1);
    check_mapping(js);
    check_roundtrip(js);
    jobspec_destroy(js);
}

/* Many groups of one task each: the binary search at every boundary. */
static void test_many_groups(void **state)
{
    eddy_error_t err = {{0}};
    jobspec_builder_t *b = jobspec_builder_create();
    const char *argv[] = {"t"};
    jobspec_t *js;

    for (int i = 0; i < 1000; i++)
        assert_int_equal(jobspec_builder_add_group(b, 1, argv, 1 + i % 3), 0);
    js = jobspec_builder_finish(b, &err);
    if (!js)
        fail_msg("finish: %s", err.text);
    assert_int_equal(jobspec_ngroups(js), 1000);
    check_mapping(js);
    check_roundtrip(js);
    jobspec_destroy(js);
    jobspec_builder_destroy(b);
}

static void test_bad_top(void **state)
{
    check_bad("{", EINVAL, "invalid JSON");
    check_bad("{'version':1,", EINVAL, "line 1");
    check_bad("[]", EINVAL, "jobspec: must be a JSON object");
    check_bad("{'version':1,'version':1}", EINVAL, "duplicate");
    check_bad("{'version':1,'foo':2}", EINVAL, "jobspec: unknown key 'foo'");
    check_bad("{'resources':[],'tasks':[]}", EINVAL,
              "jobspec: missing 'version'");
    check_bad("{'version':'1'}", EINVAL,
              "jobspec: version: must be an integer");
    check_bad("{'version':2}", EINVAL,
              "jobspec: version: unsupported version 2");
    check_bad("{'version':1,'tasks':" ONE_TASK "}", EINVAL,
              "jobspec: missing 'resources'");
    check_bad("{'version':1,'resources':[" SLOT8 "]}", EINVAL,
              "jobspec: missing 'tasks'");
    /* Non-printable key bytes are not echoed raw. */
    check_bad("{'version':1,'a\\u0001b':2}", EINVAL, "unknown key 'a?b'");
}

static void test_bad_resources(void **state)
{
    const char *core1 = "[{'type':'core','count':1}]";
    char res[512];

    bad_doc("", ONE_TASK, NULL, EINVAL,
            "jobspec: resources: must be an array with one entry");
    bad_doc(SLOT8 "," SLOT8, ONE_TASK, NULL, EINVAL,
            "resources: must be an array with one entry");
    bad_doc("3", ONE_TASK, NULL, EINVAL, "resources[0]: must be an object");
    bad_doc("{'count':1}", ONE_TASK, NULL, EINVAL,
            "resources[0]: missing 'type'");
    bad_doc("{'type':'core','count':1}", ONE_TASK, NULL, EINVAL,
            "resources[0].type: expected 'node' or 'slot', got 'core'");
    bad_doc("{'type':7}", ONE_TASK, NULL, EINVAL,
            "resources[0].type: must be a string");

    /* Node level. */
    bad_doc("{'type':'node','count':0,'with':[" SLOT8 "]}", ONE_TASK, NULL,
            EINVAL, "resources[0].count: must be an integer >= 1");
    bad_doc("{'type':'node','count':1.0,'with':[" SLOT8 "]}", ONE_TASK, NULL,
            EINVAL, "resources[0].count: must be an integer >= 1");
    bad_doc("{'type':'node','count':'2','with':[" SLOT8 "]}", ONE_TASK, NULL,
            EINVAL, "resources[0].count: must be an integer >= 1");
    bad_doc("{'type':'node','count':{'min':1},'with':[" SLOT8 "]}", ONE_TASK,
            NULL, EINVAL, "resources[0].count: must be an integer >= 1");
    bad_doc("{'type':'node','count':1048577,'with':[" SLOT8 "]}", ONE_TASK,
            NULL, E2BIG, "resources[0].count: 1048577 exceeds the limit");
    bad_doc("{'type':'node','count':1}", ONE_TASK, NULL, EINVAL,
            "resources[0]: missing 'with'");
    bad_doc("{'type':'node','with':[" SLOT8 "]}", ONE_TASK, NULL, EINVAL,
            "resources[0]: missing 'count'");
    bad_doc("{'type':'node','count':1,'with':[]}", ONE_TASK, NULL, EINVAL,
            "resources[0].with: must be an array with one entry");
    bad_doc("{'type':'node','count':1,'exclusive':1,'with':[" SLOT8 "]}",
            ONE_TASK, NULL, EINVAL,
            "resources[0].exclusive: must be true or false");
    bad_doc("{'type':'node','count':1,'colour':1,'with':[" SLOT8 "]}", ONE_TASK,
            NULL, EINVAL, "resources[0]: unknown key 'colour'");
    bad_doc("{'type':'node','count':1,'with':[{'type':'core','count':1}]}",
            ONE_TASK, NULL, EINVAL,
            "resources[0].with[0].type: expected 'slot', got 'core'");
    bad_doc("{'type':'node','count':1,'with':[{'type':'slot','count':1,"
            "'label':'task','with':[{'type':'core','count':0}]}]}",
            ONE_TASK, NULL, EINVAL,
            "resources[0].with[0].with[0].count: must be an integer >= 1");
    bad_doc("{'type':'node','count':1048576,'with':[{'type':'slot','count':32,"
            "'label':'task','with':[{'type':'core','count':1}]}]}",
            ONE_TASK, NULL, E2BIG,
            "resources[0]: 1048576 nodes of 32 slots exceed the limit");

    /* Slot level. */
    snprintf(res, sizeof(res),
             "{'type':'slot','count':8,'label':'rank','with':%s}", core1);
    bad_doc(res, ONE_TASK, NULL, EINVAL,
            "resources[0].label: expected 'task', got 'rank'");
    snprintf(res, sizeof(res), "{'type':'slot','count':8,'with':%s}", core1);
    bad_doc(res, ONE_TASK, NULL, EINVAL, "resources[0]: missing 'label'");
    snprintf(res, sizeof(res),
             "{'type':'slot','count':8,'label':'task','exclusive':true,"
             "'with':%s}",
             core1);
    bad_doc(res, ONE_TASK, NULL, EINVAL,
            "resources[0]: unknown key 'exclusive'");
    snprintf(res, sizeof(res),
             "{'type':'slot','count':16777217,'label':'task','with':%s}",
             core1);
    bad_doc(res, ONE_TASK, NULL, E2BIG,
            "resources[0].count: 16777217 exceeds the limit of 16777216");
    bad_doc("{'type':'slot','count':8,'label':'task'}", ONE_TASK, NULL, EINVAL,
            "resources[0]: missing 'with'");
    bad_doc("{'type':'slot','count':8,'label':'task','with':[{'type':'gpu',"
            "'count':1}]}",
            ONE_TASK, NULL, EINVAL,
            "resources[0].with[0].type: expected 'core', got 'gpu'");
    bad_doc("{'type':'slot','count':8,'label':'task','with':[{'type':'core',"
            "'count':1,'with':[]}]}",
            ONE_TASK, NULL, EINVAL, "resources[0].with[0]: unknown key 'with'");
    bad_doc("{'type':'slot','count':8,'label':'task','with':[{'type':'core',"
            "'count':65537}]}",
            ONE_TASK, NULL, E2BIG,
            "resources[0].with[0].count: 65537 exceeds the limit of 65536");
    bad_doc("{'type':'slot','count':8,'label':'task','with':[{'type':'core'}]}",
            ONE_TASK, NULL, EINVAL, "resources[0].with[0]: missing 'count'");
    bad_doc("{'type':'slot','count':8,'label':'task','with':[3]}", ONE_TASK,
            NULL, EINVAL, "resources[0].with[0]: must be an object");
}

static void test_bad_tasks(void **state)
{
    bad_doc(SLOT8, "[]", NULL, EINVAL,
            "jobspec: tasks: must be a non-empty "
            "array");
    bad_doc(SLOT8, "{}", NULL, EINVAL, "tasks: must be a non-empty array");
    bad_doc(SLOT8, "[1]", NULL, EINVAL, "tasks[0]: must be an object");
    bad_doc(SLOT8, "[{'cmd':['a'],'slot':'task','count':{'per_slot':1}}]", NULL,
            EINVAL, "tasks[0]: unknown key 'cmd'");
    bad_doc(SLOT8, "[{'slot':'task','count':{'per_slot':1}}]", NULL, EINVAL,
            "tasks[0]: missing 'command'");
    bad_doc(SLOT8, "[{'command':[],'slot':'task','count':{'per_slot':1}}]",
            NULL, EINVAL,
            "tasks[0].command: must be a non-empty array of strings");
    bad_doc(SLOT8, "[{'command':'a','slot':'task','count':{'per_slot':1}}]",
            NULL, EINVAL,
            "tasks[0].command: must be a non-empty array of strings");
    bad_doc(SLOT8, "[{'command':[''],'slot':'task','count':{'per_slot':1}}]",
            NULL, EINVAL, "tasks[0].command[0]: must be a non-empty string");
    bad_doc(SLOT8,
            "[{'command':['a','',3],'slot':'task','count':{'per_slot':1}}]",
            NULL, EINVAL, "tasks[0].command[2]: must be a string");
    bad_doc(SLOT8, "[{'command':['a'],'slot':'x','count':{'per_slot':1}}]",
            NULL, EINVAL, "tasks[0].slot: expected 'task', got 'x'");
    bad_doc(SLOT8, "[{'command':['a'],'count':{'per_slot':1}}]", NULL, EINVAL,
            "tasks[0]: missing 'slot'");
    bad_doc(SLOT8, "[{'command':['a'],'slot':'task'}]", NULL, EINVAL,
            "tasks[0]: missing 'count'");
    bad_doc(SLOT8, "[{'command':['a'],'slot':'task','count':{}}]", NULL, EINVAL,
            "tasks[0].count: must have exactly one of 'per_slot' or 'total'");
    bad_doc(SLOT8,
            "[{'command':['a'],'slot':'task','count':{'per_slot':1,'total':"
            "8}}]",
            NULL, EINVAL, "tasks[0].count: must have exactly one of");
    bad_doc(SLOT8, "[{'command':['a'],'slot':'task','count':{'per_node':1}}]",
            NULL, EINVAL, "tasks[0].count: unknown key 'per_node'");
    bad_doc(SLOT8, "[{'command':['a'],'slot':'task','count':{'per_slot':2}}]",
            NULL, EINVAL, "tasks[0].count.per_slot: must be 1");
    bad_doc(SLOT8, "[{'command':['a'],'slot':'task','count':{'total':7}}]",
            NULL, EINVAL, "jobspec: tasks: totals add up to 7 but there are 8");
    bad_doc(SLOT8,
            "[{'command':['a'],'slot':'task','count':{'total':2}},"
            "{'command':['b'],'slot':'task','count':{'total':0}}]",
            NULL, EINVAL,
            "jobspec: tasks[1].count.total: must be an integer "
            ">= 1");
    bad_doc(SLOT8,
            "[{'command':['a'],'slot':'task','count':{'total':2}},"
            "{'command':['b'],'slot':'task','count':{'total':-3}}]",
            NULL, EINVAL, "tasks[1].count.total: must be an integer >= 1");
    bad_doc(SLOT8,
            "[{'command':['a'],'slot':'task','count':{'total':2}},"
            "{'command':['b'],'slot':'task','count':{'total':16777217}}]",
            NULL, E2BIG, "tasks[1].count.total: 16777217 exceeds the limit");
    bad_doc(SLOT8,
            "[{'command':['a'],'slot':'task','count':{'total':2}},"
            "{'command':['b'],'slot':'task','count':{'total':4}}]",
            NULL, EINVAL,
            "jobspec: tasks: totals add up to 6 but there are "
            "8 slots");
    bad_doc(SLOT8,
            "[{'command':['a'],'slot':'task','count':{'total':7}},"
            "{'command':['b'],'slot':'task','count':{'total':4}}]",
            NULL, EINVAL, "tasks: totals add up to 11 but there are 8 slots");
    bad_doc(SLOT8,
            "[{'command':['a'],'slot':'task','count':{'total':2}},"
            "{'command':['b'],'slot':'task','count':{'per_slot':1}}]",
            NULL, EINVAL,
            "tasks[1].count.per_slot: only allowed with a single task group");
}

static void test_bad_attributes(void **state)
{
    bad_doc(SLOT8, ONE_TASK, "[]", EINVAL,
            "jobspec: attributes: must be an object");
    bad_doc(SLOT8, ONE_TASK, "{'sys':{}}", EINVAL,
            "attributes: unknown key 'sys'");
    bad_doc(SLOT8, ONE_TASK, "{'system':1}", EINVAL,
            "attributes.system: must be an object");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'walltime':5}}", EINVAL,
            "attributes.system: unknown key 'walltime'");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'duration':-1}}", EINVAL,
            "attributes.system.duration: must be a number >= 0");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'duration':'1h'}}", EINVAL,
            "attributes.system.duration: must be a number >= 0");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'cwd':'tmp'}}", EINVAL,
            "attributes.system.cwd: must be an absolute path");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'cwd':''}}", EINVAL,
            "attributes.system.cwd: must be a non-empty string");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'cwd':null}}", EINVAL,
            "attributes.system.cwd: must be a string");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'environment':['A=1']}}", EINVAL,
            "attributes.system.environment: must be an object");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'environment':{'A=B':'1'}}}", EINVAL,
            "attributes.system.environment: variable name 'A=B' contains '='");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'environment':{'':'1'}}}", EINVAL,
            "attributes.system.environment: empty variable name");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'environment':{'A':'1','B':2}}}",
            EINVAL, "attributes.system.environment.B: must be a string");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'shell':{'opts':{}}}}", EINVAL,
            "attributes.system.shell: unknown key 'opts'");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'shell':{'options':[]}}}", EINVAL,
            "attributes.system.shell.options: must be an object");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'shell':true}}", EINVAL,
            "attributes.system.shell: must be an object");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'job':{'name':''}}}", EINVAL,
            "attributes.system.job.name: must be a non-empty string");
    bad_doc(SLOT8, ONE_TASK, "{'system':{'job':{'id':1}}}", EINVAL,
            "attributes.system.job: unknown key 'id'");
    bad_doc(SLOT8, ONE_TASK, "{'user':'me'}", EINVAL,
            "attributes.user: must be an object");
}

/* Strings built in memory can hold NUL bytes that JSON text cannot. */
static void test_nul_bytes(void **state)
{
    eddy_error_t err = {{0}};
    char *s = doc(SLOT8, ONE_TASK, NULL), *t = q(s);
    json_t *o = json_loads(t, 0, NULL);
    json_t *task0 = json_array_get(json_object_get(o, "tasks"), 0);
    json_t *env = json_object();

    assert_non_null(o);
    json_array_append_new(json_object_get(task0, "command"),
                          json_stringn("x\0y", 3));
    errno = 0;
    assert_null(jobspec_decode(o, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "tasks[0].command[1]: contains a NUL"));

    json_array_remove(json_object_get(task0, "command"), 1);
    json_object_setn_new(env, "A\0B", 3, json_string("1"));
    json_object_set_new(o, "attributes",
                        json_pack("{s:{s:o}}", "system", "environment", env));
    errno = 0;
    assert_null(jobspec_decode(o, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "variable name contains a NUL"));

    /* A NUL inside a key elsewhere is an unknown key, not a match. */
    json_object_del(o, "attributes");
    json_object_setn_new(o, "tasks\0x", 7, json_integer(1));
    errno = 0;
    assert_null(jobspec_decode(o, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "unknown key 'tasks'"));

    errno = 0;
    assert_null(jobspec_decode(NULL, &err));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(jobspec_decode_str(NULL, 0, &err));
    assert_int_equal(errno, EINVAL);
    json_decref(o);
    free(t);
    free(s);
}

static void test_limits(void **state)
{
    eddy_error_t err = {{0}};
    size_t big = JOBSPEC_SIZE_MAX + 1;
    char *s = malloc(big), *d, *t;
    json_t *o, *a;
    jobspec_t *js;

    /* Text over the limit is refused before parsing. */
    assert_non_null(s);
    memset(s, ' ', big);
    errno = 0;
    assert_null(jobspec_decode_str(s, big, &err));
    assert_int_equal(errno, E2BIG);
    assert_non_null(strstr(err.text, "exceeds the limit of 1048576"));
    free(s);

    /* So is an object whose compact encoding is over the limit. */
    d = doc(SLOT8, ONE_TASK, NULL);
    t = q(d);
    o = json_loads(t, 0, NULL);
    assert_non_null(o);
    s = malloc(big);
    assert_non_null(s);
    memset(s, 'x', big - 1);
    s[big - 1] = '\0';
    json_object_set_new(o, "attributes",
                        json_pack("{s:{s:s}}", "user", "blob", s));
    errno = 0;
    assert_null(jobspec_decode(o, &err));
    assert_int_equal(errno, E2BIG);
    assert_non_null(strstr(err.text, "jobspec: encoded size"));
    free(s);

    /* 4096 task groups are fine, 4097 are not. */
    a = json_array();
    for (int i = 0; i < JOBSPEC_GROUPS_MAX; i++)
        json_array_append_new(a,
                              json_pack("{s:[s],s:s,s:{s:i}}", "command", "a",
                                        "slot", "task", "count", "total", 1));
    json_object_set_new(o, "tasks", a);
    json_object_del(o, "attributes");
    json_object_set_new(json_array_get(json_object_get(o, "resources"), 0),
                        "count", json_integer(JOBSPEC_GROUPS_MAX));
    js = jobspec_decode(o, &err);
    if (!js)
        fail_msg("4096 groups: %s", err.text);
    assert_int_equal(jobspec_ngroups(js), 4096);
    assert_int_equal(jobspec_task_group(js, 4095), 4095);
    check_roundtrip(js);
    jobspec_destroy(js);
    json_array_append_new(a, json_pack("{s:[s],s:s,s:{s:i}}", "command", "a",
                                       "slot", "task", "count", "total", 1));
    errno = 0;
    assert_null(jobspec_decode(o, &err));
    assert_int_equal(errno, E2BIG);
    assert_non_null(
        strstr(err.text, "tasks: 4097 task groups exceed the limit of 4096"));
    json_decref(o);
    free(t);
    free(d);

    /* The largest shape allowed. */
    js = decode_ok("{'version':1,'resources':[{'type':'node','count':1048576,"
                   "'with':[{'type':'slot','count':16,'label':'task','with':[{"
                   "'type':'core','count':65536}]}]}],'tasks':" ONE_TASK "}");
    assert_int_equal(jobspec_ntasks(js), 1u << 24);
    assert_int_equal(jobspec_task_group(js, (1u << 24) - 1), 0);
    check_roundtrip(js);
    jobspec_destroy(js);
}

/* --- builder ------------------------------------------------------------ */

static const char *const hostname_argv[] = {"hostname", NULL};

static jobspec_builder_t *builder(uint32_t nnodes,
                                  uint32_t ntasks,
                                  uint32_t tpn)
{
    jobspec_builder_t *b = jobspec_builder_create();

    assert_non_null(b);
    assert_int_equal(jobspec_builder_set_nnodes(b, nnodes), 0);
    assert_int_equal(jobspec_builder_set_ntasks(b, ntasks), 0);
    assert_int_equal(jobspec_builder_set_tasks_per_node(b, tpn), 0);
    return b;
}

static jobspec_t *finish_ok(jobspec_builder_t *b)
{
    eddy_error_t err = {{0}};
    jobspec_t *js = jobspec_builder_finish(b, &err);

    if (!js)
        fail_msg("finish failed: %s", err.text);
    check_roundtrip(js);
    check_mapping(js);
    return js;
}

static void finish_bad(jobspec_builder_t *b, int errnum, const char *msg)
{
    eddy_error_t err = {{0}};

    errno = 0;
    if (jobspec_builder_finish(b, &err))
        fail_msg("finish unexpectedly succeeded (want '%s')", msg);
    if (errno != errnum)
        fail_msg("finish: errno %d, want %d (%s)", errno, errnum, err.text);
    if (!strstr(err.text, msg))
        fail_msg("finish: message '%s' lacks '%s'", err.text, msg);
}

/* Build with -N nnodes -n ntasks --tasks-per-node tpn and one command;
 * check the node level and slots. */
static void check_shape(uint32_t nnodes,
                        uint32_t ntasks,
                        uint32_t tpn,
                        uint32_t want_nodes,
                        uint32_t want_spn,
                        uint32_t want_slots)
{
    jobspec_builder_t *b = builder(nnodes, ntasks, tpn);
    jobspec_t *js;

    assert_int_equal(jobspec_builder_add_group(b, 1, hostname_argv, 0), 0);
    js = finish_ok(b);
    assert_int_equal(jobspec_nnodes(js), want_nodes);
    assert_int_equal(jobspec_slots_per_node(js), want_spn);
    assert_int_equal(jobspec_nslots(js), want_slots);
    assert_int_equal(jobspec_ntasks(js), want_slots);
    assert_int_equal(jobspec_ngroups(js), 1);
    assert_int_equal(jobspec_group_ntasks(js, 0), want_slots);
    assert_int_equal(jobspec_cores_per_slot(js), 1);
    jobspec_destroy(js);
    jobspec_builder_destroy(b);
}

static void test_builder_shapes(void **state)
{
    check_shape(0, 0, 0, 0, 0, 1); /* nothing: one task */
    check_shape(0, 8, 0, 0, 0, 8); /* -n8 */
    check_shape(2, 0, 0, 2, 1, 2); /* -N2 */
    check_shape(2, 8, 0, 2, 4, 8); /* -N2 -n8 */
    check_shape(3, 0, 2, 3, 2, 6); /* -N3 --tasks-per-node=2 */
    check_shape(5, 5, 0, 5, 1, 5);
}

static void test_builder_shape_errors(void **state)
{
    jobspec_builder_t *b;

    b = builder(3, 8, 0);
    assert_int_equal(jobspec_builder_add_group(b, 1, hostname_argv, 0), 0);
    finish_bad(b, EINVAL, "jobspec: 8 tasks do not divide evenly over 3 nodes");
    jobspec_builder_destroy(b);

    b = builder(4, 2, 0); /* fewer tasks than nodes */
    assert_int_equal(jobspec_builder_add_group(b, 1, hostname_argv, 0), 0);
    finish_bad(b, EINVAL, "2 tasks do not divide evenly over 4 nodes");
    jobspec_builder_destroy(b);

    b = builder(0, 0, 2);
    assert_int_equal(jobspec_builder_add_group(b, 1, hostname_argv, 0), 0);
    finish_bad(b, EINVAL, "tasks per node needs a node count");
    jobspec_builder_destroy(b);

    b = builder(2, 4, 2);
    assert_int_equal(jobspec_builder_add_group(b, 1, hostname_argv, 0), 0);
    finish_bad(b, EINVAL, "not both");
    jobspec_builder_destroy(b);

    b = builder(0, 4, 0);
    assert_int_equal(jobspec_builder_set_exclusive(b, true), 0);
    assert_int_equal(jobspec_builder_add_group(b, 1, hostname_argv, 0), 0);
    finish_bad(b, EINVAL, "exclusive needs a node count");
    jobspec_builder_destroy(b);

    b = builder(0, 4, 0);
    finish_bad(b, EINVAL, "no task group");
    jobspec_builder_destroy(b);

    /* Limits come from the one validator. */
    b = builder(JOBSPEC_NODES_MAX + 1, 0, 0);
    assert_int_equal(jobspec_builder_add_group(b, 1, hostname_argv, 0), 0);
    finish_bad(b, E2BIG, "resources[0].count: 1048577 exceeds the limit");
    jobspec_builder_destroy(b);

    b = builder(0, JOBSPEC_SLOTS_MAX + 1, 0);
    assert_int_equal(jobspec_builder_add_group(b, 1, hostname_argv, 0), 0);
    finish_bad(b, E2BIG, "resources[0].count: 16777217 exceeds the limit");
    jobspec_builder_destroy(b);

    b = builder(1u << 20, 0, 32);
    assert_int_equal(jobspec_builder_add_group(b, 1, hostname_argv, 0), 0);
    finish_bad(b, E2BIG, "1048576 nodes of 32 slots exceed the limit");
    jobspec_builder_destroy(b);

    b = builder(0, 2, 0);
    assert_int_equal(jobspec_builder_set_cores_per_task(b, 65537), 0);
    assert_int_equal(jobspec_builder_add_group(b, 1, hostname_argv, 0), 0);
    finish_bad(b, E2BIG, "with[0].count: 65537 exceeds the limit");
    jobspec_builder_destroy(b);
}

static void test_builder_attributes(void **state)
{
    jobspec_builder_t *b = builder(2, 0, 2);
    const char *argv[] = {"./app", "--size", "10"};
    json_t *v = json_pack("{s:i}", "level", 3);
    jobspec_t *js;
    json_t *env;

    assert_int_equal(jobspec_builder_set_cores_per_task(b, 4), 0);
    assert_int_equal(jobspec_builder_set_exclusive(b, true), 0);
    assert_int_equal(jobspec_builder_set_duration(b, 90.5), 0);
    assert_int_equal(jobspec_builder_set_cwd(b, "/home/me"), 0);
    assert_int_equal(jobspec_builder_set_job_name(b, "app"), 0);
    assert_int_equal(jobspec_builder_setenv(b, "A", "1"), 0);
    assert_int_equal(jobspec_builder_setenv(b, "B", "2"), 0);
    assert_int_equal(jobspec_builder_setenv(b, "A", "3"), 0);
    assert_int_equal(jobspec_builder_setenv(b, "B", NULL), 0);
    assert_int_equal(jobspec_builder_setenv(b, "NOPE", NULL), 0);
    assert_int_equal(jobspec_builder_set_shell_option(b, "debug", v), 0);
    assert_int_equal(jobspec_builder_set_shell_option(b, "gone", v), 0);
    assert_int_equal(jobspec_builder_set_shell_option(b, "gone", NULL), 0);
    json_decref(v); /* the builder copied it */
    assert_int_equal(jobspec_builder_add_group(b, 3, argv, 0), 0);
    js = finish_ok(b);
    assert_int_equal(jobspec_nnodes(js), 2);
    assert_int_equal(jobspec_slots_per_node(js), 2);
    assert_int_equal(jobspec_cores_per_slot(js), 4);
    assert_true(jobspec_exclusive(js));
    assert_true(jobspec_duration(js) == 90.5);
    assert_string_equal(jobspec_cwd(js), "/home/me");
    assert_string_equal(jobspec_job_name(js), "app");
    env = jobspec_environment(js);
    assert_int_equal(json_object_size(env), 1);
    assert_string_equal(json_string_value(json_object_get(env, "A")), "3");
    assert_int_equal(json_object_size(jobspec_shell_options(js)), 1);
    assert_int_equal(
        json_integer_value(json_object_get(
            json_object_get(jobspec_shell_options(js), "debug"), "level")),
        3);
    assert_int_equal(jobspec_group_argc(js, 0), 3);
    assert_string_equal(jobspec_group_argv(js, 0)[2], "10");
    jobspec_destroy(js);

    /* Unsetting everything drops the objects; finish() can run again. */
    assert_int_equal(jobspec_builder_setenv(b, "A", NULL), 0);
    assert_int_equal(jobspec_builder_set_shell_option(b, "debug", NULL), 0);
    assert_int_equal(jobspec_builder_set_cwd(b, NULL), 0);
    assert_int_equal(jobspec_builder_set_job_name(b, NULL), 0);
    js = finish_ok(b);
    assert_null(jobspec_environment(js));
    assert_null(jobspec_shell_options(js));
    assert_null(jobspec_cwd(js));
    assert_null(jobspec_job_name(js));
    jobspec_destroy(js);

    /* Bad values are reported by the validator with their field. */
    assert_int_equal(jobspec_builder_setenv(b, "X=Y", "1"), 0);
    finish_bad(b, EINVAL, "variable name 'X=Y' contains '='");
    assert_int_equal(jobspec_builder_setenv(b, "X=Y", NULL), 0);
    assert_int_equal(jobspec_builder_set_cwd(b, "relative"), 0);
    finish_bad(b, EINVAL, "attributes.system.cwd: must be an absolute path");
    assert_int_equal(jobspec_builder_set_cwd(b, NULL), 0);
    assert_int_equal(jobspec_builder_set_duration(b, -1), 0);
    finish_bad(b, EINVAL, "attributes.system.duration: must be a number >= 0");
    jobspec_builder_destroy(b);
}

static void test_builder_mpmd(void **state)
{
    const char *a[] = {"master"}, *w[] = {"worker", "-x"};
    jobspec_builder_t *b;
    jobspec_t *js;

    /* -n8 with groups of 2 and 6. */
    b = builder(0, 8, 0);
    assert_int_equal(jobspec_builder_add_group(b, 1, a, 2), 0);
    assert_int_equal(jobspec_builder_add_group(b, 2, w, 6), 0);
    js = finish_ok(b);
    assert_int_equal(jobspec_ngroups(js), 2);
    assert_int_equal(jobspec_group_first_rank(js, 1), 2);
    assert_int_equal(jobspec_task_group(js, 1), 0);
    assert_int_equal(jobspec_task_group(js, 2), 1);
    assert_string_equal(jobspec_group_argv(js, 1)[0], "worker");
    jobspec_destroy(js);
    jobspec_builder_destroy(b);

    /* Without -n the groups' counts give the total; -N spreads it. */
    b = builder(2, 0, 0);
    assert_int_equal(jobspec_builder_add_group(b, 1, a, 2), 0);
    assert_int_equal(jobspec_builder_add_group(b, 2, w, 6), 0);
    js = finish_ok(b);
    assert_int_equal(jobspec_nnodes(js), 2);
    assert_int_equal(jobspec_slots_per_node(js), 4);
    assert_int_equal(jobspec_ntasks(js), 8);
    jobspec_destroy(js);
    jobspec_builder_destroy(b);

    /* A single group with a count sets the total too. */
    b = builder(0, 0, 0);
    assert_int_equal(jobspec_builder_add_group(b, 1, a, 5), 0);
    js = finish_ok(b);
    assert_int_equal(jobspec_ntasks(js), 5);
    jobspec_destroy(js);
    jobspec_builder_destroy(b);

    /* Groups that do not add up. */
    b = builder(0, 8, 0);
    assert_int_equal(jobspec_builder_add_group(b, 1, a, 2), 0);
    assert_int_equal(jobspec_builder_add_group(b, 2, w, 4), 0);
    finish_bad(b, EINVAL, "tasks: totals add up to 6 but there are 8 slots");
    jobspec_builder_destroy(b);

    /* Several groups, one without a count. */
    b = builder(0, 8, 0);
    assert_int_equal(jobspec_builder_add_group(b, 1, a, 2), 0);
    assert_int_equal(jobspec_builder_add_group(b, 2, w, 0), 0);
    finish_bad(b, EINVAL,
               "tasks[1].count.per_slot: only allowed with a "
               "single task group");
    jobspec_builder_destroy(b);

    /* An empty command is the validator's to refuse. */
    b = builder(0, 1, 0);
    assert_int_equal(jobspec_builder_add_group(b, 0, NULL, 0), 0);
    finish_bad(b, EINVAL, "tasks[0].command: must be a non-empty array");
    jobspec_builder_destroy(b);

    /* Too many groups. */
    b = builder(0, 0, 0);
    for (int i = 0; i <= JOBSPEC_GROUPS_MAX; i++)
        assert_int_equal(jobspec_builder_add_group(b, 1, a, 1), 0);
    finish_bad(b, E2BIG, "4097 task groups exceed the limit of 4096");
    jobspec_builder_destroy(b);
}

static void test_builder_args(void **state)
{
    const char *nullarg[] = {"a", NULL};
    const char *badutf8[] = {"a", "\xff\xfe"};
    jobspec_builder_t *b = jobspec_builder_create();

    errno = 0;
    assert_int_equal(jobspec_builder_add_group(b, 2, nullarg, 0), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(jobspec_builder_add_group(b, 1, NULL, 0), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(jobspec_builder_add_group(b, -1, nullarg, 0), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(jobspec_builder_add_group(b, 2, badutf8, 0), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(jobspec_builder_setenv(b, "A", "\xff"), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(jobspec_builder_setenv(b, "\xff", "1"), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(jobspec_builder_setenv(b, NULL, "1"), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(jobspec_builder_set_duration(b, NAN), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(jobspec_builder_set_duration(b, INFINITY), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(jobspec_builder_set_shell_option(b, NULL, NULL), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(jobspec_builder_set_nnodes(NULL, 1), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(jobspec_builder_set_cwd(NULL, "/"), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(jobspec_builder_finish(NULL, NULL));
    assert_int_equal(errno, EINVAL);
    /* Nothing failed above changed the builder. */
    finish_bad(b, EINVAL, "no task group");
    jobspec_builder_destroy(b);

    /* Destroy accepts NULL and leaves errno alone; accessors accept NULL. */
    errno = ENOENT;
    jobspec_builder_destroy(NULL);
    jobspec_destroy(NULL);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(jobspec_nslots(NULL), 0);
    assert_null(jobspec_cwd(NULL));
    errno = 0;
    assert_null(jobspec_encode(NULL));
    assert_int_equal(errno, EINVAL);
}

int main(void)
{
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_group),
        cmocka_unit_test(test_no_node_level),
        cmocka_unit_test(test_mpmd),
        cmocka_unit_test(test_many_groups),
        cmocka_unit_test(test_bad_top),
        cmocka_unit_test(test_bad_resources),
        cmocka_unit_test(test_bad_tasks),
        cmocka_unit_test(test_bad_attributes),
        cmocka_unit_test(test_nul_bytes),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_builder_shapes),
        cmocka_unit_test(test_builder_shape_errors),
        cmocka_unit_test(test_builder_attributes),
        cmocka_unit_test(test_builder_mpmd),
        cmocka_unit_test(test_builder_args),
    };

    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
