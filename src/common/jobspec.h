/* jobspec.h - job specifications: parse, validate strictly, build (pure).
 *
 * A jobspec says what a job needs (nodes, slots, cores per slot) and what it
 * runs (one command per task group; several groups make an MPMD job), plus
 * system attributes (duration, cwd, environment, shell options, name).  The
 * JSON format, shaped after Flux RFC 14/25, is defined in docs/jobspec.md.
 * This module does no I/O.
 *
 * Lifecycle of a jobspec_t:
 *  1. jobspec_decode() from a JSON object, or jobspec_decode_str() from JSON
 *     text, or jobspec_builder_finish() from a builder.  Every one of them
 *     runs the same validator: a jobspec_t that exists is valid.
 *  2. Read it with the accessors below; it is immutable, and every string or
 *     JSON object an accessor returns is owned by the jobspec_t and lives
 *     until jobspec_destroy().  Do not modify the borrowed JSON objects.
 *  3. jobspec_encode() gives the canonical JSON form to send or store.
 *  4. jobspec_destroy().
 *
 * Lifecycle of a jobspec_builder_t (for programs: libeddy, `eddy run`):
 *  1. jobspec_builder_create().
 *  2. Setters and jobspec_builder_add_group() record what was asked; they
 *     only fail for arguments that cannot be represented at all (NULL
 *     pointers, a non-finite duration) or out of memory.  Everything else
 *     is checked once, in step 3.
 *  3. jobspec_builder_finish() turns the settings into jobspec JSON and
 *     decodes it, so the builder and the wire share one validator.  It does
 *     not change the builder and may be called again.
 *  4. jobspec_builder_destroy().
 *
 * Invariants of a valid jobspec: nslots == ntasks >= 1; nslots ==
 * nnodes * slots_per_node when there is a node level; the task groups
 * partition ranks 0..ntasks-1 in order (group 0 gets the first ones);
 * every group has at least one task and a non-empty argv[0].
 *
 * Errors: every failing function returns NULL (or -1) with errno set, and
 * the functions that take an eddy_error_t fill it with a message that
 * starts with "jobspec: " and names the field path at fault, e.g.
 * "jobspec: tasks[1].count.total: must be an integer >= 1".
 *   EINVAL  invalid JSON, a wrong type or value, an unknown key
 *   E2BIG   a count or size above one of the limits below
 *   ENOMEM  out of memory
 */
#ifndef EDDY_COMMON_JOBSPEC_H
#define EDDY_COMMON_JOBSPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "eddy/core.h"

/* The only format version this code reads and writes. */
#define JOBSPEC_VERSION 1

/* Limits: far beyond any machine, small enough that a hostile jobspec
 * cannot make the job manager or a shell allocate without bound. */
#define JOBSPEC_NODES_MAX (1u << 20)     /* the idset rank limit */
#define JOBSPEC_SLOTS_MAX (1u << 24)     /* total slots, hence tasks */
#define JOBSPEC_CORES_MAX (1u << 16)     /* cores in one slot */
#define JOBSPEC_GROUPS_MAX 4096          /* MPMD task groups */
#define JOBSPEC_ARGC_MAX 65536           /* arguments of one command */
#define JOBSPEC_SIZE_MAX (1024u * 1024u) /* compact JSON encoding, bytes */
#define JOBSPEC_PLUGINS_MAX 32           /* shell plugins of one job */
#define JOBSPEC_PLUGIN_PATH_MAX 4096     /* PATH_MAX, NUL included */
#define JOBSPEC_PLUGIN_ARGS_MAX 4096     /* a plugin's argument string */

typedef struct jobspec jobspec_t;
typedef struct jobspec_builder jobspec_builder_t;

/* Validate the JSON object 'o' (borrowed; nothing of it is kept) and return
 * a new jobspec_t, which the caller destroys with jobspec_destroy().  A
 * document whose compact encoding exceeds JOBSPEC_SIZE_MAX fails with
 * E2BIG.  NULL with errno EINVAL, E2BIG or ENOMEM and 'err' filled. */
jobspec_t *jobspec_decode(const json_t *o, eddy_error_t *err);

/* Parse 'len' bytes of JSON text (no NUL terminator needed), then as
 * jobspec_decode().  Text longer than JOBSPEC_SIZE_MAX fails with E2BIG
 * before parsing; text that is not JSON fails with EINVAL and a message
 * carrying jansson's reason, line and column. Duplicate keys are refused. */
jobspec_t *jobspec_decode_str(const char *s, size_t len, eddy_error_t *err);

/* The canonical JSON form of 'js': a new reference the caller releases with
 * json_decref().  jobspec_decode(jobspec_encode(js)) gives a jobspec equal
 * to 'js' in every accessor, and encoding that again gives the same JSON.
 * NULL with errno EINVAL (js NULL) or ENOMEM. */
json_t *jobspec_encode(const jobspec_t *js);

/* Free 'js' and everything its accessors returned.  Accepts NULL, leaves
 * errno alone. */
void jobspec_destroy(jobspec_t *js);

/* Accessors.  With js NULL they return 0, false or NULL. */

int jobspec_version(const jobspec_t *js);

/* Node count and slots per node, both 0 when the spec has no node level
 * (slots go wherever the scheduler finds cores). */
uint32_t jobspec_nnodes(const jobspec_t *js);
uint32_t jobspec_slots_per_node(const jobspec_t *js);

/* Total slots; there is exactly one task per slot, so ntasks == nslots. */
uint32_t jobspec_nslots(const jobspec_t *js);
uint32_t jobspec_ntasks(const jobspec_t *js);
uint32_t jobspec_cores_per_slot(const jobspec_t *js);

/* Whether the nodes are wanted for this job alone (false without a node
 * level). */
bool jobspec_exclusive(const jobspec_t *js);

/* Task groups (MPMD: one per command; the group index is the MPI appnum).
 * Groups are numbered 0..ngroups-1. */
uint32_t jobspec_ngroups(const jobspec_t *js);

/* Arguments of group 'g': argc >= 1, and argv is NULL-terminated and owned
 * by 'js'.  -1 / NULL with errno EINVAL if 'g' is out of range. */
int jobspec_group_argc(const jobspec_t *js, uint32_t g);
const char *const *jobspec_group_argv(const jobspec_t *js, uint32_t g);

/* Task count of group 'g' and its first rank: group g holds ranks
 * first_rank .. first_rank + ntasks - 1.  -1 with errno EINVAL if 'g' is out
 * of range. */
int jobspec_group_ntasks(const jobspec_t *js, uint32_t g);
int jobspec_group_first_rank(const jobspec_t *js, uint32_t g);

/* The group that task 'rank' belongs to, in O(log ngroups).  -1 with errno
 * EINVAL if rank >= ntasks. */
int jobspec_task_group(const jobspec_t *js, uint32_t rank);

/* Wall-clock limit in seconds; 0 means unlimited. */
double jobspec_duration(const jobspec_t *js);

/* Working directory of the tasks (an absolute path), or NULL if unset. */
const char *jobspec_cwd(const jobspec_t *js);

/* Environment: a borrowed JSON object mapping names to string values, or
 * NULL if the spec has none.  What the shell does with it is the shell's
 * business; this module only guarantees names are non-empty and contain no
 * '=' and no string contains a NUL byte. */
json_t *jobspec_environment(const jobspec_t *js);

/* Shell options: a borrowed JSON object, or NULL.  Its content is the
 * shell's business, except "plugins", checked here: an array of at most
 * JOBSPEC_PLUGINS_MAX objects {"path": absolute path, "args"?: string}
 * (docs/jobspec.md, docs/plugins.md). */
json_t *jobspec_shell_options(const jobspec_t *js);

/* The shell plugin option "PATH[,ARGS]" (`eddy run -o plugin=...`) as the
 * object {"path", "args"?} a jobspec's plugins array holds: ARGS is what
 * follows the first comma (absent without one); a relative PATH is made
 * absolute with 'cwd' (NULL: refused).  The caller owns '*out'.  -1 with
 * errno EINVAL (empty path, relative path without cwd), E2BIG (path or
 * args too long) or ENOMEM, and 'err' naming the option. */
int jobspec_plugin_parse(const char *opt,
                         const char *cwd,
                         json_t **out,
                         eddy_error_t *err);

/* Job name, or NULL if unset. */
const char *jobspec_job_name(const jobspec_t *js);

/* attributes.user: a borrowed JSON object kept as is for the user, or NULL.
 */
json_t *jobspec_user(const jobspec_t *js);

/* --- builder ------------------------------------------------------------
 *
 * Shape rules applied by jobspec_builder_finish() (N = nodes, n = total
 * tasks, T = tasks per node; 0 means "not set"):
 *   n only        no node level, n slots            (`-n8`)
 *   N only        N nodes, 1 slot per node           (`-N2`)
 *   N and n       N nodes, n/N slots per node        (`-N2 -n8`); n must be
 *                 a multiple of N, else EINVAL "8 tasks do not divide evenly
 *                 over 3 nodes" (no uneven layouts: keep it simple, strict)
 *   N and T       N nodes, T slots per node, N*T tasks
 *   neither n nor T: the sum of the groups' task counts when every group
 *                 has one, else 1 per node (or 1 slot without nodes).
 * T without N, n together with T, exclusive without N, and no task group
 * at all fail with EINVAL.  Cores per task default to 1.  A single group
 * with ntasks 0 runs one task per slot; with several groups each needs its
 * own count and the counts must add up to the number of slots.
 */

/* A new, empty builder; the caller destroys it.  NULL with errno ENOMEM. */
jobspec_builder_t *jobspec_builder_create(void);

/* Free 'b'.  Accepts NULL, leaves errno alone. */
void jobspec_builder_destroy(jobspec_builder_t *b);

/* Counts (0 = not set, the default).  -1 with errno EINVAL if b is NULL. */
int jobspec_builder_set_nnodes(jobspec_builder_t *b, uint32_t nnodes);
int jobspec_builder_set_ntasks(jobspec_builder_t *b, uint32_t ntasks);
int jobspec_builder_set_tasks_per_node(jobspec_builder_t *b, uint32_t tpn);
int jobspec_builder_set_cores_per_task(jobspec_builder_t *b, uint32_t cores);
int jobspec_builder_set_exclusive(jobspec_builder_t *b, bool exclusive);

/* Wall-clock limit in seconds, 0 = unlimited (the default).  -1 with errno
 * EINVAL if it is NaN or infinite (a negative value fails in finish()). */
int jobspec_builder_set_duration(jobspec_builder_t *b, double seconds);

/* Working directory (copied); NULL unsets it.  -1 EINVAL/ENOMEM. */
int jobspec_builder_set_cwd(jobspec_builder_t *b, const char *cwd);

/* Set environment variable 'key' to 'value' (both copied), or remove it
 * from the job's environment if 'value' is NULL.  The spec carries an
 * environment object only if at least one variable is set.  -1 with errno
 * EINVAL (b or key NULL) or ENOMEM. */
int jobspec_builder_setenv(jobspec_builder_t *b,
                           const char *key,
                           const char *value);

/* Drop every variable set so far and make the spec carry an environment
 * object even if none is set later: the tasks then get exactly what is
 * set (an empty environment object means "nothing", where a missing one
 * means "the shell's own").  -1 with errno EINVAL (b NULL). */
int jobspec_builder_clearenv(jobspec_builder_t *b);

/* Set shell option 'key' to a deep copy of 'value' (borrowed), or remove it
 * if 'value' is NULL.  -1 with errno EINVAL or ENOMEM. */
int jobspec_builder_set_shell_option(jobspec_builder_t *b,
                                     const char *key,
                                     const json_t *value);

/* Job name (copied); NULL unsets it.  -1 EINVAL/ENOMEM. */
int jobspec_builder_set_job_name(jobspec_builder_t *b, const char *name);

/* Append a task group running argv[0..argc-1] (copied) with 'ntasks'
 * tasks; 0 means one task per slot (only valid for a single group).  -1
 * with errno EINVAL if argc < 0 or argv or one of its first argc entries
 * is NULL, ENOMEM. */
int jobspec_builder_add_group(jobspec_builder_t *b,
                              int argc,
                              const char *const *argv,
                              uint32_t ntasks);

/* Build the jobspec JSON from the settings and decode it.  Returns a new
 * jobspec_t (caller destroys) or NULL with errno EINVAL, E2BIG or ENOMEM
 * and 'err' filled, by the shape rules above or by the validator. */
jobspec_t *jobspec_builder_finish(const jobspec_builder_t *b,
                                  eddy_error_t *err);

#endif /* !EDDY_COMMON_JOBSPEC_H */
