/* sampler.c - what the samplers share (see sampler.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "src/tools/sampler.h"

void sample_init(struct sample *s, uint32_t rank, pid_t pid)
{
    memset(s, 0, sizeof(*s));
    s->rank = rank;
    s->pid = pid;
}

void sample_release(struct sample *s)
{
    int saved = errno;
    uint32_t rank = s->rank;
    pid_t pid = s->pid;

    stacktree_destroy(s->tree);
    sample_init(s, rank, pid);
    errno = saved;
}

long sampler_ms_left(const struct sampler_opts *opts)
{
    struct timespec now;
    long ms;

    clock_gettime(CLOCK_MONOTONIC, &now);
    ms = (long)(opts->deadline.tv_sec - now.tv_sec) * 1000 +
         (opts->deadline.tv_nsec - now.tv_nsec) / 1000000;
    return ms > 0 ? ms : 0;
}

char sampler_proc_state(pid_t pid)
{
    char path[64], buf[512], *p;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* "PID (COMM) S ...": COMM may hold ')' and spaces, so the last ')' */
    if (!(p = strrchr(buf, ')')) || p[1] != ' ' || p[2] == '\0')
        return 0;
    return p[2];
}

void sampler_clean_name(char *buf, const char *name, bool cut)
{
    size_t i, len = strlen(name);

    if (len == 0) {
        memcpy(buf, "??", 3);
        return;
    }
    if (len > STACKTREE_NAME_MAX) {
        len = STACKTREE_NAME_MAX;
        cut = true;
    }
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        buf[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    buf[len] = '\0';
    if (cut && len >= 3)
        memcpy(buf + len - 3, "...", 3);
}
