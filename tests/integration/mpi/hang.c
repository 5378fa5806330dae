/* hang.c - an MPI program that hangs on purpose, for `eddy stack`: every
 * rank but one waits in MPI_Barrier; that one (rank 4, or the last rank
 * of smaller jobs) never gets there, stuck in compute().  Distinct,
 * non-inlined function names make the merged call tree predictable:
 *   main > solve > MPI_Barrier ...  [every rank but the stuck one]
 *   main > solve > compute ...      [the stuck one]
 * Built with -O0 -g. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) static void compute(void)
{
    for (;;)
        pause();
}

__attribute__((noinline)) static void solve(int rank, int stuck)
{
    if (rank == stuck)
        compute();
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    int rank, size;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) {
        printf("hanging: rank %d stays out of the barrier\n",
               size > 4 ? 4 : size - 1);
        fflush(stdout);
    }
    solve(rank, size > 4 ? 4 : size - 1);
    MPI_Finalize();
    return 0;
}
