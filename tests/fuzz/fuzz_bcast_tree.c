/* fuzz_bcast_tree.c - libFuzzer target for bcast_tree_extract(): what a
 * node does with the archive of `eddy bcast ID DIR DEST` once its
 * checksum matched (src/common/bcast_tree.h).  The checksum only says the
 * archive is the sender's: a hostile or buggy sender can put anything in
 * it, so the extraction must hold on its own.
 *
 * Layout, made once per process in a mkdtemp directory TOP:
 *   TOP/archive   the input, written afresh for each run
 *   TOP/p/d/      DIR: the destination's parent
 *   TOP/p/d/dest  the destination
 * Each run extracts TOP/archive as TOP/p/d/dest; a hash of the input
 * chooses 'preserve' and whether 'dest' exists beforehand (a directory
 * holding a marker file; then 'overwrite' is set).  Checks:
 *  - TOP holds only archive and p, and p only d: nothing escaped DIR;
 *  - on failure, DIR holds nothing (or the old dest, marker intact): no
 *    temp directory, nothing partial;
 *  - on success, DIR holds exactly dest, a real directory;
 *  - every failure explains itself.
 * Then dest is removed with rmtree() (never following a link).
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

#include "src/common/bcast_tree.h"
#include "src/common/rmtree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Bigger archives only hold bigger files. */
#define TREE_FUZZ_MAX (1u << 20)

#define MARKER ".old-marker"

static char top[200];
static char arc[220];
static char pdir[220];
static char ddir[240];
static char dest[260];
static char marker[300];

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
    if (top[0])
        (void)rmtree(top, NULL);
}

static void init(void)
{
    const char *t = scratch_base();

    snprintf(top, sizeof(top), "%s/fuzz_bcast_tree.XXXXXX", t);
    if (!mkdtemp(top))
        abort();
    atexit(cleanup);
    snprintf(arc, sizeof(arc), "%s/archive", top);
    snprintf(pdir, sizeof(pdir), "%s/p", top);
    snprintf(ddir, sizeof(ddir), "%s/d", pdir);
    snprintf(dest, sizeof(dest), "%s/dest", ddir);
    snprintf(marker, sizeof(marker), "%s/" MARKER, dest);
    if (mkdir(pdir, 0700) < 0 || mkdir(ddir, 0700) < 0)
        abort();
}

/* Abort unless directory 'path' holds exactly the 'n' names given (in
 * any order). */
static void expect_names(const char *path, const char *const *names, int n)
{
    DIR *d = opendir(path);
    struct dirent *e;
    int found = 0;

    if (!d)
        abort();
    while ((e = readdir(d))) {
        int i;

        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        for (i = 0; i < n && strcmp(e->d_name, names[i]) != 0; i++)
            ;
        if (i == n)
            abort(); /* something that should not be there */
        found++;
    }
    closedir(d);
    if (found != n)
        abort();
}

static void write_input(const uint8_t *data, size_t size)
{
    int fd = open(arc, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    size_t done = 0;

    if (fd < 0)
        abort();
    while (done < size) {
        ssize_t n = write(fd, data + done, size - done);
        if (n <= 0)
            abort();
        done += (size_t)n;
    }
    close(fd);
}

static void make_old_dest(void)
{
    int fd;

    if (mkdir(dest, 0700) < 0 ||
        (fd = open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
        abort();
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const top_names[] = {"archive", "p"};
    static const char *const p_names[] = {"d"};
    static const char *const d_names[] = {"dest"};
    static const char *const old_names[] = {MARKER};
    eddy_error_t err = {{0}};
    uint64_t h;
    bool preserve, existing;
    struct stat st;
    int rc;

    if (size > TREE_FUZZ_MAX)
        return 0;
    if (!top[0])
        init();
    /* not from the archive's bytes: any of them may be mutated */
    h = XXH3_64bits(data, size);
    preserve = h & 1;
    existing = h & 2;
    write_input(data, size);
    if (existing)
        make_old_dest();

    rc = bcast_tree_extract(arc, dest, existing, preserve, &err);

    expect_names(top, top_names, 2);
    expect_names(pdir, p_names, 1);
    if (rc < 0) {
        if (err.text[0] == '\0')
            abort(); /* every failure explains itself */
        expect_names(ddir, d_names, existing ? 1 : 0);
        if (existing) /* untouched */
            expect_names(dest, old_names, 1);
    } else {
        expect_names(ddir, d_names, 1);
        if (lstat(dest, &st) < 0 || !S_ISDIR(st.st_mode))
            abort();
    }
    if (rmtree(dest, NULL) < 0 && errno != ENOENT)
        abort();
    expect_names(ddir, d_names, 0);
    return 0;
}
