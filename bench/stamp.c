/* stamp.c - print "stamp SECONDS" (CLOCK_REALTIME) as the first thing in
 * main and exit: the release-to-running benchmark's task.  It links only
 * libc, so its start-up cost is the floor of any dynamically linked
 * program's. */
#include <stdio.h>
#include <time.h>

int main(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    printf("stamp %ld.%09ld\n", (long)ts.tv_sec, ts.tv_nsec);
    return 0;
}
