/* replay_report.h - what psdb replay measures beyond the device statistics: counts per SODB kind,
 * each missed or failed creation with why it missed, the hit-rate threshold, and the JSON and JUnit
 * reports made of them. */
#ifndef PSDB_TOOL_REPLAY_REPORT_H
#define PSDB_TOOL_REPLAY_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "psdb/psdb.h"

#include "common/buf.h"

/* The SODB kinds (PSDB_SODB_* less one), in report order. */
enum {
    REPLAY_KIND_COMPUTE,
    REPLAY_KIND_GRAPHICS,
    REPLAY_KIND_STATE_OBJECT,
    REPLAY_KIND_VK_COMPUTE,
    REPLAY_KIND_VK_GRAPHICS,
    REPLAY_KIND_COUNT
};

/* Why a created object was not a PSDB hit: exactly one per missed creation, the first that
 * applies in this order. --backend vulkan gives no_psdb, lookup_error, not_in_psdb and refused
 * (schema/REPLAY.md section 5); the D3D12 replay the others. */
enum {
    REPLAY_MISS_NO_PSDB,      /* no PSDB selected (nothing registered, no --psdb) */
    REPLAY_MISS_NOT_SEARCHED, /* a PSDB was selected but not searched (lookups disabled) */
    REPLAY_MISS_LOOKUP_ERROR, /* a lookup failed with an error other than not found */
    REPLAY_MISS_PARTIAL,      /* some compile units found, some not */
    REPLAY_MISS_NOT_IN_PSDB,  /* none of the compile units found */
    REPLAY_MISS_REFUSED,      /* Vulkan: the PSDB's data for it, or the whole PSDB, was refused */
    REPLAY_MISS_COUNT
};

/* "compute", "graphics", "state_objects", "vulkan_compute", "vulkan_graphics" (psdb inspect's
 * names). */
const char *replay_kind_name(uint32_t kind);
/* REPLAY_KIND_* of a PSDB_SODB_* value, or REPLAY_KIND_COUNT for another value. */
uint32_t replay_kind_of(uint32_t sodb_kind);
/* "no_psdb", "not_searched", "lookup_error", "partial_hit", "not_in_psdb", "refused". */
const char *replay_miss_name(uint32_t reason);

typedef struct replay_counts {
    uint32_t entries; /* SODB entries of the kind */
    uint32_t created; /* created objects (the device statistics' num_created) */
    uint32_t hits;    /* created objects that were full PSDB hits */
    uint32_t failed;  /* creations that returned an error */
    uint32_t skipped; /* entries replay cannot create (the other API's; state objects on
                         collections) */
    uint32_t by_reason[REPLAY_MISS_COUNT]; /* created - hits, by reason */
    double seconds;                        /* time spent in the kind's creations */
} replay_counts;

/* One missed or failed creation, as the reports list it. */
typedef struct replay_case {
    uint32_t kind; /* REPLAY_KIND_* */
    uint8_t key[32];
    uint64_t version;
    psdb_hr error;   /* a failed creation's status; PSDB_S_OK for a miss */
    uint32_t reason; /* a miss's REPLAY_MISS_* */
    char *message;   /* one line: the reason(s) */
    double seconds;
} replay_case;

/* What the lookup events of the creation in progress found, unit by unit (a unit starts with its
 * object-code size query). */
typedef struct replay_lookups {
    uint32_t units, units_missed, code_not_found, meta_not_found, errors;
    int unit_missed; /* the current unit already counted as missed */
    uint8_t first_missing[32];
    psdb_hr first_error;
    uint32_t first_error_type; /* PSDB_VALUE_* */
} replay_lookups;

typedef struct replay_report {
    replay_counts kinds[REPLAY_KIND_COUNT];
    replay_case *cases;
    size_t num_cases, cap_cases;
    size_t max_cases;    /* missed or failed creations listed one by one */
    uint32_t not_listed; /* missed or failed creations beyond max_cases */
    const char *no_psdb; /* the message of REPLAY_MISS_NO_PSDB (static or the caller's) */
    replay_lookups cur;  /* the creation in progress */
    int vulkan; /* --backend vulkan: Vulkan entries are created, D3D12 ones skipped, and the
                   reasons are the Vulkan ones */
} replay_report;

/* Lookup callback (psdb_device_set_lookup_callback) with ctx = the report. Replay creates one
 * object at a time on one thread and the device calls back on the creating thread during the
 * creation, so every event between replay_report_begin and replay_report_created is that
 * creation's. */
void replay_report_lookup(const psdb_lookup_event *ev, void *ctx);
/* Forgets the lookups seen so far: call before each creation. */
void replay_report_begin(replay_report *r);
/* Counts one SODB entry of kind (REPLAY_KIND_*) that was not created (skipped). */
void replay_report_skipped(replay_report *r, uint32_t kind);
/* Counts one created object of kind with its creation info: a hit, or a miss classified from
 * info and the lookups since replay_report_begin. Misses beyond max_cases are only counted.
 * PSDB_S_OK, or PSDB_E_OUTOFMEMORY. */
psdb_hr replay_report_created(replay_report *r, uint32_t kind, const uint8_t key[32],
                              uint64_t version, const psdb_creation_info *info, double seconds);
/* Counts one entry of kind whose creation failed with hr at step what ("decode", "creation"). */
psdb_hr replay_report_failed(replay_report *r, uint32_t kind, const uint8_t key[32],
                             uint64_t version, psdb_hr hr, const char *what, double seconds);
/* Counts one entry whose outcome its backend decided itself (--backend vulkan): created, a hit or
 * a miss for reason (REPLAY_MISS_*) with its one-line message; not created, a failed creation
 * whose message says why. Misses and failures beyond max_cases are only counted. PSDB_S_OK, or
 * PSDB_E_OUTOFMEMORY. */
psdb_hr replay_report_outcome(replay_report *r, uint32_t kind, const uint8_t key[32],
                              uint64_t version, int created, int hit, uint32_t reason,
                              const char *message, double seconds);
/* Sums of every kind. */
replay_counts replay_report_total(const replay_report *r);
void replay_report_free(replay_report *r);

/* A hit-rate threshold, exactly num / den (den a power of ten, num <= den). */
typedef struct replay_rate {
    uint64_t num, den;
} replay_rate;

/* Parses --min-hit-rate: a fraction "D[.D...]" in [0, 1] or a percentage "D[.D...]%" in
 * [0%, 100%], at most 9 decimals (7 for a percentage), nothing else (no sign, space, exponent,
 * hex, inf or nan). 0 and *out set, or -1 with the reason in why. */
int replay_rate_parse(const char *s, replay_rate *out, char *why, size_t why_size);
/* hits / created >= threshold, exactly (integers); a replay that created nothing has rate 0. */
int replay_rate_met(uint64_t hits, uint64_t created, const replay_rate *threshold);
/* The threshold as a decimal fraction without trailing zeros ("0.95", "1", "0"). */
const char *replay_rate_format(const replay_rate *threshold, char *buf, size_t size);
/* hits / created with 6 decimals, cut (never rounded up: 999999 of 1000000 is not "1.000000"). */
const char *replay_rate_measured(uint64_t hits, uint64_t created, char *buf, size_t size);
/* hits / created as a percentage with one decimal, cut the same way: "100.0%" means every
 * creation hit. */
const char *replay_rate_percent(uint64_t hits, uint64_t created, char *buf, size_t size);
/* Says the gate's outcome (schema/REPLAY.md section 2): met, "hit rate H (h of c creations were
 * PSDB hits) meets --min-hit-rate R" on stdout unless quiet (JSON output); below, "psdb replay:
 * hit rate ... is below --min-hit-rate R" on stderr. Returns whether it is met. */
int replay_gate_say(uint64_t hits, uint64_t created, const replay_rate *threshold, int quiet);
/* The text output's lines of the counts: "by kind: ..." (each kind with entries: its hits of its
 * creations, failed and skipped when any), then "missed by reason: ..." when something missed. */
void replay_report_print(const replay_report *r, FILE *f);

/* The per-kind counts, the miss reasons (those of the report's backend) and the listed cases as
 * JSON members added to o: "kinds", "miss_reasons", "skipped", "missed" (array),
 * "missed_not_listed". 0, or -1 out of memory. */
int replay_report_add_json(const replay_report *r, json_t *o);

/* The run a JUnit report describes. */
typedef struct replay_junit_run {
    const char *sodb, *app_name, *family, *exe_path, *psdb_path;
    /* --backend vulkan: the device replayed on; family is its target and abi_min its ABI. NULL
     * for the D3D12 replay's adapter (family, ABI range, profile version). */
    const char *device_name;
    uint64_t app_version, abi_min, abi_max, profile_version;
    uint64_t created, hits;       /* the device statistics (the gate's figures) */
    const replay_rate *threshold; /* NULL without --min-hit-rate */
    double seconds;
    const char *timestamp; /* ISO 8601, UTC */
} replay_junit_run;

/* The JUnit XML document (schema/REPLAY.md, "JUnit report") into out. PSDB_S_OK or
 * PSDB_E_OUTOFMEMORY. */
psdb_hr replay_report_junit(const replay_report *r, const replay_junit_run *run, psdb__buf *out);

#endif
