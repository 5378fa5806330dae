#!/usr/bin/env bats
# eddy-stackd, run by hand (no instance): samples stack-target processes
# stuck in known call chains with each method and prints their merged
# tree; tasks are left running; per-task failures are reported by rank
# and pid while the other tasks are still sampled.

load helper

# Ranks 0-3: 0 and 2 wait, 1 and 3 spin; rank 2 has two more threads.
setup_file() {
    local d=$BATS_FILE_TMPDIR i mode args
    : >"$d/pids"
    TASKS=""
    for i in 0 1 2 3; do
        mode=wait
        [ $((i % 2)) -eq 1 ] && mode=spin
        args=""
        [ "$i" -eq 2 ] && args=--threads=2
        eddy-stack-target $args --ready="$d/ready.$i" $mode 3>&- &
        echo $! >>"$d/pids"
        TASKS="$TASKS${TASKS:+,}$i:$!"
    done
    echo "$TASKS" >"$d/tasks"
    # every thread of every target in its last function
    for i in 0 1 2 3; do
        want=1
        [ "$i" -eq 2 ] && want=3
        wait_until 10 ready_count "$d/ready.$i" "$want"
    done
}

teardown_file() {
    local p
    for p in $(cat "$BATS_FILE_TMPDIR/pids" 2>/dev/null); do
        kill -CONT "$p" 2>/dev/null || true
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
}

ready_count() {
    [ -f "$1" ] && [ "$(tr -cd R <"$1" | wc -c)" -eq "$2" ]
}

tasks() { cat "$BATS_FILE_TMPDIR/tasks"; }
pid_of() { sed -n "$(($1 + 1))p" "$BATS_FILE_TMPDIR/pids"; }
state_of() { sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f1; }

# The tree every method must print for the four targets.
check_tree() {
    [[ "$output" == *"main > level_one > level_two > spin  [1,3]"* ]]
    [[ "$output" == *"main > level_one > level_two > wait_forever > "*"  [0,2]"* ]]
    [[ "$output" == *"clone3 > start_thread > worker > worker_level > wait_forever > "*"  [2]"* ]]
    # nothing else: the three paths and no frame outside main
    [ "$(printf '%s\n' "$output" | grep -c .)" -eq 3 ]
}

check_running() {
    local i s
    for i in 0 1 2 3; do
        s=$(state_of "$(pid_of $i)")
        [[ "$s" == [RS] ]] || { echo "rank $i in state $s" >&2; return 1; }
    done
}

@test "unwind: merged paths, rank sets and threads" {
    run --separate-stderr bounded 60 eddy-stackd --method=unwind \
        --tasks="$(tasks)" --format=text
    [ "$status" -eq 0 ]
    [ -z "$stderr" ]
    check_tree
    check_running
}

@test "gdb: the same tree" {
    run --separate-stderr bounded 120 eddy-stackd --method=gdb \
        --tasks="$(tasks)" --format=text
    [ "$status" -eq 0 ]
    [ -z "$stderr" ]
    check_tree
    check_running
}

@test "auto (the default) reads EDDY_TOOL_TASKS" {
    EDDY_TOOL_TASKS=$(tasks) run --separate-stderr bounded 60 \
        eddy-stackd --format=text
    [ "$status" -eq 0 ]
    check_tree
    check_running
}

@test "sampling many times leaves the targets running" {
    local n
    for n in 1 2 3 4 5; do
        run bounded 60 eddy-stackd --method=unwind --tasks="$(tasks)" \
            --format=text
        [ "$status" -eq 0 ]
    done
    check_running
}

@test "the default output is the encoded tree; json on request" {
    bounded 60 eddy-stackd --method=unwind --tasks="$(tasks)" \
        >"$BATS_TEST_TMPDIR/enc"
    [ "$(head -c 4 "$BATS_TEST_TMPDIR/enc")" = EDST ]
    run bounded 60 eddy-stackd --method=unwind --tasks="$(tasks)" --format=json
    [ "$status" -eq 0 ]
    [[ "$output" == '{"ranks":"0-3","children":['* ]]
    printf '%s' "$output" | jq -e '.children[] | select(.name == "main")' \
        >/dev/null
}

@test "a dead pid: one line naming rank and pid, exit 1, the others sampled" {
    local dead
    true &
    dead=$!
    wait $dead
    for m in unwind gdb auto; do
        run --separate-stderr bounded 120 eddy-stackd --method=$m \
            --tasks="$(tasks),9:$dead" --format=text
        [ "$status" -eq 1 ]
        [ "$stderr" = "eddy-stackd: rank 9 (pid $dead): no such process" ]
        check_tree
    done
}

@test "a task another tracer holds: cannot attach, the others sampled" {
    local d=$BATS_TEST_TMPDIR p
    eddy-stack-target wait 3>&- &
    p=$!
    echo $p >>"$BATS_FILE_TMPDIR/pids"
    eddy-ptrace-hold "$p" "$d/held" 3>&- &
    local holder=$!
    wait_until 10 test -e "$d/held"
    for m in unwind gdb; do
        run --separate-stderr bounded 120 eddy-stackd --method=$m \
            --tasks="$(tasks),7:$p" --format=text
        [ "$status" -eq 1 ]
        [ "$stderr" = "eddy-stackd: rank 7 (pid $p): cannot attach: Operation not permitted" ]
        check_tree
    done
    kill "$holder"
    wait "$holder"
}

@test "a stopped task stays stopped, the running ones run" {
    local p
    p=$(pid_of 1)
    kill -STOP "$p"
    wait_until 10 eval '[ "$(state_of '"$p"')" = T ]'
    for m in unwind gdb; do
        run bounded 120 eddy-stackd --method=$m --tasks="$(tasks)" \
            --format=text
        [ "$status" -eq 0 ]
        check_tree
        [ "$(state_of "$p")" = T ]
    done
    kill -CONT "$p"
    check_running
}

@test "a task that cannot stop times out alone and is left running" {
    local d=$BATS_TEST_TMPDIR p child
    eddy-stack-target --ready="$d/v" vfork 3>&- &
    p=$!
    echo $p >>"$BATS_FILE_TMPDIR/pids"
    wait_until 10 ready_count "$d/v" 1
    wait_until 10 test -s "$d/v.child"
    child=$(cat "$d/v.child")
    echo "$child" >>"$BATS_FILE_TMPDIR/pids"
    [ "$(state_of "$p")" = D ]
    # unwind: every other task is sampled while this one never stops
    SECONDS=0
    run --separate-stderr bounded 60 eddy-stackd --method=unwind \
        --timeout=2 --tasks="$(tasks),8:$p" --format=text
    [ "$status" -eq 1 ]
    [ "$SECONDS" -lt 10 ]
    [ "$stderr" = "eddy-stackd: rank 8 (pid $p): timed out: 1 of 1 threads did not stop" ]
    check_tree
    # gdb: it hangs in the attach of the last task, the first four are
    # kept; killed mid-attach it leaves a SIGSTOP pending, which we cancel
    SECONDS=0
    run --separate-stderr bounded 60 eddy-stackd --method=gdb \
        --timeout="$(scaled 8)" --tasks="$(tasks),8:$p" --format=text
    [ "$status" -eq 1 ]
    [ "$SECONDS" -lt $(( $(scaled 8) + 5 )) ]
    [ "$stderr" = "eddy-stackd: rank 8 (pid $p): timed out" ]
    check_tree
    check_running
    # let the vfork end: the task runs on, not stopped
    kill -KILL "$child"
    wait_until 10 eval '[ "$(state_of '"$p"')" = S ]'
}

@test "a gdb that hangs is killed at the timeout" {
    local fake=$BATS_TEST_TMPDIR/gdb
    printf '#!/bin/sh\nexec sleep 1000\n' >"$fake"
    chmod +x "$fake"
    SECONDS=0
    EDDY_STACKD_GDB=$fake run --separate-stderr bounded 30 eddy-stackd \
        --method=gdb --timeout=1 --tasks="$(tasks)" --format=text
    [ "$status" -eq 1 ]
    [ "$SECONDS" -lt 10 ]
    [[ "$stderr" == *"rank 0 (pid $(pid_of 0)): timed out"* ]]
    [ "$(printf '%s\n' "$stderr" | grep -c 'timed out')" -eq 4 ]
    [ -z "$output" ]
    ! pgrep -x -f "sleep 1000" >/dev/null
    check_running
}

@test "no gdb: each task says so" {
    EDDY_STACKD_GDB=/nonexistent/gdb run --separate-stderr bounded 30 \
        eddy-stackd --method=gdb --tasks="$(tasks)" --format=text
    [ "$status" -eq 1 ]
    [[ "$stderr" == *"rank 3 (pid $(pid_of 3)): cannot run gdb: No such file or directory"* ]]
}

@test "usage errors exit 2 with a message" {
    run --separate-stderr eddy-stackd --tasks=0:1,x --format=text
    [ "$status" -eq 2 ]
    [[ "$stderr" == *"eddy-stackd: tasks: 'x' is not RANK:PID"* ]]
    run --separate-stderr eddy-stackd --tasks=0:1,0:2
    [ "$status" -eq 2 ]
    [[ "$stderr" == *"rank 0 is given twice"* ]]
    run --separate-stderr env -u EDDY_TOOL_TASKS eddy-stackd
    [ "$status" -eq 2 ]
    [[ "$stderr" == *"no tasks: give --tasks or set EDDY_TOOL_TASKS"* ]]
    run --separate-stderr eddy-stackd --method=magic --tasks=0:1
    [ "$status" -eq 2 ]
    [[ "$stderr" == *"--method: 'magic' is not auto, unwind or gdb"* ]]
    run --separate-stderr eddy-stackd --timeout=0 --tasks=0:1
    [ "$status" -eq 2 ]
    [[ "$stderr" == *"--timeout: '0' is not a number of seconds"* ]]
    run --separate-stderr eddy-stackd --frobnicate --tasks=0:1
    [ "$status" -eq 2 ]
    [[ "$stderr" == *"unknown option '--frobnicate'"* ]]
    run --separate-stderr eddy-stackd --tasks=0:1 extra
    [ "$status" -eq 2 ]
    [[ "$stderr" == *"unexpected argument 'extra'"* ]]
    run eddy-stackd --help
    [ "$status" -eq 0 ]
    [[ "$output" == "Usage: eddy-stackd"* ]]
}

@test "an empty task list is an empty tree" {
    run --separate-stderr eddy-stackd --tasks= --format=text
    [ "$status" -eq 0 ]
    [ -z "$output" ]
    [ -z "$stderr" ]
}
