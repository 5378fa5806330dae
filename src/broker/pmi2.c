/* pmi2.c - the PMI-2 backend of the "pmi" bootstrap: Slurm's libpmi2.so.0,
 * loaded with dlopen() on first use.
 *
 * Why at run time: eddy must build and run where Slurm is absent, and the
 * PMI-2 wire protocol is Slurm's to define (srun --mpi=pmi2 serves it from
 * slurmstepd); its own client library is the one that speaks it right.
 * Only the six calls the bootstrap needs are looked up.
 *
 * The library is never dlclose()d: after PMI2_Finalize() it may still have
 * state (atexit handlers, a socket it closes late), and one mapping for
 * the life of the broker costs nothing.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/errprintf.h"
#include "bootstrap.h"

#define PMI2_LIBRARY "libpmi2.so.0"
#define PMI2_SUCCESS 0
#define PMI2_ID_NULL (-1) /* "any source" in PMI2_KVS_Get() */

/* The PMI-2 C API as the MPI Forum draft and Slurm's pmi2.h declare it. */
static struct {
    void *dso;
    int (*init)(int *spawned, int *size, int *rank, int *appnum);
    int (*finalize)(void);
    int (*abort)(int flag, const char msg[]);
    int (*put)(const char key[], const char value[]);
    int (*fence)(void);
    int (*get)(const char *jobid,
               int src_pmi_id,
               const char key[],
               char value[],
               int maxvalue,
               int *vallen);
} p2;

static bool p2_inited;

static int p2_load(eddy_error_t *err)
{
    const char *path = getenv("EDDY_PMI2_LIBRARY");
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"PMI2_Init", (void **)&p2.init},
        {"PMI2_Finalize", (void **)&p2.finalize},
        {"PMI2_Abort", (void **)&p2.abort},
        {"PMI2_KVS_Put", (void **)&p2.put},
        {"PMI2_KVS_Fence", (void **)&p2.fence},
        {"PMI2_KVS_Get", (void **)&p2.get},
    };
    void *dso;

    if (p2.dso)
        return 0;
    if (!path || !*path)
        path = PMI2_LIBRARY;
    if (!(dso = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
        const char *why = dlerror();
        errno = ENOENT;
        return errprintf(err,
                         "srun --mpi=pmi2 needs Slurm's libpmi2.so.0 "
                         "(Debian: libpmi2-0): %s",
                         why ? why : path);
    }
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        if (!(*syms[i].slot = dlsym(dso, syms[i].name))) {
            /* Leave no half-filled table behind. */
            memset(&p2, 0, sizeof(p2));
            dlclose(dso);
            errno = ENOSYS;
            return errprintf(err, "%s has no %s: not Slurm's PMI-2 library",
                             path, syms[i].name);
        }
    }
    p2.dso = dso;
    return 0;
}

static int p2_init(int *rank, int *size, eddy_error_t *err)
{
    int spawned = 0, appnum = 0, r = -1, n = 0, rc;

    if (p2_load(err) < 0)
        return -1;
    if ((rc = p2.init(&spawned, &n, &r, &appnum)) != PMI2_SUCCESS) {
        errno = EPROTO;
        return errprintf(err, "PMI2_Init failed (PMI-2 error %d)", rc);
    }
    p2_inited = true;
    *rank = r;
    *size = n;
    return 0;
}

static int p2_put(const char *key, const char *val)
{
    return p2.put(key, val);
}

static int p2_fence(void)
{
    return p2.fence();
}

static int p2_get(int src_rank, const char *key, char *val, int len)
{
    int vallen = 0;
    int rc = p2.get(NULL, src_rank >= 0 ? src_rank : PMI2_ID_NULL, key, val,
                    len, &vallen);

    /* A negative length means the value did not fit. */
    if (rc == PMI2_SUCCESS && (vallen < 0 || vallen >= len))
        return -1;
    return rc;
}

static void p2_finalize(void)
{
    if (p2_inited) {
        p2_inited = false;
        p2.finalize();
    }
}

static void p2_abort(const char *why)
{
    if (p2_inited)
        p2.abort(1, why);
}

const struct pmi_backend pmi2_backend = {
    .name = "PMI-2",
    .init = p2_init,
    .put = p2_put,
    .fence = p2_fence,
    .get = p2_get,
    .finalize = p2_finalize,
    .abort = p2_abort,
};
