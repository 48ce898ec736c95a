/* vk_layer.c - VK_LAYER_PSDB_delivery: a Vulkan layer that captures an application's pipelines
 * and delivers PSDBs compiled from them.
 *
 * DESIGN: the layer follows the loader-layer interface version 2: the loader negotiates through
 * vkNegotiateLoaderLayerInterfaceVersion (the one exported symbol), hands each vkCreateInstance and
 * vkCreateDevice the next layer's GetProcAddr in the create-info chain, and the layer keeps one
 * record per instance and per device, found by the dispatch key (the loader's dispatch-table
 * pointer stored at the start of every dispatchable handle). Records live in lists under one
 * global lock; an application has few instances and devices, and the lock is held only to find
 * or unlink a record.
 *
 * With PSDB_CAPTURE=<path> the layer opens an SODB writer (libpsdb's public API) when the first
 * instance is created, remembers the create-info encoding of every shader module, sampler,
 * descriptor set layout, pipeline layout and render pass per device (a hash map under the
 * device's lock; vk_encode.h says why objects are encoded at creation), and records each compute
 * and graphics pipeline the driver created as one SODB entry (kinds PSDB_SODB_VK_COMPUTE and
 * PSDB_SODB_VK_GRAPHICS, schema/SODB.md §3). A pipeline whose create-info chains a structure the
 * encoding cannot carry is counted, not recorded: a replay of what was recorded would compile
 * different code. Nothing the layer does can fail the application's call: an encoding or
 * writer failure is counted and the driver's result is returned unchanged.
 *
 * Delivery (schema/COMPILER.md section 5): before the first instance reaches the driver the layer
 * finds the PSDB (PSDB_DELIVERY, else the registry's for this executable) and, for Mesa, sets up
 * its read-only disk cache; at device creation it opens the PSDB with the device's identity (a
 * PSDB of another driver build is refused there), loads its pipeline keys and, for the
 * VkPipelineCache strategy, makes one cache from the PSDB's merged cache data (every pipeline's
 * cache merged at compile time, header checked): a driver creates a pipeline from one warm cache
 * in a tenth of a millisecond, from a fresh one-pipeline cache in milliseconds. Objects are then
 * encoded as for capture, and each pipeline creation is looked up by the SHA-256 of its encoding:
 * a hit is created with the merged cache, or (an application passing its own cache, or a PSDB
 * without merged data) with a cache made from that pipeline's own checked data. Whatever fails,
 * the creation goes to the driver as without the layer.
 *
 * At vkDestroyDevice the layer prints one line with its counts on stderr (when capturing or
 * delivering) and writes them as JSON to PSDB_LAYER_STATS=<path> (when set). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <vulkan/vk_layer.h>
#include <vulkan/vulkan.h>

#include <openssl/evp.h>
#include <psdb/psdb.h>

#include "vk_deliver.h"
#include "vk_encode.h"
#include "vk_identity.h"

#define LAYER_EXPORT __attribute__((visibility("default")))
#define OBJ_BUCKETS 1024u

/* ---- Records ------------------------------------------------------------------------------- */
typedef struct lobj {
    struct lobj *next;
    uint64_t handle;
    VkObjectType type;
    uint8_t *data;
    size_t len;
    uint32_t unrepresentable, num_stypes;
    uint32_t stypes[VKENC_MAX_STYPES];
    uint32_t subpass_depth, subpass_color;
} lobj;

typedef struct linstance {
    struct linstance *next;
    void *key;
    VkInstance instance;
    PFN_vkGetInstanceProcAddr gipa;
    PFN_vkDestroyInstance DestroyInstance;
} linstance;

#define FED_MAX 16u

typedef struct ldevice {
    struct ldevice *next;
    void *key;
    VkDevice device;
    PFN_vkGetDeviceProcAddr gdpa;
    PFN_vkDestroyDevice DestroyDevice;
    PFN_vkCreateShaderModule CreateShaderModule;
    PFN_vkDestroyShaderModule DestroyShaderModule;
    PFN_vkCreateSampler CreateSampler;
    PFN_vkDestroySampler DestroySampler;
    PFN_vkCreateDescriptorSetLayout CreateDescriptorSetLayout;
    PFN_vkDestroyDescriptorSetLayout DestroyDescriptorSetLayout;
    PFN_vkCreatePipelineLayout CreatePipelineLayout;
    PFN_vkDestroyPipelineLayout DestroyPipelineLayout;
    PFN_vkCreateRenderPass CreateRenderPass;
    PFN_vkCreateRenderPass2 CreateRenderPass2;
    PFN_vkCreateRenderPass2 CreateRenderPass2KHR;
    PFN_vkDestroyRenderPass DestroyRenderPass;
    PFN_vkCreateComputePipelines CreateComputePipelines;
    PFN_vkCreateGraphicsPipelines CreateGraphicsPipelines;
    PFN_vkCreatePipelineCache CreatePipelineCache;
    PFN_vkDestroyPipelineCache DestroyPipelineCache;
    PFN_vkMergePipelineCaches MergePipelineCaches;
    psdb_file *psdb; /* the PSDB delivered to this device (checked against id), or NULL */
    vkdl_keys keys;  /* psdb's pipeline keys */
    /* The PSDB found for this device failed its proof (vkdl_open): every creation is a miss
     * whose data was refused before the driver saw it. */
    int refused;
    /* VK_EXT_pipeline_creation_feedback is on for this device (the layer enables it where the
     * driver has it and a PSDB of VkPipelineCache data is delivered): hits are confirmed by the
     * driver's own report (driver_hits). */
    int feedback;
    /* One cache holding every pipeline of psdb (its merged VkPipelineCache data), made at device
     * creation, or VK_NULL_HANDLE: hits of creations that pass no cache of their own use it. */
    VkPipelineCache merged;
    /* Application caches the merged cache was merged into (guarded by lock), so that their hits
     * are served from them; forgotten at vkDestroyPipelineCache. */
    VkPipelineCache fed[FED_MAX];
    uint32_t num_fed;
    /* vkMergePipelineCaches needs its destination externally synchronized, and an application
     * may create pipelines with its cache on several threads: merges into an application's cache
     * hold this for writing, creations with one for reading. */
    pthread_rwlock_t cache_lock;
    vkid id;
    pthread_mutex_t lock; /* guards objs */
    lobj *objs[OBJ_BUCKETS];
} ldevice;

/* What the layer counts, for the whole process (stderr line and PSDB_LAYER_STATS). */
typedef struct lstats {
    uint64_t pipelines;       /* pipelines the driver created */
    uint64_t recorded;        /* new SODB entries */
    uint64_t already;         /* entries the SODB already held (same description) */
    uint64_t unrepresentable; /* pipelines not recorded: a structure the encoding cannot carry */
    uint64_t failed;          /* pipelines not recorded: out of memory or the writer failed */
    uint32_t num_stypes;
    uint32_t stypes[VKENC_MAX_STYPES];
    uint64_t hits;        /* pipelines the PSDB held (its data handed to the driver) */
    uint64_t misses;      /* pipelines created while a PSDB was delivered that it did not hold */
    uint64_t rejected;    /* misses whose data failed a check (header, identity, corrupt) */
    uint64_t driver_hits; /* hits the driver reported served from the pipeline cache given */
    int feedback;         /* a device reported creation feedback: driver_hits is a count */
    uint64_t lookup_ns; /* encode + hash + lookup (+ blob checks), all creations; no driver time */
    int delivery;       /* 0 none (or found but not deliverable here), 1 delivered, -1 refused */
    int merged;         /* 0 none, 1 a merged cache was made for a device, -1 refused */
    uint64_t fed;       /* application caches the merged cache was merged into */
} lstats;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* guards everything below */
static linstance *g_instances;
static ldevice *g_devices;
static psdb_sodb_writer *g_writer;
static unsigned g_writer_refs;
static char g_capture_path[PATH_MAX];
static int g_capture_failed; /* the writer could not be opened: said once */
static lstats g_stats;
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
 * of each takes its proof (delivery_find). Guarded by g_lock. */
#define PROOFS_MAX 8u
static vkdl_proof *g_proofs[PROOFS_MAX];

static void *dispatch_key(const void *handle)
{
    return *(void *const *)handle;
}

static linstance *instance_find(void *key)
{
    linstance *i;
    pthread_mutex_lock(&g_lock);
    for (i = g_instances; i && i->key != key; i = i->next)
        ;
    pthread_mutex_unlock(&g_lock);
    return i;
}

static ldevice *device_find(void *key)
{
    ldevice *d;
    pthread_mutex_lock(&g_lock);
    for (d = g_devices; d && d->key != key; d = d->next)
        ;
    pthread_mutex_unlock(&g_lock);
    return d;
}

static int capturing(void)
{
    pthread_mutex_lock(&g_lock);
    int on = g_writer != NULL;
    pthread_mutex_unlock(&g_lock);
    return on;
}

/* Objects are encoded when capturing, or when a PSDB is delivered (its lookups need the key). */
static int tracking(const ldevice *d)
{
    return d->psdb != NULL || capturing();
}

/* ---- Object maps ----------------------------------------------------------------------------- */
static size_t bucket(uint64_t handle)
{
    return (size_t)((handle * 0x9E3779B97F4A7C15ull) >> 54) % OBJ_BUCKETS;
}

/* Takes ownership of e's bytes; replaces an older record of the same handle (the driver reused
 * it after a destroy the layer did not see). Called with d->lock held. */
static void obj_put(ldevice *d, VkObjectType type, uint64_t handle, vkenc *e, uint32_t depth,
                    uint32_t color)
{
    lobj **pp = &d->objs[bucket(handle)];
    for (lobj *o = *pp; o; pp = &o->next, o = o->next) {
        if (o->handle == handle && o->type == type) {
            *pp = o->next;
            free(o->data);
            free(o);
            break;
        }
    }
    lobj *o = calloc(1, sizeof(*o));
    if (!o || e->oom) {
        /* Without the record, pipelines using the object count as unrepresentable later. */
        free(o);
        vkenc_free(e);
        return;
    }
    o->handle = handle;
    o->type = type;
    o->data = e->data;
    o->len = e->len;
    o->unrepresentable = e->unrepresentable;
    o->num_stypes = e->num_stypes;
    memcpy(o->stypes, e->stypes, sizeof(o->stypes));
    o->subpass_depth = depth;
    o->subpass_color = color;
    o->next = d->objs[bucket(handle)];
    d->objs[bucket(handle)] = o;
    memset(e, 0, sizeof(*e)); /* the record owns the bytes now */
}

static void obj_drop(ldevice *d, VkObjectType type, uint64_t handle)
{
    if (handle == 0)
        return;
    pthread_mutex_lock(&d->lock);
    lobj **pp = &d->objs[bucket(handle)];
    for (lobj *o = *pp; o; pp = &o->next, o = o->next) {
        if (o->handle == handle && o->type == type) {
            *pp = o->next;
            free(o->data);
            free(o);
            break;
        }
    }
    pthread_mutex_unlock(&d->lock);
}

/* vkenc_lookup.find; called with d->lock held, so the bytes stay valid while they are copied. */
static int obj_find(void *ctx, VkObjectType type, uint64_t handle, vkenc_object *out)
{
    ldevice *d = ctx;
    for (lobj *o = d->objs[bucket(handle)]; o; o = o->next) {
        if (o->handle == handle && o->type == type) {
            out->data = o->data;
            out->len = o->len;
            out->unrepresentable = o->unrepresentable;
            out->stypes = o->stypes;
            out->num_stypes = o->num_stypes;
            out->subpass_depth = o->subpass_depth;
            out->subpass_color = o->subpass_color;
            return 0;
        }
    }
    return -1;
}

static void objs_free(ldevice *d)
{
    for (size_t i = 0; i < OBJ_BUCKETS; i++) {
        lobj *o = d->objs[i];
        while (o) {
            lobj *n = o->next;
            free(o->data);
            free(o);
            o = n;
        }
        d->objs[i] = NULL;
    }
}

/* ---- Capture ------------------------------------------------------------------------------- */
static uint64_t vk_to_psdb_version(uint32_t v)
{
    return PSDB_VERSION(VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v),
                        0);
}

/* An application that gives no version (no VkApplicationInfo, applicationVersion 0, or one whose
 * major, minor and patch are all 0) is version 0.0.0.1: an application identity needs a non-zero
 * version (schema/MODEL.md), and a mapped Vulkan version never sets the fourth field, so no
 * versioned application can collide with it (schema/SODB.md §3.1). Vulkan's own tools (vkcube)
 * and translation layers pass 0. */
#define NO_APP_VERSION PSDB_VERSION(0, 0, 0, 1)

/* The application identity of schema/SODB.md §3.1: VkApplicationInfo, the executable's file
 * name, and an AppId derived from the application name (Vulkan has none). */
static void capture_open(const VkApplicationInfo *app)
{
    char exe[PATH_MAX];
    const char *exe_name = NULL;
    psdb_app_identity id;
    const char *path = getenv("PSDB_CAPTURE");
    if (!path || !*path)
        return;
    memset(&id, 0, sizeof(id));
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        const char *slash = strrchr(exe, '/');
        exe_name = slash ? slash + 1 : exe;
    }
    id.desc.exe_filename = exe_name;
    id.desc.name = app && app->pApplicationName && *app->pApplicationName
                       ? app->pApplicationName
                       : (exe_name && *exe_name ? exe_name : "unknown");
    id.desc.version = app ? vk_to_psdb_version(app->applicationVersion) : 0;
    if (id.desc.version == 0)
        id.desc.version = NO_APP_VERSION;
    if (app && app->pEngineName && *app->pEngineName) {
        id.desc.engine_name = app->pEngineName;
        id.desc.engine_version = vk_to_psdb_version(app->engineVersion);
    }
    static const char prefix[] = "psdb-vulkan-app-id:";
    char seed[sizeof(prefix) + 256];
    uint8_t digest[EVP_MAX_MD_SIZE];
    unsigned digest_len = 0;
    int seed_len = snprintf(seed, sizeof(seed), "%s%s", prefix, id.desc.name);
    if (seed_len < 0 || (size_t)seed_len >= sizeof(seed))
        seed_len = (int)sizeof(seed) - 1; /* a longer name: its first 255 bytes */
    if (EVP_Digest(seed, (size_t)seed_len, digest, &digest_len, EVP_sha256(), NULL) == 1 &&
        digest_len >= sizeof(id.app_id))
        memcpy(id.app_id, digest, sizeof(id.app_id));

    pthread_mutex_lock(&g_lock);
    if (g_writer) {
        g_writer_refs++;
    } else if (!g_capture_failed) {
        psdb_hr hr = psdb_sodb_writer_open(path, &id, &g_writer);
        if (PSDB_FAILED(hr)) {
            fprintf(stderr, "psdb layer: capture %s: cannot open the SODB: %s\n", path,
                    psdb_hr_str(hr));
            g_capture_failed = 1;
            g_writer = NULL;
        } else {
            g_writer_refs = 1;
            snprintf(g_capture_path, sizeof(g_capture_path), "%s", path);
        }
    }
    pthread_mutex_unlock(&g_lock);
}

static void capture_close(void)
{
    pthread_mutex_lock(&g_lock);
    if (g_writer && --g_writer_refs == 0) {
        psdb_sodb_writer_release(g_writer);
        g_writer = NULL;
    }
    pthread_mutex_unlock(&g_lock);
}

static void stats_stype(lstats *s, uint32_t stype)
{
    for (uint32_t i = 0; i < s->num_stypes; i++)
        if (s->stypes[i] == stype)
            return;
    if (s->num_stypes < VKENC_MAX_STYPES)
        s->stypes[s->num_stypes++] = stype;
}

/* Records one encoded pipeline (or counts why not). */
static void capture_pipeline(uint32_t kind, vkenc *e)
{
    pthread_mutex_lock(&g_lock);
    g_stats.pipelines++;
    if (!g_writer) {
        /* capture off: only the count */
    } else if (e->unrepresentable) {
        g_stats.unrepresentable++;
        for (uint32_t i = 0; i < e->num_stypes; i++)
            stats_stype(&g_stats, e->stypes[i]);
    } else if (e->oom) {
        g_stats.failed++;
    } else {
        psdb_hr hr = psdb_sodb_writer_add(g_writer, kind, 1, e->data, e->len);
        if (hr == PSDB_S_FALSE)
            g_stats.already++;
        else if (PSDB_SUCCEEDED(hr))
            g_stats.recorded++;
        else {
            if (g_stats.failed == 0)
                fprintf(stderr, "psdb layer: capture %s: cannot record a pipeline: %s\n",
                        g_capture_path, psdb_hr_str(hr));
            g_stats.failed++;
        }
    }
    pthread_mutex_unlock(&g_lock);
}

static void stats_report(void)
{
    const char *stats_path = getenv("PSDB_LAYER_STATS");
    char types[VKENC_MAX_STYPES * 12 + 1];
    size_t off = 0;
    pthread_mutex_lock(&g_lock);
    lstats s = g_stats;
    int on = g_writer != NULL;
    pthread_mutex_unlock(&g_lock);
    char driver_hits[24] = "null"; /* no device reported creation feedback */
    if (s.feedback)
        snprintf(driver_hits, sizeof(driver_hits), "%" PRIu64, s.driver_hits);
    types[0] = '\0';
    for (uint32_t i = 0; i < s.num_stypes && off < sizeof(types); i++) {
        int w = snprintf(types + off, sizeof(types) - off, "%s%" PRIu32, i ? "," : "", s.stypes[i]);
        if (w < 0)
            break;
        off += (size_t)w;
    }
    if (s.delivery != 0)
        fprintf(stderr,
                "psdb layer: delivery: %" PRIu64 " pipelines, %" PRIu64 " hits, %" PRIu64
                " misses (%" PRIu64 " rejected)%s%s\n",
                s.pipelines, s.hits, s.misses, s.rejected, s.feedback ? ", driver hits " : "",
                s.feedback ? driver_hits : "");
    if (on)
        fprintf(stderr,
                "psdb layer: capture %s: %" PRIu64 " pipelines, %" PRIu64 " recorded, %" PRIu64
                " already recorded, %" PRIu64 " unrepresentable (sTypes: %s), %" PRIu64 " failed\n",
                g_capture_path, s.pipelines, s.recorded, s.already, s.unrepresentable,
                s.num_stypes ? types : "none", s.failed);
    if (!stats_path || !*stats_path)
        return;
    FILE *f = fopen(stats_path, "w");
    if (!f) {
        fprintf(stderr, "psdb layer: stats %s: cannot open: %s\n", stats_path, strerror(errno));
        return;
    }
    fprintf(f,
            "{\"pipelines\": %" PRIu64 ", \"captured\": %" PRIu64 ", \"already_captured\": %" PRIu64
            ", \"unrepresentable\": %" PRIu64 ", \"capture_failed\": %" PRIu64
            ", \"unrepresentable_stypes\": [%s], \"delivery\": \"%s\", \"psdb_hits\": %" PRIu64
            ", \"psdb_misses\": %" PRIu64 ", \"psdb_rejected\": %" PRIu64
            ", \"psdb_lookup_ns\": %" PRIu64 ", \"merged_cache\": \"%s\""
            ", \"app_caches_fed\": %" PRIu64 ", \"driver_hits\": %s}\n",
            s.pipelines, s.recorded, s.already, s.unrepresentable, s.failed, types,
            s.delivery > 0 ? "on" : (s.delivery < 0 ? "refused" : "off"), s.hits, s.misses,
            s.rejected, s.lookup_ns, s.merged > 0 ? "on" : (s.merged < 0 ? "refused" : "off"),
            s.fed, driver_hits);
    if (fclose(f) != 0)
        fprintf(stderr, "psdb layer: stats %s: cannot write: %s\n", stats_path, strerror(errno));
}

/* ---- Finding the PSDB ----------------------------------------------------------------------
 */
static int self_exe(char *buf, size_t size)
{
    ssize_t n = readlink("/proc/self/exe", buf, size - 1);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

static int unhex32(const char *hex, uint8_t out[32])
{
    if (!hex || strlen(hex) != 64)
        return -1;
    for (int i = 0; i < 32; i++) {
        unsigned v = 0;
        for (int j = 0; j < 2; j++) {
            char c = hex[2 * i + j];
            v <<= 4;
            if (c >= '0' && c <= '9')
                v |= (unsigned)(c - '0');
            else if (c >= 'a' && c <= 'f')
                v |= (unsigned)(c - 'a' + 10);
            else
                return -1;
        }
        out[i] = (uint8_t)v;
    }
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
    r->verified = unhex32(e->installed_sha256, r->trust.sha256) == 0;
    r->trust.have_sha256 = r->verified;
    return r->fn ? r->fn(r, e) : 1;
}

/* Walks the registry (PSDB_REGISTRY_DIR overrides its root, as for every psdb client). */
static void registry_walk(reg_find *r)
{
    char exe[PATH_MAX];
    psdb_explorer *x = NULL;
    if (self_exe(exe, sizeof(exe)) != 0)
        return;
    r->exe = exe;
    if (PSDB_SUCCEEDED(psdb_explorer_open(NULL, &x)))
        psdb_explorer_foreach(x, reg_entry, r);
    psdb_explorer_release(x);
    r->exe = NULL;
}

/* Whether the (not yet proven) file carries Mesa's single-file cache. */
static int has_mesa_cache(psdb_file *f)
{
    uint8_t key[32];
    size_t n = 0;
    vkid_mesa_key(0, key);
    return f && PSDB_SUCCEEDED(psdb_file_find_value(f, key, 32, PSDB_VALUE_OBJECT_CODE, NULL, &n));
}

/* Starts proving the PSDB at path (trust: NULL for a file named directly). One carrying Mesa's
 * cache is proven now and its cache set up (Mesa reads it when the driver loads, before any
 * device exists; the outcome goes to g_mesa), the others go on proving on a thread of their own
 * until their device takes the proof. */
static void delivery_offer(const char *path, const vkdl_trust *trust)
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
    if (hr == PSDB_S_OK) {
        psdb_file_get_info(f, &info);
        g_mesa.state = 1;
        memcpy(g_mesa.digest, info.content_digest, 32);
    } else if (PSDB_FAILED(hr) && g_mesa.state == 0) {
        /* Said with the device it was for (delivery_find), which names this reason. */
        g_mesa.state = -1;
        g_mesa.hr = hr;
        snprintf(g_mesa.why, sizeof(g_mesa.why), "%s", msg);
    }
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

/* Proofs no device took, finished when the last instance goes. */
static void proofs_drop(void)
{
    for (uint32_t i = 0; i < PROOFS_MAX; i++) {
        psdb_file *f = NULL;
        pthread_mutex_lock(&g_lock);
        vkdl_proof *p = g_instances ? NULL : g_proofs[i];
        g_proofs[i] = p ? NULL : g_proofs[i];
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
        delivery_offer(r->path, &r->trust);
    return 0;
}

/* Before the first instance reaches the driver: Mesa opens its disk cache when the driver loads
 * (lavapipe: at instance creation and device enumeration), so a shipped read-only cache must be
 * arranged now, before any device exists; the other PSDBs start being proven. */
static void delivery_prepare(void)
{
    const char *path = getenv("PSDB_DELIVERY");
    pthread_mutex_lock(&g_lock);
    int first = g_instances == NULL && g_delivery_path[0] == '\0';
    if (path && *path)
        snprintf(g_delivery_path, sizeof(g_delivery_path), "%s", path);
    pthread_mutex_unlock(&g_lock);
    if (!first)
        return;
    if (path && *path) {
        delivery_offer(path, NULL);
        return;
    }
    reg_find r = {.fn = offer_entry};
    registry_walk(&r);
}

/* The merged VkPipelineCache of d's PSDB, checked, as d->merged. 1 made, 0 none (Mesa, an
 * older PSDB), -1 refused (said on stderr once): the creations then use each pipeline's own
 * cache data, as without a merged cache. */
static int merged_attach(ldevice *d, const char *path)
{
    void *data = NULL;
    size_t size = 0;
    char msg[256];
    int rc = 0;
    if (d->id.strategy != VKID_PIPELINE_CACHE || !d->CreatePipelineCache)
        return 0;
    psdb_hr hr = vkdl_merged_cache(d->psdb, &d->id, &data, &size, msg, sizeof(msg));
    if (hr == PSDB_S_OK) {
        VkPipelineCacheCreateInfo cci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                         .initialDataSize = size,
                                         .pInitialData = data};
        VkResult r = d->CreatePipelineCache(d->device, &cci, NULL, &d->merged);
        if (r == VK_SUCCESS) {
            rc = 1;
        } else {
            d->merged = VK_NULL_HANDLE;
            snprintf(msg, sizeof(msg), "the driver refused the merged pipeline cache: VkResult %d",
                     (int)r);
            rc = -1;
        }
    } else if (PSDB_FAILED(hr)) {
        rc = -1;
    }
    free(data);
    if (rc < 0) {
        pthread_mutex_lock(&g_lock);
        if (g_stats.merged == 0)
            fprintf(stderr, "psdb layer: delivery %s: %s; each pipeline's own cache data is used\n",
                    path, msg);
        pthread_mutex_unlock(&g_lock);
    }
    return rc;
}

/* The device's identity, from the physical device's properties. 0, or -1 without them. */
static int device_identity(linstance *inst, VkPhysicalDevice phys, vkid *out)
{
    PFN_vkGetPhysicalDeviceProperties props = NULL;
    PFN_vkGetPhysicalDeviceProperties2 props2 = NULL;
    if (!inst)
        return -1;
    props = (PFN_vkGetPhysicalDeviceProperties)inst->gipa(inst->instance,
                                                          "vkGetPhysicalDeviceProperties");
    props2 = (PFN_vkGetPhysicalDeviceProperties2)inst->gipa(inst->instance,
                                                            "vkGetPhysicalDeviceProperties2");
    if (!props)
        return -1;
    vkid_query(props, props2, phys, out);
    return 0;
}

/* Before the device is created: the PSDB for this device (PSDB_DELIVERY, else the registry's for
 * the device's family), opened with the device's identity as the adapter, so a PSDB of another
 * driver build is refused (psdb_file_open checks family and ABI) and the device runs as without
 * it, and proven (vkdl_open): a PSDB that fails the proof is refused, and its creations count as
 * misses whose data was rejected. For Mesa's strategy the PSDB must also be the one whose cache
 * was set up before the driver loaded (else nothing is delivered: "off"). Returns the path found
 * (empty: none) in path. */
static void delivery_find(ldevice *d, linstance *inst, VkPhysicalDevice phys, char *path,
                          size_t path_size)
{
    reg_find r = {0};
    const vkdl_trust *trust = NULL;
    psdb_file_info info;
    char why[512] = "";
    int state = 0; /* 1 delivered, 0 off, -1 refused */
    psdb_hr hr = PSDB_S_OK;

    path[0] = '\0';
    if (device_identity(inst, phys, &d->id) != 0)
        return;
    pthread_mutex_lock(&g_lock);
    snprintf(path, path_size, "%s", g_delivery_path);
    pthread_mutex_unlock(&g_lock);
    if (!path[0]) {
        r.family = d->id.family;
        registry_walk(&r);
        if (!r.found)
            return;
        snprintf(path, path_size, "%s", r.path);
        trust = &r.trust;
        if (!r.verified) {
            hr = PSDB_E_INTEGRITY;
            snprintf(why, sizeof(why),
                     "the registration records no digest of its file (not installed by psdb "
                     "install, or changed since): nothing unverified is delivered");
        }
    }
    if (PSDB_SUCCEEDED(hr)) {
        vkdl_proof *p = proof_take(path);
        if (!p && PSDB_FAILED(hr = vkdl_proof_start(path, trust, &p)))
            snprintf(why, sizeof(why), "%s", psdb_hr_str(hr));
        else
            hr = vkdl_proof_finish(p, &d->id, &d->psdb, why, sizeof(why));
    }
    if (PSDB_SUCCEEDED(hr)) {
        /* OpenSSL fetches its SHA-256 implementation at the first digest: here, not in the
         * first pipeline creation's lookup. */
        uint8_t md[EVP_MAX_MD_SIZE];
        unsigned md_len = 0;
        EVP_Digest("", 0, md, &md_len, EVP_sha256(), NULL);
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
    pthread_mutex_lock(&g_lock);
    if (state > 0)
        g_stats.delivery = 1;
    else if (state < 0 && g_stats.delivery == 0)
        g_stats.delivery = -1;
    if (state <= 0 && !g_delivery_said++)
        fprintf(stderr, "psdb layer: delivery %s: not used for %s (%s abi %llu): %s\n", path,
                d->id.device_name, d->id.family, (unsigned long long)d->id.abi,
                why[0] ? why : psdb_hr_str(hr));
    pthread_mutex_unlock(&g_lock);
}

/* After the device is created: the merged cache of a delivered PSDB. */
static void delivery_attach(ldevice *d, const char *path)
{
    if (!d->psdb)
        return;
    int merged = merged_attach(d, path);
    pthread_mutex_lock(&g_lock);
    if (merged && g_stats.merged >= 0)
        g_stats.merged = merged;
    pthread_mutex_unlock(&g_lock);
}

/* ---- Device-level interceptions ----------------------------------------------------------- */
static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateShaderModule(VkDevice device,
                                                               const VkShaderModuleCreateInfo *ci,
                                                               const VkAllocationCallbacks *a,
                                                               VkShaderModule *out)
{
    ldevice *d = device_find(dispatch_key(device));
    VkResult r = d->CreateShaderModule(device, ci, a, out);
    if (r != VK_SUCCESS || !tracking(d))
        return r;
    vkenc e;
    memset(&e, 0, sizeof(e));
    vkenc_shader_module(&e, ci);
    pthread_mutex_lock(&d->lock);
    obj_put(d, VK_OBJECT_TYPE_SHADER_MODULE, (uint64_t)*out, &e, 0, 0);
    pthread_mutex_unlock(&d->lock);
    return r;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyShaderModule(VkDevice device, VkShaderModule m,
                                                            const VkAllocationCallbacks *a)
{
    ldevice *d = device_find(dispatch_key(device));
    obj_drop(d, VK_OBJECT_TYPE_SHADER_MODULE, (uint64_t)m);
    d->DestroyShaderModule(device, m, a);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateSampler(VkDevice device,
                                                          const VkSamplerCreateInfo *ci,
                                                          const VkAllocationCallbacks *a,
                                                          VkSampler *out)
{
    ldevice *d = device_find(dispatch_key(device));
    VkResult r = d->CreateSampler(device, ci, a, out);
    if (r != VK_SUCCESS || !tracking(d))
        return r;
    vkenc e;
    memset(&e, 0, sizeof(e));
    vkenc_sampler(&e, ci);
    pthread_mutex_lock(&d->lock);
    obj_put(d, VK_OBJECT_TYPE_SAMPLER, (uint64_t)*out, &e, 0, 0);
    pthread_mutex_unlock(&d->lock);
    return r;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroySampler(VkDevice device, VkSampler s,
                                                       const VkAllocationCallbacks *a)
{
    ldevice *d = device_find(dispatch_key(device));
    obj_drop(d, VK_OBJECT_TYPE_SAMPLER, (uint64_t)s);
    d->DestroySampler(device, s, a);
}

static VKAPI_ATTR VkResult VKAPI_CALL
layer_CreateDescriptorSetLayout(VkDevice device, const VkDescriptorSetLayoutCreateInfo *ci,
                                const VkAllocationCallbacks *a, VkDescriptorSetLayout *out)
{
    ldevice *d = device_find(dispatch_key(device));
    VkResult r = d->CreateDescriptorSetLayout(device, ci, a, out);
    if (r != VK_SUCCESS || !tracking(d))
        return r;
    vkenc e;
    memset(&e, 0, sizeof(e));
    vkenc_lookup lk = {obj_find, d};
    pthread_mutex_lock(&d->lock);
    vkenc_set_layout(&e, ci, &lk);
    obj_put(d, VK_OBJECT_TYPE_DESCRIPTOR_SET_LAYOUT, (uint64_t)*out, &e, 0, 0);
    pthread_mutex_unlock(&d->lock);
    return r;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyDescriptorSetLayout(VkDevice device,
                                                                   VkDescriptorSetLayout l,
                                                                   const VkAllocationCallbacks *a)
{
    ldevice *d = device_find(dispatch_key(device));
    obj_drop(d, VK_OBJECT_TYPE_DESCRIPTOR_SET_LAYOUT, (uint64_t)l);
    d->DestroyDescriptorSetLayout(device, l, a);
}

static VKAPI_ATTR VkResult VKAPI_CALL
layer_CreatePipelineLayout(VkDevice device, const VkPipelineLayoutCreateInfo *ci,
                           const VkAllocationCallbacks *a, VkPipelineLayout *out)
{
    ldevice *d = device_find(dispatch_key(device));
    VkResult r = d->CreatePipelineLayout(device, ci, a, out);
    if (r != VK_SUCCESS || !tracking(d))
        return r;
    vkenc e;
    memset(&e, 0, sizeof(e));
    vkenc_lookup lk = {obj_find, d};
    pthread_mutex_lock(&d->lock);
    vkenc_pipeline_layout(&e, ci, &lk);
    obj_put(d, VK_OBJECT_TYPE_PIPELINE_LAYOUT, (uint64_t)*out, &e, 0, 0);
    pthread_mutex_unlock(&d->lock);
    return r;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyPipelineLayout(VkDevice device, VkPipelineLayout l,
                                                              const VkAllocationCallbacks *a)
{
    ldevice *d = device_find(dispatch_key(device));
    obj_drop(d, VK_OBJECT_TYPE_PIPELINE_LAYOUT, (uint64_t)l);
    d->DestroyPipelineLayout(device, l, a);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateRenderPass(VkDevice device,
                                                             const VkRenderPassCreateInfo *ci,
                                                             const VkAllocationCallbacks *a,
                                                             VkRenderPass *out)
{
    ldevice *d = device_find(dispatch_key(device));
    VkResult r = d->CreateRenderPass(device, ci, a, out);
    if (r != VK_SUCCESS || !tracking(d))
        return r;
    vkenc e;
    uint32_t depth = 0, color = 0;
    memset(&e, 0, sizeof(e));
    vkenc_render_pass(&e, ci, &depth, &color);
    pthread_mutex_lock(&d->lock);
    obj_put(d, VK_OBJECT_TYPE_RENDER_PASS, (uint64_t)*out, &e, depth, color);
    pthread_mutex_unlock(&d->lock);
    return r;
}

static VkResult render_pass2(ldevice *d, PFN_vkCreateRenderPass2 next, VkDevice device,
                             const VkRenderPassCreateInfo2 *ci, const VkAllocationCallbacks *a,
                             VkRenderPass *out)
{
    VkResult r = next(device, ci, a, out);
    if (r != VK_SUCCESS || !tracking(d))
        return r;
    vkenc e;
    uint32_t depth = 0, color = 0;
    memset(&e, 0, sizeof(e));
    vkenc_render_pass2(&e, ci, &depth, &color);
    pthread_mutex_lock(&d->lock);
    obj_put(d, VK_OBJECT_TYPE_RENDER_PASS, (uint64_t)*out, &e, depth, color);
    pthread_mutex_unlock(&d->lock);
    return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateRenderPass2(VkDevice device,
                                                              const VkRenderPassCreateInfo2 *ci,
                                                              const VkAllocationCallbacks *a,
                                                              VkRenderPass *out)
{
    ldevice *d = device_find(dispatch_key(device));
    return render_pass2(d, d->CreateRenderPass2, device, ci, a, out);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateRenderPass2KHR(VkDevice device,
                                                                 const VkRenderPassCreateInfo2 *ci,
                                                                 const VkAllocationCallbacks *a,
                                                                 VkRenderPass *out)
{
    ldevice *d = device_find(dispatch_key(device));
    return render_pass2(d, d->CreateRenderPass2KHR, device, ci, a, out);
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyRenderPass(VkDevice device, VkRenderPass rp,
                                                          const VkAllocationCallbacks *a)
{
    ldevice *d = device_find(dispatch_key(device));
    obj_drop(d, VK_OBJECT_TYPE_RENDER_PASS, (uint64_t)rp);
    d->DestroyRenderPass(device, rp, a);
}

/* Records the pipelines one vkCreate*Pipelines call created (kind: PSDB_SODB_VK_COMPUTE with an
 * array of VkComputePipelineCreateInfo, or _VK_GRAPHICS with VkGraphicsPipelineCreateInfo). An
 * error may leave pPipelines unwritten (older drivers): nothing is recorded then. A success code
 * (VK_PIPELINE_COMPILE_REQUIRED included) sets the elements it did not create to VK_NULL_HANDLE;
 * the others were created. */
static void capture_created(ldevice *d, uint32_t kind, VkResult r, uint32_t n, const void *ci,
                            const VkPipeline *out)
{
    vkenc_lookup lk = {obj_find, d};
    int on = capturing();
    for (uint32_t i = 0; r >= 0 && i < n; i++) {
        if (out[i] == VK_NULL_HANDLE)
            continue;
        vkenc e;
        memset(&e, 0, sizeof(e));
        if (on) {
            pthread_mutex_lock(&d->lock);
            if (kind == PSDB_SODB_VK_COMPUTE)
                vkenc_compute_pipeline(&e, &((const VkComputePipelineCreateInfo *)ci)[i], &lk);
            else
                vkenc_graphics_pipeline(&e, &((const VkGraphicsPipelineCreateInfo *)ci)[i], &lk);
            pthread_mutex_unlock(&d->lock);
        }
        capture_pipeline(kind, &e);
        vkenc_free(&e);
    }
}

/* ---- Delivery -------------------------------------------------------------------------------
 */
static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Looks pipeline i up in the device's PSDB: its SODB object key is the SHA-256 of its encoding,
 * exactly what `psdb compile --backend vulkan` stored it under. With cache non-NULL, on a hit
 * with VkPipelineCache data, *cache is a new cache created from the pipeline's own data (the
 * caller destroys it); with cache NULL the lookup only decides hit or miss (Mesa's code, or the
 * merged cache, serves the hit). */
static int deliver_one(ldevice *d, uint32_t kind, const void *ci, VkPipelineCache *cache)
{
    vkenc e;
    void *data = NULL;
    size_t size = 0;
    int bad = 0, hit = 0;
    uint8_t key[EVP_MAX_MD_SIZE];
    unsigned key_len = 0;
    vkenc_lookup lk = {obj_find, d};
    uint64_t t0 = mono_ns();
    if (cache)
        *cache = VK_NULL_HANDLE;
    memset(&e, 0, sizeof(e));
    pthread_mutex_lock(&d->lock);
    if (kind == PSDB_SODB_VK_COMPUTE)
        vkenc_compute_pipeline(&e, ci, &lk);
    else
        vkenc_graphics_pipeline(&e, ci, &lk);
    pthread_mutex_unlock(&d->lock);
    if (!e.oom && !e.unrepresentable &&
        EVP_Digest(e.data, e.len, key, &key_len, EVP_sha256(), NULL) == 1 && key_len == 32)
        hit = vkdl_lookup(d->psdb, &d->keys, &d->id, key, cache ? &data : NULL, &size, &bad);
    /* The lookup's cost ends here: what follows is the driver's. */
    uint64_t dt = mono_ns() - t0;
    if (hit == 1 && data && cache) {
        VkPipelineCacheCreateInfo cci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                         .initialDataSize = size,
                                         .pInitialData = data};
        if (!d->CreatePipelineCache ||
            d->CreatePipelineCache(d->device, &cci, NULL, cache) != VK_SUCCESS) {
            *cache = VK_NULL_HANDLE;
            hit = 0;
        }
    }
    free(data);
    vkenc_free(&e);
    pthread_mutex_lock(&g_lock);
    g_stats.lookup_ns += dt;
    if (hit == 1)
        g_stats.hits++;
    else
        g_stats.misses++;
    if (bad)
        g_stats.rejected++;
    pthread_mutex_unlock(&g_lock);
    return hit == 1;
}

/* Whether creations of this batch may be split into one call each: a derivative that names its
 * base by index within the batch may not. */
static int splittable(uint32_t kind, uint32_t n, const void *ci)
{
    for (uint32_t i = 0; i < n; i++) {
        VkPipelineCreateFlags f = kind == PSDB_SODB_VK_COMPUTE
                                      ? ((const VkComputePipelineCreateInfo *)ci)[i].flags
                                      : ((const VkGraphicsPipelineCreateInfo *)ci)[i].flags;
        if (f & VK_PIPELINE_CREATE_DERIVATIVE_BIT)
            return 0;
    }
    return 1;
}

/* Creation feedback (VK_EXT_pipeline_creation_feedback) of one creation: the layer's own, chained
 * in front of the application's structures, or the application's when it asked for it. */
#define FB_STAGES 8u
typedef struct fb_slot {
    VkPipelineCreationFeedbackCreateInfo info;
    VkPipelineCreationFeedback fb;
    VkPipelineCreationFeedback stages[FB_STAGES];
    const VkPipelineCreationFeedback *read; /* NULL: no feedback for this creation */
} fb_slot;

static const VkPipelineCreationFeedback *app_feedback(const void *chain)
{
    for (const VkBaseInStructure *b = chain; b; b = b->pNext)
        if (b->sType == VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO)
            return ((const VkPipelineCreationFeedbackCreateInfo *)(const void *)b)
                ->pPipelineCreationFeedback;
    return NULL;
}

/* Copies of the n create-infos with feedback chained in (*copy and *slots, the caller frees both),
 * or -1 without memory (the creation then goes down without feedback). */
static int fb_prepare(uint32_t kind, uint32_t n, const void *ci, void **copy, fb_slot **slots)
{
    size_t stride = kind == PSDB_SODB_VK_COMPUTE ? sizeof(VkComputePipelineCreateInfo)
                                                 : sizeof(VkGraphicsPipelineCreateInfo);
    *copy = malloc(stride * n);
    *slots = calloc(n, sizeof(**slots));
    if (!*copy || !*slots) {
        free(*copy);
        free(*slots);
        *copy = NULL;
        *slots = NULL;
        return -1;
    }
    memcpy(*copy, ci, stride * n);
    for (uint32_t i = 0; i < n; i++) {
        fb_slot *f = &(*slots)[i];
        const void **next;
        uint32_t stages;
        if (kind == PSDB_SODB_VK_COMPUTE) {
            VkComputePipelineCreateInfo *c = &((VkComputePipelineCreateInfo *)*copy)[i];
            next = &c->pNext;
            stages = 1;
        } else {
            VkGraphicsPipelineCreateInfo *g = &((VkGraphicsPipelineCreateInfo *)*copy)[i];
            next = &g->pNext;
            stages = g->stageCount;
        }
        if ((f->read = app_feedback(*next)) != NULL || stages > FB_STAGES)
            continue;
        f->info = (VkPipelineCreationFeedbackCreateInfo){
            .sType = VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO,
            .pNext = *next,
            .pPipelineCreationFeedback = &f->fb,
            .pipelineStageCreationFeedbackCount = stages,
            .pPipelineStageCreationFeedbacks = f->stages};
        *next = &f->info;
        f->read = &f->fb;
    }
    return 0;
}

/* Creates down the chain; app is the application's own cache (or VK_NULL_HANDLE), which no merge
 * may write while the driver reads it. hit (may be NULL: none) says which creations the PSDB
 * serves: on a device with creation feedback, those the driver reports as served from the
 * pipeline cache it was given are counted as driver hits. */
static VkResult create_next(ldevice *d, uint32_t kind, VkPipelineCache cache, VkPipelineCache app,
                            uint32_t n, const void *ci, const VkAllocationCallbacks *a,
                            VkPipeline *out, const uint8_t *hit)
{
    VkResult r;
    void *copy = NULL;
    fb_slot *slots = NULL;
    uint64_t confirmed = 0;
    if (d->feedback && hit && fb_prepare(kind, n, ci, &copy, &slots) == 0)
        ci = copy;
    if (app)
        pthread_rwlock_rdlock(&d->cache_lock);
    if (kind == PSDB_SODB_VK_COMPUTE)
        r = d->CreateComputePipelines(d->device, cache, n, ci, a, out);
    else
        r = d->CreateGraphicsPipelines(d->device, cache, n, ci, a, out);
    if (app)
        pthread_rwlock_unlock(&d->cache_lock);
    for (uint32_t i = 0; slots && r >= 0 && i < n; i++) {
        const VkPipelineCreationFeedback *f = slots[i].read;
        confirmed += hit[i] && out[i] != VK_NULL_HANDLE && f &&
                     (f->flags & VK_PIPELINE_CREATION_FEEDBACK_VALID_BIT) &&
                     (f->flags & VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT);
    }
    if (slots) {
        pthread_mutex_lock(&g_lock);
        g_stats.driver_hits += confirmed;
        pthread_mutex_unlock(&g_lock);
    }
    free(copy);
    free(slots);
    return r;
}

/* Merges src into the application's cache app, excluded from the creations that use app. */
static VkResult merge_into_app(ldevice *d, VkPipelineCache app, VkPipelineCache src)
{
    if (!d->MergePipelineCaches)
        return VK_ERROR_FEATURE_NOT_PRESENT;
    pthread_rwlock_wrlock(&d->cache_lock);
    VkResult r = d->MergePipelineCaches(d->device, app, 1, &src);
    pthread_rwlock_unlock(&d->cache_lock);
    return r;
}

/* Whether the application's cache app holds the merged cache: merged into it at its first
 * creation under the layer, so that every hit with it needs only the key and the application's
 * cache keeps working as without the layer (it gains the PSDB's pipelines). 0 when the merge
 * fails or FED_MAX caches are fed already: the caller then goes pipeline by pipeline. */
static int app_cache_fed(ldevice *d, VkPipelineCache app)
{
    int fed = 0;
    pthread_mutex_lock(&d->lock);
    for (uint32_t i = 0; i < d->num_fed && !fed; i++)
        fed = d->fed[i] == app;
    int room = d->num_fed < FED_MAX;
    pthread_mutex_unlock(&d->lock);
    if (fed || !room || merge_into_app(d, app, d->merged) != VK_SUCCESS)
        return fed;
    pthread_mutex_lock(&d->lock);
    for (uint32_t i = 0; i < d->num_fed && !fed; i++)
        fed = d->fed[i] == app; /* another thread fed it meanwhile */
    int added = !fed && d->num_fed < FED_MAX;
    if (added)
        d->fed[d->num_fed++] = app;
    pthread_mutex_unlock(&d->lock);
    if (added) {
        pthread_mutex_lock(&g_lock);
        g_stats.fed++;
        pthread_mutex_unlock(&g_lock);
    }
    return 1;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyPipelineCache(VkDevice device, VkPipelineCache cache,
                                                             const VkAllocationCallbacks *a)
{
    ldevice *d = device_find(dispatch_key(device));
    pthread_mutex_lock(&d->lock);
    for (uint32_t i = 0; i < d->num_fed; i++) {
        if (d->fed[i] == cache) {
            d->fed[i] = d->fed[--d->num_fed]; /* a later cache may get the same handle */
            break;
        }
    }
    pthread_mutex_unlock(&d->lock);
    d->DestroyPipelineCache(device, cache, a);
}

/* vkCreate*Pipelines with a PSDB delivered. Mesa's code arrives through its disk cache: the batch
 * goes down unchanged and the lookups only count. For VkPipelineCache data with the device's
 * merged cache: a creation that passes no cache goes pipeline by pipeline, a hit with the merged
 * cache, a miss with none (as the application asked); an application's own cache is fed the
 * merged cache once (app_cache_fed) and its batches then go down unchanged. Without a merged cache
 * (or feeding failed) a hit is created with a cache made from the pipeline's own data, or, when
 * the application passes its own cache, that data is merged into the application's cache first.
 * A batch that may not be split (derivatives naming their base by index) goes down whole: with the
 * merged cache when every pipeline of it is a hit. */
static VkResult create_delivered(ldevice *d, uint32_t kind, VkPipelineCache cache, uint32_t n,
                                 const void *ci, const VkAllocationCallbacks *a, VkPipeline *out)
{
    size_t stride = kind == PSDB_SODB_VK_COMPUTE ? sizeof(VkComputePipelineCreateInfo)
                                                 : sizeof(VkGraphicsPipelineCreateInfo);
    int merged = d->merged != VK_NULL_HANDLE && cache == VK_NULL_HANDLE;
    int fed = d->merged != VK_NULL_HANDLE && cache != VK_NULL_HANDLE && app_cache_fed(d, cache);
    if (d->id.strategy == VKID_MESA_DISK_CACHE || fed || !splittable(kind, n, ci)) {
        uint32_t hits = 0;
        uint8_t *hit = calloc(n ? n : 1, 1); /* NULL: no driver hits counted, nothing else lost */
        for (uint32_t i = 0; i < n; i++) {
            int h = deliver_one(d, kind, (const char *)ci + i * stride, NULL);
            hits += (uint32_t)h;
            if (hit)
                hit[i] = (uint8_t)h;
        }
        /* A batch with a miss goes down with the application's cache: its hits then reach the
         * driver with no delivered data, and no driver hit is claimed for them. */
        int served = fed || (merged && hits == n);
        VkResult r = create_next(d, kind, merged && hits == n ? d->merged : cache, cache, n, ci, a,
                                 out, served ? hit : NULL);
        free(hit);
        return r;
    }
    VkResult result = VK_SUCCESS;
    for (uint32_t i = 0; i < n; i++) {
        const void *one = (const char *)ci + i * stride;
        VkPipelineCache c = VK_NULL_HANDLE, use = cache;
        uint8_t hit = 0;
        if (merged) {
            /* A miss goes down with no cache, as the application asked. */
            hit = (uint8_t)deliver_one(d, kind, one, NULL);
            use = hit ? d->merged : VK_NULL_HANDLE;
        } else {
            deliver_one(d, kind, one, &c);
            hit = c != VK_NULL_HANDLE;
            if (c && cache == VK_NULL_HANDLE)
                use = c;
            else if (c && merge_into_app(d, cache, c) != VK_SUCCESS)
                hit = 0;
        }
        VkResult r = create_next(d, kind, use, cache, 1, one, a, &out[i], &hit);
        if (c)
            d->DestroyPipelineCache(d->device, c, NULL);
        if (r < 0) {
            /* As for a failed batch: the elements not created are VK_NULL_HANDLE, the ones
             * before stay created. */
            for (uint32_t j = i; j < n; j++)
                out[j] = VK_NULL_HANDLE;
            return r;
        }
        if (r != VK_SUCCESS)
            result = r;
    }
    return result;
}

/* A device whose PSDB failed its proof: each pipeline created is a miss whose data was refused. */
static void count_refused(ldevice *d, VkResult r, uint32_t n, const VkPipeline *out)
{
    uint64_t created = 0;
    if (!d->refused || r < 0)
        return;
    for (uint32_t i = 0; i < n; i++)
        created += out[i] != VK_NULL_HANDLE;
    pthread_mutex_lock(&g_lock);
    g_stats.misses += created;
    g_stats.rejected += created;
    pthread_mutex_unlock(&g_lock);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateComputePipelines(
    VkDevice device, VkPipelineCache cache, uint32_t n, const VkComputePipelineCreateInfo *ci,
    const VkAllocationCallbacks *a, VkPipeline *out)
{
    ldevice *d = device_find(dispatch_key(device));
    VkResult r = d->psdb ? create_delivered(d, PSDB_SODB_VK_COMPUTE, cache, n, ci, a, out)
                         : d->CreateComputePipelines(device, cache, n, ci, a, out);
    count_refused(d, r, n, out);
    capture_created(d, PSDB_SODB_VK_COMPUTE, r, n, ci, out);
    return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateGraphicsPipelines(
    VkDevice device, VkPipelineCache cache, uint32_t n, const VkGraphicsPipelineCreateInfo *ci,
    const VkAllocationCallbacks *a, VkPipeline *out)
{
    ldevice *d = device_find(dispatch_key(device));
    VkResult r = d->psdb ? create_delivered(d, PSDB_SODB_VK_GRAPHICS, cache, n, ci, a, out)
                         : d->CreateGraphicsPipelines(device, cache, n, ci, a, out);
    count_refused(d, r, n, out);
    capture_created(d, PSDB_SODB_VK_GRAPHICS, r, n, ci, out);
    return r;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyDevice(VkDevice device,
                                                      const VkAllocationCallbacks *a)
{
    void *key = dispatch_key(device);
    ldevice *d = NULL;
    pthread_mutex_lock(&g_lock);
    for (ldevice **pp = &g_devices; *pp; pp = &(*pp)->next) {
        if ((*pp)->key == key) {
            d = *pp;
            *pp = d->next;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (!d)
        return;
    stats_report();
    if (d->merged)
        d->DestroyPipelineCache(device, d->merged, NULL);
    d->DestroyDevice(device, a);
    psdb_file_release(d->psdb);
    vkdl_keys_free(&d->keys);
    objs_free(d);
    pthread_mutex_destroy(&d->lock);
    pthread_rwlock_destroy(&d->cache_lock);
    free(d);
}

/* Device-level names the layer intercepts, with where ldevice keeps the next function. */
typedef struct hook {
    const char *name;
    PFN_vkVoidFunction fn;
    size_t next_offset;
} hook;

#define HOOK(n)                                                                                    \
    {                                                                                              \
        "vk" #n, (PFN_vkVoidFunction)layer_##n, offsetof(ldevice, n)                               \
    }
static const hook DEVICE_HOOKS[] = {
    HOOK(DestroyDevice),
    HOOK(CreateShaderModule),
    HOOK(DestroyShaderModule),
    HOOK(CreateSampler),
    HOOK(DestroySampler),
    HOOK(CreateDescriptorSetLayout),
    HOOK(DestroyDescriptorSetLayout),
    HOOK(CreatePipelineLayout),
    HOOK(DestroyPipelineLayout),
    HOOK(CreateRenderPass),
    HOOK(CreateRenderPass2),
    HOOK(CreateRenderPass2KHR),
    HOOK(DestroyRenderPass),
    HOOK(CreateComputePipelines),
    HOOK(CreateGraphicsPipelines),
    HOOK(DestroyPipelineCache),
};
#undef HOOK
#define NUM_DEVICE_HOOKS (sizeof(DEVICE_HOOKS) / sizeof(DEVICE_HOOKS[0]))

static PFN_vkVoidFunction *next_slot(ldevice *d, const hook *h)
{
    return (PFN_vkVoidFunction *)(void *)((char *)d + h->next_offset);
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetDeviceProcAddr(VkDevice device,
                                                                        const char *name);

/* Creation feedback on for a device of delivered VkPipelineCache data, so that the driver's own
 * report tells which hits it served from the data (stats "driver_hits"): where the device has
 * VK_EXT_pipeline_creation_feedback, *out becomes ci with the extension added to its list (*names,
 * the caller's to free, holds the list). 0 done (or already enabled by the application), -1 not
 * available (the device runs without it). */
static int feedback_enable(linstance *inst, VkPhysicalDevice phys, const VkDeviceCreateInfo *ci,
                           VkDeviceCreateInfo *out, const char ***names)
{
    static const char ext[] = VK_EXT_PIPELINE_CREATION_FEEDBACK_EXTENSION_NAME;
    PFN_vkEnumerateDeviceExtensionProperties enumerate = NULL;
    VkExtensionProperties *props = NULL;
    uint32_t n = 0;
    int have = 0, rc = -1;
    *names = NULL;
    if (!inst)
        return -1;
    for (uint32_t i = 0; i < ci->enabledExtensionCount; i++) {
        if (strcmp(ci->ppEnabledExtensionNames[i], ext) == 0) {
            *out = *ci;
            return 0;
        }
    }
    enumerate = (PFN_vkEnumerateDeviceExtensionProperties)inst->gipa(
        inst->instance, "vkEnumerateDeviceExtensionProperties");
    if (!enumerate || enumerate(phys, NULL, &n, NULL) != VK_SUCCESS || n == 0 ||
        !(props = calloc(n, sizeof(*props))) || enumerate(phys, NULL, &n, props) != VK_SUCCESS)
        goto cleanup;
    for (uint32_t i = 0; i < n && !have; i++)
        have = strcmp(props[i].extensionName, ext) == 0;
    if (!have || !(*names = calloc(ci->enabledExtensionCount + 1, sizeof(**names))))
        goto cleanup;
    for (uint32_t i = 0; i < ci->enabledExtensionCount; i++)
        (*names)[i] = ci->ppEnabledExtensionNames[i];
    (*names)[ci->enabledExtensionCount] = ext;
    *out = *ci;
    out->enabledExtensionCount = ci->enabledExtensionCount + 1;
    out->ppEnabledExtensionNames = *names;
    rc = 0;
cleanup:
    free(props);
    return rc;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateDevice(VkPhysicalDevice phys,
                                                         const VkDeviceCreateInfo *ci,
                                                         const VkAllocationCallbacks *a,
                                                         VkDevice *out)
{
    VkLayerDeviceCreateInfo *link = (VkLayerDeviceCreateInfo *)ci->pNext;
    while (link && !(link->sType == VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO &&
                     link->function == VK_LAYER_LINK_INFO))
        link = (VkLayerDeviceCreateInfo *)link->pNext;
    if (!link || !link->u.pLayerInfo)
        return VK_ERROR_INITIALIZATION_FAILED;
    PFN_vkGetInstanceProcAddr gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    PFN_vkGetDeviceProcAddr gdpa = link->u.pLayerInfo->pfnNextGetDeviceProcAddr;
    linstance *inst = instance_find(dispatch_key(phys));
    PFN_vkCreateDevice create =
        (PFN_vkCreateDevice)gipa(inst ? inst->instance : VK_NULL_HANDLE, "vkCreateDevice");
    if (!create)
        return VK_ERROR_INITIALIZATION_FAILED;
    ldevice *d = calloc(1, sizeof(*d));
    if (!d)
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    char path[PATH_MAX];
    const char **names = NULL;
    VkDeviceCreateInfo with_feedback;
    delivery_find(d, inst, phys, path, sizeof(path));
    if (d->psdb && d->id.strategy == VKID_PIPELINE_CACHE &&
        feedback_enable(inst, phys, ci, &with_feedback, &names) == 0) {
        ci = &with_feedback;
        d->feedback = 1;
    }
    /* The next layer reads its own link: advance before calling down. */
    link->u.pLayerInfo = link->u.pLayerInfo->pNext;
    VkResult r = create(phys, ci, a, out);
    free(names);
    if (r != VK_SUCCESS) {
        psdb_file_release(d->psdb);
        vkdl_keys_free(&d->keys);
        free(d);
        return r;
    }
    d->device = *out;
    d->key = dispatch_key(*out);
    d->gdpa = gdpa;
    for (size_t i = 0; i < NUM_DEVICE_HOOKS; i++)
        *next_slot(d, &DEVICE_HOOKS[i]) = gdpa(*out, DEVICE_HOOKS[i].name);
    d->CreatePipelineCache = (PFN_vkCreatePipelineCache)gdpa(*out, "vkCreatePipelineCache");
    d->DestroyPipelineCache = (PFN_vkDestroyPipelineCache)gdpa(*out, "vkDestroyPipelineCache");
    d->MergePipelineCaches = (PFN_vkMergePipelineCaches)gdpa(*out, "vkMergePipelineCaches");
    pthread_mutex_init(&d->lock, NULL);
    pthread_rwlock_init(&d->cache_lock, NULL);
    delivery_attach(d, path);
    pthread_mutex_lock(&g_lock);
    if (d->feedback)
        g_stats.feedback = 1;
    d->next = g_devices;
    g_devices = d;
    pthread_mutex_unlock(&g_lock);
    return VK_SUCCESS;
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetDeviceProcAddr(VkDevice device,
                                                                        const char *name)
{
    if (strcmp(name, "vkGetDeviceProcAddr") == 0)
        return (PFN_vkVoidFunction)layer_GetDeviceProcAddr;
    ldevice *d = device ? device_find(dispatch_key(device)) : NULL;
    if (!d)
        return NULL;
    for (size_t i = 0; i < NUM_DEVICE_HOOKS; i++)
        if (strcmp(name, DEVICE_HOOKS[i].name) == 0)
            /* Offer the hook only where the driver has the function (extensions, versions). */
            return *next_slot(d, &DEVICE_HOOKS[i]) ? DEVICE_HOOKS[i].fn : NULL;
    return d->gdpa(device, name);
}

/* ---- Instance level ------------------------------------------------------------------------ */
/* A Vulkan 1.0 instance (no VkApplicationInfo, or apiVersion 1.0) that does not enable
 * VK_KHR_get_physical_device_properties2 gets the loader's emulated vkGetPhysicalDeviceProperties2,
 * which leaves VkPhysicalDeviceDriverProperties unset: the device identity (driverID, driverInfo)
 * would differ from the one psdb compile derives and every PSDB be refused. The instance is created
 * with the extension added where the application did not enable it, and as the application asked
 * where the driver lacks it (the identity then has no driver properties, as on a 1.0 driver). */
static VkResult create_with_properties2(PFN_vkCreateInstance create, const VkInstanceCreateInfo *ci,
                                        const VkAllocationCallbacks *a, VkInstance *out)
{
    static const char ext[] = VK_KHR_GET_PHYSICAL_DEVICE_PROPERTIES_2_EXTENSION_NAME;
    const char **names = NULL;
    VkResult r;
    int have = ci->pApplicationInfo && ci->pApplicationInfo->apiVersion >= VK_API_VERSION_1_1;
    for (uint32_t i = 0; !have && i < ci->enabledExtensionCount; i++)
        have = strcmp(ci->ppEnabledExtensionNames[i], ext) == 0;
    if (!have)
        names = malloc(((size_t)ci->enabledExtensionCount + 1) * sizeof(*names));
    if (names) {
        VkInstanceCreateInfo with = *ci;
        for (uint32_t i = 0; i < ci->enabledExtensionCount; i++)
            names[i] = ci->ppEnabledExtensionNames[i];
        names[ci->enabledExtensionCount] = ext;
        with.enabledExtensionCount = ci->enabledExtensionCount + 1;
        with.ppEnabledExtensionNames = names;
        r = create(&with, a, out);
        if (r != VK_ERROR_EXTENSION_NOT_PRESENT)
            goto cleanup;
    }
    r = create(ci, a, out);
cleanup:
    free(names);
    return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateInstance(const VkInstanceCreateInfo *ci,
                                                           const VkAllocationCallbacks *a,
                                                           VkInstance *out)
{
    VkLayerInstanceCreateInfo *link = (VkLayerInstanceCreateInfo *)ci->pNext;
    while (link && !(link->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO &&
                     link->function == VK_LAYER_LINK_INFO))
        link = (VkLayerInstanceCreateInfo *)link->pNext;
    if (!link || !link->u.pLayerInfo)
        return VK_ERROR_INITIALIZATION_FAILED;
    PFN_vkGetInstanceProcAddr gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    PFN_vkCreateInstance create = (PFN_vkCreateInstance)gipa(VK_NULL_HANDLE, "vkCreateInstance");
    if (!create)
        return VK_ERROR_INITIALIZATION_FAILED;
    linstance *inst = calloc(1, sizeof(*inst));
    if (!inst)
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    link->u.pLayerInfo = link->u.pLayerInfo->pNext;
    delivery_prepare();
    VkResult r = create_with_properties2(create, ci, a, out);
    if (r != VK_SUCCESS) {
        free(inst);
        return r;
    }
    inst->instance = *out;
    inst->key = dispatch_key(*out);
    inst->gipa = gipa;
    inst->DestroyInstance = (PFN_vkDestroyInstance)gipa(*out, "vkDestroyInstance");
    pthread_mutex_lock(&g_lock);
    inst->next = g_instances;
    g_instances = inst;
    pthread_mutex_unlock(&g_lock);
    capture_open(ci->pApplicationInfo);
    return VK_SUCCESS;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyInstance(VkInstance instance,
                                                        const VkAllocationCallbacks *a)
{
    if (!instance)
        return;
    void *key = dispatch_key(instance);
    linstance *inst = NULL;
    pthread_mutex_lock(&g_lock);
    for (linstance **pp = &g_instances; *pp; pp = &(*pp)->next) {
        if ((*pp)->key == key) {
            inst = *pp;
            *pp = inst->next;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (!inst)
        return;
    inst->DestroyInstance(instance, a);
    free(inst);
    proofs_drop();
    capture_close();
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetInstanceProcAddr(VkInstance instance,
                                                                          const char *name)
{
    if (strcmp(name, "vkGetInstanceProcAddr") == 0)
        return (PFN_vkVoidFunction)layer_GetInstanceProcAddr;
    if (strcmp(name, "vkCreateInstance") == 0)
        return (PFN_vkVoidFunction)layer_CreateInstance;
    if (strcmp(name, "vkDestroyInstance") == 0)
        return (PFN_vkVoidFunction)layer_DestroyInstance;
    if (strcmp(name, "vkCreateDevice") == 0)
        return (PFN_vkVoidFunction)layer_CreateDevice;
    if (strcmp(name, "vkGetDeviceProcAddr") == 0)
        return (PFN_vkVoidFunction)layer_GetDeviceProcAddr;
    /* Device-level hooks are offered through vkGetDeviceProcAddr only, where the device is known
     * and a hook is never handed out for a function the driver lacks. */
    linstance *inst = instance ? instance_find(dispatch_key(instance)) : NULL;
    return inst ? inst->gipa(instance, name) : NULL;
}

LAYER_EXPORT VKAPI_ATTR VkResult VKAPI_CALL
vkNegotiateLoaderLayerInterfaceVersion(VkNegotiateLayerInterface *v)
{
    if (!v || v->sType != LAYER_NEGOTIATE_INTERFACE_STRUCT)
        return VK_ERROR_INITIALIZATION_FAILED;
    if (v->loaderLayerInterfaceVersion < 2)
        return VK_ERROR_INITIALIZATION_FAILED;
    v->loaderLayerInterfaceVersion = 2;
    v->pfnGetInstanceProcAddr = layer_GetInstanceProcAddr;
    v->pfnGetDeviceProcAddr = layer_GetDeviceProcAddr;
    v->pfnGetPhysicalDeviceProcAddr = NULL;
    return VK_SUCCESS;
}
