/* fuzz_tcpauth.c - libFuzzer target for what a tcp:// peer sends before
 * it is authenticated: the bodies of "client.challenge", "client.auth"
 * and the greeting (tcpauth_decode_*()), and tcp:// URIs.
 *
 * Every failure must explain itself; a decoded nonce or mac must be the
 * hex it came from.
 */
#include <jansson.h>
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/token.h"

/* The broker accepts frames of a few KiB before authentication. */
#define TCPAUTH_FUZZ_MAX 8192

static void check_hex(const json_t *body,
                      const char *key,
                      const unsigned char *bin,
                      size_t len)
{
    char hex[2 * TOKEN_SIZE + 1];
    const char *s = json_string_value(json_object_get(body, key));

    sodium_bin2hex(hex, sizeof(hex), bin, len);
    if (!s || strcasecmp(s, hex) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char n[TOKEN_SIZE], m[TOKEN_MAC_SIZE];
    struct tcp_uri u;
    eddy_error_t err;
    json_t *o;
    char *str;

    if (size > TCPAUTH_FUZZ_MAX)
        return 0;
    if (!(str = malloc(size + 1)))
        abort();
    memcpy(str, data, size);
    str[size] = '\0';
    err.text[0] = '\0';
    if (tcp_uri_parse(str, &u, &err) == 0) {
        if (!u.host[0] || atoi(u.port) < 1 || atoi(u.port) > 65535)
            abort();
    } else if (!err.text[0])
        abort();
    if ((o = json_loadb((const char *)data, size, 0, NULL))) {
        err.text[0] = '\0';
        if (tcpauth_decode_challenge(o, n, &err) == 0)
            check_hex(o, "nonce", n, sizeof(n));
        else if (!err.text[0])
            abort();
        err.text[0] = '\0';
        if (tcpauth_decode_auth(o, m, n, &err) == 0) {
            check_hex(o, "mac", m, sizeof(m));
            check_hex(o, "nonce", n, sizeof(n));
        } else if (!err.text[0])
            abort();
        err.text[0] = '\0';
        if (tcpauth_decode_greeting(o, m, &err) == 0)
            check_hex(o, "mac", m, sizeof(m));
        else if (!err.text[0])
            abort();
        json_decref(o);
    }
    free(str);
    return 0;
}
