# helper.bash - shared setup for eddy's bats suites.
#
#   load helper
#   start_instance 8 [eddy start options...]   # EDDY_URI exported
#   ... tests ...
#   stop_instance                              # clean exit checked
#
# start_instance runs `eddy start` in the background with a command that
# reports EDDY_URI through a fifo and then waits on a control fifo; it
# waits for that report (never a fixed sleep).  stop_instance releases
# the command, waits for eddy start, and checks that it exited 0, that
# every broker is gone, that the run directory was removed, and that no
# sanitizer report was printed.

bats_require_minimum_version 1.5.0

EDDY_SOURCE_DIR=${EDDY_SOURCE_DIR:-$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}
EDDY_BUILD_DIR=${EDDY_BUILD_DIR:-$EDDY_SOURCE_DIR/build}
PATH=$EDDY_BUILD_DIR:$PATH
export PATH EDDY_SOURCE_DIR EDDY_BUILD_DIR
# Tests run against the instance their suite started, never an outer one.
[ -n "${INSTANCE_PID:-}" ] || unset EDDY_URI

# Scale every timeout on slow machines: EDDY_TEST_TIMEOUT_SCALE=3.
TIMEOUT_SCALE=${EDDY_TEST_TIMEOUT_SCALE:-1}
scaled() { echo $(( $1 * TIMEOUT_SCALE )); }

# Run a command (or a shell function of the suite) with a bound on its
# run time.
bounded() {
    local secs=$1; shift
    if declare -F "$1" >/dev/null; then
        export -f "$1"
        timeout -k 5 "$(scaled "$secs")" bash -c '"$@"' bash "$@"
    else
        timeout -k 5 "$(scaled "$secs")" "$@"
    fi
}

start_instance() {
    local size=$1; shift
    INSTANCE_TMP=$(mktemp -d "${BATS_FILE_TMPDIR:-/tmp}/instance.XXXXXX")
    mkfifo "$INSTANCE_TMP/ready" "$INSTANCE_TMP/ctl"
    # The initial program: say where the instance is, then wait to be told
    # to finish.  fd 3 (bats' own) must not leak into the background.
    timeout -k 5 "$(scaled 600)" \
        eddy start --test-size="$size" "$@" \
        sh -c 'echo "$EDDY_URI" >"$0/ready"; read x <"$0/ctl"' \
        "$INSTANCE_TMP" >"$INSTANCE_TMP/out" 2>&1 3>&- &
    INSTANCE_PID=$!
    local fd line="" waited=0
    exec {fd}<>"$INSTANCE_TMP/ready"
    while ! read -r -t 1 -u "$fd" line; do
        waited=$((waited + 1))
        if ! kill -0 "$INSTANCE_PID" 2>/dev/null ||
           [ "$waited" -ge "$(scaled 60)" ]; then
            exec {fd}<&-
            echo "instance of size $size did not start:" >&2
            cat "$INSTANCE_TMP/out" >&2
            return 1
        fi
    done
    exec {fd}<&-
    EDDY_URI=$line
    INSTANCE_RUNDIR=${EDDY_URI#local://}
    INSTANCE_RUNDIR=${INSTANCE_RUNDIR%/*}
    export EDDY_URI INSTANCE_TMP INSTANCE_PID INSTANCE_RUNDIR
}

# Stop the instance started by start_instance.  Pass the exit status you
# expect from eddy start (default 0).
stop_instance() {
    local expect=${1:-0} rc=0 fd
    [ -n "${INSTANCE_PID:-}" ] || return 0
    exec {fd}<>"$INSTANCE_TMP/ctl"
    echo done >&"$fd"
    exec {fd}<&-
    wait "$INSTANCE_PID" || rc=$?
    INSTANCE_PID=
    if [ "$rc" -ne "$expect" ]; then
        echo "eddy start exited $rc, expected $expect:" >&2
        cat "$INSTANCE_TMP/out" >&2
        return 1
    fi
    check_no_leftovers "$INSTANCE_RUNDIR" || return 1
    if grep -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' \
            "$INSTANCE_TMP/out" >&2; then
        return 1
    fi
    rm -rf "$INSTANCE_TMP"
    unset EDDY_URI
}

# Nothing of the instance with run directory $1 may remain.
check_no_leftovers() {
    local rundir=$1
    if pgrep -f -- "--rundir=$rundir" >&2; then
        echo "processes of $rundir are still running" >&2
        return 1
    fi
    if [ -e "$rundir" ]; then
        echo "run directory $rundir was not removed" >&2
        return 1
    fi
}

# Wait (bounded) until a command succeeds: for state that changes
# asynchronously, e.g. a lost rank showing up in overlay status.
wait_until() {
    local secs=$1 i=0; shift
    local tries=$(( $(scaled "$secs") * 10 ))
    until "$@"; do
        i=$((i + 1))
        [ "$i" -lt "$tries" ] || return 1
        sleep 0.1
    done
}

# A number of seconds no other test uses, to name a `sleep` process that
# only this test starts (suites may run in parallel, also with themselves).
unique_seconds() {
    echo $(( 100000 + ($$ * 32768 + RANDOM) % 800000 ))
}

# Processes of jobs of the instance with run directory $1 (default: ours):
# every eddy-shell and every task (a process with EDDY_JOB_ID) whose
# EDDY_URI points into that run directory.  Prints "PID COMM" per process.
job_processes() {
    local rundir=${1:-$INSTANCE_RUNDIR} p env comm
    [ -n "$rundir" ] || return 0
    for p in /proc/[0-9]*; do
        env=$(tr '\0' '\n' 2>/dev/null <"$p/environ") || continue
        grep -qF "EDDY_URI=local://$rundir/" <<<"$env" || continue
        comm=$(cat "$p/comm" 2>/dev/null) || continue
        if [ "$comm" = eddy-shell ] || grep -q '^EDDY_JOB_ID=' <<<"$env"; then
            echo "${p#/proc/} $comm"
        fi
    done
}

no_job_processes() {
    [ -z "$(job_processes "$@")" ]
}

# Wait (bounded) until no shell or task of our instance is left; say which
# ones are when some are.
check_no_job_processes() {
    wait_until "${1:-15}" no_job_processes && return 0
    echo "job processes left:" >&2
    job_processes >&2
    return 1
}
