#!/usr/bin/env bats
# Job-shell plugins (docs/plugins.md): loaded from -o plugin=PATH[,ARGS]
# and from the instance's plugin directories; every callback in order
# with the right data on 4 nodes; the global process table at
# shell.start; environment changes reaching the tasks; a spawned helper
# told the local pids (the ATP-like example); a failing plugin at each
# point ends the job with an exception naming it, without a hang or a
# leftover process; bad paths, missing symbols and bad arguments say so.

load helper

setup_file() {
    PROBE=$EDDY_BUILD_DIR/eddy-plugin-probe.so
    ATP=$EDDY_BUILD_DIR/eddy-plugin-atp-like.so
    HELPER=$EDDY_BUILD_DIR/eddy-atp-helper
    export PROBE ATP HELPER
    start_instance 4 --cores-per-rank=2
}

teardown_file() {
    stop_instance
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
    check_no_helpers
}

# Helpers started by atp-like.so for this test (their environment names
# the test's directory).
helpers() {
    local p
    for p in /proc/[0-9]*; do
        tr '\0' '\n' 2>/dev/null <"$p/environ" |
            grep -qxF "ATP_LIKE_OUT=$T" && echo "${p#/proc/}"
    done
    return 0
}

check_no_helpers() {
    wait_until 10 test -z "$(helpers)" && return 0
    echo "helpers left: $(helpers)" >&2
    return 1
}

# The callbacks one node's probe saw, without their data.
topics() {
    awk '{ print $2 }' "$1" | uniq
}

@test "every callback runs in order on every node with the job's data" {
    run -0 bounded 60 eddy run -N4 -n8 -o "plugin=$PROBE,out=$T/p" \
        sh -c 'echo "$EDDY_TASK_RANK $$"'
    [ "${#lines[@]}" -eq 8 ]
    for n in 0 1 2 3; do
        f=$T/p.$n
        [ "$(topics "$f" | tr '\n' ' ')" = \
          "init shell.init shell.start task.init task.exit shell.exit " ]
        grep -qx "probe init args=out=$T/p" "$f"
        grep -Eqx "probe shell.init job=[0-9]+ ntasks=8 nnodes=4 node=$n rank=$n local=$((2 * n)),$((2 * n + 1)) table=0" "$f"
        [ "$(grep -c '^probe task.init' "$f")" -eq 2 ]
        [ "$(grep -c '^probe task.exit rank=[0-9]* code=0$' "$f")" -eq 2 ]
    done
    # the global table at shell.start is the same everywhere, holds every
    # rank with its node, and each pid is the one that task ran as
    table=$(sed -n 's/^probe shell.start table=//p' "$T/p.0")
    for n in 1 2 3; do
        [ "$(sed -n 's/^probe shell.start table=//p' "$T/p.$n")" = "$table" ]
    done
    [ "$(tr , '\n' <<<"$table" | cut -d: -f1 | tr '\n' ' ')" = \
      "0 1 2 3 4 5 6 7 " ]
    for line in "${lines[@]}"; do
        read -r rank pid <<<"$line"
        grep -Eq "(^|,)$rank:$pid:$((rank / 2))(,|$)" <<<"$table"
        grep -qx "probe task.init rank=$rank pid=$pid self=$pid" \
            "$T/p.$((rank / 2))"
        grep -qx "probe shell.start local rank=$rank pid=$pid" \
            "$T/p.$((rank / 2))"
    done
}

@test "environment set at shell.init, shell.start and task.init reaches the tasks" {
    run -0 bounded 60 eddy run -N4 -n8 -o "plugin=$PROBE,out=$T/p,tag=x" \
        sh -c 'echo "$EDDY_TASK_RANK $PROBE_INIT $PROBE_START $PROBE_TASK"'
    for r in 0 1 2 3 4 5 6 7; do
        grep -qx "$r x x $r" <<<"$output"
    done
}

@test "without a shell.start plugin there is no exchange and no table" {
    run -0 bounded 60 eddy run -N2 -n4 \
        -o "plugin=$PROBE,out=$T/p,nostart" \
        sh -c 'echo "$PROBE_INIT/${PROBE_START-unset}"'
    [ "$(sort -u <<<"$output")" = "probe/unset" ]
    ! grep -q shell.start "$T/p.0"
    grep -q 'table=0$' "$T/p.0"
}

@test "with --stop=fork, shell.start runs before the barrier and its environment survives the release" {
    id=$(eddy submit --stop=fork -N2 -n4 --output="$T/out.{{rank}}" \
        -o "plugin=$PROBE,out=$T/p" sh -c 'echo "$PROBE_START $PROBE_TASK"')
    wait_until 30 eval "eddy job info --json $id | jq -e '.barrier.held == 4' >/dev/null"
    grep -q '^probe shell.start table=' "$T/p.0"
    ! grep -q task.init "$T/p.0"
    eddy job release "$id"
    run -0 bounded 30 eddy job wait "$id"
    wait_until 10 test -s "$T/out.3"
    for r in 0 1 2 3; do
        [ "$(cat "$T/out.$r")" = "probe $r" ]
    done
}

@test "the ATP-like example starts a helper per node with the local pids" {
    run -0 bounded 60 eddy run -N4 -n8 \
        -o "plugin=$ATP,helper=$HELPER,out=$T" \
        sh -c 'while [ ! -s "'"$T"'/helper.$ATP_LIKE_HELPER_PID" ]; do sleep 0.05; done
               echo "$EDDY_TASK_RANK $$ $ATP_LIKE_HELPER_PID"'
    [ "${#lines[@]}" -eq 8 ]
    [ "$(ls "$T"/helper.* | wc -l)" -eq 4 ]
    for line in "${lines[@]}"; do
        read -r rank pid hpid <<<"$line"
        # the helper named in the task's environment got the task's pid,
        # and so did its node neighbour's (same helper)
        grep -Eq "^$hpid:( [0-9]+)* $pid( |$)" "$T/helper.$hpid"
        [ "$(wc -w <"$T/helper.$hpid")" -eq 3 ]
    done
}

# fail_at TOPIC: the job fails with an exception naming the plugin, the
# callback and the message, quickly, and leaves nothing running (tasks
# that would otherwise sleep, the helper atp-like spawned).
fail_at() {
    # the status is the tasks': cancelled, killed or never run
    run ! bounded 60 eddy run -N4 -n8 \
        -o "plugin=$ATP,helper=$HELPER,out=$T" \
        -o "plugin=$PROBE,out=$T/p,fail=$1" sleep "$(unique_seconds)"
    [[ $output == *"exception: "*"node "[0-3]": plugin $PROBE: $1: probe told to fail at $1"* ]]
    check_no_job_processes
    check_no_helpers
}

@test "a plugin failing at shell.init fails the job before any task runs" {
    fail_at shell.init
    ! grep -q task.init "$T"/p.*
    grep -q '^probe shell.exit' "$T/p.0"
}

@test "a plugin failing at shell.start fails the job; the held tasks never run" {
    fail_at shell.start
    ! grep -q task.init "$T"/p.*
}

@test "a plugin failing at task.init fails those tasks' exec" {
    fail_at task.init
    [[ $output == *"rank "[0-7]": node "* ]]
}

@test "a plugin failing at eddy_plugin_init fails the job" {
    fail_at init
}

@test "a plugin failing at task.exit or shell.exit fails the job" {
    for at in task.exit shell.exit; do
        # the tasks ran: the status is theirs (0, or 143 for those the
        # exception's SIGTERM reached first); the exception is the job's
        id=$(eddy submit -N2 -n4 -o "plugin=$PROBE,out=$T/p,fail=$at" true)
        run bounded 60 eddy job wait "$id"
        eddy job info --json "$id" | jq -e --arg m "plugin $PROBE: $at: probe told to fail at $at" \
            '.exception.note | test("^node [01]: ") and contains($m)'
    done
}

@test "plugin log lines reach the job's stderr and each node's broker log" {
    run -0 --separate-stderr bounded 60 eddy run -N2 -n2 \
        -o "plugin=$PROBE,out=$T/p,log" true
    [[ $stderr == *"node 0: eddy-plugin-probe.so: probe says hello"* ]]
    [[ $stderr == *"node 1: eddy-plugin-probe.so: probe says hello"* ]]
    id=$(eddy jobs -a | awk 'NR > 1 { print $1 }' | sort -n | tail -1)
    for r in 0 1; do
        wait_until 10 bash -c "eddy dmesg -r $r | grep -q 'job $id: node $r: eddy-plugin-probe.so: probe says hello'"
    done
}

@test "bad plugin path, missing symbol and bad arguments are clear errors" {
    run -1 bounded 60 eddy run -n1 -o plugin=/nonexistent/x.so true
    [[ $output == *"plugin /nonexistent/x.so: cannot load: "*"No such file"* ]]
    run -1 bounded 60 eddy run -n1 -o "plugin=$EDDY_BUILD_DIR/libeddy.so" true
    [[ $output == *"plugin $EDDY_BUILD_DIR/libeddy.so: no eddy_plugin_init symbol"* ]]
    run -1 bounded 60 eddy run -n1 -o "plugin=$PROBE,out=$T/p,bogus" true
    [[ $output == *"plugin $PROBE: init: unknown argument 'bogus'"* ]]
    # refused before submitting
    run -1 eddy run -n1 -o plugin= true
    [[ $output == *"expected plugin=PATH[,ARGS]"* ]]
    run -1 eddy run -n1 -o "plugin=,x" true
    [[ $output == *"expected plugin=PATH[,ARGS]"* ]]
    run -1 eddy run -n1 -o frob=1 true
    [[ $output == *"-o frob=1: unknown option"* ]]
}

@test "a relative plugin path is taken from the current directory" {
    cp "$PROBE" "$T/rel.so"
    cd "$T"
    run -0 bounded 60 eddy run -n1 -o "plugin=rel.so,out=$T/r" true
    grep -q "^probe shell.exit" "$T/r.0"
}

@test "eddy start --shell-plugin-dir loads every .so there, sorted, before the job's" {
    mkdir "$T/dir" "$T/empty"
    cp "$PROBE" "$T/dir/b.so"
    cp "$PROBE" "$T/dir/a.so"
    touch "$T/dir/readme.txt"
    # each copy is a separate plugin: both write to PROBE_OUT
    PROBE_OUT=$T/d run -0 bounded 120 env -u EDDY_URI eddy start \
        --test-size=2 --shell-plugin-dir="$T/dir" \
        --shell-plugin-dir="$T/empty" \
        eddy run -N2 -n2 -o "plugin=$PROBE,out=$T/d,tag=job" \
        sh -c 'echo "$PROBE_INIT"'
    [ "$(sort -u <<<"$output")" = "job" ]
    [ "$(grep ' init args=' "$T/d.0" | awk '{ print $1 }' | tr '\n' ' ')" = \
      "probe probe job " ]
    grep -qx "probe init args=" "$T/d.1"
    run -1 eddy start --shell-plugin-dir="$T/nonexistent" true
    [[ $output == *"--shell-plugin-dir=$T/nonexistent: No such file"* ]]
}
