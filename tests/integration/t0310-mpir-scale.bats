#!/usr/bin/env bats
# MPIR at scale: the proctable of a 4096-task job across 16 brokers,
# gathered over the tree, is complete and agrees with the job manager.

load helper

setup_file() {
    start_instance 16 --cores-per-rank=256
}

teardown_file() {
    stop_instance
}

teardown() {
    local id
    for id in $(eddy jobs 2>/dev/null | awk 'NR > 1 { print $1 }'); do
        eddy job cancel "$id" 2>/dev/null || true
    done
    check_no_job_processes 120
}

@test "a 4096-task proctable across 16 brokers is read correctly" {
    T=$BATS_TEST_TMPDIR
    s=$(unique_seconds)
    id=$(eddy submit -N16 -n4096 sleep "$s")
    wait_until 120 bash -c "eddy job proctable $id >/dev/null 2>&1"
    eddy job proctable --json "$id" >"$T/pt.json"
    jq -e 'length == 4096 and ([.[].rank] == [range(4096)]) and
           ([.[].pid] | unique | length) == 4096 and
           ([.[].node] | unique | length) == 16 and
           ([.[].executable] | unique) == ["/usr/bin/sleep"]' "$T/pt.json"
    # the pids and nodes are the ones the job manager knows
    eddy job info --json "$id" | jq -c '[.tasks[] | [.rank, .node, .pid]]' >"$T/a"
    jq -c '[.[] | [.rank, .node, .pid]]' "$T/pt.json" >"$T/b"
    diff "$T/a" "$T/b"
    eddy job cancel "$id"
    bounded 120 eddy job wait "$id" || true
}
