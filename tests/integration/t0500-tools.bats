#!/usr/bin/env bats
# Tool daemons (`eddy tool`, eddy/tool.h): one daemon per node of a job
# (or per chosen node), beside its tasks, told where they are; output and
# exit statuses back by node, to the launcher and to later attachers;
# kill and list; files shipped with bcast seen by later launches; daemons
# reaped at the job's end (normal, cancel, a crash) before its tmpdir is
# removed, or kept with --keep; launches on a held job; the debugger's
# MPIR_executable_path launch; clear errors.

load helper

setup_file() {
    BASE=$BATS_FILE_TMPDIR/base
    mkdir "$BASE"
    export BASE
    start_instance 4 --cores-per-rank=2 --tmpdir-base="$BASE"
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
}

teardown_file() {
    stop_instance
    [ -z "$(ls -A "$BASE")" ]
}

setup() {
    T=$(mktemp -d "$BATS_TEST_TMPDIR/t.XXXXXX")
}

teardown() {
    local id
    for id in $(eddy jobs 2>/dev/null | awk 'NR > 1 { print $1 }'); do
        eddy job cancel "$id" 2>/dev/null || true
    done
    check_no_job_processes
}

started() {
    eddy job info --json "$1" | jq -e '.t_start > 0 and ([.tasks[].pid] | all(. > 0))' >/dev/null
}

# A job of 8 tasks on the 4 nodes that sleeps; its ID in $id.
sleeping_job() {
    id=$(eddy submit -N4 -n8 "$@" sleep "$(unique_seconds)")
    wait_until 30 started "$id"
}

ended() {
    [ "$(eddy job info --json "$1" | jq -r .state)" = INACTIVE ]
}

no_tools_running() {
    eddy tool list --json "$1" | jq -e '[.tools[].running] | all(. == "")' >/dev/null
}

@test "launch on every node: environment, cwd in the tmpdir, labelled output, exit 0" {
    sleeping_job
    run bounded 30 eddy tool launch "$id" -- sh -c \
        'echo "$EDDY_TOOL_RANK/$EDDY_TOOL_SIZE job=$EDDY_JOB_ID tool=$EDDY_TOOL_ID tasks=$EDDY_TOOL_TASKS pwd=$(pwd) tmp=$EDDY_JOB_TMPDIR"; echo oops >&2'
    echo "$output"
    [ "$status" -eq 0 ]
    # one line per node on stdout and one on stderr, labelled by broker rank
    [ "$(grep -c '^[0-3]: [0-3]/4 ' <<<"$output")" -eq 4 ]
    [ "$(grep -c '^[0-3]: oops$' <<<"$output")" -eq 4 ]
    # each node's line: its own tasks and pids, in its own tmpdir
    eddy job info --json "$id" >"$T/info.json"
    eddy job tmpdir --json "$id" >"$T/tmp.json"
    for node in 0 1 2 3; do
        want=$(jq -r --argjson n "$node" \
            '[.tasks[] | select(.node == $n) | "\(.rank):\(.pid)"] | join(",")' "$T/info.json")
        dir=$(jq -r --argjson n "$node" '.nodes[] | select(.rank == $n) | .path' "$T/tmp.json")
        line=$(grep "^$node: [0-3]/4 " <<<"$output")
        [[ "$line" == *" job=$id "* ]]
        [[ "$line" == *" tasks=$want "* ]]
        [[ "$line" == *" pwd=$dir tmp=$dir" ]]
    done
    # the node index counts the job's nodes in order
    [ "$(grep -o '^[0-3]: [0-3]/' <<<"$output" | sort | tr -d '\n')" = "0: 0/1: 1/2: 2/3: 3/" ]
}

@test "some nodes, --env, --cwd under the tmpdir, exit statuses by node" {
    sleeping_job
    eddy tool launch -r 1,3 "$id" -- mkdir sub
    run bounded 30 eddy tool launch -r 1,3 --env=FOO=bar --cwd=sub "$id" -- \
        sh -c 'echo "$FOO $(basename "$(pwd)") $EDDY_TOOL_RANK"; exit $((EDDY_TOOL_RANK + 2))'
    echo "$output"
    [ "$status" -eq 5 ]
    [ "$(grep -c '^[13]: bar sub [13]$' <<<"$output")" -eq 2 ]
    ! grep -q '^[02]: ' <<<"$output"
    [[ "$output" == *"rank 1 ("*"): exited with status 3"* ]]
    [[ "$output" == *"rank 3 ("*"): exited with status 5"* ]]
    # the list has both launches with their nodes and exits
    eddy tool list --json "$id" >"$T/list.json"
    jq -e '.tools | length == 2' "$T/list.json"
    jq -e '.tools[1].nodes == "1,3" and .tools[1].running == ""' "$T/list.json"
    jq -e '[.tools[1].exits[] | .[0]] == [1,3]' "$T/list.json"
}

@test "files shipped with bcast are there for two later launches" {
    sleeping_job
    printf 'support data\n' >"$T/support.txt"
    bounded 30 eddy bcast -q "$id" "$T/support.txt" support.txt
    for i in 1 2; do
        run bounded 30 eddy tool launch "$id" -- cat support.txt
        [ "$status" -eq 0 ]
        [ "$(grep -c '^[0-3]: support data$' <<<"$output")" -eq 4 ]
    done
}

@test "detach, list, attach replays, kill ends the daemons" {
    sleeping_job
    tool=$(bounded 30 eddy tool launch -d "$id" -- sh -c 'echo up; exec sleep 300')
    [[ "$tool" =~ ^[0-9]+$ ]]
    run bounded 30 eddy tool list "$id"
    echo "$output"
    [[ "$output" == *"$tool"*"$id"*"0-3"*"0-3"*"sh -c"* ]]
    wait_until 20 bash -c "[ \$(pgrep -fc 'sleep 300') -ge 4 ]"
    bounded 30 eddy tool kill -s KILL "$tool"
    run bounded 30 eddy tool attach "$tool"
    echo "$output"
    [ "$status" -eq 137 ]
    [ "$(grep -c '^[0-3]: up$' <<<"$output")" -eq 4 ]
    [ "$(grep -c 'killed by signal 9' <<<"$output")" -eq 4 ]
    # attach -n: the same output unlabelled
    run bounded 30 eddy tool attach -n "$tool"
    [ "$(grep -c '^up$' <<<"$output")" -eq 4 ]
}

# $1: how the job ends (exit, cancel, crash); the daemon must be gone and
# the tmpdirs removed afterwards.
job_end_reaps() {
    local how=$1
    if [ "$how" = exit ]; then
        # the tasks end once the test says so (a file in their tmpdir)
        id=$(eddy submit -N4 -n4 sh -c 'while [ ! -e "$EDDY_JOB_TMPDIR/go" ]; do sleep 0.1; done')
        wait_until 30 started "$id"
        eddy tool launch -d "$id" -- sleep 300 >"$T/tool"
    else
        sleeping_job
        eddy tool launch -d "$id" -- sh -c 'trap "" TERM; exec sleep 300' >"$T/tool"
    fi
    wait_until 20 bash -c "eddy tool list --json $id | jq -e '.tools[0].running == \"0-3\"' >/dev/null"
    eddy job tmpdir --json "$id" | jq -r '.nodes[].path' >"$T/dirs"
    case $how in
    exit) for d in $(cat "$T/dirs"); do touch "$d/go"; done ;;
    cancel) eddy job cancel "$id" ;;
    crash) eddy job kill -s SEGV "$id" ;;
    esac
    wait_until 30 ended "$id"
    # SIGTERM, then SIGKILL for the one that ignores it; then the tmpdirs go
    wait_until 20 no_tools_running "$id"
    for d in $(cat "$T/dirs"); do wait_until 10 test ! -e "$d"; done
    run bounded 30 eddy tool attach "$(cat "$T/tool")"
    echo "$output"
    [ "$(grep -c 'killed by signal' <<<"$output")" -eq 4 ]
}

@test "job end: daemons reaped, then the tmpdir removed (normal exit)" {
    job_end_reaps exit
}

@test "job end: daemons reaped, then the tmpdir removed (cancel, a daemon ignoring SIGTERM)" {
    job_end_reaps cancel
}

@test "job end: daemons reaped, then the tmpdir removed (a crashing task)" {
    job_end_reaps crash
}

@test "--keep: the daemon outlives the job, the tmpdir goes after it" {
    sleeping_job
    tool=$(eddy tool launch -d --keep -r 2 "$id" -- sh -c 'while [ ! -e stop ]; do sleep 0.1; done; echo stopped')
    dir=$(eddy job tmpdir --json "$id" | jq -r '.nodes[] | select(.rank == 2) | .path')
    eddy job cancel "$id"
    wait_until 30 ended "$id"
    sleep 2 # beyond the kill grace: the daemon must still run
    eddy tool list --json "$id" | jq -e '.tools[0].running == "2"'
    [ -d "$dir" ]
    touch "$dir/stop"
    run bounded 30 eddy tool attach "$tool"
    [ "$status" -eq 0 ]
    [ "$output" = "2: stopped" ]
    wait_until 10 test ! -e "$dir"
}

@test "launch on a job held at its startup barrier; the job then runs" {
    id=$(eddy submit -N4 -n8 --stop=exec sh -c 'echo task $EDDY_TASK_RANK')
    wait_until 30 bash -c "eddy job info --json $id | jq -e '.barrier.held == 8' >/dev/null"
    run bounded 30 eddy tool launch "$id" -- sh -c \
        'for t in $(echo "$EDDY_TOOL_TASKS" | tr , " "); do grep -q "^State:.*stopped" /proc/${t#*:}/status && echo held ${t%%:*}; done'
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(grep -c '^[0-3]: held [0-7]$' <<<"$output")" -eq 8 ]
    eddy job release "$id"
    run bounded 30 eddy job attach "$id"
    [ "$(grep -c '^task [0-7]$' <<<"$output")" -eq 8 ]
}

# gdb commands that store string $2 into char array $1, a NUL after it,
# and each newline of $2 as a NUL.
set_chars() {
    local name=$1 str=$2 i c
    for ((i = 0; i < ${#str}; i++)); do
        c=${str:i:1}
        if [ "$c" = $'\n' ]; then
            echo "set var $name[$i] = 0"
        else
            echo "set var $name[$i] = $(printf '%d' "'$c")"
        fi
    done
    echo "set var $name[${#str}] = 0"
}

@test "MPIR_executable_path set by gdb: the starter launches the daemon on every node" {
    cat >"$T/daemon" <<SH
#!/bin/sh
echo "\$EDDY_TOOL_RANK \$*" >"$T/daemon.\$EDDY_TOOL_RANK"
SH
    chmod +x "$T/daemon"
    {
        echo "set pagination off"
        echo "set confirm off"
        echo "break main"
        echo "run"
        echo "set var MPIR_being_debugged = 1"
        echo "break MPIR_Breakpoint"
        echo "continue"
        # as a debugger does it: written into the starter's memory (no
        # inferior calls), the arguments NUL-separated
        set_chars MPIR_executable_path "$T/daemon"
        set_chars MPIR_server_arguments $'-a\nb c\n'
        echo "continue"
    } >"$T/cmds"
    # the job lives until every daemon has written its file (a daemon
    # still running at the job's end would be terminated)
    run bounded 120 gdb -batch -nx -x "$T/cmds" --args eddy run -N4 -n4 \
        sh -c "until [ \$(ls $T/daemon.* 2>/dev/null | wc -l) -eq 4 ]; do sleep 0.1; done"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"started on every node"* ]]
    for r in 0 1 2 3; do
        wait_until 20 test -s "$T/daemon.$r"
        [ "$(cat "$T/daemon.$r")" = "$r -a b c" ]
    done
}

@test "refusals: unknown job, ended job, nodes not in the job, cwd leaving the tmpdir, bad arguments" {
    run eddy tool launch 999999 -- true
    [ "$status" -ne 0 ]
    [[ "$output" == *"job 999999"* ]]
    id=$(eddy submit -N2 -n2 true)
    bounded 30 eddy job wait "$id" || true
    run eddy tool launch "$id" -- true
    [ "$status" -ne 0 ]
    [[ "$output" == *"job $id"* ]]
    sleeping_job
    run eddy tool launch -r 0,7 "$id" -- true
    [ "$status" -ne 0 ]
    [[ "$output" == *"rank 7 is not one of its nodes"* ]]
    run eddy tool launch --cwd=../.. "$id" -- true
    [ "$status" -ne 0 ]
    [[ "$output" == *"leaves the job tmpdir"* ]]
    run eddy tool launch "$id"
    [ "$status" -ne 0 ]
    [[ "$output" == *"expected a COMMAND"* ]]
    run eddy tool attach 424242
    [ "$status" -ne 0 ]
    [[ "$output" == *"no such tool launch"* ]]
    run eddy tool kill -s NOPE 1
    [ "$status" -ne 0 ]
    [[ "$output" == *"'NOPE' is not a signal"* ]]
}

@test "a command missing on the nodes: one line per node, exit 1, nothing left" {
    sleeping_job
    run bounded 30 eddy tool launch "$id" -- /nonexistent/daemon
    echo "$output"
    [ "$status" -eq 1 ]
    [ "$(grep -c 'rank [0-3] (.*): cannot start /nonexistent/daemon: No such file or directory' <<<"$output")" -eq 4 ]
}

@test "examples/tool-frontend.c: the whole tool path through libeddy alone" {
    printf 'the support note\n' >"$T/note.txt"
    run bounded 60 eddy-tool-frontend 4 8 "$T/note.txt" -- hostname
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(grep -c '^  rank [0-7]: .* pid [0-9]* /.*hostname$' <<<"$output")" -eq 8 ]
    [[ "$output" == *"note.txt shipped to nodes 0-3"* ]]
    [ "$(grep -c '^  daemon on .* (node [0-3]): the support note (tasks [0-9:,]*)$' <<<"$output")" -eq 4 ]
    [[ "$output" == *"finished: status 0"* ]]
}

@test "rank 0 keeps at most 256 finished launches: the oldest are forgotten" {
    sleeping_job
    first=$(eddy tool launch -d "$id" -- true)
    for i in $(seq 270); do
        eddy tool launch -d "$id" -- true >/dev/null
    done
    wait_until 30 no_tools_running "$id"
    n=$(eddy tool list --json | jq '.tools | length')
    [ "$n" -le 257 ] # 256 finished, and maybe one still being reported
    run eddy tool attach "$first"
    [ "$status" -ne 0 ]
    [[ "$output" == *"tool $first: no such tool launch"* ]]
}

@test "a daemon whose child escaped its process group (setsid) still finishes; the job's end still removes the tmpdir" {
    sleeping_job
    s=$(unique_seconds)
    run bounded 30 eddy tool launch -r 1 "$id" -- sh -c "setsid sleep $s & echo hi"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$output" = "1: hi" ]
    dir=$(eddy job tmpdir --json "$id" | jq -r '.nodes[] | select(.rank == 1) | .path')
    eddy job cancel "$id"
    wait_until 30 ended "$id"
    wait_until 10 test ! -e "$dir"
    pkill -f "sleep $s" || true
}

@test "a malformed tool.spawn from a client is refused, the broker lives on" {
    sleeping_job
    run bounded 20 eddy-test-client rpc tool.spawn 1 \
        "{\"tool\":99,\"id\":$id,\"cmd\":[5],\"rank\":0,\"size\":1}"
    echo "$output"
    [[ "$output" == *"error 71: tool.spawn: malformed request"* ]]
    run bounded 20 eddy-test-client rpc tool.spawn 1 \
        "{\"tool\":99,\"id\":$id,\"cmd\":[\"true\"],\"cwd\":\"../..\",\"rank\":0,\"size\":1}"
    [[ "$output" == *"error 71: tool.spawn: malformed request"* ]]
    bounded 20 eddy ping -c 1 1
}

@test "at most 64 launches run at once: the next is refused with a reason" {
    sleeping_job
    for i in $(seq 64); do
        eddy tool launch -d -r 0 "$id" -- sleep 300 >/dev/null
    done
    run eddy tool launch -d -r 0 "$id" -- true
    [ "$status" -ne 0 ]
    [[ "$output" == *"64 tool launches already run"* ]]
}
