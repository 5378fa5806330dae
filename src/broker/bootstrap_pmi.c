/* bootstrap_pmi.c - the "pmi" bootstrap method: rank, size, the parent's
 * address and the instance key from a PMI-1 process manager (a parent
 * eddy instance's job shell, or MPICH's Hydra), through src/libpmi.
 *
 * Why the key travels in the PMI key-value space: that space is readable
 * only by the processes of the one job that put it there (eddy-shell and
 * Hydra both keep it per job, and the job's processes all run as the one
 * user who owns the instance), so it is as private as the 0600 key file
 * of the other methods, and it needs no shared file system.
 *
 * Exchange (one fence, whatever the size):
 *   every rank with children  binds a TCP socket on an address of its host
 *                             (kernel-chosen port) and puts
 *                             eddy.addr.RANK = "ADDR:PORT"
 *   rank 0                    puts eddy.key = 64 hex digits (libsodium)
 *   all                       barrier, then ranks > 0 get the key and
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

/* The first IPv4 address our host name resolves to, else loopback (one
 * host: a laptop, a test). */
static int host_address(const char *hostname, struct in_addr *addr)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;

    addr->s_addr = htonl(INADDR_LOOPBACK);
    if (getaddrinfo(hostname, NULL, &hints, &res) == 0 && res) {
        *addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
        freeaddrinfo(res);
    }
    return 0;
}

/* Bind and listen on 'addr' with a kernel-chosen port. */
static int listen_any_port(struct in_addr addr, int *port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr = addr};
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
        listen(fd, SOMAXCONN) < 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    *port = ntohs(sin.sin_port);
    return fd;
}

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

/* A failed bootstrap left PMI initialised: bootstrap_abort() ends the job
 * (without that, the other ranks would wait in the fence for us). */
static bool pmi_left_open;

static int pmi_fail(const char *what, int rc, eddy_error_t *err)
{
    errno = EPROTO;
    return errprintf(err, "PMI bootstrap: %s failed (PMI error %d)", what, rc);
}

int bootstrap_pmi(struct bootstrap *bs,
                  const struct broker_opts *o,
                  eddy_error_t *err)
{
    char kvs[PMI_NAME_LEN], key[PMI_KEY_LEN], val[PMI_VAL_LEN];
    char host[256], ip[INET_ADDRSTRLEN];
    struct in_addr addr;
    int spawned, rank, size, rc, port;
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
    if ((rc = PMI_Init(&spawned)) != PMI_SUCCESS)
        return pmi_fail("PMI_Init", rc, err);
    inited = true;
    if ((rc = PMI_Get_rank(&rank)) != PMI_SUCCESS ||
        (rc = PMI_Get_size(&size)) != PMI_SUCCESS) {
        pmi_fail("PMI_Get_rank/size", rc, err);
        goto error;
    }
    if (size < 1 || (uint32_t)size > IDSET_ID_MAX || rank < 0 || rank >= size) {
        errno = EPROTO;
        errprintf(err, "PMI bootstrap: rank %d of size %d is out of range",
                  rank, size);
        goto error;
    }
    bs->rank = (uint32_t)rank;
    bs->size = (uint32_t)size;
    if ((rc = PMI_KVS_Get_my_name(kvs, sizeof(kvs))) != PMI_SUCCESS) {
        pmi_fail("PMI_KVS_Get_my_name", rc, err);
        goto error;
    }
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
        host_address(host, &addr);
        if ((bs->listen_fd = listen_any_port(addr, &port)) < 0) {
            errprintf(err, "PMI bootstrap: cannot listen on %s: %s",
                      inet_ntop(AF_INET, &addr, ip, sizeof(ip)) ? ip : "?",
                      strerror(errno));
            goto error;
        }
        bs->own_listen_fd = true;
        inet_ntop(AF_INET, &addr, ip, sizeof(ip));
        snprintf(key, sizeof(key), "eddy.addr.%u", bs->rank);
        snprintf(val, sizeof(val), "%s:%d", ip, port);
        if ((rc = PMI_KVS_Put(kvs, key, val)) != PMI_SUCCESS) {
            pmi_fail("PMI_KVS_Put(eddy.addr)", rc, err);
            goto error;
        }
    }
    /* 2. the instance key, made by rank 0 */
    if (bs->rank == 0) {
        randombytes_buf(bs->key, sizeof(bs->key));
        sodium_bin2hex(val, sizeof(val), bs->key, sizeof(bs->key));
        rc = PMI_KVS_Put(kvs, "eddy.key", val);
        sodium_memzero(val, sizeof(val));
        if (rc != PMI_SUCCESS) {
            pmi_fail("PMI_KVS_Put(eddy.key)", rc, err);
            goto error;
        }
    }
    if ((rc = PMI_KVS_Commit(kvs)) != PMI_SUCCESS ||
        (rc = PMI_Barrier()) != PMI_SUCCESS) {
        pmi_fail("PMI_Barrier", rc, err);
        goto error;
    }
    /* 3. the key and our parent's address */
    if (bs->rank > 0) {
        size_t klen = 0;
        rc = PMI_KVS_Get(kvs, "eddy.key", val, sizeof(val));
        if (rc != PMI_SUCCESS) {
            pmi_fail("PMI_KVS_Get(eddy.key)", rc, err);
            goto error;
        }
        if (strlen(val) != 2 * sizeof(bs->key) ||
            sodium_hex2bin(bs->key, sizeof(bs->key), val, strlen(val), NULL,
                           &klen, NULL) < 0 ||
            klen != sizeof(bs->key)) {
            sodium_memzero(val, sizeof(val));
            errno = EPROTO;
            errprintf(err, "PMI bootstrap: eddy.key is not 64 hex digits");
            goto error;
        }
        sodium_memzero(val, sizeof(val));
        snprintf(key, sizeof(key), "eddy.addr.%u",
                 topo_parent(bs->rank, bs->fanout));
        if ((rc = PMI_KVS_Get(kvs, key, val, sizeof(val))) != PMI_SUCCESS) {
            pmi_fail("PMI_KVS_Get(eddy.addr)", rc, err);
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
    PMI_Finalize();
    inited = false;
    unsetenv("PMI_FD");
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    unsetenv("PMI_SPAWNED");
    if (!o->rundir && make_rundir(bs, err) < 0)
        goto error;
    return 0;
error:
    pmi_left_open = inited;
    return -1;
}

void bootstrap_abort(const char *why)
{
    if (pmi_left_open) {
        pmi_left_open = false;
        PMI_Abort(1, why && *why ? why : "eddy-broker: bootstrap failed");
    }
}
