/* banned.h - unsafe string functions are compile errors (included in every
 * translation unit by the build).  Use snprintf, strlcpy-style bounded
 * copies, or jansson. */
#ifndef EDDY_COMMON_BANNED_H
#define EDDY_COMMON_BANNED_H

/* Pull in the declarations first so the macros below only hit our code. */
#include <stdio.h>
#include <string.h>

#define BANNED(func) sorry_##func##_is_banned

#undef strcpy
#define strcpy(x, y) BANNED(strcpy)
#undef strcat
#define strcat(x, y) BANNED(strcat)
#undef sprintf
#define sprintf(...) BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) BANNED(vsprintf)
#undef gets
#define gets(x) BANNED(gets)

#endif
