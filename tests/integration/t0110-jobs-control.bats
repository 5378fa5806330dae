#!/usr/bin/env bats
# Jobs under control: attach (replay and live), signals, cancel, pids,
# Ctrl-C forwarding of eddy run.

load helper

setup_file() {
    start_instance 2 --cores-per-rank=4
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

# Wait until $1 files named $2.* exist in $T.
wait_files() {
    wait_until 20 sh -c "[ \$(ls '$T' | grep -c '^$2\\.') -ge $1 ]"
}

@test "attach after the job printed and finished replays everything" {
    id=$(eddy submit -n 2 sh -c \
        'for i in 1 2 3; do echo "r$EDDY_TASK_RANK l$i"; done; echo "e$EDDY_TASK_RANK" >&2')
    bounded 30 eddy job wait "$id"
    run bounded 30 eddy job attach "$id"
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 8 ]
    for r in 0 1; do
        for i in 1 2 3; do
            [[ "$output" == *"r$r l$i"* ]]
        done
        [[ "$output" == *"e$r"* ]]
    done
    # and again: the log is kept
    run bounded 30 eddy job attach -l "$id"
    [ "$status" -eq 0 ]
    [[ "$output" == *"1: r1 l3"* ]]
}

@test "attach mid-job replays what was printed, then follows live" {
    id=$(eddy submit sh -c \
        "echo before; touch '$T/started.0'; while [ ! -e '$T/go' ]; do sleep 0.1; done; echo after")
    wait_files 1 started
    bounded 30 eddy job attach "$id" >"$T/attach.out" 2>&1 &
    apid=$!
    wait_until 20 grep -q before "$T/attach.out"
    ! grep -q after "$T/attach.out"
    touch "$T/go"
    wait "$apid"
    [ "$(cat "$T/attach.out")" = "$(printf 'before\nafter')" ]
}

@test "attach exits with the job's status; replay of a silent job is empty" {
    id=$(eddy submit -n 2 sh -c 'exit $((EDDY_TASK_RANK + 3))')
    run bounded 30 eddy job attach "$id" </dev/null
    [ "$status" -eq 4 ]
    [ -z "$output" ]
}

@test "job kill delivers a signal to every rank" {
    id=$(eddy submit -n 4 sh -c \
        "trap 'echo got\$EDDY_TASK_RANK; exit 0' USR1; touch '$T/ready.'\$EDDY_TASK_RANK; while :; do sleep 0.1; done")
    wait_files 4 ready
    run eddy job kill -s USR1 "$id"
    [ "$status" -eq 0 ]
    run bounded 30 eddy job wait "$id"
    [ "$status" -eq 0 ]
    # stdout only: the shells may report their killed sleep on stderr
    run bounded 30 sh -c "eddy job attach $id 2>/dev/null"
    [ "$(printf '%s\n' "${lines[@]}" | sort | tr '\n' ' ')" = "got0 got1 got2 got3 " ]
}

@test "job kill --ranks signals only those ranks" {
    s=$(unique_seconds)
    id=$(eddy submit -n 3 sh -c "touch '$T/ready.'\$EDDY_TASK_RANK; exec sleep $s")
    wait_files 3 ready
    run eddy job kill -s KILL --ranks=1 "$id"
    [ "$status" -eq 0 ]
    wait_until 20 sh -c "eddy job info --json $id | jq -e '.tasks[1].status == 137' >/dev/null"
    run eddy job info --json "$id"
    [ "$(jq -r '.tasks[0].status' <<<"$output")" = null ]
    [ "$(jq -r '.state' <<<"$output")" = RUN ]
    eddy job kill -s 15 "$id"
    run bounded 30 eddy job wait "$id"
    [ "$status" -eq 143 ]
}

@test "job kill of a finished job is an error naming the job" {
    id=$(eddy submit true)
    bounded 30 eddy job wait "$id"
    run eddy job kill "$id"
    [ "$status" -eq 1 ]
    [[ "$output" == "eddy job kill: job $id"[:\ ]*"INACTIVE"* ]]
}

@test "cancel of a job that ignores SIGTERM still ends it" {
    s=$(unique_seconds)
    id=$(eddy submit -n 2 sh -c "trap '' TERM; touch '$T/ready.'\$EDDY_TASK_RANK; sleep $s")
    wait_files 2 ready
    run eddy job cancel "$id"
    [ "$status" -eq 0 ]
    run bounded 30 eddy job wait "$id"
    [ "$status" -ne 0 ]
    [[ "$output" == *"job $id"* ]]
    run eddy job info --json "$id"
    [ "$(jq -r '.state' <<<"$output")" = INACTIVE ]
    [ "$(jq -r '.exception.type' <<<"$output")" = cancel ]
    ! pgrep -f "sleep $s"
}

@test "cancel of a finished job is harmless or a clear error" {
    id=$(eddy submit true)
    bounded 30 eddy job wait "$id"
    run eddy job cancel "$id"
    [ "$status" -eq 0 ] || [[ "$output" == "eddy job cancel: job $id"[:\ ]* ]]
}

@test "job info pids are the real task pids" {
    s=$(unique_seconds)
    id=$(eddy submit -n 3 sh -c "echo \$\$ >'$T/pid.'\$EDDY_TASK_RANK; exec sleep $s")
    wait_files 3 pid
    wait_until 20 sh -c "eddy job info --json $id | jq -e '[.tasks[].pid] | all(. > 0)' >/dev/null"
    info=$(eddy job info --json "$id")
    for r in 0 1 2; do
        pid=$(jq -r ".tasks[$r].pid" <<<"$info")
        [ "$pid" = "$(cat "$T/pid.$r")" ]
        [ -d "/proc/$pid" ]
        tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "sleep $s"
        tr '\0' '\n' <"/proc/$pid/environ" | grep -qx "EDDY_TASK_RANK=$r"
    done
    eddy job cancel "$id"
    bounded 30 eddy job wait "$id" || true
    ! pgrep -f "sleep $s"
}

@test "eddy run: Ctrl-C forwards SIGINT to the tasks" {
    eddy run -n 2 sh -c \
        "trap 'echo int\$EDDY_TASK_RANK; exit 5' INT; touch '$T/ready.'\$EDDY_TASK_RANK; while :; do sleep 0.1; done" \
        >"$T/run.out" 2>"$T/run.err" &
    rpid=$!
    wait_files 2 ready
    kill -INT "$rpid"
    run bounded 30 bash -c "while kill -0 $rpid 2>/dev/null; do sleep 0.1; done"
    wait "$rpid" || rc=$?
    [ "${rc:-0}" -eq 5 ]
    [ "$(sort "$T/run.out" | tr '\n' ' ')" = "int0 int1 " ]
}

@test "eddy run: Ctrl-C twice within a second cancels the job" {
    s=$(unique_seconds)
    eddy run -n 2 sh -c "trap '' INT TERM; touch '$T/ready.'\$EDDY_TASK_RANK; sleep $s" \
        >"$T/run.out" 2>"$T/run.err" &
    rpid=$!
    wait_files 2 ready
    kill -INT "$rpid"
    sleep 0.2
    kill -INT "$rpid"
    run bounded 30 bash -c "while kill -0 $rpid 2>/dev/null; do sleep 0.1; done"
    wait "$rpid" || rc=$?
    [ "${rc:-0}" -ne 0 ]
    grep -q cancel "$T/run.err"
    ! pgrep -f "sleep $s"
}
