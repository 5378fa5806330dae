#!/usr/bin/env bats
# Nested instances: eddy alloc, eddy batch, eddy uri ID, eddy proxy ID
# (brokers bootstrapped through the parent job's PMI).

load helper

teardown() {
    if [ -n "${INSTANCE_PID:-}" ]; then
        kill -TERM "$INSTANCE_PID" 2>/dev/null || true
        wait "$INSTANCE_PID" 2>/dev/null || true
    fi
}

# The run directory of the nested instance at URI $1.
uri_rundir() {
    local d=${1#local://}
    echo "${d%/*}"
}

# Nothing of the nested instance with run directory $1, nor of the
# parent's jobs, may remain.
check_nested_gone() {
    local rundir=$1 left
    pgrep -f -- "--rundir=$rundir" >&2 && return 1
    left=$(job_processes "$rundir")
    [ -z "$left" ] || { echo "left: $left" >&2; return 1; }
    left=$(job_processes)
    [ -z "$left" ] || { echo "left in parent: $left" >&2; return 1; }
    [ ! -e "$rundir" ] || { echo "$rundir remains" >&2; return 1; }
}

@test "alloc -N 4: a 4-broker nested instance whose jobs run under it" {
    start_instance 8
    run bounded 60 eddy alloc -N 4 sh -c '
        echo "uri=$EDDY_URI"
        eddy overlay status
        # task -> eddy-shell -> nested broker
        eddy run -N 4 -l sh -c "ps -o args= -p \$(ps -o ppid= -p \$PPID)"'
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"4 brokers, fanout 2, lost: none"* ]]
    [ "$(grep -c -- '--bootstrap=pmi' <<<"$output")" -eq 4 ]
    local uri
    uri=$(sed -n 's/^uri=//p' <<<"$output")
    [[ "$uri" == local://* ]]
    [ "$uri" != "$EDDY_URI" ]
    # the nested instance ended with the job, which ended cleanly
    run bounded 10 eddy jobs -a
    echo "$output"
    [[ "$output" == *"alloc "*"exit 0"* ]]
    check_nested_gone "$(uri_rundir "$uri")"
    stop_instance
}

@test "alloc passes CMD's exit status and refuses more nodes than exist" {
    start_instance 2
    run bounded 60 eddy alloc -N 2 sh -c 'exit 3'
    [ "$status" -eq 3 ]
    run bounded 30 eddy alloc -N 5 true
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"eddy alloc:"* ]]
    stop_instance
}

@test "batch returns at once; uri ID and proxy ID reach the instance" {
    start_instance 4
    local out=$BATS_TEST_TMPDIR/batch.out id uri
    cat >"$BATS_TEST_TMPDIR/script" <<SCRIPT
#!/bin/sh
eddy overlay status >"$out"
eddy run -N 2 -l hostname >>"$out"
read x <"$BATS_TEST_TMPDIR/go"
SCRIPT
    chmod +x "$BATS_TEST_TMPDIR/script"
    mkfifo "$BATS_TEST_TMPDIR/go"
    run bounded 10 eddy batch -N 2 "$BATS_TEST_TMPDIR/script"
    echo "$output"
    [ "$status" -eq 0 ]
    id=$output
    [[ "$id" =~ ^[0-9]+$ ]]
    run bounded 60 eddy uri "$id"
    echo "$output"
    [ "$status" -eq 0 ]
    uri=$output
    [[ "$uri" == local://* ]]
    run bounded 30 eddy proxy "$id" eddy overlay status
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"2 brokers, fanout 2, lost: none"* ]]
    echo go >"$BATS_TEST_TMPDIR/go"
    run bounded 60 eddy job wait "$id"
    [ "$status" -eq 0 ]
    cat "$out"
    grep -q "2 brokers, fanout 2, lost: none" "$out"
    [ "$(grep -c '^[01]: ' "$out")" -eq 2 ]
    run bounded 10 eddy uri "$id"
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"not a running nested instance"* ]]
    check_nested_gone "$(uri_rundir "$uri")"
    stop_instance
}

@test "cancelling an allocation ends everything inside it" {
    start_instance 4
    local secs id uri
    secs=$(unique_seconds)
    run bounded 10 eddy batch -N 3 sh -c "eddy submit -N 3 sleep $secs; sleep $secs"
    [ "$status" -eq 0 ]
    id=$output
    run bounded 60 eddy uri "$id"
    [ "$status" -eq 0 ]
    uri=$output
    # the nested job's three tasks are running
    wait_until 30 sh -c "[ \$(pgrep -c -x -f 'sleep $secs') -ge 4 ]"
    run bounded 10 eddy job cancel "$id"
    [ "$status" -eq 0 ]
    run bounded 60 eddy job wait "$id"
    wait_until 30 sh -c "! pgrep -f '^sleep $secs' >/dev/null"
    check_nested_gone "$(uri_rundir "$uri")"
    stop_instance
}

@test "uri ID and proxy ID: errors name the job" {
    start_instance 1
    run bounded 10 eddy uri 12345
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"job 12345: no such job"* ]]
    run bounded 10 eddy uri bogus
    [[ "$output" == *"'bogus' is not a job ID"* ]]
    run bounded 30 eddy submit true
    local id=$output
    run bounded 10 eddy job wait "$id"
    run bounded 10 eddy proxy "$id" true
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"not a running nested instance"* ]]
    run bounded 10 eddy batch
    [[ "$output" == *"no SCRIPT given"* ]]
    stop_instance
}
