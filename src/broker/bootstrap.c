/* bootstrap.c - the "args" and "hosts" bootstrap methods, and the choice
 * of method ("pmi" is in bootstrap_pmi.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <unistd.h>

#include "src/common/errprintf.h"
#include "src/common/hostsfile.h"
#include "src/common/idset.h"
#include "src/common/topology.h"
#include "bootstrap.h"
#include "broker.h"

void bootstrap_destroy(struct bootstrap *bs)
{
    int saved_errno = errno;

    if (bs) {
        sodium_memzero(bs->key, sizeof(bs->key));
        free(bs->rundir);
        free(bs->listen_addr);
        free(bs->parent_addr);
        free(bs->hostname);
        free(bs);
    }
    errno = saved_errno;
}

static int set_hostname(struct bootstrap *bs,
                        const char *name,
                        eddy_error_t *err)
{
    char buf[256];

    if (!name) {
        if (gethostname(buf, sizeof(buf)) < 0)
            return errprintf(err, "gethostname: %s", strerror(errno));
        buf[sizeof(buf) - 1] = '\0';
        name = buf;
    }
    if (!(bs->hostname = strdup(name)))
        return errprintf(err, "out of memory");
    return 0;
}

static char *addr_port(const char *addr, int port)
{
    char *s;

    if (asprintf(&s, strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr, port) < 0)
        return NULL;
    return s;
}

/* rank/size from the command line, sockets from --listen-fd/--listen. */
static int bootstrap_args(struct bootstrap *bs,
                          const struct broker_opts *o,
                          eddy_error_t *err)
{
    if (o->rank < 0 || o->size < 0) {
        errno = EINVAL;
        return errprintf(err, "--rank and --size are required "
                              "(or --hosts)");
    }
    bs->method = "args";
    bs->size = (uint32_t)o->size;
    if (o->listen_addr && !(bs->listen_addr = strdup(o->listen_addr)))
        return errprintf(err, "out of memory");
    if (o->parent_addr && !(bs->parent_addr = strdup(o->parent_addr)))
        return errprintf(err, "out of memory");
    return set_hostname(bs, o->hostname, err);
}

/* Everything from the hosts file; --size, if given, must agree. */
static int bootstrap_hosts(struct bootstrap *bs,
                           const struct broker_opts *o,
                           eddy_error_t *err)
{
    hostsfile_t *hf;
    uint32_t parent;
    int port;

    bs->method = "hosts";
    if (o->rank < 0) {
        errno = EINVAL;
        return errprintf(err, "--rank is required");
    }
    if (o->listen_addr || o->parent_addr) {
        errno = EINVAL;
        return errprintf(err, "--hosts excludes --listen and --parent");
    }
    if (!(hf = hostsfile_load(o->hosts, err)))
        return -1;
    bs->size = hostsfile_size(hf);
    if (o->size >= 0 && (uint32_t)o->size != bs->size) {
        errno = EINVAL;
        errprintf(err, "--size=%ld but hosts file %s has %u ranks", o->size,
                  o->hosts, bs->size);
        goto error;
    }
    if ((uint32_t)o->rank >= bs->size) {
        errno = EINVAL;
        errprintf(err, "rank %ld is not in hosts file %s (size %u)", o->rank,
                  o->hosts, bs->size);
        goto error;
    }
    bs->rank = (uint32_t)o->rank;
    if (topo_nchildren(bs->rank, bs->size, bs->fanout) > 0 &&
        o->listen_fd < 0) {
        port = hostsfile_port(hf, bs->rank);
        if (port == 0) {
            errno = EINVAL;
            errprintf(err,
                      "hosts file %s: rank %u has children and needs "
                      "a port other than 0",
                      o->hosts, bs->rank);
            goto error;
        }
        if (!(bs->listen_addr = addr_port(hostsfile_addr(hf, bs->rank), port)))
            goto nomem;
    }
    if (bs->rank > 0) {
        parent = topo_parent(bs->rank, bs->fanout);
        if (!(bs->parent_addr = addr_port(hostsfile_addr(hf, parent),
                                          hostsfile_port(hf, parent))))
            goto nomem;
    }
    if (set_hostname(bs,
                     o->hostname ? o->hostname : hostsfile_host(hf, bs->rank),
                     err) < 0)
        goto error;
    hostsfile_destroy(hf);
    return 0;
nomem:
    errprintf(err, "out of memory");
error:
    hostsfile_destroy(hf);
    return -1;
}

struct bootstrap *bootstrap_create(const struct broker_opts *o,
                                   eddy_error_t *err)
{
    struct bootstrap *bs;

    if (!(bs = calloc(1, sizeof(*bs)))) {
        errprintf(err, "out of memory");
        return NULL;
    }
    bs->listen_fd = o->listen_fd;
    if (o->fanout < 1 || o->fanout > BROKER_FANOUT_MAX) {
        errno = EINVAL;
        errprintf(err, "--fanout=%ld: must be 1..%d", o->fanout,
                  BROKER_FANOUT_MAX);
        goto error;
    }
    bs->fanout = (uint32_t)o->fanout;
    if (o->listen_fd >= 0 && o->listen_addr) {
        errno = EINVAL;
        errprintf(err, "--listen-fd and --listen exclude each other");
        goto error;
    }
    if (o->bootstrap && !strcmp(o->bootstrap, "pmi")) {
        if (bootstrap_pmi(bs, o, err) < 0)
            goto error;
    } else if (o->hosts) {
        if (bootstrap_hosts(bs, o, err) < 0)
            goto error;
    } else {
        if (bootstrap_args(bs, o, err) < 0)
            goto error;
        if (bs->size < 1 || bs->size > IDSET_ID_MAX) {
            errno = EINVAL;
            errprintf(err, "--size=%ld: must be 1..%u", o->size, IDSET_ID_MAX);
            goto error;
        }
        if ((uint32_t)o->rank >= bs->size) {
            errno = EINVAL;
            errprintf(err, "--rank=%ld: must be below --size=%u", o->rank,
                      bs->size);
            goto error;
        }
        bs->rank = (uint32_t)o->rank;
    }
    if (bs->rank == 0 && bs->parent_addr) {
        errno = EINVAL;
        errprintf(err, "rank 0 has no parent, but --parent was given");
        goto error;
    }
    if (bs->rank > 0 && !bs->parent_addr) {
        errno = EINVAL;
        errprintf(err, "rank %u needs --parent=ADDR:PORT", bs->rank);
        goto error;
    }
    if (topo_nchildren(bs->rank, bs->size, bs->fanout) > 0 &&
        bs->listen_fd < 0 && !bs->listen_addr) {
        errno = EINVAL;
        errprintf(err,
                  "rank %u has children: it needs --listen-fd or "
                  "--listen",
                  bs->rank);
        goto error;
    }
    return bs;
error:
    if (bs->own_listen_fd && bs->listen_fd >= 0)
        close(bs->listen_fd);
    if (bs->own_rundir)
        rmdir(bs->rundir);
    bootstrap_destroy(bs);
    return NULL;
}
