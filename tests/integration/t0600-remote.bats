#!/usr/bin/env bats
# Remote clients: rank 0 listens on TCP (eddy start --listen), clients
# prove they hold the instance token (docs/remote.md).

load helper

setup_file() {
    # The token goes to $XDG_RUNTIME_DIR/eddy: a private one per suite.
    export XDG_RUNTIME_DIR=$BATS_FILE_TMPDIR/xdg
    mkdir -m 700 "$XDG_RUNTIME_DIR"
    start_instance 4 --cores-per-rank=2 --listen=127.0.0.1:0
    TCP_URI=$(cat "$INSTANCE_RUNDIR/tcp-uri")
    PORT=${TCP_URI##*:}
    TOKEN=$XDG_RUNTIME_DIR/eddy/tcp-127.0.0.1-$PORT.token
    LOCAL_URI=$EDDY_URI
    # A directory every uid can read, with a copy of the eddy command, so
    # that a second uid can run it wherever the build tree lives.
    PUBDIR=$(mktemp -d /tmp/eddy-pub.XXXXXX)
    chmod 755 "$PUBDIR"
    cp "$EDDY_BUILD_DIR/eddy" "$PUBDIR/"
    cp -P "$EDDY_BUILD_DIR"/libeddy.so* "$PUBDIR/"
    export TCP_URI PORT TOKEN LOCAL_URI PUBDIR
}

teardown_file() {
    rm -rf "$PUBDIR"
    EDDY_URI=$LOCAL_URI stop_instance
    # rank 0 removed its token at shutdown
    [ ! -e "$TOKEN" ]
}

setup() {
    T=$(mktemp -d "$BATS_TEST_TMPDIR/t.XXXXXX")
}

teardown() {
    local id
    for id in $(EDDY_URI=$LOCAL_URI eddy jobs 2>/dev/null |
                awk 'NR > 1 { print $1 }'); do
        EDDY_URI=$LOCAL_URI eddy job cancel "$id" 2>/dev/null || true
    done
}

as_nobody() {
    setpriv --reuid=65534 --regid=65534 --clear-groups \
        env LD_LIBRARY_PATH="$PUBDIR" "$@"
}

tcp() {
    EDDY_URI=$TCP_URI "$@"
}

@test "rank 0 writes a 0600 token named after the URI, and the URI" {
    [[ "$TCP_URI" == tcp://127.0.0.1:[0-9]* ]]
    [ "$(stat -c '%a %u' "$TOKEN")" = "600 $(id -u)" ]
    [ "$(stat -c '%a' "$XDG_RUNTIME_DIR/eddy")" = 700 ]
    grep -qE '^[0-9a-f]{64}$' "$TOKEN"
}

@test "eddy uri --tcp prints the URI after connecting with the token" {
    run bounded 10 env EDDY_TCP_URI="$TCP_URI" eddy uri --tcp
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$output" = "$TCP_URI" ]
    run bounded 10 env -u EDDY_TCP_URI eddy uri --tcp
    [ "$status" -eq 1 ]
    [[ "$output" == *"does not listen for remote clients"* ]]
}

@test "a tcp client with the token runs ping, exec, run and jobs" {
    run bounded 10 tcp eddy ping -c 2 3
    echo "$output"
    [ "$status" -eq 0 ]
    run bounded 20 tcp eddy exec -r all echo hi
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(grep -c '^hi$' <<<"$output")" -eq 4 ]
    run bounded 30 tcp eddy run -N2 -n4 sh -c 'echo "task $EDDY_TASK_RANK"'
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(grep -c '^task' <<<"$output")" -eq 4 ]
    run bounded 10 tcp eddy jobs -a
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(wc -l <<<"$output")" -ge 2 ]
}

@test "a tcp client ships files with bcast and launches tool daemons" {
    local id
    id=$(tcp eddy submit -N4 -n4 sleep "$(unique_seconds)")
    wait_until 30 bash -c "EDDY_URI=$TCP_URI eddy job proctable $id >/dev/null 2>&1"
    head -c 300000 /dev/urandom >"$T/data"
    run bounded 60 tcp eddy bcast -q "$id" "$T/data" data
    echo "$output"
    [ "$status" -eq 0 ]
    run bounded 30 tcp eddy tool launch "$id" -- sha256sum data
    echo "$output"
    [ "$status" -eq 0 ]
    want=$(sha256sum <"$T/data" | cut -d' ' -f1)
    [ "$(grep -c ": $want  data\$" <<<"$output")" -eq 4 ]
    run bounded 10 tcp eddy job cancel "$id"
    [ "$status" -eq 0 ]
}

@test "no token file: refused before connecting, naming the path" {
    run bounded 10 env EDDY_TOKEN_FILE="$T/none" EDDY_URI="$TCP_URI" \
        eddy ping -c 1 0
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"no token for instance $TCP_URI at $T/none"* ]]
    # default places: $XDG_RUNTIME_DIR/eddy, then ~/.local/state/eddy
    run bounded 10 env XDG_RUNTIME_DIR="$T" HOME="$T/home" \
        EDDY_URI="$TCP_URI" eddy ping -c 1 0
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"no token for instance $TCP_URI at $T/eddy/tcp-127.0.0.1-$PORT.token or $T/home/.local/state/eddy/tcp-127.0.0.1-$PORT.token"* ]]
}

@test "the token is also found under ~/.local/state/eddy" {
    mkdir -p -m 700 "$T/home/.local/state/eddy"
    cp -p "$TOKEN" "$T/home/.local/state/eddy/"
    run bounded 10 env -u XDG_RUNTIME_DIR HOME="$T/home" \
        EDDY_URI="$TCP_URI" eddy ping -c 1 0
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "a wrong token is refused by the broker, which says so" {
    printf '%064d\n' 0 >"$T/wrong"
    chmod 600 "$T/wrong"
    run bounded 10 env EDDY_TOKEN_FILE="$T/wrong" EDDY_URI="$TCP_URI" \
        eddy ping -c 1 0
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"connection refused by broker: wrong token for instance $TCP_URI (token read from $T/wrong)"* ]]
    run bounded 10 tcp eddy dmesg
    [[ "$output" == *"refused tcp client 127.0.0.1:"*"wrong token"* ]]
    # and the right one still works
    run bounded 10 tcp eddy ping -c 1 0
    [ "$status" -eq 0 ]
}

@test "a malformed or group-readable token file is refused" {
    echo nothex >"$T/bad"
    chmod 600 "$T/bad"
    run bounded 10 env EDDY_TOKEN_FILE="$T/bad" EDDY_URI="$TCP_URI" \
        eddy ping -c 1 0
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"token file $T/bad is malformed"* ]]
    cp "$TOKEN" "$T/open"
    chmod 640 "$T/open"
    run bounded 10 env EDDY_TOKEN_FILE="$T/open" EDDY_URI="$TCP_URI" \
        eddy ping -c 1 0
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"token file $T/open may be read by others (mode 0640)"* ]]
    ln -s "$TOKEN" "$T/link"
    run bounded 10 env EDDY_TOKEN_FILE="$T/link" EDDY_URI="$TCP_URI" \
        eddy ping -c 1 0
    [ "$status" -eq 1 ]
    [[ "$output" == *"is a symlink"* ]]
}

@test "another user's token is refused, whoever holds the file" {
    # uid 65534 cannot read our token at all
    run bounded 10 as_nobody env EDDY_TOKEN_FILE="$TOKEN" \
        EDDY_URI="$TCP_URI" "$PUBDIR/eddy" ping -c 1 0
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"cannot read token file $TOKEN: Permission denied (another user's token?)"* ]]
    # a token file that belongs to someone else is not ours to use
    cp -p "$TOKEN" "$T/theirs"
    chown 65534 "$T/theirs"
    run bounded 10 env EDDY_TOKEN_FILE="$T/theirs" EDDY_URI="$TCP_URI" \
        eddy ping -c 1 0
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"token file $T/theirs belongs to uid 65534, not to you (uid $(id -u)): another user's token"* ]]
    # uid 65534 with a token of its own (a copy it owns) is in: the token,
    # not the uid, is the credential over TCP
    cp "$TOKEN" "$PUBDIR/copy"
    chown 65534 "$PUBDIR/copy"
    chmod 600 "$PUBDIR/copy"
    run bounded 10 as_nobody env EDDY_TOKEN_FILE="$PUBDIR/copy" \
        EDDY_URI="$TCP_URI" "$PUBDIR/eddy" ping -c 1 0
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "a silent peer is dropped after 5 s with a message" {
    exec {fd}<>"/dev/tcp/127.0.0.1/$PORT"
    run bounded 15 bash -c "cat <&$fd | strings"
    exec {fd}<&-
    echo "$output"
    [[ "$output" == *"client.challenge"* ]]
    [[ "$output" == *"no answer to the challenge within 5 s"* ]]
    run bounded 10 tcp eddy dmesg
    [[ "$output" == *"no answer to the challenge"* ]]
}

@test "garbage instead of an answer is a protocol error" {
    exec {fd}<>"/dev/tcp/127.0.0.1/$PORT"
    head -c 64 /dev/zero >&"$fd"
    run bounded 10 bash -c "cat <&$fd | strings"
    exec {fd}<&-
    echo "$output"
    [[ "$output" == *"protocol error"* ]]
}

@test "a local:// URI of a tcp instance still works, and bad tcp URIs say why" {
    run bounded 10 eddy ping -c 1 0
    [ "$status" -eq 0 ]
    for u in tcp://127.0.0.1 tcp://:5 tcp://h:0 tcp://h:99999 tcp://h:1x \
             "tcp://[::1:5"; do
        run bounded 10 env EDDY_URI="$u" eddy ping -c 1 0
        echo "$u: $output"
        [ "$status" -eq 1 ]
        [[ "$output" == *"malformed URI"* ]]
    done
    run bounded 10 env EDDY_URI="ftp://x" eddy ping -c 1 0
    [[ "$output" == *"unsupported URI scheme 'ftp' (local:// or tcp://)"* ]]
}

@test "--listen on a port in use fails the start with the broker's reason" {
    run bounded 60 eddy start --listen="127.0.0.1:$PORT" true
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"cannot listen for clients on 127.0.0.1:$PORT"* ]]
}

@test "eddy detect outside any instance: no instance, exit 1" {
    run bounded 10 env -u EDDY_URI -u EDDY_JOB_ID \
        EDDY_SYSTEM_URI="local://$T/none" eddy detect
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"no instance: cannot connect to local://$T/none"* ]]
    [[ "$output" == *"job: none"* ]]
    run bounded 10 env -u EDDY_URI -u EDDY_SYSTEM_URI -u EDDY_JOB_ID \
        eddy detect --json
    [ "$status" -eq 1 ]
    [ "$(jq -r '"\(.reachable) \(.source) \(.uri) \(.in_job)"' <<<"$output")" = \
      "false system local:///run/eddy/local-0 false" ]
    run bounded 10 eddy detect --bogus
    [ "$status" -eq 2 ]
}

@test "eddy detect in the instance, over local:// and tcp://, not in a job" {
    run bounded 10 env -u EDDY_JOB_ID eddy detect --json
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(jq -r '"\(.reachable) \(.source) \(.version) \(.size) \(.in_job)"' \
        <<<"$output")" = "true EDDY_URI $(eddy version | head -1 | awk '{print $NF}') 4 false" ]
    run bounded 10 env -u EDDY_JOB_ID EDDY_URI="$TCP_URI" eddy detect
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"instance: $TCP_URI (EDDY_URI)"* ]]
    [[ "$output" == *"size: 4"* ]]
    # a system instance is used when EDDY_URI is unset
    run bounded 10 env -u EDDY_URI -u EDDY_JOB_ID EDDY_SYSTEM_URI="$TCP_URI" \
        eddy detect --json
    [ "$status" -eq 0 ]
    [ "$(jq -r .source <<<"$output")" = system ]
}

@test "eddy detect inside a job names the job; a stale EDDY_JOB_ID does not count" {
    run bounded 30 eddy run -n1 eddy detect --json
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(jq -r .in_job <<<"$output")" = true ]
    id=$(jq -r .jobid <<<"$output")
    [ "$id" -gt 0 ]
    # the job is over now: its ID no longer means "inside a job"
    run bounded 10 env EDDY_JOB_ID="$id" eddy detect --json
    [ "$status" -eq 0 ]
    [ "$(jq -r .in_job <<<"$output")" = false ]
    # no instance: the environment is all there is
    run bounded 10 env -u EDDY_URI EDDY_JOB_ID=42 \
        EDDY_SYSTEM_URI="local://$T/none" eddy detect
    [ "$status" -eq 1 ]
    [[ "$output" == *"job: 42"* ]]
}

@test "an instance started where EDDY_TOKEN_FILE points at another's token leaves that token alone" {
    cp "$TOKEN" "$T/mine"
    chmod 600 "$T/mine"
    run bounded 30 env EDDY_TOKEN_FILE="$T/mine" \
        eddy start --test-size=1 --listen=127.0.0.1:0 sh -c 'cmp "$0" "$1" && echo same' "$T/mine" "$TOKEN"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *same* ]]
    cmp "$T/mine" "$TOKEN"
    # --token-file is where it goes when asked; removed at shutdown
    run bounded 30 eddy start --test-size=1 --listen=127.0.0.1:0 \
        --token-file="$T/asked" sh -c 'test -s "$0" && echo written' "$T/asked"
    [[ "$output" == *written* ]]
    [ ! -e "$T/asked" ]
}

@test "64 silent connections cannot keep the owner out: the oldest are evicted" {
    # hold 70 connections that never answer, for 4 s, while we connect
    python3 - "$PORT" <<'PY' &
import socket, sys, time
socks = []
for _ in range(70):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.send(b"\xed")  # the first byte of a frame, then nothing
    socks.append(s)
time.sleep(4)
PY
    holder=$!
    sleep 1
    run bounded 10 tcp eddy ping -c 1 0
    echo "$output"
    [ "$status" -eq 0 ]
    wait "$holder"
}
