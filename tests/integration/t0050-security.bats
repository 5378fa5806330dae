#!/usr/bin/env bats
# Only the instance owner gets in; brokers must hold the instance key.

load helper

setup_file() {
    start_instance 2
    # A directory every uid can read, with a copy of the eddy command, so
    # that a second uid can run it wherever the build tree lives.
    PUBDIR=$(mktemp -d /tmp/eddy-pub.XXXXXX)
    chmod 755 "$PUBDIR"
    cp "$EDDY_BUILD_DIR/eddy" "$PUBDIR/"
    cp -P "$EDDY_BUILD_DIR"/libeddy.so* "$PUBDIR/"
    export PUBDIR
}

teardown_file() {
    rm -rf "$PUBDIR"
    stop_instance
}

as_nobody() {
    setpriv --reuid=65534 --regid=65534 --clear-groups \
        env LD_LIBRARY_PATH="$PUBDIR" "$@"
}

@test "the run directory is 0700 and the key 0600, owned by the owner" {
    [ "$(stat -c '%a %u' "$INSTANCE_RUNDIR")" = "700 $(id -u)" ]
    [ "$(stat -c '%a %u' "$INSTANCE_RUNDIR/key")" = "600 $(id -u)" ]
    [ -S "$INSTANCE_RUNDIR/local-0" ]
}

@test "another uid cannot reach the socket and is told why" {
    run bounded 10 as_nobody "$PUBDIR/eddy" ping -c 1 0
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"Permission denied"* ]]
    [[ "$output" == *"only its owner may use it"* ]]
}

@test "another uid that reaches the socket is refused by SO_PEERCRED" {
    # Give uid 65534 a path to the socket with a bind mount in a private
    # mount namespace, and write permission on the socket itself (the 0700
    # directory still guards it), so only the broker's credential check
    # stands in the way.
    chmod 666 "$INSTANCE_RUNDIR/local-0"
    run bounded 20 unshare -m sh -c '
        touch "$PUBDIR/sock" &&
        mount --bind "$INSTANCE_RUNDIR/local-0" "$PUBDIR/sock" &&
        setpriv --reuid=65534 --regid=65534 --clear-groups \
            env LD_LIBRARY_PATH="$PUBDIR" EDDY_URI="local://$PUBDIR/sock" \
            "$PUBDIR/eddy" ping -c 1 0'
    chmod 600 "$INSTANCE_RUNDIR/local-0"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"uid 65534 is not the instance owner (uid $(id -u))"* ]]
    rm -f "$PUBDIR/sock"
    # The broker logged the refusal and still serves its owner.
    run bounded 10 eddy dmesg
    [[ "$output" == *"refused client uid 65534"* ]]
    run bounded 10 eddy ping -c 1 1
    [ "$status" -eq 0 ]
}

# The TCP port rank 0 listens on for its children.
rank0_port() {
    local pid
    pid=$(eddy exec -n -r 0 sh -c 'echo $PPID')
    ss -Htlnp | awk -v p="pid=$pid," 'index($0, p) {print $4}' |
        sed 's/.*://' | head -n 1
}

@test "a broker with the wrong key cannot join" {
    local port dir
    port=$(rank0_port)
    [ -n "$port" ]
    dir=$(mktemp -d)
    eddy start --write-key="$dir/key"
    run bounded 20 "$EDDY_BUILD_DIR/eddy-broker" --rank=1 --size=2 \
        --rundir="$dir" --key="$dir/key" --parent="127.0.0.1:$port"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"authentication"* ]]
    run bounded 10 eddy dmesg
    [[ "$output" == *"rejected broker"*"wrong key"* ]]
    # The real rank 1 is still there.
    run bounded 10 eddy ping -c 1 1
    [ "$status" -eq 0 ]
    rm -rf "$dir"
}

@test "a broker with the right key cannot take a rank that is taken" {
    local port dir
    port=$(rank0_port)
    dir=$(mktemp -d)
    cp "$INSTANCE_RUNDIR/key" "$dir/key"
    run bounded 20 "$EDDY_BUILD_DIR/eddy-broker" --rank=1 --size=2 \
        --rundir="$dir" --key="$dir/key" --parent="127.0.0.1:$port"
    [ "$status" -eq 1 ]
    run bounded 10 eddy dmesg
    [[ "$output" == *"rejected broker"*"rank 1"* ]]
    run bounded 10 eddy ping -c 1 1
    [ "$status" -eq 0 ]
    rm -rf "$dir"
}

@test "the broker refuses a key file others can read" {
    local dir
    dir=$(mktemp -d)
    eddy start --write-key="$dir/key"
    chmod 644 "$dir/key"
    run bounded 10 "$EDDY_BUILD_DIR/eddy-broker" --rank=0 --size=1 \
        --rundir="$dir" --key="$dir/key"
    [ "$status" -eq 1 ]
    [[ "$output" == *"$dir/key"* ]]
    rm -rf "$dir"
}
