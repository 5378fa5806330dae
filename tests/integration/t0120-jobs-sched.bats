#!/usr/bin/env bats
# Jobs and the scheduler: a job that cannot fit now waits (and says why)
# and starts when resources free; many jobs at once all finish.

load helper

setup_file() {
    start_instance 2 --cores-per-rank=2
}

teardown_file() {
    stop_instance
}

setup() {
    T=$(mktemp -d "$BATS_TEST_TMPDIR/t.XXXXXX")
}

teardown() {
    check_no_job_processes
}

state_of() {
    eddy job info --json "$1" | jq -r .state
}

@test "a queued job waits with a reason, then starts when resources free" {
    a=$(eddy submit -n 4 sh -c "while [ ! -e '$T/go' ]; do sleep 0.1; done; echo A")
    wait_until 20 sh -c "[ \$(eddy job info --json $a | jq -r .state) = RUN ]"
    b=$(eddy submit -n 1 echo B)
    run eddy job info --json "$b"
    [ "$(jq -r .state <<<"$output")" = SCHED ]
    [ -n "$(jq -r .reason <<<"$output")" ]
    run eddy jobs
    [[ "$output" == *"$b "*"SCHED"* ]]
    reason=$(eddy job info --json "$b" | jq -r .reason)
    [[ "$output" == *"$reason"* ]]
    touch "$T/go"
    run bounded 30 eddy job attach "$b"
    [ "$status" -eq 0 ]
    [ "$output" = B ]
    run bounded 30 eddy job wait "$a"
    [ "$status" -eq 0 ]
    # B could start only after A released its cores
    ta=$(eddy job info --json "$a" | jq -r .t_finish)
    tb=$(eddy job info --json "$b" | jq -r .t_start)
    [ "$(jq -n "$tb >= $ta")" = true ]
}

@test "a queued job can be cancelled before it runs" {
    a=$(eddy submit -n 4 sh -c "while [ ! -e '$T/go' ]; do sleep 0.1; done")
    b=$(eddy submit -n 4 echo never)
    wait_until 20 sh -c "[ \$(eddy job info --json $b | jq -r .state) = SCHED ]"
    run eddy job cancel "$b"
    [ "$status" -eq 0 ]
    run bounded 30 eddy job wait "$b"
    [ "$status" -ne 0 ]
    [ "$(state_of "$b")" = INACTIVE ]
    [ "$(eddy job info --json "$b" | jq -r .t_start)" = 0 ]
    touch "$T/go"
    run bounded 30 eddy job wait "$a"
    [ "$status" -eq 0 ]
    run bounded 30 eddy job attach "$b"
    [ -z "$(grep never <<<"$output")" ]
}

@test "Ctrl-C on attach to a queued job detaches and leaves it queued" {
    a=$(eddy submit -n 4 sh -c "while [ ! -e '$T/go' ]; do sleep 0.1; done")
    b=$(eddy submit -n 1 echo B)
    wait_until 20 sh -c "[ \$(eddy job info --json $b | jq -r .state) = SCHED ]"
    eddy job attach "$b" >"$T/att.out" 2>"$T/att.err" &
    apid=$!
    # once it runs eddy, SIGINT is ignored (as for any background job)
    # until its handler is in place; before that exec, a loaded machine
    # may still be in the window where the forked shell has not set it
    wait_until 10 sh -c "[ \"\$(cat /proc/$apid/comm 2>/dev/null)\" = eddy ]"
    # interrupt it until it has its handler in place and leaves (the
    # first SIGINT it handles makes it detach)
    wait_until 10 sh -c "kill -INT $apid 2>/dev/null; ! kill -0 $apid 2>/dev/null"
    wait "$apid" || rc=$?
    [ "${rc:-0}" -eq 130 ]
    grep -q detaching "$T/att.err"
    [ "$(state_of "$b")" = SCHED ]
    touch "$T/go"
    run bounded 30 eddy job attach "$b"
    [ "$status" -eq 0 ]
    [ "$output" = B ]
    bounded 30 eddy job wait "$a"
}

@test "-c and --exclusive shape what fits" {
    run bounded 30 eddy run -n 2 -c 2 -l printenv EDDY_JOB_NNODES
    [ "$status" -eq 0 ]
    [[ "$output" == *"0: 2"* ]]
    run bounded 30 eddy run -N 1 --exclusive --tasks-per-node=2 true
    [ "$status" -eq 0 ]
    run bounded 30 eddy run -n 5 true
    [ "$status" -eq 1 ]
    [[ "$output" == *"never fits"* ]]
}

@test "200 jobs submitted at once all finish with the right outputs" {
    seq 200 | bounded 120 xargs -P 16 -I{} sh -c \
        'echo "{} $(eddy submit sh -c "echo out{}")"' >"$T/ids"
    [ "$(wc -l <"$T/ids")" -eq 200 ]
    [ "$(awk '{print $2}' "$T/ids" | sort -u | wc -l)" -eq 200 ]
    bounded 300 xargs -P 16 -L 1 sh -c \
        'out=$(eddy job attach "$1") && [ "$out" = "out$0" ] || echo "job $1 (#$0): [$out]"' \
        <"$T/ids" >"$T/bad"
    [ ! -s "$T/bad" ] || { cat "$T/bad"; false; }
    run eddy jobs
    [ "${#lines[@]}" -eq 1 ]
    [ "$(eddy jobs -a --json | jq '[.jobs[] | select(.state == "INACTIVE" and .status == 0)] | length')" -ge 200 ]
}
