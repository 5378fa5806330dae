/* abort - rank ABORT_RANK (argv[1], default 1) calls MPI_Abort with exit
 * code 7 while the others wait in a barrier that can never complete. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, who = argc > 1 ? atoi(argv[1]) : 1;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == who) {
        fprintf(stderr, "rank %d aborting\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 7);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
