/* vk_deliver.c - a PSDB's driver code handed to the Vulkan driver (schema/COMPILER.md §5). */
#include "vulkan/psdb_vulkan.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/buf.h"
#include "common/fdio.h"

psdb_hr vkdl_open(const char *path, const vkid *id, const vkdl_trust *trust, psdb_file **out)
{
    psdb_adapter_desc a;
    psdb_file *f = NULL;
    psdb_hr hr;
    memset(&a, 0, sizeof(a));
    *out = NULL;
    if (id) {
        a.vendor_id = id->vendor_id;
        a.device_id = id->device_id;
        a.family = id->family;
        a.abi_min = a.abi_max = id->abi;
        a.compiler_version = id->compiler_version;
    }
    hr = psdb_file_open(path, id ? &a : NULL, &f);
    if (PSDB_SUCCEEDED(hr))
        hr = trust && trust->have_sha256 ? psdb_file_check(f, PSDB_FILE_CHECK_SHA256, trust->sha256)
                                         : psdb_file_check(f, PSDB_FILE_CHECK_CONTENT, NULL);
    if (PSDB_FAILED(hr)) {
        psdb_file_release(f);
        return hr;
    }
    *out = f;
    return PSDB_S_OK;
}

/* ---- Proofs on a thread of their own ------------------------------------------------------- */
struct vkdl_proof {
    char *path;
    vkdl_trust trust;
    psdb_file *f; /* open, not yet proven; NULL when the open failed */
    psdb_hr hr;   /* the open's, then the proof's */
    char why[512];
    pthread_t thread;
    int started;
};

static void proof_run(vkdl_proof *p)
{
    if (PSDB_FAILED(p->hr))
        return;
    p->hr = p->trust.have_sha256 ? psdb_file_check(p->f, PSDB_FILE_CHECK_SHA256, p->trust.sha256)
                                 : psdb_file_check(p->f, PSDB_FILE_CHECK_CONTENT, NULL);
    if (PSDB_FAILED(p->hr))
        snprintf(p->why, sizeof(p->why), "%s", psdb_error_last());
}

static void *proof_main(void *arg)
{
    proof_run(arg);
    return NULL;
}

psdb_hr vkdl_proof_start(const char *path, const vkdl_trust *trust, vkdl_proof **out)
{
    vkdl_proof *p = calloc(1, sizeof(*p));
    *out = NULL;
    if (!p || !(p->path = strdup(path))) {
        free(p);
        return PSDB_E_OUTOFMEMORY;
    }
    if (trust)
        p->trust = *trust;
    p->hr = psdb_file_open(path, NULL, &p->f);
    if (PSDB_FAILED(p->hr))
        snprintf(p->why, sizeof(p->why), "%s", psdb_error_last());
    else
        p->started = pthread_create(&p->thread, NULL, proof_main, p) == 0;
    *out = p;
    return PSDB_S_OK;
}

psdb_file *vkdl_proof_peek(vkdl_proof *p)
{
    return p->f;
}

const char *vkdl_proof_path(const vkdl_proof *p)
{
    return p->path;
}

/* What psdb_file_open checks of an adapter (schema/PSDB.md, checks 7-9), for a file opened
 * before the device existed: the device's family, its ABI exactly, profile version 0. */
static psdb_hr fits_device(psdb_file *f, const vkid *id, char *why, size_t why_size)
{
    psdb_file_info info;
    psdb_file_get_info(f, &info);
    if (strcmp(info.target.family, id->family) != 0) {
        snprintf(why, why_size, "compiled for %s, not %s", info.target.family, id->family);
        return PSDB_E_ADAPTER_NOT_FOUND;
    }
    if (info.target.abi_version != id->abi || (info.target.profile_version >> 32) != 0) {
        snprintf(why, why_size,
                 "compiled for abi %llu (another driver build), the device's is %llu",
                 (unsigned long long)info.target.abi_version, (unsigned long long)id->abi);
        return PSDB_E_DRIVER_VERSION_MISMATCH;
    }
    return PSDB_S_OK;
}

psdb_hr vkdl_proof_finish(vkdl_proof *p, const vkid *id, psdb_file **out, char *why,
                          size_t why_size)
{
    psdb_hr hr;
    char mine[512];
    *out = NULL;
    if (!why || !why_size) {
        why = mine;
        why_size = sizeof(mine);
    }
    why[0] = '\0';
    if (!p)
        return PSDB_E_INVALIDARG;
    if (p->started)
        pthread_join(p->thread, NULL);
    else
        proof_run(p);
    hr = p->hr;
    if (PSDB_FAILED(hr))
        snprintf(why, why_size, "%s", p->why);
    else if (id)
        hr = fits_device(p->f, id, why, why_size);
    if (PSDB_SUCCEEDED(hr)) {
        *out = p->f;
        p->f = NULL;
    }
    psdb_file_release(p->f);
    free(p->path);
    free(p);
    return hr;
}

/* ---- Mesa's single-file cache (Fossilize database format version 6, as Mesa writes it) ---- */
#define FOZ_MAGIC_SIZE 16u
#define FOZ_HASH_SIZE 40u
#define FOZ_HEADER_SIZE 16u /* payload_size, format, crc, uncompressed_size: u32 each */
#define FOZ_FORMAT_NONE 1u
static const uint8_t FOZ_MAGIC[FOZ_MAGIC_SIZE] = {0x81, 'F', 'O', 'S', 'S', 'I', 'L', 'I',
                                                  'Z',  'E', 'D', 'B', 0,   0,   0,   6};

static int hex_hash(const uint8_t *p)
{
    for (size_t i = 0; i < FOZ_HASH_SIZE; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
            return 0;
    return 1;
}

/* Mesa's util_hash_crc32: zlib's CRC-32 without the final inversion. */
static uint32_t mesa_crc32(const uint8_t *p, size_t n)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n > 0) {
        uInt part = n > (size_t)UINT32_MAX / 2 ? (uInt)(UINT32_MAX / 2) : (uInt)n;
        crc = crc32(crc, p, part);
        p += part;
        n -= part;
    }
    return ~(uint32_t)crc;
}

int vkdl_foz_check(const uint8_t *foz, size_t foz_size, const uint8_t *idx, size_t idx_size,
                   char *why, size_t why_size)
{
    size_t off, n = 0, num = 0;
    uint64_t *starts = NULL; /* payload header offsets of the cache's entries, ascending */
    uint8_t *seen = NULL;
    int rc = -1;

    if (foz_size < FOZ_MAGIC_SIZE || idx_size < FOZ_MAGIC_SIZE ||
        memcmp(foz, FOZ_MAGIC, FOZ_MAGIC_SIZE) != 0 ||
        memcmp(idx, FOZ_MAGIC, FOZ_MAGIC_SIZE) != 0) {
        snprintf(why, why_size, "not a Fossilize database of version 6");
        goto cleanup;
    }
    /* Every entry takes at least 57 bytes: an upper bound for the offsets table. */
    if (!(starts =
              malloc((foz_size / (FOZ_HASH_SIZE + FOZ_HEADER_SIZE + 1) + 1) * sizeof(*starts)))) {
        snprintf(why, why_size, "out of memory");
        goto cleanup;
    }
    for (off = FOZ_MAGIC_SIZE; off < foz_size; n++) {
        const uint8_t *e = foz + off;
        if (foz_size - off < FOZ_HASH_SIZE + FOZ_HEADER_SIZE || !hex_hash(e)) {
            snprintf(why, why_size, "cache entry %zu at %zu: truncated or not a hash", n, off);
            goto cleanup;
        }
        uint32_t size = psdb__le32(e + FOZ_HASH_SIZE), format = psdb__le32(e + FOZ_HASH_SIZE + 4),
                 crc = psdb__le32(e + FOZ_HASH_SIZE + 8), full = psdb__le32(e + FOZ_HASH_SIZE + 12);
        size_t body = off + FOZ_HASH_SIZE + FOZ_HEADER_SIZE;
        if (size == 0 || size > foz_size - body || format != FOZ_FORMAT_NONE || full != size ||
            crc != mesa_crc32(foz + body, size)) {
            snprintf(why, why_size,
                     "cache entry %zu at %zu: payload of %u bytes (format %u, %u uncompressed) "
                     "outside the file, compressed or failing its CRC",
                     n, off, (unsigned)size, (unsigned)format, (unsigned)full);
            goto cleanup;
        }
        starts[n] = off + FOZ_HASH_SIZE;
        off = body + size;
    }
    if ((idx_size - FOZ_MAGIC_SIZE) % (FOZ_HASH_SIZE + FOZ_HEADER_SIZE + 8) != 0) {
        snprintf(why, why_size, "index of %zu bytes is not a run of whole entries", idx_size);
        goto cleanup;
    }
    if (n > 0 && !(seen = calloc(n, 1))) {
        snprintf(why, why_size, "out of memory");
        goto cleanup;
    }
    for (off = FOZ_MAGIC_SIZE; off < idx_size; off += FOZ_HASH_SIZE + FOZ_HEADER_SIZE + 8, num++) {
        const uint8_t *e = idx + off;
        const uint8_t *h = e + FOZ_HASH_SIZE;
        uint64_t at = (uint64_t)psdb__le32(h + FOZ_HEADER_SIZE) |
                      (uint64_t)psdb__le32(h + FOZ_HEADER_SIZE + 4) << 32;
        size_t lo = 0, hi = n;
        if (!hex_hash(e) || psdb__le32(h) != 8 || psdb__le32(h + 4) != FOZ_FORMAT_NONE ||
            psdb__le32(h + 12) != 8 ||
            (psdb__le32(h + 8) != 0 && psdb__le32(h + 8) != mesa_crc32(h + FOZ_HEADER_SIZE, 8))) {
            snprintf(why, why_size, "index entry %zu: malformed", num);
            goto cleanup;
        }
        while (lo < hi) { /* starts is ascending */
            size_t mid = lo + (hi - lo) / 2;
            if (starts[mid] < at)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == n || starts[lo] != at || seen[lo] ||
            memcmp(foz + at - FOZ_HASH_SIZE, e, FOZ_HASH_SIZE) != 0) {
            snprintf(why, why_size,
                     "index entry %zu: offset %llu is not a cache entry of that hash, or named "
                     "twice",
                     num, (unsigned long long)at);
            goto cleanup;
        }
        seen[lo] = 1;
    }
    rc = 0;
cleanup:
    free(starts);
    free(seen);
    return rc;
}

/* mkdir -p for the folders of path (which ends in a file name): a folder that is there already is
 * used; anything else in the way fails with mkdir's errno. */
static int make_dirs(char *path)
{
    struct stat st;
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, 0755), e = errno;
        int there = rc != 0 && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
        *p = '/';
        if (rc != 0 && !there) {
            errno = e;
            return -1;
        }
    }
    return 0;
}

/* Whether path is a regular file holding exactly data (no link followed, no FIFO waited on). */
static int same_file(const char *path, const void *data, size_t size)
{
    struct stat st;
    uint8_t buf[65536];
    size_t off = 0;
    int same = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != (uint64_t)size)
        goto cleanup;
    while (off < size) {
        size_t want = size - off < sizeof(buf) ? size - off : sizeof(buf);
        if (psdb__pread_upto(fd, buf, want, off) != (ssize_t)want ||
            memcmp(buf, (const uint8_t *)data + off, want) != 0)
            goto cleanup;
        off += want;
    }
    same = 1;
cleanup:
    close(fd);
    return same;
}

/* Writes data to path through a new temporary file renamed over it (a concurrent reader never sees
 * half a file, a link planted at the name is replaced, never followed); an existing file is kept
 * only when it holds these very bytes, so a file changed since it was written is never read by
 * the driver. */
static int write_file(const char *path, const void *data, size_t size)
{
    char tmp[PATH_MAX];
    if (same_file(path, data, size))
        return 0;
    int n = snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return -1;
    unlink(tmp); /* a leftover of a process of the same id */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0444);
    if (fd < 0)
        return -1;
    if (psdb__write_all(fd, data, size) != 0) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

psdb_hr vkdl_value(psdb_file *f, const void *key, size_t key_size, uint32_t type, void **out,
                   size_t *size)
{
    size_t n = 0;
    *out = NULL;
    *size = 0;
    psdb_hr hr = psdb_file_find_value(f, key, key_size, type, NULL, &n);
    if (PSDB_FAILED(hr))
        return hr;
    void *b = malloc(n ? n : 1);
    if (!b)
        return PSDB_E_OUTOFMEMORY;
    hr = psdb_file_find_value(f, key, key_size, type, b, &n);
    if (PSDB_FAILED(hr)) {
        free(b);
        return hr;
    }
    *out = b;
    *size = n;
    return PSDB_S_OK;
}

/* The recorded folder must be "<hex>/<driver>": no "..", no absolute path. */
static int folder_ok(const char *s, size_t n)
{
    if (n == 0 || n > 200 || s[0] == '/' || s[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 c == '_' || c == '-' || (c == '/' && i + 1 < n && s[i + 1] != '.');
        if (!ok)
            return 0;
    }
    return 1;
}

int vkdl_mesa_cache_disabled(void)
{
    static const char *off[] = {"0", "n", "no", "f", "false"};
    const char *v = getenv("MESA_SHADER_CACHE_DISABLE");
    if (!v || !*v)
        return 0;
    for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++)
        if (strcasecmp(v, off[i]) == 0)
            return 0;
    return 1;
}

/* A growing byte string (sticky failure: ok stays 0 once memory ran out). */
typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
    int ok;
} bytes;

static void bytes_put(bytes *b, const void *p, size_t n)
{
    if (!b->ok || n > SIZE_MAX / 2 - b->n) {
        b->ok = 0;
        return;
    }
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->ok = 0;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

/* Mesa's cache assembled from a PSDB's entry pieces (VKID_PIECE_MESA_ENTRY groups, in key
 * order): the cache file is the magic then every entry's bytes (its 40-digit hash, 16-byte header,
 * payload), the index names each by offset. */
typedef struct assemble {
    psdb_file *f;
    bytes foz, idx;
    psdb_hr hr;
    uint64_t entries;
} assemble;

static const uint8_t FOZ_MAGIC_BYTES[16] = {0x81, 'F', 'O', 'S', 'S', 'I', 'L', 'I',
                                            'Z',  'E', 'D', 'B', 0,   0,   0,   6};

static int assemble_piece(const void *key, size_t key_size, uint64_t version, uint32_t num_values,
                          void *ctx)
{
    assemble *a = ctx;
    void *e = NULL;
    size_t n = 0;
    uint8_t rec[16 + 8];
    (void)version;
    (void)num_values;
    if (key_size != VKID_PIECE_KEY_SIZE || ((const uint8_t *)key)[0] != VKID_PIECE_MESA_ENTRY)
        return 0;
    size_t vn = 0;
    a->hr = psdb_file_find_value(a->f, key, key_size, PSDB_VALUE_OBJECT_CODE, NULL, &vn);
    if (PSDB_SUCCEEDED(a->hr) && !(e = malloc(vn ? vn : 1)))
        a->hr = PSDB_E_OUTOFMEMORY;
    n = vn;
    if (PSDB_SUCCEEDED(a->hr))
        a->hr = psdb_file_find_value(a->f, key, key_size, PSDB_VALUE_OBJECT_CODE, e, &n);
    if (PSDB_SUCCEEDED(a->hr) && n < 40 + 16)
        a->hr = PSDB_E_CACHE_CORRUPT;
    if (PSDB_FAILED(a->hr)) {
        free(e);
        return 1;
    }
    uint64_t at = (uint64_t)a->foz.n + 40;
    bytes_put(&a->foz, e, n);
    /* The index entry: the same hash, a header saying an 8-byte uncompressed payload, the offset
     * of the entry's header in the cache file. */
    memset(rec, 0, sizeof(rec));
    rec[0] = 8;
    rec[4] = 1;
    rec[12] = 8;
    for (int i = 0; i < 8; i++)
        rec[16 + i] = (uint8_t)(at >> (8 * i));
    bytes_put(&a->idx, e, 40);
    bytes_put(&a->idx, rec, sizeof(rec));
    a->entries++;
    free(e);
    return 0;
}

/* The cache and index of f's Mesa cache: the files stored whole (PSDBs compiled before entry
 * pieces), else assembled from the pieces. PSDB_S_OK, PSDB_S_FALSE (none), or the failure. */
static psdb_hr mesa_files(psdb_file *f, void **foz, size_t *foz_n, void **idx, size_t *idx_n)
{
    uint8_t kfoz[32], kidx[32];
    assemble a = {.f = f, .foz = {.ok = 1}, .idx = {.ok = 1}, .hr = PSDB_S_OK};
    psdb_hr hr;
    vkid_mesa_key(0, kfoz);
    vkid_mesa_key(1, kidx);
    hr = vkdl_value(f, kfoz, 32, PSDB_VALUE_OBJECT_CODE, foz, foz_n);
    if (hr != PSDB_E_NOT_FOUND) {
        if (PSDB_SUCCEEDED(hr) &&
            PSDB_FAILED(hr = vkdl_value(f, kidx, 32, PSDB_VALUE_OBJECT_CODE, idx, idx_n))) {
            free(*foz);
            *foz = NULL;
        }
        return hr;
    }
    bytes_put(&a.foz, FOZ_MAGIC_BYTES, sizeof(FOZ_MAGIC_BYTES));
    bytes_put(&a.idx, FOZ_MAGIC_BYTES, sizeof(FOZ_MAGIC_BYTES));
    hr = psdb_file_foreach_group(f, assemble_piece, &a);
    if (PSDB_SUCCEEDED(hr) && PSDB_FAILED(a.hr))
        hr = a.hr;
    if (PSDB_SUCCEEDED(hr) && (!a.foz.ok || !a.idx.ok))
        hr = PSDB_E_OUTOFMEMORY;
    if (PSDB_SUCCEEDED(hr) && a.entries == 0)
        hr = PSDB_S_FALSE;
    if (hr != PSDB_S_OK) {
        free(a.foz.p);
        free(a.idx.p);
        return hr == PSDB_S_FALSE || PSDB_FAILED(hr) ? hr : PSDB_S_FALSE;
    }
    *foz = a.foz.p;
    *foz_n = a.foz.n;
    *idx = a.idx.p;
    *idx_n = a.idx.n;
    return PSDB_S_OK;
}

psdb_hr vkdl_mesa_setup(psdb_file *f, char *msg, size_t msg_size)
{
    uint8_t kfoz[32];
    void *foz = NULL, *idx = NULL, *folder = NULL;
    size_t foz_n = 0, idx_n = 0, folder_n = 0;
    char root[PATH_MAX], path[PATH_MAX], name[64], why[256];
    psdb_file_info info;
    psdb_hr hr;

    if (msg && msg_size)
        msg[0] = '\0';
    vkid_mesa_key(0, kfoz);
    /* The folder is recorded under the cache's key whichever way the cache is stored. */
    hr = vkdl_value(f, kfoz, 32, PSDB_VALUE_METADATA, &folder, &folder_n);
    if (hr == PSDB_E_NOT_FOUND) {
        hr = PSDB_S_FALSE;
        goto cleanup;
    }
    if (PSDB_SUCCEEDED(hr) && (hr = mesa_files(f, &foz, &foz_n, &idx, &idx_n)) == PSDB_S_FALSE) {
        hr = PSDB_E_CACHE_CORRUPT;
        if (msg)
            snprintf(msg, msg_size, "the psdb records a mesa cache folder but holds no entry");
        goto cleanup;
    }
    if (PSDB_FAILED(hr)) {
        if (msg)
            snprintf(msg, msg_size, "reading the mesa cache from the psdb: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    if (!folder_ok(folder, folder_n)) {
        hr = PSDB_E_CACHE_CORRUPT;
        if (msg)
            snprintf(msg, msg_size, "mesa cache folder recorded in the psdb is not a folder name");
        goto cleanup;
    }
    if (vkdl_foz_check(foz, foz_n, idx, idx_n, why, sizeof(why)) != 0) {
        hr = PSDB_E_CACHE_CORRUPT;
        if (msg)
            snprintf(msg, msg_size, "mesa cache in the psdb is malformed: %s", why);
        goto cleanup;
    }
    if (vkdl_mesa_cache_disabled()) {
        hr = PSDB_E_NOT_CURRENTLY_AVAILABLE;
        if (msg)
            snprintf(msg, msg_size, "mesa's disk cache is disabled (MESA_SHADER_CACHE_DISABLE)");
        goto cleanup;
    }
    const char *env_dir = getenv("MESA_SHADER_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (env_dir && *env_dir)
        n = snprintf(root, sizeof(root), "%s", env_dir);
    else if (xdg && *xdg)
        n = snprintf(root, sizeof(root), "%s/psdb/mesa", xdg);
    else if (home && *home)
        n = snprintf(root, sizeof(root), "%s/.cache/psdb/mesa", home);
    else
        n = -1;
    psdb_file_get_info(f, &info);
    int m = snprintf(name, sizeof(name), "psdb_%02x%02x%02x%02x%02x%02x%02x%02x",
                     info.content_digest[0], info.content_digest[1], info.content_digest[2],
                     info.content_digest[3], info.content_digest[4], info.content_digest[5],
                     info.content_digest[6], info.content_digest[7]);
    if (n < 0 || (size_t)n >= sizeof(root) || m < 0 || (size_t)m >= sizeof(name)) {
        hr = PSDB_E_NOT_FOUND;
        if (msg)
            snprintf(msg, msg_size,
                     "mesa cache root: no MESA_SHADER_CACHE_DIR, XDG_CACHE_HOME "
                     "or HOME (or too long)");
        goto cleanup;
    }
    const char *ext[2] = {".foz", "_idx.foz"};
    void *data[2] = {foz, idx};
    size_t size[2] = {foz_n, idx_n};
    for (int i = 0; i < 2; i++) {
        n = snprintf(path, sizeof(path), "%s/mesa_shader_cache_sf/%.*s/%s%s", root, (int)folder_n,
                     (const char *)folder, name, ext[i]);
        if (n < 0 || (size_t)n >= sizeof(path) || make_dirs(path) != 0 ||
            write_file(path, data[i], size[i]) != 0) {
            hr = PSDB_E_IO;
            if (msg)
                snprintf(msg, msg_size, "writing the mesa cache %s: %s", path, strerror(errno));
            goto cleanup;
        }
    }
    if (setenv("MESA_SHADER_CACHE_DIR", root, 1) != 0 ||
        setenv("MESA_DISK_CACHE_SINGLE_FILE", "1", 1) != 0 ||
        setenv("MESA_DISK_CACHE_READ_ONLY_FOZ_DBS", name, 1) != 0) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    hr = PSDB_S_OK;
cleanup:
    free(foz);
    free(idx);
    free(folder);
    return hr;
}

static size_t probe(const vkdl_keys *k, const uint8_t *key)
{
    uint64_t h = 0;
    memcpy(&h, key, sizeof(h)); /* a SHA-256: any 8 bytes are uniform */
    size_t i = (size_t)h & (k->cap - 1);
    while (k->used[i] && memcmp(k->slot[i], key, 32) != 0)
        i = (i + 1) & (k->cap - 1);
    return i;
}

typedef struct keys_ctx {
    vkdl_keys *k;
    int oom;
} keys_ctx;

static int add_key(const void *key, size_t key_size, uint64_t version, uint32_t num_values,
                   void *ctx)
{
    keys_ctx *c = ctx;
    vkdl_keys *k = c->k;
    (void)version;
    (void)num_values;
    if (key_size != 32)
        return 0; /* not a Vulkan pipeline's key */
    if ((k->count + 1) * 2 > k->cap) {
        vkdl_keys n = {0};
        n.cap = k->cap ? k->cap * 2 : 256;
        n.slot = malloc(n.cap * 32);
        n.used = calloc(n.cap, 1);
        if (!n.slot || !n.used) {
            free(n.slot);
            free(n.used);
            c->oom = 1;
            return 1;
        }
        for (size_t i = 0; i < k->cap; i++) {
            if (!k->used[i])
                continue;
            size_t j = probe(&n, k->slot[i]);
            memcpy(n.slot[j], k->slot[i], 32);
            n.used[j] = 1;
        }
        n.count = k->count;
        vkdl_keys_free(k);
        *k = n;
    }
    size_t i = probe(k, key);
    if (!k->used[i]) {
        memcpy(k->slot[i], key, 32);
        k->used[i] = 1;
        k->count++;
    }
    return 0;
}

psdb_hr vkdl_keys_load(psdb_file *f, vkdl_keys *out)
{
    keys_ctx c = {out, 0};
    memset(out, 0, sizeof(*out));
    psdb_hr hr = psdb_file_foreach_group(f, add_key, &c);
    if (c.oom)
        hr = PSDB_E_OUTOFMEMORY;
    if (PSDB_FAILED(hr))
        vkdl_keys_free(out);
    return PSDB_FAILED(hr) ? hr : PSDB_S_OK;
}

int vkdl_keys_has(const vkdl_keys *k, const uint8_t key[32])
{
    return k->cap && k->used[probe(k, key)];
}

void vkdl_keys_free(vkdl_keys *k)
{
    free(k->slot);
    free(k->used);
    memset(k, 0, sizeof(*k));
}

int vkdl_lookup(psdb_file *f, const vkdl_keys *keys, const vkid *id, const uint8_t key[32],
                void **data, size_t *size, int *bad)
{
    void *b = NULL;
    size_t n = 0;
    if (data)
        *data = NULL;
    *size = 0;
    *bad = 0;
    if (keys && !vkdl_keys_has(keys, key))
        return 0;
    if (id->strategy == VKID_MESA_DISK_CACHE) {
        /* The code is in Mesa's cache: the group says the PSDB compiled this pipeline. */
        if (keys)
            return 1;
        psdb_hr hr = psdb_file_find_value(f, key, 32, PSDB_VALUE_METADATA, NULL, &n);
        return PSDB_SUCCEEDED(hr) ? 1 : 0;
    }
    if (!data) {
        /* Every pipeline the PSDB compiled has its metadata record (a cache part serves it). */
        if (keys)
            return 1;
        psdb_hr hr = psdb_file_find_value(f, key, 32, PSDB_VALUE_METADATA, NULL, &n);
        if (hr == PSDB_E_NOT_FOUND)
            hr = psdb_file_find_value(f, key, 32, PSDB_VALUE_OBJECT_CODE, NULL, &n);
        return PSDB_SUCCEEDED(hr) ? 1 : 0;
    }
    psdb_hr hr = vkdl_value(f, key, 32, PSDB_VALUE_OBJECT_CODE, &b, &n);
    if (hr == PSDB_E_OUTOFMEMORY)
        return -1;
    if (PSDB_FAILED(hr)) {
        *bad = hr != PSDB_E_NOT_FOUND;
        return 0;
    }
    if (id->strategy == VKID_PIPELINE_BINARY ? vkbin_check(b, n) != 0
                                             : vkid_check_cache_header(id, b, n) != 0) {
        free(b);
        *bad = 1;
        return 0;
    }
    *data = b;
    *size = n;
    return 1;
}

psdb_hr vkdl_merged_cache(psdb_file *f, const vkid *id, void **data, size_t *size, char *msg,
                          size_t msg_size)
{
    uint8_t key[32];
    void *b = NULL;
    size_t n = 0;
    psdb_hr hr;
    *data = NULL;
    *size = 0;
    if (msg && msg_size)
        msg[0] = '\0';
    vkid_merged_key(key);
    hr = vkdl_value(f, key, 32, PSDB_VALUE_OBJECT_CODE, &b, &n);
    if (hr == PSDB_E_NOT_FOUND) {
        hr = PSDB_S_FALSE;
        goto cleanup;
    }
    if (PSDB_FAILED(hr)) {
        if (msg)
            snprintf(msg, msg_size, "reading the merged pipeline cache: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    if (vkid_check_cache_header(id, b, n) != 0) {
        hr = PSDB_E_CACHE_CORRUPT;
        if (msg)
            snprintf(msg, msg_size,
                     "merged pipeline cache: its header does not name this device (%zu bytes)", n);
        goto cleanup;
    }
    *data = b;
    *size = n;
    b = NULL;
    hr = PSDB_S_OK;
cleanup:
    free(b);
    return hr;
}

vkid_strategy vkdl_strategy(psdb_file *f, uint8_t gkey[32], uint32_t *gkey_size)
{
    uint8_t key[32];
    char name[32];
    size_t n = sizeof(name) - 1;
    vkid_strategy s = VKID_PIPELINE_CACHE;
    if (gkey)
        memset(gkey, 0, 32);
    if (gkey_size)
        *gkey_size = 0;
    vkid_strategy_key(key);
    if (psdb_file_find_value(f, key, 32, PSDB_VALUE_METADATA, name, &n) == PSDB_S_OK) {
        name[n] = '\0';
        if (strcmp(name, vkid_strategy_name(VKID_MESA_DISK_CACHE)) == 0)
            s = VKID_MESA_DISK_CACHE;
        else if (strcmp(name, vkid_strategy_name(VKID_PIPELINE_BINARY)) == 0)
            s = VKID_PIPELINE_BINARY;
    } else {
        /* Before the record: a PSDB with Mesa's cache was compiled for it. */
        vkid_mesa_key(0, key);
        n = 0;
        if (psdb_file_find_value(f, key, 32, PSDB_VALUE_METADATA, NULL, &n) == PSDB_S_OK)
            s = VKID_MESA_DISK_CACHE;
    }
    if (s == VKID_PIPELINE_BINARY && gkey && gkey_size) {
        uint8_t k[32];
        n = sizeof(k);
        vkid_strategy_key(key);
        if (psdb_file_find_value(f, key, 32, PSDB_VALUE_OBJECT_CODE, k, &n) == PSDB_S_OK &&
            n <= 32) {
            memcpy(gkey, k, n);
            *gkey_size = (uint32_t)n;
        }
    }
    return s;
}

/* The build of one device cache from a PSDB's cache parts. */
typedef struct cache_build {
    psdb_file *f;
    const vkid *id;
    const vkdl_cache_fns *fns;
    VkDevice device;
    VkPipelineCache cache;
    uint32_t parts;
    psdb_hr hr;
    char why[160];
} cache_build;

/* Adds one cache's data (header checked against the device) to b->cache: the first becomes it,
 * each later one is merged in. */
static void cache_add(cache_build *b, const void *data, size_t n)
{
    VkPipelineCache c = VK_NULL_HANDLE;
    VkResult r;
    if (vkid_check_cache_header(b->id, data, n) != 0) {
        b->hr = PSDB_E_CACHE_CORRUPT;
        snprintf(b->why, sizeof(b->why), "a cache part's header does not name this device");
        return;
    }
    VkPipelineCacheCreateInfo cci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                     .initialDataSize = n,
                                     .pInitialData = data};
    if ((r = b->fns->create(b->device, &cci, NULL, b->cache ? &c : &b->cache)) != VK_SUCCESS) {
        b->hr = PSDB_E_FAIL;
        snprintf(b->why, sizeof(b->why), "the driver refused a cache part: VkResult %d", (int)r);
        return;
    }
    if (c) {
        r = b->fns->merge(b->device, b->cache, 1, &c);
        b->fns->destroy(b->device, c, NULL);
        if (r != VK_SUCCESS) {
            b->hr = PSDB_E_FAIL;
            snprintf(b->why, sizeof(b->why), "merging a cache part failed: VkResult %d", (int)r);
            return;
        }
    }
    b->parts++;
}

static int cache_part(const void *key, size_t key_size, uint64_t version, uint32_t num_values,
                      void *ctx)
{
    cache_build *b = ctx;
    void *data = NULL;
    size_t n = 0;
    (void)version;
    (void)num_values;
    if (key_size != VKID_PIECE_KEY_SIZE || ((const uint8_t *)key)[0] != VKID_PIECE_CACHE_PART)
        return 0;
    b->hr = psdb_file_find_value(b->f, key, key_size, PSDB_VALUE_OBJECT_CODE, NULL, &n);
    if (PSDB_SUCCEEDED(b->hr) && !(data = malloc(n ? n : 1)))
        b->hr = PSDB_E_OUTOFMEMORY;
    if (PSDB_SUCCEEDED(b->hr))
        b->hr = psdb_file_find_value(b->f, key, key_size, PSDB_VALUE_OBJECT_CODE, data, &n);
    if (PSDB_FAILED(b->hr))
        snprintf(b->why, sizeof(b->why), "reading a cache part: %s", psdb_hr_str(b->hr));
    else
        cache_add(b, data, n);
    free(data);
    return PSDB_FAILED(b->hr);
}

psdb_hr vkdl_device_cache(psdb_file *f, const vkid *id, const vkdl_cache_fns *fns, VkDevice device,
                          VkPipelineCache *out, uint32_t *parts, char *msg, size_t msg_size)
{
    cache_build b = {.f = f, .id = id, .fns = fns, .device = device, .hr = PSDB_S_OK};
    void *data = NULL;
    size_t n = 0;
    psdb_hr hr;
    *out = VK_NULL_HANDLE;
    if (parts)
        *parts = 0;
    if (msg && msg_size)
        msg[0] = '\0';
    hr = psdb_file_foreach_group(f, cache_part, &b);
    if (PSDB_SUCCEEDED(hr) && PSDB_FAILED(b.hr))
        hr = b.hr;
    if (PSDB_SUCCEEDED(hr) && b.parts == 0) {
        /* A PSDB made before cache parts: its one merged cache. */
        hr = vkdl_merged_cache(f, id, &data, &n, msg, msg_size);
        if (hr == PSDB_S_OK) {
            cache_add(&b, data, n);
            hr = b.hr;
        }
        free(data);
    }
    if (PSDB_FAILED(hr) || hr == PSDB_S_FALSE) {
        if (b.cache)
            fns->destroy(device, b.cache, NULL);
        if (PSDB_FAILED(hr) && msg && b.why[0])
            snprintf(msg, msg_size, "%s", b.why);
        return hr;
    }
    *out = b.cache;
    if (parts)
        *parts = b.parts;
    return PSDB_S_OK;
}
