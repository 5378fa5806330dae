/* token.h - tokens of remote (tcp://) clients: URIs, token files and the
 * challenge-response that proves a client holds the token.
 *
 * Lifecycle:
 *  1. Rank 0, listening for clients on TCP, knows its URI tcp://HOST:PORT
 *     (tcp_uri_parse()), makes a fresh random token and writes it with
 *     token_create(): mode 0600, at $EDDY_TOKEN_FILE or the first usable
 *     default place (token_default_paths()).  It removes the file at exit.
 *  2. A client given tcp://HOST:PORT finds the file with token_find() (the
 *     same rule) and reads it with token_read(), which refuses a file that
 *     is not the caller's own or that others may read.
 *  3. On each connection the broker sends a random nonce (a
 *     "client.challenge" event); the client answers with
 *     token_mac("eddy-client", nonce) and a nonce of its own
 *     ("client.auth"); the broker checks with token_mac_verify() (constant
 *     time) and greets with token_mac("eddy-broker", client nonce), so the
 *     client knows it reached the instance and not an impostor on a reused
 *     port.  tcpauth_decode_*() parse those bodies (fuzzed).
 *
 * Invariants: tokens and nonces are TOKEN_SIZE random bytes from libsodium;
 * token files hold exactly 64 hex digits and an optional newline.  Nothing
 * here logs; every failure fills 'err' and sets errno.
 */
#ifndef EDDY_COMMON_TOKEN_H
#define EDDY_COMMON_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "eddy/core.h"

#define TCP_SCHEME "tcp://"
#define TOKEN_SIZE 32      /* crypto_auth_KEYBYTES: one HMAC key */
#define TOKEN_MAC_SIZE 32  /* crypto_auth_BYTES */
#define TOKEN_HOST_MAX 255 /* a DNS name */
/* A token file is 64 hex digits and a newline; more is not a token. */
#define TOKEN_FILE_MAX 80
/* Default places tried in order (token_default_paths()). */
#define TOKEN_PATHS_MAX 2
#define TOKEN_PATH_MAX 4096 /* PATH_MAX */

/* The labels that keep the client's and the broker's proofs apart. */
#define TOKEN_LABEL_CLIENT "eddy-client"
#define TOKEN_LABEL_BROKER "eddy-broker"

struct tcp_uri {
    char host[TOKEN_HOST_MAX + 1]; /* without the [] of an IPv6 address */
    char port[6];                  /* decimal, 1..65535 */
};

/* Parse "tcp://HOST:PORT" (HOST a name, an IPv4 address or [IPv6]; PORT
 * 1..65535; nothing after).  -1 with EINVAL and 'err' naming the fault. */
int tcp_uri_parse(const char *uri, struct tcp_uri *u, eddy_error_t *err);

/* The default token file paths for 'u', most preferred first:
 *   $XDG_RUNTIME_DIR/eddy/tcp-HOST-PORT.token   (if XDG_RUNTIME_DIR is set)
 *   $HOME/.local/state/eddy/tcp-HOST-PORT.token (if HOME is set)
 * HOST keeps [A-Za-z0-9.-] and turns anything else into '_'.  Fills up to
 * TOKEN_PATHS_MAX buffers; returns how many (0: neither variable set,
 * or the paths would be too long). */
int token_default_paths(const struct tcp_uri *u,
                        char paths[TOKEN_PATHS_MAX][TOKEN_PATH_MAX]);

/* Where the client should read the token of 'u': $EDDY_TOKEN_FILE if set,
 * else the first default path that exists.  -1 with ENOENT and 'err'
 * saying "no token for instance tcp://HOST:PORT at PATH" when none
 * exists.  'buf' is written only on success. */
int token_find(const struct tcp_uri *u,
               char *buf,
               size_t size,
               eddy_error_t *err);

/* Read the token at 'path' into 'token'.  Refuses (EACCES) a file we
 * cannot open, one not owned by the effective uid ("another user's
 * token") or one the group or others may read; EINVAL if it is not 64 hex
 * digits; ENOENT if it does not exist.  'token' is written only on
 * success. */
int token_read(const char *path,
               unsigned char token[TOKEN_SIZE],
               eddy_error_t *err);

/* Make a random token and write it for 'u' at 'file' (may be NULL; its
 * directory must exist) or else the first default path whose directory
 * can be made (mode 0700), atomically (temp file, mode 0600, then
 * rename).  $EDDY_TOKEN_FILE is not used here: it tells clients where to
 * look.  The path used goes to 'path'.  -1 with errno and 'err'. */
int token_create(const struct tcp_uri *u,
                 const char *file,
                 unsigned char token[TOKEN_SIZE],
                 char *path,
                 size_t size,
                 eddy_error_t *err);

/* mac = HMAC (libsodium crypto_auth) of label|nonce keyed by the token. */
void token_mac(const unsigned char token[TOKEN_SIZE],
               const char *label,
               const unsigned char nonce[TOKEN_SIZE],
               unsigned char mac[TOKEN_MAC_SIZE]);

/* Whether 'mac' is token_mac(token, label, nonce); constant time. */
bool token_mac_verify(const unsigned char token[TOKEN_SIZE],
                      const char *label,
                      const unsigned char nonce[TOKEN_SIZE],
                      const unsigned char mac[TOKEN_MAC_SIZE]);

/* The body of "client.challenge": {"nonce": 64 hex digits, ...}. */
int tcpauth_decode_challenge(const json_t *body,
                             unsigned char nonce[TOKEN_SIZE],
                             eddy_error_t *err);

/* The body of "client.auth": {"mac": 64 hex, "nonce": 64 hex}. */
int tcpauth_decode_auth(const json_t *body,
                        unsigned char mac[TOKEN_MAC_SIZE],
                        unsigned char nonce[TOKEN_SIZE],
                        eddy_error_t *err);

/* The "mac" (64 hex digits) of the broker's greeting to a tcp client. */
int tcpauth_decode_greeting(const json_t *body,
                            unsigned char mac[TOKEN_MAC_SIZE],
                            eddy_error_t *err);

#endif /* !EDDY_COMMON_TOKEN_H */
