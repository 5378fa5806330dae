/* stack-target.c - a process stuck in known call chains, for eddy-stackd's
 * tests and bench, and an MPI-free "hung job" for trying `eddy stack`.
 *
 *   eddy-stack-target [--threads=N] [--ready=FILE] [wait|spin|rank|vfork]
 *
 * The main thread ends up in
 *   main > level_one > level_two > wait_forever   (mode "wait", default)
 *   main > level_one > level_two > spin           (mode "spin")
 * and with "rank" odd EDDY_TASK_RANKs spin and even ones wait.  With
 * "vfork" the main thread is stuck in vfork() (state D, unkillable by
 * anything but SIGKILL, and deaf to ptrace until the child goes) under
 *   main > level_one > level_two > stuck_in_vfork
 * because the child pauses instead of calling exec: a task that cannot be
 * stopped, as one in uninterruptible sleep on a hung file system.  Its
 * pid is the first line of FILE.child when --ready is given.  Each of
 * the N extra threads ends up in
 *   ... > worker > worker_level > wait_forever
 * spin never calls anything, so a spinning thread's innermost frame is
 * always spin; a waiting one sits in pause() under wait_forever.
 *
 * --ready=FILE tells when every thread has reached its last function
 * without disturbing any stack: FILE is made N + 1 bytes long and mapped
 * shared, and each thread stores an 'R' in its byte as the first thing
 * its last function does (a store, no call).  A waiter polls until FILE
 * holds N + 1 'R's.
 *
 * Built with -O0 -g and every function noinline, so frames and names are
 * the same whatever the build type.  Runs until killed.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

/* More threads than a test wants; keeps the ready file small. */
#define THREADS_MAX 256

static volatile char *ready_map; /* one byte per thread, main's first */
static volatile unsigned long spins;

NOINLINE static void wait_forever(int slot)
{
    if (ready_map)
        ready_map[slot] = 'R';
    for (;;)
        pause();
}

/* No call after the mark: the innermost frame stays spin. */
NOINLINE static void spin(int slot)
{
    if (ready_map)
        ready_map[slot] = 'R';
    for (;;)
        spins++;
}

/* The child shares our memory until it execs or exits, which it never
 * does: it marks us ready, writes its pid and waits. */
NOINLINE static void stuck_in_vfork(const char *ready)
{
    char path[4096];
    pid_t pid = vfork();

    if (pid == 0) {
        snprintf(path, sizeof(path), "%s.child", ready ? ready : "/dev/null");
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dprintf(fd, "%d\n", (int)getpid());
            close(fd);
        }
        if (ready_map)
            ready_map[0] = 'R';
        for (;;)
            pause();
    }
    wait_forever(0);
}

NOINLINE static void level_two(int mode, const char *ready)
{
    if (mode == 1)
        spin(0);
    else if (mode == 2)
        stuck_in_vfork(ready);
    else
        wait_forever(0);
}

NOINLINE static void level_one(int mode, const char *ready)
{
    level_two(mode, ready);
}

NOINLINE static void worker_level(int slot)
{
    wait_forever(slot);
}

NOINLINE static void *worker(void *arg)
{
    worker_level((int)(long)arg);
    return NULL;
}

/* Map FILE, n bytes of zeros. */
static int map_ready(const char *path, int n)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    void *p;

    if (fd < 0 || ftruncate(fd, n) < 0) {
        fprintf(stderr, "eddy-stack-target: %s: %s\n", path, strerror(errno));
        return -1;
    }
    p = mmap(NULL, (size_t)n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        fprintf(stderr, "eddy-stack-target: mmap %s: %s\n", path,
                strerror(errno));
        return -1;
    }
    ready_map = p;
    return 0;
}

int main(int argc, char **argv)
{
    const char *ready = NULL, *mode = "wait", *rank;
    int nthreads = 0, branch, i; /* 0 wait, 1 spin, 2 vfork */

    for (i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--threads=", 10) == 0)
            nthreads = atoi(argv[i] + 10);
        else if (strncmp(argv[i], "--ready=", 8) == 0)
            ready = argv[i] + 8;
        else if (argv[i][0] != '-')
            mode = argv[i];
        else
            goto usage;
    }
    if (nthreads < 0 || nthreads > THREADS_MAX)
        goto usage;
    if (strcmp(mode, "spin") == 0)
        branch = 1;
    else if (strcmp(mode, "wait") == 0)
        branch = 0;
    else if (strcmp(mode, "rank") == 0)
        branch = (rank = getenv("EDDY_TASK_RANK")) && atoi(rank) % 2 == 1;
    else if (strcmp(mode, "vfork") == 0)
        branch = 2;
    else
        goto usage;
    if (ready && map_ready(ready, nthreads + 1) < 0)
        return 1;
    for (i = 0; i < nthreads; i++) {
        pthread_t t;
        int e = pthread_create(&t, NULL, worker, (void *)(long)(i + 1));
        if (e != 0) {
            fprintf(stderr, "eddy-stack-target: thread: %s\n", strerror(e));
            return 1;
        }
    }
    level_one(branch, ready);
    return 0;
usage:
    fprintf(stderr, "Usage: eddy-stack-target [--threads=N] [--ready=FILE] "
                    "[wait|spin|rank|vfork]\n");
    return 2;
}
