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

# Start a batch nested instance of $1 nodes that waits on the fifo
# $BATS_TEST_TMPDIR/go; sets ID, URI (local://) and NESTED_RUNDIR.
batch_waiting() {
    mkfifo "$BATS_TEST_TMPDIR/go"
    run bounded 10 eddy batch -N "$1" sh -c "read x <'$BATS_TEST_TMPDIR/go'"
    [ "$status" -eq 0 ]
    ID=$output
    run bounded 60 eddy uri "$ID"
    [ "$status" -eq 0 ]
    URI=$output
    [[ "$URI" == local://* ]]
    NESTED_RUNDIR=$(uri_rundir "$URI")
}

@test "uri --tcp ID and proxy --tcp ID: tcp:// with a token fetched sealed" {
    start_instance 4
    local tcp tok copy
    batch_waiting 2
    # rank 0 listens on its host's address; its token is in its run dir
    run bounded 10 eddy uri --tcp "$ID"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" =~ ^tcp://[0-9.]+:[0-9]+$ ]]
    tcp=$output
    [ "$(stat -c %a "$NESTED_RUNDIR/token")" = 600 ]
    tok=$(cat "$NESTED_RUNDIR/token")
    [[ "$tok" =~ ^[0-9a-f]{64}$ ]]
    # proxy --tcp: CMD gets the tcp:// URI and a private copy of the token
    run bounded 30 eddy proxy --tcp "$ID" sh -c '
        echo "uri=$EDDY_URI"
        echo "copy=$EDDY_TOKEN_FILE"
        stat -c "mode=%a" "$(dirname "$EDDY_TOKEN_FILE")" "$EDDY_TOKEN_FILE"
        cat "$EDDY_TOKEN_FILE"
        eddy overlay status
        exit 7'
    echo "$output"
    [ "$status" -eq 7 ]
    [[ "$output" == *"uri=$tcp"* ]]
    [ "$(grep -c '^mode=700$' <<<"$output")" -eq 1 ]
    [ "$(grep -c '^mode=600$' <<<"$output")" -eq 1 ]
    [ "$(grep -cx "$tok" <<<"$output")" -eq 1 ]
    [[ "$output" == *"2 brokers, fanout 2, lost: none"* ]]
    # the copy is gone with CMD
    copy=$(sed -n 's/^copy=//p' <<<"$output")
    [ -n "$copy" ]
    [ ! -e "$copy" ]
    [ ! -e "$(dirname "$copy")" ]
    # without --tcp, on rank 0's host: local://, no token copy
    run bounded 30 eddy proxy "$ID" sh -c 'echo "$EDDY_URI ${EDDY_TOKEN_FILE:-none}"'
    [ "$output" = "$URI none" ]
    echo go >"$BATS_TEST_TMPDIR/go"
    run bounded 60 eddy job wait "$ID"
    [ "$status" -eq 0 ]
    # the parent's output log has the URIs, never the token
    run bounded 10 eddy job attach "$ID"
    echo "$output"
    [[ "$output" == *"EDDY_TCP_URI=$tcp"* ]]
    [[ "$output" != *"$tok"* ]]
    check_nested_gone "$NESTED_RUNDIR"
    stop_instance
}

@test "proxy --tcp: a token that cannot be read is refused, saying why" {
    start_instance 2
    batch_waiting 1
    rm "$NESTED_RUNDIR/token"
    run bounded 30 eddy proxy --tcp "$ID" true
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"rank 0 of this instance: no token file at $NESTED_RUNDIR/token"* ]]
    [[ "$output" == *"job $ID: cannot get the token of tcp://"* ]]
    # a token that is not the instance's: the nested broker refuses it
    printf '%064d\n' 0 >"$NESTED_RUNDIR/token"
    chmod 600 "$NESTED_RUNDIR/token"
    run bounded 30 eddy proxy --tcp "$ID" true
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"wrong token"* ]]
    # the refused copies were removed
    run sh -c "ls -d '${XDG_RUNTIME_DIR:-${TMPDIR:-/tmp}}'/eddy-proxy-* 2>/dev/null"
    [ -z "$output" ]
    echo go >"$BATS_TEST_TMPDIR/go"
    run bounded 60 eddy job wait "$ID"
    stop_instance
}

@test "alloc -N 2 -n 6: the nested instance has those 6 cores" {
    start_instance 2 --cores-per-rank=4
    run bounded 60 eddy alloc -N 2 -n 6 --tcp sh -c '
        echo "uri=$EDDY_URI"
        eddy run -n 6 -l true && echo six-ok
        eddy run -n 7 true'
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"uri=tcp://"* ]]
    [[ "$output" == *six-ok* ]]
    [[ "$output" == *"never fits: 7 tasks x 1 core need 7 cores, the instance has 6"* ]]
    # not exclusive: a second allocation of the other 2x2 cores runs
    # beside the first one
    run bounded 60 env PARENT_URI="$EDDY_URI" eddy alloc -N 2 -n 4 sh -c '
        EDDY_URI=$PARENT_URI eddy alloc -N 2 -n 4 true && echo side-ok'
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *side-ok* ]]
    run bounded 10 eddy alloc -N 2 -n 3 true
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"-n 3 cores do not split evenly over -N 2 nodes"* ]]
    run bounded 10 eddy alloc -n 0 true
    [ "$status" -ne 0 ]
    [[ "$output" == *"-n '0' must be a number of cores"* ]]
    stop_instance
}

@test "nested brokers offer the parent job's cores, not the host's" {
    # 3 cores per rank, whatever this host has
    start_instance 2 --cores-per-rank=3
    # the tasks of a job are told their cores on their node
    run bounded 30 eddy run -N 2 -n 2 -c 3 -l sh -c 'echo "cores=$EDDY_JOB_CORES"'
    echo "$output"
    [ "$(grep -c 'cores=0-2$' <<<"$output")" -eq 2 ]
    # whole nodes of 3 cores: 6 in the nested instance
    run bounded 60 eddy alloc -N 2 sh -c '
        eddy run -n 6 true && echo six-ok
        eddy run -n 7 true'
    echo "$output"
    [[ "$output" == *six-ok* ]]
    [[ "$output" == *"never fits: 7 tasks x 1 core need 7 cores, the instance has 6"* ]]
    # a core count given to the nested brokers (-o --cores) wins
    run bounded 60 eddy alloc -N 1 -o --cores=5 sh -c 'eddy run -n 5 true &&
        echo five-ok'
    echo "$output"
    [[ "$output" == *five-ok* ]]
    stop_instance
}

@test "Ctrl-C (SIGINT) or SIGTERM while an allocation waits to start cancels it" {
    start_instance 1
    for sig in INT TERM; do
        blocker=$(eddy submit -N 1 --exclusive sleep 600)
        wait_until 20 bash -c "eddy job info --json $blocker | jq -e '.state == \"RUN\"' >/dev/null"
        eddy alloc -N 1 true >"$BATS_TEST_TMPDIR/out" 2>&1 &
        pid=$!
        wait_until 20 bash -c "eddy jobs | awk 'NR > 1 && \$2 == \"SCHED\"' | grep -q ."
        queued=$(eddy jobs | awk 'NR > 1 && $2 == "SCHED" { print $1 }')
        kill -"$sig" "$pid"
        rc=0
        wait "$pid" || rc=$?
        cat "$BATS_TEST_TMPDIR/out"
        [ "$rc" -ne 0 ]
        grep -q "job $queued: interrupted while it started (cancelled)" "$BATS_TEST_TMPDIR/out"
        wait_until 20 bash -c "eddy job info --json $queued | jq -e '.state == \"INACTIVE\"' >/dev/null"
        eddy job cancel "$blocker"
        bounded 30 eddy job wait "$blocker" || true
    done
    stop_instance
}
