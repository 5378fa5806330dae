/* allreduce - sum rank+1 over all ranks and check the result everywhere:
 * exit 1 on a wrong sum, so a broken exchange cannot pass silently. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    long rank, size, sum = 0, expect;
    int r, s;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    rank = r;
    size = s;
    long mine = rank + 1;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    expect = size * (size + 1) / 2;
    if (sum != expect) {
        printf("rank %ld: sum %ld, expected %ld\n", rank, sum, expect);
        MPI_Finalize();
        return 1;
    }
    if (rank == 0)
        printf("allreduce ok: sum %ld over %ld ranks\n", sum, size);
    MPI_Finalize();
    return 0;
}
