/* pipeline_library.c - the pipeline library (MODEL L, G2): named PSOs whose compiled units are held
 * once, serialized into one blob (schema/PIPELINE_LIBRARY.md) and loaded back by name.
 *
 * DESIGN
 * A library entry is a name, a kind, the group key of the PSO's description (what a load's
 * description must match, L7) and the list of its compile units, each an index into one table of
 * blobs keyed by unit key: PSOs with identical sub-components share the blob (L8). A library
 * parsed from a blob points into the caller's bytes (L2: validated, not copied); a stored PSO adds
 * owned blobs. The reference driver's PSO does not retain its compiled values; the reference
 * compiler is deterministic, so a store regenerates the identical bytes at no simulated cost.
 * A load that creates a PSO is a creation like any other (G2): it selects a PSDB with the load
 * description's subobject and looks every unit up there; a unit the PSDB misses is taken from the
 * library's blobs instead of being compiled. The created PSO stays in the entry: later loads return
 * it (with its original selection), as they return a stored PSO.
 * One mutex guards the tables. Creation runs outside it; two loads of the same name racing (which
 * the seed leaves to the caller) still end with one PSO in the entry, the loser's being dropped. */
#include "runtime/pipeline_library.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "format/desc.h"

/* ---- the library ----------------------------------------------------------------------------- */

typedef struct plib_blob {
    uint8_t key[PSDB__KEY_SIZE];
    const uint8_t *code, *meta; /* into the caller's blob, or into `owned` */
    size_t code_size, meta_size;
    uint8_t *owned;
} plib_blob;

typedef struct plib_entry {
    const char *name; /* into the caller's blob (not NUL-terminated), or owned_name */
    size_t name_len;
    char *owned_name;
    uint32_t kind; /* PSDB__PLIB_KIND_* */
    uint8_t group_key[PSDB__KEY_SIZE];
    uint32_t *units; /* blob indices */
    uint32_t num_units;
    psdb_pipeline *pso; /* stored or created by a load; referenced */
} plib_entry;

/* An open-addressing index: slots hold an array index + 1 (0: empty); capacity a power of two at
 * least twice the count, so probes stay short and always end. */
typedef struct plib_index {
    uint32_t *slots;
    size_t cap;
} plib_index;

struct psdb_pipeline_library {
    psdb_device *dev; /* referenced */
    pthread_mutex_t lock;
    plib_entry *entries;
    size_t num_entries, cap_entries;
    plib_blob *blobs;
    size_t num_blobs, cap_blobs;
    plib_index names, keys; /* entries by name, blobs by unit key */
};

static uint64_t name_hash(const char *name, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)name[i]) * 0x100000001b3ull;
    return h;
}

/* Unit keys are SHA-256 digests: their first bytes are already uniform. */
static uint64_t key_hash(const uint8_t key[PSDB__KEY_SIZE])
{
    return psdb__le64(key);
}

static uint64_t entry_hash(const psdb_pipeline_library *lib, size_t i)
{
    return name_hash(lib->entries[i].name, lib->entries[i].name_len);
}

static uint64_t blob_hash(const psdb_pipeline_library *lib, size_t i)
{
    return key_hash(lib->blobs[i].key);
}

static void index_put(plib_index *ix, uint64_t h, size_t i)
{
    size_t m = ix->cap - 1, at = (size_t)h & m;
    while (ix->slots[at])
        at = (at + 1) & m;
    ix->slots[at] = (uint32_t)(i + 1);
}

/* Makes room for `count` items, rehashing the `count - 1` present ones when it grows. */
static psdb_hr index_reserve(plib_index *ix, size_t count, const psdb_pipeline_library *lib,
                             uint64_t (*hash)(const psdb_pipeline_library *, size_t))
{
    psdb_hr hr = PSDB_S_OK;
    if (count * 2 <= ix->cap)
        goto cleanup;
    size_t cap = ix->cap ? ix->cap : 32;
    while (cap < count * 2)
        cap *= 2;
    uint32_t *slots = calloc(cap, sizeof(*slots));
    if (!slots) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    plib_index grown = {slots, cap};
    for (size_t i = 0; i < ix->cap; i++)
        if (ix->slots[i])
            index_put(&grown, hash(lib, ix->slots[i] - 1u), ix->slots[i] - 1u);
    free(ix->slots);
    *ix = grown;
cleanup:
    return hr;
}

static int find_entry(const psdb_pipeline_library *lib, const char *name, size_t len, size_t *at)
{
    if (!lib->names.cap)
        return 0;
    size_t m = lib->names.cap - 1;
    for (size_t s = (size_t)name_hash(name, len) & m; lib->names.slots[s]; s = (s + 1) & m) {
        const plib_entry *e = &lib->entries[lib->names.slots[s] - 1u];
        if (e->name_len == len && memcmp(e->name, name, len) == 0) {
            *at = lib->names.slots[s] - 1u;
            return 1;
        }
    }
    return 0;
}

static int find_blob(const psdb_pipeline_library *lib, const uint8_t key[PSDB__KEY_SIZE],
                     uint32_t *at)
{
    if (!lib->keys.cap)
        return 0;
    size_t m = lib->keys.cap - 1;
    for (size_t s = (size_t)key_hash(key) & m; lib->keys.slots[s]; s = (s + 1) & m) {
        if (memcmp(lib->blobs[lib->keys.slots[s] - 1u].key, key, PSDB__KEY_SIZE) == 0) {
            *at = lib->keys.slots[s] - 1u;
            return 1;
        }
    }
    return 0;
}

/* Appends the entry / blob just written at the end of its array to its index. */
static psdb_hr index_entry(psdb_pipeline_library *lib)
{
    psdb_hr hr = index_reserve(&lib->names, lib->num_entries, lib, entry_hash);
    if (PSDB_SUCCEEDED(hr))
        index_put(&lib->names, entry_hash(lib, lib->num_entries - 1), lib->num_entries - 1);
    return hr;
}

static psdb_hr index_blob(psdb_pipeline_library *lib)
{
    psdb_hr hr = index_reserve(&lib->keys, lib->num_blobs, lib, blob_hash);
    if (PSDB_SUCCEEDED(hr))
        index_put(&lib->keys, blob_hash(lib, lib->num_blobs - 1), lib->num_blobs - 1);
    return hr;
}

static psdb_hr grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return PSDB_S_OK;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * elem);
    if (!p)
        return PSDB_E_OUTOFMEMORY;
    *arr = p;
    *cap = n;
    return PSDB_S_OK;
}

void psdb_pipeline_library_release(psdb_pipeline_library *lib)
{
    if (!lib)
        return;
    for (size_t i = 0; i < lib->num_entries; i++) {
        free(lib->entries[i].owned_name);
        free(lib->entries[i].units);
        psdb_pipeline_release(lib->entries[i].pso);
    }
    for (size_t i = 0; i < lib->num_blobs; i++)
        free(lib->blobs[i].owned);
    free(lib->entries);
    free(lib->blobs);
    free(lib->names.slots);
    free(lib->keys.slots);
    pthread_mutex_destroy(&lib->lock);
    psdb__device_unref(lib->dev);
    free(lib);
}

void psdb__pipeline_library_counts(psdb_pipeline_library *lib, size_t *entries, size_t *blobs)
{
    pthread_mutex_lock(&lib->lock);
    *entries = lib->num_entries;
    *blobs = lib->num_blobs;
    pthread_mutex_unlock(&lib->lock);
}

/* ---- parsing a serialized library (L2, L3) ----------------------------------------------------
 */

static size_t pad8(size_t n)
{
    return (n + 7u) & ~(size_t)7u;
}

/* Checks that [off, off + len) lies in [lo, size). */
static int in_range(uint64_t off, uint64_t len, size_t lo, size_t size)
{
    return off >= lo && off <= size && len <= size - off;
}

/* Validates the blob in the order of L3 and fills lib's tables with pointers into the blob (the
 * tables find duplicate names and units; validate-only mode parses into a library it drops). */
static psdb_hr parse_blob(psdb_device *dev, const uint8_t *b, size_t size,
                          psdb_pipeline_library *lib)
{
    psdb_hr hr = PSDB_S_OK;
    /* Bad magic or a blob too short to hold a header: not a library at all. */
    if (size < PSDB__PLIB_HEADER_SIZE || memcmp(b, PSDB__PLIB_MAGIC, 8) != 0) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    /* Another format version comes from another runtime (vkd3d-proton's choice: not E_INVALIDARG,
     * which games take for corruption). */
    if (psdb__le32(b + 8) != PSDB__PLIB_VERSION) {
        hr = PSDB_E_DRIVER_VERSION_MISMATCH;
        goto cleanup;
    }
    if (psdb__le32(b + 12) != PSDB__PLIB_HEADER_SIZE || psdb__le64(b + 16) != size) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    if (psdb__le32(b + 24) != dev->adapter.vendor_id ||
        psdb__le32(b + 28) != dev->adapter.device_id) {
        hr = PSDB_E_ADAPTER_NOT_FOUND;
        goto cleanup;
    }
    if (psdb__le64(b + 32) != dev->adapter.driver_build ||
        psdb__le64(b + 40) != dev->target.abi_version ||
        psdb__le64(b + 48) != dev->target.compiler_version) {
        hr = PSDB_E_DRIVER_VERSION_MISMATCH;
        goto cleanup;
    }
    /* From here on, corrupt or unrecognized content: E_INVALIDARG (L3). */
    hr = PSDB_E_INVALIDARG;
    for (size_t i = 72; i < PSDB__PLIB_HEADER_SIZE; i++)
        if (b[i])
            goto cleanup;
    if (psdb__crc32(0, b + PSDB__PLIB_HEADER_SIZE, size - PSDB__PLIB_HEADER_SIZE) !=
        psdb__le32(b + 68))
        goto cleanup;
    uint64_t ne = psdb__le32(b + 56), nr = psdb__le32(b + 60), nb = psdb__le32(b + 64);
    /* Counts are u32, so these products cannot overflow 64 bits. */
    uint64_t toc_end = PSDB__PLIB_HEADER_SIZE + ne * PSDB__PLIB_ENTRY_SIZE;
    uint64_t refs_at = toc_end, blobs_at = refs_at + pad8((size_t)(nr * 4u));
    uint64_t data_at = blobs_at + nb * PSDB__PLIB_BLOB_SIZE;
    if (data_at > size)
        goto cleanup; /* a truncated table of contents */
    const uint8_t *refs = b + refs_at;
    for (uint64_t i = nr * 4u; refs_at + i < blobs_at; i++)
        if (b[refs_at + i])
            goto cleanup; /* padding is reserved */
    /* The counts are bounded by the blob's size (data_at <= size): so are these allocations. */
    lib->blobs = calloc(nb ? nb : 1, sizeof(*lib->blobs));
    lib->entries = calloc(ne ? ne : 1, sizeof(*lib->entries));
    if (!lib->blobs || !lib->entries) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    lib->cap_blobs = nb ? nb : 1;
    lib->cap_entries = ne ? ne : 1;
    for (uint64_t i = 0; i < nb; i++) {
        const uint8_t *r = b + blobs_at + i * PSDB__PLIB_BLOB_SIZE;
        uint64_t co = psdb__le64(r + 32), cs = psdb__le32(r + 40), ms = psdb__le32(r + 44);
        uint64_t mo = psdb__le64(r + 48);
        if (psdb__le32(r + 60) || !in_range(co, cs, data_at, size) ||
            !in_range(mo, ms, data_at, size))
            goto cleanup;
        uint32_t crc = psdb__crc32(psdb__crc32(0, b + co, cs), b + mo, ms);
        if (crc != psdb__le32(r + 56))
            goto cleanup;
        uint32_t dup = 0;
        if (find_blob(lib, r, &dup))
            goto cleanup; /* a unit held twice breaks L8 and the key lookup */
        plib_blob *x = &lib->blobs[lib->num_blobs++];
        memcpy(x->key, r, PSDB__KEY_SIZE);
        x->code = b + co;
        x->code_size = cs;
        x->meta = b + mo;
        x->meta_size = ms;
        if (PSDB_FAILED(index_blob(lib))) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
    }
    for (uint64_t i = 0; i < ne; i++) {
        const uint8_t *e = b + PSDB__PLIB_HEADER_SIZE + i * PSDB__PLIB_ENTRY_SIZE;
        uint32_t kind = psdb__le32(e), nl = psdb__le32(e + 4);
        uint64_t no = psdb__le64(e + 8);
        uint64_t first = psdb__le32(e + 48), nu = psdb__le32(e + 52);
        if ((kind != PSDB__PLIB_KIND_COMPUTE && kind != PSDB__PLIB_KIND_GRAPHICS) || nl == 0 ||
            !in_range(no, nl, data_at, size) || memchr(b + no, 0, nl) || nu == 0 || first + nu > nr)
            goto cleanup;
        size_t dup = 0;
        if (find_entry(lib, (const char *)b + no, nl, &dup))
            goto cleanup; /* duplicate names (L5 holds for serialized libraries too) */
        for (uint64_t j = first; j < first + nu; j++)
            if (psdb__le32(refs + j * 4u) >= nb)
                goto cleanup;
        plib_entry *x = &lib->entries[lib->num_entries];
        x->units = calloc((size_t)nu, sizeof(*x->units));
        if (!x->units) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        lib->num_entries++;
        x->name = (const char *)b + no;
        x->name_len = nl;
        x->kind = kind;
        memcpy(x->group_key, e + 16, PSDB__KEY_SIZE);
        x->num_units = (uint32_t)nu;
        for (uint64_t j = 0; j < nu; j++)
            x->units[j] = psdb__le32(refs + (first + j) * 4u);
        if (PSDB_FAILED(index_entry(lib))) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
    }
    hr = PSDB_S_OK;
cleanup:
    return hr;
}

psdb_hr psdb_device_create_pipeline_library(psdb_device *dev, const void *blob, size_t size,
                                            psdb_pipeline_library **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_pipeline_library *lib = NULL;
    if (out)
        *out = NULL;
    if (!dev || (!blob && size)) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    if (dev->adapter.flags & PSDB_ADAPTER_FLAG_NO_LIBRARY) {
        hr = PSDB_E_UNSUPPORTED; /* L1 */
        goto cleanup;
    }
    lib = calloc(1, sizeof(*lib));
    if (!lib) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (pthread_mutex_init(&lib->lock, NULL) != 0) {
        free(lib);
        lib = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    lib->dev = dev;
    psdb__device_ref(dev);
    if (size) {
        hr = parse_blob(dev, blob, size, lib);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    if (!out) {
        hr = PSDB_S_FALSE; /* L4: validate only */
        goto cleanup;
    }
    *out = lib;
    lib = NULL;
cleanup:
    psdb_pipeline_library_release(lib);
    return hr;
}

/* ---- store (L5, L8) -------------------------------------------------------------------------- */

psdb_hr psdb_pipeline_library_store_pipeline(psdb_pipeline_library *lib, const char *name,
                                             psdb_pipeline *p)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__plan plan = {0};
    plib_blob *fresh = NULL;
    uint32_t num_fresh = 0;
    uint32_t *units = NULL;
    char *owned_name = NULL;
    size_t at = 0;
    int locked = 0;
    if (!lib || !name || !*name || !p || p->dev != lib->dev) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    size_t len = strlen(name);
    pthread_mutex_lock(&lib->lock);
    int exists = find_entry(lib, name, len, &at);
    pthread_mutex_unlock(&lib->lock);
    if (exists) {
        hr = PSDB_E_INVALIDARG; /* L5: no overwrite */
        goto cleanup;
    }
    hr = psdb__pipeline_plan(p, &plan);
    if (PSDB_FAILED(hr))
        goto cleanup;
    fresh = calloc(plan.num_units, sizeof(*fresh));
    units = calloc(plan.num_units, sizeof(*units));
    owned_name = psdb__strdup(name);
    if (!fresh || !units || !owned_name) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (uint32_t i = 0; i < plan.num_units; i++) {
        uint32_t idx = 0;
        pthread_mutex_lock(&lib->lock);
        int have = find_blob(lib, plan.units[i].key, &idx);
        pthread_mutex_unlock(&lib->lock);
        for (uint32_t j = 0; !have && j < num_fresh; j++)
            have = memcmp(fresh[j].key, plan.units[i].key, PSDB__KEY_SIZE) == 0;
        if (have)
            continue; /* L8: a unit already held is shared */
        psdb__buf code = {0}, meta = {0};
        hr = lib->dev->driver->compile_unit(&plan.units[i], &lib->dev->target,
                                            PSDB_COMPILE_COST_FREE, &code, &meta);
        plib_blob *x = &fresh[num_fresh];
        if (PSDB_SUCCEEDED(hr)) {
            x->owned = malloc(code.len + meta.len + 1);
            if (!x->owned)
                hr = PSDB_E_OUTOFMEMORY;
        }
        if (PSDB_SUCCEEDED(hr)) {
            memcpy(x->key, plan.units[i].key, PSDB__KEY_SIZE);
            memcpy(x->owned, code.data, code.len);
            memcpy(x->owned + code.len, meta.data, meta.len);
            x->code = x->owned;
            x->code_size = code.len;
            x->meta = x->owned + code.len;
            x->meta_size = meta.len;
            num_fresh++;
        }
        psdb__buf_free(&code);
        psdb__buf_free(&meta);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    pthread_mutex_lock(&lib->lock);
    locked = 1;
    if (find_entry(lib, name, len, &at)) {
        hr = PSDB_E_INVALIDARG; /* stored meanwhile by another thread */
        goto cleanup;
    }
    hr = grow((void **)&lib->blobs, &lib->cap_blobs, lib->num_blobs + num_fresh,
              sizeof(*lib->blobs));
    if (PSDB_SUCCEEDED(hr))
        hr = grow((void **)&lib->entries, &lib->cap_entries, lib->num_entries + 1,
                  sizeof(*lib->entries));
    if (PSDB_FAILED(hr))
        goto cleanup;
    for (uint32_t j = 0; j < num_fresh; j++) {
        uint32_t idx = 0;
        if (find_blob(lib, fresh[j].key, &idx))
            continue; /* added meanwhile by another store: keep one */
        lib->blobs[lib->num_blobs++] = fresh[j];
        hr = index_blob(lib);
        if (PSDB_FAILED(hr)) {
            lib->num_blobs--; /* not indexed: leave it out (fresh still owns it) */
            goto cleanup;
        }
        fresh[j].owned = NULL;
    }
    for (uint32_t i = 0; i < plan.num_units; i++) {
        int found = find_blob(lib, plan.units[i].key, &units[i]);
        assert(found);
        (void)found;
    }
    plib_entry *e = &lib->entries[lib->num_entries++];
    memset(e, 0, sizeof(*e));
    e->owned_name = owned_name;
    e->name = owned_name;
    e->name_len = len;
    owned_name = NULL;
    e->kind = p->is_compute ? PSDB__PLIB_KIND_COMPUTE : PSDB__PLIB_KIND_GRAPHICS;
    memcpy(e->group_key, plan.group_key, PSDB__KEY_SIZE);
    e->units = units;
    e->num_units = plan.num_units;
    hr = index_entry(lib);
    if (PSDB_FAILED(hr)) {
        lib->num_entries--; /* not indexed: undo (the owned name and units are freed below) */
        owned_name = e->owned_name;
        goto cleanup;
    }
    units = NULL;
    psdb_pipeline_addref(p); /* the library keeps the stored PSO (a load returns it, G2) */
    e->pso = p;
cleanup:
    if (locked)
        pthread_mutex_unlock(&lib->lock);
    for (uint32_t j = 0; j < num_fresh; j++)
        free(fresh[j].owned);
    free(fresh);
    free(units);
    free(owned_name);
    psdb__plan_free(&plan);
    return hr;
}

/* ---- serialize (L6) -------------------------------------------------------------------------- */

static size_t serialized_size_locked(const psdb_pipeline_library *lib)
{
    size_t refs = 0, names = 0, data = 0;
    for (size_t i = 0; i < lib->num_entries; i++) {
        refs += lib->entries[i].num_units;
        names += lib->entries[i].name_len;
    }
    for (size_t i = 0; i < lib->num_blobs; i++)
        data += lib->blobs[i].code_size + lib->blobs[i].meta_size;
    return PSDB__PLIB_HEADER_SIZE + lib->num_entries * PSDB__PLIB_ENTRY_SIZE + pad8(refs * 4u) +
           lib->num_blobs * PSDB__PLIB_BLOB_SIZE + names + data;
}

size_t psdb_pipeline_library_get_serialized_size(psdb_pipeline_library *lib)
{
    size_t n = 0;
    if (!lib)
        goto cleanup;
    pthread_mutex_lock(&lib->lock);
    n = serialized_size_locked(lib);
    pthread_mutex_unlock(&lib->lock);
cleanup:
    return n;
}

static void write_locked(const psdb_pipeline_library *lib, uint8_t *out, size_t total)
{
    size_t refs = 0;
    for (size_t i = 0; i < lib->num_entries; i++)
        refs += lib->entries[i].num_units;
    size_t refs_at = PSDB__PLIB_HEADER_SIZE + lib->num_entries * PSDB__PLIB_ENTRY_SIZE;
    size_t blobs_at = refs_at + pad8(refs * 4u);
    size_t data = blobs_at + lib->num_blobs * PSDB__PLIB_BLOB_SIZE;
    memset(out, 0, data);
    memcpy(out, PSDB__PLIB_MAGIC, 8);
    psdb__put_le32(out + 8, PSDB__PLIB_VERSION);
    psdb__put_le32(out + 12, PSDB__PLIB_HEADER_SIZE);
    psdb__put_le64(out + 16, total);
    psdb__put_le32(out + 24, lib->dev->adapter.vendor_id);
    psdb__put_le32(out + 28, lib->dev->adapter.device_id);
    psdb__put_le64(out + 32, lib->dev->adapter.driver_build);
    psdb__put_le64(out + 40, lib->dev->target.abi_version);
    psdb__put_le64(out + 48, lib->dev->target.compiler_version);
    psdb__put_le32(out + 56, (uint32_t)lib->num_entries);
    psdb__put_le32(out + 60, (uint32_t)refs);
    psdb__put_le32(out + 64, (uint32_t)lib->num_blobs);
    size_t ref = 0;
    for (size_t i = 0; i < lib->num_entries; i++) {
        const plib_entry *e = &lib->entries[i];
        uint8_t *r = out + PSDB__PLIB_HEADER_SIZE + i * PSDB__PLIB_ENTRY_SIZE;
        psdb__put_le32(r, e->kind);
        psdb__put_le32(r + 4, (uint32_t)e->name_len);
        psdb__put_le64(r + 8, data);
        memcpy(out + data, e->name, e->name_len);
        data += e->name_len;
        memcpy(r + 16, e->group_key, PSDB__KEY_SIZE);
        psdb__put_le32(r + 48, (uint32_t)ref);
        psdb__put_le32(r + 52, e->num_units);
        for (uint32_t j = 0; j < e->num_units; j++, ref++)
            psdb__put_le32(out + refs_at + ref * 4u, e->units[j]);
    }
    for (size_t i = 0; i < lib->num_blobs; i++) {
        const plib_blob *x = &lib->blobs[i];
        uint8_t *r = out + blobs_at + i * PSDB__PLIB_BLOB_SIZE;
        memcpy(r, x->key, PSDB__KEY_SIZE);
        psdb__put_le64(r + 32, data);
        psdb__put_le32(r + 40, (uint32_t)x->code_size);
        psdb__put_le32(r + 44, (uint32_t)x->meta_size);
        memcpy(out + data, x->code, x->code_size);
        data += x->code_size;
        psdb__put_le64(r + 48, data);
        memcpy(out + data, x->meta, x->meta_size);
        data += x->meta_size;
        psdb__put_le32(r + 56,
                       psdb__crc32(psdb__crc32(0, x->code, x->code_size), x->meta, x->meta_size));
    }
    assert(data == total);
    psdb__put_le32(out + 68,
                   psdb__crc32(0, out + PSDB__PLIB_HEADER_SIZE, total - PSDB__PLIB_HEADER_SIZE));
}

psdb_hr psdb_pipeline_library_serialize(psdb_pipeline_library *lib, void *data, size_t size)
{
    psdb_hr hr = PSDB_S_OK;
    uint8_t *tmp = NULL;
    int locked = 0;
    if (!lib || !data) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    pthread_mutex_lock(&lib->lock);
    locked = 1;
    size_t total = serialized_size_locked(lib);
    if (size < total) {
        hr = PSDB_E_INVALIDARG; /* L6 */
        goto cleanup;
    }
    /* Written to a copy first: the caller may serialize into the very blob this library was
     * parsed from and still points into. */
    tmp = malloc(total);
    if (!tmp) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    write_locked(lib, tmp, total);
    memcpy(data, tmp, total);
cleanup:
    if (locked)
        pthread_mutex_unlock(&lib->lock);
    free(tmp);
    return hr;
}

/* ---- load (L7, G2) --------------------------------------------------------------------------- */

static int library_has_unit(void *ctx, const uint8_t key[32])
{
    psdb_pipeline_library *lib = ctx;
    uint32_t idx = 0;
    pthread_mutex_lock(&lib->lock);
    int have = find_blob(lib, key, &idx);
    pthread_mutex_unlock(&lib->lock);
    return have;
}

/* Finds the entry, checks the description against it, and returns its PSO or creates it. */
static psdb_hr load(psdb_pipeline_library *lib, const char *name, uint32_t kind,
                    const psdb_compute_pipeline_desc *cd, const psdb_graphics_pipeline_desc *gd,
                    psdb_pipeline **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__plan plan = {0};
    psdb__selection sel = {0};
    psdb_pipeline *p = NULL;
    size_t at = 0;
    psdb_device *dev = lib->dev;
    hr = kind == PSDB__PLIB_KIND_COMPUTE ? dev->driver->plan_compute(cd, &plan)
                                         : dev->driver->plan_graphics(gd, &plan);
    if (PSDB_FAILED(hr))
        goto cleanup;
    pthread_mutex_lock(&lib->lock);
    if (!find_entry(lib, name, strlen(name), &at) || lib->entries[at].kind != kind ||
        memcmp(lib->entries[at].group_key, plan.group_key, PSDB__KEY_SIZE) != 0) {
        hr = PSDB_E_INVALIDARG; /* L7: unknown name or mismatching description */
    } else if (lib->entries[at].pso) {
        p = lib->entries[at].pso; /* G2: the existing PSO, with its original selection */
        psdb_pipeline_addref(p);
    }
    pthread_mutex_unlock(&lib->lock);
    if (PSDB_FAILED(hr) || p)
        goto cleanup;
    /* G2: the load that creates selects like any creation (F), from the load description. */
    hr = psdb__select(dev, kind == PSDB__PLIB_KIND_COMPUTE ? cd->psdb : gd->psdb, &sel);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb__pipeline_new(dev, &p);
    if (PSDB_FAILED(hr))
        goto cleanup;
    p->is_compute = kind == PSDB__PLIB_KIND_COMPUTE;
    memcpy(p->group_key, plan.group_key, PSDB__KEY_SIZE);
    hr = psdb__run_creation_ex(dev, &sel, &plan, 0, library_has_unit, lib, &p->info);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__associate(&sel, &p->assoc);
    p->desc = plan.desc; /* the plan's encoding of the load description */
    memset(&plan.desc, 0, sizeof(plan.desc));
    pthread_mutex_lock(&lib->lock);
    /* The entry table may have grown meanwhile: find the entry again. */
    int found = find_entry(lib, name, strlen(name), &at);
    assert(found);
    (void)found;
    if (lib->entries[at].pso) {
        /* Another load of the same name won the race the seed leaves to the caller: keep one. */
        psdb_pipeline_release(p);
        p = lib->entries[at].pso;
    } else {
        lib->entries[at].pso = p;
    }
    psdb_pipeline_addref(p);
    pthread_mutex_unlock(&lib->lock);
cleanup:
    if (PSDB_SUCCEEDED(hr))
        *out = p;
    else
        psdb_pipeline_release(p);
    psdb__selection_release(&sel);
    psdb__plan_free(&plan);
    return hr;
}

psdb_hr psdb_pipeline_library_load_compute_pipeline(psdb_pipeline_library *lib, const char *name,
                                                    const psdb_compute_pipeline_desc *desc,
                                                    psdb_pipeline **out)
{
    psdb_hr hr = PSDB_S_OK;
    if (out)
        *out = NULL;
    if (!lib || !name || !desc || !out) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    hr = load(lib, name, PSDB__PLIB_KIND_COMPUTE, desc, NULL, out);
cleanup:
    return hr;
}

psdb_hr psdb_pipeline_library_load_graphics_pipeline(psdb_pipeline_library *lib, const char *name,
                                                     const psdb_graphics_pipeline_desc *desc,
                                                     psdb_pipeline **out)
{
    psdb_hr hr = PSDB_S_OK;
    if (out)
        *out = NULL;
    if (!lib || !name || !desc || !out) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    hr = load(lib, name, PSDB__PLIB_KIND_GRAPHICS, NULL, desc, out);
cleanup:
    return hr;
}

psdb_hr psdb_pipeline_library_load_pipeline(psdb_pipeline_library *lib, const char *name,
                                            const psdb_pipeline_stream_desc *desc,
                                            psdb_pipeline **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_compute_pipeline_desc cd;
    psdb_graphics_pipeline_desc gd;
    int is_compute = 0;
    if (out)
        *out = NULL;
    if (!lib || !name || !desc || !out || (desc->num_subobjects && !desc->subobjects)) {
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    memset(&cd, 0, sizeof(cd));
    memset(&gd, 0, sizeof(gd));
    hr = psdb__stream_to_desc(desc, &is_compute, &cd, &gd);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = is_compute ? load(lib, name, PSDB__PLIB_KIND_COMPUTE, &cd, NULL, out)
                    : load(lib, name, PSDB__PLIB_KIND_GRAPHICS, NULL, &gd, out);
cleanup:
    return hr;
}
