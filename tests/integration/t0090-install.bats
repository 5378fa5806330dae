#!/usr/bin/env bats
# make install: the commands, the library, its headers and eddy.pc are
# installed, and a program built with pkg-config talks to an instance
# started by the installed eddy.

load helper

setup() {
    PREFIX_DIR=$(mktemp -d)
}

teardown() {
    rm -rf "$PREFIX_DIR"
}

@test "an installed eddy runs, and a program builds against eddy.pc" {
    run bounded 60 cmake --install "$EDDY_BUILD_DIR" --prefix "$PREFIX_DIR"
    [ "$status" -eq 0 ]
    [ -x "$PREFIX_DIR/bin/eddy" ]
    [ -x "$PREFIX_DIR/bin/eddy-broker" ]
    [ -f "$PREFIX_DIR/include/eddy/core.h" ]
    local pcdir
    pcdir=$(dirname "$(find "$PREFIX_DIR" -name eddy.pc)")
    [ -f "$pcdir/eddy.pc" ]
    ls "$pcdir"/../libeddy.so

    cat >"$PREFIX_DIR/prog.c" <<'EOF'
#include <stdio.h>
#include <eddy/core.h>
int main(void)
{
    eddy_error_t err;
    eddy_t *h = eddy_open(NULL, 0, &err);
    if (!h) {
        fprintf(stderr, "%s\n", err.text);
        return 1;
    }
    eddy_future_t *f = eddy_rpc(h, "broker.ping", 1, 0, "{}", NULL, 0);
    int rank = -1;
    if (eddy_rpc_get_unpack(f, "{s:i}", "rank", &rank) < 0) {
        fprintf(stderr, "%s\n", eddy_future_error_string(f));
        return 1;
    }
    printf("size %u, rank %d answered\n", eddy_get_size(h), rank);
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}
EOF
    # A sanitized libeddy needs the program built with the same runtime.
    local san=""
    if grep -q '^EDDY_ASAN:BOOL=ON' "$EDDY_BUILD_DIR/CMakeCache.txt"; then
        san="-fsanitize=address,undefined"
    fi
    run env PKG_CONFIG_PATH="$pcdir" SAN="$san" sh -c \
        'cc $SAN -o "$0/prog" "$0/prog.c" $(pkg-config --cflags --libs eddy) \
            -Wl,-rpath,$(pkg-config --variable=libdir eddy)' "$PREFIX_DIR"
    echo "$output"
    [ "$status" -eq 0 ]

    # Run the installed eddy from a PATH without the build tree.
    run bounded 60 env PATH="$PREFIX_DIR/bin:/usr/bin:/bin" \
        "$PREFIX_DIR/bin/eddy" start --test-size=2 "$PREFIX_DIR/prog"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$output" = "size 2, rank 1 answered" ]
}
