/* varint.c - unsigned LEB128 varints of 32 bits, and zigzag for deltas. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "errprintf.h"
#include "varint.h"

size_t varint_encode(uint8_t *out, uint32_t v)
{
    size_t n = 0;

    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

void varint_write_bytes(struct varint_writer *w, const void *b, size_t len)
{
    if (w->p)
        memcpy(w->p + w->pos, b, len);
    w->pos += len;
}

void varint_write(struct varint_writer *w, uint32_t v)
{
    uint8_t b[VARINT_MAX];

    varint_write_bytes(w, b, varint_encode(b, v));
}

int varint_get(const uint8_t *p, size_t len, size_t *pos, uint32_t *v)
{
    size_t at = *pos;
    uint32_t val = 0;

    for (int i = 0; i < VARINT_MAX; i++) {
        uint8_t b;

        if (at >= len)
            return VARINT_TRUNCATED;
        b = p[at++];
        /* The fifth byte carries bits 28..31: only its low 4 bits may be
         * set, and no continuation bit. */
        if (i == VARINT_MAX - 1 && b > 0x0f)
            return VARINT_OVERFLOW;
        val |= (uint32_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            /* A last group of 0 after others adds nothing: the encoder
             * would have stopped a byte earlier. */
            if (b == 0 && i > 0)
                return VARINT_NOT_SHORTEST;
            *v = val;
            *pos = at;
            return VARINT_OK;
        }
    }
    return VARINT_OVERFLOW; /* unreached: the fifth byte always ends it */
}

const char *varint_strerror(int status)
{
    switch (status) {
    case VARINT_OK:
        return "success";
    case VARINT_TRUNCATED:
        return "truncated";
    case VARINT_OVERFLOW:
        return "varint exceeds 32 bits";
    case VARINT_NOT_SHORTEST:
        return "varint not in shortest form";
    }
    return "unknown varint error";
}

int varint_error(struct varint_reader *r, size_t off, const char *fmt, ...)
{
    char msg[200];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    errno = EPROTO;
    if (r->ctx)
        return errprintf(r->err, "%s: byte %zu: %s %u: %s", r->name, off,
                         r->ctx, r->ctx_idx, msg);
    return errprintf(r->err, "%s: byte %zu: %s", r->name, off, msg);
}

int varint_read(struct varint_reader *r, uint32_t *v, const char *what)
{
    size_t off = r->pos;
    int rc = varint_get(r->p, r->len, &r->pos, v);

    return rc ? varint_error(r, off, "%s: %s", what, varint_strerror(rc)) : 0;
}

size_t varint_left(const struct varint_reader *r)
{
    return r->len - r->pos;
}

uint32_t varint_zigzag(uint32_t delta)
{
    return (delta << 1) ^ (0u - (delta >> 31));
}

uint32_t varint_unzigzag(uint32_t v)
{
    return (v >> 1) ^ (0u - (v & 1));
}
