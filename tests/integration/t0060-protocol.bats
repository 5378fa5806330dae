#!/usr/bin/env bats
# Hostile clients: garbage, half frames, oversized frames.  Each is
# dropped and the broker keeps serving everyone else.

load helper

setup_file() {
    start_instance 2
}

teardown_file() {
    stop_instance
}

# send_raw HEX [HOLD]: connect to rank 0, read the greeting, send the bytes
# and report whether the broker closed the connection ("closed") or not
# ("open") within 5 seconds.  With HOLD=close, just close after sending.
send_raw() {
    python3 - "$INSTANCE_RUNDIR/local-0" "$1" "${2:-wait}" <<'PY'
import socket, sys, time
path, data, mode = sys.argv[1], bytes.fromhex(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
s.settimeout(5)
greeting = s.recv(65536)
assert greeting[0] == 0xED, "no greeting"
s.sendall(data)
if mode == "close":
    s.close()
    print("sent")
    sys.exit(0)
try:
    while True:
        b = s.recv(65536)
        if not b:
            print("closed")
            break
except socket.timeout:
    print("open")
PY
}

@test "garbage bytes get the client dropped" {
    run bounded 20 send_raw "$(head -c 200 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    [ "$output" = "closed" ]
    run bounded 10 eddy ping -c 1 1
    [ "$status" -eq 0 ]
}

@test "a frame announcing more than the limit is dropped before its body" {
    # magic, version 1, request, no flags, tag 1, rank 0, errnum 0,
    # topic_len 4, reserved 0, body_len 0x7fffffff, payload 0
    local hdr=ed010100000000010000000000000000
    run bounded 20 send_raw "${hdr}000400007fffffff00000000"
    [ "$output" = "closed" ]
    run bounded 10 eddy dmesg
    [[ "$output" == *"protocol error"* ]]
    run bounded 10 eddy ping -c 1 1
    [ "$status" -eq 0 ]
}

@test "a half frame and a vanished client leave the broker serving" {
    run bounded 20 send_raw "ed010100000000010000" close
    [ "$output" = "sent" ]
    run bounded 10 eddy ping -c 1 0
    [ "$status" -eq 0 ]
    run bounded 10 eddy ping -c 1 1
    [ "$status" -eq 0 ]
}

@test "a wrong protocol version is refused" {
    run bounded 20 send_raw "ed02010000000001000000000000000000040000000000000000000062726f6b"
    [ "$output" = "closed" ]
}

@test "a valid frame with an unknown topic gets ENOSYS, connection stays" {
    # topic "no.such" (7 bytes), no body, no payload
    run bounded 20 python3 - "$INSTANCE_RUNDIR/local-0" <<'PY'
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1]); s.settimeout(5)
s.recv(65536)
topic = b"no.such"
hdr = struct.pack("!BBBBIIIHHII", 0xED, 1, 1, 0, 9, 0xFFFFFFFF, 0,
                  len(topic), 0, 0, 0)
s.sendall(hdr + topic)
r = s.recv(65536)
magic, ver, typ, flags, tag, rank, errnum, tl, res, bl, pl = \
    struct.unpack("!BBBBIIIHHII", r[:28])
body = r[28 + tl:28 + tl + bl].decode()
print(typ, tag, errnum, body)
PY
    echo "$output"
    [[ "$output" == "2 9 38 "* ]]
    [[ "$output" == *"no.such"* ]]
}
