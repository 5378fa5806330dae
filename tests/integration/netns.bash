# netns.bash - run one eddy instance across N emulated hosts on this
# machine (network namespaces), for suites and benchmarks that need
# distinct hostnames, addresses and links.  Needs root, iproute2 (ip, tc)
# and util-linux (unshare).  Load it after helper.bash (it uses scaled()).
#
#   load helper
#   load netns
#   netns_start 4 [eddy start options...]   # EDDY_URI exported
#   netns_exec 2 hostname                   # a command "on" host2
#   netns_shape 200mbit                     # optional: limit every link
#   ... tests ...
#   netns_stop                              # clean exit checked, all removed
#
# The emulated network, made anew by every netns_start:
#
#   namespace TAG-br:  bridge br0, ports h0 .. h(N-1)
#   namespace TAG-hI:  eth0 (the peer of hI), address 10.X.Y.(I+1)/24, lo;
#                      host I's broker runs here under a UTS namespace
#                      whose hostname is "hostI"
#
# TAG is "eddyns-PID-RAND" (PID of the shell that called netns_start, RAND
# a random draw retried until `ip netns add` accepts it), so suites can run
# in parallel, also twice at once.  Every link and address lives inside
# those namespaces: the root namespace's network is never touched and no
# packet can leave the machine.  The subnet 10.X.Y.0/24 is drawn at random
# and checked unused by the root namespace's addresses (it could not clash
# anyway, the bridge being isolated, but a unique subnet makes a stray
# packet in a trace easy to attribute).
#
# The instance is bootstrapped from a hosts file (`eddy start --hosts
# --rank`, docs/architecture.md "Bootstrap"): one `eddy start` per host,
# ranks N-1 .. 1 first (they retry until their parent listens), then rank
# 0, whose command reports EDDY_URI through a fifo and waits on another,
# as helper.bash's start_instance does.  All brokers share one run
# directory (each has its socket RUNDIR/local-R; unix sockets are not
# network-namespaced, so clients in the root namespace reach rank 0 at
# EDDY_URI).  Host I's job tmpdirs are under NETNS_BASE/hostI (NETNS_BASE
# is NETNS_DIR, or a new directory in NETNS_TMPDIR_BASE when that is set,
# e.g. /dev/shm for a benchmark), so a tmpdir path also tells its host.
#
# netns_stop releases rank 0's command, waits for every `eddy start`,
# checks that each exited as expected (default 0), that no process of the
# run directory is left and that no sanitizer report was printed, and then
# removes everything netns_start made (namespaces, links, files) whatever
# the checks said.  netns_cleanup removes everything without checking: call
# it from a trap or teardown after a failure (netns_stop calls it too; both
# are idempotent).  A run killed outright leaves namespaces behind: the
# next netns_start deletes those whose creator is dead and which hold no
# process (netns_reap_stale).
#
# Exported for the suite: EDDY_URI, NETNS_TAG, NETNS_N, NETNS_DIR,
# NETNS_RUNDIR, NETNS_SUBNET (e.g. 10.123.45), NETNS_PIDS (one `eddy
# start` per host, host 0 first).

NETNS_PORT=7000 # each host has its own network stack: no port can clash

# Names of host I's namespace and of the bridge's.
netns_ns() { echo "$NETNS_TAG-h$1"; }
netns_br() { echo "$NETNS_TAG-br"; }

# Host I's address.
netns_addr() { echo "$NETNS_SUBNET.$(($1 + 1))"; }

# Delete namespaces of earlier runs that were killed before their cleanup:
# those whose creator (the PID in the name) is gone and that hold no
# process.  Only names of this harness's shape are considered.
netns_reap_stale() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' |
                grep -E '^eddyns-[0-9]+-[0-9a-f]+-(br|h[0-9]+)$'); do
        pid=${ns#eddyns-}
        pid=${pid%%-*}
        kill -0 "$pid" 2>/dev/null && continue
        [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] || continue
        ip netns del "$ns" 2>/dev/null || true
    done
}

# Make a namespace and record it for netns_cleanup.
netns_add() {
    ip netns add "$1" || return 1
    echo "$1" >>"$NETNS_DIR/namespaces"
}

# Draw a tag whose bridge namespace we could create (so the name was free).
netns_pick_tag() {
    local i
    for i in $(seq 20); do
        NETNS_TAG=eddyns-$$-$(printf '%04x%02x' $RANDOM $((RANDOM % 256)))
        ip netns add "$(netns_br)" 2>/dev/null || continue
        echo "$(netns_br)" >>"$NETNS_DIR/namespaces"
        return 0
    done
    echo "netns: no free namespace name" >&2
    return 1
}

# Draw 10.X.Y with no address of the root namespace in it.
netns_pick_subnet() {
    local i x y
    for i in $(seq 50); do
        x=$((100 + RANDOM % 150))
        y=$((RANDOM % 256))
        ip -4 -o addr show | grep -q " 10\.$x\.$y\." && continue
        NETNS_SUBNET=10.$x.$y
        return 0
    done
    echo "netns: no free 10.X.Y.0/24 subnet" >&2
    return 1
}

# The bridge, then per host a namespace, a veth pair (both ends made in
# the bridge's namespace, so their names cannot clash with anything), the
# host's end moved and renamed eth0, addressed and up.
netns_make_network() {
    local n=$1 i br ns
    br=$(netns_br)
    ip -n "$br" link set lo up &&
        ip -n "$br" link add br0 type bridge &&
        ip -n "$br" link set br0 up || return 1
    for ((i = 0; i < n; i++)); do
        ns=$(netns_ns "$i")
        netns_add "$ns" &&
            ip -n "$br" link add "h$i" type veth peer name "p$i" &&
            ip -n "$br" link set "p$i" netns "$ns" &&
            ip -n "$ns" link set "p$i" name eth0 &&
            ip -n "$ns" addr add "$(netns_addr "$i")/24" dev eth0 &&
            ip -n "$ns" link set lo up &&
            ip -n "$ns" link set eth0 up &&
            ip -n "$br" link set "h$i" master br0 &&
            ip -n "$br" link set "h$i" up || return 1
    done
}

# netns_exec I CMD...: run CMD in host I's network namespace, under a UTS
# namespace named hostI (like the broker's: `hostname` says hostI).
netns_exec() {
    local i=$1
    shift
    ip netns exec "$(netns_ns "$i")" \
        unshare --uts sh -c 'hostname "$0" && exec "$@"' "host$i" "$@"
}

# netns_shape RATE: limit every host's egress (eth0 in its namespace) to
# RATE (tc syntax, e.g. 200mbit) with a token bucket.  What a host
# receives comes from one other host's egress, so every link is bounded.
netns_shape() {
    local rate=$1 i
    for ((i = 0; i < NETNS_N; i++)); do
        ip netns exec "$(netns_ns "$i")" tc qdisc replace dev eth0 root \
            tbf rate "$rate" burst 64kb latency 50ms || return 1
    done
}

# netns_start N [eddy start options...]: the network, the hosts file, the
# key, one eddy start per host; returns once rank 0's command runs (the
# whole tree has joined), with EDDY_URI exported.  On failure everything
# made so far is removed and 1 is returned.
netns_start() {
    local n=$1 i fd line="" waited=0 cmd
    shift
    netns_reap_stale
    NETNS_N=$n
    NETNS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/eddyns.XXXXXX") || return 1
    NETNS_RUNDIR=$NETNS_DIR/run
    NETNS_PIDS=
    export NETNS_N NETNS_DIR NETNS_RUNDIR NETNS_PIDS
    : >"$NETNS_DIR/namespaces"
    if ! netns_pick_tag || ! netns_pick_subnet || ! netns_make_network "$n"; then
        echo "netns: cannot make the network of $n hosts" >&2
        netns_cleanup
        return 1
    fi
    export NETNS_TAG NETNS_SUBNET
    if [ -n "${NETNS_TMPDIR_BASE:-}" ]; then
        NETNS_BASE=$(mktemp -d "$NETNS_TMPDIR_BASE/eddyns.XXXXXX") || {
            netns_cleanup
            return 1
        }
        echo "$NETNS_BASE" >"$NETNS_DIR/base"
    else
        NETNS_BASE=$NETNS_DIR
    fi
    export NETNS_BASE
    for ((i = 0; i < n; i++)); do
        echo "$i host$i $(netns_addr "$i"):$NETNS_PORT"
        mkdir -p "$NETNS_BASE/host$i"
    done >"$NETNS_DIR/hosts"
    mkfifo "$NETNS_DIR/ready" "$NETNS_DIR/ctl"
    if ! eddy start --write-key="$NETNS_DIR/key"; then
        netns_cleanup
        return 1
    fi
    # hosts N-1 .. 1, then rank 0 with the command that reports readiness
    # (the others serve until the instance shuts down); fd 3 (bats' own)
    # must not leak into the background
    for ((i = n - 1; i >= 0; i--)); do
        cmd=()
        [ "$i" -eq 0 ] &&
            cmd=(sh -c 'echo "$EDDY_URI" >"$0/ready"; read x <"$0/ctl"'
                 "$NETNS_DIR")
        timeout -k 5 "$(scaled 900)" \
            ip netns exec "$(netns_ns "$i")" \
            unshare --uts sh -c 'hostname "$0" && exec "$@"' "host$i" \
            eddy start --hosts="$NETNS_DIR/hosts" --rank="$i" \
            --key="$NETNS_DIR/key" --rundir="$NETNS_RUNDIR" \
            --tmpdir-base="$NETNS_BASE/host$i" "$@" "${cmd[@]}" \
            >"$NETNS_DIR/out$i" 2>&1 3>&- &
        NETNS_PIDS="$! $NETNS_PIDS"
        echo "$!" >>"$NETNS_DIR/pids"
    done
    export NETNS_PIDS
    exec {fd}<>"$NETNS_DIR/ready"
    while ! read -r -t 1 -u "$fd" line; do
        waited=$((waited + 1))
        if ! netns_all_alive || [ "$waited" -ge "$(scaled 60)" ]; then
            exec {fd}<&-
            echo "netns: instance of $n hosts did not start:" >&2
            for ((i = 0; i < n; i++)); do
                sed "s/^/host$i: /" "$NETNS_DIR/out$i" >&2
            done
            netns_cleanup
            return 1
        fi
    done
    exec {fd}<&-
    EDDY_URI=$line
    # helper.bash keeps EDDY_URI in tests only while INSTANCE_PID is set,
    # and looks for job processes of INSTANCE_RUNDIR
    INSTANCE_PID=${NETNS_PIDS%% *}
    INSTANCE_RUNDIR=$NETNS_RUNDIR
    export EDDY_URI INSTANCE_PID INSTANCE_RUNDIR
}

# Every host's eddy start still runs.
netns_all_alive() {
    local p
    for p in $NETNS_PIDS; do
        kill -0 "$p" 2>/dev/null || return 1
    done
}

# netns_stop [EXPECT]: end the instance (rank 0's command returns), check
# every eddy start exited EXPECT (default 0), that nothing of the run is
# left and no sanitizer spoke; then netns_cleanup.  1 if a check failed.
netns_stop() {
    local expect=${1:-0} rc p i=0 fd ok=0
    [ -n "${NETNS_DIR:-}" ] && [ -d "$NETNS_DIR" ] || return 0
    if [ -n "$NETNS_PIDS" ]; then
        exec {fd}<>"$NETNS_DIR/ctl"
        echo done >&"$fd"
        exec {fd}<&-
    fi
    for p in $NETNS_PIDS; do
        rc=0
        wait "$p" || rc=$?
        if [ "$rc" -ne "$expect" ]; then
            echo "netns: eddy start of host$i exited $rc, expected $expect:" >&2
            cat "$NETNS_DIR/out$i" >&2
            ok=1
        fi
        i=$((i + 1))
    done
    NETNS_PIDS=
    if pgrep -f -- "--rundir=$NETNS_RUNDIR" >&2; then
        echo "netns: processes of $NETNS_RUNDIR are still running" >&2
        ok=1
    fi
    if cat "$NETNS_DIR"/out* 2>/dev/null |
            grep -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' >&2; then
        ok=1
    fi
    netns_cleanup || ok=1
    return "$ok"
}

# Remove everything netns_start made, without checks: end what is left
# of our eddy start processes and brokers (found by their pids and by our
# run directory, which no other run uses), delete our namespaces (the
# links go with them), remove our files.  1 if something would not go.
netns_cleanup() {
    local p i ok=0
    [ -n "${NETNS_DIR:-}" ] && [ -d "$NETNS_DIR" ] || return 0
    for p in $(cat "$NETNS_DIR/pids" 2>/dev/null); do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in $(pgrep -f -- "--rundir=$NETNS_RUNDIR"); do
        kill -TERM "$p" 2>/dev/null || true
    done
    for ((i = 0; i < 50; i++)); do
        [ -z "$(pgrep -f -- "--rundir=$NETNS_RUNDIR")" ] && break
        sleep 0.1
    done
    for p in $(pgrep -f -- "--rundir=$NETNS_RUNDIR"); do
        kill -KILL "$p" 2>/dev/null || true
    done
    for p in $(cat "$NETNS_DIR/pids" 2>/dev/null); do
        wait "$p" 2>/dev/null || true
    done
    NETNS_PIDS=
    for p in $(cat "$NETNS_DIR/namespaces" 2>/dev/null); do
        if ip netns list | awk '{ print $1 }' | grep -qx -- "$p"; then
            ip netns del "$p" || ok=1
        fi
    done
    [ -s "$NETNS_DIR/base" ] && rm -rf "$(cat "$NETNS_DIR/base")"
    rm -rf "$NETNS_DIR"
    NETNS_DIR=
    unset EDDY_URI INSTANCE_PID INSTANCE_RUNDIR
    return "$ok"
}
