/* bcast_tree.c - pack paths into a pax stream; extract one atomically.
 *
 * Packing walks the sources itself, with openat()/fdopendir() relative to
 * each directory's descriptor, instead of libarchive's disk reader: that
 * reader fchdir()s into every directory it visits, and the packing side
 * runs inside libeddy, in tools that may have other threads resolving
 * relative paths at the same moment.  Our walk touches no process state.
 * Holes are not looked for: files are packed densely (bcast's zstd makes
 * runs of zeros cheap on the wire), which keeps every file a plain entry
 * that any tar reads, with no sparse-file extension.
 *
 * Extracting uses libarchive's disk writer, for its secure-path checks and
 * its deferred directory modes (a 0500 directory is filled first, then
 * closed).  The writer works on path names relative to the working
 * directory; rather than chdir into the temp directory, each entry's name
 * is prefixed with the temp directory's absolute, symlink-free path
 * (realpath of its parent), checked to be the directory we made.  Since
 * ARCHIVE_EXTRACT_SECURE_SYMLINKS looks at every component of that path,
 * it must have no symbolic link in it, hence the realpath.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bcast_tree.h"
#include "tempname.h"
#include "errprintf.h"
#include "quote.h"
#include "rmtree.h"

/* Data is copied through a buffer of this size, and the archive is
 * written and read in blocks of this size: large enough that the system
 * calls cost little, small enough to stay in L2. */
#define BLOCK_SIZE (64u << 10)

/* A walk keeps one directory open per level: deeper trees are refused
 * (ELOOP) rather than risk running out of descriptors.  A tool bundle is
 * never this deep. */
#define DEPTH_MAX 128

/* How much of a name taken from an archive we quote in a message, and
 * how much of a path on disk we show (its head and tail): messages fit in
 * an eddy_error_t (256 bytes) with the reason at their end. */
#define NAME_QUOTE_MAX 100
#define SHOWN_MAX 120
#define SHOWN_HEAD 40
#define SHOWN_TAIL (SHOWN_MAX - SHOWN_HEAD - 3)

/* An end-of-archive marker: two 512-byte blocks of zeros. */
#define TAR_END_SIZE 1024

static void close_keep_errno(int fd)
{
    int saved_errno = errno;

    if (fd >= 0)
        (void)close(fd);
    errno = saved_errno;
}

/* libarchive's own error codes on Linux (archive.h only names them; its
 * private archive_platform.h defines them): a bad format, a misuse, and
 * "miscellaneous". */
#define ARC_ERRNO_FILE_FORMAT EILSEQ
#define ARC_ERRNO_PROGRAMMER EINVAL

/* The errno to report for a libarchive failure: the system call's errno
 * when libarchive kept one, else 'dflt'. */
static int arc_errno(struct archive *a, int dflt)
{
    int e = archive_errno(a);

    if (e <= 0 || e == ARC_ERRNO_FILE_FORMAT || e == ARC_ERRNO_PROGRAMMER)
        return dflt;
    return e;
}

static const char *arc_msg(struct archive *a)
{
    const char *s = archive_error_string(a);

    return s ? s : "unknown libarchive error";
}

/* ---------------------------------------------------------------- pack */

struct pack {
    struct archive *aw;
    struct archive_entry *e;
    const char *src;  /* the source being packed, as given */
    const char *name; /* its entry name; "" in contents mode */
    char *rel;        /* the path below 'src' of the current object */
    size_t rellen, relcap;
    char *ename; /* scratch: the entry name */
    size_t enamecap;
    unsigned char *buf; /* BLOCK_SIZE */
    unsigned depth;
    int fd;       /* the archive's output */
    int werrno;   /* the first write error, reported by check_write() */
    bool discard; /* failed: the writer's output goes nowhere */
    eddy_error_t *err;
};

/* libarchive's output callback.  It never reports an error to libarchive:
 * libarchive 3.6 leaks its output buffer when an archive ends in its
 * FATAL state.  A write error is kept in p->werrno for check_write(), and
 * from then on, as after any failure, output is dropped: a failed pack
 * never ends with an end-of-archive marker that would make it look
 * whole. */
static la_ssize_t write_cb(struct archive *a,
                           void *arg,
                           const void *buf,
                           size_t len)
{
    struct pack *p = arg;
    size_t done = 0;

    while (!p->discard && done < len) {
        ssize_t n = write(p->fd, (const char *)buf + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            p->werrno = n < 0 ? errno : EIO;
            p->discard = true;
            break;
        }
        done += (size_t)n;
    }
    return (la_ssize_t)len;
}

/* Fail if writing the archive failed since the last check. */
static int check_write(struct pack *p)
{
    if (!p->werrno)
        return 0;
    errno = p->werrno;
    return errprintf(p->err, "bcast: writing the archive: %s", strerror(errno));
}

/* "SRC/REL" (or "SRC"): the object on disk, for messages; the middle of
 * a long path is elided so that the reason after it still fits.  'buf'
 * has room for SHOWN_MAX + 1 bytes. */
static const char *shown(struct pack *p, char *buf, size_t size)
{
    const char *sep = p->rellen ? "/" : "", *rel = p->rellen ? p->rel : "";
    size_t sl = strlen(p->src), len = sl + strlen(sep) + p->rellen;
    char head[SHOWN_HEAD + 1], tail[SHOWN_TAIL + 1];

    if (len <= SHOWN_MAX) {
        snprintf(buf, size, "%s%s%s", p->src, sep, rel);
        return buf;
    }
    /* the last SHOWN_TAIL bytes of SRC/REL: from REL alone, or from the
     * end of SRC, the slash and REL */
    if (p->rellen >= SHOWN_TAIL)
        snprintf(tail, sizeof(tail), "%s", rel + p->rellen - SHOWN_TAIL);
    else
        snprintf(tail, sizeof(tail), "%s%s%s",
                 p->src + sl - (SHOWN_TAIL - strlen(sep) - p->rellen), sep,
                 rel);
    snprintf(head, sizeof(head), "%s%s%s", p->src, sep, rel); /* cut */
    snprintf(buf, size, "%s...%s", head, tail);
    return buf;
}

static int pack_fail(struct pack *p, const char *what)
{
    char b[SHOWN_MAX + 8];

    return errprintf(p->err, "bcast: %s: %s%s%s", shown(p, b, sizeof(b)),
                     what ? what : "", what ? ": " : "", strerror(errno));
}

static int pack_arc_fail(struct pack *p, struct archive *a)
{
    char b[SHOWN_MAX + 8];
    int e = arc_errno(a, EIO);

    errprintf(p->err, "bcast: %s: %s", shown(p, b, sizeof(b)), arc_msg(a));
    errno = e;
    return -1;
}

static int grow(char **s, size_t *cap, size_t need)
{
    char *n;
    size_t c = *cap ? *cap : 256;

    if (need <= *cap)
        return 0;
    while (c < need)
        c *= 2;
    if (!(n = realloc(*s, c))) {
        errno = ENOMEM;
        return -1;
    }
    *s = n;
    *cap = c;
    return 0;
}

/* Append "/NAME" (or "NAME" at the top) to p->rel; returns the old length
 * to restore. */
static int rel_push(struct pack *p, const char *name, size_t *saved)
{
    size_t n = strlen(name);
    size_t need = p->rellen + 1 + n + 1;

    if (grow(&p->rel, &p->relcap, need) < 0)
        return errprintf(p->err, "bcast: out of memory");
    *saved = p->rellen;
    if (p->rellen)
        p->rel[p->rellen++] = '/';
    memcpy(p->rel + p->rellen, name, n + 1);
    p->rellen += n;
    return 0;
}

static void rel_pop(struct pack *p, size_t saved)
{
    p->rellen = saved;
    if (p->rel)
        p->rel[saved] = '\0';
}

/* The entry name of the current object: NAME/REL, NAME, REL, or "." for
 * the top of a contents-mode source. */
static const char *entry_name(struct pack *p)
{
    size_t nl = strlen(p->name);
    size_t need = nl + 1 + p->rellen + 2;

    if (grow(&p->ename, &p->enamecap, need) < 0)
        return NULL;
    if (nl && p->rellen)
        snprintf(p->ename, p->enamecap, "%s/%s", p->name, p->rel);
    else if (nl)
        snprintf(p->ename, p->enamecap, "%s", p->name);
    else if (p->rellen)
        snprintf(p->ename, p->enamecap, "%s", p->rel);
    else
        snprintf(p->ename, p->enamecap, ".");
    return p->ename;
}

/* Write the header of the current object, described by 'st' (and
 * 'target' for a symlink). */
static int put_header(struct pack *p, const struct stat *st, const char *target)
{
    const char *name = entry_name(p);

    if (!name) {
        errno = ENOMEM;
        return errprintf(p->err, "bcast: out of memory");
    }
    archive_entry_clear(p->e);
    archive_entry_copy_stat(p->e, st);
    /* only what the far end uses: type, mode, mtime, size */
    archive_entry_unset_atime(p->e);
    archive_entry_unset_ctime(p->e);
    archive_entry_unset_birthtime(p->e);
    archive_entry_set_nlink(p->e, 1);
    archive_entry_copy_pathname(p->e, name);
    if (!S_ISREG(st->st_mode))
        archive_entry_set_size(p->e, 0);
    if (target)
        archive_entry_copy_symlink(p->e, target);
    if (archive_write_header(p->aw, p->e) != ARCHIVE_OK)
        return pack_arc_fail(p, p->aw);
    return check_write(p);
}

/* What to call a file type we refuse. */
static const char *type_name(mode_t m)
{
    if (S_ISFIFO(m))
        return "a fifo";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    return "of an unknown type";
}

static int refuse_type(struct pack *p, mode_t m)
{
    char b[SHOWN_MAX + 8];

    errno = EINVAL;
    return errprintf(p->err,
                     "bcast: %s is %s: only regular files, directories "
                     "and symbolic links are shipped",
                     shown(p, b, sizeof(b)), type_name(m));
}

/* Pack the regular file open on 'fd' (taken), whose fstat is 'st'. */
static int pack_file(struct pack *p, int fd, const struct stat *st)
{
    uint64_t left = (uint64_t)st->st_size;

    if (put_header(p, st, NULL) < 0)
        goto error;
    while (left > 0) {
        size_t want = left < BLOCK_SIZE ? (size_t)left : BLOCK_SIZE;
        ssize_t n = read(fd, p->buf, want);
        la_ssize_t w;

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            pack_fail(p, "read");
            goto error;
        }
        if (n == 0) /* shrank: the writer pads the entry with zeros */
            break;
        if ((w = archive_write_data(p->aw, p->buf, (size_t)n)) < 0) {
            pack_arc_fail(p, p->aw);
            goto error;
        }
        if (check_write(p) < 0)
            goto error;
        left -= (uint64_t)n;
    }
    close(fd);
    return 0;
error:
    close_keep_errno(fd);
    return -1;
}

/* Open a regular file without blocking (it may have become a fifo since
 * it was looked at) and pack it; 'lst' is what lstat said. */
static int pack_file_at(struct pack *p,
                        int dirfd,
                        const char *name,
                        const struct stat *lst)
{
    struct stat st;
    int fd = openat(dirfd, name,
                    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

    if (fd < 0)
        return pack_fail(p, NULL);
    if (fstat(fd, &st) < 0) {
        pack_fail(p, "fstat");
        close_keep_errno(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) ||
        (lst && (st.st_dev != lst->st_dev || st.st_ino != lst->st_ino))) {
        close(fd);
        if (!S_ISREG(st.st_mode))
            return refuse_type(p, st.st_mode);
        errno = EAGAIN;
        return pack_fail(p, "changed while being packed");
    }
    return pack_file(p, fd, &st);
}

static int pack_link_at(struct pack *p,
                        int dirfd,
                        const char *name,
                        const struct stat *st)
{
    char *target;
    size_t cap = (size_t)st->st_size + 1;
    ssize_t n;
    int rc;

    /* st_size is the target's length; 0 on some pseudo file systems */
    if (cap < 64)
        cap = 64;
    for (;;) {
        if (!(target = malloc(cap))) {
            errno = ENOMEM;
            return errprintf(p->err, "bcast: out of memory");
        }
        if ((n = readlinkat(dirfd, name, target, cap)) < 0) {
            free(target);
            return pack_fail(p, "readlink");
        }
        if ((size_t)n < cap)
            break;
        free(target);
        if (cap > PATH_MAX * 4) {
            errno = ENAMETOOLONG;
            return pack_fail(p, "readlink");
        }
        cap *= 2;
    }
    target[n] = '\0';
    rc = put_header(p, st, target);
    free(target);
    return rc;
}

static int pack_dir(struct pack *p, int fd, const struct stat *st);

/* Pack the object 'name' of the directory 'dirfd' (p->rel already names
 * it), never following a symbolic link. */
static int pack_at(struct pack *p, int dirfd, const char *name)
{
    struct stat st;
    int fd;

    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return pack_fail(p, NULL);
    if (S_ISREG(st.st_mode))
        return pack_file_at(p, dirfd, name, &st);
    if (S_ISLNK(st.st_mode))
        return pack_link_at(p, dirfd, name, &st);
    if (!S_ISDIR(st.st_mode))
        return refuse_type(p, st.st_mode);
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return pack_fail(p, NULL);
    return pack_dir(p, fd, &st);
}

/* Pack the directory open on 'fd' (taken): its header, then what it
 * holds, in readdir order. */
static int pack_dir(struct pack *p, int fd, const struct stat *st)
{
    struct dirent *d;
    DIR *dir = NULL;
    size_t saved = 0;

    if (p->depth >= DEPTH_MAX) {
        char b[SHOWN_MAX + 8];
        errno = ELOOP;
        errprintf(p->err, "bcast: %s: more than %d directory levels",
                  shown(p, b, sizeof(b)), DEPTH_MAX);
        goto error;
    }
    if (put_header(p, st, NULL) < 0)
        goto error;
    if (!(dir = fdopendir(fd))) {
        pack_fail(p, "fdopendir");
        goto error;
    }
    p->depth++;
    for (;;) {
        errno = 0;
        if (!(d = readdir(dir))) {
            if (errno) {
                pack_fail(p, "readdir");
                goto error_depth;
            }
            break;
        }
        if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
            continue;
        if (rel_push(p, d->d_name, &saved) < 0)
            goto error_depth;
        if (pack_at(p, dirfd(dir), d->d_name) < 0)
            goto error_depth; /* the message names the deepest path */
        rel_pop(p, saved);
    }
    p->depth--;
    closedir(dir);
    return 0;
error_depth:
    p->depth--;
error:
    if (dir) {
        int saved_errno = errno;
        closedir(dir);
        errno = saved_errno;
    } else {
        close_keep_errno(fd);
    }
    return -1;
}

/* A source as given, looked at before anything is written. */
struct source {
    const char *path; /* as given */
    char *name;       /* its entry name ("" in contents mode) */
    struct stat st;   /* stat(), links followed */
};

/* The entry name for 'path': its last component, trailing slashes
 * ignored; "." and ".." by the name of the directory they resolve to.
 * NULL with errno (EINVAL for "/"). */
static char *source_name(const char *path)
{
    size_t len = strlen(path);
    const char *start;
    char *real = NULL, *name;

    while (len > 1 && path[len - 1] == '/')
        len--;
    start = path + len;
    while (start > path && start[-1] != '/')
        start--;
    if ((size_t)(path + len - start) == 1 && start[0] == '.')
        goto resolve;
    if ((size_t)(path + len - start) == 2 && start[0] == '.' && start[1] == '.')
        goto resolve;
    if (path + len == start || (len == 1 && path[0] == '/')) {
        errno = EINVAL;
        return NULL;
    }
    if (!(name = strndup(start, (size_t)(path + len - start))))
        errno = ENOMEM;
    return name;
resolve:
    if (!(real = realpath(path, NULL)))
        return NULL;
    if (!strcmp(real, "/")) {
        free(real);
        errno = EINVAL;
        return NULL;
    }
    name = strdup(strrchr(real, '/') + 1);
    free(real);
    if (!name)
        errno = ENOMEM;
    return name;
}

static int cmp_source(const void *a, const void *b)
{
    const struct source *x = *(const struct source *const *)a;
    const struct source *y = *(const struct source *const *)b;

    return strcmp(x->name, y->name);
}

/* Look at every source: it exists, has a type we ship and a name no other
 * source has.  Fills src[0..n). */
static int check_sources(struct source *src,
                         const char *const *paths,
                         size_t n,
                         eddy_error_t *err)
{
    bool contents;
    struct source **sorted;

    for (size_t i = 0; i < n; i++) {
        src[i].path = paths[i];
        if (!paths[i] || !*paths[i]) {
            errno = EINVAL;
            return errprintf(err, "bcast: source %zu: empty path", i + 1);
        }
        if (stat(paths[i], &src[i].st) < 0)
            return errprintf(err, "bcast: %s: %s", paths[i], strerror(errno));
        if (!S_ISREG(src[i].st.st_mode) && !S_ISDIR(src[i].st.st_mode)) {
            errno = EINVAL;
            return errprintf(err,
                             "bcast: %s is %s: only regular files, "
                             "directories and symbolic links are shipped",
                             paths[i], type_name(src[i].st.st_mode));
        }
    }
    contents = n == 1 && S_ISDIR(src[0].st.st_mode);
    for (size_t i = 0; i < n; i++) {
        src[i].name = contents ? strdup("") : source_name(paths[i]);
        if (!src[i].name) {
            if (errno == ENOMEM)
                return errprintf(err, "bcast: out of memory");
            if (errno == EINVAL)
                return errprintf(err,
                                 "bcast: %s: a source without a name can "
                                 "only be shipped alone",
                                 paths[i]);
            return errprintf(err, "bcast: %s: %s", paths[i], strerror(errno));
        }
    }
    if (n < 2)
        return 0;
    if (!(sorted = malloc(n * sizeof(*sorted)))) {
        errno = ENOMEM;
        return errprintf(err, "bcast: out of memory");
    }
    for (size_t i = 0; i < n; i++)
        sorted[i] = &src[i];
    qsort(sorted, n, sizeof(*sorted), cmp_source);
    for (size_t i = 1; i < n; i++) {
        if (!strcmp(sorted[i - 1]->name, sorted[i]->name)) {
            const struct source *a = sorted[i - 1], *b = sorted[i];
            if (a > b) { /* name them in the order given */
                const struct source *t = a;
                a = b;
                b = t;
            }
            errno = EINVAL;
            errprintf(err,
                      "bcast: %s and %s would both be named '%s' in the "
                      "destination",
                      a->path, b->path, a->name);
            free(sorted);
            return -1;
        }
    }
    free(sorted);
    return 0;
}

/* Pack one checked source: its top is opened following a symbolic link,
 * nothing below it is. */
static int pack_source(struct pack *p, const struct source *s)
{
    struct stat st;
    int fd;

    p->src = s->path;
    p->name = s->name;
    rel_pop(p, 0);
    if (S_ISREG(s->st.st_mode)) {
        fd = open(s->path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0)
            return pack_fail(p, NULL);
        if (fstat(fd, &st) < 0) {
            pack_fail(p, "fstat");
            close_keep_errno(fd);
            return -1;
        }
        if (!S_ISREG(st.st_mode)) {
            close(fd);
            return refuse_type(p, st.st_mode);
        }
        return pack_file(p, fd, &st);
    }
    fd = open(s->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return pack_fail(p, NULL);
    if (fstat(fd, &st) < 0) {
        pack_fail(p, "fstat");
        close_keep_errno(fd);
        return -1;
    }
    return pack_dir(p, fd, &st);
}

int bcast_tree_pack(int fd,
                    const char *const *paths,
                    size_t n,
                    eddy_error_t *err)
{
    struct pack p = {.fd = fd, .err = err};
    struct source *src = NULL;
    int rc = -1;

    if (fd < 0 || !paths || n == 0) {
        errno = EINVAL;
        return errprintf(err, "bcast: pack: invalid argument");
    }
    if (!(src = calloc(n, sizeof(*src)))) {
        errno = ENOMEM;
        return errprintf(err, "bcast: out of memory");
    }
    if (check_sources(src, paths, n, err) < 0)
        goto done;
    if (!(p.buf = malloc(BLOCK_SIZE)) || !(p.e = archive_entry_new()) ||
        !(p.aw = archive_write_new())) {
        errno = ENOMEM;
        errprintf(err, "bcast: out of memory");
        goto done;
    }
    /* pax, not "restricted" pax: hdrcharset=BINARY (names as raw bytes)
     * puts a pax header before every entry anyway, and there it costs
     * nothing to keep the mtime's nanoseconds too.  No padding after the
     * end-of-archive marker. */
    if (archive_write_set_format_pax(p.aw) != ARCHIVE_OK ||
        archive_write_set_format_option(p.aw, NULL, "hdrcharset", "BINARY") !=
            ARCHIVE_OK ||
        archive_write_add_filter_none(p.aw) != ARCHIVE_OK ||
        archive_write_set_bytes_per_block(p.aw, BLOCK_SIZE) != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(p.aw, 1) != ARCHIVE_OK ||
        archive_write_open2(p.aw, &p, NULL, write_cb, NULL, NULL) !=
            ARCHIVE_OK) {
        errno = arc_errno(p.aw, EINVAL);
        errprintf(err, "bcast: pack: %s", arc_msg(p.aw));
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        if (pack_source(&p, &src[i]) < 0)
            goto done;
    }
    if (archive_write_close(p.aw) != ARCHIVE_OK) {
        errno = arc_errno(p.aw, EIO);
        errprintf(err, "bcast: pack: %s", arc_msg(p.aw));
        goto done;
    }
    if (check_write(&p) < 0)
        goto done;
    rc = 0;
done:
    if (p.aw) {
        int saved_errno = errno;
        p.discard = true; /* free() closes, and would end the archive */
        archive_write_free(p.aw);
        errno = saved_errno;
    }
    archive_entry_free(p.e);
    for (size_t i = 0; i < n; i++)
        free(src[i].name);
    free(src);
    free(p.buf);
    free(p.rel);
    free(p.ename);
    return rc;
}

/* ------------------------------------------------------------- extract */

struct extract {
    const char *dest; /* as given, for messages */
    char *parent;     /* dest's directory */
    char *name;       /* dest's last component */
    int pfd;          /* the parent (O_PATH) */
    char *tmpname;    /* the temp directory in pfd; NULL if none */
    int tfd;          /* the temp directory */
    char *tmpabs;     /* its absolute, symlink-free path */
    mode_t defmode;   /* 0777 & ~umask, as mkdir applied it */
    bool overwrite, preserve;
    bool root;       /* the archive has a "." entry: */
    mode_t rootmode; /* its mode */
    int64_t rootmtime;
    long rootnsec;
    int afd; /* the archive */
    struct archive *ar, *aw;
    char *path; /* scratch: tmpabs/NAME */
    size_t pathcap;
    char *rel; /* scratch: a normalised entry name */
    size_t relcap;
    eddy_error_t *err;
};

/* Split x->dest into parent and name; open the parent. */
static int open_parent(struct extract *x)
{
    const char *d = x->dest;
    size_t len = strlen(d);
    const char *slash;

    if (d[len - 1] == '/') {
        errno = EINVAL;
        return errprintf(x->err,
                         "bcast: destination '%s' ends with '/': give the "
                         "directory's name",
                         d);
    }
    slash = strrchr(d, '/');
    x->name = strdup(slash ? slash + 1 : d);
    if (slash == d)
        x->parent = strdup("/");
    else if (slash)
        x->parent = strndup(d, (size_t)(slash - d));
    else
        x->parent = strdup(".");
    if (!x->name || !x->parent) {
        errno = ENOMEM;
        return errprintf(x->err, "bcast: out of memory");
    }
    if (!strcmp(x->name, ".") || !strcmp(x->name, "..")) {
        errno = EINVAL;
        return errprintf(x->err, "bcast: destination '%s' must end with a name",
                         d);
    }
    x->pfd = open(x->parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (x->pfd < 0)
        return errprintf(x->err, "bcast: %s: directory %s: %s", d, x->parent,
                         strerror(errno));
    return 0;
}

/* Refuse an archive without its end-of-archive marker: libarchive, like
 * tar, takes an archive cut between two entries for a complete one. */
static int check_tail(struct extract *x, const char *archive)
{
    unsigned char tail[TAR_END_SIZE];
    struct stat st;
    ssize_t n;

    if (fstat(x->afd, &st) < 0)
        return errprintf(x->err, "bcast: %s: %s", archive, strerror(errno));
    if (!S_ISREG(st.st_mode)) {
        errno = EINVAL;
        return errprintf(x->err, "bcast: %s: not a regular file", archive);
    }
    if (st.st_size < TAR_END_SIZE || st.st_size % 512 != 0)
        goto bad;
    do {
        n = pread(x->afd, tail, sizeof(tail), st.st_size - TAR_END_SIZE);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return errprintf(x->err, "bcast: %s: read: %s", archive,
                         strerror(errno));
    if (n != TAR_END_SIZE)
        goto bad;
    for (size_t i = 0; i < sizeof(tail); i++) {
        if (tail[i])
            goto bad;
    }
    return 0;
bad:
    errno = EPROTO;
    return errprintf(x->err,
                     "bcast: %s: truncated or not an archive (no "
                     "end-of-archive marker)",
                     archive);
}

/* Make the temp directory beside dest, and learn its absolute path. */
static int make_temp(struct extract *x)
{
    struct stat st, st2;
    char *real = NULL;
    size_t sz;

    for (int i = 0; i < TEMPNAME_TRIES; i++) {
        free(x->tmpname);
        if (!(x->tmpname = tempname_create(x->name))) {
            errno = ENOMEM;
            return errprintf(x->err, "bcast: out of memory");
        }
        /* 0777 so that mkdir applies the umask (and a default ACL): the
         * result is the mode a directory gets here without PRESERVE */
        if (mkdirat(x->pfd, x->tmpname, 0777) == 0)
            break;
        if (errno != EEXIST || i == TEMPNAME_TRIES - 1) {
            int e = errno;
            free(x->tmpname);
            x->tmpname = NULL;
            errno = e;
            return errprintf(x->err,
                             "bcast: %s: cannot create a temp "
                             "directory: %s",
                             x->dest, strerror(errno));
        }
    }
    x->tfd = openat(x->pfd, x->tmpname,
                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (x->tfd < 0 || fstat(x->tfd, &st) < 0)
        return errprintf(x->err, "bcast: %s: temp directory: %s", x->dest,
                         strerror(errno));
    x->defmode = st.st_mode & 07777;
    /* nobody else looks in while it fills */
    if (fchmod(x->tfd, 0700) < 0)
        return errprintf(x->err, "bcast: %s: temp directory: chmod: %s",
                         x->dest, strerror(errno));
    if (!(real = realpath(x->parent, NULL)))
        return errprintf(x->err, "bcast: %s: realpath %s: %s", x->dest,
                         x->parent, strerror(errno));
    sz = strlen(real) + 1 + strlen(x->tmpname) + 1;
    if (!(x->tmpabs = malloc(sz))) {
        free(real);
        errno = ENOMEM;
        return errprintf(x->err, "bcast: out of memory");
    }
    snprintf(x->tmpabs, sz, "%s/%s", strcmp(real, "/") ? real : "", x->tmpname);
    free(real);
    /* the path must lead to the directory we made and hold open */
    if (lstat(x->tmpabs, &st2) < 0 || st2.st_dev != st.st_dev ||
        st2.st_ino != st.st_ino) {
        errno = ESTALE;
        return errprintf(x->err,
                         "bcast: %s: the temp directory moved during the "
                         "extraction",
                         x->dest);
    }
    return 0;
}

/* Normalise an entry name into x->rel: no leading "./", no empty or "."
 * components, no trailing '/'.  "" is the top.  Refuses absolute names
 * and '..' components (EINVAL). */
static int normalise(struct extract *x, const char *name)
{
    char q[NAME_QUOTE_MAX + 8];
    size_t len = strlen(name), out = 0;
    const char *p = name;

    quote_token(q, sizeof(q), name, len, NAME_QUOTE_MAX);
    if (name[0] == '/') {
        errno = EINVAL;
        return errprintf(x->err, "bcast: %s: entry '%s' has an absolute name",
                         x->dest, q);
    }
    if (grow(&x->rel, &x->relcap, len + 1) < 0)
        return errprintf(x->err, "bcast: out of memory");
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            errno = EINVAL;
            return errprintf(x->err,
                             "bcast: %s: entry '%s' has a '..' component",
                             x->dest, q);
        }
        if (n > 0 && !(n == 1 && p[0] == '.')) {
            if (out)
                x->rel[out++] = '/';
            memcpy(x->rel + out, p, n);
            out += n;
        }
        p += n;
        while (*p == '/')
            p++;
    }
    x->rel[out] = '\0';
    return 0;
}

/* Check that the directories on the way to x->rel are directories, below
 * the temp directory, none of them a symbolic link.  Those that do not
 * exist yet will be made by the writer, as directories. */
static int check_beneath(struct extract *x)
{
    char q[NAME_QUOTE_MAX + 8];
    char *s = x->rel, *slash;
    int cur = x->tfd, nfd, e = 0;
    bool link = false;

    while ((slash = strchr(s, '/'))) {
        struct stat st;

        *slash = '\0';
        nfd = openat(cur, s, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0) {
            e = errno;
            /* O_NOFOLLOW|O_DIRECTORY on a link: ENOTDIR (or ELOOP) */
            link = (e == ENOTDIR || e == ELOOP) &&
                   fstatat(cur, s, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                   S_ISLNK(st.st_mode);
        }
        *slash = '/';
        if (nfd < 0)
            break;
        if (cur != x->tfd)
            close(cur);
        cur = nfd;
        s = slash + 1;
    }
    if (cur != x->tfd)
        close(cur);
    if (e == 0 || e == ENOENT) /* the writer makes what is missing */
        return 0;
    quote_token(q, sizeof(q), x->rel, strlen(x->rel), NAME_QUOTE_MAX);
    if (link) {
        errno = EINVAL;
        return errprintf(x->err,
                         "bcast: %s: entry '%s' goes through a symbolic link",
                         x->dest, q);
    }
    errno = e == ENOTDIR ? EINVAL : e;
    return errprintf(x->err, "bcast: %s: entry '%s': %s", x->dest, q,
                     strerror(e));
}

/* Fail with the error of libarchive object 'a' about entry x->rel. */
static int entry_fail(struct extract *x, struct archive *a, int dflt)
{
    char q[NAME_QUOTE_MAX + 8];
    int e = arc_errno(a, dflt);

    quote_token(q, sizeof(q), x->rel ? x->rel : "", x->rel ? strlen(x->rel) : 0,
                NAME_QUOTE_MAX);
    errprintf(x->err, "bcast: %s: entry '%s': %s", x->dest, q, arc_msg(a));
    errno = e;
    return -1;
}

static int read_fail(struct extract *x, const char *archive)
{
    int e = arc_errno(x->ar, EPROTO);

    errprintf(x->err, "bcast: %s: archive %s: %s", x->dest, archive,
              arc_msg(x->ar));
    errno = e;
    return -1;
}

/* Copy the data of the current entry from the reader to the writer. */
static int copy_data(struct extract *x, const char *archive)
{
    const void *buf;
    size_t size;
    la_int64_t off;
    int r;

    for (;;) {
        r = archive_read_data_block(x->ar, &buf, &size, &off);
        if (r == ARCHIVE_EOF)
            return 0;
        if (r != ARCHIVE_OK)
            return read_fail(x, archive);
        if (archive_write_data_block(x->aw, buf, size, off) < ARCHIVE_OK)
            return entry_fail(x, x->aw, EIO);
    }
}

/* Extract one entry (already read). */
static int extract_entry(struct extract *x,
                         struct archive_entry *e,
                         const char *archive)
{
    char q[NAME_QUOTE_MAX + 8];
    const char *name = archive_entry_pathname(e);
    mode_t type = archive_entry_filetype(e);
    mode_t perm = archive_entry_perm(e);
    size_t need;

    if (!name) {
        errno = EINVAL;
        return errprintf(x->err, "bcast: %s: an entry without a name", x->dest);
    }
    if (normalise(x, name) < 0)
        return -1;
    quote_token(q, sizeof(q), x->rel, strlen(x->rel), NAME_QUOTE_MAX);
    if (archive_entry_hardlink(e)) {
        errno = EINVAL;
        return errprintf(x->err,
                         "bcast: %s: entry '%s' is a hard link: not "
                         "supported",
                         x->dest, q);
    }
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
        errno = EINVAL;
        return errprintf(x->err, "bcast: %s: entry '%s' is %s: not supported",
                         x->dest, q, type_name(type));
    }
    if (!*x->rel) { /* the top: applied to the temp directory at the end */
        if (type != AE_IFDIR) {
            quote_token(q, sizeof(q), name, strlen(name), NAME_QUOTE_MAX);
            errno = EINVAL;
            return errprintf(x->err,
                             "bcast: %s: entry '%s' names the destination "
                             "itself but is not a directory",
                             x->dest, q);
        }
        x->root = true;
        x->rootmode = perm;
        x->rootmtime = archive_entry_mtime(e);
        x->rootnsec = archive_entry_mtime_nsec(e);
        return 0;
    }
    if (check_beneath(x) < 0)
        return -1;
    need = strlen(x->tmpabs) + 1 + strlen(x->rel) + 1;
    if (grow(&x->path, &x->pathcap, need) < 0)
        return errprintf(x->err, "bcast: out of memory");
    snprintf(x->path, x->pathcap, "%s/%s", x->tmpabs, x->rel);
    archive_entry_copy_pathname(e, x->path);
    if (!x->preserve) {
        /* the writer takes the umask off */
        if (type == AE_IFDIR)
            archive_entry_set_perm(e, 0777);
        else if (type == AE_IFREG)
            archive_entry_set_perm(e, (perm & 0111) ? 0777 : 0666);
    }
    if (archive_write_header(x->aw, e) != ARCHIVE_OK)
        return entry_fail(x, x->aw, EINVAL);
    if (type == AE_IFREG && copy_data(x, archive) < 0)
        return -1;
    if (archive_write_finish_entry(x->aw) != ARCHIVE_OK)
        return entry_fail(x, x->aw, EIO);
    return 0;
}

static int extract_all(struct extract *x, const char *archive)
{
    struct archive_entry *e;
    int flags =
        ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT;
    int r;

    if (x->preserve)
        flags |= ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME;
    if (!(x->ar = archive_read_new()) || !(x->aw = archive_write_disk_new())) {
        errno = ENOMEM;
        return errprintf(x->err, "bcast: out of memory");
    }
    if (archive_read_support_format_tar(x->ar) != ARCHIVE_OK ||
        archive_write_disk_set_options(x->aw, flags) != ARCHIVE_OK ||
        archive_read_open_fd(x->ar, x->afd, BLOCK_SIZE) != ARCHIVE_OK)
        return read_fail(x, archive);
    for (;;) {
        if (x->rel) /* a read error names no entry */
            x->rel[0] = '\0';
        r = archive_read_next_header(x->ar, &e);
        if (r == ARCHIVE_EOF)
            break;
        /* a warning too: the packer's archives have none */
        if (r != ARCHIVE_OK)
            return read_fail(x, archive);
        if (extract_entry(x, e, archive) < 0)
            return -1;
    }
    /* applies the deferred directory modes and times */
    if (archive_write_close(x->aw) != ARCHIVE_OK) {
        int e2 = arc_errno(x->aw, EIO);
        errprintf(x->err, "bcast: %s: %s", x->dest, arc_msg(x->aw));
        errno = e2;
        return -1;
    }
    return 0;
}

/* The temp directory's own mode and mtime. */
static int finish_top(struct extract *x)
{
    mode_t mode = x->preserve && x->root ? x->rootmode & 07777 : x->defmode;

    if (fchmod(x->tfd, mode) < 0)
        return errprintf(x->err, "bcast: %s: chmod: %s", x->dest,
                         strerror(errno));
    if (x->preserve && x->root) {
        struct timespec ts[2] = {
            {.tv_sec = 0, .tv_nsec = UTIME_OMIT},
            {.tv_sec = (time_t)x->rootmtime, .tv_nsec = x->rootnsec},
        };
        if (futimens(x->tfd, ts) < 0)
            return errprintf(x->err, "bcast: %s: set mtime: %s", x->dest,
                             strerror(errno));
    }
    return 0;
}

/* Remove the old dest, now called 'name' in the parent: a tree (never
 * following a link in it), or anything else.  On failure, 'dest' already
 * is the new tree: say where the rest of the old one is. */
static int remove_old(struct extract *x, const char *name)
{
    eddy_error_t e2 = {{0}};
    struct stat st;

    if (fstatat(x->pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        (S_ISDIR(st.st_mode) ? rmtree_at(x->pfd, name, &e2)
                             : unlinkat(x->pfd, name, 0)) == 0)
        return 0;
    if (!e2.text[0])
        snprintf(e2.text, sizeof(e2.text), "%s", strerror(errno));
    return errprintf(x->err,
                     "bcast: %s was replaced, but the old one is left in "
                     "%s/%s: %s",
                     x->dest, x->parent, name, e2.text);
}

/* Without RENAME_EXCHANGE: move the old dest aside, the new one in, then
 * remove the old one. */
static int replace_fallback(struct extract *x)
{
    char *aside = NULL;
    int rc = -1;

    for (int i = 0; i < TEMPNAME_TRIES; i++) {
        struct stat st;

        free(aside);
        if (!(aside = tempname_create(x->name))) {
            errno = ENOMEM;
            return errprintf(x->err, "bcast: out of memory");
        }
        if (fstatat(x->pfd, aside, &st, AT_SYMLINK_NOFOLLOW) < 0 &&
            errno == ENOENT)
            break;
    }
    if (renameat(x->pfd, x->name, x->pfd, aside) < 0) {
        if (errno == ENOENT) { /* gone meanwhile: nothing to replace */
            if (renameat(x->pfd, x->tmpname, x->pfd, x->name) < 0) {
                errprintf(x->err, "bcast: %s: rename: %s", x->dest,
                          strerror(errno));
                goto done;
            }
            free(x->tmpname);
            x->tmpname = NULL;
            rc = 0;
            goto done;
        }
        errprintf(x->err, "bcast: %s: rename: %s", x->dest, strerror(errno));
        goto done;
    }
    if (renameat(x->pfd, x->tmpname, x->pfd, x->name) < 0) {
        int e = errno;
        (void)renameat(x->pfd, aside, x->pfd, x->name);
        errno = e;
        errprintf(x->err, "bcast: %s: rename: %s", x->dest, strerror(errno));
        goto done;
    }
    free(x->tmpname);
    x->tmpname = NULL; /* in place: no longer ours to remove */
    rc = remove_old(x, aside);
done:
    free(aside);
    return rc;
}

/* Rename the temp directory to dest. */
static int install(struct extract *x)
{
    if (!x->overwrite) {
        if (renameat2(x->pfd, x->tmpname, x->pfd, x->name, RENAME_NOREPLACE) ==
            0)
            goto installed;
        if (errno == EINVAL || errno == ENOSYS) {
            /* no RENAME_NOREPLACE here: check, then rename; an empty
             * directory appearing in between would be replaced */
            struct stat st;
            if (fstatat(x->pfd, x->name, &st, AT_SYMLINK_NOFOLLOW) == 0)
                errno = EEXIST;
            else if (errno == ENOENT &&
                     renameat(x->pfd, x->tmpname, x->pfd, x->name) == 0)
                goto installed;
        }
        if (errno == EEXIST || errno == ENOTEMPTY) {
            errno = EEXIST;
            return errprintf(x->err, "bcast: %s already exists", x->dest);
        }
        return errprintf(x->err, "bcast: %s: rename: %s", x->dest,
                         strerror(errno));
    }
    for (int tries = 0; tries < 8; tries++) {
        if (renameat2(x->pfd, x->tmpname, x->pfd, x->name, RENAME_EXCHANGE) ==
            0) {
            /* the old tree is under the temp name now */
            int rc = remove_old(x, x->tmpname);
            free(x->tmpname);
            x->tmpname = NULL;
            return rc;
        }
        if (errno == EINVAL || errno == ENOSYS)
            return replace_fallback(x);
        if (errno != ENOENT)
            return errprintf(x->err, "bcast: %s: rename: %s", x->dest,
                             strerror(errno));
        /* no dest to exchange with: a plain rename, unless one appears */
        if (renameat2(x->pfd, x->tmpname, x->pfd, x->name, RENAME_NOREPLACE) ==
            0)
            goto installed;
        if (errno == EINVAL || errno == ENOSYS)
            return replace_fallback(x);
        if (errno != EEXIST)
            return errprintf(x->err, "bcast: %s: rename: %s", x->dest,
                             strerror(errno));
    }
    errno = EBUSY;
    return errprintf(x->err, "bcast: %s keeps appearing and vanishing",
                     x->dest);
installed:
    free(x->tmpname);
    x->tmpname = NULL;
    return 0;
}

/* Free everything; remove the temp directory if it is still ours.  Keeps
 * errno. */
static void extract_release(struct extract *x)
{
    int saved_errno = errno;

    archive_read_free(x->ar);
    /* after a failure too, free() closes the writer, which applies the
     * deferred directory modes to the temp tree before it is removed
     * (archive_write_fail() would leak them, in libarchive 3.6) */
    archive_write_free(x->aw);
    if (x->tfd >= 0)
        close(x->tfd);
    if (x->tmpname)
        (void)rmtree_at(x->pfd, x->tmpname, NULL);
    if (x->afd >= 0)
        close(x->afd);
    if (x->pfd >= 0)
        close(x->pfd);
    free(x->tmpname);
    free(x->tmpabs);
    free(x->parent);
    free(x->name);
    free(x->path);
    free(x->rel);
    errno = saved_errno;
}

int bcast_tree_extract(const char *archive,
                       const char *dest,
                       bool overwrite,
                       bool preserve,
                       eddy_error_t *err)
{
    struct extract x = {
        .dest = dest,
        .pfd = -1,
        .tfd = -1,
        .afd = -1,
        .overwrite = overwrite,
        .preserve = preserve,
        .err = err,
    };
    struct stat st;
    int rc = -1;

    if (!archive || !*archive || !dest || !*dest) {
        errno = EINVAL;
        return errprintf(err, "bcast: extract: invalid argument");
    }
    if (open_parent(&x) < 0)
        goto done;
    if (fstatat(x.pfd, x.name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!overwrite) {
            errno = EEXIST;
            errprintf(err, "bcast: %s already exists", dest);
            goto done;
        }
    } else if (errno != ENOENT) {
        errprintf(err, "bcast: %s: %s", dest, strerror(errno));
        goto done;
    }
    if ((x.afd = open(archive, O_RDONLY | O_CLOEXEC)) < 0) {
        errprintf(err, "bcast: archive %s: %s", archive, strerror(errno));
        goto done;
    }
    if (check_tail(&x, archive) < 0 || make_temp(&x) < 0 ||
        extract_all(&x, archive) < 0 || finish_top(&x) < 0 || install(&x) < 0)
        goto done;
    rc = 0;
done:
    extract_release(&x);
    return rc;
}
