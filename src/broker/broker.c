/* broker.c - the broker object: options, startup checks, services,
 * logging, signals and the shutdown sequence (see broker.h).
 */
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/common/errprintf.h"
#include "src/common/idset.h"
#include "src/common/topology.h"
#include "bootstrap.h"
#include "broker.h"
#include "job.h"

/* --- command line ----------------------------------------------------- */

enum {
    OPT_RANK = 256,
    OPT_SIZE,
    OPT_FANOUT,
    OPT_RUNDIR,
    OPT_KEY,
    OPT_LISTEN_FD,
    OPT_LISTEN,
    OPT_PARENT,
    OPT_HOSTS,
    OPT_READY_FD,
    OPT_HEARTBEAT,
    OPT_HEARTBEAT_TIMEOUT,
    OPT_LOG_LEVEL,
    OPT_HOSTNAME,
    OPT_CORES,
    OPT_JOB_OUTPUT_CAP,
    OPT_JOB_KILL_GRACE,
    OPT_TMPDIR_BASE,
    OPT_BOOTSTRAP,
    OPT_CLIENT_LISTEN,
    OPT_TOKEN_FILE,
    OPT_HELP,
};

static const struct option longopts[] = {
    {"rank", required_argument, NULL, OPT_RANK},
    {"size", required_argument, NULL, OPT_SIZE},
    {"fanout", required_argument, NULL, OPT_FANOUT},
    {"rundir", required_argument, NULL, OPT_RUNDIR},
    {"key", required_argument, NULL, OPT_KEY},
    {"listen-fd", required_argument, NULL, OPT_LISTEN_FD},
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"parent", required_argument, NULL, OPT_PARENT},
    {"hosts", required_argument, NULL, OPT_HOSTS},
    {"ready-fd", required_argument, NULL, OPT_READY_FD},
    {"heartbeat", required_argument, NULL, OPT_HEARTBEAT},
    {"heartbeat-timeout", required_argument, NULL, OPT_HEARTBEAT_TIMEOUT},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"hostname", required_argument, NULL, OPT_HOSTNAME},
    {"cores", required_argument, NULL, OPT_CORES},
    {"job-output-cap", required_argument, NULL, OPT_JOB_OUTPUT_CAP},
    {"job-kill-grace", required_argument, NULL, OPT_JOB_KILL_GRACE},
    {"tmpdir-base", required_argument, NULL, OPT_TMPDIR_BASE},
    {"bootstrap", required_argument, NULL, OPT_BOOTSTRAP},
    {"client-listen", required_argument, NULL, OPT_CLIENT_LISTEN},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static const char usage[] =
    "Usage: eddy-broker --rank=R --size=N [--fanout=K] --rundir=DIR\n"
    "                   [--key=FILE] [--listen-fd=FD | --listen=ADDR:PORT]\n"
    "                   [--parent=ADDR:PORT] [--hosts=FILE] [--ready-fd=FD]\n"
    "                   [--heartbeat=SECONDS] [--heartbeat-timeout=SECONDS]\n"
    "                   [--log-level=N] [--hostname=NAME] [--cores=N]\n"
    "                   [--job-output-cap=BYTES] [--job-kill-grace=SECONDS]\n"
    "                   [--tmpdir-base=DIR] [--client-listen=ADDR:PORT]\n"
    "                   [--token-file=PATH]\n"
    "   or: eddy-broker [--bootstrap=pmi] [--rundir=DIR] [OPTIONS]\n"
    "Normally started by 'eddy start'.  Under a PMI-1 process manager\n"
    "(PMI_FD set: 'mpiexec -n 4 eddy-broker', a parent eddy instance) the\n"
    "rank, size, addresses and key come from PMI (see docs/alloc.md).\n";

static int parse_long(
    const char *name, const char *s, long min, long max, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr,
                "eddy-broker: --%s=%s: expected an integer in "
                "%ld..%ld\n",
                name, s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_seconds(const char *name, const char *s, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || v > 86400) {
        fprintf(stderr,
                "eddy-broker: --%s=%s: expected a number of "
                "seconds > 0\n",
                name, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Job tmpdirs go where temporary files go: $TMPDIR if it is an absolute
 * path, else /tmp. */
static const char *default_tmpdir_base(void)
{
    const char *tmp = getenv("TMPDIR");

    return tmp && tmp[0] == '/' ? tmp : "/tmp";
}

int broker_parse_args(int argc, char **argv, struct broker_opts *o)
{
    int c;
    long v;

    memset(o, 0, sizeof(*o));
    o->rank = o->size = -1;
    o->fanout = 2;
    o->listen_fd = o->ready_fd = -1;
    o->heartbeat = 1.0;
    o->heartbeat_timeout = 5.0;
    o->log_level = LOG_LEVEL_INFO;
    o->job_output_cap = BROKER_JOB_OUTPUT_CAP;
    o->job_kill_grace = BROKER_JOB_KILL_GRACE;
    o->tmpdir_base = default_tmpdir_base();
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_RANK:
            if (parse_long("rank", optarg, 0, IDSET_ID_MAX - 1, &o->rank) < 0)
                return -1;
            break;
        case OPT_SIZE:
            if (parse_long("size", optarg, 1, IDSET_ID_MAX, &o->size) < 0)
                return -1;
            break;
        case OPT_FANOUT:
            if (parse_long("fanout", optarg, 1, BROKER_FANOUT_MAX, &o->fanout) <
                0)
                return -1;
            break;
        case OPT_RUNDIR:
            o->rundir = optarg;
            break;
        case OPT_KEY:
            o->keyfile = optarg;
            break;
        case OPT_LISTEN_FD:
            if (parse_long("listen-fd", optarg, 0, INT_MAX, &v) < 0)
                return -1;
            o->listen_fd = (int)v;
            break;
        case OPT_LISTEN:
            o->listen_addr = optarg;
            break;
        case OPT_PARENT:
            o->parent_addr = optarg;
            break;
        case OPT_HOSTS:
            o->hosts = optarg;
            break;
        case OPT_READY_FD:
            if (parse_long("ready-fd", optarg, 0, INT_MAX, &v) < 0)
                return -1;
            o->ready_fd = (int)v;
            break;
        case OPT_HEARTBEAT:
            if (parse_seconds("heartbeat", optarg, &o->heartbeat) < 0)
                return -1;
            break;
        case OPT_HEARTBEAT_TIMEOUT:
            if (parse_seconds("heartbeat-timeout", optarg,
                              &o->heartbeat_timeout) < 0)
                return -1;
            break;
        case OPT_LOG_LEVEL:
            if (parse_long("log-level", optarg, LOG_LEVEL_ERR, LOG_LEVEL_DEBUG,
                           &v) < 0)
                return -1;
            o->log_level = (int)v;
            break;
        case OPT_HOSTNAME:
            o->hostname = optarg;
            break;
        case OPT_CORES:
            if (parse_long("cores", optarg, 1, 1 << 16, &o->cores) < 0)
                return -1;
            break;
        case OPT_JOB_OUTPUT_CAP:
            if (parse_long("job-output-cap", optarg, 0, LONG_MAX, &v) < 0)
                return -1;
            o->job_output_cap = (uint64_t)v;
            break;
        case OPT_JOB_KILL_GRACE:
            if (parse_seconds("job-kill-grace", optarg, &o->job_kill_grace) < 0)
                return -1;
            break;
        case OPT_TMPDIR_BASE:
            if (optarg[0] != '/') {
                fprintf(stderr,
                        "eddy-broker: --tmpdir-base=%s: expected an "
                        "absolute path\n",
                        optarg);
                return -1;
            }
            o->tmpdir_base = optarg;
            break;
        case OPT_CLIENT_LISTEN:
            o->client_listen = optarg;
            break;
        case OPT_TOKEN_FILE:
            o->token_file = optarg;
            break;
        case OPT_BOOTSTRAP:
            if (strcmp(optarg, "pmi") != 0) {
                fprintf(stderr,
                        "eddy-broker: --bootstrap=%s: only 'pmi' may be "
                        "named (args and hosts follow from the options)\n",
                        optarg);
                return -1;
            }
            o->bootstrap = optarg;
            break;
        case OPT_HELP:
            fputs(usage, stdout);
            exit(0);
        default:
            fprintf(stderr,
                    "eddy-broker: unknown or incomplete option "
                    "'%s'\n%s",
                    argv[optind - 1], usage);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "eddy-broker: unexpected argument '%s'\n%s",
                argv[optind], usage);
        return -1;
    }
    /* Started by a PMI process manager with nothing else to go by. */
    if (!o->bootstrap && o->rank < 0 && o->size < 0 && !o->hosts &&
        getenv("PMI_FD"))
        o->bootstrap = "pmi";
    if (!o->rundir && !o->bootstrap) {
        fprintf(stderr, "eddy-broker: --rundir is required\n%s", usage);
        return -1;
    }
    if (o->heartbeat_timeout <= o->heartbeat) {
        fprintf(stderr, "eddy-broker: --heartbeat-timeout must be longer "
                        "than --heartbeat\n");
        return -1;
    }
    return 0;
}

/* --- startup checks -------------------------------------------------- */

/* The rundir holds the key and the client socket: it must be ours alone. */
static int check_rundir(const char *dir, eddy_error_t *err)
{
    struct stat st;

    if (stat(dir, &st) < 0)
        return errprintf(err, "rundir %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return errprintf(err, "rundir %s: not a directory", dir);
    }
    if (st.st_uid != getuid()) {
        errno = EPERM;
        return errprintf(err, "rundir %s: owned by uid %u, not by uid %u", dir,
                         (unsigned)st.st_uid, (unsigned)getuid());
    }
    if (st.st_mode & 077) {
        errno = EPERM;
        return errprintf(err, "rundir %s: mode %04o, must be 0700", dir,
                         (unsigned)(st.st_mode & 07777));
    }
    return 0;
}

/* 64 hex characters (an optional trailing newline), mode 0600 or
 * stricter, owned by us. */
static int load_key(const char *path, unsigned char *key, eddy_error_t *err)
{
    char buf[256];
    struct stat st;
    ssize_t n;
    size_t len, binlen;
    const char *end;
    int fd;

    if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
        return errprintf(err, "key file %s: %s", path, strerror(errno));
    if (fstat(fd, &st) < 0) {
        errprintf(err, "key file %s: %s", path, strerror(errno));
        goto error;
    }
    if (!S_ISREG(st.st_mode)) {
        errno = EINVAL;
        errprintf(err, "key file %s: not a regular file", path);
        goto error;
    }
    if (st.st_uid != getuid() || (st.st_mode & 077)) {
        errno = EPERM;
        errprintf(err,
                  "key file %s: mode %04o owner uid %u: must be "
                  "readable by its owner (uid %u) only",
                  path, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
                  (unsigned)getuid());
        goto error;
    }
    if ((n = read(fd, buf, sizeof(buf) - 1)) < 0) {
        errprintf(err, "key file %s: %s", path, strerror(errno));
        goto error;
    }
    close(fd);
    buf[n] = '\0';
    len = (size_t)n;
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        buf[--len] = '\0';
    if (len != 2 * BROKER_KEY_SIZE ||
        sodium_hex2bin(key, BROKER_KEY_SIZE, buf, len, NULL, &binlen, &end) <
            0 ||
        binlen != BROKER_KEY_SIZE || *end != '\0') {
        sodium_memzero(buf, sizeof(buf));
        errno = EINVAL;
        return errprintf(err, "key file %s: expected %d hex characters", path,
                         2 * BROKER_KEY_SIZE);
    }
    sodium_memzero(buf, sizeof(buf));
    return 0;
error:
    close(fd);
    return -1;
}

/* --- services --------------------------------------------------------- */

static int topic_sort(const void *a, const void *b)
{
    return strcmp(((const struct topic_entry *)a)->topic,
                  ((const struct topic_entry *)b)->topic);
}

/* One sorted table of every handler of every service (bsearch by topic). */
static int build_topics(broker_t *b, eddy_error_t *err)
{
    size_t n = 0, k = 0;

    for (b->nsvcs = 0; broker_services[b->nsvcs]; b->nsvcs++) {
        const struct service_handler *h = broker_services[b->nsvcs]->handlers;
        for (; h && h->topic; h++)
            n++;
    }
    if (!(b->svcs = calloc(b->nsvcs ? b->nsvcs : 1, sizeof(b->svcs[0]))) ||
        !(b->topics = calloc(n ? n : 1, sizeof(b->topics[0]))))
        return errprintf(err, "out of memory");
    for (size_t i = 0; i < b->nsvcs; i++) {
        const struct service_handler *h = broker_services[i]->handlers;
        b->svcs[i].def = broker_services[i];
        for (; h && h->topic; h++) {
            b->topics[k].topic = h->topic;
            b->topics[k].fn = h->fn;
            b->topics[k++].svc = &b->svcs[i];
        }
    }
    b->ntopics = k;
    qsort(b->topics, k, sizeof(b->topics[0]), topic_sort);
    for (size_t i = 1; i < k; i++) {
        if (!strcmp(b->topics[i - 1].topic, b->topics[i].topic)) {
            errno = EEXIST;
            return errprintf(err, "topic %s is registered twice",
                             b->topics[i].topic);
        }
    }
    return 0;
}

static int services_init(broker_t *b, eddy_error_t *err)
{
    for (size_t i = 0; i < b->nsvcs; i++) {
        struct service_instance *si = &b->svcs[i];
        if (si->def->init && si->def->init(b, &si->ctx) < 0)
            return errprintf(err, "service %s: %s", si->def->name,
                             strerror(errno));
        si->inited = true;
    }
    return 0;
}

static void services_shutdown(broker_t *b)
{
    for (size_t i = 0; i < b->nsvcs; i++) {
        struct service_instance *si = &b->svcs[i];
        if (si->inited && si->def->shutdown)
            si->def->shutdown(si->ctx);
    }
}

static void services_destroy(broker_t *b)
{
    for (size_t i = b->nsvcs; i-- > 0;) {
        struct service_instance *si = &b->svcs[i];
        if (si->inited && si->def->destroy)
            si->def->destroy(si->ctx);
        si->inited = false;
    }
}

/* --- accessors for services ------------------------------------------ */

uint32_t broker_rank(const broker_t *b)
{
    return b->rank;
}

uint32_t broker_size(const broker_t *b)
{
    return b->size;
}

const char *broker_hostname(const broker_t *b)
{
    return b->hostname;
}

void *broker_service_ctx(broker_t *b, const char *name)
{
    for (size_t i = 0; i < b->nsvcs; i++) {
        if (b->svcs[i].inited && !strcmp(b->svcs[i].def->name, name))
            return b->svcs[i].ctx;
    }
    return NULL;
}

bool broker_rank_lost(broker_t *b, uint32_t rank)
{
    const uint32_t *lost_by = overlay_lost_by(b);

    return rank >= b->size || (lost_by && lost_by[rank] != TOPO_NONE);
}

uint64_t broker_job_output_cap(const broker_t *b)
{
    return b->opts.job_output_cap;
}

double broker_job_kill_grace(const broker_t *b)
{
    return b->opts.job_kill_grace;
}

const char *broker_tmpdir_base(const broker_t *b)
{
    return b->opts.tmpdir_base;
}

const char *broker_rundir(const broker_t *b)
{
    return b->rundir;
}

struct uv_loop_s *broker_loop(broker_t *b)
{
    return &b->loop;
}

const char *broker_local_uri(const broker_t *b)
{
    return b->local_uri;
}

void broker_vlog(broker_t *b, int level, const char *fmt, va_list ap)
{
    char text[2048];

    vsnprintf(text, sizeof(text), fmt, ap);
    logbuf_printf(b->log, level, "%s", text);
    if (level <= LOG_LEVEL_ERR)
        fprintf(stderr, "eddy-broker[%u]: %s\n", b->rank, text);
}

void broker_log(broker_t *b, int level, const char *fmt, ...)
{
    int saved_errno = errno;
    va_list ap;

    va_start(ap, fmt);
    broker_vlog(b, level, fmt, ap);
    va_end(ap);
    errno = saved_errno;
}

/* --- shutdown --------------------------------------------------------- */

/* Stop the loop's own handles; the loop ends once nothing is active. */
void broker_finished_check(broker_t *b)
{
    if (b->state != BROKER_FINISHED || conn_any_lingering(b))
        return;
    if (!uv_is_closing((uv_handle_t *)&b->linger_timer))
        uv_close((uv_handle_t *)&b->linger_timer, NULL);
}

static void exit_timer_cb(uv_timer_t *t)
{
    broker_t *b = t->data;

    broker_log(b, LOG_LEVEL_WARNING,
               "handles still active at exit: "
               "stopping the loop");
    uv_stop(&b->loop);
}

/* Everything is done (or we gave up waiting): close all and let the loop
 * drain. */
static void finish(broker_t *b)
{
    struct conn *c;

    if (b->state == BROKER_FINISHED)
        return;
    if (b->state < BROKER_SHUTDOWN)
        services_shutdown(b);
    b->state = BROKER_FINISHED;
    broker_log(b, LOG_LEVEL_DEBUG, "closing");
    local_stop(b);
    /* The parent link and clients linger until what is queued for them
     * (final responses, the goodbye) is written, or BROKER_LINGER_MS. */
    overlay_leave(b);
    overlay_close_all(b);
again:
    for (c = b->conns_list; c; c = c->next) {
        if (c->lingering)
            continue;
        if (c->kind == CONN_CLIENT && b->exit_code == 0)
            conn_linger(c);
        else {
            /* may drop others ('next' included): rescan */
            conn_drop(c, 0, "shutdown");
            goto again;
        }
    }
    broker_unsubscribe_all(b);
    services_destroy(b);
    /* Services destroyed their rpcs; what is left has no owner. */
    uv_timer_stop(&b->rpc_timer);
    rpc_fini(b);
    uv_close((uv_handle_t *)&b->sigterm, NULL);
    uv_close((uv_handle_t *)&b->sigint, NULL);
    /* Closing the handles restored the default action; a late SIGTERM
     * (everybody signalled at once) must not turn our clean exit into a
     * death by signal. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    uv_close((uv_handle_t *)&b->shutdown_timer, NULL);
    uv_close((uv_handle_t *)&b->hold_timer, NULL);
    uv_check_stop(&b->reaper);
    /* A service that left a handle active would keep us alive forever. */
    uv_timer_start(&b->exit_timer, exit_timer_cb, 2000, 0);
    uv_unref((uv_handle_t *)&b->exit_timer);
    broker_finished_check(b);
}

static void shutdown_timer_cb(uv_timer_t *t)
{
    broker_t *b = t->data;
    unsigned n = overlay_children_connected(b);

    if (n > 0 && b->exit_code == 0)
        broker_log(b, LOG_LEVEL_WARNING,
                   "%u children still connected after "
                   "%d s: closing",
                   n, BROKER_SHUTDOWN_TIMEOUT_MS / 1000);
    finish(b);
}

/* In BROKER_SHUTDOWN: finish (from the loop) once the children have gone
 * and no service holds the exit; until then the deadline set by
 * broker_shutdown() runs. */
static void shutdown_check(broker_t *b)
{
    if (b->state == BROKER_SHUTDOWN && b->handles_init &&
        overlay_children_connected(b) == 0 &&
        (b->shutdown_holds == 0 || b->holds_expired) &&
        !uv_is_closing((uv_handle_t *)&b->shutdown_timer))
        uv_timer_start(&b->shutdown_timer, shutdown_timer_cb, 0, 0);
}

static void hold_timer_cb(uv_timer_t *t)
{
    broker_t *b = t->data;

    if (b->shutdown_holds == 0)
        return;
    broker_log(b, LOG_LEVEL_WARNING,
               "%u service shutdown holds still pending after %d ms: "
               "not waiting longer",
               b->shutdown_holds, BROKER_SHUTDOWN_HOLD_MS);
    b->holds_expired = true;
    shutdown_check(b);
}

void broker_shutdown_hold(broker_t *b)
{
    b->shutdown_holds++;
}

void broker_shutdown_release(broker_t *b)
{
    if (b->shutdown_holds == 0) {
        broker_log(b, LOG_LEVEL_ERR, "shutdown hold released too often");
        return;
    }
    if (--b->shutdown_holds == 0)
        shutdown_check(b);
}

void broker_shutdown(broker_t *b, const char *why)
{
    msg_t *ev;

    if (b->state >= BROKER_SHUTDOWN)
        return;
    b->state = BROKER_SHUTDOWN;
    broker_log(b, LOG_LEVEL_INFO, "shutting down (%s)", why);
    /* Our subtree goes with us (a no-op if our parent already told it). */
    if (b->rank > 0 && strcmp(why, "shutdown event") != 0 &&
        (ev = msg_create(MSG_EVENT, "broker.shutdown", NULL, NULL, 0))) {
        ev->rank = b->rank;
        broker_deliver_event(b, ev);
        msg_decref(ev);
    }
    /* The deadline first: shutdown_check() replaces it once all is done. */
    uv_timer_start(&b->shutdown_timer, shutdown_timer_cb,
                   BROKER_SHUTDOWN_TIMEOUT_MS, 0);
    services_shutdown(b);
    if (b->shutdown_holds > 0)
        uv_timer_start(&b->hold_timer, hold_timer_cb, BROKER_SHUTDOWN_HOLD_MS,
                       0);
    overlay_stop_listening(b);
    local_stop(b);
    shutdown_check(b);
}

void broker_shutdown_instance(broker_t *b, const char *why)
{
    msg_t *ev;

    if (b->rank != 0) {
        broker_shutdown(b, why);
        return;
    }
    if (b->state >= BROKER_SHUTDOWN)
        return;
    broker_log(b, LOG_LEVEL_INFO, "instance shutdown (%s)", why);
    if (!(ev = msg_create(MSG_EVENT, "broker.shutdown", NULL, NULL, 0))) {
        broker_shutdown(b, "shutdown event");
        return;
    }
    ev->rank = 0;
    broker_deliver_event(b, ev); /* reaches broker_shutdown() too */
    msg_decref(ev);
}

void broker_children_gone(broker_t *b)
{
    shutdown_check(b);
}

void broker_abort(broker_t *b, int exit_code)
{
    if (b->state == BROKER_FINISHED)
        return;
    b->exit_code = exit_code;
    if (b->state < BROKER_SHUTDOWN) {
        b->state = BROKER_SHUTDOWN;
        services_shutdown(b);
    }
    /* Finish from the loop, not from inside whatever callback failed;
     * holds are not waited for: nobody is left to hear the responses. */
    uv_timer_start(&b->shutdown_timer, shutdown_timer_cb, 0, 0);
}

static void signal_cb(uv_signal_t *h, int signum)
{
    broker_t *b = h->data;
    char why[64];

    snprintf(why, sizeof(why), "%s", strsignal(signum));
    broker_shutdown_instance(b, why);
}

/* --- lifecycle -------------------------------------------------------- */

static FILE *open_log(const char *path, eddy_error_t *err)
{
    FILE *f;
    int fd;

    if ((fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) <
        0) {
        errprintf(err, "cannot open log %s: %s", path, strerror(errno));
        return NULL;
    }
    if (!(f = fdopen(fd, "a"))) {
        errprintf(err, "cannot open log %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    setvbuf(f, NULL, _IOLBF, 0);
    return f;
}

/* The cores this process may run on: the affinity mask, so a broker
 * started inside a cgroup or cpuset offers only what it was given. */
static uint32_t detect_cores(void)
{
    cpu_set_t set;
    long n;

    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return (uint32_t)CPU_COUNT(&set);
    n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1;
}

broker_t *broker_create(const struct broker_opts *o,
                        const struct bootstrap *bs,
                        eddy_error_t *err)
{
    broker_t *b;
    char *path = NULL;
    char prefix[32];
    const char *trace;

    if (sodium_init() < 0) {
        errprintf(err, "cannot initialise libsodium");
        return NULL;
    }
    if (!(b = calloc(1, sizeof(*b)))) {
        errprintf(err, "out of memory");
        return NULL;
    }
    b->opts = *o;
    b->rank = bs->rank;
    b->size = bs->size;
    b->fanout = bs->fanout;
    b->uid = getuid();
    b->ncores = o->cores > 0 ? (uint32_t)o->cores : detect_cores();
    b->t_start_ns = uv_hrtime();
    if (uv_loop_init(&b->loop) < 0) {
        free(b);
        errprintf(err, "cannot create the event loop");
        return NULL;
    }
    b->loop.data = b;
    if (o->ready_fd >= 0)
        fcntl(o->ready_fd, F_SETFD, FD_CLOEXEC);
    if (!(b->hostname = strdup(bs->hostname)) ||
        !(b->rundir = strdup(o->rundir)) ||
        asprintf(&b->local_path, "%s/local-%u", o->rundir, b->rank) < 0 ||
        asprintf(&b->local_uri, "local://%s", b->local_path) < 0) {
        b->local_path = b->local_uri = NULL;
        errprintf(err, "out of memory");
        goto error;
    }
    if (check_rundir(o->rundir, err) < 0)
        goto error;
    /* The PMI bootstrap got the key from the process manager. */
    if (bs->have_key) {
        memcpy(b->key, bs->key, sizeof(b->key));
    } else {
        if (o->keyfile)
            path = strdup(o->keyfile);
        else if (asprintf(&path, "%s/key", o->rundir) < 0)
            path = NULL;
        if (!path) {
            errprintf(err, "out of memory");
            goto error;
        }
        if (load_key(path, b->key, err) < 0)
            goto error;
        free(path);
    }
    if (asprintf(&path, "%s/broker-%u.log", o->rundir, b->rank) < 0) {
        path = NULL;
        errprintf(err, "out of memory");
        goto error;
    }
    if (!(b->logfile = open_log(path, err)))
        goto error;
    free(path);
    path = NULL;
    snprintf(prefix, sizeof(prefix), "broker[%u]", b->rank);
    if (!(b->log = logbuf_create(BROKER_LOG_LINES, prefix, b->logfile))) {
        errprintf(err, "out of memory");
        goto error;
    }
    logbuf_set_level(b->log, o->log_level);
    if ((trace = getenv("EDDY_BROKER_TRACE")) && *trace && strcmp(trace, "0")) {
        b->trace = true;
        b->trace_clients = !strcmp(trace, "2");
    }
    if (!(b->conns = keymap_create()) || !(b->route = route_create())) {
        errprintf(err, "out of memory");
        goto error;
    }
    uv_signal_init(&b->loop, &b->sigterm);
    uv_signal_init(&b->loop, &b->sigint);
    uv_timer_init(&b->loop, &b->shutdown_timer);
    uv_timer_init(&b->loop, &b->hold_timer);
    uv_timer_init(&b->loop, &b->linger_timer);
    uv_timer_init(&b->loop, &b->exit_timer);
    uv_check_init(&b->loop, &b->reaper);
    b->sigterm.data = b->sigint.data = b;
    b->shutdown_timer.data = b->linger_timer.data = b->exit_timer.data = b;
    b->hold_timer.data = b;
    b->reaper.data = b;
    b->handles_init = true;
    if (rpc_init(b) < 0) {
        errprintf(err, "out of memory");
        goto error;
    }
    if (build_topics(b, err) < 0 || overlay_create(b, bs, err) < 0)
        goto error;
    return b;
error:
    free(path);
    broker_destroy(b);
    return NULL;
}

int broker_start(broker_t *b, const struct bootstrap *bs, eddy_error_t *err)
{
    broker_log(b, LOG_LEVEL_INFO,
               "starting: rank %u of %u, fanout %u, "
               "host %s, pid %d (%s bootstrap)",
               b->rank, b->size, b->fanout, b->hostname, (int)getpid(),
               bs->method);
    uv_signal_start(&b->sigterm, signal_cb, SIGTERM);
    uv_signal_start(&b->sigint, signal_cb, SIGINT);
    if (services_init(b, err) < 0 || local_start(b, err) < 0)
        return -1;
    b->state = BROKER_RUNNING;
    if (overlay_start(b, err) < 0)
        return -1;
    return 0;
}

int broker_run(broker_t *b)
{
    uv_run(&b->loop, UV_RUN_DEFAULT);
    if (b->exit_code == 0)
        broker_log(b, LOG_LEVEL_INFO, "exiting");
    return b->exit_code;
}

static void close_walk_cb(uv_handle_t *h, void *arg)
{
    broker_t *b = arg;

    bool ours = h == (uv_handle_t *)&b->exit_timer ||
                h == (uv_handle_t *)&b->reaper ||
                h == (uv_handle_t *)&b->linger_timer;

    if (!uv_is_closing(h)) {
        /* Anything else still open here was left by a service. */
        if (b->state == BROKER_FINISHED && !ours)
            broker_log(b, LOG_LEVEL_DEBUG, "closing a leftover %s handle",
                       uv_handle_type_name(uv_handle_get_type(h)));
        uv_close(h, NULL);
    }
}

void broker_destroy(broker_t *b)
{
    int saved_errno = errno;

    if (!b)
        return;
    /* A startup failure: nothing ran yet, so close without ceremony. */
    if (b->state != BROKER_FINISHED && b->handles_init) {
        b->state = BROKER_FINISHED;
        local_stop(b);
        overlay_close_all(b);
        /* conn_drop() may drop others: always take the head. */
        while (b->conns_list)
            conn_drop(b->conns_list, 0, "shutdown");
        broker_unsubscribe_all(b);
        services_destroy(b);
    }
    if (b->handles_init) {
        /* Handles whose close callback frees memory (msgconn streams,
         * listeners) were closed above; the rest have no callback. */
        uv_walk(&b->loop, close_walk_cb, b);
        uv_run(&b->loop, UV_RUN_DEFAULT);
    }
    if (uv_loop_close(&b->loop) != 0 && b->log)
        broker_log(b, LOG_LEVEL_WARNING, "event loop still busy at exit");
    conn_free_zombies(b);
    rpc_fini(b);
    local_destroy(b);
    overlay_destroy(b);
    route_destroy(b->route);
    keymap_destroy(b->conns);
    free(b->svcs);
    free(b->topics);
    logbuf_destroy(b->log);
    if (b->logfile)
        fclose(b->logfile);
    if (b->opts.ready_fd >= 0)
        close(b->opts.ready_fd);
    sodium_memzero(b->key, sizeof(b->key));
    free(b->hostname);
    free(b->rundir);
    free(b->local_path);
    free(b->local_uri);
    free(b);
    errno = saved_errno;
}
