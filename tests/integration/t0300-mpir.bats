#!/usr/bin/env bats
# MPIR: eddy as the starter of a real debugger (gdb in batch mode, driven
# the way MPIR debuggers drive a starter), launch and attach, MPMD,
# partial attach, MPIR_debug_state on abort, the proctable without a
# debugger (`eddy job proctable`), and a 4096-task table over 16 brokers.

load helper

setup_file() {
    # a task that says it ran (so a held one visibly did not)
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
    mpicc -o "$BATS_FILE_TMPDIR/abort" \
        "$EDDY_SOURCE_DIR/tests/integration/mpi/abort.c"
    start_instance 4 --cores-per-rank=4
    # LeakSanitizer cannot run under ptrace: an ASan-built eddy run under
    # gdb would fail at exit (the brokers, started above, keep it)
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
}

teardown_file() {
    stop_instance
}

setup() {
    T=$(mktemp -d "$BATS_TEST_TMPDIR/t.XXXXXX")
}

teardown() {
    local id
    pkill -f "eddy-ptrace-hold .* $T/" 2>/dev/null || true
    for id in $(eddy jobs 2>/dev/null | awk 'NR > 1 { print $1 }'); do
        eddy job cancel "$id" 2>/dev/null || true
    done
    check_no_job_processes
}

# gdb commands that print the starter's MPIR state at MPIR_Breakpoint:
# "state S", "size N", "jobid ID", then "proc RANK HOST EXE PID" per entry,
# and append each task's /proc State line to $T/states.
read_table() {
    cat <<GDB
printf "state %d\\n", MPIR_debug_state
printf "size %d\\n", MPIR_proctable_size
printf "jobid %s %lu\\n", totalview_jobid, eddy_jobid
set \$i = 0
while \$i < MPIR_proctable_size
  printf "proc %d %s %s %d\\n", \$i, MPIR_proctable[\$i].host_name, MPIR_proctable[\$i].executable_name, MPIR_proctable[\$i].pid
  eval "shell grep '^State:' /proc/%d/status >>$T/states", MPIR_proctable[\$i].pid
  set \$i = \$i + 1
end
GDB
}

# The proctable gdb printed ("proc" lines) against `eddy job info`:
# same pids, hostnames and executables, rank by rank.
check_against_info() {
    local id=$1 out=$2
    eddy job info --json "$id" |
        jq -r '.tasks[] | "proc \(.rank) \(.hostname) \(.pid)"' >"$T/want"
    grep '^proc ' "$out" | awk '{ print $1, $2, $3, $5 }' >"$T/got"
    diff "$T/want" "$T/got"
}

@test "launch under gdb (MPIR_being_debugged set, no --debug): proctable, stopped at exec, then runs to completion" {
    {
        echo "set pagination off"
        echo "set confirm off"
        echo "break main"
        echo "run"
        echo "set var MPIR_being_debugged = 1"
        echo "break MPIR_Breakpoint"
        echo "continue"
        read_table
        echo "eval \"shell eddy job info --json %s >$T/info.json\", totalview_jobid"
        echo "continue"
    } >"$T/cmds"
    run bounded 120 gdb -batch -nx -x "$T/cmds" --args \
        eddy run -N4 -n8 "$BATS_FILE_TMPDIR/ran"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"state 1"* ]]
    [[ "$output" == *"size 8"* ]]
    id=$(awk '/^jobid / { print $2; exit }' <<<"$output")
    [ -n "$id" ]
    [[ "$output" == *"jobid $id $id"* ]]
    # every entry: the program's absolute path, 8 distinct live pids
    [ "$(grep -c "^proc [0-7] .* $BATS_FILE_TMPDIR/ran [0-9][0-9]*$" <<<"$output")" -eq 8 ]
    [ "$(grep '^proc ' <<<"$output" | awk '{ print $5 }' | sort -u | wc -l)" -eq 8 ]
    # all stopped at exec when the debugger looked, and none had run yet
    [ "$(grep -c 'T (stopped)' "$T/states")" -eq 8 ]
    jq -e '.barrier.where == "exec" and .barrier.held == 8' "$T/info.json"
    jq -r '.tasks[] | "proc \(.rank) \(.hostname) \(.pid)"' "$T/info.json" >"$T/want"
    grep '^proc ' <<<"$output" | awk '{ print $1, $2, $3, $5 }' >"$T/got"
    diff "$T/want" "$T/got"
    # continued: every task ran and the job completed
    [ "$(grep -c '^ran rank [0-7]$' <<<"$output")" -eq 8 ]
    [[ "$output" == *"exited normally"* ]]
    [ "$(eddy job info --json "$id" | jq -r .state)" = INACTIVE ]
}

@test "eddy run --debug under gdb without setting MPIR_being_debugged" {
    {
        echo "set pagination off"
        echo "break MPIR_Breakpoint"
        echo "run"
        read_table
        echo "continue"
    } >"$T/cmds"
    run bounded 120 gdb -batch -nx -x "$T/cmds" --args \
        eddy run --debug -N2 -n4 "$BATS_FILE_TMPDIR/ran"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"size 4"* ]]
    [ "$(grep -c 'T (stopped)' "$T/states")" -eq 4 ]
    [ "$(grep -c '^ran rank [0-3]$' <<<"$output")" -eq 4 ]
}

@test "MPMD under gdb: each group's executable in the proctable" {
    {
        echo "set pagination off"
        echo "break MPIR_Breakpoint"
        echo "run"
        read_table
        echo "continue"
    } >"$T/cmds"
    run bounded 120 gdb -batch -nx -x "$T/cmds" --args \
        eddy run --debug -N2 -n2 "$BATS_FILE_TMPDIR/ran" : -n4 true
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"size 6"* ]]
    [ "$(grep -c "^proc [01] .* $BATS_FILE_TMPDIR/ran [0-9]*$" <<<"$output")" -eq 2 ]
    # 'true' was found on the tasks' PATH and shown as an absolute path
    [ "$(grep -Ec '^proc [2-5] .* /(usr/)?bin/true [0-9]+$' <<<"$output")" -eq 4 ]
}

@test "attach --debug under gdb to a running job: proctable, job undisturbed" {
    s=$(unique_seconds)
    id=$(eddy submit -N4 -n8 sleep "$s")
    wait_until 30 bash -c "[ \"\$(eddy job info --json $id | jq -r .state)\" = RUN ]"
    {
        echo "set pagination off"
        echo "break MPIR_Breakpoint"
        echo "run"
        read_table
        echo "eval \"shell eddy job cancel %s\", totalview_jobid"
        echo "continue"
    } >"$T/cmds"
    run bounded 120 gdb -batch -nx -x "$T/cmds" --args eddy job attach --debug "$id"
    echo "$output"
    [[ "$output" == *"state 1"* ]]
    [[ "$output" == *"size 8"* ]]
    [[ "$output" == *"jobid $id $id"* ]]
    check_against_info "$id" <(echo "$output")
    [ "$(grep -c "^proc .* /usr/bin/sleep [0-9]*$" <<<"$output")" -eq 8 ]
    # running, not stopped: the attach did not touch the job
    [ "$(grep -c 'State:.S (sleeping)' "$T/states")" -eq 8 ]
}

@test "attach --debug to a job held at exec: the job stays held" {
    id=$(eddy submit --stop=exec -N2 -n4 "$BATS_FILE_TMPDIR/ran")
    wait_until 30 bash -c "eddy job info --json $id | jq -e '.barrier.held == 4' >/dev/null"
    {
        echo "set pagination off"
        echo "break MPIR_Breakpoint"
        echo "run"
        read_table
        echo "kill"
    } >"$T/cmds"
    run bounded 60 gdb -batch -nx -x "$T/cmds" --args eddy job attach --debug "$id"
    echo "$output"
    [[ "$output" == *"size 4"* ]]
    [ "$(grep -c 'T (stopped)' "$T/states")" -eq 4 ]
    eddy job info --json "$id" | jq -e '.barrier.released == false and .state == "RUN"'
    eddy job release "$id"
    run bounded 30 eddy job attach "$id"
    [ "$status" -eq 0 ]
    [ "$(grep -c '^ran rank [0-3]$' <<<"$output")" -eq 4 ]
}

@test "partial attach: the starter releases only the tasks the debugger did not attach to" {
    # at the breakpoint a stand-in debugger attaches to rank 2 only
    {
        echo "set pagination off"
        echo "break MPIR_Breakpoint"
        echo "run"
        read_table
        echo "eval \"shell eddy-ptrace-hold %d $T/held >$T/hold.log 2>&1 & echo \$! >$T/hold.pid\", MPIR_proctable[2].pid"
        echo "shell for i in \$(seq 100); do [ -e $T/held ] && break; sleep 0.1; done"
        echo "eval \"shell echo %d >$T/rank2.pid\", MPIR_proctable[2].pid"
        echo "continue"
    } >"$T/cmds"
    gdb -batch -nx -x "$T/cmds" --args \
        eddy run --debug -N2 -n4 --output="$T/out.{{rank}}" "$BATS_FILE_TMPDIR/ran" \
        >"$T/gdb.out" 2>&1 &
    gdbpid=$!
    # the others ran and finished; rank 2 stays stopped, held by its tracer
    wait_until 60 bash -c "[ -s $T/out.0 ] && [ -s $T/out.1 ] && [ -s $T/out.3 ]"
    [ -e "$T/held" ]
    pid2=$(cat "$T/rank2.pid")
    sleep 0.5
    [ ! -s "$T/out.2" ]
    grep -q '^State:.[tT]' "/proc/$pid2/status"
    [ "$(awk '/^TracerPid:/ { print $2 }' "/proc/$pid2/status")" = "$(cat "$T/hold.pid")" ]
    # the debugger lets it go: it runs, and the job completes
    kill "$(cat "$T/hold.pid")"
    wait_until 60 bash -c "! kill -0 $gdbpid 2>/dev/null" || kill -9 "$gdbpid"
    wait "$gdbpid" || true
    cat "$T/gdb.out"
    grep -q 'exited normally' "$T/gdb.out"
    [ "$(cat "$T/out.2")" = "ran rank 2" ]
}

@test "MPIR_debug_state is MPIR_DEBUG_ABORTING when the job aborts" {
    {
        echo "set pagination off"
        echo "break MPIR_Breakpoint"
        echo "run"
        echo 'printf "state %d\n", MPIR_debug_state'
        echo "continue"
        echo 'printf "state %d\n", MPIR_debug_state'
        echo 'printf "abort %s\n", MPIR_debug_abort_string'
        echo "continue"
    } >"$T/cmds"
    run bounded 120 gdb -batch -nx -x "$T/cmds" --args \
        eddy run --debug -N2 -n4 "$BATS_FILE_TMPDIR/abort"
    echo "$output"
    [[ "$output" == *"state 1"* ]]
    [[ "$output" == *"state 2"* ]]
    [[ "$output" == *"abort abort: "*"rank"* ]]
}

@test "the MPIR symbols are in the built and the installed eddy, with MPIR_PROCDESC in its debug info" {
    local bin
    for bin in "$(command -v eddy)"; do
        for sym in MPIR_proctable MPIR_proctable_size MPIR_debug_state \
                   MPIR_being_debugged MPIR_Breakpoint MPIR_i_am_starter \
                   MPIR_partial_attach_ok MPIR_ignore_queues \
                   MPIR_acquired_pre_main MPIR_force_to_main \
                   MPIR_debug_abort_string totalview_jobid eddy_jobid; do
            nm "$bin" | grep -q " [TDBRC] $sym\$" || { echo "no $sym in $bin"; false; }
        done
    done
    cmake --install "$EDDY_BUILD_DIR" --prefix "$T/prefix" >/dev/null
    nm "$T/prefix/bin/eddy" | grep -q ' T MPIR_Breakpoint$'
    nm "$T/prefix/bin/eddy" | grep -q ' B MPIR_proctable$'
    run gdb -batch -nx -ex 'ptype MPIR_PROCDESC' "$T/prefix/bin/eddy"
    [[ "$output" == *"char *host_name;"* ]]
    [[ "$output" == *"char *executable_name;"* ]]
    [[ "$output" == *"int pid;"* ]]
}

@test "eddy job proctable: text and JSON agree with job info; errors are clear" {
    s=$(unique_seconds)
    id=$(eddy submit -N4 -n8 sleep "$s")
    wait_until 30 bash -c "eddy job proctable $id >/dev/null 2>&1"
    run eddy job proctable --json "$id"
    [ "$status" -eq 0 ]
    jq -r '.[] | "\(.rank) \(.node) \(.hostname) \(.pid) \(.appnum) \(.executable)"' \
        <<<"$output" >"$T/pt"
    eddy job info --json "$id" |
        jq -r '.tasks[] | "\(.rank) \(.node) \(.hostname) \(.pid) \(.appnum) /usr/bin/sleep"' \
        >"$T/info"
    diff "$T/info" "$T/pt"
    run eddy job proctable "$id"
    [ "$status" -eq 0 ]
    [ "$(grep -c ' /usr/bin/sleep$' <<<"$output")" -eq 8 ]
    eddy job cancel "$id"
    eddy job wait "$id" || true
    run eddy job proctable "$id"
    [ "$status" -eq 1 ]
    [[ "$output" == *"job $id has ended"* ]]
    run eddy job proctable 999999
    [ "$status" -eq 1 ]
    [[ "$output" == *"999999"*"no such job"* ]]
    run eddy submit --debug true
    [ "$status" -eq 1 ]
    [[ "$output" == *"--debug needs a starter"* ]]
    run eddy run --debug --stop=fork true
    [ "$status" -eq 1 ]
    [[ "$output" == *"--stop=exec"* ]]
}
