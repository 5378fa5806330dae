/* eddy bcast - ship a file to every node of a job (eddy/bcast.h). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "eddy/bcast.h"
#include "cmd.h"
#include "jobopts.h"

static const char *const usage_text =
    "Usage: eddy bcast [-p] [-f] [-z] [-q] [--chunksize=N] [-r NODES]\n"
    "                  [--timeout=SECS] ID SRC... DEST\n"
    "\n"
    "Write the file SRC ('-': our stdin) to DEST on every node of job ID,\n"
    "without SSH or a shared file system.  With a directory SRC, or\n"
    "several SRCs, DEST is a directory: a copy of the one directory SRC,\n"
    "or holding each SRC by its name (files, directories, symlinks as\n"
    "links, modes); it appears whole or not at all.  A relative DEST is under "
    "the\n"
    "job's tmpdir on each node ($EDDY_JOB_TMPDIR of its tasks, where tool\n"
    "launches of the job also run); it may not leave it ('..', or a\n"
    "symlink on the way).  An absolute DEST is written with our own\n"
    "rights.  A DEST ending in '/' gets a single SRC's name.  Each node writes "
    "a\n"
    "temp file beside DEST, checks the whole file's checksum and renames\n"
    "it into place: DEST is never seen partial.  The job must be running\n"
    "or held at its startup barrier.  On a terminal a progress line shows\n"
    "bytes, rate and time left.  Exit status 0 if every node has the\n"
    "file; else 1, with one line per failed node.\n"
    "\n"
    "  -p, --preserve       keep SRC's mode and modification time\n"
    "  -f, --force          replace an existing DEST (else an error there)\n"
    "  -z, --compress       zstd: compressed once here, expanded on each\n"
    "                       node (pays on slow links)\n"
    "  -q, --quiet          no progress line\n"
    "      --chunksize=N    bytes per chunk, with k/M suffixes (default 1M,\n"
    "                       at most 16M)\n"
    "  -r, --nodes=NODES    only these nodes of the job (broker ranks, an\n"
    "                       idset such as 0-3,8; see 'eddy job info')\n"
    "      --timeout=SECS   the instance aborts the transfer after this\n"
    "                       long without hearing from us (default 30)\n"
    "  -h, --help           show this help\n";

enum { OPT_CHUNKSIZE = 256, OPT_TIMEOUT };

static const struct option long_opts[] = {
    {"preserve", no_argument, NULL, 'p'},
    {"force", no_argument, NULL, 'f'},
    {"compress", no_argument, NULL, 'z'},
    {"quiet", no_argument, NULL, 'q'},
    {"chunksize", required_argument, NULL, OPT_CHUNKSIZE},
    {"nodes", required_argument, NULL, 'r'},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* "64k", "1M", "1048576" */
static size_t parse_size(const char *s)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s)
        cmd_die("bcast", "--chunksize: '%s' is not a size", s);
    if (*end == 'k' || *end == 'K')
        v <<= 10, end++;
    else if (*end == 'm' || *end == 'M')
        v <<= 20, end++;
    if (*end || v == 0 || v > (16u << 20))
        cmd_die("bcast", "--chunksize: '%s' must be 1 byte to 16M", s);
    return (size_t)v;
}

static void human(char *buf, size_t len, double bytes)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;

    while (bytes >= 1024 && u < 4)
        bytes /= 1024, u++;
    snprintf(buf, len, "%.1f %s", bytes, unit[u]);
}

/* One progress line, rewritten in place. */
static void progress(eddy_future_t *f, double t0, bool last)
{
    uint64_t sent;
    int64_t total;
    double dt = cmd_now() - t0, rate;
    char a[32], b[32], r[32], eta[32] = "";

    if (eddy_job_bcast_progress(f, &sent, &total) < 0)
        return;
    rate = dt > 0 ? (double)sent / dt : 0;
    human(a, sizeof(a), (double)sent);
    human(r, sizeof(r), rate);
    if (total >= 0) {
        human(b, sizeof(b), (double)total);
        if (rate > 0 && !last && (uint64_t)total > sent) {
            long s = (long)(((double)total - (double)sent) / rate + 0.5);
            snprintf(eta, sizeof(eta), "  ETA %ld:%02ld", s / 60, s % 60);
        }
    } else {
        snprintf(b, sizeof(b), "?");
    }
    fprintf(stderr, "\r%s / %s  %s/s%s\033[K%s", a, b, r, eta,
            last ? "\n" : "");
}

static int bcast_run(int argc, char **argv)
{
    int c, flags = 0, fd = -1, nsrc;
    bool quiet = false, tree = false;
    const char *const *srcs;
    size_t chunksize = 0;
    struct eddy_bcast_options opts = {0};
    eddy_jobid_t id;
    const char *src, *dest;
    char *destbuf = NULL;
    eddy_t *h;
    eddy_future_t *f;
    const char *ok;
    size_t nfailed;
    double t0;
    struct stat st;

    optind = 0;
    while ((c = getopt_long(argc, argv, "pfzqr:h", long_opts, NULL)) != -1) {
        switch (c) {
        case 'p':
            flags |= EDDY_BCAST_PRESERVE;
            break;
        case 'f':
            flags |= EDDY_BCAST_OVERWRITE;
            break;
        case 'z':
            flags |= EDDY_BCAST_COMPRESS;
            break;
        case 'q':
            quiet = true;
            break;
        case OPT_CHUNKSIZE:
            chunksize = parse_size(optarg);
            break;
        case 'r':
            opts.nodes = optarg;
            break;
        case OPT_TIMEOUT: {
            char *end;
            opts.timeout = strtod(optarg, &end);
            if (*end || !(opts.timeout > 0) || opts.timeout > 3600)
                cmd_die("bcast", "--timeout: '%s' must be 0 to 3600 seconds",
                        optarg);
            break;
        }
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        default:
            fputs(usage_text, stderr);
            return 1;
        }
    }
    if (argc - optind < 3)
        cmd_die("bcast", "expected ID SRC... DEST (see 'eddy bcast -h')");
    id = jobid_parse("bcast", argv[optind]);
    nsrc = argc - optind - 2;
    srcs = (const char *const *)argv + optind + 1;
    src = srcs[0];
    dest = argv[argc - 1];

    /* the sources: refuse what cannot be read before asking the instance */
    if (!strcmp(src, "-")) {
        if (nsrc > 1)
            cmd_die("bcast", "'-' (stdin) must be the only source");
        fd = STDIN_FILENO;
        if (dest[strlen(dest) - 1] == '/')
            cmd_die("bcast", "%s: a directory: stdin needs a file name", dest);
    } else {
        for (int i = 0; i < nsrc; i++) {
            if (!strcmp(srcs[i], "-"))
                cmd_die("bcast", "'-' (stdin) must be the only source");
            if (stat(srcs[i], &st) < 0)
                cmd_die("bcast", "%s: %s", srcs[i], strerror(errno));
            if (S_ISDIR(st.st_mode))
                tree = true;
        }
        tree = tree || nsrc > 1;
        if (!tree && (fd = open(src, O_RDONLY | O_CLOEXEC)) < 0)
            cmd_die("bcast", "%s: %s", src, strerror(errno));
        if (dest[strlen(dest) - 1] == '/') {
            if (nsrc == 1) {
                char *copy = strdup(src);
                if (!copy ||
                    asprintf(&destbuf, "%s%s", dest, basename(copy)) < 0)
                    cmd_die("bcast", "out of memory");
                free(copy);
                dest = destbuf;
            } else {
                /* the directory that holds them */
                if (!(destbuf = strdup(dest)))
                    cmd_die("bcast", "out of memory");
                while (strlen(destbuf) > 1 &&
                       destbuf[strlen(destbuf) - 1] == '/')
                    destbuf[strlen(destbuf) - 1] = '\0';
                dest = destbuf;
            }
        }
    }

    h = cmd_open("bcast");
    t0 = cmd_now();
    if (tree) {
        eddy_error_t err = {{0}};
        if (!(f = eddy_job_bcast_paths(h, id, srcs, (size_t)nsrc, dest,
                                       chunksize, flags, &opts, &err)))
            cmd_die("bcast", "%s", err.text);
    } else if (!(f = eddy_job_bcast_opts(h, id, fd, dest, chunksize, flags,
                                         &opts))) {
        cmd_die("bcast", "%s: %s", src, strerror(errno));
    }
    if (!quiet && isatty(STDERR_FILENO)) {
        while (eddy_future_wait_for(f, 0.25) < 0 && errno == ETIMEDOUT)
            progress(f, t0, false);
    }
    if (eddy_job_bcast_get(f, &ok, &nfailed) < 0)
        jobid_die("bcast", id, f);
    if (!quiet && isatty(STDERR_FILENO))
        progress(f, t0, true);
    for (size_t i = 0; i < nfailed; i++) {
        const char *why;
        uint32_t rank;
        if (eddy_job_bcast_failure(f, i, &rank, NULL, &why) == 0)
            cmd_warn("bcast", "node %" PRIu32 ": %s", rank, why);
    }
    eddy_future_destroy(f);
    eddy_close(h);
    if (fd >= 0 && fd != STDIN_FILENO)
        close(fd);
    free(destbuf);
    return nfailed > 0 ? 1 : 0;
}

const struct cmd cmd_bcast = {
    .name = "bcast",
    .summary = "ship a file to every node of a job",
    .usage = usage_text,
    .run = bcast_run,
};
