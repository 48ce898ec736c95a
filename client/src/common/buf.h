/* buf.h - growable byte buffers, bounds-checked little-endian readers, strdup: shared by libpsdb,
 * the psdb tool and psdbd (the common layer). */
#ifndef PSDB_COMMON_BUF_H
#define PSDB_COMMON_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "psdb/status.h"

/* A growable byte buffer. Once an append fails, `oom` stays set and later appends do nothing, so a
 * run of appends is checked once at the end (psdb__buf_status). */
typedef struct psdb__buf {
    uint8_t *data;
    size_t len, cap;
    int oom;
} psdb__buf;

void psdb__buf_free(psdb__buf *b);
void psdb__buf_append(psdb__buf *b, const void *p, size_t n);
void psdb__buf_u8(psdb__buf *b, uint8_t v);
void psdb__buf_u32(psdb__buf *b, uint32_t v); /* little-endian */
void psdb__buf_u64(psdb__buf *b, uint64_t v); /* little-endian */
/* u32 length then bytes; NULL is encoded as length 0xFFFFFFFF. */
void psdb__buf_str(psdb__buf *b, const char *s);
psdb_hr psdb__buf_status(const psdb__buf *b);

/* A bounds-checked little-endian reader over borrowed bytes. After any short read `bad` is set and
 * every later read yields zero. */
typedef struct psdb__rd {
    const uint8_t *p;
    size_t len, pos;
    int bad;
} psdb__rd;

const uint8_t *psdb__rd_bytes(psdb__rd *r, size_t n);
uint32_t psdb__rd_u32(psdb__rd *r);
uint64_t psdb__rd_u64(psdb__rd *r);

uint32_t psdb__le32(const uint8_t *p);
uint64_t psdb__le64(const uint8_t *p);
void psdb__put_le32(uint8_t *p, uint32_t v);
void psdb__put_le64(uint8_t *p, uint64_t v);

/* strdup that returns NULL for NULL. */
char *psdb__strdup(const char *s);

#endif
