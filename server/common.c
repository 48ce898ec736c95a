/* common.c - psdbd's small shared helpers: allocation that exits on OOM, logging, parsing. */
#include "common.h"

#include "common/hash.h"
#include "common/parse.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
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

int psdbd_is_lower_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (psdb__hexval(s[i]) < 0 || (s[i] >= 'A' && s[i] <= 'F'))
            return 0;
    return 1;
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
    if (psdb__parse_u64(num, &v) != 0 || v > UINT64_MAX / mult)
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

int psdbd_scope_covers(const char *scope, const char *app)
{
    return scope && app && fnmatch(scope, app, 0) == 0;
}
