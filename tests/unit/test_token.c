/* test_token.c - unit tests for src/common/token.c */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <sodium.h>

#include "src/common/rmtree.h"
#include "src/common/token.h"

static void test_uri_parse(void **state)
{
    struct tcp_uri u;
    eddy_error_t err;

    (void)state;
    assert_int_equal(tcp_uri_parse("tcp://node1:4000", &u, &err), 0);
    assert_string_equal(u.host, "node1");
    assert_string_equal(u.port, "4000");
    assert_int_equal(tcp_uri_parse("tcp://[::1]:65535", &u, &err), 0);
    assert_string_equal(u.host, "::1");
    assert_string_equal(u.port, "65535");
    assert_int_equal(tcp_uri_parse("tcp://10.0.0.1:007", &u, &err), 0);
    assert_string_equal(u.port, "7");
}

static void test_uri_bad(void **state)
{
    const char *bad[] = {
        "local:///x",  "tcp://",         "tcp://h",       "tcp://:1",
        "tcp://h:",    "tcp://h:0",      "tcp://h:65536", "tcp://h:1x",
        "tcp://h:-1",  "tcp://[::1:5",   "tcp://a b:1",   "tcp://h/x:1",
        "tcp://::1:5", "tcp://h:000001",
    };
    struct tcp_uri u;
    eddy_error_t err;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err.text[0] = '\0';
        errno = 0;
        assert_int_equal(tcp_uri_parse(bad[i], &u, &err), -1);
        assert_int_equal(errno, EINVAL);
        assert_true(strlen(err.text) > 0);
    }
    assert_int_equal(tcp_uri_parse(NULL, &u, &err), -1);
    assert_int_equal(errno, EINVAL);
}

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/test_token.XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    unsetenv("EDDY_TOKEN_FILE");
    setenv("XDG_RUNTIME_DIR", dir, 1);
    setenv("HOME", "/nonexistent-home-for-test", 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return rmtree(dir, NULL);
}

static void test_paths(void **state)
{
    char paths[TOKEN_PATHS_MAX][TOKEN_PATH_MAX];
    char want[TOKEN_PATH_MAX + 64];
    struct tcp_uri u;

    (void)state;
    assert_int_equal(tcp_uri_parse("tcp://[fe80::1%eth0]:99", &u, NULL), 0);
    assert_int_equal(token_default_paths(&u, paths), 2);
    snprintf(want, sizeof(want), "%s/eddy/tcp-fe80__1_eth0-99.token", dir);
    assert_string_equal(paths[0], want);
    assert_string_equal(paths[1], "/nonexistent-home-for-test/.local/state/"
                                  "eddy/tcp-fe80__1_eth0-99.token");
    setenv("XDG_RUNTIME_DIR", "relative", 1);
    assert_int_equal(token_default_paths(&u, paths), 1);
    setenv("XDG_RUNTIME_DIR", dir, 1);
}

static void test_create_find_read(void **state)
{
    unsigned char tok[TOKEN_SIZE], back[TOKEN_SIZE];
    char path[TOKEN_PATH_MAX], found[TOKEN_PATH_MAX], want[TOKEN_PATH_MAX];
    struct tcp_uri u;
    eddy_error_t err;
    struct stat st;

    (void)state;
    assert_int_equal(tcp_uri_parse("tcp://127.0.0.1:4242", &u, NULL), 0);
    /* nothing there yet: the message names the instance and the paths */
    assert_int_equal(token_find(&u, found, sizeof(found), &err), -1);
    assert_int_equal(errno, ENOENT);
    assert_non_null(strstr(err.text, "no token for instance "
                                     "tcp://127.0.0.1:4242 at "));
    /* $EDDY_TOKEN_FILE is for clients: the writer does not use it */
    setenv("EDDY_TOKEN_FILE", "/nonexistent/dir/tok", 1);
    assert_int_equal(token_create(&u, NULL, tok, path, sizeof(path), &err), 0);
    unsetenv("EDDY_TOKEN_FILE");
    snprintf(want, sizeof(want), "%s/eddy/tcp-127.0.0.1-4242.token", dir);
    assert_string_equal(path, want);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(token_find(&u, found, sizeof(found), &err), 0);
    assert_string_equal(found, path);
    assert_int_equal(token_read(found, back, &err), 0);
    assert_memory_equal(tok, back, TOKEN_SIZE);

    /* others may read it: refused */
    assert_int_equal(chmod(path, 0640), 0);
    assert_int_equal(token_read(path, back, &err), -1);
    assert_int_equal(errno, EACCES);
    assert_non_null(strstr(err.text, "may be read by others (mode 0640)"));
    assert_int_equal(chmod(path, 0600), 0);

    /* EDDY_TOKEN_FILE wins */
    setenv("EDDY_TOKEN_FILE", "/x/y", 1);
    assert_int_equal(token_find(&u, found, sizeof(found), &err), 0);
    assert_string_equal(found, "/x/y");
    assert_int_equal(token_read(found, back, &err), -1);
    assert_int_equal(errno, ENOENT);
    unsetenv("EDDY_TOKEN_FILE");
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static void test_read_bad(void **state)
{
    const char *bad[] = {"", "\n", "abc\n", "zz", "0123",
                         /* 63 and 65 digits, two newlines */
                         "00000000000000000000000000000000000000000000000000"
                         "0000000000000",
                         "00000000000000000000000000000000000000000000000000"
                         "000000000000000",
                         "00000000000000000000000000000000000000000000000000"
                         "00000000000000\n\n"};
    unsigned char back[TOKEN_SIZE];
    char path[128], link[128];
    eddy_error_t err;

    (void)state;
    snprintf(path, sizeof(path), "%s/t", dir);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_file(path, bad[i], 0600);
        assert_int_equal(token_read(path, back, &err), -1);
        assert_int_equal(errno, EINVAL);
        assert_non_null(strstr(err.text, "malformed"));
    }
    write_file(path,
               "000102030405060708090a0b0c0d0e0f"
               "101112131415161718191a1b1c1d1e1f\n",
               0600);
    assert_int_equal(token_read(path, back, &err), 0);
    assert_int_equal(back[31], 0x1f);
    snprintf(link, sizeof(link), "%s/l", dir);
    assert_int_equal(symlink(path, link), 0);
    assert_int_equal(token_read(link, back, &err), -1);
    assert_int_equal(errno, EACCES);
    assert_non_null(strstr(err.text, "symlink"));
    if (geteuid() == 0) {
        assert_int_equal(chown(path, 65534, 65534), 0);
        assert_int_equal(token_read(path, back, &err), -1);
        assert_int_equal(errno, EACCES);
        assert_non_null(strstr(err.text, "belongs to uid 65534"));
    }
}

static void test_mac(void **state)
{
    unsigned char tok[TOKEN_SIZE], other[TOKEN_SIZE], nonce[TOKEN_SIZE];
    unsigned char mac[TOKEN_MAC_SIZE];

    (void)state;
    randombytes_buf(tok, sizeof(tok));
    randombytes_buf(nonce, sizeof(nonce));
    memcpy(other, tok, sizeof(tok));
    other[5] ^= 1;
    token_mac(tok, TOKEN_LABEL_CLIENT, nonce, mac);
    assert_true(token_mac_verify(tok, TOKEN_LABEL_CLIENT, nonce, mac));
    assert_false(token_mac_verify(other, TOKEN_LABEL_CLIENT, nonce, mac));
    /* the client's proof is not the broker's */
    assert_false(token_mac_verify(tok, TOKEN_LABEL_BROKER, nonce, mac));
    nonce[0] ^= 1;
    assert_false(token_mac_verify(tok, TOKEN_LABEL_CLIENT, nonce, mac));
}

static void test_decode(void **state)
{
    unsigned char n[TOKEN_SIZE], m[TOKEN_MAC_SIZE];
    const char *hex = "000102030405060708090a0b0c0d0e0f"
                      "101112131415161718191a1b1c1d1e1f";
    eddy_error_t err;
    json_t *o;

    (void)state;
    o = json_pack("{s:s}", "nonce", hex);
    assert_int_equal(tcpauth_decode_challenge(o, n, &err), 0);
    assert_int_equal(n[31], 0x1f);
    assert_int_equal(tcpauth_decode_auth(o, m, n, &err), -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(err.text, "\"mac\""));
    json_decref(o);
    o = json_pack("{s:s s:s}", "nonce", hex, "mac", hex);
    assert_int_equal(tcpauth_decode_auth(o, m, n, &err), 0);
    assert_int_equal(tcpauth_decode_greeting(o, m, &err), 0);
    json_decref(o);
    o = json_pack("{s:s}", "nonce", "00zz");
    assert_int_equal(tcpauth_decode_challenge(o, n, &err), -1);
    json_decref(o);
    o = json_pack("{s:i}", "nonce", 5);
    assert_int_equal(tcpauth_decode_challenge(o, n, &err), -1);
    json_decref(o);
    assert_int_equal(tcpauth_decode_challenge(NULL, n, &err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uri_parse),
        cmocka_unit_test(test_uri_bad),
        cmocka_unit_test_setup_teardown(test_paths, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_find_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_bad, setup, teardown),
        cmocka_unit_test(test_mac),
        cmocka_unit_test(test_decode),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    if (sodium_init() < 0)
        return 1;
    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
