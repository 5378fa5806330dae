#!/usr/bin/env bats
# eddy exec: run a command on chosen brokers, with output, stdin and exit
# status coming back.

load helper

setup_file() {
    start_instance 8
}

teardown_file() {
    stop_instance
}

@test "exec on all ranks returns every rank's output" {
    run bounded 30 eddy exec -r all sh -c 'echo rank=$EDDY_BROKER_RANK'
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 8 ]
    for r in 0 1 2 3 4 5 6 7; do
        [[ "$output" == *"rank=$r"* ]]
    done
}

@test "exec without -r means all ranks" {
    run bounded 30 eddy exec -n hostname
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 8 ]
    [ "${lines[0]}" = "$(hostname)" ]
}

@test "-l labels each line with its rank" {
    run bounded 30 eddy exec -l -r 0-3 sh -c 'echo a; echo b'
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 8 ]
    for r in 0 1 2 3; do
        [ "$(printf '%s\n' "${lines[@]}" | grep -c "^$r: [ab]$")" -eq 2 ]
    done
}

@test "-l labels stderr lines too and keeps streams apart" {
    run bounded 30 sh -c 'eddy exec -l -r 5 sh -c "echo out; echo err >&2" 2>/dev/null'
    [ "$status" -eq 0 ]
    [ "$output" = "5: out" ]
    run bounded 30 sh -c 'eddy exec -l -r 5 sh -c "echo out; echo err >&2" 2>&1 >/dev/null'
    [ "$output" = "5: err" ]
}

@test "the exit status is the largest of the ranks'" {
    run bounded 30 eddy exec -n -r all sh -c 'exit $EDDY_BROKER_RANK'
    [ "$status" -eq 7 ]
    run bounded 30 eddy exec -n -r 2,4 sh -c 'exit $((EDDY_BROKER_RANK * 10))'
    [ "$status" -eq 40 ]
    run bounded 30 eddy exec -n -r 0-7 true
    [ "$status" -eq 0 ]
}

@test "a task killed by a signal gives 128+signal" {
    run bounded 30 eddy exec -n -r 3 sh -c 'kill -TERM $$'
    [ "$status" -eq 143 ]
}

@test "stdin reaches every rank" {
    run bounded 30 sh -c 'printf "hello\nworld\n" | eddy exec -l -r all cat'
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 16 ]
    for r in 0 1 2 3 4 5 6 7; do
        [ "$(printf '%s\n' "${lines[@]}" | grep -c "^$r: hello$")" -eq 1 ]
        [ "$(printf '%s\n' "${lines[@]}" | grep -c "^$r: world$")" -eq 1 ]
    done
}

@test "large stdin and output pass through intact" {
    head -c 3000000 /dev/urandom | base64 > "$BATS_TEST_TMPDIR/in"
    run bounded 60 sh -c "eddy exec -r 6 cat < '$BATS_TEST_TMPDIR/in' | cmp - '$BATS_TEST_TMPDIR/in'"
    [ "$status" -eq 0 ]
}

@test "a missing program is exit 127 with a message naming rank and program" {
    run -127 bounded 30 eddy exec -n -r 1 /no/such/program
    [ "$status" -eq 127 ]
    [[ "$output" == *"rank 1"* ]]
    [[ "$output" == *"/no/such/program"* ]]
    [[ "$output" == *"No such file or directory"* ]]
}

@test "bad rank sets are refused with a clear message" {
    run eddy exec -r 3-1 true
    [ "$status" -eq 1 ]
    [[ "$output" == *"3-1"* ]]
    run eddy exec -r 9 true
    [ "$status" -eq 1 ]
    [[ "$output" == *"rank 9 does not exist (instance size 8)"* ]]
    run eddy exec -r x true
    [ "$status" -eq 1 ]
    [[ "$output" == *"'x'"* ]]
    run eddy exec
    [ "$status" -eq 1 ]
}

@test "exec runs in the caller's directory and -d changes it" {
    cd "$BATS_TEST_TMPDIR"
    run bounded 30 eddy exec -n -r 2 pwd
    [ "$output" = "$BATS_TEST_TMPDIR" ]
    run bounded 30 eddy exec -n -r 2 -d / pwd
    [ "$output" = "/" ]
}

@test "SIGTERM to eddy exec is forwarded to the remote processes" {
    local secs
    secs=$(unique_seconds)
    eddy exec -n -r all sleep "$secs" &
    local pid=$!
    # Wait until all 8 sleeps run, then signal the front end.
    wait_until 10 sh -c "[ \$(pgrep -f -x 'sleep $secs' | wc -l) -ge 8 ]"
    kill -TERM "$pid"
    local rc=0
    wait "$pid" || rc=$?
    [ "$rc" -eq 143 ]
    wait_until 10 sh -c "! pgrep -f -x 'sleep $secs'"
}

@test "processes die when their client disconnects" {
    local secs
    secs=$(unique_seconds)
    eddy exec -n -r 0-7 sleep "$secs" &
    local pid=$!
    wait_until 10 sh -c "[ \$(pgrep -f -x 'sleep $secs' | wc -l) -ge 8 ]"
    kill -KILL "$pid"
    wait "$pid" || true
    wait_until 10 sh -c "! pgrep -f -x 'sleep $secs'"
}

@test "a closed stdin reads as empty, never as the broker socket" {
    run bounded 30 sh -c 'eddy exec -r all cat <&-; echo rc=$?'
    [ "$output" = "rc=0" ]
    run bounded 30 sh -c 'eddy exec -r 0-1 echo hi <&- >&-; echo rc=$?'
    [ "$output" = "rc=0" ]
}

@test "a closed output pipe ends eddy exec and its remote processes" {
    local tag
    tag=$(unique_seconds)
    run bounded 30 sh -c "eddy exec -n -r all yes $tag | head -n 2"
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 2 ]
    wait_until 10 sh -c "! pgrep -f -x 'yes $tag'"
}

@test "output that cannot be written is an error, not a silent loss" {
    run bounded 30 sh -c 'eddy exec -n -r 0-3 echo hi >/dev/full'
    [ "$status" -eq 1 ]
    [[ "$output" == *"cannot write standard output: No space left on device"* ]]
}
