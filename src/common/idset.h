/* idset.h - sets of non-negative integers in RFC 22 form: "0-3,8,10-11".
 *
 * Lifecycle:
 *  1. idset_create(), or idset_decode() from a string.
 *  2. idset_set()/idset_clear()/idset_test(), iterate with idset_first()
 *     and idset_next().
 *  3. idset_encode() gives the canonical ranged string (caller frees).
 *  4. idset_destroy().
 *
 * Ids are below IDSET_ID_MAX, so a hostile string ("0-4000000000") cannot
 * make us allocate without bound.
 */
#ifndef EDDY_COMMON_IDSET_H
#define EDDY_COMMON_IDSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eddy/core.h"

/* A million ranks is far beyond any machine. */
#define IDSET_ID_MAX (1u << 20)
#define IDSET_INVALID UINT32_MAX

typedef struct idset idset_t;

idset_t *idset_create(void);
void idset_destroy(idset_t *s); /* accepts NULL, leaves errno alone */

/* Parse "0-3,8" (also "[0-3,8]" and "" for the empty set). NULL with errno
 * EINVAL and 'err' naming the offending part ("idset '3-1': range goes
 * backwards"), ERANGE for an id >= IDSET_ID_MAX. */
idset_t *idset_decode(const char *s, eddy_error_t *err);

/* Canonical string, caller frees. NULL with errno ENOMEM. */
char *idset_encode(const idset_t *s);

int idset_set(idset_t *s, uint32_t id); /* -1 ERANGE/ENOMEM */
int idset_clear(idset_t *s, uint32_t id);
bool idset_test(const idset_t *s, uint32_t id);
size_t idset_count(const idset_t *s);
uint32_t idset_first(const idset_t *s); /* IDSET_INVALID if empty */
uint32_t idset_next(const idset_t *s, uint32_t prev); /* IDSET_INVALID at end */
uint32_t idset_last(const idset_t *s);

#endif /* !EDDY_COMMON_IDSET_H */
