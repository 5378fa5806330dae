#!/usr/bin/env bats
# `eddy stack`: a merged call tree of every task of a job, built from a
# tool daemon per node (eddy-stackd); an MPICH job hung in a barrier on
# 8 ranks over 4 brokers shows the barrier path for 7 ranks and the stuck
# one apart, with each sampling method, as text, JSON and dot; the job
# runs on undisturbed; shipping the daemon with --ship; errors.

load helper

setup_file() {
    mpicc -g -O0 -o "$BATS_FILE_TMPDIR/hang" \
        "$EDDY_SOURCE_DIR/tests/integration/mpi/hang.c"
    start_instance 4 --cores-per-rank=2
    id=$(eddy submit -N4 -n8 "$BATS_FILE_TMPDIR/hang")
    export id
    # hung: rank 0 said so, and every rank had a moment to reach the barrier
    wait_until 60 hung
    sleep 1
}

teardown_file() {
    eddy job cancel "$id" 2>/dev/null || true
    eddy job wait "$id" >/dev/null 2>&1 || true
    stop_instance
}

hung() {
    # KILL: attach would pass a TERM on to the job
    timeout -s KILL 2 eddy job attach "$id" 2>/dev/null | grep -q hanging
}

setup() {
    T=$(mktemp -d "$BATS_TEST_TMPDIR/t.XXXXXX")
}

# The JSON tree in $1: the ranks under main > solve > NAME (NAME a regex).
ranks_under() {
    jq -r --arg re "$2" '.children[] | select(.name == "main") | .children[]
        | select(.name == "solve") | .children[] | select(.name | test($re))
        | .ranks' "$1"
}

# Every task still runs (not stopped, not traced) after sampling.
undisturbed() {
    local pid
    for pid in $(eddy job info --json "$id" | jq -r '.tasks[].pid'); do
        grep -q '^State:.*S (sleeping)\|^State:.*R (running)' /proc/$pid/status
        grep -q '^TracerPid:.0$' /proc/$pid/status
    done
    [ "$(eddy job info --json "$id" | jq -r .state)" = RUN ]
}

check_tree() {
    local json=$1
    [ "$(ranks_under "$json" '^(P?MPI_Barrier)$')" = "0-3,5-7" ]
    [ "$(ranks_under "$json" '^compute$')" = "4" ]
}

@test "eddy stack on a job hung in a barrier (8 ranks, 4 brokers): the merged tree" {
    run bounded 60 eddy stack "$id"
    echo "$output"
    [ "$status" -eq 0 ]
    grep -E '^main > solve > P?MPI_Barrier( > .*)?  \[[-0-9,]+\]$' <<<"$output"
    grep -E '^main > solve > compute( > .*)?  \[4\]$' <<<"$output"
    bounded 60 eddy stack --json "$id" >"$T/tree.json"
    check_tree "$T/tree.json"
    undisturbed
}

@test "each sampling method gives the same tree at the application's level" {
    for m in unwind gdb; do
        bounded 120 eddy stack --json --method=$m "$id" >"$T/$m.json"
        check_tree "$T/$m.json"
    done
    undisturbed
}

@test "--dot: a Graphviz digraph with the ranks on the nodes" {
    run bounded 60 eddy stack --dot "$id"
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "digraph"* ]]
    # nodes labelled "name\n[ranks]", edges parent -> child
    grep -qF 'label="main\n[0-7]"' <<<"$output"
    grep -qF 'label="compute\n[4]"' <<<"$output"
    grep -q ' -> ' <<<"$output"
    [ "${lines[-1]}" = "}" ]
}

@test "--ship: the daemon is copied into the job's tmpdirs with bcast first" {
    EDDY_STACKD="$EDDY_BUILD_DIR/eddy-stackd" run bounded 60 eddy stack --ship --json "$id"
    [ "$status" -eq 0 ]
    echo "$output" >"$T/tree.json"
    check_tree "$T/tree.json"
    for d in $(eddy job tmpdir --json "$id" | jq -r '.nodes[].path'); do
        [ -x "$d/eddy-stackd" ]
    done
}

@test "errors: unknown job, a job that ended, bad options" {
    run eddy stack 999999
    [ "$status" -ne 0 ]
    [[ "$output" == *"job 999999"* ]]
    # (the hung job holds every core: this one is cancelled while queued)
    done_id=$(eddy submit -n1 true)
    eddy job cancel "$done_id"
    bounded 30 eddy job wait "$done_id" || true
    run eddy stack "$done_id"
    [ "$status" -ne 0 ]
    [[ "$output" == *"job $done_id"* ]]
    run eddy stack --method=magic "$id"
    [ "$status" -ne 0 ]
    [[ "$output" == *"'magic' is not auto, unwind or gdb"* ]]
}
