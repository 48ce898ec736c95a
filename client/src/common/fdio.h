/* fdio.h - whole writes to a file descriptor, a directory fsync, and the throttle of transfer
 * callbacks. */
#ifndef PSDB_COMMON_FDIO_H
#define PSDB_COMMON_FDIO_H

#include <stddef.h>
#include <stdint.h>
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

/* fsyncs the directory that holds path (after a rename into it). 0, or -1 with errno. */
int psdb__fsync_dir_of(const char *path);

/* Whether at least ms milliseconds passed since *last (CLOCK_MONOTONIC); when they did, *last
 * becomes now. Transfer callbacks use it to ask a progress callback at most every ms. */
int psdb__every_ms(struct timespec *last, long ms);

#endif
