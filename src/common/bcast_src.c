/* bcast_src.c - cut a file into broadcast chunks.
 *
 * Regular files are walked extent by extent with SEEK_DATA/SEEK_HOLE, so a
 * sparse 1 GiB file with a few megabytes of data costs a few megabytes on
 * the wire; the hash still covers the holes (as zeros) so that the sink,
 * which recreates them with ftruncate(), checks the same logical content.
 * pread() keeps us independent of the fd's offset.  Streams are read with
 * read() into a full chunk before it is handed out, so that a pipe's small
 * reads do not turn into many small messages.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "bcast_src.h"
#include "errprintf.h"

/* zstd level, measured on this kind of machine with `zstd -b1 -e3 -B1M`
 * over a 516 MiB debugger-like bundle (gdb, its libraries, libpython, the
 * largest system .so files), each 1 MiB chunk compressed on its own:
 * level 1 451 MB/s ratio 2.75, level 3 272 MB/s ratio 3.06.  Level 1 is
 * the faster and still shrinks binaries almost threefold; decompression
 * (~1.1 GB/s) is the same for both. */
#define BCAST_ZSTD_LEVEL 1

/* Holes are hashed as zeros in pieces of this size (fits in L2). */
#define ZEROS_SIZE (64u << 10)
static const unsigned char zeros[ZEROS_SIZE];

struct bcast_src {
    int fd;
    int flags;
    bool regular;
    size_t chunksize;
    uint64_t size;     /* regular: fixed at create; stream: bytes so far */
    uint64_t pos;      /* next offset to read */
    uint64_t data_end; /* regular: end of the data extent holding pos */
    uint64_t hashed;   /* bytes fed to the hash (end of the last chunk) */
    bool eof;
    uint32_t mode;
    struct timespec mtime;
    XXH3_state_t *xxh;
    void *buf;
    void *zbuf;
    size_t zcap;
    ZSTD_CCtx *cctx;
};

static int hash_zeros(XXH3_state_t *xxh, uint64_t n)
{
    while (n > 0) {
        size_t k = n < ZEROS_SIZE ? (size_t)n : ZEROS_SIZE;
        if (XXH3_128bits_update(xxh, zeros, k) != XXH_OK) {
            errno = EINVAL;
            return -1;
        }
        n -= k;
    }
    return 0;
}

bcast_src_t *bcast_src_create(int fd,
                              size_t chunksize,
                              int flags,
                              eddy_error_t *err)
{
    bcast_src_t *s = NULL;
    struct stat st;
    int fl;

    if (flags & ~BCAST_F_ALL) {
        errno = EINVAL;
        errprintf(err, "bcast: unknown flags 0x%x", flags & ~BCAST_F_ALL);
        return NULL;
    }
    if (chunksize == 0)
        chunksize = BCAST_CHUNK_DEFAULT;
    if (chunksize > BCAST_CHUNK_MAX) {
        errno = EINVAL;
        errprintf(err, "bcast: chunk size %zu is above the limit of %u",
                  chunksize, BCAST_CHUNK_MAX);
        return NULL;
    }
    if (fstat(fd, &st) < 0) {
        errprintf(err, "bcast: source fd %d: %s", fd, strerror(errno));
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        errprintf(err, "bcast: source is a directory");
        return NULL;
    }
    if ((fl = fcntl(fd, F_GETFL)) < 0) {
        errprintf(err, "bcast: source fd %d: %s", fd, strerror(errno));
        return NULL;
    }
    if ((fl & O_ACCMODE) == O_WRONLY || (fl & O_PATH)) {
        errno = EBADF;
        errprintf(err, "bcast: source fd %d is not open for reading", fd);
        return NULL;
    }
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > BCAST_SIZE_MAX) {
        errno = EFBIG;
        errprintf(err, "bcast: source is %jd bytes, above the limit of %llu",
                  (intmax_t)st.st_size, BCAST_SIZE_MAX);
        return NULL;
    }

    if (!(s = calloc(1, sizeof(*s))))
        goto nomem;
    s->fd = fd;
    s->flags = flags;
    s->chunksize = chunksize;
    s->regular = S_ISREG(st.st_mode);
    s->size = s->regular ? (uint64_t)st.st_size : 0;
    s->mode = st.st_mode & 07777;
    s->mtime = st.st_mtim;
    if (!(s->buf = malloc(chunksize)))
        goto nomem;
    if (!(s->xxh = XXH3_createState()) || XXH3_128bits_reset(s->xxh) != XXH_OK)
        goto nomem;
    if (flags & BCAST_F_COMPRESS) {
        /* A full bound keeps zstd on its fast path; a result that is not
         * smaller than the input is sent raw instead. */
        s->zcap = ZSTD_compressBound(chunksize);
        if (!(s->zbuf = malloc(s->zcap)) || !(s->cctx = ZSTD_createCCtx()))
            goto nomem;
    }
    return s;
nomem:
    bcast_src_destroy(s);
    errno = ENOMEM;
    errprintf(err, "bcast: out of memory");
    return NULL;
}

void bcast_src_destroy(bcast_src_t *s)
{
    int saved_errno = errno;

    if (s) {
        ZSTD_freeCCtx(s->cctx);
        free(s->zbuf);
        XXH3_freeState(s->xxh);
        free(s->buf);
        free(s);
    }
    errno = saved_errno;
}

int64_t bcast_src_size(const bcast_src_t *s)
{
    return s && s->regular ? (int64_t)s->size : -1;
}

/* Regular file, pos >= data_end: move pos to the next data extent and set
 * data_end to its end.  At the end of the file pos becomes size. */
static void find_data(bcast_src_t *s)
{
    off_t d, h;

    d = lseek(s->fd, (off_t)s->pos, SEEK_DATA);
    if (d < 0) {
        if (errno == ENXIO) { /* nothing but hole up to EOF */
            s->pos = s->size;
            return;
        }
        /* No hole support here: everything is data. */
        s->data_end = s->size;
        return;
    }
    if ((uint64_t)d >= s->size) {
        s->pos = s->size;
        return;
    }
    h = lseek(s->fd, d, SEEK_HOLE);
    /* A file that grows or shrinks under us: never go past the size we
     * promised, and always make progress. */
    if (h < 0 || h <= d || (uint64_t)h > s->size)
        h = (off_t)s->size;
    s->pos = (uint64_t)d;
    s->data_end = (uint64_t)h;
}

/* Fill s->buf with n bytes at 'off' of a regular file. */
static int pread_full(bcast_src_t *s, size_t n, uint64_t off, eddy_error_t *err)
{
    size_t got = 0;

    while (got < n) {
        ssize_t r =
            pread(s->fd, (char *)s->buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return errprintf(err, "bcast: read at offset %ju: %s",
                             (uintmax_t)(off + got), strerror(errno));
        if (r == 0) {
            errno = EIO;
            return errprintf(err,
                             "bcast: source shrank while being read "
                             "(EOF at %ju, expected %ju bytes)",
                             (uintmax_t)(off + got), (uintmax_t)s->size);
        }
        got += (size_t)r;
    }
    return 0;
}

/* Fill s->buf from a stream as far as it goes: returns the byte count (0
 * at EOF), or -1.  A non-blocking fd returns what it has, or EAGAIN. */
static ssize_t read_full(bcast_src_t *s, eddy_error_t *err)
{
    size_t got = 0;

    while (got < s->chunksize) {
        ssize_t r = read(s->fd, (char *)s->buf + got, s->chunksize - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && got > 0)
            break;
        if (r < 0)
            return errprintf(err, "bcast: read: %s", strerror(errno));
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int bcast_src_next(bcast_src_t *s, struct bcast_chunk *c, eddy_error_t *err)
{
    uint64_t off;
    size_t n;
    bool compressed = false;
    const void *data;
    size_t len;

    if (!s || !c) {
        errno = EINVAL;
        return errprintf(err, "bcast: invalid argument");
    }
    if (s->eof)
        return 0;
    if (s->regular) {
        if (s->pos >= s->data_end)
            find_data(s);
        if (s->pos >= s->size) {
            s->eof = true;
            return 0;
        }
        off = s->pos;
        n = s->data_end - off < s->chunksize ? (size_t)(s->data_end - off)
                                             : s->chunksize;
        if (pread_full(s, n, off, err) < 0)
            return -1;
    } else {
        ssize_t r;
        off = s->pos;
        if ((r = read_full(s, err)) < 0)
            return -1;
        if (r == 0) {
            s->eof = true;
            return 0;
        }
        n = (size_t)r;
        if (off + n > BCAST_SIZE_MAX) {
            errno = EFBIG;
            return errprintf(err, "bcast: source is larger than %llu bytes",
                             BCAST_SIZE_MAX);
        }
    }
    if (hash_zeros(s->xxh, off - s->hashed) < 0 ||
        XXH3_128bits_update(s->xxh, s->buf, n) != XXH_OK) {
        errno = EINVAL;
        return errprintf(err, "bcast: hash update failed");
    }
    s->hashed = off + n;
    s->pos = off + n;
    if (!s->regular)
        s->size = s->pos;

    data = s->buf;
    len = n;
    if (s->cctx) {
        size_t z = ZSTD_compressCCtx(s->cctx, s->zbuf, s->zcap, s->buf, n,
                                     BCAST_ZSTD_LEVEL);
        /* Not smaller (or a zstd error, which only memory trouble could
         * cause here): the raw bytes serve as well. */
        if (!ZSTD_isError(z) && z < n) {
            data = s->zbuf;
            len = z;
            compressed = true;
        }
    }
    c->offset = off;
    c->rawlen = (uint32_t)n;
    c->len = (uint32_t)len;
    c->data = data;
    c->compressed = compressed;
    return 1;
}

int bcast_src_finish(bcast_src_t *s, struct bcast_file_info *info)
{
    XXH128_hash_t h;
    XXH128_canonical_t canon;

    if (!s || !info || !s->eof) {
        errno = EINVAL;
        return -1;
    }
    /* A trailing hole; a no-op on later calls. */
    if (hash_zeros(s->xxh, s->size - s->hashed) < 0)
        return -1;
    s->hashed = s->size;
    h = XXH3_128bits_digest(s->xxh);
    XXH128_canonicalFromHash(&canon, h);

    info->size = s->size;
    info->mode = s->mode;
    info->mtime_sec = (int64_t)s->mtime.tv_sec;
    info->mtime_nsec = (uint32_t)s->mtime.tv_nsec;
    memcpy(info->hash, canon.digest, BCAST_HASH_SIZE);
    return 0;
}
