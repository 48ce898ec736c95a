/* valuemap_test.c - the byte ranges of a PSDB that hold each value: read back, they are exactly
 * the value's bytes, whatever its size (in the cell, spilling to one or many overflow pages);
 * damaged files are refused without reading outside a page. */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/hash.h"
#include "format/psdb_valuemap.h"

static const size_t k_sizes[] = {1,    17,   400,  1000, 3000,  4061,   4062,
                                 4095, 5000, 8188, 8189, 65536, 200000, 1u << 20};
#define NUM_VALUES (sizeof(k_sizes) / sizeof(k_sizes[0]))

typedef struct seen {
    int fd;
    size_t n;
    uint8_t sha[NUM_VALUES][32];
    int matched[NUM_VALUES];
} seen;

static int on_value(const uint8_t sha256[32], uint64_t size, const psdb__byte_range *r, size_t nr,
                    void *ctx)
{
    seen *s = ctx;
    uint8_t *buf = malloc(size ? size : 1), got[32];
    uint64_t at = 0;
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < nr; i++) {
        ck_assert_uint_le(at + r[i].length, size);
        ck_assert_int_eq(pread(s->fd, buf + at, r[i].length, (off_t)r[i].offset),
                         (ssize_t)r[i].length);
        at += r[i].length;
    }
    ck_assert_uint_eq(at, size);
    psdb__sha256(buf, size, got);
    free(buf);
    ck_assert_msg(memcmp(got, sha256, 32) == 0, "value of %llu bytes: ranges do not hold it",
                  (unsigned long long)size);
    for (size_t i = 0; i < NUM_VALUES; i++)
        if (memcmp(s->sha[i], sha256, 32) == 0)
            s->matched[i]++;
    s->n++;
    return 0;
}

static char *write_psdb(const char *dir, seen *s)
{
    char *path = tu_path(dir, "v.psdb");
    psdb_app_identity id = {.desc = {.name = "Map", .version = 1}};
    psdb_target t = {.family = "contoso-gfx9", .abi_version = 3};
    psdb_writer *w = NULL;
    ck_assert_hr(psdb_writer_create(path, &id, &t, &w), PSDB_S_OK);
    unsigned x = 12345;
    for (size_t i = 0; i < NUM_VALUES; i++) {
        uint8_t *buf = malloc(k_sizes[i]);
        for (size_t j = 0; j < k_sizes[i]; j++) {
            x = x * 1103515245u + 12345u;
            buf[j] = (uint8_t)(x >> 16);
        }
        psdb__sha256(buf, k_sizes[i], s->sha[i]);
        char key[32];
        snprintf(key, sizeof(key), "k%02zu", i);
        ck_assert_hr(
            psdb_writer_put_value(w, key, strlen(key), PSDB_VALUE_OBJECT_CODE, buf, k_sizes[i]),
            PSDB_S_OK);
        free(buf);
    }
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    return path;
}

START_TEST(test_valuemap__ranges_hold_exactly_each_value_of_any_size)
{
    char *dir = tu_mkdtemp();
    seen s = {0};
    char *path = write_psdb(dir, &s);
    s.fd = open(path, O_RDONLY);
    ck_assert_int_ge(s.fd, 0);
    ck_assert_hr(psdb__value_map_foreach(path, on_value, &s), PSDB_S_OK);
    ck_assert_uint_eq(s.n, NUM_VALUES);
    for (size_t i = 0; i < NUM_VALUES; i++)
        ck_assert_msg(s.matched[i] == 1, "value of %zu bytes seen %d times", k_sizes[i],
                      s.matched[i]);
    close(s.fd);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

static int count_only(const uint8_t sha256[32], uint64_t size, const psdb__byte_range *r, size_t nr,
                      void *ctx)
{
    (void)sha256;
    (void)size;
    (void)r;
    (void)nr;
    (*(size_t *)ctx)++;
    return 0;
}

START_TEST(test_valuemap__damaged_files_refused_never_read_out_of_bounds)
{
    char *dir = tu_mkdtemp();
    seen s = {0};
    char *path = write_psdb(dir, &s);
    size_t len = 0;
    uint8_t *orig = (uint8_t *)tu_read_file(path, &len);
    ck_assert_ptr_nonnull(orig);
    char *bad = tu_path(dir, "bad.psdb");
    /* Every single byte of the first pages flipped, and the file cut at page boundaries: each
     * walk ends in S_OK or CACHE_CORRUPT (ASan checks the reads), never anything else. */
    size_t limit = len < 3 * 4096 ? len : 3 * 4096;
    for (size_t i = 0; i < limit; i += 29) {
        orig[i] ^= 0xff;
        ck_assert_int_eq(tu_write_file(bad, orig, len), 0);
        orig[i] ^= 0xff;
        size_t n = 0;
        psdb_hr hr = psdb__value_map_foreach(bad, count_only, &n);
        ck_assert_msg(hr == PSDB_S_OK || hr == PSDB_E_CACHE_CORRUPT, "flip at %zu: %s", i,
                      psdb_hr_str(hr));
    }
    for (size_t cut = 0; cut < len; cut += 4096 * 3) {
        ck_assert_int_eq(tu_write_file(bad, orig, cut), 0);
        size_t n = 0;
        psdb_hr hr = psdb__value_map_foreach(bad, count_only, &n);
        ck_assert_msg(hr == PSDB_E_CACHE_CORRUPT, "cut at %zu: %s", cut, psdb_hr_str(hr));
    }
    ck_assert_hr(psdb__value_map_foreach(NULL, count_only, NULL), PSDB_E_INVALIDARG);
    free(orig);
    free(bad);
    free(path);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("valuemap");
    TCase *tc = tcase_create("valuemap");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_valuemap__ranges_hold_exactly_each_value_of_any_size);
    tcase_add_test(tc, test_valuemap__damaged_files_refused_never_read_out_of_bounds);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
