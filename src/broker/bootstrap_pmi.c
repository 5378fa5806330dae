/* bootstrap_pmi.c - the "pmi" bootstrap method: rank, size, the parent's
 * address and the instance key from a PMI process manager: a parent eddy
 * instance's job shell or MPICH's Hydra (PMI-1, through src/libpmi), or
 * Slurm's srun --mpi=pmi2 (PMI-2, through libpmi2.so.0: pmi2.c).
 *
 * Why the key travels in the PMI key-value space: that space is readable
 * only by the processes of the one job that put it there (eddy-shell,
 * Hydra and slurmstepd all keep it per job, and the job's processes all
 * run as the one user who owns the instance), so it is as private as the
 * 0600 key file of the other methods, and it needs no shared file system.
 *
 * Exchange (one fence, whatever the size), the same over both backends:
 *   every rank with children  binds a TCP socket on an address of its host
 *                             (kernel-chosen port) and puts
 *                             eddy.addr.RANK = "ADDR:PORT"
 *   rank 0                    puts eddy.key = 64 hex digits (libsodium)
 *   all                       fence, then ranks > 0 get the key and
 *                             eddy.addr.PARENT
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "eddy/pmi.h"
#include "src/common/hex.h"
#include "src/common/tcplisten.h"
#include "src/common/errprintf.h"
#include "src/common/idset.h"
#include "src/common/topology.h"
#include "bootstrap.h"
#include "broker.h"

/* PMI-1 servers promise at least 64-byte keys and 1024-byte values
 * (Hydra's and eddy-shell's limits); ours are far below both. */
#define PMI_KEY_LEN 64
#define PMI_VAL_LEN 1024
#define PMI_NAME_LEN 256

_Static_assert(sizeof(((struct bootstrap *)0)->key) == BROKER_KEY_SIZE,
               "the bootstrap's key is the broker's");

/* A private run directory when none was given: inside the job's tmpdir
 * under a parent eddy (removed with the job whatever happens to us),
 * else in $TMPDIR. */
static int make_rundir(struct bootstrap *bs, eddy_error_t *err)
{
    const char *base = getenv("EDDY_JOB_TMPDIR");
    char path[PATH_MAX];

    if (!base || base[0] != '/')
        base = getenv("TMPDIR");
    if (!base || base[0] != '/')
        base = "/tmp";
    if (snprintf(path, sizeof(path), "%s/eddy-XXXXXX", base) >=
        (int)sizeof(path)) {
        errno = ENAMETOOLONG;
        return errprintf(err, "run directory in %s: path too long", base);
    }
    if (!mkdtemp(path))
        return errprintf(err, "cannot make a run directory in %s: %s", base,
                         strerror(errno));
    if (!(bs->rundir = strdup(path))) {
        rmdir(path);
        return errprintf(err, "out of memory");
    }
    bs->own_rundir = true;
    return 0;
}

/* The PMI-1 backend: eddy's own client (src/libpmi), linked in.  PMI-1
 * names the key-value space; PMI-2 has one per job and needs no name. */
static char pmi1_kvs[PMI_NAME_LEN];

static int pmi1_init(int *rank, int *size, eddy_error_t *err)
{
    int spawned, rc;

    if ((rc = PMI_Init(&spawned)) != PMI_SUCCESS) {
        errno = EPROTO;
        return errprintf(err, "PMI_Init failed (PMI error %d)", rc);
    }
    if ((rc = PMI_Get_rank(rank)) != PMI_SUCCESS ||
        (rc = PMI_Get_size(size)) != PMI_SUCCESS ||
        (rc = PMI_KVS_Get_my_name(pmi1_kvs, sizeof(pmi1_kvs))) != PMI_SUCCESS) {
        PMI_Finalize();
        errno = EPROTO;
        return errprintf(err,
                         "PMI_Get_rank/size/kvs name failed (PMI "
                         "error %d)",
                         rc);
    }
    return 0;
}

static int pmi1_put(const char *key, const char *val)
{
    return PMI_KVS_Put(pmi1_kvs, key, val);
}

static int pmi1_fence(void)
{
    int rc = PMI_KVS_Commit(pmi1_kvs);
    return rc != PMI_SUCCESS ? rc : PMI_Barrier();
}

static int pmi1_get(int src_rank, const char *key, char *val, int len)
{
    (void)src_rank;
    return PMI_KVS_Get(pmi1_kvs, key, val, len);
}

static void pmi1_finalize(void)
{
    PMI_Finalize();
}

static void pmi1_abort(const char *why)
{
    PMI_Abort(1, why);
}

static const struct pmi_backend pmi1_backend = {
    .name = "PMI-1",
    .init = pmi1_init,
    .put = pmi1_put,
    .fence = pmi1_fence,
    .get = pmi1_get,
    .finalize = pmi1_finalize,
    .abort = pmi1_abort,
};

/* srun --mpi=pmi2 serves PMI-2, which a PMI-1 client cannot speak; it
 * says so with SLURM_MPI_TYPE=pmi2 and adds PMI_JOBID.  eddy-shell always
 * sets PMI_SPAWNED and Slurm never does, so a SLURM_MPI_TYPE inherited by
 * a job inside an instance that srun started does not fool a nested
 * broker into PMI-2. */
static const struct pmi_backend *pick_backend(void)
{
    const char *type = getenv("SLURM_MPI_TYPE");

    if (type && !strcmp(type, "pmi2") && getenv("PMI_JOBID") &&
        !getenv("PMI_SPAWNED"))
        return &pmi2_backend;
    return &pmi1_backend;
}

/* A failed bootstrap left PMI initialised: bootstrap_abort() ends the job
 * (without that, the other ranks would wait in the fence for us). */
static const struct pmi_backend *pmi_left_open;

static int pmi_fail(const struct pmi_backend *pm,
                    const char *what,
                    int rc,
                    eddy_error_t *err)
{
    errno = EPROTO;
    return errprintf(err, "%s bootstrap: %s failed (PMI error %d)", pm->name,
                     what, rc);
}

int bootstrap_pmi(struct bootstrap *bs,
                  const struct broker_opts *o,
                  eddy_error_t *err)
{
    const struct pmi_backend *pm = pick_backend();
    char key[PMI_KEY_LEN], val[PMI_VAL_LEN];
    char host[256], ip[INET_ADDRSTRLEN];
    struct in_addr addr;
    int rank, size, rc, port;
    bool inited = false;

    bs->method = "pmi";
    if (o->rank >= 0 || o->size >= 0 || o->hosts || o->listen_addr ||
        o->parent_addr || o->listen_fd >= 0) {
        errno = EINVAL;
        return errprintf(err, "the PMI bootstrap takes rank, size and "
                              "addresses from PMI: no --rank, --size, "
                              "--hosts, --listen, --listen-fd or --parent");
    }
    if (!getenv("PMI_FD")) {
        errno = EINVAL;
        return errprintf(err, "PMI bootstrap: PMI_FD is not set (not "
                              "started by a PMI-1 process manager)");
    }
    if (sodium_init() < 0)
        return errprintf(err, "cannot initialise libsodium");
    if (pm->init(&rank, &size, err) < 0) {
        /* keep the backend's own message, say which bootstrap it was */
        eddy_error_t inner;
        if (!err)
            return -1;
        inner = *err;
        return errprintf(err, "%s bootstrap: %s", pm->name, inner.text);
    }
    inited = true;
    if (size < 1 || (uint32_t)size > IDSET_ID_MAX || rank < 0 || rank >= size) {
        errno = EPROTO;
        errprintf(err, "%s bootstrap: rank %d of size %d is out of range",
                  pm->name, rank, size);
        goto error;
    }
    bs->rank = (uint32_t)rank;
    bs->size = (uint32_t)size;
    if (gethostname(host, sizeof(host)) < 0) {
        errprintf(err, "gethostname: %s", strerror(errno));
        goto error;
    }
    host[sizeof(host) - 1] = '\0';
    if (!(bs->hostname = strdup(o->hostname ? o->hostname : host))) {
        errprintf(err, "out of memory");
        goto error;
    }

    /* 1. our listen address, if we have children */
    if (topo_nchildren(bs->rank, bs->size, bs->fanout) > 0) {
        addr = tcplisten_host_address(host);
        if ((bs->listen_fd = tcplisten_any_port(addr, &port)) < 0) {
            errprintf(err, "%s bootstrap: cannot listen on %s: %s", pm->name,
                      inet_ntop(AF_INET, &addr, ip, sizeof(ip)) ? ip : "?",
                      strerror(errno));
            goto error;
        }
        bs->own_listen_fd = true;
        inet_ntop(AF_INET, &addr, ip, sizeof(ip));
        snprintf(key, sizeof(key), "eddy.addr.%u", bs->rank);
        snprintf(val, sizeof(val), "%s:%d", ip, port);
        if ((rc = pm->put(key, val)) != 0) {
            pmi_fail(pm, "put(eddy.addr)", rc, err);
            goto error;
        }
    }
    /* 2. the instance key, made by rank 0 */
    if (bs->rank == 0) {
        randombytes_buf(bs->key, sizeof(bs->key));
        sodium_bin2hex(val, sizeof(val), bs->key, sizeof(bs->key));
        rc = pm->put("eddy.key", val);
        sodium_memzero(val, sizeof(val));
        if (rc != 0) {
            pmi_fail(pm, "put(eddy.key)", rc, err);
            goto error;
        }
    }
    if ((rc = pm->fence()) != 0) {
        pmi_fail(pm, "fence", rc, err);
        goto error;
    }
    /* 3. the key and our parent's address */
    if (bs->rank > 0) {
        uint32_t parent = topo_parent(bs->rank, bs->fanout);
        rc = pm->get(0, "eddy.key", val, sizeof(val));
        if (rc != 0) {
            pmi_fail(pm, "get(eddy.key)", rc, err);
            goto error;
        }
        if (hex_decode(val, strlen(val), bs->key, sizeof(bs->key)) < 0) {
            sodium_memzero(val, sizeof(val));
            errno = EPROTO;
            errprintf(err, "%s bootstrap: eddy.key is not 64 hex digits",
                      pm->name);
            goto error;
        }
        sodium_memzero(val, sizeof(val));
        snprintf(key, sizeof(key), "eddy.addr.%u", parent);
        if ((rc = pm->get((int)parent, key, val, sizeof(val))) != 0) {
            pmi_fail(pm, "get(eddy.addr)", rc, err);
            goto error;
        }
        if (!(bs->parent_addr = strdup(val))) {
            errprintf(err, "out of memory");
            goto error;
        }
    }
    bs->have_key = true;
    /* The PMI connection is not needed any more; say goodbye so that the
     * process manager does not take our later exit for a failure. */
    pm->finalize();
    inited = false;
    /* Nor are its variables: jobs in this instance get their own. */
    unsetenv("PMI_FD");
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    unsetenv("PMI_SPAWNED");
    unsetenv("PMI_JOBID");
    unsetenv("SLURM_MPI_TYPE");
    if (!o->rundir && make_rundir(bs, err) < 0)
        goto error;
    return 0;
error:
    pmi_left_open = inited ? pm : NULL;
    return -1;
}

void bootstrap_abort(const char *why)
{
    const struct pmi_backend *pm = pmi_left_open;

    if (pm) {
        pmi_left_open = NULL;
        pm->abort(why && *why ? why : "eddy-broker: bootstrap failed");
    }
}
