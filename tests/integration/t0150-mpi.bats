#!/usr/bin/env bats
# Real MPI under eddy: MPICH programs (tests/integration/mpi/*.c, built
# with mpicc) get PMI-1 from eddy-shell: hello and allreduce across 4
# brokers, MPI_Abort ending the job, MPMD in one MPI_COMM_WORLD; and a
# PMI barrier of 1024 tasks over 16 brokers with libpmi.

load helper

setup_file() {
    local p
    for p in hello allreduce abort; do
        mpicc -o "$BATS_FILE_TMPDIR/$p" "$EDDY_SOURCE_DIR/tests/integration/mpi/$p.c"
    done
    # a second program for MPMD: no collectives, so it can share a
    # world with hello
    cat >"$BATS_FILE_TMPDIR/second.c" <<'C'
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, appnum = -1, flag = 0;
    int *v;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &v, &flag);
    if (flag)
        appnum = *v;
    printf("second program: rank %d of %d appnum %d\n", rank, size, appnum);
    MPI_Finalize();
    return 0;
}
C
    mpicc -o "$BATS_FILE_TMPDIR/second" "$BATS_FILE_TMPDIR/second.c"
    start_instance 4 --cores-per-rank=16
}

teardown_file() {
    stop_instance
}

teardown() {
    local id
    for id in $(eddy jobs 2>/dev/null | awk 'NR > 1 { print $1 }'); do
        eddy job cancel "$id" 2>/dev/null || true
    done
    check_no_job_processes
}

@test "MPICH hello: -N4 -n8, every rank once, size 8, on 4 nodes" {
    run bounded 60 eddy run -N4 -n8 "$BATS_FILE_TMPDIR/hello"
    [ "$status" -eq 0 ]
    [ "$(grep -c '^hello from rank [0-7] of 8 on ' <<<"$output")" -eq 8 ]
    [ "$(grep -o '^hello from rank [0-9]*' <<<"$output" | sort -u | wc -l)" -eq 8 ]
    # the job really spans 4 brokers
    id=$(eddy jobs -a | awk 'NR > 1 { id = $1 } END { print id }')
    [ "$(eddy job info --json "$id" | jq '[.tasks[].node] | unique | length')" -eq 4 ]
}

@test "MPICH allreduce: the sum is right on every rank" {
    run bounded 60 eddy run -N4 -n8 "$BATS_FILE_TMPDIR/allreduce"
    [ "$status" -eq 0 ]
    [[ "$output" == *"allreduce ok"* ]]
    [[ "$output" != *"expected"* ]]
}

@test "MPI_Abort ends the job with that rank's exit code and an exception" {
    run bounded 60 eddy run -N4 -n8 "$BATS_FILE_TMPDIR/abort" 3
    [ "$status" -eq 7 ]
    [[ "$output" == *"rank 3"* ]]
    id=$(eddy jobs -a | awk 'NR > 1 { id = $1 } END { print id }')
    run eddy job info --json "$id"
    [ "$(jq -r .status <<<"$output")" -eq 7 ]
    [ "$(jq -r .exception.type <<<"$output")" = abort ]
    [[ "$(jq -r .exception.note <<<"$output")" == *"rank 3"* ]]
}

@test "MPMD: two MPI programs in one MPI_COMM_WORLD of 8" {
    run bounded 60 eddy run -N4 -n 4 "$BATS_FILE_TMPDIR/hello" : \
        -n 4 "$BATS_FILE_TMPDIR/second"
    [ "$status" -eq 0 ]
    # ranks 0-3 run hello (appnum 0), 4-7 the second program (appnum 1):
    # all see size 8
    [ "$(grep -c '^hello from rank [0-3] of 8 on ' <<<"$output")" -eq 4 ]
    [ "$(grep -c '^second program: rank [4-7] of 8 appnum 1$' <<<"$output")" -eq 4 ]
}

@test "PMI barrier: 1024 tasks over 16 brokers, 1 KiB values, all checked" {
    # an instance of our own for this test (the suite's stays up)
    local saved_uri=$EDDY_URI saved_tmp=$INSTANCE_TMP saved_pid=$INSTANCE_PID
    local saved_rundir=$INSTANCE_RUNDIR rc=0
    start_instance 16 --cores-per-rank=64
    run bounded 240 eddy run -N16 -n1024 eddy-pmi-client
    stop_instance || rc=1
    EDDY_URI=$saved_uri INSTANCE_TMP=$saved_tmp INSTANCE_PID=$saved_pid
    INSTANCE_RUNDIR=$saved_rundir
    export EDDY_URI INSTANCE_TMP INSTANCE_PID INSTANCE_RUNDIR
    [ "$status" -eq 0 ]
    [[ "$output" == *"pmi barrier ok: 1024 ranks"* ]]
    [ "$rc" -eq 0 ]
}
