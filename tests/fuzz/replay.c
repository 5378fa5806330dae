/* replay.c - run a libFuzzer target without libFuzzer.
 *
 * Used when the tree is built with gcc (the normal `make check` build):
 * each fuzz target is linked with this main, which feeds it every file of
 * the corpus directories named on the command line, then a fixed number
 * of deterministic mutations of each (bit flips, truncations, splices),
 * so every parser sees hostile input in every test run.  Crashes show up
 * as sanitizer reports or signals, and the test fails.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Enough variety to reach the error paths, small enough to run in well
 * under a second per target. */
#define MUTATIONS_PER_INPUT 2000
#define REPLAY_MAX_INPUT (1u << 20)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void run_one(const uint8_t *data, size_t size)
{
    /* A private copy so targets cannot rely on trailing bytes. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        abort();
    memcpy(copy, data, size);
    LLVMFuzzerTestOneInput(copy, size);
    free(copy);
}

static void mutate_and_run(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size + 64);
    if (!buf)
        abort();
    for (int i = 0; i < MUTATIONS_PER_INPUT; i++) {
        size_t n = size;
        memcpy(buf, data, size);
        switch (rng() % 5) {
        case 0: /* flip a few bits */
            for (int k = 0; k < 1 + (int)(rng() % 4) && n > 0; k++)
                buf[rng() % n] ^= (uint8_t)(1u << (rng() % 8));
            break;
        case 1: /* truncate */
            n = n ? rng() % n : 0;
            break;
        case 2: /* overwrite a byte with an interesting value */
            if (n > 0) {
                static const uint8_t v[] = {0, 1, 0x7f, 0x80, 0xff, '"', '\\'};
                buf[rng() % n] = v[rng() % sizeof(v)];
            }
            break;
        case 3: /* append garbage */
            for (int k = 0; k < 1 + (int)(rng() % 32); k++)
                buf[n++] = (uint8_t)rng();
            break;
        default: /* duplicate a run */
            if (n > 2) {
                size_t off = rng() % (n - 1);
                size_t len = 1 + rng() % ((n - off) < 32 ? (n - off) : 32);
                if (n + len <= size + 64) {
                    memmove(buf + off + len, buf + off, n - off);
                    n += len;
                }
            }
            break;
        }
        run_one(buf, n);
    }
    free(buf);
}

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = malloc(REPLAY_MAX_INPUT);
    if (!buf)
        abort();
    size_t n = fread(buf, 1, REPLAY_MAX_INPUT, f);
    fclose(f);
    run_one(buf, n);
    mutate_and_run(buf, n);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (replay_file(argv[i]) < 0)
                return 1;
            count++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char path[4096];
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
            if (replay_file(path) < 0)
                return 1;
            count++;
        }
        if (d)
            closedir(d);
    }
    if (count == 0) {
        fprintf(stderr, "replay: no corpus inputs given\n");
        return 1;
    }
    printf("replay: %d inputs, %d mutations each: no crash\n", count,
           MUTATIONS_PER_INPUT);
    return 0;
}
