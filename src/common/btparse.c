/* btparse.c - read gdb's backtrace text into call paths.
 *
 * One pass over the lines, no copy of the input.  gdb prints the innermost
 * frame first and we want to keep the outermost BTPARSE_FRAMES_MAX, so the
 * frames of the current thread go into a ring of that many name buffers:
 * once it is full, each new (outer) frame overwrites the innermost one
 * kept.  The buffers are reused from thread to thread, so memory is
 * bounded by the limits, not by the input.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "btparse.h"
#include "errprintf.h"

struct parser {
    /* Name buffers of BTPARSE_NAME_MAX + 1 bytes, NULL until first used;
     * frame k of the thread (0 the innermost) is in ring[k % MAX]. */
    char *ring[BTPARSE_FRAMES_MAX];
    const char *frames[BTPARSE_FRAMES_MAX]; /* outermost first, for cb */
    size_t seen;                            /* frames of this thread */
    unsigned long num, lwp;                 /* of this thread */
    int delivered;
    btparse_f cb;
    void *arg;
    eddy_error_t *err;
};

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_hex(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool is_ident(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           c == '_' || c == '$';
}

static bool has_prefix(const char *s, const char *e, const char *prefix)
{
    size_t n = strlen(prefix);

    return (size_t)(e - s) >= n && memcmp(s, prefix, n) == 0;
}

/* A decimal number at *sp, saturating; advances *sp past the digits. */
static unsigned long get_number(const char **sp, const char *e)
{
    unsigned long v = 0;
    const char *s = *sp;

    for (; s < e && is_digit(*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        v = v > (~0ul - d) / 10 ? ~0ul : v * 10 + d;
    }
    *sp = s;
    return v;
}

static const char *find(const char *s, const char *e, const char *needle)
{
    size_t n = strlen(needle);

    return memmem(s, (size_t)(e - s), needle, n);
}

/* Characters that may follow the keyword in an operator's name. */
static bool is_operator_char(char c)
{
    return c != '\0' && strchr("<>=!+-*/%^&|~,", c) != NULL;
}

/* Where the name starting at s ends: the first " (" outside brackets.
 * "operator" followed by symbols is skipped whole, so that "operator<"
 * opens nothing and "operator()" is not an argument list.  NULL if there
 * is no such " (" (the brackets never close). */
static const char *name_end(const char *s, const char *e)
{
    int paren = 0, angle = 0, brace = 0, bracket = 0;
    const char *p = s;

    while (p < e) {
        if (*p == 'o' && (p == s || !is_ident(p[-1])) &&
            has_prefix(p, e, "operator") && (p + 8 == e || !is_ident(p[8]))) {
            p += 8;
            if (has_prefix(p, e, "()") || has_prefix(p, e, "[]"))
                p += 2;
            else
                while (p < e && is_operator_char(*p))
                    p++;
            continue;
        }
        switch (*p) {
        case '(':
            paren++;
            break;
        case ')':
            paren -= paren > 0;
            break;
        case '<':
            angle++;
            break;
        case '>':
            angle -= angle > 0;
            break;
        case '{':
            brace++;
            break;
        case '}':
            brace -= brace > 0;
            break;
        case '[':
            bracket++;
            break;
        case ']':
            bracket -= bracket > 0;
            break;
        case ' ':
            if (p + 1 < e && p[1] == '(' && !paren && !angle && !brace &&
                !bracket)
                return p;
            break;
        }
        p++;
    }
    return NULL;
}

/* Append bytes to a name being built in 'out' (of BTPARSE_NAME_MAX + 1
 * bytes), making them printable and marking a cut with "...". */
static void name_append(char *out, size_t *len, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];

        if (*len == BTPARSE_NAME_MAX) {
            memcpy(out + BTPARSE_NAME_MAX - 3, "...", 3);
            return;
        }
        out[(*len)++] = (c >= 0x20 && c < 0x7f) ? c : '?';
    }
}

/* Keep one frame, the next outer one of the current thread. */
static int push_frame(struct parser *ps, const char *name, size_t len)
{
    char **slot = &ps->ring[ps->seen % BTPARSE_FRAMES_MAX];

    /* Every slot gets the largest size once and keeps it. */
    if (!*slot && !(*slot = malloc(BTPARSE_NAME_MAX + 1))) {
        errno = ENOMEM;
        return errprintf(ps->err, "btparse: out of memory");
    }
    memcpy(*slot, name, len);
    (*slot)[len] = '\0';
    ps->seen++;
    return 0;
}

/* Hand the current thread (if it has frames) to the callback. */
static int flush(struct parser *ps)
{
    size_t n = ps->seen < BTPARSE_FRAMES_MAX ? ps->seen : BTPARSE_FRAMES_MAX;
    struct btparse_thread th;

    if (n == 0)
        return 0;
    if (ps->delivered == BTPARSE_THREADS_MAX) {
        errno = E2BIG;
        return errprintf(ps->err, "btparse: more than %d threads",
                         BTPARSE_THREADS_MAX);
    }
    /* The last frame seen is the outermost. */
    for (size_t i = 0; i < n; i++)
        ps->frames[i] = ps->ring[(ps->seen - 1 - i) % BTPARSE_FRAMES_MAX];
    th.num = ps->num;
    th.lwp = ps->lwp;
    th.frames = ps->frames;
    th.nframes = n;
    th.truncated = ps->seen > BTPARSE_FRAMES_MAX;
    ps->seen = 0;
    errno = 0;
    if (ps->cb(&th, ps->arg) < 0) {
        if (errno == 0)
            errno = ECANCELED;
        return errprintf(ps->err, "btparse: thread %lu: callback failed",
                         th.num);
    }
    ps->delivered++;
    return 0;
}

/* "Thread 2 (Thread 0x7f... (LWP 1234) "name"):" */
static int parse_header(struct parser *ps, const char *s, const char *e)
{
    const char *p = s + strlen("Thread ");
    const char *q;

    if (flush(ps) < 0)
        return -1;
    ps->num = get_number(&p, e);
    ps->lwp = 0;
    if ((q = find(p, e, "(LWP ")))
        q += strlen("(LWP ");
    else if ((q = find(p, e, "(process ")))
        q += strlen("(process ");
    if (q)
        ps->lwp = get_number(&q, e);
    return 0;
}

/* "#N  [0xADDR in ]NAME (ARGS)[ at FILE:LINE| from LIB]" */
static int parse_frame(struct parser *ps, const char *s, const char *e)
{
    char name[BTPARSE_NAME_MAX + 1];
    size_t len = 0;
    unsigned long num;
    const char *p = s + 1, *q;

    if (p == e || !is_digit(*p))
        return 0;
    num = get_number(&p, e);
    if (p == e || !is_blank(*p))
        return 0;
    while (p < e && is_blank(*p))
        p++;
    if (num == 0 && ps->seen > 0) {
        /* A new `bt` without a thread header. */
        if (flush(ps) < 0)
            return -1;
        ps->num = 0;
        ps->lwp = 0;
    }
    /* The pc, or "<unavailable>" when gdb cannot read it. */
    q = p;
    if (has_prefix(q, e, "0x")) {
        for (q += 2; q < e && is_hex(*q); q++)
            ;
    } else if (has_prefix(q, e, "<unavailable>")) {
        q += strlen("<unavailable>");
    }
    if (q > p && has_prefix(q, e, " in") && (q + 3 == e || is_blank(q[3])))
        for (p = q + 3; p < e && is_blank(*p); p++)
            ;
    if (p < e && *p == '<' && (q = memchr(p, '>', (size_t)(e - p)))) {
        /* A pseudo-frame: "<signal handler called>". */
        q++;
    } else if (!(q = name_end(p, e)) && !(q = find(p, e, " ("))) {
        q = e;
    }
    while (q > p && is_blank(q[-1]))
        q--;
    if (q == p || (q - p == 2 && memcmp(p, "??", 2) == 0)) {
        const char *lib = find(q, e, " from ");

        name_append(name, &len, "??", 2);
        if (lib) {
            const char *base = lib + strlen(" from ");
            const char *slash;

            while ((slash = memchr(base, '/', (size_t)(e - base))))
                base = slash + 1;
            if (base < e) {
                name_append(name, &len, " (", 2);
                name_append(name, &len, base, (size_t)(e - base));
                name_append(name, &len, ")", 1);
            }
        }
    } else {
        name_append(name, &len, p, (size_t)(q - p));
    }
    return push_frame(ps, name, len);
}

static void parser_destroy(struct parser *ps)
{
    int saved_errno = errno;

    for (size_t i = 0; i < BTPARSE_FRAMES_MAX; i++)
        free(ps->ring[i]);
    free(ps);
    errno = saved_errno;
}

static int parse_line(struct parser *ps, const char *s, const char *e)
{
    while (s < e && is_blank(*s))
        s++;
    while (e > s && (is_blank(e[-1]) || e[-1] == '\r'))
        e--;
    if (s < e && *s == '#')
        return parse_frame(ps, s, e);
    if (has_prefix(s, e, "Thread ") && s + 7 < e && is_digit(s[7]) &&
        e[-1] == ':')
        return parse_header(ps, s, e);
    return 0;
}

int btparse(
    const char *text, size_t len, btparse_f cb, void *arg, eddy_error_t *err)
{
    struct parser *ps;
    const char *p = text, *end = text + len;
    int rc = -1;

    if (!cb || (!text && len > 0)) {
        errno = EINVAL;
        return errprintf(err, "btparse: %s", cb ? "no text" : "no callback");
    }
    if (len == 0)
        return 0;
    if (!(ps = calloc(1, sizeof(*ps)))) {
        errno = ENOMEM;
        return errprintf(err, "btparse: out of memory");
    }
    ps->cb = cb;
    ps->arg = arg;
    ps->err = err;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;

        if (parse_line(ps, p, le) < 0)
            goto done;
        p = nl ? nl + 1 : end;
    }
    if (flush(ps) < 0)
        goto done;
    rc = ps->delivered;
done:
    parser_destroy(ps);
    return rc;
}
