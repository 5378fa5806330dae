/* release-baseline - the machine's own cost of what `eddy job release`
 * does for --stop=fork, without eddy: fork N children held on one pipe,
 * release them all at once (one close()), each execs PROG, and report
 * from the release to the latest "stamp SECONDS" line a child printed.
 *
 * Usage: bench-release-baseline N PROG [ARGS...]
 * Prints: "baseline release to all running S s (N tasks)".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    int n = argc > 2 ? atoi(argv[1]) : 0;
    int hold[2], out[2];
    double t0, last = 0, t;
    char line[128];
    FILE *f;
    int stamps = 0;

    if (n <= 0 || pipe(hold) < 0 || pipe(out) < 0) {
        fprintf(stderr, "usage: bench-release-baseline N PROG [ARGS...]\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "fork: %s\n", strerror(errno));
            return 1;
        }
        if (pid == 0) {
            char c;
            close(hold[1]);
            close(out[0]);
            dup2(out[1], STDOUT_FILENO);
            close(out[1]);
            while (read(hold[0], &c, 1) < 0 && errno == EINTR)
                ;
            close(hold[0]);
            execvp(argv[2], argv + 2);
            _exit(127);
        }
    }
    close(hold[0]);
    close(out[1]);
    usleep(200000); /* let every child reach its read() */
    t0 = now();
    close(hold[1]); /* the release: every held child wakes up */
    if (!(f = fdopen(out[0], "r")))
        return 1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "stamp %lf", &t) == 1 && ++stamps && t > last)
            last = t;
    while (wait(NULL) > 0)
        ;
    printf("baseline release to all running %.3f s (%d of %d tasks)\n",
           last - t0, stamps, n);
    return 0;
}
