/* vk_find.c - the PSDB a process's Vulkan devices are delivered (schema/COMPILER.md section 5):
 * PSDB_DELIVERY, else the registry's for this executable and the device's family; found, proven
 * and opened for each device, Mesa's shipped cache arranged before the driver loads, and each
 * pipeline creation looked up in it. */
#include "vulkan/psdb_vulkan.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/hash.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* guards everything below */
static char g_delivery_path[PATH_MAX]; /* PSDB_DELIVERY, else found in the registry per device */
static int g_delivery_said;            /* a refused PSDB is said once */
/* Mesa's shipped cache, arranged before the first instance reached the driver: state 1 set up
 * for the PSDB of content digest `digest`, -1 refused or failed (why), 0 none offered. A device
 * of the Mesa strategy is delivered only when its PSDB is the one set up: otherwise the driver
 * reads no code of it, and a hit would be a claim the driver never honoured. */
static struct {
    int state;
    psdb_hr hr; /* state -1: why it failed (PSDB_E_CACHE_CORRUPT: the data, refused) */
    uint8_t digest[32];
    char why[512];
} g_mesa;
/* Proofs of the PSDBs found for this process, started before the first instance reached the
 * driver, so that hashing a file overlaps the driver's instance and device creation; the device
 * of each takes its proof (vkfind_open). */
#define PROOFS_MAX 8u
static vkdl_proof *g_proofs[PROOFS_MAX];

static int self_exe(char *buf, size_t size)
{
    ssize_t n = readlink("/proc/self/exe", buf, size - 1);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

/* A registered PSDB of this executable's default component: family NULL takes every Vulkan one
 * in turn (fn), else the one of that family. */
typedef struct reg_find {
    const char *exe, *family;
    int (*fn)(struct reg_find *r, const psdb_registry_entry *e);
    char path[PATH_MAX];
    vkdl_trust trust;
    int found, verified, done;
} reg_find;

/* Only what psdb install recorded is trusted: the SHA-256 its install verified against the
 * publisher's signed statement, as long as the row still names that file (schema/REGISTRY.md). A
 * registration without one (made by hand, or a row changed since) is not delivered. */
static int reg_entry(const psdb_registry_entry *e, void *ctx)
{
    reg_find *r = ctx;
    if (!e->exe_path || strcmp(e->exe_path, r->exe) != 0 || !e->component ||
        strcmp(e->component, "default") != 0 || !e->psdb_path || !e->adapter_family ||
        (r->family ? strcmp(e->adapter_family, r->family) != 0
                   : strncmp(e->adapter_family, "vulkan-", 7) != 0))
        return 0;
    r->found = 1;
    snprintf(r->path, sizeof(r->path), "%s", e->psdb_path);
    memset(&r->trust, 0, sizeof(r->trust));
    r->verified = e->installed_sha256 &&
                  psdb__unhex(e->installed_sha256, r->trust.sha256, sizeof(r->trust.sha256)) == 0;
    r->trust.have_sha256 = r->verified;
    return r->fn ? r->fn(r, e) : 1;
}

/* Walks the registry at root (NULL: the default root, which PSDB_REGISTRY_DIR overrides, as for
 * every psdb client) for r->exe: PSDB_S_OK, or the explorer's failure (a registry that cannot be
 * read). */
static psdb_hr registry_walk(reg_find *r, const char *root)
{
    psdb_explorer *x = NULL;
    psdb_hr hr = psdb_explorer_open(root, &x);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_explorer_foreach(x, reg_entry, r);
    psdb_explorer_release(x);
    return hr;
}

psdb_hr vkfind_registered(const char *registry_dir, const char *exe, const char *family, char *path,
                          size_t path_size, vkdl_trust *trust, char *why, size_t why_size)
{
    reg_find r = {.exe = exe, .family = family};
    psdb_hr hr = exe && family && path && path_size && trust ? registry_walk(&r, registry_dir)
                                                             : PSDB_E_INVALIDARG;
    if (PSDB_FAILED(hr)) {
        if (why && why_size)
            snprintf(why, why_size, "the registry%s%s cannot be read: %s",
                     registry_dir ? " at " : "", registry_dir ? registry_dir : "",
                     psdb_error_last()[0] ? psdb_error_last() : psdb_hr_str(hr));
    } else if (!r.found) {
        hr = PSDB_S_FALSE;
    } else {
        snprintf(path, path_size, "%s", r.path);
        *trust = r.trust;
        hr = PSDB_S_OK;
        if (!r.verified) {
            hr = PSDB_E_INTEGRITY;
            if (why && why_size)
                snprintf(why, why_size,
                         "the registration records no digest of its file (not installed by psdb "
                         "install, or changed since): nothing unverified is delivered");
        }
    }
    return hr;
}

/* Whether the (not yet proven) file carries Mesa's single-file cache. */
static int has_mesa_cache(psdb_file *f)
{
    return f && vkdl_strategy(f, NULL, NULL) == VKID_MESA_DISK_CACHE;
}

/* Starts proving the PSDB at path (trust: NULL for a file named directly). One carrying Mesa's
 * cache is proven now and its cache set up (Mesa reads it when the driver loads, before any
 * device exists; the outcome goes to g_mesa), the others go on proving on a thread of their own
 * until their device takes the proof. */
static void offer(const char *path, const vkdl_trust *trust)
{
    vkdl_proof *p = NULL;
    psdb_file *f = NULL;
    psdb_file_info info;
    char msg[512] = "";
    if (PSDB_FAILED(vkdl_proof_start(path, trust, &p)))
        return;
    if (!has_mesa_cache(vkdl_proof_peek(p))) {
        pthread_mutex_lock(&g_lock);
        for (uint32_t i = 0; p && i < PROOFS_MAX; i++) {
            if (!g_proofs[i]) {
                g_proofs[i] = p;
                p = NULL;
            }
        }
        pthread_mutex_unlock(&g_lock);
        if (p) /* no room: the device proves it again */
            vkdl_proof_finish(p, NULL, &f, NULL, 0);
        psdb_file_release(f);
        return;
    }
    psdb_hr hr = vkdl_proof_finish(p, NULL, &f, msg, sizeof(msg));
    if (PSDB_SUCCEEDED(hr))
        hr = vkdl_mesa_setup(f, msg, sizeof(msg));
    pthread_mutex_lock(&g_lock);
    if (hr == PSDB_S_OK) {
        psdb_file_get_info(f, &info);
        g_mesa.state = 1;
        memcpy(g_mesa.digest, info.content_digest, 32);
    } else if (PSDB_FAILED(hr) && g_mesa.state == 0) {
        /* Said with the device it was for (vkfind_open), which names this reason. */
        g_mesa.state = -1;
        g_mesa.hr = hr;
        snprintf(g_mesa.why, sizeof(g_mesa.why), "%s", msg);
    }
    pthread_mutex_unlock(&g_lock);
    psdb_file_release(f);
}

/* The proof started for path, or NULL (the caller then proves the file itself). */
static vkdl_proof *proof_take(const char *path)
{
    vkdl_proof *p = NULL;
    pthread_mutex_lock(&g_lock);
    for (uint32_t i = 0; !p && i < PROOFS_MAX; i++) {
        if (g_proofs[i] && strcmp(vkdl_proof_path(g_proofs[i]), path) == 0) {
            p = g_proofs[i];
            g_proofs[i] = NULL;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return p;
}

void vkfind_drop(void)
{
    for (uint32_t i = 0; i < PROOFS_MAX; i++) {
        psdb_file *f = NULL;
        pthread_mutex_lock(&g_lock);
        vkdl_proof *p = g_proofs[i];
        g_proofs[i] = NULL;
        pthread_mutex_unlock(&g_lock);
        if (p)
            vkdl_proof_finish(p, NULL, &f, NULL, 0);
        psdb_file_release(f);
    }
}

/* Offers every Vulkan PSDB registered for this executable (installed, with its recorded digest). */
static int offer_entry(reg_find *r, const psdb_registry_entry *e)
{
    (void)e;
    if (r->verified) /* one without a digest is refused at device creation, and said so */
        offer(r->path, &r->trust);
    return 0;
}

/* Mesa opens its disk cache when the driver loads (lavapipe: at instance creation and device
 * enumeration), so a shipped read-only cache must be arranged before any device exists; the other
 * PSDBs start being proven. */
void vkfind_prepare(int first)
{
    const char *path = getenv("PSDB_DELIVERY");
    char exe[PATH_MAX];
    pthread_mutex_lock(&g_lock);
    first = first && g_delivery_path[0] == '\0';
    if (path && *path)
        snprintf(g_delivery_path, sizeof(g_delivery_path), "%s", path);
    pthread_mutex_unlock(&g_lock);
    if (!first)
        return;
    if (path && *path) {
        offer(path, NULL);
        return;
    }
    reg_find r = {.exe = exe, .fn = offer_entry};
    if (self_exe(exe, sizeof(exe)) == 0)
        registry_walk(&r, NULL);
}

void vkfind_open(vkfind_device *d)
{
    vkdl_trust reg_trust;
    char exe[PATH_MAX];
    const vkdl_trust *trust = NULL;
    psdb_file_info info;
    char why[512] = "";
    int state = 0; /* 1 delivered, 0 off, -1 refused */
    psdb_hr hr = PSDB_S_OK;

    pthread_mutex_lock(&g_lock);
    snprintf(d->path, sizeof(d->path), "%s", g_delivery_path);
    pthread_mutex_unlock(&g_lock);
    if (!d->path[0]) {
        /* A registry that cannot be read holds nothing for the device, as an empty one. */
        if (self_exe(exe, sizeof(exe)) != 0)
            return;
        hr = vkfind_registered(NULL, exe, d->id.family, d->path, sizeof(d->path), &reg_trust, why,
                               sizeof(why));
        if (hr != PSDB_S_OK && hr != PSDB_E_INTEGRITY) {
            d->path[0] = '\0';
            return;
        }
        trust = &reg_trust;
    }
    if (PSDB_SUCCEEDED(hr)) {
        vkdl_proof *p = proof_take(d->path);
        if (!p && PSDB_FAILED(hr = vkdl_proof_start(d->path, trust, &p)))
            snprintf(why, sizeof(why), "%s", psdb_hr_str(hr));
        else
            hr = vkdl_proof_finish(p, &d->id, &d->psdb, why, sizeof(why));
    }
    if (PSDB_SUCCEEDED(hr)) {
        /* From here on the PSDB's own strategy decides how a hit is served: a device may keep
         * code several ways, the PSDB keeps it one. */
        d->id.strategy = vkdl_strategy(d->psdb, d->binary_key, &d->binary_key_size);
        if (d->id.strategy == VKID_PIPELINE_BINARY && d->binary_key_size == 0) {
            hr = PSDB_E_CACHE_CORRUPT;
            snprintf(why, sizeof(why), "a PSDB of pipeline binaries without its global key");
        }
    }
    if (PSDB_SUCCEEDED(hr)) {
        /* OpenSSL fetches its SHA-256 implementation at the first digest: here, not in the
         * first pipeline creation's lookup. */
        uint8_t md[32];
        psdb__sha256("", 0, md);
        hr = vkdl_keys_load(d->psdb, &d->keys);
        if (PSDB_FAILED(hr))
            snprintf(why, sizeof(why), "its pipeline keys: %s", psdb_error_last());
    }
    if (PSDB_SUCCEEDED(hr) && d->id.strategy == VKID_MESA_DISK_CACHE) {
        psdb_file_get_info(d->psdb, &info);
        pthread_mutex_lock(&g_lock);
        if (g_mesa.state != 1 || memcmp(g_mesa.digest, info.content_digest, 32) != 0) {
            snprintf(why, sizeof(why), "mesa's cache was not set up from it%s%.400s",
                     g_mesa.state < 0 ? ": " : "", g_mesa.state < 0 ? g_mesa.why : "");
            /* Data that failed a check is refused; a cache that could not be set up (no place
             * to write it, Mesa's cache off) leaves the device without delivery. */
            hr = g_mesa.state < 0 && g_mesa.hr == PSDB_E_CACHE_CORRUPT ? PSDB_E_CACHE_CORRUPT
                                                                       : PSDB_S_FALSE;
        } else if (vkdl_mesa_cache_disabled()) {
            snprintf(why, sizeof(why), "mesa's disk cache is disabled (MESA_SHADER_CACHE_DISABLE)");
            hr = PSDB_S_FALSE;
        }
        pthread_mutex_unlock(&g_lock);
    }
    if (hr == PSDB_S_OK) {
        state = 1;
    } else {
        /* Not delivered: refused when the PSDB itself failed a check, off when it is sound but
         * the driver cannot be handed its code here. */
        state = hr == PSDB_S_FALSE ? 0 : -1;
        /* A file that is there but cannot be proven: each creation is a miss of refused data. A
         * PSDB for another target (or none at the path) holds nothing for this device at all. */
        d->refused = state < 0 && hr != PSDB_E_NOT_FOUND && hr != PSDB_E_ADAPTER_NOT_FOUND &&
                     hr != PSDB_E_DRIVER_VERSION_MISMATCH;
        psdb_file_release(d->psdb);
        d->psdb = NULL;
        vkdl_keys_free(&d->keys);
    }
    vkstats *s = vkstats_lock();
    if (state > 0)
        s->delivery = 1;
    else if (state < 0 && s->delivery == 0)
        s->delivery = -1;
    vkstats_unlock();
    pthread_mutex_lock(&g_lock);
    if (state <= 0 && !g_delivery_said++)
        fprintf(stderr, "psdb layer: delivery %s: not used for %s (%s abi %llu): %s\n", d->path,
                d->id.device_name, d->id.family, (unsigned long long)d->id.abi,
                why[0] ? why : psdb_hr_str(hr));
    pthread_mutex_unlock(&g_lock);
}

void vkfind_close(vkfind_device *d)
{
    psdb_file_release(d->psdb);
    d->psdb = NULL;
    vkdl_keys_free(&d->keys);
}

int vkfind_lookup(const vkfind_device *d, vkrec *r, uint32_t kind, const void *ci, void **data,
                  size_t *size, int *bad)
{
    vkenc e;
    uint8_t key[32];
    int hit = 0;
    memset(&e, 0, sizeof(e));
    if (data)
        *data = NULL;
    *size = 0;
    *bad = 0;
    vkrec_pipeline(r, kind, ci, &e);
    if (!e.oom && !e.unrepresentable) {
        psdb__sha256(e.data, e.len, key);
        hit = vkdl_lookup(d->psdb, &d->keys, &d->id, key, data, size, bad);
    }
    vkenc_free(&e);
    return hit;
}
