#!/usr/bin/env bats
# eddy-broker bootstrapped by Slurm (srun --mpi=pmi2) through Slurm's own
# libpmi2.so.0, loaded at run time (src/broker/pmi2.c), on a private
# one-node Slurm cluster (slurm.bash).

load helper
load slurm

setup_file() {
    slurm_start
}

teardown_file() {
    slurm_stop
}

# The run directory from the EDDY_URI=... line of --print-uri.
rundir_of() {
    local uri
    uri=$(sed -n 's/^EDDY_URI=//p' <<<"$1")
    uri=${uri#local://}
    echo "${uri%/*}"
}

# Milliseconds since the epoch.
now_ms() {
    date +%s%3N
}

@test "srun --mpi=pmi2 -n 4 eddy start --pmi CMD: a 4-broker instance" {
    local t0 t1 t2 rundir
    t0=$(now_ms)
    run bounded 60 srun --mpi=pmi2 -n 4 true
    [ "$status" -eq 0 ]
    t1=$(now_ms)
    run bounded 60 srun --mpi=pmi2 -n 4 eddy start --pmi --print-uri sh -c '
        eddy overlay status; eddy run -N 4 -l printenv EDDY_JOB_ID
        echo "run=$?"'
    t2=$(now_ms)
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"4 brokers, fanout 2, lost: none"* ]]
    [ "$(grep -c ': up$' <<<"$output")" -eq 4 ]
    [ "$(grep -cE '^[0-3]: [0-9]+$' <<<"$output")" -eq 4 ]
    [[ "$output" == *"run=0"* ]]
    ! grep -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' <<<"$output" || false
    rundir=$(rundir_of "$output")
    [ -n "$rundir" ]
    check_no_leftovers "$rundir"
    wait_until 10 slurm_no_jobs
    echo "# srun -n 4 true: $((t1 - t0)) ms;" \
        "srun -n 4 eddy start --pmi (start, job, stop): $((t2 - t1)) ms" >&3
}

@test "srun --mpi=pmi2 -n 4 eddy-broker: bare brokers, shut down by eddy" {
    local dir=$BATS_TEST_TMPDIR/rundir
    mkdir -m 0700 "$dir"
    bounded 60 srun --mpi=pmi2 -n 4 eddy-broker --rundir="$dir" --fanout=3 \
        >"$BATS_TEST_TMPDIR/out" 2>&1 3>&- &
    local spid=$!
    export EDDY_URI=local://$dir/local-0
    wait_until 30 sh -c \
        'eddy overlay status 2>/dev/null | grep -q "4 brokers, fanout 3, lost: none"'
    [ "$(eddy overlay status | grep -c ': up$')" -eq 4 ]
    run bounded 30 eddy run -N 4 true
    [ "$status" -eq 0 ]
    run bounded 10 eddy shutdown
    [ "$status" -eq 0 ]
    # srun exits 0: every broker finalised PMI-2 and exited cleanly
    wait "$spid"
    cat "$BATS_TEST_TMPDIR/out"
    ! grep -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' \
        "$BATS_TEST_TMPDIR/out" || false
    ! pgrep -f -- "--rundir=$dir" >/dev/null || false
    [ ! -e "$dir/local-0" ]
    wait_until 10 slurm_no_jobs
}

@test "alloc inside a Slurm-started instance bootstraps by PMI-1" {
    # eddy start takes Slurm's PMI-2 variables away from CMD; even when a
    # job inherits them anyway (set again here), the nested brokers must
    # take eddy-shell's PMI-1 (PMI_SPAWNED says so).
    run bounded 60 srun --mpi=pmi2 -n 2 eddy start --pmi sh -c '
        echo "type=$SLURM_MPI_TYPE jobid=$PMI_JOBID"
        SLURM_MPI_TYPE=pmi2 PMI_JOBID=1.0 eddy alloc -N 2 \
            sh -c "echo inner=\$SLURM_MPI_TYPE; eddy overlay status"
        echo "alloc=$?"'
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"type= jobid="* ]]
    [[ "$output" == *"inner=pmi2"* ]]
    [[ "$output" == *"2 brokers, fanout 2, lost: none"* ]]
    [[ "$output" == *"alloc=0"* ]]
    wait_until 10 slurm_no_jobs
}

@test "srun --mpi=pmi2 without libpmi2.so.0: the error names the package" {
    run bounded 60 srun --mpi=pmi2 -n 2 \
        env EDDY_PMI2_LIBRARY=/nonexistent/libpmi2.so.0 eddy start --pmi true
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"PMI-2 bootstrap: srun --mpi=pmi2 needs Slurm's libpmi2.so.0 (Debian: libpmi2-0)"* ]]
    [[ "$output" == *"/nonexistent/libpmi2.so.0"* ]]
    wait_until 10 slurm_no_jobs
}

@test "srun --mpi=pmi2 with a library that is not PMI-2: the missing symbol" {
    run bounded 60 srun --mpi=pmi2 -n 2 \
        env EDDY_PMI2_LIBRARY=libc.so.6 eddy-broker
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"PMI-2 bootstrap: libc.so.6 has no PMI2_Init"* ]]
    wait_until 10 slurm_no_jobs
}

@test "PMI2_Init failing is reported" {
    # Slurm's variables with a PMI_FD that is no connection at all.
    run bounded 10 env SLURM_MPI_TYPE=pmi2 PMI_JOBID=1.0 PMI_FD=0 \
        PMI_RANK=0 PMI_SIZE=2 eddy-broker </dev/null
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"PMI-2 bootstrap: PMI2_Init failed"* ]]
}

@test "srun without --mpi=pmi2 gives no PMI: eddy start --pmi says so" {
    run bounded 60 srun --mpi=none -n 1 eddy start --pmi true
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"PMI_FD and PMI_RANK are not set"* ]]
}
