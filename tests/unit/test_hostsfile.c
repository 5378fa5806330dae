/* test_hostsfile.c - unit tests for src/common/hostsfile.c */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/common/hostsfile.h"

static hostsfile_t *parse(const char *text, eddy_error_t *err)
{
    return hostsfile_parse(text, strlen(text), err);
}

static void check_entry(const hostsfile_t *hf,
                        uint32_t rank,
                        const char *host,
                        const char *addr,
                        int port)
{
    assert_non_null(hostsfile_host(hf, rank));
    assert_string_equal(hostsfile_host(hf, rank), host);
    assert_non_null(hostsfile_addr(hf, rank));
    assert_string_equal(hostsfile_addr(hf, rank), addr);
    assert_int_equal(hostsfile_port(hf, rank), port);
}

static void test_good_simple(void **state)
{
    eddy_error_t err = {{0}};
    hostsfile_t *hf = parse("# rank host addr:port\n"
                            "0 node0 10.0.0.1:8050\n"
                            "\n"
                            "1\tnode1\tnode1.ib:8051   # trailing comment\n"
                            "   \t\n"
                            "2 node2.cluster.example.com 10.0.0.3:0\n",
                            &err);

    if (!hf)
        fail_msg("parse failed: %s", err.text);
    assert_int_equal(hostsfile_size(hf), 3);
    check_entry(hf, 0, "node0", "10.0.0.1", 8050);
    check_entry(hf, 1, "node1", "node1.ib", 8051);
    check_entry(hf, 2, "node2.cluster.example.com", "10.0.0.3", 0);

    errno = 0;
    assert_null(hostsfile_host(hf, 3));
    assert_null(hostsfile_addr(hf, 3));
    assert_int_equal(hostsfile_port(hf, 3), -1);
    assert_int_equal(errno, EINVAL);
    assert_null(hostsfile_host(hf, UINT32_MAX));
    hostsfile_destroy(hf);
}

static void test_good_any_order_crlf_no_final_newline(void **state)
{
    eddy_error_t err = {{0}};
    hostsfile_t *hf = parse("2 c 127.0.0.1:65535\r\n"
                            "0 a 127.0.0.1:1\r\n"
                            "#\r\n"
                            "1 b_x-1 localhost:2",
                            &err);

    if (!hf)
        fail_msg("parse failed: %s", err.text);
    assert_int_equal(hostsfile_size(hf), 3);
    check_entry(hf, 0, "a", "127.0.0.1", 1);
    check_entry(hf, 1, "b_x-1", "localhost", 2);
    check_entry(hf, 2, "c", "127.0.0.1", 65535);
    hostsfile_destroy(hf);
}

static void test_good_single_and_not_nul_terminated(void **state)
{
    /* The parser honours 'len' and needs no terminating NUL. */
    static const char text[] = {'0', ' ', 'h', ' ', '1', '.', '2',
                                '.', '3', '.', '4', ':', '9', 'X'};
    eddy_error_t err = {{0}};
    hostsfile_t *hf = hostsfile_parse(text, sizeof(text) - 1, &err);

    if (!hf)
        fail_msg("parse failed: %s", err.text);
    assert_int_equal(hostsfile_size(hf), 1);
    check_entry(hf, 0, "h", "1.2.3.4", 9);
    hostsfile_destroy(hf);
}

static void test_good_limits(void **state)
{
    char label[64], text[512];
    eddy_error_t err = {{0}};
    hostsfile_t *hf;

    /* A 63-character label, a 0 octet and port 0 are all fine. */
    memset(label, 'z', 63);
    label[63] = '\0';
    snprintf(text, sizeof(text), "0 %s.%s 0.0.0.0:0\n1 x %s:65535\n", label,
             label, label);
    hf = parse(text, &err);
    if (!hf)
        fail_msg("parse failed: %s", err.text);
    assert_int_equal(hostsfile_size(hf), 2);
    assert_int_equal(strlen(hostsfile_host(hf, 0)), 127);
    check_entry(hf, 1, "x", label, 65535);
    assert_string_equal(hostsfile_addr(hf, 0), "0.0.0.0");
    hostsfile_destroy(hf);
}

static void test_good_many_ranks(void **state)
{
    size_t cap = 64 * 1024, len = 0;
    char *buf = malloc(cap);
    eddy_error_t err = {{0}};
    hostsfile_t *hf;

    assert_non_null(buf);
    /* Reverse order, to exercise growth by rank. */
    for (int r = 999; r >= 0; r--)
        len += (size_t)snprintf(buf + len, cap - len, "%d n%d 10.0.%d.%d:%d\n",
                                r, r, r / 256, r % 256, 1000 + r);
    hf = hostsfile_parse(buf, len, &err);
    if (!hf)
        fail_msg("parse failed: %s", err.text);
    assert_int_equal(hostsfile_size(hf), 1000);
    check_entry(hf, 0, "n0", "10.0.0.0", 1000);
    check_entry(hf, 999, "n999", "10.0.3.231", 1999);
    hostsfile_destroy(hf);
    free(buf);
}

/* Parsing 'text' fails with 'errnum' and a message containing 'msg'. */
static void check_bad(const char *text, int errnum, const char *msg)
{
    eddy_error_t err = {{0}};
    hostsfile_t *hf;

    errno = 0;
    hf = parse(text, &err);
    if (hf) {
        hostsfile_destroy(hf);
        fail_msg("'%s' parsed but should not", text);
    }
    assert_int_equal(errno, errnum);
    if (!strstr(err.text, msg))
        fail_msg("'%s': message '%s' lacks '%s'", text, err.text, msg);
}

static void test_bad_lines(void **state)
{
    const char *ok2 = "0 a 1.1.1.1:1\n1 b 1.1.1.2:1\n";
    char buf[256];

    /* Each bad line comes third, after two good ones and a comment. */
#define BAD(line, errnum, msg)                                                 \
    do {                                                                       \
        snprintf(buf, sizeof(buf), "%s# c\n%s\n", ok2, line);                  \
        check_bad(buf, errnum, "line 4: " msg);                                \
    } while (0)

    BAD("2", EINVAL, "1 field, expected RANK HOST ADDR:PORT");
    BAD("2 c", EINVAL, "2 fields, expected RANK HOST ADDR:PORT");
    BAD("2 c 1.1.1.3:1 extra", EINVAL, "too many fields");
    BAD("x c 1.1.1.3:1", EINVAL, "rank 'x' is not a number");
    BAD("-2 c 1.1.1.3:1", EINVAL, "rank '-2' is not a number");
    BAD("+2 c 1.1.1.3:1", EINVAL, "rank '+2' is not a number");
    BAD("2x c 1.1.1.3:1", EINVAL, "rank '2x' is not a number");
    BAD("99999999999 c 1.1.1.3:1", EINVAL,
        "rank '99999999999' is not a number");
    BAD("65536 c 1.1.1.3:1", EINVAL, "rank 65536 is too large");
    BAD("1 c 1.1.1.3:1", EINVAL, "rank 1 already given on line 2");
    BAD("2 c! 1.1.1.3:1", EINVAL, "host 'c!' is not a valid hostname");
    BAD("2 -c 1.1.1.3:1", EINVAL, "host '-c' is not a valid hostname");
    BAD("2 .c 1.1.1.3:1", EINVAL, "host '.c' is not a valid hostname");
    BAD("2 c. 1.1.1.3:1", EINVAL, "host 'c.' is not a valid hostname");
    BAD("2 a..b 1.1.1.3:1", EINVAL, "host 'a..b' is not a valid hostname");
    BAD("2 "
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        " 1.1.1.3:1",
        EINVAL,
        "host '" /* quoted, truncated to 40 characters */
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' is not a valid");
    BAD("2 c 1.1.1.3", EINVAL, "'1.1.1.3' is not ADDR:PORT");
    BAD("2 c 1.1.1:1", EINVAL, "address '1.1.1' is not an IPv4 address");
    BAD("2 c 1.1.1.256:1", EINVAL, "address '1.1.1.256' is not an IPv4");
    BAD("2 c 1.1.1.01:1", EINVAL, "address '1.1.1.01' is not an IPv4");
    BAD("2 c 1.1.1.1.1:1", EINVAL, "address '1.1.1.1.1' is not an IPv4");
    BAD("2 c :1", EINVAL, "address '' is not an IPv4");
    BAD("2 c bad$host:1", EINVAL, "address 'bad$host' is not an IPv4");
    BAD("2 c [::1]:1", EINVAL, "address '[::1]' is not an IPv4");
    BAD("2 c 1.1.1.3:", EINVAL, "port '' is not a number in 0..65535");
    BAD("2 c 1.1.1.3:65536", EINVAL, "port '65536' is not a number");
    BAD("2 c 1.1.1.3:-1", EINVAL, "port '-1' is not a number");
    BAD("2 c 1.1.1.3:0x10", EINVAL, "port '0x10' is not a number");
    BAD("2 c 1.1.1.3:123456", EINVAL, "port '123456' is not a number");
    BAD("2 c\x01 1.1.1.3:1", EINVAL, "host 'c?' is not a valid hostname");
#undef BAD
}

static void test_bad_whole_file(void **state)
{
    eddy_error_t err = {{0}};
    static const char nul[] = "0 a 1.1.1.1:1\n1 b\0 1.1.1.1:1\n";

    check_bad("", EINVAL, "no ranks");
    check_bad("# only a comment\n\n", EINVAL, "no ranks");
    check_bad("0 a 1.1.1.1:1\n2 c 1.1.1.1:1\n", EINVAL,
              "rank 1 is missing (line 2 gives rank 2)");
    check_bad("1 a 1.1.1.1:1\n", EINVAL, "rank 0 is missing");

    errno = 0;
    assert_null(hostsfile_parse(nul, sizeof(nul) - 1, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "line 2: NUL byte"));

    errno = 0;
    assert_null(hostsfile_parse(NULL, 5, &err));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(hostsfile_parse(NULL, 0, NULL));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(hostsfile_parse("x", (size_t)HOSTSFILE_MAX_SIZE + 1, &err));
    assert_int_equal(errno, EFBIG);
}

static void test_too_many_ranks(void **state)
{
    size_t cap = (HOSTSFILE_MAX_RANKS + 2) * 24, len = 0;
    char *buf = malloc(cap);
    eddy_error_t err = {{0}};
    hostsfile_t *hf;

    assert_non_null(buf);
    for (uint32_t r = 0; r < HOSTSFILE_MAX_RANKS; r++)
        len += (size_t)snprintf(buf + len, cap - len, "%u h 1.2.3.4:1\n", r);
    /* Exactly the maximum is fine. */
    hf = hostsfile_parse(buf, len, &err);
    if (!hf)
        fail_msg("parse failed: %s", err.text);
    assert_int_equal(hostsfile_size(hf), HOSTSFILE_MAX_RANKS);
    hostsfile_destroy(hf);
    /* One more is E2BIG, whatever its rank. */
    len += (size_t)snprintf(buf + len, cap - len, "5 h 1.2.3.4:1\n");
    errno = 0;
    assert_null(hostsfile_parse(buf, len, &err));
    assert_int_equal(errno, E2BIG);
    assert_non_null(strstr(err.text, "line 65537: more than 65536 ranks"));
    free(buf);
}

static void test_load(void **state)
{
    char path[] = "/tmp/test_hostsfile.XXXXXX";
    const char *text = "0 a 127.0.0.1:5000\n1 b 127.0.0.1:0\n";
    eddy_error_t err = {{0}};
    hostsfile_t *hf;
    int fd = mkstemp(path);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    hf = hostsfile_load(path, &err);
    if (!hf) {
        unlink(path);
        fail_msg("load failed: %s", err.text);
    }
    assert_int_equal(hostsfile_size(hf), 2);
    check_entry(hf, 1, "b", "127.0.0.1", 0);
    hostsfile_destroy(hf);

    /* A parse error names the file and the line. */
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "0 a b c\n", 8), 8);
    close(fd);
    errno = 0;
    assert_null(hostsfile_load(path, &err));
    assert_int_equal(errno, EINVAL);
    unlink(path);
    assert_non_null(strstr(err.text, "hosts file "));
    assert_non_null(strstr(err.text, path));
    assert_non_null(strstr(err.text, ": line 1: too many fields"));

    /* The file is gone now. */
    errno = 0;
    assert_null(hostsfile_load(path, &err));
    assert_int_equal(errno, ENOENT);
    assert_non_null(strstr(err.text, path));
    assert_non_null(strstr(err.text, "No such file"));

    errno = 0;
    assert_null(hostsfile_load("/tmp", &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "not a regular file"));

    errno = 0;
    assert_null(hostsfile_load(NULL, &err));
    assert_int_equal(errno, EINVAL);
}

static void test_destroy_null_errno(void **state)
{
    hostsfile_t *hf = parse("0 a 1.2.3.4:5\n", NULL);

    assert_non_null(hf);
    errno = ENOENT;
    hostsfile_destroy(hf);
    hostsfile_destroy(NULL);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(hostsfile_size(NULL), 0);
    assert_null(hostsfile_host(NULL, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_simple),
        cmocka_unit_test(test_good_any_order_crlf_no_final_newline),
        cmocka_unit_test(test_good_single_and_not_nul_terminated),
        cmocka_unit_test(test_good_limits),
        cmocka_unit_test(test_good_many_ranks),
        cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_bad_whole_file),
        cmocka_unit_test(test_too_many_ranks),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_destroy_null_errno),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
