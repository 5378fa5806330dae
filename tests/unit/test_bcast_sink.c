/* test_bcast_sink.c - unit tests for src/common/bcast_sink.c
 *
 * Round trips through bcast_src and bcast_sink, each checking the bytes
 * that land on disk, plus the refusals (paths escaping the tmpdir, an
 * existing destination, bad chunks, a wrong checksum, a failing write) and
 * what they leave behind: never a temp file, never a partial destination.
 *
 * The path tests run twice: once as they are, and once in a child process
 * where a seccomp filter makes openat2() fail with ENOSYS, so that the
 * component-walk fallback for old kernels is exercised too.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/filter.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <cmocka.h>

#include "src/common/bcast_sink.h"
#include "src/common/bcast_src.h"

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

#define CHUNK (64u << 10) /* small chunks keep the tests quick */

static char tmpdir[256];  /* the "job tmpdir" of these tests */
static char outside[256]; /* a directory next to it, to be kept out of */

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

static int setup(void **state)
{
    const char *t = getenv("TMPDIR");

    t = t && *t ? t : "/tmp";
    snprintf(tmpdir, sizeof(tmpdir), "%s/test_bcast_sink.XXXXXX", t);
    snprintf(outside, sizeof(outside), "%s/test_bcast_out.XXXXXX", t);
    if (!mkdtemp(tmpdir) || !mkdtemp(outside))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    int a = nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    int b = nftw(outside, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return a || b ? -1 : 0;
}

/* Empty both directories between tests. */
static int clean(void **state)
{
    if (teardown(state) < 0)
        return -1;
    return mkdir(tmpdir, 0700) || mkdir(outside, 0700) ? -1 : 0;
}

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if ((i / 4096) % 2 == 0)
            p[i] = "eddy bcast\n"[x % 11];
        else
            p[i] = (unsigned char)x;
    }
}

static void path_in(char *buf, size_t sz, const char *dir, const char *name)
{
    snprintf(buf, sz, "%s/%s", dir, name);
}

/* Create 'path' with 'n' bytes of 'data' and mode 0644; return an O_RDONLY
 * fd on it. */
static int make_file(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

    assert_true(fd >= 0);
    if (n > 0)
        assert_int_equal(pwrite(fd, data, n, 0), (ssize_t)n);
    return fd;
}

/* The whole content of 'path' (caller frees), its size in '*n'. */
static unsigned char *slurp(const char *path, size_t *n)
{
    struct stat st;
    unsigned char *p;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        fail_msg("open %s: %s", path, strerror(errno));
    assert_int_equal(fstat(fd, &st), 0);
    p = malloc((size_t)st.st_size + 1);
    assert_non_null(p);
    for (size_t got = 0; got < (size_t)st.st_size;) {
        ssize_t r = pread(fd, p + got, (size_t)st.st_size - got, (off_t)got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    close(fd);
    *n = (size_t)st.st_size;
    return p;
}

/* Entries of 'dir' other than . and .., and how many look like ours. */
static int count_entries(const char *dir, int *ntemp)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    assert_non_null(d);
    if (ntemp)
        *ntemp = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        n++;
        if (ntemp && strstr(e->d_name, ".eddy-"))
            (*ntemp)++;
    }
    closedir(d);
    return n;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Ship 'fd' to 'dest' (under tmpdir if relative).  Returns 0, or -1 with
 * errno and 'err'.  '*nchunks' gets the chunk count. */
static int ship(int fd,
                size_t chunksize,
                int flags,
                const char *dest,
                int *nchunks,
                eddy_error_t *err)
{
    bcast_src_t *s;
    bcast_sink_t *k = NULL;
    struct bcast_chunk c;
    struct bcast_file_info info;
    int r, n = 0;

    if (!(s = bcast_src_create(fd, chunksize, flags, err)))
        return -1;
    if (!(k = bcast_sink_create(tmpdir, dest, flags, err)))
        goto error;
    while ((r = bcast_src_next(s, &c, err)) == 1) {
        if (bcast_sink_write(k, &c, err) < 0)
            goto error;
        n++;
    }
    if (r < 0 || bcast_src_finish(s, &info) < 0 ||
        bcast_sink_commit(k, &info, err) < 0)
        goto error;
    bcast_sink_destroy(k);
    bcast_src_destroy(s);
    if (nchunks)
        *nchunks = n;
    return 0;
error:
    bcast_sink_destroy(k);
    bcast_src_destroy(s);
    return -1;
}

/* Round trip of 'size' bytes, compared byte for byte on disk. */
static void check_roundtrip(size_t size, int flags)
{
    unsigned char *data = malloc(size + 1), *got;
    eddy_error_t err = {{0}};
    char src[512], dst[512];
    struct stat st;
    size_t n;
    int fd, ntemp, nchunks;

    assert_non_null(data);
    fill(data, size, size + 7);
    path_in(src, sizeof(src), outside, "src");
    path_in(dst, sizeof(dst), tmpdir, "dst");
    fd = make_file(src, data, size);
    if (ship(fd, CHUNK, flags, "dst", &nchunks, &err) < 0)
        fail_msg("size %zu flags %d: %s", size, flags, err.text);
    assert_int_equal(nchunks, (int)((size + CHUNK - 1) / CHUNK));
    got = slurp(dst, &n);
    assert_int_equal(n, size);
    assert_memory_equal(got, data, size);
    assert_int_equal(stat(dst, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0644); /* 0666 & ~022 */
    assert_int_equal(count_entries(tmpdir, &ntemp), 1);
    assert_int_equal(ntemp, 0);
    assert_int_equal(unlink(dst), 0);
    close(fd);
    free(got);
    free(data);
}

static void test_roundtrip_sizes(void **state)
{
    const size_t sizes[] = {0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7};

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        check_roundtrip(sizes[i], 0);
        check_roundtrip(sizes[i], BCAST_F_COMPRESS);
    }
}

static void test_sparse(void **state)
{
    const size_t size = 64u << 20;
    const off_t offs[] = {0, (20 << 20) + 100, (off_t)size - 3000};
    unsigned char *logical = calloc(1, size), *got;
    eddy_error_t err = {{0}};
    char src[512], dst[512];
    struct stat st;
    size_t n;
    int fd, nchunks;

    assert_non_null(logical);
    path_in(src, sizeof(src), outside, "sparse");
    path_in(dst, sizeof(dst), tmpdir, "sparse");
    fd = make_file(src, NULL, 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    for (size_t i = 0; i < 3; i++) {
        fill(logical + offs[i], 3000, i);
        assert_int_equal(pwrite(fd, logical + offs[i], 3000, offs[i]), 3000);
    }
    if (lseek(fd, 0, SEEK_HOLE) >= (off_t)size) {
        close(fd);
        free(logical);
        skip(); /* no holes on this file system */
    }
    if (ship(fd, 0, BCAST_F_COMPRESS, "sparse", &nchunks, &err) < 0)
        fail_msg("%s", err.text);
    assert_int_equal(nchunks, 3); /* the data, not the holes */
    got = slurp(dst, &n);
    assert_int_equal(n, size);
    assert_memory_equal(got, logical, size);
    assert_int_equal(stat(dst, &st), 0);
    /* Three small extents, not 64 MiB. */
    if ((uint64_t)st.st_blocks * 512 > 256u << 10)
        fail_msg("destination uses %ju bytes: not sparse",
                 (uintmax_t)st.st_blocks * 512);
    close(fd);
    free(got);
    free(logical);
}

/* Holes at the end (and a file that is nothing but hole): ftruncate at
 * commit gives the size back, still as a hole. */
static void test_trailing_hole(void **state)
{
    const size_t size = 8u << 20;
    unsigned char head[3000], *got;
    eddy_error_t err = {{0}};
    char src[512], dst[512];
    struct stat st;
    size_t n;
    int fd, nchunks;

    fill(head, sizeof(head), 11);
    path_in(src, sizeof(src), outside, "tail");
    path_in(dst, sizeof(dst), tmpdir, "tail");
    fd = make_file(src, head, sizeof(head));
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    if (ship(fd, 0, 0, "tail", &nchunks, &err) < 0)
        fail_msg("%s", err.text);
    got = slurp(dst, &n);
    assert_int_equal(n, size);
    assert_memory_equal(got, head, sizeof(head));
    for (size_t i = sizeof(head); i < size; i++)
        if (got[i] != 0)
            fail_msg("byte %zu is %u, not 0", i, got[i]);
    free(got);
    close(fd);

    /* All hole. */
    assert_int_equal(unlink(dst), 0);
    fd = make_file(src, NULL, 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    if (ship(fd, 0, 0, "tail", &nchunks, &err) < 0)
        fail_msg("%s", err.text);
    assert_int_equal(stat(dst, &st), 0);
    assert_int_equal(st.st_size, size);
    if (lseek(fd, 0, SEEK_HOLE) == 0) { /* holes supported here */
        assert_int_equal(nchunks, 0);
        assert_true((uint64_t)st.st_blocks * 512 < 64u << 10);
    }
    close(fd);
}

static void test_pipe(void **state)
{
    const size_t size = 5 * CHUNK + 3;
    unsigned char *data = malloc(size), *got;
    eddy_error_t err = {{0}};
    char dst[512];
    int pfd[2], status, nchunks;
    size_t n;
    pid_t pid;

    fill(data, size, 1);
    assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
    assert_true((pid = fork()) >= 0);
    if (pid == 0) {
        close(pfd[0]);
        for (size_t done = 0; done < size;) {
            ssize_t r = write(pfd[1], data + done,
                              size - done < 4999 ? size - done : 4999);
            if (r <= 0)
                _exit(1);
            done += (size_t)r;
        }
        _exit(0);
    }
    close(pfd[1]);
    if (ship(pfd[0], CHUNK, 0, "piped", &nchunks, &err) < 0)
        fail_msg("%s", err.text);
    close(pfd[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(nchunks, 6);
    path_in(dst, sizeof(dst), tmpdir, "piped");
    got = slurp(dst, &n);
    assert_int_equal(n, size);
    assert_memory_equal(got, data, size);
    free(got);
    free(data);
}

static void test_preserve(void **state)
{
    struct timespec ts[2] = {{1000, 0}, {1234567890, 987654321}};
    eddy_error_t err = {{0}};
    char src[512], dst[512];
    struct stat st;
    int fd;

    path_in(src, sizeof(src), outside, "tool");
    path_in(dst, sizeof(dst), tmpdir, "tool");
    fd = make_file(src, "#!/bin/sh\n", 10);
    assert_int_equal(fchmod(fd, 0751), 0);
    assert_int_equal(futimens(fd, ts), 0);
    if (ship(fd, 0, BCAST_F_PRESERVE, "tool", NULL, &err) < 0)
        fail_msg("%s", err.text);
    assert_int_equal(stat(dst, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0751);
    assert_int_equal(st.st_mtim.tv_sec, 1234567890);
    assert_int_equal(st.st_mtim.tv_nsec, 987654321);

    /* Without PRESERVE: 0666 & ~umask, and a fresh mtime. */
    assert_int_equal(unlink(dst), 0);
    if (ship(fd, 0, 0, "tool", NULL, &err) < 0)
        fail_msg("%s", err.text);
    assert_int_equal(stat(dst, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0644);
    assert_true(st.st_mtim.tv_sec > 1234567890);
    close(fd);
}

static void test_exists(void **state)
{
    eddy_error_t err = {{0}};
    char src[512], dst[512];
    unsigned char *got;
    struct bcast_file_info info;
    struct bcast_chunk c;
    bcast_sink_t *k;
    bcast_src_t *s;
    size_t n;
    int fd, fd2, ntemp;

    path_in(src, sizeof(src), outside, "new");
    path_in(dst, sizeof(dst), tmpdir, "dst");
    fd = make_file(src, "new content", 11);
    close(make_file(dst, "old", 3));

    /* At create. */
    errno = 0;
    assert_int_equal(ship(fd, 0, 0, "dst", NULL, &err), -1);
    assert_int_equal(errno, EEXIST);
    assert_non_null(strstr(err.text, "dst already exists"));
    got = slurp(dst, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(got, "old", 3);
    free(got);
    assert_int_equal(count_entries(tmpdir, NULL), 1);

    /* At commit: the destination appears while the file travels. */
    assert_int_equal(unlink(dst), 0);
    assert_non_null(s = bcast_src_create(fd, 0, 0, &err));
    assert_non_null(k = bcast_sink_create(tmpdir, "dst", 0, &err));
    assert_int_equal(bcast_src_next(s, &c, &err), 1);
    assert_int_equal(bcast_sink_write(k, &c, &err), 0);
    assert_int_equal(bcast_src_next(s, &c, &err), 0);
    assert_int_equal(bcast_src_finish(s, &info), 0);
    fd2 = make_file(dst, "racer", 5);
    close(fd2);
    errno = 0;
    assert_int_equal(bcast_sink_commit(k, &info, &err), -1);
    assert_int_equal(errno, EEXIST);
    assert_int_equal(count_entries(tmpdir, &ntemp), 1);
    assert_int_equal(ntemp, 0);
    got = slurp(dst, &n);
    assert_int_equal(n, 5);
    assert_memory_equal(got, "racer", 5);
    free(got);
    /* A failed commit is final. */
    errno = 0;
    assert_int_equal(bcast_sink_commit(k, &info, &err), -1);
    assert_int_equal(errno, EINVAL);
    bcast_sink_destroy(k);
    bcast_src_destroy(s);

    /* OVERWRITE replaces it. */
    if (ship(fd, 0, BCAST_F_OVERWRITE, "dst", NULL, &err) < 0)
        fail_msg("%s", err.text);
    got = slurp(dst, &n);
    assert_int_equal(n, 11);
    assert_memory_equal(got, "new content", 11);
    free(got);
    close(fd);
}

/* OVERWRITE of a symlink replaces the link, never writes through it. */
static void test_overwrite_symlink(void **state)
{
    eddy_error_t err = {{0}};
    char src[512], victim[512], link[512];
    unsigned char *got;
    struct stat st;
    size_t n;
    int fd;

    path_in(src, sizeof(src), outside, "src");
    path_in(victim, sizeof(victim), outside, "victim");
    path_in(link, sizeof(link), tmpdir, "link");
    fd = make_file(src, "payload", 7);
    close(make_file(victim, "precious", 8));
    assert_int_equal(symlink(victim, link), 0);

    errno = 0;
    assert_int_equal(ship(fd, 0, 0, "link", NULL, &err), -1);
    assert_int_equal(errno, EEXIST);
    if (ship(fd, 0, BCAST_F_OVERWRITE, "link", NULL, &err) < 0)
        fail_msg("%s", err.text);
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    got = slurp(victim, &n);
    assert_int_equal(n, 8);
    assert_memory_equal(got, "precious", 8);
    free(got);
    close(fd);
}

static void test_isdir(void **state)
{
    eddy_error_t err = {{0}};
    char d[512];

    path_in(d, sizeof(d), tmpdir, "sub");
    assert_int_equal(mkdir(d, 0700), 0);
    errno = 0;
    assert_null(bcast_sink_create(tmpdir, "sub", BCAST_F_OVERWRITE, &err));
    assert_int_equal(errno, EISDIR);
    assert_non_null(strstr(err.text, "sub is a directory"));
    errno = 0;
    assert_null(bcast_sink_create(tmpdir, "sub/", 0, &err));
    assert_int_equal(errno, EISDIR);
    errno = 0;
    assert_null(bcast_sink_create(tmpdir, "sub/.", 0, &err));
    assert_int_equal(errno, EISDIR);
    assert_int_equal(count_entries(d, NULL), 0);
}

/* bcast_sink_create() must fail with 'errnum' and 'msg', creating nothing
 * anywhere.  Plain checks (no cmocka): also run in the seccomp child. */
static int refused(const char *dest, int errnum, const char *msg)
{
    eddy_error_t err = {{0}};
    bcast_sink_t *k;
    int before = count_entries(outside, NULL);

    errno = 0;
    k = bcast_sink_create(tmpdir, dest, 0, &err);
    if (k) {
        bcast_sink_destroy(k);
        print_error("'%s' was accepted\n", dest);
        return -1;
    }
    if (errno != errnum) {
        print_error("'%s': errno %d (%s), want %d\n", dest, errno, err.text,
                    errnum);
        return -1;
    }
    if (!strstr(err.text, msg)) {
        print_error("'%s': message '%s' lacks '%s'\n", dest, err.text, msg);
        return -1;
    }
    if (count_entries(outside, NULL) != before) {
        print_error("'%s': something was created outside\n", dest);
        return -1;
    }
    return 0;
}

static void test_relative_paths(void **state)
{
    eddy_error_t err = {{0}};
    char p[512], q[512];
    unsigned char *got;
    size_t n;
    int fd, ntemp;

    /* Set up: tmpdir/a/b (a real directory), tmpdir/out -> outside,
     * tmpdir/a/up -> .., tmpdir/file (not a directory). */
    path_in(p, sizeof(p), tmpdir, "a");
    assert_int_equal(mkdir(p, 0700), 0);
    path_in(p, sizeof(p), tmpdir, "a/b");
    assert_int_equal(mkdir(p, 0700), 0);
    path_in(p, sizeof(p), tmpdir, "out");
    assert_int_equal(symlink(outside, p), 0);
    path_in(p, sizeof(p), tmpdir, "a/up");
    assert_int_equal(symlink("..", p), 0);
    path_in(p, sizeof(p), tmpdir, "file");
    close(make_file(p, "x", 1));

    assert_int_equal(refused("a/../b", EINVAL, "'..' is not allowed"), 0);
    assert_int_equal(refused("../x", EINVAL, "'..' is not allowed"), 0);
    assert_int_equal(refused("a/b/..", EINVAL, "'..' is not allowed"), 0);
    assert_int_equal(refused("out/x", ELOOP, "symbolic link"), 0);
    assert_int_equal(refused("a/up/x", ELOOP, "symbolic link"), 0);
    assert_int_equal(refused("a/b/../../out/x", EINVAL, "'..'"), 0);
    assert_int_equal(refused("nodir/x", ENOENT, "directory 'nodir' does not"),
                     0);
    assert_int_equal(
        refused("a/b/c/x", ENOENT, "directory 'a/b/c' does not exist"), 0);
    assert_int_equal(refused("file/x", ENOTDIR, "'file'"), 0);
    assert_int_equal(refused("", EINVAL, "empty"), 0);
    assert_int_equal(count_entries(outside, NULL), 0);

    /* What is allowed: nested, "./", doubled slashes. */
    path_in(q, sizeof(q), outside, "src");
    fd = make_file(q, "data", 4);
    if (ship(fd, 0, 0, "a/b/x", NULL, &err) < 0 ||
        ship(fd, 0, 0, "./a//b/./y", NULL, &err) < 0)
        fail_msg("%s", err.text);
    path_in(p, sizeof(p), tmpdir, "a/b/y");
    got = slurp(p, &n);
    assert_int_equal(n, 4);
    assert_memory_equal(got, "data", 4);
    free(got);
    path_in(p, sizeof(p), tmpdir, "a/b");
    assert_int_equal(count_entries(p, &ntemp), 2);
    assert_int_equal(ntemp, 0);
    assert_int_equal(unlink(q), 0);
    close(fd);
}

/* Absolute paths are not confined: links are followed like cp would. */
static void test_absolute(void **state)
{
    eddy_error_t err = {{0}};
    char src[512], dst[512], link[512], via[600];
    unsigned char *got;
    size_t n;
    int fd;

    path_in(src, sizeof(src), tmpdir, "src");
    path_in(link, sizeof(link), tmpdir, "out");
    path_in(dst, sizeof(dst), outside, "abs");
    assert_int_equal(symlink(outside, link), 0);
    snprintf(via, sizeof(via), "%s/abs", link);
    fd = make_file(src, "absolute", 8);
    if (ship(fd, 0, 0, via, NULL, &err) < 0)
        fail_msg("%s", err.text);
    got = slurp(dst, &n);
    assert_int_equal(n, 8);
    assert_memory_equal(got, "absolute", 8);
    free(got);
    close(fd);

    errno = 0;
    assert_null(bcast_sink_create(NULL, "/nonexistent-eddy/dir/x", 0, &err));
    assert_int_equal(errno, ENOENT);
    assert_non_null(strstr(err.text, "'/nonexistent-eddy/dir' does not exist"));
    errno = 0;
    assert_null(bcast_sink_create(NULL, "rel", 0, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "without tmpdir"));
}

/* A corrupted byte: caught by the hash, nothing left behind. */
static void test_checksum_mismatch(void **state)
{
    const size_t size = 3 * CHUNK;
    unsigned char *data = malloc(size), *copy = malloc(CHUNK);
    eddy_error_t err = {{0}};
    struct bcast_file_info info;
    struct bcast_chunk c;
    char src[512], dst[512];
    bcast_src_t *s;
    bcast_sink_t *k;
    int fd, i = 0;

    fill(data, size, 77);
    path_in(src, sizeof(src), outside, "src");
    path_in(dst, sizeof(dst), tmpdir, "dst");
    fd = make_file(src, data, size);
    assert_non_null(s = bcast_src_create(fd, CHUNK, 0, &err));
    assert_non_null(k = bcast_sink_create(tmpdir, "dst", 0, &err));
    while (bcast_src_next(s, &c, &err) == 1) {
        if (i++ == 1) { /* flip one bit of the second chunk */
            memcpy(copy, c.data, c.len);
            copy[1234] ^= 0x10;
            c.data = copy;
        }
        assert_int_equal(bcast_sink_write(k, &c, &err), 0);
    }
    assert_int_equal(bcast_src_finish(s, &info), 0);
    errno = 0;
    assert_int_equal(bcast_sink_commit(k, &info, &err), -1);
    assert_int_equal(errno, EBADMSG);
    assert_non_null(strstr(err.text, "checksum mismatch"));
    assert_int_equal(count_entries(tmpdir, NULL), 0);
    assert_false(exists(dst));
    bcast_sink_destroy(k);
    bcast_src_destroy(s);
    close(fd);
    free(data);
    free(copy);
}

/* A wrong size in the file description is a mismatch too. */
static void test_bad_info(void **state)
{
    eddy_error_t err = {{0}};
    struct bcast_file_info info;
    struct bcast_chunk c = {.offset = 0, .rawlen = 4, .len = 4, .data = "abcd"};
    bcast_sink_t *k;

    assert_non_null(k = bcast_sink_create(tmpdir, "f", 0, &err));
    assert_int_equal(bcast_sink_write(k, &c, &err), 0);
    memset(&info, 0, sizeof(info));
    info.size = 2; /* below what was written */
    errno = 0;
    assert_int_equal(bcast_sink_commit(k, &info, &err), -1);
    assert_int_equal(errno, EPROTO);
    assert_int_equal(count_entries(tmpdir, NULL), 0);
    bcast_sink_destroy(k);

    assert_non_null(k = bcast_sink_create(tmpdir, "f", 0, &err));
    assert_int_equal(bcast_sink_write(k, &c, &err), 0);
    info.size = 5; /* right content, one trailing zero too many */
    {
        XXH128_canonical_t h;
        XXH128_canonicalFromHash(&h, XXH3_128bits("abcd", 4));
        memcpy(info.hash, h.digest, 16);
    }
    errno = 0;
    assert_int_equal(bcast_sink_commit(k, &info, &err), -1);
    assert_int_equal(errno, EBADMSG);
    assert_int_equal(count_entries(tmpdir, NULL), 0);
    /* NULL info: EINVAL, nothing else happens. */
    errno = 0;
    assert_int_equal(bcast_sink_commit(k, NULL, &err), -1);
    assert_int_equal(errno, EINVAL);
    bcast_sink_destroy(k);
}

static void test_bad_chunks(void **state)
{
    eddy_error_t err = {{0}};
    struct bcast_file_info info;
    struct bcast_chunk c = {
        .offset = 100, .rawlen = 4, .len = 4, .data = "abcd"};
    bcast_sink_t *k;
    char dst[512];
    unsigned char *got;
    size_t n;

    assert_non_null(k = bcast_sink_create(tmpdir, "f", 0, &err));
    assert_int_equal(bcast_sink_write(k, &c, &err), 0);

    /* Out of order, overlapping. */
    c.offset = 0;
    errno = 0;
    assert_int_equal(bcast_sink_write(k, &c, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "out of order"));
    c.offset = 102;
    errno = 0;
    assert_int_equal(bcast_sink_write(k, &c, &err), -1);
    assert_int_equal(errno, EINVAL);
    c.offset = BCAST_SIZE_MAX - 2;
    errno = 0;
    assert_int_equal(bcast_sink_write(k, &c, &err), -1);
    assert_int_equal(errno, EFBIG);
    c.offset = UINT64_MAX - 1;
    errno = 0;
    assert_int_equal(bcast_sink_write(k, &c, &err), -1);
    assert_int_equal(errno, EFBIG);

    /* Lengths. */
    c.offset = 200;
    c.len = 3;
    errno = 0;
    assert_int_equal(bcast_sink_write(k, &c, &err), -1);
    assert_int_equal(errno, EPROTO);
    c.len = c.rawlen = 0;
    errno = 0;
    assert_int_equal(bcast_sink_write(k, &c, &err), -1);
    assert_int_equal(errno, EPROTO);
    c.len = 4;
    c.rawlen = BCAST_CHUNK_MAX + 1;
    c.compressed = true;
    errno = 0;
    assert_int_equal(bcast_sink_write(k, &c, &err), -1);
    assert_int_equal(errno, EPROTO);
    /* Not zstd at all. */
    c.rawlen = 4;
    errno = 0;
    assert_int_equal(bcast_sink_write(k, &c, &err), -1);
    assert_int_equal(errno, EPROTO);

    /* After all that, the sink still works: the failures had no effect. */
    c.offset = 104;
    c.compressed = false;
    assert_int_equal(bcast_sink_write(k, &c, &err), 0);
    memset(&info, 0, sizeof(info));
    info.size = 108;
    {
        unsigned char want[108] = {0};
        XXH128_canonical_t h;
        memcpy(want + 100, "abcdabcd", 8);
        XXH128_canonicalFromHash(&h, XXH3_128bits(want, 108));
        memcpy(info.hash, h.digest, 16);
    }
    if (bcast_sink_commit(k, &info, &err) < 0)
        fail_msg("%s", err.text);
    errno = 0;
    assert_int_equal(bcast_sink_write(k, &c, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "already committed"));
    bcast_sink_destroy(k);
    path_in(dst, sizeof(dst), tmpdir, "f");
    got = slurp(dst, &n);
    assert_int_equal(n, 108);
    assert_memory_equal(got + 100, "abcdabcd", 8);
    free(got);
}

/* A compressed chunk whose rawlen lies (both ways). */
static void test_compressed_rawlen_mismatch(void **state)
{
    const size_t size = 8192;
    unsigned char *data = malloc(size);
    eddy_error_t err = {{0}};
    struct bcast_chunk c, bad;
    char src[512];
    bcast_src_t *s;
    bcast_sink_t *k;
    int fd;

    memset(data, 'z', size);
    path_in(src, sizeof(src), outside, "z");
    fd = make_file(src, data, size);
    assert_non_null(s = bcast_src_create(fd, 0, BCAST_F_COMPRESS, &err));
    assert_int_equal(bcast_src_next(s, &c, &err), 1);
    assert_true(c.compressed);
    assert_non_null(k = bcast_sink_create(tmpdir, "z", 0, &err));
    bad = c;
    bad.rawlen = c.rawlen + 1;
    errno = 0;
    assert_int_equal(bcast_sink_write(k, &bad, &err), -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(err.text, "decompresses to 8192 bytes, not 8193"));
    bad.rawlen = c.rawlen - 1;
    errno = 0;
    assert_int_equal(bcast_sink_write(k, &bad, &err), -1);
    assert_int_equal(errno, EPROTO);
    assert_int_equal(bcast_sink_write(k, &c, &err), 0);
    bcast_sink_destroy(k);
    bcast_src_destroy(s);
    assert_int_equal(count_entries(tmpdir, NULL), 0);
    close(fd);
    free(data);
}

/* Abort: destroy without commit leaves nothing. */
static void test_destroy_aborts(void **state)
{
    eddy_error_t err = {{0}};
    struct bcast_chunk c = {.offset = 0, .rawlen = 3, .len = 3, .data = "abc"};
    bcast_sink_t *k;
    int ntemp;

    assert_non_null(k = bcast_sink_create(tmpdir, "f", 0, &err));
    assert_int_equal(count_entries(tmpdir, &ntemp), 1);
    assert_int_equal(ntemp, 1); /* the temp file is really there */
    assert_int_equal(bcast_sink_write(k, &c, &err), 0);
    errno = 42;
    bcast_sink_destroy(k);
    assert_int_equal(errno, 42);
    assert_int_equal(count_entries(tmpdir, NULL), 0);
    bcast_sink_destroy(NULL);
    assert_int_equal(errno, 42);
}

/* The temp file is 0600 while it fills, and named after the file. */
static void test_temp_mode(void **state)
{
    eddy_error_t err = {{0}};
    bcast_sink_t *k;
    DIR *d;
    struct dirent *e;
    struct stat st;
    char p[512];
    bool seen = false;

    assert_non_null(k = bcast_sink_create(tmpdir, "name", 0, &err));
    assert_non_null(d = opendir(tmpdir));
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".name.eddy-", 11) == 0) {
            assert_int_equal(strlen(e->d_name), 17);
            path_in(p, sizeof(p), tmpdir, e->d_name);
            assert_int_equal(stat(p, &st), 0);
            assert_int_equal(st.st_mode & 07777, 0600);
            seen = true;
        }
    }
    closedir(d);
    assert_true(seen);
    bcast_sink_destroy(k);
}

/* A name at NAME_MAX still gets a temp file (the prefix is cut). */
static void test_long_name(void **state)
{
    eddy_error_t err = {{0}};
    char name[256], src[512];
    int fd;

    memset(name, 'n', 255);
    name[255] = '\0';
    path_in(src, sizeof(src), outside, "src");
    fd = make_file(src, "long", 4);
    if (ship(fd, 0, 0, name, NULL, &err) < 0)
        fail_msg("%s", err.text);
    assert_int_equal(count_entries(tmpdir, NULL), 1);
    close(fd);
}

/* A failing write (EFBIG from RLIMIT_FSIZE stands in for a full disk, as
 * root ignores permissions): reported with the path, no temp file left. */
static void test_write_error(void **state)
{
    const size_t size = 4 * CHUNK;
    unsigned char *data = malloc(size);
    eddy_error_t err = {{0}};
    struct rlimit old, lim;
    char src[512];
    void (*oldsig)(int);
    int fd, r;

    fill(data, size, 3);
    path_in(src, sizeof(src), outside, "src");
    fd = make_file(src, data, size);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 2 * CHUNK + 100;
    oldsig = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    errno = 0;
    r = ship(fd, CHUNK, 0, "big", NULL, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, oldsig);
    assert_int_equal(r, -1);
    assert_int_equal(errno, EFBIG);
    if (!strstr(err.text, "big at offset"))
        fail_msg("message lacks the path: %s", err.text);
    assert_int_equal(count_entries(tmpdir, NULL), 0);
    close(fd);
    free(data);
}

static void test_bad_args(void **state)
{
    eddy_error_t err = {{0}};
    struct bcast_chunk c = {0};

    errno = 0;
    assert_null(bcast_sink_create(tmpdir, NULL, 0, &err));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(bcast_sink_create(tmpdir, "x", 0x40, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "unknown flags"));
    errno = 0;
    assert_null(bcast_sink_create("/nonexistent-eddy", "x", 0, &err));
    assert_int_equal(errno, ENOENT);
    assert_non_null(strstr(err.text, "/nonexistent-eddy"));
    errno = 0;
    assert_int_equal(bcast_sink_write(NULL, &c, &err), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(bcast_sink_commit(NULL, NULL, &err), -1);
    assert_int_equal(errno, EINVAL);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* 256 MiB from a memfd to a tmpfs directory (if there is one): figures for
 * information only, nothing asserted but the result. */
static void test_throughput(void **state)
{
    const size_t size = 256u << 20;
    const size_t piece = 1u << 20;
    unsigned char *buf = malloc(piece);
    char dir[64], dst[128];
    eddy_error_t err = {{0}};
    bool shm;
    int fd;

    snprintf(dir, sizeof(dir), "/dev/shm/test_bcast_tp.XXXXXX");
    shm = mkdtemp(dir) != NULL;
    fd = memfd_create("bcast-src", MFD_CLOEXEC);
    assert_true(fd >= 0);
    for (size_t off = 0; off < size; off += piece) {
        fill(buf, piece, off / piece);
        assert_int_equal(pwrite(fd, buf, piece, (off_t)off), (ssize_t)piece);
    }
    /* An absolute destination, so the tmpdir does not matter. */
    if (shm)
        snprintf(dst, sizeof(dst), "%s/big", dir);
    for (int z = 0; z <= 1; z++) {
        const char *dest = shm ? dst : "big";
        double t0 = now(), t;
        int r = ship(fd, 0, z ? BCAST_F_COMPRESS : 0, dest, NULL, &err);
        t = now() - t0;
        if (r < 0)
            fail_msg("%s", err.text);
        print_message("bcast round trip 256 MiB %s, memfd -> %s: %.2f s, "
                      "%.0f MiB/s\n",
                      z ? "compressed (zstd -1)" : "raw",
                      shm ? "/dev/shm" : tmpdir, t, 256.0 / t);
        if (shm)
            assert_int_equal(unlink(dst), 0);
        else
            assert_int_equal(clean(state), 0);
    }
    if (shm)
        assert_int_equal(rmdir(dir), 0);
    close(fd);
    free(buf);
}

/* Run the path tests with openat2() answering ENOSYS, as on a kernel before
 * 5.6, in a child (a seccomp filter cannot be removed).  Returns the
 * child's failure count, or 0 if seccomp is unavailable here. */
static const struct CMUnitTest path_tests[] = {
    cmocka_unit_test_setup(test_relative_paths, clean),
    cmocka_unit_test_setup(test_overwrite_symlink, clean),
    cmocka_unit_test_setup(test_isdir, clean),
};

static int run_without_openat2(unsigned timeout)
{
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & 0xffff)),
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
        struct open_how how = {.flags = O_PATH};
        alarm(timeout); /* not inherited */
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) {
            print_message("seccomp unavailable (%s): fallback not tested\n",
                          strerror(errno));
            _exit(0);
        }
        if (syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how)) >= 0 ||
            errno != ENOSYS) {
            print_error("openat2 still works under the filter\n");
            _exit(1);
        }
        _exit(cmocka_run_group_tests_name("bcast_sink without openat2",
                                          path_tests, setup, teardown)
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
        cmocka_unit_test_setup(test_roundtrip_sizes, clean),
        cmocka_unit_test_setup(test_sparse, clean),
        cmocka_unit_test_setup(test_trailing_hole, clean),
        cmocka_unit_test_setup(test_pipe, clean),
        cmocka_unit_test_setup(test_preserve, clean),
        cmocka_unit_test_setup(test_exists, clean),
        cmocka_unit_test_setup(test_overwrite_symlink, clean),
        cmocka_unit_test_setup(test_isdir, clean),
        cmocka_unit_test_setup(test_relative_paths, clean),
        cmocka_unit_test_setup(test_absolute, clean),
        cmocka_unit_test_setup(test_checksum_mismatch, clean),
        cmocka_unit_test_setup(test_bad_info, clean),
        cmocka_unit_test_setup(test_bad_chunks, clean),
        cmocka_unit_test_setup(test_compressed_rawlen_mismatch, clean),
        cmocka_unit_test_setup(test_destroy_aborts, clean),
        cmocka_unit_test_setup(test_temp_mode, clean),
        cmocka_unit_test_setup(test_long_name, clean),
        cmocka_unit_test_setup(test_write_error, clean),
        cmocka_unit_test_setup(test_bad_args, clean),
        cmocka_unit_test_setup(test_throughput, clean),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");
    unsigned timeout =
        50 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1);
    int failed;

    /* A hung test fails instead of blocking the suite. */
    alarm(timeout);
    umask(022);
    failed = cmocka_run_group_tests(tests, setup, teardown);
    failed += run_without_openat2(timeout);
    return failed ? 1 : 0;
}
