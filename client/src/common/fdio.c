/* fdio.c - whole writes to a file descriptor, and the throttle of transfer callbacks. */
#include "common/fdio.h"

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

int psdb__write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int psdb__pwrite_all(int fd, const void *p, size_t n, uint64_t off)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = pwrite(fd, b, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        b += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
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
