/* fdio.c - whole writes to a file descriptor, a directory fsync, the throttle of transfer
 * callbacks, and opening files that someone else may have planted a link, a FIFO or a device at.
 */
#include "common/fdio.h"
#include "common/status_map.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* write (off < 0) or pwrite at off until all n bytes are out. */
static int write_loop(int fd, const void *p, size_t n, int64_t off)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = off < 0 ? write(fd, b, n) : pwrite(fd, b, n, (off_t)off);
        if (w < 0 && psdb__errno_is(errno, PSDB__ERRNO_INTERRUPTED))
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

/* read (off < 0) or pread at off until n bytes are in or the end is reached. */
static ssize_t read_loop(int fd, void *p, size_t n, int64_t off)
{
    uint8_t *b = p;
    size_t got = 0;
    while (got < n) {
        ssize_t r = off < 0 ? read(fd, b + got, n - got)
                            : pread(fd, b + got, n - got, (off_t)((uint64_t)off + got));
        if (r < 0 && psdb__errno_is(errno, PSDB__ERRNO_INTERRUPTED))
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

ssize_t psdb__pread_upto(int fd, void *p, size_t n, uint64_t off)
{
    return off > (uint64_t)INT64_MAX ? (errno = EINVAL, -1) : read_loop(fd, p, n, (int64_t)off);
}

ssize_t psdb__read_upto(int fd, void *p, size_t n)
{
    return read_loop(fd, p, n, -1);
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

int psdb__file_acceptable(const struct stat *st, unsigned checks, char *why, size_t why_size)
{
    const char *kind = NULL;
    int ok = 0;
    if (S_ISLNK(st->st_mode))
        kind = "refused: a symbolic link, not a regular file (links are not followed)";
    else if (S_ISFIFO(st->st_mode))
        kind = "refused: a FIFO, not a regular file";
    else if (S_ISDIR(st->st_mode))
        kind = "refused: a directory, not a regular file";
    else if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode))
        kind = "refused: a device, not a regular file";
    else if (S_ISSOCK(st->st_mode))
        kind = "refused: a socket, not a regular file";
    else if (!S_ISREG(st->st_mode))
        kind = "refused: not a regular file";
    if (kind) {
        if (why && why_size)
            snprintf(why, why_size, "%s", kind);
        goto cleanup;
    }
    if ((checks & PSDB__OPEN_OURS) && st->st_uid != geteuid()) {
        if (why && why_size)
            snprintf(why, why_size, "refused: owned by uid %u, not by this user (uid %u)",
                     (unsigned)st->st_uid, (unsigned)geteuid());
        goto cleanup;
    }
    ok = 1;
cleanup:
    return ok;
}

int psdb__open_file(const char *path, int flags, mode_t mode, unsigned checks, char *why,
                    size_t why_size)
{
    const int follow = (checks & PSDB__OPEN_FOLLOW) != 0;
    struct stat st;
    int fd = -1, e = 0, refused = 0;
    /* A look first, so that a device is not even opened (opening some has effects); the fstat
     * below is what decides, whatever replaced the name in between. */
    if ((follow ? stat(path, &st) : lstat(path, &st)) == 0 &&
        !psdb__file_acceptable(&st, checks, why, why_size)) {
        refused = 1;
        goto cleanup;
    }
    fd = open(path,
              (flags & ~O_TRUNC) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW),
              mode);
    if (fd < 0) {
        e = errno;
        /* ELOOP: a link at the last component; ENXIO: a FIFO without a reader, opened for
         * writing. Either may have appeared after the look above: named as what it is. */
        if (psdb__errno_is(e, PSDB__ERRNO_NOT_A_FILE) && lstat(path, &st) == 0 &&
            !psdb__file_acceptable(&st, checks, why, why_size))
            refused = 1;
        goto cleanup;
    }
    if (fstat(fd, &st) != 0) {
        e = errno;
        goto cleanup;
    }
    if (!psdb__file_acceptable(&st, checks, why, why_size)) {
        refused = 1;
        goto cleanup;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 ||
        ((flags & O_TRUNC) && ftruncate(fd, 0) != 0)) {
        e = errno;
        goto cleanup;
    }
cleanup:
    if (refused || e) {
        if (fd >= 0)
            close(fd);
        fd = -1;
        if (!refused && why && why_size)
            snprintf(why, why_size, "%s", strerror(e));
        errno = refused ? EPERM : e;
    }
    return fd;
}

int psdb__create_file(const char *path, int flags, mode_t mode, char *why, size_t why_size)
{
    struct stat st;
    int fd = -1, e = 0;
    if (lstat(path, &st) == 0) {
        /* What a stale attempt of ours left, or a link (removing it leaves its target alone). */
        if (!S_ISLNK(st.st_mode) && !psdb__file_acceptable(&st, PSDB__OPEN_OURS, why, why_size)) {
            errno = EPERM;
            goto cleanup;
        }
        if (unlink(path) != 0 && !psdb__errno_is(errno, PSDB__ERRNO_ABSENT)) {
            e = errno;
            goto cleanup;
        }
    }
    fd = open(path, (flags & O_ACCMODE) | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC,
              mode);
    if (fd < 0)
        e = errno;
cleanup:
    if (e) {
        if (why && why_size)
            snprintf(why, why_size, "%s", strerror(e));
        errno = e;
    }
    return fd;
}

/* Whether path names fd's file itself (not through a link). */
static int names_fd(const char *path, int fd)
{
    struct stat held, named;
    return fd >= 0 && fstat(fd, &held) == 0 && lstat(path, &named) == 0 &&
           held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

int psdb__unlink_same(const char *path, int fd)
{
    return names_fd(path, fd) ? unlink(path) : -1;
}

int psdb__rename_same(const char *from, const char *to, int fd)
{
    int rc = -1;
    if (!names_fd(from, fd)) {
        errno = EPERM;
        goto cleanup;
    }
    if (rename(from, to) != 0)
        goto cleanup;
    if (!names_fd(to, fd)) {
        errno = EPERM;
        goto cleanup;
    }
    rc = 0;
cleanup:
    return rc;
}

int psdb__own_dir(const char *path, char *why, size_t why_size)
{
    struct stat st;
    const char *kind = NULL;
    int ok = 0;
    if (lstat(path, &st) != 0) {
        if (why && why_size)
            snprintf(why, why_size, "%s", strerror(errno));
        goto cleanup;
    }
    if (S_ISLNK(st.st_mode))
        kind = "refused: a symbolic link, not a directory (links are not followed)";
    else if (!S_ISDIR(st.st_mode))
        kind = "refused: not a directory";
    if (kind) {
        if (why && why_size)
            snprintf(why, why_size, "%s", kind);
        errno = EPERM;
        goto cleanup;
    }
    if (st.st_uid != geteuid()) {
        if (why && why_size)
            snprintf(why, why_size, "refused: owned by uid %u, not by this user (uid %u)",
                     (unsigned)st.st_uid, (unsigned)geteuid());
        errno = EPERM;
        goto cleanup;
    }
    ok = 1;
cleanup:
    return ok;
}
