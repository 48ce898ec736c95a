/* sodb_vulkan_test.c - the SODB kinds of the Vulkan layer: accepted with their magic only. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

typedef struct kinds {
    uint32_t kind[8];
    size_t n;
} kinds;

static int collect(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                   size_t size, void *ctx)
{
    (void)key;
    (void)version;
    (void)desc;
    (void)size;
    kinds *k = ctx;
    if (k->n < 8)
        k->kind[k->n++] = kind;
    return 0;
}

/* A minimal description: magic, version 1, reserved 0 (the container checks the magic only). */
static void vk_desc(uint8_t out[16], const char *magic, uint8_t tag)
{
    memset(out, 0, 16);
    memcpy(out, magic, 4);
    out[4] = 1;
    out[12] = tag;
}

START_TEST(test_sodb_vulkan__kinds_recorded_and_read_back)
{
    char *dir = tu_mkdtemp();
    char *path = tu_path(dir, "vk.sodb");
    psdb_app_identity id = {{"vkdemo", "psdb-vkdemo", PSDB_VERSION(1, 2, 3, 0), NULL, 0}, {0}};
    psdb_sodb_writer *w = NULL;
    psdb_sodb *s = NULL;
    uint8_t cp[16], gp[16];
    kinds k = {{0}, 0};
    vk_desc(cp, "VKCP", 1);
    vk_desc(gp, "VKGP", 2);
    ck_assert_hr(psdb_sodb_writer_open(path, &id, &w), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_VK_COMPUTE, 1, cp, sizeof(cp)), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_VK_GRAPHICS, 1, gp, sizeof(gp)), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_VK_GRAPHICS, 1, gp, sizeof(gp)), PSDB_S_FALSE);
    psdb_sodb_writer_release(w);
    ck_assert_hr(psdb_sodb_open(path, &s), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_foreach(s, collect, &k), PSDB_S_OK);
    ck_assert_uint_eq(k.n, 2);
    ck_assert_uint_eq(k.kind[0], PSDB_SODB_VK_COMPUTE);
    ck_assert_uint_eq(k.kind[1], PSDB_SODB_VK_GRAPHICS);
    psdb_sodb_release(s);
    tu_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

START_TEST(test_sodb_vulkan__kind_must_match_magic)
{
    char *dir = tu_mkdtemp();
    char *path = tu_path(dir, "vk.sodb");
    psdb_app_identity id = {{"vkdemo", "psdb-vkdemo", PSDB_VERSION(1, 0, 0, 0), NULL, 0}, {0}};
    psdb_sodb_writer *w = NULL;
    uint8_t cp[16], gp[16], bad[16];
    vk_desc(cp, "VKCP", 1);
    vk_desc(gp, "VKGP", 2);
    vk_desc(bad, "VKXX", 3);
    ck_assert_hr(psdb_sodb_writer_open(path, &id, &w), PSDB_S_OK);
    /* Each kind with the other's magic, an unknown magic, kind 0 and the next unassigned kind. */
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_VK_COMPUTE, 1, gp, sizeof(gp)),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_VK_GRAPHICS, 1, cp, sizeof(cp)),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_VK_GRAPHICS, 1, bad, sizeof(bad)),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_writer_add(w, 0, 1, bad, sizeof(bad)), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_VK_GRAPHICS + 1, 1, gp, sizeof(gp)),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_COMPUTE, 1, cp, sizeof(cp)), PSDB_E_INVALIDARG);
    /* Too short to hold a magic. */
    ck_assert_hr(psdb_sodb_writer_add(w, PSDB_SODB_VK_COMPUTE, 1, cp, 3), PSDB_E_INVALIDARG);
    psdb_sodb_writer_release(w);
    tu_rmtree(dir);
    free(path);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sodb_vulkan");
    TCase *tc = tcase_create("sodb_vulkan");
    tcase_add_test(tc, test_sodb_vulkan__kinds_recorded_and_read_back);
    tcase_add_test(tc, test_sodb_vulkan__kind_must_match_magic);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
