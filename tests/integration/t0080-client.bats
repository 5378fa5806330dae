#!/usr/bin/env bats
# libeddy against a live instance: events, loop integration, upstream
# routing, cancellation, EDDY_TRACE.

load helper

setup_file() {
    start_instance 8
}

teardown_file() {
    stop_instance
}

@test "events published at rank 0 reach a subscriber on a leaf, in order" {
    run bounded 20 env EDDY_URI="local://$INSTANCE_RUNDIR/local-7" \
        eddy-test-client events 5
    echo "$output"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "test.event 0" ]
    [ "${lines[4]}" = "test.event 4" ]
    [ "${#lines[@]}" -eq 5 ]
}

@test "a client can drive the handle from its own poll loop" {
    run bounded 20 eddy-test-client pollfd 7 20
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == "pollfd: 20 pings to rank 7 ok" ]]
}

@test "EDDY_RANK_UPSTREAM reaches the parent broker" {
    run bounded 20 env EDDY_URI="local://$INSTANCE_RUNDIR/local-7" \
        eddy-test-client upstream
    [ "$status" -eq 0 ]
    [ "$output" = "upstream of 7 is 3" ]
    run bounded 20 eddy-test-client upstream
    [ "$status" -eq 1 ]
    [[ "$output" == *"rank 0 has no parent"* ]]
}

@test "cancelling a streaming exec.run kills the process and ends the stream" {
    local secs
    secs=$(unique_seconds)
    run bounded 20 eddy-test-client cancel 5 "$secs"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"exit status 137"* ]]
    [[ "$output" == *"stream ended"* ]]
    run pgrep -f -x "sleep $secs"
    [ "$status" -eq 1 ]
}

@test "a blocking wait inside a callback fails with EDEADLK, not a hang" {
    run bounded 20 eddy-test-client deadlock
    [ "$status" -eq 0 ]
    [[ "$output" == *"Resource deadlock avoided"* ]]
}

@test "EDDY_TRACE=1 traces every message the client sends and receives" {
    run bounded 20 env EDDY_TRACE=1 eddy ping -c 1 3
    [ "$status" -eq 0 ]
    [[ "$output" == *"send"*"broker.ping"* ]]
    [[ "$output" == *"recv"*"broker.ping"* ]]
}
