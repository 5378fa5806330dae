/* fuzz_hostsfile.c - libFuzzer target for hostsfile_parse(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/hostsfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    eddy_error_t err;
    hostsfile_t *hf;

    err.text[0] = '\0';
    if (!(hf = hostsfile_parse((const char *)data, size, &err))) {
        if (strlen(err.text) == 0)
            abort(); /* every failure explains itself */
        return 0;
    }
    /* The invariant of the header: every rank below size is complete. */
    if (hostsfile_size(hf) == 0)
        abort();
    for (uint32_t r = 0; r < hostsfile_size(hf); r++) {
        int port = hostsfile_port(hf, r);
        if (!hostsfile_host(hf, r) || !hostsfile_addr(hf, r) || port < 0 ||
            port > 65535)
            abort();
    }
    if (hostsfile_host(hf, hostsfile_size(hf)))
        abort();
    hostsfile_destroy(hf);
    return 0;
}
