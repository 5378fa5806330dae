/* jobslice.h - decode and validate a JOBSLICE (pure).
 *
 * A JOBSLICE is what rank 0 sends each broker of a job in job-exec.start,
 * and what job-exec hands the job's eddy-shell in answer to its hello
 * (docs/jobs-protocol.md):
 *   {"id", "jobspec", "size", "nnodes", "node_index", "tasks": "IDSET",
 *    "cores": "IDSET", "stdin": bool}
 * The broker validates it before spawning a shell, and the shell decodes
 * it again, so both share this one validator.  The jobspec itself is only
 * checked to be an object here: the shell decodes it with jobspec_decode().
 *
 * Lifecycle:
 *  1. jobslice_decode() from the JSON object: the result is valid.
 *  2. Read the fields (they are not to be modified).
 *  3. jobslice_destroy().
 *
 * Invariants of a decoded slice: size >= 1, nnodes >= 1, node_index <
 * nnodes, 'tasks' is not empty and every task rank in it is < size.
 */
#ifndef EDDY_COMMON_JOBSLICE_H
#define EDDY_COMMON_JOBSLICE_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "eddy/core.h"
#include "src/common/idset.h"

/* Job IDs travel as JSON integers and must stay exact in every JSON
 * reader, hence below 2^53. */
#define JOBSLICE_ID_MAX ((1ULL << 53) - 1)

struct jobslice {
    uint64_t id;
    json_t *jobspec;     /* a reference owned by the slice */
    uint32_t size;       /* tasks in the whole job */
    uint32_t nnodes;     /* nodes (brokers) of the job */
    uint32_t node_index; /* this broker's index among them */
    idset_t *tasks;      /* task ranks that run here */
    idset_t *cores;      /* core ids here (empty if not given) */
    bool has_stdin;      /* the job's tasks read stdin from messages */
    char *ranks;         /* the job's broker ranks, canonical idset (for
                            the PMI exchange); NULL if not given */
};

/* Decode and validate 'o' (borrowed; the jobspec is referenced, not
 * copied).  Returns a slice the caller frees with jobslice_destroy(), or
 * NULL with errno EINVAL (err names the field: "JOBSLICE: 'tasks': ...")
 * or ENOMEM.  Unknown keys are refused, so that a mismatch between the
 * rank-0 side and this one shows at once. */
struct jobslice *jobslice_decode(const json_t *o, eddy_error_t *err);

/* Free 's'.  Accepts NULL; leaves errno alone. */
void jobslice_destroy(struct jobslice *s);

#endif /* !EDDY_COMMON_JOBSLICE_H */
