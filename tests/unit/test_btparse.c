/* test_btparse.c - unit tests for src/common/btparse.c
 *
 * The samples are real gdb 13 output, captured with
 *   gdb -batch -p PID -ex 'set pagination off' -ex 'thread apply all bt'
 * on small programs built for the purpose (addresses and pids as they
 * came).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/common/btparse.h"
#include "src/common/stacktree.h"

/* A C program (gcc -O0) with two threads: the main thread in poll(),
 * a second one in pthread_cond_wait().  `thread apply all bt`. */
static const char sample_threads[] =
    "[New LWP 24743]\n"
    "[Thread debugging using libthread_db enabled]\n"
    "Using host libthread_db library "
    "\"/lib/x86_64-linux-gnu/libthread_db.so.1\".\n"
    "0x00007f65d582226f in __GI___poll (fds=0x0, nfds=0, timeout=-1) at "
    "../sysdeps/unix/sysv/linux/poll.c:29\n"
    "29\t../sysdeps/unix/sysv/linux/poll.c: No such file or directory.\n"
    "\n"
    "Thread 2 (Thread 0x7f65d57226c0 (LWP 24743) \"hang\"):\n"
    "#0  __futex_abstimed_wait_common64 (private=0, cancel=true, abstime=0x0, "
    "op=393, expected=0, futex_word=0x56265230a0e8 <cv+40>) at "
    "./nptl/futex-internal.c:57\n"
    "#1  __futex_abstimed_wait_common "
    "(futex_word=futex_word@entry=0x56265230a0e8 <cv+40>, "
    "expected=expected@entry=0, clockid=clockid@entry=0, "
    "abstime=abstime@entry=0x0, private=private@entry=0, "
    "cancel=cancel@entry=true) at ./nptl/futex-internal.c:87\n"
    "#2  0x00007f65d57abf7b in __GI___futex_abstimed_wait_cancelable64 "
    "(futex_word=futex_word@entry=0x56265230a0e8 <cv+40>, "
    "expected=expected@entry=0, clockid=clockid@entry=0, "
    "abstime=abstime@entry=0x0, private=private@entry=0) at "
    "./nptl/futex-internal.c:139\n"
    "#3  0x00007f65d57ae5d8 in __pthread_cond_wait_common (abstime=0x0, "
    "clockid=0, mutex=0x56265230a080 <mu>, cond=0x56265230a0c0 <cv>) at "
    "./nptl/pthread_cond_wait.c:503\n"
    "#4  ___pthread_cond_wait (cond=0x56265230a0c0 <cv>, mutex=0x56265230a080 "
    "<mu>) at ./nptl/pthread_cond_wait.c:618\n"
    "#5  0x00005626523071cd in waiter (arg=0x0) at hang.c:12\n"
    "#6  0x00007f65d57af1f5 in start_thread (arg=<optimized out>) at "
    "./nptl/pthread_create.c:442\n"
    "#7  0x00007f65d582f8ec in clone3 () at "
    "../sysdeps/unix/sysv/linux/x86_64/clone3.S:81\n"
    "\n"
    "Thread 1 (Thread 0x7f65d5723740 (LWP 24741) \"hang\"):\n"
    "#0  0x00007f65d582226f in __GI___poll (fds=0x0, nfds=0, timeout=-1) at "
    "../sysdeps/unix/sysv/linux/poll.c:29\n"
    "#1  0x0000562652307201 in wait_forever (ms=-1) at hang.c:19\n"
    "#2  0x0000562652307257 in main (argc=1, argv=0x7ffe40b97af8) at "
    "hang.c:28\n"
    "[Inferior 1 (process 24741) detached]\n";

/* A C++ program (g++ -O2) stopped in a signal handler raised from a
 * std::sort comparator lambda: inlined frames, templates, operator(). */
static const char sample_cxx[] =
    "[Thread debugging using libthread_db enabled]\n"
    "Using host libthread_db library "
    "\"/lib/x86_64-linux-gnu/libthread_db.so.1\".\n"
    "0x00007f5fc84d1dd0 in __libc_pause () at "
    "../sysdeps/unix/sysv/linux/pause.c:29\n"
    "29\t../sysdeps/unix/sysv/linux/pause.c: No such file or directory.\n"
    "\n"
    "Thread 1 (Thread 0x7f5fc8820740 (LWP 24818) \"cxx\"):\n"
    "#0  0x00007f5fc84d1dd0 in __libc_pause () at "
    "../sysdeps/unix/sysv/linux/pause.c:29\n"
    "#1  0x000055bec34cb255 in solver::on_usr1 () at cxx.cc:19\n"
    "#2  <signal handler called>\n"
    "#3  __pthread_kill_implementation (threadid=<optimized out>, "
    "signo=signo@entry=10, no_tid=no_tid@entry=0) at ./nptl/pthread_kill.c:44\n"
    "#4  0x00007f5fc8488f4f in __pthread_kill_internal (signo=10, "
    "threadid=<optimized out>) at ./nptl/pthread_kill.c:78\n"
    "#5  0x00007f5fc8439fb2 in __GI_raise (sig=10) at "
    "../sysdeps/posix/raise.c:26\n"
    "#6  0x000055bec34cba4a in "
    "solver::Grid<int>::step(int)::{lambda(solver::Cell<int> const&, "
    "solver::Cell<int> const&)#1}::operator()(solver::Cell<int> const&, "
    "solver::Cell<int> const&) const (__closure=<synthetic pointer>, b=..., "
    "a=...) at cxx.cc:31\n"
    "#7  "
    "__gnu_cxx::__ops::_Iter_comp_iter<solver::Grid<int>::step(int)::{lambda("
    "solver::Cell<int> const&, solver::Cell<int> "
    "const&)#1}>::operator()<__gnu_cxx::__normal_iterator<solver::Cell<int>*, "
    "std::vector<solver::Cell<int>, std::allocator<solver::Cell<int> > > >, "
    "__gnu_cxx::__normal_iterator<solver::Cell<int>*, "
    "std::vector<solver::Cell<int>, std::allocator<solver::Cell<int> > > > "
    ">(__gnu_cxx::__normal_iterator<solver::Cell<int>*, "
    "std::vector<solver::Cell<int>, std::allocator<solver::Cell<int> > > >, "
    "__gnu_cxx::__normal_iterator<solver::Cell<int>*, "
    "std::vector<solver::Cell<int>, std::allocator<solver::Cell<int> > > >) "
    "(__it2=..., __it1=..., this=<synthetic pointer>) at "
    "/usr/include/c++/12/bits/predefined_ops.h:158\n"
    "#8  "
    "std::__insertion_sort<__gnu_cxx::__normal_iterator<solver::Cell<int>*, "
    "std::vector<solver::Cell<int>, std::allocator<solver::Cell<int> > > >, "
    "__gnu_cxx::__ops::_Iter_comp_iter<solver::Grid<int>::step(int)::{lambda("
    "solver::Cell<int> const&, solver::Cell<int> const&)#1}> "
    ">(__gnu_cxx::__normal_iterator<solver::Cell<int>*, "
    "std::vector<solver::Cell<int>, std::allocator<solver::Cell<int> > > >, "
    "__gnu_cxx::__normal_iterator<solver::Cell<int>*, "
    "std::vector<solver::Cell<int>, std::allocator<solver::Cell<int> > > >, "
    "__gnu_cxx::__ops::_Iter_comp_iter<solver::Grid<int>::step(int)::{lambda("
    "solver::Cell<int> const&, solver::Cell<int> const&)#1}>) (__first=..., "
    "__last=..., __comp=...) at /usr/include/c++/12/bits/stl_algo.h:1809\n"
    "#9  0x000055bec34cceb8 in "
    "std::__final_insertion_sort<__gnu_cxx::__normal_iterator<solver::Cell<int>"
    "*, std::vector<solver::Cell<int>, std::allocator<solver::Cell<int> > > >, "
    "__gnu_cxx::__ops::_Iter_comp_iter<solver::Grid<int>::step(int)::{lambda("
    "solver::Cell<int> const&, solver::Cell<int> const&)#1}> "
    ">(__gnu_cxx::__normal_iterator<solver::Cell<int>*, "
    "std::vector<solver::Cell<int>, std::allocator<solver::Cell<int> > > >, "
    "__gnu_cxx::__normal_iterator<solver::Cell<int>*, "
    "std::vector<solver::Cell<int>, std::allocator<solver::Cell<int> > > >, "
    "__gnu_cxx::__ops::_Iter_comp_iter<solver::Grid<int>::step(int)::{lambda("
    "solver::Cell<int> const&, solver::Cell<int> const&)#1}>) (__comp=..., "
    "__last=..., __first=...) at /usr/include/c++/12/bits/stl_algo.h:1854\n"
    "#10 0x000055bec34cb128 in main () at cxx.cc:42\n"
    "[Inferior 1 (process 24818) detached]\n";

/* MPICH, `mpiexec -n 2`: rank 0 never reaches the barrier (sleeps in
 * compute()); its UCX progress thread waits in epoll. */
static const char sample_mpi_rank0[] =
    "[New LWP 24935]\n"
    "[Thread debugging using libthread_db enabled]\n"
    "Using host libthread_db library "
    "\"/lib/x86_64-linux-gnu/libthread_db.so.1\".\n"
    "0x00007fb4efced545 in __GI___clock_nanosleep (clock_id=clock_id@entry=0, "
    "flags=flags@entry=0, req=req@entry=0x7ffd3dda5aa0, "
    "rem=rem@entry=0x7ffd3dda5aa0) at "
    "../sysdeps/unix/sysv/linux/clock_nanosleep.c:48\n"
    "48\t../sysdeps/unix/sysv/linux/clock_nanosleep.c: No such file or "
    "directory.\n"
    "\n"
    "Thread 2 (Thread 0x7fb4ecdff6c0 (LWP 24935) \"async\"):\n"
    "#0  0x00007fb4efd26f36 in epoll_wait (epfd=18, events=0x7fb4ecdfecd0, "
    "maxevents=16, timeout=-1) at ../sysdeps/unix/sysv/linux/epoll_wait.c:30\n"
    "#1  0x00007fb4f26b0959 in ucs_event_set_wait () from "
    "/lib/x86_64-linux-gnu/libucs.so.0\n"
    "#2  0x00007fb4f2697d1e in ?? () from /lib/x86_64-linux-gnu/libucs.so.0\n"
    "#3  0x00007fb4efca71f5 in start_thread (arg=<optimized out>) at "
    "./nptl/pthread_create.c:442\n"
    "#4  0x00007fb4efd278ec in clone3 () at "
    "../sysdeps/unix/sysv/linux/x86_64/clone3.S:81\n"
    "\n"
    "Thread 1 (Thread 0x7fb4f25fb780 (LWP 24933) \"mpihang\"):\n"
    "#0  0x00007fb4efced545 in __GI___clock_nanosleep "
    "(clock_id=clock_id@entry=0, flags=flags@entry=0, "
    "req=req@entry=0x7ffd3dda5aa0, rem=rem@entry=0x7ffd3dda5aa0) at "
    "../sysdeps/unix/sysv/linux/clock_nanosleep.c:48\n"
    "#1  0x00007fb4efcf1e53 in __GI___nanosleep (req=req@entry=0x7ffd3dda5aa0, "
    "rem=rem@entry=0x7ffd3dda5aa0) at "
    "../sysdeps/unix/sysv/linux/nanosleep.c:25\n"
    "#2  0x00007fb4efcf1d8a in __sleep (seconds=0) at "
    "../sysdeps/posix/sleep.c:55\n"
    "#3  0x000055a9e226f1be in compute (rank=0) at mpihang.c:8\n"
    "#4  0x000055a9e226f1db in solve (rank=0) at mpihang.c:14\n"
    "#5  0x000055a9e226f254 in main (argc=1, argv=0x7ffd3dda5c58) at "
    "mpihang.c:25\n"
    "[Inferior 1 (process 24933) detached]\n";

/* MPICH, `mpiexec -n 2`: rank 1 hung in MPI_Barrier, libmpich without
 * symbols ("?? () from ..."). */
static const char sample_mpi_rank1[] =
    "[New LWP 24936]\n"
    "[Thread debugging using libthread_db enabled]\n"
    "Using host libthread_db library "
    "\"/lib/x86_64-linux-gnu/libthread_db.so.1\".\n"
    "0x00007f165802c489 in ?? () from /lib/x86_64-linux-gnu/libuct.so.0\n"
    "\n"
    "Thread 2 (Thread 0x7f16527ff6c0 (LWP 24936) \"async\"):\n"
    "#0  0x00007f1655726f36 in epoll_wait (epfd=19, events=0x7f16527fecd0, "
    "maxevents=16, timeout=-1) at ../sysdeps/unix/sysv/linux/epoll_wait.c:30\n"
    "#1  0x00007f16580b7959 in ucs_event_set_wait () from "
    "/lib/x86_64-linux-gnu/libucs.so.0\n"
    "#2  0x00007f165809ed1e in ?? () from /lib/x86_64-linux-gnu/libucs.so.0\n"
    "#3  0x00007f16556a71f5 in start_thread (arg=<optimized out>) at "
    "./nptl/pthread_create.c:442\n"
    "#4  0x00007f16557278ec in clone3 () at "
    "../sysdeps/unix/sysv/linux/x86_64/clone3.S:81\n"
    "\n"
    "Thread 1 (Thread 0x7f165542e780 (LWP 24934) \"mpihang\"):\n"
    "#0  0x00007f165802c489 in ?? () from /lib/x86_64-linux-gnu/libuct.so.0\n"
    "#1  0x00007f165555bef2 in ucp_worker_progress () from "
    "/lib/x86_64-linux-gnu/libucp.so.0\n"
    "#2  0x00007f1655a934eb in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#3  0x00007f1655a96f5e in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#4  0x00007f1655a5fc70 in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#5  0x00007f1655a60a85 in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#6  0x00007f16559c9d57 in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#7  0x00007f1655a3d93b in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#8  0x00007f1655a3da13 in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#9  0x00007f1655a3eab8 in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#10 0x00007f16558b31c6 in PMPI_Barrier () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#11 0x000055a1061261e5 in solve (rank=1) at mpihang.c:15\n"
    "#12 0x000055a106126254 in main (argc=1, argv=0x7ffe2e281008) at "
    "mpihang.c:25\n"
    "[Inferior 1 (process 24934) detached]\n";

/* The same rank 1 with a plain `bt`: no thread headers. */
static const char sample_mpi_bt[] =
    "[New LWP 24936]\n"
    "[Thread debugging using libthread_db enabled]\n"
    "Using host libthread_db library "
    "\"/lib/x86_64-linux-gnu/libthread_db.so.1\".\n"
    "0x00007f165802c489 in ?? () from /lib/x86_64-linux-gnu/libuct.so.0\n"
    "#0  0x00007f165802c489 in ?? () from /lib/x86_64-linux-gnu/libuct.so.0\n"
    "#1  0x00007f165555bef2 in ucp_worker_progress () from "
    "/lib/x86_64-linux-gnu/libucp.so.0\n"
    "#2  0x00007f1655a934eb in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#3  0x00007f1655a96f5e in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#4  0x00007f1655a5fc70 in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#5  0x00007f1655a60a85 in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#6  0x00007f16559c9d57 in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#7  0x00007f1655a3d93b in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#8  0x00007f1655a3da13 in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#9  0x00007f1655a3eab8 in ?? () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#10 0x00007f16558b31c6 in PMPI_Barrier () from "
    "/lib/x86_64-linux-gnu/libmpich.so.12\n"
    "#11 0x000055a1061261e5 in solve (rank=1) at mpihang.c:15\n"
    "#12 0x000055a106126254 in main (argc=1, argv=0x7ffe2e281008) at "
    "mpihang.c:25\n"
    "[Inferior 1 (process 24934) detached]\n";

/* --- collecting what btparse() hands out ---------------------------------- */

#define MAX_THREADS 8

struct thread {
    unsigned long num, lwp;
    size_t nframes;
    bool truncated;
    char *path; /* frames joined by " > ", outermost first */
};

struct result {
    struct thread th[MAX_THREADS];
    int n;
    int calls;
    int fail_at; /* fail the call with this index (1-based), 0: never */
};

static int collect(const struct btparse_thread *t, void *arg)
{
    struct result *res = arg;
    struct thread *th;
    size_t len = 0;

    res->calls++;
    if (res->fail_at == res->calls) {
        errno = ENOTSUP;
        return -1;
    }
    assert_true(t->nframes >= 1);
    assert_true(t->nframes <= BTPARSE_FRAMES_MAX);
    if (res->n == MAX_THREADS)
        return 0;
    th = &res->th[res->n++];
    th->num = t->num;
    th->lwp = t->lwp;
    th->nframes = t->nframes;
    th->truncated = t->truncated;
    for (size_t i = 0; i < t->nframes; i++) {
        assert_non_null(t->frames[i]);
        assert_true(strlen(t->frames[i]) >= 1);
        assert_true(strlen(t->frames[i]) <= BTPARSE_NAME_MAX);
        len += strlen(t->frames[i]) + 3;
    }
    th->path = malloc(len + 1);
    assert_non_null(th->path);
    th->path[0] = '\0';
    len = 0;
    for (size_t i = 0; i < t->nframes; i++) {
        size_t n = strlen(t->frames[i]);
        if (i) {
            memcpy(th->path + len, " > ", 3);
            len += 3;
        }
        memcpy(th->path + len, t->frames[i], n);
        len += n;
    }
    th->path[len] = '\0';
    return 0;
}

static void result_release(struct result *res)
{
    for (int i = 0; i < res->n; i++)
        free(res->th[i].path);
    memset(res, 0, sizeof(*res));
}

/* Parse 'text' and check the number of threads. */
static void parse(const char *text, size_t len, struct result *res, int want)
{
    eddy_error_t err = {{0}};
    int rc;

    memset(res, 0, sizeof(*res));
    rc = btparse(text, len, collect, res, &err);
    if (rc < 0)
        fail_msg("btparse failed: %s", err.text);
    assert_int_equal(rc, want);
    assert_int_equal(res->n, want);
}

static void parse_str(const char *text, struct result *res, int want)
{
    parse(text, strlen(text), res, want);
}

static void check_thread(const struct result *res,
                         int i,
                         unsigned long num,
                         unsigned long lwp,
                         const char *path)
{
    assert_true(i < res->n);
    assert_int_equal(res->th[i].num, num);
    assert_int_equal(res->th[i].lwp, lwp);
    assert_false(res->th[i].truncated);
    if (strcmp(res->th[i].path, path) != 0)
        fail_msg("thread %d:\n got  '%s'\n want '%s'", i, res->th[i].path,
                 path);
}

/* The single frame name of a one-frame backtrace line. */
static void check_name(const char *line, const char *want)
{
    struct result res;

    parse_str(line, &res, 1);
    assert_int_equal(res.th[0].nframes, 1);
    if (strcmp(res.th[0].path, want) != 0)
        fail_msg("'%s':\n got  '%s'\n want '%s'", line, res.th[0].path, want);
    result_release(&res);
}

/* --- real gdb output -------------------------------------------------------
 */

static void test_sample_threads(void **state)
{
    struct result res;

    parse_str(sample_threads, &res, 2);
    check_thread(&res, 0, 2, 24743,
                 "clone3 > start_thread > waiter > ___pthread_cond_wait > "
                 "__pthread_cond_wait_common > "
                 "__GI___futex_abstimed_wait_cancelable64 > "
                 "__futex_abstimed_wait_common > "
                 "__futex_abstimed_wait_common64");
    check_thread(&res, 1, 1, 24741, "main > wait_forever > __GI___poll");
    result_release(&res);
}

static void test_sample_cxx(void **state)
{
    struct result res;
    const char *lambda = "solver::Grid<int>::step(int)::{lambda(solver::Cell<"
                         "int> const&, solver::Cell<int> const&)#1}";
    const char *iter = "__gnu_cxx::__normal_iterator<solver::Cell<int>*, "
                       "std::vector<solver::Cell<int>, "
                       "std::allocator<solver::Cell<int> > > >";
    char want[8192];

    parse_str(sample_cxx, &res, 1);
    snprintf(want, sizeof(want),
             "main > "
             "std::__final_insertion_sort<%s, "
             "__gnu_cxx::__ops::_Iter_comp_iter<%s> >(%s, %s, "
             "__gnu_cxx::__ops::_Iter_comp_iter<%s>) > "
             "std::__insertion_sort<%s, "
             "__gnu_cxx::__ops::_Iter_comp_iter<%s> >(%s, %s, "
             "__gnu_cxx::__ops::_Iter_comp_iter<%s>) > "
             "__gnu_cxx::__ops::_Iter_comp_iter<%s>::operator()<%s, %s >(%s, "
             "%s) > "
             "%s::operator()(solver::Cell<int> const&, solver::Cell<int> "
             "const&) const > "
             "__GI_raise > __pthread_kill_internal > "
             "__pthread_kill_implementation > <signal handler called> > "
             "solver::on_usr1 > __libc_pause",
             iter, lambda, iter, iter, lambda, iter, lambda, iter, iter, lambda,
             lambda, iter, iter, iter, iter, lambda);
    check_thread(&res, 0, 1, 24818, want);
    assert_int_equal(res.th[0].nframes, 11);
    result_release(&res);
}

static void test_sample_mpi(void **state)
{
    struct result res, bt;

    parse_str(sample_mpi_rank0, &res, 2);
    check_thread(&res, 0, 2, 24935,
                 "clone3 > start_thread > ?? (libucs.so.0) > "
                 "ucs_event_set_wait > epoll_wait");
    check_thread(&res, 1, 1, 24933,
                 "main > solve > compute > __sleep > __GI___nanosleep > "
                 "__GI___clock_nanosleep");
    result_release(&res);

    parse_str(sample_mpi_rank1, &res, 2);
    check_thread(&res, 1, 1, 24934,
                 "main > solve > PMPI_Barrier > ?? (libmpich.so.12) > "
                 "?? (libmpich.so.12) > ?? (libmpich.so.12) > "
                 "?? (libmpich.so.12) > ?? (libmpich.so.12) > "
                 "?? (libmpich.so.12) > ?? (libmpich.so.12) > "
                 "?? (libmpich.so.12) > ucp_worker_progress > "
                 "?? (libuct.so.0)");

    /* A plain `bt` gives the same path, as thread 0 without an LWP. */
    parse_str(sample_mpi_bt, &bt, 1);
    check_thread(&bt, 0, 0, 0, res.th[1].path);
    result_release(&bt);
    result_release(&res);
}

/* The two engines together, as the tool daemon will use them: each
 * thread's path goes straight from the callback into the tree. */
struct add {
    stacktree_t *t;
    uint32_t rank;
};

static int add_path(const struct btparse_thread *th, void *arg)
{
    struct add *a = arg;

    return stacktree_add(a->t, th->frames, th->nframes, a->rank);
}

static void test_samples_merge(void **state)
{
    const char *in[] = {sample_mpi_rank0, sample_mpi_rank1};
    stacktree_t *t = stacktree_create();
    char *text;

    assert_non_null(t);
    for (uint32_t rank = 0; rank < 2; rank++) {
        struct add a = {t, rank};
        eddy_error_t err = {{0}};

        assert_int_equal(
            btparse(in[rank], strlen(in[rank]), add_path, &a, &err), 2);
    }
    text = stacktree_text(t);
    assert_non_null(text);
    assert_string_equal(
        text, "clone3 > start_thread > ?? (libucs.so.0) > ucs_event_set_wait "
              "> epoll_wait  [0-1]\n"
              "main > solve > PMPI_Barrier > ?? (libmpich.so.12) > "
              "?? (libmpich.so.12) > ?? (libmpich.so.12) > "
              "?? (libmpich.so.12) > ?? (libmpich.so.12) > "
              "?? (libmpich.so.12) > ?? (libmpich.so.12) > "
              "?? (libmpich.so.12) > ucp_worker_progress > "
              "?? (libuct.so.0)  [1]\n"
              "main > solve > compute > __sleep > __GI___nanosleep > "
              "__GI___clock_nanosleep  [0]\n");
    free(text);
    stacktree_destroy(t);
}

/* --- frame shapes ----------------------------------------------------------
 */

static void test_names(void **state)
{
    /* With and without a pc, with source or library or neither. */
    check_name("#0  0x00007f00 in __GI___poll (fds=0x1, nfds=1, timeout=-1) "
               "at ../sysdeps/unix/sysv/linux/poll.c:29",
               "__GI___poll");
    check_name("#1  0x00007f00 in MPIR_Wait_impl () from "
               "/lib/x86_64-linux-gnu/libmpich.so.12",
               "MPIR_Wait_impl");
    check_name("#2  main (argc=1, argv=0x7ff0) at hello.c:12", "main");
    check_name("#3  0x00007f00 in ?? ()", "??");
    check_name("#3  0x00007f00 in ?? () from /opt/lib/libfoo.so",
               "?? (libfoo.so)");
    check_name("#3  0x00007f00 in ?? () from libbar.so", "?? (libbar.so)");
    check_name("#4  0x0000000000401136 in main ()", "main");
    check_name("#12 0x0 in f ()", "f");
    check_name("#5  <signal handler called>", "<signal handler called>");
    check_name("#1  <function called from gdb>", "<function called from gdb>");
    check_name("#1  <unavailable> in ?? ()", "??");
    /* Argument values that look like names or lists. */
    check_name("#0  f (s=0x4006 \"a (b) at c\", p=<optimized out>) at f.c:1",
               "f");
    check_name("#0  g (x=...) at g.c:2", "g");
    /* C++ names keep their signatures, templates, spaces and operators. */
    check_name("#0  0x1 in std::vector<int, std::allocator<int> >::push_back("
               "int const&) () from /lib/libstdc++.so.6",
               "std::vector<int, std::allocator<int> >::push_back(int "
               "const&)");
    check_name("#0  std::function<void (int)>::operator()(int) const "
               "(this=0x1, __args#0=3) at std_function.h:591",
               "std::function<void (int)>::operator()(int) const");
    check_name("#1  0x2 in Foo::operator<(Foo const&) const (this=0x1, o=...) "
               "at foo.cc:3",
               "Foo::operator<(Foo const&) const");
    check_name("#1  0x2 in operator<< <char> (os=..., v=...) at x.cc:3",
               "operator<< <char>");
    check_name("#1  0x2 in Foo::operator->() (this=0x1) at x.cc:3",
               "Foo::operator->()");
    check_name("#1  0x2 in Foo::operator[](unsigned long) (this=0x1, i=2) at "
               "x.cc:3",
               "Foo::operator[](unsigned long)");
    check_name("#1  0x2 in (anonymous namespace)::worker (arg=0x0) at x.cc:9",
               "(anonymous namespace)::worker");
    check_name("#1  0x2 in Foo::operator new(unsigned long) (n=8) at x.cc:9",
               "Foo::operator new(unsigned long)");
    check_name("#1  0x2 in std::map<int, int>::operator[][abi:cxx11](int "
               "const&) (this=0x1, k=...) at x.cc:9",
               "std::map<int, int>::operator[][abi:cxx11](int const&)");
    check_name("#1  0x2 in my_operator_helper (x=1) at x.c:9",
               "my_operator_helper");
    check_name("#1  0x2 in std::rt::lang_start::{{closure}} () at main.rs:5",
               "std::rt::lang_start::{{closure}}");
    check_name("#0  MAIN__ () at hello.f90:4", "MAIN__");
    /* Blanks and line ends gdb or a pipe may add. */
    check_name("   #0   0x1 in f ()   \r\n", "f");
    check_name("#0\tf ()\n", "f");
    /* Brackets that never close: the first " (" ends the name. */
    check_name("#0  weird<int (x=1) at w.c:1", "weird<int");
    /* No argument list at all (a cut line): the rest is the name. */
    check_name("#0  0x1 in half_a_na", "half_a_na");
    check_name("#0  0x1 in ", "??");
}

static void test_sanitized(void **state)
{
    char line[64];

    snprintf(line, sizeof(line), "#0  f\x01g\xc3\xa9h\x7f (x=1)");
    check_name(line, "f?g??h?");
}

static void test_long_name_cut(void **state)
{
    size_t n = BTPARSE_NAME_MAX * 3;
    char *line = malloc(n + 64), *want = malloc(BTPARSE_NAME_MAX + 1);
    struct result res;

    assert_non_null(line);
    assert_non_null(want);
    memcpy(line, "#0  0x1 in ", 11);
    memset(line + 11, 'a', n);
    memcpy(line + 11 + n, " () at a.c:1", 13);
    memset(want, 'a', BTPARSE_NAME_MAX - 3);
    memcpy(want + BTPARSE_NAME_MAX - 3, "...", 4);
    parse_str(line, &res, 1);
    assert_string_equal(res.th[0].path, want);
    result_release(&res);

    /* Exactly BTPARSE_NAME_MAX bytes is not cut, and a cut "?? (lib)"
     * still ends with "...". */
    memset(line + 11, 'b', BTPARSE_NAME_MAX);
    memcpy(line + 11 + BTPARSE_NAME_MAX, " ()", 4);
    parse_str(line, &res, 1);
    assert_int_equal(strlen(res.th[0].path), BTPARSE_NAME_MAX);
    assert_null(strstr(res.th[0].path, "..."));
    result_release(&res);
    memcpy(line, "#0  0x1 in ?? () from /", 23);
    memset(line + 23, 'c', n);
    line[23 + n] = '\0';
    parse_str(line, &res, 1);
    assert_int_equal(strlen(res.th[0].path), BTPARSE_NAME_MAX);
    assert_memory_equal(res.th[0].path, "?? (ccc", 7);
    assert_string_equal(res.th[0].path + BTPARSE_NAME_MAX - 3, "...");
    result_release(&res);
    free(line);
    free(want);
}

/* --- structure -------------------------------------------------------------
 */

static void test_noise_ignored(void **state)
{
    struct result res;

    parse_str("warning: Could not load shared library symbols for x.so.\n"
              "Do you need \"set solib-search-path\" or \"set sysroot\"?\n"
              "[Thread debugging using libthread_db enabled]\n"
              "0x00007f00 in poll () from /lib/libc.so.6\n"
              "12\t  while (1) poll(0, 0, -1);\n"
              "#x not a frame\n"
              "#  0x1 in nope ()\n"
              "#5x 0x1 in nope ()\n"
              "Thread 9 is not a header\n"
              "Thread x (LWP 1):\n"
              "#0  0x1 in inner () at a.c:1\n"
              "#1  0x2 in outer () at a.c:2\n"
              "Backtrace stopped: previous frame inner to this frame "
              "(corrupt stack?)\n"
              "(More stack frames follow...)\n"
              "[Inferior 1 (process 5) detached]\n",
              &res, 1);
    check_thread(&res, 0, 0, 0, "outer > inner");
    result_release(&res);

    parse_str("", &res, 0);
    parse_str("\n\n\n", &res, 0);
    parse_str("No stack.\n", &res, 0);
    parse(NULL, 0, &res, 0);
}

static void test_headers(void **state)
{
    struct result res;

    /* A thread without frames is not reported; headers without an LWP;
     * "Thread 1.2" of a second inferior; CRLF. */
    parse_str("Thread 3 (Thread 0x7f (LWP 300) \"a\"):\r\n"
              "Target is executing.\r\n"
              "\r\n"
              "Thread 2 (process 200):\r\n"
              "#0  b () at b.c:1\r\n"
              "Thread 1.2 (Thread 0x7f (LWP 100) \"name (LWP 7):\"):\r\n"
              "#0  c () at c.c:1\r\n"
              "#1  main () at c.c:9\r\n",
              &res, 2);
    check_thread(&res, 0, 2, 200, "b");
    check_thread(&res, 1, 1, 100, "main > c");
    result_release(&res);
}

static void test_concatenated_bt(void **state)
{
    struct result res;

    /* Plain `bt`s one after the other: each "#0" starts a thread. */
    parse_str("#0  a () at a.c:1\n"
              "#1  main () at a.c:2\n"
              "#0  b () at b.c:1\n"
              "#1  main () at b.c:2\n"
              "#0  c () at c.c:1\n",
              &res, 3);
    check_thread(&res, 0, 0, 0, "main > a");
    check_thread(&res, 1, 0, 0, "main > b");
    check_thread(&res, 2, 0, 0, "c");
    result_release(&res);

    /* No newline at the end, and a length that stops mid-text. */
    parse("#0  a ()\n#1  main ()", 19, &res, 1);
    check_thread(&res, 0, 0, 0, "main > a");
    result_release(&res);
    parse("#0  a ()\n#1  main ()", 14, &res, 1);
    check_thread(&res, 0, 0, 0, "m > a");
    result_release(&res);
}

/* Frames "#0 f0 ()" .. "#n-1 f<n-1> ()" in one thread. */
static char *deep_stack(size_t n)
{
    char *text = malloc(n * 32 + 1);
    size_t len = 0;

    assert_non_null(text);
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, 32, "#%zu  0x1 in f%zu ()\n", i, i);
    return text;
}

static void test_too_many_frames(void **state)
{
    size_t n = BTPARSE_FRAMES_MAX + 500;
    char *text = deep_stack(n);
    eddy_error_t err = {{0}};
    struct result res = {0};
    char want[64];

    assert_int_equal(btparse(text, strlen(text), collect, &res, &err), 1);
    assert_true(res.th[0].truncated);
    assert_int_equal(res.th[0].nframes, BTPARSE_FRAMES_MAX);
    /* The outermost frames are the ones kept. */
    snprintf(want, sizeof(want), "f%zu > f%zu > ", n - 1, n - 2);
    assert_memory_equal(res.th[0].path, want, strlen(want));
    snprintf(want, sizeof(want), " > f%zu", n - BTPARSE_FRAMES_MAX);
    assert_string_equal(res.th[0].path + strlen(res.th[0].path) - strlen(want),
                        want);
    result_release(&res);
    free(text);

    /* Exactly the limit is not truncated. */
    text = deep_stack(BTPARSE_FRAMES_MAX);
    assert_int_equal(btparse(text, strlen(text), collect, &res, &err), 1);
    assert_false(res.th[0].truncated);
    assert_int_equal(res.th[0].nframes, BTPARSE_FRAMES_MAX);
    result_release(&res);
    free(text);
}

static int count_only(const struct btparse_thread *th, void *arg)
{
    (*(int *)arg)++;
    return 0;
}

static void test_too_many_threads(void **state)
{
    size_t n = BTPARSE_THREADS_MAX + 1;
    char *text = malloc(n * 48 + 1);
    eddy_error_t err = {{0}};
    size_t len = 0;
    int calls = 0;

    assert_non_null(text);
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, 48,
                                "Thread %zu (LWP %zu):\n#0  f ()\n", n - i,
                                1000 + i);
    errno = 0;
    assert_int_equal(btparse(text, len, count_only, &calls, &err), -1);
    assert_int_equal(errno, E2BIG);
    assert_int_equal(calls, BTPARSE_THREADS_MAX);
    assert_non_null(strstr(err.text, "more than 4096 threads"));

    /* One fewer is fine. */
    calls = 0;
    len = (size_t)(strstr(text, "Thread 1 (") - text);
    assert_int_equal(btparse(text, len, count_only, &calls, &err),
                     BTPARSE_THREADS_MAX);
    assert_int_equal(calls, BTPARSE_THREADS_MAX);
    free(text);
}

static void test_callback_error(void **state)
{
    eddy_error_t err = {{0}};
    struct result res = {.fail_at = 2};

    errno = 0;
    assert_int_equal(
        btparse(sample_threads, strlen(sample_threads), collect, &res, &err),
        -1);
    assert_int_equal(errno, ENOTSUP);
    assert_int_equal(res.calls, 2);
    assert_int_equal(res.n, 1);
    assert_non_null(strstr(err.text, "thread 1: callback failed"));
    result_release(&res);
}

static int fail_no_errno(const struct btparse_thread *th, void *arg)
{
    errno = 0;
    return -1;
}

static void test_bad_args(void **state)
{
    eddy_error_t err = {{0}};
    int calls = 0;

    errno = 0;
    assert_int_equal(btparse("#0  f ()", 8, NULL, NULL, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "no callback"));
    errno = 0;
    assert_int_equal(btparse(NULL, 3, count_only, &calls, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "no text"));
    errno = 0;
    assert_int_equal(btparse(NULL, 3, count_only, &calls, NULL), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(calls, 0);
    /* A callback that fails without saying why still gives an errno. */
    errno = 0;
    assert_int_equal(btparse("#0  f ()", 8, fail_no_errno, NULL, NULL), -1);
    assert_int_equal(errno, ECANCELED);
}

/* Random bytes and mangled samples: no crash, sane frames (collect()
 * checks them). */
static void test_garbage(void **state)
{
    const char *samples[] = {sample_threads, sample_cxx, sample_mpi_rank0,
                             sample_mpi_rank1};
    uint64_t x = 0x2545f4914f6cdd1dull;
    char buf[4096];

    for (int iter = 0; iter < 2000; iter++) {
        const char *s = samples[iter % 4];
        size_t len = strlen(s) < sizeof(buf) ? strlen(s) : sizeof(buf);
        struct result res = {0};

        memcpy(buf, s, len);
        for (int k = 0; k < 1 + iter % 16; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[x % len] = (char)(x >> 32);
        }
        if (btparse(buf, len, collect, &res, NULL) < 0)
            fail_msg("garbage made btparse fail: errno %d", errno);
        result_release(&res);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_threads),
        cmocka_unit_test(test_sample_cxx),
        cmocka_unit_test(test_sample_mpi),
        cmocka_unit_test(test_samples_merge),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_sanitized),
        cmocka_unit_test(test_long_name_cut),
        cmocka_unit_test(test_noise_ignored),
        cmocka_unit_test(test_headers),
        cmocka_unit_test(test_concatenated_bt),
        cmocka_unit_test(test_too_many_frames),
        cmocka_unit_test(test_too_many_threads),
        cmocka_unit_test(test_callback_error),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_garbage),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
