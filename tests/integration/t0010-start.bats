#!/usr/bin/env bats
# eddy start: instances of several sizes and fanouts come up, run their
# command, and shut down leaving nothing behind.

load helper

# Start an instance, have every rank answer, shut down, check leftovers.
start_stop() {
    local size=$1 fanout=$2
    run bounded 120 eddy start --test-size="$size" --fanout="$fanout" \
        sh -c 'echo "$EDDY_URI"; eddy exec -r all -n true && echo exec-ok'
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *exec-ok* ]]
    local rundir=${lines[0]#local://}
    check_no_leftovers "${rundir%/*}"
}

@test "size 1 starts and stops" { start_stop 1 2; }
@test "size 2 starts and stops" { start_stop 2 2; }
@test "size 8 fanout 2 starts and stops" { start_stop 8 2; }
@test "size 8 fanout 8 starts and stops" { start_stop 8 8; }
@test "size 64 fanout 2 starts and stops" { start_stop 64 2; }
@test "size 64 fanout 8 starts and stops" { start_stop 64 8; }

@test "eddy start exits with the command's status" {
    run bounded 60 eddy start --test-size=2 sh -c 'exit 7'
    [ "$status" -eq 7 ]
    run bounded 60 eddy start --test-size=2 false
    [ "$status" -eq 1 ]
    run -127 bounded 60 eddy start --test-size=2 /nonexistent/program
    [ "$status" -eq 127 ]
    [[ "$output" == *"cannot run /nonexistent/program"* ]]
}

@test "the command sees the whole tree ready at once" {
    # No retry: rank 0 reports ready only when every broker has joined.
    run bounded 60 eddy start --test-size=16 eddy ping -c 1 15
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"from rank 15: seq=1"* ]]
}

@test "eddy start runs the shell when no command is given" {
    run bounded 60 env SHELL=/bin/sh eddy start --test-size=2 <<<'eddy uri'
    [ "$status" -eq 0 ]
    [[ "$output" == local://* ]]
}

@test "eddy start rejects bad options with a clear message" {
    run eddy start --test-size=0 true
    [ "$status" -eq 1 ]
    [[ "$output" == *"test size '0' must be a number from 1"* ]]
    run eddy start --fanout=x true
    [ "$status" -eq 1 ]
    [[ "$output" == *"fanout 'x'"* ]]
    run eddy start --hosts=/nonexistent true
    [ "$status" -eq 1 ]
    [[ "$output" == *"--hosts needs --rank"* ]]
}

@test "eddy shutdown from inside ends the instance and the command" {
    run bounded 60 eddy start --test-size=4 \
        sh -c 'eddy shutdown && exec sleep 1000'
    echo "$output"
    # The instance is gone, so eddy start stops the command (SIGTERM).
    [ "$status" -eq 143 ]
    [[ "$output" == *"instance shut down while the command was running"* ]]
    [[ "$output" != *"did not take the shutdown request"* ]]
}

@test "brokers log their startup, shown by eddy dmesg" {
    run bounded 60 eddy start --test-size=4 sh -c 'eddy dmesg; eddy dmesg -r 3'
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"ready"* ]]
    [[ "$output" == *"info"* ]]
}

@test "eddy start works with stdin, stdout and stderr closed" {
    run bounded 60 sh -c 'eddy start --test-size=2 sh -c "eddy exec -r all true && echo ok >&3" 3>&1 <&- >&- 2>&-; echo rc=$?'
    echo "$output"
    [ "$output" = "$(printf 'ok\nrc=0')" ]
}

@test "brokers offer the cores they may run on, or --cores-per-rank" {
    run bounded 60 eddy start --test-size=3 --cores-per-rank=5 \
        sh -c 'for r in 0 1 2; do eddy overlay info -r $r; done'
    [ "$status" -eq 0 ]
    [ "$(grep -c '^cores     5$' <<<"$output")" -eq 3 ]
    run bounded 60 eddy start --test-size=1 eddy overlay info
    [[ "$output" == *"cores     $(nproc)"* ]]
    # A single CPU in the affinity mask means one core offered.
    run bounded 60 taskset -c 0 eddy start --test-size=1 eddy overlay info
    [[ "$output" == *"cores     1"* ]]
    run eddy start --cores-per-rank=0 true
    [ "$status" -eq 1 ]
    [[ "$output" == *"cores per rank '0'"* ]]
}

@test "eddy overlay info describes one broker" {
    run bounded 60 eddy start --test-size=4 sh -c 'eddy overlay info -r 3 && eddy overlay info -r 9'
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"rank      3 of 4"* ]]
    [[ "$output" == *"parent    1"* ]]
    [[ "$output" == *"rank 9"* ]]
}
