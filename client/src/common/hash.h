/* hash.h - SHA-256 (one-shot and streaming over OpenSSL EVP), CRC-32 and lowercase hex: the one
 * copy that libpsdb, the psdb tool and psdbd share. */
#ifndef PSDB_COMMON_HASH_H
#define PSDB_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

/* SHA-256 of one buffer. Thread-safe. */
void psdb__sha256(const void *data, size_t size, uint8_t out[32]);

/* Incremental SHA-256 (wraps an EVP_MD_CTX). begin returns NULL when out of memory; end writes the
 * digest and frees c. One context per thread at a time. */
typedef struct psdb__sha256_ctx psdb__sha256_ctx;
psdb__sha256_ctx *psdb__sha256_begin(void);
void psdb__sha256_update(psdb__sha256_ctx *c, const void *data, size_t size);
void psdb__sha256_end(psdb__sha256_ctx *c, uint8_t out[32]);

/* CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), the value zlib's crc32() gives. crc is
 * the running value (0 to start). Thread-safe. */
uint32_t psdb__crc32(uint32_t crc, const void *data, size_t size);

/* Lowercase hex of n bytes into out (2n+1 bytes, NUL-terminated). */
void psdb__hex(const uint8_t *in, size_t n, char *out);
/* Parses exactly 2n hex digits (either case) followed by the end of the string; 0 on success, -1
 * otherwise (out may then be partly written). */
int psdb__unhex(const char *in, uint8_t *out, size_t n);
/* Value of one hex digit, or -1. */
int psdb__hexval(char c);

#endif
