#!/usr/bin/env bats
# kvs.fence: the key exchange of a job's shells as a tree collective over
# 16 brokers (fanout 2): all ranks, a sparse set without rank 0, a single
# rank, duplicate keys, no keys, a participant killed mid-fence.  The
# records travel as raw payload (docs/kvs-fence.md).

load helper

setup_file() {
    start_instance 16
}

teardown_file() {
    stop_instance
}

setup() {
    T=$(mktemp -d "$BATS_TEST_TMPDIR/t.XXXXXX")
}

uri_of() {
    echo "${EDDY_URI%-*}-$1"
}

# Expand an idset like "3,7,12-15" into ranks.
expand() {
    local part
    for part in ${1//,/ }; do
        if [[ $part == *-* ]]; then seq "${part%-*}" "${part#*-}"
        else echo "$part"; fi
    done
}

# fence ID SEQ RANKS NKEYS [VALSIZE [DUPKEY]]: one client per rank at once;
# outputs in $T/out.R, statuses in $T/rc.R.
fence() {
    local id=$1 seq=$2 ranks=$3 r
    shift 3
    export EDDY_FENCE_START_NS
    for r in $(expand "$ranks"); do
        ( rc=0
          EDDY_URI=$(uri_of "$r") bounded 60 eddy-fence-client \
              "$id" "$seq" "$ranks" "$@" >"$T/out.$r" 2>&1 || rc=$?
          echo $rc >"$T/rc.$r" ) &
    done
    wait
}

check_all_keys() {
    local ranks=$1 nkeys=$2 n r
    n=$(expand "$ranks" | wc -l)
    for r in $(expand "$ranks"); do
        cat "$T/out.$r"
        [ "$(cat "$T/rc.$r")" -eq 0 ]
        grep -qx "keys $((n * nkeys)) bytes $((n * nkeys * 1024))" \
            "$T/out.$r"
    done
}

@test "fence over all 16 brokers: every client gets every key" {
    local r ms max=0
    # every client connects first, then all send at the same instant
    EDDY_FENCE_START_NS=$(( $(date +%s%N) + 3000000000 )) \
        fence 1 1 0-15 64
    check_all_keys 0-15 64
    for r in $(seq 0 15); do
        ms=$(sed -n 's/^ms //p' "$T/out.$r")
        max=$(echo "$ms $max" | awk '{print ($1 > $2) ? $1 : $2}')
    done
    echo "# fence of 16 brokers x 64 keys x 1 KiB (1 MiB): ${max} ms" >&3
}

@test "successive fences of a job work, a repeated seq is refused" {
    fence 2 1 0-15 4
    check_all_keys 0-15 4
    fence 2 2 0-15 4
    check_all_keys 0-15 4
    EDDY_URI=$(uri_of 5) run bounded 10 eddy-fence-client 2 2 0-15 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"error: 22: "*"fence 2 out of order"* ]]
}

@test "sparse ranks without rank 0: 3,7,12-15" {
    fence 3 1 3,7,12-15 64
    check_all_keys 3,7,12-15 64
}

@test "a single rank" {
    fence 4 1 9 64
    check_all_keys 9 64
}

@test "a duplicate key fails the fence for every client with EEXIST" {
    local r
    # the brokers pass the records through; every client gets the same
    # bytes and finds the key twice, as the shells do
    fence 5 1 0-15 8 1024 samekey
    for r in $(seq 0 15); do
        cat "$T/out.$r"
        [ "$(cat "$T/rc.$r")" -eq 1 ]
        grep -qx "error: 17: key 'samekey' put twice" "$T/out.$r"
    done
}

@test "empty contributions: a fence with no keys at all" {
    fence 8 1 0-15 0
    check_all_keys 0-15 0
}

@test "a client killed mid-fence: the others get an error naming it" {
    local r pid
    # rank 6 sends and is killed; rank 15 joins only afterwards, so the
    # fence cannot have completed
    EDDY_URI=$(uri_of 6) eddy-fence-client 6 1 0-15 4 >"$T/out.6" &
    pid=$!
    wait_until 10 grep -qx sent "$T/out.6"
    for r in $(seq 0 14); do
        [ "$r" -eq 6 ] && continue
        ( rc=0; EDDY_URI=$(uri_of "$r") bounded 30 eddy-fence-client \
              6 1 0-15 4 >"$T/out.$r" 2>&1 || rc=$?; echo $rc >"$T/rc.$r" ) &
    done
    kill -9 "$pid"
    wait "$pid" || true
    ( rc=0; EDDY_URI=$(uri_of 15) bounded 30 eddy-fence-client 6 1 0-15 4 \
          >"$T/out.15" 2>&1 || rc=$?; echo $rc >"$T/rc.15" ) &
    wait
    for r in $(seq 0 15); do
        [ "$r" -eq 6 ] && continue
        cat "$T/out.$r"
        [ "$(cat "$T/rc.$r")" -eq 1 ]
        grep -q "error: .*rank 6: the shell disconnected" "$T/out.$r"
    done
}

@test "bad requests are refused with the culprit named" {
    EDDY_URI=$(uri_of 2) run bounded 10 eddy-fence-client 7 1 3,4 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"error: 22: "*"rank 2 is neither in the job nor above it"* ]]
    EDDY_URI=$(uri_of 2) run bounded 10 eddy-fence-client 7 1 2,99 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"error: 22: "*"rank 99 is not in the instance"* ]]
}
