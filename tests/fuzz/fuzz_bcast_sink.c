/* fuzz_bcast_sink.c - libFuzzer target for the node side of a file
 * broadcast (src/common/bcast_sink.h): what a broker does with the chunks
 * and the commit that other brokers send it.
 *
 * The input is a small script, all integers little-endian:
 *   header   u8 flags   bits 0-3: BCAST_F_* for bcast_sink_create(),
 *                       bit 4: an unknown flag as well
 *            u8 dest    which destination path (dests[] below)
 *            u8 pre     bit 0: "f" exists beforehand (content "old")
 *   then records until the input ends, each starting with a u8 tag whose
 *   bit 0 says which:
 *   chunk    u8 how     bit 0: say it is compressed (the bytes as given)
 *                       bit 1: compress the bytes for real (zstd)
 *                       bit 2: rawlen from the field, not the byte count
 *                       bit 3: an offset past BCAST_SIZE_MAX (bit 4: near
 *                              UINT64_MAX, to catch overflow)
 *                       bit 5: offset absolute (may go backwards), else
 *                              after the end of the last chunk written
 *                       bit 6: rawlen BCAST_CHUNK_MAX + 1 (bit 7: 0)
 *            u16 offset, u16 rawlen, u16 n, then n bytes
 *   commit   u8 how     bit 0: the hash is the next 16 bytes, else the
 *                              right one
 *                       bit 1: size absolute, else the end + the field
 *                       bit 2: size BCAST_SIZE_MAX + 1
 *                       bit 3: mtime_nsec as given, else modulo 10^9
 *            u16 size, u16 mode, u32 mtime (signed), u32 mtime_nsec,
 *            [16 bytes of hash]
 * Offsets stay under a few MiB and chunks under 64 KiB, so no run makes a
 * big (or a big sparse) file.
 *
 * Beyond "never crash", the target keeps a model of the file (what the
 * sink accepted, gaps as zeros) and checks: a call succeeds exactly when
 * its input is valid; after destroy, the directory holds nothing (or the
 * file that was there before, untouched) unless a commit succeeded, and
 * then exactly the file, with the model's bytes, size and mode: never a
 * temp file.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "src/common/bcast_sink.h"
#include "src/common/rmtree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Chunks start no further than this: the file stays a few MiB. */
#define FUZZ_OFFSET_MAX (4u << 20)
/* A u16 rawlen or size step. */
#define FUZZ_STEP_MAX 65535u
/* The model covers the largest file a run can make: the last chunk, then
 * a trailing hole. */
#define MODEL_SIZE (FUZZ_OFFSET_MAX + 2 * FUZZ_STEP_MAX)

static char dir[256];        /* this process's mkdtemp directory */
static char absdest[300];    /* DIR/f */
static unsigned char *model; /* the file as it should be */
static unsigned char *readbuf;
static unsigned char *zbuf; /* compressed chunks */
static size_t zcap;
static unsigned char *dbuf; /* a compressed chunk, decompressed */
static ZSTD_CCtx *cctx;
static mode_t defmode; /* 0666 & ~umask */

/* Destinations: the first three name DIR/f, the others are refused. */
static const char *const dests[] = {
    "f", "./f", NULL /* absdest */, "d/f", "../f", "", "f/", "a/../f", "f/.",
};
#define NDESTS (sizeof(dests) / sizeof(dests[0]))

/* Where to make the scratch directory: $TMPDIR if set, else a RAM file
 * system if there is one.  Every run creates and removes files (and
 * directories); on a journalled disk that is about 20 times slower, too
 * slow for the replay in `make check`. */
static const char *scratch_base(void)
{
    const char *t = getenv("TMPDIR");

    if (t && *t)
        return t;
    return access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
}

static void cleanup(void)
{
    if (dir[0])
        (void)rmtree(dir, NULL);
}

static void init(void)
{
    const char *t = scratch_base();
    mode_t um;

    snprintf(dir, sizeof(dir), "%s/fuzz_bcast_sink.XXXXXX", t);
    if (!mkdtemp(dir))
        abort();
    atexit(cleanup);
    snprintf(absdest, sizeof(absdest), "%s/f", dir);
    zcap = ZSTD_compressBound(FUZZ_STEP_MAX);
    if (zcap < FUZZ_STEP_MAX)
        zcap = FUZZ_STEP_MAX;
    if (!(model = calloc(1, MODEL_SIZE)) || !(readbuf = malloc(MODEL_SIZE)) ||
        !(zbuf = malloc(zcap)) || !(dbuf = malloc(FUZZ_STEP_MAX)) ||
        !(cctx = ZSTD_createCCtx()))
        abort();
    um = umask(0);
    umask(um);
    defmode = 0666 & ~um;
}

struct reader {
    const uint8_t *p;
    size_t n;
};

static bool get8(struct reader *r, uint8_t *v)
{
    if (r->n < 1)
        return false;
    *v = r->p[0];
    r->p++;
    r->n--;
    return true;
}

static bool get16(struct reader *r, uint16_t *v)
{
    if (r->n < 2)
        return false;
    *v = (uint16_t)(r->p[0] | r->p[1] << 8);
    r->p += 2;
    r->n -= 2;
    return true;
}

static bool get32(struct reader *r, uint32_t *v)
{
    if (r->n < 4)
        return false;
    *v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 |
         (uint32_t)r->p[3] << 24;
    r->p += 4;
    r->n -= 4;
    return true;
}

/* Up to 'want' bytes of input. */
static const uint8_t *getn(struct reader *r, size_t want, size_t *got)
{
    const uint8_t *p = r->p;

    *got = want < r->n ? want : r->n;
    r->p += *got;
    r->n -= *got;
    return p;
}

/* The state of one run. */
struct run {
    bcast_sink_t *k;
    bool open;      /* the sink accepts writes and a commit */
    uint64_t end;   /* end of the last chunk it accepted */
    bool committed; /* and what the file must then be: */
    uint64_t size;
    uint32_t mode;
    int64_t mtime;
    uint32_t nsec;
    int flags;
};

/* The errnos a call may fail with, given what is wrong with its input
 * (the header's lists); none: it must succeed. */
struct expect {
    int e[4];
    int n;
};

static void expect_add(struct expect *x, int e)
{
    if (x->n < 4)
        x->e[x->n++] = e;
}

/* Check a call's result 'rc' against 'x'.  A full disk is the only
 * failure the input cannot cause. */
static void check_result(int rc,
                         const struct expect *x,
                         const eddy_error_t *err)
{
    if (rc == 0) {
        if (x->n > 0)
            abort(); /* invalid input accepted */
        return;
    }
    if (err->text[0] == '\0')
        abort(); /* every failure explains itself */
    if (errno == ENOSPC || errno == EDQUOT)
        return;
    for (int i = 0; i < x->n; i++)
        if (errno == x->e[i])
            return;
    abort(); /* valid input refused, or refused for the wrong reason */
}

static void do_chunk(struct run *st, struct reader *r)
{
    uint8_t how;
    uint16_t off, raw, n;
    const uint8_t *p;
    size_t got;
    struct bcast_chunk c;
    eddy_error_t err = {{0}};
    struct expect x = {{0}, 0};
    int rc;

    if (!get8(r, &how) || !get16(r, &off) || !get16(r, &raw) || !get16(r, &n))
        return;
    p = getn(r, n, &got);
    memset(&c, 0, sizeof(c));
    c.offset = (how & 0x20) ? off : st->end + off;
    if (how & 0x08)
        c.offset = (how & 0x10) ? UINT64_MAX - raw : BCAST_SIZE_MAX;
    else if (c.offset > FUZZ_OFFSET_MAX)
        return;
    c.data = p;
    c.len = (uint32_t)got;
    c.rawlen = (uint32_t)got;
    if (how & 0x02) {
        size_t z = ZSTD_compressCCtx(cctx, zbuf, zcap, p, got, 1);
        if (ZSTD_isError(z))
            abort();
        c.data = zbuf;
        c.len = (uint32_t)z;
        c.compressed = true;
    } else if (how & 0x01) {
        c.compressed = true;
    }
    if (how & 0x04)
        c.rawlen = raw;
    if (how & 0x40)
        c.rawlen = (how & 0x80) ? 0 : BCAST_CHUNK_MAX + 1;

    /* what the header promises */
    if (!st->open) {
        expect_add(&x, EINVAL);
    } else {
        if (c.rawlen == 0 || c.rawlen > BCAST_CHUNK_MAX)
            expect_add(&x, EPROTO);
        if (c.offset < st->end)
            expect_add(&x, EINVAL);
        if (c.offset > BCAST_SIZE_MAX - c.rawlen)
            expect_add(&x, EFBIG);
        if (x.n == 0 && c.compressed) {
            size_t d = ZSTD_decompress(dbuf, c.rawlen, c.data, c.len);
            if (ZSTD_isError(d) || d != c.rawlen)
                expect_add(&x, EPROTO);
        } else if (x.n == 0 && c.len != c.rawlen)
            expect_add(&x, EPROTO);
    }
    rc = bcast_sink_write(st->k, &c, &err);
    check_result(rc, &x, &err);
    if (rc < 0)
        return;
    if (c.compressed)
        memcpy(model + c.offset, dbuf, c.rawlen);
    else
        memcpy(model + c.offset, c.data, c.rawlen);
    st->end = c.offset + c.rawlen;
}

static void do_commit(struct run *st, struct reader *r)
{
    uint8_t how;
    uint16_t sz, mode;
    uint32_t mt, ns;
    struct bcast_file_info info;
    eddy_error_t err = {{0}};
    XXH128_canonical_t h;
    struct expect x = {{0}, 0};
    int rc;

    if (!get8(r, &how) || !get16(r, &sz) || !get16(r, &mode) ||
        !get32(r, &mt) || !get32(r, &ns))
        return;
    memset(&info, 0, sizeof(info));
    info.size = (how & 0x02) ? sz : st->end + sz;
    if (how & 0x04)
        info.size = BCAST_SIZE_MAX + 1;
    info.mode = mode;
    info.mtime_sec = (int32_t)mt;
    info.mtime_nsec = (how & 0x08) ? ns : ns % 1000000000u;
    if (!st->open)
        expect_add(&x, EINVAL);
    else if (info.size < st->end || info.size > BCAST_SIZE_MAX ||
             info.mtime_nsec >= 1000000000u)
        expect_add(&x, EPROTO);
    if (x.n == 0) /* the model is zeros past the end */
        XXH128_canonicalFromHash(&h, XXH3_128bits(model, info.size));
    else
        memset(&h, 0, sizeof(h));
    if (how & 0x01) {
        size_t got;
        const uint8_t *p = getn(r, BCAST_HASH_SIZE, &got);
        memcpy(info.hash, p, got);
        if (x.n == 0 && memcmp(info.hash, h.digest, BCAST_HASH_SIZE) != 0)
            expect_add(&x, EBADMSG);
    } else
        memcpy(info.hash, h.digest, BCAST_HASH_SIZE);

    rc = bcast_sink_commit(st->k, &info, &err);
    check_result(rc, &x, &err);
    st->open = false; /* committed, failed, or was already */
    if (rc < 0)
        return;
    st->committed = true;
    st->size = info.size;
    st->mode = info.mode;
    st->mtime = info.mtime_sec;
    st->nsec = info.mtime_nsec;
}

/* Read DIR/f whole into readbuf; its size. */
static size_t read_dest(void)
{
    int fd = open(absdest, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    size_t got = 0;
    ssize_t n;

    if (fd < 0)
        abort();
    while ((n = read(fd, readbuf + got, MODEL_SIZE - got)) > 0)
        got += (size_t)n;
    if (n < 0)
        abort();
    close(fd);
    return got;
}

/* After destroy: the directory holds "f" only if it must, and then the
 * right "f"; no temp file.  Empties it for the next run. */
static void check_dir(const struct run *st, bool pre)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool have = false;
    struct stat sb;

    if (!d)
        abort();
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (strcmp(e->d_name, "f") != 0)
            abort(); /* a temp file, or something written elsewhere */
        have = true;
    }
    closedir(d);
    if (have != (st->committed || pre))
        abort();
    if (!have)
        return;
    if (lstat(absdest, &sb) < 0 || !S_ISREG(sb.st_mode))
        abort();
    if (st->committed) {
        mode_t want = (st->flags & BCAST_F_PRESERVE) ? st->mode : defmode;

        if ((uint64_t)sb.st_size != st->size ||
            (sb.st_mode & 0777) != (want & 0777))
            abort();
        if ((st->flags & BCAST_F_PRESERVE) && st->mtime >= 0 &&
            (sb.st_mtim.tv_sec != st->mtime ||
             (uint32_t)sb.st_mtim.tv_nsec != st->nsec))
            abort();
        if (read_dest() != st->size || memcmp(readbuf, model, st->size) != 0)
            abort();
    } else if (read_dest() != 3 || memcmp(readbuf, "old", 3) != 0) {
        abort(); /* a failed run must leave the old file alone */
    }
    if (unlink(absdest) < 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct reader r = {data, size};
    struct run st;
    eddy_error_t err = {{0}};
    uint8_t fl, di, pre;
    const char *dest;
    bool valid;
    int flags;

    if (!model)
        init();
    if (!get8(&r, &fl) || !get8(&r, &di) || !get8(&r, &pre))
        return 0;
    memset(&st, 0, sizeof(st));
    flags = fl & 0x0f;
    if (fl & 0x10)
        flags |= 0x100;
    st.flags = flags;
    di %= 16; /* most runs write "f" */
    dest = di >= NDESTS ? "f" : di == 2 ? absdest : dests[di];
    if ((pre & 1)) {
        int fd = open(absdest, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 || write(fd, "old", 3) != 3)
            abort();
        close(fd);
    }

    valid = !(flags & ~BCAST_F_ALL) && (di >= NDESTS || di <= 2) &&
            !((pre & 1) && !(flags & BCAST_F_OVERWRITE));
    st.k = bcast_sink_create(dir, dest, flags, &err);
    if (!st.k) {
        if (valid || err.text[0] == '\0')
            abort();
    } else {
        if (!valid)
            abort();
        st.open = true;
        while (r.n > 0) {
            uint8_t tag;
            if (!get8(&r, &tag))
                break;
            if (tag & 1)
                do_commit(&st, &r);
            else
                do_chunk(&st, &r);
        }
    }
    errno = 12345;
    bcast_sink_destroy(st.k);
    if (errno != 12345)
        abort(); /* destroy keeps errno */
    check_dir(&st, pre & 1);
    memset(model, 0, st.end); /* the model was written below st.end only */
    return 0;
}
