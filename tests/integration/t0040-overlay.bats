#!/usr/bin/env bats
# The broker tree: status, loss of a leaf or a subtree, heartbeats.

load helper

teardown() {
    # A failed test must not leave its instance behind.
    if [ -n "${INSTANCE_PID:-}" ]; then
        kill -TERM "$INSTANCE_PID" 2>/dev/null || true
        wait "$INSTANCE_PID" 2>/dev/null || true
    fi
}

broker_pid() {
    # The parent of a process exec'd on rank $1 is that rank's broker.
    eddy exec -n -r "$1" sh -c 'echo $PPID'
}

@test "overlay status shows the whole tree up" {
    start_instance 8
    run bounded 10 eddy overlay status
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(grep -c ': up$' <<<"$output")" -eq 8 ]
    [[ "$output" == *"8 brokers, fanout 2, lost: none"* ]]
    [[ "${lines[0]}" == "0 "* ]]
    # rank 7's parent is 3, whose parent is 1: it is drawn at depth 3.
    [[ "$output" == *"│  │  └─ 7 "* ]] || [[ "$output" == *"   └─ 7 "* ]] ||
        [[ "$output" == *"│     └─ 7 "* ]]
    run bounded 10 eddy overlay status --json
    [ "$status" -eq 0 ]
    [[ "$output" == *'"size": 8'* ]] || [[ "$output" == *'"size":8'* ]]
    stop_instance
}

@test "kill -9 of a leaf is reported and the rest keeps working" {
    start_instance 8
    local pid
    pid=$(broker_pid 7)
    [ -n "$pid" ]
    kill -9 "$pid"
    wait_until 5 sh -c 'eddy overlay status | grep -q "lost: 7$"'
    run bounded 10 eddy overlay status
    [[ "$output" == *"7 "*": lost"* ]]
    [ "$(grep -c ': up$' <<<"$output")" -eq 7 ]

    run bounded 20 eddy exec -n -r 0-6 sh -c 'echo $EDDY_BROKER_RANK'
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 7 ]

    # The lost rank fails fast, naming it.
    run bounded 5 eddy exec -n -r 7 true
    [ "$status" -ne 0 ]
    [[ "$output" == *"rank 7"* ]]
    [[ "$output" == *"lost"* ]] || [[ "$output" == *"unreachable"* ]]
    run bounded 5 eddy ping -c 1 7
    [ "$status" -eq 1 ]
    [[ "$output" == *"rank 7"* ]]

    run eddy dmesg -r 3
    [[ "$output" == *"rank 7 lost"* ]]

    # eddy start reports the broker that died and fails.
    stop_instance 1
    [ -z "$(pgrep -f -- "--rundir=$INSTANCE_RUNDIR")" ]
}

@test "losing an interior broker loses its subtree, not the instance" {
    start_instance 8
    local pid
    pid=$(broker_pid 1)
    kill -9 "$pid"
    wait_until 5 sh -c 'eddy overlay status | grep -q "lost: 1,3-4,7$"'
    run bounded 20 eddy exec -n -r 0,2,5,6 true
    [ "$status" -eq 0 ]
    run bounded 5 eddy exec -n -r 4 true
    [ "$status" -ne 0 ]
    [[ "$output" == *"rank 4"* ]]
    # The orphaned brokers 3, 4 and 7 exit by themselves.
    wait_until 10 sh -c "! pgrep -f -- '--rank=[347] --rundir=$INSTANCE_RUNDIR'"
    stop_instance 1
}

@test "a silent (stopped) broker is declared lost by heartbeat" {
    start_instance 4 -o --heartbeat=0.2 -o --heartbeat-timeout=1
    local pid
    pid=$(broker_pid 3)
    kill -STOP "$pid"
    wait_until 10 sh -c 'eddy overlay status | grep -q "lost: 3$"'
    run bounded 5 eddy ping -c 1 3
    [ "$status" -eq 1 ]
    kill -CONT "$pid"
    # Once it runs again it finds its parent gone and exits.
    wait_until 10 sh -c "! kill -0 $pid 2>/dev/null"
    stop_instance 1
}
