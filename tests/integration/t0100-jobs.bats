#!/usr/bin/env bats
# Jobs: eddy run, submit, jobs and job info/wait/eventlog on a 2-broker
# instance with 4 cores per broker: layouts (MPMD), environment, cwd,
# stdin, output files, exit statuses, refusals.

load helper

setup_file() {
    start_instance 2 --cores-per-rank=4
}

teardown_file() {
    stop_instance
}

setup() {
    T=$(mktemp -d "$BATS_TEST_TMPDIR/t.XXXXXX")
}

teardown() {
    check_no_job_processes
}

# The last job ID among the jobs of the instance.
last_jobid() {
    eddy jobs -a --json | jq -r '.jobs[-1].id'
}

@test "run: output comes back and the exit status is 0" {
    run bounded 30 eddy run echo hello
    [ "$status" -eq 0 ]
    [ "$output" = "hello" ]
}

@test "run -n: every task runs, with its rank and the job size" {
    run bounded 30 eddy run -n 4 sh -c \
        'echo "$EDDY_TASK_RANK/$EDDY_JOB_SIZE job=$EDDY_JOB_ID"'
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 4 ]
    for r in 0 1 2 3; do
        [[ "$output" == *"$r/4 job="[0-9]* ]]
    done
}

@test "run -l labels lines with the task rank, stdout and stderr apart" {
    run bounded 30 sh -c 'eddy run -l -n 3 sh -c "echo out; echo err >&2" 2>/dev/null'
    [ "$status" -eq 0 ]
    [ "$(printf '%s\n' "${lines[@]}" | sort | tr '\n' ' ')" = "0: out 1: out 2: out " ]
    run bounded 30 sh -c 'eddy run -l -n 2 sh -c "echo out; echo err >&2" 2>&1 >/dev/null'
    [ "$(printf '%s\n' "${lines[@]}" | sort | tr '\n' ' ')" = "0: err 1: err " ]
}

@test "-l labels a last line without a newline" {
    run bounded 30 eddy run -l printf abc
    [ "$status" -eq 0 ]
    [ "$output" = "0: abc" ]
}

@test "-N 2 places tasks on both brokers" {
    run bounded 30 eddy run -N 2 -n 4 -l printenv EDDY_JOB_NNODES
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 4 ]
    [[ "$output" == *"3: 2"* ]]
    id=$(last_jobid)
    run eddy job info --json "$id"
    [ "$status" -eq 0 ]
    [ "$(jq -r '[.tasks[].node] | unique | length' <<<"$output")" -eq 2 ]
    [ "$(jq -r '.nodes | length' <<<"$output")" -eq 2 ]
    [ "$(jq -r '.nnodes' <<<"$output")" -eq 2 ]
}

@test "exit statuses: 0, 3, and 128+signal for a signal death" {
    run bounded 30 eddy run true
    [ "$status" -eq 0 ]
    run bounded 30 eddy run sh -c 'exit 3'
    [ "$status" -eq 3 ]
    run bounded 30 eddy run -n 3 sh -c 'exit $EDDY_TASK_RANK'
    [ "$status" -eq 2 ]
    run bounded 30 eddy run sh -c 'kill -KILL $$'
    [ "$status" -eq 137 ]
    id=$(last_jobid)
    run eddy job info --json "$id"
    [ "$(jq -r '.status' <<<"$output")" -eq 137 ]
    [ "$(jq -r '.tasks[0].status' <<<"$output")" -eq 137 ]
    run bounded 30 eddy job wait "$id"
    [ "$status" -eq 137 ]
}

@test "MPMD: two programs, ranks and appnums in order" {
    id=$(eddy submit -n 2 printenv EDDY_TASK_RANK : -n 3 sh -c 'echo B$EDDY_TASK_RANK')
    run bounded 30 eddy job wait "$id"
    [ "$status" -eq 0 ]
    run bounded 30 eddy job attach "$id"
    [ "$status" -eq 0 ]
    [ "$(printf '%s\n' "${lines[@]}" | sort | tr '\n' ' ')" = "0 1 B2 B3 B4 " ]
    run eddy job info --json "$id"
    [ "$status" -eq 0 ]
    [ "$(jq -r '.ntasks' <<<"$output")" -eq 5 ]
    [ "$(jq -r '[.tasks[] | "\(.rank):\(.appnum):\(.executable)"] | join(" ")' \
        <<<"$output")" = "0:0:printenv 1:0:printenv 2:1:sh 3:1:sh 4:1:sh" ]
    run eddy job info "$id"
    [ "$status" -eq 0 ]
    [[ "$output" == *"state     INACTIVE"* ]]
    [[ "$output" =~ 4\ +[0-9]+\ +[^\ ]+\ +[0-9]+\ +1\ +0\ +sh ]]
}

@test "environment: pass-through, --env set and unset, --env-remove" {
    export EDDY_T_KEEP=kept EDDY_T_GONE=x EDDY_T_GLOB1=y EDDY_T_GLOB2=z
    run bounded 30 eddy run --env=EDDY_T_NEW=new --env=-EDDY_T_GONE \
        --env-remove='EDDY_T_GLOB*' sh -c \
        'echo "keep=$EDDY_T_KEEP new=$EDDY_T_NEW gone=${EDDY_T_GONE-unset} g1=${EDDY_T_GLOB1-unset} g2=${EDDY_T_GLOB2-unset}"'
    [ "$status" -eq 0 ]
    [ "$output" = "keep=kept new=new gone=unset g1=unset g2=unset" ]
}

@test "tasks get their eddy environment" {
    run bounded 30 eddy run -N 2 -n 4 -l sh -c \
        'echo "$EDDY_TASK_RANK $EDDY_TASK_LOCAL_RANK $EDDY_JOB_SIZE $EDDY_JOB_NNODES ${EDDY_URI%%://*}"'
    [ "$status" -eq 0 ]
    [[ "$output" == *"0: 0 0 4 2 local"* ]]
    [[ "$output" == *"1: 1 1 4 2 local"* ]]
    [[ "$output" == *"2: 2 0 4 2 local"* ]]
    [[ "$output" == *"3: 3 1 4 2 local"* ]]
}

@test "--cwd sets the working directory; default is ours" {
    mkdir "$T/work"
    run bounded 30 eddy run --cwd="$T/work" pwd
    [ "$status" -eq 0 ]
    [ "$output" = "$T/work" ]
    cd "$T"
    run bounded 30 eddy run --cwd=work pwd
    [ "$output" = "$T/work" ]
    run bounded 30 eddy run pwd
    [ "$output" = "$T" ]
}

@test "stdin from a file goes to every rank" {
    printf 'line1\nline2\n' >"$T/in"
    run bounded 30 eddy run -n 3 -l --input="$T/in" cat
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 6 ]
    for r in 0 1 2; do
        [[ "$output" == *"$r: line1"* ]]
        [[ "$output" == *"$r: line2"* ]]
    done
}

@test "stdin of eddy run is forwarded" {
    run bounded 30 sh -c 'printf "a\nb\n" | eddy run -n 2 -l cat'
    [ "$status" -eq 0 ]
    [ "$(printf '%s\n' "${lines[@]}" | sort | tr '\n' ' ')" = "0: a 0: b 1: a 1: b " ]
    run bounded 30 sh -c 'eddy run wc -c </dev/null'
    [ "$output" = "0" ]
}

@test "--input-ranks: one rank gets stdin, the others EOF" {
    printf 'only\n' >"$T/in"
    run bounded 30 eddy run -n 3 -l --input="$T/in" --input-ranks=1 \
        sh -c 'echo "got $(wc -c)"'
    [ "$status" -eq 0 ]
    [[ "$output" == *"0: got 0"* ]]
    [[ "$output" == *"1: got 5"* ]]
    [[ "$output" == *"2: got 0"* ]]
}

@test "submit --input sends a file to the job" {
    printf 'hello\n' >"$T/in"
    id=$(eddy submit -n 2 --input="$T/in" cat)
    # -n: our own (empty) stdin must not race the submitted input's EOF.
    run bounded 30 eddy job attach -l -n "$id"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(printf '%s\n' "${lines[@]}" | sort | tr '\n' ' ')" = "0: hello 1: hello " ]
}

@test "output to per-rank files with templates" {
    run bounded 30 eddy run -n 3 --output="$T/out.{{id}}.{{rank}}" \
        --error="$T/err.{{rank}}.{{node}}" \
        sh -c 'echo out$EDDY_TASK_RANK; echo err$EDDY_TASK_RANK >&2'
    [ "$status" -eq 0 ]
    [ -z "$output" ]
    id=$(last_jobid)
    for r in 0 1 2; do
        [ "$(cat "$T/out.$id.$r")" = "out$r" ]
        node=$(eddy job info --json "$id" | jq -r ".tasks[$r].node")
        [ "$(cat "$T/err.$r.$node")" = "err$r" ]
    done
}

@test "output to one file, labelled" {
    run bounded 30 eddy run -n 2 -l --output="$T/all" echo x
    [ "$status" -eq 0 ]
    [ "$(sort "$T/all" | tr '\n' ' ')" = "0: x 1: x " ]
}

@test "submit --output writes the files in the background" {
    id=$(eddy submit -n 2 --output="$T/s.{{rank}}" sh -c 'echo s$EDDY_TASK_RANK')
    bounded 30 eddy job wait "$id"
    wait_until 10 test -s "$T/s.1"
    wait_until 10 test -s "$T/s.0"
    [ "$(cat "$T/s.0")" = "s0" ]
    [ "$(cat "$T/s.1")" = "s1" ]
}

@test "jobs lists active jobs, -a also finished ones, --json has the fields" {
    s=$(unique_seconds)
    id=$(eddy submit --job-name=sleeper sleep "$s")
    wait_until 10 sh -c "eddy jobs | grep -q '^$id .*RUN .*sleeper'"
    run eddy jobs
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "ID "*"STATE"*"NAME"*"NTASKS"*"NNODES"*"TIME/REASON" ]]
    run eddy jobs --json
    [ "$(jq -r ".jobs[] | select(.id == $id) | \"\(.state) \(.name) \(.ntasks) \(.nnodes)\"" <<<"$output")" = "RUN sleeper 1 1" ]
    eddy job cancel "$id"
    run bounded 30 eddy job wait "$id"
    [ "$status" -ne 0 ]
    run eddy jobs
    [[ "$output" != *"sleeper"* ]]
    run eddy jobs -a
    [[ "$output" == *"$id "*"INACTIVE"*"sleeper"* ]]
}

@test "job info shows state, nodes, tasks and times" {
    id=$(eddy submit -n 2 true)
    bounded 30 eddy job wait "$id"
    run eddy job info "$id"
    [ "$status" -eq 0 ]
    [[ "$output" == *"job       $id"* ]]
    [[ "$output" == *"state     INACTIVE"* ]]
    [[ "$output" == *"status    0"* ]]
    [[ "$output" == *"nodes     "[0-9]*"($(hostname))"* ]]
    [[ "$output" == *"submit    "* ]]
    [[ "$output" == *"finish    "* ]]
    run eddy job info --json "$id"
    for f in id state name ntasks nnodes t_submit t_alloc t_start t_finish \
        t_clean status exception nodes tasks jobspec reason; do
        jq -e "has(\"$f\")" <<<"$output" >/dev/null
    done
    [ "$(jq -r '.tasks[1] | has("pid") and has("hostname") and has("appnum")' <<<"$output")" = true ]
}

@test "job eventlog: the events in order; --json has the protocol fields" {
    id=$(eddy submit true)
    bounded 30 eddy job wait "$id"
    run bounded 30 eddy job eventlog "$id"
    [ "$status" -eq 0 ]
    names=$(awk '{print $2}' <<<"$output" | tr '\n' ' ')
    [[ "$names" == "submit "*"alloc "*"start "*"finish "*"clean " ]]
    run bounded 30 eddy job eventlog --json "$id"
    [ "$(jq -r '.name' <<<"${lines[0]}")" = submit ]
    jq -e '.timestamp > 0 and (.context | type == "object")' <<<"${lines[0]}"
    run bounded 30 eddy job eventlog --follow "$id"
    [ "$status" -eq 0 ]
    [[ "${lines[-1]}" == *" clean "* ]]
}

@test "errors name the job: unknown IDs" {
    for sub in info wait cancel eventlog attach kill; do
        run bounded 30 eddy job "$sub" 987654
        [ "$status" -eq 1 ]
        [[ "$output" == *"eddy job $sub: job 987654: "* ]]
    done
    run bounded 30 eddy job info 987654
    [ "$output" = "eddy job info: job 987654: no such job" ]
}

@test "a wrong layout is refused before submitting, naming why" {
    run eddy run -N 2 -n 3 true
    [ "$status" -eq 1 ]
    [[ "$output" == *"3 tasks do not divide evenly over 2 nodes"* ]]
    run eddy submit --output='x{{bogus}}' true
    [ "$status" -eq 1 ]
    [[ "$output" == *"{{bogus}}"* ]]
    run eddy submit --input-ranks=0 true
    [ "$status" -eq 1 ]
    [[ "$output" == *"--input-ranks needs --input"* ]]
    run eddy run -n 2 true : -N 2 true
    [ "$status" -eq 1 ]
    [ "$output" = "eddy run: '--nodes' applies to the whole job: give it before the first command" ]
}

@test "a job larger than the instance is refused" {
    run bounded 30 eddy submit -n 9 true
    [ "$status" -eq 1 ]
    [[ "$output" == "eddy submit: "*"never fits"* ]]
    run bounded 30 eddy run -N 3 true
    [ "$status" -eq 1 ]
    [[ "$output" == *"never fits"* ]]
    run bounded 30 eddy run -c 5 true
    [ "$status" -eq 1 ]
    [[ "$output" == *"never fits"* ]]
}

@test "a missing program is an exception naming the rank, never a hang" {
    run bounded 30 eddy run -n 2 /nonexistent/prog
    [ "$status" -ne 0 ]
    [[ "$output" == *"exception"* ]]
    [[ "$output" == *"rank"* ]]
    [[ "$output" == *"No such file"* || "$output" == *"ENOENT"* ]]
}

@test "a time limit ends a job that runs too long" {
    s=$(unique_seconds)
    id=$(eddy submit -t 1 sleep "$s")
    run bounded 15 eddy job wait "$id"
    # never leave the sleeper behind, whatever happened
    eddy job cancel "$id" 2>/dev/null || true
    bounded 30 eddy job wait "$id" || true
    [ "$status" -ne 0 ]
    [ "$status" -ne 124 ] # not our bound: the job's own limit
    run eddy job info --json "$id"
    [ "$(jq -r .exception.type <<<"$output")" != cancel ]
}

@test "stdin from a file descriptor" {
    printf 'from-fd\n' >"$T/fdin"
    run bounded 30 sh -c "eddy run -n 2 -l --input=/dev/fd/5 cat 5<'$T/fdin'"
    [ "$status" -eq 0 ]
    [ "$(printf '%s\n' "${lines[@]}" | sort | tr '\n' ' ')" = "0: from-fd 1: from-fd " ]
}

@test "--env-remove='*' leaves the tasks only eddy's own variables" {
    run bounded 30 eddy run -n 1 --env-remove='*' /usr/bin/env
    [ "$status" -eq 0 ]
    local names
    names=$(printf '%s\n' "${lines[@]}" | cut -d= -f1 | grep -v -E '^(EDDY_|PMI_)' || true)
    [ -z "$names" ]
    [[ "$output" == *"EDDY_JOB_ID="* ]]
}
