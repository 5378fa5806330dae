/* test_bcast_shm.c - unit tests for src/common/bcast_shm.c
 *
 * A sender's slots are attached through /proc by this process and by a
 * forked child (another pid, as a broker would be); bytes written by the
 * sender are what the receiver reads; anything but the sealed memfd with
 * the right cookie is refused, without blocking on a pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/common/bcast_shm.h"

static void fill(void *p, size_t n, unsigned seed)
{
    unsigned char *b = p;

    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(seed + i * 131);
}

static void test_attach_same_process(void **state)
{
    eddy_error_t err = {{0}};
    bcast_shm_t *w, *r;
    unsigned char want[8192];

    (void)state;
    w = bcast_shm_create(&err);
    assert_non_null(w);
    assert_int_equal(bcast_shm_pid(w), getpid());
    assert_true(bcast_shm_fd(w) >= 0);
    assert_int_equal(strlen(bcast_shm_cookie(w)), 2 * BCAST_SHM_COOKIE_SIZE);

    r = bcast_shm_attach(getpid(), bcast_shm_fd(w), bcast_shm_cookie(w), &err);
    assert_non_null(r);
    assert_int_equal(bcast_shm_fd(r), -1);
    /* every slot, including its last byte, is seen by the receiver */
    for (int i = 0; i < BCAST_SHM_SLOTS; i++) {
        unsigned char *s = bcast_shm_slot(w, i);
        assert_non_null(s);
        fill(want, sizeof(want), (unsigned)i);
        memcpy(s, want, sizeof(want));
        s[BCAST_CHUNK_MAX - 1] = (unsigned char)(0x5a + i);
    }
    bcast_shm_close_fd(w); /* the mappings stay */
    assert_int_equal(bcast_shm_fd(w), -1);
    for (int i = 0; i < BCAST_SHM_SLOTS; i++) {
        const unsigned char *s = bcast_shm_slot(r, i);
        fill(want, sizeof(want), (unsigned)i);
        assert_memory_equal(s, want, sizeof(want));
        assert_int_equal(s[BCAST_CHUNK_MAX - 1], 0x5a + i);
    }
    assert_null(bcast_shm_slot(w, -1));
    assert_null(bcast_shm_slot(r, BCAST_SHM_SLOTS));
    bcast_shm_destroy(r);
    bcast_shm_destroy(w);
}

/* Another process (a broker's child) attaches to our fd, reads a slot,
 * and cannot write through its mapping. */
static void test_attach_other_process(void **state)
{
    eddy_error_t err = {{0}};
    bcast_shm_t *w;
    unsigned char want[4096];
    pid_t pid, parent = getpid();
    int status;

    (void)state;
    w = bcast_shm_create(&err);
    assert_non_null(w);
    fill(want, sizeof(want), 7);
    memcpy(bcast_shm_slot(w, 2), want, sizeof(want));

    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        bcast_shm_t *r = bcast_shm_attach(parent, bcast_shm_fd(w),
                                          bcast_shm_cookie(w), NULL);
        if (!r || memcmp(bcast_shm_slot(r, 2), want, sizeof(want)) != 0)
            _exit(1);
        signal(SIGSEGV, SIG_DFL); /* not a sanitizer's report */
        ((volatile unsigned char *)bcast_shm_slot(r, 2))[0] = 1; /* faults */
        _exit(2);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGSEGV);
    bcast_shm_destroy(w);
}

static void test_sealed(void **state)
{
    eddy_error_t err = {{0}};
    bcast_shm_t *w = bcast_shm_create(&err);

    (void)state;
    assert_non_null(w);
    /* a receiver's mapping can never end up past the end of the file */
    assert_int_equal(ftruncate(bcast_shm_fd(w), 4096), -1);
    assert_int_equal(errno, EPERM);
    assert_int_equal(ftruncate(bcast_shm_fd(w), BCAST_SHM_SIZE + 4096), -1);
    assert_int_equal(errno, EPERM);
    bcast_shm_destroy(w);
}

static void test_refused(void **state)
{
    eddy_error_t err = {{0}};
    bcast_shm_t *w = bcast_shm_create(&err);
    char cookie[BCAST_SHM_COOKIE_HEX];
    char path[] = "/tmp/test_bcast_shm.XXXXXX";
    int fds[2], tmp;

    (void)state;
    assert_non_null(w);
    /* the right file, the wrong cookie (another sender's numbers) */
    snprintf(cookie, sizeof(cookie), "%s", bcast_shm_cookie(w));
    cookie[0] = cookie[0] == '0' ? '1' : '0';
    assert_null(bcast_shm_attach(getpid(), bcast_shm_fd(w), cookie, &err));
    assert_int_equal(errno, ESTALE);
    assert_non_null(strstr(err.text, "cookie"));

    /* a pipe: refused at once, not waited on */
    assert_int_equal(pipe(fds), 0);
    assert_null(bcast_shm_attach(getpid(), fds[0], bcast_shm_cookie(w), &err));
    assert_int_equal(errno, ESTALE);
    close(fds[0]);
    close(fds[1]);

    /* a regular file that is not a sealed memfd */
    tmp = mkstemp(path);
    assert_true(tmp >= 0);
    unlink(path);
    assert_int_equal(ftruncate(tmp, (off_t)BCAST_SHM_SIZE), 0);
    assert_null(bcast_shm_attach(getpid(), tmp, bcast_shm_cookie(w), &err));
    assert_int_equal(errno, ESTALE);
    close(tmp);

    /* no such fd (another host's numbers) */
    assert_null(bcast_shm_attach(getpid(), 100000, bcast_shm_cookie(w), &err));
    assert_int_equal(errno, ENOENT);

    /* malformed arguments */
    assert_null(
        bcast_shm_attach(0, bcast_shm_fd(w), bcast_shm_cookie(w), &err));
    assert_int_equal(errno, EINVAL);
    assert_null(bcast_shm_attach(getpid(), -1, bcast_shm_cookie(w), &err));
    assert_int_equal(errno, EINVAL);
    assert_null(bcast_shm_attach(getpid(), bcast_shm_fd(w), "abc", &err));
    assert_int_equal(errno, EINVAL);
    assert_null(bcast_shm_attach(getpid(), bcast_shm_fd(w),
                                 "0123456789abcdef0123456789abcdeg", &err));
    assert_int_equal(errno, EINVAL);
    assert_null(bcast_shm_attach(getpid(), bcast_shm_fd(w), NULL, &err));
    assert_int_equal(errno, EINVAL);
    bcast_shm_destroy(w);
}

static void test_null(void **state)
{
    (void)state;
    errno = 42;
    bcast_shm_destroy(NULL);
    bcast_shm_close_fd(NULL);
    assert_int_equal(errno, 42);
    assert_int_equal(bcast_shm_fd(NULL), -1);
    assert_int_equal(bcast_shm_pid(NULL), -1);
    assert_null(bcast_shm_slot(NULL, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attach_same_process),
        cmocka_unit_test(test_attach_other_process),
        cmocka_unit_test(test_sealed),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_null),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
