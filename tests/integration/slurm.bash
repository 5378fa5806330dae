# slurm.bash - a private one-node Slurm cluster on this machine, for the
# suites that start eddy under srun.  Needs root (slurmd runs job steps as
# the submitting user) and the Debian packages munge, slurmctld, slurmd,
# slurm-client and libpmi2-0.  Load it after helper.bash (it uses
# scaled() and wait_until()).
#
#   load helper
#   load slurm
#   setup_file()    { slurm_start; }      # SLURM_CONF exported
#   teardown_file() { slurm_stop; }
#   ... srun --mpi=pmi2 -n 4 ... in the tests ...
#
# What slurm_start makes, all under SLURM_DIR (a new directory in
# ${TMPDIR:-/tmp}, named at random):
#   munge/key, munge/sock   a munged with a fresh random key and its own
#                           socket; Slurm finds it through AuthInfo, so a
#                           system munged (if any) is neither used nor
#                           touched
#   slurm.conf              cluster "eddyPID", controller on 127.0.0.1,
#                           one node "eddyPID" with CPUs=8 (more than this
#                           machine has: SlurmdParameters=config_overrides
#                           lets slurmd believe it) in one partition with
#                           OverSubscribe, so `srun -n 4` fits on 2 cores
#   state/ spool/ log/      slurmctld's state, slurmd's spool, every log
# The controller and node ports are drawn by the kernel (bind to port 0,
# then released) and the whole start is retried with new ports if a
# daemon cannot bind, so two copies of a suite can run at once.  System
# slurmctld/slurmd services (the packages install them) are left alone:
# nothing here reads /etc/slurm, /etc/munge or the default ports.
#
# slurm_stop cancels every job, stops slurmd, slurmctld and munged (by
# pid, SIGTERM then SIGKILL after a bound), checks that they exited and
# that no job step of ours is left, and removes SLURM_DIR whatever the
# checks said.  slurm_start calls it too when it fails half-way.
#
# Exported for the suite: SLURM_CONF, SLURM_DIR, SLURM_NODE.

# Two free TCP ports on the loopback, chosen by the kernel.
slurm_free_ports() {
    python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])'
}

slurm_write_conf() {
    local dir=$1 ctlport=$2 nodeport=$3 host
    host=$(hostname)
    cat >"$dir/slurm.conf" <<EOF
ClusterName=$SLURM_NODE
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctlport
SlurmdPort=$nodeport
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$SLURM_NODE NodeHostname=$host NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=eddy Nodes=$SLURM_NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

# Is the node up and idle (ready for srun)?
slurm_node_idle() {
    [ "$(sinfo -h -n "$SLURM_NODE" -o %t 2>/dev/null)" = idle ]
}

# Is the process with pid $1 gone (or a zombie)?
slurm_pid_gone() {
    local state
    state=$(ps -o stat= -p "$1" 2>/dev/null) || return 0
    [[ "$state" == Z* ]]
}

# One attempt at starting the three daemons; 1 if a daemon did not come up
# (its log says why).
slurm_try_start() {
    local ports
    ports=$(slurm_free_ports) || return 1
    # shellcheck disable=SC2086
    slurm_write_conf "$SLURM_DIR" $ports
    # fd 3 (bats' own) must not leak into the daemons.
    slurmctld -D -i >"$SLURM_DIR/log/slurmctld.out" 2>&1 3>&- &
    SLURM_CTLD_PID=$!
    slurmd -D -N "$SLURM_NODE" >"$SLURM_DIR/log/slurmd.out" 2>&1 3>&- &
    SLURM_SLURMD_PID=$!
    export SLURM_CTLD_PID SLURM_SLURMD_PID
    # Until the node is idle, or at once if a daemon died (a port taken).
    local i=0 tries=$(( $(scaled 30) * 10 ))
    until slurm_node_idle; do
        slurm_pid_gone "$SLURM_CTLD_PID" && return 1
        slurm_pid_gone "$SLURM_SLURMD_PID" && return 1
        i=$((i + 1))
        [ "$i" -lt "$tries" ] || return 1
        sleep 0.1
    done
}

# Stop one daemon by pid: SIGTERM, then SIGKILL after a bound.  1 if it
# had to be killed or would not go.
slurm_kill() {
    local pid=$1
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    wait_until 20 slurm_pid_gone "$pid" && return 0
    echo "slurm: pid $pid ignored SIGTERM, killing it" >&2
    kill -KILL "$pid" 2>/dev/null
    wait_until 5 slurm_pid_gone "$pid"
    return 1
}

slurm_start() {
    local attempt
    # `make check` installs these (scripts/deps.txt): their absence is a
    # failure, not a reason to skip
    if ! { command -v munged && command -v slurmctld &&
           command -v slurmd && command -v srun; } >/dev/null; then
        echo "Slurm is not installed (munge slurmctld slurmd slurm-client:" \
             "scripts/install-deps installs them)" >&2
        return 1
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "a private slurmd needs root (make check runs as root)" >&2
        return 1
    fi
    # The suite may itself run inside a Slurm job: forget that one.
    unset "${!SLURM_@}"
    SLURM_DIR=$(mktemp -d "${TMPDIR:-/tmp}/eddy-slurm.XXXXXX")
    SLURM_NODE=eddy$$
    SLURM_CONF=$SLURM_DIR/slurm.conf
    export SLURM_DIR SLURM_NODE SLURM_CONF
    chmod 0755 "$SLURM_DIR"
    mkdir -p "$SLURM_DIR/state" "$SLURM_DIR/spool" "$SLURM_DIR/log"
    mkdir -m 0755 "$SLURM_DIR/munge"
    # munged insists on a key readable by its owner only
    (umask 077 && head -c 1024 /dev/urandom >"$SLURM_DIR/munge/key")
    munged -F -f --key-file="$SLURM_DIR/munge/key" \
        --socket="$SLURM_DIR/munge/sock" \
        --pid-file="$SLURM_DIR/munge/pid" \
        --seed-file="$SLURM_DIR/munge/seed" \
        --log-file="$SLURM_DIR/log/munged.log" \
        >"$SLURM_DIR/log/munged.out" 2>&1 3>&- &
    SLURM_MUNGED_PID=$!
    export SLURM_MUNGED_PID
    if ! wait_until 10 test -S "$SLURM_DIR/munge/sock"; then
        echo "slurm: munged did not start:" >&2
        cat "$SLURM_DIR"/log/munged.* >&2
        slurm_stop
        return 1
    fi
    # A port drawn above may be taken again before slurmctld binds it:
    # try again with new ports.
    for attempt in 1 2 3; do
        slurm_try_start && return 0
        echo "slurm: attempt $attempt: node not idle:" >&2
        tail -n 20 "$SLURM_DIR"/log/slurm*.log "$SLURM_DIR"/log/*.out >&2
        slurm_kill "$SLURM_SLURMD_PID"
        slurm_kill "$SLURM_CTLD_PID"
        rm -rf "${SLURM_DIR:?}/state"/* "${SLURM_DIR:?}/spool"/*
    done
    slurm_stop
    return 1
}

# No job of our cluster is queued or running.
slurm_no_jobs() {
    [ -z "$(squeue -h -o %i 2>/dev/null)" ]
}

slurm_stop() {
    local rc=0
    [ -n "${SLURM_DIR:-}" ] && [ -d "$SLURM_DIR" ] || return 0
    if [ -n "${SLURM_CTLD_PID:-}" ] && ! slurm_pid_gone "$SLURM_CTLD_PID"; then
        scancel --quiet --user="$(id -un)" 2>/dev/null
        if ! wait_until 20 slurm_no_jobs; then
            echo "slurm: jobs left at teardown:" >&2
            squeue >&2
            rc=1
        fi
    fi
    slurm_kill "${SLURM_SLURMD_PID:-}" || rc=1
    slurm_kill "${SLURM_CTLD_PID:-}" || rc=1
    slurm_kill "${SLURM_MUNGED_PID:-}" || rc=1
    # Job steps run under slurmstepd, which names its spool socket
    # NODE_JOB.STEP in our spool: none may be left.
    if compgen -G "$SLURM_DIR/spool/${SLURM_NODE}_*" >/dev/null; then
        echo "slurm: job step sockets left:" "$SLURM_DIR"/spool/* >&2
        rc=1
    fi
    if [ "$rc" -ne 0 ]; then
        tail -n 30 "$SLURM_DIR"/log/*.log >&2
    fi
    rm -rf "$SLURM_DIR"
    unset SLURM_DIR SLURM_CONF SLURM_CTLD_PID SLURM_SLURMD_PID \
        SLURM_MUNGED_PID
    return "$rc"
}
