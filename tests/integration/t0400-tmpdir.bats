#!/usr/bin/env bats
# Job tmpdirs: one private directory per job per node, made before any
# task runs (it exists while the job is held), 0700 and ours, in
# EDDY_JOB_TMPDIR of every task, shown by `eddy job tmpdir`, removed after
# the last task on the node (normal exit, cancel, a crashing task, a
# killed shell) without following symlinks out of it; a base where it
# cannot be made fails the job before any task runs anywhere.

load helper

setup_file() {
    BASE=$BATS_FILE_TMPDIR/base
    mkdir "$BASE"
    export BASE
    # a broker wrapper that gives rank 1 a base where nothing can be made
    # (a path under a regular file: root ignores modes, not that)
    cat >"$BATS_FILE_TMPDIR/badrank1" <<'SH'
#!/bin/sh
case " $* " in
*" --rank=1 "*) exec "$@" --tmpdir-base=/etc/hostname/x ;;
esac
exec "$@"
SH
    chmod +x "$BATS_FILE_TMPDIR/badrank1"
    start_instance 4 --cores-per-rank=2 --tmpdir-base="$BASE"
}

teardown_file() {
    stop_instance
    # every job's tmpdirs are gone, on every node
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

# held ID NTASKS: every task of the job is held at its fork barrier.
held() {
    eddy job info --json "$1" | jq -e --argjson n "$2" \
        '.barrier.held == $n and (.barrier.released | not)' >/dev/null
}

started() {
    eddy job info --json "$1" | jq -e '.t_start > 0' >/dev/null
}

# The job's tmpdir paths, one per node, in node order.
node_paths() {
    eddy job tmpdir --json "$1" | jq -r '.nodes[].path'
}

# The path of task rank $2 from the JSON mapping in file $1.
rank_path() {
    jq -r --argjson r "$2" \
        '.nodes[(.tasks[] | select(.[0] <= $r and $r < .[0] + .[1]) | .[2])].path' \
        "$1"
}

# None of the paths given exists any more.
all_gone() {
    local p
    for p in "$@"; do
        [ ! -e "$p" ] && [ ! -L "$p" ] || return 1
    done
}

# The output of a nested `eddy start` ($output) has no sanitizer report.
no_sanitizer_report() {
    ! grep -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' <<<"$output"
}

# The eddy-shell of our instance whose EDDY_JOB_TMPDIR is $1.
shell_of() {
    local p
    for p in /proc/[0-9]*; do
        [ "$(cat "$p/comm" 2>/dev/null)" = eddy-shell ] || continue
        if tr '\0' '\n' <"$p/environ" 2>/dev/null |
                grep -qxF "EDDY_JOB_TMPDIR=$1"; then
            echo "${p#/proc/}"
            return 0
        fi
    done
    return 1
}

@test "held job: a 0700 tmpdir of ours per node before any task ran" {
    id=$(eddy submit --stop=fork -N4 -n8 sh -c \
        "echo \"\$EDDY_JOB_TMPDIR\" >'$T/env.'\$EDDY_TASK_RANK")
    wait_until 20 held "$id" 8
    eddy job tmpdir --json "$id" >"$T/map.json"
    [ "$(jq -r .id "$T/map.json")" = "$id" ]
    [ "$(jq -r .ntasks "$T/map.json")" = 8 ]
    [ "$(jq '.nodes | length' "$T/map.json")" = 4 ]
    # compact: each node once, task ranks as runs
    [ "$(jq -c .tasks "$T/map.json")" = '[[0,2,0],[2,2,1],[4,2,2],[6,2,3]]' ]
    paths=$(jq -r '.nodes[].path' "$T/map.json")
    [ "$(sort -u <<<"$paths" | wc -l)" -eq 4 ]
    jq -r '.nodes[] | "\(.rank) \(.path)"' "$T/map.json" >"$T/nodes"
    while read -r rank path; do
        [ -d "$path" ] && [ ! -L "$path" ]
        [ "$(stat -c '%a %u %g' "$path")" = "700 $(id -u) $(id -g)" ]
        [ "$(dirname "$path")" = "$BASE" ]
        [[ "$(basename "$path")" =~ ^eddy-.+-r${rank}-j${id}-......$ ]]
    done <"$T/nodes"
    # held before exec: no task ran
    [ -z "$(ls "$T" | grep '^env\.' || true)" ]
    bounded 30 eddy job release "$id"
    run bounded 30 eddy job wait "$id"
    [ "$status" -eq 0 ]
    for r in 0 1 2 3 4 5 6 7; do
        [ "$(cat "$T/env.$r")" = "$(rank_path "$T/map.json" "$r")" ]
    done
    # gone with the job
    all_gone $paths
}

@test "eddy job tmpdir: text and JSON agree with what the tasks see" {
    id=$(eddy submit -N3 -n6 sh -c \
        "echo \"\$EDDY_TASK_RANK \$EDDY_JOB_TMPDIR\" >'$T/env.'\$EDDY_TASK_RANK; touch '$T/go.'\$EDDY_TASK_RANK; while [ ! -e '$T/done' ]; do sleep 0.1; done")
    wait_until 20 sh -c "[ \$(ls '$T' | grep -c '^go\\.') -eq 6 ]"
    run eddy job tmpdir "$id"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "$(printf '%-6s %-6s %-16s %s' RANK NODE HOSTNAME PATH)" ]
    [ "${#lines[@]}" -eq 7 ]
    eddy job tmpdir --json "$id" >"$T/map.json"
    eddy job info --json "$id" >"$T/info.json"
    for r in 0 1 2 3 4 5; do
        read -r rank node host path <<<"${lines[$((r + 1))]}"
        [ "$rank" = "$r" ]
        [ "$path" = "$(rank_path "$T/map.json" "$r")" ]
        [ "$(cat "$T/env.$r")" = "$r $path" ]
        # the node and host are those of job info
        [ "$node" = "$(jq -r --argjson r "$r" '.tasks[$r].node' "$T/info.json")" ]
        [ "$host" = "$(jq -r --argjson r "$r" '.tasks[$r].hostname' "$T/info.json")" ]
    done
    paths=$(node_paths "$id")
    touch "$T/done"
    run bounded 30 eddy job wait "$id"
    [ "$status" -eq 0 ]
    all_gone $paths
}

@test "removed after cancel" {
    s=$(unique_seconds)
    id=$(eddy submit -N2 -n4 sh -c "touch \"\$EDDY_JOB_TMPDIR/f.\$EDDY_TASK_RANK\"; sleep $s")
    wait_until 20 started "$id"
    paths=$(node_paths "$id")
    [ "$(echo "$paths" | wc -l)" -eq 2 ]
    wait_until 20 sh -c "[ \$(ls $(echo $paths) | grep -c '^f\\.') -eq 4 ]"
    bounded 30 eddy job cancel "$id"
    run bounded 30 eddy job wait "$id"
    [ "$status" -ne 0 ]
    all_gone $paths
}

@test "removed after a task crashed" {
    id=$(eddy submit -N2 -n4 sh -c \
        "echo \"\$EDDY_JOB_TMPDIR\" >'$T/env.'\$EDDY_TASK_RANK; touch \"\$EDDY_JOB_TMPDIR/f\" && touch '$T/ok.'\$EDDY_TASK_RANK; [ \$EDDY_TASK_RANK != 1 ] || kill -SEGV \$\$")
    run bounded 30 eddy job wait "$id"
    [ "$status" -eq 139 ]
    [ "$(ls "$T" | grep -c '^ok\.')" -eq 4 ]
    all_gone $(cat "$T"/env.* | sort -u)
    [ "$(cat "$T"/env.* | sort -u | wc -l)" -eq 2 ]
}

@test "removed after the eddy-shell was killed with SIGKILL" {
    s=$(unique_seconds)
    id=$(eddy submit -N2 -n4 sleep "$s")
    wait_until 20 started "$id"
    paths=$(node_paths "$id")
    first=$(head -n1 <<<"$paths")
    shell=$(shell_of "$first")
    [ -n "$shell" ]
    kill -9 "$shell"
    run bounded 30 eddy job wait "$id"
    [ "$status" -ne 0 ]
    [[ "$output" == *"eddy-shell killed by signal 9"* ]]
    all_gone $paths
}

@test "what the job leaves inside goes, what its symlinks point to stays" {
    mkdir -p "$T/outside/sub"
    echo precious >"$T/outside/keep"
    echo deep >"$T/outside/sub/keep"
    id=$(eddy submit -N2 -n2 sh -c "
        d=\$EDDY_JOB_TMPDIR
        echo \"\$d\" >'$T/env.'\$EDDY_TASK_RANK
        mkdir -p \"\$d/a/b/c\" && echo data >\"\$d/a/b/c/file\" &&
        ln -s '$T/outside' \"\$d/out\" && ln -s '$T/outside/keep' \"\$d/a/keep\" &&
        ln -s / \"\$d/root\" && ln -s '$T/outside/sub' \"\$d/a/b/sub\" &&
        mkfifo \"\$d/fifo\" && chmod 500 \"\$d/a/b\" && chmod 0 \"\$d/a/b/c\" &&
        touch '$T/ok.'\$EDDY_TASK_RANK")
    run bounded 30 eddy job wait "$id"
    [ "$status" -eq 0 ]
    [ -e "$T/ok.0" ] && [ -e "$T/ok.1" ]
    all_gone $(cat "$T"/env.*)
    [ "$(cat "$T/outside/keep")" = precious ]
    [ "$(cat "$T/outside/sub/keep")" = deep ]
    [ -d /etc ] && [ -e /etc/hostname ]
}

@test "a base where no tmpdir can be made fails the job, naming rank and path" {
    run bounded 60 eddy start -s2 --tmpdir-base=/etc/hostname/x \
        eddy run -N2 -n2 touch "$T/ran"
    [ "$status" -ne 0 ]
    [[ "$output" == *"exception"*"rank 0 ("*"cannot create a job tmpdir in /etc/hostname/x: Not a directory"* ]]
    [[ "$output" == *"rank 1 ("*"cannot create a job tmpdir in /etc/hostname/x: Not a directory"* ]]
    [ ! -e "$T/ran" ]
    no_sanitizer_report
}

@test "one node without a tmpdir: no task runs on any node" {
    mkdir "$T/b"
    start=$(date +%s)
    run bounded 60 eddy start -s3 --tmpdir-base="$T/b" \
        --wrap="$BATS_FILE_TMPDIR/badrank1" \
        sh -c "eddy run -N3 -n3 touch '$T/ran'; rc=\$?; eddy job eventlog 1; exit \$rc"
    [ "$status" -ne 0 ]
    [[ "$output" == *"job 1: rank 1 ("*"cannot create a job tmpdir in /etc/hostname/x: Not a directory"* ]]
    # the only exception: the other nodes were stopped before forking
    [ "$(grep -c ' exception {' <<<"$output")" -eq 1 ]
    [[ "$output" != *" start {}"* ]]
    [ ! -e "$T/ran" ]
    # the other nodes' tmpdirs went with the job, promptly
    [ -z "$(ls -A "$T/b")" ]
    [ $(( $(date +%s) - start )) -lt 5 ]
    no_sanitizer_report
}

@test "tmpdirs of jobs still running at shutdown are removed" {
    mkdir "$T/b"
    s=$(unique_seconds)
    run bounded 60 eddy start -s2 --tmpdir-base="$T/b" sh -c "
        id=\$(eddy submit -N2 -n2 sleep $s)
        until eddy job tmpdir \$id >/dev/null 2>&1; do sleep 0.1; done
        ls '$T/b' | wc -l"
    [ "$status" -eq 0 ]
    [ "${lines[-1]}" -eq 2 ]
    [ -z "$(ls -A "$T/b")" ]
    no_sanitizer_report
}

@test "the tmpdir of a broker killed with SIGKILL goes with its shell" {
    mkdir "$T/b"
    s=$(unique_seconds)
    run bounded 60 eddy start -s2 --tmpdir-base="$T/b" \
        -o --heartbeat=0.2 -o --heartbeat-timeout=1 sh -c "
        id=\$(eddy submit -N2 -n2 sleep $s)
        until eddy job tmpdir \$id >/dev/null 2>&1; do sleep 0.1; done
        ls '$T/b' | wc -l >'$T/before'
        rundir=\${EDDY_URI#local://}; rundir=\${rundir%/local-0}
        kill -9 \$(pgrep -f -- \"--rank=1 --rundir=\$rundir \")
        eddy job wait \$id
        exit 0"
    # eddy start says that rank 1 did not exit cleanly
    [ "$status" -eq 1 ]
    [[ "$output" == *"broker rank 1"*"killed by signal 9"* ]]
    [ "$(cat "$T/before")" -eq 2 ]
    wait_until 10 sh -c "[ -z \"\$(ls -A '$T/b')\" ]"
    # and the shell that did it is gone
    wait_until 10 sh -c "! grep -lsF 'EDDY_JOB_TMPDIR=$T/b/' /proc/[0-9]*/environ"
    no_sanitizer_report
}

@test "the base: \$TMPDIR by default, a relative --tmpdir-base is made absolute" {
    mkdir "$T/tmp" "$T/rel"
    run bounded 60 env TMPDIR="$T/tmp" eddy start -s1 \
        eddy run sh -c 'echo "$EDDY_JOB_TMPDIR"'
    [ "$status" -eq 0 ]
    [ "$(dirname "${lines[-1]}")" = "$T/tmp" ]
    run bounded 60 sh -c "cd '$T' && eddy start -s1 --tmpdir-base=rel \
        eddy run sh -c 'echo \"\$EDDY_JOB_TMPDIR\"'"
    [ "$status" -eq 0 ]
    [ "$(dirname "${lines[-1]}")" = "$T/rel" ]
    [ -z "$(ls -A "$T/rel")" ]
    no_sanitizer_report
}

@test "a tmpdir in the job's own environment does not win" {
    run bounded 30 eddy run --env=EDDY_JOB_TMPDIR=/nowhere sh -c 'echo "$EDDY_JOB_TMPDIR"'
    [ "$status" -eq 0 ]
    [ "$(dirname "$output")" = "$BASE" ]
}

@test "eddy job tmpdir: unknown, waiting and finished jobs are clear errors" {
    run eddy job tmpdir 999999
    [ "$status" -eq 1 ]
    [ "$output" = "eddy job tmpdir: job 999999: no such job" ]
    # every core taken by a held job: the next one waits
    hold=$(eddy submit --stop=fork -N4 -n8 true)
    wait_until 20 held "$hold" 8
    id=$(eddy submit true)
    run eddy job tmpdir "$id"
    [ "$status" -eq 1 ]
    [[ "$output" == *"job $id has not started yet (state SCHED)"* ]]
    bounded 30 eddy job cancel "$hold"
    bounded 30 eddy job wait "$id"
    run eddy job tmpdir "$id"
    [ "$status" -eq 1 ]
    [[ "$output" == *"job $id has ended or is ending (state INACTIVE)"* ]]
    run eddy job tmpdir
    [ "$status" -eq 1 ]
    [[ "$output" == *"no job ID given"* ]]
    run eddy job tmpdir -h
    [ "$status" -eq 0 ]
    [[ "$output" == *"eddy job tmpdir ID [--json]"* ]]
}
