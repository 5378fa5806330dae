/* rmtree.c - remove a directory tree without following symlinks out of it.
 *
 * The walk keeps a stack of levels (the top directory, then each
 * directory being emptied below it).  Only the deepest RMTREE_OPEN_MAX
 * levels keep their directory stream open; an ancestor whose stream was
 * closed is reopened through ".." of its child when the walk climbs back,
 * and must still be the same directory (device and inode), so a directory
 * moved during the walk stops it instead of sending it elsewhere.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/common/errprintf.h"
#include "src/common/rmtree.h"

#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

struct level {
    DIR *d; /* NULL while closed (not among the deepest levels) */
    dev_t dev;
    ino_t ino;
    char *name; /* in its parent; NULL for the top */
    unsigned rescans;
};

struct walk {
    int dirfd;
    const char *top;
    struct level *lv;
    size_t n, cap;
    size_t nopen; /* the open levels are always the deepest ones */
    eddy_error_t *err;
};

/* "TOP/a/b/ENTRY" for messages; the middle of a deep path is elided. */
static void describe(const struct walk *w,
                     const char *entry,
                     char *buf,
                     size_t size)
{
    size_t len, first = 1;

    snprintf(buf, size, "%s", w->top);
    if (w->n > 4) {
        first = w->n - 3;
        len = strlen(buf);
        snprintf(buf + len, size - len, "/...");
    }
    for (size_t i = first; i < w->n; i++) {
        len = strlen(buf);
        snprintf(buf + len, size - len, "/%s", w->lv[i].name);
    }
    if (entry) {
        len = strlen(buf);
        snprintf(buf + len, size - len, "/%s", entry);
    }
}

/* Fill w->err with "PATH: CALL: strerror(errno)"; errno is kept. */
static int fail(struct walk *w, const char *entry, const char *call)
{
    char path[320];

    describe(w, entry, path, sizeof(path));
    return errprintf(w->err, "%s: %s: %s", path, call, strerror(errno));
}

/* Open directory 'name' under 'at' without following a symlink, and make
 * sure we may empty it (we own it: a task may have left it 0500 or 0000;
 * for root the mode does not matter, and if we may not change it the
 * unlinks below will say so). */
static int open_dir(int at, const char *name, struct stat *st)
{
    struct stat s;
    int fd = openat(at, name, DIR_FLAGS);

    if (fd < 0 && errno == EACCES) {
        /* not readable: checked to be a directory, not a symlink, first */
        if (fstatat(at, name, &s, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISDIR(s.st_mode) && fchmodat(at, name, 0700, 0) == 0)
            fd = openat(at, name, DIR_FLAGS);
        else
            errno = EACCES;
    }
    if (fd < 0)
        return -1;
    if (fstat(fd, st) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    if ((st->st_mode & 0700) != 0700)
        (void)fchmod(fd, (st->st_mode & 07777) | 0700);
    return fd;
}

/* Push the directory open on 'fd' (taken, also on failure) as the new
 * deepest level; 'name' (taken) is its name in the current top. */
static int push(struct walk *w, int fd, const struct stat *st, char *name)
{
    struct level *lv;
    DIR *d;

    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        if (!(lv = realloc(w->lv, cap * sizeof(*lv))))
            goto nomem;
        w->lv = lv;
        w->cap = cap;
    }
    if (!(d = fdopendir(fd)))
        goto nomem;
    w->lv[w->n++] = (struct level){
        .d = d, .dev = st->st_dev, .ino = st->st_ino, .name = name};
    /* keep only the deepest RMTREE_OPEN_MAX open */
    if (++w->nopen > RMTREE_OPEN_MAX) {
        struct level *old = &w->lv[w->n - w->nopen];
        closedir(old->d);
        old->d = NULL;
        w->nopen--;
    }
    return 0;
nomem:
    close(fd);
    free(name);
    errno = ENOMEM;
    return errprintf(w->err, "%s: out of memory", w->top);
}

/* Reopen the stream of level n-2 (closed) through ".." of level n-1. */
static int reopen_parent(struct walk *w)
{
    struct level *child = &w->lv[w->n - 1];
    struct level *parent = &w->lv[w->n - 2];
    struct stat st;
    int fd;

    if ((fd = openat(dirfd(child->d), "..", DIR_FLAGS)) < 0)
        return fail(w, NULL, "openat ..");
    if (fstat(fd, &st) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return fail(w, NULL, "fstat ..");
    }
    if (st.st_dev != parent->dev || st.st_ino != parent->ino) {
        close(fd);
        errno = ESTALE;
        return fail(w, NULL, "its parent was moved during the removal");
    }
    if (!(parent->d = fdopendir(fd))) {
        close(fd);
        errno = ENOMEM;
        return fail(w, NULL, "fdopendir");
    }
    w->nopen++;
    return 0;
}

/* The deepest level is empty: remove it and climb back to its parent
 * (or, at the top, remove the top).  A directory that is not empty
 * anymore is scanned again instead. */
static int pop(struct walk *w)
{
    struct level *top = &w->lv[w->n - 1];
    int at = w->dirfd;
    const char *name = w->top;

    if (w->n > 1) {
        if (!w->lv[w->n - 2].d && reopen_parent(w) < 0)
            return -1;
        at = dirfd(w->lv[w->n - 2].d);
        name = top->name;
    }
    if (unlinkat(at, name, AT_REMOVEDIR) < 0) {
        if (errno != ENOTEMPTY && errno != EEXIST)
            return fail(w, NULL, "rmdir");
        if (++top->rescans > RMTREE_RESCAN_MAX) {
            errno = ENOTEMPTY;
            return fail(w, NULL, "still filling up while being removed");
        }
        rewinddir(top->d);
        return 0;
    }
    closedir(top->d);
    free(top->name);
    w->n--;
    w->nopen--;
    return 0;
}

/* Remove one entry of the deepest level: unlink it, or descend into it
 * if it is a directory with something in it. */
static int remove_entry(struct walk *w, const struct dirent *e)
{
    struct level *top = &w->lv[w->n - 1];
    int at = dirfd(top->d);
    struct stat st;
    char *name;
    int fd;

    if (e->d_type != DT_DIR) {
        int errnum;

        if (unlinkat(at, e->d_name, 0) == 0 || errno == ENOENT)
            return 0;
        /* Linux says EISDIR for a directory; POSIX allows EPERM */
        errnum = errno;
        if (errnum == EPERM &&
            fstatat(at, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISDIR(st.st_mode))
            errnum = EISDIR;
        if (errnum != EISDIR) {
            errno = errnum;
            return fail(w, e->d_name, "unlink");
        }
    }
    /* a directory: most are empty by now */
    if (unlinkat(at, e->d_name, AT_REMOVEDIR) == 0 || errno == ENOENT)
        return 0;
    if (errno != ENOTEMPTY && errno != EEXIST && errno != EACCES)
        return fail(w, e->d_name, "rmdir");
    if ((fd = open_dir(at, e->d_name, &st)) < 0)
        return fail(w, e->d_name, "open");
    if (st.st_dev != top->dev) {
        close(fd);
        errno = EXDEV;
        return fail(w, e->d_name, "a mount point: not entered");
    }
    if (!(name = strdup(e->d_name))) {
        close(fd);
        errno = ENOMEM;
        return fail(w, e->d_name, "strdup");
    }
    return push(w, fd, &st, name);
}

int rmtree_at(int dirfd, const char *name, eddy_error_t *err)
{
    struct walk w = {.dirfd = dirfd, .top = name, .err = err};
    struct stat st;
    struct dirent *e;
    int fd, rc = -1;

    if (!name || !*name) {
        errno = EINVAL;
        return errprintf(err, "rmtree: no path given");
    }
    if ((fd = open_dir(dirfd, name, &st)) < 0)
        return errprintf(err, "%s: %s", name, strerror(errno));
    if (push(&w, fd, &st, NULL) < 0)
        goto done;
    while (w.n > 0) {
        struct level *top = &w.lv[w.n - 1];

        errno = 0;
        if (!(e = readdir(top->d))) {
            if (errno) {
                fail(&w, NULL, "readdir");
                goto done;
            }
            if (pop(&w) < 0)
                goto done;
            continue;
        }
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (remove_entry(&w, e) < 0)
            goto done;
    }
    rc = 0;
done:
    if (rc < 0) {
        int saved = errno;
        for (size_t i = 0; i < w.n; i++) {
            if (w.lv[i].d)
                closedir(w.lv[i].d);
            free(w.lv[i].name);
        }
        errno = saved;
    }
    free(w.lv);
    return rc;
}

int rmtree(const char *path, eddy_error_t *err)
{
    return rmtree_at(AT_FDCWD, path, err);
}
