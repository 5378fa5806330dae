/* bcast_shm.c - chunk slots in memory shared by two brokers of one host.
 *
 * Why /proc/PID/fd/FD and not fd passing: broker links are TCP, which
 * cannot carry descriptors, and a named file would need a place both
 * brokers trust and someone to clean it up after a crash.  Opening the
 * sender's fd through /proc needs the same user (ptrace read access to the
 * sender), so it only ever works between brokers of one instance owner on
 * one machine; the random cookie makes sure it is the file meant, not some
 * other process's fd that happens to have the same numbers on another
 * host.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bcast_shm.h"
#include "hex.h"
#include "errprintf.h"

#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

struct bcast_shm {
    void *map;
    int fd;      /* sender: the memfd until closed; receiver: -1 */
    pid_t pid;   /* sender: getpid(); receiver: -1 */
    bool writer; /* the sender's read-write mapping */
    char cookie[BCAST_SHM_COOKIE_HEX];
};

bcast_shm_t *bcast_shm_create(eddy_error_t *err)
{
    unsigned char raw[BCAST_SHM_COOKIE_SIZE];
    bcast_shm_t *m;

    if (!(m = calloc(1, sizeof(*m)))) {
        errno = ENOMEM;
        errprintf(err, "bcast: out of memory");
        return NULL;
    }
    m->map = MAP_FAILED;
    m->fd = -1;
    m->pid = getpid();
    m->writer = true;
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        errprintf(err, "bcast: shared memory: getrandom: %s", strerror(errno));
        goto error;
    }
    hex_encode(raw, sizeof(raw), m->cookie);
    m->fd = memfd_create("eddy-bcast", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (m->fd < 0) {
        errprintf(err, "bcast: shared memory: memfd_create: %s",
                  strerror(errno));
        goto error;
    }
    /* sparse: only the slots' pages in use take memory */
    if (ftruncate(m->fd, (off_t)BCAST_SHM_SIZE) < 0 ||
        fcntl(m->fd, F_ADD_SEALS, SEALS) < 0) {
        errprintf(err, "bcast: shared memory: %s", strerror(errno));
        goto error;
    }
    m->map = mmap(NULL, BCAST_SHM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
                  m->fd, 0);
    if (m->map == MAP_FAILED) {
        errprintf(err, "bcast: shared memory: mmap: %s", strerror(errno));
        goto error;
    }
    memcpy(m->map, raw, sizeof(raw));
    return m;
error:
    bcast_shm_destroy(m);
    return NULL;
}

bcast_shm_t *bcast_shm_attach(pid_t pid,
                              int fd,
                              const char *cookie,
                              eddy_error_t *err)
{
    unsigned char want[BCAST_SHM_COOKIE_SIZE];
    char path[64];
    struct stat st;
    bcast_shm_t *m;
    int seals;

    if (pid <= 0 || fd < 0 || !cookie ||
        hex_decode(cookie, strlen(cookie), want, sizeof(want)) < 0) {
        errno = EINVAL;
        errprintf(err, "bcast: shared memory: bad pid, fd or cookie");
        return NULL;
    }
    if (!(m = calloc(1, sizeof(*m)))) {
        errno = ENOMEM;
        errprintf(err, "bcast: out of memory");
        return NULL;
    }
    m->map = MAP_FAILED;
    m->pid = -1;
    snprintf(m->cookie, sizeof(m->cookie), "%s", cookie);
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
    /* On another host the numbers may name anything: look before
     * opening, so that no device or fifo is ever opened by mistake
     * (O_NONBLOCK in case one is swapped in between). */
    if (stat(path, &st) < 0) {
        errprintf(err, "bcast: shared memory: %s: %s", path, strerror(errno));
        goto error;
    }
    if (!S_ISREG(st.st_mode)) {
        errno = ESTALE;
        errprintf(err, "bcast: shared memory: %s is not a memfd", path);
        goto error;
    }
    if ((m->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0) {
        errprintf(err, "bcast: shared memory: %s: %s", path, strerror(errno));
        goto error;
    }
    if (fstat(m->fd, &st) < 0) {
        errprintf(err, "bcast: shared memory: %s: %s", path, strerror(errno));
        goto error;
    }
    seals = fcntl(m->fd, F_GET_SEALS);
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (uint64_t)st.st_size != BCAST_SHM_SIZE || seals < 0 ||
        (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) !=
            (F_SEAL_SHRINK | F_SEAL_GROW)) {
        errno = ESTALE;
        errprintf(err, "bcast: shared memory: %s is not a sealed memfd of ours",
                  path);
        goto error;
    }
    m->map = mmap(NULL, BCAST_SHM_SIZE, PROT_READ, MAP_SHARED, m->fd, 0);
    if (m->map == MAP_FAILED) {
        errprintf(err, "bcast: shared memory: mmap: %s", strerror(errno));
        goto error;
    }
    if (memcmp(m->map, want, sizeof(want)) != 0) {
        errno = ESTALE;
        errprintf(err, "bcast: shared memory: %s: wrong cookie", path);
        goto error;
    }
    /* the mapping is all we need */
    (void)close(m->fd);
    m->fd = -1;
    return m;
error:
    bcast_shm_destroy(m);
    return NULL;
}

void bcast_shm_destroy(bcast_shm_t *m)
{
    int saved_errno = errno;

    if (m) {
        if (m->map != MAP_FAILED)
            (void)munmap(m->map, BCAST_SHM_SIZE);
        if (m->fd >= 0)
            (void)close(m->fd);
        free(m);
    }
    errno = saved_errno;
}

pid_t bcast_shm_pid(const bcast_shm_t *m)
{
    return m ? m->pid : -1;
}

int bcast_shm_fd(const bcast_shm_t *m)
{
    return m && m->writer ? m->fd : -1;
}

const char *bcast_shm_cookie(const bcast_shm_t *m)
{
    return m ? m->cookie : "";
}

void bcast_shm_close_fd(bcast_shm_t *m)
{
    if (m && m->fd >= 0) {
        (void)close(m->fd);
        m->fd = -1;
    }
}

void *bcast_shm_slot(const bcast_shm_t *m, int i)
{
    if (!m || i < 0 || i >= BCAST_SHM_SLOTS)
        return NULL;
    return (char *)m->map + BCAST_SHM_HEADER + (size_t)i * BCAST_CHUNK_MAX;
}
