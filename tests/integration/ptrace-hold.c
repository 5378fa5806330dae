/* ptrace-hold.c - a stand-in for a debugger that attaches to one process
 * and keeps it, for the MPIR partial-attach tests.
 *
 *   eddy-ptrace-hold PID READYFILE
 *
 * Attaches to PID (PTRACE_SEIZE, so the stop the process is in is not
 * disturbed), creates READYFILE once attached, then waits.  On SIGTERM it
 * detaches and sends the process SIGCONT, as a debugger's "continue then
 * detach" would, and exits 0.  It exits 1 with a message if it cannot
 * attach.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <unistd.h>

static volatile sig_atomic_t done;

static void on_term(int sig)
{
    (void)sig;
    done = 1;
}

int main(int argc, char **argv)
{
    struct sigaction sa = {.sa_handler = on_term};
    pid_t pid;
    int fd;

    if (argc != 3) {
        fprintf(stderr, "usage: eddy-ptrace-hold PID READYFILE\n");
        return 2;
    }
    pid = (pid_t)atoi(argv[1]);
    sigaction(SIGTERM, &sa, NULL);
    if (ptrace(PTRACE_SEIZE, pid, NULL, NULL) < 0) {
        fprintf(stderr, "eddy-ptrace-hold: attach to %d: %s\n", (int)pid,
                strerror(errno));
        return 1;
    }
    if ((fd = open(argv[2], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) <
        0) {
        fprintf(stderr, "eddy-ptrace-hold: %s: %s\n", argv[2], strerror(errno));
        return 1;
    }
    close(fd);
    while (!done)
        pause();
    /* a seized tracee that is not in a ptrace-stop cannot be detached
     * explicitly (ESRCH); our exit detaches it anyway */
    (void)ptrace(PTRACE_DETACH, pid, NULL, NULL);
    kill(pid, SIGCONT);
    return 0;
}
