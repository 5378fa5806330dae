/* eddy start - start an instance and run a command (or a shell) in it.
 *
 * With --test-size=N all N brokers run on this host: eddy start makes the
 * run directory and the instance key, binds a loopback listening socket for
 * every broker that has children (so no port is ever guessed), spawns the
 * brokers with those sockets inherited, waits for rank 0 to report the
 * whole tree ready, runs CMD with EDDY_URI set, then shuts the instance
 * down and reaps every broker.
 *
 * With --hosts=FILE --rank=R it starts the one broker of this host from a
 * static hosts file (run it on every host); rank 0 then runs CMD.
 *
 * With --pmi it is one task of a parallel job (a parent eddy's, or
 * mpiexec's): it starts this task's broker with --bootstrap=pmi (rank,
 * addresses and key come through PMI), and rank 0 runs CMD; without CMD
 * every rank serves until the instance is shut down (a job has no
 * terminal for a shell).  --print-uri makes rank 0 print
 * "EDDY_URI=URI" on stderr once the instance is ready: that line is how
 * `eddy alloc`, `eddy batch` and `eddy uri ID` find a nested instance.
 * Under --pmi, --listen=auto makes rank 0 listen for tcp:// clients on its
 * host's address with its token in the run directory (docs/alloc.md:
 * a nested instance reached from another node), and the brokers offer the
 * cores the parent job gave the task (EDDY_JOB_CORES) unless
 * --cores-per-rank says otherwise.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd.h"
#include "src/common/tcplisten.h"
#include "src/common/idset.h"
#include "src/common/rmtree.h"
#include "src/common/topology.h"

extern char **environ;

static const char *const usage_text =
    "Usage: eddy start [OPTIONS] [CMD [ARG...]]\n"
    "\n"
    "Start an eddy instance, run CMD in it (default: an interactive $SHELL)\n"
    "with EDDY_URI set, then shut the instance down and exit with CMD's\n"
    "exit status (1 if CMD succeeded but a broker failed).\n"
    "\n"
    "  -s, --test-size=N     run N brokers on this host (default 1)\n"
    "  -k, --fanout=K        tree fanout (default 2)\n"
    "      --hosts=FILE      static hosts file (lines: RANK HOST ADDR:PORT);\n"
    "                        start this host's broker only (needs --rank)\n"
    "      --rank=R          this host's rank in --hosts\n"
    "      --key=FILE        instance key (64 hex digits, mode 0600);\n"
    "                        required with --hosts, made anew otherwise\n"
    "      --write-key=FILE  write a new instance key to FILE and exit\n"
    "      --rundir=DIR      run directory (default: a new one in $TMPDIR)\n"
    "      --cores-per-rank=N  offer N cores per broker to jobs (default:\n"
    "                        the cores this process may run on)\n"
    "      --tmpdir-base=DIR make each job's private directory on a node\n"
    "                        (EDDY_JOB_TMPDIR) in DIR (default $TMPDIR,\n"
    "                        else /tmp)\n"
    "      --shell-plugin-dir=DIR  load every *.so in DIR as a shell plugin\n"
    "                        of every job (repeatable; docs/plugins.md)\n"
    "  -o, --broker-opt=OPT  pass OPT to every broker (repeatable),\n"
    "                        e.g. -o --heartbeat=0.5\n"
    "      --wrap=ARGS       run each broker under ARGS (comma separated),\n"
    "                        e.g. --wrap=valgrind,--error-exitcode=99\n"
    "      --timeout=S       give up if the instance is not ready in S\n"
    "                        seconds (default 60)\n"
    "      --pmi             be one task of a PMI-1 job (mpiexec, a parent\n"
    "                        eddy): start this task's broker with the PMI\n"
    "                        bootstrap; rank 0 runs CMD (without CMD, serve\n"
    "                        until 'eddy shutdown')\n"
    "      --print-uri       print EDDY_URI=URI on stderr once ready\n"
    "      --listen=ADDR:PORT  rank 0 also accepts remote clients on\n"
    "                        ADDR:PORT (PORT 0: any free port), as\n"
    "                        tcp://HOST:PORT with the instance token; CMD\n"
    "                        gets it as EDDY_TCP_URI (docs/remote.md);\n"
    "                        --listen=auto: this host's address (as the\n"
    "                        PMI bootstrap picks it), any free port\n"
    "      --token-file=PATH with --listen: write the token there (its\n"
    "                        directory must exist) instead of under\n"
    "                        $XDG_RUNTIME_DIR/eddy or ~/.local/state/eddy\n"
    "  -v, --verbose         say how long startup and shutdown took\n";

/* How long brokers get to exit after a shutdown request, before SIGKILL. */
#define SHUTDOWN_GRACE 15.0
#define MAX_BROKER_OPTS 32
#define MAX_WRAP_ARGS 32

struct broker_proc {
    pid_t pid;
    int listen_fd; /* -1 for a leaf */
    int port;
    int status; /* wait status once reaped */
    bool reaped;
};

struct start {
    unsigned long size;
    unsigned long fanout;
    unsigned long rank;  /* --hosts: this host's rank */
    unsigned long cores; /* --cores-per-rank, 0: brokers detect */
    const char *hosts;
    const char *keyfile;
    char *tmpdir_base; /* absolute */
    char *rundir;
    bool own_rundir; /* we made it, so we remove it */
    const char *broker_opts[MAX_BROKER_OPTS];
    int nbroker_opts;
    char *wrap[MAX_WRAP_ARGS];
    int nwrap;
    char *wrapbuf;
    double timeout;
    bool verbose;
    bool pmi;       /* one task of a PMI job: the broker bootstraps by PMI */
    bool print_uri; /* say EDDY_URI=URI on stderr once ready */
    const char *listen;   /* --listen: rank 0's address for tcp:// clients */
    char *token_file;     /* --token-file: where rank 0 writes their token */
    char listen_auto[64]; /* --listen=auto resolved: "IPV4:0" */
    char broker_path[PATH_MAX + 16];
    struct broker_proc *procs;
    unsigned long nprocs;
    pid_t first_rank; /* the rank of procs[0] */
};

static volatile sig_atomic_t got_term;

static void on_term(int sig)
{
    got_term = sig;
}

static unsigned long parse_ulong(const char *what,
                                 const char *s,
                                 unsigned long min,
                                 unsigned long max)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(s, &end, 10);
    if (*s == '\0' || *s == '-' || *end != '\0' || errno || v < min || v > max)
        cmd_die("start", "%s '%s' must be a number from %lu to %lu", what, s,
                min, max);
    return v;
}

/* The broker lives beside this executable (build tree and install alike);
 * $EDDY_BROKER overrides, e.g. for a broker under a debugger. */
static void find_broker(struct start *st)
{
    const char *env = getenv("EDDY_BROKER");
    char self[PATH_MAX];
    ssize_t n;
    char *slash;

    if (env) {
        snprintf(st->broker_path, sizeof(st->broker_path), "%s", env);
        return;
    }
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        if ((slash = strrchr(self, '/'))) {
            *slash = '\0';
            snprintf(st->broker_path, sizeof(st->broker_path), "%s/eddy-broker",
                     self);
            if (access(st->broker_path, X_OK) == 0)
                return;
        }
    }
    snprintf(st->broker_path, sizeof(st->broker_path), "eddy-broker");
}

static int write_key(const char *path)
{
    unsigned char key[32];
    char hex[65];
    int fd;
    ssize_t n;

    if (sodium_init() < 0)
        return -1;
    randombytes_buf(key, sizeof(key));
    sodium_bin2hex(hex, sizeof(hex), key, sizeof(key));
    sodium_memzero(key, sizeof(key));
    hex[64] = '\n';
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    n = write(fd, hex, sizeof(hex));
    sodium_memzero(hex, sizeof(hex));
    if (n != (ssize_t)sizeof(hex) || close(fd) < 0) {
        int saved = errno ? errno : EIO;
        unlink(path);
        errno = saved;
        return -1;
    }
    return 0;
}

static void make_rundir(struct start *st)
{
    const char *tmp = getenv("TMPDIR");
    const char *jobtmp = getenv("EDDY_JOB_TMPDIR");

    /* A nested instance lives in its job's tmpdir, removed with the job
     * whatever happens to us. */
    if (st->pmi && jobtmp && jobtmp[0] == '/')
        tmp = jobtmp;
    char path[PATH_MAX];

    if (st->rundir) {
        if (mkdir(st->rundir, 0700) < 0 && errno != EEXIST)
            cmd_die("start", "cannot make run directory %s: %s", st->rundir,
                    strerror(errno));
        if (chmod(st->rundir, 0700) < 0)
            cmd_die("start", "chmod %s: %s", st->rundir, strerror(errno));
        return;
    }
    snprintf(path, sizeof(path), "%s/eddy-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(path))
        cmd_die("start", "cannot make a run directory in %s: %s",
                tmp && *tmp ? tmp : "/tmp", strerror(errno));
    if (!(st->rundir = strdup(path)))
        cmd_die("start", "out of memory");
    st->own_rundir = true;
}

/* A loopback socket bound to a port the kernel picks, for a broker that has
 * children.  The children learn the port from their --parent argument. */
static int bind_loopback(int *port)
{
    struct in_addr lo = {.s_addr = htonl(INADDR_LOOPBACK)};

    return tcplisten_any_port(lo, port);
}

static pid_t spawn_broker(struct start *st,
                          unsigned long rank,
                          int listen_fd,
                          int parent_port,
                          int ready_fd,
                          pid_t pgid)
{
    char *argv[MAX_WRAP_ARGS + MAX_BROKER_OPTS + 16];
    char a_rank[32], a_size[32], a_fanout[32], a_rundir[PATH_MAX + 16];
    char a_parent[64], a_key[PATH_MAX + 16], a_hosts[PATH_MAX + 16];
    char a_cores[32], a_tmpdir[PATH_MAX + 32], a_listen[300];
    char a_token[PATH_MAX + 16];
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int ac = 0;
    pid_t pid;
    int rc;

    for (int i = 0; i < st->nwrap; i++)
        argv[ac++] = st->wrap[i];
    argv[ac++] = st->broker_path;
    snprintf(a_rank, sizeof(a_rank), "--rank=%lu", rank);
    snprintf(a_rundir, sizeof(a_rundir), "--rundir=%s", st->rundir);
    snprintf(a_fanout, sizeof(a_fanout), "--fanout=%lu", st->fanout);
    if (!st->pmi)
        argv[ac++] = a_rank;
    argv[ac++] = a_rundir;
    argv[ac++] = a_fanout;
    if (st->pmi) {
        argv[ac++] = (char *)"--bootstrap=pmi";
    } else if (st->hosts) {
        snprintf(a_hosts, sizeof(a_hosts), "--hosts=%s", st->hosts);
        argv[ac++] = a_hosts;
    } else {
        snprintf(a_size, sizeof(a_size), "--size=%lu", st->size);
        argv[ac++] = a_size;
    }
    if (st->keyfile) {
        snprintf(a_key, sizeof(a_key), "--key=%s", st->keyfile);
        argv[ac++] = a_key;
    }
    if (listen_fd >= 0)
        argv[ac++] = (char *)"--listen-fd=3";
    if (parent_port > 0) {
        snprintf(a_parent, sizeof(a_parent), "--parent=127.0.0.1:%d",
                 parent_port);
        argv[ac++] = a_parent;
    }
    if (ready_fd >= 0)
        argv[ac++] = (char *)"--ready-fd=4";
    if (st->cores > 0) {
        snprintf(a_cores, sizeof(a_cores), "--cores=%lu", st->cores);
        argv[ac++] = a_cores;
    }
    snprintf(a_tmpdir, sizeof(a_tmpdir), "--tmpdir-base=%s", st->tmpdir_base);
    argv[ac++] = a_tmpdir;
    if (st->listen && rank == 0) {
        snprintf(a_listen, sizeof(a_listen), "--client-listen=%s", st->listen);
        argv[ac++] = a_listen;
        if (st->token_file) {
            snprintf(a_token, sizeof(a_token), "--token-file=%s",
                     st->token_file);
            argv[ac++] = a_token;
        }
    }
    for (int i = 0; i < st->nbroker_opts; i++)
        argv[ac++] = (char *)st->broker_opts[i];
    argv[ac] = NULL;

    posix_spawn_file_actions_init(&fa);
    /* Brokers read nothing from a terminal; keep them off ours. */
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (listen_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, listen_fd, 3);
    if (ready_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, ready_fd, 4);
    /* All brokers share one process group of their own, so a Ctrl-C at the
     * terminal reaches the command, not the brokers. */
    posix_spawnattr_init(&attr);
    /* Under --pmi there is no terminal, and the broker must stay in the
     * job's process group, so that whatever ends the job ends it too. */
    if (!st->pmi) {
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
        posix_spawnattr_setpgroup(&attr, pgid);
    }
    rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return pid;
}

static struct broker_proc *proc_by_pid(struct start *st,
                                       pid_t pid,
                                       unsigned long *rank)
{
    for (unsigned long i = 0; i < st->nprocs; i++) {
        if (st->procs[i].pid == pid) {
            *rank = st->first_rank + i;
            return &st->procs[i];
        }
    }
    return NULL;
}

static void describe_status(int status, char *buf, size_t size)
{
    if (WIFEXITED(status))
        snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, size, "wait status 0x%x", status);
}

/* Reap a broker and say so if it did not end cleanly. */
static void note_broker_exit(struct start *st, pid_t pid, int status)
{
    unsigned long rank;
    struct broker_proc *p = proc_by_pid(st, pid, &rank);
    char why[128];

    if (!p)
        return;
    p->reaped = true;
    p->status = status;
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        describe_status(status, why, sizeof(why));
        cmd_warn("start", "broker rank %lu (pid %d) %s", rank, (int)pid, why);
    }
}

static unsigned long brokers_alive(struct start *st)
{
    unsigned long n = 0;
    for (unsigned long i = 0; i < st->nprocs; i++)
        if (st->procs[i].pid > 0 && !st->procs[i].reaped)
            n++;
    return n;
}

static void reap_nohang(struct start *st)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        note_broker_exit(st, pid, status);
}

static void signal_brokers(struct start *st, int sig)
{
    for (unsigned long i = 0; i < st->nprocs; i++)
        if (st->procs[i].pid > 0 && !st->procs[i].reaped)
            kill(st->procs[i].pid, sig);
}

/* Wait up to 'timeout' seconds for every broker to exit. */
static bool wait_brokers(struct start *st, double timeout)
{
    double deadline = cmd_now() + timeout;

    while (brokers_alive(st) > 0) {
        reap_nohang(st);
        if (brokers_alive(st) == 0)
            break;
        if (cmd_now() > deadline)
            return false;
        usleep(2000);
    }
    return true;
}

/* Block until rank 0 writes "ready" on the pipe (the whole tree is up), a
 * broker dies first, or the timeout passes. */
static int wait_ready(struct start *st, int fd)
{
    double deadline = cmd_now() + st->timeout;
    char buf[16];
    size_t got = 0;

    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ms = (int)((deadline - cmd_now()) * 1000);
        ssize_t n;

        if (ms <= 0) {
            cmd_warn("start", "instance not ready after %.0f s", st->timeout);
            return -1;
        }
        if (poll(&pfd, 1, ms > 100 ? 100 : ms) < 0 && errno != EINTR)
            return -1;
        if (got_term)
            return -1;
        if (pfd.revents) {
            n = read(fd, buf + got, sizeof(buf) - 1 - got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                cmd_warn("start", "rank 0 exited before the instance was "
                                  "ready");
                return -1;
            }
            got += (size_t)n;
            buf[got] = '\0';
            if (strstr(buf, "ready"))
                return 0;
        }
        /* A broker that fails at startup (bad key, port clash) would leave
         * rank 0 waiting for its subtree forever: notice and give up. */
        reap_nohang(st);
        for (unsigned long i = 0; i < st->nprocs; i++)
            if (st->procs[i].reaped)
                return -1;
    }
}

static void show_log_tail(struct start *st, unsigned long rank)
{
    char path[PATH_MAX], line[1024];
    char *lines[10] = {0};
    int n = 0;
    FILE *f;

    snprintf(path, sizeof(path), "%s/broker-%lu.log", st->rundir, rank);
    if (!(f = fopen(path, "r")))
        return;
    while (fgets(line, sizeof(line), f)) {
        free(lines[n % 10]);
        lines[n % 10] = strdup(line);
        n++;
    }
    fclose(f);
    fprintf(stderr, "eddy start: last lines of %s:\n", path);
    for (int i = n > 10 ? n - 10 : 0; i < n; i++)
        fprintf(stderr, "  %s", lines[i % 10] ? lines[i % 10] : "\n");
    for (int i = 0; i < 10; i++)
        free(lines[i]);
}

static bool broker_failed(const struct broker_proc *p)
{
    return p->pid > 0 && (!p->reaped || !(WIFEXITED(p->status) &&
                                          WEXITSTATUS(p->status) == 0));
}

/* Ask rank 0 to shut the instance down; fall back to signals. */
static void shutdown_instance(struct start *st, bool *clean)
{
    char uri[PATH_MAX + 32];
    eddy_error_t err;
    eddy_t *h;
    eddy_future_t *f = NULL;
    bool asked = false;

    reap_nohang(st);
    snprintf(uri, sizeof(uri), "local://%s/local-0", st->rundir);
    if (st->first_rank == 0 && st->nprocs > 0 && !st->procs[0].reaped) {
        if ((h = eddy_open(uri, 0, &err))) {
            f = eddy_rpc(h, "broker.shutdown", 0, 0, NULL, NULL, 0);
            if (f && eddy_future_wait_for(f, 5.0) == 0 &&
                eddy_rpc_get(f, NULL) == 0)
                asked = true;
            eddy_future_destroy(f);
            eddy_close(h);
        } else if (errno == ENOENT || errno == ECONNREFUSED) {
            /* Rank 0 removes its socket when it begins to shut down
             * (e.g. the command ran `eddy shutdown`): just wait. */
            asked = true;
        }
    } else if (st->first_rank == 0 && st->nprocs > 0) {
        /* Rank 0 has exited already: the others follow its shutdown
         * event, or lose their parent, and exit by themselves. */
        asked = true;
    }
    if (!asked) {
        if (st->first_rank == 0)
            cmd_warn("start", "rank 0 did not take the shutdown request; "
                              "sending SIGTERM to every broker");
        signal_brokers(st, SIGTERM);
    }
    if (!wait_brokers(st, SHUTDOWN_GRACE)) {
        cmd_warn("start",
                 "%lu broker(s) still running %.0f s after "
                 "shutdown: killing them",
                 brokers_alive(st), SHUTDOWN_GRACE);
        signal_brokers(st, SIGKILL);
        wait_brokers(st, 5.0);
        *clean = false;
    }
    for (unsigned long i = 0; i < st->nprocs; i++) {
        if (broker_failed(&st->procs[i])) {
            *clean = false;
            show_log_tail(st, st->first_rank + i);
        }
    }
}

/* Run CMD (or $SHELL) with EDDY_URI set; return its wait status. */
static int run_command(struct start *st, int argc, char **argv)
{
    char uri[PATH_MAX + 32];
    const char *shell = getenv("SHELL");
    char *shargv[] = {(char *)(shell && *shell ? shell : "/bin/sh"), NULL};
    char **cmdv = argc > 0 ? argv : shargv;
    struct sigaction sa = {.sa_handler = SIG_IGN}, old_int, old_quit;
    int status = 0;
    pid_t pid, w;

    snprintf(uri, sizeof(uri), "local://%s/local-0", st->rundir);
    setenv("EDDY_URI", uri, 1);
    /* Like a shell, leave Ctrl-C to the command while it runs. */
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGQUIT, &sa, &old_quit);
    if ((pid = fork()) < 0)
        cmd_die("start", "fork: %s", strerror(errno));
    if (pid == 0) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGQUIT, &old_quit, NULL);
        signal(SIGTERM, SIG_DFL);
        /* The job's PMI connection was the broker's, not the command's:
         * an MPI program run here must not take it for its own. */
        unsetenv("PMI_FD");
        unsetenv("PMI_RANK");
        unsetenv("PMI_SIZE");
        unsetenv("PMI_SPAWNED");
        unsetenv("PMI_JOBID");      /* Slurm's PMI-2 */
        unsetenv("SLURM_MPI_TYPE"); /* (src/broker/pmi2.c) */
        execvp(cmdv[0], cmdv);
        fprintf(stderr, "eddy start: cannot run %s: %s\n", cmdv[0],
                strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    for (;;) {
        w = waitpid(-1, &status, 0);
        if (w == pid)
            break;
        if (w > 0) {
            unsigned long rank;
            note_broker_exit(st, w, status);
            /* Without rank 0 there is no instance: end the command. */
            if (proc_by_pid(st, w, &rank) && rank == 0) {
                cmd_warn("start", "the instance shut down while the command "
                                  "was running: sending it SIGTERM");
                kill(pid, SIGTERM);
            }
            continue;
        }
        if (errno == EINTR && got_term) {
            kill(pid, got_term);
            got_term = 0;
            continue;
        }
        if (errno != EINTR)
            break;
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    return status;
}

/* Wait for our brokers to exit; a signal to us goes to them. */
static void serve_until_shutdown(struct start *st)
{
    while (brokers_alive(st) > 0) {
        int ws;
        pid_t w = waitpid(-1, &ws, 0);
        if (w > 0)
            note_broker_exit(st, w, ws);
        else if (errno == EINTR && got_term)
            signal_brokers(st, got_term), got_term = 0;
        else if (errno != EINTR)
            break;
    }
}

static void parse_wrap(struct start *st, const char *arg)
{
    char *save = NULL, *tok;

    free(st->wrapbuf);
    if (!(st->wrapbuf = strdup(arg)))
        cmd_die("start", "out of memory");
    st->nwrap = 0;
    for (tok = strtok_r(st->wrapbuf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (st->nwrap == MAX_WRAP_ARGS)
            cmd_die("start", "--wrap: more than %d arguments", MAX_WRAP_ARGS);
        st->wrap[st->nwrap++] = tok;
    }
}

/* The brokers take an absolute path: a relative one is relative to where
 * we run.  The directory is not checked here: each broker reports what
 * does not work there when a job needs it. */
static void set_tmpdir_base(struct start *st, const char *dir)
{
    char cwd[PATH_MAX];

    if (!*dir)
        cmd_die("start", "--tmpdir-base: empty path");
    free(st->tmpdir_base);
    if (dir[0] == '/')
        st->tmpdir_base = strdup(dir);
    else if (!getcwd(cwd, sizeof(cwd)))
        cmd_die("start", "--tmpdir-base=%s: getcwd: %s", dir, strerror(errno));
    else if (asprintf(&st->tmpdir_base, "%s/%s", cwd, dir) < 0)
        st->tmpdir_base = NULL;
    if (!st->tmpdir_base)
        cmd_die("start", "out of memory");
    if (strlen(st->tmpdir_base) >= PATH_MAX)
        cmd_die("start", "--tmpdir-base: path too long");
}

/* --shell-plugin-dir: the brokers pass their environment to the job
 * shells, which load every *.so of the directories listed in
 * EDDY_SHELL_PLUGIN_DIRS (colon separated, absolute) before the job's own
 * plugins.  The directory must exist now: a typo should fail here, not
 * in every job. */
static void add_shell_plugin_dir(const char *dir)
{
    static char *dirs;
    char cwd[PATH_MAX], *abs = NULL, *joined = NULL;
    struct stat sb;

    if (!*dir)
        cmd_die("start", "--shell-plugin-dir: empty path");
    if (strchr(dir, ':'))
        cmd_die("start",
                "--shell-plugin-dir=%s: a path with ':' cannot be "
                "listed",
                dir);
    if (dir[0] == '/')
        abs = strdup(dir);
    else if (!getcwd(cwd, sizeof(cwd)))
        cmd_die("start", "--shell-plugin-dir=%s: getcwd: %s", dir,
                strerror(errno));
    else if (asprintf(&abs, "%s/%s", cwd, dir) < 0)
        abs = NULL;
    if (!abs)
        cmd_die("start", "out of memory");
    if (stat(abs, &sb) < 0)
        cmd_die("start", "--shell-plugin-dir=%s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        cmd_die("start", "--shell-plugin-dir=%s: not a directory", dir);
    if (asprintf(&joined, "%s%s%s", dirs ? dirs : "", dirs ? ":" : "", abs) < 0)
        cmd_die("start", "out of memory");
    free(abs);
    free(dirs);
    dirs = joined;
    if (setenv("EDDY_SHELL_PLUGIN_DIRS", dirs, 1) < 0)
        cmd_die("start", "setenv: %s", strerror(errno));
}

static void parse_args(struct start *st, int argc, char **argv)
{
    enum {
        OPT_HOSTS = 256,
        OPT_RANK,
        OPT_KEY,
        OPT_WRITE_KEY,
        OPT_RUNDIR,
        OPT_WRAP,
        OPT_TIMEOUT,
        OPT_CORES,
        OPT_TMPDIR_BASE,
        OPT_SHELL_PLUGIN_DIR,
        OPT_PMI,
        OPT_PRINT_URI,
        OPT_LISTEN,
        OPT_TOKEN_FILE
    };
    static const struct option opts[] = {
        {"test-size", required_argument, NULL, 's'},
        {"fanout", required_argument, NULL, 'k'},
        {"hosts", required_argument, NULL, OPT_HOSTS},
        {"rank", required_argument, NULL, OPT_RANK},
        {"key", required_argument, NULL, OPT_KEY},
        {"write-key", required_argument, NULL, OPT_WRITE_KEY},
        {"rundir", required_argument, NULL, OPT_RUNDIR},
        {"broker-opt", required_argument, NULL, 'o'},
        {"wrap", required_argument, NULL, OPT_WRAP},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"cores-per-rank", required_argument, NULL, OPT_CORES},
        {"tmpdir-base", required_argument, NULL, OPT_TMPDIR_BASE},
        {"shell-plugin-dir", required_argument, NULL, OPT_SHELL_PLUGIN_DIR},
        {"verbose", no_argument, NULL, 'v'},
        {"pmi", no_argument, NULL, OPT_PMI},
        {"print-uri", no_argument, NULL, OPT_PRINT_URI},
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
        {NULL, 0, NULL, 0},
    };
    bool have_rank = false, have_size = false;
    char *end;
    int c;

    while ((c = getopt_long(argc, argv, "+s:k:o:v", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            st->size = parse_ulong("test size", optarg, 1, 4096);
            have_size = true;
            break;
        case 'k':
            st->fanout = parse_ulong("fanout", optarg, 1, 1024);
            break;
        case OPT_HOSTS:
            st->hosts = optarg;
            break;
        case OPT_RANK:
            st->rank = parse_ulong("rank", optarg, 0, 1u << 20);
            have_rank = true;
            break;
        case OPT_KEY:
            st->keyfile = optarg;
            break;
        case OPT_WRITE_KEY:
            if (write_key(optarg) < 0)
                cmd_die("start", "cannot write key %s: %s", optarg,
                        strerror(errno));
            exit(0);
        case OPT_RUNDIR:
            st->rundir = optarg;
            break;
        case 'o':
            if (st->nbroker_opts == MAX_BROKER_OPTS)
                cmd_die("start", "more than %d --broker-opt", MAX_BROKER_OPTS);
            st->broker_opts[st->nbroker_opts++] = optarg;
            break;
        case OPT_WRAP:
            parse_wrap(st, optarg);
            break;
        case OPT_TIMEOUT:
            st->timeout = strtod(optarg, &end);
            if (*optarg == '\0' || *end != '\0' || !(st->timeout > 0))
                cmd_die("start", "timeout '%s' is not a number of seconds",
                        optarg);
            break;
        case 'v':
            st->verbose = true;
            break;
        case OPT_CORES:
            st->cores = parse_ulong("cores per rank", optarg, 1, 1u << 16);
            break;
        case OPT_TMPDIR_BASE:
            set_tmpdir_base(st, optarg);
            break;
        case OPT_SHELL_PLUGIN_DIR:
            add_shell_plugin_dir(optarg);
            break;
        case OPT_PMI:
            st->pmi = true;
            break;
        case OPT_PRINT_URI:
            st->print_uri = true;
            break;
        case OPT_LISTEN:
            if (strlen(optarg) > 260)
                cmd_die("start", "--listen address too long");
            st->listen = optarg;
            break;
        case OPT_TOKEN_FILE:
            if (optarg[0] != '/' || strlen(optarg) >= PATH_MAX)
                cmd_die("start", "--token-file: an absolute path, please");
            free(st->token_file);
            if (!(st->token_file = strdup(optarg)))
                cmd_die("start", "out of memory");
            break;
        default:
            fputs(usage_text, stderr);
            exit(1);
        }
    }
    if (st->pmi) {
        const char *r = getenv("PMI_RANK");
        if (st->hosts || have_size || have_rank || st->keyfile)
            cmd_die("start", "--pmi takes rank, size and key from PMI: no "
                             "--hosts, --test-size, --rank or --key");
        if (!getenv("PMI_FD") || !r)
            cmd_die("start", "--pmi: PMI_FD and PMI_RANK are not set (run "
                             "it under mpiexec or as an eddy job)");
        st->rank = parse_ulong("PMI_RANK", r, 0, 1u << 20);
    }
    if (st->hosts && have_size)
        cmd_die("start", "--hosts and --test-size exclude each other");
    if (st->hosts && !have_rank)
        cmd_die("start", "--hosts needs --rank (this host's rank)");
    if (!st->hosts && have_rank)
        cmd_die("start", "--rank goes with --hosts");
    if (st->hosts && !st->keyfile)
        cmd_die("start", "--hosts needs --key=FILE (the same key on every "
                         "host; make one with --write-key=FILE)");
    if (st->keyfile && access(st->keyfile, R_OK) < 0)
        cmd_die("start", "key file %s: %s", st->keyfile, strerror(errno));
    if (!st->tmpdir_base) {
        const char *tmp = getenv("TMPDIR");
        set_tmpdir_base(st, tmp && tmp[0] == '/' ? tmp : "/tmp");
    }
}

/* --listen=auto: the first IPv4 address this host's name resolves to, else
 * loopback, any free port.  It is the address the PMI bootstrap gives the
 * overlay, so whoever reaches the nested brokers reaches this too. */
static void resolve_listen_auto(struct start *st)
{
    struct in_addr addr;
    char host[256], ip[INET_ADDRSTRLEN];

    if (gethostname(host, sizeof(host)) < 0)
        host[0] = '\0';
    host[sizeof(host) - 1] = '\0';
    addr = tcplisten_host_address(host[0] ? host : NULL);
    if (!inet_ntop(AF_INET, &addr, ip, sizeof(ip)))
        cmd_die("start", "--listen=auto: inet_ntop: %s", strerror(errno));
    snprintf(st->listen_auto, sizeof(st->listen_auto), "%s:0", ip);
    st->listen = st->listen_auto;
}

/* Under --pmi: what the parent job gave this task.  EDDY_JOB_CORES (the
 * job's core ids on this node, set by eddy-shell) becomes --cores, so a
 * nested instance schedules its allocation and not the whole host (tasks
 * are not bound to their cores, so the brokers would otherwise count every
 * core of the host).  With --listen, rank 0 keeps the token of its tcp://
 * clients in the run directory: in the job's tmpdir, mode 0700, removed
 * with the job whatever happens to the broker, and where `eddy proxy`
 * looks for it (docs/alloc.md). */
static void pmi_inherit(struct start *st)
{
    const char *cores = getenv("EDDY_JOB_CORES");
    char path[PATH_MAX + 16];
    eddy_error_t err;
    idset_t *ids;
    size_t n;

    if (!st->pmi)
        return;
    if (st->cores == 0 && cores && *cores) {
        if (!(ids = idset_decode(cores, &err)))
            cmd_die("start", "EDDY_JOB_CORES='%s': %s", cores, err.text);
        n = idset_count(ids);
        idset_destroy(ids);
        if (n == 0 || n > 1u << 16)
            cmd_die("start", "EDDY_JOB_CORES='%s': not 1 to 65536 cores",
                    cores);
        st->cores = n;
    }
    if (st->listen && st->rank == 0) {
        snprintf(path, sizeof(path), "%s/token", st->rundir);
        free(st->token_file);
        if (!(st->token_file = strdup(path)))
            cmd_die("start", "out of memory");
        /* for CMD, a client of this instance */
        if (setenv("EDDY_TOKEN_FILE", path, 1) < 0)
            cmd_die("start", "setenv: %s", strerror(errno));
    }
}

/* With --listen, rank 0 wrote its tcp:// URI to RUNDIR/tcp-uri before it
 * said ready (the port may be the kernel's choice): give it to CMD. */
static void export_tcp_uri(struct start *st)
{
    char path[PATH_MAX + 16], uri[300];
    FILE *f;

    if (!st->listen)
        return;
    snprintf(path, sizeof(path), "%s/tcp-uri", st->rundir);
    if (!(f = fopen(path, "re")) || !fgets(uri, sizeof(uri), f)) {
        cmd_warn("start", "cannot read the tcp:// URI from %s", path);
        if (f)
            fclose(f);
        return;
    }
    fclose(f);
    uri[strcspn(uri, "\n")] = '\0';
    setenv("EDDY_TCP_URI", uri, 1);
    if (st->verbose || st->print_uri)
        fprintf(stderr, "EDDY_TCP_URI=%s\n", uri);
}

static int start_run(int argc, char **argv)
{
    struct start st = {.size = 1, .fanout = 2, .timeout = 60};
    struct sigaction sa = {.sa_handler = on_term};
    int pipefds[2] = {-1, -1};
    int status = 0, rc;
    bool clean = true;
    char keypath[PATH_MAX];
    double t0 = cmd_now(), t1, t2;
    pid_t pgid = 0;

    /* 1. options, the broker program and the run directory */
    parse_args(&st, argc, argv);
    find_broker(&st);
    if (st.listen && !strcmp(st.listen, "auto"))
        resolve_listen_auto(&st);
    make_rundir(&st);
    pmi_inherit(&st);
    if (!st.keyfile && !st.pmi) {
        snprintf(keypath, sizeof(keypath), "%s/key", st.rundir);
        if (write_key(keypath) < 0)
            cmd_die("start", "cannot write key %s: %s", keypath,
                    strerror(errno));
        st.keyfile = keypath;
    }
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    /* 2. listening sockets and the readiness pipe */
    st.first_rank = st.hosts || st.pmi ? (pid_t)st.rank : 0;
    st.nprocs = st.hosts || st.pmi ? 1 : st.size;
    if (!(st.procs = calloc(st.nprocs, sizeof(st.procs[0]))))
        cmd_die("start", "out of memory");
    for (unsigned long i = 0; i < st.nprocs; i++) {
        st.procs[i].listen_fd = -1;
        if (!st.hosts && !st.pmi &&
            topo_nchildren((uint32_t)i, (uint32_t)st.size,
                           (uint32_t)st.fanout) > 0) {
            st.procs[i].listen_fd = bind_loopback(&st.procs[i].port);
            if (st.procs[i].listen_fd < 0)
                cmd_die("start", "cannot listen on 127.0.0.1: %s",
                        strerror(errno));
        }
    }
    if (st.first_rank == 0 && pipe2(pipefds, O_CLOEXEC) < 0)
        cmd_die("start", "pipe: %s", strerror(errno));

    /* 3. spawn the brokers */
    for (unsigned long i = 0; i < st.nprocs; i++) {
        uint32_t parent = topo_parent((uint32_t)i, (uint32_t)st.fanout);
        int pport = (!st.hosts && !st.pmi && parent != TOPO_NONE)
                        ? st.procs[parent].port
                        : 0;
        pid_t pid = spawn_broker(&st, st.first_rank + i, st.procs[i].listen_fd,
                                 pport, i == 0 ? pipefds[1] : -1, pgid);
        if (pid < 0) {
            cmd_warn("start", "cannot run %s: %s", st.broker_path,
                     strerror(errno));
            clean = false;
            break;
        }
        st.procs[i].pid = pid;
        if (pgid == 0)
            pgid = pid;
        if (st.procs[i].listen_fd >= 0)
            close(st.procs[i].listen_fd);
    }
    if (pipefds[1] >= 0)
        close(pipefds[1]);
    /* The job's PMI connection is the broker's now. */
    if (st.pmi && getenv("PMI_FD"))
        close(atoi(getenv("PMI_FD")));

    /* 4. wait for the whole tree, run the command, shut down */
    if (clean && st.first_rank == 0) {
        if (wait_ready(&st, pipefds[0]) < 0) {
            clean = false;
        } else {
            t1 = cmd_now();
            if (st.verbose)
                fprintf(stderr, "eddy start: %lu brokers ready in %.3f s\n",
                        st.hosts || st.pmi ? 1 : st.size, t1 - t0);
            /* EDDY_TCP_URI first: the EDDY_URI line means "ready" to
             * whoever waits for it (nested.c). */
            export_tcp_uri(&st);
            if (st.print_uri) {
                fprintf(stderr, "EDDY_URI=local://%s/local-0\n", st.rundir);
                fflush(stderr);
            }
            if (st.pmi && argc - optind == 0)
                serve_until_shutdown(&st);
            else
                status = run_command(&st, argc - optind, argv + optind);
        }
    } else if (clean) {
        /* Not rank 0: serve until the instance shuts down. */
        serve_until_shutdown(&st);
    }
    t1 = cmd_now();
    shutdown_instance(&st, &clean);
    t2 = cmd_now();
    if (st.verbose)
        fprintf(stderr, "eddy start: shutdown took %.3f s\n", t2 - t1);
    if (pipefds[0] >= 0)
        close(pipefds[0]);

    /* 5. clean up and report */
    if (st.own_rundir) {
        eddy_error_t err;

        if (rmtree(st.rundir, &err) < 0 && errno != ENOENT) {
            cmd_warn("start", "cannot remove the run directory: %s", err.text);
            clean = false;
        }
    }
    if (st.own_rundir)
        free(st.rundir);
    free(st.procs);
    free(st.wrapbuf);
    free(st.tmpdir_base);
    free(st.token_file);
    rc = cmd_exit_code(status);
    if (rc == 0 && !clean)
        rc = 1;
    return rc;
}

const struct cmd cmd_start = {
    .name = "start",
    .summary = "start an instance and run a command in it",
    .usage = usage_text,
    .run = start_run,
};
