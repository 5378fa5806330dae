/* test_bcast_tree.c - unit tests for src/common/bcast_tree.c
 *
 * Real trees in a mkdtemp directory: pack, extract, and compare what
 * lands on disk with the source (types, bytes, link targets, modes,
 * mtimes).  Then the refusals (same names, fifos, unreadable files, an
 * existing destination, crafted archives that try to escape, truncated
 * archives), each checking the error and what is left behind: never a
 * temp directory, never a partial destination, nothing outside.
 *
 * The rename tests run twice: once as they are, and once in a child
 * process where a seccomp filter makes renameat2() with flags fail with
 * EINVAL, as on a file system without RENAME_NOREPLACE/RENAME_EXCHANGE.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/common/bcast_tree.h"
#include "src/common/rmtree.h"

static char base[256];    /* the mkdtemp directory of these tests */
static char src[300];     /* BASE/src: the trees to pack */
static char out[300];     /* BASE/out: where destinations go */
static char outside[300]; /* BASE/outside: must never be written */
static char arc[300];     /* BASE/archive */

/* Remove a tree the tests made, directories of mode 0500 or 0000
 * included (so, not with nftw: it cannot empty those as a user). */
static int rm_tree(const char *p)
{
    if (rmtree(p, NULL) == 0 || errno == ENOENT)
        return 0;
    return -1;
}

static int make_dirs(void)
{
    return mkdir(src, 0700) || mkdir(out, 0700) || mkdir(outside, 0700) ? -1
                                                                        : 0;
}

static int setup(void **state)
{
    const char *t = getenv("TMPDIR");

    t = t && *t ? t : "/tmp";
    snprintf(base, sizeof(base), "%s/test_bcast_tree.XXXXXX", t);
    if (!mkdtemp(base))
        return -1;
    snprintf(src, sizeof(src), "%s/src", base);
    snprintf(out, sizeof(out), "%s/out", base);
    snprintf(outside, sizeof(outside), "%s/outside", base);
    snprintf(arc, sizeof(arc), "%s/archive", base);
    return make_dirs();
}

static int teardown(void **state)
{
    return rm_tree(base);
}

/* Empty the directories between tests. */
static int clean(void **state)
{
    char nobody[300];

    snprintf(nobody, sizeof(nobody), "%s/nobody", base);
    if (rm_tree(src) || rm_tree(out) || rm_tree(outside) || rm_tree(nobody))
        return -1;
    (void)unlink(arc);
    return make_dirs();
}

static void pathf(char *buf, size_t sz, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pathf(char *buf, size_t sz, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sz, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < sz);
}

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)x;
    }
}

static void write_file(const char *path, const void *data, size_t n, mode_t m)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    assert_true(fd >= 0);
    if (n > 0)
        assert_int_equal(write(fd, data, n), (ssize_t)n);
    assert_int_equal(fchmod(fd, m), 0);
    assert_int_equal(close(fd), 0);
}

static void put(const char *dir, const char *name, const char *s, mode_t m)
{
    char p[PATH_MAX];

    pathf(p, sizeof(p), "%s/%s", dir, name);
    write_file(p, s, strlen(s), m);
}

static void set_mtime(const char *path, time_t sec)
{
    struct timespec ts[2] = {{.tv_sec = sec, .tv_nsec = 0},
                             {.tv_sec = sec, .tv_nsec = 123456789}};

    assert_int_equal(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}

/* Pack 'n' paths into the archive file; returns pack's result with errno
 * kept. */
static int pack(const char *const *paths, size_t n, eddy_error_t *err)
{
    int fd = open(arc, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int rc, e;

    assert_true(fd >= 0);
    rc = bcast_tree_pack(fd, paths, n, err);
    e = errno;
    assert_int_equal(close(fd), 0);
    errno = e;
    return rc;
}

static void pack_ok(const char *const *paths, size_t n)
{
    eddy_error_t err = {{0}};

    if (pack(paths, n, &err) < 0)
        fail_msg("pack: %s", err.text);
}

static void extract_ok(const char *dest, bool overwrite, bool preserve)
{
    eddy_error_t err = {{0}};

    if (bcast_tree_extract(arc, dest, overwrite, preserve, &err) < 0)
        fail_msg("extract %s: %s", dest, err.text);
}

static off_t file_size(const char *path)
{
    struct stat st;

    assert_int_equal(stat(path, &st), 0);
    return st.st_size;
}

/* Entries of 'dir' (not . and ..); those whose name has ".eddy-" in
 * '*temps'. */
static int count_entries(const char *dir, int *temps)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    assert_non_null(d);
    if (temps)
        *temps = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        n++;
        if (temps && strstr(e->d_name, ".eddy-"))
            (*temps)++;
    }
    closedir(d);
    return n;
}

/* 'out' holds exactly 'n' entries and no temp directory. */
static void assert_out_holds(int n)
{
    int temps;

    assert_int_equal(count_entries(out, &temps), n);
    assert_int_equal(temps, 0);
}

static bool exists(const char *path)
{
    struct stat st;

    return lstat(path, &st) == 0;
}

static void cmp_files(const char *a, const char *b)
{
    unsigned char x[8192], y[8192];
    int fa = open(a, O_RDONLY | O_CLOEXEC), fb = open(b, O_RDONLY | O_CLOEXEC);
    ssize_t na, nb;

    assert_true(fa >= 0 && fb >= 0);
    do {
        na = read(fa, x, sizeof(x));
        nb = read(fb, y, sizeof(y));
        if (na != nb || (na > 0 && memcmp(x, y, (size_t)na)))
            fail_msg("%s and %s differ", a, b);
    } while (na > 0);
    close(fa);
    close(fb);
}

/* Recursively compare 'a' (source) with 'b' (copy): the same names and
 * types, bytes, link targets; with 'meta', the same modes and mtimes (but
 * a symlink's) too.  Returns the number of objects compared. */
static int cmp_tree(const char *a, const char *b, bool meta)
{
    struct stat sa, sb;
    int n = 1;

    assert_int_equal(lstat(a, &sa), 0);
    if (lstat(b, &sb) < 0)
        fail_msg("%s missing (for %s)", b, a);
    if ((sa.st_mode & S_IFMT) != (sb.st_mode & S_IFMT))
        fail_msg("%s and %s differ in type", a, b);
    if (meta && !S_ISLNK(sa.st_mode)) {
        if ((sa.st_mode & 07777) != (sb.st_mode & 07777))
            fail_msg("%s: mode %o, want %o", b, sb.st_mode & 07777,
                     sa.st_mode & 07777);
        if (sa.st_mtim.tv_sec != sb.st_mtim.tv_sec ||
            sa.st_mtim.tv_nsec != sb.st_mtim.tv_nsec)
            fail_msg("%s: mtime %ld.%09ld, want %ld.%09ld", b,
                     (long)sb.st_mtim.tv_sec, sb.st_mtim.tv_nsec,
                     (long)sa.st_mtim.tv_sec, sa.st_mtim.tv_nsec);
    }
    if (S_ISREG(sa.st_mode)) {
        assert_int_equal(sa.st_size, sb.st_size);
        cmp_files(a, b);
    } else if (S_ISLNK(sa.st_mode)) {
        char ta[PATH_MAX], tb[PATH_MAX];
        ssize_t la = readlink(a, ta, sizeof(ta));
        ssize_t lb = readlink(b, tb, sizeof(tb));
        assert_true(la > 0);
        assert_int_equal(la, lb);
        assert_memory_equal(ta, tb, (size_t)la);
    } else if (S_ISDIR(sa.st_mode)) {
        DIR *d;
        struct dirent *e;
        int na = 0;

        /* a directory of mode 0500 or 0000 must still be read */
        if (!(d = opendir(a)))
            fail_msg("opendir %s: %s", a, strerror(errno));
        while ((e = readdir(d))) {
            char pa[PATH_MAX], pb[PATH_MAX];
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            pathf(pa, sizeof(pa), "%s/%s", a, e->d_name);
            pathf(pb, sizeof(pb), "%s/%s", b, e->d_name);
            n += cmp_tree(pa, pb, meta);
            na++;
        }
        closedir(d);
        assert_int_equal(count_entries(b, NULL), na);
    }
    return n;
}

static const time_t T0 = 1500000000; /* mtimes given to the source tree */

/* A tree under SRC/NAME with what the brief lists, plus a long name, a
 * name that is not UTF-8, a sparse file and a directory of mode 0500. */
static void make_tree(const char *name)
{
    char top[PATH_MAX], p[PATH_MAX], longname[200];
    unsigned char *big = malloc(1 << 20);

    assert_non_null(big);
    pathf(top, sizeof(top), "%s/%s", src, name);
    assert_int_equal(mkdir(top, 0700), 0);
    pathf(p, sizeof(p), "%s/a", top);
    assert_int_equal(mkdir(p, 0755), 0);
    pathf(p, sizeof(p), "%s/a/b", top);
    assert_int_equal(mkdir(p, 0711), 0);
    pathf(p, sizeof(p), "%s/a/b/c", top);
    assert_int_equal(mkdir(p, 0755), 0);
    put(p, "deep.txt", "deep\n", 0640);
    memset(longname, 'L', 150);
    longname[150] = '\0';
    put(p, longname, "long name\n", 0644);
    pathf(p, sizeof(p), "%s/empty_dir", top);
    assert_int_equal(mkdir(p, 0750), 0);
    put(top, "empty_file", "", 0600);
    fill(big, 1 << 20, 1);
    pathf(p, sizeof(p), "%s/big", top);
    write_file(p, big, 1 << 20, 0644);
    put(top, "tool", "#!/bin/sh\necho tool\n", 0755);
    put(top, "group_exec", "#!/bin/sh\n", 0610);
    put(top, "caf\xe9", "latin-1 name\n", 0644);
    pathf(p, sizeof(p), "%s/holey", top);
    write_file(p, "x", 1, 0644);
    assert_int_equal(truncate(p, 3 << 20), 0);
    pathf(p, sizeof(p), "%s/link_in", top);
    assert_int_equal(symlink("big", p), 0);
    pathf(p, sizeof(p), "%s/a/b/link_up", top);
    assert_int_equal(symlink("../../tool", p), 0);
    put(outside, "secret", "outside\n", 0644);
    pathf(p, sizeof(p), "%s/link_out", top);
    {
        char target[PATH_MAX];
        pathf(target, sizeof(target), "%s/secret", outside);
        assert_int_equal(symlink(target, p), 0);
    }
    pathf(p, sizeof(p), "%s/dangling", top);
    assert_int_equal(symlink("no/such/file", p), 0);
    pathf(p, sizeof(p), "%s/ro", top);
    assert_int_equal(mkdir(p, 0700), 0);
    put(p, "f", "in a read-only directory\n", 0444);
    free(big);

    /* mtimes, deepest first (making an entry changes its directory's) */
    {
        static const char *const order[] = {
            "a/b/c/deep.txt",
            "a/b/c",
            "a/b/link_up",
            "a/b",
            "a",
            "empty_dir",
            "empty_file",
            "big",
            "tool",
            "group_exec",
            "caf\xe9",
            "holey",
            "link_in",
            "link_out",
            "dangling",
            "ro/f",
        };
        for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
            pathf(p, sizeof(p), "%s/%s", top, order[i]);
            set_mtime(p, T0 + (time_t)i * 100);
        }
        pathf(p, sizeof(p), "%s/a/b/c/%s", top, longname);
        set_mtime(p, T0 + 7);
    }
    pathf(p, sizeof(p), "%s/ro", top);
    set_mtime(p, T0 + 5000);
    assert_int_equal(chmod(p, 0500), 0);
    assert_int_equal(chmod(top, 0751), 0);
    set_mtime(top, T0 + 9000);
}

/* 1 MiB file, modes, mtimes, links kept as links, empty things, with
 * PRESERVE: an exact copy, the top's mode and mtime included. */
static void test_roundtrip_preserve(void **state)
{
    char tree[PATH_MAX], dest[PATH_MAX], p[PATH_MAX], t[PATH_MAX];
    const char *paths[] = {tree};
    struct stat st;
    ssize_t n;

    make_tree("tree");
    pathf(tree, sizeof(tree), "%s/tree", src);
    pathf(dest, sizeof(dest), "%s/dest", out);
    pack_ok(paths, 1);
    /* dense: the 3 MiB hole is in the archive as zeros */
    assert_true(file_size(arc) > (4 << 20));
    extract_ok(dest, false, true);
    assert_out_holds(1);
    assert_true(cmp_tree(tree, dest, true) >= 18);

    /* the outside link is a link, kept, not followed */
    pathf(p, sizeof(p), "%s/link_out", dest);
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    n = readlink(p, t, sizeof(t) - 1);
    assert_true(n > 0);
    t[n] = '\0';
    pathf(p, sizeof(p), "%s/secret", outside);
    assert_string_equal(t, p);
    assert_int_equal(count_entries(outside, NULL), 1);
    /* the executable runs */
    pathf(p, sizeof(p), "%s/tool", dest);
    assert_int_equal(access(p, X_OK), 0);
}

/* Without PRESERVE: umask defaults, execute bits kept, mtimes now. */
static void test_roundtrip_defaults(void **state)
{
    static const struct {
        const char *name;
        mode_t mode;
    } want[] = {
        {"", 0755},
        {"a", 0755},
        {"a/b", 0755},
        {"a/b/c", 0755},
        {"empty_dir", 0755},
        {"ro", 0755},
        {"a/b/c/deep.txt", 0644},
        {"empty_file", 0644},
        {"big", 0644},
        {"tool", 0755},
        {"group_exec", 0755},
        {"ro/f", 0644},
    };
    char tree[PATH_MAX], dest[PATH_MAX], p[PATH_MAX];
    const char *paths[] = {tree};
    time_t start = time(NULL);
    struct stat st;

    make_tree("tree");
    pathf(tree, sizeof(tree), "%s/tree", src);
    pathf(dest, sizeof(dest), "%s/dest", out);
    pack_ok(paths, 1);
    extract_ok(dest, false, false);
    assert_true(cmp_tree(tree, dest, false) >= 18);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        pathf(p, sizeof(p), "%s/%s", dest, want[i].name);
        assert_int_equal(lstat(p, &st), 0);
        if ((st.st_mode & 07777) != want[i].mode)
            fail_msg("%s: mode %o, want %o", p, st.st_mode & 07777,
                     want[i].mode);
        if (st.st_mtim.tv_sec < start - 1)
            fail_msg("%s: mtime %ld is from the source", p,
                     (long)st.st_mtim.tv_sec);
    }
    /* a tighter umask is applied, execute bits included */
    {
        mode_t old = umask(077);
        char dest2[PATH_MAX];
        pathf(dest2, sizeof(dest2), "%s/dest2", out);
        extract_ok(dest2, false, false);
        umask(old);
        pathf(p, sizeof(p), "%s/tool", dest2);
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0700);
        pathf(p, sizeof(p), "%s/big", dest2);
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0600);
        assert_int_equal(stat(dest2, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0700);
    }
}

/* Entry names: one directory packs its contents; several sources, or one
 * file, are packed under their names. */
static void test_naming(void **state)
{
    char d1[PATH_MAX], f1[PATH_MAX], dest[PATH_MAX], p[PATH_MAX];
    char dslash[PATH_MAX], ddot[PATH_MAX], link[PATH_MAX], flink[PATH_MAX];

    pathf(d1, sizeof(d1), "%s/d1", src);
    assert_int_equal(mkdir(d1, 0755), 0);
    put(d1, "inner", "inner\n", 0644);
    put(src, "f1", "f1\n", 0644);
    pathf(f1, sizeof(f1), "%s/f1", src);

    /* one directory: its contents */
    {
        const char *paths[] = {d1};
        pathf(dest, sizeof(dest), "%s/one_dir", out);
        pack_ok(paths, 1);
        extract_ok(dest, false, false);
        assert_int_equal(count_entries(dest, NULL), 1);
        pathf(p, sizeof(p), "%s/inner", dest);
        pathf(dest, sizeof(dest), "%s/inner", d1);
        cmp_files(p, dest);
    }
    /* several: each under its name; "d1/" and "d1/." name it d1 too */
    pathf(dslash, sizeof(dslash), "%s/d1/", src);
    pathf(ddot, sizeof(ddot), "%s/d1/.", src);
    {
        const char *const variants[] = {d1, dslash, ddot};
        for (size_t i = 0; i < 3; i++) {
            const char *paths[] = {variants[i], f1};
            pathf(dest, sizeof(dest), "%s/several%zu", out, i);
            pack_ok(paths, 2);
            extract_ok(dest, false, false);
            assert_int_equal(count_entries(dest, NULL), 2);
            pathf(p, sizeof(p), "%s/d1/inner", dest);
            assert_true(exists(p));
            pathf(p, sizeof(p), "%s/f1", dest);
            cmp_files(p, f1);
        }
    }
    /* one file: DEST is a directory holding it */
    {
        const char *paths[] = {f1};
        pathf(dest, sizeof(dest), "%s/one_file", out);
        pack_ok(paths, 1);
        extract_ok(dest, false, false);
        assert_int_equal(count_entries(dest, NULL), 1);
        pathf(p, sizeof(p), "%s/f1", dest);
        cmp_files(p, f1);
    }
    /* a symlink given as the source is followed: to a directory, its
     * contents; to a file, a file under the link's name */
    pathf(link, sizeof(link), "%s/current", src);
    assert_int_equal(symlink("d1", link), 0);
    pathf(flink, sizeof(flink), "%s/flink", src);
    assert_int_equal(symlink("f1", flink), 0);
    {
        const char *paths[] = {link};
        struct stat st;
        pathf(dest, sizeof(dest), "%s/via_link", out);
        pack_ok(paths, 1);
        extract_ok(dest, false, false);
        assert_int_equal(lstat(dest, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        pathf(p, sizeof(p), "%s/inner", dest);
        assert_true(exists(p));
    }
    {
        const char *paths[] = {flink, d1};
        struct stat st;
        pathf(dest, sizeof(dest), "%s/file_link", out);
        pack_ok(paths, 2);
        extract_ok(dest, false, false);
        pathf(p, sizeof(p), "%s/flink", dest);
        assert_int_equal(lstat(p, &st), 0);
        assert_true(S_ISREG(st.st_mode));
        cmp_files(p, f1);
    }
    assert_out_holds(7);
}

/* Two sources with the same name: refused before anything is written. */
static void test_same_name(void **state)
{
    char a[PATH_MAX], b[PATH_MAX], ax[PATH_MAX], bx[PATH_MAX];
    const char *paths[] = {ax, bx};
    eddy_error_t err = {{0}};

    pathf(a, sizeof(a), "%s/a", src);
    pathf(b, sizeof(b), "%s/b", src);
    assert_int_equal(mkdir(a, 0755), 0);
    assert_int_equal(mkdir(b, 0755), 0);
    put(a, "x", "a\n", 0644);
    pathf(ax, sizeof(ax), "%s/x", a);
    pathf(bx, sizeof(bx), "%s/x", b);
    assert_int_equal(mkdir(bx, 0755), 0); /* a directory: same name still */
    errno = 0;
    assert_int_equal(pack(paths, 2, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, ax));
    assert_non_null(strstr(err.text, bx));
    assert_non_null(strstr(err.text, "'x'"));
    assert_int_equal(file_size(arc), 0);
}

/* A fifo is refused, at the top before anything is written, below with
 * its path; so is a missing source. */
static void test_refused_types(void **state)
{
    char fifo[PATH_MAX], d[PATH_MAX], deep[PATH_MAX], missing[PATH_MAX];
    eddy_error_t err = {{0}};

    pathf(fifo, sizeof(fifo), "%s/fifo", src);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    {
        const char *paths[] = {fifo};
        errno = 0;
        assert_int_equal(pack(paths, 1, &err), -1);
        assert_int_equal(errno, EINVAL);
        assert_non_null(strstr(err.text, fifo));
        assert_non_null(strstr(err.text, "fifo"));
        assert_int_equal(file_size(arc), 0);
    }
    pathf(d, sizeof(d), "%s/d", src);
    assert_int_equal(mkdir(d, 0755), 0);
    pathf(deep, sizeof(deep), "%s/d/sub", src);
    assert_int_equal(mkdir(deep, 0755), 0);
    put(deep, "ok", "ok\n", 0644);
    pathf(deep, sizeof(deep), "%s/d/sub/pipe", src);
    assert_int_equal(mkfifo(deep, 0644), 0);
    {
        const char *paths[] = {d};
        errno = 0;
        assert_int_equal(pack(paths, 1, &err), -1);
        assert_int_equal(errno, EINVAL);
        assert_non_null(strstr(err.text, deep));
        assert_non_null(strstr(err.text, "is a fifo"));
    }
    pathf(missing, sizeof(missing), "%s/missing", src);
    {
        const char *paths[] = {d, missing};
        errno = 0;
        assert_int_equal(pack(paths, 2, &err), -1);
        assert_int_equal(errno, ENOENT);
        assert_non_null(strstr(err.text, missing));
        assert_int_equal(file_size(arc), 0);
    }
    {
        const char *paths[] = {"/", d};
        errno = 0;
        assert_int_equal(pack(paths, 2, &err), -1);
        assert_int_equal(errno, EINVAL);
        assert_non_null(strstr(err.text, "without a name"));
    }
}

/* What the unprivileged child checks: a file and a directory it cannot
 * read.  Returns a bit per failed check. */
static int unreadable_checks(const char *dir)
{
    char d[PATH_MAX], f[PATH_MAX], sub[PATH_MAX], a[PATH_MAX];
    eddy_error_t err = {{0}};
    int fd, rc = 0;

    snprintf(d, sizeof(d), "%s/u", dir);
    snprintf(f, sizeof(f), "%s/u/secret", dir);
    snprintf(sub, sizeof(sub), "%s/u/closed", dir);
    snprintf(a, sizeof(a), "%s/u.tar", dir);
    if (mkdir(d, 0755) < 0 || mkdir(sub, 0000) < 0)
        return 1;
    if ((fd = open(f, O_WRONLY | O_CREAT | O_EXCL, 0000)) < 0)
        return 1;
    close(fd);
    {
        const char *paths[] = {f};
        if ((fd = open(a, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0)
            return 1;
        errno = 0;
        if (bcast_tree_pack(fd, paths, 1, &err) != -1 || errno != EACCES)
            rc |= 2;
        if (!strstr(err.text, f))
            rc |= 4;
        close(fd);
    }
    if (unlink(f) < 0)
        return 1;
    {
        const char *paths[] = {d};
        if ((fd = open(a, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0)
            return 1;
        errno = 0;
        if (bcast_tree_pack(fd, paths, 1, &err) != -1 || errno != EACCES)
            rc |= 8;
        if (!strstr(err.text, sub))
            rc |= 16;
        close(fd);
    }
    (void)rmdir(sub);
    (void)rmdir(d);
    (void)unlink(a);
    return rc;
}

/* Unreadable sources: EACCES naming the path.  As root (who reads
 * everything) the check runs in a child that became nobody. */
static void test_unreadable(void **state)
{
    char dir[PATH_MAX];
    int status;
    pid_t pid;

    pathf(dir, sizeof(dir), "%s/nobody", base);
    assert_int_equal(mkdir(dir, 0700), 0);
    if (geteuid() != 0) {
        assert_int_equal(unreadable_checks(dir), 0);
        return;
    }
    assert_int_equal(chown(dir, 65534, 65534), 0);
    assert_int_equal(chmod(base, 0711), 0);
    fflush(NULL);
    assert_true((pid = fork()) >= 0);
    if (pid == 0) {
        if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
            _exit(100);
        _exit(unreadable_checks(dir));
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(chmod(base, 0700), 0);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fail_msg("unprivileged checks failed: 0x%x", WEXITSTATUS(status));
}

/* An existing destination, without overwrite: EEXIST, left alone, and no
 * temp directory. */
static void test_dest_exists(void **state)
{
    char tree[PATH_MAX], dest[PATH_MAX], file[PATH_MAX], p[PATH_MAX];
    const char *paths[] = {tree};
    eddy_error_t err = {{0}};

    pathf(tree, sizeof(tree), "%s/t", src);
    assert_int_equal(mkdir(tree, 0755), 0);
    put(tree, "new", "new\n", 0644);
    pack_ok(paths, 1);
    pathf(dest, sizeof(dest), "%s/dest", out);
    assert_int_equal(mkdir(dest, 0755), 0);
    put(dest, "keep", "keep\n", 0644);
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, dest, false, false, &err), -1);
    assert_int_equal(errno, EEXIST);
    assert_non_null(strstr(err.text, dest));
    assert_int_equal(count_entries(dest, NULL), 1);
    pathf(p, sizeof(p), "%s/keep", dest);
    assert_true(exists(p));
    /* a file, or a symlink, there: the same */
    pathf(file, sizeof(file), "%s/file", out);
    put(out, "file", "file\n", 0644);
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, file, false, true, &err), -1);
    assert_int_equal(errno, EEXIST);
    pathf(p, sizeof(p), "%s/link", out);
    assert_int_equal(symlink(outside, p), 0);
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, p, false, true, &err), -1);
    assert_int_equal(errno, EEXIST);
    assert_out_holds(3);
    assert_int_equal(count_entries(outside, NULL), 0);
}

/* Overwrite replaces an existing tree (old content gone, read-only
 * directories included, links in it not followed), a file, or a symlink
 * (not its target); and works when there is nothing to replace. */
static void test_overwrite(void **state)
{
    char tree[PATH_MAX], dest[PATH_MAX], p[PATH_MAX];
    const char *paths[] = {tree};
    struct stat st;

    pathf(tree, sizeof(tree), "%s/t", src);
    assert_int_equal(mkdir(tree, 0755), 0);
    put(tree, "new", "new\n", 0644);
    pack_ok(paths, 1);
    put(outside, "precious", "precious\n", 0644);

    pathf(dest, sizeof(dest), "%s/dest", out);
    assert_int_equal(mkdir(dest, 0755), 0);
    put(dest, "old", "old\n", 0644);
    put(dest, "new", "old content\n", 0644);
    pathf(p, sizeof(p), "%s/old_ro", dest);
    assert_int_equal(mkdir(p, 0700), 0);
    put(p, "f", "f\n", 0644);
    assert_int_equal(chmod(p, 0500), 0);
    pathf(p, sizeof(p), "%s/to_outside", dest);
    assert_int_equal(symlink(outside, p), 0);
    extract_ok(dest, true, false);
    assert_int_equal(count_entries(dest, NULL), 1);
    pathf(p, sizeof(p), "%s/new", dest);
    {
        char q[PATH_MAX];
        pathf(q, sizeof(q), "%s/new", tree);
        cmp_files(p, q);
    }
    assert_int_equal(count_entries(outside, NULL), 1);
    assert_out_holds(1);

    /* a file at dest */
    put(out, "file", "file\n", 0644);
    pathf(dest, sizeof(dest), "%s/file", out);
    extract_ok(dest, true, false);
    assert_int_equal(lstat(dest, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    /* a symlink to a directory at dest: the link is replaced */
    pathf(dest, sizeof(dest), "%s/link", out);
    assert_int_equal(symlink(outside, dest), 0);
    extract_ok(dest, true, false);
    assert_int_equal(lstat(dest, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(count_entries(outside, NULL), 1);
    /* nothing there */
    pathf(dest, sizeof(dest), "%s/fresh", out);
    extract_ok(dest, true, true);
    pathf(p, sizeof(p), "%s/fresh/new", out);
    assert_true(exists(p));
    assert_out_holds(4);
}

struct craft {
    const char *name;
    mode_t type;
    const char *data; /* content, or a symlink's target */
    const char *hardlink;
};

/* Write an archive by hand, as an attacker would. */
static void craft(const struct craft *c, size_t n)
{
    struct archive *a = archive_write_new();

    assert_non_null(a);
    assert_int_equal(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
    assert_int_equal(archive_write_open_filename(a, arc), ARCHIVE_OK);
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, c[i].name);
        archive_entry_set_filetype(e, c[i].type);
        archive_entry_set_perm(e, c[i].type == AE_IFDIR ? 0755 : 0644);
        archive_entry_set_mtime(e, T0, 0);
        if (c[i].hardlink)
            archive_entry_set_hardlink(e, c[i].hardlink);
        if (c[i].type == AE_IFLNK)
            archive_entry_set_symlink(e, c[i].data);
        if (c[i].type == AE_IFREG && !c[i].hardlink)
            archive_entry_set_size(e, c[i].data ? strlen(c[i].data) : 0);
        assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
        if (c[i].type == AE_IFREG && c[i].data && !c[i].hardlink)
            assert_int_equal(
                archive_write_data(a, c[i].data, strlen(c[i].data)),
                (la_ssize_t)strlen(c[i].data));
        archive_entry_free(e);
    }
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

/* Extracting a crafted archive fails with 'errnum' and 'msg', leaves no
 * dest, no temp, nothing new outside or beside. */
static void check_refused(const struct craft *c,
                          size_t n,
                          int errnum,
                          const char *msg)
{
    char dest[PATH_MAX];
    eddy_error_t err = {{0}};
    int before = count_entries(outside, NULL);

    craft(c, n);
    pathf(dest, sizeof(dest), "%s/dest", out);
    errno = 0;
    if (bcast_tree_extract(arc, dest, false, true, &err) != -1)
        fail_msg("crafted archive (%s) extracted", c[n - 1].name);
    if (errno != errnum)
        fail_msg("%s: errno %d, want %d (%s)", c[n - 1].name, errno, errnum,
                 err.text);
    if (!strstr(err.text, msg))
        fail_msg("message '%s' lacks '%s'", err.text, msg);
    assert_out_holds(0);
    assert_int_equal(count_entries(outside, NULL), before);
    assert_int_equal(count_entries(base, NULL), 4); /* src out outside arc */
}

static void test_crafted(void **state)
{
    char abs[PATH_MAX], outdir[PATH_MAX];

    pathf(abs, sizeof(abs), "%s/abs", outside);
    pathf(outdir, sizeof(outdir), "%s", outside);
    {
        const struct craft c[] = {{"ok", AE_IFREG, "ok\n", NULL},
                                  {"../x", AE_IFREG, "escaped\n", NULL}};
        check_refused(c, 2, EINVAL, "'..'");
    }
    {
        const struct craft c[] = {{"a/", AE_IFDIR, NULL, NULL},
                                  {"a/../../x", AE_IFREG, "escaped\n", NULL}};
        check_refused(c, 2, EINVAL, "'..'");
    }
    {
        const struct craft c[] = {{abs, AE_IFREG, "escaped\n", NULL}};
        check_refused(c, 1, EINVAL, "absolute");
    }
    {
        const struct craft c[] = {{"l", AE_IFLNK, outdir, NULL},
                                  {"l/f", AE_IFREG, "escaped\n", NULL}};
        check_refused(c, 2, EINVAL, "symbolic link");
    }
    {
        const struct craft c[] = {{"d/", AE_IFDIR, NULL, NULL},
                                  {"d/l", AE_IFLNK, outdir, NULL},
                                  {"d/l/sub/", AE_IFDIR, NULL, NULL}};
        check_refused(c, 3, EINVAL, "symbolic link");
    }
    {
        const struct craft c[] = {{"l", AE_IFLNK, "..", NULL},
                                  {"l/x", AE_IFREG, "escaped\n", NULL}};
        check_refused(c, 2, EINVAL, "symbolic link");
    }
    {
        const struct craft c[] = {{"f", AE_IFREG, "f\n", NULL},
                                  {"h", AE_IFREG, NULL, "/etc/passwd"}};
        check_refused(c, 2, EINVAL, "hard link");
    }
    {
        const struct craft c[] = {{"p", AE_IFIFO, NULL, NULL}};
        check_refused(c, 1, EINVAL, "fifo");
    }
    {
        const struct craft c[] = {{".", AE_IFREG, "x\n", NULL}};
        check_refused(c, 1, EINVAL, "not a directory");
    }
    {
        const struct craft c[] = {{"f", AE_IFREG, "f\n", NULL},
                                  {"f/g", AE_IFREG, "g\n", NULL}};
        check_refused(c, 2, EINVAL, "f/g");
    }
    /* and one that is fine: "./" prefixes and a link that is not used */
    {
        const struct craft c[] = {{"./", AE_IFDIR, NULL, NULL},
                                  {"./d/", AE_IFDIR, NULL, NULL},
                                  {"./d//f", AE_IFREG, "f\n", NULL},
                                  {"l", AE_IFLNK, outdir, NULL}};
        char dest[PATH_MAX], p[PATH_MAX];
        craft(c, 4);
        pathf(dest, sizeof(dest), "%s/dest", out);
        extract_ok(dest, false, true);
        pathf(p, sizeof(p), "%s/d/f", dest);
        assert_true(exists(p));
        pathf(p, sizeof(p), "%s/l", dest);
        assert_true(exists(p));
    }
}

/* Truncated archives and things that are not archives: EPROTO, nothing
 * left. */
static void test_truncated(void **state)
{
    char tree[PATH_MAX], dest[PATH_MAX];
    const char *paths[] = {tree};
    unsigned char *big = malloc(1 << 20), zeros[1024] = {0};
    eddy_error_t err = {{0}};
    off_t size;
    int fd;

    assert_non_null(big);
    pathf(tree, sizeof(tree), "%s/t", src);
    assert_int_equal(mkdir(tree, 0755), 0);
    put(tree, "a", "a\n", 0644);
    fill(big, 1 << 20, 2);
    {
        char p[PATH_MAX];
        pathf(p, sizeof(p), "%s/big", tree);
        write_file(p, big, 1 << 20, 0644);
    }
    put(tree, "z", "z\n", 0644);
    pathf(dest, sizeof(dest), "%s/dest", out);

    pack_ok(paths, 1);
    size = file_size(arc);
    assert_int_equal(size % 512, 0);
    /* cut in the middle */
    assert_int_equal(truncate(arc, size / 2), 0);
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, dest, false, false, &err), -1);
    assert_int_equal(errno, EPROTO);
    assert_out_holds(0);
    /* without its end-of-archive marker only */
    pack_ok(paths, 1);
    assert_int_equal(truncate(arc, size - 1024), 0);
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, dest, false, false, &err), -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(err.text, "end-of-archive"));
    assert_out_holds(0);
    /* cut inside the big file, then zeros that look like an end: the
     * reader finds the entry short */
    pack_ok(paths, 1);
    assert_int_equal(truncate(arc, 512 * 1024), 0);
    fd = open(arc, O_WRONLY | O_APPEND | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, zeros, sizeof(zeros)), (ssize_t)sizeof(zeros));
    close(fd);
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, dest, false, false, &err), -1);
    assert_int_equal(errno, EPROTO);
    assert_out_holds(0);
    /* empty; garbage; garbage ending in zeros */
    write_file(arc, "", 0, 0600);
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, dest, false, false, &err), -1);
    assert_int_equal(errno, EPROTO);
    write_file(arc, big, 4096, 0600);
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, dest, false, false, &err), -1);
    assert_int_equal(errno, EPROTO);
    memset(big + 3072, 0, 1024);
    write_file(arc, big, 4096, 0600);
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, dest, false, false, &err), -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(err.text, arc));
    assert_out_holds(0);
    free(big);
}

/* Packing into a pipe: the same archive a file gets. */
static void test_pipe(void **state)
{
    char tree[PATH_MAX], dest[PATH_MAX];
    const char *paths[] = {tree};
    unsigned char buf[65536];
    int pfd[2], fd, status;
    pid_t pid;
    ssize_t n;

    make_tree("tree");
    pathf(tree, sizeof(tree), "%s/tree", src);
    assert_int_equal(pipe(pfd), 0);
    fflush(NULL);
    assert_true((pid = fork()) >= 0);
    if (pid == 0) {
        close(pfd[0]);
        _exit(bcast_tree_pack(pfd[1], paths, 1, NULL) == 0 ? 0 : 1);
    }
    close(pfd[1]);
    fd = open(arc, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    while ((n = read(pfd[0], buf, sizeof(buf))) > 0)
        assert_int_equal(write(fd, buf, (size_t)n), n);
    assert_int_equal(n, 0);
    close(pfd[0]);
    close(fd);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    pathf(dest, sizeof(dest), "%s/dest", out);
    extract_ok(dest, false, true);
    assert_true(cmp_tree(tree, dest, true) >= 18);
}

/* Write errors (a full disk, a reader gone) are reported, not hidden. */
static void test_write_errors(void **state)
{
    char tree[PATH_MAX];
    const char *paths[] = {tree};
    eddy_error_t err = {{0}};
    void (*old)(int);
    int fd, pfd[2];

    make_tree("tree");
    pathf(tree, sizeof(tree), "%s/tree", src);
    if ((fd = open("/dev/full", O_WRONLY | O_CLOEXEC)) >= 0) {
        errno = 0;
        assert_int_equal(bcast_tree_pack(fd, paths, 1, &err), -1);
        assert_int_equal(errno, ENOSPC);
        assert_non_null(strstr(err.text, "writing the archive"));
        close(fd);
    }
    old = signal(SIGPIPE, SIG_IGN);
    assert_int_equal(pipe(pfd), 0);
    close(pfd[0]);
    errno = 0;
    assert_int_equal(bcast_tree_pack(pfd[1], paths, 1, &err), -1);
    assert_int_equal(errno, EPIPE);
    close(pfd[1]);
    signal(SIGPIPE, old);
}

/* A tree deeper than the walk's limit: ELOOP naming where it stopped. */
static void test_too_deep(void **state)
{
    char p[PATH_MAX];
    const char *paths[] = {src};
    eddy_error_t err = {{0}};
    size_t len;

    pathf(p, sizeof(p), "%s", src);
    for (int i = 0; i < 130; i++) {
        len = strlen(p);
        pathf(p + len, sizeof(p) - len, "/d");
        assert_int_equal(mkdir(p, 0755), 0);
    }
    errno = 0;
    assert_int_equal(pack(paths, 1, &err), -1);
    assert_int_equal(errno, ELOOP);
    /* the long path's middle is elided, the reason stays */
    assert_non_null(strstr(err.text, "..."));
    assert_non_null(strstr(err.text, "d/d: more than 128 directory levels"));
}

static void test_bad_args(void **state)
{
    char dest[PATH_MAX], p[PATH_MAX];
    const char *paths[] = {src};
    const char *nullpath[] = {NULL};
    const char *empty[] = {""};
    eddy_error_t err = {{0}};

    errno = 0;
    assert_int_equal(bcast_tree_pack(-1, paths, 1, &err), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(bcast_tree_pack(1, NULL, 1, &err), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(bcast_tree_pack(1, paths, 0, &err), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(pack(nullpath, 1, &err), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(pack(empty, 1, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(file_size(arc), 0);

    put(src, "f", "f\n", 0644);
    {
        const char *f[] = {p};
        pathf(p, sizeof(p), "%s/f", src);
        pack_ok(f, 1);
    }
    pathf(dest, sizeof(dest), "%s/dest", out);
    errno = 0;
    assert_int_equal(bcast_tree_extract(NULL, dest, false, false, &err), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, NULL, false, false, &err), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, "", false, false, &err), -1);
    assert_int_equal(errno, EINVAL);
    pathf(p, sizeof(p), "%s/dest/", out);
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, p, false, false, &err), -1);
    assert_int_equal(errno, EINVAL);
    pathf(p, sizeof(p), "%s/..", out);
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, p, true, false, &err), -1);
    assert_int_equal(errno, EINVAL);
    pathf(p, sizeof(p), "%s/no/such/dir", out);
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, p, false, false, &err), -1);
    assert_int_equal(errno, ENOENT);
    assert_non_null(strstr(err.text, "no/such"));
    pathf(p, sizeof(p), "%s/no_archive", base);
    errno = 0;
    assert_int_equal(bcast_tree_extract(p, dest, false, false, &err), -1);
    assert_int_equal(errno, ENOENT);
    assert_non_null(strstr(err.text, p));
    assert_out_holds(0);
    /* NULL err is fine */
    errno = 0;
    assert_int_equal(bcast_tree_extract(arc, "", false, false, NULL), -1);
    assert_int_equal(errno, EINVAL);
}

static const struct CMUnitTest rename_tests[] = {
    cmocka_unit_test_setup(test_roundtrip_preserve, clean),
    cmocka_unit_test_setup(test_dest_exists, clean),
    cmocka_unit_test_setup(test_overwrite, clean),
};

/* Run rename_tests in a child where renameat2() with flags fails with
 * EINVAL (flags 0, which glibc may use for renameat(), still work). */
static int run_without_renameat2_flags(unsigned timeout)
{
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_renameat2, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                 offsetof(struct seccomp_data, args[4])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EINVAL & 0xffff)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {
        .len = sizeof(filter) / sizeof(filter[0]),
        .filter = filter,
    };
    int status;
    pid_t pid;

    fflush(NULL);
    if ((pid = fork()) < 0)
        return 1;
    if (pid == 0) {
        alarm(timeout); /* not inherited */
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) {
            print_message("seccomp unavailable (%s): fallback not tested\n",
                          strerror(errno));
            _exit(0);
        }
        if (renameat2(AT_FDCWD, "/nonexistent-a", AT_FDCWD, "/nonexistent-b",
                      RENAME_NOREPLACE) == 0 ||
            errno != EINVAL) {
            print_error("renameat2 still works under the filter\n");
            _exit(1);
        }
        _exit(cmocka_run_group_tests_name("bcast_tree without renameat2 flags",
                                          rename_tests, setup, teardown)
                  ? 1
                  : 0);
    }
    if (waitpid(pid, &status, 0) != pid)
        return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_roundtrip_preserve, clean),
        cmocka_unit_test_setup(test_roundtrip_defaults, clean),
        cmocka_unit_test_setup(test_naming, clean),
        cmocka_unit_test_setup(test_same_name, clean),
        cmocka_unit_test_setup(test_refused_types, clean),
        cmocka_unit_test_setup(test_unreadable, clean),
        cmocka_unit_test_setup(test_dest_exists, clean),
        cmocka_unit_test_setup(test_overwrite, clean),
        cmocka_unit_test_setup(test_crafted, clean),
        cmocka_unit_test_setup(test_truncated, clean),
        cmocka_unit_test_setup(test_pipe, clean),
        cmocka_unit_test_setup(test_write_errors, clean),
        cmocka_unit_test_setup(test_too_deep, clean),
        cmocka_unit_test_setup(test_bad_args, clean),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");
    unsigned timeout =
        50 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1);
    int failed;

    /* A hung test fails instead of blocking the suite. */
    alarm(timeout);
    umask(022);
    failed = cmocka_run_group_tests(tests, setup, teardown);
    failed += run_without_renameat2_flags(timeout);
    return failed ? 1 : 0;
}
