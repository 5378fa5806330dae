#!/usr/bin/env bats
# MPIR with a dead node: a proctable query while a broker of the job is
# silent ends with an error naming the lost rank, never a hang.

load helper

teardown() {
    if [ -n "${INSTANCE_PID:-}" ]; then
        kill -TERM "$INSTANCE_PID" 2>/dev/null || true
        wait "$INSTANCE_PID" 2>/dev/null || true
    fi
}

broker_pid() {
    # The parent of a process exec'd on rank $1 is that rank's broker.
    eddy exec -n -r "$1" sh -c 'echo $PPID'
}

@test "a broker of the job goes silent: proctable fails naming it" {
    start_instance 4 --cores-per-rank=4 -o --heartbeat=0.2 \
        -o --heartbeat-timeout=3
    local s id pid
    s=$(unique_seconds)
    id=$(eddy submit -N4 -n4 sleep "$s")
    wait_until 30 bash -c "eddy job proctable $id >/dev/null 2>&1"
    pid=$(broker_pid 3)
    kill -STOP "$pid"
    run bounded 30 eddy job proctable "$id"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"rank 3"*"lost"* ]] || [[ "$output" == *"job $id has ended or is ending"* ]]
    kill -CONT "$pid"
    # once it runs again it finds its parent gone and exits, with its shell
    wait_until 10 sh -c "! kill -0 $pid 2>/dev/null"
    eddy job cancel "$id" 2>/dev/null || true
    bounded 30 eddy job wait "$id" || true
    check_no_job_processes 30
    stop_instance 1
}
