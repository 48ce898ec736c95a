/* util.h - small internal helpers shared by libpsdb's modules: growable buffers, SHA-256, hex. */
#ifndef PSDB_UTIL_H
#define PSDB_UTIL_H

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
uint8_t psdb__rd_u8(psdb__rd *r);
uint32_t psdb__rd_u32(psdb__rd *r);
uint64_t psdb__rd_u64(psdb__rd *r);

uint32_t psdb__le32(const uint8_t *p);
uint64_t psdb__le64(const uint8_t *p);
void psdb__put_le32(uint8_t *p, uint32_t v);
void psdb__put_le64(uint8_t *p, uint64_t v);

/* SHA-256 of one buffer (OpenSSL EVP). */
void psdb__sha256(const void *data, size_t size, uint8_t out[32]);

/* Incremental SHA-256 (wraps an EVP_MD_CTX). */
typedef struct psdb__sha256_ctx psdb__sha256_ctx;
psdb__sha256_ctx *psdb__sha256_begin(void);
void psdb__sha256_update(psdb__sha256_ctx *c, const void *data, size_t size);
void psdb__sha256_end(psdb__sha256_ctx *c, uint8_t out[32]); /* frees c */

/* Lowercase hex of n bytes into out (2n+1 bytes, NUL-terminated). */
void psdb__hex(const uint8_t *in, size_t n, char *out);
/* Parses exactly 2n hex digits; 0 on success, -1 otherwise. */
int psdb__unhex(const char *in, uint8_t *out, size_t n);

/* strdup that returns NULL for NULL. */
char *psdb__strdup(const char *s);

#endif
