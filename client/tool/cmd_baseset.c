/* cmd_baseset.c - `psdb baseset`: packages an SODB as base PSOs in a pipeline library plus
 * derivation records for every other PSO (seed 003, "serialized + derived together"). */
#include "tool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "build/baseset.h"
#include "common/buf.h"
#include "common/hash.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: psdb baseset SODB --vendor-id V --device-id D --family F --abi N\n"
            "                    [--compiler-version V] [--driver-build B] [--json]\n"
            "                    -o BASES.plib --records RECORDS.pdrv\n"
            "\n"
            "Reduces the pipelines of SODB to a base set: graphics pipelines are grouped by\n"
            "what a derived PSO cannot change (root signature, input layout, shader stages,\n"
            "stream output, render targets and the other non-overridable state, and the\n"
            "shader exports); the first of each group and every compute pipeline are compiled\n"
            "and stored in a pipeline library, named by the hex of their SODB object key. Every\n"
            "other graphics pipeline becomes a derivation record: its base and the depth-stencil,\n"
            "rasterizer, blend, sample-mask and shader-limit states that differ from the base's.\n"
            "A game loads the bases from the library and derives the rest. The library is valid\n"
            "for the adapter and driver given here (schema/PIPELINE_LIBRARY.md).\n"
            "\n"
            "  --vendor-id V, --device-id D  adapter ids (required)\n"
            "  --family F                    adapter family (required)\n"
            "  --abi N                       ABI version, 1 .. 2^64-2 (required)\n"
            "  --compiler-version V          compiler version (default 0)\n"
            "  --driver-build B              driver build id (default 0)\n"
            "  --json                        print the summary as JSON\n"
            "  -o, --output BASES.plib       the pipeline library of the bases (replaced)\n"
            "  --records RECORDS.pdrv        the derivation records (replaced)\n");
}

/* Writes a file through a temporary sibling and a rename, so a failure leaves no partial file. */
static int write_file(const char *path, const psdb__buf *b)
{
    int rc = -1;
    size_t n = strlen(path) + 5;
    char *tmp = malloc(n);
    FILE *f = NULL;
    if (!tmp)
        goto cleanup;
    snprintf(tmp, n, "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (!f)
        goto cleanup;
    if (fwrite(b->data, 1, b->len, f) != b->len || fflush(f) != 0) {
        fclose(f);
        f = NULL;
        remove(tmp);
        goto cleanup;
    }
    if (fclose(f) != 0) {
        f = NULL;
        remove(tmp);
        goto cleanup;
    }
    f = NULL;
    if (rename(tmp, path) != 0) {
        remove(tmp);
        goto cleanup;
    }
    rc = 0;
cleanup:
    free(tmp);
    return rc;
}

int cmd_baseset(int argc, char **argv)
{
    const char *sodb = NULL, *out = NULL, *records_path = NULL, *family = NULL;
    uint64_t vendor = 0, device = 0, abi = 0, compiler_version = 0, driver_build = 0;
    int have_vendor = 0, have_device = 0, have_abi = 0, json = 0, rc = 1;
    psdb_device *dev = NULL;
    psdb__buf lib = {0}, recs = {0};
    psdb__baseset_stats st = {0};

    if (tool_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        }
        if (a[0] != '-') {
            if (sodb) {
                rc = tool_fail("baseset", "more than one SODB given ('%s', '%s')", sodb, a);
                goto cleanup;
            }
            sodb = a;
            continue;
        }
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val) {
            rc = tool_fail("baseset", "%s needs a value (try --help)", a);
            goto cleanup;
        }
        int bad = 0;
        if (strcmp(a, "--vendor-id") == 0) {
            bad = psdb__parse_u64(val, &vendor) != 0 || vendor > UINT32_MAX;
            have_vendor = 1;
        } else if (strcmp(a, "--device-id") == 0) {
            bad = psdb__parse_u64(val, &device) != 0 || device > UINT32_MAX;
            have_device = 1;
        } else if (strcmp(a, "--family") == 0) {
            family = val;
        } else if (strcmp(a, "--abi") == 0) {
            bad = psdb__parse_u64(val, &abi) != 0 || abi == 0 || abi == UINT64_MAX;
            have_abi = 1;
        } else if (strcmp(a, "--compiler-version") == 0) {
            bad = psdb__parse_version(val, &compiler_version) != 0;
        } else if (strcmp(a, "--driver-build") == 0) {
            bad = psdb__parse_u64(val, &driver_build) != 0;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            out = val;
        } else if (strcmp(a, "--records") == 0) {
            records_path = val;
        } else {
            rc = tool_fail("baseset", "unknown option '%s' (try --help)", a);
            goto cleanup;
        }
        if (bad) {
            rc = tool_fail("baseset", "invalid %s '%s'", a, val);
            goto cleanup;
        }
        i++;
    }
    if (!sodb || !have_vendor || !have_device || !family || !have_abi || !out || !records_path) {
        rc = tool_fail("baseset", "SODB, --vendor-id, --device-id, --family, --abi, -o and "
                                  "--records are required (try --help)");
        goto cleanup;
    }
    if (!*family || strlen(family) >= PSDB_ADAPTER_FAMILY_MAX) {
        rc = tool_fail("baseset", "invalid --family '%s' (1-%d bytes)", family,
                       PSDB_ADAPTER_FAMILY_MAX - 1);
        goto cleanup;
    }
    /* The bases are compiled by the reference compiler for this adapter; the simulated compile
     * cost is off (it models a game's wait, not a build step's). */
    psdb_device_desc dd = {.adapter = {.vendor_id = (uint32_t)vendor,
                                       .device_id = (uint32_t)device,
                                       .family = family,
                                       .abi_min = abi,
                                       .abi_max = abi,
                                       .compiler_version = compiler_version,
                                       .driver_build = driver_build},
                           .flags = PSDB_DEVICE_FLAG_TOOLS,
                           .compile_ns_per_kib = UINT64_MAX}; /* no simulated cost */
    psdb_hr hr = psdb_device_create(&dd, &dev);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("baseset", "creating the device: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    hr = psdb__baseset_build(dev, sodb, &lib, &recs, &st);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("baseset", "%s: %s", sodb, psdb_hr_str(hr));
        goto cleanup;
    }
    if (write_file(out, &lib) != 0) {
        rc = tool_fail("baseset", "writing %s: %s", out, strerror(errno));
        goto cleanup;
    }
    if (write_file(records_path, &recs) != 0) {
        rc = tool_fail("baseset", "writing %s: %s", records_path, strerror(errno));
        goto cleanup;
    }
    if (json) {
        json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:s}", "entries",
                              (json_int_t)st.entries, "compute", (json_int_t)st.compute, "graphics",
                              (json_int_t)st.graphics, "bases", (json_int_t)st.bases, "derived",
                              (json_int_t)st.derived, "skipped", (json_int_t)st.skipped,
                              "library_bytes", (json_int_t)lib.len, "records_bytes",
                              (json_int_t)recs.len, "library", out, "records", records_path);
        if (!o || tool_json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
            json_decref(o);
            rc = tool_fail("baseset", "cannot print JSON");
            goto cleanup;
        }
        fputc('\n', stdout);
        json_decref(o);
    } else {
        tool_printf_safe(stdout,
                         "%llu entries: %llu compute and %llu graphics bases stored (%zu bytes -> "
                         "%s), %llu derivation records (%zu bytes -> %s), %llu skipped",
                         (unsigned long long)st.entries, (unsigned long long)st.compute,
                         (unsigned long long)st.bases, lib.len, out, (unsigned long long)st.derived,
                         recs.len, records_path, (unsigned long long)st.skipped);
        fputc('\n', stdout);
    }
    rc = 0;
cleanup:
    psdb__buf_free(&lib);
    psdb__buf_free(&recs);
    psdb_device_release(dev);
    return rc;
}
