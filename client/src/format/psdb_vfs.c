/* psdb_vfs.c - the VFS of an open PSDB: every connection reads the one file descriptor
 * psdb_file_open checked, and interior B-tree pages are kept once for all connections. */
#include "format/psdbfile_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <sqlite3.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/fdio.h"
#include "common/hash.h"
#include "common/status_map.h"

/* ---- The file every connection reads ----------------------------------------------------------
 */

/* A PSDB is checked once, at psdb_file_open, and then read by connections opened later, one per
 * looking-up thread. Had each of them opened the path again, a file renamed over it after the
 * check (a replaced store file, a registry row pointing elsewhere) would be read unchecked. So the
 * main database file of every connection is the descriptor the open checked (a regular file, read
 * with pread, shared: pread needs no lock), and the path is never resolved again. */

/* ---- Interior page cache ----------------------------------------------------------------------
 */

/* Each blob fetch seeks the blobs B-tree from its root. The leaf page is a different one each time,
 * and its reads push the interior pages out of every connection's LRU cache, so without help a
 * fetch costs a pread per level. The file is immutable and mapped I/O is ruled out, so the VFS of
 * the file's connections keeps a copy of every interior B-tree page it reads, shared by all
 * connections of the psdb_file, and serves later reads of that page with a copy from memory. A
 * page is kept only once read whole and intact, so a truncated file still gives short reads. */
#define PAGE_CACHE_MAX_BYTES ((size_t)64 << 20) /* a crafted file of interior pages stops here */
#define PAGE_CACHE_MAX_PAGES ((uint64_t)1 << PAGE_CACHE_MAX_PAGES_LOG2)

/* Sequential reads go through a read-ahead window. SQLite reads a page (4 KiB) per call, and a
 * whole-file pass (integrity_check, hashing every blob: a publish does both) then costs a system
 * call per page; the window turns a run of consecutive reads into one pread of up to
 * READ_AHEAD_MAX bytes, growing from READ_AHEAD_MIN so that the short runs of a lookup (a blob of
 * a few pages) read little beyond what they need. A read that is not the continuation of the
 * previous one resets the growth and goes to the file directly. The window belongs to one
 * connection's file handle (SQLite uses a connection from one thread at a time) and needs no lock;
 * the file is immutable, so its bytes stay valid, and a window that would reach past the end of a
 * truncated file is not kept: the read goes to the file and gets its short read. */
#define READ_AHEAD_MIN ((size_t)32 << 10)
#define READ_AHEAD_MAX ((size_t)256 << 10)

/* Scan mode (PSDB__FCNTL_SCAN, psdb_file_verify's connections): a whole-file pass reads nearly
 * every page, but not in one direction. integrity_check walks each B-tree's cells from the last to
 * the first (backwards through the file), the blob threads skip the chunks the other thread
 * claimed, and the pages of an index lie between the table's. The read-ahead window above restarts
 * at every such step and left most of a 200 MiB file to 4 KiB preads, 3.5 per page (measured:
 * 179k preads, 0.4 s of a 1.1 s verification in the kernel). In scan mode the connection keeps
 * SCAN_SLOTS aligned blocks of SCAN_BLOCK bytes: a read in a kept block is a copy; a read next to
 * the previous one (its block or a neighbour, either direction) loads its block with one pread; a
 * read far from the previous one (an index seek) goes to the file alone, so scattered reads cost
 * no more than before. Blocks are read with the file's length at that moment: a read past a
 * block's end goes to the file and gets its short read, as without scan mode. */
#define SCAN_BLOCK ((size_t)256 << 10)
#define SCAN_SLOTS 4

typedef struct scan_slot {
    uint8_t *buf;        /* SCAN_BLOCK bytes, or NULL until first used */
    sqlite3_int64 block; /* block number (offset / SCAN_BLOCK); -1: empty */
    size_t len;          /* bytes read at block * SCAN_BLOCK */
    uint64_t used;       /* scan_state.clock at the last read served */
} scan_slot;

typedef struct scan_state {
    scan_slot slot[SCAN_SLOTS];
    sqlite3_int64 prev; /* block of the previous read; -1: none */
    uint64_t clock;
} scan_state;

typedef struct pc_file {
    sqlite3_file base;
    page_cache *pc;     /* NULL: not the main database file, nothing cached */
    int fd;             /* the main database file: pc->fd (not owned); -1 for other files */
    sqlite3_file *real; /* other files: the base VFS's file, stored right after this struct */
    uint8_t *win;       /* READ_AHEAD_MAX bytes once a sequential run began, or NULL */
    sqlite3_int64 win_off;
    size_t win_len;         /* valid bytes at win_off; 0: empty */
    size_t win_next;        /* size of the next window read; 0 until a run begins */
    sqlite3_int64 next_off; /* where the previous read ended */
    scan_state *scan;       /* scan mode on: its blocks; NULL: off */
} pc_file;

static void scan_free(scan_state *sc)
{
    for (size_t i = 0; sc && i < SCAN_SLOTS; i++)
        free(sc->slot[i].buf);
    free(sc);
}

static int pc_close(sqlite3_file *file)
{
    pc_file *p = (pc_file *)file;
    free(p->win);
    p->win = NULL;
    scan_free(p->scan);
    p->scan = NULL;
    return p->fd >= 0 ? SQLITE_OK : p->real->pMethods->xClose(p->real);
}

/* xRead of the main file: SQLite wants the rest of a short read zero-filled. */
static int fd_read(int fd, void *buf, int amt, sqlite3_int64 off)
{
    ssize_t got = psdb__pread_upto(fd, buf, (size_t)amt, (uint64_t)off);
    if (got < 0)
        return SQLITE_IOERR_READ;
    if ((size_t)got < (size_t)amt) {
        memset((uint8_t *)buf + got, 0, (size_t)amt - (size_t)got);
        return SQLITE_IOERR_SHORT_READ;
    }
    return SQLITE_OK;
}

static int raw_read(pc_file *p, void *buf, int amt, sqlite3_int64 off)
{
    if (p->fd < 0)
        return p->real->pMethods->xRead(p->real, buf, amt, off);
    atomic_fetch_add_explicit(&p->pc->reads, 1, memory_order_relaxed);
    return fd_read(p->fd, buf, amt, off);
}

/* Serves the read from the window when it holds it, refilling the window for a sequential read.
 * 1 when buf was filled from the window, 0 when the caller must read from the file. */
static int pc_read_ahead(pc_file *p, void *buf, int amt, sqlite3_int64 off)
{
    int sequential = off == p->next_off;
    size_t n = (size_t)amt;

    p->next_off = off + amt;
    if (p->win_len && off >= p->win_off && (uint64_t)(off - p->win_off) <= p->win_len &&
        n <= p->win_len - (size_t)(off - p->win_off)) {
        memcpy(buf, p->win + (off - p->win_off), n);
        return 1;
    }
    if (!sequential) {
        p->win_next = 0;
        return 0;
    }
    p->win_next = p->win_next ? p->win_next * 2 : READ_AHEAD_MIN;
    if (p->win_next > READ_AHEAD_MAX)
        p->win_next = READ_AHEAD_MAX;
    if (n > p->win_next)
        return 0;
    if (!p->win && !(p->win = malloc(READ_AHEAD_MAX)))
        return 0; /* no memory: read page by page */
    p->win_len = 0;
    if (raw_read(p, p->win, (int)p->win_next, off) != SQLITE_OK)
        return 0; /* a short read near the end, or an error: the direct read reports it */
    p->win_off = off;
    p->win_len = p->win_next;
    memcpy(buf, p->win, n);
    return 1;
}

/* Scan mode's read (see SCAN_BLOCK). 1 when buf was filled from a block, 0 when the caller must
 * read from the file. */
static int pc_read_scan(pc_file *p, void *buf, int amt, sqlite3_int64 off)
{
    scan_state *sc = p->scan;
    sqlite3_int64 block = off / (sqlite3_int64)SCAN_BLOCK, prev = sc->prev;
    size_t at = (size_t)(off - block * (sqlite3_int64)SCAN_BLOCK), n = (size_t)amt;
    scan_slot *s = NULL;
    ssize_t got;

    sc->prev = block;
    if (n > SCAN_BLOCK - at)
        return 0; /* crosses a block boundary: SQLite's pages never do */
    for (size_t i = 0; i < SCAN_SLOTS; i++)
        if (sc->slot[i].block == block) {
            s = &sc->slot[i];
            break;
        }
    if (!s) {
        if (prev < 0 || block < prev - 1 || block > prev + 1)
            return 0; /* far from the previous read: this page alone */
        s = &sc->slot[0];
        for (size_t i = 1; i < SCAN_SLOTS; i++)
            if (sc->slot[i].used < s->used)
                s = &sc->slot[i];
        if (!s->buf && !(s->buf = malloc(SCAN_BLOCK)))
            return 0; /* no memory: read page by page */
        s->block = -1;
        atomic_fetch_add_explicit(&p->pc->reads, 1, memory_order_relaxed);
        got = psdb__pread_upto(p->fd, s->buf, SCAN_BLOCK, (uint64_t)block * SCAN_BLOCK);
        if (got <= 0)
            return 0; /* an error or nothing there: the direct read reports it */
        s->block = block;
        s->len = (size_t)got;
    }
    s->used = ++sc->clock;
    if (n > s->len || at > s->len - n)
        return 0; /* past the block's end: the file's short read */
    memcpy(buf, s->buf + at, n);
    return 1;
}

static int pc_read(sqlite3_file *file, void *buf, int amt, sqlite3_int64 off)
{
    pc_file *p = (pc_file *)file;
    page_cache *pc = p->pc;
    uint8_t *page = NULL;
    uint64_t idx = 0;
    int rc = SQLITE_OK, cacheable = pc && pc->pages && amt == (int)PAGE_CACHE_PAGE_SIZE &&
                                    off >= 0 && (uint64_t)off % PAGE_CACHE_PAGE_SIZE == 0 &&
                                    (uint64_t)off / PAGE_CACHE_PAGE_SIZE < pc->num_pages;

    if (cacheable) {
        idx = (uint64_t)off / PAGE_CACHE_PAGE_SIZE;
        page = atomic_load_explicit(&pc->pages[idx], memory_order_acquire);
        if (page) {
            memcpy(buf, page, PAGE_CACHE_PAGE_SIZE);
            return SQLITE_OK;
        }
    }
    if (!p->pc || !(p->scan ? pc_read_scan(p, buf, amt, off) : pc_read_ahead(p, buf, amt, off)))
        rc = raw_read(p, buf, amt, off);
    if (rc == SQLITE_OK && cacheable)
        psdb__pf_page_keep(pc, idx, buf);
    return rc;
}

void psdb__pf_page_keep(page_cache *pc, uint64_t idx, const uint8_t *buf)
{
    uint8_t *page = NULL, *expected = NULL;

    if (!pc->pages || idx >= pc->num_pages)
        return;
    /* B-tree page type flag (after the 100-byte file header on page 1): 2 and 5 are interior. */
    uint8_t type = buf[idx == 0 ? SQLITE_HEADER_SIZE : 0];
    if (type != 2 && type != 5)
        return;
    /* Reserve first so that concurrent readers never pass the cap together. */
    if (atomic_fetch_add(&pc->bytes, PAGE_CACHE_PAGE_SIZE) >= PAGE_CACHE_MAX_BYTES) {
        atomic_fetch_sub(&pc->bytes, PAGE_CACHE_PAGE_SIZE);
        return;
    }
    if ((page = malloc(PAGE_CACHE_PAGE_SIZE)) != NULL) {
        memcpy(page, buf, PAGE_CACHE_PAGE_SIZE);
        if (atomic_compare_exchange_strong_explicit(&pc->pages[idx], &expected, page,
                                                    memory_order_release, memory_order_relaxed))
            return;
        free(page); /* another connection stored the same bytes first */
    }
    atomic_fetch_sub(&pc->bytes, PAGE_CACHE_PAGE_SIZE);
}

/* The main file is immutable and read-only: SQLite never writes, locks or syncs it (immutable=1),
 * and the calls that would are refused or answered as for a file nobody else touches. */
static int pc_write(sqlite3_file *file, const void *buf, int amt, sqlite3_int64 off)
{
    pc_file *p = (pc_file *)file;
    return p->fd >= 0 ? SQLITE_READONLY : p->real->pMethods->xWrite(p->real, buf, amt, off);
}

static int pc_truncate(sqlite3_file *file, sqlite3_int64 size)
{
    pc_file *p = (pc_file *)file;
    return p->fd >= 0 ? SQLITE_READONLY : p->real->pMethods->xTruncate(p->real, size);
}

static int pc_sync(sqlite3_file *file, int flags)
{
    pc_file *p = (pc_file *)file;
    return p->fd >= 0 ? SQLITE_OK : p->real->pMethods->xSync(p->real, flags);
}

static int pc_file_size(sqlite3_file *file, sqlite3_int64 *size)
{
    pc_file *p = (pc_file *)file;
    struct stat sb;
    if (p->fd < 0)
        return p->real->pMethods->xFileSize(p->real, size);
    if (fstat(p->fd, &sb) != 0)
        return SQLITE_IOERR_FSTAT;
    *size = (sqlite3_int64)sb.st_size;
    return SQLITE_OK;
}

static int pc_lock(sqlite3_file *file, int lock)
{
    pc_file *p = (pc_file *)file;
    return p->fd >= 0 ? SQLITE_OK : p->real->pMethods->xLock(p->real, lock);
}

static int pc_unlock(sqlite3_file *file, int lock)
{
    pc_file *p = (pc_file *)file;
    return p->fd >= 0 ? SQLITE_OK : p->real->pMethods->xUnlock(p->real, lock);
}

static int pc_check_reserved_lock(sqlite3_file *file, int *out)
{
    pc_file *p = (pc_file *)file;
    if (p->fd >= 0) {
        *out = 0;
        return SQLITE_OK;
    }
    return p->real->pMethods->xCheckReservedLock(p->real, out);
}

static int pc_file_control(sqlite3_file *file, int op, void *arg)
{
    pc_file *p = (pc_file *)file;
    if (p->fd < 0)
        return p->real->pMethods->xFileControl(p->real, op, arg);
    if (op != PSDB__FCNTL_SCAN || !p->pc)
        return SQLITE_NOTFOUND;
    if (!*(const int *)arg) {
        scan_free(p->scan);
        p->scan = NULL;
    } else if (!p->scan) {
        if (!(p->scan = calloc(1, sizeof(*p->scan))))
            return SQLITE_NOMEM;
        p->scan->prev = -1;
        for (size_t i = 0; i < SCAN_SLOTS; i++)
            p->scan->slot[i].block = -1;
    }
    return SQLITE_OK;
}

static int pc_sector_size(sqlite3_file *file)
{
    pc_file *p = (pc_file *)file;
    return p->fd >= 0 ? (int)PAGE_CACHE_PAGE_SIZE : p->real->pMethods->xSectorSize(p->real);
}

static int pc_device_characteristics(sqlite3_file *file)
{
    pc_file *p = (pc_file *)file;
    return p->fd >= 0 ? SQLITE_IOCAP_IMMUTABLE : p->real->pMethods->xDeviceCharacteristics(p->real);
}

/* Version 1: no shared memory (immutable files need no WAL) and no xFetch (no mapped I/O). */
static const sqlite3_io_methods pc_methods = {
    .iVersion = 1,
    .xClose = pc_close,
    .xRead = pc_read,
    .xWrite = pc_write,
    .xTruncate = pc_truncate,
    .xSync = pc_sync,
    .xFileSize = pc_file_size,
    .xLock = pc_lock,
    .xUnlock = pc_unlock,
    .xCheckReservedLock = pc_check_reserved_lock,
    .xFileControl = pc_file_control,
    .xSectorSize = pc_sector_size,
    .xDeviceCharacteristics = pc_device_characteristics,
};

static int pc_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *file, int flags,
                   int *out_flags)
{
    page_cache *pc = vfs->pAppData;
    pc_file *p = (pc_file *)file;
    int rc = SQLITE_OK;

    memset(p, 0, sizeof(*p));
    p->fd = -1;
    p->real = (sqlite3_file *)(p + 1);
    if (flags & SQLITE_OPEN_MAIN_DB) {
        /* The one file psdb_file_open checked, whatever the name now names. */
        if (flags & (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE))
            return SQLITE_CANTOPEN;
        p->pc = pc;
        p->fd = pc->fd;
        p->base.pMethods = &pc_methods;
        if (out_flags)
            *out_flags = SQLITE_OPEN_READONLY;
        return SQLITE_OK;
    }
    rc = pc->base->xOpen(pc->base, name, p->real, flags, out_flags);
    if (rc == SQLITE_OK && p->real->pMethods) {
        p->base.pMethods = &pc_methods;
    } else if (p->real->pMethods) {
        p->real->pMethods->xClose(p->real);
        p->real->pMethods = NULL;
    }
    return rc;
}

static int pc_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xDelete(b, name, sync_dir);
}

static int pc_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xAccess(b, name, flags, out);
}

static int pc_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xFullPathname(b, name, n, out);
}

static void *pc_dl_open(sqlite3_vfs *vfs, const char *name)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xDlOpen ? b->xDlOpen(b, name) : NULL;
}

static void pc_dl_error(sqlite3_vfs *vfs, int n, char *out)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    if (b->xDlError)
        b->xDlError(b, n, out);
    else if (n > 0)
        out[0] = '\0';
}

static void (*pc_dl_sym(sqlite3_vfs *vfs, void *lib, const char *sym))(void)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xDlSym ? b->xDlSym(b, lib, sym) : NULL;
}

static void pc_dl_close(sqlite3_vfs *vfs, void *lib)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    if (b->xDlClose)
        b->xDlClose(b, lib);
}

static int pc_randomness(sqlite3_vfs *vfs, int n, char *out)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xRandomness(b, n, out);
}

static int pc_sleep(sqlite3_vfs *vfs, int us)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xSleep(b, us);
}

static int pc_current_time(sqlite3_vfs *vfs, double *out)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xCurrentTime(b, out);
}

static int pc_get_last_error(sqlite3_vfs *vfs, int n, char *out)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    return b->xGetLastError ? b->xGetLastError(b, n, out) : 0;
}

static int pc_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    sqlite3_vfs *b = ((page_cache *)vfs->pAppData)->base;
    if (b->iVersion >= 2 && b->xCurrentTimeInt64)
        return b->xCurrentTimeInt64(b, out);
    double t = 0;
    int rc = b->xCurrentTime(b, &t);
    *out = (sqlite3_int64)(t * 86400000.0);
    return rc;
}

void psdb__pf_page_cache_free(page_cache *pc)
{
    if (!pc)
        return;
    if (pc->registered)
        sqlite3_vfs_unregister(&pc->vfs);
    for (size_t i = 0; pc->pages && i < pc->num_pages; i++)
        free(atomic_load(&pc->pages[i]));
    free((void *)pc->pages);
    if (pc->fd >= 0)
        close(pc->fd);
    free(pc);
}

/* The VFS of a file of file_size bytes open as fd (taken over: closed by psdb__pf_page_cache_free,
 * also when this fails). NULL when there is no memory for it. Files too large for the page cache
 * are read without it. */
page_cache *psdb__pf_page_cache_new(int fd, uint64_t file_size)
{
    page_cache *pc = NULL;
    sqlite3_vfs *base = sqlite3_vfs_find(NULL);
    uint64_t n = file_size / PAGE_CACHE_PAGE_SIZE;

    if (!base || base->szOsFile < 0 || (size_t)base->szOsFile > INT_MAX - sizeof(pc_file))
        goto fail;
    if (!(pc = calloc(1, sizeof(*pc))))
        goto fail;
    pc->fd = fd;
    fd = -1;
    pc->base = base;
    if (n > 0 && n <= PAGE_CACHE_MAX_PAGES) {
        pc->num_pages = (size_t)n;
        pc->pages = calloc(pc->num_pages, sizeof(*pc->pages)); /* NULL: no cache, only slower */
        if (!pc->pages)
            pc->num_pages = 0;
    }
    snprintf(pc->name, sizeof(pc->name), "psdb-pages-%p", (void *)pc);
    pc->vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)(sizeof(pc_file) + (size_t)base->szOsFile),
        .mxPathname = base->mxPathname,
        .zName = pc->name,
        .pAppData = pc,
        .xOpen = pc_open,
        .xDelete = pc_delete,
        .xAccess = pc_access,
        .xFullPathname = pc_full_pathname,
        .xDlOpen = pc_dl_open,
        .xDlError = pc_dl_error,
        .xDlSym = pc_dl_sym,
        .xDlClose = pc_dl_close,
        .xRandomness = pc_randomness,
        .xSleep = pc_sleep,
        .xCurrentTime = pc_current_time,
        .xGetLastError = pc_get_last_error,
        .xCurrentTimeInt64 = pc_current_time_int64,
    };
    if (sqlite3_vfs_register(&pc->vfs, 0) != SQLITE_OK)
        goto fail;
    pc->registered = 1;
    return pc;
fail:
    if (fd >= 0)
        close(fd);
    psdb__pf_page_cache_free(pc);
    return NULL;
}
