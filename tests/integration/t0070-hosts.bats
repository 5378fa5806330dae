#!/usr/bin/env bats
# Static hosts-file bootstrap: one `eddy start --hosts --rank` per "host",
# here all on loopback.

load helper

# N free loopback ports (bound then released; the kernel will not hand
# them out again right away).
free_ports() {
    python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

setup() {
    WORK=$(mktemp -d)
}

teardown() {
    for p in ${PIDS:-}; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$WORK"
}

@test "three brokers from a hosts file form one instance" {
    local p0 p1 p2
    read -r p0 p1 p2 <<<"$(free_ports 3)"
    {
        echo "# rank host addr:port"
        echo "0 node0 127.0.0.1:$p0"
        echo "1 node1 127.0.0.1:$p1"
        echo "2 node2 127.0.0.1:$p2"
    } >"$WORK/hosts"
    eddy start --write-key="$WORK/key"
    [ "$(stat -c %a "$WORK/key")" = 600 ]
    PIDS=""
    for r in 1 2; do
        bounded 120 eddy start --hosts="$WORK/hosts" --rank=$r \
            --key="$WORK/key" --rundir="$WORK/run$r" \
            >"$WORK/out$r" 2>&1 3>&- &
        PIDS="$PIDS $!"
    done
    run bounded 60 eddy start --hosts="$WORK/hosts" --rank=0 \
        --key="$WORK/key" --rundir="$WORK/run0" \
        sh -c 'eddy exec -n -l -r all sh -c "echo \$EDDY_BROKER_RANK"; eddy overlay status'
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"0: 0"* ]]
    [[ "$output" == *"1: 1"* ]]
    [[ "$output" == *"2: 2"* ]]
    [[ "$output" == *"node2: up"* ]]
    [[ "$output" == *"lost: none"* ]]
    # The other hosts' eddy start exit 0 once the instance shuts down.
    for p in $PIDS; do
        wait "$p"
    done
    PIDS=""
}

@test "a malformed hosts file is refused naming the line" {
    printf '0 node0 127.0.0.1:1\n1 node1 nonsense\n' >"$WORK/hosts"
    eddy start --write-key="$WORK/key"
    run bounded 20 eddy start --hosts="$WORK/hosts" --rank=0 \
        --key="$WORK/key" true
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"line 2"* ]]
}

@test "--hosts without a key is refused" {
    printf '0 node0 127.0.0.1:1\n' >"$WORK/hosts"
    run eddy start --hosts="$WORK/hosts" --rank=0 true
    [ "$status" -eq 1 ]
    [[ "$output" == *"--hosts needs --key"* ]]
}
