/* tempname.c - names for temp entries kept beside their destination. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "tempname.h"

/* ".NAME.eddy-XXXXXX" has 13 bytes around NAME, which is cut so the whole
 * fits in NAME_MAX. */
#define TMP_EXTRA 13
#define TMP_NAME_CUT (NAME_MAX - TMP_EXTRA)

/* Fill 'buf' with 6 characters for a temp name. */
static void random_suffix(char buf[7])
{
    static const char set[] = "abcdefghijklmnopqrstuvwxyz"
                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static _Atomic unsigned counter;
    uint64_t r;

    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
        struct timespec ts;
        /* Uniqueness comes from the caller's exclusive create and
         * retries; this only spreads the names. */
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
            ((uint64_t)getpid() << 40) ^ (uint64_t)++counter * 2654435761u;
    }
    for (int i = 0; i < 6; i++) {
        buf[i] = set[r % (sizeof(set) - 1)];
        r /= sizeof(set) - 1;
    }
    buf[6] = '\0';
}

char *tempname_create(const char *name)
{
    char sfx[7];
    size_t n = strlen(name);
    int cut = (int)(n < TMP_NAME_CUT ? n : TMP_NAME_CUT);
    size_t sz = (size_t)cut + TMP_EXTRA + 1;
    char *s = malloc(sz);

    if (!s) {
        errno = ENOMEM;
        return NULL;
    }
    random_suffix(sfx);
    snprintf(s, sz, ".%.*s.eddy-%s", cut, name, sfx);
    return s;
}
