/* hostsfile.c - the static hosts-file bootstrap format.
 *
 * The parser is strict: a hosts file is written once by an admin or a
 * script, and a typo found at parse time with a line number is much
 * cheaper than a broker that waits forever for a peer that does not exist.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errprintf.h"
#include "hostsfile.h"
#include "quote.h"

/* How much of an untrusted token we quote in an error message. */
#define QUOTE_MAX 40

#define HOSTNAME_MAX 253 /* RFC 1035 limits */
#define LABEL_MAX 63

struct entry {
    char *host;
    char *addr;
    int port;
    uint32_t line; /* 0: rank not given (yet) */
};

struct hostsfile {
    struct entry *entries; /* indexed by rank */
    uint32_t size;
};

struct parser {
    struct entry *entries;
    size_t nalloc;  /* entries allocated */
    uint32_t count; /* entries seen */
    uint32_t maxrank;
    uint32_t maxrank_line;
};

struct token {
    const char *p;
    size_t len;
};

void hostsfile_destroy(hostsfile_t *hf)
{
    int saved_errno = errno;

    if (hf) {
        for (uint32_t i = 0; i < hf->size; i++) {
            free(hf->entries[i].host);
            free(hf->entries[i].addr);
        }
        free(hf->entries);
        free(hf);
    }
    errno = saved_errno;
}

static void parser_release(struct parser *ps)
{
    for (size_t i = 0; i < ps->nalloc; i++) {
        free(ps->entries[i].host);
        free(ps->entries[i].addr);
    }
    free(ps->entries);
}

static const char *quote(char *out, size_t outsz, const char *p, size_t len)
{
    return quote_token(out, outsz, p, len, QUOTE_MAX);
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_alnum(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Decimal digits only, at most 'maxdigits' of them, value <= max. */
static int parse_uint(
    const char *p, size_t len, size_t maxdigits, uint32_t max, uint32_t *value)
{
    uint32_t v = 0;

    if (len == 0 || len > maxdigits)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (!is_digit(p[i]))
            return -1;
        v = v * 10 + (uint32_t)(p[i] - '0');
    }
    if (v > max)
        return -1;
    *value = v;
    return 0;
}

static bool valid_hostname(const char *p, size_t len)
{
    size_t label = 0;

    if (len == 0 || len > HOSTNAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = p[i];
        if (c == '.') {
            if (label == 0)
                return false;
            label = 0;
            continue;
        }
        if (!is_alnum(c) && c != '-' && c != '_')
            return false;
        if (label == 0 && c == '-')
            return false;
        if (++label > LABEL_MAX)
            return false;
    }
    return label > 0; /* no trailing dot */
}

static bool looks_numeric(const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (!is_digit(p[i]) && p[i] != '.')
            return false;
    }
    return true;
}

/* Four decimal octets 0..255, no leading zeros (which some resolvers read
 * as octal). */
static bool valid_ipv4(const char *p, size_t len)
{
    size_t i = 0;

    for (int octet = 0; octet < 4; octet++) {
        size_t start = i;
        uint32_t v;

        while (i < len && is_digit(p[i]))
            i++;
        if (parse_uint(p + start, i - start, 3, 255, &v) < 0)
            return false;
        if (i - start > 1 && p[start] == '0')
            return false;
        if (octet < 3) {
            if (i >= len || p[i] != '.')
                return false;
            i++;
        }
    }
    return i == len;
}

static char *dupn(const char *p, size_t len)
{
    char *s = malloc(len + 1);

    if (s) {
        memcpy(s, p, len);
        s[len] = '\0';
    }
    return s;
}

static int grow(struct parser *ps, uint32_t rank)
{
    size_t n;
    struct entry *ne;

    if (rank < ps->nalloc)
        return 0;
    n = ps->nalloc ? ps->nalloc * 2 : 64;
    while (n <= rank)
        n *= 2;
    if (n > HOSTSFILE_MAX_RANKS)
        n = HOSTSFILE_MAX_RANKS;
    if (!(ne = realloc(ps->entries, n * sizeof(*ne)))) {
        errno = ENOMEM;
        return -1;
    }
    memset(ne + ps->nalloc, 0, (n - ps->nalloc) * sizeof(*ne));
    ps->entries = ne;
    ps->nalloc = n;
    return 0;
}

/* Split [p, end) into at most 'max' whitespace-separated tokens, stopping
 * at '#'.  Returns the number found (max + 1 means "too many"). */
static int tokenize(const char *p, const char *end, struct token *tok, int max)
{
    int n = 0;

    while (p < end && *p != '#') {
        const char *start;

        if (*p == ' ' || *p == '\t' || *p == '\r') {
            p++;
            continue;
        }
        start = p;
        while (p < end && *p != ' ' && *p != '\t' && *p != '\r' && *p != '#')
            p++;
        if (n == max)
            return max + 1;
        tok[n].p = start;
        tok[n].len = (size_t)(p - start);
        n++;
    }
    return n;
}

static int parse_line(struct parser *ps,
                      uint32_t lineno,
                      const char *p,
                      const char *end,
                      eddy_error_t *err)
{
    char q[QUOTE_MAX + 8];
    struct token tok[4];
    const char *colon;
    uint32_t rank, port;
    struct entry *e;
    size_t alen;
    int n;

    if (memchr(p, '\0', (size_t)(end - p))) {
        errno = EINVAL;
        return errprintf(err, "line %u: NUL byte", lineno);
    }
    n = tokenize(p, end, tok, 3);
    if (n == 0)
        return 0;
    if (n > 3) {
        errno = EINVAL;
        return errprintf(err,
                         "line %u: too many fields "
                         "(expected RANK HOST ADDR:PORT)",
                         lineno);
    }
    if (n < 3) {
        errno = EINVAL;
        return errprintf(err,
                         "line %u: %d field%s, expected RANK HOST ADDR:PORT",
                         lineno, n, n == 1 ? "" : "s");
    }
    if (parse_uint(tok[0].p, tok[0].len, 10, UINT32_MAX, &rank) < 0) {
        errno = EINVAL;
        return errprintf(err, "line %u: rank '%s' is not a number", lineno,
                         quote(q, sizeof(q), tok[0].p, tok[0].len));
    }
    if (ps->count == HOSTSFILE_MAX_RANKS) {
        errno = E2BIG;
        return errprintf(err, "line %u: more than %u ranks", lineno,
                         HOSTSFILE_MAX_RANKS);
    }
    if (rank >= HOSTSFILE_MAX_RANKS) {
        errno = EINVAL;
        return errprintf(err, "line %u: rank %u is too large (at most %u)",
                         lineno, rank, HOSTSFILE_MAX_RANKS - 1);
    }
    if (!valid_hostname(tok[1].p, tok[1].len)) {
        errno = EINVAL;
        return errprintf(err, "line %u: host '%s' is not a valid hostname",
                         lineno, quote(q, sizeof(q), tok[1].p, tok[1].len));
    }
    colon = NULL;
    for (size_t i = tok[2].len; i-- > 0;) {
        if (tok[2].p[i] == ':') {
            colon = tok[2].p + i;
            break;
        }
    }
    if (!colon) {
        errno = EINVAL;
        return errprintf(err, "line %u: '%s' is not ADDR:PORT", lineno,
                         quote(q, sizeof(q), tok[2].p, tok[2].len));
    }
    alen = (size_t)(colon - tok[2].p);
    if (looks_numeric(tok[2].p, alen) ? !valid_ipv4(tok[2].p, alen)
                                      : !valid_hostname(tok[2].p, alen)) {
        errno = EINVAL;
        return errprintf(err,
                         "line %u: address '%s' is not an IPv4 address "
                         "or a hostname",
                         lineno, quote(q, sizeof(q), tok[2].p, alen));
    }
    if (parse_uint(colon + 1, tok[2].len - alen - 1, 5, 65535, &port) < 0) {
        errno = EINVAL;
        return errprintf(err, "line %u: port '%s' is not a number in 0..65535",
                         lineno,
                         quote(q, sizeof(q), colon + 1, tok[2].len - alen - 1));
    }
    if (grow(ps, rank) < 0)
        return errprintf(err, "line %u: out of memory", lineno);
    e = &ps->entries[rank];
    if (e->line != 0) {
        errno = EINVAL;
        return errprintf(err, "line %u: rank %u already given on line %u",
                         lineno, rank, e->line);
    }
    if (!(e->host = dupn(tok[1].p, tok[1].len)) ||
        !(e->addr = dupn(tok[2].p, alen))) {
        /* parser_release() frees a half-filled entry. */
        errno = ENOMEM;
        return errprintf(err, "line %u: out of memory", lineno);
    }
    e->port = (int)port;
    e->line = lineno;
    if (ps->count == 0 || rank > ps->maxrank) {
        ps->maxrank = rank;
        ps->maxrank_line = lineno;
    }
    ps->count++;
    return 0;
}

hostsfile_t *hostsfile_parse(const char *text, size_t len, eddy_error_t *err)
{
    struct parser ps = {0};
    hostsfile_t *hf;
    const char *p, *end;
    uint32_t lineno = 0;

    if (!text && len > 0) {
        errno = EINVAL;
        errprintf(err, "no hosts file text");
        return NULL;
    }
    if (len > HOSTSFILE_MAX_SIZE) {
        errno = EFBIG;
        errprintf(err, "larger than %u bytes", HOSTSFILE_MAX_SIZE);
        return NULL;
    }
    p = text;
    end = len ? text + len : text; /* no arithmetic on a NULL text */
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;

        if (parse_line(&ps, ++lineno, p, eol, err) < 0)
            goto error;
        p = nl ? nl + 1 : end;
    }
    if (ps.count == 0) {
        errno = EINVAL;
        errprintf(err, "no ranks given");
        goto error;
    }
    if (ps.count != ps.maxrank + 1) {
        /* Ranks are unique, so some rank below maxrank is absent. */
        uint32_t r = 0;
        while (ps.entries[r].line != 0)
            r++;
        errno = EINVAL;
        errprintf(err, "rank %u is missing (line %u gives rank %u)", r,
                  ps.maxrank_line, ps.maxrank);
        goto error;
    }
    if (!(hf = calloc(1, sizeof(*hf)))) {
        errno = ENOMEM;
        errprintf(err, "out of memory");
        goto error;
    }
    /* The entries array becomes the result; extra slots past maxrank
     * are empty and need no freeing. */
    hf->entries = ps.entries;
    hf->size = ps.count;
    return hf;
error:
    parser_release(&ps);
    return NULL;
}

hostsfile_t *hostsfile_load(const char *path, eddy_error_t *err)
{
    eddy_error_t perr;
    hostsfile_t *hf;
    struct stat st;
    char *buf = NULL, *nbuf;
    size_t cap, len = 0;
    int fd;

    if (!path) {
        errno = EINVAL;
        errprintf(err, "hosts file: no path given");
        return NULL;
    }
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        errprintf(err, "hosts file %s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) < 0) {
        errprintf(err, "hosts file %s: %s", path, strerror(errno));
        goto error;
    }
    if (!S_ISREG(st.st_mode)) {
        errno = EINVAL;
        errprintf(err, "hosts file %s: not a regular file", path);
        goto error;
    }
    if (st.st_size > (off_t)HOSTSFILE_MAX_SIZE) {
        errno = EFBIG;
        errprintf(err, "hosts file %s: larger than %u bytes", path,
                  HOSTSFILE_MAX_SIZE);
        goto error;
    }
    /* The file may change while we read it: read to EOF, bounded. */
    cap = (size_t)st.st_size + 1;
    if (!(buf = malloc(cap)))
        goto nomem;
    for (;;) {
        ssize_t n;

        if (len == cap) {
            if (cap > HOSTSFILE_MAX_SIZE) {
                errno = EFBIG;
                errprintf(err, "hosts file %s: larger than %u bytes", path,
                          HOSTSFILE_MAX_SIZE);
                goto error;
            }
            cap = cap * 2 > HOSTSFILE_MAX_SIZE + 1 ? HOSTSFILE_MAX_SIZE + 1
                                                   : cap * 2;
            if (!(nbuf = realloc(buf, cap)))
                goto nomem;
            buf = nbuf;
        }
        n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            errprintf(err, "hosts file %s: %s", path, strerror(errno));
            goto error;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    fd = -1;
    if (!(hf = hostsfile_parse(buf, len, &perr))) {
        errprintf(err, "hosts file %s: %s", path, perr.text);
        goto error;
    }
    free(buf);
    return hf;
nomem:
    errno = ENOMEM;
    errprintf(err, "hosts file %s: out of memory", path);
error:
    free(buf);
    if (fd >= 0) {
        int saved_errno = errno;
        close(fd);
        errno = saved_errno;
    }
    return NULL;
}

uint32_t hostsfile_size(const hostsfile_t *hf)
{
    return hf ? hf->size : 0;
}

const char *hostsfile_host(const hostsfile_t *hf, uint32_t rank)
{
    if (!hf || rank >= hf->size)
        return NULL;
    return hf->entries[rank].host;
}

const char *hostsfile_addr(const hostsfile_t *hf, uint32_t rank)
{
    if (!hf || rank >= hf->size)
        return NULL;
    return hf->entries[rank].addr;
}

int hostsfile_port(const hostsfile_t *hf, uint32_t rank)
{
    if (!hf || rank >= hf->size) {
        errno = EINVAL;
        return -1;
    }
    return hf->entries[rank].port;
}
