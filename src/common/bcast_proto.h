/* bcast_proto.h - what the two ends of a file broadcast agree on.
 *
 * A broadcast file travels as a sequence of chunks (struct bcast_chunk) in
 * increasing offset order, followed by one struct bcast_file_info that the
 * source fills once it has read everything.  bcast_src (src/common/
 * bcast_src.h) produces both; bcast_sink (src/common/bcast_sink.h) consumes
 * them on each node.  The network layer in between carries them verbatim:
 * a chunk's data is the raw payload of one message.
 *
 * Invariants of a well-formed stream:
 *  - chunk offsets strictly increase and chunks never overlap; the ranges
 *    between chunks (holes of a sparse source) read as zeros;
 *  - 0 < rawlen <= BCAST_CHUNK_MAX, and len <= rawlen (a chunk that zstd
 *    would not shrink is sent raw), so a chunk's payload never exceeds
 *    BCAST_CHUNK_MAX whatever the compression;
 *  - the last chunk ends at or before info.size <= BCAST_SIZE_MAX;
 *  - info.hash is the XXH3-128 of the whole logical content (holes as
 *    zeros), in canonical (big-endian) byte order.
 */
#ifndef EDDY_COMMON_BCAST_PROTO_H
#define EDDY_COMMON_BCAST_PROTO_H

#include <stdbool.h>
#include <stdint.h>

/* Large enough that per-chunk costs (a message, a pwrite, a zstd frame)
 * vanish against the copy; small enough that a few chunks in flight per hop
 * keep every broker's memory in the megabytes. */
#define BCAST_CHUNK_DEFAULT (1u << 20)

/* The message payload limit (MSG_PAYLOAD_MAX): a chunk travels in one
 * message.  Compressed chunks are never larger than raw ones (see above),
 * so no room for zstd's worst-case expansion is needed. */
#define BCAST_CHUNK_MAX (16u << 20)

/* Largest file either end accepts.  Far beyond any tool bundle, and it
 * bounds the zeros a bogus chunk offset could make a node hash for a hole
 * (1 TiB of zeros is well under a minute of XXH3). */
#define BCAST_SIZE_MAX (1ull << 40)

/* Flags, shared by both ends. */
enum {
    BCAST_F_PRESERVE = 0x1,  /* sink: keep the source's mode and mtime */
    BCAST_F_OVERWRITE = 0x2, /* sink: replace an existing destination */
    BCAST_F_COMPRESS = 0x4,  /* source: zstd each chunk independently */
    BCAST_F_ARCHIVE = 0x8,   /* the file is an archive of a tree
                                (src/common/bcast_tree.h) to extract as the
                                destination directory */
};
#define BCAST_F_ALL                                                            \
    (BCAST_F_PRESERVE | BCAST_F_OVERWRITE | BCAST_F_COMPRESS | BCAST_F_ARCHIVE)

/* Size of the canonical XXH3-128 digest. */
#define BCAST_HASH_SIZE 16

/* One piece of the file.  'data' holds 'len' bytes: the raw bytes
 * [offset, offset + rawlen) of the file, or, if 'compressed', one zstd
 * frame that decompresses to exactly those 'rawlen' bytes. */
struct bcast_chunk {
    uint64_t offset;
    uint32_t rawlen;
    uint32_t len;
    const void *data;
    bool compressed;
};

/* What the source knows once it has read everything. */
struct bcast_file_info {
    uint64_t size;                 /* logical size, trailing hole included */
    uint32_t mode;                 /* permission bits (07777) of the source */
    int64_t mtime_sec;             /* source modification time */
    uint32_t mtime_nsec;           /* 0..999999999 */
    uint8_t hash[BCAST_HASH_SIZE]; /* XXH3-128, XXH128_canonical_t bytes */
};

#endif /* !EDDY_COMMON_BCAST_PROTO_H */
