/* store.h - the shared PSDB store of a registry root (<root>/psdbs/): its lock, the per-download
 * locks, file digests and the sweep of unreferenced files (implemented in store.c).
 *
 * DESIGN
 * Installers of different names share one store, so a file in it is either registered (some
 * component_psdbs row names it) or about to be (an install has put it there and has not committed
 * yet). Nothing records the second kind on disk; instead every install holds <root>/store.lock
 * with flock(LOCK_SH) from before it touches psdbs/ until after its registry commit, and a sweep
 * removes files only while it holds the same lock with LOCK_EX and the registry's write lock: at
 * that moment no install is between "file in psdbs/" and "registration committed", and no
 * registration can commit, so "not referenced" means "garbage". The kernel drops flock locks when
 * a process dies, so a killed install leaves no lock behind, only an unreferenced file that the
 * next sweep collects (or that the next install of the same digest reuses after hashing it).
 * Two installs of one digest serialize on flock(LOCK_EX) of <sha>.psdb.part, so they never write
 * one .part at once; the second finds the first's result and hashes it instead of downloading.
 * Whoever can write in psdbs/ may plant a link, a FIFO or a file of their own at any of these
 * names, so nothing here is opened by its name alone: psdb__open_file (common/fdio.h) refuses
 * what is not a regular file of ours without following or waiting on it, and a rename or a
 * cleanup acts on a name only while it still holds the file this process wrote. */
#ifndef PSDB_STORE_H
#define PSDB_STORE_H

#include "psdb/psdb.h"

#define PSDB__STORE_DIR "psdbs"
#define PSDB__STORE_LOCK "store.lock"
/* A .part (or a delta update's .delta and .valuemap) younger than this survives an automatic
 * sweep: a later install may resume it. */
#define PSDB__PART_GRACE_SECONDS (24 * 3600)

typedef struct psdb__store {
    char *dir;   /* absolute, symlinks resolved: <root>/psdbs */
    int lock_fd; /* <root>/store.lock; -1 when not open */
    int held;    /* LOCK_SH held */
} psdb__store;

/* Resolves the installer's root, creates psdbs/ and opens (without locking) store.lock. psdbs/
 * must be a directory of ours (not a link) and store.lock a regular file of ours (psdb__open_file:
 * a link, a FIFO, another user's file are refused, PSDB_E_ACCESS). On failure err (may be NULL)
 * gets a one-line reason naming the path. */
psdb_hr psdb__store_open(psdb_installer *inst, psdb__store *s, char *err, size_t err_size);
/* Takes the store lock shared (waits while a sweep runs). */
psdb_hr psdb__store_hold(psdb__store *s);
/* Drops the lock and closes the store. */
void psdb__store_close(psdb__store *s);

/* Drops a shared hold if any, then sweeps (psdb_installer_sweep_store's flags). PSDB_S_FALSE when
 * an install was in flight and PSDB_SWEEP_WAIT was not given: nothing was removed. */
psdb_hr psdb__store_sweep(psdb_installer *inst, psdb__store *s, uint32_t flags);

/* Locks the partial download of dest (<dest>.part, created when absent) against other processes;
 * *fd is the lock's descriptor. Waits while another process holds it. A .part that is not a
 * regular file of ours is refused (PSDB_E_ACCESS) and left alone; why (may be NULL) says what it
 * is (psdb__open_file). */
psdb_hr psdb__store_lock_part(const char *part, int *fd, char *why, size_t why_size);
/* Unlocks; with remove, first unlinks the .part if it is still the locked file. */
void psdb__store_unlock_part(const char *part, int fd, int remove);

/* SHA-256 of a regular file, opened with psdb__open_file (checks: its PSDB__OPEN_* flags): a
 * symbolic link is not followed and a FIFO does not block. PSDB_E_NOT_FOUND when absent or
 * refused (not a regular file, or with PSDB__OPEN_OURS another user's), PSDB_E_ACCESS, PSDB_E_IO
 * on read errors. */
psdb_hr psdb__file_sha256(const char *path, unsigned checks, uint8_t out[32]);

#endif
