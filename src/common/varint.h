/* varint.h - unsigned LEB128 varints of 32 bits, and zigzag for deltas.
 *
 * The wire codecs (proctable, stacktree) write their numbers this way:
 * seven bits a byte, least significant group first, the high bit set on
 * every byte but the last.  A uint32_t takes 1 to VARINT_MAX bytes.
 *
 * Writing (the two-pass codecs size a buffer, then fill it):
 *  1. struct varint_writer w = {0}; call varint_write() and
 *     varint_write_bytes() for everything: with w.p NULL they only count,
 *     so w.pos is then the encoded size.
 *  2. Point w.p at a buffer of that size, set w.pos to 0, write the same
 *     things again.
 *
 * Reading is strict, because the input is untrusted and an encoding must
 * have exactly one form: varint_get() refuses a varint that is cut short,
 * one whose value needs more than 32 bits, and one not in its shortest
 * form (a trailing 0x00 group, e.g. 0x80 0x00 for 0), and says which.
 *
 * Decoding a whole buffer (the codecs' decoders):
 *  1. struct varint_reader r = {.p = buf, .len = len, .name = "codec",
 *     .err = err};
 *  2. varint_read() for numbers; raw bytes are read by the caller at
 *     r.p + r.pos (checked against varint_left()), advancing r.pos.
 *  3. On any bad input, varint_error(): every message starts with the name
 *     and the byte offset, so a broken buffer can be found with a hex dump.
 */
#ifndef EDDY_COMMON_VARINT_H
#define EDDY_COMMON_VARINT_H

#include <stddef.h>
#include <stdint.h>

#include "eddy/core.h"

/* The most bytes one uint32_t varint takes: ceil(32 / 7). */
#define VARINT_MAX 5

/* Why varint_get() refused its input (0 is success). */
enum varint_status {
    VARINT_OK = 0,
    VARINT_TRUNCATED = -1,    /* input ends inside the varint */
    VARINT_OVERFLOW = -2,     /* value needs more than 32 bits */
    VARINT_NOT_SHORTEST = -3, /* a shorter encoding of the value exists */
};

/* Encode v into out (room for VARINT_MAX bytes) in its shortest form.
 * Returns the number of bytes written, 1 to VARINT_MAX.  Cannot fail. */
size_t varint_encode(uint8_t *out, uint32_t v);

/* Writes to p, or only counts bytes when p is NULL (the sizing pass).
 * The caller owns p and must have made it at least as long as the sizing
 * pass counted: the writer does not check bounds. */
struct varint_writer {
    uint8_t *p;
    size_t pos;
};

/* Append len bytes of b (raw, not a varint) at w->pos and advance it. */
void varint_write_bytes(struct varint_writer *w, const void *b, size_t len);

/* Append the varint of v at w->pos and advance it. */
void varint_write(struct varint_writer *w, uint32_t v);

/* Decode the varint at p[*pos], p being len bytes long.  On success store
 * the value in *v, advance *pos past it and return VARINT_OK (0).  On
 * failure return a negative enum varint_status and leave *pos and *v
 * unchanged.  *pos may be len (then the result is VARINT_TRUNCATED). */
int varint_get(const uint8_t *p, size_t len, size_t *pos, uint32_t *v);

/* The reason for a varint_get() result, as message text: "truncated",
 * "varint exceeds 32 bits", "varint not in shortest form" (the codecs'
 * error messages and tests use these words); "success" for 0.  Static
 * string, never NULL. */
const char *varint_strerror(int status);

/* A cursor over an untrusted buffer, with what its messages need.  The
 * caller owns every pointer; p is only read.  Invariant: pos <= len. */
struct varint_reader {
    const uint8_t *p;
    size_t len;
    size_t pos;
    const char *name;  /* opens every message: "proctable" */
    const char *ctx;   /* the item being read ("run"), or NULL for none */
    uint32_t ctx_idx;  /* its index, shown when ctx is set */
    eddy_error_t *err; /* may be NULL */
};

/* Refuse the input: set errno to EPROTO, fill r->err with
 * "NAME: byte OFF: [CTX N: ]MESSAGE" (off is where the bad item starts)
 * and return -1. */
int varint_error(struct varint_reader *r, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Read a strict varint at r->pos into *v and advance past it: 0.  Else -1
 * through varint_error() at the varint's first byte, with 'what' naming
 * it: "NAME: byte OFF: [CTX N: ]WHAT: truncated" (or the other reasons of
 * varint_strerror()); r->pos and *v are then left as they were. */
int varint_read(struct varint_reader *r, uint32_t *v, const char *what);

/* Bytes not yet read: r->len - r->pos. */
size_t varint_left(const struct varint_reader *r);

/* Zigzag maps a signed 32-bit delta, given as its two's complement bits,
 * to an unsigned number that is small when the delta is near 0 (0, -1, 1,
 * -2, ... become 0, 1, 2, 3, ...), so small negative deltas stay one byte.
 * INT32_MAX maps to UINT32_MAX - 1 and INT32_MIN to UINT32_MAX.  Callers
 * compute deltas with uint32_t wrap-around: a - b as uint32_t, and add the
 * unzigzag result back the same way. */
uint32_t varint_zigzag(uint32_t delta);

/* The inverse of varint_zigzag(): every uint32_t maps back exactly. */
uint32_t varint_unzigzag(uint32_t v);

#endif /* !EDDY_COMMON_VARINT_H */
