/* junit.c - XML escaping, formatted appends and the atomic file replace of the JUnit reports.
 *
 * A report names what an SODB records (its application name) and paths the user gave; either may
 * hold bytes XML 1.0 cannot carry at all (most C0 controls, U+FFFE, bytes that are not UTF-8). A
 * CI server that meets one of them rejects the whole file, so such bytes are written as visible
 * \xNN text, by the rule the tool's terminal output follows. */
#include "junit.h"

#include "tool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/status_map.h"

void junit_escape(psdb__buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        uint32_t cp = 0;
        size_t n = tool_utf8_seq(p, &cp);
        size_t bytes = n ? n : 1;
        if (n == 0 || tool_is_control(cp) || cp == 0xFFFE || cp == 0xFFFF) {
            for (size_t i = 0; i < bytes; i++) {
                char e[4] = {'\\', 'x', hex[p[i] >> 4], hex[p[i] & 0xF]};
                psdb__buf_append(b, e, sizeof(e));
            }
        } else if (*p == '&') {
            psdb__buf_append(b, "&amp;", 5);
        } else if (*p == '<') {
            psdb__buf_append(b, "&lt;", 4);
        } else if (*p == '>') {
            psdb__buf_append(b, "&gt;", 4);
        } else if (*p == '"') {
            psdb__buf_append(b, "&quot;", 6);
        } else if (*p == '\'') {
            psdb__buf_append(b, "&apos;", 6);
        } else {
            psdb__buf_append(b, p, bytes);
        }
        p += bytes;
    }
}

void junit_appendf(psdb__buf *b, const char *fmt, ...)
{
    char small[256];
    char *big = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        goto cleanup;
    }
    if ((size_t)n < sizeof(small)) {
        psdb__buf_append(b, small, (size_t)n);
        goto cleanup;
    }
    big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        goto cleanup;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    psdb__buf_append(b, big, (size_t)n);
cleanup:
    free(big);
}

int junit_write_atomic(const char *path, const psdb__buf *b, char *err, size_t err_size)
{
    int rc = -1, fd = -1;
    size_t n = strlen(path) + sizeof(".XXXXXX");
    char *tmp = malloc(n);
    if (!tmp) {
        snprintf(err, err_size, "%s: out of memory", path);
        goto cleanup;
    }
    /* A unique sibling: two runs writing one report never share a temporary file, and the
     * rename stays within one file system. */
    snprintf(tmp, n, "%s.XXXXXX", path);
    fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(err, err_size, "%s: cannot create a temporary file beside it: mkstemp: %s", path,
                 strerror(errno));
        free(tmp);
        tmp = NULL;
        goto cleanup;
    }
    /* mkstemp makes the file 0600; a report is read by CI, so it gets a new file's usual mode. */
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0666 & ~mask) != 0) {
        snprintf(err, err_size, "%s: fchmod: %s", tmp, strerror(errno));
        goto cleanup;
    }
    for (size_t off = 0; off < b->len;) {
        ssize_t w = write(fd, b->data + off, b->len - off);
        if (w < 0 && psdb__errno_is(errno, PSDB__ERRNO_INTERRUPTED))
            continue;
        if (w <= 0) {
            snprintf(err, err_size, "%s: write: %s", tmp, w < 0 ? strerror(errno) : "no progress");
            goto cleanup;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0) {
        snprintf(err, err_size, "%s: fsync: %s", tmp, strerror(errno));
        goto cleanup;
    }
    int closed = close(fd);
    fd = -1;
    if (closed != 0) {
        snprintf(err, err_size, "%s: close: %s", tmp, strerror(errno));
        goto cleanup;
    }
    if (rename(tmp, path) != 0) {
        snprintf(err, err_size, "%s: rename from %s: %s", path, tmp, strerror(errno));
        goto cleanup;
    }
    free(tmp);
    tmp = NULL;
    rc = 0;
cleanup:
    if (fd >= 0)
        close(fd);
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    return rc;
}
