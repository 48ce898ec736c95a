/* store.c - the content-addressed blob store: blobs/<aa>/<sha256>, uploads staged in tmp/. */
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#include "common/status_map.h"

/* mkdir -p: the default data directory's parents (~/.local/share) may not exist yet. */
static int mkdir_p(const char *path, mode_t mode)
{
    char *p = xstrdup(path);
    int rc = 0;
    for (char *s = p + 1; *s && rc == 0; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && !psdb__errno_is(errno, PSDB__ERRNO_EXISTS))
            rc = -1;
        *s = '/';
    }
    if (rc == 0 && mkdir(p, mode) != 0 && !psdb__errno_is(errno, PSDB__ERRNO_EXISTS))
        rc = -1;
    free(p);
    return rc;
}

static int fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;
    if (fd < 0)
        return errno;
    if (fsync(fd) != 0)
        rc = errno;
    close(fd);
    return rc;
}

int psdbd_store_open(psdbd_store *s, const char *data_dir, int clean_tmp, char *err,
                     size_t err_size)
{
    DIR *d = NULL;
    struct dirent *e;
    memset(s, 0, sizeof(*s));
    s->dir = xstrdup(data_dir);
    s->blob_dir = xasprintf("%s/blobs", data_dir);
    s->tmp_dir = xasprintf("%s/tmp", data_dir);
    if (mkdir_p(s->dir, 0750) != 0 || mkdir_p(s->blob_dir, 0750) != 0 ||
        mkdir_p(s->tmp_dir, 0750) != 0) {
        snprintf(err, err_size, "create data directory %s: %s", data_dir, strerror(errno));
        return -1;
    }
    if (!clean_tmp)
        return 0;
    d = opendir(s->tmp_dir);
    if (!d) {
        snprintf(err, err_size, "open %s: %s", s->tmp_dir, strerror(errno));
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "upload-", 7) != 0)
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            psdbd_log("removed leftover upload tmp/%s", e->d_name);
    }
    closedir(d);
    return 0;
}

void psdbd_store_close(psdbd_store *s)
{
    free(s->dir);
    free(s->blob_dir);
    free(s->tmp_dir);
    memset(s, 0, sizeof(*s));
}

int psdbd_is_digest(const char *hex)
{
    return psdbd_is_lower_hex(hex, 64) && hex[64] == '\0';
}

int psdbd_store_temp(psdbd_store *s, int *fd, char **path)
{
    char *p = xasprintf("%s/upload-XXXXXX", s->tmp_dir);
    int f = mkostemp(p, O_CLOEXEC);
    if (f < 0) {
        int e = errno;
        free(p);
        return e;
    }
    *fd = f;
    *path = p;
    return 0;
}

char *psdbd_store_path(const psdbd_store *s, const char *sha256)
{
    return xasprintf("%s/%.2s/%s", s->blob_dir, sha256, sha256);
}

int psdbd_store_commit(psdbd_store *s, int fd, const char *tmp_path, const char *sha256,
                       int *replaced)
{
    char *sub = xasprintf("%s/%.2s", s->blob_dir, sha256);
    char *dst = psdbd_store_path(s, sha256);
    struct stat sb;
    int rc = 0, found = 0;
    *replaced = 0;
    if (fsync(fd) != 0) {
        rc = errno;
        goto cleanup;
    }
    if (mkdir(sub, 0750) == 0) {
        if ((rc = fsync_dir(s->blob_dir)) != 0)
            goto cleanup;
    } else if (!psdb__errno_is(errno, PSDB__ERRNO_EXISTS)) {
        rc = errno;
        goto cleanup;
    }
    struct stat tb;
    if (fstat(fd, &tb) != 0) {
        rc = errno;
        goto cleanup;
    }
    found = stat(dst, &sb) == 0;
    if (found && sb.st_size == tb.st_size) {
        /* Content-addressed: an existing blob with this name already holds these bytes (a file
         * of another size is damaged and gets replaced below). */
        unlink(tmp_path);
        goto cleanup;
    }
    if (fchmod(fd, 0640) != 0 || rename(tmp_path, dst) != 0) {
        rc = errno;
        goto cleanup;
    }
    *replaced = found;
    rc = fsync_dir(sub);
cleanup:
    free(sub);
    free(dst);
    return rc;
}

int psdbd_store_open_blob(const psdbd_store *s, const char *sha256, int *fd, uint64_t *size)
{
    char *p = psdbd_store_path(s, sha256);
    struct stat sb;
    int rc = 0;
    int f = open(p, O_RDONLY | O_CLOEXEC);
    if (f < 0) {
        rc = errno;
        goto cleanup;
    }
    if (fstat(f, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rc = S_ISREG(sb.st_mode) ? errno : ENOENT;
        close(f);
        goto cleanup;
    }
    *fd = f;
    *size = (uint64_t)sb.st_size;
cleanup:
    free(p);
    return rc;
}

int psdbd_store_walk(const psdbd_store *s,
                     int (*fn)(const char *sha256, uint64_t size, int64_t mtime, void *ctx),
                     void (*stray)(const char *path, void *ctx), void *ctx)
{
    DIR *top = opendir(s->blob_dir), *sub = NULL;
    struct dirent *e, *f;
    int rc = 0, stop = 0;
    if (!top)
        return errno;
    while (!stop && (e = readdir(top)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char *subpath = xasprintf("%s/%s", s->blob_dir, e->d_name);
        int ok_name = strlen(e->d_name) == 2 && psdbd_is_lower_hex(e->d_name, 2);
        sub = ok_name ? opendir(subpath) : NULL;
        if (!sub) {
            if (stray)
                stray(subpath, ctx);
            free(subpath);
            continue;
        }
        while (!stop && (f = readdir(sub)) != NULL) {
            struct stat sb;
            if (strcmp(f->d_name, ".") == 0 || strcmp(f->d_name, "..") == 0)
                continue;
            if (!psdbd_is_digest(f->d_name) || strncmp(f->d_name, e->d_name, 2) != 0 ||
                fstatat(dirfd(sub), f->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
                !S_ISREG(sb.st_mode)) {
                if (stray) {
                    char *fp = xasprintf("%s/%s", subpath, f->d_name);
                    stray(fp, ctx);
                    free(fp);
                }
                continue;
            }
            stop = fn(f->d_name, (uint64_t)sb.st_size, (int64_t)sb.st_mtime, ctx);
        }
        closedir(sub);
        free(subpath);
    }
    closedir(top);
    return rc;
}

int psdbd_sha256_file(const char *path, char out[65], uint64_t *size)
{
    psdb__sha256_ctx *ctx = NULL;
    uint8_t md[32];
    char *buf = xmalloc(1 << 20);
    uint64_t total = 0;
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = errno;
        goto cleanup;
    }
    if (!(ctx = psdb__sha256_begin()))
        psdbd_out_of_memory();
    for (;;) {
        ssize_t n = read(fd, buf, 1 << 20);
        if (n < 0 && psdb__errno_is(errno, PSDB__ERRNO_INTERRUPTED))
            continue;
        if (n < 0) {
            rc = errno;
            goto cleanup;
        }
        if (n == 0)
            break;
        psdb__sha256_update(ctx, buf, (size_t)n);
        total += (uint64_t)n;
    }
    psdb__sha256_end(ctx, md);
    ctx = NULL;
    psdb__hex(md, sizeof(md), out);
    if (size)
        *size = total;
cleanup:
    if (ctx) /* ending is how a context is freed; the partial digest is dropped */
        psdb__sha256_end(ctx, md);
    if (fd >= 0)
        close(fd);
    free(buf);
    return rc;
}
