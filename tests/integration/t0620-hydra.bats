#!/usr/bin/env bats
# eddy-broker bootstrapped by MPICH's Hydra (mpiexec.hydra) through PMI-1.

load helper

setup() {
    # installed by `make check` (scripts/deps.txt: mpich)
    command -v mpiexec.hydra >/dev/null
}

@test "mpiexec.hydra -n 4 eddy start --pmi CMD: a 4-broker instance" {
    run bounded 60 mpiexec.hydra -n 4 eddy start --pmi --print-uri sh -c '
        eddy overlay status; eddy run -N 4 -l true; echo "run=$?"'
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"4 brokers, fanout 2, lost: none"* ]]
    [ "$(grep -c ': up$' <<<"$output")" -eq 4 ]
    [[ "$output" == *"run=0"* ]]
    local uri rundir
    uri=$(sed -n 's/^EDDY_URI=//p' <<<"$output")
    rundir=${uri#local://}
    rundir=${rundir%/*}
    [ -n "$rundir" ]
    check_no_leftovers "$rundir"
}

@test "mpiexec.hydra -n 4 eddy-broker: bare brokers, shut down by eddy" {
    local dir=$BATS_TEST_TMPDIR/rundir
    mkdir -m 0700 "$dir"
    bounded 60 mpiexec.hydra -n 4 eddy-broker --rundir="$dir" --fanout=3 \
        >"$BATS_TEST_TMPDIR/out" 2>&1 3>&- &
    local mpid=$!
    export EDDY_URI=local://$dir/local-0
    # ready once rank 0 sees every child (bounded, no fixed sleep)
    wait_until 30 sh -c \
        'eddy overlay status 2>/dev/null | grep -q "4 brokers, fanout 3, lost: none"'
    [ "$(eddy overlay status | grep -c ': up$')" -eq 4 ]
    run bounded 30 eddy run -N 4 true
    [ "$status" -eq 0 ]
    run bounded 10 eddy shutdown
    [ "$status" -eq 0 ]
    wait "$mpid"
    cat "$BATS_TEST_TMPDIR/out"
    ! pgrep -f -- "--rundir=$dir" >/dev/null
    # a given --rundir is the caller's: left in place, sockets gone
    [ -d "$dir" ]
    [ ! -e "$dir/local-0" ]
}

@test "a broker without a PMI process manager says why" {
    run bounded 10 env -u PMI_FD eddy-broker --bootstrap=pmi
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"PMI_FD is not set"* ]]
    run bounded 10 eddy start --pmi true
    [ "$status" -eq 1 ]
    [[ "$output" == *"PMI_FD and PMI_RANK are not set"* ]]
    run bounded 10 env PMI_FD=9 PMI_RANK=0 eddy start --pmi --test-size=2 true
    [[ "$output" == *"--pmi takes rank, size and key from PMI"* ]]
}
