#!/usr/bin/env bats
# eddy bcast: a file shipped to every node of a job, checked byte for byte
# on each node against the source; sizes around the chunk size, a large
# file, a sparse file whose holes stay holes; -p, -f, -z, -r; relative
# and absolute destinations; refusals; per-node failures that leave the
# other nodes complete; nothing partial left behind.

load helper

setup_file() {
    start_instance 4 --cores-per-rank=4
    export BCAST_SRC=$BATS_FILE_TMPDIR/src
    mkdir -p "$BCAST_SRC"
}

teardown_file() {
    stop_instance
}

setup() {
    T=$(mktemp -d "$BATS_TEST_TMPDIR/t.XXXXXX")
    S=$(unique_seconds)
    # a job on all 4 nodes, one task each, that just waits
    ID=$(eddy submit -N4 -n4 sleep "$S")
    wait_until 30 bash -c "eddy job proctable $ID >/dev/null 2>&1"
}

teardown() {
    local id
    for id in $(eddy jobs 2>/dev/null | awk 'NR > 1 { print $1 }'); do
        eddy job cancel "$id" 2>/dev/null || true
    done
    check_no_job_processes
}

# "NODE TMPDIR" per node of job $1, from its tasks' environments.
tmpdirs() {
    local node pid
    eddy job proctable --json "$1" | jq -r '.[] | "\(.node) \(.pid)"' |
        while read -r node pid; do
            echo "$node $(tr '\0' '\n' <"/proc/$pid/environ" |
                sed -n 's/^EDDY_JOB_TMPDIR=//p')"
        done | sort -un
}

# check_copies ID SRC REL: every node's tmpdir has REL with SRC's bytes
# and no temp file is left beside it.
check_copies() {
    local id=$1 src=$2 rel=$3 node dir want
    want=$(sha256sum <"$src" | cut -d' ' -f1)
    tmpdirs "$id" >"$T/dirs"
    [ "$(wc -l <"$T/dirs")" -eq 4 ]
    while read -r node dir; do
        [ -n "$dir" ] && [ -f "$dir/$rel" ] || {
            echo "node $node: no $dir/$rel"
            return 1
        }
        [ "$(sha256sum <"$dir/$rel" | cut -d' ' -f1)" = "$want" ] || {
            echo "node $node: $dir/$rel differs"
            return 1
        }
        ! ls -a "$(dirname "$dir/$rel")" | grep -q '\.eddy-' || {
            echo "node $node: temp file left"
            return 1
        }
    done <"$T/dirs"
}

@test "sizes around the chunk size: 0, 1, chunk-1, chunk, chunk+1 bytes" {
    local n
    for n in 0 1 65535 65536 65537 200000; do
        head -c "$n" /dev/urandom >"$T/f$n"
        run bounded 60 eddy bcast -q --chunksize=64k "$ID" "$T/f$n" "f$n"
        echo "$output"
        [ "$status" -eq 0 ]
        check_copies "$ID" "$T/f$n" "f$n"
    done
}

@test "200 MiB to 4 nodes, and again compressed (-z) over it (-f)" {
    head -c $((200 << 20)) /dev/urandom >"$T/big"
    run bounded 120 eddy bcast -q "$ID" "$T/big" big
    [ "$status" -eq 0 ]
    check_copies "$ID" "$T/big" big
    # compressible data, -z, replacing the first copy
    yes "a line that repeats itself" | head -c $((64 << 20)) >"$T/big"
    run bounded 120 eddy bcast -q -z -f "$ID" "$T/big" big
    [ "$status" -eq 0 ]
    check_copies "$ID" "$T/big" big
}

@test "a sparse 1 GiB file: holes are not sent and stay holes" {
    truncate -s 1G "$T/sparse"
    printf 'start' | dd of="$T/sparse" conv=notrunc status=none
    printf 'middle' | dd of="$T/sparse" bs=1 seek=$((512 << 20)) conv=notrunc status=none
    printf 'end' | dd of="$T/sparse" bs=1 seek=$(((1 << 30) - 3)) conv=notrunc status=none
    run bounded 120 eddy bcast -q "$ID" "$T/sparse" sparse
    [ "$status" -eq 0 ]
    check_copies "$ID" "$T/sparse" sparse
    while read -r node dir; do
        [ "$(stat -c %s "$dir/sparse")" -eq $((1 << 30)) ]
        # a few KiB of blocks, not a GiB
        [ "$(du -k "$dir/sparse" | cut -f1)" -lt 1024 ]
    done <"$T/dirs"
}

@test "stdin as the source, subdirectories, a DEST ending in /" {
    head -c 300000 /dev/urandom >"$T/data"
    while read -r node dir; do mkdir "$dir/sub"; done < <(tmpdirs "$ID")
    run bounded 60 eddy bcast -q "$ID" - sub/fromstdin <"$T/data"
    [ "$status" -eq 0 ]
    check_copies "$ID" "$T/data" sub/fromstdin
    run bounded 60 eddy bcast -q "$ID" "$T/data" sub/
    [ "$status" -eq 0 ]
    check_copies "$ID" "$T/data" sub/data
}

@test "-p keeps mode and mtime; without it the mode is the umask's" {
    head -c 1000 /dev/urandom >"$T/tool"
    chmod 0751 "$T/tool"
    touch -d '2001-02-03 04:05:06' "$T/tool"
    run bounded 60 eddy bcast -q -p "$ID" "$T/tool" tool
    [ "$status" -eq 0 ]
    run bounded 60 eddy bcast -q "$ID" "$T/tool" plain
    [ "$status" -eq 0 ]
    while read -r node dir; do
        [ "$(stat -c %a "$dir/tool")" = 751 ]
        [ "$(stat -c %Y "$dir/tool")" = "$(stat -c %Y "$T/tool")" ]
        [ "$(stat -c %a "$dir/plain")" = "$(printf '%o' $((0666 & ~$(umask))))" ]
    done < <(tmpdirs "$ID")
}

@test "an existing destination is an error on each node without -f" {
    echo one >"$T/one"
    echo two >"$T/two"
    run bounded 60 eddy bcast -q "$ID" "$T/one" same
    [ "$status" -eq 0 ]
    run bounded 60 eddy bcast -q "$ID" "$T/two" same
    echo "$output"
    [ "$status" -eq 1 ]
    [ "$(grep -c 'eddy bcast: node [0-3]: .*same already exists' <<<"$output")" -eq 4 ]
    check_copies "$ID" "$T/one" same
    run bounded 60 eddy bcast -q -f "$ID" "$T/two" same
    [ "$status" -eq 0 ]
    check_copies "$ID" "$T/two" same
}

@test "-r ships to some nodes only; an absolute destination" {
    echo hello >"$T/h"
    run bounded 60 eddy bcast -q -r 1,3 "$ID" "$T/h" some
    [ "$status" -eq 0 ]
    while read -r node dir; do
        if [ "$node" = 1 ] || [ "$node" = 3 ]; then
            [ -f "$dir/some" ]
        else
            [ ! -e "$dir/some" ]
        fi
    done < <(tmpdirs "$ID")
    run bounded 60 eddy bcast -q -r 2 "$ID" "$T/h" "$T/abs"
    [ "$status" -eq 0 ]
    [ "$(cat "$T/abs")" = hello ]
    run bounded 60 eddy bcast -q -r 9 "$ID" "$T/h" x
    [ "$status" -eq 1 ]
    [[ "$output" == *"node 9 does not run job $ID"* ]]
}

@test "refused: '..', an unknown or ended job, an unreadable or directory source" {
    echo x >"$T/x"
    run bounded 30 eddy bcast -q "$ID" "$T/x" ../escape
    [ "$status" -eq 1 ]
    [[ "$output" == *"may not leave the job tmpdir"* ]]
    run bounded 30 eddy bcast -q "$ID" "$T/x" a/../../escape
    [ "$status" -eq 1 ]
    run bounded 30 eddy bcast -q 999999 "$T/x" x
    [ "$status" -eq 1 ]
    [[ "$output" == *"999999"*"no such job"* ]]
    run bounded 30 eddy bcast -q "$ID" "$T/missing" x
    [ "$status" -eq 1 ]
    [[ "$output" == *"$T/missing: No such file or directory"* ]]
    mkfifo "$T/fifo"
    run bounded 30 eddy bcast -q "$ID" "$T/x" "$T/fifo" x
    [ "$status" -eq 1 ]
    [[ "$output" == *"$T/fifo"* ]]
    done_id=$(eddy submit -n1 true)
    eddy job wait "$done_id"
    run bounded 30 eddy bcast -q "$done_id" "$T/x" x
    [ "$status" -eq 1 ]
    [[ "$output" == *"has ended"* ]]
}

@test "one node cannot write: it reports why, the others complete" {
    echo data >"$T/d"
    tmpdirs "$ID" >"$T/dirs"
    # on node 2 'sub' is a file; on node 3 'sub' is a symlink out of the tmpdir
    while read -r node dir; do
        case $node in
        2) echo notadir >"$dir/sub" ;;
        3) ln -s "$T" "$dir/sub" ;;
        *) mkdir "$dir/sub" ;;
        esac
    done <"$T/dirs"
    run bounded 60 eddy bcast -q "$ID" "$T/d" sub/d
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"node 2: "*"Not a directory"* ]]
    [[ "$output" == *"node 3: "*"symbolic link"* ]] || [[ "$output" == *"node 3: "*"Too many levels"* ]]
    [ "$(grep -c '^eddy bcast: node' <<<"$output")" -eq 2 ]
    # nothing was written through node 3's symlink
    [ "$(ls -A "$T" | sort | tr '\n' ' ')" = "d dirs " ]
    while read -r node dir; do
        if [ "$node" -le 1 ]; then
            [ "$(cat "$dir/sub/d")" = data ]
        fi
    done <"$T/dirs"
}

@test "a corrupted chunk (test hook): checksum mismatch on that node, nothing renamed" {
    # a second instance whose rank 2 corrupts what it writes
    local saved_uri=$EDDY_URI saved_pid=$INSTANCE_PID saved_tmp=$INSTANCE_TMP \
        saved_rundir=$INSTANCE_RUNDIR
    EDDY_TEST_BCAST_CORRUPT_RANK=2 start_instance 4 --cores-per-rank=4
    local s id
    s=$(unique_seconds)
    id=$(eddy submit -N4 -n4 sleep "$s")
    wait_until 30 bash -c "eddy job proctable $id >/dev/null 2>&1"
    head -c 100000 /dev/urandom >"$T/c"
    run bounded 60 eddy bcast -q "$id" "$T/c" c
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"node 2: "*"checksum mismatch"* ]]
    [ "$(grep -c '^eddy bcast: node' <<<"$output")" -eq 1 ]
    while read -r node dir; do
        if [ "$node" = 2 ]; then
            [ ! -e "$dir/c" ]
            [ -z "$(ls -A "$dir")" ]
        else
            cmp "$T/c" "$dir/c"
        fi
    done < <(tmpdirs "$id")
    eddy job cancel "$id"
    check_no_job_processes
    stop_instance
    EDDY_URI=$saved_uri INSTANCE_PID=$saved_pid INSTANCE_TMP=$saved_tmp \
        INSTANCE_RUNDIR=$saved_rundir
    export EDDY_URI INSTANCE_PID INSTANCE_TMP INSTANCE_RUNDIR
}

# killed_sender RANK: a sender connected to broker RANK, with a session
# timeout far longer than the test's wait, is killed mid-transfer
killed_sender() {
    local rank=$1 feeder sender
    mkfifo "$T/fifo.$rank"
    ( (head -c $((3 << 20)) /dev/zero; sleep 60) >"$T/fifo.$rank" ) &
    feeder=$!
    EDDY_URI=${EDDY_URI%-*}-$rank eddy bcast -q --timeout=300 "$ID" - partial \
        <"$T/fifo.$rank" &
    sender=$!
    tmpdirs "$ID" >"$T/dirs"
    # wait until every node has a temp file, then kill the sender
    wait_until 30 bash -c "[ \$(cat $T/dirs | while read n d; do ls -A \$d; done | grep -c '\.eddy-') -eq 4 ]"
    kill -9 "$sender"
    wait "$sender" || true
    # gone within seconds, not after the session's 300 s timeout
    wait_until 10 bash -c "[ \$(cat $T/dirs | while read n d; do ls -A \$d; done | grep -c '\.eddy-') -eq 0 ]"
    while read -r node dir; do
        [ ! -e "$dir/partial" ]
    done <"$T/dirs"
    pkill -P "$feeder" 2>/dev/null || true
    kill "$feeder" 2>/dev/null || true
    wait "$feeder" 2>/dev/null || true
}

@test "shared slots on one host, the socket where a broker refuses them (test hook)" {
    # brokers of one machine pass chunk bytes through shared memory; a rank
    # in the hook's set takes them over the socket, as between hosts:
    # rank 3 alone (rank 1 forwards what it mapped over the socket), then
    # every rank (the socket path only)
    local saved_uri=$EDDY_URI saved_pid=$INSTANCE_PID saved_tmp=$INSTANCE_TMP \
        saved_rundir=$INSTANCE_RUNDIR hook id s
    head -c $((5 << 20)) /dev/urandom >"$T/r"
    yes "a line that repeats itself" | head -c $((3 << 20)) >"$T/z"
    for hook in 3 0-3; do
        EDDY_TEST_BCAST_NOSHM_RANKS=$hook start_instance 4 --cores-per-rank=4
        s=$(unique_seconds)
        id=$(eddy submit -N4 -n4 sleep "$s")
        wait_until 30 bash -c "eddy job proctable $id >/dev/null 2>&1"
        run bounded 60 eddy bcast -q --chunksize=256k "$id" "$T/r" r
        echo "$output"
        [ "$status" -eq 0 ]
        check_copies "$id" "$T/r" r
        run bounded 60 eddy bcast -q -z --chunksize=256k "$id" "$T/z" z
        echo "$output"
        [ "$status" -eq 0 ]
        check_copies "$id" "$T/z" z
        eddy job cancel "$id"
        check_no_job_processes
        stop_instance
    done
    EDDY_URI=$saved_uri INSTANCE_PID=$saved_pid INSTANCE_TMP=$saved_tmp \
        INSTANCE_RUNDIR=$saved_rundir
    export EDDY_URI INSTANCE_PID INSTANCE_TMP INSTANCE_RUNDIR
}

@test "the sender killed mid-transfer: no temp file anywhere, nothing at DEST" {
    killed_sender 0
}

@test "a sender on another broker killed mid-transfer: its broker aborts the session" {
    killed_sender 2
}

@test "the job ends during the transfer: a clear error" {
    mkfifo "$T/fifo"
    ( (head -c $((2 << 20)) /dev/zero; sleep 3; head -c 1000 /dev/zero) >"$T/fifo" ) &
    feeder=$!
    eddy bcast -q "$ID" - late <"$T/fifo" >"$T/out" 2>&1 &
    sender=$!
    sleep 1
    eddy job cancel "$ID"
    rc=0
    wait_until 60 bash -c "! kill -0 $sender 2>/dev/null" || kill -9 "$sender"
    wait "$sender" || rc=$?
    cat "$T/out"
    [ "$rc" -ne 0 ]
    grep -Eq "ended during the transfer|not running|has ended|no such session|aborted" "$T/out"
    wait "$feeder" 2>/dev/null || true
}

@test "a job held at its startup barrier, and from inside the job" {
    local held
    held=$(eddy submit --stop=fork -N4 -n4 sh -c 'cat "$EDDY_JOB_TMPDIR/note"')
    wait_until 30 bash -c "eddy job info --json $held | jq -e '.barrier.held == 4' >/dev/null"
    echo "shipped before release" >"$T/note"
    run bounded 60 eddy bcast -q "$held" "$T/note" note
    [ "$status" -eq 0 ]
    eddy job release "$held"
    run bounded 60 eddy job attach -n "$held"
    [ "$status" -eq 0 ]
    [ "$(grep -c '^shipped before release$' <<<"$output")" -eq 4 ]
    # a task of the job ships a file to all nodes of its own job; every
    # task waits for it and prints it
    echo "from a task" >"$T/inner"
    run bounded 60 eddy run -N4 -n4 sh -c \
        "if [ \$EDDY_TASK_RANK = 0 ]; then eddy bcast -q \$EDDY_JOB_ID $T/inner inner || exit 1; fi
         while [ ! -e \$EDDY_JOB_TMPDIR/inner ]; do sleep 0.05; done
         cat \$EDDY_JOB_TMPDIR/inner"
    [ "$status" -eq 0 ]
    [ "$(grep -c '^from a task$' <<<"$output")" -eq 4 ]
}

@test "one node's disk is full: it reports ENOSPC, the others complete" {
    tmpdirs "$ID" >"$T/dirs"
    while read -r node dir; do
        mkdir "$dir/small"
        [ "$node" = 2 ] && mount -t tmpfs -o size=256k tmpfs "$dir/small"
    done <"$T/dirs"
    head -c $((1 << 20)) /dev/urandom >"$T/m"
    run bounded 60 eddy bcast -q "$ID" "$T/m" small/m
    echo "$output"
    while read -r node dir; do
        if [ "$node" = 2 ]; then
            [ -z "$(ls -A "$dir/small")" ] || { ls -la "$dir/small"; umount "$dir/small"; false; }
            umount "$dir/small"
        else
            cmp "$T/m" "$dir/small/m"
        fi
    done <"$T/dirs"
    [ "$status" -eq 1 ]
    [[ "$output" == *"node 2: "*"No space left on device"* ]]
    [ "$(grep -c '^eddy bcast: node' <<<"$output")" -eq 1 ]
}

@test "a broker in the middle of the tree dies mid-transfer: its subtree fails, the rest complete" {
    local saved_uri=$EDDY_URI saved_pid=$INSTANCE_PID saved_tmp=$INSTANCE_TMP \
        saved_rundir=$INSTANCE_RUNDIR
    start_instance 8 --cores-per-rank=2 -o --heartbeat=0.2 -o --heartbeat-timeout=3
    local s id pid1 sender
    s=$(unique_seconds)
    id=$(eddy submit -N8 -n8 sleep "$s")
    wait_until 30 bash -c "eddy job proctable $id >/dev/null 2>&1"
    pid1=$(eddy exec -n -r 1 sh -c 'echo $PPID')
    mkfifo "$T/fifo"
    ( (head -c $((2 << 20)) /dev/urandom; sleep 2; head -c $((2 << 20)) /dev/urandom) >"$T/fifo" ) &
    # an absolute destination: the same file for every node of this
    # machine, so -f; it outlives the job, which loses its nodes
    eddy bcast -q -f "$id" - "$T/abs" <"$T/fifo" >"$T/out" 2>&1 &
    sender=$!
    sleep 1
    kill -9 "$pid1"
    wait_until 60 bash -c "! kill -0 $sender 2>/dev/null"
    rc=0
    wait "$sender" || rc=$?
    cat "$T/out"
    [ "$rc" -eq 1 ]
    # fanout 2: rank 1's subtree is 1, 3, 4, 7
    for r in 1 3 4 7; do
        grep -q "^eddy bcast: node $r: " "$T/out"
    done
    [ "$(grep -c '^eddy bcast: node' "$T/out")" -eq 4 ]
    [ "$(stat -c %s "$T/abs")" -eq $((4 << 20)) ]
    eddy job cancel "$id" 2>/dev/null || true
    bounded 30 eddy job wait "$id" || true
    check_no_job_processes 30
    stop_instance 1
    EDDY_URI=$saved_uri INSTANCE_PID=$saved_pid INSTANCE_TMP=$saved_tmp \
        INSTANCE_RUNDIR=$saved_rundir
    export EDDY_URI INSTANCE_PID INSTANCE_TMP INSTANCE_RUNDIR
}

# "PATH MODE TYPE LINK" for everything below directory $1
listing() {
    (cd "$1" && find . -mindepth 1 -printf '%P %m %y %l\n' | sort)
}

@test "a directory tree: files, subdirectories, symlinks, modes; whole or not at all" {
    mkdir -p "$T/tree/bin" "$T/tree/share/doc" "$T/tree/empty"
    head -c 300000 /dev/urandom >"$T/tree/bin/tool"
    chmod 0755 "$T/tree/bin/tool"
    echo "readme" >"$T/tree/share/doc/README"
    chmod 0640 "$T/tree/share/doc/README"
    ln -s ../bin/tool "$T/tree/share/tool-link"
    ln -s /etc/hostname "$T/tree/outside-link"
    run bounded 60 eddy bcast -q -p "$ID" "$T/tree" bundle
    echo "$output"
    [ "$status" -eq 0 ]
    listing "$T/tree" >"$T/want"
    while read -r node dir; do
        listing "$dir/bundle" | diff "$T/want" -
        cmp "$T/tree/bin/tool" "$dir/bundle/bin/tool"
        [ "$(readlink "$dir/bundle/outside-link")" = /etc/hostname ]
        # no archive or temp directory left beside it
        [ "$(ls -A "$dir" | grep -c eddy)" -eq 0 ]
    done < <(tmpdirs "$ID")
    # again without -f: refused on every node, the first copy intact
    echo changed >"$T/tree/share/doc/README"
    run bounded 60 eddy bcast -q -p "$ID" "$T/tree" bundle
    [ "$status" -eq 1 ]
    [ "$(grep -c '^eddy bcast: node' <<<"$output")" -eq 4 ]
    while read -r node dir; do
        [ "$(cat "$dir/bundle/share/doc/README")" = readme ]
    done < <(tmpdirs "$ID")
    # with -f: replaced whole
    run bounded 60 eddy bcast -q -p -f "$ID" "$T/tree" bundle
    [ "$status" -eq 0 ]
    while read -r node dir; do
        [ "$(cat "$dir/bundle/share/doc/README")" = changed ]
    done < <(tmpdirs "$ID")
}

@test "several sources make one directory holding each by name" {
    echo a >"$T/a"
    mkdir "$T/d"
    echo b >"$T/d/b"
    run bounded 60 eddy bcast -q "$ID" "$T/a" "$T/d" pack/
    [ "$status" -eq 0 ]
    while read -r node dir; do
        [ "$(cat "$dir/pack/a")" = a ]
        [ "$(cat "$dir/pack/d/b")" = b ]
    done < <(tmpdirs "$ID")
    # two sources with the same name are refused before anything is sent
    mkdir "$T/other"
    echo x >"$T/other/a"
    run bounded 60 eddy bcast -q "$ID" "$T/a" "$T/other/a" twice
    [ "$status" -eq 1 ]
    [[ "$output" == *"$T/a"* ]]
}

@test "a progress line on a terminal (bytes, rate), none with -q or off a terminal" {
    head -c $((8 << 20)) /dev/urandom >"$T/p"
    run bounded 60 script -qec "eddy bcast --chunksize=64k $ID $T/p p1" /dev/null
    [ "$status" -eq 0 ]
    [[ "$output" == *"8.0 MiB / 8.0 MiB"*"/s"* ]]
    run bounded 60 script -qec "eddy bcast -q $ID $T/p p2" /dev/null
    [ "$status" -eq 0 ]
    [[ "$output" != *"MiB"* ]]
    run bounded 60 eddy bcast "$ID" "$T/p" p3
    [ "$status" -eq 0 ]
    [ -z "$output" ]
}
