/* elfsym.h - function names from ELF symbol tables, cached per file.
 *
 * sampler_unwind.c names frames with this rather than with libunwind's
 * unw_get_proc_name(), which takes the nearest symbol below the address
 * whatever its size: in a stripped library (Debian's libc keeps only
 * .dynsym) a static function gets the name of an unrelated exported one
 * (start_thread showed up as "pthread_condattr_setpshared").  Here a
 * symbol names an address only if its size covers it, and a file without
 * .symtab gets the one of its detached debug file, found by build ID under
 * /usr/lib/debug/.build-id/ as gdb finds it.  Each file is read once, and
 * the tasks of a node share it (keyed by device and inode, the same in
 * every process whatever the load address).
 *
 * Use:
 *  1. c = elfsym_create().
 *  2. elfsym_lookup(c, path, dev, ino, fileoff) for each address, given
 *     as the mapping in /proc/PID/maps shows it: the file, its device and
 *     inode, and the address's offset in the file (address - start of the
 *     mapping + its offset).
 *  3. elfsym_destroy(c): names handed out are gone.
 *
 * Files are mapped read-only and checked before any use (every offset and
 * size inside the file), so a damaged or hostile file gives no name, not
 * a crash.  Only 64-bit ELF files of this machine's byte order are read.
 */
#ifndef EDDY_TOOLS_ELFSYM_H
#define EDDY_TOOLS_ELFSYM_H

#include <stdint.h>

typedef struct elfsym elfsym_t;

/* An empty cache; NULL with errno ENOMEM. */
elfsym_t *elfsym_create(void);

/* Unmap every file.  Accepts NULL, keeps errno. */
void elfsym_destroy(elfsym_t *c);

/* The name of the function holding offset 'fileoff' of file 'path'
 * (device 'dev' as major << 32 | minor, inode 'ino', as /proc/PID/maps
 * gives them).  Borrowed until elfsym_destroy(); NULL if no symbol covers
 * the address or the file cannot be read (a file found at 'path' with
 * another inode is not read: it was replaced since it was mapped).
 * 'altpath', if not NULL, is tried when 'path' fails (e.g.
 * /proc/PID/map_files/...). */
const char *elfsym_lookup(elfsym_t *c,
                          const char *path,
                          const char *altpath,
                          uint64_t dev,
                          uint64_t ino,
                          uint64_t fileoff);

#endif /* !EDDY_TOOLS_ELFSYM_H */
