/* parse.c - numbers, versions and UUIDs: one grammar for the library, the tool and the server. */
#include "common/parse.h"

#include <stdio.h>
#include <string.h>

#include "common/hash.h"

/* Decimal digits of s[0..n) into a u64; -1 on a non-digit, no digit, or overflow. */
static int parse_dec(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(unsigned char)s[i] - '0';
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int psdb__parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!s || !*s)
        return -1;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        const char *p = s + 2;
        if (!*p)
            return -1;
        for (; *p; p++) {
            int d = psdb__hexval(*p);
            if (d < 0 || v > UINT64_MAX >> 4)
                return -1;
            v = v << 4 | (uint64_t)d;
        }
    } else if (parse_dec(s, strlen(s), &v) != 0) {
        return -1;
    }
    *out = v;
    return 0;
}

int psdb__parse_version(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    if (!s || !*s)
        return -1;
    if (!strchr(s, '.'))
        return psdb__parse_u64(s, out);
    for (int i = 0; i < 4; i++) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        uint64_t part = 0;
        if (parse_dec(p, n, &part) != 0 || part > 0xFFFF)
            return -1;
        v |= part << (48 - 16 * i);
        if (!dot) {
            *out = v;
            return 0;
        }
        p = dot + 1;
    }
    return -1; /* a fifth part, or a trailing dot after the fourth */
}

int psdb__parse_uuid(const char *s, uint8_t out[16])
{
    size_t n = 0, len = s ? strlen(s) : 0;
    int dashed = len == 36;
    if (len != 32 && len != 36)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (dashed && (i == 8 || i == 13 || i == 18 || i == 23)) {
            if (s[i] != '-')
                return -1;
            continue;
        }
        int hi = psdb__hexval(s[i]), lo = i + 1 < len ? psdb__hexval(s[i + 1]) : -1;
        if (hi < 0 || lo < 0 || n >= 16)
            return -1;
        out[n++] = (uint8_t)(hi << 4 | lo);
        i++;
    }
    return n == 16 ? 0 : -1;
}

const char *psdb__format_version(uint64_t v, char *buf, size_t size)
{
    snprintf(buf, size, "%u.%u.%u.%u", (unsigned)(v >> 48 & 0xFFFF), (unsigned)(v >> 32 & 0xFFFF),
             (unsigned)(v >> 16 & 0xFFFF), (unsigned)(v & 0xFFFF));
    return buf;
}

const char *psdb__format_uuid(const uint8_t id[16], char *buf, size_t size)
{
    char hex[33];
    psdb__hex(id, 16, hex);
    snprintf(buf, size, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
    return buf;
}
