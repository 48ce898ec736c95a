/* common.c - psdbd's small shared helpers: allocation that exits on OOM, logging, parsing. */
#include "common.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void psdbd_out_of_memory(void)
{
    fputs("psdbd: out of memory\n", stderr);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        psdbd_out_of_memory();
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        psdbd_out_of_memory();
    return p;
}

char *xstrdup(const char *s)
{
    if (!s)
        return NULL;
    char *p = strdup(s);
    if (!p)
        psdbd_out_of_memory();
    return p;
}

char *xasprintf(const char *fmt, ...)
{
    char *p = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&p, fmt, ap);
    va_end(ap);
    if (n < 0)
        psdbd_out_of_memory();
    return p;
}

void psdbd_hex(const uint8_t *in, size_t n, char *out, size_t out_size)
{
    static const char digits[] = "0123456789abcdef";
    assert(out_size >= 2 * n + 1);
    (void)out_size; /* checked by the assert only */
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

void psdbd_log(const char *fmt, ...)
{
    va_list ap;
    flockfile(stderr);
    fputs("psdbd: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    funlockfile(stderr);
}

int psdbd_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+' || isspace((unsigned char)*s))
        return -1;
    int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    if (hex && !isxdigit((unsigned char)s[2]))
        return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, hex ? 16 : 10);
    if (errno || *end)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

int psdbd_parse_version(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return -1;
    if (!strchr(s, '.'))
        return psdbd_parse_u64(s, out);
    uint64_t v = 0;
    const char *p = s;
    for (int i = 0; i < 4; i++) {
        if (!isdigit((unsigned char)*p))
            return -1;
        char *end = NULL;
        errno = 0;
        unsigned long part = strtoul(p, &end, 10);
        if (errno || part > 0xFFFF)
            return -1;
        v |= (uint64_t)part << (48 - 16 * i);
        p = end;
        if (*p == '\0')
            break;
        if (*p != '.' || i == 3)
            return -1;
        p++;
    }
    *out = v;
    return 0;
}

int psdbd_parse_size(const char *s, uint64_t *out)
{
    char num[32];
    size_t n = s ? strlen(s) : 0;
    uint64_t mult = 1, v = 0;
    if (n == 0 || n >= sizeof(num))
        return -1;
    memcpy(num, s, n + 1);
    switch (toupper((unsigned char)num[n - 1])) {
    case 'K':
        mult = 1ull << 10;
        break;
    case 'M':
        mult = 1ull << 20;
        break;
    case 'G':
        mult = 1ull << 30;
        break;
    case 'T':
        mult = 1ull << 40;
        break;
    default:
        break;
    }
    if (mult != 1)
        num[n - 1] = '\0';
    if (psdbd_parse_u64(num, &v) != 0 || v > UINT64_MAX / mult)
        return -1;
    *out = v * mult;
    return 0;
}

int psdbd_parse_bool(const char *s, int *out)
{
    static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; s && i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

const char *psdbd_format_version(uint64_t v, char *buf, size_t size)
{
    snprintf(buf, size, "%u.%u.%u.%u", (unsigned)(v >> 48 & 0xFFFF), (unsigned)(v >> 32 & 0xFFFF),
             (unsigned)(v >> 16 & 0xFFFF), (unsigned)(v & 0xFFFF));
    return buf;
}

const char *psdbd_format_uuid(const uint8_t id[16], char *buf, size_t size)
{
    snprintf(buf, size, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             id[0], id[1], id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11],
             id[12], id[13], id[14], id[15]);
    return buf;
}

const char *psdbd_format_time(int64_t t, char *buf, size_t size)
{
    struct tm tm;
    time_t tt = (time_t)t;
    if (!gmtime_r(&tt, &tm) || strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, size, "%lld", (long long)t);
    return buf;
}

uint64_t psdbd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

long psdbd_control_char_in(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7F)
            return (long)*p;
        if (*p == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F)
            return (long)p[1];
    }
    return -1;
}
