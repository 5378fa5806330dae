/* fuzz_pmi.c - libFuzzer target for the PMI-1 server engine.
 *
 * The input is a stream of chunks: each chunk starts with one byte whose
 * low bits pick the client (0-2) and whose high bits say whether to
 * declare that client gone or to release a held init; the next byte is
 * the chunk length.  Barriers run to completion by answering each fence
 * with the batch it handed out, so every state of the engine is reached.
 * It must never crash, leak, or answer a line that is not one
 * newline-terminated printable line.
 *
 * The fuzz targets are linked with the broker and common libraries only,
 * so the engine is compiled in here.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/shell/pmi_server.h"

#define FUZZ_CLIENTS 3

struct fuzz_ctx {
    pmi_server_t *srv;
    struct pmi_kv *batch;
    char **copies;
    size_t count;
    bool fenced;
};

static void f_send(int client, const char *line, size_t len, void *arg)
{
    if (client < 0 || client >= FUZZ_CLIENTS || len == 0 ||
        line[len - 1] != '\n')
        abort();
    for (size_t i = 0; i + 1 < len; i++)
        if (line[i] < 0x20 || line[i] > 0x7e)
            abort();
}

static void f_fence(const struct pmi_kv *kvs, size_t count, void *arg)
{
    struct fuzz_ctx *x = arg;

    /* Keep a copy: the batch is only borrowed for the call. */
    x->batch = calloc(count ? count : 1, sizeof(*x->batch));
    x->copies = calloc(count ? 2 * count : 1, sizeof(char *));
    if (!x->batch || !x->copies)
        abort();
    for (size_t i = 0; i < count; i++) {
        x->copies[2 * i] = strdup(kvs[i].key);
        x->copies[2 * i + 1] = strdup(kvs[i].value);
        if (!x->copies[2 * i] || !x->copies[2 * i + 1])
            abort();
        x->batch[i].key = x->copies[2 * i];
        x->batch[i].value = x->copies[2 * i + 1];
    }
    x->count = count;
    x->fenced = true;
}

static void f_abort(int client, int code, const char *msg, void *arg)
{
    (void)strlen(msg);
}

static void f_log(int client, const char *text, void *arg)
{
    if (strlen(text) > 256)
        abort();
}

static void f_lost(int client, void *arg)
{
}

static void finish_fence(struct fuzz_ctx *x)
{
    if (!x->fenced)
        return;
    x->fenced = false;
    if (pmi_server_fence_done(x->srv, x->batch, x->count, NULL) < 0)
        abort(); /* the engine's own batch is always acceptable */
    for (size_t i = 0; i < 2 * x->count; i++)
        free(x->copies[i]);
    free(x->copies);
    free(x->batch);
    x->copies = NULL;
    x->batch = NULL;
    x->count = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct pmi_server_ops ops = {
        .send = f_send,
        .fence = f_fence,
        .abort = f_abort,
        .log = f_log,
        .lost = f_lost,
    };
    static const int appnum[FUZZ_CLIENTS] = {0, 1, 2};
    struct pmi_server_params p = {
        .kvsname = "eddy-1",
        .universe_size = 8,
        .nclients = FUZZ_CLIENTS,
        .appnum = appnum,
        .hold_init = size > 0 && (data[0] & 0x80),
    };
    struct fuzz_ctx x = {0};
    size_t i = 0;

    if (!(x.srv = pmi_server_create(&p, &ops, &x, NULL)))
        abort();
    while (i + 2 <= size) {
        uint8_t ctl = data[i];
        size_t n = data[i + 1];
        int client = ctl % FUZZ_CLIENTS;

        i += 2;
        if (n > size - i)
            n = size - i;
        if ((ctl & 0xf0) == 0xf0)
            (void)pmi_server_client_gone(x.srv, client);
        else if ((ctl & 0xf0) == 0xe0)
            (void)pmi_server_release(x.srv);
        (void)pmi_server_feed(x.srv, client, data + i, n);
        finish_fence(&x);
        i += n;
    }
    finish_fence(&x);
    pmi_server_destroy(x.srv);
    return 0;
}
