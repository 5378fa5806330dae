#!/usr/bin/env bats
# One instance across 4 emulated hosts (network namespaces, netns.bash):
# hostnames and rank->node mappings in proctables, job info, tmpdir maps,
# MPIR (gdb) and tool launches are distinct and right; bcast ships over the
# emulated network (no shared memory between hosts) with every copy
# checked; the harness removes everything, also after a failed start.

load helper
load netns

setup_file() {
    # network namespaces need root (make check runs as root): fail, not skip
    [ "$(id -u)" -eq 0 ]
    cat >"$BATS_FILE_TMPDIR/ran.c" <<'C'
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    printf("ran rank %s\n", getenv("EDDY_TASK_RANK"));
    return 0;
}
C
    gcc -o "$BATS_FILE_TMPDIR/ran" "$BATS_FILE_TMPDIR/ran.c"
    netns_start 4 --cores-per-rank=2
    # LeakSanitizer cannot run under ptrace (the gdb test)
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
}

teardown_file() {
    local tag=${NETNS_TAG:-} dir=${NETNS_DIR:-}
    netns_stop
    # nothing of this run is left: namespaces (with their links), files
    if [ -n "$tag" ] && ip netns list | grep -- "$tag"; then
        return 1
    fi
    [ -z "$dir" ] || [ ! -e "$dir" ]
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

# A job of 8 tasks, 2 per host, that waits; its id on stdout.
held_job() {
    local id
    id=$(eddy submit -N4 -n8 sleep "$(unique_seconds)")
    wait_until 30 bash -c "eddy job proctable $id >/dev/null 2>&1"
    echo "$id"
}

@test "the hosts: distinct addresses, hostnames and links, in the overlay" {
    local i
    run eddy overlay status
    echo "$output"
    [ "$status" -eq 0 ]
    for i in 0 1 2 3; do
        [[ "$output" == *"$i host$i: up"* ]]
        [ "$(netns_exec "$i" hostname)" = "host$i" ]
        netns_exec "$i" ip -4 -o addr show dev eth0 |
            grep -q " $NETNS_SUBNET.$((i + 1))/24 "
    done
    # host 3's link to its parent (host 1, fanout 2) is a TCP connection
    # over the bridge; its only route is the bridge's subnet
    netns_exec 3 ss -Htn state established |
        grep -q " $(netns_addr 1):$NETNS_PORT *\$"
    [ "$(netns_exec 3 ip -o route | wc -l)" -eq 1 ]
}

@test "proctable, job info and tmpdir map: 4 distinct hosts, each rank on its own" {
    local id
    id=$(held_job)
    eddy job proctable --json "$id" >"$T/pt.json"
    eddy job info --json "$id" >"$T/info.json"
    eddy job tmpdir --json "$id" >"$T/td.json"
    cat "$T/pt.json" "$T/info.json" "$T/td.json"
    # every rank's hostname is the name of the node it runs on
    [ "$(jq length "$T/pt.json")" -eq 8 ]
    jq -e 'all(.[]; .hostname == "host\(.node)")' "$T/pt.json"
    jq -e '[.[].hostname] | unique == ["host0","host1","host2","host3"]' \
        "$T/pt.json"
    jq -e '[.[] | select(.node == 2)] | length == 2' "$T/pt.json"
    # job info says the same, rank by rank
    diff <(jq -r '.[] | "\(.rank) \(.node) \(.hostname) \(.pid)"' "$T/pt.json") \
        <(jq -r '.tasks[] | "\(.rank) \(.node) \(.hostname) \(.pid)"' "$T/info.json")
    # the task really runs on that host: its UTS namespace says so
    while read -r rank host pid; do
        [ "$(nsenter -t "$pid" -u hostname)" = "$host" ]
    done < <(jq -r '.[] | "\(.rank) \(.hostname) \(.pid)"' "$T/pt.json")
    # one tmpdir per host, under that host's own base, named by its host;
    # the tmpdir map's rank -> node runs agree with the proctable
    [ "$(jq '.nodes | length' "$T/td.json")" -eq 4 ]
    while read -r node host path; do
        [ "$host" = "host$node" ]
        [[ "$path" == "$NETNS_BASE/host$node/"* ]]
        [ -d "$path" ]
    done < <(jq -r '.nodes[] | "\(.rank) \(.hostname) \(.path)"' "$T/td.json")
    diff <(jq -r '.[] | "\(.rank) \(.hostname)"' "$T/pt.json") \
        <(jq -r '.nodes as $n | .tasks[] as [$s, $c, $i] |
                 range($s; $s + $c) | "\(.) \($n[$i].hostname)"' "$T/td.json")
}

@test "MPIR under gdb: MPIR_proctable host_name per rank, 4 distinct hosts" {
    {
        echo "set pagination off"
        echo "break MPIR_Breakpoint"
        echo "run"
        echo 'printf "size %d\n", MPIR_proctable_size'
        echo 'printf "jobid %s\n", totalview_jobid'
        echo 'set $i = 0'
        echo 'while $i < MPIR_proctable_size'
        echo '  printf "proc %d %s %d\n", $i, MPIR_proctable[$i].host_name, MPIR_proctable[$i].pid'
        echo '  set $i = $i + 1'
        echo 'end'
        echo "eval \"shell eddy job info --json %s >$T/info.json\", totalview_jobid"
        echo "continue"
    } >"$T/cmds"
    run bounded 120 gdb -batch -nx -x "$T/cmds" --args \
        eddy run --debug -N4 -n8 "$BATS_FILE_TMPDIR/ran"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"size 8"* ]]
    grep '^proc ' <<<"$output" | awk '{ print $2, $3, $4 }' >"$T/got"
    jq -r '.tasks[] | "\(.rank) \(.hostname) \(.pid)"' "$T/info.json" >"$T/want"
    diff "$T/want" "$T/got"
    [ "$(awk '{ print $2 }' "$T/got" | sort -u | tr '\n' ' ')" = \
        "host0 host1 host2 host3 " ]
    jq -e 'all(.tasks[]; .hostname == "host\(.node)")' "$T/info.json"
    [ "$(grep -c '^ran rank [0-7]$' <<<"$output")" -eq 8 ]
}

# Bytes host I received on its link so far.
rx_bytes() {
    netns_exec "$1" cat /sys/class/net/eth0/statistics/rx_bytes
}

@test "bcast to 4 hosts: sha256 on each host's tmpdir, the bytes crossed each host's link" {
    local id i before size=$((16 << 20)) want
    id=$(held_job)
    head -c "$size" /dev/urandom >"$T/f"
    want=$(sha256sum <"$T/f" | cut -d' ' -f1)
    for i in 1 2 3; do before[i]=$(rx_bytes "$i"); done
    run bounded 120 eddy bcast -q "$id" "$T/f" shipped
    echo "$output"
    [ "$status" -eq 0 ]
    while read -r node host path; do
        [[ "$path" == "$NETNS_BASE/host$node/"* ]]
        [ "$(sha256sum <"$path/shipped" | cut -d' ' -f1)" = "$want" ]
        ! ls -a "$path" | grep -q '\.eddy-'
    done < <(eddy job tmpdir --json "$id" |
             jq -r '.nodes[] | "\(.rank) \(.hostname) \(.path)"')
    # shared memory between hosts would leave the links idle: each of
    # hosts 1-3 (every one has a parent) received the whole file
    for i in 1 2 3; do
        echo "host$i received $(($(rx_bytes "$i") - before[i])) bytes"
        [ $(($(rx_bytes "$i") - before[i])) -ge "$size" ]
    done
}

@test "tool launch: one daemon per host, each says its own hostname" {
    local id
    id=$(held_job)
    run bounded 60 eddy tool launch "$id" -- hostname
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(sort <<<"$output" | tr '\n' ' ')" = \
        "0: host0 1: host1 2: host2 3: host3 " ]
}

@test "the harness removes everything, also when the instance fails to start" {
    # a second instance in this suite's process: started, stopped cleanly
    (
        netns_start 2
        tag=$NETNS_TAG
        [ "$(eddy exec -n -r all hostname | sort | tr '\n' ' ')" = "host0 host1 " ]
        netns_stop
        ! ip netns list | grep -- "$tag" || exit 1
    )
    # a broker option that stops every broker from starting
    (
        if netns_start 2 -o --no-such-option 2>"$T/err"; then exit 1; fi
        cat "$T/err"
        grep -q 'did not start' "$T/err"
        [ -z "${EDDY_URI:-}" ] && [ -z "$NETNS_DIR" ]
        ! ip netns list | grep -- "$NETNS_TAG" || exit 1
    )
}
