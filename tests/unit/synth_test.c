/* synth_test.c - the synthetic corpus and its patches (version N+1 with a chosen fraction of the
 * pipelines changed): deterministic, the untouched entries byte-identical, the changed share as
 * asked. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build/synth.h"
#include "psdb/file.h"

#define N 1000

typedef struct keys {
    size_t n, cap;
    uint32_t *kind;
    uint8_t (*key)[32];
} keys;

static int collect(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                   size_t size, void *ctx)
{
    keys *k = ctx;
    (void)version;
    (void)desc;
    (void)size;
    if (k->n == k->cap) {
        k->cap = k->cap ? k->cap * 2 : 1024;
        k->kind = realloc(k->kind, k->cap * sizeof(*k->kind));
        k->key = realloc(k->key, k->cap * sizeof(*k->key));
        ck_assert(k->kind && k->key);
    }
    k->kind[k->n] = kind;
    memcpy(k->key[k->n], key, 32);
    k->n++;
    return 0;
}

static keys read_keys(const char *path)
{
    keys k = {0};
    psdb_sodb *s = NULL;
    ck_assert_hr(psdb_sodb_open(path, &s), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_foreach(s, collect, &k), PSDB_S_OK);
    psdb_sodb_release(s);
    return k;
}

static int has(const keys *k, const uint8_t key[32])
{
    for (size_t i = 0; i < k->n; i++)
        if (memcmp(k->key[i], key, 32) == 0)
            return 1;
    return 0;
}

/* Entries of a that b lacks. */
static size_t missing_from(const keys *a, const keys *b)
{
    size_t m = 0;
    for (size_t i = 0; i < a->n; i++)
        m += !has(b, a->key[i]);
    return m;
}

static void free_keys(keys *k)
{
    free(k->kind);
    free(k->key);
}

static char *write_corpus(const char *dir, const char *name, uint64_t patch, uint32_t permille,
                          uint64_t state_objects)
{
    char *path = tu_path(dir, name);
    psdb__synth_params p = {.app_name = "Patchy",
                            .app_version = PSDB_VERSION(1, 0, 0, 0),
                            .pipelines = N,
                            .seed = 7,
                            .variants = 4,
                            .compute_permille = 200,
                            .state_objects = state_objects,
                            .patch = patch,
                            .changed_permille = permille};
    ck_assert_hr(psdb__synth_write(&p, path), PSDB_S_OK);
    return path;
}

START_TEST(test_synth__patch_is_deterministic_and_keeps_untouched_entries)
{
    char *dir = tu_mkdtemp();
    char *base = write_corpus(dir, "n.sodb", 0, 0, 8);
    char *p1 = write_corpus(dir, "p1.sodb", 1, 50, 8);
    char *p1b = write_corpus(dir, "p1b.sodb", 1, 50, 8);
    char *p2 = write_corpus(dir, "p2.sodb", 2, 50, 8);
    char *p0 = write_corpus(dir, "p0.sodb", 1, 0, 8);
    size_t la = 0, lb = 0;
    char *a = tu_read_file(p1, &la), *b = tu_read_file(p1b, &lb);
    ck_assert(a && b);
    ck_assert_msg(la == lb && memcmp(a, b, la) == 0, "the same patch differs between two runs");
    free(a);
    free(b);
    keys kn = read_keys(base), k1 = read_keys(p1), k2 = read_keys(p2), k0 = read_keys(p0);
    /* A patch touching nothing is the corpus, entry for entry. */
    ck_assert_uint_eq(k0.n, kn.n);
    ck_assert_uint_eq(missing_from(&kn, &k0), 0);
    /* Every state object is the corpus's. */
    for (size_t i = 0; i < kn.n; i++)
        if (kn.kind[i] == PSDB_SODB_STATE_OBJECT)
            ck_assert_msg(has(&k1, kn.key[i]), "state object %zu changed", i);
    /* Another patch touches other pipelines. */
    size_t differ = missing_from(&k1, &k2);
    ck_assert_msg(differ > 0, "patches 1 and 2 are the same");
    /* Patch entries keep the corpus order: untouched entries of N appear in N+1 in N's order. */
    size_t j = 0;
    for (size_t i = 0; i < kn.n; i++) {
        if (!has(&k1, kn.key[i]))
            continue;
        while (j < k1.n && memcmp(k1.key[j], kn.key[i], 32) != 0)
            j++;
        ck_assert_msg(j < k1.n, "entry %zu of N is out of order in N+1", i);
    }
    free_keys(&kn);
    free_keys(&k1);
    free_keys(&k2);
    free_keys(&k0);
    free(base);
    free(p1);
    free(p1b);
    free(p2);
    free(p0);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_synth__patch_changes_the_fraction_asked_with_edits_additions_and_removals)
{
    static const uint32_t permille[] = {50, 300};
    char *dir = tu_mkdtemp();
    char *base = write_corpus(dir, "n.sodb", 0, 0, 0);
    keys kn = read_keys(base);
    ck_assert_uint_eq(kn.n, N);
    for (size_t t = 0; t < sizeof(permille) / sizeof(permille[0]); t++) {
        char name[32];
        snprintf(name, sizeof(name), "p%u.sodb", permille[t]);
        char *path = write_corpus(dir, name, 1, permille[t], 0);
        keys kp = read_keys(path);
        size_t added = missing_from(&kp, &kn), removed = missing_from(&kn, &kp);
        double want = (double)N * permille[t] / 1000.0;
        /* New entries: the edited and the replacing ones, one per touched pipeline; gone: the
         * same number. A binomial draw: within 30% of the expectation at these sizes. */
        ck_assert_msg(added > want * 0.7 && added < want * 1.3, "%u permille: %zu new of %d",
                      permille[t], added, N);
        ck_assert_uint_eq(added, removed);
        ck_assert_uint_eq(kp.n, kn.n);
        /* Edits take their pipeline's place; new pipelines come after the corpus's: about half
         * of the new entries each. */
        size_t last_kept = 0, edits = 0;
        for (size_t i = 0; i < kp.n; i++)
            if (has(&kn, kp.key[i]))
                last_kept = i;
        for (size_t i = 0; i < last_kept; i++)
            edits += !has(&kn, kp.key[i]);
        size_t appended = added - edits;
        ck_assert_msg(edits > added / 4 && appended > added / 4,
                      "%u permille: %zu edited, %zu appended", permille[t], edits, appended);
        free_keys(&kp);
        free(path);
    }
    free_keys(&kn);
    free(base);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_synth__patch_arguments_checked)
{
    char *dir = tu_mkdtemp();
    char *path = tu_path(dir, "x.sodb");
    psdb__synth_params p = {
        .app_name = "X", .app_version = 1, .pipelines = 10, .variants = 4, .changed_permille = 10};
    ck_assert_hr(psdb__synth_write(&p, path), PSDB_E_INVALIDARG); /* a fraction without a patch */
    p.patch = 1;
    p.changed_permille = 1001;
    ck_assert_hr(psdb__synth_write(&p, path), PSDB_E_INVALIDARG);
    p.changed_permille = 1000;
    ck_assert_hr(psdb__synth_write(&p, path), PSDB_S_OK); /* everything touched */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s synth --app X --app-version 1 --pipelines 10 --patch 2 -o %s",
             PSDB_TOOL, path);
    ck_assert_int_eq(tu_run(cmd, NULL), 1); /* --patch without --changed */
    snprintf(cmd, sizeof(cmd),
             "%s synth --app X --app-version 1 --pipelines 10 --changed 5%% -o %s", PSDB_TOOL,
             path);
    ck_assert_int_eq(tu_run(cmd, NULL), 0);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("synth");
    TCase *tc = tcase_create("synth");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_synth__patch_is_deterministic_and_keeps_untouched_entries);
    tcase_add_test(tc,
                   test_synth__patch_changes_the_fraction_asked_with_edits_additions_and_removals);
    tcase_add_test(tc, test_synth__patch_arguments_checked);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
