/* token.c - tcp:// URIs, token files, and the client challenge-response.
 *
 * The token file is the only secret a remote client needs, so reading it
 * is strict: O_NOFOLLOW (a symlink planted in a shared directory cannot
 * redirect us), owned by us, not readable by group or others.  The
 * broker's proof of the token (in its greeting) uses another label than
 * the client's, so a client's answer can never be replayed as a greeting.
 */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errprintf.h"
#include "token.h"
#include "hex.h"

int tcp_uri_parse(const char *uri, struct tcp_uri *u, eddy_error_t *err)
{
    const char *host, *hend, *port;
    size_t hlen;
    char *end;
    unsigned long p;

    if (!uri || !u) {
        errno = EINVAL;
        return errprintf(err, "no URI");
    }
    if (strncmp(uri, TCP_SCHEME, strlen(TCP_SCHEME)) != 0) {
        errno = EINVAL;
        return errprintf(err, "'%.64s' is not a tcp:// URI", uri);
    }
    host = uri + strlen(TCP_SCHEME);
    if (*host == '[') {
        host++;
        if (!(hend = strchr(host, ']')) || hend[1] != ':') {
            errno = EINVAL;
            return errprintf(err,
                             "malformed URI '%.64s' (expected "
                             "tcp://[IPV6]:PORT)",
                             uri);
        }
        port = hend + 2;
    } else {
        if (!(hend = strrchr(host, ':'))) {
            errno = EINVAL;
            return errprintf(err,
                             "malformed URI '%.64s' (expected "
                             "tcp://HOST:PORT)",
                             uri);
        }
        port = hend + 1;
    }
    hlen = (size_t)(hend - host);
    if (hlen == 0 || hlen > TOKEN_HOST_MAX) {
        errno = EINVAL;
        return errprintf(err, "malformed URI '%.64s': %s host", uri,
                         hlen ? "too long a" : "empty");
    }
    for (size_t i = 0; i < hlen; i++) {
        unsigned char ch = (unsigned char)host[i];
        if (ch <= ' ' || ch >= 0x7f || ch == '/' || ch == '[' || ch == ']' ||
            (ch == ':' && uri[strlen(TCP_SCHEME)] != '[')) {
            errno = EINVAL;
            return errprintf(err, "malformed URI '%.64s': bad host", uri);
        }
    }
    errno = 0;
    p = strtoul(port, &end, 10);
    if (*port < '0' || *port > '9' || *end != '\0' || errno || p < 1 ||
        p > 65535 || end - port > 5) {
        errno = EINVAL;
        return errprintf(err,
                         "malformed URI '%.64s': the port must be a number "
                         "from 1 to 65535",
                         uri);
    }
    memcpy(u->host, host, hlen);
    u->host[hlen] = '\0';
    snprintf(u->port, sizeof(u->port), "%lu", p);
    return 0;
}

static void file_name(const struct tcp_uri *u, char *buf, size_t size)
{
    size_t n;

    snprintf(buf, size, "tcp-%s-%s.token", u->host, u->port);
    n = strlen("tcp-") + strlen(u->host);
    for (size_t i = strlen("tcp-"); i < n && i < size; i++) {
        char ch = buf[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '.' || ch == '-'))
            buf[i] = '_';
    }
}

int token_default_paths(const struct tcp_uri *u,
                        char paths[TOKEN_PATHS_MAX][TOKEN_PATH_MAX])
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    const char *home = getenv("HOME");
    char name[TOKEN_HOST_MAX + 32];
    int n = 0, len;

    file_name(u, name, sizeof(name));
    /* Only absolute directories: a relative one would depend on the cwd. */
    if (xdg && xdg[0] == '/') {
        len = snprintf(paths[n], TOKEN_PATH_MAX, "%s/eddy/%s", xdg, name);
        if (len > 0 && len < TOKEN_PATH_MAX)
            n++;
    }
    if (home && home[0] == '/') {
        len = snprintf(paths[n], TOKEN_PATH_MAX, "%s/.local/state/eddy/%s",
                       home, name);
        if (len > 0 && len < TOKEN_PATH_MAX)
            n++;
    }
    return n;
}

static const char *env_token_file(void)
{
    const char *s = getenv("EDDY_TOKEN_FILE");

    return s && *s ? s : NULL;
}

int token_find(const struct tcp_uri *u,
               char *buf,
               size_t size,
               eddy_error_t *err)
{
    char paths[TOKEN_PATHS_MAX][TOKEN_PATH_MAX];
    const char *env = env_token_file();
    struct stat st;
    int n;

    if (env) {
        if (strlen(env) >= size) {
            errno = ENAMETOOLONG;
            return errprintf(err, "EDDY_TOKEN_FILE is too long");
        }
        snprintf(buf, size, "%s", env);
        return 0;
    }
    if ((n = token_default_paths(u, paths)) == 0) {
        errno = ENOENT;
        return errprintf(err,
                         "no token for instance tcp://%s:%s: neither "
                         "XDG_RUNTIME_DIR nor HOME is set (set "
                         "EDDY_TOKEN_FILE)",
                         u->host, u->port);
    }
    for (int i = 0; i < n; i++) {
        /* lstat: a dangling or hostile symlink is still "there", and
         * token_read() then says what is wrong with it. */
        if (lstat(paths[i], &st) == 0) {
            if (strlen(paths[i]) >= size) {
                errno = ENAMETOOLONG;
                return errprintf(err, "token path too long");
            }
            snprintf(buf, size, "%s", paths[i]);
            return 0;
        }
    }
    errno = ENOENT;
    return errprintf(err, "no token for instance tcp://%s:%s at %.*s%s%.*s",
                     u->host, u->port, 100, paths[0], n > 1 ? " or " : "", 100,
                     n > 1 ? paths[1] : "");
}

int token_read(const char *path,
               unsigned char token[TOKEN_SIZE],
               eddy_error_t *err)
{
    char buf[TOKEN_FILE_MAX + 1];
    unsigned char tok[TOKEN_SIZE];
    struct stat st;
    ssize_t n;
    size_t len;
    int fd, e;

    if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY)) < 0) {
        e = errno;
        if (e == ELOOP) {
            errno = EACCES;
            return errprintf(err, "token file %s is a symlink: refusing it",
                             path);
        }
        errno = e;
        if (e == ENOENT)
            return errprintf(err, "no token file at %s", path);
        if (e == EACCES)
            return errprintf(err,
                             "cannot read token file %s: %s (another "
                             "user's token?)",
                             path, strerror(e));
        return errprintf(err, "cannot read token file %s: %s", path,
                         strerror(e));
    }
    if (fstat(fd, &st) < 0) {
        e = errno;
        close(fd);
        errno = e;
        return errprintf(err, "cannot stat token file %s: %s", path,
                         strerror(e));
    }
    if (st.st_uid != geteuid()) {
        close(fd);
        errno = EACCES;
        return errprintf(err,
                         "token file %s belongs to uid %u, not to you "
                         "(uid %u): another user's token",
                         path, (unsigned)st.st_uid, (unsigned)geteuid());
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077)) {
        close(fd);
        errno = EACCES;
        if (!S_ISREG(st.st_mode))
            return errprintf(err, "token file %s is not a regular file", path);
        return errprintf(err,
                         "token file %s may be read by others (mode %04o): "
                         "refusing it (chmod 600)",
                         path, (unsigned)(st.st_mode & 07777));
    }
    n = read(fd, buf, sizeof(buf));
    e = errno;
    close(fd);
    if (n < 0) {
        errno = e;
        return errprintf(err, "cannot read token file %s: %s", path,
                         strerror(e));
    }
    len = (size_t)n;
    if (len > 0 && buf[len - 1] == '\n')
        len--;
    if (hex_decode(buf, len, tok, sizeof(tok)) < 0) {
        sodium_memzero(buf, sizeof(buf));
        errno = EINVAL;
        return errprintf(err,
                         "token file %s is malformed (expected %d hex "
                         "digits)",
                         path, 2 * TOKEN_SIZE);
    }
    sodium_memzero(buf, sizeof(buf));
    memcpy(token, tok, TOKEN_SIZE);
    sodium_memzero(tok, sizeof(tok));
    return 0;
}

/* mkdir -p for the default places, each new component 0700. */
static int make_dirs(const char *path)
{
    char buf[TOKEN_PATH_MAX];
    char *slash;

    snprintf(buf, sizeof(buf), "%s", path);
    if (!(slash = strrchr(buf, '/')) || slash == buf)
        return 0;
    *slash = '\0';
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, 0700) < 0 && errno != EEXIST)
        return -1;
    return 0;
}

static int write_file(const char *path,
                      const unsigned char token[TOKEN_SIZE],
                      eddy_error_t *err)
{
    char tmp[TOKEN_PATH_MAX + 16];
    char hex[2 * TOKEN_SIZE + 2];
    int fd, e;

    if (snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= (int)sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return errprintf(err, "token path %s is too long", path);
    }
    /* mkstemp makes the file 0600 from the start: no window where the
     * token could be read by others. */
    if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0)
        return errprintf(err, "cannot write token file %s: %s", path,
                         strerror(errno));
    sodium_bin2hex(hex, sizeof(hex), token, TOKEN_SIZE);
    hex[2 * TOKEN_SIZE] = '\n';
    errno = 0; /* a short write sets none */
    e = write(fd, hex, 2 * TOKEN_SIZE + 1) != 2 * TOKEN_SIZE + 1 ||
                fchmod(fd, 0600) < 0
            ? (errno ? errno : EIO)
            : 0;
    if (close(fd) < 0 && !e)
        e = errno;
    sodium_memzero(hex, sizeof(hex));
    if (e) {
        unlink(tmp);
        errno = e;
        return errprintf(err, "cannot write token file %s: %s", path,
                         strerror(e));
    }
    if (rename(tmp, path) < 0) {
        e = errno;
        unlink(tmp);
        errno = e;
        return errprintf(err, "cannot write token file %s: %s", path,
                         strerror(e));
    }
    return 0;
}

int token_create(const struct tcp_uri *u,
                 const char *file,
                 unsigned char token[TOKEN_SIZE],
                 char *path,
                 size_t size,
                 eddy_error_t *err)
{
    char paths[TOKEN_PATHS_MAX][TOKEN_PATH_MAX];
    unsigned char tok[TOKEN_SIZE];
    /* not $EDDY_TOKEN_FILE: that names where a client looks, and an
     * instance started from inside another one's proxy would replace
     * that one's token (and remove it at exit) */
    const char *env = file && *file ? file : NULL;
    eddy_error_t e1 = {{0}};
    int n;

    if (sodium_init() < 0) {
        errno = EIO;
        return errprintf(err, "libsodium failed to initialise");
    }
    randombytes_buf(tok, sizeof(tok));
    if (env) {
        n = 1;
        if (strlen(env) >= TOKEN_PATH_MAX) {
            errno = ENAMETOOLONG;
            return errprintf(err, "token file path %s is too long", env);
        }
        snprintf(paths[0], TOKEN_PATH_MAX, "%s", env);
    } else if ((n = token_default_paths(u, paths)) == 0) {
        errno = ENOENT;
        return errprintf(err, "nowhere to write the token: neither "
                              "XDG_RUNTIME_DIR nor HOME is set");
    }
    for (int i = 0; i < n; i++) {
        if (strlen(paths[i]) >= size) {
            errno = ENAMETOOLONG;
            errprintf(&e1, "token path %s is too long", paths[i]);
            continue;
        }
        /* EDDY_TOKEN_FILE names a file in an existing directory. */
        if (!env && make_dirs(paths[i]) < 0) {
            errprintf(&e1, "cannot make the directory of %s: %s", paths[i],
                      strerror(errno));
            continue;
        }
        if (write_file(paths[i], tok, &e1) < 0)
            continue;
        snprintf(path, size, "%s", paths[i]);
        memcpy(token, tok, TOKEN_SIZE);
        sodium_memzero(tok, sizeof(tok));
        return 0;
    }
    sodium_memzero(tok, sizeof(tok));
    if (!errno)
        errno = EIO;
    return errprintf(err, "%s", e1.text);
}

void token_mac(const unsigned char token[TOKEN_SIZE],
               const char *label,
               const unsigned char nonce[TOKEN_SIZE],
               unsigned char mac[TOKEN_MAC_SIZE])
{
    crypto_auth_hmacsha512256_state st;

    crypto_auth_hmacsha512256_init(&st, token, TOKEN_SIZE);
    crypto_auth_hmacsha512256_update(&st, (const unsigned char *)label,
                                     strlen(label) + 1);
    crypto_auth_hmacsha512256_update(&st, nonce, TOKEN_SIZE);
    crypto_auth_hmacsha512256_final(&st, mac);
    sodium_memzero(&st, sizeof(st));
}

bool token_mac_verify(const unsigned char token[TOKEN_SIZE],
                      const char *label,
                      const unsigned char nonce[TOKEN_SIZE],
                      const unsigned char mac[TOKEN_MAC_SIZE])
{
    unsigned char want[TOKEN_MAC_SIZE];
    bool ok;

    token_mac(token, label, nonce, want);
    ok = sodium_memcmp(want, mac, TOKEN_MAC_SIZE) == 0;
    sodium_memzero(want, sizeof(want));
    return ok;
}

static int get_hex(const json_t *body,
                   const char *key,
                   unsigned char *out,
                   size_t outlen,
                   const char *what,
                   eddy_error_t *err)
{
    json_t *v;

    if (!json_is_object(body) || !(v = json_object_get(body, key)) ||
        !json_is_string(v) ||
        hex_decode(json_string_value(v), json_string_length(v), out, outlen) <
            0) {
        errno = EPROTO;
        return errprintf(err, "malformed %s: \"%s\" must be %zu hex digits",
                         what, key, 2 * outlen);
    }
    return 0;
}

int tcpauth_decode_challenge(const json_t *body,
                             unsigned char nonce[TOKEN_SIZE],
                             eddy_error_t *err)
{
    unsigned char n[TOKEN_SIZE];

    if (get_hex(body, "nonce", n, sizeof(n), "challenge", err) < 0)
        return -1;
    memcpy(nonce, n, sizeof(n));
    return 0;
}

int tcpauth_decode_auth(const json_t *body,
                        unsigned char mac[TOKEN_MAC_SIZE],
                        unsigned char nonce[TOKEN_SIZE],
                        eddy_error_t *err)
{
    unsigned char m[TOKEN_MAC_SIZE], n[TOKEN_SIZE];

    if (get_hex(body, "mac", m, sizeof(m), "answer", err) < 0 ||
        get_hex(body, "nonce", n, sizeof(n), "answer", err) < 0)
        return -1;
    memcpy(mac, m, sizeof(m));
    memcpy(nonce, n, sizeof(n));
    return 0;
}

int tcpauth_decode_greeting(const json_t *body,
                            unsigned char mac[TOKEN_MAC_SIZE],
                            eddy_error_t *err)
{
    unsigned char m[TOKEN_MAC_SIZE];

    if (get_hex(body, "mac", m, sizeof(m), "greeting", err) < 0)
        return -1;
    memcpy(mac, m, sizeof(m));
    return 0;
}
