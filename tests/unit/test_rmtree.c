/* test_rmtree.c - unit tests for src/common/rmtree.c
 *
 * Every test works in its own mkdtemp directory under /tmp, removed at
 * teardown (with rm -rf semantics of our own, should a test fail).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/common/rmtree.h"

struct fixture {
    char dir[64];
};

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));

    if (!fx)
        return -1;
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/test_rmtree.XXXXXX");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    char cmd[256];

    /* the code under test may have failed: fall back to rm */
    if (access(fx->dir, F_OK) == 0) {
        snprintf(cmd, sizeof(cmd), "chmod -R u+rwx '%s'; rm -rf '%s'", fx->dir,
                 fx->dir);
        if (system(cmd) != 0)
            return -1;
    }
    free(fx);
    return 0;
}

/* dir/name as a path (static buffer per call site is enough here). */
static const char *at(const char *dir, const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

static void make_file(const char *path, const char *content)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    assert_true(fputs(content, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    assert_non_null(d);
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* A tree of files, empty and full directories, a fifo and symlinks
 * pointing out of it (to a directory with content, to /, dangling): the
 * tree goes, everything outside stays. */
static void test_tree_and_symlinks(void **state)
{
    struct fixture *fx = *state;
    char tree[128], outside[128], p[256], q[256];
    eddy_error_t err = {{0}};
    struct stat st;

    at(fx->dir, "tree", tree, sizeof(tree));
    at(fx->dir, "outside", outside, sizeof(outside));
    assert_int_equal(mkdir(tree, 0700), 0);
    assert_int_equal(mkdir(outside, 0700), 0);
    make_file(at(outside, "keep", p, sizeof(p)), "precious\n");
    assert_int_equal(mkdir(at(outside, "subdir", p, sizeof(p)), 0700), 0);

    make_file(at(tree, "file", p, sizeof(p)), "x");
    assert_int_equal(mkdir(at(tree, "empty", p, sizeof(p)), 0700), 0);
    assert_int_equal(mkdir(at(tree, "full", p, sizeof(p)), 0700), 0);
    make_file(at(tree, "full/a", p, sizeof(p)), "a");
    assert_int_equal(mkdir(at(tree, "full/deeper", p, sizeof(p)), 0700), 0);
    make_file(at(tree, "full/deeper/b", p, sizeof(p)), "b");
    assert_int_equal(mkfifo(at(tree, "fifo", p, sizeof(p)), 0600), 0);
    assert_int_equal(symlink(outside, at(tree, "to-outside", p, sizeof(p))), 0);
    assert_int_equal(symlink("/", at(tree, "to-root", p, sizeof(p))), 0);
    assert_int_equal(
        symlink(outside, at(tree, "full/deeper/out", p, sizeof(p))), 0);
    assert_int_equal(symlink("nowhere", at(tree, "dangling", p, sizeof(p))), 0);
    /* a hard link to a file outside: only the link goes */
    assert_int_equal(
        link(at(outside, "keep", q, sizeof(q)), at(tree, "hard", p, sizeof(p))),
        0);

    assert_int_equal(rmtree(tree, &err), 0);
    assert_int_equal(lstat(tree, &st), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(stat(at(outside, "keep", p, sizeof(p)), &st), 0);
    assert_int_equal(st.st_size, 9);
    assert_int_equal(st.st_nlink, 1);
    assert_int_equal(stat(at(outside, "subdir", p, sizeof(p)), &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(stat("/", &st), 0);
}

/* The top itself must be a directory, not a symlink to one. */
static void test_top_not_a_dir(void **state)
{
    struct fixture *fx = *state;
    char target[128], link_[128], file[128], p[256];
    eddy_error_t err = {{0}};
    struct stat st;

    at(fx->dir, "target", target, sizeof(target));
    at(fx->dir, "link", link_, sizeof(link_));
    at(fx->dir, "file", file, sizeof(file));
    assert_int_equal(mkdir(target, 0700), 0);
    make_file(at(target, "keep", p, sizeof(p)), "k");
    assert_int_equal(symlink(target, link_), 0);
    make_file(file, "f");

    errno = 0;
    assert_int_equal(rmtree(link_, &err), -1);
    assert_true(errno == ELOOP || errno == ENOTDIR);
    assert_non_null(strstr(err.text, link_));
    assert_int_equal(lstat(link_, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(stat(at(target, "keep", p, sizeof(p)), &st), 0);

    errno = 0;
    assert_int_equal(rmtree(file, &err), -1);
    assert_int_equal(errno, ENOTDIR);
    assert_int_equal(stat(file, &st), 0);
}

static void test_missing_and_bad_args(void **state)
{
    struct fixture *fx = *state;
    char missing[128];
    eddy_error_t err = {{0}};

    at(fx->dir, "missing", missing, sizeof(missing));
    errno = 0;
    assert_int_equal(rmtree(missing, &err), -1);
    assert_int_equal(errno, ENOENT);
    assert_non_null(strstr(err.text, missing));

    errno = 0;
    assert_int_equal(rmtree(NULL, &err), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(rmtree("", NULL), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(rmtree_at(AT_FDCWD, NULL, NULL), -1);
    assert_int_equal(errno, EINVAL);
}

/* Directories of mode 0500 and 0000 with content, and a 0500 top: a task
 * may leave them so.  (As root the modes do not bite; the tree must go
 * all the same.) */
static void test_readonly_dirs(void **state)
{
    struct fixture *fx = *state;
    char tree[128], p[256];
    eddy_error_t err = {{0}};
    struct stat st;

    at(fx->dir, "tree", tree, sizeof(tree));
    assert_int_equal(mkdir(tree, 0700), 0);
    assert_int_equal(mkdir(at(tree, "ro", p, sizeof(p)), 0700), 0);
    make_file(at(tree, "ro/f", p, sizeof(p)), "f");
    assert_int_equal(mkdir(at(tree, "ro/sub", p, sizeof(p)), 0700), 0);
    make_file(at(tree, "ro/sub/g", p, sizeof(p)), "g");
    assert_int_equal(chmod(at(tree, "ro/sub", p, sizeof(p)), 0500), 0);
    assert_int_equal(chmod(at(tree, "ro", p, sizeof(p)), 0500), 0);
    assert_int_equal(mkdir(at(tree, "none", p, sizeof(p)), 0700), 0);
    make_file(at(tree, "none/h", p, sizeof(p)), "h");
    assert_int_equal(chmod(at(tree, "none", p, sizeof(p)), 0), 0);
    assert_int_equal(chmod(tree, 0500), 0);

    assert_int_equal(rmtree(tree, &err), 0);
    assert_int_equal(lstat(tree, &st), -1);
    assert_int_equal(errno, ENOENT);
}

/* A chain of directories far deeper than PATH_MAX and than the fd limit
 * (which is lowered for the removal), with files beside each directory so
 * that the walk has to come back to levels it closed. */
static void test_deep_tree(void **state)
{
    struct fixture *fx = *state;
    const int depth = 3000;
    char tree[128];
    eddy_error_t err = {{0}};
    struct rlimit old, low;
    struct stat st;
    int fd, next, fds;

    at(fx->dir, "deep", tree, sizeof(tree));
    assert_int_equal(mkdir(tree, 0700), 0);
    fd = open(tree, O_RDONLY | O_DIRECTORY);
    assert_true(fd >= 0);
    for (int i = 0; i < depth; i++) {
        int f = openat(fd, i % 2 ? "a-file" : "z-file",
                       O_WRONLY | O_CREAT | O_EXCL, 0600);
        assert_true(f >= 0);
        close(f);
        if (i % 100 == 0)
            assert_int_equal(symlinkat("/", fd, "root-link"), 0);
        assert_int_equal(mkdirat(fd, "dir", 0700), 0);
        next = openat(fd, "dir", O_RDONLY | O_DIRECTORY);
        assert_true(next >= 0);
        close(fd);
        fd = next;
    }
    close(fd);

    fds = count_fds();
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    low = old;
    low.rlim_cur = (rlim_t)fds + RMTREE_OPEN_MAX + 8;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    assert_int_equal(rmtree(tree, &err), 0);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    assert_int_equal(lstat(tree, &st), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(count_fds(), fds);
    assert_int_equal(stat("/", &st), 0);
}

/* Many entries, some of them directories with content: the walk goes
 * back to each partly read directory. */
static void test_wide_tree(void **state)
{
    struct fixture *fx = *state;
    char tree[128], p[256];
    eddy_error_t err = {{0}};
    struct stat st;
    int dfd;

    at(fx->dir, "wide", tree, sizeof(tree));
    assert_int_equal(mkdir(tree, 0700), 0);
    dfd = open(tree, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);
    for (int i = 0; i < 500; i++) {
        snprintf(p, sizeof(p), "e%d", i);
        if (i % 5 == 0) {
            int sub;
            assert_int_equal(mkdirat(dfd, p, 0700), 0);
            sub = openat(dfd, p, O_RDONLY | O_DIRECTORY);
            assert_true(sub >= 0);
            for (int k = 0; k < 3; k++) {
                char n[16];
                int f;
                snprintf(n, sizeof(n), "f%d", k);
                f = openat(sub, n, O_WRONLY | O_CREAT, 0600);
                assert_true(f >= 0);
                close(f);
            }
            close(sub);
        } else {
            int f = openat(dfd, p, O_WRONLY | O_CREAT, 0600);
            assert_true(f >= 0);
            close(f);
        }
    }
    close(dfd);
    assert_int_equal(rmtree(tree, &err), 0);
    assert_int_equal(lstat(tree, &st), -1);
}

/* Relative to a directory fd, as job-exec could use it. */
static void test_rmtree_at(void **state)
{
    struct fixture *fx = *state;
    char p[256];
    eddy_error_t err = {{0}};
    struct stat st;
    int dfd = open(fx->dir, O_RDONLY | O_DIRECTORY);

    assert_true(dfd >= 0);
    assert_int_equal(mkdir(at(fx->dir, "rel", p, sizeof(p)), 0700), 0);
    make_file(at(fx->dir, "rel/x", p, sizeof(p)), "x");
    assert_int_equal(rmtree_at(dfd, "rel", &err), 0);
    assert_int_equal(fstatat(dfd, "rel", &st, 0), -1);
    assert_int_equal(errno, ENOENT);
    errno = 0;
    assert_int_equal(rmtree_at(dfd, "rel", &err), -1);
    assert_int_equal(errno, ENOENT);
    assert_non_null(strstr(err.text, "rel"));
    close(dfd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tree_and_symlinks, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_top_not_a_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_and_bad_args, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_readonly_dirs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deep_tree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wide_tree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rmtree_at, setup, teardown),
    };
    const char *s = getenv("EDDY_TEST_TIMEOUT_SCALE");

    alarm((unsigned)(60 * (s && atoi(s) > 0 ? atoi(s) : 1)));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
