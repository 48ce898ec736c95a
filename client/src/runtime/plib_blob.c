/* plib_blob.c - a pipeline library's blob (schema/PIPELINE_LIBRARY.md): parsing and validating one
 * (L2, L3) and serializing a library (L6). */
#include "runtime/plib_int.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "format/desc.h"
#include "common/error.h"

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
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_device_create_pipeline_library: the blob is not a pipeline "
                               "library (too short or wrong magic)");
        goto cleanup;
    }
    /* Another format version comes from another runtime (vkd3d-proton's choice: not E_INVALIDARG,
     * which games take for corruption). */
    if (psdb__le32(b + 8) != PSDB__PLIB_VERSION) {
        hr = psdb__error_const(
            PSDB_E_DRIVER_VERSION_MISMATCH,
            "psdb_device_create_pipeline_library: the blob's format version is not this runtime's");
        goto cleanup;
    }
    if (psdb__le32(b + 12) != PSDB__PLIB_HEADER_SIZE || psdb__le64(b + 16) != size) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_device_create_pipeline_library: the blob's header or total size is damaged");
        goto cleanup;
    }
    if (psdb__le32(b + 24) != psdb__device_adapter(dev)->vendor_id ||
        psdb__le32(b + 28) != psdb__device_adapter(dev)->device_id) {
        hr = psdb__error_const(
            PSDB_E_ADAPTER_NOT_FOUND,
            "psdb_device_create_pipeline_library: the blob was made for another adapter");
        goto cleanup;
    }
    if (psdb__le64(b + 32) != psdb__device_adapter(dev)->driver_build ||
        psdb__le64(b + 40) != psdb__device_target(dev)->abi_version ||
        psdb__le64(b + 48) != psdb__device_target(dev)->compiler_version) {
        hr = psdb__error_const(PSDB_E_DRIVER_VERSION_MISMATCH,
                               "psdb_device_create_pipeline_library: the blob was made by another "
                               "driver or compiler version");
        goto cleanup;
    }
    /* From here on, corrupt or unrecognized content: E_INVALIDARG (L3). */
    hr = psdb__error_const(
        PSDB_E_INVALIDARG,
        "psdb_device_create_pipeline_library: the blob's content is damaged (L3)");
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
        if (psdb__plib_find_blob(lib, r, &dup))
            goto cleanup; /* a unit held twice breaks L8 and the key lookup */
        plib_blob *x = &lib->blobs[lib->num_blobs++];
        memcpy(x->key, r, PSDB__KEY_SIZE);
        x->code = b + co;
        x->code_size = cs;
        x->meta = b + mo;
        x->meta_size = ms;
        if (PSDB_FAILED(psdb__plib_index_blob(lib))) {
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
        if (psdb__plib_find_entry(lib, (const char *)b + no, nl, &dup))
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
        if (PSDB_FAILED(psdb__plib_index_entry(lib))) {
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
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_pipeline_library *lib = NULL;
    if (out)
        *out = NULL;
    if (!dev || (!blob && size)) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_device_create_pipeline_library: NULL device, or a NULL blob with a size");
        goto cleanup;
    }
    if (psdb__device_adapter(dev)->flags & PSDB_ADAPTER_FLAG_NO_LIBRARY) {
        hr = psdb__error_const(PSDB_E_UNSUPPORTED,
                               "psdb_device_create_pipeline_library: the adapter has no pipeline "
                               "library support (L1)"); /* L1 */
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
    return psdb__error_ret(hr, err_mark, __func__);
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
    psdb__put_le32(out + 24, psdb__device_adapter(lib->dev)->vendor_id);
    psdb__put_le32(out + 28, psdb__device_adapter(lib->dev)->device_id);
    psdb__put_le64(out + 32, psdb__device_adapter(lib->dev)->driver_build);
    psdb__put_le64(out + 40, psdb__device_target(lib->dev)->abi_version);
    psdb__put_le64(out + 48, psdb__device_target(lib->dev)->compiler_version);
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
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    uint8_t *tmp = NULL;
    int locked = 0;
    if (!lib || !data) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_pipeline_library_serialize: NULL library or data");
        goto cleanup;
    }
    pthread_mutex_lock(&lib->lock);
    locked = 1;
    size_t total = serialized_size_locked(lib);
    if (size < total) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_pipeline_library_serialize: the buffer is smaller than "
                               "psdb_pipeline_library_get_serialized_size (L6)"); /* L6 */
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
    return psdb__error_ret(hr, err_mark, __func__);
}
