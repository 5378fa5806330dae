/* elfsym.c - function names from ELF symbol tables (see elfsym.h). */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/tools/elfsym.h"

#define FILE_BUCKETS 256

/* PT_LOAD segments kept per file; real files have 2 to 5. */
#define LOADS_MAX 16

/* Symbols before the nearest one that are looked at for one whose size
 * covers the address (a sized function holding smaller symbols). */
#define BACKTRACK_MAX 8

/* Where Debian (and gdb) keep detached debug files by build ID. */
#define DEBUG_DIR "/usr/lib/debug/.build-id"

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NATIVE_DATA ELFDATA2LSB
#else
#define NATIVE_DATA ELFDATA2MSB
#endif

struct sym {
    uint64_t addr, size;
    const char *name; /* in a mapped file */
    unsigned char bind;
};

struct load {
    uint64_t off, vaddr, filesz;
};

struct file {
    struct file *next;
    uint64_t dev, ino;
    void *map, *dmap; /* the file and its debug file */
    size_t len, dlen;
    struct load load[LOADS_MAX];
    size_t nload;
    struct sym *syms;
    size_t nsyms, cap;
};

struct elfsym {
    struct file *files[FILE_BUCKETS];
};

elfsym_t *elfsym_create(void)
{
    return calloc(1, sizeof(struct elfsym));
}

void elfsym_destroy(elfsym_t *c)
{
    int saved = errno;
    size_t i;

    if (c) {
        for (i = 0; i < FILE_BUCKETS; i++) {
            while (c->files[i]) {
                struct file *f = c->files[i];
                c->files[i] = f->next;
                if (f->map)
                    munmap(f->map, f->len);
                if (f->dmap)
                    munmap(f->dmap, f->dlen);
                free(f->syms);
                free(f);
            }
        }
        free(c);
    }
    errno = saved;
}

static bool range_ok(size_t len, uint64_t off, uint64_t size)
{
    return off <= len && size <= len - off;
}

/* Map 'path' read-only if it is a regular file (with inode 'ino' unless
 * 0).  NULL if not. */
static void *map_file(const char *path, uint64_t ino, size_t *len)
{
    struct stat st;
    void *p;
    int fd;

    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return NULL;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
        (ino && (uint64_t)st.st_ino != ino) ||
        (size_t)st.st_size < sizeof(Elf64_Ehdr)) {
        close(fd);
        return NULL;
    }
    p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
    *len = (size_t)st.st_size;
    return p;
}

/* The ELF header if the file is one we read and its tables fit in it. */
static const Elf64_Ehdr *elf_header(const void *map, size_t len)
{
    const Elf64_Ehdr *eh = map;

    if (!map || len < sizeof(*eh) || memcmp(eh->e_ident, ELFMAG, SELFMAG) ||
        eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_ident[EI_DATA] != NATIVE_DATA)
        return NULL;
    /* the mapping is page-aligned: aligned offsets make aligned tables */
    if (eh->e_shoff % 8 || eh->e_phoff % 8)
        return NULL;
    if (eh->e_shnum && (eh->e_shentsize != sizeof(Elf64_Shdr) ||
                        !range_ok(len, eh->e_shoff,
                                  (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr))))
        return NULL;
    if (eh->e_phnum && (eh->e_phentsize != sizeof(Elf64_Phdr) ||
                        !range_ok(len, eh->e_phoff,
                                  (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr))))
        return NULL;
    return eh;
}

static int sym_push(struct file *f, const struct sym *s)
{
    if (f->nsyms == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 1024;
        struct sym *p = realloc(f->syms, cap * sizeof(*p));
        if (!p)
            return -1;
        f->syms = p;
        f->cap = cap;
    }
    f->syms[f->nsyms++] = *s;
    return 0;
}

/* Add the function symbols of the sections of 'type' (SHT_SYMTAB or
 * SHT_DYNSYM).  Returns how many such sections there were. */
static int add_syms(struct file *f, const void *map, size_t len, uint32_t type)
{
    const Elf64_Ehdr *eh = elf_header(map, len);
    const Elf64_Shdr *sh;
    int found = 0;
    size_t i, j;

    if (!eh)
        return 0;
    sh = (const Elf64_Shdr *)((const char *)map + eh->e_shoff);
    for (i = 0; i < eh->e_shnum; i++) {
        const Elf64_Shdr *ss = &sh[i], *st;
        const Elf64_Sym *syms;
        const char *strtab;

        if (ss->sh_type != type || ss->sh_link >= eh->e_shnum ||
            ss->sh_entsize != sizeof(Elf64_Sym) || ss->sh_offset % 8 ||
            !range_ok(len, ss->sh_offset, ss->sh_size))
            continue;
        st = &sh[ss->sh_link];
        if (st->sh_type != SHT_STRTAB ||
            !range_ok(len, st->sh_offset, st->sh_size))
            continue;
        found++;
        syms = (const Elf64_Sym *)((const char *)map + ss->sh_offset);
        strtab = (const char *)map + st->sh_offset;
        for (j = 0; j < ss->sh_size / sizeof(Elf64_Sym); j++) {
            const Elf64_Sym *y = &syms[j];
            unsigned t = ELF64_ST_TYPE(y->st_info);
            struct sym s;

            if ((t != STT_FUNC && t != STT_GNU_IFUNC) ||
                y->st_shndx == SHN_UNDEF || y->st_value == 0 ||
                y->st_name == 0 || y->st_name >= st->sh_size ||
                !memchr(strtab + y->st_name, '\0', st->sh_size - y->st_name))
                continue;
            s.addr = y->st_value;
            s.size = y->st_size;
            s.name = strtab + y->st_name;
            s.bind = ELF64_ST_BIND(y->st_info);
            if (sym_push(f, &s) < 0)
                return found;
        }
    }
    return found;
}

/* The build ID of the file as lowercase hex into 'hex'.  -1 if none. */
static int build_id(const void *map, size_t len, char *hex, size_t hexsz)
{
    const Elf64_Ehdr *eh = elf_header(map, len);
    const Elf64_Phdr *ph;
    size_t i;

    if (!eh)
        return -1;
    ph = (const Elf64_Phdr *)((const char *)map + eh->e_phoff);
    for (i = 0; i < eh->e_phnum; i++) {
        const char *p, *e;

        if (ph[i].p_type != PT_NOTE || ph[i].p_offset % 4 ||
            !range_ok(len, ph[i].p_offset, ph[i].p_filesz))
            continue;
        p = (const char *)map + ph[i].p_offset;
        e = p + ph[i].p_filesz;
        while ((size_t)(e - p) >= sizeof(Elf64_Nhdr)) {
            const Elf64_Nhdr *nh = (const Elf64_Nhdr *)p;
            uint64_t nsz = ((uint64_t)nh->n_namesz + 3) & ~3ull;
            uint64_t dsz = ((uint64_t)nh->n_descsz + 3) & ~3ull;
            const char *name = p + sizeof(*nh), *desc = name + nsz;

            if (nsz + dsz > (uint64_t)(e - name))
                break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
                memcmp(name, "GNU", 4) == 0 && nh->n_descsz >= 2 &&
                2 * (size_t)nh->n_descsz < hexsz) {
                uint32_t k;
                for (k = 0; k < nh->n_descsz; k++)
                    snprintf(hex + 2 * k, 3, "%02x", (unsigned char)desc[k]);
                return 0;
            }
            p = desc + dsz;
        }
    }
    return -1;
}

/* Address order; at one address the name to show first: a strong
 * symbol over a weak alias ("__libc_pause" over "pause", the name gdb
 * shows from the debug info), then fewer leading '_' ("clone3" over
 * "__clone3"), then the shorter. */
static int sym_cmp(const void *a, const void *b)
{
    const struct sym *x = a, *y = b;
    int rx = x->bind == STB_WEAK, ry = y->bind == STB_WEAK;
    size_t ux = strspn(x->name, "_"), uy = strspn(y->name, "_");
    size_t lx, ly;

    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    if (rx != ry)
        return rx - ry;
    if (ux != uy)
        return ux < uy ? -1 : 1;
    lx = strlen(x->name);
    ly = strlen(y->name);
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Read the file's loads and symbols into 'f' (which keeps them mapped).
 * On failure f holds no symbol: every lookup in it fails. */
static void file_load(struct file *f, const char *path, const char *altpath)
{
    const Elf64_Ehdr *eh;
    const Elf64_Phdr *ph;
    char hex[130], dpath[256];
    size_t i, k;

    if (!(f->map = map_file(path, f->ino, &f->len)) && altpath)
        f->map = map_file(altpath, f->ino, &f->len);
    if (!(eh = elf_header(f->map, f->len)))
        return;
    ph = (const Elf64_Phdr *)((const char *)f->map + eh->e_phoff);
    for (i = 0; i < eh->e_phnum && f->nload < LOADS_MAX; i++) {
        if (ph[i].p_type == PT_LOAD) {
            f->load[f->nload].off = ph[i].p_offset;
            f->load[f->nload].vaddr = ph[i].p_vaddr;
            f->load[f->nload].filesz = ph[i].p_filesz;
            f->nload++;
        }
    }
    if (add_syms(f, f->map, f->len, SHT_SYMTAB) == 0 &&
        build_id(f->map, f->len, hex, sizeof(hex)) == 0) {
        snprintf(dpath, sizeof(dpath), "%s/%.2s/%s.debug", DEBUG_DIR, hex,
                 hex + 2);
        if ((f->dmap = map_file(dpath, 0, &f->dlen)))
            add_syms(f, f->dmap, f->dlen, SHT_SYMTAB);
    }
    add_syms(f, f->map, f->len, SHT_DYNSYM);
    if (f->nsyms == 0)
        return;
    qsort(f->syms, f->nsyms, sizeof(*f->syms), sym_cmp);
    /* one symbol per address, the first in sym_cmp()'s order */
    for (i = 1, k = 1; i < f->nsyms; i++)
        if (f->syms[i].addr != f->syms[k - 1].addr)
            f->syms[k++] = f->syms[i];
    f->nsyms = k;
}

static const char *file_lookup(const struct file *f, uint64_t fileoff)
{
    uint64_t va = 0;
    size_t i, lo = 0, hi = f->nsyms, back;
    bool mapped = false;

    for (i = 0; i < f->nload && !mapped; i++) {
        if (fileoff >= f->load[i].off &&
            fileoff - f->load[i].off < f->load[i].filesz) {
            va = fileoff - f->load[i].off + f->load[i].vaddr;
            mapped = true;
        }
    }
    if (!mapped)
        return NULL;
    /* the last symbol at or below va */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (f->syms[mid].addr <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    i = lo - 1;
    if (f->syms[i].size == 0 || va - f->syms[i].addr < f->syms[i].size)
        return f->syms[i].name;
    for (back = 1; back <= BACKTRACK_MAX && back <= i; back++) {
        const struct sym *s = &f->syms[i - back];
        if (s->size && va - s->addr < s->size)
            return s->name;
    }
    return NULL;
}

const char *elfsym_lookup(elfsym_t *c,
                          const char *path,
                          const char *altpath,
                          uint64_t dev,
                          uint64_t ino,
                          uint64_t fileoff)
{
    uint64_t h = (dev * 0x9e3779b97f4a7c15ull ^ ino) % FILE_BUCKETS;
    struct file *f;

    if (!c || !path)
        return NULL;
    for (f = c->files[h]; f; f = f->next)
        if (f->dev == dev && f->ino == ino)
            return file_lookup(f, fileoff);
    if (!(f = calloc(1, sizeof(*f))))
        return NULL;
    f->dev = dev;
    f->ino = ino;
    file_load(f, path, altpath);
    f->next = c->files[h];
    c->files[h] = f;
    return file_lookup(f, fileoff);
}
