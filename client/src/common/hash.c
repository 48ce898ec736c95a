/* hash.c - SHA-256 over OpenSSL EVP, CRC-32 and hex. */
#include "common/hash.h"

#include <pthread.h>
#include <stdlib.h>

#include <openssl/evp.h>

void psdb__sha256(const void *data, size_t size, uint8_t out[32])
{
    unsigned int n = 32;
    /* EVP_Digest cannot fail for SHA-256 short of a broken OpenSSL install. */
    int ok = EVP_Digest(data, size, out, &n, EVP_sha256(), NULL);
    (void)ok;
}

struct psdb__sha256_ctx {
    EVP_MD_CTX *md;
};

psdb__sha256_ctx *psdb__sha256_begin(void)
{
    psdb__sha256_ctx *c = malloc(sizeof(*c));
    if (!c)
        return NULL;
    c->md = EVP_MD_CTX_new();
    if (!c->md || EVP_DigestInit_ex(c->md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(c->md);
        free(c);
        return NULL;
    }
    return c;
}

void psdb__sha256_update(psdb__sha256_ctx *c, const void *data, size_t size)
{
    EVP_DigestUpdate(c->md, data, size);
}

void psdb__sha256_end(psdb__sha256_ctx *c, uint8_t out[32])
{
    unsigned int n = 32;
    EVP_DigestFinal_ex(c->md, out, &n);
    EVP_MD_CTX_free(c->md);
    free(c);
}

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t psdb__crc32(uint32_t crc, const void *data, size_t size)
{
    const uint8_t *p = data;
    pthread_once(&crc_once, crc_init);
    crc ^= 0xFFFFFFFFu;
    for (size_t i = 0; i < size; i++)
        crc = crc_table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

void psdb__hex(const uint8_t *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

int psdb__hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int psdb__unhex(const char *in, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = psdb__hexval(in[2 * i]);
        int lo = hi < 0 ? -1 : psdb__hexval(in[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return in[2 * n] == '\0' ? 0 : -1;
}
