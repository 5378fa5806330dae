#!/usr/bin/env bats
# Every command answers -h, and help lists them all.

load helper

commands() {
    eddy help | awk '/^Commands:/ {on = 1; next} on && NF {print $1}'
}

@test "eddy help lists the commands" {
    run eddy help
    [ "$status" -eq 0 ]
    for c in start exec ping overlay dmesg uri shutdown version help; do
        [[ "$output" == *"  $c "* ]]
    done
}

@test "every command answers -h and --help with its usage" {
    local n=0
    for c in $(commands); do
        run eddy "$c" -h
        [ "$status" -eq 0 ]
        [[ "$output" == *"Usage: eddy $c"* ]]
        run eddy "$c" --help
        [ "$status" -eq 0 ]
        [[ "$output" == *"Usage: eddy $c"* ]]
        run eddy help "$c"
        [ "$status" -eq 0 ]
        [[ "$output" == *"Usage: eddy $c"* ]]
        n=$((n + 1))
    done
    [ "$n" -ge 9 ]
}

@test "an unknown command is a clear error" {
    run eddy frobnicate
    [ "$status" -eq 1 ]
    [[ "$output" == *"'frobnicate' is not an eddy command"* ]]
    run eddy help frobnicate
    [ "$status" -eq 1 ]
    [[ "$output" == *"'frobnicate' is not an eddy command"* ]]
}

@test "eddy version prints the version" {
    run eddy version
    [ "$status" -eq 0 ]
    [[ "$output" =~ ^eddy\ [0-9]+\.[0-9]+\.[0-9]+ ]]
}

@test "commands that need an instance say so when there is none" {
    run env -u EDDY_URI eddy ping -c 1 0
    [ "$status" -eq 1 ]
    [[ "$output" == *"EDDY_URI is not set"* ]]
    run env EDDY_URI=local:///nonexistent/local-0 eddy exec true
    [ "$status" -eq 1 ]
    [[ "$output" == *"/nonexistent/local-0"* ]]
    [[ "$output" == *"No such file or directory"* ]]
    run env EDDY_URI=bogus://x eddy uri
    [ "$status" -eq 1 ]
    [[ "$output" == *"bogus"* ]]
}
