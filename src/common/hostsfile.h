/* hostsfile.h - the static hosts-file bootstrap format (pure parser).
 *
 * A hosts file tells every broker of an instance who is who, when there is
 * no PMI to ask.  One line per broker:
 *
 *   # rank  host     address:port
 *   0       node0    10.0.0.1:8050
 *   1       node1    node1.ib:8050
 *   2       node2    10.0.0.3:0
 *
 * Fields are separated by spaces or tabs; '#' starts a comment (whole line
 * or after the fields); blank lines are ignored; CRLF line ends are
 * accepted.  RANK is decimal; the ranks of a file are exactly 0..N-1, each
 * once, in any order.  HOST is a hostname (letters, digits, '-', '_', '.';
 * dot-separated labels of 1..63 characters, 253 in all, not starting with
 * '-' or '.').  ADDR is an IPv4 dotted quad or a hostname; PORT is 0..65535,
 * where 0 means "any port" (a leaf broker has no children and need not
 * listen at a known port).
 *
 * Lifecycle:
 *  1. hostsfile_parse() on bytes already read, or hostsfile_load() on a
 *     path, makes a hostsfile_t.
 *  2. hostsfile_size(), hostsfile_host(), hostsfile_addr() and
 *     hostsfile_port() answer questions about ranks; the strings they
 *     return are owned by the hostsfile_t.
 *  3. hostsfile_destroy() frees it and every string it returned.
 *
 * Invariants: a hostsfile_t is never empty, and every rank below
 * hostsfile_size() has a host, an address and a port.
 */
#ifndef EDDY_COMMON_HOSTSFILE_H
#define EDDY_COMMON_HOSTSFILE_H

#include <stddef.h>
#include <stdint.h>

#include "eddy/core.h"

/* Far beyond any machine; bounds what a corrupt file can make us allocate. */
#define HOSTSFILE_MAX_RANKS 65536

/* 65536 lines of generous length fit with room to spare. */
#define HOSTSFILE_MAX_SIZE (16u << 20)

typedef struct hostsfile hostsfile_t;

/* Parse 'len' bytes of hosts-file text (no NUL terminator needed; a NUL
 * byte inside is an error).  Does no I/O.  Returns a hostsfile_t the caller
 * destroys with hostsfile_destroy(), or NULL with errno set and 'err'
 * filled with a message that starts with "line N: " when a line is at
 * fault:
 *   EINVAL  a malformed line, a duplicate rank, a missing rank, no entries
 *   E2BIG   more than HOSTSFILE_MAX_RANKS entries
 *   EFBIG   'len' is larger than HOSTSFILE_MAX_SIZE
 *   ENOMEM  out of memory
 */
hostsfile_t *hostsfile_parse(const char *text, size_t len, eddy_error_t *err);

/* Read and parse the file at 'path'.  Same results as hostsfile_parse(),
 * with messages prefixed by "hosts file PATH: ", plus the errno of a
 * failed open/read (ENOENT, EACCES, ...) and EINVAL if 'path' is not a
 * regular file. */
hostsfile_t *hostsfile_load(const char *path, eddy_error_t *err);

/* Free 'hf' and every string it handed out.  Accepts NULL; leaves errno
 * alone. */
void hostsfile_destroy(hostsfile_t *hf);

/* The number of ranks N (>= 1); 0 for NULL. */
uint32_t hostsfile_size(const hostsfile_t *hf);

/* The HOST field of 'rank', owned by 'hf'; NULL if rank >= size. */
const char *hostsfile_host(const hostsfile_t *hf, uint32_t rank);

/* The ADDR part of the third field of 'rank' (no port), owned by 'hf';
 * NULL if rank >= size. */
const char *hostsfile_addr(const hostsfile_t *hf, uint32_t rank);

/* The PORT of 'rank' (0..65535, 0 meaning any); -1 with errno EINVAL if
 * rank >= size. */
int hostsfile_port(const hostsfile_t *hf, uint32_t rank);

#endif /* !EDDY_COMMON_HOSTSFILE_H */
