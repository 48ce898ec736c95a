/* fdio.c - whole writes to a file descriptor, a directory fsync, and the throttle of transfer
 * callbacks. */
#include "common/fdio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* write (off < 0) or pwrite at off until all n bytes are out. */
static int write_loop(int fd, const void *p, size_t n, int64_t off)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = off < 0 ? write(fd, b, n) : pwrite(fd, b, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        b += w;
        n -= (size_t)w;
        if (off >= 0)
            off += w;
    }
    return 0;
}

int psdb__write_all(int fd, const void *p, size_t n)
{
    return write_loop(fd, p, n, -1);
}

int psdb__pwrite_all(int fd, const void *p, size_t n, uint64_t off)
{
    return off > (uint64_t)INT64_MAX ? (errno = EINVAL, -1) : write_loop(fd, p, n, (int64_t)off);
}

ssize_t psdb__pread_upto(int fd, void *p, size_t n, uint64_t off)
{
    uint8_t *b = p;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, b + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int psdb__fsync_dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = NULL;
    if (!slash)
        dir = strdup(".");
    else if (slash == path)
        dir = strdup("/");
    else if ((dir = malloc((size_t)(slash - path) + 1)) != NULL) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
    }
    if (!dir) {
        errno = ENOMEM;
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int psdb__every_ms(struct timespec *last, long ms)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long passed =
        (long)(now.tv_sec - last->tv_sec) * 1000 + (now.tv_nsec - last->tv_nsec) / 1000000;
    if (passed < ms)
        return 0;
    *last = now;
    return 1;
}
