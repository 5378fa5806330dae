/* test_bcast_src.c - unit tests for src/common/bcast_src.c
 *
 * Every test reads a real file (or pipe) and checks the chunks against the
 * bytes written: offsets, lengths, content after decompression, and the
 * final hash against a one-shot XXH3-128 of the logical content.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>
#include <cmocka.h>

#include "src/common/bcast_src.h"

#define CHUNK (64u << 10) /* small chunks keep the tests quick */

static char tmpdir[256];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

static int setup(void **state)
{
    const char *t = getenv("TMPDIR");

    snprintf(tmpdir, sizeof(tmpdir), "%s/test_bcast_src.XXXXXX",
             t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    return nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Deterministic bytes: compressible runs of a small alphabet alternating
 * with random bytes, so that zstd has something to do and something it
 * cannot shrink. */
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

/* Create tmpdir/name holding 'n' bytes of 'data'; return an O_RDONLY fd. */
static int make_file(const char *name, const void *data, size_t n)
{
    char path[512];
    int fd;

    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    if (n > 0)
        assert_int_equal(pwrite(fd, data, n, 0), (ssize_t)n);
    return fd;
}

static void hash_of(const void *p, size_t n, uint8_t out[16])
{
    XXH128_canonical_t c;

    XXH128_canonicalFromHash(&c, XXH3_128bits(p, n));
    memcpy(out, c.digest, 16);
}

/* Read every chunk of 's' into 'out' (of 'cap' bytes, zero-filled first),
 * checking order and lengths.  Returns the number of chunks. */
static int drain(bcast_src_t *s,
                 unsigned char *out,
                 size_t cap,
                 size_t chunksize,
                 int *ncompressed)
{
    struct bcast_chunk c;
    eddy_error_t err = {{0}};
    uint64_t end = 0;
    int n = 0, r;

    memset(out, 0, cap);
    if (ncompressed)
        *ncompressed = 0;
    while ((r = bcast_src_next(s, &c, &err)) == 1) {
        assert_true(c.offset >= end);
        assert_true(c.rawlen > 0 && c.rawlen <= chunksize);
        assert_true(c.len <= c.rawlen);
        assert_true(c.offset + c.rawlen <= cap);
        if (c.compressed) {
            size_t z = ZSTD_decompress(out + c.offset, c.rawlen, c.data, c.len);
            assert_false(ZSTD_isError(z));
            assert_int_equal(z, c.rawlen);
            assert_true(c.len < c.rawlen);
            if (ncompressed)
                (*ncompressed)++;
        } else {
            assert_int_equal(c.len, c.rawlen);
            memcpy(out + c.offset, c.data, c.rawlen);
        }
        end = c.offset + c.rawlen;
        n++;
    }
    if (r < 0)
        fail_msg("bcast_src_next: %s", err.text);
    /* The end is sticky. */
    assert_int_equal(bcast_src_next(s, &c, &err), 0);
    return n;
}

static void check_size(size_t size, int flags)
{
    unsigned char *data = malloc(size + 1), *out = malloc(size + 1);
    eddy_error_t err = {{0}};
    struct bcast_file_info info;
    uint8_t want[16];
    bcast_src_t *s;
    int fd, n, nz;

    assert_non_null(data);
    assert_non_null(out);
    fill(data, size, size);
    fd = make_file("sized", data, size);
    s = bcast_src_create(fd, CHUNK, flags, &err);
    if (!s)
        fail_msg("create: %s", err.text);
    assert_int_equal(bcast_src_size(s), (int64_t)size);
    /* Not finished yet. */
    errno = 0;
    assert_int_equal(bcast_src_finish(s, &info), -1);
    assert_int_equal(errno, EINVAL);

    n = drain(s, out, size + 1, CHUNK, &nz);
    assert_int_equal(n, (int)((size + CHUNK - 1) / CHUNK));
    assert_memory_equal(out, data, size);
    if (!(flags & BCAST_F_COMPRESS))
        assert_int_equal(nz, 0);
    else if (size >= 8192)
        assert_true(nz > 0); /* the text runs compress */

    assert_int_equal(bcast_src_finish(s, &info), 0);
    assert_int_equal(info.size, size);
    assert_int_equal(info.mode, 0644);
    hash_of(data, size, want);
    assert_memory_equal(info.hash, want, 16);
    /* Again: same answer. */
    memset(&info, 0, sizeof(info));
    assert_int_equal(bcast_src_finish(s, &info), 0);
    assert_memory_equal(info.hash, want, 16);

    bcast_src_destroy(s);
    close(fd);
    free(data);
    free(out);
}

static void test_sizes(void **state)
{
    const size_t sizes[] = {0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7};

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        check_size(sizes[i], 0);
        check_size(sizes[i], BCAST_F_COMPRESS);
    }
}

/* Random bytes do not shrink: they must go raw, not grow. */
static void test_incompressible(void **state)
{
    size_t size = 2 * CHUNK;
    unsigned char *data = malloc(size), *out = malloc(size);
    eddy_error_t err = {{0}};
    uint64_t x = 88172645463325252ull;
    bcast_src_t *s;
    int fd, nz;

    for (size_t i = 0; i < size; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data[i] = (unsigned char)(x >> 24);
    }
    fd = make_file("random", data, size);
    assert_non_null(s = bcast_src_create(fd, CHUNK, BCAST_F_COMPRESS, &err));
    assert_int_equal(drain(s, out, size, CHUNK, &nz), 2);
    assert_int_equal(nz, 0);
    assert_memory_equal(out, data, size);
    bcast_src_destroy(s);
    close(fd);
    free(data);
    free(out);
}

/* The default chunk size, and chunks that do not divide the file. */
static void test_default_chunksize(void **state)
{
    size_t size = 2 * BCAST_CHUNK_DEFAULT + 5;
    unsigned char *data = malloc(size), *out = malloc(size);
    eddy_error_t err = {{0}};
    bcast_src_t *s;
    int fd;

    fill(data, size, 3);
    fd = make_file("default", data, size);
    assert_non_null(s = bcast_src_create(fd, 0, 0, &err));
    assert_int_equal(drain(s, out, size, BCAST_CHUNK_DEFAULT, NULL), 3);
    assert_memory_equal(out, data, size);
    bcast_src_destroy(s);
    close(fd);
    free(data);
    free(out);
}

/* The fd's offset does not matter for a regular file (pread). */
static void test_offset_ignored(void **state)
{
    unsigned char data[1000], out[1000];
    eddy_error_t err = {{0}};
    bcast_src_t *s;
    int fd;

    fill(data, sizeof(data), 9);
    fd = make_file("offset", data, sizeof(data));
    assert_int_equal(lseek(fd, 500, SEEK_SET), 500);
    assert_non_null(s = bcast_src_create(fd, CHUNK, 0, &err));
    assert_int_equal(drain(s, out, sizeof(out), CHUNK, NULL), 1);
    assert_memory_equal(out, data, sizeof(data));
    bcast_src_destroy(s);
    close(fd);
}

/* Does the file system under tmpdir report holes? */
static bool holes_supported(int fd, off_t size)
{
    off_t h = lseek(fd, 0, SEEK_HOLE);
    return h >= 0 && h < size;
}

static void test_sparse(void **state)
{
    const size_t size = 64u << 20;
    const struct {
        off_t off;
        size_t len;
    } parts[] = {
        {0, 4096},
        {(20 << 20) + 100, 5000},
        {(off_t)size - 3000, 3000},
    };
    unsigned char *logical = calloc(1, size), *out = malloc(size);
    eddy_error_t err = {{0}};
    struct bcast_file_info info;
    struct bcast_chunk c;
    uint8_t want[16];
    uint64_t sent = 0;
    bcast_src_t *s;
    char path[512];
    int fd, n = 0, r;

    assert_non_null(logical);
    assert_non_null(out);
    snprintf(path, sizeof(path), "%s/sparse", tmpdir);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    for (size_t i = 0; i < 3; i++) {
        fill(logical + parts[i].off, parts[i].len, i + 1);
        assert_int_equal(
            pwrite(fd, logical + parts[i].off, parts[i].len, parts[i].off),
            (ssize_t)parts[i].len);
    }
    if (!holes_supported(fd, (off_t)size)) {
        close(fd);
        free(logical);
        free(out);
        skip();
    }

    assert_non_null(s = bcast_src_create(fd, 0, 0, &err));
    memset(out, 0, size);
    while ((r = bcast_src_next(s, &c, &err)) == 1) {
        /* Each chunk lies in (the blocks of) one written part. */
        bool inside = false;
        for (size_t i = 0; i < 3; i++) {
            off_t lo = parts[i].off & ~(off_t)4095;
            off_t hi =
                (parts[i].off + (off_t)parts[i].len + 4095) & ~(off_t)4095;
            if ((off_t)c.offset >= lo && (off_t)(c.offset + c.rawlen) <= hi)
                inside = true;
        }
        if (!inside)
            fail_msg("chunk %ju+%u covers a hole", (uintmax_t)c.offset,
                     c.rawlen);
        memcpy(out + c.offset, c.data, c.rawlen);
        sent += c.rawlen;
        n++;
    }
    assert_int_equal(r, 0);
    assert_int_equal(n, 3);
    assert_true(sent <= 3 * 8192 + 4096);
    assert_memory_equal(out, logical, size);

    assert_int_equal(bcast_src_finish(s, &info), 0);
    assert_int_equal(info.size, size);
    hash_of(logical, size, want);
    assert_memory_equal(info.hash, want, 16);
    bcast_src_destroy(s);
    close(fd);
    free(logical);
    free(out);
}

/* A file that is all hole: no chunk at all, hash of zeros. */
static void test_all_hole(void **state)
{
    const size_t size = 3u << 20;
    unsigned char *zero = calloc(1, size);
    eddy_error_t err = {{0}};
    struct bcast_file_info info;
    struct bcast_chunk c;
    uint8_t want[16];
    bcast_src_t *s;
    int fd;

    fd = make_file("hole", NULL, 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    if (!holes_supported(fd, (off_t)size)) {
        close(fd);
        free(zero);
        skip();
    }
    assert_non_null(s = bcast_src_create(fd, 0, 0, &err));
    assert_int_equal(bcast_src_next(s, &c, &err), 0);
    assert_int_equal(bcast_src_finish(s, &info), 0);
    assert_int_equal(info.size, size);
    hash_of(zero, size, want);
    assert_memory_equal(info.hash, want, 16);
    bcast_src_destroy(s);
    close(fd);
    free(zero);
}

/* Write 'n' bytes of fill(seed) to 'fd' in odd-sized pieces from a child,
 * then exit. */
static pid_t spawn_writer(int fd, size_t n, uint64_t seed)
{
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        unsigned char *p = malloc(n);
        size_t done = 0;
        if (!p)
            _exit(1);
        fill(p, n, seed);
        while (done < n) {
            size_t k = n - done < 3001 ? n - done : 3001;
            ssize_t r = write(fd, p + done, k);
            if (r <= 0)
                _exit(1);
            done += (size_t)r;
        }
        _exit(0);
    }
    return pid;
}

static void test_pipe(void **state)
{
    const size_t size = 3 * CHUNK + 11;
    unsigned char *data = malloc(size), *out = malloc(size + 1);
    eddy_error_t err = {{0}};
    struct bcast_file_info info;
    uint8_t want[16];
    bcast_src_t *s;
    int pfd[2], status;
    pid_t pid;

    fill(data, size, 42);
    assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
    pid = spawn_writer(pfd[1], size, 42);
    close(pfd[1]);
    assert_non_null(s = bcast_src_create(pfd[0], CHUNK, 0, &err));
    assert_int_equal(bcast_src_size(s), -1);
    /* Full chunks despite the writer's small writes. */
    assert_int_equal(drain(s, out, size + 1, CHUNK, NULL), 4);
    assert_memory_equal(out, data, size);
    assert_int_equal(bcast_src_finish(s, &info), 0);
    assert_int_equal(info.size, size);
    hash_of(data, size, want);
    assert_memory_equal(info.hash, want, 16);
    bcast_src_destroy(s);
    close(pfd[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    free(data);
    free(out);
}

/* A non-blocking pipe: EAGAIN when empty, partial chunks otherwise, and
 * nothing lost across the EAGAIN. */
static void test_pipe_nonblocking(void **state)
{
    eddy_error_t err = {{0}};
    struct bcast_file_info info;
    struct bcast_chunk c;
    uint8_t want[16];
    bcast_src_t *s;
    int pfd[2];

    assert_int_equal(pipe2(pfd, O_CLOEXEC | O_NONBLOCK), 0);
    assert_non_null(s = bcast_src_create(pfd[0], CHUNK, 0, &err));
    errno = 0;
    assert_int_equal(bcast_src_next(s, &c, &err), -1);
    assert_int_equal(errno, EAGAIN);
    assert_int_equal(write(pfd[1], "hello ", 6), 6);
    assert_int_equal(bcast_src_next(s, &c, &err), 1);
    assert_int_equal(c.offset, 0);
    assert_int_equal(c.rawlen, 6);
    assert_memory_equal(c.data, "hello ", 6);
    assert_int_equal(write(pfd[1], "world", 5), 5);
    close(pfd[1]);
    assert_int_equal(bcast_src_next(s, &c, &err), 1);
    assert_int_equal(c.offset, 6);
    assert_int_equal(c.rawlen, 5);
    assert_int_equal(bcast_src_next(s, &c, &err), 0);
    assert_int_equal(bcast_src_finish(s, &info), 0);
    assert_int_equal(info.size, 11);
    hash_of("hello world", 11, want);
    assert_memory_equal(info.hash, want, 16);
    bcast_src_destroy(s);
    close(pfd[0]);
}

static void test_mode_mtime(void **state)
{
    eddy_error_t err = {{0}};
    struct bcast_file_info info;
    struct bcast_chunk c;
    struct timespec ts[2] = {{1000, 0}, {1234567890, 123456789}};
    bcast_src_t *s;
    int fd;

    fd = make_file("modes", "x", 1);
    assert_int_equal(fchmod(fd, 04751), 0);
    assert_int_equal(futimens(fd, ts), 0);
    assert_non_null(s = bcast_src_create(fd, 0, BCAST_F_PRESERVE, &err));
    assert_int_equal(bcast_src_next(s, &c, &err), 1);
    assert_int_equal(bcast_src_next(s, &c, &err), 0);
    assert_int_equal(bcast_src_finish(s, &info), 0);
    assert_int_equal(info.mode, 04751);
    assert_int_equal(info.mtime_sec, 1234567890);
    assert_int_equal(info.mtime_nsec, 123456789);
    bcast_src_destroy(s);
    close(fd);
}

/* A shrinking file is an error, not a short file with a good hash. */
static void test_shrinks(void **state)
{
    unsigned char data[3 * 1024];
    eddy_error_t err = {{0}};
    struct bcast_chunk c;
    bcast_src_t *s;
    int fd;

    fill(data, sizeof(data), 5);
    fd = make_file("shrink", data, sizeof(data));
    assert_non_null(s = bcast_src_create(fd, 1024, 0, &err));
    assert_int_equal(bcast_src_next(s, &c, &err), 1);
    assert_int_equal(ftruncate(fd, 1500), 0);
    errno = 0;
    assert_int_equal(bcast_src_next(s, &c, &err), -1);
    assert_int_equal(errno, EIO);
    assert_non_null(strstr(err.text, "shrank"));
    bcast_src_destroy(s);
    close(fd);
}

static void test_create_errors(void **state)
{
    eddy_error_t err = {{0}};
    char path[512];
    int fd;

    errno = 0;
    assert_null(bcast_src_create(0, BCAST_CHUNK_MAX + 1, 0, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "chunk size"));

    errno = 0;
    assert_null(bcast_src_create(0, 0, 0x100, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "unknown flags 0x100"));

    errno = 0;
    assert_null(bcast_src_create(-1, 0, 0, &err));
    assert_int_equal(errno, EBADF);

    fd = open(tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    errno = 0;
    assert_null(bcast_src_create(fd, 0, 0, &err));
    assert_int_equal(errno, EISDIR);
    close(fd);

    snprintf(path, sizeof(path), "%s/wronly", tmpdir);
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    errno = 0;
    assert_null(bcast_src_create(fd, 0, 0, &err));
    assert_int_equal(errno, EBADF);
    assert_non_null(strstr(err.text, "not open for reading"));
    close(fd);

    fd = open(path, O_PATH | O_CLOEXEC);
    errno = 0;
    assert_null(bcast_src_create(fd, 0, 0, &err));
    assert_int_equal(errno, EBADF);
    close(fd);
}

static void test_bad_args(void **state)
{
    struct bcast_file_info info;
    struct bcast_chunk c;

    errno = 0;
    assert_int_equal(bcast_src_next(NULL, &c, NULL), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(bcast_src_finish(NULL, &info), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(bcast_src_size(NULL), -1);
    errno = 42;
    bcast_src_destroy(NULL);
    assert_int_equal(errno, 42);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_incompressible),
        cmocka_unit_test(test_default_chunksize),
        cmocka_unit_test(test_offset_ignored),
        cmocka_unit_test(test_sparse),
        cmocka_unit_test(test_all_hole),
        cmocka_unit_test(test_pipe),
        cmocka_unit_test(test_pipe_nonblocking),
        cmocka_unit_test(test_mode_mtime),
        cmocka_unit_test(test_shrinks),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_bad_args),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, setup, teardown);
}
