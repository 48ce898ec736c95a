/* fdio.h - whole writes to a file descriptor, a directory fsync, the throttle of transfer
 * callbacks, and opening files that someone else may have planted a link, a FIFO or a device at.
 */
#ifndef PSDB_COMMON_FDIO_H
#define PSDB_COMMON_FDIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

/* Writes all n bytes of p to fd, resuming after EINTR and short writes. 0, or -1 with errno. */
int psdb__write_all(int fd, const void *p, size_t n);

/* The same at file offset off (pwrite): the file position does not move. */
int psdb__pwrite_all(int fd, const void *p, size_t n, uint64_t off);

/* Reads up to n bytes at file offset off into p, resuming after EINTR and short reads, until n
 * bytes or the end of the file: the count read (less than n only at the end), or -1 with errno.
 * For read windows that may run past the end of a file. */
ssize_t psdb__pread_upto(int fd, void *p, size_t n, uint64_t off);

/* The same from fd's position (read): for a pipe or a socket, which has no offsets. */
ssize_t psdb__read_upto(int fd, void *p, size_t n);

/* fsyncs the directory that holds path (after a rename into it). 0, or -1 with errno. */
int psdb__fsync_dir_of(const char *path);

/* Whether at least ms milliseconds passed since *last (CLOCK_MONOTONIC); when they did, *last
 * becomes now. Transfer callbacks use it to ask a progress callback at most every ms. */
int psdb__every_ms(struct timespec *last, long ms);

/* What psdb__open_file accepts; a regular file is always required. */
#define PSDB__OPEN_OURS 0x1u /* owned by the effective uid: a file this user wrote or may reuse */
#define PSDB__OPEN_FOLLOW                                                                          \
    0x2u /* a symbolic link is followed (a read of a file the caller named)                        \
          */

/* Opens path with open(2)'s flags and mode so that what another user, or a process with write
 * access to its directory, planted at that name is refused instead of followed or written
 * through: a symbolic link at the last component (O_NOFOLLOW, unless PSDB__OPEN_FOLLOW), a FIFO
 * (opened O_NONBLOCK, so it cannot block, then refused), a device, a socket, a directory, and with
 * PSDB__OPEN_OURS a file of another owner. O_TRUNC is applied only once the file passed (a
 * refused file is never truncated); O_CLOEXEC and O_NOCTTY are added; the returned descriptor is
 * blocking. The descriptor, or -1 with errno: EPERM for a refused file, the failing call's errno
 * otherwise; why (may be NULL) then gets one lowercase line without the path: "refused: a
 * symbolic link, not a regular file (links are not followed)", "refused: owned by uid 1000, not
 * by this user (uid 0)", or strerror(errno). */
int psdb__open_file(const char *path, int flags, mode_t mode, unsigned checks, char *why,
                    size_t why_size);

/* Creates path as a new file of ours (O_CREAT | O_EXCL | O_NOFOLLOW, with flags' access mode)
 * for a temporary that is written whole, first removing what an earlier attempt left at that
 * name: a regular file of ours, or a symbolic link (unlink removes the link, never its target).
 * Anything else there (a FIFO, a device, a directory, another user's file) is refused and left
 * alone. The descriptor, or -1 with errno and why as psdb__open_file. */
int psdb__create_file(const char *path, int flags, mode_t mode, char *why, size_t why_size);

/* Unlinks path only while it still names the file open as fd (same device and inode, not
 * followed through a link): a cleanup then never removes what another process put at the name
 * meanwhile, nor a file this call did not create. 0 when removed, -1 otherwise. */
int psdb__unlink_same(const char *path, int fd);

/* Renames from over to only while from names the file open as fd, and checks that to names it
 * afterwards: a temporary swapped for a link or another file while it was written is never put
 * in place as if it were ours (renaming a link moves the link, not its target). 0, or -1 with
 * errno (EPERM when the names no longer hold fd's file). */
int psdb__rename_same(const char *from, const char *to, int fd);

/* Whether path is a directory of the effective uid itself, not a symbolic link to one: the
 * directory that holds files opened with PSDB__OPEN_OURS, which a link would send elsewhere.
 * When not, errno is EPERM (or lstat's) and why (may be NULL) says what it is, as
 * psdb__open_file. */
int psdb__own_dir(const char *path, char *why, size_t why_size);

/* Whether st (from stat or fstat) is a regular file and, with PSDB__OPEN_OURS in checks, owned by
 * the effective uid; when not, why (may be NULL) says what it is, as psdb__open_file. */
int psdb__file_acceptable(const struct stat *st, unsigned checks, char *why, size_t why_size);

#endif
