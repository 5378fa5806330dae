#!/usr/bin/env bats
# Job output is never lost: large output through eddy run, live and slow
# attachers (job-io flow control), and what a late attacher of a job whose
# output log passed its cap is told.  Two 2-broker instances: one with the
# default cap (64 MiB), one with a 100 kB cap.

load helper

setup_file() {
    start_instance 2 -o --job-output-cap=100000
    export SMALL_URI=$EDDY_URI SMALL_PID=$INSTANCE_PID
    export SMALL_TMP=$INSTANCE_TMP SMALL_RUNDIR=$INSTANCE_RUNDIR
    start_instance 2
}

teardown_file() {
    local rc=0
    stop_instance || rc=1
    INSTANCE_PID=$SMALL_PID INSTANCE_TMP=$SMALL_TMP
    INSTANCE_RUNDIR=$SMALL_RUNDIR EDDY_URI=$SMALL_URI
    stop_instance || rc=1
    return $rc
}

setup() {
    T=$(mktemp -d "$BATS_TEST_TMPDIR/t.XXXXXX")
}

teardown() {
    rm -rf "$T"
    check_no_job_processes
    wait_until 15 no_job_processes "$SMALL_RUNDIR"
}

# Run the rest of the line against the instance with the 100 kB cap.
small() {
    EDDY_URI=$SMALL_URI "$@"
}

# The byte count of "N bytes of output were dropped" in file $1 (0 if none).
dropped_in() {
    sed -n 's/.*: \([0-9]*\) bytes of output were dropped (output log cap)$/\1/p' \
        "$1" | grep . || echo 0
}

@test "200 MB through eddy run --output arrive complete" {
    head -c 200000000 /dev/urandom >"$T/src"
    local t0 t1
    t0=$(date +%s.%N)
    run bounded 300 eddy run -n1 --output="$T/out" cat "$T/src"
    t1=$(date +%s.%N)
    [ "$status" -eq 0 ]
    [ "$(stat -c %s "$T/out")" -eq 200000000 ]
    cmp "$T/src" "$T/out"
    echo "# eddy run: 200 MB of output in $(echo "$t1 - $t0" | bc) s," \
        "$(echo "scale=1; 200 / ($t1 - $t0)" | bc) MB/s" >&3
}

@test "two ranks x 50 MB of labelled output arrive complete" {
    # 500000 lines of 99 'a' per task
    line=$(head -c 99 /dev/zero | tr '\0' a)
    echo "yes $line | head -c 50000000" >"$T/gen.sh"
    run bounded 300 sh -c "eddy run -N2 -n2 -l sh $T/gen.sh |
        awk -v a=$line '\$0 == \"0: \" a { n0++; next }
                        \$0 == \"1: \" a { n1++; next }
                        { bad++ }
                        END { print n0 + 0, n1 + 0, bad + 0 }'"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$output" = "500000 500000 0" ]
}

@test "live eddy run gets all output beyond a small cap" {
    head -c 20000000 /dev/urandom >"$T/src"
    run bounded 120 small eddy run -n1 --output="$T/out" \
        sh -c "sleep 0.5; cat $T/src"
    [ "$status" -eq 0 ]
    cmp "$T/src" "$T/out"
}

@test "attach to a finished job over the cap: the start, and the dropped count" {
    head -c 1000000 /dev/urandom >"$T/src"
    id=$(small eddy submit -n1 cat "$T/src")
    run bounded 60 small eddy job wait "$id"
    [ "$status" -eq 0 ]
    run bounded 60 small sh -c "eddy job attach $id >$T/out 2>$T/err"
    [ "$status" -eq 0 ]
    cat "$T/err"
    grep -q "eddy job attach: job $id: [0-9]* bytes of output were dropped (output log cap)" "$T/err"
    size=$(stat -c %s "$T/out")
    [ "$size" -gt 50000 ] && [ "$size" -le 100000 ]
    cmp -n "$size" "$T/src" "$T/out"
    [ $((size + $(dropped_in "$T/err"))) -eq 1000000 ]
}

@test "a live attacher gets everything a job writes beyond the cap" {
    head -c 5000000 /dev/urandom >"$T/src"
    id=$(small eddy submit -n1 sh -c \
        "echo ready; while [ ! -e $T/go ]; do sleep 0.1; done; cat $T/src")
    EDDY_URI=$SMALL_URI bounded 120 eddy job attach "$id" \
        >"$T/out" 2>"$T/err" 3>&- &
    pid=$!
    wait_until 30 grep -q ready "$T/out"
    touch "$T/go"
    wait "$pid"
    [ ! -s "$T/err" ]
    tail -c +7 "$T/out" >"$T/data"
    cmp "$T/src" "$T/data"
}

@test "a slow live attacher is not dropped and slows the job instead" {
    head -c 20000000 /dev/urandom >"$T/src"
    id=$(small eddy submit -n1 sh -c \
        "echo ready; while [ ! -e $T/go ]; do sleep 0.1; done; cat $T/src")
    (EDDY_URI=$SMALL_URI bounded 120 eddy job attach "$id" 2>"$T/err" |
        { IFS= read -r l; echo "$l" >"$T/ready"; sleep 3; cat >"$T/data"; }
    ) 3>&- &
    pid=$!
    wait_until 30 test -s "$T/ready"
    touch "$T/go"
    # the job cannot finish while the reader sleeps: its output waits
    sleep 1
    run small eddy jobs --json
    [[ "$(echo "$output" | jq -r ".jobs[] | select(.id == $id) | .state")" \
        == RUN ]]
    wait "$pid"
    [ ! -s "$T/err" ]
    cmp "$T/src" "$T/data"
}

@test "a slow reader of a 64 MiB replay is not dropped" {
    id=$(eddy submit -n1 head -c 80000000 /dev/zero)
    run bounded 60 eddy job wait "$id"
    [ "$status" -eq 0 ]
    run bounded 120 sh -c \
        "eddy job attach $id 2>$T/err | (sleep 3; wc -c)"
    [ "$status" -eq 0 ]
    cat "$T/err"
    ! grep -q "connection" "$T/err"
    [ "$output" -gt 60000000 ]
    [ $((output + $(dropped_in "$T/err"))) -eq 80000000 ]
}

@test "a job submitted with stdin reads it (eddy_jobspec_set_stdin)" {
    run bounded 30 sh -c 'printf "in put\n" | eddy run -n1 cat'
    [ "$status" -eq 0 ]
    [ "$output" = "in put" ]
    printf 'abc\n' >"$T/in"
    id=$(eddy submit -n 2 --input="$T/in" cat)
    # wait first: a live `eddy job attach` would also forward its own
    # (empty) stdin, racing the background writer of submit --input
    run bounded 30 eddy job wait "$id"
    [ "$status" -eq 0 ]
    run bounded 30 eddy job attach -l "$id"
    [ "$status" -eq 0 ]
    [ "$(printf '%s\n' "${lines[@]}" | sort | tr '\n' ' ')" = "0: abc 1: abc " ]
}
