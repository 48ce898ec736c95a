/* cmd_install.c - psdb install: what a launcher runs at install time (resolve, download, verify,
 * register as the application's implicit default). */
#include "tool.h"

#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "psdb/client.h"
#include "common/buf.h"
#include "common/hash.h"
#include "vulkan/psdb_vulkan.h"

#define MAX_TARGETS 16
#define MAX_TRUST 16

static const char usage_text[] =
    "usage: psdb install --server URL --exe-path PATH --app NAME --app-version V [--app-id UUID]\n"
    "                    --target FAMILY:ABI_MIN-ABI_MAX[:PROFILE_VERSION] [--target ...]\n"
    "                    (--target auto: one target per distinct Vulkan device identity of this\n"
    "                    machine, as psdb compile --backend vulkan writes it; libpsdb's\n"
    "                    psdb_client_local_targets)\n"
    "                    --trust KEYFILE.pub [--trust ...] [--registry DIR] [--token T]\n"
    "                    [--ca-file FILE] [--pinned-key sha256//BASE64] [--installer NAME]\n"
    "                    [--allow-downgrade] [--limit-rate BYTES[K|M|G]] [--compile-missing]\n"
    "                    [--json]\n"
    "\n"
    "For each target (one per GPU family of the machine): resolves the best PSDB on psdbd,\n"
    "downloads it (resuming an interrupted download), verifies size, SHA-256 and the publisher's\n"
    "signature against the trusted keys, refuses a manifest or file for another application,\n"
    "version, AppId, exe name, family, ABI or profile than asked (whatever its signature),\n"
    "checks it opens for that target, then registers all of them at once as the application's\n"
    "\"default\" component. A PSDB already in the registry's store counts only when its SHA-256\n"
    "matches: a missing or damaged one is downloaded again, also at an unchanged serial.\n"
    "Launchers with different --installer names may install into one registry at once. A lower\n"
    "serial than installed is refused unless --allow-downgrade. Progress: a bar on a terminal,\n"
    "plain lines otherwise, none with --json (one JSON object at the end).\n"
    "Each target gets a line (or a --json object: family, status, serial, sha256, size, code,\n"
    "error), also when the install fails: installed, unchanged (already installed, same\n"
    "digest), failed (its own step failed, or one common to all: the installer name busy, the\n"
    "store, the registration), or skipped (not installed: the install stopped at another\n"
    "target). serial, sha256 and size are null unless installed or unchanged; code and error are\n"
    "null unless not installed (schema/REGISTRY.md). Nothing is registered unless every target\n"
    "is through. Files planted in the registry's store (a link, a FIFO, another user's file)\n"
    "are never followed or written through.\n"
    "An update of an installed PSDB fetches only the values that neither the installed file\n"
    "nor up to 15 other PSDBs of the registry for that family hold (the server's value map and\n"
    "Range requests; schema/VALUEMAP.md), rebuilds the file and verifies it as a full download;\n"
    "it downloads in full whenever that cannot help. The output (and --json: download,\n"
    "bytes_downloaded, bytes_saved, delta_sources, delta_resumed, delta_skipped) says which.\n"
    "--limit-rate caps what the install receives at BYTES per second, all its transfers\n"
    "together, from the first byte (K, M, G: 1024 multiples, as curl).\n"
    "--compile-missing: a target the server has no PSDB for (the miss is recorded as demand,\n"
    "which the compile farm's workers serve) is compiled here when the application version\n"
    "has a published SODB signed by a trusted key: the SODB is downloaded and verified (its\n"
    "SODB statement, size and SHA-256), compiled (a Vulkan device's target with the Vulkan\n"
    "backend on that device, as psdb compile --backend vulkan; any other with the reference\n"
    "compiler at the target's family and ABI_MAX), checked, and registered as built here with\n"
    "the SODB's digest (schema/REGISTRY.md). Nothing signs it; its line says \"built here\"\n"
    "(--json: built_here, sodb_sha256; serial 0). A later install replaces it with a published\n"
    "PSDB once the server has one. A PSDB built here before from the same SODB for the family\n"
    "(its file still of its digest and fitting the target) is kept, not downloaded or compiled\n"
    "again: unchanged for the same exe path, installed (0 bytes downloaded) for another one;\n"
    "a new SODB (another version or serial) is compiled.\n"
    "Proxies come from the environment as with curl (http_proxy, https_proxy, all_proxy,\n"
    "no_proxy). SIGINT or SIGTERM stops the install cleanly: nothing is registered, a partial\n"
    "download or delta update is kept and the next run resumes it; the exit status is then\n"
    "128 + the signal (130, 143). Other exit statuses: 0 done, 1 failed, 2 usage, 3 no PSDB for a "
    "target.\n";

/* The signal that asked to stop (SIGINT, SIGTERM), 0 while none. Only set in the handler: the
 * library polls it through progress_cancel, so nothing but this store runs in signal context. */
static volatile sig_atomic_t g_stop_signal;

static void on_stop_signal(int sig)
{
    g_stop_signal = sig;
}

static int should_stop(const psdb_progress *p, void *ctx)
{
    (void)p;
    (void)ctx;
    return g_stop_signal != 0;
}

/* SA_RESETHAND: a second Ctrl-C kills at once, as a user who presses it twice expects.
 * SA_RESTART: the file and SQLite calls a signal interrupts go on; the stop is taken at the next
 * progress_cancel poll (within about a second). */
static void catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* BYTES with an optional K, M or G suffix (1024 multiples, as curl --limit-rate); not 0. */
static int parse_rate(const char *s, uint64_t *out)
{
    char num[32];
    size_t n = strlen(s);
    uint64_t mult = 1, v = 0;
    if (n == 0 || n >= sizeof(num))
        return -1;
    memcpy(num, s, n + 1);
    switch (num[n - 1]) {
    case 'k':
    case 'K':
        mult = 1024;
        break;
    case 'm':
    case 'M':
        mult = 1024 * 1024;
        break;
    case 'g':
    case 'G':
        mult = 1024 * 1024 * 1024;
        break;
    default:
        break;
    }
    if (mult != 1)
        num[n - 1] = '\0';
    if (psdb__parse_u64(num, &v) != 0 || v == 0 || v > UINT64_MAX / mult)
        return -1;
    *out = v * mult;
    return 0;
}

typedef struct progress_state {
    int tty;
    int json;
    time_t last_line;
} progress_state;

static void on_progress(const psdb_progress *p, void *ctx)
{
    progress_state *s = ctx;
    if (s->json || p->total == 0)
        return;
    unsigned pct = (unsigned)(p->done * 100 / p->total);
    /* --compile-missing's local build counts SODB entries, not bytes. */
    int entries = strcmp(p->what, "compile") == 0;
    if (entries) {
        if (s->tty)
            fprintf(stderr, "\rcompiling here: %llu/%llu entries (%u%%)%s",
                    (unsigned long long)p->done, (unsigned long long)p->total, pct,
                    p->done == p->total ? "\n" : "");
        else if (p->done == p->total)
            fprintf(stderr, "psdb install: compiled %llu entries here\n",
                    (unsigned long long)p->total);
        return;
    }
    if (s->tty) {
        char bar[41];
        unsigned fill = pct * 40 / 100;
        memset(bar, '#', fill);
        memset(bar + fill, '.', 40 - fill);
        bar[40] = '\0';
        fprintf(stderr, "\r[%s] %3u%%  %llu/%llu MiB", bar, pct,
                (unsigned long long)(p->done >> 20), (unsigned long long)(p->total >> 20));
        if (p->done == p->total)
            fputc('\n', stderr);
        return;
    }
    time_t now = time(NULL);
    if (now != s->last_line || p->done == p->total) {
        s->last_line = now;
        tool_printf_safe(stderr, "psdb install: %s %llu/%llu bytes (%u%%)", p->what,
                         (unsigned long long)p->done, (unsigned long long)p->total, pct);
        fputc('\n', stderr);
    }
}

/* FAMILY:ABI_MIN-ABI_MAX[:PROFILE_VERSION]; the family may not contain ':'. */
static int parse_target(const char *s, psdb_precompile_target *t)
{
    char buf[512];
    if (strlen(s) >= sizeof(buf))
        return -1;
    memcpy(buf, s, strlen(s) + 1);
    char *colon = strchr(buf, ':');
    if (!colon || colon == buf || (size_t)(colon - buf) >= sizeof(t->family))
        return -1;
    *colon = '\0';
    char *range = colon + 1;
    char *profile = strchr(range, ':');
    if (profile)
        *profile++ = '\0';
    char *dash = strchr(range, '-');
    if (!dash)
        return -1;
    *dash = '\0';
    memset(t, 0, sizeof(*t));
    memcpy(t->family, buf, (size_t)(colon - buf) + 1);
    if (psdb__parse_u64(range, &t->abi_min) || psdb__parse_u64(dash + 1, &t->abi_max) ||
        t->abi_min > t->abi_max)
        return -1;
    if (profile && psdb__parse_version(profile, &t->profile_version))
        return -1;
    return 0;
}

/* --target auto: libpsdb's psdb_client_local_targets (one target per distinct Vulkan device
 * identity, schema/COMPILER.md section 5), so a launcher needs no family strings and the tool and
 * launchers ask alike. A target already given is not added twice. 0, or 1 after printing why. */
static int auto_targets(psdb_precompile_target *targets, uint32_t *num_targets)
{
    psdb_precompile_target local[MAX_TARGETS];
    uint32_t n = MAX_TARGETS;
    psdb_hr hr = psdb_client_local_targets(local, &n);
    if (hr == PSDB_E_MORE_DATA)
        return tool_fail("install", "--target auto: %u devices, at most %d targets", n,
                         MAX_TARGETS);
    if (PSDB_FAILED(hr))
        return tool_fail("install", "--target auto: %s", psdb_error_last());
    for (uint32_t i = 0; i < n; i++) {
        int dup = 0;
        for (uint32_t j = 0; j < *num_targets; j++)
            dup |= strcmp(targets[j].family, local[i].family) == 0 &&
                   targets[j].abi_min == local[i].abi_min && targets[j].abi_max == local[i].abi_max;
        if (dup)
            continue;
        if (*num_targets == MAX_TARGETS)
            return tool_fail("install", "at most %d targets", MAX_TARGETS);
        targets[(*num_targets)++] = local[i];
    }
    return 0;
}

/* --compile-missing for a Vulkan device's target: the device of this machine whose identity is
 * the target's (what --target auto asked for), compiled as psdb compile --backend vulkan does. */
static psdb_hr compile_vulkan(const char *sodb_path, const psdb_precompile_target *t,
                              const char *psdb_path, void *ctx, char *err, size_t err_size)
{
    (void)ctx;
    for (uint32_t dev = 0; dev < 16; dev++) {
        psdb_precompile_target mine;
        psdb_hr hr = vkbe_device_target(dev, &mine, err, err_size);
        if (hr == PSDB_E_NOTIMPL)
            return hr;
        if (PSDB_FAILED(hr))
            break;
        if (strcmp(mine.family, t->family) != 0 || mine.abi_min < t->abi_min ||
            mine.abi_min > t->abi_max)
            continue;
        err[0] = '\0';
        return vkbe_compile(sodb_path, NULL, dev, psdb_path, NULL, NULL, err, err_size);
    }
    snprintf(err, err_size, "no vulkan device of this machine is %s at an abi of %llu-%llu",
             t->family, (unsigned long long)t->abi_min, (unsigned long long)t->abi_max);
    return PSDB_E_ADAPTER_NOT_FOUND;
}

/* Reads each trusted key file first, so that a wrong one is named with what is wrong with it
 * (missing, empty, truncated, another key type, a private key), not reported later as a signature
 * that does not verify. 0, or 1 after printing why. */
static int check_trusted_keys(const char *const *trust, uint32_t num_trust)
{
    for (uint32_t i = 0; i < num_trust; i++) {
        char why[512];
        psdb_key *key = NULL;
        psdb_hr khr = psdb_key_load_kind(trust[i], PSDB_KEY_PUBLIC, &key, why, sizeof(why));
        psdb_key_release(key);
        if (PSDB_FAILED(khr))
            return tool_fail("install", "--trust %s", why);
    }
    return 0;
}

/* A target's outcome in words (schema/REGISTRY.md, "psdb install --json"): installed and unchanged
 * only for a status that succeeded, skipped for a target the install did not get to finish because
 * it stopped at another one, failed otherwise. */
static const char *outcome(const psdb_install_result *r)
{
    return r->status == PSDB_S_OK      ? "installed"
           : r->status == PSDB_S_FALSE ? "unchanged"
           : r->skipped                ? "skipped"
                                       : "failed";
}

/* Why a target was not installed, one line: the install's error for the target it stopped at (or
 * for every target, when the failure was common to them), the name of that target for the
 * skipped ones. NULL for an installed target. */
static const char *target_error(const psdb_precompile_target *targets,
                                const psdb_install_result *results, uint32_t num_targets,
                                uint32_t i, const psdb_client *client, char *buf, size_t size)
{
    const char *msg = psdb_client_last_error(client);
    if (PSDB_SUCCEEDED(results[i].status))
        return NULL;
    if (!results[i].skipped)
        return *msg ? msg : psdb_hr_str(results[i].status);
    for (uint32_t k = 0; k < num_targets; k++)
        if (PSDB_FAILED(results[k].status) && !results[k].skipped) {
            snprintf(buf, size, "not installed: the install stopped at target %s",
                     targets[k].family);
            return buf;
        }
    return "not installed: the install stopped at another target";
}

/* A JSON string of s, or of fallback when s is not UTF-8 (a message quoting a path's bytes). */
static json_t *json_string_or(const char *s, const char *fallback)
{
    json_t *j = json_string(s);
    return j ? j : json_string(fallback);
}

/* The --json answer: one object with ok, each target's outcome and, on failure, the error. A
 * target not installed has no serial, digest or size (null) and says why in "error". */
static void print_json(const psdb_precompile_target *targets, const psdb_install_result *results,
                       uint32_t num_targets, psdb_hr hr, const psdb_client *client)
{
    json_t *o = json_object(), *arr = json_array();
    for (uint32_t i = 0; o && arr && i < num_targets; i++) {
        const psdb_install_result *r = &results[i];
        int ok = PSDB_SUCCEEDED(r->status);
        char sha[65], why[256];
        const char *err = target_error(targets, results, num_targets, i, client, why, sizeof(why));
        psdb__hex(r->sha256, 32, sha);
        json_t *t =
            json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:o}", "family", targets[i].family, "status",
                      outcome(r), "serial", ok ? json_integer((json_int_t)r->serial) : json_null(),
                      "sha256", ok ? json_string(sha) : json_null(), "size",
                      ok ? json_integer((json_int_t)r->size) : json_null(), "code",
                      ok ? json_null() : json_string(psdb_hr_str(r->status)), "error",
                      err ? json_string_or(err, psdb_hr_str(r->status)) : json_null());
        if (t && ok && r->built_here)
            json_object_set_new(t, "built_here", json_true());
        if (t && ok && memcmp(r->sodb_sha256, (const uint8_t[32]){0}, 32) != 0) {
            char sodb[65];
            psdb__hex(r->sodb_sha256, 32, sodb);
            json_object_set_new(t, "sodb_sha256", json_string(sodb));
        }
        /* How it came: a value-level delta or the whole file, and what that saved. */
        if (t && r->status == PSDB_S_OK && !r->built_here) {
            uint64_t got = r->bytes_downloaded, size = r->size;
            /* "none": the file was already in the registry's store (another application's). */
            json_object_set_new(t, "download",
                                json_string(r->delta ? "delta"
                                            : got    ? "full"
                                                     : "none"));
            json_object_set_new(t, "bytes_downloaded", json_integer((json_int_t)got));
            json_object_set_new(t, "bytes_saved",
                                json_integer(got < size ? (json_int_t)(size - got) : 0));
            if (r->delta) {
                json_object_set_new(t, "delta_sources", json_integer((json_int_t)r->delta_sources));
                json_object_set_new(t, "delta_resumed", json_integer((json_int_t)r->delta_resumed));
            }
            if (r->delta_skipped[0])
                json_object_set_new(t, "delta_skipped", json_string(r->delta_skipped));
        }
        json_array_append_new(arr, t);
    }
    json_object_set_new(o, "ok", json_boolean(PSDB_SUCCEEDED(hr)));
    json_object_set_new(o, "targets", arr);
    if (PSDB_FAILED(hr))
        json_object_set_new(o, "error", json_string(psdb_client_last_error(client)));
    tool_json_dumpf(o, stdout, JSON_COMPACT);
    fputc('\n', stdout);
    json_decref(o);
}

/* The text answer: one line a target, what happened to it (on failure too, so that a target that
 * was not installed is never left to be guessed). */
static void print_text(const psdb_precompile_target *targets, const psdb_install_result *results,
                       uint32_t num_targets, const psdb_client *client)
{
    for (uint32_t i = 0; i < num_targets; i++) {
        const psdb_install_result *r = &results[i];
        char why[256];
        if (PSDB_FAILED(r->status)) {
            tool_printf_safe(
                stdout, "%s: %s (%s)", targets[i].family, outcome(r),
                target_error(targets, results, num_targets, i, client, why, sizeof(why)));
            fputc('\n', stdout);
            continue;
        }
        if (r->built_here) {
            char sodb[65];
            psdb__hex(r->sodb_sha256, 32, sodb);
            if (r->status == PSDB_S_FALSE)
                tool_printf_safe(stdout,
                                 "%s: built here from SODB %.16s, already installed (not "
                                 "compiled again)",
                                 targets[i].family, sodb);
            else
                tool_printf_safe(stdout,
                                 "%s: built here from SODB %.16s and installed (not signed; %llu "
                                 "bytes of SODB downloaded)",
                                 targets[i].family, sodb, (unsigned long long)r->bytes_downloaded);
            fputc('\n', stdout);
            continue;
        }
        tool_printf_safe(stdout, "%s: serial %llu %s", targets[i].family,
                         (unsigned long long)r->serial,
                         r->status == PSDB_S_FALSE ? "already installed" : "installed");
        if (r->status == PSDB_S_OK && r->delta)
            printf(" (delta update: %llu of %llu bytes downloaded, values from %u installed "
                   "PSDB%s)",
                   (unsigned long long)r->bytes_downloaded, (unsigned long long)r->size,
                   (unsigned)r->delta_sources, r->delta_sources == 1 ? "" : "s");
        else if (r->status == PSDB_S_OK && r->delta_skipped[0])
            tool_printf_safe(stdout, " (full download: %s)", r->delta_skipped);
        fputc('\n', stdout);
    }
}

int cmd_install(int argc, char **argv)
{
    static const struct option opts[] = {
        {"server", required_argument, NULL, 's'},
        {"exe-path", required_argument, NULL, 'e'},
        {"app", required_argument, NULL, 'a'},
        {"app-version", required_argument, NULL, 'v'},
        {"app-id", required_argument, NULL, 'i'},
        {"target", required_argument, NULL, 'T'},
        {"trust", required_argument, NULL, 'k'},
        {"registry", required_argument, NULL, 'r'},
        {"token", required_argument, NULL, 't'},
        {"ca-file", required_argument, NULL, 'c'},
        {"pinned-key", required_argument, NULL, 'P'},
        {"installer", required_argument, NULL, 'n'},
        {"allow-downgrade", no_argument, NULL, 'D'},
        {"json", no_argument, NULL, 'j'},
        {"limit-rate", required_argument, NULL, 'L'},
        {"compile-missing", no_argument, NULL, 'M'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *server = NULL, *exe = NULL, *app = NULL, *registry = NULL, *token = NULL;
    const char *ca = NULL, *pinned = NULL, *installer = NULL;
    const char *trust[MAX_TRUST];
    psdb_precompile_target targets[MAX_TARGETS];
    psdb_install_result results[MAX_TARGETS];
    uint32_t num_targets = 0, num_trust = 0;
    uint64_t version = 0, rate = 0;
    uint8_t app_id[16];
    int have_app_id = 0, allow_downgrade = 0, json = 0, compile_missing = 0, c, rc = 1;
    psdb_client *client = NULL;
    progress_state ps = {0};

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            server = optarg;
            break;
        case 'e':
            exe = optarg;
            break;
        case 'a':
            app = optarg;
            break;
        case 'r':
            registry = optarg;
            break;
        case 't':
            token = optarg;
            break;
        case 'c':
            ca = optarg;
            break;
        case 'P':
            pinned = optarg;
            break;
        case 'n':
            installer = optarg;
            break;
        case 'D':
            allow_downgrade = 1;
            break;
        case 'j':
            json = 1;
            break;
        case 'M':
            compile_missing = 1;
            break;
        case 'L':
            if (parse_rate(optarg, &rate) != 0)
                return tool_fail("install",
                                 "--limit-rate: not a positive byte rate (BYTES[K|M|G]): '%s'",
                                 optarg);
            break;
        case 'v':
            if (psdb__parse_version(optarg, &version) != 0 || version == 0)
                return tool_fail("install", "--app-version: not a version: '%s'", optarg);
            break;
        case 'i':
            if (psdb__parse_uuid(optarg, app_id) != 0)
                return tool_fail("install", "--app-id: not a UUID: '%s'", optarg);
            have_app_id = 1;
            break;
        case 'T':
            if (num_targets == MAX_TARGETS)
                return tool_fail("install", "at most %d targets", MAX_TARGETS);
            if (strcmp(optarg, "auto") == 0) {
                if (auto_targets(targets, &num_targets) != 0)
                    return 1;
                break;
            }
            if (parse_target(optarg, &targets[num_targets]) != 0)
                return tool_fail("install",
                                 "--target: '%s' is not FAMILY:ABI_MIN-ABI_MAX[:PROFILE_VERSION]",
                                 optarg);
            num_targets++;
            break;
        case 'k':
            if (num_trust == MAX_TRUST)
                return tool_fail("install", "at most %d trusted keys", MAX_TRUST);
            trust[num_trust++] = optarg;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        default:
            fputs(usage_text, stderr);
            return 2;
        }
    }
    if (!server || !exe || !app || !version || !num_targets || optind != argc)
        return tool_fail("install", "--server, --exe-path, --app, --app-version and --target are "
                                    "required (see --help)");
    if (!num_trust)
        return tool_fail("install", "--trust KEYFILE.pub is required: nothing unsigned installs");
    if (tool_bad_name("install", "--app", app) ||
        tool_bad_name("install", "--installer", installer))
        return 1;
    for (uint32_t i = 0; i < num_targets; i++)
        if (tool_bad_name("install", "--target", targets[i].family))
            return 1;
    if (check_trusted_keys(trust, num_trust) != 0)
        return 1;
    if (!token)
        token = getenv("PSDB_TOKEN");
    ps.tty = isatty(2);
    ps.json = json;
    psdb_client_desc cd = {.server_url = server,
                           .token = token,
                           .ca_file = ca,
                           .pinned_public_key = pinned,
                           .trusted_keys = trust,
                           .num_trusted_keys = num_trust,
                           .progress = on_progress,
                           .progress_cancel = should_stop,
                           .progress_ctx = &ps,
                           .max_recv_bytes_per_second = rate};
    psdb_hr hr = psdb_client_create(&cd, &client);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("install", "client: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    psdb_app_desc ad = {.name = app, .version = version};
    psdb_install_desc d = {.exe_path = exe,
                           .app = &ad,
                           .app_id = have_app_id ? app_id : NULL,
                           .targets = targets,
                           .num_targets = num_targets,
                           .registry_dir = registry,
                           .installer_name = installer,
                           .allow_downgrade = allow_downgrade,
                           .compile_missing = compile_missing,
                           .compile = compile_vulkan};
    catch_stop_signals();
    hr = psdb_client_install(client, &d, results);
    if (json)
        print_json(targets, results, num_targets, hr, client);
    else
        print_text(targets, results, num_targets, client);
    if (hr == PSDB_E_CANCELLED && g_stop_signal) {
        int sig = g_stop_signal;
        tool_fail("install",
                  "interrupted by %s: nothing was registered; a partial download or delta update "
                  "is kept and the next run resumes it",
                  sig == SIGINT ? "SIGINT" : "SIGTERM");
        rc = 128 + sig;
        goto cleanup;
    }
    if (PSDB_FAILED(hr)) {
        const char *msg = psdb_client_last_error(client);
        rc = tool_fail("install", "%s", *msg ? msg : psdb_hr_str(hr));
        if (hr == PSDB_E_NOT_FOUND)
            rc = 3;
        goto cleanup;
    }
    rc = 0;
cleanup:
    psdb_client_release(client);
    return rc;
}
