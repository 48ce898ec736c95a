/* codegen.c - the reference compiler's deterministic simulated compile: object code and metadata
 * of one unit for a target, with its simulated cost (schema/COMPILER.md). */
#include "driver/compiler.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/desc.h"

static const char CODE_TAG[10] = {'p', 's', 'd', 'b', '.', 'o', 'c', '.', 'v', '1'};

#define OBJECT_CODE_VERSION 1u
#define METADATA_VERSION 1u
#define OBJECT_CODE_HEADER 64u
#define METADATA_FIXED 148u

/* ---- Compiling ------------------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Simulated code generation: keeps the CPU busy for `ns` on the monotonic clock, so a compile
 * takes the same wall time whatever else the machine runs. */
static uint64_t burn(uint64_t ns, uint64_t seed)
{
    uint64_t start = now_ns(), s = seed, acc = 0;
    while (now_ns() - start < ns)
        for (int i = 0; i < 256; i++)
            acc ^= splitmix64(&s);
    return acc;
}

static uint64_t cost_ns(uint64_t ns_per_kib, size_t size)
{
    if (ns_per_kib == PSDB_COMPILE_COST_FREE)
        return 0;
    if (ns_per_kib == 0)
        ns_per_kib = PSDB_COMPILE_NS_PER_KIB_DEFAULT;
    uint64_t sz = (uint64_t)size;
    if (sz != 0 && ns_per_kib > UINT64_MAX / sz)
        return sz / 1024 > UINT64_MAX / ns_per_kib ? UINT64_MAX : (sz / 1024) * ns_per_kib;
    return ns_per_kib * sz / 1024;
}

/* Keeps the simulated compile work from being optimized away; atomic because units compile on
 * many threads at once. */
static _Atomic uint64_t burn_sink;
static _Thread_local uint64_t compiles_on_thread;

uint64_t psdb__compile_count_on_thread(void)
{
    return compiles_on_thread;
}

psdb_hr psdb__compile_unit(const psdb__unit *u, const psdb_target *t, uint64_t ns_per_kib,
                           psdb__buf *object_code, psdb__buf *metadata)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__buf oc = {0}, md = {0}, sb = {0};
    uint8_t seed[32];
    size_t family_len = 0;

    compiles_on_thread++;

    if (!u || !t || !object_code || !metadata || !t->family || (!u->code && u->code_size))
        return PSDB_E_INVALIDARG;
    family_len = strlen(t->family);
    if (family_len == 0 || family_len >= PSDB_ADAPTER_FAMILY_MAX ||
        u->kind > PSDB__UNIT_STATE_OBJECT)
        return PSDB_E_INVALIDARG;

    /* The code generator's randomness is a function of the target and the unit only. */
    psdb__buf_append(&sb, CODE_TAG, sizeof(CODE_TAG));
    psdb__buf_u32(&sb, (uint32_t)family_len);
    psdb__buf_append(&sb, t->family, family_len);
    psdb__buf_u64(&sb, t->abi_version);
    psdb__buf_u64(&sb, t->compiler_version);
    psdb__buf_append(&sb, u->key, PSDB__KEY_SIZE);
    hr = psdb__buf_status(&sb);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__sha256(sb.data, sb.len, seed);
    uint64_t state = psdb__le64(seed);

    /* Body: every 4 bytes of input become 4 scrambled bytes and 1 check byte (1.25x). */
    size_t groups = u->code_size / 4 + (u->code_size % 4 != 0);
    uint64_t body_size = (uint64_t)groups * 5;
    int is_ps = u->kind == PSDB__UNIT_PS;
    uint64_t patch_size = is_ps ? 8u * PSDB_MAX_RENDER_TARGETS : 0u;

    psdb__buf_append(&oc, "PSOC", 4);
    psdb__buf_u32(&oc, OBJECT_CODE_VERSION);
    psdb__buf_u32(&oc, u->kind);
    psdb__buf_u32(&oc, 0);
    psdb__buf_append(&oc, u->key, PSDB__KEY_SIZE);
    psdb__buf_u64(&oc, t->abi_version);
    psdb__buf_u64(&oc, body_size);
    for (size_t g = 0; g < groups && !oc.oom; g++) {
        uint8_t in[4] = {0}, outb[5];
        size_t n = u->code_size - g * 4 < 4 ? u->code_size - g * 4 : 4;
        memcpy(in, u->code + g * 4, n);
        uint64_t x = splitmix64(&state);
        for (int k = 0; k < 4; k++)
            outb[k] = in[k] ^ (uint8_t)(x >> (8 * k));
        outb[4] = (uint8_t)(in[0] + in[1] + in[2] + in[3] + (uint8_t)(x >> 32));
        psdb__buf_append(&oc, outb, sizeof(outb));
    }
    if (is_ps) {
        /* The export patch the seed describes: down-conversions fixed at compile time. */
        for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++) {
            psdb__buf_u32(&oc, u->exports[i].type);
            psdb__buf_u32(&oc, u->exports[i].components);
        }
    }

    psdb__buf_append(&md, "PSMD", 4);
    psdb__buf_u32(&md, METADATA_VERSION);
    psdb__buf_u32(&md, u->kind);
    psdb__buf_u32(&md, 0);
    psdb__buf_append(&md, u->key, PSDB__KEY_SIZE);
    psdb__buf_u64(&md, u->code_size);
    psdb__buf_u64(&md, OBJECT_CODE_HEADER + body_size + patch_size);
    psdb__buf_u64(&md, t->abi_version);
    psdb__buf_u64(&md, t->compiler_version);
    for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++) {
        psdb__buf_u32(&md, is_ps ? u->exports[i].type : 0u);
        psdb__buf_u32(&md, is_ps ? u->exports[i].components : 0u);
    }
    psdb__buf_u32(&md, (uint32_t)family_len);
    psdb__buf_append(&md, t->family, family_len);

    hr = psdb__buf_status(&oc);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb__buf_status(&md);
    if (PSDB_FAILED(hr))
        goto cleanup;
    atomic_store_explicit(&burn_sink, burn(cost_ns(ns_per_kib, u->code_size), state),
                          memory_order_relaxed);
    *object_code = oc;
    *metadata = md;
    memset(&oc, 0, sizeof(oc));
    memset(&md, 0, sizeof(md));
cleanup:
    psdb__buf_free(&oc);
    psdb__buf_free(&md);
    psdb__buf_free(&sb);
    return hr;
}
