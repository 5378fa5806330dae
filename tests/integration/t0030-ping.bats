#!/usr/bin/env bats
# eddy ping: round trips through the tree to every rank.

load helper

setup_file() {
    start_instance 16 --fanout=2
}

teardown_file() {
    stop_instance
}

@test "ping every rank" {
    for r in $(seq 0 15); do
        run bounded 10 eddy ping -c 1 "$r"
        [ "$status" -eq 0 ]
        [[ "$output" == *"from rank $r: seq=1 time="* ]]
        [[ "$output" == *"1 sent, 1 received, 0% loss"* ]]
    done
}

@test "ping -c counts and reports statistics" {
    run bounded 10 eddy ping -c 3 -i 0 15
    [ "$status" -eq 0 ]
    [ "$(grep -c 'from rank 15' <<<"$output")" -eq 3 ]
    [[ "$output" == *"seq=3"* ]]
    [[ "$output" == *"rtt min/avg/max/mdev"* ]]
}

@test "ping carries a payload" {
    run bounded 10 eddy ping -c 2 -i 0 -s 1000000 15
    [ "$status" -eq 0 ]
    [[ "$output" == *"1000000 bytes"* ]]
    [ "$(grep -c 'from rank 15' <<<"$output")" -eq 2 ]
}

@test "ping to a rank that does not exist is refused" {
    run eddy ping -c 1 16
    [ "$status" -eq 1 ]
    [[ "$output" == *"rank 16 does not exist (instance size 16)"* ]]
    run eddy ping -c 1 abc
    [ "$status" -eq 1 ]
    [[ "$output" == *"rank 'abc'"* ]]
}

@test "broker.info answers on every rank, routed by target rank" {
    # eddy version asks rank 0; dmesg asks any rank.
    run bounded 10 eddy version
    [ "$status" -eq 0 ]
    [[ "$output" == *"16 brokers"* ]]
    run bounded 10 eddy dmesg -r 15
    [ "$status" -eq 0 ]
    run bounded 10 eddy dmesg -r 16
    [ "$status" -eq 1 ]
    [[ "$output" == *"rank 16"* ]]
}
