/* replay_report.c - psdb replay's counts per kind, its miss reasons per creation, the hit-rate
 * threshold and the JSON and JUnit reports (schema/REPLAY.md).
 *
 * DESIGN: the device statistics say how many creations missed, not which or why. The reasons are
 * rebuilt here from public calls only: the creation info (was a PSDB selected, how many lookups,
 * was it a full hit) and the lookup events of the creation, unit by unit. A unit's lookups start
 * with its object-code size query; a unit whose object code misses has no metadata lookups
 * (schema/MODEL.md F7), so the first failed lookup of a unit is the reason that unit missed. */
#include "replay_report.h"

#include "junit.h"
#include "tool.h"

#include "common/hash.h"
#include "common/parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RATE_DECIMALS_MAX 9u /* den <= 10^9 keeps hits * den inside 64 bits */

const char *replay_kind_name(uint32_t kind)
{
    static const char *const names[REPLAY_KIND_COUNT] = {"compute", "graphics", "state_objects",
                                                         "vulkan_compute", "vulkan_graphics"};
    return kind < REPLAY_KIND_COUNT ? names[kind] : "unknown";
}

_Static_assert(PSDB_SODB_COMPUTE == REPLAY_KIND_COMPUTE + 1 &&
                   PSDB_SODB_GRAPHICS == REPLAY_KIND_GRAPHICS + 1 &&
                   PSDB_SODB_STATE_OBJECT == REPLAY_KIND_STATE_OBJECT + 1 &&
                   PSDB_SODB_VK_COMPUTE == REPLAY_KIND_VK_COMPUTE + 1 &&
                   PSDB_SODB_VK_GRAPHICS == REPLAY_KIND_VK_GRAPHICS + 1,
               "REPLAY_KIND_* follow PSDB_SODB_*");

uint32_t replay_kind_of(uint32_t sodb_kind)
{
    uint32_t kind = sodb_kind - 1u;
    return sodb_kind >= PSDB_SODB_COMPUTE && kind < REPLAY_KIND_COUNT ? kind : REPLAY_KIND_COUNT;
}

const char *replay_miss_name(uint32_t reason)
{
    static const char *const names[REPLAY_MISS_COUNT] = {
        "no_psdb", "not_searched", "lookup_error", "partial_hit", "not_in_psdb", "refused"};
    return reason < REPLAY_MISS_COUNT ? names[reason] : "unknown";
}

/* Whether a backend can give this reason: its reports list these, 0 included. */
static int reason_applies(uint32_t reason, int vulkan)
{
    return vulkan ? reason == REPLAY_MISS_NO_PSDB || reason == REPLAY_MISS_LOOKUP_ERROR ||
                        reason == REPLAY_MISS_NOT_IN_PSDB || reason == REPLAY_MISS_REFUSED
                  : reason != REPLAY_MISS_REFUSED;
}

void replay_report_begin(replay_report *r)
{
    memset(&r->cur, 0, sizeof(r->cur));
}

void replay_report_lookup(const psdb_lookup_event *ev, void *ctx)
{
    replay_report *r = ctx;
    replay_lookups *l = &r->cur;
    if ((ev->value_type == PSDB_VALUE_OBJECT_CODE && ev->query == PSDB_QUERY_SIZE) ||
        l->units == 0) {
        l->units++;
        l->unit_missed = 0;
    }
    if (PSDB_SUCCEEDED(ev->result) || l->unit_missed)
        goto done; /* found, or the unit's reason is already known */
    l->unit_missed = 1;
    if (l->units_missed++ == 0 && ev->key) {
        size_t n =
            ev->key_size < sizeof(l->first_missing) ? ev->key_size : sizeof(l->first_missing);
        memcpy(l->first_missing, ev->key, n);
    }
    if (ev->result != PSDB_E_NOT_FOUND) {
        if (l->errors++ == 0) {
            l->first_error = ev->result;
            l->first_error_type = ev->value_type;
        }
    } else if (ev->value_type == PSDB_VALUE_OBJECT_CODE) {
        l->code_not_found++;
    } else {
        l->meta_not_found++;
    }
done:
    return;
}

void replay_report_skipped(replay_report *r, uint32_t kind)
{
    r->kinds[kind].entries++;
    r->kinds[kind].skipped++;
}

/* Appends formatted text to a fixed message buffer; a message that does not fit is cut. */
static void msg_cat(char *msg, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void msg_cat(char *msg, size_t size, const char *fmt, ...)
{
    size_t len = strlen(msg);
    va_list ap;
    if (len + 1 >= size)
        goto done;
    va_start(ap, fmt);
    vsnprintf(msg + len, size - len, fmt, ap);
    va_end(ap);
done:
    return;
}

/* The reason of one miss and its one-line message. */
static uint32_t classify(const replay_report *r, const psdb_creation_info *info, char *msg,
                         size_t size)
{
    const replay_lookups *l = &r->cur;
    uint32_t reason;
    char hex[65];
    msg[0] = '\0';
    if (info->selection == PSDB_SELECTION_NONE) {
        reason = REPLAY_MISS_NO_PSDB;
        msg_cat(msg, size, "%s", r->no_psdb ? r->no_psdb : "no PSDB selected");
        goto done;
    }
    if (info->lookups == 0 || (l->units_missed == 0 && l->errors == 0)) {
        reason = REPLAY_MISS_NOT_SEARCHED;
        msg_cat(msg, size, "not searched: a PSDB was selected but %u of %u lookups found",
                info->hits, info->lookups);
        goto done;
    }
    if (l->errors)
        reason = REPLAY_MISS_LOOKUP_ERROR;
    else if (l->units_missed < l->units)
        reason = REPLAY_MISS_PARTIAL;
    else
        reason = REPLAY_MISS_NOT_IN_PSDB;
    msg_cat(msg, size, "%s: %u of %u compile units found",
            reason == REPLAY_MISS_LOOKUP_ERROR ? "lookup error"
            : reason == REPLAY_MISS_PARTIAL    ? "partial hit"
                                               : "not in the PSDB",
            l->units - l->units_missed, l->units);
    if (l->code_not_found)
        msg_cat(msg, size, "; object code not found for %u", l->code_not_found);
    if (l->meta_not_found)
        msg_cat(msg, size, "; metadata not found for %u", l->meta_not_found);
    if (l->errors)
        msg_cat(msg, size, "; lookup failed for %u (first: %s: %s)", l->errors,
                l->first_error_type == PSDB_VALUE_OBJECT_CODE ? "object code" : "metadata",
                psdb_hr_str(l->first_error));
    psdb__hex(l->first_missing, sizeof(l->first_missing), hex);
    msg_cat(msg, size, "; first missing unit %s", hex);
done:
    return reason;
}

/* Lists one missed or failed creation, or only counts it past max_cases. */
static psdb_hr add_case(replay_report *r, uint32_t kind, const uint8_t key[32], uint64_t version,
                        psdb_hr error, uint32_t reason, const char *message, double seconds)
{
    psdb_hr hr = PSDB_S_OK;
    char *copy = NULL;
    if (r->num_cases >= r->max_cases) {
        r->not_listed++;
        goto cleanup;
    }
    if (r->num_cases == r->cap_cases) {
        size_t cap = r->cap_cases ? r->cap_cases * 2 : 64;
        if (cap > r->max_cases)
            cap = r->max_cases;
        replay_case *n = realloc(r->cases, cap * sizeof(*n));
        if (!n) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        r->cases = n;
        r->cap_cases = cap;
    }
    copy = psdb__strdup(message);
    if (!copy) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    replay_case *c = &r->cases[r->num_cases++];
    c->kind = kind;
    memcpy(c->key, key, 32);
    c->version = version;
    c->error = error;
    c->reason = reason;
    c->message = copy;
    c->seconds = seconds;
    copy = NULL;
cleanup:
    free(copy);
    return hr;
}

psdb_hr replay_report_created(replay_report *r, uint32_t kind, const uint8_t key[32],
                              uint64_t version, const psdb_creation_info *info, double seconds)
{
    char msg[512];
    psdb_hr hr = PSDB_S_OK;
    replay_counts *c = &r->kinds[kind];
    c->entries++;
    c->created++;
    c->seconds += seconds;
    if (info->psdb_hit) {
        c->hits++;
    } else {
        uint32_t reason = classify(r, info, msg, sizeof(msg));
        c->by_reason[reason]++;
        hr = add_case(r, kind, key, version, PSDB_S_OK, reason, msg, seconds);
    }
    return hr;
}

psdb_hr replay_report_failed(replay_report *r, uint32_t kind, const uint8_t key[32],
                             uint64_t version, psdb_hr hr, const char *what, double seconds)
{
    char msg[512];
    replay_counts *c = &r->kinds[kind];
    c->entries++;
    c->failed++;
    c->seconds += seconds;
    snprintf(msg, sizeof(msg), "%s failed: %s", what, psdb_hr_str(hr));
    return add_case(r, kind, key, version, hr, 0, msg, seconds);
}

psdb_hr replay_report_outcome(replay_report *r, uint32_t kind, const uint8_t key[32],
                              uint64_t version, int created, int hit, uint32_t reason,
                              const char *message, double seconds)
{
    psdb_hr hr = PSDB_S_OK;
    replay_counts *c = &r->kinds[kind];
    c->entries++;
    c->seconds += seconds;
    if (!created) {
        c->failed++;
        hr = add_case(r, kind, key, version, PSDB_E_FAIL, 0, message, seconds);
    } else if (hit) {
        c->created++;
        c->hits++;
    } else {
        c->created++;
        c->by_reason[reason]++;
        hr = add_case(r, kind, key, version, PSDB_S_OK, reason, message, seconds);
    }
    return hr;
}

replay_counts replay_report_total(const replay_report *r)
{
    replay_counts t = {0};
    for (uint32_t k = 0; k < REPLAY_KIND_COUNT; k++) {
        const replay_counts *c = &r->kinds[k];
        t.entries += c->entries;
        t.created += c->created;
        t.hits += c->hits;
        t.failed += c->failed;
        t.skipped += c->skipped;
        t.seconds += c->seconds;
        for (uint32_t m = 0; m < REPLAY_MISS_COUNT; m++)
            t.by_reason[m] += c->by_reason[m];
    }
    return t;
}

void replay_report_free(replay_report *r)
{
    for (size_t i = 0; i < r->num_cases; i++)
        free(r->cases[i].message);
    free(r->cases);
    r->cases = NULL;
    r->num_cases = r->cap_cases = 0;
}

/* ---- the threshold ----------------------------------------------------------------------------
 */

int replay_rate_parse(const char *s, replay_rate *out, char *why, size_t why_size)
{
    int rc = -1;
    size_t len = s ? strlen(s) : 0, i = 0;
    int percent = len > 0 && s[len - 1] == '%';
    size_t end = percent ? len - 1 : len;
    uint64_t whole = 0, frac = 0, scale = 1;
    unsigned decimals = 0, max_decimals = percent ? RATE_DECIMALS_MAX - 2 : RATE_DECIMALS_MAX;
    if (end == 0 || s[0] < '0' || s[0] > '9')
        goto bad_number;
    for (; i < end && s[i] >= '0' && s[i] <= '9'; i++)
        if (whole <= 1000) /* anything above is refused below; no overflow */
            whole = whole * 10 + (uint64_t)(s[i] - '0');
    if (i < end && s[i] == '.') {
        i++;
        if (i == end || s[i] < '0' || s[i] > '9')
            goto bad_number;
        for (; i < end && s[i] >= '0' && s[i] <= '9'; i++) {
            if (++decimals > max_decimals) {
                snprintf(why, why_size, "more than %u decimals", max_decimals);
                goto cleanup;
            }
            frac = frac * 10 + (uint64_t)(s[i] - '0');
            scale *= 10;
        }
    }
    if (i != end)
        goto bad_number;
    uint64_t one = percent ? 100 : 1;
    if (whole > one || (whole == one && frac != 0)) {
        snprintf(why, why_size, "%s",
                 percent ? "above 100%" : "above 1 (a percentage is written with %, as in 95%)");
        goto cleanup;
    }
    out->num = whole * scale + frac;
    out->den = one * scale;
    rc = 0;
    goto cleanup;
bad_number:
    snprintf(why, why_size, "not a fraction in [0, 1] such as 0.95 or a percentage such as 95%%");
cleanup:
    return rc;
}

int replay_rate_met(uint64_t hits, uint64_t created, const replay_rate *threshold)
{
    /* Nothing created is rate 0; otherwise hits / created >= num / den, in integers: hits and
     * created are below 2^32 and den at most 10^9, so neither product leaves 64 bits. */
    return created ? hits * threshold->den >= threshold->num * created : threshold->num == 0;
}

const char *replay_rate_format(const replay_rate *threshold, char *buf, size_t size)
{
    uint64_t whole = threshold->num / threshold->den, frac = threshold->num % threshold->den;
    int digits = 0;
    for (uint64_t d = threshold->den; d > 1; d /= 10)
        digits++;
    while (frac != 0 && frac % 10 == 0) {
        frac /= 10;
        digits--;
    }
    if (frac == 0)
        snprintf(buf, size, "%llu", (unsigned long long)whole);
    else
        snprintf(buf, size, "%llu.%0*llu", (unsigned long long)whole, digits,
                 (unsigned long long)frac);
    return buf;
}

const char *replay_rate_measured(uint64_t hits, uint64_t created, char *buf, size_t size)
{
    uint64_t micro = created ? hits * 1000000u / created : 0;
    snprintf(buf, size, "%llu.%06llu", (unsigned long long)(micro / 1000000u),
             (unsigned long long)(micro % 1000000u));
    return buf;
}

const char *replay_rate_percent(uint64_t hits, uint64_t created, char *buf, size_t size)
{
    uint64_t permille = created ? hits * 1000u / created : 0;
    snprintf(buf, size, "%llu.%llu%%", (unsigned long long)(permille / 10),
             (unsigned long long)(permille % 10));
    return buf;
}

int replay_gate_say(uint64_t hits, uint64_t created, const replay_rate *threshold, int quiet)
{
    char measured[32], min[32];
    int met = replay_rate_met(hits, created, threshold);
    replay_rate_measured(hits, created, measured, sizeof(measured));
    replay_rate_format(threshold, min, sizeof(min));
    if (!met)
        tool_fail("replay",
                  "hit rate %s (%llu of %llu creations were PSDB hits) is below --min-hit-rate %s",
                  measured, (unsigned long long)hits, (unsigned long long)created, min);
    else if (!quiet)
        printf("hit rate %s (%llu of %llu creations were PSDB hits) meets --min-hit-rate %s\n",
               measured, (unsigned long long)hits, (unsigned long long)created, min);
    return met;
}

void replay_report_print(const replay_report *r, FILE *f)
{
    replay_counts total = replay_report_total(r);
    const char *sep = " ";
    fprintf(f, "by kind:");
    for (uint32_t k = 0; k < REPLAY_KIND_COUNT; k++) {
        const replay_counts *c = &r->kinds[k];
        if (!c->entries)
            continue;
        fprintf(f, "%s%s %u of %u PSDB hits", sep, replay_kind_name(k), c->hits, c->created);
        if (c->failed)
            fprintf(f, ", %u failed", c->failed);
        if (c->skipped)
            fprintf(f, ", %u skipped", c->skipped);
        sep = "; ";
    }
    fprintf(f, "%s\n", total.entries == 0 ? " none" : "");
    if (total.created > total.hits) {
        fprintf(f, "missed by reason:");
        sep = " ";
        for (uint32_t m = 0; m < REPLAY_MISS_COUNT; m++)
            if (total.by_reason[m]) {
                fprintf(f, "%s%s %u", sep, replay_miss_name(m), total.by_reason[m]);
                sep = ", ";
            }
        fprintf(f, "\n");
    }
}

/* ---- JSON -------------------------------------------------------------------------------------
 */

static json_t *reasons_json(const uint32_t by_reason[REPLAY_MISS_COUNT], int vulkan)
{
    json_t *o = json_object();
    for (uint32_t m = 0; o && m < REPLAY_MISS_COUNT; m++)
        if (reason_applies(m, vulkan) &&
            json_object_set_new(o, replay_miss_name(m), json_integer(by_reason[m])) != 0) {
            json_decref(o);
            o = NULL;
        }
    return o;
}

static json_t *counts_json(const replay_counts *c, int vulkan)
{
    json_t *o =
        json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:o*, s:o*}", "entries", (json_int_t)c->entries,
                  "created", (json_int_t)c->created, "hits", (json_int_t)c->hits, "psdb_missed",
                  (json_int_t)(c->created - c->hits), "failed", (json_int_t)c->failed, "skipped",
                  (json_int_t)c->skipped, "hit_rate",
                  c->created ? json_real((double)c->hits / (double)c->created) : json_null(),
                  "miss_reasons", reasons_json(c->by_reason, vulkan));
    return o;
}

int replay_report_add_json(const replay_report *r, json_t *o)
{
    int rc = -1;
    json_t *kinds = json_object(), *missed = json_array();
    replay_counts total = replay_report_total(r);
    if (!kinds || !missed)
        goto cleanup;
    for (uint32_t k = 0; k < REPLAY_KIND_COUNT; k++)
        if (json_object_set_new(kinds, replay_kind_name(k), counts_json(&r->kinds[k], r->vulkan)) !=
            0)
            goto cleanup;
    for (size_t i = 0; i < r->num_cases; i++) {
        const replay_case *c = &r->cases[i];
        char hex[65], version[24];
        psdb__hex(c->key, 32, hex);
        snprintf(version, sizeof(version), "%llu", (unsigned long long)c->version);
        json_t *e =
            json_pack("{s:s, s:s, s:s, s:s, s:s}", "kind", replay_kind_name(c->kind), "key", hex,
                      "version", version, "reason",
                      PSDB_FAILED(c->error) ? "creation_failed" : replay_miss_name(c->reason),
                      "message", c->message);
        if (json_array_append_new(missed, e) != 0)
            goto cleanup;
    }
    if (json_object_set_new(o, "kinds", kinds) != 0) {
        kinds = NULL;
        goto cleanup;
    }
    kinds = NULL;
    if (json_object_set_new(o, "miss_reasons", reasons_json(total.by_reason, r->vulkan)) != 0 ||
        json_object_set_new(o, "skipped", json_integer(total.skipped)) != 0)
        goto cleanup;
    rc = json_object_set_new(o, "missed", missed);
    missed = NULL;
    if (rc == 0)
        rc = json_object_set_new(o, "missed_not_listed", json_integer(r->not_listed));
cleanup:
    json_decref(kinds);
    json_decref(missed);
    return rc;
}

/* ---- JUnit ------------------------------------------------------------------------------------
 */

/* <property name=NAME value=VALUE/>, the value escaped. */
static void property(psdb__buf *b, const char *name, const char *value)
{
    junit_appendf(b, "    <property name=\"%s\" value=\"", name);
    junit_escape(b, value);
    junit_appendf(b, "\"/>\n");
}

static void property_u64(psdb__buf *b, const char *name, uint64_t value)
{
    char text[24];
    snprintf(text, sizeof(text), "%llu", (unsigned long long)value);
    property(b, name, text);
}

/* How a kind's test case ends: 'e' error, 'f' failure, 's' skipped, 0 passed. */
static int kind_outcome(const replay_counts *c, const replay_rate *threshold)
{
    int outcome = 0;
    if (c->failed)
        outcome = 'e';
    else if (c->created && !replay_rate_met(c->hits, c->created, threshold))
        outcome = 'f';
    else if (!c->created)
        outcome = 's';
    return outcome;
}

static void kind_case(psdb__buf *b, uint32_t kind, const replay_counts *c,
                      const replay_rate *threshold, int vulkan)
{
    int other_api = vulkan ? kind < REPLAY_KIND_VK_COMPUTE : kind >= REPLAY_KIND_VK_COMPUTE;
    char rate[32], min[32];
    replay_rate_measured(c->hits, c->created, rate, sizeof(rate));
    replay_rate_format(threshold, min, sizeof(min));
    junit_appendf(b, "  <testcase classname=\"psdb.replay.kind\" name=\"%s\" time=\"%.6f\">\n",
                  replay_kind_name(kind), c->seconds);
    switch (kind_outcome(c, threshold)) {
    case 'e':
        junit_appendf(b,
                      "    <error type=\"creation_failed\" message=\"%u of %u %s creations "
                      "failed\"/>\n",
                      c->failed, c->entries - c->skipped, replay_kind_name(kind));
        break;
    case 'f':
        junit_appendf(b,
                      "    <failure type=\"hit_rate\" message=\"%u of %u %s were PSDB hits: hit "
                      "rate %s is below %s\"/>\n",
                      c->hits, c->created, replay_kind_name(kind), rate, min);
        break;
    case 's':
        junit_appendf(b, "    <skipped message=\"%u %s entries not created: %s\"/>\n", c->skipped,
                      replay_kind_name(kind),
                      !other_api ? "state objects built on existing collections cannot be "
                                   "recreated from an SODB"
                      : vulkan   ? "replay --backend vulkan creates Vulkan entries only"
                                 : "replay creates D3D12 entries only (the reference driver)");
        break;
    default:
        break;
    }
    junit_appendf(b,
                  "    <system-out>entries %u, created %u, PSDB hits %u, PSDB missed %u, failed "
                  "%u, skipped %u, hit rate %s",
                  c->entries, c->created, c->hits, c->created - c->hits, c->failed, c->skipped,
                  rate);
    for (uint32_t m = 0; m < REPLAY_MISS_COUNT; m++)
        if (c->by_reason[m])
            junit_appendf(b, ", %s %u", replay_miss_name(m), c->by_reason[m]);
    junit_appendf(b, "</system-out>\n  </testcase>\n");
}

static void missed_case(psdb__buf *b, const replay_case *c)
{
    char hex[65];
    psdb__hex(c->key, 32, hex);
    int failed = PSDB_FAILED(c->error);
    junit_appendf(b,
                  "  <testcase classname=\"psdb.replay.missed.%s\" name=\"%s v%llu\" "
                  "time=\"%.6f\">\n    <%s type=\"%s\" message=\"",
                  replay_kind_name(c->kind), hex, (unsigned long long)c->version, c->seconds,
                  failed ? "error" : "failure",
                  failed ? "creation_failed" : replay_miss_name(c->reason));
    junit_escape(b, c->message);
    junit_appendf(b, "\"/>\n  </testcase>\n");
}

psdb_hr replay_report_junit(const replay_report *r, const replay_junit_run *run, psdb__buf *out)
{
    static const replay_rate every = {1, 1};
    const replay_rate *kind_threshold = run->threshold ? run->threshold : &every;
    replay_counts total = replay_report_total(r);
    uint32_t tests = 0, failures = 0, errors = 0, skipped = 0;
    char rate[32], min[32], version[24], text[160];
    int gate_met = run->threshold ? replay_rate_met(run->hits, run->created, run->threshold) : 1;

    /* The counts first, so the suite's attributes are written once, in order. */
    if (run->threshold) {
        tests++;
        failures += !gate_met;
    }
    for (uint32_t k = 0; k < REPLAY_KIND_COUNT; k++) {
        if (!r->kinds[k].entries)
            continue;
        tests++;
        int o = kind_outcome(&r->kinds[k], kind_threshold);
        errors += o == 'e';
        failures += o == 'f';
        skipped += o == 's';
    }
    for (size_t i = 0; i < r->num_cases; i++) {
        tests++;
        if (PSDB_FAILED(r->cases[i].error))
            errors++;
        else
            failures++;
    }
    if (r->not_listed) {
        tests++;
        failures++;
    }

    replay_rate_measured(run->hits, run->created, rate, sizeof(rate));
    psdb__format_version(run->app_version, version, sizeof(version));
    junit_appendf(out,
                  "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"psdb replay ");
    junit_escape(out, run->app_name);
    junit_appendf(out, " %s on ", version);
    if (run->device_name) {
        junit_escape(out, run->device_name);
        junit_appendf(out, " (");
        junit_escape(out, run->family);
        junit_appendf(out, " ABI %llu)", (unsigned long long)run->abi_min);
    } else {
        junit_escape(out, run->family);
        junit_appendf(out, " ABI %llu-%llu", (unsigned long long)run->abi_min,
                      (unsigned long long)run->abi_max);
    }
    junit_appendf(out,
                  "\" tests=\"%u\" failures=\"%u\" errors=\"%u\" skipped=\"%u\" time=\"%.6f\" "
                  "timestamp=\"%s\">\n  <properties>\n",
                  tests, failures, errors, skipped, run->seconds, run->timestamp);
    property(out, "sodb", run->sodb);
    property(out, "application", run->app_name);
    property(out, "application_version", version);
    if (run->device_name) {
        property(out, "backend", "vulkan");
        property(out, "device", run->device_name);
        property(out, "family", run->family);
        property_u64(out, "abi", run->abi_min);
    } else {
        property(out, "family", run->family);
        property_u64(out, "abi_min", run->abi_min);
        property_u64(out, "abi_max", run->abi_max);
        property(out, "profile_version",
                 psdb__format_version(run->profile_version, version, sizeof(version)));
    }
    if (run->psdb_path)
        property(out, "psdb", run->psdb_path);
    if (run->exe_path)
        property(out, "exe_path", run->exe_path);
    property_u64(out, "entries", total.entries);
    property_u64(out, "created", run->created);
    property_u64(out, "hits", run->hits);
    property_u64(out, "psdb_missed", run->created - run->hits);
    property_u64(out, "failed", total.failed);
    property_u64(out, "skipped", total.skipped);
    property(out, "hit_rate", rate);
    if (run->threshold)
        property(out, "min_hit_rate", replay_rate_format(run->threshold, min, sizeof(min)));
    property_u64(out, "listed", r->num_cases);
    property_u64(out, "not_listed", r->not_listed);
    junit_appendf(out, "  </properties>\n");

    if (run->threshold) {
        replay_rate_format(run->threshold, min, sizeof(min));
        junit_appendf(out,
                      "  <testcase classname=\"psdb.replay\" name=\"hit rate &gt;= %s\" "
                      "time=\"%.6f\">\n",
                      min, run->seconds);
        if (!gate_met)
            junit_appendf(out,
                          "    <failure type=\"hit_rate\" message=\"hit rate %s (%llu of %llu "
                          "creations were PSDB hits) is below the minimum %s\"/>\n",
                          rate, (unsigned long long)run->hits, (unsigned long long)run->created,
                          min);
        junit_appendf(out, "  </testcase>\n");
    }
    for (uint32_t k = 0; k < REPLAY_KIND_COUNT; k++)
        if (r->kinds[k].entries)
            kind_case(out, k, &r->kinds[k], kind_threshold, r->vulkan);
    for (size_t i = 0; i < r->num_cases; i++)
        missed_case(out, &r->cases[i]);
    if (r->not_listed) {
        snprintf(text, sizeof(text),
                 "%u more missed or failed creations are not listed: the report lists the first "
                 "%zu (--max-listed)",
                 r->not_listed, r->max_cases);
        junit_appendf(out,
                      "  <testcase classname=\"psdb.replay.missed\" name=\"%u more not listed\" "
                      "time=\"0\">\n    <failure type=\"not_listed\" message=\"%s\"/>\n"
                      "  </testcase>\n",
                      r->not_listed, text);
    }
    junit_appendf(out, "</testsuite>\n");
    return psdb__buf_status(out);
}
