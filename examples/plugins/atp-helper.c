/* atp-helper.c - the helper atp-like.so starts on each node: given the
 * pids of the node's tasks, it records them (in $ATP_LIKE_OUT/helper.PID,
 * "PID: pid pid ...", if ATP_LIKE_OUT is set) and stays until they are
 * all gone, as a stack-trace collector would wait to be needed. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    const char *dir = getenv("ATP_LIKE_OUT");
    struct timespec tick = {0, 50 * 1000 * 1000};

    if (dir && *dir) {
        char path[4096], tmp[4200];
        FILE *f;
        snprintf(path, sizeof(path), "%s/helper.%d", dir, (int)getpid());
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        if ((f = fopen(tmp, "w"))) {
            fprintf(f, "%d:", (int)getpid());
            for (int i = 1; i < argc; i++)
                fprintf(f, " %s", argv[i]);
            fputc('\n', f);
            if (fclose(f) == 0)
                rename(tmp, path);
        }
    }
    /* wait until every task is gone */
    for (;;) {
        int alive = 0;
        for (int i = 1; i < argc; i++) {
            pid_t pid = (pid_t)atoi(argv[i]);
            if (pid > 0 && (kill(pid, 0) == 0 || errno == EPERM))
                alive++;
        }
        if (!alive)
            return 0;
        nanosleep(&tick, NULL);
    }
}
