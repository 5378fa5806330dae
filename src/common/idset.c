/* idset.c - sets of non-negative integers in RFC 22 form.
 *
 * A set is a bitmap of 64-bit words grown on demand.  Ids are bounded by
 * IDSET_ID_MAX, so the bitmap never exceeds IDSET_ID_MAX / 8 bytes (128 KiB),
 * whatever string a peer sends us.  Ranges are set word by word so that a
 * string repeating "0-1048575" many times still decodes quickly.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "errprintf.h"
#include "idset.h"
#include "quote.h"

#define WORD_BITS 64u
#define MAX_WORDS (IDSET_ID_MAX / WORD_BITS)

/* How much of an untrusted input string we quote in error messages. */
#define QUOTE_MAX 48

struct idset {
    uint64_t *words;
    size_t nwords; /* allocated words; bits beyond are zero */
};

idset_t *idset_create(void)
{
    idset_t *s = calloc(1, sizeof(*s));
    if (!s)
        errno = ENOMEM;
    return s;
}

void idset_destroy(idset_t *s)
{
    int saved_errno = errno;

    if (s) {
        free(s->words);
        free(s);
    }
    errno = saved_errno;
}

/* Make sure word index 'w' exists. */
static int grow(idset_t *s, size_t w)
{
    size_t n;
    uint64_t *nw;

    if (w < s->nwords)
        return 0;
    n = s->nwords ? s->nwords * 2 : 4;
    if (n <= w)
        n = w + 1;
    if (n > MAX_WORDS)
        n = MAX_WORDS;
    if (!(nw = realloc(s->words, n * sizeof(*nw)))) {
        errno = ENOMEM;
        return -1;
    }
    memset(nw + s->nwords, 0, (n - s->nwords) * sizeof(*nw));
    s->words = nw;
    s->nwords = n;
    return 0;
}

/* Set ids lo..hi inclusive (both < IDSET_ID_MAX, lo <= hi). */
static int set_range(idset_t *s, uint32_t lo, uint32_t hi)
{
    size_t wlo = lo / WORD_BITS;
    size_t whi = hi / WORD_BITS;

    if (grow(s, whi) < 0)
        return -1;
    for (size_t w = wlo; w <= whi; w++) {
        uint64_t mask = ~0ull;
        if (w == wlo)
            mask &= ~0ull << (lo % WORD_BITS);
        if (w == whi && hi % WORD_BITS != WORD_BITS - 1)
            mask &= (1ull << (hi % WORD_BITS + 1)) - 1;
        s->words[w] |= mask;
    }
    return 0;
}

int idset_set(idset_t *s, uint32_t id)
{
    if (!s) {
        errno = EINVAL;
        return -1;
    }
    if (id >= IDSET_ID_MAX) {
        errno = ERANGE;
        return -1;
    }
    return set_range(s, id, id);
}

int idset_clear(idset_t *s, uint32_t id)
{
    if (!s) {
        errno = EINVAL;
        return -1;
    }
    if (id >= IDSET_ID_MAX) {
        errno = ERANGE;
        return -1;
    }
    if (id / WORD_BITS < s->nwords)
        s->words[id / WORD_BITS] &= ~(1ull << (id % WORD_BITS));
    return 0;
}

bool idset_test(const idset_t *s, uint32_t id)
{
    if (!s || id >= IDSET_ID_MAX || id / WORD_BITS >= s->nwords)
        return false;
    return (s->words[id / WORD_BITS] >> (id % WORD_BITS)) & 1;
}

size_t idset_count(const idset_t *s)
{
    size_t n = 0;

    if (!s)
        return 0;
    for (size_t w = 0; w < s->nwords; w++)
        n += (size_t)__builtin_popcountll(s->words[w]);
    return n;
}

/* The first id >= 'from' whose bit equals 'value', or IDSET_INVALID (for
 * value == true) / IDSET_ID_MAX (for value == false) if there is none. */
static uint32_t scan(const idset_t *s, uint32_t from, bool value)
{
    size_t w = from / WORD_BITS;

    while (w < s->nwords) {
        uint64_t bits = value ? s->words[w] : ~s->words[w];
        if (w == from / WORD_BITS)
            bits &= ~0ull << (from % WORD_BITS);
        if (bits)
            return (uint32_t)(w * WORD_BITS) + (uint32_t)__builtin_ctzll(bits);
        w++;
    }
    if (value)
        return IDSET_INVALID;
    /* Past the bitmap every bit is clear. */
    return from > s->nwords * WORD_BITS ? from
                                        : (uint32_t)(s->nwords * WORD_BITS);
}

uint32_t idset_first(const idset_t *s)
{
    if (!s)
        return IDSET_INVALID;
    return scan(s, 0, true);
}

uint32_t idset_next(const idset_t *s, uint32_t prev)
{
    if (!s || prev >= IDSET_ID_MAX - 1)
        return IDSET_INVALID;
    return scan(s, prev + 1, true);
}

uint32_t idset_last(const idset_t *s)
{
    if (!s)
        return IDSET_INVALID;
    for (size_t w = s->nwords; w-- > 0;) {
        if (s->words[w])
            return (uint32_t)(w * WORD_BITS) + 63u -
                   (uint32_t)__builtin_clzll(s->words[w]);
    }
    return IDSET_INVALID;
}

char *idset_encode(const idset_t *s)
{
    size_t cap = 64, len = 0;
    char *buf, *nbuf;
    uint32_t lo;

    if (!s) {
        errno = EINVAL;
        return NULL;
    }
    if (!(buf = malloc(cap)))
        goto nomem;
    buf[0] = '\0';
    lo = scan(s, 0, true);
    while (lo != IDSET_INVALID) {
        uint32_t end = scan(s, lo, false); /* one past the run */
        char tmp[32];
        int n;

        if (end - 1 == lo)
            n = snprintf(tmp, sizeof(tmp), "%s%u", len ? "," : "", lo);
        else
            n = snprintf(tmp, sizeof(tmp), "%s%u-%u", len ? "," : "", lo,
                         end - 1);
        if (len + (size_t)n + 1 > cap) {
            cap = (len + (size_t)n + 1) * 2;
            if (!(nbuf = realloc(buf, cap)))
                goto nomem;
            buf = nbuf;
        }
        memcpy(buf + len, tmp, (size_t)n + 1);
        len += (size_t)n;
        lo = end >= IDSET_ID_MAX ? IDSET_INVALID : scan(s, end, true);
    }
    return buf;
nomem:
    free(buf);
    errno = ENOMEM;
    return NULL;
}

static const char *quote(char *out, size_t outsz, const char *p, size_t len)
{
    return quote_token(out, outsz, p, len, QUOTE_MAX);
}

/* Parse a decimal number of 1+ digits from [p, end).  Values past
 * IDSET_ID_MAX saturate there so that huge numbers cannot overflow. */
static int parse_id(const char *p, const char *end, uint32_t *id)
{
    uint32_t v = 0;

    if (p == end)
        return -1;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (uint32_t)(*p - '0');
        if (v > IDSET_ID_MAX)
            v = IDSET_ID_MAX;
    }
    *id = v;
    return 0;
}

idset_t *idset_decode(const char *str, eddy_error_t *err)
{
    char qs[QUOTE_MAX + 8], qt[QUOTE_MAX + 8];
    const char *p, *end;
    idset_t *s = NULL;
    size_t len;

    if (!str) {
        errno = EINVAL;
        errprintf(err, "idset: no string given");
        return NULL;
    }
    len = strlen(str);
    quote(qs, sizeof(qs), str, len);
    p = str;
    end = str + len;
    if (len > 0 && *p == '[') {
        if (end[-1] != ']') {
            errno = EINVAL;
            errprintf(err, "idset '%s': '[' without a closing ']'", qs);
            return NULL;
        }
        p++;
        end--;
    }
    if (!(s = idset_create()))
        goto error_nomsg;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *tend = comma ? comma : end;
        const char *dash = memchr(p, '-', (size_t)(tend - p));
        uint32_t lo, hi;

        quote(qt, sizeof(qt), p, (size_t)(tend - p));
        if (tend == p) {
            errno = EINVAL;
            errprintf(err, "idset '%s': empty element at offset %zu", qs,
                      (size_t)(p - str));
            goto error;
        }
        if (!dash) {
            if (parse_id(p, tend, &lo) < 0) {
                errno = EINVAL;
                errprintf(err, "idset '%s': '%s' is not a number", qs, qt);
                goto error;
            }
            hi = lo;
        } else {
            if (parse_id(p, dash, &lo) < 0) {
                errno = EINVAL;
                errprintf(err, "idset '%s': '%s' is not a number", qs, qt);
                goto error;
            }
            if (parse_id(dash + 1, tend, &hi) < 0) {
                errno = EINVAL;
                errprintf(err, "idset '%s': '%s' is not a range", qs, qt);
                goto error;
            }
        }
        if (lo >= IDSET_ID_MAX || hi >= IDSET_ID_MAX) {
            errno = ERANGE;
            errprintf(err, "idset '%s': '%s' is too large (ids stop at %u)", qs,
                      qt, IDSET_ID_MAX - 1);
            goto error;
        }
        if (hi < lo) {
            errno = EINVAL;
            errprintf(err, "idset '%s': range '%s' goes backwards", qs, qt);
            goto error;
        }
        if (set_range(s, lo, hi) < 0)
            goto error_nomsg;
        if (comma && comma + 1 == end) {
            errno = EINVAL;
            errprintf(err, "idset '%s': trailing ','", qs);
            goto error;
        }
        p = comma ? comma + 1 : end;
    }
    return s;
error_nomsg:
    errprintf(err, "idset '%s': out of memory", qs);
error:
    idset_destroy(s);
    return NULL;
}
