/* cmd_compile.c - `psdb compile`: the reference compiler from an SODB to a PSDB for one target. */
#include "tool.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/hash.h"
#include "vulkan/psdb_vulkan.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: psdb compile SODB --family F --abi N [--compiler-version V]\n"
        "                    [--profile-version V] [--cost-ns-per-kib C] [--base OLD.psdb]\n"
        "                    [--json] -o OUT.psdb\n"
        "       psdb compile SODB --backend vulkan [--device N] [--base OLD.psdb] [--json]\n"
        "                    -o OUT.psdb\n"
        "\n"
        "Compiles every description of SODB with the reference compiler into a PSDB for one\n"
        "adapter family and ABI version. The PSDB takes the SODB's application identity. Each\n"
        "distinct compile unit (shader stage, pipeline state) becomes an object-code and a\n"
        "metadata value; each description becomes one group. The output is deterministic.\n"
        "\n"
        "  --family F            adapter family (required)\n"
        "  --abi N               ABI version, 1 .. 2^64-2 (required)\n"
        "  --compiler-version V  compiler version, a.b.c.d or a number (default 0)\n"
        "  --profile-version V   application profile version (default 0)\n"
        "  --cost-ns-per-kib C   simulated compile cost per KiB of bytecode in ns (default\n"
        "                        %llu, the library's realistic figure); 0 = free\n"
        "  --json                print the summary as JSON\n"
        "  --backend B           reference (default) or vulkan: replay the SODB's Vulkan\n"
        "                        pipelines on the Vulkan device and store what its driver\n"
        "                        compiled; the target is the device's identity\n"
        "                        (schema/COMPILER.md section 5), so --family/--abi are not given\n"
        "  --device N            Vulkan device index (default 0)\n"
        "  --base OLD.psdb       the PSDB of the previous version: every pipeline (vulkan) or\n"
        "                        compile unit (reference) it holds unchanged is taken from it\n"
        "                        byte for byte, only new and changed ones are compiled (a base\n"
        "                        for another target, device or driver build serves nothing:\n"
        "                        everything is compiled, and the summary says so)\n"
        "  -o, --output OUT      output PSDB (replaced atomically)\n"
        "\n"
        "Numbers are decimal or 0x-hex.\n",
        (unsigned long long)PSDB_COMPILE_NS_PER_KIB_DEFAULT);
}

/* --backend vulkan: the driver's code for every Vulkan entry (vkbe_compile). */
static int compile_vulkan(const char *sodb, const char *base, uint32_t device, const char *out,
                          int json)
{
    vkbe_compile_stats st = {0};
    psdb_file *f = NULL;
    psdb_file_info info = {0};
    char err[512];
    int rc = 1;
    psdb_hr hr = vkbe_compile(sodb, base, device, out, stderr, &st, err, sizeof(err));
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("compile", "%s", err[0] ? err : psdb_hr_str(hr));
        goto cleanup;
    }
    hr = psdb_file_open(out, NULL, &f);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_file_get_info(f, &info);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("compile", "reading back %s: %s", out, psdb_hr_str(hr));
        goto cleanup;
    }
    if (json) {
        json_t *o = json_pack(
            "{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:I, s:s}", "output", out, "family",
            info.target.family, "abi", (json_int_t)info.target.abi_version, "pipelines",
            (json_int_t)st.pipelines, "compute", (json_int_t)st.compute, "graphics",
            (json_int_t)st.graphics, "failed", (json_int_t)st.failed, "code_bytes",
            (json_int_t)st.code_bytes, "seconds", st.seconds, "compiled", (json_int_t)st.compiled,
            "reused", (json_int_t)st.reused, "strategy", st.strategy ? st.strategy : "");
        if (!o || tool_json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
            json_decref(o);
            rc = tool_fail("compile", "cannot print JSON");
            goto cleanup;
        }
        fputc('\n', stdout);
        json_decref(o);
    } else {
        printf("%llu vulkan pipelines (%llu compute, %llu graphics; %llu compiled, %llu taken from "
               "the base), %llu failed, %llu bytes of driver code (%s), %.2f s, target %s abi "
               "%llu -> %s\n",
               (unsigned long long)st.pipelines, (unsigned long long)st.compute,
               (unsigned long long)st.graphics, (unsigned long long)st.compiled,
               (unsigned long long)st.reused, (unsigned long long)st.failed,
               (unsigned long long)st.code_bytes, st.strategy ? st.strategy : "", st.seconds,
               info.target.family, (unsigned long long)info.target.abi_version, out);
    }
    rc = 0;
cleanup:
    psdb_file_release(f);
    return rc;
}

int cmd_compile(int argc, char **argv)
{
    const char *sodb = NULL, *out = NULL, *family = NULL, *base = NULL;
    uint64_t abi = 0, compiler_version = 0, profile_version = 0;
    uint64_t cost = PSDB_COMPILE_NS_PER_KIB_DEFAULT;
    int have_abi = 0, json = 0, rc = 1, vulkan = 0;
    uint64_t device = 0;
    psdb_sodb_compile_stats st = {0};
    psdb_file *f = NULL;
    psdb_file_info info = {0};

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
        if (a[0] != '-' || strcmp(a, "-") == 0) {
            if (sodb) {
                rc = tool_fail("compile", "more than one SODB given ('%s', '%s')", sodb, a);
                goto cleanup;
            }
            sodb = a;
            continue;
        }
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val) {
            rc = tool_fail("compile", "%s needs a value (try --help)", a);
            goto cleanup;
        }
        if (strcmp(a, "--backend") == 0) {
            if (strcmp(val, "vulkan") == 0) {
                vulkan = 1;
            } else if (strcmp(val, "reference") != 0) {
                rc = tool_fail("compile", "unknown --backend '%s' (reference or vulkan)", val);
                goto cleanup;
            }
        } else if (strcmp(a, "--device") == 0) {
            if (psdb__parse_u64(val, &device) != 0 || device > 15) {
                rc = tool_fail("compile", "invalid --device '%s' (0-15)", val);
                goto cleanup;
            }
        } else if (strcmp(a, "--family") == 0) {
            family = val;
        } else if (strcmp(a, "--base") == 0) {
            base = val;
        } else if (strcmp(a, "--abi") == 0) {
            if (psdb__parse_u64(val, &abi) != 0 || abi == 0 || abi == UINT64_MAX) {
                rc = tool_fail("compile", "invalid --abi '%s' (0 and 2^64-1 are reserved)", val);
                goto cleanup;
            }
            have_abi = 1;
        } else if (strcmp(a, "--compiler-version") == 0) {
            if (psdb__parse_version(val, &compiler_version) != 0) {
                rc = tool_fail("compile", "invalid --compiler-version '%s'", val);
                goto cleanup;
            }
        } else if (strcmp(a, "--profile-version") == 0) {
            if (psdb__parse_version(val, &profile_version) != 0) {
                rc = tool_fail("compile", "invalid --profile-version '%s'", val);
                goto cleanup;
            }
        } else if (strcmp(a, "--cost-ns-per-kib") == 0) {
            if (psdb__parse_u64(val, &cost) != 0) {
                rc = tool_fail("compile", "invalid --cost-ns-per-kib '%s'", val);
                goto cleanup;
            }
            /* On the command line 0 means free; the library reads 0 as "default". */
            if (cost == 0)
                cost = PSDB_COMPILE_COST_FREE;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            out = val;
        } else {
            rc = tool_fail("compile", "unknown option '%s' (try --help)", a);
            goto cleanup;
        }
        i++;
    }
    if (vulkan) {
        if (!sodb || !out || family || have_abi) {
            rc =
                tool_fail("compile", "--backend vulkan takes SODB and -o, and no --family or --abi "
                                     "(the device gives the target; try --help)");
            goto cleanup;
        }
        rc = compile_vulkan(sodb, base, (uint32_t)device, out, json);
        goto cleanup;
    }
    if (!sodb || !family || !have_abi || !out) {
        rc = tool_fail("compile", "SODB, --family, --abi and -o are required (try --help)");
        goto cleanup;
    }
    if (!*family || strlen(family) >= PSDB_ADAPTER_FAMILY_MAX) {
        rc = tool_fail("compile", "invalid --family '%s' (1-%d bytes)", family,
                       PSDB_ADAPTER_FAMILY_MAX - 1);
        goto cleanup;
    }
    if (tool_bad_name("compile", "--family", family))
        goto cleanup;

    psdb_sodb_compile_desc cd = {.target = {family, abi, compiler_version, profile_version},
                                 .compile_ns_per_kib = cost,
                                 .base_path = base};
    psdb_hr hr = psdb_sodb_compile(sodb, &cd, out, &st);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("compile", "%s", psdb_error_last());
        goto cleanup;
    }
    hr = psdb_file_open(out, NULL, &f);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_file_get_info(f, &info);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("compile", "reading back %s: %s", out, psdb_hr_str(hr));
        goto cleanup;
    }
    double rate = st.seconds > 0 ? (double)st.pipelines / st.seconds : 0.0;
    if (json) {
        char digest[65];
        psdb__hex(info.content_digest, 32, digest);
        json_t *o = json_pack(
            "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:s, s:s, s:I, s:I, "
            "s:I, s:o}",
            "output", out, "pipelines", (json_int_t)st.pipelines, "compute", (json_int_t)st.compute,
            "graphics", (json_int_t)st.graphics, "state_objects", (json_int_t)st.state_objects,
            "skipped", (json_int_t)st.skipped, "units", (json_int_t)st.units, "units_compiled",
            (json_int_t)st.units_compiled, "values", (json_int_t)info.num_values, "blobs",
            (json_int_t)info.num_blobs, "blob_bytes", (json_int_t)info.blob_bytes, "seconds",
            st.seconds, "pipelines_per_second", rate, "content_digest", digest, "family", family,
            "abi", (json_int_t)abi, "compiled", (json_int_t)st.units_compiled, "reused",
            (json_int_t)st.units_reused, "base_used",
            base ? json_boolean(st.base_used) : json_null());
        if (!o || tool_json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
            json_decref(o);
            rc = tool_fail("compile", "cannot print JSON");
            goto cleanup;
        }
        fputc('\n', stdout);
        json_decref(o);
    } else {
        if (base && !st.base_used)
            printf("base %s does not serve this target (another application, target or a "
                   "damaged file): every unit was compiled\n",
                   base);
        else if (base)
            printf("%llu units taken from the base %s, %llu compiled\n",
                   (unsigned long long)st.units_reused, base,
                   (unsigned long long)st.units_compiled);
        printf("%llu pipelines (%llu compute, %llu graphics, %llu state objects), %llu values, "
               "%llu distinct blobs, %llu bytes, %.2f s, %.0f pipelines/s -> %s\n",
               (unsigned long long)st.pipelines, (unsigned long long)st.compute,
               (unsigned long long)st.graphics, (unsigned long long)st.state_objects,
               (unsigned long long)info.num_values, (unsigned long long)info.num_blobs,
               (unsigned long long)info.blob_bytes, st.seconds, rate, out);
    }
    rc = 0;
cleanup:
    psdb_file_release(f);
    return rc;
}
