/* relpath.c - checks on paths that must stay under a directory. */
#include <string.h>

#include "relpath.h"

bool relpath_has_dotdot(const char *path)
{
    const char *p = path;

    if (!path)
        return false;
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return true;
        p += n;
        while (*p == '/')
            p++;
    }
    return false;
}
