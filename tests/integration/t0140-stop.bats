#!/usr/bin/env bats
# Startup barriers (run/submit --stop=fork|exec|init, eddy job release):
# held tasks do not run their program, their pids in `eddy job info` are
# the held processes, release lets the job finish, release of a job not
# held is an error, a held job can be cancelled and leaves nothing.

load helper

setup_file() {
    # init needs a PMI program: one that creates a file before MPI_Init
    # (it runs up to the barrier) and one after it (it must not, held).
    cat >"$BATS_FILE_TMPDIR/mpitouch.c" <<'C'
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank;
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s.pre.%s", argv[1], getenv("PMI_RANK"));
    if ((f = fopen(path, "w")))
        fclose(f);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    snprintf(path, sizeof(path), "%s.%d", argv[1], rank);
    if ((f = fopen(path, "w")))
        fclose(f);
    MPI_Finalize();
    return 0;
}
C
    sed -i '1i #include <stdlib.h>' "$BATS_FILE_TMPDIR/mpitouch.c"
    mpicc -o "$BATS_FILE_TMPDIR/mpitouch" "$BATS_FILE_TMPDIR/mpitouch.c"
    start_instance 2 --cores-per-rank=4
}

teardown_file() {
    stop_instance
}

setup() {
    T=$(mktemp -d "$BATS_TEST_TMPDIR/t.XXXXXX")
}

teardown() {
    # a failed test may leave a held job: end it so the next test and
    # stop_instance are not affected
    local id
    for id in $(eddy jobs 2>/dev/null | awk 'NR > 1 { print $1 }'); do
        eddy job cancel "$id" 2>/dev/null || true
    done
    check_no_job_processes
}

# The job's task pids, one a line.
pids_of() {
    eddy job info --json "$1" | jq -r '.tasks[].pid'
}

# held ID WHERE NTASKS: wait until the job reports all its tasks held.
held() {
    eddy job info --json "$1" | jq -e --arg w "$2" --argjson n "$3" \
        '.barrier.where == $w and .barrier.held == $n and
         (.barrier.released | not) and
         ([.tasks[].pid | select(. > 0)] | length) == $n' >/dev/null
}

count_files() {
    ls "$T" | grep -c "^$1\\." || true
}

@test "--stop: a bad mode is refused before submitting, --help explains" {
    run eddy run --stop=start true
    [ "$status" -eq 1 ]
    [[ "$output" == *"--stop: 'start' is not a stop mode"* ]]
    run eddy submit --help
    [ "$status" -eq 0 ]
    [[ "$output" == *"--stop=MODE"* ]]
    [[ "$output" == *"never"*"triggers for a program that does not use"* ]]
}

@test "stop=fork: forked, pids known, program not run until release" {
    id=$(eddy submit --stop=fork -N2 -n4 sh -c "touch '$T/ran.'\$EDDY_TASK_RANK")
    wait_until 20 held "$id" fork 4
    run eddy job info "$id"
    [[ "$output" == *"barrier   fork: 4 of 4 tasks held, not released"* ]]
    for p in $(pids_of "$id"); do
        # the held process exists and is not yet /bin/sh
        [ -e "/proc/$p" ]
        exe=$(readlink "/proc/$p/exe")
        [ "$exe" != "$(readlink -f /bin/sh)" ]
    done
    sleep 0.5
    [ "$(count_files ran)" -eq 0 ]
    bounded 30 eddy job release "$id"
    run bounded 30 eddy job wait "$id"
    [ "$status" -eq 0 ]
    [ "$(count_files ran)" -eq 4 ]
    run eddy job info --json "$id"
    [ "$(jq -r .barrier.released <<<"$output")" = true ]
}

@test "stop=exec: stopped at the program's first instruction, no tracer" {
    id=$(eddy submit --stop=exec -N2 -n4 sh -c "touch '$T/ran.'\$EDDY_TASK_RANK")
    wait_until 20 held "$id" exec 4
    for p in $(pids_of "$id"); do
        grep -q '^State:.*T (stopped)' "/proc/$p/status"
        grep -q '^TracerPid:[[:space:]]*0$' "/proc/$p/status"
        [ "$(readlink "/proc/$p/exe")" = "$(readlink -f /bin/sh)" ]
    done
    sleep 0.5
    [ "$(count_files ran)" -eq 0 ]
    bounded 30 eddy job release "$id"
    run bounded 30 eddy job wait "$id"
    [ "$status" -eq 0 ]
    [ "$(count_files ran)" -eq 4 ]
}

@test "stop=init: a PMI program runs up to MPI_Init and is held there" {
    id=$(eddy submit --stop=init -N2 -n4 "$BATS_FILE_TMPDIR/mpitouch" "$T/ran")
    wait_until 30 held "$id" init 4
    # before init: ran; after: not yet
    [ "$(count_files ran.pre)" -eq 4 ]
    sleep 0.5
    [ "$(ls "$T" | grep -c '^ran\.[0-9]')" -eq 0 ]
    for p in $(pids_of "$id"); do
        [ "$(readlink "/proc/$p/exe")" = "$BATS_FILE_TMPDIR/mpitouch" ]
    done
    bounded 30 eddy job release "$id"
    run bounded 60 eddy job wait "$id"
    [ "$status" -eq 0 ]
    [ "$(ls "$T" | grep -c '^ran\.[0-9]')" -eq 4 ]
}

@test "stop=init: a program without PMI is never held" {
    run bounded 30 eddy run --stop=init -n2 echo free
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 2 ]
}

@test "eddy run --stop says the job is held and how to release it" {
    bounded 60 eddy run --stop=fork -n2 echo out >"$T/out" 2>"$T/err" &
    rpid=$!
    wait_until 20 grep -q "held at fork barrier" "$T/err"
    id=$(sed -n 's/.*job \([0-9]*\) held at fork barrier.*/\1/p' "$T/err")
    grep -q "release with: eddy job release $id\$" "$T/err"
    [ ! -s "$T/out" ]
    eddy job release "$id"
    wait "$rpid"
    [ "$(cat "$T/out")" = "$(printf 'out\nout')" ]
}

@test "job release on a job not held is a clear error" {
    id=$(eddy submit true)
    bounded 30 eddy job wait "$id"
    run eddy job release "$id"
    [ "$status" -eq 1 ]
    [[ "$output" == *"eddy job release: job $id is not held at a startup barrier"* ]]
    run eddy job release 999999
    [ "$status" -eq 1 ]
    [[ "$output" == *"999999"* ]]
    run eddy job release
    [ "$status" -eq 1 ]
}

@test "cancel while held ends the job and leaves no process" {
    for mode in fork exec; do
        id=$(eddy submit --stop=$mode -N2 -n4 sh -c "touch '$T/ran.'\$EDDY_TASK_RANK")
        wait_until 20 held "$id" $mode 4
        pids=$(pids_of "$id")
        bounded 30 eddy job cancel "$id"
        run bounded 30 eddy job wait "$id"
        [ "$status" -ne 0 ]
        [[ "$output" == *"cancel"* ]]
        check_no_job_processes
        for p in $pids; do
            [ ! -e "/proc/$p" ] || ! grep -q "EDDY_JOB_ID=$id" "/proc/$p/environ"
        done
        [ "$(count_files ran)" -eq 0 ]
    done
    id=$(eddy submit --stop=init -N2 -n4 "$BATS_FILE_TMPDIR/mpitouch" "$T/ran")
    wait_until 30 held "$id" init 4
    bounded 30 eddy job cancel "$id"
    run bounded 30 eddy job wait "$id"
    [ "$status" -ne 0 ]
    check_no_job_processes
    [ "$(ls "$T" | grep -c '^ran\.[0-9]')" -eq 0 ]
}
